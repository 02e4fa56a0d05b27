/* ONNX import: the op registry. One row per op and range of model opsets
 * in which the op's meaning did not change; the importer picks the row of
 * the model's opset, and docs/onnx.md is generated from these rows
 * (tests/onnx/test_onnx_doc.c). Sorted by op, then opset. */
#define OARI_ONNX_PROTO
#include "onnx_internal.h"
#include <stdio.h>
#include <string.h>

#define ROW(name, since, until, fn, limits) {name, since, until, oari_onnx_conv_##fn, limits}

const oari_onnx_op oari_onnx_ops[] = {
    ROW("Abs", 6, 17, unary, ""),
    ROW("Acos", 7, 17, unary, ""),
    ROW("Acosh", 9, 17, unary, "as log(x + sqrt(x^2 - 1))"),
    ROW("Add", 7, 17, binary, ""),
    ROW("And", 7, 17, logical, ""),
    ROW("ArgMax", 1, 17, argmax, ""),
    ROW("ArgMin", 1, 17, argmax, ""),
    ROW("Asin", 7, 17, unary, ""),
    ROW("Asinh", 9, 17, unary, "as log(x + sqrt(x^2 + 1))"),
    ROW("Atan", 7, 17, unary, ""),
    ROW("Atanh", 9, 17, unary, "as log((1 + x) / (1 - x)) / 2"),
    ROW("AveragePool", 7, 17, pool, "1-D and 2-D; no dilations"),
    ROW("BatchNormalization", 7, 17, batch_norm, "training_mode: batch statistics and running-stat outputs, no saved mean/var outputs"),
    ROW("Cast", 6, 17, cast, "no string, int8, int16, uint16..uint64 targets"),
    ROW("CastLike", 15, 17, cast_like, "as Cast"),
    ROW("Ceil", 6, 17, unary, ""),
    ROW("Celu", 12, 17, celu, ""),
    ROW("Clip", 6, 17, clip, "min/max attributes before opset 11, inputs from 11"),
    ROW("Compress", 9, 17, compress, "the condition must be a constant"),
    ROW("Concat", 4, 17, concat, ""),
    ROW("Constant", 1, 17, constant, "no sparse_value, no strings"),
    ROW("ConstantOfShape", 9, 17, constant_of_shape, "the shape must be a constant"),
    ROW("Conv", 1, 17, conv, "1-D and 2-D"),
    ROW("ConvTranspose", 1, 17, conv_transpose, "1-D and 2-D"),
    ROW("Cos", 7, 17, unary, ""),
    ROW("Cosh", 9, 17, unary, ""),
    ROW("CumSum", 11, 17, cumsum, "the axis must be a constant"),
    ROW("DepthToSpace", 1, 17, depth_to_space, "4-D"),
    ROW("Div", 7, 17, div, "integer division truncates"),
    ROW("Dropout", 7, 17, dropout, "inference only (training_mode with ratio > 0 is refused: random)"),
    ROW("Einsum", 12, 17, einsum, "what oar_einsum parses"),
    ROW("Elu", 6, 17, elu, ""),
    ROW("Equal", 7, 17, compare, ""),
    ROW("Erf", 9, 17, unary, ""),
    ROW("Exp", 6, 17, unary, ""),
    ROW("Expand", 8, 17, expand, "the shape must be a constant"),
    ROW("EyeLike", 9, 17, eye_like, ""),
    ROW("Flatten", 1, 17, flatten, ""),
    ROW("Floor", 6, 17, unary, ""),
    ROW("Gather", 1, 17, gather, ""),
    ROW("GatherElements", 11, 17, gather_elements, ""),
    ROW("Gemm", 7, 17, gemm, ""),
    ROW("GlobalAveragePool", 1, 17, global_pool, ""),
    ROW("GlobalMaxPool", 1, 17, global_pool, ""),
    ROW("Greater", 7, 17, compare, ""),
    ROW("GreaterOrEqual", 12, 17, compare, ""),
    ROW("HardSigmoid", 6, 17, hard_sigmoid, ""),
    ROW("HardSwish", 14, 17, hard_swish, ""),
    ROW("Hardmax", 1, 12, softmax_old, "over the 2-D flattening at axis"),
    ROW("Hardmax", 13, 17, softmax, ""),
    ROW("Identity", 1, 17, identity, "tensors only (no sequences, optionals)"),
    ROW("InstanceNormalization", 6, 17, instance_norm, ""),
    ROW("IsInf", 10, 17, isinf, ""),
    ROW("IsNaN", 9, 17, unary, ""),
    ROW("LRN", 1, 17, lrn, ""),
    ROW("LayerNormalization", 17, 17, layer_norm, "stash_type ignored (computed in the input's dtype)"),
    ROW("LeakyRelu", 6, 17, leaky_relu, ""),
    ROW("Less", 7, 17, compare, ""),
    ROW("LessOrEqual", 12, 17, compare, ""),
    ROW("Log", 6, 17, unary, ""),
    ROW("LogSoftmax", 1, 12, softmax_old, "over the 2-D flattening at axis"),
    ROW("LogSoftmax", 13, 17, softmax, ""),
    ROW("MatMul", 1, 17, matmul, ""),
    ROW("Max", 8, 17, variadic, ""),
    ROW("MaxPool", 1, 17, pool, "1-D and 2-D; storage_order 0; Indices only with symmetric pads"),
    ROW("Mean", 8, 17, variadic, ""),
    ROW("MeanVarianceNormalization", 9, 17, mvn, ""),
    ROW("Min", 8, 17, variadic, ""),
    ROW("Mod", 10, 17, mod, "fmod=0 needs integers"),
    ROW("Mul", 7, 17, binary, ""),
    ROW("Neg", 6, 17, unary, ""),
    ROW("NegativeLogLikelihoodLoss", 12, 17, nll_loss, ""),
    ROW("Not", 1, 17, unary, ""),
    ROW("OneHot", 9, 17, one_hot, "depth must be a constant"),
    ROW("Or", 7, 17, logical, ""),
    ROW("PRelu", 7, 17, prelu, ""),
    ROW("Pad", 2, 17, pad, "pads (and constant_value) must be constants; no negative pads, no axes input"),
    ROW("Pow", 7, 17, pow, ""),
    ROW("Range", 11, 17, range, "start, limit, delta must be constants"),
    ROW("Reciprocal", 6, 17, unary, ""),
    ROW("ReduceL1", 1, 17, reduce, ""),
    ROW("ReduceL2", 1, 17, reduce, ""),
    ROW("ReduceLogSum", 1, 17, reduce, ""),
    ROW("ReduceLogSumExp", 1, 17, reduce, ""),
    ROW("ReduceMax", 1, 17, reduce, ""),
    ROW("ReduceMean", 1, 17, reduce, ""),
    ROW("ReduceMin", 1, 17, reduce, ""),
    ROW("ReduceProd", 1, 17, reduce, ""),
    ROW("ReduceSum", 1, 12, reduce, "axes attribute"),
    ROW("ReduceSum", 13, 17, reduce_axes_input, "axes input, must be a constant"),
    ROW("ReduceSumSquare", 1, 17, reduce, ""),
    ROW("Relu", 6, 17, unary, ""),
    ROW("Reshape", 5, 17, reshape, "the shape must be a constant"),
    ROW("Round", 11, 17, unary, ""),
    ROW("Scatter", 9, 10, scatter_elements, ""),
    ROW("ScatterElements", 11, 17, scatter_elements, "reduction none or add"),
    ROW("Selu", 6, 17, selu, ""),
    ROW("Shape", 1, 17, shape, "static input shapes"),
    ROW("Shrink", 9, 17, shrink, ""),
    ROW("Sigmoid", 6, 17, unary, ""),
    ROW("Sign", 9, 17, unary, ""),
    ROW("Sin", 7, 17, unary, ""),
    ROW("Sinh", 9, 17, unary, ""),
    ROW("Size", 1, 17, size, "static input shapes"),
    ROW("Slice", 1, 9, slice_old, ""),
    ROW("Slice", 10, 17, slice, "starts, ends, axes, steps must be constants"),
    ROW("Softmax", 1, 12, softmax_old, "over the 2-D flattening at axis"),
    ROW("Softmax", 13, 17, softmax, ""),
    ROW("SoftmaxCrossEntropyLoss", 12, 17, sce_loss, ""),
    ROW("Softplus", 1, 17, softplus, ""),
    ROW("Softsign", 1, 17, unary, ""),
    ROW("SpaceToDepth", 1, 17, space_to_depth, "4-D"),
    ROW("Split", 2, 17, split, "split sizes must be constants"),
    ROW("Sqrt", 6, 17, unary, ""),
    ROW("Squeeze", 1, 17, squeeze, "axes must be constants"),
    ROW("Sub", 7, 17, binary, ""),
    ROW("Sum", 8, 17, variadic, ""),
    ROW("Tan", 7, 17, unary, ""),
    ROW("Tanh", 6, 17, unary, ""),
    ROW("ThresholdedRelu", 10, 17, thresholded_relu, ""),
    ROW("Tile", 6, 17, tile, "repeats must be constants"),
    ROW("TopK", 1, 17, topk, "K must be a constant; always sorted"),
    ROW("Transpose", 1, 17, transpose, ""),
    ROW("Trilu", 14, 17, trilu, "k must be a constant"),
    ROW("Unsqueeze", 1, 17, unsqueeze, "axes must be constants"),
    ROW("Where", 9, 17, where, ""),
    ROW("Xor", 7, 17, logical, ""),
};
const int oari_onnx_n_ops = (int)(sizeof oari_onnx_ops / sizeof *oari_onnx_ops);

const oari_onnx_op *oari_onnx_find_op(const char *op, int64_t opset) {
    char known[160] = "";
    size_t len = 0;
    for (int i = 0; i < oari_onnx_n_ops; i++) {
        const oari_onnx_op *r = &oari_onnx_ops[i];
        if (strcmp(r->name, op)) continue;
        if (opset >= r->since && opset <= r->until) return r;
        if (len < sizeof known - 24)
            len += (size_t)snprintf(known + len, sizeof known - len, "%s%d..%d", len ? ", " : "", r->since, r->until);
    }
    if (len)
        oari_error(OAR_ERR_UNSUPPORTED, "op %s is not supported at opset %lld (supported at opsets %s)", op,
                   (long long)opset, known);
    else
        oari_error(OAR_ERR_UNSUPPORTED, "op is not supported");
    return NULL;
}

/* ONNX export: the table. One row per oar op and range of opsets in which
 * its mapping does not change: a direct row (one ONNX node, the inputs and
 * outputs in order, no attributes) is pure data, an emitter row names its
 * function (onnx_export_<family>.c), and a row with no ONNX op says why the
 * op is refused. docs/onnx_export.md's op table is generated from these
 * rows (tests/onnx/test_onnx_export_doc.c), which also checks that every
 * elementwise op has one.
 *
 * The elementwise ops' rows come from the ONNX column of
 * src/ops/elementwise.def, pulled in below; every row's mapping takes one of
 * the forms that column uses:
 *   ONNX(OpType, since)   direct, from opset since to the last
 *   ONNX_EMIT(name)       the emitter oari_onnx_emit_<name>, with the ONNX
 *                         op, opsets, flags and note of EMIT_<name> below
 *   ONNX_NONE("why")      no mapping, at any opset
 * and, for rows that need their own range or pass the ONNX op type to a
 * shared emitter:
 *   EMIT("OpType", since, until, name, flags, "note") */
#include "onnx_export_internal.h"
#include <stdio.h>
#include <string.h>

#define XMIN OARI_ONNX_XMIN
#define XMAX OARI_ONNX_XMAX
#define OUTS OARI_XF_OUTPUTS
#define SYMS OARI_XF_SYM_ATTRS

#define ONNX(type, since) #type, since, XMAX, NULL, 0, ""
#define ONNX_EMIT(name) EMIT_##name
#define ONNX_NONE(why) NULL, XMIN, XMAX, NULL, 0, why
#define EMIT(type, since, until, name, flags, note)                                                \
    type, since, until, oari_onnx_emit_##name, flags, note
#define ROW(op, mapping) {OARI_OP_##op, mapping}

/* The emitters of elementwise ops: what ONNX_EMIT(name) stands for. */
#define EMIT_ne EMIT("Equal", XMIN, XMAX, ne, 0, "Not(Equal(a, b))")
#define EMIT_exp2 EMIT("Pow", XMIN, XMAX, exp2, 0, "Pow(2, x)")
#define EMIT_log2 EMIT("Log", XMIN, XMAX, log2, 0, "Log(x) / ln 2")
#define EMIT_log1p EMIT("Log", XMIN, XMAX, log1p, 0, "Log(x + 1)")
#define EMIT_expm1 EMIT("Exp", XMIN, XMAX, expm1, 0, "Exp(x) - 1")
#define EMIT_rsqrt EMIT("Sqrt", XMIN, XMAX, rsqrt, 0, "Reciprocal(Sqrt(x))")
#define EMIT_square EMIT("Mul", XMIN, XMAX, square, 0, "Mul(x, x)")
#define EMIT_trunc EMIT("Floor", XMIN, XMAX, trunc, 0, "Sign(x) * Floor(Abs(x))")
#define EMIT_silu EMIT("Sigmoid", XMIN, XMAX, silu, 0, "Mul(x, Sigmoid(x))")
#define EMIT_gelu                                                                                  \
    EMIT("Erf", XMIN, XMAX, gelu, 0,                                                               \
         "erf form: 0.5 x (1 + Erf(x / sqrt 2)); tanh form: 0.5 x (1 + Tanh(sqrt(2 / pi) "         \
         "(x + 0.044715 x^3)))")
#define EMIT_relu6 EMIT("Clip", XMIN, XMAX, relu6, 0, "Clip(x, 0, 6)")
#define EMIT_clamp                                                                                 \
    EMIT("Clip", XMIN, XMAX, clamp, 0, "min and max as inputs; a NaN bound (none) is omitted")
#define EMIT_leaky_relu EMIT("LeakyRelu", XMIN, XMAX, leaky_relu, 0, "alpha: the negative slope")
#define EMIT_elu EMIT("Elu", XMIN, XMAX, elu, 0, "alpha")
#define EMIT_softplus                                                                              \
    EMIT("Softplus", XMIN, XMAX, softplus, 0,                                                      \
         "Softplus(beta x) / beta (beta 1: Softplus(x)); oar's linear branch above the "           \
         "threshold differs from it by < exp(-threshold)")
#define EMIT_floor_div                                                                             \
    EMIT("Div", XMIN, XMAX, floor_div, 0,                                                          \
         "floats: Floor(Div(a, b)); integers are refused (no ONNX equivalent)")
#define EMIT_remainder                                                                             \
    EMIT("Mod", XMIN, XMAX, remainder, 0,                                                          \
         "floats: a - Floor(a / b) b (Python's); integers: Mod(fmod=0)")
#define EMIT_atan2                                                                                 \
    EMIT("Atan", XMIN, XMAX, atan2, 0,                                                             \
         "floats: Atan(y / x) + Where(x < 0, Where(y >= 0, pi, -pi), 0); 0 where both are 0")
#define EMIT_cast EMIT("Cast", XMIN, XMAX, cast, 0, "to: the output's dtype")

/* Reasons shared by rows with no mapping. */
#define COMPLEX "complex: ONNX's arithmetic ops take no complex tensors; not mapped"
#define FFT "complex: ONNX's DFT (opset 17) works on real [..., 2] pairs; not mapped"
#define GRAD_HELPER "a gradient helper: not mapped"
#define IN_PLACE "in place: an ONNX graph does not write its tensors"
#define RANDOM "random: oar's generator has no ONNX equivalent"

const oari_onnx_xrow oari_onnx_xrows[] = {
    /* ---- elementwise: each row of src/ops/elementwise.def brings its ONNX column ---- */
#define EW_UNARY(name, rule, cpu, gen, api, forward, alt, gradient, saved, test, onnx, doc) {OARI_OP_##name, onnx},
#define EW_BINARY(name, rule, cpu, gen, api, forward, gradient, saved, test, onnx, doc) {OARI_OP_##name, onnx},
#define EW_TERNARY(name, rule, cpu, gen, api, forward, gradient, saved, test, onnx, doc) {OARI_OP_##name, onnx},
#define EW_NONE(name, why)
#include "../ops/elementwise.def"
#undef EW_UNARY
#undef EW_BINARY
#undef EW_TERNARY
#undef EW_NONE
    /* ---- elementwise without a formula, and ops outside any kernel ---- */
    ROW(cast, ONNX_EMIT(cast)),
    ROW(contiguous, ONNX(Identity, XMIN)),
    ROW(fill, ONNX_NONE(IN_PLACE)),
    ROW(copy, ONNX_NONE(IN_PLACE)),
    ROW(add_scaled, ONNX_NONE("in place (an optimizer step): an ONNX graph does not write its "
                              "tensors")),
    ROW(adam_update, ONNX_NONE("an optimizer step (a training graph's update of its own weights)")),
    ROW(gru_layer_train, ONNX_NONE("training only: a GRU's rnn_layer that keeps its gates; export the forward graph")),
    ROW(lstm_layer_train, ONNX_NONE("training only: a graph backward's form of lstm_layer; export the forward graph")),
    ROW(lstm_layer_backward, ONNX_NONE("a gradient (the first-order step of an LSTM's backward)")),
    ROW(uniform, ONNX_NONE("in place, " RANDOM)),
    ROW(normal, ONNX_NONE("in place, " RANDOM)),
    ROW(randint, ONNX_NONE("in place, " RANDOM)),
    ROW(bernoulli, ONNX_NONE(RANDOM)),
    ROW(to_device, ONNX_NONE("a move between devices: an ONNX model has no devices")),
    ROW(dist_reshard, ONNX_NONE("distributed: a move between the devices of a mesh")),
    /* ---- reductions, softmax ---- */
    ROW(sum, EMIT("ReduceSum", XMIN, XMAX, reduce, 0,
                  "axes as an input (opset 13), keepdims; no dims: Identity")),
    ROW(prod, EMIT("ReduceProd", XMIN, XMAX, reduce, 0,
                   "axes attribute (until opset 17), keepdims; no dims: Identity")),
    ROW(amax, EMIT("ReduceMax", XMIN, XMAX, reduce, 0,
                   "axes attribute (until opset 17), keepdims; no dims: Identity")),
    ROW(amin, EMIT("ReduceMin", XMIN, XMAX, reduce, 0,
                   "axes attribute (until opset 17), keepdims; no dims: Identity")),
    ROW(all, EMIT("ReduceMin", XMIN, XMAX, all_any, 0,
                  "Cast(x != 0, int32), ReduceMin, Cast(bool)")),
    ROW(any, EMIT("ReduceMax", XMIN, XMAX, all_any, 0,
                  "Cast(x != 0, int32), ReduceMax, Cast(bool)")),
    ROW(argmax, EMIT("ArgMax", XMIN, XMAX, arg, 0,
                     "axis, keepdims; over the flattened tensor: Reshape(-1) first")),
    ROW(argmin, EMIT("ArgMin", XMIN, XMAX, arg, 0,
                     "axis, keepdims; over the flattened tensor: Reshape(-1) first")),
    ROW(cumsum, EMIT("CumSum", XMIN, XMAX, cumsum, 0, "the axis as a 0-d input")),
    ROW(cumprod, ONNX_NONE("ONNX has no cumulative product")),
    ROW(size_of, EMIT("ReduceProd", XMIN, XMAX, size_of, 0,
                      "Shape, Gather of the dims, ReduceProd, Cast to the float dtype")),
    ROW(softmax, EMIT("Softmax", XMIN, XMAX, softmax, 0, "axis (opset 13 semantics: one axis)")),
    ROW(log_softmax, EMIT("LogSoftmax", XMIN, XMAX, softmax, 0,
                          "axis (opset 13 semantics: one axis)")),
    /* ---- index ---- */
    ROW(index_select, EMIT("Gather", XMIN, XMAX, gather, 0, "axis")),
    ROW(gather, EMIT("GatherElements", XMIN, XMAX, gather, 0, "axis")),
    ROW(scatter, EMIT("ScatterElements", XMIN, XMAX, scatter, 0,
                      "axis; a 0-d source is Expanded to the index's shape")),
    ROW(scatter_add, EMIT("ScatterElements", 16, XMAX, scatter, 0,
                          "reduction=add (opset 16); a 0-d source is Expanded")),
    ROW(index_add, EMIT("ScatterElements", 16, XMAX, index_add, 0,
                        "reduction=add (opset 16), the index reshaped along dim and Expanded to "
                        "the source")),
    ROW(one_hot, EMIT("OneHot", XMIN, XMAX, one_hot, 0,
                      "depth: the classes, values [0, 1] (int64), axis -1")),
    ROW(sort, EMIT("TopK", XMIN, XMAX, sort, OUTS,
                   "k = the dim's size (read at run time for a dynamic dim), largest = "
                   "descending; values and indices; ties keep the lower index first, as oar's "
                   "stable sort")),
    ROW(topk, EMIT("TopK", XMIN, XMAX, topk, OUTS, "axis, largest, sorted; values and indices")),
    ROW(matmul, ONNX(MatMul, XMIN)),
    /* ---- shape and movement ---- */
    ROW(view, EMIT("Reshape", XMIN, XMAX, view, SYMS,
                   "a dynamic dim equal to the input's is 0, one other -1, else "
                   "Shape/Gather/Concat; a static 0 dim uses allowzero=1 (opset >= 14)")),
    ROW(permute, EMIT("Transpose", XMIN, XMAX, permute, 0, "perm")),
    ROW(expand, EMIT("Expand", XMIN, XMAX, expand, SYMS,
                     "dims equal to the input's are 1; dynamic ones read at run time")),
    ROW(slice, EMIT("Slice", XMIN, XMAX, slice, SYMS,
                    "one axis; the end of a dynamic dim is INT64_MAX; no dynamic step")),
    ROW(flip, EMIT("Slice", XMIN, XMAX, flip, 0, "step -1 on each flipped dim")),
    ROW(roll, EMIT("Concat", XMIN, XMAX, roll, 0, "two Slices and a Concat per (static) dim")),
    ROW(tril, EMIT("Trilu", 14, XMAX, trilu, 0, "upper=0, k as a 0-d input")),
    ROW(triu, EMIT("Trilu", 14, XMAX, trilu, 0, "upper=1, k as a 0-d input")),
    ROW(diagonal, EMIT("Gather", XMIN, XMAX, diagonal, 0,
                       "Transpose (the two dims last), Reshape (flattened), Gather of the "
                       "diagonal's flat indices (the two dims static)")),
    ROW(concat, EMIT("Concat", XMIN, XMAX, concat, 0, "axis")),
    ROW(pad, EMIT("Pad", XMIN, XMAX, pad, 0,
                  "mode constant (value as an input) / reflect / edge; pads as an input")),
    ROW(slice_backward, ONNX_NONE(GRAD_HELPER)),
    ROW(diagonal_backward, ONNX_NONE(GRAD_HELPER)),
    ROW(pad_backward, ONNX_NONE(GRAD_HELPER)),
    /* ---- nn ---- */
    ROW(conv2d, EMIT("Conv", XMIN, XMAX, conv, 0, "2-D, or 1-D on [N, C, L]; pads symmetric")),
    ROW(conv_transpose2d, EMIT("ConvTranspose", XMIN, XMAX, conv, 0,
                               "2-D, or 1-D on [N, C, L]; pads symmetric")),
    ROW(conv3d, EMIT("Conv", XMIN, XMAX, conv, 0, "3-D; pads symmetric")),
    ROW(conv_transpose3d, EMIT("ConvTranspose", XMIN, XMAX, conv, 0, "3-D; pads symmetric")),
    ROW(max_pool2d, EMIT("MaxPool", XMIN, XMAX, pool, 0,
                         "the values (a used indices output is refused)")),
    ROW(avg_pool2d, EMIT("AveragePool", XMIN, XMAX, pool, 0, "ceil_mode, count_include_pad")),
    ROW(adaptive_avg_pool2d, EMIT("AveragePool", XMIN, XMAX, adaptive_avg_pool, 0,
                                  "to 1 x 1: GlobalAveragePool; by whole factors: AveragePool; "
                                  "else refused")),
    ROW(interpolate, EMIT("Resize", XMIN, XMAX, interpolate, SYMS,
                          "sizes as an input; nearest: asymmetric + floor; bilinear: linear + "
                          "pytorch_half_pixel or align_corners")),
    ROW(layer_norm, EMIT("ReduceMean", XMIN, 16, layer_norm_decomposed, OUTS,
                         "ReduceMean, Sub, Mul, Add, Sqrt, Reciprocal (and the weight and bias); "
                         "mean and rstd when used")),
    ROW(layer_norm, EMIT("LayerNormalization", 17, XMAX, layer_norm, OUTS,
                         "(missing weight: ones); decomposed as below 17 when mean/rstd are used "
                         "or a normalised dim is dynamic")),
    ROW(group_norm, EMIT("ReduceMean", XMIN, XMAX, group_norm, 0,
                         "Reshape [N, G, -1], the layer norm decomposition, Reshape back, scale "
                         "and shift")),
    ROW(batch_norm, EMIT("BatchNormalization", XMIN, XMAX, batch_norm, 0,
                         "eval mode (missing weight / bias: ones / zeros); training mode is "
                         "refused")),
    ROW(conv2d_weight_grad, ONNX_NONE(GRAD_HELPER)),
    ROW(conv3d_weight_grad, ONNX_NONE(GRAD_HELPER)),
    ROW(max_pool2d_backward, ONNX_NONE(GRAD_HELPER)),
    ROW(avg_pool2d_backward, ONNX_NONE(GRAD_HELPER)),
    ROW(adaptive_avg_pool2d_backward, ONNX_NONE(GRAD_HELPER)),
    ROW(interpolate_backward, ONNX_NONE(GRAD_HELPER)),
    ROW(batch_norm_backward, ONNX_NONE("the gradient of training-mode batch norm, which is refused")),
    ROW(layer_norm_backward, EMIT("ReduceMean", XMIN, XMAX, layer_norm_backward, OUTS,
                                  "decomposed: the composite gradient (ReduceMean over the normalised "
                                  "dims, ReduceSum over the leading ones, Mul, Sub)")),
    /* ---- fft, complex views ---- */
    ROW(fft_c2c, ONNX_NONE(FFT)),
    ROW(fft_r2c, ONNX_NONE(FFT)),
    ROW(fft_c2r, ONNX_NONE(FFT)),
    ROW(view_as_real, ONNX_NONE(COMPLEX)),
    ROW(view_as_complex, ONNX_NONE(COMPLEX)),
    /* ---- linalg through LAPACK ---- */
    ROW(linalg_solve, ONNX_NONE("ONNX has no linear solve or inverse op")),
    ROW(linalg_slogdet, ONNX_NONE("ONNX's Det gives det only, not slogdet's sign and log of abs(det) "
                                  "(oar_linalg_det is a composite over slogdet); not mapped")),
    ROW(linalg_cholesky, ONNX_NONE("ONNX has no Cholesky factorization op")),
    ROW(linalg_eigh, ONNX_NONE("ONNX has no eigendecomposition op")),
    ROW(linalg_qr, ONNX_NONE("ONNX has no QR factorization op")),
    ROW(linalg_svd, ONNX_NONE("ONNX has no singular value decomposition op")),
    /* ---- recurrent layers ---- */
    ROW(rnn_layer, EMIT("RNN", XMIN, XMAX, rnn, OUTS,
                        "RNN (tanh; relu: activations [Relu]) or GRU (linear_before_reset 1, "
                        "gates r, z, n reordered to z, r, h), one direction; W, R, B [1, ...] "
                        "with the biases concatenated; lengths as int32 sequence_lens; Y and "
                        "Y_h squeezed")),
    ROW(lstm_layer, EMIT("LSTM", XMIN, XMAX, rnn, OUTS,
                         "one direction; gates i, f, g, o reordered to i, o, f, c; W, R, B [1, "
                         "...] with the biases concatenated; lengths as int32 sequence_lens; Y, "
                         "Y_h and Y_c squeezed")),
    /* ---- quantization ---- */
    ROW(quantize, EMIT("QuantizeLinear", XMIN, XMAX, quantize, 0,
                       "float scale and zero point of the quantized dtype (constants written in those "
                       "dtypes, others cast), axis when per channel; x cast to float; PyTorch's x * (1 / scale) "
                       "(oar_quantize_per_tensor/_per_channel) becomes ONNX's x / scale, which can "
                       "round a tie the other way")),
    ROW(dequantize, EMIT("DequantizeLinear", XMIN, XMAX, dequantize, 0,
                         "float scale, zero point of x's dtype, axis when per channel")),
    ROW(fake_quantize, EMIT("QuantizeLinear", XMIN, XMAX, fake_quantize, 0,
                            "QuantizeLinear then DequantizeLinear; float32 x and the int8 or uint8 "
                            "range only")),
    ROW(qmatmul, EMIT("MatMulInteger", XMIN, XMAX, qmatmul, 0,
                      "a's zero point as a constant of a's dtype; b's none (0); int32 output. "
                      "Quantized input, int8 constant b, cast and scale after it (oar_graph_quantize's "
                      "form): DequantizeLinear of both into MatMul, the QDQ form, unless "
                      "integer_ops")),
    ROW(qconv2d, EMIT("ConvInteger", XMIN, XMAX, qconv2d, 0,
                      "x's zero point as a constant of x's dtype; w's none (0); strides, pads, "
                      "dilations, group; int32 output. In oar_graph_quantize's form: DequantizeLinear "
                      "of both into Conv, a constant bias added after as its bias, unless integer_ops")),
    /* ---- custom ops (include/oar/custom.h) ---- */
    ROW(custom, ONNX_NONE("a custom op: its kernel is the user's code, which an ONNX model cannot "
                          "carry")),
    /* ---- control nodes (graph only) ---- */
    {OARI_OP_COND, EMIT("If", XMIN, XMAX, control, OUTS | SYMS,
                        "a non-bool predicate through Cast; each branch reads the node's operands "
                        "and captures by their outer names")},
    {OARI_OP_WHILE, EMIT("Loop", XMIN, XMAX, control, OUTS | SYMS,
                         "no trip count: the cond sub-graph runs once before the Loop and again "
                         "at the end of the body on its results; captures are outer names; "
                         "max_iters is not written (an oar loop that would exceed it fails, the "
                         "ONNX one runs on)")},
};
const int oari_onnx_n_xrows = (int)(sizeof oari_onnx_xrows / sizeof *oari_onnx_xrows);

const char *oari_onnx_xop_name(oari_op op) {
    if (op == OARI_OP_COND || op == OARI_OP_WHILE) return oari_ctrl_defs[op - OARI_OP_COUNT].name;
    return oari_op_name(op);
}

/* Appends the opsets of XMIN..XMAX that op's mapped rows cover ("14..17",
 * "13, 15..17") to msg; "none" if no opset. */
static void supported(oari_op op, char *msg, size_t size) {
    bool on[XMAX + 2] = {false};
    for (int i = 0; i < oari_onnx_n_xrows; i++) {
        const oari_onnx_xrow *r = &oari_onnx_xrows[i];
        for (int o = XMIN; r->op == op && r->onnx && o <= XMAX; o++)
            on[o] = on[o] || (o >= r->since && o <= r->until);
    }
    size_t len = strlen(msg);
    bool any = false;
    for (int o = XMIN; o <= XMAX; o++) {
        if (!on[o] || (o > XMIN && on[o - 1])) continue;
        int end = o;
        while (end < XMAX && on[end + 1])
            end++;
        int k = end > o ? snprintf(msg + len, size - len, "%s%d..%d", any ? ", " : "", o, end)
                        : snprintf(msg + len, size - len, "%s%d", any ? ", " : "", o);
        len = k > 0 && (size_t)k < size - len ? len + (size_t)k : size - 1;
        any = true;
    }
    if (!any) snprintf(msg + len, size - len, "none");
}

const oari_onnx_xrow *oari_onnx_xfind(oari_op op, int opset, char *msg, size_t size) {
    const oari_onnx_xrow *none = NULL;
    bool known = false;
    for (int i = 0; i < oari_onnx_n_xrows; i++) {
        const oari_onnx_xrow *r = &oari_onnx_xrows[i];
        if (r->op != op) continue;
        known = true;
        if (opset < r->since || opset > r->until) continue;
        if (r->onnx) return r;
        none = r;
    }
    const char *name = oari_onnx_xop_name(op);
    if (!known) {
        snprintf(msg, size, "op '%s' has no ONNX mapping in the exporter", name);
    } else if (none) {
        snprintf(msg, size, "op '%s' has no ONNX mapping in the exporter: %s", name, none->note);
    } else {
        snprintf(msg, size, "op '%s' cannot be exported at opset %d (supported at opsets ", name,
                 opset);
        supported(op, msg, size);
        size_t len = strlen(msg);
        snprintf(msg + len, size - len, ")");
    }
    return NULL;
}

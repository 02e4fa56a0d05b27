/* ONNX import: an .onnx model file becomes an oar static graph.
 *
 *     oar_graph *g = oar_onnx_load("mlp.onnx");
 *     oar_predictor *p = oar_predictor_from_graph(g, NULL);
 *     oar_graph_free(g);
 *
 * The model is traced (include/oar/graph.h): the graph inputs that are not
 * initializers become symbolic inputs (a dim_param, or a dim with neither
 * value nor param, becomes a dynamic dim named by its param), initializers
 * and Constant nodes become constants, and each node calls the public oar
 * op, so every shape rule is oar's own. Outputs and inputs keep their ONNX
 * names, in graph order.
 *
 * Supported: about 150 ops of the default domain at opsets 1..18 (and the
 * ai.onnx.preview.training optimizers), each over the opsets in which its
 * meaning did not change; docs/onnx.md lists them (generated from the
 * importer's registry) with their limits.
 * Tensors: float, double, float16, bfloat16, int32, int64, uint8, bool,
 * complex64/128; int8, int16, uint16..uint64 and strings are refused. */
#ifndef OAR_ONNX_H
#define OAR_ONNX_H

#include <oar/graph.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Reads the ONNX model at path and returns a new graph (the caller frees it
 * with oar_graph_free). Initializers stored as external data are read from
 * the files their `location` names, relative to path's folder (never
 * outside it). NULL with oar_last_error() set on failure: the file or an
 * external data file cannot be read or is short (OAR_ERR_IO / _INVALID,
 * naming the tensor and file), it is not a valid ModelProto, an opset or
 * op outside the list above (the message names the node, its op and the
 * opset), an unsupported element type or attribute, or a shape error in a
 * node (named). */
OAR_API oar_graph *oar_onnx_load(const char *path);

/* As oar_onnx_load, from n bytes in memory (borrowed); a model with
 * external data is refused (there is no folder to read it from). */
OAR_API oar_graph *oar_onnx_load_buffer(const void *data, size_t n);

/* ==== ONNX export (onnxexport branch) ==========================================
 *
 *     oar_graph *g = oar_graph_load("demo-out/fashion-cnn");
 *     oar_onnx_export(g, "fashion-cnn.onnx", &(oar_onnx_export_options){.opset = 17});
 *
 * Writes a ModelProto (default domain, IR version 8) that onnx.checker
 * accepts and ONNX Runtime runs. Graph inputs and outputs keep their names,
 * dtypes and shapes; a dynamic dim becomes a dim_param named by the graph's
 * symbol ("N"; an output dim that is a multiple k of it: "k*N"). Constants
 * that nodes use become initializers (raw_data, little-endian) named by
 * their value names (a duplicate gets ".v<id>"); intermediate values are
 * named "/v<id>", helper tensors "/t<k>", nodes "<oar op><node>/<ONNX op>_<k>"
 * ("layer_norm7/ReduceMean_12"). A graph output that is an input,
 * a constant or another output's value is written through an Identity.
 *
 * Each live node becomes one ONNX node or a short chain: elementwise unary and
 * binary ops, comparisons, where, cast, clamp (Clip), sum/prod/amax/amin
 * (ReduceSum with axes as input, the others with an axes attribute, as opsets
 * 13..17 define them), all/any, argmax/argmin, cumsum, softmax and log_softmax
 * (opset 13 semantics, one axis), matmul, view (Reshape: a dynamic dim equal
 * to the input's becomes 0, one other -1, else the sizes are read at run time
 * with Shape/Gather/Concat), permute (Transpose), expand, slice, flip, roll,
 * diagonal (Transpose, Reshape, Gather), concat, pad, tril/triu (Trilu,
 * opset >= 14), index_select (Gather), gather (GatherElements),
 * scatter/scatter_add/index_add (ScatterElements; add needs opset >= 16),
 * one_hot, topk, sort (TopK over the whole dim), atan2 (Atan and Where),
 * conv2d and conv_transpose2d (also their 1-D form on [N, C, L]), max_pool2d
 * (the values; a used indices output is an error), avg_pool2d,
 * adaptive_avg_pool2d (to 1 x 1: GlobalAveragePool; by whole factors:
 * AveragePool), interpolate (Resize), layer_norm (LayerNormalization at opset
 * 17; decomposed into ReduceMean/Sub/Mul/Sqrt/Reciprocal at 13..16 or when its
 * mean/rstd outputs are used), group_norm (decomposed), batch_norm in eval
 * mode (BatchNormalization), and decompositions of gelu (both forms, with Erf
 * or Tanh), silu, relu6, rsqrt, square, log2, exp2, log1p, expm1, trunc,
 * softplus (beta; oar's linear branch above the threshold differs by less than
 * exp(-threshold)), floor_div and remainder (floats; integer remainder is
 * Mod). Run the inference passes first (oar_graph_optimize with
 * OAR_PASSES_INFERENCE) to drop dropout and fold batch norm. */

typedef struct oar_onnx_export_options {
    int opset; /* 13..17; 0 means 17 */
    /* false (the default): an int8 product as oar_graph_quantize writes it
     * (quantize, qmatmul or qconv2d, cast, scale) is written in the QDQ
     * form, DequantizeLinear -> MatMul/Conv <- DequantizeLinear(int8
     * weight), as ONNX Runtime's quantize_static writes models; other int8
     * products as MatMulInteger/ConvInteger. true: all of them as
     * MatMulInteger/ConvInteger (the operator form). */
    bool integer_ops;
} oar_onnx_export_options;

/* Writes g (borrowed, unchanged) as an ONNX model to path, through a
 * temporary name and a rename (a failure never leaves a half-written file
 * at path). opt may be NULL (opset 17). Returns 0, or an error status with
 * oar_last_error() set: g or path NULL (OAR_ERR_INVALID); an opset outside
 * 13..17 (OAR_ERR_UNSUPPORTED); a node with no ONNX mapping at that opset
 * (OAR_ERR_UNSUPPORTED; the message names the node index and its op, e.g.
 * "node 3 (cumprod): op 'cumprod' has no ONNX mapping", or the attribute or
 * output that stands in the way: a used max_pool2d indices output, a
 * training-mode batch norm, a dynamic dim ONNX cannot express); path not
 * writable (OAR_ERR_IO, naming the path); out of memory (OAR_ERR_NOMEM). */
OAR_API int oar_onnx_export(const oar_graph *g, const char *path, const oar_onnx_export_options *opt);
/* ==== end of ONNX export ======================================================= */
/* ---- import options and TensorProto files (onnxconf: the conformance
 * harness, tests/onnx/test_onnx_conformance.c) ------------------------------ */

typedef struct oar_onnx_options {
    /* optional (NULL: none): one entry per graph input that is not an
     * initializer, in the model's order (n_values of them). A non-NULL entry
     * (borrowed) gives that input a value: it becomes a constant and leaves
     * the graph's inputs, so nodes that need a value at import (a Reshape's
     * shape, Slice's starts, Expand's shape) can read it. */
    int n_values;
    oar_tensor *const *values;
    /* false (the default): the QDQ form ONNX Runtime's quantize_static
     * writes (DequantizeLinear of a uint8/int8 activation and of an int8
     * constant weight with zero points 0, into Conv, MatMul or Gemm) runs
     * on the int8 kernels (docs/quantization.md). true: such nodes run in
     * f32 on the dequantized values, as the model is written. */
    bool keep_qdq;
} oar_onnx_options;

/* As oar_onnx_load / oar_onnx_load_buffer with options (opt may be NULL).
 * Also fails if n_values is not the number of non-initializer inputs. */
OAR_API oar_graph *oar_onnx_load_with(const char *path, const oar_onnx_options *opt);
OAR_API oar_graph *oar_onnx_load_buffer_with(const void *data, size_t n, const oar_onnx_options *opt);

/* Reads a serialized TensorProto (an ONNX test's input_0.pb) as a new
 * tensor (pool rule, as oar_tensor_from_data). NULL with an error naming
 * the file and the problem: unreadable, not a TensorProto, an element type
 * oar lacks (int8, uint16..uint64, string), external (refused here) or
 * inconsistent data. */
OAR_API oar_tensor *oar_onnx_tensor_load(const char *path);
/* As oar_onnx_tensor_load, from n bytes in memory (borrowed). */
OAR_API oar_tensor *oar_onnx_tensor_load_buffer(const void *data, size_t n);

#ifdef __cplusplus
}
#endif

#endif

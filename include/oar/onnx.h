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
 * with oar_graph_free). NULL with oar_last_error() set on failure: the file
 * cannot be read (OAR_ERR_IO), it is not a valid ModelProto, an opset or
 * op outside the list above (the message names the node, its op and the
 * opset), an unsupported element type or attribute, or a shape error in a
 * node (named). */
OAR_API oar_graph *oar_onnx_load(const char *path);

/* As oar_onnx_load, from n bytes in memory (borrowed). */
OAR_API oar_graph *oar_onnx_load_buffer(const void *data, size_t n);

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
} oar_onnx_options;

/* As oar_onnx_load / oar_onnx_load_buffer with options (opt may be NULL).
 * Also fails if n_values is not the number of non-initializer inputs. */
OAR_API oar_graph *oar_onnx_load_with(const char *path, const oar_onnx_options *opt);
OAR_API oar_graph *oar_onnx_load_buffer_with(const void *data, size_t n, const oar_onnx_options *opt);

/* Reads a serialized TensorProto (an ONNX test's input_0.pb) as a new
 * tensor (pool rule, as oar_tensor_from_data). NULL with an error naming
 * the file and the problem: unreadable, not a TensorProto, an element type
 * oar lacks (int8, uint16..uint64, string), external or inconsistent data. */
OAR_API oar_tensor *oar_onnx_tensor_load(const char *path);
/* As oar_onnx_tensor_load, from n bytes in memory (borrowed). */
OAR_API oar_tensor *oar_onnx_tensor_load_buffer(const void *data, size_t n);

#ifdef __cplusplus
}
#endif

#endif

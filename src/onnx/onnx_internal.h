/* ONNX import internals: the op registry (one row per op and opset range,
 * read by the importer and by the generator of docs/onnx.md) and what an op
 * converter sees of its node. Only src/onnx/ includes the protobuf part. */
#ifndef OARI_ONNX_INTERNAL_H
#define OARI_ONNX_INTERNAL_H

#include "../core/core.h"
#include <oar/ops.h>

/* The opsets of the default domain the importer knows (ONNX 1.12's 17, and
 * 18: the reductions' axes become inputs, Pad gets axes, Split num_outputs). */
#define OARI_ONNX_MIN_OPSET 1
#define OARI_ONNX_MAX_OPSET 18
/* Inputs and outputs one node may have. */
#define OARI_ONNX_MAX_IO 32

typedef struct oari_onnx_node oari_onnx_node;
typedef int (*oari_onnx_convert_fn)(oari_onnx_node *nd);

/* One row: op `name` at model opsets since..until means one thing and maps
 * through fn; limits says what of it oar refuses ("" if nothing). */
typedef struct oari_onnx_op {
    const char *name;
    int since, until;
    oari_onnx_convert_fn fn;
    const char *limits;
} oari_onnx_op;

/* The registry (onnx_registry.c), sorted by name then opset. */
OARI_HIDDEN extern const oari_onnx_op oari_onnx_ops[];
OARI_HIDDEN extern const int oari_onnx_n_ops;
/* The domain other than the default one the importer knows; its rows are
 * named "<domain>:<op>" and versioned by that domain's opset. */
#define OARI_ONNX_TRAINING_DOMAIN "ai.onnx.preview.training"

/* The row for op at opset, or NULL with an error saying which opsets of
 * the op are known (or that the op is unknown). */
OARI_HIDDEN const oari_onnx_op *oari_onnx_find_op(const char *op, int64_t opset);

/* The default-domain opset of the model in data (-1 if none) and its node
 * op types, comma-separated, into ops (truncated to size; domains other
 * than the default prefix their op as "domain:Op"). 0, or an error if the
 * bytes are not a ModelProto. For the conformance harness's op subsets. */
OARI_HIDDEN int oari_onnx_model_ops(const void *data, size_t n, int64_t *opset, char *ops, size_t size);

#ifdef OARI_ONNX_PROTO /* the converters' side (needs onnx.pb-c.h) */
#include "onnx.pb-c.h"

struct oari_onnx_node {
    const Onnx__NodeProto *n;
    int64_t opset;        /* of the node's domain */
    bool static_shapes;  /* no dynamic dims: shapes may become any values */
    int n_in;             /* input slots, omitted optional ones NULL */
    oar_tensor *in[OARI_ONNX_MAX_IO];
    int n_out;            /* output slots the node names (possibly "") */
    oar_tensor *out[OARI_ONNX_MAX_IO];
    void *ctx;            /* the importer's, for sub-graphs */
};

/* Runs sub-graph g (an If branch, a Loop or Scan body) inline in the
 * node's scope: its inputs bound to in[0..n_in-1], outer names visible;
 * writes its n_out outputs (op results) to out. 0 or an error naming the
 * sub-graph's node. */
OARI_HIDDEN int oari_onnx_run_subgraph(oari_onnx_node *nd, const Onnx__GraphProto *g, int n_in,
                                       oar_tensor *const *in, int n_out, oar_tensor **out);

/* ---- symbolic sizes (onnx_sym.c) ------------------------------------------- */
/* What the entries of a small integer vector computed from a Shape stand
 * for: each a polynomial in the graph's symbols (sum of c * prod sym^e). */
#define OARI_ONNX_SYM_LEN 8
#define OARI_ONNX_SYM_TERMS 4
typedef struct { int64_t c; uint8_t e[8]; } oari_onnx_sterm; /* e: exponent per symbol (OARI_MAX_SYMS) */
typedef struct { int n; oari_onnx_sterm t[OARI_ONNX_SYM_TERMS]; } oari_onnx_sexpr; /* n < 0: unknown */
typedef struct { int rank, n; oari_onnx_sexpr v[OARI_ONNX_SYM_LEN]; } oari_onnx_svec; /* rank 0 or 1 */

/* Whether an entry of v depends on a symbol (or is unknown). */
OARI_HIDDEN bool oari_onnx_svec_dynamic(const oari_onnx_svec *v);
/* The shape of traced x (dims start..end-1), or its number of elements, as
 * polynomials; 1 if one depends on a symbol, else 0. */
OARI_HIDDEN int oari_onnx_sym_shape(oar_tensor *x, int64_t start, int64_t end, oari_onnx_svec *out);
OARI_HIDDEN int oari_onnx_sym_size(oar_tensor *x, oari_onnx_svec *out);
/* Whether op may compute on symbolic sizes (oari_onnx_sym_node). */
OARI_HIDDEN bool oari_onnx_sym_carries(const char *op);
/* Output 0 of node nd as polynomials, from its inputs' (sym[i], or NULL
 * for a concrete input): 1, or 0 where it cannot (the sizes are then
 * computed at run time). */
OARI_HIDDEN int oari_onnx_sym_node(const oari_onnx_node *nd, const oari_onnx_svec *const *sym, oari_onnx_svec *out);
/* v as a concrete tensor of dtype dt whose symbolic entries hold the
 * tracer's placeholder sizes (k * trace size) for a shape `what`; NULL
 * with an error naming the entry if one is not k * one symbol. */
OARI_HIDDEN oar_tensor *oari_onnx_sym_concrete(const oari_onnx_svec *v, oar_dtype dt, const char *what);
/* A concrete t as a value of the graph being traced (a constant), so that
 * ops on it become nodes: an Expand or ConstantOfShape to a dynamic shape
 * must be a node, not a constant of placeholder sizes. t itself when not
 * concrete or not tracing; NULL on failure. */
OARI_HIDDEN oar_tensor *oari_onnx_traced(oar_tensor *t);
/* Range whose limit is a symbolic size (start and delta constants; the
 * length a multiple of one dynamic dim): a node, not a constant. NULL with
 * an error otherwise. */
OARI_HIDDEN oar_tensor *oari_onnx_sym_range(const oari_onnx_node *nd, const oari_onnx_svec *const *sym);
/* Whether a size of shape[0..n-1] is a placeholder for a dynamic dim. */
OARI_HIDDEN bool oari_onnx_dynamic_shape(int n, const int64_t *shape);
/* An error if a dim of traced t is a product of dynamic dims (the graph
 * would read it as a multiple of one of them); else 0. */
OARI_HIDDEN int oari_onnx_sym_check(oar_tensor *t);
/* v computed at run time: size_of nodes on src[s] (dim src_dim[s] is symbol s). */
OARI_HIDDEN oar_tensor *oari_onnx_sym_runtime(const oari_onnx_svec *v, oar_dtype dt, oar_tensor *const *src,
                                              const int *src_dim);

/* ---- attributes (onnx_import.c) --------------------------------------------- */
OARI_HIDDEN const Onnx__AttributeProto *oari_onnx_attr(const oari_onnx_node *nd, const char *name);
OARI_HIDDEN int64_t oari_onnx_attr_i(const oari_onnx_node *nd, const char *name, int64_t def);
OARI_HIDDEN double oari_onnx_attr_f(const oari_onnx_node *nd, const char *name, double def);
/* True if the string attribute equals s (or is absent and def is s). */
OARI_HIDDEN bool oari_onnx_attr_s_is(const oari_onnx_node *nd, const char *name, const char *def, const char *s);
/* The ints attribute (at most max entries) into out: its length, -1 if
 * absent, or an error status (< -1) if longer than max. */
OARI_HIDDEN int oari_onnx_attr_ints(const oari_onnx_node *nd, const char *name, int64_t *out, int max);

/* ---- values ---------------------------------------------------------------- */
/* Input i must be present; an error naming it otherwise. */
OARI_HIDDEN int oari_onnx_need(const oari_onnx_node *nd, int n);
/* The integer values of input i (a concrete 0-d or 1-D tensor of at most
 * max entries) into out: the count, or a negative status with an error
 * (the input is computed at run time, or too long). */
OARI_HIDDEN int oari_onnx_input_ints(const oari_onnx_node *nd, int i, int64_t *out, int max);
/* The one value of concrete input i. */
OARI_HIDDEN int oari_onnx_input_double(const oari_onnx_node *nd, int i, double *out);
/* A concrete tensor of a TensorProto (typed fields or raw_data); NULL with
 * an error naming `what` and the tensor. */
OARI_HIDDEN oar_tensor *oari_onnx_tensor_of(const Onnx__TensorProto *tp, const char *what);
/* The oar dtype of an ONNX element type, or OAR_DTYPE_INVALID. */
OARI_HIDDEN oar_dtype oari_onnx_dtype(int32_t elem_type);
/* A 0-d concrete tensor of value v in dtype dt. */
OARI_HIDDEN oar_tensor *oari_onnx_scalar(double v, oar_dtype dt);
/* x's dims from..ndim-1 folded: [prod(< axis), prod(>= axis)]. */
OARI_HIDDEN oar_tensor *oari_onnx_flatten2d(oar_tensor *x, int64_t axis);
/* axis wrapped into [0, nd) (or [0, nd] with inclusive_end); an error
 * naming it if outside. */
OARI_HIDDEN int oari_onnx_axis(int64_t axis, int nd, bool inclusive_end, int64_t *out);

/* ---- converters (one per op family; see onnx_registry.c for the rows) ------ */
#define OARI_ONNX_CONVERTERS(X)                                                                        \
    X(unary) X(isinf) X(binary) X(div) X(pow) X(mod) X(compare) X(logical) X(variadic) X(where) X(clip)  \
    X(elu) X(selu) X(celu) X(leaky_relu) X(prelu) X(hard_sigmoid) X(hard_swish) X(thresholded_relu)      \
    X(shrink) X(softplus) X(cast) X(cast_like) X(identity) X(constant) X(reduce) X(reduce_axes_input)    \
    X(argmax) X(cumsum) X(matmul) X(gemm) X(einsum) X(conv) X(conv_transpose) X(pool) X(global_pool)     \
    X(batch_norm) X(instance_norm) X(layer_norm) X(lrn) X(mvn) X(softmax_old) X(softmax) X(dropout)      \
    X(nll_loss) X(sce_loss) X(reshape) X(flatten) X(transpose) X(squeeze) X(unsqueeze) X(concat)         \
    X(split) X(slice_old) X(slice) X(gather) X(gather_elements) X(scatter_elements) X(expand) X(tile)    \
    X(pad) X(shape) X(size) X(constant_of_shape) X(range) X(trilu) X(one_hot) X(eye_like)                \
    X(depth_to_space) X(space_to_depth) X(topk) X(compress) X(quantize) X(dequantize)                 \
    X(dynamic_quantize) X(window) X(rnn) X(resize) X(upsample)    \
    X(adagrad) X(momentum) X(adam) X(gather_nd) X(scatter_nd) X(reverse_sequence) X(max_unpool) X(dft)   \
    X(stft) X(conv_integer) X(matmul_integer) X(qlinear_matmul) X(qlinear_conv)         \
    X(grid_sample) X(if) X(loop) X(scan) X(det) X(tfidf) X(roi_align)                 \
    X(mel_weight_matrix)
#define OARI_ONNX_DECLARE(f) OARI_HIDDEN int oari_onnx_conv_##f(oari_onnx_node *nd);
OARI_ONNX_CONVERTERS(OARI_ONNX_DECLARE)
#undef OARI_ONNX_DECLARE

/* ---- the QDQ form (onnx_qdq_fold.c) ----------------------------------------- */
/* What a DequantizeLinear made an input of: q (NULL if the input is not a
 * DequantizeLinear's output), its scale, zero point (NULL: none) and axis. */
typedef struct {
    oar_tensor *q, *scale, *zp;
    int64_t axis;
} oari_onnx_dq;
/* Conv, MatMul or Gemm node nd whose inputs are the dequantized dq[i]
 * (one per input slot) on the int8 kernels: 1 with nd->out[0] set, 0 if
 * the node is not a pattern they run (nothing done), or an error. */
OARI_HIDDEN int oari_onnx_qdq_fold(oari_onnx_node *nd, const oari_onnx_dq *dq);
/* The attributes of a 2-D conv oar_qconv2d takes (strides, dilations,
 * group; pads equal at both ends; auto_pad NOTSET): true with them set,
 * false (no error) for any other conv. */
OARI_HIDDEN bool oari_onnx_qconv_attrs(oari_onnx_node *nd, int64_t st[2], int64_t pd[2], int64_t dl[2],
                                       int64_t *group);

/* Shorthands of the converters (nd is the node being converted): its op
 * type is s; input k must be present (else return the error); set output 0
 * and return (an error if y is NULL). */
#define OP_IS(s) (!strcmp(nd->n->op_type, (s)))
#define NEED(k)                                                                                          \
    do {                                                                                                 \
        int st_ = oari_onnx_need(nd, (k));                                                               \
        if (st_) return st_;                                                                             \
    } while (0)
#define RESULT(y)                                                                                        \
    do {                                                                                                 \
        nd->out[0] = (y);                                                                                \
        return nd->out[0] ? 0 : OAR_ERR_INVALID;                                                         \
    } while (0)
#endif

#endif

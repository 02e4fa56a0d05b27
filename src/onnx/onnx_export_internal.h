/* ONNX export internals: the export table (one row per oar op and range of
 * opsets, read by the exporter and by the generator of docs/onnx_export.md)
 * and, for src/onnx/ only, the export context, its protobuf builders and
 * the emitters. Files:
 *   onnx_export.c          the graph walk: a node through its row, the model
 *   onnx_export_table.c    the table and its lookup
 *   onnx_export_proto.c    arena, initializers, nodes, attributes, run-time sizes
 *   onnx_export_math.c     emitters: elementwise decompositions
 *   onnx_export_reduce.c   emitters: reductions, softmax, index ops
 *   onnx_export_shape.c    emitters: reshapes and data movement
 *   onnx_export_nn.c       emitters: conv, pooling, resize, norms
 *   onnx_export_rnn.c      emitters: recurrent layers (RNN, GRU, LSTM)
 *   onnx_export_quant.c    emitters: QuantizeLinear, DequantizeLinear
 *   onnx_export_qdq.c      int8 products rewritten in the QDQ form before export
 *   onnx_export_control.c  emitters: If and Loop */
#ifndef OARI_ONNX_EXPORT_INTERNAL_H
#define OARI_ONNX_EXPORT_INTERNAL_H

#include "../graph/ir.h"

/* The opsets of the default domain the exporter writes; 0 in the options
 * means the default. */
#define OARI_ONNX_XMIN 13
#define OARI_ONNX_XMAX 17
#define OARI_ONNX_XDEFAULT 17

typedef struct oari_xp oari_xp; /* the export context (below, src/onnx/ only) */
typedef struct oari_onnx_xrow oari_onnx_xrow;

/* What an emitter sees of the node it exports. */
typedef struct oari_xnode {
    const oari_gnode *n;
    const oari_onnx_xrow *row;  /* the row of n's op at the export's opset */
    const oari_gvalue *iv, *ov; /* input 0's and output 0's values (NULL: none) */
    const char *X, *X1, *X2;    /* the ONNX names of inputs 0..2 (NULL: absent) */
    const char *Y;              /* and of output 0 */
    const int64_t *a;           /* integer attributes */
    const double *f;            /* float attributes */
    oar_dtype dt;               /* input 0's dtype and rank */
    int rank;
} oari_xnode;

/* Writes e's node as ONNX nodes; returns the context's status. */
typedef int (*oari_onnx_emit_fn)(oari_xp *x, const oari_xnode *e);

enum {
    OARI_XF_OUTPUTS = 1u << 0,   /* the emitter writes the outputs past 0 (else using one fails) */
    OARI_XF_SYM_ATTRS = 1u << 1, /* integer attributes may follow a dynamic dim (else that fails) */
};

/* One row: oar op `op` at opsets since..until is written as ONNX op `onnx`
 * (for an emitter the main op type it writes); emit NULL is a direct
 * mapping: one node of type onnx, the oar node's inputs and outputs in
 * order, no attributes. onnx NULL: the op has no mapping and note says
 * why. note: for an emitter what it writes (docs/onnx_export.md), "" for a
 * direct row. A row may start below OARI_ONNX_XMIN (the first opset at
 * which the mapping holds); the exporter writes only XMIN..XMAX. */
struct oari_onnx_xrow {
    oari_op op; /* an op of ops.def, or OARI_OP_COND / OARI_OP_WHILE */
    const char *onnx;
    int since, until;
    oari_onnx_emit_fn emit;
    unsigned flags; /* OARI_XF_* */
    const char *note;
};

/* The table (onnx_export_table.c), in no particular order; an op's rows
 * do not overlap. */
OARI_HIDDEN extern const oari_onnx_xrow oari_onnx_xrows[];
OARI_HIDDEN extern const int oari_onnx_n_xrows;

/* The row of op at opset, or NULL with msg (size bytes) saying why: the op
 * has no row, its row says it has no mapping (and why), or the opset is
 * outside its rows (and which are supported). */
OARI_HIDDEN const oari_onnx_xrow *oari_onnx_xfind(oari_op op, int opset, char *msg, size_t size);
/* An op's name, control nodes ("cond", "while") included. */
OARI_HIDDEN const char *oari_onnx_xop_name(oari_op op);

/* A copy of g whose int8 products (quantize -> qmatmul/qconv2d -> cast ->
 * mul by a constant scale) are float products of dequantized operands, the
 * QDQ form (onnx_export_qdq.c); NULL on failure. */
OARI_HIDDEN oar_graph *oari_onnx_qdq_form(const oar_graph *g);

/* The emitters (one file per family; the rows name them). */
#define OARI_ONNX_EMITTERS(X)                                                                      \
    X(ne) X(exp2) X(log2) X(log1p) X(expm1) X(rsqrt) X(square) X(trunc) X(silu) X(gelu)            \
    X(relu6) X(clamp) X(leaky_relu) X(elu) X(softplus) X(floor_div) X(remainder) X(atan2) X(cast)  \
    X(reduce) X(size_of) X(all_any) X(arg) X(cumsum) X(softmax) X(gather) X(scatter)               \
    X(index_add) X(one_hot) X(sort) X(topk)                                                        \
    X(view) X(permute) X(expand) X(slice) X(flip) X(roll) X(trilu) X(diagonal) X(concat) X(pad)    \
    X(conv) X(pool) X(adaptive_avg_pool) X(interpolate) X(layer_norm_decomposed) X(layer_norm)     \
    X(batch_norm) X(group_norm) X(layer_norm_backward)                                             \
    X(rnn)                                                                                         \
    X(quantize) X(dequantize) X(fake_quantize)                                                     \
    X(qmatmul) X(qconv2d)                                                                          \
    X(control)
#define OARI_ONNX_EMIT_DECLARE(f)                                                                  \
    OARI_HIDDEN int oari_onnx_emit_##f(oari_xp *x, const oari_xnode *e);
OARI_ONNX_EMITTERS(OARI_ONNX_EMIT_DECLARE)
#undef OARI_ONNX_EMIT_DECLARE

#ifdef OARI_ONNX_PROTO /* the builders' side (needs onnx.pb-c.h) */
#include "onnx.pb-c.h"

/* A block of the export's arena. */
typedef union oari_xblk {
    struct {
        union oari_xblk *next;
        size_t n;
    } h;
    max_align_t align;
} oari_xblk;

struct oari_xp {
    const oar_graph *g;
    int opset;
    oari_xblk *mem;
    int st; /* first failure; every builder is a no-op once set */
    Onnx__NodeProto **nodes;
    size_t n_nodes, cap_nodes;
    Onnx__TensorProto **inits;
    size_t n_inits, cap_inits;
    const char **names;                    /* per graph value: its ONNX name */
    int *uses;                             /* per graph value: live uses */
    const char *sym_dim[OARI_MAX_SYMS];    /* [1] int64 holding symbol s's size, once made */
    int shape_in[OARI_MAX_SYMS];           /* graph inputs whose Shape was taken ... */
    const char *shape_name[OARI_MAX_SYMS]; /* ... and its name */
    int n_shapes;
    int n_tmp, n_onnx_nodes;
    int node; /* the oar node being exported (-1: none) */
};

/* ---- arena, failures (onnx_export_proto.c) ---------------------------------- */
/* n zeroed bytes freed with the arena; NULL (and x->st set) on failure. */
OARI_HIDDEN void *oari_xp_alloc(oari_xp *x, size_t n);
OARI_HIDDEN void oari_xp_free(oari_xp *x);
OARI_HIDDEN char *oari_xp_str(oari_xp *x, const char *fmt, ...) OARI_PRINTF(2, 3);
/* Sets x->st with a message naming the node being exported; returns the status. */
OARI_HIDDEN int oari_xp_fail(oari_xp *x, const char *fmt, ...) OARI_PRINTF(2, 3);

/* ---- types and initializers ---------------------------------------------------- */
/* The ONNX element type of dt (UNDEFINED if none). */
OARI_HIDDEN int oari_xp_type(oar_dtype dt);
/* An initializer `name` of dt and shape holding nbytes of data (contiguous,
 * host order = little-endian), copied, or referenced when copy is false
 * (data then outlives the export). Returns name, or NULL on failure. */
OARI_HIDDEN const char *oari_xp_init(oari_xp *x, const char *name, oar_dtype dt, int ndim,
                                     const int64_t *shape, const void *data, size_t nbytes,
                                     bool copy);
/* A fresh helper name ("/t<k>"). */
OARI_HIDDEN const char *oari_xp_tmp(oari_xp *x);
/* A 1-D int64 initializer of n values; a 0-d one. */
OARI_HIDDEN const char *oari_xp_i64(oari_xp *x, int n, const int64_t *v);
OARI_HIDDEN const char *oari_xp_i64_scalar(oari_xp *x, int64_t v);
/* A 0-d initializer of dtype dt holding v. */
OARI_HIDDEN const char *oari_xp_scalar(oari_xp *x, oar_dtype dt, double v);
/* An initializer of dtype dt (f32 or f64) and the given shape, every element v. */
OARI_HIDDEN const char *oari_xp_filled(oari_xp *x, oar_dtype dt, int ndim, const int64_t *shape,
                                       double v);
/* Takes from x->uses the uses of constants that the quantization emitters
 * write again in another dtype or shape (onnx_export_quant.c), so that
 * the originals are not written unless something else reads them. */
OARI_HIDDEN void oari_xp_quant_param_uses(oari_xp *x);
/* Graph value v (a constant) as an initializer named x->names[v]. */
OARI_HIDDEN int oari_xp_const(oari_xp *x, int v);

/* ---- nodes and attributes -------------------------------------------------------- */
/* Appends node `op` with n_in inputs ("" marks an omitted optional one) and
 * n_out outputs (NULL entries get fresh names), named "<oar op><oar node
 * index>/<ONNX op>_<k>". NULL once anything failed or an input is NULL (a
 * failed step before it). */
OARI_HIDDEN Onnx__NodeProto *oari_xp_node(oari_xp *x, const char *op, int n_in,
                                          const char *const *in, int n_out, const char *const *out);
/* The same with one output named out (NULL: a fresh name). */
OARI_HIDDEN Onnx__NodeProto *oari_xp_node1(oari_xp *x, const char *op, int n_in,
                                           const char *const *in, const char *out);
static inline const char *oari_xp_out0(Onnx__NodeProto *nd) { return nd ? nd->output[0] : NULL; }
OARI_HIDDEN void oari_xp_set_i(oari_xp *x, Onnx__NodeProto *nd, const char *name, int64_t v);
OARI_HIDDEN void oari_xp_set_f(oari_xp *x, Onnx__NodeProto *nd, const char *name, double v);
OARI_HIDDEN void oari_xp_set_s(oari_xp *x, Onnx__NodeProto *nd, const char *name, const char *s);
OARI_HIDDEN void oari_xp_set_ints(oari_xp *x, Onnx__NodeProto *nd, const char *name, int n,
                                  const int64_t *v);
OARI_HIDDEN void oari_xp_set_graph(oari_xp *x, Onnx__NodeProto *nd, const char *name,
                                   Onnx__GraphProto *gp);
/* A ValueInfo named `name` with the type and shape of value v of x->g. */
OARI_HIDDEN Onnx__ValueInfoProto *oari_xp_value_info(oari_xp *x, const char *name, int v);

/* ---- sizes (dynamic dims) ----------------------------------------------------------- */
/* A 1-D int64 tensor of n sizes: v[k], or imul[k] times symbol isym[k] where
 * isym[k] >= 0 (a Concat of constants and run-time sizes then). */
OARI_HIDDEN const char *oari_xp_sizes(oari_xp *x, int n, const int64_t *v, const int8_t *isym,
                                      const int32_t *imul);

/* ---- shared by emitter families ------------------------------------------------------ */
/* Reduce op `op` (ReduceSum, ReduceMean, ...) of in over n axes, keepdims
 * keep, into out (NULL: a fresh name) (onnx_export_reduce.c). */
OARI_HIDDEN const char *oari_xp_reduce(oari_xp *x, const char *op, const char *in, int n,
                                       const int64_t *axes, bool keep, const char *out);
/* The dims set in a reduction bitmask, ascending; their count. */
static inline int oari_xp_mask_axes(int64_t mask, int ndim, int64_t *axes) {
    int n = 0;
    for (int d = 0; d < ndim; d++)
        if (mask & ((int64_t)1 << d)) axes[n++] = d;
    return n;
}
/* Exports node ni of x->g (onnx_export.c; the control emitters run it on
 * the nodes of sub-graphs). */
OARI_HIDDEN int oari_xp_export_node(oari_xp *x, int ni);

/* One- and two-input nodes of one output (out NULL: a fresh name); their output's name. */
#define OP1(op, a, out) oari_xp_out0(oari_xp_node1(x, op, 1, (const char *const[]){a}, out))
#define OP2(op, a, b, out) oari_xp_out0(oari_xp_node1(x, op, 2, (const char *const[]){a, b}, out))
#endif

#endif

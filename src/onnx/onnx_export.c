/* ONNX export (include/oar/onnx.h): an oar graph becomes a ModelProto
 * (default domain, opset 13..17) packed with protobuf-c. Each live node
 * maps to one ONNX node or a short chain of them; constants become
 * initializers (raw_data, little-endian); dynamic dims become dim_params
 * named by the graph's symbols. All protobuf memory comes from one arena
 * freed at the end. */
#include "../graph/ir.h"
#include "onnx.pb-c.h"
#include <errno.h>
#include <math.h>
#include <oar/onnx.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define DEFAULT_OPSET 17
#define IR_VERSION 8 /* ONNX 1.10..1.13 (opsets 15..18); readers accept it for 13 and 14 too */

/* ---- arena -------------------------------------------------------------------- */

typedef union blk_hdr {
    struct {
        union blk_hdr *next;
        size_t n;
    } h;
    max_align_t align;
} blk_hdr;

typedef struct xp {
    const oar_graph *g;
    int opset;
    blk_hdr *mem;
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
    int node; /* the oar node being exported */
} xp;

static void *xalloc(xp *x, size_t n) {
    if (x->st) return NULL;
    blk_hdr *b = oari_calloc(1, sizeof *b + n);
    if (!b) {
        x->st = OAR_ERR_NOMEM;
        return NULL;
    }
    b->h.next = x->mem;
    b->h.n = sizeof *b + n;
    x->mem = b;
    return b + 1;
}

static void arena_free(xp *x) {
    for (blk_hdr *b = x->mem, *nx; b; b = nx) {
        nx = b->h.next;
        oari_free(b, b->h.n);
    }
    x->mem = NULL;
}

OARI_PRINTF(2, 3) static char *xstr(xp *x, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *s = n >= 0 ? xalloc(x, (size_t)n + 1) : NULL;
    if (!s) return NULL;
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

/* Appends p to a growing array of pointers. */
static void push(xp *x, void ***arr, size_t *n, size_t *cap, void *p) {
    if (x->st || !p) return;
    if (*n == *cap) {
        size_t nc = *cap ? 2 * *cap : 64;
        void **a = xalloc(x, nc * sizeof *a);
        if (!a) return;
        if (*n) memcpy(a, *arr, *n * sizeof *a);
        *arr = a; /* the old array stays in the arena until the end */
        *cap = nc;
    }
    (*arr)[(*n)++] = p;
}

/* Sets x->st with a message naming the node; returns the status. */
OARI_PRINTF(2, 3) static int fail(xp *x, const char *fmt, ...) {
    if (x->st) return x->st;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (x->node < 0)
        x->st = oari_error(OAR_ERR_UNSUPPORTED, "oar_onnx_export: %s", msg);
    else
        x->st = oari_error(OAR_ERR_UNSUPPORTED, "oar_onnx_export: node %d (%s): %s", x->node,
                           oari_gnode_def(&x->g->nodes[x->node])->name, msg);
    return x->st;
}

/* ---- types and initializers ---------------------------------------------------- */

static int onnx_type(oar_dtype dt) {
    switch (dt) {
    case OAR_BOOL:
        return ONNX__TENSOR_PROTO__DATA_TYPE__BOOL;
    case OAR_U8:
        return ONNX__TENSOR_PROTO__DATA_TYPE__UINT8;
    case OAR_I32:
        return ONNX__TENSOR_PROTO__DATA_TYPE__INT32;
    case OAR_I64:
        return ONNX__TENSOR_PROTO__DATA_TYPE__INT64;
    case OAR_F16:
        return ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16;
    case OAR_BF16:
        return ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16;
    case OAR_F32:
        return ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    case OAR_F64:
        return ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE;
    case OAR_C64:
        return ONNX__TENSOR_PROTO__DATA_TYPE__COMPLEX64;
    case OAR_C128:
        return ONNX__TENSOR_PROTO__DATA_TYPE__COMPLEX128;
    default:
        return ONNX__TENSOR_PROTO__DATA_TYPE__UNDEFINED;
    }
}

/* An initializer named `name` holding numel elements of dt from data
 * (contiguous, host order = little-endian). */
static const char *add_init_raw(xp *x, const char *name, oar_dtype dt, int ndim,
                                const int64_t *shape, const void *data, size_t nbytes, bool copy) {
    Onnx__TensorProto *t = xalloc(x, sizeof *t);
    int64_t *dims = xalloc(x, (size_t)(ndim ? ndim : 1) * sizeof *dims);
    uint8_t *raw =
        copy ? xalloc(x, nbytes ? nbytes : 1) : (uint8_t *)data; /* else: outlives the export */
    if (!t || !dims || !raw || !name) return NULL;
    onnx__tensor_proto__init(t);
    t->name = (char *)name;
    t->n_dims = (size_t)ndim;
    if (ndim) memcpy(dims, shape, (size_t)ndim * sizeof *dims);
    t->dims = dims;
    t->has_data_type = 1;
    t->data_type = onnx_type(dt);
    t->has_raw_data = 1;
    if (copy && nbytes) memcpy(raw, data, nbytes);
    t->raw_data.data = raw;
    t->raw_data.len = nbytes;
    push(x, (void ***)&x->inits, &x->n_inits, &x->cap_inits, t);
    return x->st ? NULL : name;
}

static const char *add_init(xp *x, const char *name, oar_dtype dt, int ndim, const int64_t *shape,
                            const void *data, size_t nbytes) {
    return add_init_raw(x, name, dt, ndim, shape, data, nbytes, true);
}

static const char *tmp_name(xp *x) { return xstr(x, "/t%d", x->n_tmp++); }

/* A 1-D int64 initializer. */
static const char *cst_i64(xp *x, int n, const int64_t *v) {
    return add_init(x, tmp_name(x), OAR_I64, 1, (const int64_t[]){n}, v, (size_t)n * sizeof *v);
}
/* A 0-d initializer of dtype dt holding v. */
static const char *cst_scalar(xp *x, oar_dtype dt, double v) {
    union {
        float f;
        double d;
        int64_t i;
        int32_t i32;
        uint8_t u8;
    } u;
    size_t n;
    switch (dt) {
    case OAR_F32:
        u.f = (float)v;
        n = 4;
        break;
    case OAR_F64:
        u.d = v;
        n = 8;
        break;
    case OAR_I64:
        u.i = (int64_t)v;
        n = 8;
        break;
    case OAR_I32:
        u.i32 = (int32_t)v;
        n = 4;
        break;
    case OAR_U8:
    case OAR_BOOL:
        u.u8 = (uint8_t)v;
        n = 1;
        break;
    default:
        x->st = x->st ? x->st
                      : oari_error(OAR_ERR_UNSUPPORTED,
                                   "oar_onnx_export: node %d: a %s scalar constant "
                                   "is not supported",
                                   x->node, oar_dtype_name(dt));
        return NULL;
    }
    return add_init(x, tmp_name(x), dt, 0, NULL, &u, n);
}

/* An initializer of dtype dt (f32 or f64) and the given shape, every element v. */
static const char *filled(xp *x, oar_dtype dt, int ndim, const int64_t *shape, double v) {
    if (dt != OAR_F32 && dt != OAR_F64) {
        fail(x, "a %s constant of ones or zeros is not supported", oar_dtype_name(dt));
        return NULL;
    }
    int64_t cnt = 1;
    for (int d = 0; d < ndim; d++)
        cnt *= shape[d];
    size_t es = oar_dtype_size(dt);
    uint8_t *buf = xalloc(x, (size_t)cnt * es + 1);
    for (int64_t i = 0; buf && i < cnt; i++) {
        if (dt == OAR_F32)
            ((float *)buf)[i] = (float)v;
        else
            ((double *)buf)[i] = v;
    }
    return buf ? add_init_raw(x, tmp_name(x), dt, ndim, shape, buf, (size_t)cnt * es, false) : NULL;
}

/* Constant value v as an initializer: a contiguous constant's bytes are
 * referenced in place (the graph keeps it alive), a strided one is gathered. */
static int export_const(xp *x, int v) {
    oar_tensor *t = x->g->values[v].constant;
    size_t es = oar_dtype_size(t->dtype);
    size_t nbytes = (size_t)t->numel * es;
    const uint8_t *src = oar_tensor_data(t); /* points at the first element */
    if (t->numel && !src)
        return x->st =
                   oari_error(OAR_ERR_UNSUPPORTED,
                              "oar_onnx_export: constant '%s' is not in host memory", x->names[v]);
    if (!t->numel || oar_tensor_is_contiguous(t)) {
        add_init_raw(x, x->names[v], t->dtype, t->ndim, t->shape, src, nbytes, false);
        return x->st;
    }
    uint8_t *buf = xalloc(x, nbytes);
    if (!buf) return x->st;
    int64_t idx[OAR_MAX_DIMS] = {0};
    for (int64_t k = 0; k < t->numel; k++) {
        int64_t off = 0;
        for (int d = 0; d < t->ndim; d++)
            off += idx[d] * t->strides[d];
        memcpy(buf + (size_t)k * es, src + (size_t)off * es, es);
        for (int d = t->ndim - 1; d >= 0; d--) {
            if (++idx[d] < t->shape[d]) break;
            idx[d] = 0;
        }
    }
    add_init_raw(x, x->names[v], t->dtype, t->ndim, t->shape, buf, nbytes, false);
    return x->st;
}

/* ---- nodes ---------------------------------------------------------------------- */

/* Appends node `op` with n_in inputs ("" marks an omitted optional one) and
 * n_out outputs (NULL entries get fresh names). NULL once anything failed
 * or an input is NULL (a failed step before it). */
static Onnx__NodeProto *emitn(xp *x, const char *op, int n_in, const char *const *in, int n_out,
                              const char *const *out) {
    for (int i = 0; i < n_in; i++) /* NULL: a failed step before (its error is set) */
        if (!in[i] && !x->st)
            x->st = oari_error(OAR_ERR_INVALID, "oar_onnx_export: node %d: missing input", x->node);
    Onnx__NodeProto *nd = xalloc(x, sizeof *nd);
    char **ins = xalloc(x, (size_t)(n_in ? n_in : 1) * sizeof *ins);
    char **outs = xalloc(x, (size_t)n_out * sizeof *outs);
    if (!nd || !ins || !outs) return NULL;
    onnx__node_proto__init(nd);
    for (int i = 0; i < n_in; i++)
        ins[i] = (char *)in[i];
    for (int j = 0; j < n_out; j++)
        outs[j] = (char *)(out && out[j] ? out[j] : tmp_name(x));
    nd->n_input = (size_t)n_in;
    nd->input = ins;
    nd->n_output = (size_t)n_out;
    nd->output = outs;
    nd->op_type = (char *)op;
    /* "<oar op><node index>/<ONNX op>_<k>": an ONNX Runtime message leads back to the oar node */
    if (x->node >= 0)
        nd->name = xstr(x, "%s%d/%s_%d", oari_gnode_def(&x->g->nodes[x->node])->name, x->node, op,
                        x->n_onnx_nodes++);
    else
        nd->name = xstr(x, "output/%s_%d", op, x->n_onnx_nodes++);
    push(x, (void ***)&x->nodes, &x->n_nodes, &x->cap_nodes, nd);
    return x->st ? NULL : nd;
}

static Onnx__NodeProto *emit(xp *x, const char *op, int n_in, const char *const *in,
                             const char *out) {
    return emitn(x, op, n_in, in, 1, (const char *const[]){out});
}
static const char *out0(Onnx__NodeProto *nd) { return nd ? nd->output[0] : NULL; }

#define OP1(op, a, out) out0(emit(x, op, 1, (const char *const[]){a}, out))
#define OP2(op, a, b, out) out0(emit(x, op, 2, (const char *const[]){a, b}, out))

static Onnx__AttributeProto *add_attr(xp *x, Onnx__NodeProto *nd, const char *name, int type) {
    if (!nd) return NULL;
    Onnx__AttributeProto *a = xalloc(x, sizeof *a);
    Onnx__AttributeProto **arr = xalloc(x, (nd->n_attribute + 1) * sizeof *arr);
    if (!a || !arr) return NULL;
    onnx__attribute_proto__init(a);
    a->name = (char *)name;
    a->has_type = 1;
    a->type = type;
    if (nd->n_attribute) memcpy(arr, nd->attribute, nd->n_attribute * sizeof *arr);
    arr[nd->n_attribute++] = a;
    nd->attribute = arr;
    return a;
}
static void set_i(xp *x, Onnx__NodeProto *nd, const char *name, int64_t v) {
    Onnx__AttributeProto *a = add_attr(x, nd, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
    if (a) a->has_i = 1, a->i = v;
}
static void set_f(xp *x, Onnx__NodeProto *nd, const char *name, double v) {
    Onnx__AttributeProto *a = add_attr(x, nd, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
    if (a) a->has_f = 1, a->f = (float)v;
}
static void set_s(xp *x, Onnx__NodeProto *nd, const char *name, const char *s) {
    Onnx__AttributeProto *a = add_attr(x, nd, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING);
    if (a) a->has_s = 1, a->s.data = (uint8_t *)s, a->s.len = strlen(s);
}
static void set_ints(xp *x, Onnx__NodeProto *nd, const char *name, int n, const int64_t *v) {
    Onnx__AttributeProto *a = add_attr(x, nd, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
    int64_t *c = a ? xalloc(x, (size_t)(n ? n : 1) * sizeof *c) : NULL;
    if (!c) return;
    memcpy(c, v, (size_t)n * sizeof *c);
    a->n_ints = (size_t)n;
    a->ints = c;
}

/* ---- dynamic shapes ----------------------------------------------------------- */

/* A [1] int64 tensor holding the run-time size of symbol s (Shape of the
 * first graph input carrying it, gathered at that dim), made once. */
static const char *sym_size(xp *x, int s) {
    if (x->sym_dim[s]) return x->sym_dim[s];
    const oar_graph *g = x->g;
    for (int i = 0; i < g->n_inputs; i++) {
        const oari_gvalue *v = &g->values[g->inputs[i]];
        for (int d = 0; d < v->ndim; d++) {
            if (v->sym[d] != s || v->smul[d] != 1) continue;
            const char *sh = NULL;
            for (int k = 0; k < x->n_shapes; k++)
                if (x->shape_in[k] == i) sh = x->shape_name[k];
            if (!sh && (sh = OP1("Shape", x->names[g->inputs[i]], NULL)) &&
                x->n_shapes < OARI_MAX_SYMS) {
                x->shape_in[x->n_shapes] = i;
                x->shape_name[x->n_shapes++] = sh;
            }
            Onnx__NodeProto *nd = emit(
                x, "Gather", 2, (const char *const[]){sh, cst_i64(x, 1, (int64_t[]){d})}, NULL);
            set_i(x, nd, "axis", 0);
            return x->sym_dim[s] = out0(nd);
        }
    }
    fail(x, "no graph input carries the dynamic dim '%s'", g->syms[s].name);
    return NULL;
}

/* A 1-D int64 tensor of n sizes: v[k], or imul[k] times symbol isym[k] where
 * isym[k] >= 0 (a Concat of constants and run-time sizes then). */
static const char *shape_tensor(xp *x, int n, const int64_t *v, const int8_t *isym,
                                const int32_t *imul) {
    bool dyn = false;
    for (int k = 0; k < n; k++)
        dyn = dyn || isym[k] >= 0;
    if (!dyn) return cst_i64(x, n, v);
    const char *parts[OAR_MAX_DIMS + OARI_MAX_IATTR];
    int np = 0;
    for (int k = 0; k < n;) {
        if (isym[k] >= 0) {
            const char *s = sym_size(x, isym[k]);
            parts[np++] =
                imul[k] == 1 ? s : OP2("Mul", s, cst_i64(x, 1, (int64_t[]){imul[k]}), NULL);
            k++;
        } else {
            int k0 = k;
            while (k < n && isym[k] < 0)
                k++;
            parts[np++] = cst_i64(x, k - k0, v + k0);
        }
    }
    if (np == 1) return parts[0];
    Onnx__NodeProto *nd = emit(x, "Concat", np, parts, NULL);
    set_i(x, nd, "axis", 0);
    return out0(nd);
}

/* ---- op mapping ---------------------------------------------------------------- */

static const char *unary_name(oari_op op) {
    switch (op) {
    case OARI_OP_neg:
        return "Neg";
    case OARI_OP_abs:
        return "Abs";
    case OARI_OP_sign:
        return "Sign";
    case OARI_OP_exp:
        return "Exp";
    case OARI_OP_log:
        return "Log";
    case OARI_OP_sqrt:
        return "Sqrt";
    case OARI_OP_reciprocal:
        return "Reciprocal";
    case OARI_OP_sin:
        return "Sin";
    case OARI_OP_cos:
        return "Cos";
    case OARI_OP_tan:
        return "Tan";
    case OARI_OP_asin:
        return "Asin";
    case OARI_OP_acos:
        return "Acos";
    case OARI_OP_atan:
        return "Atan";
    case OARI_OP_sinh:
        return "Sinh";
    case OARI_OP_cosh:
        return "Cosh";
    case OARI_OP_tanh:
        return "Tanh";
    case OARI_OP_sigmoid:
        return "Sigmoid";
    case OARI_OP_relu:
        return "Relu";
    case OARI_OP_erf:
        return "Erf";
    case OARI_OP_floor:
        return "Floor";
    case OARI_OP_ceil:
        return "Ceil";
    case OARI_OP_round:
        return "Round";
    case OARI_OP_isnan:
        return "IsNaN";
    case OARI_OP_isinf:
        return "IsInf";
    case OARI_OP_logical_not:
        return "Not";
    case OARI_OP_contiguous:
        return "Identity";
    default:
        return NULL;
    }
}

static const char *binary_name(oari_op op) {
    switch (op) {
    case OARI_OP_add:
        return "Add";
    case OARI_OP_sub:
        return "Sub";
    case OARI_OP_mul:
        return "Mul";
    case OARI_OP_div:
        return "Div";
    case OARI_OP_pow:
        return "Pow";
    case OARI_OP_maximum:
        return "Max";
    case OARI_OP_minimum:
        return "Min";
    case OARI_OP_eq:
        return "Equal";
    case OARI_OP_lt:
        return "Less";
    case OARI_OP_le:
        return "LessOrEqual";
    case OARI_OP_gt:
        return "Greater";
    case OARI_OP_ge:
        return "GreaterOrEqual";
    case OARI_OP_logical_and:
        return "And";
    case OARI_OP_logical_or:
        return "Or";
    case OARI_OP_logical_xor:
        return "Xor";
    case OARI_OP_matmul:
        return "MatMul";
    default:
        return NULL;
    }
}

/* The dims set in a reduction bitmask, ascending. */
static int mask_axes(int64_t mask, int ndim, int64_t *axes) {
    int n = 0;
    for (int d = 0; d < ndim; d++)
        if (mask & ((int64_t)1 << d)) axes[n++] = d;
    return n;
}

/* Reduce op `op` over axes with keepdims into out (ReduceSum takes the axes
 * as an input from opset 13, the others from opset 18). */
static const char *reduce(xp *x, const char *op, const char *in, int n, const int64_t *axes,
                          bool keep, const char *out) {
    Onnx__NodeProto *nd;
    if (!strcmp(op, "ReduceSum")) {
        nd = emit(x, op, 2, (const char *const[]){in, cst_i64(x, n, axes)}, out);
    } else {
        nd = emit(x, op, 1, (const char *const[]){in}, out);
        set_ints(x, nd, "axes", n, axes);
    }
    set_i(x, nd, "keepdims", keep);
    return out0(nd);
}

/* Y = 0.5 * X * (1 + erf(X / sqrt 2)) or the tanh form. */
static const char *gelu(xp *x, const char *X, oar_dtype dt, bool tanh_form, const char *Y) {
    const char *inner;
    if (tanh_form) {
        const char *x3 = OP2("Mul", OP2("Mul", X, X, NULL), X, NULL);
        const char *s = OP2("Add", X, OP2("Mul", x3, cst_scalar(x, dt, 0.044715), NULL), NULL);
        inner = OP1("Tanh", OP2("Mul", s, cst_scalar(x, dt, sqrt(2.0 / M_PI)), NULL), NULL);
    } else {
        inner = OP1("Erf", OP2("Mul", X, cst_scalar(x, dt, M_SQRT1_2), NULL), NULL);
    }
    const char *h = OP2("Mul", X, cst_scalar(x, dt, 0.5), NULL);
    return OP2("Mul", h, OP2("Add", inner, cst_scalar(x, dt, 1.0), NULL), Y);
}

/* Slice of one axis: [start, end) by step (end may be INT64_MAX). */
static const char *slice1(xp *x, const char *X, int64_t axis, const char *start, const char *end,
                          int64_t step, const char *out) {
    return out0(emit(
        x, "Slice", 5,
        (const char *const[]){X, start, end, cst_i64(x, 1, &axis), cst_i64(x, 1, &step)}, out));
}

/* 2-D spatial attributes: rank-4 inputs give 2 entries, rank-3 ([N, C, L])
 * the W entry only. */
static void spatial(xp *x, Onnx__NodeProto *nd, int rank, const char *name, int64_t h, int64_t w,
                    bool pads) {
    if (pads) {
        if (rank == 4)
            set_ints(x, nd, name, 4, (int64_t[]){h, w, h, w});
        else
            set_ints(x, nd, name, 2, (int64_t[]){w, w});
    } else {
        if (rank == 4)
            set_ints(x, nd, name, 2, (int64_t[]){h, w});
        else
            set_ints(x, nd, name, 1, (int64_t[]){w});
    }
}

/* layer_norm decomposed: mean, var over the trailing k dims; writes the
 * names of mean and rstd (for used outputs) and returns Y. */
static const char *layer_norm_decomposed(xp *x, const char *X, const char *W, const char *B,
                                         oar_dtype dt, int ndim, int k, double eps, const char *Y,
                                         const char *M, const char *R) {
    int64_t axes[OAR_MAX_DIMS];
    for (int d = 0; d < k; d++)
        axes[d] = ndim - k + d;
    const char *mean = reduce(x, "ReduceMean", X, k, axes, true, M);
    const char *dx = OP2("Sub", X, mean, NULL);
    const char *var = reduce(x, "ReduceMean", OP2("Mul", dx, dx, NULL), k, axes, true, NULL);
    const char *rstd =
        OP1("Reciprocal", OP1("Sqrt", OP2("Add", var, cst_scalar(x, dt, eps), NULL), NULL), R);
    const char *y = OP2("Mul", dx, rstd, W || B ? NULL : Y);
    if (W) y = OP2("Mul", y, W, B ? NULL : Y);
    if (B) y = OP2("Add", y, B, Y);
    return y;
}

/* The ONNX names of node n's inputs (NULL for absent optional ones). */
static const char *in_name(xp *x, const oari_gnode *n, int i) {
    return i < n->n_in && n->in[i] >= 0 ? x->names[n->in[i]] : NULL;
}

static int export_control(xp *x, int ni);

static int export_node(xp *x, int ni) {
    const oar_graph *g = x->g;
    const oari_gnode *n = &g->nodes[ni];
    const int64_t *a = n->attrs.i;
    const double *f = n->attrs.f;
    x->node = ni;
    if (oari_is_ctrl(n->op)) return export_control(x, ni); /* oar_cond / oar_while_loop: If / Loop */
    const oari_gvalue *iv = &g->values[n->in[0]];
    const oari_gvalue *ov = &g->values[n->out[0]];
    const char *X = in_name(x, n, 0), *X1 = in_name(x, n, 1), *X2 = in_name(x, n, 2);
    const char *Y = x->names[n->out[0]];
    oar_dtype dt = iv->dtype;
    int rank = iv->ndim;
    for (int j = 1; j < n->n_out; j++)
        if (x->uses[n->out[j]] && n->op != OARI_OP_layer_norm && n->op != OARI_OP_topk &&
            n->op != OARI_OP_sort)
            return fail(x, "its output %d is used; only output 0 has an ONNX equivalent", j);
    for (int k = 0; k < n->attrs.ni; k++)
        if (n->isym[k] >= 0 && n->op != OARI_OP_view && n->op != OARI_OP_expand &&
            n->op != OARI_OP_slice && n->op != OARI_OP_interpolate)
            return fail(x, "attribute %d follows the dynamic dim '%s'", k,
                        g->syms[n->isym[k]].name);
    const char *name;
    if ((name = unary_name(n->op))) {
        OP1(name, X, Y);
        return x->st;
    }
    if ((name = binary_name(n->op))) {
        OP2(name, X, X1, Y);
        return x->st;
    }
    Onnx__NodeProto *nd;
    switch (n->op) {
    case OARI_OP_ne:
        OP1("Not", OP2("Equal", X, X1, NULL), Y);
        break;
    case OARI_OP_where:
        out0(emit(x, "Where", 3, (const char *const[]){X, X1, X2}, Y));
        break;
    case OARI_OP_exp2:
        OP2("Pow", cst_scalar(x, dt, 2.0), X, Y);
        break;
    case OARI_OP_log2:
        OP2("Div", OP1("Log", X, NULL), cst_scalar(x, dt, M_LN2), Y);
        break;
    case OARI_OP_log1p:
        OP1("Log", OP2("Add", X, cst_scalar(x, dt, 1.0), NULL), Y);
        break;
    case OARI_OP_expm1:
        OP2("Sub", OP1("Exp", X, NULL), cst_scalar(x, dt, 1.0), Y);
        break;
    case OARI_OP_rsqrt:
        OP1("Reciprocal", OP1("Sqrt", X, NULL), Y);
        break;
    case OARI_OP_square:
        OP2("Mul", X, X, Y);
        break;
    case OARI_OP_trunc:
        OP2("Mul", OP1("Sign", X, NULL), OP1("Floor", OP1("Abs", X, NULL), NULL), Y);
        break;
    case OARI_OP_silu:
        OP2("Mul", X, OP1("Sigmoid", X, NULL), Y);
        break;
    case OARI_OP_gelu:
        gelu(x, X, dt, a[0] != 0, Y);
        break;
    case OARI_OP_relu6:
        out0(emit(x, "Clip", 3,
                  (const char *const[]){X, cst_scalar(x, dt, 0), cst_scalar(x, dt, 6)}, Y));
        break;
    case OARI_OP_clamp:
        out0(emit(x, "Clip", 3,
                  (const char *const[]){X, isnan(f[0]) ? "" : cst_scalar(x, dt, f[0]),
                                        isnan(f[1]) ? "" : cst_scalar(x, dt, f[1])},
                  Y));
        break;
    case OARI_OP_leaky_relu:
        set_f(x, emit(x, "LeakyRelu", 1, &X, Y), "alpha", f[0]);
        break;
    case OARI_OP_elu:
        set_f(x, emit(x, "Elu", 1, &X, Y), "alpha", f[0]);
        break;
    case OARI_OP_softplus: /* log(1 + exp(beta x)) / beta; oar's linear branch above the threshold
                              differs from it by < exp(-threshold) */
        if (f[0] == 1.0)
            OP1("Softplus", X, Y);
        else
            OP2("Div", OP1("Softplus", OP2("Mul", X, cst_scalar(x, dt, f[0]), NULL), NULL),
                cst_scalar(x, dt, f[0]), Y);
        break;
    case OARI_OP_floor_div:
        if (!oar_dtype_is_float(dt))
            return fail(x, "integer floor division has no ONNX equivalent");
        OP1("Floor", OP2("Div", X, X1, NULL), Y);
        break;
    case OARI_OP_remainder:
        if (oar_dtype_is_float(dt)) { /* Python's: a - floor(a / b) * b */
            OP2("Sub", X, OP2("Mul", OP1("Floor", OP2("Div", X, X1, NULL), NULL), X1, NULL), Y);
        } else {
            set_i(x, emit(x, "Mod", 2, (const char *const[]){X, X1}, Y), "fmod", 0);
        }
        break;
    case OARI_OP_cast: {
        nd = emit(x, "Cast", 1, &X, Y);
        set_i(x, nd, "to", onnx_type(ov->dtype));
        break;
    }
    case OARI_OP_sum:
    case OARI_OP_prod:
    case OARI_OP_amax:
    case OARI_OP_amin: {
        int64_t axes[OAR_MAX_DIMS];
        int k = mask_axes(a[0], rank, axes);
        if (!k) {
            OP1("Identity", X, Y);
            break;
        }
        const char *op = n->op == OARI_OP_sum    ? "ReduceSum"
                         : n->op == OARI_OP_prod ? "ReduceProd"
                         : n->op == OARI_OP_amax ? "ReduceMax"
                                                 : "ReduceMin";
        reduce(x, op, X, k, axes, a[1] != 0, Y);
        break;
    }
    case OARI_OP_size_of: { /* the product of some dims of Shape(x), as a float */
        int64_t axes[OAR_MAX_DIMS];
        int k = mask_axes(a[0], rank, axes);
        const char *dims = OP2("Gather", OP1("Shape", X, NULL), cst_i64(x, k, axes), NULL);
        const char *prod = reduce(x, "ReduceProd", dims, 1, (int64_t[]){0}, false, NULL);
        set_i(x, emit(x, "Cast", 1, &prod, Y), "to", onnx_type(ov->dtype));
        break;
    }
    case OARI_OP_all:
    case OARI_OP_any: { /* min / max of (x != 0) as int32 */
        int64_t axes[OAR_MAX_DIMS];
        int k = mask_axes(a[0], rank, axes);
        const char *b =
            dt == OAR_BOOL ? X : OP1("Not", OP2("Equal", X, cst_scalar(x, dt, 0), NULL), NULL);
        nd = emit(x, "Cast", 1, &b, NULL);
        set_i(x, nd, "to", ONNX__TENSOR_PROTO__DATA_TYPE__INT32);
        const char *r = k ? reduce(x, n->op == OARI_OP_all ? "ReduceMin" : "ReduceMax", out0(nd), k,
                                   axes, a[1] != 0, NULL)
                          : out0(nd);
        set_i(x, emit(x, "Cast", 1, &r, Y), "to", ONNX__TENSOR_PROTO__DATA_TYPE__BOOL);
        break;
    }
    case OARI_OP_argmax:
    case OARI_OP_argmin: {
        const char *op = n->op == OARI_OP_argmax ? "ArgMax" : "ArgMin";
        if (a[0] >= 0) {
            nd = emit(x, op, 1, &X, Y);
            set_i(x, nd, "axis", a[0]);
            set_i(x, nd, "keepdims", a[1] != 0);
        } else { /* over the flattened tensor */
            const char *flat = OP2("Reshape", X, cst_i64(x, 1, (int64_t[]){-1}), NULL);
            nd = emit(x, op, 1, &flat, a[1] ? NULL : Y);
            set_i(x, nd, "axis", 0);
            set_i(x, nd, "keepdims", 0);
            if (a[1]) {
                int64_t ones[OAR_MAX_DIMS];
                for (int d = 0; d < rank; d++)
                    ones[d] = 1;
                OP2("Reshape", out0(nd), cst_i64(x, rank, ones), Y);
            }
        }
        break;
    }
    case OARI_OP_cumsum: {
        int64_t ax = a[0];
        OP2("CumSum", X, add_init(x, tmp_name(x), OAR_I64, 0, NULL, &ax, sizeof ax), Y);
        break;
    }
    case OARI_OP_softmax:
    case OARI_OP_log_softmax:
        set_i(x, emit(x, n->op == OARI_OP_softmax ? "Softmax" : "LogSoftmax", 1, &X, Y), "axis",
              rank ? a[0] : 0);
        break;
    case OARI_OP_view: {
        /* symbolic dims: 0 copies the input's equal dim, one other may be -1;
         * more need the run-time sizes */
        int nt = n->attrs.ni, unresolved = 0;
        int64_t v[OARI_MAX_IATTR];
        bool zero_dim = false;
        for (int k = 0; k < nt; k++) {
            v[k] = a[k];
            zero_dim = zero_dim || (n->isym[k] < 0 && a[k] == 0);
            if (n->isym[k] < 0) continue;
            if (k < rank && iv->sym[k] == n->isym[k] && iv->smul[k] == n->imul[k])
                v[k] = 0;
            else
                unresolved++;
        }
        if (zero_dim) { /* a size-0 target dim needs allowzero (opset 14), and then no 0 copies */
            if (x->opset < 14) return fail(x, "a reshape to a size-0 dim needs opset >= 14");
            nd = emit(x, "Reshape", 2,
                      (const char *const[]){X, shape_tensor(x, nt, a, n->isym, n->imul)}, Y);
            set_i(x, nd, "allowzero", 1);
            break;
        }
        const char *shape;
        if (unresolved <= 1) {
            for (int k = 0; k < nt; k++)
                if (n->isym[k] >= 0 && v[k] != 0) v[k] = -1;
            shape = cst_i64(x, nt, v);
        } else {
            shape = shape_tensor(x, nt, a, n->isym, n->imul);
        }
        OP2("Reshape", X, shape, Y);
        break;
    }
    case OARI_OP_permute:
        set_ints(x, emit(x, "Transpose", 1, &X, Y), "perm", rank, a);
        break;
    case OARI_OP_expand: {
        /* Expand broadcasts both ways: a dim equal to the input's (aligned
         * right) becomes 1 and needs no run-time size */
        int nt = n->attrs.ni, off = nt - rank;
        int64_t v[OARI_MAX_IATTR];
        int8_t sy[OARI_MAX_IATTR];
        int32_t mu[OARI_MAX_IATTR];
        for (int k = 0; k < nt; k++) {
            v[k] = a[k], sy[k] = n->isym[k], mu[k] = n->imul[k];
            int d = k - off;
            if (d >= 0 && iv->shape[d] == a[k] && iv->sym[d] == n->isym[k]) v[k] = 1, sy[k] = -1;
        }
        OP2("Expand", X, shape_tensor(x, nt, v, sy, mu), Y);
        break;
    }
    case OARI_OP_slice: {
        int64_t d = a[0];
        const char *start = shape_tensor(x, 1, &a[1], &n->isym[1], &n->imul[1]);
        const char *end;
        if (a[2] >= iv->shape[d] && n->isym[2] == iv->sym[d])
            end = cst_i64(x, 1, (int64_t[]){INT64_MAX});
        else
            end = shape_tensor(x, 1, &a[2], &n->isym[2], &n->imul[2]);
        if (n->isym[3] >= 0) return fail(x, "a dynamic step");
        slice1(x, X, d, start, end, a[3], Y);
        break;
    }
    case OARI_OP_flip: {
        int64_t axes[OAR_MAX_DIMS], st[OAR_MAX_DIMS], en[OAR_MAX_DIMS], sp[OAR_MAX_DIMS];
        int k = mask_axes(a[0], rank, axes);
        for (int j = 0; j < k; j++)
            st[j] = -1, en[j] = INT64_MIN, sp[j] = -1;
        if (!k)
            OP1("Identity", X, Y);
        else
            out0(emit(x, "Slice", 5,
                      (const char *const[]){X, cst_i64(x, k, st), cst_i64(x, k, en),
                                            cst_i64(x, k, axes), cst_i64(x, k, sp)},
                      Y));
        break;
    }
    case OARI_OP_roll: {
        const char *cur = X;
        int np = n->attrs.ni / 2;
        for (int p = 0; p < np; p++) {
            int64_t d = a[2 * p + 1], size = iv->shape[d];
            if (iv->sym[d] >= 0) return fail(x, "roll along the dynamic dim %lld", (long long)d);
            int64_t s = size ? ((a[2 * p] % size) + size) % size : 0;
            const char *out = p == np - 1 ? Y : NULL;
            if (!s) {
                cur = OP1("Identity", cur, out);
                continue;
            }
            const char *hi = slice1(x, cur, d, cst_i64(x, 1, (int64_t[]){size - s}),
                                    cst_i64(x, 1, &size), 1, NULL);
            const char *lo = slice1(x, cur, d, cst_i64(x, 1, (int64_t[]){0}),
                                    cst_i64(x, 1, (int64_t[]){size - s}), 1, NULL);
            nd = emit(x, "Concat", 2, (const char *const[]){hi, lo}, out);
            set_i(x, nd, "axis", d);
            cur = out0(nd);
        }
        break;
    }
    case OARI_OP_tril:
    case OARI_OP_triu: {
        if (x->opset < 14) return fail(x, "Trilu needs opset >= 14");
        int64_t k = a[0];
        nd = emit(
            x, "Trilu", 2,
            (const char *const[]){X, add_init(x, tmp_name(x), OAR_I64, 0, NULL, &k, sizeof k)}, Y);
        set_i(x, nd, "upper", n->op == OARI_OP_triu);
        break;
    }
    case OARI_OP_diagonal: { /* d1, d2 moved last and flattened, the diagonal gathered */
        int64_t off = a[0], d1 = a[1], d2 = a[2];
        if (iv->sym[d1] >= 0 || iv->sym[d2] >= 0) return fail(x, "diagonal over a dynamic dim");
        int64_t n1 = iv->shape[d1], n2 = iv->shape[d2], perm[OAR_MAX_DIMS], shape[OAR_MAX_DIMS];
        int k = 0;
        for (int d = 0; d < rank; d++)
            if (d != d1 && d != d2) shape[k] = 0, perm[k++] = d; /* 0: keep the dim */
        perm[k] = d1, perm[k + 1] = d2, shape[k] = n1 * n2;
        int64_t len = off >= 0 ? (n2 - off < n1 ? n2 - off : n1) : (n1 + off < n2 ? n1 + off : n2);
        if (len < 0) len = 0;
        int64_t *idx = xalloc(x, (size_t)(len ? len : 1) * sizeof *idx);
        for (int64_t i = 0; idx && i < len; i++)
            idx[i] = off >= 0 ? i * n2 + i + off : (i - off) * n2 + i;
        nd = emit(x, "Transpose", 1, &X, NULL);
        set_ints(x, nd, "perm", rank, perm);
        const char *flat = OP2("Reshape", out0(nd), cst_i64(x, k + 1, shape), NULL);
        nd = emit(x, "Gather", 2,
                  (const char *const[]){flat, idx ? cst_i64(x, (int)len, idx) : NULL}, Y);
        set_i(x, nd, "axis", k);
        break;
    }
    case OARI_OP_concat: {
        const char *ins[OARI_MAX_IN];
        for (int i = 0; i < n->n_in; i++)
            ins[i] = in_name(x, n, i);
        set_i(x, emit(x, "Concat", n->n_in, ins, Y), "axis", a[0]);
        break;
    }
    case OARI_OP_pad: {
        static const char *const modes[] = {"constant", "reflect", "edge"};
        int64_t pads[2 * OAR_MAX_DIMS] = {0};
        for (int k = 0; k < (n->attrs.ni - 1) / 2; k++) {
            int d = rank - 1 - k;
            pads[d] = a[1 + 2 * k];
            pads[rank + d] = a[2 + 2 * k];
        }
        const char *ins[3] = {X, cst_i64(x, 2 * rank, pads), NULL};
        int nin = 2;
        if (a[0] == 0) ins[nin++] = cst_scalar(x, dt, f[0]);
        set_s(x, emit(x, "Pad", nin, ins, Y), "mode", modes[a[0]]);
        break;
    }
    case OARI_OP_index_select:
        set_i(x, emit(x, "Gather", 2, (const char *const[]){X, X1}, Y), "axis", a[0]);
        break;
    case OARI_OP_gather:
        set_i(x, emit(x, "GatherElements", 2, (const char *const[]){X, X1}, Y), "axis", a[0]);
        break;
    case OARI_OP_scatter:
    case OARI_OP_scatter_add: {
        if (n->op == OARI_OP_scatter_add && x->opset < 16)
            return fail(x, "ScatterElements with reduction='add' needs opset >= 16");
        const char *upd = X2;
        if (g->values[n->in[2]].ndim == 0) upd = OP2("Expand", X2, OP1("Shape", X1, NULL), NULL);
        nd = emit(x, "ScatterElements", 3, (const char *const[]){X, X1, upd}, Y);
        set_i(x, nd, "axis", a[0]);
        if (n->op == OARI_OP_scatter_add) set_s(x, nd, "reduction", "add");
        break;
    }
    case OARI_OP_index_add: { /* ScatterElements(add) with the index spread along dim of src */
        if (x->opset < 16) return fail(x, "ScatterElements with reduction='add' needs opset >= 16");
        const oari_gvalue *sv = &g->values[n->in[2]];
        int64_t ishape[OAR_MAX_DIMS];
        for (int d = 0; d < sv->ndim; d++)
            ishape[d] = d == a[0] ? -1 : 1;
        const char *idx = OP2("Reshape", X1, cst_i64(x, sv->ndim, ishape), NULL);
        idx = OP2("Expand", idx, OP1("Shape", X2, NULL), NULL);
        nd = emit(x, "ScatterElements", 3, (const char *const[]){X, idx, X2}, Y);
        set_i(x, nd, "axis", a[0]);
        set_s(x, nd, "reduction", "add");
        break;
    }
    case OARI_OP_one_hot:
        set_i(x,
              emit(x, "OneHot", 3,
                   (const char *const[]){X, cst_i64(x, 1, &a[0]), cst_i64(x, 2, (int64_t[]){0, 1})},
                   Y),
              "axis", -1);
        break;
    case OARI_OP_sort: { /* TopK over the whole dim; ties keep the lower index first, as oar's
                            stable sort */
        if (!rank) return fail(x, "sort of a 0-d tensor");
        int64_t d = a[0];
        const char *k = shape_tensor(x, 1, &iv->shape[d], &iv->sym[d], &iv->smul[d]);
        nd = emitn(x, "TopK", 2, (const char *const[]){X, k}, 2,
                   (const char *const[]){Y, x->names[n->out[1]]});
        set_i(x, nd, "axis", d);
        set_i(x, nd, "largest", a[1] != 0);
        set_i(x, nd, "sorted", 1);
        break;
    }
    case OARI_OP_atan2: { /* atan(y / x), moved by +-pi where x < 0; 0 where both are 0 */
        if (!oar_dtype_is_float(dt)) return fail(x, "atan2 of %s", oar_dtype_name(dt));
        const char *zero = cst_scalar(x, dt, 0);
        const char *base = OP1("Atan", OP2("Div", X, X1, NULL), NULL);
        const char *turn =
            out0(emit(x, "Where", 3,
                      (const char *const[]){OP2("GreaterOrEqual", X, zero, NULL),
                                            cst_scalar(x, dt, M_PI), cst_scalar(x, dt, -M_PI)},
                      NULL));
        const char *r =
            OP2("Add", base,
                out0(emit(x, "Where", 3,
                          (const char *const[]){OP2("Less", X1, zero, NULL), turn, zero}, NULL)),
                NULL);
        const char *both0 =
            OP2("And", OP2("Equal", X, zero, NULL), OP2("Equal", X1, zero, NULL), NULL);
        out0(emit(x, "Where", 3, (const char *const[]){both0, zero, r}, Y));
        break;
    }
    case OARI_OP_topk: {
        nd = emitn(x, "TopK", 2, (const char *const[]){X, cst_i64(x, 1, &a[0])}, 2,
                   (const char *const[]){Y, x->names[n->out[1]]});
        set_i(x, nd, "axis", a[1]);
        set_i(x, nd, "largest", a[2] != 0);
        set_i(x, nd, "sorted", 1);
        break;
    }
    case OARI_OP_conv2d:
    case OARI_OP_conv_transpose2d: {
        bool tr = n->op == OARI_OP_conv_transpose2d;
        if (rank != 4 && rank != 3) return fail(x, "input of rank %d", rank);
        const oari_gvalue *wv = &g->values[n->in[1]];
        nd =
            emit(x, tr ? "ConvTranspose" : "Conv", X2 ? 3 : 2, (const char *const[]){X, X1, X2}, Y);
        if (rank == 4)
            set_ints(x, nd, "kernel_shape", 2, &wv->shape[2]);
        else
            set_ints(x, nd, "kernel_shape", 1, &wv->shape[2]);
        spatial(x, nd, rank, "strides", a[0], a[1], false);
        spatial(x, nd, rank, "pads", a[2], a[3], true);
        if (tr) spatial(x, nd, rank, "output_padding", a[4], a[5], false);
        spatial(x, nd, rank, "dilations", a[tr ? 6 : 4], a[tr ? 7 : 5], false);
        set_i(x, nd, "group", a[tr ? 8 : 6]);
        break;
    }
    case OARI_OP_max_pool2d:
    case OARI_OP_avg_pool2d: {
        if (rank != 4) return fail(x, "pooling of a rank-%d input (ONNX wants [N, C, H, W])", rank);
        bool mx = n->op == OARI_OP_max_pool2d;
        nd = emit(x, mx ? "MaxPool" : "AveragePool", 1, &X, Y);
        spatial(x, nd, 4, "kernel_shape", a[0], a[1], false);
        spatial(x, nd, 4, "strides", a[2], a[3], false);
        spatial(x, nd, 4, "pads", a[4], a[5], true);
        if (mx) {
            spatial(x, nd, 4, "dilations", a[6], a[7], false);
            set_i(x, nd, "ceil_mode", a[8]);
        } else {
            set_i(x, nd, "ceil_mode", a[6]);
            set_i(x, nd, "count_include_pad", a[7]);
        }
        break;
    }
    case OARI_OP_adaptive_avg_pool2d: {
        if (rank != 4) return fail(x, "pooling of a rank-%d input (ONNX wants [N, C, H, W])", rank);
        int64_t h = iv->shape[2], w = iv->shape[3];
        if (a[0] == 1 && a[1] == 1) {
            OP1("GlobalAveragePool", X, Y);
        } else if (iv->sym[2] < 0 && iv->sym[3] < 0 && a[0] > 0 && a[1] > 0 && h % a[0] == 0 &&
                   w % a[1] == 0) {
            nd = emit(x, "AveragePool", 1, &X, Y);
            spatial(x, nd, 4, "kernel_shape", h / a[0], w / a[1], false);
            spatial(x, nd, 4, "strides", h / a[0], w / a[1], false);
        } else {
            return fail(x,
                        "adaptive pooling of %lld x %lld to %lld x %lld (only to 1 x 1 or by whole "
                        "factors)",
                        (long long)h, (long long)w, (long long)a[0], (long long)a[1]);
        }
        break;
    }
    case OARI_OP_interpolate: {
        if (rank != 4) return fail(x, "interpolate of a rank-%d input", rank);
        const char *sizes = shape_tensor(x, 4, ov->shape, ov->sym, ov->smul);
        nd = emit(x, "Resize", 4, (const char *const[]){X, "", "", sizes}, Y);
        if (a[0] == 0) {
            set_s(x, nd, "mode", "nearest");
            set_s(x, nd, "coordinate_transformation_mode", "asymmetric");
            set_s(x, nd, "nearest_mode", "floor");
        } else {
            set_s(x, nd, "mode", "linear");
            set_s(x, nd, "coordinate_transformation_mode",
                  a[3] ? "align_corners" : "pytorch_half_pixel");
        }
        break;
    }
    case OARI_OP_layer_norm: {
        int k = (int)a[0];
        bool plain = x->opset >= 17 && !x->uses[n->out[1]] && !x->uses[n->out[2]];
        for (int d = rank - k; d < rank; d++)
            plain = plain && iv->sym[d] < 0;
        if (plain) {
            /* Scale is required: ones when oar has no weight */
            const char *W = X1 ? X1 : filled(x, dt, k, iv->shape + rank - k, 1.0);
            nd = emit(x, "LayerNormalization", X2 ? 3 : 2, (const char *const[]){X, W, X2}, Y);
            set_i(x, nd, "axis", rank - k);
            set_f(x, nd, "epsilon", f[0]);
        } else { /* also when the mean / rstd outputs are used */
            layer_norm_decomposed(x, X, X1, X2, dt, rank, k, f[0], Y,
                                  x->uses[n->out[1]] ? x->names[n->out[1]] : NULL,
                                  x->uses[n->out[2]] ? x->names[n->out[2]] : NULL);
        }
        break;
    }
    case OARI_OP_batch_norm: {
        if (a[0]) return fail(x, "training-mode batch norm (export the graph in eval mode)");
        const char *M = X1, *V = X2, *W = in_name(x, n, 3), *B = in_name(x, n, 4);
        if (!M || !V) return fail(x, "batch norm without running statistics");
        if (rank < 2) return fail(x, "batch norm of a rank-%d input", rank);
        /* scale and bias are required: ones and zeros when oar has none */
        if (!W) W = filled(x, dt, 1, &iv->shape[1], 1.0);
        if (!B) B = filled(x, dt, 1, &iv->shape[1], 0.0);
        nd = emit(x, "BatchNormalization", 5, (const char *const[]){X, W, B, M, V}, Y);
        set_f(x, nd, "epsilon", f[0]);
        break;
    }
    case OARI_OP_group_norm: {
        if (rank < 3) return fail(x, "group norm of a rank-%d input", rank);
        int64_t G = a[0], c = iv->shape[1];
        const char *r = OP2("Reshape", X, cst_i64(x, 3, (int64_t[]){0, G, -1}), NULL);
        const char *y = layer_norm_decomposed(x, r, NULL, NULL, dt, 3, 1, f[0], NULL, NULL, NULL);
        y = OP2("Reshape", y, OP1("Shape", X, NULL), X1 || X2 ? NULL : Y);
        int64_t cshape[OAR_MAX_DIMS];
        cshape[0] = c;
        for (int d = 1; d < rank - 1; d++)
            cshape[d] = 1;
        const char *cs = X1 || X2 ? cst_i64(x, rank - 1, cshape) : NULL;
        if (X1) y = OP2("Mul", y, OP2("Reshape", X1, cs, NULL), X2 ? NULL : Y);
        if (X2) OP2("Add", y, OP2("Reshape", X2, cs, NULL), Y);
        break;
    }
    default:
        return fail(x, "op '%s' has no ONNX mapping in the exporter", oari_op_name(n->op));
    }
    return x->st;
}

/* ---- control nodes: If and Loop ---------------------------------------------- */

static Onnx__ValueInfoProto *value_info(xp *x, const char *name, int v);

/* Emits sub-graph S's nodes into y's node list (and its initializers), S's
 * inputs standing for the names in[], its other values named "/s<k>/v<id>";
 * out[] gets the names of S's outputs. Shares y's arena and counters. */
static int inline_sub(xp *y, const oar_graph *S, const char *const *in, const char **out) {
    if (y->st) return y->st;
    xp c = *y;
    c.g = S;
    c.node = -1;
    c.n_shapes = 0;
    c.names = xalloc(y, (size_t)(S->n_values ? S->n_values : 1) * sizeof *c.names);
    c.uses = xalloc(y, (size_t)(S->n_values ? S->n_values : 1) * sizeof *c.uses);
    c.mem = y->mem; /* xalloc above moved y's arena head */
    if (!c.names || !c.uses) return y->st;
    oari_graph_use_counts(S, c.uses);
    int k = y->n_tmp++;
    c.n_tmp = y->n_tmp;
    for (int i = 0; i < S->n_inputs; i++)
        c.names[S->inputs[i]] = in[i];
    for (int v = 0; v < S->n_values; v++)
        if (!c.names[v]) c.names[v] = xstr(&c, "/s%d/v%d", k, v);
    for (int i = 0; i < S->n_nodes && !c.st; i++)
        if (!S->nodes[i].dead) export_node(&c, i);
    for (int j = 0; j < S->n_outputs; j++)
        out[j] = c.names[S->outputs[j]];
    /* back into y: arena, counters, node and initializer lists, status */
    y->mem = c.mem;
    y->n_tmp = c.n_tmp;
    y->n_onnx_nodes = c.n_onnx_nodes;
    y->nodes = c.nodes, y->n_nodes = c.n_nodes, y->cap_nodes = c.cap_nodes;
    y->inits = c.inits, y->n_inits = c.n_inits, y->cap_inits = c.cap_inits;
    y->st = c.st;
    return y->st;
}

/* A fresh context for a sub-graph body of x: its own node and initializer
 * lists, x's arena and counters. */
static xp sub_ctx(xp *x) {
    xp y = *x;
    y.nodes = NULL, y.n_nodes = y.cap_nodes = 0;
    y.inits = NULL, y.n_inits = y.cap_inits = 0;
    return y;
}

/* y's nodes as a GraphProto with formal inputs fin[0..n_fin-1] (values of
 * S: fin_v) and outputs named out[] typed as S's values out_v[]; an output
 * that is not made in y (an outer name, an input) goes through an Identity.
 * Gives x back the arena and counters. */
static Onnx__GraphProto *finish_sub(xp *x, xp *y, const oar_graph *S, int n_fin, const char *const *fin,
                                    const int *fin_v, int n_out, const char **out, const int *out_v,
                                    const char *name) {
    Onnx__ValueInfoProto **ins = xalloc(y, (size_t)(n_fin ? n_fin : 1) * sizeof *ins);
    Onnx__ValueInfoProto **outs = xalloc(y, (size_t)(n_out ? n_out : 1) * sizeof *outs);
    Onnx__GraphProto *gp = xalloc(y, sizeof *gp);
    const oar_graph *keep = y->g;
    y->g = S;
    int mark = y->node;
    y->node = -1;
    for (int j = 0; j < n_out && !y->st; j++) {
        bool made = false;
        for (size_t k = 0; k < y->n_nodes && !made; k++)
            for (size_t o = 0; o < y->nodes[k]->n_output; o++)
                made = made || !strcmp(y->nodes[k]->output[o], out[j]);
        for (int k = 0; k < j; k++)
            made = made && strcmp(out[k], out[j]); /* a second output of one value */
        if (!made) out[j] = out0(emit(y, "Identity", 1, (const char *const[]){out[j]}, NULL));
    }
    for (int i = 0; i < n_fin && ins; i++)
        ins[i] = value_info(y, fin[i], fin_v[i]);
    for (int j = 0; j < n_out && outs; j++)
        outs[j] = value_info(y, out[j], out_v[j]);
    y->g = keep;
    y->node = mark;
    if (gp && !y->st) {
        onnx__graph_proto__init(gp);
        gp->name = (char *)name;
        gp->n_input = (size_t)n_fin, gp->input = ins;
        gp->n_output = (size_t)n_out, gp->output = outs;
        gp->n_node = y->n_nodes, gp->node = y->nodes;
        gp->n_initializer = y->n_inits, gp->initializer = y->inits;
    }
    x->mem = y->mem;
    x->n_tmp = y->n_tmp;
    x->n_onnx_nodes = y->n_onnx_nodes;
    x->st = y->st;
    return x->st ? NULL : gp;
}

static void set_graph(xp *x, Onnx__NodeProto *nd, const char *name, Onnx__GraphProto *gp) {
    Onnx__AttributeProto *a = add_attr(x, nd, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH);
    if (a) a->g = gp;
}

/* name as a bool (ONNX's If and Loop conditions), given its dtype. */
static const char *as_bool(xp *x, const char *name, oar_dtype dt) {
    if (dt == OAR_BOOL) return name;
    Onnx__NodeProto *nd = emit(x, "Cast", 1, (const char *const[]){name}, NULL);
    set_i(x, nd, "to", ONNX__TENSOR_PROTO__DATA_TYPE__BOOL);
    return out0(nd);
}

#define MAX_CTRL_IO 96

/* cond node [pred, operands..., captures...] -> If whose branches read
 * the operands and captures by their outer names; while node [vars...,
 * captures...] -> Loop over the vars (no trip count): cond_init is the
 * cond sub-graph on the initial vars, the body runs the body sub-graph and
 * then the cond sub-graph on its results. max_iters is not kept. */
static int export_control(xp *x, int ni) {
    const oar_graph *g = x->g;
    const oari_gnode *n = &g->nodes[ni];
    const char *in[MAX_CTRL_IO], *outs[MAX_CTRL_IO], *res[MAX_CTRL_IO];
    int out_v[MAX_CTRL_IO];
    if (n->n_in > MAX_CTRL_IO || n->n_out > MAX_CTRL_IO)
        return fail(x, "%d inputs, %d outputs (at most %d)", n->n_in, n->n_out, MAX_CTRL_IO);
    for (int i = 0; i < n->n_in; i++)
        in[i] = x->names[n->in[i]];
    for (int j = 0; j < n->n_out; j++)
        outs[j] = x->names[n->out[j]];
    if (n->op == OARI_OP_COND) {
        const char *pred = as_bool(x, in[0], g->values[n->in[0]].dtype);
        Onnx__GraphProto *br[2];
        for (int b = 0; b < 2; b++) {
            const oar_graph *S = n->sub[b];
            xp y = sub_ctx(x);
            inline_sub(&y, S, in + 1, res);
            for (int j = 0; j < n->n_out; j++)
                out_v[j] = S->outputs[j];
            br[b] = finish_sub(x, &y, S, 0, NULL, NULL, n->n_out, res, out_v, b ? "else" : "then");
            if (!br[b]) return x->st;
        }
        Onnx__NodeProto *nd = emitn(x, "If", 1, (const char *const[]){pred}, n->n_out, outs);
        set_graph(x, nd, "then_branch", br[0]);
        set_graph(x, nd, "else_branch", br[1]);
        return x->st;
    }
    /* while */
    const oar_graph *C = n->sub[0], *B = n->sub[1];
    int nv = n->n_out;
    const char *c0[1] = {0}, *body_in[MAX_CTRL_IO] = {0}, *fin[MAX_CTRL_IO] = {0}, *cond_in[MAX_CTRL_IO] = {0};
    int fin_v[MAX_CTRL_IO] = {0};
    if (inline_sub(x, C, in, c0)) return x->st;
    const char *cond_init = as_bool(x, c0[0], C->values[C->outputs[0]].dtype);
    xp y = sub_ctx(x);
    /* formal inputs: the iteration (unused), the condition (unused: the
     * body recomputes it), the vars */
    fin[0] = tmp_name(&y);
    fin[1] = tmp_name(&y);
    for (int j = 0; j < nv; j++)
        body_in[j] = fin[2 + j] = tmp_name(&y);
    for (int i = nv; i < n->n_in; i++)
        body_in[i] = in[i];
    inline_sub(&y, B, body_in, res + 1);
    for (int j = 0; j < nv; j++)
        cond_in[j] = res[1 + j];
    for (int i = nv; i < n->n_in; i++)
        cond_in[i] = in[i];
    inline_sub(&y, C, cond_in, c0);
    if (y.st) return x->st = y.st;
    res[0] = as_bool(&y, c0[0], C->values[C->outputs[0]].dtype);
    /* types: iteration int64 [], condition bool [] -- typed from scalar stand-ins below */
    out_v[0] = B->outputs[0]; /* a stand-in: the condition's type is written below */
    for (int j = 0; j < nv; j++) {
        fin_v[2 + j] = B->inputs[j];
        out_v[1 + j] = B->outputs[j];
    }
    Onnx__GraphProto *body = finish_sub(x, &y, B, 0, NULL, NULL, 1 + nv, res, out_v, "body");
    if (!body) return x->st;
    /* the formal inputs and the condition output's type, written by hand */
    Onnx__ValueInfoProto **bin = xalloc(x, (size_t)(2 + nv) * sizeof *bin);
    if (!bin) return x->st;
    xp z = *x;
    z.g = B;
    for (int j = 0; j < nv; j++)
        bin[2 + j] = value_info(&z, fin[2 + j], fin_v[2 + j]);
    x->mem = z.mem;
    x->st = z.st;
    static const int elem[2] = {ONNX__TENSOR_PROTO__DATA_TYPE__INT64, ONNX__TENSOR_PROTO__DATA_TYPE__BOOL};
    for (int k = 0; k < 2 && !x->st; k++) {
        Onnx__ValueInfoProto *vi = xalloc(x, sizeof *vi);
        Onnx__TypeProto *tp = xalloc(x, sizeof *tp);
        Onnx__TypeProto__Tensor *tt = xalloc(x, sizeof *tt);
        Onnx__TensorShapeProto *sp = xalloc(x, sizeof *sp);
        if (!vi || !tp || !tt || !sp) return x->st;
        onnx__value_info_proto__init(vi);
        onnx__type_proto__init(tp);
        onnx__type_proto__tensor__init(tt);
        onnx__tensor_shape_proto__init(sp);
        tt->has_elem_type = 1;
        tt->elem_type = elem[k];
        tt->shape = sp;
        tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
        tp->tensor_type = tt;
        vi->name = (char *)fin[k];
        vi->type = tp;
        bin[k] = vi;
        if (k == 1) { /* the body's condition output: bool [] as well */
            Onnx__ValueInfoProto *vo = xalloc(x, sizeof *vo);
            if (!vo) return x->st;
            *vo = *vi;
            vo->name = body->output[0]->name;
            body->output[0] = vo;
        }
    }
    if (x->st) return x->st;
    body->n_input = (size_t)(2 + nv);
    body->input = (Onnx__ValueInfoProto **)bin;
    const char *lin[MAX_CTRL_IO + 2];
    lin[0] = "";
    lin[1] = cond_init;
    for (int j = 0; j < nv; j++)
        lin[2 + j] = in[j];
    Onnx__NodeProto *nd = emitn(x, "Loop", 2 + nv, lin, nv, outs);
    set_graph(x, nd, "body", body);
    return x->st;
}

/* ---- graph, names, model -------------------------------------------------------- */

static bool name_taken(xp *x, int n, const char *s) {
    for (int v = 0; v < n; v++)
        if (x->names[v] && !strcmp(x->names[v], s)) return true;
    return false;
}

/* Names every value, first come first served among: graph inputs, node
 * values that are graph outputs (the output's name), constants (their
 * names); a name already taken gets ".v<id>". Other values are "/v<id>". */
static void assign_names(xp *x, const int *out_owner) {
    const oar_graph *g = x->g;
    for (int pass = 0; pass < 4 && !x->st; pass++) {
        for (int v = 0; v < g->n_values && !x->st; v++) {
            const oari_gvalue *gv = &g->values[v];
            const char *base = NULL;
            if (pass == 0 && gv->kind == OARI_V_INPUT)
                base = gv->name ? gv->name : "input";
            else if (pass == 1 && gv->kind == OARI_V_NODE && out_owner[v] >= 0)
                base = g->output_names[out_owner[v]];
            else if (pass == 2 && gv->kind == OARI_V_CONST)
                base = gv->name ? gv->name : "const";
            else if (pass == 3 && !x->names[v])
                x->names[v] = xstr(x, "/v%d", v);
            if (base)
                x->names[v] = name_taken(x, g->n_values, base) ? xstr(x, "%s.v%d", base, v)
                                                               : xstr(x, "%s", base);
        }
    }
}

static Onnx__ValueInfoProto *value_info(xp *x, const char *name, int v) {
    const oar_graph *g = x->g;
    const oari_gvalue *gv = &g->values[v];
    Onnx__ValueInfoProto *vi = xalloc(x, sizeof *vi);
    Onnx__TypeProto *tp = xalloc(x, sizeof *tp);
    Onnx__TypeProto__Tensor *tt = xalloc(x, sizeof *tt);
    Onnx__TensorShapeProto *sp = xalloc(x, sizeof *sp);
    Onnx__TensorShapeProto__Dimension **dims =
        xalloc(x, (size_t)(gv->ndim ? gv->ndim : 1) * sizeof *dims);
    if (!vi || !tp || !tt || !sp || !dims) return NULL;
    onnx__value_info_proto__init(vi);
    onnx__type_proto__init(tp);
    onnx__type_proto__tensor__init(tt);
    onnx__tensor_shape_proto__init(sp);
    for (int d = 0; d < gv->ndim; d++) {
        Onnx__TensorShapeProto__Dimension *dm = xalloc(x, sizeof *dm);
        if (!dm) return NULL;
        onnx__tensor_shape_proto__dimension__init(dm);
        if (gv->sym[d] < 0) {
            dm->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
            dm->dim_value = gv->shape[d];
        } else {
            dm->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
            dm->dim_param = gv->smul[d] == 1
                                ? (char *)g->syms[gv->sym[d]].name
                                : xstr(x, "%d*%s", (int)gv->smul[d], g->syms[gv->sym[d]].name);
        }
        dims[d] = dm;
    }
    sp->n_dim = (size_t)gv->ndim;
    sp->dim = dims;
    tt->has_elem_type = 1;
    tt->elem_type = onnx_type(gv->dtype);
    tt->shape = sp;
    tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    tp->tensor_type = tt;
    vi->name = (char *)name;
    vi->type = tp;
    return vi;
}

/* Writes n bytes to path through a temporary name. */
static int write_file(const char *path, const void *buf, size_t n) {
    size_t plen = strlen(path) + 8;
    char *tmp = oari_malloc(plen);
    if (!tmp) return oari_fail_status();
    snprintf(tmp, plen, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    bool ok = f && fwrite(buf, 1, n, f) == n;
    if (f && fclose(f)) ok = false;
    int st = 0;
    if (!ok || rename(tmp, path)) {
        int e = errno;
        if (f) unlink(tmp);
        st = oari_error(OAR_ERR_IO, "oar_onnx_export: cannot write '%s': %s", path, strerror(e));
    }
    oari_free(tmp, plen);
    return st;
}

static int build_model(xp *x, Onnx__ModelProto *m) {
    const oar_graph *g = x->g;
    int *owner = oari_calloc((size_t)(g->n_values ? g->n_values : 1), sizeof *owner);
    if (!owner) return x->st = OAR_ERR_NOMEM;
    for (int v = 0; v < g->n_values; v++)
        owner[v] = -1;
    for (int j = g->n_outputs - 1; j >= 0; j--)
        owner[g->outputs[j]] = j; /* the first output naming v */
    assign_names(x, owner);
    /* graph inputs */
    Onnx__GraphProto *gp = xalloc(x, sizeof *gp);
    Onnx__ValueInfoProto **ins = xalloc(x, (size_t)(g->n_inputs ? g->n_inputs : 1) * sizeof *ins);
    Onnx__ValueInfoProto **outs =
        xalloc(x, (size_t)(g->n_outputs ? g->n_outputs : 1) * sizeof *outs);
    if (!gp || !ins || !outs) goto done;
    onnx__graph_proto__init(gp);
    gp->name = "oar";
    for (int i = 0; i < g->n_inputs; i++)
        if (!(ins[i] = value_info(x, x->names[g->inputs[i]], g->inputs[i]))) goto done;
    /* used constants */
    for (int v = 0; v < g->n_values && !x->st; v++)
        if (g->values[v].kind == OARI_V_CONST && x->uses[v]) export_const(x, v);
    /* nodes, in order */
    for (int i = 0; i < g->n_nodes && !x->st; i++)
        if (!g->nodes[i].dead) export_node(x, i);
    /* outputs: a value named otherwise (an input, a constant, another output's value) gets an
     * Identity */
    x->node = -1;
    for (int j = 0; j < g->n_outputs && !x->st; j++) {
        int v = g->outputs[j];
        const char *name = x->names[v];
        if (owner[v] != j || g->values[v].kind != OARI_V_NODE) {
            name = name_taken(x, g->n_values, g->output_names[j])
                       ? xstr(x, "%s.out%d", g->output_names[j], j)
                       : g->output_names[j];
            OP1("Identity", x->names[v], name);
        }
        if (!(outs[j] = value_info(x, name, v))) goto done;
    }
    if (x->st) goto done;
    gp->n_input = (size_t)g->n_inputs;
    gp->input = ins;
    gp->n_output = (size_t)g->n_outputs;
    gp->output = outs;
    gp->n_node = x->n_nodes;
    gp->node = x->nodes;
    gp->n_initializer = x->n_inits;
    gp->initializer = x->inits;
    Onnx__OperatorSetIdProto *os = xalloc(x, sizeof *os);
    Onnx__OperatorSetIdProto **osa = xalloc(x, sizeof *osa);
    if (!os || !osa) goto done;
    onnx__operator_set_id_proto__init(os);
    os->domain = "";
    os->has_version = 1;
    os->version = x->opset;
    osa[0] = os;
    m->has_ir_version = 1;
    m->ir_version = IR_VERSION;
    m->producer_name = "oar";
    m->n_opset_import = 1;
    m->opset_import = osa;
    m->graph = gp;
done:
    oari_free(owner, (size_t)(g->n_values ? g->n_values : 1) * sizeof *owner);
    if (x->st == OAR_ERR_NOMEM) oari_nomem("oar_onnx_export");
    return x->st;
}

OAR_API int oar_onnx_export(const oar_graph *g, const char *path,
                            const oar_onnx_export_options *opt) {
    if (!g || !path)
        return oari_error(OAR_ERR_INVALID, "oar_onnx_export: NULL %s", g ? "path" : "graph");
    int opset = opt && opt->opset ? opt->opset : DEFAULT_OPSET;
    if (opset < 13 || opset > 17)
        return oari_error(OAR_ERR_UNSUPPORTED,
                          "oar_onnx_export: opset %d is not supported (13..17)", opset);
    xp x = {.g = g, .opset = opset, .node = -1};
    size_t nv = (size_t)(g->n_values ? g->n_values : 1);
    x.names = oari_calloc(nv, sizeof *x.names);
    x.uses = oari_calloc(nv, sizeof *x.uses);
    int st;
    if (!x.names || !x.uses) {
        st = oari_fail_status();
    } else {
        oari_graph_use_counts(g, x.uses);
        Onnx__ModelProto m;
        onnx__model_proto__init(&m);
        st = build_model(&x, &m);
        size_t n = st ? 0 : onnx__model_proto__get_packed_size(&m);
        uint8_t *buf = NULL;
        if (!st && n > (size_t)INT32_MAX) /* protobuf's limit; external data is not written */
            st = oari_error(OAR_ERR_UNSUPPORTED,
                            "oar_onnx_export: the model is %zu bytes, over protobuf's 2 GiB limit "
                            "(external data is not supported)",
                            n);
        if (!st && !(buf = oari_malloc(n ? n : 1))) st = oari_fail_status();
        if (!st) {
            onnx__model_proto__pack(&m, buf);
            st = write_file(path, buf, n);
        }
        if (buf) oari_free(buf, n ? n : 1);
    }
    arena_free(&x);
    oari_free(x.names, nv * sizeof *x.names);
    oari_free(x.uses, nv * sizeof *x.uses);
    return st;
}

/* Reductions and scans: the definitions of sum, prod, amax, amin, all, any,
 * argmax, argmin, cumsum and cumprod, and the composites built on them
 * (mean, var, std, logsumexp, norm, max_dim, min_dim). Kernels:
 * src/backends/cpu/cpu_reduce.c. Semantics follow PyTorch. */
#include "op.h"

#include <math.h>
#include <string.h>

/* ---- helpers ---------------------------------------------------------------- */

static bool null_input(const char *op, const oar_tensor *x) {
    if (x) return false;
    if (!oari_error_pending()) oari_error(OAR_ERR_INVALID, "%s: input is NULL", op);
    return true;
}

/* The bitmask of the dims named by (ndims, dims) of x; ndims 0 or dims NULL
 * means all (ops.h). -1 with an error for a bad or repeated dim. */
static int64_t dims_mask(const char *op, const oar_tensor *x, int ndims, const int64_t *dims) {
    if (ndims < 0 || ndims > OAR_MAX_DIMS) {
        oari_error(OAR_ERR_INVALID, "%s: bad dims list (ndims %d, expected 0 to %d)", op, ndims,
                   OAR_MAX_DIMS);
        return -1;
    }
    if (ndims == 0 || !dims) return x->ndim ? (int64_t)((1u << x->ndim) - 1) : 0;
    int64_t mask = 0;
    for (int i = 0; i < ndims; i++) {
        int d = oari_wrap_dim(op, dims[i], x->ndim);
        if (d < 0) return -1;
        if (x->ndim == 0) continue; /* a scalar: dim 0 / -1 reduce nothing */
        if ((mask >> d) & 1) {
            char s[200];
            oari_error(OAR_ERR_INVALID, "%s: dim %d appears more than once in the dims list "
                       "(input shape %s)", op, d, oari_shape_str(s, x->ndim, x->shape));
            return -1;
        }
        mask |= (int64_t)1 << d;
    }
    return mask;
}

/* Shape of a reduction of (ndim, shape) over mask; returns the output ndim. */
static int reduced_shape(int ndim, const int64_t *shape, int64_t mask, bool keepdim, int64_t *out) {
    int n = 0;
    for (int d = 0; d < ndim; d++) {
        if (!((mask >> d) & 1)) out[n++] = shape[d];
        else if (keepdim) out[n++] = 1;
    }
    return n;
}

/* Number of elements reduced into each output. */
static int64_t reduced_count(const oar_tensor *x, int64_t mask) {
    int64_t n = 1;
    for (int d = 0; d < x->ndim; d++)
        if ((mask >> d) & 1) n *= x->shape[d];
    return n;
}

static int mask_to_dims(int ndim, int64_t mask, int64_t *dims) {
    int n = 0;
    for (int d = 0; d < ndim; d++)
        if ((mask >> d) & 1) dims[n++] = d;
    return n;
}

static bool is_half(oar_dtype d) { return d == OAR_F16 || d == OAR_BF16; }

/* ---- shape rules --------------------------------------------------------------- */

typedef enum {
    R_SUM,     /* bool/ints -> i64, others keep their dtype */
    R_MINMAX,  /* same dtype; no complex; no zero-size reduced dim */
    R_BOOL,    /* any dtype -> bool */
} reduce_kind;

static int check_mask(oari_infer *c, int64_t *mask) {
    const oar_tensor *x = c->in[0];
    *mask = c->attrs->ni > 0 ? c->attrs->i[0] : 0;
    if (x->ndim == 0) *mask = 0;
    if (*mask < 0 || (x->ndim < 63 && (*mask >> x->ndim) != 0))
        return oari_error(OAR_ERR_INVALID, "%s: dim mask 0x%llx is out of range for a tensor of "
                          "rank %d", c->op, (unsigned long long)*mask, x->ndim);
    return 0;
}

static int check_nonempty(oari_infer *c, int64_t mask, const char *what) {
    const oar_tensor *x = c->in[0];
    for (int d = 0; d < x->ndim; d++) {
        if (((mask >> d) & 1) && x->shape[d] == 0) {
            char s[200];
            return oari_error(OAR_ERR_INVALID, "%s: cannot reduce over dim %d of size 0 (input "
                              "shape %s): the %s of no elements is undefined", c->op, d,
                              oari_shape_str(s, x->ndim, x->shape), what);
        }
    }
    return 0;
}

/* extreme: "maximum" or "minimum" for R_MINMAX, named in the empty-dim error. */
static int reduce_infer(oari_infer *c, reduce_kind kind, const char *extreme) {
    const oar_tensor *x = c->in[0];
    int64_t mask;
    if (check_mask(c, &mask)) return OAR_ERR_INVALID;
    bool keepdim = c->attrs->ni > 1 && c->attrs->i[1];
    c->out[0].ndim = reduced_shape(x->ndim, x->shape, mask, keepdim, c->out[0].shape);
    oar_dtype d = x->dtype;
    switch (kind) {
    case R_SUM: c->out[0].dtype = oar_dtype_is_integral(d) ? OAR_I64 : d; break;
    case R_MINMAX:
        if (oar_dtype_is_complex(d))
            return oari_error(OAR_ERR_INVALID, "%s: not defined for complex input (%s)", c->op,
                              oar_dtype_name(d));
        if (check_nonempty(c, mask, extreme)) return OAR_ERR_INVALID;
        c->out[0].dtype = d;
        break;
    case R_BOOL: c->out[0].dtype = OAR_BOOL; break;
    }
    return 0;
}

static int infer_sum(oari_infer *c) { return reduce_infer(c, R_SUM, NULL); }
static int infer_amax(oari_infer *c) { return reduce_infer(c, R_MINMAX, "maximum"); }
static int infer_amin(oari_infer *c) { return reduce_infer(c, R_MINMAX, "minimum"); }
static int infer_bool(oari_infer *c) { return reduce_infer(c, R_BOOL, NULL); }

static int infer_arg(oari_infer *c) {
    const oar_tensor *x = c->in[0];
    int64_t dim = c->attrs->ni > 0 ? c->attrs->i[0] : -1;
    bool keepdim = c->attrs->ni > 1 && c->attrs->i[1];
    if (oar_dtype_is_complex(x->dtype))
        return oari_error(OAR_ERR_INVALID, "%s: not defined for complex input (%s)", c->op,
                          oar_dtype_name(x->dtype));
    if (dim < -1 || dim >= (x->ndim ? x->ndim : 1))
        return oari_error(OAR_ERR_INVALID, "%s: dim %lld is out of range for a tensor of rank %d",
                          c->op, (long long)dim, x->ndim);
    int64_t mask = dim < 0 ? (x->ndim ? (int64_t)((1u << x->ndim) - 1) : 0)
                           : (x->ndim ? (int64_t)1 << dim : 0);
    if (dim < 0 && x->numel == 0)
        return oari_error(OAR_ERR_INVALID, "%s: the input is empty (shape has a 0); name a dim "
                          "of non-zero size to reduce", c->op);
    if (check_nonempty(c, mask, "index of the extreme")) return OAR_ERR_INVALID;
    c->out[0].ndim = reduced_shape(x->ndim, x->shape, mask, keepdim, c->out[0].shape);
    c->out[0].dtype = OAR_I64;
    return 0;
}

static int infer_scan(oari_infer *c) {
    const oar_tensor *x = c->in[0];
    int64_t dim = c->attrs->ni > 0 ? c->attrs->i[0] : 0;
    if (dim < 0 || dim >= (x->ndim ? x->ndim : 1))
        return oari_error(OAR_ERR_INVALID, "%s: dim %lld is out of range for a tensor of rank %d",
                          c->op, (long long)dim, x->ndim);
    oari_meta_from(&c->out[0], x);
    if (oar_dtype_is_integral(x->dtype)) c->out[0].dtype = OAR_I64;
    return 0;
}

/* ---- gradient rules (ops only, so they differentiate again) -------------------- */

static int64_t grad_mask(const oari_grad_ctx *g) {
    const oari_meta *m = &g->in_meta[0];
    int64_t mask = g->attrs->ni > 0 ? g->attrs->i[0] : 0;
    return m->ndim ? mask : 0;
}

/* g (the shape of the reduction's output) reshaped to keep the reduced dims as 1. */
static oar_tensor *keepdim_view(oar_tensor *g, const oari_meta *in, int64_t mask) {
    int64_t shape[OAR_MAX_DIMS];
    int n = reduced_shape(in->ndim, in->shape, mask, true, shape);
    return oar_reshape(g, n, shape);
}

/* g broadcast back to the input's shape. */
static oar_tensor *expand_back(oar_tensor *g, const oari_meta *in, int64_t mask) {
    return oar_expand(keepdim_view(g, in, mask), in->ndim, in->shape);
}

static int grad_sum(oari_grad_ctx *g) {
    if (!g->needs[0] || !g->gout[0]) return 0;
    g->gin[0] = expand_back(g->gout[0], &g->in_meta[0], grad_mask(g));
    return g->gin[0] ? 0 : oari_fail_status();
}

/* d prod / d x_i = product of the others, exact with zeros:
 * no zero in the slice: prod / x_i; one zero: the product of the non-zeros
 * at the zero, 0 elsewhere; two or more: 0. Complex: conj of that.
 * Second order is exact where x has no zeros; at an exact zero the
 * branches are constant, so the cross terms d2/dx_z dx_j are missed
 * (as the masked branches of PyTorch's formula). */
static int grad_prod(oari_grad_ctx *g) {
    if (!g->needs[0] || !g->gout[0]) return 0;
    oar_tensor *x = g->in[0];
    const oari_meta *m = &g->in_meta[0];
    int64_t mask = grad_mask(g), dims[OAR_MAX_DIMS];
    int nd = mask_to_dims(m->ndim, mask, dims);
    oar_tensor *zeros = oar_zeros_like(x), *ones = oar_ones_like(x);
    oar_tensor *is_zero = oar_eq(x, zeros);
    oar_tensor *safe = oar_where(is_zero, ones, x);
    oar_tensor *pnz = nd ? oar_prod(safe, nd, dims, true) : safe; /* product of the non-zeros */
    oar_tensor *nz = nd ? oar_sum(is_zero, nd, dims, true) : oar_cast(is_zero, OAR_I64);
    oar_tensor *g_none = oar_div(pnz, safe);
    oar_tensor *g_one = oar_where(is_zero, pnz, zeros);
    oar_tensor *factor = oar_where(oar_eq(nz, oar_scalar(0)), g_none,
                                   oar_where(oar_eq(nz, oar_scalar(1)), g_one, zeros));
    g->gin[0] = oar_mul(keepdim_view(g->gout[0], m, mask), oar_conj(factor));
    return g->gin[0] ? 0 : oari_fail_status();
}

/* amax/amin: the gradient is split evenly among the elements equal to the result. */
static int grad_minmax(oari_grad_ctx *g) {
    if (!g->needs[0] || !g->gout[0]) return 0;
    oar_tensor *x = g->in[0];
    const oari_meta *m = &g->in_meta[0];
    int64_t mask = grad_mask(g), dims[OAR_MAX_DIMS];
    int nd = mask_to_dims(m->ndim, mask, dims);
    oar_tensor *hit = oar_cast(oar_eq(x, keepdim_view(g->out[0], m, mask)), m->dtype);
    oar_tensor *count = nd ? oar_sum(hit, nd, dims, true) : oar_ones_like(hit);
    g->gin[0] = oar_mul(keepdim_view(g->gout[0], m, mask), oar_div(hit, count));
    return g->gin[0] ? 0 : oari_fail_status();
}

static oar_tensor *reverse_cumsum(oar_tensor *t, int dim) {
    int64_t d = dim;
    return oar_flip(oar_cumsum(oar_flip(t, 1, &d), dim), 1, &d);
}

static int scan_dim(const oari_grad_ctx *g) {
    return g->attrs->ni > 0 ? (int)g->attrs->i[0] : 0;
}

static int grad_cumsum(oari_grad_ctx *g) {
    if (!g->needs[0] || !g->gout[0]) return 0;
    if (g->in_meta[0].ndim == 0) g->gin[0] = oari_pool_adopt(oar_tensor_retain(g->gout[0]));
    else g->gin[0] = reverse_cumsum(g->gout[0], scan_dim(g));
    return g->gin[0] ? 0 : oari_fail_status();
}

/* y_k = prod_{i<=k} x_i. With z the first zero of a line:
 *   j < z: dx_j = rcumsum(g * conj(y))_j / conj(x_j)
 *   j = z: dx_z = conj(prod_{i<z} x_i) * rcumsum(g * conj(cumprod(x with i<=z set to 1)))_z
 *   j > z: 0
 * which is exact with zeros and divides only by non-zero values. Second
 * order: exact away from exact zeros (see grad_prod). */
static int grad_cumprod(oari_grad_ctx *g) {
    if (!g->needs[0] || !g->gout[0]) return 0;
    if (g->in_meta[0].ndim == 0) {
        g->gin[0] = oari_pool_adopt(oar_tensor_retain(g->gout[0]));
        return g->gin[0] ? 0 : oari_fail_status();
    }
    int dim = scan_dim(g);
    int64_t d = dim;
    oar_tensor *x = g->in[0], *y = g->out[0], *gy = g->gout[0];
    oar_tensor *zeros = oar_zeros_like(x), *ones = oar_ones_like(x);
    oar_tensor *is_zero = oar_eq(x, zeros);
    oar_tensor *nzeros = oar_cumsum(is_zero, dim);               /* zeros up to and at i */
    oar_tensor *before = oar_eq(nzeros, oar_scalar(0));          /* i < z */
    oar_tensor *first = oar_logical_and(is_zero, oar_eq(nzeros, oar_scalar(1))); /* i == z */
    oar_tensor *safe = oar_where(before, x, ones);
    oar_tensor *part1 = oar_where(before, oar_div(reverse_cumsum(oar_mul(gy, oar_conj(y)), dim),
                                                  oar_conj(safe)), zeros);
    oar_tensor *after = oar_cumprod(oar_where(oar_logical_or(before, first), ones, x), dim);
    oar_tensor *head = oar_prod(safe, 1, &d, true);             /* prod_{i<z} x_i */
    oar_tensor *part2 = oar_where(first, oar_mul(reverse_cumsum(oar_mul(gy, oar_conj(after)), dim),
                                                 oar_conj(head)), zeros);
    g->gin[0] = oar_add(part1, part2);
    return g->gin[0] ? 0 : oari_fail_status();
}

/* ---- definitions --------------------------------------------------------------- */

#define REDUCE_DEF(NAME, INFER, FLAGS, SAVED, GRAD)                                         \
    const oari_op_def oari_def_##NAME = {                                                  \
        .name = #NAME, .n_in = 1, .n_out = 1, .fusion = OARI_FUSE_REDUCE, .flags = FLAGS,  \
        .saved = SAVED, .infer = INFER, .grad = GRAD,                                      \
    };

REDUCE_DEF(sum, infer_sum, 0, 0, grad_sum)
REDUCE_DEF(prod, infer_sum, 0, OARI_SAVE_IN(0), grad_prod)
REDUCE_DEF(amax, infer_amax, 0, OARI_SAVE_IN(0) | OARI_SAVE_OUT(0), grad_minmax)
REDUCE_DEF(amin, infer_amin, 0, OARI_SAVE_IN(0) | OARI_SAVE_OUT(0), grad_minmax)
REDUCE_DEF(all, infer_bool, OARI_F_NONDIFF, 0, NULL)
REDUCE_DEF(any, infer_bool, OARI_F_NONDIFF, 0, NULL)
REDUCE_DEF(argmax, infer_arg, OARI_F_NONDIFF, 0, NULL)
REDUCE_DEF(argmin, infer_arg, OARI_F_NONDIFF, 0, NULL)
REDUCE_DEF(cumsum, infer_scan, 0, 0, grad_cumsum)
REDUCE_DEF(cumprod, infer_scan, 0, OARI_SAVE_IN(0) | OARI_SAVE_OUT(0), grad_cumprod)

static int infer_size_of(oari_infer *c) {
    oar_dtype dt = (oar_dtype)c->attrs->i[1];
    if (c->attrs->ni != 2 || c->attrs->i[1] < 0 || c->attrs->i[1] >= OAR_DTYPE_COUNT || !oar_dtype_is_float(dt))
        return oari_error(OAR_ERR_INVALID, "size_of: attributes must be a dim mask and a float dtype");
    if (c->attrs->i[0] < 0 || (c->in[0]->ndim < 63 && (c->attrs->i[0] >> c->in[0]->ndim)))
        return oari_error(OAR_ERR_INVALID, "size_of: dim mask %lld names dims beyond rank %d",
                          (long long)c->attrs->i[0], c->in[0]->ndim);
    c->out[0] = (oari_meta){.dtype = dt, .ndim = 0};
    c->kernel_dtype = dt;
    return 0;
}

/* Reads only its input's shape: no fusion (a library call), no gradient. */
const oari_op_def oari_def_size_of = {
    .name = "size_of", .n_in = 1, .n_out = 1, .fusion = OARI_FUSE_OPAQUE, .flags = OARI_F_NONDIFF,
    .infer = infer_size_of,
};

/* ---- public functions: primitives ---------------------------------------------- */

static oar_tensor *reduce_call(oari_op op, oar_tensor *x, int ndims, const int64_t *dims,
                               bool keepdim) {
    const char *name = oari_op_name(op);
    if (null_input(name, x)) return NULL;
    int64_t mask = dims_mask(name, x, ndims, dims);
    if (mask < 0) return NULL;
    oari_attrs a = {.ni = 2, .i = {mask, keepdim}};
    return oari_call1(op, x, &a);
}

oar_tensor *oar_sum(oar_tensor *x, int ndims, const int64_t *dims, bool keepdim) {
    return reduce_call(OARI_OP_sum, x, ndims, dims, keepdim);
}
oar_tensor *oar_prod(oar_tensor *x, int ndims, const int64_t *dims, bool keepdim) {
    return reduce_call(OARI_OP_prod, x, ndims, dims, keepdim);
}
oar_tensor *oar_amax(oar_tensor *x, int ndims, const int64_t *dims, bool keepdim) {
    return reduce_call(OARI_OP_amax, x, ndims, dims, keepdim);
}
oar_tensor *oar_amin(oar_tensor *x, int ndims, const int64_t *dims, bool keepdim) {
    return reduce_call(OARI_OP_amin, x, ndims, dims, keepdim);
}
oar_tensor *oar_all(oar_tensor *x, int ndims, const int64_t *dims, bool keepdim) {
    return reduce_call(OARI_OP_all, x, ndims, dims, keepdim);
}
oar_tensor *oar_any(oar_tensor *x, int ndims, const int64_t *dims, bool keepdim) {
    return reduce_call(OARI_OP_any, x, ndims, dims, keepdim);
}

static oar_tensor *arg_call(oari_op op, oar_tensor *x, int dim, bool keepdim) {
    const char *name = oari_op_name(op);
    if (null_input(name, x)) return NULL;
    int64_t d = -1;
    if (dim != OAR_DIM_ALL && (d = oari_wrap_dim(name, dim, x->ndim)) < 0) return NULL;
    oari_attrs a = {.ni = 2, .i = {d, keepdim}};
    return oari_call1(op, x, &a);
}

oar_tensor *oar_argmax(oar_tensor *x, int dim, bool keepdim) {
    return arg_call(OARI_OP_argmax, x, dim, keepdim);
}
oar_tensor *oar_argmin(oar_tensor *x, int dim, bool keepdim) {
    return arg_call(OARI_OP_argmin, x, dim, keepdim);
}

static oar_tensor *scan_call(oari_op op, oar_tensor *x, int dim) {
    const char *name = oari_op_name(op);
    if (null_input(name, x)) return NULL;
    int d = oari_wrap_dim(name, dim, x->ndim);
    if (d < 0) return NULL;
    oari_attrs a = {.ni = 1, .i = {d}};
    return oari_call1(op, x, &a);
}

oar_tensor *oar_cumsum(oar_tensor *x, int dim) { return scan_call(OARI_OP_cumsum, x, dim); }
oar_tensor *oar_cumprod(oar_tensor *x, int dim) { return scan_call(OARI_OP_cumprod, x, dim); }

/* ---- public functions: composites ------------------------------------------------ */

/* Values and indices of the extreme along one dim. The gradient flows
 * through amax/amin, so ties share it evenly (PyTorch's max(dim) sends it
 * to the returned index only). */
static oar_tensor *extreme_dim(bool is_max, oar_tensor *x, int dim, bool keepdim,
                               oar_tensor **indices) {
    const char *name = is_max ? "max_dim" : "min_dim";
    if (indices) *indices = NULL;
    if (null_input(name, x)) return NULL;
    int d = oari_wrap_dim(name, dim, x->ndim);
    if (d < 0) return NULL;
    int64_t dd = d;
    oar_pool *p = oar_pool_push();
    oar_tensor *v = is_max ? oar_amax(x, 1, &dd, keepdim) : oar_amin(x, 1, &dd, keepdim);
    oar_tensor *i = NULL;
    if (v && indices) i = is_max ? oar_argmax(x, d, keepdim) : oar_argmin(x, d, keepdim);
    if (!v || (indices && !i)) {
        oar_pool_pop(p);
        return NULL;
    }
    oar_tensor_retain(i);
    v = oari_pool_return(p, v);
    if (indices) *indices = oari_pool_adopt(i);
    return v;
}

oar_tensor *oar_max_dim(oar_tensor *x, int dim, bool keepdim, oar_tensor **indices) {
    return extreme_dim(true, x, dim, keepdim, indices);
}
oar_tensor *oar_min_dim(oar_tensor *x, int dim, bool keepdim, oar_tensor **indices) {
    return extreme_dim(false, x, dim, keepdim, indices);
}

static int need_float(const char *op, const oar_tensor *x) {
    if (!oar_dtype_is_integral(x->dtype)) return 0;
    return oari_error(OAR_ERR_INVALID, "%s: expected a floating or complex input, got %s; cast "
                      "it first (oar_cast)", op, oar_dtype_name(x->dtype));
}

/* While x is traced and a dim that mask selects is dynamic: the number of
 * elements they hold, as a size_of node (read when the graph runs, so a
 * graph run at another batch divides by its own count), in the real dtype
 * of x's sums. NULL otherwise: the count is a plain number then. */
static oar_tensor *traced_count(oar_tensor *x, int64_t mask) {
    if (oar_tensor_data(x)) return NULL;
    bool dynamic = false;
    for (int d = 0; d < x->ndim; d++) dynamic = dynamic || (((mask >> d) & 1) && oari_trace_size_is_dynamic(x->shape[d]));
    if (!dynamic) return NULL;
    oar_dtype dt = x->dtype == OAR_F64 || x->dtype == OAR_C128 ? OAR_F64 : OAR_F32;
    oari_attrs a = {.ni = 2, .i = {mask, dt}};
    return oari_call1(OARI_OP_size_of, x, &a);
}

oar_tensor *oar_mean(oar_tensor *x, int ndims, const int64_t *dims, bool keepdim) {
    if (null_input("mean", x) || need_float("mean", x)) return NULL;
    int64_t mask = dims_mask("mean", x, ndims, dims);
    if (mask < 0) return NULL;
    int64_t count = reduced_count(x, mask);
    oar_pool *p = oar_pool_push();
    /* f16/bf16: sum and divide in f32, round once */
    oar_tensor *xf = is_half(x->dtype) ? oar_cast(x, OAR_F32) : x;
    oar_tensor *n = traced_count(xf, mask), *s = oar_sum(xf, ndims, dims, keepdim);
    oar_tensor *r = n ? oar_div(s, n) : oar_div_scalar(s, (double)count);
    if (is_half(x->dtype) && !oari_autocast_active) r = oar_cast(r, x->dtype); /* autocast: f32 */
    return oari_pool_return(p, r);
}

static oar_tensor *var_impl(const char *op, bool take_sqrt, oar_tensor *x, int ndims,
                            const int64_t *dims, double correction, bool keepdim) {
    if (null_input(op, x) || need_float(op, x)) return NULL;
    int64_t mask = dims_mask(op, x, ndims, dims);
    if (mask < 0) return NULL;
    double denom = (double)reduced_count(x, mask) - correction;
    if (denom < 0) denom = 0;
    oar_pool *p = oar_pool_push();
    oar_tensor *xf = is_half(x->dtype) ? oar_cast(x, OAR_F32) : x;
    oar_tensor *d = oar_sub(xf, oar_mean(xf, ndims, dims, true));
    oar_tensor *sq = oar_dtype_is_complex(x->dtype) ? oar_real(oar_mul(d, oar_conj(d))) : oar_mul(d, d);
    oar_tensor *n = traced_count(xf, mask), *s = oar_sum(sq, ndims, dims, keepdim);
    /* max(count - correction, 0) as a graph value when the count is dynamic */
    oar_tensor *r = n ? oar_div(s, oar_relu(oar_sub_scalar(n, correction))) : oar_div_scalar(s, denom);
    if (take_sqrt) r = oar_sqrt(r);
    if (is_half(x->dtype) && !oari_autocast_active) r = oar_cast(r, x->dtype); /* autocast: f32 */
    return oari_pool_return(p, r);
}

oar_tensor *oar_var(oar_tensor *x, int ndims, const int64_t *dims, double correction, bool keepdim) {
    return var_impl("var", false, x, ndims, dims, correction, keepdim);
}
oar_tensor *oar_std(oar_tensor *x, int ndims, const int64_t *dims, double correction, bool keepdim) {
    return var_impl("std", true, x, ndims, dims, correction, keepdim);
}

/* log(sum(exp(x - m))) + m with m the (detached) maximum, infinite maxima
 * replaced by 0 as in PyTorch. Integer inputs compute in f32. */
oar_tensor *oar_logsumexp(oar_tensor *x, int ndims, const int64_t *dims, bool keepdim) {
    if (null_input("logsumexp", x)) return NULL;
    if (oar_dtype_is_complex(x->dtype))
        return oari_error(OAR_ERR_INVALID, "logsumexp: not defined for complex input (%s)",
                          oar_dtype_name(x->dtype)), NULL;
    int64_t mask = dims_mask("logsumexp", x, ndims, dims);
    if (mask < 0) return NULL;
    int64_t shape[OAR_MAX_DIMS];
    int nd = reduced_shape(x->ndim, x->shape, mask, keepdim, shape);
    oar_pool *p = oar_pool_push();
    oar_tensor *xf = oar_dtype_is_float(x->dtype) && !is_half(x->dtype) ? x : oar_cast(x, OAR_F32);
    oar_tensor *r;
    if (reduced_count(x, mask) == 0) {
        r = oar_log(oar_sum(xf, ndims, dims, keepdim)); /* log 0 = -inf */
    } else {
        /* m is detached (the gradients through it cancel anyway); while
         * tracing there is no tape, and a detached copy of a traced value
         * would leave the graph */
        oar_tensor *m = oar_amax(xf, ndims, dims, true);
        if (m && oar_tensor_data(m)) m = oar_detach(m);
        m = m ? oar_where(oar_isinf(m), oar_scalar_of(0, m->dtype), m) : NULL;
        r = oar_add(oar_log(oar_sum(oar_exp(oar_sub(xf, m)), ndims, dims, true)), m);
        r = oar_reshape(r, nd, shape);
    }
    if (xf != x && oar_dtype_is_float(x->dtype)) r = oar_cast(r, x->dtype);
    return oari_pool_return(p, r);
}

oar_tensor *oar_norm(oar_tensor *x, double pn, int ndims, const int64_t *dims, bool keepdim) {
    if (null_input("norm", x) || need_float("norm", x)) return NULL;
    if (!(pn == 1 || pn == 2 || (isinf(pn) && pn > 0)))
        return oari_error(OAR_ERR_INVALID, "norm: p must be 1, 2 or INFINITY, got %g", pn), NULL;
    int64_t mask = dims_mask("norm", x, ndims, dims);
    if (mask < 0) return NULL;
    oar_pool *p = oar_pool_push();
    oar_tensor *xf = is_half(x->dtype) ? oar_cast(x, OAR_F32) : x, *r;
    if (pn == 1) {
        r = oar_sum(oar_abs(xf), ndims, dims, keepdim);
    } else if (pn == 2) {
        oar_tensor *sq = oar_dtype_is_complex(x->dtype) ? oar_real(oar_mul(xf, oar_conj(xf)))
                                                        : oar_mul(xf, xf);
        r = oar_sqrt(oar_sum(sq, ndims, dims, keepdim));
    } else {
        r = oar_amax(oar_abs(xf), ndims, dims, keepdim);
    }
    if (is_half(x->dtype) && !oari_autocast_active) r = oar_cast(r, x->dtype); /* autocast: f32 */
    return oari_pool_return(p, r);
}

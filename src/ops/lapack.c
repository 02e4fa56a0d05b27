/* Dense linear algebra through LAPACK (src/ops/defs/lapack.def): the
 * primitives linalg_solve, linalg_slogdet, linalg_cholesky and linalg_eigh
 * (shape rules; gradient rules written with ops, so they differentiate
 * again), and the public functions of include/oar/linalg.h, among them the
 * composites inv (solve against I) and det (sign * exp(logabsdet)).
 * Kernels: src/backends/cpu/cpu_lapack.c. */
#include "op.h"

#include <oar/complex.h>
#include <oar/device.h>
#include <oar/linalg.h>

#include <string.h>

/* ---- shape rules ---------------------------------------------------------- */

static bool lapack_dtype(oar_dtype d) {
    return d == OAR_F32 || d == OAR_F64 || d == OAR_C64 || d == OAR_C128;
}

static oar_dtype real_of(oar_dtype d) {
    return d == OAR_C64 ? OAR_F32 : d == OAR_C128 ? OAR_F64 : d;
}

static int bad_dtype(const char *op, const char *what, oar_dtype d) {
    return oari_error(OAR_ERR_INVALID,
                      "%s: %s has dtype %s; expected float32, float64, complex64 or complex128 "
                      "(integer, bool and half-precision inputs are refused, not promoted: "
                      "cast them first)",
                      op, what, oar_dtype_name(d));
}

/* A batch of square matrices [..., n, n] of a LAPACK dtype. */
static int check_square(const char *op, const char *what, const oar_tensor *a) {
    char s[200];
    if (!lapack_dtype(a->dtype)) return bad_dtype(op, what, a->dtype);
    if (a->ndim < 2 || a->shape[a->ndim - 1] != a->shape[a->ndim - 2])
        return oari_error(OAR_ERR_INVALID,
                          "%s: %s must be a batch of square matrices [..., n, n], got shape %s",
                          op, what, oari_shape_str(s, a->ndim, a->shape));
    return 0;
}

static void set_meta(oari_meta *m, oar_dtype d, int ndim, const int64_t *shape) {
    m->dtype = d;
    m->ndim = ndim;
    memcpy(m->shape, shape, (size_t)ndim * sizeof *shape);
}

static int infer_solve(oari_infer *c) {
    const oar_tensor *a = c->in[0], *b = c->in[1];
    int st = check_square("linalg_solve", "A", a);
    if (st) return st;
    if (!lapack_dtype(b->dtype)) return bad_dtype("linalg_solve", "B", b->dtype);
    char sa[200], sb[200];
    if (b->ndim != a->ndim || b->shape[b->ndim - 2] != a->shape[a->ndim - 1] ||
        memcmp(a->shape, b->shape, (size_t)(a->ndim - 2) * sizeof *a->shape))
        return oari_error(OAR_ERR_INVALID,
                          "linalg_solve: A [..., n, n] and B [..., n, k] must have the same "
                          "batch dims and n, got shapes %s and %s",
                          oari_shape_str(sa, a->ndim, a->shape),
                          oari_shape_str(sb, b->ndim, b->shape));
    oar_dtype d = oari_result_type(2, c->in);
    set_meta(&c->out[0], d, b->ndim, b->shape);
    c->in_dtype[0] = c->in_dtype[1] = c->kernel_dtype = d;
    return 0;
}

static int infer_slogdet(oari_infer *c) {
    const oar_tensor *a = c->in[0];
    int st = check_square("linalg_slogdet", "A", a);
    if (st) return st;
    set_meta(&c->out[0], a->dtype, a->ndim - 2, a->shape);
    set_meta(&c->out[1], real_of(a->dtype), a->ndim - 2, a->shape);
    return 0;
}

static int infer_cholesky(oari_infer *c) {
    int st = check_square("linalg_cholesky", "A", c->in[0]);
    if (st) return st;
    oari_meta_from(&c->out[0], c->in[0]);
    return 0;
}

static int infer_eigh(oari_infer *c) {
    const oar_tensor *a = c->in[0];
    int st = check_square("linalg_eigh", "A", a);
    if (st) return st;
    set_meta(&c->out[0], real_of(a->dtype), a->ndim - 1, a->shape);
    oari_meta_from(&c->out[1], a);
    return 0;
}

/* ---- gradient rules (ops only) ------------------------------------------- */

/* x^H over the last two dims (x^T for real x). */
static oar_tensor *mH(oar_tensor *x) {
    oar_tensor *t = oar_transpose(x, -2, -1);
    return t && oar_dtype_is_complex(t->dtype) ? oar_conj(t) : t;
}

/* An [n, n] constant on ref's device: value on the diagonal, below it and
 * above it (identity: 1, 0, 0). */
static oar_tensor *tri_const(oar_tensor *ref, oar_dtype d, double diag, double below,
                             double above) {
    if (!ref) return NULL;
    int64_t n = ref->shape[ref->ndim - 1], shape[2] = {n, n};
    oar_tensor *m = oar_empty(d, 2, shape, NULL);
    if (!m) return NULL;
    char *p = oar_tensor_data(m);
    size_t es = oar_dtype_size(d);
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++) {
            double v = i == j ? diag : i > j ? below : above, z[2] = {v, 0};
            float f[2] = {(float)v, 0};
            memcpy(p + (size_t)(i * n + j) * es, d == OAR_F32 || d == OAR_C64 ? (void *)f : (void *)z,
                   es);
        }
    return oar_tensor_device(ref) == oar_device_cpu() ? m : oar_tensor_to(m, oar_tensor_device(ref));
}

static oar_tensor *solve_call(oar_tensor *a, oar_tensor *b, int caller) {
    oari_attrs at = {.ni = 1, .i = {caller}};
    return oari_call2(OARI_OP_linalg_solve, a, b, &at);
}

/* X = A^-1 B: gB = A^-H gX, gA = -gB X^H. */
static int grad_solve(oari_grad_ctx *g) {
    oar_tensor *gx = g->gout[0];
    if (!gx) return 0;
    oar_tensor *gb = solve_call(mH(g->in[0]), gx, 0);
    if (g->needs[1] && !(g->gin[1] = gb)) return oari_fail_status();
    if (g->needs[0] && !(g->gin[0] = oar_neg(oar_matmul(gb, mH(g->out[0])))))
        return oari_fail_status();
    return 0;
}

/* d logabsdet = Re tr(A^-1 dA), d arg(sign) = Im tr(A^-1 dA): gA = (gl -
 * i Im(conj(gs) sign)) A^-H (PyTorch's slogdet_backward); a real sign is
 * piecewise constant and has no gradient. */
static int grad_slogdet(oari_grad_ctx *g) {
    oar_tensor *gs = g->gout[0], *gl = g->gout[1], *a = g->in[0], *sign = g->out[0];
    bool cplx = oar_dtype_is_complex(g->in_meta[0].dtype);
    if (!g->needs[0] || (!gl && !(cplx && gs))) return 0;
    oar_tensor *k = gl;
    if (cplx && gs) {
        oar_tensor *im = oar_neg(oar_imag(oar_mul(oar_conj(gs), sign)));
        if (!k) k = oar_zeros_like(im);
        k = oar_complex(k, im);
    }
    oar_tensor *inv = oar_linalg_inv(a);
    k = k ? oar_unsqueeze(oar_unsqueeze(k, -1), -1) : NULL;
    return (g->gin[0] = oar_mul(k, mH(inv))) ? 0 : oari_fail_status();
}

/* A = L L^H: gA = L^-H Phi(L^H gL) L^-1, symmetrized, Phi the lower
 * triangle with the diagonal halved (PyTorch's cholesky_backward). */
static int grad_cholesky(oari_grad_ctx *g) {
    oar_tensor *gl = g->gout[0], *l = g->out[0];
    if (!gl || !g->needs[0]) return 0;
    if (g->attrs->ni > 0 && g->attrs->i[0]) l = mH(l), gl = mH(gl);
    oar_tensor *linv = oar_linalg_inv(l);
    oar_tensor *phi = oar_mul(oar_matmul(mH(l), gl),
                              tri_const(l, real_of(g->out_meta[0].dtype), 0.5, 1, 0));
    oar_tensor *ga = oar_matmul(oar_matmul(mH(linv), phi), linv);
    return (g->gin[0] = oar_mul_scalar(oar_add(ga, mH(ga)), 0.5)) ? 0 : oari_fail_status();
}

/* A = V diag(w) V^H: gA = V (diag(gw) + skew(V^H gV) / E) V^H with E_ij =
 * w_j - w_i off the diagonal (PyTorch's linalg_eig_backward, Hermitian
 * case); equal eigenvalues divide by zero (inf/nan), as in PyTorch. */
static int grad_eigh(oari_grad_ctx *g) {
    oar_tensor *gw = g->gout[0], *gv = g->gout[1], *w = g->out[0], *v = g->out[1];
    if (!g->needs[0] || (!gw && !gv)) return 0;
    oar_dtype rd = real_of(g->out_meta[1].dtype);
    oar_tensor *eye = tri_const(v, rd, 1, 0, 0), *mid = NULL;
    if (gv) {
        oar_tensor *x = oar_matmul(mH(v), gv);
        oar_tensor *skew = oar_mul_scalar(oar_sub(x, mH(x)), 0.5);
        oar_tensor *e = oar_add(oar_sub(oar_unsqueeze(w, -2), oar_unsqueeze(w, -1)), eye);
        mid = oar_mul(oar_div(skew, e), tri_const(v, rd, 0, 1, 1));
    }
    if (gw) {
        oar_tensor *d = oar_mul(oar_unsqueeze(gw, -1), eye);
        mid = mid ? oar_add(mid, d) : d;
    }
    return (g->gin[0] = oar_matmul(v, oar_matmul(mid, mH(v)))) ? 0 : oari_fail_status();
}

const oari_op_def oari_def_linalg_solve = {
    .name = "linalg_solve", .n_in = 2, .n_out = 1, .fusion = OARI_FUSE_OPAQUE,
    .saved = OARI_SAVE_IN(0) | OARI_SAVE_OUT(0), .infer = infer_solve, .grad = grad_solve,
};
const oari_op_def oari_def_linalg_slogdet = {
    .name = "linalg_slogdet", .n_in = 1, .n_out = 2, .fusion = OARI_FUSE_OPAQUE,
    .saved = OARI_SAVE_IN(0) | OARI_SAVE_OUT(0), .infer = infer_slogdet, .grad = grad_slogdet,
};
const oari_op_def oari_def_linalg_cholesky = {
    .name = "linalg_cholesky", .n_in = 1, .n_out = 1, .fusion = OARI_FUSE_OPAQUE,
    .saved = OARI_SAVE_OUT(0), .infer = infer_cholesky, .grad = grad_cholesky,
};
const oari_op_def oari_def_linalg_eigh = {
    .name = "linalg_eigh", .n_in = 1, .n_out = 2, .fusion = OARI_FUSE_OPAQUE,
    .saved = OARI_SAVE_OUT(0) | OARI_SAVE_OUT(1), .infer = infer_eigh, .grad = grad_eigh,
};

/* ---- public functions ----------------------------------------------------- */

static bool null_arg(const char *op, const oar_tensor *a) {
    if (a) return false;
    if (!oari_error_pending()) oari_error(OAR_ERR_INVALID, "%s: input A is NULL", op);
    return true;
}

oar_tensor *oar_linalg_solve(oar_tensor *a, oar_tensor *b) {
    if (null_arg("linalg_solve", a)) return NULL;
    if (!b) {
        if (!oari_error_pending()) oari_error(OAR_ERR_INVALID, "linalg_solve: input B is NULL");
        return NULL;
    }
    if (check_square("linalg_solve", "A", a)) return NULL;
    if (!lapack_dtype(b->dtype)) return bad_dtype("linalg_solve", "B", b->dtype), NULL;
    /* torch.linalg.solve: B is a vector when 1-D or shaped A.shape[:-1] */
    bool vec = b->ndim == 1 || (b->ndim == a->ndim - 1 &&
                                !memcmp(b->shape, a->shape, (size_t)b->ndim * sizeof *b->shape));
    int64_t n = a->shape[a->ndim - 1];
    char sa[200], sb[200];
    if ((vec ? b->shape[b->ndim - 1] : b->ndim >= 2 ? b->shape[b->ndim - 2] : -1) != n)
        return oari_error(OAR_ERR_INVALID,
                          "linalg_solve: B must be [..., n, k] or [..., n] for A [..., n, n], got "
                          "shapes %s (A) and %s (B)", oari_shape_str(sa, a->ndim, a->shape),
                          oari_shape_str(sb, b->ndim, b->shape)), NULL;
    oar_pool *p = oar_pool_push();
    oar_tensor *bm = vec ? oar_unsqueeze(b, -1) : b;
    int64_t batch[OAR_MAX_DIMS], shape[OAR_MAX_DIMS];
    int nb = oari_broadcast_shapes("linalg_solve", a->ndim - 2, a->shape, bm->ndim - 2, bm->shape,
                                   batch);
    oar_tensor *x = NULL;
    if (nb < 0 || nb + 2 > OAR_MAX_DIMS) {
        oari_error(OAR_ERR_INVALID, "linalg_solve: batch dims of shapes %s (A) and %s (B) do "
                   "not broadcast", oari_shape_str(sa, a->ndim, a->shape),
                   oari_shape_str(sb, b->ndim, b->shape));
    } else {
        memcpy(shape, batch, (size_t)nb * sizeof *batch);
        shape[nb] = n, shape[nb + 1] = n;
        oar_tensor *ae = a->ndim == nb + 2 && !memcmp(a->shape, shape, (size_t)nb * sizeof *shape)
                             ? a : oar_expand(a, nb + 2, shape);
        shape[nb + 1] = bm->shape[bm->ndim - 1];
        oar_tensor *be = bm->ndim == nb + 2 && !memcmp(bm->shape, shape, (size_t)nb * sizeof *shape)
                             ? bm : oar_expand(bm, nb + 2, shape);
        x = solve_call(ae, be, 0);
        if (vec && x) x = oar_squeeze(x, -1);
    }
    return oari_pool_return(p, x);
}

oar_tensor *oar_linalg_inv(oar_tensor *a) {
    if (null_arg("linalg_inv", a) || check_square("linalg_inv", "A", a)) return NULL;
    oar_pool *p = oar_pool_push();
    oar_tensor *eye = tri_const(a, a->dtype, 1, 0, 0);
    oar_tensor *x = solve_call(a, eye ? oar_expand(eye, a->ndim, a->shape) : NULL, 1);
    return oari_pool_return(p, x);
}

/* The two outputs of op into *o0 / *o1 (each may be NULL: dropped). */
static int call_two(oari_op op, oar_tensor *a, const oari_attrs *at, oar_tensor **o0,
                    oar_tensor **o1) {
    oar_tensor *out[OARI_MAX_OUT];
    int st = oari_dispatch(op, 1, &a, at, out);
    if (st) return st;
    oar_tensor *r0 = oari_pool_adopt(out[0]), *r1 = oari_pool_adopt(out[1]);
    if (!r0 || !r1) return oari_fail_status();
    if (o0) *o0 = r0;
    if (o1) *o1 = r1;
    return 0;
}

int oar_linalg_slogdet(oar_tensor *a, oar_tensor **sign, oar_tensor **logabsdet) {
    if (sign) *sign = NULL;
    if (logabsdet) *logabsdet = NULL;
    if (null_arg("linalg_slogdet", a)) return oari_fail_status();
    if (!sign && !logabsdet)
        return oari_error(OAR_ERR_INVALID, "linalg_slogdet: sign and logabsdet are both NULL");
    return call_two(OARI_OP_linalg_slogdet, a, NULL, sign, logabsdet);
}

oar_tensor *oar_linalg_det(oar_tensor *a) {
    if (null_arg("linalg_det", a) || check_square("linalg_det", "A", a)) return NULL;
    oar_pool *p = oar_pool_push();
    oar_tensor *s = NULL, *l = NULL;
    oar_tensor *d = call_two(OARI_OP_linalg_slogdet, a, NULL, &s, &l) ? NULL : oar_mul(s, oar_exp(l));
    return oari_pool_return(p, d);
}

oar_tensor *oar_linalg_cholesky(oar_tensor *a, bool upper) {
    if (null_arg("linalg_cholesky", a)) return NULL;
    oari_attrs at = {.ni = 1, .i = {upper}};
    return oari_call1(OARI_OP_linalg_cholesky, a, &at);
}

int oar_linalg_eigh(oar_tensor *a, const char *uplo, oar_tensor **w, oar_tensor **v) {
    if (w) *w = NULL;
    if (v) *v = NULL;
    if (null_arg("linalg_eigh", a)) return oari_fail_status();
    if (!w && !v) return oari_error(OAR_ERR_INVALID, "linalg_eigh: w and V are both NULL");
    bool upper = uplo && (!strcmp(uplo, "U") || !strcmp(uplo, "u"));
    if (uplo && !upper && strcmp(uplo, "L") && strcmp(uplo, "l"))
        return oari_error(OAR_ERR_INVALID, "linalg_eigh: UPLO must be \"L\" or \"U\", got \"%s\"",
                          uplo);
    oari_attrs at = {.ni = 1, .i = {upper}};
    return call_two(OARI_OP_linalg_eigh, a, &at, w, v);
}

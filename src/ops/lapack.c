/* Dense linear algebra through LAPACK (src/ops/defs/lapack.def): the
 * primitives linalg_solve, linalg_slogdet, linalg_cholesky, linalg_eigh,
 * linalg_qr and linalg_svd (shape rules; gradient rules written with ops,
 * so they differentiate again), and the public functions of
 * include/oar/linalg.h, among them the composites inv (solve against I),
 * det (sign * exp(logabsdet)), svdvals, matrix_norm, pinv and lstsq (over
 * svd) and matrix_exp (Pade over matmul and solve).
 * Kernels: src/backends/cpu/cpu_lapack.c. */
#include "op.h"

#include <oar/autograd.h>
#include <oar/complex.h>
#include <oar/device.h>
#include <oar/linalg.h>

#include <float.h>
#include <math.h>
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

/* A batch of matrices [..., m, n] of a LAPACK dtype. */
static int check_matrix(const char *op, const char *what, const oar_tensor *a) {
    char s[200];
    if (!lapack_dtype(a->dtype)) return bad_dtype(op, what, a->dtype);
    if (a->ndim < 2)
        return oari_error(OAR_ERR_INVALID, "%s: %s must be a batch of matrices [..., m, n], got "
                          "shape %s", op, what, oari_shape_str(s, a->ndim, a->shape));
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

/* Shape of out[j] of qr / svd: A's with the last two dims set to r, c
 * (c < 0: the last dim dropped). */
static void set_mat(oari_meta *o, oar_dtype d, const oar_tensor *a, int64_t r, int64_t c) {
    set_meta(o, d, a->ndim - (c < 0), a->shape);
    o->shape[a->ndim - 2] = r;
    if (c >= 0) o->shape[a->ndim - 1] = c;
}

static int infer_qr(oari_infer *c) {
    const oar_tensor *a = c->in[0];
    int st = check_matrix("linalg_qr", "A", a);
    if (st) return st;
    int64_t m = a->shape[a->ndim - 2], n = a->shape[a->ndim - 1], k = m < n ? m : n;
    int64_t qc = c->attrs && c->attrs->ni > 0 && c->attrs->i[0] ? m : k;
    set_mat(&c->out[0], a->dtype, a, m, qc);
    set_mat(&c->out[1], a->dtype, a, qc, n);
    return 0;
}

static int infer_svd(oari_infer *c) {
    const oar_tensor *a = c->in[0];
    int st = check_matrix("linalg_svd", "A", a);
    if (st) return st;
    int64_t m = a->shape[a->ndim - 2], n = a->shape[a->ndim - 1], k = m < n ? m : n;
    bool full = c->attrs && c->attrs->ni > 0 && c->attrs->i[0];
    set_mat(&c->out[0], a->dtype, a, m, full ? m : k);
    set_mat(&c->out[1], real_of(a->dtype), a, k, -1);
    set_mat(&c->out[2], a->dtype, a, full ? n : k, n);
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

/* A = Q R with Q [..., m, n] and R [..., n, n] (m >= n): gA = (gQ + Q
 * (P + P^H)) R^-H, P = Phi(R gR^H - gQ^H Q) (Phi: the lower triangle with
 * the diagonal halved; PyTorch's linalg_qr_backward, whose diagonal term is
 * real because LAPACK's R has a real diagonal). Either gradient may be
 * NULL, not both. */
static oar_tensor *qr_grad_tall(oar_tensor *gq, oar_tensor *gr, oar_tensor *q, oar_tensor *r,
                                oar_dtype rd) {
    oar_tensor *m = gr ? oar_matmul(r, mH(gr)) : NULL;
    if (gq) {
        oar_tensor *t = oar_matmul(mH(gq), q);
        m = m ? oar_sub(m, t) : oar_neg(t);
    }
    oar_tensor *phi = oar_mul(m, tri_const(r, rd, 0.5, 1, 0));
    oar_tensor *b = oar_matmul(q, oar_add(phi, mH(phi)));
    if (gq) b = oar_add(b, gq);
    return mH(solve_call(r, mH(b), 0)); /* b R^-H = (R^-1 b^H)^H */
}

/* m >= n: the rule above (mode "complete" only when m = n: Q's last m - n
 * columns are not unique, as PyTorch refuses). m < n: A = [X | Y] with X =
 * Q U, Y = Q V (R = [U | V]): gY = Q gV, gX by the rule above with gQ + Y
 * gV^H for gQ (PyTorch's wide case). */
static int grad_qr(oari_grad_ctx *g) {
    oar_tensor *gq = g->gout[0], *gr = g->gout[1], *q = g->out[0], *r = g->out[1];
    if (!g->needs[0] || (!gq && !gr)) return 0;
    const oari_meta *a = &g->in_meta[0];
    int64_t m = a->shape[a->ndim - 2], n = a->shape[a->ndim - 1];
    oar_dtype rd = real_of(a->dtype);
    if (m >= n) {
        if (m > n && g->attrs->ni > 0 && g->attrs->i[0])
            return oari_error(OAR_ERR_UNSUPPORTED,
                              "linalg_qr: no gradient for mode \"complete\" with more rows than "
                              "columns (%lld > %lld): Q's last columns are not unique; hint: use "
                              "mode \"reduced\"", (long long)m, (long long)n);
        return (g->gin[0] = qr_grad_tall(gq, gr, q, r, rd)) ? 0 : oari_fail_status();
    }
    oar_tensor *u = oar_slice(r, -1, 0, m, 1), *v = oar_slice(r, -1, m, n, 1);
    oar_tensor *gu = gr ? oar_slice(gr, -1, 0, m, 1) : NULL;
    oar_tensor *gv = gr ? oar_slice(gr, -1, m, n, 1) : NULL;
    if (gv) {
        oar_tensor *t = oar_matmul(oar_matmul(q, v), mH(gv));
        gq = gq ? oar_add(gq, t) : t;
    }
    oar_tensor *parts[2] = {qr_grad_tall(gq, gu, q, u, rd),
                            gv ? oar_matmul(q, gv) : oar_zeros_like(v)};
    return parts[0] && parts[1] && (g->gin[0] = oar_concat(2, parts, -1)) ? 0 : oari_fail_status();
}

/* A = U diag(S) Vh (PyTorch's svd_backward; full_matrices: U and Vh cut to
 * their first k = min(m, n) columns / rows, as PyTorch, the rest not being
 * unique). Inner gradient, k x k:
 *   G = F o (skew(U^H gU) S + S skew(V^H gV)) + diag(gS)
 *       + diag(diag(skew(U^H gU)) / 2S)  (complex only)
 * with F_ij = 1/(s_j^2 - s_i^2) off the diagonal, 0 on it, skew(X) = X - X^H;
 * then gA = U G Vh, plus (I - U U^H) gU S^-1 Vh when m > n and gU is given,
 * or U S^-1 gVh (I - V V^H) when m < n and gVh is given. Equal (or zero)
 * singular values give inf/nan once gU or gVh is given, as in PyTorch; a
 * loss must not depend on the sign (phase) of singular vectors, which the
 * rule assumes and does not check. */
static int grad_svd(oari_grad_ctx *g) {
    oar_tensor *gu = g->gout[0], *gs = g->gout[1], *gvh = g->gout[2];
    oar_tensor *u = g->out[0], *s = g->out[1], *vh = g->out[2];
    if (!g->needs[0] || (!gu && !gs && !gvh)) return 0;
    const oari_meta *a = &g->in_meta[0];
    int64_t m = a->shape[a->ndim - 2], n = a->shape[a->ndim - 1], k = m < n ? m : n;
    oar_dtype rd = real_of(a->dtype);
    if (g->attrs->ni > 0 && g->attrs->i[0]) { /* full_matrices */
        u = oar_slice(u, -1, 0, k, 1), vh = oar_slice(vh, -2, 0, k, 1);
        if (gu) gu = oar_slice(gu, -1, 0, k, 1);
        if (gvh) gvh = oar_slice(gvh, -2, 0, k, 1);
    }
    oar_tensor *ga;
    if (!gu && !gvh) {
        ga = m >= n ? oar_matmul(u, oar_mul(oar_unsqueeze(gs, -1), vh))
                    : oar_matmul(oar_mul(u, oar_unsqueeze(gs, -2)), vh);
        return (g->gin[0] = ga) ? 0 : oari_fail_status();
    }
    oar_tensor *eye = tri_const(s, rd, 1, 0, 0), *sj = oar_unsqueeze(s, -2),
               *si = oar_unsqueeze(s, -1), *uhgu = NULL, *num = NULL;
    if (gu) {
        oar_tensor *x = oar_matmul(mH(u), gu);
        uhgu = oar_sub(x, mH(x));
        num = oar_mul(uhgu, sj);
    }
    if (gvh) {
        oar_tensor *x = oar_matmul(vh, mH(gvh));
        oar_tensor *t = oar_mul(si, oar_sub(x, mH(x)));
        num = num ? oar_add(num, t) : t;
    }
    oar_tensor *s2 = oar_square(s);
    oar_tensor *e = oar_add(oar_sub(oar_unsqueeze(s2, -2), oar_unsqueeze(s2, -1)), eye);
    oar_tensor *mid = oar_mul(oar_div(num, e), tri_const(s, rd, 0, 1, 1));
    if (gs) mid = oar_add(mid, oar_mul(oar_unsqueeze(gs, -1), eye));
    if (gu && oar_dtype_is_complex(a->dtype)) {
        oar_tensor *d = oar_div(oar_diagonal(uhgu, 0, -2, -1), oar_mul_scalar(s, 2));
        mid = oar_add(mid, oar_mul(oar_unsqueeze(d, -1), eye));
    }
    if (m > n && gu) { /* [U G + (I - U U^H) gU S^-1] Vh */
        oar_tensor *gus = oar_div(gu, sj);
        ga = oar_add(oar_matmul(u, mid), oar_sub(gus, oar_matmul(u, oar_matmul(mH(u), gus))));
        ga = oar_matmul(ga, vh);
    } else if (m < n && gvh) { /* U [G Vh + S^-1 gVh (I - V V^H)] */
        oar_tensor *sgv = oar_div(gvh, si);
        ga = oar_add(oar_matmul(mid, vh), oar_sub(sgv, oar_matmul(oar_matmul(sgv, mH(vh)), vh)));
        ga = oar_matmul(u, ga);
    } else {
        ga = m >= n ? oar_matmul(u, oar_matmul(mid, vh)) : oar_matmul(oar_matmul(u, mid), vh);
    }
    return (g->gin[0] = ga) ? 0 : oari_fail_status();
}

const oari_op_def oari_def_linalg_solve = {
    .name = "linalg_solve", .n_in = 2, .n_out = 1, .fusion = OARI_FUSE_OPAQUE, .flags = OARI_F_NO_HALF,
    .saved = OARI_SAVE_IN(0) | OARI_SAVE_OUT(0), .infer = infer_solve, .grad = grad_solve,
};
const oari_op_def oari_def_linalg_slogdet = {
    .name = "linalg_slogdet", .n_in = 1, .n_out = 2, .fusion = OARI_FUSE_OPAQUE, .flags = OARI_F_NO_HALF,
    .saved = OARI_SAVE_IN(0) | OARI_SAVE_OUT(0), .infer = infer_slogdet, .grad = grad_slogdet,
};
const oari_op_def oari_def_linalg_cholesky = {
    .name = "linalg_cholesky", .n_in = 1, .n_out = 1, .fusion = OARI_FUSE_OPAQUE, .flags = OARI_F_NO_HALF,
    .saved = OARI_SAVE_OUT(0), .infer = infer_cholesky, .grad = grad_cholesky,
};
const oari_op_def oari_def_linalg_eigh = {
    .name = "linalg_eigh", .n_in = 1, .n_out = 2, .fusion = OARI_FUSE_OPAQUE, .flags = OARI_F_NO_HALF,
    .saved = OARI_SAVE_OUT(0) | OARI_SAVE_OUT(1), .infer = infer_eigh, .grad = grad_eigh,
};

const oari_op_def oari_def_linalg_qr = {
    .name = "linalg_qr", .n_in = 1, .n_out = 2, .fusion = OARI_FUSE_OPAQUE, .flags = OARI_F_NO_HALF,
    .saved = OARI_SAVE_OUT(0) | OARI_SAVE_OUT(1), .infer = infer_qr, .grad = grad_qr,
};
const oari_op_def oari_def_linalg_svd = {
    .name = "linalg_svd", .n_in = 1, .n_out = 3, .fusion = OARI_FUSE_OPAQUE, .flags = OARI_F_NO_HALF,
    .saved = OARI_SAVE_OUT(0) | OARI_SAVE_OUT(1) | OARI_SAVE_OUT(2), .infer = infer_svd,
    .grad = grad_svd,
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

/* The n outputs of op into *o[j] (each may be NULL: dropped). */
static int call_n(oari_op op, oar_tensor *a, const oari_attrs *at, int n, oar_tensor **const *o) {
    oar_tensor *out[OARI_MAX_OUT], *r[OARI_MAX_OUT];
    int st = oari_dispatch(op, 1, &a, at, out);
    if (st) return st;
    bool ok = true;
    for (int j = 0; j < n; j++) ok = (r[j] = oari_pool_adopt(out[j])) && ok;
    if (!ok) return oari_fail_status();
    for (int j = 0; j < n; j++)
        if (o[j]) *o[j] = r[j];
    return 0;
}

static int call_two(oari_op op, oar_tensor *a, const oari_attrs *at, oar_tensor **o0,
                    oar_tensor **o1) {
    return call_n(op, a, at, 2, (oar_tensor **const[]){o0, o1});
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

int oar_linalg_qr(oar_tensor *a, const char *mode, oar_tensor **q, oar_tensor **r) {
    if (q) *q = NULL;
    if (r) *r = NULL;
    if (null_arg("linalg_qr", a)) return oari_fail_status();
    bool complete = mode && !strcmp(mode, "complete"), r_only = mode && !strcmp(mode, "r");
    if (mode && !complete && !r_only && strcmp(mode, "reduced"))
        return oari_error(OAR_ERR_INVALID, "linalg_qr: mode must be \"reduced\", \"complete\" or "
                          "\"r\", got \"%s\"", mode);
    if (r_only ? !r : !q && !r)
        return oari_error(OAR_ERR_INVALID, r_only ? "linalg_qr: R is NULL (mode \"r\" returns R "
                          "only)" : "linalg_qr: Q and R are both NULL");
    oari_attrs at = {.ni = 1, .i = {complete}};
    return call_two(OARI_OP_linalg_qr, a, &at, r_only ? NULL : q, r);
}

int oar_linalg_svd(oar_tensor *a, bool full_matrices, oar_tensor **u, oar_tensor **s,
                   oar_tensor **vh) {
    if (u) *u = NULL;
    if (s) *s = NULL;
    if (vh) *vh = NULL;
    if (null_arg("linalg_svd", a)) return oari_fail_status();
    if (!u && !s && !vh) return oari_error(OAR_ERR_INVALID, "linalg_svd: U, S and Vh are all NULL");
    oari_attrs at = {.ni = 1, .i = {full_matrices}};
    return call_n(OARI_OP_linalg_svd, a, &at, 3, (oar_tensor **const[]){u, s, vh});
}

oar_tensor *oar_linalg_svdvals(oar_tensor *a) {
    if (null_arg("linalg_svdvals", a) || check_matrix("linalg_svdvals", "A", a)) return NULL;
    oar_tensor *s = NULL;
    oari_attrs at = {.ni = 1, .i = {0}};
    return call_n(OARI_OP_linalg_svd, a, &at, 3, (oar_tensor **const[]){NULL, &s, NULL}) ? NULL : s;
}

/* ---- composites over svdvals, svd and solve ------------------------------ */

oar_tensor *oar_linalg_matrix_norm(oar_tensor *a, const char *ord, bool keepdim) {
    static const char *const ords[] = {"fro", "nuc", "2", "-2", "1", "-1", "inf", "-inf"};
    if (null_arg("linalg_matrix_norm", a) || check_matrix("linalg_matrix_norm", "A", a))
        return NULL;
    int o = 0;
    if (ord)
        for (o = 0; o < 8 && strcmp(ord, ords[o]); o++) {}
    if (o == 8)
        return oari_error(OAR_ERR_INVALID,
                          "linalg_matrix_norm: ord must be \"fro\", \"nuc\", \"2\", \"-2\", "
                          "\"1\", \"-1\", \"inf\" or \"-inf\", got \"%s\"", ord), NULL;
    oar_pool *p = oar_pool_push();
    const int64_t both[2] = {-2, -1}, last[1] = {-1}, rows[1] = {-2};
    oar_tensor *r;
    if (o == 0) {
        r = oar_norm(a, 2, 2, both, keepdim);
    } else if (o <= 3) { /* of the singular values */
        oar_tensor *s = oar_linalg_svdvals(a);
        r = o == 1 ? oar_sum(s, 1, last, keepdim)
            : o == 2 ? oar_amax(s, 1, last, keepdim) : oar_amin(s, 1, last, keepdim);
        if (keepdim) r = oar_unsqueeze(r, -1);
    } else { /* 1: the largest column sum of |A|, inf: the largest row sum */
        oar_tensor *sums = oar_sum(oar_abs(a), 1, o <= 5 ? rows : last, true);
        r = o == 4 || o == 6 ? oar_amax(sums, 1, o <= 5 ? last : rows, true)
                             : oar_amin(sums, 1, o <= 5 ? last : rows, true);
        if (!keepdim) r = oar_squeeze(oar_squeeze(r, -1), -1);
    }
    return oari_pool_return(p, r);
}

/* V diag(S+) U^H, S+ = 1/s where s > max(m, n) eps s_max, else 0
 * (torch.linalg.pinv's default cutoff, rtol = max(m, n) eps, atol = 0). */
oar_tensor *oar_linalg_pinv(oar_tensor *a) {
    if (null_arg("linalg_pinv", a) || check_matrix("linalg_pinv", "A", a)) return NULL;
    int64_t m = a->shape[a->ndim - 2], n = a->shape[a->ndim - 1], shape[OAR_MAX_DIMS];
    memcpy(shape, a->shape, (size_t)a->ndim * sizeof *shape);
    shape[a->ndim - 2] = n, shape[a->ndim - 1] = m;
    if (m == 0 || n == 0) return oar_zeros(a->dtype, a->ndim, shape);
    oar_pool *p = oar_pool_push();
    oar_tensor *u = NULL, *s = NULL, *vh = NULL, *r = NULL;
    oari_attrs at = {.ni = 1, .i = {0}};
    if (!call_n(OARI_OP_linalg_svd, a, &at, 3, (oar_tensor **const[]){&u, &s, &vh})) {
        const int64_t last[1] = {-1};
        double eps = real_of(a->dtype) == OAR_F32 ? FLT_EPSILON : DBL_EPSILON;
        oar_tensor *cut = oar_mul_scalar(oar_amax(s, 1, last, true), (double)(m > n ? m : n) * eps);
        oar_tensor *keep = oar_gt(s, cut); /* (no gradient through the cutoff) */
        oar_tensor *safe = oar_where(keep, s, oar_full_like(s, 1)); /* 1/0 stays out of the tape */
        oar_tensor *sinv = oar_where(keep, oar_reciprocal(safe), oar_zeros_like(s));
        r = oar_matmul(oar_mul(mH(vh), oar_unsqueeze(sinv, -2)), mH(u));
    }
    return oari_pool_return(p, r);
}

/* The solution of torch.linalg.lstsq: pinv(A) B, the minimum-norm least
 * squares solution with pinv's cutoff. */
oar_tensor *oar_linalg_lstsq(oar_tensor *a, oar_tensor *b) {
    if (null_arg("linalg_lstsq", a)) return NULL;
    if (!b) {
        if (!oari_error_pending()) oari_error(OAR_ERR_INVALID, "linalg_lstsq: input B is NULL");
        return NULL;
    }
    if (check_matrix("linalg_lstsq", "A", a)) return NULL;
    if (!lapack_dtype(b->dtype)) return bad_dtype("linalg_lstsq", "B", b->dtype), NULL;
    bool vec = b->ndim == 1 || (b->ndim == a->ndim - 1 &&
                                !memcmp(b->shape, a->shape, (size_t)b->ndim * sizeof *b->shape));
    int64_t m = a->shape[a->ndim - 2], batch[OAR_MAX_DIMS];
    char sa[200], sb[200];
    if ((vec ? b->shape[b->ndim - 1] : b->ndim >= 2 ? b->shape[b->ndim - 2] : -1) != m)
        return oari_error(OAR_ERR_INVALID,
                          "linalg_lstsq: B must be [..., m, k] or [..., m] for A [..., m, n], got "
                          "shapes %s (A) and %s (B)", oari_shape_str(sa, a->ndim, a->shape),
                          oari_shape_str(sb, b->ndim, b->shape)), NULL;
    int bn = vec ? b->ndim - 1 : b->ndim - 2;
    if (oari_broadcast_shapes("linalg_lstsq", a->ndim - 2, a->shape, bn, b->shape, batch) < 0)
        return NULL;
    oar_pool *p = oar_pool_push();
    oar_tensor *x = oar_matmul(oar_linalg_pinv(a), vec ? oar_unsqueeze(b, -1) : b);
    return oari_pool_return(p, vec && x ? oar_squeeze(x, -1) : x);
}

/* exp(A) by scaling and squaring with the [13/13] Pade approximant
 * (Higham, "The scaling and squaring method for the matrix exponential
 * revisited", 2005): A / 2^s with s from the largest 1-norm in the batch
 * (read from A's values, without gradient), r = (V - U)^-1 (V + U) with U,
 * V its odd and even parts in A, then squared s times; all ops, so the
 * gradient is that of the approximant, to any order. */
oar_tensor *oar_linalg_matrix_exp(oar_tensor *a) {
    static const double b[14] = {64764752532480000.0, 32382376266240000.0, 7771770303897600.0,
                                 1187353796428800.0,  129060195264000.0,   10559470521600.0,
                                 670442572800.0,      33522128640.0,       1323241920.0,
                                 40840800.0,          960960.0,            16380.0,
                                 182.0,               1.0};
    const double theta13 = 5.371920351148152;
    if (null_arg("linalg_matrix_exp", a) || check_square("linalg_matrix_exp", "A", a)) return NULL;
    if (oar_tensor_numel(a) == 0) return oar_clone(a);
    oar_pool *p = oar_pool_push();
    oar_no_grad_push();
    oar_tensor *nrm = oar_linalg_matrix_norm(a, "1", false);
    oar_tensor *top = nrm ? oar_amax(nrm, 0, NULL, false) : NULL;
    oar_no_grad_pop();
    oar_tensor *r = NULL;
    double norm = top ? oar_tensor_item(top) : NAN;
    if (top) {
        int s = norm > theta13 ? (int)ceil(log2(norm / theta13)) : 0;
        if (!isfinite(norm)) s = 0; /* inf / nan: they propagate */
        oar_tensor *x = s ? oar_mul_scalar(a, ldexp(1.0, -s)) : a;
        oar_tensor *eye = tri_const(a, a->dtype, 1, 0, 0);
        oar_tensor *x2 = oar_matmul(x, x), *x4 = oar_matmul(x2, x2), *x6 = oar_matmul(x4, x2);
        oar_tensor *u = oar_add(oar_add(oar_mul_scalar(x6, b[13]), oar_mul_scalar(x4, b[11])),
                                oar_mul_scalar(x2, b[9]));
        u = oar_add(oar_add(oar_matmul(x6, u), oar_mul_scalar(x6, b[7])),
                    oar_add(oar_mul_scalar(x4, b[5]), oar_mul_scalar(x2, b[3])));
        u = oar_matmul(x, oar_add(u, oar_mul_scalar(eye, b[1])));
        oar_tensor *v = oar_add(oar_add(oar_mul_scalar(x6, b[12]), oar_mul_scalar(x4, b[10])),
                                oar_mul_scalar(x2, b[8]));
        v = oar_add(oar_add(oar_matmul(x6, v), oar_mul_scalar(x6, b[6])),
                    oar_add(oar_mul_scalar(x4, b[4]), oar_mul_scalar(x2, b[2])));
        v = oar_add(v, oar_mul_scalar(eye, b[0]));
        r = solve_call(oar_sub(v, u), oar_add(v, u), 2);
        for (int i = 0; i < s && r; i++) r = oar_matmul(r, r);
    }
    return oari_pool_return(p, r);
}

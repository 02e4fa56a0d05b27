/* Linear algebra through LAPACK (include/oar/linalg.h): solve, inv, det,
 * slogdet, cholesky, eigh, qr, svd, svdvals, matrix_norm, pinv, lstsq and
 * matrix_exp against NumPy values (mpmath for expm; tests/ref/
 * linalg_golden.py -> linalg_golden.h) in f64 and c128, f32 and c64 within
 * f32 tolerance, batch broadcasting, tall, wide, empty and strided inputs,
 * gradients to second order by central differences (the linalg_* cases of
 * gradcheck_cases.h), and every failure path: NULL, non-square, refused
 * dtypes, bad modes and ords, singular, not positive-definite, nan in svd,
 * bad UPLO, qr's refused gradient, and every allocation failing in turn. */
#include "test.h"

#include "alloc_fail_loop.h"
#include "autograd/gradcheck_cases.h"
#include "linalg_golden.h"

#define N_(a) ((int64_t)(sizeof(a) / sizeof((a)[0])))
#define SHAPE(...) ((const int64_t[]){__VA_ARGS__})

/* A tensor of dtype dt from f64 (real) or interleaved c128 (cplx) values. */
static oar_tensor *mk(const double *v, bool cplx, oar_dtype dt, int ndim, const int64_t *shape) {
    return oar_cast(oar_tensor_from_data(v, cplx ? OAR_C128 : OAR_F64, ndim, shape), dt);
}

/* max |t - want| / (1 + |want|) over t's values (interleaved when complex);
 * inf when t is NULL or sizes differ. */
static double rel_err(oar_tensor *t, const double *want, int64_t count) {
    if (!t) return INFINITY;
    oar_pool *p = oar_pool_push();
    bool c = oar_dtype_is_complex(oar_tensor_dtype(t));
    oar_tensor *h = oar_contiguous(oar_cast(t, c ? OAR_C128 : OAR_F64));
    int64_t n = oar_tensor_numel(t) * (c ? 2 : 1);
    double e = INFINITY;
    if (h && n == count) {
        const double *v = oar_tensor_data(h);
        e = 0;
        for (int64_t i = 0; i < n; i++) {
            double d = fabs(v[i] - want[i]) / (1 + fabs(want[i]));
            if (!(d <= e)) e = isnan(d) ? INFINITY : d; /* (a NaN stays: INFINITY is never lowered) */
        }
    }
    oar_pool_pop(p);
    return e;
}

/* max |a - b| / (1 + |b|) for two tensors of one shape. */
static double rel_err_t(oar_tensor *a, oar_tensor *b) {
    if (!a || !b) return INFINITY;
    oar_pool *p = oar_pool_push();
    bool c = oar_dtype_is_complex(oar_tensor_dtype(b));
    oar_tensor *h = oar_contiguous(oar_cast(b, c ? OAR_C128 : OAR_F64));
    double e = h ? rel_err(a, oar_tensor_data(h), oar_tensor_numel(h) * (c ? 2 : 1)) : INFINITY;
    oar_pool_pop(p);
    return e;
}

#define CHECK_REL_T(a, b, tol)                                                               \
    do {                                                                                     \
        double e_ = rel_err_t(a, b);                                                         \
        if (!(e_ <= (tol)))                                                                  \
            fprintf(stderr, "%s: %s vs %s: relative error %g (tol %g)\n", test_current, #a,  \
                    #b, e_, (double)(tol));                                                  \
        CHECK(e_ <= (tol));                                                                  \
    } while (0)

static oar_tensor *mh(oar_tensor *x) {
    oar_tensor *t = oar_transpose(x, -2, -1);
    return t && oar_dtype_is_complex(oar_tensor_dtype(t)) ? oar_conj(t) : t;
}

typedef struct golden {
    bool cplx;
    const double *a, *b, *s, *h, *solve, *inv, *det, *sign, *logabsdet, *chol, *eigw, *eigv;
} golden;

static const golden G_REAL = {false, lg_A_r, lg_B_r, lg_S_r, lg_H_r, lg_solve_r, lg_inv_r,
                              lg_det_r, lg_sign_r, lg_logabsdet_r, lg_chol_r, lg_eigw_r,
                              lg_eigv_r};
static const golden G_CPLX = {true, lg_A_c, lg_B_c, lg_S_c, lg_H_c, lg_solve_c, lg_inv_c,
                              lg_det_c, lg_sign_c, lg_logabsdet_c, lg_chol_c, lg_eigw_c,
                              lg_eigv_c};

/* Every function on the golden inputs in dtype dt (f64/c128 at 1e-10,
 * f32/c64 at f32 tolerance). */
static void check_values(const golden *g, oar_dtype dt, double tol) {
    oar_pool *p = oar_pool_push();
    const int64_t *sq = SHAPE(LG_BATCH, LG_N, LG_N), *rhs = SHAPE(LG_BATCH, LG_N, LG_K);
    const int64_t nn = LG_BATCH * LG_N * LG_N, nb = LG_BATCH, nk = LG_BATCH * LG_N * LG_K;
    int c = g->cplx ? 2 : 1;
    oar_tensor *A = mk(g->a, g->cplx, dt, 3, sq), *B = mk(g->b, g->cplx, dt, 3, rhs);
    oar_tensor *S = mk(g->s, g->cplx, dt, 3, sq), *H = mk(g->h, g->cplx, dt, 3, sq);

    oar_tensor *X = oar_linalg_solve(A, B);
    CHECK(X && oar_tensor_dtype(X) == dt && oar_tensor_ndim(X) == 3 && oar_tensor_shape(X)[2] == LG_K);
    CHECK(rel_err(X, g->solve, nk * c) <= tol);
    CHECK(rel_err(oar_linalg_inv(A), g->inv, nn * c) <= tol);
    oar_tensor *det = oar_linalg_det(A);
    CHECK(det && oar_tensor_ndim(det) == 1 && oar_tensor_dtype(det) == dt);
    CHECK(rel_err(det, g->det, nb * c) <= tol);
    oar_tensor *sign = NULL, *logabs = NULL;
    CHECK(oar_linalg_slogdet(A, &sign, &logabs) == 0);
    CHECK(sign && oar_tensor_dtype(sign) == dt);
    CHECK(logabs && !oar_dtype_is_complex(oar_tensor_dtype(logabs)));
    CHECK(rel_err(sign, g->sign, nb * c) <= tol);
    CHECK(rel_err(logabs, g->logabsdet, nb) <= tol);
    oar_tensor *L = oar_linalg_cholesky(S, false);
    CHECK(rel_err(L, g->chol, nn * c) <= tol);
    oar_tensor *U = oar_linalg_cholesky(S, true); /* U = L^H */
    CHECK_REL_T(U, mh(L), tol);
    CHECK_REL_T(oar_matmul(mh(U), U), S, 10 * tol);

    oar_tensor *w = NULL, *V = NULL;
    CHECK(oar_linalg_eigh(H, "L", &w, &V) == 0);
    CHECK(w && !oar_dtype_is_complex(oar_tensor_dtype(w)) && oar_tensor_ndim(w) == 2);
    CHECK(rel_err(w, g->eigw, LG_BATCH * LG_N) <= tol);
    /* eigenvectors up to sign/phase: V diag(w) V^H = H, |V^H V_numpy| = I */
    CHECK_REL_T(oar_matmul(oar_mul(V, oar_unsqueeze(w, -2)), mh(V)), H, 10 * tol);
    oar_tensor *Vn = mk(g->eigv, g->cplx, dt, 3, sq);
    oar_tensor *I3 = oar_eye(LG_N, -1, OAR_F64);
    CHECK_REL_T(oar_abs(oar_matmul(mh(V), Vn)), oar_expand(I3, 3, sq), 10 * tol);
    oar_tensor *wu = NULL;
    CHECK(oar_linalg_eigh(H, "U", &wu, NULL) == 0); /* H is Hermitian: the same values */
    CHECK(rel_err(wu, g->eigw, LG_BATCH * LG_N) <= tol);
    /* UPLO: only that triangle is read */
    oar_tensor *lower = oar_tril(H, 0), *upper = oar_triu(H, 0);
    CHECK(oar_linalg_eigh(lower, NULL, &wu, NULL) == 0);
    CHECK(rel_err(wu, g->eigw, LG_BATCH * LG_N) <= tol);
    CHECK(oar_linalg_eigh(upper, "U", &wu, NULL) == 0);
    CHECK(rel_err(wu, g->eigw, LG_BATCH * LG_N) <= tol);
    CHECK_REL_T(oar_linalg_cholesky(oar_tril(S, 0), false), L, tol); /* cholesky: the lower one */
    oar_pool_pop(p);
}

/* The golden values of the non-square functions: T tall [2, 4, 3], W wide
 * [2, 3, 4], BT [2, 4, 2]. */
typedef struct golden_mn {
    bool cplx;
    const double *t, *w, *bt, *qr_q, *qr_r, *qrc_q, *qrc_r, *qrw_q, *qrw_r, *svd_u, *svd_s,
        *svd_vh, *svdw_s, *norms, *pinv, *pinvw, *lstsq, *expm, *a;
} golden_mn;

static const golden_mn GM_REAL = {false, lg_T_r, lg_W_r, lg_BT_r, lg_qr_q_r, lg_qr_r_r,
                                  lg_qrc_q_r, lg_qrc_r_r, lg_qrw_q_r, lg_qrw_r_r, lg_svd_u_r,
                                  lg_svd_s_r, lg_svd_vh_r, lg_svdw_s_r, lg_norms_r, lg_pinv_r,
                                  lg_pinvw_r, lg_lstsq_r, lg_expm_r, lg_A_r};
static const golden_mn GM_CPLX = {true, lg_T_c, lg_W_c, lg_BT_c, lg_qr_q_c, lg_qr_r_c,
                                  lg_qrc_q_c, lg_qrc_r_c, lg_qrw_q_c, lg_qrw_r_c, lg_svd_u_c,
                                  lg_svd_s_c, lg_svd_vh_c, lg_svdw_s_c, lg_norms_c, lg_pinv_c,
                                  lg_pinvw_c, lg_lstsq_c, lg_expm_c, lg_A_c};

static bool has_shape(oar_tensor *t, int ndim, const int64_t *shape) {
    if (!t || oar_tensor_ndim(t) != ndim) return false;
    for (int d = 0; d < ndim; d++)
        if (oar_tensor_shape(t)[d] != shape[d]) return false;
    return true;
}

/* An identity of x's shape [..., c, c] (f64). */
static oar_tensor *eye_like(oar_tensor *x) {
    int nd = oar_tensor_ndim(x);
    return oar_expand(oar_eye(oar_tensor_shape(x)[nd - 1], -1, OAR_F64), nd, oar_tensor_shape(x));
}

/* |X^H Y| == I: the columns of X and Y agree up to sign/phase. */
static void check_same_columns(oar_tensor *x, oar_tensor *y, double tol) {
    oar_pool *p = oar_pool_push();
    oar_tensor *xy = oar_abs(oar_matmul(mh(x), y));
    CHECK_REL_T(xy, eye_like(xy), tol);
    oar_pool_pop(p);
}

/* qr and svd on the golden inputs: Q and R as NumPy's (the same LAPACK
 * convention), singular vectors up to sign/phase. */
static void check_values_mn(const golden_mn *g, oar_dtype dt, double tol) {
    oar_pool *p = oar_pool_push();
    const int64_t *tall = SHAPE(LG_BATCH, LG_M, LG_N), *wide = SHAPE(LG_BATCH, LG_N, LG_M);
    const int64_t nt = LG_BATCH * LG_M * LG_N, n3 = LG_BATCH * LG_N * LG_N;
    const int64_t n4 = LG_BATCH * LG_M * LG_M, nk = LG_BATCH * LG_N;
    int c = g->cplx ? 2 : 1;
    oar_tensor *T = mk(g->t, g->cplx, dt, 3, tall), *W = mk(g->w, g->cplx, dt, 3, wide);
    oar_tensor *Q = NULL, *R = NULL;
    CHECK(oar_linalg_qr(T, "reduced", &Q, &R) == 0);
    CHECK(has_shape(Q, 3, tall) && has_shape(R, 3, SHAPE(LG_BATCH, LG_N, LG_N)));
    CHECK(Q && oar_tensor_dtype(Q) == dt && oar_tensor_dtype(R) == dt);
    CHECK(rel_err(Q, g->qr_q, nt * c) <= tol);
    CHECK(rel_err(R, g->qr_r, n3 * c) <= tol);
    CHECK(oar_linalg_qr(T, "complete", &Q, &R) == 0);
    CHECK(has_shape(Q, 3, SHAPE(LG_BATCH, LG_M, LG_M)) && has_shape(R, 3, tall));
    CHECK(rel_err(Q, g->qrc_q, n4 * c) <= tol);
    CHECK(rel_err(R, g->qrc_r, nt * c) <= tol);
    CHECK_REL_T(oar_matmul(Q, R), T, 10 * tol);
    CHECK(oar_linalg_qr(T, "r", NULL, &R) == 0);
    CHECK(rel_err(R, g->qr_r, n3 * c) <= tol);
    CHECK(oar_linalg_qr(W, NULL, &Q, &R) == 0); /* wide: Q square, R [3, 4] */
    CHECK(has_shape(Q, 3, SHAPE(LG_BATCH, LG_N, LG_N)) && has_shape(R, 3, wide));
    CHECK(rel_err(Q, g->qrw_q, n3 * c) <= tol);
    CHECK(rel_err(R, g->qrw_r, nt * c) <= tol);
    CHECK(oar_linalg_qr(W, "complete", NULL, &R) == 0 && rel_err(R, g->qrw_r, nt * c) <= tol);

    oar_tensor *U = NULL, *S = NULL, *Vh = NULL;
    CHECK(oar_linalg_svd(T, false, &U, &S, &Vh) == 0);
    CHECK(has_shape(U, 3, tall) && has_shape(S, 2, SHAPE(LG_BATCH, LG_N)));
    CHECK(has_shape(Vh, 3, SHAPE(LG_BATCH, LG_N, LG_N)));
    CHECK(S && !oar_dtype_is_complex(oar_tensor_dtype(S)) && oar_tensor_dtype(U) == dt);
    CHECK(rel_err(S, g->svd_s, nk) <= tol);
    CHECK_REL_T(oar_matmul(oar_mul(U, oar_unsqueeze(S, -2)), Vh), T, 10 * tol);
    check_same_columns(U, mk(g->svd_u, g->cplx, dt, 3, tall), 10 * tol);
    check_same_columns(mh(Vh), mh(mk(g->svd_vh, g->cplx, dt, 3, SHAPE(LG_BATCH, LG_N, LG_N))),
                       10 * tol);
    CHECK(oar_linalg_svd(T, true, &U, NULL, &Vh) == 0); /* full: U [4, 4] unitary */
    CHECK(has_shape(U, 3, SHAPE(LG_BATCH, LG_M, LG_M)) && has_shape(Vh, 3, SHAPE(LG_BATCH, LG_N, LG_N)));
    oar_tensor *uu = oar_abs(oar_matmul(mh(U), U));
    CHECK_REL_T(uu, eye_like(uu), 10 * tol);
    CHECK(oar_linalg_svd(W, true, &U, &S, &Vh) == 0); /* full, wide: Vh [4, 4] */
    CHECK(has_shape(U, 3, SHAPE(LG_BATCH, LG_N, LG_N)) && has_shape(Vh, 3, SHAPE(LG_BATCH, LG_M, LG_M)));
    CHECK(rel_err(S, g->svdw_s, nk) <= tol);
    oar_tensor *vv = oar_abs(oar_matmul(Vh, mh(Vh)));
    CHECK_REL_T(vv, eye_like(vv), 10 * tol);
    CHECK(rel_err(oar_linalg_svdvals(W), g->svdw_s, nk) <= tol);
    CHECK(rel_err(oar_linalg_svdvals(oar_transpose(T, -2, -1)), g->svd_s, nk) <= tol); /* strided */

    /* the composites: matrix_norm, pinv, lstsq, matrix_exp */
    static const char *const ords[LG_NORDS] = {"fro", "nuc", "2", "-2", "1", "-1", "inf", "-inf"};
    for (int o = 0; o < LG_NORDS; o++) {
        oar_tensor *nrm = oar_linalg_matrix_norm(T, ords[o], false);
        CHECK(has_shape(nrm, 1, SHAPE(LG_BATCH)) && !oar_dtype_is_complex(oar_tensor_dtype(nrm)));
        if (rel_err(nrm, g->norms + o * LG_BATCH, LG_BATCH) > tol)
            fprintf(stderr, "matrix_norm %s (%s) is off\n", ords[o], oar_dtype_name(dt));
        CHECK(rel_err(nrm, g->norms + o * LG_BATCH, LG_BATCH) <= tol);
        nrm = oar_linalg_matrix_norm(T, ords[o], true);
        CHECK(has_shape(nrm, 3, SHAPE(LG_BATCH, 1, 1)));
        CHECK(rel_err(nrm, g->norms + o * LG_BATCH, LG_BATCH) <= tol);
    }
    CHECK(rel_err(oar_linalg_matrix_norm(T, NULL, false), g->norms, LG_BATCH) <= tol); /* fro */
    oar_tensor *P = oar_linalg_pinv(T);
    CHECK(has_shape(P, 3, wide) && oar_tensor_dtype(P) == dt);
    CHECK(rel_err(P, g->pinv, nt * c) <= 10 * tol);
    CHECK(rel_err(oar_linalg_pinv(W), g->pinvw, nt * c) <= 10 * tol);
    oar_tensor *BT = mk(g->bt, g->cplx, dt, 3, SHAPE(LG_BATCH, LG_M, LG_K));
    oar_tensor *X = oar_linalg_lstsq(T, BT);
    CHECK(has_shape(X, 3, SHAPE(LG_BATCH, LG_N, LG_K)));
    CHECK(rel_err(X, g->lstsq, LG_BATCH * LG_N * LG_K * c) <= 10 * tol);
    oar_tensor *xv = oar_linalg_lstsq(T, oar_squeeze(oar_slice(BT, -1, 1, 2, 1), -1)); /* a vector b [2, 4] */
    CHECK(has_shape(xv, 2, SHAPE(LG_BATCH, LG_N)));
    CHECK_REL_T(xv, oar_squeeze(oar_slice(X, -1, 1, 2, 1), -1), 10 * tol);
    oar_tensor *A = mk(g->a, g->cplx, dt, 3, SHAPE(LG_BATCH, LG_N, LG_N));
    oar_tensor *E = oar_linalg_matrix_exp(A);
    CHECK(has_shape(E, 3, SHAPE(LG_BATCH, LG_N, LG_N)) && oar_tensor_dtype(E) == dt);
    CHECK(rel_err(E, g->expm, n3 * c) <= tol);
    /* scaled and squared: exp(4A) = exp(2A)^2 = exp(A)^4 */
    oar_tensor *E4 = oar_linalg_matrix_exp(oar_mul_scalar(A, 4)), *E2 = oar_matmul(E, E);
    CHECK_REL_T(E4, oar_matmul(E2, E2), 100 * tol);
    oar_pool_pop(p);
}

static void test_values_f64_c128(void) {
    check_values(&G_REAL, OAR_F64, 1e-10);
    check_values(&G_CPLX, OAR_C128, 1e-10);
    check_values_mn(&GM_REAL, OAR_F64, 1e-10);
    check_values_mn(&GM_CPLX, OAR_C128, 1e-10);
}

static void test_values_f32_c64(void) {
    check_values(&G_REAL, OAR_F32, 2e-4);
    check_values(&G_CPLX, OAR_C64, 2e-4);
    check_values_mn(&GM_REAL, OAR_F32, 2e-4);
    check_values_mn(&GM_CPLX, OAR_C64, 2e-4);
}

/* Empty matrices: qr and svd of [.., m, 0] and [.., 0, n], empty batches. */
static void test_empty_mn(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *Q = NULL, *R = NULL, *U = NULL, *S = NULL, *Vh = NULL;
    oar_tensor *A = oar_zeros(OAR_F64, 2, SHAPE(3, 0));
    CHECK(oar_linalg_qr(A, "complete", &Q, &R) == 0);
    CHECK(has_shape(Q, 2, SHAPE(3, 3)) && has_shape(R, 2, SHAPE(3, 0)));
    CHECK_REL_T(Q, oar_eye(3, -1, OAR_F64), 0);
    CHECK(oar_linalg_svd(A, true, &U, &S, &Vh) == 0);
    CHECK(has_shape(U, 2, SHAPE(3, 3)) && has_shape(S, 1, SHAPE(0)) && has_shape(Vh, 2, SHAPE(0, 0)));
    CHECK_REL_T(U, oar_eye(3, -1, OAR_F64), 0);
    CHECK(oar_linalg_svd(oar_zeros(OAR_C64, 3, SHAPE(2, 0, 2)), false, &U, &S, &Vh) == 0);
    CHECK(has_shape(U, 3, SHAPE(2, 0, 0)) && has_shape(Vh, 3, SHAPE(2, 0, 2)));
    CHECK(oar_linalg_qr(oar_zeros(OAR_F32, 3, SHAPE(0, 4, 3)), NULL, &Q, &R) == 0);
    CHECK(has_shape(Q, 3, SHAPE(0, 4, 3)) && has_shape(R, 3, SHAPE(0, 3, 3)));
    oar_pool_pop(p);
}

/* Batch broadcasting, vector right-hand sides, strided inputs, promotion. */
static void test_solve_shapes(void) {
    oar_pool *p = oar_pool_push();
    const int64_t *sq = SHAPE(LG_BATCH, LG_N, LG_N), *rhs = SHAPE(LG_BATCH, LG_N, LG_K);
    oar_tensor *A = mk(lg_A_r, false, OAR_F64, 3, sq), *B = mk(lg_B_r, false, OAR_F64, 3, rhs);
    oar_tensor *X = oar_linalg_solve(A, B);
    /* B [n, k] shared by the batch: each matrix against B[0] */
    oar_tensor *B0 = oar_squeeze(oar_slice(B, 0, 0, 1, 1), 0);
    oar_tensor *X0 = oar_linalg_solve(A, B0);
    CHECK(X0 && oar_tensor_ndim(X0) == 3 && oar_tensor_shape(X0)[0] == LG_BATCH);
    CHECK_REL_T(oar_matmul(A, X0), oar_expand(B0, 3, rhs), 1e-12);
    /* A [n, n] against a batch of B */
    oar_tensor *A1 = oar_squeeze(oar_slice(A, 0, 1, 2, 1), 0);
    oar_tensor *X1 = oar_linalg_solve(A1, B);
    CHECK(X1 && oar_tensor_ndim(X1) == 3);
    CHECK_REL_T(oar_matmul(A1, X1), B, 1e-12);
    /* a vector b: [batch, n] (= A.shape[:-1]) and [n] */
    oar_tensor *bv = oar_squeeze(oar_slice(B, 2, 0, 1, 1), 2); /* [2, 3] */
    oar_tensor *xv = oar_linalg_solve(A, bv);
    CHECK(xv && oar_tensor_ndim(xv) == 2 && oar_tensor_shape(xv)[1] == LG_N);
    CHECK_REL_T(xv, oar_squeeze(oar_slice(X, 2, 0, 1, 1), 2), 1e-12);
    oar_tensor *b1 = oar_squeeze(oar_slice(bv, 0, 0, 1, 1), 0); /* [3] */
    oar_tensor *x1 = oar_linalg_solve(A1, b1);
    CHECK(x1 && oar_tensor_ndim(x1) == 1);
    CHECK_REL_T(oar_matmul(A1, x1), b1, 1e-12);
    /* strided (transposed) inputs */
    oar_tensor *At = oar_transpose(A, -2, -1);
    CHECK(!oar_tensor_is_contiguous(At));
    CHECK_REL_T(oar_linalg_inv(At), oar_transpose(oar_linalg_inv(A), -2, -1), 1e-12);
    /* f32 A with f64 B: promoted to f64 */
    oar_tensor *Xp = oar_linalg_solve(oar_cast(A, OAR_F32), B);
    CHECK(Xp && oar_tensor_dtype(Xp) == OAR_F64);
    /* empty batch and 0 x 0 matrices */
    oar_tensor *E = oar_zeros(OAR_F64, 3, SHAPE(0, 2, 2));
    oar_tensor *Ei = oar_linalg_inv(E);
    CHECK(Ei && oar_tensor_numel(Ei) == 0);
    oar_tensor *Z = oar_zeros(OAR_F64, 2, SHAPE(0, 0));
    oar_tensor *dz = oar_linalg_det(Z);
    CHECK(dz && oar_tensor_item(dz) == 1.0); /* det of a 0 x 0 matrix, as NumPy */
    oar_pool_pop(p);
}

static oar_tensor *norm_fn(void *ord, int n, oar_tensor *const *x) {
    (void)n;
    return oar_linalg_matrix_norm(x[0], ord, false);
}

/* pinv of a rank-deficient matrix (the cutoff), lstsq's minimum-norm
 * solution, matrix_exp of a diagonal matrix (squared many times), empty
 * inputs, and the norms' gradients that do not go through svd. */
static void test_composites(void) {
    oar_pool *p = oar_pool_push();
    static const double r1[4] = {1, 2, 2, 4}; /* rank 1: pinv = A^T / 25 */
    oar_tensor *A = oar_tensor_from_data(r1, OAR_F64, 2, SHAPE(2, 2));
    CHECK_REL_T(oar_linalg_pinv(A), oar_div_scalar(oar_transpose(A, 0, 1), 25), 1e-14);
    CHECK_REL_T(oar_linalg_pinv(oar_cast(A, OAR_C64)),
                oar_cast(oar_div_scalar(oar_transpose(A, 0, 1), 25), OAR_C128), 1e-6);
    oar_tensor *b = oar_ones(OAR_F64, 1, SHAPE(2));
    CHECK_REL_T(oar_linalg_lstsq(A, b), oar_matmul(oar_transpose(A, 0, 1), oar_div_scalar(b, 25)),
                1e-14); /* the minimum-norm solution */
    static const double d[9] = {10, 0, 0, 0, -3, 0, 0, 0, 0.5}, e[9] = {0, 0, 0, 0, 0, 0, 0, 0, 0};
    oar_tensor *D = oar_tensor_from_data(d, OAR_F64, 2, SHAPE(3, 3));
    double want[9];
    for (int i = 0; i < 9; i++) want[i] = i % 4 ? 0 : exp(d[i]);
    CHECK(rel_err(oar_linalg_matrix_exp(D), want, 9) <= 1e-13);
    CHECK_REL_T(oar_linalg_matrix_exp(oar_tensor_from_data(e, OAR_F32, 2, SHAPE(3, 3))),
                oar_eye(3, -1, OAR_F64), 1e-7);
    oar_tensor *E = oar_zeros(OAR_F64, 3, SHAPE(2, 0, 3));
    oar_tensor *Ep = oar_linalg_pinv(E), *Ee = oar_linalg_matrix_exp(oar_zeros(OAR_F64, 3, SHAPE(0, 2, 2)));
    CHECK(has_shape(Ep, 3, SHAPE(2, 3, 0)) && Ee && oar_tensor_numel(Ee) == 0);
    /* fro, 1, -1, inf, -inf: gradients of their ops (svd's are in the table) */
    static const char *const ords[5] = {"fro", "1", "-1", "inf", "-inf"};
    for (int o = 0; o < 5; o++) {
        char label[64];
        snprintf(label, sizeof label, "linalg_matrix_norm %s", ords[o]);
        gc_input in[1] = {{.ndim = 3, .shape = {2, 3, 4}, .dtype = o % 2 ? OAR_F64 : OAR_C128}};
        gc_opts opts = {.eps = 0};
        gradcheck(label, norm_fn, (void *)ords[o], 1, in, &opts);
    }
    oar_pool_pop(p);
}

/* Singular matrices: det 0, slogdet (0, -inf), no error. */
static void test_singular_slogdet(void) {
    oar_pool *p = oar_pool_push();
    static const double sing[8] = {1, 2, 2, 4, 2, 1, 1, 3};
    oar_tensor *A = oar_tensor_from_data(sing, OAR_F64, 3, SHAPE(2, 2, 2));
    oar_tensor *s = NULL, *l = NULL;
    CHECK(oar_linalg_slogdet(A, &s, &l) == 0);
    double *sv = test_values(s), *lv = test_values(l);
    CHECK(sv && lv && sv[0] == 0 && isinf(lv[0]) && lv[0] < 0 && sv[1] == 1);
    if (lv) CHECK_NEAR(lv[1], log(5.0), 1e-12);
    free(sv);
    free(lv);
    oar_tensor *d = oar_linalg_det(A);
    double *dv = test_values(d);
    CHECK(dv && dv[0] == 0);
    if (dv) CHECK_NEAR(dv[1], 5.0, 1e-12);
    free(dv);
    /* one output pointer is enough */
    CHECK(oar_linalg_slogdet(A, NULL, &l) == 0 && l);
    oar_pool_pop(p);
}

static void test_failures(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *A = mk(lg_A_r, false, OAR_F64, 3, SHAPE(LG_BATCH, LG_N, LG_N));
    oar_tensor *B = mk(lg_B_r, false, OAR_F64, 3, SHAPE(LG_BATCH, LG_N, LG_K));
    oar_tensor *R = oar_zeros(OAR_F64, 2, SHAPE(2, 3)), *v = oar_zeros(OAR_F64, 1, SHAPE(3));
    oar_tensor *w = NULL, *V = NULL, *s = NULL, *l = NULL;
    /* NULL arguments */
    CHECK_FAILS(oar_linalg_solve(NULL, B), "linalg_solve: input A is NULL");
    CHECK_FAILS(oar_linalg_solve(A, NULL), "linalg_solve: input B is NULL");
    CHECK_FAILS(oar_linalg_inv(NULL), "linalg_inv: input A is NULL");
    CHECK_FAILS(oar_linalg_det(NULL), "linalg_det: input A is NULL");
    CHECK_STATUS_FAILS(oar_linalg_slogdet(NULL, &s, &l), "linalg_slogdet: input A is NULL");
    CHECK(!s && !l);
    CHECK_STATUS_FAILS(oar_linalg_slogdet(A, NULL, NULL), "both NULL");
    CHECK_FAILS(oar_linalg_cholesky(NULL, false), "linalg_cholesky: input A is NULL");
    CHECK_STATUS_FAILS(oar_linalg_eigh(NULL, "L", &w, &V), "linalg_eigh: input A is NULL");
    CHECK(!w && !V);
    CHECK_STATUS_FAILS(oar_linalg_eigh(A, "L", NULL, NULL), "both NULL");
    CHECK_STATUS_FAILS(oar_linalg_eigh(A, "X", &w, &V), "UPLO must be");
    /* a pending error is kept */
    oar_clear_error();
    CHECK(!oar_linalg_inv(oar_reshape(A, 1, SHAPE(7))));
    const char *first = oar_last_error();
    CHECK(strstr(first, "reshape") && !strstr(first, "linalg_inv"));
    /* non-square and bad shapes */
    CHECK_FAILS(oar_linalg_solve(R, v), "linalg_solve: A must be a batch of square matrices "
                                        "[..., n, n], got shape [2, 3]");
    CHECK_FAILS(oar_linalg_inv(R), "linalg_inv: A must be a batch of square matrices");
    CHECK_FAILS(oar_linalg_inv(v), "got shape [3]");
    CHECK_FAILS(oar_linalg_det(R), "linalg_det: A must be a batch of square");
    CHECK_STATUS_FAILS(oar_linalg_slogdet(R, &s, &l), "linalg_slogdet: A must be a batch of square");
    CHECK_FAILS(oar_linalg_cholesky(R, false), "linalg_cholesky: A must be a batch of square");
    CHECK_STATUS_FAILS(oar_linalg_eigh(R, "L", &w, &V), "linalg_eigh: A must be a batch of square");
    CHECK_FAILS(oar_linalg_solve(A, oar_zeros(OAR_F64, 2, SHAPE(4, 2))), "linalg_solve: B must be [..., n, k] or [..., n]");
    CHECK_FAILS(oar_linalg_solve(A, oar_zeros(OAR_F64, 3, SHAPE(3, 3, 2))), "do not broadcast");
    CHECK(oar_linalg_solve(A, R) != NULL); /* [2, 3] = A.shape[:-1]: a batch of vectors */
    /* refused dtypes, named */
    oar_tensor *Ai = oar_cast(A, OAR_I64), *Ah = oar_cast(A, OAR_F16);
    CHECK_FAILS(oar_linalg_solve(Ai, B), "linalg_solve: A has dtype int64");
    CHECK_FAILS(oar_linalg_solve(A, oar_cast(B, OAR_I32)), "linalg_solve: B has dtype int32");
    CHECK_FAILS(oar_linalg_inv(Ah), "linalg_inv: A has dtype float16");
    CHECK_FAILS(oar_linalg_det(Ai), "linalg_det: A has dtype int64");
    CHECK_STATUS_FAILS(oar_linalg_slogdet(oar_cast(A, OAR_BOOL), &s, &l), "dtype bool");
    CHECK_FAILS(oar_linalg_cholesky(oar_cast(A, OAR_BF16), false), "linalg_cholesky: A has dtype bfloat16");
    CHECK_STATUS_FAILS(oar_linalg_eigh(Ai, "L", &w, &V), "linalg_eigh: A has dtype int64");
    /* singular: solve and inv name themselves and the batch element */
    static const double sing[8] = {2, 1, 1, 3, 1, 2, 2, 4};
    oar_tensor *S = oar_tensor_from_data(sing, OAR_F64, 3, SHAPE(2, 2, 2));
    CHECK_FAILS(oar_linalg_inv(S), "linalg_inv: the matrix (batch element 1) is singular");
    CHECK_FAILS(oar_linalg_solve(S, oar_ones(OAR_F64, 1, SHAPE(2))),
                "linalg_solve: the matrix (batch element 1) is singular");
    CHECK_FAILS(oar_linalg_inv(oar_zeros(OAR_C64, 2, SHAPE(2, 2))), "linalg_inv: the matrix is singular");
    /* not positive-definite: the leading minor */
    static const double npd[8] = {4, 1, 1, 3, 1, 2, 2, 1};
    oar_tensor *P = oar_tensor_from_data(npd, OAR_F64, 3, SHAPE(2, 2, 2));
    CHECK_FAILS(oar_linalg_cholesky(P, false),
                "linalg_cholesky: the input (batch element 1) is not positive-definite (the "
                "leading minor of order 2 is not positive-definite)");
    CHECK_FAILS(oar_linalg_cholesky(oar_neg(oar_eye(3, -1, OAR_C128)), true),
                "the leading minor of order 1");
    /* qr, svd, svdvals */
    oar_tensor *Q = NULL, *U = NULL, *Vh = NULL;
    CHECK_STATUS_FAILS(oar_linalg_qr(NULL, NULL, &Q, &l), "linalg_qr: input A is NULL");
    CHECK(!Q && !l);
    CHECK_STATUS_FAILS(oar_linalg_qr(R, "full", &Q, &l),
                       "linalg_qr: mode must be \"reduced\", \"complete\" or \"r\", got \"full\"");
    CHECK_STATUS_FAILS(oar_linalg_qr(R, NULL, NULL, NULL), "linalg_qr: Q and R are both NULL");
    CHECK_STATUS_FAILS(oar_linalg_qr(R, "r", &Q, NULL), "linalg_qr: R is NULL");
    CHECK(oar_linalg_qr(R, "r", &Q, &l) == 0 && !Q && l); /* mode r: Q set to NULL */
    CHECK_STATUS_FAILS(oar_linalg_qr(v, NULL, &Q, &l), "linalg_qr: A must be a batch of matrices "
                                                       "[..., m, n], got shape [3]");
    CHECK_STATUS_FAILS(oar_linalg_qr(oar_cast(R, OAR_I32), NULL, &Q, &l), "linalg_qr: A has dtype int32");
    CHECK_STATUS_FAILS(oar_linalg_svd(NULL, false, &U, &s, &Vh), "linalg_svd: input A is NULL");
    CHECK(!U && !s && !Vh);
    CHECK_STATUS_FAILS(oar_linalg_svd(R, false, NULL, NULL, NULL), "linalg_svd: U, S and Vh are all NULL");
    CHECK_STATUS_FAILS(oar_linalg_svd(v, false, &U, &s, &Vh), "linalg_svd: A must be a batch of matrices");
    CHECK_STATUS_FAILS(oar_linalg_svd(oar_cast(R, OAR_F16), true, &U, &s, &Vh), "linalg_svd: A has dtype float16");
    CHECK_FAILS(oar_linalg_svdvals(NULL), "linalg_svdvals: input A is NULL");
    CHECK_FAILS(oar_linalg_svdvals(v), "linalg_svdvals: A must be a batch of matrices");
    CHECK_FAILS(oar_linalg_svdvals(oar_cast(R, OAR_BOOL)), "linalg_svdvals: A has dtype bool");
    /* svd of nan: named as such (LAPACK refuses it), never a crash */
    oar_clear_error();
    int sst = oar_linalg_svd(oar_full(OAR_F64, 3, SHAPE(2, 3, 2), NAN), false, &U, &s, &Vh);
    CHECK(sst != 0 || (s && isnan(oar_tensor_item(oar_sum(s, 0, NULL, false)))));
    if (sst) CHECK(strstr(oar_last_error(), "linalg_svd: the input (batch element 0)"));
    /* qr's gradient: refused for mode "complete" with m > n */
    oar_tensor *Tg = oar_ones(OAR_F64, 2, SHAPE(3, 2)), *gT = NULL;
    oar_tensor_set_requires_grad(Tg, true);
    oar_tensor *Rq = NULL;
    CHECK(oar_linalg_qr(Tg, "complete", &Q, &Rq) == 0);
    oar_tensor *lq = oar_sum(Q, 0, NULL, false);
    CHECK_STATUS_FAILS(oar_grad(1, &lq, NULL, 1, &Tg, false, false, &gT),
                       "linalg_qr: no gradient for mode \"complete\" with more rows than columns");
    /* matrix_norm, pinv, lstsq, matrix_exp */
    CHECK_FAILS(oar_linalg_matrix_norm(NULL, "fro", false), "linalg_matrix_norm: input A is NULL");
    CHECK_FAILS(oar_linalg_matrix_norm(R, "3", false),
                "linalg_matrix_norm: ord must be \"fro\", \"nuc\", \"2\", \"-2\", \"1\", \"-1\", "
                "\"inf\" or \"-inf\", got \"3\"");
    CHECK_FAILS(oar_linalg_matrix_norm(R, "Fro", true), "got \"Fro\"");
    CHECK_FAILS(oar_linalg_matrix_norm(v, "fro", false), "linalg_matrix_norm: A must be a batch of matrices");
    CHECK_FAILS(oar_linalg_matrix_norm(Ai, "1", false), "linalg_matrix_norm: A has dtype int64");
    CHECK_FAILS(oar_linalg_pinv(NULL), "linalg_pinv: input A is NULL");
    CHECK_FAILS(oar_linalg_pinv(v), "linalg_pinv: A must be a batch of matrices");
    CHECK_FAILS(oar_linalg_pinv(Ah), "linalg_pinv: A has dtype float16");
    CHECK_FAILS(oar_linalg_lstsq(NULL, B), "linalg_lstsq: input A is NULL");
    CHECK_FAILS(oar_linalg_lstsq(R, NULL), "linalg_lstsq: input B is NULL");
    CHECK_FAILS(oar_linalg_lstsq(v, v), "linalg_lstsq: A must be a batch of matrices");
    CHECK_FAILS(oar_linalg_lstsq(Ai, B), "linalg_lstsq: A has dtype int64");
    CHECK_FAILS(oar_linalg_lstsq(A, oar_cast(B, OAR_I32)), "linalg_lstsq: B has dtype int32");
    CHECK_FAILS(oar_linalg_lstsq(R, v), "linalg_lstsq: B must be [..., m, k] or [..., m] for A "
                                        "[..., m, n], got shapes [2, 3] (A) and [3] (B)");
    CHECK_FAILS(oar_linalg_lstsq(A, oar_zeros(OAR_F64, 3, SHAPE(3, 3, 2))), "linalg_lstsq: shapes");
    CHECK_FAILS(oar_linalg_matrix_exp(NULL), "linalg_matrix_exp: input A is NULL");
    CHECK_FAILS(oar_linalg_matrix_exp(R), "linalg_matrix_exp: A must be a batch of square matrices");
    CHECK_FAILS(oar_linalg_matrix_exp(oar_cast(A, OAR_BF16)), "linalg_matrix_exp: A has dtype bfloat16");
    /* non-finite input to eigh: an error or nan, never a crash */
    oar_clear_error();
    oar_tensor *nanm = oar_full(OAR_F64, 2, SHAPE(3, 3), NAN);
    int st = oar_linalg_eigh(nanm, "L", &w, &V);
    CHECK(st != 0 || (w && isnan(oar_tensor_item(oar_sum(w, 0, NULL, false)))));
    oar_pool_pop(p);
}

/* Gradients, first and second order (the linalg_* cases of the gradcheck
 * table; test_gradcheck_ops runs them too). */
static void test_gradients(void) {
    int cases = 0;
    for (int i = 0; i < N_OP_CASES; i++) {
        const op_case *c = &op_cases[i];
        if (strncmp(c->op, "linalg_", 7)) continue;
        char label[128];
        snprintf(label, sizeof label, "%s / %s", c->op, c->label);
        oar_pool *p = oar_pool_push();
        gradcheck(label, c->fn, NULL, c->n, c->in, &c->o);
        oar_pool_pop(p);
        cases++;
    }
    CHECK(cases >= 31);
    bool second = false;
    CHECK(op_case_count("linalg_eigh", &second) >= 4 && second);
    CHECK(op_case_count("linalg_qr", &second) >= 7 && second);
    CHECK(op_case_count("linalg_svd", &second) >= 7 && second);
}

/* eigh's gradient is inf/nan at repeated eigenvalues when V is used (as
 * PyTorch documents), finite for a loss of the eigenvalues alone. */
static void test_eigh_degenerate(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *A = oar_eye(3, -1, OAR_F64);
    oar_tensor_set_requires_grad(A, true);
    oar_tensor *w, *V;
    CHECK(oar_linalg_eigh(A, "L", &w, &V) == 0);
    oar_tensor *g = NULL;
    oar_tensor *loss = oar_sum(w, 0, NULL, false);
    CHECK(oar_grad(1, &loss, NULL, 1, &A, false, false, &g) == 0);
    CHECK(g && isfinite(oar_tensor_item(oar_sum(g, 0, NULL, false))));
    CHECK(oar_linalg_eigh(A, "L", &w, &V) == 0);
    oar_tensor *weights = oar_reshape(oar_arange(0, 9, 1, OAR_F64), 2, SHAPE(3, 3));
    loss = oar_sum(oar_mul(V, weights), 0, NULL, false);
    CHECK(oar_grad(1, &loss, NULL, 1, &A, false, false, &g) == 0);
    double *gv = test_values(g);
    bool finite = true;
    for (int i = 0; gv && i < 9; i++) finite = finite && isfinite(gv[i]);
    CHECK(gv && !finite);
    free(gv);
    oar_pool_pop(p);
}

/* Forward and backward of every function, for the failing-allocation loop. */
static int lapack_step(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *A = oar_tensor_from_data(lg_S_r, OAR_F64, 3, SHAPE(LG_BATCH, LG_N, LG_N));
    oar_tensor *B = oar_tensor_from_data(lg_B_r, OAR_F64, 3, SHAPE(LG_BATCH, LG_N, LG_K));
    int st = A && B ? oar_tensor_set_requires_grad(A, true) : -1;
    oar_tensor *w = NULL, *V = NULL, *l = NULL, *Q = NULL, *R = NULL, *U = NULL, *S = NULL;
    if (!st) st = oar_linalg_eigh(A, "L", &w, &V);
    if (!st) st = oar_linalg_slogdet(A, NULL, &l);
    if (!st) st = oar_linalg_qr(B, NULL, &Q, &R);
    if (!st) st = oar_linalg_svd(B, false, &U, &S, NULL);
    oar_tensor *qr = Q ? oar_add(oar_sum(Q, 0, NULL, false), oar_sum(R, 0, NULL, false)) : NULL;
    oar_tensor *terms[11] = {oar_linalg_solve(A, B), oar_linalg_det(A), oar_linalg_cholesky(A, true),
                             V ? oar_mul(V, V) : NULL, l, qr, U ? oar_mul(U, U) : NULL, S,
                             oar_linalg_lstsq(B, A), oar_linalg_matrix_exp(A),
                             oar_linalg_matrix_norm(A, "nuc", false)};
    oar_tensor *loss = oar_zeros(OAR_F64, 0, NULL);
    for (int i = 0; i < 11; i++) loss = oar_add(loss, oar_sum(terms[i], 0, NULL, false));
    oar_tensor *g = NULL;
    if (!st) st = loss ? oar_grad(1, &loss, NULL, 1, &A, false, false, &g) : oari_fail_status();
    oar_pool_pop(p);
    return st;
}

static void test_alloc_failure(void) {
    int st0 = lapack_step();
    if (st0) fprintf(stderr, "lapack_step: %s\n", oar_last_error());
    CHECK(st0 == 0);
    oar_set_allocator(failing_alloc, NULL);
    int failures, n = fail_each_allocation_with(lapack_step, &failures, (fail_loop_opts){.cold = true});
    oar_set_allocator(NULL, NULL);
    printf("linalg: %d allocations failed in turn (%d runs failed)\n", n, failures);
    CHECK(n > 20 && failures > 20);
}

int main(void) {
    RUN(test_values_f64_c128);
    RUN(test_values_f32_c64);
    RUN(test_empty_mn);
    RUN(test_solve_shapes);
    RUN(test_composites);
    RUN(test_singular_slogdet);
    RUN(test_failures);
    RUN(test_gradients);
    RUN(test_eigh_degenerate);
    RUN(test_alloc_failure);
    return test_summary();
}

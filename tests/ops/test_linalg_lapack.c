/* Linear algebra through LAPACK (include/oar/linalg.h): solve, inv, det,
 * slogdet, cholesky and eigh against NumPy values (tests/ref/linalg_golden.py
 * -> linalg_golden.h) in f64 and c128, f32 and c64 within f32 tolerance,
 * batch broadcasting and strided inputs, gradients to second order by
 * central differences (the linalg_* cases of gradcheck_cases.h), and every
 * failure path: NULL, non-square, refused dtypes, singular, not
 * positive-definite, bad UPLO, and every allocation failing in turn. */
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
            if (!(d <= e)) e = d;
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

static void test_values_f64_c128(void) {
    check_values(&G_REAL, OAR_F64, 1e-10);
    check_values(&G_CPLX, OAR_C128, 1e-10);
}

static void test_values_f32_c64(void) {
    check_values(&G_REAL, OAR_F32, 2e-4);
    check_values(&G_CPLX, OAR_C64, 2e-4);
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
    CHECK(cases >= 17);
    bool second = false;
    CHECK(op_case_count("linalg_eigh", &second) >= 4 && second);
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
    oar_tensor *w = NULL, *V = NULL, *l = NULL;
    if (!st) st = oar_linalg_eigh(A, "L", &w, &V);
    if (!st) st = oar_linalg_slogdet(A, NULL, &l);
    oar_tensor *terms[5] = {oar_linalg_solve(A, B), oar_linalg_det(A), oar_linalg_cholesky(A, true),
                            V ? oar_mul(V, V) : NULL, l};
    oar_tensor *loss = oar_zeros(OAR_F64, 0, NULL);
    for (int i = 0; i < 5; i++) loss = oar_add(loss, oar_sum(terms[i], 0, NULL, false));
    oar_tensor *g = NULL;
    if (!st) st = loss ? oar_grad(1, &loss, NULL, 1, &A, false, false, &g) : oari_fail_status();
    oar_pool_pop(p);
    return st;
}

static void test_alloc_failure(void) {
    CHECK(lapack_step() == 0);
    oar_set_allocator(failing_alloc, NULL);
    int failures, n = fail_each_allocation_with(lapack_step, &failures, (fail_loop_opts){.cold = true});
    oar_set_allocator(NULL, NULL);
    printf("linalg: %d allocations failed in turn (%d runs failed)\n", n, failures);
    CHECK(n > 20 && failures > 20);
}

int main(void) {
    RUN(test_values_f64_c128);
    RUN(test_values_f32_c64);
    RUN(test_solve_shapes);
    RUN(test_singular_slogdet);
    RUN(test_failures);
    RUN(test_gradients);
    RUN(test_eigh_degenerate);
    RUN(test_alloc_failure);
    return test_summary();
}

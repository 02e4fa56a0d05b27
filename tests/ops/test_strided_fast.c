/* Two CPU fast paths for strided inputs that ONNX exporters produce
 * (a sequence-first attention block: x [1, T, d] transposed to [T, 1, d]):
 * - matmul whose left operand has one row a batch takes that row's stride
 *   from the batch and runs one GEMM (src/backends/cpu/cpu_linalg.c,
 *   fold_batches), not one gemv per batch; with a few rows a batch, a dense
 *   copy of it does (dense_copy_folds), not one GEMM per batch;
 * - index_select of a few indices copies each selected slice with one
 *   strided copy (cpu_index.c, k_index_select), not one line per element.
 * Checked against float64 loops over the source arrays (not through other
 * strided ops): folded and unfoldable batches (a batch that does not step
 * by whole rows, a batched right operand, a broadcast left one), f32 and
 * f64, index_select along the first, a middle and the last dim, one
 * index or several (repeated), and a case under the slice threshold. */
#include "test.h"

#include <stdint.h>

/* A contiguous tensor of dtype dt (f32/f64) with test_hash_value(which, i) at flat i;
 * *src gets the same values in double (the caller frees it). */
static oar_tensor *filled(oar_dtype dt, int which, int ndim, const int64_t *shape, double **src) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= shape[d];
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    if (!v) return NULL;
    for (int64_t i = 0; i < n; i++)
        v[i] = dt == OAR_F32 ? (double)(float)test_hash_value(which, i) : test_hash_value(which, i);
    oar_tensor *t = oar_tensor_from_data(v, OAR_F64, ndim, shape);
    if (t && dt != OAR_F64) t = oar_cast(t, dt);
    *src = v;
    return t;
}

/* max |got - want| over n values; INFINITY when got is NULL */
static double worst(oar_tensor *got, const double *want, int64_t n) {
    double *g = got ? test_values(got) : NULL, m = g ? 0 : INFINITY;
    for (int64_t i = 0; g && i < n; i++)
        if (!(fabs(g[i] - want[i]) <= m)) m = fabs(g[i] - want[i]);
    free(g);
    return m;
}

/* x [NB, T, d] viewed as [T, NB, d], times w [d, m] (or the transposed
 * view of a [m, d] array): out[t, b, j] = sum_p x[b, t, p] w[p, j]. One
 * row a batch (NB 1) folds as it is; more rows take a dense copy of x. */
static void check_sequence_first(oar_dtype dt, int64_t NB, int64_t T, int64_t d, int64_t m,
                                 bool w_transposed) {
    oar_pool *pool = oar_pool_push();
    double *xs = NULL, *ws = NULL;
    oar_tensor *x = filled(dt, 1, 3, (int64_t[]){NB, T, d}, &xs);
    oar_tensor *w = w_transposed ? filled(dt, 2, 2, (int64_t[]){m, d}, &ws)
                                 : filled(dt, 2, 2, (int64_t[]){d, m}, &ws);
    double *want = malloc((size_t)(T * NB * m) * sizeof *want);
    CHECK(x && w && want);
    if (x && w && want) {
        for (int64_t t = 0; t < T; t++)
            for (int64_t b = 0; b < NB; b++)
                for (int64_t j = 0; j < m; j++) {
                    double s = 0;
                    for (int64_t p = 0; p < d; p++)
                        s += xs[(b * T + t) * d + p] *
                             (w_transposed ? ws[j * d + p] : ws[p * m + j]);
                    want[(t * NB + b) * m + j] = s;
                }
        oar_tensor *y = oar_matmul(oar_permute(x, (int64_t[]){1, 0, 2}),
                                   w_transposed ? oar_transpose(w, 0, 1) : w);
        CHECK(y && oar_tensor_ndim(y) == 3 && oar_tensor_shape(y)[0] == T &&
              oar_tensor_shape(y)[1] == NB);
        double tol = (dt == OAR_F32 ? 2e-6 : 1e-13) * (double)d;
        double e = worst(y, want, T * NB * m);
        if (!(e <= tol))
            fprintf(stderr, "  %s NB %lld T %lld d %lld m %lld: worst %g\n", oar_dtype_name(dt),
                    (long long)NB, (long long)T, (long long)d, (long long)m, e);
        CHECK(e <= tol);
    }
    free(xs), free(ws), free(want);
    oar_pool_pop(pool);
}

static void test_matmul_one_row_batches(void) {
    for (int k = 0; k < 2; k++) {
        oar_dtype dt = k ? OAR_F64 : OAR_F32;
        check_sequence_first(dt, 1, 37, 19, 23, false);
        check_sequence_first(dt, 1, 37, 19, 23, true);
        check_sequence_first(dt, 1, 64, 256, 768, false); /* an encoder's in-projection */
        check_sequence_first(dt, 1, 1, 8, 5, false);      /* a batch of one */
    }
}

/* Batches of several rows that do not step by whole matrices: a dense copy
 * of A, then one GEMM (dense_copy_folds). */
static void test_matmul_dense_copy(void) {
    for (int k = 0; k < 2; k++) {
        oar_dtype dt = k ? OAR_F64 : OAR_F32;
        check_sequence_first(dt, 5, 37, 19, 23, false);
        check_sequence_first(dt, 3, 37, 19, 23, true);
        check_sequence_first(dt, 32, 64, 64, 96, false); /* the encoder at batch 32, smaller */
        check_sequence_first(dt, 300, 3, 4, 5, false);   /* 300 rows a batch: left batched */
    }
}

/* One-row batches that do not fold as they are, all still right: batch dims that do
 * not step by whole rows, a batched right operand, a broadcast left one. */
static void test_matmul_unfoldable(void) {
    oar_pool *pool = oar_pool_push();
    const int64_t A = 5, B = 3, d = 11, m = 7;
    double *xs = NULL, *ws = NULL, *bs = NULL;
    oar_tensor *x = filled(OAR_F64, 3, 3, (int64_t[]){A, B, d}, &xs);
    oar_tensor *w = filled(OAR_F64, 4, 2, (int64_t[]){d, m}, &ws);
    oar_tensor *wb = filled(OAR_F64, 5, 3, (int64_t[]){B, d, m}, &bs);
    double want[5 * 3 * 7];
    CHECK(x && w && wb);
    if (!x || !w || !wb) goto done;
    /* [B, A, 1, d]: batch (b, a) at b * d + a * B * d, which no single row stride reaches */
    oar_tensor *a4 =
        oar_permute(oar_reshape(x, 4, (int64_t[]){A, B, 1, d}), (int64_t[]){1, 0, 2, 3});
    for (int64_t b = 0; b < B; b++)
        for (int64_t a = 0; a < A; a++)
            for (int64_t j = 0; j < m; j++) {
                double s = 0;
                for (int64_t p = 0; p < d; p++)
                    s += xs[(a * B + b) * d + p] * ws[p * m + j];
                want[(b * A + a) * m + j] = s;
            }
    CHECK(worst(oar_matmul(a4, w), want, B * A * m) <= 1e-13);
    /* [B, 1, d] (a transposed [1, B, d] slice of x) times a batched [B, d, m] */
    oar_tensor *a3 = oar_permute(oar_reshape(oar_slice(x, 0, 0, 1, 1), 3, (int64_t[]){1, B, d}),
                                 (int64_t[]){1, 0, 2});
    for (int64_t b = 0; b < B; b++)
        for (int64_t j = 0; j < m; j++) {
            double s = 0;
            for (int64_t p = 0; p < d; p++)
                s += xs[b * d + p] * bs[(b * d + p) * m + j];
            want[b * m + j] = s;
        }
    CHECK(worst(oar_matmul(a3, wb), want, B * m) <= 1e-13);
    /* one row of x broadcast over 4 batches (batch stride 0) */
    oar_tensor *ab = oar_expand(oar_reshape(oar_slice(x, 0, 0, 1, 1), 3, (int64_t[]){1, B, d}), 3,
                                (int64_t[]){4, B, d});
    oar_tensor *ab1 = oar_slice(ab, 1, 2, 3, 1); /* [4, 1, d]: row 2 in every batch */
    for (int64_t r = 0; r < 4; r++)
        for (int64_t j = 0; j < m; j++) {
            double s = 0;
            for (int64_t p = 0; p < d; p++)
                s += xs[2 * d + p] * ws[p * m + j];
            want[r * m + j] = s;
        }
    CHECK(worst(oar_matmul(ab1, w), want, 4 * m) <= 1e-13);
done:
    free(xs), free(ws), free(bs);
    oar_pool_pop(pool);
}

/* index_select along dim of src (a permuted view of a contiguous array, as
 * the exporter's q/k/v split) against a loop over the array. */
static void check_select(int dim, int n_idx, const int64_t *idx) {
    oar_pool *pool = oar_pool_push();
    enum { P = 64, Q = 3, R = 40 }; /* base [P, Q, 1, R], viewed [Q, P, 1, R] */
    double *xs = NULL;
    oar_tensor *base = filled(OAR_F32, 6, 4, (int64_t[]){P, Q, 1, R}, &xs);
    oar_tensor *x = base ? oar_permute(base, (int64_t[]){1, 0, 2, 3}) : NULL;
    oar_tensor *ix = oar_tensor_from_data(idx, OAR_I64, 1, (int64_t[]){n_idx});
    CHECK(x && ix);
    if (x && ix) {
        int64_t shape[4] = {Q, P, 1, R};
        shape[dim] = n_idx;
        int64_t n = shape[0] * shape[1] * shape[2] * shape[3];
        double *want = malloc((size_t)n * sizeof *want);
        for (int64_t i = 0; want && i < n; i++) {
            int64_t c[4], r = i;
            for (int k = 3; k >= 0; k--)
                c[k] = r % shape[k], r /= shape[k];
            c[dim] = idx[c[dim]];
            want[i] = xs[((c[1] * Q + c[0]) * 1 + c[2]) * R +
                         c[3]]; /* view [q, p, 0, r] = base [p, q, 0, r] */
        }
        oar_tensor *y = oar_index_select(x, dim, ix);
        CHECK(y && oar_tensor_numel(y) == n);
        double e = want ? worst(y, want, n) : INFINITY;
        if (e != 0) fprintf(stderr, "  dim %d, %d indices: worst %g\n", dim, n_idx, e);
        CHECK(e == 0);
        free(want);
    }
    free(xs);
    oar_pool_pop(pool);
}

static void test_index_select_slices(void) {
    check_select(0, 1, (int64_t[]){2});        /* q, k or v: one slice of 2560 */
    check_select(0, 3, (int64_t[]){1, 0, 1});  /* several, repeated */
    check_select(1, 2, (int64_t[]){63, 5});    /* a middle dim: slices of Q * R */
    check_select(3, 3, (int64_t[]){39, 0, 7}); /* the last dim: slices of Q * P */
    check_select(
        1, 40,
        (int64_t[]){0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13,
                    14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27,
                    28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 63}); /* many indices, small slices:
                                                                         the line walk */
}

int main(void) {
    RUN(test_matmul_one_row_batches);
    RUN(test_matmul_dense_copy);
    RUN(test_matmul_unfoldable);
    RUN(test_index_select_slices);
    return test_summary();
}

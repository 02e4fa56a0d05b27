/* The sum kernels' vector paths against a sum in double written here:
 * leading-dim sums (the column kernel: 32-column blocks, 4-column blocks
 * and a scalar tail; one row, many rows, more rows than one chunk, a kept
 * middle dim), last-dim sums of odd lengths (the 16-lane rows), f32 and
 * f64, and bitwise the same results on one and two threads. f32 sums
 * accumulate in double, so they are within an ulp of the double sum. */
#include "test.h"

#ifdef _OPENMP
#include <omp.h>
#endif

/* |got - want| within one f32 ulp of want (f32) and, as the order of the
 * additions differs, 1e-14 of the sum of |terms| (mag). */
static int64_t n_off(oar_tensor *got, const double *want, const double *mag, int64_t n,
                     bool is64) {
    if (!got || oar_tensor_numel(got) != n) return -1;
    double *g = test_values(got);
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        double tol = 1e-14 * mag[i];
        if (!is64) tol += fabs(nextafterf((float)want[i], INFINITY) - (float)want[i]);
        if (!(fabs(g[i] - want[i]) <= tol)) {
            if (bad++ < 3)
                fprintf(stderr, "  [%lld] = %.17g, want %.17g\n", (long long)i, g[i], want[i]);
        }
    }
    free(g);
    return bad;
}

static bool same_bits(oar_tensor *a, oar_tensor *b) {
    if (!a || !b || oar_tensor_numel(a) != oar_tensor_numel(b)) return false;
    double *u = test_values(a), *v = test_values(b);
    bool same = u && v && memcmp(u, v, (size_t)oar_tensor_numel(a) * sizeof(double)) == 0;
    free(u);
    free(v);
    return same;
}

static void test_sum_first(void) {
    static const int64_t rows[] = {1, 2, 7, 300, 5000};
    static const int64_t cols[] = {1, 3, 4, 5, 31, 32, 33, 37, 64, 100, 128, 1025};
    for (int d = 0; d < 2; d++)
        for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++)
            for (size_t c = 0; c < sizeof cols / sizeof cols[0]; c++) {
                if (rows[r] * cols[c] > 600000) continue;
                oar_pool *p = oar_pool_push();
                oar_dtype dt = d ? OAR_F64 : OAR_F32;
                int64_t R = rows[r], C = cols[c], d0 = 0;
                oar_tensor *x = oar_randn(dt, 2, (int64_t[]){R, C});
                double *v = test_values(x), *want = calloc((size_t)C, sizeof(double));
                double *mag = calloc((size_t)C, sizeof(double));
                for (int64_t i = 0; i < R; i++)
                    for (int64_t j = 0; j < C; j++) {
                        want[j] += v[i * C + j];
                        mag[j] += fabs(v[i * C + j]);
                    }
                int64_t bad = n_off(oar_sum(x, 1, &d0, false), want, mag, C, d);
                CHECK(bad == 0);
                if (bad) fprintf(stderr, "  sum dim 0 of [%lld, %lld]\n", (long long)R, (long long)C);
                free(v);
                free(want);
                free(mag);
                oar_pool_pop(p);
            }
}

/* [A, R, B] summed over dim 1 (kept dims on both sides) and over dims 0, 1. */
static void test_sum_middle(void) {
    oar_pool *p = oar_pool_push();
    const int64_t A = 3, R = 77, B = 45;
    oar_tensor *x = oar_randn(OAR_F32, 3, (int64_t[]){A, R, B});
    double *v = test_values(x), *want = calloc((size_t)(A * B), sizeof(double));
    double *want01 = calloc((size_t)B, sizeof(double)), *mag = calloc((size_t)(A * B), sizeof(double));
    double *mag01 = calloc((size_t)B, sizeof(double));
    for (int64_t a = 0; a < A; a++)
        for (int64_t r = 0; r < R; r++)
            for (int64_t b = 0; b < B; b++) {
                double t = v[(a * R + r) * B + b];
                want[a * B + b] += t;
                want01[b] += t;
                mag[a * B + b] += fabs(t);
                mag01[b] += fabs(t);
            }
    int64_t d1 = 1, d01[2] = {0, 1};
    CHECK(n_off(oar_sum(x, 1, &d1, false), want, mag, A * B, false) == 0);
    CHECK(n_off(oar_sum(x, 2, d01, false), want01, mag01, B, false) == 0);
    free(v);
    free(want);
    free(want01);
    free(mag);
    free(mag01);
    oar_pool_pop(p);
}

static void test_sum_last(void) {
    static const int64_t lens[] = {1, 15, 16, 17, 255, 256, 257, 1000};
    for (int d = 0; d < 2; d++)
        for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
            oar_pool *p = oar_pool_push();
            oar_dtype dt = d ? OAR_F64 : OAR_F32;
            int64_t R = 67, n = lens[k], dl = -1;
            oar_tensor *x = oar_randn(dt, 2, (int64_t[]){R, n});
            double *v = test_values(x), *want = calloc((size_t)R, sizeof(double));
            double *mag = calloc((size_t)R, sizeof(double));
            for (int64_t i = 0; i < R; i++)
                for (int64_t j = 0; j < n; j++) {
                    want[i] += v[i * n + j];
                    mag[i] += fabs(v[i * n + j]);
                }
            CHECK(n_off(oar_sum(x, 1, &dl, false), want, mag, R, d) == 0);
            free(v);
            free(want);
            free(mag);
            oar_pool_pop(p);
        }
}

static void test_thread_invariance(void) {
#ifdef _OPENMP
    int saved = omp_get_max_threads();
    oar_pool *p = oar_pool_push();
    oar_tensor *x = oar_randn(OAR_F32, 2, (int64_t[]){3000, 100});
    int64_t d0 = 0, dl = -1;
    oar_tensor *r[2][2];
    for (int t = 0; t < 2; t++) {
        omp_set_num_threads(t + 1);
        r[t][0] = oar_sum(x, 1, &d0, false);
        r[t][1] = oar_sum(x, 1, &dl, false);
    }
    omp_set_num_threads(saved);
    CHECK(same_bits(r[0][0], r[1][0]));
    CHECK(same_bits(r[0][1], r[1][1]));
    oar_pool_pop(p);
#endif
}

int main(void) {
    oar_manual_seed(5);
    RUN(test_sum_first);
    RUN(test_sum_middle);
    RUN(test_sum_last);
    RUN(test_thread_invariance);
    return test_summary();
}

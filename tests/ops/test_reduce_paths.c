/* The sum kernels' vector paths against a sum in double written here:
 * leading-dim sums (the column kernel: 32-column blocks, 4-column blocks
 * and a scalar tail; one row, many rows, more rows than one chunk, a kept
 * middle dim), last-dim sums of odd lengths (the 16-lane rows), f32 and
 * f64, and bitwise the same results on one and two threads. f32 sums
 * group four elements in float, then accumulate in double: within 2^-23 of
 * the sum of |terms| plus an ulp of the double sum (cpu_reduce.c). */
#include "test.h"

#ifdef _OPENMP
#include <omp.h>
#endif

/* |got - want| within 1e-14 of the sum of |terms| (mag), as the order of
 * the additions differs; f32 also one ulp of want (the final rounding) and
 * 2^-23 of mag (the float groups), the bound cpu_reduce.c states. */
static int64_t n_off(oar_tensor *got, const double *want, const double *mag, int64_t n,
                     bool is64) {
    if (!got || oar_tensor_numel(got) != n) return -1;
    double *g = test_values(got);
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        double tol = 1e-14 * mag[i];
        if (!is64) tol += fabs(nextafterf((float)want[i], INFINITY) - (float)want[i]) + 0x1p-23 * mag[i];
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

/* 1 followed by 4096 terms of 2^-24: a float accumulator stays at 1 (each
 * 1 + 2^-24 rounds back to 1), 2^-12 short; the float groups lose at most
 * the one term that shares a group with the 1, so every path is within an
 * ulp of 1 + 2^-12: a row (last dim), a strided run (every other element),
 * and columns (dim 0, columns 3 and 40: the scalar, 4-wide and 32-wide loops). */
static void test_sum_small_terms(void) {
    oar_pool *p = oar_pool_push();
    const int64_t n = 4097;
    const double want = 1 + 0x1p-12, ulp = 0x1p-23;
    float *v = calloc((size_t)(2 * n * 40), sizeof(float));
    for (int64_t i = 0; i < n; i++) v[i] = i ? 0x1p-24f : 1.0f;
    oar_tensor *row = oar_tensor_from_data(v, OAR_F32, 1, (int64_t[]){n});
    float got = 0;
    CHECK(oar_tensor_to_host(oar_sum(row, 0, NULL, false), &got, sizeof got) == 0);
    CHECK(fabs(got - want) <= ulp);
    for (int64_t i = 0; i < 2 * n; i++) v[i] = i % 2 ? -5.0f : i ? 0x1p-24f : 1.0f;
    oar_tensor *pairs = oar_tensor_from_data(v, OAR_F32, 1, (int64_t[]){2 * n});
    oar_tensor *every_other = oar_slice(pairs, 0, 0, 2 * n, 2);
    got = 0;
    CHECK(oar_tensor_to_host(oar_sum(every_other, 0, NULL, false), &got, sizeof got) == 0);
    CHECK(fabs(got - want) <= ulp);
    for (int64_t c = 3; c <= 40; c += 37) {
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < c; j++) v[i * c + j] = i ? 0x1p-24f : 1.0f;
        oar_tensor *m = oar_tensor_from_data(v, OAR_F32, 2, (int64_t[]){n, c});
        float cols[40];
        int64_t d0 = 0;
        CHECK(oar_tensor_to_host(oar_sum(m, 1, &d0, false), cols, (size_t)c * sizeof(float)) == 0);
        for (int64_t j = 0; j < c; j++) CHECK(fabs(cols[j] - want) <= ulp);
    }
    free(v);
    oar_pool_pop(p);
}

int main(void) {
    oar_manual_seed(5);
    RUN(test_sum_first);
    RUN(test_sum_middle);
    RUN(test_sum_last);
    RUN(test_thread_invariance);
    RUN(test_sum_small_terms);
    return test_summary();
}

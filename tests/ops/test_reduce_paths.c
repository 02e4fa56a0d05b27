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

/* f32 amax/amin over the last dim of contiguous rows run eight rows at a
 * time (cpu_reduce.c): row counts around multiples of 8, lengths below 8,
 * multiples of 8 and odd tails (some rows' extremes in them), +-inf, and
 * NaNs in the vector part and in
 * the tail: a row with a NaN gives NaN (which NaN's payload is not
 * specified, as in PyTorch), any other its extreme exactly. */
static uint32_t bits_of(float v) {
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    return u;
}

static void test_extreme_rows(void) {
    static const int64_t rows[] = {1, 7, 8, 9, 17, 67};
    static const int64_t lens[] = {1, 5, 8, 9, 16, 31, 128, 130};
    int64_t bad = 0, checked = 0;
    uint64_t seed = 7;
    for (size_t a = 0; a < sizeof rows / sizeof rows[0]; a++)
        for (size_t b = 0; b < sizeof lens / sizeof lens[0]; b++) {
            oar_pool *p = oar_pool_push();
            const int64_t R = rows[a], n = lens[b];
            float *v = malloc((size_t)(R * n) * sizeof *v);
            for (int64_t i = 0; i < R * n; i++) {
                seed = seed * 6364136223846793005ull + 1442695040888963407ull;
                v[i] = (float)((int64_t)(seed >> 40) % 2001 - 1000) / 100.0f;
            }
            for (int64_t r = 0; r < R; r++) {
                if (r % 3 == 0) v[r * n + n - 1] = 50; /* extremes in the tail */
                if (r % 3 == 0 && n > 1) v[r * n + n - 2] = -50;
                if (r % 5 == 1) v[r * n + (r * 7) % n] = INFINITY;
                if (r % 6 == 2) v[r * n + (r * 3) % n] = -INFINITY;
                if (r % 4 == 3 && (r / 8) % 2) { /* two NaNs, in every other group of 8 rows */
                    uint32_t u1 = 0x7fc00000u | (uint32_t)(r + 1), u2 = 0x7fc00000u | 0x2000u;
                    int64_t j1 = (r * 5) % n, j2 = n - 1;
                    if (j2 > j1) memcpy(&v[r * n + j2], &u2, sizeof u2);
                    memcpy(&v[r * n + j1], &u1, sizeof u1);
                }
            }
            oar_tensor *x = oar_tensor_from_data(v, OAR_F32, 2, (int64_t[]){R, n});
            float *got = malloc((size_t)R * sizeof *got);
            int64_t last = -1;
            for (int op = 0; op < 2; op++) {
                oar_tensor *y = op ? oar_amin(x, 1, &last, false) : oar_amax(x, 1, &last, false);
                CHECK(y && oar_tensor_to_host(y, got, (size_t)R * sizeof *got) == 0);
                for (int64_t r = 0; r < R; r++) {
                    float want = v[r * n];
                    for (int64_t j = 1; j < n && want == want; j++) {
                        float e = v[r * n + j];
                        if (e != e || (op ? e < want : e > want)) want = e;
                    }
                    checked++;
                    bool same = want != want ? got[r] != got[r] : bits_of(got[r]) == bits_of(want);
                    if (!same) {
                        if (bad++ < 3)
                            fprintf(stderr, "  %s of row %lld of [%lld, %lld]: %g (0x%08x), want %g (0x%08x)\n",
                                    op ? "amin" : "amax", (long long)r, (long long)R, (long long)n,
                                    got[r], bits_of(got[r]), want, bits_of(want));
                    }
                }
            }
            free(v);
            free(got);
            oar_pool_pop(p);
        }
    CHECK(checked == 2 * (1 + 7 + 8 + 9 + 17 + 67) * 8);
    CHECK(bad == 0);
}

int main(void) {
    oar_manual_seed(5);
    RUN(test_sum_first);
    RUN(test_sum_middle);
    RUN(test_sum_last);
    RUN(test_thread_invariance);
    RUN(test_sum_small_terms);
    RUN(test_extreme_rows);
    return test_summary();
}

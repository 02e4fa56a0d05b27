/* The CPU's f32 GEMM and its two providers (src/backends/cpu/cpu_gemm.c):
 * oari_cpu_sgemm against a float64 loop under each choice (oneDNN,
 * OpenBLAS, auto) for every transpose pair, leading dimensions wider than
 * the matrix, alpha and beta other than 1 and 0, and sizes on both sides of
 * the tiny-product threshold; the GEMV likewise; which provider auto picks
 * (lower thresholds, and GEMV too, where OpenBLAS runs pre-AVX kernels);
 * OAR_CPU_SGEMM (an unknown value warns and falls back to auto); the
 * once-only note about such an OpenBLAS at an f64 product; and matmul,
 * conv2d and an LSTM layer, which reach it through three kernels, giving
 * the same values under both providers. */
#include "test.h"
#include "stderr_capture.h"

#include "backends/cpu/cpu.h"

#include <stdint.h>

#ifdef OAR_TEST_WITH_DNNL
#define HAVE_ONEDNN 1
#else
#define HAVE_ONEDNN 0
#endif

static const int providers[] = {OARI_SGEMM_AUTO, OARI_SGEMM_ONEDNN, OARI_SGEMM_OPENBLAS};
static const char *const provider_names[] = {"auto", "onednn", "openblas"};

/* Whether OpenBLAS runs kernels without AVX on a CPU with AVX2 here (its
 * fallback on a model it does not know), read as cpu_gemm.c does. */
static bool openblas_pre_avx_here(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    static const char *const cores[] = {"Prescott",  "Core2",  "Penryn",  "Dunnington",
                                        "Nehalem",   "Atom",   "Opteron", "Opteron_SSE3",
                                        "Barcelona", "Bobcat", "Nano"};
    __builtin_cpu_init();
    const char *core = openblas_get_corename();
    for (size_t i = 0; core && i < sizeof cores / sizeof *cores; i++)
        if (!strcmp(core, cores[i])) return __builtin_cpu_supports("avx2");
#endif
    return false;
}

static float value(int which, int64_t i) { return (float)test_hash_value(which, i); }

/* C = alpha op(A) op(B) + beta C, row-major, in float64 */
static void ref_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha,
                     const float *a, int64_t lda, const float *b, int64_t ldb, double beta,
                     const float *c0, double *c, int64_t ldc) {
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = 0;
            for (int64_t p = 0; p < k; p++)
                s += (double)(ta ? a[p * lda + i] : a[i * lda + p]) *
                     (tb ? b[j * ldb + p] : b[p * ldb + j]);
            c[i * ldc + j] = alpha * s + beta * c0[i * ldc + j];
        }
}

/* One product under the current provider against the loop: every entry of
 * C within 1e-5 (1 + |k|) (values are in [-1, 1)), and the padding past
 * each row's n columns untouched. */
static void check_product(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                          float beta, int pad) {
    int64_t lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad, ldc = n + pad;
    int64_t na = (ta ? k : m) * lda, nb = (tb ? n : k) * ldb, nc = m * ldc;
    float *a = malloc((size_t)(na ? na : 1) * sizeof *a),
          *b = malloc((size_t)(nb ? nb : 1) * sizeof *b);
    float *c = malloc((size_t)(nc ? nc : 1) * sizeof *c),
          *c0 = malloc((size_t)(nc ? nc : 1) * sizeof *c0);
    double *r = malloc((size_t)(nc ? nc : 1) * sizeof *r);
    CHECK(a && b && c && c0 && r);
    if (!a || !b || !c || !c0 || !r) goto done;
    for (int64_t i = 0; i < na; i++)
        a[i] = value(1, i);
    for (int64_t i = 0; i < nb; i++)
        b[i] = value(2, i);
    for (int64_t i = 0; i < nc; i++)
        c[i] = c0[i] = value(3, i);
    ref_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c0, r, ldc);
    oari_cpu_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                   (blasint)m, (blasint)n, (blasint)k, alpha, a, (blasint)lda, b, (blasint)ldb,
                   beta, c, (blasint)ldc);
    double worst = 0, tol = 1e-5 * (1.0 + (double)k);
    bool pad_kept = true;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < ldc; j++) {
            if (j >= n)
                pad_kept &= c[i * ldc + j] == c0[i * ldc + j];
            else if (!(fabs(c[i * ldc + j] - r[i * ldc + j]) <= worst))
                worst = fabs(c[i * ldc + j] - r[i * ldc + j]);
        }
    if (!(worst <= tol) || !pad_kept)
        fprintf(stderr,
                "  %c%c %lldx%lldx%lld alpha %g beta %g pad %d: worst %g (tol %g), padding %s\n",
                ta ? 'T' : 'N', tb ? 'T' : 'N', (long long)m, (long long)n, (long long)k, alpha,
                beta, pad, worst, tol, pad_kept ? "kept" : "written");
    CHECK(worst <= tol);
    CHECK(pad_kept);
done:
    free(a), free(b), free(c), free(c0), free(r);
}

static void test_products(void) {
    /* under and over 32^3 multiply-adds; thin, wide and square; k 1 */
    static const int64_t shapes[][3] = {{3, 5, 4},    {8, 8, 8},     {1, 300, 70}, {70, 1, 300},
                                        {33, 33, 33}, {130, 70, 90}, {257, 64, 1}, {64, 200, 128}};
    for (size_t p = 0; p < sizeof providers / sizeof *providers; p++) {
        int was = oari_cpu_sgemm_use(providers[p]), failed_before = test_failed;
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
            for (int t = 0; t < 4; t++) {
                bool ta = t & 1, tb = t & 2;
                check_product(ta, tb, shapes[s][0], shapes[s][1], shapes[s][2], 1.0f, 0.0f, 0);
                check_product(ta, tb, shapes[s][0], shapes[s][1], shapes[s][2], -0.5f, 2.0f, 3);
            }
        oari_cpu_sgemm_use(was);
        if (test_failed > failed_before) fprintf(stderr, "  (provider %s)\n", provider_names[p]);
    }
}

/* y = op(M) x against the loop under each choice: both orientations, x at
 * stride 1 and 3, a leading dimension wider than the row, sizes on both
 * sides of the threshold. */
static void test_gemv(void) {
    static const int64_t shapes[][2] = {{1, 1}, {5, 7}, {64, 64}, {300, 77}, {77, 300}};
    for (size_t p = 0; p < sizeof providers / sizeof *providers; p++) {
        int was = oari_cpu_sgemm_use(providers[p]);
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
            for (int t = 0; t < 4; t++) {
                bool trans = t & 1;
                int64_t rows = shapes[s][0], cols = shapes[s][1], ld = cols + 2 * (t >> 1),
                        inc = t & 2 ? 3 : 1;
                int64_t nx = trans ? rows : cols, ny = trans ? cols : rows;
                float *m = malloc((size_t)(rows * ld) * sizeof *m),
                      *x = malloc((size_t)(nx * inc) * sizeof *x);
                float *y = malloc((size_t)ny * sizeof *y);
                CHECK(m && x && y);
                if (m && x && y) {
                    for (int64_t i = 0; i < rows * ld; i++)
                        m[i] = value(5, i);
                    for (int64_t i = 0; i < nx * inc; i++)
                        x[i] = value(6, i);
                    oari_cpu_sgemv(trans, rows, cols, m, ld, x, inc, y);
                    double worst = 0;
                    for (int64_t j = 0; j < ny; j++) {
                        double r = 0;
                        for (int64_t q = 0; q < nx; q++)
                            r += (double)(trans ? m[q * ld + j] : m[j * ld + q]) * x[q * inc];
                        if (!(fabs(y[j] - r) <= worst)) worst = fabs(y[j] - r);
                    }
                    if (!(worst <= 1e-5 * (1.0 + (double)nx)))
                        fprintf(stderr, "  gemv %s %lldx%lld ld %lld inc %lld (%s): worst %g\n",
                                trans ? "T" : "N", (long long)rows, (long long)cols, (long long)ld,
                                (long long)inc, provider_names[p], worst);
                    CHECK(worst <= 1e-5 * (1.0 + (double)nx));
                }
                free(m), free(x), free(y);
            }
        oari_cpu_sgemm_use(was);
    }
}

/* An f64 product on an OpenBLAS that runs pre-AVX kernels on a CPU with
 * AVX2 (an unknown model) says so once; elsewhere nothing. */
static void test_pre_avx_note(void) {
    oar_pool *pool = oar_pool_push();
    bool pre_avx = openblas_pre_avx_here();
    oar_tensor *a = oar_randn(OAR_F64, 2, (int64_t[]){64, 64});
    capture_begin();
    oar_tensor *small =
        oar_matmul(oar_slice(a, 0, 0, 4, 1), oar_slice(a, 1, 0, 4, 1)); /* 4^3: no note */
    const char *err = capture_end();
    CHECK(small && count(err, "OPENBLAS_CORETYPE") == 0);
    capture_begin();
    oar_tensor *y1 = oar_matmul(a, a), *y2 = oar_matmul(a, a);
    err = capture_end();
    CHECK(y1 && y2);
    CHECK(count(err, "OPENBLAS_CORETYPE=") == (pre_avx ? 1 : 0));
    if (pre_avx) CHECK(strstr(err, "matrix products run several times slower") != NULL);
    oar_pool_pop(pool);
}

/* Which provider a product goes to, and what oari_cpu_sgemm_use accepts. */
static void test_choice(void) {
    int was = oari_cpu_sgemm_use(OARI_SGEMM_AUTO);
    CHECK(!oari_cpu_sgemm_onednn(8, 8, 8)); /* tiny: OpenBLAS's call is cheaper */
    /* from 32^3 multiply-adds; from 16^3 where OpenBLAS runs pre-AVX kernels */
    bool pre_avx = openblas_pre_avx_here();
    CHECK(!oari_cpu_sgemm_onednn(15, 16, 16));
    CHECK(oari_cpu_sgemm_onednn(16, 16, 16) == (HAVE_ONEDNN && pre_avx));
    CHECK(oari_cpu_sgemm_onednn(31, 32, 32) == (HAVE_ONEDNN && pre_avx));
    CHECK(oari_cpu_sgemm_onednn(32, 32, 32) == HAVE_ONEDNN);
    /* a matrix-vector product: sgemv, unless OpenBLAS runs pre-AVX kernels */
    CHECK(oari_cpu_sgemv_onednn(64, 64) == (HAVE_ONEDNN && pre_avx));
    CHECK(!oari_cpu_sgemv_onednn(8, 8));
    CHECK(oari_cpu_sgemm_onednn(2048, 128, 512) == HAVE_ONEDNN);
    /* (a build without oneDNN ignores the choices it lacks: it stays with OpenBLAS) */
    CHECK(oari_cpu_sgemm_use(OARI_SGEMM_ONEDNN) ==
          (HAVE_ONEDNN ? OARI_SGEMM_AUTO : OARI_SGEMM_OPENBLAS));
    CHECK(oari_cpu_sgemm_onednn(8, 8, 8) == HAVE_ONEDNN); /* pinned: every size */
    CHECK(oari_cpu_sgemv_onednn(8, 8) == HAVE_ONEDNN);
    oari_cpu_sgemm_use(OARI_SGEMM_OPENBLAS);
    CHECK(!oari_cpu_sgemm_onednn(2048, 128, 512));
    CHECK(!oari_cpu_sgemv_onednn(4096, 4096));
    /* a value that names no provider changes nothing */
    CHECK(oari_cpu_sgemm_use(42) == OARI_SGEMM_OPENBLAS);
    CHECK(oari_cpu_sgemm_use(-1) == OARI_SGEMM_OPENBLAS);
    CHECK(oari_cpu_sgemm_use(was) == OARI_SGEMM_OPENBLAS);
}

/* max |x - y| / (1 + |y|) of two f32 tensors of one shape, INFINITY on a failure */
static double rel_diff(oar_tensor *x, oar_tensor *y) {
    if (!x || !y || oar_tensor_numel(x) != oar_tensor_numel(y)) return INFINITY;
    double *u = test_values(x), *v = test_values(y), m = u && v ? 0 : INFINITY;
    for (int64_t i = 0; u && v && i < oar_tensor_numel(x); i++) {
        double d = fabs(u[i] - v[i]) / (1 + fabs(v[i]));
        if (!(d <= m)) m = d;
    }
    free(u);
    free(v);
    return m;
}

/* The three kernels that call the GEMM give the same values (to rounding)
 * under both providers: matmul (a batch of transposed views), conv2d (im2col
 * and Winograd) and an LSTM layer (its gate products). */
static void test_kernels_agree(void) {
    oar_pool *pool = oar_pool_push();
    oar_manual_seed(7);
    oar_tensor *a = oar_randn(OAR_F32, 3, (int64_t[]){4, 96, 80});
    oar_tensor *b = oar_transpose(oar_randn(OAR_F32, 3, (int64_t[]){4, 72, 80}), 1, 2);
    oar_tensor *x = oar_randn(OAR_F32, 4, (int64_t[]){2, 16, 20, 20});
    oar_tensor *w3 = oar_randn(OAR_F32, 4, (int64_t[]){24, 16, 3, 3});
    oar_tensor *w5 = oar_randn(OAR_F32, 4, (int64_t[]){24, 16, 5, 5});
    oar_tensor *seq = oar_randn(OAR_F32, 3, (int64_t[]){6, 3, 40});
    oar_module *lstm = oar_lstm_new(40, 48, &(oar_rnn_options){.num_layers = 1});
    CHECK(a && b && x && w3 && w5 && seq && lstm);
    oar_tensor *got[2][4] = {{0}};
    for (int p = 0; p < 2; p++) {
        int was = oari_cpu_sgemm_use(p ? OARI_SGEMM_OPENBLAS : OARI_SGEMM_ONEDNN);
        got[p][0] = oar_matmul(a, b);
        got[p][1] =
            oar_conv2d(x, w3, NULL, (int64_t[]){1, 1}, (int64_t[]){1, 1}, (int64_t[]){1, 1}, 1);
        got[p][2] =
            oar_conv2d(x, w5, NULL, (int64_t[]){2, 2}, (int64_t[]){2, 2}, (int64_t[]){1, 1}, 1);
        got[p][3] = oar_module_forward(lstm, seq);
        oari_cpu_sgemm_use(was);
    }
    for (int i = 0; i < 4; i++) {
        double d = rel_diff(got[0][i], got[1][i]);
        if (!(d <= 1e-4)) fprintf(stderr, "  kernel %d: relative difference %g\n", i, d);
        CHECK(d <= 1e-4);
    }
    oar_module_free(lstm);
    oar_pool_pop(pool);
}

/* OAR_CPU_SGEMM is read at the first product; an unknown value says so on
 * stderr and leaves auto. Runs first, before any product. */
static void test_environment(void) {
    setenv("OAR_CPU_SGEMM", "mkl", 1);
    capture_begin();
    bool big = oari_cpu_sgemm_onednn(64, 64, 64); /* reads the variable */
    const char *err = capture_end();
#if HAVE_ONEDNN
    CHECK(strstr(err, "OAR_CPU_SGEMM=mkl is not one of auto, onednn, openblas") != NULL);
    CHECK(big); /* auto */
#else
    CHECK(!big); /* no oneDNN in this build: the variable names nothing it has */
    CHECK(count(err, "OAR_CPU_SGEMM") == 0);
#endif
    unsetenv("OAR_CPU_SGEMM");
}

int main(void) {
    RUN(test_environment);
    RUN(test_choice);
    RUN(test_products);
    RUN(test_gemv);
    RUN(test_pre_avx_note);
    RUN(test_kernels_agree);
    return test_summary();
}

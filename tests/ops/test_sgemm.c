/* The CPU's f32 GEMM and its two providers (src/backends/cpu/cpu_gemm.c):
 * oari_cpu_sgemm against a float64 loop under each choice (oneDNN,
 * OpenBLAS, auto) for every transpose pair, leading dimensions wider than
 * the matrix, alpha and beta other than 1 and 0, and sizes on both sides of
 * the tiny-product threshold; which provider auto picks; OAR_CPU_SGEMM
 * (an unknown value warns and falls back to auto); and matmul, conv2d and
 * an LSTM layer, which reach it through three kernels, giving the same
 * values under both providers. */
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
        int was = oari_cpu_sgemm_use(providers[p]);
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
            for (int t = 0; t < 4; t++) {
                bool ta = t & 1, tb = t & 2;
                check_product(ta, tb, shapes[s][0], shapes[s][1], shapes[s][2], 1.0f, 0.0f, 0);
                check_product(ta, tb, shapes[s][0], shapes[s][1], shapes[s][2], -0.5f, 2.0f, 3);
            }
        oari_cpu_sgemm_use(was);
        if (test_failed) fprintf(stderr, "  (provider %s)\n", provider_names[p]);
    }
}

/* Which provider a product goes to, and what oari_cpu_sgemm_use accepts. */
static void test_choice(void) {
    int was = oari_cpu_sgemm_use(OARI_SGEMM_AUTO);
    CHECK(!oari_cpu_sgemm_onednn(8, 8, 8)); /* tiny: OpenBLAS's call is cheaper */
    CHECK(!oari_cpu_sgemm_onednn(31, 32, 32));
    CHECK(oari_cpu_sgemm_onednn(32, 32, 32) == HAVE_ONEDNN);
    CHECK(oari_cpu_sgemm_onednn(2048, 128, 512) == HAVE_ONEDNN);
    CHECK(oari_cpu_sgemm_use(OARI_SGEMM_ONEDNN) == OARI_SGEMM_AUTO);
    CHECK(oari_cpu_sgemm_onednn(8, 8, 8) == HAVE_ONEDNN); /* pinned: every size */
    oari_cpu_sgemm_use(OARI_SGEMM_OPENBLAS);
    CHECK(!oari_cpu_sgemm_onednn(2048, 128, 512));
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
#endif
    unsetenv("OAR_CPU_SGEMM");
}

int main(void) {
    RUN(test_environment);
    RUN(test_choice);
    RUN(test_products);
    RUN(test_kernels_agree);
    return test_summary();
}

/* conv2d's Winograd F(4x4, 3x3) and F(2x2, 3x3) paths
 * (src/backends/cpu/cpu_conv_wino.c)
 * against direct float64 loops written here: the kernel itself on odd
 * planes (H, W not multiples of the 4x4 tile, planes smaller than a tile
 * plus padding, wider than one chunk of 16 tiles), padding 0, 1 and 2,
 * channel counts 1, 3 and 64, batch 1 and 3, with and without a bias; then
 * conv2d on shapes the selection sends there (checked), with strided
 * inputs, results bitwise the same on one and two threads, and every
 * allocation failing in turn. */
#include "test.h"
#include "alloc_fail.h"

#include "backends/cpu/cpu.h"
#include "ops/op.h"

#ifdef _OPENMP
#include <omp.h>
#endif

/* y [N, O, OH, OW] in float64 and the sums of |terms| (mag). */
static void ref_conv(const float *x, const float *w, const float *b, int64_t N, int64_t C,
                     int64_t H, int64_t W, int64_t O, int64_t ph, int64_t pw, double *y,
                     double *mag) {
    const int64_t OH = H + 2 * ph - 2, OW = W + 2 * pw - 2;
    for (int64_t n = 0; n < N; n++)
        for (int64_t o = 0; o < O; o++)
            for (int64_t oy = 0; oy < OH; oy++)
                for (int64_t ox = 0; ox < OW; ox++) {
                    double s = b ? b[o] : 0, m = b ? fabs(b[o]) : 0;
                    for (int64_t c = 0; c < C; c++)
                        for (int64_t i = 0; i < 3; i++)
                            for (int64_t j = 0; j < 3; j++) {
                                int64_t iy = oy - ph + i, ix = ox - pw + j;
                                if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
                                double t = (double)x[((n * C + c) * H + iy) * W + ix] *
                                           (double)w[((o * C + c) * 3 + i) * 3 + j];
                                s += t;
                                m += fabs(t);
                            }
                    int64_t k = ((n * O + o) * OH + oy) * OW + ox;
                    y[k] = s;
                    mag[k] = m;
                }
}

static float frand(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

/* Counts outputs off by more than 1e-5 of sum |terms| + 1e-6 (the bound of
 * tests/ops/test_conv_fast.c), printing the first few. */
static int64_t count_bad(const char *what, const float *got, const double *want,
                         const double *mag, int64_t n) {
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++)
        if (!(fabs((double)got[i] - want[i]) <= 1e-5 * mag[i] + 1e-6) && bad++ < 3)
            fprintf(stderr, "  %s[%lld] = %.9g, want %.9g\n", what, (long long)i, (double)got[i],
                    want[i]);
    return bad;
}

/* The kernel on raw buffers, whatever the selection would say. Each output
 * is written once: y starts as NaN, so a tile the kernel missed shows. */
static void test_kernel(void) {
    static const struct {
        int64_t n, c, h, w, o, ph, pw;
        bool bias;
    } cases[] = {
        {1, 1, 7, 9, 1, 0, 0, false},   /* 5 x 7 outputs: partial tiles both ways */
        {3, 3, 9, 6, 5, 1, 1, true},    /* 9 x 6 */
        {1, 64, 11, 13, 64, 1, 1, true},
        {3, 64, 6, 6, 3, 0, 0, false},  /* one 4x4 tile per image */
        {1, 3, 3, 3, 64, 1, 1, true},   /* a plane smaller than a tile */
        {3, 1, 5, 70, 3, 1, 0, true},   /* 68 columns: 17 tiles, two chunks */
        {1, 3, 8, 8, 1, 2, 2, false},   /* padding 2: rows and columns of zeros */
        {3, 64, 13, 7, 64, 0, 1, true}, /* padding only along W */
    };
    uint32_t seed = 12345;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const int64_t N = cases[k].n, C = cases[k].c, H = cases[k].h, W = cases[k].w;
        const int64_t O = cases[k].o, ph = cases[k].ph, pw = cases[k].pw;
        const int64_t OH = H + 2 * ph - 2, OW = W + 2 * pw - 2, ny = N * O * OH * OW;
        float *x = malloc(sizeof(float) * (size_t)(N * C * H * W));
        float *w = malloc(sizeof(float) * (size_t)(O * C * 9));
        float *b = malloc(sizeof(float) * (size_t)O);
        float *y = malloc(sizeof(float) * (size_t)ny);
        double *ry = malloc(sizeof(double) * (size_t)ny), *mag = malloc(sizeof(double) * (size_t)ny);
        for (int64_t i = 0; i < N * C * H * W; i++) x[i] = frand(&seed);
        for (int64_t i = 0; i < O * C * 9; i++) w[i] = frand(&seed);
        for (int64_t i = 0; i < O; i++) b[i] = frand(&seed);
        oar_ktensor bk = {.dtype = -1};
        if (cases[k].bias) {
            bk.data = b;
            bk.dtype = OAR_F32;
            bk.ndim = 1;
            bk.shape[0] = O;
            bk.strides[0] = 1;
        }
        ref_conv(x, w, cases[k].bias ? b : NULL, N, C, H, W, O, ph, pw, ry, mag);
        for (int m = 4; m >= 2; m -= 2) { /* F(4x4, 3x3) and F(2x2, 3x3) */
            for (int64_t i = 0; i < ny; i++) y[i] = NAN;
            int st = oari_cpu_conv2d_wino(x, w, &bk, y, N, C, H, W, O, OH, OW, ph, pw, m);
            CHECK(st == 0);
            int64_t bad = count_bad("wino", y, ry, mag, ny);
            if (bad)
                fprintf(stderr, "  case %zu, m %d: %lld of %lld off\n", k, m, (long long)bad,
                        (long long)ny);
            CHECK(bad == 0);
        }
        free(x), free(w), free(b), free(y), free(ry), free(mag);
    }
}

/* y = conv2d(x, w, b, padding p), as floats (a new malloc). */
static float *run_conv(oar_tensor *x, oar_tensor *w, oar_tensor *b, int64_t p) {
    oar_tensor *y = oar_conv2d(x, w, b, (int64_t[]){1, 1}, (int64_t[]){p, p}, (int64_t[]){1, 1}, 1);
    CHECK(y != NULL);
    if (!y) return NULL;
    y = oar_contiguous(y);
    int64_t n = oar_tensor_numel(y);
    float *v = malloc(sizeof(float) * (size_t)n);
    memcpy(v, oar_tensor_data(y), sizeof(float) * (size_t)n);
    return v;
}

/* conv2d on shapes the selection gives Winograd: against the float64
 * loops, x also as a strided view, and bitwise the same on 1 and 2 threads
 * (blocks and gemms follow from the shapes alone). */
static void test_selected(void) {
    static const struct {
        int64_t n, c, h, w, o, p;
        int m;
    } cases[] = {
        {1, 64, 30, 29, 64, 1, 4}, /* 8 x 7 tiles, one image */
        {3, 16, 17, 19, 24, 0, 4}, /* 15 x 17 outputs, three images */
        {2, 32, 14, 14, 48, 1, 4}, /* ResNet's 14x14 stage at batch 2 (32 tiles) */
        {1, 32, 14, 13, 40, 1, 2}, /* batch 1: 16 4x4 tiles, 49 2x2 tiles */
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        oar_pool *pool = oar_pool_push();
        const int64_t N = cases[k].n, C = cases[k].c, H = cases[k].h, W = cases[k].w;
        const int64_t O = cases[k].o, p = cases[k].p, OH = H + 2 * p - 2, OW = W + 2 * p - 2;
        const int64_t ny = N * O * OH * OW;
        CHECK(oari_cpu_wino_ok(N, C, O, OH, OW, 3, 3, 1, 1, 1, 1, 1) == cases[k].m);
        /* x as a transposed view of [N, C, W, H]: conv2d copies it first */
        oar_tensor *xt = oar_randn(OAR_F32, 4, (int64_t[]){N, C, W, H});
        oar_tensor *x = oar_transpose(xt, 2, 3);
        oar_tensor *w = oar_randn(OAR_F32, 4, (int64_t[]){O, C, 3, 3});
        oar_tensor *b = oar_randn(OAR_F32, 1, (int64_t[]){O});
        oar_tensor *xc = oar_contiguous(x), *wc = oar_contiguous(w), *bc = oar_contiguous(b);
        double *ry = malloc(sizeof(double) * (size_t)ny), *mag = malloc(sizeof(double) * (size_t)ny);
        ref_conv(oar_tensor_data(xc), oar_tensor_data(wc), oar_tensor_data(bc), N, C, H, W, O, p, p,
                 ry, mag);
#ifdef _OPENMP
        const int nt0 = omp_get_max_threads(), dynamic = omp_get_dynamic();
        omp_set_dynamic(0); /* the teams asked for (OMP_DYNAMIC would shrink them) */
        omp_set_num_threads(1);
#endif
        float *y1 = run_conv(x, w, b, p);
#ifdef _OPENMP
        omp_set_num_threads(2);
#endif
        float *y2 = run_conv(x, w, b, p);
#ifdef _OPENMP
        omp_set_num_threads(nt0);
        omp_set_dynamic(dynamic);
#endif
        if (y1 && y2) {
            CHECK(count_bad("conv2d", y1, ry, mag, ny) == 0);
            CHECK(memcmp(y1, y2, sizeof(float) * (size_t)ny) == 0);
        }
        free(y1), free(y2), free(ry), free(mag);
        oar_pool_pop(pool);
    }
}

/* The selection: 3x3 stride 1 undilated ungrouped with 16 channels, F(4x4)
 * from 32 4x4 tiles (64 beyond 256 x 256 channels), else F(2x2) from 48
 * 2x2 tiles up to 256 x 256 channels; everything else stays with the
 * other kernels. */
static void test_selection(void) {
    CHECK(oari_cpu_wino_ok(1, 64, 64, 56, 56, 3, 3, 1, 1, 1, 1, 1) == 4);
    CHECK(!oari_cpu_wino_ok(1, 64, 64, 28, 28, 3, 3, 2, 2, 1, 1, 1)); /* stride 2 */
    CHECK(!oari_cpu_wino_ok(1, 64, 64, 56, 56, 3, 3, 1, 1, 2, 2, 1)); /* dilation */
    CHECK(!oari_cpu_wino_ok(1, 64, 64, 56, 56, 3, 3, 1, 1, 1, 1, 2)); /* groups */
    CHECK(!oari_cpu_wino_ok(1, 64, 64, 56, 56, 5, 5, 1, 1, 1, 1, 1)); /* 5x5 */
    CHECK(!oari_cpu_wino_ok(1, 3, 64, 56, 56, 3, 3, 1, 1, 1, 1, 1));  /* 3 channels in */
    CHECK(oari_cpu_wino_ok(1, 256, 256, 14, 14, 3, 3, 1, 1, 1, 1, 1) == 2); /* 16 + 49 tiles */
    CHECK(!oari_cpu_wino_ok(1, 256, 256, 12, 12, 3, 3, 1, 1, 1, 1, 1));     /* 9 + 36 */
    CHECK(oari_cpu_wino_ok(2, 256, 256, 14, 14, 3, 3, 1, 1, 1, 1, 1) == 4); /* 32 */
    CHECK(!oari_cpu_wino_ok(1, 512, 512, 7, 7, 3, 3, 1, 1, 1, 1, 1));       /* 4 */
    CHECK(!oari_cpu_wino_ok(8, 512, 512, 7, 7, 3, 3, 1, 1, 1, 1, 1));       /* 32, 512 ch. */
    CHECK(oari_cpu_wino_ok(16, 512, 512, 7, 7, 3, 3, 1, 1, 1, 1, 1) == 4);  /* 64 */
}

/* Every allocation of a Winograd conv fails in turn: NULL with a message,
 * no crash, no leak (ASan). */
static void test_allocation_failures(void) {
    bool finished = false;
    for (long n = 0; n < 200 && !finished; n++) {
        n_calls = 0;
        fail_at = n;
        oar_set_allocator(failing_alloc, NULL);
        oar_pool *p = oar_pool_push();
        oar_clear_error();
        oar_tensor *x = oar_ones(OAR_F32, 4, (int64_t[]){1, 16, 20, 20});
        oar_tensor *w = x ? oar_ones(OAR_F32, 4, (int64_t[]){16, 16, 3, 3}) : NULL;
        oar_tensor *y = w ? oar_conv2d(x, w, NULL, (int64_t[]){1, 1}, (int64_t[]){1, 1},
                                       (int64_t[]){1, 1}, 1)
                          : NULL;
        bool ok = y != NULL;
        CHECK(ok || oar_last_error()[0] != 0);
        /* each output counts its taps inside the plane, times 16 channels */
        oar_tensor *s = ok ? oar_sum(y, 0, NULL, false) : NULL;
        if (s) CHECK(oar_tensor_item(s) == 16.0 * 16 * (4 * 4 + 18 * 4 * 6 + 18 * 18 * 9));
        finished = ok && n_calls <= n;
        oar_pool_pop(p);
        oar_set_allocator(NULL, NULL);
    }
    CHECK(finished);
}

int main(void) {
    oar_manual_seed(11);
    RUN(test_kernel);
    RUN(test_selected);
    RUN(test_selection);
    RUN(test_allocation_failures);
    return test_summary();
}

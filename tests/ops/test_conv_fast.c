/* The batched convolution kernels and the pooling fast path against direct
 * float64 loops written here: conv2d and conv_transpose2d with several
 * images per gemm (chunks with a short last one, groups, strides, padding,
 * dilation, one image), conv2d's two direct kernels (channel blocks,
 * column tiles, padding, groups), conv2d_weight_grad accumulated image by image into
 * fixed partials (1, 3, 9 and 64 images), results bitwise the same on one
 * and on two threads, conv2d's row tiles (images too large to batch: 1x1
 * in place, strides, padding, dilation, groups, channel blocks, batch 1 and
 * more), and max_pool2d's 2x2 stride-2 and 3x3 paths (odd planes, padding,
 * strides 1 to 3, ceil mode, NaN, -inf, ties: values and indices exactly as
 * the generic scan). */
#include "test.h"

#include "ops/op.h"
#include "backends/cpu/cpu.h"

#ifdef _OPENMP
#include <omp.h>
#endif

typedef struct {
    int64_t sh, sw, ph, pw, dh, dw, groups;
} cgeom;

static oar_tensor *randn4(oar_dtype dt, int64_t a, int64_t b, int64_t c, int64_t d) {
    return oar_randn(dt, 4, (int64_t[]){a, b, c, d});
}

/* Checks |got - want| <= 1e-5 * (sum of |terms|) + 1e-6 elementwise. */
static void check_close(const char *what, oar_tensor *got, const double *want, const double *mag,
                        int64_t n) {
    CHECK(got != NULL && oar_tensor_numel(got) == n);
    if (!got || oar_tensor_numel(got) != n) return;
    double *g = test_values(got);
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++)
        if (!(fabs(g[i] - want[i]) <= 1e-5 * mag[i] + 1e-6)) {
            if (bad++ < 3)
                fprintf(stderr, "  %s[%lld] = %.9g, want %.9g\n", what, (long long)i, g[i], want[i]);
        }
    CHECK(bad == 0);
    free(g);
}

/* conv2d in float64: x [N, C, H, W], w [O, C/g, kh, kw]; y and |terms| sums. */
static void ref_conv2d(oar_tensor *xt, oar_tensor *wt, oar_tensor *bt, cgeom g, double **y,
                       double **mag, int64_t *ny) {
    const int64_t *xs = oar_tensor_shape(xt), *ws = oar_tensor_shape(wt);
    int64_t N = xs[0], C = xs[1], H = xs[2], W = xs[3], O = ws[0], kh = ws[2], kw = ws[3];
    int64_t cg = C / g.groups, og = O / g.groups;
    int64_t OH = (H + 2 * g.ph - g.dh * (kh - 1) - 1) / g.sh + 1;
    int64_t OW = (W + 2 * g.pw - g.dw * (kw - 1) - 1) / g.sw + 1;
    double *x = test_values(xt), *w = test_values(wt), *b = bt ? test_values(bt) : NULL;
    *ny = N * O * OH * OW;
    *y = calloc((size_t)*ny, sizeof(double));
    *mag = calloc((size_t)*ny, sizeof(double));
    for (int64_t n = 0; n < N; n++)
        for (int64_t o = 0; o < O; o++)
            for (int64_t oy = 0; oy < OH; oy++)
                for (int64_t ox = 0; ox < OW; ox++) {
                    double s = b ? b[o] : 0, m = b ? fabs(b[o]) : 0;
                    int64_t gi = o / og;
                    for (int64_t c = 0; c < cg; c++)
                        for (int64_t ki = 0; ki < kh; ki++)
                            for (int64_t kj = 0; kj < kw; kj++) {
                                int64_t iy = oy * g.sh - g.ph + ki * g.dh;
                                int64_t ix = ox * g.sw - g.pw + kj * g.dw;
                                if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
                                double t = x[((n * C + gi * cg + c) * H + iy) * W + ix] *
                                           w[((o * cg + c) * kh + ki) * kw + kj];
                                s += t;
                                m += fabs(t);
                            }
                    int64_t i = ((n * O + o) * OH + oy) * OW + ox;
                    (*y)[i] = s;
                    (*mag)[i] = m;
                }
    free(x);
    free(w);
    free(b);
}

/* A conv2d case: x [n, c, h, w], w [o, c/groups, kh, kw], bias or not. */
typedef struct conv_case {
    int64_t n, c, h, w, o, kh, kw;
    cgeom g;
    bool bias;
} conv_case;

/* Each case in f32 and f64 against the float64 loops. */
static void check_conv_cases(const char *what, const conv_case *cases, size_t n_cases) {
    for (size_t k = 0; k < n_cases; k++)
        for (int d = 0; d < 2; d++) {
            oar_pool *p = oar_pool_push();
            oar_dtype dt = d ? OAR_F64 : OAR_F32;
            cgeom g = cases[k].g;
            oar_tensor *x = randn4(dt, cases[k].n, cases[k].c, cases[k].h, cases[k].w);
            oar_tensor *w = randn4(dt, cases[k].o, cases[k].c / g.groups, cases[k].kh, cases[k].kw);
            oar_tensor *b = cases[k].bias ? oar_randn(dt, 1, (int64_t[]){cases[k].o}) : NULL;
            oar_tensor *y = oar_conv2d(x, w, b, (int64_t[]){g.sh, g.sw}, (int64_t[]){g.ph, g.pw},
                                       (int64_t[]){g.dh, g.dw}, g.groups);
            double *ry, *mag;
            int64_t ny;
            ref_conv2d(x, w, b, g, &ry, &mag, &ny);
            check_close(what, y, ry, mag, ny);
            free(ry);
            free(mag);
            oar_pool_pop(p);
        }
}

/* One image, kernel 7x7 or more at stride 2 or more (ResNet's stem): with
 * oneDNN built in, f32 runs oneDNN's convolution (`k_conv2d_f32_route`),
 * else im2col + gemm; either way within the bound against float64, with
 * and without bias, odd sizes, padding, one input channel, groups. */
static void test_conv2d_stem(void) {
    static const conv_case cases[] = {
        {1, 3, 40, 36, 16, 7, 7, {2, 2, 3, 3, 1, 1, 1}, true},
        {1, 3, 33, 29, 8, 7, 7, {2, 2, 3, 3, 1, 1, 1}, false},
        {1, 1, 30, 30, 5, 9, 9, {3, 3, 0, 4, 1, 1, 1}, true},
        {1, 4, 23, 23, 6, 7, 7, {2, 2, 1, 1, 1, 1, 2}, true},
        {1, 3, 40, 40, 8, 7, 7, {2, 2, 3, 3, 2, 2, 1}, false}, /* dilated: not routed */
    };
    check_conv_cases("stem", cases, sizeof cases / sizeof cases[0]);
}

static void test_conv2d_batched(void) {
    static const conv_case cases[] = {
        {200, 3, 7, 7, 4, 3, 3, {1, 1, 1, 1, 1, 1, 1}, true}, /* 3 chunks, the last short */
        {37, 4, 9, 8, 6, 3, 2, {2, 1, 1, 0, 2, 1, 2}, true},  /* groups, stride, dilation */
        {1, 3, 7, 7, 4, 3, 3, {1, 1, 0, 0, 1, 1, 1}, false},  /* one image */
        {64, 6, 12, 12, 16, 5, 5, {1, 1, 0, 0, 1, 1, 1}, true}, /* LeNet's second conv */
        {5, 8, 6, 6, 4, 1, 1, {1, 1, 0, 0, 1, 1, 1}, false},  /* 1x1: no im2col */
        /* the direct kernel (K >= 64): two channel blocks, a short last
         * column tile (17 = 8 + 8 + 1), padding */
        {9, 8, 11, 15, 20, 3, 3, {1, 1, 1, 2, 1, 1, 1}, true},
        /* and groups, a block of 6 channels, one short tile of 7 */
        {5, 16, 10, 9, 12, 3, 3, {1, 1, 0, 0, 1, 1, 2}, true},
        {3, 4, 9, 9, 33, 5, 5, {1, 1, 2, 2, 1, 1, 1}, false}, /* og 33: gemm again */
        /* the column-vector kernel (width a multiple of 8): 6 of 8 channels,
         * padding, two tiles; then groups of 5 channels, K 18 */
        {4, 3, 16, 16, 6, 5, 5, {1, 1, 2, 2, 1, 1, 1}, true},
        {3, 4, 10, 10, 10, 3, 3, {1, 1, 0, 0, 1, 1, 2}, true},
        {2, 1, 28, 28, 6, 5, 5, {1, 1, 0, 0, 1, 1, 1}, true}, /* LeNet's first conv */
        /* two rows at a time and an odd last one, channel blocks of 8 and 1 */
        {2, 5, 11, 18, 9, 3, 3, {1, 1, 0, 0, 1, 1, 1}, true},
        /* a 7x7 plane with many channels: 4 images per gemm (192 columns
         * at least), the last chunk of 3 */
        {7, 320, 7, 7, 40, 3, 3, {1, 1, 1, 1, 1, 1, 1}, true},
    };
    check_conv_cases("conv2d", cases, sizeof cases / sizeof cases[0]);
}

/* The direct kernel's channel-vector shapes (K >= 64, a width not a
 * multiple of 8) by both routes, whatever the CPU: the direct kernel (as
 * with AVX-512), and oneDNN's convolution in f32 (im2col + gemm without
 * oneDNN, and in f64), as without. */
static void test_conv2d_channel_vector_routes(void) {
    static const conv_case cases[] = {
        {9, 8, 11, 15, 20, 3, 3, {1, 1, 1, 2, 1, 1, 1}, true}, /* the cases above */
        {5, 16, 10, 9, 12, 3, 3, {1, 1, 0, 0, 1, 1, 2}, true},
        {1, 16, 14, 14, 32, 3, 3, {1, 1, 1, 1, 1, 1, 1}, true}, /* the demo CNN's second conv */
        {3, 6, 14, 14, 16, 5, 5, {1, 1, 0, 0, 1, 1, 1}, false}, /* LeNet-5's second, on 14 x 14 */
    };
    for (int pin = 0; pin < 2; pin++) {
        int was = oari_cpu_conv_wide_vectors_use(pin);
        check_conv_cases(pin ? "conv2d, direct kernel" : "conv2d, no direct kernel", cases,
                         sizeof cases / sizeof cases[0]);
        oari_cpu_conv_wide_vectors_use(was);
    }
    CHECK(oari_cpu_conv_wide_vectors_use(-1) == -1); /* (put back) */
}

/* conv2d on images too large to batch (row tiles, channel blocks; see
 * conv2d_tiled in cpu_conv.c), against the float64 loops. The comments give
 * the f32 tiling. */
static void test_conv2d_tiled(void) {
    static const conv_case cases[] = {
        {2, 128, 48, 47, 20, 1, 1, {1, 1, 0, 0, 1, 1, 1}, true},   /* 1x1 in place, 3 tiles */
        {1, 128, 27, 27, 260, 1, 1, {2, 2, 0, 0, 1, 1, 1}, false}, /* 1x1 stride 2, 2 blocks */
        {1, 64, 31, 31, 70, 3, 3, {1, 1, 1, 1, 1, 1, 1}, true},    /* 5 tiles, the last short */
        {3, 32, 33, 33, 40, 3, 3, {2, 2, 1, 1, 1, 1, 1}, true},    /* stride 2, one tile each */
        {1, 256, 7, 7, 200, 3, 3, {1, 1, 1, 1, 1, 1, 1}, true},    /* blocks of 112 and 88 */
        {2, 64, 24, 24, 96, 3, 3, {1, 1, 2, 2, 2, 2, 2}, true},    /* dilation 2, groups 2 */
        {1, 3, 64, 63, 16, 7, 7, {2, 2, 3, 3, 1, 1, 1}, true},     /* ResNet's stem, smaller */
        {1, 40, 20, 21, 33, 3, 5, {1, 2, 2, 1, 1, 1, 1}, true},    /* unequal kernel, strides */
    };
    check_conv_cases("conv2d tiled", cases, sizeof cases / sizeof cases[0]);
}

/* conv_transpose2d in float64: x [N, C, H, W], w [C, O/g, kh, kw]. */
static void ref_conv_t(oar_tensor *xt, oar_tensor *wt, cgeom g, int64_t oph, int64_t opw,
                       double **y, double **mag, int64_t *ny) {
    const int64_t *xs = oar_tensor_shape(xt), *ws = oar_tensor_shape(wt);
    int64_t N = xs[0], C = xs[1], H = xs[2], W = xs[3], og = ws[1], kh = ws[2], kw = ws[3];
    int64_t cg = C / g.groups, O = og * g.groups;
    int64_t OH = (H - 1) * g.sh - 2 * g.ph + g.dh * (kh - 1) + oph + 1;
    int64_t OW = (W - 1) * g.sw - 2 * g.pw + g.dw * (kw - 1) + opw + 1;
    double *x = test_values(xt), *w = test_values(wt);
    *ny = N * O * OH * OW;
    *y = calloc((size_t)*ny, sizeof(double));
    *mag = calloc((size_t)*ny, sizeof(double));
    for (int64_t n = 0; n < N; n++)
        for (int64_t ci = 0; ci < C; ci++)
            for (int64_t iy = 0; iy < H; iy++)
                for (int64_t ix = 0; ix < W; ix++)
                    for (int64_t o = 0; o < og; o++)
                        for (int64_t ki = 0; ki < kh; ki++)
                            for (int64_t kj = 0; kj < kw; kj++) {
                                int64_t oy = iy * g.sh - g.ph + ki * g.dh;
                                int64_t ox = ix * g.sw - g.pw + kj * g.dw;
                                if (oy < 0 || oy >= OH || ox < 0 || ox >= OW) continue;
                                double t = x[((n * C + ci) * H + iy) * W + ix] *
                                           w[((ci * og + o) * kh + ki) * kw + kj];
                                int64_t i = ((n * O + (ci / cg) * og + o) * OH + oy) * OW + ox;
                                (*y)[i] += t;
                                (*mag)[i] += fabs(t);
                            }
    free(x);
    free(w);
}

static void test_conv_transpose2d_batched(void) {
    static const struct {
        int64_t n, c, h, w, og, kh, kw, oph, opw;
        cgeom g;
    } cases[] = {
        {400, 4, 5, 5, 3, 3, 3, 0, 0, {1, 1, 0, 0, 1, 1, 1}}, /* 3 chunks, the last short */
        {50, 4, 4, 5, 2, 3, 3, 1, 0, {2, 2, 1, 1, 1, 2, 2}},  /* stride, padding, groups */
        {1, 16, 8, 8, 6, 5, 5, 0, 0, {1, 1, 0, 0, 1, 1, 1}},  /* one image */
        {64, 16, 8, 8, 6, 5, 5, 0, 0, {1, 1, 0, 0, 1, 1, 1}}, /* LeNet's input gradient */
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        for (int d = 0; d < 2; d++) {
            oar_pool *p = oar_pool_push();
            oar_dtype dt = d ? OAR_F64 : OAR_F32;
            cgeom g = cases[k].g;
            oar_tensor *x = randn4(dt, cases[k].n, cases[k].c, cases[k].h, cases[k].w);
            oar_tensor *w = randn4(dt, cases[k].c, cases[k].og, cases[k].kh, cases[k].kw);
            oar_tensor *y = oar_conv_transpose2d(
                x, w, NULL, (int64_t[]){g.sh, g.sw}, (int64_t[]){g.ph, g.pw},
                (int64_t[]){cases[k].oph, cases[k].opw}, (int64_t[]){g.dh, g.dw}, g.groups);
            double *ry, *mag;
            int64_t ny;
            ref_conv_t(x, w, g, cases[k].oph, cases[k].opw, &ry, &mag, &ny);
            check_close("conv_transpose2d", y, ry, mag, ny);
            free(ry);
            free(mag);
            oar_pool_pop(p);
        }
}

static oar_tensor *weight_grad(oar_tensor *x, oar_tensor *gy, const int64_t *ws, cgeom g) {
    oari_attrs a = {.ni = 11,
                    .i = {ws[0], ws[1], ws[2], ws[3], g.sh, g.sw, g.ph, g.pw, g.dh, g.dw,
                          g.groups}};
    return oari_call2(OARI_OP_conv2d_weight_grad, x, gy, &a);
}

/* gw [O, C/g, kh, kw] = sum over images and outputs of gy * x, in float64. */
static void ref_weight_grad(oar_tensor *xt, oar_tensor *gyt, const int64_t *ws, cgeom g,
                            double *gw, double *mag) {
    const int64_t *xs = oar_tensor_shape(xt), *ys = oar_tensor_shape(gyt);
    int64_t N = xs[0], C = xs[1], H = xs[2], W = xs[3], O = ys[1], OH = ys[2], OW = ys[3];
    int64_t cg = ws[1], kh = ws[2], kw = ws[3], og = O / g.groups;
    double *x = test_values(xt), *gy = test_values(gyt);
    for (int64_t o = 0; o < O; o++)
        for (int64_t c = 0; c < cg; c++)
            for (int64_t ki = 0; ki < kh; ki++)
                for (int64_t kj = 0; kj < kw; kj++) {
                    double s = 0, m = 0;
                    for (int64_t n = 0; n < N; n++)
                        for (int64_t oy = 0; oy < OH; oy++)
                            for (int64_t ox = 0; ox < OW; ox++) {
                                int64_t iy = oy * g.sh - g.ph + ki * g.dh;
                                int64_t ix = ox * g.sw - g.pw + kj * g.dw;
                                if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
                                double t = gy[((n * O + o) * OH + oy) * OW + ox] *
                                           x[((n * C + (o / og) * cg + c) * H + iy) * W + ix];
                                s += t;
                                m += fabs(t);
                            }
                    int64_t i = ((o * cg + c) * kh + ki) * kw + kj;
                    gw[i] = s;
                    mag[i] = m;
                }
    free(x);
    free(gy);
}

/* Bitwise equality of two tensors' values. */
static bool same_bits(oar_tensor *a, oar_tensor *b) {
    if (!a || !b || oar_tensor_numel(a) != oar_tensor_numel(b)) return false;
    double *u = test_values(a), *v = test_values(b);
    bool same = u && v && memcmp(u, v, (size_t)oar_tensor_numel(a) * sizeof(double)) == 0;
    free(u);
    free(v);
    return same;
}

static void test_weight_grad_partials(void) {
    static const struct {
        int64_t n, c, h, w, o, kh, kw;
        cgeom g;
    } cases[] = {
        {1, 3, 7, 7, 4, 3, 3, {1, 1, 1, 1, 1, 1, 1}},
        {3, 3, 7, 7, 4, 3, 3, {1, 1, 1, 1, 1, 1, 1}},
        {9, 4, 9, 8, 6, 3, 2, {2, 1, 1, 0, 2, 1, 2}}, /* 5 partials of 2, 2, 2, 2, 1 */
        {64, 1, 28, 28, 6, 5, 5, {1, 1, 2, 2, 1, 1, 1}}, /* LeNet's first conv */
        {64, 6, 12, 12, 16, 5, 5, {1, 1, 0, 0, 1, 1, 1}}, /* and its second */
        {10, 8, 5, 5, 4, 1, 1, {1, 1, 0, 0, 1, 1, 1}},  /* 1x1: no im2col */
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        for (int d = 0; d < 2; d++) {
            oar_pool *p = oar_pool_push();
            oar_dtype dt = d ? OAR_F64 : OAR_F32;
            cgeom g = cases[k].g;
            int64_t kh = cases[k].kh, kw = cases[k].kw, H = cases[k].h, W = cases[k].w;
            int64_t OH = (H + 2 * g.ph - g.dh * (kh - 1) - 1) / g.sh + 1;
            int64_t OW = (W + 2 * g.pw - g.dw * (kw - 1) - 1) / g.sw + 1;
            const int64_t ws[4] = {cases[k].o, cases[k].c / g.groups, kh, kw};
            oar_tensor *x = randn4(dt, cases[k].n, cases[k].c, H, W);
            oar_tensor *gy = randn4(dt, cases[k].n, cases[k].o, OH, OW);
            oar_tensor *gw = weight_grad(x, gy, ws, g);
            int64_t n = ws[0] * ws[1] * ws[2] * ws[3];
            double *ref = calloc((size_t)n, sizeof(double)), *mag = calloc((size_t)n, sizeof(double));
            ref_weight_grad(x, gy, ws, g, ref, mag);
            check_close("conv2d_weight_grad", gw, ref, mag, n);
            free(ref);
            free(mag);
            oar_pool_pop(p);
        }
}

/* The same values on one, two and three threads, for the three kernels
 * (and conv2d's row tiles). */
static void test_thread_count_invariance(void) {
#ifdef _OPENMP
    int saved = omp_get_max_threads(), dynamic = omp_get_dynamic();
    omp_set_dynamic(0); /* the teams asked for (OMP_DYNAMIC would shrink them, and change the blocking) */
    oar_pool *p = oar_pool_push();
    const int64_t one[2] = {1, 1}, zero[2] = {0, 0}, pad[2] = {1, 1};
    oar_tensor *x = randn4(OAR_F32, 200, 3, 7, 7), *w = randn4(OAR_F32, 4, 3, 3, 3);
    oar_tensor *xt = randn4(OAR_F32, 400, 4, 5, 5), *wt = randn4(OAR_F32, 4, 3, 3, 3);
    oar_tensor *gy = randn4(OAR_F32, 200, 4, 7, 7);
    const int64_t ws[4] = {4, 3, 3, 3};
    const cgeom g = {1, 1, 1, 1, 1, 1, 1};
    /* conv2d's row tiles: one deep image (channel blocks shared by the
     * threads), one wide image (tiles), two images */
    oar_tensor *xd = randn4(OAR_F32, 1, 256, 7, 7), *wd = randn4(OAR_F32, 200, 256, 3, 3);
    oar_tensor *xw = randn4(OAR_F32, 2, 64, 30, 31), *ww = randn4(OAR_F32, 70, 64, 3, 3);
    oar_tensor *r[3][5];
    for (int t = 0; t < 3; t++) {
        omp_set_num_threads(t + 1);
        r[t][0] = oar_conv2d(x, w, NULL, one, pad, one, 1);
        r[t][1] = oar_conv_transpose2d(xt, wt, NULL, one, zero, zero, one, 1);
        r[t][2] = weight_grad(x, gy, ws, g);
        r[t][3] = oar_conv2d(xd, wd, NULL, one, pad, one, 1);
        r[t][4] = oar_conv2d(t == 1 ? oar_slice(xw, 0, 0, 1, 1) : xw, ww, NULL, one, pad, one, 1);
    }
    omp_set_num_threads(saved);
    omp_set_dynamic(dynamic);
    for (int k = 0; k < 4; k++)
        CHECK(same_bits(r[0][k], r[1][k]) && same_bits(r[0][k], r[2][k]));
    CHECK(same_bits(r[0][4], r[2][4]) && same_bits(oar_slice(r[0][4], 0, 0, 1, 1), r[1][4]));
    oar_pool_pop(p);
#endif
}

/* max_pool2d with a k x k window (dilation 1) on planes of shape s: values
 * and indices against the generic scan written here (window clipped to the
 * plane, row by row, a value replaces the best if larger or NaN), with
 * ties, NaN and -inf sprinkled in and an all -inf window. */
static void check_max_pool(const int64_t s[4], int64_t k, int64_t st, int64_t pad, bool ceil,
                           int d) {
    oar_pool *p = oar_pool_push();
    int64_t n = s[0] * s[1] * s[2] * s[3], H = s[2], W = s[3];
    double *v = malloc((size_t)n * sizeof(double));
    oar_tensor *r = oar_randn(OAR_F64, 4, s);
    double *rv = test_values(r);
    for (int64_t i = 0; i < n; i++)
        v[i] = i % 7 == 3 ? NAN : i % 11 == 5 ? -INFINITY : i % 5 == 1 ? 0.5 : rv[i];
    if (H >= 2 && W >= 2) v[0] = v[1] = v[W] = v[W + 1] = -INFINITY;
    free(rv);
    oar_tensor *x = oar_tensor_from_data(v, OAR_F64, 4, s);
    if (!d) x = oar_cast(x, OAR_F32);
    oar_tensor *ind = NULL;
    const int64_t kk[2] = {k, k}, ss[2] = {st, st}, pp[2] = {pad, pad}, one[2] = {1, 1};
    oar_tensor *y = oar_max_pool2d(x, kk, ss, pp, one, ceil, &ind);
    CHECK(y && ind && oar_tensor_ndim(y) == 4);
    if (!y || !ind || oar_tensor_ndim(y) != 4) {
        fprintf(stderr, "  max_pool2d: %s\n", oar_last_error());
        free(v);
        oar_pool_pop(p);
        return;
    }
    const int64_t OH = oar_tensor_shape(y)[2], OW = oar_tensor_shape(y)[3];
    /* and with no indices asked for: the values-only kernel (max_pool2d_values) */
    oar_tensor *yo = oar_max_pool2d(x, kk, ss, pp, one, ceil, NULL);
    CHECK(yo && oar_tensor_numel(yo) == oar_tensor_numel(y));
    double *yv = test_values(y), *iv = test_values(ind), *ov = yo ? test_values(yo) : NULL;
    int64_t bad = 0;
    for (int64_t pl = 0; pl < s[0] * s[1]; pl++)
        for (int64_t oy = 0; oy < OH; oy++)
            for (int64_t ox = 0; ox < OW; ox++) {
                int64_t y0 = oy * st - pad, x0 = ox * st - pad;
                int64_t y1 = y0 + k < H ? y0 + k : H, x1 = x0 + k < W ? x0 + k : W;
                y0 = y0 < 0 ? 0 : y0, x0 = x0 < 0 ? 0 : x0;
                double m = -INFINITY;
                int64_t best = y0 * W + x0;
                for (int64_t iy = y0; iy < y1; iy++)
                    for (int64_t ix = x0; ix < x1; ix++) {
                        double u = (double)(d ? v[pl * H * W + iy * W + ix]
                                              : (float)v[pl * H * W + iy * W + ix]);
                        if (u > m || isnan(u)) {
                            m = u;
                            best = iy * W + ix;
                        }
                    }
                int64_t o = (pl * OH + oy) * OW + ox;
                bool ok = (yv[o] == m || (isnan(yv[o]) && isnan(m))) && (int64_t)iv[o] == best &&
                          (!ov || ov[o] == m || (isnan(ov[o]) && isnan(m)));
                if (!ok && bad++ < 3)
                    fprintf(stderr,
                            "  max_pool2d k%lld s%lld p%lld [%lld]: %g at %lld, want %g at %lld\n",
                            (long long)k, (long long)st, (long long)pad, (long long)o, yv[o],
                            (long long)iv[o], m, (long long)best);
            }
    CHECK(bad == 0);
    free(yv);
    free(iv);
    free(ov);
    free(v);
    oar_pool_pop(p);
}

/* The 2x2 stride-2 path (no padding): rows of 8 windows and more take the
 * vector loop (16 windows, 14 = 8 + a scalar tail of 6, 16 from an odd
 * width of 33), shorter ones the scalar loop alone (7: the demo CNN's
 * second pool; 5, 4 and 1). The values-only kernel: steps of 8 with an
 * overlapping last one (14, 9), of 4 below 8 (7, 5, 4), scalar below 4 (3, 1). */
static void test_max_pool_2x2(void) {
    static const int64_t shapes[][4] = {{2, 3, 8, 8},   {3, 2, 9, 11},  {1, 1, 2, 2},   {4, 5, 7, 3},
                                        {2, 3, 6, 28},  {1, 2, 5, 33},  {3, 1, 4, 32},  {2, 4, 14, 14},
                                        {1, 2, 6, 6},   {2, 1, 4, 18}};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
        for (int d = 0; d < 2; d++)
            check_max_pool(shapes[k], 2, 2, 0, false, d);
}

/* The 3x3 path: ResNet's stem pool (stride 2, padding 1) on even and odd
 * planes, stride 1 and 3, no padding, ceil mode, the smallest planes
 * (3 x 3, and 2 x 5 which takes the generic loop), batch 1 and more. */
static void test_max_pool_3x3(void) {
    static const struct {
        int64_t s[4], st, pad;
        bool ceil;
    } cases[] = {
        {{1, 4, 16, 16}, 2, 1, false}, {{2, 3, 15, 17}, 2, 1, false}, {{1, 2, 9, 10}, 1, 1, false},
        {{2, 2, 11, 12}, 1, 0, false}, {{1, 3, 13, 14}, 3, 1, false}, {{1, 2, 10, 9}, 2, 0, true},
        {{2, 2, 12, 11}, 2, 1, true},  {{1, 1, 3, 3}, 2, 1, false},  {{1, 1, 3, 3}, 1, 0, false},
        {{1, 2, 2, 5}, 2, 1, false},   {{3, 64, 28, 28}, 2, 1, false},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        for (int d = 0; d < 2; d++)
            check_max_pool(cases[k].s, 3, cases[k].st, cases[k].pad, cases[k].ceil, d);
}

int main(void) {
    oar_manual_seed(7);
    RUN(test_conv2d_stem);
    RUN(test_conv2d_batched);
    RUN(test_conv2d_channel_vector_routes);
    RUN(test_conv2d_tiled);
    RUN(test_conv_transpose2d_batched);
    RUN(test_weight_grad_partials);
    RUN(test_thread_count_invariance);
    RUN(test_max_pool_2x2);
    RUN(test_max_pool_3x3);
    return test_summary();
}

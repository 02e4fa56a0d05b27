/* int8 products (oar_qmatmul, oar_qlinear): the int32 accumulation against
 * an exact integer reference computed here (bitwise), through oneDNN's VNNI
 * kernels for dense operands (oar's VNNI, AVX2 and exact-loop kernels in
 * turn where oneDNN is not exact) and the reference loop for strided ones;
 * per-channel scales, zero points, saturating extremes, empty batches,
 * requantization within one step of the double reference, and bad input. */
#include "test.h"

#include "backends/cpu/cpu_qlinear.h"

#ifdef OAR_TEST_WITH_DNNL
#include "backends/cpu/cpu_dnnl_int8.h"
#endif

#include <math.h>
#include <stdint.h>
#include <string.h>

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t next_u32(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng >> 33);
}

/* n random bytes: uint8 in [0, 255] or int8 in [-128, 127]. */
static void fill_bytes(void *p, int64_t n) {
    for (int64_t i = 0; i < n; i++) ((uint8_t *)p)[i] = (uint8_t)next_u32();
}

/* (a - za) @ b exactly, a [rows, k] (uint8 or int8), b [k, n] int8. */
static void ref_qmatmul(const void *a, bool u8, int64_t za, const int8_t *b, int64_t rows, int64_t k, int64_t n,
                        double *out) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < n; j++) {
            int64_t s = 0;
            for (int64_t p = 0; p < k; p++) {
                int64_t av = u8 ? ((const uint8_t *)a)[r * k + p] : ((const int8_t *)a)[r * k + p];
                s += (av - za) * b[p * n + j];
            }
            out[r * n + j] = (double)s;
        }
}

/* t's values equal want's exactly (int32 sums are exact). */
static void check_exact(oar_tensor *t, const double *want, int64_t n) {
    CHECK(t && oar_tensor_dtype(t) == OAR_I32 && oar_tensor_numel(t) == n);
    double *v = test_values(t);
    int64_t bad = 0;
    for (int64_t i = 0; v && i < n; i++) bad += v[i] != want[i];
    CHECK(v && bad == 0);
    if (bad) fprintf(stderr, "  %lld of %lld sums differ\n", (long long)bad, (long long)n);
    free(v);
}

/* Dense operands (oneDNN where built with it) for uint8 and int8 a, batch
 * dims, several zero points and shapes that are not multiples of 4 or 16. */
static void test_dense_exact(void) {
    static const int64_t shapes[][4] = {{1, 1, 1, 1}, {2, 3, 17, 9}, {1, 64, 64, 64}, {3, 5, 130, 33}, {1, 1, 300, 1}};
    static const int64_t zps_u8[] = {0, 1, 128, 255}, zps_i8[] = {0, -128, 5, 127};
    for (int u = 0; u < 2; u++)
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
            for (int z = 0; z < 4; z++) {
                oar_pool *pool = oar_pool_push();
                int64_t bt = shapes[s][0], m = shapes[s][1], k = shapes[s][2], n = shapes[s][3];
                int64_t rows = bt * m, za = u ? zps_u8[z] : zps_i8[z];
                uint8_t *a = malloc((size_t)(rows * k));
                int8_t *b = malloc((size_t)(k * n));
                double *want = malloc((size_t)(rows * n) * sizeof *want);
                fill_bytes(a, rows * k), fill_bytes(b, k * n);
                ref_qmatmul(a, u, za, b, rows, k, n, want);
                oar_tensor *ta = oar_tensor_from_data(a, u ? OAR_U8 : OAR_I8, 3, (int64_t[]){bt, m, k});
                oar_tensor *tb = oar_tensor_from_data(b, OAR_I8, 2, (int64_t[]){k, n});
                oar_tensor *y = oar_qmatmul(ta, za, tb);
                CHECK(y && oar_tensor_ndim(y) == 3 && oar_tensor_shape(y)[0] == bt &&
                      oar_tensor_shape(y)[1] == m && oar_tensor_shape(y)[2] == n);
                check_exact(y, want, rows * n);
                free(a), free(b), free(want);
                oar_pool_pop(pool);
            }
#ifdef OAR_TEST_WITH_DNNL
    /* oneDNN ran them where it is exact; elsewhere (no VNNI) the loop did */
    CHECK((oari_dnnl_int8_cached_primitives() > 0) == oari_dnnl_int8_exact());
#endif
}

/* A transposed (strided) a and b take the reference loop; same sums. */
static void test_strided_exact(void) {
    oar_pool *pool = oar_pool_push();
    const int64_t m = 7, k = 23, n = 11, za = 77;
    uint8_t at[23 * 7], a[7 * 23];
    int8_t bt[11 * 23], b[23 * 11];
    double want[7 * 11];
    fill_bytes(at, k * m), fill_bytes(bt, n * k);
    for (int64_t i = 0; i < m; i++)
        for (int64_t p = 0; p < k; p++) a[i * k + p] = at[p * m + i];
    for (int64_t p = 0; p < k; p++)
        for (int64_t j = 0; j < n; j++) b[p * n + j] = bt[j * k + p];
    ref_qmatmul(a, true, za, b, m, k, n, want);
    oar_tensor *ta = oar_transpose(oar_tensor_from_data(at, OAR_U8, 2, (int64_t[]){k, m}), 0, 1);
    oar_tensor *tb = oar_transpose(oar_tensor_from_data(bt, OAR_I8, 2, (int64_t[]){n, k}), 0, 1);
    check_exact(oar_qmatmul(ta, za, tb), want, m * n);
    /* and the dense copies agree */
    check_exact(oar_qmatmul(oar_contiguous(ta), za, oar_contiguous(tb)), want, m * n);
    oar_pool_pop(pool);
}

/* The extremes: every term at its largest magnitude, k at its limit. */
static void test_extremes(void) {
    oar_pool *pool = oar_pool_push();
    const int64_t k = 65793; /* INT32_MAX / (255 * 128) */
    oar_tensor *a = oar_full(OAR_U8, 2, (int64_t[]){2, k}, 255);
    oar_tensor *b = oar_full(OAR_I8, 2, (int64_t[]){k, 3}, -128);
    double *v = test_values(oar_qmatmul(a, 0, b));
    CHECK(v && v[0] == -255.0 * 128.0 * (double)k && v[5] == v[0]);
    free(v);
    /* a zero point of 255 over zeros: (0 - 255) * -128 per term */
    v = test_values(oar_qmatmul(oar_full(OAR_U8, 2, (int64_t[]){1, k}, 0), 255, b));
    CHECK(v && v[0] == 255.0 * 128.0 * (double)k);
    free(v);
    /* int8 a at -128 with zero point 127 */
    v = test_values(oar_qmatmul(oar_full(OAR_I8, 2, (int64_t[]){1, 1000}, -128), 127,
                                oar_full(OAR_I8, 2, (int64_t[]){1000, 2}, 127)));
    CHECK(v && v[0] == -255.0 * 127.0 * 1000.0 && v[1] == v[0]);
    free(v);
    oar_pool_pop(pool);
}

/* Empty batches and k = 0 (sums of nothing: zeros). */
static void test_empty(void) {
    oar_pool *pool = oar_pool_push();
    oar_tensor *y = oar_qmatmul(oar_full(OAR_U8, 2, (int64_t[]){0, 8}, 1), 3, oar_full(OAR_I8, 2, (int64_t[]){8, 4}, 1));
    CHECK(y && oar_tensor_numel(y) == 0 && oar_tensor_shape(y)[0] == 0 && oar_tensor_shape(y)[1] == 4);
    y = oar_qmatmul(oar_full(OAR_U8, 3, (int64_t[]){2, 0, 8}, 1), 3, oar_full(OAR_I8, 2, (int64_t[]){8, 4}, 1));
    CHECK(y && oar_tensor_numel(y) == 0);
    double zeros[6] = {0};
    check_exact(oar_qmatmul(oar_full(OAR_U8, 2, (int64_t[]){2, 0}, 1), 3, oar_full(OAR_I8, 2, (int64_t[]){0, 3}, 1)),
                zeros, 6);
    oar_pool_pop(pool);
}

/* qlinear: per-channel and per-tensor weight scales, a bias, then
 * requantization to uint8 within one step of the double reference. */
static void test_qlinear(void) {
    oar_pool *pool = oar_pool_push();
    enum { M = 5, K = 40, N = 6 };
    uint8_t a[M * K];
    int8_t b[K * N];
    double acc[M * N], ws[N], bias[N], want[M * N];
    fill_bytes(a, M * K), fill_bytes(b, K * N);
    const double xs = 0.0123, ys = 0.9;
    const int64_t za = 131, zy = 120;
    for (int j = 0; j < N; j++) ws[j] = 0.001 * (j + 1), bias[j] = 0.25 * j - 0.5;
    ref_qmatmul(a, true, za, b, M, K, N, acc);
    for (int per = 0; per < 2; per++) {
        for (int i = 0; i < M * N; i++)
            want[i] = (float)(acc[i] * (xs * (per ? ws[i % N] : ws[0]))) + (float)bias[i % N];
        oar_tensor *wsc = per ? oar_tensor_from_data(ws, OAR_F64, 1, (int64_t[]){N}) : oar_scalar_of(ws[0], OAR_F64);
        oar_tensor *y = oar_qlinear(oar_tensor_from_data(a, OAR_U8, 2, (int64_t[]){M, K}), xs, za,
                                    oar_tensor_from_data(b, OAR_I8, 2, (int64_t[]){K, N}), wsc,
                                    oar_cast(oar_tensor_from_data(bias, OAR_F64, 1, (int64_t[]){N}), OAR_F32));
        CHECK(y && oar_tensor_dtype(y) == OAR_F32);
        CHECK_VALUES(y, want, M * N, 1e-6);
        /* requantized: round(y / ys) + zy, clamped, within one step (ties) */
        double *q = test_values(oar_quantize_per_tensor(y, ys, zy, OAR_U8));
        int64_t worst = 0;
        for (int i = 0; q && i < M * N; i++) {
            double r = fmin(255, fmax(0, nearbyint(want[i] / ys) + zy));
            worst = fabs(q[i] - r) > worst ? (int64_t)fabs(q[i] - r) : worst;
        }
        CHECK(q && worst <= 1);
        free(q);
    }
    oar_pool_pop(pool);
}

/* Bad input: every message names the op and the problem. */
static void test_bad_input(void) {
    oar_pool *pool = oar_pool_push();
    oar_tensor *a = oar_full(OAR_U8, 2, (int64_t[]){2, 4}, 1), *b = oar_full(OAR_I8, 2, (int64_t[]){4, 3}, 1);
    oar_tensor *f = oar_full(OAR_F32, 2, (int64_t[]){2, 4}, 1);
    CHECK_FAILS(oar_qmatmul(NULL, 0, b), "qmatmul");
    CHECK_FAILS(oar_qmatmul(a, 0, NULL), "qmatmul");
    CHECK_FAILS(oar_qmatmul(f, 0, b), "a must be uint8 or int8");
    CHECK_FAILS(oar_qmatmul(oar_complex(f, f), 0, b), "a must be uint8 or int8");
    CHECK_FAILS(oar_qmatmul(oar_cast(a, OAR_I32), 0, b), "a must be uint8 or int8");
    CHECK_FAILS(oar_qmatmul(a, 0, oar_cast(b, OAR_U8)), "b must be int8");
    CHECK_FAILS(oar_qmatmul(a, 0, oar_full(OAR_I8, 2, (int64_t[]){5, 3}, 1)), "do not multiply");
    CHECK_FAILS(oar_qmatmul(a, 0, oar_full(OAR_I8, 3, (int64_t[]){1, 4, 3}, 1)), "do not multiply");
    CHECK_FAILS(oar_qmatmul(oar_full(OAR_U8, 1, (int64_t[]){4}, 1), 0, b), "do not multiply");
    CHECK_FAILS(oar_qmatmul(a, 256, b), "zero point 256");
    CHECK_FAILS(oar_qmatmul(a, -1, b), "outside uint8's range");
    CHECK_FAILS(oar_qmatmul(oar_cast(a, OAR_I8), 128, b), "outside int8's range");
    CHECK_FAILS(oar_qmatmul(oar_cast(a, OAR_I8), -129, b), "outside int8's range");
    CHECK_FAILS(oar_qmatmul(oar_full(OAR_U8, 2, (int64_t[]){1, 65794}, 1), 0,
                            oar_full(OAR_I8, 2, (int64_t[]){65794, 1}, 1)), "overflow the int32 accumulator");
    oar_tensor *ws = oar_full(OAR_F32, 1, (int64_t[]){3}, 0.5);
    CHECK_FAILS(oar_qlinear(a, 0.0, 0, b, ws, NULL), "x_scale 0 must be positive");
    CHECK_FAILS(oar_qlinear(a, NAN, 0, b, ws, NULL), "must be positive and finite");
    CHECK_FAILS(oar_qlinear(a, 0.1, 0, b, oar_full(OAR_F32, 1, (int64_t[]){2}, 0.5), NULL), "2 weight scales");
    CHECK_FAILS(oar_qlinear(a, 0.1, 0, b, oar_full(OAR_I64, 1, (int64_t[]){3}, 1), NULL), "real float");
    CHECK_FAILS(oar_qlinear(a, 0.1, 0, b, oar_full(OAR_F32, 1, (int64_t[]){3}, 0), NULL), "scale 0");
    CHECK_FAILS(oar_qlinear(a, 0.1, 300, b, ws, NULL), "zero point 300");
    CHECK_FAILS(oar_qlinear(NULL, 0.1, 0, b, ws, NULL), "qlinear");
    CHECK_FAILS(oar_qlinear(a, 0.1, 0, b, NULL, NULL), "w_scales");
    oar_pool_pop(pool);
}

/* conv2d(x - za, w) exactly, x [N, C, H, W] bytes, w [O, C/g, KH, KW]. */
static void ref_qconv(const void *x, bool u8, int64_t za, const int8_t *w, const int64_t *xs, const int64_t *ws,
                      const int64_t *st, const int64_t *pd, const int64_t *dl, int64_t g, int64_t oh, int64_t ow,
                      double *out) {
    int64_t N = xs[0], C = xs[1], H = xs[2], W = xs[3], O = ws[0], cg = C / g, og = O / g;
    for (int64_t n = 0; n < N; n++)
        for (int64_t o = 0; o < O; o++)
            for (int64_t y = 0; y < oh; y++)
                for (int64_t z = 0; z < ow; z++) {
                    int64_t s = 0;
                    for (int64_t ci = 0; ci < cg; ci++)
                        for (int64_t i = 0; i < ws[2]; i++)
                            for (int64_t j = 0; j < ws[3]; j++) {
                                int64_t iy = y * st[0] - pd[0] + i * dl[0], ix = z * st[1] - pd[1] + j * dl[1];
                                if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
                                int64_t xi = ((n * C + (o / og) * cg + ci) * H + iy) * W + ix;
                                int64_t xv = u8 ? ((const uint8_t *)x)[xi] : ((const int8_t *)x)[xi];
                                s += (xv - za) * w[((o * cg + ci) * ws[2] + i) * ws[3] + j];
                            }
                    out[((n * O + o) * oh + y) * ow + z] = (double)s;
                }
}

/* qconv2d against the direct loop: strides, padding, dilation, groups,
 * both activation dtypes, a strided (channel-sliced) x. */
static void test_qconv2d(void) {
    static const struct { int64_t x[4], w[4], st[2], pd[2], dl[2], g, za; bool u8; } cases[] = {
        {{2, 3, 9, 8}, {4, 3, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, 128, true},
        {{1, 4, 11, 7}, {6, 2, 3, 2}, {2, 1}, {0, 2}, {1, 2}, 2, 3, true},
        {{3, 2, 6, 6}, {5, 2, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 1, -7, false},
        {{1, 6, 10, 10}, {6, 1, 5, 5}, {2, 2}, {2, 2}, {1, 1}, 6, 0, false}, /* depthwise */
        {{2, 8, 14, 14}, {16, 8, 3, 3}, {1, 1}, {1, 1}, {2, 2}, 1, 255, true},
    };
    for (size_t t = 0; t < sizeof cases / sizeof *cases; t++) {
        oar_pool *pool = oar_pool_push();
        const int64_t *xs = cases[t].x, *ws = cases[t].w;
        int64_t nx = xs[0] * xs[1] * xs[2] * xs[3], nw = ws[0] * ws[1] * ws[2] * ws[3];
        int64_t oh = (xs[2] + 2 * cases[t].pd[0] - cases[t].dl[0] * (ws[2] - 1) - 1) / cases[t].st[0] + 1;
        int64_t ow = (xs[3] + 2 * cases[t].pd[1] - cases[t].dl[1] * (ws[3] - 1) - 1) / cases[t].st[1] + 1;
        int64_t ny = xs[0] * ws[0] * oh * ow;
        uint8_t *x = malloc((size_t)nx);
        int8_t *w = malloc((size_t)nw);
        double *want = malloc((size_t)ny * sizeof *want);
        fill_bytes(x, nx), fill_bytes(w, nw);
        ref_qconv(x, cases[t].u8, cases[t].za, w, xs, ws, cases[t].st, cases[t].pd, cases[t].dl, cases[t].g, oh, ow,
                  want);
        oar_tensor *tx = oar_tensor_from_data(x, cases[t].u8 ? OAR_U8 : OAR_I8, 4, xs);
        oar_tensor *tw = oar_tensor_from_data(w, OAR_I8, 4, ws);
        oar_tensor *y = oar_qconv2d(tx, cases[t].za, tw, cases[t].st, cases[t].pd, cases[t].dl, cases[t].g);
        CHECK(y && oar_tensor_shape(y)[1] == ws[0] && oar_tensor_shape(y)[2] == oh && oar_tensor_shape(y)[3] == ow);
        check_exact(y, want, ny);
        free(x), free(w), free(want);
        oar_pool_pop(pool);
    }
    /* a channel slice of a wider x (strided) */
    oar_pool *pool = oar_pool_push();
    uint8_t xb[1 * 5 * 4 * 4], xsub[1 * 2 * 4 * 4];
    int8_t wb[3 * 2 * 2 * 2];
    fill_bytes(xb, sizeof xb), fill_bytes(wb, sizeof wb);
    memcpy(xsub, xb + 16, sizeof xsub); /* channels 1 and 2 */
    double want[1 * 3 * 3 * 3];
    ref_qconv(xsub, true, 9, wb, (int64_t[]){1, 2, 4, 4}, (int64_t[]){3, 2, 2, 2}, (int64_t[]){1, 1},
              (int64_t[]){0, 0}, (int64_t[]){1, 1}, 1, 3, 3, want);
    oar_tensor *xt = oar_slice(oar_tensor_from_data(xb, OAR_U8, 4, (int64_t[]){1, 5, 4, 4}), 1, 1, 3, 1);
    check_exact(oar_qconv2d(xt, 9, oar_tensor_from_data(wb, OAR_I8, 4, (int64_t[]){3, 2, 2, 2}), NULL, NULL, NULL, 1),
                want, 27);
    /* an empty batch */
    oar_tensor *e = oar_qconv2d(oar_full(OAR_U8, 4, (int64_t[]){0, 2, 4, 4}, 1), 0, oar_full(OAR_I8, 4, (int64_t[]){3, 2, 2, 2}, 1),
                                NULL, NULL, NULL, 1);
    CHECK(e && oar_tensor_numel(e) == 0 && oar_tensor_shape(e)[1] == 3);
    /* bad input */
    oar_tensor *x4 = oar_full(OAR_U8, 4, (int64_t[]){1, 4, 5, 5}, 1), *w4 = oar_full(OAR_I8, 4, (int64_t[]){2, 4, 3, 3}, 1);
    CHECK_FAILS(oar_qconv2d(oar_cast(x4, OAR_F32), 0, w4, NULL, NULL, NULL, 1), "x must be uint8 or int8");
    CHECK_FAILS(oar_qconv2d(x4, 0, oar_cast(w4, OAR_U8), NULL, NULL, NULL, 1), "weight must be int8");
    CHECK_FAILS(oar_qconv2d(x4, 256, w4, NULL, NULL, NULL, 1), "zero point 256");
    CHECK_FAILS(oar_qconv2d(x4, 0, w4, NULL, NULL, NULL, 2), "do not convolve with 2 groups");
    CHECK_FAILS(oar_qconv2d(x4, 0, w4, (int64_t[]){0, 1}, NULL, NULL, 1), "must be >= 1");
    CHECK_FAILS(oar_qconv2d(x4, 0, w4, NULL, (int64_t[]){-1, 0}, NULL, 1), "padding (-1, 0) >= 0");
    CHECK_FAILS(oar_qconv2d(x4, 0, oar_full(OAR_I8, 4, (int64_t[]){2, 4, 7, 3}, 1), NULL, NULL, NULL, 1),
                "larger than the padded input");
    CHECK_FAILS(oar_qconv2d(oar_full(OAR_U8, 3, (int64_t[]){4, 5, 5}, 1), 0, w4, NULL, NULL, NULL, 1), "do not convolve");
    CHECK_FAILS(oar_qconv2d(NULL, 0, w4, NULL, NULL, NULL, 1), "qconv2d");
    oar_pool_pop(pool);
}

/* dequantize of int32 sums, dense (the fast path) and strided (the general
 * loop), per tensor and along each axis: (q - z) * s in double, as f32. */
static void test_dequantize_i32(void) {
    oar_pool *pool = oar_pool_push();
    int32_t q[2 * 3 * 4];
    for (int i = 0; i < 24; i++) q[i] = (i * 7919) % 2001 - 1000;
    oar_tensor *t = oar_tensor_from_data(q, OAR_I32, 3, (int64_t[]){2, 3, 4});
    const int64_t dims[3] = {2, 3, 4};
    for (int ax = -1; ax < 3; ax++) {
        int64_t n = ax < 0 ? 1 : dims[ax];
        double s[4], z[4], want[24];
        for (int j = 0; j < n; j++) s[j] = 0.001 * (j + 1) + 1e-7, z[j] = j - 1;
        for (int i = 0; i < 24; i++) {
            int ch = ax < 0 ? 0 : ax == 0 ? i / 12 : ax == 1 ? (i / 4) % 3 : i % 4;
            want[i] = (float)(((double)q[i] - z[ch]) * s[ch]);
        }
        oar_tensor *st = oar_tensor_from_data(s, OAR_F64, 1, &n), *zt = oar_cast(oar_tensor_from_data(z, OAR_F64, 1, &n), OAR_I64);
        CHECK_VALUES(oar_dequantize(t, ax < 0 ? oar_reshape(st, 0, NULL) : st, ax < 0 ? oar_reshape(zt, 0, NULL) : zt,
                                    ax < 0 ? 0 : ax), want, 24, 0);
        /* the same values through a transposed view (the general loop) */
        if (ax >= 1) {
            oar_tensor *tt = oar_transpose(oar_contiguous(oar_transpose(t, 1, 2)), 1, 2);
            CHECK_VALUES(oar_dequantize(tt, st, zt, ax), want, 24, 0);
        }
    }
    oar_pool_pop(pool);
}

int main(void) {
    RUN(test_dequantize_i32);
    /* each of oar's int8 kernels the CPU has: the exact loop, AVX2, VNNI */
    for (int k = OARI_QK_REFERENCE; k <= OARI_QK_VNNI; k++) {
        oari_cpu_qkernel_cap((oari_qkernel)k);
        if (k > OARI_QK_REFERENCE && oari_cpu_qkernel() != (oari_qkernel)k) continue; /* (not on this CPU) */
        fprintf(stderr, "int8 kernel %d\n", k);
        RUN(test_qconv2d);
        RUN(test_dense_exact);
        RUN(test_extremes);
    }
    oari_cpu_qkernel_cap(OARI_QK_VNNI);
    RUN(test_strided_exact);
    RUN(test_empty);
    RUN(test_qlinear);
    RUN(test_bad_input);
    return test_summary();
}

/* Convolutions, pools and interpolation against PyTorch references
 * (tests/ref/gen_conv_norm.py): forward values, the backward primitives,
 * the gradient rules through the autograd engine, f32/f64/f16/bf16,
 * non-contiguous and empty inputs, a batched (parallel) case against a
 * direct loop, allocation failures, and bad input. */
#include "test.h"

#include "ops/op.h"
#include "ref/conv_norm_ref.h"

#ifdef _OPENMP
#include <omp.h>
#endif

#define N_OF(a) ((int64_t)(sizeof(a) / sizeof((a)[0])))

/* A tensor of `dtype` holding the f64 values v. */
static oar_tensor *make(const double *v, oar_dtype dtype, int ndim, const int64_t *shape) {
    oar_tensor *t = oar_tensor_from_data(v, OAR_F64, ndim, shape);
    return dtype == OAR_F64 ? t : oar_cast(t, dtype);
}
#define MAKE(v, dt, ...) make(v, dt, N_OF(((int64_t[]){__VA_ARGS__})), (int64_t[]){__VA_ARGS__})

/* A non-contiguous view with the values v: every other element of a buffer
 * twice as long along the last dim. */
static oar_tensor *make_strided(const double *v, oar_dtype dtype, int ndim, const int64_t *shape) {
    int64_t big[OAR_MAX_DIMS], n = 1;
    for (int i = 0; i < ndim; i++) {
        big[i] = shape[i] * (i == ndim - 1 ? 2 : 1);
        n *= shape[i];
    }
    double *buf = calloc((size_t)(2 * n), sizeof(double));
    for (int64_t i = 0; i < n; i++)
        buf[2 * i] = v[i];
    oar_tensor *t = make(buf, dtype, ndim, big);
    free(buf);
    if (!t) return NULL;
    int64_t strides[OAR_MAX_DIMS];
    memcpy(strides, oar_tensor_strides(t), sizeof strides);
    strides[ndim - 1] = 2;
    return oari_pool_adopt(oari_tensor_view(t, ndim, shape, strides, 0));
}

static void check_shape(oar_tensor *t, int ndim, const int64_t *shape, int line) {
    bool ok = t && oar_tensor_ndim(t) == ndim;
    for (int i = 0; ok && i < ndim; i++)
        ok = oar_tensor_shape(t)[i] == shape[i];
    if (ok)
        test_passed++;
    else {
        test_failed++;
        fprintf(stderr, "%s:%d: %s: wrong shape (%s)\n", __FILE__, line, test_current,
                oar_last_error());
    }
}
#define CHECK_SHAPE(t, ...)                                                                        \
    check_shape(t, (int)N_OF(((int64_t[]){__VA_ARGS__})), (int64_t[]){__VA_ARGS__}, __LINE__)

/* Gradients of <gy, y> with respect to xs[0..n-1] through the autograd
 * engine (the gradient rules), against want[i] (nwant[i] values). */
static void check_grads(oar_tensor *y, oar_tensor *gy, int n, oar_tensor **xs,
                        const double *const *want, const int64_t *nwant, double tol, int line) {
    oar_tensor *g[4] = {0};
    int st = y ? oar_grad(1, &y, &gy, n, xs, false, false, g) : -1;
    if (st) {
        test_failed++;
        fprintf(stderr, "%s:%d: %s: backward failed (%s)\n", __FILE__, line, test_current,
                oar_last_error());
        return;
    }
    for (int i = 0; i < n; i++)
        test_expect_values("grad", g[i], want[i], nwant[i], tol, __FILE__, line);
}
#define CHECK_GRADS(y, gy, n, xs, want, nwant, tol)                                                \
    check_grads(y, gy, n, xs, want, nwant, tol, __LINE__)

/* A leaf that requires grad. */
static oar_tensor *leaf(oar_tensor *t) {
    oar_tensor_set_requires_grad(t, true);
    return t;
}

static const oar_dtype float_types[2] = {OAR_F64, OAR_F32};
static double tol_of(oar_dtype d) { return d == OAR_F64 ? 1e-12 : 2e-5; }

static void test_conv2d_values(void) {
    for (int k = 0; k < 2; k++) {
        oar_pool *p = oar_pool_push();
        oar_dtype dt = float_types[k];
        double tol = tol_of(dt);
        oar_tensor *x = MAKE(c1_x, dt, 2, 3, 7, 6), *w = MAKE(c1_w, dt, 4, 3, 3, 2);
        oar_tensor *b = MAKE(c1_b, dt, 4);
        oar_tensor *y =
            oar_conv2d(x, w, b, (int64_t[]){2, 1}, (int64_t[]){1, 0}, (int64_t[]){1, 2}, 1);
        CHECK_SHAPE(y, 2, 4, 4, 4);
        CHECK(y && oar_tensor_dtype(y) == dt);
        CHECK_VALUES(y, c1_y, N_OF(c1_y), tol);

        x = MAKE(c2_x, dt, 2, 4, 5, 5);
        w = MAKE(c2_w, dt, 6, 2, 3, 3);
        y = oar_conv2d(x, w, NULL, (int64_t[]){1, 1}, (int64_t[]){1, 1}, (int64_t[]){1, 1}, 2);
        CHECK_SHAPE(y, 2, 6, 5, 5);
        CHECK_VALUES(y, c2_y, N_OF(c2_y), tol);

        x = MAKE(c3_x, dt, 2, 3, 4, 4);
        w = MAKE(c3_w, dt, 5, 3, 1, 1);
        b = MAKE(c3_b, dt, 5);
        y = oar_conv2d(x, w, b, (int64_t[]){1, 1}, (int64_t[]){0, 0}, (int64_t[]){1, 1}, 1);
        CHECK_VALUES(y, c3_y, N_OF(c3_y), tol);
        /* non-contiguous input and weight take the same path */
        y = oar_conv2d(make_strided(c3_x, dt, 4, (int64_t[]){2, 3, 4, 4}),
                       make_strided(c3_w, dt, 4, (int64_t[]){5, 3, 1, 1}), b, (int64_t[]){1, 1},
                       (int64_t[]){0, 0}, (int64_t[]){1, 1}, 1);
        CHECK_VALUES(y, c3_y, N_OF(c3_y), tol);
        oar_pool_pop(p);
    }
}

static void test_conv2d_noncontiguous(void) {
    oar_pool *p = oar_pool_push();
    /* x stored channels-last [2, 7, 6, 3], viewed as [2, 3, 7, 6] */
    oar_tensor *nhwc = MAKE(c1_x_nhwc, OAR_F64, 2, 7, 6, 3);
    int64_t shape[4] = {2, 3, 7, 6}, strides[4] = {7 * 6 * 3, 1, 6 * 3, 3};
    oar_tensor *x = oari_pool_adopt(oari_tensor_view(nhwc, 4, shape, strides, 0));
    CHECK(!oar_tensor_is_contiguous(x));
    oar_tensor *y = oar_conv2d(x, MAKE(c1_w, OAR_F64, 4, 3, 3, 2), MAKE(c1_b, OAR_F64, 4),
                               (int64_t[]){2, 1}, (int64_t[]){1, 0}, (int64_t[]){1, 2}, 1);
    CHECK_VALUES(y, c1_y, N_OF(c1_y), 1e-12);
    /* a strided bias */
    oar_tensor *b = make_strided(c1_b, OAR_F64, 1, (int64_t[]){4});
    y = oar_conv2d(x, MAKE(c1_w, OAR_F64, 4, 3, 3, 2), b, (int64_t[]){2, 1}, (int64_t[]){1, 0},
                   (int64_t[]){1, 2}, 1);
    CHECK_VALUES(y, c1_y, N_OF(c1_y), 1e-12);
    oar_pool_pop(p);
}

static void test_conv1d(void) {
    for (int k = 0; k < 2; k++) {
        oar_pool *p = oar_pool_push();
        oar_dtype dt = float_types[k];
        oar_tensor *y = oar_conv1d(MAKE(c4_x, dt, 2, 3, 10), MAKE(c4_w, dt, 6, 1, 3),
                                   MAKE(c4_b, dt, 6), 2, 1, 2, 3);
        CHECK_SHAPE(y, 2, 6, 4);
        CHECK_VALUES(y, c4_y, N_OF(c4_y), tol_of(dt));
        oar_pool_pop(p);
    }
}

static void test_conv_transpose2d(void) {
    for (int k = 0; k < 2; k++) {
        oar_pool *p = oar_pool_push();
        oar_dtype dt = float_types[k];
        oar_tensor *y = oar_conv_transpose2d(
            MAKE(t1_x, dt, 2, 4, 3, 4), MAKE(t1_w, dt, 4, 3, 2, 3), MAKE(t1_b, dt, 3),
            (int64_t[]){2, 3}, (int64_t[]){1, 0}, (int64_t[]){1, 2}, (int64_t[]){1, 1}, 1);
        CHECK_SHAPE(y, 2, 3, 5, 14);
        CHECK_VALUES(y, t1_y, N_OF(t1_y), tol_of(dt));
        y = oar_conv_transpose2d(MAKE(t2_x, dt, 1, 4, 3, 3), MAKE(t2_w, dt, 4, 2, 3, 3), NULL,
                                 (int64_t[]){2, 2}, (int64_t[]){1, 1}, (int64_t[]){0, 1},
                                 (int64_t[]){2, 2}, 2);
        CHECK_SHAPE(y, 1, 4, 7, 8);
        CHECK_VALUES(y, t2_y, N_OF(t2_y), tol_of(dt));
        oar_pool_pop(p);
    }
}

/* The pieces conv2d's gradient rule is made of, against torch's gradients. */
static oar_tensor *weight_grad(oar_tensor *x, oar_tensor *gy, const int64_t *wshape,
                               const int64_t *a7) {
    oari_attrs a = {.ni = 11,
                    .i = {wshape[0], wshape[1], wshape[2], wshape[3], a7[0], a7[1], a7[2], a7[3],
                          a7[4], a7[5], a7[6]}};
    return oari_call2(OARI_OP_conv2d_weight_grad, x, gy, &a);
}

static void test_conv_gradient_pieces(void) {
    for (int k = 0; k < 2; k++) {
        oar_pool *p = oar_pool_push();
        oar_dtype dt = float_types[k];
        double tol = tol_of(dt);
        oar_tensor *x = MAKE(c1_x, dt, 2, 3, 7, 6), *w = MAKE(c1_w, dt, 4, 3, 3, 2);
        oar_tensor *gy = MAKE(c1_gy, dt, 2, 4, 4, 4);
        /* gx: H = 7 = (4-1)*2 - 2 + 2 + 1 + op -> op 0; W = 6 = (4-1)*1 + 2 + 1 + op -> op 0 */
        oar_tensor *gx = oar_conv_transpose2d(gy, w, NULL, (int64_t[]){2, 1}, (int64_t[]){1, 0},
                                              (int64_t[]){0, 0}, (int64_t[]){1, 2}, 1);
        CHECK_VALUES(gx, c1_gx, N_OF(c1_gx), tol);
        oar_tensor *gw =
            weight_grad(x, gy, (int64_t[]){4, 3, 3, 2}, (int64_t[]){2, 1, 1, 0, 1, 2, 1});
        CHECK_SHAPE(gw, 4, 3, 3, 2);
        CHECK_VALUES(gw, c1_gw, N_OF(c1_gw), tol);

        x = MAKE(c2_x, dt, 2, 4, 5, 5);
        w = MAKE(c2_w, dt, 6, 2, 3, 3);
        gy = MAKE(c2_gy, dt, 2, 6, 5, 5);
        gx = oar_conv_transpose2d(gy, w, NULL, (int64_t[]){1, 1}, (int64_t[]){1, 1},
                                  (int64_t[]){0, 0}, (int64_t[]){1, 1}, 2);
        CHECK_VALUES(gx, c2_gx, N_OF(c2_gx), tol);
        gw = weight_grad(x, gy, (int64_t[]){6, 2, 3, 3}, (int64_t[]){1, 1, 1, 1, 1, 1, 2});
        CHECK_VALUES(gw, c2_gw, N_OF(c2_gw), tol);

        /* conv_transpose2d: gx = conv2d(gy, w), gw = weight_grad(gy, x) */
        x = MAKE(t1_x, dt, 2, 4, 3, 4);
        w = MAKE(t1_w, dt, 4, 3, 2, 3);
        gy = MAKE(t1_gy, dt, 2, 3, 5, 14);
        gx = oar_conv2d(gy, w, NULL, (int64_t[]){2, 3}, (int64_t[]){1, 0}, (int64_t[]){1, 1}, 1);
        CHECK_VALUES(gx, t1_gx, N_OF(t1_gx), tol);
        gw = weight_grad(gy, x, (int64_t[]){4, 3, 2, 3}, (int64_t[]){2, 3, 1, 0, 1, 1, 1});
        CHECK_VALUES(gw, t1_gw, N_OF(t1_gw), tol);
        oar_pool_pop(p);
    }
}

/* A batched conv (the parallel path) against a direct loop. */
static void test_conv2d_batched_direct(void) {
    oar_pool *p = oar_pool_push();
    enum { N = 8, C = 16, H = 20, W = 20, O = 16, KH = 3, KW = 3, G = 2 };
    const int64_t s[2] = {2, 1}, pd[2] = {1, 2}, d[2] = {2, 1};
    oar_manual_seed(7);
    oar_tensor *x = oar_randn(OAR_F64, 4, (int64_t[]){N, C, H, W});
    oar_tensor *w = oar_randn(OAR_F64, 4, (int64_t[]){O, C / G, KH, KW});
    oar_tensor *y = oar_conv2d(x, w, NULL, s, pd, d, G);
    const int64_t OH = (H + 2 * pd[0] - d[0] * (KH - 1) - 1) / s[0] + 1;
    const int64_t OW = (W + 2 * pd[1] - d[1] * (KW - 1) - 1) / s[1] + 1;
    CHECK_SHAPE(y, N, O, OH, OW);
    double *xv = test_values(x), *wv = test_values(w);
    double *want = calloc((size_t)(N * O * OH * OW), sizeof(double));
    for (int n = 0; n < N; n++)
        for (int o = 0; o < O; o++)
            for (int64_t oy = 0; oy < OH; oy++)
                for (int64_t ox = 0; ox < OW; ox++) {
                    double acc = 0;
                    int g = o / (O / G);
                    for (int ci = 0; ci < C / G; ci++)
                        for (int ki = 0; ki < KH; ki++)
                            for (int kj = 0; kj < KW; kj++) {
                                int64_t iy = oy * s[0] - pd[0] + ki * d[0],
                                        ix = ox * s[1] - pd[1] + kj * d[1];
                                if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
                                acc += xv[((n * C + g * (C / G) + ci) * H + iy) * W + ix] *
                                       wv[((o * (C / G) + ci) * KH + ki) * KW + kj];
                            }
                    want[((n * O + o) * OH + oy) * OW + ox] = acc;
                }
    CHECK_VALUES(y, want, N * O * OH * OW, 1e-12);
    free(xv);
    free(wv);
    free(want);
    oar_pool_pop(p);
}

/* Results never depend on the number of threads (bitwise). */
static void test_thread_count_independence(void) {
#ifdef _OPENMP
    oar_pool *p = oar_pool_push();
    oar_manual_seed(11);
    oar_tensor *x = oar_randn(OAR_F32, 4, (int64_t[]){16, 8, 20, 20});
    oar_tensor *w = oar_randn(OAR_F32, 4, (int64_t[]){16, 8, 3, 3});
    const int64_t one[2] = {1, 1}, zero[2] = {0, 0};
    double *v[2][3] = {{0}};
    int threads[2] = {1, 3}, keep = omp_get_max_threads();
    for (int t = 0; t < 2; t++) {
        omp_set_num_threads(threads[t]);
        oar_tensor *y = oar_conv2d(x, w, NULL, one, one, one, 1);
        v[t][0] = test_values(y);
        v[t][1] = test_values(oar_conv_transpose2d(y, w, NULL, one, one, zero, one, 1));
        v[t][2] = test_values(
            weight_grad(x, y, (int64_t[]){16, 8, 3, 3}, (int64_t[]){1, 1, 1, 1, 1, 1, 1}));
    }
    omp_set_num_threads(keep);
    const int64_t n[3] = {16 * 16 * 400, 16 * 8 * 400, 16 * 8 * 9};
    for (int k = 0; k < 3; k++) {
        CHECK(v[0][k] && v[1][k] && !memcmp(v[0][k], v[1][k], (size_t)n[k] * sizeof(double)));
        free(v[0][k]);
        free(v[1][k]);
    }
    oar_pool_pop(p);
#endif
}

static void test_max_pool2d(void) {
    for (int k = 0; k < 2; k++) {
        oar_pool *p = oar_pool_push();
        oar_dtype dt = float_types[k];
        oar_tensor *x = MAKE(m1_x, dt, 2, 3, 7, 8), *idx = NULL;
        oar_tensor *y = oar_max_pool2d(x, (int64_t[]){3, 2}, (int64_t[]){2, 2}, (int64_t[]){1, 1},
                                       (int64_t[]){1, 2}, true, &idx);
        CHECK_SHAPE(y, 2, 3, M1_OH, M1_OW);
        CHECK_VALUES(y, m1_y, N_OF(m1_y), tol_of(dt));
        CHECK(idx && oar_tensor_dtype(idx) == OAR_I64);
        CHECK_VALUES(idx, m1_idx, N_OF(m1_idx), 0);
        /* its gradient: gout scattered to the argmax positions */
        oari_attrs a = {.ni = 2, .i = {7, 8}};
        oar_tensor *gx =
            oari_call2(OARI_OP_max_pool2d_backward, MAKE(m1_gy, dt, 2, 3, M1_OH, M1_OW), idx, &a);
        CHECK_VALUES(gx, m1_gx, N_OF(m1_gx), tol_of(dt));
        /* defaults: stride = kernel, no padding, dilation 1; non-contiguous input */
        y = oar_max_pool2d(make_strided(m1_x, dt, 4, (int64_t[]){2, 3, 7, 8}), (int64_t[]){2, 2},
                           NULL, NULL, NULL, false, &idx);
        CHECK_SHAPE(y, 2, 3, 3, 4);
        CHECK_VALUES(y, m2_y, N_OF(m2_y), tol_of(dt));
        CHECK_VALUES(idx, m2_idx, N_OF(m2_idx), 0);
        oar_pool_pop(p);
    }
    /* NaN wins, -inf windows keep an in-plane index; a 3-D input */
    oar_pool *p = oar_pool_push();
    double v[8] = {1, NAN, 3, 2, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    oar_tensor *idx = NULL;
    oar_tensor *y =
        oar_max_pool2d(MAKE(v, OAR_F32, 2, 2, 2), (int64_t[]){2, 2}, NULL, NULL, NULL, false, &idx);
    CHECK_SHAPE(y, 2, 1, 1);
    CHECK_VALUES(y, ((double[]){NAN, -INFINITY}), 2, 0);
    CHECK_VALUES(idx, ((double[]){1, 0}), 2, 0);
    oar_pool_pop(p);
}

static void test_avg_pool2d(void) {
    for (int k = 0; k < 2; k++) {
        oar_pool *p = oar_pool_push();
        oar_dtype dt = float_types[k];
        double tol = tol_of(dt);
        oar_tensor *x = MAKE(a1_x, dt, 2, 2, 7, 6);
        const int64_t k3[2] = {3, 3}, s2[2] = {2, 2}, p1[2] = {1, 1};
        oar_tensor *y = oar_avg_pool2d(x, k3, s2, p1, true, false);
        CHECK_SHAPE(y, 2, 2, A1_OH, A1_OW);
        CHECK_VALUES(y, a1_y, N_OF(a1_y), tol);
        y = oar_avg_pool2d(x, k3, s2, p1, true, true);
        CHECK_VALUES(y, a2_y, N_OF(a2_y), tol);
        y = oar_avg_pool2d(make_strided(a1_x, dt, 4, (int64_t[]){2, 2, 7, 6}), (int64_t[]){2, 3},
                           (int64_t[]){1, 2}, (int64_t[]){1, 0}, false, true);
        CHECK_VALUES(y, a3_y, N_OF(a3_y), tol);
        oari_attrs a = {.ni = 10, .i = {3, 3, 2, 2, 1, 1, 1, 0, 7, 6}};
        oar_tensor *gx =
            oari_call1(OARI_OP_avg_pool2d_backward, MAKE(a1_gy, dt, 2, 2, A1_OH, A1_OW), &a);
        CHECK_SHAPE(gx, 2, 2, 7, 6);
        CHECK_VALUES(gx, a1_gx, N_OF(a1_gx), tol);
        oar_pool_pop(p);
    }
}

static void test_adaptive_avg_pool2d(void) {
    for (int k = 0; k < 2; k++) {
        oar_pool *p = oar_pool_push();
        oar_dtype dt = float_types[k];
        double tol = tol_of(dt);
        oar_tensor *x = MAKE(p1_x, dt, 2, 3, 7, 5);
        oar_tensor *y = oar_adaptive_avg_pool2d(x, (int64_t[]){3, 4});
        CHECK_SHAPE(y, 2, 3, 3, 4);
        CHECK_VALUES(y, p1_y, N_OF(p1_y), tol);
        y = oar_adaptive_avg_pool2d(x, (int64_t[]){9, 7});
        CHECK_VALUES(y, p2_y, N_OF(p2_y), tol);
        oari_attrs a = {.ni = 2, .i = {7, 5}};
        oar_tensor *gx =
            oari_call1(OARI_OP_adaptive_avg_pool2d_backward, MAKE(p1_gy, dt, 2, 3, 3, 4), &a);
        CHECK_VALUES(gx, p1_gx, N_OF(p1_gx), tol);
        oar_pool_pop(p);
    }
}

static void test_interpolate(void) {
    for (int k = 0; k < 2; k++) {
        oar_pool *p = oar_pool_push();
        oar_dtype dt = float_types[k];
        double tol = tol_of(dt);
        oar_tensor *x = MAKE(i_x, dt, 1, 2, 4, 5);
        oar_tensor *y = oar_interpolate(x, (int64_t[]){7, 3}, OAR_INTERP_NEAREST, false);
        CHECK_SHAPE(y, 1, 2, 7, 3);
        CHECK_VALUES(y, i1_y, N_OF(i1_y), tol);
        y = oar_interpolate(x, (int64_t[]){8, 10}, OAR_INTERP_NEAREST, false);
        CHECK_VALUES(y, i2_y, N_OF(i2_y), tol);
        y = oar_interpolate(x, (int64_t[]){7, 9}, OAR_INTERP_BILINEAR, false);
        CHECK_VALUES(y, i3_y, N_OF(i3_y), tol);
        y = oar_interpolate(make_strided(i_x, dt, 4, (int64_t[]){1, 2, 4, 5}), (int64_t[]){3, 8},
                            OAR_INTERP_BILINEAR, true);
        CHECK_VALUES(y, i4_y, N_OF(i4_y), tol);
        y = oar_interpolate(x, (int64_t[]){2, 3}, OAR_INTERP_BILINEAR, false);
        CHECK_VALUES(y, i5_y, N_OF(i5_y), tol);
        oari_attrs a = {.ni = 4, .i = {1, 4, 5, 0}};
        oar_tensor *gx = oari_call1(OARI_OP_interpolate_backward, MAKE(i3_gy, dt, 1, 2, 7, 9), &a);
        CHECK_VALUES(gx, i3_gx, N_OF(i3_gx), tol);
        oari_attrs an = {.ni = 4, .i = {0, 4, 5, 0}};
        gx = oari_call1(OARI_OP_interpolate_backward, MAKE(i6_gy, dt, 1, 2, 7, 3), &an);
        CHECK_VALUES(gx, i6_gx, N_OF(i6_gx), tol);
        oar_pool_pop(p);
    }
}

/* Every gradient rule through the engine, against torch's gradients. */
static void test_gradients(void) {
    for (int k = 0; k < 2; k++) {
        oar_pool *p = oar_pool_push();
        oar_dtype dt = float_types[k];
        double tol = tol_of(dt);
        oar_tensor *x = leaf(MAKE(c1_x, dt, 2, 3, 7, 6)), *w = leaf(MAKE(c1_w, dt, 4, 3, 3, 2));
        oar_tensor *b = leaf(MAKE(c1_b, dt, 4));
        oar_tensor *y =
            oar_conv2d(x, w, b, (int64_t[]){2, 1}, (int64_t[]){1, 0}, (int64_t[]){1, 2}, 1);
        CHECK_GRADS(y, MAKE(c1_gy, dt, 2, 4, 4, 4), 3, ((oar_tensor *[]){x, w, b}),
                    ((const double *[]){c1_gx, c1_gw, c1_gb}),
                    ((int64_t[]){N_OF(c1_gx), N_OF(c1_gw), N_OF(c1_gb)}), tol);
        x = leaf(MAKE(c2_x, dt, 2, 4, 5, 5));
        w = leaf(MAKE(c2_w, dt, 6, 2, 3, 3));
        y = oar_conv2d(x, w, NULL, (int64_t[]){1, 1}, (int64_t[]){1, 1}, (int64_t[]){1, 1}, 2);
        CHECK_GRADS(y, MAKE(c2_gy, dt, 2, 6, 5, 5), 2, ((oar_tensor *[]){x, w}),
                    ((const double *[]){c2_gx, c2_gw}), ((int64_t[]){N_OF(c2_gx), N_OF(c2_gw)}),
                    tol);
        x = leaf(MAKE(t1_x, dt, 2, 4, 3, 4));
        w = leaf(MAKE(t1_w, dt, 4, 3, 2, 3));
        y = oar_conv_transpose2d(x, w, MAKE(t1_b, dt, 3), (int64_t[]){2, 3}, (int64_t[]){1, 0},
                                 (int64_t[]){1, 2}, (int64_t[]){1, 1}, 1);
        CHECK_GRADS(y, MAKE(t1_gy, dt, 2, 3, 5, 14), 2, ((oar_tensor *[]){x, w}),
                    ((const double *[]){t1_gx, t1_gw}), ((int64_t[]){N_OF(t1_gx), N_OF(t1_gw)}),
                    tol);
        x = leaf(MAKE(m1_x, dt, 2, 3, 7, 8));
        y = oar_max_pool2d(x, (int64_t[]){3, 2}, (int64_t[]){2, 2}, (int64_t[]){1, 1},
                           (int64_t[]){1, 2}, true, NULL);
        CHECK_GRADS(y, MAKE(m1_gy, dt, 2, 3, M1_OH, M1_OW), 1, &x, ((const double *[]){m1_gx}),
                    ((int64_t[]){N_OF(m1_gx)}), tol);
        x = leaf(MAKE(a1_x, dt, 2, 2, 7, 6));
        y = oar_avg_pool2d(x, (int64_t[]){3, 3}, (int64_t[]){2, 2}, (int64_t[]){1, 1}, true, false);
        CHECK_GRADS(y, MAKE(a1_gy, dt, 2, 2, A1_OH, A1_OW), 1, &x, ((const double *[]){a1_gx}),
                    ((int64_t[]){N_OF(a1_gx)}), tol);
        x = leaf(MAKE(p1_x, dt, 2, 3, 7, 5));
        y = oar_adaptive_avg_pool2d(x, (int64_t[]){3, 4});
        CHECK_GRADS(y, MAKE(p1_gy, dt, 2, 3, 3, 4), 1, &x, ((const double *[]){p1_gx}),
                    ((int64_t[]){N_OF(p1_gx)}), tol);
        x = leaf(MAKE(i_x, dt, 1, 2, 4, 5));
        y = oar_interpolate(x, (int64_t[]){7, 9}, OAR_INTERP_BILINEAR, false);
        CHECK_GRADS(y, MAKE(i3_gy, dt, 1, 2, 7, 9), 1, &x, ((const double *[]){i3_gx}),
                    ((int64_t[]){N_OF(i3_gx)}), tol);
        y = oar_interpolate(x, (int64_t[]){7, 3}, OAR_INTERP_NEAREST, false);
        CHECK_GRADS(y, MAKE(i6_gy, dt, 1, 2, 7, 3), 1, &x, ((const double *[]){i6_gx}),
                    ((int64_t[]){N_OF(i6_gx)}), tol);
        oar_pool_pop(p);
    }
}

static void test_half_and_empty(void) {
    oar_pool *p = oar_pool_push();
    /* f16 computes in f32 and rounds back */
    oar_tensor *y = oar_conv2d(MAKE(c3_x, OAR_F16, 2, 3, 4, 4), MAKE(c3_w, OAR_F16, 5, 3, 1, 1),
                               MAKE(c3_b, OAR_F16, 5), (int64_t[]){1, 1}, (int64_t[]){0, 0},
                               (int64_t[]){1, 1}, 1);
    CHECK(y && oar_tensor_dtype(y) == OAR_F16);
    CHECK_VALUES(y, c3_y, N_OF(c3_y), 1e-2);
    oar_tensor *idx = NULL;
    y = oar_max_pool2d(MAKE(m1_x, OAR_BF16, 2, 3, 7, 8), (int64_t[]){2, 2}, NULL, NULL, NULL, false,
                       &idx);
    CHECK(y && oar_tensor_dtype(y) == OAR_BF16);
    CHECK_VALUES(y, m2_y, N_OF(m2_y), 1e-2);
    y = oar_interpolate(MAKE(i_x, OAR_BF16, 1, 2, 4, 5), (int64_t[]){7, 9}, OAR_INTERP_BILINEAR,
                        false);
    CHECK_VALUES(y, i3_y, N_OF(i3_y), 2e-2);
    /* empty batch */
    oar_tensor *x0 = oar_zeros(OAR_F32, 4, (int64_t[]){0, 3, 5, 5});
    y = oar_conv2d(x0, oar_ones(OAR_F32, 4, (int64_t[]){2, 3, 3, 3}), NULL, (int64_t[]){1, 1},
                   (int64_t[]){0, 0}, (int64_t[]){1, 1}, 1);
    CHECK_SHAPE(y, 0, 2, 3, 3);
    y = oar_max_pool2d(x0, (int64_t[]){2, 2}, NULL, NULL, NULL, false, &idx);
    CHECK_SHAPE(y, 0, 3, 2, 2);
    CHECK_SHAPE(idx, 0, 3, 2, 2);
    y = oar_interpolate(x0, (int64_t[]){4, 4}, OAR_INTERP_BILINEAR, true);
    CHECK_SHAPE(y, 0, 3, 4, 4);
    /* no input channels: the output is the bias */
    y = oar_conv2d(oar_zeros(OAR_F64, 4, (int64_t[]){1, 0, 3, 3}),
                   oar_ones(OAR_F64, 4, (int64_t[]){2, 0, 2, 2}),
                   MAKE(((double[]){1.5, -2}), OAR_F64, 2), (int64_t[]){1, 1}, (int64_t[]){0, 0},
                   (int64_t[]){1, 1}, 1);
    CHECK_VALUES(y, ((double[]){1.5, 1.5, 1.5, 1.5, -2, -2, -2, -2}), 8, 0);
    /* and in f32 with padding, with and without a bias (found by fuzz_graph_json: the
     * im2col path offset a null column buffer) */
    const double fill[2][2] = {{0.5, -1}, {0, 0}};
    for (int with_bias = 1; with_bias >= 0; with_bias--) {
        y = oar_conv2d(oar_zeros(OAR_F32, 4, (int64_t[]){1, 0, 4, 4}), oar_ones(OAR_F32, 4, (int64_t[]){2, 0, 3, 3}),
                       with_bias ? MAKE(((double[]){0.5, -1}), OAR_F32, 2) : NULL, (int64_t[]){1, 1},
                       (int64_t[]){1, 1}, (int64_t[]){1, 1}, 1);
        CHECK_SHAPE(y, 1, 2, 4, 4);
        double want[32];
        for (int i = 0; i < 32; i++) want[i] = fill[!with_bias][i / 16];
        CHECK_VALUES(y, want, 32, 0);
    }
    oar_pool_pop(p);
}

/* Fails the n-th allocation through the hook. */
typedef struct {
    int64_t count, fail_at;
} fail_ctx;
static void *failing_alloc(void *ctx, void *ptr, size_t old_size, size_t new_size) {
    (void)old_size;
    fail_ctx *f = ctx;
    if (new_size == 0) {
        free(ptr);
        return NULL;
    }
    if (++f->count == f->fail_at) return NULL;
    return realloc(ptr, new_size);
}

/* Every allocation of a chain of these ops fails in turn: each failure is
 * reported (NULL with a message), nothing crashes, nothing leaks (ASan). */
static void test_allocation_failures(void) {
    bool finished = false;
    for (int64_t n = 1; n < 400 && !finished; n++) {
        fail_ctx f = {0, n};
        oar_set_allocator(failing_alloc, &f);
        oar_pool *p = oar_pool_push();
        oar_clear_error();
        oar_tensor *x = make_strided(c1_x, OAR_F32, 4, (int64_t[]){2, 3, 7, 6});
        oar_tensor *w = MAKE(c1_w, OAR_F32, 4, 3, 3, 2);
        oar_tensor *y =
            oar_conv2d(x, w, NULL, (int64_t[]){2, 1}, (int64_t[]){1, 0}, (int64_t[]){1, 2}, 1);
        y = oar_conv_transpose2d(y, w, NULL, (int64_t[]){2, 1}, (int64_t[]){1, 0},
                                 (int64_t[]){0, 0}, (int64_t[]){1, 2}, 1);
        oar_tensor *gw =
            y ? weight_grad(x, make_strided(c1_gy, OAR_F32, 4, (int64_t[]){2, 4, 4, 4}),
                            (int64_t[]){4, 3, 3, 2}, (int64_t[]){2, 1, 1, 0, 1, 2, 1})
              : NULL;
        oar_tensor *idx = NULL;
        y = oar_max_pool2d(gw ? y : NULL, (int64_t[]){2, 2}, NULL, NULL, NULL, false, &idx);
        y = oar_avg_pool2d(y, (int64_t[]){2, 2}, NULL, NULL, true, false);
        y = oar_interpolate(y, (int64_t[]){3, 3}, OAR_INTERP_BILINEAR, false);
        y = oar_adaptive_avg_pool2d(y, (int64_t[]){2, 2});
        bool ok = y != NULL;
        CHECK(ok || oar_last_error()[0] != 0);
        finished = ok && f.count < n;
        oar_pool_pop(p);
        oar_set_allocator(NULL, NULL);
    }
    CHECK(finished);
}

static void test_bad_input(void) {
    oar_pool *p = oar_pool_push();
    const int64_t one[2] = {1, 1}, zero[2] = {0, 0}, two[2] = {2, 2};
    oar_tensor *x = oar_ones(OAR_F32, 4, (int64_t[]){2, 3, 5, 5});
    oar_tensor *w4 = oar_ones(OAR_F32, 4, (int64_t[]){4, 2, 3, 3});
    CHECK_FAILS(oar_conv2d(x, w4, NULL, one, zero, one, 1),
                "input [2, 3, 5, 5] has 3 channels but weight [4, 2, 3, 3]");
    oar_tensor *w = oar_ones(OAR_F32, 4, (int64_t[]){4, 3, 7, 3});
    CHECK_FAILS(oar_conv2d(x, w, NULL, one, zero, one, 1), "larger than the padded input 5 x 5");
    CHECK(oar_conv2d(x, w, NULL, one, one, one, 1) != NULL); /* 7 <= 5 + 2 */
    CHECK_FAILS(
        oar_conv2d(x, oar_ones(OAR_F32, 4, (int64_t[]){4, 1, 3, 3}), NULL, one, zero, one, 3),
        "does not divide the 4 output channels");
    CHECK_FAILS(
        oar_conv2d(x, oar_ones(OAR_F32, 4, (int64_t[]){4, 1, 3, 3}), NULL, one, zero, one, 2),
        "groups 2 does not divide the 3 input channels");
    CHECK_FAILS(oar_conv2d(x, oar_ones(OAR_F32, 4, (int64_t[]){3, 3, 3, 3}),
                           oar_ones(OAR_F32, 1, (int64_t[]){4}), one, zero, one, 1),
                "bias [4] must be [3]");
    CHECK_FAILS(
        oar_conv2d(x, oar_ones(OAR_F64, 4, (int64_t[]){3, 3, 3, 3}), NULL, one, zero, one, 1),
        "weight dtype float64 differs");
    CHECK_FAILS(oar_conv2d(oar_ones(OAR_I64, 4, (int64_t[]){1, 3, 5, 5}),
                           oar_ones(OAR_I64, 4, (int64_t[]){3, 3, 3, 3}), NULL, one, zero, one, 1),
                "must be floating");
    CHECK_FAILS(
        oar_conv2d(x, oar_ones(OAR_F32, 4, (int64_t[]){3, 3, 3, 3}), NULL, zero, zero, one, 1),
        "must be >= 1");
    CHECK_FAILS(oar_conv2d(oar_ones(OAR_F32, 2, (int64_t[]){5, 5}), w, NULL, one, zero, one, 1),
                "expected a 4-D input");
    CHECK_FAILS(oar_conv2d(x, NULL, NULL, one, zero, one, 1), "weight is NULL");
    CHECK_FAILS(oar_conv2d(NULL, w, NULL, one, zero, one, 1), "NULL");
    CHECK_FAILS(oar_conv2d(x, w, NULL, NULL, zero, one, 1), "stride is NULL");
    CHECK_FAILS(oar_conv1d(x, w, NULL, 1, 0, 1, 1), "expected a 3-D input");
    CHECK_FAILS(oar_conv1d(oar_ones(OAR_F32, 3, (int64_t[]){1, 2, 4}),
                           oar_ones(OAR_F32, 3, (int64_t[]){1, 2, 5}), NULL, 1, 0, 1, 1),
                "larger than the padded input");
    oar_tensor *wt = oar_ones(OAR_F32, 4, (int64_t[]){3, 2, 3, 3});
    CHECK_FAILS(oar_conv_transpose2d(x, wt, NULL, one, zero, one, one, 1),
                "output_padding (1, 1) must be >= 0 and smaller than stride");
    CHECK_FAILS(oar_conv_transpose2d(x, oar_ones(OAR_F32, 4, (int64_t[]){4, 2, 3, 3}), NULL, one,
                                     zero, zero, one, 1),
                "input [2, 3, 5, 5] has 3 channels but weight [4, 2, 3, 3] expects 4");
    CHECK_FAILS(oar_conv_transpose2d(x, wt, NULL, one, (int64_t[]){4, 4}, zero, one, 1),
                "not positive");
    CHECK(oar_conv_transpose2d(x, wt, NULL, two, zero, one, one, 1) != NULL);
    /* pools */
    CHECK_FAILS(oar_max_pool2d(x, two, NULL, two, NULL, false, NULL),
                "at most half the kernel size");
    CHECK_FAILS(oar_max_pool2d(x, (int64_t[]){6, 6}, NULL, NULL, NULL, false, NULL), "too small");
    CHECK_FAILS(
        oar_max_pool2d(oar_ones(OAR_F32, 2, (int64_t[]){5, 5}), two, NULL, NULL, NULL, false, NULL),
        "expected a 3-D [C, H, W] or 4-D");
    CHECK_FAILS(oar_max_pool2d(NULL, two, NULL, NULL, NULL, false, NULL), "NULL");
    CHECK_FAILS(oar_avg_pool2d(x, (int64_t[]){0, 2}, NULL, NULL, false, true), "must be >= 1");
    CHECK_FAILS(
        oar_avg_pool2d(oar_ones(OAR_I32, 4, (int64_t[]){1, 1, 4, 4}), two, NULL, NULL, false, true),
        "must be floating");
    CHECK_FAILS(oar_adaptive_avg_pool2d(x, (int64_t[]){0, 2}), "must be >= 1");
    CHECK_FAILS(oar_interpolate(x, (int64_t[]){0, 2}, OAR_INTERP_BILINEAR, false), "must be >= 1");
    CHECK_FAILS(oar_interpolate(x, two, OAR_INTERP_NEAREST, true), "align_corners");
    CHECK_FAILS(oar_interpolate(x, two, (oar_interp_mode)7, false), "unknown mode");
    /* a NULL from an earlier failure keeps its message */
    oar_clear_error();
    oar_tensor *bad = oar_conv2d(x, w4, NULL, one, zero, one, 1);
    CHECK(bad == NULL && oar_max_pool2d(bad, two, NULL, NULL, NULL, false, NULL) == NULL);
    CHECK(strstr(oar_last_error(), "has 3 channels") != NULL);
    oar_pool_pop(p);
}

int main(void) {
    RUN(test_conv2d_values);
    RUN(test_conv2d_noncontiguous);
    RUN(test_conv1d);
    RUN(test_conv_transpose2d);
    RUN(test_conv_gradient_pieces);
    RUN(test_conv2d_batched_direct);
    RUN(test_thread_count_independence);
    RUN(test_max_pool2d);
    RUN(test_avg_pool2d);
    RUN(test_adaptive_avg_pool2d);
    RUN(test_interpolate);
    RUN(test_gradients);
    RUN(test_half_and_empty);
    RUN(test_bad_input);
    RUN(test_allocation_failures);
    return test_summary();
}

/* bf16 conv2d (and conv1d, which runs on it): the oneDNN kernel where oar
 * is built with it (src/backends/cpu/cpu_dnnl.c), f32 between casts
 * otherwise. Results against the float64 convolution of the same
 * bf16-rounded inputs (oar's f64 im2col + dgemm), within one bf16 rounding
 * (2^-8 of the magnitude) plus f32 accumulation slack growing with
 * K = C/groups * kh * kw; gradients (conv_transpose2d and
 * conv2d_weight_grad, oneDNN's backward passes) against the same
 * computation in f32; the route and oneDNN's
 * primitive cache show that the kernel really runs. */
#include "test.h"
#include "alloc_fail_loop.h"

#include "backends/cpu/cpu.h"
#include "ops/plan.h"

#define SHAPE(...) ((int64_t[]){__VA_ARGS__})
#define PAIR(a, b) ((const int64_t[2]){a, b})

static oar_tensor *bf16_randn(int ndim, const int64_t *shape) {
    return oar_cast(oar_randn(OAR_F32, ndim, shape), OAR_BF16);
}

static oar_tensor *abs64(oar_tensor *x) { return x ? oar_abs(oar_cast(x, OAR_F64)) : NULL; }
static oar_tensor *f64(oar_tensor *x) { return x ? oar_cast(x, OAR_F64) : NULL; }

typedef struct {
    int64_t stride[2], padding[2], dilation[2], groups;
} conv_geom;

static oar_tensor *conv(oar_tensor *x, oar_tensor *w, oar_tensor *b, const conv_geom *g) {
    return oar_conv2d(x, w, b, g->stride, g->padding, g->dilation, g->groups);
}

/* got against ref elementwise: 2^-8 |ref| + K 2^-22 mag. */
static bool close_enough(const char *what, oar_tensor *got, oar_tensor *ref, oar_tensor *mag, int64_t k) {
    int64_t n = oar_tensor_numel(ref);
    if (!got || !ref || !mag || oar_tensor_numel(got) != n || oar_tensor_numel(mag) != n) {
        fprintf(stderr, "%s: %s: missing or misshaped (%s)\n", test_current, what, oar_last_error());
        return false;
    }
    double *g = test_values(got), *r = test_values(ref), *m = test_values(mag);
    int bad = 0;
    for (int64_t i = 0; i < n && g && r && m; i++) {
        double tol = ldexp(fabs(r[i]), -8) + (double)k * ldexp(m[i], -22);
        if (!(fabs(g[i] - r[i]) <= tol) && bad++ < 5)
            fprintf(stderr, "%s: %s[%lld] = %.9g, expected %.9g (tol %.3g)\n", test_current, what,
                    (long long)i, g[i], r[i], tol);
    }
    bool ok = g && r && m && !bad;
    free(g);
    free(r);
    free(m);
    return ok;
}

/* conv(x, w, b) in bf16 against f64 on the same values. */
static void check_conv(const char *what, oar_tensor *x, oar_tensor *w, oar_tensor *b, const conv_geom *g) {
    oar_pool *p = oar_pool_push();
    oar_tensor *y = conv(x, w, b, g);
    oar_tensor *ref = conv(f64(x), f64(w), f64(b), g), *mag = conv(abs64(x), abs64(w), abs64(b), g);
    int64_t k = oar_tensor_numel(w) / oar_tensor_dim(w, 0);
    bool ok = y && oar_tensor_dtype(y) == OAR_BF16 && ref && oar_tensor_ndim(y) == oar_tensor_ndim(ref) &&
              !memcmp(oar_tensor_shape(y), oar_tensor_shape(ref), (size_t)oar_tensor_ndim(y) * sizeof(int64_t)) &&
              close_enough(what, y, ref, mag, k);
    if (ok) test_passed++;
    else {
        test_failed++;
        fprintf(stderr, "%s: %s failed (%s)\n", test_current, what, oar_last_error());
    }
    oar_pool_pop(p);
}

static void test_shapes(void) {
    oar_pool *p = oar_pool_push();
    oar_manual_seed(3);
    const conv_geom same = {{1, 1}, {1, 1}, {1, 1}, 1}, s2 = {{2, 2}, {0, 0}, {1, 1}, 1},
                    dil = {{1, 1}, {2, 2}, {2, 2}, 1}, grp = {{1, 2}, {1, 0}, {1, 1}, 2},
                    dw = {{1, 1}, {1, 1}, {1, 1}, 8}, one = {{1, 1}, {0, 0}, {1, 1}, 1};
    check_conv("3x3, padding 1, bias", bf16_randn(4, SHAPE(2, 5, 9, 11)), bf16_randn(4, SHAPE(7, 5, 3, 3)),
               bf16_randn(1, SHAPE(7)), &same);
    check_conv("3x3, stride 2, odd input", bf16_randn(4, SHAPE(1, 3, 10, 9)), bf16_randn(4, SHAPE(4, 3, 3, 3)),
               NULL, &s2);
    check_conv("dilation 2", bf16_randn(4, SHAPE(2, 4, 12, 12)), bf16_randn(4, SHAPE(6, 4, 3, 3)), NULL, &dil);
    check_conv("groups 2, 2x3 kernel, stride 1x2, padding 1x0", bf16_randn(4, SHAPE(2, 6, 8, 10)),
               bf16_randn(4, SHAPE(4, 3, 2, 3)), bf16_randn(1, SHAPE(4)), &grp);
    check_conv("depthwise", bf16_randn(4, SHAPE(1, 8, 7, 7)), bf16_randn(4, SHAPE(8, 1, 3, 3)), NULL, &dw);
    check_conv("1x1, 256 channels", bf16_randn(4, SHAPE(3, 256, 5, 5)), bf16_randn(4, SHAPE(32, 256, 1, 1)),
               bf16_randn(1, SHAPE(32)), &one);
    check_conv("unbatched", bf16_randn(3, SHAPE(5, 9, 11)), bf16_randn(4, SHAPE(7, 5, 3, 3)), NULL, &same);
    check_conv("strided input (H and W swapped)", oar_transpose(bf16_randn(4, SHAPE(2, 5, 11, 9)), 2, 3),
               bf16_randn(4, SHAPE(7, 5, 3, 3)), bf16_randn(1, SHAPE(7)), &same);
    /* conv1d runs on conv2d's kernel */
    oar_tensor *x1 = bf16_randn(3, SHAPE(2, 4, 20)), *w1 = bf16_randn(3, SHAPE(3, 4, 5));
    oar_tensor *y1 = oar_conv1d(x1, w1, NULL, 2, 1, 1, 1);
    oar_tensor *r1 = oar_conv1d(f64(x1), f64(w1), NULL, 2, 1, 1, 1), *m1 = oar_conv1d(abs64(x1), abs64(w1), NULL, 2, 1, 1, 1);
    CHECK(y1 && oar_tensor_dtype(y1) == OAR_BF16 && close_enough("conv1d", y1, r1, m1, 20));
    oar_pool_pop(p);
}

/* No images: an empty result; no input channels (K = 0): the bias. */
static void test_empty(void) {
    oar_pool *p = oar_pool_push();
    const conv_geom same = {{1, 1}, {1, 1}, {1, 1}, 1};
    oar_tensor *e = conv(oar_ones(OAR_BF16, 4, SHAPE(0, 3, 5, 5)), oar_ones(OAR_BF16, 4, SHAPE(2, 3, 3, 3)), NULL,
                         &same);
    CHECK(e && oar_tensor_numel(e) == 0 && oar_tensor_dim(e, 1) == 2);
    /* no input channels: every output plane is its bias */
    float bv[3] = {1.5f, -2.0f, 0.25f};
    oar_tensor *b = oar_cast(oar_tensor_from_data(bv, OAR_F32, 1, SHAPE(3)), OAR_BF16);
    oar_tensor *z = conv(oar_ones(OAR_BF16, 4, SHAPE(2, 0, 4, 4)), oar_ones(OAR_BF16, 4, SHAPE(3, 0, 3, 3)), b,
                         &same);
    double want[2 * 3 * 16];
    for (int i = 0; i < 2 * 3 * 16; i++) want[i] = bv[(i / 16) % 3];
    CHECK(z && oar_tensor_dtype(z) == OAR_BF16);
    CHECK_VALUES(z, want, 2 * 3 * 16, 0);
    /* the backward ops with nothing to sum: zeros, and the bias */
    oar_tensor *w0 = oar_ones(OAR_BF16, 4, SHAPE(2, 3, 3, 3));
    CHECK(oar_tensor_set_requires_grad(w0, true) == 0);
    CHECK(oar_backward(oar_sum(conv(oar_ones(OAR_BF16, 4, SHAPE(0, 3, 5, 5)), w0, NULL, &same), 0, NULL, false), NULL) == 0);
    oar_tensor *gw = oar_tensor_grad(w0);
    double zeros[2 * 3 * 9] = {0};
    CHECK(gw && oar_tensor_dtype(gw) == OAR_BF16);
    CHECK_VALUES(gw, zeros, 2 * 3 * 9, 0);
    oar_tensor *t = oar_conv_transpose2d(oar_ones(OAR_BF16, 4, SHAPE(2, 0, 4, 4)), oar_ones(OAR_BF16, 4, SHAPE(0, 3, 3, 3)),
                                         b, PAIR(1, 1), PAIR(1, 1), PAIR(0, 0), PAIR(1, 1), 1);
    CHECK(t && oar_tensor_dtype(t) == OAR_BF16);
    CHECK_VALUES(t, want, 2 * 3 * 16, 0);
    oar_pool_pop(p);
}

/* The input's, weight's and bias's gradients of a bf16 conv
 * (conv_transpose2d and conv2d_weight_grad: oneDNN's backward data and
 * backward weights where built with it) against the same computation in
 * f32, within one bf16 rounding plus accumulation slack. */
static void check_grads(const char *what, const int64_t *xs, const int64_t *ws, const conv_geom *g) {
    oar_pool *p = oar_pool_push();
    oar_tensor *x = bf16_randn(4, xs), *w = bf16_randn(4, ws), *b = bf16_randn(1, ws);
    oar_tensor *x32 = oar_cast(x, OAR_F32), *w32 = oar_cast(w, OAR_F32), *b32 = oar_cast(b, OAR_F32);
    /* magnitudes: the same gradients of |.| values (leaves of their own) */
    oar_tensor *ax = abs64(x), *aw = abs64(w), *ab = abs64(b);
    oar_tensor *leaves[6] = {x, w, b, x32, w32, b32};
    for (int i = 0; i < 6; i++) CHECK(leaves[i] && oar_tensor_set_requires_grad(leaves[i], true) == 0);
    oar_tensor *y = conv(x, w, b, g), *y32 = conv(x32, w32, b32, g);
    oar_tensor *gy = y ? bf16_randn(oar_tensor_ndim(y), oar_tensor_shape(y)) : NULL;
    CHECK(y && gy && oar_backward(y, gy) == 0);
    CHECK(y32 && gy && oar_backward(y32, oar_cast(gy, OAR_F32)) == 0);
    oar_tensor *agy = abs64(gy);
    oar_tensor *mleaves[3] = {ax, aw, ab};
    for (int i = 0; i < 3; i++) CHECK(mleaves[i] && oar_tensor_set_requires_grad(mleaves[i], true) == 0);
    oar_tensor *ym = conv(ax, aw, ab, g);
    CHECK(ym && oar_backward(ym, agy) == 0);
    const char *names[3] = {"grad x", "grad w", "grad b"};
    const int64_t per_out = y ? oar_tensor_numel(y) / oar_tensor_dim(y, 1) : 0;
    int64_t ks[3] = {ws[0] * ws[2] * ws[3], per_out, per_out}; /* terms per gradient element (bounds) */
    for (int i = 0; i < 3; i++) {
        oar_tensor *gi = oar_tensor_grad(leaves[i]);
        char name[160];
        snprintf(name, sizeof name, "%s: %s", what, names[i]);
        bool ok = gi && oar_tensor_dtype(gi) == OAR_BF16 &&
                  close_enough(name, gi, oar_tensor_grad(leaves[i + 3]), oar_tensor_grad(mleaves[i]), ks[i]);
        CHECK(ok);
    }
    oar_pool_pop(p);
}

static void test_gradients(void) {
    oar_manual_seed(4);
    check_grads("3x3, stride 2x1, padding 1", SHAPE(2, 3, 9, 8), SHAPE(5, 3, 3, 3), &(conv_geom){{2, 1}, {1, 1}, {1, 1}, 1});
    /* an even input at stride 2: the input's gradient needs output padding */
    check_grads("stride 2, even input", SHAPE(2, 4, 10, 10), SHAPE(6, 4, 3, 3), &(conv_geom){{2, 2}, {1, 1}, {1, 1}, 1});
    check_grads("stride 3, no padding", SHAPE(1, 2, 11, 13), SHAPE(3, 2, 2, 2), &(conv_geom){{3, 3}, {0, 0}, {1, 1}, 1});
    check_grads("dilation 2", SHAPE(2, 3, 12, 11), SHAPE(4, 3, 3, 3), &(conv_geom){{1, 1}, {2, 2}, {2, 2}, 1});
    check_grads("groups 2", SHAPE(2, 6, 8, 9), SHAPE(4, 3, 3, 2), &(conv_geom){{1, 2}, {1, 0}, {1, 1}, 2});
    check_grads("depthwise", SHAPE(2, 8, 7, 7), SHAPE(8, 1, 3, 3), &(conv_geom){{1, 1}, {1, 1}, {1, 1}, 8});
    check_grads("7x7 stem, stride 2, padding 3", SHAPE(2, 3, 32, 32), SHAPE(16, 3, 7, 7),
                &(conv_geom){{2, 2}, {3, 3}, {1, 1}, 1});
    check_grads("1x1, 64 channels", SHAPE(2, 64, 6, 6), SHAPE(32, 64, 1, 1), &(conv_geom){{1, 1}, {0, 0}, {1, 1}, 1});
}

/* conv_transpose2d itself in bf16 (its own op, with output padding and a
 * bias) against f64 on the same values. */
static void test_transpose(void) {
    oar_pool *p = oar_pool_push();
    oar_manual_seed(6);
    struct {
        const char *what;
        int64_t xs[4], ws[4], stride[2], padding[2], out_pad[2], dilation[2], groups;
    } cases[] = {
        {"stride 2, output padding 1", {2, 4, 5, 6}, {4, 3, 3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, 1},
        {"groups 2, dilation 2", {1, 4, 6, 5}, {4, 2, 3, 3}, {1, 1}, {2, 1}, {0, 0}, {2, 2}, 2},
        {"stride 3, output padding 2, no padding", {2, 3, 4, 4}, {3, 5, 2, 2}, {3, 3}, {0, 0}, {2, 2}, {1, 1}, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        oar_tensor *x = bf16_randn(4, cases[i].xs), *w = bf16_randn(4, cases[i].ws);
        oar_tensor *b = bf16_randn(1, (int64_t[]){cases[i].ws[1] * cases[i].groups});
#define TCONV(x, w, b) \
    oar_conv_transpose2d(x, w, b, cases[i].stride, cases[i].padding, cases[i].out_pad, cases[i].dilation, cases[i].groups)
        oar_tensor *y = TCONV(x, w, b), *ref = TCONV(f64(x), f64(w), f64(b)), *mag = TCONV(abs64(x), abs64(w), abs64(b));
#undef TCONV
        bool ok = y && oar_tensor_dtype(y) == OAR_BF16 && close_enough(cases[i].what, y, ref, mag, cases[i].xs[1] * 9);
        CHECK(ok);
    }
    oar_pool_pop(p);
}

/* bf16 conv2d's route: oneDNN's kernel where built with it (a primitive
 * cached per geometry), f32 between casts otherwise; f16 always the latter. */
static void test_route(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *in[3] = {oar_ones(OAR_BF16, 4, SHAPE(1, 2, 5, 5)), oar_ones(OAR_BF16, 4, SHAPE(3, 2, 3, 3)), NULL};
    oari_route r = oari_plan_route(oari_device_cpu(), OARI_OP_conv2d, OAR_BF16, 3, in, NULL);
    oar_tensor *h[3] = {oar_ones(OAR_F16, 4, SHAPE(1, 2, 5, 5)), oar_ones(OAR_F16, 4, SHAPE(3, 2, 3, 3)), NULL};
    CHECK(oari_plan_route(oari_device_cpu(), OARI_OP_conv2d, OAR_F16, 3, h, NULL) == OARI_ROUTE_VIA_F32);
#ifdef OAR_TEST_WITH_DNNL
    if (!oari_dnnl_has_bf16()) { /* oneDNN 2.6 on a CPU without AVX-512 */
        CHECK(r == OARI_ROUTE_VIA_F32);
        printf("oneDNN has no bf16 kernels on this CPU: bf16 conv2d runs VIA_F32; oneDNN route "
               "checks skipped\n");
        oar_pool_pop(p);
        return;
    }
    CHECK(r == OARI_ROUTE_KERNEL);
    /* the backward ops too */
    oar_tensor *gy = oar_ones(OAR_BF16, 4, SHAPE(1, 3, 3, 3));
    CHECK(oari_plan_route(oari_device_cpu(), OARI_OP_conv_transpose2d, OAR_BF16, 3, (oar_tensor *[]){gy, in[1], NULL},
                          NULL) == OARI_ROUTE_KERNEL);
    CHECK(oari_plan_route(oari_device_cpu(), OARI_OP_conv2d_weight_grad, OAR_BF16, 2, (oar_tensor *[]){in[0], gy},
                          NULL) == OARI_ROUTE_KERNEL);
    const conv_geom same = {{1, 1}, {1, 1}, {1, 1}, 1}, s2 = {{2, 2}, {1, 1}, {1, 1}, 1};
    oar_tensor *x = bf16_randn(4, SHAPE(2, 3, 13, 13)), *w = bf16_randn(4, SHAPE(4, 3, 3, 3));
    int n0 = oari_dnnl_cached_primitives();
    check_conv("first call", x, w, NULL, &same);
    CHECK(oari_dnnl_cached_primitives() == n0 + 1);
    check_conv("same geometry again", x, w, NULL, &same);
    CHECK(oari_dnnl_cached_primitives() == n0 + 1);
    check_conv("with a bias", x, w, bf16_randn(1, SHAPE(4)), &same);
    CHECK(oari_dnnl_cached_primitives() == n0 + 2);
    check_conv("stride 2", x, w, NULL, &s2);
    CHECK(oari_dnnl_cached_primitives() == n0 + 3);
    /* a backward: one backward-data and one backward-weights primitive */
    oar_tensor *xg = oar_detach(x);
    CHECK(oar_tensor_set_requires_grad(xg, true) == 0 && oar_tensor_set_requires_grad(w, true) == 0);
    CHECK(oar_backward(oar_sum(conv(xg, w, NULL, &s2), 0, NULL, false), NULL) == 0);
    CHECK(oari_dnnl_cached_primitives() == n0 + 5);
#else
    CHECK(r == OARI_ROUTE_VIA_F32);
    printf("built without oneDNN: bf16 conv2d runs VIA_F32; oneDNN route checks skipped\n");
#endif
    oar_pool_pop(p);
}

/* Bad input fails cleanly: the shape rule, and oneDNN itself given a
 * geometry it rejects (an output size that does not follow) or a dtype it
 * lacks, naming the shapes. */
static void test_errors(void) {
    oar_pool *p = oar_pool_push();
    const conv_geom same = {{1, 1}, {1, 1}, {1, 1}, 1};
    CHECK_FAILS(conv(oar_ones(OAR_BF16, 4, SHAPE(1, 2, 5, 5)), oar_ones(OAR_BF16, 4, SHAPE(3, 4, 3, 3)), NULL, &same),
                "conv2d");
#ifdef OAR_TEST_WITH_DNNL
    uint16_t buf[512] = {0};
    oari_dnnl_conv2d_args a = {.dtype = OAR_BF16, .n = 1, .c = 2, .h = 5, .w = 5, .o = 3, .kh = 3, .kw = 3,
                               .oh = 7, .ow = 7, .sh = 1, .sw = 1, .ph = 0, .pw = 0, .dh = 1, .dw = 1,
                               .groups = 1, .x = buf, .weight = buf, .y = buf};
    CHECK_STATUS_FAILS(oari_dnnl_conv2d(&a), "conv2d: oneDNN convolution description failed");
    CHECK(strstr(oar_last_error(), "input [1, 2, 5, 5], weight [3, 2, 3, 3]"));
    a.pass = OARI_DNNL_BACKWARD_WEIGHTS;
    CHECK_STATUS_FAILS(oari_dnnl_conv2d(&a), "conv2d_weight_grad: oneDNN convolution description failed");
    a.pass = 7;
    CHECK_STATUS_FAILS(oari_dnnl_conv2d(&a), "no oneDNN pass 7");
    a.pass = OARI_DNNL_FORWARD;
    a.dtype = OAR_F16;
    CHECK_STATUS_FAILS(oari_dnnl_conv2d(&a), "conv2d: no oneDNN kernel for float16");
    /* f32: the forward only (the stem route), never f32_out or a backward */
    a.dtype = OAR_F32;
    CHECK_STATUS_FAILS(oari_dnnl_conv2d(&a), "conv2d: oneDNN convolution description failed");
    a.f32_out = true;
    CHECK_STATUS_FAILS(oari_dnnl_conv2d(&a), "conv2d: no oneDNN kernel for float32");
    a.f32_out = false;
    a.pass = OARI_DNNL_BACKWARD_DATA;
    CHECK_STATUS_FAILS(oari_dnnl_conv2d(&a), "conv_transpose2d: no oneDNN kernel for float32");
#endif
    oar_pool_pop(p);
}

/* Every allocation of a bf16 conv with a copied (strided) input and a bias,
 * and its backward, fails in turn: out of memory, nothing leaked, oar
 * usable. */
static int conv_step(void) {
    oar_pool *p = oar_pool_push();
    const conv_geom same = {{1, 1}, {1, 1}, {1, 1}, 1};
    oar_tensor *x = oar_transpose(oar_full(OAR_BF16, 4, SHAPE(1, 2, 6, 5), 0.5), 2, 3);
    oar_tensor *w = oar_full(OAR_BF16, 4, SHAPE(3, 2, 3, 3), 0.25), *b = oar_full(OAR_BF16, 1, SHAPE(3), 1);
    int st = w ? oar_tensor_set_requires_grad(w, true) : -1;
    oar_tensor *y = st ? NULL : conv(x, w, b, &same), *g = y ? oar_ones_like(y) : NULL;
    if (!st) st = g ? oar_backward(y, g) : oari_fail_status();
    oar_pool_pop(p);
    return st;
}

static void test_alloc_failure(void) {
    CHECK(conv_step() == 0);
    oar_set_allocator(failing_alloc, NULL);
    int failures, n = fail_each_allocation_with(conv_step, &failures, (fail_loop_opts){.cold = true});
    oar_set_allocator(NULL, NULL);
    CHECK(n > 5 && failures > 0);
}

int main(void) {
    RUN(test_route); /* first: counts the primitives this process makes */
    RUN(test_shapes);
    RUN(test_empty);
    RUN(test_gradients);
    RUN(test_transpose);
    RUN(test_errors);
    RUN(test_alloc_failure);
    return test_summary();
}

/* Autograd through moves between devices (oar_tensor_to, the to_device
 * op): a loss computed on another device from CPU leaves moved there gives
 * the leaves' gradients on the CPU, first and second order.
 * - On the mock device of tests/devices/plugins/ (host memory; its f64 ops
 *   run on the CPU with copies), in f64 against central differences
 *   (tests/gradcheck.h), moves both ways, first and second order.
 * - On opencl:0 (PoCL here) in f32, against the same graph computed all on
 *   the CPU, first order (backward) and second order (a Hessian-vector
 *   product through oar_grad with create_graph); the profiler shows the
 *   moves. Skipped with a message where no OpenCL device exists.
 * - On opencl:0 in f64 (its cl_khr_fp64 kernels): a small MLP (embedding,
 *   matmul, layer_norm, gelu, cross entropy with class indices) and a small
 *   CNN (conv2d, tanh, max_pool2d, conv_transpose2d, softmax), gradients
 *   first and second order against central differences, the losses equal
 *   to the CPU's to 1e-12, and no op falls back to the CPU.
 * - A move under no-grad mode, and a move to the tensor's own device,
 *   record nothing. */
#include "test.h"
#include "graph/graph_test_util.h" /* max_diff */

#include "gradcheck.h"
#include "opencl_common.h"

static oar_device *mock;

/* f(x, w) = sum over the mock of sin(x @ w) * (x @ w), back on the CPU. */
static oar_tensor *f_mock(void *ctx, int n, oar_tensor *const *x) {
    (void)ctx, (void)n;
    oar_tensor *a = oar_tensor_to(x[0], mock), *b = oar_tensor_to(x[1], mock);
    oar_tensor *y = oar_matmul(a, b);
    oar_tensor *z = oar_sum(oar_mul(oar_sin(y), y), 0, NULL, false);
    if (z && oar_tensor_device(z) != mock) return NULL;
    return oar_tensor_to(z, oar_device_cpu());
}

/* A device result (not moved back): the gradient's move is the one the
 * checks go through; the value comes back through oar_tensor_to too. */
static oar_tensor *f_mock_out(void *ctx, int n, oar_tensor *const *x) {
    (void)ctx, (void)n;
    oar_tensor *a = oar_tensor_to(x[0], mock);
    return oar_tensor_to(oar_mul(oar_exp(a), a), oar_device_cpu());
}

/* The norms' composite gradients, which a device without the fused
 * layer_norm_backward / batch_norm_backward kernels takes (src/ops/norm.c,
 * fused_backward_here): training batch_norm and layer_norm on the mock,
 * whose ops run on the CPU with copies. */
static oar_tensor *f_mock_norms(void *ctx, int n, oar_tensor *const *x) {
    (void)ctx, (void)n;
    oar_tensor *v[3];
    for (int i = 0; i < 3; i++) v[i] = oar_tensor_to(x[i], mock);
    oar_tensor *y = oar_batch_norm(v[0], NULL, NULL, v[1], v[2], true, 0.1, 1e-5); /* [3, 2, 4] */
    y = oar_layer_norm(oar_mul(y, v[0]), 1, NULL, NULL, 1e-5);
    oar_tensor *z = oar_sum(oar_mul(oar_sin(y), v[0]), 0, NULL, false);
    if (z && oar_tensor_device(z) != mock) return NULL;
    return oar_tensor_to(z, oar_device_cpu());
}

static void test_gradcheck_mock(void) {
    gc_input in[2] = {{.ndim = 2, .shape = {3, 4}, .lo = -1, .hi = 1},
                      {.ndim = 2, .shape = {4, 2}, .lo = -1, .hi = 1}};
    gc_opts o = {.seed = 7};
    CHECK(gradcheck("to mock and back, matmul, sin", f_mock, NULL, 2, in, &o));
    CHECK(gradcheck("to mock and back, exp", f_mock_out, NULL, 1, in, &o));
    gc_input norms[3] = {{.ndim = 3, .shape = {3, 2, 4}, .lo = -1, .hi = 1},
                         {.ndim = 1, .shape = {2}, .lo = 0.5, .hi = 1.5},
                         {.ndim = 1, .shape = {2}, .lo = -0.5, .hi = 0.5}};
    CHECK(gradcheck("on the mock: batch_norm, layer_norm (composite gradients)", f_mock_norms, NULL, 3, norms, &o));
}

static void test_nothing_recorded(oar_device *d) {
    oar_pool *p = oar_pool_push();
    oar_tensor *x = oar_ones(OAR_F32, 1, (int64_t[]){3});
    CHECK(oar_tensor_set_requires_grad(x, true) == 0);
    /* on its own device: x itself, no node */
    CHECK(oar_tensor_to(x, oar_device_cpu()) == x && oar_tensor_is_leaf(x));
    /* under no-grad: a leaf that does not require grad */
    oar_no_grad_push();
    oar_tensor *y = oar_tensor_to(x, d);
    oar_no_grad_pop();
    CHECK(y && oar_tensor_device(y) == d && oar_tensor_is_leaf(y) && !oar_tensor_requires_grad(y));
    /* with grad: a node, and the gradient lands on the CPU leaf */
    oar_tensor *z = oar_tensor_to(x, d);
    CHECK(z && !oar_tensor_is_leaf(z) && oar_tensor_requires_grad(z));
    CHECK(oar_backward(oar_sum(oar_tensor_to(z, oar_device_cpu()), 0, NULL, false), NULL) == 0);
    CHECK(oar_tensor_grad(x) && oar_tensor_device(oar_tensor_grad(x)) == oar_device_cpu());
    CHECK_VALUES(oar_tensor_grad(x), ((double[]){1, 1, 1}), 3, 0);
    /* the move of a NULL keeps the first message */
    CHECK_FAILS(oar_tensor_to(oar_tensor_to(NULL, d), oar_device_cpu()), "tensor is NULL");
    oar_pool_pop(p);
}

/* A move inside a traced function is refused with a reason (the graph
 * would name this process's devices), whether of a traced value or of a
 * module's weight; a move of a plain tensor is computed while tracing. */
static oar_tensor *trace_weight;
static int traced_move(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    *out = oar_tensor_to(in[0], mock);
    return *out ? 0 : -1;
}
static int traced_weight_move(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    oar_tensor *w = oar_tensor_to(oar_tensor_to(trace_weight, mock), oar_device_cpu());
    *out = oar_add(in[0], w);
    return *out ? 0 : -1;
}

static void test_trace_refuses_moves(void) {
    oar_pool *p = oar_pool_push();
    oar_graph_input_spec x = {.name = "x", .dtype = OAR_F32, .ndim = 1, .shape = {3}};
    CHECK_FAILS(oar_trace(traced_move, NULL, 1, &x, 1, NULL), "cannot be traced");
    oar_module *m = oar_linear_new(3, 3, true);
    trace_weight = m ? oar_module_get(m, "bias") : NULL;
    CHECK(trace_weight != NULL);
    CHECK_FAILS(oar_trace(traced_weight_move, NULL, 1, &x, 1, &(oar_trace_options){.module = m}),
                "move the model and the inputs before tracing");
    oar_module_free(m);
    oar_pool_pop(p);
}

static void test_mock(void) {
    mock = oar_device_get("mock:0");
    CHECK(mock != NULL);
    if (!mock) return;
    test_gradcheck_mock();
    test_nothing_recorded(mock);
    test_trace_refuses_moves();
}

/* ---- opencl:0 against the CPU ------------------------------------------- */

static oar_tensor *seq(int64_t r, int64_t c, double scale, double shift) {
    int64_t s[2] = {r, c};
    float *v = malloc((size_t)(r * c) * sizeof *v);
    for (int64_t i = 0; i < r * c; i++) v[i] = (float)(scale * (double)((i * 7) % 11 - 5) + shift);
    oar_tensor *t = oar_tensor_from_data(v, OAR_F32, 2, s);
    free(v);
    return t;
}

static void check_same(oar_tensor *got, oar_tensor *want, double tol) {
    CHECK(got && want && oar_tensor_device(got) == oar_device_cpu());
    CHECK_NEAR(max_diff(got, want), 0, tol);
}

/* loss = sum(tanh(x @ w + b)^2), computed on d (moving x, w, b there)
 * or, with d NULL, on the CPU. */
static oar_tensor *loss_on(oar_device *d, oar_tensor *x, oar_tensor *w, oar_tensor *b) {
    if (d) x = oar_tensor_to(x, d), w = oar_tensor_to(w, d), b = oar_tensor_to(b, d);
    oar_tensor *l = oar_sum(oar_square(oar_tanh(oar_add(oar_matmul(x, w), b))), 0, NULL, false);
    CHECK(l && oar_tensor_device(l) == (d ? d : oar_device_cpu()));
    return l;
}

static int64_t profiled(const char *name, oar_profiler_kind kind) {
    oar_profiler_stat rows[256];
    int n = oar_profiler_stats(rows, 256);
    for (int i = 0; i < n && i < 256; i++)
        if (rows[i].kind == kind && !strcmp(rows[i].name, name)) return rows[i].calls;
    return 0;
}

static void test_opencl(oar_device *cl) {
    oar_pool *p = oar_pool_push();
    oar_tensor *x = seq(5, 3, 0.1, 0.05), *w = seq(3, 4, 0.2, -0.1), *b = seq(1, 4, 0.1, 0.2);
    oar_tensor *leaves[3] = {x, w, b};
    for (int i = 0; i < 3; i++) CHECK(oar_tensor_set_requires_grad(leaves[i], true) == 0);

    /* first order: backward from opencl:0 into the CPU leaves */
    CHECK(oar_profiler_start() == 0);
    oar_tensor *dl = loss_on(cl, x, w, b);
    CHECK(oar_backward(dl, NULL) == 0);
    CHECK(oar_profiler_stop() == 0);
    oar_tensor *gd[3];
    for (int i = 0; i < 3; i++) {
        gd[i] = oar_tensor_grad(leaves[i]);
        CHECK(gd[i] && oar_tensor_device(gd[i]) == oar_device_cpu());
        oar_tensor_retain(gd[i]);
        oar_tensor_zero_grad(leaves[i]);
    }
    /* three moves there, three gradients moved back */
    CHECK(profiled("to_device", OAR_PROFILER_OP) == 6);
    CHECK(profiled("to_device", OAR_PROFILER_BACKWARD) == 3);
    CHECK(oar_backward(loss_on(NULL, x, w, b), NULL) == 0);
    for (int i = 0; i < 3; i++) {
        check_same(gd[i], oar_tensor_grad(leaves[i]), 1e-5);
        oar_tensor_release(gd[i]);
    }

    /* second order: H v for v = 1 through grad(grad) on each side */
    oar_tensor *gx[2] = {NULL, NULL}, *hv[2] = {NULL, NULL};
    for (int side = 0; side < 2; side++) {
        oar_tensor *l = loss_on(side ? NULL : cl, x, w, b);
        CHECK(oar_grad(1, &l, NULL, 1, &x, true, false, &gx[side]) == 0);
        CHECK(gx[side] && oar_tensor_requires_grad(gx[side]));
        CHECK(gx[side] && oar_tensor_device(gx[side]) == oar_device_cpu());
        oar_tensor *s = oar_sum(oar_mul(gx[side], seq(5, 3, 0.3, 0.1)), 0, NULL, false);
        CHECK(oar_grad(1, &s, NULL, 1, &x, false, false, &hv[side]) == 0);
    }
    check_same(gx[0], gx[1], 1e-5);
    check_same(hv[0], hv[1], 1e-4);
    test_nothing_recorded(cl);
    oar_pool_pop(p);
}

/* ---- opencl:0 in f64: gradcheck, nothing on the CPU ----------------------- */

/* x[] moved to the device ctx (an oar_device *), the loss moved back:
 * emb [7, 4], w1 [4, 5], b1 [5], gamma [5], beta [5], w2 [5, 3];
 * tokens [6] and classes [6] (i64, fixed). */
static oar_tensor *f_mlp(void *ctx, int n, oar_tensor *const *x) {
    oar_device *d = ctx;
    oar_tensor *v[8];
    for (int i = 0; i < n && i < 8; i++) v[i] = oar_tensor_to(x[i], d);
    oar_tensor *h = oar_add(oar_matmul(oar_embedding(v[0], v[6]), v[1]), v[2]);
    h = oar_gelu(oar_layer_norm(h, 1, v[3], v[4], 1e-5), false);
    oar_tensor *loss = oar_cross_entropy(oar_matmul(h, v[5]), v[7], NULL, -100, 0, OAR_REDUCTION_MEAN);
    if (loss && oar_tensor_device(loss) != d) return NULL;
    return oar_tensor_to(loss, oar_device_cpu());
}

/* x [2, 2, 6, 6], w [3, 2, 3, 3], b [3], wt [3, 2, 2, 2]: conv2d (padding
 * 1), tanh, 2x2 max_pool2d, conv_transpose2d (stride 2), softmax over the
 * flattened maps, weighted by a fixed ramp r [2, 72]. */
static oar_tensor *f_cnn(void *ctx, int n, oar_tensor *const *x) {
    oar_device *d = ctx;
    oar_tensor *v[5];
    for (int i = 0; i < n && i < 5; i++) v[i] = oar_tensor_to(x[i], d);
    const int64_t one[2] = {1, 1}, two[2] = {2, 2}, zero[2] = {0, 0}, flat[2] = {2, 72};
    oar_tensor *y = oar_tanh(oar_conv2d(v[0], v[1], v[2], one, one, one, 1));
    y = oar_max_pool2d(y, two, two, zero, one, false, NULL);
    y = oar_conv_transpose2d(y, v[3], NULL, two, zero, zero, one, 1); /* [2, 2, 6, 6] */
    oar_tensor *p = oar_softmax(oar_reshape(y, 2, flat), 1);
    oar_tensor *loss = oar_sum(oar_mul(p, v[4]), 0, NULL, false);
    if (loss && oar_tensor_device(loss) != d) return NULL;
    return oar_tensor_to(loss, oar_device_cpu());
}

/* f on the CPU and on d from the same f64 inputs: equal to 1e-12. */
static void check_loss_like_cpu(gc_fn f, oar_device *d, int n, const gc_input *in) {
    oar_pool *p = oar_pool_push();
    gc_opts o = {.seed = 3};
    oar_tensor *x[GC_MAX_IN];
    gc_state = 3;
    for (int i = 0; i < n; i++) x[i] = gc_make(&in[i], &o, false);
    oar_tensor *a = f(oar_device_cpu(), n, x), *b = f(d, n, x);
    CHECK(a && b);
    if (a && b) CHECK_NEAR(oar_tensor_item(b), oar_tensor_item(a), 1e-12 * (1 + fabs(oar_tensor_item(a))));
    oar_pool_pop(p);
}

static void test_opencl_f64(oar_device *cl) {
    int64_t tok[6] = {3, 0, 6, 3, 1, 5}, cls[6] = {2, 0, 1, 1, 0, 2};
    gc_input mlp[8] = {{.ndim = 2, .shape = {7, 4}, .lo = -1, .hi = 1},
                       {.ndim = 2, .shape = {4, 5}, .lo = -1, .hi = 1},
                       {.ndim = 1, .shape = {5}, .lo = -0.5, .hi = 0.5},
                       {.ndim = 1, .shape = {5}, .lo = 0.5, .hi = 1.5},
                       {.ndim = 1, .shape = {5}, .lo = -0.5, .hi = 0.5},
                       {.ndim = 2, .shape = {5, 3}, .lo = -1, .hi = 1},
                       {.dtype = OAR_I64, .ndim = 1, .shape = {6}, .data = tok},
                       {.dtype = OAR_I64, .ndim = 1, .shape = {6}, .data = cls}};
    double ramp[144];
    for (int i = 0; i < 144; i++) ramp[i] = (double)(i % 13) / 13.0 - 0.4;
    gc_input cnn[5] = {{.ndim = 4, .shape = {2, 2, 6, 6}, .lo = -1, .hi = 1},
                       {.ndim = 4, .shape = {3, 2, 3, 3}, .lo = -0.5, .hi = 0.5},
                       {.ndim = 1, .shape = {3}, .lo = -0.5, .hi = 0.5},
                       {.ndim = 4, .shape = {3, 2, 2, 2}, .lo = -1, .hi = 1},
                       {.dtype = OAR_F64, .ndim = 2, .shape = {2, 72}, .data = ramp}};
    oar_device_fallback_reset();
    check_loss_like_cpu(f_mlp, cl, 8, mlp);
    check_loss_like_cpu(f_cnn, cl, 5, cnn);
    gc_opts o = {.seed = 11, .contiguous_only = true};
    CHECK(gradcheck("opencl f64 MLP (embedding, layer_norm, gelu, cross entropy)", f_mlp, cl, 8, mlp, &o));
    CHECK(gradcheck("opencl f64 CNN (conv2d, max_pool2d, conv_transpose2d, softmax)", f_cnn, cl, 5, cnn, &o));
    int64_t fb = oar_device_fallback_count();
    if (fb) fprintf(stderr, "%lld op calls in f64 ran on the CPU instead of opencl:0\n", (long long)fb);
    CHECK(fb == 0);
}

int main(int argc, char **argv) {
    /* the mock (tests/devices/plugins) and, where built, the opencl plugin */
    char path[2048];
#ifdef OAR_PLUGIN_BUILD_DIR
    snprintf(path, sizeof path, "%s:%s", OAR_TEST_PLUGIN_DIR, OAR_PLUGIN_BUILD_DIR);
#else
    snprintf(path, sizeof path, "%s", OAR_TEST_PLUGIN_DIR);
#endif
    setenv("OAR_PLUGIN_PATH", path, 1);
    setenv("OAR_PLUGIN_NO_INSTALL_DIR", "1", 1);
    if (argc < 2 || strcmp(argv[1], "--opencl")) {
        RUN(test_mock);
        return test_summary();
    }
    oar_device *cl = opencl_device_or_skip(); /* prints why when there is none */
    if (!cl) return TEST_SKIP;
    test_current = "test_opencl";
    oar_clear_error();
    test_opencl(cl);
    test_current = "test_opencl_f64";
    test_opencl_f64(cl);
    return test_summary();
}

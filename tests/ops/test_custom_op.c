/* Custom ops and custom autograd functions (include/oar/custom.h): eager
 * values against closed forms; gradients against float64 central
 * differences, first and second order, including a gradient that is
 * itself a custom op and an op with two outputs; trace + executor and the
 * graph's backward against eager; a saved graph loaded by the predictor in
 * another process, only after the library that registers its op is loaded
 * (tests/ops/custom_lib.c); a straight-through estimator written as a
 * custom autograd function, eager and traced; CSE leaving random custom
 * ops apart; ONNX export refusing them by name; and the failure paths. */
#include "test.h"
#include "gradcheck.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const oar_custom_op *swish_op(void) {
    static const oar_custom_op *op;
    if (!op && oar_custom_load_library(OAR_CUSTOM_LIB) == 0) op = oar_custom_find("test.swish");
    return op;
}

static double swish(double x) { return x / (1 + exp(-x)); }

/* ---- ops defined here ------------------------------------------------------- */

/* t.cube: y = x^3 (f64); its gradient is the custom op t.cube_grad. */
static const oar_custom_op *cube_op, *cube_grad_op, *sincos_op, *affine_op, *ste_op, *noisy_op, *plain_op;

static int cube_cpu(const oar_custom_kernel_args *k) {
    const double *x = oar_tensor_data(k->in[0]);
    double *y = oar_tensor_data(k->out[0]);
    for (int64_t i = 0; i < oar_tensor_numel(k->in[0]); i++) y[i] = x[i] * x[i] * x[i];
    return 0;
}
static int cube_backward(const oar_custom_grad_args *g) {
    oar_tensor *in[2] = {g->in[0], g->grad_out[0]};
    g->grad_in[0] = oar_custom_call1(cube_grad_op, 2, in, NULL);
    return g->grad_in[0] ? 0 : -1;
}
/* t.cube_grad(x, g) = 3 x^2 g; its own gradient is written with ops. */
static int cube_grad_cpu(const oar_custom_kernel_args *k) {
    const double *x = oar_tensor_data(k->in[0]), *gy = oar_tensor_data(k->in[1]);
    double *y = oar_tensor_data(k->out[0]);
    for (int64_t i = 0; i < oar_tensor_numel(k->in[0]); i++) y[i] = 3 * x[i] * x[i] * gy[i];
    return 0;
}
static int cube_grad_backward(const oar_custom_grad_args *g) {
    oar_tensor *x = g->in[0], *gy = g->in[1], *w = g->grad_out[0];
    if (g->needs[0]) g->grad_in[0] = oar_mul(oar_mul_scalar(oar_mul(x, gy), 6), w);
    if (g->needs[1]) g->grad_in[1] = oar_mul(oar_mul_scalar(oar_square(x), 3), w);
    return 0;
}

/* t.sincos: two outputs, sin x and cos x. */
static int sincos_cpu(const oar_custom_kernel_args *k) {
    const double *x = oar_tensor_data(k->in[0]);
    double *s = oar_tensor_data(k->out[0]), *c = oar_tensor_data(k->out[1]);
    for (int64_t i = 0; i < oar_tensor_numel(k->in[0]); i++) s[i] = sin(x[i]), c[i] = cos(x[i]);
    return 0;
}
static int sincos_backward(const oar_custom_grad_args *g) {
    oar_tensor *x = g->in[0];
    g->grad_in[0] = oar_sub(oar_mul(g->grad_out[0], oar_cos(x)), oar_mul(g->grad_out[1], oar_sin(x)));
    return 0;
}

/* t.affine: y = x * f[0] + i[0], attributes of the call; a rule that wants them. */
static int affine_rule(void *u, int n_in, const oar_custom_meta *in, const oar_custom_attrs *a,
                       oar_custom_meta *out) {
    if (a->ni != 1 || a->nf != 1)
        return oar_set_error(OAR_ERR_INVALID, "wants 1 integer and 1 float attribute, got %d and %d", a->ni, a->nf);
    return 0;
}
static int affine_cpu(const oar_custom_kernel_args *k) {
    const double *x = oar_tensor_data(k->in[0]);
    double *y = oar_tensor_data(k->out[0]);
    for (int64_t i = 0; i < oar_tensor_numel(k->in[0]); i++) y[i] = x[i] * k->attrs->f[0] + (double)k->attrs->i[0];
    return 0;
}
static int affine_backward(const oar_custom_grad_args *g) {
    g->grad_in[0] = oar_mul_scalar(g->grad_out[0], g->attrs->f[0]);
    return 0;
}

/* t.ste: a custom autograd function, forward round(x) (ops), backward the
 * identity: a straight-through estimator, where autodiff of round gives 0. */
static bool forward_saw_grad = true;
static int ste_forward(void *u, int n_in, oar_tensor *const *in, const oar_custom_attrs *a, oar_tensor **out) {
    forward_saw_grad = oar_grad_enabled();
    out[0] = oar_round(in[0]);
    return out[0] ? 0 : -1;
}
static int ste_backward(const oar_custom_grad_args *g) {
    g->grad_in[0] = oar_mul_scalar(g->grad_out[0], 1.0);
    return 0;
}

/* t.noisy: flagged random (CSE keeps two calls apart); t.plain: the same, pure. */
static int copy_cpu(const oar_custom_kernel_args *k) {
    memcpy(oar_tensor_data(k->out[0]), oar_tensor_data(k->in[0]),
           (size_t)oar_tensor_numel(k->in[0]) * oar_dtype_size(oar_tensor_dtype(k->in[0])));
    return 0;
}

static void register_ops(void) {
    if (cube_op) return;
    cube_op = oar_custom_register(&(oar_custom_op_desc){
        .name = "t.cube", .n_in = 1, .n_out = 1, .kernels = {{"cpu", cube_cpu}}, .grad = cube_backward});
    cube_grad_op = oar_custom_register(&(oar_custom_op_desc){
        .name = "t.cube_grad", .n_in = 2, .n_out = 1, .kernels = {{"cpu", cube_grad_cpu}},
        .grad = cube_grad_backward});
    sincos_op = oar_custom_register(&(oar_custom_op_desc){
        .name = "t.sincos", .n_in = 1, .n_out = 2, .kernels = {{"cpu", sincos_cpu}}, .grad = sincos_backward});
    affine_op = oar_custom_register(&(oar_custom_op_desc){
        .name = "t.affine", .n_in = 1, .n_out = 1, .infer = affine_rule, .kernels = {{"cpu", affine_cpu}},
        .grad = affine_backward});
    ste_op = oar_custom_register(&(oar_custom_op_desc){
        .name = "t.ste", .n_in = 1, .n_out = 1, .forward = ste_forward, .grad = ste_backward});
    noisy_op = oar_custom_register(&(oar_custom_op_desc){
        .name = "t.noisy", .n_in = 1, .n_out = 1, .flags = OAR_CUSTOM_RANDOM, .kernels = {{"cpu", copy_cpu}}});
    plain_op = oar_custom_register(&(oar_custom_op_desc){
        .name = "t.plain", .n_in = 1, .n_out = 1, .kernels = {{"cpu", copy_cpu}}});
}

static oar_tensor *vec(const double *v, int64_t n) { return oar_tensor_from_data(v, OAR_F64, 1, &n); }

/* ---- eager ----------------------------------------------------------------- */

static void test_eager_values(void) {
    const oar_custom_op *op = swish_op();
    CHECK(op != NULL);
    if (!op) return;
    CHECK(!strcmp(oar_custom_name(op), "test.swish"));
    CHECK(oar_custom_num_inputs(op) == 1 && oar_custom_num_outputs(op) == 1);
    oar_pool *p = oar_pool_push();
    const double xs[6] = {-3, -0.5, 0, 0.25, 1, 4};
    double want[6];
    for (int i = 0; i < 6; i++) want[i] = swish(xs[i]);
    oar_tensor *x = vec(xs, 6);
    CHECK_VALUES(oar_custom_call1(op, 1, &x, NULL), want, 6, 1e-14);
    oar_tensor *x32 = oar_cast(x, OAR_F32), *y32 = oar_custom_call1(op, 1, &x32, NULL);
    CHECK(oar_tensor_dtype(y32) == OAR_F32);
    CHECK_VALUES(y32, want, 6, 1e-6);
    /* a strided input reaches the kernel as a contiguous copy */
    int64_t sh[2] = {2, 3};
    oar_tensor *xt = oar_transpose(oar_reshape(x, 2, sh), 0, 1);
    const double want_t[6] = {want[0], want[3], want[1], want[4], want[2], want[5]};
    CHECK(!oar_tensor_is_contiguous(xt));
    CHECK_VALUES(oar_custom_call1(op, 1, &xt, NULL), want_t, 6, 1e-14);

    const double a[3] = {1, -2, 0.5}, want_aff[3] = {1 * 2.5 + 3, -2 * 2.5 + 3, 0.5 * 2.5 + 3};
    oar_tensor *xa = vec(a, 3);
    oar_custom_attrs at = {.ni = 1, .nf = 1, .i = {3}, .f = {2.5}};
    CHECK_VALUES(oar_custom_call1(affine_op, 1, &xa, &at), want_aff, 3, 1e-14);

    oar_tensor *outs[2];
    CHECK(oar_custom_call(sincos_op, 1, &xa, NULL, 2, outs) == 0);
    const double ws[3] = {sin(1), sin(-2), sin(0.5)}, wc[3] = {cos(1), cos(-2), cos(0.5)};
    CHECK_VALUES(outs[0], ws, 3, 1e-14);
    CHECK_VALUES(outs[1], wc, 3, 1e-14);
    oar_pool_pop(p);
}

/* ---- gradients ---------------------------------------------------------------- */

static oar_tensor *f_swish(void *ctx, int n, oar_tensor *const *x) { return oar_custom_call1(swish_op(), 1, x, NULL); }
static oar_tensor *f_cube(void *ctx, int n, oar_tensor *const *x) { return oar_custom_call1(cube_op, 1, x, NULL); }
static oar_tensor *f_cube_grad(void *ctx, int n, oar_tensor *const *x) { return oar_custom_call1(cube_grad_op, 2, x, NULL); }
static oar_tensor *f_sincos(void *ctx, int n, oar_tensor *const *x) {
    oar_tensor *o[2];
    if (oar_custom_call(sincos_op, 1, x, NULL, 2, o)) return NULL;
    return ctx ? o[0] : oar_mul(o[0], o[1]); /* ctx: output 1 unused, its gradient zero */
}
static oar_tensor *f_affine(void *ctx, int n, oar_tensor *const *x) {
    oar_custom_attrs at = {.ni = 1, .nf = 1, .i = {-1}, .f = {0.75}};
    return oar_square(oar_custom_call1(affine_op, 1, x, &at));
}

static void test_gradients(void) {
    if (!swish_op()) return;
    gc_input in1 = {.dtype = OAR_F64, .ndim = 2, .shape = {3, 4}};
    gradcheck("test.swish", f_swish, NULL, 1, &in1, NULL);
    /* a gradient that is a custom op, whose gradient is written with ops */
    gradcheck("t.cube", f_cube, NULL, 1, &in1, NULL);
    gc_input in2[2] = {{.dtype = OAR_F64, .ndim = 1, .shape = {5}}, {.dtype = OAR_F64, .ndim = 1, .shape = {5}}};
    gradcheck("t.cube_grad", f_cube_grad, NULL, 2, in2, NULL);
    gradcheck("t.sincos both outputs", f_sincos, NULL, 1, &in1, NULL);
    gradcheck("t.sincos output 0 only", f_sincos, (void *)1, 1, &in1, NULL);
    gradcheck("t.affine", f_affine, NULL, 1, &in1, NULL);

    /* an op registered without a gradient: zero */
    oar_pool *p = oar_pool_push();
    const double v[2] = {1, 2};
    oar_tensor *x = vec(v, 2);
    oar_tensor_set_requires_grad(x, true);
    CHECK(oar_backward(oar_sum(oar_custom_call1(plain_op, 1, &x, NULL), 0, NULL, false), NULL) == 0);
    oar_tensor *gx = oar_tensor_grad(x);
    CHECK(gx == NULL || (oar_tensor_item(oar_sum(oar_abs(gx), 0, NULL, false)) == 0));
    oar_pool_pop(p);
}

/* ---- traced -------------------------------------------------------------------- */

static int traced_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    oar_tensor *s = oar_custom_call1(swish_op(), 1, in, NULL), *c = oar_custom_call1(cube_op, 1, in, NULL);
    oar_tensor *o[2];
    if (oar_custom_call(sincos_op, 1, in, NULL, 2, o)) return -1;
    out[0] = oar_add(oar_add(oar_mul_scalar(s, 2), c), o[1]);
    return out[0] ? 0 : -1;
}

static void test_trace_executor(void) {
    if (!swish_op()) return;
    oar_pool *p = oar_pool_push();
    oar_graph_input_spec spec = {.name = "x", .dtype = OAR_F64, .ndim = 1, .shape = {-1}};
    oar_graph *g = oar_trace(traced_fn, NULL, 1, &spec, 1, NULL);
    CHECK(g != NULL);
    if (!g) {
        fprintf(stderr, "trace: %s\n", oar_last_error());
        oar_pool_pop(p);
        return;
    }
    CHECK(oar_graph_count_op(g, "custom") == 3);
    CHECK(oar_graph_append_backward(g, 0, 1, (int[]){0}) == 1);
    CHECK(oar_graph_optimize(g, OAR_PASSES_INFERENCE, 0) >= 0);
    const double xs[5] = {-1.5, -0.2, 0.3, 0.9, 2};
    oar_tensor *x = vec(xs, 5);
    /* eager reference, gradient by autograd */
    oar_tensor *xr = oar_detach(x);
    oar_tensor_set_requires_grad(xr, true);
    oar_tensor *ye[1];
    CHECK(traced_fn(NULL, &xr, ye) == 0);
    CHECK(oar_backward(oar_sum(ye[0], 0, NULL, false), NULL) == 0);
    double want_y[5], want_g[5];
    for (int i = 0; i < 5; i++) {
        double t = xs[i], s = 1 / (1 + exp(-t));
        want_y[i] = 2 * swish(t) + t * t * t + cos(t);
        want_g[i] = 2 * (s + t * s * (1 - s)) + 3 * t * t - sin(t);
    }
    CHECK_VALUES(ye[0], want_y, 5, 1e-12);
    CHECK_VALUES(oar_tensor_grad(xr), want_g, 5, 1e-12);
    oar_executor *ex = oar_executor_new(g);
    oar_tensor *out[2] = {0};
    CHECK(ex && oar_executor_run(ex, &x, out) == 0);
    if (out[0]) CHECK_VALUES(out[0], want_y, 5, 1e-12);
    if (out[1]) CHECK_VALUES(out[1], want_g, 5, 1e-12);
    /* a second run with another length: the rules rerun */
    oar_tensor *x2 = vec(xs, 3);
    CHECK(ex && oar_executor_run(ex, &x2, out) == 0);
    if (out[0]) CHECK_VALUES(out[0], want_y, 3, 1e-12);
    oar_executor_free(ex);
    oar_graph_free(g);
    oar_pool_pop(p);
}

/* ---- saved, loaded by the predictor in another process -------------------------- */

static int swish_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    out[0] = oar_custom_call1(swish_op(), 1, in, NULL);
    return out[0] ? 0 : -1;
}

static const double predict_x[4] = {-2, -0.5, 0.5, 3};

/* The child: the predictor fails until the library is loaded, then runs.
 * Exit status: the number of failed checks. */
static int predict_child(const char *dir) {
    oar_predictor_config cfg = {.model_dir = dir, .optimize = true, .no_compile = true};
    CHECK_FAILS(oar_predictor_create(&cfg), "custom op \"test.swish\", which is not registered");
    CHECK(strstr(oar_last_error(), "oar_custom_load_library") != NULL);
    CHECK(oar_custom_load_library(OAR_CUSTOM_LIB) == 0);
    oar_predictor *pr = oar_predictor_create(&cfg);
    CHECK(pr != NULL);
    if (!pr) fprintf(stderr, "predictor: %s\n", oar_last_error());
    oar_pool *p = oar_pool_push();
    oar_tensor *x = oar_cast(vec(predict_x, 4), OAR_F32), *y = NULL;
    CHECK(pr && oar_predictor_run(pr, &x, &y) == 0);
    double want[4];
    for (int i = 0; i < 4; i++) want[i] = swish(predict_x[i]);
    if (y) CHECK_VALUES(y, want, 4, 1e-6);
    oar_tensor_release(y);
    oar_pool_pop(p);
    oar_predictor_free(pr);
    printf("child: %d passed, %d failed\n", test_passed, test_failed);
    return test_failed;
}

static void test_save_and_predict(void) {
    if (!swish_op()) return;
    char dir[] = "/tmp/oar_custom_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char model[sizeof dir + 8];
    snprintf(model, sizeof model, "%s/model", dir);
    oar_graph_input_spec spec = {.name = "x", .dtype = OAR_F32, .ndim = 1, .shape = {-1}};
    oar_graph *g = oar_trace(swish_fn, NULL, 1, &spec, 1, NULL);
    CHECK(g && oar_graph_save(g, model) == 0);
    oar_graph_free(g);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        execl("/proc/self/exe", "test_custom_op", "--predict", model, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    char cmd[sizeof model + 16];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

/* ---- a custom autograd function: the straight-through estimator ------------------ */

static int ste_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    out[0] = oar_mul(oar_custom_call1(ste_op, 1, in, NULL), in[0]); /* round(x) * x */
    return out[0] ? 0 : -1;
}

static void test_autograd_function(void) {
    oar_pool *p = oar_pool_push();
    const double xs[4] = {-1.7, -0.2, 0.6, 2.4};
    double want_y[4], want_g[4];
    for (int i = 0; i < 4; i++) {
        double r = nearbyint(xs[i]);
        want_y[i] = r * xs[i];
        want_g[i] = xs[i] + r; /* d/dx [ste(x) x] with d ste_op/dx = 1 */
    }
    oar_tensor *x = vec(xs, 4);
    oar_tensor_set_requires_grad(x, true);
    oar_tensor *y[1];
    CHECK(ste_fn(NULL, &x, y) == 0);
    CHECK(!forward_saw_grad); /* the forward ran with grad off */
    CHECK_VALUES(y[0], want_y, 4, 1e-14);
    CHECK(oar_backward(oar_sum(y[0], 0, NULL, false), NULL) == 0);
    CHECK_VALUES(oar_tensor_grad(x), want_g, 4, 1e-14);
    /* autodiff of round alone would give x's gradient round(x) only */
    oar_tensor *xd = oar_detach(x), *g1 = NULL;
    oar_tensor_set_requires_grad(xd, true);
    oar_tensor *yd = oar_sum(oar_mul(oar_round(xd), xd), 0, NULL, false);
    CHECK(oar_grad(1, &yd, NULL, 1, &xd, false, false, &g1) == 0);
    CHECK(g1 && fabs(oar_tensor_item(oar_sum(oar_sub(g1, oar_tensor_grad(x)), 0, NULL, false))) > 1);
    /* second order through the backward written with ops: d2/dx2 = 2 */
    oar_tensor *xs2 = oar_detach(x), *gg = NULL, *h = NULL;
    oar_tensor_set_requires_grad(xs2, true);
    oar_tensor *y2;
    ste_fn(NULL, &xs2, &y2);
    oar_tensor *l2 = oar_sum(y2, 0, NULL, false);
    CHECK(oar_grad(1, &l2, NULL, 1, &xs2, true, false, &gg) == 0);
    oar_tensor *l3 = gg ? oar_sum(gg, 0, NULL, false) : NULL;
    CHECK(l3 && oar_grad(1, &l3, NULL, 1, &xs2, false, false, &h) == 0);
    const double twos[4] = {2, 2, 2, 2};
    if (h) CHECK_VALUES(h, twos, 4, 1e-14);

    /* traced: one node; the executor runs the forward, the graph's backward the STE */
    oar_graph_input_spec spec = {.name = "x", .dtype = OAR_F64, .ndim = 1, .shape = {4}};
    oar_graph *g = oar_trace(ste_fn, NULL, 1, &spec, 1, NULL);
    CHECK(g && oar_graph_count_op(g, "custom") == 1 && oar_graph_count_op(g, "round") == 0);
    CHECK(g && oar_graph_append_backward(g, 0, 1, (int[]){0}) == 1);
    oar_executor *ex = g ? oar_executor_new(g) : NULL;
    oar_tensor *xc = oar_detach(x), *out[2] = {0};
    CHECK(ex && oar_executor_run(ex, &xc, out) == 0);
    if (out[0]) CHECK_VALUES(out[0], want_y, 4, 1e-14);
    if (out[1]) CHECK_VALUES(out[1], want_g, 4, 1e-14);
    oar_executor_free(ex);
    oar_graph_free(g);
    oar_pool_pop(p);
}

/* ---- graph passes, ONNX -------------------------------------------------------- */

static int twice_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    const oar_custom_op *op = ctx;
    out[0] = oar_add(oar_custom_call1(op, 1, in, NULL), oar_custom_call1(op, 1, in, NULL));
    return out[0] ? 0 : -1;
}

static void test_cse_and_onnx(void) {
    oar_graph_input_spec spec = {.name = "x", .dtype = OAR_F64, .ndim = 1, .shape = {3}};
    oar_graph *gp = oar_trace(twice_fn, (void *)plain_op, 1, &spec, 1, NULL);
    oar_graph *gn = oar_trace(twice_fn, (void *)noisy_op, 1, &spec, 1, NULL);
    CHECK(gp && gn);
    if (!gp || !gn) return;
    CHECK(oar_graph_run_pass(gp, "cse") >= 0 && oar_graph_run_pass(gn, "cse") >= 0);
    CHECK(oar_graph_count_op(gp, "custom") == 1); /* a pure op: the two calls merge */
    CHECK(oar_graph_count_op(gn, "custom") == 2); /* a random one: both stay */
#ifndef OAR_TEST_NO_ONNX
    CHECK_STATUS_FAILS(oar_onnx_export(gp, "/tmp/oar_custom_unused.onnx", NULL), "custom op \"t.plain\"");
    CHECK(access("/tmp/oar_custom_unused.onnx", F_OK) != 0);
#endif
    oar_graph_free(gp);
    oar_graph_free(gn);
}

/* ---- failure paths -------------------------------------------------------------- */

static int failing_rule(void *u, int n_in, const oar_custom_meta *in, const oar_custom_attrs *a, oar_custom_meta *out) {
    return -1; /* and no message */
}
static int failing_kernel(const oar_custom_kernel_args *k) {
    return oar_set_error(OAR_ERR_UNSUPPORTED, "the kernel gave up on %lld elements",
                         (long long)oar_tensor_numel(k->in[0]));
}
static int wrong_forward(void *u, int n_in, oar_tensor *const *in, const oar_custom_attrs *a, oar_tensor **out) {
    out[0] = oar_sum(in[0], 0, NULL, false); /* 0-d, where the rule says in[0]'s shape */
    return 0;
}
static int wrong_grad(const oar_custom_grad_args *g) {
    g->grad_in[0] = oar_sum(g->grad_out[0], 0, NULL, false);
    return 0;
}

static void test_failures(void) {
    oar_pool *p = oar_pool_push();
    CHECK_FAILS(oar_custom_register(NULL), "descriptor is NULL");
    CHECK_FAILS(oar_custom_register(&(oar_custom_op_desc){.n_in = 1, .n_out = 1, .kernels = {{"cpu", copy_cpu}}}),
                "name is NULL");
    CHECK_FAILS(oar_custom_register(&(oar_custom_op_desc){.name = "t.plain", .n_in = 1, .n_out = 1,
                                                          .kernels = {{"cpu", copy_cpu}}}),
                "\"t.plain\" is already registered");
    CHECK_FAILS(oar_custom_register(&(oar_custom_op_desc){.name = "t.bad", .n_in = 1, .n_out = 0,
                                                          .kernels = {{"cpu", copy_cpu}}}),
                "n_out is 0");
    CHECK_FAILS(oar_custom_register(&(oar_custom_op_desc){.name = "t.bad", .n_in = 1, .n_out = 1}),
                "neither kernels nor a forward");
    CHECK_FAILS(oar_custom_register(&(oar_custom_op_desc){.name = "t.bad", .n_in = 1, .n_out = 2,
                                                          .flags = OAR_CUSTOM_ELEMENTWISE,
                                                          .kernels = {{"cpu", copy_cpu}}}),
                "elementwise op has one output");
    CHECK_FAILS(oar_custom_find("t.nothing"), "no custom op named \"t.nothing\"");
    CHECK(oar_custom_find("t.bad") == NULL); /* nothing failed was registered */

    const double v[3] = {1, 2, 3};
    oar_tensor *x = vec(v, 3), *two[2] = {x, x}, *out[2];
    CHECK_STATUS_FAILS(oar_custom_call(NULL, 1, &x, NULL, 1, out), "op is NULL");
    CHECK_FAILS(oar_custom_call1(plain_op, 2, two, NULL), "t.plain: got 2 inputs, expected 1");
    CHECK_STATUS_FAILS(oar_custom_call(plain_op, 1, &x, NULL, 2, out), "t.plain: n_out does not match");
    CHECK_FAILS(oar_custom_call1(sincos_op, 1, &x, NULL), "oar_custom_call1 on an op with 2 outputs");
    CHECK_FAILS(oar_custom_call1(affine_op, 1, &x, NULL), "t.affine: wants 1 integer and 1 float attribute");
    CHECK_FAILS(oar_custom_call1(affine_op, 1, &x, &(oar_custom_attrs){.ni = 99}), "99 integer");
    oar_tensor *xnull = NULL;
    CHECK_FAILS(oar_custom_call1(plain_op, 1, &xnull, NULL), "input 0 is NULL");
    if (swish_op()) { /* the user's rule's message, prefixed with the op's name */
        oar_tensor *xi = oar_arange(0, 3, 1, OAR_I64);
        CHECK_FAILS(oar_custom_call1(swish_op(), 1, &xi, NULL), "test.swish: x is int64; float32 or float64");
    }
    const oar_custom_op *silent = oar_custom_register(&(oar_custom_op_desc){
        .name = "t.silent", .n_in = 1, .n_out = 1, .infer = failing_rule, .kernels = {{"cpu", copy_cpu}}});
    CHECK_FAILS(oar_custom_call1(silent, 1, &x, NULL), "t.silent: the shape rule failed (status -1) without a message");
    const oar_custom_op *gpu_only = oar_custom_register(&(oar_custom_op_desc){
        .name = "t.gpu_only", .n_in = 1, .n_out = 1, .kernels = {{"cuda", copy_cpu}}});
    CHECK_FAILS(oar_custom_call1(gpu_only, 1, &x, NULL), "t.gpu_only: no kernel for device cpu (type cpu); it has kernels for: cuda");
    const oar_custom_op *gives_up = oar_custom_register(&(oar_custom_op_desc){
        .name = "t.gives_up", .n_in = 1, .n_out = 1, .kernels = {{"cpu", failing_kernel}}});
    CHECK_FAILS(oar_custom_call1(gives_up, 1, &x, NULL), "t.gives_up: the kernel gave up on 3 elements");
    CHECK(strstr(oar_last_error(), "t.gives_up") && oar_custom_call1(gives_up, 1, &x, NULL) == NULL);
    const oar_custom_op *wrong_fw = oar_custom_register(&(oar_custom_op_desc){
        .name = "t.wrong_forward", .n_in = 1, .n_out = 1, .forward = wrong_forward});
    CHECK_FAILS(oar_custom_call1(wrong_fw, 1, &x, NULL), "t.wrong_forward: the forward gave output 0 as float64 []");
    const oar_custom_op *wrong_g = oar_custom_register(&(oar_custom_op_desc){
        .name = "t.wrong_grad", .n_in = 1, .n_out = 1, .kernels = {{"cpu", copy_cpu}}, .grad = wrong_grad});
    oar_tensor *xg = oar_detach(x);
    oar_tensor_set_requires_grad(xg, true);
    oar_tensor *yg = oar_sum(oar_custom_call1(wrong_g, 1, &xg, NULL), 0, NULL, false);
    CHECK_STATUS_FAILS(oar_backward(yg, NULL), "t.wrong_grad: the gradient gave a float64 [] gradient for input 0");

    CHECK_STATUS_FAILS(oar_custom_load_library(NULL), "path is NULL");
    CHECK_STATUS_FAILS(oar_custom_load_library("/nonexistent/libnothing.so"), "cannot open /nonexistent/libnothing.so");
    CHECK_STATUS_FAILS(oar_custom_load_library(OAR_CUSTOM_NOENTRY), "has no entry point oar_custom_library_init");
    oar_pool_pop(p);
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--predict")) return predict_child(argv[2]) ? 1 : 0;
    register_ops();
    CHECK(cube_op && cube_grad_op && sincos_op && affine_op && ste_op && noisy_op && plain_op);
    RUN(test_eager_values);
    RUN(test_gradients);
    RUN(test_trace_executor);
    RUN(test_save_and_predict);
    RUN(test_autograd_function);
    RUN(test_cse_and_onnx);
    RUN(test_failures);
    return test_summary();
}

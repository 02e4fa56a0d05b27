/* Graphs on opencl:0: the executor runs a graph whose inputs live on the
 * device (arena, constants and kernels there; ops the device lacks run on
 * the CPU with copies), unfused and compiled into OpenCL C kernels:
 * - a traced MLP forward + backward + SGD step agrees with the CPU
 *   executor, unfused and compiled, and compiled with eager CPU steps;
 * - the compiled graph launches as many kernels as the CPU compiled one;
 * - random graphs (the CPU fuzzer's generator, fewer of them) compiled on
 *   OpenCL agree with the CPU unfused executor to 1e-5;
 * - generated source that does not build reports the OpenCL build log
 *   through oar_last_error() and the executor falls back to unfused;
 * - an f64 graph (matmul, tanh, softmax, sum) runs on opencl:0 unfused
 *   (the plugin's f64 kernels) and compiled, equal to the CPU to 1e-12,
 *   with no op on the CPU.
 * Skipped (exit 77) where no OpenCL device exists. */
#include "compiler/fuzz_graphs.h"

#include "compiler/compiler.h"

#include "alloc_fail_loop.h"
#include "opencl_common.h"

static oar_device *dev;

static int mlp_loss(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    oar_module *m = ctx;
    out[0] = oar_cross_entropy(oar_module_forward(m, in[0]), in[1], NULL, -100, 0.0, OAR_REDUCTION_MEAN);
    return out[0] ? 0 : -1;
}

static oar_graph_input_spec spec_of(const char *name, oar_tensor *t) {
    oar_graph_input_spec s = {.name = name, .dtype = oar_tensor_dtype(t), .ndim = oar_tensor_ndim(t)};
    for (int d = 0; d < s.ndim; d++) s.shape[d] = oar_tensor_shape(t)[d];
    return s;
}

/* The MLP train step as a graph: inputs x, labels, then the parameters;
 * outputs the loss, the gradients and the updated parameters. */
static oar_graph *mlp_step_graph(oar_module *m, oar_tensor *x, oar_tensor *y, int *np, oar_tensor **params) {
    *np = oar_module_parameters(m, params, 16);
    oar_graph_input_spec specs[2] = {spec_of("x", x), spec_of("t", y)};
    oar_graph *g = oar_trace(mlp_loss, m, 2, specs, 1, &(oar_trace_options){.module = m, .params_as_inputs = true});
    CHECK(g != NULL);
    if (!g) return NULL;
    int wrt[16];
    for (int k = 0; k < *np; k++) wrt[k] = 2 + k;
    CHECK(oar_graph_append_backward(g, 0, *np, wrt) == 1);
    CHECK(oar_graph_append_sgd(g, 0.1) == *np);
    CHECK(oar_graph_optimize(g, OAR_PASSES_TRAINING, 0) == 0);
    return g;
}

/* Largest relative difference between a CPU and a device output. */
static double rel_diff(oar_tensor *a, oar_tensor *b) {
    if (!a || !b || oar_tensor_numel(a) != oar_tensor_numel(b)) return INFINITY;
    double *x = test_values(a), *y = test_values(b), m = 0;
    for (int64_t i = 0; x && y && i < oar_tensor_numel(a); i++) {
        double d = fabs(x[i] - y[i]) / fmax(1.0, fabs(x[i]));
        if (d > m || isnan(d)) m = isnan(d) ? INFINITY : d;
    }
    if (!x || !y) m = INFINITY;
    free(x);
    free(y);
    return m;
}

/* make_mlp's forward traced over a [4, 8] input x (made here). */
static oar_graph *small_mlp(uint64_t seed, oar_module **m, oar_tensor **x) {
    oar_manual_seed(seed);
    *m = make_mlp();
    *x = oar_randn(OAR_F32, 2, (int64_t[]){4, 8});
    oar_graph_input_spec s = spec_of("x", *x);
    oar_graph *g = oar_trace_module(*m, &s);
    CHECK(g != NULL);
    return g;
}

static void run_mlp(bool compile) {
    oar_pool *p = oar_pool_push();
    oar_manual_seed(21);
    oar_module *m = oar_sequential_new(5, (oar_module *[]){oar_linear_new(12, 32, true), oar_relu_new(),
                                                           oar_linear_new(32, 16, true), oar_tanh_new(),
                                                           oar_linear_new(16, 5, true)});
    oar_tensor *x = oar_randn(OAR_F32, 2, (int64_t[]){24, 12});
    oar_tensor *y = oar_randint(0, 5, OAR_I64, 1, (int64_t[]){24});
    oar_tensor *params[16];
    int np = 0;
    oar_graph *g = mlp_step_graph(m, x, y, &np, params);
    if (!g) {
        oar_pool_pop(p);
        return;
    }
    oar_executor *cpu = oar_executor_new(g), *ocl = oar_executor_new(g);
    if (compile) {
        CHECK(oar_executor_compile(cpu) == 0);
        CHECK(oar_executor_compile(ocl) == 0);
    }
    oar_tensor *cin[18] = {x, y}, *din[18], *cout[40], *dout[40];
    din[0] = oar_tensor_to(x, dev);
    din[1] = oar_tensor_to(y, dev);
    for (int k = 0; k < np; k++) {
        cin[2 + k] = oar_clone(params[k]);
        din[2 + k] = oar_tensor_to(params[k], dev);
    }
    int n_out = oar_graph_num_outputs(g);
    double worst = 0, eager_worst = 0;
    for (int step = 0; step < 3; step++) {
        CHECK(oar_executor_run(cpu, cin, cout) == 0);
        CHECK(oar_executor_run(ocl, din, dout) == 0);
        for (int j = 0; j < n_out; j++) {
            CHECK(oar_tensor_device(dout[j]) == dev);
            worst = fmax(worst, rel_diff(cout[j], dout[j]));
        }
        /* eager CPU: the same step by autograd */
        oar_module_zero_grad(m);
        oar_tensor *loss = NULL;
        CHECK(mlp_loss(m, (oar_tensor *[]){x, y}, &loss) == 0);
        CHECK(oar_backward(loss, NULL) == 0);
        eager_worst = fmax(eager_worst, rel_diff(loss, dout[0]));
        for (int k = 0; k < np; k++) eager_worst = fmax(eager_worst, rel_diff(oar_tensor_grad(params[k]), dout[1 + k]));
        oar_no_grad_push();
        for (int k = 0; k < np; k++)
            oar_copy_(params[k], oar_sub(params[k], oar_mul_scalar(oar_tensor_grad(params[k]), 0.1)));
        oar_no_grad_pop();
        /* the next step starts from the updated parameters */
        for (int k = 0; k < np; k++) {
            cin[2 + k] = oar_clone(cout[1 + np + k]);
            din[2 + k] = oar_clone(dout[1 + np + k]);
        }
    }
    fprintf(stderr, "mlp step (%s): %d outputs, OpenCL vs CPU executor %.3g, vs eager CPU %.3g; %d kernels on "
            "the CPU, %d on OpenCL\n", compile ? "compiled" : "unfused", n_out, worst, eager_worst,
            oar_executor_num_kernels(cpu), oar_executor_num_kernels(ocl));
    CHECK_NEAR(worst, 0, 1e-5);
    CHECK_NEAR(eager_worst, 0, 1e-5);
    CHECK(oar_executor_num_kernels(cpu) == oar_executor_num_kernels(ocl));
    oar_executor_free(cpu);
    oar_executor_free(ocl);
    oar_graph_free(g);
    oar_module_free(m);
    oar_pool_pop(p);
}

static void test_mlp_step_unfused(void) { run_mlp(false); }
static void test_mlp_step_compiled(void) { run_mlp(true); }

/* Random graphs: compiled on OpenCL against the CPU unfused executor. */
static void test_random_graphs(void) {
    const char *env_n = getenv("FUZZ_GRAPHS");
    int graphs = env_n ? atoi(env_n) : 60, compared = 0, bad = 0, kernels = 0;
    for (uint64_t seed = 1; compared < graphs && seed <= (uint64_t)graphs; seed++) {
        oar_pool *p = oar_pool_push();
        oar_manual_seed(seed);
        fuzz_case fc;
        oar_graph_input_spec specs[2 * SUBGRAPHS];
        oar_graph *g = trace_case(seed, &fc, specs);
        CHECK(g != NULL);
        if (!g) {
            oar_pool_pop(p);
            break;
        }
        oar_graph_optimize(g, OAR_PASSES_INFERENCE, 0);
        oar_executor *plain = oar_executor_new(g), *ocl = oar_executor_new(g);
        CHECK(oar_executor_compile(ocl) == 0);
        oar_tensor *in[2 * SUBGRAPHS], *din[2 * SUBGRAPHS], *y0[SUBGRAPHS], *y1[SUBGRAPHS];
        for (int64_t batch = 2; batch <= 5; batch += 3) { /* the dynamic batch at two sizes */
            for (int i = 0; i < 2 * SUBGRAPHS; i++) {
                int64_t sh[5];
                for (int d = 0; d < specs[i].ndim; d++) sh[d] = batch_of(specs[i].shape[d], batch);
                in[i] = oar_randn(OAR_F32, specs[i].ndim, sh);
                din[i] = oar_tensor_to(in[i], dev);
            }
            int st0 = oar_executor_run(plain, in, y0), st1 = oar_executor_run(ocl, din, y1);
            CHECK(st0 == 0 && st1 == 0);
            if (st0 || st1) {
                fprintf(stderr, "seed %llu: %s\n", (unsigned long long)seed, oar_last_error());
                break;
            }
            for (int i = 0; i < SUBGRAPHS; i++) {
                double *a = test_values(y0[i]), *b = test_values(y1[i]);
                bool ok = a && b && oar_tensor_numel(y0[i]) == oar_tensor_numel(y1[i]);
                int64_t at = 0;
                for (; ok && at < oar_tensor_numel(y0[i]); at++)
                    if (!(fabs(a[at] - b[at]) <= 1e-5 * fmax(1.0, fabs(a[at])) || (isnan(a[at]) && isnan(b[at])))) {
                        ok = false;
                        fprintf(stderr, "seed %llu subgraph %d batch %lld: element %lld is %.9g unfused on the CPU, "
                                "%.9g compiled on OpenCL\n", (unsigned long long)seed, i, (long long)batch,
                                (long long)at, a[at], b[at]);
                    }
                bad += !ok;
                free(a);
                free(b);
                compared += batch == 2;
            }
        }
        /* as many launches as the same grouping rendered as C */
        oari_fusion *cf = NULL;
        CHECK(oari_fuse_graph(g, &oari_render_c, &cf) == 0);
        CHECK(cf && oar_executor_num_kernels(ocl) == cf->n_launches);
        oari_fusion_free(cf);
        kernels += oar_executor_num_kernels(ocl) < oar_executor_num_kernels(plain);
        oar_executor_free(plain);
        oar_executor_free(ocl);
        oar_graph_free(g);
        oar_pool_pop(p);
    }
    fprintf(stderr, "%d random graphs compared on OpenCL, %d mismatches (%d traces fused)\n", compared, bad, kernels);
    CHECK(compared >= graphs);
    CHECK(kernels == (graphs + SUBGRAPHS - 1) / SUBGRAPHS); /* every trace ran fused kernels */
    CHECK(bad == 0);
}

/* Generated source that does not build: the build log in oar_last_error(),
 * one message, and the graph runs unfused (right results). */
static void test_build_failure(void) {
    oar_pool *p = oar_pool_push();
    oar_module *m;
    oar_tensor *x;
    oar_graph *g = small_mlp(5, &m, &x);
    oar_executor *ex = oar_executor_new(g);
    CHECK(oar_executor_compile(ex) == 0);
    oari_cl_prelude_extra = "this is not OpenCL C;\n";
    oar_clear_error();
    oar_tensor *y[1];
    CHECK(oar_executor_run(ex, (oar_tensor *[]){oar_tensor_to(x, dev)}, y) == 0);
    oari_cl_prelude_extra = NULL;
    const char *err = oar_last_error();
    fprintf(stderr, "after a failed build: %.300s\n", err);
    CHECK(strstr(err, "failed to build") != NULL && strstr(err, "build log") != NULL);
    CHECK(strstr(err, "error") != NULL); /* the compiler's own words */
    CHECK_NEAR(rel_diff(oar_module_forward(m, x), y[0]), 0, 1e-5);
    oar_executor *plain = oar_executor_new(g);
    CHECK(oar_executor_num_kernels(ex) == oar_executor_num_kernels(plain)); /* unfused */
    /* a second plan (another device buffer, same shapes) does not try again */
    CHECK(oar_executor_run(ex, (oar_tensor *[]){oar_tensor_to(oar_mul_scalar(x, 2), dev)}, y) == 0);
    oar_executor_free(plain);
    oar_executor_free(ex);
    oar_graph_free(g);
    oar_module_free(m);
    oar_pool_pop(p);
}

static int add2(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    out[0] = oar_add(in[0], in[1]);
    return out[0] ? 0 : -1;
}

/* One executor runs plans for the CPU and the device side by side; inputs
 * on two devices are refused, naming both. */
static void test_mixed_devices(void) {
    oar_pool *p = oar_pool_push();
    oar_module *m;
    oar_tensor *x;
    oar_graph *g = small_mlp(3, &m, &x);
    oar_executor *ex = oar_executor_new(g);
    oar_tensor *y[1];
    CHECK(oar_executor_run(ex, (oar_tensor *[]){oar_tensor_to(x, dev)}, y) == 0);
    CHECK(oar_tensor_device(y[0]) == dev);
    CHECK_NEAR(rel_diff(oar_module_forward(m, x), y[0]), 0, 1e-5);
    CHECK(oar_executor_run(ex, (oar_tensor *[]){x}, y) == 0);
    CHECK(oar_tensor_device(y[0]) == oar_device_cpu());
    CHECK_NEAR(rel_diff(oar_module_forward(m, x), y[0]), 0, 1e-6);
    oar_executor_free(ex);
    oar_graph_free(g);
    oar_graph_input_spec specs[2] = {spec_of("a", x), spec_of("b", x)};
    g = oar_trace(add2, NULL, 2, specs, 1, NULL);
    ex = oar_executor_new(g);
    CHECK(oar_executor_run(ex, (oar_tensor *[]){x, oar_tensor_to(x, dev)}, y) == OAR_ERR_INVALID);
    CHECK(strstr(oar_last_error(), "opencl:0") && strstr(oar_last_error(), "cpu"));
    oar_executor_free(ex);
    oar_graph_free(g);
    oar_module_free(m);
    oar_pool_pop(p);
}

/* The train step with its parameters updated in place (donated outputs):
 * on the device they are copied back into the caller's tensors; three
 * steps end at the CPU executor's parameters. */
static void test_update_in_place(void) {
    oar_pool *p = oar_pool_push();
    oar_manual_seed(23);
    oar_module *m = oar_sequential_new(3, (oar_module *[]){oar_linear_new(6, 16, true), oar_relu_new(),
                                                           oar_linear_new(16, 3, true)});
    oar_tensor *x = oar_randn(OAR_F32, 2, (int64_t[]){10, 6});
    oar_tensor *y = oar_randint(0, 3, OAR_I64, 1, (int64_t[]){10});
    oar_tensor *params[16];
    int np = 0;
    oar_graph *g = mlp_step_graph(m, x, y, &np, params);
    oar_executor *cpu = oar_executor_new(g), *ocl = oar_executor_new(g);
    CHECK(oar_executor_update_in_place(cpu) == np && oar_executor_update_in_place(ocl) == np);
    CHECK(oar_executor_compile(cpu) == 0 && oar_executor_compile(ocl) == 0);
    oar_tensor *cin[18] = {x, y}, *din[18] = {oar_tensor_to(x, dev), oar_tensor_to(y, dev)}, *out[40];
    for (int k = 0; k < np; k++) {
        cin[2 + k] = oar_clone(params[k]);
        din[2 + k] = oar_tensor_to(params[k], dev);
    }
    for (int step = 0; step < 3; step++) {
        CHECK(oar_executor_run(cpu, cin, out) == 0);
        CHECK(oar_executor_run(ocl, din, out) == 0);
        CHECK(out[1 + np] == din[2]); /* the donated output is the caller's tensor */
    }
    double worst = 0;
    for (int k = 0; k < np; k++) worst = fmax(worst, rel_diff(cin[2 + k], din[2 + k]));
    CHECK(rel_diff(cin[2], params[0]) > 1e-3); /* the parameters moved */
    CHECK_NEAR(worst, 0, 1e-5);
    oar_executor_free(cpu);
    oar_executor_free(ocl);
    oar_graph_free(g);
    oar_module_free(m);
    oar_pool_pop(p);
}

/* Control flow on the device: a cond node's predicate is read back, its
 * branches run by sub-executors on the device's tensors. */
static int square_fn(void *ctx, int n_in, oar_tensor *const *in, int n_out, oar_tensor **out) {
    (void)ctx, (void)n_in, (void)n_out;
    out[0] = oar_mul(in[0], in[0]);
    return out[0] ? 0 : -1;
}

static int neg_fn(void *ctx, int n_in, oar_tensor *const *in, int n_out, oar_tensor **out) {
    (void)ctx, (void)n_in, (void)n_out;
    out[0] = oar_neg(in[0]);
    return out[0] ? 0 : -1;
}

static int cond_graph(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    oar_tensor *pred = oar_gt(oar_sum(in[0], 0, NULL, false), oar_scalar(0)), *x = oar_exp(in[0]), *o;
    int st = oar_cond(pred, square_fn, neg_fn, NULL, 1, &x, 1, &o);
    out[0] = st ? NULL : oar_tanh(o);
    return st;
}

static void test_control_flow(void) {
    oar_pool *p = oar_pool_push();
    oar_graph_input_spec s = {.name = "x", .dtype = OAR_F32, .ndim = 1, .shape = {6}};
    oar_graph *g = oar_trace(cond_graph, NULL, 1, &s, 1, NULL);
    CHECK(g != NULL);
    for (int compiled = 0; compiled < 2 && g; compiled++) {
        oar_executor *ex = oar_executor_new(g);
        if (compiled) CHECK(oar_executor_compile(ex) == 0);
        for (int sign = -1; sign <= 1; sign += 2) { /* both branches */
            oar_tensor *x = oar_add_scalar(oar_mul_scalar(oar_randn(OAR_F32, 1, (int64_t[]){6}), 0.1), sign), *y0, *y1;
            CHECK(oar_executor_run(ex, &x, &y0) == 0);
            y0 = oar_clone(y0);
            CHECK(oar_executor_run(ex, (oar_tensor *[]){oar_tensor_to(x, dev)}, &y1) == 0);
            CHECK(oar_tensor_device(y1) == dev);
            CHECK_NEAR(rel_diff(y0, y1), 0, 1e-6);
        }
        oar_executor_free(ex);
    }
    oar_graph_free(g);
    oar_pool_pop(p);
}

/* Every host allocation of a compiled run on the device failing in turn
 * (plan, constants, kernel arguments, the fallback's copies): an "out of
 * memory" status or a correct run, nothing leaked, oar usable after. */
static oar_graph *af_graph;
static oar_tensor *af_x;

static int af_step(void) {
    oar_executor *ex = oar_executor_new(af_graph);
    oar_tensor *y[1];
    int st = ex ? oar_executor_compile(ex) : -1;
    if (!st) st = oar_executor_run(ex, &af_x, y);
    oar_executor_free(ex);
    return st;
}

static void test_alloc_failure(void) {
    oar_module *m;
    oar_tensor *x;
    oar_pool *p = oar_pool_push();
    af_graph = small_mlp(7, &m, &x);
    af_x = oar_tensor_retain(oar_tensor_to(x, dev));
    oar_pool_pop(p);
    CHECK(af_step() == 0);
    oar_set_allocator(failing_alloc, NULL);
    int failures = 0, n = fail_each_allocation(af_step, &failures);
    oar_set_allocator(NULL, NULL);
    fprintf(stderr, "compiled run on %s: %d allocations failed in turn, %d runs failed\n", oar_device_name(dev), n,
            failures);
    CHECK(n > 5 && failures > 0);
    CHECK(oar_device_synchronize(dev) == 0); /* no kernel left queued at exit (PoCL compiles lazily) */
    oar_tensor_release(af_x);
    oar_graph_free(af_graph);
    oar_module_free(m);
}

static int f64_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    oar_tensor *h = oar_tanh(oar_add(oar_matmul(in[0], in[1]), in[2]));
    out[0] = oar_sum(oar_mul(oar_softmax(h, 1), h), 0, NULL, false);
    return out[0] ? 0 : -1;
}

static void test_f64_graph(void) {
    oar_pool *p = oar_pool_push();
    oar_graph_input_spec s[3] = {{.name = "x", .dtype = OAR_F64, .ndim = 2, .shape = {6, 5}},
                                 {.name = "w", .dtype = OAR_F64, .ndim = 2, .shape = {5, 4}},
                                 {.name = "b", .dtype = OAR_F64, .ndim = 1, .shape = {4}}};
    oar_graph *g = oar_trace(f64_fn, NULL, 3, s, 1, NULL);
    CHECK(g != NULL);
    oar_manual_seed(5);
    oar_tensor *cin[3] = {oar_randn(OAR_F64, 2, s[0].shape), oar_randn(OAR_F64, 2, s[1].shape),
                          oar_randn(OAR_F64, 1, s[2].shape)};
    oar_tensor *din[3];
    for (int i = 0; i < 3; i++) din[i] = oar_tensor_to(cin[i], dev);
    for (int compile = 0; g && compile < 2; compile++) {
        oar_executor *cpu = oar_executor_new(g), *ocl = oar_executor_new(g);
        if (compile) {
            CHECK(oar_executor_compile(cpu) == 0);
            CHECK(oar_executor_compile(ocl) == 0);
        }
        oar_tensor *cout[1] = {NULL}, *dout[1] = {NULL};
        oar_device_fallback_reset();
        CHECK(oar_executor_run(cpu, cin, cout) == 0);
        CHECK(oar_executor_run(ocl, din, dout) == 0);
        CHECK(oar_device_fallback_count() == 0);
        CHECK(dout[0] && oar_tensor_device(dout[0]) == dev);
        CHECK_NEAR(rel_diff(cout[0], dout[0]), 0, 1e-12);
        oar_executor_free(cpu);
        oar_executor_free(ocl);
    }
    oar_graph_free(g);
    oar_pool_pop(p);
}

int main(void) {
    if (!(dev = opencl_device_or_skip())) return TEST_SKIP;
    RUN(test_f64_graph);
    RUN(test_mlp_step_unfused);
    RUN(test_mixed_devices);
    RUN(test_mlp_step_compiled);
    RUN(test_build_failure);
    RUN(test_control_flow);
    RUN(test_update_in_place);
    RUN(test_random_graphs);
    RUN(test_alloc_failure);
    return test_summary();
}

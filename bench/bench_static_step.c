/* The static train step against the eager one, both oar: the MLP
 * 784-512-512-10 (batch 128) and LeNet-5 (batch 64), cross entropy, SGD.
 * Eager: forward, oar_backward, an in-place update per parameter. Static:
 * the same loss traced with the parameters as inputs, backward and the SGD
 * step appended (oar_graph_append_backward / _sgd), optimized, run by the
 * executor from its planned arena with the parameters updated in place
 * (oar_executor_update_in_place: next:* donated to the parameters, grad:*
 * discarded). Prints time per step and peak tensor memory of each (peak
 * over the steps minus the memory held before them, so the static figure
 * includes its arena); "oar" lines are the static step, "torch"-less
 * ratios are printed here as static / eager. */
#include <oar/oar.h>

#include <stdio.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static oar_module *lenet(void) {
    return oar_sequential_new(
        12, (oar_module *[]){oar_conv2d_new(1, 6, 5, 1, 2, 1, 1, true), oar_relu_new(),
                             oar_max_pool2d_new(2, 2, 0), oar_conv2d_new(6, 16, 5, 1, 0, 1, 1, true),
                             oar_relu_new(), oar_max_pool2d_new(2, 2, 0), oar_flatten_new(1, -1),
                             oar_linear_new(400, 120, true), oar_relu_new(), oar_linear_new(120, 84, true),
                             oar_relu_new(), oar_linear_new(84, 10, true)});
}

static oar_module *mlp(void) {
    return oar_sequential_new(6, (oar_module *[]){oar_flatten_new(1, -1), oar_linear_new(784, 512, true),
                                                  oar_relu_new(), oar_linear_new(512, 512, true),
                                                  oar_relu_new(), oar_linear_new(512, 10, true)});
}

static int loss_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    out[0] = oar_cross_entropy(oar_module_forward(ctx, in[0]), in[1], NULL, -100, 0.0, OAR_REDUCTION_MEAN);
    return out[0] ? 0 : -1;
}

static size_t in_use(void) {
    oar_memory_stats s;
    oar_memory_stats_get(&s);
    return s.bytes_in_use;
}

static size_t peak(void) {
    oar_memory_stats s;
    oar_memory_stats_get(&s);
    return s.peak_bytes;
}

static int bench(const char *name, oar_module *m, int64_t batch, int steps) {
    const double lr = 0.01;
    oar_tensor *params[16];
    int np = oar_module_parameters(m, params, 16);
    oar_tensor *x = oar_randn(OAR_F32, 4, (int64_t[]){batch, 1, 28, 28});
    oar_tensor *y = oar_randint(0, 10, OAR_I64, 1, (int64_t[]){batch});
    /* eager */
    size_t base = in_use();
    oar_memory_reset_peak();
    double t0 = 0;
    for (int s = 0; s < 3 + steps; s++) {
        if (s == 3) t0 = now();
        oar_pool *p = oar_pool_push();
        oar_tensor *loss = NULL;
        if (loss_fn(m, (oar_tensor *[]){x, y}, &loss) || oar_backward(loss, NULL)) return 1;
        oar_no_grad_push();
        for (int k = 0; k < np; k++) {
            oar_add_scaled_(params[k], oar_tensor_grad(params[k]), -lr);
            oar_tensor_zero_grad(params[k]);
        }
        oar_no_grad_pop();
        oar_pool_pop(p);
    }
    double eager_ms = (now() - t0) * 1e3 / steps;
    double eager_peak = (double)(peak() - base) / (1 << 20);
    /* static */
    oar_graph_input_spec specs[2] = {{.name = "x", .dtype = OAR_F32, .ndim = 4, .shape = {batch, 1, 28, 28}},
                                     {.name = "y", .dtype = OAR_I64, .ndim = 1, .shape = {batch}}};
    oar_graph *g = oar_trace(loss_fn, m, 2, specs, 1, &(oar_trace_options){.module = m, .params_as_inputs = true});
    int wrt[16];
    for (int k = 0; k < np; k++) wrt[k] = 2 + k;
    if (!g || oar_graph_append_backward(g, 0, np, wrt) < 0 || oar_graph_append_sgd(g, lr) < 0 ||
        oar_graph_optimize(g, OAR_PASSES_TRAINING, 0))
        return fprintf(stderr, "%s: tracing the train step: %s\n", name, oar_last_error()), 1;
    base = in_use();
    oar_memory_reset_peak();
    oar_executor *ex = oar_executor_new(g);
    oar_tensor *in[18] = {x, y}, *out[40];
    for (int k = 0; k < np; k++) in[2 + k] = params[k];
    if (oar_executor_update_in_place(ex) != np) return fprintf(stderr, "%s: %s\n", name, oar_last_error()), 1;
    for (int s = 0; s < 3 + steps; s++) {
        if (s == 3) t0 = now();
        if (oar_executor_run(ex, in, out)) return fprintf(stderr, "%s: %s\n", name, oar_last_error()), 1;
    }
    double static_ms = (now() - t0) * 1e3 / steps;
    double static_peak = (double)(peak() - base) / (1 << 20);
    /* the same program compiled (src/compiler/) */
    oar_executor_free(ex);
    base = in_use();
    oar_memory_reset_peak();
    ex = oar_executor_new(g);
    if (oar_executor_compile(ex)) return fprintf(stderr, "%s: compile: %s\n", name, oar_last_error()), 1;
    if (oar_executor_update_in_place(ex) != np) return fprintf(stderr, "%s: %s\n", name, oar_last_error()), 1;
    for (int s = 0; s < 3 + steps; s++) {
        if (s == 3) t0 = now();
        if (oar_executor_run(ex, in, out)) return fprintf(stderr, "%s: %s\n", name, oar_last_error()), 1;
    }
    double compiled_ms = (now() - t0) * 1e3 / steps;
    double compiled_peak = (double)(peak() - base) / (1 << 20);
    printf("oar %s_eager_step %.3f ms\n", name, eager_ms);
    printf("oar %s_static_step %.3f ms\n", name, static_ms);
    printf("oar %s_eager_peak %.2f MiB\n", name, eager_peak);
    printf("oar %s_static_peak %.2f MiB\n", name, static_peak);
    printf("oar %s_compiled_step %.3f ms\n", name, compiled_ms);
    printf("oar %s_compiled_peak %.2f MiB\n", name, compiled_peak);
    printf("ratio %s static/eager time = %.3f, peak memory = %.3f\n", name, static_ms / eager_ms,
           static_peak / eager_peak);
    printf("ratio %s compiled/eager time = %.3f, peak memory = %.3f\n", name, compiled_ms / eager_ms,
           compiled_peak / eager_peak);
    oar_executor_free(ex);
    oar_graph_free(g);
    oar_tensor_release(x);
    oar_tensor_release(y);
    return 0;
}

int main(void) {
    oar_manual_seed(0);
    oar_module *a = mlp(), *b = lenet();
    int st = bench("mlp", a, 128, 30) || bench("lenet", b, 64, 30);
    oar_module_free(a);
    oar_module_free(b);
    return st;
}

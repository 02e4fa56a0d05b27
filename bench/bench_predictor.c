/* The predictor against TorchScript (bench/peer/predictor.py runs the same
 * models through torch.jit.trace): LeNet-5 (padding-2 variant on 28x28)
 * and the MLP 784-512-512-10, traced with a dynamic batch and served by
 * oar_predictor_run_borrowed (predictor-owned outputs, no allocation per
 * run). Prints the median latency at batch 1 and the throughput at batch
 * 64, both on the process's OpenMP threads (2 here). */
#include <oar/oar.h>

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
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

static int bench(const char *name, oar_module *m) {
    oar_module_train(m, false);
    oar_graph_input_spec spec = {.name = "x", .dtype = OAR_F32, .ndim = 4, .shape = {-1, 1, 28, 28},
                                 .dim_names = {"N"}};
    oar_graph *g = oar_trace_module(m, &spec);
    oar_predictor *p = g ? oar_predictor_from_graph(g, &(oar_predictor_config){.optimize = true}) : NULL;
    oar_graph_free(g);
    if (!p) return fprintf(stderr, "%s: %s\n", name, oar_last_error()), 1;
    oar_tensor *x1 = oar_randn(OAR_F32, 4, (int64_t[]){1, 1, 28, 28});
    oar_tensor *x64 = oar_randn(OAR_F32, 4, (int64_t[]){64, 1, 28, 28});
    oar_tensor *out;
    enum { RUNS = 400 };
    static double t[RUNS];
    for (int i = 0; i < 50; i++) oar_predictor_run_borrowed(p, &x1, &out);
    for (int i = 0; i < RUNS; i++) {
        double t0 = now();
        if (oar_predictor_run_borrowed(p, &x1, &out)) return fprintf(stderr, "%s: %s\n", name, oar_last_error()), 1;
        t[i] = now() - t0;
    }
    qsort(t, RUNS, sizeof *t, cmp);
    printf("oar %s_latency_b1 %.1f us\n", name, t[RUNS / 2] * 1e6);
    for (int i = 0; i < 10; i++) oar_predictor_run_borrowed(p, &x64, &out);
    int iters = 100;
    double t0 = now();
    for (int i = 0; i < iters; i++) oar_predictor_run_borrowed(p, &x64, &out);
    double per = (now() - t0) / iters;
    /* printed as time per image so that lower is better, like every other line */
    printf("oar %s_b64_per_image %.2f us\n", name, per / 64 * 1e6);
    oar_predictor_free(p);
    oar_tensor_release(x1);
    oar_tensor_release(x64);
    return 0;
}

int main(void) {
    oar_manual_seed(0);
    oar_module *a = lenet(), *b = mlp();
    int st = bench("lenet", a) || bench("mlp", b);
    oar_module_free(a);
    oar_module_free(b);
    return st;
}

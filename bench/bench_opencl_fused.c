/* The fusing compiler on OpenCL: bench_fusion's 8-op elementwise chain on
 * opencl:0, the executor with the graph compiled into OpenCL C kernels
 * against the same executor unfused (eight device kernels), alternating,
 * best of each. "oar chain8_opencl <ms> ms" is the compiled graph;
 * "oar chain8_opencl_unfused" the unfused one. No peer. The plugin is
 * found through OAR_PLUGIN_PATH, else in the build tree (<bench>/plugins);
 * without an OpenCL device the benchmark says so and prints nothing else.
 *   bench_opencl_fused [elements]    (default 4M) */
#include <oar/oar.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "fused_chain.h" /* f_chain */

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Best milliseconds of one run, synchronised, over reps runs. */
static double time_runs(oar_executor *ex, oar_tensor *x, oar_device *d, int reps) {
    oar_tensor *y;
    if (oar_executor_run(ex, &x, &y) || oar_device_synchronize(d)) { /* plans, builds */
        fprintf(stderr, "run failed: %s\n", oar_last_error());
        exit(1);
    }
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        if (oar_executor_run(ex, &x, &y) || oar_device_synchronize(d)) {
            fprintf(stderr, "run failed: %s\n", oar_last_error());
            exit(1);
        }
        double t = now() - t0;
        if (t < best) best = t;
    }
    return best * 1e3;
}

int main(int argc, char **argv) {
    if (!getenv("OAR_PLUGIN_PATH")) { /* the plugins built beside this benchmark */
        char exe[900], dir[1000];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        if (n > 0) {
            exe[n] = 0;
            char *slash = strrchr(exe, '/');
            if (slash) *slash = 0;
            snprintf(dir, sizeof dir, "%s/plugins", exe);
            setenv("OAR_PLUGIN_PATH", dir, 1);
        }
    }
    oar_device *d = oar_device_get("opencl:0");
    if (!d) {
        printf("no OpenCL device: %s\n", oar_last_error());
        return 0;
    }
    int64_t n = argc > 1 ? atoll(argv[1]) : 1 << 22;
    oar_graph_input_spec spec = {.name = "x", .dtype = OAR_F32, .ndim = 1, .shape = {n}};
    oar_graph *g = oar_trace(f_chain, NULL, 1, &spec, 1, NULL);
    oar_executor *plain = oar_executor_new(g), *fused = oar_executor_new(g);
    if (!g || !plain || !fused || oar_executor_compile(fused)) {
        fprintf(stderr, "setup failed: %s\n", oar_last_error());
        return 1;
    }
    oar_pool *p = oar_pool_push();
    oar_tensor *x = oar_tensor_to(oar_randn(OAR_F32, 1, &n), d);
    double tf = 1e30, tu = 1e30;
    for (int round = 0; round < 3; round++) { /* alternate, keep the best of each */
        double a = time_runs(plain, x, d, 10), b = time_runs(fused, x, d, 10);
        if (a < tu) tu = a;
        if (b < tf) tf = b;
    }
    oar_device_props props;
    oar_device_get_props(d, &props);
    printf("# %s, %lld floats\n", props.name, (long long)n);
    printf("oar chain8_opencl %.4f ms\n", tf);
    printf("oar chain8_opencl_unfused %.4f ms\n", tu);
    printf("speedup chain8_opencl unfused/compiled = %.2f (%d kernels vs %d)\n", tu / tf,
           oar_executor_num_kernels(fused), oar_executor_num_kernels(plain));
    oar_pool_pop(p);
    oar_executor_free(plain);
    oar_executor_free(fused);
    oar_graph_free(g);
    return 0;
}

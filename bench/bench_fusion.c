/* The fusing compiler against the unfused executor, in one run: an 8-op
 * elementwise chain on 4M floats, layer_norm + GELU over rows, a scaled
 * last-axis softmax. "oar <case> <ms> ms" is the compiled graph (the peer,
 * bench/peer/fusion.py, is eager PyTorch on the same shapes); the unfused
 * executor and the fused/unfused ratio are printed beside it, and on a
 * comment line the compiled kernel's compute floor (compute_floor).
 * `bench_fusion --threshold` measures one- against two-thread runs of a
 * flat kernel across sizes (built with OAR_PAR_MIN=0) to place the size
 * above which generated loops use OpenMP threads. */
#include <oar/oar.h>

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "fused_chain.h" /* f_chain */

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static oar_tensor *LNW, *LNB;


static int f_ln_gelu(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    out[0] = oar_gelu(oar_layer_norm(in[0], 1, LNW, LNB, 1e-5), false);
    return out[0] ? 0 : -1;
}

static int f_softmax(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    out[0] = oar_softmax(oar_mul_scalar(in[0], 0.125), -1);
    return out[0] ? 0 : -1;
}

/* n independent 8-op chains with a salt in their constants, so that the
 * source is new to the cache (a real compile) */
static int n_chains;
static double salt;
static int f_chains(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    for (int k = 0; k < n_chains; k++) {
        oar_tensor *y = oar_mul_scalar(oar_add_scalar(in[0], 1.0 + salt + k), 0.5);
        y = oar_sigmoid(oar_mul(oar_tanh(oar_neg(y)), in[0]));
        out[k] = oar_sub(oar_relu(y), in[0]);
    }
    return 0;
}

/* Milliseconds of oar_executor_compile for n chains: a fresh compile, then
 * a cache hit (another executor, same source). */
static void compile_latency(int n, double *fresh, double *hit) {
    n_chains = n;
    salt = (double)(now() * 1e3 - (double)(int64_t)(now() * 1e3)) * 1e-3 + 1e-7 * n;
    oar_graph_input_spec spec = {.name = "x", .dtype = OAR_F32, .ndim = 1, .shape = {1024}};
    oar_graph *g = oar_trace(f_chains, NULL, 1, &spec, n, NULL);
    oar_executor *a = oar_executor_new(g), *b = oar_executor_new(g);
    double t0 = now();
    if (oar_executor_compile(a)) {
        fprintf(stderr, "compile: %s\n", oar_last_error());
        exit(1);
    }
    double t1 = now();
    oar_executor_compile(b);
    double t2 = now();
    *fresh = (t1 - t0) * 1e3;
    *hit = (t2 - t1) * 1e3;
    oar_executor_free(a);
    oar_executor_free(b);
    oar_graph_free(g);
}

/* Best-of-reps milliseconds per run. */
static double time_runs(oar_executor *ex, oar_tensor *x, int reps) {
    oar_tensor *y;
    oar_executor_run(ex, &x, &y); /* plans the arena */
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        if (oar_executor_run(ex, &x, &y)) {
            fprintf(stderr, "run failed: %s\n", oar_last_error());
            exit(1);
        }
        double t = now() - t0;
        if (t < best) best = t;
    }
    return best * 1e3;
}

/* The compiled graph's compute floor for `shape`: the same graph traced at
 * `small` (its data fits in L2, so no run waits on memory), best ms per
 * run scaled by the element ratio. Fusion saves memory traffic only: the
 * unfused time over this floor is the most any fusion of this arithmetic
 * could gain, and the compiled time over it is how much memory still costs. */
static double compute_floor(oar_trace_fn fn, int ndim, const int64_t *shape, const int64_t *small) {
    oar_graph_input_spec spec = {.name = "x", .dtype = OAR_F32, .ndim = ndim};
    memcpy(spec.shape, small, (size_t)ndim * sizeof *small);
    oar_graph *g = oar_trace(fn, NULL, 1, &spec, 1, NULL);
    oar_executor *ex = g ? oar_executor_new(g) : NULL;
    if (!ex || oar_executor_compile(ex)) {
        fprintf(stderr, "compute floor: %s\n", oar_last_error());
        exit(1);
    }
    oar_tensor *x = oar_randn(OAR_F32, ndim, small);
    double n = 1, m = 1, best = 1e30;
    for (int d = 0; d < ndim; d++) n *= (double)shape[d], m *= (double)small[d];
    for (int round = 0; round < 3; round++) {
        double t = time_runs(ex, x, 200);
        if (t < best) best = t;
    }
    oar_executor_free(ex);
    oar_graph_free(g);
    return best * n / m;
}

static void bench_case(const char *name, oar_trace_fn fn, int ndim, const int64_t *shape, const int64_t *small,
                       int reps) {
    oar_graph_input_spec spec = {.name = "x", .dtype = OAR_F32, .ndim = ndim};
    memcpy(spec.shape, shape, (size_t)ndim * sizeof *shape);
    oar_graph *g = oar_trace(fn, NULL, 1, &spec, 1, NULL);
    if (!g) {
        fprintf(stderr, "%s: %s\n", name, oar_last_error());
        exit(1);
    }
    oar_executor *plain = oar_executor_new(g), *fused = oar_executor_new(g);
    if (oar_executor_compile(fused) || !oar_executor_is_compiled(fused)) {
        fprintf(stderr, "%s: not compiled: %s\n", name, oar_last_error());
        exit(1);
    }
    oar_tensor *x = oar_randn(OAR_F32, ndim, shape);
    double tf = 1e30, tu = 1e30;
    for (int round = 0; round < 3; round++) { /* alternate, keep the best of each */
        double a = time_runs(plain, x, reps), b = time_runs(fused, x, reps);
        if (a < tu) tu = a;
        if (b < tf) tf = b;
    }
    printf("oar %s %.4f ms\n", name, tf);
    printf("oar %s_unfused %.4f ms\n", name, tu);
    printf("speedup %s unfused/compiled = %.2f (%d kernels vs %d)\n", name, tu / tf,
           oar_executor_num_kernels(fused), oar_executor_num_kernels(plain));
    double floor_ms = compute_floor(fn, ndim, shape, small);
    printf("# %s compute floor %.4f ms (compiled on L2-resident data, scaled): compiled/floor = %.2f, "
           "unfused/floor = %.2f (the most fusion could give)\n",
           name, floor_ms, tf / floor_ms, tu / floor_ms);
    oar_executor_free(plain);
    oar_executor_free(fused);
    oar_graph_free(g);
}

/* One vs two threads of the compiled chain across sizes; threads always
 * allowed (OAR_PAR_MIN=0 in this process's kernel flags). */
static void threshold(void) {
    setenv("OAR_JIT_CFLAGS", "-DOAR_PAR_MIN=0", 1);
    for (int64_t n = 1024; n <= (1 << 20); n *= 2) {
        oar_graph_input_spec spec = {.name = "x", .dtype = OAR_F32, .ndim = 1, .shape = {n}};
        oar_graph *g = oar_trace(f_chain, NULL, 1, &spec, 1, NULL);
        oar_executor *ex = oar_executor_new(g);
        oar_executor_compile(ex);
        oar_tensor *x = oar_randn(OAR_F32, 1, &n);
        omp_set_num_threads(1);
        double t1 = time_runs(ex, x, 200);
        omp_set_num_threads(2);
        double t2 = time_runs(ex, x, 200);
        printf("threshold n=%lld: 1 thread %.4f ms, 2 threads %.4f ms, ratio %.2f\n", (long long)n, t1, t2,
               t2 / t1);
        oar_executor_free(ex);
        oar_graph_free(g);
    }
}

int main(int argc, char **argv) {
    oar_manual_seed(0);
    oar_pool *p = oar_pool_push();
    if (argc > 1 && !strcmp(argv[1], "--threshold")) {
        threshold();
        oar_pool_pop(p);
        return 0;
    }
    double c1, h1, c16, h16;
    compile_latency(1, &c1, &h1);
    compile_latency(16, &c16, &h16); /* one unit of 16 kernels */
    printf("oar compile_1_kernel %.1f ms (target <= 200)\n", c1);
    printf("oar compile_per_extra_kernel %.1f ms (target <= 60; 16 kernels in one unit: %.1f ms)\n",
           (c16 - c1) / 15, c16);
    printf("oar compile_cache_hit %.3f ms (target <= 2; the library already loaded in this process)\n", h1);
    LNW = oar_randn(OAR_F32, 1, (int64_t[]){1024});
    LNB = oar_randn(OAR_F32, 1, (int64_t[]){1024});
    bench_case("chain8_4M", f_chain, 1, (int64_t[]){1 << 22}, (int64_t[]){1 << 16}, 20);
    bench_case("ln_gelu_4096x1024", f_ln_gelu, 2, (int64_t[]){4096, 1024}, (int64_t[]){64, 1024}, 20);
    bench_case("softmax_4096x1024", f_softmax, 2, (int64_t[]){4096, 1024}, (int64_t[]){64, 1024}, 20);
    oar_pool_pop(p);
    return 0;
}

/* Random graphs through the fusing compiler: chains of up to 12
 * elementwise, broadcast, reduce and movement ops over random shapes (sizes
 * 1 and odd tails, a dynamic batch), compiled and unfused results compared.
 * 500 graphs per run: 25 traced graphs of 20 independent subgraphs each,
 * so that the compiler runs 25 times, not 500.
 * FUZZ_SEED=<n> picks another set; FUZZ_GRAPHS=<n> runs more. */
#include "fuzz_graphs.h"

#include "compiler/jit.h"

static int n_kernels, n_reduce_kernels; /* what the compiler made, over the run */

/* Runs one case: returns the number of subgraphs compared, and counts
 * mismatches into *bad. */
static int run_case(uint64_t seed, int *bad) {
    fuzz_case fc;
    oar_graph_input_spec specs[2 * SUBGRAPHS];
    oar_graph *g = trace_case(seed, &fc, specs);
    if (!g) {
        fprintf(stderr, "seed %llu: trace failed: %s\n", (unsigned long long)seed, oar_last_error());
        (*bad)++;
        return 0;
    }
    oar_graph_optimize(g, OAR_PASSES_INFERENCE, 0);
    oar_executor *plain = oar_executor_new(g), *fused = oar_executor_new(g);
    CHECK(oar_executor_compile(fused) == 0);
    const char *src = oar_executor_kernel_source(fused);
    for (const char *p = src; p && (p = strstr(p, "\nvoid oar_k")); p++) n_kernels++;
    for (const char *p = src; p && (p = strstr(p, "acc")); p = strstr(p, "\nvoid oar_k")) n_reduce_kernels++;
    oar_tensor *in[2 * SUBGRAPHS], *y0[SUBGRAPHS], *y1[SUBGRAPHS];
    int compared = 0;
    for (int64_t batch = 2; batch <= 5; batch += 3) { /* the dynamic batch at two sizes */
        for (int i = 0; i < 2 * SUBGRAPHS; i++) {
            int64_t sh[5];
            for (int d = 0; d < specs[i].ndim; d++) sh[d] = batch_of(specs[i].shape[d], batch);
            in[i] = oar_randn(OAR_F32, specs[i].ndim, sh);
        }
        int st0 = oar_executor_run(plain, in, y0);
        CHECK(st0 == 0);
        int st1 = oar_executor_run(fused, in, y1);
        CHECK(st1 == 0);
        if (st0 || st1) break;
        for (int i = 0; i < SUBGRAPHS; i++) {
            double *a = test_values(y0[i]), *b = test_values(y1[i]);
            bool ok = oar_tensor_numel(y0[i]) == oar_tensor_numel(y1[i]);
            int64_t at = 0;
            for (; ok && at < oar_tensor_numel(y0[i]); at++)
                if (!(fabs(a[at] - b[at]) <= 1e-5 * fmax(1.0, fabs(a[at])) || (isnan(a[at]) && isnan(b[at])))) {
                    ok = false;
                    break;
                }
            if (!ok) {
                (*bad)++;
                fprintf(stderr, "seed %llu subgraph %d batch %lld: compiled and unfused differ (element %lld: "
                        "%.9g unfused, %.9g compiled)\n", (unsigned long long)seed, i, (long long)batch,
                        (long long)at, oar_tensor_numel(y0[i]) == oar_tensor_numel(y1[i]) ? a[at] : NAN,
                        oar_tensor_numel(y0[i]) == oar_tensor_numel(y1[i]) ? b[at] : NAN);
            }
            free(a);
            free(b);
            compared += batch == 2;
        }
    }
    if (*bad && getenv("FUZZ_SHOW")) {
        oar_graph_print(g, stderr);
        fputs(oar_executor_kernel_source(fused), stderr);
    }
    oar_executor_free(plain);
    oar_executor_free(fused);
    oar_graph_free(g);
    return compared;
}

static void test_random_graphs(void) {
    const char *env_seed = getenv("FUZZ_SEED"), *env_n = getenv("FUZZ_GRAPHS");
    uint64_t seed0 = env_seed ? strtoull(env_seed, NULL, 10) : 1;
    int graphs = env_n ? atoi(env_n) : 500;
    int compared = 0, bad = 0;
    for (uint64_t c = 0; compared < graphs && c < (uint64_t)graphs; c++) {
        oar_pool *p = oar_pool_push();
        oar_manual_seed(seed0 + c);
        compared += run_case(seed0 + c, &bad);
        oar_pool_pop(p);
    }
    fprintf(stderr, "%d random graphs compared (%d fused kernels, %d with reductions), %d mismatches\n",
            compared, n_kernels, n_reduce_kernels, bad);
    CHECK(compared >= graphs);
    CHECK(n_kernels >= graphs / 2 && n_reduce_kernels >= graphs / 10); /* the fuzzer reaches the compiler */
    CHECK(bad == 0);
}

int main(void) {
    if (!oari_jit_available()) {
        fprintf(stderr, "no C compiler: skipped\n");
        return 77;
    }
    RUN(test_random_graphs);
    return test_summary();
}

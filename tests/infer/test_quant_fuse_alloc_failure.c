/* Out of memory in fuse_qlinear (invariant 5 of docs/architecture.md):
 * the Nth host allocation fails, for every N, while the pass fuses a
 * quantized two-layer MLP (packing the weights, adding constants, editing
 * the nodes) and the fused graph runs. Each failure must be reported,
 * leak nothing and leave oar usable. */
#include "alloc_fail_loop.h"

#include <oar/quant.h>

static oar_graph *quantized;
static oar_tensor *x;

/* A clone of the quantized graph fused and run; 0 on success. */
static int step(void) {
    oar_graph *g = oar_graph_clone(quantized);
    oar_executor *ex = NULL;
    oar_tensor *y = NULL;
    int st = g ? 0 : -1;
    if (!st && oar_graph_run_pass(g, "fuse_qlinear") != 2) st = -1;
    if (!st && !(ex = oar_executor_new(g))) st = -1;
    if (!st) st = oar_executor_run(ex, &x, &y);
    oar_executor_free(ex);
    oar_graph_free(g);
    return st;
}

static oar_tensor *W1, *W2;
static int mlp_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    out[0] = oar_matmul(oar_relu(oar_matmul(in[0], W1)), W2);
    return out[0] ? 0 : -1;
}

static void test_every_allocation_fails_cleanly(void) {
    W1 = oar_randn(OAR_F32, 2, (int64_t[]){9, 20});
    W2 = oar_randn(OAR_F32, 2, (int64_t[]){20, 3});
    x = oar_randn(OAR_F32, 2, (int64_t[]){5, 9});
    oar_graph_input_spec s = {.name = "x", .dtype = OAR_F32, .ndim = 2, .shape = {-1, 9}};
    quantized = oar_trace(mlp_fn, NULL, 1, &s, 1, NULL);
    CHECK(quantized && oar_graph_quantize(quantized, &(oar_quantize_config){.n_batches = 1, .batches = &x}) == 2);
    CHECK(step() == 0);
    int failures, n = fail_each_allocation(step, &failures);
    printf("failed each of %d allocations of fuse_qlinear+run\n", n);
    CHECK(failures > 20);
    CHECK(n < 100000);
    oar_graph_free(quantized);
    oar_tensor_release(x);
    oar_tensor_release(W1);
    oar_tensor_release(W2);
}

int main(void) {
    oar_set_allocator(failing_alloc, NULL);
    RUN(test_every_allocation_fails_cleanly);
    oar_memory_empty_cache();
    oar_set_allocator(NULL, NULL);
    return test_summary();
}

/* Out of memory in fuse_qlinear's conv path (invariant 5 of
 * docs/architecture.md): the Nth host allocation fails, for every N, while
 * the pass moves a quantize up through a max pool and a flatten, fuses a
 * quantized conv-relu-pool-linear net (packing the conv weight, adding
 * constants, editing the nodes, checking the scales before taking the
 * pool into the conv) and the fused graph runs (the conv kernel's padded
 * buffer, the head). Each failure must be
 * reported, leak nothing and leave oar usable. */
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
    /* 2 quantizes moved (through the pool and the flatten), the conv and the linear fused, the 2 x 2
     * pool into the conv */
    if (!st && oar_graph_run_pass(g, "fuse_qlinear") != 5) st = -1;
    if (!st && !(ex = oar_executor_new(g))) st = -1;
    if (!st) st = oar_executor_run(ex, &x, &y);
    oar_executor_free(ex);
    oar_graph_free(g);
    return st;
}

static oar_tensor *Wc, *bc, *Wl;
static int cnn_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    const int64_t one[2] = {1, 1}, two[2] = {2, 2}, zero[2] = {0, 0};
    oar_tensor *h = oar_relu(oar_conv2d(in[0], Wc, bc, one, one, one, 1));
    h = oar_max_pool2d(h, two, two, zero, one, false, NULL);
    out[0] = oar_matmul(oar_reshape(h, 2, (int64_t[]){oar_tensor_shape(h)[0], 5 * 4 * 4}), Wl);
    return out[0] ? 0 : -1;
}

static void test_every_allocation_fails_cleanly(void) {
    Wc = oar_randn(OAR_F32, 4, (int64_t[]){5, 3, 3, 3});
    bc = oar_randn(OAR_F32, 1, (int64_t[]){5});
    Wl = oar_randn(OAR_F32, 2, (int64_t[]){5 * 4 * 4, 3});
    x = oar_randn(OAR_F32, 4, (int64_t[]){2, 3, 8, 8});
    oar_graph_input_spec s = {.name = "x", .dtype = OAR_F32, .ndim = 4, .shape = {-1, 3, 8, 8}};
    quantized = oar_trace(cnn_fn, NULL, 1, &s, 1, NULL);
    CHECK(quantized && oar_graph_quantize(quantized, &(oar_quantize_config){.n_batches = 1, .batches = &x}) == 2);
    CHECK(step() == 0);
    int failures, n = fail_each_allocation(step, &failures);
    printf("failed each of %d allocations of fuse_qlinear (conv) + run\n", n);
    CHECK(failures > 20);
    CHECK(n < 100000);
    oar_graph_free(quantized);
    oar_tensor_release(x);
    oar_tensor_release(Wc);
    oar_tensor_release(bc);
    oar_tensor_release(Wl);
}

int main(void) {
    oar_set_allocator(failing_alloc, NULL);
    RUN(test_every_allocation_fails_cleanly);
    oar_memory_empty_cache();
    oar_set_allocator(NULL, NULL);
    return test_summary();
}

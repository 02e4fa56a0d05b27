/* Out of memory in prepack_conv (invariant 5 of docs/architecture.md):
 * the Nth host allocation fails, for every N, while the pass packs a
 * small CNN's conv weights (the packed constants, Winograd's filter
 * transforms among them, the node edits) and the
 * packed graph runs (oneDNN's reorder buffers and scratchpad, or the
 * unpacked weight without oneDNN). Each failure must be reported, leak
 * nothing and leave oar usable. */
#include "alloc_fail_loop.h"

static oar_graph *traced;
static oar_tensor *x, *W0, *W1, *b1, *W2;

/* the two Winograd convs (order 2) in any build, the stride-2 one on oneDNN */
#ifdef OAR_TEST_WITH_DNNL
enum { PACKED = 3 };
#else
enum { PACKED = 2 };
#endif

/* A clone of the traced graph packed and run; 0 on success. */
static int step(void) {
    oar_graph *g = oar_graph_clone(traced);
    oar_executor *ex = NULL;
    oar_tensor *y = NULL;
    int st = g ? 0 : -1;
    if (!st && oar_graph_run_pass(g, "prepack_conv") != PACKED) st = -1;
    if (!st && !(ex = oar_executor_new(g))) st = -1;
    if (!st) st = oar_executor_run(ex, &x, &y);
    oar_executor_free(ex);
    oar_graph_free(g);
    return st;
}

static int cnn_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    oar_tensor *h = oar_relu(oar_conv2d(in[0], W0, NULL, (int64_t[]){1, 1}, (int64_t[]){1, 1}, (int64_t[]){1, 1}, 1));
    h = oar_relu(oar_conv2d(h, W1, b1, (int64_t[]){1, 1}, (int64_t[]){1, 1}, (int64_t[]){1, 1}, 1));
    out[0] = oar_conv2d(h, W2, NULL, (int64_t[]){2, 2}, (int64_t[]){0, 0}, (int64_t[]){1, 1}, 1);
    return out[0] ? 0 : -1;
}

static void test_every_allocation_fails_cleanly(void) {
    W0 = oar_randn(OAR_F32, 4, (int64_t[]){16, 16, 3, 3});
    W1 = oar_randn(OAR_F32, 4, (int64_t[]){24, 16, 3, 3});
    b1 = oar_randn(OAR_F32, 1, (int64_t[]){24});
    W2 = oar_randn(OAR_F32, 4, (int64_t[]){16, 24, 3, 3});
    x = oar_randn(OAR_F32, 4, (int64_t[]){2, 16, 21, 22});
    oar_graph_input_spec s = {.name = "x", .dtype = OAR_F32, .ndim = 4, .shape = {-1, 16, 21, 22}};
    traced = oar_trace(cnn_fn, NULL, 1, &s, 1, NULL);
    CHECK(traced != NULL);
    CHECK(step() == 0);
    int failures, n = fail_each_allocation(step, &failures);
    printf("failed each of %d allocations of prepack_conv+run\n", n);
    CHECK(failures > 20);
    CHECK(n < 100000);
    oar_graph_free(traced);
    oar_tensor_release(x);
    oar_tensor_release(W0);
    oar_tensor_release(W1);
    oar_tensor_release(b1);
    oar_tensor_release(W2);
}

int main(void) {
    oar_set_allocator(failing_alloc, NULL);
    RUN(test_every_allocation_fails_cleanly);
    oar_memory_empty_cache();
    oar_set_allocator(NULL, NULL);
    return test_summary();
}

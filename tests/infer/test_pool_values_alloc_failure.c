/* Out of memory in pool_values (invariant 5 of docs/architecture.md): the
 * Nth host allocation fails, for every N, while the pass rewrites a
 * graph's max pools (its use counts, the compaction) and the rewritten
 * graph runs. Each failure must be reported, leak nothing and leave oar
 * usable. */
#include "alloc_fail_loop.h"

static oar_graph *traced;
static oar_tensor *x;

static int step(void) {
    oar_graph *g = oar_graph_clone(traced);
    oar_executor *ex = NULL;
    oar_tensor *y = NULL;
    int st = g ? 0 : -1;
    if (!st && oar_graph_run_pass(g, "pool_values") != 2) st = -1;
    if (!st && !(ex = oar_executor_new(g))) st = -1;
    if (!st) st = oar_executor_run(ex, &x, &y);
    oar_executor_free(ex);
    oar_graph_free(g);
    return st;
}

static int pools_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    const int64_t k3[2] = {3, 3}, s2[2] = {2, 2}, p1[2] = {1, 1}, p0[2] = {0, 0}, d1[2] = {1, 1};
    oar_tensor *h = oar_max_pool2d(oar_relu(in[0]), k3, s2, p1, d1, false, NULL);
    out[0] = oar_max_pool2d(h, s2, s2, p0, d1, false, NULL);
    return out[0] ? 0 : -1;
}

static void test_every_allocation_fails_cleanly(void) {
    x = oar_randn(OAR_F32, 4, (int64_t[]){2, 3, 17, 15});
    oar_graph_input_spec s = {.name = "x", .dtype = OAR_F32, .ndim = 4, .shape = {-1, 3, 17, 15}};
    traced = oar_trace(pools_fn, NULL, 1, &s, 1, NULL);
    CHECK(traced != NULL);
    CHECK(step() == 0);
    int failures, n = fail_each_allocation(step, &failures);
    printf("failed each of %d allocations of pool_values+run\n", n);
    CHECK(failures > 10);
    CHECK(n < 100000);
    oar_graph_free(traced);
    oar_tensor_release(x);
}

int main(void) {
    oar_set_allocator(failing_alloc, NULL);
    RUN(test_every_allocation_fails_cleanly);
    oar_memory_empty_cache();
    oar_set_allocator(NULL, NULL);
    return test_summary();
}

/* Out of memory is bad input too (invariant 5 of docs/architecture.md): make the Nth host
 * allocation fail, for every N, in a forward and backward pass of a small
 * model. Each run must report the failure through the API, leak nothing
 * and leave oar usable. */
#include "test.h"
#include "alloc_fail_loop.h" /* failing_alloc, fail_each_allocation_with */

static oar_tensor *w1, *b1, *w2, *x, *y;

/* One forward and backward pass; 0 on success. */
static int step(void) {
    oar_pool *p = oar_pool_push();
    if (!p) return -1;
    oar_tensor *h = oar_tanh(oar_add(oar_matmul(x, w1), b1));
    oar_tensor *out = oar_matmul(h, w2);
    oar_tensor *loss = oar_mean(oar_square(oar_sub(out, y)), 0, NULL, false);
    oar_tensor *params[3] = {w1, b1, w2}, *grads[3] = {NULL, NULL, NULL};
    int st = loss ? oar_grad(1, &loss, NULL, 3, params, false, false, grads) : -1;
    oar_pool_pop(p);
    return st;
}

static void test_every_allocation_fails_cleanly(void) {
    int64_t sw1[2] = {8, 16}, sb1[1] = {16}, sw2[2] = {16, 4}, sx[2] = {5, 8}, sy[2] = {5, 4};
    oar_manual_seed(1);
    w1 = oar_randn(OAR_F64, 2, sw1);
    b1 = oar_randn(OAR_F64, 1, sb1);
    w2 = oar_randn(OAR_F64, 2, sw2);
    x = oar_randn(OAR_F64, 2, sx);
    y = oar_randn(OAR_F64, 2, sy);
    CHECK(w1 && b1 && w2 && x && y);
    oar_tensor_set_requires_grad(w1, true);
    oar_tensor_set_requires_grad(b1, true);
    oar_tensor_set_requires_grad(w2, true);
    CHECK(step() == 0); /* warm up: pools and caches reach their steady size */
    int failures, n = fail_each_allocation_with(step, &failures, (fail_loop_opts){.cold = true});
    printf("failed each of %d allocations of a forward+backward step (%d failures)\n", n, failures);
    CHECK(failures > n / 2); /* most of a step's allocations are ones whose failure must surface */
    CHECK(n < 100000);
    oar_tensor *all[5] = {w1, b1, w2, x, y};
    for (int i = 0; i < 5; i++) oar_tensor_release(all[i]);
}

int main(void) {
    oar_set_allocator(failing_alloc, NULL);
    RUN(test_every_allocation_fails_cleanly);
    oar_memory_empty_cache();
    oar_set_allocator(NULL, NULL);
    return test_summary();
}

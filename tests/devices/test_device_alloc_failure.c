/* Out of memory on a device path (invariant 5 of docs/architecture.md): on the mock
 * device of tests/devices/plugins/ (whose buffers come from the host's
 * allocator, so the hook fails them too), a step that moves tensors to the
 * device, runs ops with and without device kernels (the CPU fallback), a
 * 0-d CPU input following the device, a backward pass, and first and
 * second order gradients through moves of a CPU leaf, is run with
 * the Nth host allocation failing, for every N. Each run reports "out of
 * memory", leaks nothing and leaves oar usable. */
#include "test.h"

#include <stdlib.h>
#include "alloc_fail_loop.h"

static oar_device *dev;
static oar_tensor *w, *x;

static int step(void) {
    oar_pool *p = oar_pool_push();
    if (!p) return -1;
    oar_tensor *dw = oar_tensor_to(w, dev), *dx = oar_tensor_to(x, dev);
    int st = dw && dx ? oar_tensor_set_requires_grad(dw, true) : -1;
    /* add runs on the mock; matmul, tanh, mul, sum fall back to the CPU */
    oar_tensor *loss = oar_sum(oar_mul(oar_tanh(oar_add(oar_matmul(dx, dw), dx)), oar_scalar(0.5)),
                               0, NULL, false);
    oar_tensor *g = NULL;
    if (!st) st = loss ? oar_grad(1, &loss, NULL, 1, &dw, false, false, &g) : -1;
    if (!st && !oar_tensor_to(g, oar_device_cpu())) st = -1;
    /* a CPU leaf moved with grad: gradients come back through to_device,
     * to second order */
    oar_tensor *lw = st ? NULL : oar_clone(w), *g1 = NULL, *g2 = NULL;
    if (!st) st = lw ? oar_tensor_set_requires_grad(lw, true) : -1;
    oar_tensor *l1 = st ? NULL : oar_sum(oar_tensor_to(oar_tanh(oar_mul(oar_tensor_to(lw, dev), dx)),
                                                       oar_device_cpu()), 0, NULL, false);
    if (!st) st = l1 ? oar_grad(1, &l1, NULL, 1, &lw, true, false, &g1) : -1;
    oar_tensor *l2 = st ? NULL : oar_sum(oar_square(g1), 0, NULL, false);
    if (!st) st = l2 ? oar_grad(1, &l2, NULL, 1, &lw, false, false, &g2) : -1;
    oar_pool_pop(p);
    return st;
}

static void test_every_allocation_fails_cleanly(void) {
    dev = oar_device_get("mock:0");
    CHECK(dev != NULL);
    if (!dev) return;
    int64_t s[2] = {4, 4};
    oar_manual_seed(3);
    w = oar_randn(OAR_F32, 2, s);
    x = oar_randn(OAR_F32, 2, s);
    CHECK(step() == 0);
    int failures, n = fail_each_allocation_with(step, &failures, (fail_loop_opts){.cold = true, .live_only = true});
    printf("failed each of %d allocations of a device step\n", n);
    CHECK(failures > n / 2 && n > 10);
    CHECK(n < 100000);
    oar_tensor_release(w);
    oar_tensor_release(x);
}

int main(void) {
    setenv("OAR_PLUGIN_PATH", OAR_TEST_PLUGIN_DIR, 1);
    setenv("OAR_PLUGIN_NO_INSTALL_DIR", "1", 1);
    oar_set_allocator(failing_alloc, NULL);
    oar_device_count(); /* load the plugins (refusals are logged once) */
    RUN(test_every_allocation_fails_cleanly);
    oar_memory_empty_cache();
    oar_set_allocator(NULL, NULL);
    return test_summary();
}

/* Out of memory is bad input too (DESIGN.md invariant 5): make the Nth host
 * allocation fail, for every N, in a forward and backward pass of a small
 * model. Each run must report the failure through the API, leak nothing
 * and leave oar usable. */
#include "test.h"

static long fail_at = -1; /* index of the allocation to fail; -1: none */
static long n_calls;      /* allocations seen since the counter was reset */
static long live;         /* blocks currently allocated through the hook */

static void *failing_alloc(void *ctx, void *ptr, size_t old_size, size_t new_size) {
    (void)ctx;
    (void)old_size;
    if (new_size == 0) {
        if (ptr) live--;
        free(ptr);
        return NULL;
    }
    if (fail_at >= 0 && n_calls++ == fail_at) return NULL;
    void *q = realloc(ptr, new_size);
    if (q && !ptr) live++;
    return q;
}

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
    oar_memory_empty_cache();
    oar_memory_stats base_stats;
    oar_memory_stats_get(&base_stats);
    long base_live = live;

    int failures = 0, n;
    for (n = 0; n < 100000; n++) {
        oar_memory_empty_cache(); /* cold caches: the step allocates everything it uses */
        n_calls = 0;
        fail_at = n;
        oar_clear_error();
        int st = step();
        fail_at = -1;
        if (st == 0 && n_calls <= n) break; /* every allocation of a step has been failed once */
        if (st != 0) {
            failures++;
            if (!strstr(oar_last_error(), "out of memory")) {
                test_failed++;
                fprintf(stderr, "allocation %d failed with message \"%s\"\n", n, oar_last_error());
            }
        }
        oar_memory_empty_cache();
        oar_memory_stats s;
        oar_memory_stats_get(&s);
        if (s.bytes_in_use != base_stats.bytes_in_use || live != base_live) {
            test_failed++;
            fprintf(stderr, "after failing allocation %d: %zu bytes in use (base %zu), %ld live blocks "
                    "(base %ld)\n", n, s.bytes_in_use, base_stats.bytes_in_use, live, base_live);
            break;
        }
        if (step() != 0) { /* oar is still usable */
            test_failed++;
            fprintf(stderr, "oar unusable after failing allocation %d: %s\n", n, oar_last_error());
            break;
        }
    }
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

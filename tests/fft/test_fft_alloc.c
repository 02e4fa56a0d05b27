/* Out of memory inside the FFT path: the Nth host allocation fails, for
 * every N, in a forward and backward pass through rfft / fft / irfft, each
 * run on lengths never planned before (a half-length real plan and a
 * Bluestein plan with its power-of-two sub-plan), so planning fails at
 * every point too. Each run must report a failure it could not absorb,
 * leave nothing allocated beyond the plans it finished (which the cache
 * keeps) and leave oar usable. */
#include "test.h"

#include "backends/cpu/fft_engine.h"
#include "alloc_fail.h"

static oar_tensor *x;

/* lengths: even m (real plan of m, complex plan of m/2) and prime-ish q > 2m (Bluestein) */
static int step(int64_t m, int64_t q) {
    oar_pool *p = oar_pool_push();
    if (!p) return -1;
    oar_tensor *X = oar_fft_rfft(x, m, -1, "ortho");
    oar_tensor *Y = oar_fft_fft(X, q, -1, NULL);
    oar_tensor *z = oar_fft_irfft(oar_fft_ifft(Y, q, -1, NULL), m, -1, "ortho");
    oar_tensor *loss = z ? oar_sum(oar_square(z), 0, NULL, false) : NULL;
    oar_tensor *g = NULL;
    int st = loss ? oar_grad(1, &loss, NULL, 1, &x, false, false, &g) : -1;
    oar_pool_pop(p);
    return st;
}

static void test_every_allocation_fails_cleanly(void) {
    int64_t sx[2] = {3, 40};
    oar_manual_seed(3);
    x = oar_randn(OAR_F64, 2, sx);
    CHECK(x != NULL);
    oar_tensor_set_requires_grad(x, true);
    /* warm up on other lengths: pools at every depth, kernel caches, the
     * tape's buffers reach their steady size (they are kept by design) */
    CHECK(step(40, 97) == 0);
    CHECK(step(42, 101) == 0);
    int n, reported = 0;
    for (n = 0; n < 100000; n++) {
        int64_t m = 2 * (100 + n), q = 4 * (100 + n) + 37 + 2 * (n % 3); /* never seen before */
        oar_memory_empty_cache();
        long before = live - oari_fft_plan_cache_blocks();
        n_calls = 0;
        fail_at = n;
        oar_clear_error();
        int st = step(m, q);
        fail_at = -1;
        bool reached = n_calls > n;
        if (st) {
            reported++;
            if (!oar_last_error()[0]) {
                test_failed++;
                fprintf(stderr, "allocation %d failed without a message\n", n);
            }
        }
        oar_memory_empty_cache();
        long after = live - oari_fft_plan_cache_blocks();
        if (after != before) {
            test_failed++;
            fprintf(stderr, "allocation %d failed (status %d): %ld blocks leaked\n", n, st, after - before);
        }
        if (!reached) break;
    }
    CHECK(reported > 10);
    printf("%d allocation points, %d failures reported\n", n, reported);
    CHECK(step(200, 839) == 0);
    oar_tensor_release(x);
}

int main(void) {
    oar_set_allocator(failing_alloc, NULL);
    RUN(test_every_allocation_fails_cleanly);
    oar_memory_empty_cache();
    oar_set_allocator(NULL, NULL);
    return test_summary();
}

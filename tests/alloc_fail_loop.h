/* The failing-allocation loop of the failure tests: runs step() with
 * allocation n failing, for n = 0, 1, ... until a run needs no more than n
 * allocations. Each failure must say "out of memory" (any message with
 * any_message), leave the bytes in use (unless live_only) and the live
 * blocks as they were, and leave oar usable (step() succeeds right after).
 * cold: the block cache is emptied before every run, so the run allocates
 * everything it uses. Install the hook (oar_set_allocator with
 * failing_alloc) and make step() succeed once before calling it. Returns
 * how many allocations were failed in turn; *failures counts the runs
 * that failed. */
#ifndef OAR_TEST_ALLOC_FAIL_LOOP_H
#define OAR_TEST_ALLOC_FAIL_LOOP_H

#include "alloc_fail.h"
#include "test.h"

typedef struct fail_loop_opts {
    bool cold, any_message, live_only;
} fail_loop_opts;

static inline int fail_each_allocation_with(int (*step)(void), int *failures, fail_loop_opts o) {
    oar_memory_empty_cache();
    oar_memory_stats base;
    oar_memory_stats_get(&base);
    long base_live = live;
    int n;
    *failures = 0;
    for (n = 0; n < 200000; n++) {
        if (o.cold) oar_memory_empty_cache();
        n_calls = 0;
        fail_at = n;
        oar_clear_error();
        int st = step();
        fail_at = -1;
        if (st == 0 && n_calls <= n) break;
        if (st != 0) {
            (*failures)++;
            if (o.any_message ? !oar_last_error()[0] : !strstr(oar_last_error(), "out of memory")) {
                test_failed++;
                fprintf(stderr, "allocation %d failed with message \"%s\"\n", n, oar_last_error());
            }
        }
        oar_memory_empty_cache();
        oar_memory_stats s;
        oar_memory_stats_get(&s);
        if ((!o.live_only && s.bytes_in_use != base.bytes_in_use) || live != base_live) {
            test_failed++;
            fprintf(stderr, "after failing allocation %d: %zu bytes in use (base %zu), %ld live blocks "
                    "(base %ld); last error \"%s\"\n", n, s.bytes_in_use, base.bytes_in_use, live, base_live,
                    oar_last_error());
            break;
        }
        if (step() != 0) {
            test_failed++;
            fprintf(stderr, "oar unusable after failing allocation %d: %s\n", n, oar_last_error());
            break;
        }
    }
    return n;
}

static inline int fail_each_allocation(int (*step)(void), int *failures) {
    return fail_each_allocation_with(step, failures, (fail_loop_opts){0});
}

#endif

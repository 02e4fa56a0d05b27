/* An allocation hook for the failure-path tests: with fail_at >= 0, the
 * allocation numbered fail_at (counting from 0 in n_calls) fails; live
 * counts the blocks held, so a test can check that nothing leaked.
 * Install with oar_set_allocator(failing_alloc, NULL). */
#ifndef OAR_TEST_ALLOC_FAIL_H
#define OAR_TEST_ALLOC_FAIL_H

#include <stdlib.h>

static long fail_at = -1, n_calls, live;

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

#endif

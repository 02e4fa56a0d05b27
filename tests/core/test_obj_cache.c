/* The per-thread free lists of small objects (tensor and storage structs,
 * tape nodes): a steady loop calls the allocation hook for none of them,
 * oar_memory_empty_cache returns the calling thread's to the hook, and a
 * thread's own lists go back to the hook when it exits. */
#include "test.h"

#include <pthread.h>

static long live, calls;

static void *counting_alloc(void *ctx, void *ptr, size_t old_size, size_t new_size) {
    (void)ctx;
    (void)old_size;
    if (new_size == 0) {
        if (ptr) live--;
        free(ptr);
        return NULL;
    }
    calls++;
    void *q = realloc(ptr, new_size);
    if (q && !ptr) live++;
    return q;
}

static oar_tensor *w, *seed;

/* A few recorded ops and a backward on tiny tensors (seeded with ones:
 * no reduction kernel, whose scratch buffer is not a tape object); 0 on
 * success. */
static int step(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *h = w;
    for (int i = 0; i < 20; i++) h = i % 2 ? oar_sin(h) : oar_mul(h, w);
    int st = h ? oar_backward(h, seed) : -1;
    oar_tensor_zero_grad(w);
    oar_pool_pop(p);
    return st;
}

static void test_steady_loop_calls_no_hook(void) {
    CHECK(step() == 0);
    CHECK(step() == 0);
    long before = calls;
    for (int i = 0; i < 10; i++) CHECK(step() == 0);
    CHECK(calls == before);
}

static void test_empty_cache_returns_objects(void) {
    oar_memory_empty_cache();
    long base = live;
    CHECK(step() == 0);
    CHECK(live > base); /* freed objects are kept */
    oar_memory_empty_cache();
    CHECK(live == base);
}

static void *thread_main(void *arg) {
    (void)arg;
    for (int i = 0; i < 3; i++)
        if (step()) return (void *)1;
    return NULL;
}

static void test_thread_exit_returns_objects(void) {
    oar_memory_empty_cache();
    long base = live;
    pthread_t t;
    void *ret = (void *)1;
    CHECK(pthread_create(&t, NULL, thread_main, NULL) == 0);
    CHECK(pthread_join(t, &ret) == 0);
    CHECK(ret == NULL);
    oar_memory_empty_cache(); /* storage blocks the thread freed into the shared block cache */
    CHECK(live == base);
}

int main(void) {
    oar_set_allocator(counting_alloc, NULL);
    int64_t four = 4;
    w = oar_full(OAR_F32, 1, &four, 0.5);
    seed = oar_full(OAR_F32, 1, &four, 1.0);
    oar_tensor_set_requires_grad(w, true);
    RUN(test_steady_loop_calls_no_hook);
    RUN(test_empty_cache_returns_objects);
    RUN(test_thread_exit_returns_objects);
    oar_tensor_release(w);
    oar_tensor_release(seed);
    oar_memory_empty_cache();
    oar_set_allocator(NULL, NULL);
    return test_summary();
}

/* Host memory: the one allocation hook every byte goes through, and the
 * CPU device's caching block allocator with its counters.
 *
 * Freed storage blocks are kept in per-size-class free lists (four classes
 * per power of two) so a steady training loop makes no new system
 * allocations: on our VMs first touch of a fresh page costs ~12 us and glibc
 * unmaps large blocks on free. */
#include "core.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Under AddressSanitizer, objects on the free lists and blocks in the
 * cache are poisoned: a use after release, or a second release, is
 * reported like a use after free (tests/core/test_misuse.c). The link to
 * the next free one sits in a free one's last 8 bytes, which stay
 * unpoisoned: LeakSanitizer skips pointers in poisoned memory, and the
 * last bytes of a size class are the ones an object least often uses. */
#if defined(__SANITIZE_ADDRESS__)
#define OARI_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define OARI_ASAN 1
#endif
#endif
#ifdef OARI_ASAN
#include <sanitizer/asan_interface.h>
#define POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

/* The free-list link of a free object or block of `size` bytes. */
static inline void **link_of(void *p, size_t size) { return (void **)((char *)p + size - sizeof(void *)); }

static void *default_alloc(void *ctx, void *ptr, size_t old_size, size_t new_size) {
    (void)ctx;
    (void)old_size;
    if (new_size == 0) {
        free(ptr);
        return NULL;
    }
    return realloc(ptr, new_size);
}

static oar_alloc_fn alloc_fn = default_alloc;
static void *alloc_ctx;

void *oari_malloc(size_t n) {
    void *p = alloc_fn(alloc_ctx, NULL, 0, n ? n : 1);
    if (!p) oari_nomem("host allocation");
    return p;
}

void *oari_calloc(size_t count, size_t size) {
    if (size && count > SIZE_MAX / size) {
        oari_nomem("host allocation size overflows");
        return NULL;
    }
    void *p = oari_malloc(count * size);
    if (p) memset(p, 0, count * size);
    return p;
}

void *oari_realloc(void *p, size_t old_n, size_t new_n) {
    void *q = alloc_fn(alloc_ctx, p, old_n, new_n ? new_n : 1);
    if (!q) oari_nomem("host reallocation");
    return q;
}

void oari_free(void *p, size_t n) {
    if (p) alloc_fn(alloc_ctx, p, n, 0);
}

/* ---- small objects ------------------------------------------------------
 * Tensor and storage structs, tape nodes and the backward engine's arrays
 * are made and dropped once per op call or backward. Freed ones stay in
 * per-thread free lists and are handed out again, so a steady loop calls
 * the hook for none of them: one list per 64-byte class up to 2 KiB (at
 * most OBJ_KEEP each), then one per power of two up to OBJ_MAX (at most
 * OBJ_KEEP_BIG each). The calling thread's lists go back to the hook in
 * oar_memory_empty_cache, another thread's at its exit (the pthread key's
 * destructor), with its spare pools (a thread keeps those while it lives:
 * pushing a pool must not fail after an oar_memory_empty_cache). */

#define OBJ_SMALL 2048
#define OBJ_SMALL_CLASSES (OBJ_SMALL / 64)
#define OBJ_MAX (64 * 1024)
#define OBJ_CLASSES (OBJ_SMALL_CLASSES + 5) /* 4, 8, 16, 32, 64 KiB */
#define OBJ_KEEP 4096
#define OBJ_KEEP_BIG 16

typedef struct obj_cache {
    void *head[OBJ_CLASSES];
    int count[OBJ_CLASSES];
    bool registered;
} obj_cache;

static _Thread_local obj_cache objs;
static pthread_key_t obj_key;
static pthread_once_t obj_once = PTHREAD_ONCE_INIT;

/* Class of an n-byte object (0 < n <= OBJ_MAX) and its rounded size. */
static int obj_class(size_t n, size_t *size) {
    if (n <= OBJ_SMALL) {
        int k = (int)((n - 1) / 64);
        *size = (size_t)(k + 1) * 64;
        return k;
    }
    int k = OBJ_SMALL_CLASSES;
    size_t c = 2 * OBJ_SMALL;
    while (c < n) c *= 2, k++;
    *size = c;
    return k;
}

static size_t obj_class_size(int k) {
    return k < OBJ_SMALL_CLASSES ? (size_t)(k + 1) * 64
                                 : (size_t)2 * OBJ_SMALL << (k - OBJ_SMALL_CLASSES);
}

static void obj_drain(obj_cache *c) {
    for (int k = 0; k < OBJ_CLASSES; k++) {
        void *p = c->head[k];
        while (p) {
            UNPOISON(p, obj_class_size(k));
            void *next = *link_of(p, obj_class_size(k));
            alloc_fn(alloc_ctx, p, obj_class_size(k), 0);
            p = next;
        }
        c->head[k] = NULL;
        c->count[k] = 0;
    }
}

static void obj_thread_exit(void *c) {
    oari_pool_trim();
    obj_drain(c);
}
static void obj_key_init(void) { pthread_key_create(&obj_key, obj_thread_exit); }

/* Makes sure this thread's lists and spare pools are handed back at its exit. */
void oari_thread_register(void) {
    if (objs.registered) return;
    pthread_once(&obj_once, obj_key_init);
    pthread_setspecific(obj_key, &objs);
    objs.registered = true;
}

void *oari_obj_alloc(size_t n) {
    if (n == 0 || n > OBJ_MAX) return oari_malloc(n);
    size_t size;
    int k = obj_class(n, &size);
    void *p = objs.head[k];
    if (p) {
        UNPOISON(p, size);
        objs.head[k] = *link_of(p, size);
        objs.count[k]--;
        return p;
    }
    return oari_malloc(size);
}

void *oari_obj_calloc(size_t n) {
    void *p = oari_obj_alloc(n);
    if (p) memset(p, 0, n);
    return p;
}

void oari_obj_free(void *p, size_t n) {
    if (!p) return;
    if (n == 0 || n > OBJ_MAX) {
        oari_free(p, n);
        return;
    }
    size_t size;
    int k = obj_class(n, &size);
    if (objs.count[k] >= (k < OBJ_SMALL_CLASSES ? OBJ_KEEP : OBJ_KEEP_BIG)) {
        alloc_fn(alloc_ctx, p, size, 0);
        return;
    }
    oari_thread_register();
    *link_of(p, size) = objs.head[k];
    objs.head[k] = p;
    objs.count[k]++;
    POISON(p, size - sizeof(void *));
}

void *oari_obj_realloc(void *p, size_t old_n, size_t new_n) {
    if (!p) return oari_obj_alloc(new_n);
    size_t old_size = 0, new_size = 0;
    if (old_n && old_n <= OBJ_MAX && new_n && new_n <= OBJ_MAX &&
        obj_class(old_n, &old_size) == obj_class(new_n, &new_size))
        return p;
    void *q = oari_obj_alloc(new_n);
    if (!q) return NULL;
    memcpy(q, p, old_n < new_n ? old_n : new_n);
    oari_obj_free(p, old_n);
    return q;
}

char *oari_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = oari_malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

void oari_strfree(char *s) {
    if (s) oari_free(s, strlen(s) + 1);
}

/* ---- the block cache --------------------------------------------------- */

#define ALIGN 64
#define N_CLASSES (16 + 52 * 4) /* up to 2^62 bytes */

typedef struct free_block free_block; /* a cached block; its link: link_of() */

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static free_block *free_lists[N_CLASSES];
static oar_memory_stats stats;

/* Size classes: 64-byte steps up to 1 KiB, then 4 per power of two. */
static int size_class(size_t n, size_t *rounded) {
    if (n <= 1024) {
        size_t r = (n + 63) & ~(size_t)63;
        if (r == 0) r = 64;
        *rounded = r;
        return (int)(r / 64) - 1; /* 0..15 */
    }
    int log2 = 63 - __builtin_clzll((unsigned long long)(n - 1)); /* n-1 < 2^(log2+1) */
    size_t base = (size_t)1 << log2;                             /* base < n <= 2*base */
    size_t quarter = base / 4;
    size_t steps = (n - base + quarter - 1) / quarter;           /* 1..4 */
    *rounded = base + steps * quarter;
    int cls = 16 + (log2 - 10) * 4 + (int)steps - 1;
    return cls < N_CLASSES ? cls : -1;
}

/* A block is [raw ... pad | aligned data of `rounded` bytes]; the raw pointer
 * sits in the 8 bytes before the aligned pointer. */
static void *system_block(size_t rounded) {
    if (rounded > SIZE_MAX - ALIGN - sizeof(void *)) return NULL;
    char *raw = alloc_fn(alloc_ctx, NULL, 0, rounded + ALIGN + sizeof(void *));
    if (!raw) return NULL;
    uintptr_t a = ((uintptr_t)raw + sizeof(void *) + ALIGN - 1) & ~(uintptr_t)(ALIGN - 1);
    ((void **)a)[-1] = raw;
    return (void *)a;
}

static void system_free(void *p, size_t rounded) {
    alloc_fn(alloc_ctx, ((void **)p)[-1], rounded + ALIGN + sizeof(void *), 0);
}

oari_memory_observer_fn oari_memory_observer;

static void tell_observer(size_t bytes_in_use, int delta) { /* under cache_lock */
    oari_memory_observer_fn f = __atomic_load_n(&oari_memory_observer, __ATOMIC_RELAXED);
    if (__builtin_expect(f != NULL, 0)) f(bytes_in_use, delta);
}

static void count_alloc(size_t rounded) { /* under cache_lock */
    stats.n_allocs++;
    stats.bytes_in_use += rounded;
    if (stats.bytes_in_use > stats.peak_bytes) stats.peak_bytes = stats.bytes_in_use;
    tell_observer(stats.bytes_in_use, 1);
}

void *oari_cpu_block_alloc(size_t nbytes) {
    size_t rounded;
    int cls = size_class(nbytes, &rounded);
    pthread_mutex_lock(&cache_lock);
    if (cls >= 0 && free_lists[cls]) {
        free_block *b = free_lists[cls];
        UNPOISON(b, rounded);
        free_lists[cls] = *link_of(b, rounded);
        stats.bytes_cached -= rounded;
        stats.n_cache_hits++;
        count_alloc(rounded);
        pthread_mutex_unlock(&cache_lock);
        return b;
    }
    pthread_mutex_unlock(&cache_lock);
    if (cls < 0) rounded = nbytes;
    void *p = system_block(rounded);
    if (!p) {
        /* Give the cache back to the system and try once more. */
        oar_memory_empty_cache();
        p = system_block(rounded);
    }
    if (!p) {
        oari_error(OAR_ERR_NOMEM, "out of memory: cannot allocate %zu bytes of tensor storage",
                   nbytes);
        return NULL;
    }
    pthread_mutex_lock(&cache_lock);
    stats.n_system_allocs++;
    count_alloc(rounded);
    pthread_mutex_unlock(&cache_lock);
    return p;
}

void oari_cpu_block_free(void *p, size_t nbytes) {
    if (!p) return;
    size_t rounded;
    int cls = size_class(nbytes, &rounded);
    pthread_mutex_lock(&cache_lock);
    if (cls < 0) {
        stats.bytes_in_use -= nbytes;
        tell_observer(stats.bytes_in_use, -1);
        pthread_mutex_unlock(&cache_lock);
        system_free(p, nbytes);
        return;
    }
    stats.bytes_in_use -= rounded;
    tell_observer(stats.bytes_in_use, -1);
    stats.bytes_cached += rounded;
    free_block *b = p;
    *link_of(b, rounded) = free_lists[cls];
    free_lists[cls] = b;
    POISON(b, rounded - sizeof(void *));
    pthread_mutex_unlock(&cache_lock);
}

void oar_memory_empty_cache(void) {
    obj_drain(&objs);
    pthread_mutex_lock(&cache_lock);
    for (int c = 0; c < N_CLASSES; c++) {
        free_block *b = free_lists[c];
        free_lists[c] = NULL;
        size_t rounded = c < 16 ? (size_t)(c + 1) * 64 : 0;
        if (c >= 16) {
            int log2 = (c - 16) / 4 + 10;
            size_t base = (size_t)1 << log2;
            rounded = base + (size_t)((c - 16) % 4 + 1) * (base / 4);
        }
        while (b) {
            UNPOISON(b, rounded);
            free_block *next = *link_of(b, rounded);
            stats.bytes_cached -= rounded;
            system_free(b, rounded);
            b = next;
        }
    }
    pthread_mutex_unlock(&cache_lock);
}

void oar_memory_stats_get(oar_memory_stats *out) {
    if (!out) {
        oari_null_arg(__func__, "out");
        return;
    }
    pthread_mutex_lock(&cache_lock);
    *out = stats;
    pthread_mutex_unlock(&cache_lock);
}

void oar_memory_reset_peak(void) {
    pthread_mutex_lock(&cache_lock);
    stats.peak_bytes = stats.bytes_in_use;
    pthread_mutex_unlock(&cache_lock);
}

void oar_set_allocator(oar_alloc_fn fn, void *ctx) {
    oar_memory_empty_cache();
    alloc_fn = fn ? fn : default_alloc;
    alloc_ctx = fn ? ctx : NULL;
}

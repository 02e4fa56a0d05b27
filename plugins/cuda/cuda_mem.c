/* The CUDA plugin's execution order and memory: one stream per device on
 * which the plugin queues all its work (kernels, cuBLAS, NCCL, copies),
 * a caching allocator of device blocks, and host <-> device copies through
 * pinned staging buffers.
 *
 * Stream: made on a device's first use with cudaStreamNonBlocking, so it
 * never waits for (or is waited on by) the legacy default stream; every
 * call of the plugin that touches device memory is queued on it in the
 * caller's order, which is what lets freed blocks be handed out again at
 * once (below).
 *
 * Allocator: a request is rounded up to its size class (512 bytes, then
 * four steps per power of two: 640, 768, 896, 1024, 1280, ...; a block
 * wastes under a quarter of its size) and served from that class's list
 * of freed blocks on the device, cudaMalloc only when the list is empty.
 * A freed block goes back on its list without any CUDA call: the work
 * queued on the plugin's stream that still reads or writes it runs before
 * any work its next owner queues there. A freed block that would take the
 * device's cached bytes past the cap is given back with cudaFree instead.
 * The cap is OAR_CUDA_CACHE_BYTES when the plugin loads (bytes, or with a
 * K, M or G suffix), 4G by default; 0 caches nothing and allocates each
 * buffer at its exact size (cudaMalloc/cudaFree per call, as a memory
 * checker wants). When cudaMalloc runs out of memory, the device's cache
 * is given back and the cudaMalloc tried once more. Shutdown gives back
 * every cached block. Blocks are not split or merged: a list serves its
 * class only.
 *
 * Staging: two pinned host buffers of 4 MiB per device (cudaHostAlloc,
 * made on first use and kept), used in turn. A copy to the device copies
 * the host data into one and queues cudaMemcpyAsync from it (the caller
 * may reuse its memory at once; the next use of that buffer first waits
 * for the event recorded after the copy), so it returns without waiting
 * for the device. A copy to the host queues cudaMemcpyAsync into one,
 * waits for the event after it (so for everything queued before it on
 * the stream) and copies out, the next piece already queued into the
 * other buffer. Where pinned memory cannot be had, a copy goes straight
 * from the caller's memory and waits for the stream. */
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_device.h"

#define MEM_CLASSES 224                  /* class 0: 512 bytes; 1 + 4 (e - 9) + q: (5 + q) 2^(e - 2) */
#define MEM_STAGE_BYTES ((size_t)4 << 20) /* each of the two staging buffers */
#define MEM_DEFAULT_CAP ((size_t)4 << 30)

typedef struct mem_block {
    void *ptr;
    struct mem_block *next;
} mem_block;

typedef struct {
    pthread_mutex_t lock;       /* stream creation, the lists, cached */
    pthread_mutex_t stage_lock; /* the staging buffers */
    cudaStream_t stream;        /* the plugin's stream, made on first use */
    mem_block *free_list[MEM_CLASSES];
    mem_block *spare; /* list nodes not in use */
    size_t cached;    /* bytes of the blocks on the lists */
    void *stage[2];
    cudaEvent_t stage_done[2]; /* recorded after the last copy from or into each */
    int next_stage;
    bool no_pinned; /* cudaHostAlloc failed: copies go straight from the caller's memory */
} mem_dev;

static const oar_host_api *mem_host;
static mem_dev mem_devs[OAR_CUDA_MAX_DEV];
static size_t mem_cap = MEM_DEFAULT_CAP;
static bool mem_ready, mem_shut;

static int mem_fail(const char *what, cudaError_t e) {
    char msg[256];
    snprintf(msg, sizeof msg, "cuda: %s failed: %s", what, cudaGetErrorString(e));
    (void)cudaGetLastError(); /* the runtime's last error, so a later call does not see it */
    return mem_host->error(-4, msg);
}

/* OAR_CUDA_CACHE_BYTES: a count of bytes with an optional K, M or G suffix;
 * false if it is not one. */
static bool mem_parse_cap(const char *s, size_t *out) {
    char *end;
    if (*s < '0' || *s > '9') return false; /* (strtoull would take "-1" and spaces) */
    unsigned long long v = strtoull(s, &end, 10);
    unsigned shift = 0;
    if (*end == 'K' || *end == 'k') shift = 10;
    else if (*end == 'M' || *end == 'm') shift = 20;
    else if (*end == 'G' || *end == 'g') shift = 30;
    if (shift) end++;
    if (*end || v > (~0ULL >> shift)) return false;
    *out = (size_t)(v << shift);
    return true;
}

void oar_cuda_mem_init(const oar_host_api *h) {
    mem_host = h;
    if (!mem_ready) {
        for (int i = 0; i < OAR_CUDA_MAX_DEV; i++) {
            pthread_mutex_init(&mem_devs[i].lock, NULL);
            pthread_mutex_init(&mem_devs[i].stage_lock, NULL);
        }
        mem_ready = true;
    }
    mem_shut = false;
    mem_cap = MEM_DEFAULT_CAP;
    const char *env = getenv("OAR_CUDA_CACHE_BYTES");
    if (env && *env && !mem_parse_cap(env, &mem_cap)) {
        char msg[160];
        snprintf(msg, sizeof msg, "OAR_CUDA_CACHE_BYTES=\"%.40s\" is not a byte count (e.g. 512M, 2G, 0); "
                                  "the cache keeps at most 4G per device", env);
        h->log(OAR_LOG_WARN, "cuda", msg);
    }
}

size_t oar_cuda_mem_cap(void) { return mem_cap; }

/* The size class of n bytes (n <= 2^62) and its block size. */
static int mem_class(size_t n, size_t *size) {
    if (n <= 512) return *size = 512, 0;
    int e = 63 - __builtin_clzll((unsigned long long)(n - 1)); /* 2^e < n <= 2^(e + 1), e >= 9 */
    size_t step = (size_t)1 << (e - 2);
    size_t k = (n + step - 1) / step; /* 5..8 */
    *size = k * step;
    return 1 + 4 * (e - 9) + (int)(k - 5);
}

cudaStream_t oar_cuda_stream(int dev) {
    mem_dev *d = &mem_devs[dev];
    cudaStream_t s = __atomic_load_n(&d->stream, __ATOMIC_ACQUIRE);
    if (s) return s;
    if (oar_cuda_use_device(dev)) return NULL;
    pthread_mutex_lock(&d->lock);
    cudaError_t e = cudaSuccess;
    if (!d->stream) {
        e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
        if (e == cudaSuccess) __atomic_store_n(&d->stream, s, __ATOMIC_RELEASE);
    }
    s = d->stream;
    pthread_mutex_unlock(&d->lock);
    if (!s) mem_fail("cudaStreamCreateWithFlags (the plugin's stream)", e);
    return s;
}

/* Waits for d's stream before a block goes back to CUDA: work queued
 * there may still use it (cudaFree waits for the device too, but the
 * plugin does not lean on that). */
static void mem_drain(mem_dev *d) {
    cudaStream_t s = __atomic_load_n(&d->stream, __ATOMIC_ACQUIRE);
    if (s) cudaStreamSynchronize(s);
}

/* Gives back every cached block of d; the bytes given back. */
static size_t mem_flush(mem_dev *d) {
    mem_drain(d);
    pthread_mutex_lock(&d->lock);
    mem_block *all = NULL;
    for (int c = 0; c < MEM_CLASSES; c++) {
        while (d->free_list[c]) {
            mem_block *b = d->free_list[c];
            d->free_list[c] = b->next;
            b->next = all;
            all = b;
        }
    }
    size_t n = d->cached;
    d->cached = 0;
    pthread_mutex_unlock(&d->lock);
    while (all) { /* cudaFree outside the lock: it waits for the device */
        mem_block *b = all;
        all = b->next;
        cudaFree(b->ptr);
        b->ptr = NULL;
        pthread_mutex_lock(&d->lock);
        b->next = d->spare;
        d->spare = b;
        pthread_mutex_unlock(&d->lock);
    }
    return n;
}

void *oar_cuda_mem_alloc(int dev, size_t n) {
    mem_dev *d = &mem_devs[dev];
    size_t size = n ? n : 4;
    int c = -1;
    if (n > ((size_t)1 << 62)) {
        char msg[96];
        snprintf(msg, sizeof msg, "cuda: %zu bytes on cuda:%d is more than any device has", n, dev);
        mem_host->error(-4, msg);
        return NULL;
    }
    if (mem_cap) {
        c = mem_class(n, &size);
        pthread_mutex_lock(&d->lock);
        mem_block *b = d->free_list[c];
        void *p = NULL;
        if (b) {
            d->free_list[c] = b->next;
            d->cached -= size;
            p = b->ptr;
            b->next = d->spare;
            d->spare = b;
        }
        pthread_mutex_unlock(&d->lock);
        if (p) return p;
    }
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, size);
    if (e == cudaErrorMemoryAllocation && mem_flush(d) > 0) {
        (void)cudaGetLastError();
        e = cudaMalloc(&p, size);
    }
    if (e != cudaSuccess) {
        char what[96];
        snprintf(what, sizeof what, "cudaMalloc of %zu bytes on cuda:%d", size, dev);
        mem_fail(what, e);
        return NULL;
    }
    return p;
}

void oar_cuda_mem_free(int dev, void *p, size_t n) {
    if (!p) return;
    mem_dev *d = &mem_devs[dev];
    size_t size;
    if (!mem_cap || mem_shut || n > ((size_t)1 << 62)) {
        mem_drain(d);
        cudaFree(p);
        return;
    }
    int c = mem_class(n, &size);
    pthread_mutex_lock(&d->lock);
    mem_block *b = NULL;
    if (size <= mem_cap - d->cached) {
        b = d->spare;
        if (b) d->spare = b->next;
        else b = mem_host->alloc(sizeof *b);
        if (b) {
            b->ptr = p;
            b->next = d->free_list[c];
            d->free_list[c] = b;
            d->cached += size;
        }
    }
    pthread_mutex_unlock(&d->lock);
    if (!b) { /* past the cap, or no list node */
        mem_drain(d);
        cudaFree(p);
    }
}

size_t oar_cuda_mem_cached(int dev) {
    mem_dev *d = &mem_devs[dev];
    pthread_mutex_lock(&d->lock);
    size_t n = d->cached;
    pthread_mutex_unlock(&d->lock);
    return n;
}

/* The staging buffers of d (stage_lock held); false where there is no
 * pinned memory (the copy then goes straight from the caller's memory). */
static bool mem_stage_ready(mem_dev *d) {
    if (d->stage[1]) return true;
    if (d->no_pinned) return false;
    for (int i = 0; i < 2; i++) {
        if (cudaHostAlloc(&d->stage[i], MEM_STAGE_BYTES, cudaHostAllocDefault) != cudaSuccess) d->stage[i] = NULL;
        if (d->stage[i] && cudaEventCreateWithFlags(&d->stage_done[i], cudaEventDisableTiming) != cudaSuccess) {
            cudaFreeHost(d->stage[i]);
            d->stage[i] = NULL;
        }
        if (!d->stage[i]) {
            (void)cudaGetLastError();
            if (i == 1) {
                cudaEventDestroy(d->stage_done[0]);
                cudaFreeHost(d->stage[0]);
                d->stage[0] = NULL;
            }
            d->no_pinned = true;
            mem_host->log(OAR_LOG_WARN, "cuda", "no pinned host memory for staging: copies go from pageable memory");
            return false;
        }
    }
    d->next_stage = 0;
    return true;
}

int oar_cuda_mem_to_device(int dev, void *dst, const void *src, size_t n) {
    mem_dev *d = &mem_devs[dev];
    cudaStream_t s = oar_cuda_stream(dev);
    if (!s) return -4;
    if (!n) return 0;
    cudaError_t e = cudaSuccess;
    pthread_mutex_lock(&d->stage_lock);
    if (!mem_stage_ready(d)) {
        e = cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, s);
        if (e == cudaSuccess) e = cudaStreamSynchronize(s); /* the caller may reuse src when this returns */
    } else {
        for (size_t off = 0; off < n && e == cudaSuccess; off += MEM_STAGE_BYTES) {
            size_t len = n - off < MEM_STAGE_BYTES ? n - off : MEM_STAGE_BYTES;
            int b = d->next_stage;
            d->next_stage ^= 1;
            e = cudaEventSynchronize(d->stage_done[b]); /* the last copy out of it is done */
            if (e != cudaSuccess) break;
            memcpy(d->stage[b], (const char *)src + off, len);
            e = cudaMemcpyAsync((char *)dst + off, d->stage[b], len, cudaMemcpyHostToDevice, s);
            if (e == cudaSuccess) e = cudaEventRecord(d->stage_done[b], s);
        }
    }
    pthread_mutex_unlock(&d->stage_lock);
    return e == cudaSuccess ? 0 : mem_fail("a copy to the device", e);
}

int oar_cuda_mem_to_host(int dev, void *dst, const void *src, size_t n) {
    mem_dev *d = &mem_devs[dev];
    cudaStream_t s = oar_cuda_stream(dev);
    if (!s) return -4;
    if (!n) return 0;
    cudaError_t e = cudaSuccess;
    pthread_mutex_lock(&d->stage_lock);
    if (!mem_stage_ready(d)) {
        e = cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, s);
        if (e == cudaSuccess) e = cudaStreamSynchronize(s);
    } else {
        /* piece k goes into buffer b_k and is copied out after piece k + 1 is queued */
        size_t off = 0, p_off = 0, p_len = 0;
        int pending = -1;
        while (e == cudaSuccess && (off < n || pending >= 0)) {
            int b = -1;
            size_t len = n - off < MEM_STAGE_BYTES ? n - off : MEM_STAGE_BYTES;
            if (off < n) {
                b = d->next_stage;
                d->next_stage ^= 1;
                e = cudaMemcpyAsync(d->stage[b], (const char *)src + off, len, cudaMemcpyDeviceToHost, s);
                if (e == cudaSuccess) e = cudaEventRecord(d->stage_done[b], s);
                if (e != cudaSuccess) break;
            }
            if (pending >= 0) {
                e = cudaEventSynchronize(d->stage_done[pending]); /* and all queued before it */
                if (e != cudaSuccess) break;
                memcpy((char *)dst + p_off, d->stage[pending], p_len);
            }
            pending = b;
            p_off = off;
            p_len = len;
            if (b >= 0) off += len;
        }
    }
    pthread_mutex_unlock(&d->stage_lock);
    return e == cudaSuccess ? 0 : mem_fail("a copy to the host", e);
}

void oar_cuda_mem_shutdown(void) {
    for (int i = 0; i < OAR_CUDA_MAX_DEV; i++) {
        mem_dev *d = &mem_devs[i];
        if (d->stream || d->cached || d->stage[0]) oar_cuda_use_device(i); /* (a device never used: none) */
        mem_flush(d);
        pthread_mutex_lock(&d->lock);
        while (d->spare) {
            mem_block *b = d->spare;
            d->spare = b->next;
            mem_host->free(b, sizeof *b);
        }
        pthread_mutex_unlock(&d->lock);
        pthread_mutex_lock(&d->stage_lock);
        if (d->stage[1])
            for (int k = 0; k < 2; k++) {
                cudaEventSynchronize(d->stage_done[k]);
                cudaEventDestroy(d->stage_done[k]);
                cudaFreeHost(d->stage[k]);
                d->stage[k] = NULL;
            }
        d->no_pinned = false;
        pthread_mutex_unlock(&d->stage_lock);
        if (d->stream) {
            cudaStreamSynchronize(d->stream);
            cudaStreamDestroy(d->stream);
            d->stream = NULL;
        }
    }
    mem_shut = true; /* a buffer freed after this goes straight to cudaFree */
}

/* The device-memory members of the test plugins whose "device" memory is
 * host memory (mock, halfmock, fakecoll): buffers from the host's
 * allocator, copies by memcpy. Declares `host` (set by the plugin's init)
 * and counts the live buffers (host_buffers_live) for plugins that check
 * for leaks at shutdown. */
#ifndef OAR_TEST_HOST_MEMORY_H
#define OAR_TEST_HOST_MEMORY_H

#include <oar/device.h>
#include <string.h>

static const oar_host_api *host;
static int host_buffers_live;

static void *alloc(void *ctx, int index, size_t n) {
    (void)ctx, (void)index;
    void *p = host->alloc(n ? n : 1);
    if (p) host_buffers_live++;
    return p;
}

static void release(void *ctx, int index, void *p, size_t n) {
    (void)ctx, (void)index;
    host->free(p, n ? n : 1);
    host_buffers_live--;
}

static int to_dev(void *ctx, int index, void *dst, size_t off, const void *src, size_t n) {
    (void)ctx, (void)index;
    memcpy((char *)dst + off, src, n);
    return 0;
}

static int to_host(void *ctx, int index, void *dst, const void *src, size_t off, size_t n) {
    (void)ctx, (void)index;
    memcpy(dst, (const char *)src + off, n);
    return 0;
}

#endif

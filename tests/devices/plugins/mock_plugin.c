/* A device plugin for the tests: two "mock" devices whose memory is host
 * memory from the host's allocator. It claims only add and fill in f32, so
 * every other op exercises oar's CPU fallback. Built against
 * <oar/device.h> alone, as every plugin is.
 *
 * Built a second time with OAR_TEST_MOCK_V10 as a plugin of ABI 1.0 (type
 * "oldmock", one device): its table declares the 1.0 size, and the member
 * past it (supports_op, which would refuse everything) must not be read. */
#define OAR_DEVICE_PLUGIN_ONLY
#include <oar/device.h>

#include <stdlib.h>
#include <string.h>

#include "host_memory.h"

#ifdef OAR_TEST_MOCK_V10
#define TYPE "oldmock"
#define N_DEVICES 1
#define VERSION ((1 << 16) | 0)
#define TABLE_SIZE offsetof(oar_device_iface, supports_op) /* the 1.0 table */
#else
#define TYPE "mock"
#define N_DEVICES 2
#define VERSION OAR_DEVICE_ABI_VERSION
#define TABLE_SIZE sizeof(oar_device_iface)
#endif

static int count(void *ctx) { (void)ctx; return N_DEVICES; }

static int props(void *ctx, int index, oar_device_props *out) {
    (void)ctx;
    strcpy(out->name, index ? "mock device B" : "mock device A");
    out->total_memory = 1u << 30;
    return 0;
}


/* Element offset of the i-th element (row-major) of a strided view. */
static int64_t at(const oar_ktensor *t, int64_t i) {
    int64_t off = t->offset;
    for (int d = t->ndim - 1; d >= 0; d--) {
        off += (i % t->shape[d]) * t->strides[d];
        i /= t->shape[d];
    }
    return off;
}

static int64_t numel(const oar_ktensor *t) {
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
    return n;
}

static int k_add(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    float *o = c->out[0].buffer;
    const float *a = c->in[0].buffer, *b = c->in[1].buffer;
    if (c->in[0].dtype != 6 || c->in[1].dtype != 6)
        return host->error(-3, "mock add: inputs must be f32");
    for (int64_t i = 0, n = numel(&c->out[0]); i < n; i++)
        o[at(&c->out[0], i)] = a[at(&c->in[0], i)] + b[at(&c->in[1], i)];
    return 0;
}

static int k_fill(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    float *o = c->in[0].buffer;
    for (int64_t i = 0, n = numel(&c->in[0]); i < n; i++) o[at(&c->in[0], i)] = (float)c->fattr[0];
    return 0;
}

static oar_kernel_fn get_kernel(void *ctx, int index, const char *op, int32_t dtype) {
    (void)ctx, (void)index;
    if (dtype != 6) return NULL;
    if (!strcmp(op, "add")) return k_add;
    if (!strcmp(op, "fill")) return k_fill;
    return NULL;
}

/* add claims f32 inputs only (a cast input would reach it otherwise) */
static int supports(void *ctx, int index, const oar_kernel_call *c) {
    (void)ctx, (void)index;
#ifdef OAR_TEST_MOCK_V10
    return 0; /* never read: it lies past the declared table size */
#endif
    for (int i = 0; i < c->n_in; i++)
        if (c->in[i].dtype != 6) return 0;
    return 1;
}

/* (ABI 1.4) bf16 emulated, f16 native: the answers test_plugin_loader
 * expects; past the 1.0 table, so never read for oldmock. For
 * test_amp_device, OAR_TEST_MOCK_NATIVE_BF16 (read at each call) makes
 * bf16 native ("1") or the answer a failure ("fail"). */
static int native_dot(void *ctx, int index, int32_t dtype) {
    (void)ctx, (void)index;
    const char *v = dtype == 5 ? getenv("OAR_TEST_MOCK_NATIVE_BF16") : NULL; /* bf16 */
    if (v && !strcmp(v, "fail")) return host->error(-3, "mock native_dot: made to fail (OAR_TEST_MOCK_NATIVE_BF16)");
    if (v && !strcmp(v, "1")) return 1;
    return dtype == 4; /* f16 */
}

static const oar_device_iface iface = {
    .abi_version = VERSION,
    .struct_size = TABLE_SIZE,
    .type_name = TYPE,
    .device_count = count,
    .get_props = props,
    .alloc = alloc,
    .free = release,
    .copy_to_device = to_dev,
    .copy_to_host = to_host,
    .get_kernel = get_kernel,
    .supports_op = supports,
    .native_dot = native_dot,
};

static void shutdown(void *ctx) {
    (void)ctx;
    if (host_buffers_live) {
        char msg[64];
        memcpy(msg, "buffers still allocated at exit", 32);
        host->log(OAR_LOG_DEBUG, "mock", msg);
    }
}

__attribute__((visibility("default"))) int oar_plugin_init(const oar_host_api *h,
                                                           oar_plugin_desc *out) {
    host = h;
    out->abi_version = VERSION;
    out->name = TYPE;
    out->iface = &iface;
    out->shutdown = shutdown;
    return 0;
}

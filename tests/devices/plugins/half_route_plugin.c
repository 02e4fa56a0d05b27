/* A device plugin for tests/devices/test_device_half_route.c: one
 * "halfmock" device (host memory) whose supports_op refuses some calls of
 * kernels it has, to check which route oar's planner takes for f16/bf16:
 * - add in f32, claimed for dense inputs of rank <= 2 only (a kernel with
 *   limits on shapes and strides, as real devices have);
 * - add in f16, claimed for rank-1 inputs only;
 * - cast between f32 and f16/bf16, claimed for those dtypes;
 * - copy (an executor's inputs into its arena) between views of one shape
 *   in those dtypes.
 * With OAR_TEST_HALFMOCK_NO_HALF_CAST=1 in the environment when it loads,
 * it has no cast kernel to f16 or bf16 (get_kernel answers NULL; its
 * supports_op, like OpenCL's, asks only about the source dtype), so it
 * can cast f16/bf16 to f32 but not back.
 * Every kernel checks its own claim and fails on a call supports_op
 * refused, so a refused kernel that runs fails the op. It counts its calls
 * (oar_test_half_route_calls) so the test sees which kernels ran. Built
 * against <oar/device.h> alone, as every plugin is. */
#include <oar/device.h>

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { DT_F16 = 4, DT_BF16 = 5, DT_F32 = 6 };
enum { CALLS_ADD_F32, CALLS_ADD_F16, CALLS_CAST, N_CALLS };

#include "host_memory.h"
static long calls[N_CALLS];
static bool no_half_cast; /* OAR_TEST_HALFMOCK_NO_HALF_CAST: no cast kernel to f16/bf16 */

/* Calls of one kind of kernel so far: 0 add f32, 1 add f16, 2 cast; -1 resets all. */
__attribute__((visibility("default"))) long oar_test_half_route_calls(int kind) {
    if (kind < 0) {
        memset(calls, 0, sizeof calls);
        return 0;
    }
    return kind < N_CALLS ? calls[kind] : -1;
}

static int count(void *ctx) {
    (void)ctx;
    return 1;
}

static int props(void *ctx, int index, oar_device_props *out) {
    (void)ctx, (void)index;
    strcpy(out->name, "half route mock");
    out->total_memory = 1u << 30;
    return 0;
}


#include "half_bits.h"

static float load(const oar_ktensor *t, int64_t e) {
    const char *b = t->buffer;
    switch (t->dtype) {
    case DT_F16:
        return f16_to_f32(((const uint16_t *)(const void *)b)[e]);
    case DT_BF16:
        return bf16_to_f32(((const uint16_t *)(const void *)b)[e]);
    default:
        return ((const float *)(const void *)b)[e];
    }
}

static void store(const oar_ktensor *t, int64_t e, float v) {
    char *b = t->buffer;
    switch (t->dtype) {
    case DT_F16:
        ((uint16_t *)(void *)b)[e] = f32_to_f16(v);
        break;
    case DT_BF16:
        ((uint16_t *)(void *)b)[e] = f32_to_bf16(v);
        break;
    default:
        ((float *)(void *)b)[e] = v;
    }
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
    for (int d = 0; d < t->ndim; d++)
        n *= t->shape[d];
    return n;
}

/* ---- the claims, shared by supports_op and the kernels' own checks ------ */
static bool is_float(int32_t dt) { return dt == DT_F16 || dt == DT_BF16 || dt == DT_F32; }

/* Row-major with no gaps (dims of extent 1 may have any stride). */
static bool is_dense(const oar_ktensor *t) {
    int64_t want = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (t->shape[d] != 1 && t->strides[d] != want) return false;
        want *= t->shape[d];
    }
    return true;
}

/* add in dtype dt: both inputs of dt; in f32 dense and of rank <= 2, in
 * f16 of rank 1 */
static bool add_claims(int32_t dt, const oar_kernel_call *c) {
    if (c->n_in != 2 || (dt != DT_F32 && dt != DT_F16)) return false;
    for (int i = 0; i < 2; i++) {
        const oar_ktensor *t = &c->in[i];
        if (t->dtype != dt || t->ndim > (dt == DT_F32 ? 2 : 1)) return false;
        if (dt == DT_F32 && !is_dense(t)) return false;
    }
    return true;
}

static bool cast_claims(const oar_kernel_call *c) {
    return c->n_in == 1 && c->n_iattr == 1 && is_float(c->in[0].dtype) &&
           is_float((int32_t)c->iattr[0]) && (c->in[0].dtype == DT_F32) != (c->iattr[0] == DT_F32);
}

/* copy_(dst = in[0], src = in[1]) */
static bool copy_claims(const oar_kernel_call *c) {
    if (c->n_in != 2 || !is_float(c->in[0].dtype) || !is_float(c->in[1].dtype)) return false;
    if (c->in[0].ndim != c->in[1].ndim) return false;
    for (int d = 0; d < c->in[0].ndim; d++)
        if (c->in[0].shape[d] != c->in[1].shape[d]) return false;
    return true;
}

static int add(const oar_kernel_call *c, int32_t dt, int kind) {
    calls[kind]++;
    if (!add_claims(dt, c))
        return host->error(-3, "halfmock add: called on inputs its supports_op refused");
    for (int64_t i = 0, n = numel(&c->out[0]); i < n; i++)
        store(&c->out[0], at(&c->out[0], i),
              load(&c->in[0], at(&c->in[0], i)) + load(&c->in[1], at(&c->in[1], i)));
    return 0;
}

static int k_add_f32(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    return add(c, DT_F32, CALLS_ADD_F32);
}
static int k_add_f16(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    return add(c, DT_F16, CALLS_ADD_F16);
}

static int k_cast(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    calls[CALLS_CAST]++;
    if (!cast_claims(c) || c->out[0].dtype != c->iattr[0])
        return host->error(-3, "halfmock cast: called on a cast its supports_op refused");
    for (int64_t i = 0, n = numel(&c->out[0]); i < n; i++)
        store(&c->out[0], at(&c->out[0], i), load(&c->in[0], at(&c->in[0], i)));
    return 0;
}

static int k_copy(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    if (!copy_claims(c))
        return host->error(-3, "halfmock copy: called on views its supports_op refused");
    for (int64_t i = 0, n = numel(&c->in[0]); i < n; i++)
        store(&c->in[0], at(&c->in[0], i), load(&c->in[1], at(&c->in[1], i)));
    return 0;
}

static oar_kernel_fn get_kernel(void *ctx, int index, const char *op, int32_t dtype) {
    (void)ctx, (void)index;
    if (!strcmp(op, "add")) return dtype == DT_F32 ? k_add_f32 : dtype == DT_F16 ? k_add_f16 : NULL;
    if (!strcmp(op, "cast"))
        return is_float(dtype) && !(no_half_cast && dtype != DT_F32) ? k_cast : NULL;
    if (!strcmp(op, "copy")) return is_float(dtype) ? k_copy : NULL;
    return NULL;
}

static int supports(void *ctx, int index, const oar_kernel_call *c) {
    (void)ctx, (void)index;
    if (!strcmp(c->op, "add")) return add_claims(c->n_in ? c->in[0].dtype : -1, c);
    if (!strcmp(c->op, "cast")) return cast_claims(c);
    if (!strcmp(c->op, "copy")) return copy_claims(c);
    return 0;
}

static const oar_device_iface iface = {
    .abi_version = OAR_DEVICE_ABI_VERSION,
    .struct_size = sizeof(oar_device_iface),
    .type_name = "halfmock",
    .device_count = count,
    .get_props = props,
    .alloc = alloc,
    .free = release,
    .copy_to_device = to_dev,
    .copy_to_host = to_host,
    .get_kernel = get_kernel,
    .supports_op = supports,
};

__attribute__((visibility("default"))) int oar_plugin_init(const oar_host_api *h,
                                                           oar_plugin_desc *out) {
    host = h;
    const char *e = getenv("OAR_TEST_HALFMOCK_NO_HALF_CAST");
    no_half_cast = e && !strcmp(e, "1");
    out->abi_version = OAR_DEVICE_ABI_VERSION;
    out->name = "halfmock";
    out->iface = &iface;
    return 0;
}

/* The built-in CPU device: its oar_device_iface table, the same shape a
 * plugin fills, registered at start-up the way the plugin loader registers
 * a plugin's. Memory comes from the caching block allocator; kernels from
 * the per-op tables of this folder (none for ops without device kernels). */
#include "cpu.h"

#include <string.h>
#include <unistd.h>

#define OP(name) extern const oari_cpu_kernels oari_cpu_k_##name;
#define OP_NOKERNEL(name)
#define OP_INSTALLED(name)
#include "../../ops/ops.def"
#undef OP

static const oar_kernel_fn *const kernel_tables[OARI_OP_COUNT] = {
#define OP(name) [OARI_OP_##name] = oari_cpu_k_##name,
#include "../../ops/ops.def"
#undef OP
#undef OP_INSTALLED
#undef OP_NOKERNEL
};

static int cpu_device_count(void *ctx) {
    (void)ctx;
    return 1;
}

static int cpu_get_props(void *ctx, int index, oar_device_props *out) {
    (void)ctx;
    (void)index;
    memset(out, 0, sizeof *out);
    strcpy(out->name, "cpu");
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    if (pages > 0 && page > 0) out->total_memory = (uint64_t)pages * (uint64_t)page;
    return 0;
}

static void *cpu_alloc(void *ctx, int index, size_t nbytes) {
    (void)ctx;
    (void)index;
    return oari_cpu_block_alloc(nbytes);
}

static void cpu_free(void *ctx, int index, void *p, size_t nbytes) {
    (void)ctx;
    (void)index;
    oari_cpu_block_free(p, nbytes);
}

static int cpu_copy_to_device(void *ctx, int index, void *dst, size_t dst_offset, const void *src,
                              size_t nbytes) {
    (void)ctx;
    (void)index;
    if (nbytes) memcpy((char *)dst + dst_offset, src, nbytes);
    return 0;
}

static int cpu_copy_to_host(void *ctx, int index, void *dst, const void *src, size_t src_offset,
                            size_t nbytes) {
    (void)ctx;
    (void)index;
    if (nbytes) memcpy(dst, (const char *)src + src_offset, nbytes);
    return 0;
}

static int cpu_copy_d2d(void *ctx, int index, void *dst, size_t dst_offset, const void *src,
                        size_t src_offset, size_t nbytes) {
    (void)ctx;
    (void)index;
    if (nbytes) memmove((char *)dst + dst_offset, (const char *)src + src_offset, nbytes);
    return 0;
}

static oar_kernel_fn cpu_get_kernel(void *ctx, int index, const char *op, int32_t dtype) {
    (void)ctx;
    (void)index;
    int id = oari_op_lookup(op);
    if (id < 0 || (unsigned)dtype >= OAR_DTYPE_COUNT || !kernel_tables[id]) return NULL;
#ifdef OAR_WITH_DNNL
    /* the oneDNN bf16 kernels, where oneDNN has none: VIA_F32 */
    if (dtype == OAR_BF16 && oari_cpu_bf16_is_dnnl(id) && !oari_dnnl_has_bf16()) return NULL;
#endif
    return kernel_tables[id][dtype];
}

static const oar_device_iface cpu_iface = {
    .abi_version = OAR_DEVICE_ABI_VERSION,
    .struct_size = sizeof(oar_device_iface),
    .type_name = "cpu",
    .device_count = cpu_device_count,
    .get_props = cpu_get_props,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .copy_to_device = cpu_copy_to_device,
    .copy_to_host = cpu_copy_to_host,
    .get_kernel = cpu_get_kernel,
    .copy_device_to_device = cpu_copy_d2d,
    .synchronize = NULL,
    .native_dot = oari_cpu_native_dot,
};

int oari_cpu_install(void) {
    oari_conv_prepack.layout = oari_cpu_conv2d_prepack_layout;
    oari_conv_prepack.pack = oari_cpu_conv2d_pack;
    return oari_device_register(&cpu_iface, NULL, 0);
}

/* The device ABI: the table of C function pointers through which oar reaches
 * every device, the built-in CPU included. A plugin builds against this
 * header alone and links nothing of liboar.
 *
 * Rules of the ABI: every table starts with abi_version and struct_size and
 * only ever grows at its end; a member marked "optional" may be NULL and its
 * comment names the default; dtypes are the integer values of oar_dtype
 * (0 bool, 1 u8, 2 i32, 3 i64, 4 f16, 5 bf16, 6 f32, 7 f64, 8 c64, 9 c128);
 * ops are named by the strings of src/ops/defs/ (the names in docs/ops.md). */
#ifndef OAR_DEVICE_H
#define OAR_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define OAR_DEVICE_ABI_MAJOR 1
#define OAR_DEVICE_ABI_MINOR 0
#define OAR_DEVICE_ABI_VERSION ((OAR_DEVICE_ABI_MAJOR << 16) | OAR_DEVICE_ABI_MINOR)
#define OAR_KERNEL_MAX_DIMS 8

/* A tensor as a kernel sees it: a strided view into a device buffer. */
typedef struct oar_ktensor {
    void *data;        /* element [0,...,0]; valid on devices with host-addressable memory */
    void *buffer;      /* the device allocation the view lives in */
    int64_t offset;    /* element [0,...,0] is `offset` elements into buffer */
    int32_t dtype;
    int32_t ndim;
    int64_t shape[OAR_KERNEL_MAX_DIMS];
    int64_t strides[OAR_KERNEL_MAX_DIMS]; /* in elements; 0 on broadcast dims */
} oar_ktensor;

/* One kernel invocation. Outputs are freshly allocated and contiguous unless
 * an op's definition says otherwise (in-place ops get their target). The
 * meaning of iattr/fattr is documented per op in src/ops/defs/. */
typedef struct oar_kernel_call {
    const char *op;
    int32_t n_in, n_out;
    const oar_ktensor *in;
    const oar_ktensor *out;
    int32_t n_iattr, n_fattr;
    const int64_t *iattr;
    const double *fattr;
} oar_kernel_call;

/* Returns 0 on success, non-zero after reporting through the host's error
 * hook (or, for the built-in CPU device, oar's error state). */
typedef int (*oar_kernel_fn)(void *device_ctx, const oar_kernel_call *call);

typedef struct oar_device_props {
    char name[64];
    uint64_t total_memory;   /* bytes, 0 if unknown */
} oar_device_props;

typedef struct oar_device_iface {
    uint32_t abi_version;    /* OAR_DEVICE_ABI_VERSION the table was built for */
    uint32_t struct_size;    /* sizeof(oar_device_iface) as the plugin saw it */
    const char *type_name;   /* "cpu", "opencl", "cuda": the prefix of "type:index" */

    /* required */
    int (*device_count)(void *ctx);
    int (*get_props)(void *ctx, int index, oar_device_props *out);
    void *(*alloc)(void *ctx, int index, size_t nbytes);            /* NULL on failure */
    void (*free)(void *ctx, int index, void *buffer, size_t nbytes);
    int (*copy_to_device)(void *ctx, int index, void *dst, size_t dst_offset,
                          const void *src, size_t nbytes);
    int (*copy_to_host)(void *ctx, int index, void *dst, const void *src,
                        size_t src_offset, size_t nbytes);
    /* Kernel lookup by op name and dtype (the compute dtype of the call):
     * NULL if the device has none, and oar runs the op on the CPU. */
    oar_kernel_fn (*get_kernel)(void *ctx, int index, const char *op, int32_t dtype);

    /* optional: NULL means copy through host memory */
    int (*copy_device_to_device)(void *ctx, int index, void *dst, size_t dst_offset,
                                 const void *src, size_t src_offset, size_t nbytes);
    /* optional: NULL means the device is always synchronous */
    int (*synchronize)(void *ctx, int index);
} oar_device_iface;

#ifdef __cplusplus
}
#endif
#endif

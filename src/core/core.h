/* Internal core: the tensor and storage structs, error reporting, the host
 * allocator, pools and devices. Everything under src/ includes this. */
#ifndef OARI_CORE_H
#define OARI_CORE_H

#include <oar/device.h>
#include <oar/tensor.h>
#include <stdarg.h>

#define OARI_HIDDEN __attribute__((visibility("hidden")))
#define OARI_PRINTF(a, b) __attribute__((format(printf, a, b)))

/* Extension slots: state that a higher layer hangs on a tensor. Core never
 * looks inside a slot; the layer that owns it registers, at start-up, what
 * to do with its values (oari_ext_register). */
typedef enum oari_ext_slot {
    OARI_EXT_GRAD_FN,  /* autograd: the tape node that made the tensor */
    OARI_EXT_DIST,     /* dist: mesh, placements and local shard of a dtensor */
    OARI_EXT_TRACE,    /* graph: the symbolic value while tracing (no release) */
    OARI_EXT_COUNT
} oari_ext_slot;

typedef struct oari_ext_class {
    /* Drops the slot's value when its tensor dies; NULL: nothing to drop. */
    void (*release)(void *value);
    /* Another reference to the value, kept by autograd for a saved tensor
     * without storage (a dtensor); NULL when the slot is never saved. */
    void *(*retain)(void *value);
    /* A tensor of this dtype and shape carrying the value again (a saved
     * dtensor unpacked); a new reference, or NULL with the error set. */
    oar_tensor *(*remake)(void *value, oar_dtype dtype, int ndim, const int64_t *shape);
} oari_ext_class;

/* Installs the class of a slot (at start-up, by the slot's layer). */
OARI_HIDDEN void oari_ext_register(oari_ext_slot slot, const oari_ext_class *cls);
/* The class of a slot: never NULL (an empty class until registered). */
OARI_HIDDEN const oari_ext_class *oari_ext_class_of(oari_ext_slot slot);

/* A device buffer shared by every view of it. */
typedef struct oari_storage {
    int refcount;           /* atomic */
    uint32_t version;       /* bumped by every in-place write; autograd checks it */
    oar_device *device;
    void *data;             /* device buffer (host pointer on the CPU) */
    size_t nbytes;
} oari_storage;

struct oar_tensor {
    int refcount;           /* atomic */
    oar_dtype dtype;
    int ndim;
    int64_t shape[OAR_MAX_DIMS];
    int64_t strides[OAR_MAX_DIMS]; /* in elements */
    int64_t offset;                /* in elements */
    int64_t numel;
    oari_storage *storage;  /* NULL for symbolic (traced) tensors */
    bool wrapped_number;    /* made by oar_scalar(): weak in type promotion */

    /* Autograd's plain data stays here: dispatch reads requires_grad on
     * every call, grad is a tensor core can release itself, and
     * output_index is an int. The node (grad_fn) is a slot. */
    bool requires_grad;
    int output_index;              /* which output of the grad_fn node it is */
    oar_tensor *grad;              /* accumulated by oar_backward */

    void *ext[OARI_EXT_COUNT];     /* extension slots, NULL when unused */
};

/* ---- errors: one message per thread ------------------------------------ */
OARI_HIDDEN int oari_error(int status, const char *fmt, ...) OARI_PRINTF(2, 3);
OARI_HIDDEN int oari_verror(int status, const char *fmt, va_list ap);
OARI_HIDDEN int oari_nomem(const char *what);   /* "out of memory: <what>" */
/* Formats a shape as "[2, 3, 4]" into buf (size >= 200). Returns buf.
 * Each dim is written by oari_size_str, so while a trace runs a symbolic
 * dim reads as its name: "[N, 3]". */
OARI_HIDDEN const char *oari_shape_str(char *buf, int ndim, const int64_t *shape);
/* Formats one size of a shape for a message into buf (size >= 64): its
 * name if oari_size_namer gives one, else the number. Returns buf. */
OARI_HIDDEN const char *oari_size_str(char *buf, int64_t size);
/* Names a size for messages ("N", "2*N"), writing at most cap bytes to buf
 * and returning true, or returns false (the number is printed). Installed
 * by the tracer (src/graph/trace.c, at start-up): while this thread
 * traces, a dynamic dim's placeholder size reads as the dim's name. A hook,
 * since core sits below the tracer (docs/architecture.md, Layers). */
typedef bool (*oari_size_namer_fn)(int64_t size, char *buf, size_t cap);
OARI_HIDDEN extern oari_size_namer_fn oari_size_namer;
/* For an accessor given a NULL object: sets "<fn>: <what> is NULL", unless
 * an error is pending (the failed call that made the NULL keeps its
 * message). Returns OAR_ERR_INVALID. */
OARI_HIDDEN int oari_null_arg(const char *fn, const char *what);
/* True while an error is pending that a NULL input should preserve. */
OARI_HIDDEN bool oari_error_pending(void);
/* The status the pending error was set with (0 if none): for callers of
 * functions that return NULL on failure. */
OARI_HIDDEN int oari_last_status(void);
/* The status to return after a callee failed: the one its message was set
 * with, or OAR_ERR_NOMEM when it set none. Status and oar_last_error()
 * then agree: a shape error deep inside a gradient rule stays a shape
 * error, not an out-of-memory. */
OARI_HIDDEN int oari_fail_status(void);

/* ---- host allocation: every byte goes through the hook ----------------- */
OARI_HIDDEN void *oari_malloc(size_t n);              /* NULL and error set on failure */
OARI_HIDDEN void *oari_calloc(size_t count, size_t size);
OARI_HIDDEN void *oari_realloc(void *p, size_t old_n, size_t new_n);
OARI_HIDDEN void oari_free(void *p, size_t n);
OARI_HIDDEN char *oari_strdup(const char *s);
OARI_HIDDEN void oari_strfree(char *s);

/* Small objects made once per op call or backward (tensor and storage
 * structs, tape nodes, engine arrays up to 64 KiB): kept in per-thread free
 * lists when freed and reused; pass the same n to free (and as old_n to
 * realloc) as was asked for. Fail like oari_malloc / oari_realloc. */
OARI_HIDDEN void *oari_obj_alloc(size_t n);
OARI_HIDDEN void *oari_obj_calloc(size_t n);
OARI_HIDDEN void *oari_obj_realloc(void *p, size_t old_n, size_t new_n);
OARI_HIDDEN void oari_obj_free(void *p, size_t n);
/* This thread's object lists and spare pools go back to the hook when it
 * exits (called on first use of either). */
OARI_HIDDEN void oari_thread_register(void);
/* Frees this thread's spare (popped) pools; at the thread's exit. */
OARI_HIDDEN void oari_pool_trim(void);

/* Cached storage blocks of the CPU device (64-byte aligned). */
OARI_HIDDEN void *oari_cpu_block_alloc(size_t nbytes);
OARI_HIDDEN void oari_cpu_block_free(void *p, size_t nbytes);
/* Told the bytes in use after each block allocation (delta 1) or free
 * (delta -1), under the allocator's lock so that values are ordered. The
 * profiler sets it while it records (atomically); NULL: nobody listens. */
typedef void (*oari_memory_observer_fn)(size_t bytes_in_use, int delta);
OARI_HIDDEN extern oari_memory_observer_fn oari_memory_observer;

/* ---- shapes ------------------------------------------------------------ */
/* numel of a shape; -1 with an error naming `op` if a dim is negative or the
 * product overflows. */
OARI_HIDDEN int64_t oari_shape_numel(const char *op, int ndim, const int64_t *shape);
OARI_HIDDEN void oari_contiguous_strides(int ndim, const int64_t *shape, int64_t *strides);
/* Normalises a possibly negative dim against ndim; -1 with an error if out
 * of range. */
OARI_HIDDEN int oari_wrap_dim(const char *op, int64_t dim, int ndim);
/* Broadcasts two shapes (PyTorch rules) into out; returns its ndim or -1. */
OARI_HIDDEN int oari_broadcast_shapes(const char *op, int na, const int64_t *a, int nb,
                                      const int64_t *b, int64_t *out);

/* ---- tensors ----------------------------------------------------------- */
/* Internal constructors return references the caller owns (refcount 1, in
 * no pool); public functions hand results to the pool with oari_pool_adopt.
 * A new tensor viewing `storage` (retained). strides NULL means contiguous. */
OARI_HIDDEN oar_tensor *oari_tensor_make(oari_storage *storage, oar_dtype dtype, int ndim,
                                         const int64_t *shape, const int64_t *strides,
                                         int64_t offset);
/* A fresh contiguous tensor on `device` (NULL: CPU). Uninitialised. */
OARI_HIDDEN oar_tensor *oari_tensor_empty(oar_device *device, oar_dtype dtype, int ndim,
                                          const int64_t *shape);
/* A view of x's storage with new geometry (owned by the caller). */
OARI_HIDDEN oar_tensor *oari_tensor_view(oar_tensor *x, int ndim, const int64_t *shape,
                                         const int64_t *strides, int64_t offset);
/* Hands an owned reference to the innermost pool (no-op outside pools) and
 * returns it; on failure releases t and returns NULL. NULL passes through. */
OARI_HIDDEN oar_tensor *oari_pool_adopt(oar_tensor *t);
/* For composite ops: retains r, pops p, and adopts r into the enclosing
 * pool. Returns r or NULL. */
OARI_HIDDEN oar_tensor *oari_pool_return(oar_pool *p, oar_tensor *r);
OARI_HIDDEN void oari_storage_release(oari_storage *s);
OARI_HIDDEN void oari_storage_bump_version(oari_storage *s);
/* Fills a kernel view of t. */
OARI_HIDDEN void oari_ktensor(const oar_tensor *t, oar_ktensor *k);
/* Scalar <-> element conversion for any dtype (host memory). */
OARI_HIDDEN double oari_load_f64(const void *p, oar_dtype dt);
OARI_HIDDEN void oari_store_f64(void *p, oar_dtype dt, double v);
/* A float to int8 as PyTorch on x86 (via int32, then the low byte). */
OARI_HIDDEN int8_t oari_f64_to_i8(double v);

/* ---- f16 / bf16 ---------------------------------------------------------- */
/* Stored in 16 bits, computed in f32 where a device has no kernel of their own. */
static inline bool oari_is_half(oar_dtype d) { return d == OAR_F16 || d == OAR_BF16; }
OARI_HIDDEN float oari_f16_to_f32(uint16_t h);
OARI_HIDDEN uint16_t oari_f32_to_f16(float f);
static inline float oari_bf16_to_f32(uint16_t h) {
    union { uint32_t u; float f; } v = {.u = (uint32_t)h << 16};
    return v.f;
}
static inline uint16_t oari_f32_to_bf16(float f) {
    union { uint32_t u; float f; } v = {.f = f};
    if ((v.u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((v.u >> 16) | 0x40); /* quiet NaN */
    uint32_t rounding = 0x7fffu + ((v.u >> 16) & 1u);        /* round to nearest even */
    return (uint16_t)((v.u + rounding) >> 16);
}

/* ---- devices ------------------------------------------------------------- */
struct oar_device {
    const oar_device_iface *iface;
    void *ctx;
    int index;
    int id;                 /* position in the device registry */
    char name[32];          /* "cpu", "opencl:0" */
};
/* The CPU device: the first device registered (the CPU backend registers
 * itself at start-up, src/init/). */
OARI_HIDDEN extern oar_device *oari_cpu_device;
static inline oar_device *oari_device_cpu(void) { return oari_cpu_device; }
OARI_HIDDEN void *oari_device_alloc(oar_device *d, size_t nbytes);
OARI_HIDDEN void oari_device_free(oar_device *d, void *p, size_t nbytes);
/* ---- devices and plugins (src/core/device.c, plugin_loader.c) ---------- */
#define OARI_MAX_DEVICES 32
/* Adds device `index` of a plugin (or of the built-in CPU backend) as
 * "<type>:<index>"; the first "cpu" becomes oari_device_cpu(). */
OARI_HIDDEN int oari_device_register(const oar_device_iface *iface, void *ctx, int index);
OARI_HIDDEN bool oari_device_type_taken(const char *type);
/* Synchronous copies between host memory and a device buffer (offsets in
 * bytes); 0, or a status with the error set naming the device. */
OARI_HIDDEN int oari_device_to_host(oar_device *d, void *dst, const void *buffer, size_t offset,
                                    size_t n);
OARI_HIDDEN int oari_device_from_host(oar_device *d, void *buffer, size_t offset, const void *src,
                                      size_t n);
/* True after a plugin reported an error through the host table on this
 * thread (reset by the caller before a device call). */
OARI_HIDDEN extern _Thread_local bool oari_device_reported;
/* Scans OAR_PLUGIN_PATH and the install folder once (thread-safe). */
OARI_HIDDEN void oari_plugins_ensure_loaded(void);
/* A line to stderr, "oar: <who>: <msg>" (debug only with OAR_LOG=debug). */
OARI_HIDDEN void oari_log(int level, const char *who, const char *fmt, ...) OARI_PRINTF(3, 4);

/* ---- threads ------------------------------------------------------------- */
/* Below this many elements a loop runs on one thread. */
#define OARI_PARALLEL_GRAIN 32768

#endif

/* oar tensors: dtypes, creation, views, reference counting, pools, memory
 * statistics and the error state. Every function that can fail returns NULL
 * (or a non-zero status) and leaves a message for oar_last_error(). */
#ifndef OAR_TENSOR_H
#define OAR_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define OAR_API __attribute__((visibility("default")))
#else
#define OAR_API
#endif

#define OAR_MAX_DIMS 8

/* ---- version ------------------------------------------------------------ */

/* The version of these headers: the project() VERSION of CMakeLists.txt
 * (tests/infer/test_cli.c keeps the two equal). */
#define OAR_VERSION_MAJOR 0
#define OAR_VERSION_MINOR 1
#define OAR_VERSION_PATCH 0
#define OAR_VERSION "0.1.0"
/* The version of the library linked ("0.1.0"; `oar --version` prints it),
 * which differs from OAR_VERSION when a program built with other headers
 * runs against this liboar. Static string. */
OAR_API const char *oar_version(void);

/* Values are written to disk (graphs, checkpoints): never renumber. */
typedef enum oar_dtype {
    OAR_DTYPE_INVALID = -1,
    OAR_BOOL = 0,
    OAR_U8 = 1,
    OAR_I32 = 2,
    OAR_I64 = 3,
    OAR_F16 = 4,
    OAR_BF16 = 5,
    OAR_F32 = 6,
    OAR_F64 = 7,
    OAR_C64 = 8,
    OAR_C128 = 9,
    OAR_I8 = 10, /* appended after the others: values are stored */
    OAR_DTYPE_COUNT
} oar_dtype;

/* Status codes returned by functions that return int. 0 is success. */
typedef enum oar_status {
    OAR_OK = 0,
    OAR_ERR_INVALID = -1,   /* bad argument: shape, dtype, dim, NULL ... */
    OAR_ERR_NOMEM = -2,     /* an allocation failed */
    OAR_ERR_UNSUPPORTED = -3, /* no kernel for this op, dtype or device */
    OAR_ERR_IO = -4,        /* a file could not be read or written */
    OAR_ERR_STATE = -5,     /* the call is not valid in the current state */
} oar_status;

typedef struct oar_tensor oar_tensor;
typedef struct oar_pool oar_pool;
typedef struct oar_device oar_device;

/* ---- errors ------------------------------------------------------------ */

/* The last error message of the calling thread ("" if none). The pointer
 * stays valid until the thread's next failing call. */
OAR_API const char *oar_last_error(void);
/* Clears the calling thread's error message. */
OAR_API void oar_clear_error(void);
/* A short name for a status code ("invalid argument", ...). */
OAR_API const char *oar_status_string(int status);
/* Sets the calling thread's error message (printf format) and returns
 * status (0 is taken as OAR_ERR_INVALID): for code oar calls back (custom
 * ops' rules, kernels and gradients, include/oar/custom.h) to say why it
 * fails. */
OAR_API int oar_set_error(int status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* ---- dtypes ------------------------------------------------------------ */

/* Bytes per element; 0 for an invalid dtype. */
OAR_API size_t oar_dtype_size(oar_dtype dtype);
/* "float32", "complex64", ...; "invalid" for an invalid dtype. */
OAR_API const char *oar_dtype_name(oar_dtype dtype);
OAR_API bool oar_dtype_is_float(oar_dtype dtype);   /* f16 bf16 f32 f64 */
OAR_API bool oar_dtype_is_complex(oar_dtype dtype); /* c64 c128 */
OAR_API bool oar_dtype_is_integral(oar_dtype dtype); /* bool u8 i8 i32 i64 */
/* PyTorch's promotion of two dtypes (e.g. i64 + f32 -> f32, f32 + c64 ->
 * c64, f16 + bf16 -> f32). Returns -1 for an invalid dtype. One deviation:
 * i8 + u8 is i16 in PyTorch, and oar has no i16, so it gives i32 (the
 * smallest oar dtype that holds both ranges). */
OAR_API int oar_promote_types(oar_dtype a, oar_dtype b);

/* ---- allocation -------------------------------------------------------- */

/* The one host allocation hook (Lua's lua_Alloc). new_size 0 frees ptr and
 * returns NULL; otherwise it behaves as realloc(ptr, new_size) and returns
 * NULL on failure, leaving ptr untouched. */
typedef void *(*oar_alloc_fn)(void *ctx, void *ptr, size_t old_size, size_t new_size);

/* Installs the hook (NULL restores malloc). Call it only while no tensor is
 * alive: blocks are freed through the hook that allocated them. It also
 * empties the allocator cache. */
OAR_API void oar_set_allocator(oar_alloc_fn fn, void *ctx);

typedef struct oar_memory_stats {
    size_t bytes_in_use;     /* tensor storage bytes held by live tensors */
    size_t peak_bytes;       /* high-water mark of bytes_in_use */
    size_t bytes_cached;     /* freed storage kept for reuse */
    uint64_t n_allocs;       /* storage requests served (cache hits included) */
    uint64_t n_system_allocs; /* storage requests that reached the system */
    uint64_t n_cache_hits;   /* storage requests served from the cache */
} oar_memory_stats;

/* Fills *out with the CPU allocator's counters. */
OAR_API void oar_memory_stats_get(oar_memory_stats *out);
/* Resets peak_bytes to bytes_in_use. */
OAR_API void oar_memory_reset_peak(void);
/* Returns every cached free block to the system. */
OAR_API void oar_memory_empty_cache(void);

/* ---- reference counting and pools -------------------------------------- */

/* Adds a reference and returns t (NULL passes through). */
OAR_API oar_tensor *oar_tensor_retain(oar_tensor *t);
/* Drops a reference; frees the tensor at zero. NULL is ignored. */
OAR_API void oar_tensor_release(oar_tensor *t);

/* Every tensor a function returns is owned by the innermost pool of the
 * calling thread when one is open: popping the pool releases it, so a
 * training step inside push/pop frees all its temporaries. Retain what must
 * outlive the pool. With no pool open, the caller owns each result and
 * releases it. Pools nest; pop must get the innermost pool. oar_pool_pop
 * returns 0, or OAR_ERR_STATE (nothing is released) for a pool that is not
 * the innermost one or was already popped, OAR_ERR_INVALID for NULL; push
 * returns NULL when out of memory. */
OAR_API oar_pool *oar_pool_push(void);
OAR_API int oar_pool_pop(oar_pool *p);

/* ---- devices ----------------------------------------------------------- */

/* The built-in CPU device (never NULL). */
OAR_API oar_device *oar_device_cpu(void);
/* A device by name: "cpu", "cpu:0", "opencl:0", ... NULL with an error that
 * lists the available devices if there is no such device. Borrowed. */
OAR_API oar_device *oar_device_get(const char *name);
/* "cpu", "opencl:0". */
OAR_API const char *oar_device_name(const oar_device *d);

/* ---- creation (results follow the pool rule above) --------------------- */

/* A tensor with a copy of `data` (contiguous, row-major, `dtype`). data may
 * be NULL only if the tensor has no elements. ndim 0 makes a scalar. */
OAR_API oar_tensor *oar_tensor_from_data(const void *data, oar_dtype dtype, int ndim,
                                         const int64_t *shape);
/* Uninitialised contiguous storage on `device` (NULL: CPU). */
OAR_API oar_tensor *oar_empty(oar_dtype dtype, int ndim, const int64_t *shape,
                              oar_device *device);
OAR_API oar_tensor *oar_zeros(oar_dtype dtype, int ndim, const int64_t *shape);
OAR_API oar_tensor *oar_ones(oar_dtype dtype, int ndim, const int64_t *shape);
OAR_API oar_tensor *oar_full(oar_dtype dtype, int ndim, const int64_t *shape, double value);
/* Same shape, dtype and device as x. */
OAR_API oar_tensor *oar_zeros_like(oar_tensor *x);
OAR_API oar_tensor *oar_ones_like(oar_tensor *x);
OAR_API oar_tensor *oar_full_like(oar_tensor *x, double value);
/* A 0-d tensor holding v, typed as a Python number is in PyTorch: it does
 * not raise the dtype of tensors it meets (x_f16 * oar_scalar(2) is f16;
 * x_i64 * oar_scalar(0.5) is f32). */
OAR_API oar_tensor *oar_scalar(double v);
/* A 0-d tensor of the given dtype. */
OAR_API oar_tensor *oar_scalar_of(double v, oar_dtype dtype);
/* [start, end) by step, as torch.arange; dtype given explicitly. */
OAR_API oar_tensor *oar_arange(double start, double end, double step, oar_dtype dtype);
/* n evenly spaced values from start to end inclusive (floating dtype). */
OAR_API oar_tensor *oar_linspace(double start, double end, int64_t n, oar_dtype dtype);
/* n x m identity (m < 0: square). */
OAR_API oar_tensor *oar_eye(int64_t n, int64_t m, oar_dtype dtype);

/* ---- random numbers ---------------------------------------------------- */

/* The global generator is Philox4x32-10 keyed by the seed; element i of a
 * draw depends only on (seed, offset, i), never on the number of threads.
 * Each draw advances the offset. */
OAR_API void oar_manual_seed(uint64_t seed);
/* Uniform in [0, 1). Floating dtypes only. */
OAR_API oar_tensor *oar_rand(oar_dtype dtype, int ndim, const int64_t *shape);
/* Standard normal. Floating dtypes only. */
OAR_API oar_tensor *oar_randn(oar_dtype dtype, int ndim, const int64_t *shape);
/* Integers uniform in [low, high). Integral dtypes (bool excluded). */
OAR_API oar_tensor *oar_randint(int64_t low, int64_t high, oar_dtype dtype, int ndim,
                                const int64_t *shape);
/* Each element 1 with probability p[i] (p floating, values in [0, 1]). */
OAR_API oar_tensor *oar_bernoulli(oar_tensor *p);
/* Uniform in [low, high) and normal(mean, std), in place; 0 on success. */
OAR_API int oar_uniform_(oar_tensor *t, double low, double high);
OAR_API int oar_normal_(oar_tensor *t, double mean, double std);

/* ---- properties -------------------------------------------------------- */

OAR_API int oar_tensor_ndim(const oar_tensor *t);        /* -1 for NULL */
OAR_API const int64_t *oar_tensor_shape(const oar_tensor *t); /* borrowed */
OAR_API const int64_t *oar_tensor_strides(const oar_tensor *t); /* in elements */
OAR_API int64_t oar_tensor_offset(const oar_tensor *t);  /* in elements */
OAR_API int64_t oar_tensor_numel(const oar_tensor *t);   /* -1 for NULL */
OAR_API int64_t oar_tensor_dim(const oar_tensor *t, int dim); /* size of dim; negative dims count from the end; -1 on error */
OAR_API oar_dtype oar_tensor_dtype(const oar_tensor *t);
OAR_API oar_device *oar_tensor_device(const oar_tensor *t); /* borrowed */
OAR_API bool oar_tensor_is_contiguous(const oar_tensor *t);
/* True if a and b are views of one storage. */
OAR_API bool oar_tensor_shares_storage(const oar_tensor *a, const oar_tensor *b);
/* Pointer to element [0,...,0] of a CPU tensor (NULL on other devices).
 * Valid while t lives; honour the strides. */
OAR_API void *oar_tensor_data(const oar_tensor *t);

/* Copies the elements (logical row-major order, any strides, any device)
 * to dst as `t`'s dtype. nbytes must equal numel * dtype size. 0 on success. */
OAR_API int oar_tensor_to_host(const oar_tensor *t, void *dst, size_t nbytes);
/* The value of a one-element tensor as a double (real part for complex);
 * NAN with an error set otherwise. */
OAR_API double oar_tensor_item(const oar_tensor *t);

/* Writes "tensor([[1, 2], [3, 4]], dtype=float32)" into buf (truncated to
 * size, always terminated); returns the length it needed, or -1. */
OAR_API int oar_tensor_format(const oar_tensor *t, char *buf, size_t size);
/* Prints the tensor to stdout with a name. */
OAR_API void oar_tensor_print(const oar_tensor *t, const char *name);

#ifdef __cplusplus
}
#endif
#endif

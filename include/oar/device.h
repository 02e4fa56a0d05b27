/* The device ABI: the tables of C function pointers through which oar
 * reaches every device, the built-in CPU included, and the entry point of a
 * device plugin. A plugin builds against this header alone and links
 * nothing of liboar: what it needs from oar (logging, errors, host memory)
 * comes in the oar_host_api table oar hands to its entry point.
 *
 * Rules of the ABI
 * - Every table starts with abi_version and struct_size and only ever grows
 *   at its end. A reader of a table never touches a member that lies past
 *   the struct_size its writer declared: such a member reads as NULL / 0.
 * - abi_version is (major << 16) | minor. oar refuses a plugin whose major
 *   differs from OAR_DEVICE_ABI_MAJOR; a newer minor only adds members at
 *   the ends of tables, so both directions of a minor mismatch load.
 * - A member marked "required" must be non-NULL (the loader refuses the
 *   plugin and names the member); one marked "optional" may be NULL, and
 *   its comment names what oar does then.
 * - dtypes are the integer values of oar_dtype (0 bool, 1 u8, 2 i32, 3 i64,
 *   4 f16, 5 bf16, 6 f32, 7 f64, 8 c64, 9 c128); ops are named by the
 *   strings of src/ops/defs/ (the names in docs/ops.md), their attributes
 *   are documented there.
 * - Status: 0 is success; a non-zero return is an oar status (negative
 *   OAR_ERR_* values of <oar/tensor.h>) reported first through the host's
 *   `error` member, so the user sees the plugin's own message.
 *
 * A plugin in short (plugins/opencl/ is a complete one):
 *
 *     static const oar_device_iface my_iface = {
 *         .abi_version = OAR_DEVICE_ABI_VERSION, .struct_size = sizeof my_iface,
 *         .type_name = "mydev", .device_count = ..., .get_props = ..., ...};
 *     int oar_plugin_init(const oar_host_api *host, oar_plugin_desc *out) {
 *         if (!(out->ctx = my_open(host))) return -1;   // refused, oar keeps running
 *         out->abi_version = OAR_DEVICE_ABI_VERSION;
 *         out->name = "mydev";
 *         out->iface = &my_iface;
 *         return 0;
 *     }
 *
 * Build it as a shared library and put it in <libdir>/oar/plugins next to
 * liboar, or in a folder of OAR_PLUGIN_PATH (see "Plugins load" below);
 * its devices are then "mydev:0", "mydev:1", ... for oar_device_get. */
#ifndef OAR_DEVICE_H
#define OAR_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define OAR_DEVICE_ABI_MAJOR 1
#define OAR_DEVICE_ABI_MINOR 4
#define OAR_DEVICE_ABI_VERSION ((OAR_DEVICE_ABI_MAJOR << 16) | OAR_DEVICE_ABI_MINOR)
#define OAR_KERNEL_MAX_DIMS 8
#define OAR_COMM_ID_BYTES 256 /* at most this many bytes name a communicator (comm_unique_id) */

/* The symbol oar looks up in a plugin, and its signature. */
#define OAR_PLUGIN_INIT_SYMBOL "oar_plugin_init"

/* A tensor as a kernel sees it: a strided view into a device buffer. */
typedef struct oar_ktensor {
    void *data;        /* element [0,...,0]; valid on devices with host-addressable memory */
    void *buffer;      /* the device allocation the view lives in (what alloc returned) */
    int64_t offset;    /* element [0,...,0] is `offset` elements into buffer */
    int32_t dtype;     /* -1 for an optional input passed as NULL */
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
 * hook (or, for the built-in CPU device, oar's error state). A kernel runs
 * in stream order on the device's default stream; oar synchronizes before
 * host reads. */
typedef int (*oar_kernel_fn)(void *device_ctx, const oar_kernel_call *call);

typedef struct oar_device_props {
    char name[64];           /* what the hardware calls itself */
    uint64_t total_memory;   /* bytes, 0 if unknown */
} oar_device_props;

/* Opaque handles a device hands out and gets back. */
typedef void *oar_stream;
typedef void *oar_event;

/* Reductions of the collective hooks. */
typedef enum oar_reduce_op { OAR_REDUCE_SUM = 0, OAR_REDUCE_MAX = 1, OAR_REDUCE_MIN = 2,
                             OAR_REDUCE_AVG = 3, OAR_REDUCE_PROD = 4 } oar_reduce_op;

/* Every member takes the plugin's context (oar_plugin_desc.ctx) and the
 * device index in [0, device_count). Buffers are what alloc returned;
 * offsets are in bytes. */
typedef struct oar_device_iface {
    uint32_t abi_version;    /* OAR_DEVICE_ABI_VERSION the table was built for */
    uint32_t struct_size;    /* sizeof(oar_device_iface) as the plugin saw it */
    const char *type_name;   /* required: "cpu", "opencl", "cuda": the prefix of "type:index" */

    /* required: number of devices (0 is allowed: the plugin loads, no device appears) */
    int (*device_count)(void *ctx);
    /* required */
    int (*get_props)(void *ctx, int index, oar_device_props *out);
    /* required: a buffer of nbytes (nbytes may be 0: return a non-NULL
     * token); NULL on failure (oar reports out of memory naming the device) */
    void *(*alloc)(void *ctx, int index, size_t nbytes);
    /* required: frees what alloc returned; nbytes as given to alloc */
    void (*free)(void *ctx, int index, void *buffer, size_t nbytes);
    /* required: synchronous host -> device copy (returns when src may be reused) */
    int (*copy_to_device)(void *ctx, int index, void *dst, size_t dst_offset,
                          const void *src, size_t nbytes);
    /* required: synchronous device -> host copy (returns when dst holds the data) */
    int (*copy_to_host)(void *ctx, int index, void *dst, const void *src,
                        size_t src_offset, size_t nbytes);
    /* required: kernel lookup by op name and dtype (the compute dtype of the
     * call, which for cast and copy is the output's). NULL if the device has
     * none: oar runs the op on the CPU with copies (and warns once per op). */
    oar_kernel_fn (*get_kernel)(void *ctx, int index, const char *op, int32_t dtype);

    /* optional: NULL means copy through host memory */
    int (*copy_device_to_device)(void *ctx, int index, void *dst, size_t dst_offset,
                                 const void *src, size_t src_offset, size_t nbytes);
    /* optional: waits for all work queued on the device; NULL means the
     * device is always synchronous */
    int (*synchronize)(void *ctx, int index);

    /* ---- ABI 1.1 -------------------------------------------------------- */
    /* optional: a finer check than get_kernel: does the kernel for this
     * call's op and dtype handle these inputs (their dtypes, ranks, strides,
     * attributes)? call->in is as the op got them (before broadcast
     * expansion), call->n_out is 0. Returns 1 yes, 0 no (oar then runs the
     * op on the CPU). NULL means every call of a kernel get_kernel returned
     * is supported. */
    int (*supports_op)(void *ctx, int index, const oar_kernel_call *call);
    /* optional streams: NULL means one implicit in-order stream (a NULL
     * oar_stream); stream_create returns NULL on failure */
    oar_stream (*stream_create)(void *ctx, int index);
    void (*stream_destroy)(void *ctx, int index, oar_stream s);
    /* optional: waits for the work queued on s; NULL means synchronize */
    int (*stream_synchronize)(void *ctx, int index, oar_stream s);
    /* optional events: NULL means oar synchronizes the whole stream instead */
    oar_event (*event_create)(void *ctx, int index);
    void (*event_destroy)(void *ctx, int index, oar_event e);
    int (*event_record)(void *ctx, int index, oar_event e, oar_stream s);
    /* makes stream s wait for e (no host wait) */
    int (*stream_wait_event)(void *ctx, int index, oar_stream s, oar_event e);
    int (*event_synchronize)(void *ctx, int index, oar_event e);
    /* optional asynchronous copies queued on s (src/dst host memory must
     * stay valid until the stream reaches the copy); NULL means the
     * synchronous member above */
    int (*copy_to_device_async)(void *ctx, int index, void *dst, size_t dst_offset,
                                const void *src, size_t nbytes, oar_stream s);
    int (*copy_to_host_async)(void *ctx, int index, void *dst, const void *src,
                              size_t src_offset, size_t nbytes, oar_stream s);
    int (*copy_device_to_device_async)(void *ctx, int index, void *dst, size_t dst_offset,
                                       const void *src, size_t src_offset, size_t nbytes,
                                       oar_stream s);
    /* optional collectives over `count` elements of `dtype` among the
     * devices of a communicator the plugin made (comm: the plugin's handle,
     * e.g. an NCCL communicator made by comm_create below; rank/peer:
     * positions in it). send/recv are buffers alloc returned, read and
     * written from their start (send == recv: in place); all_gather's recv
     * holds the ranks' parts in rank order, reduce_scatter's send the
     * parts for every rank in rank order. A call may be queued on stream s
     * (NULL: the default one): oar synchronizes the device before it reads
     * the result. NULL means the device has none: oar's distributed layer
     * then moves the data through host memory and MPI.
     * broadcast: every rank gets the count elements of rank `root`'s send
     * in its recv (in place when send == recv). send and recv: count
     * elements to or from rank `peer`; messages between two ranks in one
     * direction match in the order they were sent. A send may wait until
     * the peer has posted the matching recv (as ncclSend outside a group
     * does), and there are no group calls, so oar orders the messages of a
     * move so that no cycle of waits can form: every rank handles its
     * peers in one global order of pairs (min(rank, peer), max(rank,
     * peer)), and within a pair the lower rank sends, then receives, the
     * higher receives, then sends. A recv may likewise wait for its send.
     * oar calls send and recv only on a device that has both and the
     * three communicator members below. */
    int (*all_reduce)(void *ctx, int index, void *comm, const void *send, void *recv,
                      size_t count, int32_t dtype, oar_reduce_op op, oar_stream s);
    int (*all_gather)(void *ctx, int index, void *comm, const void *send, void *recv,
                      size_t send_count, int32_t dtype, oar_stream s);
    int (*reduce_scatter)(void *ctx, int index, void *comm, const void *send, void *recv,
                          size_t recv_count, int32_t dtype, oar_reduce_op op, oar_stream s);
    int (*broadcast)(void *ctx, int index, void *comm, const void *send, void *recv,
                     size_t count, int32_t dtype, int root, oar_stream s);
    int (*send)(void *ctx, int index, void *comm, const void *buf, size_t count, int32_t dtype,
                int peer, oar_stream s);
    int (*recv)(void *ctx, int index, void *comm, void *buf, size_t count, int32_t dtype,
                int peer, oar_stream s);

    /* ---- ABI 1.2 -------------------------------------------------------- */
    /* optional communicators for the collectives above: oar calls those
     * only on a device that has all three of these (NULL: data moves
     * through host memory and MPI). For a group of nranks processes, one
     * device each, oar calls comm_unique_id in the group's first process
     * (it writes at most OAR_COMM_ID_BYTES bytes to id and their count to
     * *len), sends those bytes to the others over MPI, and every process
     * calls comm_create with its rank in [0, nranks) at the same time (it
     * may wait for the others, as ncclCommInitRank does); it returns the
     * handle the collectives get as `comm`, or NULL after reporting.
     * comm_destroy frees it (when the mesh it serves is freed). */
    int (*comm_unique_id)(void *ctx, int index, void *id, size_t *len);
    void *(*comm_create)(void *ctx, int index, int nranks, int rank, const void *id, size_t len);
    void (*comm_destroy)(void *ctx, int index, void *comm);
    
    /* ---- ABI 1.3: generated kernels (oar's compiler) --------------------- */
    /* optional: builds `source`, a program in `language` ("opencl": OpenCL
     * C), and returns a handle that stays valid until shutdown (the plugin
     * may cache programs by source). NULL after reporting through the host's
     * error hook (a build error: with the compiler's log). NULL member: the
     * device runs no generated code, and compiled graphs run on it unfused.
     * build_program, get_function and launch come together. */
    void *(*build_program)(void *ctx, int index, const char *language, const char *source);
    /* optional (with build_program): the kernel `name` of a program, a
     * handle valid as long as the program; NULL after reporting */
    void *(*get_function)(void *ctx, int index, void *program, const char *name);
    /* optional (with build_program): queues fn over global_size work-items
     * (one dimension) on the default stream; its parameters are n_buffers
     * device buffers (what alloc returned), then n_scalars 64-bit integers */
    int (*launch)(void *ctx, int index, void *fn, int n_buffers, void *const *buffers,
                  int n_scalars, const int64_t *scalars, size_t global_size);

    /* ---- ABI 1.4: what the hardware computes natively -------------------- */
    /* optional: 1 when the device's matmul and conv kernels in dtype (an
     * oar_dtype value: f16, bf16, f32, u8, i8) run on the hardware's own
     * dot-product instructions for it, 0 when they are emulated or computed
     * in a wider type (slower than f32 for f16/bf16), a negative status
     * (reported) on failure. NULL member: native for every dtype the device
     * has kernels for (autocast then never falls back on it). */
    int (*native_dot)(void *ctx, int index, int32_t dtype);
} oar_device_iface;

/* Log levels of oar_host_api.log. */
enum { OAR_LOG_DEBUG = 0, OAR_LOG_INFO = 1, OAR_LOG_WARN = 2, OAR_LOG_ERROR = 3 };

/* What oar gives a plugin. Every member is always non-NULL. */
typedef struct oar_host_api {
    uint32_t abi_version;    /* the host's OAR_DEVICE_ABI_VERSION */
    uint32_t struct_size;    /* sizeof(oar_host_api) as the host saw it */
    /* a line to oar's log (stderr; OAR_LOG_DEBUG only with OAR_LOG=debug) */
    void (*log)(int level, const char *plugin, const char *msg);
    /* sets oar's error state (what oar_last_error() returns) to msg and
     * returns status, so a kernel can `return host->error(...)` */
    int (*error)(int status, const char *msg);
    /* host memory through oar's allocator hook (NULL on failure; free takes
     * the size given to alloc) */
    void *(*alloc)(size_t nbytes);
    void (*free)(void *p, size_t nbytes);
} oar_host_api;

/* What a plugin's entry point fills. oar zeroes it and sets abi_version
 * and struct_size to its own before the call; the plugin writes only the
 * members that lie below that struct_size and sets abi_version to the
 * version it was built for. */
typedef struct oar_plugin_desc {
    uint32_t abi_version;
    uint32_t struct_size;
    const char *name;                /* required: "opencl" (for messages and listings) */
    const oar_device_iface *iface;   /* required; must outlive the process */
    void *ctx;                       /* optional: passed to every iface member (NULL allowed) */
    /* optional: called once when oar shuts the plugin down (at exit) */
    void (*shutdown)(void *ctx);
} oar_plugin_desc;

/* The entry point every plugin exports (with default visibility). Returns
 * 0 on success; non-zero refuses the plugin (oar logs the plugin's name and
 * the status, and any message the plugin gave through host->error). */
typedef int (*oar_plugin_init_fn)(const oar_host_api *host, oar_plugin_desc *out);


/* ==== Using devices (liboar's side; a plugin needs none of this) ========= */
#ifndef OAR_DEVICE_PLUGIN_ONLY
#include <stdbool.h>

#if defined(__GNUC__) && !defined(OAR_DEVICE_API)
#define OAR_DEVICE_API __attribute__((visibility("default")))
#elif !defined(OAR_DEVICE_API)
#define OAR_DEVICE_API
#endif

typedef struct oar_tensor oar_tensor;
typedef struct oar_device oar_device;

/* Plugins load on first use of a device function (oar_device_get with a
 * name other than "cpu", oar_device_count, oar_plugin_count, ...): every
 * regular file named *.so is opened, from these folders in this order:
 *
 *   1. the folders of OAR_PLUGIN_PATH (':'-separated);
 *   2. next to liboar, found from where liboar itself is loaded (no
 *      environment variable needed):
 *      - <build>/plugins when liboar.so, or the program linked with
 *        liboar.a, sits in a CMake build folder (the build tree);
 *      - <libdir>/oar/plugins, <libdir> being liboar.so's folder (the
 *        install layout), and for a program linked with liboar.a
 *        <its folder>/../<libdir>/oar/plugins (a program in <prefix>/bin);
 *      - the configured <prefix>/<libdir>/oar/plugins (OAR_PLUGIN_DIR).
 *
 * OAR_PLUGIN_NO_INSTALL_DIR (any value) skips every folder of 2: only
 * OAR_PLUGIN_PATH is searched (tests that need a known set of plugins set
 * it). A folder reached twice is scanned once, and a file name found in an
 * earlier folder is skipped in later ones (as PATH does), so the build
 * tree's plugins shadow installed copies. A plugin that fails to load is
 * logged to stderr with its path and the reason, recorded
 * (oar_plugin_info) and skipped; oar keeps running. A type already
 * provided by an earlier plugin is refused. */

/* Loads one plugin file now (also before the automatic scan). 0 on
 * success; otherwise the status, with oar_last_error() naming the file
 * and the reason; the failure is also recorded for oar_plugin_info. */
OAR_DEVICE_API int oar_plugin_load(const char *path);

typedef struct oar_plugin_info {
    char path[512];
    char name[64];        /* the plugin's name, or "" if it never said */
    bool loaded;
    char reason[256];     /* why it was refused ("" when loaded) */
    int n_devices;
} oar_plugin_info;

/* Plugins tried so far, loaded or refused, in load order. */
OAR_DEVICE_API int oar_plugin_count(void);
/* Fills *out for plugin i; 0, or OAR_ERR_INVALID if i is out of range. */
OAR_DEVICE_API int oar_plugin_get_info(int i, oar_plugin_info *out);

/* Devices, the CPU first (index 0). */
OAR_DEVICE_API int oar_device_count(void);
/* Device i (borrowed), NULL with an error if out of range. */
OAR_DEVICE_API oar_device *oar_device_at(int i);
/* The device's properties; 0 or a status. */
OAR_DEVICE_API int oar_device_get_props(const oar_device *d, oar_device_props *out);
/* Whether device d computes dot products (matmul, conv) in dtype natively:
 * 1 yes, 0 no (emulated, or computed in a wider type: for f16/bf16 slower
 * than f32), a negative status with an error for a NULL device or a dtype
 * that is not an oar_dtype. f32 and f64 are native everywhere. The CPU
 * answers from cpuid and how oar was built: bf16 is native with
 * AVX512_BF16 or AMX-BF16 and oneDNN (OAR_WITH_DNNL); f16 never is (oar's
 * CPU computes it in f32 between casts); u8/i8 with AVX512_VNNI. The
 * environment variables OAR_CPU_NATIVE_BF16 and OAR_CPU_NATIVE_F16 ("0" or
 * "1", read at each call) override the CPU's answer (tests; a machine whose
 * probe is wrong). A plugin device answers through its table's native_dot
 * (ABI 1.4); one that does not counts as native. Autocast
 * (include/oar/amp.h) asks the CPU when a scope opens, and a plugin
 * device on the first LOW op (matmul, conv) on its tensors in a scope. */
OAR_DEVICE_API int oar_device_native_dot(const oar_device *d, int32_t dtype);
/* Waits for the work queued on d; 0 or a status. */
OAR_DEVICE_API int oar_device_synchronize(oar_device *d);

/* Writes a report of devices, plugins and load failures (one line each,
 * "device opencl:0  pthread-skylake  16384 MiB", "plugin ... loaded" /
 * "plugin ... refused: <reason>") to buf (always terminated, truncated to
 * size). Returns the length it needed. For the `oar devices` command. */
OAR_DEVICE_API int oar_device_report(char *buf, size_t size);

/* A copy of t on device d (a new reference following the pool rule), or t
 * itself (retained, nothing recorded) when it is already there. The move
 * is the op to_device, so autograd records it: when t requires grad (and
 * grad mode is on) the copy is not a leaf, and the gradient that reaches
 * it moves back to t's device (a move that differentiates again). Move
 * parameters before setting requires_grad, or under oar_no_grad_push, to
 * get leaves on d. NULL with an error on failure. */
OAR_DEVICE_API oar_tensor *oar_tensor_to(oar_tensor *t, oar_device *d);

/* Filled creation on a device (NULL: the CPU), as oar_full; dtype is an
 * oar_dtype value. A new reference following the pool rule. */
OAR_DEVICE_API oar_tensor *oar_full_on(int32_t dtype, int ndim, const int64_t *shape,
                                       double value, oar_device *d);

/* How many op calls ran on the CPU because their device had no kernel for
 * them (each such op is also warned about once on stderr), since start or
 * the last reset. */
OAR_DEVICE_API int64_t oar_device_fallback_count(void);
OAR_DEVICE_API void oar_device_fallback_reset(void);
#endif

#ifdef __cplusplus
}
#endif
#endif

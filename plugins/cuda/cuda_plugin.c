/* The CUDA device plugin: every CUDA device becomes "cuda:<i>". Buffers
 * come from a caching allocator over cudaMalloc, every kernel, cuBLAS call
 * and copy is queued on one stream per device, and copies between host
 * and device go through pinned staging buffers (cuda_mem.c); the streams,
 * events and asynchronous copies of the ABI map onto the CUDA runtime's.
 * Built against <oar/device.h> alone.
 *
 * What it claims, exactly (everything else returns NULL from get_kernel and
 * runs on the CPU with copies):
 *   f32 and f64 elementwise over strided and broadcast views
 *     (cuda_kernels.cu): every row of oar's op table
 *     src/ops/elementwise.def with a float device form (its gen column),
 *     found by name in oar_cuda_ew_table; f16 and bf16 reach them through
 *     oar's f32 route (casts around the f32 kernel, src/ops/plan.c); and
 *     the bool, u8, i32 and i64 forms of the rows whose gen column has
 *     them (comparisons, where and logical_not; in bool also the other
 *     logical ops: oar_cuda_ew_b1, _u8, _i32, _i64)
 *   cast, copy, contiguous and fill among bool, u8, i32, i64, f16, bf16,
 *     f32 and f64
 *   sum, prod, amax, amin over any dims, softmax and log_softmax, in f16,
 *     bf16 (computed in f32, rounded once), f32 and f64 (one thread per
 *     output element or row)
 *   matmul in f32, f64, f16 and bf16 (f16/bf16 with f32 accumulation, on
 *     Tensor Cores where the GPU has them), 1-D or batched operands with
 *     broadcast batch dims, as one cublasGemmStridedBatchedEx over the
 *     operands cuBLAS reads in place (a unit stride in one matrix dim, the
 *     other at least the extent: no expanded or overlapping matrix; batch
 *     dims that collapse to one stride, 0 for a broadcast operand) into a
 *     dense output (cuda_gemm_layout.h); an operand cuBLAS cannot read so
 *     (a permuted attention head, an expanded row) is first copied into
 *     dense scratch on the device, and an output that is not dense gets
 *     its result through scratch, so no layout runs on the CPU
 *   group_norm and batch_norm (training and eval; weight and bias
 *     optional) in f32 and f64, one block per statistic group, statistics
 *     in double summed in a fixed order (f16/bf16 through oar's f32 route;
 *     their backward passes are oar's compositions of claimed ops)
 *   layer_norm (weight and bias optional; statistics in double), max_pool2d
 *     and max_pool2d_backward, avg_pool2d and avg_pool2d_backward, in f32
 *     and f64 over strided views, as the CPU computes them (the pools'
 *     backward: one thread per plane, in the CPU's order; an index outside
 *     the plane is skipped, not reported)
 *   slice_backward in f16, bf16, f32 and f64 (zeros, then the gradient
 *     copied into the slice's view: the fill and conversion kernels)
 *   gather, index_select, scatter_add and index_add in f32 and f64 with
 *     i64 indices (scatter_add and index_add: one thread per output
 *     element, in index order, deterministic); an index out of range fails
 *     the call as on the CPU, so each of these calls waits for the device
 *   fft_c2c and fft_c2r in c64 and c128, fft_r2c in f32 and f64, over any
 *     dims of strided views with every norm mode, through cuFFT plans
 *     cached per shape (cuda_fft.c, cuda_fft_layout.h; OAR_CUDA_CUFFT):
 *     up to three transformed dims of extent > 1 (more run on the CPU);
 *     cuFFT is opened at run time: not claimed where libcufft.so.12
 *     cannot be opened or OAR_CUDA_CUFFT=0
 *   conv2d, conv_transpose2d and conv2d_weight_grad in f32 and f64 through
 *     cuDNN, opened at run time (cuda_dnn.c; OAR_CUDA_CUDNN where CMake
 *     found cudnn.h): [N, C, H, W] and [N, C, L] operands, groups, stride,
 *     padding, dilation, bias; not claimed where libcudnn.so.9 cannot be
 *     opened or OAR_CUDA_CUDNN=0
 * native_dot (ABI 1.4), from the compute capability read once at init:
 * f16 on cc >= 7.0 and bf16 on cc >= 8.0 (cuBLAS's half GEMMs on Tensor
 * Cores; conv in those types still goes through f32), u8 and i8 never (no
 * int8 GEMM).
 * Collectives (all_reduce, all_gather, reduce_scatter, broadcast, send,
 * recv and communicators) over NCCL when CMake found it (cuda_nccl.c,
 * OAR_CUDA_NCCL); without it the members are NULL and oar stages device
 * shards through the host.
 *
 * Calls make no per-call device query: each thread remembers its current
 * device (oar_cuda_use_device), and with one GPU every buffer is on device
 * 0; only with several GPUs does a kernel ask the runtime which device owns
 * its output (cudaPointerGetAttributes). Kernels, cuBLAS, NCCL (given no
 * stream), generated kernels and copies run on the device's stream
 * (oar_cuda_stream, not the legacy default stream), asynchronously to the
 * host: a copy to the device returns once its data is staged, a copy to
 * the host waits for the stream; synchronize waits for the device.
 *
 * The machine it is written on has no GPU: its f32 elementwise kernels
 * were checked on an H200 (plugins/cuda/ew_check.sh, bench/RESULTS.md);
 * the rest is compiled and linked but has never run on a GPU (its host
 * code runs here on fakes of the runtime, cuBLAS, cuFFT and cuDNN:
 * tests/devices/test_cuda_plugin_host.c, plugins/fake_cuda_plugin.c). */
#define OAR_DEVICE_PLUGIN_ONLY
#include <oar/device.h>

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "cuda_device.h"
#include "cuda_gemm_layout.h"
#include "cuda_kernels.h"
#include "cuda_jit.h"
#ifdef OAR_CUDA_NCCL
#include "cuda_nccl.h"
#endif
#ifdef OAR_CUDA_CUFFT
#include "cuda_fft.h"
#endif
#ifdef OAR_CUDA_CUDNN
#include "cuda_dnn.h"
#endif

#define MAX_DEV OAR_CUDA_MAX_DEV
#define DT_BOOL 0
#define DT_F16 4
#define DT_BF16 5
#define DT_F32 6
#define DT_F64 7

static const oar_host_api *host;
static int n_devs;
static cublasHandle_t blas[MAX_DEV];
static int cc[MAX_DEV]; /* compute capability (major * 10 + minor) read at init; -1: not readable */
static pthread_mutex_t blas_lock = PTHREAD_MUTEX_INITIALIZER;

static int fail(const char *what, int err) {
    char msg[256];
    snprintf(msg, sizeof msg, "cuda: %s failed: %s", what, cudaGetErrorString((cudaError_t)err));
    return host->error(-4, msg);
}

#define CU(call, what)                                                                      \
    do {                                                                                    \
        cudaError_t e_ = (call);                                                            \
        if (e_ != cudaSuccess) return fail(what, (int)e_);                                  \
    } while (0)

static __thread int current_dev = -1; /* this thread's current device, -1: not set by the plugin */

int oar_cuda_use_device(int index) {
    if (index == current_dev) return 0;
    CU(cudaSetDevice(index), "cudaSetDevice");
    current_dev = index;
    return 0;
}

static int count(void *ctx) { (void)ctx; return n_devs; }

static int props(void *ctx, int index, oar_device_props *out) {
    (void)ctx;
    struct cudaDeviceProp p;
    CU(cudaGetDeviceProperties(&p, index), "cudaGetDeviceProperties");
    snprintf(out->name, sizeof out->name, "%.63s", p.name);
    out->total_memory = p.totalGlobalMem;
    return 0;
}

static void *alloc(void *ctx, int index, size_t n) {
    (void)ctx;
    if (index < 0 || index >= n_devs || oar_cuda_use_device(index)) return NULL;
    return oar_cuda_mem_alloc(index, n);
}

static void release(void *ctx, int index, void *p, size_t n) {
    (void)ctx;
    if (index >= 0 && index < n_devs && oar_cuda_use_device(index) == 0) oar_cuda_mem_free(index, p, n);
}

/* Synchronous for the caller's memory (the ABI's rule), asynchronous on
 * the device: staged, then queued on the device's stream. */
static int to_device(void *ctx, int index, void *dst, size_t off, const void *src, size_t n) {
    (void)ctx;
    if (oar_cuda_use_device(index)) return -4;
    return oar_cuda_mem_to_device(index, (char *)dst + off, src, n);
}

static int to_host(void *ctx, int index, void *dst, const void *src, size_t off, size_t n) {
    (void)ctx;
    if (oar_cuda_use_device(index)) return -4;
    return oar_cuda_mem_to_host(index, dst, (const char *)src + off, n);
}

/* The device's stream, or s when the caller gave one; NULL after reporting. */
static cudaStream_t stream_or(int index, oar_stream s) {
    return s ? (cudaStream_t)s : oar_cuda_stream(index);
}

static int d2d(void *ctx, int index, void *dst, size_t doff, const void *src, size_t soff, size_t n) {
    (void)ctx;
    cudaStream_t s;
    if (oar_cuda_use_device(index) || !(s = oar_cuda_stream(index))) return -4;
    CU(cudaMemcpyAsync((char *)dst + doff, (const char *)src + soff, n, cudaMemcpyDeviceToDevice, s),
       "cudaMemcpyAsync on the device");
    return 0;
}

static int sync_dev(void *ctx, int index) {
    (void)ctx;
    if (oar_cuda_use_device(index)) return -4;
    CU(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    return 0;
}

/* ---- streams, events, asynchronous copies ---------------------------------- */

static oar_stream stream_create(void *ctx, int index) {
    (void)ctx;
    cudaStream_t s = NULL;
    if (oar_cuda_use_device(index) || cudaStreamCreate(&s) != cudaSuccess) return NULL;
    return s;
}
static void stream_destroy(void *ctx, int index, oar_stream s) {
    (void)ctx, (void)index;
    cudaStreamDestroy((cudaStream_t)s);
}
static int stream_sync(void *ctx, int index, oar_stream s) {
    (void)ctx;
    cudaStream_t cs;
    if (oar_cuda_use_device(index) || !(cs = stream_or(index, s))) return -4;
    CU(cudaStreamSynchronize(cs), "cudaStreamSynchronize");
    return 0;
}
static oar_event event_create(void *ctx, int index) {
    (void)ctx;
    cudaEvent_t e = NULL;
    if (oar_cuda_use_device(index) || cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess)
        return NULL;
    return e;
}
static void event_destroy(void *ctx, int index, oar_event e) {
    (void)ctx, (void)index;
    cudaEventDestroy((cudaEvent_t)e);
}
static int event_record(void *ctx, int index, oar_event e, oar_stream s) {
    (void)ctx;
    cudaStream_t cs;
    if (oar_cuda_use_device(index) || !(cs = stream_or(index, s))) return -4;
    CU(cudaEventRecord((cudaEvent_t)e, cs), "cudaEventRecord");
    return 0;
}
static int stream_wait(void *ctx, int index, oar_stream s, oar_event e) {
    (void)ctx;
    cudaStream_t cs;
    if (oar_cuda_use_device(index) || !(cs = stream_or(index, s))) return -4;
    CU(cudaStreamWaitEvent(cs, (cudaEvent_t)e, 0), "cudaStreamWaitEvent");
    return 0;
}
static int event_sync(void *ctx, int index, oar_event e) {
    (void)ctx, (void)index;
    CU(cudaEventSynchronize((cudaEvent_t)e), "cudaEventSynchronize");
    return 0;
}
static int to_device_async(void *ctx, int index, void *dst, size_t off, const void *src, size_t n,
                           oar_stream s) {
    (void)ctx;
    cudaStream_t cs;
    if (oar_cuda_use_device(index) || !(cs = stream_or(index, s))) return -4;
    CU(cudaMemcpyAsync((char *)dst + off, src, n, cudaMemcpyHostToDevice, cs),
       "cudaMemcpyAsync to the device");
    return 0;
}
static int to_host_async(void *ctx, int index, void *dst, const void *src, size_t off, size_t n,
                         oar_stream s) {
    (void)ctx;
    cudaStream_t cs;
    if (oar_cuda_use_device(index) || !(cs = stream_or(index, s))) return -4;
    CU(cudaMemcpyAsync(dst, (const char *)src + off, n, cudaMemcpyDeviceToHost, cs),
       "cudaMemcpyAsync to the host");
    return 0;
}
static int d2d_async(void *ctx, int index, void *dst, size_t doff, const void *src, size_t soff,
                     size_t n, oar_stream s) {
    (void)ctx;
    cudaStream_t cs;
    if (oar_cuda_use_device(index) || !(cs = stream_or(index, s))) return -4;
    CU(cudaMemcpyAsync((char *)dst + doff, (const char *)src + soff, n, cudaMemcpyDeviceToDevice, cs),
       "cudaMemcpyAsync on the device");
    return 0;
}

/* ---- kernels ----------------------------------------------------------------- */

static oar_cuda_desc desc(const oar_ktensor *t) {
    oar_cuda_desc k;
    memset(&k, 0, sizeof k);
    k.off = t->offset;
    k.nd = t->ndim;
    for (int i = 0; i < t->ndim; i++) {
        k.shape[i] = t->shape[i];
        k.st[i] = t->strides[i];
    }
    return k;
}

static int64_t numel(const oar_ktensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

/* Makes the device owning t's buffer current, *dev = its index, and
 * returns that device's stream (NULL after reporting). One GPU: device 0,
 * no query; several: the runtime says which owns the buffer. */
static cudaStream_t on_device_of(const oar_ktensor *t, int *dev) {
    int d = 0;
    if (n_devs > 1) {
        struct cudaPointerAttributes a;
        cudaError_t e = cudaPointerGetAttributes(&a, t->buffer);
        if (e != cudaSuccess) return fail("cudaPointerGetAttributes", (int)e), NULL;
        d = a.device;
    }
    if (d < 0 || d >= n_devs) return host->error(-3, "cuda: a buffer on a device the plugin does not list"), NULL;
    if (dev) *dev = d;
    return oar_cuda_use_device(d) ? NULL : oar_cuda_stream(d);
}

/* The elementwise table's launchers of op (its float forms), or NULL. */
static const oar_cuda_ew *ew_find(const char *op) {
    for (const oar_cuda_ew *e = oar_cuda_ew_table; e->op; e++)
        if (!strcmp(e->op, op)) return e;
    return NULL;
}

/* The table of the bool or integer forms of dtype dt, or NULL. */
static const oar_cuda_ew1 *ew1_table(int32_t dt) {
    switch (dt) {
    case 0: return oar_cuda_ew_b1;
    case 1: return oar_cuda_ew_u8;
    case 2: return oar_cuda_ew_i32;
    case 3: return oar_cuda_ew_i64;
    default: return NULL;
    }
}

/* The number of inputs of elementwise row op (in any table), 0 for none. */
static int ew_arity(const char *op) {
    const oar_cuda_ew *e = ew_find(op);
    if (e) return e->n_in;
    for (int32_t dt = 0; dt <= 3; dt++)
        for (const oar_cuda_ew1 *t = ew1_table(dt); t->op; t++)
            if (!strcmp(t->op, op)) return t->n_in;
    return 0;
}

/* op's launcher for kernel dtype dt: its f32 or f64 form, or its bool or
 * integer one; NULL where the row has none. */
static oar_cuda_ew_launch ew_launcher(const char *op, int32_t dt) {
    if (dt == DT_F32 || dt == DT_F64) {
        const oar_cuda_ew *e = ew_find(op);
        return e ? (dt == DT_F64 ? e->launch_f64 : e->launch) : NULL;
    }
    for (const oar_cuda_ew1 *t = ew1_table(dt); t && t->op; t++)
        if (!strcmp(t->op, op)) return t->launch;
    return NULL;
}

/* The dtype an elementwise kernel computes in: where's values (input 1),
 * else input 0's. */
static int32_t ew_dtype(int n_in, const oar_kernel_call *c) {
    return c->in[n_in == 3 ? 1 : 0].dtype;
}

static int k_ew(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    int n_in = ew_arity(c->op);
    if (!n_in || c->n_in != n_in || c->n_in > 3 || c->n_out < 1)
        return host->error(-3, "cuda: no such elementwise kernel");
    oar_cuda_ew_launch go = ew_launcher(c->op, ew_dtype(n_in, c));
    if (!go) return host->error(-3, "cuda: no elementwise kernel of this op in this dtype");
    cudaStream_t st = on_device_of(&c->out[0], NULL);
    if (!st) return -4;
    const void *in[3] = {0};
    oar_cuda_desc ti[3];
    memset(ti, 0, sizeof ti);
    for (int i = 0; i < c->n_in; i++) {
        in[i] = c->in[i].buffer;
        ti[i] = desc(&c->in[i]);
    }
    double p0 = c->n_fattr > 0 ? c->fattr[0] : 0, p1 = c->n_fattr > 1 ? c->fattr[1] : 0;
    int alt = c->n_iattr > 0 && c->iattr[0] != 0;
    int e_ = go(c->out[0].buffer, desc(&c->out[0]), in, ti, p0, p1, alt, numel(&c->out[0]), st);
    return e_ ? fail(c->op, e_) : 0;
}

static bool is_float(int32_t dt) { return dt == DT_F32 || dt == DT_F64; }

/* the dtypes of the reductions and softmax: f16, bf16, f32, f64 */
static bool is_any_float(int32_t dt) { return dt == DT_F16 || dt == DT_BF16 || is_float(dt); }

/* the dtypes of cast, copy, contiguous and fill: bool, u8, i32, i64, f16, bf16, f32, f64 */
static bool small_dtype(int32_t dt) { return dt >= 0 && dt <= DT_F64; }

static int k_fill(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    if (c->n_in < 1 || c->n_fattr < 1 || !small_dtype(c->in[0].dtype))
        return host->error(-3, "cuda fill: wants a tensor of bool, u8, i32, i64, f16, bf16, f32 or f64 and a value");
    cudaStream_t st = on_device_of(&c->in[0], NULL);
    if (!st) return -4;
    int e = oar_cuda_fill(c->in[0].buffer, c->in[0].dtype, desc(&c->in[0]), c->fattr[0], numel(&c->in[0]), st);
    return e ? fail("fill", e) : 0;
}

/* dst = src converted: cast and contiguous (out[0] = in[0]), copy (in[0] = in[1]) */
static int k_convert(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    bool copy = !strcmp(c->op, "copy");
    if (c->n_in < (copy ? 2 : 1) || (!copy && c->n_out < 1)) return host->error(-3, "cuda: a conversion without its tensors");
    const oar_ktensor *dst = copy ? &c->in[0] : &c->out[0], *src = copy ? &c->in[1] : &c->in[0];
    if (!small_dtype(dst->dtype) || !small_dtype(src->dtype))
        return host->error(-3, "cuda: unsupported conversion (bool, u8, i32, i64, f16, bf16, f32, f64 only)");
    if (numel(dst) != numel(src)) return host->error(-3, "cuda: a conversion between tensors of different sizes");
    cudaStream_t st = on_device_of(dst, NULL);
    if (!st) return -4;
    int e = oar_cuda_convert(dst->buffer, dst->dtype, desc(dst), src->buffer, src->dtype, desc(src), numel(dst), st);
    return e ? fail(c->op, e) : 0;
}

/* sum, amax, amin, prod over the dims of iattr[0]'s mask into a contiguous output */
static int reduce_op(const char *op) {
    static const char *const names[] = {"sum", "amax", "amin", "prod"};
    for (int i = 0; i < 4; i++)
        if (!strcmp(op, names[i])) return i;
    return -1;
}

static int k_reduce(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    int op = reduce_op(c->op);
    if (op < 0 || c->n_in < 1 || c->n_out < 1 || c->n_iattr < 1 || c->in[0].dtype != c->out[0].dtype ||
        !is_any_float(c->in[0].dtype))
        return host->error(-3, "cuda: a reduction wants one f16, bf16, f32 or f64 input, its output and the dims' mask");
    const oar_ktensor *x = &c->in[0];
    int64_t mask = c->iattr[0];
    oar_cuda_desc kept, red;
    memset(&kept, 0, sizeof kept);
    memset(&red, 0, sizeof red);
    kept.off = x->offset;
    int64_t n_out = 1, n_red = 1;
    for (int i = 0; i < x->ndim; i++) {
        oar_cuda_desc *k = (mask >> i) & 1 ? &red : &kept;
        k->shape[k->nd] = x->shape[i];
        k->st[k->nd++] = x->strides[i];
        if ((mask >> i) & 1) n_red *= x->shape[i];
        else n_out *= x->shape[i];
    }
    if (numel(&c->out[0]) != n_out) return host->error(-3, "cuda: a reduction's output of the wrong size");
    cudaStream_t st = on_device_of(&c->out[0], NULL);
    if (!st) return -4;
    int e = oar_cuda_reduce(c->out[0].buffer, x->dtype, c->out[0].offset, x->buffer, kept, red, op, n_out, n_red, st);
    return e ? fail(c->op, e) : 0;
}

/* t's dims other than dim, with t's strides and offset */
static oar_cuda_desc rows_of(const oar_ktensor *t, int dim) {
    oar_cuda_desc r;
    memset(&r, 0, sizeof r);
    r.off = t->offset;
    for (int i = 0; i < t->ndim; i++) {
        if (i == dim) continue;
        r.shape[r.nd] = t->shape[i];
        r.st[r.nd++] = t->strides[i];
    }
    return r;
}

static int k_softmax(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    if (c->n_in < 1 || c->n_out < 1 || c->in[0].dtype != c->out[0].dtype || !is_any_float(c->in[0].dtype) ||
        numel(&c->in[0]) != numel(&c->out[0]) || c->in[0].ndim != c->out[0].ndim)
        return host->error(-3, "cuda softmax: wants an f16, bf16, f32 or f64 input and an output of its shape");
    const oar_ktensor *x = &c->in[0], *o = &c->out[0];
    int dim = x->ndim ? (c->n_iattr > 0 ? (int)c->iattr[0] : -1) : -1;
    if (x->ndim && (dim < 0 || dim >= x->ndim)) return host->error(-3, "cuda softmax: dim out of range");
    int64_t len = dim >= 0 ? x->shape[dim] : 1;
    int64_t sx = dim >= 0 ? x->strides[dim] : 0, so = dim >= 0 ? o->strides[dim] : 0;
    int64_t rows = len ? numel(x) / len : 0;
    cudaStream_t st = on_device_of(o, NULL);
    if (!st) return -4;
    int e = oar_cuda_softmax(o->buffer, x->dtype, x->buffer, rows_of(x, dim), rows_of(o, dim), len, sx, so,
                             !strcmp(c->op, "log_softmax"), rows, st);
    return e ? fail(c->op, e) : 0;
}

/* layer_norm: ins x, weight?, bias? (an absent one: dtype -1 or no
 * buffer); outs y, mean, rstd; iattr[0] the normalised trailing dims,
 * fattr[0] eps */
static bool present(const oar_kernel_call *c, int i) {
    return c->n_in > i && c->in[i].buffer && c->in[i].dtype >= 0;
}

static int k_layer_norm(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    if (c->n_in < 1 || c->n_out < 3 || c->n_iattr < 1 || c->n_fattr < 1 || !is_float(c->in[0].dtype))
        return host->error(-3, "cuda layer_norm: wants an f32 or f64 input, three outputs, dims and eps");
    const oar_ktensor *x = &c->in[0];
    int nn = (int)c->iattr[0];
    if (nn < 0 || nn > x->ndim) return host->error(-3, "cuda layer_norm: normalised dims out of range");
    int64_t d = 1;
    for (int i = x->ndim - nn; i < x->ndim; i++) d *= x->shape[i];
    int64_t rows = d ? numel(x) / d : 0;
    for (int j = 0; j < 3; j++)
        if (c->out[j].dtype != x->dtype || numel(&c->out[j]) != (j ? rows : numel(x)))
            return host->error(-3, "cuda layer_norm: outputs of the wrong dtype or size");
    for (int i = 1; i < 3; i++)
        if (present(c, i) && (c->in[i].dtype != x->dtype || numel(&c->in[i]) != d))
            return host->error(-3, "cuda layer_norm: a weight or bias of the wrong dtype or size");
    cudaStream_t st = on_device_of(&c->out[0], NULL);
    if (!st) return -4;
    oar_cuda_desc none;
    memset(&none, 0, sizeof none);
    int e = oar_cuda_layer_norm(c->out[0].buffer, desc(&c->out[0]), c->out[1].buffer, desc(&c->out[1]),
                                c->out[2].buffer, desc(&c->out[2]), x->dtype, x->buffer, desc(x),
                                present(c, 1) ? c->in[1].buffer : NULL, present(c, 1) ? desc(&c->in[1]) : none,
                                present(c, 2) ? c->in[2].buffer : NULL, present(c, 2) ? desc(&c->in[2]) : none,
                                c->fattr[0], d, rows, st);
    return e ? fail(c->op, e) : 0;
}

/* group_norm (ins x, weight?, bias?; iattr groups; outs y, mean, rstd of
 * [N, groups]) and batch_norm (ins x, running_mean?, running_var?,
 * weight?, bias?; iattr training; outs y, mean, rstd, the unbiased
 * variance, each [C]); fattr[0] eps. x [N, C, *] of rank >= 2, f32 or
 * f64 (f16/bf16 through oar's f32 route); the affine operands of x's
 * dtype; the running stats too in eval (training does not read them). */
static int channel_norm_mode(const oar_kernel_call *c) {
    if (!strcmp(c->op, "group_norm")) return 0;
    if (!strcmp(c->op, "batch_norm")) return c->n_iattr >= 1 && c->iattr && c->iattr[0] ? 1 : 2;
    return -1;
}

static bool channel_norm_ok(const oar_kernel_call *c, int mode) {
    const int n_in = mode == 0 ? 3 : 5, n_out = mode == 0 ? 3 : 4;
    if (mode < 0 || c->n_in < 1 || c->n_iattr < 1 || !c->iattr || c->n_fattr < 1 || !c->fattr) return false;
    const oar_ktensor *x = &c->in[0];
    if (!is_float(x->dtype) || x->ndim < 2) return false;
    const int64_t ch = x->shape[1], groups = mode == 0 ? c->iattr[0] : 1;
    if (groups < 1 || ch % groups) return false;
    for (int i = 2; i < x->ndim; i++)
        if (x->shape[i] < 1) return false; /* (an empty spatial dim: the CPU runs it) */
    for (int i = 1; i < n_in && i < c->n_in; i++) {
        bool stat = mode != 0 && i <= 2;
        if (!present(c, i) || (stat && mode == 1)) continue; /* (training reads no running stat) */
        if (c->in[i].dtype != x->dtype || numel(&c->in[i]) != ch) return false;
    }
    if (mode == 2 && (!present(c, 1) || !present(c, 2))) return false;
    if (c->n_out == 0) return true;
    if (c->n_out < n_out) return false;
    const int64_t n_stat = mode == 0 ? x->shape[0] * groups : ch;
    for (int j = 0; j < n_out; j++)
        if (c->out[j].dtype != x->dtype || numel(&c->out[j]) != (j ? n_stat : numel(x))) return false;
    return true;
}

static int k_channel_norm(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    int mode = channel_norm_mode(c);
    if (mode < 0 || c->n_out < 1 || !channel_norm_ok(c, mode))
        return host->error(-3, "cuda group_norm/batch_norm: wants an f32 or f64 [N, C, *] input, weight, bias "
                               "(and in eval the running stats) of its dtype and C elements, its outputs, the "
                               "groups or training flag and eps");
    const oar_ktensor *x = &c->in[0];
    oar_cuda_norm_args a;
    memset(&a, 0, sizeof a);
    a.mode = mode;
    a.n = x->shape[0], a.c = x->shape[1], a.s = 1;
    for (int i = 2; i < x->ndim; i++) a.s *= x->shape[i];
    a.groups = mode == 0 ? c->iattr[0] : 1;
    a.eps = c->fattr[0];
    a.x = x->buffer, a.tx = desc(x);
    a.y = c->out[0].buffer, a.ty = desc(&c->out[0]);
    a.mean = c->out[1].buffer, a.tm = desc(&c->out[1]);
    a.rstd = c->out[2].buffer, a.tr = desc(&c->out[2]);
    if (mode != 0) a.uvar = c->out[3].buffer, a.tu = desc(&c->out[3]);
    const int iw = mode == 0 ? 1 : 3;
    if (present(c, iw)) a.w = c->in[iw].buffer, a.tw = desc(&c->in[iw]);
    if (present(c, iw + 1)) a.b = c->in[iw + 1].buffer, a.tb = desc(&c->in[iw + 1]);
    if (mode == 2) a.rm = c->in[1].buffer, a.trm = desc(&c->in[1]), a.rv = c->in[2].buffer, a.trv = desc(&c->in[2]);
    cudaStream_t st = on_device_of(&c->out[0], NULL);
    if (!st) return -4;
    int e = oar_cuda_channel_norm(&a, x->dtype, st);
    return e ? fail(c->op, e) : 0;
}

/* the pools: 0 max_pool2d, 1 max_pool2d_backward, 2 avg_pool2d, 3 avg_pool2d_backward */
static int pool_op(const char *op) {
    static const char *const names[] = {"max_pool2d", "max_pool2d_backward", "avg_pool2d", "avg_pool2d_backward"};
    for (int i = 0; i < 4; i++)
        if (!strcmp(op, names[i])) return i;
    return -1;
}

/* planes of t's last two dims (t of rank >= 2) */
static int64_t planes(const oar_ktensor *t) {
    int64_t plane = t->ndim >= 2 ? t->shape[t->ndim - 1] * t->shape[t->ndim - 2] : 0;
    return plane > 0 ? numel(t) / plane : 0;
}

/* The pools' operands agree (the kernels index with them): ranks >= 2,
 * dtypes, attribute counts, and, with the output, the same planes. */
static bool pool_ok(const oar_kernel_call *c, int op) {
    static const int n_in[] = {1, 2, 1, 1}, n_out[] = {2, 1, 1, 1}, n_attr[] = {9, 2, 8, 10};
    if (c->n_in < n_in[op] || c->n_iattr < n_attr[op] || !c->iattr || c->in[0].ndim < 2 || !is_float(c->in[0].dtype))
        return false;
    if (op == 1 && (c->in[1].dtype != 3 || c->in[1].ndim != c->in[0].ndim || numel(&c->in[1]) != numel(&c->in[0])))
        return false;
    if (op == 0 || op == 2)
        for (int i = 0; i < 6; i++)
            if (c->iattr[i] < (i < 4 ? 1 : 0)) return false; /* kernel, stride >= 1; padding >= 0 */
    if (op == 0 && (c->iattr[6] < 1 || c->iattr[7] < 1)) return false; /* dilation */
    if (c->n_out == 0) return true;
    if (c->n_out < n_out[op]) return false;
    for (int j = 0; j < n_out[op]; j++)
        if (c->out[j].ndim != c->in[0].ndim || c->out[j].dtype != (j ? 3 : c->in[0].dtype)) return false;
    return planes(&c->out[0]) == planes(&c->in[0]) && (op != 0 || numel(&c->out[1]) == numel(&c->out[0]));
}

static int k_pool(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    int op = pool_op(c->op);
    if (op < 0 || c->n_out < 1 || !pool_ok(c, op))
        return host->error(-3, "cuda pool: operands or attributes that do not agree");
    const oar_ktensor *o = &c->out[0], *x = &c->in[0];
    oar_cuda_desc none;
    memset(&none, 0, sizeof none);
    cudaStream_t st = on_device_of(o, NULL);
    if (!st) return -4;
    int64_t n = op == 0 || op == 2 ? numel(o) : planes(o);
    int e = oar_cuda_pool(op, x->dtype, o->buffer, desc(o), op == 0 ? c->out[1].buffer : NULL,
                          op == 0 ? desc(&c->out[1]) : none, x->buffer, desc(x), op == 1 ? c->in[1].buffer : NULL,
                          op == 1 ? desc(&c->in[1]) : none, op == 1 ? NULL : c->iattr, n, NULL, st);
    return e ? fail(c->op, e) : 0;
}

/* slice_backward (the gradient of a slice: q, k and v cut from one qkv
 * product): iattr dim, start, end, step, then the result's shape; the
 * output zeroed, then the gradient copied into the slice's view of it.
 * f16, bf16, f32, f64 (the fill and conversion kernels, no kernel of its own). */
static bool slice_backward_ok(const oar_kernel_call *c) {
    if (c->n_in < 1 || !c->iattr || !is_any_float(c->in[0].dtype)) return false;
    const oar_ktensor *g = &c->in[0];
    if (c->n_iattr != 4 + g->ndim || g->ndim < 1) return false;
    const int64_t dim = c->iattr[0], start = c->iattr[1], step = c->iattr[3];
    if (dim < 0 || dim >= g->ndim || step < 1 || start < 0) return false;
    for (int d = 0; d < g->ndim; d++) {
        int64_t full = c->iattr[4 + d];
        if (d != dim && g->shape[d] != full) return false;
        if (d == dim && g->shape[d] > 0 && start + (g->shape[d] - 1) * step >= full) return false;
    }
    if (c->n_out == 0) return true;
    const oar_ktensor *o = &c->out[0];
    if (c->n_out < 1 || o->dtype != g->dtype || o->ndim != g->ndim) return false;
    for (int d = 0; d < g->ndim; d++)
        if (o->shape[d] != c->iattr[4 + d]) return false;
    return true;
}

static int k_slice_backward(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    if (c->n_out < 1 || !slice_backward_ok(c))
        return host->error(-3, "cuda slice_backward: wants a gradient, its output of the sliced shape and "
                               "attributes (dim, start, end, step >= 1, shape) that fit them");
    const oar_ktensor *g = &c->in[0], *o = &c->out[0];
    cudaStream_t st = on_device_of(o, NULL);
    if (!st) return -4;
    int e = oar_cuda_fill(o->buffer, o->dtype, desc(o), 0.0, numel(o), st);
    if (!e && numel(g) > 0) {
        const int dim = (int)c->iattr[0];
        oar_cuda_desc v = desc(o); /* the slice of the output the gradient fills */
        v.off += c->iattr[1] * o->strides[dim];
        v.shape[dim] = g->shape[dim];
        v.st[dim] *= c->iattr[3];
        e = oar_cuda_convert(o->buffer, o->dtype, v, g->buffer, g->dtype, desc(g), numel(g), st);
    }
    return e ? fail(c->op, e) : 0;
}

/* gather 0, index_select 1, scatter_add 2, index_add 3 (-1: none) */
static int index_op(const char *op) {
    static const char *const names[] = {"gather", "index_select", "scatter_add", "index_add"};
    for (int i = 0; i < 4; i++)
        if (!strcmp(op, names[i])) return i;
    return -1;
}

/* The indexing ops' operands: x float, the index i64, src (scatter_add,
 * index_add) of x's dtype, dim in range; with the output, of x's dtype and
 * rank. */
static bool index_ok(const oar_kernel_call *c, int op) {
    if (c->n_in < (op >= 2 ? 3 : 2) || c->n_iattr < 1 || !c->iattr || !is_float(c->in[0].dtype) ||
        c->in[1].dtype != 3)
        return false;
    const oar_ktensor *x = &c->in[0], *ix = &c->in[1];
    int64_t dim = c->iattr[0];
    if (dim < 0 || dim >= (x->ndim ? x->ndim : 1)) return false;
    if ((op == 1 || op == 3) && ix->ndim != 1) return false;
    if (op == 0 && ix->ndim != x->ndim) return false;
    if (op >= 2) {
        const oar_ktensor *src = &c->in[2];
        if (src->dtype != x->dtype) return false;
        if (op == 2 && src->ndim != 0 && src->ndim != ix->ndim) return false;
        if (op == 3 && (src->ndim != x->ndim || (x->ndim && src->shape[dim] != ix->shape[0]))) return false;
    }
    if (c->n_out == 0) return true;
    return c->n_out >= 1 && c->out[0].dtype == x->dtype && c->out[0].ndim == (op == 0 ? ix->ndim : x->ndim);
}

/* gather, index_select, scatter_add, index_add. An index out of range
 * fails the call as on the CPU, which needs the kernel's flag back: each
 * call waits for the device (a synchronisation per indexing op). */
static int k_index(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    int op = index_op(c->op);
    if (op < 0 || c->n_out < 1 || !index_ok(c, op))
        return host->error(-3, "cuda indexing: wants an f32 or f64 input, an i64 index (1-D for index_select and "
                               "index_add), a source of the input's dtype and an output of its rank");
    const oar_ktensor *x = &c->in[0], *ix = &c->in[1], *o = &c->out[0];
    int64_t dim = c->iattr[0];
    int64_t size = op < 2 ? (x->ndim ? x->shape[dim] : 1) : (o->ndim ? o->shape[dim] : 1);
    oar_cuda_desc ti = desc(ix), ts;
    memset(&ts, 0, sizeof ts);
    const void *src = NULL;
    if (op >= 2) {
        const oar_ktensor *sr = &c->in[2];
        src = sr->buffer;
        ts = desc(sr);
        if (op == 3) { /* the 1-D index over src's shape */
            ti = ts;
            ti.off = ix->offset;
            for (int d = 0; d < sr->ndim; d++) ti.st[d] = d == dim ? ix->strides[0] : 0;
        } else if (sr->ndim == 0) { /* one value for every index position */
            ts = ti;
            ts.off = sr->offset;
            for (int d = 0; d < 8; d++) ts.st[d] = 0;
        }
    }
    int dev;
    cudaStream_t st = on_device_of(o, &dev);
    if (!st) return -4;
    int *flag = oar_cuda_mem_alloc(dev, sizeof(int)), bad = 0;
    if (!flag) return -4;
    int e = oar_cuda_index(op < 3 ? op : 2, x->dtype, o->buffer, desc(o), x->buffer, desc(x), ix->buffer, ti, src, ts,
                           dim, size, flag, numel(o), st);
    int rc = e ? fail(c->op, e) : oar_cuda_mem_to_host(dev, &bad, flag, sizeof bad); /* waits for the kernel */
    oar_cuda_mem_free(dev, flag, sizeof(int));
    if (!rc && bad) {
        char msg[128];
        snprintf(msg, sizeof msg, "%s: an index is out of range [0, %lld) along dim %lld", c->op, (long long)size,
                 (long long)dim);
        return host->error(-1, msg);
    }
    return rc;
}

/* cuBLAS's data type of a matmul dtype, and its compute type */
static bool blas_types(int32_t dt, cudaDataType_t *t, cublasComputeType_t *ct) {
    switch (dt) {
    case DT_F32: *t = CUDA_R_32F; *ct = CUBLAS_COMPUTE_32F; return true; /* no TF32: the CPU's values */
    case DT_F64: *t = CUDA_R_64F; *ct = CUBLAS_COMPUTE_64F; return true;
    case DT_F16: *t = CUDA_R_16F; *ct = CUBLAS_COMPUTE_32F; return true; /* Tensor Cores, f32 accumulation */
    case DT_BF16: *t = CUDA_R_16BF; *ct = CUBLAS_COMPUTE_32F; return true;
    default: return false;
    }
}

/* t with the strides of a dense tensor of its shape (offset 0): what a
 * scratch copy of t is */
static oar_ktensor dense_like(const oar_ktensor *t) {
    oar_ktensor d = *t;
    d.offset = 0;
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        d.strides[i] = s;
        s *= t->shape[i] > 0 ? t->shape[i] : 1;
    }
    return d;
}

/* How a matmul runs: one strided-batched GEMM (cuda_gemm_layout.h) over
 * the views as given where cuBLAS reads them in place, else over dense
 * scratch copies of the operands it cannot read (an expanded or
 * overlapping matrix, batch dims of no single stride: a permuted
 * attention head, say) and, for an output that is not dense, into dense
 * scratch copied out after. copy[0..2]: A, B, the output go through
 * scratch. Fewest copies first; false only for operands that do not
 * match (or sizes past cuBLAS's int). */
typedef struct {
    oar_cuda_gemm_plan p;
    bool copy[3];
} matmul_route;

static bool matmul_route_of(const oar_kernel_call *c, matmul_route *r) {
    if (c->n_in != 2 || c->n_out < 1) return false;
    const oar_ktensor *A = &c->in[0], *B = &c->in[1], *O = &c->out[0];
    if (A->dtype != B->dtype || A->dtype != O->dtype) return false;
    static const unsigned order[8] = {0, 4, 1, 2, 5, 6, 3, 7}; /* bits: A, B, output copied */
    for (int i = 0; i < 8; i++) {
        unsigned m = order[i];
        oar_ktensor a = m & 1 ? dense_like(A) : *A, b = m & 2 ? dense_like(B) : *B, o = m & 4 ? dense_like(O) : *O;
        if (oar_cuda_gemm_plan_make(a.ndim, a.shape, a.strides, b.ndim, b.shape, b.strides, o.ndim, o.shape,
                                    o.strides, &r->p)) {
            r->copy[0] = m & 1, r->copy[1] = (m & 2) != 0, r->copy[2] = (m & 4) != 0;
            return true;
        }
    }
    return false;
}

/* supports_op's question before the output exists: the dense output oar
 * will allocate, with the operands as given or copied */
static bool matmul_inputs_ok(const oar_ktensor *A, const oar_ktensor *B) {
    oar_cuda_gemm_plan p;
    oar_ktensor a = dense_like(A), b = dense_like(B);
    return oar_cuda_gemm_plan_inputs(A->ndim, A->shape, A->strides, B->ndim, B->shape, B->strides, &p) ||
           oar_cuda_gemm_plan_inputs(a.ndim, a.shape, a.strides, b.ndim, b.shape, b.strides, &p);
}

static int dt_size(int32_t dt) { return dt == DT_F64 ? 8 : dt == DT_F32 ? 4 : 2; }

/* the device's cuBLAS handle, made on its stream at first use */
static cublasHandle_t blas_handle(int dev, cudaStream_t st) {
    pthread_mutex_lock(&blas_lock); /* one handle per device, on the device's stream */
    if (!blas[dev]) {
        cublasHandle_t h;
        cublasStatus_t bs = cublasCreate(&h);
        if (bs == CUBLAS_STATUS_SUCCESS && (bs = cublasSetStream(h, st)) != CUBLAS_STATUS_SUCCESS) cublasDestroy(h);
        if (bs == CUBLAS_STATUS_SUCCESS) blas[dev] = h;
    }
    cublasHandle_t h = blas[dev];
    pthread_mutex_unlock(&blas_lock);
    return h;
}

static int k_matmul(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    matmul_route r;
    cudaDataType_t t;
    cublasComputeType_t ct;
    if (c->n_in != 2 || c->n_out < 1 || !blas_types(c->in[0].dtype, &t, &ct))
        return host->error(-3, "cuda matmul: wants two f32, f64, f16 or bf16 operands");
    if (!matmul_route_of(c, &r))
        return host->error(-3, "cuda matmul: operands and output of different dtypes or shapes that do not "
                               "multiply, or sizes past cuBLAS's int; supports_op refuses these, so oar runs "
                               "them on the CPU");
    const oar_cuda_gemm_plan *p = &r.p;
    const oar_ktensor *T[3] = {&c->in[0], &c->in[1], &c->out[0]};
    int dev;
    cudaStream_t st = on_device_of(T[2], &dev);
    if (!st) return -4;
    if (p->n == 0 || p->m == 0 || p->batch == 0) return 0;
    cublasHandle_t h = blas_handle(dev, st);
    if (!h) return host->error(-4, "cuda matmul: cublasCreate or cublasSetStream failed");
    const int es = dt_size(T[0]->dtype);
    void *scratch[3] = {NULL, NULL, NULL};
    size_t bytes[3] = {0, 0, 0};
    char *base[3];
    int rc = 0;
    for (int i = 0; i < 3 && !rc; i++) {
        base[i] = (char *)T[i]->buffer + T[i]->offset * es;
        if (!r.copy[i]) continue;
        bytes[i] = (size_t)(numel(T[i]) > 0 ? numel(T[i]) : 1) * (size_t)es;
        if (!(scratch[i] = oar_cuda_mem_alloc(dev, bytes[i]))) {
            rc = -4;
            break;
        }
        base[i] = scratch[i];
        oar_ktensor d = dense_like(T[i]);
        int e = i < 2 ? oar_cuda_convert(scratch[i], T[i]->dtype, desc(&d), T[i]->buffer, T[i]->dtype, desc(T[i]),
                                         numel(T[i]), st)
                      : 0;
        if (e) rc = fail("matmul: copying an operand into dense scratch", e);
    }
    if (!rc) {
        const double one_d = 1, zero_d = 0;
        const float one_f = 1, zero_f = 0;
        const void *one = ct == CUBLAS_COMPUTE_64F ? (const void *)&one_d : (const void *)&one_f;
        const void *zero = ct == CUBLAS_COMPUTE_64F ? (const void *)&zero_d : (const void *)&zero_f;
        /* row-major O = A B is column-major O^T = B^T A^T */
        cublasStatus_t bs = cublasGemmStridedBatchedEx(
            h, p->tb ? CUBLAS_OP_T : CUBLAS_OP_N, p->ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)p->m, (int)p->n, (int)p->k,
            one, base[1], t, (int)p->ldb, p->sb, base[0], t, (int)p->lda, p->sa, zero, base[2], t, (int)p->m,
            p->n * p->m, (int)p->batch, ct, CUBLAS_GEMM_DEFAULT);
        if (bs != CUBLAS_STATUS_SUCCESS) {
            char msg[128];
            snprintf(msg, sizeof msg, "cuda matmul: cublasGemmStridedBatchedEx failed: %s", cublasGetStatusString(bs));
            rc = host->error(-4, msg);
        }
    }
    if (!rc && r.copy[2]) { /* the dense result into the output's view */
        oar_ktensor d = dense_like(T[2]);
        int e = oar_cuda_convert(T[2]->buffer, T[2]->dtype, desc(T[2]), scratch[2], T[2]->dtype, desc(&d),
                                 numel(T[2]), st);
        if (e) rc = fail("matmul: copying the result out of scratch", e);
    }
    for (int i = 0; i < 3; i++) /* queued work first: the allocator's stream rule */
        if (scratch[i]) oar_cuda_mem_free(dev, scratch[i], bytes[i]);
    return rc;
}

static bool is_matmul_dtype(int32_t dt) { return is_any_float(dt); }

#ifdef OAR_CUDA_CUFFT
/* fft_c2c, fft_r2c, fft_c2r through cuFFT (cuda_fft.c) */
static int k_fft(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    if (c->n_in < 1 || c->n_out < 1) return host->error(-3, "cuda fft: wants an input and an output");
    int dev;
    cudaStream_t st = on_device_of(&c->out[0], &dev);
    return st ? oar_cuda_fft_run(c, dev, st) : -4;
}
#endif

#ifdef OAR_CUDA_CUDNN
/* conv2d, conv_transpose2d, conv2d_weight_grad through cuDNN (cuda_dnn.c) */
static int k_conv(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    if (c->n_in < 2 || c->n_out < 1) return host->error(-3, "cuda conv: wants two inputs and an output");
    int dev;
    cudaStream_t st = on_device_of(&c->out[0], &dev);
    return st ? oar_cuda_dnn_run(c, dev, st) : -4;
}
#endif

static oar_kernel_fn get_kernel(void *ctx, int index, const char *op, int32_t dt) {
    (void)ctx, (void)index;
    if (!op) return NULL;
    if (ew_launcher(op, dt)) return k_ew; /* f32, f64; bool and integer forms where the row has them */
    if (small_dtype(dt) && !strcmp(op, "fill")) return k_fill;
    if (small_dtype(dt) && (!strcmp(op, "cast") || !strcmp(op, "copy") || !strcmp(op, "contiguous")))
        return k_convert;
    if (is_matmul_dtype(dt) && !strcmp(op, "matmul")) return k_matmul;
    if (is_any_float(dt) && reduce_op(op) >= 0) return k_reduce;
    if (is_any_float(dt) && (!strcmp(op, "softmax") || !strcmp(op, "log_softmax"))) return k_softmax;
    if (is_float(dt) && !strcmp(op, "layer_norm")) return k_layer_norm;
    if (is_float(dt) && (!strcmp(op, "group_norm") || !strcmp(op, "batch_norm"))) return k_channel_norm;
    if (is_float(dt) && pool_op(op) >= 0) return k_pool;
    if (is_float(dt) && index_op(op) >= 0) return k_index;
    if (is_any_float(dt) && !strcmp(op, "slice_backward")) return k_slice_backward;
#ifdef OAR_CUDA_CUFFT
    if (oar_cuda_fft_claims(op, dt)) return k_fft;
#endif
#ifdef OAR_CUDA_CUDNN
    if (oar_cuda_dnn_claims(op, dt)) return k_conv;
#endif
    return NULL;
}

/* The finer check (get_kernel saw the op and the compute dtype): input
 * dtypes, ranks, and matmul's layouts. */
static int supports(void *ctx, int index, const oar_kernel_call *c) {
    (void)ctx, (void)index;
    if (!c || !c->op) return 0;
    for (int i = 0; i < c->n_in; i++)
        if (c->in[i].ndim > 8) return 0;
    for (int i = 0; i < c->n_out; i++)
        if (c->out[i].ndim > 8) return 0;
    const char *op = c->op;
    if (!strcmp(op, "cast")) { /* the target dtype: the output's, or attribute 0 before there is one */
        int32_t to = c->n_out > 0 ? c->out[0].dtype : c->n_iattr > 0 ? (int32_t)c->iattr[0] : -1;
        return c->n_in >= 1 && small_dtype(c->in[0].dtype) && small_dtype(to);
    }
    if (!strcmp(op, "contiguous")) return c->n_in >= 1 && small_dtype(c->in[0].dtype);
    if (!strcmp(op, "copy")) return c->n_in >= 2 && small_dtype(c->in[0].dtype) && small_dtype(c->in[1].dtype);
    if (!strcmp(op, "fill")) return c->n_in >= 1 && small_dtype(c->in[0].dtype);
    int n_ew = ew_arity(op);
    if (n_ew) { /* every input of the kernel's dtype (where's condition bool), a form in that dtype */
        if (c->n_in != n_ew) return 0;
        int32_t dt = ew_dtype(n_ew, c);
        if (!ew_launcher(op, dt)) return 0;
        for (int i = 0; i < c->n_in; i++)
            if (c->in[i].dtype != (n_ew == 3 && i == 0 ? DT_BOOL : dt)) return 0;
        return 1;
    }
    if (reduce_op(op) >= 0 || !strcmp(op, "softmax") || !strcmp(op, "log_softmax"))
        return c->n_in >= 1 && is_any_float(c->in[0].dtype); /* (outputs: the input's dtype) */
    if (!strcmp(op, "matmul")) { /* asked with the operands alone (n_out 0), or with the output */
        matmul_route r;
        if (c->n_in != 2 || !is_matmul_dtype(c->in[0].dtype) || c->in[1].dtype != c->in[0].dtype) return 0;
        if (c->n_out > 0) return matmul_route_of(c, &r);
        return matmul_inputs_ok(&c->in[0], &c->in[1]);
    }
    if (!strcmp(op, "layer_norm")) { /* every operand of x's dtype */
        if (c->n_in < 1 || !is_float(c->in[0].dtype)) return 0;
        for (int i = 1; i < 3; i++)
            if (present(c, i) && c->in[i].dtype != c->in[0].dtype) return 0;
        return 1;
    }
    if (!strcmp(op, "group_norm") || !strcmp(op, "batch_norm")) return channel_norm_ok(c, channel_norm_mode(c));
    if (pool_op(op) >= 0) return pool_ok(c, pool_op(op));
    if (index_op(op) >= 0) return index_ok(c, index_op(op));
    if (!strcmp(op, "slice_backward")) return slice_backward_ok(c);
#ifdef OAR_CUDA_CUFFT
    if (!strncmp(op, "fft_", 4)) return oar_cuda_fft_supports(c);
#endif
#ifdef OAR_CUDA_CUDNN
    if (!strcmp(op, "conv2d") || !strcmp(op, "conv_transpose2d") || !strcmp(op, "conv2d_weight_grad"))
        return oar_cuda_dnn_supports(c);
#endif
    return 1;
}

/* ABI 1.4: whether matmul and conv in dt run on the GPU's own dot-product
 * instructions, from the compute capability read at init (no driver call
 * here). f16 and bf16 matmul are cuBLAS GEMMs on the half data itself
 * (blas_types: CUDA_R_16F / CUDA_R_16BF, f32 accumulation), which cuBLAS
 * runs on Tensor Cores from cc 7.0 for f16 and cc 8.0 for bf16; below
 * that it computes them in f32 units, so 0. Conv has no half path (cuDNN
 * in f32 and f64 only, cuda_dnn.c): f16/bf16 conv are casts around the f32
 * one, which this answer, made by the matmul, does not cover. u8/i8: no
 * int8 GEMM or conv (they run on the CPU), 0. */
static int native_dot(void *ctx, int index, int32_t dt) {
    (void)ctx;
    if (dt != DT_F16 && dt != DT_BF16) return dt == DT_F32 || dt == DT_F64;
    if (index < 0 || index >= n_devs) return host->error(-3, "cuda native_dot: no such device");
    if (cc[index] < 0)
        return host->error(-4, "cuda native_dot: the device's compute capability could not be read when the "
                               "plugin loaded (cudaDeviceGetAttribute failed)");
    return cc[index] >= (dt == DT_F16 ? 70 : 80);
}

static const oar_device_iface iface = {
    .abi_version = OAR_DEVICE_ABI_VERSION,
    .struct_size = sizeof(oar_device_iface),
    .type_name = "cuda",
    .device_count = count,
    .get_props = props,
    .alloc = alloc,
    .free = release,
    .copy_to_device = to_device,
    .copy_to_host = to_host,
    .get_kernel = get_kernel,
    .copy_device_to_device = d2d,
    .synchronize = sync_dev,
    .supports_op = supports,
    .stream_create = stream_create,
    .stream_destroy = stream_destroy,
    .stream_synchronize = stream_sync,
    .event_create = event_create,
    .event_destroy = event_destroy,
    .event_record = event_record,
    .stream_wait_event = stream_wait,
    .event_synchronize = event_sync,
    .copy_to_device_async = to_device_async,
    .copy_to_host_async = to_host_async,
    .copy_device_to_device_async = d2d_async,
    .build_program = oar_cuda_build_program, /* generated kernels (cuda_jit.c) */
    .get_function = oar_cuda_get_function,
    .launch = oar_cuda_launch,
#ifdef OAR_CUDA_NCCL /* collectives over NCCL (cuda_nccl.c) */
    .all_reduce = oar_cuda_nccl_all_reduce,
    .all_gather = oar_cuda_nccl_all_gather,
    .reduce_scatter = oar_cuda_nccl_reduce_scatter,
    .broadcast = oar_cuda_nccl_broadcast,
    .send = oar_cuda_nccl_send,
    .recv = oar_cuda_nccl_recv,
    .comm_unique_id = oar_cuda_nccl_unique_id,
    .comm_create = oar_cuda_nccl_comm_create,
    .comm_destroy = oar_cuda_nccl_comm_destroy,
#endif
    .native_dot = native_dot, /* (ABI 1.4) */
};

static void shutdown(void *ctx) {
    (void)ctx;
    oar_cuda_jit_shutdown();
#ifdef OAR_CUDA_CUFFT
    oar_cuda_fft_shutdown(); /* its plans, before the streams they name */
#endif
#ifdef OAR_CUDA_CUDNN
    oar_cuda_dnn_shutdown(); /* its handles, likewise */
#endif
    for (int i = 0; i < MAX_DEV; i++)
        if (blas[i]) {
            cublasDestroy(blas[i]);
            blas[i] = NULL;
        }
    oar_cuda_mem_shutdown(); /* the cache, staging buffers and streams (after cuBLAS, which uses them) */
}

__attribute__((visibility("default"))) int oar_plugin_init(const oar_host_api *h,
                                                           oar_plugin_desc *out) {
    host = h;
    oar_cuda_mem_init(h);
    oar_cuda_jit_init(h);
#ifdef OAR_CUDA_CUFFT
    oar_cuda_fft_init(h);
#endif
#ifdef OAR_CUDA_CUDNN
    oar_cuda_dnn_init(h);
#endif
#ifdef OAR_CUDA_NCCL
    oar_cuda_nccl_init(h);
#endif
    out->name = "cuda";
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n <= 0) {
        char msg[256];
        snprintf(msg, sizeof msg, "cuda: no CUDA device (%s)",
                 e != cudaSuccess ? cudaGetErrorString(e) : "the driver reports none");
        return h->error(-3, msg);
    }
    n_devs = n < MAX_DEV ? n : MAX_DEV;
    for (int i = 0; i < n_devs; i++) { /* for native_dot, once */
        int major = 0, minor = 0;
        bool ok = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, i) == cudaSuccess &&
                  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, i) == cudaSuccess;
        cc[i] = ok ? major * 10 + minor : -1;
    }
    out->abi_version = OAR_DEVICE_ABI_VERSION;
    out->iface = &iface;
    out->shutdown = shutdown;
    return 0;
}

/* The CUDA device plugin: every CUDA device becomes "cuda:<i>". Buffers
 * come from cudaMalloc; streams, events and asynchronous copies map onto
 * the CUDA runtime's. Built against <oar/device.h> alone.
 *
 * What it claims, exactly (everything else returns NULL from get_kernel and
 * runs on the CPU with copies):
 *   f32 elementwise over strided and broadcast views (cuda_kernels.cu):
 *     every row of oar's op table src/ops/elementwise.def with an f32
 *     device form (its gen column), found by name in oar_cuda_ew_table;
 *     fill
 *   f32 matmul of two 2-D operands that cuBLAS reads in place (a unit
 *     stride in one dim, the other at least the extent: no expanded or
 *     overlapping operand, cuda_gemm_layout.h), into a dense output,
 *     through cuBLAS (cublasSgemm); other matmuls are refused by
 *     supports_op and run on the CPU
 * Collectives (all_reduce, all_gather, reduce_scatter, broadcast, send,
 * recv and communicators) over NCCL when CMake found it (cuda_nccl.c,
 * OAR_CUDA_NCCL); without it the members are NULL and oar stages device
 * shards through the host. The machine it is written on has no GPU: its
 * elementwise kernels were checked on an H200 (plugins/cuda/ew_check.sh,
 * bench/RESULTS.md); the rest is compiled and linked but unrun. */
#define OAR_DEVICE_PLUGIN_ONLY
#include <oar/device.h>

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "cuda_gemm_layout.h"
#include "cuda_kernels.h"
#include "cuda_jit.h"
#ifdef OAR_CUDA_NCCL
#include "cuda_nccl.h"
#endif

#define MAX_DEV 16
#define DT_BOOL 0
#define DT_F32 6

static const oar_host_api *host;
static int n_devs;
static cublasHandle_t blas[MAX_DEV];
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
    void *p = NULL;
    if (cudaSetDevice(index) != cudaSuccess || cudaMalloc(&p, n ? n : 4) != cudaSuccess) return NULL;
    return p;
}

static void release(void *ctx, int index, void *p, size_t n) {
    (void)ctx, (void)n;
    cudaSetDevice(index);
    cudaFree(p);
}

static int to_device(void *ctx, int index, void *dst, size_t off, const void *src, size_t n) {
    (void)ctx;
    CU(cudaSetDevice(index), "cudaSetDevice");
    CU(cudaMemcpy((char *)dst + off, src, n, cudaMemcpyHostToDevice), "cudaMemcpy to the device");
    return 0;
}

static int to_host(void *ctx, int index, void *dst, const void *src, size_t off, size_t n) {
    (void)ctx;
    CU(cudaSetDevice(index), "cudaSetDevice");
    CU(cudaMemcpy(dst, (const char *)src + off, n, cudaMemcpyDeviceToHost), "cudaMemcpy to the host");
    return 0;
}

static int d2d(void *ctx, int index, void *dst, size_t doff, const void *src, size_t soff, size_t n) {
    (void)ctx;
    CU(cudaSetDevice(index), "cudaSetDevice");
    CU(cudaMemcpy((char *)dst + doff, (const char *)src + soff, n, cudaMemcpyDeviceToDevice),
       "cudaMemcpy on the device");
    return 0;
}

static int sync_dev(void *ctx, int index) {
    (void)ctx;
    CU(cudaSetDevice(index), "cudaSetDevice");
    CU(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    return 0;
}

/* ---- streams, events, asynchronous copies ---------------------------------- */

static oar_stream stream_create(void *ctx, int index) {
    (void)ctx;
    cudaStream_t s = NULL;
    if (cudaSetDevice(index) != cudaSuccess || cudaStreamCreate(&s) != cudaSuccess) return NULL;
    return s;
}
static void stream_destroy(void *ctx, int index, oar_stream s) {
    (void)ctx, (void)index;
    cudaStreamDestroy((cudaStream_t)s);
}
static int stream_sync(void *ctx, int index, oar_stream s) {
    (void)ctx, (void)index;
    CU(cudaStreamSynchronize((cudaStream_t)s), "cudaStreamSynchronize");
    return 0;
}
static oar_event event_create(void *ctx, int index) {
    (void)ctx;
    cudaEvent_t e = NULL;
    if (cudaSetDevice(index) != cudaSuccess ||
        cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess)
        return NULL;
    return e;
}
static void event_destroy(void *ctx, int index, oar_event e) {
    (void)ctx, (void)index;
    cudaEventDestroy((cudaEvent_t)e);
}
static int event_record(void *ctx, int index, oar_event e, oar_stream s) {
    (void)ctx, (void)index;
    CU(cudaEventRecord((cudaEvent_t)e, (cudaStream_t)s), "cudaEventRecord");
    return 0;
}
static int stream_wait(void *ctx, int index, oar_stream s, oar_event e) {
    (void)ctx, (void)index;
    CU(cudaStreamWaitEvent((cudaStream_t)s, (cudaEvent_t)e, 0), "cudaStreamWaitEvent");
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
    CU(cudaSetDevice(index), "cudaSetDevice");
    CU(cudaMemcpyAsync((char *)dst + off, src, n, cudaMemcpyHostToDevice, (cudaStream_t)s),
       "cudaMemcpyAsync to the device");
    return 0;
}
static int to_host_async(void *ctx, int index, void *dst, const void *src, size_t off, size_t n,
                         oar_stream s) {
    (void)ctx;
    CU(cudaSetDevice(index), "cudaSetDevice");
    CU(cudaMemcpyAsync(dst, (const char *)src + off, n, cudaMemcpyDeviceToHost, (cudaStream_t)s),
       "cudaMemcpyAsync to the host");
    return 0;
}
static int d2d_async(void *ctx, int index, void *dst, size_t doff, const void *src, size_t soff,
                     size_t n, oar_stream s) {
    (void)ctx;
    CU(cudaSetDevice(index), "cudaSetDevice");
    CU(cudaMemcpyAsync((char *)dst + doff, (const char *)src + soff, n, cudaMemcpyDeviceToDevice,
                       (cudaStream_t)s),
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

/* Makes the device owning t's buffer current. */
static int use_device_of(const oar_ktensor *t) {
    struct cudaPointerAttributes a;
    CU(cudaPointerGetAttributes(&a, t->buffer), "cudaPointerGetAttributes");
    CU(cudaSetDevice(a.device), "cudaSetDevice");
    return 0;
}

/* The elementwise table's launcher of op, or NULL. */
static const oar_cuda_ew *ew_find(const char *op) {
    for (const oar_cuda_ew *e = oar_cuda_ew_table; e->op; e++)
        if (!strcmp(e->op, op)) return e;
    return NULL;
}

static int k_ew(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    const oar_cuda_ew *e = ew_find(c->op);
    if (!e || c->n_in != e->n_in || c->n_in > 3) return host->error(-3, "cuda: no such elementwise kernel");
    if (use_device_of(&c->out[0])) return -4;
    const void *in[3] = {0};
    oar_cuda_desc ti[3];
    memset(ti, 0, sizeof ti);
    for (int i = 0; i < c->n_in; i++) {
        in[i] = c->in[i].buffer;
        ti[i] = desc(&c->in[i]);
    }
    float p0 = c->n_fattr > 0 ? (float)c->fattr[0] : 0, p1 = c->n_fattr > 1 ? (float)c->fattr[1] : 0;
    int alt = c->n_iattr > 0 && c->iattr[0] != 0;
    int e_ = e->launch(c->out[0].buffer, desc(&c->out[0]), in, ti, p0, p1, alt, numel(&c->out[0]), NULL);
    return e_ ? fail(c->op, e_) : 0;
}

static int k_fill(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    if (use_device_of(&c->in[0])) return -4;
    int e = oar_cuda_fill(c->in[0].buffer, desc(&c->in[0]), (float)c->fattr[0], numel(&c->in[0]),
                          NULL);
    return e ? fail("fill", e) : 0;
}

/* A row-major 2-D operand as cuBLAS sees it (column-major): its transpose
 * with leading dimension ld, transposed again (op T) if its rows are the
 * unit-stride dim; false for a layout cuBLAS cannot read in place
 * (cuda_gemm_layout.h: expanded or overlapping operands). */
static bool blas_operand(const oar_ktensor *t, cublasOperation_t *op, int *ld) {
    bool transposed;
    int64_t ld64;
    if (t->ndim != 2 || !oar_cuda_gemm_layout(t->shape, t->strides, &transposed, &ld64)) return false;
    *op = transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
    *ld = (int)ld64;
    return true;
}

static int k_matmul(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    const oar_ktensor *A = &c->in[0], *B = &c->in[1], *O = &c->out[0];
    if (use_device_of(O)) return -4;
    struct cudaPointerAttributes pa;
    CU(cudaPointerGetAttributes(&pa, O->buffer), "cudaPointerGetAttributes");
    int dev = pa.device;
    if (dev < 0 || dev >= MAX_DEV) return host->error(-3, "cuda matmul: device index out of range");
    pthread_mutex_lock(&blas_lock);
    cublasStatus_t bs = CUBLAS_STATUS_SUCCESS;
    if (!blas[dev]) bs = cublasCreate(&blas[dev]);
    pthread_mutex_unlock(&blas_lock);
    if (bs != CUBLAS_STATUS_SUCCESS) return host->error(-4, "cuda matmul: cublasCreate failed");
    int n = (int)A->shape[0], k = (int)A->shape[1], m = (int)B->shape[1], lda, ldb;
    cublasOperation_t opa, opb;
    if (!blas_operand(A, &opa, &lda) || !blas_operand(B, &opb, &ldb))
        return host->error(-3, "cuda matmul: an operand cuBLAS cannot read in place (no unit-stride dim, "
                           "or expanded)");
    if (O->ndim != 2 || O->shape[0] != n || O->shape[1] != m || !oar_cuda_gemm_out_ok(O->shape, O->strides)) {
        char msg[96];
        snprintf(msg, sizeof msg, "cuda matmul: the output is not a dense row-major [%d, %d] matrix", n, m);
        return host->error(-3, msg);
    }
    const float one = 1, zero = 0;
    const float *a = (const float *)A->buffer + A->offset, *b = (const float *)B->buffer + B->offset;
    float *o = (float *)O->buffer + O->offset;
    /* row-major O = A B is column-major O^T = B^T A^T */
    bs = cublasSgemm(blas[dev], opb, opa, m, n, k, &one, b, ldb, a, lda, &zero, o, m > 0 ? m : 1);
    return bs == CUBLAS_STATUS_SUCCESS ? 0 : host->error(-4, "cuda matmul: cublasSgemm failed");
}

static oar_kernel_fn get_kernel(void *ctx, int index, const char *op, int32_t dt) {
    (void)ctx, (void)index;
    if (dt != DT_F32) return NULL;
    if (ew_find(op)) return k_ew;
    if (!strcmp(op, "fill")) return k_fill;
    if (!strcmp(op, "matmul")) return k_matmul;
    return NULL;
}

static int supports(void *ctx, int index, const oar_kernel_call *c) {
    (void)ctx, (void)index;
    bool where = !strcmp(c->op, "where"); /* its condition is bool */
    for (int i = 0; i < c->n_in; i++)
        if (c->in[i].dtype != (where && i == 0 ? DT_BOOL : DT_F32) || c->in[i].ndim > 8) return 0;
    if (strcmp(c->op, "matmul")) return 1;
    cublasOperation_t op;
    int ld;
    return c->in[0].ndim == 2 && c->in[1].ndim == 2 && blas_operand(&c->in[0], &op, &ld) &&
           blas_operand(&c->in[1], &op, &ld) && c->in[0].shape[0] < 2147483647 &&
           c->in[0].shape[1] < 2147483647 && c->in[1].shape[1] < 2147483647;
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
};

static void shutdown(void *ctx) {
    (void)ctx;
    oar_cuda_jit_shutdown();
    for (int i = 0; i < MAX_DEV; i++)
        if (blas[i]) {
            cublasDestroy(blas[i]);
            blas[i] = NULL;
        }
}

__attribute__((visibility("default"))) int oar_plugin_init(const oar_host_api *h,
                                                           oar_plugin_desc *out) {
    host = h;
    oar_cuda_jit_init(h);
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
    out->abi_version = OAR_DEVICE_ABI_VERSION;
    out->iface = &iface;
    out->shutdown = shutdown;
    return 0;
}

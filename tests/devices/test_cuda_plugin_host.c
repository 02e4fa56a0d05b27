/* The cuda plugin's host code (plugins/cuda/cuda_plugin.c, cuda_mem.c)
 * without a GPU: it is compiled into this test against the CUDA headers,
 * with the CUDA runtime and cuBLAS calls it makes replaced by fakes in host
 * memory (a "device" buffer is malloc'd to its exact size, so ASan sees any
 * read past it; a stream is a queue of copies that run only when something
 * waits for them or a kernel follows) and its kernel launchers by CPU
 * loops. What that checks, which nothing else can on a machine without a
 * GPU:
 * - the caching allocator: size classes hold their requests; a loop of
 *   allocate/free makes one cudaMalloc; random allocations never hand out
 *   a live block and make at most one cudaMalloc per block of a class
 *   live at once; nor do four threads allocating at once; the cap (OAR_CUDA_CACHE_BYTES, 0: no cache, exact
 *   sizes); out of memory gives the cache back once and tries again;
 *   shutdown gives back every block, staging buffer and stream (and ASan
 *   finds no leak);
 * - the stream: every kernel kind, cuBLAS (through cublasSetStream), the
 *   copies and the ABI's async members given no stream run on the
 *   plugin's one non-blocking stream; a stream oar made is used as given;
 * - staged copies: pageable memory goes through two pinned buffers made
 *   once; a copy to the device leaves the caller's memory free at once and
 *   never lets the host overwrite a buffer a queued copy still reads; a
 *   copy to the host holds the data when it returns; without pinned
 *   memory the copies are still right;
 * - matmul: the arguments the plugin gives cublasGemmStridedBatchedEx
 *   (ops, leading dimensions, batch strides, the swap of A and B for
 *   row-major) give the product the views name, for batched, broadcast,
 *   transposed, stride-0-batch and 1-D operands in f32 and f64: the fake
 *   GEMM is cuBLAS's documented column-major definition, and the result is
 *   compared with a matmul over the views written here;
 * - operands cuBLAS cannot read in place (expanded rows, batch dims of no
 *   single stride, a permuted attention head) and outputs that are not
 *   dense go through dense scratch copies, right and never read past a
 *   buffer; shapes that do not multiply are refused, and the kernel called
 *   anyway fails with a message;
 * - no per-call device query: with one device, 200 kernel calls make one
 *   cudaSetDevice and no cudaPointerGetAttributes;
 * - get_kernel and supports_op claim what the plugin's head says (dtypes,
 *   cast's target dtype before the output exists) and refuse the rest.
 * Skipped (77) where CMake found no CUDA headers. */
#ifdef OAR_TEST_CUDA_HEADERS
#include "../../plugins/cuda/cuda_plugin.c"
#include "../../plugins/cuda/cuda_mem.c"

#include <assert.h>
#include <sched.h>
#include <math.h>
#include <stdlib.h>

#include "test.h"
#include "core/core.h" /* f16/bf16 conversions */

/* ---- fake CUDA runtime --------------------------------------------------------- */
/* Device memory is host memory (cudaMalloc: malloc of exactly the size
 * asked, listed so that live bytes can be capped to fake an out-of-memory
 * GPU). A stream is a queue: cudaMemcpyAsync on a stream only records the
 * copy, which runs (reading its source then) when the stream is
 * synchronized, an event recorded after it is waited for, or a kernel or
 * GEMM is launched on the stream (the fakes run what is queued first, then
 * compute at once). So a plugin that reads a copy's result before waiting,
 * or lets the host write a staging buffer a queued copy still reads, gets
 * wrong data here as it would on a GPU. Each call that takes a stream
 * counts whether it was the plugin's stream (mem_devs[0].stream). */
static int fake_devices = 1, n_set_device, n_pointer_queries, n_gemm;
static int n_malloc, n_cuda_free, n_host_alloc, n_free_host, n_stream_create, n_stream_destroy;
static int n_on_stream, n_off_stream, n_pageable, fail_host_alloc;
static size_t live_dev_bytes, dev_limit = (size_t)-1, last_malloc_size;

typedef struct {
    void *p;
    size_t n;
} fake_buf;
static fake_buf dev_bufs[4096], pinned[16];
static int n_dev_bufs, n_pinned;

typedef struct {
    void *dst;
    const void *src;
    size_t n;
} fake_copy;
typedef struct fake_stream {
    unsigned flags;
    fake_copy *q;      /* queued copies */
    size_t queued, ran, cap; /* copies ever queued, run */
    struct fake_stream *next;
} fake_stream;
static fake_stream *streams; /* live ones */
typedef struct {
    fake_stream *s; /* NULL: never recorded */
    size_t seq;     /* the copies queued before the record */
} fake_event;

static bool is_pinned(const void *p) {
    for (int i = 0; i < n_pinned; i++)
        if ((const char *)p >= (const char *)pinned[i].p && (const char *)p < (const char *)pinned[i].p + pinned[i].n)
            return true;
    return false;
}
static void run_until(fake_stream *s, size_t seq) {
    for (; s && s->ran < seq; s->ran++) {
        fake_copy *c = &s->q[s->ran % s->cap];
        memcpy(c->dst, c->src, c->n);
    }
}
static void run_all(fake_stream *s) { run_until(s, s ? s->queued : 0); }
/* a call on stream st, counted */
static void note_stream(const void *st) {
    if (st && st == (const void *)mem_devs[0].stream) n_on_stream++;
    else n_off_stream++;
}
/* a kernel (or a synchronization) on st: what is queued there runs first */
static void on_stream(void *st) {
    note_stream(st);
    run_all((fake_stream *)st);
}

cudaError_t cudaGetDeviceCount(int *n) { return *n = fake_devices, cudaSuccess; }
cudaError_t cudaSetDevice(int d) { return n_set_device++, d >= 0 && d < fake_devices ? cudaSuccess : cudaErrorInvalidDevice; }
const char *cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : "a fake CUDA error"; }
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int d) {
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "fake GPU %d", d);
    p->totalGlobalMem = 1 << 30;
    return cudaSuccess;
}
/* each device's compute capability (major * 10 + minor; -1: the query
 * fails), and the queries made (native_dot must make none) */
static int fake_cc[4] = {80, 80, 80, 80}, n_attr_queries;
cudaError_t cudaDeviceGetAttribute(int *v, enum cudaDeviceAttr a, int d) {
    n_attr_queries++;
    if (d < 0 || d >= fake_devices || d >= 4 || fake_cc[d] < 0) return cudaErrorInvalidDevice;
    if (a == cudaDevAttrComputeCapabilityMajor) return *v = fake_cc[d] / 10, cudaSuccess;
    if (a == cudaDevAttrComputeCapabilityMinor) return *v = fake_cc[d] % 10, cudaSuccess;
    return cudaErrorInvalidValue;
}
static pthread_mutex_t fake_mem_lock = PTHREAD_MUTEX_INITIALIZER; /* (the threads test) */
cudaError_t cudaMalloc(void **p, size_t n) {
    pthread_mutex_lock(&fake_mem_lock);
    cudaError_t e = cudaSuccess;
    n_malloc++;
    last_malloc_size = n;
    if (live_dev_bytes + n > dev_limit || n_dev_bufs == 4096 || !(*p = malloc(n))) {
        *p = NULL;
        e = cudaErrorMemoryAllocation;
    } else {
        dev_bufs[n_dev_bufs++] = (fake_buf){*p, n};
        live_dev_bytes += n;
    }
    pthread_mutex_unlock(&fake_mem_lock);
    return e;
}
cudaError_t cudaFree(void *p) {
    pthread_mutex_lock(&fake_mem_lock);
    cudaError_t e = cudaErrorInvalidValue; /* not a cudaMalloc'd pointer, or freed twice */
    n_cuda_free++;
    for (int i = 0; i < n_dev_bufs; i++)
        if (dev_bufs[i].p == p) {
            live_dev_bytes -= dev_bufs[i].n;
            dev_bufs[i] = dev_bufs[--n_dev_bufs];
            free(p);
            e = cudaSuccess;
            break;
        }
    pthread_mutex_unlock(&fake_mem_lock);
    return e;
}
cudaError_t cudaHostAlloc(void **p, size_t n, unsigned flags) {
    (void)flags;
    n_host_alloc++;
    if (fail_host_alloc || n_pinned == 16 || !(*p = malloc(n))) return *p = NULL, cudaErrorMemoryAllocation;
    pinned[n_pinned++] = (fake_buf){*p, n};
    return cudaSuccess;
}
cudaError_t cudaFreeHost(void *p) {
    n_free_host++;
    for (int i = 0; i < n_pinned; i++)
        if (pinned[i].p == p) {
            pinned[i] = pinned[--n_pinned];
            free(p);
            return cudaSuccess;
        }
    return cudaErrorInvalidValue;
}
cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, enum cudaMemcpyKind k, cudaStream_t st) {
    note_stream(st);
    if ((k == cudaMemcpyHostToDevice && !is_pinned(s)) || (k == cudaMemcpyDeviceToHost && !is_pinned(d)))
        n_pageable++;
    fake_stream *f = (fake_stream *)st;
    if (!f) return memcpy(d, s, n), cudaSuccess; /* the legacy stream: at once */
    if (f->queued - f->ran == f->cap) { /* grow the ring */
        size_t cap = f->cap ? 2 * f->cap : 8;
        fake_copy *q = malloc(cap * sizeof *q);
        if (!q) return cudaErrorMemoryAllocation;
        for (size_t i = f->ran; i < f->queued; i++) q[i % cap] = f->q[i % f->cap];
        free(f->q);
        f->q = q, f->cap = cap;
    }
    f->q[f->queued++ % f->cap] = (fake_copy){d, s, n};
    return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) {
    for (fake_stream *s = streams; s; s = s->next) run_all(s);
    return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags) {
    fake_stream *f = calloc(1, sizeof *f);
    if (!f) return cudaErrorMemoryAllocation;
    n_stream_create++;
    f->flags = flags;
    f->next = streams;
    streams = f;
    *s = (cudaStream_t)f;
    return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, cudaStreamDefault); }
cudaError_t cudaStreamDestroy(cudaStream_t s) {
    fake_stream *f = (fake_stream *)s;
    run_all(f); /* (CUDA finishes the queued work) */
    for (fake_stream **p = &streams; *p; p = &(*p)->next)
        if (*p == f) {
            *p = f->next;
            n_stream_destroy++;
            free(f->q);
            free(f);
            return cudaSuccess;
        }
    return cudaErrorInvalidResourceHandle;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) { return on_stream(s), cudaSuccess; }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned f) {
    return (void)f, (*e = (cudaEvent_t)calloc(1, sizeof(fake_event))) ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) { return free(e), cudaSuccess; }
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    fake_event *f = (fake_event *)e;
    note_stream(s);
    f->s = (fake_stream *)s;
    f->seq = f->s ? f->s->queued : 0;
    return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned f) { return (void)s, (void)e, (void)f, cudaSuccess; }
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    fake_event *f = (fake_event *)e;
    run_until(f->s, f->seq); /* that stream's copies up to the record, no further */
    return cudaSuccess;
}
cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *p) {
    (void)p;
    n_pointer_queries++;
    memset(a, 0, sizeof *a);
    a->device = 0;
    return cudaSuccess;
}

/* ---- fake cuBLAS: the documented column-major definition ----------------------- */
/* a handle is the stream it was given */
cublasStatus_t cublasCreate(cublasHandle_t *h) {
    return (*h = (cublasHandle_t)calloc(1, sizeof(cudaStream_t))) ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}
cublasStatus_t cublasDestroy(cublasHandle_t h) { return free(h), CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) { return *(cudaStream_t *)h = s, CUBLAS_STATUS_SUCCESS; }
const char *cublasGetStatusString(cublasStatus_t s) { return s ? "a fake cuBLAS error" : "success"; }

/* C[b] (m x n, ldc) = alpha op(A[b]) (m x k) op(B[b]) (k x n) + beta C[b], column-major */
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                          int k, const void *alpha, const void *A, cudaDataType at, int lda,
                                          long long sa, const void *B, cudaDataType bt, int ldb, long long sb,
                                          const void *beta, void *C, cudaDataType ct, int ldc, long long sc,
                                          int batch, cublasComputeType_t comp, cublasGemmAlgo_t algo) {
    (void)algo;
    n_gemm++;
    on_stream(*(cudaStream_t *)h);
    bool f64 = at == CUDA_R_64F;
    if (at != bt || at != ct || (at != CUDA_R_32F && !f64) || (f64 != (comp == CUBLAS_COMPUTE_64F)))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    /* cuBLAS's own argument checks */
    if (m < 0 || n < 0 || k < 0 || batch < 0 || ldc < (m > 1 ? m : 1) ||
        lda < ((ta == CUBLAS_OP_N ? m : k) > 1 ? (ta == CUBLAS_OP_N ? m : k) : 1) ||
        ldb < ((tb == CUBLAS_OP_N ? k : n) > 1 ? (tb == CUBLAS_OP_N ? k : n) : 1))
        return CUBLAS_STATUS_INVALID_VALUE;
    double al = f64 ? *(const double *)alpha : *(const float *)alpha;
    double be = f64 ? *(const double *)beta : *(const float *)beta;
    for (int b = 0; b < batch; b++)
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++) {
                double acc = 0;
                for (int l = 0; l < k; l++) {
                    long long ia = b * sa + (ta == CUBLAS_OP_N ? i + (long long)l * lda : l + (long long)i * lda);
                    long long ib = b * sb + (tb == CUBLAS_OP_N ? l + (long long)j * ldb : j + (long long)l * ldb);
                    acc += (f64 ? ((const double *)A)[ia] : ((const float *)A)[ia]) *
                           (f64 ? ((const double *)B)[ib] : ((const float *)B)[ib]);
                }
                long long ic = b * sc + i + (long long)j * ldc;
                if (f64) ((double *)C)[ic] = al * acc + (be != 0 ? be * ((double *)C)[ic] : 0);
                else ((float *)C)[ic] = (float)(al * acc + (be != 0 ? be * ((float *)C)[ic] : 0));
            }
    return CUBLAS_STATUS_SUCCESS;
}

/* ---- the plugin's other files: generated kernels, launchers ------------------ */
void oar_cuda_jit_init(const oar_host_api *h) { (void)h; }
void oar_cuda_jit_shutdown(void) {}
void *oar_cuda_build_program(void *ctx, int index, const char *language, const char *source) {
    return (void)ctx, (void)index, (void)language, (void)source, NULL;
}
void *oar_cuda_get_function(void *ctx, int index, void *prog, const char *name) {
    return (void)ctx, (void)index, (void)prog, (void)name, NULL;
}
int oar_cuda_launch(void *ctx, int index, void *fn, int n_buffers, void *const *buffers, int n_scalars,
                    const int64_t *scalars, size_t global_size) {
    return (void)ctx, (void)index, (void)fn, (void)n_buffers, (void)buffers, (void)n_scalars, (void)scalars,
           (void)global_size, -1;
}

static int64_t at_of(const oar_cuda_desc *t, int64_t i) {
    int64_t off = t->off;
    for (int64_t d = t->nd - 1; d >= 0; d--) {
        off += (i % t->shape[d]) * t->st[d];
        i /= t->shape[d];
    }
    return off;
}
static int n_ew_calls;
static int add_f32(void *o, oar_cuda_desc to, const void *const *in, const oar_cuda_desc *ti, double p0, double p1,
                   int alt, int64_t n, void *stream) {
    (void)p0, (void)p1, (void)alt;
    on_stream(stream);
    n_ew_calls++;
    for (int64_t i = 0; i < n; i++)
        ((float *)o)[at_of(&to, i)] = ((const float *)in[0])[at_of(&ti[0], i)] + ((const float *)in[1])[at_of(&ti[1], i)];
    return 0;
}
static int add_f64(void *o, oar_cuda_desc to, const void *const *in, const oar_cuda_desc *ti, double p0, double p1,
                   int alt, int64_t n, void *stream) {
    (void)p0, (void)p1, (void)alt;
    on_stream(stream);
    n_ew_calls++;
    for (int64_t i = 0; i < n; i++)
        ((double *)o)[at_of(&to, i)] = ((const double *)in[0])[at_of(&ti[0], i)] + ((const double *)in[1])[at_of(&ti[1], i)];
    return 0;
}
const oar_cuda_ew oar_cuda_ew_table[] = {{"add", 2, add_f32, add_f64}, {NULL, 0, NULL, NULL}};
const oar_cuda_ew1 oar_cuda_ew_b1[] = {{NULL, 0, NULL}}, oar_cuda_ew_u8[] = {{NULL, 0, NULL}},
                   oar_cuda_ew_i32[] = {{NULL, 0, NULL}}, oar_cuda_ew_i64[] = {{NULL, 0, NULL}};
static int last_convert_to = -1, last_convert_from = -1, last_fill_dt = -1;
static double ld_dt(const void *p, int32_t dt, int64_t i);
static void st_dt(void *p, int32_t dt, int64_t i, double v);
/* records the dtypes; between float dtypes it also copies (matmul's dense scratch) */
int oar_cuda_convert(void *o, int32_t to_dt, oar_cuda_desc to, const void *x, int32_t from, oar_cuda_desc tx, int64_t n,
                     void *stream) {
    on_stream(stream);
    last_convert_to = to_dt, last_convert_from = from;
    if (to_dt >= DT_F16 && to_dt <= DT_F64 && from >= DT_F16 && from <= DT_F64)
        for (int64_t i = 0; i < n; i++) st_dt(o, to_dt, at_of(&to, i), ld_dt(x, from, at_of(&tx, i)));
    return 0;
}
int oar_cuda_fill(void *o, int32_t dt, oar_cuda_desc to, double v, int64_t n, void *stream) {
    (void)o, (void)to, (void)v, (void)n;
    on_stream(stream);
    last_fill_dt = dt;
    return 0;
}
/* element i of a buffer of dtype dt (f16, bf16, f32, f64) */
static double ld_dt(const void *p, int32_t dt, int64_t i) {
    switch (dt) {
    case DT_F16: return oari_f16_to_f32(((const uint16_t *)p)[i]);
    case DT_BF16: return oari_bf16_to_f32(((const uint16_t *)p)[i]);
    case DT_F32: return ((const float *)p)[i];
    default: return ((const double *)p)[i];
    }
}
static void st_dt(void *p, int32_t dt, int64_t i, double v) {
    switch (dt) {
    case DT_F16: ((uint16_t *)p)[i] = oari_f32_to_f16((float)v); break;
    case DT_BF16: ((uint16_t *)p)[i] = oari_f32_to_bf16((float)v); break;
    case DT_F32: ((float *)p)[i] = (float)v; break;
    default: ((double *)p)[i] = v;
    }
}
static int32_t last_reduce_dt = -1, last_softmax_dt = -1;
/* the kernels' definitions, in double */
int oar_cuda_reduce(void *o, int32_t dt, int64_t o_off, const void *x, oar_cuda_desc kept, oar_cuda_desc red, int op,
                    int64_t n_out, int64_t n_red, void *stream) {
    on_stream(stream);
    last_reduce_dt = dt;
    for (int64_t i = 0; i < n_out; i++) {
        double acc = op == 0 ? 0 : op == 3 ? 1 : op == 1 ? -INFINITY : INFINITY;
        for (int64_t r = 0; r < n_red; r++) {
            double v = ld_dt(x, dt, at_of(&kept, i) + at_of(&red, r));
            acc = op == 0 ? acc + v : op == 3 ? acc * v : op == 1 ? fmax(acc, v) : fmin(acc, v);
        }
        st_dt(o, dt, o_off + i, acc);
    }
    return 0;
}
int oar_cuda_softmax(void *o, int32_t dt, const void *x, oar_cuda_desc rows_x, oar_cuda_desc rows_o, int64_t len,
                     int64_t sx, int64_t so, int log_, int64_t n_rows, void *stream) {
    on_stream(stream);
    last_softmax_dt = dt;
    for (int64_t r = 0; r < n_rows; r++) {
        int64_t bx = at_of(&rows_x, r), bo = at_of(&rows_o, r);
        double mx = -INFINITY, s = 0;
        for (int64_t j = 0; j < len; j++) mx = fmax(mx, ld_dt(x, dt, bx + j * sx));
        for (int64_t j = 0; j < len; j++) s += exp(ld_dt(x, dt, bx + j * sx) - mx);
        for (int64_t j = 0; j < len; j++) {
            double v = ld_dt(x, dt, bx + j * sx) - mx;
            st_dt(o, dt, bo + j * so, log_ ? v - log(s) : exp(v) / s);
        }
    }
    return 0;
}
/* layer_norm and the pools (indices: i64) */
#define FAKE_LD(p, dt, i) ((dt) == 3 ? (double)((const int64_t *)(p))[i] : ld_dt(p, dt, i))
#define FAKE_ST(p, dt, i, v) ((dt) == 3 ? (void)(((int64_t *)(p))[i] = (int64_t)(v)) : st_dt(p, dt, i, v))
#include "fake_cuda_nn.h"

/* ---- the host table ------------------------------------------------------------- */
static char last_msg[512];
static int host_error(int status, const char *msg) {
    snprintf(last_msg, sizeof last_msg, "%s", msg);
    return status;
}
static int n_warnings;
static void host_log(int level, const char *plugin, const char *msg) {
    (void)plugin, (void)msg;
    if (level == OAR_LOG_WARN) n_warnings++;
}
static void *host_alloc(size_t n) { return malloc(n); }
static void host_free(void *p, size_t n) { (void)n, free(p); }
static const oar_host_api fake_host = {.abi_version = OAR_DEVICE_ABI_VERSION, .struct_size = sizeof(oar_host_api),
                                       .log = host_log, .error = host_error, .alloc = host_alloc, .free = host_free};

/* ---- tensors in fake device memory ------------------------------------------- */
typedef struct {
    oar_ktensor k;
    size_t bytes;
} dev_tensor;

/* a view of a fresh buffer of exactly `elems` elements (dtype f16, bf16, f32 or f64), filled with small values */
static dev_tensor make(int32_t dt, int ndim, const int64_t *shape, const int64_t *strides, int64_t offset,
                       int64_t elems) {
    dev_tensor t;
    memset(&t, 0, sizeof t);
    t.bytes = (size_t)elems * (size_t)dt_size(dt);
    t.k.buffer = iface.alloc(NULL, 0, t.bytes);
    t.k.dtype = dt;
    t.k.ndim = ndim;
    t.k.offset = offset;
    for (int i = 0; i < ndim; i++) t.k.shape[i] = shape[i], t.k.strides[i] = strides[i];
    for (int64_t i = 0; i < elems; i++) {
        double v = (double)((i * 7 + 3) % 11) - 5.0;
        st_dt(t.k.buffer, dt, i, v / 4);
    }
    return t;
}
static double get(const oar_ktensor *t, int64_t off) { return ld_dt(t->buffer, t->dtype, off); }
static void drop(dev_tensor *t) { iface.free(NULL, 0, t->k.buffer, t->bytes); }

/* element (batch multi-index bi over nb output batch dims, i, j) of a matmul operand view */
static int64_t off_of(const oar_ktensor *t, int nb, const int64_t *bi, int64_t i, int64_t j, bool vec_rows) {
    if (t->ndim == 1) return t->offset + (vec_rows ? i : j) * t->strides[0];
    int64_t off = t->offset + i * t->strides[t->ndim - 2] + j * t->strides[t->ndim - 1];
    for (int d = 0; d < t->ndim - 2; d++)
        if (t->shape[d] != 1) off += bi[d + nb - (t->ndim - 2)] * t->strides[d];
    return off;
}

/* runs the plugin's matmul of a and b into a fresh dense output and compares it with the views' product */
static void check_matmul(dev_tensor *a, dev_tensor *b, int ndo, const int64_t *sho) {
    int64_t sto[8], want = 1;
    for (int i = ndo - 1; i >= 0; i--) sto[i] = want, want *= sho[i];
    dev_tensor o = make(a->k.dtype, ndo, sho, sto, 0, want);
    oar_ktensor in[2] = {a->k, b->k};
    oar_kernel_call c = {.op = "matmul", .n_in = 2, .in = in, .n_out = 0};
    CHECK(iface.get_kernel(NULL, 0, "matmul", a->k.dtype) == k_matmul);
    CHECK(iface.supports_op(NULL, 0, &c) == 1);
    c.n_out = 1;
    c.out = &o.k;
    CHECK(iface.supports_op(NULL, 0, &c) == 1);
    int gemms = n_gemm;
    CHECK(k_matmul(NULL, &c) == 0);
    CHECK(n_gemm == gemms + 1); /* one strided-batched call */
    bool a1 = a->k.ndim == 1, b1 = b->k.ndim == 1;
    int nb = ndo - !a1 - !b1;
    int64_t n = a1 ? 1 : a->k.shape[a->k.ndim - 2], k = a->k.shape[a->k.ndim - 1], m = b1 ? 1 : b->k.shape[b->k.ndim - 1];
    int64_t batch = 1, bi[8] = {0};
    for (int d = 0; d < nb; d++) batch *= sho[d];
    double worst = 0;
    for (int64_t bb = 0; bb < batch; bb++) {
        int64_t rem = bb;
        for (int d = nb - 1; d >= 0; d--) bi[d] = rem % sho[d], rem /= sho[d];
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < m; j++) {
                double acc = 0;
                for (int64_t l = 0; l < k; l++)
                    acc += get(&a->k, off_of(&a->k, nb, bi, i, l, false)) * get(&b->k, off_of(&b->k, nb, bi, l, j, true));
                double got = get(&o.k, bb * n * m + i * m + j);
                if (fabs(got - acc) > worst) worst = fabs(got - acc);
            }
    }
    CHECK_NEAR(worst, 0, a->k.dtype == DT_F64 ? 1e-12 : 1e-4);
    drop(&o);
}

static void test_matmul(void) {
    for (int32_t dt = DT_F32; dt <= DT_F64; dt++) {
        /* [2, 3, 4, 5] @ [2, 3, 5, 6], both contiguous */
        dev_tensor a = make(dt, 4, (int64_t[]){2, 3, 4, 5}, (int64_t[]){60, 20, 5, 1}, 0, 120);
        dev_tensor b = make(dt, 4, (int64_t[]){2, 3, 5, 6}, (int64_t[]){90, 30, 6, 1}, 0, 180);
        check_matmul(&a, &b, 4, (int64_t[]){2, 3, 4, 6});
        /* one [5, 6] for every batch, at an offset into its buffer */
        dev_tensor w = make(dt, 2, (int64_t[]){5, 6}, (int64_t[]){6, 1}, 3, 33);
        check_matmul(&a, &w, 4, (int64_t[]){2, 3, 4, 6});
        /* a transposed: a [2, 3, 4, 5] view of a [2, 3, 5, 4] buffer (cuBLAS op T) */
        dev_tensor at = make(dt, 4, (int64_t[]){2, 3, 4, 5}, (int64_t[]){60, 20, 1, 4}, 0, 120);
        check_matmul(&at, &b, 4, (int64_t[]){2, 3, 4, 6});
        /* b's batch expanded from [1, 3, 5, 6] (batch stride 0 on dim 0: the batch dims still collapse? no:
         * strides (0, 30) over [2, 3] do not, so that one is refused below); from [1, 1, 5, 6] they do */
        dev_tensor b11 = make(dt, 4, (int64_t[]){2, 3, 5, 6}, (int64_t[]){0, 0, 6, 1}, 0, 30);
        check_matmul(&a, &b11, 4, (int64_t[]){2, 3, 4, 6});
        /* rows padded (a slice of a wider matrix): ld 8 */
        dev_tensor ap = make(dt, 3, (int64_t[]){6, 4, 5}, (int64_t[]){32, 8, 1}, 1, 192);
        dev_tensor bp = make(dt, 3, (int64_t[]){6, 5, 6}, (int64_t[]){30, 6, 1}, 0, 180);
        check_matmul(&ap, &bp, 3, (int64_t[]){6, 4, 6});
        /* 1-D operands: [5] @ [2, 3, 5, 6], [2, 3, 4, 5] @ [5] (stride 2), [5] @ [5] */
        dev_tensor v = make(dt, 1, (int64_t[]){5}, (int64_t[]){1}, 0, 5);
        dev_tensor v2 = make(dt, 1, (int64_t[]){5}, (int64_t[]){2}, 0, 9);
        check_matmul(&v, &b, 3, (int64_t[]){2, 3, 6});
        check_matmul(&a, &v2, 3, (int64_t[]){2, 3, 4});
        check_matmul(&v, &v2, 0, NULL);
        /* operands cuBLAS cannot read in place: expanded rows in a matrix ([4, 5] from a [1, 5] row),
         * batch dims of no single stride ([2, 3] with strides (0, 30); a permuted attention head
         * [2, 3, 4, 5] with strides (60, 5, 15, 1)): claimed, copied into dense scratch on the device
         * first (the fake GEMM reads only its exact buffers, so ASan would see a read past one), one
         * GEMM each, the views' product */
        dev_tensor rows = make(dt, 2, (int64_t[]){4, 5}, (int64_t[]){0, 1}, 0, 5);
        dev_tensor b03 = make(dt, 4, (int64_t[]){2, 3, 5, 6}, (int64_t[]){0, 30, 6, 1}, 0, 90);
        dev_tensor head = make(dt, 4, (int64_t[]){2, 3, 4, 5}, (int64_t[]){60, 5, 15, 1}, 0, 120);
        int gemms = n_gemm;
        check_matmul(&rows, &w, 2, (int64_t[]){4, 6});
        check_matmul(&a, &b03, 4, (int64_t[]){2, 3, 4, 6});
        check_matmul(&head, &b, 4, (int64_t[]){2, 3, 4, 6});
        CHECK(n_gemm == gemms + 3);
        /* a transposed output: the product made in dense scratch, then copied into the view */
        dev_tensor ot = make(dt, 2, (int64_t[]){4, 6}, (int64_t[]){1, 4}, 0, 24);
        dev_tensor a2 = make(dt, 2, (int64_t[]){4, 5}, (int64_t[]){5, 1}, 0, 20);
        oar_ktensor in3[2] = {a2.k, w.k};
        oar_kernel_call c3 = {.op = "matmul", .n_in = 2, .in = in3, .n_out = 1, .out = &ot.k};
        CHECK(iface.supports_op(NULL, 0, &c3) == 1 && k_matmul(NULL, &c3) == 0);
        double worst = 0;
        for (int64_t i = 0; i < 4; i++)
            for (int64_t j = 0; j < 6; j++) {
                double acc = 0;
                for (int64_t l = 0; l < 5; l++) acc += get(&a2.k, i * 5 + l) * get(&w.k, 3 + l * 6 + j);
                worst = fmax(worst, fabs(get(&ot.k, i + j * 4) - acc));
            }
        CHECK_NEAR(worst, 0, dt == DT_F64 ? 1e-12 : 1e-4);
        /* shapes that do not multiply: refused, and the kernel called anyway fails with a message */
        dev_tensor o = make(dt, 2, (int64_t[]){4, 6}, (int64_t[]){6, 1}, 0, 24);
        oar_ktensor bad[2] = {a2.k, a2.k};
        oar_kernel_call c4 = {.op = "matmul", .n_in = 2, .in = bad};
        CHECK(iface.supports_op(NULL, 0, &c4) == 0);
        c4.n_out = 1, c4.out = &o.k;
        last_msg[0] = 0;
        gemms = n_gemm;
        CHECK(k_matmul(NULL, &c4) == -3 && strstr(last_msg, "do not multiply") && n_gemm == gemms);
        dev_tensor *all[] = {&a, &b, &w, &at, &b11, &ap, &bp, &v, &v2, &rows, &b03, &head, &o, &ot, &a2};
        for (size_t i = 0; i < sizeof all / sizeof *all; i++) drop(all[i]);
    }
    /* mixed dtypes, c64, i32: not claimed, refused */
    CHECK(iface.get_kernel(NULL, 0, "matmul", 2) == NULL && iface.get_kernel(NULL, 0, "matmul", 8) == NULL);
    CHECK(iface.get_kernel(NULL, 0, "matmul", DT_BF16) == k_matmul && iface.get_kernel(NULL, 0, "matmul", DT_F16) == k_matmul);
    oar_ktensor mixed[2] = {{.dtype = DT_F32, .ndim = 2, .shape = {2, 2}, .strides = {2, 1}},
                            {.dtype = DT_F64, .ndim = 2, .shape = {2, 2}, .strides = {2, 1}}};
    oar_kernel_call cm = {.op = "matmul", .n_in = 2, .in = mixed};
    CHECK(iface.supports_op(NULL, 0, &cm) == 0);
    cm.n_in = 1;
    CHECK(iface.supports_op(NULL, 0, &cm) == 0 && k_matmul(NULL, &cm) == -3);
}

/* With one device: no device query per call, one cudaSetDevice in all. */
static void test_no_per_call_queries(void) {
    dev_tensor x = make(DT_F32, 2, (int64_t[]){3, 4}, (int64_t[]){4, 1}, 0, 12);
    dev_tensor y = make(DT_F32, 1, (int64_t[]){4}, (int64_t[]){1}, 0, 4);
    dev_tensor o = make(DT_F32, 2, (int64_t[]){3, 4}, (int64_t[]){4, 1}, 0, 12);
    oar_ktensor yb = y.k; /* y broadcast over rows: stride 0 */
    yb.ndim = 2;
    yb.shape[0] = 3, yb.shape[1] = 4, yb.strides[0] = 0, yb.strides[1] = 1;
    oar_ktensor in[2] = {x.k, yb};
    oar_kernel_call c = {.op = "add", .n_in = 2, .in = in, .n_out = 1, .out = &o.k};
    int sets = n_set_device, queries = n_pointer_queries, calls = n_ew_calls;
    for (int i = 0; i < 200; i++) CHECK(iface.get_kernel(NULL, 0, "add", DT_F32)(NULL, &c) == 0);
    CHECK(n_ew_calls == calls + 200);
    CHECK(n_pointer_queries == queries);
    CHECK(n_set_device - sets <= 1);
    for (int64_t i = 0; i < 12; i++)
        CHECK(((float *)o.k.buffer)[i] == ((float *)x.k.buffer)[i] + ((float *)y.k.buffer)[i % 4]);
    drop(&x), drop(&y), drop(&o);
}

static void test_claims(void) {
    /* elementwise: f32 and f64, inputs of the kernel's dtype */
    CHECK(iface.get_kernel(NULL, 0, "add", DT_F64) == k_ew && iface.get_kernel(NULL, 0, "add", DT_F16) == NULL);
    CHECK(iface.get_kernel(NULL, 0, "no_such_op", DT_F32) == NULL && iface.get_kernel(NULL, 0, NULL, DT_F32) == NULL);
    oar_ktensor two[2] = {{.dtype = DT_F32, .ndim = 1, .shape = {3}, .strides = {1}},
                          {.dtype = DT_F64, .ndim = 1, .shape = {3}, .strides = {1}}};
    oar_kernel_call c = {.op = "add", .n_in = 2, .in = two};
    CHECK(iface.supports_op(NULL, 0, &c) == 0); /* mixed */
    two[1].dtype = DT_F32;
    CHECK(iface.supports_op(NULL, 0, &c) == 1);
    two[1].ndim = 9;
    CHECK(iface.supports_op(NULL, 0, &c) == 0); /* rank past 8 */
    CHECK(iface.supports_op(NULL, 0, NULL) == 0);
    /* cast: its target is attribute 0 before the output exists */
    int64_t to = DT_BF16;
    oar_ktensor one = {.dtype = 3 /* i64 */, .ndim = 1, .shape = {3}, .strides = {1}};
    oar_kernel_call cast = {.op = "cast", .n_in = 1, .in = &one, .n_iattr = 1, .iattr = &to};
    CHECK(iface.get_kernel(NULL, 0, "cast", DT_BF16) == k_convert && iface.supports_op(NULL, 0, &cast) == 1);
    to = 8; /* c64 */
    CHECK(iface.get_kernel(NULL, 0, "cast", 8) == NULL && iface.supports_op(NULL, 0, &cast) == 0);
    /* a conversion run: dtypes reach the launcher */
    dev_tensor src = make(DT_F64, 1, (int64_t[]){3}, (int64_t[]){1}, 0, 3), dst = make(DT_F32, 1, (int64_t[]){3}, (int64_t[]){1}, 0, 3);
    oar_kernel_call run = {.op = "cast", .n_in = 1, .in = &src.k, .n_out = 1, .out = &dst.k};
    CHECK(k_convert(NULL, &run) == 0 && last_convert_from == DT_F64 && last_convert_to == DT_F32);
    oar_ktensor bad = dst.k;
    bad.dtype = 8;
    run.out = &bad;
    CHECK(k_convert(NULL, &run) == -3 && strstr(last_msg, "unsupported conversion"));
    /* fill: the eight dtypes; others refused */
    double v = 1.5;
    oar_kernel_call fill = {.op = "fill", .n_in = 1, .in = &dst.k, .n_fattr = 1, .fattr = &v};
    CHECK(k_fill(NULL, &fill) == 0 && last_fill_dt == DT_F32);
    fill.in = &bad;
    CHECK(k_fill(NULL, &fill) == -3 && iface.supports_op(NULL, 0, &fill) == 0);
    fill.n_fattr = 0;
    fill.in = &dst.k;
    CHECK(k_fill(NULL, &fill) == -3);
    /* reductions: the kept and reduced dims reach the launcher as descriptors */
    dev_tensor x = make(DT_F64, 2, (int64_t[]){3, 4}, (int64_t[]){1, 3}, 0, 12), s = make(DT_F64, 1, (int64_t[]){3}, (int64_t[]){1}, 0, 3);
    int64_t mask = 2;
    oar_kernel_call red = {.op = "sum", .n_in = 1, .in = &x.k, .n_out = 1, .out = &s.k, .n_iattr = 1, .iattr = &mask};
    CHECK(iface.get_kernel(NULL, 0, "sum", DT_F64) == k_reduce && k_reduce(NULL, &red) == 0);
    for (int64_t i = 0; i < 3; i++) {
        double want = 0;
        for (int64_t j = 0; j < 4; j++) want += ((double *)x.k.buffer)[i + 3 * j];
        CHECK_NEAR(((double *)s.k.buffer)[i], want, 1e-15);
    }
    mask = 1; /* the output's size no longer matches */
    CHECK(k_reduce(NULL, &red) == -3);
    CHECK(iface.get_kernel(NULL, 0, "sum", 3 /* i64 */) == NULL && iface.get_kernel(NULL, 0, "softmax", DT_F32) == k_softmax);
    drop(&src), drop(&dst), drop(&x), drop(&s);
}

/* Indexing: gather's elements are x's, an index out of range fails the
 * call with the CPU's message (the kernel's flag read back), and only f32
 * and f64 with i64 indices are claimed. */
static void test_indexing(void) {
    dev_tensor x = make(DT_F32, 2, (int64_t[]){2, 3}, (int64_t[]){3, 1}, 0, 6);
    dev_tensor o = make(DT_F32, 2, (int64_t[]){2, 2}, (int64_t[]){2, 1}, 0, 4);
    int64_t *ix = iface.alloc(NULL, 0, 4 * sizeof *ix), good[4] = {2, 0, 1, 1}, dim = 1;
    memcpy(ix, good, sizeof good);
    oar_ktensor ins[2] = {x.k, {.buffer = ix, .dtype = 3, .ndim = 2, .shape = {2, 2}, .strides = {2, 1}}};
    oar_kernel_call g = {.op = "gather", .n_in = 2, .in = ins, .n_out = 1, .out = &o.k, .n_iattr = 1, .iattr = &dim};
    CHECK(iface.get_kernel(NULL, 0, "gather", DT_F32) == k_index && iface.get_kernel(NULL, 0, "gather", DT_F16) == NULL);
    CHECK(iface.get_kernel(NULL, 0, "index_add", DT_F64) == k_index && iface.get_kernel(NULL, 0, "scatter_add", 3) == NULL);
    CHECK(iface.supports_op(NULL, 0, &g) == 1 && k_index(NULL, &g) == 0);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) CHECK(get(&o.k, i * 2 + j) == get(&x.k, i * 3 + good[i * 2 + j]));
    ix[1] = 3; /* outside [0, 3) */
    CHECK(k_index(NULL, &g) == -1 && strstr(last_msg, "gather: an index is out of range [0, 3) along dim 1"));
    ix[1] = 0; /* and right again: the flag starts at 0 each call */
    CHECK(k_index(NULL, &g) == 0);
    ins[1].dtype = 2; /* i32 indices */
    CHECK(iface.supports_op(NULL, 0, &g) == 0 && k_index(NULL, &g) == -3);
    iface.free(NULL, 0, ix, 4 * sizeof *ix);
    drop(&x), drop(&o);
}

/* The plugin shut down and loaded again: an empty cache, no stream yet. */
static void restart(void) {
    oar_plugin_desc d;
    shutdown(NULL);
    CHECK(oar_plugin_init(&fake_host, &d) == 0 && mem_devs[0].stream == NULL && oar_cuda_mem_cached(0) == 0);
}

/* ---- the caching allocator ------------------------------------------------------ */

/* Size classes: a block holds its request, wastes under a quarter, and
 * the classes grow with the size. */
static void test_size_classes(void) {
    int last = -1;
    size_t last_size = 0;
    bool ok = true;
    for (size_t n = 1; n < ((size_t)1 << 40); n += n / 7 + 1) {
        size_t size;
        int c = mem_class(n, &size);
        if (size < n || (n > 512 && size - n >= size / 4) || c < last || c >= MEM_CLASSES ||
            (c == last && size != last_size) || (c != last && size <= last_size))
            ok = false;
        last = c, last_size = size;
    }
    CHECK(ok);
    size_t sz;
    CHECK(mem_class(512, &sz) == 0 && sz == 512 && mem_class(513, &sz) == 1 && sz == 640);
    CHECK(mem_class((size_t)1 << 62, &sz) < MEM_CLASSES && sz == (size_t)1 << 62);
    /* OAR_CUDA_CACHE_BYTES */
    size_t v;
    CHECK(mem_parse_cap("512M", &v) && v == (size_t)512 << 20 && mem_parse_cap("2G", &v) && v == (size_t)2 << 30);
    CHECK(mem_parse_cap("0", &v) && v == 0 && mem_parse_cap("12k", &v) && v == 12 << 10);
    CHECK(!mem_parse_cap("lots", &v) && !mem_parse_cap("5T", &v) && !mem_parse_cap("-1", &v) && !mem_parse_cap("", &v));
}

/* A loop of allocate/free makes one cudaMalloc and no cudaFree. */
static void test_alloc_reuse(void) {
    int mallocs = n_malloc, frees = n_cuda_free;
    void *first = NULL;
    for (int i = 0; i < 1000; i++) {
        void *p = iface.alloc(NULL, 0, 1000);
        CHECK(p != NULL);
        if (!first) first = p;
        if (p != first) CHECK(p == first);
        memset(p, i & 0xff, 1000);
        iface.free(NULL, 0, p, 1000);
    }
    CHECK(n_malloc - mallocs == 1 && n_cuda_free == frees);
    CHECK(oar_cuda_mem_cached(0) >= 1000);
    /* a size of the same class takes the same block; 0 bytes: a token of its own */
    void *p = iface.alloc(NULL, 0, 900), *z = iface.alloc(NULL, 0, 0);
    CHECK(p == first && z != NULL && z != p && n_malloc - mallocs == 2);
    iface.free(NULL, 0, p, 900);
    iface.free(NULL, 0, z, 0);
}

/* Random allocations and frees of many sizes: no block is handed out while
 * it is live (each live block holds its own tag over all its bytes, checked
 * when it is freed), and cudaMalloc runs at most as often as the most
 * blocks of one class live at once, summed over the classes. */
static void test_alloc_never_twice(void) {
    enum { LIVE = 48 };
    static const size_t sizes[] = {1, 100, 512, 513, 700, 1000, 4096, 5000, 65536, 100000, 1 << 20, 3 << 20};
    struct {
        unsigned char *p;
        size_t n;
        unsigned char tag;
    } live[LIVE];
    int n_live = 0, per_class[MEM_CLASSES] = {0}, peak[MEM_CLASSES] = {0};
    int mallocs = n_malloc;
    unsigned seed = 12345, tag = 0;
    bool distinct = true, intact = true;
    for (int it = 0; it < 4000; it++) {
        seed = seed * 1103515245u + 12345u;
        bool grow = n_live == 0 || (n_live < LIVE && (seed >> 16) % 3 != 0);
        if (grow) {
            size_t n = sizes[(seed >> 8) % (sizeof sizes / sizeof *sizes)], size;
            unsigned char *p = iface.alloc(NULL, 0, n);
            if (!p) {
                CHECK(p != NULL);
                break;
            }
            for (int i = 0; i < n_live; i++)
                if (p < live[i].p + live[i].n && live[i].p < p + n) distinct = false;
            tag = (unsigned char)(tag + 1);
            memset(p, tag, n);
            live[n_live++] = (typeof(live[0])){p, n, (unsigned char)tag};
            int c = mem_class(n, &size);
            if (++per_class[c] > peak[c]) peak[c] = per_class[c];
        } else {
            int i = (int)((seed >> 8) % (unsigned)n_live);
            for (size_t k = 0; k < live[i].n; k++)
                if (live[i].p[k] != live[i].tag) intact = false;
            size_t size;
            per_class[mem_class(live[i].n, &size)]--;
            iface.free(NULL, 0, live[i].p, live[i].n);
            live[i] = live[--n_live];
        }
    }
    CHECK(distinct && intact);
    int bound = 0;
    for (int c = 0; c < MEM_CLASSES; c++) bound += peak[c];
    CHECK(n_malloc - mallocs <= bound);
    CHECK(bound < 200); /* (the bound is far below the 2600-odd allocations) */
    while (n_live) {
        n_live--;
        iface.free(NULL, 0, live[n_live].p, live[n_live].n);
    }
}

/* Four threads allocating and freeing at once: no block is handed to two
 * of them (each writes its own tag over its block and checks it before
 * freeing), and every block is a cudaMalloc'd one (cudaFree of the cache
 * at shutdown would fail otherwise). */
enum { THREAD_ITERS = 5000 };
static void *alloc_worker(void *arg) {
    unsigned char tag = (unsigned char)(uintptr_t)arg;
    static const size_t sizes[] = {600, 700, 4000}; /* (few classes: the threads contend for the same lists) */
    unsigned seed = tag * 7919u;
    uintptr_t bad = 0;
    for (int it = 0; it < THREAD_ITERS; it++) {
        seed = seed * 1103515245u + 12345u;
        size_t n = sizes[(seed >> 16) % 3];
        unsigned char *p = iface.alloc(NULL, 0, n);
        if (!p) return (void *)(uintptr_t)1;
        memset(p, tag, n);
        sched_yield();
        for (size_t k = 0; k < n; k++)
            if (p[k] != tag) bad = 1;
        iface.free(NULL, 0, p, n);
    }
    return (void *)bad;
}
static void test_alloc_threads(void) {
    pthread_t t[4];
    for (uintptr_t i = 0; i < 4; i++) CHECK(pthread_create(&t[i], NULL, alloc_worker, (void *)(i + 1)) == 0);
    for (int i = 0; i < 4; i++) {
        void *r = (void *)1;
        pthread_join(t[i], &r);
        CHECK(r == NULL);
    }
    /* every cached block a live cudaMalloc'd one: the cache's bytes are on the fake device */
    CHECK(oar_cuda_mem_cached(0) <= live_dev_bytes);
}

/* The cap: freed blocks past it go back to CUDA; 0 caches nothing and
 * allocates exact sizes. */
static void test_cache_cap(void) {
    size_t cap = mem_cap;
    restart(); /* an empty cache to start from */
    mem_cap = (size_t)1 << 20;
    void *p[4];
    for (int i = 0; i < 4; i++) p[i] = iface.alloc(NULL, 0, 512 << 10);
    int frees = n_cuda_free;
    for (int i = 0; i < 4; i++) iface.free(NULL, 0, p[i], 512 << 10);
    CHECK(oar_cuda_mem_cached(0) == (size_t)1 << 20 && n_cuda_free - frees == 2);
    mem_cap = 0;
    int mallocs = n_malloc;
    frees = n_cuda_free;
    void *q = iface.alloc(NULL, 0, 1000);
    CHECK(q && n_malloc - mallocs == 1 && last_malloc_size == 1000); /* exact size */
    iface.free(NULL, 0, q, 1000);
    CHECK(n_cuda_free - frees == 1);
    mem_cap = cap;
    /* the variable, read when the plugin loads; a bad value keeps the default with a warning */
    oar_plugin_desc d;
    setenv("OAR_CUDA_CACHE_BYTES", "64M", 1);
    CHECK(oar_plugin_init(&fake_host, &d) == 0 && oar_cuda_mem_cap() == (size_t)64 << 20);
    setenv("OAR_CUDA_CACHE_BYTES", "a lot", 1);
    n_warnings = 0;
    CHECK(oar_plugin_init(&fake_host, &d) == 0 && oar_cuda_mem_cap() == MEM_DEFAULT_CAP && n_warnings == 1);
    unsetenv("OAR_CUDA_CACHE_BYTES");
}

/* Out of memory: the cache is given back once and cudaMalloc tried again. */
static void test_oom_retry(void) {
    restart();
    dev_limit = live_dev_bytes + ((size_t)1 << 20);
    void *p[3];
    for (int i = 0; i < 3; i++) p[i] = iface.alloc(NULL, 0, 300000); /* 327680 each */
    CHECK(p[0] && p[1] && p[2]);
    for (int i = 0; i < 3; i++) iface.free(NULL, 0, p[i], 300000);
    CHECK(oar_cuda_mem_cached(0) == 3 * 327680);
    int mallocs = n_malloc, frees = n_cuda_free;
    void *big = iface.alloc(NULL, 0, 600000); /* 655360: fits only once the cache is given back */
    CHECK(big != NULL && n_malloc - mallocs == 2 && n_cuda_free - frees == 3 && oar_cuda_mem_cached(0) == 0);
    /* an empty cache: no second try; the message names the size and device */
    mallocs = n_malloc;
    last_msg[0] = 0;
    CHECK(iface.alloc(NULL, 0, 600000) == NULL && n_malloc - mallocs == 1);
    CHECK(strstr(last_msg, "cudaMalloc of 655360 bytes on cuda:0") != NULL);
    /* a cache too small to help: given back, tried once more, then NULL */
    void *small = iface.alloc(NULL, 0, 100);
    iface.free(NULL, 0, small, 100);
    mallocs = n_malloc, frees = n_cuda_free;
    CHECK(iface.alloc(NULL, 0, 600000) == NULL && n_malloc - mallocs == 2 && n_cuda_free - frees == 1);
    iface.free(NULL, 0, big, 600000);
    dev_limit = (size_t)-1;
}

/* ---- the stream and the staged copies -------------------------------------------- */

/* Everything runs on the plugin's own non-blocking stream; copies of
 * pageable memory go through the two pinned buffers, made once; a copy to
 * the device leaves the caller's memory free at once, a copy to the host
 * holds the data when it returns. */
static void test_stream_and_staging(void) {
    size_t n = 10u << 20; /* three pieces of the 4 MiB buffers */
    unsigned char *src = malloc(n), *back = malloc(n), *want = malloc(n);
    CHECK(src && back && want);
    if (!src || !back || !want) return free(src), free(back), free(want);
    for (size_t i = 0; i < n; i++) want[i] = src[i] = (unsigned char)((uint32_t)(i * 2654435761u) >> 24); /* no period of a piece */
    int host_allocs = n_host_alloc, pageable = n_pageable, off = n_off_stream;
    unsigned char *dev = iface.alloc(NULL, 0, n), *dev2 = iface.alloc(NULL, 0, n);
    CHECK(iface.copy_to_device(NULL, 0, dev, 0, src, n) == 0);
    memset(src, 0xEE, n); /* the caller reuses its memory at once */
    CHECK(iface.copy_device_to_device(NULL, 0, dev2, 0, dev, 0, n) == 0);
    memset(back, 0, n);
    CHECK(iface.copy_to_host(NULL, 0, back, dev2, 0, n) == 0);
    CHECK(memcmp(back, want, n) == 0);
    /* with an offset, and small copies many times: the same two buffers */
    for (int i = 0; i < 50; i++) {
        unsigned char b[3] = {(unsigned char)i, 7, 9}, r[3] = {0};
        CHECK(iface.copy_to_device(NULL, 0, dev, 100 + i, b, 3) == 0);
        CHECK(iface.copy_to_host(NULL, 0, r, dev, 100 + i, 3) == 0);
        if (memcmp(r, b, 3)) CHECK(memcmp(r, b, 3) == 0);
    }
    CHECK(n_host_alloc - host_allocs == (host_allocs ? 0 : 2) && n_pinned == 2);
    CHECK(n_pageable == pageable && n_off_stream == off);
    fake_stream *st = (fake_stream *)mem_devs[0].stream;
    CHECK(st && st->flags == cudaStreamNonBlocking && st->ran == st->queued);
    /* kernels, cuBLAS and the ABI's async members (NULL: the plugin's stream) */
    dev_tensor a = make(DT_F32, 2, (int64_t[]){3, 4}, (int64_t[]){4, 1}, 0, 12);
    dev_tensor b = make(DT_F32, 2, (int64_t[]){4, 2}, (int64_t[]){2, 1}, 0, 8);
    dev_tensor o = make(DT_F32, 2, (int64_t[]){3, 2}, (int64_t[]){2, 1}, 0, 6);
    dev_tensor s = make(DT_F32, 2, (int64_t[]){3, 4}, (int64_t[]){4, 1}, 0, 12);
    float ones[12] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, got[12];
    CHECK(iface.copy_to_device(NULL, 0, a.k.buffer, 0, ones, sizeof ones) == 0); /* queued... */
    oar_ktensor in[2] = {a.k, b.k}, in2[2] = {a.k, a.k};
    oar_kernel_call mm = {.op = "matmul", .n_in = 2, .in = in, .n_out = 1, .out = &o.k};
    oar_kernel_call add = {.op = "add", .n_in = 2, .in = in2, .n_out = 1, .out = &s.k};
    int on = n_on_stream;
    CHECK(k_matmul(NULL, &mm) == 0 && k_ew(NULL, &add) == 0); /* ...and run before them */
    CHECK(n_on_stream - on == 2 && n_off_stream == off);
    CHECK(iface.copy_to_host(NULL, 0, got, s.k.buffer, 0, sizeof got) == 0);
    for (int i = 0; i < 12; i++)
        if (got[i] != 2) CHECK(got[i] == 2);
    float mo[6];
    CHECK(iface.copy_to_host(NULL, 0, mo, o.k.buffer, 0, sizeof mo) == 0);
    for (int j = 0; j < 2; j++) {
        float col = 0;
        for (int k = 0; k < 4; k++) col += ((float *)b.k.buffer)[k * 2 + j];
        CHECK(mo[j] == col && mo[2 + j] == col && mo[4 + j] == col);
    }
    float x = 5, y = 0;
    CHECK(iface.copy_to_device_async(NULL, 0, a.k.buffer, 0, &x, 4, NULL) == 0);
    CHECK(iface.copy_to_host_async(NULL, 0, &y, a.k.buffer, 0, 4, NULL) == 0 && y == 0); /* not yet */
    CHECK(iface.stream_synchronize(NULL, 0, NULL) == 0 && y == 5);
    oar_event ev = iface.event_create(NULL, 0);
    CHECK(ev && iface.event_record(NULL, 0, ev, NULL) == 0 && iface.event_synchronize(NULL, 0, ev) == 0);
    iface.event_destroy(NULL, 0, ev);
    CHECK(n_off_stream == off);
    /* a stream oar made is used as given */
    oar_stream own = iface.stream_create(NULL, 0);
    CHECK(own && iface.copy_to_host_async(NULL, 0, &y, a.k.buffer, 0, 4, own) == 0 && n_off_stream == off + 1);
    CHECK(iface.stream_synchronize(NULL, 0, own) == 0);
    iface.stream_destroy(NULL, 0, own);
    drop(&a), drop(&b), drop(&o), drop(&s);
    iface.free(NULL, 0, dev, n);
    iface.free(NULL, 0, dev2, n);
    free(src), free(back), free(want);
}

/* Each kind of kernel the plugin launches goes on its stream. */
static void test_every_kernel_on_stream(void) {
    dev_tensor x = make(DT_F32, 2, (int64_t[]){3, 4}, (int64_t[]){4, 1}, 0, 12);
    dev_tensor y = make(DT_F32, 2, (int64_t[]){3, 4}, (int64_t[]){4, 1}, 0, 12);
    dev_tensor w = make(DT_F32, 2, (int64_t[]){4, 3}, (int64_t[]){3, 1}, 0, 12);
    dev_tensor r = make(DT_F32, 1, (int64_t[]){3}, (int64_t[]){1}, 0, 3);
    dev_tensor m = make(DT_F32, 2, (int64_t[]){3, 3}, (int64_t[]){3, 1}, 0, 9);
    oar_ktensor xx[2] = {x.k, x.k}, xw[2] = {x.k, w.k};
    int64_t mask = 2, dim = 1;
    double v = 2;
    oar_kernel_call calls[] = {
        {.op = "add", .n_in = 2, .in = xx, .n_out = 1, .out = &y.k},
        {.op = "fill", .n_in = 1, .in = &y.k, .n_fattr = 1, .fattr = &v},
        {.op = "cast", .n_in = 1, .in = &x.k, .n_out = 1, .out = &y.k},
        {.op = "sum", .n_in = 1, .in = &x.k, .n_out = 1, .out = &r.k, .n_iattr = 1, .iattr = &mask},
        {.op = "softmax", .n_in = 1, .in = &x.k, .n_out = 1, .out = &y.k, .n_iattr = 1, .iattr = &dim},
        {.op = "matmul", .n_in = 2, .in = xw, .n_out = 1, .out = &m.k},
    };
    for (size_t i = 0; i < sizeof calls / sizeof *calls; i++) {
        int on = n_on_stream, off = n_off_stream;
        oar_kernel_fn f = iface.get_kernel(NULL, 0, calls[i].op, DT_F32);
        CHECK(f && f(NULL, &calls[i]) == 0);
        if (n_on_stream != on + 1 || n_off_stream != off) {
            fprintf(stderr, "  %s: not on the plugin's stream\n", calls[i].op);
            CHECK(n_on_stream == on + 1 && n_off_stream == off);
        }
    }
    drop(&x), drop(&y), drop(&w), drop(&r), drop(&m);
}

/* f16 and bf16 reductions and softmax: claimed, refused for other dtypes,
 * and run with the half dtype reaching the launcher and the views' rows
 * and dims as the descriptors name them (the reference here walks the
 * views itself). */
static void test_half_reductions(void) {
    static const char *const red[] = {"sum", "prod", "amax", "amin"};
    for (int32_t dt = DT_F16; dt <= DT_F64; dt++) {
        for (int i = 0; i < 4; i++) CHECK(iface.get_kernel(NULL, 0, red[i], dt) == k_reduce);
        CHECK(iface.get_kernel(NULL, 0, "softmax", dt) == k_softmax && iface.get_kernel(NULL, 0, "log_softmax", dt) == k_softmax);
    }
    for (int32_t dt = 0; dt < DT_F16; dt++) /* bool, u8, i32, i64: the CPU */
        CHECK(iface.get_kernel(NULL, 0, "sum", dt) == NULL && iface.get_kernel(NULL, 0, "softmax", dt) == NULL);
    CHECK(iface.get_kernel(NULL, 0, "add", DT_F16) == NULL); /* elementwise: oar's f32 route */
    oar_ktensor hin = {.dtype = DT_BF16, .ndim = 1, .shape = {3}, .strides = {1}};
    oar_kernel_call ask = {.op = "amax", .n_in = 1, .in = &hin};
    CHECK(iface.supports_op(NULL, 0, &ask) == 1);
    hin.dtype = 2;
    CHECK(iface.supports_op(NULL, 0, &ask) == 0);
    for (int32_t dt = DT_F16; dt <= DT_F32; dt++) {
        double tol = dt == DT_F16 ? 1e-3 : dt == DT_BF16 ? 8e-3 : 1e-6; /* relative: half and bf16 ulps */
        /* x: a [3, 4] view of a [4, 3] buffer (transposed); sums and maxima over dim 1 */
        dev_tensor x = make(dt, 2, (int64_t[]){3, 4}, (int64_t[]){1, 3}, 0, 12);
        dev_tensor r = make(dt, 1, (int64_t[]){3}, (int64_t[]){1}, 0, 3);
        int64_t mask = 2;
        for (int op = 0; op < 4; op++) {
            oar_kernel_call c = {.op = red[op], .n_in = 1, .in = &x.k, .n_out = 1, .out = &r.k, .n_iattr = 1, .iattr = &mask};
            last_reduce_dt = -1;
            CHECK(k_reduce(NULL, &c) == 0 && last_reduce_dt == dt);
            for (int64_t i = 0; i < 3; i++) {
                double want = op == 0 ? 0 : op == 1 ? 1 : op == 2 ? -INFINITY : INFINITY;
                for (int64_t j = 0; j < 4; j++) {
                    double v = get(&x.k, i + 3 * j);
                    want = op == 0 ? want + v : op == 1 ? want * v : op == 2 ? fmax(want, v) : fmin(want, v);
                }
                CHECK_NEAR(get(&r.k, i), want, tol * (fabs(want) + 1));
            }
        }
        /* softmax and log_softmax along dim 0 of x, into a contiguous [3, 4] */
        dev_tensor o = make(dt, 2, (int64_t[]){3, 4}, (int64_t[]){4, 1}, 0, 12);
        int64_t dim = 0;
        for (int lg = 0; lg < 2; lg++) {
            oar_kernel_call c = {.op = lg ? "log_softmax" : "softmax", .n_in = 1, .in = &x.k, .n_out = 1, .out = &o.k,
                                 .n_iattr = 1, .iattr = &dim};
            last_softmax_dt = -1;
            CHECK(k_softmax(NULL, &c) == 0 && last_softmax_dt == dt);
            for (int64_t j = 0; j < 4; j++) {
                double mx = -INFINITY, sum = 0;
                for (int64_t i = 0; i < 3; i++) mx = fmax(mx, get(&x.k, i + 3 * j));
                for (int64_t i = 0; i < 3; i++) sum += exp(get(&x.k, i + 3 * j) - mx);
                for (int64_t i = 0; i < 3; i++) {
                    double v = get(&x.k, i + 3 * j) - mx, want = lg ? v - log(sum) : exp(v) / sum;
                    CHECK_NEAR(get(&o.k, 4 * i + j), want, tol * (fabs(want) + 1));
                }
            }
        }
        /* an output of another dtype: refused with a message, no launch */
        o.k.dtype = dt == DT_F32 ? DT_F64 : DT_F32;
        oar_kernel_call bad = {.op = "softmax", .n_in = 1, .in = &x.k, .n_out = 1, .out = &o.k, .n_iattr = 1, .iattr = &dim};
        last_softmax_dt = -1;
        CHECK(k_softmax(NULL, &bad) == -3 && last_softmax_dt == -1);
        o.k.dtype = dt;
        drop(&x), drop(&r), drop(&o);
    }
}

/* Without pinned memory the copies go straight from the caller's memory,
 * still right (a copy to the device waits, since its source may be reused). */
static void test_no_pinned_memory(void) {
    restart();
    fail_host_alloc = 1;
    int pageable = n_pageable;
    double v[5] = {1, 2, 3, 4, 5}, r[5] = {0};
    void *dev = iface.alloc(NULL, 0, sizeof v);
    n_warnings = 0;
    CHECK(iface.copy_to_device(NULL, 0, dev, 0, v, sizeof v) == 0);
    v[0] = 99;
    CHECK(iface.copy_to_host(NULL, 0, r, dev, 0, sizeof r) == 0);
    CHECK(r[0] == 1 && r[4] == 5 && n_pageable - pageable == 2 && n_pinned == 0 && n_warnings == 1);
    iface.free(NULL, 0, dev, sizeof v);
    fail_host_alloc = 0;
    restart(); /* (a device without pinned memory stays so until the plugin is loaded again) */
}

/* native_dot (ABI 1.4): f16 from cc 7.0, bf16 from cc 8.0 (cuBLAS's
 * half GEMMs on Tensor Cores), never u8/i8 (no int8 GEMM); per device,
 * from the capability read at init, with no driver query per answer; a
 * capability that could not be read fails the half answers. */
static void test_native_dot(void) {
    static const struct { int cc, f16, bf16; } cases[] = {{61, 0, 0}, {70, 1, 0}, {75, 1, 0}, {80, 1, 1}, {90, 1, 1}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        fake_cc[0] = cases[i].cc;
        restart();
        int f16 = iface.native_dot(NULL, 0, OAR_F16), bf16 = iface.native_dot(NULL, 0, OAR_BF16);
        if (f16 != cases[i].f16 || bf16 != cases[i].bf16)
            fprintf(stderr, "cc %d: f16 %d bf16 %d (expected %d %d)\n", cases[i].cc, f16, bf16, cases[i].f16,
                    cases[i].bf16);
        CHECK(f16 == cases[i].f16 && bf16 == cases[i].bf16);
        CHECK(iface.native_dot(NULL, 0, OAR_U8) == 0 && iface.native_dot(NULL, 0, OAR_I8) == 0);
        CHECK(iface.native_dot(NULL, 0, OAR_F32) == 1 && iface.native_dot(NULL, 0, OAR_F64) == 1);
        CHECK(iface.native_dot(NULL, 0, OAR_I32) == 0 && iface.native_dot(NULL, 0, OAR_C64) == 0);
    }
    fake_devices = 2, fake_cc[0] = 75, fake_cc[1] = 86; /* a T4 next to an RTX 30 */
    restart();
    int queries = n_attr_queries;
    for (int i = 0; i < 100; i++) {
        CHECK(iface.native_dot(NULL, 0, OAR_F16) == 1 && iface.native_dot(NULL, 0, OAR_BF16) == 0);
        CHECK(iface.native_dot(NULL, 1, OAR_F16) == 1 && iface.native_dot(NULL, 1, OAR_BF16) == 1);
    }
    CHECK(n_attr_queries == queries);
    fake_cc[1] = -1; /* device 1's capability unreadable: its half answers fail, device 0's stand */
    restart();
    last_msg[0] = 0;
    CHECK(iface.native_dot(NULL, 1, OAR_BF16) < 0 && strstr(last_msg, "compute capability"));
    CHECK(iface.native_dot(NULL, 1, OAR_U8) == 0 && iface.native_dot(NULL, 0, OAR_BF16) == 0);
    fake_devices = 1, fake_cc[0] = fake_cc[1] = 80;
    restart();
}

int main(void) {
    oar_plugin_desc d;
    memset(&d, 0, sizeof d);
    fake_devices = 0; /* no device: refused with the driver's reason */
    CHECK(oar_plugin_init(&fake_host, &d) != 0 && strstr(last_msg, "no CUDA device"));
    fake_devices = 1;
    CHECK(oar_plugin_init(&fake_host, &d) == 0 && d.iface == &iface && !strcmp(d.name, "cuda"));
    oar_device_props p;
    CHECK(iface.device_count(NULL) == 1 && iface.get_props(NULL, 0, &p) == 0 && strstr(p.name, "fake GPU 0"));
    RUN(test_size_classes);
    RUN(test_alloc_reuse);
    RUN(test_alloc_never_twice);
    RUN(test_alloc_threads);
    RUN(test_stream_and_staging);
    RUN(test_every_kernel_on_stream);
    RUN(test_cache_cap);
    RUN(test_oom_retry);
    RUN(test_no_pinned_memory);
    /* buffers of exactly the size asked (no cache), so ASan sees a kernel read past one */
    mem_cap = 0;
    RUN(test_no_per_call_queries);
    RUN(test_matmul);
    RUN(test_claims);
    RUN(test_indexing);
    RUN(test_half_reductions);
    RUN(test_native_dot);
    /* shutdown gives back every cached block, the staging buffers and the streams */
    mem_cap = MEM_DEFAULT_CAP;
    void *q[3] = {iface.alloc(NULL, 0, 10), iface.alloc(NULL, 0, 5000), iface.alloc(NULL, 0, 1 << 20)};
    char byte = 1;
    CHECK(iface.copy_to_device(NULL, 0, q[0], 0, &byte, 1) == 0);
    iface.free(NULL, 0, q[0], 10), iface.free(NULL, 0, q[1], 5000), iface.free(NULL, 0, q[2], 1 << 20);
    CHECK(oar_cuda_mem_cached(0) > 0 && n_pinned == 2 && live_dev_bytes > 0 && streams != NULL);
    d.shutdown(NULL);
    CHECK(live_dev_bytes == 0 && n_dev_bufs == 0 && n_pinned == 0 && oar_cuda_mem_cached(0) == 0);
    CHECK(streams == NULL && n_stream_create == n_stream_destroy);
    /* a buffer freed after shutdown goes straight back */
    void *late = iface.alloc(NULL, 0, 64);
    iface.free(NULL, 0, late, 64);
    CHECK(live_dev_bytes == 0 && n_dev_bufs == 0);
    return test_summary();
}
#else
#include <stdio.h>
int main(void) {
    printf("SKIP: no CUDA headers (CMake found no CUDA toolkit)\n");
    return 77;
}
#endif

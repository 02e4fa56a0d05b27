/* The cuda plugin's host code (plugins/cuda/cuda_plugin.c) without a GPU:
 * it is compiled into this test against the CUDA headers, with the CUDA
 * runtime and cuBLAS calls it makes replaced by fakes in host memory (a
 * "device" buffer is malloc'd to its exact size, so ASan sees any read
 * past it) and its kernel launchers by CPU loops. What that checks, which
 * nothing else can on a machine without a GPU:
 * - matmul: the arguments the plugin gives cublasGemmStridedBatchedEx
 *   (ops, leading dimensions, batch strides, the swap of A and B for
 *   row-major) give the product the views name, for batched, broadcast,
 *   transposed, stride-0-batch and 1-D operands in f32 and f64: the fake
 *   GEMM is cuBLAS's documented column-major definition, and the result is
 *   compared with a matmul over the views written here;
 * - operands cuBLAS cannot read in place (expanded rows) are refused by
 *   supports_op, and the kernel called anyway fails with a message
 *   instead of reading past the buffer;
 * - no per-call device query: with one device, 200 kernel calls make one
 *   cudaSetDevice and no cudaPointerGetAttributes;
 * - get_kernel and supports_op claim what the plugin's head says (dtypes,
 *   cast's target dtype before the output exists) and refuse the rest.
 * Skipped (77) where CMake found no CUDA headers. */
#ifdef OAR_TEST_CUDA_HEADERS
#include "../../plugins/cuda/cuda_plugin.c"

#include <assert.h>
#include <math.h>
#include <stdlib.h>

#include "test.h"

/* ---- fake CUDA runtime --------------------------------------------------------- */
static int fake_devices = 1, n_set_device, n_pointer_queries, n_gemm;

cudaError_t cudaGetDeviceCount(int *n) { return *n = fake_devices, cudaSuccess; }
cudaError_t cudaSetDevice(int d) { return n_set_device++, d >= 0 && d < fake_devices ? cudaSuccess : cudaErrorInvalidDevice; }
const char *cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : "a fake CUDA error"; }
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int d) {
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "fake GPU %d", d);
    p->totalGlobalMem = 1 << 30;
    return cudaSuccess;
}
cudaError_t cudaMalloc(void **p, size_t n) { return (*p = malloc(n)) ? cudaSuccess : cudaErrorMemoryAllocation; }
cudaError_t cudaFree(void *p) { return free(p), cudaSuccess; }
cudaError_t cudaMemcpy(void *d, const void *s, size_t n, enum cudaMemcpyKind k) { return (void)k, memcpy(d, s, n), cudaSuccess; }
cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, enum cudaMemcpyKind k, cudaStream_t st) {
    return (void)k, (void)st, memcpy(d, s, n), cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }
cudaError_t cudaStreamCreate(cudaStream_t *s) { return *s = (cudaStream_t)malloc(1), cudaSuccess; }
cudaError_t cudaStreamDestroy(cudaStream_t s) { return free(s), cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t s) { return (void)s, cudaSuccess; }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned f) { return (void)f, *e = (cudaEvent_t)malloc(1), cudaSuccess; }
cudaError_t cudaEventDestroy(cudaEvent_t e) { return free(e), cudaSuccess; }
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) { return (void)e, (void)s, cudaSuccess; }
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned f) { return (void)s, (void)e, (void)f, cudaSuccess; }
cudaError_t cudaEventSynchronize(cudaEvent_t e) { return (void)e, cudaSuccess; }
cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *p) {
    (void)p;
    n_pointer_queries++;
    memset(a, 0, sizeof *a);
    a->device = 0;
    return cudaSuccess;
}

/* ---- fake cuBLAS: the documented column-major definition ----------------------- */
cublasStatus_t cublasCreate(cublasHandle_t *h) { return *h = (cublasHandle_t)malloc(1), CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasDestroy(cublasHandle_t h) { return free(h), CUBLAS_STATUS_SUCCESS; }
const char *cublasGetStatusString(cublasStatus_t s) { return s ? "a fake cuBLAS error" : "success"; }

/* C[b] (m x n, ldc) = alpha op(A[b]) (m x k) op(B[b]) (k x n) + beta C[b], column-major */
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                          int k, const void *alpha, const void *A, cudaDataType at, int lda,
                                          long long sa, const void *B, cudaDataType bt, int ldb, long long sb,
                                          const void *beta, void *C, cudaDataType ct, int ldc, long long sc,
                                          int batch, cublasComputeType_t comp, cublasGemmAlgo_t algo) {
    (void)h, (void)algo;
    n_gemm++;
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
    (void)p0, (void)p1, (void)alt, (void)stream;
    n_ew_calls++;
    for (int64_t i = 0; i < n; i++)
        ((float *)o)[at_of(&to, i)] = ((const float *)in[0])[at_of(&ti[0], i)] + ((const float *)in[1])[at_of(&ti[1], i)];
    return 0;
}
static int add_f64(void *o, oar_cuda_desc to, const void *const *in, const oar_cuda_desc *ti, double p0, double p1,
                   int alt, int64_t n, void *stream) {
    (void)p0, (void)p1, (void)alt, (void)stream;
    n_ew_calls++;
    for (int64_t i = 0; i < n; i++)
        ((double *)o)[at_of(&to, i)] = ((const double *)in[0])[at_of(&ti[0], i)] + ((const double *)in[1])[at_of(&ti[1], i)];
    return 0;
}
const oar_cuda_ew oar_cuda_ew_table[] = {{"add", 2, add_f32, add_f64}, {NULL, 0, NULL, NULL}};
static int last_convert_to = -1, last_convert_from = -1, last_fill_dt = -1;
int oar_cuda_convert(void *o, int32_t to_dt, oar_cuda_desc to, const void *x, int32_t from, oar_cuda_desc tx, int64_t n,
                     void *stream) {
    (void)o, (void)to, (void)x, (void)tx, (void)n, (void)stream;
    last_convert_to = to_dt, last_convert_from = from;
    return 0;
}
int oar_cuda_fill(void *o, int32_t dt, oar_cuda_desc to, double v, int64_t n, void *stream) {
    (void)o, (void)to, (void)v, (void)n, (void)stream;
    last_fill_dt = dt;
    return 0;
}
int oar_cuda_reduce(void *o, int32_t dt, int64_t o_off, const void *x, oar_cuda_desc kept, oar_cuda_desc red, int op,
                    int64_t n_out, int64_t n_red, void *stream) {
    (void)stream;
    for (int64_t i = 0; i < n_out; i++) { /* sums and maxima are enough here */
        double acc = op == 0 ? 0 : -INFINITY;
        for (int64_t r = 0; r < n_red; r++) {
            int64_t j = at_of(&kept, i) + at_of(&red, r);
            double v = dt == 7 ? ((const double *)x)[j] : ((const float *)x)[j];
            acc = op == 0 ? acc + v : fmax(acc, v);
        }
        if (dt == 7) ((double *)o)[o_off + i] = acc;
        else ((float *)o)[o_off + i] = (float)acc;
    }
    return 0;
}
int oar_cuda_softmax(void *o, int32_t dt, const void *x, oar_cuda_desc rows_x, oar_cuda_desc rows_o, int64_t len,
                     int64_t sx, int64_t so, int log_, int64_t n_rows, void *stream) {
    return (void)o, (void)dt, (void)x, (void)rows_x, (void)rows_o, (void)len, (void)sx, (void)so, (void)log_,
           (void)n_rows, (void)stream, 0;
}

/* ---- the host table ------------------------------------------------------------- */
static char last_msg[512];
static int host_error(int status, const char *msg) {
    snprintf(last_msg, sizeof last_msg, "%s", msg);
    return status;
}
static void host_log(int level, const char *plugin, const char *msg) { (void)level, (void)plugin, (void)msg; }
static void *host_alloc(size_t n) { return malloc(n); }
static void host_free(void *p, size_t n) { (void)n, free(p); }
static const oar_host_api fake_host = {.abi_version = OAR_DEVICE_ABI_VERSION, .struct_size = sizeof(oar_host_api),
                                       .log = host_log, .error = host_error, .alloc = host_alloc, .free = host_free};

/* ---- tensors in fake device memory ------------------------------------------- */
typedef struct {
    oar_ktensor k;
    size_t bytes;
} dev_tensor;

/* a view of a fresh buffer of exactly `elems` elements (dtype 6 or 7), filled with small values */
static dev_tensor make(int32_t dt, int ndim, const int64_t *shape, const int64_t *strides, int64_t offset,
                       int64_t elems) {
    dev_tensor t;
    memset(&t, 0, sizeof t);
    t.bytes = (size_t)elems * (dt == DT_F64 ? 8 : 4);
    t.k.buffer = iface.alloc(NULL, 0, t.bytes);
    t.k.dtype = dt;
    t.k.ndim = ndim;
    t.k.offset = offset;
    for (int i = 0; i < ndim; i++) t.k.shape[i] = shape[i], t.k.strides[i] = strides[i];
    for (int64_t i = 0; i < elems; i++) {
        double v = (double)((i * 7 + 3) % 11) - 5.0;
        if (dt == DT_F64) ((double *)t.k.buffer)[i] = v / 4;
        else ((float *)t.k.buffer)[i] = (float)(v / 4);
    }
    return t;
}
static double get(const oar_ktensor *t, int64_t off) {
    return t->dtype == DT_F64 ? ((const double *)t->buffer)[off] : ((const float *)t->buffer)[off];
}
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
        /* refused: expanded rows in a matrix ([4, 5] from a [1, 5] row), batch dims of no single
         * stride ([2, 3] with strides (0, 30)): supports_op says no, and the kernel called anyway
         * fails naming the problem, before any cuBLAS call */
        dev_tensor rows = make(dt, 2, (int64_t[]){4, 5}, (int64_t[]){0, 1}, 0, 5);
        dev_tensor b03 = make(dt, 4, (int64_t[]){2, 3, 5, 6}, (int64_t[]){0, 30, 6, 1}, 0, 90);
        dev_tensor o = make(dt, 2, (int64_t[]){4, 6}, (int64_t[]){6, 1}, 0, 24);
        dev_tensor o4 = make(dt, 4, (int64_t[]){2, 3, 4, 6}, (int64_t[]){72, 24, 6, 1}, 0, 144);
        oar_ktensor in1[2] = {rows.k, w.k}, in2[2] = {a.k, b03.k};
        oar_kernel_call c1 = {.op = "matmul", .n_in = 2, .in = in1}, c2 = {.op = "matmul", .n_in = 2, .in = in2};
        CHECK(iface.supports_op(NULL, 0, &c1) == 0 && iface.supports_op(NULL, 0, &c2) == 0);
        c1.n_out = c2.n_out = 1;
        c1.out = &o.k;
        c2.out = &o4.k;
        int gemms = n_gemm;
        last_msg[0] = 0;
        CHECK(k_matmul(NULL, &c1) == -3 && strstr(last_msg, "cannot read in place"));
        CHECK(k_matmul(NULL, &c2) == -3 && n_gemm == gemms);
        /* a transposed output: refused */
        dev_tensor ot = make(dt, 2, (int64_t[]){4, 6}, (int64_t[]){1, 4}, 0, 24);
        dev_tensor a2 = make(dt, 2, (int64_t[]){4, 5}, (int64_t[]){5, 1}, 0, 20);
        oar_ktensor in3[2] = {a2.k, w.k};
        oar_kernel_call c3 = {.op = "matmul", .n_in = 2, .in = in3, .n_out = 1, .out = &ot.k};
        CHECK(iface.supports_op(NULL, 0, &c3) == 0 && k_matmul(NULL, &c3) == -3);
        dev_tensor *all[] = {&a, &b, &w, &at, &b11, &ap, &bp, &v, &v2, &rows, &b03, &o, &o4, &ot, &a2};
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

int main(void) {
    oar_plugin_desc d;
    memset(&d, 0, sizeof d);
    fake_devices = 0; /* no device: refused with the driver's reason */
    CHECK(oar_plugin_init(&fake_host, &d) != 0 && strstr(last_msg, "no CUDA device"));
    fake_devices = 1;
    CHECK(oar_plugin_init(&fake_host, &d) == 0 && d.iface == &iface && !strcmp(d.name, "cuda"));
    oar_device_props p;
    CHECK(iface.device_count(NULL) == 1 && iface.get_props(NULL, 0, &p) == 0 && strstr(p.name, "fake GPU 0"));
    RUN(test_no_per_call_queries);
    RUN(test_matmul);
    RUN(test_claims);
    d.shutdown(NULL);
    return test_summary();
}
#else
#include <stdio.h>
int main(void) {
    printf("SKIP: no CUDA headers (CMake found no CUDA toolkit)\n");
    return 77;
}
#endif

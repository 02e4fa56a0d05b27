/* The cuda plugin's own host code (plugins/cuda/cuda_plugin.c, cuda_mem.c)
 * built as a loadable device with a fake CUDA runtime and cuBLAS in host
 * memory and CPU loops for its kernel launchers, so that test_backend_ops
 * runs on a machine without a GPU what it would run on one: the plugin's
 * get_kernel and supports_op decide what is claimed (the coverage check
 * reads them), and its argument handling (descriptors, reduced dims, rows,
 * the cuBLAS plan) reaches the loops. The loops compute in double and round
 * once at the store, as the .cu kernels say they do in float; they are not
 * the .cu kernels, which only a GPU runs. Elementwise: add, sub, mul, div,
 * exp, neg, relu, sign and where, what the demo CNN's step uses, eq, where
 * and logical_not in i64 and bool, what cross entropy with class indices
 * adds, and gelu, gelu_grad and sqrt, what the char LM's step adds (the real tables have every row's forms, made by nvcc).
 * The FFT ops run the plugin's cuda_fft.c, which opens the model of cuFFT
 * (../fake_cufft.h: the documented data layout, a direct DFT in double,
 * built as fake_cufft_lib.c's library) that OAR_CUDA_CUFFT_LIB names, as it
 * opens libcufft.so.12 on a GPU, and its gathers and scatters go to loops
 * here (without OAR_CUDA_CUFFT_LIB the FFT ops are not claimed); conv runs
 * cuda_dnn.c, which opens the fake cuDNN library (fake_cudnn.c) that
 * OAR_CUDA_CUDNN_LIB names, where CMake found cudnn.h.
 * Synchronous: a copy or kernel runs when it is queued (the stream
 * semantics are test_cuda_plugin_host's). */
#define OAR_CUDA_CUFFT /* the FFT ops through cuda_fft.c, opening the model of cuFFT (OAR_CUDA_CUFFT_LIB) */
#ifdef OAR_TEST_FAKE_CUDNN /* conv through cuda_dnn.c, opening fake_cudnn.c's library (OAR_CUDA_CUDNN_LIB) */
#define OAR_CUDA_CUDNN
#endif
#include "../../../plugins/cuda/cuda_plugin.c"
#include "../../../plugins/cuda/cuda_mem.c"
#include "../../../plugins/cuda/cuda_fft.c"
#ifdef OAR_TEST_FAKE_CUDNN
#include "../../../plugins/cuda/cuda_dnn.c"
#endif

#include <math.h>
#include <stdlib.h>

/* ---- the runtime ------------------------------------------------------------ */
cudaError_t cudaGetDeviceCount(int *n) { return *n = 1, cudaSuccess; }
cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : cudaErrorInvalidDevice; }
const char *cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : "a fake CUDA error"; }
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int d) {
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "fake GPU %d (CPU loops)", d);
    p->totalGlobalMem = 1 << 30;
    return cudaSuccess;
}
/* the compute capability: OAR_FAKE_CUDA_CC ("7.5"), else 8.0 (what the
 * plugin's kernels are built for); a value that is not major.minor makes
 * the query fail */
cudaError_t cudaDeviceGetAttribute(int *v, enum cudaDeviceAttr a, int d) {
    const char *e = getenv("OAR_FAKE_CUDA_CC");
    int major = 8, minor = 0;
    if (d != 0 || (e && sscanf(e, "%d.%d", &major, &minor) != 2)) return cudaErrorInvalidValue;
    if (a == cudaDevAttrComputeCapabilityMajor) return *v = major, cudaSuccess;
    if (a == cudaDevAttrComputeCapabilityMinor) return *v = minor, cudaSuccess;
    return cudaErrorInvalidValue;
}
cudaError_t cudaMalloc(void **p, size_t n) { return (*p = malloc(n)) ? cudaSuccess : cudaErrorMemoryAllocation; }
cudaError_t cudaFree(void *p) { return free(p), cudaSuccess; }
cudaError_t cudaHostAlloc(void **p, size_t n, unsigned flags) {
    return (void)flags, (*p = malloc(n)) ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFreeHost(void *p) { return free(p), cudaSuccess; }
cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, enum cudaMemcpyKind k, cudaStream_t st) {
    return (void)k, (void)st, memcpy(d, s, n), cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags) {
    return (void)flags, (*s = (cudaStream_t)malloc(1)) ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, cudaStreamDefault); }
cudaError_t cudaStreamDestroy(cudaStream_t s) { return free(s), cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t s) { return (void)s, cudaSuccess; }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned f) {
    return (void)f, (*e = (cudaEvent_t)malloc(1)) ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) { return free(e), cudaSuccess; }
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) { return (void)e, (void)s, cudaSuccess; }
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned f) { return (void)s, (void)e, (void)f, cudaSuccess; }
cudaError_t cudaEventSynchronize(cudaEvent_t e) { return (void)e, cudaSuccess; }
cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *p) {
    (void)p;
    memset(a, 0, sizeof *a);
    return cudaSuccess;
}

/* ---- values of the dtypes (oar's codes) --------------------------------------- */
#include "half_bits.h"
/* element i of p (dtype dt), as the device reads it: integers through long long */
static double ld(const void *p, int32_t dt, int64_t i) {
    switch (dt) {
    case 0: return ((const uint8_t *)p)[i] != 0;
    case 1: return ((const uint8_t *)p)[i];
    case 2: return ((const int32_t *)p)[i];
    case 3: return (double)((const int64_t *)p)[i];
    case DT_F16: return f16_to_f32(((const uint16_t *)p)[i]);
    case DT_BF16: return bf16_to_f32(((const uint16_t *)p)[i]);
    case DT_F32: return ((const float *)p)[i];
    default: return ((const double *)p)[i];
    }
}
/* element i of p = v converted to dt (floats to integers truncate) */
static void st(void *p, int32_t dt, int64_t i, double v) {
    switch (dt) {
    case 0: ((uint8_t *)p)[i] = v != 0; break;
    case 1: ((uint8_t *)p)[i] = (uint8_t)(long long)v; break;
    case 2: ((int32_t *)p)[i] = (int32_t)(long long)v; break;
    case 3: ((int64_t *)p)[i] = (int64_t)v; break;
    case DT_F16: ((uint16_t *)p)[i] = f32_to_f16((float)v); break;
    case DT_BF16: ((uint16_t *)p)[i] = f32_to_bf16((float)v); break;
    case DT_F32: ((float *)p)[i] = (float)v; break;
    default: ((double *)p)[i] = v;
    }
}

/* ---- cuBLAS: its documented column-major definition --------------------------- */
cublasStatus_t cublasCreate(cublasHandle_t *h) {
    return (*h = (cublasHandle_t)malloc(1)) ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}
cublasStatus_t cublasDestroy(cublasHandle_t h) { return free(h), CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) { return (void)h, (void)s, CUBLAS_STATUS_SUCCESS; }
const char *cublasGetStatusString(cublasStatus_t s) { return s ? "a fake cuBLAS error" : "success"; }

static int32_t dt_of(cudaDataType t) {
    return t == CUDA_R_16F ? DT_F16 : t == CUDA_R_16BF ? DT_BF16 : t == CUDA_R_32F ? DT_F32 : t == CUDA_R_64F ? DT_F64 : -1;
}

/* C[b] (m x n, ldc) = alpha op(A[b]) (m x k) op(B[b]) (k x n) + beta C[b] */
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                          int k, const void *alpha, const void *A, cudaDataType at, int lda,
                                          long long sa, const void *B, cudaDataType bt, int ldb, long long sb,
                                          const void *beta, void *C, cudaDataType ct, int ldc, long long sc,
                                          int batch, cublasComputeType_t comp, cublasGemmAlgo_t algo) {
    (void)h, (void)algo;
    int32_t dt = dt_of(at);
    bool f64 = dt == DT_F64;
    if (dt < 0 || at != bt || at != ct || f64 != (comp == CUBLAS_COMPUTE_64F) || (!f64 && comp != CUBLAS_COMPUTE_32F))
        return CUBLAS_STATUS_NOT_SUPPORTED;
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
                    acc += ld(A, dt, ia) * ld(B, dt, ib);
                }
                long long ic = b * sc + i + (long long)j * ldc;
                st(C, dt, ic, al * acc + (be != 0 ? be * ld(C, dt, ic) : 0));
            }
    return CUBLAS_STATUS_SUCCESS;
}

/* ---- generated kernels: none (oar compiles nothing for this device here) ----- */
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
           (void)global_size, (int)cudaErrorInvalidValue;
}

/* ---- the launchers ------------------------------------------------------------- */
/* the offset of element i (row-major) of the view t */
static int64_t at_of(const oar_cuda_desc *t, int64_t i) {
    int64_t off = t->off;
    for (int64_t d = t->nd - 1; d >= 0; d--) {
        off += (i % t->shape[d]) * t->st[d];
        i /= t->shape[d];
    }
    return off;
}
static bool known(int32_t dt) { return dt >= 0 && dt <= DT_F64; }

static int add_dt(int32_t dt, void *o, oar_cuda_desc to, const void *const *in, const oar_cuda_desc *ti, int64_t n) {
    for (int64_t i = 0; i < n; i++) st(o, dt, at_of(&to, i), ld(in[0], dt, at_of(&ti[0], i)) + ld(in[1], dt, at_of(&ti[1], i)));
    return 0;
}
static int add_f32(void *o, oar_cuda_desc to, const void *const *in, const oar_cuda_desc *ti, double p0, double p1,
                   int alt, int64_t n, void *stream) {
    (void)p0, (void)p1, (void)alt, (void)stream;
    return add_dt(DT_F32, o, to, in, ti, n);
}
static int add_f64(void *o, oar_cuda_desc to, const void *const *in, const oar_cuda_desc *ti, double p0, double p1,
                   int alt, int64_t n, void *stream) {
    (void)p0, (void)p1, (void)alt, (void)stream;
    return add_dt(DT_F64, o, to, in, ti, n);
}
/* the other rows the demo CNN's training step uses (test_cuda_train_fake_cuda), and the char LM's
 * (test_cuda_char_lm_fake_cuda: gelu in both forms, gelu_grad, sqrt), by their formulas */
static double ew_apply(const char *op, double a, double b, int alt) {
    if (!strcmp(op, "gelu"))
        return alt ? 0.5 * a * (1 + tanh(0.7978845608028654 * (a + 0.044715 * a * a * a)))
                   : 0.5 * a * (1 + erf(a * M_SQRT1_2));
    if (!strcmp(op, "gelu_grad")) return 0.5 * (1 + erf(a * M_SQRT1_2)) + a * exp(-0.5 * a * a) * 0.3989422804014327;
    if (!strcmp(op, "sqrt")) return sqrt(a);
    if (!strcmp(op, "sub")) return a - b;
    if (!strcmp(op, "mul")) return a * b;
    if (!strcmp(op, "div")) return a / b;
    if (!strcmp(op, "exp")) return exp(a);
    if (!strcmp(op, "neg")) return -a;
    if (!strcmp(op, "relu")) return a < 0 ? 0 : a;
    return (double)((a > 0) - (a < 0)); /* sign (NaN gives 0, as ew_math.h) */
}
static int ew_dt(const char *op, int n_in, int32_t dt, void *o, oar_cuda_desc to, const void *const *in,
                 const oar_cuda_desc *ti, int64_t n, int alt) {
    for (int64_t i = 0; i < n; i++) {
        if (n_in == 3) { /* where: a bool condition */
            bool c = ld(in[0], 0, at_of(&ti[0], i)) != 0;
            st(o, dt, at_of(&to, i), ld(in[c ? 1 : 2], dt, at_of(&ti[c ? 1 : 2], i)));
            continue;
        }
        double a = ld(in[0], dt, at_of(&ti[0], i)), b = n_in > 1 ? ld(in[1], dt, at_of(&ti[1], i)) : 0;
        st(o, dt, at_of(&to, i), ew_apply(op, a, b, alt));
    }
    return 0;
}
#define EW_FAKE(OP, N)                                                                                          \
    static int OP##_f32(void *o, oar_cuda_desc to, const void *const *in, const oar_cuda_desc *ti, double p0,   \
                        double p1, int alt, int64_t n, void *stream) {                                          \
        (void)p0, (void)p1, (void)stream;                                                                       \
        return ew_dt(#OP, N, DT_F32, o, to, in, ti, n, alt);                                                    \
    }                                                                                                           \
    static int OP##_f64(void *o, oar_cuda_desc to, const void *const *in, const oar_cuda_desc *ti, double p0,   \
                        double p1, int alt, int64_t n, void *stream) {                                          \
        (void)p0, (void)p1, (void)stream;                                                                       \
        return ew_dt(#OP, N, DT_F64, o, to, in, ti, n, alt);                                                    \
    }
EW_FAKE(sub, 2)
EW_FAKE(mul, 2)
EW_FAKE(div, 2)
EW_FAKE(exp, 1)
EW_FAKE(neg, 1)
EW_FAKE(relu, 1)
EW_FAKE(sign, 1)
EW_FAKE(where, 3)
EW_FAKE(gelu, 1)
EW_FAKE(gelu_grad, 1)
EW_FAKE(sqrt, 1)
const oar_cuda_ew oar_cuda_ew_table[] = {
    {"add", 2, add_f32, add_f64}, {"sub", 2, sub_f32, sub_f64},   {"mul", 2, mul_f32, mul_f64},
    {"div", 2, div_f32, div_f64}, {"exp", 1, exp_f32, exp_f64},   {"neg", 1, neg_f32, neg_f64},
    {"relu", 1, relu_f32, relu_f64}, {"sign", 1, sign_f32, sign_f64}, {"where", 3, where_f32, where_f64},
    {"gelu", 1, gelu_f32, gelu_f64}, {"gelu_grad", 1, gelu_grad_f32, gelu_grad_f64}, {"sqrt", 1, sqrt_f32, sqrt_f64},
    {NULL, 0, NULL, NULL}};

/* bool and integer forms: what cross entropy with class indices uses (eq,
 * logical_not, where), in the plugin's tables per dtype */
static int ew1_run(const char *op, int32_t dt, void *o, oar_cuda_desc to, const void *const *in,
                   const oar_cuda_desc *ti, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        double a = ld(in[0], !strcmp(op, "where") ? 0 : dt, at_of(&ti[0], i));
        if (!strcmp(op, "eq")) st(o, 0, at_of(&to, i), a == ld(in[1], dt, at_of(&ti[1], i)));
        else if (!strcmp(op, "logical_not")) st(o, 0, at_of(&to, i), a == 0);
        else st(o, dt, at_of(&to, i), a != 0 ? ld(in[1], dt, at_of(&ti[1], i)) : ld(in[2], dt, at_of(&ti[2], i)));
    }
    return 0;
}
#define EW1_FAKE(OP, SFX, DT)                                                                                   \
    static int OP##_##SFX(void *o, oar_cuda_desc to, const void *const *in, const oar_cuda_desc *ti, double p0, \
                          double p1, int alt, int64_t n, void *stream) {                                        \
        (void)p0, (void)p1, (void)alt, (void)stream;                                                            \
        return ew1_run(#OP, DT, o, to, in, ti, n);                                                              \
    }
EW1_FAKE(eq, i64, 3)
EW1_FAKE(where, i64, 3)
EW1_FAKE(eq, b1, 0)
EW1_FAKE(where, b1, 0)
EW1_FAKE(logical_not, b1, 0)
const oar_cuda_ew1 oar_cuda_ew_b1[] = {{"eq", 2, eq_b1}, {"where", 3, where_b1}, {"logical_not", 1, logical_not_b1},
                                       {NULL, 0, NULL}};
const oar_cuda_ew1 oar_cuda_ew_u8[] = {{NULL, 0, NULL}}, oar_cuda_ew_i32[] = {{NULL, 0, NULL}};
const oar_cuda_ew1 oar_cuda_ew_i64[] = {{"eq", 2, eq_i64}, {"where", 3, where_i64}, {NULL, 0, NULL}};

int oar_cuda_convert(void *o, int32_t to_dt, oar_cuda_desc to, const void *x, int32_t from, oar_cuda_desc tx, int64_t n,
                     void *stream) {
    (void)stream;
    if (!known(to_dt) || !known(from)) return (int)cudaErrorInvalidValue;
    for (int64_t i = 0; i < n; i++) st(o, to_dt, at_of(&to, i), ld(x, from, at_of(&tx, i)));
    return 0;
}
int oar_cuda_fill(void *o, int32_t dt, oar_cuda_desc to, double v, int64_t n, void *stream) {
    (void)stream;
    if (!known(dt)) return (int)cudaErrorInvalidValue;
    for (int64_t i = 0; i < n; i++) st(o, dt, at_of(&to, i), v);
    return 0;
}
int oar_cuda_reduce(void *o, int32_t dt, int64_t o_off, const void *x, oar_cuda_desc kept, oar_cuda_desc red, int op,
                    int64_t n_out, int64_t n_red, void *stream) {
    (void)stream;
    if (dt < DT_F16 || dt > DT_F64) return (int)cudaErrorInvalidValue;
    for (int64_t i = 0; i < n_out; i++) {
        double acc = op == 0 ? 0 : op == 3 ? 1 : op == 1 ? -INFINITY : INFINITY;
        for (int64_t r = 0; r < n_red; r++) {
            double v = ld(x, dt, at_of(&kept, i) + at_of(&red, r));
            if (op == 1 || op == 2) /* a NaN wins */
                acc = v != v || acc != acc ? NAN : op == 1 ? fmax(acc, v) : fmin(acc, v);
            else acc = op == 0 ? acc + v : acc * v;
        }
        st(o, dt, o_off + i, acc);
    }
    return 0;
}
int oar_cuda_softmax(void *o, int32_t dt, const void *x, oar_cuda_desc rows_x, oar_cuda_desc rows_o, int64_t len,
                     int64_t sx, int64_t so, int log_, int64_t n_rows, void *stream) {
    (void)stream;
    if (dt < DT_F16 || dt > DT_F64) return (int)cudaErrorInvalidValue;
    for (int64_t r = 0; r < n_rows; r++) {
        int64_t bx = at_of(&rows_x, r), bo = at_of(&rows_o, r);
        double mx = -INFINITY, s = 0;
        for (int64_t j = 0; j < len; j++) mx = fmax(mx, ld(x, dt, bx + j * sx));
        for (int64_t j = 0; j < len; j++) s += exp(ld(x, dt, bx + j * sx) - mx);
        for (int64_t j = 0; j < len; j++) {
            double v = ld(x, dt, bx + j * sx) - mx;
            st(o, dt, bo + j * so, log_ ? v - log(s) : exp(v) / s);
        }
    }
    return 0;
}

#define FAKE_LD(p, dt, i) ld(p, dt, i)
#define FAKE_ST(p, dt, i, v) st(p, dt, i, v)
#include "../fake_cuda_nn.h"

/* the FFT ops' gather/scatter and zeroing, as cuda_kernels.cu's (complex: two reals) */
int oar_cuda_scaled_copy(void *o, oar_cuda_desc to, const void *x, oar_cuda_desc tx, int32_t dt, double scale,
                         int64_t n, void *stream) {
    (void)stream;
    if (dt < DT_F32 || dt > 9) return (int)cudaErrorInvalidValue;
    int32_t r = dt == DT_F32 || dt == 8 ? DT_F32 : DT_F64;
    int parts = dt >= 8 ? 2 : 1;
    for (int64_t i = 0; i < n; i++)
        for (int p = 0; p < parts; p++)
            st(o, r, parts * at_of(&to, i) + p, ld(x, r, parts * at_of(&tx, i) + p) * scale);
    return 0;
}
int oar_cuda_zero_imag(void *p, int32_t dt, int64_t off, int64_t stride, int64_t count, void *stream) {
    (void)stream;
    if (dt != 8 && dt != 9) return (int)cudaErrorInvalidValue;
    for (int64_t j = 0; j < count; j++) st(p, dt == 8 ? DT_F32 : DT_F64, 2 * (off + j * stride) + 1, 0);
    return 0;
}

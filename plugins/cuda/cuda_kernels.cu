// CUDA kernels of the oar cuda plugin: f32 elementwise ops over strided,
// broadcast views (one thread per output element, grid-stride loop).
#include "cuda_kernels.h"

#include <cuda_runtime.h>

__device__ static int64_t at(const oar_cuda_desc &t, int64_t i) {
    int64_t off = t.off;
    for (int64_t d = t.nd - 1; d >= 0; d--) {
        off += (i % t.shape[d]) * t.st[d];
        i /= t.shape[d];
    }
    return off;
}

__device__ static float unary_op(int op, float x) {
    switch (op) {
    case OAR_CU_NEG: return -x;
    case OAR_CU_ABS: return fabsf(x);
    case OAR_CU_EXP: return expf(x);
    case OAR_CU_LOG: return logf(x);
    case OAR_CU_SQRT: return sqrtf(x);
    case OAR_CU_SQUARE: return x * x;
    case OAR_CU_TANH: return tanhf(x);
    case OAR_CU_SIGMOID: return 1.0f / (1.0f + expf(-x));
    default: return isnan(x) ? x : x > 0 ? x : 0.0f; // relu
    }
}

__global__ static void k_unary(int op, float *o, oar_cuda_desc to, const float *x, oar_cuda_desc tx,
                               int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        o[at(to, i)] = unary_op(op, x[at(tx, i)]);
}

__global__ static void k_binary(int op, float *o, oar_cuda_desc to, const float *a, oar_cuda_desc ta,
                                const float *b, oar_cuda_desc tb, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        float x = a[at(ta, i)], y = b[at(tb, i)], r;
        switch (op) {
        case OAR_CU_ADD: r = x + y; break;
        case OAR_CU_SUB: r = x - y; break;
        case OAR_CU_MUL: r = x * y; break;
        case OAR_CU_DIV: r = x / y; break;
        case OAR_CU_MAX: r = isnan(x) || isnan(y) ? x + y : fmaxf(x, y); break;
        default: r = isnan(x) || isnan(y) ? x + y : fminf(x, y); break;
        }
        o[at(to, i)] = r;
    }
}

__global__ static void k_fill(float *o, oar_cuda_desc to, float v, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        o[at(to, i)] = v;
}

static unsigned blocks(int64_t n) {
    int64_t b = (n + 255) / 256;
    return (unsigned)(b < 65535 ? (b > 0 ? b : 1) : 65535);
}

extern "C" int oar_cuda_unary(int op, float *o, oar_cuda_desc to, const float *x, oar_cuda_desc tx,
                              int64_t n, void *stream) {
    k_unary<<<blocks(n), 256, 0, (cudaStream_t)stream>>>(op, o, to, x, tx, n);
    return (int)cudaGetLastError();
}

extern "C" int oar_cuda_binary(int op, float *o, oar_cuda_desc to, const float *a, oar_cuda_desc ta,
                               const float *b, oar_cuda_desc tb, int64_t n, void *stream) {
    k_binary<<<blocks(n), 256, 0, (cudaStream_t)stream>>>(op, o, to, a, ta, b, tb, n);
    return (int)cudaGetLastError();
}

extern "C" int oar_cuda_fill(float *o, oar_cuda_desc to, float v, int64_t n, void *stream) {
    k_fill<<<blocks(n), 256, 0, (cudaStream_t)stream>>>(o, to, v, n);
    return (int)cudaGetLastError();
}

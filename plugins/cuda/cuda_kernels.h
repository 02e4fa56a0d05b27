/* Launchers of the CUDA plugin's kernels (cuda_kernels.cu), called from the
 * plugin's C code. Descriptors give offset, rank, shape and strides in
 * elements (stride 0 on broadcast dims). Each returns a cudaError_t value. */
#ifndef OAR_CUDA_KERNELS_H
#define OAR_CUDA_KERNELS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct { int64_t off, nd, shape[8], st[8]; } oar_cuda_desc;

enum { OAR_CU_NEG, OAR_CU_ABS, OAR_CU_EXP, OAR_CU_LOG, OAR_CU_SQRT, OAR_CU_SQUARE, OAR_CU_TANH,
       OAR_CU_SIGMOID, OAR_CU_RELU, OAR_CU_UNARY_COUNT };
enum { OAR_CU_ADD, OAR_CU_SUB, OAR_CU_MUL, OAR_CU_DIV, OAR_CU_MAX, OAR_CU_MIN, OAR_CU_BINARY_COUNT };

int oar_cuda_unary(int op, float *o, oar_cuda_desc to, const float *x, oar_cuda_desc tx, int64_t n,
                   void *stream);
int oar_cuda_binary(int op, float *o, oar_cuda_desc to, const float *a, oar_cuda_desc ta,
                    const float *b, oar_cuda_desc tb, int64_t n, void *stream);
int oar_cuda_fill(float *o, oar_cuda_desc to, float v, int64_t n, void *stream);

#ifdef __cplusplus
}
#endif
#endif

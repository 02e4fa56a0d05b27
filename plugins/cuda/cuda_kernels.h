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

/* An elementwise op's f32 kernel: out o, then the op's inputs in[] with
 * their descriptors (where's condition: bool), the float attributes p0, p1
 * (unary), alt: integer attribute 0 (gelu's form), n elements. */
typedef int (*oar_cuda_ew_launch)(void *o, oar_cuda_desc to, const void *const *in,
                                  const oar_cuda_desc *ti, float p0, float p1, int alt, int64_t n,
                                  void *stream);
typedef struct {
    const char *op;   /* the op's name; NULL ends the table */
    int n_in;
    oar_cuda_ew_launch launch;
} oar_cuda_ew;
/* One entry per row of src/ops/elementwise.def with an f32 device form. */
extern const oar_cuda_ew oar_cuda_ew_table[];

int oar_cuda_fill(float *o, oar_cuda_desc to, float v, int64_t n, void *stream);

#ifdef __cplusplus
}
#endif
#endif

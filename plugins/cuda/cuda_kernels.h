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

/* An elementwise op's f32 or f64 kernel: out o, then the op's inputs in[]
 * with their descriptors (where's condition: bool), the float attributes
 * p0, p1 (unary; converted to the kernel's dtype), alt: integer attribute
 * 0 (gelu's form), n elements, on stream (NULL: the default stream). */
typedef int (*oar_cuda_ew_launch)(void *o, oar_cuda_desc to, const void *const *in,
                                  const oar_cuda_desc *ti, double p0, double p1, int alt, int64_t n,
                                  void *stream);
typedef struct {
    const char *op;   /* the op's name; NULL ends the table */
    int n_in;
    oar_cuda_ew_launch launch;     /* f32 */
    oar_cuda_ew_launch launch_f64; /* f64 */
} oar_cuda_ew;
/* One entry per row of src/ops/elementwise.def with a float device form. */
extern const oar_cuda_ew oar_cuda_ew_table[];

/* Dtype codes are oar's (include/oar/tensor.h): 0 bool, 1 u8, 2 i32, 3 i64,
 * 4 f16, 5 bf16, 6 f32, 7 f64; another code gives cudaErrorInvalidValue. */
/* o (dtype to_dt, descriptor to) = x (dtype from) converted, n elements. */
int oar_cuda_convert(void *o, int32_t to_dt, oar_cuda_desc to, const void *x, int32_t from,
                     oar_cuda_desc tx, int64_t n, void *stream);
/* Every element of o (dtype dt) = v converted to dt. */
int oar_cuda_fill(void *o, int32_t dt, oar_cuda_desc to, double v, int64_t n, void *stream);
/* Reductions of x (dtype 4 f16, 5 bf16, 6 f32 or 7 f64; o of the same)
 * over the dims of red into a contiguous o from o_off: kept holds x's kept
 * dims (x's strides and offset), red the reduced ones (offset 0); op 0 sum
 * (Kahan), 1 amax, 2 amin, 3 prod (a NaN wins amax and amin). f16 and
 * bf16 accumulate in f32 and round once, at the store. */
int oar_cuda_reduce(void *o, int32_t dt, int64_t o_off, const void *x, oar_cuda_desc kept, oar_cuda_desc red,
                    int op, int64_t n_out, int64_t n_red, void *stream);
/* softmax (log_ 0) or log_softmax (1) along one dim of x into o (f16,
 * bf16, f32 or f64; half rows computed in f32): rows_x, rows_o describe
 * the other dims; a row has len elements at strides sx, so. */
int oar_cuda_softmax(void *o, int32_t dt, const void *x, oar_cuda_desc rows_x, oar_cuda_desc rows_o, int64_t len,
                     int64_t sx, int64_t so, int log_, int64_t n_rows, void *stream);

#ifdef __cplusplus
}
#endif
#endif

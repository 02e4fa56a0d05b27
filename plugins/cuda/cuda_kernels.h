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
/* The bool and integer forms: one table per dtype (bool, u8, i32, i64),
 * an entry per row whose gen column has that kind of form; NULL ends each.
 * A launcher's inputs are of the table's dtype (where's condition: bool). */
typedef struct {
    const char *op; /* NULL ends the table */
    int n_in;
    oar_cuda_ew_launch launch;
} oar_cuda_ew1;
extern const oar_cuda_ew1 oar_cuda_ew_b1[], oar_cuda_ew_u8[], oar_cuda_ew_i32[], oar_cuda_ew_i64[];

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

/* The FFT ops' gathers and scatters (cuda_fft.c): o[at(to, i)] = x[at(tx,
 * i)] * scale for n elements of dtype dt (6 f32, 7 f64, 8 c64, 9 c128:
 * both parts scaled; scale 1: a plain copy). */
int oar_cuda_scaled_copy(void *o, oar_cuda_desc to, const void *x, oar_cuda_desc tx, int32_t dt, double scale,
                         int64_t n, void *stream);
/* The imaginary parts of count complex elements (dt 8 c64, 9 c128) of p,
 * at element offsets off + j * stride, set to 0. */
int oar_cuda_zero_imag(void *p, int32_t dt, int64_t off, int64_t stride, int64_t count, void *stream);
/* layer_norm in f32 (dt 6) or f64 (7): rows of d elements (row r: x's
 * elements r d .. r d + d - 1, row-major over tx), y = (x - mean) rstd w +
 * b (w, b NULL: none; tw, tb over the row), mean and rstd per row
 * (elements r of tm, tr); statistics in double. */
int oar_cuda_layer_norm(void *y, oar_cuda_desc ty, void *mean, oar_cuda_desc tm, void *rstd, oar_cuda_desc tr,
                        int32_t dt, const void *x, oar_cuda_desc tx, const void *w, oar_cuda_desc tw, const void *b,
                        oar_cuda_desc tb, double eps, int64_t d, int64_t rows, void *stream);
/* group_norm and batch_norm in f32 (dt 6) or f64 (7), as the CPU's
 * (src/backends/cpu/cpu_norm.c): x is [n, c, s] in row-major order over tx
 * (s: the product of the dims after the channels). A statistic group:
 * group_norm (mode 0), each (sample, channel group) of c / groups channels;
 * batch_norm (mode 1 training, 2 eval), each channel over the samples and
 * s. y = (x - mean) rstd w + b per channel (w, b NULL: none); mean, rstd
 * per group at element g of tm, tr; eval takes them from the running
 * stats rm, rv (element ch), training ignores those. uvar (batch_norm's
 * out[3]): the unbiased batch variance (training), rv itself (eval).
 * Statistics in double, two passes, summed in a fixed order. */
typedef struct {
    int mode; /* 0 group_norm, 1 batch_norm training, 2 batch_norm eval */
    int64_t n, c, s, groups;
    double eps;
    void *y, *mean, *rstd, *uvar;     /* uvar: batch_norm only */
    const void *x, *w, *b, *rm, *rv;  /* w, b: NULL when absent; rm, rv: eval only */
    oar_cuda_desc ty, tm, tr, tu, tx, tw, tb, trm, trv;
} oar_cuda_norm_args;
int oar_cuda_channel_norm(const oar_cuda_norm_args *a, int32_t dt, void *stream);
/* Pools over the last two dims, f32 (dt 6) or f64 (7), as the CPU's:
 * op 0 max_pool2d: o values, o2 indices (i64, into each H x W plane), x
 *   input, a: kernel2, stride2, padding2, dilation2; n outputs;
 * op 1 max_pool2d_backward: o gx (zeroed, then x = gy added at the indices
 *   x2, in output order), n planes; an index outside the plane is skipped
 *   (and counted in *bad, an int in device memory, unless bad is NULL);
 * op 2 avg_pool2d: o, x, a: kernel2, stride2, padding2, ceil_mode,
 *   count_include_pad; n outputs;
 * op 3 avg_pool2d_backward: o gx, x gy, a as op 2; n planes. */
int oar_cuda_pool(int op, int32_t dt, void *o, oar_cuda_desc to, void *o2, oar_cuda_desc to2, const void *x,
                  oar_cuda_desc tx, const void *x2, oar_cuda_desc tx2, const int64_t *a, int64_t n, int *bad,
                  void *stream);
/* Indexing with i64 indices, f32 (dt 6) or f64 (7), as the CPU: op 0
 * gather (o = x gathered along dim by idx, of o's shape), 1 index_select
 * (idx 1-D: rows of x along dim), 2 scatter_add (o = x plus src at the
 * index positions naming each element along dim, in index order; for
 * index_add, ti is the 1-D index viewed over src's shape, stride 0 off
 * dim). size: the extent indices must lie in; *bad (an int in device
 * memory) is set to 0 first, then to 1 by an index outside [0, size). n:
 * o's elements. */
int oar_cuda_index(int op, int32_t dt, void *o, oar_cuda_desc to, const void *x, oar_cuda_desc tx, const void *idx,
                   oar_cuda_desc ti, const void *src, oar_cuda_desc ts, int64_t dim, int64_t size, int *bad, int64_t n,
                   void *stream);

#ifdef __cplusplus
}
#endif
#endif

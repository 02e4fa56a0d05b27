/* Discrete Fourier transforms, as numpy.fft / torch.fft.
 *
 *     oar_tensor *X = oar_fft_rfft(x, -1, -1, NULL);   // x real [..., n] -> [..., n/2+1]
 *     oar_tensor *y = oar_fft_irfft(X, n, -1, NULL);   // back to x
 *
 * Common rules:
 * - n (one dim) or s (several): the signal length per transformed dim; the
 *   input is cropped or zero-padded to it along that dim. -1 (or s NULL)
 *   keeps the input's size; for irfft/hfft the default output length is
 *   2 * (m - 1) for an input of m along the dim.
 * - dim / dims: negative values count from the end, no dim twice. dims
 *   NULL means the last ndims dims when s is given (numpy's rule) and all
 *   dims when s is NULL too (ndims is then ignored); for the *2 functions
 *   dims NULL means {-2, -1}.
 * - norm: NULL or "backward" (scale the inverse by 1/n), "forward" (scale
 *   the forward transform by 1/n), "ortho" (both by 1/sqrt(n)).
 * - dtypes: complex64 and complex128 results. Real input is promoted as
 *   PyTorch does: f64 -> c128, f32/f16/bf16 and integers -> c64 (f32 for
 *   real results). Results of rfft-like functions follow the same rule.
 * - Every function returns a new tensor following the pool rule, and is
 *   differentiable to any order. On bad input (NULL, a dim out of range, a
 *   repeated dim, n or s <= 0 other than -1, an unknown norm, a complex
 *   input to rfft/ihfft/rfftn) it returns NULL with oar_last_error() naming
 *   the function; a NULL input keeps the message already pending. */
#ifndef OAR_FFT_H
#define OAR_FFT_H

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- one dim ------------------------------------------------------------ */
OAR_API oar_tensor *oar_fft_fft(oar_tensor *x, int64_t n /* -1: keep */, int dim, const char *norm);
OAR_API oar_tensor *oar_fft_ifft(oar_tensor *x, int64_t n, int dim, const char *norm);
/* Real input; the output has n/2+1 entries along dim. */
OAR_API oar_tensor *oar_fft_rfft(oar_tensor *x, int64_t n, int dim, const char *norm);
/* Inverse of rfft: a Hermitian half spectrum (m entries along dim) to a
 * real signal of n entries (-1: 2 * (m - 1)). */
OAR_API oar_tensor *oar_fft_irfft(oar_tensor *x, int64_t n, int dim, const char *norm);
/* The FFT of a Hermitian-symmetric signal given by its first half: a real
 * result of n entries (-1: 2 * (m - 1)); irfft(conj(x)) with the norm
 * directions swapped. */
OAR_API oar_tensor *oar_fft_hfft(oar_tensor *x, int64_t n, int dim, const char *norm);
/* Inverse of hfft: real input, n/2+1 complex entries along dim. */
OAR_API oar_tensor *oar_fft_ihfft(oar_tensor *x, int64_t n, int dim, const char *norm);

/* ---- several dims (s and dims hold ndims entries each, or are NULL) ----- */
OAR_API oar_tensor *oar_fft_fftn(oar_tensor *x, int ndims, const int64_t *s /* NULL */,
                                 const int64_t *dims /* NULL: all */, const char *norm);
OAR_API oar_tensor *oar_fft_ifftn(oar_tensor *x, int ndims, const int64_t *s, const int64_t *dims,
                                  const char *norm);
/* Real input; the last of dims is halved to n/2+1 entries. */
OAR_API oar_tensor *oar_fft_rfftn(oar_tensor *x, int ndims, const int64_t *s, const int64_t *dims,
                                  const char *norm);
/* Inverse of rfftn; the last of dims gets s[last] entries (-1 or s NULL:
 * 2 * (m - 1)). */
OAR_API oar_tensor *oar_fft_irfftn(oar_tensor *x, int ndims, const int64_t *s, const int64_t *dims,
                                   const char *norm);

/* ---- two dims: s and dims hold 2 entries each or are NULL ({-2, -1}) ---- */
OAR_API oar_tensor *oar_fft_fft2(oar_tensor *x, const int64_t *s, const int64_t *dims, const char *norm);
OAR_API oar_tensor *oar_fft_ifft2(oar_tensor *x, const int64_t *s, const int64_t *dims, const char *norm);
OAR_API oar_tensor *oar_fft_rfft2(oar_tensor *x, const int64_t *s, const int64_t *dims, const char *norm);
OAR_API oar_tensor *oar_fft_irfft2(oar_tensor *x, const int64_t *s, const int64_t *dims, const char *norm);

/* ---- helpers ------------------------------------------------------------ */
/* Sample frequencies of an n-point transform with sample spacing d:
 * [0, 1, ..., (n-1)/2, -(n/2), ..., -1] / (d n). n >= 0 (0: empty), d
 * finite and nonzero, dtype f32 or f64; NULL with an error otherwise. */
OAR_API oar_tensor *oar_fft_fftfreq(int64_t n, double d, oar_dtype dtype);
/* [0, 1, ..., n/2] / (d n). */
OAR_API oar_tensor *oar_fft_rfftfreq(int64_t n, double d, oar_dtype dtype);
/* Rolls each of the ndims dims (dims NULL: all dims) by size/2, moving
 * frequency 0 to the centre; ifftshift undoes it (they differ for odd
 * sizes). */
OAR_API oar_tensor *oar_fft_fftshift(oar_tensor *x, int ndims, const int64_t *dims);
OAR_API oar_tensor *oar_fft_ifftshift(oar_tensor *x, int ndims, const int64_t *dims);

#ifdef __cplusplus
}
#endif
#endif

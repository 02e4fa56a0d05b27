/* The FFT ops (fft_c2c, fft_r2c, fft_c2r; src/ops/defs/fft.def) of the
 * cuda plugin through cuFFT, opened at run time (cuda_fft.c;
 * cuda_fft_layout.h says how a transform over any dims of a strided view
 * becomes cuFFT plans). */
#ifndef OAR_CUDA_FFT_H
#define OAR_CUDA_FFT_H

#include <stdbool.h>

#include "cuda_device.h"

void oar_cuda_fft_init(const oar_host_api *h);
/* Destroys the cached plans (before the streams they name go). */
void oar_cuda_fft_shutdown(void);
/* Whether cuFFT could be opened (the first call tries, once per process:
 * libcufft.so.12, or OAR_CUDA_CUFFT_LIB; never with OAR_CUDA_CUFFT=0). */
bool oar_cuda_fft_available(void);
/* Whether (op, kernel dtype) is an FFT op the plugin claims: fft_c2c and
 * fft_c2r in c64 and c128, fft_r2c in f32 and f64, where cuFFT was opened. */
bool oar_cuda_fft_claims(const char *op, int32_t dt);
/* supports_op for those ops: dtypes, attributes and a layout
 * (oar_cuda_fft_layout_make) the plugin can run; 0 or 1. The output may be
 * absent (n_out 0): its shape then follows from the op's rule. */
int oar_cuda_fft_supports(const oar_kernel_call *c);
/* Runs the call on device dev (current) on stream st: 0, or the status of
 * host->error (-3 with the reason where cuFFT could not be opened). */
int oar_cuda_fft_run(const oar_kernel_call *c, int dev, cudaStream_t st);
/* Plans in the cache (for the tests). */
int oar_cuda_fft_cached_plans(void);

#endif

/* The model of cuFFT (../fake_cufft.h) as a shared library, for the cuda
 * plugin's cuda_fft.c, which opens cuFFT with dlopen: the fake cuda plugin
 * (fake_cuda_plugin.c) opens this one where OAR_CUDA_CUFFT_LIB names it.
 * Built with default visibility: every cufft* function of the header is
 * exported, its state stays static. */
#include "../fake_cufft.h"

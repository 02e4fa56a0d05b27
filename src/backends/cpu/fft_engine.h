/* The CPU FFT engine behind the fft ops: one-dimensional complex transforms
 * of any length in O(n log n), planned once per (length, precision,
 * direction) and cached for the life of the process (thread-safe). */
#ifndef OARI_FFT_ENGINE_H
#define OARI_FFT_ENGINE_H

#include "../../core/core.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct oari_fft_plan oari_fft_plan;

/* The plan for length n >= 1, double precision if dbl, exponent sign +
 * if inverse (no scaling either way). Cached: never free it. NULL with the
 * error set if memory runs out. */
OARI_HIDDEN const oari_fft_plan *oari_fft_plan_get(int64_t n, bool dbl, bool inverse);
/* For even n >= 2: a plan for real transforms of length n, made of the
 * complex plan of n/2 (oari_fft_plan_half, direction as asked) and the n/2
 * twiddles exp(-+2 pi i k / n) (oari_fft_plan_real_twiddles, complex
 * elements of the precision) that split and merge the half-length
 * transform of a real signal packed two samples per complex element.
 * Cached like oari_fft_plan_get; NULL with the error set on failure. */
OARI_HIDDEN const oari_fft_plan *oari_fft_plan_get_real(int64_t n, bool dbl, bool inverse);
OARI_HIDDEN const oari_fft_plan *oari_fft_plan_half(const oari_fft_plan *p);
OARI_HIDDEN const void *oari_fft_plan_real_twiddles(const oari_fft_plan *p);
/* Host allocations held by the plan cache (for leak checks in tests). */
OARI_HIDDEN long oari_fft_plan_cache_blocks(void);
/* Complex elements of scratch that oari_fft_exec_* needs. */
OARI_HIDDEN int64_t oari_fft_plan_work(const oari_fft_plan *p);

/* out[k] = sum_j in[j * in_stride] exp(-+2 pi i j k / n), k < n; out is
 * contiguous and must not overlap in; work holds oari_fft_plan_work(p)
 * complex elements of the plan's precision. */
OARI_HIDDEN void oari_fft_exec_f32(const oari_fft_plan *p, const void *in, int64_t in_stride,
                                   void *out, void *work);
OARI_HIDDEN void oari_fft_exec_f64(const oari_fft_plan *p, const void *in, int64_t in_stride,
                                   void *out, void *work);
/* The same on 4 (float) or 2 (double) transforms at once: each element is
 * 4 real parts then 4 imaginary parts (v4f), or 2 and 2 (v2d), one lane
 * per transform; in_stride and work count such elements. */
OARI_HIDDEN void oari_fft_exec_v4f(const oari_fft_plan *p, const void *in, int64_t in_stride,
                                   void *out, void *work);
OARI_HIDDEN void oari_fft_exec_v2d(const oari_fft_plan *p, const void *in, int64_t in_stride,
                                   void *out, void *work);

#if defined(__x86_64__) && defined(__GNUC__)
#define OARI_FFT_X86 1
/* 8 (float) or 4 (double) lanes, compiled for AVX2+FMA: call only when
 * oari_fft_have_avx2(). */
OARI_HIDDEN bool oari_fft_have_avx2(void);
OARI_HIDDEN void oari_fft_exec_v8f(const oari_fft_plan *p, const void *in, int64_t in_stride,
                                   void *out, void *work);
OARI_HIDDEN void oari_fft_exec_v4d(const oari_fft_plan *p, const void *in, int64_t in_stride,
                                   void *out, void *work);
/* Everything between BEGIN and END is compiled for AVX2+FMA. GCC takes
 * its target pragma; clang ignores that one (and then refuses the AVX
 * intrinsics), so it gets its own attribute push. */
#ifdef __clang__
#define OARI_FFT_AVX2_BEGIN \
    _Pragma("clang attribute push(__attribute__((target(\"avx2,fma\"))), apply_to = function)")
#define OARI_FFT_AVX2_END _Pragma("clang attribute pop")
#else
#define OARI_FFT_AVX2_BEGIN _Pragma("GCC push_options") _Pragma("GCC target(\"avx2,fma\")")
#define OARI_FFT_AVX2_END _Pragma("GCC pop_options")
#endif
#else
#define OARI_FFT_X86 0
#endif
/* The optional FFTW3 engine (fft_fftw.c, built with -DOAR_FFTW=ON): every
 * line along dim d of a tensor in one cached FFTW plan. shape: the output's
 * (src has n along d for C2C and R2C, n/2+1 for C2R); strides in elements
 * of each side's type (complex or real); src == dst runs in place (C2C
 * only). C2C forward or inverse; R2C forward to the n/2+1 outputs; C2R
 * inverse from n/2+1 inputs (imaginary parts of the first and, for even n,
 * the middle one ignored); no scaling but scale. nthreads: OpenMP threads
 * for one transform (1 inside a parallel region). Returns 0; OAR_ERR_NOMEM
 * (negative) with the error set; or 1 if FFTW has no plan for it (the caller uses
 * the in-tree engine). */
typedef enum { OARI_FFT_C2C, OARI_FFT_R2C, OARI_FFT_C2R } oari_fft_kind;
#ifdef OAR_FFTW
OARI_HIDDEN int oari_fft_fftw_dim(oari_fft_kind kind, int64_t n, bool dbl, bool inverse, double scale,
                                  int nthreads, int ndim, const int64_t *shape, int d, const void *src,
                                  const int64_t *src_strides, void *dst, const int64_t *dst_strides);
/* Host allocations held by the FFTW plan cache (FFTW's own memory is not
 * counted: it does not go through oari_malloc). */
OARI_HIDDEN long oari_fft_fftw_cache_blocks(void);
#endif
/* The engine in this build: "fftw3" or "oar" (the in-tree one). */
OARI_HIDDEN const char *oari_fft_engine_name(void);

/* Tests: run the SSE2 (4 float / 2 double lane) path even where AVX2 is
 * available, so both paths are checked on one machine. */
OARI_HIDDEN void oari_fft_force_narrow(bool on);

#endif

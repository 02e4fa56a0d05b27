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
#else
#define OARI_FFT_X86 0
#endif
/* Tests: run the SSE2 (4 float / 2 double lane) path even where AVX2 is
 * available, so both paths are checked on one machine. */
OARI_HIDDEN void oari_fft_force_narrow(bool on);

#endif

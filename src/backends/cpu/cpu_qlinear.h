/* The fused quantized linear layer's CPU kernel (cpu_qlinear.c): switches
 * for the tests, the int32 product qconv2d runs on, and the pieces the
 * fused conv (cpu_qconv.c) shares with it: the VNNI probe and the
 * epilogue (scale, bias, relu, the next layer's quantize) in its full and
 * short forms. */
#ifndef OARI_CPU_QLINEAR_H
#define OARI_CPU_QLINEAR_H

#include "cpu.h"

#include <math.h>
#include <string.h>

/* The integer kernels the fused layers (qlinear, qlinear_conv2d), the
 * packed product below and qmax_pool2d run, from slowest to fastest: the
 * exact loop (any CPU, any strides), AVX2 (16-bit products summed in pairs
 * into int32: vpmaddwd, exact) and AVX512_VNNI (vpdpbusd). */
typedef enum { OARI_QK_REFERENCE, OARI_QK_AVX2, OARI_QK_VNNI } oari_qkernel;

/* The kernel that runs now: the fastest the CPU has, at most the cap. */
OARI_HIDDEN oari_qkernel oari_cpu_qkernel(void);

/* Tests: the fastest kernel allowed (OARI_QK_VNNI: whatever the CPU has,
 * the default; OARI_QK_REFERENCE: the exact loop everywhere). */
OARI_HIDDEN void oari_cpu_qkernel_cap(oari_qkernel k);

/* c [m, n] int32 = (a - za) b exactly, a [m, k] uint8 (or int8: i8) and b
 * [k, n] int8 dense row-major, on the VNNI or AVX2 kernel with b packed
 * for the call (qconv2d's products: a small weight, many rows; qmatmul's
 * without VNNI). *done false (and nothing written) where neither may run;
 * 0, or OAR_ERR_NOMEM. */
OARI_HIDDEN int oari_cpu_qgemm_packed(const void *a, bool i8, int32_t za, const int8_t *b, int64_t m, int64_t k,
                                      int64_t n, int32_t *c, bool *done);

/* The epilogue's output: f32, or requantized as quantize's f32 kernels do
 * (zq + round(y * inv), or round(y / sq) with div; NaN and |t| >= 2^63 to
 * lo; clamped to [lo, hi]) into uint8 (lo 0) or int8 (lo -128). */
typedef struct oari_qout {
    bool on, div;
    float inv, sq, zq, lo, hi;
} oari_qout;

/* The output quantization of call c whose integer attribute `at` is the
 * output dtype (absent: f32 out) and `at` + 1 div, inputs in_s and in_s + 1
 * its scale and zero point; checks the values (op names the op in the
 * message). 0 or OAR_ERR_INVALID. */
OARI_HIDDEN int oari_cpu_qout_parse(const oar_kernel_call *c, int at, int in_s, oari_qout *o);

/* act(f32(v) * s + b) (b: 0 for none), the unfused ops' roundings. */
static inline float oari_qact(int32_t v, float s, const float *b, bool relu) {
    float f = (float)v * s;
    if (b) f += *b;
    return relu && f < 0.f ? 0.f : f;
}

/* y[i] = f, or f requantized. */
static inline void oari_qput(const oari_qout *o, void *y, int64_t i, float f) {
    if (!o->on) {
        ((float *)y)[i] = f;
        return;
    }
    float t = o->zq + nearbyintf(o->div ? f / o->sq : f * o->inv);
    t = t > -9.2233720368547758e18f && t < 9.2233720368547758e18f ? t : o->lo;
    t = t < o->lo ? o->lo : t > o->hi ? o->hi : t;
    if (o->lo < 0) ((int8_t *)y)[i] = (int8_t)t;
    else ((uint8_t *)y)[i] = (uint8_t)t;
}

/* The requantizing epilogue's short form, valid when no output can be
 * NaN, infinite or near 2^31 after scaling (oari_qfast_make checks the
 * constants): y = zq + round(clamp(f / sq, lower, upper)) with lower =
 * lo - zq (0 with relu: relu folds into the clamp) and upper = hi - zq.
 * The same values as oari_qput: round and a clamp to integers commute,
 * and f / sq stays below 2^30, so the checks for NaN and 2^63 never fire. */
typedef struct oari_qfast {
    float lower, upper;
    int32_t zq;
} oari_qfast;

/* Whether every f = v * s + b (|v| <= 2^31, |s| <= ms, |b| <= mb: INFINITY
 * for a constant that is not finite) requantized by o stays finite and
 * below 2^30 in magnitude; fills *f when it does. false for an f32 output. */
static inline bool oari_qfast_bound(const oari_qout *o, double ms, double mb, bool relu, oari_qfast *f) {
    if (!o->on) return false;
    double r = o->div ? 1.0 / (double)o->sq : (double)o->inv;
    double m = 2147483648.0 * ms + mb; /* (a bound over every channel's constants together) */
    if (!(m * r * 1.001 < 1073741824.0)) return false;
    f->lower = o->lo - o->zq, f->upper = o->hi - o->zq, f->zq = (int32_t)o->zq;
    if (relu && f->lower < 0) f->lower = 0;
    return true;
}

/* max |p[j]| over n values, INFINITY where one is NaN or infinite (0 for
 * none). Comparisons, not fmax: that is a call into libm per value. */
static inline double oari_absmax(const float *p, int64_t n) {
    double m = 0;
    for (int64_t j = 0; j < n; j++) {
        double a = fabs((double)p[j]);
        m = !isfinite(p[j]) ? INFINITY : a > m ? a : m;
    }
    return m;
}

/* oari_qfast_bound over the constants themselves: s (ns values), b (nb
 * values, or NULL). */
static inline bool oari_qfast_make(const oari_qout *o, const float *s, int64_t ns, const float *b, int64_t nb,
                                   bool relu, oari_qfast *f) {
    return o->on && oari_qfast_bound(o, oari_absmax(s, ns), b ? oari_absmax(b, nb) : 0, relu, f);
}

/* true: the VNNI kernels of qlinear and qlinear_conv2d never take the
 * short form (tests compare it with the full form on the same kernel);
 * false: they take it where oari_qfast_make allows. */
OARI_HIDDEN void oari_cpu_qfast_force_off(bool on);

/* oari_qfast_make's answer (on AVX-512 where the CPU has it: a layer's
 * 1024 constants at every call), false while the short form is forced
 * off: the fused layers' choice of epilogue, made once per call. */
OARI_HIDDEN bool oari_cpu_qfast(const oari_qout *o, const float *s, int64_t ns, const float *b, int64_t nb, bool relu,
                                oari_qfast *f);

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define OARI_HAVE_VNNI_CODE 1
#define OARI_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))

/* acc + the four-byte dot products of a (uint8) and b (int8) in each
 * lane: vpdpbusd in place. Written as asm because with the intrinsic gcc
 * copies each of a tile's 16 accumulators in and out of another register
 * (and spills some) at every step of the k loop: 70 instructions per 16
 * vpdpbusd in qlinear_conv2d's tile; with this, 16 and their operands. */
OARI_VNNI static inline __m512i oari_dpbusd(__m512i acc, __m512i a, __m512i b) {
    __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
    return acc;
}

/* act(f32(v) * s + b) on 16 lanes, each step rounded as the unfused ops
 * round it (the _round_ forms: never contracted into one FMA); relu as
 * max(0, f), which keeps -0 and NaN as relu's f < 0 ? 0 : f does. */
OARI_VNNI static inline __m512 oari_qact_v(__m512i v, __m512 s, const __m512 *b, bool relu) {
    __m512 f = _mm512_mul_round_ps(_mm512_cvtepi32_ps(v), s, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    if (b) f = _mm512_add_round_ps(f, *b, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    if (relu) f = _mm512_max_ps(_mm512_setzero_ps(), f);
    return f;
}

/* oari_qout's constants as vectors, made once per tile (a byte store may
 * alias the struct, so the compiler would reload its fields at every
 * store). */
typedef struct oari_qout_v {
    bool on, div;
    __m512 inv, sq, zq, lo, hi, lim;
    __m512i lo_i;
} oari_qout_v;

OARI_VNNI static inline oari_qout_v oari_qout_vec(const oari_qout *o) {
    return (oari_qout_v){.on = o->on, .div = o->div, .inv = _mm512_set1_ps(o->inv), .sq = _mm512_set1_ps(o->sq),
                         .zq = _mm512_set1_ps(o->zq), .lo = _mm512_set1_ps(o->lo), .hi = _mm512_set1_ps(o->hi),
                         .lim = _mm512_set1_ps(9.2233720368547758e18f), .lo_i = _mm512_set1_epi32((int32_t)o->lo)};
}

/* Stores the lanes of mask at y (f32, or requantized bytes, as oari_qput:
 * t below 2^63 is clamped to [lo, hi] (max(t, lo) sends NaN to lo), the
 * others (NaN, +inf, >= 2^63) give lo). */
OARI_VNNI static inline void oari_qstore_v(const oari_qout_v *o, void *y, __mmask16 mask, __m512 f) {
    if (!o->on) {
        _mm512_mask_storeu_ps(y, mask, f);
        return;
    }
    __m512 t = o->div ? _mm512_div_ps(f, o->sq) : _mm512_mul_ps(f, o->inv);
    t = _mm512_add_ps(o->zq, _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    __mmask16 in = _mm512_cmp_ps_mask(t, o->lim, _CMP_LT_OQ);
    t = _mm512_min_ps(_mm512_max_ps(t, o->lo), o->hi);
    _mm512_mask_cvtepi32_storeu_epi8(y, mask, _mm512_mask_cvtps_epi32(o->lo_i, in, t));
}

/* oari_qfast as vectors (made once per tile), and the epilogue in its
 * short form: act folded in, the stores of mask's lanes at y. */
typedef struct oari_qfast_v {
    bool div;
    __m512 inv, sq, lower, upper;
    __m512i zq;
} oari_qfast_v;

OARI_VNNI static inline oari_qfast_v oari_qfast_vec(const oari_qout *o, const oari_qfast *f) {
    return (oari_qfast_v){.div = o->div, .inv = _mm512_set1_ps(o->inv), .sq = _mm512_set1_ps(o->sq),
                          .lower = _mm512_set1_ps(f->lower), .upper = _mm512_set1_ps(f->upper),
                          .zq = _mm512_set1_epi32(f->zq)};
}

OARI_VNNI static inline __m512i oari_qfast_int(const oari_qfast_v *q, __m512i v, __m512 s, __m512 b) {
    __m512 f = _mm512_mul_round_ps(_mm512_cvtepi32_ps(v), s, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    f = _mm512_add_round_ps(f, b, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 x = q->div ? _mm512_div_ps(f, q->sq) : _mm512_mul_ps(f, q->inv);
    x = _mm512_min_ps(_mm512_max_ps(x, q->lower), q->upper);
    return _mm512_add_epi32(_mm512_cvt_roundps_epi32(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), q->zq);
}

OARI_VNNI static inline void oari_qfast_store(const oari_qfast_v *q, void *y, __mmask16 mask, __m512i v, __m512 s,
                                              __m512 b) {
    _mm_mask_storeu_epi8(y, mask, _mm512_cvtepi32_epi8(oari_qfast_int(q, v, s, b)));
}

/* ---- AVX2 (no VNNI): the same sums from 16-bit products ---------------------- */

/* Without FMA: the epilogue's multiply and add are two roundings, as the
 * unfused ops round them, so the compiler must not contract them. */
#define OARI_QAVX2 __attribute__((target("avx2,no-fma")))

/* acc + vpmaddwd(w, b), the add written as asm so that it happens in
 * place: with the intrinsic gcc renames the 8 accumulators through copies
 * at every step and spills one. */
OARI_QAVX2 static inline __m256i oari_qmaddacc(__m256i acc, __m256i w, __m256i b) {
    __m256i t = _mm256_madd_epi16(w, b);
    __asm__("vpaddd %1, %0, %0" : "+x"(acc) : "x"(t));
    return acc;
}

/* acc[r][i] += the products of MR broadcast rows with one panel of 16
 * lanes, over kb groups of 4: panel [kb, 16, 4] bytes (int8 where sgn,
 * else uint8), row r's group p the four values bq[r][p] as int16 (a
 * uint64: the layout vpbroadcastq reads). Quarter i holds lanes 4 i .. 4 i
 * + 3; vpmaddwd sums each lane's taps in pairs, so a lane has two int32
 * halves in acc (oari_qlanes adds them). |product| <= 255 * 128, so the
 * pair sums are exact, as vpmaddubsw's saturating ones are not. */
OARI_QAVX2 __attribute__((always_inline)) static inline void oari_qmadd(const uint8_t *panel, bool sgn,
                                                                        const uint64_t *const *bq, int MR,
                                                                        int64_t kb, __m256i acc[2][4]) {
    /* (unrolled, so that the accumulators live in registers) */
    _Pragma("GCC unroll 2") for (int r = 0; r < MR; r++)
        _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) acc[r][i] = _mm256_setzero_si256();
    for (int64_t p = 0; p < kb; p++) {
        __m256i b[2];
        _Pragma("GCC unroll 2") for (int r = 0; r < MR; r++) b[r] = _mm256_set1_epi64x((long long)bq[r][p]);
        _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) {
            __m128i raw = _mm_loadu_si128((const __m128i *)(panel + p * 64 + 16 * i));
            __m256i w = sgn ? _mm256_cvtepi8_epi16(raw) : _mm256_cvtepu8_epi16(raw);
            _Pragma("GCC unroll 2") for (int r = 0; r < MR; r++)
                acc[r][i] = oari_qmaddacc(acc[r][i], w, b[r]);
        }
    }
}

/* A row's 16 lanes from its four quarters: lanes 0-7 in v[0], 8-15 in v[1]
 * (hadd pairs the halves within 128-bit lanes; the permute restores the
 * order). */
OARI_QAVX2 static inline void oari_qlanes(const __m256i a[4], __m256i v[2]) {
    v[0] = _mm256_permute4x64_epi64(_mm256_hadd_epi32(a[0], a[1]), 0xd8);
    v[1] = _mm256_permute4x64_epi64(_mm256_hadd_epi32(a[2], a[3]), 0xd8);
}

/* Four bytes a group as int16 in a uint64 (zero past k), each byte ^ flip:
 * one row of k bytes into kb groups. */
static inline void oari_qquads(const uint8_t *x, int64_t k, uint8_t flip, bool sgn, uint64_t *out) {
    for (int64_t p = 0; 4 * p < k; p++) {
        uint64_t q = 0;
        for (int t = 0; t < 4 && 4 * p + t < k; t++) {
            uint8_t v = x[4 * p + t] ^ flip;
            q |= (uint64_t)(uint16_t)(sgn ? (int16_t)(int8_t)v : (int16_t)v) << (16 * t);
        }
        out[p] = q;
    }
}

/* The epilogue on 8 lanes (int32 sums v, corrected): act(f32(v) * s + b)
 * (b NULL: none; relu as max(0, f), keeping -0 and NaN as relu does), then
 * f32, or requantized as oari_qput, the first n lanes stored at y + at
 * (elements of y's dtype). */
OARI_QAVX2 static inline void oari_qepi(const oari_qout *o, __m256i v, __m256 s, const __m256 *b, bool relu,
                                        void *y, int64_t at, int n) {
    __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(v), s);
    if (b) f = _mm256_add_ps(f, *b);
    if (relu) f = _mm256_max_ps(_mm256_setzero_ps(), f);
    const __m256i first = _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    if (!o->on) {
        if (n == 8) _mm256_storeu_ps((float *)y + at, f);
        else _mm256_maskstore_ps((float *)y + at, first, f);
        return;
    }
    __m256 t = o->div ? _mm256_div_ps(f, _mm256_set1_ps(o->sq)) : _mm256_mul_ps(f, _mm256_set1_ps(o->inv));
    t = _mm256_add_ps(_mm256_set1_ps(o->zq), _mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    const __m256 lim = _mm256_set1_ps(9.2233720368547758e18f);
    __m256 in = _mm256_and_ps(_mm256_cmp_ps(t, lim, _CMP_LT_OQ),
                              _mm256_cmp_ps(t, _mm256_sub_ps(_mm256_setzero_ps(), lim), _CMP_GT_OQ));
    t = _mm256_min_ps(_mm256_max_ps(t, _mm256_set1_ps(o->lo)), _mm256_set1_ps(o->hi)); /* (NaN to lo) */
    __m256i q = _mm256_blendv_epi8(_mm256_set1_epi32((int32_t)o->lo), _mm256_cvtps_epi32(t), _mm256_castps_si256(in));
    /* each int32's low byte, the two 128-bit halves' four joined */
    const __m256i pick = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 4, 8, 12,
                                          -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    q = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(q, pick), _mm256_setr_epi32(0, 4, 1, 1, 1, 1, 1, 1));
    uint64_t bytes = (uint64_t)_mm_cvtsi128_si64(_mm256_castsi256_si128(q));
    memcpy((uint8_t *)y + at, &bytes, (size_t)n);
}
#endif

#endif

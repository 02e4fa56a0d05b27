/* CPU kernels of the fft ops (src/ops/defs/fft.def): each transforms along
 * one dim at a time with the engine of fft_engine.h, lines of a dim spread
 * over OpenMP threads. */
#include "cpu.h"
#include "fft_engine.h"

#if OARI_FFT_X86
#include <immintrin.h>
#endif
#include <math.h>
#include <omp.h>
#include <string.h>

#ifndef __clang__ /* clang has no such pragma */
#pragma GCC optimize("no-trapping-math", "no-math-errno")
#endif

/* Lines shorter than this many elements in total run on one thread. */
#define FFT_PARALLEL_GRAIN 32768

typedef struct {
    int ndim;
    int64_t shape[OAR_MAX_DIMS];
    int64_t strides[OAR_MAX_DIMS];
    char *data;
} geom;

static geom geom_of(const oar_ktensor *k) {
    geom g = {.ndim = k->ndim, .data = k->data};
    memcpy(g.shape, k->shape, sizeof g.shape);
    memcpy(g.strides, k->strides, sizeof g.strides);
    return g;
}

/* Element offset of line l (row-major over every dim but d). */
static int64_t line_offset(const geom *g, int d, int64_t l) {
    int64_t off = 0;
    for (int i = g->ndim - 1; i >= 0; i--) {
        if (i == d) continue;
        off += (l % g->shape[i]) * g->strides[i];
        l /= g->shape[i];
    }
    return off;
}

static double norm_scale(int mode, double n) {
    return mode == 1 ? 1.0 / sqrt(n) : mode == 2 ? 1.0 / n : 1.0;
}

/* How a line is read into the transform and written out of it. */
typedef enum {
    L_C2C,  /* complex line of n -> n */
    L_R2C,  /* real line of n -> first n/2+1 outputs */
    L_C2R,  /* first n/2+1 complex inputs, Hermitian-extended -> real n */
} line_kind;

typedef struct {
    const oari_fft_plan *plan;   /* complex plan of n, or a real plan (even n, R2C/C2R); made by run_dim */
    bool dbl, real, inverse;
    line_kind kind;
    int64_t n;       /* transform length */
    int64_t n_in;    /* elements read per line */
    int64_t n_out;   /* elements written per line */
    double scale;
} line_job;

/* Runs one line: src (stride ss, elements of the source dtype) -> dst
 * (stride ds). buf: 4n reals + the plan's work.
 * Real plans (even n) pack x as z_j = x_2j + i x_2j+1 and transform n/2:
 * forward, X_k = E_k + w^k O_k with E_k = (Z_k + conj Z_(h-k)) / 2 and
 * O_k = (Z_k - conj Z_(h-k)) / 2i; inverse, Z_k = (X_k + conj X_(h-k)) +
 * i w^-k (X_k - conj X_(h-k)) and x_2j + i x_2j+1 = z_j (imaginary parts of
 * X_0 and X_h are ignored, as the full Hermitian transform does). */
#define LINE_FN(SFX, T, EXEC)                                                                  \
    static void line_##SFX(const line_job *j, const char *src, int64_t ss, char *dst,          \
                           int64_t ds, T *buf) {                                               \
        const int64_t n = j->n;                                                                \
        T *a = buf, *b = buf + 2 * n, *work = buf + 4 * n;                                     \
        const T s = (T)j->scale;                                                               \
        if (j->real && j->kind == L_R2C) {                                                     \
            const int64_t h = n / 2;                                                           \
            const T *r = (const T *)src, *w = (const T *)oari_fft_plan_real_twiddles(j->plan); \
            if (ss == 1) memcpy(a, r, (size_t)n * sizeof(T));                                  \
            else for (int64_t i = 0; i < n; i++) a[i] = r[i * ss];                             \
            EXEC(oari_fft_plan_half(j->plan), a, 1, b, work);                                  \
            T *o = (T *)dst;                                                                   \
            for (int64_t k = 0; k <= h; k++) {                                                 \
                const int64_t k1 = k == h ? 0 : k, k2 = k == 0 ? 0 : h - k;                    \
                T zr = b[2 * k1], zi = b[2 * k1 + 1], cr = b[2 * k2], ci = -b[2 * k2 + 1];     \
                T er = (zr + cr) * (T)0.5, ei = (zi + ci) * (T)0.5;                            \
                T orr = (zi - ci) * (T)0.5, oi = -(zr - cr) * (T)0.5;                          \
                T wr = k == h ? (T)-1 : w[2 * k], wi = k == h ? (T)0 : w[2 * k + 1];           \
                o[2 * k * ds] = (er + wr * orr - wi * oi) * s;                                 \
                o[2 * k * ds + 1] = (ei + wr * oi + wi * orr) * s;                             \
            }                                                                                  \
            return;                                                                            \
        }                                                                                      \
        if (j->real && j->kind == L_C2R) {                                                     \
            const int64_t h = n / 2;                                                           \
            const T *c = (const T *)src, *w = (const T *)oari_fft_plan_real_twiddles(j->plan); \
            for (int64_t k = 0; k < h; k++) {                                                  \
                T xr = c[2 * k * ss], xi = k ? c[2 * k * ss + 1] : (T)0;                       \
                T mr = c[2 * (h - k) * ss], mi = k ? -c[2 * (h - k) * ss + 1] : (T)0;          \
                T ar = xr + mr, ai = xi + mi, dr = xr - mr, di = xi - mi;                      \
                T br = dr * w[2 * k] - di * w[2 * k + 1], bi = dr * w[2 * k + 1] + di * w[2 * k]; \
                a[2 * k] = ar - bi;                                                            \
                a[2 * k + 1] = ai + br;                                                        \
            }                                                                                  \
            EXEC(oari_fft_plan_half(j->plan), a, 1, b, work);                                  \
            T *o = (T *)dst;                                                                   \
            if (ds == 1) for (int64_t i = 0; i < n; i++) o[i] = b[i] * s;                      \
            else for (int64_t i = 0; i < n; i++) o[i * ds] = b[i] * s;                         \
            return;                                                                            \
        }                                                                                      \
        const T *in = (const T *)src;                                                          \
        int64_t in_stride = ss;                                                                \
        if (j->kind == L_R2C) {                                                                \
            const T *r = (const T *)src;                                                       \
            for (int64_t i = 0; i < n; i++) a[2 * i] = r[i * ss], a[2 * i + 1] = 0;            \
            in = a, in_stride = 1;                                                             \
        } else if (j->kind == L_C2R) {                                                         \
            const T *c = (const T *)src;                                                       \
            const int64_t h = j->n_in;                                                         \
            for (int64_t i = 0; i < h; i++)                                                    \
                a[2 * i] = c[2 * i * ss], a[2 * i + 1] = c[2 * i * ss + 1];                    \
            for (int64_t i = h; i < n; i++)                                                    \
                a[2 * i] = a[2 * (n - i)], a[2 * i + 1] = -a[2 * (n - i) + 1];                 \
            in = a, in_stride = 1;                                                             \
        } else if (ds == 1 && s == (T)1 && src != dst) {                                       \
            EXEC(j->plan, in, in_stride, dst, work); /* straight into the output */            \
            return;                                                                            \
        }                                                                                      \
        EXEC(j->plan, in, in_stride, b, work);                                                 \
        T *o = (T *)dst;                                                                       \
        if (j->kind == L_C2R) {                                                                \
            for (int64_t i = 0; i < n; i++) o[i * ds] = b[2 * i] * s;                          \
        } else if (ds == 1) {                                                                  \
            for (int64_t i = 0; i < 2 * j->n_out; i++) o[i] = b[i] * s;                        \
        } else {                                                                               \
            for (int64_t i = 0; i < j->n_out; i++)                                             \
                o[2 * i * ds] = b[2 * i] * s, o[2 * i * ds + 1] = b[2 * i + 1] * s;            \
        }                                                                                      \
    }
LINE_FN(f32, float, oari_fft_exec_f32)
LINE_FN(f64, double, oari_fft_exec_f64)

/* V lines at once through the vector engine (one line per lane); same
 * job kinds as LINE_FN except odd-length real transforms (scalar only).
 * src[l], dst[l]: line l's first element. buf: V (4n + 2 work) reals.
 * GATHER(A, src, nel) / SCATTER(dst, B, nel, scale) move nel complex
 * elements between V contiguous lines and lane layout (A[k].r[l] is line
 * l's element k) and return false where they do not apply (then the lane
 * loops run). GATHER_ADJ / SCATTER_ADJ do the same when the V lines are
 * adjacent (line l starts l elements after line 0, elements ss apart): the
 * transforms of a dim other than the last. */
typedef float v4f_t __attribute__((vector_size(16)));
typedef double v2d_t __attribute__((vector_size(16)));
static inline bool no_gather(void *A, const char *const *src, int64_t nel) {
    (void)A, (void)src, (void)nel;
    return false;
}
static inline bool no_scatter(char *const *dst, const void *B, int64_t nel, double s) {
    (void)dst, (void)B, (void)nel, (void)s;
    return false;
}
static inline bool no_gather_adj(void *A, const char *src, int64_t ss, int64_t nel) {
    (void)A, (void)src, (void)ss, (void)nel;
    return false;
}
static inline bool no_scatter_adj(char *dst, int64_t ds, const void *B, int64_t nel, double s) {
    (void)dst, (void)ds, (void)B, (void)nel, (void)s;
    return false;
}
#define GROUP_FN(SFX, T, VT, V, EXEC, GATHER, SCATTER, GATHER_ADJ, SCATTER_ADJ)                \
    typedef struct { VT r, i; } gx_##SFX;                                                      \
    static void group_##SFX(const line_job *j, const char *const *src, int64_t ss,             \
                            char *const *dst, int64_t ds, bool sadj, bool dadj, T *buf) {      \
        const int64_t n = j->n;                                                                \
        gx_##SFX *A = (gx_##SFX *)buf, *B = A + n, *work = B + n;                              \
        const T s = (T)j->scale;                                                               \
        if (j->kind == L_C2C) {                                                                \
            if (!(sadj && GATHER_ADJ(A, src[0], ss, n)) && !(ss == 1 && GATHER(A, src, n)))      \
                for (int64_t k = 0; k < n; k++)                                                \
                    for (int l = 0; l < V; l++) {                                              \
                        const T *c = (const T *)src[l] + 2 * k * ss;                           \
                        A[k].r[l] = c[0];                                                      \
                        A[k].i[l] = c[1];                                                      \
                    }                                                                          \
            EXEC(j->plan, A, 1, B, work);                                                      \
            if (!(dadj && SCATTER_ADJ(dst[0], ds, B, n, s)) && !(ds == 1 && SCATTER(dst, B, n, s))) \
                for (int64_t k = 0; k < n; k++)                                                \
                    for (int l = 0; l < V; l++) {                                              \
                        T *o = (T *)dst[l] + 2 * k * ds;                                       \
                        o[0] = B[k].r[l] * s;                                                  \
                        o[1] = B[k].i[l] * s;                                                  \
                    }                                                                          \
            return;                                                                            \
        }                                                                                      \
        const int64_t h = n / 2;                                                               \
        const T *w = (const T *)oari_fft_plan_real_twiddles(j->plan);                          \
        if (j->kind == L_R2C) {                                                                \
            /* real pairs (x_2k, x_2k+1) read as complex elements */                           \
            if (!(ss == 1 && GATHER(A, src, h)))                                               \
                for (int64_t k = 0; k < h; k++)                                                \
                    for (int l = 0; l < V; l++) {                                              \
                        const T *r = (const T *)src[l];                                        \
                        A[k].r[l] = r[2 * k * ss];                                             \
                        A[k].i[l] = r[(2 * k + 1) * ss];                                       \
                    }                                                                          \
            EXEC(oari_fft_plan_half(j->plan), A, 1, B, work);                                  \
            for (int64_t k = 0; k <= h; k++) { /* X_k into A (n >= h + 1 entries) */           \
                const int64_t k1 = k == h ? 0 : k, k2 = k == 0 ? 0 : h - k;                    \
                VT zr = B[k1].r, zi = B[k1].i, cr = B[k2].r, ci = -B[k2].i;                    \
                VT er = (zr + cr) * (T)0.5, ei = (zi + ci) * (T)0.5;                           \
                VT orr = (zi - ci) * (T)0.5, oi = (cr - zr) * (T)0.5;                          \
                T wr = k == h ? (T)-1 : w[2 * k], wi = k == h ? (T)0 : w[2 * k + 1];           \
                A[k].r = er + orr * wr - oi * wi;                                              \
                A[k].i = ei + oi * wr + orr * wi;                                              \
            }                                                                                  \
            if (!(ds == 1 && SCATTER(dst, A, h + 1, s)))                                       \
                for (int64_t k = 0; k <= h; k++)                                               \
                    for (int l = 0; l < V; l++) {                                              \
                        T *o = (T *)dst[l] + 2 * k * ds;                                       \
                        o[0] = A[k].r[l] * s;                                                  \
                        o[1] = A[k].i[l] * s;                                                  \
                    }                                                                          \
            return;                                                                            \
        }                                                                                      \
        /* L_C2R: X_0..X_h in (A holds X_k, B holds conj X_(h-k)) */                           \
        for (int64_t k = 0; k < h; k++)                                                        \
            for (int l = 0; l < V; l++) {                                                      \
                const T *c = (const T *)src[l];                                                \
                A[k].r[l] = c[2 * k * ss];                                                     \
                A[k].i[l] = k ? c[2 * k * ss + 1] : (T)0;                                      \
                B[k].r[l] = c[2 * (h - k) * ss];                                               \
                B[k].i[l] = k ? -c[2 * (h - k) * ss + 1] : (T)0;                               \
            }                                                                                  \
        for (int64_t k = 0; k < h; k++) {                                                      \
            VT ar = A[k].r + B[k].r, ai = A[k].i + B[k].i;                                     \
            VT dr = A[k].r - B[k].r, di = A[k].i - B[k].i;                                     \
            VT br = dr * w[2 * k] - di * w[2 * k + 1], bi = dr * w[2 * k + 1] + di * w[2 * k]; \
            A[k].r = ar - bi;                                                                  \
            A[k].i = ai + br;                                                                  \
        }                                                                                      \
        EXEC(oari_fft_plan_half(j->plan), A, 1, B, work);                                      \
        /* z_k = x_2k + i x_2k+1: complex elements of the real output */                       \
        if (!(ds == 1 && SCATTER(dst, B, h, s)))                                               \
            for (int64_t k = 0; k < h; k++)                                                    \
                for (int l = 0; l < V; l++) {                                                  \
                    T *o = (T *)dst[l];                                                        \
                    o[2 * k * ds] = B[k].r[l] * s;                                             \
                    o[(2 * k + 1) * ds] = B[k].i[l] * s;                                       \
                }                                                                              \
    }
GROUP_FN(f32, float, v4f_t, 4, oari_fft_exec_v4f, no_gather, no_scatter, no_gather_adj, no_scatter_adj)
GROUP_FN(f64, double, v2d_t, 2, oari_fft_exec_v2d, no_gather, no_scatter, no_gather_adj, no_scatter_adj)
#if OARI_FFT_X86
OARI_FFT_AVX2_BEGIN
typedef float v8f_t __attribute__((vector_size(32)));
typedef double v4d_t __attribute__((vector_size(32)));
typedef int32_t v8i_t __attribute__((vector_size(32)));

/* 4x4 transposes in each 128-bit half: o[j] holds column j of the rows
 * (a, b, c, d), low half from their low halves, high from their high. */
static inline void tr4x2(__m256 a, __m256 b, __m256 c, __m256 d, __m256 *o) {
    __m256 u0 = _mm256_unpacklo_ps(a, b), u1 = _mm256_unpackhi_ps(a, b);
    __m256 u2 = _mm256_unpacklo_ps(c, d), u3 = _mm256_unpackhi_ps(c, d);
    o[0] = _mm256_castpd_ps(_mm256_unpacklo_pd(_mm256_castps_pd(u0), _mm256_castps_pd(u2)));
    o[1] = _mm256_castpd_ps(_mm256_unpackhi_pd(_mm256_castps_pd(u0), _mm256_castps_pd(u2)));
    o[2] = _mm256_castpd_ps(_mm256_unpacklo_pd(_mm256_castps_pd(u1), _mm256_castps_pd(u3)));
    o[3] = _mm256_castpd_ps(_mm256_unpackhi_pd(_mm256_castps_pd(u1), _mm256_castps_pd(u3)));
}

/* 16 bytes at lo in the low half, 16 at hi in the high half. */
static inline __m256 load_halves(const float *lo, const float *hi) {
    return _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(lo)), _mm_loadu_ps(hi), 1);
}

/* 8 contiguous float lines of (re, im) pairs <-> lane layout: four complex
 * elements of eight lines are one 8x8 transpose, done as line l's and
 * line l + 4's halves loaded into one register, then 4x4 transposes within
 * the halves. (The transpose with a cross-half last step, vperm2f128, cost
 * 2.4x this on Zen 1, where that instruction is 8 micro-ops.) */
static bool gather8(void *A_, const char *const *src, int64_t nel) {
    float *A = A_;
    const float *s[8];
    for (int l = 0; l < 8; l++) s[l] = (const float *)src[l];
    int64_t k = 0;
    for (; k + 4 <= nel; k += 4) {
        const int64_t o = 2 * k;
        __m256 *out = (__m256 *)(A + 16 * k);
        tr4x2(load_halves(s[0] + o, s[4] + o), load_halves(s[1] + o, s[5] + o), load_halves(s[2] + o, s[6] + o),
              load_halves(s[3] + o, s[7] + o), out);
        tr4x2(load_halves(s[0] + o + 4, s[4] + o + 4), load_halves(s[1] + o + 4, s[5] + o + 4),
              load_halves(s[2] + o + 4, s[6] + o + 4), load_halves(s[3] + o + 4, s[7] + o + 4), out + 4);
    }
    for (; k < nel; k++)
        for (int l = 0; l < 8; l++) {
            A[16 * k + l] = s[l][2 * k];
            A[16 * k + 8 + l] = s[l][2 * k + 1];
        }
    return true;
}

static bool scatter8(char *const *dst, const void *B_, int64_t nel, double s_) {
    const float *B = B_;
    const float s = (float)s_;
    const __m256 sv = _mm256_set1_ps(s);
    int64_t k = 0;
    for (; k + 4 <= nel; k += 4) {
        const __m256 *in = (const __m256 *)(B + 16 * k);
        __m256 t[4], u[4];
        tr4x2(in[0] * sv, in[1] * sv, in[2] * sv, in[3] * sv, t);
        tr4x2(in[4] * sv, in[5] * sv, in[6] * sv, in[7] * sv, u);
        for (int l = 0; l < 4; l++) {
            float *lo = (float *)dst[l] + 2 * k, *hi = (float *)dst[l + 4] + 2 * k;
            _mm_storeu_ps(lo, _mm256_castps256_ps128(t[l]));
            _mm_storeu_ps(lo + 4, _mm256_castps256_ps128(u[l]));
            _mm_storeu_ps(hi, _mm256_extractf128_ps(t[l], 1));
            _mm_storeu_ps(hi + 4, _mm256_extractf128_ps(u[l], 1));
        }
    }
    for (; k < nel; k++)
        for (int l = 0; l < 8; l++) {
            ((float *)dst[l])[2 * k] = B[16 * k + l] * s;
            ((float *)dst[l])[2 * k + 1] = B[16 * k + 8 + l] * s;
        }
    return true;
}

/* adjacent lines: element k of the 8 (4) lines is 8 (4) consecutive
 * complex numbers; split into real and imaginary vectors and back */
__attribute__((noinline)) static bool gather_adj8(void *A_, const char *src, int64_t ss, int64_t nel) {
    v8f_t *A = A_;
    for (int64_t k = 0; k < nel; k++) {
        v8f_t v0, v1;
        if (k + 8 < nel) { /* elements ss apart: too far for the hardware prefetcher */
            __builtin_prefetch((const float *)src + 2 * (k + 8) * ss);
            __builtin_prefetch((const float *)src + 2 * (k + 8) * ss + 15);
        }
        memcpy(&v0, (const float *)src + 2 * k * ss, sizeof v0);
        memcpy(&v1, (const float *)src + 2 * k * ss + 8, sizeof v1);
        A[2 * k] = OARI_SHUFFLE2(v0, v1, v8i_t, 0, 2, 4, 6, 8, 10, 12, 14);
        A[2 * k + 1] = OARI_SHUFFLE2(v0, v1, v8i_t, 1, 3, 5, 7, 9, 11, 13, 15);
    }
    return true;
}
__attribute__((noinline)) static bool scatter_adj8(char *dst, int64_t ds, const void *B_, int64_t nel, double s_) {
    const v8f_t *B = B_;
    const float s = (float)s_;
    for (int64_t k = 0; k < nel; k++) {
        v8f_t r = B[2 * k] * s, i = B[2 * k + 1] * s;
        v8f_t v0 = OARI_SHUFFLE2(r, i, v8i_t, 0, 8, 1, 9, 2, 10, 3, 11);
        v8f_t v1 = OARI_SHUFFLE2(r, i, v8i_t, 4, 12, 5, 13, 6, 14, 7, 15);
        memcpy((float *)dst + 2 * k * ds, &v0, sizeof v0);
        memcpy((float *)dst + 2 * k * ds + 8, &v1, sizeof v1);
    }
    return true;
}
typedef int64_t v4l_t __attribute__((vector_size(32)));
__attribute__((noinline)) static bool gather_adj4d(void *A_, const char *src, int64_t ss, int64_t nel) {
    v4d_t *A = A_;
    for (int64_t k = 0; k < nel; k++) {
        v4d_t v0, v1;
        if (k + 8 < nel) { /* as gather_adj8 */
            __builtin_prefetch((const double *)src + 2 * (k + 8) * ss);
            __builtin_prefetch((const double *)src + 2 * (k + 8) * ss + 7);
        }
        memcpy(&v0, (const double *)src + 2 * k * ss, sizeof v0);
        memcpy(&v1, (const double *)src + 2 * k * ss + 4, sizeof v1);
        A[2 * k] = OARI_SHUFFLE2(v0, v1, v4l_t, 0, 2, 4, 6);
        A[2 * k + 1] = OARI_SHUFFLE2(v0, v1, v4l_t, 1, 3, 5, 7);
    }
    return true;
}
__attribute__((noinline)) static bool scatter_adj4d(char *dst, int64_t ds, const void *B_, int64_t nel, double s) {
    const v4d_t *B = B_;
    for (int64_t k = 0; k < nel; k++) {
        v4d_t r = B[2 * k] * s, i = B[2 * k + 1] * s;
        v4d_t v0 = OARI_SHUFFLE2(r, i, v4l_t, 0, 4, 1, 5);
        v4d_t v1 = OARI_SHUFFLE2(r, i, v4l_t, 2, 6, 3, 7);
        memcpy((double *)dst + 2 * k * ds, &v0, sizeof v0);
        memcpy((double *)dst + 2 * k * ds + 4, &v1, sizeof v1);
    }
    return true;
}

GROUP_FN(f32x8, float, v8f_t, 8, oari_fft_exec_v8f, gather8, scatter8, gather_adj8, scatter_adj8)
GROUP_FN(f64x4, double, v4d_t, 4, oari_fft_exec_v4d, no_gather, no_scatter, gather_adj4d,
         scatter_adj4d)
OARI_FFT_AVX2_END
#endif

/* Plans j on the in-tree engine and sets *per to the bytes of buffer one
 * thread needs to run its lines. */
static int job_prepare(line_job *j, size_t *per) {
    if (!j->plan) {
        j->plan = j->real ? oari_fft_plan_get_real(j->n, j->dbl, j->inverse)
                          : oari_fft_plan_get(j->n, j->dbl, j->inverse);
        if (!j->plan) return oari_fail_status();
    }
    const int V = (j->dbl ? 2 : 4) * 2; /* the widest lanes */
    const size_t es = j->dbl ? sizeof(double) : sizeof(float);
    *per = (((size_t)V * (size_t)(4 * j->n + oari_fft_plan_work(j->plan) * 2) * es) + 63) & ~(size_t)63;
    return 0;
}

/* Transforms every line of src along dim d into dst (same shape except
 * along d), spread over nt threads (1: the caller's thread), each with per
 * bytes of base (64-byte aligned). src may equal dst (each line is read
 * before it is written). */
static void run_lines(const line_job *j, const geom *src, const geom *dst, int d, char *base, size_t per,
                      int nt) {
    int64_t lines = 1;
    for (int i = 0; i < dst->ndim; i++)
        if (i != d) lines *= dst->shape[i];
#if OARI_FFT_X86
    const bool wide = oari_fft_have_avx2();
#else
    const bool wide = false;
#endif
    const int V = (j->dbl ? 2 : 4) * (wide ? 2 : 1);
    /* vector groups: complex lines, and real lines of even length */
    const bool vec = lines >= V && (j->kind == L_C2C || j->real);
    const int64_t groups = vec ? lines / V : 0, rest = lines - groups * V;
    const size_t es = j->dbl ? sizeof(double) : sizeof(float);
    const size_t sel = j->kind == L_C2C || j->kind == L_C2R ? 2 * es : es; /* src element bytes */
    const size_t del = j->kind == L_C2R ? es : 2 * es;
    const int64_t ss = src->strides[d], ds = dst->strides[d];
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        const int t = omp_get_thread_num();
        char *buf = base + (size_t)t * per;
#pragma omp for schedule(static)
        for (int64_t g = 0; g < groups + rest; g++) {
            if (g < groups) {
                const char *sp[8];
                char *dp[8];
                bool sadj = true, dadj = true;
                for (int l = 0; l < V; l++) {
                    sp[l] = src->data + line_offset(src, d, g * V + l) * (int64_t)sel;
                    dp[l] = dst->data + line_offset(dst, d, g * V + l) * (int64_t)del;
                    sadj = sadj && sp[l] == sp[0] + l * (int64_t)sel;
                    dadj = dadj && dp[l] == dp[0] + l * (int64_t)del;
                }
#if OARI_FFT_X86
                if (wide) {
                    if (j->dbl) group_f64x4(j, sp, ss, dp, ds, sadj, dadj, (double *)buf);
                    else group_f32x8(j, sp, ss, dp, ds, sadj, dadj, (float *)buf);
                    continue;
                }
#endif
                if (j->dbl) group_f64(j, sp, ss, dp, ds, sadj, dadj, (double *)buf);
                else group_f32(j, sp, ss, dp, ds, sadj, dadj, (float *)buf);
                continue;
            }
            const int64_t l = groups * V + (g - groups);
            const char *sl = src->data + line_offset(src, d, l) * (int64_t)sel;
            char *o = dst->data + line_offset(dst, d, l) * (int64_t)del;
            if (j->dbl) line_f64(j, sl, ss, o, ds, (double *)buf);
            else line_f32(j, sl, ss, o, ds, (float *)buf);
        }
    }
}

static int run_dim(line_job *j, const geom *src, const geom *dst, int d);

/* One dim's transform of a kernel: src -> dst along d. */
typedef struct {
    line_job j;
    const geom *src, *dst;
    int d;
} pass;

/* Byte size of an element of g in pass p (the source if src). */
static int64_t elem_bytes(const pass *p, bool src) {
    const int64_t es = p->j.dbl ? 8 : 4;
    if (src) return p->j.kind == L_R2C ? es : 2 * es;
    return p->j.kind == L_C2R ? es : 2 * es;
}

/* Runs the passes in order. Where the dims no pass transforms (the batch)
 * hold at least two slabs per thread, and there are two passes or more,
 * each thread takes whole slabs and runs every pass on one slab before the
 * next: the later passes find the slab in cache instead of making another
 * trip through memory over the whole tensor. Otherwise each pass runs over
 * the whole tensor, its lines spread over the threads. */
static int run_passes(pass *p, int np) {
    const geom *g0 = p[np - 1].dst;
    bool tdim[OAR_MAX_DIMS] = {false};
    for (int i = 0; i < np; i++) tdim[p[i].d] = true;
    int64_t slabs = 1, total = 1;
    for (int i = 0; i < g0->ndim; i++) {
        if (!tdim[i]) slabs *= g0->shape[i];
        total *= g0->shape[i];
    }
    if (total == 0) return 0;
    const int maxt = omp_get_max_threads();
    bool blocked = np >= 2 && slabs >= 2 * maxt && total >= FFT_PARALLEL_GRAIN;
#ifdef OAR_FFTW
    blocked = false; /* FFTW plans whole dims */
#endif
    if (!blocked) {
        for (int i = 0; i < np; i++) {
            int st = run_dim(&p[i].j, p[i].src, p[i].dst, p[i].d);
            if (st) return st;
        }
        return 0;
    }
    size_t per = 0;
    for (int i = 0; i < np; i++) {
        size_t pi;
        int st = job_prepare(&p[i].j, &pi);
        if (st) return st;
        if (pi > per) per = pi;
    }
    const size_t bytes = (size_t)maxt * per + 64;
    void *bufs = oari_malloc(bytes);
    if (!bufs) return oari_fail_status();
    char *base = (char *)(((uintptr_t)bufs + 63) & ~(uintptr_t)63);
#pragma omp parallel for schedule(static) num_threads(maxt)
    for (int64_t b = 0; b < slabs; b++) {
        char *buf = base + (size_t)omp_get_thread_num() * per;
        for (int i = 0; i < np; i++) {
            /* the slab: batch dims fixed at b's index, size 1 */
            geom sub[2] = {*p[i].src, *p[i].dst};
            for (int side = 0; side < 2; side++) {
                int64_t r = b, off = 0;
                for (int q = g0->ndim - 1; q >= 0; q--) {
                    if (tdim[q]) continue;
                    off += (r % g0->shape[q]) * sub[side].strides[q];
                    r /= g0->shape[q];
                    sub[side].shape[q] = 1;
                }
                sub[side].data += off * elem_bytes(&p[i], side == 0);
            }
            run_lines(&p[i].j, &sub[0], &sub[1], p[i].d, buf, per, 1);
        }
    }
    oari_free(bufs, bytes);
    return 0;
}

/* Transforms every line of src along dim d into dst over the whole
 * tensors, lines spread over the threads. */
static int run_dim(line_job *j, const geom *src, const geom *dst, int d) {
    int64_t lines = 1;
    for (int i = 0; i < dst->ndim; i++)
        if (i != d) lines *= dst->shape[i];
    if (lines == 0) return 0;
#ifdef OAR_FFTW
    { /* the FFTW build: one FFTW plan for the whole dim where FFTW has one */
        const int nt = lines > 1 && lines * j->n >= FFT_PARALLEL_GRAIN ? omp_get_max_threads() : 1;
        const oari_fft_kind kind = j->kind == L_C2C ? OARI_FFT_C2C : j->kind == L_R2C ? OARI_FFT_R2C : OARI_FFT_C2R;
        int st = oari_fft_fftw_dim(kind, j->n, j->dbl, j->inverse, j->scale, nt, dst->ndim, dst->shape, d,
                                   src->data, src->strides, dst->data, dst->strides);
        if (st <= 0) return st; /* done, or failed */
    }
#endif
    size_t per = 0;
    int st = job_prepare(j, &per);
    if (st) return st;
    const int nt = lines > 1 && lines * j->n >= FFT_PARALLEL_GRAIN ? omp_get_max_threads() : 1;
    const size_t bytes = (size_t)nt * per + 64;
    void *bufs = oari_malloc(bytes);
    if (!bufs) return oari_fail_status();
    run_lines(j, src, dst, d, (char *)(((uintptr_t)bufs + 63) & ~(uintptr_t)63), per, nt);
    oari_free(bufs, bytes);
    return 0;
}

static void job_init(line_job *j, line_kind kind, int64_t n, int64_t n_in, int64_t n_out, bool dbl,
                     bool inverse, double scale) {
    *j = (line_job){.kind = kind, .n = n, .n_in = n_in, .n_out = n_out, .dbl = dbl, .inverse = inverse,
                    .scale = scale};
    /* real transforms of even length run at half length */
    j->real = kind != L_C2C && n % 2 == 0;
}

/* c2c over the dims, in[0] -> out[0]; the first dim reads the input, the
 * rest run in place on the output. */
static int k_c2c(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    const int mode = (int)c->iattr[0];
    const bool inverse = !c->iattr[1], dbl = c->out[0].dtype == OAR_C128;
    const int k = (int)c->iattr[2];
    geom in = geom_of(&c->in[0]), out = geom_of(&c->out[0]);
    double N = 1;
    for (int i = 0; i < k; i++) N *= (double)out.shape[c->iattr[3 + i]];
    pass p[OAR_MAX_DIMS];
    for (int i = 0; i < k; i++) {
        const int d = (int)c->iattr[3 + i];
        job_init(&p[i].j, L_C2C, out.shape[d], out.shape[d], out.shape[d], dbl, inverse,
                 i == k - 1 ? norm_scale(mode, N) : 1.0);
        p[i].src = i == 0 ? &in : &out;
        p[i].dst = &out;
        p[i].d = d;
    }
    return run_passes(p, k);
}

/* r2c: the half dim (listed last) first, real -> complex; then c2c forward
 * in place on the other dims. */
static int k_r2c(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    const int mode = (int)c->iattr[0];
    const bool dbl = c->out[0].dtype == OAR_C128;
    const int k = (int)c->iattr[2];
    geom in = geom_of(&c->in[0]), out = geom_of(&c->out[0]);
    double N = 1;
    for (int i = 0; i < k; i++) N *= (double)in.shape[c->iattr[3 + i]];
    const int h = (int)c->iattr[3 + k - 1];
    pass p[OAR_MAX_DIMS];
    job_init(&p[0].j, L_R2C, in.shape[h], in.shape[h], out.shape[h], dbl, false,
             k == 1 ? norm_scale(mode, N) : 1.0);
    p[0].src = &in;
    p[0].dst = &out;
    p[0].d = h;
    for (int i = 0; i < k - 1; i++) {
        const int d = (int)c->iattr[3 + i];
        job_init(&p[i + 1].j, L_C2C, out.shape[d], out.shape[d], out.shape[d], dbl, false,
                 i == k - 2 ? norm_scale(mode, N) : 1.0);
        p[i + 1].src = p[i + 1].dst = &out;
        p[i + 1].d = d;
    }
    return run_passes(p, k);
}

/* c2r: c2c inverse on the other dims into a scratch copy, then the half
 * dim, Hermitian-extended, complex -> real. */
static int k_c2r(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    const int mode = (int)c->iattr[0];
    const bool dbl = c->out[0].dtype == OAR_F64;
    const int k = (int)c->iattr[2];
    geom in = geom_of(&c->in[0]), out = geom_of(&c->out[0]);
    double N = 1;
    for (int i = 0; i < k; i++) N *= (double)out.shape[c->iattr[3 + i]];
    const int h = (int)c->iattr[3 + k - 1];
    geom tmp = in;
    void *scratch = NULL;
    size_t sbytes = 0;
    pass p[OAR_MAX_DIMS];
    if (k > 1) {
        int64_t numel = 1;
        for (int i = 0; i < in.ndim; i++) numel *= in.shape[i];
        sbytes = (size_t)numel * 2 * (dbl ? sizeof(double) : sizeof(float));
        if (!(scratch = oari_malloc(sbytes ? sbytes : 1))) return oari_fail_status();
        tmp.data = scratch;
        oari_contiguous_strides(tmp.ndim, tmp.shape, tmp.strides);
        for (int i = 0; i < k - 1; i++) {
            const int d = (int)c->iattr[3 + i];
            job_init(&p[i].j, L_C2C, in.shape[d], in.shape[d], in.shape[d], dbl, true, 1.0);
            p[i].src = i == 0 ? &in : &tmp;
            p[i].dst = &tmp;
            p[i].d = d;
        }
    }
    job_init(&p[k - 1].j, L_C2R, out.shape[h], in.shape[h], out.shape[h], dbl, true, norm_scale(mode, N));
    p[k - 1].src = &tmp;
    p[k - 1].dst = &out;
    p[k - 1].d = h;
    int st = run_passes(p, k);
    oari_free(scratch, sbytes ? sbytes : 1);
    return st;
}

const oari_cpu_kernels oari_cpu_k_fft_c2c = {[OAR_C64] = k_c2c, [OAR_C128] = k_c2c};
const oari_cpu_kernels oari_cpu_k_fft_r2c = {[OAR_F32] = k_r2c, [OAR_F64] = k_r2c};
const oari_cpu_kernels oari_cpu_k_fft_c2r = {[OAR_C64] = k_c2r, [OAR_C128] = k_c2r};
/* view ops: dispatch makes the view */
const oari_cpu_kernels oari_cpu_k_view_as_real = {0};
const oari_cpu_kernels oari_cpu_k_view_as_complex = {0};

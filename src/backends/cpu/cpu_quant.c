/* CPU kernels of quantize, dequantize and fake_quantize (src/ops/quant.c
 * has the formulas and why). in[1] is the scale (f32 or f64), in[2] the zero
 * point (i64), one per channel along iattr[0] or one for all (-1). Their
 * values are checked here, before anything is written. */
#include "cpu.h"
#include "cpu_qlinear.h"
/* As in cpu_binary.c: kernels read no floating-point exception flags, so
 * comparisons may become vector selects; values are unchanged. */
#pragma GCC optimize("no-trapping-math", "no-math-errno")
#ifdef OAR_WITH_DNNL
#include "cpu_dnnl_int8.h"
#endif

#include <math.h>
#include <string.h>

/* x's elements in row-major order: their offsets in x and their channel. */
typedef struct {
    const oar_ktensor *x;
    int axis;
    int64_t idx[OAR_KERNEL_MAX_DIMS], off;
} walk;

static void walk_next(walk *w) {
    const oar_ktensor *x = w->x;
    for (int d = x->ndim - 1; d >= 0; d--) {
        w->off += x->strides[d];
        if (++w->idx[d] < x->shape[d]) return;
        w->off -= x->strides[d] * x->shape[d];
        w->idx[d] = 0;
    }
}

static int64_t numel(const oar_ktensor *t) {
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
    return n;
}

static double scale_at(const oar_kernel_call *c, int64_t ch) {
    const oar_ktensor *s = &c->in[1];
    int64_t k = s->ndim ? ch * s->strides[0] : 0;
    return s->dtype == OAR_F64 ? ((const double *)s->data)[k] : ((const float *)s->data)[k];
}
static int64_t zero_point_at(const oar_kernel_call *c, int64_t ch) {
    const oar_ktensor *z = &c->in[2];
    return ((const int64_t *)z->data)[z->ndim ? ch * z->strides[0] : 0];
}

/* Every scale positive and finite, every zero point in [lo, hi]. */
static int check_params(const oar_kernel_call *c, int64_t lo, int64_t hi) {
    int64_t n = numel(&c->in[1]);
    for (int64_t ch = 0; ch < n; ch++) {
        double s = scale_at(c, ch);
        int64_t z = zero_point_at(c, ch);
        if (!(s > 0) || !isfinite(s))
            return oari_error(OAR_ERR_INVALID, "%s: scale %g (channel %lld) must be positive and finite", c->op, s,
                              (long long)ch);
        if (z < lo || z > hi)
            return oari_error(OAR_ERR_INVALID, "%s: zero point %lld (channel %lld) is outside [%lld, %lld]", c->op,
                              (long long)z, (long long)ch, (long long)lo, (long long)hi);
    }
    return 0;
}

/* int64(t) as x86 converts it (cvttss2si: NaN and out of range give
 * INT64_MIN), so that NaN and +-inf quantize to the low end as in PyTorch. */
static inline int64_t to_i64_x86(double t) {
    return t >= -9.2233720368547758e18 && t < 9.2233720368547758e18 ? (int64_t)t : INT64_MIN;
}

static inline int64_t clamp64(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

/* zp + round(x * (1 / scale)) (PyTorch), or zp + round(x / scale) (ONNX,
 * div), in x's float type T (f32: a float scale). */
#define QUANT_ROUND(T, RINT, xv, s, z, div)                                                           \
    ((double)((T)(z) + RINT((div) ? (T)(xv) / (T)(s) : (T)(xv) * ((T)1 / (T)(s)))))

static bool dense(const oar_ktensor *t);

/* The fast path of quantize: f32 x dense, one scale, PyTorch's product
 * (round(x * (1 / scale)) in float, as QUANT_ROUND): the same values as
 * the general loop, NaN and |t| >= 2^63 (x86's int64 conversion: INT64_MIN)
 * giving lo. Vectorised by the clones (roundps from x86-64-v3); on
 * AVX-512 machines the path below takes over. */
OARI_SIMD_CLONES
static void quantize_f32_dense(const float *x, void *out, bool u8, int64_t n, float inv, float zf) {
    /* one loop per output type, selects only, and `omp simd`: with the type chosen
     * per element and without the pragma (-O2 will not version a loop for aliasing)
     * it ran scalar, 0.6 G elements/s; so 4.5 on one AVX-512 thread */
#define QUANTIZE_LOOP(OUT_T, LO, HI)                                                   \
    _Pragma("omp simd") for (int64_t i = 0; i < n; i++) {                              \
        float t = zf + nearbyintf(x[i] * inv);                                         \
        t = fabsf(t) < 9.2233720368547758e18f ? t : (LO); /* NaN, beyond int64: LO */  \
        t = t < (LO) ? (LO) : t;                                                       \
        t = t > (HI) ? (HI) : t;                                                       \
        ((OUT_T *)out)[i] = (OUT_T)(int32_t)t;                                         \
    }
    if (u8) QUANTIZE_LOOP(uint8_t, 0.f, 255.f)
    else QUANTIZE_LOOP(int8_t, -128.f, 127.f)
#undef QUANTIZE_LOOP
}

#ifdef OARI_HAVE_VNNI_CODE
/* The same 16 at a time on AVX-512, in the epilogue's code that qlinear's
 * tests hold to quantize's values. */
OARI_VNNI static void quantize_f32_avx512(const float *x, void *out, int64_t n, const oari_qout *q) {
    const oari_qout_v ov = oari_qout_vec(q), *o = &ov;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) oari_qstore_v(o, (uint8_t *)out + i, (__mmask16)0xffff, _mm512_loadu_ps(x + i));
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        oari_qstore_v(o, (uint8_t *)out + i, m, _mm512_maskz_loadu_ps(m, x + i));
    }
}
#endif

/* The same in blocks over the threads when large (an FFN's hidden
 * activation at batch 64: 2M elements). */
static void quantize_f32_dense_par(const float *x, void *out, bool u8, int64_t n, float inv, float zf) {
    const int64_t block = 1 << 15, blocks = (n + block - 1) / block;
#ifdef OARI_HAVE_VNNI_CODE
    const oari_qout o = {.on = true, .inv = inv, .zq = zf, .lo = u8 ? 0.f : -128.f, .hi = u8 ? 255.f : 127.f};
    const bool simd = oari_cpu_qkernel() == OARI_QK_VNNI;
#endif
    OARI_PARALLEL_FOR_IF(blocks > 1 && n > (1 << 17), for (int64_t b = 0; b < blocks; b++) {
        int64_t i0 = b * block, len = n - i0 < block ? n - i0 : block;
#ifdef OARI_HAVE_VNNI_CODE
        if (simd) {
            quantize_f32_avx512(x + i0, (uint8_t *)out + i0, len, &o);
            continue;
        }
#endif
        quantize_f32_dense(x + i0, (uint8_t *)out + i0, u8, len, inv, zf);
    });
}

#define QUANT_KERNELS(SFX, T, RINT)                                                                    \
    static int k_quantize_##SFX(void *ctx, const oar_kernel_call *c) {                                \
        (void)ctx;                                                                                     \
        const bool u8 = c->out[0].dtype == OAR_U8;                                                     \
        const int64_t lo = u8 ? 0 : -128, hi = u8 ? 255 : 127;                                         \
        if (check_params(c, lo, hi)) return oari_fail_status();                                        \
        if (sizeof(T) == 4 && c->iattr[0] < 0 && !c->iattr[2] && dense(&c->in[0])) {                  \
            quantize_f32_dense_par(c->in[0].data, c->out[0].data, u8, numel(&c->in[0]),               \
                                   1.f / (float)scale_at(c, 0), (float)zero_point_at(c, 0));           \
            return 0;                                                                                  \
        }                                                                                              \
        walk w = {.x = &c->in[0], .axis = (int)c->iattr[0]};                                           \
        const T *x = c->in[0].data;                                                                    \
        const bool div = c->iattr[2] != 0;                                                             \
        int64_t n = numel(&c->in[0]);                                                                  \
        for (int64_t i = 0; i < n; i++, walk_next(&w)) {                                               \
            int64_t ch = w.axis >= 0 ? w.idx[w.axis] : 0, z = zero_point_at(c, ch);                    \
            double t = QUANT_ROUND(T, RINT, x[w.off], scale_at(c, ch), z, div);                        \
            int64_t q = clamp64(to_i64_x86(t), lo, hi);                                                \
            if (u8) ((uint8_t *)c->out[0].data)[i] = (uint8_t)q;                                       \
            else ((int8_t *)c->out[0].data)[i] = (int8_t)q;                                            \
        }                                                                                              \
        return 0;                                                                                      \
    }                                                                                                  \
    static int k_fake_quantize_##SFX(void *ctx, const oar_kernel_call *c) {                           \
        (void)ctx;                                                                                     \
        const int64_t lo = c->iattr[1], hi = c->iattr[2];                                              \
        if (check_params(c, lo, hi)) return oari_fail_status();                                        \
        walk w = {.x = &c->in[0], .axis = (int)c->iattr[0]};                                           \
        const T *x = c->in[0].data;                                                                    \
        T *out = c->out[0].data;                                                                       \
        int64_t n = numel(&c->in[0]);                                                                  \
        for (int64_t i = 0; i < n; i++, walk_next(&w)) {                                               \
            int64_t ch = w.axis >= 0 ? w.idx[w.axis] : 0, z = zero_point_at(c, ch);                    \
            T s = (T)scale_at(c, ch);                                                                  \
            int64_t q = clamp64(to_i64_x86(QUANT_ROUND(T, RINT, x[w.off], s, z, false)), lo, hi);      \
            out[i] = (T)(((double)q - (double)z) * (double)s); /* exact product, one rounding */       \
        }                                                                                              \
        return 0;                                                                                      \
    }

QUANT_KERNELS(f32, float, nearbyintf)
QUANT_KERNELS(f64, double, nearbyint)

/* The fast path of dequantize for an int32 q (qmatmul's and qconv2d's
 * sums) laid out dense: per tensor or along the last dim, rows of n with
 * the scales and zero points read once; along another axis (qconv2d's
 * channels), blocks of the dims after it sharing one scale. Rows or blocks
 * in parallel when large. */
OARI_SIMD_CLONES
static void dequant_row_i32(const int32_t *q, float *out, int64_t n, const double *s, const double *z) {
    for (int64_t j = 0; j < n; j++) out[j] = (float)(((double)q[j] - z[j]) * s[j]);
}
OARI_SIMD_CLONES
static void dequant_block_i32(const int32_t *q, float *out, int64_t n, double s, double z) {
    for (int64_t j = 0; j < n; j++) out[j] = (float)(((double)q[j] - z) * s);
}

static int dequant_i32_dense(const oar_kernel_call *c) {
    const oar_ktensor *x = &c->in[0];
    const int64_t ax = c->iattr[0], total = numel(x);
    bool last = ax < 0 || ax == x->ndim - 1;
    int64_t n = ax >= 0 ? x->shape[ax] : x->ndim ? x->shape[x->ndim - 1] : 1, inner = 1;
    for (int d = (int)ax + 1; !last && d < x->ndim; d++) inner *= x->shape[d];
    double *sz = oari_malloc(2 * (size_t)(n ? n : 1) * sizeof *sz);
    if (!sz) return oari_fail_status();
    for (int64_t j = 0; j < n; j++) {
        sz[j] = scale_at(c, ax >= 0 ? j : 0);
        sz[n + j] = (double)zero_point_at(c, ax >= 0 ? j : 0);
    }
    const int32_t *q = x->data;
    float *out = c->out[0].data;
    if (last) {
        int64_t rows = n ? total / n : 0;
        OARI_PARALLEL_FOR_IF(total > (1 << 16), for (int64_t r = 0; r < rows; r++)
                                 dequant_row_i32(q + r * n, out + r * n, n, sz, sz + n););
    } else {
        int64_t blocks = inner ? total / inner : 0;
        OARI_PARALLEL_FOR_IF(total > (1 << 16), for (int64_t b = 0; b < blocks; b++)
                                 dequant_block_i32(q + b * inner, out + b * inner, inner, sz[b % n],
                                                   sz[n + b % n]););
    }
    oari_free(sz, 2 * (size_t)(n ? n : 1) * sizeof *sz);
    return 0;
}

#define DEQUANT_KERNEL(SFX, T, LO, HI)                                                                 \
    static int k_dequantize_##SFX(void *ctx, const oar_kernel_call *c) {                              \
        (void)ctx;                                                                                     \
        if (check_params(c, LO, HI)) return oari_fail_status();                                        \
        if (sizeof(T) == 4 && dense(&c->in[0])) return dequant_i32_dense(c);                           \
        walk w = {.x = &c->in[0], .axis = (int)c->iattr[0]};                                           \
        const T *q = c->in[0].data;                                                                    \
        float *out = c->out[0].data;                                                                   \
        int64_t n = numel(&c->in[0]);                                                                  \
        for (int64_t i = 0; i < n; i++, walk_next(&w)) {                                               \
            int64_t ch = w.axis >= 0 ? w.idx[w.axis] : 0;                                              \
            out[i] = (float)(((double)q[w.off] - (double)zero_point_at(c, ch)) * scale_at(c, ch));     \
        }                                                                                              \
        return 0;                                                                                      \
    }

DEQUANT_KERNEL(i8, int8_t, -128, 127)
DEQUANT_KERNEL(u8, uint8_t, 0, 255)
DEQUANT_KERNEL(i32, int32_t, INT32_MIN, INT32_MAX)

const oari_cpu_kernels oari_cpu_k_quantize = {[OAR_F32] = k_quantize_f32, [OAR_F64] = k_quantize_f64};
const oari_cpu_kernels oari_cpu_k_fake_quantize = {[OAR_F32] = k_fake_quantize_f32,
                                                   [OAR_F64] = k_fake_quantize_f64};
const oari_cpu_kernels oari_cpu_k_dequantize = {[OAR_I8] = k_dequantize_i8, [OAR_U8] = k_dequantize_u8,
                                                [OAR_I32] = k_dequantize_i32};

/* ---- qmatmul: int8 product, int32 accumulation ------------------------------- */

/* Whether t's elements lie in row-major order without gaps. */
static bool dense(const oar_ktensor *t) {
    int64_t want = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (t->shape[d] != 1 && t->strides[d] != want) return false;
        want *= t->shape[d];
    }
    return true;
}

/* The reference: exact integer arithmetic on any strides, one output row
 * (of a's rows, every batch dim walked) per iteration; out contiguous. */
#define QMATMUL_REF(SFX, TA)                                                                          \
    static void qmatmul_ref_##SFX(const oar_kernel_call *c, int64_t rows, int64_t k, int64_t n) {     \
        const oar_ktensor *a = &c->in[0], *b = &c->in[1];                                              \
        const int32_t za = (int32_t)c->iattr[0];                                                       \
        const int64_t bs0 = b->strides[0], bs1 = b->strides[1], as1 = a->strides[a->ndim - 1];         \
        _Pragma("omp parallel for if (rows * k * n > 65536)")                                          \
        for (int64_t r = 0; r < rows; r++) {                                                           \
            int64_t off = 0, rest = r;                                                                 \
            for (int d = a->ndim - 2; d >= 0; d--) {                                                   \
                off += (rest % a->shape[d]) * a->strides[d];                                           \
                rest /= a->shape[d];                                                                   \
            }                                                                                          \
            const TA *ar = (const TA *)a->data + off;                                                  \
            const int8_t *bp = b->data;                                                                \
            int32_t *o = (int32_t *)c->out[0].data + r * n;                                            \
            for (int64_t j = 0; j < n; j++) o[j] = 0;                                                  \
            for (int64_t p = 0; p < k; p++) {                                                          \
                int32_t av = (int32_t)ar[p * as1] - za;                                                \
                const int8_t *br = bp + p * bs0;                                                       \
                if (av)                                                                                \
                    for (int64_t j = 0; j < n; j++) o[j] += av * (int32_t)br[j * bs1];                 \
            }                                                                                          \
        }                                                                                              \
    }

QMATMUL_REF(u8, uint8_t)
QMATMUL_REF(i8, int8_t)

/* Row o [n] of the exact loop: (a - za) b over a's k bytes (uint8, or int8
 * where u8 is false) and b [k, n]. Sixteen columns at a time stay in two
 * vector registers of int32 over all of k. Each product (a - za) b fits
 * int16 (|a - za| <= 255, |b| <= 128: at most 32640), so it is one 16-lane
 * int16 multiply, widened to int32 for the sum: exact, as oneDNN's int16
 * pair sums without VNNI are not. This is the int8 product of a CPU with
 * neither VNNI nor AVX2 (and of the tests' exact-loop cap). */
OARI_SIMD_CLONES static void qgemm_row(int32_t *restrict o, const uint8_t *restrict a, bool u8,
                                       int32_t za, const int8_t *restrict b, int64_t k, int64_t n) {
    int64_t j0 = 0;
    for (; j0 + 16 <= n; j0 += 16) {
        int32_t acc[16] = {0};
        for (int64_t p = 0; p < k; p++) {
            const int16_t av = (int16_t)((u8 ? (int32_t)a[p] : (int32_t)(int8_t)a[p]) - za);
            const int8_t *br = b + p * n + j0;
            _Pragma("omp simd")
            for (int l = 0; l < 16; l++) acc[l] += (int16_t)(av * (int16_t)br[l]);
        }
        memcpy(o + j0, acc, sizeof acc);
    }
    for (int64_t j = j0; j < n; j++) {
        int32_t sum = 0;
        for (int64_t p = 0; p < k; p++)
            sum += ((u8 ? (int32_t)a[p] : (int32_t)(int8_t)a[p]) - za) * (int32_t)b[p * n + j];
        o[j] = sum;
    }
}

/* c [m, n] = (a - za) b, all dense, m, k, n > 0: oneDNN where built with it
 * and exact on this CPU, else oar's AVX2 kernel (b packed for the call),
 * else the exact loop, rows in parallel. */
static int qgemm_exact(const void *a, bool u8, int32_t za, const int8_t *b, int64_t m, int64_t k, int64_t n,
                       int32_t *c) {
#ifdef OAR_WITH_DNNL
    if (oari_dnnl_int8_exact()) {
        oari_dnnl_qmatmul_args q = {.a_dtype = u8 ? OAR_U8 : OAR_I8, .m = m, .k = k, .n = n,
                                    .a_zero_point = za, .a = a, .b = b, .c = c};
        return oari_dnnl_qmatmul(&q);
    }
#endif
    bool done = false;
    /* (a few rows: packing b would cost more than the loop saves) */
    int st = m >= 8 && oari_cpu_qkernel() == OARI_QK_AVX2 ? oari_cpu_qgemm_packed(a, !u8, za, b, m, k, n, c, &done)
                                                          : 0;
    if (st || done) return st;
    OARI_PARALLEL_FOR_IF(m * k * n > 65536, for (int64_t r = 0; r < m; r++) {
        qgemm_row(c + r * n, (const uint8_t *)a + r * k, u8, za, b, k, n);
    });
    return 0;
}

static int k_qmatmul(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    const oar_ktensor *a = &c->in[0];
    int64_t k = a->shape[a->ndim - 1], n = c->in[1].shape[1], rows = 1;
    for (int d = 0; d < a->ndim - 1; d++) rows *= a->shape[d];
    if (rows == 0 || n == 0) return 0;
    if (k > 0 && dense(a) && dense(&c->in[1]))
        return qgemm_exact(a->data, a->dtype == OAR_U8, (int32_t)c->iattr[0], c->in[1].data, rows, k, n,
                           c->out[0].data);
    if (a->dtype == OAR_U8) qmatmul_ref_u8(c, rows, k, n);
    else qmatmul_ref_i8(c, rows, k, n);
    return 0;
}

const oari_cpu_kernels oari_cpu_k_qmatmul = {[OAR_U8] = k_qmatmul, [OAR_I8] = k_qmatmul};

/* ---- qconv2d: im2col onto the int8 product ------------------------------------- */

/* c [m, n] = (a - za) b, all dense, m, k, n > 0: oar's VNNI or AVX2 tile
 * where the CPU has it, else as qmatmul's. */
static int qgemm_dense(const void *a, bool u8, int32_t za, const int8_t *b, int64_t m, int64_t k, int64_t n,
                       int32_t *c) {
    bool done = false;
    int st = oari_cpu_qgemm_packed(a, !u8, za, b, m, k, n, c, &done);
    if (st || done) return st;
    return qgemm_exact(a, u8, za, b, m, k, n, c);
}

/* Per group, and per block of images: the patches of x as rows, colT
 * [nb * oh * ow, cg * kh * kw] (a padded tap holds the zero point, so it
 * adds (zp - zp) w = 0), times the group's weight transposed, wT [cg * kh *
 * kw, og], into tmp [nb * oh * ow, og], written transposed into out [og, oh
 * * ow] of each image. A block holds as many images as keep colT near 8 MB:
 * one product for a batch of small images (the demo CNN at batch 64: one
 * call in place of 64 of 784 x 9 x 16), not a copy of a large batch. */
#define QCONV_BLOCK_BYTES ((int64_t)8 << 20)
static int k_qconv2d(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    const oar_ktensor *x = &c->in[0], *w = &c->in[1];
    const int64_t *at = c->iattr;
    const int32_t za = (int32_t)at[0];
    const int64_t sh = at[1], sw = at[2], ph = at[3], pw = at[4], dh = at[5], dw = at[6], g = at[7];
    const int64_t N = x->shape[0], C = x->shape[1], H = x->shape[2], W = x->shape[3];
    const int64_t O = w->shape[0], KH = w->shape[2], KW = w->shape[3];
    const int64_t OH = c->out[0].shape[2], OW = c->out[0].shape[3], cg = C / g, og = O / g;
    const int64_t K = cg * KH * KW, P = OH * OW;
    const bool u8 = x->dtype == OAR_U8;
    if (N == 0 || O == 0 || P == 0) return 0;
    int64_t nb = P * K > 0 ? QCONV_BLOCK_BYTES / (P * K) : N;
    nb = nb < 1 ? 1 : nb > N ? N : nb;
    size_t col_n = (size_t)(nb * P * K), wt_n = (size_t)(K * og), tmp_n = (size_t)(nb * P * og) * sizeof(int32_t);
    uint8_t *col = oari_malloc(col_n ? col_n : 1);
    int8_t *wt = oari_malloc(wt_n ? wt_n : 1);
    int32_t *tmp = oari_malloc(tmp_n ? tmp_n : 1);
    int st = col && wt && tmp ? 0 : oari_fail_status();
    const uint8_t pad = (uint8_t)za; /* the zero point's byte, int8 or uint8 */
    int32_t *out = c->out[0].data;
    for (int64_t gi = 0; gi < g && !st; gi++) {
        for (int64_t o = 0; o < og; o++) /* wT[kk, o] = w[gi * og + o, ci, i, j] */
            for (int64_t ci = 0; ci < cg; ci++)
                for (int64_t i = 0; i < KH; i++)
                    for (int64_t j = 0; j < KW; j++)
                        wt[((ci * KH + i) * KW + j) * og + o] =
                            ((const int8_t *)w->data)[(gi * og + o) * w->strides[0] + ci * w->strides[1] +
                                                      i * w->strides[2] + j * w->strides[3]];
        for (int64_t n0 = 0; n0 < N && !st; n0 += nb) {
            const int64_t cnt = N - n0 < nb ? N - n0 : nb, rows = cnt * P;
            OARI_PARALLEL_FOR_IF(rows * K > 65536, for (int64_t r = 0; r < rows; r++) {
                int64_t n = n0 + r / P, p = r % P, oy = p / OW, ox = p % OW;
                const uint8_t *xb = (const uint8_t *)x->data + n * x->strides[0] + gi * cg * x->strides[1];
                uint8_t *row = col + r * K;
                for (int64_t ci = 0; ci < cg; ci++)
                    for (int64_t i = 0; i < KH; i++) {
                        int64_t iy = oy * sh - ph + i * dh;
                        for (int64_t j = 0; j < KW; j++) {
                            int64_t ix = ox * sw - pw + j * dw;
                            row[(ci * KH + i) * KW + j] =
                                iy < 0 || iy >= H || ix < 0 || ix >= W
                                    ? pad
                                    : xb[ci * x->strides[1] + iy * x->strides[2] + ix * x->strides[3]];
                        }
                    }
            });
            if (K == 0) memset(tmp, 0, (size_t)(rows * og) * sizeof(int32_t));
            else st = qgemm_dense(col, u8, za, wt, rows, K, og, tmp);
            if (st) break;
            OARI_PARALLEL_FOR_IF(rows * og > 65536, for (int64_t t = 0; t < cnt * og; t++) {
                int64_t n = t / og, o = t % og;
                int32_t *dst = out + ((n0 + n) * O + gi * og + o) * P;
                const int32_t *src = tmp + n * P * og + o;
                for (int64_t p = 0; p < P; p++) dst[p] = src[p * og];
            });
        }
    }
    if (col) oari_free(col, col_n ? col_n : 1);
    if (wt) oari_free(wt, wt_n ? wt_n : 1);
    if (tmp) oari_free(tmp, tmp_n ? tmp_n : 1);
    return st;
}

const oari_cpu_kernels oari_cpu_k_qconv2d = {[OAR_U8] = k_qconv2d, [OAR_I8] = k_qconv2d};

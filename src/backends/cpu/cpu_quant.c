/* CPU kernels of quantize, dequantize and fake_quantize (src/ops/quant.c
 * has the formulas and why). in[1] is the scale (f32 or f64), in[2] the zero
 * point (i64), one per channel along iattr[0] or one for all (-1). Their
 * values are checked here, before anything is written. */
#include "cpu.h"

#include <math.h>

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

#define QUANT_KERNELS(SFX, T, RINT)                                                                    \
    static int k_quantize_##SFX(void *ctx, const oar_kernel_call *c) {                                \
        (void)ctx;                                                                                     \
        const bool u8 = c->out[0].dtype == OAR_U8;                                                     \
        const int64_t lo = u8 ? 0 : -128, hi = u8 ? 255 : 127;                                         \
        if (check_params(c, lo, hi)) return oari_fail_status();                                        \
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

#define DEQUANT_KERNEL(SFX, T, LO, HI)                                                                 \
    static int k_dequantize_##SFX(void *ctx, const oar_kernel_call *c) {                              \
        (void)ctx;                                                                                     \
        if (check_params(c, LO, HI)) return oari_fail_status();                                        \
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

/* Float math in a form gcc vectorizes (no calls, no branches: both sides
 * of a select are computed), for the f32 loops of the unary, softmax and
 * activation kernels. Accuracy against the double-precision libm result
 * rounded to float is checked by tests/ops/test_unary.c (exp) and
 * tests/ops/test_cpu_fast.c (erf, tanh) and tests/ops/test_gelu_sweep.c
 * (gelu, over a dense sweep). */
#ifndef OARI_CPU_VMATH_H
#define OARI_CPU_VMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* always_inline: gcc does not inline a plain function into a target clone
 * (different target options), which would leave a call per element. */
#define OARI_VINLINE static inline __attribute__((always_inline))

/* The core of both exps below: k = x / ln2 rounded to nearest (into *k)
 * and e^r, r = x - k ln2, by Cephes' polynomial. Adding 1.5 * 2^23 rounds
 * x / ln2 to an integer that sits in the sum's low mantissa bits: k is read
 * from there (an integer subtract, not a float-to-int conversion). */
OARI_VINLINE float oari_vexpf_core(float x, int32_t *k) {
    float t = x * 1.44269504088896341f + 12582912.0f;
    float kf = t - 12582912.0f; /* round to nearest */
    int32_t bits;
    memcpy(&bits, &t, sizeof bits);
    *k = bits - 0x4B400000; /* the bits of 12582912.0f; |k| < 2^22 */
    float r = x - kf * 0.693359375f;
    r = r - kf * -2.12194440e-4f;
    /* Estrin's scheme, not Horner's: 4 dependent multiply-adds instead of 7.
     * The loops are latency-bound where a 256-bit op is two micro-ops (Zen
     * 1: the reorder buffer holds about 2.4 iterations of exp's loop): exp
     * of 512x128 on one thread went from 120 to 100 us (PyTorch 2.15: 89). */
    float r2 = r * r, r4 = r2 * r2;
    float a = 1.9875691500e-4f * r + 1.3981999507e-3f;
    float b = 8.3334519073e-3f * r + 4.1665795894e-2f;
    float c = 1.6666665459e-1f * r + 5.0000001201e-1f;
    float y = a * r4 + (b * r2 + c);
    return y * r2 + (r + 1.0f);
}

/* exp: e^r times 2^k applied in two halves so that subnormal results round
 * once. Within 2 ulp over the whole range. */
OARI_VINLINE float oari_vexpf(float x) {
    const float hi = 88.72283935546875f, lo = -103.97208404541015625f;
    /* Only the low side is clamped: a lane above hi (or NaN) computes
     * garbage that the one select at the end replaces with x + inf (inf,
     * or the NaN). The loop is latency-bound on Zen 1, so every step off
     * the chain from x to the result counts. */
    float xs = x > lo ? x : lo;
    int32_t k;
    float y = oari_vexpf_core(xs, &k);
    int32_t k1 = k >> 1, k2 = k - k1; /* floor: y 2^k1 is exact either way, the product rounds once */
    /* (unsigned shifts: a lane above hi has a k whose shift overflows an int) */
    uint32_t b1 = (uint32_t)(k1 + 127) << 23, b2 = (uint32_t)(k2 + 127) << 23;
    float s1, s2;
    memcpy(&s1, &b1, sizeof s1);
    memcpy(&s2, &b2, sizeof s2);
    float e = y * s1 * s2;
    return x <= hi ? e : x + INFINITY;
}

/* tanh: |x| < 0.625: Cephes' odd polynomial x + x^3 P(x^2); else
 * sign(x) (1 - 2 / (exp(2|x|) + 1)), which saturates to +-1 by itself.
 * Both sides are computed (no branch) so the loop vectorizes. */
OARI_VINLINE float oari_vtanhf(float x) {
    float a = fabsf(x);
    float z = x * x;
    float p = -5.70498872745e-3f;
    p = p * z + 2.06390887954e-2f;
    p = p * z + -5.37397155531e-2f;
    p = p * z + 1.33314422036e-1f;
    p = p * z + -3.33332819422e-1f;
    float small = p * z * x + x;
    float big = 1.0f - 2.0f / (oari_vexpf(2.0f * (a < 20.0f ? a : 20.0f)) + 1.0f);
    big = x < 0 ? -big : big;
    float r = a < 0.625f ? small : big;
    return x == x && x != 0.0f ? r : x; /* NaN, and the sign of zero, pass through */
}

/* erf: |x| < 0.9: x P(x^2); else 1 - exp(-x^2) Q(1 / (1 + |x|/2)), both
 * fitted (relative least squares, iterated toward minimax) to erf and to
 * erfc(x) exp(x^2) on [0.9, 4]; |x| >= 4 rounds to +-1. Within 2 ulp. */
OARI_VINLINE float oari_verff(float x) {
    float a = fabsf(x);
    a = a < 4.0f ? a : 4.0f; /* NaN gives 4 here; restored at the end */
    float t = a * a;
    float p = 8.513279317e-05f;
    p = p * t + -8.175685653e-04f;
    p = p * t + 5.203864072e-03f;
    p = p * t + -2.686051093e-02f;
    p = p * t + 1.128371507e-01f;
    p = p * t + -3.761263490e-01f;
    p = p * t + 1.128379226e+00f;
    float small = a * p;
    float u = 1.0f / (1.0f + 0.5f * a);
    float q = -5.018355697e-02f;
    q = q * u + -6.661531329e-02f;
    q = q * u + 4.143580794e-01f;
    q = q * u + 9.500342607e-02f;
    q = q * u + 3.329069018e-01f;
    q = q * u + 2.732603252e-01f;
    q = q * u + 6.318357191e-04f;
    float big = 1.0f - oari_vexpf(-t) * q;
    float r = copysignf(a < 0.9f ? small : big, x);
    return x == x ? r : x;
}

/* exp(t) for t in [-16, 0] only (no clamping, no NaN or infinity): the
 * polynomial of oari_vexpf, scaled by 2^k in one step (k >= -24, so the
 * scale is a normal float). Within 2 ulp on that range. */
OARI_VINLINE float oari_vexpf_neg16(float t) {
    int32_t k;
    float y = oari_vexpf_core(t, &k);
    int32_t b = (k + 127) << 23;
    float s;
    memcpy(&s, &b, sizeof s);
    return y * s;
}

/* Phi(x) = 0.5 erfc(-x / sqrt 2), for gelu and its derivative: with
 * a0 = |x| / sqrt 2 and a = min(a0, 4), erfc(a) = exp(-a^2) Q(1 / (1 + a/2)),
 * Q fitted to erfc(a) exp(a^2) over [0, 4] (relative 1.2e-8); e is the
 * caller's exp(-a^2). Phi = E/2 for x < 0 (relative accuracy kept in the
 * left tail), 1 - E/2 for x >= 0. For a0 >= 4 (erfc(4) = 1.5e-8), Phi is 0
 * or 1; NaN gives NaN (its comparisons are false: 1 - 0.5 e Q, e NaN). */
OARI_VINLINE float oari_vphif(float x, float a0, float e) {
    float a = a0 < 4.0f ? a0 : 4.0f;
    float u = 1.0f / (1.0f + 0.5f * a);
    float q = -4.972551018e-02f;
    q = q * u + 3.381822705e-01f;
    q = q * u + -8.881477714e-01f;
    q = q * u + 1.012204766e+00f;
    q = q * u + -4.022063613e-01f;
    q = q * u + 4.733629823e-01f;
    q = q * u + 2.271027714e-01f;
    q = q * u + 2.896826565e-01f;
    q = q * u + -4.557223583e-04f;
    float h = 0.5f * e * q;
    h = a0 < 4.0f ? h : 0.0f; /* (false for NaN too) */
    return x < 0.0f ? h : 1.0f - h;
}

/* gelu's x Phi(x), e = exp(-a^2) over [-16, 0] (a <= 4): x < -5.65 gives -0
 * and -inf gives NaN (-inf * 0), as PyTorch; NaN passes through. Phi as
 * oari_vphif's, with its own Q: 0.5 erfc(a) exp(a^2) in u = 1 / (1 +
 * 0.45 a), degree 7 (relative 7.5e-8 with these float coefficients, against
 * 1.2e-8 for oari_vphif's degree 8), the 0.5 folded in: two operations
 * fewer a vector, where the loop is bound by its multiply-adds. gelu_grad
 * keeps oari_vphif (its sweep has less room). */
OARI_VINLINE float oari_vgeluf(float x) {
    float a0 = fabsf(x) * 0.70710678118654752f;
    float a = a0 < 4.0f ? a0 : 4.0f;
    float e = oari_vexpf_neg16(-(a * a));
    float u = 1.0f / (1.0f + 0.45f * a);
    float q = 4.823813960e-02f;
    q = q * u + -2.591127455e-01f;
    q = q * u + 4.594913721e-01f;
    q = q * u + -2.307234108e-01f;
    q = q * u + 2.648386061e-01f;
    q = q * u + 8.394618332e-02f;
    q = q * u + 1.337904781e-01f;
    q = q * u + -4.686544708e-04f;
    float h = e * q;
    h = a0 < 4.0f ? h : 0.0f; /* (false for NaN too) */
    return x * (x < 0.0f ? h : 1.0f - h);
}

/* gelu's derivative, Phi(x) + x phi(x), phi(x) = exp(-x^2/2) / sqrt(2 pi):
 * the E = exp(-x^2/2) that phi needs is Phi's exp(-a^2) too (a = a0 below
 * 4, and Phi ignores it beyond), so one exp serves both (the graph's
 * decomposition took an erf and an exp). NaN passes through; +-inf give
 * NaN (inf * 0), as the decomposition. */
OARI_VINLINE float oari_vgelu_gradf(float x) {
    float a0 = fabsf(x) * 0.70710678118654752f;
    float e = oari_vexpf((-0.5f * x) * x); /* -x^2/2 with one rounding */
    return oari_vphif(x, a0, e) + x * (e * 0.39894228040143268f);
}

#endif

/* CPU kernels of the unary elementwise ops. Each op gets an inner loop per
 * dtype from UNARY_LOOP; f16/bf16 run through the f32 kernels (dispatch
 * converts), so only f32/f64, integer and complex loops are written here.
 * Contiguous runs take a `omp simd` loop the compiler vectorizes. */
#include "cpu.h"
#include "cpu_vmath.h"

#include <math.h>
#include <string.h>

/* Comparisons are not if-converted under the default -ftrapping-math,
 * which keeps selects (relu, clamp, maximum, where, ...) out of vector
 * loops, and errno keeps sqrt a call. Kernels never read floating-point
 * exception flags or errno, so drop both here; values are unchanged (NaN
 * and infinity semantics are kept). */
#pragma GCC optimize("no-trapping-math", "no-math-errno")

/* PRE runs once per run and may read the op's float attributes `fa`. */
#define UNARY_LOOP_P(NAME, TI, TO, PRE, EXPR)                                       \
    OARI_SIMD_CLONES                                                                \
    static void NAME(char **p, const int64_t *s, int64_t n, void *ctx) {            \
        const double *fa = (const double *)ctx;                                     \
        (void)fa;                                                                   \
        PRE;                                                                        \
        TO *o = (TO *)p[0];                                                         \
        const TI *a = (const TI *)p[1];                                             \
        if (s[0] == 1 && s[1] == 1) {                                               \
            _Pragma("omp simd")                                                     \
            for (int64_t i = 0; i < n; i++) {                                       \
                TI x = a[i];                                                        \
                o[i] = (EXPR);                                                      \
            }                                                                       \
        } else {                                                                    \
            for (int64_t i = 0; i < n; i++) {                                       \
                TI x = a[i * s[1]];                                                 \
                o[i * s[0]] = (EXPR);                                               \
            }                                                                       \
        }                                                                           \
    }                                                                               \
    static int k_##NAME(void *ctx, const oar_kernel_call *c) {                      \
        (void)ctx;                                                                  \
        oari_iter_call(c, NAME, (void *)c->fattr);                                  \
        return 0;                                                                   \
    }
#define UNARY_LOOP(NAME, TI, TO, EXPR) UNARY_LOOP_P(NAME, TI, TO, (void)0, EXPR)

/* Tables */
#define K_FLOAT(op) [OAR_F32] = k_##op##_f32, [OAR_F64] = k_##op##_f64
#define K_COMPLEX(op) [OAR_C64] = k_##op##_c64, [OAR_C128] = k_##op##_c128
#define K_INT(op) [OAR_U8] = k_##op##_u8, [OAR_I32] = k_##op##_i32, [OAR_I64] = k_##op##_i64

/* A real-only math function: f32 and f64 loops and the table. */
#define MATH_R(op, EF, ED)                                                          \
    UNARY_LOOP(op##_f32, float, float, EF)                                          \
    UNARY_LOOP(op##_f64, double, double, ED)                                        \
    const oari_cpu_kernels oari_cpu_k_##op = {K_FLOAT(op)};
/* Real and complex. */
#define MATH_RC(op, EF, ED, EC, EZ)                                                 \
    UNARY_LOOP(op##_f32, float, float, EF)                                          \
    UNARY_LOOP(op##_f64, double, double, ED)                                        \
    UNARY_LOOP(op##_c64, c64_t, c64_t, EC)                                          \
    UNARY_LOOP(op##_c128, c128_t, c128_t, EZ)                                       \
    const oari_cpu_kernels oari_cpu_k_##op = {K_FLOAT(op), K_COMPLEX(op)};

/* copies: identity kernels of ops that leave some dtypes unchanged */
UNARY_LOOP(copy_b1, uint8_t, uint8_t, x)
UNARY_LOOP(copy_i32, int32_t, int32_t, x)
UNARY_LOOP(copy_i64, int64_t, int64_t, x)
UNARY_LOOP(copy_f32, float, float, x)
UNARY_LOOP(copy_f64, double, double, x)
UNARY_LOOP(copy_h, uint16_t, uint16_t, x)

/* neg: integers wrap (two's complement), computed unsigned so overflow is defined */
UNARY_LOOP(neg_f32, float, float, -x)
UNARY_LOOP(neg_f64, double, double, -x)
UNARY_LOOP(neg_u8, uint8_t, uint8_t, (uint8_t)(0u - x))
UNARY_LOOP(neg_i32, int32_t, int32_t, (int32_t)(0u - (uint32_t)x))
UNARY_LOOP(neg_i64, int64_t, int64_t, (int64_t)(0u - (uint64_t)x))
UNARY_LOOP(neg_c64, c64_t, c64_t, -x)
UNARY_LOOP(neg_c128, c128_t, c128_t, -x)
const oari_cpu_kernels oari_cpu_k_neg = {K_INT(neg), K_FLOAT(neg), K_COMPLEX(neg)};

/* abs: complex -> modulus (real dtype); INT_MIN stays INT_MIN as in PyTorch */
UNARY_LOOP(abs_f32, float, float, fabsf(x))
UNARY_LOOP(abs_f64, double, double, fabs(x))
UNARY_LOOP(abs_i32, int32_t, int32_t, x < 0 ? (int32_t)(0u - (uint32_t)x) : x)
UNARY_LOOP(abs_i64, int64_t, int64_t, x < 0 ? (int64_t)(0u - (uint64_t)x) : x)
UNARY_LOOP(abs_c64, c64_t, float, cabsf(x))
UNARY_LOOP(abs_c128, c128_t, double, cabs(x))
const oari_cpu_kernels oari_cpu_k_abs = {[OAR_U8] = k_copy_b1, [OAR_I32] = k_abs_i32,
                                         [OAR_I64] = k_abs_i64, K_FLOAT(abs), K_COMPLEX(abs)};

/* sign: -1, 0, 1 (NaN -> 0, as PyTorch); complex z/|z| (0 at 0) */
UNARY_LOOP(sign_f32, float, float, (float)((x > 0) - (x < 0)))
UNARY_LOOP(sign_f64, double, double, (double)((x > 0) - (x < 0)))
UNARY_LOOP(sign_u8, uint8_t, uint8_t, (uint8_t)(x > 0))
UNARY_LOOP(sign_i32, int32_t, int32_t, (int32_t)((x > 0) - (x < 0)))
UNARY_LOOP(sign_i64, int64_t, int64_t, (int64_t)((x > 0) - (x < 0)))
UNARY_LOOP(sign_c64, c64_t, c64_t, x == 0 ? (c64_t)0 : x / cabsf(x))
UNARY_LOOP(sign_c128, c128_t, c128_t, x == 0 ? (c128_t)0 : x / cabs(x))
const oari_cpu_kernels oari_cpu_k_sign = {[OAR_BOOL] = k_copy_b1, K_INT(sign), K_FLOAT(sign),
                                          K_COMPLEX(sign)};

/* exponentials and logarithms */
MATH_RC(exp, oari_vexpf(x), exp(x), cexpf(x), cexp(x))
MATH_R(exp2, exp2f(x), exp2(x))
MATH_RC(log, logf(x), log(x), clogf(x), clog(x))
MATH_RC(log2, log2f(x), log2(x), clogf(x) / (float)M_LN2, clog(x) / M_LN2)
MATH_R(log1p, log1pf(x), log1p(x))
MATH_R(expm1, expm1f(x), expm1(x))
MATH_RC(sqrt, sqrtf(x), sqrt(x), csqrtf(x), csqrt(x))
MATH_RC(rsqrt, 1.0f / sqrtf(x), 1.0 / sqrt(x), 1.0f / csqrtf(x), 1.0 / csqrt(x))
MATH_RC(reciprocal, 1.0f / x, 1.0 / x, 1.0f / x, 1.0 / x)

/* square: integers wrap */
UNARY_LOOP(square_f32, float, float, x * x)
UNARY_LOOP(square_f64, double, double, x * x)
UNARY_LOOP(square_u8, uint8_t, uint8_t, (uint8_t)((unsigned)x * x))
UNARY_LOOP(square_i32, int32_t, int32_t, (int32_t)((uint32_t)x * (uint32_t)x))
UNARY_LOOP(square_i64, int64_t, int64_t, (int64_t)((uint64_t)x * (uint64_t)x))
UNARY_LOOP(square_c64, c64_t, c64_t, x * x)
UNARY_LOOP(square_c128, c128_t, c128_t, x * x)
const oari_cpu_kernels oari_cpu_k_square = {K_INT(square), K_FLOAT(square), K_COMPLEX(square)};

/* trigonometric and hyperbolic */
MATH_RC(sin, sinf(x), sin(x), csinf(x), csin(x))
MATH_RC(cos, cosf(x), cos(x), ccosf(x), ccos(x))
MATH_RC(tan, tanf(x), tan(x), ctanf(x), ctan(x))
MATH_RC(asin, asinf(x), asin(x), casinf(x), casin(x))
MATH_RC(acos, acosf(x), acos(x), cacosf(x), cacos(x))
MATH_RC(atan, atanf(x), atan(x), catanf(x), catan(x))
MATH_RC(sinh, sinhf(x), sinh(x), csinhf(x), csinh(x))
MATH_RC(cosh, coshf(x), cosh(x), ccoshf(x), ccosh(x))
MATH_RC(tanh, oari_vtanhf(x), tanh(x), ctanhf(x), ctanh(x))
MATH_RC(sigmoid, 1.0f / (1.0f + oari_vexpf(-x)), 1.0 / (1.0 + exp(-x)), 1.0f / (1.0f + cexpf(-x)),
        1.0 / (1.0 + cexp(-x)))
MATH_R(erf, oari_verff(x), erf(x))

/* activations (NaN propagates through relu/relu6, as PyTorch's clamp) */
UNARY_LOOP(relu_f32, float, float, x < 0 ? 0.0f : x)
UNARY_LOOP(relu_f64, double, double, x < 0 ? 0.0 : x)
UNARY_LOOP(relu_i32, int32_t, int32_t, x < 0 ? 0 : x)
UNARY_LOOP(relu_i64, int64_t, int64_t, x < 0 ? 0 : x)
const oari_cpu_kernels oari_cpu_k_relu = {[OAR_U8] = k_copy_b1, [OAR_I32] = k_relu_i32,
                                          [OAR_I64] = k_relu_i64, K_FLOAT(relu)};
UNARY_LOOP(relu6_f32, float, float, x < 0 ? 0.0f : x > 6 ? 6.0f : x)
UNARY_LOOP(relu6_f64, double, double, x < 0 ? 0.0 : x > 6 ? 6.0 : x)
UNARY_LOOP(relu6_u8, uint8_t, uint8_t, x > 6 ? 6 : x)
UNARY_LOOP(relu6_i32, int32_t, int32_t, x < 0 ? 0 : x > 6 ? 6 : x)
UNARY_LOOP(relu6_i64, int64_t, int64_t, x < 0 ? 0 : x > 6 ? 6 : x)
const oari_cpu_kernels oari_cpu_k_relu6 = {K_INT(relu6), K_FLOAT(relu6)};

UNARY_LOOP_P(leaky_relu_f32, float, float, const float ns = (float)fa[0], x > 0 ? x : x * ns)
UNARY_LOOP_P(leaky_relu_f64, double, double, const double ns = fa[0], x > 0 ? x : x * ns)
const oari_cpu_kernels oari_cpu_k_leaky_relu = {K_FLOAT(leaky_relu)};

UNARY_LOOP_P(elu_f32, float, float, const float al = (float)fa[0], x > 0 ? x : al * expm1f(x))
UNARY_LOOP_P(elu_f64, double, double, const double al = fa[0], x > 0 ? x : al * expm1(x))
const oari_cpu_kernels oari_cpu_k_elu = {K_FLOAT(elu)};

/* gelu: iattr[0] 0 erf form, 1 tanh form; the attribute picks the loop */
#define GELU_TANH(T, TANH, x)                                                       \
    ((T)0.5 * (x) * ((T)1 + TANH((T)0.7978845608028654 * ((x) + (T)0.044715 * (x) * (x) * (x)))))
UNARY_LOOP(gelu_erf_f32, float, float, oari_vgeluf(x))
UNARY_LOOP(gelu_erf_f64, double, double, 0.5 * x * (1.0 + erf(x * M_SQRT1_2)))
UNARY_LOOP(gelu_tanh_f32, float, float, GELU_TANH(float, oari_vtanhf, x))
UNARY_LOOP(gelu_tanh_f64, double, double, GELU_TANH(double, tanh, x))
static int k_gelu_f32(void *ctx, const oar_kernel_call *c) {
    return c->n_iattr && c->iattr[0] ? k_gelu_tanh_f32(ctx, c) : k_gelu_erf_f32(ctx, c);
}
static int k_gelu_f64(void *ctx, const oar_kernel_call *c) {
    return c->n_iattr && c->iattr[0] ? k_gelu_tanh_f64(ctx, c) : k_gelu_erf_f64(ctx, c);
}
const oari_cpu_kernels oari_cpu_k_gelu = {K_FLOAT(gelu)};

/* gelu_grad: Phi(x) + x phi(x); in f64 Phi from erfc (accurate in the left tail) */
MATH_R(gelu_grad, oari_vgelu_gradf(x),
       0.5 * erfc(-x * M_SQRT1_2) + x * exp(-0.5 * x * x) * 0.39894228040143268)

MATH_R(silu, x / (1.0f + oari_vexpf(-x)), x / (1.0 + exp(-x)))

/* softplus: fattr[0] beta, fattr[1] threshold; linear where beta x > threshold */
UNARY_LOOP_P(softplus_f32, float, float, const float be = (float)fa[0]; const float th = (float)fa[1],
             x * be > th ? x : log1pf(expf(x * be)) / be)
UNARY_LOOP_P(softplus_f64, double, double, const double be = fa[0]; const double th = fa[1],
             x * be > th ? x : log1p(exp(x * be)) / be)
const oari_cpu_kernels oari_cpu_k_softplus = {K_FLOAT(softplus)};

/* rounding: identity on integers; round is half to even (default rounding mode) */
#define ROUNDING(op, EF, ED)                                                        \
    UNARY_LOOP(op##_f32, float, float, EF)                                          \
    UNARY_LOOP(op##_f64, double, double, ED)                                        \
    const oari_cpu_kernels oari_cpu_k_##op = {[OAR_U8] = k_copy_b1, [OAR_I32] = k_copy_i32, \
                                              [OAR_I64] = k_copy_i64, K_FLOAT(op)};
ROUNDING(floor, floorf(x), floor(x))
ROUNDING(ceil, ceilf(x), ceil(x))
ROUNDING(trunc, truncf(x), trunc(x))
ROUNDING(round, nearbyintf(x), nearbyint(x))

/* clamp: fattr[0] min, fattr[1] max, NAN meaning no bound. When min > max
 * the result is max, as PyTorch. Integer inputs get integral bounds (the
 * shape rule promotes to f32 otherwise), saturated to the dtype's range. */
static inline int64_t int_bound(double v, bool lower, int64_t mn, int64_t mx) {
    if (isnan(v)) return lower ? mn : mx;
    if (v <= (double)mn) return mn;
    if (v >= (double)mx) return mx;
    return (int64_t)v;
}
#define CLAMP_F(T, NAME)                                                            \
    UNARY_LOOP_P(NAME, T, T,                                                        \
                 const T lo = isnan(fa[0]) ? (T)-INFINITY : (T)fa[0];               \
                 const T hi = isnan(fa[1]) ? (T)INFINITY : (T)fa[1],                \
                 (x < lo ? lo : x) > hi ? hi : (x < lo ? lo : x))
CLAMP_F(float, clamp_f32)
CLAMP_F(double, clamp_f64)
#define CLAMP_I(T, NAME, MN, MX)                                                    \
    UNARY_LOOP_P(NAME, T, T,                                                        \
                 const T lo = (T)int_bound(fa[0], true, MN, MX);                    \
                 const T hi = (T)int_bound(fa[1], false, MN, MX),                   \
                 (T)((x < lo ? lo : x) > hi ? hi : (x < lo ? lo : x)))
CLAMP_I(uint8_t, clamp_u8, 0, 255)
CLAMP_I(int32_t, clamp_i32, INT32_MIN, INT32_MAX)
CLAMP_I(int64_t, clamp_i64, INT64_MIN, INT64_MAX)
const oari_cpu_kernels oari_cpu_k_clamp = {K_INT(clamp), K_FLOAT(clamp)};

/* predicates -> bool */
#define PRED_ALL(op, EB, EI, EF, EC)                                                \
    UNARY_LOOP(op##_b1, uint8_t, uint8_t, (uint8_t)(EB))                            \
    UNARY_LOOP(op##_u8, uint8_t, uint8_t, (uint8_t)(EI))                            \
    UNARY_LOOP(op##_i32, int32_t, uint8_t, (uint8_t)(EI))                           \
    UNARY_LOOP(op##_i64, int64_t, uint8_t, (uint8_t)(EI))                           \
    UNARY_LOOP(op##_f32, float, uint8_t, (uint8_t)(EF))                             \
    UNARY_LOOP(op##_f64, double, uint8_t, (uint8_t)(EF))                            \
    UNARY_LOOP(op##_c64, c64_t, uint8_t, (uint8_t)(EC))                             \
    UNARY_LOOP(op##_c128, c128_t, uint8_t, (uint8_t)(EC))                           \
    const oari_cpu_kernels oari_cpu_k_##op = {[OAR_BOOL] = k_##op##_b1, K_INT(op),  \
                                              K_FLOAT(op), K_COMPLEX(op)};
PRED_ALL(isnan, 0 * x, 0 * x, x != x, creal(x) != creal(x) || cimag(x) != cimag(x))
PRED_ALL(isinf, 0 * x, 0 * x, isinf(x), isinf(creal(x)) || isinf(cimag(x)))
PRED_ALL(logical_not, x == 0, x == 0, x == 0, x == 0)

/* complex parts: conj and real are the identity on real dtypes */
UNARY_LOOP(conj_c64, c64_t, c64_t, conjf(x))
UNARY_LOOP(conj_c128, c128_t, c128_t, conj(x))
#define K_IDENTITY                                                                  \
    [OAR_BOOL] = k_copy_b1, [OAR_U8] = k_copy_b1, [OAR_I32] = k_copy_i32,           \
    [OAR_I64] = k_copy_i64, [OAR_F16] = k_copy_h, [OAR_BF16] = k_copy_h,            \
    [OAR_F32] = k_copy_f32, [OAR_F64] = k_copy_f64
const oari_cpu_kernels oari_cpu_k_conj = {K_IDENTITY, K_COMPLEX(conj)};

UNARY_LOOP(real_c64, c64_t, float, crealf(x))
UNARY_LOOP(real_c128, c128_t, double, creal(x))
const oari_cpu_kernels oari_cpu_k_real = {K_IDENTITY, K_COMPLEX(real)};

UNARY_LOOP(imag_c64, c64_t, float, cimagf(x))
UNARY_LOOP(imag_c128, c128_t, double, cimag(x))
const oari_cpu_kernels oari_cpu_k_imag = {K_COMPLEX(imag)};

/* angle: real x -> pi for x < 0, 0 otherwise, NaN kept */
UNARY_LOOP(angle_f32, float, float, x != x ? x : x < 0 ? (float)M_PI : 0.0f)
UNARY_LOOP(angle_f64, double, double, x != x ? x : x < 0 ? M_PI : 0.0)
UNARY_LOOP(angle_c64, c64_t, float, cargf(x))
UNARY_LOOP(angle_c128, c128_t, double, carg(x))
const oari_cpu_kernels oari_cpu_k_angle = {K_FLOAT(angle), K_COMPLEX(angle)};

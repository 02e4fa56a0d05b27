/* The vocabulary of the elementwise formulas (src/ops/elementwise.def).
 *
 * A formula is written in function-call style over the words below
 * (MUL(x, EXP(x)), WHERE(LT(x, ZERO), ZERO, x), C(0.5), ...). Every word is
 * defined here once per dtype suffix, NAME_<suffix>:
 *
 *   b1 bool, u8, i8, i32, i64   integers (the CPU kernels only; bool and the
 *                           comparisons also on devices)
 *   h16                     f16/bf16 bits (identity ops only: conj, real)
 *   f32, f64                the floating-point forms: CPU, generated C,
 *                           OpenCL C, CUDA C
 *   c64, c128               complex (the CPU kernels only)
 *
 * Readers: the CPU kernels and the device plugins' kernels (ew_words.h maps
 * the plain words to one suffix per pass over the table), and the
 * compiler's renderers (src/compiler/op_c.c appends the suffix to each word
 * of the formula's text). This file's text is embedded into every
 * generated unit and into the OpenCL plugin's program, so all of them
 * compute with the same definitions. Only the spellings that differ per
 * target sit in the three branches below (OpenCL's built-ins are
 * overloaded, CUDA wants expf, the CPU's f32 uses the vector helpers of
 * src/backends/cpu/cpu_vmath.h, which C includers include first, and the
 * generated C the vector libm its prelude declares).
 *
 * Conventions: a word's result has the suffix's type, except comparisons
 * and logical words (C int 0 or 1, as a condition). Constants C(v), ONE and
 * ZERO of complex suffixes are real (of the component type), so that
 * 1 / z stays a real-by-complex division. Integer arithmetic wraps (it is
 * done unsigned). Words read in a gradient's "tensor context" are listed in
 * src/ops/ew_grad.h. */
#ifndef OARI_EW_MATH_H
#define OARI_EW_MATH_H

/* Pasting after expansion, for the table's readers (a column's word onto
 * a prefix, a word onto a suffix). */
#ifndef EW_CAT
#define EW_CAT_(a, b) a##b
#define EW_CAT(a, b) EW_CAT_(a, b)
#endif

/* ==== what differs per target ============================================ */
#if defined(__OPENCL_VERSION__)
#define EW_FN static inline          /* helper functions */
#define EW_TYPE_b1 uchar
#define EW_TYPE_u8 uchar
#define EW_TYPE_i32 int
#define EW_TYPE_i64 long
#define EW_F32(fn) fn                /* libm name of the f32 form: overloaded built-ins */
#define EXP_f32(x) exp(x)
#define TANH_f32(x) tanh(x)
#define ERF_f32(x) erf(x)
#define ROUND_f32(x) rint(x)         /* half to even, the default rounding */
#define ROUND_f64(x) rint(x)
#define ISINF_f32(x) isinf(x)
#define ISINF_f64(x) isinf(x)
#define EW_DEVICE_GELU 1             /* gelu words from the formulas below */

#elif defined(__CUDACC__)
#define EW_FN __device__ __forceinline__ /* (not static: NVRTC warns of unused ones) */
#define EW_TYPE_b1 unsigned char
#define EW_TYPE_u8 unsigned char
#define EW_TYPE_i32 int
#define EW_TYPE_i64 long long
#define EW_F32(fn) fn##f
#define EXP_f32(x) expf(x)
#define TANH_f32(x) tanhf(x)
#define ERF_f32(x) erff(x)
#define ROUND_f32(x) rintf(x)
#define ROUND_f64(x) rint(x)
#define ISINF_f32(x) isinf(x)
#define ISINF_f64(x) isinf(x)
#define EW_DEVICE_GELU 1

#else /* C: the CPU kernels and the compiler's generated C */
#include <math.h>
#include <stdint.h>
#define EW_FN static inline
#define EW_TYPE_b1 uint8_t
#define EW_TYPE_u8 uint8_t
#define EW_TYPE_i32 int32_t
#define EW_TYPE_i64 int64_t
#define EW_F32(fn) fn##f
#if defined(OARI_EW_LIBMVEC)
/* Generated C, whose prelude declares glibc's vector expf, tanhf, erff:
 * there (-march=native, other words inlined around them) they are as fast
 * as the forms below or faster (tanhf: 0.6 of oari_vtanhf's time; the
 * 8-op chain of bench_fusion: 0.8), so fused kernels call them */
#define EXP_f32(x) expf(x)
#define TANH_f32(x) tanhf(x)
#define ERF_f32(x) erff(x)
#else
/* the CPU kernels: the vectorisable forms of src/backends/cpu/cpu_vmath.h
 * (within 2 ulp), where libm's would be a call per element */
#define EXP_f32(x) oari_vexpf(x)
#define TANH_f32(x) oari_vtanhf(x)
#define ERF_f32(x) oari_verff(x)
#endif
#define GELU_ERF_f32(x) oari_vgeluf(x)
#define GELU_GRAD_f32(x) oari_vgelu_gradf(x)
#define ROUND_f32(x) nearbyintf(x)
#define ROUND_f64(x) nearbyint(x)
/* (glibc's isinf is -1 for -inf: a bool element must be 0 or 1) */
#define ISINF_f32(x) (isinf(x) != 0)
#define ISINF_f64(x) (isinf(x) != 0)

/* ---- complex (CPU only; the includer has <complex.h>) ---- */
#define EW_TYPE_c64 float _Complex
#define EW_TYPE_c128 double _Complex
#define EW_REAL_TYPE_c64 float
#define EW_REAL_TYPE_c128 double
#define C_c64(v) ((float)(v))
#define C_c128(v) ((double)(v))
#define ONE_c64 C_c64(1)
#define ONE_c128 C_c128(1)
#define ZERO_c64 C_c64(0)
#define ZERO_c128 C_c128(0)
#define ADD_c64(a, b) ((a) + (b))
#define ADD_c128(a, b) ((a) + (b))
#define SUB_c64(a, b) ((a) - (b))
#define SUB_c128(a, b) ((a) - (b))
#define MUL_c64(a, b) ((a) * (b))
#define MUL_c128(a, b) ((a) * (b))
#define DIV_c64(a, b) ((a) / (b))
#define DIV_c128(a, b) ((a) / (b))
#define NEG_c64(x) (-(x))
#define NEG_c128(x) (-(x))
#define SQUARE_c64(x) MUL_c64(x, x)
#define SQUARE_c128(x) MUL_c128(x, x)
#define RECIPROCAL_c64(x) DIV_c64(ONE_c64, x)
#define RECIPROCAL_c128(x) DIV_c128(ONE_c128, x)
#define EXP_c64(x) cexpf(x)
#define EXP_c128(x) cexp(x)
#define LOG_c64(x) clogf(x)
#define LOG_c128(x) clog(x)
#define LOG2_c64(x) DIV_c64(clogf(x), C_c64(0.69314718055994531))
#define LOG2_c128(x) DIV_c128(clog(x), C_c128(0.69314718055994531))
#define SQRT_c64(x) csqrtf(x)
#define SQRT_c128(x) csqrt(x)
#define RSQRT_c64(x) DIV_c64(ONE_c64, SQRT_c64(x))
#define RSQRT_c128(x) DIV_c128(ONE_c128, SQRT_c128(x))
#define SIN_c64(x) csinf(x)
#define SIN_c128(x) csin(x)
#define COS_c64(x) ccosf(x)
#define COS_c128(x) ccos(x)
#define TAN_c64(x) ctanf(x)
#define TAN_c128(x) ctan(x)
#define ASIN_c64(x) casinf(x)
#define ASIN_c128(x) casin(x)
#define ACOS_c64(x) cacosf(x)
#define ACOS_c128(x) cacos(x)
#define ATAN_c64(x) catanf(x)
#define ATAN_c128(x) catan(x)
#define SINH_c64(x) csinhf(x)
#define SINH_c128(x) csinh(x)
#define COSH_c64(x) ccoshf(x)
#define COSH_c128(x) ccosh(x)
#define TANH_c64(x) ctanhf(x)
#define TANH_c128(x) ctanh(x)
#define SIGMOID_c64(x) DIV_c64(ONE_c64, ADD_c64(ONE_c64, EXP_c64(NEG_c64(x))))
#define SIGMOID_c128(x) DIV_c128(ONE_c128, ADD_c128(ONE_c128, EXP_c128(NEG_c128(x))))
#define POW_c64(a, b) cpowf(a, b)
#define POW_c128(a, b) cpow(a, b)
#define ABS_c64(x) cabsf(x)           /* real result */
#define ABS_c128(x) cabs(x)
#define SIGN_c64(x) ((x) == 0 ? (float _Complex)0 : (x) / cabsf(x)) /* z / |z|, 0 at 0 */
#define SIGN_c128(x) ((x) == 0 ? (double _Complex)0 : (x) / cabs(x))
#define ISNAN_c64(x) (crealf(x) != crealf(x) || cimagf(x) != cimagf(x))
#define ISNAN_c128(x) (creal(x) != creal(x) || cimag(x) != cimag(x))
#define ISINF_c64(x) (isinf(crealf(x)) || isinf(cimagf(x)))
#define ISINF_c128(x) (isinf(creal(x)) || isinf(cimag(x)))
#define CONJ_c64(x) conjf(x)
#define CONJ_c128(x) conj(x)
#define REAL_c64(x) crealf(x)
#define REAL_c128(x) creal(x)
#define IMAG_c64(x) cimagf(x)
#define IMAG_c128(x) cimag(x)
#define ANGLE_c64(x) cargf(x)
#define ANGLE_c128(x) carg(x)

/* ---- integers and bool (CPU only): wrapping, defined division by 0 ---- */
#define EW_TYPE_h16 uint16_t
#define EW_REAL_TYPE_b1 uint8_t
#define EW_REAL_TYPE_u8 uint8_t
#define EW_REAL_TYPE_i32 int32_t
#define EW_REAL_TYPE_i64 int64_t
#define EW_REAL_TYPE_h16 uint16_t
#define C_b1(v) ((uint8_t)(v))
#define C_u8(v) ((uint8_t)(v))
#define C_i32(v) ((int32_t)(v))
#define C_i64(v) ((int64_t)(v))
#define ONE_b1 C_b1(1)
#define ONE_u8 C_u8(1)
#define ONE_i32 C_i32(1)
#define ONE_i64 C_i64(1)
#define ZERO_b1 C_b1(0)
#define ZERO_u8 C_u8(0)
#define ZERO_i32 C_i32(0)
#define ZERO_i64 C_i64(0)
#define ADD_b1(a, b) ((uint8_t)((a) | (b)))  /* bool + bool: or */
#define ADD_u8(a, b) ((uint8_t)((unsigned)(a) + (unsigned)(b)))
#define ADD_i32(a, b) ((int32_t)((uint32_t)(a) + (uint32_t)(b)))
#define ADD_i64(a, b) ((int64_t)((uint64_t)(a) + (uint64_t)(b)))
#define SUB_u8(a, b) ((uint8_t)((unsigned)(a) - (unsigned)(b)))
#define SUB_i32(a, b) ((int32_t)((uint32_t)(a) - (uint32_t)(b)))
#define SUB_i64(a, b) ((int64_t)((uint64_t)(a) - (uint64_t)(b)))
#define MUL_b1(a, b) ((uint8_t)((a) & (b)))  /* bool * bool: and */
#define MUL_u8(a, b) ((uint8_t)((unsigned)(a) * (unsigned)(b)))
#define MUL_i32(a, b) ((int32_t)((uint32_t)(a) * (uint32_t)(b)))
#define MUL_i64(a, b) ((int64_t)((uint64_t)(a) * (uint64_t)(b)))
#define NEG_u8(x) ((uint8_t)(0u - (x)))
#define NEG_i32(x) ((int32_t)(0u - (uint32_t)(x)))
#define NEG_i64(x) ((int64_t)(0u - (uint64_t)(x)))
#define SQUARE_u8(x) MUL_u8(x, x)
#define SQUARE_i32(x) MUL_i32(x, x)
#define SQUARE_i64(x) MUL_i64(x, x)
#define ABS_u8(x) (x)
#define ABS_i32(x) ((x) < 0 ? NEG_i32(x) : (x)) /* INT_MIN stays INT_MIN, as PyTorch */
#define ABS_i64(x) ((x) < 0 ? NEG_i64(x) : (x))
#define SIGN_b1(x) (x)
#define SIGN_u8(x) ((uint8_t)((x) > 0))
#define SIGN_i32(x) ((int32_t)(((x) > 0) - ((x) < 0)))
#define SIGN_i64(x) ((int64_t)(((x) > 0) - ((x) < 0)))
#define FLOOR_u8(x) (x)                        /* rounding: identity on integers */
#define FLOOR_i32(x) (x)
#define FLOOR_i64(x) (x)
#define CEIL_u8(x) (x)
#define CEIL_i32(x) (x)
#define CEIL_i64(x) (x)
#define ROUND_u8(x) (x)
#define ROUND_i32(x) (x)
#define ROUND_i64(x) (x)
#define TRUNC_u8(x) (x)
#define TRUNC_i32(x) (x)
#define TRUNC_i64(x) (x)
#define ISNAN_b1(x) (0 * (x))                  /* never (x is read: no unused variable) */
#define ISNAN_u8(x) (0 * (x))
#define ISNAN_i32(x) (0 * (x))
#define ISNAN_i64(x) (0 * (x))
#define ISINF_b1(x) (0 * (x))
#define ISINF_u8(x) (0 * (x))
#define ISINF_i32(x) (0 * (x))
#define ISINF_i64(x) (0 * (x))
#define MAXIMUM_b1(a, b) ADD_b1(a, b)
#define MAXIMUM_u8(a, b) ((a) > (b) ? (a) : (b))
#define MAXIMUM_i32(a, b) ((a) > (b) ? (a) : (b))
#define MAXIMUM_i64(a, b) ((a) > (b) ? (a) : (b))
#define MINIMUM_b1(a, b) MUL_b1(a, b)
#define MINIMUM_u8(a, b) ((a) < (b) ? (a) : (b))
#define MINIMUM_i32(a, b) ((a) < (b) ? (a) : (b))
#define MINIMUM_i64(a, b) ((a) < (b) ? (a) : (b))
#define FLOOR_DIV_u8(a, b) ((uint8_t)((b) ? (a) / (b) : 0))
#define FLOOR_DIV_i32(a, b) ((int32_t)ew_floordiv_i64(a, b))
#define FLOOR_DIV_i64(a, b) ew_floordiv_i64(a, b)
#define REMAINDER_u8(a, b) ((uint8_t)((b) ? (a) % (b) : 0))
#define REMAINDER_i32(a, b) ((int32_t)ew_remainder_i64(a, b))
#define REMAINDER_i64(a, b) ew_remainder_i64(a, b)
#define POW_u8(a, b) ((uint8_t)ew_pow_i64(a, b))
#define POW_i32(a, b) ((int32_t)ew_pow_i64(a, b))
#define POW_i64(a, b) ew_pow_i64(a, b)
#define CONJ_b1(x) (x)                         /* conj and real: identity on real dtypes */
#define CONJ_u8(x) (x)
#define CONJ_i32(x) (x)
#define CONJ_i64(x) (x)
#define CONJ_h16(x) (x)
#define REAL_b1(x) (x)
#define REAL_u8(x) (x)
#define REAL_i32(x) (x)
#define REAL_i64(x) (x)
#define REAL_h16(x) (x)

/* int8 (CPU only, like u8): results wrap modulo 256 through uint8_t */
#define EW_TYPE_i8 int8_t
#define EW_REAL_TYPE_i8 int8_t
#define C_i8(v) ((int8_t)(v))
#define EW_WRAP_i8(v) ((int8_t)(uint8_t)(v))
#define ONE_i8 C_i8(1)
#define ZERO_i8 C_i8(0)
#define ADD_i8(a, b) EW_WRAP_i8((unsigned)(a) + (unsigned)(b))
#define SUB_i8(a, b) EW_WRAP_i8((unsigned)(a) - (unsigned)(b))
#define MUL_i8(a, b) EW_WRAP_i8((unsigned)(a) * (unsigned)(b))
#define NEG_i8(x) EW_WRAP_i8(0u - (unsigned)(x))
#define SQUARE_i8(x) MUL_i8(x, x)
#define ABS_i8(x) ((x) < 0 ? NEG_i8(x) : (x)) /* -128 stays -128, as PyTorch */
#define SIGN_i8(x) ((int8_t)(((x) > 0) - ((x) < 0)))
#define FLOOR_i8(x) (x)
#define CEIL_i8(x) (x)
#define ROUND_i8(x) (x)
#define TRUNC_i8(x) (x)
#define ISNAN_i8(x) (0 * (x))
#define ISINF_i8(x) (0 * (x))
#define MAXIMUM_i8(a, b) ((a) > (b) ? (a) : (b))
#define MINIMUM_i8(a, b) ((a) < (b) ? (a) : (b))
#define FLOOR_DIV_i8(a, b) EW_WRAP_i8(ew_floordiv_i64(a, b)) /* -128 // -1 wraps to -128 */
#define REMAINDER_i8(a, b) ((int8_t)ew_remainder_i64(a, b))
#define POW_i8(a, b) EW_WRAP_i8(ew_pow_i64(a, b))
#define CONJ_i8(x) (x)
#define REAL_i8(x) (x)
#define EQ_i8 EW_EQ
#define NE_i8 EW_NE
#define LT_i8 EW_LT
#define LE_i8 EW_LE
#define GT_i8 EW_GT
#define GE_i8 EW_GE
#define AND_i8 EW_AND
#define OR_i8 EW_OR
#define XOR_i8 EW_XOR
#define NOT_i8 EW_NOT
#define WHERE_i8 EW_WHERE

/* Python's floor division and remainder of integers; a divisor of 0 gives
 * 0 (PyTorch raises) and INT_MIN // -1 wraps. */
EW_FN int64_t ew_floordiv_i64(int64_t a, int64_t b) {
    if (b == 0) return 0;
    if (b == -1) return (int64_t)(0u - (uint64_t)a);
    int64_t q = a / b;
    if (a % b != 0 && ((a < 0) != (b < 0))) q--;
    return q;
}
EW_FN int64_t ew_remainder_i64(int64_t a, int64_t b) {
    if (b == 0 || b == -1) return 0;
    int64_t r = a % b;
    if (r != 0 && ((r < 0) != (b < 0))) r += b;
    return r;
}
/* By squaring, wrapping; negative exponents as PyTorch's tensor kernel:
 * 1 for base 1, +-1 for base -1, else 0. */
EW_FN int64_t ew_pow_i64(int64_t a, int64_t b) {
    if (b < 0) return a == 1 ? 1 : a == -1 ? ((b & 1) ? -1 : 1) : 0;
    uint64_t r = 1, base = (uint64_t)a;
    while (b) {
        if (b & 1) r *= base;
        base *= base;
        b >>= 1;
    }
    return (int64_t)r;
}
#endif /* targets */

/* ==== the floating-point words: every target ============================ */
#define EW_F64(fn) fn
#define EW_TYPE_f32 float
#define EW_TYPE_f64 double
#define EW_REAL_TYPE_f32 float
#define EW_REAL_TYPE_f64 double

#define C_f32(v) ((float)(v))
#define C_f64(v) ((double)(v))
#define ONE_f32 C_f32(1)
#define ONE_f64 C_f64(1)
#define ZERO_f32 C_f32(0)
#define ZERO_f64 C_f64(0)

#define ADD_f32(a, b) ((a) + (b))
#define ADD_f64(a, b) ((a) + (b))
#define SUB_f32(a, b) ((a) - (b))
#define SUB_f64(a, b) ((a) - (b))
#define MUL_f32(a, b) ((a) * (b))
#define MUL_f64(a, b) ((a) * (b))
#define DIV_f32(a, b) ((a) / (b))
#define DIV_f64(a, b) ((a) / (b))
#define NEG_f32(x) (-(x))
#define NEG_f64(x) (-(x))
#define SQUARE_f32(x) MUL_f32(x, x)
#define SQUARE_f64(x) MUL_f64(x, x)
#define RECIPROCAL_f32(x) DIV_f32(ONE_f32, x)
#define RECIPROCAL_f64(x) DIV_f64(ONE_f64, x)
#define RSQRT_f32(x) DIV_f32(ONE_f32, SQRT_f32(x))
#define RSQRT_f64(x) DIV_f64(ONE_f64, SQRT_f64(x))
#define SIGMOID_f32(x) DIV_f32(ONE_f32, ADD_f32(ONE_f32, EXP_f32(NEG_f32(x))))
#define SIGMOID_f64(x) DIV_f64(ONE_f64, ADD_f64(ONE_f64, EXP_f64(NEG_f64(x))))

#define EXP_f64(x) exp(x)
/* exp through libm: in a loop that calls libm anyway (softplus's log1p),
 * a call beats the inlined polynomial of EXP_f32 on the CPU */
#define EXP_LIBM_f32(x) EW_F32(exp)(x)
#define EXP_LIBM_f64(x) exp(x)
#define TANH_f64(x) tanh(x)
#define ERF_f64(x) erf(x)
#define EXP2_f32(x) EW_F32(exp2)(x)
#define EXP2_f64(x) exp2(x)
#define LOG_f32(x) EW_F32(log)(x)
#define LOG_f64(x) log(x)
#define LOG2_f32(x) EW_F32(log2)(x)
#define LOG2_f64(x) log2(x)
#define LOG1P_f32(x) EW_F32(log1p)(x)
#define LOG1P_f64(x) log1p(x)
#define EXPM1_f32(x) EW_F32(expm1)(x)
#define EXPM1_f64(x) expm1(x)
#define SQRT_f32(x) EW_F32(sqrt)(x)
#define SQRT_f64(x) sqrt(x)
#define SIN_f32(x) EW_F32(sin)(x)
#define SIN_f64(x) sin(x)
#define COS_f32(x) EW_F32(cos)(x)
#define COS_f64(x) cos(x)
#define TAN_f32(x) EW_F32(tan)(x)
#define TAN_f64(x) tan(x)
#define ASIN_f32(x) EW_F32(asin)(x)
#define ASIN_f64(x) asin(x)
#define ACOS_f32(x) EW_F32(acos)(x)
#define ACOS_f64(x) acos(x)
#define ATAN_f32(x) EW_F32(atan)(x)
#define ATAN_f64(x) atan(x)
#define SINH_f32(x) EW_F32(sinh)(x)
#define SINH_f64(x) sinh(x)
#define COSH_f32(x) EW_F32(cosh)(x)
#define COSH_f64(x) cosh(x)
#define ERFC_f32(x) EW_F32(erfc)(x)
#define ERFC_f64(x) erfc(x)
#define FLOOR_f32(x) EW_F32(floor)(x)
#define FLOOR_f64(x) floor(x)
#define CEIL_f32(x) EW_F32(ceil)(x)
#define CEIL_f64(x) ceil(x)
#define TRUNC_f32(x) EW_F32(trunc)(x)
#define TRUNC_f64(x) trunc(x)
#define ABS_f32(x) EW_F32(fabs)(x)
#define ABS_f64(x) fabs(x)
#define POW_f32(a, b) EW_F32(pow)(a, b)
#define POW_f64(a, b) pow(a, b)
#define ATAN2_f32(a, b) EW_F32(atan2)(a, b)
#define ATAN2_f64(a, b) atan2(a, b)
#define SIGN_f32(x) ((float)(((x) > 0) - ((x) < 0)))   /* NaN gives 0, as PyTorch */
#define SIGN_f64(x) ((double)(((x) > 0) - ((x) < 0)))
#define ISNAN_f32(x) ((x) != (x))
#define ISNAN_f64(x) ((x) != (x))
/* maximum/minimum propagate NaN (PyTorch) */
#define MAXIMUM_f32(a, b) (((a) != (a) || (a) > (b)) ? (a) : (b))
#define MAXIMUM_f64(a, b) (((a) != (a) || (a) > (b)) ? (a) : (b))
#define MINIMUM_f32(a, b) (((a) != (a) || (a) < (b)) ? (a) : (b))
#define MINIMUM_f64(a, b) (((a) != (a) || (a) < (b)) ? (a) : (b))
#define FLOOR_DIV_f32(a, b) ew_floordiv_f32(a, b)
#define FLOOR_DIV_f64(a, b) ew_floordiv_f64(a, b)
#define REMAINDER_f32(a, b) ew_remainder_f32(a, b)
#define REMAINDER_f64(a, b) ew_remainder_f64(a, b)
/* real input: pi for x < 0, 0 otherwise, NaN kept */
#define ANGLE_f32(x) ((x) != (x) ? (x) : (x) < 0 ? C_f32(3.14159265358979323846) : ZERO_f32)
#define ANGLE_f64(x) ((x) != (x) ? (x) : (x) < 0 ? C_f64(3.14159265358979323846) : ZERO_f64)
#define CONJ_f32(x) (x)
#define CONJ_f64(x) (x)
#define REAL_f32(x) (x)
#define REAL_f64(x) (x)

/* gelu, erf form: x Phi(x); its derivative Phi(x) + x phi(x) (gelu's
 * backward). f32 on the CPU: cpu_vmath.h's one-exp forms; elsewhere: */
#define GELU_ERF_f64(x) MUL_f64(MUL_f64(C_f64(0.5), x), ADD_f64(ONE_f64, ERF_f64(MUL_f64(x, C_f64(0.70710678118654752)))))
#define GELU_GRAD_f64(x)                                                                       \
    ADD_f64(MUL_f64(C_f64(0.5), ERFC_f64(MUL_f64(NEG_f64(x), C_f64(0.70710678118654752)))),     \
            MUL_f64(MUL_f64(x, EXP_f64(MUL_f64(MUL_f64(C_f64(-0.5), x), x))), C_f64(0.39894228040143268)))
#ifdef EW_DEVICE_GELU
#define GELU_ERF_f32(x) MUL_f32(MUL_f32(C_f32(0.5), x), ADD_f32(ONE_f32, ERF_f32(MUL_f32(x, C_f32(0.70710678118654752)))))
#define GELU_GRAD_f32(x)                                                                       \
    ADD_f32(MUL_f32(C_f32(0.5), ERFC_f32(MUL_f32(NEG_f32(x), C_f32(0.70710678118654752)))),     \
            MUL_f32(MUL_f32(x, EXP_f32(MUL_f32(MUL_f32(C_f32(-0.5), x), x))), C_f32(0.39894228040143268)))
#endif

/* Python's floor division and remainder of floats, as PyTorch's
 * div_floor_floating: exact for representable quotients; b == 0 gives a / b. */
#define EW_FLOOR_DIV_FN(T, S, M)                                                               \
    EW_FN T ew_floordiv_##S(T a, T b) {                                                       \
        if (b == 0) return a / b;                                                             \
        T mod = M(fmod)(a, b);                                                                \
        T div = (a - mod) / b;                                                                \
        if (mod != 0 && ((b < 0) != (mod < 0))) div -= 1;                                     \
        if (div == 0) return M(copysign)((T)0, a / b);                                        \
        T fd = M(floor)(div);                                                                 \
        if (div - fd > (T)0.5) fd += 1;                                                       \
        return fd;                                                                            \
    }                                                                                         \
    EW_FN T ew_remainder_##S(T a, T b) {                                                      \
        T mod = M(fmod)(a, b);                                                                \
        if (mod != 0 && ((b < 0) != (mod < 0))) mod += b;                                     \
        return mod;                                                                           \
    }
EW_FLOOR_DIV_FN(float, f32, EW_F32)
#if !defined(__OPENCL_VERSION__) || defined(EW_FP64) /* OpenCL: cl_khr_fp64 enabled by the includer */
EW_FLOOR_DIV_FN(double, f64, EW_F64)
#endif

/* ==== words that read the same for every dtype ============================
 * Comparisons and logical words give a C int 0/1; WHERE selects. */
#define EW_EQ(a, b) ((a) == (b))
#define EW_NE(a, b) ((a) != (b))
#define EW_LT(a, b) ((a) < (b))
#define EW_LE(a, b) ((a) <= (b))
#define EW_GT(a, b) ((a) > (b))
#define EW_GE(a, b) ((a) >= (b))
#define EW_AND(p, q) (((p) != 0) & ((q) != 0))
#define EW_OR(p, q) (((p) != 0) | ((q) != 0))
#define EW_XOR(p, q) (((p) != 0) ^ ((q) != 0))
#define EW_NOT(p) ((p) == 0)
#define EW_WHERE(c, a, b) ((c) ? (a) : (b))

#define EQ_b1 EW_EQ
#define EQ_u8 EW_EQ
#define EQ_i32 EW_EQ
#define EQ_i64 EW_EQ
#define EQ_f32 EW_EQ
#define EQ_f64 EW_EQ
#define EQ_c64 EW_EQ
#define EQ_c128 EW_EQ
#define NE_b1 EW_NE
#define NE_u8 EW_NE
#define NE_i32 EW_NE
#define NE_i64 EW_NE
#define NE_f32 EW_NE
#define NE_f64 EW_NE
#define NE_c64 EW_NE
#define NE_c128 EW_NE
#define LT_b1 EW_LT
#define LT_u8 EW_LT
#define LT_i32 EW_LT
#define LT_i64 EW_LT
#define LT_f32 EW_LT
#define LT_f64 EW_LT
#define LE_b1 EW_LE
#define LE_u8 EW_LE
#define LE_i32 EW_LE
#define LE_i64 EW_LE
#define LE_f32 EW_LE
#define LE_f64 EW_LE
#define GT_b1 EW_GT
#define GT_u8 EW_GT
#define GT_i32 EW_GT
#define GT_i64 EW_GT
#define GT_f32 EW_GT
#define GT_f64 EW_GT
#define GE_b1 EW_GE
#define GE_u8 EW_GE
#define GE_i32 EW_GE
#define GE_i64 EW_GE
#define GE_f32 EW_GE
#define GE_f64 EW_GE
#define AND_b1 EW_AND
#define AND_u8 EW_AND
#define AND_i32 EW_AND
#define AND_i64 EW_AND
#define AND_f32 EW_AND
#define AND_f64 EW_AND
#define AND_c64 EW_AND
#define AND_c128 EW_AND
#define OR_b1 EW_OR
#define OR_u8 EW_OR
#define OR_i32 EW_OR
#define OR_i64 EW_OR
#define OR_f32 EW_OR
#define OR_f64 EW_OR
#define OR_c64 EW_OR
#define OR_c128 EW_OR
#define XOR_b1 EW_XOR
#define XOR_u8 EW_XOR
#define XOR_i32 EW_XOR
#define XOR_i64 EW_XOR
#define XOR_f32 EW_XOR
#define XOR_f64 EW_XOR
#define XOR_c64 EW_XOR
#define XOR_c128 EW_XOR
#define NOT_b1 EW_NOT
#define NOT_u8 EW_NOT
#define NOT_i32 EW_NOT
#define NOT_i64 EW_NOT
#define NOT_f32 EW_NOT
#define NOT_f64 EW_NOT
#define NOT_c64 EW_NOT
#define NOT_c128 EW_NOT
#define WHERE_b1 EW_WHERE
#define WHERE_u8 EW_WHERE
#define WHERE_i32 EW_WHERE
#define WHERE_i64 EW_WHERE
#define WHERE_f32 EW_WHERE
#define WHERE_f64 EW_WHERE
#define WHERE_c64 EW_WHERE
#define WHERE_c128 EW_WHERE

#endif

/* CPU kernels of the binary elementwise ops and where. Inputs arrive
 * broadcast to the output's shape (stride 0 on broadcast dims) and cast to
 * one dtype; f16/bf16 run through the f32 kernels. Contiguous runs (and
 * runs with one broadcast scalar operand) take `omp simd` loops. */
#include "cpu.h"

#include <math.h>

/* Comparisons are not if-converted under the default -ftrapping-math,
 * which keeps selects (relu, clamp, maximum, where, ...) out of vector
 * loops, and errno keeps sqrt a call. Kernels never read floating-point
 * exception flags or errno, so drop both here; values are unchanged (NaN
 * and infinity semantics are kept). */
#pragma GCC optimize("no-trapping-math", "no-math-errno")

#define BINARY_LOOP(NAME, TI, TO, EXPR)                                             \
    static inline __attribute__((always_inline)) void NAME##_run(                   \
        TO *o, const TI *pa, const TI *pb, const int64_t *s, int64_t n) {           \
        if (s[0] == 1 && s[1] == 1 && s[2] == 1) {                                  \
            _Pragma("omp simd")                                                     \
            for (int64_t i = 0; i < n; i++) {                                       \
                TI a = pa[i], b = pb[i];                                            \
                o[i] = (EXPR);                                                      \
            }                                                                       \
        } else if (s[0] == 1 && s[1] == 1 && s[2] == 0) {                           \
            const TI b = pb[0];                                                     \
            _Pragma("omp simd")                                                     \
            for (int64_t i = 0; i < n; i++) {                                       \
                TI a = pa[i];                                                       \
                o[i] = (EXPR);                                                      \
            }                                                                       \
        } else if (s[0] == 1 && s[1] == 0 && s[2] == 1) {                           \
            const TI a = pa[0];                                                     \
            _Pragma("omp simd")                                                     \
            for (int64_t i = 0; i < n; i++) {                                       \
                TI b = pb[i];                                                       \
                o[i] = (EXPR);                                                      \
            }                                                                       \
        } else {                                                                    \
            for (int64_t i = 0; i < n; i++) {                                       \
                TI a = pa[i * s[1]], b = pb[i * s[2]];                              \
                o[i * s[0]] = (EXPR);                                               \
            }                                                                       \
        }                                                                           \
    }                                                                               \
    OARI_SIMD_CLONES                                                                \
    static void NAME(char **p, const int64_t *s, int64_t n, void *ctx) {            \
        (void)ctx;                                                                  \
        NAME##_run((TO *)p[0], (const TI *)p[1], (const TI *)p[2], s, n);           \
    }                                                                               \
    OARI_SIMD_CLONES                                                                \
    static void NAME##_2d(char **p, const int64_t *s, const int64_t *os, int64_t rows, \
                          int64_t n, void *ctx) {                                   \
        (void)ctx;                                                                  \
        TO *o = (TO *)p[0];                                                         \
        const TI *pa = (const TI *)p[1], *pb = (const TI *)p[2];                    \
        if (s[0] == 1 && s[1] == 1 && s[2] == 1) { /* (the row broadcast: the  \
                                                       test hoisted out of the rows) */ \
            for (int64_t r = 0; r < rows; r++) {                                    \
                TO *orow = o + r * os[0];                                           \
                const TI *ar = pa + r * os[1], *br = pb + r * os[2];                \
                _Pragma("omp simd")                                                 \
                for (int64_t i = 0; i < n; i++) {                                   \
                    TI a = ar[i], b = br[i];                                        \
                    orow[i] = (EXPR);                                               \
                }                                                                   \
            }                                                                       \
            return;                                                                 \
        }                                                                           \
        for (int64_t r = 0; r < rows; r++)                                          \
            NAME##_run(o + r * os[0], pa + r * os[1], pb + r * os[2], s, n);        \
    }                                                                               \
    static int k_##NAME(void *ctx, const oar_kernel_call *c) {                      \
        (void)ctx;                                                                  \
        oari_iter_call2d(c, NAME, NAME##_2d, NULL);                                 \
        return 0;                                                                   \
    }

#define K_FLOAT(op) [OAR_F32] = k_##op##_f32, [OAR_F64] = k_##op##_f64
#define K_COMPLEX(op) [OAR_C64] = k_##op##_c64, [OAR_C128] = k_##op##_c128
#define K_INT(op) [OAR_U8] = k_##op##_u8, [OAR_I32] = k_##op##_i32, [OAR_I64] = k_##op##_i64

/* Integer add/sub/mul wrap as two's complement (PyTorch does); computed in
 * unsigned arithmetic so overflow is defined. */
#define ARITH_ALL(OPNAME, FEXPR, UEXPR)                                             \
    BINARY_LOOP(OPNAME##_f32, float, float, FEXPR)                                  \
    BINARY_LOOP(OPNAME##_f64, double, double, FEXPR)                                \
    BINARY_LOOP(OPNAME##_c64, c64_t, c64_t, FEXPR)                                  \
    BINARY_LOOP(OPNAME##_c128, c128_t, c128_t, FEXPR)                               \
    BINARY_LOOP(OPNAME##_u8, uint8_t, uint8_t, (uint8_t)(UEXPR))                    \
    BINARY_LOOP(OPNAME##_i32, int32_t, int32_t, (int32_t)(uint32_t)(UEXPR))         \
    BINARY_LOOP(OPNAME##_i64, int64_t, int64_t, (int64_t)(UEXPR))

/* bool: add is or, mul is and (PyTorch) */
BINARY_LOOP(or_b1, uint8_t, uint8_t, (uint8_t)(a | b))
BINARY_LOOP(and_b1, uint8_t, uint8_t, (uint8_t)(a & b))

ARITH_ALL(add, a + b, (uint64_t)a + (uint64_t)b)
const oari_cpu_kernels oari_cpu_k_add = {[OAR_BOOL] = k_or_b1, K_INT(add), K_FLOAT(add),
                                         K_COMPLEX(add)};
ARITH_ALL(sub, a - b, (uint64_t)a - (uint64_t)b)
const oari_cpu_kernels oari_cpu_k_sub = {K_INT(sub), K_FLOAT(sub), K_COMPLEX(sub)};
ARITH_ALL(mul, a * b, (uint64_t)a * (uint64_t)b)
const oari_cpu_kernels oari_cpu_k_mul = {[OAR_BOOL] = k_and_b1, K_INT(mul), K_FLOAT(mul),
                                         K_COMPLEX(mul)};

/* true division (the shape rule promotes integers to f32) */
BINARY_LOOP(div_f32, float, float, a / b)
BINARY_LOOP(div_f64, double, double, a / b)
BINARY_LOOP(div_c64, c64_t, c64_t, a / b)
BINARY_LOOP(div_c128, c128_t, c128_t, a / b)
const oari_cpu_kernels oari_cpu_k_div = {K_FLOAT(div), K_COMPLEX(div)};

/* ---- floor division and remainder (Python semantics) ----
 * Integers: a divisor of 0 gives 0 (defined here; PyTorch raises), and
 * INT_MIN // -1 wraps to INT_MIN. */
static inline int64_t i_floordiv(int64_t a, int64_t b) {
    if (b == 0) return 0;
    if (b == -1) return (int64_t)(0u - (uint64_t)a);
    int64_t q = a / b;
    if (a % b != 0 && ((a < 0) != (b < 0))) q--;
    return q;
}
static inline int64_t i_remainder(int64_t a, int64_t b) {
    if (b == 0 || b == -1) return 0;
    int64_t r = a % b;
    if (r != 0 && ((r < 0) != (b < 0))) r += b;
    return r;
}
/* Floating floor division as PyTorch's div_floor_floating: exact for
 * representable quotients, x / 0 gives +-inf or NaN. */
#define FLOORDIV_F(T, SUFFIX)                                                       \
    static inline T floordiv_##SUFFIX(T a, T b) {                                   \
        if (b == 0) return a / b;                                                   \
        T mod = fmod##SUFFIX(a, b);                                                 \
        T div = (a - mod) / b;                                                      \
        if (mod != 0 && ((b < 0) != (mod < 0))) div -= 1;                           \
        if (div == 0) return copysign##SUFFIX(0, a / b);                            \
        T fd = floor##SUFFIX(div);                                                  \
        if (div - fd > (T)0.5) fd += 1;                                             \
        return fd;                                                                  \
    }                                                                               \
    static inline T remainder_##SUFFIX(T a, T b) {                                  \
        T mod = fmod##SUFFIX(a, b);                                                 \
        if (mod != 0 && ((b < 0) != (mod < 0))) mod += b;                           \
        return mod;                                                                 \
    }
FLOORDIV_F(float, f)
FLOORDIV_F(double, )

BINARY_LOOP(floor_div_f32, float, float, floordiv_f(a, b))
BINARY_LOOP(floor_div_f64, double, double, floordiv_(a, b))
BINARY_LOOP(floor_div_u8, uint8_t, uint8_t, (uint8_t)(b ? a / b : 0))
BINARY_LOOP(floor_div_i32, int32_t, int32_t, (int32_t)i_floordiv(a, b))
BINARY_LOOP(floor_div_i64, int64_t, int64_t, i_floordiv(a, b))
const oari_cpu_kernels oari_cpu_k_floor_div = {K_INT(floor_div), K_FLOAT(floor_div)};

BINARY_LOOP(remainder_f32, float, float, remainder_f(a, b))
BINARY_LOOP(remainder_f64, double, double, remainder_(a, b))
BINARY_LOOP(remainder_u8, uint8_t, uint8_t, (uint8_t)(b ? a % b : 0))
BINARY_LOOP(remainder_i32, int32_t, int32_t, (int32_t)i_remainder(a, b))
BINARY_LOOP(remainder_i64, int64_t, int64_t, i_remainder(a, b))
const oari_cpu_kernels oari_cpu_k_remainder = {K_INT(remainder), K_FLOAT(remainder)};

/* ---- pow ----
 * Integers by squaring, wrapping (low bits of the 64-bit product); negative
 * exponents as PyTorch's tensor kernel: 1 for base 1, +-1 for base -1, else 0. */
static inline int64_t i_pow(int64_t a, int64_t b) {
    if (b < 0) return a == 1 ? 1 : a == -1 ? ((b & 1) ? -1 : 1) : 0;
    uint64_t r = 1, base = (uint64_t)a;
    while (b) {
        if (b & 1) r *= base;
        base *= base;
        b >>= 1;
    }
    return (int64_t)r;
}
BINARY_LOOP(pow_f32, float, float, powf(a, b))
BINARY_LOOP(pow_f64, double, double, pow(a, b))
BINARY_LOOP(pow_c64, c64_t, c64_t, cpowf(a, b))
BINARY_LOOP(pow_c128, c128_t, c128_t, cpow(a, b))
BINARY_LOOP(pow_u8, uint8_t, uint8_t, (uint8_t)i_pow(a, b))
BINARY_LOOP(pow_i32, int32_t, int32_t, (int32_t)i_pow(a, b))
BINARY_LOOP(pow_i64, int64_t, int64_t, i_pow(a, b))
const oari_cpu_kernels oari_cpu_k_pow = {K_INT(pow), K_FLOAT(pow), K_COMPLEX(pow)};

BINARY_LOOP(atan2_f32, float, float, atan2f(a, b))
BINARY_LOOP(atan2_f64, double, double, atan2(a, b))
const oari_cpu_kernels oari_cpu_k_atan2 = {K_FLOAT(atan2)};

/* maximum/minimum propagate NaN (PyTorch) */
#define EXTREME_ALL(op, CMP)                                                        \
    BINARY_LOOP(op##_f32, float, float, (a != a || a CMP b) ? a : b)                \
    BINARY_LOOP(op##_f64, double, double, (a != a || a CMP b) ? a : b)              \
    BINARY_LOOP(op##_u8, uint8_t, uint8_t, a CMP b ? a : b)                         \
    BINARY_LOOP(op##_i32, int32_t, int32_t, a CMP b ? a : b)                        \
    BINARY_LOOP(op##_i64, int64_t, int64_t, a CMP b ? a : b)
EXTREME_ALL(maximum, >)
EXTREME_ALL(minimum, <)
const oari_cpu_kernels oari_cpu_k_maximum = {[OAR_BOOL] = k_or_b1, K_INT(maximum), K_FLOAT(maximum)};
const oari_cpu_kernels oari_cpu_k_minimum = {[OAR_BOOL] = k_and_b1, K_INT(minimum), K_FLOAT(minimum)};

/* ---- comparisons -> bool ---- */
#define CMP_REAL(op, CMP)                                                           \
    BINARY_LOOP(op##_b1, uint8_t, uint8_t, (uint8_t)(a CMP b))                      \
    BINARY_LOOP(op##_u8, uint8_t, uint8_t, (uint8_t)(a CMP b))                      \
    BINARY_LOOP(op##_i32, int32_t, uint8_t, (uint8_t)(a CMP b))                     \
    BINARY_LOOP(op##_i64, int64_t, uint8_t, (uint8_t)(a CMP b))                     \
    BINARY_LOOP(op##_f32, float, uint8_t, (uint8_t)(a CMP b))                       \
    BINARY_LOOP(op##_f64, double, uint8_t, (uint8_t)(a CMP b))
#define K_CMP(op) [OAR_BOOL] = k_##op##_b1, K_INT(op), K_FLOAT(op)
CMP_REAL(eq, ==)
CMP_REAL(ne, !=)
CMP_REAL(lt, <)
CMP_REAL(le, <=)
CMP_REAL(gt, >)
CMP_REAL(ge, >=)
BINARY_LOOP(eq_c64, c64_t, uint8_t, (uint8_t)(a == b))
BINARY_LOOP(eq_c128, c128_t, uint8_t, (uint8_t)(a == b))
BINARY_LOOP(ne_c64, c64_t, uint8_t, (uint8_t)(a != b))
BINARY_LOOP(ne_c128, c128_t, uint8_t, (uint8_t)(a != b))
const oari_cpu_kernels oari_cpu_k_eq = {K_CMP(eq), K_COMPLEX(eq)};
const oari_cpu_kernels oari_cpu_k_ne = {K_CMP(ne), K_COMPLEX(ne)};
const oari_cpu_kernels oari_cpu_k_lt = {K_CMP(lt)};
const oari_cpu_kernels oari_cpu_k_le = {K_CMP(le)};
const oari_cpu_kernels oari_cpu_k_gt = {K_CMP(gt)};
const oari_cpu_kernels oari_cpu_k_ge = {K_CMP(ge)};

/* ---- logical (inputs cast to bool by the shape rule; complex: z != 0) ---- */
BINARY_LOOP(logical_and_b1, uint8_t, uint8_t, (uint8_t)((a != 0) & (b != 0)))
BINARY_LOOP(logical_or_b1, uint8_t, uint8_t, (uint8_t)((a != 0) | (b != 0)))
BINARY_LOOP(logical_xor_b1, uint8_t, uint8_t, (uint8_t)((a != 0) ^ (b != 0)))
#define LOGICAL_C(op, OPER)                                                         \
    BINARY_LOOP(op##_c64, c64_t, uint8_t, (uint8_t)((a != 0) OPER (b != 0)))        \
    BINARY_LOOP(op##_c128, c128_t, uint8_t, (uint8_t)((a != 0) OPER (b != 0)))     \
    const oari_cpu_kernels oari_cpu_k_##op = {[OAR_BOOL] = k_##op##_b1, K_COMPLEX(op)};
LOGICAL_C(logical_and, &)
LOGICAL_C(logical_or, |)
LOGICAL_C(logical_xor, ^)

/* ---- where: out = in[0] ? in[1] : in[2]; one loop per element size ---- */
#define WHERE_LOOP(NAME, T)                                                         \
    static void NAME(char **p, const int64_t *s, int64_t n, void *ctx) {            \
        (void)ctx;                                                                  \
        T *o = (T *)p[0];                                                           \
        const uint8_t *pc = (const uint8_t *)p[1];                                  \
        const T *pa = (const T *)p[2], *pb = (const T *)p[3];                       \
        if (s[0] == 1 && s[1] == 1 && s[2] == 1 && s[3] == 1) {                     \
            _Pragma("omp simd")                                                     \
            for (int64_t i = 0; i < n; i++) {                                       \
                T av = pa[i], bv = pb[i];                                           \
                o[i] = pc[i] ? av : bv;                                             \
            }                                                                       \
        } else {                                                                    \
            for (int64_t i = 0; i < n; i++)                                         \
                o[i * s[0]] = pc[i * s[1]] ? pa[i * s[2]] : pb[i * s[3]];           \
        }                                                                           \
    }                                                                               \
    static int k_##NAME(void *ctx, const oar_kernel_call *c) {                      \
        (void)ctx;                                                                  \
        oari_iter_call(c, NAME, NULL);                                              \
        return 0;                                                                   \
    }
typedef struct { uint64_t lo, hi; } where_b16;
WHERE_LOOP(where_1, uint8_t)
WHERE_LOOP(where_2, uint16_t)
WHERE_LOOP(where_4, uint32_t)
WHERE_LOOP(where_8, uint64_t)
WHERE_LOOP(where_16, where_b16)
const oari_cpu_kernels oari_cpu_k_where = {
    [OAR_BOOL] = k_where_1, [OAR_U8] = k_where_1, [OAR_I32] = k_where_4, [OAR_I64] = k_where_8,
    [OAR_F16] = k_where_2, [OAR_BF16] = k_where_2, [OAR_F32] = k_where_4, [OAR_F64] = k_where_8,
    [OAR_C64] = k_where_8, [OAR_C128] = k_where_16};

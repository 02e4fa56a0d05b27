/* CPU kernels of the unary elementwise ops. Each op gets an inner loop per
 * dtype from UNARY_LOOP; f16/bf16 run through the f32 kernels (dispatch
 * converts), so only f32/f64, integer and complex loops are written here. */
#include "cpu.h"

#include <math.h>

#define UNARY_LOOP(NAME, TI, TO, EXPR)                                              \
    static void NAME(char **p, const int64_t *s, int64_t n, void *ctx) {            \
        (void)ctx;                                                                  \
        TO *o = (TO *)p[0];                                                         \
        const TI *a = (const TI *)p[1];                                             \
        if (s[0] == 1 && s[1] == 1) {                                               \
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
        oari_iter_call(c, NAME, NULL);                                              \
        return 0;                                                                   \
    }

/* neg */
UNARY_LOOP(neg_f32, float, float, -x)
UNARY_LOOP(neg_f64, double, double, -x)
UNARY_LOOP(neg_u8, uint8_t, uint8_t, (uint8_t)(0u - x))
UNARY_LOOP(neg_i32, int32_t, int32_t, (int32_t)(0u - (uint32_t)x))
UNARY_LOOP(neg_i64, int64_t, int64_t, (int64_t)(0u - (uint64_t)x))
UNARY_LOOP(neg_c64, c64_t, c64_t, -x)
UNARY_LOOP(neg_c128, c128_t, c128_t, -x)
const oari_cpu_kernels oari_cpu_k_neg = {
    [OAR_U8] = k_neg_u8, [OAR_I32] = k_neg_i32, [OAR_I64] = k_neg_i64, [OAR_F32] = k_neg_f32,
    [OAR_F64] = k_neg_f64, [OAR_C64] = k_neg_c64, [OAR_C128] = k_neg_c128};

/* exp */
UNARY_LOOP(exp_f32, float, float, expf(x))
UNARY_LOOP(exp_f64, double, double, exp(x))
UNARY_LOOP(exp_c64, c64_t, c64_t, cexpf(x))
UNARY_LOOP(exp_c128, c128_t, c128_t, cexp(x))
const oari_cpu_kernels oari_cpu_k_exp = {[OAR_F32] = k_exp_f32, [OAR_F64] = k_exp_f64,
                                         [OAR_C64] = k_exp_c64, [OAR_C128] = k_exp_c128};

/* conj: identity on real dtypes */
UNARY_LOOP(conj_c64, c64_t, c64_t, conjf(x))
UNARY_LOOP(conj_c128, c128_t, c128_t, conj(x))
UNARY_LOOP(copy_b1, uint8_t, uint8_t, x)
UNARY_LOOP(copy_i32, int32_t, int32_t, x)
UNARY_LOOP(copy_i64, int64_t, int64_t, x)
UNARY_LOOP(copy_f32, float, float, x)
UNARY_LOOP(copy_f64, double, double, x)
UNARY_LOOP(copy_h, uint16_t, uint16_t, x)
const oari_cpu_kernels oari_cpu_k_conj = {
    [OAR_BOOL] = k_copy_b1, [OAR_U8] = k_copy_b1, [OAR_I32] = k_copy_i32, [OAR_I64] = k_copy_i64,
    [OAR_F16] = k_copy_h, [OAR_BF16] = k_copy_h, [OAR_F32] = k_copy_f32, [OAR_F64] = k_copy_f64,
    [OAR_C64] = k_conj_c64, [OAR_C128] = k_conj_c128};

/* real: complex -> real part; identity on real dtypes */
UNARY_LOOP(real_c64, c64_t, float, crealf(x))
UNARY_LOOP(real_c128, c128_t, double, creal(x))
const oari_cpu_kernels oari_cpu_k_real = {
    [OAR_BOOL] = k_copy_b1, [OAR_U8] = k_copy_b1, [OAR_I32] = k_copy_i32, [OAR_I64] = k_copy_i64,
    [OAR_F16] = k_copy_h, [OAR_BF16] = k_copy_h, [OAR_F32] = k_copy_f32, [OAR_F64] = k_copy_f64,
    [OAR_C64] = k_real_c64, [OAR_C128] = k_real_c128};

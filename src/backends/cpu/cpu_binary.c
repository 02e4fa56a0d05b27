/* CPU kernels of the binary elementwise ops. Inputs arrive broadcast to the
 * output's shape (stride 0 on broadcast dims) and cast to one dtype;
 * f16/bf16 run through the f32 kernels. */
#include "cpu.h"

#include <math.h>

#define BINARY_LOOP(NAME, TI, TO, EXPR)                                             \
    static void NAME(char **p, const int64_t *s, int64_t n, void *ctx) {            \
        (void)ctx;                                                                  \
        TO *o = (TO *)p[0];                                                         \
        const TI *pa = (const TI *)p[1], *pb = (const TI *)p[2];                    \
        if (s[0] == 1 && s[1] == 1 && s[2] == 1) {                                  \
            for (int64_t i = 0; i < n; i++) {                                       \
                TI a = pa[i], b = pb[i];                                            \
                o[i] = (EXPR);                                                      \
            }                                                                       \
        } else if (s[0] == 1 && s[1] == 1 && s[2] == 0) {                           \
            TI b = pb[0];                                                           \
            for (int64_t i = 0; i < n; i++) {                                       \
                TI a = pa[i];                                                       \
                o[i] = (EXPR);                                                      \
            }                                                                       \
        } else {                                                                    \
            for (int64_t i = 0; i < n; i++) {                                       \
                TI a = pa[i * s[1]], b = pb[i * s[2]];                              \
                o[i * s[0]] = (EXPR);                                               \
            }                                                                       \
        }                                                                           \
    }                                                                               \
    static int k_##NAME(void *ctx, const oar_kernel_call *c) {                      \
        (void)ctx;                                                                  \
        oari_iter_call(c, NAME, NULL);                                              \
        return 0;                                                                   \
    }

/* Integer add/mul wrap as two's complement (PyTorch does); computed in
 * unsigned arithmetic so overflow is defined. */
#define ARITH_ALL(OPNAME, FEXPR, UEXPR)                                             \
    BINARY_LOOP(OPNAME##_f32, float, float, FEXPR)                                  \
    BINARY_LOOP(OPNAME##_f64, double, double, FEXPR)                                \
    BINARY_LOOP(OPNAME##_c64, c64_t, c64_t, FEXPR)                                  \
    BINARY_LOOP(OPNAME##_c128, c128_t, c128_t, FEXPR)                               \
    BINARY_LOOP(OPNAME##_u8, uint8_t, uint8_t, (uint8_t)(UEXPR))                    \
    BINARY_LOOP(OPNAME##_i32, int32_t, int32_t, (int32_t)(uint32_t)(UEXPR))         \
    BINARY_LOOP(OPNAME##_i64, int64_t, int64_t, (int64_t)(UEXPR))                   \
    const oari_cpu_kernels oari_cpu_k_##OPNAME = {                                  \
        [OAR_U8] = k_##OPNAME##_u8, [OAR_I32] = k_##OPNAME##_i32,                   \
        [OAR_I64] = k_##OPNAME##_i64, [OAR_F32] = k_##OPNAME##_f32,                 \
        [OAR_F64] = k_##OPNAME##_f64, [OAR_C64] = k_##OPNAME##_c64,                 \
        [OAR_C128] = k_##OPNAME##_c128};

ARITH_ALL(add, a + b, (uint64_t)a + (uint64_t)b)
ARITH_ALL(mul, a * b, (uint64_t)a * (uint64_t)b)

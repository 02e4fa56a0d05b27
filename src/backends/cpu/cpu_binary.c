/* CPU kernels of the binary elementwise ops and where: one loop per row of
 * src/ops/elementwise.def and dtype of its cpu column, made from the row's
 * formula (cpu_ew.h reads it per dtype); where's, by element size. Inputs
 * arrive broadcast to the output's shape (stride 0 on broadcast dims) and
 * cast to one dtype; f16/bf16 run through the f32 kernels. Contiguous runs
 * (and runs with one broadcast scalar operand) take `omp simd` loops. */
#include "cpu.h"

#include <math.h>

/* Comparisons are not if-converted under the default -ftrapping-math,
 * which keeps selects (relu, clamp, maximum, where, ...) out of vector
 * loops, and errno keeps sqrt a call. Kernels never read floating-point
 * exception flags or errno, so drop both here; values are unchanged (NaN
 * and infinity semantics are kept). */
#pragma GCC optimize("no-trapping-math", "no-math-errno")

#include "cpu_vmath.h"
#include "cpu_ew.h"

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

/* The rows: one loop per dtype of each row's cpu column, from its formula
 * (cpu_ew.h reads the table per dtype), and the kernel tables. */
#define EW_BINARY(op, rule, cpu, gen, api, forward, gradient, saved, test, onnx, doc)      \
    EW_IN_CPU(cpu)(EW_BINARY_LOOP(EW_SFX_NAME(op##_), EW_TI, EW_OUT_T(rule), forward))
#define EW_BINARY_LOOP(NAME, TI, TO, EXPR) BINARY_LOOP(NAME, TI, TO, EXPR)
#define EW_UNARY(...)
#define EW_TERNARY(...)
#define EW_NONE(op, why)
#include "cpu_ew_passes.h"

#undef EW_BINARY
#define EW_BINARY(op, rule, cpu, ...) EW_CPU_TABLE(op, cpu)
#include "../../ops/elementwise.def"

/* ---- where: out = in[0] ? in[1] : in[2]; one loop per element size ----
 * A contiguous run with a contiguous mask takes an `omp simd` loop for each
 * of the values being contiguous or one broadcast scalar (a causal mask's
 * fill: where(mask, scores, -inf)); the rest a strided loop. */
#define WHERE_RUN(T, SA, SB)                                                        \
    _Pragma("omp simd")                                                             \
    for (int64_t i = 0; i < n; i++) {                                               \
        T av = pa[i * (SA)], bv = pb[i * (SB)];                                     \
        o[i] = pc[i] ? av : bv;                                                     \
    }
#define WHERE_LOOP(NAME, T)                                                         \
    OARI_SIMD_CLONES                                                                \
    static void NAME(char **p, const int64_t *s, int64_t n, void *ctx) {            \
        (void)ctx;                                                                  \
        T *o = (T *)p[0];                                                           \
        const uint8_t *pc = (const uint8_t *)p[1];                                  \
        const T *pa = (const T *)p[2], *pb = (const T *)p[3];                       \
        const bool run = s[0] == 1 && s[1] == 1;                                    \
        if (run && s[2] == 1 && s[3] == 1) {                                        \
            WHERE_RUN(T, 1, 1)                                                      \
        } else if (run && s[2] == 1 && s[3] == 0) {                                 \
            WHERE_RUN(T, 1, 0)                                                      \
        } else if (run && s[2] == 0 && s[3] == 1) {                                 \
            WHERE_RUN(T, 0, 1)                                                      \
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
    [OAR_BOOL] = k_where_1, [OAR_U8] = k_where_1, [OAR_I8] = k_where_1, [OAR_I32] = k_where_4,
    [OAR_I64] = k_where_8,
    [OAR_F16] = k_where_2, [OAR_BF16] = k_where_2, [OAR_F32] = k_where_4, [OAR_F64] = k_where_8,
    [OAR_C64] = k_where_8, [OAR_C128] = k_where_16};

/* CPU kernels of the unary elementwise ops: one inner loop per row of
 * src/ops/elementwise.def and dtype of its cpu column, made from the row's
 * formula (cpu_ew.h reads it per dtype). f16/bf16 run through the f32
 * kernels (dispatch converts), but for the identities (conj, real).
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

#include "cpu_ew.h"

/* The loop NAME over (output, input) and its kernel k_NAME. p0, p1 are the
 * row's float attributes P0, P1 in the input's type (cpu_ew.h), read once
 * per run. */
#define UNARY_LOOP(NAME, TI, TO, EXPR)                                              \
    OARI_SIMD_CLONES                                                                \
    static void NAME(char **p, const int64_t *s, int64_t n, void *ctx) {            \
        const double *fa = (const double *)ctx;                                     \
        const TI p0 = EW_ATTR(fa[0], true), p1 = EW_ATTR(fa[1], false);             \
        (void)fa, (void)p0, (void)p1;                                               \
        TO *o = (TO *)p[0];                                                         \
        const TI *px = (const TI *)p[1];                                            \
        if (s[0] == 1 && s[1] == 1) {                                               \
            _Pragma("omp simd")                                                     \
            for (int64_t i = 0; i < n; i++) {                                       \
                TI x = px[i];                                                       \
                o[i] = (EXPR);                                                      \
            }                                                                       \
        } else {                                                                    \
            for (int64_t i = 0; i < n; i++) {                                       \
                TI x = px[i * s[1]];                                                \
                o[i * s[0]] = (EXPR);                                               \
            }                                                                       \
        }                                                                           \
    }                                                                               \
    static int k_##NAME(void *ctx, const oar_kernel_call *c) {                      \
        (void)ctx;                                                                  \
        double fa[2] = {c->n_fattr > 0 ? c->fattr[0] : 0, c->n_fattr > 1 ? c->fattr[1] : 0}; \
        oari_iter_call(c, NAME, fa);                                                \
        return 0;                                                                   \
    }

/* A row's loops: one, or (ALT) one per form, picked outside the loop by
 * integer attribute 0 (gelu: erf or tanh form). */
#define EW_LOOPS(...) EW_LOOPS_(__VA_ARGS__)
#define EW_LOOPS_(NAME, TI, TO, EXPR, alt_kind, ALT_EXPR) alt_kind(NAME, TI, TO, EXPR, ALT_EXPR)
#define EW_ALT1(NAME, TI, TO, EXPR, unused) UNARY_LOOP(NAME, TI, TO, EXPR)
#define EW_ALT2(NAME, TI, TO, EXPR, ALT_EXPR)                                       \
    UNARY_LOOP(NAME##_form0, TI, TO, EXPR)                                          \
    UNARY_LOOP(NAME##_form1, TI, TO, ALT_EXPR)                                      \
    static int k_##NAME(void *ctx, const oar_kernel_call *c) {                      \
        return c->n_iattr && c->iattr[0] ? k_##NAME##_form1(ctx, c) : k_##NAME##_form0(ctx, c); \
    }
#define EW_LOOPS_NAMED(NAME, ...) EW_LOOPS(NAME, __VA_ARGS__)

#define EW_UNARY(op, rule, cpu, gen, api, forward, alt, gradient, saved, test, onnx, doc) \
    EW_IN_CPU(cpu)(EW_LOOPS_NAMED(EW_SFX_NAME(op##_), EW_TI, EW_OUT_T(rule), forward, alt))
#define EW_BINARY(...)
#define EW_TERNARY(...)
#define EW_NONE(op, why)
#include "cpu_ew_passes.h"

/* the kernel tables, oari_cpu_k_<op> */
#undef EW_UNARY
#define EW_UNARY(op, rule, cpu, ...) EW_CPU_TABLE(op, cpu)
#include "../../ops/elementwise.def"

/* The CPU's reading of the elementwise table (src/ops/elementwise.def):
 * the table is read once per dtype suffix (cpu_ew_passes.h), and in each
 * pass a formula's plain words (MUL, EXP, C(v), ONE, P0, ...) mean that
 * suffix's words of src/ops/ew_math.h (MUL_f32, EXP_f32, ...). A row is
 * instantiated in the passes of the suffixes its cpu column holds; the
 * includer (cpu_unary.c, cpu_binary.c) defines what a row becomes, with
 * EW_TI (the suffix's C type), EW_OUT_T(rule) (the output's) and
 * EW_SFX_NAME(op##_) (op_<suffix>) of ew_words.h. Include after cpu_vmath.h. */
#ifndef OARI_CPU_EW_H
#define OARI_CPU_EW_H

#include "../../ops/ew_math.h"
#include "../../ops/ew_table.h"

/* Generic formulas instantiated for u8 compare it with 0, etc. */
#pragma GCC diagnostic ignored "-Wtype-limits"

#include "../../ops/ew_words.h"

/* alt column: a kind and the formula (cpu_unary.c reads it) */
#define ALT(f) EW_ALT2, f
#define NO_ALT EW_ALT1, 0

/* ---- float attributes P0, P1 in the pass's type: integers saturate to the
 * dtype's range, NaN meaning the lowest (P0) or highest (P1) value ---- */
static inline int64_t ew_int_attr(double v, bool lower, int64_t mn, int64_t mx) {
    if (isnan(v)) return lower ? mn : mx;
    if (v <= (double)mn) return mn;
    if (v >= (double)mx) return mx;
    return (int64_t)v;
}
#define EW_ATTR(v, lower) EW_CAT(EW_ATTR_, EW_SFX)(v, lower)
#define EW_ATTR_f32(v, lower) ((float)(v))
#define EW_ATTR_f64(v, lower) (v)
#define EW_ATTR_c64(v, lower) ((float)(v))
#define EW_ATTR_c128(v, lower) (v)
#define EW_ATTR_u8(v, lower) ((uint8_t)ew_int_attr(v, lower, 0, 255))
#define EW_ATTR_i8(v, lower) ((int8_t)ew_int_attr(v, lower, INT8_MIN, INT8_MAX))
#define EW_ATTR_i32(v, lower) ((int32_t)ew_int_attr(v, lower, INT32_MIN, INT32_MAX))
#define EW_ATTR_i64(v, lower) ew_int_attr(v, lower, INT64_MIN, INT64_MAX)
#define EW_ATTR_b1(v, lower) ((uint8_t)0)
#define EW_ATTR_h16(v, lower) ((uint16_t)0)

/* ---- the cpu column: which passes instantiate a row. Each pass keeps one
 * kind of suffix (EW_PASS_<kind> is EW_KEEP, the others EW_DROP): b bool,
 * i u8 i8 i32 i64, h f16/bf16 bits, r f32 f64, c complex ---- */
#define EW_IN_CPU(cpu) EW_CAT(EW_IN_, cpu)
#define EW_IN_CPU_R(...) EW_PASS_R(__VA_ARGS__)
#define EW_IN_CPU_RC(...) EW_PASS_R(__VA_ARGS__) EW_PASS_C(__VA_ARGS__)
#define EW_IN_CPU_IR(...) EW_PASS_I(__VA_ARGS__) EW_PASS_R(__VA_ARGS__)
#define EW_IN_CPU_IRC(...) EW_PASS_I(__VA_ARGS__) EW_PASS_R(__VA_ARGS__) EW_PASS_C(__VA_ARGS__)
#define EW_IN_CPU_BIR(...) EW_PASS_B(__VA_ARGS__) EW_PASS_I(__VA_ARGS__) EW_PASS_R(__VA_ARGS__)
#define EW_IN_CPU_BIRC(...) EW_IN_CPU_BIR(__VA_ARGS__) EW_PASS_C(__VA_ARGS__)
#define EW_IN_CPU_BC(...) EW_PASS_B(__VA_ARGS__) EW_PASS_C(__VA_ARGS__)
#define EW_IN_CPU_C(...) EW_PASS_C(__VA_ARGS__)
#define EW_IN_CPU_ALL(...) EW_IN_CPU_BIRC(__VA_ARGS__) EW_PASS_H(__VA_ARGS__)
#define EW_IN_CPU_OWN(why) EW_DROP

/* ---- the kernel table of a row: oari_cpu_k_<op>, k_<op>_<suffix> ---- */
#define EW_CPU_TABLE(op, cpu) EW_CAT(EW_TABLE_, cpu)(op)
#define EW_KB(op) [OAR_BOOL] = k_##op##_b1,
#define EW_KI(op) [OAR_U8] = k_##op##_u8, [OAR_I8] = k_##op##_i8, [OAR_I32] = k_##op##_i32, \
                  [OAR_I64] = k_##op##_i64,
#define EW_KH(op) [OAR_F16] = k_##op##_h16, [OAR_BF16] = k_##op##_h16,
#define EW_KR(op) [OAR_F32] = k_##op##_f32, [OAR_F64] = k_##op##_f64,
#define EW_KC(op) [OAR_C64] = k_##op##_c64, [OAR_C128] = k_##op##_c128,
#define EW_TABLE(op, ...) const oari_cpu_kernels oari_cpu_k_##op = {__VA_ARGS__};
#define EW_TABLE_CPU_R(op) EW_TABLE(op, EW_KR(op))
#define EW_TABLE_CPU_RC(op) EW_TABLE(op, EW_KR(op) EW_KC(op))
#define EW_TABLE_CPU_IR(op) EW_TABLE(op, EW_KI(op) EW_KR(op))
#define EW_TABLE_CPU_IRC(op) EW_TABLE(op, EW_KI(op) EW_KR(op) EW_KC(op))
#define EW_TABLE_CPU_BIR(op) EW_TABLE(op, EW_KB(op) EW_KI(op) EW_KR(op))
#define EW_TABLE_CPU_BIRC(op) EW_TABLE(op, EW_KB(op) EW_KI(op) EW_KR(op) EW_KC(op))
#define EW_TABLE_CPU_BC(op) EW_TABLE(op, EW_KB(op) EW_KC(op))
#define EW_TABLE_CPU_C(op) EW_TABLE(op, EW_KC(op))
#define EW_TABLE_CPU_ALL(op) EW_TABLE(op, EW_KB(op) EW_KI(op) EW_KH(op) EW_KR(op) EW_KC(op))
#define EW_TABLE_CPU_OWN(why) EW_DROP

#endif

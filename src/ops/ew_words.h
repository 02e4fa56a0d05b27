/* The value reading of a formula's plain words (src/ops/elementwise.def):
 * in a pass over the table for one dtype suffix, EW_SFX, each word means
 * that suffix's word of src/ops/ew_math.h (MUL is MUL_f32, C(v) C_f32(v),
 * ...). The inputs are the reader's variables x, a, b, c, and the float
 * attributes P0, P1 its variables p0, p1. Read by the CPU kernels
 * (src/backends/cpu/cpu_ew.h) and the device plugins' kernels. */
#ifndef OARI_EW_WORDS_H
#define OARI_EW_WORDS_H

#define EW_W(word) EW_CAT(word##_, EW_SFX)
#define C(v) EW_W(C)(v)
#define ONE EW_W(ONE)
#define ZERO EW_W(ZERO)
#define P0 p0
#define P1 p1
#define ADD(a, b) EW_W(ADD)(a, b)
#define SUB(a, b) EW_W(SUB)(a, b)
#define MUL(a, b) EW_W(MUL)(a, b)
#define DIV(a, b) EW_W(DIV)(a, b)
#define NEG(a) EW_W(NEG)(a)
#define SQUARE(a) EW_W(SQUARE)(a)
#define RECIPROCAL(a) EW_W(RECIPROCAL)(a)
#define EXP(a) EW_W(EXP)(a)
#define EXP_LIBM(a) EW_W(EXP_LIBM)(a)
#define EXP2(a) EW_W(EXP2)(a)
#define LOG(a) EW_W(LOG)(a)
#define LOG2(a) EW_W(LOG2)(a)
#define LOG1P(a) EW_W(LOG1P)(a)
#define EXPM1(a) EW_W(EXPM1)(a)
#define SQRT(a) EW_W(SQRT)(a)
#define RSQRT(a) EW_W(RSQRT)(a)
#define SIN(a) EW_W(SIN)(a)
#define COS(a) EW_W(COS)(a)
#define TAN(a) EW_W(TAN)(a)
#define ASIN(a) EW_W(ASIN)(a)
#define ACOS(a) EW_W(ACOS)(a)
#define ATAN(a) EW_W(ATAN)(a)
#define SINH(a) EW_W(SINH)(a)
#define COSH(a) EW_W(COSH)(a)
#define TANH(a) EW_W(TANH)(a)
#define SIGMOID(a) EW_W(SIGMOID)(a)
#define ERF(a) EW_W(ERF)(a)
#define ERFC(a) EW_W(ERFC)(a)
#define GELU_ERF(a) EW_W(GELU_ERF)(a)
#define GELU_GRAD(a) EW_W(GELU_GRAD)(a)
#define ABS(a) EW_W(ABS)(a)
#define SIGN(a) EW_W(SIGN)(a)
#define FLOOR(a) EW_W(FLOOR)(a)
#define CEIL(a) EW_W(CEIL)(a)
#define ROUND(a) EW_W(ROUND)(a)
#define TRUNC(a) EW_W(TRUNC)(a)
#define CONJ(a) EW_W(CONJ)(a)
#define REAL(a) EW_W(REAL)(a)
#define IMAG(a) EW_W(IMAG)(a)
#define ANGLE(a) EW_W(ANGLE)(a)
#define ISNAN(a) EW_W(ISNAN)(a)
#define ISINF(a) EW_W(ISINF)(a)
#define NOT(a) EW_W(NOT)(a)
#define POW(a, b) EW_W(POW)(a, b)
#define ATAN2(a, b) EW_W(ATAN2)(a, b)
#define FLOOR_DIV(a, b) EW_W(FLOOR_DIV)(a, b)
#define REMAINDER(a, b) EW_W(REMAINDER)(a, b)
#define MAXIMUM(a, b) EW_W(MAXIMUM)(a, b)
#define MINIMUM(a, b) EW_W(MINIMUM)(a, b)
#define EQ(a, b) EW_W(EQ)(a, b)
#define NE(a, b) EW_W(NE)(a, b)
#define LT(a, b) EW_W(LT)(a, b)
#define LE(a, b) EW_W(LE)(a, b)
#define GT(a, b) EW_W(GT)(a, b)
#define GE(a, b) EW_W(GE)(a, b)
#define AND(a, b) EW_W(AND)(a, b)
#define OR(a, b) EW_W(OR)(a, b)
#define XOR(a, b) EW_W(XOR)(a, b)
#define WHERE(c, a, b) EW_W(WHERE)(c, a, b)

/* ---- a pass's types: the input's (the suffix's), the output's by the row's rule; a kernel's name ---- */
#define EW_TI EW_CAT(EW_TYPE_, EW_SFX)
/* EW_SFX_NAME(op##_): op_<suffix>; op pasted in the row's own macro, so that
 * an op named like a macro of the target (OpenCL's exp) stays a name */
#define EW_SFX_NAME(prefix) EW_CAT(prefix, EW_SFX)
/* (dispatched by EW_OUT_PASTE: a word EW_CAT made may not use EW_CAT again) */
#define EW_OUT_PASTE_(a, b) a##b
#define EW_OUT_PASTE(a, b) EW_OUT_PASTE_(a, b)
#define EW_OUT_T(rule) EW_OUT_PASTE(EW_OUTT_, rule)
#define EW_OUTT_SAME EW_TI
#define EW_OUTT_SAME_C EW_TI
#define EW_OUTT_SAME_CB EW_TI
#define EW_OUTT_FLOAT EW_TI
#define EW_OUTT_FLOAT_C EW_TI
#define EW_OUTT_TO_BOOL EW_TYPE_b1
#define EW_OUTT_TO_REAL_C EW_CAT(EW_REAL_TYPE_, EW_SFX)
#define EW_OUTT_TO_REAL_CB EW_CAT(EW_REAL_TYPE_, EW_SFX)
#define EW_OUTT_FLOAT_TO_REAL EW_CAT(EW_REAL_TYPE_, EW_SFX)
#define EW_OUTT_ARITH EW_TI
#define EW_OUTT_ARITH_B EW_TI
#define EW_OUTT_ARITH_C EW_TI
#define EW_OUTT_ARITH_CB EW_TI
#define EW_OUTT_TRUEDIV EW_TI
#define EW_OUTT_TRUEDIV_C EW_TI
#define EW_OUTT_COMPARE EW_TYPE_b1
#define EW_OUTT_COMPARE_C EW_TYPE_b1
#define EW_OUTT_LOGICAL EW_TYPE_b1
#define EW_OUTT_CUSTOM(fn, cls) EW_OUTT_##cls

/* ---- the gen column: which passes make a device form of a row. Each pass
 * keeps one kind of suffix: EW_PASS_<B|I|R> is EW_KEEP, the others EW_DROP ---- */
#define EW_GEN_IN(gen) EW_CAT(EW_GENIN_, gen)
#define EW_GENIN_GEN_R(...) EW_PASS_R(__VA_ARGS__)
#define EW_GENIN_GEN_ALL(...) EW_PASS_B(__VA_ARGS__) EW_PASS_I(__VA_ARGS__) EW_PASS_R(__VA_ARGS__)
#define EW_GENIN_GEN_B(...) EW_PASS_B(__VA_ARGS__)
#define EW_GENIN_GEN_NONE(why) EW_DROP

#endif

/* The tensor reading of the elementwise vocabulary (src/ops/ew_math.h):
 * in a derivative formula of src/ops/elementwise.def (the D, D_DIV and D2
 * gradients) every word is an op call, so the gradient is built from ops
 * and differentiates again. EXP(x) is exp of the saved input, C(v) a
 * Python-number scalar, P0 attribute f[0] as one. Within one gradient rule
 * a call repeated with the same inputs is made once (silu's derivative
 * reads SIGMOID(x) twice, and computes it once).
 *
 * Included by unary.c and binary.c, which open a rule with EW_GRAD_BEGIN
 * (the context EW_T and the names x, y, a, b, c). */
#ifndef OARI_EW_GRAD_H
#define OARI_EW_GRAD_H

#include "op.h"

#define OARI_EW_MEMO 24

typedef struct oari_ew_tctx {
    oari_grad_ctx *g;
    int n;
    struct {
        int op;             /* -1: a constant */
        oar_tensor *in[3];
        double v;
        oar_tensor *out;
    } memo[OARI_EW_MEMO];
} oari_ew_tctx;

/* op over n inputs (a, b, c), made once per distinct call within t. */
OARI_HIDDEN oar_tensor *oari_ew_op(oari_ew_tctx *t, oari_op op, int n, oar_tensor *a, oar_tensor *b,
                                   oar_tensor *c);
/* The scalar v as a Python number (weak in type promotion). */
OARI_HIDDEN oar_tensor *oari_ew_const(oari_ew_tctx *t, double v);
/* gin[i] = gout * conj(d), or gout / conj(d) when divide; summed to input
 * i's shape when sum_to (broadcast inputs). 0 or the failure's status. */
OARI_HIDDEN int oari_ew_chain(oari_grad_ctx *g, int i, oar_tensor *d, bool divide, bool sum_to);

/* A gradient rule's opening: the context and the formula's names. */
#define EW_GRAD_BEGIN(g)                                                                    \
    oari_ew_tctx ew_tctx_ = {.g = (g)};                                                     \
    oari_ew_tctx *const EW_T = &ew_tctx_;                                                   \
    oar_tensor *const y = (g)->out[0];                                                      \
    (void)EW_T, (void)y
#define EW_T ew_t_

/* ---- the words as ops ---- */
#define EW_OP1(op, a) oari_ew_op(EW_T, OARI_OP_##op, 1, a, NULL, NULL)
#define EW_OP2(op, a, b) oari_ew_op(EW_T, OARI_OP_##op, 2, a, b, NULL)
#define C(v) oari_ew_const(EW_T, (double)(v))
#define ONE C(1)
#define ZERO C(0)
#define P0 C(EW_T->g->attrs->f[0])
#define P1 C(EW_T->g->attrs->f[1])
#define ADD(a, b) EW_OP2(add, a, b)
#define SUB(a, b) EW_OP2(sub, a, b)
#define MUL(a, b) EW_OP2(mul, a, b)
#define DIV(a, b) EW_OP2(div, a, b)
#define NEG(a) EW_OP1(neg, a)
#define SQUARE(a) EW_OP1(square, a)
#define RECIPROCAL(a) EW_OP1(reciprocal, a)
#define EXP(a) EW_OP1(exp, a)
#define EXP_LIBM(a) EW_OP1(exp, a)
#define EXP2(a) EW_OP1(exp2, a)
#define LOG(a) EW_OP1(log, a)
#define LOG2(a) EW_OP1(log2, a)
#define LOG1P(a) EW_OP1(log1p, a)
#define EXPM1(a) EW_OP1(expm1, a)
#define SQRT(a) EW_OP1(sqrt, a)
#define RSQRT(a) EW_OP1(rsqrt, a)
#define SIN(a) EW_OP1(sin, a)
#define COS(a) EW_OP1(cos, a)
#define TAN(a) EW_OP1(tan, a)
#define ASIN(a) EW_OP1(asin, a)
#define ACOS(a) EW_OP1(acos, a)
#define ATAN(a) EW_OP1(atan, a)
#define SINH(a) EW_OP1(sinh, a)
#define COSH(a) EW_OP1(cosh, a)
#define TANH(a) EW_OP1(tanh, a)
#define SIGMOID(a) EW_OP1(sigmoid, a)
#define ERF(a) EW_OP1(erf, a)
#define ERFC(a) SUB(ONE, ERF(a))
#define GELU_ERF(a) EW_OP1(gelu, a)
#define GELU_GRAD(a) EW_OP1(gelu_grad, a)
#define ABS(a) EW_OP1(abs, a)
#define SIGN(a) EW_OP1(sign, a)
#define FLOOR(a) EW_OP1(floor, a)
#define CEIL(a) EW_OP1(ceil, a)
#define ROUND(a) EW_OP1(round, a)
#define TRUNC(a) EW_OP1(trunc, a)
#define CONJ(a) EW_OP1(conj, a)
#define REAL(a) EW_OP1(real, a)
#define IMAG(a) EW_OP1(imag, a)
#define ANGLE(a) EW_OP1(angle, a)
#define ISNAN(a) EW_OP1(isnan, a)
#define ISINF(a) EW_OP1(isinf, a)
#define NOT(a) EW_OP1(logical_not, a)
#define POW(a, b) EW_OP2(pow, a, b)
#define ATAN2(a, b) EW_OP2(atan2, a, b)
#define FLOOR_DIV(a, b) EW_OP2(floor_div, a, b)
#define REMAINDER(a, b) EW_OP2(remainder, a, b)
#define MAXIMUM(a, b) EW_OP2(maximum, a, b)
#define MINIMUM(a, b) EW_OP2(minimum, a, b)
#define EQ(a, b) EW_OP2(eq, a, b)
#define NE(a, b) EW_OP2(ne, a, b)
#define LT(a, b) EW_OP2(lt, a, b)
#define LE(a, b) EW_OP2(le, a, b)
#define GT(a, b) EW_OP2(gt, a, b)
#define GE(a, b) EW_OP2(ge, a, b)
#define AND(a, b) EW_OP2(logical_and, a, b)
#define OR(a, b) EW_OP2(logical_or, a, b)
#define XOR(a, b) EW_OP2(logical_xor, a, b)
#define WHERE(c, a, b) oari_ew_op(EW_T, OARI_OP_where, 3, c, a, b)

#endif

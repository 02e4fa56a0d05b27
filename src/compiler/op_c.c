/* Scalar C formulas of the elementwise ops, as the generated kernels write
 * them. Each mirrors its CPU kernel (src/backends/cpu/cpu_unary.c,
 * cpu_binary.c) so that a fused graph computes what the unfused one does:
 * NaN goes through maximum/minimum and relu as there, clamp treats a NaN
 * bound as none, round is half to even. Integer and bool values only flow
 * through comparisons, where, logical ops and casts to float: the integer
 * arithmetic of the CPU kernels (wrapping, division by zero) is not
 * repeated here. */
#include "compiler.h"

#include <math.h>

const char *oari_c_type(oar_dtype d) {
    switch (d) {
    case OAR_F32: return "float";
    case OAR_F64: return "double";
    case OAR_BOOL: case OAR_U8: return "uint8_t";
    case OAR_I32: return "int32_t";
    case OAR_I64: return "int64_t";
    default: return NULL;
    }
}

static bool is_float(oar_dtype d) { return d == OAR_F32 || d == OAR_F64; }

/* A double as a C literal of type T: exact for float and double. */
static void literal(oari_sbuf *o, const char *T, double x) {
    if (isnan(x)) oari_sbuf_printf(o, "(%s)NAN", T);
    else if (isinf(x)) oari_sbuf_printf(o, "(%s)%sINFINITY", T, x < 0 ? "-" : "");
    else oari_sbuf_printf(o, "(%s)%.17g", T, x);
}

typedef struct unary_form {
    oari_op op;
    const char *fmt; /* %1$s: operand, %2$s: "f" or "" (libm suffix), %3$s: the C type */
} unary_form;

static const unary_form unary_forms[] = {
    {OARI_OP_neg, "(-%1$s)"},
    {OARI_OP_abs, "fabs%2$s(%1$s)"},
    {OARI_OP_sign, "(%3$s)((%1$s > 0) - (%1$s < 0))"},
    {OARI_OP_exp, "exp%2$s(%1$s)"},
    {OARI_OP_exp2, "exp2%2$s(%1$s)"},
    {OARI_OP_log, "log%2$s(%1$s)"},
    {OARI_OP_log2, "log2%2$s(%1$s)"},
    {OARI_OP_log1p, "log1p%2$s(%1$s)"},
    {OARI_OP_expm1, "expm1%2$s(%1$s)"},
    {OARI_OP_sqrt, "sqrt%2$s(%1$s)"},
    {OARI_OP_rsqrt, "((%3$s)1 / sqrt%2$s(%1$s))"},
    {OARI_OP_square, "(%1$s * %1$s)"},
    {OARI_OP_reciprocal, "((%3$s)1 / %1$s)"},
    {OARI_OP_sin, "sin%2$s(%1$s)"},
    {OARI_OP_cos, "cos%2$s(%1$s)"},
    {OARI_OP_tan, "tan%2$s(%1$s)"},
    {OARI_OP_asin, "asin%2$s(%1$s)"},
    {OARI_OP_acos, "acos%2$s(%1$s)"},
    {OARI_OP_atan, "atan%2$s(%1$s)"},
    {OARI_OP_sinh, "sinh%2$s(%1$s)"},
    {OARI_OP_cosh, "cosh%2$s(%1$s)"},
    {OARI_OP_tanh, "tanh%2$s(%1$s)"},
    {OARI_OP_sigmoid, "((%3$s)1 / ((%3$s)1 + exp%2$s(-%1$s)))"},
    {OARI_OP_relu, "(%1$s < 0 ? (%3$s)0 : %1$s)"},
    {OARI_OP_relu6, "(%1$s < 0 ? (%3$s)0 : %1$s > 6 ? (%3$s)6 : %1$s)"},
    {OARI_OP_silu, "(%1$s / ((%3$s)1 + exp%2$s(-%1$s)))"},
    {OARI_OP_erf, "erf%2$s(%1$s)"},
    {OARI_OP_floor, "floor%2$s(%1$s)"},
    {OARI_OP_ceil, "ceil%2$s(%1$s)"},
    {OARI_OP_round, "nearbyint%2$s(%1$s)"},
    {OARI_OP_trunc, "trunc%2$s(%1$s)"},
};

typedef struct binary_form {
    oari_op op;
    const char *fmt; /* %1$s, %2$s: operands, %3$s: "f" or "", %4$s: the C type */
    bool compare;    /* bool result from same-typed operands */
} binary_form;

static const binary_form binary_forms[] = {
    {OARI_OP_add, "(%1$s + %2$s)", false},
    {OARI_OP_sub, "(%1$s - %2$s)", false},
    {OARI_OP_mul, "(%1$s * %2$s)", false},
    {OARI_OP_div, "(%1$s / %2$s)", false},
    {OARI_OP_pow, "pow%3$s(%1$s, %2$s)", false},
    {OARI_OP_atan2, "atan2%3$s(%1$s, %2$s)", false},
    {OARI_OP_maximum, "((%1$s != %1$s || %1$s > %2$s) ? %1$s : %2$s)", false},
    {OARI_OP_minimum, "((%1$s != %1$s || %1$s < %2$s) ? %1$s : %2$s)", false},
    {OARI_OP_eq, "(uint8_t)(%1$s == %2$s)", true},
    {OARI_OP_ne, "(uint8_t)(%1$s != %2$s)", true},
    {OARI_OP_lt, "(uint8_t)(%1$s < %2$s)", true},
    {OARI_OP_le, "(uint8_t)(%1$s <= %2$s)", true},
    {OARI_OP_gt, "(uint8_t)(%1$s > %2$s)", true},
    {OARI_OP_ge, "(uint8_t)(%1$s >= %2$s)", true},
};

static oar_dtype in_dtype(const oar_graph *g, const oari_gnode *n, int k) {
    return n->in[k] >= 0 ? g->values[n->in[k]].dtype : OAR_DTYPE_INVALID;
}

bool oari_c_elementwise(const oar_graph *g, const oari_gnode *n, const char *const *a, oari_sbuf *o) {
    oar_dtype od = g->values[n->out[0]].dtype, d0 = in_dtype(g, n, 0);
    const char *T = oari_c_type(od), *F = od == OAR_F32 ? "f" : "";
    if (!T) return false;
    const oari_attrs *at = &n->attrs;
    for (size_t i = 0; i < sizeof unary_forms / sizeof *unary_forms; i++) {
        if (unary_forms[i].op != n->op) continue;
        if (!is_float(od) || d0 != od) return false;
        oari_sbuf_printf(o, unary_forms[i].fmt, a[0], F, T);
        return true;
    }
    for (size_t i = 0; i < sizeof binary_forms / sizeof *binary_forms; i++) {
        if (binary_forms[i].op != n->op) continue;
        oar_dtype d1 = in_dtype(g, n, 1);
        if (d0 != d1) return false;
        if (binary_forms[i].compare ? od != OAR_BOOL || !oari_c_type(d0) : !is_float(od) || d0 != od)
            return false;
        oari_sbuf_printf(o, binary_forms[i].fmt, a[0], a[1], d0 == OAR_F32 ? "f" : "", T);
        return true;
    }
    switch (n->op) {
    case OARI_OP_leaky_relu:
    case OARI_OP_elu:
        if (!is_float(od) || d0 != od || at->nf < 1) return false;
        oari_sbuf_printf(o, "(%s > 0 ? %s : ", a[0], a[0]);
        if (n->op == OARI_OP_leaky_relu) oari_sbuf_printf(o, "%s * ", a[0]);
        literal(o, T, at->f[0]);
        if (n->op == OARI_OP_elu) oari_sbuf_printf(o, " * expm1%s(%s)", F, a[0]);
        oari_sbuf_puts(o, ")");
        return true;
    case OARI_OP_gelu:
        if (!is_float(od) || d0 != od) return false;
        if (at->ni && at->i[0]) /* tanh form */
            oari_sbuf_printf(o, "((%2$s)0.5 * %1$s * ((%2$s)1 + tanh%3$s((%2$s)0.7978845608028654 * "
                             "(%1$s + (%2$s)0.044715 * %1$s * %1$s * %1$s))))", a[0], T, F);
        else if (od == OAR_F32) /* the CPU kernel's own x Phi(x), Phi from erfc (cpu_vmath.h, in every unit) */
            oari_sbuf_printf(o, "oari_vgeluf(%s)", a[0]);
        else
            oari_sbuf_printf(o, "((%2$s)0.5 * %1$s * ((%2$s)1 + erf%3$s(%1$s * (%2$s)M_SQRT1_2)))", a[0], T, F);
        return true;
    case OARI_OP_gelu_grad: /* Phi(x) + x phi(x) */
        if (!is_float(od) || d0 != od) return false;
        if (od == OAR_F32) /* the CPU kernel's own (cpu_vmath.h, in every unit) */
            oari_sbuf_printf(o, "oari_vgelu_gradf(%s)", a[0]);
        else
            oari_sbuf_printf(o, "((%2$s)0.5 * erfc%3$s(-%1$s * (%2$s)M_SQRT1_2) + %1$s * exp%3$s((%2$s)-0.5 * %1$s * %1$s) "
                             "* (%2$s)0.39894228040143268)", a[0], T, F);
        return true;
    case OARI_OP_softplus:
        if (!is_float(od) || d0 != od || at->nf < 2) return false;
        oari_sbuf_printf(o, "(%s * ", a[0]);
        literal(o, T, at->f[0]);
        oari_sbuf_puts(o, " > ");
        literal(o, T, at->f[1]);
        oari_sbuf_printf(o, " ? %s : log1p%s(exp%s(%s * ", a[0], F, F, a[0]);
        literal(o, T, at->f[0]);
        oari_sbuf_puts(o, ")) / ");
        literal(o, T, at->f[0]);
        oari_sbuf_puts(o, ")");
        return true;
    case OARI_OP_clamp: {
        if (!is_float(od) || d0 != od || at->nf < 2) return false;
        /* (x < lo ? lo : x) > hi ? hi : (x < lo ? lo : x); a NaN bound is none */
        oari_sbuf inner = {0};
        if (isnan(at->f[0])) oari_sbuf_puts(&inner, a[0]);
        else {
            oari_sbuf_printf(&inner, "(%s < ", a[0]);
            literal(&inner, T, at->f[0]);
            oari_sbuf_puts(&inner, " ? ");
            literal(&inner, T, at->f[0]);
            oari_sbuf_printf(&inner, " : %s)", a[0]);
        }
        const char *x = oari_sbuf_str(&inner);
        if (isnan(at->f[1])) oari_sbuf_puts(o, x);
        else {
            oari_sbuf_printf(o, "(%s > ", x);
            literal(o, T, at->f[1]);
            oari_sbuf_puts(o, " ? ");
            literal(o, T, at->f[1]);
            oari_sbuf_printf(o, " : %s)", x);
        }
        bool failed = inner.failed;
        oari_sbuf_free(&inner);
        return !failed;
    }
    case OARI_OP_isnan:
        if (od != OAR_BOOL || !is_float(d0)) return false;
        oari_sbuf_printf(o, "(uint8_t)(%s != %s)", a[0], a[0]);
        return true;
    case OARI_OP_logical_not:
        if (od != OAR_BOOL || !oari_c_type(d0)) return false;
        oari_sbuf_printf(o, "(uint8_t)(%s == 0)", a[0]);
        return true;
    case OARI_OP_logical_and:
    case OARI_OP_logical_or:
    case OARI_OP_logical_xor: {
        if (od != OAR_BOOL || !oari_c_type(d0) || in_dtype(g, n, 1) != d0) return false;
        const char *op = n->op == OARI_OP_logical_and ? "&" : n->op == OARI_OP_logical_or ? "|" : "^";
        oari_sbuf_printf(o, "(uint8_t)((%s != 0) %s (%s != 0))", a[0], op, a[1]);
        return true;
    }
    case OARI_OP_contiguous: /* a copy: the index arithmetic did the moving */
        if (d0 != od) return false;
        oari_sbuf_puts(o, a[0]);
        return true;
    case OARI_OP_where:
        if (d0 != OAR_BOOL || in_dtype(g, n, 1) != od || in_dtype(g, n, 2) != od) return false;
        oari_sbuf_printf(o, "(%s ? %s : %s)", a[0], a[1], a[2]);
        return true;
    case OARI_OP_cast:
        /* to a float from anything handled; to bool as "non-zero" */
        if (!oari_c_type(d0)) return false;
        if (is_float(od)) oari_sbuf_printf(o, "(%s)%s", T, a[0]);
        else if (od == OAR_BOOL) oari_sbuf_printf(o, "(uint8_t)(%s != 0)", a[0]);
        else return false;
        return true;
    default:
        return false;
    }
}

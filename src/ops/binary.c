/* Binary (broadcasting) elementwise ops and where: the definitions of the
 * EW_BINARY and EW_TERNARY rows of elementwise.def (shape rule from the
 * row's dtype rule, gradient rule from its derivative formulas or the
 * hand-written rules below) and their public functions. Kernels:
 * src/backends/cpu/cpu_binary.c.
 *
 * Integer division by zero is defined, never trapped: floor_div and
 * remainder of integers give 0 when the divisor is 0 (PyTorch raises).
 * Integer pow with a negative exponent follows PyTorch's tensor kernel
 * (1 for base 1, +-1 for base -1, else 0); oar_pow_scalar rejects it as
 * PyTorch does for a Python-number exponent. */
#include "op.h"

#include <math.h>


typedef enum {
    B_ARITH,    /* promoted dtype (add, sub, mul, maximum, ...) */
    B_TRUEDIV,  /* promoted; ints -> f32 (div, atan2) */
    B_COMPARE,  /* compute in promoted dtype, out bool */
    B_LOGICAL,  /* any dtype, out bool */
} binary_kind;

/* bool_ok: bool + bool (or), bool * bool (and), maximum, minimum are
 * defined for bool; sub, floor_div, remainder, pow are not (PyTorch). */
static int binary_infer(oari_infer *c, binary_kind kind, bool complex_ok, bool bool_ok) {
    const oar_tensor *a = c->in[0], *b = c->in[1];
    int nd = oari_broadcast_shapes(c->op, a->ndim, a->shape, b->ndim, b->shape, c->out[0].shape);
    if (nd < 0) return OAR_ERR_INVALID;
    c->out[0].ndim = nd;
    oar_dtype d = oari_result_type(2, c->in);
    if (!complex_ok && oar_dtype_is_complex(d))
        return oari_error(OAR_ERR_INVALID, "%s: not defined for complex inputs (%s, %s)", c->op,
                          oar_dtype_name(a->dtype), oar_dtype_name(b->dtype));
    if (kind == B_TRUEDIV && oar_dtype_is_integral(d)) d = OAR_F32;
    if (kind == B_LOGICAL) {
        /* complex inputs are tested for z != 0 by complex kernels; others cast to bool */
        oar_dtype k = oar_dtype_is_complex(d) ? d : OAR_BOOL;
        c->in_dtype[0] = c->in_dtype[1] = k;
        c->kernel_dtype = k;
        c->out[0].dtype = OAR_BOOL;
        return 0;
    }
    if (kind == B_ARITH && d == OAR_BOOL && !bool_ok)
        return oari_error(OAR_ERR_INVALID, "%s: not defined for bool inputs; cast them to an "
                          "integer dtype or use the logical ops", c->op);
    c->in_dtype[0] = c->in_dtype[1] = d;
    c->kernel_dtype = d;
    c->out[0].dtype = kind == B_COMPARE ? OAR_BOOL : d;
    return 0;
}

/* The shape rule of each dtype rule word of the table. */
static int rule_ARITH(oari_infer *c) { return binary_infer(c, B_ARITH, false, false); }
static int rule_ARITH_B(oari_infer *c) { return binary_infer(c, B_ARITH, false, true); }
static int rule_ARITH_C(oari_infer *c) { return binary_infer(c, B_ARITH, true, false); }
static int rule_ARITH_CB(oari_infer *c) { return binary_infer(c, B_ARITH, true, true); }
static int rule_TRUEDIV(oari_infer *c) { return binary_infer(c, B_TRUEDIV, false, false); }
static int rule_TRUEDIV_C(oari_infer *c) { return binary_infer(c, B_TRUEDIV, true, false); }
static int rule_COMPARE(oari_infer *c) { return binary_infer(c, B_COMPARE, false, true); }
static int rule_COMPARE_C(oari_infer *c) { return binary_infer(c, B_COMPARE, true, true); }
static int rule_LOGICAL(oari_infer *c) { return binary_infer(c, B_LOGICAL, true, true); }

/* Sums a broadcast gradient back to the shape of the input it came from. */
oar_tensor *oari_sum_to(oar_tensor *g, const oari_meta *m) {
    if (!g) return NULL;
    int64_t dims[OAR_MAX_DIMS];
    int n = 0, lead = g->ndim - m->ndim;
    for (int i = 0; i < g->ndim; i++)
        if (i < lead || (m->shape[i - lead] == 1 && g->shape[i] != 1)) dims[n++] = i;
    oar_tensor *r = n ? oar_sum(g, n, dims, false) : g;
    if (r && (r->ndim != m->ndim)) r = oar_reshape(r, m->ndim, m->shape);
    if (r && r->dtype != m->dtype && !(oar_dtype_is_complex(r->dtype) && !oar_dtype_is_complex(m->dtype)))
        r = oar_cast(r, m->dtype);
    if (r && oar_dtype_is_complex(r->dtype) && !oar_dtype_is_complex(m->dtype))
        r = oar_cast(oar_real(r), m->dtype);
    return r;
}

/* ---- gradient rules (ops only; complex: grad_in = grad_out * conj(df/dz)) ---- */

static oar_tensor *cj(oar_tensor *t) { return t && oar_dtype_is_complex(t->dtype) ? oar_conj(t) : t; }
static oar_tensor *sc(double v) { return oar_scalar(v); }

/* Sets gin[i] = sum_to(v) if input i needs a gradient; v NULL is an error. */
static int set_gin(oari_grad_ctx *g, int i, oar_tensor *v) {
    if (!g->needs[i]) return 0;
    g->gin[i] = oari_sum_to(v, &g->in_meta[i]);
    return g->gin[i] ? 0 : oari_fail_status();
}
static int zero_gin(oari_grad_ctx *g) {
    for (int i = 0; i < g->n_in; i++) {
        if (!g->needs[i]) continue;
        const oari_meta *m = &g->in_meta[i];
        oar_device *d = oar_tensor_device(g->gout[0]); /* zeros on the gradient's device */
        if (!(g->gin[i] = oar_full_on(m->dtype, m->ndim, m->shape, 0, d))) return oari_fail_status();
    }
    return 0;
}

static int grad_add(oari_grad_ctx *g) {
    for (int i = 0; i < 2; i++)
        if (g->needs[i] && !(g->gin[i] = oari_sum_to(g->gout[0], &g->in_meta[i]))) return oari_fail_status();
    return 0;
}

static int grad_sub(oari_grad_ctx *g) {
    int st = set_gin(g, 0, g->gout[0]);
    return st ? st : set_gin(g, 1, g->needs[1] ? oar_neg(g->gout[0]) : NULL);
}

static int grad_div(oari_grad_ctx *g) {
    /* ga = gy / conj(b); gb = -ga * conj(a / b) */
    oar_tensor *a = g->in[0], *b = g->in[1];
    oar_tensor *ga = oar_div(g->gout[0], cj(b));
    int st = set_gin(g, 0, ga);
    return st ? st : set_gin(g, 1, g->needs[1] ? oar_neg(oar_mul(ga, cj(oar_div(a, b)))) : NULL);
}

static int grad_remainder(oari_grad_ctx *g) {
    /* a - floor(a / b) * b: ga = gy, gb = -gy * floor_div(a, b) */
    int st = set_gin(g, 0, g->gout[0]);
    if (st || !g->needs[1]) return st;
    return set_gin(g, 1, oar_neg(oar_mul(g->gout[0], oar_floor_div(g->in[0], g->in[1]))));
}

static int grad_pow(oari_grad_ctx *g) {
    oar_tensor *a = g->in[0], *b = g->in[1], *gy = g->gout[0];
    int st = 0;
    if (g->needs[0]) {
        /* gy * conj(b a^(b-1)), 0 where b == 0 (PyTorch) */
        oar_tensor *d = oar_mul(b, oar_pow(a, oar_sub(b, sc(1))));
        st = set_gin(g, 0, oar_where(oar_eq(b, sc(0)), sc(0), oar_mul(gy, cj(d))));
    }
    if (!st && g->needs[1]) {
        /* gy * conj(a^b log a), 0 where a == 0 and b >= 0 (PyTorch) */
        oar_tensor *d = oar_mul(oar_pow(a, b), oar_log(a));
        oar_tensor *breal = oar_dtype_is_complex(b->dtype) ? oar_real(b) : b;
        oar_tensor *mask = oar_logical_and(oar_eq(a, sc(0)), oar_ge(breal, sc(0)));
        st = set_gin(g, 1, oar_where(mask, sc(0), oar_mul(gy, cj(d))));
    }
    return st;
}

static int grad_atan2(oari_grad_ctx *g) {
    /* atan2(a, b): da = b / (a^2 + b^2), db = -a / (a^2 + b^2) */
    oar_tensor *a = g->in[0], *b = g->in[1];
    oar_tensor *r = oar_div(g->gout[0], oar_add(oar_square(a), oar_square(b)));
    int st = set_gin(g, 0, g->needs[0] ? oar_mul(r, b) : NULL);
    return st ? st : set_gin(g, 1, g->needs[1] ? oar_neg(oar_mul(r, a)) : NULL);
}

/* maximum/minimum: the gradient goes to the chosen input, split in half on
 * ties (PyTorch). `pick` is gt for maximum, lt for minimum. */
static int grad_extreme(oari_grad_ctx *g, oar_tensor *(*pick)(oar_tensor *, oar_tensor *)) {
    oar_tensor *a = g->in[0], *b = g->in[1], *gy = g->gout[0];
    oar_tensor *tie = oar_eq(a, b), *half = oar_mul(gy, sc(0.5));
    int st = 0;
    if (g->needs[0]) st = set_gin(g, 0, oar_where(pick(a, b), gy, oar_where(tie, half, sc(0))));
    if (!st && g->needs[1]) st = set_gin(g, 1, oar_where(pick(b, a), gy, oar_where(tie, half, sc(0))));
    return st;
}
static int grad_maximum(oari_grad_ctx *g) { return grad_extreme(g, oar_gt); }
static int grad_minimum(oari_grad_ctx *g) { return grad_extreme(g, oar_lt); }

/* ---- where: cond ? a : b, three broadcast inputs ---- */

static int infer_where(oari_infer *c) {
    const oar_tensor *cond = c->in[0], *a = c->in[1], *b = c->in[2];
    if (cond->dtype != OAR_BOOL)
        return oari_error(OAR_ERR_INVALID, "where: condition must be bool, got %s; compare or "
                          "cast it first", oar_dtype_name(cond->dtype));
    int64_t s1[OAR_MAX_DIMS];
    int n1 = oari_broadcast_shapes("where", cond->ndim, cond->shape, a->ndim, a->shape, s1);
    if (n1 < 0) return OAR_ERR_INVALID;
    int nd = oari_broadcast_shapes("where", n1, s1, b->ndim, b->shape, c->out[0].shape);
    if (nd < 0) return OAR_ERR_INVALID;
    c->out[0].ndim = nd;
    oar_dtype d = oari_result_type(2, c->in + 1);
    c->in_dtype[1] = c->in_dtype[2] = d;
    c->kernel_dtype = d;
    c->out[0].dtype = d;
    return 0;
}

static int grad_where(oari_grad_ctx *g) {
    oar_tensor *cond = g->in[0], *gy = g->gout[0];
    int st = set_gin(g, 1, g->needs[1] ? oar_where(cond, gy, sc(0)) : NULL);
    return st ? st : set_gin(g, 2, g->needs[2] ? oar_where(cond, sc(0), gy) : NULL);
}

/* ---- the rows ---- */

#include "ew_grad.h"
#include "ew_table.h"

/* gradient column: a kind and its two arguments */
#define D2(fa, fb) EW_GD2, fa, fb
#define GRAD_FN(fn) EW_GFN, fn, 0
#define NO_GRAD EW_GNONE, 0, 0
#define EW_GRAD_RULE(op, kind, fa, fb) EW_CAT(kind, _RULE)(op, fa, fb)
#define EW_GFN_RULE(op, fn, unused)
#define EW_GNONE_RULE(op, fa, fb)
/* each partial derivative only when its input needs a gradient */
#define EW_GD2_RULE(op, fa, fb)                                                             \
    static int ew_grad_##op(oari_grad_ctx *g) {                                             \
        EW_GRAD_BEGIN(g);                                                                   \
        oar_tensor *const a = g->in[0], *const b = g->in[1];                                \
        (void)a, (void)b;                                                                   \
        int st = g->needs[0] ? oari_ew_chain(g, 0, fa, false, true) : 0;                    \
        return st || !g->needs[1] ? st : oari_ew_chain(g, 1, fb, false, true);              \
    }
#define EW_GRAD_PTR(op, kind, fa, fb) EW_CAT(kind, _PTR)(op, fa, fb)
#define EW_GD2_PTR(op, fa, fb) ew_grad_##op
#define EW_GFN_PTR(op, fn, unused) fn
#define EW_GNONE_PTR(op, fa, fb) NULL
#define EW_GRAD_FLAGS(kind, fa, fb) EW_CAT(kind, _FLAGS)
#define EW_GD2_FLAGS 0u
#define EW_GFN_FLAGS 0u
#define EW_GNONE_FLAGS OARI_F_NONDIFF

#define SAVE_NONE 0u
#define SAVE_AB (OARI_SAVE_IN(0) | OARI_SAVE_IN(1))
#define SAVE_A OARI_SAVE_IN(0)

#define EW_INFER(rule) EW_CAT(EW_INFER_, rule)
#define EW_INFER_CUSTOM(fn, cls) fn
#define EW_INFER_ARITH rule_ARITH
#define EW_INFER_ARITH_B rule_ARITH_B
#define EW_INFER_ARITH_C rule_ARITH_C
#define EW_INFER_ARITH_CB rule_ARITH_CB
#define EW_INFER_TRUEDIV rule_TRUEDIV
#define EW_INFER_TRUEDIV_C rule_TRUEDIV_C
#define EW_INFER_COMPARE rule_COMPARE
#define EW_INFER_COMPARE_C rule_COMPARE_C
#define EW_INFER_LOGICAL rule_LOGICAL

#define EW_API(api, op, n) EW_CAT(EW_API_, api)(op, n)
#define EW_API_PUBLIC(op, n) EW_CAT(EW_PUBLIC, n)(op)
#define EW_API_INTERNAL(op, n)
#define EW_PUBLIC2(op)                                                                      \
    oar_tensor *oar_##op(oar_tensor *a, oar_tensor *b) { return oari_call2(OARI_OP_##op, a, b, NULL); }
#define EW_PUBLIC3(op)                                                                      \
    oar_tensor *oar_##op(oar_tensor *a, oar_tensor *b, oar_tensor *c) {                     \
        oar_tensor *in[3] = {a, b, c};                                                      \
        return oari_call(OARI_OP_##op, 3, in, NULL);                                        \
    }

/* (the gradient column arrives as "kind, fa, fb": three arguments) */
#define EW_DEF(op, n, rule, api, mask, ...)                                                 \
    EW_GRAD_RULE(op, __VA_ARGS__)                                                           \
    const oari_op_def oari_def_##op = {                                                     \
        .name = #op, .n_in = n, .n_out = 1, .fusion = OARI_FUSE_BROADCAST,                  \
        .flags = OARI_F_BROADCAST | EW_GRAD_FLAGS(__VA_ARGS__), .saved = mask,              \
        .infer = EW_INFER(rule), .grad = EW_GRAD_PTR(op, __VA_ARGS__),                      \
    };                                                                                      \
    EW_API(api, op, n)
#define EW_UNARY(...)
#define EW_BINARY(op, rule, cpu, gen, api, forward, gradient, mask, test, onnx, doc)        \
    EW_DEF(op, 2, rule, api, mask, gradient)
#define EW_TERNARY(op, rule, cpu, gen, api, forward, gradient, mask, test, onnx, doc)       \
    EW_DEF(op, 3, rule, api, mask, gradient)
#define EW_NONE(op, why)
#include "elementwise.def"

/* ---- with a Python-number-like scalar ---- */

static oar_tensor *with_scalar(oar_tensor *(*fn)(oar_tensor *, oar_tensor *), oar_tensor *x, double v) {
    oar_pool *p = oar_pool_push();
    oar_tensor *r = fn(x, oar_scalar(v));
    return oari_pool_return(p, r);
}

oar_tensor *oar_add_scalar(oar_tensor *x, double v) { return with_scalar(oar_add, x, v); }
oar_tensor *oar_sub_scalar(oar_tensor *x, double v) { return with_scalar(oar_sub, x, v); }
oar_tensor *oar_mul_scalar(oar_tensor *x, double v) { return with_scalar(oar_mul, x, v); }
oar_tensor *oar_div_scalar(oar_tensor *x, double v) { return with_scalar(oar_div, x, v); }
oar_tensor *oar_pow_scalar(oar_tensor *x, double exponent) {
    if (x && oar_dtype_is_integral(x->dtype) && exponent < 0 && exponent == floor(exponent)) {
        oari_error(OAR_ERR_INVALID, "pow: integers to negative integer powers are not allowed "
                   "(%s tensor ** %g); cast the tensor to a floating dtype", oar_dtype_name(x->dtype),
                   exponent);
        return NULL;
    }
    return with_scalar(oar_pow, x, exponent);
}

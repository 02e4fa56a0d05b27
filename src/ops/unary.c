/* Unary elementwise ops: the definitions of the EW_UNARY rows of
 * elementwise.def (shape rule from the row's dtype rule, gradient rule from
 * its derivative formula or the hand-written rules below) and their public
 * functions. Kernels: src/backends/cpu/cpu_unary.c. */
#include "op.h"

#include <math.h>

/* dtype classes of unary ops */
typedef enum {
    U_SAME,      /* out dtype = in dtype (neg, square, relu, ...) */
    U_FLOAT,     /* ints and bool promote to f32 (exp, sin, sqrt, ...) */
    U_FLOAT_RC,  /* like U_FLOAT, complex allowed */
    U_TO_BOOL,   /* isnan, isinf, logical_not */
    U_TO_REAL,   /* complex -> its real dtype (abs, real, imag, angle) */
    U_FLOAT_TO_REAL, /* ints and bool -> f32, complex -> its real dtype (angle) */
} unary_kind;

static oar_dtype real_of(oar_dtype d) { return d == OAR_C64 ? OAR_F32 : d == OAR_C128 ? OAR_F64 : d; }

static int unary_infer(oari_infer *c, unary_kind kind, bool complex_ok, bool bool_ok) {
    oar_dtype d = c->in[0]->dtype;
    if (!complex_ok && oar_dtype_is_complex(d))
        return oari_error(OAR_ERR_INVALID, "%s: not defined for complex input (%s)", c->op,
                          oar_dtype_name(d));
    if (!bool_ok && d == OAR_BOOL)
        return oari_error(OAR_ERR_INVALID, "%s: not defined for bool input; cast it first", c->op);
    oari_meta_from(&c->out[0], c->in[0]);
    oar_dtype compute = d, out = d;
    switch (kind) {
    case U_SAME: break;
    case U_FLOAT:
    case U_FLOAT_RC:
        if (oar_dtype_is_integral(d)) compute = out = OAR_F32;
        break;
    case U_TO_BOOL: out = OAR_BOOL; break;
    case U_TO_REAL: out = real_of(d); break;
    case U_FLOAT_TO_REAL:
        if (oar_dtype_is_integral(d)) compute = OAR_F32;
        out = real_of(compute);
        break;
    }
    c->in_dtype[0] = compute;
    c->kernel_dtype = compute;
    c->out[0].dtype = out;
    return 0;
}

/* The shape rule of each dtype rule word of the table. */
static int rule_SAME(oari_infer *c) { return unary_infer(c, U_SAME, false, false); }
static int rule_SAME_C(oari_infer *c) { return unary_infer(c, U_SAME, true, false); }
static int rule_SAME_CB(oari_infer *c) { return unary_infer(c, U_SAME, true, true); }
static int rule_FLOAT(oari_infer *c) { return unary_infer(c, U_FLOAT, false, true); }
static int rule_FLOAT_C(oari_infer *c) { return unary_infer(c, U_FLOAT_RC, true, true); }
static int rule_TO_BOOL(oari_infer *c) { return unary_infer(c, U_TO_BOOL, true, true); }
static int rule_TO_REAL_C(oari_infer *c) { return unary_infer(c, U_TO_REAL, true, false); }
static int rule_TO_REAL_CB(oari_infer *c) { return unary_infer(c, U_TO_REAL, true, true); }
static int rule_FLOAT_TO_REAL(oari_infer *c) { return unary_infer(c, U_FLOAT_TO_REAL, true, true); }

/* ---- hand-written gradient rules (written with ops, so they differentiate
 * again): the table's GRAD_FN rows, where a derivative formula is wrong
 * (non-holomorphic ops, NaN bounds) or costs more than these. Complex
 * inputs follow PyTorch: grad_in = grad_out * conj(f'(z)). */

static int done(oari_grad_ctx *g) { return g->gin[0] ? 0 : oari_fail_status(); }

static oar_tensor *sc(double v) { return oar_scalar(v); }
static oar_tensor *X(oari_grad_ctx *g) { return g->in[0]; }
static oar_tensor *Y(oari_grad_ctx *g) { return g->out[0]; }

/* zero gradient (floor, ceil, round, trunc, real sign), as PyTorch */
static int grad_zero(oari_grad_ctx *g) {
    const oari_meta *m = &g->in_meta[0];
    g->gin[0] = oar_full_on(m->dtype, m->ndim, m->shape, 0, oar_tensor_device(g->gout[0]));
    return done(g);
}

static int grad_sign(oari_grad_ctx *g) {
    if (!oar_dtype_is_complex(g->in_meta[0].dtype)) return grad_zero(g);
    /* s = z/|z| (PyTorch's sgn_backward): (g - s Re(g conj(s))) / |z|, 0 at z = 0 */
    oar_tensor *s = Y(g), *gy = g->gout[0], *r = oar_abs(X(g));
    oar_tensor *v = oar_div(oar_sub(gy, oar_mul(s, oar_real(oar_mul(gy, oar_conj(s))))), r);
    g->gin[0] = oar_where(oar_eq(r, sc(0)), sc(0), v);
    return done(g);
}
static int grad_neg(oari_grad_ctx *g) { g->gin[0] = oar_neg(g->gout[0]); return done(g); }
static int grad_abs(oari_grad_ctx *g) {
    /* real: g * sign(x); complex: g * z/|z| (0 at 0), as PyTorch */
    g->gin[0] = oar_mul(g->gout[0], oar_sign(X(g)));
    return done(g);
}
static int grad_gelu(oari_grad_ctx *g) {
    oar_tensor *x = X(g), *d;
    if (g->attrs->ni && g->attrs->i[0]) {
        /* tanh form: y = x/2 (1 + t), t = tanh(k (x + c x^3)) */
        const double k = M_SQRT2 * M_2_SQRTPI * 0.5, c = 0.044715;
        oar_tensor *x2 = oar_square(x);
        oar_tensor *inner = oar_mul(oar_mul(x, oar_add(oar_mul(x2, sc(c)), sc(1))), sc(k));
        oar_tensor *t = oar_tanh(inner);
        oar_tensor *dinner = oar_mul(oar_add(oar_mul(x2, sc(3 * c)), sc(1)), sc(k));
        oar_tensor *left = oar_mul(oar_add(t, sc(1)), sc(0.5));
        oar_tensor *right = oar_mul(oar_mul(oar_mul(x, sc(0.5)), oar_sub(sc(1), oar_square(t))), dinner);
        d = oar_add(left, right);
    } else {
        d = oari_call1(OARI_OP_gelu_grad, x, NULL); /* Phi(x) + x phi(x), one kernel */
    }
    g->gin[0] = oar_mul(g->gout[0], d);
    return done(g);
}
static int grad_clamp(oari_grad_ctx *g) {
    /* passes where min <= x <= max, as PyTorch */
    double lo = g->attrs->f[0], hi = g->attrs->f[1];
    oar_tensor *mask = NULL;
    if (!isnan(lo)) mask = oar_ge(X(g), sc(lo));
    if (!isnan(hi)) {
        oar_tensor *m2 = oar_le(X(g), sc(hi));
        mask = mask ? oar_logical_and(mask, m2) : m2;
    }
    g->gin[0] = mask ? oar_mul(g->gout[0], mask) : oar_mul(g->gout[0], sc(1));
    return done(g);
}
static int grad_conj(oari_grad_ctx *g) { g->gin[0] = oar_conj(g->gout[0]); return done(g); }
static int grad_real(oari_grad_ctx *g) {
    /* real: C -> R; the gradient is the real gradient as a complex number */
    g->gin[0] = oar_cast(g->gout[0], g->in_meta[0].dtype);
    return done(g);
}
/* The imaginary unit as a 0-d tensor of complex dtype d. */
static oar_tensor *imag_unit(oar_dtype d) {
    if (d == OAR_C128) {
        double v[2] = {0, 1};
        return oar_tensor_from_data(v, OAR_C128, 0, NULL);
    }
    float v[2] = {0, 1};
    return oar_tensor_from_data(v, OAR_C64, 0, NULL);
}
static int grad_imag(oari_grad_ctx *g) {
    /* imag(x + iy) = y: the gradient is i * g */
    g->gin[0] = oar_mul(g->gout[0], imag_unit(g->in_meta[0].dtype));
    return done(g);
}
static int grad_angle(oari_grad_ctx *g) {
    if (!oar_dtype_is_complex(g->in_meta[0].dtype)) return grad_zero(g);
    /* d atan2(y, x) = (-y dx + x dy) / |z|^2: grad = g * i z / |z|^2, 0 at z = 0 */
    oar_tensor *z = X(g), *r2 = oar_square(oar_abs(z));
    oar_tensor *v = oar_div(oar_mul(oar_mul(g->gout[0], z), imag_unit(g->in_meta[0].dtype)), r2);
    g->gin[0] = oar_where(oar_eq(r2, sc(0)), sc(0), v);
    return done(g);
}

/* clamp: integer inputs stay integral unless a bound is fractional (then
 * f32, as torch.clamp(int_tensor, 0.5)). */
static int infer_clamp(oari_infer *c) {
    double lo = c->attrs->f[0], hi = c->attrs->f[1];
    bool frac = (!isnan(lo) && isfinite(lo) && lo != floor(lo)) ||
                (!isnan(hi) && isfinite(hi) && hi != floor(hi));
    return unary_infer(c, frac ? U_FLOAT : U_SAME, false, false);
}

/* softplus: fattr[0] beta (non-zero), fattr[1] threshold */
static int infer_softplus(oari_infer *c) {
    double beta = c->attrs->f[0], threshold = c->attrs->f[1];
    if (c->attrs->nf < 2 || beta == 0 || isnan(beta) || isnan(threshold))
        return oari_error(OAR_ERR_INVALID, "softplus: beta must be non-zero and beta, threshold "
                          "not NaN (got beta %g, threshold %g; PyTorch's defaults are 1, 20)",
                          beta, threshold);
    return unary_infer(c, U_FLOAT, false, true);
}

/* imag: complex only (PyTorch fails on real input too) */
static int infer_imag(oari_infer *c) {
    if (!oar_dtype_is_complex(c->in[0]->dtype))
        return oari_error(OAR_ERR_INVALID, "imag: not defined for real input (%s); it is zero",
                          oar_dtype_name(c->in[0]->dtype));
    return unary_infer(c, U_TO_REAL, true, true);
}

/* ---- the rows ---- */

#include "ew_grad.h"
#include "ew_table.h"

/* gradient column: a kind and its argument */
#define D(f) EW_GD, f
#define D_DIV(f) EW_GDIV, f
#define GRAD_FN(fn) EW_GFN, fn
#define NO_GRAD EW_GNONE, 0
#define EW_GRAD_RULE(name, kind, f) EW_CAT(kind, _RULE)(name, f)
#define EW_GD_RULE(name, f) EW_CHAIN_RULE(name, f, false)
#define EW_GDIV_RULE(name, f) EW_CHAIN_RULE(name, f, true)
#define EW_GFN_RULE(name, fn)
#define EW_GNONE_RULE(name, f)
#define EW_CHAIN_RULE(name, f, divide)                                                      \
    static int ew_grad_##name(oari_grad_ctx *g) {                                           \
        EW_GRAD_BEGIN(g);                                                                   \
        oar_tensor *const x = g->in[0];                                                     \
        (void)x;                                                                            \
        return oari_ew_chain(g, 0, f, divide, false);                                       \
    }
#define EW_GRAD_PTR(name, kind, f) EW_CAT(kind, _PTR)(name, f)
#define EW_GD_PTR(name, f) ew_grad_##name
#define EW_GDIV_PTR(name, f) ew_grad_##name
#define EW_GFN_PTR(name, fn) fn
#define EW_GNONE_PTR(name, f) NULL
#define EW_GRAD_FLAGS(kind, f) EW_CAT(kind, _FLAGS)
#define EW_GD_FLAGS 0u
#define EW_GDIV_FLAGS 0u
#define EW_GFN_FLAGS 0u
#define EW_GNONE_FLAGS OARI_F_NONDIFF

#define SAVE_NONE 0u
#define SAVE_X OARI_SAVE_IN(0)
#define SAVE_Y OARI_SAVE_OUT(0)
#define SAVE_XY (OARI_SAVE_IN(0) | OARI_SAVE_OUT(0))

#define EW_INFER(rule) EW_CAT(EW_INFER_, rule)
#define EW_INFER_CUSTOM(fn, cls) fn
#define EW_INFER_SAME rule_SAME
#define EW_INFER_SAME_C rule_SAME_C
#define EW_INFER_SAME_CB rule_SAME_CB
#define EW_INFER_FLOAT rule_FLOAT
#define EW_INFER_FLOAT_C rule_FLOAT_C
#define EW_INFER_TO_BOOL rule_TO_BOOL
#define EW_INFER_TO_REAL_C rule_TO_REAL_C
#define EW_INFER_TO_REAL_CB rule_TO_REAL_CB
#define EW_INFER_FLOAT_TO_REAL rule_FLOAT_TO_REAL

#define EW_API(api, name) EW_CAT(EW_API_, api)(name)
#define EW_API_PUBLIC(name) \
    oar_tensor *oar_##name(oar_tensor *x) { return oari_call1(OARI_OP_##name, x, NULL); }
#define EW_API_API_OWN(name)
#define EW_API_INTERNAL(name)

/* (the gradient column arrives as "kind, formula": two arguments) */
#define EW_DEF(op, rule, api, mask, ...)                                                    \
    EW_GRAD_RULE(op, __VA_ARGS__)                                                           \
    const oari_op_def oari_def_##op = {                                                     \
        .name = #op, .n_in = 1, .n_out = 1, .fusion = OARI_FUSE_ELEMWISE,                   \
        .flags = EW_GRAD_FLAGS(__VA_ARGS__), .saved = mask, .infer = EW_INFER(rule),        \
        .grad = EW_GRAD_PTR(op, __VA_ARGS__),                                               \
    };                                                                                      \
    EW_API(api, op)
#define EW_UNARY(op, rule, cpu, gen, api, forward, alt, gradient, mask, test, onnx, doc)    \
    EW_DEF(op, rule, api, mask, gradient)
#define EW_BINARY(...)
#define EW_TERNARY(...)
#define EW_NONE(name, why)
#include "elementwise.def"

/* ---- public functions with attributes ---- */

static oar_tensor *call_f(oari_op op, oar_tensor *x, int nf, double f0, double f1) {
    oari_attrs a = {.nf = nf, .f = {f0, f1}};
    return oari_call1(op, x, &a);
}

oar_tensor *oar_leaky_relu(oar_tensor *x, double negative_slope) {
    return call_f(OARI_OP_leaky_relu, x, 1, negative_slope, 0);
}
oar_tensor *oar_elu(oar_tensor *x, double alpha) { return call_f(OARI_OP_elu, x, 1, alpha, 0); }
oar_tensor *oar_gelu(oar_tensor *x, bool tanh_approx) {
    oari_attrs a = {.ni = 1, .i = {tanh_approx ? 1 : 0}};
    return oari_call1(OARI_OP_gelu, x, &a);
}
oar_tensor *oar_softplus(oar_tensor *x, double beta, double threshold) {
    return call_f(OARI_OP_softplus, x, 2, beta, threshold);
}
oar_tensor *oar_clamp(oar_tensor *x, double min, double max) {
    return call_f(OARI_OP_clamp, x, 2, min, max);
}

/* Unary elementwise ops: definitions (shape/dtype rule, gradient rule) and
 * public functions. Kernels: src/backends/cpu/cpu_unary.c. */
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

/* One definition per op from its dtype class. */
#define UNARY_DEF_ONLY(NAME, KIND, COMPLEX_OK, BOOL_OK, GRAD, SAVED, FLAGS)                   \
    static int infer_##NAME(oari_infer *c) { return unary_infer(c, KIND, COMPLEX_OK, BOOL_OK); } \
    const oari_op_def oari_def_##NAME = {                                                    \
        .name = #NAME, .n_in = 1, .n_out = 1, .fusion = OARI_FUSE_ELEMWISE,                  \
        .flags = FLAGS, .saved = SAVED, .infer = infer_##NAME, .grad = GRAD,                 \
    };
#define UNARY_DEF(NAME, KIND, COMPLEX_OK, BOOL_OK, GRAD, SAVED, FLAGS)                        \
    UNARY_DEF_ONLY(NAME, KIND, COMPLEX_OK, BOOL_OK, GRAD, SAVED, FLAGS)                       \
    oar_tensor *oar_##NAME(oar_tensor *x) { return oari_call1(OARI_OP_##NAME, x, NULL); }

/* ---- gradient rules (written with ops, so they differentiate again) ----
 * Complex inputs follow PyTorch: grad_in = grad_out * conj(f'(z)). */

static int done(oari_grad_ctx *g) { return g->gin[0] ? 0 : oari_fail_status(); }

/* conj on complex tensors; real ones pass through (no copy) */
static oar_tensor *cj(oar_tensor *t) { return t && oar_dtype_is_complex(t->dtype) ? oar_conj(t) : t; }

/* g * conj(d), the chain rule of every holomorphic (or real) op */
static int chain(oari_grad_ctx *g, oar_tensor *d) {
    g->gin[0] = oar_mul(g->gout[0], cj(d));
    return done(g);
}
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
static int grad_exp(oari_grad_ctx *g) { return chain(g, Y(g)); }
static int grad_exp2(oari_grad_ctx *g) { return chain(g, oar_mul(Y(g), sc(M_LN2))); }
static int grad_log(oari_grad_ctx *g) { g->gin[0] = oar_div(g->gout[0], cj(X(g))); return done(g); }
static int grad_log2(oari_grad_ctx *g) {
    g->gin[0] = oar_div(g->gout[0], oar_mul(cj(X(g)), sc(M_LN2)));
    return done(g);
}
static int grad_log1p(oari_grad_ctx *g) {
    g->gin[0] = oar_div(g->gout[0], oar_add(X(g), sc(1)));
    return done(g);
}
static int grad_expm1(oari_grad_ctx *g) { return chain(g, oar_add(Y(g), sc(1))); }
static int grad_sqrt(oari_grad_ctx *g) {
    g->gin[0] = oar_div(g->gout[0], oar_mul(cj(Y(g)), sc(2)));
    return done(g);
}
static int grad_rsqrt(oari_grad_ctx *g) {
    /* d x^-1/2 = -1/2 x^-3/2 = -1/2 y^3 */
    return chain(g, oar_mul(oar_mul(Y(g), oar_square(Y(g))), sc(-0.5)));
}
static int grad_square(oari_grad_ctx *g) { return chain(g, oar_mul(X(g), sc(2))); }
static int grad_reciprocal(oari_grad_ctx *g) { return chain(g, oar_neg(oar_square(Y(g)))); }
static int grad_sin(oari_grad_ctx *g) { return chain(g, oar_cos(X(g))); }
static int grad_cos(oari_grad_ctx *g) { return chain(g, oar_neg(oar_sin(X(g)))); }
static int grad_tan(oari_grad_ctx *g) { return chain(g, oar_add(oar_square(Y(g)), sc(1))); }
static int grad_asin(oari_grad_ctx *g) {
    return chain(g, oar_rsqrt(oar_sub(sc(1), oar_square(X(g)))));
}
static int grad_acos(oari_grad_ctx *g) {
    return chain(g, oar_neg(oar_rsqrt(oar_sub(sc(1), oar_square(X(g))))));
}
static int grad_atan(oari_grad_ctx *g) {
    return chain(g, oar_reciprocal(oar_add(oar_square(X(g)), sc(1))));
}
static int grad_sinh(oari_grad_ctx *g) { return chain(g, oar_cosh(X(g))); }
static int grad_cosh(oari_grad_ctx *g) { return chain(g, oar_sinh(X(g))); }
static int grad_tanh(oari_grad_ctx *g) { return chain(g, oar_sub(sc(1), oar_square(Y(g)))); }
static int grad_sigmoid(oari_grad_ctx *g) { return chain(g, oar_mul(Y(g), oar_sub(sc(1), Y(g)))); }
static int grad_relu(oari_grad_ctx *g) {
    /* sign(y) is 1 where x > 0 and 0 elsewhere, in x's dtype: two plain
     * float passes (a bool mask costs a slow cast before the product) */
    g->gin[0] = oar_mul(g->gout[0], oar_sign(Y(g)));
    return done(g);
}
static int grad_relu6(oari_grad_ctx *g) {
    /* hardtanh(0, 6): gradient passes strictly inside (0, 6) */
    g->gin[0] = oar_mul(g->gout[0], oar_logical_and(oar_gt(X(g), sc(0)), oar_lt(X(g), sc(6))));
    return done(g);
}
static int grad_leaky_relu(oari_grad_ctx *g) {
    oar_tensor *gy = g->gout[0];
    g->gin[0] = oar_where(oar_gt(X(g), sc(0)), gy, oar_mul(gy, sc(g->attrs->f[0])));
    return done(g);
}
static int grad_elu(oari_grad_ctx *g) {
    /* x > 0: 1; else alpha * exp(x) */
    oar_tensor *gy = g->gout[0];
    oar_tensor *neg = oar_mul(gy, oar_mul(oar_exp(X(g)), sc(g->attrs->f[0])));
    g->gin[0] = oar_where(oar_gt(X(g), sc(0)), gy, neg);
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
/* gelu_grad's own derivative: d/dx (Phi + x phi) = 2 phi - x^2 phi = phi (2 - x^2) */
static int grad_gelu_grad(oari_grad_ctx *g) {
    oar_tensor *x = X(g), *x2 = oar_square(x);
    oar_tensor *pdf = oar_mul(oar_exp(oar_mul(x2, sc(-0.5))), sc(M_2_SQRTPI * M_SQRT1_2 * 0.5));
    return chain(g, oar_mul(pdf, oar_sub(sc(2), x2)));
}
static int grad_silu(oari_grad_ctx *g) {
    /* s (1 + x (1 - s)) */
    oar_tensor *x = X(g), *s = oar_sigmoid(x);
    g->gin[0] = oar_mul(g->gout[0], oar_mul(s, oar_add(oar_mul(x, oar_sub(sc(1), s)), sc(1))));
    return done(g);
}
static int grad_softplus(oari_grad_ctx *g) {
    double beta = g->attrs->f[0], threshold = g->attrs->f[1];
    oar_tensor *bx = oar_mul(X(g), sc(beta)), *gy = g->gout[0];
    g->gin[0] = oar_where(oar_gt(bx, sc(threshold)), gy, oar_mul(gy, oar_sigmoid(bx)));
    return done(g);
}
static int grad_erf(oari_grad_ctx *g) {
    return chain(g, oar_mul(oar_exp(oar_neg(oar_square(X(g)))), sc(M_2_SQRTPI)));
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

#define SX OARI_SAVE_IN(0)
#define SY OARI_SAVE_OUT(0)

/*        name        kind        complex bool  grad             saved flags */
UNARY_DEF(neg,        U_SAME,     true,  false, grad_neg,        0,  0)
UNARY_DEF(abs,        U_TO_REAL,  true,  false, grad_abs,        SX, 0)
UNARY_DEF(sign,       U_SAME,     true,  true,  grad_sign,       SX | SY, 0)
UNARY_DEF(exp,        U_FLOAT_RC, true,  true,  grad_exp,        SY, 0)
UNARY_DEF(exp2,       U_FLOAT,    false, true,  grad_exp2,       SY, 0)
UNARY_DEF(log,        U_FLOAT_RC, true,  true,  grad_log,        SX, 0)
UNARY_DEF(log2,       U_FLOAT_RC, true,  true,  grad_log2,       SX, 0)
UNARY_DEF(log1p,      U_FLOAT,    false, true,  grad_log1p,      SX, 0)
UNARY_DEF(expm1,      U_FLOAT,    false, true,  grad_expm1,      SY, 0)
UNARY_DEF(sqrt,       U_FLOAT_RC, true,  true,  grad_sqrt,       SY, 0)
UNARY_DEF(rsqrt,      U_FLOAT_RC, true,  true,  grad_rsqrt,      SY, 0)
UNARY_DEF(square,     U_SAME,     true,  false, grad_square,     SX, 0)
UNARY_DEF(reciprocal, U_FLOAT_RC, true,  true,  grad_reciprocal, SY, 0)
UNARY_DEF(sin,        U_FLOAT_RC, true,  true,  grad_sin,        SX, 0)
UNARY_DEF(cos,        U_FLOAT_RC, true,  true,  grad_cos,        SX, 0)
UNARY_DEF(tan,        U_FLOAT_RC, true,  true,  grad_tan,        SY, 0)
UNARY_DEF(asin,       U_FLOAT_RC, true,  true,  grad_asin,       SX, 0)
UNARY_DEF(acos,       U_FLOAT_RC, true,  true,  grad_acos,       SX, 0)
UNARY_DEF(atan,       U_FLOAT_RC, true,  true,  grad_atan,       SX, 0)
UNARY_DEF(sinh,       U_FLOAT_RC, true,  true,  grad_sinh,       SX, 0)
UNARY_DEF(cosh,       U_FLOAT_RC, true,  true,  grad_cosh,       SX, 0)
UNARY_DEF(tanh,       U_FLOAT_RC, true,  true,  grad_tanh,       SY, 0)
UNARY_DEF(sigmoid,    U_FLOAT_RC, true,  true,  grad_sigmoid,    SY, 0)
UNARY_DEF(relu,       U_SAME,     false, false, grad_relu,       SY, 0)
UNARY_DEF(relu6,      U_SAME,     false, false, grad_relu6,      SX, 0)
UNARY_DEF_ONLY(leaky_relu, U_FLOAT, false, true, grad_leaky_relu, SX, 0)
UNARY_DEF_ONLY(elu,   U_FLOAT,    false, true,  grad_elu,        SX, 0)
UNARY_DEF_ONLY(gelu,  U_FLOAT,    false, true,  grad_gelu,       SX, 0)
UNARY_DEF_ONLY(gelu_grad, U_FLOAT, false, true, grad_gelu_grad,  SX, 0)
UNARY_DEF(silu,       U_FLOAT,    false, true,  grad_silu,       SX, 0)
UNARY_DEF(erf,        U_FLOAT,    false, true,  grad_erf,        SX, 0)
UNARY_DEF(floor,      U_SAME,     false, false, grad_zero,       0,  0)
UNARY_DEF(ceil,       U_SAME,     false, false, grad_zero,       0,  0)
UNARY_DEF(round,      U_SAME,     false, false, grad_zero,       0,  0)
UNARY_DEF(trunc,      U_SAME,     false, false, grad_zero,       0,  0)
UNARY_DEF(isnan,      U_TO_BOOL,  true,  true,  NULL,            0,  OARI_F_NONDIFF)
UNARY_DEF(isinf,      U_TO_BOOL,  true,  true,  NULL,            0,  OARI_F_NONDIFF)
UNARY_DEF(logical_not, U_TO_BOOL, true,  true,  NULL,            0,  OARI_F_NONDIFF)
UNARY_DEF(conj,       U_SAME,     true,  true,  grad_conj,       0,  0)
UNARY_DEF(real,       U_TO_REAL,  true,  true,  grad_real,       0,  0)
UNARY_DEF(angle,      U_FLOAT_TO_REAL, true, true, grad_angle,   SX, 0)

/* clamp: integer inputs stay integral unless a bound is fractional (then
 * f32, as torch.clamp(int_tensor, 0.5)). */
static int infer_clamp(oari_infer *c) {
    double lo = c->attrs->f[0], hi = c->attrs->f[1];
    bool frac = (!isnan(lo) && isfinite(lo) && lo != floor(lo)) ||
                (!isnan(hi) && isfinite(hi) && hi != floor(hi));
    return unary_infer(c, frac ? U_FLOAT : U_SAME, false, false);
}
const oari_op_def oari_def_clamp = {
    .name = "clamp", .n_in = 1, .n_out = 1, .fusion = OARI_FUSE_ELEMWISE,
    .saved = SX, .infer = infer_clamp, .grad = grad_clamp,
};

/* softplus: fattr[0] beta (non-zero), fattr[1] threshold */
static int infer_softplus(oari_infer *c) {
    double beta = c->attrs->f[0], threshold = c->attrs->f[1];
    if (c->attrs->nf < 2 || beta == 0 || isnan(beta) || isnan(threshold))
        return oari_error(OAR_ERR_INVALID, "softplus: beta must be non-zero and beta, threshold "
                          "not NaN (got beta %g, threshold %g; PyTorch's defaults are 1, 20)",
                          beta, threshold);
    return unary_infer(c, U_FLOAT, false, true);
}
const oari_op_def oari_def_softplus = {
    .name = "softplus", .n_in = 1, .n_out = 1, .fusion = OARI_FUSE_ELEMWISE,
    .saved = SX, .infer = infer_softplus, .grad = grad_softplus,
};

/* imag: complex only (PyTorch fails on real input too) */
static int infer_imag(oari_infer *c) {
    if (!oar_dtype_is_complex(c->in[0]->dtype))
        return oari_error(OAR_ERR_INVALID, "imag: not defined for real input (%s); it is zero",
                          oar_dtype_name(c->in[0]->dtype));
    return unary_infer(c, U_TO_REAL, true, true);
}
const oari_op_def oari_def_imag = {
    .name = "imag", .n_in = 1, .n_out = 1, .fusion = OARI_FUSE_ELEMWISE,
    .infer = infer_imag, .grad = grad_imag,
};
oar_tensor *oar_imag(oar_tensor *x) { return oari_call1(OARI_OP_imag, x, NULL); }

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

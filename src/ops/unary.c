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
    }
    c->in_dtype[0] = compute;
    c->kernel_dtype = compute;
    c->out[0].dtype = out;
    return 0;
}

/* One definition per op from its dtype class. */
#define UNARY_DEF(NAME, KIND, COMPLEX_OK, BOOL_OK, GRAD, SAVED, FLAGS)                        \
    static int infer_##NAME(oari_infer *c) { return unary_infer(c, KIND, COMPLEX_OK, BOOL_OK); } \
    const oari_op_def oari_def_##NAME = {                                                    \
        .name = #NAME, .n_in = 1, .n_out = 1, .fusion = OARI_FUSE_ELEMWISE,                  \
        .flags = FLAGS, .saved = SAVED, .infer = infer_##NAME, .grad = GRAD,                 \
    };                                                                                       \
    oar_tensor *oar_##NAME(oar_tensor *x) { return oari_call1(OARI_OP_##NAME, x, NULL); }

/* ---- gradient rules (written with ops, so they differentiate again) ---- */

static int done(oari_grad_ctx *g) { return g->gin[0] ? 0 : OAR_ERR_NOMEM; }

static int grad_neg(oari_grad_ctx *g) { g->gin[0] = oar_neg(g->gout[0]); return done(g); }
static int grad_exp(oari_grad_ctx *g) {
    /* d exp(x) = exp(x); conj for complex (PyTorch's convention: grad * conj(df/dz)) */
    g->gin[0] = oar_mul(g->gout[0], oar_conj(g->out[0]));
    return done(g);
}
static int grad_conj(oari_grad_ctx *g) { g->gin[0] = oar_conj(g->gout[0]); return done(g); }
static int grad_real(oari_grad_ctx *g) {
    /* real: C -> R; the gradient is the real gradient as a complex number */
    g->gin[0] = oar_cast(g->gout[0], g->in_meta[0].dtype);
    return done(g);
}

UNARY_DEF(neg, U_SAME, true, false, grad_neg, 0, 0)
UNARY_DEF(exp, U_FLOAT_RC, true, true, grad_exp, OARI_SAVE_OUT(0), 0)
UNARY_DEF(conj, U_SAME, true, true, grad_conj, 0, 0)
UNARY_DEF(real, U_TO_REAL, true, true, grad_real, 0, 0)

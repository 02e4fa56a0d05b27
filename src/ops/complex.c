/* Complex views (view_as_real, view_as_complex: view ops sharing storage,
 * each the other's gradient) and oar_complex / oar_polar composed from
 * them. */
#include "op.h"

#include <oar/complex.h>

#include <string.h>

static bool null_input(const char *fn, const oar_tensor *x) {
    if (x) return false;
    if (!oari_error_pending()) oari_error(OAR_ERR_INVALID, "%s: input is NULL", fn);
    return true;
}

static oar_dtype real_of(oar_dtype d) { return d == OAR_C128 ? OAR_F64 : OAR_F32; }
static oar_dtype complex_of(oar_dtype d) { return d == OAR_F64 ? OAR_C128 : OAR_C64; }

/* ---- view_as_real -------------------------------------------------------- */

static int infer_view_as_real(oari_infer *c) {
    oar_tensor *x = c->in[0];
    if (!oar_dtype_is_complex(x->dtype))
        return oari_error(OAR_ERR_INVALID, "%s: expected a complex input, got %s", c->op,
                          oar_dtype_name(x->dtype));
    if (x->ndim >= OAR_MAX_DIMS)
        return oari_error(OAR_ERR_INVALID, "%s: input has %d dims, the result would have more than "
                          "%d", c->op, x->ndim, OAR_MAX_DIMS);
    oari_meta_from(&c->out[0], x);
    c->out[0].shape[x->ndim] = 2;
    c->out[0].ndim = x->ndim + 1;
    c->out[0].dtype = real_of(x->dtype);
    return 0;
}

static oar_tensor *view_view_as_real(oar_tensor *x, const oari_attrs *a) {
    (void)a;
    int64_t sh[OAR_MAX_DIMS], st[OAR_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++) sh[d] = x->shape[d], st[d] = 2 * x->strides[d];
    sh[x->ndim] = 2;
    st[x->ndim] = 1;
    oar_tensor *t = oari_tensor_make(x->storage, real_of(x->dtype), x->ndim + 1, sh, st, 2 * x->offset);
    if (t) t->wrapped_number = false;
    return t;
}

static int grad_view_as_real(oari_grad_ctx *g) {
    g->gin[0] = oar_view_as_complex(g->gout[0]);
    return g->gin[0] ? 0 : oari_fail_status();
}

const oari_op_def oari_def_view_as_real = {
    .name = "view_as_real", .n_in = 1, .n_out = 1, .fusion = OARI_FUSE_INJECTIVE, .flags = OARI_F_VIEW,
    .infer = infer_view_as_real, .view = view_view_as_real, .grad = grad_view_as_real,
};

/* ---- view_as_complex ----------------------------------------------------- */

static bool complex_viewable(const oar_tensor *x) {
    if (x->offset % 2) return false;
    for (int d = 0; d < x->ndim - 1; d++)
        if (x->shape[d] > 1 && x->strides[d] % 2) return false;
    return x->strides[x->ndim - 1] == 1;
}

static int infer_view_as_complex(oari_infer *c) {
    oar_tensor *x = c->in[0];
    char sb[200];
    if (x->dtype != OAR_F32 && x->dtype != OAR_F64)
        return oari_error(OAR_ERR_INVALID, "%s: expected a float32 or float64 input, got %s", c->op,
                          oar_dtype_name(x->dtype));
    if (x->ndim < 1 || x->shape[x->ndim - 1] != 2)
        return oari_error(OAR_ERR_INVALID, "%s: expected a last dim of size 2, got shape %s", c->op,
                          oari_shape_str(sb, x->ndim, x->shape));
    if (!complex_viewable(x))
        return oari_error(OAR_ERR_INVALID, "%s: the strides of shape %s do not allow a complex view "
                          "(the last must be 1, the others even); make it contiguous", c->op,
                          oari_shape_str(sb, x->ndim, x->shape));
    oari_meta_from(&c->out[0], x);
    c->out[0].ndim = x->ndim - 1;
    c->out[0].dtype = complex_of(x->dtype);
    return 0;
}

static oar_tensor *view_view_as_complex(oar_tensor *x, const oari_attrs *a) {
    (void)a;
    int64_t sh[OAR_MAX_DIMS], st[OAR_MAX_DIMS];
    for (int d = 0; d < x->ndim - 1; d++) sh[d] = x->shape[d], st[d] = x->strides[d] / 2;
    oar_tensor *t = oari_tensor_make(x->storage, complex_of(x->dtype), x->ndim - 1, sh, st, x->offset / 2);
    if (t) t->wrapped_number = false;
    return t;
}

static int grad_view_as_complex(oari_grad_ctx *g) {
    g->gin[0] = oar_view_as_real(g->gout[0]);
    return g->gin[0] ? 0 : oari_fail_status();
}

const oari_op_def oari_def_view_as_complex = {
    .name = "view_as_complex", .n_in = 1, .n_out = 1, .fusion = OARI_FUSE_INJECTIVE,
    .flags = OARI_F_VIEW, .infer = infer_view_as_complex, .view = view_view_as_complex,
    .grad = grad_view_as_complex,
};

/* ---- public functions ---------------------------------------------------- */

oar_tensor *oar_view_as_real(oar_tensor *x) {
    if (null_input("oar_view_as_real", x)) return NULL;
    if (!oar_dtype_is_complex(x->dtype))
        return oari_error(OAR_ERR_INVALID, "oar_view_as_real: expected a complex input, got %s",
                          oar_dtype_name(x->dtype)), NULL;
    return oari_call1(OARI_OP_view_as_real, x, NULL);
}

oar_tensor *oar_view_as_complex(oar_tensor *x) {
    if (null_input("oar_view_as_complex", x)) return NULL;
    char sb[200];
    if (x->dtype != OAR_F32 && x->dtype != OAR_F64)
        return oari_error(OAR_ERR_INVALID, "oar_view_as_complex: expected a float32 or float64 "
                          "input, got %s", oar_dtype_name(x->dtype)), NULL;
    if (x->ndim < 1 || x->shape[x->ndim - 1] != 2)
        return oari_error(OAR_ERR_INVALID, "oar_view_as_complex: expected a last dim of size 2, got "
                          "shape %s", oari_shape_str(sb, x->ndim, x->shape)), NULL;
    if (complex_viewable(x)) return oari_call1(OARI_OP_view_as_complex, x, NULL);
    oar_pool *p = oar_pool_push();
    if (!p) return NULL; /* out of memory, reported */
    oar_tensor *c = oar_clone(x); /* contiguous */
    return oari_pool_return(p, c ? oari_call1(OARI_OP_view_as_complex, c, NULL) : NULL);
}

/* re and im checked and broadcast together, stacked into [..., 2]. */
static oar_tensor *pair(const char *fn, oar_tensor *re, oar_tensor *im) {
    if (null_input(fn, re) || null_input(fn, im)) return NULL;
    if ((re->dtype != OAR_F32 && re->dtype != OAR_F64) || re->dtype != im->dtype)
        return oari_error(OAR_ERR_INVALID, "%s: expected two float32 or two float64 tensors, got %s "
                          "and %s", fn, oar_dtype_name(re->dtype), oar_dtype_name(im->dtype)), NULL;
    int64_t shape[OAR_MAX_DIMS];
    int nd = oari_broadcast_shapes(fn, re->ndim, re->shape, im->ndim, im->shape, shape);
    if (nd < 0) return NULL;
    if (nd >= OAR_MAX_DIMS)
        return oari_error(OAR_ERR_INVALID, "%s: inputs have %d dims; at most %d", fn, nd,
                          OAR_MAX_DIMS - 1), NULL;
    oar_tensor *xs[2] = {oar_expand(re, nd, shape), oar_expand(im, nd, shape)};
    return xs[0] && xs[1] ? oar_stack(2, xs, nd) : NULL;
}

oar_tensor *oar_complex(oar_tensor *re, oar_tensor *im) {
    oar_pool *p = oar_pool_push();
    if (!p) return NULL; /* out of memory, reported */
    oar_tensor *s = pair("oar_complex", re, im);
    return oari_pool_return(p, s ? oari_call1(OARI_OP_view_as_complex, s, NULL) : NULL);
}

oar_tensor *oar_polar(oar_tensor *abs, oar_tensor *angle) {
    oar_pool *p = oar_pool_push();
    if (!p) return NULL; /* out of memory, reported */
    oar_tensor *s = NULL;
    if (!null_input("oar_polar", abs) && !null_input("oar_polar", angle)) {
        if ((abs->dtype != OAR_F32 && abs->dtype != OAR_F64) || abs->dtype != angle->dtype) {
            oari_error(OAR_ERR_INVALID, "oar_polar: expected two float32 or two float64 tensors, got "
                       "%s and %s", oar_dtype_name(abs->dtype), oar_dtype_name(angle->dtype));
        } else {
            s = pair("oar_polar", oar_mul(abs, oar_cos(angle)), oar_mul(abs, oar_sin(angle)));
        }
    }
    return oari_pool_return(p, s ? oari_call1(OARI_OP_view_as_complex, s, NULL) : NULL);
}

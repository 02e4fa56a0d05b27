/* Fused optimizer updates (src/ops/defs/optim.def): Adam's and AdamW's step
 * on one parameter as one op, in place of the ~11 elementwise ops of the
 * composite update (src/optim/optim.c), which reads and writes the
 * parameter and both moments several times over. The op is functional
 * (new p, m, v); the optimizer copies them back. Not differentiable. */
#include "op.h"

#include <math.h>
#include <string.h>

/* The attributes, in the order of defs/optim.def. */
enum { LR, BETA1, BETA2, EPS, WD, BC1, BC2, N_F };

static int infer_adam_update(oari_infer *c) {
    const oar_tensor *p = c->in[0];
    char a[200], b[200];
    if (!oar_dtype_is_float(p->dtype))
        return oari_error(OAR_ERR_INVALID,
                          "adam_update: the parameter must be a real float tensor, got %s",
                          oar_dtype_name(p->dtype));
    static const char *const what[] = {"parameter", "gradient", "first moment", "second moment"};
    for (int i = 1; i < 4; i++) {
        const oar_tensor *t = c->in[i];
        if (!oar_dtype_is_float(t->dtype))
            return oari_error(OAR_ERR_INVALID,
                              "adam_update: the %s must be a real float tensor, got %s", what[i],
                              oar_dtype_name(t->dtype));
        if (t->ndim != p->ndim || memcmp(t->shape, p->shape, (size_t)p->ndim * sizeof *p->shape))
            return oari_error(OAR_ERR_INVALID, "adam_update: the %s has shape %s, the parameter %s",
                              what[i], oari_shape_str(a, t->ndim, t->shape),
                              oari_shape_str(b, p->ndim, p->shape));
        if (i > 1 && t->dtype != p->dtype)
            return oari_error(OAR_ERR_INVALID,
                              "adam_update: the %s is %s, the parameter %s (moments are kept "
                              "in the parameter's dtype)",
                              what[i], oar_dtype_name(t->dtype), oar_dtype_name(p->dtype));
    }
    const oari_attrs *at = c->attrs;
    if (at->nf != N_F || at->ni != 1 || (at->i[0] != 0 && at->i[0] != 1))
        return oari_error(OAR_ERR_INVALID,
                          "adam_update: wants 7 float attributes and 1 integer (0 or 1), got "
                          "%d and %d",
                          at->nf, at->ni);
    const double *f = at->f;
    if (!(f[LR] >= 0) || !(f[BETA1] >= 0 && f[BETA1] < 1) || !(f[BETA2] >= 0 && f[BETA2] < 1) ||
        !(f[EPS] >= 0) || !(f[WD] >= 0) || !(f[BC1] > 0 && f[BC1] <= 1) ||
        !(f[BC2] > 0 && f[BC2] <= 1))
        return oari_error(
            OAR_ERR_INVALID,
            "adam_update: invalid attributes (lr %g, betas %g %g, eps %g, "
            "weight_decay %g, bias corrections %g %g): lr, eps, weight_decay >= 0, betas in "
            "[0, 1), bias corrections in (0, 1]",
            f[LR], f[BETA1], f[BETA2], f[EPS], f[WD], f[BC1], f[BC2]);
    c->in_dtype[1] = p->dtype; /* a gradient of another float dtype is cast to the parameter's */
    for (int j = 0; j < 3; j++)
        oari_meta_from(&c->out[j], p);
    c->kernel_dtype = p->dtype;
    return 0;
}

const oari_op_def oari_def_adam_update = {
    .name = "adam_update",
    .n_in = 4,
    .n_out = 3,
    .fusion = OARI_FUSE_OPAQUE,
    .flags = OARI_F_NONDIFF,
    .infer = infer_adam_update,
};

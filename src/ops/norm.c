/* Normalisation ops (layer, group and batch norm): definitions, gradient
 * rules written with ops, and public functions. Kernels:
 * src/backends/cpu/cpu_norm.c. Each primitive also outputs the mean and
 * rstd = 1/sqrt(var + eps) it normalised with; the gradient rules read them
 * and also handle gradients flowing into them (needed by double backward,
 * since a first-order gradient uses them). */
#include "op.h"

#include <string.h>

/* ---- shape rules ------------------------------------------------------------------ */

static int check_input(const char *op, const oar_tensor *x, int min_ndim) {
    char b[200];
    if (!oar_dtype_is_float(x->dtype))
        return oari_error(OAR_ERR_INVALID,
                          "%s: input must be floating (f16, bf16, f32, f64), got %s", op,
                          oar_dtype_name(x->dtype));
    if (x->ndim < min_ndim)
        return oari_error(OAR_ERR_INVALID, "%s: input %s needs at least %d dims", op,
                          oari_shape_str(b, x->ndim, x->shape), min_ndim);
    return 0;
}

/* An optional per-feature tensor t = in[i] (weight, bias, running stat)
 * must have shape (n, shape) and a floating dtype; it is cast to the
 * normalised input x's dtype. */
static int check_param(oari_infer *c, const oar_tensor *x, int i, const char *what, int n,
                       const int64_t *shape) {
    const oar_tensor *t = c->in[i];
    if (!t) return 0;
    char bt[200], bs[200], bx[200];
    if (t->ndim != n || memcmp(t->shape, shape, (size_t)n * sizeof *shape))
        return oari_error(OAR_ERR_INVALID, "%s: %s %s must have shape %s (for input %s)", c->op,
                          what, oari_shape_str(bt, t->ndim, t->shape), oari_shape_str(bs, n, shape),
                          oari_shape_str(bx, x->ndim, x->shape));
    if (!oar_dtype_is_float(t->dtype))
        return oari_error(OAR_ERR_INVALID, "%s: %s must be floating, got %s", c->op, what,
                          oar_dtype_name(t->dtype));
    c->in_dtype[i] = x->dtype;
    return 0;
}

static int infer_layer_norm(oari_infer *c) {
    const oar_tensor *x = c->in[0];
    if (check_input(c->op, x, 1)) return OAR_ERR_INVALID;
    int64_t n = c->attrs->ni ? c->attrs->i[0] : -1;
    if (n < 1 || n > x->ndim) {
        char b[200];
        return oari_error(OAR_ERR_INVALID,
                          "layer_norm: n_norm_dims %lld out of range for input %s "
                          "(1 to %d)",
                          (long long)n, oari_shape_str(b, x->ndim, x->shape), x->ndim);
    }
    const int64_t *norm_shape = x->shape + x->ndim - n;
    if (check_param(c, x, 1, "weight", (int)n, norm_shape) ||
        check_param(c, x, 2, "bias", (int)n, norm_shape))
        return OAR_ERR_INVALID;
    oari_meta_from(&c->out[0], x);
    c->out[1] = c->out[0];
    for (int d = x->ndim - (int)n; d < x->ndim; d++)
        c->out[1].shape[d] = 1;
    c->out[2] = c->out[1];
    return 0;
}

static int infer_group_norm(oari_infer *c) {
    const oar_tensor *x = c->in[0];
    if (check_input(c->op, x, 2)) return OAR_ERR_INVALID;
    int64_t g = c->attrs->ni ? c->attrs->i[0] : 0, ch = x->shape[1];
    char b[200];
    if (g < 1 || ch % g)
        return oari_error(OAR_ERR_INVALID,
                          "group_norm: groups %lld must be >= 1 and divide the %lld "
                          "channels of input %s",
                          (long long)g, (long long)ch, oari_shape_str(b, x->ndim, x->shape));
    if (check_param(c, x, 1, "weight", 1, &ch) || check_param(c, x, 2, "bias", 1, &ch))
        return OAR_ERR_INVALID;
    oari_meta_from(&c->out[0], x);
    c->out[1].dtype = x->dtype;
    c->out[1].ndim = 2;
    c->out[1].shape[0] = x->shape[0];
    c->out[1].shape[1] = g;
    c->out[2] = c->out[1];
    return 0;
}

static int infer_batch_norm(oari_infer *c) {
    const oar_tensor *x = c->in[0];
    if (check_input(c->op, x, 2)) return OAR_ERR_INVALID;
    int64_t ch = x->shape[1];
    bool training = c->attrs->ni && c->attrs->i[0];
    char b[200];
    if (check_param(c, x, 1, "running_mean", 1, &ch) || check_param(c, x, 2, "running_var", 1, &ch) ||
        check_param(c, x, 3, "weight", 1, &ch) || check_param(c, x, 4, "bias", 1, &ch))
        return OAR_ERR_INVALID;
    if (!training && (!c->in[1] || !c->in[2]))
        return oari_error(OAR_ERR_INVALID, "batch_norm: evaluation mode needs running_mean and "
                                           "running_var");
    if (training) {
        /* the kernel never reads running stats when training: no casts */
        c->in_dtype[1] = c->in[1] ? c->in[1]->dtype : OAR_F32;
        c->in_dtype[2] = c->in[2] ? c->in[2]->dtype : OAR_F32;
        if (x->numel / (ch ? ch : 1) <= 1 && x->numel)
            return oari_error(OAR_ERR_INVALID,
                              "batch_norm: expected more than 1 value per channel "
                              "when training, got input %s",
                              oari_shape_str(b, x->ndim, x->shape));
    }
    oari_meta_from(&c->out[0], x);
    for (int j = 1; j < 4; j++) {
        c->out[j].dtype = x->dtype;
        c->out[j].ndim = 1;
        c->out[j].shape[0] = ch;
    }
    return 0;
}

/* batch_norm_backward: gy and x [N, C, *] alike; mean, rstd, weight? [C]. */
static int infer_batch_norm_backward(oari_infer *c) {
    const oar_tensor *gy = c->in[0], *x = c->in[1];
    if (check_input(c->op, x, 2)) return OAR_ERR_INVALID;
    char bg[200], bx[200];
    if (!gy || gy->ndim != x->ndim || memcmp(gy->shape, x->shape, (size_t)x->ndim * sizeof *x->shape))
        return oari_error(OAR_ERR_INVALID, "batch_norm_backward: grad_out %s must have input %s's shape",
                          gy ? oari_shape_str(bg, gy->ndim, gy->shape) : "(NULL)",
                          oari_shape_str(bx, x->ndim, x->shape));
    if (!oar_dtype_is_float(gy->dtype))
        return oari_error(OAR_ERR_INVALID, "batch_norm_backward: grad_out must be floating, got %s",
                          oar_dtype_name(gy->dtype));
    c->in_dtype[0] = x->dtype;
    int64_t ch = x->shape[1];
    if (!c->in[2] || !c->in[3])
        return oari_error(OAR_ERR_INVALID, "batch_norm_backward: mean and rstd are required");
    if (check_param(c, x, 2, "mean", 1, &ch) || check_param(c, x, 3, "rstd", 1, &ch) ||
        check_param(c, x, 4, "weight", 1, &ch))
        return OAR_ERR_INVALID;
    oari_meta_from(&c->out[0], x);
    for (int j = 1; j < 3; j++) {
        c->out[j].dtype = x->dtype;
        c->out[j].ndim = 1;
        c->out[j].shape[0] = ch;
    }
    return 0;
}

/* ---- gradient rules ------------------------------------------------------------------ */

static oar_tensor *acc(oar_tensor *a, oar_tensor *b) { return a ? oar_add(a, b) : b; }

/* The normalised-input gradient shared by all three norms, over reduced
 * dims `dims` (keepdim) of M elements each: with xhat = (x - mean) rstd and
 * gyw = gy * weight,
 *   gx = rstd (gyw - mean(gyw) - xhat mean(gyw xhat)) + gmean / M
 *        - grstd rstd^2 xhat / M.
 * gyw, gmean, grstd may be NULL (zero); mean-shaped ones broadcast. */
static oar_tensor *norm_input_grad(oar_tensor *gyw, oar_tensor *xhat, oar_tensor *rstd,
                                   oar_tensor *gmean, oar_tensor *grstd, int nd,
                                   const int64_t *dims, double m) {
    oar_tensor *gx = NULL;
    if (gyw) {
        oar_tensor *t = oar_sub(oar_sub(gyw, oar_mean(gyw, nd, dims, true)),
                                oar_mul(xhat, oar_mean(oar_mul(gyw, xhat), nd, dims, true)));
        gx = oar_mul(rstd, t);
    }
    if (grstd)
        gx = acc(gx, oar_mul(oar_mul_scalar(oar_mul(oar_mul(grstd, rstd), rstd), -1.0 / m), xhat));
    if (gmean) gx = acc(gx, oar_mul_scalar(gmean, 1.0 / m));
    if (gx && gx->ndim == xhat->ndim &&
        !memcmp(gx->shape, xhat->shape, (size_t)xhat->ndim * sizeof(int64_t)))
        return gx;
    return gx ? oar_expand(gx, xhat->ndim, xhat->shape) : NULL;
}

/* Sum over dims (all of them when n == 0 means none to sum: returns t). */
static oar_tensor *sum_dims(oar_tensor *t, int n, const int64_t *dims) {
    return n ? oar_sum(t, n, dims, false) : t;
}

static int grad_layer_norm(oari_grad_ctx *g) {
    oar_tensor *x = g->in[0], *w = g->n_in > 1 ? g->in[1] : NULL;
    oar_tensor *mean = g->out[1], *rstd = g->out[2], *gy = g->gout[0];
    int n = (int)g->attrs->i[0], lead = x->ndim - n;
    int64_t dims[OAR_MAX_DIMS], lead_dims[OAR_MAX_DIMS];
    double m = 1;
    for (int i = 0; i < n; i++) {
        dims[i] = lead + i;
        m *= (double)x->shape[lead + i];
    }
    for (int i = 0; i < lead; i++)
        lead_dims[i] = i;
    oar_tensor *xhat = oar_mul(oar_sub(x, mean), rstd);
    if (g->needs[0]) {
        oar_tensor *gyw = gy && w ? oar_mul(gy, w) : gy;
        g->gin[0] = norm_input_grad(gyw, xhat, rstd, g->gout[1], g->gout[2], n, dims, m);
        if (!g->gin[0] && (gy || g->gout[1] || g->gout[2])) return OAR_ERR_INVALID;
    }
    if (gy && g->n_in > 1 && g->needs[1] &&
        !(g->gin[1] = sum_dims(oar_mul(gy, xhat), lead, lead_dims)))
        return OAR_ERR_INVALID;
    if (gy && g->n_in > 2 && g->needs[2] && !(g->gin[2] = sum_dims(gy, lead, lead_dims)))
        return OAR_ERR_INVALID;
    return 0;
}

static int grad_group_norm(oari_grad_ctx *g) {
    oar_tensor *x = g->in[0], *w = g->n_in > 1 ? g->in[1] : NULL, *gy = g->gout[0];
    int64_t groups = g->attrs->i[0], n = x->shape[0], ch = x->shape[1];
    int64_t r3[3] = {n, groups, -1}, s3[3] = {n, groups, 1}, last = 2;
    int64_t wshape[OAR_MAX_DIMS], sum_dims_v[OAR_MAX_DIMS];
    int ns = 0;
    for (int i = 0; i < x->ndim; i++) {
        wshape[i] = i == 1 ? ch : 1;
        if (i != 1) sum_dims_v[ns++] = i;
    }
    double m = (double)(x->numel / (n * groups));
    oar_tensor *mean = oar_reshape(g->out[1], 3, s3), *rstd = oar_reshape(g->out[2], 3, s3);
    oar_tensor *xhat_r = oar_mul(oar_sub(oar_reshape(x, 3, r3), mean), rstd);
    if (g->needs[0]) {
        oar_tensor *gyw = gy && w ? oar_mul(gy, oar_reshape(w, x->ndim, wshape)) : gy;
        oar_tensor *gm = g->gout[1] ? oar_reshape(g->gout[1], 3, s3) : NULL;
        oar_tensor *gr = g->gout[2] ? oar_reshape(g->gout[2], 3, s3) : NULL;
        oar_tensor *gx = norm_input_grad(gyw ? oar_reshape(gyw, 3, r3) : NULL, xhat_r, rstd, gm, gr,
                                         1, &last, m);
        g->gin[0] = gx ? oar_reshape(gx, x->ndim, x->shape) : NULL;
        if (!g->gin[0] && (gy || gm || gr)) return OAR_ERR_INVALID;
    }
    if (gy && g->n_in > 1 && g->needs[1] &&
        !(g->gin[1] =
              oar_sum(oar_mul(gy, oar_reshape(xhat_r, x->ndim, x->shape)), ns, sum_dims_v, false)))
        return OAR_ERR_INVALID;
    if (gy && g->n_in > 2 && g->needs[2] && !(g->gin[2] = oar_sum(gy, ns, sum_dims_v, false)))
        return OAR_ERR_INVALID;
    return 0;
}

/* batch_norm's channel layout: cshape [1, C, 1, ...] (a [C] tensor
 * reshaped to broadcast against x), the reduced dims (all but 1) and the
 * count M of values per channel. */
typedef struct {
    int ndim, nd;
    int64_t cshape[OAR_MAX_DIMS], dims[OAR_MAX_DIMS];
    double m;
} bn_layout;

static bn_layout bn_layout_of(const oari_meta *x) {
    bn_layout l = {.ndim = x->ndim};
    int64_t numel = 1;
    for (int i = 0; i < x->ndim; i++) {
        l.cshape[i] = i == 1 ? x->shape[1] : 1;
        if (i != 1) l.dims[l.nd++] = i;
        numel *= x->shape[i];
    }
    l.m = (double)(numel / (x->shape[1] ? x->shape[1] : 1));
    return l;
}

static oar_tensor *per_channel(oar_tensor *t, const bn_layout *l) {
    return t ? oar_reshape(t, l->ndim, l->cshape) : NULL;
}

/* Whether the fused batch_norm_backward kernel runs where x lives (the CPU
 * always has it; a device without it keeps the composite, which its own
 * elementwise kernels run, rather than a round trip through the CPU; a
 * traced graph records the fused node). */
static bool fused_backward_here(const oar_tensor *x) {
    oar_device *d = x->storage ? x->storage->device : oari_device_cpu(); /* traced: a CPU graph */
    return d == oari_device_cpu() || oari_kernel_lookup(d, OARI_OP_batch_norm_backward, x->dtype) ||
           (oari_is_half(x->dtype) && oari_kernel_lookup(d, OARI_OP_batch_norm_backward, OAR_F32));
}

static int grad_batch_norm(oari_grad_ctx *g) {
    oar_tensor *x = g->in[0], *w = g->n_in > 3 ? g->in[3] : NULL, *gy = g->gout[0];
    bool training = g->attrs->i[0] != 0;
    const bn_layout l = bn_layout_of(&g->in_meta[0]);
    oar_tensor *mean = per_channel(g->out[1], &l), *rstd = per_channel(g->out[2], &l);
    oar_tensor *gm = per_channel(g->gout[1], &l), *gr = per_channel(g->gout[2], &l);
    bool want_w = gy && g->n_in > 3 && g->needs[3], want_b = gy && g->n_in > 4 && g->needs[4];
    if (training && gy && g->needs[0] && fused_backward_here(x)) {
        /* the usual first-order case in one pass over gy and x; its own
         * gradient rule (below) keeps grad-of-grad working */
        oar_tensor *in[5] = {gy, x, g->out[1], g->out[2], w}, *out[OARI_MAX_OUT] = {0};
        if (oari_dispatch(OARI_OP_batch_norm_backward, 5, in, NULL, out)) return oari_fail_status();
        for (int j = 0; j < 3; j++)
            if (!oari_pool_adopt(out[j])) return oari_fail_status();
        g->gin[0] = out[0];
        if (gm || gr) {
            oar_tensor *xhat = oar_mul(oar_sub(x, mean), rstd);
            oar_tensor *extra = norm_input_grad(NULL, xhat, rstd, gm, gr, l.nd, l.dims, l.m);
            if (!(g->gin[0] = extra ? oar_add(out[0], extra) : NULL)) return oari_fail_status();
        }
        if (want_w) g->gin[3] = out[1];
        if (want_b) g->gin[4] = out[2];
        return 0;
    }
    oar_tensor *xhat = oar_mul(oar_sub(x, mean), rstd);
    if (g->needs[0]) {
        oar_tensor *gyw = gy && w ? oar_mul(gy, per_channel(w, &l)) : gy;
        if (training) {
            g->gin[0] = norm_input_grad(gyw, xhat, rstd, gm, gr, l.nd, l.dims, l.m);
            if (!g->gin[0] && (gy || gm || gr)) return OAR_ERR_INVALID;
        } else {
            /* running stats are constants: y is affine in x */
            g->gin[0] = gyw ? oar_mul(gyw, rstd) : NULL;
            if (!g->gin[0] && gy) return OAR_ERR_INVALID;
        }
    }
    /* no gradient for the running stats (buffers) */
    if (want_w && !(g->gin[3] = oar_sum(oar_mul(gy, xhat), l.nd, l.dims, false)))
        return OAR_ERR_INVALID;
    if (want_b && !(g->gin[4] = oar_sum(gy, l.nd, l.dims, false))) return OAR_ERR_INVALID;
    return 0;
}

/* batch_norm_backward computes, with a = gy w, xhat = (x - mean) rstd and
 * E the per-channel mean over M values,
 *   gx = rstd (a - E[a] - xhat E[a xhat]),  gw = sum gy xhat,  gb = sum gy,
 * treating mean and rstd as inputs of their own (batch_norm's gradient
 * flows on through them). With u, p, q the gradients of gx, gw, gb:
 *   d a    = rstd (u - E[u] - xhat E[u xhat])      (gx's form, u for a)
 *   d xhat = -rstd (u E[a xhat] + a E[u xhat]) + p gy
 *   d rstd = sum u (a - E[a] - xhat E[a xhat]) + sum d xhat (x - mean)
 *   d gy   = d a w + p xhat + q,   d w = sum d a gy,
 *   d x    = d xhat rstd,          d mean = -sum d x.
 * Written with ops, so it differentiates again. */
static int grad_batch_norm_backward(oari_grad_ctx *g) {
    oar_tensor *gy = g->in[0], *x = g->in[1], *w = g->n_in > 4 ? g->in[4] : NULL;
    oar_tensor *u = g->gout[0];
    const bn_layout l = bn_layout_of(&g->in_meta[1]);
    const int nd = l.nd;
    const int64_t *dims = l.dims;
    oar_tensor *p = per_channel(g->gout[1], &l), *q = per_channel(g->gout[2], &l);
    oar_tensor *rstd = per_channel(g->in[3], &l), *wc = per_channel(w, &l);
    oar_tensor *xc = oar_sub(x, per_channel(g->in[2], &l)), *xhat = oar_mul(xc, rstd);
    oar_tensor *a = wc ? oar_mul(gy, wc) : gy;
    oar_tensor *da = NULL, *dxhat = NULL, *drstd = NULL, *dgy = NULL;
    if (u) {
        oar_tensor *ea = oar_mean(a, nd, dims, true);
        oar_tensor *eax = oar_mean(oar_mul(a, xhat), nd, dims, true);
        oar_tensor *eu = oar_mean(u, nd, dims, true);
        oar_tensor *eux = oar_mean(oar_mul(u, xhat), nd, dims, true);
        da = oar_mul(rstd, oar_sub(oar_sub(u, eu), oar_mul(xhat, eux)));
        dxhat = oar_neg(oar_mul(rstd, oar_add(oar_mul(u, eax), oar_mul(a, eux))));
        oar_tensor *t = oar_sub(oar_sub(a, ea), oar_mul(xhat, eax));
        drstd = oar_sum(oar_mul(u, t), nd, dims, false);
        dgy = wc ? oar_mul(da, wc) : da;
    }
    if (p) {
        dxhat = acc(dxhat, oar_mul(p, gy));
        dgy = acc(dgy, oar_mul(p, xhat));
    }
    if (q) dgy = acc(dgy, oar_expand(q, x->ndim, x->shape));
    oar_tensor *dx = dxhat ? oar_mul(dxhat, rstd) : NULL;
    if (dxhat) drstd = acc(drstd, oar_sum(oar_mul(dxhat, xc), nd, dims, false));
    oar_tensor *dmean = dx ? oar_neg(oar_sum(dx, nd, dims, false)) : NULL;
    oar_tensor *dw = w && da ? oar_sum(oar_mul(da, gy), nd, dims, false) : NULL;
    /* an op that failed left NULL where a gradient flows */
    if (((u || p || q) && !dgy) || ((u || p) && (!dx || !dmean || !drstd)) || (u && w && !dw))
        return oari_fail_status();
    oar_tensor *res[5] = {dgy, dx, dmean, drstd, dw};
    for (int i = 0; i < 5 && i < g->n_in; i++)
        if (g->needs[i]) g->gin[i] = res[i];
    return 0;
}

#define NORM_SAVED (OARI_SAVE_IN(0) | OARI_SAVE_IN(1) | OARI_SAVE_OUT(1) | OARI_SAVE_OUT(2))

const oari_op_def oari_def_layer_norm = {
    .name = "layer_norm",
    .n_in = 3,
    .n_out = 3,
    .fusion = OARI_FUSE_OPAQUE,
    .flags = OARI_F_OPTIONAL_IN,
    .saved = NORM_SAVED,
    .infer = infer_layer_norm,
    .grad = grad_layer_norm,
};
const oari_op_def oari_def_group_norm = {
    .name = "group_norm",
    .n_in = 3,
    .n_out = 3,
    .fusion = OARI_FUSE_OPAQUE,
    .flags = OARI_F_OPTIONAL_IN,
    .saved = NORM_SAVED,
    .infer = infer_group_norm,
    .grad = grad_group_norm,
};
const oari_op_def oari_def_batch_norm = {
    .name = "batch_norm",
    .n_in = 5,
    .n_out = 4,
    .fusion = OARI_FUSE_OPAQUE,
    .flags = OARI_F_OPTIONAL_IN,
    .saved = OARI_SAVE_IN(0) | OARI_SAVE_IN(3) | OARI_SAVE_OUT(1) | OARI_SAVE_OUT(2),
    .infer = infer_batch_norm,
    .grad = grad_batch_norm,
};
const oari_op_def oari_def_batch_norm_backward = {
    .name = "batch_norm_backward",
    .n_in = 5,
    .n_out = 3,
    .fusion = OARI_FUSE_OPAQUE,
    .flags = OARI_F_OPTIONAL_IN,
    .saved = OARI_SAVE_ALL_IN,
    .infer = infer_batch_norm_backward,
    .grad = grad_batch_norm_backward,
};

/* ---- public functions ------------------------------------------------------------------ */

oar_tensor *oar_layer_norm(oar_tensor *x, int n_norm_dims, oar_tensor *weight, oar_tensor *bias,
                           double eps) {
    oari_attrs a = {.ni = 1, .nf = 1, .i = {n_norm_dims}, .f = {eps}};
    oar_tensor *in[3] = {x, weight, bias};
    return oari_call(OARI_OP_layer_norm, 3, in, &a);
}

oar_tensor *oar_group_norm(oar_tensor *x, int64_t groups, oar_tensor *weight, oar_tensor *bias,
                           double eps) {
    oari_attrs a = {.ni = 1, .nf = 1, .i = {groups}, .f = {eps}};
    oar_tensor *in[3] = {x, weight, bias};
    return oari_call(OARI_OP_group_norm, 3, in, &a);
}

/* running = (1 - momentum) running + momentum stat, in place, not recorded. */
static int update_running(oar_tensor *running, oar_tensor *stat, double momentum) {
    if (!running) return 0;
    oar_pool *p = oar_pool_push();
    oari_no_grad_push();
    oar_tensor *v =
        oar_add(oar_mul(running, oar_scalar(1 - momentum)), oar_mul(stat, oar_scalar(momentum)));
    int st = v ? oar_copy_(running, v) : oari_fail_status();
    oari_no_grad_pop();
    oar_pool_pop(p);
    return st;
}

oar_tensor *oar_batch_norm(oar_tensor *x, oar_tensor *running_mean, oar_tensor *running_var,
                           oar_tensor *weight, oar_tensor *bias, bool training, double momentum,
                           double eps) {
    oari_attrs a = {.ni = 1, .nf = 1, .i = {training}, .f = {eps}};
    oar_tensor *in[5] = {x, running_mean, running_var, weight, bias}, *out[OARI_MAX_OUT];
    if (oari_dispatch(OARI_OP_batch_norm, 5, in, &a, out)) return NULL;
    int st = 0;
    if (training && x->numel) {
        st = update_running(running_mean, out[1], momentum);
        if (!st) st = update_running(running_var, out[3], momentum);
    }
    for (int j = 1; j < 4; j++)
        oar_tensor_release(out[j]);
    if (st) {
        oar_tensor_release(out[0]);
        return NULL;
    }
    return oari_pool_adopt(out[0]);
}

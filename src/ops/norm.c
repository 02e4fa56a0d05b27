/* Normalisation ops (layer, group and batch norm): definitions, gradient
 * rules written with ops, and public functions. Kernels:
 * src/backends/cpu/cpu_norm.c. Each primitive also outputs the mean and
 * rstd = 1/sqrt(var + eps) it normalised with; the gradient rules read them
 * and also handle gradients flowing into them (needed by double backward,
 * since a first-order gradient uses them). */
#include "op.h"
#include "device_ops.h"

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

/* The fused backward ops (defs/conv.def): gy and x alike; mean and rstd
 * shaped as the forward's statistics (stat, n_stat dims), weight? as its
 * parameters (param, n_param dims); outs gx, gw, gb (gw, gb as weight). */
static int infer_norm_backward(oari_infer *c, int n_stat, const int64_t *stat, int n_param,
                               const int64_t *param) {
    const oar_tensor *gy = c->in[0], *x = c->in[1];
    char bg[200], bx[200];
    if (!gy || gy->ndim != x->ndim || memcmp(gy->shape, x->shape, (size_t)x->ndim * sizeof *x->shape))
        return oari_error(OAR_ERR_INVALID, "%s: grad_out %s must have input %s's shape", c->op,
                          gy ? oari_shape_str(bg, gy->ndim, gy->shape) : "(NULL)",
                          oari_shape_str(bx, x->ndim, x->shape));
    if (!oar_dtype_is_float(gy->dtype))
        return oari_error(OAR_ERR_INVALID, "%s: grad_out must be floating, got %s", c->op,
                          oar_dtype_name(gy->dtype));
    c->in_dtype[0] = x->dtype;
    if (!c->in[2] || !c->in[3])
        return oari_error(OAR_ERR_INVALID, "%s: mean and rstd are required", c->op);
    if (check_param(c, x, 2, "mean", n_stat, stat) || check_param(c, x, 3, "rstd", n_stat, stat) ||
        check_param(c, x, 4, "weight", n_param, param))
        return OAR_ERR_INVALID;
    oari_meta_from(&c->out[0], x);
    for (int j = 1; j < 3; j++) {
        c->out[j].dtype = x->dtype;
        c->out[j].ndim = n_param;
        memcpy(c->out[j].shape, param, (size_t)n_param * sizeof *param);
    }
    return 0;
}

/* batch_norm_backward: x [N, C, *]; statistics and parameters [C]. */
static int infer_batch_norm_backward(oari_infer *c) {
    if (check_input(c->op, c->in[1], 2)) return OAR_ERR_INVALID;
    return infer_norm_backward(c, 1, &c->in[1]->shape[1], 1, &c->in[1]->shape[1]);
}

/* layer_norm_backward: iattr[0] n; statistics x's shape with the last n
 * dims 1 (layer_norm's outs 1 and 2), parameters the last n dims. */
static int infer_layer_norm_backward(oari_infer *c) {
    const oar_tensor *x = c->in[1];
    if (check_input(c->op, x, 1)) return OAR_ERR_INVALID;
    int64_t n = c->attrs->ni ? c->attrs->i[0] : -1, stat[OAR_MAX_DIMS];
    if (n < 1 || n > x->ndim) {
        char b[200];
        return oari_error(OAR_ERR_INVALID, "layer_norm_backward: n_norm_dims %lld out of range for input %s (1 to %d)",
                          (long long)n, oari_shape_str(b, x->ndim, x->shape), x->ndim);
    }
    for (int d = 0; d < x->ndim; d++)
        stat[d] = d < x->ndim - n ? x->shape[d] : 1;
    return infer_norm_backward(c, x->ndim, stat, (int)n, x->shape + x->ndim - n);
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

/* Where a norm's statistics and parameters sit in x [..]: the statistics
 * (mean, rstd) are per group of M values over stat_dims, broadcast to x
 * as stat_shape; the parameters (weight, bias and their gradients) vary
 * along the other dims and are summed over param_dims, broadcast as
 * param_shape. layer_norm: stats over the last n dims, params over the
 * leading ones; batch_norm: both over all dims but the channels (1). */
typedef struct {
    int ndim, n_stat, n_param;
    int64_t stat_dims[OAR_MAX_DIMS], param_dims[OAR_MAX_DIMS];
    int64_t stat_shape[OAR_MAX_DIMS], param_shape[OAR_MAX_DIMS];
    double m;
} norm_layout;

static norm_layout ln_layout_of(const oari_meta *x, int n) {
    norm_layout l = {.ndim = x->ndim, .m = 1};
    for (int i = 0; i < x->ndim; i++) {
        bool stat = i >= x->ndim - n;
        l.stat_shape[i] = stat ? 1 : x->shape[i];
        l.param_shape[i] = stat ? x->shape[i] : 1;
        if (stat) {
            l.stat_dims[l.n_stat++] = i;
            l.m *= (double)x->shape[i];
        } else {
            l.param_dims[l.n_param++] = i;
        }
    }
    return l;
}

static norm_layout bn_layout_of(const oari_meta *x) {
    norm_layout l = {.ndim = x->ndim, .m = 1};
    for (int i = 0; i < x->ndim; i++) {
        l.stat_shape[i] = l.param_shape[i] = i == 1 ? x->shape[1] : 1;
        if (i == 1) continue;
        l.stat_dims[l.n_stat++] = l.param_dims[l.n_param++] = i;
        l.m *= (double)x->shape[i];
    }
    return l;
}

static oar_tensor *as_stat(oar_tensor *t, const norm_layout *l) {
    return t ? oar_reshape(t, l->ndim, l->stat_shape) : NULL;
}
static oar_tensor *as_param(oar_tensor *t, const norm_layout *l) {
    return t ? oar_reshape(t, l->ndim, l->param_shape) : NULL;
}
static oar_tensor *sum_stat(oar_tensor *t, const norm_layout *l) {
    return oar_sum(t, l->n_stat, l->stat_dims, true);
}
static oar_tensor *sum_param(oar_tensor *t, const norm_layout *l) {
    return l->n_param ? oar_sum(t, l->n_param, l->param_dims, true) : t;
}
/* t reshaped to meta's shape (a stat or param sum kept its dims). */
static oar_tensor *shaped(oar_tensor *t, const oari_meta *m) {
    return t ? oar_reshape(t, m->ndim, m->shape) : NULL;
}

/* The first-order gradient of layer_norm or batch_norm (training) through
 * their fused backward op `op`: gy, x, mean, rstd, w as the op takes them;
 * gm, gr the gradients reaching mean and rstd (stat-shaped, or NULL), added
 * with the composite. Sets gin[0] (x), and gin[iw], gin[ib] (weight, bias)
 * where needed. */
static int fused_norm_grad(oari_grad_ctx *g, oari_op op, const oari_attrs *a, oar_tensor *const in[5],
                           const norm_layout *l, oar_tensor *gm, oar_tensor *gr, int iw, int ib) {
    oar_tensor *out[OARI_MAX_OUT] = {0};
    if (oari_dispatch(op, 5, in, a, out)) return oari_fail_status();
    for (int j = 0; j < 3; j++)
        if (!oari_pool_adopt(out[j])) return oari_fail_status();
    g->gin[0] = out[0];
    if (gm || gr) {
        oar_tensor *rstd = as_stat(in[3], l), *xhat = oar_mul(oar_sub(in[1], as_stat(in[2], l)), rstd);
        oar_tensor *extra = norm_input_grad(NULL, xhat, rstd, gm, gr, l->n_stat, l->stat_dims, l->m);
        if (!(g->gin[0] = extra ? oar_add(out[0], extra) : NULL)) return oari_fail_status();
    }
    if (iw < g->n_in && g->needs[iw]) g->gin[iw] = out[1];
    if (ib < g->n_in && g->needs[ib]) g->gin[ib] = out[2];
    return 0;
}

static int grad_layer_norm(oari_grad_ctx *g) {
    oar_tensor *x = g->in[0], *w = g->n_in > 1 ? g->in[1] : NULL, *gy = g->gout[0];
    const norm_layout l = ln_layout_of(&g->in_meta[0], (int)g->attrs->i[0]);
    oar_tensor *gm = g->gout[1], *gr = g->gout[2]; /* already stat-shaped */
    if (gy && g->needs[0] && oari_fused_op_here(OARI_OP_layer_norm_backward, x)) {
        oar_tensor *in[5] = {gy, x, g->out[1], g->out[2], w};
        oari_attrs a = oari_attrs_ints(1, g->attrs->i);
        return fused_norm_grad(g, OARI_OP_layer_norm_backward, &a, in, &l, gm, gr, 1, 2);
    }
    oar_tensor *mean = g->out[1], *rstd = g->out[2];
    oar_tensor *xhat = oar_mul(oar_sub(x, mean), rstd);
    if (g->needs[0]) {
        oar_tensor *gyw = gy && w ? oar_mul(gy, w) : gy;
        g->gin[0] = norm_input_grad(gyw, xhat, rstd, gm, gr, l.n_stat, l.stat_dims, l.m);
        if (!g->gin[0] && (gy || gm || gr)) return OAR_ERR_INVALID;
    }
    if (gy && g->n_in > 1 && g->needs[1] &&
        !(g->gin[1] = shaped(sum_param(oar_mul(gy, xhat), &l), &g->in_meta[1])))
        return OAR_ERR_INVALID;
    if (gy && g->n_in > 2 && g->needs[2] && !(g->gin[2] = shaped(sum_param(gy, &l), &g->in_meta[2])))
        return OAR_ERR_INVALID;
    return 0;
}

static int grad_batch_norm(oari_grad_ctx *g) {
    oar_tensor *x = g->in[0], *w = g->n_in > 3 ? g->in[3] : NULL, *gy = g->gout[0];
    bool training = g->attrs->i[0] != 0;
    const norm_layout l = bn_layout_of(&g->in_meta[0]);
    oar_tensor *gm = as_stat(g->gout[1], &l), *gr = as_stat(g->gout[2], &l);
    if (training && gy && g->needs[0] && oari_fused_op_here(OARI_OP_batch_norm_backward, x)) {
        /* the usual first-order case in one pass over gy and x; its own
         * gradient rule (below) keeps grad-of-grad working */
        oar_tensor *in[5] = {gy, x, g->out[1], g->out[2], w};
        return fused_norm_grad(g, OARI_OP_batch_norm_backward, NULL, in, &l, gm, gr, 3, 4);
    }
    oar_tensor *mean = as_stat(g->out[1], &l), *rstd = as_stat(g->out[2], &l);
    oar_tensor *xhat = oar_mul(oar_sub(x, mean), rstd);
    if (g->needs[0]) {
        oar_tensor *gyw = gy && w ? oar_mul(gy, as_param(w, &l)) : gy;
        if (training) {
            g->gin[0] = norm_input_grad(gyw, xhat, rstd, gm, gr, l.n_stat, l.stat_dims, l.m);
            if (!g->gin[0] && (gy || gm || gr)) return OAR_ERR_INVALID;
        } else {
            /* running stats are constants: y is affine in x */
            g->gin[0] = gyw ? oar_mul(gyw, rstd) : NULL;
            if (!g->gin[0] && gy) return OAR_ERR_INVALID;
        }
    }
    /* no gradient for the running stats (buffers) */
    if (gy && g->n_in > 3 && g->needs[3] &&
        !(g->gin[3] = shaped(sum_param(oar_mul(gy, xhat), &l), &g->in_meta[3])))
        return OAR_ERR_INVALID;
    if (gy && g->n_in > 4 && g->needs[4] && !(g->gin[4] = shaped(sum_param(gy, &l), &g->in_meta[4])))
        return OAR_ERR_INVALID;
    return 0;
}

/* The fused backward ops (layer_norm_backward, batch_norm_backward)
 * compute, with a = gy w, xhat = (x - mean) rstd and E the mean over each
 * statistic's M values,
 *   gx = rstd (a - E[a] - xhat E[a xhat]),  gw = sum gy xhat,  gb = sum gy
 * (gw, gb summed over the parameter dims), treating mean and rstd as
 * inputs of their own (the forward's gradient flows on through them).
 * With u, p, q the gradients of gx, gw, gb (S: a sum over a statistic):
 *   d a    = rstd (u - E[u] - xhat E[u xhat])      (gx's form, u for a)
 *   d xhat = -rstd (u E[a xhat] + a E[u xhat]) + p gy
 *   d rstd = S u (a - E[a] - xhat E[a xhat]) + S d xhat (x - mean)
 *   d gy   = d a w + p xhat + q,   d w = sum d a gy (parameter dims),
 *   d x    = d xhat rstd,          d mean = -S d x.
 * Written with ops, so it differentiates again. */
static int grad_norm_backward(oari_grad_ctx *g, const norm_layout *l) {
    oar_tensor *gy = g->in[0], *x = g->in[1], *w = g->n_in > 4 ? g->in[4] : NULL;
    oar_tensor *u = g->gout[0];
    const int ns = l->n_stat;
    const int64_t *sd = l->stat_dims;
    oar_tensor *p = as_param(g->gout[1], l), *q = as_param(g->gout[2], l);
    oar_tensor *rstd = as_stat(g->in[3], l), *wc = as_param(w, l);
    oar_tensor *xc = oar_sub(x, as_stat(g->in[2], l)), *xhat = oar_mul(xc, rstd);
    oar_tensor *a = wc ? oar_mul(gy, wc) : gy;
    oar_tensor *da = NULL, *dxhat = NULL, *drstd = NULL, *dgy = NULL;
    if (u) {
        oar_tensor *ea = oar_mean(a, ns, sd, true), *eax = oar_mean(oar_mul(a, xhat), ns, sd, true);
        oar_tensor *eu = oar_mean(u, ns, sd, true), *eux = oar_mean(oar_mul(u, xhat), ns, sd, true);
        da = oar_mul(rstd, oar_sub(oar_sub(u, eu), oar_mul(xhat, eux)));
        dxhat = oar_neg(oar_mul(rstd, oar_add(oar_mul(u, eax), oar_mul(a, eux))));
        drstd = sum_stat(oar_mul(u, oar_sub(oar_sub(a, ea), oar_mul(xhat, eax))), l);
        dgy = wc ? oar_mul(da, wc) : da;
    }
    if (p) {
        dxhat = acc(dxhat, oar_mul(p, gy));
        dgy = acc(dgy, oar_mul(p, xhat));
    }
    if (q) dgy = acc(dgy, oar_expand(q, x->ndim, x->shape));
    oar_tensor *dx = dxhat ? oar_mul(dxhat, rstd) : NULL;
    if (dxhat) drstd = acc(drstd, sum_stat(oar_mul(dxhat, xc), l));
    oar_tensor *dmean = dx ? oar_neg(sum_stat(dx, l)) : NULL;
    oar_tensor *dw = w && da ? sum_param(oar_mul(da, gy), l) : NULL;
    /* an op that failed left NULL where a gradient flows */
    if (((u || p || q) && !dgy) || ((u || p) && (!dx || !dmean || !drstd)) || (u && w && !dw))
        return oari_fail_status();
    oar_tensor *res[5] = {dgy, dx, dmean, drstd, dw};
    for (int i = 0; i < 5 && i < g->n_in; i++)
        if (g->needs[i] && res[i] && !(g->gin[i] = i >= 2 ? shaped(res[i], &g->in_meta[i]) : res[i]))
            return oari_fail_status();
    return 0;
}

static int grad_batch_norm_backward(oari_grad_ctx *g) {
    const norm_layout l = bn_layout_of(&g->in_meta[1]);
    return grad_norm_backward(g, &l);
}

static int grad_layer_norm_backward(oari_grad_ctx *g) {
    const norm_layout l = ln_layout_of(&g->in_meta[1], (int)g->attrs->i[0]);
    return grad_norm_backward(g, &l);
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
const oari_op_def oari_def_layer_norm_backward = {
    .name = "layer_norm_backward",
    .n_in = 5,
    .n_out = 3,
    .fusion = OARI_FUSE_OPAQUE,
    .flags = OARI_F_OPTIONAL_IN,
    .saved = OARI_SAVE_ALL_IN,
    .infer = infer_layer_norm_backward,
    .grad = grad_layer_norm_backward,
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

/* Neural-network ops: the softmax and log_softmax primitives, and the
 * composites over public ops: losses (cross_entropy, nll, mse, l1,
 * smooth_l1, bce with logits), dropout, embedding and scaled dot-product
 * attention. Kernels: src/backends/cpu/cpu_nn.c. */
#include "op.h"

#include <math.h>
#include <string.h>

/* ---- softmax / log_softmax: shape rule and gradient rules -------------------- */

static int infer_softmax(oari_infer *c) {
    const oar_tensor *x = c->in[0];
    int64_t dim = c->attrs->ni ? c->attrs->i[0] : -1;
    if (x->ndim ? dim < 0 || dim >= x->ndim : dim != 0)
        return oari_error(OAR_ERR_INVALID, "%s: dim %lld out of range for a %d-d input", c->op,
                          (long long)dim, x->ndim);
    oar_dtype d = x->dtype;
    if (oar_dtype_is_complex(d) || d == OAR_BOOL)
        return oari_error(OAR_ERR_INVALID, "%s: not defined for %s input", c->op,
                          oar_dtype_name(d));
    if (oar_dtype_is_integral(d)) d = OAR_F32;
    oari_meta_from(&c->out[0], x);
    c->out[0].dtype = d;
    c->in_dtype[0] = d;
    c->kernel_dtype = d;
    return 0;
}

static int grad_softmax(oari_grad_ctx *g) {
    /* y * (g - sum(g * y, dim, keepdim)) */
    oar_tensor *y = g->out[0], *go = g->gout[0];
    if (!go) return 0;
    int64_t dim = g->attrs->i[0];
    int nd = y->ndim ? 1 : 0;
    g->gin[0] = oar_mul(y, oar_sub(go, oar_sum(oar_mul(go, y), nd, &dim, true)));
    return g->gin[0] ? 0 : oari_fail_status();
}

static int grad_log_softmax(oari_grad_ctx *g) {
    /* g - exp(y) * sum(g, dim, keepdim) */
    oar_tensor *y = g->out[0], *go = g->gout[0];
    if (!go) return 0;
    int64_t dim = g->attrs->i[0];
    int nd = y->ndim ? 1 : 0;
    g->gin[0] = oar_sub(go, oar_mul(oar_exp(y), oar_sum(go, nd, &dim, true)));
    return g->gin[0] ? 0 : oari_fail_status();
}

const oari_op_def oari_def_softmax = {
    .name = "softmax", .n_in = 1, .n_out = 1, .fusion = OARI_FUSE_OPAQUE,
    .saved = OARI_SAVE_OUT(0), .infer = infer_softmax, .grad = grad_softmax,
};
const oari_op_def oari_def_log_softmax = {
    .name = "log_softmax", .n_in = 1, .n_out = 1, .fusion = OARI_FUSE_OPAQUE,
    .saved = OARI_SAVE_OUT(0), .infer = infer_softmax, .grad = grad_log_softmax,
};

static bool is_null(const char *op, const char *what, const oar_tensor *x) {
    if (x) return false;
    if (!oari_error_pending()) oari_error(OAR_ERR_INVALID, "%s: %s is NULL", op, what);
    return true;
}

static oar_tensor *softmax_call(oari_op op, const char *name, oar_tensor *x, int dim) {
    if (is_null(name, "input", x)) return NULL;
    int d = oari_wrap_dim(name, dim, x->ndim ? x->ndim : 1);
    if (d < 0) return NULL;
    oari_attrs a = {.ni = 1, .i = {d}};
    return oari_call1(op, x, &a);
}

oar_tensor *oar_softmax(oar_tensor *x, int dim) {
    return softmax_call(OARI_OP_softmax, "softmax", x, dim);
}

oar_tensor *oar_log_softmax(oar_tensor *x, int dim) {
    return softmax_call(OARI_OP_log_softmax, "log_softmax", x, dim);
}

/* ---- losses ------------------------------------------------------------------ */

static bool bad_reduction(const char *op, oar_reduction r) {
    if (r == OAR_REDUCTION_NONE || r == OAR_REDUCTION_MEAN || r == OAR_REDUCTION_SUM) return false;
    oari_error(OAR_ERR_INVALID, "%s: invalid reduction %d (use OAR_REDUCTION_NONE, _MEAN or _SUM)",
               op, (int)r);
    return true;
}

static oar_tensor *reduce(oar_tensor *loss, oar_reduction r) {
    if (r == OAR_REDUCTION_SUM) return oar_sum(loss, 0, NULL, false);
    if (r == OAR_REDUCTION_MEAN) return oar_mean(loss, 0, NULL, false);
    return loss;
}

static bool is_index_dtype(oar_dtype d) { return d == OAR_I64 || d == OAR_I32; }

static bool is_real_float(oar_dtype d) { return oar_dtype_is_float(d); }

/* Checks a class-index target against input [N, C, d...] (or [C] with a
 * 0-d target) and a weight of [C] or NULL. */
static int check_class_target(const char *op, const oar_tensor *in, const oar_tensor *target,
                              const oar_tensor *weight) {
    char si[200], st[200];
    if (!is_real_float(in->dtype))
        return oari_error(OAR_ERR_INVALID, "%s: expected a floating input, got %s", op,
                          oar_dtype_name(in->dtype));
    if (in->ndim < 1)
        return oari_error(OAR_ERR_INVALID, "%s: expected an input of shape [N, C, ...] or [C], got "
                          "a 0-d tensor", op);
    if (!is_index_dtype(target->dtype))
        return oari_error(OAR_ERR_INVALID, "%s: expected a target of class indices of dtype int64, "
                          "got %s", op, oar_dtype_name(target->dtype));
    bool ok = target->ndim == (in->ndim == 1 ? 0 : in->ndim - 1);
    for (int i = 0; ok && i < target->ndim; i++)
        ok = target->shape[i] == in->shape[i == 0 ? 0 : i + 1];
    if (!ok)
        return oari_error(OAR_ERR_INVALID,
                          "%s: target of shape %s does not match input of shape %s "
                          "(expected the input's shape without its class dim)",
                          op, oari_shape_str(st, target->ndim, target->shape),
                          oari_shape_str(si, in->ndim, in->shape));
    int64_t C = in->shape[in->ndim == 1 ? 0 : 1];
    if (weight && (weight->ndim != 1 || weight->shape[0] != C || !is_real_float(weight->dtype)))
        return oari_error(OAR_ERR_INVALID,
                          "%s: weight must be a floating tensor of shape [%lld], got "
                          "%s of shape %s",
                          op, (long long)C, oar_dtype_name(weight->dtype),
                          oari_shape_str(st, weight->ndim, weight->shape));
    return 0;
}

/* The pieces of nll over log-probabilities logp (class dim cd): per-element
 * losses (0 where ignored), per-element weights (0 where ignored) and the
 * ignore mask. */
typedef struct {
    oar_tensor *loss, *w, *ignored;
} nll_parts;

static int nll_make(oar_tensor *logp, oar_tensor *target, oar_tensor *weight, int64_t ignore_index,
                    int cd, nll_parts *p) {
    p->ignored = oar_eq(target, oar_scalar((double)ignore_index));
    oar_tensor *keep = oar_logical_not(p->ignored);
    oar_tensor *safe = oar_where(p->ignored, oar_scalar(0), target);
    oar_tensor *picked = oar_squeeze(oar_gather(logp, cd, oar_unsqueeze(safe, cd)), cd);
    if (!picked) return OAR_ERR_INVALID;
    oar_tensor *zero = oar_scalar(0);
    if (weight) {
        int64_t flat = -1;
        oar_tensor *wt = oar_index_select(weight, 0, oar_reshape(safe, 1, &flat));
        wt = oar_reshape(wt, target->ndim, target->shape);
        p->w = oar_where(keep, wt, zero);
        p->loss = oar_where(keep, oar_neg(oar_mul(picked, wt)), zero);
    } else {
        p->w = oar_cast(keep, logp->dtype);
        p->loss = oar_where(keep, oar_neg(picked), zero);
    }
    return p->loss && p->w ? 0 : OAR_ERR_INVALID;
}

static oar_tensor *nll_reduce(const nll_parts *p, oar_reduction r) {
    if (r == OAR_REDUCTION_NONE) return p->loss;
    oar_tensor *s = oar_sum(p->loss, 0, NULL, false);
    return r == OAR_REDUCTION_SUM ? s : oar_div(s, oar_sum(p->w, 0, NULL, false));
}

oar_tensor *oar_nll_loss(oar_tensor *log_probs, oar_tensor *target, oar_tensor *weight,
                         int64_t ignore_index, oar_reduction reduction) {
    const char *op = "nll_loss";
    if (is_null(op, "input", log_probs) || is_null(op, "target", target)) return NULL;
    if (bad_reduction(op, reduction) || check_class_target(op, log_probs, target, weight))
        return NULL;
    oar_pool *pool = oar_pool_push();
    nll_parts p;
    oar_tensor *r = NULL;
    if (!nll_make(log_probs, target, weight, ignore_index, log_probs->ndim == 1 ? 0 : 1, &p))
        r = nll_reduce(&p, reduction);
    return oari_pool_return(pool, r);
}

/* weight [C] shaped to broadcast against an input of ndim dims, class dim cd. */
static oar_tensor *class_weight(oar_tensor *weight, int ndim, int cd) {
    int64_t shape[OAR_MAX_DIMS];
    for (int i = 0; i < ndim; i++) shape[i] = i == cd ? weight->shape[0] : 1;
    return oar_reshape(weight, ndim, shape);
}

static oar_tensor *ce_probs(oar_tensor *logp, oar_tensor *target, oar_tensor *weight, int cd,
                            double ls, oar_reduction reduction) {
    int64_t C = logp->shape[cd];
    oar_tensor *t = target;
    if (ls > 0) t = oar_add_scalar(oar_mul_scalar(target, 1 - ls), ls / (double)C);
    oar_tensor *prod = oar_mul(logp, t);
    if (weight) prod = oar_mul(prod, class_weight(weight, logp->ndim, cd));
    if (reduction == OAR_REDUCTION_NONE) {
        int64_t d = cd;
        return oar_neg(oar_sum(prod, 1, &d, false));
    }
    oar_tensor *s = oar_neg(oar_sum(prod, 0, NULL, false));
    if (reduction == OAR_REDUCTION_SUM) return s;
    double count = C ? (double)(logp->numel / C) : 0.0;
    return oar_div_scalar(s, count);
}

static oar_tensor *ce_indices(oar_tensor *logp, oar_tensor *target, oar_tensor *weight, int cd,
                              int64_t ignore_index, double ls, oar_reduction reduction) {
    nll_parts p;
    if (nll_make(logp, target, weight, ignore_index, cd, &p)) return NULL;
    oar_tensor *nll = nll_reduce(&p, reduction);
    if (ls == 0) return nll;
    /* PyTorch's label smoothing: (1 - ls) * nll + ls / C * smooth, where
     * smooth = -sum_c w_c logp_c (0 where ignored), reduced like nll */
    int64_t d = cd, C = logp->shape[cd];
    oar_tensor *wl = weight ? oar_mul(logp, class_weight(weight, logp->ndim, cd)) : logp;
    oar_tensor *smooth = oar_where(p.ignored, oar_scalar(0), oar_neg(oar_sum(wl, 1, &d, false)));
    oar_tensor *ret = smooth;
    if (reduction != OAR_REDUCTION_NONE) {
        ret = oar_sum(smooth, 0, NULL, false);
        if (reduction == OAR_REDUCTION_MEAN) ret = oar_div(ret, oar_sum(p.w, 0, NULL, false));
    }
    return oar_add(oar_mul_scalar(nll, 1 - ls), oar_mul_scalar(ret, ls / (double)C));
}

oar_tensor *oar_cross_entropy(oar_tensor *logits, oar_tensor *target, oar_tensor *weight,
                              int64_t ignore_index, double label_smoothing,
                              oar_reduction reduction) {
    const char *op = "cross_entropy";
    if (is_null(op, "input", logits) || is_null(op, "target", target)) return NULL;
    if (bad_reduction(op, reduction)) return NULL;
    if (!(label_smoothing >= 0 && label_smoothing <= 1))
        return oari_error(OAR_ERR_INVALID, "%s: label_smoothing must be in [0, 1], got %g", op,
                          label_smoothing), NULL;
    char si[200], st[200];
    bool probs = is_real_float(target->dtype);
    if (probs) {
        if (!is_real_float(logits->dtype))
            return oari_error(OAR_ERR_INVALID, "%s: expected a floating input, got %s", op,
                              oar_dtype_name(logits->dtype)), NULL;
        if (logits->ndim < 1 || target->ndim != logits->ndim ||
            memcmp(target->shape, logits->shape, (size_t)logits->ndim * sizeof(int64_t)))
            return oari_error(OAR_ERR_INVALID,
                              "%s: a probability target must have the input's "
                              "shape %s, got %s",
                              op, oari_shape_str(si, logits->ndim, logits->shape),
                              oari_shape_str(st, target->ndim, target->shape)),
                   NULL;
        int64_t C = logits->shape[logits->ndim == 1 ? 0 : 1];
        if (weight && (weight->ndim != 1 || weight->shape[0] != C || !is_real_float(weight->dtype)))
            return oari_error(OAR_ERR_INVALID,
                              "%s: weight must be a floating tensor of shape [%lld], "
                              "got %s of shape %s",
                              op, (long long)C, oar_dtype_name(weight->dtype),
                              oari_shape_str(st, weight->ndim, weight->shape)),
                   NULL;
    } else if (!is_index_dtype(target->dtype)) {
        return oari_error(OAR_ERR_INVALID,
                          "%s: expected a target of class indices (int64) or of "
                          "probabilities (floating), got %s",
                          op, oar_dtype_name(target->dtype)),
               NULL;
    } else if (check_class_target(op, logits, target, weight)) {
        return NULL;
    }
    int cd = logits->ndim == 1 ? 0 : 1;
    oar_pool *pool = oar_pool_push();
    oar_tensor *logp = oar_log_softmax(logits, cd), *r = NULL;
    if (logp)
        r = probs ? ce_probs(logp, target, weight, cd, label_smoothing, reduction)
                  : ce_indices(logp, target, weight, cd, ignore_index, label_smoothing, reduction);
    return oari_pool_return(pool, r);
}

static bool check_pair(const char *op, oar_tensor *input, oar_tensor *target, oar_reduction r) {
    return is_null(op, "input", input) || is_null(op, "target", target) || bad_reduction(op, r);
}

oar_tensor *oar_mse_loss(oar_tensor *input, oar_tensor *target, oar_reduction reduction) {
    if (check_pair("mse_loss", input, target, reduction)) return NULL;
    oar_pool *pool = oar_pool_push();
    oar_tensor *r = reduce(oar_square(oar_sub(input, target)), reduction);
    return oari_pool_return(pool, r);
}

oar_tensor *oar_l1_loss(oar_tensor *input, oar_tensor *target, oar_reduction reduction) {
    if (check_pair("l1_loss", input, target, reduction)) return NULL;
    oar_pool *pool = oar_pool_push();
    oar_tensor *r = reduce(oar_abs(oar_sub(input, target)), reduction);
    return oari_pool_return(pool, r);
}

oar_tensor *oar_smooth_l1_loss(oar_tensor *input, oar_tensor *target, double beta,
                               oar_reduction reduction) {
    if (check_pair("smooth_l1_loss", input, target, reduction)) return NULL;
    if (!(beta >= 0))
        return oari_error(OAR_ERR_INVALID, "smooth_l1_loss: beta must be >= 0, got %g", beta), NULL;
    oar_pool *pool = oar_pool_push();
    oar_tensor *d = oar_abs(oar_sub(input, target)), *loss;
    if (beta == 0) {
        loss = d;
    } else {
        /* |d| < beta ? 0.5 d^2 / beta : |d| - 0.5 beta */
        loss = oar_where(oar_lt(d, oar_scalar(beta)), oar_mul_scalar(oar_square(d), 0.5 / beta),
                         oar_sub_scalar(d, 0.5 * beta));
    }
    return oari_pool_return(pool, reduce(loss, reduction));
}

oar_tensor *oar_binary_cross_entropy_with_logits(oar_tensor *logits, oar_tensor *target,
                                                 oar_tensor *weight, oar_tensor *pos_weight,
                                                 oar_reduction reduction) {
    const char *op = "binary_cross_entropy_with_logits";
    if (check_pair(op, logits, target, reduction)) return NULL;
    char si[200], st[200];
    if (target->ndim != logits->ndim ||
        memcmp(target->shape, logits->shape, (size_t)logits->ndim * sizeof(int64_t)))
        return oari_error(OAR_ERR_INVALID, "%s: target of shape %s must have the input's shape %s",
                          op, oari_shape_str(st, target->ndim, target->shape),
                          oari_shape_str(si, logits->ndim, logits->shape)), NULL;
    if (!is_real_float(logits->dtype) || !is_real_float(target->dtype))
        return oari_error(OAR_ERR_INVALID, "%s: expected floating input and target, got %s and %s",
                          op, oar_dtype_name(logits->dtype), oar_dtype_name(target->dtype)), NULL;
    oar_pool *pool = oar_pool_push();
    /* (1 - t) x + lw * softplus(-x), lw = 1 + (pos_weight - 1) t, with the
     * stable softplus(-x) = relu(-x) + log1p(exp(-|x|)) */
    oar_tensor *x = logits;
    oar_tensor *sp = oar_add(oar_relu(oar_neg(x)), oar_log1p(oar_exp(oar_neg(oar_abs(x)))));
    oar_tensor *lw = pos_weight ? oar_add_scalar(oar_mul(oar_sub_scalar(pos_weight, 1), target), 1)
                                : NULL;
    oar_tensor *loss =
        oar_add(oar_mul(oar_sub(oar_scalar(1), target), x), lw ? oar_mul(lw, sp) : sp);
    if (weight) loss = oar_mul(loss, weight);
    return oari_pool_return(pool, reduce(loss, reduction));
}

/* ---- dropout, embedding, attention --------------------------------------------- */

oar_tensor *oar_dropout(oar_tensor *x, double p, bool training) {
    if (is_null("dropout", "input", x)) return NULL;
    if (!(p >= 0 && p <= 1))
        return oari_error(OAR_ERR_INVALID, "dropout: p must be in [0, 1], got %g", p), NULL;
    if (!oar_dtype_is_float(x->dtype) && !oar_dtype_is_complex(x->dtype))
        return oari_error(OAR_ERR_INVALID, "dropout: expected a floating input, got %s",
                          oar_dtype_name(x->dtype)), NULL;
    if (!training || p == 0) return oari_pool_adopt(oar_tensor_retain(x));
    oar_pool *pool = oar_pool_push();
    oar_tensor *r;
    if (p == 1) {
        r = oar_mul_scalar(x, 0.0);
    } else {
        oar_dtype md = x->dtype == OAR_C64 ? OAR_F32 : x->dtype == OAR_C128 ? OAR_F64 : x->dtype;
        oar_tensor *keep = oar_bernoulli(oar_full(md, x->ndim, x->shape, 1 - p));
        r = oar_mul(x, oar_mul_scalar(keep, 1 / (1 - p)));
    }
    return oari_pool_return(pool, r);
}

oar_tensor *oar_embedding(oar_tensor *weight, oar_tensor *indices) {
    const char *op = "embedding";
    if (is_null(op, "weight", weight) || is_null(op, "indices", indices)) return NULL;
    char sw[200];
    if (weight->ndim != 2)
        return oari_error(OAR_ERR_INVALID, "embedding: weight must be [num, dim], got shape %s",
                          oari_shape_str(sw, weight->ndim, weight->shape)), NULL;
    if (!is_index_dtype(indices->dtype))
        return oari_error(OAR_ERR_INVALID, "embedding: indices must be int64 (or int32), got %s",
                          oar_dtype_name(indices->dtype)), NULL;
    if (indices->ndim + 1 > OAR_MAX_DIMS)
        return oari_error(OAR_ERR_INVALID, "embedding: indices have too many dims"), NULL;
    oar_pool *pool = oar_pool_push();
    int64_t flat = -1, shape[OAR_MAX_DIMS];
    memcpy(shape, indices->shape, (size_t)indices->ndim * sizeof *shape);
    shape[indices->ndim] = weight->shape[1];
    oar_tensor *rows = oar_index_select(weight, 0, oar_reshape(indices, 1, &flat));
    return oari_pool_return(pool, oar_reshape(rows, indices->ndim + 1, shape));
}

oar_tensor *oar_scaled_dot_product_attention(oar_tensor *q, oar_tensor *k, oar_tensor *v,
                                             oar_tensor *mask, double dropout_p, bool is_causal,
                                             double scale) {
    const char *op = "scaled_dot_product_attention";
    if (is_null(op, "q", q) || is_null(op, "k", k) || is_null(op, "v", v)) return NULL;
    char sq[200], sk[200], sv[200];
    if (q->ndim < 2 || k->ndim < 2 || v->ndim < 2 ||
        q->shape[q->ndim - 1] != k->shape[k->ndim - 1] ||
        k->shape[k->ndim - 2] != v->shape[v->ndim - 2])
        return oari_error(OAR_ERR_INVALID,
                          "%s: expected q [..., L, E], k [..., S, E], v [..., S, Ev], "
                          "got %s, %s, %s",
                          op, oari_shape_str(sq, q->ndim, q->shape),
                          oari_shape_str(sk, k->ndim, k->shape),
                          oari_shape_str(sv, v->ndim, v->shape)),
               NULL;
    if (!(dropout_p >= 0 && dropout_p <= 1))
        return oari_error(OAR_ERR_INVALID, "%s: dropout_p must be in [0, 1], got %g", op,
                          dropout_p), NULL;
    if (mask && is_causal)
        return oari_error(OAR_ERR_INVALID, "%s: pass either a mask or is_causal, not both", op),
               NULL;
    if (mask && mask->dtype != OAR_BOOL && !is_real_float(mask->dtype))
        return oari_error(OAR_ERR_INVALID, "%s: mask must be bool (true keeps) or floating "
                          "(additive), got %s", op, oar_dtype_name(mask->dtype)), NULL;
    int64_t L = q->shape[q->ndim - 2], S = k->shape[k->ndim - 2], E = q->shape[q->ndim - 1];
    if (scale == 0) scale = 1 / sqrt((double)(E ? E : 1));
    oar_pool *pool = oar_pool_push();
    oar_tensor *attn = oar_mul_scalar(oar_matmul(q, oar_transpose(k, -2, -1)), scale);
    oar_tensor *keep = mask && mask->dtype == OAR_BOOL ? mask : NULL;
    if (is_causal) { /* the mask on q's device (a traced q has none: the CPU's) */
        int64_t ls[2] = {L, S};
        keep = oar_tril(oar_full_on(OAR_BOOL, 2, ls, 1, oar_tensor_device(q)), 0);
    }
    if (keep) attn = oar_where(keep, attn, oar_scalar(-INFINITY));
    else if (mask) attn = oar_add(attn, mask);
    attn = oar_softmax(attn, -1);
    if (dropout_p > 0) attn = oar_dropout(attn, dropout_p, true);
    return oari_pool_return(pool, oar_matmul(attn, v));
}

/* Multi-head attention and the Transformer encoder layer (batch first),
 * written with public ops: linear projections by matmul, attention by
 * oar_scaled_dot_product_attention, layer_norm, gelu/relu, dropout. Names
 * and initialisation follow torch.nn.MultiheadAttention and
 * torch.nn.TransformerEncoderLayer. */
#include "module.h"

#include <math.h>
#include <oar/autograd.h>
#include <oar/ops.h>

#define MHA "multi_head_attention"

static bool null_arg(const char *op, const char *what, const oar_tensor *t) {
    if (t) return false;
    if (!oari_error_pending()) oari_error(OAR_ERR_INVALID, "%s: %s is NULL", op, what);
    return true;
}

/* x W^T + b (b may be NULL). */
static oar_tensor *linear(oar_tensor *x, oar_tensor *w, oar_tensor *b) {
    oar_tensor *y = oar_matmul(x, oar_transpose(w, 0, 1));
    return b ? oar_add(y, b) : y;
}

static bool has_shape(const oar_tensor *t, int ndim, const int64_t *shape) {
    if (t->ndim != ndim) return false;
    for (int i = 0; i < ndim; i++)
        if (t->shape[i] != shape[i]) return false;
    return true;
}

/* Checks the arguments of oar_multi_head_attention for batched ([N, L, E])
 * inputs. 0 or an error status. */
static int check_mha(oar_tensor *q, oar_tensor *k, oar_tensor *v, int64_t H, oar_tensor *in_w,
                     oar_tensor *in_b, oar_tensor *out_w, oar_tensor *out_b, oar_tensor *kpm,
                     oar_tensor *attn_mask, double dropout_p) {
    char s1[200], s2[200], s3[200];
    if (q->ndim != 3 || k->ndim != 3 || v->ndim != 3 || k->shape[0] != q->shape[0] ||
        v->shape[0] != q->shape[0] || k->shape[1] != v->shape[1] || k->shape[2] != q->shape[2] ||
        v->shape[2] != q->shape[2])
        return oari_error(OAR_ERR_INVALID,
                          "%s: expected query [N, L, E], key and value [N, S, E] (or all "
                          "unbatched), got %s, %s, %s",
                          MHA, oari_shape_str(s1, q->ndim, q->shape),
                          oari_shape_str(s2, k->ndim, k->shape),
                          oari_shape_str(s3, v->ndim, v->shape));
    int64_t N = q->shape[0], L = q->shape[1], S = k->shape[1], E = q->shape[2];
    if (H <= 0 || E % H)
        return oari_error(OAR_ERR_INVALID,
                          "%s: embed dim %lld must divide by num_heads %lld (num_heads > 0)", MHA,
                          (long long)E, (long long)H);
    if (!oar_dtype_is_float(q->dtype))
        return oari_error(OAR_ERR_INVALID, "%s: expected a floating query, got %s", MHA,
                          oar_dtype_name(q->dtype));
    int64_t iw[2] = {3 * E, E}, ib = 3 * E, ow[2] = {E, E};
    if (!has_shape(in_w, 2, iw) || (in_b && !has_shape(in_b, 1, &ib)) || !has_shape(out_w, 2, ow) ||
        (out_b && !has_shape(out_b, 1, &E)))
        return oari_error(OAR_ERR_INVALID,
                          "%s: for embed dim %lld expected in_proj_weight [%lld, %lld], "
                          "in_proj_bias [%lld], out_proj_weight [%lld, %lld], out_proj_bias "
                          "[%lld]; got in_proj_weight %s, out_proj_weight %s",
                          MHA, (long long)E, (long long)(3 * E), (long long)E, (long long)(3 * E),
                          (long long)E, (long long)E, (long long)E,
                          oari_shape_str(s1, in_w->ndim, in_w->shape),
                          oari_shape_str(s2, out_w->ndim, out_w->shape));
    int64_t ks[2] = {N, S};
    if (kpm &&
        (!has_shape(kpm, 2, ks) || (kpm->dtype != OAR_BOOL && !oar_dtype_is_float(kpm->dtype))))
        return oari_error(OAR_ERR_INVALID,
                          "%s: key_padding_mask must be bool or floating [N, S] = [%lld, %lld], "
                          "got %s %s",
                          MHA, (long long)N, (long long)S, oar_dtype_name(kpm->dtype),
                          oari_shape_str(s1, kpm->ndim, kpm->shape));
    int64_t m2[2] = {L, S}, m3[3] = {N * H, L, S};
    if (attn_mask && ((!has_shape(attn_mask, 2, m2) && !has_shape(attn_mask, 3, m3)) ||
                      (attn_mask->dtype != OAR_BOOL && !oar_dtype_is_float(attn_mask->dtype))))
        return oari_error(OAR_ERR_INVALID,
                          "%s: attn_mask must be bool or floating [L, S] = [%lld, %lld] or "
                          "[N * num_heads, L, S] = [%lld, %lld, %lld], got %s %s",
                          MHA, (long long)L, (long long)S, (long long)(N * H), (long long)L,
                          (long long)S, oar_dtype_name(attn_mask->dtype),
                          oari_shape_str(s1, attn_mask->ndim, attn_mask->shape));
    if (!(dropout_p >= 0 && dropout_p <= 1))
        return oari_error(OAR_ERR_INVALID, "%s: dropout_p must be in [0, 1], got %g", MHA,
                          dropout_p);
    return 0;
}

/* [N, T, E] -> [N, H, T, E / H] */
static oar_tensor *split_heads(oar_tensor *x, int64_t H) {
    int64_t s[4] = {x ? x->shape[0] : 0, x ? x->shape[1] : 0, H, x ? x->shape[2] / H : 0};
    return oar_transpose(oar_reshape(x, 4, s), 1, 2);
}

/* Combines the masks into one for scaled_dot_product_attention: NULL (none),
 * bool (true keeps) or additive float. Sets *causal_only when the causal
 * mask is the only one (sdpa builds it). */
static oar_tensor *combine_masks(int64_t N, int64_t H, int64_t L, int64_t S, oar_tensor *kpm,
                                 oar_tensor *attn_mask, bool is_causal, bool *causal_only) {
    oar_tensor *keep = NULL, *add = NULL;
    if (attn_mask) {
        oar_tensor *m = attn_mask;
        if (m->ndim == 3) m = oar_reshape(m, 4, (int64_t[]){N, H, L, S});
        if (attn_mask->dtype == OAR_BOOL)
            keep = oar_logical_not(m);
        else
            add = m;
    }
    if (kpm) {
        oar_tensor *m = oar_reshape(kpm, 4, (int64_t[]){N, 1, 1, S});
        if (kpm->dtype == OAR_BOOL) {
            oar_tensor *k = oar_logical_not(m);
            keep = keep ? oar_logical_and(keep, k) : k;
        } else {
            add = add ? oar_add(add, m) : m;
        }
    }
    *causal_only = is_causal && !keep && !add;
    if (is_causal && !*causal_only) {
        oar_tensor *c = oar_tril(oar_ones(OAR_BOOL, 2, (int64_t[]){L, S}), 0);
        keep = keep ? oar_logical_and(keep, c) : c;
    }
    if (add && keep) add = oar_add(add, oar_where(keep, oar_scalar(0), oar_scalar(-INFINITY)));
    return add ? add : keep;
}

oar_tensor *oar_multi_head_attention(oar_tensor *query, oar_tensor *key, oar_tensor *value,
                                     int64_t num_heads, oar_tensor *in_w, oar_tensor *in_b,
                                     oar_tensor *out_w, oar_tensor *out_b, oar_tensor *kpm,
                                     oar_tensor *attn_mask, bool is_causal, double dropout_p) {
    if (null_arg(MHA, "query", query) || null_arg(MHA, "key", key) ||
        null_arg(MHA, "value", value) || null_arg(MHA, "in_proj_weight", in_w) ||
        null_arg(MHA, "out_proj_weight", out_w))
        return NULL;
    oar_pool *pool = oar_pool_push();
    /* unbatched: [L, E] (and kpm [S]) -> a batch of one */
    bool unbatched = query->ndim == 2;
    oar_tensor *q = query, *k = key, *v = value, *pm = kpm;
    if (unbatched) {
        q = oar_unsqueeze(query, 0);
        k = key == query ? q : oar_unsqueeze(key, 0);
        v = value == key ? k : oar_unsqueeze(value, 0);
        if (kpm && kpm->ndim == 1) pm = oar_unsqueeze(kpm, 0);
        if (!q || !k || !v || (kpm && !pm)) return oari_pool_return(pool, NULL);
    }
    if (check_mha(q, k, v, num_heads, in_w, in_b, out_w, out_b, pm, attn_mask, dropout_p))
        return oari_pool_return(pool, NULL);
    int64_t N = q->shape[0], L = q->shape[1], S = k->shape[1], E = q->shape[2];

    oar_tensor *qkv[3], *w[3], *b[3] = {NULL, NULL, NULL};
    if (query == key && key == value) { /* self-attention: one projection */
        if (oar_chunk(linear(q, in_w, in_b), 3, -1, 3, qkv) != 3)
            return oari_pool_return(pool, NULL);
    } else {
        if (oar_chunk(in_w, 3, 0, 3, w) != 3 || (in_b && oar_chunk(in_b, 3, 0, 3, b) != 3))
            return oari_pool_return(pool, NULL);
        qkv[0] = linear(q, w[0], b[0]);
        qkv[1] = linear(k, w[1], b[1]);
        qkv[2] = linear(v, w[2], b[2]);
    }
    bool causal_only = false;
    oar_tensor *mask = combine_masks(N, num_heads, L, S, pm, attn_mask, is_causal, &causal_only);
    oar_tensor *o = oar_scaled_dot_product_attention(
        split_heads(qkv[0], num_heads), split_heads(qkv[1], num_heads),
        split_heads(qkv[2], num_heads), mask, dropout_p, causal_only, 0);
    /* [N, H, L, D] -> [N, L, E] */
    o = oar_reshape(oar_transpose(o, 1, 2), 3, (int64_t[]){N, L, E});
    o = linear(o, out_w, out_b);
    if (unbatched) o = oar_squeeze(o, 0);
    return oari_pool_return(pool, o);
}

/* ---- modules ------------------------------------------------------------ */

int oari_module_to(oar_module *m, oar_dtype dtype) {
    for (int i = 0; i < m->n_tensors; i++) {
        oar_tensor *t = m->tensors[i].t;
        if (t->dtype == dtype || !oar_dtype_is_float(t->dtype)) continue;
        oar_tensor *c = oari_tensor_empty(NULL, dtype, t->ndim, t->shape);
        oar_no_grad_push();
        int st = c ? oar_copy_(c, t) : oari_fail_status();
        oar_no_grad_pop();
        if (!st && m->tensors[i].param) st = oar_tensor_set_requires_grad(c, true);
        if (st) {
            oar_tensor_release(c);
            return st;
        }
        oar_tensor_release(t);
        m->tensors[i].t = c;
    }
    m->state_valid = false;
    for (int i = 0; i < m->n_children; i++) {
        int st = oari_module_to(m->children[i].m, dtype);
        if (st) return st;
    }
    return 0;
}

static oar_module *fail(oar_module *m) {
    oar_module_free(m);
    return NULL;
}

/* Adds an f32 parameter of the given shape; returns it borrowed or NULL. */
static oar_tensor *new_param(oar_module *m, const char *name, int ndim, const int64_t *shape) {
    oar_tensor *t = oari_tensor_empty(NULL, OAR_F32, ndim, shape);
    if (!t) return NULL;
    int st = oar_module_add_parameter(m, name, t);
    oar_tensor_release(t);
    return st ? NULL : t;
}

/* MultiheadAttention: tensors in_proj_weight[, in_proj_bias]; child
 * out_proj; cfg[0] num_heads, cfg[1] has bias, cfg[2] causal; cfgf[0]
 * dropout. */
static oar_tensor *mha_call(oar_module *m, oar_tensor *q, oar_tensor *k, oar_tensor *v,
                            oar_tensor *kpm, oar_tensor *attn_mask, bool is_causal) {
    oar_tensor *in_w = m->tensors[0].t, *in_b = m->cfg[1] ? m->tensors[1].t : NULL;
    oar_module *out = m->children[0].m;
    oar_tensor *out_w = out->tensors[0].t, *out_b = m->cfg[1] ? out->tensors[1].t : NULL;
    return oar_multi_head_attention(q, k, v, m->cfg[0], in_w, in_b, out_w, out_b, kpm, attn_mask,
                                    is_causal, m->training ? m->cfgf[0] : 0.0);
}

static oar_tensor *mha_forward(oar_module *m, oar_tensor *x) {
    return mha_call(m, x, x, x, NULL, NULL, m->cfg[2]);
}

static oar_module *mha_new(const char *what, int64_t E, int64_t H, double dropout, bool bias,
                           bool causal) {
    if (E <= 0 || H <= 0 || E % H || !(dropout >= 0 && dropout <= 1))
        return oari_error(OAR_ERR_INVALID,
                          "%s: embed_dim %lld must be a positive multiple of num_heads %lld, "
                          "dropout %g in [0, 1]",
                          what, (long long)E, (long long)H, dropout),
               NULL;
    oar_module *m = oar_module_new("MultiheadAttention", mha_forward, NULL, NULL);
    if (!m) return NULL;
    m->cfg[0] = H;
    m->cfg[1] = bias;
    m->cfg[2] = causal;
    m->cfgf[0] = dropout;
    oar_tensor *w = new_param(m, "in_proj_weight", 2, (int64_t[]){3 * E, E});
    if (!w || oar_init_xavier_uniform_(w, 1.0)) return fail(m);
    if (bias) {
        oar_tensor *b = new_param(m, "in_proj_bias", 1, (int64_t[]){3 * E});
        if (!b || oar_init_zeros_(b)) return fail(m);
    }
    oar_module *out = oar_linear_new(E, E, bias);
    if (oar_module_add_child(m, "out_proj", out)) return fail(m);
    if (bias && oar_init_zeros_(oar_module_get(out, "bias"))) return fail(m);
    return m;
}

oar_module *oar_multihead_attention_new(int64_t embed_dim, int64_t num_heads, double dropout,
                                        bool bias, bool causal) {
    return mha_new("multihead_attention_new", embed_dim, num_heads, dropout, bias, causal);
}

static bool is_type(const char *op, oar_module *m, oar_module_forward_fn fwd, const char *type) {
    if (m && m->forward == fwd) return true;
    oari_error(OAR_ERR_INVALID, "%s: expected a %s module, got %s", op, type, m ? m->type : "NULL");
    return false;
}

oar_tensor *oar_multihead_attention_forward(oar_module *m, oar_tensor *query, oar_tensor *key,
                                            oar_tensor *value, oar_tensor *key_padding_mask,
                                            oar_tensor *attn_mask, bool is_causal) {
    if (!is_type("multihead_attention_forward", m, mha_forward, "MultiheadAttention")) return NULL;
    return mha_call(m, query, key, value, key_padding_mask, attn_mask, is_causal);
}

/* TransformerEncoderLayer: children in PyTorch's order; cfg[0] d_model,
 * cfg[1] activation, cfg[2] norm_first, cfg[3] causal; cfgf[0] dropout. */
enum { SELF_ATTN, LINEAR1, DROPOUT, LINEAR2, NORM1, NORM2, DROPOUT1, DROPOUT2, N_CHILDREN };
static const char *const layer_children[N_CHILDREN] = {
    "self_attn", "linear1", "dropout", "linear2", "norm1", "norm2", "dropout1", "dropout2"};

static oar_tensor *layer_call(oar_module *m, oar_tensor *x, oar_tensor *src_mask, oar_tensor *kpm,
                              bool is_causal) {
    oar_module **c = (oar_module *[N_CHILDREN]){NULL};
    for (int i = 0; i < N_CHILDREN; i++)
        c[i] = m->children[i].m;
    if (x->ndim < 2 || x->shape[x->ndim - 1] != m->cfg[0]) {
        char s[200];
        return oari_error(OAR_ERR_INVALID,
                          "TransformerEncoderLayer: expected src [N, L, %lld] (or [L, %lld]), "
                          "got %s",
                          (long long)m->cfg[0], (long long)m->cfg[0],
                          oari_shape_str(s, x->ndim, x->shape)),
               NULL;
    }
    oar_pool *pool = oar_pool_push();
    bool norm_first = m->cfg[2];
    /* self-attention block: dropout1(self_attn(h, h, h)) */
    oar_tensor *h = norm_first ? oar_module_forward(c[NORM1], x) : x;
    oar_tensor *sa =
        oar_module_forward(c[DROPOUT1], mha_call(c[SELF_ATTN], h, h, h, kpm, src_mask, is_causal));
    x = norm_first ? oar_add(x, sa) : oar_module_forward(c[NORM1], oar_add(x, sa));
    /* feed-forward block: dropout2(linear2(dropout(act(linear1(h))))) */
    h = norm_first ? oar_module_forward(c[NORM2], x) : x;
    h = oar_module_forward(c[LINEAR1], h);
    h = m->cfg[1] == OAR_ACTIVATION_GELU ? oar_gelu(h, false) : oar_relu(h);
    h = oar_module_forward(c[DROPOUT2],
                           oar_module_forward(c[LINEAR2], oar_module_forward(c[DROPOUT], h)));
    x = norm_first ? oar_add(x, h) : oar_module_forward(c[NORM2], oar_add(x, h));
    return oari_pool_return(pool, x);
}

static oar_tensor *layer_forward(oar_module *m, oar_tensor *x) {
    return layer_call(m, x, NULL, NULL, m->cfg[3]);
}

oar_tensor *oar_transformer_encoder_layer_forward(oar_module *m, oar_tensor *src,
                                                  oar_tensor *src_mask,
                                                  oar_tensor *src_key_padding_mask,
                                                  bool is_causal) {
    const char *op = "transformer_encoder_layer_forward";
    if (!is_type(op, m, layer_forward, "TransformerEncoderLayer") || null_arg(op, "src", src))
        return NULL;
    return layer_call(m, src, src_mask, src_key_padding_mask, is_causal);
}

oar_module *oar_transformer_encoder_layer_new(int64_t d_model, int64_t nhead,
                                              const oar_transformer_options *opts) {
    const char *op = "transformer_encoder_layer_new";
    oar_transformer_options o = opts ? *opts : (oar_transformer_options){0};
    if (!o.dim_feedforward) o.dim_feedforward = 2048;
    if (o.layer_norm_eps == 0) o.layer_norm_eps = 1e-5;
    if (o.dtype == 0) o.dtype = OAR_F32;
    if (o.dim_feedforward < 0 || !(o.layer_norm_eps > 0) ||
        (o.activation != OAR_ACTIVATION_RELU && o.activation != OAR_ACTIVATION_GELU) ||
        (o.dtype != OAR_F32 && o.dtype != OAR_F64))
        return oari_error(OAR_ERR_INVALID,
                          "%s: invalid options (dim_feedforward %lld, layer_norm_eps %g, "
                          "activation %d, dtype %s)",
                          op, (long long)o.dim_feedforward, o.layer_norm_eps, (int)o.activation,
                          oar_dtype_name(o.dtype)),
               NULL;
    oar_module *sa = mha_new(op, d_model, nhead, o.dropout, !o.no_bias, false);
    if (!sa) return NULL;
    oar_module *m = oar_module_new("TransformerEncoderLayer", layer_forward, NULL, NULL);
    if (!m) return fail(sa);
    m->cfg[0] = d_model;
    m->cfg[1] = o.activation;
    m->cfg[2] = o.norm_first;
    m->cfg[3] = o.causal;
    m->cfgf[0] = o.dropout;
    oar_module *kids[N_CHILDREN] = {
        sa,
        oar_linear_new(d_model, o.dim_feedforward, !o.no_bias),
        oar_dropout_new(o.dropout),
        oar_linear_new(o.dim_feedforward, d_model, !o.no_bias),
        oar_layer_norm_new(1, &d_model, o.layer_norm_eps, true),
        oar_layer_norm_new(1, &d_model, o.layer_norm_eps, true),
        oar_dropout_new(o.dropout),
        oar_dropout_new(o.dropout),
    };
    int st = 0;
    for (int i = 0; i < N_CHILDREN; i++) {
        if (st)
            oar_module_free(kids[i]);
        else
            st = oar_module_add_child(m, layer_children[i], kids[i]);
    }
    if (!st && o.dtype != OAR_F32) st = oari_module_to(m, o.dtype);
    return st ? fail(m) : m;
}

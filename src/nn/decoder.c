/* The GPT block (a pre-norm, causal TransformerEncoderLayer) and the
 * incremental forward of a TransformerEncoderLayer over a KV cache: the
 * new positions' keys and values go to the cache, and their queries attend
 * to every cached slot, so a prompt can be fed whole and then one token a
 * step. Reads the layer's children as transformer.c builds them. */
#include "module.h"

#include <oar/autograd.h>
#include <oar/generate.h>
#include <oar/ops.h>
#include <string.h>

#define CACHED "transformer_layer_forward_cached"

oar_module *oar_transformer_decoder_layer_new(int64_t d_model, int64_t nhead,
                                              const oar_transformer_options *o) {
    oar_transformer_options opts = o ? *o : (oar_transformer_options){0};
    opts.norm_first = true;
    opts.causal = true;
    return oar_transformer_encoder_layer_new(d_model, nhead, &opts);
}

/* x W^T + b (b may be NULL). */
static oar_tensor *linear(oar_tensor *x, oar_tensor *w, oar_tensor *b) {
    oar_tensor *y = oar_matmul(x, oar_transpose(w, 0, 1));
    return b ? oar_add(y, b) : y;
}

/* [N, T, E] -> [N, H, T, E / H] */
static oar_tensor *split_heads(oar_tensor *x, int64_t N, int64_t T, int64_t H, int64_t D) {
    return oar_transpose(oar_reshape(x, 4, (int64_t[]){N, T, H, D}), 1, 2);
}

/* Self-attention of h [N, T, E] at slots [pos, pos + T) through the cache. */
static oar_tensor *cached_attention(oar_module *sa, oar_tensor *h, oar_kv_cache *cache, int layer,
                                    int64_t pos) {
    int64_t N = h->shape[0], T = h->shape[1], E = h->shape[2], H = sa->cfg[0], D = E / H;
    bool bias = sa->cfg[1];
    oar_module *out = sa->children[0].m;
    oar_tensor *qkv[3];
    if (oar_chunk(linear(h, sa->tensors[0].t, bias ? sa->tensors[1].t : NULL), 3, -1, 3, qkv) != 3)
        return NULL;
    oar_tensor *k_all, *v_all, *mask;
    bool causal;
    if (oar_kv_cache_append(cache, layer, pos, split_heads(qkv[1], N, T, H, D),
                            split_heads(qkv[2], N, T, H, D), &k_all, &v_all) ||
        oar_kv_cache_mask(cache, pos, T, &mask, &causal))
        return NULL;
    oar_tensor *o = oar_scaled_dot_product_attention(split_heads(qkv[0], N, T, H, D), k_all, v_all,
                                                     mask, 0.0, causal, 0);
    o = oar_reshape(oar_transpose(o, 1, 2), 3, (int64_t[]){N, T, E});
    return linear(o, out->tensors[0].t, bias ? out->tensors[1].t : NULL);
}

oar_tensor *oar_transformer_layer_forward_cached(oar_module *m, oar_tensor *x, oar_kv_cache *cache,
                                                 int layer, int64_t pos) {
    if (!m || strcmp(m->type, "TransformerEncoderLayer") != 0 || m->n_children < 6)
        return oari_error(OAR_ERR_INVALID, "%s: expected a TransformerEncoderLayer, got %s", CACHED,
                          m ? m->type : "NULL"),
               NULL;
    if (!x) return oari_null_arg(CACHED, "x"), NULL;
    if (!cache) return oari_null_arg(CACHED, "cache"), NULL;
    oar_module *sa = m->children[0].m;
    int64_t E = m->cfg[0];
    if (x->ndim != 3 || x->shape[2] != E || x->shape[1] < 1 ||
        x->shape[0] != oar_kv_cache_batch(cache)) {
        char s[200];
        return oari_error(OAR_ERR_INVALID,
                          "%s: expected x [batch %lld, T >= 1, d_model %lld], got %s", CACHED,
                          (long long)oar_kv_cache_batch(cache), (long long)E,
                          oari_shape_str(s, x->ndim, x->shape)),
               NULL;
    }
    oar_pool *pool = oar_pool_push();
    if (!pool) return NULL;
    oar_no_grad_push();
    oar_module *norm1 = m->children[4].m, *norm2 = m->children[5].m;
    bool norm_first = m->cfg[2];
    /* the layer's forward (transformer.c, layer_call) without dropout */
    oar_tensor *h = norm_first ? oar_module_forward(norm1, x) : x;
    oar_tensor *sa_out = h ? cached_attention(sa, h, cache, layer, pos) : NULL;
    x = norm_first ? oar_add(x, sa_out) : oar_module_forward(norm1, oar_add(x, sa_out));
    h = norm_first ? oar_module_forward(norm2, x) : x;
    h = oar_module_forward(m->children[1].m, h);
    h = m->cfg[1] == OAR_ACTIVATION_GELU ? oar_gelu(h, false) : oar_relu(h);
    h = oar_module_forward(m->children[3].m, h);
    x = norm_first ? oar_add(x, h) : oar_module_forward(norm2, oar_add(x, h));
    oar_no_grad_pop();
    return oari_pool_return(pool, x);
}

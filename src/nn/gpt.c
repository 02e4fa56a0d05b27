/* A GPT-style language model as a module: embeddings, decoder layers
 * (decoder.c), final norm and head; its full causal forward for training
 * and its cached forward for decoding. */
#include "module.h"

#include <oar/autograd.h>
#include <oar/generate.h>
#include <oar/ops.h>

#define GPT "gpt"

/* cfg: [0] vocab, [1] context, [2] d_model, [3] heads, [4] layers; children
 * in the order of enum below. */
enum { TOK, POS, LAYERS, NORM, HEAD };

/* Checks token ids [N, L] (i64) against the model; 0 or an error status. */
static int check_ids(const char *op, oar_tensor *ids, const char *what) {
    if (!ids) return oari_null_arg(op, what);
    char s[200];
    if (ids->ndim != 2 || ids->dtype != OAR_I64 || ids->shape[1] < 1)
        return oari_error(OAR_ERR_INVALID, "%s: expected %s [N, L >= 1] i64, got %s %s", op, what,
                          oar_dtype_name(ids->dtype), oari_shape_str(s, ids->ndim, ids->shape));
    return 0;
}

/* embeddings -> layers (full or cached) -> norm -> head */
static oar_tensor *gpt_forward(oar_module *m, oar_tensor *idx) {
    if (check_ids(GPT, idx, "idx")) return NULL;
    int64_t L = idx->shape[1];
    if (L > m->cfg[1])
        return oari_error(OAR_ERR_INVALID, "%s: %lld tokens exceed the context length %lld", GPT,
                          (long long)L, (long long)m->cfg[1]),
               NULL;
    oar_pool *pool = oar_pool_push();
    oar_tensor *x =
        oar_add(oar_module_forward(m->children[TOK].m, idx),
                oar_module_forward(m->children[POS].m, oar_arange(0, (double)L, 1, OAR_I64)));
    x = oar_module_forward(m->children[LAYERS].m, x);
    x = oar_module_forward(m->children[NORM].m, x);
    return oari_pool_return(pool, oar_module_forward(m->children[HEAD].m, x));
}

static bool is_gpt(const char *op, oar_module *m) {
    if (m && m->forward == gpt_forward) return true;
    oari_error(OAR_ERR_INVALID, "%s: expected a GPT module, got %s", op, m ? m->type : "NULL");
    return false;
}

oar_module *oar_gpt_new(const oar_gpt_config *cfg) {
    const char *op = GPT "_new";
    if (!cfg) return oari_null_arg(op, "cfg"), NULL;
    oar_gpt_config c = *cfg;
    if (!c.dim_feedforward) c.dim_feedforward = 4 * c.d_model;
    if (c.dtype == 0) c.dtype = OAR_F32;
    if (c.vocab_size < 1 || c.context_length < 1 || c.d_model < 1 || c.num_heads < 1 ||
        c.d_model % c.num_heads || c.num_layers < 1 || c.dim_feedforward < 1 ||
        (c.dtype != OAR_F32 && c.dtype != OAR_F64))
        return oari_error(OAR_ERR_INVALID,
                          "%s: expected positive vocab_size %lld, context_length %lld, "
                          "num_layers %lld, dim_feedforward %lld, d_model %lld a multiple of "
                          "num_heads %lld, dtype f32 or f64 (got %s)",
                          op, (long long)c.vocab_size, (long long)c.context_length,
                          (long long)c.num_layers, (long long)c.dim_feedforward,
                          (long long)c.d_model, (long long)c.num_heads, oar_dtype_name(c.dtype)),
               NULL;
    oar_module *m = oar_module_new("GPT", gpt_forward, NULL, NULL);
    if (!m) return NULL;
    m->cfg[0] = c.vocab_size;
    m->cfg[1] = c.context_length;
    m->cfg[2] = c.d_model;
    m->cfg[3] = c.num_heads;
    m->cfg[4] = c.num_layers;
    oar_module *layers = oar_sequential_new(0, NULL);
    int st = layers ? 0 : oari_fail_status();
    oar_transformer_options lo = {.dim_feedforward = c.dim_feedforward,
                                  .dropout = c.dropout,
                                  .activation = OAR_ACTIVATION_GELU};
    for (int64_t i = 0; i < c.num_layers && !st; i++)
        st = oar_sequential_append(layers,
                                   oar_transformer_decoder_layer_new(c.d_model, c.num_heads, &lo));
    if (st) {
        oar_module_free(layers);
        oar_module_free(m);
        return NULL;
    }
    int64_t d = c.d_model;
    /* the parent takes each child, freeing it if adding fails */
    if (oar_module_add_child(m, "tok", oar_embedding_new(c.vocab_size, d)) ||
        oar_module_add_child(m, "pos", oar_embedding_new(c.context_length, d)) ||
        oar_module_add_child(m, "layers", layers) ||
        oar_module_add_child(m, "norm", oar_layer_norm_new(1, &d, 1e-5, true)) ||
        oar_module_add_child(m, "head", oar_linear_new(d, c.vocab_size, true)) ||
        (c.dtype != OAR_F32 && oari_module_to(m, c.dtype))) {
        oar_module_free(m);
        return NULL;
    }
    return m;
}

oar_kv_cache *oar_gpt_kv_cache_new(oar_module *m, int64_t batch, int64_t capacity) {
    if (!is_gpt(GPT "_kv_cache_new", m)) return NULL;
    oar_dtype dt = oar_tensor_dtype(m->children[HEAD].m->tensors[0].t);
    return oar_kv_cache_new((int)m->cfg[4], batch, m->cfg[3], m->cfg[2] / m->cfg[3], capacity, dt);
}

oar_tensor *oar_gpt_forward_cached(oar_module *m, oar_tensor *tokens, oar_tensor *positions,
                                   oar_kv_cache *cache, int64_t pos) {
    const char *op = GPT "_forward_cached";
    if (!is_gpt(op, m) || check_ids(op, tokens, "tokens")) return NULL;
    if (!cache) return oari_null_arg(op, "cache"), NULL;
    int64_t N = tokens->shape[0], T = tokens->shape[1];
    char s1[200], s2[200];
    if (positions && (positions->ndim != 2 || positions->dtype != OAR_I64 ||
                      positions->shape[0] != N || positions->shape[1] != T))
        return oari_error(OAR_ERR_INVALID,
                          "%s: expected positions [%lld, %lld] i64 like tokens, got %s %s", op,
                          (long long)N, (long long)T, oar_dtype_name(positions->dtype),
                          oari_shape_str(s1, positions->ndim, positions->shape)),
               NULL;
    if (oar_kv_cache_num_layers(cache) != m->cfg[4] || oar_kv_cache_batch(cache) != N)
        return oari_error(OAR_ERR_INVALID,
                          "%s: the cache has %d layers and batch %lld; the model %lld layers, "
                          "tokens %s",
                          op, oar_kv_cache_num_layers(cache), (long long)oar_kv_cache_batch(cache),
                          (long long)m->cfg[4], oari_shape_str(s2, tokens->ndim, tokens->shape)),
               NULL;
    oar_pool *pool = oar_pool_push();
    if (!pool) return NULL;
    oar_no_grad_push();
    oar_tensor *p = positions ? positions : oar_arange((double)pos, (double)(pos + T), 1, OAR_I64);
    /* position ids outside the table are an embedding error naming them */
    oar_tensor *x = oar_add(oar_module_forward(m->children[TOK].m, tokens),
                            oar_module_forward(m->children[POS].m, p));
    oar_module *layers = m->children[LAYERS].m;
    for (int i = 0; i < layers->n_children && x; i++)
        x = oar_transformer_layer_forward_cached(layers->children[i].m, x, cache, i, pos);
    x = oar_module_forward(m->children[NORM].m, x);
    x = oar_module_forward(m->children[HEAD].m, x);
    oar_no_grad_pop();
    return oari_pool_return(pool, x);
}

oar_tensor *oar_gpt_next_logits(void *gpt, oar_tensor *tokens, oar_tensor *positions,
                                oar_kv_cache *cache, int64_t pos) {
    return oar_gpt_forward_cached(gpt, tokens, positions, cache, pos);
}

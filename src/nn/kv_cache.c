/* The KV cache of incremental decoding: per layer, keys and values
 * [batch, heads, capacity, head_dim] written a slice at a time with
 * copy_, read back as views of the filled slots; and the attention mask of
 * a step (causal, minus each row's left padding). */
#include "../core/core.h"

#include <oar/autograd.h>
#include <oar/generate.h>
#include <oar/ops.h>

struct oar_kv_cache {
    int n_layers;
    int64_t batch, heads, head_dim, capacity;
    oar_dtype dtype;
    oar_tensor **k, **v; /* [n_layers], retained, [batch, heads, capacity, head_dim] */
    int64_t *length;     /* [n_layers] */
    int64_t *pad;        /* [batch] */
    bool padded;         /* some pad[i] > 0 */
};

#define CACHE "kv_cache"

void oar_kv_cache_free(oar_kv_cache *c) {
    if (!c) return;
    for (int i = 0; i < c->n_layers; i++) {
        if (c->k) oar_tensor_release(c->k[i]);
        if (c->v) oar_tensor_release(c->v[i]);
    }
    oari_free(c->k, (size_t)c->n_layers * sizeof *c->k);
    oari_free(c->v, (size_t)c->n_layers * sizeof *c->v);
    oari_free(c->length, (size_t)c->n_layers * sizeof *c->length);
    oari_free(c->pad, (size_t)c->batch * sizeof *c->pad);
    oari_free(c, sizeof *c);
}

oar_kv_cache *oar_kv_cache_new(int n_layers, int64_t batch, int64_t num_heads, int64_t head_dim,
                               int64_t capacity, oar_dtype dtype) {
    if (n_layers < 1 || batch < 1 || num_heads < 1 || head_dim < 1 || capacity < 1 ||
        (dtype != OAR_F32 && dtype != OAR_F64))
        return oari_error(OAR_ERR_INVALID,
                          "%s_new: expected positive n_layers %d, batch %lld, num_heads %lld, "
                          "head_dim %lld, capacity %lld and dtype f32 or f64, got %s",
                          CACHE, n_layers, (long long)batch, (long long)num_heads,
                          (long long)head_dim, (long long)capacity, oar_dtype_name(dtype)),
               NULL;
    oar_kv_cache *c = oari_calloc(1, sizeof *c);
    if (!c) return NULL;
    *c = (oar_kv_cache){.n_layers = n_layers,
                        .batch = batch,
                        .heads = num_heads,
                        .head_dim = head_dim,
                        .capacity = capacity,
                        .dtype = dtype};
    c->k = oari_calloc((size_t)n_layers, sizeof *c->k);
    c->v = oari_calloc((size_t)n_layers, sizeof *c->v);
    c->length = oari_calloc((size_t)n_layers, sizeof *c->length);
    c->pad = oari_calloc((size_t)batch, sizeof *c->pad);
    if (!c->k || !c->v || !c->length || !c->pad) {
        oar_kv_cache_free(c);
        return NULL;
    }
    int64_t shape[4] = {batch, num_heads, capacity, head_dim};
    for (int i = 0; i < n_layers; i++) {
        /* zeroed, so a slot read before it is written is finite */
        c->k[i] = oari_tensor_empty(NULL, dtype, 4, shape);
        c->v[i] = oari_tensor_empty(NULL, dtype, 4, shape);
        if (!c->k[i] || !c->v[i] || oar_fill_(c->k[i], 0) || oar_fill_(c->v[i], 0)) {
            oar_kv_cache_free(c);
            return NULL;
        }
    }
    return c;
}

void oar_kv_cache_reset(oar_kv_cache *c) {
    if (!c) return;
    for (int i = 0; i < c->n_layers; i++)
        c->length[i] = 0;
    for (int64_t i = 0; i < c->batch; i++)
        c->pad[i] = 0;
    c->padded = false;
}

int64_t oar_kv_cache_length(const oar_kv_cache *c) {
    if (!c) return oari_null_arg(CACHE "_length", "cache"), -1;
    return c->length[c->n_layers - 1];
}

int64_t oar_kv_cache_capacity(const oar_kv_cache *c) {
    if (!c) return oari_null_arg(CACHE "_capacity", "cache"), -1;
    return c->capacity;
}

int64_t oar_kv_cache_batch(const oar_kv_cache *c) {
    if (!c) return oari_null_arg(CACHE "_batch", "cache"), -1;
    return c->batch;
}

int oar_kv_cache_num_layers(const oar_kv_cache *c) {
    if (!c) return oari_null_arg(CACHE "_num_layers", "cache"), -1;
    return c->n_layers;
}

int oar_kv_cache_set_padding(oar_kv_cache *c, const int64_t *left_pad) {
    if (!c) return oari_null_arg(CACHE "_set_padding", "cache");
    for (int64_t i = 0; left_pad && i < c->batch; i++)
        if (left_pad[i] < 0 || left_pad[i] > c->capacity)
            return oari_error(OAR_ERR_INVALID,
                              "%s_set_padding: row %lld's padding %lld is outside [0, capacity "
                              "%lld]",
                              CACHE, (long long)i, (long long)left_pad[i], (long long)c->capacity);
    c->padded = false;
    for (int64_t i = 0; i < c->batch; i++) {
        c->pad[i] = left_pad ? left_pad[i] : 0;
        c->padded |= c->pad[i] > 0;
    }
    return 0;
}

int oar_kv_cache_append(oar_kv_cache *c, int layer, int64_t pos, oar_tensor *k, oar_tensor *v,
                        oar_tensor **k_all, oar_tensor **v_all) {
    const char *op = CACHE "_append";
    if (k_all) *k_all = NULL;
    if (v_all) *v_all = NULL;
    if (!c) return oari_null_arg(op, "cache");
    if (!k) return oari_null_arg(op, "k");
    if (!v) return oari_null_arg(op, "v");
    if (layer < 0 || layer >= c->n_layers)
        return oari_error(OAR_ERR_INVALID, "%s: layer %d is outside [0, %d)", op, layer,
                          c->n_layers);
    char s1[200], s2[200];
    int64_t T = k->ndim == 4 ? k->shape[2] : -1;
    if (k->ndim != 4 || v->ndim != 4 || k->shape[0] != c->batch || k->shape[1] != c->heads ||
        k->shape[3] != c->head_dim || T < 1 || v->shape[0] != c->batch || v->shape[1] != c->heads ||
        v->shape[2] != T || v->shape[3] != c->head_dim)
        return oari_error(OAR_ERR_INVALID,
                          "%s: expected k and v [batch %lld, heads %lld, T >= 1, head_dim %lld], "
                          "got %s and %s",
                          op, (long long)c->batch, (long long)c->heads, (long long)c->head_dim,
                          oari_shape_str(s1, k->ndim, k->shape),
                          oari_shape_str(s2, v->ndim, v->shape));
    if (pos < 0 || pos > c->length[layer])
        return oari_error(OAR_ERR_INVALID,
                          "%s: position %lld is outside [0, length %lld] of layer %d", op,
                          (long long)pos, (long long)c->length[layer], layer);
    if (pos + T > c->capacity)
        return oari_error(OAR_ERR_INVALID,
                          "%s: %lld positions at %lld overflow the capacity %lld (make the "
                          "cache larger)",
                          op, (long long)T, (long long)pos, (long long)c->capacity);
    oar_pool *pool = oar_pool_push();
    if (!pool) return oari_fail_status();
    oar_no_grad_push();
    int st = oar_copy_(oar_slice(c->k[layer], 2, pos, pos + T, 1), k);
    if (!st) st = oar_copy_(oar_slice(c->v[layer], 2, pos, pos + T, 1), v);
    oar_no_grad_pop();
    oar_pool_pop(pool);
    if (st) return st;
    c->length[layer] = pos + T;
    /* the views go to the caller's pool */
    oar_tensor *ka = k_all ? oar_slice(c->k[layer], 2, 0, pos + T, 1) : NULL;
    oar_tensor *va = v_all ? oar_slice(c->v[layer], 2, 0, pos + T, 1) : NULL;
    if ((k_all && !ka) || (v_all && !va)) return oari_fail_status();
    if (k_all) *k_all = ka;
    if (v_all) *v_all = va;
    return 0;
}

int oar_kv_cache_mask(oar_kv_cache *c, int64_t pos, int64_t T, oar_tensor **mask, bool *causal) {
    const char *op = CACHE "_mask";
    if (!mask || !causal) return oari_null_arg(op, mask ? "causal" : "mask");
    *mask = NULL;
    *causal = false;
    if (!c) return oari_null_arg(op, "cache");
    if (pos < 0 || T < 1 || pos + T > c->capacity)
        return oari_error(OAR_ERR_INVALID, "%s: %lld queries at %lld do not fit the capacity %lld",
                          op, (long long)T, (long long)pos, (long long)c->capacity);
    if (!c->padded && (T == 1 || pos == 0)) {
        *causal = T > 1;
        return 0;
    }
    int64_t S = pos + T, n = c->batch * T * S;
    bool *keep = oari_malloc((size_t)n * sizeof *keep);
    if (!keep) return oari_fail_status();
    for (int64_t b = 0; b < c->batch; b++)
        for (int64_t i = 0; i < T; i++)
            for (int64_t j = 0; j < S; j++)
                /* causal, real keys only; a padding query sees itself, so stays finite */
                keep[(b * T + i) * S + j] = j <= pos + i && (j >= c->pad[b] || j == pos + i);
    *mask = oar_tensor_from_data(keep, OAR_BOOL, 4, (int64_t[]){c->batch, 1, T, S});
    oari_free(keep, (size_t)n * sizeof *keep);
    return *mask ? 0 : oari_fail_status();
}

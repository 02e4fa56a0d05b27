/* oar/generate.h -- decoding: a KV cache, the cached forward of a decoder
 * layer, a GPT-style model, sampling and generation.
 *
 *     oar_module *gpt = oar_gpt_new(&(oar_gpt_config){.vocab_size = 80,
 *         .context_length = 256, .d_model = 128, .num_heads = 4, .num_layers = 4});
 *     oar_kv_cache *cache = oar_gpt_kv_cache_new(gpt, 2, 256);   // 2 prompts
 *     oar_generate_options o = oar_generate_options_default();
 *     o.max_new_tokens = 100, o.temperature = 0.8, o.top_k = 20, o.seed = 7;
 *     int64_t out[2 * 100], n_out[2];
 *     oar_generate(oar_gpt_next_logits, gpt, cache, 2, prompts, prompt_lens, &o, out, n_out);
 *
 * Batched prompts of different lengths are left-padded: every row of a
 * batch is written at the same cache slots, the first pad[i] = P - len[i]
 * slots of row i (P the longest prompt) are padding that no real position
 * attends to, and row i's position ids start at 0 at its first real token.
 * So row i's logits are those of the prompt alone, up to rounding.
 *
 * All of it is inference: the cached forwards record no gradients and run
 * as in eval mode (no dropout). Functions fail cleanly: NULL or a non-zero
 * status with oar_last_error() naming the function and the sizes. */
#ifndef OAR_GENERATE_H
#define OAR_GENERATE_H

#include <oar/nn.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ==== KV cache (src/nn/kv_cache.c) ========================================
 * The keys and values of every layer for a batch: per layer two tensors
 * [batch, num_heads, capacity, head_dim], filled one step (or a whole
 * prompt) at a time, plus each row's left padding (see above). */
typedef struct oar_kv_cache oar_kv_cache;

/* A cache for n_layers layers of a batch of `batch` rows, holding up to
 * `capacity` positions of num_heads heads of head_dim each, in dtype
 * (OAR_F32 or OAR_F64). Empty (length 0), no padding. NULL with an error on
 * a non-positive size or another dtype. */
OAR_API oar_kv_cache *oar_kv_cache_new(int n_layers, int64_t batch, int64_t num_heads,
                                       int64_t head_dim, int64_t capacity, oar_dtype dtype);
/* Frees the cache; NULL is ignored. */
OAR_API void oar_kv_cache_free(oar_kv_cache *c);
/* Empties the cache (every layer's length 0) and clears the padding. NULL is
 * ignored. */
OAR_API void oar_kv_cache_reset(oar_kv_cache *c);
/* The number of positions the last layer holds (after a whole model step,
 * every layer's); -1 for NULL. */
OAR_API int64_t oar_kv_cache_length(const oar_kv_cache *c);
/* The capacity, batch and layer count given at creation; -1 for NULL. */
OAR_API int64_t oar_kv_cache_capacity(const oar_kv_cache *c);
OAR_API int64_t oar_kv_cache_batch(const oar_kv_cache *c);
OAR_API int oar_kv_cache_num_layers(const oar_kv_cache *c);
/* Sets each row's left padding: slots [0, left_pad[i]) of row i are masked
 * out for every query of that row but their own (so padding rows stay
 * finite). left_pad has `batch` entries in [0, capacity]; NULL clears the
 * padding. 0 or an error status. */
OAR_API int oar_kv_cache_set_padding(oar_kv_cache *c, const int64_t *left_pad);

/* Writes k and v ([batch, num_heads, T, head_dim], cast to the cache's
 * dtype) into slots [pos, pos + T) of `layer` and sets its length to pos + T
 * (pos below the length rewinds: later slots are dropped). pos must not
 * exceed the layer's length; pos + T above the capacity is an overflow
 * error naming both. On success *k_all and *v_all (either may be NULL) are
 * views of slots [0, pos + T): [batch, num_heads, pos + T, head_dim] (pool
 * rule), valid until the next append to that layer. 0 or an error status. */
OAR_API int oar_kv_cache_append(oar_kv_cache *c, int layer, int64_t pos, oar_tensor *k,
                                oar_tensor *v, oar_tensor **k_all, oar_tensor **v_all);
/* The attention mask for T queries at slots [pos, pos + T) over keys at
 * slots [0, pos + T): bool [batch, 1, T, pos + T], true where attention is
 * allowed (causal, minus the padding). Sets *mask to NULL (and returns 0)
 * when no mask is needed: T = 1 and no padding, or pos = 0 and no padding
 * (then *causal is set: plain causal attention). 0 or an error status. */
OAR_API int oar_kv_cache_mask(oar_kv_cache *c, int64_t pos, int64_t T, oar_tensor **mask,
                              bool *causal);

/* ==== decoder layer (src/nn/decoder.c) ====================================
 * The GPT block: pre-norm, causal self-attention, then the feed-forward
 * block (x + attn(norm1(x)), then x + ff(norm2(x))); no cross-attention. */

/* A TransformerEncoderLayer (same children, parameter names and PyTorch
 * state dict, torch.nn.TransformerEncoderLayer(norm_first=True)) with
 * norm_first and causal set whatever o says; o may be NULL (defaults of
 * oar_transformer_options). oar_module_forward(m, x [N, L, d_model]) is the
 * full causal forward, for training. NULL with an error on bad sizes. */
OAR_API oar_module *oar_transformer_decoder_layer_new(int64_t d_model, int64_t nhead,
                                                      const oar_transformer_options *o);
/* One incremental step of a TransformerEncoderLayer m (pre- or post-norm)
 * for x [batch, T, d_model], the tokens at slots [pos, pos + T): appends
 * their keys and values to layer `layer` of cache and attends causally over
 * slots [0, pos + T) (minus the padding). With pos 0 and T = L it equals
 * the full causal forward. Returns [batch, T, d_model] (pool rule), or NULL
 * with an error (wrong module, shapes, cache sizes, overflow). */
OAR_API oar_tensor *oar_transformer_layer_forward_cached(oar_module *m, oar_tensor *x,
                                                         oar_kv_cache *cache, int layer,
                                                         int64_t pos);

/* ==== GPT (src/nn/gpt.c) ==================================================
 * Token and learned position embeddings, num_layers decoder layers (GELU), a
 * final LayerNorm and a linear head with bias. Children: "tok" (Embedding
 * [vocab, d]), "pos" (Embedding [context, d]), "layers" (Sequential),
 * "norm", "head". PyTorch's default initialisation. */
typedef struct oar_gpt_config {
    int64_t vocab_size;
    int64_t context_length; /* positions the model knows (the pos table's size) */
    int64_t d_model;
    int64_t num_heads;
    int64_t num_layers;
    int64_t dim_feedforward; /* 0: 4 * d_model */
    double dropout;          /* training mode only; 0: none */
    oar_dtype dtype;         /* OAR_F32 (also for 0) or OAR_F64 */
} oar_gpt_config;

/* A GPT module. oar_module_forward(m, idx) maps token ids idx [N, L] (i64,
 * L <= context_length) to logits [N, L, vocab] (full causal forward). NULL
 * with an error on a non-positive size or d_model not a multiple of
 * num_heads. */
OAR_API oar_module *oar_gpt_new(const oar_gpt_config *cfg);
/* The cached forward: tokens [N, T] (i64) at cache slots [pos, pos + T) with
 * position ids positions [N, T] (i64, in [0, context_length); NULL: pos +
 * t for every row). Returns logits [N, T, vocab] (pool rule) or NULL with an
 * error. */
OAR_API oar_tensor *oar_gpt_forward_cached(oar_module *m, oar_tensor *tokens, oar_tensor *positions,
                                           oar_kv_cache *cache, int64_t pos);
/* A cache sized for m (its layers, heads, head size and dtype). */
OAR_API oar_kv_cache *oar_gpt_kv_cache_new(oar_module *m, int64_t batch, int64_t capacity);

/* ==== sampling and generation (src/nn/generate.c) ========================= */

/* The model as a callback: logits for tokens [N, T] (i64) at cache slots
 * [pos, pos + T) with position ids positions [N, T] (i64), appending to
 * cache. Returns [N, T, vocab] or [N, vocab] (the last position's),
 * floating (pool rule), or NULL with an error set. */
typedef oar_tensor *(*oar_logits_fn)(void *ctx, oar_tensor *tokens, oar_tensor *positions,
                                     oar_kv_cache *cache, int64_t pos);
/* oar_gpt_forward_cached as an oar_logits_fn: ctx is the GPT module. */
OAR_API oar_tensor *oar_gpt_next_logits(void *gpt, oar_tensor *tokens, oar_tensor *positions,
                                        oar_kv_cache *cache, int64_t pos);

/* How to pick each token. Start from oar_generate_options_default(). */
typedef struct oar_generate_options {
    int64_t max_new_tokens; /* >= 0; default 16 */
    double temperature;     /* 0: greedy (the first largest logit); > 0 divides the logits;
                               default 1 */
    int64_t top_k;          /* keep the k most likely tokens (ties: lower id first); 0: all */
    double top_p;           /* in (0, 1]: keep the most likely tokens (by probability after
                               temperature and top_k, ties: lower id first) up to and including
                               the first whose cumulative probability reaches top_p; 1: all */
    uint64_t seed;          /* row i draws from its own splitmix64 stream seeded by seed + i */
    int64_t stop_token;     /* a row ends after drawing it; < 0: none (default) */
    int64_t pad_token;      /* fed at padding and after a row ended; default 0 */
} oar_generate_options;

/* max_new_tokens 16, temperature 1, top_k 0, top_p 1, seed 0, stop_token -1,
 * pad_token 0. */
OAR_API oar_generate_options oar_generate_options_default(void);

/* The distribution a token is drawn from, for one row of vocab logits:
 * softmax(logits / temperature) restricted to top_k then to top_p (as
 * oar_generate_options says) and renormalised; probs[vocab] gets 0 outside
 * the kept set. temperature 0 gives 1 at the first largest logit. Only
 * temperature, top_k and top_p of o are read. 0 or an error status (NULL,
 * vocab < 1, temperature < 0, top_k < 0, top_p outside (0, 1], non-finite
 * logits). */
OAR_API int oar_sampling_probs(const double *logits, int64_t vocab, const oar_generate_options *o,
                               double *probs);
/* Draws one token from oar_sampling_probs's distribution with the
 * splitmix64 stream *rng (advanced by one draw; greedy draws nothing).
 * Returns the token id, or -1 with an error. */
OAR_API int64_t oar_sample_token(const double *logits, int64_t vocab, const oar_generate_options *o,
                                 uint64_t *rng);

/* Generates up to o->max_new_tokens tokens after each of n prompts
 * (prompts[i] has prompt_lens[i] >= 1 ids), running fn with cache (batch n,
 * capacity >= longest prompt + max_new_tokens - 1; reset first). Prompts are
 * left-padded to the longest (see the top of this header). out [n *
 * max_new_tokens] gets row i's tokens at out[i * max_new_tokens + j],
 * stopping after stop_token (kept), -1 after; out_lens[i] (may be NULL) the
 * number generated. The same options and seed give the same tokens. 0 or
 * an error status (NULL arguments, an empty prompt, bad options, a batch
 * the cache does not fit, the model's error). */
OAR_API int oar_generate(oar_logits_fn fn, void *ctx, oar_kv_cache *cache, int64_t n,
                         const int64_t *const *prompts, const int64_t *prompt_lens,
                         const oar_generate_options *o, int64_t *out, int64_t *out_lens);

#ifdef __cplusplus
}
#endif
#endif

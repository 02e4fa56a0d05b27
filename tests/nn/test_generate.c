/* Decoding (include/oar/generate.h): the KV cache, the cached forward of a
 * decoder layer and of a GPT against the full causal forward (f32 and
 * f64), sampling filters against their closed forms and draw frequencies
 * against the filtered distribution, generation against the full forward
 * re-run each step, batched prompts of different lengths against each
 * prompt alone, and every bad argument. */
#include "test.h"

#include "alloc_fail_loop.h"

#include <math.h>
#include <oar/generate.h>
#include <string.h>

enum { V = 11, CTX = 24, D = 16, HEADS = 2, LAYERS = 2 };

static oar_module *small_gpt(oar_dtype dtype) {
    oar_manual_seed(7);
    return oar_gpt_new(&(oar_gpt_config){.vocab_size = V,
                                         .context_length = CTX,
                                         .d_model = D,
                                         .num_heads = HEADS,
                                         .num_layers = LAYERS,
                                         .dim_feedforward = 32,
                                         .dtype = dtype});
}

static oar_tensor *ids_of(const int64_t *ids, int64_t n, int64_t L) {
    return oar_tensor_from_data(ids, OAR_I64, 2, (int64_t[]){n, L});
}

/* max |a - b| over equal-shaped tensors (inf on a shape mismatch or NULL) */
static double max_diff(oar_tensor *a, oar_tensor *b) {
    if (!a || !b || oar_tensor_numel(a) != oar_tensor_numel(b)) return INFINITY;
    return oar_tensor_item(
        oar_amax(oar_abs(oar_sub(oar_cast(a, OAR_F64), oar_cast(b, OAR_F64))), 0, NULL, false));
}

/* ---- the cache ------------------------------------------------------------- */

static void test_cache_append_and_views(void) {
    oar_pool *p = oar_pool_push();
    oar_kv_cache *c = oar_kv_cache_new(2, 1, 1, 2, 4, OAR_F64);
    CHECK(c && oar_kv_cache_length(c) == 0 && oar_kv_cache_capacity(c) == 4 &&
          oar_kv_cache_batch(c) == 1 && oar_kv_cache_num_layers(c) == 2);
    double a[4] = {1, 2, 3, 4}, b[2] = {5, 6};
    oar_tensor *k2 = oar_tensor_from_data(a, OAR_F64, 4, (int64_t[]){1, 1, 2, 2});
    oar_tensor *k1 = oar_tensor_from_data(b, OAR_F64, 4, (int64_t[]){1, 1, 1, 2});
    oar_tensor *ka, *va;
    CHECK(oar_kv_cache_append(c, 0, 0, k2, k2, &ka, &va) == 0);
    CHECK_VALUES(ka, a, 4, 0);
    CHECK(oar_kv_cache_append(c, 0, 2, k1, oar_neg(k1), &ka, &va) == 0);
    double want[6] = {1, 2, 3, 4, 5, 6}, wantv[6] = {1, 2, 3, 4, -5, -6};
    CHECK_VALUES(ka, want, 6, 0);
    CHECK_VALUES(va, wantv, 6, 0);
    /* only the last layer counts for the length; rewinding drops later slots */
    CHECK(oar_kv_cache_length(c) == 0);
    CHECK(oar_kv_cache_append(c, 1, 0, k1, k1, NULL, NULL) == 0 && oar_kv_cache_length(c) == 1);
    CHECK(oar_kv_cache_append(c, 0, 1, k1, k1, &ka, NULL) == 0);
    double rew[4] = {1, 2, 5, 6};
    CHECK_VALUES(ka, rew, 4, 0);
    /* the mask: causal minus padding, a padding query sees itself */
    oar_tensor *m;
    bool causal;
    CHECK(oar_kv_cache_mask(c, 0, 3, &m, &causal) == 0 && !m && causal);
    CHECK(oar_kv_cache_mask(c, 2, 1, &m, &causal) == 0 && !m && !causal);
    CHECK(oar_kv_cache_mask(c, 1, 2, &m, &causal) == 0 && m && !causal);
    double chunk[6] = {1, 1, 0, 1, 1, 1};
    CHECK_VALUES(m, chunk, 6, 0);
    CHECK(oar_kv_cache_set_padding(c, (int64_t[]){2}) == 0);
    CHECK(oar_kv_cache_mask(c, 0, 3, &m, &causal) == 0 && m && !causal);
    double padded[9] = {1, 0, 0, 0, 1, 0, 0, 0, 1};
    CHECK_VALUES(m, padded, 9, 0);
    oar_kv_cache_reset(c);
    CHECK(oar_kv_cache_length(c) == 0 && oar_kv_cache_mask(c, 0, 1, &m, &causal) == 0 && !m);
    oar_kv_cache_free(c);
    oar_pool_pop(p);
}

/* ---- cached forward = full causal forward ---------------------------------- */

/* Feeds ids [2, 10] to the model in chunks of the given sizes and compares
 * each chunk's logits with the full forward's. */
static void check_chunks(oar_dtype dtype, double tol, int nchunks, const int64_t *sizes) {
    oar_pool *p = oar_pool_push();
    oar_module *gpt = small_gpt(dtype);
    oar_module_train(gpt, false);
    int64_t ids[20];
    for (int i = 0; i < 20; i++)
        ids[i] = (i * 7 + 3) % V;
    oar_tensor *full = oar_module_forward(gpt, ids_of(ids, 2, 10));
    CHECK(oar_tensor_dtype(full) == dtype);
    oar_kv_cache *c = oar_gpt_kv_cache_new(gpt, 2, 12);
    int64_t at = 0;
    for (int k = 0; k < nchunks; k++) {
        int64_t T = sizes[k], chunk[20];
        for (int b = 0; b < 2; b++)
            for (int64_t t = 0; t < T; t++)
                chunk[b * T + t] = ids[b * 10 + at + t];
        oar_tensor *got = oar_gpt_forward_cached(gpt, ids_of(chunk, 2, T), NULL, c, at);
        oar_tensor *want = oar_slice(full, 1, at, at + T, 1);
        double d = max_diff(got, want);
        if (d > tol) fprintf(stderr, "chunk %d at %lld: max diff %g\n", k, (long long)at, d);
        CHECK(d <= tol);
        at += T;
    }
    CHECK(oar_kv_cache_length(c) == 10);
    oar_kv_cache_free(c);
    oar_module_free(gpt);
    oar_pool_pop(p);
}

static void test_cached_equals_full_f32(void) {
    int64_t ones[10] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    check_chunks(OAR_F32, 1e-5, 10, ones);
    check_chunks(OAR_F32, 1e-5, 4, (int64_t[]){4, 3, 1, 2}); /* chunks after a prefix */
    check_chunks(OAR_F32, 1e-5, 1, (int64_t[]){10});
}

static void test_cached_equals_full_f64(void) {
    int64_t ones[10] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    check_chunks(OAR_F64, 1e-12, 10, ones);
    check_chunks(OAR_F64, 1e-12, 3, (int64_t[]){5, 1, 4});
}

/* A post-norm ReLU encoder layer, causal, step by step. */
static void test_cached_post_norm_layer(void) {
    oar_pool *p = oar_pool_push();
    oar_manual_seed(3);
    oar_module *m = oar_transformer_encoder_layer_new(
        8, 2, &(oar_transformer_options){.dim_feedforward = 16, .dtype = OAR_F64});
    oar_tensor *x = oar_randn(OAR_F64, 3, (int64_t[]){2, 6, 8});
    oar_tensor *full = oar_transformer_encoder_layer_forward(m, x, NULL, NULL, true);
    oar_kv_cache *c = oar_kv_cache_new(1, 2, 2, 4, 6, OAR_F64);
    for (int64_t t = 0; t < 6; t++) {
        oar_tensor *y =
            oar_transformer_layer_forward_cached(m, oar_slice(x, 1, t, t + 1, 1), c, 0, t);
        CHECK(max_diff(y, oar_slice(full, 1, t, t + 1, 1)) <= 1e-12);
    }
    /* the decoder layer is the pre-norm causal layer */
    oar_module *dl = oar_transformer_decoder_layer_new(8, 2, NULL);
    CHECK(dl && strcmp(oar_module_type(dl), "TransformerEncoderLayer") == 0 &&
          oar_module_get(dl, "linear1.weight") &&
          oar_tensor_dim(oar_module_get(dl, "linear1.weight"), 0) == 2048);
    oar_tensor *x32 = oar_randn(OAR_F32, 3, (int64_t[]){1, 5, 8});
    oar_tensor *prenorm = oar_transformer_encoder_layer_forward(dl, x32, NULL, NULL, true);
    CHECK(max_diff(oar_module_forward(dl, x32), prenorm) == 0);
    oar_kv_cache *c1 = oar_kv_cache_new(1, 1, 2, 4, 5, OAR_F32);
    CHECK(max_diff(oar_transformer_layer_forward_cached(dl, x32, c1, 0, 0), prenorm) <= 1e-5);
    oar_kv_cache_free(c1);
    oar_module_free(dl);
    oar_kv_cache_free(c);
    oar_module_free(m);
    oar_pool_pop(p);
}

/* Left-padded rows give each prompt's logits alone. */
static void test_padded_batch_logits(void) {
    oar_pool *p = oar_pool_push();
    oar_module *gpt = small_gpt(OAR_F32);
    /* "4 1 7" left-padded by 3, and "2 9 9 0 3 5" */
    int64_t ids[12] = {0, 0, 0, 4, 1, 7, 2, 9, 9, 0, 3, 5};
    int64_t pos[12] = {0, 0, 0, 0, 1, 2, 0, 1, 2, 3, 4, 5};
    oar_kv_cache *c = oar_gpt_kv_cache_new(gpt, 2, 8);
    CHECK(oar_kv_cache_set_padding(c, (int64_t[]){3, 0}) == 0);
    oar_tensor *got = oar_gpt_forward_cached(gpt, ids_of(ids, 2, 6), ids_of(pos, 2, 6), c, 0);
    int64_t next[2] = {5, 8}, npos[2] = {3, 6};
    oar_tensor *got2 = oar_gpt_forward_cached(gpt, ids_of(next, 2, 1), ids_of(npos, 2, 1), c, 6);
    CHECK(got && got2 && isfinite(oar_tensor_item(oar_sum(got, 0, NULL, false))));
    int64_t a2[4] = {4, 1, 7, 5}, b2[7] = {2, 9, 9, 0, 3, 5, 8};
    oar_tensor *fa = oar_module_forward(gpt, ids_of(a2, 1, 4));
    oar_tensor *fb = oar_module_forward(gpt, ids_of(b2, 1, 7));
    oar_tensor *row0 = oar_slice(got, 0, 0, 1, 1), *row1 = oar_slice(got, 0, 1, 2, 1);
    CHECK(max_diff(oar_slice(row0, 1, 3, 6, 1), oar_slice(fa, 1, 0, 3, 1)) <= 1e-5);
    CHECK(max_diff(row1, oar_slice(fb, 1, 0, 6, 1)) <= 1e-5);
    CHECK(max_diff(oar_slice(got2, 0, 0, 1, 1), oar_slice(fa, 1, 3, 4, 1)) <= 1e-5);
    CHECK(max_diff(oar_slice(got2, 0, 1, 2, 1), oar_slice(fb, 1, 6, 7, 1)) <= 1e-5);
    oar_kv_cache_free(c);
    oar_module_free(gpt);
    oar_pool_pop(p);
}

/* ---- sampling: closed forms -------------------------------------------------- */

static const double row[6] = {1.0, 3.0, 2.0, 0.5, 3.0, -1.0};

/* softmax(row / t) restricted to the ids in keep[] (n of them), renormalised */
static void closed_form(double t, const int *keep, int n, double *want) {
    double z = 0;
    for (int i = 0; i < 6; i++)
        want[i] = 0;
    for (int i = 0; i < n; i++)
        z += exp(row[keep[i]] / t);
    for (int i = 0; i < n; i++)
        want[keep[i]] = exp(row[keep[i]] / t) / z;
}

static void check_probs(oar_generate_options o, const int *keep, int n) {
    double got[6], want[6];
    CHECK(oar_sampling_probs(row, 6, &o, got) == 0);
    closed_form(o.temperature, keep, n, want);
    for (int i = 0; i < 6; i++)
        CHECK_NEAR(got[i], want[i], 1e-15);
}

static void test_filters_closed_form(void) {
    oar_generate_options o = oar_generate_options_default();
    check_probs(o, (int[]){0, 1, 2, 3, 4, 5}, 6); /* no filter: softmax */
    o.temperature = 0.5;
    check_probs(o, (int[]){0, 1, 2, 3, 4, 5}, 6);
    o.top_k = 3; /* ties at 3.0: both kept, then 2.0 */
    check_probs(o, (int[]){1, 4, 2}, 3);
    o.top_k = 1; /* a tie: the lower id */
    check_probs(o, (int[]){1}, 1);
    /* top_p over softmax(row / 0.5): p(1) = p(4) = 0.4628, p(2) = 0.0626,
     * p(0) = 0.0085: {1, 4} reach 0.8; 0.95 needs 2 too; 0.99 needs 0 too */
    o.top_k = 0;
    o.top_p = 0.8;
    check_probs(o, (int[]){1, 4}, 2);
    o.top_p = 0.95;
    check_probs(o, (int[]){1, 4, 2}, 3);
    o.top_p = 0.99;
    check_probs(o, (int[]){1, 4, 2, 0}, 4);
    o.top_p = 0.3; /* at least the most likely one */
    check_probs(o, (int[]){1}, 1);
    /* top_k first, then top_p on the renormalised top_k set: p = 0.4689,
     * 0.4689, 0.0623 (k = 3, t = 0.5), so 0.9 keeps {1, 4} (0.95 would not) */
    o.top_k = 3;
    o.top_p = 0.9;
    check_probs(o, (int[]){1, 4}, 2);
    /* temperature 0: one-hot at the first largest */
    double got[6];
    o = oar_generate_options_default();
    o.temperature = 0;
    CHECK(oar_sampling_probs(row, 6, &o, got) == 0 && got[1] == 1 && got[4] == 0);
    uint64_t rng = 5, before = rng;
    CHECK(oar_sample_token(row, 6, &o, &rng) == 1 && rng == before);
}

/* Frequencies of 40000 draws against the filtered distribution: Pearson's
 * chi-square, and no draw outside the kept set. */
static void test_sampling_frequencies(void) {
    double logits[8] = {0.3, 1.2, -0.5, 2.0, 1.9, 0.0, 1.1, -2.0};
    oar_generate_options o = oar_generate_options_default();
    o.temperature = 0.8;
    o.top_k = 5;
    o.top_p = 0.9;
    double p[8];
    CHECK(oar_sampling_probs(logits, 8, &o, p) == 0);
    int kept = 0;
    for (int i = 0; i < 8; i++)
        kept += p[i] > 0;
    CHECK(kept >= 3 && kept <= 5);
    enum { DRAWS = 40000 };
    long count[8] = {0};
    uint64_t rng = 12345;
    for (int d = 0; d < DRAWS; d++) {
        int64_t id = oar_sample_token(logits, 8, &o, &rng);
        CHECK(id >= 0 && id < 8);
        if (id >= 0 && id < 8) count[id]++;
    }
    double chi2 = 0;
    for (int i = 0; i < 8; i++) {
        if (p[i] == 0) {
            CHECK(count[i] == 0);
            continue;
        }
        double e = DRAWS * p[i];
        chi2 += (count[i] - e) * (count[i] - e) / e;
    }
    /* df <= 4: P(chi2 > 23.5) < 1e-4 */
    if (chi2 >= 23.5) fprintf(stderr, "chi2 %g over %d bins\n", chi2, kept);
    CHECK(chi2 < 23.5);
}

/* ---- generation ---------------------------------------------------------------- */

/* Greedy by re-running the full forward on the whole sequence each step. */
static void greedy_rerun(oar_module *gpt, const int64_t *prompt, int64_t len, int64_t M,
                         int64_t *out) {
    int64_t seq[CTX];
    memcpy(seq, prompt, (size_t)len * sizeof *seq);
    for (int64_t s = 0; s < M; s++) {
        oar_pool *p = oar_pool_push();
        oar_tensor *logits = oar_module_forward(gpt, ids_of(seq, 1, len + s));
        oar_tensor *last = oar_slice(logits, 1, len + s - 1, len + s, 1);
        out[s] = seq[len + s] = (int64_t)oar_tensor_item(oar_argmax(last, -1, false));
        oar_pool_pop(p);
    }
}

static void test_greedy_equals_rerun(void) {
    oar_module *gpt = small_gpt(OAR_F32);
    int64_t prompt[4] = {3, 1, 4, 1}, want[10], got[10], n_got = 0;
    greedy_rerun(gpt, prompt, 4, 10, want);
    oar_kv_cache *c = oar_gpt_kv_cache_new(gpt, 1, 13);
    oar_generate_options o = oar_generate_options_default();
    o.max_new_tokens = 10;
    o.temperature = 0;
    CHECK(oar_generate(oar_gpt_next_logits, gpt, c, 1, (const int64_t *[]){prompt}, (int64_t[]){4},
                       &o, got, &n_got) == 0);
    CHECK(n_got == 10);
    for (int i = 0; i < 10; i++)
        CHECK(got[i] == want[i]);
    /* top_k = 1 at any temperature is greedy */
    o.temperature = 1.3;
    o.top_k = 1;
    o.seed = 99;
    CHECK(oar_generate(oar_gpt_next_logits, gpt, c, 1, (const int64_t *[]){prompt}, (int64_t[]){4},
                       &o, got, NULL) == 0);
    for (int i = 0; i < 10; i++)
        CHECK(got[i] == want[i]);
    /* a stop token: kept, then -1 */
    o = oar_generate_options_default();
    o.max_new_tokens = 10;
    o.temperature = 0;
    o.stop_token = want[2];
    int64_t first = 0;
    while (want[first] != want[2])
        first++;
    CHECK(oar_generate(oar_gpt_next_logits, gpt, c, 1, (const int64_t *[]){prompt}, (int64_t[]){4},
                       &o, got, &n_got) == 0);
    CHECK(n_got == first + 1 && got[first] == want[2]);
    for (int64_t i = first + 1; i < 10; i++)
        CHECK(got[i] == -1);
    oar_kv_cache_free(c);
    oar_module_free(gpt);
}

static void test_seeded_sampling(void) {
    oar_module *gpt = small_gpt(OAR_F32);
    int64_t prompt[2] = {5, 2}, a[12], b[12], c2[12];
    oar_kv_cache *c = oar_gpt_kv_cache_new(gpt, 1, 14);
    oar_generate_options o = oar_generate_options_default();
    o.max_new_tokens = 12;
    o.temperature = 1.5;
    o.top_p = 0.95;
    o.seed = 2024;
    const int64_t *pr[1] = {prompt};
    CHECK(oar_generate(oar_gpt_next_logits, gpt, c, 1, pr, (int64_t[]){2}, &o, a, NULL) == 0);
    CHECK(oar_generate(oar_gpt_next_logits, gpt, c, 1, pr, (int64_t[]){2}, &o, b, NULL) == 0);
    o.seed = 2025;
    CHECK(oar_generate(oar_gpt_next_logits, gpt, c, 1, pr, (int64_t[]){2}, &o, c2, NULL) == 0);
    bool same = true, differs = false;
    for (int i = 0; i < 12; i++) {
        same &= a[i] == b[i];
        differs |= a[i] != c2[i];
        CHECK(a[i] >= 0 && a[i] < V);
    }
    CHECK(same);
    CHECK(differs);
    oar_kv_cache_free(c);
    oar_module_free(gpt);
}

/* Rows of different lengths in one batch generate what each generates
 * alone (row i alone with seed + i). */
static void test_batched_prompts(void) {
    oar_module *gpt = small_gpt(OAR_F32);
    int64_t p0[3] = {1, 2, 3}, p1[7] = {9, 8, 7, 6, 5, 4, 3}, p2[5] = {10, 0, 10, 0, 10};
    const int64_t *prompts[3] = {p0, p1, p2};
    int64_t lens[3] = {3, 7, 5}, M = 8;
    for (int sampled = 0; sampled < 2; sampled++) {
        oar_generate_options o = oar_generate_options_default();
        o.max_new_tokens = M;
        o.temperature = sampled ? 0.9 : 0;
        o.top_k = sampled ? 6 : 0;
        o.seed = 31;
        int64_t batch[3 * 8], n_batch[3];
        oar_kv_cache *c = oar_gpt_kv_cache_new(gpt, 3, 7 + M - 1);
        CHECK(oar_generate(oar_gpt_next_logits, gpt, c, 3, prompts, lens, &o, batch, n_batch) == 0);
        oar_kv_cache *c1 = oar_gpt_kv_cache_new(gpt, 1, 7 + M - 1);
        for (int i = 0; i < 3; i++) {
            int64_t alone[8];
            oar_generate_options oi = o;
            oi.seed = o.seed + (uint64_t)i;
            CHECK(oar_generate(oar_gpt_next_logits, gpt, c1, 1, &prompts[i], &lens[i], &oi, alone,
                               NULL) == 0);
            CHECK(n_batch[i] == M);
            for (int j = 0; j < M; j++)
                CHECK(batch[i * M + j] == alone[j]);
        }
        oar_kv_cache_free(c1);
        oar_kv_cache_free(c);
    }
    oar_module_free(gpt);
}

/* ---- bad arguments --------------------------------------------------------------- */

static oar_tensor *bad_model(void *ctx, oar_tensor *tokens, oar_tensor *positions,
                             oar_kv_cache *cache, int64_t pos) {
    (void)ctx, (void)positions, (void)cache, (void)pos;
    return oar_zeros(OAR_F32, 1, (int64_t[]){oar_tensor_numel(tokens)});
}

static oar_tensor *failing_model(void *ctx, oar_tensor *tokens, oar_tensor *positions,
                                 oar_kv_cache *cache, int64_t pos) {
    (void)ctx, (void)tokens, (void)positions, (void)cache, (void)pos;
    return oar_reshape(NULL, 0, NULL);
}

static void test_errors(void) {
    oar_pool *pool = oar_pool_push();
    oar_module *gpt = small_gpt(OAR_F32);
    oar_generate_options o = oar_generate_options_default();
    double probs[6];
    /* options */
    o.top_p = 0;
    CHECK_STATUS_FAILS(oar_sampling_probs(row, 6, &o, probs), "top_p must be in (0, 1]");
    o.top_p = 1.5;
    CHECK_STATUS_FAILS(oar_sampling_probs(row, 6, &o, probs), "top_p must be in (0, 1]");
    o.top_p = NAN;
    CHECK_STATUS_FAILS(oar_sampling_probs(row, 6, &o, probs), "top_p");
    o = oar_generate_options_default();
    o.top_k = -1;
    CHECK_STATUS_FAILS(oar_sampling_probs(row, 6, &o, probs), "top_k must be >= 0");
    o = oar_generate_options_default();
    o.temperature = -0.5;
    CHECK_STATUS_FAILS(oar_sampling_probs(row, 6, &o, probs), "temperature must be");
    o = oar_generate_options_default();
    CHECK_STATUS_FAILS(oar_sampling_probs(NULL, 6, &o, probs), "logits is NULL");
    CHECK_STATUS_FAILS(oar_sampling_probs(row, 6, NULL, probs), "options is NULL");
    CHECK_STATUS_FAILS(oar_sampling_probs(row, 6, &o, NULL), "probs is NULL");
    CHECK_STATUS_FAILS(oar_sampling_probs(row, 0, &o, probs), "vocab must be >= 1");
    double inf_row[2] = {0, INFINITY};
    CHECK_STATUS_FAILS(oar_sampling_probs(inf_row, 2, &o, probs), "logit 1 is not finite");
    uint64_t rng = 0;
    CHECK_FAILS(oar_sample_token(row, 6, &o, NULL) >= 0, "rng is NULL");
    o.top_k = -2;
    CHECK_FAILS(oar_sample_token(row, 6, &o, &rng) >= 0, "top_k");
    /* generate */
    o = oar_generate_options_default();
    int64_t p0[3] = {1, 2, 3}, out[64];
    const int64_t *pr[2] = {p0, p0};
    int64_t len3[2] = {3, 3}, len0[2] = {3, 0};
    oar_kv_cache *c = oar_gpt_kv_cache_new(gpt, 2, 8);
    CHECK_STATUS_FAILS(oar_generate(NULL, gpt, c, 2, pr, len3, &o, out, NULL), "fn is NULL");
    CHECK_STATUS_FAILS(oar_generate(oar_gpt_next_logits, gpt, NULL, 2, pr, len3, &o, out, NULL),
                       "cache is NULL");
    CHECK_STATUS_FAILS(oar_generate(oar_gpt_next_logits, gpt, c, 2, NULL, len3, &o, out, NULL),
                       "prompts is NULL");
    CHECK_STATUS_FAILS(oar_generate(oar_gpt_next_logits, gpt, c, 2, pr, NULL, &o, out, NULL),
                       "prompt_lens is NULL");
    CHECK_STATUS_FAILS(oar_generate(oar_gpt_next_logits, gpt, c, 2, pr, len3, &o, NULL, NULL),
                       "out is NULL");
    CHECK_STATUS_FAILS(oar_generate(oar_gpt_next_logits, gpt, c, 2, pr, len3, NULL, out, NULL),
                       "options is NULL");
    CHECK_STATUS_FAILS(oar_generate(oar_gpt_next_logits, gpt, c, 2, pr, len0, &o, out, NULL),
                       "prompt 1 is empty");
    CHECK_STATUS_FAILS(oar_generate(oar_gpt_next_logits, gpt, c, 1, pr, len3, &o, out, NULL),
                       "1 prompts for a cache of batch 2");
    o.max_new_tokens = 7; /* 3 + 7 - 1 = 9 > 8 */
    CHECK_STATUS_FAILS(oar_generate(oar_gpt_next_logits, gpt, c, 2, pr, len3, &o, out, NULL),
                       "need 9 cache positions; the cache holds 8");
    o.max_new_tokens = -1;
    CHECK_STATUS_FAILS(oar_generate(oar_gpt_next_logits, gpt, c, 2, pr, len3, &o, out, NULL),
                       "max_new_tokens must be >= 0");
    o = oar_generate_options_default();
    o.max_new_tokens = 4;
    o.top_p = 2;
    CHECK_STATUS_FAILS(oar_generate(oar_gpt_next_logits, gpt, c, 2, pr, len3, &o, out, NULL),
                       "generate: top_p must be in (0, 1]");
    o.top_p = 1;
    CHECK_STATUS_FAILS(oar_generate(bad_model, NULL, c, 2, pr, len3, &o, out, NULL),
                       "expected floating logits");
    CHECK_STATUS_FAILS(oar_generate(failing_model, NULL, c, 2, pr, len3, &o, out, NULL), "reshape");
    int64_t big[2] = {V, 0};
    const int64_t *prb[2] = {big, big};
    CHECK_STATUS_FAILS(
        oar_generate(oar_gpt_next_logits, gpt, c, 2, prb, (int64_t[]){2, 2}, &o, out, NULL),
        "index 11 is out of range");
    o.max_new_tokens = 0; /* nothing to do, nothing run */
    int64_t nl[2] = {5, 5};
    CHECK(oar_generate(failing_model, NULL, c, 2, pr, len3, &o, out, nl) == 0 && nl[0] == 0);
    /* the cache */
    CHECK_FAILS(oar_kv_cache_new(0, 1, 1, 1, 1, OAR_F32), "expected positive n_layers");
    CHECK_FAILS(oar_kv_cache_new(1, 1, 1, 1, 0, OAR_F32), "capacity 0");
    CHECK_FAILS(oar_kv_cache_new(1, 1, 1, 1, 4, OAR_I64), "dtype f32 or f64");
    oar_kv_cache *kc = oar_kv_cache_new(1, 1, 2, 3, 4, OAR_F32);
    oar_tensor *k3 = oar_zeros(OAR_F32, 4, (int64_t[]){1, 2, 3, 3});
    oar_tensor *k1 = oar_zeros(OAR_F32, 4, (int64_t[]){1, 2, 1, 3});
    oar_tensor *kw = oar_zeros(OAR_F32, 4, (int64_t[]){1, 3, 1, 3});
    CHECK(oar_kv_cache_append(kc, 0, 0, k3, k3, NULL, NULL) == 0);
    CHECK_STATUS_FAILS(oar_kv_cache_append(kc, 0, 3, k3, k3, NULL, NULL),
                       "3 positions at 3 overflow the capacity 4");
    CHECK_STATUS_FAILS(oar_kv_cache_append(kc, 0, 5, k1, k1, NULL, NULL),
                       "position 5 is outside [0, length 3]");
    CHECK_STATUS_FAILS(oar_kv_cache_append(kc, 1, 0, k1, k1, NULL, NULL),
                       "layer 1 is outside [0, 1)");
    CHECK_STATUS_FAILS(oar_kv_cache_append(kc, 0, 0, kw, kw, NULL, NULL),
                       "expected k and v [batch 1, heads 2, T >= 1, head_dim 3], got [1, 3, 1, 3]");
    CHECK_STATUS_FAILS(oar_kv_cache_append(kc, 0, 0, k1, k3, NULL, NULL), "got [1, 2, 1, 3] and");
    CHECK_STATUS_FAILS(oar_kv_cache_append(NULL, 0, 0, k1, k1, NULL, NULL), "cache is NULL");
    CHECK_STATUS_FAILS(oar_kv_cache_append(kc, 0, 0, NULL, k1, NULL, NULL), "k is NULL");
    CHECK_STATUS_FAILS(oar_kv_cache_set_padding(kc, (int64_t[]){5}), "padding 5 is outside");
    oar_tensor *m;
    bool causal;
    CHECK_STATUS_FAILS(oar_kv_cache_mask(kc, 3, 2, &m, &causal), "2 queries at 3 do not fit");
    CHECK_STATUS_FAILS(oar_kv_cache_mask(kc, 0, 1, NULL, &causal), "mask is NULL");
    CHECK_FAILS(oar_kv_cache_length(NULL) >= 0, "cache is NULL");
    oar_kv_cache_free(NULL);
    oar_kv_cache_reset(NULL);
    /* the layer and the model */
    oar_module *lin = oar_linear_new(4, 4, true);
    oar_tensor *x = oar_zeros(OAR_F32, 3, (int64_t[]){2, 1, D});
    CHECK_FAILS(oar_transformer_layer_forward_cached(lin, x, c, 0, 0),
                "expected a TransformerEncoderLayer, got Linear");
    oar_module *layer = oar_module_child(gpt, "layers.0");
    CHECK_FAILS(oar_transformer_layer_forward_cached(layer, NULL, c, 0, 0), "x is NULL");
    CHECK_FAILS(oar_transformer_layer_forward_cached(layer, x, NULL, 0, 0), "cache is NULL");
    CHECK_FAILS(oar_transformer_layer_forward_cached(
                    layer, oar_zeros(OAR_F32, 3, (int64_t[]){2, 1, 5}), c, 0, 0),
                "expected x [batch 2, T >= 1, d_model 16], got [2, 1, 5]");
    CHECK_FAILS(oar_transformer_layer_forward_cached(layer, x, c, 9, 0), "layer 9 is outside");
    CHECK_FAILS(
        oar_gpt_new(&(oar_gpt_config){
            .vocab_size = 5, .context_length = 4, .d_model = 6, .num_heads = 4, .num_layers = 1}),
        "d_model 6 a multiple of num_heads 4");
    CHECK_FAILS(oar_gpt_new(NULL), "cfg is NULL");
    CHECK_FAILS(oar_gpt_kv_cache_new(lin, 1, 4), "expected a GPT module, got Linear");
    int64_t two[2] = {1, 2};
    CHECK_FAILS(oar_gpt_forward_cached(lin, ids_of(two, 2, 1), NULL, c, 0), "expected a GPT");
    CHECK_FAILS(oar_gpt_forward_cached(gpt, oar_zeros(OAR_F32, 2, (int64_t[]){2, 1}), NULL, c, 0),
                "expected tokens [N, L >= 1] i64");
    CHECK_FAILS(oar_gpt_forward_cached(gpt, ids_of(two, 1, 2), NULL, c, 0),
                "the cache has 2 layers and batch 2");
    CHECK_FAILS(oar_gpt_forward_cached(gpt, ids_of(two, 2, 1), ids_of(two, 1, 2), c, 0),
                "expected positions [2, 1] i64");
    CHECK_FAILS(oar_gpt_forward_cached(gpt, ids_of(two, 2, 1), NULL, NULL, 0), "cache is NULL");
    int64_t longer[CTX + 1] = {0};
    CHECK_FAILS(oar_module_forward(gpt, ids_of(longer, 1, CTX + 1)),
                "25 tokens exceed the context length 24");
    oar_module_free(lin);
    oar_kv_cache_free(kc);
    oar_kv_cache_free(c);
    oar_module_free(gpt);
    oar_pool_pop(pool);
}

/* ---- every allocation failing in turn ---------------------------------------------- */

static oar_module *fail_gpt;

/* A cache, then two prompts of different lengths, sampled with top-k and
 * top-p: the whole path, with padding. */
static int generate_step(void) {
    int64_t p0[2] = {1, 2}, p1[4] = {3, 4, 5, 6}, out[2 * 3];
    oar_generate_options o = oar_generate_options_default();
    o.max_new_tokens = 3;
    o.top_k = 5;
    o.top_p = 0.9;
    oar_kv_cache *c = oar_gpt_kv_cache_new(fail_gpt, 2, 6);
    if (!c) return -1;
    int st = oar_generate(oar_gpt_next_logits, fail_gpt, c, 2, (const int64_t *[]){p0, p1},
                          (int64_t[]){2, 4}, &o, out, NULL);
    oar_kv_cache_free(c);
    return st;
}

static void test_allocation_failures(void) {
    fail_gpt = small_gpt(OAR_F32);
    CHECK(generate_step() == 0);
    oar_set_allocator(failing_alloc, NULL);
    int failures,
        n = fail_each_allocation_with(generate_step, &failures, (fail_loop_opts){.cold = true});
    oar_set_allocator(NULL, NULL);
    CHECK(n > 20 && failures > 20);
    oar_module_free(fail_gpt);
}

int main(void) {
    RUN(test_cache_append_and_views);
    RUN(test_cached_equals_full_f32);
    RUN(test_cached_equals_full_f64);
    RUN(test_cached_post_norm_layer);
    RUN(test_padded_batch_logits);
    RUN(test_filters_closed_form);
    RUN(test_sampling_frequencies);
    RUN(test_greedy_equals_rerun);
    RUN(test_seeded_sampling);
    RUN(test_batched_prompts);
    RUN(test_errors);
    RUN(test_allocation_failures);
    return test_summary();
}

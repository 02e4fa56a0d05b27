/* Sampling (temperature, top-k, top-p) on the host in double precision,
 * and the generation loop: the left-padded prompts in one model call, then
 * one token per row a step through the KV cache. */
#include "../core/core.h"

#include <math.h>
#include <oar/autograd.h>
#include <oar/generate.h>
#include <oar/ops.h>
#include <stdlib.h>

#define GEN "generate"

oar_generate_options oar_generate_options_default(void) {
    return (oar_generate_options){.max_new_tokens = 16,
                                  .temperature = 1.0,
                                  .top_k = 0,
                                  .top_p = 1.0,
                                  .seed = 0,
                                  .stop_token = -1,
                                  .pad_token = 0};
}

static int check_options(const char *op, const oar_generate_options *o) {
    if (!o) return oari_null_arg(op, "options");
    if (!(o->temperature >= 0) || isinf(o->temperature))
        return oari_error(OAR_ERR_INVALID, "%s: temperature must be finite and >= 0, got %g", op,
                          o->temperature);
    if (o->top_k < 0)
        return oari_error(OAR_ERR_INVALID, "%s: top_k must be >= 0 (0: off), got %lld", op,
                          (long long)o->top_k);
    if (!(o->top_p > 0 && o->top_p <= 1))
        return oari_error(OAR_ERR_INVALID, "%s: top_p must be in (0, 1] (1: off), got %g", op,
                          o->top_p);
    if (o->max_new_tokens < 0)
        return oari_error(OAR_ERR_INVALID, "%s: max_new_tokens must be >= 0, got %lld", op,
                          (long long)o->max_new_tokens);
    return 0;
}

/* splitmix64, and a uniform double in [0, 1) from its top 53 bits. */
static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

typedef struct {
    double logit, p;
    int64_t id;
} entry;

/* Larger logit first; ties: lower id first. */
static int by_logit(const void *a, const void *b) {
    const entry *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Fills e[0..*kept) with the kept tokens and their renormalised
 * probabilities (the order the draw walks). e has vocab entries. */
static int filter(const char *op, const double *logits, int64_t vocab,
                  const oar_generate_options *o, entry *e, int64_t *kept) {
    int st = check_options(op, o);
    if (st) return st;
    int64_t best = 0;
    for (int64_t i = 0; i < vocab; i++) {
        if (!isfinite(logits[i]))
            return oari_error(OAR_ERR_INVALID, "%s: logit %lld is not finite (%g)", op,
                              (long long)i, logits[i]);
        e[i] = (entry){.logit = logits[i], .p = 0, .id = i};
        if (logits[i] > logits[best]) best = i;
    }
    if (o->temperature == 0) { /* greedy */
        e[0] = (entry){.logit = logits[best], .p = 1, .id = best};
        *kept = 1;
        return 0;
    }
    int64_t k = vocab;
    bool filtering = (o->top_k > 0 && o->top_k < vocab) || o->top_p < 1;
    if (filtering) qsort(e, (size_t)vocab, sizeof *e, by_logit);
    if (o->top_k > 0 && o->top_k < vocab) k = o->top_k;
    double sum = 0;
    for (int64_t i = 0; i < k; i++) {
        e[i].p = exp((e[i].logit - logits[best]) / o->temperature);
        sum += e[i].p;
    }
    for (int64_t i = 0; i < k; i++)
        e[i].p /= sum;
    if (o->top_p < 1) { /* the shortest prefix reaching top_p */
        double cum = 0;
        int64_t m = 0;
        while (m < k && cum < o->top_p)
            cum += e[m++].p;
        k = m;
        for (int64_t i = 0; i < k; i++)
            e[i].p /= cum;
    }
    *kept = k;
    return 0;
}

static int check_row(const char *op, const double *logits, int64_t vocab) {
    if (!logits) return oari_null_arg(op, "logits");
    if (vocab < 1)
        return oari_error(OAR_ERR_INVALID, "%s: vocab must be >= 1, got %lld", op,
                          (long long)vocab);
    return 0;
}

int oar_sampling_probs(const double *logits, int64_t vocab, const oar_generate_options *o,
                       double *probs) {
    const char *op = "sampling_probs";
    int st = check_row(op, logits, vocab);
    if (st) return st;
    if (!probs) return oari_null_arg(op, "probs");
    entry *e = oari_malloc((size_t)vocab * sizeof *e);
    if (!e) return oari_fail_status();
    int64_t kept = 0;
    st = filter(op, logits, vocab, o, e, &kept);
    if (!st) {
        for (int64_t i = 0; i < vocab; i++)
            probs[i] = 0;
        for (int64_t i = 0; i < kept; i++)
            probs[e[i].id] = e[i].p;
    }
    oari_free(e, (size_t)vocab * sizeof *e);
    return st;
}

/* Walks the kept entries with one uniform draw (none when greedy). */
static int64_t draw(const entry *e, int64_t kept, const oar_generate_options *o, uint64_t *rng) {
    if (o->temperature == 0) return e[0].id;
    double u = (double)(splitmix(rng) >> 11) / 9007199254740992.0, acc = 0;
    for (int64_t i = 0; i < kept; i++) {
        acc += e[i].p;
        if (u < acc) return e[i].id;
    }
    return e[kept - 1].id; /* u beyond the rounded total */
}

int64_t oar_sample_token(const double *logits, int64_t vocab, const oar_generate_options *o,
                         uint64_t *rng) {
    const char *op = "sample_token";
    if (check_row(op, logits, vocab)) return -1;
    if (!rng) return oari_null_arg(op, "rng"), -1;
    entry *e = oari_malloc((size_t)vocab * sizeof *e);
    if (!e) return -1;
    int64_t kept = 0, id = -1;
    if (!filter(op, logits, vocab, o, e, &kept)) id = draw(e, kept, o, rng);
    oari_free(e, (size_t)vocab * sizeof *e);
    return id;
}

/* ---- generation ------------------------------------------------------------ */

typedef struct {
    int64_t n, P, vocab;
    int64_t *pad;       /* [n] left padding */
    int64_t *ids, *pos; /* [n * P] a step's tokens and position ids */
    uint64_t *rng;      /* [n] */
    bool *done;         /* [n] */
    double *logits;     /* [n * vocab] */
    entry *e;           /* [vocab] */
} gen_state;

static void gen_free(gen_state *g) {
    oari_free(g->pad, (size_t)g->n * sizeof *g->pad);
    oari_free(g->ids, (size_t)(g->n * g->P) * sizeof *g->ids);
    oari_free(g->pos, (size_t)(g->n * g->P) * sizeof *g->pos);
    oari_free(g->rng, (size_t)g->n * sizeof *g->rng);
    oari_free(g->done, (size_t)g->n * sizeof *g->done);
    oari_free(g->logits, (size_t)(g->n * g->vocab) * sizeof *g->logits);
    oari_free(g->e, (size_t)g->vocab * sizeof *g->e);
}

/* Runs the model on a step's tokens [n, T] at slot `slot` and copies the
 * last position's logits to g->logits (allocated on the first call). */
static int gen_step(gen_state *g, oar_logits_fn fn, void *ctx, oar_kv_cache *cache, int64_t T,
                    int64_t slot) {
    oar_pool *pool = oar_pool_push();
    if (!pool) return oari_fail_status();
    int64_t shape[2] = {g->n, T};
    oar_tensor *ids = oar_tensor_from_data(g->ids, OAR_I64, 2, shape);
    oar_tensor *pos = oar_tensor_from_data(g->pos, OAR_I64, 2, shape);
    oar_tensor *r = ids && pos ? fn(ctx, ids, pos, cache, slot) : NULL;
    int st = 0;
    char s[200];
    if (!r) {
        st = oari_fail_status();
        if (!oari_error_pending()) st = oari_error(st, "%s: the model returned NULL", GEN);
    } else if (!((r->ndim == 3 && r->shape[1] == T) || r->ndim == 2) || r->shape[0] != g->n ||
               r->shape[r->ndim - 1] < 1 || (g->vocab && r->shape[r->ndim - 1] != g->vocab) ||
               !oar_dtype_is_float(r->dtype)) {
        st = oari_error(OAR_ERR_INVALID,
                        "%s: expected floating logits [%lld, %lld, vocab] or [%lld, vocab] from "
                        "the model, got %s %s",
                        GEN, (long long)g->n, (long long)T, (long long)g->n,
                        oar_dtype_name(r->dtype), oari_shape_str(s, r->ndim, r->shape));
    }
    if (!st && !g->vocab) {
        g->vocab = r->shape[r->ndim - 1];
        g->logits = oari_malloc((size_t)(g->n * g->vocab) * sizeof *g->logits);
        g->e = oari_malloc((size_t)g->vocab * sizeof *g->e);
        if (!g->logits || !g->e) st = oari_fail_status();
    }
    if (!st) {
        oar_tensor *last = r->ndim == 3 ? oar_squeeze(oar_slice(r, 1, T - 1, T, 1), 1) : r;
        last = oar_cast(last, OAR_F64);
        st = last ? oar_tensor_to_host(last, g->logits, (size_t)(g->n * g->vocab) * sizeof(double))
                  : oari_fail_status();
    }
    oar_pool_pop(pool);
    return st;
}

static int check_generate(oar_logits_fn fn, oar_kv_cache *cache, int64_t n,
                          const int64_t *const *prompts, const int64_t *lens,
                          const oar_generate_options *o, int64_t *out, int64_t *P) {
    if (!fn) return oari_null_arg(GEN, "fn");
    if (!cache) return oari_null_arg(GEN, "cache");
    if (!prompts) return oari_null_arg(GEN, "prompts");
    if (!lens) return oari_null_arg(GEN, "prompt_lens");
    if (!out) return oari_null_arg(GEN, "out");
    int st = check_options(GEN, o);
    if (st) return st;
    if (n < 1 || n != oar_kv_cache_batch(cache))
        return oari_error(OAR_ERR_INVALID, "%s: %lld prompts for a cache of batch %lld", GEN,
                          (long long)n, (long long)oar_kv_cache_batch(cache));
    *P = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!prompts[i] || lens[i] < 1)
            return oari_error(OAR_ERR_INVALID, "%s: prompt %lld is empty (length %lld%s)", GEN,
                              (long long)i, (long long)lens[i], prompts[i] ? "" : ", NULL");
        if (lens[i] > *P) *P = lens[i];
    }
    int64_t need = *P + (o->max_new_tokens > 0 ? o->max_new_tokens - 1 : 0);
    if (need > oar_kv_cache_capacity(cache))
        return oari_error(OAR_ERR_INVALID,
                          "%s: the longest prompt (%lld) and max_new_tokens %lld need %lld cache "
                          "positions; the cache holds %lld",
                          GEN, (long long)*P, (long long)o->max_new_tokens, (long long)need,
                          (long long)oar_kv_cache_capacity(cache));
    return 0;
}

int oar_generate(oar_logits_fn fn, void *ctx, oar_kv_cache *cache, int64_t n,
                 const int64_t *const *prompts, const int64_t *lens, const oar_generate_options *o,
                 int64_t *out, int64_t *out_lens) {
    int64_t P = 0;
    int st = check_generate(fn, cache, n, prompts, lens, o, out, &P);
    if (st) return st;
    int64_t M = o->max_new_tokens;
    for (int64_t i = 0; i < n * M; i++)
        out[i] = -1;
    for (int64_t i = 0; out_lens && i < n; i++)
        out_lens[i] = 0;
    if (M == 0) return 0;
    gen_state g = {.n = n, .P = P};
    g.pad = oari_malloc((size_t)n * sizeof *g.pad);
    g.ids = oari_malloc((size_t)(n * P) * sizeof *g.ids);
    g.pos = oari_malloc((size_t)(n * P) * sizeof *g.pos);
    g.rng = oari_malloc((size_t)n * sizeof *g.rng);
    g.done = oari_calloc((size_t)n, sizeof *g.done);
    if (!g.pad || !g.ids || !g.pos || !g.rng || !g.done) {
        gen_free(&g);
        return oari_fail_status();
    }
    /* the prompts, left-padded; position ids count from each first real token */
    for (int64_t i = 0; i < n; i++) {
        g.pad[i] = P - lens[i];
        g.rng[i] = o->seed + (uint64_t)i;
        for (int64_t j = 0; j < P; j++) {
            bool real = j >= g.pad[i];
            g.ids[i * P + j] = real ? prompts[i][j - g.pad[i]] : o->pad_token;
            g.pos[i * P + j] = real ? j - g.pad[i] : 0;
        }
    }
    oar_kv_cache_reset(cache);
    st = oar_kv_cache_set_padding(cache, g.pad);
    oar_no_grad_push();
    int64_t T = P, slot = 0;
    for (int64_t step = 0; step < M && !st; step++) {
        st = gen_step(&g, fn, ctx, cache, T, slot);
        bool all_done = true;
        for (int64_t i = 0; i < n && !st; i++) {
            int64_t id = o->pad_token;
            if (!g.done[i]) {
                int64_t kept = 0;
                st = filter(GEN, g.logits + i * g.vocab, g.vocab, o, g.e, &kept);
                if (st) break;
                id = draw(g.e, kept, o, &g.rng[i]);
                out[i * M + step] = id;
                if (out_lens) out_lens[i] = step + 1;
                g.done[i] = id == o->stop_token;
            }
            all_done &= g.done[i];
            g.ids[i] = id;
            g.pos[i] = slot + T - g.pad[i];
        }
        if (all_done) break;
        slot += T;
        T = 1;
    }
    oar_no_grad_pop();
    gen_free(&g);
    return st;
}

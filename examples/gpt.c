/* A GPT-style character model (oar_gpt_new, <oar/generate.h>) trained on
 * the King James Bible, then sampled through the KV cache with
 * temperature, top-k and top-p.
 *
 *     bash scripts/bible-text.sh bible-kjv.txt
 *     ./build/gpt bible-kjv.txt
 *
 * Model: token and learned position embeddings, OAR_GPT_LAYERS (6)
 * pre-norm causal decoder layers of width OAR_GPT_D (128) with OAR_GPT_HEADS
 * (4) heads, feed-forward 4 x d, GELU, a final LayerNorm and a linear head;
 * context OAR_GPT_CONTEXT (64). The classic "6 layers, d 384, context 256"
 * is OAR_GPT_D=384 OAR_GPT_HEADS=6 OAR_GPT_CONTEXT=256; the default is
 * smaller so that a run fits a few minutes on 2 cores. Training as
 * examples/char_lm.c: AdamW (weight decay 0.01), linear warm-up then cosine
 * decay to a tenth, clipping at 1, random windows of the first 90% drawn by
 * splitmix64 from seed 1234; validation on evenly spaced windows of the last
 * 10%, in nats per character.
 *
 * Sampling: oar_generate over the KV cache, from "And God said", with
 * OAR_GPT_TEMPERATURE (0.8), OAR_GPT_TOP_K (0: off), OAR_GPT_TOP_P (0.95),
 * OAR_GPT_SEED (99). The cache holds one context; when it is full the last
 * half context becomes the next prompt.
 *
 * examples/ref/gpt.py is the same program in PyTorch (same windows, same
 * schedule), for comparing the validation loss. Other environment:
 * OAR_EXAMPLE_STEPS (300), OAR_EXAMPLE_BATCH (16), OAR_EXAMPLE_EVAL (128),
 * OAR_EXAMPLE_SAMPLE (characters to generate, 300), OAR_EXAMPLE_LR (2e-3). */
#include <oar/generate.h>
#include <oar/oar.h>
#include <oar/optim.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int fail(const char *what) {
    fprintf(stderr, "gpt: %s: %s\n", what, oar_last_error());
    return 1;
}

static double env_num(const char *name, double def) {
    const char *v = getenv(name);
    return v && *v ? atof(v) : def;
}

/* splitmix64: the same stream as the PyTorch twin draws. */
static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* ---- data -------------------------------------------------------------- */

typedef struct {
    int64_t n, n_train;
    uint8_t *ids; /* the text as vocabulary indices */
    int vocab;
    uint8_t chars[256]; /* index -> byte */
    int code[256];      /* byte -> index */
} text;

static int text_load(text *t, const char *path, int64_t T) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "gpt: cannot open %s (make it with: bash scripts/bible-text.sh %s)\n", path,
                path);
        return 1;
    }
    fseek(f, 0, SEEK_END);
    t->n = ftell(f);
    fseek(f, 0, SEEK_SET);
    t->ids = malloc((size_t)(t->n > 0 ? t->n : 1));
    if (!t->ids || fread(t->ids, 1, (size_t)t->n, f) != (size_t)t->n || t->n < 20 * T) {
        fprintf(stderr, "gpt: cannot read %s, or it is shorter than %lld bytes\n", path,
                (long long)(20 * T));
        fclose(f);
        return 1;
    }
    fclose(f);
    bool seen[256] = {false};
    for (int64_t i = 0; i < t->n; i++)
        seen[t->ids[i]] = true;
    t->vocab = 0;
    for (int c = 0; c < 256; c++)
        if (seen[c]) {
            t->code[c] = t->vocab;
            t->chars[t->vocab++] = (uint8_t)c;
        }
    for (int64_t i = 0; i < t->n; i++)
        t->ids[i] = (uint8_t)t->code[t->ids[i]];
    t->n_train = t->n * 9 / 10;
    return 0;
}

/* Windows starting at offs[0..b-1]: *x = text[o, o+T), *y = text[o+1, o+T+1]. */
static void windows(const text *t, const int64_t *offs, int64_t b, int64_t T, oar_tensor **x,
                    oar_tensor **y) {
    int64_t *buf = malloc((size_t)(2 * b * T) * sizeof *buf);
    for (int64_t i = 0; i < b; i++)
        for (int64_t j = 0; j < T; j++) {
            buf[i * T + j] = t->ids[offs[i] + j];
            buf[(b + i) * T + j] = t->ids[offs[i] + j + 1];
        }
    int64_t shape[2] = {b, T};
    *x = oar_tensor_from_data(buf, OAR_I64, 2, shape);
    *y = oar_tensor_from_data(buf + b * T, OAR_I64, 2, shape);
    free(buf);
}

static oar_tensor *loss_of(oar_module *m, oar_tensor *x, oar_tensor *y, int64_t vocab,
                           oar_reduction red) {
    int64_t flat[2] = {-1, vocab}, all = -1;
    oar_tensor *logits = oar_reshape(oar_module_forward(m, x), 2, flat);
    return oar_cross_entropy(logits, oar_reshape(y, 1, &all), NULL, -100, 0.0, red);
}

static double lr_at(int64_t step, int64_t steps, double lr_max) {
    int64_t warm = steps / 10 < 20 ? steps / 10 : 20;
    if (warm < 1) warm = 1;
    if (step < warm) return lr_max * (double)(step + 1) / (double)warm;
    double lo = lr_max / 10, span = (double)(steps - warm > 1 ? steps - warm : 1);
    return lo + 0.5 * (lr_max - lo) * (1 + cos(M_PI * (double)(step - warm) / span));
}

/* ---- sampling through the KV cache ------------------------------------- */

/* Appends n characters to out[0..*len) (room for them), one context at a
 * time: the cache fills, then the last half context is the next prompt. */
static int sample(oar_module *gpt, const text *t, int64_t T, char *out, size_t *len, int64_t n,
                  double *seconds) {
    oar_generate_options o = oar_generate_options_default();
    o.temperature = env_num("OAR_GPT_TEMPERATURE", 0.8);
    o.top_k = (int64_t)env_num("OAR_GPT_TOP_K", 0);
    o.top_p = env_num("OAR_GPT_TOP_P", 0.95);
    uint64_t seed = (uint64_t)env_num("OAR_GPT_SEED", 99);
    oar_kv_cache *cache = oar_gpt_kv_cache_new(gpt, 1, T);
    int64_t *prompt = malloc((size_t)T * sizeof *prompt), *gen = malloc((size_t)T * sizeof *gen);
    int st = cache && prompt && gen ? 0 : 1;
    double t0 = now();
    for (int64_t done = 0, round = 0; done < n && !st; round++) {
        int64_t plen = (int64_t)*len < T / 2 ? (int64_t)*len : T / 2;
        for (int64_t j = 0; j < plen; j++)
            prompt[j] = t->code[(uint8_t)out[*len - (size_t)plen + (size_t)j]];
        o.max_new_tokens = n - done < T - plen + 1 ? n - done : T - plen + 1;
        o.seed = seed + (uint64_t)round; /* a fresh stream each context */
        int64_t got = 0;
        st = oar_generate(oar_gpt_next_logits, gpt, cache, 1, (const int64_t *[]){prompt}, &plen,
                          &o, gen, &got);
        for (int64_t j = 0; j < got && !st; j++)
            out[(*len)++] = (char)t->chars[gen[j]];
        done += got;
    }
    *seconds = now() - t0;
    free(prompt);
    free(gen);
    oar_kv_cache_free(cache);
    return st;
}

int main(int argc, char **argv) {
    const char *path = argc > 1             ? argv[1]
                       : getenv("OAR_TEXT") ? getenv("OAR_TEXT")
                                            : "bible-kjv.txt";
    int64_t steps = (int64_t)env_num("OAR_EXAMPLE_STEPS", 300);
    int64_t batch = (int64_t)env_num("OAR_EXAMPLE_BATCH", 16);
    int64_t n_eval = (int64_t)env_num("OAR_EXAMPLE_EVAL", 128);
    int64_t n_sample = (int64_t)env_num("OAR_EXAMPLE_SAMPLE", 300);
    double lr_max = env_num("OAR_EXAMPLE_LR", 2e-3);
    int64_t layers = (int64_t)env_num("OAR_GPT_LAYERS", 6), d = (int64_t)env_num("OAR_GPT_D", 128);
    int64_t heads = (int64_t)env_num("OAR_GPT_HEADS", 4),
            T = (int64_t)env_num("OAR_GPT_CONTEXT", 64);
    if (steps < 1 || batch < 1 || n_eval < 1 || n_sample < 0 || T < 2) {
        fprintf(stderr, "gpt: steps, batch and eval must be positive, the context at least 2\n");
        return 1;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    text txt;
    if (text_load(&txt, path, T)) return 1;

    oar_manual_seed(0);
    oar_module *model = oar_gpt_new(&(oar_gpt_config){.vocab_size = txt.vocab,
                                                      .context_length = T,
                                                      .d_model = d,
                                                      .num_heads = heads,
                                                      .num_layers = layers});
    if (!model) return fail("building the model");
    int np = oar_module_parameters(model, NULL, 0);
    oar_tensor **params = malloc((size_t)np * sizeof *params);
    oar_module_parameters(model, params, np);
    oar_optimizer *opt =
        oar_adamw_new(np, params, &(oar_adam_options){.lr = lr_max, .weight_decay = 0.01});
    if (!opt) return fail("making the optimizer");
    printf("oar gpt: %lld characters (%d distinct), %lld layers, d %lld, %lld heads, %lld "
           "parameters, %lld steps of %lld x %lld\n",
           (long long)txt.n, txt.vocab, (long long)layers, (long long)d, (long long)heads,
           (long long)oar_module_num_elements(model), (long long)steps, (long long)batch,
           (long long)T);

    uint64_t rng = 1234;
    int64_t *offs = malloc((size_t)(batch > 32 ? batch : 32) * sizeof *offs);
    double t0 = now();
    for (int64_t step = 0; step < steps; step++) {
        oar_pool *pool = oar_pool_push();
        for (int64_t i = 0; i < batch; i++)
            offs[i] = (int64_t)(splitmix(&rng) % (uint64_t)(txt.n_train - T - 1));
        oar_tensor *x, *y;
        windows(&txt, offs, batch, T, &x, &y);
        oar_optim_set_lr(opt, lr_at(step, steps, lr_max));
        oar_tensor *loss = loss_of(model, x, y, txt.vocab, OAR_REDUCTION_MEAN);
        if (!loss || oar_backward(loss, NULL) || oar_clip_grad_norm(np, params, 1.0, NULL) ||
            oar_optim_step(opt)) {
            oar_pool_pop(pool);
            return fail("training step");
        }
        oar_optim_zero_grad(opt);
        double l = oar_tensor_item(loss);
        oar_pool_pop(pool);
        if (step % 50 == 0 || step == steps - 1)
            printf("step %lld/%lld loss %.4f (%.0f ms/step)\n", (long long)(step + 1),
                   (long long)steps, l, (now() - t0) / (double)(step + 1) * 1e3);
    }
    double train_s = now() - t0;

    /* validation: n_eval evenly spaced windows of the held-out tenth */
    oar_module_train(model, false);
    oar_no_grad_push();
    int64_t stride = (txt.n - txt.n_train - T - 1) / n_eval;
    double total = 0;
    for (int64_t k = 0; k < n_eval; k += 32) {
        int64_t b = n_eval - k < 32 ? n_eval - k : 32;
        for (int64_t j = 0; j < b; j++)
            offs[j] = txt.n_train + (k + j) * stride;
        oar_pool *pool = oar_pool_push();
        oar_tensor *x, *y;
        windows(&txt, offs, b, T, &x, &y);
        total += oar_tensor_item(loss_of(model, x, y, txt.vocab, OAR_REDUCTION_SUM));
        oar_pool_pop(pool);
    }
    oar_no_grad_pop();
    double val = total / (double)(n_eval * T);

    const char *prompt = "And God said";
    size_t len = strlen(prompt);
    char *out = malloc(len + (size_t)n_sample + 1);
    memcpy(out, prompt, len);
    double sample_s = 0;
    if (sample(model, &txt, T, out, &len, n_sample, &sample_s)) return fail("sampling");
    out[len] = 0;
    printf("sample:\n%s\n", out);
    printf("oar sampling %lld characters in %.2f s (%.0f tokens/s, KV cache)\n",
           (long long)n_sample, sample_s, sample_s > 0 ? (double)n_sample / sample_s : 0.0);
    printf("oar training %.1f s (%.0f ms/step)\n", train_s, train_s / (double)steps * 1e3);
    printf("validation loss: %.4f nats/char\n", val);

    free(out);
    free(offs);
    free(params);
    free(txt.ids);
    oar_optim_free(opt);
    oar_module_free(model);
    return 0;
}

/* A character-level Transformer language model trained on a text file
 * (the King James Bible: bash scripts/bible-text.sh bible-kjv.txt).
 *
 *     ./build/char_lm bible-kjv.txt
 *
 * Model: token and learned position embeddings (d 128), 4 pre-norm
 * Transformer encoder layers (4 heads, feed-forward 512, GELU, causal
 * self-attention), a final LayerNorm and a linear head over the characters;
 * context 64. PyTorch's default initialisation. Training: AdamW (weight
 * decay 0.01), linear warm-up then cosine decay to a tenth, gradient
 * clipping at 1, random windows from the first 90% of the text, drawn by
 * splitmix64 from seed 1234. Validation: evenly spaced windows of the last
 * 10%, loss in nats per character. Then it prints a sample.
 *
 * examples/ref/char_lm.py is the same program in PyTorch (same windows in
 * the same order, same schedule), for comparing the validation loss.
 *
 * Text: argv[1], else $OAR_TEXT, else bible-kjv.txt. Environment:
 * OAR_EXAMPLE_STEPS (300), OAR_EXAMPLE_BATCH (16), OAR_EXAMPLE_EVAL
 * (validation windows, 128), OAR_EXAMPLE_SAMPLE (characters to generate,
 * 300), OAR_EXAMPLE_LR (2e-3), OAR_EXAMPLE_AUTOCAST (bf16: the forward
 * passes and losses, training and validation, run under bf16 autocast,
 * include/oar/amp.h; bench/amp.sh compares it with f32). */
#include <oar/amp.h>
#include <oar/oar.h>
#include <oar/nn.h>
#include <oar/optim.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { D = 128, HEADS = 4, LAYERS = 4, FF = 512, T = 64 };

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int fail(const char *what) {
    fprintf(stderr, "char_lm: %s: %s\n", what, oar_last_error());
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

/* ---- the model: a user-defined module with five children ---------------- */

/* idx [B, L] (i64, L <= T) -> logits [B, L, vocab] */
static oar_tensor *char_lm_forward(oar_module *m, oar_tensor *idx) {
    int64_t L = oar_tensor_dim(idx, 1);
    oar_tensor *pos = oar_arange(0, (double)L, 1, OAR_I64);
    oar_tensor *x = oar_add(oar_module_forward(oar_module_child(m, "tok"), idx),
                            oar_module_forward(oar_module_child(m, "pos"), pos));
    x = oar_module_forward(oar_module_child(m, "layers"), x); /* causal layers */
    x = oar_module_forward(oar_module_child(m, "norm"), x);
    return oar_module_forward(oar_module_child(m, "head"), x);
}

static oar_module *char_lm_new(int64_t vocab) {
    oar_module *m = oar_module_new("CharLM", char_lm_forward, NULL, NULL);
    oar_module *layers = oar_sequential_new(0, NULL);
    for (int i = 0; i < LAYERS; i++)
        oar_sequential_append(layers,
                              oar_transformer_encoder_layer_new(
                                  D, HEADS,
                                  &(oar_transformer_options){.dim_feedforward = FF,
                                                             .activation = OAR_ACTIVATION_GELU,
                                                             .norm_first = true,
                                                             .causal = true}));
    int64_t d = D;
    /* the parent takes each child, freeing it if adding fails */
    if (!m || oar_module_add_child(m, "tok", oar_embedding_new(vocab, D)) ||
        oar_module_add_child(m, "pos", oar_embedding_new(T, D)) ||
        oar_module_add_child(m, "layers", layers) ||
        oar_module_add_child(m, "norm", oar_layer_norm_new(1, &d, 1e-5, true)) ||
        oar_module_add_child(m, "head", oar_linear_new(D, vocab, true))) {
        oar_module_free(m);
        return NULL;
    }
    return m;
}

/* ---- data -------------------------------------------------------------- */

typedef struct {
    int64_t n, n_train;
    uint8_t *ids; /* the text as vocabulary indices */
    int vocab;
    uint8_t chars[256]; /* index -> byte */
    int code[256];      /* byte -> index */
} text;

static int text_load(text *t, const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "char_lm: cannot open %s (make it with: bash scripts/bible-text.sh %s)\n",
                path, path);
        return 1;
    }
    fseek(f, 0, SEEK_END);
    t->n = ftell(f);
    fseek(f, 0, SEEK_SET);
    t->ids = malloc((size_t)(t->n > 0 ? t->n : 1));
    if (!t->ids || fread(t->ids, 1, (size_t)t->n, f) != (size_t)t->n || t->n < 20 * T) {
        fprintf(stderr, "char_lm: cannot read %s, or it is shorter than %d bytes\n", path, 20 * T);
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
static void windows(const text *t, const int64_t *offs, int64_t b, oar_tensor **x, oar_tensor **y) {
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

/* OAR_EXAMPLE_AUTOCAST: the autocast dtype, or OAR_F32 (none). */
static oar_dtype autocast = OAR_F32;

/* Summed cross entropy of the model on [B, T] windows (under autocast when
 * asked: the loss comes out in f32 by autocast's list). */
static oar_tensor *loss_of(oar_module *m, oar_tensor *x, oar_tensor *y, int64_t vocab,
                           oar_reduction red) {
    int64_t flat[2] = {-1, vocab}, all = -1;
    if (autocast != OAR_F32 && oar_autocast_push(autocast)) return NULL;
    oar_tensor *logits = oar_reshape(oar_module_forward(m, x), 2, flat);
    oar_tensor *loss = oar_cross_entropy(logits, oar_reshape(y, 1, &all), NULL, -100, 0.0, red);
    if (autocast != OAR_F32) oar_autocast_pop();
    return loss;
}

static double lr_at(int64_t step, int64_t steps, double lr_max) {
    int64_t warm = steps / 10 < 20 ? steps / 10 : 20;
    if (warm < 1) warm = 1;
    if (step < warm) return lr_max * (double)(step + 1) / (double)warm;
    double lo = lr_max / 10, span = (double)(steps - warm > 1 ? steps - warm : 1);
    return lo + 0.5 * (lr_max - lo) * (1 + cos(M_PI * (double)(step - warm) / span));
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
    if (steps < 1 || batch < 1 || n_eval < 1 || n_sample < 0) {
        fprintf(stderr, "char_lm: steps, batch and eval must be positive\n");
        return 1;
    }
    const char *ac = getenv("OAR_EXAMPLE_AUTOCAST");
    if (ac && *ac) {
        if (strcmp(ac, "bf16") && strcmp(ac, "f16")) {
            fprintf(stderr, "char_lm: OAR_EXAMPLE_AUTOCAST is bf16 or f16, not %s\n", ac);
            return 1;
        }
        autocast = strcmp(ac, "bf16") ? OAR_F16 : OAR_BF16;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    text txt;
    if (text_load(&txt, path)) return 1;

    oar_manual_seed(0);
    oar_module *model = char_lm_new(txt.vocab);
    if (!model) return fail("building the model");
    oar_tensor *params[128];
    int np = oar_module_parameters(model, params, 128);
    oar_optimizer *opt =
        oar_adamw_new(np, params, &(oar_adam_options){.lr = lr_max, .weight_decay = 0.01});
    if (!opt) return fail("making the optimizer");
    printf("oar char_lm: %lld characters (%d distinct), %lld parameters, %lld steps of %lld x "
           "%d%s%s\n",
           (long long)txt.n, txt.vocab, (long long)oar_module_num_elements(model), (long long)steps,
           (long long)batch, T, autocast != OAR_F32 ? ", autocast " : "",
           autocast != OAR_F32 ? oar_dtype_name(autocast) : "");

    uint64_t rng = 1234;
    int64_t *offs = malloc((size_t)(batch > 32 ? batch : 32) * sizeof *offs);
    double t0 = now();
    for (int64_t step = 0; step < steps; step++) {
        oar_pool *pool = oar_pool_push();
        for (int64_t i = 0; i < batch; i++)
            offs[i] = (int64_t)(splitmix(&rng) % (uint64_t)(txt.n_train - T - 1));
        oar_tensor *x, *y;
        windows(&txt, offs, batch, &x, &y);
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
        windows(&txt, offs, b, &x, &y);
        total += oar_tensor_item(loss_of(model, x, y, txt.vocab, OAR_REDUCTION_SUM));
        oar_pool_pop(pool);
    }
    double val = total / (double)(n_eval * T);

    /* a sample: temperature 0.8, from the prompt */
    const char *prompt = "And God said";
    size_t plen = strlen(prompt), len = plen;
    char *out = malloc(plen + (size_t)n_sample + 1);
    memcpy(out, prompt, plen);
    uint64_t srng = 99;
    int64_t ctx[T];
    float *p = malloc((size_t)txt.vocab * sizeof *p);
    for (int64_t s = 0; s < n_sample; s++) {
        int64_t L = len < T ? (int64_t)len : T, shape[2] = {1, L};
        for (int64_t j = 0; j < L; j++)
            ctx[j] = txt.code[(uint8_t)out[len - (size_t)L + (size_t)j]];
        oar_pool *pool = oar_pool_push();
        oar_tensor *logits =
            oar_module_forward(model, oar_tensor_from_data(ctx, OAR_I64, 2, shape));
        oar_tensor *last = oar_slice(oar_slice(logits, 1, L - 1, L, 1), 0, 0, 1, 1);
        oar_tensor *probs = oar_softmax(oar_div_scalar(last, 0.8), -1);
        if (!probs || oar_tensor_to_host(probs, p, (size_t)txt.vocab * sizeof *p)) {
            oar_pool_pop(pool);
            return fail("sampling");
        }
        oar_pool_pop(pool);
        double u = (double)(splitmix(&srng) >> 11) / 9007199254740992.0, acc = p[0];
        int i = 0;
        while (acc <= u && i + 1 < txt.vocab)
            acc += p[++i];
        out[len++] = (char)txt.chars[i];
    }
    out[len] = 0;
    oar_no_grad_pop();
    printf("sample:\n%s\n", out);
    printf("oar training %.1f s (%.0f ms/step)\n", train_s, train_s / (double)steps * 1e3);
    printf("validation loss: %.4f nats/char\n", val);

    free(p);
    free(out);
    free(offs);
    free(txt.ids);
    oar_optim_free(opt);
    oar_module_free(model);
    return 0;
}

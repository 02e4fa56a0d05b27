/* A character-level LSTM language model trained on a text file (the King
 * James Bible: bash scripts/bible-text.sh bible-kjv.txt) by truncated
 * backpropagation through time.
 *
 *     ./build/lstm_lm bible-kjv.txt
 *
 * Model: an embedding of the characters (dim 64), a 2-layer LSTM of
 * hidden size 256 (batch first), a linear head over the characters;
 * PyTorch's default initialisation.
 *
 * Training (truncated BPTT): the first 90% of the text is cut into BATCH
 * contiguous streams; each step reads the next T = 64 characters of every
 * stream, starting from the LSTM state the previous step ended with
 * (detached, so gradients stop at the window's start). Adam (lr 2e-3),
 * linear warm-up over the first 5% of the steps then cosine decay to a
 * tenth, gradient clipping at 1. Validation: 32 contiguous streams of the
 * last 10% of EVAL characters each, read T at a time with the state carried
 * (from zeros), loss in nats per character. Then a sample, temperature 0.8,
 * from the prompt "And God said".
 *
 * examples/ref/lstm_lm.py is the same program in PyTorch (same streams,
 * same schedule), for comparing the validation loss.
 *
 * Text: argv[1], else $OAR_TEXT, else bible-kjv.txt. Environment:
 * OAR_EXAMPLE_STEPS (600), OAR_EXAMPLE_BATCH (32), OAR_EXAMPLE_EVAL
 * (characters per validation stream, 512), OAR_EXAMPLE_SAMPLE (characters
 * to generate, 300). The last line is "validation loss: X nats/char". */
#include <oar/oar.h>
#include <oar/nn.h>
#include <oar/optim.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { EMB = 64, HIDDEN = 256, LAYERS = 2, T = 64, EVAL_STREAMS = 32 };

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int fail(const char *what) {
    fprintf(stderr, "lstm_lm: %s: %s\n", what, oar_last_error());
    return 1;
}

static double env_num(const char *name, double def) {
    const char *v = getenv(name);
    return v && *v ? atof(v) : def;
}

/* splitmix64: the same stream as the PyTorch twin draws (for sampling). */
static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* ---- the model: a module grouping three children ------------------------- */

static oar_module *lstm_lm_new(int64_t vocab) {
    oar_module *m = oar_module_new("LSTMLM", NULL, NULL, NULL);
    /* the parent takes each child, freeing it if adding fails */
    if (!m || oar_module_add_child(m, "embed", oar_embedding_new(vocab, EMB)) ||
        oar_module_add_child(
            m, "lstm",
            oar_lstm_new(EMB, HIDDEN,
                         &(oar_rnn_options){.num_layers = LAYERS, .batch_first = true})) ||
        oar_module_add_child(m, "head", oar_linear_new(HIDDEN, vocab, true))) {
        oar_module_free(m);
        return NULL;
    }
    return m;
}

/* idx [B, L] (i64) from the states (*h, *c) (NULL: zeros) -> logits [B, L,
 * vocab]; *h and *c become the states after the last step, detached from
 * the graph and retained (the old ones released), so they outlive the
 * step's pool. On failure NULL, states unchanged. */
static oar_tensor *lstm_lm_step(oar_module *m, oar_tensor *idx, oar_tensor **h, oar_tensor **c) {
    oar_tensor *hn = NULL, *cn = NULL;
    oar_tensor *emb = oar_module_forward(oar_module_child(m, "embed"), idx);
    oar_tensor *out = oar_rnn_forward(oar_module_child(m, "lstm"), emb, *h, *c, NULL, &hn, &cn);
    oar_tensor *logits = oar_module_forward(oar_module_child(m, "head"), out);
    oar_tensor *hd = oar_detach(hn), *cd = oar_detach(cn);
    if (!logits || !hd || !cd) return NULL;
    oar_tensor_release(*h);
    oar_tensor_release(*c);
    *h = oar_tensor_retain(hd);
    *c = oar_tensor_retain(cd);
    return logits;
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
        fprintf(stderr, "lstm_lm: cannot open %s (make it with: bash scripts/bible-text.sh %s)\n",
                path, path);
        return 1;
    }
    fseek(f, 0, SEEK_END);
    t->n = ftell(f);
    fseek(f, 0, SEEK_SET);
    t->ids = malloc((size_t)(t->n > 0 ? t->n : 1));
    if (!t->ids || fread(t->ids, 1, (size_t)t->n, f) != (size_t)t->n || t->n < 100 * T) {
        fprintf(stderr, "lstm_lm: cannot read %s, or it is shorter than %d bytes\n", path, 100 * T);
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

/* Stream b reads text[starts[b] + pos, + T): *x, and *y one character on. */
static void chunk(const text *t, const int64_t *starts, int64_t b, int64_t pos, oar_tensor **x,
                  oar_tensor **y) {
    int64_t *buf = malloc((size_t)(2 * b * T) * sizeof *buf);
    for (int64_t i = 0; i < b; i++)
        for (int64_t j = 0; j < T; j++) {
            buf[i * T + j] = t->ids[starts[i] + pos + j];
            buf[(b + i) * T + j] = t->ids[starts[i] + pos + j + 1];
        }
    int64_t shape[2] = {b, T};
    *x = oar_tensor_from_data(buf, OAR_I64, 2, shape);
    *y = oar_tensor_from_data(buf + b * T, OAR_I64, 2, shape);
    free(buf);
}

/* Cross entropy of logits [B, T, vocab] against y [B, T]. */
static oar_tensor *loss_of(oar_tensor *logits, oar_tensor *y, int64_t vocab, oar_reduction red) {
    int64_t flat[2] = {-1, vocab}, all = -1;
    return oar_cross_entropy(oar_reshape(logits, 2, flat), oar_reshape(y, 1, &all), NULL, -100, 0.0,
                             red);
}

static double lr_at(int64_t step, int64_t steps, double lr_max) {
    int64_t warm = steps / 20 > 1 ? steps / 20 : 1;
    if (step < warm) return lr_max * (double)(step + 1) / (double)warm;
    double lo = lr_max / 10, span = (double)(steps - warm > 1 ? steps - warm : 1);
    return lo + 0.5 * (lr_max - lo) * (1 + cos(M_PI * (double)(step - warm) / span));
}

int main(int argc, char **argv) {
    const char *path = argc > 1             ? argv[1]
                       : getenv("OAR_TEXT") ? getenv("OAR_TEXT")
                                            : "bible-kjv.txt";
    int64_t steps = (int64_t)env_num("OAR_EXAMPLE_STEPS", 600);
    int64_t batch = (int64_t)env_num("OAR_EXAMPLE_BATCH", 32);
    int64_t eval_len = (int64_t)env_num("OAR_EXAMPLE_EVAL", 512) / T * T;
    int64_t n_sample = (int64_t)env_num("OAR_EXAMPLE_SAMPLE", 300);
    const double lr_max = 2e-3;
    if (steps < 1 || batch < 1 || eval_len < T || n_sample < 0) {
        fprintf(stderr, "lstm_lm: steps and batch must be positive, eval at least %d\n", T);
        return 1;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    text txt;
    if (text_load(&txt, path)) return 1;
    int64_t stream_len = txt.n_train / batch, val_stride = (txt.n - txt.n_train) / EVAL_STREAMS;
    if (steps * T + 1 > stream_len || eval_len + 1 > val_stride) {
        fprintf(stderr, "lstm_lm: the text is too short for %lld steps of %lld streams\n",
                (long long)steps, (long long)batch);
        free(txt.ids);
        return 1;
    }

    oar_manual_seed(0);
    oar_module *model = lstm_lm_new(txt.vocab);
    if (!model) return fail("building the model");
    oar_tensor *params[32];
    int np = oar_module_parameters(model, params, 32);
    oar_optimizer *opt = oar_adam_new(np, params, &(oar_adam_options){.lr = lr_max});
    if (!opt) return fail("making the optimizer");
    printf("oar lstm_lm: %lld characters (%d distinct), %lld parameters, %lld steps of %lld x "
           "%d\n",
           (long long)txt.n, txt.vocab, (long long)oar_module_num_elements(model), (long long)steps,
           (long long)batch, T);

    int64_t *starts =
        malloc((size_t)(batch > EVAL_STREAMS ? batch : EVAL_STREAMS) * sizeof *starts);
    for (int64_t b = 0; b < batch; b++)
        starts[b] = b * stream_len;
    oar_tensor *h = NULL, *c = NULL; /* the state carried from window to window */
    double t0 = now();
    for (int64_t step = 0; step < steps; step++) {
        oar_pool *pool = oar_pool_push();
        oar_tensor *x, *y;
        chunk(&txt, starts, batch, step * T, &x, &y);
        oar_optim_set_lr(opt, lr_at(step, steps, lr_max));
        oar_tensor *logits = lstm_lm_step(model, x, &h, &c);
        oar_tensor *loss = loss_of(logits, y, txt.vocab, OAR_REDUCTION_MEAN);
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

    /* validation: EVAL_STREAMS streams of the held-out tenth, state carried */
    oar_module_train(model, false);
    oar_no_grad_push();
    oar_tensor_release(h);
    oar_tensor_release(c);
    h = c = NULL;
    for (int64_t s = 0; s < EVAL_STREAMS; s++)
        starts[s] = txt.n_train + s * val_stride;
    double total = 0;
    for (int64_t pos = 0; pos < eval_len; pos += T) {
        oar_pool *pool = oar_pool_push();
        oar_tensor *x, *y;
        chunk(&txt, starts, EVAL_STREAMS, pos, &x, &y);
        oar_tensor *sum = loss_of(lstm_lm_step(model, x, &h, &c), y, txt.vocab, OAR_REDUCTION_SUM);
        if (!sum) return fail("validation");
        total += oar_tensor_item(sum);
        oar_pool_pop(pool);
    }
    double val = total / (double)(EVAL_STREAMS * eval_len);

    /* a sample: temperature 0.8; the prompt primes the state, then one
     * character at a time with the state carried */
    const char *prompt = "And God said";
    size_t plen = strlen(prompt), len = plen;
    char *out = malloc(plen + (size_t)n_sample + 1);
    memcpy(out, prompt, plen);
    oar_tensor_release(h);
    oar_tensor_release(c);
    h = c = NULL;
    uint64_t srng = 99;
    float *p = malloc((size_t)txt.vocab * sizeof *p);
    int64_t ctx[64];
    int64_t feed = (int64_t)plen; /* characters to feed next: the prompt, then one */
    for (int64_t s = 0; s < n_sample; s++) {
        int64_t shape[2] = {1, feed};
        for (int64_t j = 0; j < feed; j++)
            ctx[j] = txt.code[(uint8_t)out[len - (size_t)feed + (size_t)j]];
        oar_pool *pool = oar_pool_push();
        oar_tensor *logits =
            lstm_lm_step(model, oar_tensor_from_data(ctx, OAR_I64, 2, shape), &h, &c);
        oar_tensor *last = oar_slice(logits, 1, feed - 1, feed, 1);
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
        feed = 1;
    }
    out[len] = 0;
    oar_no_grad_pop();
    printf("sample:\n%s\n", out);
    printf("oar training %.1f s (%.0f ms/step)\n", train_s, train_s / (double)steps * 1e3);
    printf("validation loss: %.4f nats/char\n", val);

    oar_tensor_release(h);
    oar_tensor_release(c);
    free(p);
    free(out);
    free(starts);
    free(txt.ids);
    oar_optim_free(opt);
    oar_module_free(model);
    return 0;
}

/* A character-level Transformer language model's training step under
 * AMP bf16 autocast (include/oar/amp.h) on cuda:0, with no op on the CPU:
 * the model of examples/char_lm.c written with oar's functions (token and
 * position embeddings, pre-norm layers of causal multi-head attention and
 * a GELU feed-forward, a final LayerNorm, a linear head, cross entropy
 * with class indices; AdamW and gradient clipping at 1), its forward pass
 * and loss inside oar_autocast_push(OAR_BF16): matmuls in bf16 (cuBLAS,
 * Tensor Cores, f32 accumulation), softmax, layer_norm and the loss in f32.
 *
 * Two parts:
 * - agreement: a small model (d 32, 2 heads, 2 layers, context 16, batch
 *   4) trained 6 steps on cuda:0 and on the CPU from the same seed: every
 *   op of forward, backward, clipping and AdamW on the device
 *   (oar_device_fallback_count 0), the losses the CPU's within bf16's
 *   rounding, and falling;
 * - speed (not with --small): the model at d 768, 12 heads, 6 layers,
 *   context 256, batch 32 (OAR_CHAR_LM_DIMS="d,heads,layers,context,batch"
 *   sets another) trained 3 warm-up and 10 timed steps on cuda:0 alone, no
 *   fallback and a falling loss; the last line gives tokens/s and MFU:
 *   model FLOPs per step (3 x the forward matmuls, attention's two
 *   included, as llm.c and PaLM count them) / median step time / the
 *   device's dense bf16 peak, from a table by the name the device gives
 *   (OAR_PEAK_BF16_TFLOPS overrides it; an unknown name takes the
 *   H100/H200 SXM figure, 989.4 TFLOP/s, and says so).
 *
 * [--plugins DIR] [--small]. Skipped (77) where there is no cuda:0, unless
 * OAR_REQUIRE_CUDA is set (scripts/gpu-check.sh) or --plugins is given:
 * then a missing cuda:0 fails. CTest's test_cuda_char_lm_fake_cuda runs
 * --small on the fake cuda plugin (the real plugin's host code over CPU
 * loops: what it claims covers the step; the device arithmetic is not
 * proven there). */
#include "test.h"

#include <oar/amp.h>
#include <oar/optim.h>
#include <time.h>

typedef struct {
    int64_t d, heads, layers, ctx, batch, ff, vocab;
} config;

enum { P_LN1_W, P_LN1_B, P_QKV_W, P_QKV_B, P_O_W, P_O_B, P_LN2_W, P_LN2_B, P_FF1_W, P_FF1_B, P_FF2_W, P_FF2_B, P_PER_LAYER };
#define MAX_LAYERS 16
#define MAX_PARAMS (4 + 2 + P_PER_LAYER * MAX_LAYERS)

/* the text the windows are drawn from (a fixed one: the test needs no file) */
static const char text[] =
    "In the beginning God created the heaven and the earth. And the earth was without form, and void; and "
    "darkness was upon the face of the deep. And the Spirit of God moved upon the face of the waters. And God "
    "said, Let there be light: and there was light. And God saw the light, that it was good: and God divided "
    "the light from the darkness. And God called the light Day, and the darkness he called Night. And the "
    "evening and the morning were the first day. And God said, Let there be a firmament in the midst of the "
    "waters, and let it divide the waters from the waters. And God made the firmament, and divided the waters "
    "which were under the firmament from the waters which were above the firmament: and it was so.";
static int code[256], vocab;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* a parameter on d: normal * scale, or filled with value where scale is 0 */
static oar_tensor *param(oar_device *d, int nd, int64_t a, int64_t b, double scale, double value) {
    int64_t shape[2] = {a, b};
    oar_tensor *t = scale != 0 ? oar_mul_scalar(oar_randn(OAR_F32, nd, shape), scale)
                               : oar_full_on(OAR_F32, nd, shape, value, NULL);
    t = oar_tensor_retain(oar_tensor_to(t, d));
    oar_tensor_set_requires_grad(t, true);
    return t;
}

/* the parameters in a fixed order (the CPU and device runs draw the same values) */
static int make_params(oar_device *d, const config *c, oar_tensor **p) {
    int n = 0;
    const double s = 0.02, so = 0.02 / sqrt(2.0 * (double)c->layers); /* GPT-2's residual scaling */
    p[n++] = param(d, 2, c->vocab, c->d, s, 0); /* token embedding */
    p[n++] = param(d, 2, c->ctx, c->d, s, 0);   /* position embedding */
    for (int64_t l = 0; l < c->layers; l++) {
        p[n++] = param(d, 1, c->d, 0, 0, 1), p[n++] = param(d, 1, c->d, 0, 0, 0);
        p[n++] = param(d, 2, c->d, 3 * c->d, s, 0), p[n++] = param(d, 1, 3 * c->d, 0, 0, 0);
        p[n++] = param(d, 2, c->d, c->d, so, 0), p[n++] = param(d, 1, c->d, 0, 0, 0);
        p[n++] = param(d, 1, c->d, 0, 0, 1), p[n++] = param(d, 1, c->d, 0, 0, 0);
        p[n++] = param(d, 2, c->d, c->ff, s, 0), p[n++] = param(d, 1, c->ff, 0, 0, 0);
        p[n++] = param(d, 2, c->ff, c->d, so, 0), p[n++] = param(d, 1, c->d, 0, 0, 0);
    }
    p[n++] = param(d, 1, c->d, 0, 0, 1), p[n++] = param(d, 1, c->d, 0, 0, 0); /* final norm */
    p[n++] = param(d, 2, c->d, c->vocab, s, 0), p[n++] = param(d, 1, c->vocab, 0, 0, 0); /* head */
    return n;
}

/* x [B, T, D] -> [B, H, T, D/H] */
static oar_tensor *heads_of(oar_tensor *x, const config *c) {
    int64_t s[4] = {c->batch, c->ctx, c->heads, c->d / c->heads}, perm[4] = {0, 2, 1, 3};
    return oar_permute(oar_reshape(x, 4, s), perm);
}

/* idx [B, T] (i64) -> mean cross entropy against y [B, T], under bf16 autocast */
static oar_tensor *loss_of(const config *c, oar_tensor *const *p, oar_tensor *idx, oar_tensor *y, oar_tensor *pos,
                           oar_tensor *causal) {
    if (oar_autocast_push(OAR_BF16)) return NULL;
    const int64_t D = c->d;
    oar_tensor *h = oar_add(oar_embedding(p[0], idx), oar_embedding(p[1], pos));
    for (int64_t l = 0; l < c->layers; l++) {
        oar_tensor *const *w = p + 2 + P_PER_LAYER * l;
        oar_tensor *a = oar_layer_norm(h, 1, w[P_LN1_W], w[P_LN1_B], 1e-5);
        oar_tensor *qkv = oar_add(oar_matmul(a, w[P_QKV_W]), w[P_QKV_B]);
        oar_tensor *q = heads_of(oar_slice(qkv, 2, 0, D, 1), c), *k = heads_of(oar_slice(qkv, 2, D, 2 * D, 1), c);
        oar_tensor *v = heads_of(oar_slice(qkv, 2, 2 * D, 3 * D, 1), c);
        int64_t perm[4] = {0, 2, 1, 3}, flat[3] = {c->batch, c->ctx, D};
        oar_tensor *att = oar_reshape(oar_permute(oar_scaled_dot_product_attention(q, k, v, causal, 0, false, 0), perm), 3, flat);
        h = oar_add(h, oar_add(oar_matmul(att, w[P_O_W]), w[P_O_B]));
        oar_tensor *f = oar_layer_norm(h, 1, w[P_LN2_W], w[P_LN2_B], 1e-5);
        f = oar_gelu(oar_add(oar_matmul(f, w[P_FF1_W]), w[P_FF1_B]), false);
        h = oar_add(h, oar_add(oar_matmul(f, w[P_FF2_W]), w[P_FF2_B]));
    }
    oar_tensor *const *e = p + 2 + P_PER_LAYER * c->layers;
    h = oar_layer_norm(h, 1, e[0], e[1], 1e-5);
    oar_tensor *logits = oar_add(oar_matmul(h, e[2]), e[3]);
    int64_t flat[2] = {-1, c->vocab}, all = -1;
    oar_tensor *loss = oar_cross_entropy(oar_reshape(logits, 2, flat), oar_reshape(y, 1, &all), NULL, -100, 0.0,
                                         OAR_REDUCTION_MEAN);
    oar_autocast_pop();
    return loss;
}

/* Trains `steps` steps from seed 7 on d: losses[steps], median step ms of
 * the steps after `warm`; the device's fallbacks in *fallbacks. */
static void train(oar_device *d, const config *c, int steps, int warm, double *losses, double *step_ms,
                  int64_t *fallbacks) {
    oar_pool *outer = oar_pool_push();
    oar_manual_seed(7);
    oar_tensor *p[MAX_PARAMS];
    int np = make_params(d, c, p);
    oar_optimizer *opt = oar_adamw_new(np, p, &(oar_adam_options){.lr = 3e-3, .weight_decay = 0.01});
    CHECK(opt != NULL);
    oar_tensor *pos = oar_tensor_retain(oar_tensor_to(oar_arange(0, (double)c->ctx, 1, OAR_I64), d));
    /* the causal mask, made once on the device: is_causal would make it on
     * the CPU each call, and a CPU mask with device scores is refused
     * (src/ops/nn.c's oar_scaled_dot_product_attention) */
    int64_t tt[2] = {c->ctx, c->ctx};
    oar_tensor *causal = oar_tensor_retain(oar_tensor_to(oar_tril(oar_ones(OAR_BOOL, 2, tt), 0), d));
    const int64_t n_text = (int64_t)sizeof text - 1, tb = c->batch * c->ctx;
    int64_t *buf = malloc(sizeof *buf * (size_t)(2 * tb));
    double *times = malloc(sizeof *times * (size_t)steps);
    uint64_t rng = 1234;
    oar_device_fallback_reset();
    for (int step = 0; step < steps && opt && buf && times; step++) {
        for (int64_t b = 0; b < c->batch; b++) { /* windows: x = text[o, o+T), y = text[o+1, o+T+1) */
            int64_t o = (int64_t)(splitmix(&rng) % (uint64_t)(n_text - c->ctx - 1));
            for (int64_t j = 0; j < c->ctx; j++) {
                buf[b * c->ctx + j] = code[(unsigned char)text[o + j]];
                buf[tb + b * c->ctx + j] = code[(unsigned char)text[o + j + 1]];
            }
        }
        double t0 = now();
        oar_pool *pp = oar_pool_push();
        int64_t shape[2] = {c->batch, c->ctx};
        oar_tensor *x = oar_tensor_to(oar_tensor_from_data(buf, OAR_I64, 2, shape), d);
        oar_tensor *y = oar_tensor_to(oar_tensor_from_data(buf + tb, OAR_I64, 2, shape), d);
        oar_tensor *loss = loss_of(c, p, x, y, pos, causal);
        CHECK(loss && oar_tensor_device(loss) == d && oar_tensor_dtype(loss) == OAR_F32);
        CHECK(oar_backward(loss, NULL) == 0);
        CHECK(oar_clip_grad_norm(np, p, 1.0, NULL) == 0);
        CHECK(oar_optim_step(opt) == 0);
        oar_optim_zero_grad(opt);
        losses[step] = loss ? oar_tensor_item(loss) : NAN; /* (waits for the device) */
        oar_pool_pop(pp);
        CHECK(oar_device_synchronize(d) == 0);
        times[step] = now() - t0;
    }
    *fallbacks = oar_device_fallback_count();
    if (*fallbacks) fprintf(stderr, "%s: %lld ops ran on the CPU instead\n", oar_device_name(d), (long long)*fallbacks);
    if (times && steps > warm) {
        qsort(times + warm, (size_t)(steps - warm), sizeof *times, cmp_d);
        *step_ms = 1e3 * times[warm + (steps - warm) / 2];
    }
    free(buf);
    free(times);
    for (int i = 0; i < np; i++) oar_tensor_release(p[i]);
    oar_tensor_release(pos);
    oar_tensor_release(causal);
    oar_optim_free(opt);
    oar_pool_pop(outer);
}

/* model FLOPs of one training step: 3 x the forward's matmul FLOPs (the
 * backward does two products per forward one), attention's two included */
static double step_flops(const config *c) {
    const double B = (double)c->batch, T = (double)c->ctx, D = (double)c->d, F = (double)c->ff;
    double per_layer = 2 * B * T * D * 3 * D /* qkv */ + 2 * 2 * B * T * T * D /* scores, weights x v */ +
                       2 * B * T * D * D /* out */ + 2 * 2 * B * T * D * F /* feed-forward */;
    return 3 * ((double)c->layers * per_layer + 2 * B * T * D * (double)c->vocab /* head */);
}

/* The dense bf16 Tensor Core peak of a device by its name, TFLOP/s (NVIDIA's
 * data sheets, without sparsity); *known false where the name is not in the
 * table (the H100/H200 SXM figure is taken then). */
static double bf16_peak(const char *name, bool *known) {
    static const struct {
        const char *part;
        double tflops;
    } table[] = {{"H100 PCIe", 756.0}, {"H100 NVL", 835.0}, {"GH200", 989.4}, {"H200", 989.4},
                 {"H100", 989.4},      {"H800", 989.4},     {"A100", 312.0},  {"A800", 312.0},
                 {"L40S", 362.1},      {"L4", 121.0},       {"A10", 125.0},   {"B200", 2250.0}};
    for (size_t i = 0; i < sizeof table / sizeof *table; i++)
        if (strstr(name, table[i].part)) return *known = true, table[i].tflops;
    return *known = false, 989.4;
}

int main(int argc, char **argv) {
    const char *dir = NULL;
    bool small = false, usage = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--plugins") && i + 1 < argc) dir = argv[++i];
        else if (!strcmp(argv[i], "--small")) small = true;
        else usage = true;
    }
    if (usage) {
        fprintf(stderr, "usage: %s [--plugins DIR] [--small]\n", argv[0]);
        return 2;
    }
    const bool given = dir != NULL;
#ifdef OAR_PLUGIN_BUILD_DIR
    if (!dir) dir = OAR_PLUGIN_BUILD_DIR;
#endif
    const char *req = getenv("OAR_REQUIRE_CUDA");
    bool required = given || (req && *req && strcmp(req, "0"));
    if (dir) {
        setenv("OAR_PLUGIN_PATH", dir, 1);
        setenv("OAR_PLUGIN_NO_INSTALL_DIR", "1", 1);
    }
    oar_device *d = oar_device_get("cuda:0");
    if (!d) {
        char report[4096];
        oar_device_report(report, sizeof report);
        printf("%s: no cuda:0 (%s)\n%s", required ? "FAIL" : "SKIP", oar_last_error(), report);
        return required ? 1 : 77;
    }
    oar_clear_error();
    bool seen[256] = {false};
    for (const char *s = text; *s; s++) seen[(unsigned char)*s] = true;
    for (int ch = 0; ch < 256; ch++)
        if (seen[ch]) code[ch] = vocab++;

    /* agreement with the CPU, small */
    enum { STEPS = 6 };
    const config sc = {.d = 32, .heads = 2, .layers = 2, .ctx = 16, .batch = 4, .ff = 128, .vocab = vocab};
    double lc[STEPS], ld[STEPS], ms = 0;
    int64_t fb_cpu = 0, fb_dev = 0;
    test_current = "char lm (small) cpu";
    train(oar_device_cpu(), &sc, STEPS, 1, lc, &ms, &fb_cpu);
    test_current = "char lm (small) device";
    train(d, &sc, STEPS, 1, ld, &ms, &fb_dev);
    CHECK(fb_dev == 0);
    for (int i = 0; i < STEPS; i++) CHECK_NEAR(ld[i], lc[i], 2e-2 * (1 + fabs(lc[i]))); /* bf16 products */
    CHECK(ld[STEPS - 1] < ld[0] - 0.1);
    printf("char lm (small, AMP bf16): loss %.4f -> %.4f on %s (cpu %.4f -> %.4f), %lld fallbacks\n", ld[0],
           ld[STEPS - 1], oar_device_name(d), lc[0], lc[STEPS - 1], (long long)fb_dev);
    if (small) return test_summary();

    /* speed, at a size where the GPU has work */
    config c = {.d = 768, .heads = 12, .layers = 6, .ctx = 256, .batch = 32, .vocab = vocab};
    const char *dims = getenv("OAR_CHAR_LM_DIMS");
    long long v[5];
    if (dims && *dims) {
        if (sscanf(dims, "%lld,%lld,%lld,%lld,%lld", &v[0], &v[1], &v[2], &v[3], &v[4]) != 5 || v[0] < 1 ||
            v[1] < 1 || v[0] % v[1] || v[2] < 1 || v[2] > MAX_LAYERS || v[3] < 2 || v[3] >= (long long)sizeof text / 2 ||
            v[4] < 1) {
            fprintf(stderr, "OAR_CHAR_LM_DIMS is d,heads,layers,context,batch (heads dividing d, 1 to %d layers, "
                            "context 2 to %zu), not '%s'\n", MAX_LAYERS, sizeof text / 2 - 1, dims);
            return 2;
        }
        c.d = v[0], c.heads = v[1], c.layers = v[2], c.ctx = v[3], c.batch = v[4];
    }
    c.ff = 4 * c.d;
    enum { WARM = 3, TIMED = 10 };
    double l[WARM + TIMED];
    int64_t fb = 0;
    test_current = "char lm (speed) device";
    train(d, &c, WARM + TIMED, WARM, l, &ms, &fb);
    CHECK(fb == 0);
    CHECK(isfinite(l[WARM + TIMED - 1]) && l[WARM + TIMED - 1] < l[0]);
    oar_device_props props = {{0}, 0};
    oar_device_get_props(d, &props);
    bool known;
    double peak = bf16_peak(props.name, &known);
    const char *env_peak = getenv("OAR_PEAK_BF16_TFLOPS");
    const char *peak_src = known ? "the table's figure for this device" : "assumed: the name is not in the table";
    if (env_peak && *env_peak && atof(env_peak) > 0) peak = atof(env_peak), peak_src = "OAR_PEAK_BF16_TFLOPS";
    const double flops = step_flops(&c), tokens = (double)(c.batch * c.ctx);
    int failed = test_summary();
    printf("char lm step (AMP bf16; d %lld, %lld heads, %lld layers, context %lld, batch %lld): loss %.3f -> %.3f, "
           "%lld fallbacks; median step %.2f ms, %.0f tokens/s, %.3g TFLOP/step, %.1f TFLOP/s, MFU %.1f%% of "
           "%.1f TFLOP/s bf16 (%s: %s)\n",
           (long long)c.d, (long long)c.heads, (long long)c.layers, (long long)c.ctx, (long long)c.batch, l[0],
           l[WARM + TIMED - 1], (long long)fb, ms, tokens / (ms * 1e-3), flops * 1e-12, flops / (ms * 1e-3) * 1e-12,
           100 * flops / (ms * 1e-3) / (peak * 1e12), peak, props.name, peak_src);
    return failed;
}

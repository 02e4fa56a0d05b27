/* Decoding speed with a KV cache: a GPT (oar_gpt_new: vocabulary 256, 4
 * layers, d 256, 4 heads, feed-forward 1024, context 256) generating 96
 * tokens greedily after a 32-token prompt, at batch 1 and batch 8, through
 * oar_generate. Prints the prompt's prefill (one call) and the time per
 * generated token of the single-token steps after it (a batch-8 step makes
 * 8 tokens), medians of 5 runs. The weights go
 * to a safetensors file ($OAR_BENCH_GENERATE_WEIGHTS, default
 * /tmp/oar-bench-generate.safetensors; bench/run.sh sets it to a
 * temporary folder it removes) that the peer,
 * bench/peer/generate.py, loads into the same model with a KV cache of its
 * own, so both decode the same network; the tokens of each are printed as
 * a checksum line (equal unless rounding flips an argmax).
 *
 *     bash bench/run.sh generate */
#include <oar/generate.h>
#include <oar/oar.h>

#include "bench_median.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

enum { VOCAB = 256, LAYERS = 4, D = 256, HEADS = 4, CTX = 256, PROMPT = 32, NEW = 96, RUNS = 5 };

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int fail(const char *what) {
    fprintf(stderr, "bench_generate: %s: %s\n", what, oar_last_error());
    return 1;
}

/* Median seconds of RUNS generations of `max_new` tokens for `batch`
 * copies of the prompt; writes row 0's tokens to first (NEW entries). */
static double time_generate(oar_module *gpt, int64_t batch, int64_t max_new, int64_t *first) {
    int64_t prompt[PROMPT], lens[8], out[8 * NEW];
    const int64_t *prompts[8];
    for (int i = 0; i < PROMPT; i++)
        prompt[i] = (i * 37 + 11) % VOCAB;
    for (int i = 0; i < batch; i++)
        prompts[i] = prompt, lens[i] = PROMPT;
    oar_generate_options o = oar_generate_options_default();
    o.max_new_tokens = max_new;
    o.temperature = 0;
    oar_kv_cache *cache = oar_gpt_kv_cache_new(gpt, batch, PROMPT + NEW);
    double t[RUNS];
    for (int r = 0; r < RUNS; r++) {
        double t0 = now();
        if (!cache ||
            oar_generate(oar_gpt_next_logits, gpt, cache, batch, prompts, lens, &o, out, NULL)) {
            oar_kv_cache_free(cache);
            return -1;
        }
        t[r] = now() - t0;
    }
    for (int i = 0; first && i < max_new; i++)
        first[i] = out[i];
    oar_kv_cache_free(cache);
    return bench_median(t, RUNS);
}

int main(void) {
    const char *path = getenv("OAR_BENCH_GENERATE_WEIGHTS");
    if (!path || !*path) path = "/tmp/oar-bench-generate.safetensors";
    oar_manual_seed(0);
    oar_module *gpt = oar_gpt_new(&(oar_gpt_config){.vocab_size = VOCAB,
                                                    .context_length = CTX,
                                                    .d_model = D,
                                                    .num_heads = HEADS,
                                                    .num_layers = LAYERS});
    if (!gpt) return fail("building the model");
    oar_module_train(gpt, false);
    if (oar_module_save(gpt, path)) return fail("saving the weights");
    int64_t tokens[NEW];
    double pre1 = time_generate(gpt, 1, 1, NULL), pre8 = time_generate(gpt, 8, 1, NULL);
    double b1 = time_generate(gpt, 1, NEW, tokens), b8 = time_generate(gpt, 8, NEW, NULL);
    if (pre1 < 0 || pre8 < 0 || b1 < 0 || b8 < 0) return fail("generating");
    /* one prefill, then NEW - 1 single-token steps: the decode figures
     * leave the prefill out */
    printf("oar prefill_b1_32 %.3f ms\n", pre1 * 1e3);
    printf("oar decode_b1_per_token %.3f ms\n", (b1 - pre1) / (NEW - 1) * 1e3);
    printf("oar decode_b8_per_token %.3f ms\n", (b8 - pre8) / (8.0 * (NEW - 1)) * 1e3);
    printf("# oar tokens/s: batch 1 %.0f, batch 8 %.0f (prefill included)\n", NEW / b1,
           8.0 * NEW / b8);
    printf("# oar tokens");
    for (int i = 0; i < 16; i++)
        printf(" %lld", (long long)tokens[i]);
    printf("\n");
    oar_module_free(gpt);
    return 0;
}

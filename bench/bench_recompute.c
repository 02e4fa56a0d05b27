/* Recompute (oar_checkpoint) on a small char-LM stack: token and position
 * embeddings (d 128), 4 pre-norm causal Transformer encoder layers (4
 * heads, feed-forward 512, GELU), LayerNorm, a linear head over 65
 * characters; batch 16, context 64, f32, random tokens. One training step
 * is forward, cross-entropy, backward (no optimizer). Figures: the peak of
 * tensor storage during a step above what is held before it
 * (oar_memory_stats) and the median step time, with each layer run plainly
 * and with each layer checkpointed; then their ratios. The checkpointed
 * gradients are checked against the plain ones (1e-5 relative) before
 * timing. Then the same in static mode: the step traced with and without
 * the checkpoints, backward appended on the graph (which recomputes each
 * segment), the training passes run; figures: the executor's planned
 * arena and the median step time. No PyTorch peer (a memory/time
 * trade-off of oar against itself).
 *
 *     ./build/bench_recompute [steps]            (default 20) */
#include <oar/oar.h>
#include <oar/graph.h>
#include <oar/nn.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

enum { D = 128, HEADS = 4, LAYERS = 4, FF = 512, T = 64, BATCH = 16, VOCAB = 65 };

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static oar_module *tok, *pos, *layer[LAYERS], *norm, *head;

static int layer_fn(void *ctx, int n_in, oar_tensor *const *in, int n_out, oar_tensor **out) {
    out[0] = oar_module_forward(ctx, in[0]);
    return out[0] ? 0 : -1;
}

/* One step; returns the loss value (NaN on failure). */
static double step(oar_tensor *idx, oar_tensor *target, bool ckpt) {
    oar_pool *p = oar_pool_push();
    oar_tensor *x = oar_add(oar_module_forward(tok, idx),
                            oar_module_forward(pos, oar_arange(0, T, 1, OAR_I64)));
    for (int l = 0; l < LAYERS && x; l++) {
        oar_tensor *y = NULL;
        if (ckpt ? oar_checkpoint(layer_fn, layer[l], 1, &x, 1, &y) : layer_fn(layer[l], 1, &x, 1, &y))
            y = NULL;
        x = y;
    }
    int64_t flat[2] = {BATCH * T, VOCAB};
    oar_tensor *logits = oar_reshape(oar_module_forward(head, oar_module_forward(norm, x)), 2, flat);
    oar_tensor *loss = oar_cross_entropy(logits, target, NULL, -100, 0.0, OAR_REDUCTION_MEAN);
    double v = NAN;
    if (loss && !oar_backward(loss, NULL)) v = oar_tensor_item(loss);
    oar_pool_pop(p);
    return v;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void zero_grads(oar_tensor **ps, int n) {
    for (int i = 0; i < n; i++) oar_tensor_zero_grad(ps[i]);
}

/* peak bytes above the start and median ms over `steps` steps */
static int measure(oar_tensor *idx, oar_tensor *target, oar_tensor **ps, int np, bool ckpt,
                   int steps, double *peak_mb, double *ms) {
    double *t = malloc(sizeof(double) * (size_t)steps);
    if (!t) return 1;
    zero_grads(ps, np);
    if (isnan(step(idx, target, ckpt))) return free(t), 1; /* warm-up */
    for (int s = 0; s < steps; s++) {
        zero_grads(ps, np);
        oar_memory_stats m;
        oar_memory_stats_get(&m);
        size_t base = m.bytes_in_use;
        oar_memory_reset_peak();
        double t0 = now();
        if (isnan(step(idx, target, ckpt))) return free(t), 1;
        t[s] = (now() - t0) * 1e3;
        oar_memory_stats_get(&m);
        *peak_mb = (double)(m.peak_bytes - base) / (1 << 20);
    }
    qsort(t, (size_t)steps, sizeof *t, cmp);
    *ms = t[steps / 2];
    free(t);
    return 0;
}

/* ---- static mode: the same step traced, backward appended on the graph ---- */

static bool trace_ckpt;

/* in: idx [BATCH, T], target [BATCH*T], then the parameters; out: the loss */
static int loss_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    oar_tensor *x = oar_add(oar_module_forward(tok, in[0]),
                            oar_module_forward(pos, oar_arange(0, T, 1, OAR_I64)));
    for (int l = 0; l < LAYERS && x; l++) {
        oar_tensor *y = NULL;
        if (trace_ckpt ? oar_checkpoint(layer_fn, layer[l], 1, &x, 1, &y) : layer_fn(layer[l], 1, &x, 1, &y))
            y = NULL;
        x = y;
    }
    int64_t flat[2] = {BATCH * T, VOCAB};
    oar_tensor *logits = oar_reshape(oar_module_forward(head, oar_module_forward(norm, x)), 2, flat);
    out[0] = oar_cross_entropy(logits, in[1], NULL, -100, 0.0, OAR_REDUCTION_MEAN);
    return out[0] ? 0 : -1;
}

/* Traces the step (checkpointed or not), appends its backward, runs the
 * training passes; the planned arena, the median step time, and copies of
 * the outputs (loss, then the gradients) into res[]. */
static int measure_static(oar_module *root, bool ckpt, oar_tensor *const *in, int np, int steps,
                          double *arena_mb, double *ms, oar_tensor **res) {
    trace_ckpt = ckpt;
    oar_graph_input_spec specs[2] = {{.name = "idx", .dtype = OAR_I64, .ndim = 2, .shape = {BATCH, T}},
                                     {.name = "target", .dtype = OAR_I64, .ndim = 1, .shape = {BATCH * T}}};
    oar_graph *g = oar_trace(loss_fn, NULL, 2, specs, 1,
                             &(oar_trace_options){.module = root, .params_as_inputs = true});
    int wrt[256];
    for (int k = 0; k < np; k++) wrt[k] = 2 + k;
    if (!g || oar_graph_append_backward(g, 0, np, wrt) < 0 || oar_graph_optimize(g, OAR_PASSES_TRAINING, 0)) {
        oar_graph_free(g);
        return 1;
    }
    oar_executor *ex = oar_executor_new(g);
    double *t = malloc(sizeof(double) * (size_t)steps);
    oar_tensor *out[257];
    int st = !ex || !t;
    for (int s = -1; s < steps && !st; s++) { /* s = -1: plans the arena */
        double t0 = now();
        st = oar_executor_run(ex, in, out);
        if (s >= 0) t[s] = (now() - t0) * 1e3;
    }
    if (!st) {
        qsort(t, (size_t)steps, sizeof *t, cmp);
        *ms = t[steps / 2];
        *arena_mb = (double)oar_executor_planned_bytes(ex) / (1 << 20);
        for (int j = 0; j <= np; j++) res[j] = oar_tensor_retain(oar_contiguous(out[j]));
    }
    free(t);
    oar_executor_free(ex);
    oar_graph_free(g);
    return st;
}

/* The largest |a - b| / max|a| over the pairs. */
static double worst_rel(oar_tensor **a, oar_tensor **b, int n) {
    double worst = 0;
    for (int i = 0; i < n; i++) {
        oar_pool *p = oar_pool_push();
        double den = oar_tensor_item(oar_amax(oar_abs(a[i]), 0, NULL, false));
        double num = oar_tensor_item(oar_amax(oar_abs(oar_sub(a[i], b[i])), 0, NULL, false));
        worst = fmax(worst, den > 0 ? num / den : num);
        oar_pool_pop(p);
    }
    return worst;
}

int main(int argc, char **argv) {
    int steps = argc > 1 ? atoi(argv[1]) : 20;
    if (steps < 1) steps = 1;
    oar_manual_seed(1234);
    int64_t d = D;
    tok = oar_embedding_new(VOCAB, D);
    pos = oar_embedding_new(T, D);
    norm = oar_layer_norm_new(1, &d, 1e-5, true);
    head = oar_linear_new(D, VOCAB, true);
    for (int l = 0; l < LAYERS; l++)
        layer[l] = oar_transformer_encoder_layer_new(
            D, HEADS, &(oar_transformer_options){.dim_feedforward = FF, .activation = OAR_ACTIVATION_GELU,
                                                  .norm_first = true, .causal = true});
    oar_module *mods[4 + LAYERS] = {tok, pos, norm, head};
    for (int l = 0; l < LAYERS; l++) mods[4 + l] = layer[l];
    oar_tensor *ps[256];
    int np = 0;
    for (int k = 0; k < 4 + LAYERS; k++) {
        if (!mods[k]) {
            fprintf(stderr, "bench_recompute: %s\n", oar_last_error());
            return 1;
        }
        int n = oar_module_parameters(mods[k], ps + np, 256 - np);
        if (n < 0 || np + n > 256) return 1;
        np += n;
    }
    int64_t s2[2] = {BATCH, T}, s1 = BATCH * T;
    oar_tensor *idx = oar_randint(0, VOCAB, OAR_I64, 2, s2);
    oar_tensor *target = oar_randint(0, VOCAB, OAR_I64, 1, &s1);

    /* the checkpointed gradients match the plain ones */
    zero_grads(ps, np);
    double l0 = step(idx, target, false);
    oar_tensor *g0[256];
    for (int i = 0; i < np; i++) g0[i] = oar_tensor_retain(oar_tensor_grad(ps[i]));
    zero_grads(ps, np);
    double l1 = step(idx, target, true);
    double worst = fabs(l0 - l1) / fabs(l0);
    for (int i = 0; i < np; i++) {
        oar_pool *p = oar_pool_push();
        oar_tensor *g1 = oar_tensor_grad(ps[i]);
        double den = oar_tensor_item(oar_amax(oar_abs(g0[i]), 0, NULL, false));
        double num = g1 ? oar_tensor_item(oar_amax(oar_abs(oar_sub(g0[i], g1)), 0, NULL, false)) : INFINITY;
        worst = fmax(worst, den > 0 ? num / den : num);
        oar_pool_pop(p);
        oar_tensor_release(g0[i]);
    }
    if (!(worst <= 1e-5)) {
        fprintf(stderr, "bench_recompute: checkpointed gradients differ (%g relative): %s\n", worst,
                oar_last_error());
        return 1;
    }

    double mb_plain = 0, ms_plain = 0, mb_ckpt = 0, ms_ckpt = 0;
    if (measure(idx, target, ps, np, false, steps, &mb_plain, &ms_plain) ||
        measure(idx, target, ps, np, true, steps, &mb_ckpt, &ms_ckpt)) {
        fprintf(stderr, "bench_recompute: %s\n", oar_last_error());
        return 1;
    }
    printf("oar recompute_grad_max_rel_diff %.3g ratio\n", worst);
    printf("oar charlm_step_peak_plain %.2f MiB\n", mb_plain);
    printf("oar charlm_step_peak_ckpt %.2f MiB\n", mb_ckpt);
    printf("oar charlm_step_peak_ratio %.3f ckpt/plain\n", mb_ckpt / mb_plain);
    printf("oar charlm_step_plain %.3f ms\n", ms_plain);
    printf("oar charlm_step_ckpt %.3f ms\n", ms_ckpt);
    printf("oar charlm_step_time_ratio %.3f ckpt/plain\n", ms_ckpt / ms_plain);

    /* static: the modules under one root, whose parameters become inputs */
    oar_module *root = oar_module_new("CharLM", NULL, NULL, NULL);
    char name[16];
    for (int k = 0; k < 4 + LAYERS; k++) {
        snprintf(name, sizeof name, "m%d", k);
        if (!root || oar_module_add_child(root, name, mods[k])) return 1;
    }
    oar_tensor *in[258] = {idx, target};
    int n = oar_module_parameters(root, in + 2, 256);
    if (n != np) return fprintf(stderr, "bench_recompute: %d parameters under the root, %d before\n", n, np), 1;
    oar_tensor *r0[257] = {0}, *r1[257] = {0};
    double arena_plain = 0, sms_plain = 0, arena_ckpt = 0, sms_ckpt = 0;
    if (measure_static(root, false, in, np, steps, &arena_plain, &sms_plain, r0) ||
        measure_static(root, true, in, np, steps, &arena_ckpt, &sms_ckpt, r1)) {
        fprintf(stderr, "bench_recompute: static: %s\n", oar_last_error());
        return 1;
    }
    double sworst = worst_rel(r0, r1, np + 1);
    for (int j = 0; j <= np; j++) {
        oar_tensor_release(r0[j]);
        oar_tensor_release(r1[j]);
    }
    if (!(sworst <= 1e-5)) {
        fprintf(stderr, "bench_recompute: static: checkpointed gradients differ (%g relative)\n", sworst);
        return 1;
    }
    printf("oar static_recompute_grad_max_rel_diff %.3g ratio\n", sworst);
    printf("oar charlm_static_arena_plain %.2f MiB\n", arena_plain);
    printf("oar charlm_static_arena_ckpt %.2f MiB\n", arena_ckpt);
    printf("oar charlm_static_arena_ratio %.3f ckpt/plain\n", arena_ckpt / arena_plain);
    printf("oar charlm_static_step_plain %.3f ms\n", sms_plain);
    printf("oar charlm_static_step_ckpt %.3f ms\n", sms_ckpt);
    printf("oar charlm_static_step_time_ratio %.3f ckpt/plain\n", sms_ckpt / sms_plain);
    zero_grads(ps, np);
    oar_module_free(root); /* and its children */
    return 0;
}

/* The planner, validated and simulated (docs/internals/plan.md, bench/RESULTS.md).
 *
 *   bench_plan scale
 *       GPT-3 175B (96 layers, d 12288, 96 heads, seq 2048) on simulated clusters of 64, 256
 *       and 1024 H200s (8 a node, NVLink inside, InfiniBand across), batch 1536; and on 1024
 *       A100s beside Megatron-LM's published configuration (Narayanan et al. 2021, table 1:
 *       175B on 1024 GPUs: tp 8, pp 16, dp 8, batch 1536, micro-batch 1). Times the planner.
 *
 *   mpirun -np N --oversubscribe bench_plan measure      (N = 2 or 4)
 *       Calibrates this machine (kernels and all-reduce, all ranks at once: the contention of
 *       an oversubscribed run is in the figures), then for two models (an MLP, a 2-layer
 *       transformer) runs a set of plans at N ranks: data parallel with ZeRO 0/1/2 and 1..8
 *       micro-batches (gradient accumulation), recompute (each child checkpointed), tensor
 *       parallel (the cost model's placements as oar_parallelize rules; dp x tp at 4),
 *       pipelines (1F1B, the cost model's stage split), and the planner's own choice;
 *       measures the step time (median of 5 after a warm-up) and prints predicted vs
 *       measured, Spearman's rho, the worst error and the chosen plan's gap to the best
 *       measured. Under each data-parallel plan it prints the measured parts of the step
 *       (forward+backward, gradient collectives, optimizer) beside the predicted terms, so
 *       a wrong prediction shows which term is wrong. BENCH_PLAN_MODEL=mlp or transformer
 *       runs one model only; BENCH_PLAN_ROUNDS repeats the measurement.
 *
 * Peer: none exists for a planner's prediction; the "peer figure" is the measured time of the
 * same plan in the same run, and the ratio is predicted / measured. */
#include <oar/oar.h>
#include <oar/plan.h>

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

/* ---- scale ------------------------------------------------------------------ */

static int scale(void) {
    oar_plan_transformer cfg = {.layers = 96, .d_model = 12288, .heads = 96, .seq = 2048, .vocab = 51200};
    oar_plan_model *m = oar_plan_model_transformer(&cfg);
    if (!m) return fprintf(stderr, "%s\n", oar_last_error()), 1;
    printf("GPT-3 175B: %.1fB parameters, %d layer records\n", oar_plan_model_params(m) / 1e9,
           oar_plan_model_num_layers(m));
    struct { const char *kind; int n; } runs[] = {{"h200", 64}, {"h200", 256}, {"h200", 1024}, {"a100", 1024}};
    int rc = 0;
    for (int i = 0; i < 4 && !rc; i++) {
        oar_cluster c;
        oar_cluster_preset(&c, runs[i].kind, runs[i].n);
        double t0 = now();
        oar_plan_result *r = oar_plan_parallel(m, &c, &(oar_plan_options){.global_batch = 1536, .runners_up = 3});
        double dt = now() - t0;
        if (!r) {
            fprintf(stderr, "%s x %d: %s\n", runs[i].kind, runs[i].n, oar_last_error());
            rc = 1;
            break;
        }
        oar_plan_estimate e;
        const oar_plan_config *k = oar_plan_result_config(r, 0, &e);
        /* Narayanan et al. 2021, eq. 3: 96 B s l h^2 (1 + s/6h + V/16lh) with recompute (4 passes), 72 without */
        double flops = 1536.0 * 2048 * 96 * 12288.0 * 12288.0 * (k->recompute ? 96 : 72) *
                       (1 + 2048 / (6.0 * 12288) + 51200 / (16.0 * 96 * 12288));
        printf("\n== %d x %s: planner %.3f s, %lld configurations; chosen dp %d tp %d pp %d zero %d micro-batches %d "
               "recompute %d: step %.2f s predicted, %.1f GiB/rank, %.0f TFLOP/s per GPU (model FLOPs, Megatron's "
               "formula)\n", runs[i].n, runs[i].kind, dt, (long long)oar_plan_result_evaluated(r), k->dp, k->tp, k->pp,
               k->zero, k->micro_batches, k->recompute, e.step_time, e.mem / (1 << 30),
               flops / e.step_time / runs[i].n / 1e12);
        oar_plan_result_print(r, stdout);
        oar_plan_result_free(r);
        if (!strcmp(runs[i].kind, "a100")) { /* Megatron-LM's own configuration, through the same model */
            oar_plan_config mg = {.dp = 8, .tp = 8, .pp = 16, .zero = 0, .micro_batches = 192, .recompute = 1};
            if (!oar_plan_estimate_config(m, &c, 1536, &mg, &e))
                printf("Megatron-LM's configuration (dp 8 tp 8 pp 16, 192 micro-batches of 1, recompute): step "
                       "%.2f s predicted, %.1f GiB/rank, fits %d, %.0f TFLOP/s per GPU predicted (published: 140, 44%% of peak)\n",
                       e.step_time, e.mem / (1 << 30), e.fits,
                       1536.0 * 2048 * 96 * 12288.0 * 12288.0 * 96 * (1 + 2048 / (6.0 * 12288) + 51200 / (16.0 * 96 * 12288)) /
                           e.step_time / 1024 / 1e12);
        }
    }
    oar_plan_model_free(m);
    return rc;
}

/* ---- measure ---------------------------------------------------------------- */

enum { MLP, TRANSFORMER };
#define STEPS 5
#define MAXP 24

static int n_children(int kind) { return kind == MLP ? 5 : 2; }

/* The model's top-level children, made alike on every rank (seeded). */
static void children_make(int kind, oar_module **child) {
    oar_manual_seed(7);
    if (kind == MLP) {
        child[0] = oar_linear_new(256, 1024, true);
        child[1] = oar_relu_new();
        child[2] = oar_linear_new(1024, 1024, true);
        child[3] = oar_relu_new();
        child[4] = oar_linear_new(1024, 256, true);
    } else {
        oar_transformer_options o = {.dim_feedforward = 512, .norm_first = true, .causal = true,
                                     .activation = OAR_ACTIVATION_GELU};
        child[0] = oar_transformer_encoder_layer_new(128, 4, &o);
        child[1] = oar_transformer_encoder_layer_new(128, 4, &o);
    }
}

static int64_t model_batch(int kind) { return kind == MLP ? 64 : 16; }
static int model_shape(int kind, int64_t *shape) {
    if (kind == MLP) return shape[0] = 64, shape[1] = 256, 2;
    return shape[0] = 16, shape[1] = 64, shape[2] = 128, 3;
}

/* sum((out - y)^2) / numel(y): the loss of every plan */
static oar_tensor *mse(oar_tensor *out, oar_tensor *y, void *ctx) {
    (void)ctx;
    return oar_mul_scalar(oar_sum(oar_square(oar_sub(out, y)), 0, NULL, false), 1.0 / (double)oar_tensor_numel(y));
}

/* A layer record's top-level child: the number its name starts with ("2", "1.self_attn"); -1 if none. */
static int layer_child(const char *name) {
    char *end;
    long v = strtol(name, &end, 10);
    return end == name || (*end && *end != '.') ? -1 : (int)v;
}

/* What the planner's layout asks of the modules: tensor-parallel rules (a column or row
 * placed layer's parameters) and each child's pipeline stage. 0, or -1 when the layout cannot
 * be run as modules (a stage boundary inside a child, a placement with no rule), with why. */
typedef struct run_layout {
    oar_parallel_rule rules[16];
    char pat[16][48];
    int n_rules;
    int child_stage[8];
} run_layout;

static int layout_for(const oar_plan_model *pm, const oar_cluster *c, int64_t B, const oar_plan_config *k, int kind,
                      run_layout *lo, char *why, size_t cap) {
    int n = oar_plan_model_num_layers(pm);
    const char *place[64];
    int stage[64];
    memset(lo, 0, sizeof *lo);
    for (int i = 0; i < 8; i++) lo->child_stage[i] = -1;
    if (n > 64 || oar_plan_estimate_layout(pm, c, B, k, n, place, stage))
        return snprintf(why, cap, "%s", oar_last_error()), -1;
    for (int i = 0; i < n; i++) {
        const char *name = oar_plan_model_layer(pm, i)->name;
        int ch = layer_child(name);
        if (ch < 0 || ch >= n_children(kind)) return snprintf(why, cap, "layer %s is no child", name), -1;
        if (lo->child_stage[ch] >= 0 && lo->child_stage[ch] != stage[i])
            return snprintf(why, cap, "the pipeline split falls inside child %d (at %s)", ch, name), -1;
        lo->child_stage[ch] = stage[i];
        bool col = !strcmp(place[i], "column"), row = !strcmp(place[i], "row");
        if (!col && !row && strcmp(place[i], "replicate") && strcmp(place[i], "shard"))
            return snprintf(why, cap, "layer %s: placement %s has no parallelize rule", name, place[i]), -1;
        if ((col || row) && lo->n_rules < 16) {
            snprintf(lo->pat[lo->n_rules], sizeof lo->pat[0], "%s.*", name);
            lo->rules[lo->n_rules] = (oar_parallel_rule){lo->pat[lo->n_rules],
                                                         col ? OAR_PARALLEL_COLWISE : OAR_PARALLEL_ROWWISE};
            lo->n_rules++;
        }
    }
    /* the first matching rule wins: the longest (most specific) patterns first */
    for (int i = 0; i < lo->n_rules; i++)
        for (int j = i + 1; j < lo->n_rules; j++)
            if (strlen(lo->pat[j]) > strlen(lo->pat[i])) {
                char tp[48];
                memcpy(tp, lo->pat[i], sizeof tp);
                memcpy(lo->pat[i], lo->pat[j], sizeof tp);
                memcpy(lo->pat[j], tp, sizeof tp);
                oar_parallel_style st = lo->rules[i].style;
                lo->rules[i].style = lo->rules[j].style, lo->rules[j].style = st;
            }
    for (int i = 0; i < lo->n_rules; i++) lo->rules[i].pattern = lo->pat[i];
    /* children no layer record names (parameterless: relu) follow the child before them */
    for (int ch = 0; ch < n_children(kind); ch++)
        if (lo->child_stage[ch] < 0) lo->child_stage[ch] = ch ? lo->child_stage[ch - 1] : 0;
    return 0;
}

/* The rules and the stage split as text ("0.* col, 2.* row", "stages 0 0 0 0 1"). */
static const char *layout_str(const oar_plan_config *k, const run_layout *lo, int kind, char *buf, size_t cap) {
    size_t at = 0;
    buf[0] = 0;
    for (int i = 0; k->tp > 1 && i < lo->n_rules && at < cap; i++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%s %s", i ? ", " : "", lo->pat[i],
                               lo->rules[i].style == OAR_PARALLEL_COLWISE ? "col" : "row");
    if (k->pp > 1 && at < cap) {
        at += (size_t)snprintf(buf + at, cap - at, "children's stages");
        for (int ch = 0; ch < n_children(kind) && at < cap; ch++)
            at += (size_t)snprintf(buf + at, cap - at, " %d", lo->child_stage[ch]);
    }
    return buf;
}

static double median(double *t, int n) {
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (t[j] < t[i]) { double tmp = t[i]; t[i] = t[j]; t[j] = tmp; }
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

/* Rank 0's value on every rank. */
static double from_rank0(double v) {
    int W = oar_dist_world_size();
    if (W == 1) return v;
    oar_mesh *wm = oar_mesh_create(1, (int64_t[]){W}, NULL, NULL);
    oar_tensor *t = oar_full(OAR_F64, 1, (int64_t[]){1}, oar_dist_rank() == 0 ? v : 0.0);
    oar_tensor *d = oar_dtensor_from_local(t, wm, (oar_placement[]){oar_partial(OAR_REDUCE_SUM)}, (int64_t[]){1});
    oar_tensor *r = oar_reshard(d, wm, (oar_placement[]){oar_replicate()});
    double out = oar_tensor_item(oar_dtensor_local(r));
    oar_tensor_release(r);
    oar_tensor_release(d);
    oar_tensor_release(t);
    oar_mesh_release(wm);
    return out;
}

static void fail(const char *what) {
    fprintf(stderr, "measure: %s: %s\n", what, oar_last_error());
    exit(1);
}

/* One pipeline plan (tp 1): stages of children as the layout says, 1F1B, data parallel over
 * mesh dim 0 when dp > 1. The median step time (rank 0's). */
static double measure_pipeline(int kind, const oar_plan_config *k, const run_layout *lo, oar_tensor *x,
                               oar_tensor *y, double *loss_out) {
    oar_mesh *mesh = k->dp > 1 ? oar_mesh_create(2, (int64_t[]){k->dp, k->pp}, NULL, NULL)
                               : oar_mesh_create(1, (int64_t[]){k->pp}, NULL, NULL);
    int axis = k->dp > 1 ? 1 : 0;
    oar_module *child[8], *stage_mod[8];
    children_make(kind, child);
    for (int s = 0; s < k->pp; s++) {
        oar_module *mine[8];
        int n = 0;
        for (int ch = 0; ch < n_children(kind); ch++)
            if (lo->child_stage[ch] == s) mine[n++] = child[ch];
        stage_mod[s] = oar_sequential_new(n, mine);
    }
    oar_pipeline *pl = oar_pipeline_new(k->pp, stage_mod, mesh, axis, k->micro_batches, OAR_PIPE_1F1B, mse, NULL);
    if (!pl) fail("pipeline");
    int me = oar_pipeline_stage(pl);
    oar_mesh *sm = oar_pipeline_stage_mesh(pl);
    if (sm && oar_parallelize(stage_mod[me], sm, 0, 0, NULL)) fail("parallelize stage");
    oar_tensor *p[64];
    int np = oar_module_parameters(stage_mod[me], p, 64);
    oar_optimizer *opt = oar_adam_new(np, p, &(oar_adam_options){.lr = 1e-3});
    oar_tensor *xs = x, *ys = y;
    if (sm) {
        xs = oar_shard_tensor(x, sm, (oar_placement[]){oar_shard(0)});
        ys = oar_shard_tensor(y, sm, (oar_placement[]){oar_shard(0)});
    }
    double t[STEPS + 1], loss = 0;
    for (int step = 0; step <= STEPS; step++) {
        oar_pool *pool = oar_pool_push();
        double t0 = now();
        if (oar_pipeline_step(pl, xs, ys, &loss) || oar_optim_step(opt)) fail("pipeline step");
        oar_optim_zero_grad(opt);
        t[step] = now() - t0;
        oar_pool_pop(pool);
    }
    if (sm) { /* (the stage's shards: made outside any pool) */
        oar_tensor_release(xs);
        oar_tensor_release(ys);
    }
    oar_optim_free(opt);
    oar_pipeline_free(pl);
    for (int s = 0; s < k->pp; s++) oar_module_free(stage_mod[s]);
    oar_mesh_release(mesh);
    *loss_out = loss;
    return from_rank0(median(t + 1, STEPS));
}

/* One plan's median step time at this world size (rank 0's figure on every rank): data
 * parallel (ZeRO, gradient accumulation), tensor parallel by the layout's rules, recompute by
 * checkpointing each child, or a pipeline. */
static double measure(int kind, const oar_plan_config *k, const run_layout *lo, double *loss_out, double *phases_out) {
    int64_t xs[3];
    int xnd = model_shape(kind, xs);
    oar_manual_seed(11);
    oar_tensor *x = oar_randn(OAR_F32, xnd, xs), *y = oar_randn(OAR_F32, xnd, xs);
    if (k->pp > 1) {
        double r = measure_pipeline(kind, k, lo, x, y, loss_out);
        phases_out[0] = phases_out[1] = phases_out[2] = NAN; /* (a pipeline's phases interleave) */
        oar_tensor_release(x);
        oar_tensor_release(y);
        return r;
    }
    oar_mesh *mesh = NULL;
    int tp_dim = 0;
    if (k->dp > 1 && k->tp > 1) mesh = oar_mesh_create(2, (int64_t[]){k->dp, k->tp}, NULL, NULL), tp_dim = 1;
    else if (k->dp * k->tp > 1) mesh = oar_mesh_create(1, (int64_t[]){k->dp * k->tp}, NULL, NULL);
    oar_module *child[8];
    children_make(kind, child);
    int nc = n_children(kind);
    oar_module *mod = oar_sequential_new(nc, child);
    if (mesh && oar_parallelize(mod, mesh, tp_dim, k->tp > 1 ? lo->n_rules : 0, lo->rules)) fail("parallelize");
    oar_tensor *p[64];
    int np = oar_module_parameters(mod, p, 64);
    oar_optimizer *opt = oar_adam_new(np, p, &(oar_adam_options){.lr = 1e-3});
    oar_zero *z = NULL;
    if (k->zero) {
        z = oar_zero_new(opt, mesh, 0, &(oar_zero_options){.stage = k->zero, .accum_steps = k->micro_batches});
        if (!z) fail("zero");
        oar_optim_free(opt);
        opt = NULL;
    }
    /* the batch: sharded over the data-parallel dim, replicated over the tensor-parallel one */
    oar_placement bp[2] = {k->dp > 1 ? oar_shard(0) : oar_replicate(), oar_replicate()};
    double t[STEPS + 1], loss = 0, ph[3][STEPS + 1]; /* phases: forward+backward, collectives, optimizer */
    int64_t mb = model_batch(kind) / k->micro_batches;
    for (int step = 0; step <= STEPS; step++) {
        oar_pool *pool = oar_pool_push();
        double t0 = now();
        ph[0][step] = ph[1][step] = ph[2][step] = 0;
        loss = 0;
        for (int a = 0; a < k->micro_batches; a++) {
            oar_tensor *xb = oar_slice(x, 0, a * mb, (a + 1) * mb, 1), *yb = oar_slice(y, 0, a * mb, (a + 1) * mb, 1);
            if (mesh && k->dp > 1) {
                xb = oar_shard_tensor(xb, mesh, bp);
                yb = oar_shard_tensor(yb, mesh, bp);
            }
            double ta = now();
            oar_tensor *h = xb;
            if (k->recompute)
                for (int i = 0; i < nc && h; i++) h = oar_module_checkpoint(child[i], h);
            else
                h = oar_module_forward(mod, h);
            oar_tensor *l = mse(h, yb, NULL);
            if (!l || oar_backward(l, NULL)) fail("step");
            loss += oar_tensor_item(oar_dtensor_mesh(l) ? oar_unshard(l) : l) / k->micro_batches;
            double tb = now();
            ph[0][step] += tb - ta;
            if (z && oar_zero_step(z) < 0) fail("zero step");
            ph[2][step] += now() - tb; /* ZeRO's step: its collectives and the optimizer together */
        }
        if (opt) {
            double tb = now();
            if (mesh && oar_dist_reduce_grads(np, p, 0) < 0) fail("reduce grads");
            double tc = now();
            if (oar_optim_step(opt)) fail("optim step");
            oar_optim_zero_grad(opt);
            ph[1][step] = tc - tb;
            ph[2][step] = now() - tc;
        }
        t[step] = now() - t0;
        oar_pool_pop(pool);
    }
    oar_tensor_release(x);
    oar_tensor_release(y);
    oar_zero_free(z);
    oar_optim_free(opt);
    oar_module_free(mod);
    if (mesh) oar_mesh_release(mesh);
    *loss_out = loss;
    for (int i = 0; i < 3; i++) phases_out[i] = from_rank0(median(ph[i] + 1, STEPS));
    return from_rank0(median(t + 1, STEPS));
}

/* Ranks with ties averaged, then Pearson on ranks. */
static double spearman(const double *a, const double *b, int n) {
    double ra[MAXP], rb[MAXP];
    const double *v[2] = {a, b};
    double *r[2] = {ra, rb};
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < n; i++) {
            double less = 0, eq = 0;
            for (int j = 0; j < n; j++) less += v[s][j] < v[s][i], eq += v[s][j] == v[s][i];
            r[s][i] = less + (eq + 1) / 2;
        }
    double ma = 0, mb = 0, sab = 0, saa = 0, sbb = 0;
    for (int i = 0; i < n; i++) ma += ra[i] / n, mb += rb[i] / n;
    for (int i = 0; i < n; i++)
        sab += (ra[i] - ma) * (rb[i] - mb), saa += (ra[i] - ma) * (ra[i] - ma), sbb += (rb[i] - mb) * (rb[i] - mb);
    return sab / sqrt(saa * sbb);
}

static bool same_plan(const oar_plan_config *a, const oar_plan_config *b) {
    return a->dp == b->dp && a->tp == b->tp && a->pp == b->pp && a->zero == b->zero &&
           a->micro_batches == b->micro_batches && a->recompute == b->recompute;
}

/* The plans measured at W ranks: data parallel with ZeRO 0/1/2 and 1..8 micro-batches,
 * recompute, tensor parallel (and dp x tp at 4), pipelines; those the cost model rejects
 * (a batch that does not divide) are dropped by the caller. */
static int plan_set(int W, oar_plan_config *p) {
    int n = 0;
    for (int mb = 1; mb <= 8; mb *= 2) p[n++] = (oar_plan_config){W, 1, 1, 0, mb, 0};
    p[n++] = (oar_plan_config){W, 1, 1, 1, 1, 0};
    p[n++] = (oar_plan_config){W, 1, 1, 2, 1, 0};
    p[n++] = (oar_plan_config){W, 1, 1, 2, 4, 0};
    p[n++] = (oar_plan_config){W, 1, 1, 0, 1, 1};
    p[n++] = (oar_plan_config){W, 1, 1, 0, 4, 1};
    p[n++] = (oar_plan_config){1, W, 1, 0, 1, 0};
    p[n++] = (oar_plan_config){1, W, 1, 0, 4, 0};
    if (W == 4) p[n++] = (oar_plan_config){2, 2, 1, 0, 1, 0};
    p[n++] = (oar_plan_config){W / 2, 1, 2, 0, 2, 0};
    p[n++] = (oar_plan_config){W / 2, 1, 2, 0, 8, 0};
    return n;
}

static const char *plan_str(const oar_plan_config *k, char *buf, size_t cap) {
    snprintf(buf, cap, "dp %d tp %d pp %d zero %d mb %d%s", k->dp, k->tp, k->pp, k->zero, k->micro_batches,
             k->recompute ? " rc" : "");
    return buf;
}

static void print_calib(const oar_plan_calib *cal, const char *what) {
    printf("%s: GEMM %.3g FLOP/s (384^3), elementwise %.3g B/s, op %.3g s, Adam %.3g s per element, all-reduce "
           "alpha %.3g s beta %.3g s/B, sync wait %.3g s after %.3g s; training GEMMs by smallest dim:", what,
           cal->matmul_flops, cal->ew_bw, cal->op_overhead, cal->optim_time, cal->alpha, cal->beta, cal->sync,
           cal->sync_phase);
    for (int i = 0; i < OAR_PLAN_GEMM_CLASSES; i++) printf(" %g: %.3g", oar_plan_gemm_dims[i], cal->gemm_rate[i]);
    printf("; at a 1024 x 1024 weight:");
    for (int i = 0; i < OAR_PLAN_GEMM_CLASSES; i++)
        printf(" %g: %.3g", oar_plan_gemm_dims[i], cal->gemm_rate_wide[i]);
    printf("; op families (B/s):");
    for (int i = 0; i < OAR_PLAN_OP_FAMILIES; i++) printf(" %s %.3g", oar_plan_op_family_names[i], cal->family_bw[i]);
    printf("; past the %.3g B cache: elementwise %.3g B/s, Adam %.3g s per element, wide GEMMs:", cal->cache_bytes,
           cal->ew_bw_cold, cal->optim_time_cold);
    for (int i = 0; i < OAR_PLAN_GEMM_CLASSES; i++)
        printf(" %g: %.3g", oar_plan_gemm_dims[i], cal->gemm_rate_cold[i]);
    printf("\n");
}

/* The mean of n calibrations, field by field. */
static oar_plan_calib calib_mean(const oar_plan_calib *c, int n) {
    oar_plan_calib m = {.ranks = c[0].ranks};
    for (int r = 0; r < n; r++) {
        m.matmul_flops += c[r].matmul_flops / n, m.ew_bw += c[r].ew_bw / n, m.op_overhead += c[r].op_overhead / n;
        m.alpha += c[r].alpha / n, m.beta += c[r].beta / n, m.optim_time += c[r].optim_time / n;
        m.sync += c[r].sync / n, m.sync_phase += c[r].sync_phase / n;
        for (int i = 0; i < OAR_PLAN_GEMM_CLASSES; i++)
            m.gemm_rate[i] += c[r].gemm_rate[i] / n, m.gemm_rate_wide[i] += c[r].gemm_rate_wide[i] / n;
        for (int i = 0; i < OAR_PLAN_OP_FAMILIES; i++) m.family_bw[i] += c[r].family_bw[i] / n;
        m.cache_bytes += c[r].cache_bytes / n, m.ew_bw_cold += c[r].ew_bw_cold / n;
        m.optim_time_cold += c[r].optim_time_cold / n;
        for (int i = 0; i < OAR_PLAN_GEMM_CLASSES; i++) m.gemm_rate_cold[i] += c[r].gemm_rate_cold[i] / n;
    }
    return m;
}

#define MAXR 9

/* For each model: the plan set and their layouts (from a first calibration), then ROUNDS
 * rounds of (calibrate, measure every plan), so that a load that comes and goes on a shared
 * machine falls on the calibration and on every plan alike; the prediction uses the rounds'
 * mean calibration, the measured time is the median over rounds of each round's median step. */
static int measure_all(int argc, char **argv) {
    if (oar_dist_init(&argc, &argv)) return fprintf(stderr, "%s\n", oar_last_error()), 1;
    int W = oar_dist_world_size(), me = oar_dist_rank();
    const char *only = getenv("BENCH_PLAN_MODEL"); /* "mlp" or "transformer": one model only */
    const char *re = getenv("BENCH_PLAN_ROUNDS");
    int R = re ? atoi(re) : 3;
    if (R < 1 || R > MAXR) return fprintf(stderr, "BENCH_PLAN_ROUNDS: 1..%d\n", MAXR), 1;
    if (W < 2) return fprintf(stderr, "measure: run under mpirun with 2 or more ranks\n"), 1;
    for (int kind = MLP; kind <= TRANSFORMER; kind++) {
        if (only && strcmp(only, kind == MLP ? "mlp" : "transformer")) continue;
        /* the planner's model: the traced forward at the global batch */
        oar_module *child[8];
        children_make(kind, child);
        oar_module *mod = oar_sequential_new(n_children(kind), child);
        oar_graph_input_spec spec = {.name = "x", .dtype = OAR_F32};
        spec.ndim = model_shape(kind, spec.shape);
        oar_graph *g = oar_trace_module(mod, &spec);
        oar_plan_model *pm = g ? oar_plan_model_from_graph(g, 0) : NULL;
        oar_graph_free(g);
        oar_module_free(mod);
        if (!pm) return fprintf(stderr, "model: %s\n", oar_last_error()), 1;
        const int64_t B = model_batch(kind);
        oar_plan_calib cal[MAXR + 1];
        oar_cluster c;
        if (oar_plan_calibrate(&cal[MAXR]) || oar_cluster_from_calib(&c, &cal[MAXR], W, 8e9))
            return fprintf(stderr, "calibrate: %s\n", oar_last_error()), 1;
        /* the plan set, with the planner's choice among what oar runs (up to 8 micro-batches) */
        oar_plan_result *r = oar_plan_parallel(pm, &c, &(oar_plan_options){.global_batch = B, .runnable_only = true,
                                                                            .max_micro_batches = 8});
        if (!r) return fprintf(stderr, "plan: %s\n", oar_last_error()), 1;
        oar_plan_config want[MAXP], plans[MAXP];
        run_layout lay[MAXP];
        int nw = plan_set(W, want), n = 0;
        want[nw++] = *oar_plan_result_config(r, 0, NULL);
        oar_plan_result_free(r);
        char buf[96], why[256];
        for (int i = 0; i < nw; i++) {
            bool dup = false;
            for (int j = 0; j < n && !dup; j++) dup = same_plan(&plans[j], &want[i]);
            if (dup) continue;
            oar_plan_estimate e;
            if (oar_plan_estimate_config(pm, &c, B, &want[i], &e)) {
                if (me == 0) printf("  (%s not measured: %s)\n", plan_str(&want[i], buf, sizeof buf), oar_last_error());
                continue;
            }
            if (layout_for(pm, &c, B, &want[i], kind, &lay[n], why, sizeof why)) {
                if (me == 0) printf("  (%s not measured: %s)\n", plan_str(&want[i], buf, sizeof buf), why);
                continue;
            }
            plans[n++] = want[i];
        }
        double mr[MAXR][MAXP], mph[3][MAXR][MAXP], loss[MAXP], ph3[3];
        for (int round = 0; round < R; round++) {
            if (oar_plan_calibrate(&cal[round])) return fprintf(stderr, "calibrate: %s\n", oar_last_error()), 1;
            for (int i = 0; i < n; i++) {
                mr[round][i] = measure(kind, &plans[i], &lay[i], &loss[i], ph3);
                for (int q = 0; q < 3; q++) mph[q][round][i] = ph3[q];
            }
        }
        /* predictions from the rounds' mean calibration; the planner's choice again from it */
        oar_plan_calib mean = calib_mean(cal, R);
        if (oar_cluster_from_calib(&c, &mean, W, 8e9)) return fprintf(stderr, "%s\n", oar_last_error()), 1;
        r = oar_plan_parallel(pm, &c, &(oar_plan_options){.global_batch = B, .runnable_only = true,
                                                         .max_micro_batches = 8});
        if (!r) return fprintf(stderr, "plan: %s\n", oar_last_error()), 1;
        const oar_plan_config *ch = oar_plan_result_config(r, 0, NULL);
        /* a choice the first calibration did not make: measured now, R times (not interleaved) */
        bool have = false;
        for (int i = 0; i < n && !have; i++) have = same_plan(ch, &plans[i]);
        if (!have && n < MAXP && !layout_for(pm, &c, B, ch, kind, &lay[n], why, sizeof why)) {
            plans[n] = *ch;
            for (int round = 0; round < R; round++) {
                mr[round][n] = measure(kind, &plans[n], &lay[n], &loss[n], ph3);
                for (int q = 0; q < 3; q++) mph[q][round][n] = ph3[q];
            }
            if (me == 0) printf("  (the mean calibration's choice %s was measured after the rounds)\n",
                                plan_str(ch, buf, sizeof buf));
            n++;
        }
        double pred[MAXP], meas[MAXP], warm[MAXP]; /* warm: the prediction without the cache term */
        oar_plan_estimate est[MAXP];
        oar_cluster cw = c;
        cw.cache_bytes = 0;
        bool moved[MAXP];
        int chosen = -1;
        for (int i = 0; i < n; i++) {
            if (oar_plan_estimate_config(pm, &c, B, &plans[i], &est[i]))
                return fprintf(stderr, "%s\n", oar_last_error()), 1;
            pred[i] = est[i].step_time;
            oar_plan_estimate ew;
            if (oar_plan_estimate_config(pm, &cw, B, &plans[i], &ew)) return fprintf(stderr, "%s\n", oar_last_error()), 1;
            warm[i] = ew.step_time;
            double v[MAXR];
            for (int k = 0; k < R; k++) v[k] = mr[k][i];
            meas[i] = median(v, R);
            run_layout now_lo;
            moved[i] = layout_for(pm, &c, B, &plans[i], kind, &now_lo, why, sizeof why) ||
                       memcmp(now_lo.child_stage, lay[i].child_stage, sizeof now_lo.child_stage) ||
                       now_lo.n_rules != lay[i].n_rules;
            for (int k = 0; !moved[i] && k < now_lo.n_rules; k++)
                moved[i] = strcmp(now_lo.pat[k], lay[i].pat[k]) || now_lo.rules[k].style != lay[i].rules[k].style;
            if (same_plan(ch, &plans[i])) chosen = i;
        }
        if (me == 0) {
            printf("\n%s at %d ranks: %d plans, %d rounds\n", kind == MLP ? "MLP 256-1024-1024-256, batch 64" :
                   "2 transformer layers d 128, 4 heads, seq 64, batch 16", W, n, R);
            for (int k = 0; k < R; k++) {
                char what[64];
                snprintf(what, sizeof what, "  round %d calibration", k);
                print_calib(&cal[k], what);
            }
            print_calib(&mean, "  mean calibration");
            printf("  %-34s predicted(s) measured(s) ratio   loss      predicted parts (ms): compute, tp comm, dp "
                   "comm, pipeline, optimizer, accumulation, cache fraction; measured per round (s)\n", "plan");
            double err = 0, best = HUGE_VAL;
            int best_i = 0;
            for (int i = 0; i < n; i++) {
                const oar_plan_estimate *e = &est[i];
                printf("  %-34s %10.4f  %10.4f  %5.2f  %.6f  %.1f %.1f %.1f %.1f %.1f %.1f %.2f;",
                       plan_str(&plans[i], buf, sizeof buf), pred[i], meas[i], pred[i] / meas[i], loss[i],
                       1e3 * e->compute_time, 1e3 * e->tp_comm_time, 1e3 * e->dp_comm_time, 1e3 * e->pp_time,
                       1e3 * e->optim_time, 1e3 * e->accum_time, e->cache_fraction);
                for (int k = 0; k < R; k++) printf(" %.4f", mr[k][i]);
                double mq[3];
                for (int q = 0; q < 3; q++) {
                    double v[MAXR];
                    for (int k = 0; k < R; k++) v[k] = mph[q][k][i];
                    mq[q] = median(v, R);
                }
                if (!isnan(mq[0]))
                    printf("; measured parts (ms): forward+backward %.1f, dp comm %.1f, %s %.1f", 1e3 * mq[0],
                           1e3 * mq[1], plans[i].zero ? "ZeRO step" : "optimizer", 1e3 * mq[2]);
                char ls[256];
                printf("  %s%s\n", layout_str(&plans[i], &lay[i], kind, ls, sizeof ls),
                       moved[i] ? "  (the mean calibration would lay it out otherwise)" : "");
                err = fmax(err, fabs(pred[i] - meas[i]) / meas[i]);
                if (meas[i] < best) best = meas[i], best_i = i;
            }
            printf("  Spearman rho %.3f (target >= 0.8); largest |predicted - measured| / measured %.0f%% (target <= "
                   "25%%); best measured: %s (%.4f s)\n", spearman(pred, meas, n), 100 * err,
                   plan_str(&plans[best_i], buf, sizeof buf), best);
            double werr = 0;
            for (int i = 0; i < n; i++) werr = fmax(werr, fabs(warm[i] - meas[i]) / meas[i]);
            printf("  without the cache term (everything warm): Spearman rho %.3f, largest error %.0f%%\n",
                   spearman(warm, meas, n), 100 * werr);
            if (chosen >= 0)
                printf("  planner's choice (runnable, <= 8 micro-batches): %s: measured %.4f s, %.1f%% off the best "
                       "measured (target <= 10%%)\n", plan_str(&plans[chosen], buf, sizeof buf), meas[chosen],
                       100 * (meas[chosen] / best - 1));
            else
                printf("  planner's choice (runnable, <= 8 micro-batches): %s: not among the measured plans\n",
                       plan_str(ch, buf, sizeof buf));
            fflush(stdout);
        }
        oar_plan_result_free(r);
        oar_plan_model_free(pm);
    }
    oar_dist_finalize();
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "measure")) return measure_all(argc, argv);
    return scale();
}

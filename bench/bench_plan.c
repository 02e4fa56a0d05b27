/* The planner, validated and simulated (docs/internals/plan.md, bench/RESULTS.md).
 *
 *   bench_plan scale
 *       GPT-3 175B (96 layers, d 12288, 96 heads, seq 2048) on simulated clusters of 64, 256
 *       and 1024 H200s (8 a node, NVLink inside, InfiniBand across), batch 1536; and on 1024
 *       A100s beside Megatron-LM's published configuration (Narayanan et al. 2021, table 1:
 *       175B on 1024 GPUs: tp 8, pp 16, dp 8, batch 1536, micro-batch 1). Times the planner.
 *
 *   mpirun -np N --oversubscribe bench_plan measure
 *       Calibrates this machine (kernels and all-reduce, all ranks at once: the contention of
 *       an oversubscribed run is in the figures), then for two models (an MLP, a 2-layer
 *       transformer) runs every plan oar runs today at N ranks (data parallel, ZeRO-1/2,
 *       micro-batches by gradient accumulation, recompute on/off), measures the step time
 *       (median of 3) and prints predicted vs measured, Spearman's rho, the errors and the
 *       chosen plan's gap to the best measured.
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
#define STEPS 3

typedef struct bench_model {
    int kind;
    oar_module *mod;
    oar_module *child[8];
    int n_child;
    oar_tensor *p[64];
    int np;
    int64_t batch;  /* global */
    int64_t xshape[3];
    int xnd;
} bench_model;

static void model_make(bench_model *m, int kind, oar_mesh *mesh) {
    memset(m, 0, sizeof *m);
    m->kind = kind;
    oar_manual_seed(7);
    if (kind == MLP) {
        m->child[0] = oar_linear_new(256, 1024, true);
        m->child[1] = oar_relu_new();
        m->child[2] = oar_linear_new(1024, 1024, true);
        m->child[3] = oar_relu_new();
        m->child[4] = oar_linear_new(1024, 256, true);
        m->n_child = 5;
        m->batch = 64;
        m->xnd = 2, m->xshape[0] = 64, m->xshape[1] = 256;
    } else {
        oar_transformer_options o = {.dim_feedforward = 512, .norm_first = true, .causal = true,
                                     .activation = OAR_ACTIVATION_GELU};
        m->child[0] = oar_transformer_encoder_layer_new(128, 4, &o);
        m->child[1] = oar_transformer_encoder_layer_new(128, 4, &o);
        m->n_child = 2;
        m->batch = 16;
        m->xnd = 3, m->xshape[0] = 16, m->xshape[1] = 64, m->xshape[2] = 128;
    }
    m->mod = oar_sequential_new(m->n_child, m->child);
    if (mesh) oar_parallelize(m->mod, mesh, 0, 0, NULL);
    m->np = oar_module_parameters(m->mod, m->p, 64);
}

static oar_tensor *model_forward(bench_model *m, oar_tensor *x, bool recompute) {
    if (!recompute) return oar_module_forward(m->mod, x);
    for (int i = 0; i < m->n_child && x; i++) x = oar_module_checkpoint(m->child[i], x);
    return x;
}

/* One plan's median step time at this world size (every rank returns the same, rank 0's). */
static double measure(int kind, const oar_plan_config *k, double *loss_out) {
    int W = oar_dist_world_size();
    oar_mesh *mesh = W > 1 ? oar_mesh_create(1, (int64_t[]){W}, NULL, NULL) : NULL;
    bench_model m;
    model_make(&m, kind, mesh);
    oar_optimizer *opt = oar_adam_new(m.np, m.p, &(oar_adam_options){.lr = 1e-3});
    oar_zero *z = NULL;
    if (k->zero) {
        z = oar_zero_new(opt, mesh, 0, &(oar_zero_options){.stage = k->zero, .accum_steps = k->micro_batches});
        oar_optim_free(opt);
        opt = NULL;
    }
    oar_manual_seed(11);
    oar_tensor *x = oar_randn(OAR_F32, m.xnd, m.xshape), *y = oar_randn(OAR_F32, m.xnd, m.xshape);
    if (kind == MLP) { /* the MLP maps 256 -> 256: the same shape as its input */ }
    double t[STEPS + 1], loss = 0;
    int64_t mb = m.batch / k->micro_batches;
    for (int step = 0; step <= STEPS; step++) {
        oar_pool *pool = oar_pool_push();
        double t0 = now();
        loss = 0;
        for (int a = 0; a < k->micro_batches; a++) {
            oar_tensor *xb = oar_slice(x, 0, a * mb, (a + 1) * mb, 1), *yb = oar_slice(y, 0, a * mb, (a + 1) * mb, 1);
            if (mesh) {
                xb = oar_shard_tensor(xb, mesh, (oar_placement[]){oar_shard(0)});
                yb = oar_shard_tensor(yb, mesh, (oar_placement[]){oar_shard(0)});
            }
            oar_tensor *d = oar_sub(model_forward(&m, xb, k->recompute), yb);
            oar_tensor *l = oar_mul_scalar(oar_sum(oar_square(d), 0, NULL, false), 1.0 / (double)oar_tensor_numel(yb));
            if (!l || oar_backward(l, NULL)) {
                fprintf(stderr, "measure: %s\n", oar_last_error());
                exit(1);
            }
            loss += oar_tensor_item(mesh ? oar_unshard(l) : l) / k->micro_batches;
            if (z) oar_zero_step(z);
        }
        if (opt) {
            if (mesh) oar_dist_reduce_grads(m.np, m.p, 0);
            oar_optim_step(opt);
            oar_optim_zero_grad(opt);
        }
        t[step] = now() - t0;
        oar_pool_pop(pool);
    }
    oar_tensor_release(x);
    oar_tensor_release(y);
    oar_zero_free(z);
    oar_optim_free(opt);
    oar_module_free(m.mod);
    if (mesh) oar_mesh_release(mesh);
    /* median of the timed steps (step 0 warms up) */
    double s[STEPS];
    memcpy(s, t + 1, sizeof s);
    for (int i = 0; i < STEPS; i++)
        for (int j = i + 1; j < STEPS; j++)
            if (s[j] < s[i]) { double tmp = s[i]; s[i] = s[j]; s[j] = tmp; }
    if (loss_out) *loss_out = loss;
    /* rank 0's figure on every rank */
    double med = s[STEPS / 2];
    if (mesh || W > 1) {
        oar_mesh *wm = oar_mesh_create(1, (int64_t[]){W}, NULL, NULL);
        oar_tensor *v = oar_full(OAR_F64, 1, (int64_t[]){1}, oar_dist_rank() == 0 ? med : 0.0);
        oar_tensor *d = oar_dtensor_from_local(v, wm, (oar_placement[]){oar_partial(OAR_REDUCE_SUM)}, (int64_t[]){1});
        oar_tensor *r = oar_reshard(d, wm, (oar_placement[]){oar_replicate()});
        med = oar_tensor_item(oar_dtensor_local(r));
        oar_tensor_release(r);
        oar_tensor_release(d);
        oar_tensor_release(v);
        oar_mesh_release(wm);
    }
    return med;
}

/* Ranks with ties averaged, then Pearson on ranks. */
static double spearman(const double *a, const double *b, int n) {
    double ra[64], rb[64];
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

static int measure_all(int argc, char **argv) {
    if (oar_dist_init(&argc, &argv)) return fprintf(stderr, "%s\n", oar_last_error()), 1;
    int W = oar_dist_world_size(), me = oar_dist_rank();
    oar_plan_calib cal;
    if (oar_plan_calibrate(&cal)) return fprintf(stderr, "calibrate: %s\n", oar_last_error()), 1;
    oar_cluster c;
    if (W > 1 && oar_cluster_from_calib(&c, &cal, W, 8e9)) return fprintf(stderr, "%s\n", oar_last_error()), 1;
    if (me == 0)
        printf("calibration at %d ranks (oversubscribed on this machine's cores): GEMM %.3g FLOP/s, elementwise "
               "%.3g B/s, op %.3g s, all-reduce alpha %.3g s beta %.3g s/B\n", W, cal.matmul_flops, cal.ew_bw,
               cal.op_overhead, cal.alpha, cal.beta);
    for (int kind = MLP; kind <= TRANSFORMER; kind++) {
        /* the planner's model: the traced forward at the global batch */
        bench_model bm;
        model_make(&bm, kind, NULL);
        oar_graph_input_spec spec = {.name = "x", .dtype = OAR_F32, .ndim = bm.xnd};
        memcpy(spec.shape, bm.xshape, sizeof bm.xshape);
        oar_graph *g = oar_trace_module(bm.mod, &spec);
        oar_plan_model *pm = g ? oar_plan_model_from_graph(g, 0) : NULL;
        oar_graph_free(g);
        if (!pm) return fprintf(stderr, "model: %s\n", oar_last_error()), 1;
        oar_plan_config plans[24];
        int n = 0;
        /* recompute is left out: oar_module_checkpoint on a dtensor batch crashes in oar today
         * (a segfault in the GEMM under run_segment; bench/RESULTS.md) */
        for (int z = 0; z <= 2; z++)
            for (int mbi = 1; mbi <= 4; mbi *= 2) plans[n++] = (oar_plan_config){W, 1, 1, z, mbi, 0};
        double pred[24], meas[24], loss[24];
        for (int i = 0; i < n; i++) {
            oar_plan_estimate e;
            if (oar_plan_estimate_config(pm, &c, bm.batch, &plans[i], &e)) return fprintf(stderr, "%s\n", oar_last_error()), 1;
            pred[i] = e.step_time;
            meas[i] = measure(kind, &plans[i], &loss[i]);
        }
        /* the planner's choice among what was measured: runnable plans, no recompute */
        oar_plan_result *r = oar_plan_parallel(pm, &c, &(oar_plan_options){.global_batch = bm.batch, .runnable_only = true,
                                                                            .runners_up = 50, .max_micro_batches = 4});
        const oar_plan_config *ch = NULL;
        for (int i = 0; r && i < oar_plan_result_count(r) && !ch; i++) {
            const oar_plan_config *k = oar_plan_result_config(r, i, NULL);
            if (k->tp == 1 && !k->recompute) ch = k;
        }
        if (me == 0) {
            printf("\n%s at %d ranks: %d plans\n", kind == MLP ? "MLP 256-1024-1024-256, batch 64" :
                   "2 transformer layers d 128, 4 heads, seq 64, batch 16", W, n);
            printf("  plan                             predicted(s) measured(s) ratio   loss\n");
            double err = 0, best = HUGE_VAL, chosen_meas = NAN;
            int best_i = 0;
            for (int i = 0; i < n; i++) {
                printf("  dp %d zero %d micro %d recompute %d   %10.4f  %10.4f  %5.2f  %.6f\n", plans[i].dp,
                       plans[i].zero, plans[i].micro_batches, plans[i].recompute, pred[i], meas[i], pred[i] / meas[i],
                       loss[i]);
                err = fmax(err, fabs(pred[i] - meas[i]) / meas[i]);
                if (meas[i] < best) best = meas[i], best_i = i;
                if (ch && !memcmp(ch, &plans[i], sizeof *ch)) chosen_meas = meas[i];
            }
            printf("  Spearman rho %.3f; largest |predicted - measured| / measured %.0f%%; best measured: plan %d "
                   "(%.4f s)\n", spearman(pred, meas, n), 100 * err, best_i, best);
            if (ch)
                printf("  planner's choice (runnable only): dp %d zero %d micro %d recompute %d: measured %.4f s, "
                       "%.1f%% off the best measured\n", ch->dp, ch->zero, ch->micro_batches, ch->recompute,
                       chosen_meas, 100 * (chosen_meas / best - 1));
        }
        oar_plan_result_free(r);
        oar_plan_model_free(pm);
        oar_module_free(bm.mod);
    }
    oar_dist_finalize();
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "measure")) return measure_all(argc, argv);
    return scale();
}

/* The planner (include/oar/plan.h): the cost model against closed forms,
 * memory per rank against hand-computed figures for each ZeRO stage and
 * recompute, the search against known optima of hand-built cost tables,
 * placements by propagation, pruning reasons, the transformer description,
 * layers read off a traced graph, calibration files and the failure paths. */
#include "alloc_fail_loop.h"
#include "test.h"

#include <oar/plan.h>

#include <unistd.h>

/* A one-node cluster with round numbers. */
static oar_cluster toy_cluster(int n) {
    return (oar_cluster){.n_devices = n, .devices_per_node = n, .mem_bytes = 1e12, .flops = 1e12, .mem_bw = 1e11,
                         .intra_bw = 1e9, .intra_lat = 1e-5, .inter_bw = 1e8, .inter_lat = 1e-4, .op_overhead = 0};
}

/* Two replicated layers of 1000 parameters, 1e9 FLOPs and 100 activation bytes per sample. */
static oar_plan_model *toy_model(void) {
    oar_plan_model *m = oar_plan_model_new("toy", 4);
    for (int i = 0; i < 2; i++) {
        oar_plan_layer l = {.kind = OAR_PLAN_LAYER_REPLICATED, .flops = 1e9, .params = 1000, .act_bytes = 100,
                            .in_bytes = 10, .out_bytes = 10};
        CHECK(oar_plan_model_add_layer(m, &l) == 0);
    }
    return m;
}

static void test_closed_forms(void) {
    /* ring all-reduce: 2(n-1) alpha + 2(n-1)/n bytes / bw */
    CHECK_NEAR(oar_plan_allreduce_time(1e6, 4, 1e-5, 1e9), 6e-5 + 1.5e-3, 1e-15);
    CHECK_NEAR(oar_plan_allreduce_time(8e6, 2, 2e-6, 4e9), 2 * 2e-6 + 8e6 / 4e9, 1e-15);
    CHECK(oar_plan_allreduce_time(1e6, 1, 1e-5, 1e9) == 0);
    /* a GEMM of m x k x n = 4096^3 at 1e12 FLOP/s: 2 m k n / F */
    oar_cluster c = toy_cluster(1);
    double f = 2.0 * 4096 * 4096 * 4096;
    CHECK_NEAR(oar_plan_compute_time(f, 0, 0, &c), f / 1e12, 1e-12);
    c.op_overhead = 1e-6;
    CHECK_NEAR(oar_plan_compute_time(0, 3e9, 5, &c), 3e9 / 1e11 + 5e-6, 1e-12);
    CHECK(oar_plan_compute_time(1, 1, 1, NULL) < 0);
    /* memory-bound bytes by op family: 3e9 bytes a sample, 1e9 of them transcendental at
     * family_bw 2e10, 5e8 select with no rate (mem_bw), the rest at mem_bw (1e11); 2 samples */
    oar_plan_layer l = {.bytes = 3e9, .family_bytes = {[OAR_PLAN_FAMILY_TRANSCENDENTAL] = 1e9,
                                                       [OAR_PLAN_FAMILY_SELECT] = 5e8}};
    CHECK_NEAR(oar_plan_memory_time(&l, 2, &c), 2 * 3e9 / 1e11, 1e-12); /* no family rates: all at mem_bw */
    c.family_bw[OAR_PLAN_FAMILY_TRANSCENDENTAL] = 2e10;
    CHECK(oar_cluster_check(&c) == 0);
    CHECK_NEAR(oar_plan_memory_time(&l, 2, &c), 2 * (1e9 / 2e10 + 2e9 / 1e11), 1e-12);
    CHECK(oar_plan_memory_time(NULL, 1, &c) < 0 && oar_plan_memory_time(&l, 1, NULL) < 0);
    c.family_bw[OAR_PLAN_FAMILY_NORM] = -1;
    CHECK_STATUS_FAILS(oar_cluster_check(&c), "family_bw[1] (norm) -1");
    /* in a step: forward + backward (two forwards) of one such layer at batch 2, no GEMMs */
    c.family_bw[OAR_PLAN_FAMILY_NORM] = 0;
    oar_plan_model *m = oar_plan_model_new("fam", 4);
    l.kind = OAR_PLAN_LAYER_REPLICATED;
    CHECK(oar_plan_model_add_layer(m, &l) == 0);
    oar_plan_estimate e;
    CHECK(oar_plan_estimate_config(m, &c, 2, &(oar_plan_config){.dp = 1, .tp = 1, .pp = 1, .micro_batches = 1},
                                   &e) == 0);
    CHECK_NEAR(e.compute_time, 3 * 2 * (1e9 / 2e10 + 2e9 / 1e11), 1e-12);
    l.family_bytes[OAR_PLAN_FAMILY_SOFTMAX] = 2e9; /* 3.5e9 of 3e9 */
    CHECK_STATUS_FAILS(oar_plan_model_add_layer(m, &l), "family_bytes sum to 3.5e+09, more than its 3e+09 bytes");
    l.family_bytes[OAR_PLAN_FAMILY_SOFTMAX] = NAN;
    CHECK_STATUS_FAILS(oar_plan_model_add_layer(m, &l), "family_bytes[2] nan");
    oar_plan_model_free(m);
}

static void test_memory_per_rank(void) {
    oar_plan_model *m = toy_model();
    CHECK(m && !strcmp(oar_plan_model_name(m), "toy"));
    CHECK_FAILS(oar_plan_model_name(NULL) != NULL, "model");
    oar_cluster c = toy_cluster(4);
    oar_plan_estimate e;
    /* dp 4, batch 8, one micro-batch: 2 samples per rank; f32: p 4, g 4, Adam 8 bytes a parameter */
    oar_plan_config k = {.dp = 4, .tp = 1, .pp = 1, .zero = 0, .micro_batches = 1, .recompute = 0};
    CHECK(oar_plan_estimate_config(m, &c, 8, &k, &e) == 0);
    CHECK_NEAR(e.mem_params, 8000, 1e-9);
    CHECK_NEAR(e.mem_grads, 8000, 1e-9);
    CHECK_NEAR(e.mem_optim, 16000, 1e-9);
    CHECK_NEAR(e.mem_act, 2 * 200, 1e-9);
    CHECK_NEAR(e.mem, 32400, 1e-9);
    CHECK(e.fits && e.runnable);
    /* its time: fwd 2e9 / 1e12 per layer, 3 passes, but 2 for the first layer (the batch needs
     * no gradient: its backward is the weight's GEMM only); all-reduce of 8000 bytes over 4
     * ranks; Adam 28 bytes an element */
    double want_compute = (2 + 3) * 2e-3;
    double want_ar = 6 * 1e-5 + 1.5 * 8000 / 1e9;
    double loss_ar = 6 * 1e-5 + 1.5 * 4 / 1e9; /* each micro-batch's loss, a scalar, read by every rank */
    CHECK_NEAR(e.compute_time, want_compute, 1e-12);
    CHECK_NEAR(e.dp_comm_time, want_ar + loss_ar, 1e-12);
    CHECK_NEAR(e.optim_time, 2000 * 28 / 1e11, 1e-15);
    CHECK_NEAR(e.step_time, want_compute + want_ar + loss_ar + 2000 * 28 / 1e11, 1e-12);
    k.zero = 1; /* optimizer state / dp */
    CHECK(oar_plan_estimate_config(m, &c, 8, &k, &e) == 0);
    CHECK_NEAR(e.mem, 8000 + 8000 + 4000 + 400, 1e-9);
    k.zero = 2; /* + gradients / dp */
    CHECK(oar_plan_estimate_config(m, &c, 8, &k, &e) == 0);
    CHECK_NEAR(e.mem, 8000 + 2000 + 4000 + 400, 1e-9);
    CHECK(e.runnable);
    k.zero = 3; /* + parameters / dp, one layer gathered */
    CHECK(oar_plan_estimate_config(m, &c, 8, &k, &e) == 0);
    CHECK_NEAR(e.mem, 2000 + 4000 + 2000 + 4000 + 400, 1e-9);
    CHECK(!e.runnable);
    /* recompute: each layer's input kept (10 bytes a sample each) plus one layer's working set */
    k.zero = 0, k.recompute = 1;
    CHECK(oar_plan_estimate_config(m, &c, 8, &k, &e) == 0);
    CHECK_NEAR(e.mem_act, 2 * 20 + 2 * 100, 1e-9);
    CHECK_NEAR(e.compute_time, (3 + 4) * 2e-3, 1e-12); /* one more forward */
    /* two micro-batches: half the activations, the same all-reduce once, two losses read */
    k.recompute = 0, k.micro_batches = 2;
    CHECK(oar_plan_estimate_config(m, &c, 8, &k, &e) == 0);
    CHECK_NEAR(e.mem_act, 200, 1e-9);
    CHECK_NEAR(e.dp_comm_time, want_ar + 2 * loss_ar, 1e-12);
    /* pipeline 2 x dp 2, two micro-batches: one layer a stage, 1F1B keeps 2 in flight on stage 0 */
    k = (oar_plan_config){.dp = 2, .tp = 1, .pp = 2, .zero = 0, .micro_batches = 2};
    CHECK(oar_plan_estimate_config(m, &c, 8, &k, &e) == 0);
    CHECK_NEAR(e.mem_params, 4000, 1e-9);
    CHECK_NEAR(e.mem_act, 2 * 2 * 100, 1e-9);
    CHECK_NEAR(e.compute_time, 2 * 3 * 2e-3, 1e-12);    /* 2 micro-batches of 2 samples, one layer */
    CHECK(e.runnable);
    /* the bubble: the stages are unequal (the first layer's backward has one GEMM: 4e-3 s a
     * micro-batch against the second's 6e-3 s), so 1F1B's sum t_s + (M - 1) max t_s leaves the
     * other stage's 4e-3 s beyond M x 6e-3 s; and two sends of 2 x 10 bytes per micro-batch
     * and hop over M + pp - 1 slots */
    CHECK_NEAR(e.pp_time, 4e-3 + 2.0 * 3 * (1e-5 + 20 / 1e9), 1e-12);
    k.zero = 1; /* ZeRO under a pipeline: predicted only */
    CHECK(oar_plan_estimate_config(m, &c, 8, &k, &e) == 0);
    CHECK(!e.runnable);
    k = (oar_plan_config){.dp = 2, .tp = 2, .pp = 1, .zero = 1, .micro_batches = 1}; /* nor with tp */
    CHECK(oar_plan_estimate_config(m, &c, 8, &k, &e) == 0);
    CHECK(!e.runnable);
    k.zero = 0;
    CHECK(oar_plan_estimate_config(m, &c, 8, &k, &e) == 0);
    CHECK(e.runnable);
    oar_plan_model_free(m);
}

/* The GEMM rate by smallest dimension, the optimizer's calibrated time, gradient accumulation. */
static void test_measured_rates(void) {
    oar_cluster c = toy_cluster(1);
    CHECK_NEAR(oar_plan_gemm_time(1e9, 64, &c), 1e9 / 1e12, 1e-18); /* no table: the peak rate */
    for (int i = 0; i < OAR_PLAN_GEMM_CLASSES; i++) c.gemm_rate[i] = i ? 1e10 * i : 0.5e10; /* 2: 0.5e10, 4: 1e10 .. 512: 8e10 */
    CHECK(oar_cluster_check(&c) == 0);
    CHECK_NEAR(oar_plan_gemm_time(1e9, 16, &c), 1e9 / 3e10, 1e-15);   /* at a table point */
    CHECK_NEAR(oar_plan_gemm_time(1e9, 2, &c), 1e9 / 0.5e10, 1e-15);  /* the 2-row class */
    CHECK_NEAR(oar_plan_gemm_time(1e9, 1, &c), 1e9 / 0.5e10, 1e-15);  /* clamped below */
    CHECK_NEAR(oar_plan_gemm_time(1e9, 4096, &c), 1e9 / 8e10, 1e-15); /* clamped above */
    CHECK_NEAR(oar_plan_gemm_time(1e9, sqrt(16.0 * 32), &c), 1e9 / 3.5e10, 1e-15); /* halfway in log dim */
    CHECK_NEAR(oar_plan_gemm_time(1e9, 0, &c), 1e9 / 1e12, 1e-18);    /* unknown dim: the peak rate */
    CHECK(oar_plan_gemm_time(1, 1, NULL) < 0);
    c.gemm_rate[3] = 0;
    CHECK_STATUS_FAILS(oar_cluster_check(&c), "give all");
    c.gemm_rate[3] = -1;
    CHECK_STATUS_FAILS(oar_cluster_check(&c), "gemm_rate[3] -1");
    c.gemm_rate[3] = 3e10; /* (dim 16) */
    /* by weight: the table at 512 x 512 (<= 2^18 elements), the wide one at 1024 x 1024 (>= 2^20),
     * linear in log weight between (2^19: halfway) */
    for (int i = 0; i < OAR_PLAN_GEMM_CLASSES; i++) c.gemm_rate_wide[i] = c.gemm_rate[i] / 2; /* half */
    CHECK(oar_cluster_check(&c) == 0);
    CHECK_NEAR(oar_plan_gemm_time_weight(1e9, 16, 512.0 * 512, &c), 1e9 / 3e10, 1e-15);
    CHECK_NEAR(oar_plan_gemm_time_weight(1e9, 16, 1000, &c), 1e9 / 3e10, 1e-15);           /* clamped below */
    CHECK_NEAR(oar_plan_gemm_time_weight(1e9, 16, 1024.0 * 1024, &c), 1e9 / 1.5e10, 1e-15);
    CHECK_NEAR(oar_plan_gemm_time_weight(1e9, 16, 1e9, &c), 1e9 / 1.5e10, 1e-15);          /* clamped above */
    CHECK_NEAR(oar_plan_gemm_time_weight(1e9, 16, 512.0 * 1024, &c), 1e9 / 2.25e10, 1e-15); /* halfway */
    CHECK_NEAR(oar_plan_gemm_time_weight(1e9, sqrt(16.0 * 32), 1024.0 * 1024, &c), 1e9 / 1.75e10, 1e-15);
    CHECK_NEAR(oar_plan_gemm_time_weight(1e9, 16, 0, &c), 1e9 / 3e10, 1e-15);    /* unknown weight: gemm_rate */
    CHECK_NEAR(oar_plan_gemm_time(1e9, 16, &c), 1e9 / 3e10, 1e-15);
    CHECK_NEAR(oar_plan_gemm_time_weight(1e9, 0, 1024.0 * 1024, &c), 1e9 / 1e12, 1e-18); /* unknown dim */
    CHECK(oar_plan_gemm_time_weight(1, 1, 1, NULL) < 0);
    c.gemm_rate_wide[5] = 0;
    CHECK_STATUS_FAILS(oar_cluster_check(&c), "1 of the 9 gemm_rate_wide entries are 0");
    c.gemm_rate_wide[5] = INFINITY;
    CHECK_STATUS_FAILS(oar_cluster_check(&c), "gemm_rate_wide[5] inf");
    c.gemm_rate_wide[5] = 3e10;
    for (int i = 0; i < OAR_PLAN_GEMM_CLASSES; i++) c.gemm_rate[i] = 0;
    CHECK_STATUS_FAILS(oar_cluster_check(&c), "gemm_rate has none");
    for (int i = 0; i < OAR_PLAN_GEMM_CLASSES; i++) c.gemm_rate[i] = i ? 1e10 * i : 0.5e10, c.gemm_rate_wide[i] = 0;
    c.optim_time_per_param = -1;
    CHECK_STATUS_FAILS(oar_cluster_check(&c), "optimizer time per parameter");
    c.optim_time_per_param = NAN;
    CHECK_STATUS_FAILS(oar_cluster_check(&c), "optimizer time per parameter");

    /* one linear layer of 64 x 64 on 1 row a sample, batch 8: GEMMs of smallest dim 8 (1 micro-batch)
     * or 2 (4 micro-batches: the 2 entry) */
    oar_plan_model *m = oar_plan_model_new("lin", 4);
    oar_plan_layer l = {.kind = OAR_PLAN_LAYER_LINEAR, .flops = 2 * 64 * 64, .params = 64 * 64, .gemm_rows = 1,
                        .gemm_k = 64, .gemm_n = 64};
    CHECK(oar_plan_model_add_layer(m, &l) == 0);
    CHECK(oar_plan_model_add_layer(m, &l) == 0);
    c.optim_time_per_param = 1e-9;
    oar_plan_estimate e;
    oar_plan_config k = {.dp = 1, .tp = 1, .pp = 1, .micro_batches = 1};
    CHECK(oar_plan_estimate_config(m, &c, 8, &k, &e) == 0);
    double f8 = 2.0 * 64 * 64 * 8;
    /* forward twice, backward: the first layer one GEMM (the batch needs no gradient), the second two */
    CHECK_NEAR(e.compute_time, (2 + 1 + 2) * f8 / 2e10, 1e-15);
    CHECK_NEAR(e.optim_time, 2 * 4096 * 1e-9, 1e-18);
    CHECK_NEAR(e.accum_time, 0, 0);
    k.micro_batches = 4; /* 4 micro-batches of 2 rows; 3 accumulations of 8192 f32 gradients (12 bytes each) */
    CHECK(oar_plan_estimate_config(m, &c, 8, &k, &e) == 0);
    CHECK_NEAR(e.compute_time, 4 * (2 + 1 + 2) * (f8 / 4) / 0.5e10, 1e-15);
    CHECK_NEAR(e.accum_time, 3 * 8192 * 12 / 1e11, 1e-18);
    CHECK_NEAR(e.step_time, e.compute_time + e.optim_time + e.accum_time, 1e-15);
    oar_plan_model_free(m);
    /* a 1024 x 1024 weight: its GEMMs at the wide table's rate (a quarter of gemm_rate here);
     * under tp 2, column-split, this rank's 1024 x 512 half sits halfway in log weight */
    m = oar_plan_model_new("wide", 4);
    oar_plan_layer lw = {.kind = OAR_PLAN_LAYER_LINEAR, .flops = 2.0 * 1024 * 1024, .params = 1024 * 1024,
                         .gemm_rows = 1, .gemm_k = 1024, .gemm_n = 1024};
    CHECK(oar_plan_model_add_layer(m, &lw) == 0);
    for (int i = 0; i < OAR_PLAN_GEMM_CLASSES; i++) c.gemm_rate_wide[i] = c.gemm_rate[i] / 4;
    k = (oar_plan_config){.dp = 1, .tp = 1, .pp = 1, .micro_batches = 1};
    CHECK(oar_plan_estimate_config(m, &c, 8, &k, &e) == 0);
    double fw = 2.0 * 1024 * 1024 * 8;
    CHECK_NEAR(e.compute_time, (1 + 1) * fw / (2e10 / 4), 1e-12); /* dim 8; the first layer: 2 GEMMs */
    oar_plan_model_free(m);
    for (int i = 0; i < OAR_PLAN_GEMM_CLASSES; i++) c.gemm_rate_wide[i] = 0;

    /* the wait at each synchronising collective: dp 4, one micro-batch: the gradients'
     * all-reduce and the loss's, one wait each; ZeRO-2 with two micro-batches (accumulated
     * locally, as oar's ZeRO does): one reduce-scatter, one all-gather, two losses */
    m = toy_model();
    c = toy_cluster(4);
    oar_plan_estimate e0;
    k = (oar_plan_config){.dp = 4, .tp = 1, .pp = 1, .micro_batches = 1};
    CHECK(oar_plan_estimate_config(m, &c, 8, &k, &e0) == 0);
    c.sync_lat = 1e-3;
    CHECK(oar_plan_estimate_config(m, &c, 8, &k, &e) == 0);
    CHECK_NEAR(e.dp_comm_time - e0.dp_comm_time, 2e-3, 1e-12);
    k.zero = 2, k.micro_batches = 2;
    c.sync_lat = 0;
    CHECK(oar_plan_estimate_config(m, &c, 8, &k, &e0) == 0);
    c.sync_lat = 1e-3;
    CHECK(oar_plan_estimate_config(m, &c, 8, &k, &e) == 0);
    CHECK_NEAR(e.dp_comm_time - e0.dp_comm_time, 4e-3, 1e-12);
    /* scaled by the compute before each collective, measured after 10 ms: the loss after the
     * forward (2 layers x 2e-3 s), the gradients after the backward (2e-3 s for the first layer's
     * weight GEMM, 4e-3 s for the second's two) */
    k = (oar_plan_config){.dp = 4, .tp = 1, .pp = 1, .micro_batches = 1};
    c.sync_phase = 1e-2;
    CHECK(oar_plan_estimate_config(m, &c, 8, &k, &e) == 0);
    c.sync_lat = 0;
    CHECK(oar_plan_estimate_config(m, &c, 8, &k, &e0) == 0);
    CHECK_NEAR(e.dp_comm_time - e0.dp_comm_time, 1e-3 * (4e-3 + 6e-3) / 1e-2, 1e-12);
    /* a pipeline's sends do not: the schedule's own waits stand for them */
    k = (oar_plan_config){.dp = 2, .tp = 1, .pp = 2, .micro_batches = 2};
    c.sync_phase = 0, c.sync_lat = 0;
    CHECK(oar_plan_estimate_config(m, &c, 8, &k, &e0) == 0);
    c.sync_lat = 1e-3;
    CHECK(oar_plan_estimate_config(m, &c, 8, &k, &e) == 0);
    CHECK_NEAR(e.pp_time, e0.pp_time, 1e-15);
    c.sync_phase = -1;
    CHECK_STATUS_FAILS(oar_cluster_check(&c), "synchronisation phase -1");
    c.sync_phase = 0;
    c.sync_lat = -1;
    CHECK_STATUS_FAILS(oar_cluster_check(&c), "synchronisation wait -1");
    oar_plan_model_free(m);
}

/* The layout the cost model assumes: placements and pipeline stages. */
static void test_layout(void) {
    oar_plan_model *m = oar_plan_model_new("mlp", 4);
    oar_plan_layer lin = {.kind = OAR_PLAN_LAYER_LINEAR, .flops = 2e9, .params = 1e6, .act_bytes = 4e3,
                          .in_bytes = 4e3, .out_bytes = 4e3, .n_ops = 1};
    oar_plan_layer relu = {.kind = OAR_PLAN_LAYER_POINTWISE, .bytes = 8e3, .act_bytes = 4e3, .in_bytes = 4e3,
                           .out_bytes = 4e3, .n_ops = 1};
    CHECK(oar_plan_model_add_layer(m, &lin) == 0);
    CHECK(oar_plan_model_add_layer(m, &relu) == 0);
    CHECK(oar_plan_model_add_layer(m, &lin) == 0);
    oar_cluster c = toy_cluster(2);
    const char *place[3];
    int stage[3];
    oar_plan_config k = {.dp = 1, .tp = 2, .pp = 1, .micro_batches = 1};
    CHECK(oar_plan_estimate_layout(m, &c, 8, &k, 3, place, stage) == 0);
    CHECK(!strcmp(place[0], "column") && !strcmp(place[1], "shard") && !strcmp(place[2], "row"));
    CHECK(stage[0] == 0 && stage[1] == 0 && stage[2] == 0);
    k = (oar_plan_config){.dp = 1, .tp = 1, .pp = 2, .micro_batches = 2};
    CHECK(oar_plan_estimate_layout(m, &c, 8, &k, 3, place, NULL) == 0);
    CHECK(!strcmp(place[0], "replicate") && !strcmp(place[2], "replicate"));
    CHECK(oar_plan_estimate_layout(m, &c, 8, &k, 3, NULL, stage) == 0);
    CHECK(stage[0] == 0 && stage[2] == 1 && stage[1] <= stage[2]);
    CHECK_STATUS_FAILS(oar_plan_estimate_layout(m, &c, 8, &k, 2, place, stage), "must be the model's 3 layers");
    /* a residual first layer is not column-split: then nothing before the row split makes the
     * sharded input it reads, and the chain stays replicated */
    oar_plan_model *mr = oar_plan_model_new("mlp-res", 4);
    oar_plan_layer res = lin;
    res.residual = true;
    CHECK(oar_plan_model_add_layer(mr, &res) == 0 && oar_plan_model_add_layer(mr, &relu) == 0 &&
          oar_plan_model_add_layer(mr, &lin) == 0);
    oar_plan_config kt = {.dp = 1, .tp = 2, .pp = 1, .micro_batches = 1};
    CHECK(oar_plan_estimate_layout(mr, &c, 8, &kt, 3, place, NULL) == 0);
    CHECK(!strcmp(place[0], "replicate") && strcmp(place[2], "row"));
    oar_plan_model_free(mr);
    CHECK_STATUS_FAILS(oar_plan_estimate_layout(NULL, &c, 8, &k, 3, place, stage), "model is NULL");
    CHECK_STATUS_FAILS(oar_plan_estimate_layout(m, &c, 8, NULL, 3, place, stage), "configuration is NULL");
    k.dp = 2;
    CHECK_STATUS_FAILS(oar_plan_estimate_layout(m, &c, 8, &k, 3, place, stage), "is not the 2 devices");
    oar_plan_model_free(m);
}

static void test_bad_configs(void) {
    oar_plan_model *m = toy_model();
    oar_cluster c = toy_cluster(4);
    oar_plan_estimate e;
    oar_plan_config k = {.dp = 2, .tp = 1, .pp = 1, .micro_batches = 1};
    CHECK_STATUS_FAILS(oar_plan_estimate_config(m, &c, 8, &k, &e), "is not the 4 devices");
    k.dp = 4, k.micro_batches = 3;
    CHECK_STATUS_FAILS(oar_plan_estimate_config(m, &c, 8, &k, &e), "not a multiple");
    k = (oar_plan_config){.dp = 1, .tp = 1, .pp = 4, .micro_batches = 1};
    CHECK_STATUS_FAILS(oar_plan_estimate_config(m, &c, 8, &k, &e), "more stages than the 2 layers");
    k = (oar_plan_config){.dp = 1, .tp = 4, .pp = 1, .zero = 1, .micro_batches = 1};
    CHECK_STATUS_FAILS(oar_plan_estimate_config(m, &c, 8, &k, &e), "dp is 1");
    k.zero = 5;
    CHECK_STATUS_FAILS(oar_plan_estimate_config(m, &c, 8, &k, &e), "ZeRO 0..3");
    k.zero = 0;
    CHECK_STATUS_FAILS(oar_plan_estimate_config(m, &c, 0, &k, &e), "global batch 0");
    CHECK_STATUS_FAILS(oar_plan_estimate_config(NULL, &c, 8, &k, &e), "model is NULL");
    CHECK_STATUS_FAILS(oar_plan_estimate_config(m, &c, 8, NULL, &e), "configuration is NULL");
    oar_plan_model_free(m);
}

/* The chosen plan is the fastest of those that fit, among every configuration (brute force). */
static void check_is_argmin(const oar_plan_model *m, const oar_cluster *c, const oar_plan_options *o,
                            const oar_plan_result *r) {
    const int N = c->n_devices;
    double best = HUGE_VAL;
    for (int tp = 1; tp <= N; tp++)
        for (int pp = 1; pp <= N; pp++)
            for (int z = 0; z <= 3; z++)
                for (int mb = 1; mb <= 64; mb++)
                    for (int rc = 0; rc <= 1; rc++) {
                        if (N % (tp * pp)) continue;
                        oar_plan_config k = {N / tp / pp, tp, pp, z, mb, rc};
                        oar_plan_estimate e;
                        if (oar_plan_estimate_config(m, c, o->global_batch, &k, &e)) continue;
                        if (e.fits && e.step_time < best) best = e.step_time;
                    }
    oar_clear_error();
    oar_plan_estimate e0;
    CHECK(oar_plan_result_config(r, 0, &e0) != NULL);
    CHECK_NEAR(e0.step_time, best, 1e-12 * best);
    /* runners-up are ranked */
    for (int i = 1; i < oar_plan_result_count(r); i++) {
        oar_plan_estimate a, b;
        oar_plan_result_config(r, i - 1, &a);
        oar_plan_result_config(r, i, &b);
        CHECK(a.step_time <= b.step_time && b.fits);
    }
}

static void test_search_known_optima(void) {
    /* 1. compute-bound, free network, plenty of memory: pure data parallel, no recompute, one
     *    micro-batch (every extra micro-batch only adds per-op overhead) */
    oar_plan_model *m = toy_model();
    oar_cluster c = toy_cluster(4);
    c.intra_lat = 0, c.intra_bw = 1e15, c.op_overhead = 1e-6;
    for (int i = 0; i < 2; i++) ((oar_plan_layer *)oar_plan_model_layer(m, i))->n_ops = 4;
    oar_plan_options o = {.global_batch = 16};
    oar_plan_result *r = oar_plan_parallel(m, &c, &o);
    CHECK(r != NULL);
    if (r) {
        const oar_plan_config *k = oar_plan_result_config(r, 0, NULL);
        CHECK(k->dp == 4 && k->tp == 1 && k->pp == 1 && k->micro_batches == 1 && !k->recompute);
        check_is_argmin(m, &c, &o, r);
        CHECK(oar_plan_result_evaluated(r) > 50);
        oar_plan_result_free(r);
    }
    /* 2. the same with 33 KB per device: plain data parallel needs 32.4 KB + 4 samples' activations
     *    (32.8 KB); ZeRO-1 (20.8 KB) is the fastest that fits */
    c.mem_bytes = 33000;
    c.intra_bw = 1e9, c.intra_lat = 1e-5;
    r = oar_plan_parallel(m, &c, &o);
    CHECK(r != NULL);
    if (r) {
        const oar_plan_config *k = oar_plan_result_config(r, 0, NULL);
        CHECK(k->dp == 4 && k->zero >= 1);
        check_is_argmin(m, &c, &o, r);
        oar_plan_result_free(r);
    }
    oar_plan_model_free(m);
    /* 3. one wide block whose parameters fit only when split 4 ways: tensor parallel */
    m = oar_plan_model_new("wide", 4);
    oar_plan_layer big = {.name = "block", .kind = OAR_PLAN_LAYER_BLOCK, .flops = 1e9, .params = 1e6,
                          .act_bytes = 100, .in_bytes = 10, .out_bytes = 10};
    CHECK(oar_plan_model_add_layer(m, &big) == 0);
    c = toy_cluster(4);
    c.mem_bytes = 16e6 / 4 + 16e6 / 8; /* 16 bytes a parameter: 4 ways fit, ZeRO-3 over 4 does not */
    o.global_batch = 4;
    r = oar_plan_parallel(m, &c, &o);
    CHECK(r != NULL);
    if (r) {
        const oar_plan_config *k = oar_plan_result_config(r, 0, NULL);
        CHECK(k->tp == 4);
        CHECK(!strcmp(oar_plan_result_placement(r, 0), "block"));
        check_is_argmin(m, &c, &o, r);
        /* the pure data-parallel family was pruned for memory, and says so */
        bool said = false;
        for (int i = 0; i < oar_plan_result_num_pruned(r); i++)
            said |= strstr(oar_plan_result_pruned(r, i), "dp 4 tp 1 pp 1 zero 0: memory: needs") != NULL;
        CHECK(said);
        CHECK(oar_plan_result_print(r, stderr) == 0);
        oar_plan_result_free(r);
    }
    oar_plan_model_free(m);
}

/* Placements by propagation: linear -> relu -> linear at tp 2 is column, shard, row (Megatron's
 * MLP: one all-reduce), not three replicated layers nor a gather between. */
static void test_placements(void) {
    oar_plan_model *m = oar_plan_model_new("mlp", 4);
    oar_plan_layer l1 = {.name = "fc1", .kind = OAR_PLAN_LAYER_LINEAR, .flops = 2e9, .params = 1e6,
                         .act_bytes = 4e3, .in_bytes = 4e3, .out_bytes = 16e3};
    oar_plan_layer act = {.name = "relu", .kind = OAR_PLAN_LAYER_POINTWISE, .bytes = 32e3, .n_ops = 1,
                          .act_bytes = 16e3, .in_bytes = 16e3, .out_bytes = 16e3};
    oar_plan_layer l2 = l1;
    l2.name = "fc2", l2.in_bytes = 16e3, l2.out_bytes = 4e3;
    CHECK(oar_plan_model_add_layer(m, &l1) == 0 && oar_plan_model_add_layer(m, &act) == 0 &&
          oar_plan_model_add_layer(m, &l2) == 0);
    oar_cluster c = toy_cluster(2);
    c.mem_bytes = 30e6; /* replicated needs 32 MB of state: tensor parallel */
    oar_plan_options o = {.global_batch = 8};
    oar_plan_result *r = oar_plan_parallel(m, &c, &o);
    CHECK(r != NULL);
    if (r) {
        CHECK(oar_plan_result_config(r, 0, NULL)->tp == 2);
        CHECK(!strcmp(oar_plan_result_placement(r, 0), "column"));
        CHECK(!strcmp(oar_plan_result_placement(r, 1), "shard"));
        CHECK(!strcmp(oar_plan_result_placement(r, 2), "row"));
        CHECK_FAILS(oar_plan_result_placement(r, 3), "layer 3 of 3");
        CHECK_FAILS(oar_plan_result_config(r, 99, NULL), "plan 99");
        CHECK_FAILS(oar_plan_result_pruned(r, -1), "-1 of");
        oar_plan_result_free(r);
    }
    oar_plan_model_free(m);
}

static void test_failure_paths(void) {
    oar_plan_model *m = toy_model();
    oar_cluster c = toy_cluster(4);
    oar_plan_options o = {.global_batch = 8};
    c.n_devices = 0;
    CHECK_FAILS(oar_plan_parallel(m, &c, &o), "0 devices");
    c = toy_cluster(4);
    c.inter_bw = -1;
    CHECK_FAILS(oar_plan_parallel(m, &c, &o), "bandwidth across nodes");
    c = toy_cluster(4);
    c.devices_per_node = 3;
    CHECK_FAILS(oar_plan_parallel(m, &c, &o), "devices per node");
    c = toy_cluster(4);
    c.flops = NAN;
    CHECK_FAILS(oar_plan_parallel(m, &c, &o), "FLOP/s");
    c = toy_cluster(4);
    c.mem_bytes = 1000; /* the least any plan needs: ZeRO-3 over 4 */
    CHECK_FAILS(oar_plan_parallel(m, &c, &o), "no plan fits");
    CHECK_FAILS(oar_plan_parallel(m, &c, &o), "least memory any plan needs");
    c = toy_cluster(4);
    o.global_batch = 0;
    CHECK_FAILS(oar_plan_parallel(m, &c, &o), "global batch 0");
    o.global_batch = 3; /* no dp x micro-batches divides 3 at 4 devices, and tp would only repeat work */
    CHECK_FAILS(oar_plan_parallel(m, &c, &o), "batch 3 is not a multiple of dp 4");
    CHECK_FAILS(oar_plan_parallel(m, &c, &o), "no valid plan for 4 devices");
    o.global_batch = 8;
    CHECK_FAILS(oar_plan_parallel(NULL, &c, &o), "model is NULL");
    CHECK_FAILS(oar_plan_parallel(m, NULL, &o), "cluster is NULL");
    CHECK_FAILS(oar_plan_parallel(m, &c, NULL), "options is NULL");
    o.runners_up = -1;
    CHECK_FAILS(oar_plan_parallel(m, &c, &o), "runners_up -1");
    oar_plan_model *empty = oar_plan_model_new("empty", 4);
    o.runners_up = 0;
    CHECK_FAILS(oar_plan_parallel(empty, &c, &o), "no layers");
    oar_plan_model_free(empty);
    /* bad layers and models */
    oar_plan_layer bad = {.kind = OAR_PLAN_LAYER_LINEAR, .flops = -1};
    CHECK_STATUS_FAILS(oar_plan_model_add_layer(m, &bad), "flops -1");
    bad = (oar_plan_layer){.kind = (oar_plan_layer_kind)9};
    CHECK_STATUS_FAILS(oar_plan_model_add_layer(m, &bad), "kind 9");
    CHECK_STATUS_FAILS(oar_plan_model_add_layer(NULL, &bad), "model is NULL");
    CHECK(oar_plan_model_num_layers(m) == 2);
    CHECK_FAILS(oar_plan_model_layer(m, 2), "layer 2 of 2");
    CHECK_FAILS(oar_plan_model_new("x", 3), "param_bytes 3");
    CHECK_FAILS(oar_plan_model_transformer(&(oar_plan_transformer){.layers = 2, .d_model = 10, .heads = 3,
                                                                   .seq = 4, .vocab = 8}),
                "heads must divide");
    CHECK_FAILS(oar_plan_model_from_graph(NULL, 1), "graph is NULL");
    CHECK_STATUS_FAILS(oar_cluster_preset(&c, "tpu", 8), "unknown kind 'tpu'");
    CHECK_STATUS_FAILS(oar_cluster_preset(&c, "h200", 0), "0 devices");
    CHECK_STATUS_FAILS(oar_plan_result_print(NULL, stdout), "result is NULL");
    oar_plan_model_free(m);
}

/* GPT-3 175B (Brown et al. 2020): 96 layers, d 12288, 96 heads, seq 2048, vocab 50257 (51200
 * padded): 12 L d^2 (1 + 13 / 12d) + (V + s) d parameters = 174.6B. */
static void test_transformer(void) {
    oar_plan_transformer cfg = {.layers = 96, .d_model = 12288, .heads = 96, .seq = 2048, .vocab = 51200};
    oar_plan_model *m = oar_plan_model_transformer(&cfg);
    CHECK(m != NULL);
    if (!m) return;
    double L = 96, h = 12288, closed = 12 * L * h * h * (1 + 13 / (12 * h)) + (51200 + 2048) * h + 2 * h;
    CHECK_NEAR(oar_plan_model_params(m), closed, 1e-6 * closed);
    CHECK(oar_plan_model_num_layers(m) == 2 * 96 + 2);
    /* per layer forward FLOPs: 24 s h^2 + 4 s^2 h (Narayanan et al. 2021, eq. 3 before the 3x) */
    const oar_plan_layer *at = oar_plan_model_layer(m, 1), *mlp = oar_plan_model_layer(m, 2);
    double s = 2048;
    CHECK_NEAR(at->flops + mlp->flops, 24 * s * h * h + 4 * s * s * h, 1);
    CHECK(at->tp_max == 96);
    /* 64 H200s: every plan is predicted, the choice fits, and it ran in well under a second */
    oar_cluster c;
    CHECK(oar_cluster_preset(&c, "h200", 64) == 0);
    oar_plan_options o = {.global_batch = 512};
    oar_plan_result *r = oar_plan_parallel(m, &c, &o);
    CHECK(r != NULL);
    if (r) {
        oar_plan_estimate e;
        const oar_plan_config *k = oar_plan_result_config(r, 0, &e);
        CHECK(k->dp * k->tp * k->pp == 64 && e.fits && e.mem <= c.mem_bytes);
        CHECK(k->tp <= 8); /* tensor parallel stays inside a node */
        CHECK(oar_plan_result_num_pruned(r) > 0);
        oar_plan_result_free(r);
    }
    oar_plan_model_free(m);
}

/* Layers read off a traced MLP: Linear(8, 16) -> ReLU -> Linear(16, 4) at batch 5. */
static void test_from_graph(void) {
    oar_module *mods[] = {oar_linear_new(8, 16, true), oar_relu_new(), oar_linear_new(16, 4, true)};
    oar_module *net = oar_sequential_new(3, mods);
    oar_graph_input_spec spec = {.name = "x", .dtype = OAR_F32, .ndim = 2, .shape = {5, 8}};
    oar_graph *g = oar_trace_module(net, &spec);
    CHECK(g != NULL);
    oar_plan_model *m = g ? oar_plan_model_from_graph(g, 0) : NULL;
    CHECK(m != NULL);
    if (m) {
        CHECK(oar_plan_model_num_layers(m) >= 2);
        CHECK_NEAR(oar_plan_model_params(m), 8 * 16 + 16 + 16 * 4 + 4, 0);
        const oar_plan_layer *l0 = oar_plan_model_layer(m, 0);
        CHECK(l0 && !strcmp(l0->name, "0") && l0->kind == OAR_PLAN_LAYER_LINEAR);
        CHECK_NEAR(l0->flops, 2.0 * 8 * 16, 0); /* per sample */
        /* its weight GEMM: one row a sample, 8 in, 16 out */
        CHECK(l0->gemm_rows == 1 && l0->gemm_k == 8 && l0->gemm_n == 16);
        double flops = 0;
        for (int i = 0; i < oar_plan_model_num_layers(m); i++) flops += oar_plan_model_layer(m, i)->flops;
        CHECK_NEAR(flops, 2.0 * 8 * 16 + 2.0 * 16 * 4, 0);
        const oar_plan_layer *last = oar_plan_model_layer(m, oar_plan_model_num_layers(m) - 1);
        CHECK(!strcmp(last->name, "2") && last->kind == OAR_PLAN_LAYER_LINEAR);
        for (int f = 0; f < OAR_PLAN_OP_FAMILIES; f++) CHECK(l0->family_bytes[f] == 0); /* relu, add: plain */
        CHECK_NEAR(last->out_bytes, 4 * 4, 0);
        CHECK(last->gemm_rows == 1 && last->gemm_k == 16 && last->gemm_n == 4);
    }
    oar_plan_model_free(m);
    oar_graph_free(g);
    /* on [batch, seq, features]: seq rows a sample */
    oar_graph_input_spec s3 = {.name = "x", .dtype = OAR_F32, .ndim = 3, .shape = {5, 3, 8}};
    g = oar_trace_module(net, &s3);
    m = g ? oar_plan_model_from_graph(g, 0) : NULL;
    CHECK(m != NULL);
    if (m) CHECK(oar_plan_model_layer(m, 0)->gemm_rows == 3 && oar_plan_model_layer(m, 0)->gemm_k == 8);
    oar_plan_model_free(m);
    oar_graph_free(g);
    oar_module_free(net);

    /* a pre-norm encoder layer: out_proj and linear2 add their result to the residual stream
     * (residual), linear1 does not; no plan column-splits a residual layer (dist dispatch would
     * then shard the residual stream through every later add) */
    oar_transformer_options o = {.dim_feedforward = 64, .norm_first = true, .activation = OAR_ACTIVATION_GELU};
    oar_module *enc = oar_transformer_encoder_layer_new(16, 2, &o);
    oar_graph_input_spec se = {.name = "x", .dtype = OAR_F32, .ndim = 3, .shape = {8, 4, 16}};
    g = enc ? oar_trace_module(enc, &se) : NULL;
    m = g ? oar_plan_model_from_graph(g, 0) : NULL;
    CHECK(m != NULL);
    int seen = 0;
    for (int i = 0; m && i < oar_plan_model_num_layers(m); i++) {
        const oar_plan_layer *l = oar_plan_model_layer(m, i);
        if (!strcmp(l->name, "self_attn.out_proj") || !strcmp(l->name, "linear2")) {
            CHECK(l->kind == OAR_PLAN_LAYER_LINEAR && l->residual);
            seen++;
        } else if (!strcmp(l->name, "linear1")) {
            CHECK(l->kind == OAR_PLAN_LAYER_LINEAR && !l->residual);
            /* its gelu: [4, 64] in and out a sample, transcendental */
            CHECK_NEAR(l->family_bytes[OAR_PLAN_FAMILY_TRANSCENDENTAL], 2.0 * 4 * 64 * 4, 0);
            seen++;
        } else if (!strcmp(l->name, "norm1")) {
            /* layer_norm: [4, 16] in and out, mean and rstd [4, 1] */
            CHECK_NEAR(l->family_bytes[OAR_PLAN_FAMILY_NORM], (2.0 * 4 * 16 + 2 * 4) * 4, 0);
            CHECK(l->family_bytes[OAR_PLAN_FAMILY_NORM] <= l->bytes);
            seen++;
        } else
            CHECK(!l->residual);
    }
    CHECK(seen == 4);
    if (m) {
        oar_cluster c = toy_cluster(2);
        c.flops = 1e9; /* compute-bound: splitting pays */
        const char *place[32];
        int n = oar_plan_model_num_layers(m);
        oar_plan_config k = {.dp = 1, .tp = 2, .pp = 1, .micro_batches = 1};
        CHECK(n <= 32 && oar_plan_estimate_layout(m, &c, 8, &k, n, place, NULL) == 0);
        for (int i = 0; i < n && i < 32; i++) {
            const oar_plan_layer *l = oar_plan_model_layer(m, i);
            if (l->residual) CHECK(strcmp(place[i], "column"));
            if (!strcmp(l->name, "linear1")) CHECK(!strcmp(place[i], "column"));
            if (!strcmp(l->name, "linear2")) CHECK(!strcmp(place[i], "row"));
        }
    }
    oar_plan_model_free(m);
    oar_graph_free(g);
    oar_module_free(enc);
}

/* path's contents become text (a calibration file a test hand-writes). */
static void spit(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

/* Memory past the cache: of the working set of a node (memory per rank x ranks sharing the
 * cache) the fraction h = 1 / (1 + (set / cache)^4) is warm; weight GEMMs, gradient
 * accumulation and the optimizer are priced h warm + (1 - h) cold. */
static void test_cold_memory(void) {
    oar_cluster c = toy_cluster(2);
    for (int i = 0; i < OAR_PLAN_GEMM_CLASSES; i++)
        c.gemm_rate[i] = 4e10, c.gemm_rate_wide[i] = 2e10, c.gemm_rate_cold[i] = 5e9;
    c.optim_time_per_param = 1e-9, c.optim_time_cold = 4e-9, c.mem_bw_cold = 2e10;
    CHECK(oar_cluster_check(&c) == 0);
    /* one 1024 x 1024 linear layer: 4 MiB each of parameters and gradients, 8 MiB of Adam state:
     * 16 MiB a rank, 32 MiB for the two ranks of the node */
    oar_plan_model *m = oar_plan_model_new("wide", 4);
    oar_plan_layer lw = {.kind = OAR_PLAN_LAYER_LINEAR, .flops = 2.0 * 1024 * 1024, .params = 1024 * 1024,
                         .gemm_rows = 1, .gemm_k = 1024, .gemm_n = 1024};
    CHECK(oar_plan_model_add_layer(m, &lw) == 0);
    oar_plan_config k = {.dp = 2, .tp = 1, .pp = 1, .micro_batches = 2};
    oar_plan_estimate warm, e;
    CHECK(oar_plan_estimate_config(m, &c, 8, &k, &warm) == 0); /* no cache given: all warm */
    CHECK_NEAR(warm.mem, 16.0 * 1024 * 1024, 1e-6);
    CHECK(warm.cache_fraction == 1);
    const double P = 1024.0 * 1024, gemm_flops = 2 * 2 * (2.0 * P * 2); /* 2 micro-batches, 2 GEMMs of 2 rows */
    CHECK_NEAR(warm.compute_time, gemm_flops / 2e10, 1e-15);
    CHECK_NEAR(warm.optim_time, P * 1e-9, 1e-15);
    CHECK_NEAR(warm.accum_time, P * 4 * 3 / 1e11, 1e-15);
    c.cache_bytes = 1e12; /* a set that is nothing to the cache: priced as all warm */
    CHECK(oar_plan_estimate_config(m, &c, 8, &k, &e) == 0);
    CHECK(e.cache_fraction > 1 - 1e-15);
    CHECK_NEAR(e.step_time, warm.step_time, 1e-15);
    c.cache_bytes = 32.0 * 1024 * 1024; /* the set itself: half warm */
    CHECK(oar_plan_estimate_config(m, &c, 8, &k, &e) == 0);
    CHECK_NEAR(e.cache_fraction, 0.5, 1e-15);
    c.cache_bytes = 16.0 * 1024 * 1024; /* half the 32 MiB set: 1 / (1 + 2^4) warm */
    CHECK(oar_plan_estimate_config(m, &c, 8, &k, &e) == 0);
    const double h = 1.0 / 17;
    CHECK_NEAR(e.cache_fraction, h, 1e-15);
    CHECK_NEAR(e.compute_time, h * gemm_flops / 2e10 + (1 - h) * gemm_flops / 5e9, 1e-15);
    CHECK_NEAR(e.optim_time, P * (h * 1e-9 + (1 - h) * 4e-9), 1e-15);
    CHECK_NEAR(e.accum_time, P * 4 * 3 * (h / 1e11 + (1 - h) / 2e10), 1e-15);
    CHECK(e.mem == warm.mem && e.step_time > warm.step_time);
    /* the planner's printout names the accumulation term and the cache's share */
    oar_plan_result *r = oar_plan_parallel(m, &c, &(oar_plan_options){.global_batch = 8});
    CHECK(r != NULL);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    CHECK(f && r && oar_plan_result_print(r, f) == 0);
    if (f) fclose(f);
    CHECK(text && strstr(text, "gradient accumulation") && strstr(text, "% of its working set"));
    free(text);
    oar_plan_result_free(r);
    /* without the cold rates, a cache alone changes nothing */
    oar_cluster bare = toy_cluster(2);
    for (int i = 0; i < OAR_PLAN_GEMM_CLASSES; i++) bare.gemm_rate[i] = 4e10, bare.gemm_rate_wide[i] = 2e10;
    bare.optim_time_per_param = 1e-9, bare.cache_bytes = 1;
    CHECK(oar_plan_estimate_config(m, &bare, 8, &k, &e) == 0);
    CHECK_NEAR(e.step_time, warm.step_time, 1e-15);
    CHECK(e.cache_fraction < 1e-6);
    oar_plan_model_free(m);
    /* bad cold fields */
    c.cache_bytes = -1;
    CHECK_STATUS_FAILS(oar_cluster_check(&c), "cache bytes -1");
    c.cache_bytes = 1e6, c.mem_bw_cold = NAN;
    CHECK_STATUS_FAILS(oar_cluster_check(&c), "mem_bw_cold nan");
    c.mem_bw_cold = 1e10, c.optim_time_cold = INFINITY;
    CHECK_STATUS_FAILS(oar_cluster_check(&c), "optim_time_cold inf");
    c.optim_time_cold = 0, c.gemm_rate_cold[4] = 0;
    CHECK_STATUS_FAILS(oar_cluster_check(&c), "1 of the 9 gemm_rate_cold entries are 0");
    c.gemm_rate_cold[4] = -5;
    CHECK_STATUS_FAILS(oar_cluster_check(&c), "gemm_rate_cold[4] -5");
}

static void test_calib_file(void) {
    char path[] = "/tmp/oar_plan_calibXXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0) return;
    close(fd);
    oar_plan_calib c = {.matmul_flops = 5e10, .ew_bw = 1e10, .op_overhead = 2e-6, .alpha = 3e-6, .beta = 1e-10,
                        .ranks = 2};
    CHECK(oar_plan_calib_save(&c, path) == 0);
    oar_plan_calib d;
    CHECK(oar_plan_calib_load(&d, path) == 0);
    CHECK(d.matmul_flops == c.matmul_flops && d.ew_bw == c.ew_bw && d.op_overhead == c.op_overhead &&
          d.alpha == c.alpha && d.beta == c.beta && d.ranks == 2);
    oar_cluster cl;
    CHECK(oar_cluster_from_calib(&cl, &d, 4, 1e9) == 0);
    CHECK_NEAR(cl.intra_bw, 1e10, 1);
    CHECK(cl.flops == 5e10 && cl.devices_per_node == 4);
    spit(path, "{\"format\": \"oar-plan-calibration-1\", \"matmul_flops\": -3}");
    CHECK_STATUS_FAILS(oar_plan_calib_load(&d, path), "\"matmul_flops\" is missing or not a positive");
    spit(path, "not json");
    CHECK_STATUS_FAILS(oar_plan_calib_load(&d, path), "is not JSON");
    unlink(path);
    CHECK_STATUS_FAILS(oar_plan_calib_load(&d, path), "cannot open");
    /* version 2 with the measured extras: Adam's time per element and the GEMM rates, carried
     * into the cluster */
    oar_plan_calib c2 = c;
    c2.optim_time = 1.5e-9, c2.sync = 2e-4, c2.sync_phase = 3e-3;
    for (int i = 0; i < OAR_PLAN_GEMM_CLASSES; i++) c2.gemm_rate[i] = 1e9 * (i + 1);
    CHECK(oar_plan_calib_save(&c2, path) == 0);
    CHECK(oar_plan_calib_load(&d, path) == 0);
    CHECK(d.optim_time == 1.5e-9 && d.sync == 2e-4 && d.gemm_rate[0] == 1e9 && d.gemm_rate[8] == 9e9);
    CHECK(oar_cluster_from_calib(&cl, &d, 4, 1e9) == 0);
    CHECK(cl.optim_time_per_param == 1.5e-9 && cl.sync_lat == 2e-4 && cl.sync_phase == 3e-3 && cl.gemm_rate[3] == 4e9);
    CHECK(d.gemm_rate_wide[0] == 0 && cl.gemm_rate_wide[0] == 0); /* a version 2 file without the wide table */
    for (int i = 0; i < OAR_PLAN_GEMM_CLASSES; i++) c2.gemm_rate_wide[i] = 0.5e9 * (i + 1);
    CHECK(oar_plan_calib_save(&c2, path) == 0);
    CHECK(oar_plan_calib_load(&d, path) == 0);
    CHECK(d.gemm_rate_wide[0] == 0.5e9 && d.gemm_rate_wide[8] == 4.5e9 && d.gemm_rate[8] == 9e9);
    CHECK(oar_cluster_from_calib(&cl, &d, 4, 1e9) == 0);
    CHECK(cl.gemm_rate_wide[3] == 2e9);
    /* op families: those measured are written, keyed by name */
    c2.family_bw[OAR_PLAN_FAMILY_NORM] = 1.25e10, c2.family_bw[OAR_PLAN_FAMILY_SELECT] = 3e10;
    CHECK(oar_plan_calib_save(&c2, path) == 0);
    CHECK(oar_plan_calib_load(&d, path) == 0);
    CHECK(d.family_bw[OAR_PLAN_FAMILY_NORM] == 1.25e10 && d.family_bw[OAR_PLAN_FAMILY_SELECT] == 3e10 &&
          d.family_bw[OAR_PLAN_FAMILY_SOFTMAX] == 0);
    CHECK(oar_cluster_from_calib(&cl, &d, 4, 1e9) == 0);
    CHECK(cl.family_bw[OAR_PLAN_FAMILY_NORM] == 1.25e10);
    spit(path, "{\"format\": \"oar-plan-calibration-2\", \"matmul_flops\": 3, \"ew_bw\": 2, \"op_overhead\": 0, "
          "\"alpha\": 0, \"beta\": 1e-9, \"ranks\": 2, \"family_bw\": {\"softmax\": -2}}");
    CHECK_STATUS_FAILS(oar_plan_calib_load(&d, path), "family_bw \"softmax\" is not a positive number");
    spit(path, "{\"format\": \"oar-plan-calibration-2\", \"matmul_flops\": 3, \"ew_bw\": 2, \"op_overhead\": 0, "
          "\"alpha\": 0, \"beta\": 1e-9, \"ranks\": 2, \"family_bw\": [1]}");
    CHECK_STATUS_FAILS(oar_plan_calib_load(&d, path), "\"family_bw\" is not an object");
    spit(path, "{\"format\": \"oar-plan-calibration-2\", \"matmul_flops\": 3, \"ew_bw\": 2, \"op_overhead\": 0, "
          "\"alpha\": 0, \"beta\": 1e-9, \"ranks\": 2, \"gemm_rates_wide\": [1, 2, 3, 4, 5, 6, 7, 8]}");
    CHECK_STATUS_FAILS(oar_plan_calib_load(&d, path), "beside \"gemm_rates\"");
    spit(path, "{\"format\": \"oar-plan-calibration-2\", \"matmul_flops\": 3, \"ew_bw\": 2, \"op_overhead\": 0, "
          "\"alpha\": 0, \"beta\": 1e-9, \"ranks\": 2, \"gemm_dims\": [4, 8, 16, 32, 64, 128, 256, 512], "
          "\"gemm_rates\": [1, 2, 3, 4, 5, 6, 7, 8], \"gemm_rates_wide\": [1, 2, 3, 0, 5, 6, 7, 8]}");
    CHECK_STATUS_FAILS(oar_plan_calib_load(&d, path), "gemm_rates_wide[3] is not a positive number");
    /* tables written before the 2-row class: 8 entries from 4 rows; the 2-row class gets the
     * 4-row rate, as those files priced 2 rows */
    spit(path, "{\"format\": \"oar-plan-calibration-2\", \"matmul_flops\": 3, \"ew_bw\": 2, \"op_overhead\": 0, "
          "\"alpha\": 0, \"beta\": 1e-9, \"ranks\": 2, \"gemm_dims\": [4, 8, 16, 32, 64, 128, 256, 512], "
          "\"gemm_rates\": [1, 2, 3, 4, 5, 6, 7, 8], \"gemm_rates_wide\": [11, 12, 13, 14, 15, 16, 17, 18]}");
    CHECK(oar_plan_calib_load(&d, path) == 0);
    CHECK(d.gemm_rate[0] == 1 && d.gemm_rate[1] == 1 && d.gemm_rate[8] == 8);
    CHECK(d.gemm_rate_wide[0] == 11 && d.gemm_rate_wide[1] == 11 && d.gemm_rate_wide[8] == 18);
    spit(path, "{\"format\": \"oar-plan-calibration-2\", \"matmul_flops\": 3, \"ew_bw\": 2, \"op_overhead\": 0, "
          "\"alpha\": 0, \"beta\": 1e-9, \"ranks\": 2, \"gemm_dims\": [4, 8, 16, 32, 64, 128, 256, 512], "
          "\"gemm_rates\": [1, 2, 3, 4, 5, 6, 7, 8], \"gemm_rates_wide\": [1, 2, 3, 4, 5, 6, 7, 8, 9]}");
    CHECK_STATUS_FAILS(oar_plan_calib_load(&d, path), "\"gemm_rates_wide\" must be an array of 8 numbers");
    spit(path, "{\"format\": \"oar-plan-calibration-2\", \"matmul_flops\": 3, \"ew_bw\": 2, \"op_overhead\": 0, "
          "\"alpha\": 0, \"beta\": 1e-9, \"ranks\": 2, \"gemm_dims\": [2, 8, 16, 32, 64, 128, 256, 512], "
          "\"gemm_rates\": [1, 2, 3, 4, 5, 6, 7, 8]}");
    CHECK_STATUS_FAILS(oar_plan_calib_load(&d, path), "gemm_dims[0] is not 4");
    /* a version 1 file: no extras, left 0 */
    spit(path, "{\"format\": \"oar-plan-calibration-1\", \"matmul_flops\": 3, \"ew_bw\": 2, \"op_overhead\": 0, "
          "\"alpha\": 0, \"beta\": 1e-9, \"ranks\": 2}");
    CHECK(oar_plan_calib_load(&d, path) == 0);
    CHECK(d.matmul_flops == 3 && d.optim_time == 0 && d.gemm_rate[0] == 0);
    /* bad extras */
    spit(path, "{\"format\": \"oar-plan-calibration-2\", \"matmul_flops\": 3, \"ew_bw\": 2, \"op_overhead\": 0, "
          "\"alpha\": 0, \"beta\": 1e-9, \"ranks\": 2, \"gemm_dims\": [4, 8], \"gemm_rates\": [1, 2]}");
    CHECK_STATUS_FAILS(oar_plan_calib_load(&d, path), "must be arrays of 9 numbers (or 8, from dimension 4)");
    spit(path, "{\"format\": \"oar-plan-calibration-2\", \"matmul_flops\": 3, \"ew_bw\": 2, \"op_overhead\": 0, "
          "\"alpha\": 0, \"beta\": 1e-9, \"ranks\": 2, \"gemm_dims\": [4, 8, 16, 32, 64, 128, 256, 1024], "
          "\"gemm_rates\": [1, 2, 3, 4, 5, 6, 7, 8]}");
    CHECK_STATUS_FAILS(oar_plan_calib_load(&d, path), "gemm_dims[7] is not 512");
    spit(path, "{\"format\": \"oar-plan-calibration-2\", \"matmul_flops\": 3, \"ew_bw\": 2, \"op_overhead\": 0, "
          "\"alpha\": 0, \"beta\": 1e-9, \"ranks\": 2, \"gemm_dims\": [4, 8, 16, 32, 64, 128, 256, 512], "
          "\"gemm_rates\": [1, 2, 3, 4, 5, 6, 7, -8]}");
    CHECK_STATUS_FAILS(oar_plan_calib_load(&d, path), "gemm_rates[7] is not a positive number");
    spit(path, "{\"format\": \"oar-plan-calibration-2\", \"matmul_flops\": 3, \"ew_bw\": 2, \"op_overhead\": 0, "
          "\"alpha\": 0, \"beta\": 1e-9, \"ranks\": 2, \"optim_time\": -1}");
    CHECK_STATUS_FAILS(oar_plan_calib_load(&d, path), "\"optim_time\" is not a positive number");
    spit(path, "{\"format\": \"oar-plan-calibration-2\", \"matmul_flops\": 3, \"ew_bw\": 2, \"op_overhead\": 0, "
          "\"alpha\": 0, \"beta\": 1e-9, \"ranks\": 2, \"sync\": \"x\"}");
    CHECK_STATUS_FAILS(oar_plan_calib_load(&d, path), "\"sync\" is not a non-negative number");
    /* memory past the cache: written when measured, carried into the cluster */
    oar_plan_calib c3 = c2;
    c3.cache_bytes = 32 << 20, c3.ew_bw_cold = 2e10, c3.optim_time_cold = 3e-9;
    for (int i = 0; i < OAR_PLAN_GEMM_CLASSES; i++) c3.gemm_rate_cold[i] = 1e8 * (i + 1);
    CHECK(oar_plan_calib_save(&c3, path) == 0);
    CHECK(oar_plan_calib_load(&d, path) == 0);
    CHECK(d.cache_bytes == 32 << 20 && d.ew_bw_cold == 2e10 && d.optim_time_cold == 3e-9 &&
          d.gemm_rate_cold[0] == 1e8 && d.gemm_rate_cold[8] == 9e8);
    CHECK(oar_cluster_from_calib(&cl, &d, 2, 1e9) == 0);
    CHECK(cl.cache_bytes == 32 << 20 && cl.mem_bw_cold == 2e10 && cl.optim_time_cold == 3e-9 &&
          cl.gemm_rate_cold[2] == 3e8);
    spit(path, "{\"format\": \"oar-plan-calibration-2\", \"matmul_flops\": 3, \"ew_bw\": 2, \"op_overhead\": 0, "
          "\"alpha\": 0, \"beta\": 1e-9, \"ranks\": 2, \"ew_bw_cold\": 0}");
    CHECK_STATUS_FAILS(oar_plan_calib_load(&d, path), "\"ew_bw_cold\" is not a positive number");
    spit(path, "{\"format\": \"oar-plan-calibration-2\", \"matmul_flops\": 3, \"ew_bw\": 2, \"op_overhead\": 0, "
          "\"alpha\": 0, \"beta\": 1e-9, \"ranks\": 2, \"gemm_rates_cold\": [1, 2, 3]}");
    CHECK_STATUS_FAILS(oar_plan_calib_load(&d, path), "\"gemm_rates_cold\" must be an array of 9 numbers");
    spit(path, "{\"format\": \"oar-plan-calibration-2\", \"matmul_flops\": 3, \"ew_bw\": 2, \"op_overhead\": 0, "
          "\"alpha\": 0, \"beta\": 1e-9, \"ranks\": 2, \"gemm_rates_cold\": [1, 2, 3, 4, 5, 6, 7, 8, \"9\"]}");
    CHECK_STATUS_FAILS(oar_plan_calib_load(&d, path), "gemm_rates_cold[8] is not a positive number");
    spit(path, "{\"format\": \"oar-plan-calibration-9\"}");
    CHECK_STATUS_FAILS(oar_plan_calib_load(&d, path), "format is not");
    unlink(path);
    c.beta = 0;
    CHECK_STATUS_FAILS(oar_cluster_from_calib(&cl, &c, 2, 1e9), "calibrate under mpirun");
    CHECK_STATUS_FAILS(oar_plan_calib_save(&c, "/nonexistent-dir/x.json"), "nonexistent");
    /* a real calibration of this machine's kernels: positive, finite rates */
    oar_plan_calib m;
    CHECK(oar_plan_calibrate(&m) == 0);
    CHECK(m.matmul_flops > 1e6 && isfinite(m.matmul_flops) && m.ew_bw > 1e6 && m.op_overhead > 0 && m.ranks == 1);
    CHECK(m.optim_time > 0 && isfinite(m.optim_time));
    for (int i = 0; i < OAR_PLAN_GEMM_CLASSES; i++)
        CHECK(m.gemm_rate[i] > 1e6 && isfinite(m.gemm_rate[i]) && m.gemm_rate_wide[i] > 1e6 &&
              isfinite(m.gemm_rate_wide[i]));
    for (int i = 0; i < OAR_PLAN_OP_FAMILIES; i++) CHECK(m.family_bw[i] > 1e6 && isfinite(m.family_bw[i]));
    /* the cold figures: all measured where the OS reports a last-level cache (to 128 MiB), else none */
    bool cold = m.cache_bytes > 0;
    CHECK(cold == (m.ew_bw_cold > 0) && cold == (m.optim_time_cold > 0));
    for (int i = 0; i < OAR_PLAN_GEMM_CLASSES; i++) CHECK(cold == (m.gemm_rate_cold[i] > 1e6) && isfinite(m.gemm_rate_cold[i]));
    if (cold) CHECK(m.cache_bytes <= 256.0 * 1024 * 1024 && isfinite(m.ew_bw_cold) && isfinite(m.optim_time_cold));
    CHECK_STATUS_FAILS(oar_plan_calibrate(NULL), "out is NULL");
}

/* Every allocation of building a model, planning and printing fails in turn: "out of memory",
 * nothing leaks, and the next run succeeds. */
static int plan_step(void) {
    oar_plan_model *m = oar_plan_model_transformer(&(oar_plan_transformer){.layers = 2, .d_model = 64, .heads = 4,
                                                                           .seq = 16, .vocab = 100});
    if (!m) return OAR_ERR_NOMEM;
    oar_cluster c;
    oar_cluster_preset(&c, "h200", 8);
    oar_plan_result *r = oar_plan_parallel(m, &c, &(oar_plan_options){.global_batch = 16});
    int st = r ? 0 : OAR_ERR_NOMEM;
    oar_plan_result_free(r);
    /* the layout of one configuration */
    const char *place[8];
    int stage[8];
    if (!st) st = oar_plan_estimate_layout(m, &c, 16, &(oar_plan_config){.dp = 2, .tp = 2, .pp = 2, .micro_batches = 2},
                                           oar_plan_model_num_layers(m), place, stage);
    oar_plan_model_free(m);
    /* a calibration file with every field */
    oar_plan_calib cal = {.matmul_flops = 1e10, .ew_bw = 1e9, .op_overhead = 1e-6, .alpha = 1e-5, .beta = 1e-9,
                          .ranks = 2, .optim_time = 1e-9, .sync = 1e-4, .sync_phase = 1e-3};
    for (int i = 0; i < OAR_PLAN_GEMM_CLASSES; i++) cal.gemm_rate[i] = 1e9, cal.gemm_rate_cold[i] = 1e8;
    cal.cache_bytes = 1 << 20, cal.ew_bw_cold = 1e9, cal.optim_time_cold = 2e-9;
    char path[] = "/tmp/oar_plan_allocXXXXXX";
    int fd = st ? -1 : mkstemp(path);
    if (!st && fd < 0) return OAR_ERR_IO;
    if (fd >= 0) close(fd);
    if (!st) st = oar_plan_calib_save(&cal, path);
    if (!st) st = oar_plan_calib_load(&cal, path);
    if (fd >= 0) unlink(path);
    return st;
}

static void test_alloc_failures(void) {
    CHECK(plan_step() == 0);
    oar_set_allocator(failing_alloc, NULL);
    int failures, n = fail_each_allocation_with(plan_step, &failures, (fail_loop_opts){0});
    oar_set_allocator(NULL, NULL);
    CHECK(n > 5 && failures == n);
}

int main(void) {
    RUN(test_closed_forms);
    RUN(test_memory_per_rank);
    RUN(test_bad_configs);
    RUN(test_search_known_optima);
    RUN(test_placements);
    RUN(test_failure_paths);
    RUN(test_transformer);
    RUN(test_from_graph);
    RUN(test_cold_memory);
    RUN(test_calib_file);
    RUN(test_measured_rates);
    RUN(test_layout);
    RUN(test_alloc_failures);
    return test_summary();
}

/* Data-parallel training of a small transformer over MPI: two pre-norm
 * encoder layers (d 128, 4 heads, feed-forward 512, causal, sequence 64),
 * a regression loss, SGD. Every rank takes batch / world_size sequences
 * of one global batch of 16; parameters are replicated dtensors, gradients
 * are all-reduced in buckets. Rank 0 prints the step time (the median over
 * the steps; the mean on a comment line), the throughput
 * and the bytes this rank handed to collectives per step against the
 * recipe's analytic minimum payload (the gradient bytes; a ring all-reduce
 * then moves 2 (n-1)/n of it). The peer is the same
 * program on one rank: bench/run_dist.sh runs both and prints the ratio.
 * With "tp" as second argument it runs Megatron tensor parallelism
 * instead (attention projections and feed-forward split over the ranks,
 * the whole batch on every rank) and compares the bytes with Megatron's
 * minimum: one all-reduce of the activations [B, L, d] per block (attention,
 * feed-forward) in forward and one in backward.
 * Data parallel reduces gradients with an oar_dist_reducer, in buckets
 * overlapped with backward (OAR_BENCH_BUCKET bytes, default the reducer's),
 * or with "sync" after backward (oar_dist_reduce_grads); it also prints
 * the time per step spent in that call (communication not hidden).
 * OAR_BENCH_PER_RANK_BATCH=B measures weak scaling instead, the usual way
 * data-parallel throughput is quoted (PyTorch DDP's scaling figures): every
 * rank takes B sequences, so the global batch grows with the ranks.
 * Usage: mpirun -np N bench_dist [steps] [tp|sync|s2s] */
#include <oar/oar.h>

#include "bench_median.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* "s2s": Shard(0) -> Shard(1) of a [4096, 1024] f32 dtensor, as one
 * all-to-all against the old route through Replicate (all-gather, then a
 * local slice), alternating; prints the time of each. */
static int s2s(int steps) {
    int world = oar_dist_world_size();
    oar_mesh *mesh = oar_mesh_create(1, (int64_t[]){world}, NULL, NULL);
    oar_tensor *g = oar_randn(OAR_F32, 2, (int64_t[]){4096, 1024});
    oar_tensor *x = mesh && g ? oar_shard_tensor(g, mesh, (oar_placement[]){oar_shard(0)}) : NULL;
    if (!x) return fprintf(stderr, "s2s: %s\n", oar_last_error()), 1;
    double t_a2a = 0, t_via_r = 0;
    for (int s = 0; s < steps + 1; s++) {
        oar_pool *p = oar_pool_push();
        double t0 = now();
        oar_tensor *y = oar_reshard(x, mesh, (oar_placement[]){oar_shard(1)});
        double t1 = now();
        oar_tensor *r = oar_reshard(x, mesh, (oar_placement[]){oar_replicate()});
        oar_tensor *z = r ? oar_reshard(r, mesh, (oar_placement[]){oar_shard(1)}) : NULL;
        double t2 = now();
        if (!y || !z) return fprintf(stderr, "s2s: %s\n", oar_last_error()), 1;
        if (s) t_a2a += t1 - t0, t_via_r += t2 - t1; /* the first is warm-up */
        oar_pool_pop(p);
    }
    if (oar_dist_rank() == 0) {
        printf("oar s2s%d_all_to_all_ms %.3f ms\n", world, t_a2a / steps * 1e3);
        printf("oar s2s%d_via_replicate_ms %.3f ms\n", world, t_via_r / steps * 1e3);
        printf("# each rank sends %.0f bytes by all-to-all, %.0f through all-gather\n",
               4096.0 * 1024 * 4 / world * (world - 1) / world, 4096.0 * 1024 * 4 / world * (world - 1));
    }
    oar_mesh_release(mesh);
    oar_dist_finalize();
    return 0;
}

int main(int argc, char **argv) {
    if (oar_dist_init(&argc, &argv)) return fprintf(stderr, "%s\n", oar_last_error()), 1;
    if (argc > 2 && !strcmp(argv[2], "s2s")) return s2s(atoi(argv[1]));
    int world = oar_dist_world_size(), me = oar_dist_rank();
    int steps = argc > 1 ? atoi(argv[1]) : 10, warm = 2;
    if (steps < 1) steps = 1;
    bool tp = argc > 2 && !strcmp(argv[2], "tp"), sync = argc > 2 && !strcmp(argv[2], "sync");
    const char *per_rank = getenv("OAR_BENCH_PER_RANK_BATCH");
    const int64_t batch = per_rank && atoi(per_rank) > 0 ? (int64_t)atoi(per_rank) * world : 16, seq = 64,
                  d = 128;
    oar_mesh *mesh = oar_mesh_create(1, (int64_t[]){world}, NULL, (const char *const[]){"dp"});
    oar_manual_seed(1);
    oar_transformer_options o = {.dim_feedforward = 512, .norm_first = true, .causal = true};
    oar_module *layers[2] = {oar_transformer_encoder_layer_new(d, 4, &o),
                             oar_transformer_encoder_layer_new(d, 4, &o)};
    oar_module *model = oar_sequential_new(2, layers);
    const oar_parallel_rule megatron[4] = {
        {"*.self_attn.in_proj_*", OAR_PARALLEL_COLWISE}, {"*.self_attn.out_proj.*", OAR_PARALLEL_ROWWISE},
        {"*.linear1.*", OAR_PARALLEL_COLWISE}, {"*.linear2.*", OAR_PARALLEL_ROWWISE}};
    if (!mesh || !model || oar_parallelize(model, mesh, 0, tp ? 4 : 0, megatron))
        return fprintf(stderr, "setup: %s\n", oar_last_error()), 1;
    oar_tensor *params[64];
    int np = oar_module_parameters(model, params, 64);
    int64_t param_bytes = 4 * oar_module_num_elements(model);
    oar_optimizer *opt = oar_sgd_new(np, params, &(oar_sgd_options){.lr = 1e-3});
    const char *bucket = getenv("OAR_BENCH_BUCKET");
    oar_dist_reducer *red = tp || sync ? NULL : oar_dist_reducer_new(np, params, bucket ? (size_t)atol(bucket) : 0);
    double t_reduce = 0;
    int overlapped = 0;
    oar_tensor *x = oar_randn(OAR_F32, 3, (int64_t[]){batch, seq, d});
    oar_tensor *y = oar_randn(OAR_F32, 3, (int64_t[]){batch, seq, d});
    oar_placement rows[1] = {tp ? oar_replicate() : oar_shard(0)};
    oar_tensor *xd = oar_shard_tensor(x, mesh, rows), *yd = oar_shard_tensor(y, mesh, rows);
    double t0 = 0, loss = 0, *step_s = calloc((size_t)steps, sizeof *step_s);
    int64_t b0 = 0;
    if (!step_s) return fprintf(stderr, "out of memory\n"), 1;
    for (int s = 0; s < warm + steps; s++) {
        if (s == warm) {
            t0 = now();
            b0 = oar_dist_bytes_moved();
        }
        double ts = now();
        oar_pool *p = oar_pool_push();
        oar_optim_zero_grad(opt);
        oar_tensor *diff = oar_sub(oar_module_forward(model, xd), yd);
        oar_tensor *l = oar_mul_scalar(oar_sum(oar_square(diff), 0, NULL, false), 1.0 / (double)(batch * seq * d));
        if (!l || oar_backward(l, NULL)) return fprintf(stderr, "step %d: %s\n", s, oar_last_error()), 1;
        double tr = now();
        if ((red ? oar_dist_reducer_wait(red) : oar_dist_reduce_grads(np, params, 0)) < 0 || oar_optim_step(opt))
            return fprintf(stderr, "step %d: %s\n", s, oar_last_error()), 1;
        if (s >= warm) t_reduce += now() - tr, overlapped += oar_dist_reducer_overlapped(red);
        loss = oar_tensor_item(oar_unshard(l));
        oar_pool_pop(p);
        if (s >= warm) step_s[s - warm] = now() - ts;
    }
    double mean = (now() - t0) / steps, dt = bench_median(step_s, steps);
    free(step_s);
    double sent = (double)(oar_dist_bytes_moved() - b0) / steps;
    /* the payload the recipe must hand to all-reduce per step: the gradients
     * (data parallel) or, per layer, four activations (tensor parallel) */
    double minimum = world == 1 ? 0 : tp ? 2 * 4 * (double)(batch * seq * d * 4) : (double)param_bytes;
    if (me == 0) {
        const char *mode = tp ? "tp" : sync ? "dpsync" : "dp";
        printf("oar %s%d_step_ms %.2f ms\n", mode, world, dt * 1e3);
        printf("# %s%d mean step %.2f ms (the figures above are medians over the steps)\n", mode, world, mean * 1e3);
        printf("oar %s%d_samples_per_s %.2f 1/s\n", mode, world, (double)batch / dt);
        if (!tp) printf("oar %s%d_reduce_wait_ms %.3f ms\n", mode, world, t_reduce / steps * 1e3);
        if (red) printf("# buckets started during backward per step: %.1f\n", (double)overlapped / steps);
        printf("# %s, ranks %d, global batch %lld, loss %.6f, fallbacks %lld, bytes handed to collectives per step %.0f "
               "(the recipe's minimum payload %.0f; parameter bytes %lld)\n",
               mode, world, (long long)batch, loss, (long long)oar_dist_fallback_count(), sent, minimum, (long long)param_bytes);
    }
    oar_dist_reducer_free(red);
    oar_optim_free(opt);
    oar_module_free(model);
    oar_mesh_release(mesh);
    oar_dist_finalize();
    return 0;
}

/* Pipeline parallel: the bubble of GPipe and 1F1B against the theory,
 * and throughput against one rank. The model is 8 blocks of Linear
 * 256 x 256 + tanh (f32), a batch of 64 rows, SGD; with N ranks it is cut
 * into N stages along a 1-d mesh (N = 1: the whole model, one stage, the
 * baseline). For each m given and each schedule it prints the median step
 * time (rank 0), every stage's busy time (forward and backward work of
 * oar_pipeline_times) and its bubble 1 - busy/step, the mean bubble, the
 * theoretical (p - 1)/(m + p - 1) of equal stages, the peak stash and the
 * samples per second. bench/run_dist.sh pipeline runs it on 1, 2 and 4
 * ranks and prints throughput against 1 rank.
 * Usage: mpirun -np N bench_pipeline [steps] [m ...] */
#include <oar/oar.h>

#include "bench_median.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NBLOCK = 8, WIDTH = 256, BATCH = 64 };

static oar_tensor *mse(oar_tensor *out, oar_tensor *target, void *ctx) {
    (void)ctx;
    return oar_mean(oar_square(oar_sub(out, target)), 0, NULL, false);
}

/* Every rank's value of v, on every rank. */
static oar_tensor *gather_ranks(double v, oar_mesh *mesh) {
    oar_tensor *mine = oar_full(OAR_F64, 1, (int64_t[]){1}, v);
    return oar_unshard(oar_dtensor_from_local(mine, mesh, (oar_placement[]){oar_shard(0)}, NULL));
}

static int bench(oar_mesh *mesh, int m, oar_pipe_schedule sched, int steps, oar_tensor *x, oar_tensor *y) {
    int p = (int)oar_mesh_shape(mesh)[0], me = oar_dist_rank();
    oar_manual_seed(1);
    oar_module *blocks[NBLOCK];
    for (int k = 0; k < NBLOCK; k++)
        blocks[k] = oar_sequential_new(2, (oar_module *[]){oar_linear_new(WIDTH, WIDTH, true), oar_tanh_new()});
    oar_pipeline *pl = oar_pipeline_new(NBLOCK, blocks, mesh, 0, m, sched, mse, NULL);
    if (!pl) return fprintf(stderr, "bench_pipeline: %s\n", oar_last_error()), 1;
    int stage = oar_pipeline_stage(pl), k0 = stage * (NBLOCK / p);
    oar_tensor *params[2 * NBLOCK];
    int n = 0;
    for (int k = k0; k < k0 + NBLOCK / p; k++) n += oar_module_parameters(blocks[k], params + n, 2);
    oar_optimizer *opt = oar_sgd_new(n, params, &(oar_sgd_options){.lr = 1e-3});
    double *step_s = calloc((size_t)steps, sizeof *step_s), *busy_s = calloc((size_t)steps, sizeof *busy_s);
    int rc = 0;
    for (int s = -2; s < steps && !rc; s++) { /* two warm-up steps */
        oar_pool *pool = oar_pool_push();
        oar_optim_zero_grad(opt);
        if (oar_pipeline_step(pl, x, y, NULL) || oar_optim_step(opt))
            rc = fprintf(stderr, "bench_pipeline: %s\n", oar_last_error());
        if (s >= 0) oar_pipeline_times(pl, &busy_s[s], &step_s[s]);
        oar_pool_pop(pool);
    }
    if (!rc) {
        double step = bench_median(step_s, steps), busy = bench_median(busy_s, steps);
        oar_pool *pool = oar_pool_push();
        const double *all_busy = oar_tensor_data(oar_contiguous(gather_ranks(busy, mesh)));
        const double *all_step = oar_tensor_data(oar_contiguous(gather_ranks(step, mesh)));
        int peak = oar_pipeline_peak_stash(pl);
        if (me == 0) {
            double mean_bubble = 0;
            printf("pipeline p=%d m=%-2d %-5s step %8.2f ms  %6.0f samples/s  peak stash %d (stage 0)  busy/bubble per stage:",
                   p, m, sched == OAR_PIPE_GPIPE ? "gpipe" : "1f1b", 1e3 * step, BATCH / step, peak);
            for (int r = 0; r < p; r++) {
                double b = 1 - all_busy[r] / all_step[r];
                mean_bubble += b / p;
                printf(" %.1f/%.2f", 1e3 * all_busy[r], b);
            }
            printf("  bubble %.3f theory %.3f\n", mean_bubble, (double)(p - 1) / (m + p - 1));
        }
        oar_pool_pop(pool);
    }
    free(step_s);
    free(busy_s);
    oar_optim_free(opt);
    oar_pipeline_free(pl);
    for (int k = 0; k < NBLOCK; k++) oar_module_free(blocks[k]);
    return rc;
}

int main(int argc, char **argv) {
    if (oar_dist_init(&argc, &argv)) return fprintf(stderr, "%s\n", oar_last_error()), 1;
    int world = oar_dist_world_size();
    int steps = argc > 1 ? atoi(argv[1]) : 10;
    if (steps < 1) steps = 1;
    int ms[16], nm = 0;
    for (int i = 2; i < argc && nm < 16; i++) ms[nm++] = atoi(argv[i]);
    if (!nm) {
        ms[nm++] = 1, ms[nm++] = 4, ms[nm++] = 8;
    }
    oar_mesh *mesh = oar_mesh_create(1, (int64_t[]){world}, NULL, (const char *const[]){"pp"});
    if (!mesh) return fprintf(stderr, "%s\n", oar_last_error()), 1;
    oar_manual_seed(2);
    oar_pool *pool = oar_pool_push();
    oar_tensor *x = oar_randn(OAR_F32, 2, (int64_t[]){BATCH, WIDTH});
    oar_tensor *y = oar_randn(OAR_F32, 2, (int64_t[]){BATCH, WIDTH});
    int rc = 0;
    for (int i = 0; i < nm && !rc; i++) {
        rc = bench(mesh, ms[i], OAR_PIPE_GPIPE, steps, x, y);
        if (!rc && world > 1) rc = bench(mesh, ms[i], OAR_PIPE_1F1B, steps, x, y);
    }
    oar_pool_pop(pool);
    oar_mesh_release(mesh);
    oar_dist_finalize();
    return rc;
}

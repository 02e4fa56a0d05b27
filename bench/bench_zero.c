/* ZeRO stages 1, 2 and 3 against plain data parallel: an MLP of 4 layers
 * 512 x 512 (tanh; 1.05 M f32 parameters, 4.2 MB; Adam's state 8.4 MB),
 * a global batch of 64 rows sharded over the ranks, Adam, a regression
 * loss. Prints, for the mode given (dp, zero1, zero2, zero3: each Linear a
 * unit), the median step time on rank 0 and, for every rank, the peak of
 * oar's tensor bytes (oar_memory_stats: from the set-up on, and of the
 * steps alone), the optimizer state it holds against the theoretical
 * sharded state (Adam's whole state / N), and the parameter bytes at their
 * peak (oar_zero_param_bytes) against their theory: the whole parameters
 * (dp; zero1/2 add their shard), or for zero3 1/N of them plus one layer.
 * The peer is bench/peer/zero.py (PyTorch DDP, ZeroRedundancyOptimizer and
 * FSDP, gloo).
 * Usage: mpirun -np N bench_zero [steps] [dp|zero1|zero2|zero3] */
#include <oar/oar.h>

#include "bench_median.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Every rank's value of v, on every rank (all-gathered through a dtensor). */
static oar_tensor *gather_ranks(double v, oar_mesh *mesh) {
    oar_tensor *mine = oar_full(OAR_F64, 1, (int64_t[]){1}, v);
    return oar_unshard(oar_dtensor_from_local(mine, mesh, (oar_placement[]){oar_shard(0)}, NULL));
}

int main(int argc, char **argv) {
    if (oar_dist_init(&argc, &argv)) return fprintf(stderr, "%s\n", oar_last_error()), 1;
    int world = oar_dist_world_size(), me = oar_dist_rank();
    int steps = argc > 1 ? atoi(argv[1]) : 10, warm = 2;
    if (steps < 1) steps = 1;
    const char *mode = argc > 2 ? argv[2] : "dp";
    int stage = !strcmp(mode, "zero1") ? 1 : !strcmp(mode, "zero2") ? 2 : !strcmp(mode, "zero3") ? 3 : 0;
    if (!stage && strcmp(mode, "dp"))
        return fprintf(stderr, "bench_zero: mode %s? (dp, zero1, zero2, zero3)\n", mode), 1;
    const int64_t width = 512, batch = 64;
    oar_memory_reset_peak();
    oar_mesh *mesh = oar_mesh_create(1, (int64_t[]){world}, NULL, (const char *const[]){"dp"});
    oar_manual_seed(1);
    oar_module *mods[7];
    for (int i = 0; i < 7; i++) mods[i] = i % 2 ? oar_tanh_new() : oar_linear_new(width, width, true);
    oar_module *model = oar_sequential_new(7, mods); /* owns mods; zero3 runs them one by one */
    if (!mesh || !model || oar_parallelize(model, mesh, 0, 0, NULL))
        return fprintf(stderr, "setup: %s\n", oar_last_error()), 1;
    oar_tensor *params[16];
    int np = oar_module_parameters(model, params, 16);
    int64_t numel = oar_module_num_elements(model);
    oar_optimizer *adam = oar_adam_new(np, params, &(oar_adam_options){.lr = 1e-3});
    int unit_params[4] = {2, 2, 2, 2}; /* zero3: each Linear (weight, bias) a unit */
    oar_zero_options zo = {.stage = stage, .n_units = stage == 3 ? 4 : 0, .unit_params = stage == 3 ? unit_params : NULL};
    oar_zero *z = stage ? oar_zero_new(adam, mesh, 0, &zo) : NULL;
    if (!adam || (stage && !z)) return fprintf(stderr, "setup: %s\n", oar_last_error()), 1;
    if (z) oar_optim_free(adam), adam = NULL; /* only a template */
    oar_memory_stats setup; /* the peak of the set-up; then the steps' own peak */
    oar_memory_stats_get(&setup);
    oar_memory_reset_peak();
    oar_manual_seed(2);
    oar_placement rows[1] = {oar_shard(0)};
    oar_tensor *xd = oar_shard_tensor(oar_randn(OAR_F32, 2, (int64_t[]){batch, width}), mesh, rows);
    oar_tensor *yd = oar_shard_tensor(oar_randn(OAR_F32, 2, (int64_t[]){batch, width}), mesh, rows);
    double loss = 0, *step_s = calloc((size_t)steps, sizeof *step_s);
    if (!step_s) return fprintf(stderr, "out of memory\n"), 1;
    for (int s = 0; s < warm + steps; s++) {
        double ts = now();
        oar_pool *p = oar_pool_push();
        oar_tensor *h = xd;
        if (stage == 3)
            for (int i = 0; i < 7 && h; i++) h = i % 2 ? oar_module_forward(mods[i], h) : oar_zero_forward(z, mods[i], h);
        else
            h = oar_module_forward(model, xd);
        oar_tensor *diff = oar_sub(h, yd);
        oar_tensor *l = oar_mul_scalar(oar_sum(oar_square(diff), 0, NULL, false), 1.0 / (double)(batch * width));
        if (!l || oar_backward(l, NULL)) return fprintf(stderr, "step %d: %s\n", s, oar_last_error()), 1;
        int st = z ? (oar_zero_step(z) == 1 ? 0 : -1)
                   : (oar_dist_reduce_grads(np, params, 0) < 0 || oar_optim_step(adam)) ? -1 : 0;
        if (st) return fprintf(stderr, "step %d: %s\n", s, oar_last_error()), 1;
        if (adam) oar_optim_zero_grad(adam);
        loss = oar_tensor_item(oar_unshard(l));
        oar_pool_pop(p);
        if (s >= warm) step_s[s - warm] = now() - ts;
    }
    double dt = bench_median(step_s, steps);
    free(step_s);
    oar_memory_stats ms;
    oar_memory_stats_get(&ms);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    int64_t full_state = 2 * numel * 4; /* Adam: m and v */
    int64_t state = z ? oar_zero_state_bytes(z) : full_state, pbytes = numel * 4, ppeak = pbytes;
    if (z) oar_zero_param_bytes(z, &ppeak);
    int64_t layer = (width * width + width) * 4, shard = (pbytes / 4 + world - 1) / world * 4;
    int64_t ptheory = stage == 3 ? pbytes / world + layer : stage ? pbytes + shard : pbytes;
    oar_pool *p = oar_pool_push();
    double whole = (double)(ms.peak_bytes > setup.peak_bytes ? ms.peak_bytes : setup.peak_bytes);
    oar_tensor *peaks = gather_ranks(whole, mesh), *steppk = gather_ranks((double)ms.peak_bytes, mesh), *states = gather_ranks((double)state, mesh);
    oar_tensor *rss = gather_ranks((double)ru.ru_maxrss * 1024, mesh), *pp = gather_ranks((double)ppeak, mesh);
    if (!peaks || !steppk || !states || !rss || !pp) return fprintf(stderr, "gather: %s\n", oar_last_error()), 1;
    if (me == 0) {
        const double mib = 1 << 20;
        const double *pk = oar_tensor_data(peaks), *sb = oar_tensor_data(states), *rs = oar_tensor_data(rss);
        const double *pq = oar_tensor_data(pp), *sp = oar_tensor_data(steppk);
        printf("oar %s_np%d_step_ms %.2f ms\n", mode, world, dt * 1e3);
        for (int r = 0; r < world; r++)
            printf("oar %s_np%d_rank%d peak_MiB %.2f step_peak_MiB %.2f state_MiB %.2f state_theory_MiB %.2f "
                   "param_peak_MiB %.2f param_theory_MiB %.2f max_rss_MiB %.1f\n", mode, world, r, pk[r] / mib,
                   sp[r] / mib, sb[r] / mib,
                   (stage ? full_state / world : full_state) / mib, pq[r] / mib, ptheory / mib, rs[r] / mib);
        printf("# %s, ranks %d, %lld parameters (%.2f MiB), Adam state of all %.2f MiB, loss %.6f\n", mode, world,
               (long long)numel, numel * 4 / mib, full_state / mib, loss);
    }
    oar_pool_pop(p);
    oar_zero_free(z);
    oar_optim_free(adam);
    oar_module_free(model);
    oar_mesh_release(mesh);
    oar_dist_finalize();
    return 0;
}

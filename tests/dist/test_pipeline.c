/* Pipeline parallel (src/nn/pipeline.c): a 4-block MLP in float64 cut
 * into stages along one mesh axis, trained 3 steps of SGD with momentum
 * under GPipe and 1F1B; the loss of every step and the updated parameters
 * of every stage must equal one process on the full batch (1e-10
 * relative), and the peak of stashed micro-batches must be m (GPipe) and
 * min(p - stage, m) <= p (1F1B). Layouts by world size: 1 rank pp=1; 2
 * ranks pp=2; 4 ranks pp=4 and dp2 x pp2; 8 ranks dp2 x tp2 x pp2 and
 * pp4 x dp2. Then the refusals (bad axis, stage count, m, batch not
 * divisible) and a neighbour that does not answer in time. CTest runs it
 * alone and under mpirun with 2, 4 and 8 ranks (oversubscribed). */
#include "alloc_fail.h"
#include "test.h"

#include <oar/dist.h>
#include <time.h>

static int W, ME;
enum { NB = 4, STEPS = 3, B = 16, IN = 6, HID = 8, OUT = 3 };

/* A float64 Linear (weight [out, in], bias [out]), laid out by
 * oar_parallelize's rules as oar_linear_new's is. */
static oar_tensor *linear64_forward(oar_module *m, oar_tensor *x) {
    oar_tensor *w = oar_module_get(m, "weight"), *b = oar_module_get(m, "bias");
    return oar_add(oar_matmul(x, oar_transpose(w, 0, 1)), b);
}

/* Block k: Linear then tanh (the last: Linear only). Seeded alike everywhere. */
static void make_blocks(oar_module **blocks) {
    oar_manual_seed(99);
    for (int k = 0; k < NB; k++) {
        int64_t in = k ? HID : IN, out = k == NB - 1 ? OUT : HID;
        oar_module *lin = oar_module_new("Linear64", linear64_forward, NULL, NULL);
        oar_pool *pool = oar_pool_push();
        oar_tensor *w = oar_mul_scalar(oar_randn(OAR_F64, 2, (int64_t[]){out, in}), 0.5);
        oar_tensor *b = oar_mul_scalar(oar_randn(OAR_F64, 1, (int64_t[]){out}), 0.1);
        oar_tensor_set_requires_grad(w, true);
        oar_tensor_set_requires_grad(b, true);
        oar_module_add_parameter(lin, "weight", w);
        oar_module_add_parameter(lin, "bias", b);
        oar_pool_pop(pool);
        oar_module *mods[2] = {lin, oar_tanh_new()};
        blocks[k] = oar_sequential_new(k == NB - 1 ? 1 : 2, mods);
        if (k == NB - 1) oar_module_free(mods[1]);
    }
}

static oar_tensor *mse(oar_tensor *out, oar_tensor *target, void *ctx) {
    (void)ctx;
    oar_tensor *d = oar_sub(out, target);
    return oar_mul_scalar(oar_sum(oar_square(d), 0, NULL, false), 1.0 / (double)oar_tensor_numel(target));
}

/* The loss of a late last stage: its first call sleeps past the deadline. */
static oar_tensor *slow_mse(oar_tensor *out, oar_tensor *target, void *ctx) {
    static bool slept;
    if (!slept) nanosleep(&(struct timespec){.tv_sec = 2, .tv_nsec = 500000000}, NULL);
    slept = true;
    return mse(out, target, ctx);
}

static oar_tensor *X, *Y;            /* the full batch, on every rank */
static double ref_loss[STEPS];
static oar_module *ref_blocks[NB];   /* trained in one process */

static void reference(void) {
    make_blocks(ref_blocks);
    oar_tensor *params[2 * NB];
    int n = 0;
    for (int k = 0; k < NB; k++) n += oar_module_parameters(ref_blocks[k], params + n, 2);
    oar_optimizer *opt = oar_sgd_new(n, params, &(oar_sgd_options){.lr = 0.1, .momentum = 0.9});
    for (int s = 0; s < STEPS; s++) {
        oar_pool *pool = oar_pool_push();
        oar_optim_zero_grad(opt);
        oar_tensor *h = X;
        for (int k = 0; k < NB; k++) h = oar_module_forward(ref_blocks[k], h);
        oar_tensor *l = mse(h, Y, NULL);
        CHECK(oar_backward(l, NULL) == 0);
        CHECK(oar_optim_step(opt) == 0);
        ref_loss[s] = oar_tensor_item(l);
        oar_pool_pop(pool);
    }
    CHECK(ref_loss[STEPS - 1] < ref_loss[0]);
    oar_optim_free(opt);
}

static double rel(double a, double b) { return fabs(a - b) / (fabs(b) > 1e-30 ? fabs(b) : 1); }

/* max |a - b| / max |b| over two plain tensors */
static double rel_diff(oar_tensor *a, oar_tensor *b) {
    oar_tensor *d = oar_amax(oar_abs(oar_sub(a, b)), 0, NULL, false);
    oar_tensor *s = oar_amax(oar_abs(b), 0, NULL, false);
    return d && s ? oar_tensor_item(d) / oar_tensor_item(s) : INFINITY;
}

/* Trains on a mesh of the given shape with the pipeline along `axis`; on
 * the stage mesh, dp_dim >= 0 shards the batch, tp_dim >= 0 splits the
 * Linear weights (even blocks colwise, odd rowwise). */
static void run(const char *what, int ndim, const int64_t *shape, int axis, int dp_dim, int tp_dim, int m,
                oar_pipe_schedule sched) {
    oar_pool *outer = oar_pool_push();
    oar_mesh *mesh = oar_mesh_create(ndim, shape, NULL, NULL);
    CHECK(mesh != NULL);
    oar_module *blocks[NB];
    make_blocks(blocks);
    oar_pipeline *pl = oar_pipeline_new(NB, blocks, mesh, axis, m, sched, mse, NULL);
    CHECK(pl != NULL);
    if (!pl) {
        fprintf(stderr, "rank %d: %s: %s\n", ME, what, oar_last_error());
        return;
    }
    int p = (int)shape[axis], stage = oar_pipeline_stage(pl), k0 = stage * (NB / p);
    oar_mesh *sm = oar_pipeline_stage_mesh(pl);
    CHECK((ndim == 1) == (sm == NULL));
    for (int k = k0; k < k0 + NB / p && sm; k++) {
        const oar_parallel_rule rule = {"0.*", k % 2 ? OAR_PARALLEL_ROWWISE : OAR_PARALLEL_COLWISE};
        CHECK(oar_parallelize(blocks[k], sm, tp_dim >= 0 ? tp_dim : 0, tp_dim >= 0, &rule) == 0);
    }
    oar_tensor *params[2 * NB];
    int n = 0;
    for (int k = k0; k < k0 + NB / p; k++) n += oar_module_parameters(blocks[k], params + n, 2);
    oar_optimizer *opt = oar_sgd_new(n, params, &(oar_sgd_options){.lr = 0.1, .momentum = 0.9});
    oar_tensor *x = X, *y = Y;
    if (sm) {
        oar_placement pl_[OAR_MESH_MAX_DIMS];
        for (int d = 0; d < oar_mesh_ndim(sm); d++) pl_[d] = d == dp_dim ? oar_shard(0) : oar_replicate();
        x = oar_shard_tensor(X, sm, pl_);
        y = oar_shard_tensor(Y, sm, pl_);
    }
    for (int s = 0; s < STEPS; s++) {
        oar_pool *pool = oar_pool_push();
        oar_optim_zero_grad(opt);
        double loss = NAN;
        int st = oar_pipeline_step(pl, stage == 0 ? x : NULL, stage == p - 1 ? y : NULL, &loss);
        if (st) fprintf(stderr, "rank %d: %s: %s\n", ME, what, oar_last_error());
        CHECK(st == 0);
        CHECK(oar_optim_step(opt) == 0);
        if (!(rel(loss, ref_loss[s]) < 1e-10))
            fprintf(stderr, "rank %d: %s step %d: loss %.17g, one process %.17g\n", ME, what, s, loss, ref_loss[s]);
        CHECK(rel(loss, ref_loss[s]) < 1e-10);
        oar_pool_pop(pool);
    }
    int peak = oar_pipeline_peak_stash(pl), want = sched == OAR_PIPE_GPIPE ? m : (p - stage < m ? p - stage : m);
    if (peak != want) fprintf(stderr, "rank %d: %s: peak stash %d, want %d\n", ME, what, peak, want);
    CHECK(peak == want && (sched == OAR_PIPE_GPIPE || peak <= p));
    double busy = -1, total = -1;
    CHECK(oar_pipeline_times(pl, &busy, &total) == 0 && busy > 0 && total >= busy);
    /* every parameter of this stage against one process's */
    for (int k = k0; k < k0 + NB / p; k++) {
        oar_tensor *mine[2], *theirs[2];
        CHECK(oar_module_parameters(blocks[k], mine, 2) == 2 && oar_module_parameters(ref_blocks[k], theirs, 2) == 2);
        for (int j = 0; j < 2; j++) {
            oar_tensor *v = oar_tensor_is_dist(mine[j]) ? oar_unshard(mine[j]) : mine[j];
            double e = rel_diff(v, theirs[j]);
            if (!(e < 1e-10)) fprintf(stderr, "rank %d: %s: block %d parameter %d off by %g\n", ME, what, k, j, e);
            CHECK(e < 1e-10);
        }
    }
    oar_optim_free(opt);
    oar_pipeline_free(pl);
    for (int k = 0; k < NB; k++) oar_module_free(blocks[k]);
    oar_mesh_release(mesh);
    oar_pool_pop(outer);
}

static void test_train(void) {
    for (int s = 0; s < 2; s++) {
        oar_pipe_schedule sched = s ? OAR_PIPE_1F1B : OAR_PIPE_GPIPE;
        if (W <= 4) { /* pp = W on a 1-d mesh (W = 1: one stage of 4 blocks) */
            run(s ? "1F1B pp" : "GPipe pp", 1, (int64_t[]){W}, 0, -1, -1, 4, sched);
            run(s ? "1F1B pp, m = 8" : "GPipe pp, m = 8", 1, (int64_t[]){W}, 0, -1, -1, 8, sched);
        }
        if (W == 4) /* dp2 x pp2 */
            run(s ? "1F1B dp2 x pp2" : "GPipe dp2 x pp2", 2, (int64_t[]){2, 2}, 1, 0, -1, 4, sched);
        if (W == 8) { /* dp2 x tp2 x pp2, and pp4 x dp2 */
            run(s ? "1F1B dp2 x tp2 x pp2" : "GPipe dp2 x tp2 x pp2", 3, (int64_t[]){2, 2, 2}, 2, 0, 1, 4, sched);
            run(s ? "1F1B pp4 x dp2" : "GPipe pp4 x dp2", 2, (int64_t[]){4, 2}, 0, 0, -1, 4, sched);
        }
    }
}

static void test_errors(void) {
    oar_pool *pool = oar_pool_push();
    /* W <= 4: pp = W on a 1-d mesh; W = 8: pp4 x 2 */
    int p = W <= 4 ? W : 4, nd = W <= 4 ? 1 : 2, axis = nd - 1;
    oar_mesh *mesh = oar_mesh_create(nd, nd == 1 ? (int64_t[]){W} : (int64_t[]){2, 4}, NULL, NULL);
    oar_module *blocks[NB];
    make_blocks(blocks);
    CHECK_FAILS(oar_pipeline_new(NB, blocks, mesh, nd, 4, OAR_PIPE_1F1B, mse, NULL), "mesh axis");
    CHECK_FAILS(oar_pipeline_new(NB, blocks, mesh, -1, 4, OAR_PIPE_1F1B, mse, NULL), "mesh axis -1");
    int bad_count = p > 1 ? p + 1 : 0;
    CHECK_FAILS(oar_pipeline_new(bad_count, blocks, mesh, axis, 4, OAR_PIPE_1F1B, mse, NULL), "cannot be cut into");
    CHECK_FAILS(oar_pipeline_new(NB, blocks, mesh, axis, 0, OAR_PIPE_1F1B, mse, NULL), "0 micro-batches");
    CHECK_FAILS(oar_pipeline_new(NB, blocks, mesh, axis, 4, (oar_pipe_schedule)7, mse, NULL), "unknown schedule");
    CHECK_FAILS(oar_pipeline_new(NB, blocks, NULL, axis, 4, OAR_PIPE_1F1B, mse, NULL), "NULL");
    CHECK_FAILS(oar_pipeline_new(NB, blocks, mesh, axis, 4, OAR_PIPE_1F1B, NULL, NULL), "NULL");
    CHECK_STATUS_FAILS(oar_pipeline_step(NULL, X, Y, NULL), "NULL pipeline");
    CHECK(oar_pipeline_stage(NULL) == -1 && oar_pipeline_peak_stash(NULL) == -1 && !oar_pipeline_stage_mesh(NULL));
    CHECK(oar_pipeline_times(NULL, NULL, NULL) == -1);
    oar_pipeline_free(NULL);
    /* each allocation of oar_pipeline_new failing in turn: NULL with the
     * error set, nothing leaked (a 1-d mesh: it makes no collective call) */
    if (nd == 1) {
        oar_set_allocator(failing_alloc, NULL);
        bool made = false;
        for (long at = 0; at < 64 && !made; at++) {
            long before = live;
            fail_at = at;
            n_calls = 0;
            oar_clear_error();
            oar_pipeline *q = oar_pipeline_new(NB, blocks, mesh, axis, 4, OAR_PIPE_1F1B, mse, NULL);
            fail_at = -1;
            made = q != NULL;
            CHECK(made || oar_last_error()[0]);
            oar_pipeline_free(q);
            CHECK(live == before);
        }
        oar_set_allocator(NULL, NULL);
        CHECK(made);
    }
    /* m does not divide the batch: every stage fails alike */
    oar_pipeline *pl = oar_pipeline_new(NB, blocks, mesh, axis, 3, OAR_PIPE_1F1B, mse, NULL);
    CHECK(pl != NULL);
    int stage = oar_pipeline_stage(pl);
    const char *why = stage == 0 || stage == p - 1 ? "not divisible into 3 micro-batches" : "refused the step";
    CHECK_STATUS_FAILS(oar_pipeline_step(pl, X, Y, NULL), why);
    oar_pipeline_free(pl);
    /* a missing batch on stage 0 */
    pl = oar_pipeline_new(NB, blocks, mesh, axis, 4, OAR_PIPE_1F1B, mse, NULL);
    if (p > 1) CHECK_STATUS_FAILS(oar_pipeline_step(pl, NULL, Y, NULL), stage == 0 ? "has no batch" : "refused");
    /* a batch that is a dtensor on another mesh than stage 0's */
    oar_placement rep[2] = {oar_replicate(), oar_replicate()};
    oar_tensor *xd = oar_shard_tensor(X, mesh, rep);
    CHECK(xd != NULL);
    CHECK_STATUS_FAILS(oar_pipeline_step(pl, xd, Y, NULL), stage == 0 ? "on another mesh" : "refused");
    oar_pipeline_free(pl);
    for (int k = 0; k < NB; k++) oar_module_free(blocks[k]);
    oar_mesh_release(mesh);
    oar_pool_pop(pool);
}

/* A neighbour late past the deadline: on a pipeline of world ranks 0 and
 * 1, the last stage's loss sleeps 2.5 s on its first call and the deadline
 * is 1 s. Stage 0, waiting for the gradient of micro-batch 0, fails within
 * the deadline and names world rank 1. Stage 1 finishes its step later: its
 * gradient completes the receive stage 0 gave up on (kept alive for
 * oar_dist_finalize), its other gradients stay unreceived (this runs last;
 * they are 128 bytes, which MPI sends eagerly, so the sends complete),
 * and stage 0 joins the loss broadcast that ends its step, so that every
 * call completes and MPI finalizes cleanly. */
static void test_late_neighbour(void) {
    if (W < 2) return;
    oar_pool *pool = oar_pool_push();
    oar_mesh *mesh = oar_mesh_create(1, (int64_t[]){2}, (int[]){0, 1}, NULL);
    CHECK(mesh != NULL);
    if (ME < 2) {
        oar_module *blocks[NB];
        make_blocks(blocks);
        oar_pipeline *pl = oar_pipeline_new(NB, blocks, mesh, 0, 4, OAR_PIPE_GPIPE, slow_mse, NULL);
        CHECK(pl != NULL);
        double old = oar_dist_timeout();
        oar_dist_set_timeout(1);
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        int st = oar_pipeline_step(pl, X, Y, NULL);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        oar_dist_set_timeout(old);
        double dt = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        char msg[512];
        snprintf(msg, sizeof msg, "%s", oar_last_error());
        if (ME == 0) {
            const char *needle = "stage 0, the gradient of micro-batch 0 from stage 1: rank 0 waited 1 s for world rank(s) 1 ";
            if (!strstr(msg, needle)) fprintf(stderr, "rank 0: late neighbour: %s\n", msg);
            CHECK(st != 0 && strstr(msg, needle));
            CHECK(dt < 2.4); /* it did not wait for the sleeper */
            oar_tensor *v = oar_zeros(OAR_F64, 0, NULL); /* the broadcast that ends stage 1's step */
            CHECK(oar_dist_broadcast_(v, mesh, 0, 1) == 0);
        } else {
            if (st) fprintf(stderr, "rank 1: late neighbour: %s\n", msg);
            CHECK(st == 0);
        }
        oar_pipeline_free(pl);
        for (int k = 0; k < NB; k++) oar_module_free(blocks[k]);
    }
    oar_mesh_release(mesh);
    oar_pool_pop(pool);
}

int main(int argc, char **argv) {
    if (oar_dist_init(&argc, &argv)) {
        fprintf(stderr, "oar_dist_init: %s\n", oar_last_error());
        return 1;
    }
    W = oar_dist_world_size();
    ME = oar_dist_rank();
    oar_pool *pool = oar_pool_push();
    oar_manual_seed(123);
    X = oar_randn(OAR_F64, 2, (int64_t[]){B, IN});
    Y = oar_randn(OAR_F64, 2, (int64_t[]){B, OUT});
    RUN(reference);
    RUN(test_train);
    RUN(test_errors);
    RUN(test_late_neighbour);
    for (int k = 0; k < NB; k++) oar_module_free(ref_blocks[k]);
    oar_pool_pop(pool);
    int rc = test_summary();
    oar_dist_finalize();
    return rc;
}

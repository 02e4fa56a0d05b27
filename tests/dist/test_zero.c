/* ZeRO stages 1, 2 and 3 (oar_zero_*, include/oar/dist.h) against plain data
 * parallel and one process: an MLP trained 20 Adam steps (f32 and f64) and
 * a transformer encoder layer (f64); gradient accumulation over 4
 * micro-batches against one step on the whole batch; the optimizer state
 * each rank holds (1/N of the whole); SGD and AdamW inside; gradients that
 * are already Replicate; the refusals. Stage 3 (test_zero3_*): an MLP of
 * Linear modules (f32) and two transformer encoder layers (f64) as units,
 * against one process and plain data parallel, with and without CPU
 * offload, accumulation, the parameter bytes each rank holds (the shards,
 * plus one unit while it runs), its refusals. Runs on any number of
 * ranks (CTest: alone, and under mpirun with 2 and 4). */
#include "test.h"

#include <oar/dist.h>

#define STEPS 20
#define MAXP 32

static int W, ME;

typedef enum { ONE, DP, ZERO1, ZERO2 } mode;
static const char *mode_name[] = {"one process", "plain data parallel", "ZeRO-1", "ZeRO-2"};

/* A model: a module (the transformer) or four loose tensors (the MLP,
 * written with ops so that it runs in f32 and f64). */
typedef struct model {
    oar_module *mod;
    oar_tensor *p[MAXP];
    int np;
} model;

/* One training run: its losses, the final global parameters (plain,
 * retained), the optimizer state this rank held. */
typedef struct run {
    double loss[STEPS];
    oar_tensor *params[MAXP];
    int np;
    int64_t state_bytes, shard_len, padded;
} run;

static void run_free(run *r) {
    for (int i = 0; i < r->np; i++) oar_tensor_release(r->params[i]);
    r->np = 0;
}

static void model_init(model *m, bool transformer, oar_dtype dt, oar_mesh *mesh) {
    memset(m, 0, sizeof *m);
    if (transformer) {
        oar_manual_seed(77);
        oar_transformer_options o = {.dim_feedforward = 16, .norm_first = true, .causal = true,
                                     .activation = OAR_ACTIVATION_GELU, .dtype = OAR_F64};
        m->mod = oar_transformer_encoder_layer_new(8, 2, &o);
        if (mesh) CHECK(oar_parallelize(m->mod, mesh, 0, 0, NULL) == 0);
        m->np = oar_module_parameters(m->mod, m->p, MAXP);
        return;
    }
    oar_manual_seed(99); /* every rank and the reference start alike */
    const int64_t shapes[4][2] = {{16, 6}, {16, 0}, {3, 16}, {3, 0}};
    const double scale[4] = {0.4, 0.1, 0.25, 0.1};
    oar_pool *pool = oar_pool_push();
    for (int i = 0; i < 4; i++) {
        oar_tensor *t = oar_mul_scalar(oar_randn(dt, shapes[i][1] ? 2 : 1, shapes[i]), scale[i]);
        if (mesh) t = oar_shard_tensor(t, mesh, (oar_placement[]){oar_replicate()});
        oar_tensor_set_requires_grad(t, true);
        m->p[i] = oar_tensor_retain(t);
    }
    oar_pool_pop(pool);
    m->np = 4;
}

static void model_free(model *m) {
    if (m->mod) oar_module_free(m->mod);
    else
        for (int i = 0; i < m->np; i++) oar_tensor_release(m->p[i]);
}

static oar_tensor *forward(model *m, oar_tensor *x) {
    if (m->mod) return oar_module_forward(m->mod, x);
    oar_tensor *h = oar_tanh(oar_add(oar_matmul(x, oar_transpose(m->p[0], 0, 1)), m->p[1]));
    return oar_add(oar_matmul(h, oar_transpose(m->p[2], 0, 1)), m->p[3]);
}

/* Trains STEPS Adam steps on (x, y), the batch cut into `accum`
 * micro-batches of equal size (each sharded over the ranks unless ONE);
 * a step's loss is the mean of its micro-batches' mean squared errors. */
static void train(mode md, bool transformer, oar_dtype dt, int accum, oar_tensor *x, oar_tensor *y, run *out) {
    oar_mesh *mesh = md == ONE ? NULL : oar_mesh_create(1, (int64_t[]){W}, NULL, NULL);
    model m;
    model_init(&m, transformer, dt, mesh);
    oar_optimizer *opt = oar_adam_new(m.np, m.p, &(oar_adam_options){.lr = transformer ? 3e-3 : 1e-2});
    CHECK(opt != NULL);
    oar_zero *z = NULL;
    if (md == ZERO1 || md == ZERO2) {
        z = oar_zero_new(opt, mesh, 0, &(oar_zero_options){.stage = md == ZERO1 ? 1 : 2, .accum_steps = accum});
        CHECK(z != NULL);
        oar_optim_free(opt); /* only a template */
        opt = NULL;
    }
    int64_t rows = oar_tensor_shape(x)[0], mb = rows / accum;
    for (int step = 0; step < STEPS; step++) {
        oar_pool *pool = oar_pool_push();
        double loss = 0;
        for (int k = 0; k < accum; k++) {
            oar_tensor *xb = oar_slice(x, 0, k * mb, (k + 1) * mb, 1), *yb = oar_slice(y, 0, k * mb, (k + 1) * mb, 1);
            if (mesh) {
                xb = oar_shard_tensor(xb, mesh, (oar_placement[]){oar_shard(0)});
                yb = oar_shard_tensor(yb, mesh, (oar_placement[]){oar_shard(0)});
            }
            oar_tensor *d = oar_sub(forward(&m, xb), yb);
            oar_tensor *l = oar_mul_scalar(oar_sum(oar_square(d), 0, NULL, false), 1.0 / (double)oar_tensor_numel(yb));
            CHECK(oar_backward(l, NULL) == 0);
            loss += oar_tensor_item(mesh ? oar_unshard(l) : l) / accum;
            if (z) CHECK(oar_zero_step(z) == (k == accum - 1)); /* 1: updated, 0: counted */
        }
        if (opt) {
            if (mesh) CHECK(oar_dist_reduce_grads(m.np, m.p, 0) == 1);
            CHECK(oar_optim_step(opt) == 0);
            oar_optim_zero_grad(opt);
        }
        out->loss[step] = loss;
        oar_pool_pop(pool);
    }
    oar_pool *pool = oar_pool_push();
    out->np = m.np;
    for (int i = 0; i < m.np; i++) out->params[i] = oar_tensor_retain(oar_clone(mesh ? oar_unshard(m.p[i]) : m.p[i]));
    oar_pool_pop(pool);
    out->state_bytes = z ? oar_zero_state_bytes(z) : 0;
    out->shard_len = z ? oar_zero_shard(z, NULL, &out->padded) : 0;
    for (int i = 0; i < m.np; i++) CHECK(oar_tensor_grad(m.p[i]) == NULL); /* dropped after each update */
    oar_zero_free(z);
    oar_optim_free(opt);
    model_free(&m);
    oar_mesh_release(mesh);
}

/* max |a - b| / max |b| over the parameters. */
static double param_rel(const run *a, const run *b) {
    double worst = 0;
    oar_pool *pool = oar_pool_push();
    for (int i = 0; i < a->np; i++) {
        oar_tensor *x = oar_cast(a->params[i], OAR_F64), *y = oar_cast(b->params[i], OAR_F64);
        double d = oar_tensor_item(oar_amax(oar_abs(oar_sub(x, y)), 0, NULL, false));
        double s = oar_tensor_item(oar_amax(oar_abs(y), 0, NULL, false));
        if (d / s > worst) worst = d / s;
    }
    oar_pool_pop(pool);
    return worst;
}

static bool params_equal(const run *a, const run *b) {
    for (int i = 0; i < a->np; i++) {
        size_t n = (size_t)oar_tensor_numel(a->params[i]) * oar_dtype_size(oar_tensor_dtype(a->params[i]));
        if (memcmp(oar_tensor_data(a->params[i]), oar_tensor_data(b->params[i]), n)) return false;
    }
    return true;
}

/* got's loss curve and final parameters within tol (relative) of want's. */
static void check_close(const char *what, const run *got, const run *want, double tol) {
    CHECK(got->np == want->np);
    for (int i = 0; i < STEPS; i++) {
        double rel = fabs(got->loss[i] - want->loss[i]) / fabs(want->loss[i]);
        if (!(rel <= tol))
            fprintf(stderr, "rank %d: %s step %d: loss %.17g, want %.17g\n", ME, what, i, got->loss[i], want->loss[i]);
        CHECK(rel <= tol);
    }
    double pr = param_rel(got, want);
    if (!(pr <= tol)) fprintf(stderr, "rank %d: %s: final parameters differ by %.3g (relative)\n", ME, what, pr);
    CHECK(pr <= tol);
    CHECK(want->loss[STEPS - 1] < 0.8 * want->loss[0]); /* it trains */
}

/* got equals want bit for bit: losses and final parameters. */
static void check_bitwise(const char *what, const run *got, const run *want) {
    bool same = params_equal(got, want);
    for (int i = 0; i < STEPS; i++) same = same && got->loss[i] == want->loss[i];
    if (!same) fprintf(stderr, "rank %d: %s differs from plain data parallel in the last bits (params %.3g)\n", ME,
                       what, param_rel(got, want));
    CHECK(same);
}

/* The optimizer state a rank holds: Adam's m and v of its shard,
 * ceil(total / N) elements each, against 2 x total for the whole. */
static void check_state(const run *r, int64_t total, oar_dtype dt) {
    int64_t es = (int64_t)oar_dtype_size(dt);
    CHECK(r->shard_len == (total + W - 1) / W);
    CHECK(r->padded == r->shard_len * W && r->padded - total < W);
    CHECK(r->state_bytes == 2 * r->shard_len * es);
    CHECK(r->state_bytes * W >= 2 * total * es && r->state_bytes * W < 2 * (total + W) * es);
}

static void test_mlp(oar_dtype dt) {
    oar_pool *pool = oar_pool_push();
    oar_manual_seed(123);
    oar_tensor *x = oar_randn(dt, 2, (int64_t[]){8 * W, 6});
    oar_tensor *y = oar_randn(dt, 2, (int64_t[]){8 * W, 3});
    double tol = dt == OAR_F32 ? 1e-5 : 1e-10;
    run ref = {0}, dp = {0}, r = {0};
    train(ONE, false, dt, 1, x, y, &ref);
    train(DP, false, dt, 1, x, y, &dp);
    check_close(mode_name[DP], &dp, &ref, tol);
    const int64_t total = 16 * 6 + 16 + 3 * 16 + 3;
    for (mode md = ZERO1; md <= ZERO2; md++) {
        train(md, false, dt, 1, x, y, &r);
        check_close(mode_name[md], &r, &ref, tol);
        /* the same sums and the same elementwise updates as plain data
         * parallel: bitwise in f64. On 2 ranks a + b is one sum whatever
         * the collective; on 4, Open MPI's all-reduce (plain DP, ZeRO-1)
         * and reduce-scatter (ZeRO-2) associate the four terms alike at
         * these sizes (another MPI, or other message sizes, could differ
         * in the last ulp: then this check, not the 1e-10 one, fails). */
        if (dt == OAR_F64) check_bitwise(mode_name[md], &r, &dp);
        check_state(&r, total, dt);
        run_free(&r);

        /* 4 micro-batches of a quarter each, one communication: the step
         * of the whole batch */
        run acc = {0};
        train(md, false, dt, 4, x, y, &acc);
        check_close(md == ZERO1 ? "ZeRO-1, 4 micro-batches" : "ZeRO-2, 4 micro-batches", &acc, &ref, tol);
        check_close("accumulated vs whole batch (plain DP)", &acc, &dp, tol);
        run_free(&acc);
    }
    run_free(&ref);
    run_free(&dp);
    oar_pool_pop(pool);
}

static void test_mlp_f32(void) { test_mlp(OAR_F32); }
static void test_mlp_f64(void) { test_mlp(OAR_F64); }

static void test_transformer(void) {
    oar_pool *pool = oar_pool_push();
    oar_manual_seed(321);
    oar_tensor *x = oar_randn(OAR_F64, 3, (int64_t[]){2 * W, 5, 8});
    oar_tensor *y = oar_randn(OAR_F64, 3, (int64_t[]){2 * W, 5, 8});
    run ref = {0}, dp = {0}, r = {0};
    train(ONE, true, OAR_F64, 1, x, y, &ref);
    train(DP, true, OAR_F64, 1, x, y, &dp);
    check_close("transformer, plain data parallel", &dp, &ref, 1e-10);
    train(ZERO2, true, OAR_F64, 1, x, y, &r);
    check_close("transformer, ZeRO-2", &r, &ref, 1e-10);
    check_bitwise("transformer, ZeRO-2", &r, &dp);
    run_free(&r);
    /* 2 micro-batches against the whole batch in one process: the two batchings part by
     * about 1e-10 after these steps (1.09e-10 with OpenBLAS's generic dgemm kernels, in a
     * Debug build), so 1e-9 here; ZeRO-3 below compares its micro-batches with plain DP's */
    train(ZERO1, true, OAR_F64, 2, x, y, &r);
    check_close("transformer, ZeRO-1, 2 micro-batches", &r, &ref, 1e-9);
    run_free(&r);
    run_free(&ref);
    run_free(&dp);
    oar_pool_pop(pool);
}

/* Other inner optimizers: SGD with momentum and AdamW through ZeRO-2 give
 * plain data parallel's parameters (their state sharded as well). */
static void test_other_optimizers(void) {
    oar_pool *pool = oar_pool_push();
    oar_mesh *mesh = oar_mesh_create(1, (int64_t[]){W}, NULL, NULL);
    for (int kind = 0; kind < 2; kind++) {
        model a, b;
        model_init(&a, false, OAR_F64, mesh);
        model_init(&b, false, OAR_F64, mesh);
        oar_optimizer *oa = kind ? oar_adamw_new(4, a.p, &(oar_adam_options){.lr = 1e-2, .weight_decay = 0.1})
                                 : oar_sgd_new(4, a.p, &(oar_sgd_options){.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-3});
        oar_optimizer *ob = kind ? oar_adamw_new(4, b.p, &(oar_adam_options){.lr = 1e-2, .weight_decay = 0.1})
                                 : oar_sgd_new(4, b.p, &(oar_sgd_options){.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-3});
        oar_zero *z = oar_zero_new(ob, mesh, 0, &(oar_zero_options){.stage = 2});
        CHECK(z != NULL);
        oar_manual_seed(5);
        oar_tensor *x = oar_shard_tensor(oar_randn(OAR_F64, 2, (int64_t[]){4 * W, 6}), mesh, (oar_placement[]){oar_shard(0)});
        for (int step = 0; step < 5; step++) {
            oar_pool *p = oar_pool_push();
            CHECK(oar_backward(oar_sum(oar_square(forward(&a, x)), 0, NULL, false), NULL) == 0);
            CHECK(oar_dist_reduce_grads(4, a.p, 0) == 1 && oar_optim_step(oa) == 0);
            oar_optim_zero_grad(oa);
            CHECK(oar_backward(oar_sum(oar_square(forward(&b, x)), 0, NULL, false), NULL) == 0);
            CHECK(oar_zero_step(z) == 1);
            oar_pool_pop(p);
        }
        for (int i = 0; i < 4; i++) {
            oar_tensor *pa = oar_unshard(a.p[i]), *pb = oar_unshard(b.p[i]);
            CHECK(!memcmp(oar_tensor_data(pa), oar_tensor_data(pb), (size_t)oar_tensor_numel(pa) * 8));
        }
        /* SGD keeps one buffer (momentum), AdamW two */
        CHECK(oar_zero_state_bytes(z) == (kind ? 2 : 1) * oar_zero_shard(z, NULL, NULL) * 8);
        oar_zero_free(z);
        oar_optim_free(oa);
        oar_optim_free(ob);
        model_free(&a);
        model_free(&b);
    }
    oar_mesh_release(mesh);
    oar_pool_pop(pool);
}

/* Gradients that are already Replicate (a replicated input: every rank
 * computes the whole gradient) need no communication: ZeRO-2 takes its
 * shard and its step equals one process's bit for bit. Partial and
 * Replicate gradients mixed are refused. */
static void test_replicated_grads(void) {
    oar_pool *pool = oar_pool_push();
    oar_mesh *mesh = oar_mesh_create(1, (int64_t[]){W}, NULL, NULL);
    model a, b;
    model_init(&a, false, OAR_F64, NULL);
    model_init(&b, false, OAR_F64, mesh);
    oar_optimizer *oa = oar_adam_new(4, a.p, &(oar_adam_options){.lr = 1e-2});
    oar_optimizer *ob = oar_adam_new(4, b.p, &(oar_adam_options){.lr = 1e-2});
    oar_zero *z = oar_zero_new(ob, mesh, 0, &(oar_zero_options){.stage = 2});
    CHECK(z != NULL);
    oar_manual_seed(6);
    oar_tensor *x = oar_randn(OAR_F64, 2, (int64_t[]){5, 6});
    for (int step = 0; step < 3; step++) {
        CHECK(oar_backward(oar_sum(oar_square(forward(&a, x)), 0, NULL, false), NULL) == 0);
        CHECK(oar_optim_step(oa) == 0);
        oar_optim_zero_grad(oa);
        oar_tensor *l = oar_sum(oar_square(forward(&b, x)), 0, NULL, false);
        CHECK(oar_backward(l, NULL) == 0);
        CHECK(oar_dtensor_placements(oar_tensor_grad(b.p[0]))[0].kind == OAR_PLACEMENT_REPLICATE);
        CHECK(oar_zero_step(z) == 1);
    }
    for (int i = 0; i < 4; i++) {
        oar_tensor *pb = oar_unshard(b.p[i]);
        CHECK(!memcmp(oar_tensor_data(a.p[i]), oar_tensor_data(pb), (size_t)oar_tensor_numel(pb) * 8));
    }
    /* the MLP on sharded rows (Partial(sum) gradients) plus a term of
     * parameter 2 on replicated rows: the layouts differ, refused */
    oar_tensor *xd = oar_shard_tensor(oar_ones(OAR_F64, 2, (int64_t[]){2 * W, 6}), mesh, (oar_placement[]){oar_shard(0)});
    oar_tensor *xr = oar_shard_tensor(oar_ones(OAR_F64, 2, (int64_t[]){2, 16}), mesh, (oar_placement[]){oar_replicate()});
    oar_tensor *l = oar_add(oar_sum(forward(&b, xd), 0, NULL, false),
                            oar_sum(oar_matmul(xr, oar_transpose(b.p[2], 0, 1)), 0, NULL, false));
    CHECK(oar_backward(l, NULL) == 0);
    CHECK_FAILS(oar_zero_step(z) == 1, "parameter 2 is R along mesh dim 0; ZeRO takes Partial(sum)");
    oar_zero_free(z);
    oar_optim_free(oa);
    oar_optim_free(ob);
    model_free(&a);
    model_free(&b);
    oar_mesh_release(mesh);
    oar_pool_pop(pool);
}

static void test_errors(void) {
    oar_pool *pool = oar_pool_push();
    oar_mesh *mesh = oar_mesh_create(1, (int64_t[]){W}, NULL, NULL);
    oar_mesh *other = oar_mesh_create(1, (int64_t[]){W}, NULL, NULL);
    model m;
    model_init(&m, false, OAR_F32, mesh);
    oar_optimizer *adam = oar_adam_new(4, m.p, NULL);
    oar_zero_options o1 = {.stage = 1};
    CHECK_FAILS(oar_zero_new(NULL, mesh, 0, &o1), "optimizer is NULL");
    CHECK_FAILS(oar_zero_new(adam, NULL, 0, &o1), "mesh is NULL");
    CHECK_FAILS(oar_zero_new(adam, mesh, 0, NULL), "options is NULL");
    CHECK_FAILS(oar_zero_new(adam, mesh, 0, &(oar_zero_options){.stage = 0}), "stage 0");
    CHECK_FAILS(oar_zero_new(adam, mesh, 0, &(oar_zero_options){.stage = 3}), "stage 3 needs its units");
    CHECK_FAILS(oar_zero_new(adam, mesh, 0, &(oar_zero_options){.stage = 4}), "stage 4");
    CHECK_FAILS(oar_zero_new(adam, mesh, 0, &(oar_zero_options){.stage = 2, .accum_steps = -1}), "accum_steps -1");
    CHECK_FAILS(oar_zero_new(adam, mesh, 1, &o1), "mesh dim 1 of a 1-d mesh");
    CHECK_FAILS(oar_zero_new(adam, other, 0, &o1), "parameter 0 [16, 6] is not a dtensor replicated on this mesh");

    /* plain tensors; a sharded parameter; mixed dtypes */
    model plain;
    model_init(&plain, false, OAR_F32, NULL);
    oar_optimizer *o_plain = oar_adam_new(4, plain.p, NULL);
    CHECK_FAILS(oar_zero_new(o_plain, mesh, 0, &o1), "parameter 0 [16, 6] is not a dtensor");
    oar_tensor *sh = oar_shard_tensor(oar_ones(OAR_F32, 1, (int64_t[]){4 * W}), mesh, (oar_placement[]){oar_shard(0)});
    oar_tensor *f64 = oar_shard_tensor(oar_ones(OAR_F64, 1, (int64_t[]){4}), mesh, (oar_placement[]){oar_replicate()});
    oar_optimizer *o_sh = oar_sgd_new(2, (oar_tensor *[]){m.p[1], sh}, &(oar_sgd_options){.lr = 0.1});
    CHECK_FAILS(oar_zero_new(o_sh, mesh, 0, &o1), "parameter 1 [");
    oar_optimizer *o_mixed = oar_sgd_new(2, (oar_tensor *[]){m.p[1], f64}, &(oar_sgd_options){.lr = 0.1});
    CHECK_FAILS(oar_zero_new(o_mixed, mesh, 0, &o1), "parameter 1 is float64, parameter 0 float32");

    /* a template that already stepped */
    oar_tensor *x = oar_shard_tensor(oar_ones(OAR_F32, 2, (int64_t[]){2 * W, 6}), mesh, (oar_placement[]){oar_shard(0)});
    CHECK(oar_backward(oar_sum(forward(&m, x), 0, NULL, false), NULL) == 0);
    oar_optimizer *stepped = oar_adam_new(4, m.p, NULL);
    CHECK(oar_dist_reduce_grads(4, m.p, 0) == 1 && oar_optim_step(stepped) == 0);
    CHECK_FAILS(oar_zero_new(stepped, mesh, 0, &o1), "has taken 1 steps");
    oar_optim_zero_grad(stepped);

    /* at a step: a parameter without a gradient, a NULL optimizer */
    oar_zero *z = oar_zero_new(adam, mesh, 0, &(oar_zero_options){.stage = 2, .accum_steps = 2});
    CHECK(z != NULL);
    CHECK(oar_zero_inner(z) != NULL && oar_optim_lr(oar_zero_inner(z)) == 1e-3);
    CHECK(oar_zero_state_bytes(z) == 0); /* state is made at the first update */
    oar_tensor *h = oar_tanh(oar_matmul(x, oar_transpose(m.p[0], 0, 1)));
    CHECK(oar_backward(oar_sum(h, 0, NULL, false), NULL) == 0); /* only parameter 0 gets a gradient */
    CHECK(oar_zero_step(z) == 0);                               /* counted: nothing checked yet */
    CHECK_FAILS(oar_zero_step(z) == 1, "parameter 1 has no gradient");
    CHECK(oar_tensor_grad(m.p[0]) == NULL); /* dropped after the failed update */
    CHECK_FAILS(oar_zero_step(NULL) == 1, "NULL");
    CHECK_FAILS(oar_zero_inner(NULL), "NULL");
    CHECK(oar_zero_state_bytes(NULL) == -1 && oar_zero_shard(NULL, NULL, NULL) == -1);
    oar_zero_free(z);
    oar_zero_free(NULL);

    oar_optim_free(adam);
    oar_optim_free(o_plain);
    oar_optim_free(o_sh);
    oar_optim_free(o_mixed);
    oar_optim_free(stepped);
    model_free(&plain);
    model_free(&m);
    oar_mesh_release(other);
    oar_mesh_release(mesh);
    oar_pool_pop(pool);
}

/* ---- stage 3 ------------------------------------------------------------ */

#define MAXL 4

/* A stack of modules: Linear 6 -> 16, tanh, Linear 16 -> 3 (f32), or two
 * transformer encoder layers (f64, 8 wide). */
typedef struct stack {
    oar_module *l[MAXL];
    int n;
    oar_tensor *p[MAXP];
    int np, unit_params[MAXL], n_units;
    int64_t unit_numel[MAXL];
} stack;

static void stack_init(stack *s, bool transformer, oar_mesh *mesh) {
    memset(s, 0, sizeof *s);
    oar_manual_seed(transformer ? 77 : 99);
    if (transformer) {
        oar_transformer_options o = {.dim_feedforward = 16, .norm_first = true, .causal = true,
                                     .activation = OAR_ACTIVATION_GELU, .dtype = OAR_F64};
        s->l[0] = oar_transformer_encoder_layer_new(8, 2, &o);
        s->l[1] = oar_transformer_encoder_layer_new(8, 2, &o);
        s->n = 2;
    } else {
        s->l[0] = oar_linear_new(6, 16, true);
        s->l[1] = oar_tanh_new();
        s->l[2] = oar_linear_new(16, 3, true);
        s->n = 3;
    }
    for (int i = 0; i < s->n; i++) {
        if (mesh) CHECK(oar_parallelize(s->l[i], mesh, 0, 0, NULL) == 0);
        int k = oar_module_parameters(s->l[i], s->p + s->np, MAXP - s->np);
        if (!k) continue;
        s->unit_params[s->n_units] = k;
        for (int j = s->np; j < s->np + k; j++) s->unit_numel[s->n_units] += oar_tensor_numel(s->p[j]);
        s->n_units++;
        s->np += k;
    }
}

static void stack_free(stack *s) {
    for (int i = 0; i < s->n; i++) oar_module_free(s->l[i]);
}

static oar_tensor *stack_forward(stack *s, oar_zero *z, oar_tensor *x) {
    for (int i = 0; i < s->n && x; i++)
        x = z && oar_module_parameters(s->l[i], NULL, 0) ? oar_zero_forward(z, s->l[i], x)
                                                         : oar_module_forward(s->l[i], x);
    return x;
}

typedef enum { S_ONE, S_DP, S_ZERO3, S_ZERO3_OFFLOAD, S_ZERO2_OFFLOAD } smode;

/* stage 3's parameter bytes on this rank: the shards, and the shards plus
 * the largest unit (padded) at the peak */
static void check_param_bytes(oar_zero *z, const stack *s, oar_dtype dt) {
    int64_t es = (int64_t)oar_dtype_size(dt), chunk = 0, biggest = 0, total = 0, peak;
    for (int u = 0; u < s->n_units; u++) {
        int64_t c = (s->unit_numel[u] + W - 1) / W;
        chunk += c;
        total += s->unit_numel[u];
        if (c * W > biggest) biggest = c * W;
    }
    CHECK(oar_zero_shard(z, NULL, NULL) == chunk);
    CHECK(chunk * W >= total && chunk * W < total + s->n_units * W); /* 1/N, but for padding */
    CHECK(oar_zero_param_bytes(z, &peak) == chunk * es);
    if (peak != (chunk + biggest) * es)
        fprintf(stderr, "rank %d: peak parameter bytes %lld, want %lld\n", ME, (long long)peak,
                (long long)((chunk + biggest) * es));
    CHECK(peak == (chunk + biggest) * es);
}

static int stage3_opt; /* train3's optimizer: 0 Adam, 1 SGD with momentum, 2 AdamW */

/* Trains STEPS Adam steps as train() does, on a stack; ZeRO-3 units are its
 * modules with parameters. */
static void train3(smode md, bool transformer, int accum, oar_tensor *x, oar_tensor *y, run *out) {
    oar_mesh *mesh = md == S_ONE ? NULL : oar_mesh_create(1, (int64_t[]){W}, NULL, NULL);
    stack s;
    stack_init(&s, transformer, mesh);
    oar_dtype dt = transformer ? OAR_F64 : OAR_F32;
    double lr = transformer ? 3e-3 : 1e-2;
    oar_optimizer *opt = stage3_opt == 1   ? oar_sgd_new(s.np, s.p, &(oar_sgd_options){.lr = 0.05, .momentum = 0.9})
                         : stage3_opt == 2 ? oar_adamw_new(s.np, s.p, &(oar_adam_options){.lr = lr, .weight_decay = 0.1})
                                           : oar_adam_new(s.np, s.p, &(oar_adam_options){.lr = lr});
    CHECK(opt != NULL);
    oar_zero *z = NULL;
    if (md >= S_ZERO3) {
        bool three = md != S_ZERO2_OFFLOAD;
        oar_zero_options o = {.stage = three ? 3 : 2, .accum_steps = accum, .offload_state = md != S_ZERO3,
                              .n_units = three ? s.n_units : 0, .unit_params = three ? s.unit_params : NULL};
        z = oar_zero_new(opt, mesh, 0, &o);
        CHECK(z != NULL);
        oar_optim_free(opt);
        opt = NULL;
    }
    bool three = z && md != S_ZERO2_OFFLOAD;
    if (three) { /* between steps the parameters read as zeros */
        oar_pool *pool = oar_pool_push();
        CHECK(oar_tensor_item(oar_sum(oar_abs(oar_unshard(s.p[0])), 0, NULL, false)) == 0);
        oar_pool_pop(pool);
    }
    int64_t rows = oar_tensor_shape(x)[0], mb = rows / accum;
    for (int step = 0; step < STEPS; step++) {
        oar_pool *pool = oar_pool_push();
        double loss = 0;
        for (int k = 0; k < accum; k++) {
            oar_tensor *xb = oar_slice(x, 0, k * mb, (k + 1) * mb, 1), *yb = oar_slice(y, 0, k * mb, (k + 1) * mb, 1);
            if (mesh) {
                xb = oar_shard_tensor(xb, mesh, (oar_placement[]){oar_shard(0)});
                yb = oar_shard_tensor(yb, mesh, (oar_placement[]){oar_shard(0)});
            }
            oar_tensor *d = oar_sub(stack_forward(&s, three ? z : NULL, xb), yb);
            oar_tensor *l = oar_mul_scalar(oar_sum(oar_square(d), 0, NULL, false), 1.0 / (double)oar_tensor_numel(yb));
            CHECK(l != NULL);
            /* ZeRO divides the summed gradient by accum; without it, the loss */
            CHECK(oar_backward(z ? l : oar_mul_scalar(l, 1.0 / accum), NULL) == 0);
            if (three) CHECK(oar_tensor_grad(s.p[0]) == NULL); /* reduced into the shard instead */
            loss += oar_tensor_item(mesh ? oar_unshard(l) : l) / accum;
            if (z) CHECK(oar_zero_step(z) == (k == accum - 1));
        }
        if (opt) {
            if (mesh) CHECK(oar_dist_reduce_grads(s.np, s.p, 0) == 1);
            CHECK(oar_optim_step(opt) == 0);
            oar_optim_zero_grad(opt);
        }
        out->loss[step] = loss;
        oar_pool_pop(pool);
    }
    if (three) check_param_bytes(z, &s, dt);
    if (three) CHECK(oar_zero_gather_params(z) == 0);
    oar_pool *pool = oar_pool_push();
    out->np = s.np;
    for (int i = 0; i < s.np; i++) out->params[i] = oar_tensor_retain(oar_clone(mesh ? oar_unshard(s.p[i]) : s.p[i]));
    oar_pool_pop(pool);
    if (three) {
        int64_t peak, chunk = oar_zero_shard(z, NULL, NULL), es = (int64_t)oar_dtype_size(dt);
        CHECK(oar_zero_param_bytes(z, &peak) == chunk * (W + 1) * es); /* all gathered, plus the shards */
        CHECK(oar_zero_release_params(z) == 0 && oar_zero_param_bytes(z, NULL) == chunk * es);
        CHECK(oar_zero_state_bytes(z) == (stage3_opt == 1 ? 1 : 2) * chunk * es);
    }
    oar_zero_free(z);
    oar_optim_free(opt);
    stack_free(&s);
    oar_mesh_release(mesh);
}

static void test_zero3(bool transformer) {
    oar_pool *pool = oar_pool_push();
    oar_manual_seed(transformer ? 321 : 123);
    oar_dtype dt = transformer ? OAR_F64 : OAR_F32;
    oar_tensor *x = transformer ? oar_randn(dt, 3, (int64_t[]){4 * W, 5, 8}) : oar_randn(dt, 2, (int64_t[]){8 * W, 6});
    oar_tensor *y = transformer ? oar_randn(dt, 3, (int64_t[]){4 * W, 5, 8}) : oar_randn(dt, 2, (int64_t[]){8 * W, 3});
    double tol = transformer ? 1e-10 : 1e-5;
    run ref = {0}, dp = {0}, r = {0}, off = {0}, acc = {0};
    train3(S_ONE, transformer, 1, x, y, &ref);
    train3(S_DP, transformer, 1, x, y, &dp);
    check_close("stack, plain data parallel", &dp, &ref, tol);
    train3(S_ZERO3, transformer, 1, x, y, &r);
    check_close("ZeRO-3", &r, &ref, tol);
    /* the recomputed gradients are backward's own, and each unit's
     * reduce-scatter sums what plain data parallel's all-reduce sums */
    if (transformer) check_bitwise("ZeRO-3", &r, &dp);
    train3(S_ZERO3_OFFLOAD, transformer, 1, x, y, &off);
    check_bitwise("ZeRO-3 with offload vs without", &off, &r);
    run_free(&off);
    train3(S_ZERO2_OFFLOAD, transformer, 1, x, y, &off);
    check_close("ZeRO-2 with offload", &off, &ref, tol);
    if (transformer) check_bitwise("ZeRO-2 with offload", &off, &dp);
    /* 4 micro-batches, each reduce-scattered into the shard at once: the
     * step of plain data parallel accumulating the same micro-batches in
     * .grad (f32: and of the whole batch in one process; f64 over 20 steps
     * the two batchings part by about 1e-10) */
    run dacc = {0};
    train3(S_ZERO3, transformer, 4, x, y, &acc);
    train3(S_DP, transformer, 4, x, y, &dacc);
    check_close("ZeRO-3, 4 micro-batches vs plain DP, 4 micro-batches", &acc, &dacc, tol);
    if (!transformer) check_close("ZeRO-3, 4 micro-batches vs one process", &acc, &ref, tol);
    run_free(&acc);
    run_free(&dacc);
    run_free(&off);
    run_free(&r);
    run_free(&dp);
    run_free(&ref);
    oar_pool_pop(pool);
}

static void test_zero3_mlp(void) { test_zero3(false); }
static void test_zero3_transformer(void) { test_zero3(true); }

/* SGD with momentum and AdamW step the shards as Adam does: plain data
 * parallel's values bit for bit (f64, two transformer layers). */
static void test_zero3_optimizers(void) {
    oar_pool *pool = oar_pool_push();
    oar_manual_seed(321);
    oar_tensor *x = oar_randn(OAR_F64, 3, (int64_t[]){4 * W, 5, 8});
    oar_tensor *y = oar_randn(OAR_F64, 3, (int64_t[]){4 * W, 5, 8});
    for (stage3_opt = 1; stage3_opt <= 2; stage3_opt++) {
        run dp = {0}, r = {0};
        train3(S_DP, true, 1, x, y, &dp);
        train3(S_ZERO3, true, 1, x, y, &r);
        check_bitwise(stage3_opt == 1 ? "ZeRO-3, SGD" : "ZeRO-3, AdamW", &r, &dp);
        CHECK(dp.loss[STEPS - 1] < dp.loss[0]);
        run_free(&r);
        run_free(&dp);
    }
    stage3_opt = 0;
    oar_pool_pop(pool);
}

static void test_zero3_errors(void) {
    oar_pool *pool = oar_pool_push();
    oar_mesh *mesh = oar_mesh_create(1, (int64_t[]){W}, NULL, NULL);
    oar_mesh *other = oar_mesh_create(1, (int64_t[]){W}, NULL, NULL);
    stack s, t;
    stack_init(&s, false, mesh);
    stack_init(&t, false, other);
    oar_optimizer *adam = oar_adam_new(s.np, s.p, NULL);
    CHECK(s.n_units == 2 && s.unit_params[0] == 2 && s.np == 4);
    CHECK_FAILS(oar_zero_new(adam, mesh, 0, &(oar_zero_options){.stage = 3, .n_units = 1, .unit_params = (int[]){2}}),
                "the units hold fewer parameters, the optimizer 4");
    CHECK_FAILS(oar_zero_new(adam, mesh, 0, &(oar_zero_options){.stage = 3, .n_units = 2, .unit_params = (int[]){2, 3}}),
                "the units hold more parameters");
    CHECK_FAILS(oar_zero_new(adam, mesh, 0, &(oar_zero_options){.stage = 3, .n_units = 2, .unit_params = (int[]){4, 0}}),
                "unit 1 has 0 parameters");
    CHECK_FAILS(oar_zero_new(adam, mesh, 0, &(oar_zero_options){.stage = 2, .n_units = 2, .unit_params = s.unit_params}),
                "units are for stage 3, not stage 2");
    oar_optimizer *twice = oar_adam_new(2, (oar_tensor *[]){s.p[0], s.p[0]}, NULL);
    CHECK_FAILS(oar_zero_new(twice, mesh, 0, &(oar_zero_options){.stage = 3, .n_units = 1, .unit_params = (int[]){2}}),
                "parameters 0 and 1 are one tensor");
    /* parameters on another mesh: the ranks of the ZeRO mesh do not hold them */
    oar_optimizer *o_other = oar_adam_new(t.np, t.p, NULL);
    oar_zero_options o3 = {.stage = 3, .n_units = 2, .unit_params = s.unit_params};
    CHECK_FAILS(oar_zero_new(o_other, mesh, 0, &o3), "parameter 0 [16, 6] is not a dtensor replicated on this mesh");

    oar_zero *z = oar_zero_new(adam, mesh, 0, &o3), *z2 = NULL;
    CHECK(z != NULL);
    oar_tensor *x = oar_shard_tensor(oar_ones(OAR_F32, 2, (int64_t[]){2 * W, 6}), mesh, (oar_placement[]){oar_shard(0)});
    /* a module that is not a unit: another stack's, a module without parameters */
    CHECK_FAILS(oar_zero_forward(z, t.l[0], x), "is not wrapped");
    CHECK_FAILS(oar_zero_forward(z, s.l[1], x), "(0 parameters) is not wrapped");
    CHECK_FAILS(oar_zero_forward(NULL, s.l[0], x), "NULL");
    CHECK_FAILS(oar_zero_forward(z, NULL, x), "NULL");
    CHECK_FAILS(oar_zero_forward(z, s.l[0], NULL), "NULL");
    /* a wrong input shape: the module's own error, the unit freed again */
    oar_tensor *bad = oar_shard_tensor(oar_ones(OAR_F32, 2, (int64_t[]){2 * W, 5}), mesh, (oar_placement[]){oar_shard(0)});
    CHECK_FAILS(oar_zero_forward(z, s.l[0], bad), "does not end in in_features 6");
    CHECK(oar_zero_param_bytes(z, NULL) == oar_zero_shard(z, NULL, NULL) * 4);
    /* backward through unit 0 only: the update names unit 1 */
    CHECK(oar_backward(oar_sum(oar_square(oar_zero_forward(z, s.l[0], x)), 0, NULL, false), NULL) == 0);
    CHECK_FAILS(oar_zero_step(z) == 1, "unit 1 got no gradient");
    /* after the failed update the count starts again: a full step works */
    CHECK(oar_backward(oar_sum(oar_square(stack_forward(&s, z, x)), 0, NULL, false), NULL) == 0);
    CHECK(oar_zero_step(z) == 1);
    /* without grad: a forward that records nothing, parameters freed after */
    oar_no_grad_push();
    oar_tensor *ev = stack_forward(&s, z, x);
    oar_no_grad_pop();
    CHECK(ev != NULL && !oar_tensor_requires_grad(ev));
    CHECK(oar_zero_param_bytes(z, NULL) == oar_zero_shard(z, NULL, NULL) * 4);
    /* a stage-2 optimizer does not gather */
    oar_optimizer *adam2 = oar_adam_new(t.np, t.p, NULL);
    z2 = oar_zero_new(adam2, other, 0, &(oar_zero_options){.stage = 2});
    CHECK(z2 != NULL);
    CHECK_FAILS(oar_zero_forward(z2, t.l[0], x), "only stage 3 gathers");
    CHECK(oar_zero_gather_params(z2) == 0 && oar_zero_release_params(z2) == 0); /* no-ops */
    CHECK_FAILS(oar_zero_gather_params(NULL) == 0, "NULL");
    CHECK_FAILS(oar_zero_release_params(NULL) == 0, "NULL");
    CHECK_FAILS(oar_zero_param_bytes(NULL, NULL) == 0, "NULL");
    oar_zero_free(z2);
    oar_zero_free(z);
    oar_optim_free(adam);
    oar_optim_free(adam2);
    oar_optim_free(twice);
    oar_optim_free(o_other);
    stack_free(&s);
    stack_free(&t);
    oar_mesh_release(other);
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
    RUN(test_mlp_f32);
    RUN(test_mlp_f64);
    RUN(test_transformer);
    RUN(test_other_optimizers);
    RUN(test_replicated_grads);
    RUN(test_errors);
    RUN(test_zero3_mlp);
    RUN(test_zero3_transformer);
    RUN(test_zero3_optimizers);
    RUN(test_zero3_errors);
    int rc = test_summary();
    oar_dist_finalize();
    return rc;
}

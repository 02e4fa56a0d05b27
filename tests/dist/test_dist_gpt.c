/* A GPT-style transformer trained under every parallel strategy against
 * one process (issue 22, item 6). The model: token and learned position
 * embeddings, pre-norm causal decoder layers (oar_transformer_decoder_layer_new:
 * attention and a GELU MLP), a final LayerNorm and an LM head, cross-entropy
 * over the vocabulary; SGD with momentum for STEPS steps. It is a list of
 * modules [embed, layer 0 .. layer L-1, head], so the pipeline cuts it into
 * stages and ZeRO-3 makes each module a unit. Every rank trains the same
 * model in one process on the full batch (the reference); the strategy's
 * loss of every step must be within the tolerance, and so must every
 * parameter this rank holds after the last step (unsharded; its stage's
 * under pipeline parallel).
 *
 * Strategies (argv[1]; CTest runs one entry per strategy, "all" runs every
 * one, which is what the entry without mpirun does on 1 rank). On W ranks:
 *   dp        batch Shard(0) over a mesh (W), gradients all-reduced;
 *   tp        Megatron over a mesh (W): in_proj and linear1 colwise, out_proj
 *             and linear2 rowwise, the token table and the LM head
 *             vocab-parallel (Shard(0) of [V, d]: logits Shard(-1), the
 *             embedding's Partial lookup and the sharded log_softmax of
 *             rules_vocab.c). in_proj_weight is one [3d, d] tensor (q, k,
 *             v stacked), so its Shard(0) does not fall on head boundaries:
 *             q, k and v are sliced out of the sharded projection and the
 *             slices are gathered before the heads split (correct values,
 *             more traffic than Megatron's per-head layout);
 *   pp        pipeline over a mesh (W): GPipe and 1F1B with m = 4
 *             micro-batches, and m = 1 (f64 only, bitwise, below); W = 8
 *             stages need 8 modules, so that layout uses 6 layers, and its
 *             reference too;
 *   zero1/2/3 ZeRO over a mesh (W) (zero3: each module a unit);
 *   dp_tp     mesh (W/2, 2); dp_pp mesh (W/2 dp, 2 pp), 1F1B, m = 4;
 *   tp_pp     mesh (2 pp, W/2 tp), 1F1B; dp_tp_pp mesh (dp, tp, pp) =
 *             (2, 2, 2) on 8 ranks, GPipe, m = 4 (on fewer ranks the
 *             dims of size 1 come first: dp, then tp, stay 1).
 * ZeRO with tensor parallel is not run: oar_zero_new takes replicated
 * parameters only (it refuses a Shard placement; tested in test_zero.c).
 *
 * Tolerances. f32: 1e-5 relative on every step's loss and on each
 * parameter (max |a - b| / max |b|). f64: equal bits where the reduction
 * order is that of one process, else 1e-12 (measured: 2.2e-16 of the loss):
 *   bitwise: every strategy on 1 rank except the pipeline with m = 4 and
 *     tp (the same ops on whole tensors: a 1-rank mesh has whole shards);
 *     the pipeline with m = 1 on any number of stages (each stage runs the
 *     same ops on the same whole batch, the activations and gradients move
 *     as bytes, and the loss is scaled by 1/1); ZeRO-1/2/3 against plain
 *     data parallel on the same ranks (the update is elementwise on flat
 *     views, a reduce-scatter sums what the all-reduce sums, and ZeRO-3's
 *     recompute is the same ops);
 *   not bitwise against one process: data parallel (each rank sums its
 *     rows' loss and weight gradients, then the ranks' sums are added: a
 *     different order of the same additions); tensor parallel (a rowwise
 *     contraction is summed in W parts, the vocab-parallel softmax reduces
 *     max and sum in pieces; on 1 rank the vocab-parallel log_softmax is
 *     rules_vocab.c's formula, not the kernel's); the pipeline with m > 1
 *     (each micro-batch's mean loss scaled by 1/m and the gradients summed
 *     over micro-batches, instead of one mean over the batch).
 * With --bench the sizes come from the command line (bench/run_dist.sh gpt
 * runs the 4 layers, d 256), only rank 0 trains the reference (the
 * losses are broadcast), parameters are not compared, and rank 0 prints the
 * largest relative loss difference and the step time, of f32 only unless
 * --f64 is given too.
 * Usage: [mpirun -np W] test_dist_gpt [strategy|all] [--bench [--f64]] [--layers N]
 *        [--d N] [--heads N] [--vocab N] [--seq N] [--batch N] [--steps N] */
#include "test.h"

#include <oar/dist.h>
#include <time.h>

enum { MAXM = 16, MAXP = 16 * 16, MAXSTEPS = 64 };

static int W, ME;
static bool bench, bench_f64; /* --bench: f32 only, unless --f64 */
/* sizes: the test's are tiny so that each strategy runs in seconds oversubscribed */
static int LAYERS = 2, D = 32, HEADS = 4, VOCAB = 64, SEQ = 16, BATCH = 16, STEPS = 20;
static oar_tensor *X, *Y; /* token ids and targets [BATCH, SEQ], i64, on every rank */

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- the model ------------------------------------------------------------ */

static oar_tensor *embed_forward(oar_module *m, oar_tensor *idx) {
    int64_t L = oar_tensor_shape(idx)[1];
    return oar_add(oar_embedding(oar_module_get(m, "tok"), idx),
                   oar_embedding(oar_module_get(m, "pos"), oar_arange(0, (double)L, 1, OAR_I64)));
}

static oar_tensor *head_forward(oar_module *m, oar_tensor *x) {
    x = oar_layer_norm(x, 1, oar_module_get(m, "ln_w"), oar_module_get(m, "ln_b"), 1e-5);
    return oar_add(oar_matmul(x, oar_transpose(oar_module_get(m, "w"), 0, 1)), oar_module_get(m, "b"));
}

static void add_param(oar_module *m, const char *name, oar_tensor *t) {
    CHECK(t && oar_module_add_parameter(m, name, t) == 0);
}

/* The modules [embed, layers..., head] in dtype dt, seeded alike on every
 * rank; returns their count (layers + 2). */
static int make_model(oar_dtype dt, int layers, oar_module **mods) {
    oar_manual_seed(7);
    oar_pool *pool = oar_pool_push();
    int64_t d = D, V = VOCAB;
    mods[0] = oar_module_new("Embed", embed_forward, NULL, NULL);
    add_param(mods[0], "tok", oar_mul_scalar(oar_randn(dt, 2, (int64_t[]){V, d}), 0.5));
    add_param(mods[0], "pos", oar_mul_scalar(oar_randn(dt, 2, (int64_t[]){SEQ, d}), 0.1));
    oar_transformer_options o = {.dim_feedforward = 4 * d, .activation = OAR_ACTIVATION_GELU, .dtype = dt};
    for (int k = 0; k < layers; k++) {
        mods[1 + k] = oar_transformer_decoder_layer_new(d, HEADS, &o);
        CHECK(mods[1 + k] != NULL);
    }
    oar_module *h = mods[layers + 1] = oar_module_new("Head", head_forward, NULL, NULL);
    add_param(h, "ln_w", oar_ones(dt, 1, (int64_t[]){d}));
    add_param(h, "ln_b", oar_zeros(dt, 1, (int64_t[]){d}));
    add_param(h, "w", oar_mul_scalar(oar_randn(dt, 2, (int64_t[]){V, d}), 1.0 / sqrt((double)d)));
    add_param(h, "b", oar_zeros(dt, 1, (int64_t[]){V}));
    oar_pool_pop(pool);
    return layers + 2;
}

static void free_model(int n, oar_module **mods) {
    for (int k = 0; k < n; k++) oar_module_free(mods[k]);
}

/* Mean cross-entropy of logits [b, L, V] against targets [b, L]. */
static oar_tensor *lm_loss(oar_tensor *logits, oar_tensor *target, void *ctx) {
    (void)ctx;
    const int64_t *s = oar_tensor_shape(logits);
    if (!s) return NULL;
    return oar_cross_entropy(oar_reshape(logits, 2, (int64_t[]){s[0] * s[1], s[2]}),
                             oar_reshape(target, 1, (int64_t[]){s[0] * s[1]}), NULL, -100, 0,
                             OAR_REDUCTION_MEAN);
}

/* Megatron's layout, by parameter name within each module */
static const oar_parallel_rule megatron[] = {
    {"tok", OAR_PARALLEL_COLWISE},                 /* vocab-parallel embedding */
    {"self_attn.in_proj_*", OAR_PARALLEL_COLWISE}, {"self_attn.out_proj.*", OAR_PARALLEL_ROWWISE},
    {"linear1.*", OAR_PARALLEL_COLWISE},           {"linear2.*", OAR_PARALLEL_ROWWISE},
    {"w", OAR_PARALLEL_COLWISE},                   {"b", OAR_PARALLEL_COLWISE}, /* vocab-parallel head */
};
enum { N_MEGATRON = sizeof megatron / sizeof megatron[0] };

/* The layout oar_parallelize gave module m along mesh dim tp: Megatron's */
static void check_megatron(oar_module *m, int tp) {
    const oar_state_entry *e;
    int n = oar_module_state(m, &e);
    for (int i = 0; i < n; i++) {
        const char *name = e[i].name;
        int want = -1; /* the sharded dim, -1 replicated */
        if (!strcmp(name, "tok") || !strcmp(name, "w") || !strcmp(name, "b") || !strncmp(name, "linear1.", 8) ||
            !strncmp(name, "self_attn.in_proj_", 18))
            want = 0;
        if (!strcmp(name, "linear2.weight") || !strcmp(name, "self_attn.out_proj.weight")) want = 1;
        const oar_placement *p = oar_dtensor_placements(e[i].tensor);
        bool good = p && (want < 0 ? p[tp].kind == OAR_PLACEMENT_REPLICATE
                                   : p[tp].kind == OAR_PLACEMENT_SHARD && p[tp].dim == want);
        if (!good) fprintf(stderr, "rank %d: %s is not laid out as Megatron's\n", ME, name);
        CHECK(good);
    }
}

/* ---- the reference: one process, the whole batch ---------------------------- */

typedef struct reference {
    oar_dtype dt;
    int layers, n;
    double loss[MAXSTEPS], step_s;
    oar_module *mods[MAXM]; /* trained (none under --bench) */
} reference;
static reference refs[4];
static int n_refs;

static void train_plain(oar_dtype dt, int layers, double *loss, oar_module **mods, double *step_s) {
    int n = make_model(dt, layers, mods);
    oar_tensor *params[MAXP];
    int np = 0;
    for (int k = 0; k < n; k++) np += oar_module_parameters(mods[k], params + np, MAXP - np);
    oar_optimizer *opt = oar_sgd_new(np, params, &(oar_sgd_options){.lr = 0.1, .momentum = 0.9});
    CHECK(opt != NULL);
    double t0 = now();
    for (int s = 0; s < STEPS && opt; s++) {
        oar_pool *pool = oar_pool_push();
        oar_optim_zero_grad(opt);
        oar_tensor *h = X;
        for (int k = 0; k < n; k++) h = oar_module_forward(mods[k], h);
        oar_tensor *l = lm_loss(h, Y, NULL);
        CHECK(l && oar_backward(l, NULL) == 0);
        CHECK(oar_optim_step(opt) == 0);
        loss[s] = l ? oar_tensor_item(l) : NAN;
        oar_pool_pop(pool);
    }
    *step_s = (now() - t0) / STEPS;
    oar_optim_free(opt);
}

/* The reference of (dt, layers), trained on first use: on every rank, or
 * under --bench on rank 0 with the losses broadcast. */
static reference *get_reference(oar_dtype dt, int layers) {
    for (int i = 0; i < n_refs; i++)
        if (refs[i].dt == dt && refs[i].layers == layers) return &refs[i];
    if (n_refs == (int)(sizeof refs / sizeof refs[0])) {
        fprintf(stderr, "test_dist_gpt: more than 4 references\n");
        exit(1);
    }
    reference *r = &refs[n_refs++];
    r->dt = dt;
    r->layers = layers;
    r->n = layers + 2;
    if (!bench) {
        train_plain(dt, layers, r->loss, r->mods, &r->step_s);
    } else {
        oar_pool *pool = oar_pool_push();
        oar_tensor *v = oar_zeros(OAR_F64, 1, (int64_t[]){STEPS + 1});
        if (ME == 0) {
            oar_module *mods[MAXM];
            train_plain(dt, layers, r->loss, mods, &r->step_s);
            free_model(r->n, mods);
            double *p = oar_tensor_data(v);
            for (int s = 0; s < STEPS; s++) p[s] = r->loss[s];
            p[STEPS] = r->step_s;
        }
        oar_mesh *world = oar_mesh_create(1, (int64_t[]){W}, NULL, NULL);
        CHECK(world && oar_dist_broadcast_(v, world, 0, 0) == 0);
        const double *p = oar_tensor_data(v);
        for (int s = 0; s < STEPS; s++) r->loss[s] = p[s];
        r->step_s = p[STEPS];
        oar_mesh_release(world);
        oar_pool_pop(pool);
    }
    CHECK(r->loss[STEPS - 1] < 0.9 * r->loss[0]); /* it trains */
    return r;
}

/* ---- a strategy's layout and run ---------------------------------------------- */

typedef struct layout {
    char name[64];
    int ndim;
    int64_t shape[3];
    const char *dim_names[3];
    int dp, tp, pp;   /* mesh dim of each, or -1 */
    int zero;         /* ZeRO stage, 0 none (data parallel over dp) */
    int m;            /* micro-batches (pipeline) */
    oar_pipe_schedule sched;
} layout;

static double rel(double a, double b) { return fabs(a - b) / (fabs(b) > 1e-30 ? fabs(b) : 1); }

/* max |a - b| / max |b| over two plain tensors */
static double rel_diff(oar_tensor *a, oar_tensor *b) {
    oar_tensor *d = oar_amax(oar_abs(oar_sub(a, b)), 0, NULL, false);
    oar_tensor *s = oar_amax(oar_abs(b), 0, NULL, false);
    return d && s ? oar_tensor_item(d) / (oar_tensor_item(s) > 0 ? oar_tensor_item(s) : 1) : INFINITY;
}

/* Trains the model under layout `lo` in dtype dt; loss[] gets every step's
 * loss (on every rank), mods[] the model (this stage's modules trained,
 * the others untouched), [*k0, *k1) the modules this rank trained, and
 * *step_s the mean step time. Returns the model's module count, 0 after a
 * failure. */
static int train_dist(const layout *lo, oar_dtype dt, int layers, double *loss, oar_module **mods, int *k0,
                      int *k1, double *step_s) {
    int n = make_model(dt, layers, mods);
    oar_mesh *mesh = oar_mesh_create(lo->ndim, lo->shape, NULL, lo->dim_names);
    CHECK(mesh != NULL);
    if (!mesh) return 0;
    oar_pipeline *pl = NULL;
    oar_mesh *sm = mesh; /* the mesh this rank's modules live on */
    int dp = lo->dp, tp = lo->tp;
    *k0 = 0, *k1 = n;
    if (lo->pp >= 0) {
        pl = oar_pipeline_new(n, mods, mesh, lo->pp, lo->m, lo->sched, lm_loss, NULL);
        CHECK(pl != NULL);
        if (!pl) {
            fprintf(stderr, "rank %d: %s: %s\n", ME, lo->name, oar_last_error());
            oar_mesh_release(mesh);
            return 0;
        }
        sm = oar_pipeline_stage_mesh(pl);
        int p = (int)lo->shape[lo->pp], stage = oar_pipeline_stage(pl);
        *k0 = stage * (n / p), *k1 = *k0 + n / p;
        if (dp > lo->pp) dp--; /* the stage mesh lacks the pipeline's dim */
        if (tp > lo->pp) tp--;
    }
    for (int k = *k0; k < *k1 && sm; k++) {
        CHECK(oar_parallelize(mods[k], sm, tp >= 0 ? tp : 0, tp >= 0 ? N_MEGATRON : 0, megatron) == 0);
        if (tp >= 0) check_megatron(mods[k], tp);
    }
    int64_t fallbacks = oar_dist_fallback_count();
    oar_tensor *params[MAXP];
    int np = 0, unit_params[MAXM];
    for (int k = *k0; k < *k1; k++) {
        unit_params[k] = oar_module_parameters(mods[k], params + np, MAXP - np);
        np += unit_params[k];
    }
    oar_optimizer *opt = oar_sgd_new(np, params, &(oar_sgd_options){.lr = 0.1, .momentum = 0.9});
    CHECK(opt != NULL);
    oar_zero *z = NULL;
    if (lo->zero) {
        oar_zero_options zo = {.stage = lo->zero, .n_units = lo->zero == 3 ? n : 0,
                               .unit_params = lo->zero == 3 ? unit_params : NULL};
        z = oar_zero_new(opt, mesh, dp, &zo);
        CHECK(z != NULL);
        oar_optim_free(opt); /* only a template */
        opt = NULL;
        if (!z) fprintf(stderr, "rank %d: %s: %s\n", ME, lo->name, oar_last_error());
    }
    oar_pool *outer = oar_pool_push();
    oar_tensor *x = X, *y = Y;
    if (sm) {
        oar_placement p[OAR_MESH_MAX_DIMS];
        for (int d = 0; d < oar_mesh_ndim(sm); d++) p[d] = d == dp ? oar_shard(0) : oar_replicate();
        x = oar_shard_tensor(X, sm, p);
        y = oar_shard_tensor(Y, sm, p);
    }
    double t0 = now();
    bool ok = opt || z;
    for (int s = 0; s < STEPS && ok; s++) {
        oar_pool *pool = oar_pool_push();
        if (opt) oar_optim_zero_grad(opt);
        int st;
        if (pl) {
            int stage = oar_pipeline_stage(pl), p = (int)lo->shape[lo->pp];
            st = oar_pipeline_step(pl, stage == 0 ? x : NULL, stage == p - 1 ? y : NULL, &loss[s]);
            st = st || oar_optim_step(opt);
        } else {
            oar_tensor *h = x;
            for (int k = 0; k < n; k++) h = z && lo->zero == 3 ? oar_zero_forward(z, mods[k], h) : oar_module_forward(mods[k], h);
            oar_tensor *l = lm_loss(h, y, NULL);
            st = !l || oar_backward(l, NULL);
            if (!st && z) st = oar_zero_step(z) != 1;
            else if (!st) st = oar_dist_reduce_grads(np, params, 0) < 0 || oar_optim_step(opt);
            loss[s] = st ? NAN : oar_tensor_item(oar_unshard(l));
        }
        if (st) fprintf(stderr, "rank %d: %s step %d: %s\n", ME, lo->name, s, oar_last_error());
        CHECK(st == 0);
        ok = st == 0;
        oar_pool_pop(pool);
    }
    *step_s = (now() - t0) / STEPS;
    /* every op on dtensors had a sharding rule */
    if (oar_dist_fallback_count() != fallbacks)
        fprintf(stderr, "rank %d: %s: %lld op calls replicated for want of a rule\n", ME, lo->name,
                (long long)(oar_dist_fallback_count() - fallbacks));
    CHECK(oar_dist_fallback_count() == fallbacks);
    if (z && lo->zero == 3) CHECK(oar_zero_gather_params(z) == 0); /* readable for the comparison */
    oar_pool_pop(outer);
    /* the modules keep their (dtensor) parameters; the optimizers go */
    oar_optim_free(opt);
    oar_zero_free(z);
    oar_pipeline_free(pl);
    oar_mesh_release(mesh);
    return ok ? n : 0;
}

/* A run's losses and trained modules, kept for a later comparison */
typedef struct run_result {
    double loss[MAXSTEPS];
    oar_module *mods[MAXM];
    int n, k0, k1;
} run_result;

/* One run of layout lo in dtype dt against the reference (and, when
 * `against` is given, bitwise against that run's losses and parameters).
 * bitwise: the losses and parameters must equal the reference's bits.
 * Returns the largest relative loss difference; *out (if not NULL) keeps
 * the run (free its modules). */
static double check_run(const layout *lo, oar_dtype dt, bool bitwise, const run_result *against, run_result *out) {
    if (bench && dt == OAR_F64 && !bench_f64) {
        if (out) *out = (run_result){0};
        return 0;
    }
    int p = lo->pp >= 0 ? (int)lo->shape[lo->pp] : 1, layers = LAYERS;
    while ((layers + 2) % p) layers++; /* the pipeline cuts the modules evenly */
    reference *r = get_reference(dt, layers);
    run_result mine = {0};
    double step_s = 0, tol = dt == OAR_F32 ? 1e-5 : 1e-12, worst = 0;
    const char *dn = dt == OAR_F32 ? "f32" : "f64";
    mine.n = train_dist(lo, dt, layers, mine.loss, mine.mods, &mine.k0, &mine.k1, &step_s);
    CHECK(mine.n == r->n);
    for (int s = 0; s < STEPS && mine.n; s++) {
        double e = rel(mine.loss[s], r->loss[s]);
        if (e > worst || isnan(e)) worst = isnan(e) ? INFINITY : e;
        bool good = bitwise ? mine.loss[s] == r->loss[s] : e <= tol;
        if (!good) fprintf(stderr, "rank %d: %s %s step %d: loss %.17g, one process %.17g (%s)\n", ME, lo->name, dn, s,
                           mine.loss[s], r->loss[s], bitwise ? "not bitwise" : "beyond tolerance");
        CHECK(good);
        if (against) {
            if (mine.loss[s] != against->loss[s])
                fprintf(stderr, "rank %d: %s %s step %d: loss %.17g, data parallel %.17g (not bitwise)\n", ME, lo->name,
                        dn, s, mine.loss[s], against->loss[s]);
            CHECK(mine.loss[s] == against->loss[s]);
        }
    }
    /* every parameter this rank trained, against the reference's */
    for (int k = mine.k0; k < mine.k1 && mine.n && !bench; k++) {
        oar_pool *pool = oar_pool_push();
        oar_tensor *a[64], *b[64], *c[64];
        int na = oar_module_parameters(mine.mods[k], a, 64), nb = oar_module_parameters(r->mods[k], b, 64);
        CHECK(na == nb && na > 0);
        if (against) CHECK(oar_module_parameters(against->mods[k], c, 64) == na);
        for (int j = 0; j < na && na == nb; j++) {
            oar_tensor *v = oar_tensor_is_dist(a[j]) ? oar_unshard(a[j]) : a[j];
            double e = rel_diff(v, b[j]);
            bool good = bitwise ? e == 0 : e <= tol;
            if (!good) fprintf(stderr, "rank %d: %s %s: module %d parameter %d off by %g\n", ME, lo->name, dn, k, j, e);
            CHECK(good);
            if (against) {
                oar_tensor *w = oar_tensor_is_dist(c[j]) ? oar_unshard(c[j]) : c[j];
                CHECK(w && rel_diff(v, w) == 0);
            }
        }
        oar_pool_pop(pool);
    }
    if (ME == 0 && bench)
        printf("gpt %-9s np=%d %-34s %s max_rel_loss_diff %.3g step_ms %.1f one_process_step_ms %.1f\n", lo->name, W,
               lo->name + strlen(lo->name) + 1, dn, worst, step_s * 1e3, r->step_s * 1e3);
    if (out) *out = mine;
    else free_model(mine.n ? mine.n : r->n, mine.mods);
    return worst;
}

/* ---- strategies ------------------------------------------------------------ */

/* A layout named `name` over dims (size, name, role) given in order. */
static layout make_layout(const char *name, int ndim, const int64_t *shape, const char *const *dn, const char *roles,
                          int zero, int m, oar_pipe_schedule sched) {
    layout lo = {.ndim = ndim, .dp = -1, .tp = -1, .pp = -1, .zero = zero, .m = m, .sched = sched};
    char desc[48] = "";
    for (int d = 0; d < ndim; d++) {
        lo.shape[d] = shape[d];
        lo.dim_names[d] = dn[d];
        if (roles[d] == 'd') lo.dp = d;
        if (roles[d] == 't') lo.tp = d;
        if (roles[d] == 'p') lo.pp = d;
        size_t len = strlen(desc);
        snprintf(desc + len, sizeof desc - len, "%s%s%lld", d ? "x" : "", dn[d], (long long)shape[d]);
    }
    if (lo.pp >= 0) {
        size_t len = strlen(desc);
        snprintf(desc + len, sizeof desc - len, " %s m=%d", sched == OAR_PIPE_GPIPE ? "gpipe" : "1f1b", m);
    }
    /* name, a NUL, then the description (printed by check_run) */
    size_t nl = strlen(name);
    memcpy(lo.name, name, nl + 1);
    snprintf(lo.name + nl + 1, sizeof lo.name - nl - 1, "%s", desc);
    return lo;
}

static void run_dp(void) {
    layout lo = make_layout("dp", 1, (int64_t[]){W}, (const char *[]){"dp"}, "d", 0, 1, 0);
    check_run(&lo, OAR_F32, false, NULL, NULL);
    check_run(&lo, OAR_F64, W == 1, NULL, NULL);
}

static void run_tp(void) {
    layout lo = make_layout("tp", 1, (int64_t[]){W}, (const char *[]){"tp"}, "t", 0, 1, 0);
    check_run(&lo, OAR_F32, false, NULL, NULL);
    check_run(&lo, OAR_F64, false, NULL, NULL);
}

static void run_pp(void) {
    for (int s = 0; s < 2; s++) {
        oar_pipe_schedule sc = s ? OAR_PIPE_1F1B : OAR_PIPE_GPIPE;
        layout lo = make_layout("pp", 1, (int64_t[]){W}, (const char *[]){"pp"}, "p", 0, 4, sc);
        check_run(&lo, OAR_F32, false, NULL, NULL);
        check_run(&lo, OAR_F64, false, NULL, NULL);
        lo = make_layout("pp", 1, (int64_t[]){W}, (const char *[]){"pp"}, "p", 0, 1, sc);
        check_run(&lo, OAR_F64, true, NULL, NULL); /* one micro-batch: bitwise */
    }
}

static void run_zero(int stage) {
    const char *names[] = {"", "zero1", "zero2", "zero3"};
    layout dp = make_layout("dp", 1, (int64_t[]){W}, (const char *[]){"dp"}, "d", 0, 1, 0);
    layout lo = make_layout(names[stage], 1, (int64_t[]){W}, (const char *[]){"dp"}, "d", stage, 1, 0);
    check_run(&lo, OAR_F32, false, NULL, NULL);
    /* f64: bitwise against plain data parallel on the same ranks */
    run_result plain;
    check_run(&dp, OAR_F64, W == 1, NULL, &plain);
    if (!bench) check_run(&lo, OAR_F64, W == 1, &plain, NULL);
    else check_run(&lo, OAR_F64, W == 1, NULL, NULL);
    free_model(plain.n, plain.mods);
}

static void run_zero1(void) { run_zero(1); }
static void run_zero2(void) { run_zero(2); }
static void run_zero3(void) { run_zero(3); }

static void run_dp_tp(void) {
    int64_t tp = W >= 2 ? 2 : 1;
    layout lo = make_layout("dp_tp", 2, (int64_t[]){W / tp, tp}, (const char *[]){"dp", "tp"}, "dt", 0, 1, 0);
    check_run(&lo, OAR_F32, false, NULL, NULL);
    check_run(&lo, OAR_F64, false, NULL, NULL);
}

static void run_dp_pp(void) {
    int64_t pp = W >= 2 ? 2 : 1;
    layout lo = make_layout("dp_pp", 2, (int64_t[]){W / pp, pp}, (const char *[]){"dp", "pp"}, "dp", 0, 4, OAR_PIPE_1F1B);
    check_run(&lo, OAR_F32, false, NULL, NULL);
    check_run(&lo, OAR_F64, false, NULL, NULL);
}

static void run_tp_pp(void) {
    int64_t pp = W >= 2 ? 2 : 1;
    layout lo = make_layout("tp_pp", 2, (int64_t[]){pp, W / pp}, (const char *[]){"pp", "tp"}, "pt", 0, 4, OAR_PIPE_1F1B);
    check_run(&lo, OAR_F32, false, NULL, NULL);
    check_run(&lo, OAR_F64, false, NULL, NULL);
}

static void run_dp_tp_pp(void) {
    int64_t pp = W >= 2 ? 2 : 1, tp = W >= 4 ? 2 : 1;
    layout lo = make_layout("dp_tp_pp", 3, (int64_t[]){W / (pp * tp), tp, pp}, (const char *[]){"dp", "tp", "pp"},
                            "dtp", 0, 4, OAR_PIPE_GPIPE);
    check_run(&lo, OAR_F32, false, NULL, NULL);
    check_run(&lo, OAR_F64, false, NULL, NULL);
}

static const struct {
    const char *name;
    void (*fn)(void);
} strategies[] = {
    {"dp", run_dp},       {"tp", run_tp},       {"pp", run_pp},       {"zero1", run_zero1},
    {"zero2", run_zero2}, {"zero3", run_zero3}, {"dp_tp", run_dp_tp}, {"dp_pp", run_dp_pp},
    {"tp_pp", run_tp_pp}, {"dp_tp_pp", run_dp_tp_pp},
};
enum { N_STRATEGIES = sizeof strategies / sizeof strategies[0] };

/* Token ids and next-token-style targets that depend on the token and its
 * predecessor (so attention has something to learn). */
static void make_data(void) {
    oar_manual_seed(11);
    X = oar_randint(0, VOCAB, OAR_I64, 2, (int64_t[]){BATCH, SEQ});
    Y = oar_zeros(OAR_I64, 2, (int64_t[]){BATCH, SEQ});
    const int64_t *x = oar_tensor_data(X);
    int64_t *y = oar_tensor_data(Y);
    for (int i = 0; i < BATCH; i++)
        for (int t = 0; t < SEQ; t++)
            y[i * SEQ + t] = (3 * x[i * SEQ + t] + (t ? x[i * SEQ + t - 1] : 0) + 1) % VOCAB;
}

static int usage(const char *what) {
    if (ME == 0) {
        fprintf(stderr, "test_dist_gpt: %s\nusage: test_dist_gpt [all", what);
        for (int i = 0; i < N_STRATEGIES; i++) fprintf(stderr, "|%s", strategies[i].name);
        fprintf(stderr, "] [--bench [--f64]] [--layers N] [--d N] [--heads N] [--vocab N] [--seq N] [--batch N] [--steps N]\n");
    }
    oar_dist_finalize();
    return 2;
}

int main(int argc, char **argv) {
    if (oar_dist_init(&argc, &argv)) {
        fprintf(stderr, "oar_dist_init: %s\n", oar_last_error());
        return 1;
    }
    W = oar_dist_world_size();
    ME = oar_dist_rank();
    const char *which = "all";
    struct { const char *flag; int *v; } sizes[] = {{"--layers", &LAYERS}, {"--d", &D}, {"--heads", &HEADS},
        {"--vocab", &VOCAB}, {"--seq", &SEQ}, {"--batch", &BATCH}, {"--steps", &STEPS}};
    for (int i = 1; i < argc; i++) {
        bool known = false;
        if (!strcmp(argv[i], "--bench")) bench = known = true;
        if (!strcmp(argv[i], "--f64")) bench_f64 = known = true;
        for (size_t f = 0; f < sizeof sizes / sizeof sizes[0] && !known; f++)
            if (!strcmp(argv[i], sizes[f].flag)) {
                if (i + 1 >= argc || atoi(argv[i + 1]) < 1) return usage("a size must be a positive integer");
                *sizes[f].v = atoi(argv[++i]);
                known = true;
            }
        if (!known && argv[i][0] == '-') return usage("unknown option");
        if (!known) which = argv[i];
    }
    if (STEPS > MAXSTEPS || LAYERS + 2 > MAXM - 6 || D % HEADS || BATCH % (4 * (W >= 2 ? W / 2 : 1)))
        return usage("sizes: steps <= 64, layers <= 8, d a multiple of heads, batch a multiple of 4 x (ranks / 2)");
    bool any = false;
    oar_pool *pool = oar_pool_push();
    make_data();
    for (int i = 0; i < N_STRATEGIES; i++)
        if (!strcmp(which, "all") || !strcmp(which, strategies[i].name)) {
            test_current = strategies[i].name;
            oar_clear_error();
            strategies[i].fn();
            any = true;
        }
    if (!any) {
        oar_pool_pop(pool);
        return usage("unknown strategy");
    }
    for (int i = 0; i < n_refs; i++)
        if (!bench) free_model(refs[i].n, refs[i].mods);
    oar_pool_pop(pool);
    int rc = test_summary();
    oar_dist_finalize();
    return rc;
}

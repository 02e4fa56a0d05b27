/* Sharding rules, op by op (src/dist/rules.c, rules_table.c, rules_vocab.c):
 *
 * - every op of the registry has a decision (a rule, or replicate by design
 *   with a reason), and docs/dist_rules.md is the one generated from that
 *   table (`test_dist_rules --write`, run from tests/, rewrites it);
 * - for each rule family, the op on dtensors with sharded inputs equals the
 *   op on the full tensors in one process (f64, 1e-10), the gradients of a
 *   weighted sum of the output too, the output has the expected placement,
 *   and no call fell back to replication (oar_dist_fallback_count);
 * - vocab-parallel embedding and cross-entropy over vocab-parallel logits,
 *   conv2d on batch, output and input channels, attention by heads.
 *
 * Runs on any number of ranks (CTest: alone and under mpirun with 2 and 4;
 * uneven splits leave some ranks small or empty). */
#include "test.h"

#include "dist/dist.h"

#include <oar/dist.h>

static int W, ME;
static oar_mesh *MESH;

static double max_diff(oar_tensor *a, oar_tensor *b) {
    if (!a || !b || oar_tensor_numel(a) != oar_tensor_numel(b)) return INFINITY;
    if (!oar_tensor_numel(a)) return 0;
    oar_tensor *d = oar_amax(oar_abs(oar_sub(oar_cast(a, OAR_F64), oar_cast(b, OAR_F64))), 0, NULL, false);
    return d ? oar_tensor_item(d) : INFINITY;
}

static bool same_placement(oar_placement a, oar_placement b) {
    if (a.kind != b.kind) return false;
    if (a.kind == OAR_PLACEMENT_SHARD) return a.dim == b.dim;
    if (a.kind == OAR_PLACEMENT_PARTIAL) return a.reduce == b.reduce;
    return true;
}

/* ---- every op has a decision; the docs are current ------------------------ */

static void test_registry(void) {
    int missing = 0, replicated = 0;
    for (int op = 0; op < OARI_OP_COUNT; op++) {
        oari_dist_rule r = oari_dist_rule_of((oari_op)op);
        if (r.kind == OARI_RULE_NONE) {
            fprintf(stderr, "op %s has no sharding decision: add a row to src/dist/rules_table.c\n",
                    oari_op_name((oari_op)op));
            missing++;
        }
        /* a replicate-by-design row says why */
        if (r.kind == OARI_RULE_REPLICATE) {
            replicated++;
            CHECK(r.note && strlen(r.note) > 10);
        }
        CHECK(strcmp(oari_rule_kind_name(r.kind), "?") != 0);
    }
    CHECK(missing == 0);
    CHECK(replicated > 0 && replicated < 23); /* (a ratchet: the recurrent layers are most of them) */
    /* the families the issue names have rules, not the fallback */
    const oari_op fam[] = {OARI_OP_conv2d, OARI_OP_index_select, OARI_OP_log_softmax, OARI_OP_layer_norm,
                           OARI_OP_gather, OARI_OP_scatter, OARI_OP_cumsum, OARI_OP_fft_c2c, OARI_OP_concat,
                           OARI_OP_max_pool2d, OARI_OP_sort, OARI_OP_permute, OARI_OP_amax};
    for (size_t i = 0; i < sizeof fam / sizeof fam[0]; i++) {
        oari_rule_kind k = oari_dist_rule_of(fam[i]).kind;
        CHECK(k != OARI_RULE_NONE && k != OARI_RULE_REPLICATE);
    }
    CHECK(oari_dist_rule_of((oari_op)-1).kind == OARI_RULE_NONE);
    CHECK(oari_dist_rule_of(OARI_OP_COUNT).kind == OARI_RULE_NONE);
    CHECK(!strcmp(oari_rule_kind_name((oari_rule_kind)999), "?"));
    CHECK(!strcmp(oari_rule_kind_doc((oari_rule_kind)999), "?"));
}

/* adam_update's plan (all dims free) on a 1-D mesh of 2: p sharded on a
 * dim shards g, m, v and the three outputs on it; a Partial gradient is
 * reduced first, and then everything is replicated. */
static void test_adam_update_plan(void) {
    struct oar_mesh m = {.ndim = 1, .shape = {2}, .size = 2, .coord = {0}};
    oari_meta in[4], out[3];
    for (int i = 0; i < 4; i++) in[i] = (oari_meta){.dtype = OAR_F32, .ndim = 2, .shape = {4, 6}};
    for (int j = 0; j < 3; j++) out[j] = in[0];
    oari_attrs a = {.nf = 7, .f = {1e-3, 0.9, 0.999, 1e-8, 0, 0.1, 0.001}, .ni = 1, .i = {1}};
    const oari_op_def *def = oari_op_defs[OARI_OP_adam_update];
    for (int c = 0; c < 3; c++) { /* p on dim 0, p on dim 1, p on dim 0 with a Partial g */
        oar_placement in_p[4][OAR_MESH_MAX_DIMS];
        for (int i = 0; i < 4; i++) in_p[i][0] = oar_replicate();
        in_p[0][0] = oar_shard(c == 1);
        if (c == 2) in_p[1][0] = oar_partial(OAR_REDUCE_SUM);
        oari_shard_plan plan;
        memset(&plan, 0, sizeof plan);
        CHECK(oari_shard_rule(OARI_OP_adam_update, def, 4, in, in_p, &a, out, &m, &plan) == 1);
        oar_placement o = c == 2 ? oar_replicate() : oar_shard(c == 1);
        for (int i = 0; i < 4; i++) CHECK(same_placement(plan.in[i][0], o));
        for (int j = 0; j < 3; j++) CHECK(same_placement(plan.out[j][0], o));
    }
}

/* layer_norm_backward's plan on a 1-D mesh of 2 (metas only, no ranks
 * needed): a leading dim of x sharded stays sharded for gy, x and the
 * statistics, the weight is replicated, gx is sharded like x and the
 * weight and bias gradients are partial sums; a normalised dim sharded
 * replicates everything. */
static void test_layer_norm_backward_plan(void) {
    struct oar_mesh m = {.ndim = 1, .shape = {2}, .size = 2, .coord = {0}};
    oari_meta in[5] = {{.dtype = OAR_F64, .ndim = 3, .shape = {4, 6, 8}}, {.dtype = OAR_F64, .ndim = 3, .shape = {4, 6, 8}},
                       {.dtype = OAR_F64, .ndim = 3, .shape = {4, 6, 1}}, {.dtype = OAR_F64, .ndim = 3, .shape = {4, 6, 1}},
                       {.dtype = OAR_F64, .ndim = 1, .shape = {8}}};
    oari_meta out[3] = {in[1], in[4], in[4]};
    oari_attrs a = {.ni = 1, .i = {1}};
    const oari_op_def *def = oari_op_defs[OARI_OP_layer_norm_backward];
    for (int sharded = 0; sharded < 3; sharded++) {
        oar_placement in_p[5][OAR_MESH_MAX_DIMS];
        for (int i = 0; i < 5; i++) in_p[i][0] = oar_replicate();
        in_p[1][0] = oar_shard(sharded); /* x: dim 0 or 1 (leading), 2 (normalised) */
        oari_shard_plan plan;
        memset(&plan, 0, sizeof plan);
        CHECK(oari_shard_rule(OARI_OP_layer_norm_backward, def, 5, in, in_p, &a, out, &m, &plan) == 1);
        bool lead = sharded < 2;
        oar_placement o = lead ? oar_shard(sharded) : oar_replicate();
        for (int i = 0; i < 4; i++) CHECK(same_placement(plan.in[i][0], o));
        CHECK(same_placement(plan.in[4][0], oar_replicate()));
        CHECK(same_placement(plan.out[0][0], o));
        for (int j = 1; j < 3; j++)
            CHECK(same_placement(plan.out[j][0], lead ? oar_partial(OAR_REDUCE_SUM) : oar_replicate()));
    }
}

static const char *DOC = "../docs/dist_rules.md";

static int test_docs(bool write) {
    size_t n = 1 << 16;
    char *buf = malloc(n);
    CHECK(buf && oari_dist_rules_doc(buf, n) == 0);
    if (!buf) return 1;
    if (write) {
        FILE *f = fopen(DOC, "w");
        int ok = f && fputs(buf, f) >= 0;
        if (f) ok = !fclose(f) && ok;
        printf("%s %s\n", ok ? "wrote" : "could not write", DOC);
        free(buf);
        return ok ? 0 : 1;
    }
    FILE *f = fopen(DOC, "r");
    char *have = calloc(n + 1, 1);
    size_t got = f && have ? fread(have, 1, n, f) : 0;
    if (f) fclose(f);
    bool current = have && got == strlen(buf) && !memcmp(have, buf, got);
    if (!current)
        fprintf(stderr, "%s is not current: run `test_dist_rules --write` from tests/\n", DOC);
    CHECK(current);
    /* every op with a row is in the page */
    CHECK(have && strstr(have, "| `conv2d` | conv |") && strstr(have, "| `batch_norm` | replicate |"));
    /* the failure paths: no buffer, one too small */
    CHECK_STATUS_FAILS(oari_dist_rules_doc(NULL, 10), "no buffer");
    CHECK_STATUS_FAILS(oari_dist_rules_doc(buf, 100), "too small");
    free(have);
    free(buf);
    return 0;
}

/* ---- one op on dtensors against one process -------------------------------- */

typedef oar_tensor *(*op_fn)(oar_tensor *const *in, const void *ctx);

#define MAXN 4

/* fn on the globals g[0..n) in one process, and on dtensors placed p[i]
 * (1-D mesh of W); g[i] with grad[i] are differentiated through the sum of
 * the output times a fixed random tensor. Checks values and gradients to
 * 1e-10, the output's placement `want`, and that nothing fell back. */
static void check_op(const char *name, op_fn fn, const void *ctx, int n, oar_tensor *const *g,
                     const oar_placement *p, const bool *grad, oar_placement want) {
    oar_pool *pool = oar_pool_push();
    oar_tensor *plain[MAXN], *dt[MAXN];
    for (int i = 0; i < n; i++) {
        plain[i] = oar_clone(g[i]);
        if (grad[i]) oar_tensor_set_requires_grad(plain[i], true);
    }
    oar_tensor *ref = fn(plain, ctx);
    CHECK(ref != NULL);
    if (!ref) {
        fprintf(stderr, "%s: the reference failed: %s\n", name, oar_last_error());
        oar_pool_pop(pool);
        return;
    }
    bool any_grad = false;
    for (int i = 0; i < n; i++) any_grad = any_grad || grad[i];
    oar_tensor *r = NULL;
    if (any_grad) {
        oar_manual_seed(77);
        r = oar_randn(OAR_F64, oar_tensor_ndim(ref), oar_tensor_shape(ref));
        CHECK(oar_backward(oar_sum(oar_mul(ref, r), 0, NULL, false), NULL) == 0);
    }
    for (int i = 0; i < n; i++) {
        dt[i] = oar_shard_tensor(g[i], MESH, &p[i]);
        if (grad[i]) oar_tensor_set_requires_grad(dt[i], true);
    }
    int64_t fb = oar_dist_fallback_count();
    oar_tensor *out = fn(dt, ctx);
    CHECK(out && oar_tensor_is_dist(out));
    bool placed = out && oar_dtensor_placements(out) && same_placement(oar_dtensor_placements(out)[0], want);
    if (!placed && out && oar_dtensor_placements(out)) {
        char s[64];
        fprintf(stderr, "rank %d: %s: output placed %s\n", ME, name,
                oar_placements_str(MESH, oar_dtensor_placements(out), s, sizeof s));
    }
    CHECK(placed);
    double err = out ? max_diff(oar_unshard(out), ref) : INFINITY;
    if (!(err <= 1e-10)) fprintf(stderr, "rank %d: %s: error %g (%s)\n", ME, name, err, oar_last_error());
    CHECK(err <= 1e-10);
    if (any_grad && out) {
        CHECK(oar_backward(oar_sum(oar_mul(out, r), 0, NULL, false), NULL) == 0);
        for (int i = 0; i < n; i++) {
            if (!grad[i]) continue;
            oar_tensor *gd = oar_tensor_grad(dt[i]);
            double ge = gd ? max_diff(oar_tensor_is_dist(gd) ? oar_unshard(gd) : gd, oar_tensor_grad(plain[i]))
                           : INFINITY;
            if (!(ge <= 1e-10)) fprintf(stderr, "rank %d: %s: gradient %d error %g (%s)\n", ME, name, i, ge,
                                        oar_last_error());
            CHECK(ge <= 1e-10);
        }
    }
    int64_t fell = oar_dist_fallback_count() - fb;
    if (fell) fprintf(stderr, "rank %d: %s: %lld calls replicated (OAR_DIST_DEBUG=1 names them)\n", ME, name,
                      (long long)fell);
    CHECK(fell == 0);
    oar_pool_pop(pool);
}

static oar_placement S(int d) { return oar_shard(d); }
static oar_placement R(void) { return oar_replicate(); }
static oar_placement P(oar_reduce_op op) { return oar_partial(op); }

static oar_tensor *randn(int ndim, const int64_t *shape) { return oar_randn(OAR_F64, ndim, shape); }

/* ---- reductions, cumulative ops, softmax, sort --------------------------------- */

static oar_tensor *f_sum0(oar_tensor *const *x, const void *c) { (void)c; return oar_sum(x[0], 1, (int64_t[]){0}, false); }
static oar_tensor *f_amax1(oar_tensor *const *x, const void *c) { (void)c; return oar_amax(x[0], 1, (int64_t[]){1}, false); }
static oar_tensor *f_amax0(oar_tensor *const *x, const void *c) { (void)c; return oar_amax(x[0], 1, (int64_t[]){0}, true); }
static oar_tensor *f_amin0(oar_tensor *const *x, const void *c) { (void)c; return oar_amin(x[0], 1, (int64_t[]){0}, false); }
static oar_tensor *f_prod0(oar_tensor *const *x, const void *c) { (void)c; return oar_prod(x[0], 1, (int64_t[]){0}, false); }
static oar_tensor *f_argmax1(oar_tensor *const *x, const void *c) { (void)c; return oar_argmax(x[0], 1, false); }
static oar_tensor *f_cumsum1(oar_tensor *const *x, const void *c) { (void)c; return oar_cumsum(x[0], 1); }
static oar_tensor *f_softmax0(oar_tensor *const *x, const void *c) { (void)c; return oar_softmax(x[0], 0); }
static oar_tensor *f_softmax1(oar_tensor *const *x, const void *c) { (void)c; return oar_softmax(x[0], 1); }
static oar_tensor *f_logsoftmax1(oar_tensor *const *x, const void *c) { (void)c; return oar_log_softmax(x[0], 1); }
static oar_tensor *f_sort1(oar_tensor *const *x, const void *c) { (void)c; return oar_sort(x[0], 1, true, NULL); }

static void test_reductions(void) {
    oar_manual_seed(3);
    int64_t sh[2] = {2 * W + 1, 5};
    oar_tensor *x = randn(2, sh);
    const bool yes[1] = {true}, no[1] = {false};
    check_op("sum over a sharded dim", f_sum0, NULL, 1, &x, (oar_placement[]){S(0)}, yes, P(OAR_REDUCE_SUM));
    check_op("amax over a kept sharded dim", f_amax1, NULL, 1, &x, (oar_placement[]){S(0)}, yes, S(0));
    oar_tensor *xe = randn(2, (int64_t[]){2 * W, 5}); /* no empty chunk */
    check_op("amax over a sharded dim", f_amax0, NULL, 1, &xe, (oar_placement[]){S(0)}, no, P(OAR_REDUCE_MAX));
    check_op("amin over a sharded dim", f_amin0, NULL, 1, &xe, (oar_placement[]){S(0)}, no, P(OAR_REDUCE_MIN));
    /* max and min have no identity: an empty chunk (the last of 2W + 1 rows on 4 ranks) is gathered */
    int64_t size = (sh[0] + W - 1) / W;
    bool empty = (W - 1) * size >= sh[0];
    check_op("amax over a sharded dim with an empty chunk", f_amax0, NULL, 1, &x, (oar_placement[]){S(0)}, no,
             empty ? R() : P(OAR_REDUCE_MAX));
    check_op("prod over a sharded dim", f_prod0, NULL, 1, &x, (oar_placement[]){S(0)}, no, P(OAR_REDUCE_PROD));
    check_op("prod over a kept sharded dim", f_prod0, NULL, 1, &x, (oar_placement[]){S(1)}, yes, S(0));
    check_op("argmax along an unsharded dim", f_argmax1, NULL, 1, &x, (oar_placement[]){S(0)}, no, S(0));
    check_op("cumsum along an unsharded dim", f_cumsum1, NULL, 1, &x, (oar_placement[]){S(0)}, yes, S(0));
    check_op("softmax along an unsharded dim", f_softmax0, NULL, 1, &x, (oar_placement[]){S(1)}, yes, S(1));
    check_op("sort along an unsharded dim", f_sort1, NULL, 1, &x, (oar_placement[]){S(0)}, yes, S(0));
    /* along the sharded dim: the max and the sum of exp all-reduced */
    int64_t wide[2] = {3, 2 * W + 1};
    oar_tensor *l = oar_mul_scalar(randn(2, wide), 4);
    check_op("softmax along the sharded dim", f_softmax1, NULL, 1, &l, (oar_placement[]){S(1)}, yes, S(1));
    check_op("log_softmax along the sharded dim", f_logsoftmax1, NULL, 1, &l, (oar_placement[]){S(1)}, yes, S(1));
    /* a Partial(sum) through a linear op */
    check_op("cumsum of a Partial(sum)", f_cumsum1, NULL, 1, &x, (oar_placement[]){P(OAR_REDUCE_SUM)}, yes,
             P(OAR_REDUCE_SUM));
}

/* ---- movement and indexing ---------------------------------------------------- */

static oar_tensor *f_concat1(oar_tensor *const *x, const void *c) { (void)c; return oar_concat(2, x, 1); }
static oar_tensor *f_gather1(oar_tensor *const *x, const void *c) { (void)c; return oar_gather(x[0], 1, x[1]); }
static oar_tensor *f_scatter_add1(oar_tensor *const *x, const void *c) {
    (void)c;
    return oar_scatter_add(x[0], 1, x[1], x[2]);
}
static oar_tensor *f_flip1(oar_tensor *const *x, const void *c) { (void)c; return oar_flip(x[0], 1, (int64_t[]){1}); }
static oar_tensor *f_roll1(oar_tensor *const *x, const void *c) {
    (void)c;
    return oar_roll(x[0], 1, (int64_t[]){2}, (int64_t[]){1});
}
static oar_tensor *f_pad(oar_tensor *const *x, const void *c) {
    (void)c;
    return oar_pad(x[0], 2, (int64_t[]){1, 2}, OAR_PAD_REFLECT, 0);
}
static oar_tensor *f_tril(oar_tensor *const *x, const void *c) { (void)c; return oar_tril(x[0], 0); }
static oar_tensor *f_rfft(oar_tensor *const *x, const void *c) {
    (void)c;
    return oar_abs(oar_fft_rfft(x[0], -1, 1, "ortho"));
}
static oar_tensor *f_index_select(oar_tensor *const *x, const void *c) {
    (void)c;
    return oar_index_select(x[0], 1, x[1]);
}

static oar_tensor *f_topk1(oar_tensor *const *x, const void *c) {
    (void)c;
    return oar_topk(x[0], 2, 1, true, true, NULL);
}
static oar_tensor *f_scatter1(oar_tensor *const *x, const void *c) { (void)c; return oar_scatter(x[0], 1, x[1], x[2]); }
static oar_tensor *f_one_hot(oar_tensor *const *x, const void *c) { (void)c; return oar_one_hot(x[0], 7); }
static oar_tensor *f_fft(oar_tensor *const *x, const void *c) {
    (void)c;
    return oar_abs(oar_fft_fft(x[0], -1, 1, NULL));
}
static oar_tensor *f_solve(oar_tensor *const *x, const void *c) { (void)c; return oar_linalg_solve(x[0], x[1]); }
static oar_tensor *f_interp(oar_tensor *const *x, const void *c) {
    (void)c;
    return oar_interpolate(x[0], (int64_t[]){7, 6}, OAR_INTERP_BILINEAR, false);
}
static oar_tensor *f_adaptive(oar_tensor *const *x, const void *c) {
    (void)c;
    return oar_adaptive_avg_pool2d(x[0], (int64_t[]){2, 3});
}

static void test_more(void) {
    oar_manual_seed(29);
    int64_t rows = 2 * W + 1;
    oar_tensor *a = randn(2, (int64_t[]){rows, 6});
    const bool yy[3] = {true, true, true}, yn[3] = {true, false, true}, n1[1] = {false};
    check_op("topk along an unsharded dim", f_topk1, NULL, 1, &a, (oar_placement[]){S(0)}, yy, S(0));
    oar_tensor *idx = oar_randint(0, 6, OAR_I64, 2, (int64_t[]){rows, 3});
    oar_tensor *src = randn(2, (int64_t[]){rows, 3});
    check_op("scatter off the sharded dim", f_scatter1, NULL, 3, (oar_tensor *[]){a, idx, src},
             (oar_placement[]){S(0), S(0), S(0)}, yn, S(0));
    check_op("one_hot of sharded labels", f_one_hot, NULL, 1, &idx, (oar_placement[]){S(1)}, n1, S(1));
    /* (complex input: the rule casts a real one inside the local call, which autograd on
     * dtensors does not see; rfft above covers the gradient) */
    oar_tensor *z = oar_cast(a, OAR_C128);
    check_op("fft along an unsharded dim", f_fft, NULL, 1, &z, (oar_placement[]){S(0)}, n1, S(0));
    /* a batch of well-conditioned systems */
    oar_tensor *A = oar_add(randn(3, (int64_t[]){rows, 4, 4}), oar_mul_scalar(oar_eye(4, 4, OAR_F64), 8));
    oar_tensor *B = randn(3, (int64_t[]){rows, 4, 2});
    check_op("linalg_solve on the batch", f_solve, NULL, 2, (oar_tensor *[]){A, B}, (oar_placement[]){S(0), S(0)},
             yy, S(0));
    oar_tensor *img = randn(4, (int64_t[]){2, rows, 5, 4});
    check_op("bilinear interpolate on channels", f_interp, NULL, 1, &img, (oar_placement[]){S(1)}, yy, S(1));
    check_op("adaptive_avg_pool2d on channels", f_adaptive, NULL, 1, &img, (oar_placement[]){S(1)}, yy, S(1));
}

static void test_movement(void) {
    oar_manual_seed(5);
    int64_t sh[2] = {2 * W + 1, 6}, sh3[3] = {W + 1, 4, 4};
    oar_tensor *a = randn(2, sh), *b = randn(2, (int64_t[]){2 * W + 1, 3});
    const bool yy[3] = {true, true, true}, yn[3] = {true, false, true};
    check_op("concat off the sharded dim", f_concat1, NULL, 2, (oar_tensor *[]){a, b},
             (oar_placement[]){S(0), S(0)}, yy, S(0));
    check_op("concat of Partial(sum)", f_concat1, NULL, 2, (oar_tensor *[]){a, b},
             (oar_placement[]){P(OAR_REDUCE_SUM), R()}, yy, P(OAR_REDUCE_SUM));
    oar_tensor *idx = oar_randint(0, 6, OAR_I64, 2, (int64_t[]){2 * W + 1, 4});
    check_op("gather off the sharded dim", f_gather1, NULL, 2, (oar_tensor *[]){a, idx},
             (oar_placement[]){S(0), S(0)}, yn, S(0));
    oar_tensor *src = randn(2, (int64_t[]){2 * W + 1, 4});
    check_op("scatter_add off the sharded dim", f_scatter_add1, NULL, 3, (oar_tensor *[]){a, idx, src},
             (oar_placement[]){S(0), S(0), S(0)}, yn, S(0));
    check_op("flip of an unsharded dim", f_flip1, NULL, 1, &a, (oar_placement[]){S(0)}, yy, S(0));
    check_op("roll of an unsharded dim", f_roll1, NULL, 1, &a, (oar_placement[]){S(0)}, yy, S(0));
    check_op("reflect pad of an unsharded dim", f_pad, NULL, 1, &a, (oar_placement[]){S(0)}, yy, S(0));
    oar_tensor *c = randn(3, sh3);
    check_op("tril of a batch", f_tril, NULL, 1, &c, (oar_placement[]){S(0)}, yy, S(0));
    check_op("rfft along an unsharded dim", f_rfft, NULL, 1, &a, (oar_placement[]){S(0)}, yy, S(0));
    oar_tensor *rows = oar_randint(0, 6, OAR_I64, 1, (int64_t[]){5});
    check_op("index_select off the sharded dim", f_index_select, NULL, 2, (oar_tensor *[]){a, rows},
             (oar_placement[]){S(0), R()}, yn, S(0));
}

/* ---- norms, convolutions, pooling ---------------------------------------------- */

static oar_tensor *f_group_norm(oar_tensor *const *x, const void *c) {
    (void)c;
    return oar_group_norm(x[0], 2, x[1], x[2], 1e-5);
}
static oar_tensor *f_conv(oar_tensor *const *x, const void *c) {
    const bool *bias = c;
    return oar_conv2d(x[0], x[1], *bias ? x[2] : NULL, (int64_t[]){1, 1}, (int64_t[]){1, 1}, (int64_t[]){1, 1}, 1);
}
static oar_tensor *f_convt(oar_tensor *const *x, const void *c) {
    const bool *bias = c;
    return oar_conv_transpose2d(x[0], x[1], *bias ? x[2] : NULL, (int64_t[]){2, 2}, (int64_t[]){1, 1},
                                (int64_t[]){1, 1}, (int64_t[]){1, 1}, 1);
}
static oar_tensor *f_mse(oar_tensor *const *x, const void *c) {
    (void)c;
    return oar_mse_loss(x[0], x[1], OAR_REDUCTION_MEAN);
}
static oar_tensor *f_max_pool(oar_tensor *const *x, const void *c) {
    (void)c;
    return oar_max_pool2d(x[0], (int64_t[]){2, 2}, (int64_t[]){2, 2}, (int64_t[]){0, 0}, (int64_t[]){1, 1}, false,
                          NULL);
}
static oar_tensor *f_avg_pool(oar_tensor *const *x, const void *c) {
    (void)c;
    return oar_avg_pool2d(x[0], (int64_t[]){3, 3}, (int64_t[]){1, 1}, (int64_t[]){1, 1}, false, true);
}

static void test_conv(void) {
    oar_manual_seed(9);
    int64_t N = 2 * W + 1, C = 2 * W + 1, O = 2 * W + 2;
    oar_tensor *x = randn(4, (int64_t[]){N, C, 5, 5});
    oar_tensor *w = randn(4, (int64_t[]){O, C, 3, 3});
    oar_tensor *b = randn(1, (int64_t[]){O});
    const bool all[3] = {true, true, true};
    bool with_bias = true, no_bias = false;
    check_op("conv2d on the batch", f_conv, &with_bias, 3, (oar_tensor *[]){x, w, b},
             (oar_placement[]){S(0), R(), R()}, all, S(0));
    check_op("conv2d on output channels", f_conv, &with_bias, 3, (oar_tensor *[]){x, w, b},
             (oar_placement[]){R(), S(0), S(0)}, all, S(1));
    check_op("conv2d on input channels", f_conv, &no_bias, 2, (oar_tensor *[]){x, w},
             (oar_placement[]){S(1), S(1)}, all, P(OAR_REDUCE_SUM));
    /* conv_transpose2d: w [C, O, kh, kw], output channels on w's dim 1 */
    oar_tensor *wt = randn(4, (int64_t[]){C, O, 3, 3});
    check_op("conv_transpose2d on the batch", f_convt, &with_bias, 3, (oar_tensor *[]){x, wt, b},
             (oar_placement[]){S(0), R(), R()}, all, S(0));
    check_op("conv_transpose2d on output channels", f_convt, &with_bias, 3, (oar_tensor *[]){x, wt, b},
             (oar_placement[]){R(), S(1), S(0)}, all, S(1));
    check_op("conv_transpose2d on input channels", f_convt, &no_bias, 2, (oar_tensor *[]){x, wt},
             (oar_placement[]){S(1), S(0)}, all, P(OAR_REDUCE_SUM));
    /* a loss over a batch-sharded output: the mean is a Partial(sum) divided by the count */
    oar_tensor *y = randn(4, (int64_t[]){N, C, 5, 5});
    check_op("mse_loss on the batch", f_mse, NULL, 2, (oar_tensor *[]){x, y}, (oar_placement[]){S(0), S(0)}, all,
             P(OAR_REDUCE_SUM));
    check_op("max_pool2d on channels", f_max_pool, NULL, 1, &x, (oar_placement[]){S(1)}, all, S(1));
    check_op("avg_pool2d on the batch", f_avg_pool, NULL, 1, &x, (oar_placement[]){S(0)}, all, S(0));
    oar_tensor *xg = randn(4, (int64_t[]){N, 4, 3, 3});
    oar_tensor *gw = randn(1, (int64_t[]){4}), *gb = randn(1, (int64_t[]){4});
    check_op("group_norm on the batch", f_group_norm, NULL, 3, (oar_tensor *[]){xg, gw, gb},
             (oar_placement[]){S(0), R(), R()}, all, S(0));
}

/* ---- attention by heads ----------------------------------------------------------- */

static oar_tensor *f_attention(oar_tensor *const *x, const void *c) {
    (void)c;
    return oar_scaled_dot_product_attention(x[0], x[1], x[2], NULL, 0, true, 0);
}

static void test_attention(void) {
    oar_manual_seed(13);
    int64_t sh[4] = {2, 2 * W, 5, 4}; /* [N, heads, L, E] */
    oar_tensor *q = randn(4, sh), *k = randn(4, sh), *v = randn(4, sh);
    const bool all[3] = {true, true, true};
    check_op("attention by heads", f_attention, NULL, 3, (oar_tensor *[]){q, k, v},
             (oar_placement[]){S(1), S(1), S(1)}, all, S(1));
}

/* ---- vocab-parallel embedding and cross-entropy ----------------------------------- */

static oar_tensor *f_embedding(oar_tensor *const *x, const void *c) {
    (void)c;
    return oar_embedding(x[0], x[1]);
}
static oar_tensor *f_ce(oar_tensor *const *x, const void *c) {
    (void)c;
    return oar_cross_entropy(x[0], x[1], NULL, -100, 0, OAR_REDUCTION_MEAN);
}
/* embedding (vocab-parallel) -> all-reduce -> head (columns: vocab) -> cross-entropy */
static oar_tensor *f_lm(oar_tensor *const *x, const void *c) {
    (void)c;
    oar_tensor *h = oar_embedding(x[0], x[1]); /* [B, T, D] */
    if (h && oar_tensor_is_dist(h)) h = oar_reshard(h, MESH, (oar_placement[]){R()});
    int64_t flat[2] = {-1, oar_tensor_shape(x[0])[1]};
    oar_tensor *logits = oar_matmul(oar_reshape(h, 2, flat), x[2]); /* [B*T, V] */
    return oar_cross_entropy(logits, oar_reshape(x[3], 1, (int64_t[]){-1}), NULL, 3, 0, OAR_REDUCTION_MEAN);
}

static void test_vocab(void) {
    oar_manual_seed(17);
    int64_t V = 2 * W + 1, D = 3; /* uneven: with 4 ranks the last holds no rows */
    oar_tensor *table = randn(2, (int64_t[]){V, D});
    oar_tensor *ids = oar_randint(0, V, OAR_I64, 2, (int64_t[]){2, 5});
    const bool yn[4] = {true, false, true, false};
    check_op("vocab-parallel embedding", f_embedding, NULL, 2, (oar_tensor *[]){table, ids},
             (oar_placement[]){S(0), R()}, yn, P(OAR_REDUCE_SUM));
    oar_tensor *logits = oar_mul_scalar(randn(2, (int64_t[]){6, V}), 3);
    oar_tensor *target = oar_randint(0, V, OAR_I64, 1, (int64_t[]){6});
    check_op("cross-entropy over vocab-parallel logits", f_ce, NULL, 2, (oar_tensor *[]){logits, target},
             (oar_placement[]){S(1), R()}, yn, R());
    /* the pick of the cross-entropy on its own, and index_select along a sharded dim 1 */
    oar_tensor *pick = oar_randint(0, V, OAR_I64, 2, (int64_t[]){6, 2});
    check_op("gather along the sharded dim", f_gather1, NULL, 2, (oar_tensor *[]){logits, pick},
             (oar_placement[]){S(1), R()}, yn, P(OAR_REDUCE_SUM));
    oar_tensor *cols = oar_randint(0, V, OAR_I64, 1, (int64_t[]){7});
    check_op("index_select along the sharded dim 1", f_index_select, NULL, 2, (oar_tensor *[]){logits, cols},
             (oar_placement[]){S(1), R()}, yn, P(OAR_REDUCE_SUM));
    /* embedding, head and loss together; target 3 is ignored where it occurs */
    oar_tensor *head = randn(2, (int64_t[]){D, V});
    check_op("vocab-parallel embedding + head + cross-entropy", f_lm, NULL, 4,
             (oar_tensor *[]){table, ids, head, ids}, (oar_placement[]){S(0), R(), S(1), R()}, yn, R());
}

/* ---- a 2-D mesh: rules decide each mesh dim on its own ----------------------------- */

static void test_mesh_2d(void) {
    if (W % 2) return;
    oar_mesh *m2 = oar_mesh_create(2, (int64_t[]){2, W / 2}, NULL, NULL);
    CHECK(m2 != NULL);
    oar_pool *pool = oar_pool_push();
    oar_manual_seed(23);
    oar_tensor *x = randn(4, (int64_t[]){3, 4, 5, 5}), *w = randn(4, (int64_t[]){6, 4, 3, 3});
    oar_tensor *ref = oar_conv2d(x, w, NULL, (int64_t[]){1, 1}, (int64_t[]){1, 1}, (int64_t[]){1, 1}, 1);
    oar_tensor *dx = oar_shard_tensor(x, m2, (oar_placement[]){S(0), S(1)});
    oar_tensor *dw = oar_shard_tensor(w, m2, (oar_placement[]){R(), S(1)});
    int64_t fb = oar_dist_fallback_count();
    oar_tensor *y = oar_conv2d(dx, dw, NULL, (int64_t[]){1, 1}, (int64_t[]){1, 1}, (int64_t[]){1, 1}, 1);
    CHECK(oar_dist_fallback_count() == fb);
    const oar_placement *p = y ? oar_dtensor_placements(y) : NULL;
    CHECK(p && same_placement(p[0], S(0)) && same_placement(p[1], P(OAR_REDUCE_SUM)));
    CHECK(max_diff(oar_unshard(y), ref) <= 1e-10);
    /* data x vocab parallel embedding: ids on the first mesh dim, the table's rows on the second */
    oar_tensor *table = randn(2, (int64_t[]){W + 1, 3});
    oar_tensor *ids = oar_randint(0, W + 1, OAR_I64, 2, (int64_t[]){4, 3});
    oar_tensor *dt = oar_shard_tensor(table, m2, (oar_placement[]){R(), S(0)});
    oar_tensor *di = oar_shard_tensor(ids, m2, (oar_placement[]){S(0), R()});
    fb = oar_dist_fallback_count();
    oar_tensor *e = oar_embedding(dt, di);
    CHECK(oar_dist_fallback_count() == fb);
    p = e ? oar_dtensor_placements(e) : NULL;
    CHECK(p && same_placement(p[1], P(OAR_REDUCE_SUM)));
    CHECK(max_diff(oar_unshard(e), oar_embedding(table, ids)) <= 1e-10);
    oar_pool_pop(pool);
    oar_mesh_release(m2);
}

/* ---- bad input through the rules: errors, not crashes ------------------------------- */

static void test_errors(void) {
    oar_pool *pool = oar_pool_push();
    oar_tensor *table = oar_shard_tensor(randn(2, (int64_t[]){5, 2}), MESH, (oar_placement[]){S(0)});
    /* an index outside a vocab-parallel table fails on every rank, as the
     * plain op does (indices are replicated: no rank waits for another) */
    CHECK_FAILS(oar_embedding(table, oar_full(OAR_I64, 1, (int64_t[]){1}, 5)), "out of range");
    CHECK_FAILS(oar_embedding(table, oar_full(OAR_I64, 1, (int64_t[]){1}, -1)), "out of range");
    oar_tensor *logits = oar_shard_tensor(randn(2, (int64_t[]){2, 5}), MESH, (oar_placement[]){S(1)});
    CHECK_FAILS(oar_gather(logits, 1, oar_full(OAR_I64, 2, (int64_t[]){2, 1}, 7)), "out of range");
    CHECK_FAILS(oar_embedding(table, NULL), "embedding");
    CHECK_FAILS(oar_log_softmax(NULL, 0), "softmax");
    oar_pool_pop(pool);
}

static void test_docs_check(void) { test_docs(false); }

int main(int argc, char **argv) {
    bool write = argc > 1 && !strcmp(argv[1], "--write");
    if (write) return test_docs(true);
    if (oar_dist_init(&argc, &argv)) {
        fprintf(stderr, "oar_dist_init: %s\n", oar_last_error());
        return 1;
    }
    W = oar_dist_world_size();
    ME = oar_dist_rank();
    MESH = oar_mesh_create(1, (int64_t[]){W}, NULL, NULL);
    oar_pool *pool = oar_pool_push(); /* the tests' own tensors */
    RUN(test_registry);
    RUN(test_layer_norm_backward_plan);
    RUN(test_adam_update_plan);
    RUN(test_docs_check);
    RUN(test_reductions);
    RUN(test_movement);
    RUN(test_more);
    RUN(test_conv);
    RUN(test_attention);
    RUN(test_vocab);
    RUN(test_mesh_2d);
    RUN(test_errors);
    oar_pool_pop(pool);
    oar_mesh_release(MESH);
    int rc = test_summary();
    oar_dist_finalize();
    return rc;
}

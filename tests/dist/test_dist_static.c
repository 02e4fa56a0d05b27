/* Static auto parallel (include/oar/graph.h, "static auto parallel"): a
 * traced MLP training step (forward, oar_graph_append_backward, SGD or
 * AdamW) annotated data parallel (the batch Shard(0)) and, on a 2-D mesh,
 * Megatron style (w1 column, w2 row parallel), completed, partitioned and
 * run for several steps in the executor (memory plan; compiled kernels and
 * the training passes in one case), against the same graph run whole in
 * this process: losses and final weights within 1e-12 (f64) or 1e-5
 * (f32). Also the placements oar_graph_print shows, the collectives the
 * partition inserts, the per-rank saved model reloaded, and the
 * refusals. Runs on any number of ranks (CTest: alone, and under mpirun
 * with 2 and 4). */
#include "alloc_fail_loop.h"
#include "test.h"

#include <oar/dist.h>
#include <unistd.h>

#define NB 8  /* batch */
#define NI 6  /* inputs */
#define NH 16 /* hidden */
#define NO 4  /* outputs */
#define STEPS 3

static int W, ME;

/* loss = mean((relu(x @ w1 + b1) @ w2 - y)^2); inputs x, y, w1, b1, w2 */
static int mlp_loss(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    oar_tensor *h = oar_relu(oar_add(oar_matmul(in[0], in[2]), in[3]));
    oar_tensor *d = oar_sub(oar_matmul(h, in[4]), in[1]);
    out[0] = oar_mean(oar_mul(d, d), 0, NULL, false);
    return out[0] ? 0 : -1;
}

static oar_graph *trace_batch(oar_dtype dt, bool adam, int64_t nb) {
    oar_graph_input_spec s[5] = {
        {.name = "x", .dtype = dt, .ndim = 2, .shape = {nb, NI}},
        {.name = "y", .dtype = dt, .ndim = 2, .shape = {nb, NO}},
        {.name = "w1", .dtype = dt, .ndim = 2, .shape = {NI, NH}},
        {.name = "b1", .dtype = dt, .ndim = 1, .shape = {NH}},
        {.name = "w2", .dtype = dt, .ndim = 2, .shape = {NH, NO}},
    };
    oar_graph *g = oar_trace(mlp_loss, NULL, 5, s, 1,
                             &(oar_trace_options){.output_names = (const char *[]){"loss"}});
    CHECK(g != NULL);
    if (!g) return NULL;
    CHECK(oar_graph_append_backward(g, 0, 3, (int[]){2, 3, 4}) == 1);
    if (adam)
        CHECK(oar_graph_append_adamw(g, 0.05, 0.9, 0.999, 1e-8, 0.01) == 10);
    else
        CHECK(oar_graph_append_sgd(g, 0.1) == 3);
    return g;
}

static oar_graph *trace_step(oar_dtype dt, bool adam) { return trace_batch(dt, adam, NB); }

/* The global starting values of g's inputs (the same on every rank). */
static void make_inputs(const oar_graph *g, oar_tensor **in) {
    oar_manual_seed(1234);
    oar_pool *pool = oar_pool_push();
    for (int i = 0; i < oar_graph_num_inputs(g); i++) {
        oar_dtype dt;
        int64_t shape[OAR_MAX_DIMS];
        int nd = oar_graph_input_shape(g, i, &dt, shape);
        const char *name = oar_graph_input_name(g, i);
        bool state = strchr(name, ':') || !strcmp(name, "adam_step");
        in[i] = state ? oar_zeros(dt, nd, shape) : oar_mul_scalar(oar_randn(dt, nd, shape), 0.5);
        oar_tensor_retain(in[i]);
    }
    oar_pool_pop(pool);
}

/* Runs g STEPS times from in[] (owned, replaced by each step's next:*),
 * the losses into loss[]. */
static void train(const oar_graph *g, oar_tensor **in, double *loss, bool compile) {
    oar_executor *ex = oar_executor_new(g);
    CHECK(ex != NULL);
    if (!ex) return;
    if (compile) CHECK(oar_executor_compile(ex) == 0);
    int ni = oar_graph_num_inputs(g), no = oar_graph_num_outputs(g);
    int feed[32];
    for (int i = 0; i < ni; i++) {
        char want[128];
        snprintf(want, sizeof want, "next:%s", oar_graph_input_name(g, i));
        feed[i] = -1;
        for (int j = 0; j < no; j++)
            if (!strcmp(oar_graph_output_name(g, j), want)) feed[i] = j;
    }
    oar_tensor *out[32];
    for (int s = 0; s < STEPS; s++) {
        CHECK(oar_executor_run(ex, in, out) == 0);
        loss[s] = oar_tensor_item(out[0]);
        for (int i = 0; i < ni; i++) {
            if (feed[i] < 0) continue;
            oar_pool *p = oar_pool_push();
            oar_tensor *c = oar_tensor_retain(oar_clone(out[feed[i]]));
            oar_pool_pop(p);
            oar_tensor_release(in[i]);
            in[i] = c;
        }
    }
    CHECK(oar_executor_planned_bytes(ex) > 0);
    oar_executor_free(ex);
}

/* The extent of coordinate c's chunk of n over m ranks (ceil-sized chunks, as dtensors cut them).
 */
static int64_t chunk_len(int64_t n, int64_t m, int64_t c) {
    int64_t size = (n + m - 1) / m, start = c * size;
    return start >= n ? 0 : start + size > n ? n - start : size;
}

static double max_diff(oar_tensor *a, oar_tensor *b) {
    oar_pool *p = oar_pool_push();
    double d =
        a && b ? oar_tensor_item(oar_amax(oar_abs(oar_sub(a, b)), 0, NULL, false)) : INFINITY;
    oar_pool_pop(p);
    return d;
}

/* This rank's shard of global t under part's placements of input i (owned). */
static oar_tensor *shard_of(const oar_graph *part, int i, oar_tensor *t, oar_mesh *mesh) {
    oar_placement p[OAR_MESH_MAX_DIMS];
    CHECK(oar_graph_value_placements(part, oar_graph_input_name(part, i), p) ==
          oar_mesh_ndim(mesh));
    oar_pool *pool = oar_pool_push();
    oar_tensor *d = oar_shard_tensor(t, mesh, p);
    oar_tensor *l = d ? oar_tensor_retain(oar_clone(oar_dtensor_local(d))) : NULL;
    oar_pool_pop(pool);
    return l;
}

/* The global value of input i's shard l of part (owned). Collective. */
static oar_tensor *global_of(const oar_graph *part, int i, oar_tensor *l, oar_mesh *mesh) {
    oar_placement p[OAR_MESH_MAX_DIMS];
    CHECK(oar_graph_value_placements(part, oar_graph_input_name(part, i), p) ==
          oar_mesh_ndim(mesh));
    oar_dtype dt;
    int64_t shape[OAR_MAX_DIMS];
    CHECK(oar_graph_input_shape(part, i, &dt, shape) >= 0);
    oar_pool *pool = oar_pool_push();
    oar_tensor *d = oar_dtensor_from_local(l, mesh, p, NULL);
    oar_tensor *gl = d ? oar_tensor_retain(oar_unshard(d)) : NULL;
    oar_pool_pop(pool);
    return gl;
}

static bool printed_has(const oar_graph *g, const char *needle) {
    FILE *f = tmpfile();
    if (!f) return false;
    oar_graph_print(g, f);
    long n = ftell(f);
    rewind(f);
    char *buf = calloc(1, (size_t)n + 1);
    bool hit = buf && fread(buf, 1, (size_t)n, f) == (size_t)n && strstr(buf, needle);
    free(buf);
    fclose(f);
    return hit;
}

typedef struct layout {
    const char *name;
    oar_placement p[2];
} layout;

/* Trains g whole and partitioned with the annotations; compares. Returns
 * the partitioned graph (the caller frees it). */
static oar_graph *check_against_whole(oar_graph *g, oar_mesh *mesh, int n_lay, const layout *lay,
                                      double tol, bool compile, bool optimize) {
    int ni = oar_graph_num_inputs(g);
    oar_tensor *ref[32], *start[32], *loc[32];
    double ref_loss[STEPS], loss[STEPS];
    make_inputs(g, ref);
    for (int i = 0; i < ni; i++)
        start[i] = oar_tensor_retain(ref[i]);
    train(g, ref, ref_loss, false); /* the whole graph in this process (annotations are ignored) */
    for (int k = 0; k < n_lay; k++)
        CHECK(oar_graph_annotate(g, lay[k].name, mesh, lay[k].p) == 0);
    CHECK(oar_graph_complete(g, mesh) == 0);
    oar_graph *part = oar_graph_partition(g, mesh);
    CHECK(part != NULL);
    if (!part) goto done;
    CHECK(oar_graph_verify(part) == 0);
    if (getenv("OAR_TEST_PRINT") && ME == 0)
        oar_graph_print(part, stderr); /* to look at the partition */
    if (optimize) {
        int before = oar_graph_count_collectives(part, NULL);
        CHECK(oar_graph_optimize(part, OAR_PASSES_TRAINING, 0) == 0);
        CHECK(oar_graph_count_collectives(part, NULL) == before);
    }
    CHECK(oar_graph_num_inputs(part) == ni);
    for (int i = 0; i < ni; i++)
        loc[i] = shard_of(part, i, start[i], mesh);
    train(part, loc, loss, compile);
    for (int s = 0; s < STEPS; s++)
        CHECK_NEAR(loss[s], ref_loss[s], tol * fmax(1, fabs(ref_loss[s])));
    CHECK(ref_loss[STEPS - 1] < ref_loss[0]); /* it trains */
    for (int i = 0; i < ni; i++) {
        oar_tensor *gl = global_of(part, i, loc[i], mesh);
        CHECK_NEAR(max_diff(gl, ref[i]), 0, tol);
        oar_tensor_release(gl);
        oar_tensor_release(loc[i]);
    }
done:
    for (int i = 0; i < ni; i++) {
        oar_tensor_release(ref[i]);
        oar_tensor_release(start[i]);
    }
    return part;
}

static void test_data_parallel_f64(void) {
    oar_mesh *mesh = oar_mesh_create(1, (int64_t[]){W}, NULL, NULL);
    oar_graph *g = trace_step(OAR_F64, false);
    const layout lay[] = {{"x", {oar_shard(0)}}, {"y", {oar_shard(0)}}};
    oar_graph *part = check_against_whole(g, mesh, 2, lay, 1e-12, false, false);
    /* the completed graph shows placements; the batch dim is local */
    CHECK(printed_has(g, "x: float64[8, 6] [S(0)]"));
    CHECK(
        printed_has(g, "[P(sum)]")); /* the loss and the weight gradients before their reduction */
    int64_t shape[OAR_MAX_DIMS];
    oar_dtype dt;
    CHECK(oar_graph_input_shape(part, 0, &dt, shape) == 2 && shape[0] == chunk_len(NB, W, ME) &&
          shape[1] == NI);
    CHECK(printed_has(part, "[S(0)]"));
    /* one all-reduce each for the loss and the three gradients: each
     * gradient is needed whole by its grad:* output, so it is reduced where
     * it is made and its update reads that (not the gradient scaled by lr,
     * reduced again); the gradient of the mean, replicated, is sliced to
     * the batch shard once */
    CHECK(oar_graph_count_collectives(part, "dist.all_reduce") == 4);
    CHECK(oar_graph_count_collectives(part, "dist.all_gather") == 0);
    CHECK(oar_graph_count_collectives(part, "dist.shard") == 1);
    CHECK(oar_graph_count_collectives(part, NULL) ==
          oar_graph_count_collectives(part, "dist.all_reduce") +
              oar_graph_count_collectives(part, "dist.shard"));
    oar_graph_free(part);
    oar_graph_free(g);
    oar_mesh_release(mesh);
}

/* A batch of 7: uneven shards (4 + 3 on two ranks, 2 + 2 + 2 + 1 on four). */
static void test_uneven_batch(void) {
    oar_mesh *mesh = oar_mesh_create(1, (int64_t[]){W}, NULL, NULL);
    oar_graph *g = trace_batch(OAR_F64, false, 7);
    const layout lay[] = {{"x", {oar_shard(0)}}, {"y", {oar_shard(0)}}};
    oar_graph *part = check_against_whole(g, mesh, 2, lay, 1e-12, false, false);
    int64_t shape[OAR_MAX_DIMS];
    oar_dtype dt;
    CHECK(oar_graph_input_shape(part, 0, &dt, shape) == 2 && shape[0] == chunk_len(7, W, ME));
    oar_graph_free(part);
    oar_graph_free(g);
    oar_mesh_release(mesh);
}

static void test_data_parallel_f32_adamw_compiled(void) {
    oar_mesh *mesh = oar_mesh_create(1, (int64_t[]){W}, NULL, NULL);
    oar_graph *g = trace_step(OAR_F32, true);
    const layout lay[] = {{"x", {oar_shard(0)}}, {"y", {oar_shard(0)}}};
    oar_graph *part = check_against_whole(g, mesh, 2, lay, 1e-5, true, true);
    CHECK(oar_graph_count_collectives(part, "dist.all_reduce") >= 4);
    oar_graph_free(part);
    oar_graph_free(g);
    oar_mesh_release(mesh);
}

/* dp x tp: the batch over mesh dim 0, w1 by columns and w2 by rows over mesh dim 1. */
static oar_mesh *mesh_2d(void) {
    int64_t shape[2] = {W >= 4 ? 2 : 1, W >= 4 ? W / 2 : W};
    return oar_mesh_create(2, shape, NULL, (const char *[]){"dp", "tp"});
}

static void test_megatron(void) {
    oar_mesh *mesh = mesh_2d();
    int64_t tp = oar_mesh_shape(mesh)[1];
    oar_graph *g = trace_step(OAR_F64, true);
    const layout lay[] = {
        {"x", {oar_shard(0), oar_replicate()}},  {"y", {oar_shard(0), oar_replicate()}},
        {"w1", {oar_replicate(), oar_shard(1)}}, {"b1", {oar_replicate(), oar_shard(0)}},
        {"w2", {oar_replicate(), oar_shard(0)}},
    };
    oar_graph *part = check_against_whole(g, mesh, 5, lay, 1e-12, false, false);
    CHECK(printed_has(g, "w1: float64[6, 16] [R,S(1)]"));
    CHECK(printed_has(g, "x: float64[8, 6] [S(0),R]"));
    /* AdamW's moments follow their weights */
    oar_placement p[OAR_MESH_MAX_DIMS];
    CHECK(oar_graph_value_placements(g, "adam_m:w2", p) == 2 && p[1].kind == OAR_PLACEMENT_SHARD &&
          p[1].dim == 0);
    CHECK(oar_graph_value_placements(g, "next:w1", p) == 2 && p[1].kind == OAR_PLACEMENT_SHARD &&
          p[1].dim == 1);
    int64_t shape[OAR_MAX_DIMS];
    oar_dtype dt;
    int64_t mine = chunk_len(NH, tp, oar_mesh_coord(mesh, 1));
    CHECK(oar_graph_input_shape(part, 2, &dt, shape) == 2 && shape[0] == NI && shape[1] == mine);
    CHECK(oar_graph_input_shape(part, 4, &dt, shape) == 2 && shape[0] == mine && shape[1] == NO);
    /* the row-parallel matmul's partial sums are reduced (forward and
     * backward); the column-parallel weights are never gathered */
    CHECK(oar_graph_count_collectives(part, "dist.all_reduce") >= 2);
    CHECK(oar_graph_count_collectives(part, "dist.all_gather") == 0);
    oar_graph_free(part);
    oar_graph_free(g);
    oar_mesh_release(mesh);
}

/* A folder name all ranks share: rank 0's pid. */
static void shared_dir(oar_mesh *mesh, char *buf, size_t n) {
    oar_pool *p = oar_pool_push();
    oar_tensor *t = oar_full(OAR_I64, 1, (int64_t[]){1}, (double)getpid());
    CHECK(oar_dist_broadcast_(t, mesh, 0, 0) == 0);
    snprintf(buf, n, "/tmp/oar_dist_static.%lld", (long long)oar_tensor_item(t));
    oar_pool_pop(p);
}

static void barrier(oar_mesh *mesh) {
    oar_pool *p = oar_pool_push();
    oar_tensor *t = oar_zeros(OAR_F32, 1, (int64_t[]){1});
    CHECK(oar_dist_broadcast_(t, mesh, 0, 0) == 0);
    oar_pool_pop(p);
}

static void write_index(const char *dir, const char *text) {
    char path[512];
    snprintf(path, sizeof path, "mkdir -p %s", dir);
    CHECK(system(path) == 0);
    snprintf(path, sizeof path, "%s/dist_index.json", dir);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

static void test_save_load(void) {
    oar_mesh *mesh = oar_mesh_create(1, (int64_t[]){W}, NULL, NULL);
    oar_graph *g = trace_step(OAR_F64, false);
    CHECK(oar_graph_annotate(g, "x", mesh, (oar_placement[]){oar_shard(0)}) == 0);
    CHECK(oar_graph_complete(g, mesh) == 0);
    oar_graph *part = oar_graph_partition(g, mesh);
    char dir[256];
    shared_dir(mesh, dir, sizeof dir);
    CHECK(oar_graph_save_dist(part, dir, mesh) == 0);
    oar_graph *back = oar_graph_load_dist(dir, mesh);
    CHECK(back != NULL);
    if (back) {
        CHECK(oar_graph_count_collectives(back, NULL) == oar_graph_count_collectives(part, NULL));
        CHECK(printed_has(back, "[S(0)]"));
        /* one step of each from the same shards: the same outputs */
        oar_tensor *in[8], *loc[8], *o1[8], *o2[8];
        make_inputs(g, in);
        for (int i = 0; i < 5; i++)
            loc[i] = shard_of(part, i, in[i], mesh);
        oar_executor *e1 = oar_executor_new(part), *e2 = oar_executor_new(back);
        CHECK(oar_executor_run(e1, loc, o1) == 0 && oar_executor_run(e2, loc, o2) == 0);
        CHECK(oar_graph_num_outputs(back) == 7);
        for (int j = 0; j < 7; j++)
            CHECK(max_diff(o1[j], o2[j]) == 0);
        oar_executor_free(e1);
        oar_executor_free(e2);
        for (int i = 0; i < 5; i++)
            oar_tensor_release(in[i]), oar_tensor_release(loc[i]);
        oar_graph_free(back);
    }
    /* a mesh of another shape; an index from a world of another size */
    oar_mesh *m2 = oar_mesh_create(2, (int64_t[]){1, W}, NULL, NULL);
    CHECK_FAILS(oar_graph_load_dist(dir, m2), "mesh mismatch");
    char bad[300], text[200];
    snprintf(bad, sizeof bad, "%s.bad%d", dir, ME);
    snprintf(text, sizeof text,
             "{\"format\": \"oar-dist-graph\", \"version\": 1, \"world\": %d, \"mesh\": [%d]}\n",
             W + 1, W + 1);
    write_index(bad, text);
    CHECK_FAILS(oar_graph_load_dist(bad, mesh), "this world has");
    write_index(bad, "{\"world\": 2}");
    CHECK_FAILS(oar_graph_load_dist(bad, mesh), "malformed");
    CHECK_FAILS(oar_graph_load_dist("/nonexistent/oar", mesh), "cannot open");
    CHECK_FAILS(oar_graph_load_dist(NULL, mesh), "NULL");
    CHECK_STATUS_FAILS(oar_graph_save_dist(NULL, dir, mesh), "NULL");
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf %s", bad);
    CHECK(system(cmd) == 0);
    barrier(mesh); /* every rank loaded before the folder goes */
    if (ME == 0) {
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        CHECK(system(cmd) == 0);
    }
    oar_mesh_release(m2);
    oar_graph_free(part);
    oar_graph_free(g);
    oar_mesh_release(mesh);
}

static void test_errors(void) {
    oar_mesh *mesh = oar_mesh_create(1, (int64_t[]){W}, NULL, NULL);
    oar_mesh *m2 = mesh_2d();
    oar_graph *g = trace_step(OAR_F64, false);
    oar_placement s0[] = {oar_shard(0)}, s5[] = {oar_shard(5)},
                  pp[] = {oar_partial(OAR_REDUCE_SUM)};
    CHECK_STATUS_FAILS(oar_graph_annotate(g, "nope", mesh, s0),
                       "no input or constant named \"nope\"");
    CHECK_STATUS_FAILS(oar_graph_annotate(g, "x", mesh, s5), "no such tensor dim");
    CHECK_STATUS_FAILS(
        oar_graph_annotate(g, "x", m2, (oar_placement[]){oar_shard(1), oar_shard(1)}),
        "already sharded");
    CHECK_STATUS_FAILS(oar_graph_annotate(g, "x", mesh, pp), "Partial");
    CHECK_STATUS_FAILS(oar_graph_annotate(NULL, "x", mesh, s0), "NULL");
    CHECK_STATUS_FAILS(oar_graph_annotate(g, "x", NULL, s0), "NULL");
    /* not completed; completed on another mesh than the annotations' */
    CHECK_FAILS(oar_graph_partition(g, mesh), "oar_graph_complete first");
    CHECK(oar_graph_annotate(g, "x", mesh, s0) == 0);
    CHECK_STATUS_FAILS(oar_graph_complete(g, m2), "mesh mismatch");
    CHECK(oar_graph_complete(g, mesh) == 0);
    CHECK_FAILS(oar_graph_partition(g, m2), "mesh mismatch");
    CHECK_FAILS(oar_graph_partition(NULL, mesh), "NULL");
    CHECK_STATUS_FAILS(oar_graph_complete(NULL, mesh), "NULL");
    CHECK_STATUS_FAILS(oar_graph_count_collectives(NULL, NULL), "NULL");
    oar_placement p[OAR_MESH_MAX_DIMS];
    CHECK_STATUS_FAILS(oar_graph_value_placements(g, "nope", p), "no input, constant or output");
    /* a plain traced graph has no placements: the count is 0 */
    oar_graph *plain = trace_step(OAR_F64, false);
    CHECK(oar_graph_value_placements(plain, "x", p) == 0);
    CHECK(oar_graph_count_collectives(plain, NULL) == 0);
    /* placements survive clone and a save/load round trip of the whole graph */
    oar_graph *c = oar_graph_clone(g);
    CHECK(c && printed_has(c, "x: float64[8, 6] [S(0)]"));
    oar_graph_free(c);
    char dir[256];
    snprintf(dir, sizeof dir, "/tmp/oar_dist_static_whole.%d", (int)getpid());
    CHECK(oar_graph_save(g, dir) == 0);
    c = oar_graph_load(dir);
    CHECK(c && printed_has(c, "x: float64[8, 6] [S(0)]") && printed_has(c, "[P(sum)]"));
    CHECK(c && oar_graph_complete(c, mesh) == 0 && printed_has(c, "x: float64[8, 6] [S(0)]"));
    oar_graph_free(c);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    /* annotated again on another mesh: completion follows (derived placements are redone) */
    CHECK(oar_graph_annotate(g, "x", m2, (oar_placement[]){oar_shard(0), oar_replicate()}) == 0);
    CHECK_STATUS_FAILS(oar_graph_complete(g, mesh), "mesh mismatch");
    CHECK(oar_graph_complete(g, m2) == 0);
    CHECK(printed_has(g, "x: float64[8, 6] [S(0),R]") &&
          printed_has(g, "w1: float64[6, 16] [R,R]"));
    oar_graph_free(plain);
    oar_graph_free(g);
    oar_mesh_release(m2);
    oar_mesh_release(mesh);
}

/* Trace, complete, partition and clone with each allocation failing in turn. */
static oar_mesh *oom_mesh;

static int oom_step(void) {
    oar_graph_input_spec s[5] = {
        {.name = "x", .dtype = OAR_F64, .ndim = 2, .shape = {NB, NI}},
        {.name = "y", .dtype = OAR_F64, .ndim = 2, .shape = {NB, NO}},
        {.name = "w1", .dtype = OAR_F64, .ndim = 2, .shape = {NI, NH}},
        {.name = "b1", .dtype = OAR_F64, .ndim = 1, .shape = {NH}},
        {.name = "w2", .dtype = OAR_F64, .ndim = 2, .shape = {NH, NO}},
    };
    oar_graph *g = oar_trace(mlp_loss, NULL, 5, s, 1, NULL), *p = NULL, *c = NULL;
    int st = g ? 0 : -1;
    if (!st && oar_graph_append_backward(g, 0, 3, (int[]){2, 3, 4}) < 0) st = -1;
    if (!st && oar_graph_append_sgd(g, 0.1) < 0) st = -1;
    if (!st) st = oar_graph_annotate(g, "x", oom_mesh, (oar_placement[]){oar_shard(0)});
    if (!st) st = oar_graph_complete(g, oom_mesh);
    if (!st && !(p = oar_graph_partition(g, oom_mesh))) st = -1;
    if (!st && !(c = oar_graph_clone(p))) st = -1;
    oar_graph_free(c);
    oar_graph_free(p);
    oar_graph_free(g);
    return st;
}

static void test_alloc_failures(void) {
    oom_mesh = oar_mesh_create(1, (int64_t[]){W}, NULL, NULL);
    CHECK(oom_step() == 0);
    oar_set_allocator(failing_alloc, NULL);
    int failures, n = fail_each_allocation(oom_step, &failures);
    oar_memory_empty_cache();
    oar_set_allocator(NULL, NULL);
    printf("failed each of %d allocations of trace+backward+sgd+complete+partition+clone\n", n);
    CHECK(failures > 100 && n < 100000);
    oar_mesh_release(oom_mesh);
}

int main(int argc, char **argv) {
    if (oar_dist_init(&argc, &argv)) {
        fprintf(stderr, "oar_dist_init: %s\n", oar_last_error());
        return 1;
    }
    W = oar_dist_world_size();
    ME = oar_dist_rank();
    RUN(test_data_parallel_f64);
    RUN(test_uneven_batch);
    RUN(test_data_parallel_f32_adamw_compiled);
    RUN(test_megatron);
    RUN(test_save_load);
    RUN(test_errors);
    if (W == 1) RUN(test_alloc_failures); /* per process: once, in the run alone */
    int rc = test_summary();
    oar_dist_finalize();
    return rc;
}

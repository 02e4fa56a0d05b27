/* Prepacked conv weights: the predictor's prepack_conv pass
 * (src/graph/passes/prepack_conv.c) turns each f32 conv2d on constant
 * weights into conv2d_prepacked on the weight packed once (and a relu
 * that only it reads into the op). The packed graph gives the unpacked
 * graph's values to f32 rounding on a small CNN with stride 2, padding,
 * dilation, 1x1 and 7x7 kernels, channel counts off the layouts' blocks
 * and odd planes, at several batch sizes, through the predictor and after
 * a save and load; the same for Winograd's convs (order 2: the filter
 * transform packed once, checked against G w G^T in float64). Also the convs the pass must leave alone, the op called
 * directly in every layout it takes (oneDNN's, and others that run on the
 * weight unpacked) against conv2d, and the op's refusals. */
#include "test.h"

#include "graph/ir.h"
#include "infer/predictor.h"
#include "ops/op.h"

#include <oar/infer.h>
#include <pthread.h>
#include <unistd.h>

static uint64_t rng = 777;
static double uniform(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return ((rng >> 11) + 0.5) / 9007199254740992.0;
}

/* uniform in [-a, a), f32 (f64 when dt says so) */
static oar_tensor *rand_t(oar_dtype dt, int ndim, const int64_t *shape, double a) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = a * (2 * uniform() - 1);
    oar_tensor *t = oar_cast(oar_tensor_from_data(v, OAR_F64, ndim, shape), dt);
    free(v);
    return t;
}
static oar_tensor *conv_w(int64_t o, int64_t c, int64_t kh, int64_t kw) {
    return rand_t(OAR_F32, 4, (int64_t[]){o, c, kh, kw}, 1.0 / sqrt((double)(c * kh * kw)));
}

static double max_abs(oar_tensor *t) { return t ? oar_tensor_item(oar_amax(oar_abs(t), 0, NULL, false)) : NAN; }
static double max_diff(oar_tensor *a, oar_tensor *b) { return a && b ? max_abs(oar_sub(a, b)) : NAN; }

static oar_tensor *conv(oar_tensor *x, oar_tensor *w, oar_tensor *b, int64_t s, int64_t p, int64_t d, int64_t g) {
    return oar_conv2d(x, w, b, (int64_t[]){s, s}, (int64_t[]){p, p}, (int64_t[]){d, d}, g);
}

/* ---- a small CNN ------------------------------------------------------------------ */

typedef struct cnn {
    oar_tensor *w1, *b1, *w2, *w3, *b3, *w4, *b4, *w5, *b5, *wg;
} cnn;

/* x [N, 5, 13, 11]: 3x3 + relu; 3x3 stride 2 (no bias) + relu; 1x1 added
 * back (a residual; its weight outweighs its input, so it is packed) + relu; 7x7 stride 2 padding 3, an output itself and
 * relu'd (so its relu stays); dilation 2 + relu; a grouped conv (left
 * alone). Two outputs. */
static int cnn_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    cnn *m = ctx;
    oar_tensor *h = oar_relu(conv(in[0], m->w1, m->b1, 1, 1, 1, 1));
    h = oar_relu(conv(h, m->w2, NULL, 2, 1, 1, 1));
    h = oar_relu(oar_add(conv(h, m->w3, m->b3, 1, 0, 1, 1), h));
    oar_tensor *s = conv(h, m->w4, m->b4, 2, 3, 1, 1);
    h = oar_relu(conv(oar_relu(s), m->w5, m->b5, 1, 2, 2, 1));
    out[0] = conv(h, m->wg, NULL, 1, 1, 1, 3);
    out[1] = s;
    return out[0] && out[1] ? 0 : -1;
}

static cnn make_cnn(void) {
    cnn m = {conv_w(24, 5, 3, 3),  rand_t(OAR_F32, 1, (int64_t[]){24}, 0.1), conv_w(48, 24, 3, 3),
             conv_w(48, 48, 1, 1), rand_t(OAR_F32, 1, (int64_t[]){48}, 0.1), conv_w(17, 48, 7, 7),
             rand_t(OAR_F32, 1, (int64_t[]){17}, 0.1), conv_w(33, 17, 3, 3),
             rand_t(OAR_F32, 1, (int64_t[]){33}, 0.1), conv_w(33, 11, 3, 3)};
    return m;
}

static int run_graph(const oar_graph *g, oar_tensor *x, oar_tensor **y) {
    oar_executor *ex = oar_executor_new(g);
    oar_tensor *o[2] = {NULL, NULL};
    int st = ex ? oar_executor_run(ex, &x, o) : -1;
    for (int i = 0; i < 2; i++) y[i] = !st && o[i] ? oar_clone(o[i]) : NULL;
    oar_executor_free(ex);
    return st;
}

#ifdef OAR_TEST_WITH_DNNL
enum { PACKED = 5, RELUS_LEFT = 2 }; /* the relus of the residual and of the 7x7's output stay */
#else
enum { PACKED = 0, RELUS_LEFT = 5 }; /* without oneDNN the pass leaves the graph as it is */
#endif

/* Checks graph f's two outputs against g's at batch n. */
static void check_against(const oar_graph *g, const oar_graph *f, oar_predictor *p, int64_t n) {
    oar_tensor *x = rand_t(OAR_F32, 4, (int64_t[]){n, 5, 13, 11}, 2.0), *want[2], *got[2];
    CHECK(run_graph(g, x, want) == 0);
    CHECK(run_graph(f, x, got) == 0);
    oar_tensor *served[2] = {NULL, NULL};
    CHECK(!p || oar_predictor_run(p, &x, served) == 0);
    for (int i = 0; i < 2; i++) {
        double mag = max_abs(want[i]), err = max_diff(got[i], want[i]);
        double err_p = p ? max_diff(served[i], want[i]) : 0;
        if (!(mag > 0.01 && err <= 2e-6 * mag && err_p <= 2e-6 * mag))
            fprintf(stderr, "batch %lld, output %d: packed %g, predictor %g off (magnitude %g)\n", (long long)n,
                    i, err, err_p, mag);
        CHECK(mag > 0.01 && err <= 2e-6 * mag && err_p <= 2e-6 * mag);
        oar_tensor_release(served[i]);
    }
}

static void test_cnn(void) {
    oar_pool *pool = oar_pool_push();
    cnn m = make_cnn();
    oar_graph_input_spec spec = {.name = "x", .dtype = OAR_F32, .ndim = 4, .shape = {-1, 5, 13, 11}};
    oar_graph *g = oar_trace(cnn_fn, &m, 1, &spec, 2, NULL);
    CHECK(g && oar_graph_count_op(g, "conv2d") == 6 && oar_graph_count_op(g, "relu") == 5);
    oar_graph *f = g ? oar_graph_clone(g) : NULL;
    CHECK(f && oar_graph_run_pass(f, "prepack_conv") == PACKED);
    CHECK(f && oar_graph_verify(f) == 0);
    CHECK(oar_graph_count_op(f, "conv2d_prepacked") == PACKED);
    CHECK(oar_graph_count_op(f, "conv2d") == 6 - PACKED); /* the grouped conv stays */
    CHECK(oar_graph_count_op(f, "relu") == RELUS_LEFT);
    CHECK(f && oar_graph_run_pass(f, "prepack_conv") == 0); /* nothing left */
    /* the environment switch for A/B measurements */
    oar_graph *off = g ? oar_graph_clone(g) : NULL;
    setenv("OAR_PREPACK_CONV", "0", 1);
    CHECK(off && oar_graph_run_pass(off, "prepack_conv") == 0 && oar_graph_count_op(off, "conv2d") == 6);
    unsetenv("OAR_PREPACK_CONV");
    oar_graph_free(off);
    /* the predictor runs the pass after its own */
    oar_predictor *p = g ? oar_predictor_from_graph(g, &(oar_predictor_config){.optimize = true}) : NULL;
    CHECK(p && oar_graph_count_op(oar_predictor_graph(p), "conv2d_prepacked") == PACKED);
    const int64_t batches[] = {1, 2, 3, 1};
    for (size_t i = 0; i < sizeof batches / sizeof *batches; i++) check_against(g, f, p, batches[i]);
    /* the packed graph saves and loads (the packed weight is a plain constant) */
    char dir[] = "/tmp/oar-test-prepack-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    CHECK(f && oar_graph_save(f, dir) == 0);
    oar_graph *l = oar_graph_load(dir);
    CHECK(l && oar_graph_count_op(l, "conv2d_prepacked") == PACKED);
    if (l) check_against(g, l, NULL, 2);
    oar_graph_free(l);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    oar_predictor_free(p);
    oar_graph_free(f);
    oar_graph_free(g);
    oar_pool_pop(pool);
}

/* ---- the predictor's batch setting ------------------------------------------------- */

static oar_tensor *Wb;
static int wide_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    out[0] = oar_relu(conv(in[0], Wb, NULL, 1, 1, 1, 1));
    return out[0] ? 0 : -1;
}

/* The layout (a[10..12]) the backend picks for that conv, 64 -> 64
 * channels on 14 x 14 planes with its relu, at batch n; 0 where it packs
 * none. */
static int layout_at(int64_t n, int64_t out[3]) {
    int64_t a[14] = {1, 1, 1, 1, 1, 1, 64, 64, 3, 3, 0, 0, 0, 1};
    if (!oari_conv_prepack.layout || !oari_conv_prepack.layout(a, n, 14, 14, false)) return 0;
    memcpy(out, a + 10, 3 * sizeof *out);
    return 1;
}

/* The conv2d_prepacked node's layout in g; 0 if it has none. */
static int graph_layout(const oar_graph *g, int64_t out[3]) {
    for (int i = 0; g && i < g->n_nodes; i++)
        if (!g->nodes[i].dead && g->nodes[i].op == OARI_OP_conv2d_prepacked) {
            memcpy(out, g->nodes[i].attrs.i + 10, 3 * sizeof *out);
            return 1;
        }
    return 0;
}

/* The predictor's conv2d_prepacked node's layout; 0 if it has none. */
static int served_layout(oar_predictor *p, int64_t out[3]) {
    return p ? graph_layout(oar_predictor_graph(p), out) : 0;
}

/* wide_fn traced with a dynamic batch (a new Wb), and the layouts this
 * CPU picks for its conv at batch 1 and 32 (*packs: 0 where it packs none). */
static oar_graph *wide_graph(int64_t l1[3], int64_t l32[3], int *packs) {
    Wb = conv_w(64, 64, 3, 3);
    oar_graph_input_spec spec = {.name = "x", .dtype = OAR_F32, .ndim = 4, .shape = {-1, 64, 14, 14}};
    oar_graph *g = oar_trace(wide_fn, NULL, 1, &spec, 1, NULL);
    CHECK(g != NULL);
    *packs = layout_at(1, l1);
    CHECK(layout_at(32, l32) == *packs);
    return g;
}

/* Where the graph's batch is dynamic, the convs are packed for
 * oar_predictor_config.batch (0: 1), and the packed predictor gives the
 * unpacked conv's values at that batch and at others. */
static void test_batch_setting(void) {
    oar_pool *pool = oar_pool_push();
    int64_t l1[3] = {0}, l32[3] = {0}, got[3] = {0};
    int packs = 0;
    oar_graph *g = wide_graph(l1, l32, &packs);
    if (packs) /* (what this CPU picks; where both are the same the check below is weaker) */
        fprintf(stderr, "  layouts (order, blocks): batch 1 %lld %lld %lld, batch 32 %lld %lld %lld\n", (long long)l1[0],
                (long long)l1[1], (long long)l1[2], (long long)l32[0], (long long)l32[1], (long long)l32[2]);
    const int64_t settings[] = {0, 1, 32};
    for (int k = 0; k < 3; k++) {
        oar_predictor *p = oar_predictor_from_graph(g, &(oar_predictor_config){.optimize = true, .batch = settings[k]});
        CHECK(p != NULL);
        CHECK(served_layout(p, got) == packs);
        if (packs) CHECK(!memcmp(got, settings[k] == 32 ? l32 : l1, sizeof got));
        for (int64_t n = 1; n <= 32; n += 31) {
            oar_tensor *x = rand_t(OAR_F32, 4, (int64_t[]){n, 64, 14, 14}, 1.0), *y = NULL;
            /* in float64: the eager f32 conv may take Winograd, less exact than either */
            oar_tensor *want = oar_cast(oar_relu(conv(oar_cast(x, OAR_F64), oar_cast(Wb, OAR_F64), NULL, 1, 1, 1, 1)),
                                        OAR_F32);
            CHECK(oar_predictor_run(p, &x, &y) == 0);
            /* order 2 is Winograd's packed filter: its tolerance */
            double mag = max_abs(want), err = max_diff(y, want), tol = packs && got[0] == 2 ? 1e-5 : 2e-6;
            if (!(mag > 0.1 && err <= tol * mag))
                fprintf(stderr, "  batch setting %lld, batch %lld: off by %g (magnitude %g)\n", (long long)settings[k],
                        (long long)n, err, mag);
            CHECK(mag > 0.1 && err <= tol * mag);
            oar_tensor_release(y);
        }
        oar_predictor_free(p);
    }
    /* a negative batch is refused; the pass itself wants >= 1 */
    CHECK_FAILS(oar_predictor_from_graph(g, &(oar_predictor_config){.optimize = true, .batch = -2}), "batch -2 < 0");
    CHECK_FAILS(oar_predictor_create(&(oar_predictor_config){.model_dir = "/nonexistent", .batch = -1}),
                "batch -1 < 0");
    oar_graph *c = oar_graph_clone(g);
    CHECK(c && oari_pass_prepack_conv_at(c, 0) == OAR_ERR_INVALID);
    CHECK(strstr(oar_last_error(), "want >= 1") != NULL);
    oar_graph_free(c);
    oar_graph_free(g);
    oar_pool_pop(pool);
}

/* Checks one run of p at batch n: run and run_borrowed give the unpacked
 * conv's values (in float64); returns the graph that served it. */
static const oar_graph *check_run(oar_predictor *p, int64_t n, int packs) {
    oar_tensor *x = rand_t(OAR_F32, 4, (int64_t[]){n, 64, 14, 14}, 1.0), *y = NULL, *yb = NULL;
    const oar_graph *served = p ? oari_predictor_graph_for(p, &x) : NULL;
    int64_t got[3] = {0};
    CHECK(served && graph_layout(served, got) == packs);
    oar_tensor *want = oar_cast(oar_relu(conv(oar_cast(x, OAR_F64), oar_cast(Wb, OAR_F64), NULL, 1, 1, 1, 1)), OAR_F32);
    CHECK(p && oar_predictor_run(p, &x, &y) == 0);
    CHECK(p && oar_predictor_run_borrowed(p, &x, &yb) == 0);
    /* Winograd's tolerance for its packed filter, and unpacked (the conv
     * may take Winograd at some batch sizes) */
    double mag = max_abs(want), tol = (!packs || got[0] == 2 ? 1e-5 : 2e-6) * mag;
    double err = max_diff(y, want), errb = max_diff(yb, want);
    if (!(mag > 0.1 && err <= tol && errb <= tol))
        fprintf(stderr, "  batch %lld: off by %g and %g (magnitude %g)\n", (long long)n, err, errb, mag);
    CHECK(mag > 0.1 && err <= tol && errb <= tol);
    oar_tensor_release(y);
    return served;
}

/* Several batch sizes (oar_predictor_config.batches): one packing each; a
 * run takes its batch's graph (by run and by run_borrowed), batches[0]'s
 * at another size, and every one gives the unpacked conv's values. A graph
 * with nothing packed keeps one graph. Bad lists are refused. */
static void test_batches(void) {
    oar_pool *pool = oar_pool_push();
    int64_t l1[3] = {0}, l32[3] = {0}, got[3] = {0};
    int packs = 0;
    oar_graph *g = wide_graph(l1, l32, &packs);
    const int64_t sizes[2] = {32, 1};
    oar_predictor *p = oar_predictor_from_graph(g, &(oar_predictor_config){.optimize = true, .batches = sizes,
                                                                            .n_batches = 2});
    CHECK(p != NULL);
    const int64_t runs[3] = {1, 32, 5};
    for (int k = 0; p && k < 3; k++) {
        const oar_graph *served = check_run(p, runs[k], packs);
        /* batch 1 its own graph; 32 and 5 the first's */
        CHECK((served == oar_predictor_graph(p)) == (!packs || runs[k] != 1));
        if (packs) CHECK(graph_layout(served, got) && !memcmp(got, runs[k] == 1 ? l1 : l32, sizeof got));
    }
    oar_predictor_free(p);
    /* nothing packed (no optimize): one graph for every batch */
    p = oar_predictor_from_graph(g, &(oar_predictor_config){.batches = sizes, .n_batches = 2});
    CHECK(p != NULL);
    if (p) {
        oar_tensor *x1 = rand_t(OAR_F32, 4, (int64_t[]){1, 64, 14, 14}, 1.0);
        CHECK(oari_predictor_graph_for(p, &x1) == oar_predictor_graph(p));
        CHECK(graph_layout(oar_predictor_graph(p), got) == 0);
        oar_predictor_free(p);
    }
    /* refusals */
    const int64_t dup[2] = {4, 4}, zero[2] = {4, 0}, many[OAR_PREDICTOR_MAX_BATCHES + 1] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    CHECK_FAILS(oar_predictor_from_graph(g, &(oar_predictor_config){.batches = dup, .n_batches = 2}),
                "batches[0] and batches[1] are both 4");
    CHECK_FAILS(oar_predictor_from_graph(g, &(oar_predictor_config){.batches = zero, .n_batches = 2}),
                "batches[1] is 0 (want >= 1)");
    CHECK_FAILS(oar_predictor_from_graph(g, &(oar_predictor_config){.batches = many,
                                                                     .n_batches = OAR_PREDICTOR_MAX_BATCHES + 1}),
                "n_batches 9 with batches given (want 0..8 sizes)");
    CHECK_FAILS(oar_predictor_from_graph(g, &(oar_predictor_config){.n_batches = 1}), "n_batches 1 with batches NULL");
    CHECK_FAILS(oar_predictor_from_graph(g, &(oar_predictor_config){.batches = sizes, .n_batches = -1}),
                "n_batches -1");
    CHECK_FAILS(oar_predictor_create(&(oar_predictor_config){.model_dir = "/nonexistent", .batch = 2, .batches = sizes,
                                                             .n_batches = 2}),
                "both batch (2) and batches are set");
    oar_graph_free(g);
    oar_pool_pop(pool);
}

/* A thread of test_adapt_batches: runs x[k] (batch 2 + k) on a clone of p
 * in its own order, through run and run_borrowed, and counts results off
 * want[k] by more than tol[k] in bad (no CHECK here: its counters are the
 * main thread's). served[k]: the graph each batch took. */
static pthread_barrier_t adapt_start;
typedef struct {
    oar_predictor *p;
    int first, bad;
    oar_tensor *x[4], *want[4];
    double tol[4];
    const oar_graph *served[4];
} adapt_job;
static double max_diff_f32(oar_tensor *a, oar_tensor *b) {
    const float *u = a ? oar_tensor_data(a) : NULL, *v = oar_tensor_data(b);
    double d = u ? 0 : INFINITY;
    for (int64_t i = 0; u && i < oar_tensor_numel(b); i++) d = fmax(d, fabs((double)u[i] - v[i]));
    return d;
}
static void *adapt_worker(void *arg) {
    adapt_job *j = arg;
    oar_predictor *c = oar_predictor_clone(j->p); /* (run_borrowed's buffers are one thread's per predictor) */
    j->bad += c == NULL;
    pthread_barrier_wait(&adapt_start);
    for (int r = 0; c && r < 4; r++) {
        const int k = (j->first + r) % 4;
        oar_tensor *y = NULL, *yb = NULL;
        j->served[k] = oari_predictor_graph_for(c, &j->x[k]);
        if (oar_predictor_run(c, &j->x[k], &y) || max_diff_f32(y, j->want[k]) > j->tol[k]) j->bad++;
        if (oar_predictor_run_borrowed(c, &j->x[k], &yb) || max_diff_f32(yb, j->want[k]) > j->tol[k]) j->bad++;
        oar_tensor_release(y);
    }
    oar_predictor_free(c);
    return NULL;
}

/* adapt_batches: a run at a size with no packing packs one (its layout is
 * the one this CPU picks for that size), later runs at that size and clones
 * reuse it, and past OAR_PREDICTOR_MAX_BATCHES packings new sizes take the
 * first; every run gives the unpacked conv's values. Threads that bring new
 * sizes at once each get the right packing, made once. */
static void test_adapt_batches(void) {
    oar_pool *pool = oar_pool_push();
    int64_t l1[3] = {0}, l32[3] = {0}, got[3] = {0};
    int packs = 0;
    oar_graph *g = wide_graph(l1, l32, &packs);
    oar_predictor *p = oar_predictor_from_graph(g, &(oar_predictor_config){.optimize = true, .adapt_batches = true});
    CHECK(p != NULL);
    const oar_graph *g1 = check_run(p, 1, packs);
    CHECK(g1 == oar_predictor_graph(p)); /* batch 0 means 1: the first packing */
    const oar_graph *g32 = check_run(p, 32, packs);
    CHECK((g32 != g1) == (packs != 0)); /* (nothing packed: one graph serves every size) */
    CHECK(graph_layout(g32, got) == packs);
    if (packs) CHECK(!memcmp(got, l32, sizeof got));
    CHECK(check_run(p, 32, packs) == g32);
    oar_predictor *c = oar_predictor_clone(p);
    CHECK(c && check_run(c, 32, packs) == g32); /* the clone shares the model's packings */
    oar_predictor_free(c);
    /* up to the cap: 1, 32 and six more sizes; the ninth takes the first */
    const oar_graph *seen[OAR_PREDICTOR_MAX_BATCHES] = {g1, g32};
    for (int k = 2; k < OAR_PREDICTOR_MAX_BATCHES; k++) {
        seen[k] = check_run(p, k + 1, packs);
        for (int j = 0; packs && j < k; j++) CHECK(seen[k] != seen[j]);
    }
    CHECK(check_run(p, 50, packs) == g1);
    oar_predictor_free(p);

    /* with a list: batches {32} adapts to 1, and batch 1 gets batch 1's layout */
    p = oar_predictor_from_graph(g, &(oar_predictor_config){.optimize = true, .batches = (int64_t[]){32},
                                                             .n_batches = 1, .adapt_batches = true});
    CHECK(p && graph_layout(oar_predictor_graph(p), got) == packs);
    const oar_graph *a1 = check_run(p, 1, packs);
    CHECK((a1 != oar_predictor_graph(p)) == (packs != 0));
    if (packs) CHECK(graph_layout(a1, got) && !memcmp(got, l1, sizeof got));
    oar_predictor_free(p);

    /* four threads (each on a clone) bring sizes 2..5 at once, two by two
     * in the same order; each size is packed once */
    p = oar_predictor_from_graph(g, &(oar_predictor_config){.optimize = true, .adapt_batches = true});
    CHECK(p != NULL);
    pthread_t th[4];
    adapt_job jobs[4];
    oar_tensor *xs[4], *wants[4];
    double tols[4];
    for (int k = 0; k < 4; k++) {
        xs[k] = rand_t(OAR_F32, 4, (int64_t[]){2 + k, 64, 14, 14}, 1.0);
        wants[k] = oar_contiguous(
            oar_cast(oar_relu(conv(oar_cast(xs[k], OAR_F64), oar_cast(Wb, OAR_F64), NULL, 1, 1, 1, 1)), OAR_F32));
        tols[k] = 1e-5 * max_abs(wants[k]); /* (Winograd's, the loosest of the layouts) */
    }
    for (int t = 0; t < 4; t++) {
        jobs[t] = (adapt_job){.p = p, .first = t / 2 * 2};
        memcpy(jobs[t].x, xs, sizeof xs);
        memcpy(jobs[t].want, wants, sizeof wants);
        memcpy(jobs[t].tol, tols, sizeof tols);
    }
    CHECK(pthread_barrier_init(&adapt_start, NULL, 4) == 0);
    for (int t = 0; t < 4; t++) CHECK(pthread_create(&th[t], NULL, adapt_worker, &jobs[t]) == 0);
    for (int t = 0; t < 4; t++) {
        pthread_join(th[t], NULL);
        CHECK(jobs[t].bad == 0);
    }
    pthread_barrier_destroy(&adapt_start);
    for (int k = 0; k < 4; k++) {
        for (int t = 1; t < 4; t++) CHECK(jobs[t].served[k] == jobs[0].served[k]); /* one packing per size */
        for (int j = 0; packs && j < k; j++) CHECK(jobs[0].served[k] != jobs[0].served[j]);
    }
    oar_predictor_free(p);

    /* nothing packed (no optimize): adapting makes no second graph */
    p = oar_predictor_from_graph(g, &(oar_predictor_config){.adapt_batches = true});
    CHECK(p && check_run(p, 7, 0) == oar_predictor_graph(p));
    oar_predictor_free(p);
    oar_graph_free(g);
    oar_pool_pop(pool);
}

/* ---- convs the pass leaves alone -------------------------------------------------- */

static oar_tensor *W, *W64, *W1d;
static int weight_input_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    out[0] = conv(in[0], in[1], NULL, 1, 1, 1, 1); /* the weight is an input, not a constant */
    return out[0] ? 0 : -1;
}
static int f64_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    out[0] = oar_relu(conv(in[0], W64, NULL, 1, 1, 1, 1));
    return out[0] ? 0 : -1;
}
static int conv1d_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    out[0] = oar_conv1d(in[0], W1d, NULL, 1, 1, 1, 1);
    return out[0] ? 0 : -1;
}
static int dyn_plane_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    out[0] = conv(in[0], W, NULL, 1, 1, 1, 1);
    return out[0] ? 0 : -1;
}
static oar_tensor *W1x1;
static int small_1x1_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    out[0] = conv(in[0], W1x1, NULL, 2, 0, 1, 1);
    return out[0] ? 0 : -1;
}

static void test_left_alone(void) {
    oar_pool *pool = oar_pool_push();
    W = conv_w(8, 4, 3, 3);
    W64 = oar_cast(conv_w(8, 4, 3, 3), OAR_F64);
    W1d = rand_t(OAR_F32, 3, (int64_t[]){8, 4, 3}, 0.3);
    oar_graph_input_spec x = {.name = "x", .dtype = OAR_F32, .ndim = 4, .shape = {2, 4, 9, 9}};
    oar_graph_input_spec specs[2] = {x, {.name = "w", .dtype = OAR_F32, .ndim = 4, .shape = {8, 4, 3, 3}}};
    oar_graph_input_spec x64 = {.name = "x", .dtype = OAR_F64, .ndim = 4, .shape = {2, 4, 9, 9}};
    oar_graph_input_spec x1d = {.name = "x", .dtype = OAR_F32, .ndim = 3, .shape = {2, 4, 9}};
    oar_graph_input_spec xdyn = {.name = "x", .dtype = OAR_F32, .ndim = 4, .shape = {1, 4, -1, 9},
                                 .dim_names = {NULL, NULL, "H"}};
    /* a 1x1 conv whose weight (8 x 4) is smaller than its input (4 x 9 x 9) */
    W1x1 = conv_w(8, 4, 1, 1);
    oar_graph *gs[5] = {oar_trace(weight_input_fn, NULL, 2, specs, 1, NULL), oar_trace(f64_fn, NULL, 1, &x64, 1, NULL),
                        oar_trace(conv1d_fn, NULL, 1, &x1d, 1, NULL), oar_trace(dyn_plane_fn, NULL, 1, &xdyn, 1, NULL),
                        oar_trace(small_1x1_fn, NULL, 1, &x, 1, NULL)};
    for (int i = 0; i < 5; i++) {
        CHECK(gs[i] && oar_graph_run_pass(gs[i], "prepack_conv") == 0);
        CHECK(oar_graph_count_op(gs[i], "conv2d") == 1 && oar_graph_count_op(gs[i], "conv2d_prepacked") == 0);
        oar_graph_free(gs[i]);
    }
    oar_pool_pop(pool);
}

/* ---- Winograd's convs: order 2, the filter transform packed once ----------------- */

static oar_tensor *prepacked(oar_tensor *x, oar_tensor *wp, oar_tensor *b, const int64_t *conv_a, const int64_t *wshape,
                             int order, int64_t ib, int64_t ob, int64_t relu);

static oar_tensor *Wwino, *Wwino2, *Bwino2;
/* Two 3x3 convs conv2d runs by Winograd F(4x4) (36 tiles at batch 1, odd
 * planes): the first with its relu folded in; the second, with a bias, an
 * output itself and relu'd (its relu stays). */
static int wino_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    oar_tensor *s = conv(oar_relu(conv(in[0], Wwino, NULL, 1, 1, 1, 1)), Wwino2, Bwino2, 1, 1, 1, 1);
    out[0] = s;
    out[1] = oar_relu(s);
    return out[0] && out[1] ? 0 : -1;
}

/* Winograd against im2col + gemm, or against Winograd with blocks of
 * other sizes: a few 1e-7 of sum |terms| (cpu_conv_wino.c), inside the
 * 1e-5 the conv tests allow */
#define WINO_TOL 1e-5

static void check_wino(const oar_graph *g, const oar_graph *f, int64_t n) {
    oar_tensor *x = rand_t(OAR_F32, 4, (int64_t[]){n, 16, 23, 21}, 2.0), *want[2], *got[2];
    CHECK(run_graph(g, x, want) == 0);
    CHECK(run_graph(f, x, got) == 0);
    for (int i = 0; i < 2; i++) {
        double mag = max_abs(want[i]), err = max_diff(got[i], want[i]);
        if (!(mag > 0.01 && err <= WINO_TOL * mag))
            fprintf(stderr, "batch %lld, output %d: %g off (magnitude %g)\n", (long long)n, i, err, mag);
        CHECK(mag > 0.01 && err <= WINO_TOL * mag);
    }
}

static void test_wino(void) {
    oar_pool *pool = oar_pool_push();
    Wwino = conv_w(16, 16, 3, 3);
    Wwino2 = conv_w(20, 16, 3, 3);
    Bwino2 = rand_t(OAR_F32, 1, (int64_t[]){20}, 0.5);
    oar_graph_input_spec xw = {.name = "x", .dtype = OAR_F32, .ndim = 4, .shape = {-1, 16, 23, 21}};
    oar_graph *g = oar_trace(wino_fn, NULL, 1, &xw, 2, NULL);
    CHECK(g && oar_graph_count_op(g, "conv2d") == 2 && oar_graph_count_op(g, "relu") == 2);
    oar_graph *f = g ? oar_graph_clone(g) : NULL;
    CHECK(f && oar_graph_run_pass(f, "prepack_conv") == 2 && oar_graph_verify(f) == 0);
    CHECK(oar_graph_count_op(f, "conv2d_prepacked") == 2 && oar_graph_count_op(f, "conv2d") == 0);
    CHECK(oar_graph_count_op(f, "relu") == 1);
    const int64_t batches[] = {1, 3, 2};
    for (size_t i = 0; i < sizeof batches / sizeof *batches; i++) check_wino(g, f, batches[i]);
    /* saved and loaded, and through the predictor */
    char dir[] = "/tmp/oar-test-prepack-wino-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    CHECK(f && oar_graph_save(f, dir) == 0);
    oar_graph *l = oar_graph_load(dir);
    CHECK(l && oar_graph_count_op(l, "conv2d_prepacked") == 2);
    if (l) check_wino(g, l, 2);
    oar_graph_free(l);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    oar_predictor *p = g ? oar_predictor_from_graph(g, &(oar_predictor_config){.optimize = true}) : NULL;
    CHECK(p && oar_graph_count_op(oar_predictor_graph(p), "conv2d_prepacked") == 2);
    oar_tensor *x = rand_t(OAR_F32, 4, (int64_t[]){1, 16, 23, 21}, 2.0), *want[2], *served[2] = {NULL, NULL};
    CHECK(run_graph(g, x, want) == 0 && p && oar_predictor_run(p, &x, served) == 0);
    for (int i = 0; i < 2; i++) {
        CHECK(max_diff(served[i], want[i]) <= WINO_TOL * max_abs(want[i]));
        oar_tensor_release(served[i]);
    }
    oar_predictor_free(p);
    oar_graph_free(f);
    oar_graph_free(g);
    oar_pool_pop(pool);
}

/* Winograd F(4x4, 3x3)'s G [6x3] */
static const double wino_G[6][3] = {{1.0 / 4, 0, 0},           {-1.0 / 6, -1.0 / 6, -1.0 / 6},
                                    {-1.0 / 6, 1.0 / 6, -1.0 / 6}, {1.0 / 24, 1.0 / 12, 1.0 / 6},
                                    {1.0 / 24, -1.0 / 12, 1.0 / 6}, {0, 0, 1}};

/* The order-2 packing written out here, in float64: U[a][b][o][c] = (G w_oc G^T)[a][b]. */
static oar_tensor *wino_ref(oar_tensor *w) {
    const int64_t *s = oar_tensor_shape(w), O = s[0], C = s[1];
    double *v = test_values(w), *u = calloc((size_t)(36 * O * C), sizeof *u);
    for (int64_t o = 0; o < O; o++)
        for (int64_t c = 0; c < C; c++)
            for (int a = 0; a < 6; a++)
                for (int b = 0; b < 6; b++) {
                    double acc = 0;
                    for (int i = 0; i < 3; i++)
                        for (int j = 0; j < 3; j++) acc += wino_G[a][i] * v[((o * C + c) * 3 + i) * 3 + j] * wino_G[b][j];
                    u[((a * 6 + b) * O + o) * C + c] = acc;
                }
    oar_tensor *t = oar_cast(oar_tensor_from_data(u, OAR_F64, 6, (int64_t[]){6, 6, O, C, 1, 1}), OAR_F32);
    free(v), free(u);
    return t;
}

/* The op on order 2 directly: the backend's packing against the closed
 * form, and the conv against conv2d on odd sizes (channels off 16, a
 * plane not a multiple of the tile, padding 0 and 2, strided x). */
static void test_wino_op(void) {
    static const struct { int64_t x[4], o, p; } cases[] = {
        {{1, 19, 15, 12}, 21, 1}, {{2, 16, 9, 17}, 16, 0}, {{1, 33, 10, 10}, 17, 2}, {{3, 16, 4, 5}, 40, 1}};
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++)
        for (int relu = 0; relu < 2; relu++) {
            oar_pool *pool = oar_pool_push();
            const int64_t C = cases[ci].x[1], O = cases[ci].o, p = cases[ci].p;
            oar_tensor *x = rand_t(OAR_F32, 4, cases[ci].x, 2.0);
            if (ci == 1) /* a transposed plane */
                x = oar_permute(rand_t(OAR_F32, 4, (int64_t[]){2, 16, 17, 9}, 2.0), (int64_t[]){0, 1, 3, 2});
            oar_tensor *w = conv_w(O, C, 3, 3), *b = relu ? NULL : rand_t(OAR_F32, 1, &O, 0.5);
            int64_t a[14] = {1, 1, p, p, 1, 1, O, C, 3, 3, 2, 1, 1, relu}, d[6];
            CHECK(oari_conv2d_packed_shape(a, d) == 36 * O * C);
            oar_tensor *U = oar_empty(OAR_F32, 6, d, NULL), *Uref = wino_ref(w);
            oari_conv_prepack.pack(oar_tensor_data(w), oar_tensor_data(U), a);
            CHECK(max_diff(U, Uref) <= 1e-6 * max_abs(Uref));
            oar_tensor *want = conv(x, w, b, 1, p, 1, 1);
            if (relu) want = oar_relu(want);
            oar_tensor *got = prepacked(x, U, b, (int64_t[]){1, 1, p, p, 1, 1}, (int64_t[]){O, C, 3, 3}, 2, 1, 1, relu);
            double mag = max_abs(want), err = max_diff(got, want);
            if (!(err <= WINO_TOL * mag))
                fprintf(stderr, "wino case %zu, relu %d: %g off (magnitude %g)\n", ci, relu, err, mag);
            CHECK(mag > 0.1 && err <= WINO_TOL * mag);
            oar_pool_pop(pool);
        }
}

/* ---- the op itself ---------------------------------------------------------------- */

/* The packing of defs/conv.def, written out here: weight (o, c, i, j) at
 * [o/ob, c/ib, i, j, c%ib, o%ob] (order 0) or [o/ob, i, j, c/ib, c%ib, o%ob]. */
static oar_tensor *pack_ref(oar_tensor *w, int order, int64_t ib, int64_t ob, int64_t shape[6]) {
    const int64_t *s = oar_tensor_shape(w), O = s[0], C = s[1], kh = s[2], kw = s[3];
    const int64_t OB = (O + ob - 1) / ob, CB = (C + ib - 1) / ib;
    int64_t d0[6] = {OB, CB, kh, kw, ib, ob}, d1[6] = {OB, kh, kw, CB, ib, ob};
    memcpy(shape, order ? d1 : d0, sizeof d0);
    double *v = test_values(w), *p = calloc((size_t)(OB * CB * kh * kw * ib * ob), sizeof *p);
    for (int64_t o = 0; o < O; o++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t i = 0; i < kh; i++)
                for (int64_t j = 0; j < kw; j++) {
                    int64_t at = order ? ((((o / ob * kh + i) * kw + j) * CB + c / ib) * ib + c % ib) * ob + o % ob
                                       : ((((o / ob * CB + c / ib) * kh + i) * kw + j) * ib + c % ib) * ob + o % ob;
                    p[at] = v[((o * C + c) * kh + i) * kw + j];
                }
    oar_tensor *t = oar_cast(oar_tensor_from_data(p, OAR_F64, 6, shape), OAR_F32);
    free(v), free(p);
    return t;
}

static oar_tensor *prepacked(oar_tensor *x, oar_tensor *wp, oar_tensor *b, const int64_t *conv_a, const int64_t *wshape,
                             int order, int64_t ib, int64_t ob, int64_t relu) {
    int64_t a[14] = {conv_a[0], conv_a[1], conv_a[2], conv_a[3], conv_a[4], conv_a[5], wshape[0], wshape[1],
                     wshape[2], wshape[3], order, ib, ob, relu};
    oari_attrs at = oari_attrs_ints(14, a);
    return oari_call(OARI_OP_conv2d_prepacked, 3, (oar_tensor *[]){x, wp, b}, &at);
}

static void test_op(void) {
    /* oneDNN's layouts (run on the packed weight, or reordered by oneDNN
     * when its primitive wants another) and two it has no name for (run on
     * the weight unpacked) */
    static const struct { int order; int64_t ib, ob; } layouts[] = {
        {0, 16, 16}, {0, 8, 8}, {0, 16, 64}, {1, 1, 16}, {1, 1, 32}, {1, 1, 48}, {1, 2, 3}, {0, 3, 5}};
    /* x shape, w shape, stride, padding, dilation */
    static const struct { int64_t x[4], w[4], s, p, d; } cases[] = {
        {{1, 19, 15, 12}, {21, 19, 3, 3}, 1, 1, 1}, {{2, 32, 14, 14}, {64, 32, 3, 3}, 2, 1, 1},
        {{1, 3, 29, 31}, {16, 3, 7, 7}, 2, 3, 1},   {{3, 48, 7, 9}, {50, 48, 1, 1}, 1, 0, 1},
        {{1, 16, 11, 11}, {16, 16, 3, 3}, 1, 2, 2}, {{1, 64, 9, 9}, {32, 64, 1, 1}, 2, 0, 1}};
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++)
        for (size_t li = 0; li < sizeof layouts / sizeof *layouts; li++)
            for (int relu = 0; relu < 2; relu++) {
                oar_pool *pool = oar_pool_push();
                oar_tensor *x = rand_t(OAR_F32, 4, cases[ci].x, 2.0);
                oar_tensor *w = conv_w(cases[ci].w[0], cases[ci].w[1], cases[ci].w[2], cases[ci].w[3]);
                oar_tensor *b = li % 2 ? NULL : rand_t(OAR_F32, 1, cases[ci].w, 0.5);
                int64_t s = cases[ci].s, p = cases[ci].p, d = cases[ci].d, shape[6];
                oar_tensor *want = conv(x, w, b, s, p, d, 1);
                if (relu) want = oar_relu(want);
                oar_tensor *wp = pack_ref(w, layouts[li].order, layouts[li].ib, layouts[li].ob, shape);
                oar_tensor *got = prepacked(x, wp, b, (int64_t[]){s, s, p, p, d, d}, cases[ci].w,
                                            layouts[li].order, layouts[li].ib, layouts[li].ob, relu);
                double mag = max_abs(want), err = max_diff(got, want);
                if (!(err <= 2e-6 * mag))
                    fprintf(stderr, "case %zu, layout %zu, relu %d: %g off (magnitude %g)\n", ci, li, relu, err, mag);
                CHECK(mag > 0.1 && err <= 2e-6 * mag);
                oar_pool_pop(pool);
            }
    /* a strided x (a transposed plane) and a strided packed weight */
    for (size_t li = 0; li < 2; li++) {
        oar_pool *pool = oar_pool_push();
        oar_tensor *x = oar_permute(rand_t(OAR_F32, 4, (int64_t[]){2, 19, 12, 15}, 2.0), (int64_t[]){0, 1, 3, 2});
        oar_tensor *w = conv_w(21, 19, 3, 3), *b = rand_t(OAR_F32, 1, (int64_t[]){21}, 0.5);
        int64_t shape[6];
        oar_tensor *wp = pack_ref(w, layouts[li].order, layouts[li].ib, layouts[li].ob, shape);
        /* the same values, every other element of a stack of two */
        wp = oar_reshape(oar_slice(oar_stack(2, (oar_tensor *[]){wp, wp}, 6), 6, 0, 1, 1), 6, shape);
        CHECK(!oar_tensor_is_contiguous(x) && wp && !oar_tensor_is_contiguous(wp));
        oar_tensor *want = oar_relu(conv(x, w, b, 1, 1, 1, 1));
        oar_tensor *got = prepacked(x, wp, b, (int64_t[]){1, 1, 1, 1, 1, 1}, (int64_t[]){21, 19, 3, 3},
                                    layouts[li].order, layouts[li].ib, layouts[li].ob, 1);
        double mag = max_abs(want);
        CHECK(mag > 0.1 && max_diff(got, want) <= 2e-6 * mag);
        oar_pool_pop(pool);
    }
    /* the pass's packing is the layout's */
    oar_pool *pool = oar_pool_push();
    oar_tensor *w = conv_w(21, 19, 3, 2);
    int64_t shape[6];
    for (size_t li = 0; li < sizeof layouts / sizeof *layouts; li++) {
        int64_t a[14] = {1, 1, 0, 0, 1, 1, 21, 19, 3, 2, layouts[li].order, layouts[li].ib, layouts[li].ob, 0};
        oar_tensor *want = pack_ref(w, layouts[li].order, layouts[li].ib, layouts[li].ob, shape), *back;
        int64_t d[6];
        CHECK(oari_conv2d_packed_shape(a, d) == oar_tensor_numel(want) && !memcmp(d, shape, sizeof d));
        oar_tensor *got = oar_empty(OAR_F32, 6, d, NULL);
        oari_conv2d_pack(oar_tensor_data(w), oar_tensor_data(got), a);
        CHECK(max_diff(got, want) == 0);
        back = oar_empty(OAR_F32, 4, (int64_t[]){21, 19, 3, 2}, NULL);
        oari_conv2d_unpack(oar_tensor_data(got), oar_tensor_data(back), a);
        CHECK(max_diff(back, w) == 0);
    }
    oar_pool_pop(pool);
}

static void test_bad_input(void) {
    oar_pool *pool = oar_pool_push();
    oar_tensor *x = rand_t(OAR_F32, 4, (int64_t[]){1, 19, 8, 8}, 1), *w = conv_w(21, 19, 3, 3), *b = NULL;
    int64_t shape[6], ca[6] = {1, 1, 1, 1, 1, 1}, ws[4] = {21, 19, 3, 3};
    oar_tensor *wp = pack_ref(w, 0, 16, 16, shape);
    CHECK(prepacked(x, wp, NULL, ca, ws, 0, 16, 16, 0) != NULL);
    CHECK_FAILS(prepacked(x, wp, NULL, ca, ws, 1, 16, 16, 0), "do not fit");          /* the other order */
    CHECK_FAILS(prepacked(x, wp, NULL, ca, ws, 0, 8, 8, 0), "do not fit");            /* other blocks */
    CHECK_FAILS(prepacked(x, wp, NULL, ca, (int64_t[]){21, 18, 3, 3}, 0, 16, 16, 0), "do not fit");
    CHECK_FAILS(prepacked(x, wp, NULL, ca, ws, 2, 16, 16, 0), "bad attributes"); /* order 2 takes blocks 1 */
    CHECK_FAILS(prepacked(x, wp, NULL, ca, ws, 3, 1, 1, 0), "bad attributes");
    /* order 2: a 3x3 kernel at stride 1, undilated */
    int64_t d2[6], a2[14] = {1, 1, 1, 1, 1, 1, 21, 19, 3, 3, 2, 1, 1, 0};
    oar_tensor *u = oar_zeros(OAR_F32, 6, (oari_conv2d_packed_shape(a2, d2), d2));
    CHECK(prepacked(x, u, NULL, ca, ws, 2, 1, 1, 0) != NULL);
    CHECK_FAILS(prepacked(x, u, NULL, (int64_t[]){2, 2, 1, 1, 1, 1}, ws, 2, 1, 1, 0), "bad attributes");
    CHECK_FAILS(prepacked(x, u, NULL, (int64_t[]){1, 1, 1, 1, 2, 2}, ws, 2, 1, 1, 0), "bad attributes");
    CHECK_FAILS(prepacked(x, u, NULL, ca, (int64_t[]){21, 19, 1, 1}, 2, 1, 1, 0), "bad attributes");
    CHECK_FAILS(prepacked(x, wp, NULL, ca, ws, 2, 1, 1, 0), "do not fit");
    CHECK_FAILS(prepacked(x, wp, NULL, ca, ws, 0, 16, 65, 0), "bad attributes");
    CHECK_FAILS(prepacked(x, wp, NULL, ca, ws, 0, 16, 16, 2), "bad attributes");
    CHECK_FAILS(prepacked(x, wp, NULL, (int64_t[]){0, 1, 1, 1, 1, 1}, ws, 0, 16, 16, 0), "bad attributes");
    CHECK_FAILS(prepacked(x, wp, NULL, (int64_t[]){1, 1, -1, 1, 1, 1}, ws, 0, 16, 16, 0), "bad attributes");
    CHECK_FAILS(prepacked(x, NULL, NULL, ca, ws, 0, 16, 16, 0), "packed weight is NULL");
    CHECK_FAILS(prepacked(oar_cast(x, OAR_F64), wp, NULL, ca, ws, 0, 16, 16, 0), "float32");
    CHECK_FAILS(prepacked(x, wp, rand_t(OAR_F32, 1, (int64_t[]){20}, 1), ca, ws, 0, 16, 16, 0), "bias");
    CHECK_FAILS(prepacked(oar_reshape(x, 3, (int64_t[]){19, 8, 8}), wp, b, ca, ws, 0, 16, 16, 0), "do not fit");
    CHECK_FAILS(prepacked(oar_slice(x, 2, 0, 1, 1), wp, NULL, (int64_t[]){1, 1, 0, 0, 1, 1}, ws, 0, 16, 16, 0),
                "larger than the padded input");
    oari_attrs seven = oari_attrs_ints(7, (int64_t[]){1, 1, 1, 1, 1, 1, 1});
    CHECK_FAILS(oari_call(OARI_OP_conv2d_prepacked, 3, (oar_tensor *[]){x, wp, NULL}, &seven),
                "expected 14 integer attributes");
    oar_pool_pop(pool);
}

int main(void) {
    RUN(test_cnn);
    RUN(test_batch_setting);
    RUN(test_batches);
    RUN(test_adapt_batches);
    RUN(test_left_alone);
    RUN(test_wino);
    RUN(test_wino_op);
    RUN(test_op);
    RUN(test_bad_input);
    return test_summary();
}

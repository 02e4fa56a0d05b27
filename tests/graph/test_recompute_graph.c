/* Recompute in static mode: oar_checkpoint inside a traced function tags
 * its nodes, and oar_graph_append_backward copies each segment just
 * before the segment's gradients. Checked on a 12-layer tanh chain in f64,
 * checkpointed 3 layers at a time:
 * the loss and every gradient equal, bit for bit, those of the same graph
 * without checkpoints (plain executor, after the training passes, and
 * compiled), and match the eager gradients; the planned arena is smaller;
 * dropout inside a segment draws the same masks in the copies; the marks
 * survive save and load; an in-place write into a value from outside its
 * segment is refused. */
#include "graph_test_util.h"

#include <unistd.h>

#include "graph/ir.h" /* node marks */

enum { L = 12, B = 256, D = 32 }; /* activations outweigh the gradients */

typedef struct chain {
    bool ckpt;
    double p;     /* dropout inside each layer */
    bool inplace; /* the segment writes into its input (refused) */
} chain;

enum { PER = 3 }; /* layers per checkpointed segment */

typedef struct seg_ctx {
    const chain *c;
    oar_tensor *const *w; /* its PER weights */
} seg_ctx;

/* PER layers h = dropout(tanh(h w)): the segment's activations but the
 * last are what a checkpoint frees. */
static int segment_fn(void *ctx, int n_in, oar_tensor *const *in, int n_out, oar_tensor **out) {
    (void)n_in, (void)n_out;
    seg_ctx *s = ctx;
    oar_tensor *h = in[0];
    if (s->c->inplace && oar_add_scaled_(h, h, 1.0)) return -1;
    for (int l = 0; l < PER && h; l++) {
        h = oar_tanh(oar_matmul(h, s->w[l]));
        if (s->c->p > 0) h = oar_dropout(h, s->c->p, true);
    }
    out[0] = h;
    return h ? 0 : -1;
}

/* in: x [B, D], then the L weights [D, D]; out: mean(h_L^2) */
static int loss_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    const chain *c = ctx;
    oar_tensor *h = in[0];
    for (int l = 0; l < L && h; l += PER) {
        seg_ctx sc = {c, in + 1 + l};
        oar_tensor *o = NULL;
        if (c->ckpt) {
            if (oar_checkpoint(segment_fn, &sc, 1, &h, 1, &o)) return -1;
        } else if (segment_fn(&sc, 1, &h, 1, &o)) {
            return -1;
        }
        h = o;
    }
    out[0] = oar_mean(oar_mul(h, h), 0, NULL, false);
    return out[0] ? 0 : -1;
}

static oar_graph *train_graph(const chain *c) {
    oar_graph_input_spec specs[1 + L];
    char names[L][16];
    specs[0] = (oar_graph_input_spec){.name = "x", .dtype = OAR_F64, .ndim = 2, .shape = {B, D}};
    for (int l = 0; l < L; l++) {
        snprintf(names[l], sizeof names[l], "w%d", l);
        specs[1 + l] = (oar_graph_input_spec){.name = names[l], .dtype = OAR_F64, .ndim = 2, .shape = {D, D}};
    }
    oar_graph *g = oar_trace(loss_fn, (void *)c, 1 + L, specs, 1, NULL);
    if (!g) return NULL;
    int wrt[L];
    for (int l = 0; l < L; l++) wrt[l] = 1 + l;
    if (oar_graph_append_backward(g, 0, L, wrt) < 0) {
        oar_graph_free(g);
        return NULL;
    }
    return g;
}

static int count_nodes(const oar_graph *g, bool recompute) {
    int k = 0;
    for (int i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i].dead && (recompute ? g->nodes[i].recompute : g->nodes[i].segment > 0)) k++;
    return k;
}

static oar_tensor *inputs[1 + L];

static void make_inputs(void) {
    oar_pool *p = oar_pool_push();
    oar_manual_seed(5);
    inputs[0] = oar_tensor_retain(oar_randn(OAR_F64, 2, (int64_t[]){B, D}));
    for (int l = 0; l < L; l++)
        inputs[1 + l] = oar_tensor_retain(oar_mul_scalar(oar_randn(OAR_F64, 2, (int64_t[]){D, D}), 1.0 / sqrt(D)));
    oar_pool_pop(p);
}

/* Runs g `runs` times; copies of the last run's outputs into res[] (1 + L);
 * the planned arena bytes into *planned. */
static int run(const oar_graph *g, bool compile, int runs, oar_tensor **res, int64_t *planned) {
    oar_executor *ex = oar_executor_new(g);
    if (!ex || (compile && oar_executor_compile(ex))) {
        oar_executor_free(ex);
        return -1;
    }
    oar_tensor *out[1 + L];
    int st = 0;
    for (int r = 0; r < runs && !st; r++) st = oar_executor_run(ex, inputs, out);
    for (int j = 0; j < 1 + L && !st; j++) res[j] = oar_tensor_retain(oar_contiguous(out[j]));
    if (planned) *planned = oar_executor_planned_bytes(ex);
    oar_executor_free(ex);
    return st;
}

static bool bitwise_equal(oar_tensor *a, oar_tensor *b) {
    return a && b && oar_tensor_numel(a) == oar_tensor_numel(b) &&
           !memcmp(oar_tensor_data(a), oar_tensor_data(b), (size_t)oar_tensor_numel(a) * sizeof(double));
}

static void release_all(oar_tensor **t, int n) {
    for (int i = 0; i < n; i++) oar_tensor_release(t[i]);
}

/* Plain against checkpointed: same numbers, fewer planned bytes. */
static void test_same_gradients_less_memory(void) {
    oar_pool *p = oar_pool_push();
    chain plain = {.ckpt = false}, ck = {.ckpt = true};
    oar_graph *g0 = train_graph(&plain), *g1 = train_graph(&ck);
    CHECK(g0 && g1);
    if (!g0 || !g1) {
        fprintf(stderr, "%s\n", oar_last_error());
        oar_pool_pop(p);
        return;
    }
    CHECK(count_nodes(g0, false) == 0 && count_nodes(g0, true) == 0);
    CHECK(count_nodes(g1, false) >= 2 * L); /* matmul and tanh per layer */
    CHECK(count_nodes(g1, true) >= 2 * (L - PER)); /* the last segment's outputs are needed at once */
    CHECK(count_nodes(g1, true) > 0);
    oar_tensor *r0[1 + L] = {0}, *r1[1 + L] = {0};
    int64_t b0 = -1, b1 = -1;
    CHECK(run(g0, false, 1, r0, &b0) == 0);
    CHECK(run(g1, false, 1, r1, &b1) == 0);
    for (int j = 0; j < 1 + L; j++) CHECK(bitwise_equal(r0[j], r1[j]));
    /* 4 segment inputs and one segment's 3 activations live to backward,
     * instead of 12 activations */
    CHECK(b1 > 0 && b1 < b0 * 2 / 3);
    printf("planned arena: %lld bytes plain, %lld checkpointed (%.2fx)\n", (long long)b0, (long long)b1,
           (double)b1 / (double)b0);

    /* against eager autograd */
    oar_tensor *w[L];
    for (int l = 0; l < L; l++) {
        w[l] = oar_detach(inputs[1 + l]);
        oar_tensor_set_requires_grad(w[l], true);
    }
    oar_tensor *ein[1 + L] = {inputs[0]}, *loss = NULL;
    for (int l = 0; l < L; l++) ein[1 + l] = w[l];
    CHECK(loss_fn(&plain, ein, &loss) == 0 && oar_backward(loss, NULL) == 0);
    CHECK(max_diff(loss, r1[0]) < 1e-12);
    for (int l = 0; l < L; l++) CHECK(max_diff(oar_tensor_grad(w[l]), r1[1 + l]) < 1e-12);

    /* after the training passes (CSE must keep the copies apart), and compiled */
    CHECK(oar_graph_optimize(g1, OAR_PASSES_TRAINING, 0) == 0);
    CHECK(count_nodes(g1, true) > 0);
    oar_tensor *r2[1 + L] = {0}, *r3[1 + L] = {0};
    int64_t b2 = -1;
    CHECK(run(g1, false, 1, r2, &b2) == 0);
    CHECK(b2 > 0 && b2 < b0 * 2 / 3);
    CHECK(run(g1, true, 1, r3, NULL) == 0);
    for (int j = 0; j < 1 + L; j++) {
        CHECK(max_diff(r0[j], r2[j]) < 1e-13);
        CHECK(max_diff(r0[j], r3[j]) < 1e-12);
    }
    release_all(r0, 1 + L);
    release_all(r1, 1 + L);
    release_all(r2, 1 + L);
    release_all(r3, 1 + L);
    for (int l = 0; l < L; l++) oar_tensor_zero_grad(w[l]);
    oar_graph_free(g0);
    oar_graph_free(g1);
    oar_pool_pop(p);
}

/* Dropout inside the segments: the copies draw the masks the originals
 * drew, on every run (the second run draws new ones on both sides). */
static void test_dropout_masks(void) {
    oar_pool *p = oar_pool_push();
    chain plain = {.ckpt = false, .p = 0.3}, ck = {.ckpt = true, .p = 0.3};
    oar_manual_seed(9);
    oar_graph *g0 = train_graph(&plain);
    oar_manual_seed(9);
    oar_graph *g1 = train_graph(&ck);
    CHECK(g0 && g1);
    if (g0 && g1) {
        oar_tensor *r0[1 + L] = {0}, *r1[1 + L] = {0};
        CHECK(run(g0, false, 2, r0, NULL) == 0);
        CHECK(run(g1, false, 2, r1, NULL) == 0);
        for (int j = 0; j < 1 + L; j++) CHECK(bitwise_equal(r0[j], r1[j]));
        release_all(r0, 1 + L);
        release_all(r1, 1 + L);
    }
    oar_graph_free(g0);
    oar_graph_free(g1);
    oar_pool_pop(p);
}

/* The marks travel through save and load; a bad mark is refused. */
static void test_save_load(void) {
    oar_pool *p = oar_pool_push();
    chain ck = {.ckpt = true};
    oar_graph *g = train_graph(&ck);
    CHECK(g != NULL);
    char dir[] = "/tmp/oar_recompute_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[256];
    snprintf(path, sizeof path, "%s/m", dir);
    CHECK(g && oar_graph_save(g, path) == 0);
    oar_graph *h = oar_graph_load(path);
    CHECK(h != NULL);
    if (g && h) {
        CHECK(count_nodes(h, false) == count_nodes(g, false));
        CHECK(count_nodes(h, true) == count_nodes(g, true));
        CHECK(oar_graph_run_pass(h, "cse") >= 0);
        CHECK(count_nodes(h, true) > 0);
    }
    oar_graph_free(h);
    /* a "segment" that is not a positive integer */
    char json[300], cmd[700];
    snprintf(json, sizeof json, "%s/model.json", path);
    snprintf(cmd, sizeof cmd, "sed -i '0,/\"segment\":[[:space:]]*[0-9]*/s//\"segment\": 0/' %s", json);
    CHECK(system(cmd) == 0);
    oar_graph *bad = oar_graph_load(path);
    CHECK(bad == NULL);
    CHECK(strstr(oar_last_error(), "\"segment\" must be a positive integer") != NULL);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    oar_graph_free(g);
    oar_pool_pop(p);
}

/* A segment that writes into its own input in place cannot be recomputed. */
static void test_inplace_refused(void) {
    oar_pool *p = oar_pool_push();
    chain ck = {.ckpt = true, .inplace = true};
    oar_graph *g = train_graph(&ck);
    CHECK(g == NULL);
    CHECK(strstr(oar_last_error(), "in place into a value from outside its checkpointed segment") != NULL);
    oar_graph_free(g);
    oar_pool_pop(p);
}

int main(void) {
    make_inputs();
    RUN(test_same_gradients_less_memory);
    RUN(test_dropout_masks);
    RUN(test_save_load);
    RUN(test_inplace_refused);
    release_all(inputs, 1 + L);
    return test_summary();
}

/* ONNX If and Loop whose condition and trip count are computed at run time
 * (tests/ref/gen_onnx_control.py): imported as oar cond / while nodes, run
 * at several conditions, trip counts and batch sizes against closed forms,
 * then exported back to If / Loop, re-imported and run again. */
#include "test.h"
#include <math.h>
#include <oar/oar.h>
#include <oar/onnx.h>
#include <stdlib.h>
#include <unistd.h>

static const float w[3] = {0.5f, -1.0f, 2.0f};

/* y = c ? x * 2 + w : x - w, at batches 1 and 4, both branches. */
static void check_if(oar_graph *g) {
    oar_executor *ex = oar_executor_new(g);
    CHECK(ex != NULL);
    for (int k = 0; ex && k < 4; k++) {
        int64_t n = k < 2 ? 1 : 4;
        bool c = k % 2;
        float xs[12];
        for (int i = 0; i < 3 * n; i++)
            xs[i] = 0.25f * (float)i - 1;
        oar_tensor *in[2] = {oar_tensor_from_data(xs, OAR_F32, 2, (int64_t[]){n, 3}),
                             oar_tensor_from_data(&c, OAR_BOOL, 0, NULL)};
        oar_tensor *y = NULL;
        CHECK(oar_executor_run(ex, in, &y) == 0);
        CHECK(y && oar_tensor_numel(y) == 3 * n);
        if (y && oar_tensor_numel(y) == 3 * n) {
            const float *v = oar_tensor_data(y);
            for (int i = 0; i < 3 * n; i++)
                CHECK_NEAR(v[i], c ? xs[i] * 2 + w[i % 3] : xs[i] - w[i % 3], 1e-6);
        }
        oar_tensor_release(in[0]);
        oar_tensor_release(in[1]);
    }
    oar_executor_free(ex);
}

/* v = x; for i < M while sum(v) < limit: v = v * 2 + i; k counts the trips. */
/* The loop written out: v <- v * 2 + i for i < M while the sum of v stays
 * under limit (the trip that reaches it still counts); returns the trips. */
static int64_t loop_reference(int64_t M, float limit, float v[3]) {
    int64_t trips = 0;
    for (int64_t i = 0; i < M; i++) {
        float s = 0;
        for (int d = 0; d < 3; d++)
            s += v[d] = v[d] * 2 + (float)i;
        trips++;
        if (!(s < limit)) break;
    }
    return trips;
}

/* Runs ex on in and checks its outputs (v, trips) against the reference. */
static void check_loop_run(oar_executor *ex, oar_tensor **in, const float v[3], int64_t trips) {
    oar_tensor *out[2] = {0};
    CHECK(oar_executor_run(ex, in, out) == 0);
    if (out[0] && out[1]) {
        const float *y = oar_tensor_data(out[0]);
        for (int d = 0; d < 3; d++)
            CHECK_NEAR(y[d], v[d], 1e-5 * fabs(v[d]) + 1e-6);
        CHECK(*(const int64_t *)oar_tensor_data(out[1]) == trips);
    }
}

static void check_loop(oar_graph *g) {
    oar_executor *ex = oar_executor_new(g);
    CHECK(ex != NULL);
    static const int64_t Ms[] = {0, 1, 3, 10, 10};
    static const float limits[] = {100, 100, 100, 40, 1e6f};
    for (int t = 0; ex && t < 5; t++) {
        float x[3] = {1, -0.5f, 0.25f}, v[3] = {1, -0.5f, 0.25f}, limit = limits[t];
        int64_t M = Ms[t], trips = loop_reference(M, limit, v);
        oar_tensor *in[3] = {oar_tensor_from_data(x, OAR_F32, 1, (int64_t[]){3}),
                             oar_tensor_from_data(&M, OAR_I64, 0, NULL),
                             oar_tensor_from_data(&limit, OAR_F32, 0, NULL)};
        check_loop_run(ex, in, v, trips);
        for (int i = 0; i < 3; i++)
            oar_tensor_release(in[i]);
    }
    oar_executor_free(ex);
}

/* g exported at opset 13 and 17 (If / Loop), re-imported (a cond / while
 * node again), and checked by check(). */
static void round_trip(oar_graph *g, const char *op, void (*check)(oar_graph *)) {
    char path[] = "/tmp/oar_onnx_ctl_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0) return;
    close(fd);
    for (int opset = 13; opset <= 17; opset += 4) {
        int st = oar_onnx_export(g, path, &(oar_onnx_export_options){.opset = opset});
        if (st) fprintf(stderr, "export: %s\n", oar_last_error());
        CHECK(st == 0);
        oar_graph *h = st ? NULL : oar_onnx_load(path);
        if (!st && !h) fprintf(stderr, "re-import: %s\n", oar_last_error());
        CHECK(st || h);
        if (h) {
            CHECK(oar_graph_count_op(h, op) == 1);
            check(h);
        }
        oar_graph_free(h);
    }
    unlink(path);
}

/* A committed model with one control node of kind op: checked as imported
 * and after an export/re-import round trip. */
static void control_node(const char *file, const char *op, void (*check)(oar_graph *)) {
    oar_graph *g = oar_onnx_load(file);
    if (!g) fprintf(stderr, "%s: %s\n", file, oar_last_error());
    CHECK(g != NULL);
    if (!g) return;
    CHECK(oar_graph_count_op(g, op) == 1);
    check(g);
    round_trip(g, op, check);
    oar_graph_free(g);
}

static void test_if_node(void) { control_node("onnx/control_if.onnx", "cond", check_if); }
static void test_loop_node(void) { control_node("onnx/control_loop.onnx", "while", check_loop); }

/* A graph oar traced itself: a loop over a dynamic batch whose body holds
 * a cond (nested control flow) reading a weight from two levels up:
 *   while sum(h) < 50: h = sum(h) > 0 ? h * 2 + w : w - h   (at most 64 trips)
 * then y = h * 3. Exported, re-imported, and run against the original graph. */
typedef struct { oar_tensor *w; } nest_ctx;
static int nest_pos(void *c, int n, oar_tensor *const *in, int m, oar_tensor **out) {
    (void)n, (void)m;
    out[0] = oar_add(oar_mul_scalar(in[0], 2), ((nest_ctx *)c)->w);
    return out[0] ? 0 : -1;
}
static int nest_neg(void *c, int n, oar_tensor *const *in, int m, oar_tensor **out) {
    (void)n, (void)m;
    out[0] = oar_sub(((nest_ctx *)c)->w, in[0]);
    return out[0] ? 0 : -1;
}
static int nest_cond(void *c, int n, oar_tensor *const *in, int m, oar_tensor **out) {
    (void)c, (void)n, (void)m;
    out[0] = oar_lt(oar_sum(in[0], 0, NULL, false), oar_scalar(50));
    return out[0] ? 0 : -1;
}
static int nest_body(void *c, int n, oar_tensor *const *in, int m, oar_tensor **out) {
    (void)n, (void)m;
    oar_tensor *p = oar_gt(oar_sum(in[0], 0, NULL, false), oar_scalar(0));
    return oar_cond(p, nest_pos, nest_neg, c, 1, in, 1, out);
}
static int nest_fn(void *c, oar_tensor *const *in, oar_tensor **out) {
    oar_tensor *h = NULL;
    int st = oar_while_loop(nest_cond, nest_body, c, 1, in, 64, &h);
    out[0] = st ? NULL : oar_mul_scalar(h, 3);
    return out[0] ? 0 : -1;
}

static void test_traced_nested(void) {
    nest_ctx c = {oar_tensor_from_data((float[]){0.5f, -1, 2}, OAR_F32, 1, (int64_t[]){3})};
    oar_graph_input_spec s = {.name = "x", .dtype = OAR_F32, .ndim = 2, .shape = {-1, 3}, .dim_names = {"N"}};
    oar_graph *g = oar_trace(nest_fn, &c, 1, &s, 1, NULL);
    if (!g) fprintf(stderr, "trace: %s\n", oar_last_error());
    CHECK(g != NULL);
    char path[] = "/tmp/oar_onnx_nest_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd >= 0) close(fd);
    int st = g && fd >= 0 ? oar_onnx_export(g, path, NULL) : -1;
    if (st) fprintf(stderr, "export: %s\n", oar_last_error());
    CHECK(st == 0);
    oar_graph *h = st ? NULL : oar_onnx_load(path);
    if (!st && !h) fprintf(stderr, "re-import: %s\n", oar_last_error());
    CHECK(st || h);
    if (h) CHECK(oar_graph_count_op(h, "while") == 1);
    oar_executor *ea = g ? oar_executor_new(g) : NULL, *eb = h ? oar_executor_new(h) : NULL;
    for (int k = 0; ea && eb && k < 3; k++) {
        int64_t n = k == 2 ? 4 : 2;
        float xs[12];
        for (int i = 0; i < 3 * n; i++)
            xs[i] = (k == 1 ? -1.0f : 0.5f) * (float)(i % 5) + 0.125f;
        oar_tensor *x = oar_tensor_from_data(xs, OAR_F32, 2, (int64_t[]){n, 3}), *ya = NULL, *yb = NULL;
        CHECK(oar_executor_run(ea, &x, &ya) == 0 && oar_executor_run(eb, &x, &yb) == 0);
        if (ya && yb) {
            CHECK(oar_tensor_numel(ya) == 3 * n && oar_tensor_numel(yb) == 3 * n);
            const float *a = oar_tensor_data(ya), *b = oar_tensor_data(yb);
            for (int i = 0; i < 3 * n && oar_tensor_numel(yb) == 3 * n; i++)
                CHECK_NEAR(a[i], b[i], 1e-5 * fabs(a[i]) + 1e-6);
        }
        oar_tensor_release(x);
    }
    oar_executor_free(ea);
    oar_executor_free(eb);
    oar_graph_free(g);
    oar_graph_free(h);
    unlink(path);
    oar_tensor_release(c.w);
}

/* Training-mode Dropout without a seed (tests/onnx/dropout_train.onnx,
 * ratio 0.25): y = x * mask / 0.75, about 3/4 kept, a new mask per run. */
static void test_dropout_training(void) {
    oar_graph *g = oar_onnx_load("onnx/dropout_train.onnx");
    if (!g) fprintf(stderr, "dropout_train: %s\n", oar_last_error());
    CHECK(g != NULL);
    oar_executor *ex = g ? oar_executor_new(g) : NULL;
    float xs[16 * 64];
    for (int i = 0; i < 16 * 64; i++)
        xs[i] = 1 + (float)(i % 7);
    bool first[16 * 64];
    int differ = 0;
    for (int run = 0; ex && run < 2; run++) {
        oar_tensor *x = oar_tensor_from_data(xs, OAR_F32, 2, (int64_t[]){16, 64}), *out[2] = {0};
        CHECK(oar_executor_run(ex, &x, out) == 0);
        if (out[0] && out[1] && oar_tensor_numel(out[1]) == 16 * 64) {
            const float *y = oar_tensor_data(out[0]);
            const bool *m = oar_tensor_data(out[1]);
            int kept = 0;
            for (int i = 0; i < 16 * 64; i++) {
                CHECK_NEAR(y[i], m[i] ? xs[i] / 0.75f : 0.0f, 1e-5);
                kept += m[i];
                if (run) differ += m[i] != first[i];
                else first[i] = m[i];
            }
            CHECK(kept > 700 && kept < 840); /* 768 expected; 4.5 standard deviations */
        }
        oar_tensor_release(x);
    }
    CHECK(differ > 0);
    oar_executor_free(ex);
    oar_graph_free(g);
}

/* The loop of check_loop with M = 10 a constant: the body's condition is
 * computed at run time, so the importer makes a while node after all. */
static void test_loop_constant_trips(void) {
    oar_graph *g = oar_onnx_load("onnx/control_loop_m10.onnx");
    if (!g) fprintf(stderr, "control_loop_m10: %s\n", oar_last_error());
    CHECK(g != NULL);
    if (g) CHECK(oar_graph_count_op(g, "while") == 1);
    oar_executor *ex = g ? oar_executor_new(g) : NULL;
    static const float limits[] = {40, 1e6f, -1};
    for (int t = 0; ex && t < 3; t++) {
        float x[3] = {1, -0.5f, 0.25f}, v[3] = {1, -0.5f, 0.25f}, limit = limits[t];
        int64_t trips = loop_reference(10, limit, v);
        oar_tensor *in[2] = {oar_tensor_from_data(x, OAR_F32, 1, (int64_t[]){3}),
                             oar_tensor_from_data(&limit, OAR_F32, 0, NULL)};
        check_loop_run(ex, in, v, trips);
        oar_tensor_release(in[0]);
        oar_tensor_release(in[1]);
    }
    oar_executor_free(ex);
    oar_graph_free(g);
}

/* y = c ? Shape(x) : Shape(x) * 2 with x [N, 3]: sizes leaving a branch
 * are computed at run time (not the placeholder of the trace). */
static void test_if_sizes(void) {
    oar_graph *g = oar_onnx_load("onnx/control_if_sizes.onnx");
    if (!g) fprintf(stderr, "control_if_sizes: %s\n", oar_last_error());
    CHECK(g != NULL);
    oar_executor *ex = g ? oar_executor_new(g) : NULL;
    for (int k = 0; ex && k < 4; k++) {
        int64_t n = k < 2 ? 2 : 5;
        bool c = k % 2;
        oar_tensor *in[2] = {oar_zeros(OAR_F32, 2, (int64_t[]){n, 3}), oar_tensor_from_data(&c, OAR_BOOL, 0, NULL)};
        oar_tensor *y = NULL;
        CHECK(oar_executor_run(ex, in, &y) == 0);
        if (y && oar_tensor_numel(y) == 2) {
            const int64_t *v = oar_tensor_data(y);
            CHECK(v[0] == (c ? n : 2 * n) && v[1] == (c ? 3 : 6));
        }
        oar_tensor_release(in[0]);
        oar_tensor_release(in[1]);
    }
    oar_executor_free(ex);
    oar_graph_free(g);
}

/* What the nodes cannot hold is refused at import, naming the node: scan
 * outputs of a loop with a run-time trip count (libonnx-testdata's
 * test_loop11, M an input), branches of different shapes. */
static void test_refusals(void) {
    const char *loop11 = "/usr/share/libonnx-testdata/data/node/test_loop11/model.onnx";
    if (access(loop11, R_OK) == 0)
        CHECK_FAILS(oar_onnx_load(loop11), "(Loop, opset 11): scan outputs of a loop whose trip count is computed "
                                           "at run time");
    CHECK_FAILS(oar_onnx_load("onnx/control_if_shapes.onnx"), "node 0 'if' (If, opset 13): cond: output 0 is");
}

int main(void) {
    RUN(test_if_node);
    RUN(test_loop_node);
    RUN(test_traced_nested);
    RUN(test_dropout_training);
    RUN(test_loop_constant_trips);
    RUN(test_if_sizes);
    RUN(test_refusals);
    return test_summary();
}

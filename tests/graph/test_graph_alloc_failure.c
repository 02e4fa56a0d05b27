/* Out of memory in the static-graph path (invariant 5 of docs/architecture.md): make the
 * Nth host allocation fail, for every N, while tracing a model, optimising
 * the graph, running it, saving and loading it and running a predictor;
 * and while making a predictor with a packing per batch size and running
 * it at each; and while differentiating a traced LSTM twice. Each failure must be reported, leak nothing and leave oar usable. */
#include "graph_test_util.h"

#include "infer/predictor.h"

#include <oar/infer.h>
#include <unistd.h>
#include "alloc_fail_loop.h"

static oar_module *net;
static oar_tensor *x;
static char dir[] = "/tmp/oar_gfail_XXXXXX";

/* Trace, optimise, run, save, load, predict; 0 on success. */
static int step(void) {
    oar_graph_input_spec s = {.name = "x", .dtype = OAR_F32, .ndim = 4, .shape = {-1, 1, 8, 8}, .dim_names = {"N"}};
    oar_graph *g = oar_trace_module(net, &s), *h = NULL;
    oar_executor *ex = NULL;
    oar_predictor *p = NULL;
    oar_tensor *y = NULL, *z = NULL;
    int st = g ? 0 : -1;
    if (!st) st = oar_graph_optimize(g, OAR_PASSES_INFERENCE, 0);
    if (!st && !(ex = oar_executor_new(g))) st = -1;
    if (!st) st = oar_executor_run(ex, &x, &y);
    if (!st) st = oar_graph_save(g, dir);
    if (!st && !(h = oar_graph_load(dir))) st = -1;
    if (!st && !(p = oar_predictor_from_graph(h, NULL))) st = -1;
    if (!st) st = oar_predictor_run(p, &x, &z);
    oar_tensor_release(z);
    oar_predictor_free(p);
    oar_graph_free(h);
    oar_executor_free(ex);
    oar_graph_free(g);
    return st;
}

static void test_every_allocation_fails_cleanly(void) {
    net = make_cnn();
    x = oar_randn(OAR_F32, 4, (int64_t[]){2, 1, 8, 8});
    CHECK(step() == 0);
    int failures, n = fail_each_allocation(step, &failures);
    printf("failed each of %d allocations of trace+optimize+run+save+load+predict\n", n);
    CHECK(failures > 100);
    CHECK(n < 100000);
    oar_tensor_release(x);
    oar_module_free(net);
}

/* A 16 -> 16 channel conv packed for batches 4 and 1, run at both. */
static oar_tensor *wide_w, *x4, *x1;
static int wide_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    out[0] = oar_relu(oar_conv2d(in[0], wide_w, NULL, (int64_t[]){1, 1}, (int64_t[]){1, 1}, (int64_t[]){1, 1}, 1));
    return out[0] ? 0 : -1;
}
static const int64_t wide_batches[2] = {4, 1};
static bool adapt; /* the second form: packed for 4, batch 1's packing made by its run */
static int step_batches(void) {
    oar_graph_input_spec s = {.name = "x", .dtype = OAR_F32, .ndim = 4, .shape = {-1, 16, 6, 6}};
    oar_graph *g = oar_trace(wide_fn, NULL, 1, &s, 1, NULL);
    oar_predictor_config cfg = {.optimize = true, .no_compile = true, .batches = wide_batches, .n_batches = 2};
    if (adapt) cfg = (oar_predictor_config){.optimize = true, .no_compile = true, .batch = 4, .adapt_batches = true};
    oar_predictor *p = g ? oar_predictor_from_graph(g, &cfg) : NULL;
    oar_tensor *y4 = NULL, *y1 = NULL;
    int st = p ? oar_predictor_run(p, &x4, &y4) : -1;
    if (!st) st = oar_predictor_run(p, &x1, &y1);
    oar_tensor_release(y4);
    oar_tensor_release(y1);
    oar_predictor_free(p);
    oar_graph_free(g);
    return st;
}

static void test_batches_fail_cleanly(void) {
    wide_w = oar_randn(OAR_F32, 4, (int64_t[]){16, 16, 3, 3});
    x4 = oar_randn(OAR_F32, 4, (int64_t[]){4, 16, 6, 6});
    x1 = oar_randn(OAR_F32, 4, (int64_t[]){1, 16, 6, 6});
    CHECK(step_batches() == 0);
    oar_graph_input_spec s = {.name = "x", .dtype = OAR_F32, .ndim = 4, .shape = {-1, 16, 6, 6}};
    oar_graph *g = oar_trace(wide_fn, NULL, 1, &s, 1, NULL);
    oar_predictor *p = oar_predictor_from_graph(g, &(oar_predictor_config){.optimize = true, .no_compile = true,
                                                                            .batches = wide_batches, .n_batches = 2});
    /* (where this CPU packs the conv, batch 1 has a graph of its own) */
    bool two = p && oari_predictor_graph_for(p, &x1) != oar_predictor_graph(p);
    printf("packings: %d\n", two ? 2 : 1);
    oar_predictor_free(p);
    oar_graph_free(g);
    int failures, n = fail_each_allocation(step_batches, &failures);
    printf("failed each of %d allocations of a predictor for batches {4, 1} and its runs\n", n);
    CHECK(failures > 50);
    CHECK(n < 100000);
    /* adapt_batches: where packing for batch 1 fails, the run goes on with
     * batch 4's packing (a warning) or fails cleanly */
    adapt = true;
    CHECK(step_batches() == 0);
    n = fail_each_allocation(step_batches, &failures);
    printf("failed each of %d allocations of an adapting predictor packed for 4 and its runs at 4 and 1\n", n);
    CHECK(failures > 50);
    CHECK(n < 100000);
    adapt = false;
    oar_tensor_release(x1);
    oar_tensor_release(x4);
    oar_tensor_release(wide_w);
}

/* A traced LSTM layer, its graph backward twice (the second through
 * lstm_layer_backward's decomposition) and a run. */
static oar_tensor *lx, *lh, *lwi, *lwh;
static int lstm_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    oar_tensor *y = NULL, *hn = NULL, *cn = NULL;
    if (oar_rnn_layer(OAR_RNN_LSTM, false, in[0], in[1], in[1], in[2], in[3], NULL, NULL, NULL, &y, &hn, &cn))
        return -1;
    out[0] = oar_sum(oar_mul(y, y), 0, NULL, false);
    return out[0] ? 0 : -1;
}
static int step_lstm(void) {
    oar_graph_input_spec s[4] = {{.name = "x", .dtype = OAR_F64, .ndim = 3, .shape = {2, 1, 2}},
                                 {.name = "h", .dtype = OAR_F64, .ndim = 2, .shape = {1, 2}},
                                 {.name = "wi", .dtype = OAR_F64, .ndim = 2, .shape = {8, 2}},
                                 {.name = "wh", .dtype = OAR_F64, .ndim = 2, .shape = {8, 2}}};
    oar_graph *g = oar_trace(lstm_fn, NULL, 4, s, 1, NULL);
    const int wrt[4] = {0, 1, 2, 3};
    int st = g ? oar_graph_append_backward(g, 0, 4, wrt) : -1;
    if (st == 1) st = oar_graph_append_backward(g, 2, 4, wrt) == 5 ? 0 : -1; /* of grad:h */
    else if (st >= 0) st = -1;
    oar_executor *ex = st ? NULL : oar_executor_new(g);
    oar_tensor *out[9] = {0};
    if (!st) st = ex ? oar_executor_run(ex, (oar_tensor *[]){lx, lh, lwi, lwh}, out) : -1;
    oar_executor_free(ex);
    oar_graph_free(g);
    return st;
}

static void test_lstm_second_order_fails_cleanly(void) {
    lx = oar_randn(OAR_F64, 3, (int64_t[]){2, 1, 2});
    lh = oar_randn(OAR_F64, 2, (int64_t[]){1, 2});
    lwi = oar_randn(OAR_F64, 2, (int64_t[]){8, 2});
    lwh = oar_randn(OAR_F64, 2, (int64_t[]){8, 2});
    CHECK(step_lstm() == 0);
    int failures, n = fail_each_allocation(step_lstm, &failures);
    printf("failed each of %d allocations of a traced LSTM's backward, again, and a run\n", n);
    CHECK(failures > 100);
    CHECK(n < 100000);
    oar_tensor_release(lx);
    oar_tensor_release(lh);
    oar_tensor_release(lwi);
    oar_tensor_release(lwh);
}

int main(void) {
    if (!mkdtemp(dir)) return 1;
    oar_set_allocator(failing_alloc, NULL);
    RUN(test_every_allocation_fails_cleanly);
    RUN(test_batches_fail_cleanly);
    RUN(test_lstm_second_order_fails_cleanly);
    oar_memory_empty_cache();
    oar_set_allocator(NULL, NULL);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) return 1;
    return test_summary();
}

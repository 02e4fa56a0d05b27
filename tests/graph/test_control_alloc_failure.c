/* Out of memory with control flow in the graph (invariant 5 of docs/architecture.md):
 * make the Nth host allocation fail, for every N, while tracing a model
 * with a cond inside a while loop (nested tracers, captures), optimising
 * it, running it, saving, loading and predicting. Each failure must be
 * reported, leak nothing and leave oar usable. */
#include "graph_test_util.h"

#include <oar/infer.h>
#include <unistd.h>
#include "alloc_fail_loop.h"

static oar_tensor *x, *yv, *captured;
static char dir[] = "/dev/shm/oar_cfail_XXXXXX"; /* memory: saves fsync thousands of times */

static int times3(void *ctx, int n_in, oar_tensor *const *in, int n_out, oar_tensor **out) {
    (void)ctx, (void)n_in, (void)n_out;
    out[0] = oar_mul_scalar(in[0], 3);
    return out[0] ? 0 : -1;
}

static int plus_y(void *ctx, int n_in, oar_tensor *const *in, int n_out, oar_tensor **out) {
    (void)ctx, (void)n_in, (void)n_out;
    out[0] = oar_add(in[0], captured);
    return out[0] ? 0 : -1;
}

static int below(void *ctx, int n_in, oar_tensor *const *in, int n_out, oar_tensor **out) {
    (void)ctx, (void)n_in, (void)n_out;
    out[0] = oar_lt(in[1], oar_scalar(4));
    return out[0] ? 0 : -1;
}

static int body(void *ctx, int n_in, oar_tensor *const *in, int n_out, oar_tensor **out) {
    (void)n_in, (void)n_out;
    oar_tensor *pred = oar_lt(oar_sum(in[0], 0, NULL, false), oar_scalar(10));
    int st = oar_cond(pred, times3, plus_y, ctx, 1, &in[0], 1, &out[0]);
    out[1] = st ? NULL : oar_add_scalar(in[1], 1);
    return out[1] ? 0 : -1;
}

static int model(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    captured = in[1];
    oar_tensor *init[2] = {in[0], oar_scalar(0)}, *o[2];
    int st = oar_while_loop(below, body, ctx, 2, init, 10, o);
    captured = NULL;
    out[0] = st ? NULL : o[0];
    return st;
}

/* Trace, optimise, run, save, load, predict; 0 on success. */
static int step(void) {
    oar_graph_input_spec s[2] = {{.name = "x", .dtype = OAR_F32, .ndim = 2, .shape = {-1, 2}, .dim_names = {"N"}},
                                 {.name = "y", .dtype = OAR_F32, .ndim = 1, .shape = {2}}};
    oar_pool *pool = oar_pool_push();
    oar_graph *g = oar_trace(model, NULL, 2, s, 1, NULL), *h = NULL;
    oar_pool_pop(pool);
    oar_executor *ex = NULL;
    oar_predictor *p = NULL;
    oar_tensor *y = NULL, *z = NULL, *in[2] = {x, yv};
    int st = g ? 0 : -1;
    if (!st) st = oar_graph_optimize(g, OAR_PASSES_INFERENCE, 0);
    if (!st && !(ex = oar_executor_new(g))) st = -1;
    if (!st) st = oar_executor_run(ex, in, &y);
    if (!st) st = oar_graph_save(g, dir);
    if (!st && !(h = oar_graph_load(dir))) st = -1;
    if (!st && !(p = oar_predictor_from_graph(h, &(oar_predictor_config){.no_compile = true}))) st = -1;
    if (!st) st = oar_predictor_run(p, in, &z);
    oar_tensor_release(z);
    oar_predictor_free(p);
    oar_graph_free(h);
    oar_executor_free(ex);
    oar_graph_free(g);
    return st;
}

static void test_every_allocation_fails_cleanly(void) {
    x = oar_tensor_from_data((float[]){1, -2, 0.5f, 3}, OAR_F32, 2, (int64_t[]){2, 2});
    yv = oar_tensor_from_data((float[]){0.25f, -1}, OAR_F32, 1, (int64_t[]){2});
    CHECK(step() == 0);
    int failures, n = fail_each_allocation(step, &failures);
    printf("failed each of %d allocations of trace+optimize+run+save+load+predict\n", n);
    CHECK(failures > 100);
    CHECK(n < 100000);
    oar_tensor_release(x);
    oar_tensor_release(yv);
}

int main(void) {
    if (!mkdtemp(dir) && !mkdtemp(strcpy(dir, "/tmp/oar_cfail_XXXXXX"))) return 1;
    oar_set_allocator(failing_alloc, NULL);
    RUN(test_every_allocation_fails_cleanly);
    oar_memory_empty_cache();
    oar_set_allocator(NULL, NULL);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) return 1;
    return test_summary();
}

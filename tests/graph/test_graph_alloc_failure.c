/* Out of memory in the static-graph path (invariant 5 of docs/architecture.md): make the
 * Nth host allocation fail, for every N, while tracing a model, optimising
 * the graph, running it, saving and loading it and running a predictor.
 * Each failure must be reported, leak nothing and leave oar usable. */
#include "graph_test_util.h"

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

int main(void) {
    if (!mkdtemp(dir)) return 1;
    oar_set_allocator(failing_alloc, NULL);
    RUN(test_every_allocation_fails_cleanly);
    oar_memory_empty_cache();
    oar_set_allocator(NULL, NULL);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) return 1;
    return test_summary();
}

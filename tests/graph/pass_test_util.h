/* Runs a traced function eagerly and through a graph and compares. */
#ifndef PASS_TEST_UTIL_H
#define PASS_TEST_UTIL_H

#include "graph_test_util.h"

/* One [4, 5] f32 input "x", one output. */
static inline oar_graph *trace1(oar_trace_fn fn, void *ctx) {
    oar_graph_input_spec s = {.name = "x", .dtype = OAR_F32, .ndim = 2, .shape = {-1, 5}, .dim_names = {"N"}};
    return oar_trace(fn, ctx, 1, &s, 1, NULL);
}

/* Max difference between fn(x) and the graph's output on a random x. */
static inline double graph_vs_eager(oar_graph *g, oar_trace_fn fn, void *ctx) {
    oar_pool *p = oar_pool_push();
    oar_tensor *x = oar_randn(OAR_F32, 2, (int64_t[]){4, 5}), *want = NULL, *got = NULL;
    fn(ctx, &x, &want);
    oar_executor *ex = oar_executor_new(g);
    double d = oar_executor_run(ex, &x, &got) ? INFINITY : max_diff(got, want);
    oar_executor_free(ex);
    oar_pool_pop(p);
    return d;
}

#endif

/* Common subexpression elimination merges equal pure nodes and equal
 * constants, never random ones. */
#include "pass_test_util.h"

static int fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    oar_tensor *a = oar_mul(oar_exp(in[0]), oar_scalar(2)), *b = oar_mul(oar_exp(in[0]), oar_scalar(2));
    out[0] = oar_add(a, b);
    return out[0] ? 0 : -1;
}

static int rand_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    oar_tensor *p = oar_sigmoid(in[0]);
    out[0] = oar_add(oar_bernoulli(p), oar_bernoulli(p));
    return out[0] ? 0 : -1;
}

static void test_cse(void) {
    oar_graph *g = trace1(fn, NULL);
    CHECK(oar_graph_count_op(g, "exp") == 2 && oar_graph_count_op(g, "mul") == 2);
    CHECK(oar_graph_num_constants(g) == 2);
    CHECK(oar_graph_run_pass(g, "cse") == 3); /* the scalar, exp, mul */
    CHECK(oar_graph_count_op(g, "exp") == 1 && oar_graph_count_op(g, "mul") == 1);
    CHECK(oar_graph_num_constants(g) == 1);
    CHECK_NEAR(graph_vs_eager(g, fn, NULL), 0, 1e-5);
    oar_graph_free(g);

    g = trace1(rand_fn, NULL);
    CHECK(oar_graph_run_pass(g, "cse") == 0);
    CHECK(oar_graph_count_op(g, "bernoulli") == 2);
    oar_graph_free(g);
}

int main(void) {
    RUN(test_cse);
    return test_summary();
}

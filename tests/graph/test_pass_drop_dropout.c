/* Inference: dropout traced in training mode is dropped. */
#include "pass_test_util.h"

static int fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    out[0] = oar_dropout(oar_relu(in[0]), 0.5, ctx != NULL);
    return out[0] ? 0 : -1;
}

static void test_drop(void) {
    int training = 1;
    oar_graph *g = trace1(fn, &training);
    CHECK(oar_graph_count_op(g, "bernoulli") == 1);
    CHECK(oar_graph_run_pass(g, "drop_dropout") == 1);
    CHECK(oar_graph_count_op(g, "bernoulli") == 0 && oar_graph_count_op(g, "mul") == 0);
    CHECK(oar_graph_num_nodes(g) == 1);
    CHECK_NEAR(graph_vs_eager(g, fn, NULL), 0, 0); /* equals eval-mode dropout: relu(x) */
    oar_graph_free(g);
}

int main(void) {
    RUN(test_drop);
    return test_summary();
}

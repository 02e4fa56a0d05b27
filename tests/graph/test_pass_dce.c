/* Dead code elimination removes unused chains and keeps what outputs need. */
#include "pass_test_util.h"

static int fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    oar_tensor *unused = oar_sin(oar_log(in[0])); /* two dead nodes */
    (void)unused;
    out[0] = oar_exp(in[0]);
    return out[0] ? 0 : -1;
}

static void test_dce(void) {
    oar_graph *g = trace1(fn, NULL);
    CHECK(oar_graph_num_nodes(g) == 3);
    CHECK(oar_graph_run_pass(g, "dce") == 2);
    CHECK(oar_graph_num_nodes(g) == 1);
    CHECK(oar_graph_count_op(g, "exp") == 1);
    CHECK(oar_graph_run_pass(g, "dce") == 0);
    CHECK(oar_graph_verify(g) == 0);
    CHECK_NEAR(graph_vs_eager(g, fn, NULL), 0, 1e-6);
    oar_graph_free(g);
}

int main(void) {
    RUN(test_dce);
    return test_summary();
}

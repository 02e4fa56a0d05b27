/* Constant folding: with the parameters traced as inputs and then frozen,
 * the ops on parameters alone run once and become constants. */
#include "pass_test_util.h"

static oar_tensor *fwd(oar_module *m, oar_tensor *x) {
    oar_tensor *w = oar_module_get(m, "w");
    return oar_mul(x, oar_add_scalar(oar_exp(w), 1));
}

static int fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    out[0] = oar_module_forward(ctx, in[0]);
    return out[0] ? 0 : -1;
}

static void test_fold(void) {
    oar_module *m = oar_module_new("Scale", fwd, NULL, NULL);
    oar_tensor *w = oar_randn(OAR_F32, 1, (int64_t[]){5}); /* outside pools: ours to release */
    oar_module_add_parameter(m, "w", w);
    oar_tensor_release(w);
    oar_graph_input_spec s = {.name = "x", .dtype = OAR_F32, .ndim = 2, .shape = {-1, 5}};
    oar_graph *g = oar_trace(fn, m, 1, &s, 1, &(oar_trace_options){.module = m, .params_as_inputs = true});
    CHECK(g && oar_graph_num_inputs(g) == 2);
    CHECK(strcmp(oar_graph_input_name(g, 1), "w") == 0);
    CHECK(oar_graph_count_op(g, "exp") == 1);
    CHECK(oar_graph_run_pass(g, "constant_fold") == 0); /* w is an input: nothing to fold */
    CHECK(oar_graph_freeze(g, m) == 1);
    CHECK(oar_graph_num_inputs(g) == 1);
    CHECK(oar_graph_run_pass(g, "constant_fold") == 2); /* exp, then add: one pass, in order */
    CHECK(oar_graph_count_op(g, "exp") == 0 && oar_graph_count_op(g, "add") == 0);
    CHECK(oar_graph_num_nodes(g) == 1);
    CHECK(oar_graph_verify(g) == 0);
    CHECK_NEAR(graph_vs_eager(g, fn, m), 0, 1e-5);
    oar_graph_free(g);
    oar_module_free(m);
}

int main(void) {
    RUN(test_fold);
    return test_summary();
}

/* Inference: batch norm folded into the conv2d or linear before it. */
#include "graph_test_util.h"

static double agree(oar_module *m, oar_graph *g, int ndim, const int64_t *shape) {
    oar_pool *p = oar_pool_push();
    oar_tensor *x = oar_randn(OAR_F32, ndim, shape), *got = NULL;
    oar_executor *ex = oar_executor_new(g);
    double d = oar_executor_run(ex, &x, &got) ? INFINITY : max_diff(got, oar_module_forward(m, x));
    oar_executor_free(ex);
    oar_pool_pop(p);
    return d;
}

static void test_conv(void) {
    oar_module *m = make_cnn();
    oar_graph_input_spec s = {.name = "x", .dtype = OAR_F32, .ndim = 4, .shape = {-1, 1, 8, 8}};
    oar_graph *g = oar_trace_module(m, &s);
    int before = oar_graph_num_nodes(g);
    CHECK(oar_graph_run_pass(g, "fold_batch_norm") == 1);
    CHECK(oar_graph_count_op(g, "batch_norm") == 0);
    CHECK(oar_graph_num_nodes(g) == before - 1);
    CHECK(oar_graph_verify(g) == 0);
    CHECK_NEAR(agree(m, g, 4, (int64_t[]){3, 1, 8, 8}), 0, 1e-5);
    oar_graph_free(g);
    oar_module_free(m);
}

static void test_linear(bool bias) {
    oar_manual_seed(3);
    oar_module *m = oar_sequential_new(3, (oar_module *[]){oar_linear_new(8, 6, bias),
                                                          oar_batch_norm1d_new(6, 1e-5, 0.1, true), oar_relu_new()});
    oar_pool *p = oar_pool_push();
    for (int i = 0; i < 3; i++) oar_module_forward(m, oar_add_scalar(oar_randn(OAR_F32, 2, (int64_t[]){16, 8}), 1));
    oar_pool_pop(p);
    oar_init_uniform_(oar_module_get(m, "1.weight"), 0.5, 1.5);
    oar_module_train(m, false);
    oar_graph_input_spec s = {.name = "x", .dtype = OAR_F32, .ndim = 2, .shape = {-1, 8}};
    oar_graph *g = oar_trace_module(m, &s);
    CHECK(oar_graph_run_pass(g, "fold_batch_norm") == 1);
    CHECK(oar_graph_count_op(g, "batch_norm") == 0);
    CHECK(oar_graph_count_op(g, "add") == 1);
    CHECK(oar_graph_verify(g) == 0);
    CHECK_NEAR(agree(m, g, 2, (int64_t[]){5, 8}), 0, 1e-5);
    oar_graph_free(g);
    oar_module_free(m);
}

static void test_linear_bias(void) { test_linear(true); }
static void test_linear_no_bias(void) { test_linear(false); }

int main(void) {
    RUN(test_conv);
    RUN(test_linear_bias);
    RUN(test_linear_no_bias);
    return test_summary();
}

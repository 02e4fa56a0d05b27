/* Algebraic simplification: x*1, x+0, x-0, x/1, a double transpose and a
 * reshape of a reshape. */
#include "pass_test_util.h"

static int fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    oar_tensor *x = oar_div(oar_sub(oar_add(oar_mul(oar_exp(in[0]), oar_scalar(1)), oar_scalar(0)),
                                    oar_scalar(0)), oar_scalar(1));
    oar_tensor *t = oar_transpose(oar_transpose(x, 0, 1), 0, 1);
    oar_tensor *r = oar_reshape(oar_reshape(t, 3, (int64_t[]){-1, 5, 1}), 2, (int64_t[]){-1, 5});
    out[0] = oar_relu(r);
    return out[0] ? 0 : -1;
}

static int keep_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx; /* x * 1 broadcast to a larger shape must stay */
    out[0] = oar_mul(in[0], oar_ones(OAR_F32, 3, (int64_t[]){2, 1, 5}));
    return out[0] ? 0 : -1;
}

static void test_simplify(void) {
    oar_graph *g = trace1(fn, NULL);
    CHECK(oar_graph_count_op(g, "permute") == 2 && oar_graph_count_op(g, "view") == 2);
    CHECK(oar_graph_run_pass(g, "simplify") > 0);
    CHECK(oar_graph_run_pass(g, "dce") >= 0);
    CHECK(oar_graph_count_op(g, "mul") == 0 && oar_graph_count_op(g, "add") == 0);
    CHECK(oar_graph_count_op(g, "sub") == 0 && oar_graph_count_op(g, "div") == 0);
    CHECK(oar_graph_count_op(g, "permute") == 0);
    CHECK(oar_graph_count_op(g, "view") == 0); /* view(view(x)) to x's own shape */
    CHECK(oar_graph_num_nodes(g) == 2);         /* exp, relu */
    CHECK_NEAR(graph_vs_eager(g, fn, NULL), 0, 1e-5);
    oar_graph_free(g);

    g = trace1(keep_fn, NULL);
    CHECK(oar_graph_run_pass(g, "simplify") == 0);
    CHECK(oar_graph_count_op(g, "mul") == 1);
    oar_graph_free(g);
}

int main(void) {
    RUN(test_simplify);
    return test_summary();
}

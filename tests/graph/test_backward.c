/* Backward on the graph: gradient nodes appended from the ops' own
 * gradient rules agree with eager autograd (an MLP with MSE, a CNN with
 * cross entropy, a dynamic batch with a mean over it), and a traced SGD train step run by the
 * executor follows the eager training loop step by step. */
#include "graph_test_util.h"

typedef struct loss_ctx {
    oar_module *m;
    bool ce, sum;
} loss_ctx;

static int loss_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    loss_ctx *c = ctx;
    oar_tensor *y = oar_module_forward(c->m, in[0]);
    out[0] = c->ce ? oar_cross_entropy(y, in[1], NULL, -100, 0.0, OAR_REDUCTION_MEAN)
                   : oar_mse_loss(y, in[1], c->sum ? OAR_REDUCTION_SUM : OAR_REDUCTION_MEAN);
    return out[0] ? 0 : -1;
}

/* Traces loss(x, target) with the parameters as inputs and appends their gradients. */
static oar_graph *trace_grad(loss_ctx *c, const oar_graph_input_spec *specs, int *n_params) {
    oar_graph *g = oar_trace(loss_fn, c, 2, specs, 1, &(oar_trace_options){.module = c->m, .params_as_inputs = true});
    CHECK(g != NULL);
    if (!g) return NULL;
    *n_params = oar_graph_num_inputs(g) - 2;
    int wrt[16];
    for (int k = 0; k < *n_params; k++) wrt[k] = 2 + k;
    CHECK(oar_graph_append_backward(g, 0, *n_params, wrt) == 1);
    CHECK(oar_graph_num_outputs(g) == 1 + *n_params);
    return g;
}

/* Runs g on (x, target, params) and checks loss and every gradient against eager. */
static void check_grads(loss_ctx *c, oar_graph *g, int n_params, oar_tensor *x, oar_tensor *target) {
    oar_tensor *params[16], *in[18] = {x, target}, *out[17];
    CHECK(oar_module_parameters(c->m, params, 16) == n_params);
    for (int k = 0; k < n_params; k++) in[2 + k] = params[k];
    oar_executor *ex = oar_executor_new(g);
    CHECK(oar_executor_run(ex, in, out) == 0);
    oar_module_zero_grad(c->m);
    oar_tensor *loss = NULL;
    loss_fn(c, in, &loss);
    CHECK(oar_backward(loss, NULL) == 0);
    CHECK_NEAR(max_diff(out[0], loss), 0, 1e-6);
    for (int k = 0; k < n_params; k++) {
        CHECK(strncmp(oar_graph_output_name(g, 1 + k), "grad:", 5) == 0);
        CHECK_NEAR(max_diff(out[1 + k], oar_tensor_grad(params[k])), 0, 1e-5);
    }
    oar_executor_free(ex);
}

static void test_mlp_mse(void) {
    loss_ctx c = {.m = make_mlp()};
    oar_graph_input_spec specs[2] = {
        {.name = "x", .dtype = OAR_F32, .ndim = 2, .shape = {-1, 8}, .dim_names = {"N"}},
        {.name = "t", .dtype = OAR_F32, .ndim = 2, .shape = {-1, 4}, .dim_names = {"N"}}};
    /* sum and mean: a mean over the dynamic batch divides by the count of
     * the batch each run has (a size_of node), in forward and backward */
    for (int sum = 1; sum >= 0; sum--) {
        c.sum = sum;
        int np = 0;
        oar_graph *g = trace_grad(&c, specs, &np);
        CHECK(np == 4);
        CHECK(oar_graph_count_op(g, "size_of") == (sum ? 0 : 1));
        for (int64_t n = 3; n <= 6; n += 3) { /* the batch is dynamic in the backward too */
            oar_pool *p = oar_pool_push();
            check_grads(&c, g, np, oar_randn(OAR_F32, 2, (int64_t[]){n, 8}),
                        oar_randn(OAR_F32, 2, (int64_t[]){n, 4}));
            oar_pool_pop(p);
        }
        oar_graph_free(g);
    }
    oar_module_free(c.m);
}

static void test_cnn_cross_entropy(void) {
    oar_manual_seed(5);
    loss_ctx c = {.ce = true, .m = oar_sequential_new(5, (oar_module *[]){
                                  oar_conv2d_new(1, 3, 3, 1, 1, 1, 1, true), oar_relu_new(),
                                  oar_avg_pool2d_new(2, 0, 0), oar_flatten_new(1, -1), oar_linear_new(48, 5, true)})};
    oar_graph_input_spec specs[2] = {
        {.name = "x", .dtype = OAR_F32, .ndim = 4, .shape = {4, 1, 8, 8}},
        {.name = "label", .dtype = OAR_I64, .ndim = 1, .shape = {4}}};
    int np = 0;
    oar_graph *g = trace_grad(&c, specs, &np);
    CHECK(np == 4);
    oar_pool *p = oar_pool_push();
    int64_t labels[4] = {0, 3, 4, 1};
    check_grads(&c, g, np, oar_randn(OAR_F32, 4, (int64_t[]){4, 1, 8, 8}),
                oar_tensor_from_data(labels, OAR_I64, 1, (int64_t[]){4}));
    oar_pool_pop(p);
    oar_graph_free(g);
    oar_module_free(c.m);
}

static void test_train_step(void) {
    loss_ctx c = {.m = make_mlp()};
    oar_graph_input_spec specs[2] = {
        {.name = "x", .dtype = OAR_F32, .ndim = 2, .shape = {8, 8}},
        {.name = "t", .dtype = OAR_F32, .ndim = 2, .shape = {8, 4}}};
    int np = 0;
    oar_graph *g = trace_grad(&c, specs, &np);
    const double lr = 0.1;
    CHECK(oar_graph_append_sgd(g, lr) == np);
    CHECK(strcmp(oar_graph_output_name(g, 1 + np), "next:0.weight") == 0);
    /* the graph's parameters start as copies of the module's */
    oar_tensor *params[16], *gp[16], *in[18], *out[32];
    oar_module_parameters(c.m, params, 16);
    for (int k = 0; k < np; k++) gp[k] = oar_clone(params[k]);
    oar_pool *p = oar_pool_push();
    oar_tensor *x = oar_randn(OAR_F32, 2, (int64_t[]){8, 8}), *t = oar_randn(OAR_F32, 2, (int64_t[]){8, 4});
    oar_executor *ex = oar_executor_new(g);
    double worst = 0, first = 0, last = 0;
    for (int step = 0; step < 5; step++) {
        in[0] = x;
        in[1] = t;
        for (int k = 0; k < np; k++) in[2 + k] = gp[k];
        CHECK(oar_executor_run(ex, in, out) == 0);
        double graph_loss = oar_tensor_item(out[0]);
        /* feed next:* back (copies: outputs live in the executor's arena) */
        for (int k = 0; k < np; k++) {
            oar_tensor_release(gp[k]);
            gp[k] = oar_tensor_retain(oar_clone(out[1 + np + k]));
        }
        /* the eager step */
        oar_module_zero_grad(c.m);
        oar_tensor *loss = NULL;
        loss_fn(&c, (oar_tensor *[]){x, t}, &loss);
        oar_backward(loss, NULL);
        oar_no_grad_push();
        for (int k = 0; k < np; k++) oar_copy_(params[k], oar_sub(params[k], oar_mul_scalar(oar_tensor_grad(params[k]), lr)));
        oar_no_grad_pop();
        double d = fabs(oar_tensor_item(loss) - graph_loss);
        worst = d > worst ? d : worst;
        if (step == 0) first = graph_loss;
        last = graph_loss;
    }
    CHECK_NEAR(worst, 0, 1e-5);
    CHECK(last < first); /* it trains */
    for (int k = 0; k < np; k++) {
        CHECK_NEAR(max_diff(gp[k], params[k]), 0, 1e-5);
        oar_tensor_release(gp[k]);
    }
    oar_executor_free(ex);
    oar_pool_pop(p);
    oar_graph_free(g);
    oar_module_free(c.m);
}

static int argmax_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    out[0] = oar_cast(oar_argmax(in[0], 1, false), OAR_F32);
    return out[0] ? 0 : -1;
}

static void test_errors(void) {
    oar_graph_input_spec s = {.name = "x", .dtype = OAR_F32, .ndim = 2, .shape = {3, 4}};
    oar_graph *g = oar_trace(argmax_fn, NULL, 1, &s, 1, NULL);
    CHECK_STATUS_FAILS(oar_graph_append_backward(g, 0, 1, (int[]){0}), "does not depend");
    CHECK_STATUS_FAILS(oar_graph_append_backward(g, 3, 1, (int[]){0}), "out of range");
    CHECK_STATUS_FAILS(oar_graph_append_backward(g, 0, 1, (int[]){5}), "out of range");
    CHECK(oar_graph_append_sgd(g, 0.1) == 0);
    oar_graph_free(g);
}

int main(void) {
    RUN(test_mlp_mse);
    RUN(test_cnn_cross_entropy);
    RUN(test_train_step);
    RUN(test_errors);
    return test_summary();
}

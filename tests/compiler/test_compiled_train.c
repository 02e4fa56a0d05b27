/* The example models (examples/: MLP, LeNet-5, a ResNet block, the
 * character transformer) train through the compiled train-step program:
 * loss traced with the parameters as inputs, backward and SGD appended,
 * compiled, and run step by step beside the eager loop; the loss curves
 * agree and the parameters end equal. Skipped without a C compiler. */
#include "graph/graph_test_util.h"

#include "compiler/jit.h"

typedef struct model_case {
    oar_module *m;
    bool ce;     /* cross entropy over the last dim (labels i64); else MSE */
    int64_t vocab;
} model_case;

static int loss_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    model_case *c = ctx;
    oar_tensor *y = oar_module_forward(c->m, in[0]);
    if (c->ce && oar_tensor_ndim(y) == 3) /* [B, L, vocab] -> [B*L, vocab] */
        y = oar_reshape(y, 2, (int64_t[]){-1, c->vocab});
    if (c->ce && oar_tensor_ndim(in[1]) == 2) {
        out[0] = oar_cross_entropy(y, oar_reshape(in[1], 1, (int64_t[]){-1}), NULL, -100, 0.0, OAR_REDUCTION_MEAN);
    } else {
        out[0] = c->ce ? oar_cross_entropy(y, in[1], NULL, -100, 0.0, OAR_REDUCTION_MEAN)
                       : oar_mse_loss(y, in[1], OAR_REDUCTION_MEAN);
    }
    return out[0] ? 0 : -1;
}

static oar_graph_input_spec spec_of(const char *name, oar_tensor *t) {
    oar_graph_input_spec s = {.name = name, .dtype = oar_tensor_dtype(t), .ndim = oar_tensor_ndim(t)};
    for (int d = 0; d < s.ndim; d++) s.shape[d] = oar_tensor_shape(t)[d];
    return s;
}

static void check_train(const char *name, model_case *c, oar_tensor *x, oar_tensor *target, double lr) {
    oar_tensor *params[64];
    int np = oar_module_parameters(c->m, params, 64);
    CHECK(np > 0 && np <= 60);
    oar_graph_input_spec specs[2] = {spec_of("x", x), spec_of("t", target)};
    oar_graph *g = oar_trace(loss_fn, c, 2, specs, 1, &(oar_trace_options){.module = c->m, .params_as_inputs = true});
    CHECK(g != NULL);
    if (!g) return;
    int wrt[64];
    for (int k = 0; k < np; k++) wrt[k] = 2 + k;
    CHECK(oar_graph_append_backward(g, 0, np, wrt) == 1);
    CHECK(oar_graph_append_sgd(g, lr) == np);
    CHECK(oar_graph_optimize(g, OAR_PASSES_TRAINING, 0) == 0);
    oar_executor *ex = oar_executor_new(g);
    CHECK(oar_executor_compile(ex) == 0);
    CHECK(oar_executor_is_compiled(ex));
    fprintf(stderr, "%s: %d nodes, %d kernel launches compiled\n", name, oar_graph_num_nodes(g),
            oar_executor_num_kernels(ex));
    /* the same step updating its parameters in place (donated): every update
     * is made in the parameter's storage (a kernel reading a gradient through
     * a view, or one deferred past the weight's last reader), as unfused */
    oar_executor *dx = oar_executor_new(g);
    CHECK(oar_executor_compile(dx) == 0 && oar_executor_update_in_place(dx) == np);
    oar_tensor *gp[64], *dp[64], *in[66] = {x, target}, *din[66] = {x, target}, *out[130], *dout[130];
    for (int k = 0; k < np; k++) gp[k] = oar_tensor_retain(oar_clone(params[k])); /* ours, beyond the pools */
    for (int k = 0; k < np; k++) din[2 + k] = dp[k] = oar_tensor_retain(oar_clone(params[k]));
    double worst = 0, first = 0, last = 0;
    for (int step = 0; step < 4; step++) {
        oar_pool *p = oar_pool_push();
        for (int k = 0; k < np; k++) in[2 + k] = gp[k];
        CHECK(oar_executor_run(ex, in, out) == 0);
        CHECK(oar_executor_run(dx, din, dout) == 0);
        double graph_loss = oar_tensor_item(out[0]);
        CHECK_NEAR(oar_tensor_item(dout[0]), graph_loss, 1e-6 * fmax(1.0, fabs(graph_loss)));
        for (int k = 0; k < np; k++) {
            oar_tensor_release(gp[k]);
            gp[k] = oar_tensor_retain(oar_clone(out[1 + np + k]));
        }
        oar_module_zero_grad(c->m);
        oar_tensor *loss = NULL;
        CHECK(loss_fn(c, (oar_tensor *[]){x, target}, &loss) == 0);
        CHECK(oar_backward(loss, NULL) == 0);
        oar_no_grad_push();
        for (int k = 0; k < np; k++) oar_copy_(params[k], oar_sub(params[k], oar_mul_scalar(oar_tensor_grad(params[k]), lr)));
        oar_no_grad_pop();
        double eager = oar_tensor_item(loss);
        worst = fmax(worst, fabs(eager - graph_loss) / fmax(1.0, fabs(eager)));
        if (step == 0) first = graph_loss;
        last = graph_loss;
        oar_pool_pop(p);
    }
    CHECK_NEAR(worst, 0, 1e-5);
    CHECK(last < first);
    double pd = 0;
    for (int k = 0; k < np; k++) {
        pd = fmax(pd, max_diff(gp[k], params[k]));
        oar_tensor_release(gp[k]);
    }
    CHECK_NEAR(pd, 0, 1e-4);
    double dd = 0;
    int made_in_place = 0;
    for (int j = 0; j < oar_graph_num_outputs(g); j++) made_in_place += oar_executor_donated_in_place(dx, j) == 1;
    for (int k = 0; k < np; k++) {
        dd = fmax(dd, max_diff(dp[k], params[k]));
        oar_tensor_release(dp[k]);
    }
    CHECK_NEAR(dd, 0, 1e-4);
    fprintf(stderr, "%s: %d of %d updates made in place\n", name, made_in_place, np);
    CHECK(made_in_place == np);
    oar_executor_free(dx);
    oar_executor_free(ex);
    oar_graph_free(g);
}

static void test_mlp(void) {
    oar_pool *p = oar_pool_push();
    oar_manual_seed(11);
    model_case c = {.ce = true, .m = oar_sequential_new(6, (oar_module *[]){
                                    oar_flatten_new(1, -1), oar_linear_new(64, 32, true), oar_relu_new(),
                                    oar_linear_new(32, 32, true), oar_relu_new(), oar_linear_new(32, 10, true)})};
    oar_tensor *x = oar_randn(OAR_F32, 4, (int64_t[]){16, 1, 8, 8});
    oar_tensor *y = oar_randint(0, 10, OAR_I64, 1, (int64_t[]){16});
    check_train("mlp", &c, x, y, 0.1);
    oar_module_free(c.m);
    oar_pool_pop(p);
}

static void test_lenet(void) {
    oar_pool *p = oar_pool_push();
    oar_manual_seed(12);
    model_case c = {.ce = true, .m = oar_sequential_new(12, (oar_module *[]){
        oar_conv2d_new(1, 6, 5, 1, 2, 1, 1, true), oar_relu_new(), oar_max_pool2d_new(2, 2, 0),
        oar_conv2d_new(6, 16, 5, 1, 0, 1, 1, true), oar_relu_new(), oar_max_pool2d_new(2, 2, 0),
        oar_flatten_new(1, -1), oar_linear_new(400, 120, true), oar_relu_new(), oar_linear_new(120, 84, true),
        oar_relu_new(), oar_linear_new(84, 10, true)})};
    oar_tensor *x = oar_randn(OAR_F32, 4, (int64_t[]){8, 1, 28, 28});
    oar_tensor *y = oar_randint(0, 10, OAR_I64, 1, (int64_t[]){8});
    check_train("lenet5", &c, x, y, 0.05);
    oar_module_free(c.m);
    oar_pool_pop(p);
}

/* conv - batch norm - relu - conv - batch norm, plus
 * the input: the residual unit of examples/resnet.c, then pool and a head */
static oar_tensor *resblock_forward(oar_module *m, oar_tensor *x) {
    oar_tensor *h = oar_module_forward(oar_module_child(m, "body"), x);
    h = oar_relu(oar_add(h, x));
    h = oar_mean(h, 2, (int64_t[]){2, 3}, false);
    return oar_module_forward(oar_module_child(m, "head"), h);
}

static void test_resnet_block(void) {
    oar_pool *p = oar_pool_push();
    oar_manual_seed(13);
    oar_module *m = oar_module_new("ResBlock", resblock_forward, NULL, NULL);
    oar_module_add_child(m, "body", oar_sequential_new(5, (oar_module *[]){
        oar_conv2d_new(4, 4, 3, 1, 1, 1, 1, false), oar_batch_norm2d_new(4, 1e-5, 0.1, true), oar_relu_new(),
        oar_conv2d_new(4, 4, 3, 1, 1, 1, 1, false), oar_batch_norm2d_new(4, 1e-5, 0.1, true)}));
    oar_module_add_child(m, "head", oar_linear_new(4, 3, true));
    /* a traced step cannot update running statistics in place: batch norm
     * normalises with them (eval mode), its weight and bias still train */
    oar_module_train(m, false);
    model_case c = {.ce = true, .m = m};
    oar_tensor *x = oar_randn(OAR_F32, 4, (int64_t[]){6, 4, 8, 8});
    oar_tensor *y = oar_randint(0, 3, OAR_I64, 1, (int64_t[]){6});
    check_train("resnet_block", &c, x, y, 0.05);
    oar_module_free(m);
    oar_pool_pop(p);
}

/* examples/char_lm.c's model, one layer: token and position embeddings, a
 * pre-norm causal encoder layer with GELU, a final norm, the vocab head */
static oar_tensor *char_lm_forward(oar_module *m, oar_tensor *idx) {
    int64_t L = oar_tensor_dim(idx, 1);
    oar_tensor *x = oar_add(oar_module_forward(oar_module_child(m, "tok"), idx),
                            oar_module_forward(oar_module_child(m, "pos"), oar_arange(0, (double)L, 1, OAR_I64)));
    x = oar_module_forward(oar_module_child(m, "layer"), x);
    x = oar_module_forward(oar_module_child(m, "norm"), x);
    return oar_module_forward(oar_module_child(m, "head"), x);
}

static void test_char_transformer(void) {
    oar_pool *p = oar_pool_push();
    oar_manual_seed(14);
    const int64_t vocab = 11, D = 16, L = 8;
    oar_module *m = oar_module_new("CharLM", char_lm_forward, NULL, NULL);
    int64_t d = D;
    oar_module_add_child(m, "tok", oar_embedding_new(vocab, D));
    oar_module_add_child(m, "pos", oar_embedding_new(L, D));
    oar_module_add_child(m, "layer", oar_transformer_encoder_layer_new(D, 2, &(oar_transformer_options){
        .dim_feedforward = 32, .activation = OAR_ACTIVATION_GELU, .norm_first = true, .causal = true}));
    oar_module_add_child(m, "norm", oar_layer_norm_new(1, &d, 1e-5, true));
    oar_module_add_child(m, "head", oar_linear_new(D, vocab, true));
    model_case c = {.ce = true, .m = m, .vocab = vocab};
    oar_tensor *x = oar_randint(0, vocab, OAR_I64, 2, (int64_t[]){4, L});
    oar_tensor *y = oar_randint(0, vocab, OAR_I64, 2, (int64_t[]){4, L});
    check_train("char_transformer", &c, x, y, 0.1);
    oar_module_free(m);
    oar_pool_pop(p);
}

int main(void) {
    if (!oari_jit_available()) {
        fprintf(stderr, "no C compiler: skipped\n");
        return 77;
    }
    RUN(test_mlp);
    RUN(test_lenet);
    RUN(test_resnet_block);
    RUN(test_char_transformer);
    return test_summary();
}

/* Donated inputs and discarded outputs (oar_executor_donate,
 * _discard_output, _update_in_place): a train step that updates its
 * parameters in place trains as eager SGD does and plans less memory, and
 * so does AdamW's (oar_graph_append_adamw, moments and step count in
 * place too) against oar_adamw_new; an
 * output that cannot be made in place is copied in at the end; strided
 * and aliased inputs; every bad call fails with a message. */
#include "graph_test_util.h"
#include "alloc_fail_loop.h"

#include <string.h>

/* The MLP's train step: loss, grad:* and next:* of its 4 parameters. */
static oar_graph *train_step(oar_module *m, double lr) {
    oar_graph_input_spec specs[2] = {{.name = "x", .dtype = OAR_F32, .ndim = 2, .shape = {8, 8}},
                                     {.name = "t", .dtype = OAR_F32, .ndim = 2, .shape = {8, 4}}};
    oar_graph *g = oar_trace(module_mse_loss, m, 2, specs, 1, &(oar_trace_options){.module = m, .params_as_inputs = true});
    int wrt[4] = {2, 3, 4, 5};
    CHECK(g && oar_graph_append_backward(g, 0, 4, wrt) == 1 && oar_graph_append_sgd(g, lr) == 4);
    CHECK(oar_graph_optimize(g, OAR_PASSES_TRAINING, 0) == 0);
    return g;
}

/* Five steps with the parameters updated in place against five eager SGD
 * steps of the same module; `compile` runs generated kernels. */
static void train_in_place(bool compile) {
    const double lr = 0.1;
    oar_module *m = make_mlp();
    oar_graph *g = train_step(m, lr);
    oar_tensor *params[4], *gp[4], *in[6], *out[9];
    CHECK(oar_module_parameters(m, params, 4) == 4);
    for (int k = 0; k < 4; k++) gp[k] = oar_clone(params[k]); /* outside any pool: ours */
    oar_pool *p = oar_pool_push();
    oar_tensor *x = oar_randn(OAR_F32, 2, (int64_t[]){8, 8}), *t = oar_randn(OAR_F32, 2, (int64_t[]){8, 4});
    in[0] = x;
    in[1] = t;
    for (int k = 0; k < 4; k++) in[2 + k] = gp[k];
    /* the same program without donation, for its planned size */
    oar_executor *plain = oar_executor_new(g);
    CHECK(oar_executor_run(plain, (oar_tensor *[]){x, t, oar_clone(gp[0]), oar_clone(gp[1]), oar_clone(gp[2]),
                                                   oar_clone(gp[3])}, out) == 0);
    int64_t plain_bytes = oar_executor_planned_bytes(plain);
    oar_executor_free(plain);
    oar_executor *ex = oar_executor_new(g);
    if (compile) CHECK(oar_executor_compile(ex) == 0);
    CHECK(oar_executor_update_in_place(ex) == 4);
    double worst = 0;
    for (int step = 0; step < 5; step++) {
        CHECK(oar_executor_run(ex, in, out) == 0);
        double graph_loss = oar_tensor_item(out[0]);
        for (int k = 0; k < 4; k++) {
            CHECK(out[1 + k] == NULL);   /* grad:* discarded */
            CHECK(out[5 + k] == gp[k]);  /* next:* is the parameter itself */
            CHECK(oar_executor_donated_in_place(ex, 5 + k) == 1);
        }
        oar_module_zero_grad(m);
        oar_tensor *loss = NULL;
        module_mse_loss(m, (oar_tensor *[]){x, t}, &loss);
        CHECK(oar_backward(loss, NULL) == 0);
        oar_no_grad_push();
        for (int k = 0; k < 4; k++) oar_add_scaled_(params[k], oar_tensor_grad(params[k]), -lr);
        oar_no_grad_pop();
        worst = fmax(worst, fabs(oar_tensor_item(loss) - graph_loss));
        for (int k = 0; k < 4; k++) worst = fmax(worst, max_diff(gp[k], params[k]));
    }
    CHECK_NEAR(worst, 0, 1e-5);
    /* the gradients die at their updates and no next:* needs a slot */
    CHECK(oar_executor_planned_bytes(ex) < plain_bytes);
    oar_executor_free(ex);
    oar_pool_pop(p);
    for (int k = 0; k < 4; k++) oar_tensor_release(gp[k]);
    oar_graph_free(g);
    oar_module_free(m);
}

static int f_exp(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    out[0] = oar_exp(in[0]);
    return out[0] ? 0 : -1;
}

/* AdamW (oar_graph_append_adamw) updated in place: parameters, both
 * moments and the step count, five steps against oar_adamw_new. */
static void adamw_in_place(bool compile) {
    const double lr = 0.01, wd = 0.05;
    oar_module *m = make_mlp();
    oar_graph_input_spec specs[2] = {{.name = "x", .dtype = OAR_F32, .ndim = 2, .shape = {8, 8}},
                                     {.name = "t", .dtype = OAR_F32, .ndim = 2, .shape = {8, 4}}};
    oar_graph *g = oar_trace(module_mse_loss, m, 2, specs, 1, &(oar_trace_options){.module = m, .params_as_inputs = true});
    CHECK(g && oar_graph_append_backward(g, 0, 4, (int[]){2, 3, 4, 5}) == 1);
    CHECK(oar_graph_append_adamw(g, lr, 0.9, 0.999, 1e-8, wd) == 13);
    CHECK(oar_graph_num_inputs(g) == 15 && strcmp(oar_graph_input_name(g, 14), "adam_step") == 0);
    CHECK(strcmp(oar_graph_input_name(g, 6), "adam_m:0.weight") == 0);
    CHECK(oar_graph_optimize(g, OAR_PASSES_TRAINING, 0) == 0);
    oar_tensor *params[4], *in[15], *out[18];
    CHECK(oar_module_parameters(m, params, 4) == 4);
    oar_pool *p = oar_pool_push();
    in[0] = oar_randn(OAR_F32, 2, (int64_t[]){8, 8});
    in[1] = oar_randn(OAR_F32, 2, (int64_t[]){8, 4});
    for (int k = 0; k < 4; k++) {
        in[2 + k] = oar_clone(params[k]);
        in[6 + 2 * k] = oar_zeros_like(params[k]);
        in[7 + 2 * k] = oar_zeros_like(params[k]);
    }
    in[14] = oar_zeros(OAR_F64, 0, NULL);
    oar_executor *ex = oar_executor_new(g);
    if (compile) CHECK(oar_executor_compile(ex) == 0);
    CHECK(oar_executor_update_in_place(ex) == 13);
    oar_optimizer *opt = oar_adamw_new(4, params, &(oar_adam_options){.lr = lr, .weight_decay = wd});
    double worst = 0;
    for (int step = 0; step < 5; step++) {
        CHECK(oar_executor_run(ex, in, out) == 0);
        double graph_loss = oar_tensor_item(out[0]);
        for (int j = 5; j < 18; j++) CHECK(oar_executor_donated_in_place(ex, j) == 1);
        oar_optim_zero_grad(opt);
        oar_tensor *loss = NULL;
        module_mse_loss(m, in, &loss);
        CHECK(oar_backward(loss, NULL) == 0 && oar_optim_step(opt) == 0);
        worst = fmax(worst, fabs(oar_tensor_item(loss) - graph_loss));
        for (int k = 0; k < 4; k++) worst = fmax(worst, max_diff(in[2 + k], params[k]));
    }
    CHECK(oar_tensor_item(in[14]) == 5);
    CHECK_NEAR(worst, 0, 1e-6);
    oar_optim_free(opt);
    oar_executor_free(ex);
    oar_pool_pop(p);
    oar_graph_free(g);
    oar_module_free(m);
}

static void test_adamw_in_place(void) {
    adamw_in_place(false);
    adamw_in_place(true);
    /* bad hyper-parameters, and a graph without gradients */
    oar_graph_input_spec s = {.name = "x", .dtype = OAR_F32, .ndim = 1, .shape = {3}};
    oar_graph *g = oar_trace(f_exp, NULL, 1, &s, 1, NULL);
    CHECK_STATUS_FAILS(oar_graph_append_adamw(g, 0, 0.9, 0.999, 1e-8, 0), "invalid lr");
    CHECK_STATUS_FAILS(oar_graph_append_adamw(g, 1e-3, 1, 0.999, 1e-8, 0), "betas");
    CHECK_STATUS_FAILS(oar_graph_append_adamw(NULL, 1e-3, 0.9, 0.999, 1e-8, 0), "graph is NULL");
    CHECK(oar_graph_append_adamw(g, 1e-3, 0.9, 0.999, 1e-8, 0) == 0);
    CHECK(oar_graph_num_inputs(g) == 1);
    oar_graph_free(g);
}

static void test_train_in_place(void) { train_in_place(false); }
static void test_train_in_place_compiled(void) { train_in_place(true); }

/* y = x @ w donated to w: a matmul reads w everywhere, so it is made in
 * the arena and copied into w at the end. */
static int f_matmul(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    out[0] = oar_matmul(in[0], in[1]);
    return out[0] ? 0 : -1;
}

/* (x + 1, x * 2): x is read after the add, so x + 1 cannot go into x
 * before that read. */
static int f_read_after(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    out[0] = oar_add_scalar(in[0], 1);
    out[1] = oar_mul_scalar(in[0], 2);
    return out[0] && out[1] ? 0 : -1;
}

/* (a + b, b * 3): a + b can go into a. */
static int f_two(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    out[0] = oar_mul_scalar(in[1], 3);
    out[1] = oar_add(in[0], in[1]);
    return out[0] && out[1] ? 0 : -1;
}

static oar_graph *trace_n(oar_trace_fn fn, int n_in, int n_out) {
    oar_graph_input_spec s[2] = {{.name = "a", .dtype = OAR_F32, .ndim = 2, .shape = {3, 3}},
                                 {.name = "b", .dtype = OAR_F32, .ndim = 2, .shape = {3, 3}}};
    return oar_trace(fn, NULL, n_in, s, n_out, NULL);
}

static void test_copied_when_not_safe(void) {
    oar_pool *p = oar_pool_push();
    oar_graph *g = trace_n(f_matmul, 2, 1);
    oar_executor *ex = oar_executor_new(g);
    CHECK(oar_executor_donate(ex, 1, 0) == 0);
    oar_tensor *a = oar_randn(OAR_F32, 2, (int64_t[]){3, 3}), *w = oar_randn(OAR_F32, 2, (int64_t[]){3, 3});
    oar_tensor *want = oar_matmul(a, w), *out = NULL;
    CHECK(oar_executor_run(ex, (oar_tensor *[]){a, w}, &out) == 0);
    CHECK(out == w && oar_executor_donated_in_place(ex, 0) == 0);
    CHECK_NEAR(max_diff(w, want), 0, 1e-6);
    oar_executor_free(ex);
    oar_graph_free(g);

    g = trace_n(f_read_after, 1, 2);
    ex = oar_executor_new(g);
    CHECK(oar_executor_donate(ex, 0, 0) == 0);
    oar_tensor *x = oar_randn(OAR_F32, 2, (int64_t[]){3, 3}), *x0 = oar_clone(x), *o[2];
    CHECK(oar_executor_run(ex, &x, o) == 0);
    CHECK(o[0] == x);
    CHECK_NEAR(max_diff(x, oar_add_scalar(x0, 1)), 0, 1e-6);
    CHECK_NEAR(max_diff(o[1], oar_mul_scalar(x0, 2)), 0, 1e-6);
    oar_executor_free(ex);
    oar_graph_free(g);
    oar_pool_pop(p);
}

static void test_strided_and_aliased_inputs(void) {
    oar_pool *p = oar_pool_push();
    oar_graph *g = trace_n(f_two, 2, 2);
    oar_executor *ex = oar_executor_new(g);
    CHECK(oar_executor_donate(ex, 0, 1) == 0);
    oar_tensor *a = oar_randn(OAR_F32, 2, (int64_t[]){3, 3}), *b = oar_randn(OAR_F32, 2, (int64_t[]){3, 3});
    oar_tensor *a0 = oar_clone(a), *o[2];
    CHECK(oar_executor_run(ex, (oar_tensor *[]){a, b}, o) == 0);
    CHECK(oar_executor_donated_in_place(ex, 1) == 1 && o[1] == a);
    CHECK_NEAR(max_diff(a, oar_add(a0, b)), 0, 1e-6);
    /* a strided donated input: computed in a contiguous copy, written back */
    oar_tensor *base = oar_randn(OAR_F32, 2, (int64_t[]){3, 3}), *at = oar_transpose(base, 0, 1);
    oar_tensor *at0 = oar_clone(at);
    CHECK(oar_executor_run(ex, (oar_tensor *[]){at, b}, o) == 0);
    CHECK(o[1] == at);
    CHECK_NEAR(max_diff(at, oar_add(at0, b)), 0, 1e-6);
    /* the same tensor as both inputs: b must still read the old values */
    oar_tensor *s = oar_randn(OAR_F32, 2, (int64_t[]){3, 3}), *s0 = oar_clone(s);
    CHECK(oar_executor_run(ex, (oar_tensor *[]){s, s}, o) == 0);
    CHECK_NEAR(max_diff(o[0], oar_mul_scalar(s0, 3)), 0, 1e-6);
    CHECK_NEAR(max_diff(s, oar_add(s0, s0)), 0, 1e-6);
    oar_executor_free(ex);
    oar_graph_free(g);
    oar_pool_pop(p);
}

static void test_discard(void) {
    oar_pool *p = oar_pool_push();
    oar_graph *g = trace_n(f_two, 2, 2);
    oar_executor *ex = oar_executor_new(g);
    oar_tensor *a = oar_randn(OAR_F32, 2, (int64_t[]){3, 3}), *b = oar_randn(OAR_F32, 2, (int64_t[]){3, 3}), *o[2];
    CHECK(oar_executor_run(ex, (oar_tensor *[]){a, b}, o) == 0);
    int64_t both = oar_executor_planned_bytes(ex);
    CHECK(oar_executor_discard_output(ex, 0) == 0);
    CHECK(oar_executor_discard_output(ex, 0) == 0); /* twice: no change */
    CHECK(oar_executor_run(ex, (oar_tensor *[]){a, b}, o) == 0);
    CHECK(o[0] == NULL && o[1] != NULL);
    CHECK_NEAR(max_diff(o[1], oar_add(a, b)), 0, 1e-6);
    CHECK(oar_executor_planned_bytes(ex) < both);
    oar_executor_free(ex);
    oar_graph_free(g);
    oar_pool_pop(p);
}

static void test_bad_calls(void) {
    oar_pool *p = oar_pool_push();
    oar_graph *g = trace_n(f_two, 2, 2);
    oar_executor *ex = oar_executor_new(g);
    CHECK(oar_executor_donate(NULL, 0, 0) == OAR_ERR_INVALID);
    CHECK(oar_executor_discard_output(NULL, 0) == OAR_ERR_INVALID);
    CHECK(oar_executor_update_in_place(NULL) == OAR_ERR_INVALID);
    CHECK(oar_executor_donated_in_place(NULL, 0) == OAR_ERR_INVALID);
    CHECK(oar_executor_donate(ex, 2, 0) == OAR_ERR_INVALID && strstr(oar_last_error(), "out of range"));
    CHECK(oar_executor_donate(ex, 0, -1) == OAR_ERR_INVALID);
    CHECK(oar_executor_discard_output(ex, 2) == OAR_ERR_INVALID && strstr(oar_last_error(), "out of range"));
    CHECK(oar_executor_donated_in_place(ex, 0) == OAR_ERR_INVALID && strstr(oar_last_error(), "not donated"));
    CHECK(oar_executor_update_in_place(ex) == 0); /* no next:* outputs */
    CHECK(oar_executor_donate(ex, 0, 1) == 0);
    CHECK(oar_executor_donated_in_place(ex, 1) == OAR_ERR_STATE && strstr(oar_last_error(), "no run"));
    CHECK(oar_executor_donate(ex, 0, 1) == OAR_ERR_INVALID && strstr(oar_last_error(), "already donated"));
    CHECK(oar_executor_donate(ex, 0, 0) == OAR_ERR_INVALID && strstr(oar_last_error(), "already receives"));
    CHECK(oar_executor_discard_output(ex, 1) == OAR_ERR_INVALID && strstr(oar_last_error(), "is donated"));
    CHECK(oar_executor_discard_output(ex, 0) == 0);
    CHECK(oar_executor_donate(ex, 1, 0) == OAR_ERR_INVALID && strstr(oar_last_error(), "already discarded"));
    oar_executor_free(ex);
    oar_graph_free(g);
    /* dtype or shape that differ are refused, naming both */
    oar_graph_input_spec s[2] = {{.name = "a", .dtype = OAR_F32, .ndim = 2, .shape = {3, 3}},
                                 {.name = "b", .dtype = OAR_F32, .ndim = 2, .shape = {3, 4}}};
    g = oar_trace(f_matmul, NULL, 2, s, 1, NULL);
    ex = oar_executor_new(g);
    CHECK(oar_executor_donate(ex, 1, 0) == 0);             /* [3, 4] into b [3, 4] */
    oar_executor_free(ex);
    ex = oar_executor_new(g);
    CHECK(oar_executor_donate(ex, 0, 0) == OAR_ERR_INVALID && strstr(oar_last_error(), "float32 [3, 4]") &&
          strstr(oar_last_error(), "float32 [3, 3]"));
    oar_executor_free(ex);
    oar_graph_free(g);
    oar_pool_pop(p);
}

/* A tiny AdamW train step traced, planned and run with its parameters
 * updated in place, under every failing allocation in turn. */
static oar_module *oom_m;
static oar_tensor *oom_x, *oom_t;

static int adamw_step(void) {
    oar_graph_input_spec specs[2] = {{.name = "x", .dtype = OAR_F32, .ndim = 2, .shape = {2, 3}},
                                     {.name = "t", .dtype = OAR_F32, .ndim = 2, .shape = {2, 2}}};
    oar_graph *g = oar_trace(module_mse_loss, oom_m, 2, specs, 1,
                             &(oar_trace_options){.module = oom_m, .params_as_inputs = true});
    oar_executor *ex = NULL;
    oar_pool *p = oar_pool_push();
    int st = g ? 0 : -1;
    if (!st) st = oar_graph_append_backward(g, 0, 2, (int[]){2, 3}) < 0;
    if (!st) st = oar_graph_append_adamw(g, 0.01, 0.9, 0.999, 1e-8, 0.01) < 0;
    if (!st) st = oar_graph_optimize(g, OAR_PASSES_TRAINING, 0);
    if (!st && !(ex = oar_executor_new(g))) st = -1;
    if (!st) st = oar_executor_update_in_place(ex) < 0;
    oar_tensor *in[9] = {oom_x, oom_t}, *out[16], *params[2];
    if (!st) {
        oar_module_parameters(oom_m, params, 2);
        for (int k = 0; k < 2; k++) {
            in[2 + k] = oar_clone(params[k]);
            in[4 + 2 * k] = oar_zeros_like(params[k]);
            in[5 + 2 * k] = oar_zeros_like(params[k]);
        }
        in[8] = oar_zeros(OAR_F64, 0, NULL);
        for (int k = 2; k < 9 && !st; k++) st = in[k] == NULL;
    }
    if (!st) st = oar_executor_run(ex, in, out);
    oar_pool_pop(p);
    oar_executor_free(ex);
    oar_graph_free(g);
    return st;
}

static void test_adamw_allocations_fail_cleanly(void) {
    oar_manual_seed(3);
    oom_m = oar_linear_new(3, 2, true);
    oom_x = oar_randn(OAR_F32, 2, (int64_t[]){2, 3});
    oom_t = oar_randn(OAR_F32, 2, (int64_t[]){2, 2});
    CHECK(adamw_step() == 0);
    oar_set_allocator(failing_alloc, NULL);
    int failures, n = fail_each_allocation(adamw_step, &failures);
    oar_memory_empty_cache();
    oar_set_allocator(NULL, NULL);
    printf("failed each of %d allocations of trace+backward+adamw+optimize+run\n", n);
    CHECK(failures > 100 && n < 100000);
    oar_tensor_release(oom_x);
    oar_tensor_release(oom_t);
    oar_module_free(oom_m);
}

int main(void) {
    RUN(test_train_in_place);
    RUN(test_train_in_place_compiled);
    RUN(test_adamw_in_place);
    RUN(test_copied_when_not_safe);
    RUN(test_strided_and_aliased_inputs);
    RUN(test_discard);
    RUN(test_bad_calls);
    RUN(test_adamw_allocations_fail_cleanly);
    return test_summary();
}

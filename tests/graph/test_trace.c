/* Tracing and the executor: eager and static results of an MLP and a CNN
 * built from the nn modules agree, for several batch sizes (a dynamic
 * dim); runs after the first allocate no storage; the planned arena is
 * smaller than the sum of the values; errors are reported. */
#include "graph_test_util.h"

#include "ops/op.h"

static const oar_graph_input_spec mlp_spec = {
    .name = "x", .dtype = OAR_F32, .ndim = 2, .shape = {-1, 8}, .dim_names = {"N"}};
static const oar_graph_input_spec cnn_spec = {
    .name = "x", .dtype = OAR_F32, .ndim = 4, .shape = {-1, 1, 8, 8}, .dim_names = {"N"}};

static void check_agree(oar_module *m, oar_graph *g, int ndim, int64_t *shape, int batch) {
    oar_pool *p = oar_pool_push();
    shape[0] = batch;
    oar_tensor *x = oar_randn(OAR_F32, ndim, shape);
    oar_tensor *want = oar_module_forward(m, x), *got = NULL;
    oar_executor *ex = oar_executor_new(g);
    CHECK(oar_executor_run(ex, &x, &got) == 0);
    CHECK_NEAR(max_diff(got, want), 0, 1e-5);
    /* a second run with the same shape plans nothing and allocates no storage */
    oar_memory_stats before, after;
    oar_memory_stats_get(&before);
    oar_tensor *x2 = oar_mul_scalar(x, 2);
    oar_memory_stats_get(&before);
    CHECK(oar_executor_run(ex, &x2, &got) == 0);
    oar_memory_stats_get(&after);
    /* only kernels' own scratch (conv, batch norm: from the block cache) */
    uint64_t scratch = (uint64_t)(oar_graph_count_op(g, "conv2d") + oar_graph_count_op(g, "batch_norm")) * 2;
    CHECK(after.n_allocs - before.n_allocs <= scratch);
    CHECK(after.n_system_allocs == before.n_system_allocs);
    CHECK(oar_executor_num_plans(ex) == 1);
    CHECK_NEAR(max_diff(got, oar_module_forward(m, x2)), 0, 1e-5);
    CHECK(oar_executor_planned_bytes(ex) > 0);
    CHECK(oar_executor_planned_bytes(ex) <= oar_executor_unplanned_bytes(ex));
    oar_executor_free(ex);
    oar_pool_pop(p);
}

static void test_mlp(void) {
    oar_module *m = make_mlp();
    oar_graph *g = oar_trace_module(m, &mlp_spec);
    CHECK(g != NULL);
    CHECK(oar_graph_count_op(g, "matmul") == 2);
    CHECK(oar_graph_count_op(g, "relu") == 1);
    CHECK(oar_graph_num_constants(g) == 4);
    int64_t shape[2] = {0, 8};
    check_agree(m, g, 2, shape, 3);
    check_agree(m, g, 2, shape, 17);
    check_agree(m, g, 2, shape, 1);
    /* the text dump names the dynamic dim */
    char buf[8192] = {0};
    FILE *f = fmemopen(buf, sizeof buf - 1, "w");
    CHECK(oar_graph_print(g, f) == 0);
    fclose(f);
    CHECK(strstr(buf, "x: float32[N, 8]") != NULL);
    CHECK(strstr(buf, "matmul(") != NULL);
    CHECK(strstr(buf, "0.weight") != NULL);
    int64_t s[8];
    oar_dtype dt;
    CHECK(oar_graph_output_shape(g, 0, &dt, s) == 2 && s[0] == -1 && s[1] == 4 && dt == OAR_F32);
    CHECK(strcmp(oar_graph_output_name(g, 0), "y") == 0);
    oar_graph_free(g);
    oar_module_free(m);
}

static void test_cnn(void) {
    oar_module *m = make_cnn();
    oar_graph *g = oar_trace_module(m, &cnn_spec);
    CHECK(g != NULL);
    CHECK(oar_graph_count_op(g, "conv2d") == 1);
    CHECK(oar_graph_count_op(g, "batch_norm") == 1);
    int64_t shape[4] = {0, 1, 8, 8};
    check_agree(m, g, 4, shape, 2);
    check_agree(m, g, 4, shape, 5);
    /* inference passes fold the batch norm and still agree */
    CHECK(oar_graph_optimize(g, OAR_PASSES_INFERENCE, 0) == 0);
    CHECK(oar_graph_count_op(g, "batch_norm") == 0);
    check_agree(m, g, 4, shape, 4);
    oar_graph_free(g);
    oar_module_free(m);
}

/* A function with two inputs, broadcasting, a reshape through the dynamic
 * dim, a scalar constant and two outputs. */
static int two_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    oar_tensor *a = oar_add(oar_mul(in[0], in[1]), oar_scalar(0.5));
    int64_t sh[2] = {-1, 6};
    out[0] = oar_reshape(oar_transpose(a, 1, 2), 2, sh);
    out[1] = oar_sum(a, 0, NULL, false);
    return out[0] && out[1] ? 0 : -1;
}

static void test_function(void) {
    oar_graph_input_spec specs[2] = {
        {.name = "a", .dtype = OAR_F32, .ndim = 3, .shape = {-1, 2, 3}, .dim_names = {"B"}},
        {.name = "b", .dtype = OAR_F32, .ndim = 1, .shape = {3}}};
    const char *names[2] = {"flat", "total"};
    oar_graph *g = oar_trace(two_fn, NULL, 2, specs, 2, &(oar_trace_options){.output_names = names});
    CHECK(g != NULL);
    oar_executor *ex = oar_executor_new(g);
    for (int64_t batch = 1; batch <= 4; batch += 3) {
        oar_pool *p = oar_pool_push();
        int64_t sa[3] = {batch, 2, 3}, sb[1] = {3};
        oar_tensor *in[2] = {oar_randn(OAR_F32, 3, sa), oar_randn(OAR_F32, 1, sb)}, *want[2], *got[2];
        CHECK(two_fn(NULL, in, want) == 0);
        CHECK(oar_executor_run(ex, in, got) == 0);
        CHECK_NEAR(max_diff(got[0], want[0]), 0, 1e-6);
        CHECK_NEAR(max_diff(got[1], want[1]), 0, 1e-5);
        CHECK(oar_tensor_shape(got[0])[0] == batch);
        oar_pool_pop(p);
    }
    CHECK(oar_executor_num_plans(ex) == 2);
    /* a wrong static dim is reported with both shapes */
    oar_pool *p = oar_pool_push();
    int64_t sa[3] = {2, 2, 4}, sb[1] = {3};
    oar_tensor *bad[2] = {oar_zeros(OAR_F32, 3, sa), oar_zeros(OAR_F32, 1, sb)}, *o[2];
    CHECK_STATUS_FAILS(oar_executor_run(ex, bad, o), "[2, 2, 4]");
    bad[0] = oar_zeros(OAR_F64, 3, (int64_t[]){2, 2, 3});
    CHECK_STATUS_FAILS(oar_executor_run(ex, bad, o), "float64");
    oar_pool_pop(p);
    oar_executor_free(ex);
    oar_graph_free(g);
}

/* Means and variances over a dynamic dim divide by its size at run time. */
static int stats_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    oar_tensor *x = in[0];
    oar_tensor *m = oar_mean(x, 2, (int64_t[]){0, 2}, false);                 /* [3] */
    oar_tensor *v = oar_var(x, 1, (int64_t[]){0}, 1.0, false);                /* [3, 2] */
    oar_tensor *s = oar_std(x, 2, (int64_t[]){1, 2}, 0.0, true);              /* [B, 1, 1] */
    out[0] = oar_add(oar_sum(v, 1, (int64_t[]){1}, false), m);
    out[1] = oar_add(s, oar_mean(x, 0, NULL, false));
    return out[0] && out[1] ? 0 : -1;
}

/* size_of itself: the count of some dims, in a float dtype; bad
 * attributes are refused (a malformed model.json could carry them) */
static void test_size_of(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *x = oar_zeros(OAR_I32, 3, (int64_t[]){4, 3, 5});
    oari_attrs a = {.ni = 2, .i = {5, OAR_F64}}; /* dims 0 and 2 */
    oar_tensor *n = oari_call1(OARI_OP_size_of, x, &a);
    CHECK(n && oar_tensor_ndim(n) == 0 && oar_tensor_dtype(n) == OAR_F64 && oar_tensor_item(n) == 20);
    a.i[1] = OAR_I64;
    CHECK_FAILS(oari_call1(OARI_OP_size_of, x, &a), "float dtype");
    a.i[1] = 99;
    CHECK_FAILS(oari_call1(OARI_OP_size_of, x, &a), "float dtype");
    a = (oari_attrs){.ni = 2, .i = {8, OAR_F32}};
    CHECK_FAILS(oari_call1(OARI_OP_size_of, x, &a), "beyond rank 3");
    a = (oari_attrs){.ni = 1, .i = {1}};
    CHECK_FAILS(oari_call1(OARI_OP_size_of, x, &a), "float dtype");
    oar_pool_pop(p);
}

/* logsumexp traces (its max is detached only in eager mode) */
static int lse_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    out[0] = oar_logsumexp(in[0], 1, (int64_t[]){1}, false);
    out[1] = oar_logsumexp(in[0], 2, (int64_t[]){0, 2}, true);
    return out[0] && out[1] ? 0 : -1;
}

static void test_logsumexp(void) {
    oar_graph_input_spec spec = {.name = "x", .dtype = OAR_F64, .ndim = 3, .shape = {-1, 3, 2}, .dim_names = {"B"}};
    oar_graph *g = oar_trace(lse_fn, NULL, 1, &spec, 2, NULL);
    CHECK(g != NULL && oar_graph_append_backward(g, 0, 1, (int[]){0}) == 2);
    oar_executor *ex = oar_executor_new(g);
    for (int64_t b = 2; b <= 5; b += 3) {
        oar_pool *p = oar_pool_push();
        oar_tensor *x = oar_mul_scalar(oar_randn(OAR_F64, 3, (int64_t[]){b, 3, 2}), 30), *want[2], *got[3], *gx;
        oar_tensor_set_requires_grad(x, true);
        CHECK(lse_fn(NULL, &x, want) == 0);
        CHECK(oar_grad(1, want, (oar_tensor *[]){oar_ones_like(want[0])}, 1, &x, false, false, &gx) == 0);
        CHECK(oar_executor_run(ex, &x, got) == 0);
        CHECK_NEAR(max_diff(got[0], want[0]), 0, 1e-12);
        CHECK_NEAR(max_diff(got[1], want[1]), 0, 1e-12);
        CHECK_NEAR(max_diff(got[2], gx), 0, 1e-12);
        oar_pool_pop(p);
    }
    oar_executor_free(ex);
    oar_graph_free(g);
}

static void test_dynamic_means(void) {
    oar_graph_input_spec spec = {.name = "x", .dtype = OAR_F64, .ndim = 3, .shape = {-1, 3, 2}, .dim_names = {"B"}};
    oar_graph *g = oar_trace(stats_fn, NULL, 1, &spec, 2, NULL);
    CHECK(g != NULL);
    CHECK(oar_graph_count_op(g, "size_of") >= 2); /* the std over fixed dims needs none */
    oar_executor *ex = oar_executor_new(g);
    for (int64_t b = 1; b <= 5; b += 2) { /* b = 1: var's count - 1 is 0, as eager (inf/nan alike) */
        oar_pool *p = oar_pool_push();
        oar_tensor *x = oar_randn(OAR_F64, 3, (int64_t[]){b, 3, 2}), *want[2], *got[2];
        CHECK(stats_fn(NULL, &x, want) == 0);
        CHECK(oar_executor_run(ex, &x, got) == 0);
        if (b > 1) CHECK_NEAR(max_diff(got[0], want[0]), 0, 1e-12);
        CHECK_NEAR(max_diff(got[1], want[1]), 0, 1e-12);
        oar_pool_pop(p);
    }
    oar_executor_free(ex);
    oar_graph_free(g);
}

static int drop_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    out[0] = oar_dropout(in[0], 0.5, true);
    return out[0] ? 0 : -1;
}

/* Plans are cached per input shape; random ops draw new values each run. */
static void test_plans_and_random(void) {
    oar_graph_input_spec s = {.name = "x", .dtype = OAR_F32, .ndim = 2, .shape = {-1, 64}};
    oar_graph *g = oar_trace(drop_fn, NULL, 1, &s, 1, NULL);
    CHECK(g && oar_graph_count_op(g, "bernoulli") == 1);
    oar_executor *ex = oar_executor_new(g);
    oar_pool *p = oar_pool_push();
    oar_tensor *a = oar_ones(OAR_F32, 2, (int64_t[]){3, 64}), *b = oar_ones(OAR_F32, 2, (int64_t[]){5, 64});
    oar_tensor *y, *first = NULL;
    for (int r = 0; r < 6; r++) {
        CHECK(oar_executor_run(ex, r % 2 ? &b : &a, &y) == 0);
        if (r == 0) first = oar_clone(y);
        /* dropout of ones: every element is 0 or 2 */
        double s0 = oar_tensor_item(oar_sum(oar_mul(y, oar_sub_scalar(y, 2)), 0, NULL, false));
        CHECK(s0 == 0);
    }
    CHECK(oar_executor_num_plans(ex) == 2); /* 3 and 5 rows, each planned once */
    CHECK(oar_executor_run(ex, &a, &y) == 0);
    CHECK(max_diff(y, first) > 0); /* a new mask */
    oar_pool_pop(p);
    oar_executor_free(ex);
    oar_graph_free(g);
}

static int chain_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    out[0] = oar_tanh(oar_cos(oar_sin(oar_exp(in[0]))));
    return out[0] ? 0 : -1;
}

/* The planner reuses buffers: an elementwise chain writes over its own
 * dying input, so it needs one buffer, not five; the input itself is read
 * in place (no slot), also when it is strided (copied once per plan). */
static void test_memory_plan(void) {
    oar_graph_input_spec s = {.name = "x", .dtype = OAR_F32, .ndim = 2, .shape = {-1, 1000}};
    oar_graph *g = oar_trace(chain_fn, NULL, 1, &s, 1, NULL);
    oar_executor *ex = oar_executor_new(g);
    oar_pool *p = oar_pool_push();
    oar_tensor *x = oar_randn(OAR_F32, 2, (int64_t[]){4, 1000}), *y, *want;
    CHECK(oar_executor_run(ex, &x, &y) == 0);
    chain_fn(NULL, &x, &want);
    CHECK_NEAR(max_diff(y, want), 0, 1e-6);
    CHECK(oar_executor_unplanned_bytes(ex) == 5 * 16000);
    CHECK(oar_executor_planned_bytes(ex) == 16000);
    oar_tensor *xt = oar_transpose(oar_contiguous(oar_transpose(x, 0, 1)), 0, 1); /* x's values, strided */
    CHECK(!oar_tensor_is_contiguous(xt));
    CHECK(oar_executor_run(ex, &xt, &y) == 0);
    CHECK_NEAR(max_diff(y, want), 0, 1e-6);
    CHECK(oar_executor_run(ex, &x, &y) == 0); /* back to in place */
    CHECK_NEAR(max_diff(y, want), 0, 1e-6);
    oar_pool_pop(p);
    oar_executor_free(ex);
    oar_graph_free(g);
}

static int transpose_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    out[0] = oar_exp(oar_transpose(in[0], 0, 1));
    return out[0] ? 0 : -1;
}

/* An output fed back as the next run's input lives in the arena that run
 * writes: it is copied first, not read in place (here the output buffer
 * would be overwritten while read transposed). */
static void test_output_fed_back(void) {
    oar_graph_input_spec s = {.name = "x", .dtype = OAR_F32, .ndim = 2, .shape = {64, 64}};
    oar_graph *g = oar_trace(transpose_fn, NULL, 1, &s, 1, NULL);
    oar_executor *ex = oar_executor_new(g);
    oar_pool *p = oar_pool_push();
    oar_tensor *x = oar_mul_scalar(oar_randn(OAR_F32, 2, (int64_t[]){64, 64}), 0.1), *y, *want, *want2;
    transpose_fn(NULL, &x, &want);
    transpose_fn(NULL, &want, &want2);
    CHECK(oar_executor_run(ex, &x, &y) == 0);
    CHECK_NEAR(max_diff(y, want), 0, 1e-6);
    CHECK(oar_executor_run(ex, &y, &y) == 0);
    CHECK_NEAR(max_diff(y, want2), 0, 1e-5);
    oar_pool_pop(p);
    oar_executor_free(ex);
    oar_graph_free(g);
}

static int bad_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    out[0] = oar_matmul(in[0], in[0]); /* [N, 3] @ [N, 3]: shape error */
    return out[0] ? 0 : -1;
}

static int nested_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    out[0] = in[0];
    oar_graph *g = oar_trace(bad_fn, NULL, 1, ctx, 1, NULL);
    return g ? 0 : -1;
}

static int inplace_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    oar_tensor *c = oar_zeros(OAR_F32, 1, (int64_t[]){3});
    out[0] = in[0];
    (void)ctx;
    return oar_copy_(c, in[0]);
}

static void test_errors(void) {
    oar_graph_input_spec s = {.dtype = OAR_F32, .ndim = 2, .shape = {-1, 3}};
    CHECK_FAILS(oar_trace(bad_fn, NULL, 1, &s, 1, NULL), "matmul");
    CHECK_FAILS(oar_trace(nested_fn, &s, 1, &s, 1, NULL), "already tracing");
    oar_graph_input_spec s3 = {.dtype = OAR_F32, .ndim = 1, .shape = {3}};
    CHECK_FAILS(oar_trace(inplace_fn, NULL, 1, &s3, 1, NULL), "in place");
    CHECK_FAILS(oar_trace(NULL, NULL, 1, &s, 1, NULL), "trace");
    oar_graph_input_spec bad = {.dtype = OAR_F32, .ndim = 1, .shape = {-2}};
    CHECK_FAILS(oar_trace(bad_fn, NULL, 1, &bad, 1, NULL), "dynamic");
    /* a training-mode batch norm updates running stats in place: refused */
    oar_module *m = make_cnn();
    oar_module_train(m, true);
    CHECK_FAILS(oar_trace_module(m, &cnn_spec), "eval mode");
    oar_module_free(m);
    CHECK_FAILS(oar_executor_new(NULL), "NULL");
}

int main(void) {
    RUN(test_mlp);
    RUN(test_cnn);
    RUN(test_function);
    RUN(test_dynamic_means);
    RUN(test_size_of);
    RUN(test_logsumexp);
    RUN(test_plans_and_random);
    RUN(test_memory_plan);
    RUN(test_output_fed_back);
    RUN(test_errors);
    return test_summary();
}

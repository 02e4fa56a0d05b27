/* The "amp" graph pass (src/graph/passes/amp.c): the casts autocast
 * inserts, put into a graph traced without autocast. The executor's
 * result equals eager autocast's; tracing inside a scope records the same
 * casts; a traced training step runs in mixed precision with f32 gradients. */
#include "../test.h"
#include "graph_test_util.h"

typedef struct net {
    oar_tensor *w1, *b1, *w2; /* f32 */
} net;

/* softmax(relu(x W1 + b1) W2), summed per row: low, promote, f32 ops */
static oar_tensor *forward(const net *n, oar_tensor *x) {
    oar_tensor *h = oar_relu(oar_add(oar_matmul(x, n->w1), n->b1));
    oar_tensor *z = oar_matmul(h, n->w2);
    return oar_add(oar_softmax(z, -1), oar_mul_scalar(z, 0.5));
}

static int fwd_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    *out = forward(ctx, in[0]);
    return *out ? 0 : -1;
}

static int fwd_fn_autocast(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    if (oar_autocast_push(OAR_BF16)) return -1;
    *out = forward(ctx, in[0]);
    oar_autocast_pop();
    return *out ? 0 : -1;
}

/* loss(x, w1, b1, w2) = mean(forward^2), the weights as graph inputs */
static int loss_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    net n = {in[1], in[2], in[3]};
    *out = oar_mean(oar_square(forward(&n, in[0])), 0, NULL, false);
    return *out ? 0 : -1;
}

static net make_net(void) {
    oar_manual_seed(3);
    net n = {oar_randn(OAR_F32, 2, (int64_t[]){5, 16}), oar_randn(OAR_F32, 1, (int64_t[]){16}),
             oar_randn(OAR_F32, 2, (int64_t[]){16, 3})};
    return n;
}

static oar_graph *trace_fwd(oar_trace_fn fn, net *n) {
    oar_graph_input_spec s = {.name = "x", .dtype = OAR_F32, .ndim = 2, .shape = {-1, 5}, .dim_names = {"N"}};
    return oar_trace(fn, n, 1, &s, 1, NULL);
}

static oar_tensor *run1(oar_graph *g, oar_tensor *x) {
    oar_executor *ex = oar_executor_new(g);
    oar_tensor *y = NULL;
    int st = ex ? oar_executor_run(ex, &x, &y) : -1;
    if (!st) y = oar_clone(y); /* outputs are the executor's */
    oar_executor_free(ex);
    return st ? NULL : y;
}

static void test_forward(void) {
    oar_pool *p = oar_pool_push();
    net n = make_net();
    oar_tensor *x = oar_randn(OAR_F32, 2, (int64_t[]){7, 5});
    CHECK(oar_autocast_push(OAR_BF16) == 0);
    oar_tensor *want = forward(&n, x);
    CHECK(oar_autocast_pop() == 0);
    oar_tensor *f32 = forward(&n, x);
    CHECK(max_diff(want, f32) > 0); /* autocast changes the numbers */

    oar_graph *g = trace_fwd(fwd_fn, &n);
    CHECK(g && oar_graph_count_op(g, "cast") == 0);
    int changes = oar_graph_run_pass(g, "amp");
    CHECK(changes > 0);
    CHECK(oar_graph_verify(g) == 0);
    CHECK(oar_graph_count_op(g, "cast") >= 4); /* x and W1, h and W2 to bf16; products back up */
    oar_dtype dt;
    int64_t shape[8];
    CHECK(oar_graph_output_shape(g, 0, &dt, shape) == 2 && dt == OAR_F32); /* outputs keep their dtypes */
    oar_tensor *got = run1(g, x);
    CHECK(got && oar_tensor_dtype(got) == OAR_F32);
    CHECK(max_diff(got, want) == 0); /* the same casts, the same kernels */
    CHECK(oar_graph_run_pass(g, "amp") == 0); /* idempotent */
    /* another batch size through the dynamic dim */
    oar_tensor *x3 = oar_randn(OAR_F32, 2, (int64_t[]){3, 5});
    CHECK(oar_autocast_push(OAR_BF16) == 0);
    oar_tensor *want3 = forward(&n, x3);
    CHECK(oar_autocast_pop() == 0);
    CHECK(max_diff(run1(g, x3), want3) == 0);
    oar_graph_free(g);

    /* traced inside a scope: the casts are recorded */
    g = trace_fwd(fwd_fn_autocast, &n);
    CHECK(g && oar_graph_count_op(g, "cast") >= 4);
    CHECK(max_diff(run1(g, x), want) == 0);
    CHECK(oar_graph_run_pass(g, "amp") == 0); /* nothing left to do */
    oar_graph_free(g);

    /* f16, and the pass-list flag */
    g = trace_fwd(fwd_fn, &n);
    CHECK(oar_graph_optimize(g, OAR_PASSES_INFERENCE, OAR_PASS_AMP_F16) == 0);
    CHECK(oar_autocast_push(OAR_F16) == 0);
    oar_tensor *want16 = forward(&n, x);
    CHECK(oar_autocast_pop() == 0);
    CHECK(max_diff(run1(g, x), want16) < 1e-6);
    oar_graph_free(g);
    CHECK_STATUS_FAILS(oar_graph_run_pass(NULL, "amp"), "graph or name is NULL");
    oar_graph *e = trace_fwd(fwd_fn, &n);
    CHECK_STATUS_FAILS(oar_graph_run_pass(e, "amp_f8"), "amp, amp_f16");
    oar_graph_free(e);
    oar_pool_pop(p);
}

/* A training step's graph (forward and backward): with the pass its loss
 * equals eager autocast's; gradients come out f32, within bf16 error of
 * eager autocast's (the pass retypes gradient nodes by the lists too). */
static void test_training_step(void) {
    oar_pool *p = oar_pool_push();
    net n = make_net();
    oar_tensor *x = oar_randn(OAR_F32, 2, (int64_t[]){6, 5});
    oar_graph_input_spec s[4] = {
        {.name = "x", .dtype = OAR_F32, .ndim = 2, .shape = {6, 5}},
        {.name = "w1", .dtype = OAR_F32, .ndim = 2, .shape = {5, 16}},
        {.name = "b1", .dtype = OAR_F32, .ndim = 1, .shape = {16}},
        {.name = "w2", .dtype = OAR_F32, .ndim = 2, .shape = {16, 3}},
    };
    oar_graph *g = oar_trace(loss_fn, NULL, 4, s, 1, NULL);
    CHECK(g && oar_graph_append_backward(g, 0, 3, (int[]){1, 2, 3}) >= 0);
    CHECK(oar_graph_run_pass(g, "amp") > 0 && oar_graph_verify(g) == 0);
    oar_executor *ex = oar_executor_new(g);
    oar_tensor *in[4] = {x, n.w1, n.b1, n.w2}, *out[4] = {0};
    CHECK(ex && oar_executor_run(ex, in, out) == 0);
    for (int j = 0; j < 4; j++) out[j] = oar_clone(out[j]); /* outputs are the executor's */
    oar_executor_free(ex);
    /* eager autocast */
    oar_tensor *ws[3] = {oar_clone(n.w1), oar_clone(n.b1), oar_clone(n.w2)}, *gr[3], *g32[3];
    for (int k = 0; k < 3; k++) oar_tensor_set_requires_grad(ws[k], true);
    CHECK(oar_autocast_push(OAR_BF16) == 0);
    oar_tensor *loss;
    CHECK(loss_fn(NULL, (oar_tensor *[]){x, ws[0], ws[1], ws[2]}, &loss) == 0);
    CHECK(oar_autocast_pop() == 0);
    CHECK(oar_grad(1, &loss, NULL, 3, ws, false, false, gr) == 0);
    oar_tensor *l32;
    CHECK(loss_fn(NULL, (oar_tensor *[]){x, ws[0], ws[1], ws[2]}, &l32) == 0);
    CHECK(oar_grad(1, &l32, NULL, 3, ws, false, false, g32) == 0);
    CHECK(out[0] && max_diff(out[0], loss) == 0);
    for (int k = 0; k < 3; k++) {
        CHECK(out[1 + k] && oar_tensor_dtype(out[1 + k]) == OAR_F32);
        double scale = 1;
        double *v = test_values(g32[k]);
        for (int64_t i = 0; i < oar_tensor_numel(g32[k]); i++) scale = fmax(scale, fabs(v[i]));
        free(v);
        double d = max_diff(out[1 + k], gr[k]) / scale;
        if (!(d < 3e-2)) fprintf(stderr, "grad %d: relative difference %g\n", k, d);
        CHECK(d < 3e-2);
    }
    oar_graph_free(g);
    oar_pool_pop(p);
}

int main(void) {
    RUN(test_forward);
    RUN(test_training_step);
    return test_summary();
}

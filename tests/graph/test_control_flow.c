/* Value-dependent control flow: oar_cond and oar_while_loop run eagerly on
 * real values (both branches, trip counts set by the inputs), gradients
 * flow through the branch taken and through loop iterations (closed
 * forms), and bad input fails with a message naming the problem; a traced
 * predicate records a graph node instead of being baked into the graph. */
#include "graph_test_util.h"

static oar_tensor *vec(int n, const float *v) { return oar_tensor_from_data(v, OAR_F32, 1, (int64_t[]){n}); }

static int square_fn(void *ctx, int n_in, oar_tensor *const *in, int n_out, oar_tensor **out) {
    (void)ctx, (void)n_in, (void)n_out;
    out[0] = oar_mul(in[0], in[0]);
    out[1] = oar_add_scalar(in[1], 1);
    return out[0] && out[1] ? 0 : -1;
}

static int neg_fn(void *ctx, int n_in, oar_tensor *const *in, int n_out, oar_tensor **out) {
    (void)ctx, (void)n_in, (void)n_out;
    out[0] = oar_neg(in[0]);
    out[1] = oar_add_scalar(in[1], -1);
    return out[0] && out[1] ? 0 : -1;
}

static int null_fn(void *ctx, int n_in, oar_tensor *const *in, int n_out, oar_tensor **out) {
    (void)ctx, (void)n_in, (void)in, (void)n_out;
    out[0] = NULL;
    return 0;
}

/* y = sum(x) > 0 ? x * x : -x, both branches and the gradient of each */
static void test_cond(void) {
    oar_pool *p = oar_pool_push();
    for (int sign = 1; sign >= -1; sign -= 2) {
        float v[3] = {1.f * (float)sign, 2.f * (float)sign, 3.f * (float)sign};
        oar_tensor *x = vec(3, v), *k = oar_scalar(10);
        oar_tensor_set_requires_grad(x, true);
        oar_tensor *pred = oar_gt(oar_sum(x, 0, NULL, false), oar_scalar(0));
        oar_tensor *in[2] = {x, k}, *out[2];
        CHECK(oar_cond(pred, square_fn, neg_fn, NULL, 2, in, 2, out) == 0);
        double want[3], dwant[3];
        for (int i = 0; i < 3; i++) {
            want[i] = sign > 0 ? (double)v[i] * v[i] : -(double)v[i];
            dwant[i] = sign > 0 ? 2.0 * v[i] : -1;
        }
        CHECK_VALUES(out[0], want, 3, 1e-6);
        CHECK_NEAR(oar_tensor_item(out[1]), sign > 0 ? 11 : 9, 0);
        oar_tensor *g = NULL;
        oar_tensor *s = oar_sum(out[0], 0, NULL, false);
        CHECK(oar_grad_ex(1, &s, NULL, 1, &x, 0, &g) == 0);
        CHECK_VALUES(g, dwant, 3, 1e-6);
    }
    oar_pool_pop(p);
}

/* (x, i): while sum(x) < limit: x = 2 x, i += 1 */
static int below_fn(void *ctx, int n_in, oar_tensor *const *in, int n_out, oar_tensor **out) {
    (void)n_in, (void)n_out;
    out[0] = oar_lt(oar_sum(in[0], 0, NULL, false), oar_scalar(*(double *)ctx));
    return out[0] ? 0 : -1;
}

static int double_fn(void *ctx, int n_in, oar_tensor *const *in, int n_out, oar_tensor **out) {
    (void)ctx, (void)n_in, (void)n_out;
    out[0] = oar_mul_scalar(in[0], 2);
    out[1] = oar_add_scalar(in[1], 1);
    return out[0] && out[1] ? 0 : -1;
}

static void test_while(void) {
    oar_pool *p = oar_pool_push();
    double limit = 100;
    /* trip counts set by the input values: sum 6 needs 5 doublings to
     * reach 100, sum 36 needs 2, sum 1200 none */
    const float starts[3] = {1, 6, 200};
    const int trips[3] = {5, 2, 0};
    for (int c = 0; c < 3; c++) {
        float v[3] = {starts[c], starts[c], starts[c] * 4};
        oar_tensor *x = vec(3, v), *i0 = oar_scalar(0);
        oar_tensor *init[2] = {x, i0}, *out[2];
        oar_tensor_set_requires_grad(x, true);
        CHECK(oar_while_loop(below_fn, double_fn, &limit, 2, init, -1, out) == 0);
        /* closed form: smallest k with 6 * start * 2^k >= limit */
        int k = 0;
        while (6.0 * starts[c] * (double)(1 << k) < limit) k++;
        CHECK(k == trips[c]);
        CHECK_NEAR(oar_tensor_item(out[1]), k, 0);
        double want[3], dwant[3];
        for (int i = 0; i < 3; i++) want[i] = (double)v[i] * (1 << k), dwant[i] = 1 << k;
        CHECK_VALUES(out[0], want, 3, 1e-4);
        oar_tensor *g = NULL, *s = oar_sum(out[0], 0, NULL, false);
        CHECK(oar_grad_ex(1, &s, NULL, 1, &x, 0, &g) == 0);
        CHECK_VALUES(g, dwant, 3, 1e-6);
    }
    /* a bound on the trip count */
    oar_tensor *init[2] = {oar_scalar(1), oar_scalar(0)}, *out[2];
    CHECK_STATUS_FAILS(oar_while_loop(below_fn, double_fn, &limit, 2, init, 3, out), "max_iters = 3");
    CHECK(out[0] == NULL && out[1] == NULL);
    CHECK(oar_while_loop(below_fn, double_fn, &limit, 2, init, 7, out) == 0);
    CHECK_NEAR(oar_tensor_item(out[0]), 128, 0);
    oar_pool_pop(p);
}

/* the body grows x by one element, or turns it into f64 */
static int grow_fn(void *ctx, int n_in, oar_tensor *const *in, int n_out, oar_tensor **out) {
    (void)ctx, (void)n_in, (void)n_out;
    out[0] = oar_concat(2, (oar_tensor *[]){in[0], in[0]}, 0);
    out[1] = oar_add_scalar(in[1], 1);
    return 0;
}

static int widen_fn(void *ctx, int n_in, oar_tensor *const *in, int n_out, oar_tensor **out) {
    (void)ctx, (void)n_in, (void)n_out;
    out[0] = oar_mul_scalar(in[0], 2);
    out[1] = oar_cast(in[1], OAR_F64);
    return 0;
}

static int failing_fn(void *ctx, int n_in, oar_tensor *const *in, int n_out, oar_tensor **out) {
    (void)ctx, (void)n_in, (void)in, (void)n_out, (void)out;
    return OAR_ERR_INVALID;
}

static int traced_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    oar_tensor *pred = oar_gt(oar_sum(in[0], 0, NULL, false), oar_scalar(0));
    oar_tensor *args[2] = {in[0], oar_scalar(1)}, *o[2];
    int st = ctx ? oar_while_loop(below_fn, double_fn, &(double){100}, 2, args, -1, o)
                 : oar_cond(pred, square_fn, neg_fn, NULL, 2, args, 2, o);
    out[0] = st ? NULL : o[0];
    return st;
}

static void test_errors(void) {
    oar_pool *p = oar_pool_push();
    double limit = 100;
    oar_tensor *x = vec(3, (float[]){1, 2, 3}), *one = oar_scalar(1);
    oar_tensor *in[2] = {x, one}, *out[2];
    CHECK_STATUS_FAILS(oar_cond(one, NULL, neg_fn, NULL, 2, in, 2, out), "then_fn or else_fn is NULL");
    CHECK_STATUS_FAILS(oar_cond(one, square_fn, neg_fn, NULL, 2, in, 0, out), "outputs");
    CHECK_STATUS_FAILS(oar_cond(NULL, square_fn, neg_fn, NULL, 2, in, 2, out), "predicate is NULL");
    CHECK_STATUS_FAILS(oar_cond(x, square_fn, neg_fn, NULL, 2, in, 2, out), "one element, got shape [3]");
    CHECK_STATUS_FAILS(oar_cond(one, null_fn, neg_fn, NULL, 2, in, 2, out), "then branch left output 0 NULL");
    CHECK(out[0] == NULL && out[1] == NULL);
    CHECK_STATUS_FAILS(oar_cond(oar_scalar(0), square_fn, failing_fn, NULL, 2, in, 2, out), "else branch failed");
    CHECK_STATUS_FAILS(oar_while_loop(NULL, double_fn, &limit, 2, in, -1, out), "cond_fn or body_fn is NULL");
    CHECK_STATUS_FAILS(oar_while_loop(below_fn, NULL, &limit, 2, in, -1, out), "cond_fn or body_fn is NULL");
    CHECK_STATUS_FAILS(oar_while_loop(below_fn, double_fn, &limit, 0, in, -1, out), "loop variables");
    CHECK_STATUS_FAILS(oar_while_loop(below_fn, double_fn, &limit, 2, (oar_tensor *[]){x, NULL}, -1, out),
                       "initial value 1 is NULL");
    CHECK_STATUS_FAILS(oar_while_loop(below_fn, grow_fn, &limit, 2, in, -1, out),
                       "iteration 0 changes loop variable 0 from float32 [3] to float32 [6]");
    CHECK_STATUS_FAILS(oar_while_loop(below_fn, widen_fn, &limit, 2, in, -1, out),
                       "changes loop variable 1 from int64 [] to float64 []");
    CHECK(out[0] == NULL && out[1] == NULL);
    CHECK_STATUS_FAILS(oar_while_loop(below_fn, failing_fn, &limit, 2, in, -1, out), "body_fn failed");
    CHECK_STATUS_FAILS(oar_while_loop(failing_fn, double_fn, &limit, 2, in, -1, out), "cond_fn failed");
    /* tracing: a traced predicate or loop variable records a cond / while
     * node (never a baked-in branch); tests/graph/test_control_graph.c runs them */
    oar_graph_input_spec s = {.name = "x", .dtype = OAR_F32, .ndim = 1, .shape = {3}};
    oar_graph *g = oar_trace(traced_fn, NULL, 1, &s, 1, NULL);
    CHECK(g && oar_graph_count_op(g, "cond") == 1 && oar_graph_count_op(g, "while") == 0);
    oar_graph_free(g);
    g = oar_trace(traced_fn, &limit, 1, &s, 1, NULL);
    CHECK(g && oar_graph_count_op(g, "while") == 1 && oar_graph_count_op(g, "cond") == 0);
    oar_graph_free(g);
    oar_pool_pop(p);
}

int main(void) {
    RUN(test_cond);
    RUN(test_while);
    RUN(test_errors);
    return test_summary();
}

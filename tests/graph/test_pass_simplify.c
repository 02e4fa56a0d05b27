/* Algebraic simplification: x*1, x+0, x-0, x/1, a double transpose, a
 * reshape of a reshape, the transpose of a matmul, ReLU's mask through max
 * pooling, and a gradient split in pieces joined by one concat. */
#include "pass_test_util.h"

#include "graph/ir.h"

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

static oar_tensor *W; /* [5, 3] */

/* relu((x @ W)^T): becomes relu(W^T @ x^T) */
static int matmul_t_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    out[0] = oar_relu(oar_transpose(oar_matmul(oar_exp(in[0]), W), 0, 1));
    return out[0] ? 0 : -1;
}

/* the product is used twice: left alone */
static int matmul_twice_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    oar_tensor *p = oar_matmul(in[0], W);
    out[0] = oar_add(oar_sum(oar_transpose(p, 0, 1), 0, NULL, false), oar_sum(p, 1, (int64_t[]){1}, false));
    return out[0] ? 0 : -1;
}

static void test_transpose_of_matmul(void) {
    W = oar_tensor_retain(oar_randn(OAR_F32, 2, (int64_t[]){5, 3}));
    oar_graph *g = trace1(matmul_t_fn, NULL);
    CHECK(oar_graph_run_pass(g, "simplify") > 0);
    CHECK(oar_graph_optimize(g, OAR_PASSES_TRAINING, 0) == 0);
    CHECK(oar_graph_count_op(g, "matmul") == 1);
    /* the matmul's operands are the transposes; its output is no view */
    int64_t shape[8];
    oar_dtype dt;
    CHECK(oar_graph_output_shape(g, 0, &dt, shape) == 2 && shape[0] == 3 && shape[1] == -1);
    CHECK_NEAR(graph_vs_eager(g, matmul_t_fn, NULL), 0, 1e-5);
    oar_graph_free(g);

    g = trace1(matmul_twice_fn, NULL);
    int permutes = oar_graph_count_op(g, "permute");
    CHECK(oar_graph_optimize(g, OAR_PASSES_TRAINING, 0) == 0);
    CHECK(oar_graph_count_op(g, "permute") == permutes);
    CHECK_NEAR(graph_vs_eager(g, matmul_twice_fn, NULL), 0, 1e-5);
    oar_graph_free(g);
    oar_tensor_release(W);
}

static int64_t K, S, P; /* the pool's kernel, stride, padding */

/* sum(w * max_pool(relu(x))) over [2, 3, 6, 6]: its gradient's ReLU mask
 * is sign(relu(x)) after the pool's backward, which simplify moves
 * through the pool (sign of the pooled values before it) */
static int pool_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    oar_tensor *p = oar_max_pool2d(oar_relu(in[0]), (int64_t[]){K, K}, (int64_t[]){S, S}, (int64_t[]){P, P},
                                   (int64_t[]){1, 1}, false, NULL);
    out[0] = oar_sum(oar_mul(p, oar_sin(p)), 0, NULL, false);
    return out[0] ? 0 : -1;
}

static void mask_through_pool(int64_t k, int64_t s, int64_t pad) {
    K = k, S = s, P = pad;
    oar_graph_input_spec spec = {.name = "x", .dtype = OAR_F64, .ndim = 4, .shape = {2, 3, 6, 6}};
    oar_graph *g = oar_trace(pool_fn, NULL, 1, &spec, 1, NULL);
    CHECK(g && oar_graph_append_backward(g, 0, 1, (int[]){0}) == 1);
    CHECK(oar_graph_run_pass(g, "simplify") > 0);
    CHECK(oar_graph_optimize(g, OAR_PASSES_TRAINING, 0) == 0);
    /* the sign now reads the pooled values, not the pool's input */
    const oari_gnode *sg = NULL;
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].op == OARI_OP_sign) sg = &g->nodes[i];
    CHECK(sg && oar_graph_count_op(g, "sign") == 1);
    if (sg) CHECK(g->nodes[g->values[sg->in[0]].producer].op == OARI_OP_max_pool2d);
    /* the gradient is eager autograd's (ties at 0 included: relu makes many) */
    oar_pool *pl = oar_pool_push();
    oar_tensor *x = oar_randn(OAR_F64, 4, (int64_t[]){2, 3, 6, 6}), *out[2], *y = NULL, *gx = NULL;
    oar_tensor_set_requires_grad(x, true);
    oar_executor *ex = oar_executor_new(g);
    CHECK(oar_executor_run(ex, &x, out) == 0);
    CHECK(pool_fn(NULL, &x, &y) == 0);
    CHECK(oar_grad(1, &y, NULL, 1, &x, false, false, &gx) == 0);
    CHECK_NEAR(max_diff(out[1], gx), 0, 1e-12);
    oar_executor_free(ex);
    oar_pool_pop(pl);
    oar_graph_free(g);
}

static void test_mask_through_max_pool(void) {
    mask_through_pool(2, 2, 0);
    mask_through_pool(3, 1, 1); /* overlapping windows: an element picked by several */
}

/* A [N, 3, 12] input split in pieces along its last dim, each piece used
 * by its own op: the backward pads each piece's gradient to the whole
 * (slice_backward) and sums them, which simplify turns into one concat.
 * WHICH selects the pieces: 0 all three chunks, 1 the first and the last
 * (not adjacent: left as it is), 2 four uneven slices. */
static int WHICH;
static int split_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    oar_tensor *x = oar_mul(in[0], in[0]), *c[3], *y;
    if (WHICH == 2) {
        oar_tensor *a = oar_slice(x, 2, 0, 5, 1), *b = oar_slice(x, 2, 5, 6, 1), *d = oar_slice(x, 2, 6, 9, 1),
                   *e = oar_slice(x, 2, 9, 12, 1);
        y = oar_add(oar_add(oar_sum(oar_sin(a), 1, (int64_t[]){2}, true), oar_exp(b)),
                    oar_add(oar_sum(oar_mul(d, e), 1, (int64_t[]){-1}, true), oar_scalar(1)));
    } else {
        if (oar_chunk(x, 3, -1, 3, c) != 3) return -1;
        oar_tensor *t = oar_add(oar_sin(c[0]), oar_cos(c[2]));
        y = WHICH == 1 ? t : oar_mul(t, c[1]);
    }
    out[0] = oar_sum(y, 0, NULL, false);
    return out[0] ? 0 : -1;
}

static void join_slice_grads(int which, int concats, int slice_backwards) {
    WHICH = which;
    oar_graph_input_spec spec = {.name = "x", .dtype = OAR_F64, .ndim = 3, .shape = {-1, 3, 12},
                                 .dim_names = {"N"}};
    oar_graph *g = oar_trace(split_fn, NULL, 1, &spec, 1, NULL);
    CHECK(g && oar_graph_append_backward(g, 0, 1, (int[]){0}) == 1);
    CHECK(oar_graph_optimize(g, OAR_PASSES_TRAINING, 0) == 0);
    CHECK(oar_graph_count_op(g, "concat") == concats);
    CHECK(oar_graph_count_op(g, "slice_backward") == slice_backwards);
    oar_pool *pl = oar_pool_push();
    oar_executor *ex = oar_executor_new(g);
    for (int64_t n = 2; n <= 5; n += 3) { /* the batch is symbolic: two sizes, one graph */
        oar_tensor *x = oar_randn(OAR_F64, 3, (int64_t[]){n, 3, 12}), *out[2], *y = NULL, *gx = NULL;
        oar_tensor_set_requires_grad(x, true);
        CHECK(oar_executor_run(ex, &x, out) == 0);
        CHECK(split_fn(NULL, &x, &y) == 0);
        CHECK(oar_grad(1, &y, NULL, 1, &x, false, false, &gx) == 0);
        CHECK_NEAR(max_diff(out[0], y), 0, 1e-12);
        CHECK_NEAR(max_diff(out[1], gx), 0, 1e-12);
    }
    oar_executor_free(ex);
    oar_pool_pop(pl);
    oar_graph_free(g);
}

static void test_join_slice_grads(void) {
    join_slice_grads(0, 1, 0); /* q, k, v: one concat, no padding left */
    join_slice_grads(1, 0, 2); /* a gap between the pieces: two paddings summed */
    join_slice_grads(2, 1, 0); /* four uneven pieces */
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
    RUN(test_transpose_of_matmul);
    RUN(test_mask_through_max_pool);
    RUN(test_join_slice_grads);
    return test_summary();
}

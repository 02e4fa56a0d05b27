/* Unbatched inputs of conv1d, conv2d and conv_transpose2d ([C, ...] as
 * PyTorch takes them): the result equals the batch-of-one result without
 * its batch dim, gradients equal too, central differences agree (first and
 * second order), and bad ranks are refused with the accepted shapes. */
#include "gradcheck.h"

/* Compares y with the batch-of-one result yb (shape [1, ...y's shape]). */
static bool same_as_batched(oar_tensor *y, oar_tensor *yb) {
    if (!y || !yb || oar_tensor_ndim(yb) != oar_tensor_ndim(y) + 1 || oar_tensor_shape(yb)[0] != 1)
        return false;
    for (int d = 0; d < oar_tensor_ndim(y); d++)
        if (oar_tensor_shape(y)[d] != oar_tensor_shape(yb)[d + 1]) return false;
    int64_t n = oar_tensor_numel(y);
    double *a = malloc((size_t)n * sizeof *a), *b = malloc((size_t)n * sizeof *b);
    bool ok = oar_tensor_to_host(oar_cast(y, OAR_F64), a, (size_t)n * sizeof *a) == 0 &&
              oar_tensor_to_host(oar_cast(yb, OAR_F64), b, (size_t)n * sizeof *b) == 0;
    for (int64_t i = 0; i < n && ok; i++) ok = a[i] == b[i];
    free(a), free(b);
    return ok;
}

static const int64_t s2[2] = {2, 1}, p2[2] = {1, 0}, d2[2] = {1, 2}, op2[2] = {1, 0};

static oar_tensor *conv2d_fn(void *ctx, int n, oar_tensor *const *x) {
    (void)ctx, (void)n;
    return oar_conv2d(x[0], x[1], x[2], s2, p2, d2, 1);
}
static oar_tensor *conv1d_fn(void *ctx, int n, oar_tensor *const *x) {
    (void)ctx, (void)n;
    return oar_conv1d(x[0], x[1], x[2], 2, 1, 1, 1);
}
static oar_tensor *conv_t_fn(void *ctx, int n, oar_tensor *const *x) {
    (void)ctx, (void)n;
    return oar_conv_transpose2d(x[0], x[1], x[2], s2, p2, op2, (const int64_t[2]){1, 1}, 1);
}

static void test_values_and_grads(void) {
    oar_pool *p = oar_pool_push();
    oar_manual_seed(3);
    struct {
        gc_fn fn;
        int xd;
        int64_t xs[3], ws[4], bs;
    } cases[3] = {
        {conv2d_fn, 3, {3, 7, 6}, {4, 3, 3, 2}, 4},
        {conv1d_fn, 2, {3, 9}, {5, 3, 3}, 5},
        {conv_t_fn, 3, {3, 4, 5}, {3, 2, 3, 3}, 2},
    };
    for (int c = 0; c < 3; c++) {
        int wd = c == 1 ? 3 : 4;
        oar_tensor *x = oar_randn(OAR_F64, cases[c].xd, cases[c].xs);
        oar_tensor *w = oar_randn(OAR_F64, wd, cases[c].ws);
        oar_tensor *b = oar_randn(OAR_F64, 1, &cases[c].bs);
        oar_tensor_set_requires_grad(x, true);
        oar_tensor_set_requires_grad(w, true);
        oar_tensor *y = cases[c].fn(NULL, 3, (oar_tensor *[]){x, w, b});
        oar_tensor *yb = cases[c].fn(NULL, 3, (oar_tensor *[]){oar_unsqueeze(x, 0), w, b});
        CHECK(y && oar_tensor_ndim(y) == cases[c].xd);
        CHECK(same_as_batched(y, yb));
        /* the same loss through both paths: equal gradients */
        oar_tensor *g[2], *gb[2];
        CHECK(oar_grad(1, (oar_tensor *[]){oar_sum(oar_mul(y, y), 0, NULL, false)}, NULL, 2,
                       (oar_tensor *[]){x, w}, false, false, g) == 0);
        CHECK(oar_grad(1, (oar_tensor *[]){oar_sum(oar_mul(yb, yb), 0, NULL, false)}, NULL, 2,
                       (oar_tensor *[]){x, w}, false, false, gb) == 0);
        CHECK(g[0] && oar_tensor_ndim(g[0]) == cases[c].xd);
        CHECK(same_as_batched(g[1], oar_unsqueeze(gb[1], 0)));
        CHECK(same_as_batched(g[0], oar_unsqueeze(gb[0], 0)));
        /* and central differences, first and second order */
        gc_input ins[3] = {{.ndim = cases[c].xd}, {.ndim = wd}, {.ndim = 1, .shape = {cases[c].bs}}};
        memcpy(ins[0].shape, cases[c].xs, sizeof cases[c].xs);
        memcpy(ins[1].shape, cases[c].ws, sizeof cases[c].ws);
        CHECK(gradcheck(c == 0 ? "conv2d unbatched" : c == 1 ? "conv1d unbatched" : "conv_transpose2d unbatched",
                        cases[c].fn, NULL, 3, ins, NULL));
    }
    oar_pool_pop(p);
}

static void test_bad_ranks(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *w4 = oar_ones(OAR_F32, 4, (int64_t[]){2, 3, 3, 3});
    CHECK_FAILS(oar_conv2d(oar_ones(OAR_F32, 2, (int64_t[]){3, 5}), w4, NULL, s2, p2, d2, 1),
                "expected a 4-D input [N, C, H, W] or 3-D [C, H, W], got [3, 5]");
    CHECK_FAILS(oar_conv2d(oar_ones(OAR_F32, 5, (int64_t[]){1, 1, 3, 5, 5}), w4, NULL, s2, p2, d2, 1),
                "or 3-D [C, H, W]");
    /* unbatched with the wrong channel count: the batched op's message */
    CHECK_FAILS(oar_conv2d(oar_ones(OAR_F32, 3, (int64_t[]){2, 5, 5}), w4, NULL, s2, p2, d2, 1),
                "conv2d");
    CHECK_FAILS(oar_conv1d(oar_ones(OAR_F32, 1, (int64_t[]){5}), oar_ones(OAR_F32, 3, (int64_t[]){2, 1, 3}),
                           NULL, 1, 0, 1, 1),
                "expected a 3-D input [N, C, L] or 2-D [C, L], got [5]");
    CHECK_FAILS(oar_conv_transpose2d(oar_ones(OAR_F32, 2, (int64_t[]){3, 5}), w4, NULL, s2, p2, op2, d2, 1),
                "or 3-D [C, H, W], got [3, 5]");
    CHECK_FAILS(oar_conv2d(oar_ones(OAR_F32, 3, (int64_t[]){3, 5, 5}), NULL, NULL, s2, p2, d2, 1), "weight is NULL");
    CHECK_FAILS(oar_conv2d(NULL, w4, NULL, s2, p2, d2, 1), "NULL");
    oar_pool_pop(p);
}

int main(void) {
    RUN(test_values_and_grads);
    RUN(test_bad_ranks);
    return test_summary();
}

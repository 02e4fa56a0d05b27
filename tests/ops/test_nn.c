/* nn ops: softmax and log_softmax (any dim, large values, non-contiguous,
 * dtypes), the losses with every reduction and option, dropout, embedding
 * and scaled dot-product attention against PyTorch values
 * (tests/ref/gen_linalg_nn.py), and bad input. */
#include "test.h"

#include "ref/linalg_nn_ref.h"

#define N_(a) ((int64_t)(sizeof(a) / sizeof((a)[0])))
#define SHAPE(...) ((const int64_t[]){__VA_ARGS__})

static oar_tensor *mk(const double *v, oar_dtype dt, int ndim, const int64_t *shape) {
    return oar_cast(oar_tensor_from_data(v, OAR_F64, ndim, shape), dt);
}

static void test_softmax(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *x = mk(sm_x, OAR_F64, 2, SHAPE(3, 4));
    CHECK_VALUES(oar_softmax(x, 1), sm_d1, 12, 1e-14);
    CHECK_VALUES(oar_softmax(x, -1), sm_d1, 12, 1e-14);
    CHECK_VALUES(oar_softmax(x, 0), sm_d0, 12, 1e-14);
    CHECK_VALUES(oar_log_softmax(x, 1), lsm_d1, 12, 1e-14);
    CHECK_VALUES(oar_log_softmax(x, -2), lsm_d0, 12, 1e-14);
    oar_tensor *xf = oar_cast(x, OAR_F32);
    oar_tensor *sf = oar_softmax(xf, 1);
    CHECK(sf && oar_tensor_dtype(sf) == OAR_F32);
    CHECK_VALUES(sf, sm_d1, 12, 1e-6);
    CHECK_VALUES(oar_log_softmax(xf, 0), lsm_d0, 12, 1e-6);
    /* non-contiguous: softmax over dim 0 of x^T is softmax(x, 1)^T */
    oar_tensor *xt = oar_transpose(x, 0, 1);
    CHECK_VALUES(oar_transpose(oar_softmax(xt, 0), 0, 1), sm_d1, 12, 1e-14);
    CHECK_VALUES(oar_transpose(oar_log_softmax(oar_cast(xt, OAR_F32), 1), 0, 1), lsm_d0, 12, 1e-6);
    /* 3-D, a middle and the last dim */
    oar_tensor *x3 = mk(sm_x3, OAR_F64, 3, SHAPE(2, 3, 4));
    CHECK_VALUES(oar_softmax(x3, 1), sm3_d1, 24, 1e-14);
    CHECK_VALUES(oar_log_softmax(x3, 2), lsm3_d2, 24, 1e-14);
    /* f16 and bf16 through f32; integers promote to f32 */
    oar_tensor *h = oar_softmax(oar_cast(x3, OAR_F16), 1);
    CHECK(h && oar_tensor_dtype(h) == OAR_F16);
    CHECK_VALUES(h, sm3_d1, 24, 2e-3);
    CHECK_VALUES(oar_log_softmax(oar_cast(x3, OAR_BF16), 2), lsm3_d2, 24, 3e-2);
    oar_tensor *si = oar_softmax(oar_tensor_from_data((int64_t[]){0, 0}, OAR_I64, 1, SHAPE(2)), 0);
    CHECK(si && oar_tensor_dtype(si) == OAR_F32);
    CHECK_VALUES(si, ((double[]){0.5, 0.5}), 2, 0);
    /* 0-d, empty, a long row split over threads */
    CHECK_VALUES(oar_softmax(oar_scalar_of(3, OAR_F64), 0), ((double[]){1}), 1, 0);
    CHECK_VALUES(oar_log_softmax(oar_scalar_of(3, OAR_F64), -1), ((double[]){0}), 1, 0);
    oar_tensor *e = oar_softmax(oar_ones(OAR_F32, 2, SHAPE(0, 3)), 1);
    CHECK(e && oar_tensor_numel(e) == 0);
    oar_tensor *big = oar_softmax(oar_zeros(OAR_F32, 2, SHAPE(300, 500)), 1);
    double *v = test_values(big);
    int ok = v != NULL;
    for (int i = 0; ok && i < 300 * 500; i++) ok = fabs(v[i] - 1.0 / 500) < 1e-8;
    CHECK(ok);
    free(v);
    /* a middle dim over several column blocks matches the strided row path exactly */
    oar_manual_seed(9);
    oar_tensor *xm = oar_mul_scalar(oar_randn(OAR_F32, 3, SHAPE(2, 5, 130)), 10);
    oar_tensor *ym = oar_softmax(xm, 1);
    oar_tensor *ym_rows = oar_transpose(oar_softmax(oar_transpose(xm, 1, 2), 2), 1, 2);
    CHECK(ym && ym_rows &&
          oar_tensor_item(oar_amax(oar_abs(oar_sub(ym, ym_rows)), 0, NULL, false)) == 0);
    oar_tensor *lm = oar_log_softmax(oar_cast(xm, OAR_F64), 1);
    oar_tensor *lm_rows =
        oar_transpose(oar_log_softmax(oar_transpose(oar_cast(xm, OAR_F64), 1, 2), 2), 1, 2);
    CHECK(lm && lm_rows &&
          oar_tensor_item(oar_amax(oar_abs(oar_sub(lm, lm_rows)), 0, NULL, false)) == 0);
    CHECK_NEAR(oar_tensor_item(oar_sum(ym, 0, NULL, false)), 2 * 130, 1e-3);
    /* rows of all -inf give NaN, as in PyTorch */
    oar_tensor *ninf = oar_softmax(oar_full(OAR_F32, 1, SHAPE(2), -INFINITY), 0);
    CHECK_VALUES(ninf, ((double[]){NAN, NAN}), 2, 0);
    /* bad input */
    CHECK_FAILS(oar_softmax(x, 2), "out of range");
    CHECK_FAILS(oar_log_softmax(x, -3), "out of range");
    CHECK_FAILS(oar_softmax(oar_cast(x, OAR_C64), 0), "complex");
    CHECK_FAILS(oar_softmax(oar_ones(OAR_BOOL, 1, SHAPE(2)), 0), "bool");
    CHECK_FAILS(oar_softmax(NULL, 0), "NULL");
    oar_pool_pop(p);
}

/* ---- gradients against central differences (float64) ------------------------ */

typedef oar_tensor *(*grad_fn)(oar_tensor *const *xs, void *ctx);

/* The largest |analytic - numeric| gradient of sum(f(xs) * R) over every
 * element of every input (xs: contiguous f64 leaves), or INFINITY when the
 * gradient or the double-backward graph cannot be built. */
static double grad_error(grad_fn f, void *ctx, int n, oar_tensor *const *xs) {
    oar_pool *pool = oar_pool_push();
    double err = INFINITY;
    oar_tensor *y = f(xs, ctx);
    oar_tensor *r = y ? oar_randn(OAR_F64, oar_tensor_ndim(y), oar_tensor_shape(y)) : NULL;
    oar_tensor *grads[4] = {0};
    for (int i = 0; i < n; i++) oar_tensor_set_requires_grad(xs[i], true);
    oar_tensor *loss = r ? oar_sum(oar_mul(f(xs, ctx), r), 0, NULL, false) : NULL;
    if (loss && !oar_grad(1, &loss, NULL, n, xs, true, false, grads)) {
        /* second order: the gradients are differentiable again */
        oar_tensor *l2 = oar_sum(oar_mul(grads[0], grads[0]), 0, NULL, false), *g2[4];
        if (!oar_grad(1, &l2, NULL, n, xs, false, true, g2)) err = 0;
    }
    for (int i = 0; i < n && err == 0; i++) {
        int64_t m = oar_tensor_numel(xs[i]);
        double *d = oar_tensor_data(xs[i]), *g = test_values(grads[i]);
        for (int64_t j = 0; j < m && g; j++) {
            double keep = d[j], h = 1e-6, lp, lm;
            oar_no_grad_push();
            d[j] = keep + h;
            lp = oar_tensor_item(oar_sum(oar_mul(f(xs, ctx), r), 0, NULL, false));
            d[j] = keep - h;
            lm = oar_tensor_item(oar_sum(oar_mul(f(xs, ctx), r), 0, NULL, false));
            oar_no_grad_pop();
            d[j] = keep;
            double e = fabs((lp - lm) / (2 * h) - g[j]);
            if (!(e <= err)) err = e;
        }
        if (!g) err = INFINITY;
        free(g);
    }
    for (int i = 0; i < n; i++) oar_tensor_set_requires_grad(xs[i], false);
    oar_pool_pop(pool);
    return err;
}

static oar_tensor *f_softmax(oar_tensor *const *xs, void *ctx) {
    return oar_softmax(xs[0], *(const int *)ctx);
}

static oar_tensor *f_log_softmax(oar_tensor *const *xs, void *ctx) {
    return oar_log_softmax(xs[0], *(const int *)ctx);
}

static oar_tensor *f_cross_entropy(oar_tensor *const *xs, void *ctx) {
    (void)ctx;
    oar_tensor *t = oar_tensor_from_data((int64_t[]){1, -100, 4, 0}, OAR_I64, 1, SHAPE(4));
    return oar_cross_entropy(xs[0], t, xs[1], -100, 0.1, OAR_REDUCTION_MEAN);
}

static oar_tensor *f_attention(oar_tensor *const *xs, void *ctx) {
    (void)ctx;
    return oar_scaled_dot_product_attention(xs[0], xs[1], xs[2], NULL, 0, true, 0);
}

static void test_gradients(void) {
    oar_pool *p = oar_pool_push();
    oar_manual_seed(5);
    oar_tensor *x = oar_randn(OAR_F64, 3, SHAPE(2, 3, 4));
    for (int dim = 0; dim < 3; dim++) {
        CHECK(grad_error(f_softmax, &dim, 1, &x) < 1e-7);
        CHECK(grad_error(f_log_softmax, &dim, 1, &x) < 1e-7);
    }
    oar_tensor *ce[2] = {oar_randn(OAR_F64, 2, SHAPE(4, 5)), oar_rand(OAR_F64, 1, SHAPE(5))};
    CHECK(grad_error(f_cross_entropy, NULL, 2, ce) < 1e-7);
    oar_tensor *qkv[3] = {oar_randn(OAR_F64, 3, SHAPE(2, 3, 4)),
                          oar_randn(OAR_F64, 3, SHAPE(2, 3, 4)),
                          oar_randn(OAR_F64, 3, SHAPE(2, 3, 5))};
    CHECK(grad_error(f_attention, NULL, 3, qkv) < 1e-7);
    oar_pool_pop(p);
}

static const oar_reduction reds[3] = {OAR_REDUCTION_NONE, OAR_REDUCTION_MEAN, OAR_REDUCTION_SUM};

static void test_cross_entropy(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *x = mk(ce_x, OAR_F64, 2, SHAPE(4, 5)), *t = mk(ce_t, OAR_I64, 1, SHAPE(4));
    oar_tensor *w = mk(ce_w, OAR_F64, 1, SHAPE(5));
    const double *want_plain[3] = {ce_none, ce_mean, ce_sum};
    const double *want_w[3] = {ce_w_none, ce_w_mean, ce_w_sum};
    const double *want_ls[3] = {ce_ls_none, ce_ls_mean, ce_ls_sum};
    const double *want_ls_nw[3] = {ce_ls_nw_none, ce_ls_nw_mean, ce_ls_nw_sum};
    const double *want_nll[3] = {nll_w_none, nll_w_mean, nll_w_sum};
    const double *want_p[3] = {ce_p_none, ce_p_mean, ce_p_sum};
    const double *want_pw[3] = {ce_pw_ls_none, ce_pw_ls_mean, ce_pw_ls_sum};
    oar_tensor *probs = mk(ce_p, OAR_F64, 2, SHAPE(4, 5));
    for (int r = 0; r < 3; r++) {
        int64_t n = r == 0 ? 4 : 1;
        oar_tensor *l = oar_cross_entropy(x, t, NULL, -100, 0, reds[r]);
        CHECK(l && oar_tensor_ndim(l) == (r == 0 ? 1 : 0));
        CHECK_VALUES(l, want_plain[r], n, 1e-12);
        CHECK_VALUES(oar_cross_entropy(x, t, w, -100, 0, reds[r]), want_w[r], n, 1e-12);
        CHECK_VALUES(oar_cross_entropy(x, t, w, -100, 0.1, reds[r]), want_ls[r], n, 1e-12);
        CHECK_VALUES(oar_cross_entropy(x, t, NULL, -100, 0.2, reds[r]), want_ls_nw[r], n, 1e-12);
        CHECK_VALUES(oar_nll_loss(oar_log_softmax(x, 1), t, w, -100, reds[r]), want_nll[r], n,
                     1e-12);
        CHECK_VALUES(oar_cross_entropy(x, probs, NULL, -100, 0, reds[r]), want_p[r], n, 1e-12);
        CHECK_VALUES(oar_cross_entropy(x, probs, w, -100, 0.3, reds[r]), want_pw[r], n, 1e-12);
        /* f32 logits */
        CHECK_VALUES(
            oar_cross_entropy(oar_cast(x, OAR_F32), t, oar_cast(w, OAR_F32), -100, 0.1, reds[r]),
            want_ls[r], n, 1e-5);
    }
    /* another ignore_index, i32 targets, [N, C, d] logits, 1-D logits */
    CHECK_VALUES(oar_cross_entropy(x, mk(ce_t2, OAR_I64, 1, SHAPE(4)), w, 3, 0, OAR_REDUCTION_MEAN),
                 ce_ign3_mean, 1, 1e-12);
    CHECK_VALUES(oar_cross_entropy(x, oar_cast(t, OAR_I32), NULL, -100, 0, OAR_REDUCTION_SUM),
                 ce_sum, 1, 1e-12);
    oar_tensor *x3 = mk(ce3_x, OAR_F64, 3, SHAPE(2, 3, 4)),
               *t3 = mk(ce3_t, OAR_I64, 2, SHAPE(2, 4));
    CHECK_VALUES(oar_cross_entropy(x3, t3, NULL, -100, 0, OAR_REDUCTION_MEAN), ce3_mean, 1, 1e-12);
    oar_tensor *l3 = oar_cross_entropy(x3, t3, NULL, -100, 0, OAR_REDUCTION_NONE);
    CHECK(l3 && oar_tensor_ndim(l3) == 2 && oar_tensor_shape(l3)[1] == 4);
    CHECK_VALUES(l3, ce3_none, 8, 1e-12);
    CHECK_VALUES(oar_cross_entropy(oar_slice(x, 0, 0, 1, 1), oar_slice(t, 0, 0, 1, 1), NULL, -100,
                                   0, OAR_REDUCTION_MEAN),
                 ce_1d, 1, 1e-12);
    oar_tensor *x1 = oar_reshape(oar_slice(x, 0, 0, 1, 1), 1, SHAPE(5));
    CHECK_VALUES(
        oar_cross_entropy(x1, oar_scalar_of(ce_t[0], OAR_I64), NULL, -100, 0, OAR_REDUCTION_MEAN),
        ce_1d, 1, 1e-12);
    /* non-contiguous logits */
    oar_tensor *xt = oar_transpose(oar_contiguous(oar_transpose(x, 0, 1)), 0, 1);
    CHECK(xt && !oar_tensor_is_contiguous(xt));
    CHECK_VALUES(oar_cross_entropy(xt, t, w, -100, 0, OAR_REDUCTION_MEAN), ce_w_mean, 1, 1e-12);
    /* every target ignored: mean is NaN (0 / 0) as in PyTorch */
    oar_tensor *all_ign = oar_full(OAR_I64, 1, SHAPE(4), -100);
    CHECK_VALUES(oar_cross_entropy(x, all_ign, NULL, -100, 0, OAR_REDUCTION_MEAN),
                 ((double[]){NAN}), 1, 0);
    CHECK_VALUES(oar_cross_entropy(x, all_ign, NULL, -100, 0, OAR_REDUCTION_SUM), ((double[]){0}),
                 1, 0);
    /* bad input */
    CHECK_FAILS(oar_cross_entropy(x, oar_cast(t, OAR_BOOL), NULL, -100, 0, OAR_REDUCTION_MEAN),
                "bool");
    CHECK_FAILS(oar_nll_loss(x, oar_cast(t, OAR_F32), NULL, -100, OAR_REDUCTION_MEAN), "int64");
    CHECK_FAILS(
        oar_cross_entropy(x, oar_ones(OAR_I64, 1, SHAPE(3)), NULL, -100, 0, OAR_REDUCTION_MEAN),
        "does not match");
    CHECK_FAILS(
        oar_cross_entropy(x, oar_ones(OAR_F32, 2, SHAPE(4, 4)), NULL, -100, 0, OAR_REDUCTION_MEAN),
        "probability target");
    CHECK_FAILS(
        oar_cross_entropy(x, t, oar_ones(OAR_F64, 1, SHAPE(4)), -100, 0, OAR_REDUCTION_MEAN),
        "weight");
    CHECK_FAILS(oar_cross_entropy(x, t, NULL, -100, 1.5, OAR_REDUCTION_MEAN), "label_smoothing");
    CHECK_FAILS(oar_cross_entropy(x, t, NULL, -100, 0, (oar_reduction)7), "reduction");
    CHECK_FAILS(oar_cross_entropy(x, mk((double[]){1, 5, 0, 0}, OAR_I64, 1, SHAPE(4)), NULL, -100,
                                  0, OAR_REDUCTION_MEAN),
                "out of range");
    CHECK_FAILS(oar_nll_loss(oar_scalar_of(1, OAR_F32), t, NULL, -100, OAR_REDUCTION_MEAN), "0-d");
    CHECK_FAILS(oar_cross_entropy(NULL, t, NULL, -100, 0, OAR_REDUCTION_MEAN), "NULL");
    oar_pool_pop(p);
}

static void test_regression_losses(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *x = mk(rg_x, OAR_F64, 2, SHAPE(2, 3)), *t = mk(rg_t, OAR_F64, 2, SHAPE(2, 3));
    const double *mse[3] = {mse_none, mse_mean, mse_sum}, *l1[3] = {l1_none, l1_mean, l1_sum};
    const double *sl1[3] = {sl1_none, sl1_mean, sl1_sum};
    for (int r = 0; r < 3; r++) {
        int64_t n = r == 0 ? 6 : 1;
        CHECK_VALUES(oar_mse_loss(x, t, reds[r]), mse[r], n, 1e-12);
        CHECK_VALUES(oar_l1_loss(x, t, reds[r]), l1[r], n, 1e-12);
        CHECK_VALUES(oar_smooth_l1_loss(x, t, 0.5, reds[r]), sl1[r], n, 1e-12);
        CHECK_VALUES(oar_mse_loss(oar_cast(x, OAR_F32), oar_cast(t, OAR_F32), reds[r]), mse[r], n,
                     1e-5);
    }
    CHECK_VALUES(oar_smooth_l1_loss(x, t, 0, OAR_REDUCTION_NONE), sl1_b0, 6, 1e-12);
    /* non-contiguous operands: transposing both keeps the pairs */
    CHECK_VALUES(
        oar_sum(oar_mse_loss(oar_transpose(x, 0, 1), oar_transpose(t, 0, 1), OAR_REDUCTION_NONE), 0,
                NULL, false),
        mse_sum, 1, 1e-12);
    CHECK_FAILS(oar_smooth_l1_loss(x, t, -1, OAR_REDUCTION_MEAN), "beta");
    CHECK_FAILS(oar_mse_loss(x, oar_ones(OAR_F64, 1, SHAPE(4)), OAR_REDUCTION_MEAN),
                "do not broadcast");
    CHECK_FAILS(oar_l1_loss(x, NULL, OAR_REDUCTION_MEAN), "NULL");
    oar_pool_pop(p);
}

static void test_bce_with_logits(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *x = mk(bce_x, OAR_F64, 2, SHAPE(2, 3)), *t = mk(bce_t, OAR_F64, 2, SHAPE(2, 3));
    oar_tensor *w = mk(bce_w, OAR_F64, 1, SHAPE(3)), *pw = mk(bce_pw, OAR_F64, 1, SHAPE(3));
    const double *plain[3] = {bce_none, bce_mean, bce_sum},
                 *wp[3] = {bce_wp_none, bce_wp_mean, bce_wp_sum};
    for (int r = 0; r < 3; r++) {
        int64_t n = r == 0 ? 6 : 1;
        CHECK_VALUES(oar_binary_cross_entropy_with_logits(x, t, NULL, NULL, reds[r]), plain[r], n,
                     1e-12);
        CHECK_VALUES(oar_binary_cross_entropy_with_logits(x, t, w, pw, reds[r]), wp[r], n, 1e-12);
        CHECK_VALUES(oar_binary_cross_entropy_with_logits(oar_cast(x, OAR_F32),
                                                          oar_cast(t, OAR_F32), w, pw, reds[r]),
                     wp[r], n, 1e-5);
    }
    /* stability: huge logits give finite losses */
    oar_tensor *big = mk((double[]){1000, -1000}, OAR_F32, 1, SHAPE(2));
    CHECK_VALUES(oar_binary_cross_entropy_with_logits(big,
                                                      mk((double[]){0, 1}, OAR_F32, 1, SHAPE(2)),
                                                      NULL, NULL, OAR_REDUCTION_NONE),
                 ((double[]){1000, 1000}), 2, 1e-6);
    CHECK_FAILS(oar_binary_cross_entropy_with_logits(x, oar_ones(OAR_F64, 1, SHAPE(3)), NULL, NULL,
                                                     OAR_REDUCTION_MEAN),
                "must have the input's shape");
    CHECK_FAILS(oar_binary_cross_entropy_with_logits(x, oar_cast(t, OAR_I64), NULL, NULL,
                                                     OAR_REDUCTION_MEAN), "floating");
    oar_pool_pop(p);
}

static void test_dropout(void) {
    oar_pool *p = oar_pool_push();
    oar_manual_seed(3);
    oar_tensor *x = oar_full(OAR_F32, 2, SHAPE(100, 100), 3);
    oar_tensor *y = oar_dropout(x, 0.25, true);
    double *v = test_values(y);
    int zeros = 0, ok = v != NULL;
    for (int i = 0; ok && i < 10000; i++) {
        if (v[i] == 0) zeros++;
        else ok = fabs(v[i] - 4.0) < 1e-6; /* 3 / 0.75 */
    }
    CHECK(ok);
    CHECK(zeros > 2200 && zeros < 2800);
    free(v);
    /* f16: the kept values are exactly 2 */
    oar_tensor *h = oar_dropout(oar_ones(OAR_F16, 1, SHAPE(64)), 0.5, true);
    CHECK(h && oar_tensor_dtype(h) == OAR_F16);
    v = test_values(h);
    ok = v != NULL;
    for (int i = 0; ok && i < 64; i++) ok = v[i] == 0 || v[i] == 2;
    CHECK(ok);
    free(v);
    CHECK_VALUES(oar_dropout(oar_ones(OAR_F64, 1, SHAPE(3)), 1, true), ((double[]){0, 0, 0}), 3, 0);
    CHECK_VALUES(oar_dropout(oar_ones(OAR_F64, 1, SHAPE(3)), 0.5, false), ((double[]){1, 1, 1}), 3,
                 0);
    CHECK_VALUES(oar_dropout(oar_ones(OAR_F64, 1, SHAPE(3)), 0, true), ((double[]){1, 1, 1}), 3, 0);
    oar_tensor *e = oar_dropout(oar_ones(OAR_F32, 1, SHAPE(0)), 0.5, true);
    CHECK(e && oar_tensor_numel(e) == 0);
    CHECK_FAILS(oar_dropout(x, 1.5, true), "p must be in [0, 1]");
    CHECK_FAILS(oar_dropout(x, -0.1, false), "p must be in [0, 1]");
    CHECK_FAILS(oar_dropout(oar_ones(OAR_I64, 1, SHAPE(2)), 0.5, true), "floating");
    oar_pool_pop(p);
}

static void test_embedding(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *w = oar_reshape(oar_arange(0, 12, 1, OAR_F32), 2, SHAPE(4, 3));
    oar_tensor *idx = oar_tensor_from_data((int64_t[]){0, 3, 2, 2}, OAR_I64, 2, SHAPE(2, 2));
    oar_tensor *e = oar_embedding(w, idx);
    CHECK(e && oar_tensor_ndim(e) == 3 && oar_tensor_shape(e)[2] == 3 &&
          oar_tensor_dtype(e) == OAR_F32);
    CHECK_VALUES(e, ((double[]){0, 1, 2, 9, 10, 11, 6, 7, 8, 6, 7, 8}), 12, 0);
    oar_tensor *e0 = oar_embedding(w, oar_scalar_of(1, OAR_I64));
    CHECK(e0 && oar_tensor_ndim(e0) == 1);
    CHECK_VALUES(e0, ((double[]){3, 4, 5}), 3, 0);
    CHECK_VALUES(oar_embedding(w, oar_tensor_from_data((int32_t[]){1}, OAR_I32, 1, SHAPE(1))),
                 ((double[]){3, 4, 5}), 3, 0);
    CHECK_FAILS(oar_embedding(oar_ones(OAR_F32, 1, SHAPE(3)), idx), "[num, dim]");
    CHECK_FAILS(oar_embedding(w, oar_ones(OAR_F32, 1, SHAPE(3))), "int64");
    CHECK_FAILS(oar_embedding(w, oar_tensor_from_data((int64_t[]){4}, OAR_I64, 1, SHAPE(1))),
                "out of range");
    oar_pool_pop(p);
}

static void test_attention(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *q = mk(at_q, OAR_F64, 3, SHAPE(2, 3, 4)), *k = mk(at_k, OAR_F64, 3, SHAPE(2, 5, 4));
    oar_tensor *v = mk(at_v, OAR_F64, 3, SHAPE(2, 5, 6));
    oar_tensor *r = oar_scaled_dot_product_attention(q, k, v, NULL, 0, false, 0);
    CHECK(r && oar_tensor_ndim(r) == 3 && oar_tensor_shape(r)[1] == 3 &&
          oar_tensor_shape(r)[2] == 6);
    CHECK_VALUES(r, at_plain, 36, 1e-12);
    CHECK_VALUES(oar_scaled_dot_product_attention(q, k, v, NULL, 0, false, 0.3), at_scale, 36,
                 1e-12);
    oar_tensor *bm = mk(at_bm, OAR_BOOL, 2, SHAPE(3, 5)), *fm = mk(at_fm, OAR_F64, 2, SHAPE(3, 5));
    CHECK_VALUES(oar_scaled_dot_product_attention(q, k, v, bm, 0, false, 0), at_bool, 36, 1e-12);
    CHECK_VALUES(oar_scaled_dot_product_attention(q, k, v, fm, 0, false, 0), at_float, 36, 1e-12);
    oar_tensor *k3 = oar_slice(k, 1, 0, 3, 1), *v3 = oar_slice(v, 1, 0, 3, 1);
    CHECK_VALUES(oar_scaled_dot_product_attention(q, k3, v3, NULL, 0, true, 0), at_causal, 36,
                 1e-12);
    CHECK_VALUES(oar_scaled_dot_product_attention(oar_cast(q, OAR_F32), oar_cast(k3, OAR_F32),
                                                  oar_cast(v3, OAR_F32), NULL, 0, true, 0),
                 at_causal, 36, 1e-5);
    /* dropout 1 zeroes every weight */
    double zeros[36] = {0};
    CHECK_VALUES(oar_scaled_dot_product_attention(q, k, v, NULL, 1, false, 0), zeros, 36, 0);
    CHECK_FAILS(oar_scaled_dot_product_attention(q, v, v, NULL, 0, false, 0), "expected q");
    CHECK_FAILS(oar_scaled_dot_product_attention(q, k, oar_slice(v, 1, 0, 3, 1), NULL, 0, false, 0),
                "expected q");
    CHECK_FAILS(oar_scaled_dot_product_attention(q, k, v, bm, 0, true, 0), "not both");
    CHECK_FAILS(
        oar_scaled_dot_product_attention(q, k, v, oar_ones(OAR_I64, 2, SHAPE(3, 5)), 0, false, 0),
        "mask");
    CHECK_FAILS(oar_scaled_dot_product_attention(q, k, v, NULL, 2, false, 0), "dropout_p");
    CHECK_FAILS(oar_scaled_dot_product_attention(q, NULL, v, NULL, 0, false, 0), "NULL");
    oar_pool_pop(p);
}

int main(void) {
    RUN(test_softmax);
    RUN(test_gradients);
    RUN(test_cross_entropy);
    RUN(test_regression_losses);
    RUN(test_bce_with_logits);
    RUN(test_dropout);
    RUN(test_embedding);
    RUN(test_attention);
    return test_summary();
}

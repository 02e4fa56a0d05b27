/* AMP (include/oar/amp.h): autocast scopes, the ops of the low-precision
 * list against their f32 results within bf16/f16 tolerance and with the
 * listed dtypes, a selection of the f32 list, promotion, gradients into f32
 * leaves (first and second order, checkpoint recompute), the loss scaler's
 * skip / grow / back-off sequence step by step, O2 master weights, fit with
 * AMP, and the failure paths. */
#include "../test.h"

#include <stdint.h>

/* max |got - ref| / max(1, max |ref|), with both read as f64 (INFINITY on a
 * shape mismatch or a NULL). */
static double rel_err(oar_tensor *got, oar_tensor *ref) {
    if (!got || !ref || oar_tensor_numel(got) != oar_tensor_numel(ref)) return INFINITY;
    double *a = test_values(got), *b = test_values(ref), m = 0, s = 1;
    for (int64_t i = 0; i < oar_tensor_numel(ref); i++) {
        double d = fabs(a[i] - b[i]);
        if (isnan(d)) d = INFINITY;
        if (d > m) m = d;
        if (fabs(b[i]) > s) s = fabs(b[i]);
    }
    free(a);
    free(b);
    return m / s;
}

static oar_tensor *randn(int ndim, const int64_t *shape) { return oar_randn(OAR_F32, ndim, shape); }

/* ---- scopes ------------------------------------------------------------------ */

static void test_scopes(void) {
    CHECK(!oar_autocast_enabled());
    CHECK(oar_autocast_dtype() == OAR_F32);
    CHECK(oar_autocast_push(OAR_BF16) == 0);
    CHECK(oar_autocast_enabled() && oar_autocast_dtype() == OAR_BF16);
    CHECK(oar_autocast_push(OAR_F16) == 0); /* the innermost decides */
    CHECK(oar_autocast_dtype() == OAR_F16);
    CHECK(oar_autocast_push(OAR_F32) == 0); /* disables inside */
    CHECK(!oar_autocast_enabled() && oar_autocast_dtype() == OAR_F32);
    oar_pool *p = oar_pool_push();
    oar_tensor *a = randn(2, (int64_t[]){2, 3}), *b = randn(2, (int64_t[]){3, 2});
    CHECK(oar_tensor_dtype(oar_matmul(a, b)) == OAR_F32);
    CHECK(oar_autocast_pop() == 0);
    CHECK(oar_tensor_dtype(oar_matmul(a, b)) == OAR_F16);
    CHECK(oar_autocast_pop() == 0);
    CHECK(oar_tensor_dtype(oar_matmul(a, b)) == OAR_BF16);
    CHECK(oar_autocast_pop() == 0);
    CHECK(oar_tensor_dtype(oar_matmul(a, b)) == OAR_F32);
    oar_pool_pop(p);
    /* failure paths */
    CHECK_STATUS_FAILS(oar_autocast_pop(), "no autocast scope");
    CHECK_STATUS_FAILS(oar_autocast_push(OAR_I32), "int32 is not bf16, f16 or f32");
    CHECK_STATUS_FAILS(oar_autocast_push(OAR_F64), "is not bf16");
    CHECK_STATUS_FAILS(oar_autocast_push((oar_dtype)99), "(invalid)");
    CHECK(!oar_autocast_enabled());
    int pushed = 0;
    while (oar_autocast_push(OAR_BF16) == 0 && pushed < 1000) pushed++;
    CHECK(pushed == 64);
    CHECK(strstr(oar_last_error(), "nested more than 64"));
    for (int i = 0; i < pushed; i++) CHECK(oar_autocast_pop() == 0);
    CHECK(!oar_autocast_enabled());
    /* the policy table */
    CHECK(oar_autocast_op_policy("matmul") == OAR_AUTOCAST_LOW);
    CHECK(oar_autocast_op_policy("conv2d") == OAR_AUTOCAST_LOW);
    CHECK(oar_autocast_op_policy("softmax") == OAR_AUTOCAST_F32);
    CHECK(oar_autocast_op_policy("sum") == OAR_AUTOCAST_F32);
    CHECK(oar_autocast_op_policy("add") == OAR_AUTOCAST_PROMOTE);
    CHECK(oar_autocast_op_policy("relu") == OAR_AUTOCAST_PROMOTE);
    CHECK_FAILS(oar_autocast_op_policy("no_such_op") >= 0, "no op named \"no_such_op\"");
    CHECK_FAILS(oar_autocast_op_policy(NULL) >= 0, "op name is NULL");
}

/* ---- the low-precision list ------------------------------------------------------ */

typedef oar_tensor *(*op_fn)(oar_tensor *const *in);

static oar_tensor *f_matmul(oar_tensor *const *in) { return oar_matmul(in[0], in[1]); }
static oar_tensor *f_bmm(oar_tensor *const *in) { return oar_bmm(in[0], in[1]); }
static oar_tensor *f_einsum(oar_tensor *const *in) { return oar_einsum("bij,bjk->bik", 2, in); }
static oar_tensor *f_linear(oar_tensor *const *in) { /* x W^T + b: matmul, then an f32 bias promotes */
    return oar_add(oar_matmul(in[0], oar_transpose(in[1], 0, 1)), in[2]);
}
static oar_tensor *f_conv1d(oar_tensor *const *in) { return oar_conv1d(in[0], in[1], in[2], 1, 1, 1, 1); }
static oar_tensor *f_conv2d(oar_tensor *const *in) {
    return oar_conv2d(in[0], in[1], in[2], (int64_t[]){1, 1}, (int64_t[]){1, 1}, (int64_t[]){1, 1}, 1);
}
static oar_tensor *f_conv3d(oar_tensor *const *in) {
    return oar_conv3d(in[0], in[1], in[2], (int64_t[]){1, 1, 1}, (int64_t[]){0, 0, 0},
                      (int64_t[]){1, 1, 1}, 1);
}
static oar_tensor *f_convt1d(oar_tensor *const *in) {
    return oar_conv_transpose1d(in[0], in[1], in[2], 2, 0, 0, 1, 1);
}
static oar_tensor *f_convt2d(oar_tensor *const *in) {
    return oar_conv_transpose2d(in[0], in[1], in[2], (int64_t[]){2, 2}, (int64_t[]){0, 0},
                                (int64_t[]){0, 0}, (int64_t[]){1, 1}, 1);
}
static oar_tensor *f_convt3d(oar_tensor *const *in) {
    return oar_conv_transpose3d(in[0], in[1], in[2], (int64_t[]){1, 1, 1}, (int64_t[]){0, 0, 0},
                                (int64_t[]){0, 0, 0}, (int64_t[]){1, 1, 1}, 1);
}
static oar_tensor *f_sdpa(oar_tensor *const *in) {
    return oar_scaled_dot_product_attention(in[0], in[1], in[2], NULL, 0, true, 0);
}

typedef struct low_case {
    const char *name;
    op_fn fn;
    int n_in;
    int ndim[3];
    int64_t shape[3][5];
    bool low_out; /* the result is in the low dtype (false: an f32 op ends it) */
} low_case;

static const low_case low_cases[] = {
    {"matmul", f_matmul, 2, {2, 2}, {{7, 33}, {33, 5}}, true},
    {"bmm", f_bmm, 2, {3, 3}, {{2, 4, 17}, {2, 17, 3}}, true},
    {"einsum", f_einsum, 2, {3, 3}, {{2, 4, 17}, {2, 17, 3}}, true},
    {"linear (f32 bias)", f_linear, 3, {2, 2, 1}, {{6, 20}, {8, 20}, {8}}, false},
    {"conv1d", f_conv1d, 3, {3, 3, 1}, {{2, 3, 9}, {4, 3, 3}, {4}}, true},
    {"conv2d", f_conv2d, 3, {4, 4, 1}, {{2, 3, 6, 5}, {4, 3, 3, 3}, {4}}, true},
    {"conv3d", f_conv3d, 3, {5, 5, 1}, {{1, 2, 4, 4, 3}, {3, 2, 2, 2, 2}, {3}}, true},
    {"conv_transpose1d", f_convt1d, 3, {3, 3, 1}, {{2, 3, 5}, {3, 4, 3}, {4}}, true},
    {"conv_transpose2d", f_convt2d, 3, {4, 4, 1}, {{1, 3, 4, 3}, {3, 2, 2, 2}, {2}}, true},
    {"conv_transpose3d", f_convt3d, 3, {5, 5, 1}, {{1, 2, 3, 3, 2}, {2, 3, 2, 2, 2}, {3}}, true},
    {"scaled_dot_product_attention", f_sdpa, 3, {3, 3, 3}, {{2, 5, 8}, {2, 5, 8}, {2, 5, 6}}, true},
};

static void test_low_list(void) {
    const oar_dtype lows[2] = {OAR_BF16, OAR_F16};
    const double tol[2] = {2e-2, 3e-3}; /* 8 and 11 mantissa bits, sums of tens of products */
    for (size_t c = 0; c < sizeof low_cases / sizeof *low_cases; c++) {
        const low_case *lc = &low_cases[c];
        oar_pool *p = oar_pool_push();
        oar_manual_seed(100 + c);
        oar_tensor *in[3];
        for (int i = 0; i < lc->n_in; i++) in[i] = randn(lc->ndim[i], lc->shape[i]);
        oar_tensor *ref = lc->fn(in);
        CHECK(ref && oar_tensor_dtype(ref) == OAR_F32);
        for (int l = 0; l < 2; l++) {
            CHECK(oar_autocast_push(lows[l]) == 0);
            oar_tensor *got = lc->fn(in);
            CHECK(oar_autocast_pop() == 0);
            if (!got) {
                fprintf(stderr, "%s under %s failed: %s\n", lc->name, oar_dtype_name(lows[l]), oar_last_error());
                CHECK(got);
                continue;
            }
            CHECK(oar_tensor_dtype(got) == (lc->low_out ? lows[l] : OAR_F32));
            double e = rel_err(got, ref);
            if (!(e <= tol[l]) || e == 0)
                fprintf(stderr, "%s under %s: relative error %g (tol %g)\n", lc->name,
                        oar_dtype_name(lows[l]), e, tol[l]);
            CHECK(e <= tol[l]);
            CHECK(e > 0); /* it really ran in low precision */
        }
        oar_pool_pop(p);
    }
}

/* ---- the f32 list and promotion -------------------------------------------------- */

static oar_tensor *f_softmax(oar_tensor *const *in) { return oar_softmax(in[0], -1); }
static oar_tensor *f_log_softmax(oar_tensor *const *in) { return oar_log_softmax(in[0], -1); }
static oar_tensor *f_sum(oar_tensor *const *in) { return oar_sum(in[0], 0, NULL, false); }
static oar_tensor *f_mean(oar_tensor *const *in) { return oar_mean(in[0], 1, (int64_t[]){1}, false); }
static oar_tensor *f_cumsum(oar_tensor *const *in) { return oar_cumsum(in[0], 1); }
static oar_tensor *f_exp(oar_tensor *const *in) { return oar_exp(in[0]); }
static oar_tensor *f_log(oar_tensor *const *in) { return oar_log(in[0]); }
static oar_tensor *f_pow(oar_tensor *const *in) { return oar_pow(in[0], in[1]); }
static oar_tensor *f_layer_norm(oar_tensor *const *in) { return oar_layer_norm(in[0], 1, in[1], NULL, 1e-5); }
static oar_tensor *f_group_norm(oar_tensor *const *in) {
    return oar_group_norm(oar_reshape(in[0], 3, (int64_t[]){6, 4, 3}), 2, NULL, NULL, 1e-5);
}
static oar_tensor *f_batch_norm(oar_tensor *const *in) {
    return oar_batch_norm(in[0], NULL, NULL, NULL, NULL, true, 0.1, 1e-5);
}
static oar_tensor *f_mse(oar_tensor *const *in) { return oar_mse_loss(in[0], in[1], OAR_REDUCTION_MEAN); }
static oar_tensor *f_xent(oar_tensor *const *in) {
    oar_tensor *t = oar_tensor_from_data((int64_t[]){0, 3, 1, 11, 2, 5}, OAR_I64, 1, (int64_t[]){6});
    return oar_cross_entropy(in[0], t, NULL, -100, 0, OAR_REDUCTION_MEAN);
}

typedef struct f32_case {
    const char *name;
    op_fn fn;
    int n_in;
    double tol; /* 0: f32 rounding; mse_loss's subtraction (a promote op) runs in the low dtype */
} f32_case;

static const f32_case f32_cases[] = {
    {"softmax", f_softmax, 1, 0}, {"log_softmax", f_log_softmax, 1, 0}, {"sum", f_sum, 1, 0},
    {"mean", f_mean, 1, 0},       {"cumsum", f_cumsum, 1, 0},           {"exp", f_exp, 1, 0},
    {"log", f_log, 1, 0},         {"pow", f_pow, 2, 0},                 {"layer_norm", f_layer_norm, 2, 0},
    {"group_norm", f_group_norm, 1, 0}, {"batch_norm", f_batch_norm, 1, 0}, {"mse_loss", f_mse, 2, 2e-2},
    {"cross_entropy", f_xent, 1, 0},
};

/* f32-list ops given bf16/f16 inputs run in f32: the result equals the op
 * on the inputs cast to f32 (to f32 rounding), and is f32. */
static void test_f32_list(void) {
    const oar_dtype lows[2] = {OAR_BF16, OAR_F16};
    for (size_t c = 0; c < sizeof f32_cases / sizeof *f32_cases; c++) {
        const f32_case *fc = &f32_cases[c];
        for (int l = 0; l < 2; l++) {
            oar_pool *p = oar_pool_push();
            oar_manual_seed(200 + c);
            oar_tensor *lo[2], *up[2];
            for (int i = 0; i < fc->n_in; i++) {
                /* positive, for log and pow */
                lo[i] = oar_cast(oar_add_scalar(oar_abs(randn(2, (int64_t[]){6, 12})), 0.1), lows[l]);
                up[i] = oar_cast(lo[i], OAR_F32);
            }
            if (fc->n_in == 2 && fc->fn == f_layer_norm) { /* weight [12] */
                lo[1] = oar_cast(randn(1, (int64_t[]){12}), lows[l]);
                up[1] = oar_cast(lo[1], OAR_F32);
            }
            oar_tensor *ref = fc->fn(up);
            CHECK(oar_autocast_push(lows[l]) == 0);
            oar_tensor *got = fc->fn(lo);
            CHECK(oar_autocast_pop() == 0);
            CHECK(got && oar_tensor_dtype(got) == OAR_F32);
            double e = rel_err(got, ref);
            double tol = fc->tol ? fc->tol : 1e-5;
            if (!(e <= tol)) fprintf(stderr, "%s under %s: %g\n", fc->name, oar_dtype_name(lows[l]), e);
            CHECK(e <= tol);
            /* and an f32 input under autocast stays f32 */
            CHECK(oar_autocast_push(lows[l]) == 0);
            oar_tensor *same = fc->fn(up);
            CHECK(oar_autocast_pop() == 0);
            CHECK(same && oar_tensor_dtype(same) == OAR_F32 && rel_err(same, ref) <= 1e-6);
            oar_pool_pop(p);
        }
    }
}

static void test_promote(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *f = randn(2, (int64_t[]){3, 4}), *b = oar_cast(randn(2, (int64_t[]){3, 4}), OAR_BF16);
    oar_tensor *h = oar_cast(randn(2, (int64_t[]){3, 4}), OAR_F16);
    CHECK(oar_autocast_push(OAR_BF16) == 0);
    CHECK(oar_tensor_dtype(oar_add(b, f)) == OAR_F32);
    CHECK(oar_tensor_dtype(oar_relu(b)) == OAR_BF16);           /* follows its input */
    CHECK(oar_tensor_dtype(oar_mul_scalar(b, 2)) == OAR_BF16);  /* a number does not widen */
    CHECK(oar_tensor_dtype(oar_mul(b, oar_scalar_of(2, OAR_F32))) == OAR_BF16); /* nor a 0-d tensor */
    CHECK(oar_tensor_dtype(oar_add(b, h)) == OAR_F32);          /* bf16 with f16: f32 */
    oar_tensor *cat = oar_concat(2, (oar_tensor *[]){b, f}, 0);
    CHECK(cat && oar_tensor_dtype(cat) == OAR_F32);
    CHECK(rel_err(oar_slice(cat, 0, 0, 3, 1), b) == 0 && rel_err(oar_slice(cat, 0, 3, 6, 1), f) == 0);
    oar_tensor *w = oar_where(oar_gt(f, oar_scalar(0)), b, f);
    CHECK(w && oar_tensor_dtype(w) == OAR_F32);
    CHECK(oar_autocast_pop() == 0);
    oar_pool_pop(p);
}

/* ---- gradients ----------------------------------------------------------------- */

/* loss = sum(softmax(x W1) W2)^2-ish through a LOW, an F32 and a PROMOTE op. */
static oar_tensor *small_net(oar_tensor *x, oar_tensor *w1, oar_tensor *w2) {
    oar_tensor *h = oar_tanh(oar_matmul(x, w1));
    return oar_mean(oar_square(oar_matmul(h, w2)), 0, NULL, false);
}

static void test_gradients(void) {
    oar_pool *p = oar_pool_push();
    oar_manual_seed(7);
    oar_tensor *x = randn(2, (int64_t[]){8, 16}), *w1 = randn(2, (int64_t[]){16, 12}),
               *w2 = randn(2, (int64_t[]){12, 3});
    oar_tensor_set_requires_grad(w1, true);
    oar_tensor_set_requires_grad(w2, true);
    oar_tensor *g32[2], *gac[2], *ws[2] = {w1, w2};
    CHECK(oar_grad(1, (oar_tensor *[]){small_net(x, w1, w2)}, NULL, 2, ws, false, false, g32) == 0);
    CHECK(oar_autocast_push(OAR_BF16) == 0);
    oar_tensor *loss = small_net(x, w1, w2);
    CHECK(loss && oar_tensor_dtype(loss) == OAR_F32); /* mean is on the f32 list */
    /* a backward pass inside the scope runs with autocast suspended */
    CHECK(oar_grad(1, &loss, NULL, 2, ws, false, false, gac) == 0);
    CHECK(oar_autocast_enabled()); /* and restores it */
    CHECK(oar_autocast_pop() == 0);
    for (int k = 0; k < 2; k++) {
        CHECK(gac[k] && oar_tensor_dtype(gac[k]) == OAR_F32); /* f32 leaves get f32 gradients */
        double e = rel_err(gac[k], g32[k]);
        CHECK(e < 3e-2 && e > 0);
    }
    /* oar_backward into .grad, with the pass outside the scope: the same */
    CHECK(oar_autocast_push(OAR_BF16) == 0);
    loss = small_net(x, w1, w2);
    CHECK(oar_autocast_pop() == 0);
    CHECK(oar_backward(loss, NULL) == 0);
    CHECK(oar_tensor_dtype(oar_tensor_grad(w1)) == OAR_F32);
    CHECK(rel_err(oar_tensor_grad(w1), gac[0]) == 0);
    /* second order: d/dw1 of <grad_w1 L, v>, autocast forward, create_graph */
    oar_tensor *v = randn(2, (int64_t[]){16, 12}), *g1, *h32, *hac;
    CHECK(oar_grad(1, (oar_tensor *[]){small_net(x, w1, w2)}, NULL, 1, &w1, true, false, &g1) == 0);
    CHECK(oar_grad(1, (oar_tensor *[]){oar_sum(oar_mul(g1, v), 0, NULL, false)}, NULL, 1, &w1, false,
                   false, &h32) == 0);
    CHECK(oar_autocast_push(OAR_BF16) == 0);
    loss = small_net(x, w1, w2);
    CHECK(oar_autocast_pop() == 0);
    CHECK(oar_grad(1, &loss, NULL, 1, &w1, true, false, &g1) == 0);
    CHECK(g1 && oar_tensor_dtype(g1) == OAR_F32 && oar_tensor_requires_grad(g1));
    CHECK(oar_grad(1, (oar_tensor *[]){oar_sum(oar_mul(g1, v), 0, NULL, false)}, NULL, 1, &w1, false,
                   false, &hac) == 0);
    CHECK(hac && oar_tensor_dtype(hac) == OAR_F32);
    double e2 = rel_err(hac, h32);
    if (!(e2 < 5e-2)) fprintf(stderr, "second order: relative error %g\n", e2);
    CHECK(e2 < 5e-2 && e2 > 0);
    oar_pool_pop(p);
}

/* A linear layer's weight used transposed (x @ W^T, W [out, in]): autocast
 * casts W and views the copy transposed, so the cast keeps W's layout
 * and W's gradient arrives contiguous (no copy through the transpose).
 * The values are those of casting W^T itself. */
static void test_transposed_weight(void) {
    oar_pool *p = oar_pool_push();
    oar_manual_seed(11);
    oar_tensor *x = randn(2, (int64_t[]){6, 16}), *w = randn(2, (int64_t[]){12, 16});
    oar_tensor_set_requires_grad(w, true);
    CHECK(oar_autocast_push(OAR_BF16) == 0);
    oar_tensor *wt = oar_transpose(w, 0, 1), *y = oar_matmul(x, wt);
    CHECK(y && oar_tensor_dtype(y) == OAR_BF16);
    oar_tensor *loss = oar_sum(oar_square(oar_cast(y, OAR_F32)), 0, NULL, false);
    CHECK(oar_autocast_pop() == 0);
    oar_tensor *g = NULL;
    CHECK(loss && oar_grad(1, &loss, NULL, 1, &w, false, false, &g) == 0);
    CHECK(g && oar_tensor_dtype(g) == OAR_F32 && oar_tensor_is_contiguous(g));
    /* the reference: W^T made contiguous, then cast, outside any scope */
    oar_tensor *wb = oar_cast(oar_contiguous(oar_transpose(w, 0, 1)), OAR_BF16);
    oar_tensor *yr = oar_matmul(oar_cast(x, OAR_BF16), wb), *gr = NULL;
    CHECK(yr && rel_err(y, yr) < 1e-2);
    oar_tensor *lr = oar_sum(oar_square(oar_cast(yr, OAR_F32)), 0, NULL, false);
    CHECK(lr && oar_grad(1, &lr, NULL, 1, &w, false, false, &gr) == 0);
    CHECK(gr && rel_err(g, gr) < 1e-2);
    oar_pool_pop(p);
}

/* A checkpointed segment recomputed in backward casts as its forward did,
 * though backward runs with autocast suspended. */
static int segment(void *ctx, int n_in, oar_tensor *const *in, int n_out, oar_tensor **out) {
    (void)ctx, (void)n_in, (void)n_out;
    out[0] = oar_tanh(oar_matmul(in[0], in[1]));
    return out[0] ? 0 : -1;
}

static void test_checkpoint(void) {
    oar_pool *p = oar_pool_push();
    oar_manual_seed(8);
    oar_tensor *x = randn(2, (int64_t[]){4, 10}), *w = randn(2, (int64_t[]){10, 6}), *h;
    oar_tensor_set_requires_grad(w, true);
    CHECK(oar_autocast_push(OAR_BF16) == 0);
    oar_tensor *plain = oar_sum(segment(NULL, 2, (oar_tensor *[]){x, w}, 1, &h) ? NULL : h, 0, NULL, false);
    CHECK(oar_checkpoint(segment, NULL, 2, (oar_tensor *[]){x, w}, 1, &h) == 0);
    CHECK(h && oar_tensor_dtype(h) == OAR_BF16);
    oar_tensor *ck = oar_sum(h, 0, NULL, false);
    CHECK(oar_autocast_pop() == 0);
    oar_tensor *ga, *gb;
    CHECK(oar_grad(1, &plain, NULL, 1, &w, false, false, &ga) == 0);
    CHECK(oar_grad(1, &ck, NULL, 1, &w, false, false, &gb) == 0);
    CHECK(gb && oar_tensor_dtype(gb) == OAR_F32 && rel_err(gb, ga) == 0);
    oar_pool_pop(p);
}

/* ---- the loss scaler ------------------------------------------------------------- */

/* One iteration on a [2] parameter with loss = sum(p * c): the scaled
 * gradient is scale * c. Returns the step's status. */
static int scaler_iter(oar_grad_scaler *s, oar_optimizer *opt, oar_tensor *param, double c0, double c1) {
    oar_pool *p = oar_pool_push();
    oar_tensor *c = oar_tensor_from_data((float[]){(float)c0, (float)c1}, OAR_F32, 1, (int64_t[]){2});
    oar_tensor *loss = oar_sum(oar_mul(param, c), 0, NULL, false);
    int st = oar_backward(oar_grad_scaler_scale(s, loss), NULL);
    if (!st) st = oar_grad_scaler_step(s, opt);
    if (!st) st = oar_grad_scaler_update(s);
    oar_optim_zero_grad(opt);
    oar_pool_pop(p);
    return st;
}

static void test_scaler_sequence(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *w = oar_tensor_from_data((float[]){1, 1}, OAR_F32, 1, (int64_t[]){2});
    oar_tensor_set_requires_grad(w, true);
    oar_optimizer *opt = oar_sgd_new(1, &w, &(oar_sgd_options){.lr = 0.25});
    oar_grad_scaler *s = oar_grad_scaler_new(4, 2, 0.5, 2);
    CHECK(oar_grad_scaler_get_scale(s) == 4 && oar_grad_scaler_growth_tracker(s) == 0);
    /* by hand: (grad c, skipped?, scale after, tracker after, w after) with w -= 0.25 c */
    struct {
        double c0, c1;
        bool skip;
        double scale;
        int64_t tracker;
        double w0, w1;
    } seq[] = {
        {1, 2, false, 4, 1, 0.75, 0.5},          /* clean: 1 of 2 */
        {1, 2, false, 8, 0, 0.5, 0},             /* clean: grows x2, restarts */
        {INFINITY, 1, true, 4, 0, 0.5, 0},       /* inf: skipped, backs off */
        {NAN, 1, true, 2, 0, 0.5, 0},            /* nan: skipped, backs off */
        {-2, 4, false, 2, 1, 1, -1},             /* clean: 1 of 2 */
        {3e38, 1, true, 1, 0, 1, -1},            /* finite, but 3e38 * 2 overflows f32: skipped */
        {4, 0, false, 1, 1, 0, -1},              /* the count restarted at the skip */
    };
    for (size_t i = 0; i < sizeof seq / sizeof *seq; i++) {
        double c0 = seq[i].c0, c1 = seq[i].c1;
        CHECK(scaler_iter(s, opt, w, c0, c1) == 0);
        CHECK(oar_grad_scaler_step_skipped(s) == seq[i].skip);
        CHECK(oar_grad_scaler_get_scale(s) == seq[i].scale);
        CHECK(oar_grad_scaler_growth_tracker(s) == seq[i].tracker);
        double *v = test_values(w);
        if (v[0] != seq[i].w0 || v[1] != seq[i].w1)
            fprintf(stderr, "scaler step %zu: w = [%g, %g], expected [%g, %g]\n", i, v[0], v[1], seq[i].w0, seq[i].w1);
        CHECK(v[0] == seq[i].w0 && v[1] == seq[i].w1);
        free(v);
    }
    CHECK(oar_optim_steps(opt) == 4); /* the skipped ones did not count */
    /* unscale, then inspect: grads divided exactly (a power of two scale) */
    oar_tensor *loss = oar_sum(oar_mul(w, oar_tensor_from_data((float[]){3, -5}, OAR_F32, 1, (int64_t[]){2})), 0,
                               NULL, false);
    CHECK(oar_backward(oar_grad_scaler_scale(s, loss), NULL) == 0);
    double *g0 = test_values(oar_tensor_grad(w));
    CHECK_NEAR(g0[0], 3 * oar_grad_scaler_get_scale(s), 0);
    free(g0);
    CHECK(oar_grad_scaler_unscale(s, opt) == 0);
    CHECK(!oar_grad_scaler_found_inf(s));
    double *g = test_values(oar_tensor_grad(w));
    CHECK(g[0] == 3 && g[1] == -5);
    free(g);
    /* the state machine's misuses, as torch's */
    CHECK_STATUS_FAILS(oar_grad_scaler_unscale(s, opt), "already called on this optimizer");
    CHECK(oar_grad_scaler_step(s, opt) == 0);
    CHECK_STATUS_FAILS(oar_grad_scaler_step(s, opt), "already called on this optimizer");
    CHECK_STATUS_FAILS(oar_grad_scaler_unscale(s, opt), "after grad_scaler_step");
    CHECK(oar_grad_scaler_update(s) == 0);
    CHECK_STATUS_FAILS(oar_grad_scaler_update(s), "no gradients were unscaled");
    oar_optim_zero_grad(opt);
    /* a parameter list (a module's) instead of an optimizer */
    loss = oar_sum(oar_mul(w, oar_tensor_from_data((float[]){NAN, 1}, OAR_F32, 1, (int64_t[]){2})), 0, NULL, false);
    double before = oar_grad_scaler_get_scale(s);
    CHECK(oar_backward(oar_grad_scaler_scale(s, loss), NULL) == 0);
    CHECK(oar_grad_scaler_unscale_params(s, 1, &w) == 0);
    CHECK(oar_grad_scaler_found_inf(s));
    CHECK(oar_grad_scaler_update(s) == 0);
    CHECK(oar_grad_scaler_get_scale(s) == before * 0.5 && !oar_grad_scaler_found_inf(s));
    oar_optim_zero_grad(opt);
    /* growth that would overflow keeps the scale */
    oar_grad_scaler *big = oar_grad_scaler_new(1e308, 10, 0.5, 1);
    CHECK(oar_grad_scaler_unscale_params(big, 1, &w) == 0); /* no grads: clean */
    CHECK(oar_grad_scaler_update(big) == 0);
    CHECK(oar_grad_scaler_get_scale(big) == 1e308 && oar_grad_scaler_growth_tracker(big) == 0);
    oar_grad_scaler_free(big);
    /* failure paths */
    CHECK_FAILS(oar_grad_scaler_new(0, 2, 0.5, 10), "init_scale > 0");
    CHECK_FAILS(oar_grad_scaler_new(-1, 2, 0.5, 10), "init_scale > 0");
    CHECK_FAILS(oar_grad_scaler_new(INFINITY, 2, 0.5, 10), "init_scale > 0");
    CHECK_FAILS(oar_grad_scaler_new(8, 1, 0.5, 10), "growth_factor > 1");
    CHECK_FAILS(oar_grad_scaler_new(8, 2, -0.5, 10), "backoff_factor in (0, 1)");
    CHECK_FAILS(oar_grad_scaler_new(8, 2, 1.5, 10), "backoff_factor in (0, 1)");
    CHECK_FAILS(oar_grad_scaler_new(8, 2, 0.5, 0), "growth_interval >= 1");
    CHECK_FAILS(oar_grad_scaler_new(8, 2, NAN, 1), "backoff_factor");
    CHECK_FAILS(oar_grad_scaler_scale(NULL, loss), "scaler is NULL");
    CHECK_FAILS(oar_grad_scaler_scale(s, NULL), "loss is NULL");
    CHECK_STATUS_FAILS(oar_grad_scaler_unscale(NULL, opt), "scaler or optimizer is NULL");
    CHECK_STATUS_FAILS(oar_grad_scaler_unscale(s, NULL), "scaler or optimizer is NULL");
    CHECK_STATUS_FAILS(oar_grad_scaler_step(s, NULL), "scaler or optimizer is NULL");
    CHECK_STATUS_FAILS(oar_grad_scaler_update(NULL), "scaler is NULL");
    CHECK_STATUS_FAILS(oar_grad_scaler_unscale_params(s, 1, NULL), "params is NULL");
    CHECK_STATUS_FAILS(oar_grad_scaler_unscale_params(s, -1, &w), "params is NULL");
    CHECK(isnan(oar_grad_scaler_get_scale(NULL)) && oar_grad_scaler_growth_tracker(NULL) == -1);
    CHECK(!oar_grad_scaler_found_inf(NULL) && !oar_grad_scaler_step_skipped(NULL));
    oar_grad_scaler_free(NULL);
    oar_grad_scaler_free(s);
    oar_optim_free(opt);
    oar_pool_pop(p);
}

/* ---- O2 ---------------------------------------------------------------------------- */

static oar_tensor *regress_loss(oar_module *net, oar_tensor *x, oar_tensor *y) {
    return oar_mse_loss(oar_module_forward(net, x), y, OAR_REDUCTION_MEAN);
}

static oar_module *regress_net(void) {
    oar_manual_seed(11);
    return oar_sequential_new(3, (oar_module *[]){oar_linear_new(6, 16, true), oar_tanh_new(),
                                                  oar_linear_new(16, 1, true)});
}

static void test_o2(void) {
    oar_pool *p = oar_pool_push();
    oar_manual_seed(12);
    oar_tensor *x = randn(2, (int64_t[]){64, 6});
    oar_tensor *y = oar_sum(oar_sin(x), 1, (int64_t[]){1}, true);
    /* f32 baseline */
    oar_module *ref = regress_net();
    oar_tensor *rp[8];
    int nr = oar_module_parameters(ref, rp, 8);
    oar_optimizer *ropt = oar_adam_new(nr, rp, &(oar_adam_options){.lr = 1e-2});
    double ref_loss = 0;
    for (int it = 0; it < 60; it++) {
        oar_pool *ip = oar_pool_push();
        oar_tensor *l = regress_loss(ref, x, y);
        ref_loss = oar_tensor_item(l);
        oar_backward(l, NULL);
        oar_optim_step(ropt);
        oar_optim_zero_grad(ropt);
        oar_pool_pop(ip);
    }
    /* O2 bf16 with f32 masters, and f16 with a scaler */
    const oar_dtype lows[2] = {OAR_BF16, OAR_F16};
    for (int l = 0; l < 2; l++) {
        oar_module *net = regress_net();
        oar_amp_o2 *o2 = oar_amp_o2_new(net, lows[l]);
        CHECK(o2);
        oar_tensor *mp[8], *pp[8];
        int n = oar_amp_o2_master_params(o2, mp, 8);
        CHECK(n == 4 && oar_module_parameters(net, pp, 8) == 4);
        for (int i = 0; i < n; i++) {
            CHECK(oar_tensor_dtype(mp[i]) == OAR_F32 && oar_tensor_dtype(pp[i]) == lows[l]);
            CHECK(oar_tensor_requires_grad(pp[i]) && mp[i] != pp[i]);
            CHECK(rel_err(pp[i], mp[i]) < 1e-2);
        }
        oar_optimizer *opt = oar_adam_new(n, mp, &(oar_adam_options){.lr = 1e-2});
        oar_grad_scaler *sc = l == 1 ? oar_grad_scaler_new(1024, 2, 0.5, 20) : NULL;
        double loss = 0, first = 0;
        for (int it = 0; it < 60; it++) {
            oar_pool *ip = oar_pool_push();
            CHECK(oar_autocast_push(lows[l]) == 0);
            oar_tensor *lt = regress_loss(net, x, y);
            CHECK(oar_autocast_pop() == 0);
            loss = oar_tensor_item(lt);
            if (it == 0) first = loss;
            CHECK(oar_backward(sc ? oar_grad_scaler_scale(sc, lt) : lt, NULL) == 0);
            CHECK(oar_tensor_grad(pp[0]) && oar_tensor_grad(mp[0]) == NULL);
            CHECK(oar_amp_o2_step(o2, opt, sc) == 0);
            CHECK(oar_tensor_grad(pp[0]) == NULL && oar_tensor_dtype(oar_tensor_grad(mp[0])) == OAR_F32);
            if (sc) CHECK(oar_grad_scaler_update(sc) == 0);
            oar_optim_zero_grad(opt);
            oar_pool_pop(ip);
        }
        /* the model holds the masters rounded to low precision */
        for (int i = 0; i < n; i++) {
            oar_pool *ip = oar_pool_push();
            CHECK(rel_err(pp[i], oar_cast(mp[i], lows[l])) == 0);
            oar_pool_pop(ip);
        }
        if (!(loss < 0.5 * first && fabs(loss - ref_loss) < 0.05 + 0.2 * ref_loss))
            fprintf(stderr, "O2 %s: loss %g (first %g), f32 %g\n", oar_dtype_name(lows[l]), loss, first, ref_loss);
        CHECK(loss < 0.5 * first);
        CHECK(fabs(loss - ref_loss) < 0.05 + 0.2 * ref_loss);
        if (sc) { /* an inf gradient: skipped, masters and model unchanged */
            double *before = test_values(mp[0]);
            oar_tensor *lt = oar_mul_scalar(regress_loss(net, x, y), INFINITY);
            CHECK(oar_backward(oar_grad_scaler_scale(sc, lt), NULL) == 0);
            CHECK(oar_amp_o2_step(o2, opt, sc) == 0);
            CHECK(oar_grad_scaler_step_skipped(sc));
            double *after = test_values(mp[0]);
            CHECK(after[0] == before[0]);
            free(before);
            free(after);
            CHECK(oar_grad_scaler_update(sc) == 0);
            oar_optim_zero_grad(opt);
        }
        oar_grad_scaler_free(sc);
        oar_optim_free(opt);
        oar_amp_o2_free(o2);
        oar_module_free(net);
    }
    /* failure paths */
    oar_module *net = regress_net();
    CHECK_FAILS(oar_amp_o2_new(NULL, OAR_BF16), "model is NULL");
    CHECK_FAILS(oar_amp_o2_new(net, OAR_F32), "must be bf16 or f16, got float32");
    CHECK_FAILS(oar_amp_o2_new(net, OAR_I64), "must be bf16 or f16");
    oar_module *empty = oar_relu_new();
    CHECK_FAILS(oar_amp_o2_new(empty, OAR_BF16), "no parameters");
    oar_module_free(empty);
    oar_amp_o2 *o2 = oar_amp_o2_new(net, OAR_BF16);
    CHECK_STATUS_FAILS(oar_amp_o2_step(o2, NULL, NULL), "o2 or optimizer is NULL");
    CHECK_STATUS_FAILS(oar_amp_o2_step(NULL, ropt, NULL), "o2 or optimizer is NULL");
    CHECK_FAILS(oar_amp_o2_master_params(NULL, rp, 8) >= 0, "o2 or out is NULL");
    CHECK_FAILS(oar_amp_o2_master_params(o2, NULL, 8) >= 0, "o2 or out is NULL");
    CHECK(oar_amp_o2_master_params(o2, NULL, 0) == 4);
    oar_amp_o2_free(o2);
    oar_amp_o2_free(NULL);
    oar_module_free(net);
    oar_optim_free(ropt);
    oar_module_free(ref);
    oar_pool_pop(p);
}

/* ---- fit ---------------------------------------------------------------------------- */

static oar_dataset *blobs(int64_t n, uint64_t seed) {
    oar_manual_seed(seed);
    oar_pool *p = oar_pool_push();
    oar_tensor *y = oar_remainder(oar_arange(0, (double)n, 1, OAR_I64), oar_scalar(4));
    float centres[4][8] = {{2, 2}, {-2, 2}, {2, -2}, {-2, -2}};
    oar_tensor *c = oar_tensor_from_data(centres, OAR_F32, 2, (int64_t[]){4, 8});
    oar_tensor *x = oar_add(oar_index_select(c, 0, y), oar_mul_scalar(randn(2, (int64_t[]){n, 8}), 0.9));
    oar_dataset *ds = oar_dataset_new(x, y);
    oar_pool_pop(p);
    return ds;
}

static double fit_loss(oar_dtype autocast, bool scaler, double *acc) {
    oar_dataset *tr = blobs(256, 30);
    oar_loader *tl = oar_loader_new(tr, &(oar_loader_options){.batch_size = 32, .shuffle = true, .seed = 4});
    oar_manual_seed(5);
    oar_module *net = oar_sequential_new(3, (oar_module *[]){oar_linear_new(8, 32, true), oar_relu_new(),
                                                             oar_linear_new(32, 4, true)});
    oar_tensor *ps[8];
    int n = oar_module_parameters(net, ps, 8);
    oar_optimizer *opt = oar_adam_new(n, ps, &(oar_adam_options){.lr = 1e-2});
    oar_grad_scaler *s = scaler ? oar_grad_scaler_new(65536, 2, 0.5, 8) : NULL;
    oar_fit_result r;
    int st = oar_fit(net, opt, tl, &(oar_fit_options){.epochs = 4, .accuracy = true, .clip_grad_norm = 10,
                                                      .progress = OAR_PROGRESS_NONE,
                                                      .autocast_dtype = autocast, .scaler = s}, &r);
    CHECK(st == 0);
    if (s) CHECK(oar_grad_scaler_get_scale(s) > 0 && oar_grad_scaler_get_scale(s) != 65536);
    for (int i = 0; i < n; i++) CHECK(oar_tensor_dtype(ps[i]) == OAR_F32);
    CHECK(!oar_autocast_enabled());
    *acc = r.acc;
    oar_grad_scaler_free(s);
    oar_optim_free(opt);
    oar_module_free(net);
    oar_loader_free(tl);
    oar_dataset_free(tr);
    return st ? NAN : r.loss;
}

static void test_fit_amp(void) {
    double a32, abf, af16;
    double l32 = fit_loss(0, false, &a32), lbf = fit_loss(OAR_BF16, false, &abf),
           lf16 = fit_loss(OAR_F16, true, &af16);
    fprintf(stderr, "fit, 4 epochs: loss f32 %.4f (acc %.3f), bf16 %.4f (%.3f), f16+scaler %.4f (%.3f)\n",
            l32, a32, lbf, abf, lf16, af16);
    CHECK(l32 < 0.3 && a32 > 0.9);
    CHECK(fabs(lbf - l32) < 0.05 + 0.2 * l32 && abf > 0.9);
    CHECK(fabs(lf16 - l32) < 0.05 + 0.2 * l32 && af16 > 0.9);
    CHECK(lbf != l32); /* it really ran in bf16 */
    /* a bad autocast dtype */
    oar_dataset *tr = blobs(32, 31);
    oar_loader *tl = oar_loader_new(tr, &(oar_loader_options){.batch_size = 32});
    oar_module *net = oar_linear_new(8, 4, true);
    oar_tensor *ps[2];
    oar_optimizer *opt = oar_sgd_new(oar_module_parameters(net, ps, 2), ps, &(oar_sgd_options){.lr = 0.1});
    CHECK_STATUS_FAILS(oar_fit(net, opt, tl, &(oar_fit_options){.epochs = 1, .progress = OAR_PROGRESS_NONE,
                                                                .autocast_dtype = OAR_I32}, NULL),
                       "autocast_dtype 2 is not bf16");
    oar_optim_free(opt);
    oar_module_free(net);
    oar_loader_free(tl);
    oar_dataset_free(tr);
}

int main(void) {
    RUN(test_scopes);
    RUN(test_low_list);
    RUN(test_f32_list);
    RUN(test_promote);
    RUN(test_gradients);
    RUN(test_transposed_weight);
    RUN(test_checkpoint);
    RUN(test_scaler_sequence);
    RUN(test_o2);
    RUN(test_fit_amp);
    return test_summary();
}

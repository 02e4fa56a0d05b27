/* Conv1d, ConvTranspose2d, GroupNorm, AdaptiveAvgPool2d and the activation
 * modules: forward values against closed forms worked by hand, PyTorch's
 * default initialisation bounds, bad arguments; and a user-defined module
 * (a residual block: a struct with its own forward that calls registered
 * children) trained through its children's parameters. */
#include "test.h"

#include "ref/train_more_ref.h"

static oar_tensor *f32(int ndim, const int64_t *shape, const float *v) {
    return oar_tensor_from_data(v, OAR_F32, ndim, shape);
}

static void set(oar_tensor *dst, oar_tensor *src) {
    oar_no_grad_push();
    CHECK(oar_copy_(dst, src) == 0);
    oar_no_grad_pop();
}

/* every value of t within [-bound, bound], and some near each end */
static void check_bound(oar_tensor *t, double bound) {
    double hi = oar_tensor_item(oar_amax(t, 0, NULL, false));
    double lo = oar_tensor_item(oar_amin(t, 0, NULL, false));
    CHECK(hi <= bound && lo >= -bound);
    if (oar_tensor_numel(t) >= 100) CHECK(hi > 0.9 * bound && lo < -0.9 * bound);
}

static void test_conv1d(void) {
    oar_pool *pool = oar_pool_push();
    oar_module *c = oar_conv1d_new(1, 1, 2, 1, 0, 1, 1, true);
    CHECK(c && !strcmp(oar_module_type(c), "Conv1d"));
    set(oar_module_get(c, "weight"), f32(3, (int64_t[]){1, 1, 2}, (float[]){1, -1}));
    set(oar_module_get(c, "bias"), f32(1, (int64_t[]){1}, (float[]){0.5f}));
    oar_tensor *x = f32(3, (int64_t[]){1, 1, 4}, (float[]){1, 2, 4, 8});
    /* y[i] = x[i] - x[i+1] + 0.5 */
    CHECK_VALUES(oar_module_forward(c, x), ((double[]){-0.5, -1.5, -3.5}), 3, 1e-6);
    /* stride 2, padding 1: positions -1..4 -> windows (0,1),(2,4)... */
    oar_module *c2 = oar_conv1d_new(1, 1, 2, 2, 1, 1, 1, false);
    set(oar_module_get(c2, "weight"), f32(3, (int64_t[]){1, 1, 2}, (float[]){1, 10}));
    CHECK_VALUES(oar_module_forward(c2, x), ((double[]){10, 42, 8}), 3, 1e-5);
    /* default init: U(+-1/sqrt(in/groups * k)) for weight and bias */
    oar_manual_seed(3);
    oar_module *big = oar_conv1d_new(6, 40, 5, 1, 0, 1, 2, true);
    int64_t fi, fo;
    CHECK(oar_init_fans(oar_module_get(big, "weight"), &fi, &fo) == 0 && fi == 15);
    check_bound(oar_module_get(big, "weight"), 1 / sqrt(15.0));
    check_bound(oar_module_get(big, "bias"), 1 / sqrt(15.0));
    CHECK(oar_tensor_shape(oar_module_get(big, "weight"))[1] == 3);
    CHECK_FAILS(oar_conv1d_new(3, 4, 3, 1, 0, 1, 2, true), "divide by groups");
    CHECK_FAILS(oar_conv1d_new(3, 4, 0, 1, 0, 1, 1, true), "conv1d_new: invalid arguments");
    CHECK_FAILS(oar_module_forward(c, oar_ones(OAR_F32, 3, (int64_t[]){1, 2, 4})), "");
    oar_module_free(c);
    oar_module_free(c2);
    oar_module_free(big);
    oar_pool_pop(pool);
}

static void test_conv_transpose2d(void) {
    oar_pool *pool = oar_pool_push();
    oar_module *c = oar_conv_transpose2d_new(1, 1, 2, 2, 0, 0, 1, 1, true);
    set(oar_module_get(c, "weight"), f32(4, (int64_t[]){1, 1, 2, 2}, (float[]){1, 2, 3, 4}));
    set(oar_module_get(c, "bias"), f32(1, (int64_t[]){1}, (float[]){1}));
    /* stride 2, kernel 2: each input pixel stamps x * w into its own 2x2 block */
    oar_tensor *x = f32(4, (int64_t[]){1, 1, 1, 2}, (float[]){1, 10});
    oar_tensor *y = oar_module_forward(c, x);
    CHECK(y && oar_tensor_shape(y)[2] == 2 && oar_tensor_shape(y)[3] == 4);
    CHECK_VALUES(y, ((double[]){2, 3, 11, 21, 4, 5, 31, 41}), 8, 1e-5);
    /* output_padding 1 adds a row and a column (bias only there) */
    oar_module *cp = oar_conv_transpose2d_new(1, 1, 2, 2, 0, 1, 1, 1, false);
    oar_tensor *yp = oar_module_forward(cp, x);
    CHECK(yp && oar_tensor_shape(yp)[2] == 3 && oar_tensor_shape(yp)[3] == 5);
    /* weight [in, out/groups, k, k]; PyTorch's fan_in is out/groups * k * k */
    oar_manual_seed(4);
    oar_module *big = oar_conv_transpose2d_new(8, 6, 3, 1, 0, 0, 1, 2, true);
    oar_tensor *w = oar_module_get(big, "weight");
    CHECK(oar_tensor_shape(w)[0] == 8 && oar_tensor_shape(w)[1] == 3);
    check_bound(w, 1 / sqrt(27.0));
    check_bound(oar_module_get(big, "bias"), 1 / sqrt(27.0));
    CHECK_FAILS(oar_conv_transpose2d_new(8, 6, 3, 2, 0, 2, 1, 1, true), "output_padding");
    CHECK_FAILS(oar_conv_transpose2d_new(3, 6, 3, 1, 0, 0, 1, 2, true), "divide by groups");
    oar_module_free(c);
    oar_module_free(cp);
    oar_module_free(big);
    oar_pool_pop(pool);
}

static void test_group_norm(void) {
    oar_pool *pool = oar_pool_push();
    oar_module *g = oar_group_norm_new(2, 4, 1e-5, true);
    CHECK(g && oar_module_parameters(g, NULL, 0) == 2);
    /* groups {1, 3} and {-2, 2}: each normalises to -r, r */
    oar_tensor *x = f32(4, (int64_t[]){1, 4, 1, 1}, (float[]){1, 3, -2, 2});
    double r = 1 / sqrt(1 + 1e-5), r2 = 2 / sqrt(4 + 1e-5);
    CHECK_VALUES(oar_module_forward(g, x), ((double[]){-r, r, -r2, r2}), 4, 1e-5);
    /* the affine weight and bias scale and shift per channel */
    set(oar_module_get(g, "weight"), f32(1, (int64_t[]){4}, (float[]){2, 2, 1, 1}));
    set(oar_module_get(g, "bias"), f32(1, (int64_t[]){4}, (float[]){0, 1, 0, 0}));
    CHECK_VALUES(oar_module_forward(g, x), ((double[]){-2 * r, 2 * r + 1, -r2, r2}), 4, 1e-5);
    oar_module *plain = oar_group_norm_new(1, 4, 1e-5, false);
    CHECK(oar_module_parameters(plain, NULL, 0) == 0);
    CHECK_FAILS(oar_module_forward(g, oar_ones(OAR_F32, 2, (int64_t[]){2, 3})),
                "GroupNorm: expected input [N, 4, ...]");
    CHECK_FAILS(oar_group_norm_new(3, 4, 1e-5, true), "divide by groups");
    CHECK_FAILS(oar_group_norm_new(2, 4, 0, true), "group_norm_new");
    oar_module_free(g);
    oar_module_free(plain);
    oar_pool_pop(pool);
}

static void test_adaptive_pool_and_activations(void) {
    oar_pool *pool = oar_pool_push();
    oar_module *ap = oar_adaptive_avg_pool2d_new(1, 2);
    oar_tensor *x = f32(4, (int64_t[]){1, 1, 2, 4}, (float[]){1, 2, 3, 4, 5, 6, 7, 8});
    oar_tensor *y = oar_module_forward(ap, x);
    CHECK(y && oar_tensor_shape(y)[2] == 1 && oar_tensor_shape(y)[3] == 2);
    CHECK_VALUES(y, ((double[]){3.5, 5.5}), 2, 1e-6);
    CHECK_FAILS(oar_adaptive_avg_pool2d_new(0, 2), "must be positive");

    oar_tensor *v = f32(1, (int64_t[]){3}, (float[]){-2, 0, 1.5f});
    double sg[3] = {1 / (1 + exp(2.0)), 0.5, 1 / (1 + exp(-1.5))};
    oar_module *m[5] = {oar_sigmoid_new(), oar_silu_new(), oar_softplus_new(2, 20),
                        oar_leaky_relu_new(0.1), oar_elu_new(0.5)};
    CHECK_VALUES(oar_module_forward(m[0], v), sg, 3, 1e-6);
    CHECK_VALUES(oar_module_forward(m[1], v), ((double[]){-2 * sg[0], 0, 1.5 * sg[2]}), 3, 1e-6);
    CHECK_VALUES(oar_module_forward(m[2], v),
                 ((double[]){log1p(exp(-4.0)) / 2, log(2.0) / 2, log1p(exp(3.0)) / 2}), 3, 1e-6);
    CHECK_VALUES(oar_module_forward(m[3], v), ((double[]){-0.2, 0, 1.5}), 3, 1e-6);
    CHECK_VALUES(oar_module_forward(m[4], v), ((double[]){0.5 * expm1(-2.0), 0, 1.5}), 3, 1e-6);
    const char *types[5] = {"Sigmoid", "SiLU", "Softplus", "LeakyReLU", "ELU"};
    for (int i = 0; i < 5; i++) {
        CHECK(!strcmp(oar_module_type(m[i]), types[i]));
        oar_module_free(m[i]);
    }
    CHECK_FAILS(oar_softplus_new(0, 20), "beta 0 must be > 0");
    CHECK_FAILS(oar_leaky_relu_new(NAN), "must be finite");
    CHECK_FAILS(oar_elu_new(INFINITY), "must be finite");
    oar_module_free(ap);
    oar_pool_pop(pool);
}

/* ---- a user-defined module: y = x + relu(fc2(relu(fc1(x)))) ------------------- */

typedef struct residual {
    oar_module *fc1, *fc2; /* borrowed: owned as registered children */
    int calls;
} residual;

static oar_tensor *residual_forward(oar_module *m, oar_tensor *x) {
    residual *r = oar_module_ctx(m);
    r->calls++;
    /* temporaries and the result go to the caller's pool, as an op's do;
     * a NULL anywhere falls through to the end */
    oar_tensor *h = oar_relu(oar_module_forward(r->fc1, x));
    return oar_add(x, oar_relu(oar_module_forward(r->fc2, h)));
}

static void free_residual(void *ctx) { free(ctx); }

static oar_module *residual_new(int64_t dim) {
    residual *r = calloc(1, sizeof *r);
    oar_module *m = oar_module_new("Residual", residual_forward, r, free_residual);
    if (!m) return free(r), NULL;
    r->fc1 = oar_linear_new(dim, 2 * dim, true);
    r->fc2 = oar_linear_new(2 * dim, dim, true);
    if (oar_module_add_child(m, "fc1", r->fc1) || oar_module_add_child(m, "fc2", r->fc2)) {
        oar_module_free(m);
        return NULL;
    }
    return m;
}

static void test_user_defined_module(void) {
    oar_manual_seed(5);
    oar_module *net = oar_sequential_new(2, (oar_module *[]){residual_new(3), oar_linear_new(3, 1, true)});
    CHECK(net != NULL);
    if (!net) return;
    const oar_state_entry *s;
    CHECK(oar_module_state(net, &s) == 6);
    CHECK(!strcmp(s[0].name, "0.fc1.weight") && !strcmp(s[3].name, "0.fc2.bias") &&
          !strcmp(s[4].name, "1.weight"));
    oar_tensor *ps[6];
    CHECK(oar_module_parameters(net, ps, 6) == 6);
    oar_optimizer *opt = oar_sgd_new(6, ps, &(oar_sgd_options){.lr = 0.05, .momentum = 0.9});
    /* fit y = sum(x) on a fixed batch: the loss must fall by a large factor */
    oar_pool *pool = oar_pool_push();
    oar_tensor *x = oar_randn(OAR_F32, 2, (int64_t[]){32, 3});
    oar_tensor *t = oar_sum(x, 1, (int64_t[]){1}, true);
    oar_tensor_retain(x);
    oar_tensor_retain(t);
    oar_pool_pop(pool);
    double first = 0, last = 0;
    for (int it = 0; it < 150; it++) {
        pool = oar_pool_push();
        oar_tensor *loss = oar_mse_loss(oar_module_forward(net, x), t, OAR_REDUCTION_MEAN);
        if (it == 0) first = oar_tensor_item(loss);
        last = oar_tensor_item(loss);
        CHECK(oar_backward(loss, NULL) == 0);
        if (it == 0) CHECK(oar_tensor_grad(oar_module_get(net, "0.fc1.weight")) != NULL);
        CHECK(oar_optim_step(opt) == 0);
        oar_optim_zero_grad(opt);
        oar_pool_pop(pool);
    }
    CHECK(last < first * 0.05);
    residual *r = oar_module_ctx(oar_module_child(net, "0"));
    CHECK(r && r->calls == 150);
    oar_optim_free(opt);
    oar_tensor_release(x);
    oar_tensor_release(t);
    oar_module_free(net);
}

/* Conv1d (groups, stride, padding), ConvTranspose2d (groups,
 * output_padding) and GroupNorm with fixed weights against PyTorch
 * (tests/ref/gen_train_more.py). */
static void test_against_torch(void) {
    oar_pool *pool = oar_pool_push();
    oar_module *c1 = oar_conv1d_new(4, 6, 3, 2, 1, 1, 2, true);
    set(oar_module_get(c1, "weight"),
        oar_tensor_from_data(mod_conv1d_w, OAR_F64, 3, (int64_t[]){6, 2, 3}));
    set(oar_module_get(c1, "bias"), f32(1, (int64_t[]){6}, (float[]){0.1f, -0.1f, 0.2f, -0.2f, 0.3f, -0.3f}));
    oar_tensor *y1 = oar_module_forward(
        c1, oar_cast(oar_tensor_from_data(mod_conv1d_x, OAR_F64, 3, (int64_t[]){2, 4, 9}), OAR_F32));
    CHECK(y1 && oar_tensor_shape(y1)[1] == 6 && oar_tensor_shape(y1)[2] == 5);
    CHECK_VALUES(y1, mod_conv1d_y, 60, 1e-5);

    oar_module *ct = oar_conv_transpose2d_new(4, 2, 3, 2, 1, 1, 1, 2, true);
    set(oar_module_get(ct, "weight"),
        oar_tensor_from_data(mod_convt_w, OAR_F64, 4, (int64_t[]){4, 1, 3, 3}));
    set(oar_module_get(ct, "bias"), f32(1, (int64_t[]){2}, (float[]){0.5f, -0.25f}));
    oar_tensor *y2 = oar_module_forward(
        ct, oar_cast(oar_tensor_from_data(mod_convt_x, OAR_F64, 4, (int64_t[]){1, 4, 3, 3}), OAR_F32));
    CHECK(y2 && oar_tensor_shape(y2)[2] == 6 && oar_tensor_shape(y2)[3] == 6);
    CHECK_VALUES(y2, mod_convt_y, 72, 1e-5);

    oar_module *gn = oar_group_norm_new(3, 6, 1e-5, true);
    set(oar_module_get(gn, "weight"), oar_linspace(0.5, 1.5, 6, OAR_F32));
    set(oar_module_get(gn, "bias"), oar_linspace(-0.3, 0.3, 6, OAR_F32));
    oar_tensor *y3 = oar_module_forward(
        gn, oar_cast(oar_tensor_from_data(mod_gn_x, OAR_F64, 3, (int64_t[]){2, 6, 5}), OAR_F32));
    CHECK_VALUES(y3, mod_gn_y, 60, 1e-5);
    oar_module_free(c1);
    oar_module_free(ct);
    oar_module_free(gn);
    oar_pool_pop(pool);
}

int main(void) {
    RUN(test_conv1d);
    RUN(test_conv_transpose2d);
    RUN(test_group_norm);
    RUN(test_adaptive_pool_and_activations);
    RUN(test_user_defined_module);
    RUN(test_against_torch);
    return test_summary();
}

/* Modules: naming of parameters and buffers, children, train/eval mode,
 * the parameter accessor, user-defined modules, PyTorch's default init
 * bounds, forward of the built-in layers against closed forms, and bad
 * input. */
#include "test.h"

#include <oar/io.h>
#include <oar/nn.h>
#include <unistd.h>

#include "ref/train_ref.h"

static void test_sequential_names(void) {
    oar_manual_seed(1);
    oar_module *net =
        oar_sequential_new(4, (oar_module *[]){oar_conv2d_new(1, 4, 3, 1, 1, 1, 1, true),
                                               oar_batch_norm2d_new(4, 1e-5, 0.1, true),
                                               oar_relu_new(), oar_flatten_new(1, -1)});
    CHECK(net != NULL);
    CHECK(oar_sequential_append(net, oar_linear_new(4 * 8 * 8, 10, true)) == 0);
    const oar_state_entry *s;
    int n = oar_module_state(net, &s);
    const char *want[] = {"0.weight",
                          "0.bias",
                          "1.weight",
                          "1.bias",
                          "1.running_mean",
                          "1.running_var",
                          "1.num_batches_tracked",
                          "4.weight",
                          "4.bias"};
    const bool param[] = {1, 1, 1, 1, 0, 0, 0, 1, 1};
    CHECK(n == 9);
    for (int i = 0; i < n && i < 9; i++) {
        CHECK(!strcmp(s[i].name, want[i]));
        CHECK(s[i].is_parameter == param[i]);
        CHECK(oar_tensor_requires_grad(s[i].tensor) == param[i]);
    }
    oar_tensor *params[16];
    CHECK(oar_module_parameters(net, NULL, 0) == 6);
    CHECK(oar_module_parameters(net, params, 16) == 6);
    CHECK(params[0] == oar_module_get(net, "0.weight") &&
          params[5] == oar_module_get(net, "4.bias"));
    CHECK(oar_module_num_elements(net) == 4 * 9 + 4 + 4 + 4 + 10 * 256 + 10);
    CHECK(oar_tensor_shape(oar_module_get(net, "4.weight"))[1] == 256);
    CHECK(oar_tensor_dtype(oar_module_get(net, "1.num_batches_tracked")) == OAR_I64);
    CHECK(!strcmp(oar_module_type(oar_module_child(net, "1")), "BatchNorm2d"));
    CHECK(oar_module_num_children(net) == 5);
    CHECK(oar_module_child_at(net, 4) == oar_module_child(net, "4"));
    CHECK_FAILS(oar_module_get(net, "1.nope"), "no parameter or buffer named \"1.nope\"");
    CHECK_FAILS(oar_module_get(net, "7.weight"), "no child \"7\"");
    CHECK_FAILS(oar_module_child_at(net, 5), "out of range");

    /* train / eval propagate to children */
    CHECK(oar_module_is_training(net) && oar_module_is_training(oar_module_child(net, "1")));
    oar_module_train(net, false);
    CHECK(!oar_module_is_training(net) && !oar_module_is_training(oar_module_child(net, "1")));
    oar_module_train(net, true);
    CHECK(oar_module_is_training(oar_module_child(net, "3")));

    /* BatchNorm's initial state */
    CHECK_VALUES(oar_module_get(net, "1.running_var"), ((double[]){1, 1, 1, 1}), 4, 0);
    CHECK_VALUES(oar_module_get(net, "1.running_mean"), ((double[]){0, 0, 0, 0}), 4, 0);
    CHECK_VALUES(oar_module_get(net, "1.weight"), ((double[]){1, 1, 1, 1}), 4, 0);
    oar_module_free(net);
}

/* A user-defined module: y = x * scale + shift, with a nested child. */
typedef struct {
    double factor;
    int calls;
} affine_ctx;

static oar_tensor *affine_forward(oar_module *m, oar_tensor *x) {
    affine_ctx *c = oar_module_ctx(m);
    c->calls++;
    oar_tensor *y = oar_add(oar_mul(x, oar_module_get(m, "scale")), oar_module_get(m, "shift"));
    return oar_mul_scalar(y, c->factor);
}

static void test_user_module(void) {
    oar_pool *pool = oar_pool_push();
    affine_ctx ctx = {2.0, 0};
    oar_module *m = oar_module_new("Affine", affine_forward, &ctx, NULL);
    int64_t three = 3;
    oar_tensor *scale = oar_tensor_from_data((float[]){1, 2, 3}, OAR_F32, 1, &three);
    oar_tensor *shift = oar_zeros(OAR_F32, 1, &three);
    CHECK(oar_module_add_parameter(m, "scale", scale) == 0);
    CHECK(oar_module_add_buffer(m, "shift", shift) == 0);
    CHECK(oar_tensor_requires_grad(scale) && !oar_tensor_requires_grad(shift));
    CHECK_STATUS_FAILS(oar_module_add_buffer(m, "scale", shift), "already has a tensor named");
    CHECK_STATUS_FAILS(oar_module_add_parameter(m, "a.b", scale), "invalid name");
    CHECK_STATUS_FAILS(oar_module_add_parameter(m, "", scale), "invalid name");
    CHECK_STATUS_FAILS(oar_module_add_parameter(m, "ok", NULL), "is NULL");
    CHECK_STATUS_FAILS(oar_module_add_parameter(m, "idx", oar_zeros(OAR_I64, 1, &three)),
                       "must be floating");
    oar_module *outer = oar_module_new("Outer", NULL, NULL, NULL);
    CHECK(oar_module_add_child(outer, "inner", m) == 0);
    CHECK(oar_module_add_child(outer, "lin", oar_linear_new(3, 2, false)) == 0);
    CHECK_STATUS_FAILS(oar_module_add_child(outer, "again", m), "already has a parent");
    const oar_state_entry *s;
    CHECK(oar_module_state(outer, &s) == 3);
    CHECK(!strcmp(s[0].name, "inner.scale") && !strcmp(s[1].name, "inner.shift") &&
          !strcmp(s[2].name, "lin.weight"));
    CHECK_FAILS(oar_module_forward(outer, scale), "has no forward function");
    oar_tensor *y = oar_module_forward(m, scale);
    CHECK_VALUES(y, ((double[]){2, 8, 18}), 3, 0);
    CHECK(ctx.calls == 1);
    CHECK(oar_module_get(outer, "inner.scale") == scale);
    /* the module holds its own references: they outlive the pool */
    oar_pool_pop(pool);
    CHECK_VALUES(oar_module_get(outer, "inner.scale"), ((double[]){1, 2, 3}), 3, 0);
    oar_module_free(outer);
}

/* Linear and Conv2d weights and biases lie within PyTorch's default
 * bounds and fill them (a uniform draw of many values nears the bound). */
static void test_default_init(void) {
    oar_pool *pool = oar_pool_push();
    oar_manual_seed(7);
    oar_module *lin = oar_linear_new(20, 7, true);
    oar_module *conv = oar_conv2d_new(3, 8, 3, 1, 0, 1, 1, true);
    struct {
        oar_tensor *t;
        double bound;
    } cases[] = {
        {oar_module_get(lin, "weight"), train_init_bounds[0]},
        {oar_module_get(lin, "bias"), train_init_bounds[0]},
        {oar_module_get(conv, "weight"), train_init_bounds[1]},
        {oar_module_get(conv, "bias"), train_init_bounds[1]},
    };
    for (int c = 0; c < 4; c++) {
        double *v = test_values(cases[c].t);
        int64_t n = oar_tensor_numel(cases[c].t);
        double lo = 1e9, hi = -1e9;
        for (int64_t i = 0; i < n; i++) {
            lo = fmin(lo, v[i]);
            hi = fmax(hi, v[i]);
        }
        CHECK(lo >= -cases[c].bound && hi <= cases[c].bound);
        if (n >= 100) CHECK(hi > 0.9 * cases[c].bound && lo < -0.9 * cases[c].bound);
        free(v);
    }
    /* the same seed draws the same weights */
    oar_manual_seed(7);
    oar_module *lin2 = oar_linear_new(20, 7, true);
    double *a = test_values(oar_module_get(lin, "weight"));
    double *b = test_values(oar_module_get(lin2, "weight"));
    CHECK(a && b && !memcmp(a, b, 140 * sizeof *a));
    free(a);
    free(b);
    /* xavier and kaiming bounds on a [50, 40] tensor */
    int64_t shape[2] = {50, 40};
    oar_tensor *w = oar_empty(OAR_F64, 2, shape, NULL);
    CHECK(oar_init_xavier_uniform_(w, 2.0) == 0);
    CHECK(oar_tensor_item(oar_amax(w, 0, NULL, false)) <= 2.0 * sqrt(6.0 / 90));
    CHECK(oar_tensor_item(oar_amax(w, 0, NULL, false)) > 0.95 * 2.0 * sqrt(6.0 / 90));
    CHECK(oar_init_kaiming_uniform_(w, 0) == 0);
    CHECK(oar_tensor_item(oar_amin(w, 0, NULL, false)) >= -sqrt(6.0 / 40));
    CHECK(oar_tensor_item(oar_amin(w, 0, NULL, false)) < -0.95 * sqrt(6.0 / 40));
    CHECK(oar_init_normal_(w, 3, 0.5) == 0);
    CHECK_NEAR(oar_tensor_item(oar_mean(w, 0, NULL, false)), 3, 0.05);
    CHECK(oar_init_ones_(w) == 0);
    CHECK_NEAR(oar_tensor_item(oar_sum(w, 0, NULL, false)), 2000, 0);
    CHECK(oar_init_zeros_(w) == 0);
    CHECK_NEAR(oar_tensor_item(oar_sum(oar_abs(w), 0, NULL, false)), 0, 0);
    CHECK_STATUS_FAILS(oar_init_zeros_(NULL), "NULL");
    int64_t fi, fo;
    CHECK(oar_init_fans(oar_module_get(conv, "weight"), &fi, &fo) == 0 && fi == 27 && fo == 72);
    CHECK_STATUS_FAILS(oar_init_fans(oar_module_get(conv, "bias"), &fi, &fo), "at least 2 dims");
    CHECK_STATUS_FAILS(oar_init_uniform_(oar_zeros(OAR_I32, 1, shape), 0, 1), "floating");
    oar_module_free(lin);
    oar_module_free(lin2);
    oar_module_free(conv);
    oar_pool_pop(pool);
}

static void test_forward(void) {
    oar_pool *pool = oar_pool_push();
    /* Linear with known weights: y = x W^T + b */
    oar_module *lin = oar_linear_new(3, 2, true);
    int64_t ws[2] = {2, 3}, two = 2, xs[2] = {2, 3};
    oar_no_grad_push();
    CHECK(oar_copy_(oar_module_get(lin, "weight"),
                    oar_tensor_from_data((float[]){1, 2, 3, -1, 0, 1}, OAR_F32, 2, ws)) == 0);
    CHECK(oar_copy_(oar_module_get(lin, "bias"),
                    oar_tensor_from_data((float[]){0.5f, -1}, OAR_F32, 1, &two)) == 0);
    oar_no_grad_pop();
    oar_tensor *x = oar_tensor_from_data((float[]){1, 1, 1, 2, 0, -1}, OAR_F32, 2, xs);
    CHECK_VALUES(oar_module_forward(lin, x), ((double[]){6.5, -1, -0.5, -4}), 4, 1e-6);
    CHECK_FAILS(oar_module_forward(lin, oar_ones(OAR_F32, 2, (int64_t[]){2, 4})), "in_features 3");
    CHECK_FAILS(oar_module_forward(lin, NULL), "input is NULL");

    /* activations, flatten, pooling, dropout in eval */
    int64_t s4[4] = {1, 1, 2, 2};
    oar_tensor *img = oar_tensor_from_data((float[]){-1, 2, 3, -4}, OAR_F32, 4, s4);
    oar_module *seq = oar_sequential_new(
        3, (oar_module *[]){oar_relu_new(), oar_max_pool2d_new(2, 0, 0), oar_flatten_new(1, -1)});
    oar_tensor *y = oar_module_forward(seq, img);
    CHECK(y && oar_tensor_ndim(y) == 2 && oar_tensor_shape(y)[1] == 1);
    CHECK_VALUES(y, ((double[]){3}), 1, 0);
    oar_module *avg = oar_avg_pool2d_new(2, 2, 0);
    CHECK_VALUES(oar_module_forward(avg, img), ((double[]){0}), 1, 1e-7);
    oar_module *th = oar_tanh_new(), *ge = oar_gelu_new(false), *dr = oar_dropout_new(0.5);
    CHECK_VALUES(oar_module_forward(th, img), ((double[]){tanh(-1), tanh(2), tanh(3), tanh(-4)}), 4,
                 1e-6);
    CHECK_VALUES(
        oar_module_forward(ge, img),
        ((double[]){-0.15865525393145707, 1.9544997361036416, 2.9959502751197, -0.00012668918576}),
        4, 1e-5);
    oar_module_train(dr, false);
    CHECK_VALUES(oar_module_forward(dr, img), ((double[]){-1, 2, 3, -4}), 4, 0);
    oar_module_train(dr, true);
    oar_tensor *big = oar_ones(OAR_F32, 1, (int64_t[]){4000});
    double kept = oar_tensor_item(oar_sum(oar_module_forward(dr, big), 0, NULL, false));
    CHECK(kept > 3600 && kept < 4400); /* E = 4000: survivors scaled by 2 */

    /* LayerNorm over the last dim of [2, 2]; Embedding rows */
    oar_module *ln = oar_layer_norm_new(1, (int64_t[]){2}, 1e-5, true);
    oar_tensor *lx = oar_tensor_from_data((float[]){1, 3, -2, 2}, OAR_F32, 2, (int64_t[]){2, 2});
    double r = 1 / sqrt(1 + 1e-5);
    CHECK_VALUES(oar_module_forward(ln, lx), ((double[]){-r, r, -r, r}), 4, 1e-5);
    oar_module *emb = oar_embedding_new(5, 3);
    oar_tensor *idx = oar_tensor_from_data((int64_t[]){4, 0}, OAR_I64, 1, &two);
    oar_tensor *e = oar_module_forward(emb, idx);
    double *ev = test_values(e), *wv = test_values(oar_module_get(emb, "weight"));
    CHECK(ev && wv && ev[0] == wv[12] && ev[3] == wv[0] && ev[5] == wv[2]);
    free(ev);
    free(wv);

    /* BatchNorm2d: training normalises by batch statistics and updates
     * the running stats and the batch counter; eval uses running stats */
    oar_module *bn = oar_batch_norm2d_new(1, 1e-5, 0.1, true);
    oar_tensor *bx = oar_tensor_from_data((float[]){1, 2, 3, 6}, OAR_F32, 4, s4);
    double var = 3.5, rs = 1 / sqrt(var + 1e-5);
    CHECK_VALUES(oar_module_forward(bn, bx), ((double[]){-2 * rs, -1 * rs, 0, 3 * rs}), 4, 1e-5);
    CHECK_VALUES(oar_module_get(bn, "running_mean"), ((double[]){0.3}), 1, 1e-6);
    CHECK_VALUES(oar_module_get(bn, "running_var"), ((double[]){0.9 + 0.1 * 14.0 / 3}), 1, 1e-6);
    CHECK_VALUES(oar_module_get(bn, "num_batches_tracked"), ((double[]){1}), 1, 0);
    oar_module_train(bn, false);
    double rv = 0.9 + 0.1 * 14.0 / 3;
    CHECK_VALUES(oar_module_forward(bn, bx),
                 ((double[]){(1 - 0.3) / sqrt(rv + 1e-5), (2 - 0.3) / sqrt(rv + 1e-5),
                             (3 - 0.3) / sqrt(rv + 1e-5), (6 - 0.3) / sqrt(rv + 1e-5)}),
                 4, 1e-5);
    CHECK_VALUES(oar_module_get(bn, "num_batches_tracked"), ((double[]){1}), 1, 0);
    CHECK_FAILS(oar_module_forward(bn, lx), "expected a 4-D");
    oar_module *bn1 = oar_batch_norm1d_new(2, 1e-5, 0.1, false);
    CHECK(oar_module_parameters(bn1, NULL, 0) == 0);
    CHECK_VALUES(oar_module_forward(bn1, lx), ((double[]){1, 1, -1, -1}), 4, 1e-4);

    oar_module *mods[] = {lin, seq, avg, th, ge, dr, ln, emb, bn, bn1};
    for (size_t i = 0; i < sizeof mods / sizeof *mods; i++)
        oar_module_free(mods[i]);
    oar_pool_pop(pool);
}

static void test_bad_arguments(void) {
    CHECK_FAILS(oar_linear_new(0, 3, true), "features must be positive");
    CHECK_FAILS(oar_conv2d_new(3, 4, 3, 1, 0, 1, 2, true), "divide by groups");
    CHECK_FAILS(oar_batch_norm2d_new(4, 0, 0.1, true), "invalid arguments");
    CHECK_FAILS(oar_dropout_new(1.5), "must be in [0, 1]");
    CHECK_FAILS(oar_max_pool2d_new(2, 2, 3), "padding must be at most half");
    CHECK_FAILS(oar_layer_norm_new(1, (int64_t[]){0}, 1e-5, true), "must be positive");
    /* a NULL among Sequential's modules keeps the constructor's message
     * and frees the others (ASan checks the leak) */
    CHECK_FAILS(oar_sequential_new(3, (oar_module *[]){oar_relu_new(), oar_linear_new(-1, 2, true),
                                                       oar_tanh_new()}),
                "features must be positive");
    CHECK_STATUS_FAILS(oar_sequential_append(NULL, oar_relu_new()), "not a Sequential");
    CHECK_FAILS(oar_module_forward(NULL, NULL), "module is NULL");
    CHECK(oar_module_state(NULL, NULL) == -1);
    oar_module_free(NULL);
}

/* Every allocation of building, saving and loading a module fails in turn:
 * each call reports "out of memory" or succeeds, nothing crashes, and ASan
 * sees no leak. */
static long alloc_calls, fail_at;

static void *failing_alloc(void *ctx, void *ptr, size_t old_size, size_t new_size) {
    (void)ctx;
    (void)old_size;
    if (new_size == 0) {
        free(ptr);
        return NULL;
    }
    if (++alloc_calls == fail_at) return NULL;
    return realloc(ptr, new_size);
}

static void test_alloc_failures(void) {
    char path[] = "/tmp/oar_nn_oom_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd >= 0) close(fd);
    int bad = 0, completed = 0;
    for (fail_at = 1; fail_at < 2000 && !completed; fail_at++) {
        alloc_calls = 0;
        oar_clear_error();
        oar_set_allocator(failing_alloc, NULL);
        oar_module *m =
            oar_sequential_new(2, (oar_module *[]){oar_linear_new(4, 3, true),
                                                   oar_batch_norm1d_new(3, 1e-5, 0.1, true)});
        const oar_state_entry *s;
        int st = !m || oar_module_state(m, &s) != 7 || oar_module_save(m, path) ||
                 oar_module_load(m, path);
        oar_module_free(m);
        oar_set_allocator(NULL, NULL);
        if (!st && alloc_calls < fail_at)
            completed = 1; /* ran without an injected failure */
        else if (st && !strstr(oar_last_error(), "out of memory")) {
            if (bad++ < 3)
                fprintf(stderr, "failing allocation %ld: %s\n", fail_at, oar_last_error());
        }
    }
    CHECK(completed && bad == 0);
    CHECK(fail_at > 20); /* the failures were really injected */
    remove(path);
}

int main(void) {
    RUN(test_sequential_names);
    RUN(test_user_module);
    RUN(test_default_init);
    RUN(test_forward);
    RUN(test_bad_arguments);
    RUN(test_alloc_failures);
    return test_summary();
}

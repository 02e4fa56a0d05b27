/* Two small models train on opencl:0, and every op of the forward pass,
 * the backward pass (the gradient rules' ops) and the optimizer runs on the
 * device (oar_device_fallback_count stays 0); the loss curves and trained
 * weights equal the same runs on the CPU to f32 rounding:
 * - an MLP (8 -> 32 -> 3, relu, cross entropy with probability targets)
 *   with SGD and momentum;
 * - a token classifier (embedding 20 x 16, layer_norm with affine, gelu,
 *   linear to 4 classes, cross entropy with class indices) with Adam;
 * - a small CNN (conv2d 1 -> 4, 3x3, padding 1, relu, 2x2 max_pool2d,
 *   linear to 3 classes) with SGD.
 * Skipped (exit 77) where no OpenCL device exists. */
#include "test.h"

#include <oar/optim.h>

#include "opencl_common.h"

#define STEPS 30

static oar_tensor *param(oar_device *d, int64_t r, int64_t c, double scale) {
    int64_t s[2] = {r, c};
    oar_tensor *t = oar_mul_scalar(oar_randn(OAR_F32, c ? 2 : 1, c ? s : &r), scale);
    t = oar_tensor_retain(oar_tensor_to(t, d));
    oar_tensor_set_requires_grad(t, true);
    return t;
}

static oar_tensor *forward(oar_tensor *const *w, oar_tensor *x) {
    oar_tensor *h = oar_relu(oar_add(oar_matmul(x, w[0]), w[1]));
    return oar_add(oar_matmul(h, w[2]), w[3]);
}

/* Trains from seed 1 on device d; fills losses[STEPS] and the final
 * weights (host copies, 8*32 + 32 + 32*3 + 3 floats). */
static void train(oar_device *d, double *losses, float *final) {
    oar_pool *outer = oar_pool_push();
    oar_manual_seed(1);
    int64_t xs[2] = {64, 8};
    oar_tensor *x = oar_randn(OAR_F32, 2, xs);
    /* labels: which of three sums is largest; one-hot float targets */
    float *xv = malloc(64 * 8 * sizeof *xv), onehot[64 * 3] = {0};
    oar_tensor_to_host(x, xv, 64 * 8 * sizeof *xv);
    for (int i = 0; i < 64; i++) {
        float s0 = xv[i * 8] + xv[i * 8 + 1], s1 = xv[i * 8 + 2] - xv[i * 8 + 3],
              s2 = xv[i * 8 + 4] * 0.5f + xv[i * 8 + 5];
        onehot[i * 3 + (s0 > s1 ? (s0 > s2 ? 0 : 2) : (s1 > s2 ? 1 : 2))] = 1;
    }
    free(xv);
    int64_t ys[2] = {64, 3};
    oar_tensor *y = oar_tensor_to(oar_tensor_from_data(onehot, OAR_F32, 2, ys), d);
    x = oar_tensor_to(x, d);
    oar_tensor *w[4] = {param(d, 8, 32, 0.4), param(d, 32, 0, 0.1), param(d, 32, 3, 0.3),
                        param(d, 3, 0, 0.1)};
    oar_optimizer *opt = oar_sgd_new(4, w, &(oar_sgd_options){.lr = 0.2, .momentum = 0.9});
    CHECK(opt != NULL);
    oar_device_fallback_reset();
    for (int step = 0; step < STEPS && opt; step++) {
        oar_pool *p = oar_pool_push();
        oar_tensor *loss = oar_cross_entropy(forward(w, x), y, NULL, -100, 0, OAR_REDUCTION_MEAN);
        CHECK(loss && oar_tensor_device(loss) == d);
        losses[step] = loss ? oar_tensor_item(loss) : NAN;
        CHECK(oar_backward(loss, NULL) == 0);
        CHECK(oar_tensor_device(oar_tensor_grad(w[0])) == d);
        CHECK(oar_optim_step(opt) == 0);
        oar_optim_zero_grad(opt);
        oar_pool_pop(p);
    }
    CHECK(oar_device_fallback_count() == 0);
    size_t off = 0;
    for (int i = 0; i < 4; i++) {
        size_t n = (size_t)oar_tensor_numel(w[i]);
        CHECK(oar_tensor_to_host(w[i], final + off, n * sizeof *final) == 0);
        off += n;
        oar_tensor_release(w[i]);
    }
    oar_optim_free(opt);
    oar_pool_pop(outer);
}

/* The token classifier: tokens t in [0, 20), class = t % 4. */
static void train_tokens(oar_device *d, double *losses, float *final) {
    oar_pool *outer = oar_pool_push();
    oar_manual_seed(2);
    int64_t n = 48, tok[48], cls[48];
    for (int i = 0; i < n; i++) {
        tok[i] = (i * 7 + 3) % 20;
        cls[i] = tok[i] % 4;
    }
    oar_tensor *x = oar_tensor_to(oar_tensor_from_data(tok, OAR_I64, 1, &n), d);
    oar_tensor *y = oar_tensor_to(oar_tensor_from_data(cls, OAR_I64, 1, &n), d);
    int64_t es[2] = {20, 16}, ws[2] = {16, 4}, sixteen = 16, four = 4;
    oar_tensor *w[5] = {
        oar_tensor_retain(oar_tensor_to(oar_randn(OAR_F32, 2, es), d)),
        oar_tensor_retain(oar_full_on(OAR_F32, 1, &sixteen, 1.0, d)),
        oar_tensor_retain(oar_full_on(OAR_F32, 1, &sixteen, 0.0, d)),
        oar_tensor_retain(oar_tensor_to(oar_mul_scalar(oar_randn(OAR_F32, 2, ws), 0.3), d)),
        oar_tensor_retain(oar_full_on(OAR_F32, 1, &four, 0.0, d)),
    };
    for (int i = 0; i < 5; i++) oar_tensor_set_requires_grad(w[i], true);
    oar_optimizer *opt = oar_adam_new(5, w, &(oar_adam_options){.lr = 0.01});
    CHECK(opt != NULL);
    oar_device_fallback_reset();
    for (int step = 0; step < STEPS && opt; step++) {
        oar_pool *p = oar_pool_push();
        oar_tensor *h = oar_gelu(oar_layer_norm(oar_embedding(w[0], x), 1, w[1], w[2], 1e-5), false);
        oar_tensor *logits = oar_add(oar_matmul(h, w[3]), w[4]);
        oar_tensor *loss = oar_cross_entropy(logits, y, NULL, -100, 0, OAR_REDUCTION_MEAN);
        CHECK(loss && oar_tensor_device(loss) == d);
        losses[step] = loss ? oar_tensor_item(loss) : NAN;
        CHECK(oar_backward(loss, NULL) == 0);
        CHECK(oar_optim_step(opt) == 0);
        oar_optim_zero_grad(opt);
        oar_pool_pop(p);
    }
    CHECK(oar_device_fallback_count() == 0);
    size_t off = 0;
    for (int i = 0; i < 5; i++) {
        size_t k = (size_t)oar_tensor_numel(w[i]);
        CHECK(oar_tensor_to_host(w[i], final + off, k * sizeof *final) == 0);
        off += k;
        oar_tensor_release(w[i]);
    }
    oar_optim_free(opt);
    oar_pool_pop(outer);
}

/* The CNN on 8x8 images; class: which third of the image is brightest. */
static void train_cnn(oar_device *d, double *losses, float *final) {
    oar_pool *outer = oar_pool_push();
    oar_manual_seed(4);
    int64_t xs[4] = {12, 1, 8, 8}, ws[4] = {4, 1, 3, 3}, four = 4, ls[2] = {64, 3}, three = 3;
    oar_tensor *x = oar_rand(OAR_F32, 4, xs);
    float *xv = malloc(12 * 64 * sizeof *xv), onehot[12 * 3] = {0};
    oar_tensor_to_host(x, xv, 12 * 64 * sizeof *xv);
    for (int i = 0; i < 12; i++) {
        float s[3] = {0, 0, 0};
        for (int j = 0; j < 64; j++) s[(j % 8) * 3 / 8] += xv[i * 64 + j];
        onehot[i * 3 + (s[0] > s[1] ? (s[0] > s[2] ? 0 : 2) : (s[1] > s[2] ? 1 : 2))] = 1;
    }
    free(xv);
    int64_t ys[2] = {12, 3};
    oar_tensor *y = oar_tensor_to(oar_tensor_from_data(onehot, OAR_F32, 2, ys), d);
    x = oar_tensor_to(x, d);
    oar_tensor *w[4] = {
        oar_tensor_retain(oar_tensor_to(oar_mul_scalar(oar_randn(OAR_F32, 4, ws), 0.5), d)),
        oar_tensor_retain(oar_full_on(OAR_F32, 1, &four, 0.0, d)),
        oar_tensor_retain(oar_tensor_to(oar_mul_scalar(oar_randn(OAR_F32, 2, ls), 0.2), d)),
        oar_tensor_retain(oar_full_on(OAR_F32, 1, &three, 0.0, d)),
    };
    for (int i = 0; i < 4; i++) oar_tensor_set_requires_grad(w[i], true);
    oar_optimizer *opt = oar_sgd_new(4, w, &(oar_sgd_options){.lr = 0.1, .momentum = 0.9});
    CHECK(opt != NULL);
    const int64_t one[2] = {1, 1}, two[2] = {2, 2}, zero[2] = {0, 0};
    oar_device_fallback_reset();
    for (int step = 0; step < STEPS && opt; step++) {
        oar_pool *p = oar_pool_push();
        oar_tensor *h = oar_relu(oar_conv2d(x, w[0], w[1], one, one, one, 1));
        h = oar_flatten(oar_max_pool2d(h, two, two, zero, one, false, NULL), 1, -1);
        oar_tensor *loss = oar_cross_entropy(oar_add(oar_matmul(h, w[2]), w[3]), y, NULL, -100, 0,
                                             OAR_REDUCTION_MEAN);
        CHECK(loss && oar_tensor_device(loss) == d);
        losses[step] = loss ? oar_tensor_item(loss) : NAN;
        CHECK(oar_backward(loss, NULL) == 0);
        CHECK(oar_optim_step(opt) == 0);
        oar_optim_zero_grad(opt);
        oar_pool_pop(p);
    }
    CHECK(oar_device_fallback_count() == 0);
    size_t off = 0;
    for (int i = 0; i < 4; i++) {
        size_t k = (size_t)oar_tensor_numel(w[i]);
        CHECK(oar_tensor_to_host(w[i], final + off, k * sizeof *final) == 0);
        off += k;
        oar_tensor_release(w[i]);
    }
    oar_optim_free(opt);
    oar_pool_pop(outer);
}

int main(void) {
    oar_device *d = opencl_device_or_skip();
    if (!d) return TEST_SKIP;
    enum { NW = 8 * 32 + 32 + 32 * 3 + 3 };
    static double lc[STEPS], ld[STEPS];
    static float wc[NW], wd[NW];
    test_current = "cpu";
    train(oar_device_cpu(), lc, wc);
    test_current = "opencl";
    train(d, ld, wd);
    for (int i = 0; i < STEPS; i++) CHECK_NEAR(ld[i], lc[i], 1e-4 * (1 + fabs(lc[i])));
    double worst = 0;
    for (int i = 0; i < NW; i++) worst = fmax(worst, fabs((double)wd[i] - wc[i]));
    CHECK_NEAR(worst, 0, 1e-3);
    CHECK(ld[STEPS - 1] < 0.5 * ld[0]);
    printf("mlp: loss %.4f -> %.4f on opencl:0 (cpu %.4f -> %.4f), max weight difference %.2g\n",
           ld[0], ld[STEPS - 1], lc[0], lc[STEPS - 1], worst);

    enum { NT = 20 * 16 + 16 + 16 + 16 * 4 + 4 };
    static float tc[NT], td[NT];
    test_current = "tokens cpu";
    train_tokens(oar_device_cpu(), lc, tc);
    test_current = "tokens opencl";
    train_tokens(d, ld, td);
    for (int i = 0; i < STEPS; i++) CHECK_NEAR(ld[i], lc[i], 1e-4 * (1 + fabs(lc[i])));
    worst = 0;
    for (int i = 0; i < NT; i++) worst = fmax(worst, fabs((double)td[i] - tc[i]));
    CHECK_NEAR(worst, 0, 1e-3);
    CHECK(ld[STEPS - 1] < 0.5 * ld[0]);
    printf("tokens: loss %.4f -> %.4f on opencl:0 (cpu %.4f -> %.4f), max weight difference %.2g\n",
           ld[0], ld[STEPS - 1], lc[0], lc[STEPS - 1], worst);

    enum { NC = 36 + 4 + 64 * 3 + 3 };
    static float cc[NC], cd[NC];
    test_current = "cnn cpu";
    train_cnn(oar_device_cpu(), lc, cc);
    test_current = "cnn opencl";
    train_cnn(d, ld, cd);
    for (int i = 0; i < STEPS; i++) CHECK_NEAR(ld[i], lc[i], 1e-4 * (1 + fabs(lc[i])));
    worst = 0;
    for (int i = 0; i < NC; i++) worst = fmax(worst, fabs((double)cd[i] - cc[i]));
    CHECK_NEAR(worst, 0, 1e-3);
    CHECK(ld[STEPS - 1] < 0.7 * ld[0]);
    printf("cnn: loss %.4f -> %.4f on opencl:0 (cpu %.4f -> %.4f), max weight difference %.2g\n",
           ld[0], ld[STEPS - 1], lc[0], lc[STEPS - 1], worst);

    /* a kernel's own error reaches oar_last_error (through host->error) */
    test_current = "errors";
    oar_pool *pool = oar_pool_push();
    int64_t xs[2] = {2, 3}, is[2] = {2, 1}, bad[2] = {0, 7};
    oar_tensor *xx = oar_tensor_to(oar_ones(OAR_F32, 2, xs), d);
    oar_tensor *idx = oar_tensor_to(oar_tensor_from_data(bad, OAR_I64, 2, is), d);
    CHECK_FAILS(oar_gather(xx, 1, idx), "gather: an index is out of range [0, 3) along dim 1");
    CHECK(oar_tensor_item(oar_sum(xx, 0, NULL, false)) == 6); /* the device still works */
    oar_pool_pop(pool);
    return test_summary();
}

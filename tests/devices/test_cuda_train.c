/* The demo CNN (LeNet-5 as examples/lenet5.c builds it: conv 5x5 1 -> 6
 * with padding 2, relu, 2x2 max pool, conv 5x5 6 -> 16, relu, 2x2 max
 * pool, 400 -> 120 -> 84 -> 10 with relu; SGD, lr 0.02, momentum 0.9,
 * batch 64 of 28x28 images) trained for a few steps on cuda:0 and on the
 * CPU from the same seed: on cuda:0 every op of the forward pass, the
 * backward pass and the optimizer runs on the device
 * (oar_device_fallback_count stays 0), and the loss curve and the trained
 * weights equal the CPU's to f32 rounding. Three runs: one-hot targets
 * (cross entropy with probabilities), the same with the second pool an
 * avg_pool2d (the plugin's avg pool kernels), and class indices as
 * examples/lenet5.c gives them (eq, logical_not and where on i64 and bool
 * tensors, and gather). The last line gives the last run's loss curve
 * ends and median step time on each device (information, not a check).
 * Skipped (77) where there is no cuda:0, unless OAR_REQUIRE_CUDA is set
 * (scripts/gpu-check.sh): then a missing cuda:0 fails. */
#include "test.h"

#include <oar/optim.h>
#include <time.h>

#define STEPS 8
#define BATCH 64
#define NW (6 * 25 + 6 + 16 * 6 * 25 + 16 + 400 * 120 + 120 + 120 * 84 + 84 + 84 * 10 + 10)

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int64_t dev_fallbacks; /* ops of the device runs that went to the CPU */

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static oar_tensor *param(oar_device *d, int nd, const int64_t *shape, double scale) {
    oar_tensor *t = nd ? oar_mul_scalar(oar_randn(OAR_F32, nd, shape), scale) : NULL;
    t = oar_tensor_retain(oar_tensor_to(t, d));
    oar_tensor_set_requires_grad(t, true);
    return t;
}

static oar_tensor *zeros(oar_device *d, int64_t n) {
    oar_tensor *t = oar_tensor_retain(oar_full_on(OAR_F32, 1, &n, 0.0, d));
    oar_tensor_set_requires_grad(t, true);
    return t;
}

/* Trains from seed 5 on device d; fills losses[STEPS], the final weights
 * (host copies, NW floats) and *step_ms (the median step). avg: the second
 * pool is avg_pool2d. */
static void train(oar_device *d, int variant, double *losses, float *final, double *step_ms) {
    const bool avg = variant == 1, indices = variant == 2;
    oar_pool *outer = oar_pool_push();
    oar_manual_seed(5);
    int64_t xs[4] = {BATCH, 1, 28, 28};
    oar_tensor *x = oar_rand(OAR_F32, 4, xs);
    /* class: which of ten horizontal bands of the image is brightest */
    float *xv = malloc(BATCH * 784 * sizeof *xv), *onehot = calloc(BATCH * 10, sizeof *onehot);
    oar_tensor_to_host(x, xv, BATCH * 784 * sizeof *xv);
    for (int i = 0; i < BATCH; i++) {
        float s[10] = {0};
        for (int j = 0; j < 784; j++) s[(j / 28) * 10 / 28] += xv[i * 784 + j];
        int best = 0;
        for (int k = 1; k < 10; k++)
            if (s[k] > s[best]) best = k;
        onehot[i * 10 + best] = 1;
    }
    int64_t ys[2] = {BATCH, 10}, classes[BATCH], nb = BATCH;
    for (int i = 0; i < BATCH; i++)
        for (int k = 0; k < 10; k++)
            if (onehot[i * 10 + k] != 0) classes[i] = k;
    oar_tensor *y = indices ? oar_tensor_to(oar_tensor_from_data(classes, OAR_I64, 1, &nb), d)
                            : oar_tensor_to(oar_tensor_from_data(onehot, OAR_F32, 2, ys), d);
    free(xv);
    free(onehot);
    x = oar_tensor_to(x, d);
    const int64_t w1s[4] = {6, 1, 5, 5}, w2s[4] = {16, 6, 5, 5}, f1[2] = {400, 120}, f2[2] = {120, 84},
                  f3[2] = {84, 10};
    oar_tensor *w[10] = {param(d, 4, w1s, 0.2), zeros(d, 6),    param(d, 4, w2s, 0.08), zeros(d, 16),
                         param(d, 2, f1, 0.05), zeros(d, 120), param(d, 2, f2, 0.09), zeros(d, 84),
                         param(d, 2, f3, 0.1),  zeros(d, 10)};
    oar_optimizer *opt = oar_sgd_new(10, w, &(oar_sgd_options){.lr = 0.02, .momentum = 0.9});
    CHECK(opt != NULL);
    const int64_t one[2] = {1, 1}, two[2] = {2, 2}, zero[2] = {0, 0}, pad2[2] = {2, 2};
    double times[STEPS];
    oar_device_fallback_reset();
    for (int step = 0; step < STEPS && opt; step++) {
        double t0 = now();
        oar_pool *p = oar_pool_push();
        oar_tensor *h = oar_relu(oar_conv2d(x, w[0], w[1], one, pad2, one, 1));
        h = oar_max_pool2d(h, two, two, zero, one, false, NULL);
        h = oar_relu(oar_conv2d(h, w[2], w[3], one, zero, one, 1));
        h = avg ? oar_avg_pool2d(h, two, two, zero, false, true) : oar_max_pool2d(h, two, two, zero, one, false, NULL);
        h = oar_flatten(h, 1, -1);
        h = oar_relu(oar_add(oar_matmul(h, w[4]), w[5]));
        h = oar_relu(oar_add(oar_matmul(h, w[6]), w[7]));
        oar_tensor *logits = oar_add(oar_matmul(h, w[8]), w[9]);
        oar_tensor *loss = oar_cross_entropy(logits, y, NULL, -100, 0, OAR_REDUCTION_MEAN);
        CHECK(loss && oar_tensor_device(loss) == d);
        losses[step] = loss ? oar_tensor_item(loss) : NAN; /* (reads the loss: waits for the device) */
        CHECK(oar_backward(loss, NULL) == 0);
        CHECK(oar_optim_step(opt) == 0);
        oar_optim_zero_grad(opt);
        oar_pool_pop(p);
        CHECK(oar_device_synchronize(d) == 0);
        times[step] = now() - t0;
    }
    int64_t fallbacks = oar_device_fallback_count();
    if (fallbacks) fprintf(stderr, "%s: %lld ops ran on the CPU instead\n", oar_device_name(d), (long long)fallbacks);
    CHECK(fallbacks == 0);
    if (d != oar_device_cpu()) dev_fallbacks += fallbacks;
    qsort(times + 1, STEPS - 1, sizeof *times, cmp_d); /* (the first step: warm-up) */
    *step_ms = 1e3 * times[1 + (STEPS - 1) / 2];
    size_t off = 0;
    for (int i = 0; i < 10; i++) {
        size_t k = (size_t)oar_tensor_numel(w[i]);
        CHECK(off + k <= NW && oar_tensor_to_host(w[i], final + off, k * sizeof *final) == 0);
        off += k;
        oar_tensor_release(w[i]);
    }
    CHECK(off == NW);
    oar_optim_free(opt);
    oar_pool_pop(outer);
}

/* [--plugins DIR] [--device NAME]: the plugins' folder (default: this
 * build's) and the device (default cuda:0; another one checks this test
 * where there is no GPU, e.g. opencl:0, which has no avg pool kernel: its
 * avg-pool run must then fail on the fallbacks). */
int main(int argc, char **argv) {
    const char *dir = NULL, *name = "cuda:0";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--plugins")) dir = argv[i + 1];
        else if (!strcmp(argv[i], "--device")) name = argv[i + 1];
    }
    if (argc % 2 == 0) {
        fprintf(stderr, "usage: %s [--plugins DIR] [--device NAME]\n", argv[0]);
        return 2;
    }
#ifdef OAR_PLUGIN_BUILD_DIR
    if (!dir) dir = OAR_PLUGIN_BUILD_DIR;
#endif
    const char *req = getenv("OAR_REQUIRE_CUDA");
    bool required = req && *req && strcmp(req, "0");
    if (dir) {
        setenv("OAR_PLUGIN_PATH", dir, 1);
        setenv("OAR_PLUGIN_NO_INSTALL_DIR", "1", 1);
    }
    oar_device *d = oar_device_get(name);
    if (!d) {
        char report[4096];
        oar_device_report(report, sizeof report);
        printf("%s: no %s (%s)\n%s", required ? "FAIL" : "SKIP", name, oar_last_error(), report);
        return required ? 1 : 77;
    }
    oar_clear_error();
    static double lc[STEPS], ld[STEPS];
    static float wc[NW], wd[NW];
    double ms_cpu = 0, ms_dev = 0, worst = 0;
    static const char *const names[3][2] = {{"lenet5 cpu", "lenet5 device"},
                                            {"lenet5 (avg pool) cpu", "lenet5 (avg pool) device"},
                                            {"lenet5 (class indices) cpu", "lenet5 (class indices) device"}};
    for (int variant = 0; variant < 3; variant++) {
        test_current = names[variant][0];
        train(oar_device_cpu(), variant, lc, wc, &ms_cpu);
        test_current = names[variant][1];
        train(d, variant, ld, wd, &ms_dev);
        for (int i = 0; i < STEPS; i++) CHECK_NEAR(ld[i], lc[i], 2e-4 * (1 + fabs(lc[i])));
        worst = 0;
        for (int i = 0; i < NW; i++) worst = fmax(worst, fabs((double)wd[i] - wc[i]));
        CHECK_NEAR(worst, 0, 1e-3);
        CHECK(ld[STEPS - 1] < ld[0]);
    }
    int failed = test_summary();
    printf("lenet5 step (batch %d): loss %.4f -> %.4f on %s (cpu %.4f -> %.4f), max weight difference %.2g, "
           "%lld fallbacks; median step %.2f ms on %s, %.2f ms on the cpu\n",
           BATCH, ld[0], ld[STEPS - 1], oar_device_name(d), lc[0], lc[STEPS - 1], worst, (long long)dev_fallbacks, ms_dev, oar_device_name(d),
           ms_cpu);
    return failed;
}

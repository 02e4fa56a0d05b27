/* The data loader against the step it feeds: LeNet-5 trained on
 * Fashion-MNIST (batch 64, SGD with momentum, random crop with padding 2
 * and horizontal flips, as a demanding augmentation setup would), one
 * epoch per loader setting, and the share of the epoch the steps spent
 * waiting in oar_loader_next (oar_loader_wait_seconds). Target (issue 4):
 * under 5% with prefetch. The synchronous loader's share is printed for
 * comparison. There is no PyTorch peer: the figure is a share of oar's
 * own epoch. BENCH_STEPS limits the steps per epoch (default: all 937). */
#include <oar/oar.h>

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static oar_module *lenet(void) {
    return oar_sequential_new(
        12, (oar_module *[]){oar_conv2d_new(1, 6, 5, 1, 2, 1, 1, true), oar_relu_new(),
                             oar_max_pool2d_new(2, 2, 0), oar_conv2d_new(6, 16, 5, 1, 0, 1, 1, true),
                             oar_relu_new(), oar_max_pool2d_new(2, 2, 0), oar_flatten_new(1, -1),
                             oar_linear_new(400, 120, true), oar_relu_new(), oar_linear_new(120, 84, true),
                             oar_relu_new(), oar_linear_new(84, 10, true)});
}

/* One epoch (or `steps` steps); prints the wait share. */
static int epoch(oar_dataset *train, bool prefetch, int64_t steps) {
    oar_manual_seed(0);
    oar_module *m = lenet();
    oar_tensor *params[16];
    int np = oar_module_parameters(m, params, 16);
    oar_optimizer *opt = oar_sgd_new(np, params, &(oar_sgd_options){.lr = 0.02, .momentum = 0.9});
    oar_loader *l = oar_loader_new(train, &(oar_loader_options){
        .batch_size = 64, .shuffle = true, .seed = 1, .drop_last = true, .scale = 1 / 255.0, .mean = 0.2860,
        .std = 0.3530, .random_crop_padding = 2, .random_hflip = true, .prefetch = prefetch});
    if (!m || !opt || !l) return fprintf(stderr, "bench_loader: %s\n", oar_last_error()), 1;
    double t0 = now();
    int64_t n = 0;
    for (; n < steps; n++) {
        oar_pool *p = oar_pool_push();
        oar_tensor *x, *y;
        int r = oar_loader_next(l, &x, &y);
        if (r <= 0) {
            oar_pool_pop(p);
            if (r < 0) return fprintf(stderr, "bench_loader: %s\n", oar_last_error()), 1;
            break;
        }
        oar_optim_zero_grad(opt);
        oar_tensor *loss = oar_cross_entropy(oar_module_forward(m, x), y, NULL, -100, 0.0, OAR_REDUCTION_MEAN);
        if (!loss || oar_backward(loss, NULL) || oar_optim_step(opt))
            return fprintf(stderr, "bench_loader: %s\n", oar_last_error()), 1;
        oar_pool_pop(p);
    }
    double total = now() - t0, wait = oar_loader_wait_seconds(l);
    const char *mode = prefetch ? "prefetch" : "sync";
    printf("oar loader_%s_epoch %.3f s (%lld steps)\n", mode, total, (long long)n);
    printf("oar loader_%s_wait %.3f s\n", mode, wait);
    printf("oar loader_%s_wait_share %.2f %%\n", mode, 100 * wait / total);
    oar_loader_free(l);
    oar_optim_free(opt);
    oar_module_free(m);
    return 0;
}

int main(void) {
    int64_t steps = getenv("BENCH_STEPS") ? atoll(getenv("BENCH_STEPS")) : INT64_MAX;
    oar_dataset *train = oar_fashion_mnist_load(NULL, true);
    if (!train) return fprintf(stderr, "bench_loader: %s\n", oar_last_error()), 1;
    int st = epoch(train, true, steps) || epoch(train, false, steps);
    oar_dataset_free(train);
    return st;
}

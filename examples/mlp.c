/* A multilayer perceptron on Fashion-MNIST: 784-256-128-10 with ReLU,
 * built from oar's Sequential, Linear and ReLU modules, trained with Adam
 * (lr 1e-3, batch 64), evaluated on the 10,000 test images after each
 * epoch.
 *
 *     ./build/mlp
 *
 * Environment: OAR_EXAMPLE_EPOCHS (default 5), OAR_EXAMPLE_LIMIT (use only
 * the first N training and test images), OAR_EXAMPLE_DATA (folder of the
 * .gz files; default /usr/share/datasets/fashion-mnist). The last line is
 * "test accuracy: 0.XXXX". */
#include <oar/oar.h>
#include <oar/data.h>
#include <oar/nn.h>
#include <oar/optim.h>

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* Fashion-MNIST training-set pixel statistics (after scaling to [0, 1]). */
#define MEAN 0.2860
#define STD 0.3530

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int fail(const char *what) {
    fprintf(stderr, "mlp: %s: %s\n", what, oar_last_error());
    return 1;
}

static oar_module *make_model(void) {
    return oar_sequential_new(6, (oar_module *[]){oar_flatten_new(1, -1),
                                                  oar_linear_new(784, 256, true), oar_relu_new(),
                                                  oar_linear_new(256, 128, true), oar_relu_new(),
                                                  oar_linear_new(128, 10, true)});
}

/* Accuracy of m on ds (eval mode, no gradients), or -1 on error. */
static double evaluate(oar_module *m, const oar_dataset *ds) {
    oar_loader *ld = oar_loader_new(
        ds, &(oar_loader_options){.batch_size = 500, .scale = 1 / 255.0, .mean = MEAN, .std = STD});
    if (!ld) return -1;
    oar_module_train(m, false);
    oar_no_grad_push();
    int64_t correct = 0, total = 0;
    int r;
    for (;;) {
        oar_pool *p = oar_pool_push();
        oar_tensor *x, *y;
        r = oar_loader_next(ld, &x, &y);
        if (r == 1) {
            oar_tensor *pred = oar_argmax(oar_module_forward(m, x), 1, false);
            double c = oar_tensor_item(oar_sum(oar_eq(pred, y), 0, NULL, false));
            if (c != c) r = -1;
            correct += (int64_t)c;
            total += oar_tensor_shape(y)[0];
        }
        oar_pool_pop(p);
        if (r != 1) break;
    }
    oar_no_grad_pop();
    oar_module_train(m, true);
    oar_loader_free(ld);
    return r < 0 || total == 0 ? -1 : (double)correct / (double)total;
}

/* The first `limit` samples of ds (all if limit <= 0); frees ds. */
static oar_dataset *limit_to(oar_dataset *ds, int64_t limit) {
    if (!ds || limit <= 0 || limit >= oar_dataset_size(ds)) return ds;
    oar_dataset *s = oar_dataset_slice(ds, 0, limit);
    oar_dataset_free(ds);
    return s;
}

int main(void) {
    int epochs = getenv("OAR_EXAMPLE_EPOCHS") ? atoi(getenv("OAR_EXAMPLE_EPOCHS")) : 5;
    int64_t limit = getenv("OAR_EXAMPLE_LIMIT") ? atoll(getenv("OAR_EXAMPLE_LIMIT")) : 0;
    const char *dir = getenv("OAR_EXAMPLE_DATA");
    if (epochs < 1) epochs = 1;
    setvbuf(stdout, NULL, _IOLBF, 0);

    oar_dataset *train = limit_to(oar_fashion_mnist_load(dir, true), limit);
    oar_dataset *test = limit_to(oar_fashion_mnist_load(dir, false), limit);
    if (!train || !test) return fail("loading Fashion-MNIST");

    oar_manual_seed(0);
    oar_module *model = make_model();
    if (!model) return fail("building the model");
    oar_tensor *params[16];
    int np = oar_module_parameters(model, params, 16);
    oar_optimizer *opt = oar_adam_new(np, params, &(oar_adam_options){.lr = 1e-3});
    oar_loader *loader = oar_loader_new(train, &(oar_loader_options){.batch_size = 64,
                                                                     .shuffle = true,
                                                                     .seed = 1,
                                                                     .scale = 1 / 255.0,
                                                                     .mean = MEAN,
                                                                     .std = STD});
    if (!opt || !loader) return fail("setting up training");
    printf("oar mlp: %lld train / %lld test images, %lld parameters, %d epochs\n",
           (long long)oar_dataset_size(train), (long long)oar_dataset_size(test),
           (long long)oar_module_num_elements(model), epochs);

    double acc = 0, t_start = now();
    for (int epoch = 1; epoch <= epochs; epoch++) {
        double loss_sum = 0, t0 = now();
        int64_t n = 0;
        for (;;) {
            oar_pool *pool = oar_pool_push();
            oar_tensor *x, *y;
            int r = oar_loader_next(loader, &x, &y);
            if (r != 1) {
                oar_pool_pop(pool);
                if (r < 0) return fail("loading a batch");
                break;
            }
            oar_tensor *loss = oar_cross_entropy(oar_module_forward(model, x), y, NULL, -100, 0.0,
                                                 OAR_REDUCTION_MEAN);
            if (!loss || oar_backward(loss, NULL) || oar_optim_step(opt)) {
                oar_pool_pop(pool);
                return fail("training step");
            }
            oar_optim_zero_grad(opt);
            loss_sum += oar_tensor_item(loss);
            n++;
            oar_pool_pop(pool);
        }
        acc = evaluate(model, test);
        if (acc < 0) return fail("evaluating");
        printf("epoch %d: train loss %.4f, test accuracy %.4f (%.1f s)\n", epoch,
               loss_sum / (double)(n ? n : 1), acc, now() - t0);
    }
    printf("trained in %.1f s\n", now() - t_start);
    oar_loader_free(loader);
    oar_optim_free(opt);
    oar_module_free(model);
    oar_dataset_free(train);
    oar_dataset_free(test);
    printf("test accuracy: %.4f\n", acc);
    return 0;
}

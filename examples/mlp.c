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
    oar_loader_options lo = {.batch_size = 64, .shuffle = true, .seed = 1, .scale = 1 / 255.0,
                             .mean = MEAN, .std = STD};
    oar_loader *loader = oar_loader_new(train, &lo);
    lo.batch_size = 500;
    lo.shuffle = false;
    oar_loader *eval = oar_loader_new(test, &lo);
    if (!opt || !loader || !eval) return fail("setting up training");
    printf("oar mlp: %lld train / %lld test images, %lld parameters, %d epochs\n",
           (long long)oar_dataset_size(train), (long long)oar_dataset_size(test),
           (long long)oar_module_num_elements(model), epochs);

    /* cross entropy, an evaluation of test accuracy after each epoch, progress lines */
    oar_fit_result r;
    double t_start = now();
    if (oar_fit(model, opt, loader, &(oar_fit_options){.epochs = epochs, .eval_loader = eval,
                                                       .accuracy = true}, &r))
        return fail("training");
    printf("trained in %.1f s\n", now() - t_start);
    oar_loader_free(eval);
    oar_loader_free(loader);
    oar_optim_free(opt);
    oar_module_free(model);
    oar_dataset_free(train);
    oar_dataset_free(test);
    printf("test accuracy: %.4f\n", r.val_acc);
    return 0;
}

/* A small ResNet on Fashion-MNIST, written the way a user defines a module
 * of their own: a C struct holding the children's pointers, a forward
 * function that reads it through oar_module_ctx, and the children
 * registered with oar_module_add_child so their parameters get dotted names
 * ("layer2.0.conv1.weight") and the optimizer and checkpoints find them.
 *
 * Stem conv 3x3 1->16 + batch norm + ReLU, three stages of one BasicBlock
 * each (16, 32 and 64 channels; the last two halve the resolution, with a
 * 1x1 projection shortcut), global average pooling, a linear classifier.
 * Trained with Adam (lr 2e-3, batch 64), evaluated on the 10,000 test
 * images after each epoch.
 *
 *     ./build/resnet
 *
 * Environment: OAR_EXAMPLE_EPOCHS (default 2), OAR_EXAMPLE_LIMIT (use only
 * the first N training and test images), OAR_EXAMPLE_DATA (folder of the
 * .gz files; default /usr/share/datasets/fashion-mnist). The last line is
 * "test accuracy: 0.XXXX". */
#include <oar/oar.h>
#include <oar/data.h>
#include <oar/nn.h>
#include <oar/optim.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
    fprintf(stderr, "resnet: %s: %s\n", what, oar_last_error());
    return 1;
}

/* ---- the model ------------------------------------------------------------ */

/* Adds child c to m under name; returns c (borrowed: m owns it) or NULL. */
static oar_module *add(oar_module *m, const char *name, oar_module *c) {
    return m && oar_module_add_child(m, name, c) == 0 ? c : NULL;
}

/* A BasicBlock (He et al. 2016): relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)).
 * The pointers are borrowed: the module owns the children. */
typedef struct basic_block {
    oar_module *conv1, *bn1, *conv2, *bn2;
    oar_module *downsample; /* 1x1 conv + batch norm, or NULL for the identity */
} basic_block;

static oar_tensor *basic_block_forward(oar_module *m, oar_tensor *x) {
    basic_block *b = oar_module_ctx(m);
    oar_tensor *h = oar_relu(oar_module_forward(b->bn1, oar_module_forward(b->conv1, x)));
    h = oar_module_forward(b->bn2, oar_module_forward(b->conv2, h));
    oar_tensor *shortcut = b->downsample ? oar_module_forward(b->downsample, x) : x;
    return oar_relu(oar_add(h, shortcut)); /* temporaries belong to the caller's pool */
}

static void free_ctx(void *ctx) { free(ctx); }

static oar_module *basic_block_new(int64_t in, int64_t out, int64_t stride) {
    basic_block *b = calloc(1, sizeof *b);
    oar_module *m = b ? oar_module_new("BasicBlock", basic_block_forward, b, free_ctx) : NULL;
    if (!m) {
        free(b);
        return NULL;
    }
    b->conv1 = add(m, "conv1", oar_conv2d_new(in, out, 3, stride, 1, 1, 1, false));
    b->bn1 = add(m, "bn1", oar_batch_norm2d_new(out, 1e-5, 0.1, true));
    b->conv2 = add(m, "conv2", oar_conv2d_new(out, out, 3, 1, 1, 1, 1, false));
    b->bn2 = add(m, "bn2", oar_batch_norm2d_new(out, 1e-5, 0.1, true));
    bool ok = b->conv1 && b->bn1 && b->conv2 && b->bn2;
    if (ok && (stride != 1 || in != out)) {
        b->downsample =
            add(m, "downsample",
                oar_sequential_new(
                    2, (oar_module *[]){oar_conv2d_new(in, out, 1, stride, 0, 1, 1, false),
                                        oar_batch_norm2d_new(out, 1e-5, 0.1, true)}));
        ok = b->downsample != NULL;
    }
    if (!ok) {
        oar_module_free(m); /* frees the children added so far and b */
        return NULL;
    }
    return m;
}

typedef struct resnet {
    oar_module *conv1, *bn1, *layers[3], *fc;
} resnet;

static oar_tensor *resnet_forward(oar_module *m, oar_tensor *x) {
    resnet *r = oar_module_ctx(m);
    x = oar_relu(oar_module_forward(r->bn1, oar_module_forward(r->conv1, x))); /* [N, 16, 28, 28] */
    for (int i = 0; i < 3; i++)
        x = oar_module_forward(r->layers[i], x);  /* [N, 64, 7, 7] */
    x = oar_mean(x, 2, (int64_t[]){2, 3}, false); /* [N, 64] */
    return oar_module_forward(r->fc, x);
}

static oar_module *make_model(void) {
    resnet *r = calloc(1, sizeof *r);
    oar_module *m = r ? oar_module_new("ResNet", resnet_forward, r, free_ctx) : NULL;
    if (!m) {
        free(r);
        return NULL;
    }
    r->conv1 = add(m, "conv1", oar_conv2d_new(1, 16, 3, 1, 1, 1, 1, false));
    r->bn1 = add(m, "bn1", oar_batch_norm2d_new(16, 1e-5, 0.1, true));
    bool ok = r->conv1 && r->bn1;
    const int64_t width[4] = {16, 16, 32, 64};
    for (int i = 0; i < 3 && ok; i++) {
        char name[16];
        snprintf(name, sizeof name, "layer%d", i + 1);
        r->layers[i] =
            add(m, name,
                oar_sequential_new(
                    1, (oar_module *[]){basic_block_new(width[i], width[i + 1], i == 0 ? 1 : 2)}));
        ok = r->layers[i] != NULL;
    }
    r->fc = ok ? add(m, "fc", oar_linear_new(64, 10, true)) : NULL;
    if (!r->fc) {
        oar_module_free(m);
        return NULL;
    }
    return m;
}

/* The first `limit` samples of ds (all if limit <= 0); frees ds. */
static oar_dataset *limit_to(oar_dataset *ds, int64_t limit) {
    if (!ds || limit <= 0 || limit >= oar_dataset_size(ds)) return ds;
    oar_dataset *s = oar_dataset_slice(ds, 0, limit);
    oar_dataset_free(ds);
    return s;
}

int main(void) {
    int epochs = getenv("OAR_EXAMPLE_EPOCHS") ? atoi(getenv("OAR_EXAMPLE_EPOCHS")) : 2;
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
    oar_tensor *params[64];
    int np = oar_module_parameters(model, params, 64);
    oar_optimizer *opt = oar_adam_new(np, params, &(oar_adam_options){.lr = 2e-3});
    oar_loader_options lo = {.batch_size = 64, .shuffle = true, .seed = 1, .scale = 1 / 255.0,
                             .mean = MEAN, .std = STD};
    oar_loader *loader = oar_loader_new(train, &lo);
    lo.batch_size = 500;
    lo.shuffle = false;
    oar_loader *eval = oar_loader_new(test, &lo);
    if (!opt || !loader || !eval) return fail("setting up training");
    printf("oar resnet: %lld train / %lld test images, %lld parameters, %d epochs\n",
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

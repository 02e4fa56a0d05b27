/* A small Vision Transformer (Dosovitskiy et al. 2020) on Fashion-MNIST.
 *
 *     ./build/vit
 *
 * Model: each 28 x 28 image is cut into 16 patches of 7 x 7 (a reshape and
 * a permute), each patch flattened and mapped to d 64 by a Linear; a
 * learned class token is put in front and learned position embeddings are
 * added (both N(0, 0.02^2)); 4 pre-norm Transformer encoder layers (4
 * heads, feed-forward 128, GELU, no dropout); a final LayerNorm; a Linear
 * head on the class token. PyTorch's default initialisation elsewhere.
 *
 * Training: AdamW (lr 2e-3, weight decay 0.05), linear warm-up over the
 * first 5% of the steps then cosine decay to a tenth, gradient clipping at
 * 1, cross entropy. Each batch draws its images with replacement from the
 * 60,000 training images by splitmix64 from seed 1234, pixels scaled to
 * [0, 1] and normalized by the training set's mean and std. Then the
 * accuracy on the test images.
 *
 * examples/ref/vit.py is the same program in PyTorch (same batches in the
 * same order, same schedule), for comparing the test accuracy.
 *
 * Then int8: the trained model traced (batches of 500) and quantized by
 * oar_graph_quantize (every Linear's weight int8 per output channel, its
 * input uint8, calibrated min-max on 1000 training images); the f32 and
 * int8 graphs' predictors scored on the same test images.
 *
 * Environment: OAR_EXAMPLE_STEPS (1500), OAR_EXAMPLE_BATCH (128),
 * OAR_EXAMPLE_TEST (test images scored, 10000), OAR_EXAMPLE_DATA (folder
 * of the .gz files; default /usr/share/datasets/fashion-mnist). The last
 * line is "test accuracy: 0.XXXX". */
#include <oar/oar.h>
#include <oar/data.h>
#include <oar/nn.h>
#include <oar/optim.h>
#include <oar/graph.h>
#include <oar/infer.h>
#include <oar/quant.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

enum {
    IMG = 28,
    PATCH = 7,
    GRID = IMG / PATCH,
    NPATCH = GRID * GRID,
    D = 64,
    HEADS = 4,
    LAYERS = 4,
    FF = 128,
    CLASSES = 10
};

/* Fashion-MNIST training-set pixel statistics (after scaling to [0, 1]). */
#define MEAN 0.2860
#define STD 0.3530

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int fail(const char *what) {
    fprintf(stderr, "vit: %s: %s\n", what, oar_last_error());
    return 1;
}

static double env_num(const char *name, double def) {
    const char *v = getenv(name);
    return v && *v ? atof(v) : def;
}

/* splitmix64: the same stream as the PyTorch twin draws. */
static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* ---- the model: a user-defined module with its own parameters and children */

/* x [B, 1, 28, 28] -> logits [B, 10] */
static oar_tensor *vit_forward(oar_module *m, oar_tensor *x) {
    int64_t B = oar_tensor_dim(x, 0);
    /* [B, 1, 28, 28] -> [B, 4, 7, 4, 7] -> [B, 4, 4, 7, 7] -> [B, 16, 49] patches, row by row */
    int64_t split[5] = {B, GRID, PATCH, GRID, PATCH}, order[5] = {0, 1, 3, 2, 4},
            flat[3] = {B, NPATCH, PATCH * PATCH};
    oar_tensor *patches = oar_reshape(oar_permute(oar_reshape(x, 5, split), order), 3, flat);
    oar_tensor *tokens = oar_module_forward(oar_module_child(m, "patch_embed"), patches);
    int64_t cls_shape[3] = {B, 1, D};
    oar_tensor *cls = oar_expand(oar_module_get(m, "cls_token"), 3, cls_shape);
    oar_tensor *seq =
        oar_add(oar_concat(2, (oar_tensor *[]){cls, tokens}, 1), oar_module_get(m, "pos_embed"));
    seq = oar_module_forward(oar_module_child(m, "layers"), seq);
    seq = oar_module_forward(oar_module_child(m, "norm"), seq);
    int64_t pooled[2] = {B, D};
    oar_tensor *first = oar_reshape(oar_slice(seq, 1, 0, 1, 1), 2, pooled); /* the class token */
    return oar_module_forward(oar_module_child(m, "head"), first);
}

static oar_module *vit_new(void) {
    oar_module *m = oar_module_new("ViT", vit_forward, NULL, NULL);
    if (!m) return NULL;
    oar_module *layers = oar_sequential_new(0, NULL);
    for (int i = 0; i < LAYERS; i++)
        oar_sequential_append(layers,
                              oar_transformer_encoder_layer_new(
                                  D, HEADS,
                                  &(oar_transformer_options){.dim_feedforward = FF,
                                                             .activation = OAR_ACTIVATION_GELU,
                                                             .norm_first = true}));
    /* the module retains its parameters; the pool releases our references */
    oar_pool *pool = oar_pool_push();
    int64_t cls_shape[3] = {1, 1, D}, pos_shape[3] = {1, NPATCH + 1, D}, d = D;
    oar_tensor *cls = oar_zeros(OAR_F32, 3, cls_shape), *pos = oar_zeros(OAR_F32, 3, pos_shape);
    int bad = !cls || !pos || oar_init_normal_(cls, 0, 0.02) || oar_init_normal_(pos, 0, 0.02) ||
              oar_module_add_parameter(m, "cls_token", cls) ||
              oar_module_add_parameter(m, "pos_embed", pos);
    oar_pool_pop(pool);
    if (bad) {
        oar_module_free(layers);
        oar_module_free(m);
        return NULL;
    }
    /* the parent takes each child, freeing it if adding fails */
    if (oar_module_add_child(m, "layers", layers) ||
        oar_module_add_child(m, "patch_embed", oar_linear_new(PATCH * PATCH, D, true)) ||
        oar_module_add_child(m, "norm", oar_layer_norm_new(1, &d, 1e-5, true)) ||
        oar_module_add_child(m, "head", oar_linear_new(D, CLASSES, true))) {
        oar_module_free(m);
        return NULL;
    }
    return m;
}

/* ---- data ---------------------------------------------------------------- */

/* Images idx[0..b-1] of ds, normalized, as *x [b, 1, 28, 28] and labels *y [b]. */
static int batch_of(const oar_dataset *ds, const int64_t *idx, int64_t b, float *buf, int64_t *lab,
                    oar_tensor **x, oar_tensor **y) {
    const uint8_t *pix = oar_tensor_data(oar_dataset_x(ds));
    const int64_t *labels = oar_tensor_data(oar_dataset_y(ds));
    for (int64_t i = 0; i < b; i++) {
        for (int64_t j = 0; j < IMG * IMG; j++)
            buf[i * IMG * IMG + j] =
                (float)(((double)pix[idx[i] * IMG * IMG + j] / 255.0 - MEAN) / STD);
        lab[i] = labels[idx[i]];
    }
    int64_t shape[4] = {b, 1, IMG, IMG};
    *x = oar_tensor_from_data(buf, OAR_F32, 4, shape);
    *y = oar_tensor_from_data(lab, OAR_I64, 1, &b);
    return *x && *y ? 0 : 1;
}

static double lr_at(int64_t step, int64_t steps, double lr_max) {
    int64_t warm = steps / 20 > 1 ? steps / 20 : 1;
    if (step < warm) return lr_max * (double)(step + 1) / (double)warm;
    double lo = lr_max / 10, span = (double)(steps - warm > 1 ? steps - warm : 1);
    return lo + 0.5 * (lr_max - lo) * (1 + cos(M_PI * (double)(step - warm) / span));
}

/* Accuracy of predictor p on test images [0, n), 500 at a time (n a
 * multiple of 500), or -1. */
static double predictor_accuracy(oar_predictor *p, const oar_dataset *test, int64_t n, float *buf, int64_t *lab,
                                 int64_t *idx) {
    int64_t correct = 0;
    for (int64_t k = 0; k < n; k += 500) {
        for (int64_t j = 0; j < 500; j++) idx[j] = k + j;
        oar_pool *pool = oar_pool_push();
        oar_tensor *x, *y, *logits = NULL;
        double c = -1;
        if (!batch_of(test, idx, 500, buf, lab, &x, &y) && !oar_predictor_run(p, &x, &logits)) {
            c = oar_tensor_item(oar_sum(oar_cast(oar_eq(oar_argmax(logits, 1, false), y), OAR_I64), 0, NULL, false));
            oar_tensor_release(logits);
        }
        oar_pool_pop(pool);
        if (!(c >= 0)) return -1;
        correct += (int64_t)c;
    }
    return (double)correct / (double)n;
}

/* The int8 line: the model (eval mode) traced, a copy quantized, both
 * served by predictors and scored on the first n_test test images (rounded
 * down to 500s). 0, or -1 with the error set. */
static int int8_accuracy(oar_module *model, const oar_dataset *train, const oar_dataset *test, int64_t n_test,
                         float *buf, int64_t *lab, int64_t *idx) {
    int64_t n = n_test / 500 * 500;
    if (n == 0 || oar_dataset_size(train) < 1000) return 0; /* (too few images for batches of 500) */
    oar_graph_input_spec spec = {.name = "x", .dtype = OAR_F32, .ndim = 4, .shape = {500, 1, IMG, IMG}};
    oar_graph *g = oar_trace_module(model, &spec), *q = g ? oar_graph_clone(g) : NULL;
    int layers = -1;
    if (q) {
        oar_pool *pool = oar_pool_push();
        oar_tensor *calib[2], *y;
        for (int b = 0; b < 2; b++) {
            for (int64_t j = 0; j < 500; j++) idx[j] = 500 * b + j;
            /* (batch_of wraps buf: each batch gets a copy) */
            calib[b] = batch_of(train, idx, 500, buf, lab, &calib[b], &y) ? NULL : oar_clone(calib[b]);
        }
        if (calib[0] && calib[1])
            layers = oar_graph_quantize(q, &(oar_quantize_config){.n_batches = 2, .batches = calib});
        oar_pool_pop(pool);
    }
    oar_predictor *pf = layers >= 0 ? oar_predictor_from_graph(g, NULL) : NULL;
    oar_predictor *pq = pf ? oar_predictor_from_graph(q, NULL) : NULL;
    oar_graph_free(g);
    oar_graph_free(q);
    oar_no_grad_push();
    double af = pq ? predictor_accuracy(pf, test, n, buf, lab, idx) : -1;
    double aq = af >= 0 ? predictor_accuracy(pq, test, n, buf, lab, idx) : -1;
    oar_no_grad_pop();
    oar_predictor_free(pq);
    oar_predictor_free(pf);
    if (aq < 0) return -1;
    printf("int8 predictor (%d layers quantized): test accuracy %.4f, f32 predictor %.4f (%+.2f points, %lld "
           "images)\n", layers, aq, af, 100 * (aq - af), (long long)n);
    return 0;
}

int main(void) {
    int64_t steps = (int64_t)env_num("OAR_EXAMPLE_STEPS", 1500);
    int64_t batch = (int64_t)env_num("OAR_EXAMPLE_BATCH", 128);
    int64_t n_test = (int64_t)env_num("OAR_EXAMPLE_TEST", 10000);
    const char *dir = getenv("OAR_EXAMPLE_DATA");
    if (steps < 1 || batch < 1 || n_test < 1) {
        fprintf(stderr, "vit: steps, batch and test must be positive\n");
        return 1;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    oar_dataset *train = oar_fashion_mnist_load(dir, true);
    oar_dataset *test = oar_fashion_mnist_load(dir, false);
    if (!train || !test) return fail("loading Fashion-MNIST");
    int64_t n_train = oar_dataset_size(train);
    if (n_test > oar_dataset_size(test)) n_test = oar_dataset_size(test);

    oar_manual_seed(0);
    oar_module *model = vit_new();
    if (!model) return fail("building the model");
    oar_tensor *params[128];
    int np = oar_module_parameters(model, params, 128);
    double lr_max = 2e-3;
    oar_optimizer *opt =
        oar_adamw_new(np, params, &(oar_adam_options){.lr = lr_max, .weight_decay = 0.05});
    if (!opt) return fail("making the optimizer");
    printf("oar vit: %lld train / %lld test images, %lld parameters, %lld steps of %lld\n",
           (long long)n_train, (long long)n_test, (long long)oar_module_num_elements(model),
           (long long)steps, (long long)batch);

    int64_t cap = batch > 500 ? batch : 500;
    int64_t *idx = malloc((size_t)cap * sizeof *idx), *lab = malloc((size_t)cap * sizeof *lab);
    float *buf = malloc((size_t)(cap * IMG * IMG) * sizeof *buf);
    if (!idx || !lab || !buf) return fail("allocating batches");
    uint64_t rng = 1234;
    double t0 = now();
    for (int64_t step = 0; step < steps; step++) {
        oar_pool *pool = oar_pool_push();
        for (int64_t i = 0; i < batch; i++)
            idx[i] = (int64_t)(splitmix(&rng) % (uint64_t)n_train);
        oar_tensor *x, *y;
        oar_optim_set_lr(opt, lr_at(step, steps, lr_max));
        oar_tensor *loss = batch_of(train, idx, batch, buf, lab, &x, &y)
                               ? NULL
                               : oar_cross_entropy(oar_module_forward(model, x), y, NULL, -100, 0.0,
                                                   OAR_REDUCTION_MEAN);
        if (!loss || oar_backward(loss, NULL) || oar_clip_grad_norm(np, params, 1.0, NULL) ||
            oar_optim_step(opt)) {
            oar_pool_pop(pool);
            return fail("training step");
        }
        oar_optim_zero_grad(opt);
        double l = oar_tensor_item(loss);
        oar_pool_pop(pool);
        if (step % 50 == 0 || step == steps - 1)
            printf("step %lld/%lld loss %.4f (%.0f ms/step)\n", (long long)(step + 1),
                   (long long)steps, l, (now() - t0) / (double)(step + 1) * 1e3);
    }
    double train_s = now() - t0;

    /* accuracy on the first n_test test images, 500 at a time */
    oar_module_train(model, false);
    oar_no_grad_push();
    int64_t correct = 0;
    for (int64_t k = 0; k < n_test; k += 500) {
        int64_t b = n_test - k < 500 ? n_test - k : 500;
        for (int64_t j = 0; j < b; j++)
            idx[j] = k + j;
        oar_pool *pool = oar_pool_push();
        oar_tensor *x, *y;
        oar_tensor *hit = batch_of(test, idx, b, buf, lab, &x, &y)
                              ? NULL
                              : oar_eq(oar_argmax(oar_module_forward(model, x), 1, false), y);
        oar_tensor *n = oar_sum(oar_cast(hit, OAR_I64), 0, NULL, false);
        if (!n) return fail("evaluating");
        correct += (int64_t)oar_tensor_item(n);
        oar_pool_pop(pool);
    }
    oar_no_grad_pop();
    if (int8_accuracy(model, train, test, n_test, buf, lab, idx)) return fail("quantizing the model to int8");
    printf("oar training %.1f s (%.0f ms/step)\n", train_s, train_s / (double)steps * 1e3);
    printf("test accuracy: %.4f\n", (double)correct / (double)n_test);

    free(buf);
    free(lab);
    free(idx);
    oar_optim_free(opt);
    oar_module_free(model);
    oar_dataset_free(train);
    oar_dataset_free(test);
    return 0;
}

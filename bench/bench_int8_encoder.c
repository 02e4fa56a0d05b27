/* The int8 predictor on a whole Transformer encoder, attention included,
 * against oar's own f32 predictor (issue 24, item 5: <= 0.4x at batch 1
 * and 64). Four post-norm encoder layers (d_model 256, 4 heads, feed-forward
 * 1024, ReLU) over 32 tokens, random weights: the latency does not depend
 * on them. The f32 model is traced and served by a predictor; a copy is
 * quantized by oar_graph_quantize (min-max, four calibration batches of 16
 * random samples) and served the same way, which folds its layers into
 * qlinear nodes (fuse_qlinear). Attention's two batched products, softmax
 * and the norms stay f32. The peer is bench/peer/int8_encoder.py (ONNX
 * Runtime on PyTorch's nn.TransformerEncoder of the same sizes, f32 and
 * its own quantize_static), run after this in bench/run.sh int8.
 *
 * Prints "oar <metric> <value> <unit>"; median ms of 300 runs at batch 1,
 * 30 at batch 64, after 3 warm-up runs. */
#include <oar/oar.h>

#include "bench_median.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

enum { LAYERS = 4, D = 256, HEADS = 4, FF = 1024, TOKENS = 32 };

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void die(const char *what) {
    fprintf(stderr, "bench_int8_encoder: %s: %s\n", what, oar_last_error());
    exit(1);
}

/* x [samples, TOKENS, D] uniform in [-1, 1) */
static oar_tensor *tokens(int64_t samples) {
    const int64_t shape[3] = {samples, TOKENS, D};
    oar_tensor *x = oar_rand(OAR_F32, 3, shape);
    oar_tensor *y = x ? oar_sub_scalar(oar_mul_scalar(x, 2.0), 1.0) : NULL;
    if (!y) die("input");
    return y;
}

static double time_pred(oar_predictor *p, oar_tensor *x, int reps) {
    double *t = malloc((size_t)reps * sizeof *t);
    if (!t) die("malloc");
    for (int r = -3; r < reps; r++) {
        oar_tensor *y = NULL;
        double t0 = now();
        if (oar_predictor_run(p, &x, &y)) die("run");
        if (r >= 0) t[r] = 1e3 * (now() - t0);
        oar_tensor_release(y);
    }
    double med = bench_median(t, reps);
    free(t);
    return med;
}

int main(void) {
    oar_manual_seed(42);
    oar_pool *pool = oar_pool_push();
    oar_module *layers[LAYERS];
    for (int i = 0; i < LAYERS; i++)
        if (!(layers[i] = oar_transformer_encoder_layer_new(D, HEADS, &(oar_transformer_options){.dim_feedforward = FF})))
            die("layer");
    oar_module *net = oar_sequential_new(LAYERS, layers);
    if (!net) die("model");
    oar_module_train(net, false);
    oar_no_grad_push();
    /* the batch dim dynamic: attention's reshapes ([N * heads, L, E / heads]) are multiples of it */
    oar_graph_input_spec spec = {.name = "x", .dtype = OAR_F32, .ndim = 3, .shape = {-1, TOKENS, D}};
    oar_graph *g = oar_trace_module(net, &spec), *gq = g ? oar_graph_clone(g) : NULL;
    if (!gq) die("trace");
    oar_tensor *calib[4];
    for (int k = 0; k < 4; k++) calib[k] = tokens(16);
    int nq = oar_graph_quantize(gq, &(oar_quantize_config){.n_batches = 4, .batches = calib});
    if (nq <= 0) die("quantize");
    oar_predictor_config cfg = {.optimize = true};
    oar_predictor *pf = oar_predictor_from_graph(g, &cfg), *pq = pf ? oar_predictor_from_graph(gq, &cfg) : NULL;
    if (!pq) die("predictor");
    static const int batches[2] = {1, 64};
    for (int i = 0; i < 2; i++) {
        oar_tensor *x = tokens(batches[i]);
        int reps = batches[i] == 1 ? 300 : 30;
        double f = time_pred(pf, x, reps), q = time_pred(pq, x, reps);
        printf("oar encoder_predictor_f32_b%d %.4f ms\n", batches[i], f);
        printf("oar encoder_predictor_int8_b%d %.4f ms (%d layers quantized)\n", batches[i], q, nq);
        printf("oar encoder_predictor_int8_over_f32_b%d %.3f x\n", batches[i], q / f);
    }
    oar_predictor_free(pf);
    oar_predictor_free(pq);
    oar_graph_free(g);
    oar_graph_free(gq);
    oar_no_grad_pop();
    oar_module_free(net);
    oar_pool_pop(pool);
    return 0;
}

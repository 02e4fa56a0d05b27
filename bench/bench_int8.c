/* int8 inference against f32, both in oar, and the same against ONNX
 * Runtime (bench/peer/int8.py: the same architectures, f32 and
 * quantize_static QDQ int8, min-max calibration). Two models of linear
 * layers: the MLP 784-512-512-10 (as bench_predictor's) and a transformer
 * encoder's feed-forward block, 32 tokens of width 256 -> 1024 relu -> 256
 * per sample. int8: activations uint8 per tensor (min-max over four
 * calibration batches), weights int8 per output channel, each layer
 * oar_qlinear (oar_qmatmul on oneDNN's VNNI kernel, then the scale and
 * bias), requantized between layers, as eager calls; then the same
 * models traced, served by a compiled predictor in f32 and after
 * oar_graph_quantize (the int8 predictor path, calibrated on the same four
 * batches; the predictor's fuse_qlinear pass makes each layer one qlinear
 * node: VNNI on pre-packed weights, scale, bias, relu and the next layer's
 * quantize in the epilogue). Prints the median latency at batch 1 and batch 64, and the
 * int8 / f32 ratio; plus the raw product, qmatmul against f32 matmul. Threads: the process's OpenMP threads (2 here). */
#include <oar/oar.h>
#include <oar/infer.h>
#include <oar/quant.h>
#include <oar/profiler.h>

#include "bench_median.h"

#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t rng = 42;
static double uniform(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return ((rng >> 11) + 0.5) / 9007199254740992.0;
}

static oar_tensor *rand_tensor(int64_t r, int64_t c, double a) {
    double *v = malloc((size_t)(r * c) * sizeof *v);
    for (int64_t i = 0; i < r * c; i++) v[i] = a * (2 * uniform() - 1);
    oar_tensor *t = oar_cast(oar_tensor_from_data(v, OAR_F64, 2, (int64_t[]){r, c}), OAR_F32);
    free(v);
    return t;
}

#define MAX_LAYERS 3
typedef struct {
    int n;
    int64_t dims[MAX_LAYERS + 1];
    oar_tensor *w[MAX_LAYERS], *b[MAX_LAYERS];      /* f32 [k, n], [n] */
    oar_tensor *wq[MAX_LAYERS], *ws[MAX_LAYERS];    /* int8, scales */
    double sx[MAX_LAYERS];                          /* each layer's input: uint8 */
    int64_t zx[MAX_LAYERS];
    int64_t rows_per_sample;                        /* (the predictor rows' inputs) */
} model;

static oar_tensor *forward_f32(const model *m, oar_tensor *x) {
    for (int l = 0; l < m->n; l++) {
        x = oar_add(oar_matmul(x, m->w[l]), m->b[l]);
        if (l < m->n - 1) x = oar_relu(x);
    }
    return x;
}

static oar_tensor *forward_int8(const model *m, oar_tensor *x) {
    for (int l = 0; l < m->n; l++) {
        oar_tensor *xq = oar_quantize_per_tensor(x, m->sx[l], m->zx[l], OAR_U8);
        x = oar_qlinear(xq, m->sx[l], m->zx[l], m->wq[l], m->ws[l], m->b[l]);
        if (l < m->n - 1) x = oar_relu(x);
    }
    return x;
}

static void build(model *m, int n, const int64_t *dims, int64_t rows_per_sample) {
    m->n = n;
    for (int l = 0; l <= n; l++) m->dims[l] = dims[l];
    for (int l = 0; l < n; l++) {
        m->w[l] = oar_tensor_retain(rand_tensor(dims[l], dims[l + 1], sqrt(3.0 / (double)dims[l])));
        m->b[l] = oar_tensor_retain(oar_full(OAR_F32, 1, &dims[l + 1], 0.01));
        oar_quantize_weight(m->w[l], 1, &m->wq[l], &m->ws[l]);
        oar_tensor_retain(m->wq[l]), oar_tensor_retain(m->ws[l]);
    }
    /* calibration: min-max of each layer's input over four batches of 16 samples */
    oar_calib_observer *o[MAX_LAYERS];
    for (int l = 0; l < n; l++) o[l] = oar_calib_observer_new(OAR_CALIB_MINMAX, 0, 0);
    for (int b = 0; b < 4; b++) {
        oar_pool *pool = oar_pool_push();
        oar_tensor *x = rand_tensor(16 * rows_per_sample, dims[0], 1.0);
        for (int l = 0; l < n; l++) {
            oar_calib_observer_update(o[l], x);
            x = oar_add(oar_matmul(x, m->w[l]), m->b[l]);
            if (l < n - 1) x = oar_relu(x);
        }
        oar_pool_pop(pool);
    }
    for (int l = 0; l < n; l++) {
        double lo, hi;
        oar_calib_observer_range(o[l], &lo, &hi);
        oar_quant_params(lo, hi, OAR_U8, false, &m->sx[l], &m->zx[l]);
        oar_calib_observer_free(o[l]);
    }
}

static void release(model *m) {
    for (int l = 0; l < m->n; l++) {
        oar_tensor_release(m->w[l]), oar_tensor_release(m->b[l]);
        oar_tensor_release(m->wq[l]), oar_tensor_release(m->ws[l]);
    }
}

/* Median ms of reps calls of fn on x. */
static double time_ms(oar_tensor *(*fn)(const model *, oar_tensor *), const model *m, oar_tensor *x, int reps) {
    double *t = malloc((size_t)reps * sizeof *t);
    for (int w = 0; w < 3; w++) { /* warm: primitives, caches */
        oar_pool *pool = oar_pool_push();
        fn(m, x);
        oar_pool_pop(pool);
    }
    for (int r = 0; r < reps; r++) {
        oar_pool *pool = oar_pool_push();
        double t0 = now();
        oar_tensor *y = fn(m, x);
        (void)oar_tensor_numel(y);
        t[r] = 1e3 * (now() - t0);
        oar_pool_pop(pool);
    }
    double med = bench_median(t, reps);
    free(t);
    return med;
}

/* ---- the predictor path: the model traced, f32 and oar_graph_quantize'd ---- */
static int traced_forward(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    out[0] = forward_f32(ctx, in[0]);
    return out[0] ? 0 : -1;
}

static double time_pred(oar_predictor *p, oar_tensor *x, int reps) {
    double *t = malloc((size_t)reps * sizeof *t);
    for (int r = -3; r < reps; r++) { /* (3 warm-up runs) */
        oar_tensor *y = NULL;
        double t0 = now();
        if (oar_predictor_run(p, &x, &y)) {
            fprintf(stderr, "bench_int8: %s\n", oar_last_error());
            exit(1);
        }
        if (r >= 0) t[r] = 1e3 * (now() - t0);
        oar_tensor_release(y);
    }
    double med = bench_median(t, reps);
    free(t);
    return med;
}

/* The predictor rows of one model: fn traced on spec, served in f32 and
 * after oar_graph_quantize (four calibration batches of make_x(16)), at
 * batch 1 and 64 (make_x(b): an input of b samples). */
static void predictor_rows(const char *name, oar_trace_fn fn, void *ctx, const oar_graph_input_spec *spec,
                           oar_tensor *(*make_x)(int64_t samples, void *ctx)) {
    oar_graph *g = oar_trace(fn, ctx, 1, spec, 1, NULL), *gq = g ? oar_graph_clone(g) : NULL;
    oar_pool *pool = oar_pool_push();
    oar_tensor *calib[4];
    rng = 42 + 1000; /* (calibration batches of the same distribution as build's) */
    for (int b = 0; b < 4; b++) calib[b] = make_x(16, ctx);
    int nq = gq ? oar_graph_quantize(gq, &(oar_quantize_config){.n_batches = 4, .batches = calib}) : -1;
    oar_predictor_config cfg = {.optimize = true};
    oar_predictor *pf = nq > 0 ? oar_predictor_from_graph(g, &cfg) : NULL;
    oar_predictor *pq = pf ? oar_predictor_from_graph(gq, &cfg) : NULL;
    if (!pq) {
        fprintf(stderr, "bench_int8: %s predictor: %s\n", name, oar_last_error());
        exit(1);
    }
    static const int batches[2] = {1, 64};
    const char *rep_env = getenv("BENCH_INT8_REPEAT"); /* (more runs for perf: the counts times this) */
    const int repeat = rep_env && atoi(rep_env) > 0 ? atoi(rep_env) : 1;
    for (int i = 0; i < 2; i++) {
        oar_tensor *x = make_x(batches[i], ctx);
        int reps = (batches[i] == 1 ? 300 : 30) * repeat;
        double f = time_pred(pf, x, reps), q = time_pred(pq, x, reps);
        printf("oar %s_predictor_f32_b%d %.4f ms\n", name, batches[i], f);
        printf("oar %s_predictor_int8_b%d %.4f ms (%d layers quantized)\n", name, batches[i], q, nq);
        printf("oar %s_predictor_int8_over_f32_b%d %.3f x\n", name, batches[i], q / f);
        /* where the time goes: BENCH_INT8_PROFILE=dir profiles more runs of each predictor (oar's
         * profiler), prints the op summary and writes dir/int8_<model>_b<batch>_<f32|int8>.json, a
         * Chrome trace with each call (so each layer) on its own */
        const char *prof = getenv("BENCH_INT8_PROFILE");
        if (prof)
            for (int k = 0; k < 2; k++) {
                oar_profiler_reset();
                oar_profiler_start();
                time_pred(k ? pq : pf, x, reps);
                oar_profiler_stop();
                printf("-- profile: %s predictor %s, batch %d, %d runs (+3 warm-up) --\n", name, k ? "int8" : "f32",
                       batches[i], reps);
                oar_profiler_summary_write(stdout);
                char tp[512];
                snprintf(tp, sizeof tp, "%s/int8_%s_b%d_%s.json", prof, name, batches[i], k ? "int8" : "f32");
                if (oar_profiler_write_trace(tp)) fprintf(stderr, "bench_int8: %s\n", oar_last_error());
            }
    }
    oar_predictor_free(pf);
    oar_predictor_free(pq);
    oar_graph_free(g);
    oar_graph_free(gq);
    oar_pool_pop(pool);
}

static oar_tensor *rows_x(int64_t samples, void *ctx) {
    const model *m = ctx;
    return rand_tensor(samples * m->rows_per_sample, m->dims[0], 1.0);
}

static void run_predictor(const char *name, model *m, int64_t rows_per_sample) {
    oar_graph_input_spec spec = {.name = "x", .dtype = OAR_F32, .ndim = 2, .shape = {-1, m->dims[0]}};
    m->rows_per_sample = rows_per_sample;
    predictor_rows(name, traced_forward, m, &spec, rows_x);
}

static void run(const char *name, int n, const int64_t *dims, int64_t rows_per_sample) {
    model m;
    build(&m, n, dims, rows_per_sample);
    static const int batches[2] = {1, 64};
    for (int i = 0; i < 2; i++) {
        oar_pool *pool = oar_pool_push();
        oar_tensor *x = rand_tensor(batches[i] * rows_per_sample, dims[0], 1.0);
        int reps = batches[i] == 1 ? 300 : 30;
        double f = time_ms(forward_f32, &m, x, reps), q = time_ms(forward_int8, &m, x, reps);
        printf("oar %s_f32_b%d %.4f ms\n", name, batches[i], f);
        printf("oar %s_int8_b%d %.4f ms\n", name, batches[i], q);
        printf("oar %s_int8_over_f32_b%d %.3f x\n", name, batches[i], q / f);
        oar_pool_pop(pool);
    }
    run_predictor(name, &m, rows_per_sample);
    release(&m);
}

/* ---- the demo CNN (examples/fashion_mnist.c, 16 channels, batchnorm folded
 * into the convs' bias): conv 1->16 3x3 pad 1, relu, maxpool 2, conv 16->32,
 * relu, maxpool 2, flatten, linear 1568->128, relu, linear 128->10 ---- */
typedef struct {
    oar_tensor *cw[2], *cb[2], *cwq[2], *cws[2], *cb4[2]; /* f32 [o, c, 3, 3], bias [o], int8, scales, bias [1, o, 1, 1] */
    model head;                                           /* the two linear layers */
    double sx[2];
    int64_t zx[2];
} cnn;
static const int64_t cnn_ch[3] = {1, 16, 32};
static cnn the_cnn;

static oar_tensor *pool2(oar_tensor *x) {
    return oar_max_pool2d(x, (int64_t[]){2, 2}, (int64_t[]){2, 2}, (int64_t[]){0, 0}, (int64_t[]){1, 1}, false, NULL);
}

static oar_tensor *cnn_features_f32(oar_tensor *x) {
    for (int l = 0; l < 2; l++)
        x = pool2(oar_relu(oar_conv2d(x, the_cnn.cw[l], the_cnn.cb[l], (int64_t[]){1, 1}, (int64_t[]){1, 1},
                                      (int64_t[]){1, 1}, 1)));
    return oar_reshape(x, 2, (int64_t[]){oar_tensor_shape(x)[0], 32 * 49});
}

static oar_tensor *cnn_f32(const model *m, oar_tensor *x) {
    (void)m;
    return forward_f32(&the_cnn.head, cnn_features_f32(x));
}

static oar_tensor *cnn_int8(const model *m, oar_tensor *x) {
    (void)m;
    for (int l = 0; l < 2; l++) {
        oar_tensor *xq = oar_quantize_per_tensor(x, the_cnn.sx[l], the_cnn.zx[l], OAR_U8);
        oar_tensor *acc = oar_qconv2d(xq, the_cnn.zx[l], the_cnn.cwq[l], (int64_t[]){1, 1}, (int64_t[]){1, 1}, NULL, 1);
        oar_tensor *y = oar_dequantize(acc, oar_mul_scalar(the_cnn.cws[l], the_cnn.sx[l]),
                                       oar_full(OAR_I64, 1, &cnn_ch[l + 1], 0), 1);
        x = pool2(oar_relu(oar_add(y, the_cnn.cb4[l])));
    }
    return forward_int8(&the_cnn.head, oar_reshape(x, 2, (int64_t[]){oar_tensor_shape(x)[0], 32 * 49}));
}

static void build_cnn(void) {
    cnn *c = &the_cnn;
    for (int l = 0; l < 2; l++) {
        int64_t o = cnn_ch[l + 1], ci = cnn_ch[l];
        c->cw[l] = oar_tensor_retain(oar_reshape(rand_tensor(o, ci * 9, sqrt(3.0 / (double)(ci * 9))), 4,
                                                 (int64_t[]){o, ci, 3, 3}));
        c->cb[l] = oar_tensor_retain(oar_full(OAR_F32, 1, &o, 0.01));
        c->cb4[l] = oar_tensor_retain(oar_reshape(c->cb[l], 4, (int64_t[]){1, o, 1, 1}));
        oar_quantize_weight(c->cw[l], 0, &c->cwq[l], &c->cws[l]);
        oar_tensor_retain(c->cwq[l]), oar_tensor_retain(c->cws[l]);
    }
    /* calibration: the convs' inputs by min-max over four batches of 16 */
    oar_calib_observer *o[2] = {oar_calib_observer_new(OAR_CALIB_MINMAX, 0, 0),
                                oar_calib_observer_new(OAR_CALIB_MINMAX, 0, 0)};
    for (int b = 0; b < 4; b++) {
        oar_pool *pool = oar_pool_push();
        oar_tensor *x = oar_reshape(rand_tensor(16, 784, 1.0), 4, (int64_t[]){16, 1, 28, 28});
        for (int l = 0; l < 2; l++) {
            oar_calib_observer_update(o[l], x);
            x = pool2(oar_relu(oar_conv2d(x, c->cw[l], c->cb[l], (int64_t[]){1, 1}, (int64_t[]){1, 1},
                                          (int64_t[]){1, 1}, 1)));
        }
        oar_pool_pop(pool);
    }
    for (int l = 0; l < 2; l++) {
        double lo, hi;
        oar_calib_observer_range(o[l], &lo, &hi);
        oar_quant_params(lo, hi, OAR_U8, false, &c->sx[l], &c->zx[l]);
        oar_calib_observer_free(o[l]);
    }
}

/* The CNN's convs (build_cnn) and its head, calibrated on the features of
 * random images. */
static void build_cnn_head(void) {
    build_cnn();
    model *h = &the_cnn.head;
    int64_t dims[3] = {32 * 49, 128, 10};
    h->n = 2;
    for (int l = 0; l <= 2; l++) h->dims[l] = dims[l];
    oar_calib_observer *o[2] = {oar_calib_observer_new(OAR_CALIB_MINMAX, 0, 0),
                                oar_calib_observer_new(OAR_CALIB_MINMAX, 0, 0)};
    for (int l = 0; l < 2; l++) {
        h->w[l] = oar_tensor_retain(rand_tensor(dims[l], dims[l + 1], sqrt(3.0 / (double)dims[l])));
        h->b[l] = oar_tensor_retain(oar_full(OAR_F32, 1, &dims[l + 1], 0.01));
        oar_quantize_weight(h->w[l], 1, &h->wq[l], &h->ws[l]);
        oar_tensor_retain(h->wq[l]), oar_tensor_retain(h->ws[l]);
    }
    for (int b = 0; b < 4; b++) {
        oar_pool *pool = oar_pool_push();
        oar_tensor *x = cnn_features_f32(oar_reshape(rand_tensor(16, 784, 1.0), 4, (int64_t[]){16, 1, 28, 28}));
        for (int l = 0; l < 2; l++) {
            oar_calib_observer_update(o[l], x);
            x = oar_add(oar_matmul(x, h->w[l]), h->b[l]);
            if (l == 0) x = oar_relu(x);
        }
        oar_pool_pop(pool);
    }
    for (int l = 0; l < 2; l++) {
        double lo, hi;
        oar_calib_observer_range(o[l], &lo, &hi);
        oar_quant_params(lo, hi, OAR_U8, false, &h->sx[l], &h->zx[l]);
        oar_calib_observer_free(o[l]);
    }
}

static void run_cnn(void) {
    build_cnn_head();
    static const int batches[2] = {1, 64};
    for (int i = 0; i < 2; i++) {
        oar_pool *pool = oar_pool_push();
        oar_tensor *x = oar_reshape(rand_tensor(batches[i], 784, 1.0), 4, (int64_t[]){batches[i], 1, 28, 28});
        int reps = batches[i] == 1 ? 300 : 30;
        double f = time_ms(cnn_f32, NULL, x, reps), q = time_ms(cnn_int8, NULL, x, reps);
        printf("oar cnn_f32_b%d %.4f ms\n", batches[i], f);
        printf("oar cnn_int8_b%d %.4f ms\n", batches[i], q);
        printf("oar cnn_int8_over_f32_b%d %.3f x\n", batches[i], q / f);
        oar_pool_pop(pool);
    }
}

/* The CNN traced and served by predictors (run last, after run_cnn built
 * it, so that the other models keep their random draws): the int8
 * predictor's fuse_qlinear makes its convs qlinear_conv2d layers with
 * their 2 x 2 pools inside, writing the pooled uint8 the next layer
 * reads, its head qlinear ones. */
static int cnn_traced(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    out[0] = cnn_f32(NULL, in[0]);
    return out[0] ? 0 : -1;
}
static oar_tensor *cnn_x(int64_t samples, void *ctx) {
    (void)ctx;
    return oar_reshape(rand_tensor(samples, 784, 1.0), 4, (int64_t[]){samples, 1, 28, 28});
}
static void run_cnn_predictor(void) {
    oar_graph_input_spec spec = {.name = "x", .dtype = OAR_F32, .ndim = 4, .shape = {-1, 1, 28, 28}};
    predictor_rows("cnn", cnn_traced, NULL, &spec, cnn_x);
}

static oar_tensor *gemm_f32(const model *m, oar_tensor *x) { return oar_matmul(x, m->w[0]); }
static oar_tensor *gemm_int8(const model *m, oar_tensor *x) { return oar_qmatmul(x, 128, m->wq[0]); }

int main(void) {
    /* BENCH_INT8_ONLY=cnn_predictor: only the CNN's predictor rows (what a profiler or perf then sees) */
    const char *only = getenv("BENCH_INT8_ONLY");
    if (only && !strcmp(only, "cnn_predictor")) {
        build_cnn_head();
        run_cnn_predictor();
        return 0;
    }
    run_cnn();
    run("mlp", 3, (int64_t[]){784, 512, 512, 10}, 1);
    run("ffn", 2, (int64_t[]){256, 1024, 256}, 32);
    /* the raw product 2048 x 256 x 1024: f32 sgemm against u8 x s8 -> s32 */
    model g = {.n = 1};
    oar_pool *pool = oar_pool_push();
    g.w[0] = rand_tensor(256, 1024, 0.1);
    oar_tensor *ws;
    oar_quantize_weight(g.w[0], 1, &g.wq[0], &ws);
    oar_tensor *x = rand_tensor(2048, 256, 1.0), *xq = oar_quantize_per_tensor(x, 0.01, 128, OAR_U8);
    double f = time_ms(gemm_f32, &g, x, 30), q = time_ms(gemm_int8, &g, xq, 30);
    double gop = 2.0 * 2048 * 256 * 1024 * 1e-9;
    printf("oar gemm_f32_2048x256x1024 %.4f ms\n", f);
    printf("oar gemm_int8_2048x256x1024 %.4f ms\n", q);
    printf("oar gemm_int8_over_f32 %.3f x (%.0f vs %.0f GOP/s)\n", q / f, gop / (q * 1e-3), gop / (f * 1e-3));
    oar_pool_pop(pool);
    run_cnn_predictor();
    return 0;
}

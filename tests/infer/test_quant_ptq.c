/* Post-training quantization end to end, eager: a two-layer classifier
 * (16 -> 64 relu -> 4) trained here by least squares on its random hidden
 * features, quantized with oar_quantize_weight (int8 per output channel)
 * and activations calibrated on training batches by min-max, percentile
 * and entropy (uint8 per tensor), run on the int8 kernels (oar_qlinear);
 * held-out accuracy within 0.5 points of f32 for each method. Then the
 * same classifier traced into a graph and quantized by oar_graph_quantize:
 * the same accuracy bound, the eager int8 result, saved and served by a
 * predictor; a traced conv layer; the refusals. Also oar_quantize_weight
 * against its closed form, and its bad input. */
#include "test.h"

#include <math.h>
#include <oar/linalg.h>
#include <oar/infer.h>
#include <oar/quant.h>
#include <unistd.h>

enum { D = 16, H = 64, C = 4, NTRAIN = 2000, NTEST = 2000 };

static uint64_t rng = 12345;
static double uniform(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return ((rng >> 11) + 0.5) / 9007199254740992.0;
}
static double gauss(void) { return sqrt(-2 * log(uniform())) * cos(6.283185307179586 * uniform()); }

/* n samples of C overlapping Gaussian blobs (class means fixed by seed). */
static void make_data(const double *means, int n, double *x, int64_t *y) {
    for (int i = 0; i < n; i++) {
        int c = (int)(uniform() * C) % C;
        y[i] = c;
        for (int d = 0; d < D; d++) x[i * D + d] = means[c * D + d] + 1.6 * gauss();
    }
}

static double accuracy(oar_tensor *logits, const int64_t *y, int n) {
    double *v = test_values(oar_argmax(logits, 1, false));
    int ok = 0;
    for (int i = 0; v && i < n; i++) ok += (int64_t)v[i] == y[i];
    free(v);
    return 100.0 * ok / n;
}

/* The activation's uint8 parameters from calibration batches of a. */
static void calibrate(oar_calib_method m, oar_tensor *a, double *s, int64_t *z) {
    oar_calib_observer *o = oar_calib_observer_new(m, 99.99, 0);
    int64_t rows = oar_tensor_shape(a)[0];
    for (int64_t b = 0; b < rows; b += 500) /* four batches */
        CHECK(oar_calib_observer_update(o, oar_slice(a, 0, b, b + 500, 1)) == 0);
    double lo = 0, hi = 0;
    CHECK(oar_calib_observer_range(o, &lo, &hi) == 0);
    if (getenv("PTQ_DEBUG")) fprintf(stderr, "method %d range [%g, %g]\n", (int)m, lo, hi);
    /* ranges of a relu output hold no negatives: the asymmetric form keeps all 256 steps */
    CHECK(oar_quant_params(m == OAR_CALIB_MINMAX ? lo : 0, hi, OAR_U8, false, s, z) == 0);
    oar_calib_observer_free(o);
}

/* The classifier 16 -> 64 relu -> 4: the first layer random, the second
 * by ridge regression on the hidden features, (H'H + I) W2 = H'Y; its
 * training and held-out data drawn from seed (tensors pool-owned). */
typedef struct mlp { oar_tensor *W1, *b1, *W2, *b2; } mlp;
typedef struct classifier {
    mlp m;
    oar_tensor *Xtr, *Xte, *Htr; /* f32 inputs, and the hidden features of Xtr */
    int64_t ytr[NTRAIN], yte[NTEST];
} classifier;

static void make_classifier(uint64_t seed, classifier *k) {
    static double means[C * D], xtr[NTRAIN * D], xte[NTEST * D], r1[D * H];
    rng = seed;
    for (int i = 0; i < C * D; i++) means[i] = 0.9 * gauss();
    for (int i = 0; i < D * H; i++) r1[i] = gauss() / sqrt(D);
    make_data(means, NTRAIN, xtr, k->ytr);
    make_data(means, NTEST, xte, k->yte);
    k->Xtr = oar_cast(oar_tensor_from_data(xtr, OAR_F64, 2, (int64_t[]){NTRAIN, D}), OAR_F32);
    k->Xte = oar_cast(oar_tensor_from_data(xte, OAR_F64, 2, (int64_t[]){NTEST, D}), OAR_F32);
    k->m.W1 = oar_cast(oar_tensor_from_data(r1, OAR_F64, 2, (int64_t[]){D, H}), OAR_F32);
    k->m.b1 = oar_full(OAR_F32, 1, (int64_t[]){H}, 0.1);
    k->Htr = oar_relu(oar_add(oar_matmul(k->Xtr, k->m.W1), k->m.b1));
    oar_tensor *Hd = oar_cast(k->Htr, OAR_F64), *Ht = oar_transpose(Hd, 0, 1);
    oar_tensor *Y = oar_cast(oar_one_hot(oar_tensor_from_data(k->ytr, OAR_I64, 1, (int64_t[]){NTRAIN}), C), OAR_F64);
    oar_tensor *A = oar_add(oar_matmul(Ht, Hd), oar_eye(H, H, OAR_F64));
    k->m.W2 = oar_cast(oar_linalg_solve(A, oar_matmul(Ht, Y)), OAR_F32);
    k->m.b2 = oar_full(OAR_F32, 1, (int64_t[]){C}, 0);
    CHECK(k->m.W2 != NULL);
}

static void test_ptq_accuracy(void) {
    oar_pool *pool = oar_pool_push();
    static classifier k;
    make_classifier(12345, &k);
    oar_tensor *Xtr = k.Xtr, *Xte = k.Xte, *Htr = k.Htr, *W1 = k.m.W1, *b1 = k.m.b1, *W2 = k.m.W2, *b2 = k.m.b2;
    const int64_t *yte = k.yte;
    double acc32 = accuracy(oar_add(oar_matmul(oar_relu(oar_add(oar_matmul(Xte, W1), b1)), W2), b2), yte, NTEST);
    CHECK(acc32 > 60 && acc32 < 99.5); /* learned, and not trivially separable */

    oar_tensor *w1q, *s1, *w2q, *s2;
    CHECK(oar_quantize_weight(W1, 1, &w1q, &s1) == 0 && oar_quantize_weight(W2, 1, &w2q, &s2) == 0);
    for (int m = OAR_CALIB_MINMAX; m <= OAR_CALIB_ENTROPY; m++) {
        double sx, sh;
        int64_t zx, zh;
        calibrate(OAR_CALIB_MINMAX, Xtr, &sx, &zx); /* the input: min-max, both signs */
        calibrate((oar_calib_method)m, Htr, &sh, &zh);
        oar_tensor *h = oar_relu(oar_qlinear(oar_quantize_per_tensor(Xte, sx, zx, OAR_U8), sx, zx, w1q, s1, b1));
        oar_tensor *logits = oar_qlinear(oar_quantize_per_tensor(h, sh, zh, OAR_U8), sh, zh, w2q, s2, b2);
        double acc8 = accuracy(logits, yte, NTEST);
        printf("method %d: f32 %.2f %%, int8 %.2f %%\n", m, acc32, acc8);
        CHECK(fabs(acc8 - acc32) <= 0.5);
    }
    oar_pool_pop(pool);
}

/* The classifier as a traced function. */
static int mlp_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    mlp *m = ctx;
    out[0] = oar_add(oar_matmul(oar_relu(oar_add(oar_matmul(in[0], m->W1), m->b1)), m->W2), m->b2);
    return out[0] ? 0 : -1;
}

static oar_tensor *run_graph(const oar_graph *g, oar_tensor *x) {
    oar_executor *ex = oar_executor_new(g);
    oar_tensor *y = NULL;
    CHECK(ex && oar_executor_run(ex, &x, &y) == 0);
    oar_tensor *r = y ? oar_clone(y) : NULL; /* (y is borrowed until the executor's next run) */
    oar_executor_free(ex);
    return r;
}

static void test_graph_quantize(void) {
    oar_pool *pool = oar_pool_push();
    static classifier k;
    make_classifier(777, &k);
    mlp m = k.m;
    oar_tensor *Xtr = k.Xtr, *Xte = k.Xte, *Htr = k.Htr;
    const int64_t *yte = k.yte;
    oar_graph_input_spec spec = {.name = "x", .dtype = OAR_F32, .ndim = 2, .shape = {-1, D}};
    oar_graph *g32 = oar_trace(mlp_fn, &m, 1, &spec, 1, NULL);
    CHECK(g32 && oar_graph_count_op(g32, "matmul") == 2);
    double acc32 = accuracy(run_graph(g32, Xte), yte, NTEST);
    CHECK(acc32 > 60 && acc32 < 99.5);
    oar_tensor *batches[4];
    for (int b = 0; b < 4; b++) batches[b] = oar_slice(Xtr, 0, 500 * b, 500 * (b + 1), 1);
    for (int meth = OAR_CALIB_MINMAX; meth <= OAR_CALIB_ENTROPY; meth++) {
        oar_graph *g = oar_graph_clone(g32);
        oar_quantize_config cfg = {.n_batches = 4, .batches = batches, .method = (oar_calib_method)meth};
        CHECK(oar_graph_quantize(g, &cfg) == 2);
        CHECK(oar_graph_count_op(g, "matmul") == 0 && oar_graph_count_op(g, "qmatmul") == 2);
        CHECK(oar_graph_count_op(g, "quantize") == 2);
        oar_tensor *logits = run_graph(g, Xte);
        double acc8 = accuracy(logits, yte, NTEST);
        printf("graph, method %d: f32 %.2f %%, int8 %.2f %%\n", meth, acc32, acc8);
        CHECK(fabs(acc8 - acc32) <= 0.5);
        if (meth == OAR_CALIB_MINMAX) {
            /* the eager int8 layers with the same min-max parameters */
            double sx, sh;
            int64_t zx, zh;
            oar_tensor *w1q, *s1, *w2q, *s2;
            CHECK(oar_quantize_weight(m.W1, 1, &w1q, &s1) == 0 && oar_quantize_weight(m.W2, 1, &w2q, &s2) == 0);
            calibrate(OAR_CALIB_MINMAX, Xtr, &sx, &zx);
            calibrate(OAR_CALIB_MINMAX, Htr, &sh, &zh);
            oar_tensor *h = oar_relu(oar_qlinear(oar_quantize_per_tensor(Xte, sx, zx, OAR_U8), sx, zx, w1q, s1, m.b1));
            oar_tensor *want = oar_qlinear(oar_quantize_per_tensor(h, sh, zh, OAR_U8), sh, zh, w2q, s2, m.b2);
            double err = oar_tensor_item(oar_amax(oar_abs(oar_sub(logits, want)), 0, NULL, false));
            double mag = oar_tensor_item(oar_amax(oar_abs(want), 0, NULL, false));
            CHECK(err <= 1e-5 * mag);
            /* saved, loaded by a predictor (optimized and compiled), the same logits */
            char dir[] = "/tmp/oar-test-qgraph-XXXXXX";
            CHECK(mkdtemp(dir) != NULL);
            CHECK(oar_graph_save(g, dir) == 0);
            oar_predictor *p = oar_predictor_create(&(oar_predictor_config){.model_dir = dir, .optimize = true});
            oar_tensor *y = NULL;
            CHECK(p && oar_predictor_run(p, &Xte, &y) == 0);
            CHECK(y && oar_tensor_item(oar_amax(oar_abs(oar_sub(y, logits)), 0, NULL, false)) <= 1e-5 * mag);
            oar_tensor_release(y);
            oar_predictor_free(p);
            char cmd[128];
            snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
            CHECK(system(cmd) == 0);
        }
        oar_graph_free(g);
    }
    /* per-tensor weights: one scale a layer, still within a point */
    oar_graph *g = oar_graph_clone(g32);
    CHECK(oar_graph_quantize(g, &(oar_quantize_config){.n_batches = 4, .batches = batches,
                                                       .per_tensor_weights = true}) == 2);
    CHECK(fabs(accuracy(run_graph(g, Xte), yte, NTEST) - acc32) <= 1.0);
    oar_graph_free(g);
    /* the refusals leave the graph as it was */
    g = oar_graph_clone(g32);
    oar_quantize_config ok = {.n_batches = 4, .batches = batches};
    CHECK_STATUS_FAILS(oar_graph_quantize(NULL, &ok), "graph is NULL");
    CHECK_STATUS_FAILS(oar_graph_quantize(g, NULL), "config is NULL");
    CHECK_STATUS_FAILS(oar_graph_quantize(g, &(oar_quantize_config){.n_batches = 0, .batches = batches}),
                       "no calibration batches");
    oar_tensor *with_null[2] = {batches[0], NULL};
    CHECK_STATUS_FAILS(oar_graph_quantize(g, &(oar_quantize_config){.n_batches = 2, .batches = with_null}),
                       "batch 1, input 0 is NULL");
    CHECK_STATUS_FAILS(oar_graph_quantize(g, &(oar_quantize_config){.n_batches = 1, .batches = batches,
                                                                     .method = OAR_CALIB_PERCENTILE,
                                                                     .percentile = 200}),
                       "percentile");
    oar_tensor *wrong[1] = {oar_zeros(OAR_F32, 2, (int64_t[]){3, D + 1})};
    CHECK_STATUS_FAILS(oar_graph_quantize(g, &(oar_quantize_config){.n_batches = 1, .batches = wrong}),
                       "calibration batch 0");
    oar_tensor *nan[1] = {oar_full(OAR_F32, 2, (int64_t[]){3, D}, NAN)};
    CHECK_STATUS_FAILS(oar_graph_quantize(g, &(oar_quantize_config){.n_batches = 1, .batches = nan}),
                       "holds nan");
    CHECK(oar_graph_count_op(g, "matmul") == 2 && oar_graph_count_op(g, "qmatmul") == 0);
    oar_graph_free(g);
    oar_graph_free(g32);
    oar_pool_pop(pool);
}

/* Two products of one input (as attention's q, k and v projections). */
static int two_heads(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    oar_tensor **w = ctx;
    out[0] = oar_add(oar_matmul(in[0], w[0]), oar_matmul(in[0], w[1]));
    return out[0] ? 0 : -1;
}

static int mlp_relu_only(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    out[0] = oar_relu(in[0]);
    return out[0] ? 0 : -1;
}

/* A conv layer with bias and relu, traced: quantized, it stays within a
 * few quantization steps of f32, per channel and per tensor. */
typedef struct convnet { oar_tensor *w, *b; } convnet;
static int conv_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    convnet *c = ctx;
    out[0] = oar_relu(oar_conv2d(in[0], c->w, c->b, (int64_t[]){2, 1}, (int64_t[]){1, 1}, (int64_t[]){1, 1}, 1));
    return out[0] ? 0 : -1;
}

static void test_graph_quantize_conv(void) {
    oar_pool *pool = oar_pool_push();
    oar_manual_seed(5);
    convnet c = {.w = oar_mul_scalar(oar_randn(OAR_F32, 4, (int64_t[]){8, 3, 3, 3}), 0.3),
                 .b = oar_mul_scalar(oar_randn(OAR_F32, 1, (int64_t[]){8}), 0.1)};
    oar_tensor *x = oar_randn(OAR_F32, 4, (int64_t[]){4, 3, 12, 10});
    oar_graph_input_spec spec = {.name = "x", .dtype = OAR_F32, .ndim = 4, .shape = {-1, 3, 12, 10}};
    oar_graph *g32 = oar_trace(conv_fn, &c, 1, &spec, 1, NULL);
    CHECK(g32 != NULL);
    oar_tensor *want = run_graph(g32, x);
    double mag = oar_tensor_item(oar_amax(want, 0, NULL, false)), mean_err[2];
    for (int per_tensor = 0; per_tensor < 2; per_tensor++) {
        oar_graph *g = oar_graph_clone(g32);
        CHECK(oar_graph_quantize(g, &(oar_quantize_config){.n_batches = 1, .batches = &x,
                                                           .per_tensor_weights = per_tensor}) == 1);
        CHECK(oar_graph_count_op(g, "conv2d") == 0 && oar_graph_count_op(g, "qconv2d") == 1);
        oar_tensor *y = run_graph(g, x);
        double err = oar_tensor_item(oar_amax(oar_abs(oar_sub(y, want)), 0, NULL, false));
        mean_err[per_tensor] = oar_tensor_item(oar_mean(oar_abs(oar_sub(y, want)), 0, NULL, false));
        printf("conv, per tensor %d: |int8 - f32| max %.4g, mean %.4g, of max %.4g\n", per_tensor, err,
               mean_err[per_tensor], mag);
        CHECK(err > 0 && err < 0.03 * mag); /* quantized (not the f32 path), and close */
        oar_graph_free(g);
    }
    CHECK(mean_err[1] > mean_err[0]); /* one scale for all channels is coarser */
    /* products sharing an input share its quantize node */
    oar_tensor *heads[2] = {oar_randn(OAR_F32, 2, (int64_t[]){6, 5}), oar_randn(OAR_F32, 2, (int64_t[]){6, 5})};
    oar_tensor *hx = oar_randn(OAR_F32, 2, (int64_t[]){32, 6});
    oar_graph_input_spec hs = {.name = "x", .dtype = OAR_F32, .ndim = 2, .shape = {-1, 6}};
    oar_graph *gh = oar_trace(two_heads, heads, 1, &hs, 1, NULL), *gh32 = gh ? oar_graph_clone(gh) : NULL;
    CHECK(gh32 && oar_graph_quantize(gh, &(oar_quantize_config){.n_batches = 1, .batches = &hx}) == 2);
    CHECK(oar_graph_count_op(gh, "quantize") == 1 && oar_graph_count_op(gh, "qmatmul") == 2);
    oar_tensor *hw = run_graph(gh32, hx), *hq = run_graph(gh, hx);
    double hmag = oar_tensor_item(oar_amax(oar_abs(hw), 0, NULL, false));
    double herr = oar_tensor_item(oar_amax(oar_abs(oar_sub(hq, hw)), 0, NULL, false));
    CHECK(herr > 0 && herr < 0.03 * hmag);
    oar_graph_free(gh);
    oar_graph_free(gh32);
    /* nothing to quantize: 0, the graph unchanged */
    oar_tensor *i32 = oar_zeros(OAR_F32, 2, (int64_t[]){2, 2});
    oar_graph_input_spec s2 = {.name = "x", .dtype = OAR_F32, .ndim = 2, .shape = {2, 2}};
    oar_graph *plain = oar_trace(mlp_relu_only, NULL, 1, &s2, 1, NULL);
    CHECK(plain && oar_graph_quantize(plain, &(oar_quantize_config){.n_batches = 1, .batches = &i32}) == 0);
    CHECK(oar_graph_num_nodes(plain) == 1);
    oar_graph_free(plain);
    oar_graph_free(g32);
    oar_pool_pop(pool);
}

static void test_quantize_weight(void) {
    oar_pool *pool = oar_pool_push();
    double w[6] = {0.5, -1.27, 0, 0.254, 0.0, 0.127}; /* [3, 2]: columns {0.5, 0, 0}, {-1.27, 0.254, 0.127} */
    double w0[6] = {0.5, -1.27, 0, 0, 0, 0};
    oar_tensor *t = oar_tensor_from_data(w, OAR_F64, 2, (int64_t[]){3, 2}), *q = NULL, *s = NULL;
    CHECK(oar_quantize_weight(t, 1, &q, &s) == 0);
    double ws[2] = {0.5 / 127, 1.27 / 127}, wq[6] = {127, -127, 0, 25, 0, 13};
    CHECK(q && oar_tensor_dtype(q) == OAR_I8);
    CHECK_VALUES(s, ws, 2, 1e-15);
    CHECK_VALUES(q, wq, 6, 0);
    /* an all-zero channel gets scale 1 */
    oar_tensor *t2 = oar_tensor_from_data(w0, OAR_F64, 2, (int64_t[]){2, 3});
    CHECK(oar_quantize_weight(t2, 0, &q, &s) == 0);
    double *sv = test_values(s);
    CHECK(sv && sv[0] == 1.27 / 127 && sv[1] == 1);
    free(sv);
    CHECK_STATUS_FAILS(oar_quantize_weight(NULL, 0, &q, &s), "w");
    CHECK_STATUS_FAILS(oar_quantize_weight(t, 0, NULL, &s), "wq");
    CHECK_STATUS_FAILS(oar_quantize_weight(t, 2, &q, &s), "axis 2 is out of range");
    CHECK_STATUS_FAILS(oar_quantize_weight(oar_full(OAR_I8, 1, (int64_t[]){2}, 1), 0, &q, &s), "real float");
    CHECK_STATUS_FAILS(oar_quantize_weight(oar_complex(t, t), 0, &q, &s), "real float");
    double bad[2] = {1, NAN};
    CHECK_STATUS_FAILS(oar_quantize_weight(oar_tensor_from_data(bad, OAR_F64, 1, (int64_t[]){2}), 0, &q, &s),
                       "NaN or infinite");
    oar_pool_pop(pool);
}

int main(void) {
    RUN(test_quantize_weight);
    RUN(test_ptq_accuracy);
    RUN(test_graph_quantize);
    RUN(test_graph_quantize_conv);
    return test_summary();
}

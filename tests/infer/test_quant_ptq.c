/* Post-training quantization end to end, eager: a two-layer classifier
 * (16 -> 64 relu -> 4) trained here by least squares on its random hidden
 * features, quantized with oar_quantize_weight (int8 per output channel)
 * and activations calibrated on training batches by min-max, percentile
 * and entropy (uint8 per tensor), run on the int8 kernels (oar_qlinear);
 * held-out accuracy within 0.5 points of f32 for each method. Also
 * oar_quantize_weight against its closed form, and its bad input. */
#include "test.h"

#include <math.h>
#include <oar/linalg.h>
#include <oar/quant.h>

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

static void test_ptq_accuracy(void) {
    oar_pool *pool = oar_pool_push();
    static double means[C * D], xtr[NTRAIN * D], xte[NTEST * D], r1[D * H];
    static int64_t ytr[NTRAIN], yte[NTEST];
    for (int i = 0; i < C * D; i++) means[i] = 0.9 * gauss();
    for (int i = 0; i < D * H; i++) r1[i] = gauss() / sqrt(D);
    make_data(means, NTRAIN, xtr, ytr);
    make_data(means, NTEST, xte, yte);
    oar_tensor *Xtr = oar_cast(oar_tensor_from_data(xtr, OAR_F64, 2, (int64_t[]){NTRAIN, D}), OAR_F32);
    oar_tensor *Xte = oar_cast(oar_tensor_from_data(xte, OAR_F64, 2, (int64_t[]){NTEST, D}), OAR_F32);
    oar_tensor *W1 = oar_cast(oar_tensor_from_data(r1, OAR_F64, 2, (int64_t[]){D, H}), OAR_F32);
    oar_tensor *b1 = oar_full(OAR_F32, 1, (int64_t[]){H}, 0.1);
    /* layer 2 by ridge regression on the hidden features: (H'H + I) W2 = H'Y */
    oar_tensor *Htr = oar_relu(oar_add(oar_matmul(Xtr, W1), b1));
    oar_tensor *Hd = oar_cast(Htr, OAR_F64);
    oar_tensor *Y = oar_cast(oar_one_hot(oar_tensor_from_data(ytr, OAR_I64, 1, (int64_t[]){NTRAIN}), C), OAR_F64);
    oar_tensor *Ht = oar_transpose(Hd, 0, 1);
    oar_tensor *A = oar_add(oar_matmul(Ht, Hd), oar_eye(H, H, OAR_F64));
    oar_tensor *W2 = oar_cast(oar_linalg_solve(A, oar_matmul(Ht, Y)), OAR_F32);
    CHECK(W2 != NULL);
    oar_tensor *b2 = oar_full(OAR_F32, 1, (int64_t[]){C}, 0);
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
    return test_summary();
}

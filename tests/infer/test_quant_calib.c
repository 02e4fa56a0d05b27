/* Calibration for post-training quantization (include/oar/quant.h): the
 * min-max observer exactly, the percentile and entropy observers against
 * NumPy (tests/ref/gen_quant_calib.py: a sample on a grid where NumPy's
 * histogram and oar's bin alike), TensorRT's KL threshold search on two
 * histograms, the scale and zero point of a range in closed form, and bad
 * input. */
#include "test.h"

#include "ref/quant_calib_ref.h"

#include <math.h>
#include <oar/quant.h>

/* The sample's values with |k| <= limit (or > limit when above). */
static oar_tensor *sample(int limit, bool above) {
    static double v[CALIB_N];
    int64_t n = 0;
    for (int i = 0; i < CALIB_N; i++)
        if ((abs(calib_k[i]) > limit) == above) v[n++] = calib_k[i] / 64.0;
    return oar_cast(oar_tensor_from_data(v, OAR_F64, 1, &n), OAR_F32);
}

static double sample_min(void) {
    int m = calib_k[0];
    for (int i = 1; i < CALIB_N; i++) m = calib_k[i] < m ? calib_k[i] : m;
    return m / 64.0;
}
static double sample_max(void) {
    int m = calib_k[0];
    for (int i = 1; i < CALIB_N; i++) m = calib_k[i] > m ? calib_k[i] : m;
    return m / 64.0;
}

/* The range of the whole sample seen as one batch, or as two (the second
 * raising the histogram's max from 4 to 8). */
static void observe(oar_calib_method m, double pct, int batches, double *lo, double *hi) {
    oar_pool *pool = oar_pool_push();
    oar_calib_observer *o = oar_calib_observer_new(m, pct, CALIB_BINS);
    CHECK(o != NULL);
    if (batches == 1) {
        CHECK(oar_calib_observer_update(o, sample(1 << 20, false)) == 0);
    } else {
        CHECK(oar_calib_observer_update(o, sample(256, false)) == 0);
        CHECK(oar_calib_observer_update(o, sample(256, true)) == 0);
    }
    CHECK(oar_calib_observer_count(o) == CALIB_N);
    CHECK(oar_calib_observer_range(o, lo, hi) == 0);
    oar_calib_observer_free(o);
    oar_pool_pop(pool);
}

static void test_minmax(void) {
    for (int b = 1; b <= 2; b++) {
        double lo = 0, hi = 0;
        observe(OAR_CALIB_MINMAX, 0, b, &lo, &hi);
        CHECK(lo == sample_min() && hi == sample_max());
    }
    /* a 2-d f64 batch, then an f16 one: the extremes of both */
    oar_pool *pool = oar_pool_push();
    oar_calib_observer *o = oar_calib_observer_new(OAR_CALIB_MINMAX, 0, 0);
    double a[6] = {0.5, -2.25, 7, 3, 1, 0}, b[2] = {-3, 6};
    CHECK(oar_calib_observer_update(o, oar_tensor_from_data(a, OAR_F64, 2, (int64_t[]){2, 3})) == 0);
    CHECK(oar_calib_observer_update(o, oar_cast(oar_tensor_from_data(b, OAR_F64, 1, (int64_t[]){2}), OAR_F16)) == 0);
    CHECK(oar_calib_observer_update(o, oar_full(OAR_F32, 1, (int64_t[]){0}, 0)) == 0); /* empty: nothing */
    double lo = 0, hi = 0;
    CHECK(oar_calib_observer_range(o, &lo, &hi) == 0 && lo == -3 && hi == 7);
    CHECK(oar_calib_observer_count(o) == 8);
    oar_calib_observer_free(o);
    oar_pool_pop(pool);
}

static void test_percentile(void) {
    double lo = 0, hi = 0, w = 8.0 / CALIB_BINS;
    observe(OAR_CALIB_PERCENTILE, 99.7, 1, &lo, &hi);
    CHECK(hi == calib_pct_threshold && lo == -hi);
    /* two batches: the first histogram rebinned, within two bins */
    observe(OAR_CALIB_PERCENTILE, 99.7, 2, &lo, &hi);
    CHECK_NEAR(hi, calib_pct_threshold, 2 * w);
    /* closed form: |x| = 0.5, 1.5, ..., 99.5 and 100 over 100 bins of width 1:
     * the 50th percentile's bin is [50, 51), the 100th's the last */
    oar_pool *pool = oar_pool_push();
    double v[101];
    for (int i = 0; i < 100; i++) v[i] = (i % 2 ? -1 : 1) * (i + 0.5);
    v[100] = 100;
    oar_tensor *t = oar_tensor_from_data(v, OAR_F64, 1, (int64_t[]){101});
    for (int k = 0; k < 2; k++) {
        oar_calib_observer *o = oar_calib_observer_new(OAR_CALIB_PERCENTILE, k ? 100 : 50, 100);
        CHECK(oar_calib_observer_update(o, t) == 0 && oar_calib_observer_range(o, &lo, &hi) == 0);
        CHECK(hi == (k ? 100 : 51) && lo == -hi);
        oar_calib_observer_free(o);
    }
    oar_pool_pop(pool);
}

static void test_entropy(void) {
    int best = -1;
    CHECK(oar_calib_entropy_threshold(calib_hist, CALIB_BINS, 128, &best) == 0 && best == calib_entropy_best);
    CHECK(oar_calib_entropy_threshold(calib_sparse, 300, 128, &best) == 0 && best == calib_sparse_best);
    double lo = 0, hi = 0;
    observe(OAR_CALIB_ENTROPY, 0, 1, &lo, &hi);
    CHECK(hi == calib_observer_best * 8.0 / CALIB_BINS && lo == -hi);
    observe(OAR_CALIB_ENTROPY, 0, 2, &lo, &hi);
    CHECK_NEAR(hi, calib_observer_best * 8.0 / CALIB_BINS, 4 * 8.0 / CALIB_BINS);
    /* |x|, nothing negative: 256 target bins (uint8's levels) */
    oar_pool *p0 = oar_pool_push();
    oar_calib_observer *oa = oar_calib_observer_new(OAR_CALIB_ENTROPY, 0, CALIB_BINS);
    CHECK(oar_calib_observer_update(oa, oar_abs(sample(1 << 20, false))) == 0);
    CHECK(oar_calib_observer_range(oa, &lo, &hi) == 0 && hi == calib_observer_abs_best * 8.0 / CALIB_BINS);
    oar_calib_observer_free(oa);
    oar_pool_pop(p0);
    /* a histogram of target_bins bins has one candidate: all of it */
    double flat[128];
    for (int i = 0; i < 128; i++) flat[i] = 1;
    CHECK(oar_calib_entropy_threshold(flat, 128, 128, &best) == 0 && best == 128);
    /* only zeros observed: the range is [0, 0] */
    oar_pool *pool = oar_pool_push();
    oar_calib_observer *o = oar_calib_observer_new(OAR_CALIB_ENTROPY, 0, 0);
    CHECK(oar_calib_observer_update(o, oar_full(OAR_F32, 1, (int64_t[]){5}, 0)) == 0);
    CHECK(oar_calib_observer_range(o, &lo, &hi) == 0 && lo == 0 && hi == 0);
    oar_calib_observer_free(o);
    oar_pool_pop(pool);
}

static void test_params(void) {
    double s = 0;
    int64_t z = -1;
    CHECK(oar_quant_params(-1, 3, OAR_U8, false, &s, &z) == 0 && s == 4.0 / 255 && z == 64); /* round(63.75) */
    CHECK(oar_quant_params(-1, 3, OAR_I8, false, &s, &z) == 0 && s == 4.0 / 255 && z == -64);
    CHECK(oar_quant_params(-1, 3, OAR_I8, true, &s, &z) == 0 && s == 3.0 / 127 && z == 0);
    CHECK(oar_quant_params(-1, 3, OAR_U8, true, &s, &z) == 0 && s == 6.0 / 255 && z == 128);
    CHECK(oar_quant_params(2, 5, OAR_U8, false, &s, &z) == 0 && s == 5.0 / 255 && z == 0); /* holds 0 */
    CHECK(oar_quant_params(-5, -2, OAR_U8, false, &s, &z) == 0 && s == 5.0 / 255 && z == 255);
    CHECK(oar_quant_params(0, 0, OAR_U8, false, &s, &z) == 0 && s == 1 && z == 0);
    CHECK(oar_quant_params(0, 0, OAR_I8, true, &s, &z) == 0 && s == 1 && z == 0);
    /* the parameters quantize the range's ends to the dtype's ends */
    oar_pool *pool = oar_pool_push();
    CHECK(oar_quant_params(-1, 3, OAR_U8, false, &s, &z) == 0);
    double ends[2] = {-1, 3}, want[2] = {0, 255};
    CHECK_VALUES(oar_quantize_per_tensor(oar_tensor_from_data(ends, OAR_F64, 1, (int64_t[]){2}), s, z, OAR_U8),
                 want, 2, 0);
    oar_pool_pop(pool);
}

static void test_bad_input(void) {
    oar_pool *pool = oar_pool_push();
    double lo, hi, s;
    int64_t z;
    int best;
    CHECK_FAILS(oar_calib_observer_new((oar_calib_method)7, 0, 0), "unknown method 7");
    CHECK_FAILS(oar_calib_observer_new(OAR_CALIB_PERCENTILE, 100.5, 0), "percentile 100.5");
    CHECK_FAILS(oar_calib_observer_new(OAR_CALIB_PERCENTILE, -1, 0), "outside (0, 100]");
    CHECK_FAILS(oar_calib_observer_new(OAR_CALIB_ENTROPY, 0, 64), "64 bins");
    CHECK_FAILS(oar_calib_observer_new(OAR_CALIB_PERCENTILE, 0, -3), "-3 bins");
    oar_calib_observer *o = oar_calib_observer_new(OAR_CALIB_ENTROPY, 0, 0);
    CHECK_STATUS_FAILS(oar_calib_observer_range(o, &lo, &hi), "no values observed");
    oar_tensor *f = oar_full(OAR_F32, 1, (int64_t[]){3}, 1);
    CHECK_STATUS_FAILS(oar_calib_observer_update(o, oar_complex(f, f)), "real float tensor, got complex64");
    CHECK_STATUS_FAILS(oar_calib_observer_update(o, oar_full(OAR_I32, 1, (int64_t[]){3}, 1)), "got int32");
    double bad[3] = {1, NAN, 2};
    CHECK_STATUS_FAILS(oar_calib_observer_update(o, oar_tensor_from_data(bad, OAR_F64, 1, (int64_t[]){3})),
                       "holds nan (element 1)");
    bad[1] = INFINITY;
    CHECK_STATUS_FAILS(oar_calib_observer_update(o, oar_tensor_from_data(bad, OAR_F64, 1, (int64_t[]){3})),
                       "ranges need finite values");
    CHECK(oar_calib_observer_count(o) == 0); /* nothing recorded */
    CHECK_STATUS_FAILS(oar_calib_observer_update(o, NULL), "x");
    CHECK_STATUS_FAILS(oar_calib_observer_update(NULL, f), "observer");
    CHECK_STATUS_FAILS(oar_calib_observer_range(o, NULL, &hi), "lo");
    CHECK(oar_calib_observer_count(NULL) == -1);
    oar_calib_observer_free(o);
    oar_calib_observer_free(NULL);
    double h[4] = {1, 2, -1, 0}, zero[4] = {0};
    CHECK_STATUS_FAILS(oar_calib_entropy_threshold(h, 4, 2, &best), "count -1 in bin 2");
    CHECK_STATUS_FAILS(oar_calib_entropy_threshold(zero, 4, 2, &best), "histogram is empty");
    CHECK_STATUS_FAILS(oar_calib_entropy_threshold(h, 4, 8, &best), "4 bins for 8 target bins");
    CHECK_STATUS_FAILS(oar_calib_entropy_threshold(h, 4, 0, &best), "target_bins >= 1");
    CHECK_STATUS_FAILS(oar_calib_entropy_threshold(NULL, 4, 2, &best), "hist");
    CHECK_STATUS_FAILS(oar_quant_params(3, -1, OAR_U8, false, &s, &z), "lo <= hi");
    CHECK_STATUS_FAILS(oar_quant_params(-INFINITY, 1, OAR_U8, false, &s, &z), "must be finite");
    CHECK_STATUS_FAILS(oar_quant_params(-1, 1, OAR_F32, false, &s, &z), "int8 or uint8, got float32");
    CHECK_STATUS_FAILS(oar_quant_params(-1, 1, OAR_U8, false, NULL, &z), "scale");
    oar_pool_pop(pool);
}

int main(void) {
    RUN(test_minmax);
    RUN(test_percentile);
    RUN(test_entropy);
    RUN(test_params);
    RUN(test_bad_input);
    return test_summary();
}

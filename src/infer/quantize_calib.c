/* Calibration for post-training quantization (include/oar/quant.h,
 * docs/quantization.md): observers of activation ranges by min-max, by a
 * percentile of |x| and by TensorRT's entropy (KL) method, and the scale
 * and zero point of a range. Values are read to the host as f64. */
#include "../core/core.h"

#include <math.h>
#include <oar/ops.h>
#include <oar/quant.h>
#include <string.h>

struct oar_calib_observer {
    oar_calib_method method;
    double percentile;
    int bins;
    int64_t count;
    double min, max, amax; /* amax: the histogram covers [0, amax] */
    double *hist;          /* bins counts (PERCENTILE, ENTROPY) */
};

oar_calib_observer *oar_calib_observer_new(oar_calib_method method, double percentile, int bins) {
    if (method != OAR_CALIB_MINMAX && method != OAR_CALIB_PERCENTILE && method != OAR_CALIB_ENTROPY)
        return oari_error(OAR_ERR_INVALID, "calib_observer_new: unknown method %d (minmax 0, percentile 1, "
                          "entropy 2)", (int)method), NULL;
    if (percentile == 0) percentile = 99.99;
    if (!(percentile > 0 && percentile <= 100))
        return oari_error(OAR_ERR_INVALID, "calib_observer_new: percentile %g is outside (0, 100]", percentile),
               NULL;
    if (bins == 0) bins = 2048;
    int lo = method == OAR_CALIB_ENTROPY ? 128 : 1;
    if (bins < lo || bins > (1 << 20))
        return oari_error(OAR_ERR_INVALID, "calib_observer_new: %d bins is outside [%d, %d]%s", bins, lo, 1 << 20,
                          method == OAR_CALIB_ENTROPY ? " (entropy merges into 128 target bins)" : ""), NULL;
    oar_calib_observer *o = oari_malloc(sizeof *o);
    if (!o) return NULL;
    *o = (oar_calib_observer){.method = method, .percentile = percentile, .bins = bins, .min = INFINITY,
                              .max = -INFINITY};
    if (method != OAR_CALIB_MINMAX && !(o->hist = oari_calloc((size_t)bins, sizeof(double)))) {
        oari_free(o, sizeof *o);
        return NULL;
    }
    return o;
}

void oar_calib_observer_free(oar_calib_observer *o) {
    if (!o) return;
    if (o->hist) oari_free(o->hist, (size_t)o->bins * sizeof(double));
    oari_free(o, sizeof *o);
}

int64_t oar_calib_observer_count(const oar_calib_observer *o) { return o ? o->count : -1; }

/* The bin of |v| in a histogram of `bins` over [0, amax] (amax > 0); the
 * last bin is closed, as NumPy's. */
static int bin_of(double v, double amax, int bins) {
    int64_t b = (int64_t)(fabs(v) / amax * bins);
    return b >= bins ? bins - 1 : (int)b;
}

/* Moves o's counts into a histogram over [0, amax] (amax > o->amax). */
static void rebin(oar_calib_observer *o, double amax, double *tmp) {
    memset(tmp, 0, (size_t)o->bins * sizeof *tmp);
    double w = o->amax / o->bins;
    for (int i = 0; i < o->bins; i++)
        if (o->hist[i]) tmp[bin_of((i + 0.5) * w, amax, o->bins)] += o->hist[i];
    memcpy(o->hist, tmp, (size_t)o->bins * sizeof *tmp);
}

int oar_calib_observer_update(oar_calib_observer *o, oar_tensor *x) {
    if (!o || !x) return oari_null_arg("calib_observer_update", !o ? "observer" : "x");
    oar_dtype dt = oar_tensor_dtype(x);
    if (!oar_dtype_is_float(dt))
        return oari_error(OAR_ERR_INVALID, "calib_observer_update: calibration data must be a real float tensor, "
                          "got %s", oar_dtype_name(dt));
    int64_t n = oar_tensor_numel(x);
    if (n == 0) return 0;
    oar_pool *pool = oar_pool_push();
    oar_tensor *d = oar_cast(x, OAR_F64);
    double *v = d ? oari_malloc((size_t)n * sizeof *v) : NULL;
    double *tmp = v && o->hist ? oari_malloc((size_t)o->bins * sizeof *tmp) : NULL;
    int st = !v || (o->hist && !tmp) ? oari_fail_status() : oar_tensor_to_host(d, v, (size_t)n * sizeof *v);
    double mn = INFINITY, mx = -INFINITY, am = 0;
    for (int64_t i = 0; i < n && !st; i++) {
        if (!isfinite(v[i]))
            st = oari_error(OAR_ERR_INVALID, "calib_observer_update: calibration data holds %g (element %lld); "
                            "ranges need finite values", v[i], (long long)i);
        mn = fmin(mn, v[i]), mx = fmax(mx, v[i]), am = fmax(am, fabs(v[i]));
    }
    if (!st) {
        o->min = fmin(o->min, mn), o->max = fmax(o->max, mx), o->count += n;
        if (o->hist && am > o->amax) {
            if (o->amax > 0) rebin(o, am, tmp); /* (only zeros so far: they stay in bin 0) */
            o->amax = am;
        }
        for (int64_t i = 0; i < n && o->hist; i++) o->hist[o->amax > 0 ? bin_of(v[i], o->amax, o->bins) : 0] += 1;
    }
    if (tmp) oari_free(tmp, (size_t)o->bins * sizeof *tmp);
    if (v) oari_free(v, (size_t)n * sizeof *v);
    oar_pool_pop(pool);
    return st;
}

/* MXNet's _smooth_distribution on counts: eps onto each empty bin, taken
 * evenly from the others. */
static void smooth(double *p, int n) {
    int zeros = 0;
    for (int i = 0; i < n; i++) zeros += p[i] == 0;
    if (zeros == 0 || zeros == n) return;
    const double eps = 1e-4, eps1 = eps * zeros / (n - zeros);
    for (int i = 0; i < n; i++) p[i] += p[i] == 0 ? eps : -eps1;
}

int oar_calib_entropy_threshold(const double *hist, int bins, int target_bins, int *best) {
    if (!hist || !best) return oari_null_arg("calib_entropy_threshold", !hist ? "hist" : "best");
    if (target_bins < 1 || bins < target_bins)
        return oari_error(OAR_ERR_INVALID, "calib_entropy_threshold: %d bins for %d target bins (need bins >= "
                          "target_bins >= 1)", bins, target_bins);
    double total = 0;
    for (int i = 0; i < bins; i++) {
        if (!(hist[i] >= 0) || !isfinite(hist[i]))
            return oari_error(OAR_ERR_INVALID, "calib_entropy_threshold: count %g in bin %d must be finite and "
                              ">= 0", hist[i], i);
        total += hist[i];
    }
    if (total == 0) return oari_error(OAR_ERR_INVALID, "calib_entropy_threshold: the histogram is empty");
    double *p = oari_malloc(2 * (size_t)bins * sizeof *p);
    if (!p) return oari_fail_status();
    double *q = p + bins, best_kl = INFINITY, outliers = total;
    int best_i = bins;
    for (int i = 0; i < target_bins - 1 && i < bins; i++) outliers -= hist[i];
    for (int i = target_bins; i <= bins; i++) {
        outliers -= hist[i - 1]; /* the counts at and beyond bin i */
        for (int b = 0; b < i; b++) p[b] = hist[b];
        p[i - 1] += outliers > 0 ? outliers : 0;
        int merged = i / target_bins;
        double sq = 0;
        for (int j = 0; j < target_bins; j++) {
            int start = j * merged, stop = j == target_bins - 1 ? i : start + merged, nz = 0;
            double s = 0;
            for (int b = start; b < stop; b++) s += hist[b], nz += p[b] != 0;
            for (int b = start; b < stop; b++) q[b] = p[b] != 0 ? s / nz : 0;
            sq += s;
        }
        if (sq == 0) continue; /* nothing below i: Q is undefined */
        smooth(p, i), smooth(q, i);
        double sp = 0, kl = 0;
        sq = 0;
        for (int b = 0; b < i; b++) sp += p[b], sq += q[b];
        for (int b = 0; b < i; b++)
            if (p[b] > 0) kl += p[b] / sp * log((p[b] / sp) / (q[b] / sq));
        if (kl < best_kl) best_kl = kl, best_i = i;
    }
    oari_free(p, 2 * (size_t)bins * sizeof *p);
    *best = best_i;
    return 0;
}

int oar_calib_observer_range(const oar_calib_observer *o, double *lo, double *hi) {
    if (!o || !lo || !hi) return oari_null_arg("calib_observer_range", !o ? "observer" : !lo ? "lo" : "hi");
    if (o->count == 0)
        return oari_error(OAR_ERR_INVALID, "calib_observer_range: no values observed; call "
                          "oar_calib_observer_update with calibration batches first");
    if (o->method == OAR_CALIB_MINMAX) {
        *lo = o->min, *hi = o->max;
        return 0;
    }
    double w = o->amax / o->bins, t = 0;
    if (o->amax == 0) {
        *lo = *hi = 0;
        return 0;
    }
    if (o->method == OAR_CALIB_PERCENTILE) {
        double total = 0, cum = 0, want;
        for (int i = 0; i < o->bins; i++) total += o->hist[i];
        want = total * (o->percentile / 100);
        int i = 0;
        while (i < o->bins - 1 && (cum += o->hist[i]) < want) i++;
        t = (i + 1) * w;
    } else {
        /* the levels that cover [0, t]: 128 of a symmetric int8 range; 256 of
         * a uint8 one when nothing negative was seen (a relu's output) */
        int best = 0, target = o->min >= 0 && o->bins >= 256 ? 256 : 128;
        /* bin 0 counted as bin 1 (NVIDIA's pytorch-quantization): the spike of
         * a relu's zeros would otherwise outweigh the tail and clip it away */
        double *h = oari_malloc((size_t)o->bins * sizeof *h);
        if (!h) return oari_fail_status();
        memcpy(h, o->hist, (size_t)o->bins * sizeof *h);
        if (o->bins > 1) h[0] = h[1];
        int st = oar_calib_entropy_threshold(h, o->bins, target, &best);
        oari_free(h, (size_t)o->bins * sizeof *h);
        if (st) return st;
        t = best * w;
    }
    *lo = -t, *hi = t;
    return 0;
}

int oar_quant_params(double lo, double hi, oar_dtype dtype, bool symmetric, double *scale, int64_t *zero_point) {
    if (!scale || !zero_point) return oari_null_arg("quant_params", !scale ? "scale" : "zero_point");
    if (dtype != OAR_U8 && dtype != OAR_I8)
        return oari_error(OAR_ERR_INVALID, "quant_params: the quantized dtype must be int8 or uint8, got %s",
                          oar_dtype_name(dtype));
    if (!isfinite(lo) || !isfinite(hi) || lo > hi)
        return oari_error(OAR_ERR_INVALID, "quant_params: range [%g, %g] must be finite with lo <= hi", lo, hi);
    const double qmin = dtype == OAR_U8 ? 0 : -128, qmax = dtype == OAR_U8 ? 255 : 127;
    lo = fmin(lo, 0), hi = fmax(hi, 0);
    if (symmetric) {
        double amax = fmax(-lo, hi);
        *scale = amax == 0 ? 1 : dtype == OAR_I8 ? amax / 127 : 2 * amax / 255;
        *zero_point = dtype == OAR_I8 ? 0 : 128;
        return 0;
    }
    *scale = hi == lo ? 1 : (hi - lo) / (qmax - qmin);
    double z = nearbyint(qmin - lo / *scale);
    *zero_point = (int64_t)fmin(qmax, fmax(qmin, z));
    return 0;
}

int oar_quantize_weight(oar_tensor *w, int axis, oar_tensor **wq, oar_tensor **scales) {
    if (!w || !wq || !scales) return oari_null_arg("quantize_weight", !w ? "w" : !wq ? "wq" : "scales");
    *wq = *scales = NULL;
    int nd = oar_tensor_ndim(w);
    if (!oar_dtype_is_float(oar_tensor_dtype(w)) || nd < 1)
        return oari_error(OAR_ERR_INVALID, "quantize_weight: w must be a real float tensor of at least 1 dim, got "
                          "%s of %d dims", oar_dtype_name(oar_tensor_dtype(w)), nd);
    if (axis < -nd || axis >= nd)
        return oari_error(OAR_ERR_INVALID, "quantize_weight: axis %d is out of range for %d dims", axis, nd);
    int64_t ax = axis < 0 ? axis + nd : axis, dims[OAR_MAX_DIMS], nr = 0, c = oar_tensor_shape(w)[ax];
    for (int d = 0; d < nd; d++)
        if (d != ax) dims[nr++] = d;
    oar_tensor *aw = oar_abs(oar_cast(w, OAR_F64)); /* (a 1-d w: one weight per channel) */
    oar_tensor *am = nr ? oar_amax(aw, (int)nr, dims, false) : oar_contiguous(aw);
    if (!am) return oari_fail_status();
    double *s = oari_malloc((size_t)(c ? c : 1) * sizeof *s);
    int st = s ? oar_tensor_to_host(am, s, (size_t)c * sizeof *s) : oari_fail_status();
    for (int64_t i = 0; i < c && !st; i++) {
        if (!isfinite(s[i]))
            st = oari_error(OAR_ERR_INVALID, "quantize_weight: channel %lld holds a NaN or infinite weight",
                            (long long)i);
        s[i] = s[i] > 0 ? s[i] / 127 : 1;
    }
    oar_tensor *sc = st ? NULL : oar_tensor_from_data(s, OAR_F64, 1, &c);
    if (s) oari_free(s, (size_t)(c ? c : 1) * sizeof *s);
    if (st) return st;
    oar_tensor *q = sc ? oar_quantize_per_channel(w, sc, oar_full(OAR_I64, 1, &c, 0), (int)ax, OAR_I8) : NULL;
    if (!q) return oari_fail_status();
    *wq = q, *scales = sc;
    return 0;
}

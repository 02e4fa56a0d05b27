/* Post-training quantization: calibration observers and quantization
 * parameters (docs/quantization.md). The int8 products themselves are ops
 * (oar_qmatmul, oar_qlinear in <oar/ops.h>).
 *
 *     oar_calib_observer *o = oar_calib_observer_new(OAR_CALIB_ENTROPY, 0, 0);
 *     for (int b = 0; b < n_batches; b++)
 *         oar_calib_observer_update(o, activation[b]);   // any shape, real float
 *     double lo, hi, scale;
 *     int64_t zp;
 *     oar_calib_observer_range(o, &lo, &hi);
 *     oar_quant_params(lo, hi, OAR_U8, false, &scale, &zp);
 *     oar_calib_observer_free(o);
 *
 * Observers are not thread-safe: one per activation and thread. */
#ifndef OAR_QUANT_H
#define OAR_QUANT_H

#include <oar/graph.h>
#include <oar/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

/* How an activation's range is chosen from calibration data. */
typedef enum oar_calib_method {
    OAR_CALIB_MINMAX = 0,     /* [min, max] of every value seen, exactly */
    OAR_CALIB_PERCENTILE = 1, /* [-t, t]: t the percentile of |x| (histogram) */
    OAR_CALIB_ENTROPY = 2,    /* [-t, t]: t minimizing the KL divergence (TensorRT) */
} oar_calib_method;

typedef struct oar_calib_observer oar_calib_observer;

/* A new observer. percentile (PERCENTILE only) in (0, 100], 0 meaning
 * 99.99; bins: the |x| histogram's bin count for PERCENTILE and ENTROPY,
 * 0 meaning 2048, at least 128 for ENTROPY (its 128 target bins). NULL
 * with an error for an unknown method, a percentile outside (0, 100] or
 * a bin count outside [1, 1 << 20] (ENTROPY: [128, 1 << 20]). */
OAR_API oar_calib_observer *oar_calib_observer_new(oar_calib_method method, double percentile, int bins);
/* Observes x's values (any shape, real float dtype, on any device: read
 * through the host). The histogram covers [0, max |x| so far]: when a batch
 * raises the max, the old counts move to the new bin holding each old
 * bin's center (an approximation, as ONNX Runtime's collector). 0, or a
 * status with the error set for a NULL observer or x, a complex or
 * integer x, or a NaN or infinite value (nothing is recorded then). */
OAR_API int oar_calib_observer_update(oar_calib_observer *o, oar_tensor *x);
/* The calibrated range: MINMAX the exact [min, max]; PERCENTILE [-t, t]
 * with t the right edge of the first bin where the cumulative fraction of
 * |x| reaches percentile / 100; ENTROPY [-t, t] with t = i * bin width for
 * the i oar_calib_entropy_threshold picks on the histogram with bin 0
 * counted as bin 1 (NVIDIA's pytorch-quantization: a relu's spike of zeros
 * would outweigh the tail), into 128 target bins, or 256 where no value
 * seen was negative (the levels of uint8 over [0, t]). 0, or a status with
 * the error set when nothing was observed or an argument is NULL. */
OAR_API int oar_calib_observer_range(const oar_calib_observer *o, double *lo, double *hi);
/* How many values the observer has seen (-1 for NULL). */
OAR_API int64_t oar_calib_observer_count(const oar_calib_observer *o);
OAR_API void oar_calib_observer_free(oar_calib_observer *o); /* NULL is a no-op */

/* TensorRT's entropy calibration on a histogram of |x| (hist[0..bins-1],
 * counts): for each i in [target_bins, bins], P is hist[0..i-1] with the
 * counts beyond added to its last bin, Q is hist[0..i-1] merged into
 * target_bins groups (i / target_bins bins each, the last group taking the
 * rest), each group's sum spread evenly back over the bins where P is
 * non-zero; both are smoothed as counts (eps 1e-4 moved onto empty bins,
 * MXNet's _smooth_distribution) and normalized, and *best is the i of
 * least KL(P || Q), the first on ties. 0, or a status with the error set for NULL arguments,
 * target_bins < 1, bins < target_bins, a negative or non-finite count, or
 * an empty histogram. */
OAR_API int oar_calib_entropy_threshold(const double *hist, int bins, int target_bins, int *best);

/* The scale and zero point for the range [lo, hi] (widened to hold 0) in
 * dtype (OAR_U8 or OAR_I8). Symmetric: amax = max(-lo, hi); int8 scale
 * amax / 127, zero point 0; uint8 scale 2 amax / 255, zero point 128.
 * Asymmetric: scale (hi - lo) / (qmax - qmin), zero point round(qmin -
 * lo / scale) clamped to the dtype. An all-zero range gives scale 1. 0, or
 * a status with the error set for NULL outputs, lo > hi, a non-finite
 * bound, or another dtype. */
OAR_API int oar_quant_params(double lo, double hi, oar_dtype dtype, bool symmetric, double *scale,
                             int64_t *zero_point);

/* A weight quantized per channel along axis, symmetric int8: scale[c] =
 * max |w[c]| / 127 (1 where the channel is all zero), zero point 0, *wq =
 * round(w / scale) as int8 and *scales a 1-d f64 tensor (both pool-owned,
 * as op results). For oar_qlinear's wq [k, n], axis 1 (per output
 * column). 0, or a status with the error set for NULL arguments, a
 * non-float or 0-d w, an axis out of range, or a NaN or infinite weight. */
OAR_API int oar_quantize_weight(oar_tensor *w, int axis, oar_tensor **wq, oar_tensor **scales);

/* Post-training quantization of a graph (a saved model from
 * oar_graph_load, or a traced one), in place. Every top-level matmul(x, W)
 * with x f32 of 2 or more dims and W a 2-D float constant (or the permute
 * [1, 0] of one: a traced Linear), and every conv2d(x, W, b) with W a 4-D
 * float constant, becomes quantize(x) to uint8 -> the int8 product
 * (oar_qmatmul / oar_qconv2d on the VNNI kernels) -> f32 times x's scale
 * and W's, plus the conv's bias. W is symmetric int8 per output channel
 * (per tensor with per_tensor_weights); x's scale and zero point come from
 * the range `method` calibrates over the batches (asymmetric uint8,
 * oar_quant_params; an x never negative in calibration, a relu's output,
 * gets [0, t] from a histogram method's [-t, t]); each distinct x is
 * observed once. The rest of the graph is untouched. Save the result with
 * oar_graph_save and serve it with a predictor (the int8 predictor path;
 * `oar quantize` does both). Returns the number of layers quantized (0:
 * none qualified, the graph unchanged), or a status with the error set for
 * NULL arguments, no batches or a NULL batch tensor, a bad method or
 * percentile (as oar_calib_observer_new), or a batch the graph cannot run
 * or that holds NaN or infinity (the graph unchanged then). */
typedef struct oar_quantize_config {
    int n_batches;                /* calibration batches, at least 1 */
    oar_tensor *const *batches;   /* n_batches x the graph's inputs, batch by batch */
    oar_calib_method method;      /* activation ranges (OAR_CALIB_MINMAX: 0) */
    double percentile;            /* PERCENTILE: as oar_calib_observer_new (0: 99.99) */
    int bins;                     /* PERCENTILE, ENTROPY: histogram bins (0: 2048) */
    bool per_tensor_weights;      /* one weight scale per layer, not per channel */
} oar_quantize_config;
OAR_API int oar_graph_quantize(oar_graph *g, const oar_quantize_config *cfg);

#ifdef __cplusplus
}
#endif

#endif

/* ONNX import, spectral ops (opset 17): DFT and STFT on oar's FFT, and the
 * MelWeightMatrix constant. ONNX carries complex values as a trailing dim
 * of 2 (real: 1). */
#define OARI_ONNX_PROTO
#include "onnx_internal.h"
#include <oar/complex.h>
#include <oar/fft.h>
#include <math.h>
#include <string.h>

/* [..., 1 | 2] real or (re, im) pairs as a complex tensor [...]. */
static oar_tensor *to_complex(oar_tensor *x) {
    int r = oar_tensor_ndim(x);
    int64_t c = oar_tensor_shape(x)[r - 1];
    if (c == 2) return oar_view_as_complex(oar_contiguous(x));
    if (c != 1) {
        oari_error(OAR_ERR_INVALID, "the last dim is %lld (1: real, 2: complex)", (long long)c);
        return NULL;
    }
    oar_tensor *re = oar_squeeze(x, r - 1);
    return oar_complex(re, oar_zeros_like(re));
}

int oari_onnx_conv_dft(oari_onnx_node *nd) {
    int st = oari_onnx_need(nd, 1);
    if (st) return st;
    oar_tensor *x = nd->in[0];
    int r = oar_tensor_ndim(x);
    int64_t axis, n = -1;
    if (r < 2) return oari_error(OAR_ERR_INVALID, "input rank %d < 2", r);
    if ((st = oari_onnx_axis(oari_onnx_attr_i(nd, "axis", 1), r - 1, false, &axis))) return st;
    if (nd->n_in > 1 && nd->in[1]) {
        int k = oari_onnx_input_ints(nd, 1, &n, 1);
        if (k < 0) return k;
    }
    bool inverse = oari_onnx_attr_i(nd, "inverse", 0) != 0, onesided = oari_onnx_attr_i(nd, "onesided", 0) != 0;
    oar_tensor *c = to_complex(x);
    oar_tensor *y = inverse ? oar_fft_ifft(c, n, (int)axis, "backward") : oar_fft_fft(c, n, (int)axis, "backward");
    if (onesided && y) y = oar_slice(y, (int)axis, 0, oar_tensor_shape(y)[axis] / 2 + 1, 1);
    nd->out[0] = y ? oar_contiguous(oar_view_as_real(oar_contiguous(y))) : NULL;
    return nd->out[0] ? 0 : OAR_ERR_INVALID;
}

int oari_onnx_conv_stft(oari_onnx_node *nd) {
    int st = oari_onnx_need(nd, 2);
    if (st) return st;
    oar_tensor *x = nd->in[0], *win = nd->n_in > 2 ? nd->in[2] : NULL;
    if (oar_tensor_ndim(x) != 3) return oari_error(OAR_ERR_INVALID, "signal must be [batch, length, 1 | 2]");
    int64_t step, flen = -1;
    int k = oari_onnx_input_ints(nd, 1, &step, 1);
    if (k < 0) return k;
    if (nd->n_in > 3 && nd->in[3] && (k = oari_onnx_input_ints(nd, 3, &flen, 1)) < 0) return k;
    if (flen < 0 && win) flen = oar_tensor_shape(win)[0];
    int64_t len = oar_tensor_shape(x)[1];
    if (flen < 1 || step < 1 || flen > len) return oari_error(OAR_ERR_INVALID, "frame_length %lld, frame_step %lld, length %lld",
                                                            (long long)flen, (long long)step, (long long)len);
    int64_t frames = (len - flen) / step + 1;
    if (frames > 4096) return oari_error(OAR_ERR_UNSUPPORTED, "%lld frames (at most 4096)", (long long)frames);
    oar_tensor *c = to_complex(x); /* [B, len] */
    oar_tensor **fs = oari_calloc((size_t)frames, sizeof *fs);
    if (!fs) return oari_fail_status();
    for (int64_t f = 0; f < frames; f++) {
        oar_tensor *s = oar_slice(c, 1, f * step, f * step + flen, 1);
        fs[f] = win ? oar_mul(s, win) : s;
    }
    oar_tensor *y = oar_fft_fft(oar_stack((int)frames, fs, 1), -1, 2, "backward"); /* [B, frames, flen] */
    oari_free(fs, (size_t)frames * sizeof *fs);
    if (oari_onnx_attr_i(nd, "onesided", 1) && y) y = oar_slice(y, 2, 0, flen / 2 + 1, 1);
    nd->out[0] = y ? oar_contiguous(oar_view_as_real(oar_contiguous(y))) : NULL;
    return nd->out[0] ? 0 : OAR_ERR_INVALID;
}

/* MelWeightMatrix: a constant [dft_length / 2 + 1, num_mel_bins] of
 * triangular filters, built at import from constant inputs as ONNX's
 * reference builds it (bins at (dft_length + 1) f / sample_rate). */
int oari_onnx_conv_mel_weight_matrix(oari_onnx_node *nd) {
    int st = oari_onnx_need(nd, 5);
    if (st) return st;
    int64_t nmel, dftl, rate;
    double lo, hi;
    if ((st = oari_onnx_input_ints(nd, 0, &nmel, 1)) < 0 || (st = oari_onnx_input_ints(nd, 1, &dftl, 1)) < 0 ||
        (st = oari_onnx_input_ints(nd, 2, &rate, 1)) < 0 || (st = oari_onnx_input_double(nd, 3, &lo)) ||
        (st = oari_onnx_input_double(nd, 4, &hi)))
        return st;
    if (nmel < 1 || nmel > 4096 || dftl < 1 || dftl > (1 << 20) || rate < 1)
        return oari_error(OAR_ERR_INVALID, "num_mel_bins %lld, dft_length %lld, sample_rate %lld", (long long)nmel,
                          (long long)dftl, (long long)rate);
    oar_dtype dt = oari_onnx_dtype((int32_t)oari_onnx_attr_i(nd, "output_datatype", 1));
    if (dt == OAR_DTYPE_INVALID) return oari_error(OAR_ERR_UNSUPPORTED, "output_datatype is not an oar dtype");
    int64_t nspec = dftl / 2 + 1;
    oar_tensor *m = oar_zeros(OAR_F64, 2, (int64_t[]){nspec, nmel});
    int64_t *bins = oari_malloc((size_t)(nmel + 2) * sizeof *bins);
    if (!m || !bins) {
        oari_free(bins, (size_t)(nmel + 2) * sizeof *bins);
        return oari_fail_status();
    }
    double lmel = 2595 * log10(1 + lo / 700), hmel = 2595 * log10(1 + hi / 700), step = (hmel - lmel) / (double)(nmel + 2);
    for (int64_t i = 0; i < nmel + 2; i++) {
        double f = 700 * (pow(10, ((double)i * step + lmel) / 2595) - 1);
        double b = floor((double)(dftl + 1) * f / (double)rate);
        bins[i] = b < 0 ? 0 : b > (double)(nspec - 1) ? nspec - 1 : (int64_t)b;
    }
    double *v = oar_tensor_data(m);
    for (int64_t i = 0; i < nmel; i++) {
        int64_t l = bins[i], c = bins[i + 1], h = bins[i + 2];
        if (c == l) v[c * nmel + i] = 1;
        else
            for (int64_t j = l; j <= c; j++) v[j * nmel + i] = (double)(j - l) / (double)(c - l);
        for (int64_t j = c; j < h; j++) v[j * nmel + i] = (double)(h - j) / (double)(h - c);
    }
    oari_free(bins, (size_t)(nmel + 2) * sizeof *bins);
    nd->out[0] = oar_cast(m, dt);
    return nd->out[0] ? 0 : OAR_ERR_INVALID;
}

/* ONNX import, RoiAlign (4-D, as onnxruntime computes it): the rois and
 * batch indices must be constants, so each output bin's bilinear sample
 * points (four corner indices and weights each) are computed at import;
 * the gather from X and the average (or onnxruntime's max of weighted
 * corners) are oar ops. */
#define OARI_ONNX_PROTO
#include "onnx_internal.h"
#include <math.h>
#include <string.h>

/* One sample's four corners (index into the H*W plane, weight). */
static void corners(double y, double x, int64_t H, int64_t W, int64_t *idx, double *w) {
    if (y < -1.0 || y > (double)H || x < -1.0 || x > (double)W) {
        for (int k = 0; k < 4; k++) idx[k] = 0, w[k] = 0;
        return;
    }
    if (y <= 0) y = 0;
    if (x <= 0) x = 0;
    int64_t yl = (int64_t)y, xl = (int64_t)x, yh, xh;
    if (yl >= H - 1) yh = yl = H - 1, y = (double)yl;
    else yh = yl + 1;
    if (xl >= W - 1) xh = xl = W - 1, x = (double)xl;
    else xh = xl + 1;
    double ly = y - (double)yl, lx = x - (double)xl, hy = 1 - ly, hx = 1 - lx;
    idx[0] = yl * W + xl, w[0] = hy * hx;
    idx[1] = yl * W + xh, w[1] = hy * lx;
    idx[2] = yh * W + xl, w[2] = ly * hx;
    idx[3] = yh * W + xh, w[3] = ly * lx;
}

int oari_onnx_conv_roi_align(oari_onnx_node *nd) {
    int st = oari_onnx_need(nd, 3);
    if (st) return st;
    oar_tensor *x = nd->in[0], *rois = nd->in[1], *bi = nd->in[2];
    if (oar_tensor_ndim(x) != 4 || oar_tensor_ndim(rois) != 2 || oar_tensor_shape(rois)[1] != 4)
        return oari_error(OAR_ERR_INVALID, "needs X [N, C, H, W] and rois [R, 4]");
    if (!oar_tensor_data(rois) || !oar_tensor_data(bi))
        return oari_error(OAR_ERR_UNSUPPORTED, "rois and batch_indices computed at run time are not supported "
                          "(the sample grid depends on them): they must be constants");
    int64_t R = oar_tensor_shape(rois)[0], C = oar_tensor_shape(x)[1], H = oar_tensor_shape(x)[2], W = oar_tensor_shape(x)[3];
    int64_t oh = oari_onnx_attr_i(nd, "output_height", 1), ow = oari_onnx_attr_i(nd, "output_width", 1);
    int64_t sr = oari_onnx_attr_i(nd, "sampling_ratio", 0);
    double scale = oari_onnx_attr_f(nd, "spatial_scale", 1.0);
    bool half = oari_onnx_attr_s_is(nd, "coordinate_transformation_mode", "half_pixel", "half_pixel");
    bool avg = oari_onnx_attr_s_is(nd, "mode", "avg", "avg");
    if (!avg && !oari_onnx_attr_s_is(nd, "mode", "avg", "max")) return oari_error(OAR_ERR_INVALID, "unknown mode");
    if (oh < 1 || ow < 1 || oh * ow > 65536 || R > 65536 || oar_tensor_numel(bi) != R)
        return oari_error(OAR_ERR_INVALID, "output %lldx%lld for %lld rois", (long long)oh, (long long)ow, (long long)R);
    oar_tensor *r64 = oar_contiguous(oar_cast(rois, OAR_F64)), *b64 = oar_contiguous(oar_cast(bi, OAR_I64));
    if (!r64 || !b64) return OAR_ERR_INVALID;
    const double *rv = oar_tensor_data(r64);
    const int64_t *bv = oar_tensor_data(b64);
    oar_tensor *xf = oar_reshape(x, 3, (int64_t[]){oar_tensor_shape(x)[0], C, H * W});
    oar_dtype dt = oar_tensor_dtype(x);
    oar_tensor **ys = oari_calloc((size_t)R, sizeof *ys);
    if (!ys) return oari_fail_status();
    double off = half ? 0.5 : 0;
    for (int64_t r = 0; r < R && !st; r++) {
        if (bv[r] < 0 || bv[r] >= oar_tensor_shape(x)[0]) {
            st = oari_error(OAR_ERR_INVALID, "batch index %lld out of range", (long long)bv[r]);
            break;
        }
        double x0 = rv[4 * r] * scale - off, y0 = rv[4 * r + 1] * scale - off;
        double rw = rv[4 * r + 2] * scale - off - x0, rh = rv[4 * r + 3] * scale - off - y0;
        if (!half) rw = rw > 1 ? rw : 1, rh = rh > 1 ? rh : 1;
        double bh = rh / (double)oh, bw = rw / (double)ow;
        double gh_ = sr > 0 ? (double)sr : ceil(rh / (double)oh), gw_ = sr > 0 ? (double)sr : ceil(rw / (double)ow);
        if (!(gh_ >= 0 && gh_ <= 64 && gw_ >= 0 && gw_ <= 64)) {
            st = oari_error(OAR_ERR_UNSUPPORTED, "a sampling grid of %gx%g per bin (at most 64x64)", gh_, gw_);
            break;
        }
        int64_t gh = (int64_t)gh_, gw = (int64_t)gw_, K = gh * gw * 4, P = oh * ow;
        double count = gh * gw > 0 ? (double)(gh * gw) : 1;
        if (K == 0) { /* an empty grid: zeros */
            ys[r] = oar_zeros(dt, 3, (int64_t[]){C, oh, ow});
            continue;
        }
        int64_t n = P * K;
        oar_tensor *idx = oar_empty(OAR_I64, 1, &n, NULL), *wt = oar_empty(OAR_F64, 2, (int64_t[]){P, K}, NULL);
        if (!idx || !wt) {
            st = OAR_ERR_INVALID;
            break;
        }
        int64_t *iv = oar_tensor_data(idx);
        double *wv = oar_tensor_data(wt);
        for (int64_t ph = 0; ph < oh; ph++)
            for (int64_t pw = 0; pw < ow; pw++)
                for (int64_t iy = 0; iy < gh; iy++)
                    for (int64_t ix = 0; ix < gw; ix++) {
                        double yy = y0 + (double)ph * bh + ((double)iy + 0.5) * bh / (double)gh;
                        double xx = x0 + (double)pw * bw + ((double)ix + 0.5) * bw / (double)gw;
                        int64_t at = ((ph * ow + pw) * gh * gw + iy * gw + ix) * 4;
                        corners(yy, xx, H, W, iv + at, wv + at);
                    }
        oar_tensor *plane = oar_squeeze(oar_slice(xf, 0, bv[r], bv[r] + 1, 1), 0); /* [C, H*W] */
        oar_tensor *v = oar_reshape(oar_index_select(plane, 1, idx), 3, (int64_t[]){C, P, K});
        v = oar_mul(v, oar_cast(wt, dt));
        v = avg ? oar_div_scalar(oar_sum(v, 1, (int64_t[]){2}, false), count) : oar_amax(v, 1, (int64_t[]){2}, false);
        ys[r] = oar_reshape(v, 3, (int64_t[]){C, oh, ow});
        if (!ys[r]) st = OAR_ERR_INVALID;
    }
    if (!st) nd->out[0] = R ? oar_stack((int)R, ys, 0) : oar_zeros(dt, 4, (int64_t[]){0, C, oh, ow});
    oari_free(ys, (size_t)R * sizeof *ys);
    if (st) return st;
    return nd->out[0] ? 0 : OAR_ERR_INVALID;
}

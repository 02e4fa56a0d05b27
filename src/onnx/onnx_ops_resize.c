/* ONNX import, Resize and Upsample: separable interpolation, one axis at a
 * time, as ONNX's reference does. Shapes are static, so each resized axis
 * gets, at import, the source indices and weights of its taps (nearest 2
 * with one weight 1, linear 2, cubic 4; edge samples clamped), and becomes
 * sum over taps of index_select(x, axis, idx) * weight. Every coordinate
 * transformation mode, nearest mode, cubic_coeff_a and exclude_outside. */
#define OARI_ONNX_PROTO
#include "onnx_internal.h"
#include <math.h>
#include <string.h>

typedef enum { M_NEAREST, M_LINEAR, M_CUBIC } mode;
typedef enum { C_HALF, C_PYTORCH, C_ALIGN, C_ASYM, C_TF_NN, C_TF_CROP } coord;
typedef enum { N_ROUND_FLOOR, N_ROUND_CEIL, N_FLOOR, N_CEIL } nearest;

typedef struct {
    mode mode;
    coord coord;
    nearest nearest;
    double a;         /* cubic coefficient */
    bool exclude;     /* exclude_outside */
    double extrap;    /* tf_crop_and_resize outside value */
} rs_opts;

static void coeffs(const rs_opts *o, double r, double *c) {
    switch (o->mode) {
    case M_NEAREST:
        if (r == 1) c[0] = 0, c[1] = 1;
        else if (o->nearest == N_ROUND_FLOOR) c[0] = r <= 0.5, c[1] = r > 0.5;
        else if (o->nearest == N_ROUND_CEIL) c[0] = r < 0.5, c[1] = r >= 0.5;
        else if (o->nearest == N_FLOOR) c[0] = 1, c[1] = 0;
        else c[0] = 0, c[1] = 1; /* ceil */
        break;
    case M_LINEAR:
        c[0] = 1 - r, c[1] = r;
        break;
    case M_CUBIC: {
        double A = o->a, s = r + 1, t = 1 - r, u = 2 - r;
        c[0] = ((A * s - 5 * A) * s + 8 * A) * s - 4 * A;
        c[1] = ((A + 2) * r - (A + 3)) * r * r + 1;
        c[2] = ((A + 2) * t - (A + 3)) * t * t + 1;
        c[3] = ((A * u - 5 * A) * u + 8 * A) * u - 4 * A;
        break;
    }
    }
}

/* x resized along axis from its size to out (scale: the factor the
 * coordinates use; roi: start, end for tf_crop_and_resize). */
static oar_tensor *resize_axis(const rs_opts *o, oar_tensor *x, int axis, int64_t out, double scale, const double *roi) {
    int64_t in = oar_tensor_shape(x)[axis];
    int n = o->mode == M_CUBIC ? 4 : 2, r = oar_tensor_ndim(x);
    oar_tensor *idx[4], *w[4], *extra = NULL;
    int64_t shape[OAR_MAX_DIMS];
    for (int d = 0; d < r; d++) shape[d] = d == axis ? out : 1;
    for (int j = 0; j < n; j++) {
        idx[j] = oar_empty(OAR_I64, 1, &out, NULL);
        w[j] = oar_empty(OAR_F64, r, shape, NULL);
        if (!idx[j] || !w[j]) return NULL;
    }
    if (o->coord == C_TF_CROP && !(extra = oar_zeros(OAR_F64, r, shape))) return NULL;
    double width = scale * (double)in; /* as the reference: not rounded */
    for (int64_t i = 0; i < out; i++) {
        double xi = (double)i, xo;
        bool outside = false;
        switch (o->coord) {
        case C_ALIGN: xo = width == 1 ? 0 : xi * (double)(in - 1) / (width - 1); break;
        case C_ASYM: xo = xi / scale; break;
        case C_TF_NN: xo = (xi + 0.5) / scale; break;
        case C_PYTORCH: xo = width == 1 ? -0.5 : (xi + 0.5) / scale - 0.5; break;
        case C_TF_CROP:
            xo = width == 1 ? (roi[1] - roi[0]) * (double)(in - 1) / 2
                            : xi * (roi[1] - roi[0]) * (double)(in - 1) / (width - 1);
            xo += roi[0] * (double)(in - 1);
            outside = xo < 0 || xo > (double)(in - 1);
            break;
        default: xo = (xi + 0.5) / scale - 0.5; break;
        }
        double c[4];
        if (!(xo > -1e15 && xo < 1e15)) xo = xo > 0 ? 1e15 : -1e15; /* a wild roi: keep the cast defined */
        int64_t left = (int64_t)ceil(xo) - 1; /* the tap left of xo, or below an integer xo */
        coeffs(o, xo - (double)left, c);
        double sum = 0;
        for (int j = 0; j < n; j++) {
            int64_t k = left - (n / 2 - 1) + j;
            if (o->exclude && (k < 0 || k >= in)) c[j] = 0;
            if (outside) c[j] = 0;
            sum += c[j];
            ((int64_t *)oar_tensor_data(idx[j]))[i] = k < 0 ? 0 : k >= in ? in - 1 : k;
        }
        for (int j = 0; j < n; j++)
            ((double *)oar_tensor_data(w[j]))[i] = o->exclude && sum != 0 ? c[j] / sum : c[j];
        if (outside) ((double *)oar_tensor_data(extra))[i] = o->extrap;
    }
    oar_dtype dt = oar_tensor_dtype(x);
    oar_tensor *y = extra ? oar_cast(extra, dt) : NULL;
    for (int j = 0; j < n; j++) {
        oar_tensor *t = oar_mul(oar_index_select(x, axis, idx[j]), oar_cast(w[j], dt));
        y = y ? oar_add(y, t) : t;
    }
    return y;
}

static int resize_with(oari_onnx_node *nd, const rs_opts *o, const double *scales, const int64_t *sizes,
                       const double *roi) {
    oar_tensor *y = nd->in[0];
    int r = oar_tensor_ndim(y);
    oar_dtype dt = oar_tensor_dtype(y);
    if (!oar_dtype_is_float(dt)) y = oar_cast(y, OAR_F32);
    for (int d = 0; d < r && y; d++) {
        int64_t in = oar_tensor_shape(y)[d];
        if (in == 0) return oari_error(OAR_ERR_INVALID, "axis %d has size 0", d);
        double s = sizes ? (double)sizes[d] / (double)in : scales[d];
        if (!(s > 0 && (double)in * s <= 1e9)) return oari_error(OAR_ERR_INVALID, "scale %g of axis %d", s, d);
        int64_t out = sizes ? sizes[d] : (int64_t)floor((double)in * s);
        if (out < 0) return oari_error(OAR_ERR_INVALID, "size %lld of axis %d", (long long)out, d);
        if (out == in && s == 1 && o->coord != C_TF_CROP) continue;
        y = resize_axis(o, y, d, out, s, roi ? (double[]){roi[d], roi[r + d]} : NULL);
    }
    if (y == nd->in[0]) y = oar_clone(y);
    nd->out[0] = y ? oar_cast(y, dt) : NULL;
    return nd->out[0] ? 0 : OAR_ERR_INVALID;
}

int oari_onnx_conv_resize(oari_onnx_node *nd) {
    int st = oari_onnx_need(nd, 1);
    if (st) return st;
    if (oari_onnx_attr_i(nd, "antialias", 0) || oari_onnx_attr(nd, "axes") ||
        !oari_onnx_attr_s_is(nd, "keep_aspect_ratio_policy", "stretch", "stretch"))
        return oari_error(OAR_ERR_UNSUPPORTED, "antialias, axes and keep_aspect_ratio_policy (opset 18) are not supported");
    rs_opts o = {.a = oari_onnx_attr_f(nd, "cubic_coeff_a", -0.75), .exclude = oari_onnx_attr_i(nd, "exclude_outside", 0) != 0,
                 .extrap = oari_onnx_attr_f(nd, "extrapolation_value", 0.0)};
    if (oari_onnx_attr_s_is(nd, "mode", "nearest", "nearest")) o.mode = M_NEAREST;
    else if (oari_onnx_attr_s_is(nd, "mode", "nearest", "linear")) o.mode = M_LINEAR;
    else if (oari_onnx_attr_s_is(nd, "mode", "nearest", "cubic")) o.mode = M_CUBIC;
    else return oari_error(OAR_ERR_INVALID, "unknown mode");
    static const char *const coords[] = {"half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
                                         "tf_half_pixel_for_nn", "tf_crop_and_resize"};
    int ci = -1;
    for (int i = 0; i < 6; i++)
        if (oari_onnx_attr_s_is(nd, "coordinate_transformation_mode", "half_pixel", coords[i])) ci = i;
    if (ci < 0) return oari_error(OAR_ERR_INVALID, "unknown coordinate_transformation_mode");
    o.coord = (coord)ci;
    static const char *const nears[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
    int ni = -1;
    for (int i = 0; i < 4; i++)
        if (oari_onnx_attr_s_is(nd, "nearest_mode", "round_prefer_floor", nears[i])) ni = i;
    if (ni < 0) return oari_error(OAR_ERR_INVALID, "unknown nearest_mode");
    o.nearest = (nearest)ni;
    int r = oar_tensor_ndim(nd->in[0]);
    int64_t sizes[OAR_MAX_DIMS];
    double scales[OAR_MAX_DIMS], roi[2 * OAR_MAX_DIMS];
    bool have_sizes = nd->n_in > 3 && nd->in[3] && oar_tensor_numel(nd->in[3]) > 0;
    bool have_scales = nd->n_in > 2 && nd->in[2] && oar_tensor_numel(nd->in[2]) > 0;
    if (have_sizes == have_scales) return oari_error(OAR_ERR_INVALID, "exactly one of scales and sizes must be given");
    if (have_sizes) {
        int k = oari_onnx_input_ints(nd, 3, sizes, OAR_MAX_DIMS);
        if (k < 0) return k;
        if (k != r) return oari_error(OAR_ERR_INVALID, "%d sizes for rank %d", k, r);
    } else {
        oar_tensor *s = nd->in[2];
        if (!oar_tensor_data(s)) return oari_error(OAR_ERR_UNSUPPORTED, "scales are computed at run time; they must be constants");
        if (oar_tensor_numel(s) != r) return oari_error(OAR_ERR_INVALID, "%lld scales for rank %d", (long long)oar_tensor_numel(s), r);
        oar_tensor *s64 = oar_contiguous(oar_cast(s, OAR_F64));
        if (!s64) return OAR_ERR_INVALID;
        memcpy(scales, oar_tensor_data(s64), (size_t)r * sizeof *scales);
    }
    if (o.coord == C_TF_CROP) {
        if (nd->n_in < 2 || !nd->in[1] || !oar_tensor_data(nd->in[1]) || oar_tensor_numel(nd->in[1]) != 2 * r)
            return oari_error(OAR_ERR_INVALID, "tf_crop_and_resize needs a constant roi of %d values", 2 * r);
        oar_tensor *q = oar_contiguous(oar_cast(nd->in[1], OAR_F64));
        if (!q) return OAR_ERR_INVALID;
        memcpy(roi, oar_tensor_data(q), (size_t)(2 * r) * sizeof *roi);
    }
    return resize_with(nd, &o, have_scales ? scales : NULL, have_sizes ? sizes : NULL, o.coord == C_TF_CROP ? roi : NULL);
}

/* Upsample (7..9): scales as an attribute (7, 8) or input (9); nearest
 * (floor of the asymmetric coordinate) or linear. */
int oari_onnx_conv_upsample(oari_onnx_node *nd) {
    int st = oari_onnx_need(nd, 1);
    if (st) return st;
    rs_opts o = {.coord = C_ASYM, .nearest = N_FLOOR};
    if (oari_onnx_attr_s_is(nd, "mode", "nearest", "nearest")) o.mode = M_NEAREST;
    else if (oari_onnx_attr_s_is(nd, "mode", "nearest", "linear")) o.mode = M_LINEAR;
    else return oari_error(OAR_ERR_INVALID, "unknown mode");
    int r = oar_tensor_ndim(nd->in[0]);
    double scales[OAR_MAX_DIMS];
    if (nd->opset < 9) {
        const Onnx__AttributeProto *a = oari_onnx_attr(nd, "scales");
        if (!a || a->n_floats != (size_t)r) return oari_error(OAR_ERR_INVALID, "scales must have %d entries", r);
        for (int d = 0; d < r; d++) scales[d] = a->floats[d];
    } else {
        if ((st = oari_onnx_need(nd, 2))) return st;
        oar_tensor *s = nd->in[1];
        if (!oar_tensor_data(s)) return oari_error(OAR_ERR_UNSUPPORTED, "scales are computed at run time; they must be constants");
        if (oar_tensor_numel(s) != r) return oari_error(OAR_ERR_INVALID, "%lld scales for rank %d", (long long)oar_tensor_numel(s), r);
        oar_tensor *s64 = oar_contiguous(oar_cast(s, OAR_F64));
        if (!s64) return OAR_ERR_INVALID;
        memcpy(scales, oar_tensor_data(s64), (size_t)r * sizeof *scales);
    }
    return resize_with(nd, &o, scales, NULL, NULL);
}

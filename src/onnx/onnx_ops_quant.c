/* ONNX import, quantization: QuantizeLinear and DequantizeLinear onto
 * oar_quantize / oar_dequantize (int8 and uint8, per tensor and per axis),
 * DynamicQuantizeLinear (uint8, as ONNX), and the integer and quantized
 * linear ops (ConvInteger, MatMulInteger, QLinearConv, QLinearMatMul; int8
 * or uint8 operands), computed in f64 on the zero-point-shifted values
 * (exact for 8-bit products up to 2^53) and rounded half to even, as
 * ONNX's reference. */
#define OARI_ONNX_PROTO
#include "onnx_internal.h"
#include <string.h>


/* v [n] shaped to broadcast along axis of a rank-r tensor (0-d stays). */
static oar_tensor *along(oar_tensor *v, int64_t axis, int r) {
    if (oar_tensor_ndim(v) == 0 || r == 0) return v;
    int64_t s[OAR_MAX_DIMS];
    for (int d = 0; d < r; d++) s[d] = d == axis ? oar_tensor_numel(v) : 1;
    return oar_reshape(v, r, s);
}

static oar_tensor *saturate_u8(oar_tensor *x) { return oar_cast(oar_clamp(oar_round(x), 0, 255), OAR_U8); }

/* The axis attribute (default 1) of a per-axis scale of x. */
static int quant_axis(oari_onnx_node *nd, oar_tensor *x, oar_tensor *scale, int64_t *axis) {
    *axis = 1;
    if (oar_tensor_ndim(scale) == 0) return 0;
    return oari_onnx_axis(oari_onnx_attr_i(nd, "axis", 1), oar_tensor_ndim(x), false, axis);
}

/* y = saturate(round(x / scale) + zp) as the zero point's dtype (uint8
 * without one). */
int oari_onnx_conv_quantize(oari_onnx_node *nd) {
    NEED(2);
    oar_tensor *x = nd->in[0], *zp = nd->n_in > 2 ? nd->in[2] : NULL;
    oar_dtype qd = zp ? oar_tensor_dtype(zp) : OAR_U8;
    if (qd != OAR_U8 && qd != OAR_I8)
        return oari_error(OAR_ERR_UNSUPPORTED, "zero point of %s (int8 and uint8 only)", oar_dtype_name(qd));
    int64_t axis;
    int st = quant_axis(nd, x, nd->in[1], &axis);
    if (st) return st;
    if (!oar_dtype_is_float(oar_tensor_dtype(x))) x = oar_cast(x, OAR_F32); /* int32 x */
    RESULT(oar_quantize(x, nd->in[1], zp, (int)axis, qd));
}

/* y = (x - zp) * scale, x int8, uint8 or int32. */
int oari_onnx_conv_dequantize(oari_onnx_node *nd) {
    NEED(2);
    oar_tensor *x = nd->in[0], *zp = nd->n_in > 2 ? nd->in[2] : NULL;
    int64_t axis;
    int st = quant_axis(nd, x, nd->in[1], &axis);
    if (st) return st;
    RESULT(oar_dequantize(x, nd->in[1], zp, (int)axis));
}

int oari_onnx_conv_dynamic_quantize(oari_onnx_node *nd) {
    NEED(1);
    oar_tensor *x = nd->in[0];
    oar_tensor *zero = oari_onnx_scalar(0, oar_tensor_dtype(x));
    oar_tensor *lo = oar_minimum(oar_amin(x, 0, NULL, false), zero), *hi = oar_maximum(oar_amax(x, 0, NULL, false), zero);
    oar_tensor *scale = oar_div_scalar(oar_sub(hi, lo), 255.0);
    oar_tensor *zp = saturate_u8(oar_div(oar_neg(lo), scale));
    nd->out[1] = scale;
    nd->out[2] = zp;
    RESULT(saturate_u8(oar_add(oar_round(oar_div(x, scale)), oar_cast(zp, oar_tensor_dtype(x)))));
}

/* x - zp in f64; zp NULL, a scalar, or per channel along axis of rank r. */
static oar_tensor *shifted(oar_tensor *x, oar_tensor *zp, int64_t axis) {
    oar_tensor *v = oar_cast(x, OAR_F64);
    return zp ? oar_sub(v, oar_cast(along(zp, axis, oar_tensor_ndim(x)), OAR_F64)) : v;
}

/* The accumulator to the output's 8-bit dtype, y_zp's (uint8 without one). */
static oar_tensor *requantize(oar_tensor *acc, oar_tensor *scale, oar_tensor *y_scale, oar_tensor *y_zp) {
    oar_tensor *q = oar_round(oar_mul(acc, oar_div(oar_cast(scale, OAR_F64), oar_cast(y_scale, OAR_F64))));
    if (y_zp) q = oar_add(q, oar_cast(y_zp, OAR_F64));
    bool i8 = y_zp && oar_tensor_dtype(y_zp) == OAR_I8;
    return oar_cast(oar_clamp(q, i8 ? -128 : 0, i8 ? 127 : 255), i8 ? OAR_I8 : OAR_U8);
}

/* conv of already shifted f64 operands through the Conv converter */
static oar_tensor *conv_f64(oari_onnx_node *nd, oar_tensor *x, oar_tensor *w, oar_tensor *b) {
    oari_onnx_node c = *nd;
    c.n_in = 3;
    c.in[0] = x;
    c.in[1] = w;
    c.in[2] = b;
    c.n_out = 1;
    return oari_onnx_conv_conv(&c) ? NULL : c.out[0];
}

static int only_8bit(oari_onnx_node *nd, int n, const int *which) {
    for (int i = 0; i < n; i++) {
        oar_tensor *t = which[i] < nd->n_in ? nd->in[which[i]] : NULL;
        if (t && oar_tensor_dtype(t) != OAR_U8 && oar_tensor_dtype(t) != OAR_I8)
            return oari_error(OAR_ERR_UNSUPPORTED, "input %d of %s is not supported (int8 and uint8 only)",
                              which[i], oar_dtype_name(oar_tensor_dtype(t)));
    }
    return 0;
}

int oari_onnx_conv_conv_integer(oari_onnx_node *nd) {
    NEED(2);
    int st = only_8bit(nd, 4, (int[]){0, 1, 2, 3});
    if (st) return st;
    oar_tensor *x = shifted(nd->in[0], nd->n_in > 2 ? nd->in[2] : NULL, 1);
    oar_tensor *w = shifted(nd->in[1], nd->n_in > 3 ? nd->in[3] : NULL, 0);
    RESULT(oar_cast(oar_round(conv_f64(nd, x, w, NULL)), OAR_I32));
}

int oari_onnx_conv_matmul_integer(oari_onnx_node *nd) {
    NEED(2);
    int st = only_8bit(nd, 4, (int[]){0, 1, 2, 3});
    if (st) return st;
    oar_tensor *a = nd->in[0], *azp = nd->n_in > 2 ? nd->in[2] : NULL, *bzp = nd->n_in > 3 ? nd->in[3] : NULL;
    int ra = oar_tensor_ndim(a);
    /* a's zero point per row (its second to last dim), b's per column */
    oar_tensor *as = shifted(a, azp, ra - 2), *bs = shifted(nd->in[1], bzp, oar_tensor_ndim(nd->in[1]) - 1);
    RESULT(oar_cast(oar_round(oar_matmul(as, bs)), OAR_I32));
}

int oari_onnx_conv_qlinear_matmul(oari_onnx_node *nd) {
    NEED(8);
    int st = only_8bit(nd, 5, (int[]){0, 2, 3, 5, 7});
    if (st) return st;
    oar_tensor *a = shifted(nd->in[0], nd->in[2], oar_tensor_ndim(nd->in[0]) - 2);
    oar_tensor *b = shifted(nd->in[3], nd->in[5], oar_tensor_ndim(nd->in[3]) - 1);
    oar_tensor *scale = oar_mul(oar_cast(along(nd->in[1], oar_tensor_ndim(nd->in[0]) - 2, oar_tensor_ndim(nd->in[0])), OAR_F64),
                                oar_cast(nd->in[4], OAR_F64));
    RESULT(requantize(oar_matmul(a, b), scale, nd->in[6], nd->in[7]));
}

int oari_onnx_conv_qlinear_conv(oari_onnx_node *nd) {
    NEED(8);
    int st = only_8bit(nd, 5, (int[]){0, 2, 3, 5, 7});
    if (st) return st;
    oar_tensor *x = shifted(nd->in[0], nd->in[2], 1), *w = shifted(nd->in[3], nd->in[5], 0);
    oar_tensor *b = nd->n_in > 8 && nd->in[8] ? oar_cast(nd->in[8], OAR_F64) : NULL;
    oar_tensor *acc = conv_f64(nd, x, w, b);
    int r = oar_tensor_ndim(nd->in[0]);
    oar_tensor *scale = oar_mul(oar_cast(nd->in[1], OAR_F64), oar_cast(along(nd->in[4], 1, r), OAR_F64));
    RESULT(requantize(acc, scale, nd->in[6], nd->in[7]));
}

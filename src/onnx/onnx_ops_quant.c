/* ONNX import, quantization: QuantizeLinear and DequantizeLinear onto
 * oar_quantize / oar_dequantize (int8 and uint8, per tensor and per axis),
 * DynamicQuantizeLinear (uint8, as ONNX), and the integer and quantized
 * linear ops (ConvInteger, MatMulInteger, QLinearConv, QLinearMatMul; int8
 * or uint8 operands). With an int8 weight whose zero points are 0
 * (symmetric, as quantize_static writes them) and one zero point for the
 * activation they run on the int8 kernels (oar_qmatmul; 2-D convs with
 * pads equal at both ends on oar_qconv2d; int32 sums); the others are
 * computed in f64 on the zero-point-shifted values (exact for 8-bit
 * products up to 2^53). Both are exact; requantization rounds half to
 * even, as ONNX's reference. */
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

/* The int8 kernels (oar_qmatmul: oneDNN's VNNI product or the exact loop)
 * take a uint8/int8 a [..., m, k] (oar_qconv2d: x [n, c, h, w]) with one
 * zero point and an int8 b [k, n] (w [o, c/g, kh, kw]) with zero points all 0 (symmetric weights, as quantize_static writes
 * them): true with a's zero point in *za when node nd's inputs (a at ia,
 * its zero point at iza, b at ib, its zero points at izb) are so, the
 * zero points constants of the model. Else false, and the f64 path runs. */
static bool int8_kernel_fits(oari_onnx_node *nd, int ia, int iza, int ib, int izb, int64_t *za) {
    oar_tensor *a = nd->in[ia], *b = nd->in[ib];
    oar_dtype ad = oar_tensor_dtype(a);
    bool conv = OP_IS("QLinearConv") || OP_IS("ConvInteger"); /* 2-D convs: x, w 4-d */
    if ((ad != OAR_U8 && ad != OAR_I8) || oar_tensor_dtype(b) != OAR_I8 ||
        (conv ? oar_tensor_ndim(a) != 4 || oar_tensor_ndim(b) != 4 : oar_tensor_ndim(a) < 2 || oar_tensor_ndim(b) != 2))
        return false;
    int64_t zb[1024];
    *za = 0;
    bool ok = true;
    if (iza < nd->n_in && nd->in[iza]) ok = oari_onnx_input_ints(nd, iza, za, 1) == 1;
    if (ok && izb < nd->n_in && nd->in[izb]) {
        int n = oari_onnx_input_ints(nd, izb, zb, 1024);
        ok = n >= 1;
        for (int j = 0; j < n && ok; j++) ok = zb[j] == 0;
    }
    if (!ok) oar_clear_error(); /* a zero point computed at run time, or a long one: the f64 path */
    return ok;
}

bool oari_onnx_qconv_attrs(oari_onnx_node *nd, int64_t st[2], int64_t pd[2], int64_t dl[2], int64_t *group) {
    int64_t v[3][4];
    st[0] = st[1] = dl[0] = dl[1] = 1, pd[0] = pd[1] = 0;
    int ns = oari_onnx_attr_ints(nd, "strides", v[0], 4), nl = oari_onnx_attr_ints(nd, "dilations", v[1], 4);
    int np = oari_onnx_attr_ints(nd, "pads", v[2], 4);
    bool ok = oari_onnx_attr_s_is(nd, "auto_pad", "NOTSET", "NOTSET") && (ns == -1 || ns == 2) &&
              (nl == -1 || nl == 2) && (np == -1 || (np == 4 && v[2][0] == v[2][2] && v[2][1] == v[2][3]));
    if (!ok) {
        oar_clear_error(); /* (a list too long) the f64 path reports what it refuses */
        return false;
    }
    if (ns == 2) st[0] = v[0][0], st[1] = v[0][1];
    if (nl == 2) dl[0] = v[1][0], dl[1] = v[1][1];
    if (np == 4) pd[0] = v[2][0], pd[1] = v[2][1];
    *group = oari_onnx_attr_i(nd, "group", 1);
    return true;
}

int oari_onnx_conv_conv_integer(oari_onnx_node *nd) {
    NEED(2);
    int st = only_8bit(nd, 4, (int[]){0, 1, 2, 3});
    if (st) return st;
    int64_t za, cs[2], cp[2], cd[2], g;
    if (int8_kernel_fits(nd, 0, 2, 1, 3, &za) && oari_onnx_qconv_attrs(nd, cs, cp, cd, &g))
        RESULT(oar_qconv2d(nd->in[0], za, nd->in[1], cs, cp, cd, g));
    oar_tensor *x = shifted(nd->in[0], nd->n_in > 2 ? nd->in[2] : NULL, 1);
    oar_tensor *w = shifted(nd->in[1], nd->n_in > 3 ? nd->in[3] : NULL, 0);
    RESULT(oar_cast(oar_round(conv_f64(nd, x, w, NULL)), OAR_I32));
}

int oari_onnx_conv_matmul_integer(oari_onnx_node *nd) {
    NEED(2);
    int st = only_8bit(nd, 4, (int[]){0, 1, 2, 3});
    if (st) return st;
    int64_t za;
    if (int8_kernel_fits(nd, 0, 2, 1, 3, &za)) RESULT(oar_qmatmul(nd->in[0], za, nd->in[1]));
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
    int64_t za;
    bool int8 = int8_kernel_fits(nd, 0, 2, 3, 5, &za);
    oar_tensor *acc = int8 ? oar_cast(oar_qmatmul(nd->in[0], za, nd->in[3]), OAR_F64) : NULL;
    oar_tensor *a = int8 ? NULL : shifted(nd->in[0], nd->in[2], oar_tensor_ndim(nd->in[0]) - 2);
    oar_tensor *b = int8 ? NULL : shifted(nd->in[3], nd->in[5], oar_tensor_ndim(nd->in[3]) - 1);
    oar_tensor *scale = oar_mul(oar_cast(along(nd->in[1], oar_tensor_ndim(nd->in[0]) - 2, oar_tensor_ndim(nd->in[0])), OAR_F64),
                                oar_cast(nd->in[4], OAR_F64));
    RESULT(requantize(int8 ? acc : oar_matmul(a, b), scale, nd->in[6], nd->in[7]));
}

int oari_onnx_conv_qlinear_conv(oari_onnx_node *nd) {
    NEED(8);
    int st = only_8bit(nd, 5, (int[]){0, 2, 3, 5, 7});
    if (st) return st;
    oar_tensor *b = nd->n_in > 8 && nd->in[8] ? oar_cast(nd->in[8], OAR_F64) : NULL;
    int64_t za, cs[2], cp[2], cd[2], g;
    oar_tensor *acc;
    int r = oar_tensor_ndim(nd->in[0]);
    if (int8_kernel_fits(nd, 0, 2, 3, 5, &za) && oari_onnx_qconv_attrs(nd, cs, cp, cd, &g)) {
        acc = oar_cast(oar_qconv2d(nd->in[0], za, nd->in[3], cs, cp, cd, g), OAR_F64);
        if (b) acc = oar_add(acc, along(b, 1, r));
    } else {
        acc = conv_f64(nd, shifted(nd->in[0], nd->in[2], 1), shifted(nd->in[3], nd->in[5], 0), b);
    }
    oar_tensor *scale = oar_mul(oar_cast(nd->in[1], OAR_F64), oar_cast(along(nd->in[4], 1, r), OAR_F64));
    RESULT(requantize(acc, scale, nd->in[6], nd->in[7]));
}

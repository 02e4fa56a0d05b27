/* ONNX import, the QDQ form (what ONNX Runtime's quantize_static writes):
 * a Conv, MatMul or Gemm whose activation is a DequantizeLinear of a uint8
 * or int8 tensor (one scale and zero point) and whose weight is a
 * DequantizeLinear of an int8 constant (zero points 0, one scale or one per
 * output channel) runs on the int8 kernels instead of in f32 between the
 * dequantized values:
 *
 *     y = cast(qconv2d(xq, w) | qmatmul(xq, w), f32) * (s_x * s_w)  (+ bias)
 *
 * the pattern oar_graph_quantize writes (src/infer/quantize_graph.c), so
 * the two meet the same passes. The int32 sums are exact; the scaling
 * rounds once in f32, where the f32 path rounds every product. The
 * QuantizeLinear after the op (the next layer's input) stays a quantize
 * node. Anything else (per-channel activations, a weight computed at run
 * time, asymmetric weights, 3-D convs, unequal pads) is left to the f32
 * converters, as written. */
#define OARI_ONNX_PROTO
#include "onnx_internal.h"
#include <math.h>
#include <string.h>

/* The one finite value of a concrete tensor t (NULL: def). */
static bool one_value(oar_tensor *t, double def, double *v) {
    *v = def;
    if (!t) return true;
    if (!oar_tensor_data(t) || oar_tensor_numel(t) != 1 || oar_dtype_is_complex(oar_tensor_dtype(t))) return false;
    *v = oar_tensor_item(t);
    return isfinite(*v);
}

/* The activation's quantization: q uint8 or int8 of rank >= min_rank, a
 * positive scale and a zero point of q's dtype, both constants. */
static bool activation(const oari_onnx_dq *d, int min_rank, double *scale, int64_t *zp) {
    if (!d->q || oar_tensor_ndim(d->q) < min_rank) return false;
    oar_dtype qd = oar_tensor_dtype(d->q);
    double z;
    if ((qd != OAR_U8 && qd != OAR_I8) || (d->zp && oar_tensor_dtype(d->zp) != qd)) return false;
    if (!d->scale || !oar_dtype_is_float(oar_tensor_dtype(d->scale)) || !one_value(d->scale, 0, scale) ||
        !(*scale > 0) || !one_value(d->zp, 0, &z))
        return false;
    *zp = (int64_t)z;
    return true;
}

/* The weight's scale as a 1-D f32 tensor (one entry, or one per entry of
 * dim `channel` of q), or NULL where q is not an int8 constant of rank
 * `rank` with zero points all 0 and finite scales. */
static oar_tensor *weight_scale(const oari_onnx_dq *d, int rank, int channel) {
    oar_tensor *q = d->q, *s = d->scale;
    if (!q || oar_tensor_dtype(q) != OAR_I8 || oar_tensor_ndim(q) != rank || !oar_tensor_data(q) || !s ||
        !oar_tensor_data(s) || !oar_dtype_is_float(oar_tensor_dtype(s)) || oar_tensor_ndim(s) > 1)
        return NULL;
    int64_t n = oar_tensor_numel(s);
    if (n != 1) {
        int64_t axis = d->axis < 0 ? d->axis + rank : d->axis;
        if (oar_tensor_ndim(s) != 1 || axis != channel || n != oar_tensor_shape(q)[channel]) return NULL;
    }
    if (d->zp && (!oar_tensor_data(d->zp) || oar_tensor_numel(d->zp) != n ||
                  oar_tensor_item(oar_amax(oar_abs(oar_cast(d->zp, OAR_F64)), 0, NULL, false)) != 0))
        return NULL;
    oar_tensor *s32 = oar_reshape(oar_cast(s, OAR_F32), 1, (int64_t[]){n});
    if (!s32 || !isfinite(oar_tensor_item(oar_amax(oar_abs(s32), 0, NULL, false)))) return NULL;
    return s32;
}

static int fold_conv(oari_onnx_node *nd, const oari_onnx_dq *dq) {
    double sx;
    int64_t zx, st[2], pd[2], dl[2], group;
    oar_tensor *sw = weight_scale(&dq[1], 4, 0);
    if (!activation(&dq[0], 4, &sx, &zx) || oar_tensor_ndim(dq[0].q) != 4 || !sw ||
        !oari_onnx_qconv_attrs(nd, st, pd, dl, &group))
        return 0;
    const int64_t *ws = oar_tensor_shape(dq[1].q);
    if (ws[1] * ws[2] * ws[3] > OAR_QMATMUL_MAX_K) return 0;
    int64_t o = ws[0];
    oar_tensor *acc = oar_qconv2d(dq[0].q, zx, dq[1].q, st, pd, dl, group);
    oar_tensor *scale = oar_reshape(oar_expand(oar_mul_scalar(sw, sx), 1, (int64_t[]){o}), 4,
                                    (int64_t[]){1, o, 1, 1});
    oar_tensor *y = oar_mul(oar_cast(acc, OAR_F32), scale);
    if (nd->n_in > 2 && nd->in[2]) y = oar_add(y, oar_reshape(oar_cast(nd->in[2], OAR_F32), 4, (int64_t[]){1, o, 1, 1}));
    nd->out[0] = y;
    return y ? 1 : OAR_ERR_INVALID;
}

/* MatMul (a [..., m, k] times w [k, n]) and Gemm (a [m, k], w [k, n] or,
 * transB, [n, k]; alpha scales the product, beta C is added). */
static int fold_matmul(oari_onnx_node *nd, const oari_onnx_dq *dq, bool gemm) {
    bool trans_b = gemm && oari_onnx_attr_i(nd, "transB", 0);
    double sx, alpha = gemm ? oari_onnx_attr_f(nd, "alpha", 1) : 1, beta = gemm ? oari_onnx_attr_f(nd, "beta", 1) : 1;
    int64_t zx;
    oar_tensor *sw = weight_scale(&dq[1], 2, trans_b ? 0 : 1);
    if (!activation(&dq[0], 2, &sx, &zx) || !sw || (gemm && (oar_tensor_ndim(dq[0].q) != 2 ||
                                                           oari_onnx_attr_i(nd, "transA", 0))))
        return 0;
    oar_tensor *w = trans_b ? oar_contiguous(oar_transpose(dq[1].q, 0, 1)) : dq[1].q;
    if (!w || oar_tensor_shape(w)[0] > OAR_QMATMUL_MAX_K) return w ? 0 : OAR_ERR_INVALID;
    oar_tensor *acc = oar_qmatmul(dq[0].q, zx, w);
    oar_tensor *y = oar_mul(oar_cast(acc, OAR_F32), oar_mul_scalar(sw, sx * alpha));
    oar_tensor *c = gemm && nd->n_in > 2 ? nd->in[2] : NULL;
    if (c) y = oar_add(y, beta == 1 ? oar_cast(c, OAR_F32) : oar_mul_scalar(oar_cast(c, OAR_F32), beta));
    nd->out[0] = y;
    return y ? 1 : OAR_ERR_INVALID;
}

int oari_onnx_qdq_fold(oari_onnx_node *nd, const oari_onnx_dq *dq) {
    if (nd->n_in < 2 || !dq[0].q || !dq[1].q) return 0;
    if (OP_IS("Conv")) return fold_conv(nd, dq);
    if (OP_IS("MatMul") && nd->n_in == 2) return fold_matmul(nd, dq, false);
    if (OP_IS("Gemm")) return fold_matmul(nd, dq, true);
    return 0;
}

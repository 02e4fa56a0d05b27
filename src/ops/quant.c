/* Affine quantization (src/ops/defs/quant.def): quantize to int8/uint8,
 * dequantize, and fake quantization (quantize then dequantize) with a
 * straight-through gradient. Quantized values are plain int8/uint8 tensors;
 * the scale and zero point travel beside them as tensors, as in ONNX's
 * QuantizeLinear/DequantizeLinear. The arithmetic is PyTorch's (1.13, CPU):
 * q = clamp(int64(zp + round_half_even(x * (1 / scale))), qmin, qmax), the
 * product in x's float dtype (f32: a float scale), NaN and +-inf giving qmin
 * (the int64 conversion of x86). The tensor form oar_quantize divides,
 * round(x / scale), as ONNX's QuantizeLinear: the two differ at a tie
 * that the reciprocal's rounding moves. The kernels check the scale's and zero
 * point's values (src/backends/cpu/cpu_quant.c). */
#include "op.h"

#include <math.h>

#define AXIS(c) ((c)->attrs->i[0])

static int64_t numel_of(const oar_tensor *t) {
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
    return n;
}

/* The scale and zero point of a call: float and integer tensors of one
 * element (axis -1) or 1-d of x's size along the axis. The kernels read
 * the scale as f32 or f64 and the zero point as i64. */
static int check_qparams(oari_infer *c) {
    const oar_tensor *x = c->in[0], *s = c->in[1], *z = c->in[2];
    int64_t axis = AXIS(c);
    char a[200], b[200], xs[200];
    if (!oar_dtype_is_float(s->dtype))
        return oari_error(OAR_ERR_INVALID, "%s: the scale must be a real float tensor, got %s", c->op,
                          oar_dtype_name(s->dtype));
    if (!oar_dtype_is_integral(z->dtype) || z->dtype == OAR_BOOL)
        return oari_error(OAR_ERR_INVALID, "%s: the zero point must be an integer tensor, got %s", c->op,
                          oar_dtype_name(z->dtype));
    if (s->ndim > 1 || z->ndim > 1 || numel_of(s) != numel_of(z))
        return oari_error(OAR_ERR_INVALID, "%s: scale of shape %s and zero point of shape %s must be "
                          "0-d or 1-d of one length", c->op, oari_shape_str(a, s->ndim, s->shape),
                          oari_shape_str(b, z->ndim, z->shape));
    if (axis < -1 || axis >= x->ndim)
        return oari_error(OAR_ERR_INVALID, "%s: axis %lld is out of range for an input of shape %s", c->op,
                          (long long)axis, oari_shape_str(xs, x->ndim, x->shape));
    int64_t want = axis < 0 ? 1 : x->shape[axis];
    if (numel_of(s) != want)
        return oari_error(OAR_ERR_INVALID, "%s: %lld scales for an input of shape %s %s%lld (expected %lld)",
                          c->op, (long long)numel_of(s), oari_shape_str(xs, x->ndim, x->shape),
                          axis < 0 ? "per tensor" : "along axis ", axis < 0 ? 0LL : (long long)axis,
                          (long long)want);
    c->in_dtype[1] = s->dtype == OAR_F64 ? OAR_F64 : OAR_F32; /* dequantize multiplies at its precision */
    c->in_dtype[2] = OAR_I64;
    return 0;
}

static int check_real_float(oari_infer *c, const char *what) {
    oar_dtype d = c->in[0]->dtype;
    if (oar_dtype_is_float(d)) return 0;
    return oari_error(OAR_ERR_INVALID, "%s: %s must be a real float tensor, got %s", c->op, what,
                      oar_dtype_name(d));
}

/* in[0] float (f16/bf16 computed in f32); iattr: axis, dtype (int8 or
 * uint8), and 1 to divide by the scale (ONNX) rather than multiply by its
 * reciprocal (PyTorch). */
static int infer_quantize(oari_infer *c) {
    if (c->attrs->ni != 3) return oari_error(OAR_ERR_INVALID, "quantize: expected 3 integer attributes");
    oar_dtype q = (oar_dtype)c->attrs->i[1];
    if (q != OAR_I8 && q != OAR_U8)
        return oari_error(OAR_ERR_INVALID, "quantize: the quantized dtype must be int8 or uint8, got %s",
                          oar_dtype_name(q));
    if (check_real_float(c, "the input") || check_qparams(c)) return OAR_ERR_INVALID;
    oar_dtype k = c->in[0]->dtype == OAR_F64 ? OAR_F64 : OAR_F32;
    c->in_dtype[0] = k;
    c->kernel_dtype = k;
    oari_meta_from(&c->out[0], c->in[0]);
    c->out[0].dtype = q;
    return 0;
}

/* in[0] int8, uint8 or int32 (ONNX's bias); out f32; iattr: axis. */
static int infer_dequantize(oari_infer *c) {
    if (c->attrs->ni != 1) return oari_error(OAR_ERR_INVALID, "dequantize: expected 1 integer attribute");
    oar_dtype d = c->in[0]->dtype;
    if (d != OAR_I8 && d != OAR_U8 && d != OAR_I32)
        return oari_error(OAR_ERR_INVALID, "dequantize: the input must be int8, uint8 or int32, got %s",
                          oar_dtype_name(d));
    if (check_qparams(c)) return OAR_ERR_INVALID;
    c->kernel_dtype = d;
    oari_meta_from(&c->out[0], c->in[0]);
    c->out[0].dtype = OAR_F32;
    return 0;
}

/* in[0] float, out its dtype; iattr: axis, qmin, qmax. */
static int infer_fake_quantize(oari_infer *c) {
    if (c->attrs->ni != 3) return oari_error(OAR_ERR_INVALID, "fake_quantize: expected 3 integer attributes");
    int64_t qmin = c->attrs->i[1], qmax = c->attrs->i[2];
    if (qmin > qmax)
        return oari_error(OAR_ERR_INVALID, "fake_quantize: quant_min %lld > quant_max %lld", (long long)qmin,
                          (long long)qmax);
    if (check_real_float(c, "the input") || check_qparams(c)) return OAR_ERR_INVALID;
    oari_meta_from(&c->out[0], c->in[0]);
    return 0;
}

/* A per-channel parameter shaped to broadcast against x (axis -1: as is). */
static oar_tensor *along_axis(oar_tensor *p, const oari_meta *x, int64_t axis) {
    if (axis < 0) return p;
    int64_t shape[OAR_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++) shape[d] = d == axis ? x->shape[d] : 1;
    return oar_reshape(p, x->ndim, shape);
}

/* Straight-through estimator, as torch.fake_quantize_per_tensor_affine's:
 * dx = dy where zp + round(x * (1 / scale)) lies in [qmin, qmax], else 0,
 * the mask computed with the forward's arithmetic. Scale and zero point get
 * no gradient. The mask is built from comparisons, so it is a constant to
 * a second differentiation: d(dx)/d(dy) is the mask again. */
static int grad_fake_quantize(oari_grad_ctx *g) {
    oar_tensor *gy = g->gout[0];
    if (!gy || !g->needs[0]) return 0;
    oar_tensor *x = g->in[0];
    const oari_meta *xm = &g->in_meta[0];
    oar_dtype f = x->dtype == OAR_F64 ? OAR_F64 : OAR_F32;
    oar_tensor *xf = oar_cast(x, f);
    oar_tensor *inv = oar_reciprocal(oar_cast(along_axis(g->in[1], xm, AXIS(g)), f));
    oar_tensor *zp = oar_cast(along_axis(g->in[2], xm, AXIS(g)), f);
    oar_tensor *q = oar_add(oar_round(oar_mul(xf, inv)), zp);
    oar_tensor *keep = oar_logical_and(oar_ge(q, oar_scalar_of((double)g->attrs->i[1], f)),
                                       oar_le(q, oar_scalar_of((double)g->attrs->i[2], f)));
    g->gin[0] = oar_mul(gy, oar_cast(keep, gy->dtype));
    return g->gin[0] ? 0 : oari_fail_status();
}

const oari_op_def oari_def_quantize = {
    .name = "quantize", .n_in = 3, .n_out = 1, .fusion = OARI_FUSE_OPAQUE,
    .flags = OARI_F_NONDIFF, .infer = infer_quantize,
};
const oari_op_def oari_def_dequantize = {
    .name = "dequantize", .n_in = 3, .n_out = 1, .fusion = OARI_FUSE_OPAQUE,
    .flags = OARI_F_NONDIFF, .infer = infer_dequantize,
};
const oari_op_def oari_def_fake_quantize = {
    .name = "fake_quantize", .n_in = 3, .n_out = 1, .fusion = OARI_FUSE_OPAQUE,
    .saved = OARI_SAVE_IN(0) | OARI_SAVE_IN(1) | OARI_SAVE_IN(2), .infer = infer_fake_quantize,
    .grad = grad_fake_quantize,
};

/* (oneDNN and the reference both accumulate in int32: OAR_QMATMUL_MAX_K) */
#define QMATMUL_MAX_K OAR_QMATMUL_MAX_K

/* in0 uint8/int8 [..., m, k] with its zero point iattr0 in its range, in1
 * int8 [k, n]; out int32 [..., m, n]. */
static int infer_qmatmul(oari_infer *c) {
    const oar_tensor *a = c->in[0], *b = c->in[1];
    char as[200], bs[200];
    if (c->attrs->ni != 1) return oari_error(OAR_ERR_INVALID, "qmatmul: expected 1 integer attribute");
    if (a->dtype != OAR_U8 && a->dtype != OAR_I8)
        return oari_error(OAR_ERR_INVALID, "qmatmul: a must be uint8 or int8 (a quantized activation), got %s; "
                          "quantize it first (oar_quantize)", oar_dtype_name(a->dtype));
    if (b->dtype != OAR_I8)
        return oari_error(OAR_ERR_INVALID, "qmatmul: b must be int8 (a symmetric quantized weight), got %s",
                          oar_dtype_name(b->dtype));
    int64_t zp = c->attrs->i[0], lo = a->dtype == OAR_U8 ? 0 : -128, hi = a->dtype == OAR_U8 ? 255 : 127;
    if (zp < lo || zp > hi)
        return oari_error(OAR_ERR_INVALID, "qmatmul: zero point %lld of a is outside %s's range [%lld, %lld]",
                          (long long)zp, oar_dtype_name(a->dtype), (long long)lo, (long long)hi);
    if (a->ndim < 2 || b->ndim != 2 || a->shape[a->ndim - 1] != b->shape[0])
        return oari_error(OAR_ERR_INVALID, "qmatmul: a of shape %s and b of shape %s do not multiply (a [..., m, "
                          "k], b [k, n])", oari_shape_str(as, a->ndim, a->shape),
                          oari_shape_str(bs, b->ndim, b->shape));
    if (b->shape[0] > QMATMUL_MAX_K)
        return oari_error(OAR_ERR_INVALID, "qmatmul: k = %lld could overflow the int32 accumulator (at most %lld)",
                          (long long)b->shape[0], (long long)QMATMUL_MAX_K);
    c->kernel_dtype = a->dtype;
    oari_meta_from(&c->out[0], a);
    c->out[0].shape[a->ndim - 1] = b->shape[1];
    c->out[0].dtype = OAR_I32;
    return 0;
}

const oari_op_def oari_def_qmatmul = {
    .name = "qmatmul", .n_in = 2, .n_out = 1, .fusion = OARI_FUSE_OPAQUE,
    .flags = OARI_F_NONDIFF, .infer = infer_qmatmul,
};

/* in0 uint8/int8 [n, c, h, w] (iattr0 its zero point), in1 int8 [o, c/g,
 * kh, kw]; iattr 1..7: stride h w, padding h w, dilation h w, groups; out
 * int32 [n, o, oh, ow]. */
static int infer_qconv2d(oari_infer *c) {
    const oar_tensor *x = c->in[0], *w = c->in[1];
    const int64_t *a = c->attrs->i;
    char xs[200], ws[200];
    if (c->attrs->ni != 8) return oari_error(OAR_ERR_INVALID, "qconv2d: expected 8 integer attributes");
    if (x->dtype != OAR_U8 && x->dtype != OAR_I8)
        return oari_error(OAR_ERR_INVALID, "qconv2d: x must be uint8 or int8 (a quantized activation), got %s; "
                          "quantize it first (oar_quantize)", oar_dtype_name(x->dtype));
    if (w->dtype != OAR_I8)
        return oari_error(OAR_ERR_INVALID, "qconv2d: the weight must be int8 (symmetric), got %s",
                          oar_dtype_name(w->dtype));
    int64_t lo = x->dtype == OAR_U8 ? 0 : -128, hi = x->dtype == OAR_U8 ? 255 : 127;
    if (a[0] < lo || a[0] > hi)
        return oari_error(OAR_ERR_INVALID, "qconv2d: zero point %lld of x is outside %s's range [%lld, %lld]",
                          (long long)a[0], oar_dtype_name(x->dtype), (long long)lo, (long long)hi);
    if (a[1] < 1 || a[2] < 1 || a[3] < 0 || a[4] < 0 || a[5] < 1 || a[6] < 1 || a[7] < 1)
        return oari_error(OAR_ERR_INVALID, "qconv2d: stride (%lld, %lld) and dilation (%lld, %lld) must be >= 1, "
                          "padding (%lld, %lld) >= 0, groups %lld >= 1", (long long)a[1], (long long)a[2],
                          (long long)a[5], (long long)a[6], (long long)a[3], (long long)a[4], (long long)a[7]);
    oari_shape_str(xs, x->ndim, x->shape), oari_shape_str(ws, w->ndim, w->shape);
    int64_t g = a[7];
    if (x->ndim != 4 || w->ndim != 4 || x->shape[1] % g || w->shape[0] % g || w->shape[1] * g != x->shape[1])
        return oari_error(OAR_ERR_INVALID, "qconv2d: x of shape %s and weight of shape %s do not convolve with "
                          "%lld groups (x [n, c, h, w], weight [o, c/groups, kh, kw])", xs, ws, (long long)g);
    int64_t oh = (x->shape[2] + 2 * a[3] - a[5] * (w->shape[2] - 1) - 1) / a[1] + 1;
    int64_t ow = (x->shape[3] + 2 * a[4] - a[6] * (w->shape[3] - 1) - 1) / a[2] + 1;
    if (oh < 1 || ow < 1 || x->shape[2] + 2 * a[3] < a[5] * (w->shape[2] - 1) + 1 ||
        x->shape[3] + 2 * a[4] < a[6] * (w->shape[3] - 1) + 1)
        return oari_error(OAR_ERR_INVALID, "qconv2d: the kernel of shape %s is larger than the padded input %s",
                          ws, xs);
    if (w->shape[1] * w->shape[2] * w->shape[3] > QMATMUL_MAX_K)
        return oari_error(OAR_ERR_INVALID, "qconv2d: %lld terms per output could overflow the int32 accumulator "
                          "(at most %lld)", (long long)(w->shape[1] * w->shape[2] * w->shape[3]),
                          (long long)QMATMUL_MAX_K);
    c->kernel_dtype = x->dtype;
    oari_meta_from(&c->out[0], x);
    c->out[0].shape[1] = w->shape[0], c->out[0].shape[2] = oh, c->out[0].shape[3] = ow;
    c->out[0].dtype = OAR_I32;
    return 0;
}

const oari_op_def oari_def_qconv2d = {
    .name = "qconv2d", .n_in = 2, .n_out = 1, .fusion = OARI_FUSE_OPAQUE,
    .flags = OARI_F_NONDIFF, .infer = infer_qconv2d,
};

/* qlinear: in0 uint8/int8 [..., m, k] (iattr0 its zero point, iattr1 the
 * activation: 0 none, 1 relu), in1 int8 [ceil(n/16), ceil(k/4), 16, 4] (the
 * weight packed, quant.def), in2 int32 [n] (its column sums), in3 f32 [] or
 * [n], in4 f32 [n] or NULL; out f32 [..., m, n]. With iattr2 (uint8 or int8)
 * and iattr3 (div) the output is quantized as quantize's: in5 its scale
 * (f32 or f64) and in6 its zero point (int64), one element each. */
static int infer_qlinear(oari_infer *c) {
    const oar_tensor *a = c->in[0], *w = c->in[1], *ws = c->in[2], *s = c->in[3], *b = c->in[4];
    char as[200], wsh[200];
    if (c->attrs->ni != 2 && c->attrs->ni != 4)
        return oari_error(OAR_ERR_INVALID, "qlinear: expected 2 integer attributes (4 with a quantized output)");
    const bool out_q = c->attrs->ni == 4;
    const oar_tensor *ys = c->n_in > 5 ? c->in[5] : NULL, *yz = c->n_in > 6 ? c->in[6] : NULL;
    if (out_q && (c->attrs->i[2] != OAR_U8 && c->attrs->i[2] != OAR_I8))
        return oari_error(OAR_ERR_INVALID, "qlinear: a quantized output must be uint8 or int8 (dtype code %lld)",
                          (long long)c->attrs->i[2]);
    if (out_q != (ys != NULL) || out_q != (yz != NULL) ||
        (out_q && (!oar_dtype_is_float(ys->dtype) || ys->dtype == OAR_F16 || ys->dtype == OAR_BF16 ||
                   ys->numel != 1 || yz->dtype != OAR_I64 || yz->numel != 1)))
        return oari_error(OAR_ERR_INVALID, "qlinear: a quantized output takes its scale (one f32 or f64) and zero "
                          "point (one int64) as inputs 5 and 6, and only then");
    if (!w || !ws || !s) return oari_error(OAR_ERR_INVALID, "qlinear: the weight, its column sums and the scale "
                                           "are required (only the bias may be NULL)");
    if (a->dtype != OAR_U8 && a->dtype != OAR_I8)
        return oari_error(OAR_ERR_INVALID, "qlinear: x must be uint8 or int8 (a quantized activation), got %s; "
                          "quantize it first (oar_quantize)", oar_dtype_name(a->dtype));
    if (w->dtype != OAR_I8 || ws->dtype != OAR_I32 || s->dtype != OAR_F32 || (b && b->dtype != OAR_F32))
        return oari_error(OAR_ERR_INVALID, "qlinear: the weight must be int8, its column sums int32, the scale "
                          "and bias f32; got %s, %s, %s, %s", oar_dtype_name(w->dtype), oar_dtype_name(ws->dtype),
                          oar_dtype_name(s->dtype), b ? oar_dtype_name(b->dtype) : "none");
    int64_t zp = c->attrs->i[0], lo = a->dtype == OAR_U8 ? 0 : -128, hi = a->dtype == OAR_U8 ? 255 : 127;
    if (zp < lo || zp > hi)
        return oari_error(OAR_ERR_INVALID, "qlinear: zero point %lld of x is outside %s's range [%lld, %lld]",
                          (long long)zp, oar_dtype_name(a->dtype), (long long)lo, (long long)hi);
    if (c->attrs->i[1] != 0 && c->attrs->i[1] != 1)
        return oari_error(OAR_ERR_INVALID, "qlinear: activation %lld is not 0 (none) or 1 (relu)",
                          (long long)c->attrs->i[1]);
    int64_t k = a->ndim >= 1 ? a->shape[a->ndim - 1] : 0, n = ws->ndim == 1 ? ws->shape[0] : -1;
    if (a->ndim < 2 || n < 0 || w->ndim != 4 || w->shape[0] != (n + 15) / 16 || w->shape[1] != (k + 3) / 4 ||
        w->shape[2] != 16 || w->shape[3] != 4)
        return oari_error(OAR_ERR_INVALID, "qlinear: x of shape %s and a packed weight of shape %s with %s column "
                          "sums do not multiply (x [..., m, k], weight [ceil(n/16), ceil(k/4), 16, 4], sums [n])",
                          oari_shape_str(as, a->ndim, a->shape), oari_shape_str(wsh, w->ndim, w->shape),
                          ws->ndim == 1 ? "1-d" : "non-1-d");
    if (k > QMATMUL_MAX_K)
        return oari_error(OAR_ERR_INVALID, "qlinear: k = %lld could overflow the int32 accumulator (at most %lld)",
                          (long long)k, (long long)QMATMUL_MAX_K);
    if (s->ndim > 1 || (s->ndim == 1 && s->shape[0] != n) || (b && (b->ndim != 1 || b->shape[0] != n)))
        return oari_error(OAR_ERR_INVALID, "qlinear: the scale must be 0-d or [%lld] and the bias [%lld]; got %s "
                          "and %s", (long long)n, (long long)n, oari_shape_str(as, s->ndim, s->shape),
                          b ? oari_shape_str(wsh, b->ndim, b->shape) : "none");
    c->kernel_dtype = a->dtype;
    oari_meta_from(&c->out[0], a);
    c->out[0].shape[a->ndim - 1] = n;
    c->out[0].dtype = out_q ? (oar_dtype)c->attrs->i[2] : OAR_F32;
    return 0;
}

const oari_op_def oari_def_qlinear = {
    .name = "qlinear", .n_in = 7, .n_out = 1, .fusion = OARI_FUSE_OPAQUE,
    .flags = OARI_F_NONDIFF | OARI_F_OPTIONAL_IN, .infer = infer_qlinear,
};

/* qlinear_conv2d: in0 uint8/int8 [n, c, h, w] (iattr0 its zero point),
 * in1 int8 [o, ceil(c kh kw / 4), 4] (the weight packed, quant.def), in2
 * int32 [o] (its row sums), in3 f32 [] or [o], in4 f32 [o] or NULL; iattr
 * 1..8 stride, padding, dilation (h, w each), kh, kw; iattr9 the
 * activation; out f32 [n, o, oh, ow], or with iattr10 (uint8 or int8) and
 * iattr11 (div) quantized as qlinear's (in5, in6); iattr12 (with those)
 * 1: a 2 x 2 stride-2 max pool of that output (floor: [n, o, oh / 2,
 * ow / 2]), taken on the int32 sums before the epilogue (the predictor's
 * fuse_qlinear sets it only for positive scales, where the epilogue is
 * non-decreasing and so commutes with max). */
static int infer_qlinear_conv2d(oari_infer *c) {
    const oar_tensor *x = c->in[0], *w = c->in[1], *ws = c->in[2], *s = c->in[3], *b = c->in[4];
    const int64_t *a = c->attrs->i;
    char xs[200], wsh[200];
    if (c->attrs->ni != 10 && c->attrs->ni != 12 && c->attrs->ni != 13)
        return oari_error(OAR_ERR_INVALID, "qlinear_conv2d: expected 10 integer attributes (12 with a quantized "
                          "output, 13 with its 2 x 2 pool)");
    const bool out_q = c->attrs->ni >= 12, pooled = c->attrs->ni == 13 && a[12] == 1;
    if (c->attrs->ni == 13 && a[12] != 0 && a[12] != 1)
        return oari_error(OAR_ERR_INVALID, "qlinear_conv2d: pool %lld is not 0 (none) or 1 (2 x 2, stride 2)",
                          (long long)a[12]);
    const oar_tensor *ys = c->n_in > 5 ? c->in[5] : NULL, *yz = c->n_in > 6 ? c->in[6] : NULL;
    if (out_q && (a[10] != OAR_U8 && a[10] != OAR_I8))
        return oari_error(OAR_ERR_INVALID, "qlinear_conv2d: a quantized output must be uint8 or int8 (dtype code "
                          "%lld)", (long long)a[10]);
    if (out_q != (ys != NULL) || out_q != (yz != NULL) ||
        (out_q && (!oar_dtype_is_float(ys->dtype) || ys->dtype == OAR_F16 || ys->dtype == OAR_BF16 ||
                   ys->numel != 1 || yz->dtype != OAR_I64 || yz->numel != 1)))
        return oari_error(OAR_ERR_INVALID, "qlinear_conv2d: a quantized output takes its scale (one f32 or f64) "
                          "and zero point (one int64) as inputs 5 and 6, and only then");
    if (!w || !ws || !s)
        return oari_error(OAR_ERR_INVALID, "qlinear_conv2d: the weight, its row sums and the scale are required "
                          "(only the bias may be NULL)");
    if (x->dtype != OAR_U8 && x->dtype != OAR_I8)
        return oari_error(OAR_ERR_INVALID, "qlinear_conv2d: x must be uint8 or int8 (a quantized activation), got "
                          "%s; quantize it first (oar_quantize)", oar_dtype_name(x->dtype));
    if (w->dtype != OAR_I8 || ws->dtype != OAR_I32 || s->dtype != OAR_F32 || (b && b->dtype != OAR_F32))
        return oari_error(OAR_ERR_INVALID, "qlinear_conv2d: the weight must be int8, its row sums int32, the scale "
                          "and bias f32; got %s, %s, %s, %s", oar_dtype_name(w->dtype), oar_dtype_name(ws->dtype),
                          oar_dtype_name(s->dtype), b ? oar_dtype_name(b->dtype) : "none");
    int64_t lo = x->dtype == OAR_U8 ? 0 : -128, hi = x->dtype == OAR_U8 ? 255 : 127;
    if (a[0] < lo || a[0] > hi)
        return oari_error(OAR_ERR_INVALID, "qlinear_conv2d: zero point %lld of x is outside %s's range [%lld, %lld]",
                          (long long)a[0], oar_dtype_name(x->dtype), (long long)lo, (long long)hi);
    if (a[1] < 1 || a[2] < 1 || a[3] < 0 || a[4] < 0 || a[5] < 1 || a[6] < 1 || a[7] < 1 || a[8] < 1)
        return oari_error(OAR_ERR_INVALID, "qlinear_conv2d: stride (%lld, %lld), dilation (%lld, %lld) and kernel "
                          "(%lld, %lld) must be >= 1, padding (%lld, %lld) >= 0", (long long)a[1], (long long)a[2],
                          (long long)a[5], (long long)a[6], (long long)a[7], (long long)a[8], (long long)a[3],
                          (long long)a[4]);
    if (a[9] != 0 && a[9] != 1)
        return oari_error(OAR_ERR_INVALID, "qlinear_conv2d: activation %lld is not 0 (none) or 1 (relu)",
                          (long long)a[9]);
    oari_shape_str(xs, x->ndim, x->shape), oari_shape_str(wsh, w->ndim, w->shape);
    int64_t o = ws->ndim == 1 ? ws->shape[0] : -1, k = x->ndim == 4 ? x->shape[1] * a[7] * a[8] : -1;
    if (x->ndim != 4 || o < 0 || w->ndim != 3 || w->shape[0] != o || w->shape[1] != (k + 3) / 4 || w->shape[2] != 4)
        return oari_error(OAR_ERR_INVALID, "qlinear_conv2d: x of shape %s and a packed weight of shape %s with %s "
                          "row sums do not convolve with a %lld x %lld kernel (x [n, c, h, w], weight [o, "
                          "ceil(c kh kw / 4), 4], sums [o])", xs, wsh, ws->ndim == 1 ? "1-d" : "non-1-d",
                          (long long)a[7], (long long)a[8]);
    if (k > QMATMUL_MAX_K)
        return oari_error(OAR_ERR_INVALID, "qlinear_conv2d: %lld terms per output could overflow the int32 "
                          "accumulator (at most %lld)", (long long)k, (long long)QMATMUL_MAX_K);
    if (s->ndim > 1 || (s->ndim == 1 && s->shape[0] != o) || (b && (b->ndim != 1 || b->shape[0] != o)))
        return oari_error(OAR_ERR_INVALID, "qlinear_conv2d: the scale must be 0-d or [%lld] and the bias [%lld]; "
                          "got %s and %s", (long long)o, (long long)o, oari_shape_str(xs, s->ndim, s->shape),
                          b ? oari_shape_str(wsh, b->ndim, b->shape) : "none");
    int64_t ph = x->shape[2] + 2 * a[3], pw = x->shape[3] + 2 * a[4];
    int64_t eh = a[5] * (a[7] - 1) + 1, ew = a[6] * (a[8] - 1) + 1;
    if (ph < eh || pw < ew)
        return oari_error(OAR_ERR_INVALID, "qlinear_conv2d: the %lld x %lld kernel (dilated %lld x %lld) is larger "
                          "than the padded input %s", (long long)a[7], (long long)a[8], (long long)eh,
                          (long long)ew, oari_shape_str(xs, x->ndim, x->shape));
    c->kernel_dtype = x->dtype;
    oari_meta_from(&c->out[0], x);
    c->out[0].shape[1] = o, c->out[0].shape[2] = (ph - eh) / a[1] + 1, c->out[0].shape[3] = (pw - ew) / a[2] + 1;
    if (pooled && (c->out[0].shape[2] < 2 || c->out[0].shape[3] < 2))
        return oari_error(OAR_ERR_INVALID, "qlinear_conv2d: a %lld x %lld output is too small for its 2 x 2 pool",
                          (long long)c->out[0].shape[2], (long long)c->out[0].shape[3]);
    if (pooled) c->out[0].shape[2] /= 2, c->out[0].shape[3] /= 2;
    c->out[0].dtype = out_q ? (oar_dtype)a[10] : OAR_F32;
    return 0;
}

const oari_op_def oari_def_qlinear_conv2d = {
    .name = "qlinear_conv2d", .n_in = 7, .n_out = 1, .fusion = OARI_FUSE_OPAQUE,
    .flags = OARI_F_NONDIFF | OARI_F_OPTIONAL_IN, .infer = infer_qlinear_conv2d,
};

/* PyTorch's pooling output size (as max_pool2d's, src/ops/conv.c): with
 * ceil_mode the last window must start inside the input or the left
 * padding. */
static int64_t qpool_out_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
    int64_t num = in + 2 * p - d * (k - 1) - 1 + (ceil_mode ? s - 1 : 0);
    int64_t o = (num >= 0 ? num / s : -((-num + s - 1) / s)) + 1;
    if (ceil_mode && (o - 1) * s >= in + p) o--;
    return o;
}

/* qmax_pool2d: in0 uint8/int8 [..., h, w]; iattr kernel, stride, padding,
 * dilation (h, w each), ceil_mode; out the pooled values, in0's dtype. */
static int infer_qmax_pool2d(oari_infer *c) {
    const oar_tensor *x = c->in[0];
    const int64_t *a = c->attrs->i;
    char xs[200];
    if (c->attrs->ni != 9) return oari_error(OAR_ERR_INVALID, "qmax_pool2d: expected 9 integer attributes");
    if (x->dtype != OAR_U8 && x->dtype != OAR_I8)
        return oari_error(OAR_ERR_INVALID, "qmax_pool2d: x must be uint8 or int8 (quantized values), got %s; "
                          "max_pool2d takes float", oar_dtype_name(x->dtype));
    if (x->ndim < 2) return oari_error(OAR_ERR_INVALID, "qmax_pool2d: x of %d dims has no [h, w] planes", x->ndim);
    for (int i = 0; i < 2; i++)
        if (a[i] < 1 || a[2 + i] < 1 || a[6 + i] < 1 || a[4 + i] < 0 || a[4 + i] > a[i] / 2)
            return oari_error(OAR_ERR_INVALID, "qmax_pool2d: kernel (%lld, %lld), stride (%lld, %lld) and dilation "
                              "(%lld, %lld) must be >= 1, padding (%lld, %lld) >= 0 and at most half the kernel",
                              (long long)a[0], (long long)a[1], (long long)a[2], (long long)a[3], (long long)a[6],
                              (long long)a[7], (long long)a[4], (long long)a[5]);
    int nd = x->ndim;
    int64_t oh = qpool_out_size(x->shape[nd - 2], a[0], a[2], a[4], a[6], a[8] != 0);
    int64_t ow = qpool_out_size(x->shape[nd - 1], a[1], a[3], a[5], a[7], a[8] != 0);
    if (oh < 1 || ow < 1)
        return oari_error(OAR_ERR_INVALID, "qmax_pool2d: input %s is too small for kernel (%lld, %lld): output "
                          "%lld x %lld", oari_shape_str(xs, nd, x->shape), (long long)a[0], (long long)a[1],
                          (long long)oh, (long long)ow);
    c->kernel_dtype = x->dtype;
    oari_meta_from(&c->out[0], x);
    c->out[0].shape[nd - 2] = oh, c->out[0].shape[nd - 1] = ow;
    return 0;
}

const oari_op_def oari_def_qmax_pool2d = {
    .name = "qmax_pool2d", .n_in = 1, .n_out = 1, .fusion = OARI_FUSE_OPAQUE,
    .flags = OARI_F_NONDIFF, .infer = infer_qmax_pool2d,
};

/* ---- public functions ---------------------------------------------------------- */

/* The range of a quantized dtype, or an error naming fn. */
static int quant_range(const char *fn, oar_dtype dtype, int64_t *lo, int64_t *hi) {
    if (dtype == OAR_I8) *lo = -128, *hi = 127;
    else if (dtype == OAR_U8) *lo = 0, *hi = 255;
    else return oari_error(OAR_ERR_INVALID, "%s: the quantized dtype must be int8 or uint8, got %s", fn,
                           oar_dtype_name(dtype));
    return 0;
}

/* Per-tensor parameters given as numbers: checked here, for a message that
 * names the values before any tensor is made. */
static int check_scalar_params(const char *fn, double scale, int64_t zero_point, int64_t lo, int64_t hi) {
    if (!(scale > 0) || !isfinite(scale))
        return oari_error(OAR_ERR_INVALID, "%s: scale %g must be positive and finite", fn, scale);
    if (zero_point < lo || zero_point > hi)
        return oari_error(OAR_ERR_INVALID, "%s: zero point %lld is outside [%lld, %lld]", fn,
                          (long long)zero_point, (long long)lo, (long long)hi);
    return 0;
}

/* The op's axis for scale: -1 (per tensor) for a 0-d scale or a single
 * scale where x's size along the axis is not 1, else the axis normalized;
 * -2 with the error set when it is out of range. */
static int64_t resolve_axis(const char *fn, oar_tensor *x, oar_tensor *scale, int axis) {
    if (scale->ndim == 0) return -1;
    if (axis < -x->ndim || axis >= x->ndim) {
        char s[200];
        oari_error(OAR_ERR_INVALID, "%s: axis %d is out of range for an input of shape %s", fn, axis,
                   oari_shape_str(s, x->ndim, x->shape));
        return -2;
    }
    int64_t ax = axis < 0 ? axis + x->ndim : axis;
    return scale->ndim == 1 && scale->shape[0] == 1 && x->shape[ax] != 1 ? -1 : ax;
}

static oar_tensor *call3(oari_op op, oar_tensor *x, oar_tensor *s, oar_tensor *z, int n, const int64_t *at) {
    oari_attrs a = oari_attrs_ints(n, at);
    return oari_call(op, 3, (oar_tensor *[]){x, s, z}, &a);
}

/* A zero point of zeros like scale where none is given (ONNX's default). */
static oar_tensor *zero_point_or_zeros(oar_tensor *zp, oar_tensor *scale) {
    return zp ? zp : oar_full(OAR_I64, scale->ndim, scale->shape, 0);
}

oar_tensor *oar_quantize(oar_tensor *x, oar_tensor *scale, oar_tensor *zero_point, int axis, oar_dtype dtype) {
    int64_t lo = 0, hi = 0;
    if (!x || !scale) return oari_null_arg("quantize", !x ? "x" : "scale"), NULL;
    if (quant_range("quantize", dtype, &lo, &hi)) return NULL;
    int64_t ax = resolve_axis("quantize", x, scale, axis);
    if (ax < -1) return NULL;
    return call3(OARI_OP_quantize, x, scale, zero_point_or_zeros(zero_point, scale), 3,
                 (int64_t[]){ax, dtype, 1});
}

oar_tensor *oar_quantize_per_tensor(oar_tensor *x, double scale, int64_t zero_point, oar_dtype dtype) {
    int64_t lo = 0, hi = 0;
    if (!x) return oari_null_arg("quantize_per_tensor", "x"), NULL;
    if (quant_range("quantize_per_tensor", dtype, &lo, &hi) ||
        check_scalar_params("quantize_per_tensor", scale, zero_point, lo, hi))
        return NULL;
    return call3(OARI_OP_quantize, x, oar_scalar_of(scale, OAR_F64), oar_scalar_of((double)zero_point, OAR_I64),
                 3, (int64_t[]){-1, dtype, 0});
}

/* Per-channel parameters must be 1-d: a one-element scale is per channel
 * here only when x's size along the axis is 1. */
static int check_channel_params(const char *fn, oar_tensor *x, oar_tensor *scales, oar_tensor *zps, int axis,
                                int64_t *ax) {
    char s[200], z[200], xs[200];
    if (!x || !scales || !zps) return oari_null_arg(fn, !x ? "x" : !scales ? "scales" : "zero_points");
    if (axis < -x->ndim || axis >= x->ndim)
        return oari_error(OAR_ERR_INVALID, "%s: axis %d is out of range for an input of shape %s", fn, axis,
                          oari_shape_str(xs, x->ndim, x->shape));
    *ax = axis < 0 ? axis + x->ndim : axis;
    if (scales->ndim != 1 || zps->ndim != 1 || scales->shape[0] != x->shape[*ax] ||
        zps->shape[0] != x->shape[*ax])
        return oari_error(OAR_ERR_INVALID, "%s: scales of shape %s and zero points of shape %s must be 1-d of "
                          "size %lld (axis %lld of the input's shape %s)", fn,
                          oari_shape_str(s, scales->ndim, scales->shape), oari_shape_str(z, zps->ndim, zps->shape),
                          (long long)x->shape[*ax], (long long)*ax, oari_shape_str(xs, x->ndim, x->shape));
    return 0;
}

oar_tensor *oar_quantize_per_channel(oar_tensor *x, oar_tensor *scales, oar_tensor *zero_points, int axis,
                                     oar_dtype dtype) {
    int64_t lo = 0, hi = 0, ax = 0;
    if (check_channel_params("quantize_per_channel", x, scales, zero_points, axis, &ax) ||
        quant_range("quantize_per_channel", dtype, &lo, &hi))
        return NULL;
    return call3(OARI_OP_quantize, x, scales, zero_points, 3, (int64_t[]){ax, dtype, 0});
}

oar_tensor *oar_dequantize(oar_tensor *q, oar_tensor *scale, oar_tensor *zero_point, int axis) {
    if (!q || !scale) return oari_null_arg("dequantize", !q ? "q" : "scale"), NULL;
    int64_t ax = resolve_axis("dequantize", q, scale, axis);
    if (ax < -1) return NULL;
    return call3(OARI_OP_dequantize, q, scale, zero_point_or_zeros(zero_point, scale), 1, (int64_t[]){ax});
}

oar_tensor *oar_fake_quantize_per_tensor(oar_tensor *x, double scale, int64_t zero_point, int64_t quant_min,
                                         int64_t quant_max) {
    if (!x) return oari_null_arg("fake_quantize_per_tensor", "x"), NULL;
    if (quant_min > quant_max)
        return oari_error(OAR_ERR_INVALID, "fake_quantize_per_tensor: quant_min %lld > quant_max %lld",
                          (long long)quant_min, (long long)quant_max), NULL;
    if (check_scalar_params("fake_quantize_per_tensor", scale, zero_point, quant_min, quant_max)) return NULL;
    return call3(OARI_OP_fake_quantize, x, oar_scalar_of(scale, OAR_F64),
                 oar_scalar_of((double)zero_point, OAR_I64), 3, (int64_t[]){-1, quant_min, quant_max});
}

oar_tensor *oar_fake_quantize_per_channel(oar_tensor *x, oar_tensor *scales, oar_tensor *zero_points, int axis,
                                          int64_t quant_min, int64_t quant_max) {
    int64_t ax = 0;
    if (check_channel_params("fake_quantize_per_channel", x, scales, zero_points, axis, &ax)) return NULL;
    return call3(OARI_OP_fake_quantize, x, scales, zero_points, 3, (int64_t[]){ax, quant_min, quant_max});
}

oar_tensor *oar_qmatmul(oar_tensor *a, int64_t a_zero_point, oar_tensor *b) {
    if (!a || !b) return oari_null_arg("qmatmul", !a ? "a" : "b"), NULL;
    oari_attrs at = oari_attrs_ints(1, (int64_t[]){a_zero_point});
    return oari_call(OARI_OP_qmatmul, 2, (oar_tensor *[]){a, b}, &at);
}

oar_tensor *oar_qlinear(oar_tensor *xq, double x_scale, int64_t x_zero_point, oar_tensor *wq,
                        oar_tensor *w_scales, oar_tensor *bias) {
    if (!xq || !wq || !w_scales) return oari_null_arg("qlinear", !xq ? "xq" : !wq ? "wq" : "w_scales"), NULL;
    if (!(x_scale > 0) || !isfinite(x_scale))
        return oari_error(OAR_ERR_INVALID, "qlinear: x_scale %g must be positive and finite", x_scale), NULL;
    if (!oar_dtype_is_float(w_scales->dtype) || w_scales->ndim > 1)
        return oari_error(OAR_ERR_INVALID, "qlinear: w_scales must be a 0-d or 1-d real float tensor, got %s of "
                          "%d dims", oar_dtype_name(w_scales->dtype), w_scales->ndim), NULL;
    oar_tensor *acc = oar_qmatmul(xq, x_zero_point, wq);
    if (!acc) return NULL;
    int64_t n = wq->shape[1], ns = w_scales->ndim ? w_scales->shape[0] : 1;
    if (ns != 1 && ns != n)
        return oari_error(OAR_ERR_INVALID, "qlinear: %lld weight scales for %lld output channels", (long long)ns,
                          (long long)n), NULL;
    /* (x - zx) w * (sx sw[j]): the scale product in double, as dequantize multiplies */
    oar_tensor *s = oar_mul_scalar(oar_cast(w_scales, OAR_F64), x_scale);
    if (s && ns != n) s = oar_expand(oar_reshape(s, 1, (int64_t[]){1}), 1, &n);
    oar_tensor *y = s ? call3(OARI_OP_dequantize, acc, oar_contiguous(s), oar_full(OAR_I64, 1, &n, 0), 1,
                             (int64_t[]){acc->ndim - 1}) : NULL;
    return bias && y ? oar_add(y, bias) : y;
}

oar_tensor *oar_qconv2d(oar_tensor *x, int64_t x_zero_point, oar_tensor *w, const int64_t stride[2],
                        const int64_t padding[2], const int64_t dilation[2], int64_t groups) {
    if (!x || !w) return oari_null_arg("qconv2d", !x ? "x" : "w"), NULL;
    const int64_t one[2] = {1, 1}, zero[2] = {0, 0};
    stride = stride ? stride : one, padding = padding ? padding : zero, dilation = dilation ? dilation : one;
    oari_attrs at = oari_attrs_ints(8, (int64_t[]){x_zero_point, stride[0], stride[1], padding[0], padding[1],
                                                   dilation[0], dilation[1], groups});
    return oari_call(OARI_OP_qconv2d, 2, (oar_tensor *[]){x, w}, &at);
}

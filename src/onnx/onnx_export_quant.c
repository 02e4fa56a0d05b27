/* ONNX export emitters: quantization. quantize and dequantize become
 * QuantizeLinear and DequantizeLinear (opset 13: float scale, zero point of
 * the quantized dtype, axis for per-channel parameters); the scale and
 * zero point are cast to those dtypes where the oar graph holds others
 * (oar_quantize_per_tensor makes f64 and int64 ones), and a per-tensor
 * one-element 1-d scale is reshaped to a scalar. fake_quantize becomes the
 * pair with its clamp range as the dtype's: only the int8/uint8 ranges map.
 * qmatmul becomes MatMulInteger, its zero point a constant of a's dtype:
 * the same int32 sums (ONNX Runtime runs it on its u8/s8 GEMM); qconv2d
 * ConvInteger likewise, with its strides, pads, dilations and group. */
#define OARI_ONNX_PROTO
#include "onnx_export_internal.h"

/* The dtype QuantizeLinear/DequantizeLinear take for input k (1: the
 * scale, 2: the zero point) of quantize, dequantize or fake_quantize node
 * n: float32, and the quantized dtype. */
static oar_dtype param_dtype(const oar_graph *g, const oari_gnode *n, int k) {
    if (k == 1) return OAR_F32;
    if (n->op == OARI_OP_quantize) return (oar_dtype)n->attrs.i[1];
    if (n->op == OARI_OP_dequantize) return g->values[n->in[0]].dtype;
    return n->attrs.i[1] < 0 ? OAR_I8 : OAR_U8; /* fake_quantize: its clamp range */
}

/* A constant parameter written as a new initializer of its ONNX dtype and
 * shape (below), not through Cast and Reshape nodes: ONNX Runtime fuses a
 * QDQ group onto its int8 kernels only when its scales and zero points
 * are initializers. */
static bool retyped(const oari_gvalue *v, const oari_gnode *n, oar_dtype dt) {
    return v->kind == OARI_V_CONST && v->constant && (v->dtype != dt || (n->attrs.i[0] < 0 && v->ndim > 0));
}

void oari_xp_quant_param_uses(oari_xp *x) {
    for (int i = 0; i < x->g->n_nodes; i++) {
        const oari_gnode *n = &x->g->nodes[i];
        if (n->dead || (n->op != OARI_OP_quantize && n->op != OARI_OP_dequantize && n->op != OARI_OP_fake_quantize))
            continue;
        for (int k = 1; k < 3 && k < n->n_in; k++)
            if (n->in[k] >= 0 && retyped(&x->g->values[n->in[k]], n, param_dtype(x->g, n, k))) x->uses[n->in[k]]--;
    }
}

/* Constant v as a new initializer of dtype dt (0-d when scalar). */
static const char *const_as(oari_xp *x, const oari_gvalue *v, oar_dtype dt, bool scalar) {
    oar_pool *pool = oar_pool_push();
    oar_tensor *c = oar_contiguous(oar_cast(v->constant, dt));
    const char *name = c ? oari_xp_init(x, oari_xp_tmp(x), dt, scalar ? 0 : v->ndim, v->shape, oar_tensor_data(c),
                                        (size_t)oar_tensor_numel(c) * oar_dtype_size(dt), true)
                         : NULL;
    if (!c) oari_xp_fail(x, "%s", oar_last_error());
    oar_pool_pop(pool);
    return name;
}

/* Input k's ONNX name cast to dt (as is if it is dt already), reshaped to a
 * scalar for a per-tensor call (axis < 0). */
static const char *param(oari_xp *x, const oari_xnode *e, int k, oar_dtype dt) {
    const oari_gvalue *v = &x->g->values[e->n->in[k]];
    const char *name = k == 1 ? e->X1 : e->X2;
    if (retyped(v, e->n, dt)) /* (dt is param_dtype's, as the emitters below pass it) */
        return const_as(x, v, dt, e->a[0] < 0);
    if (v->dtype != dt) {
        Onnx__NodeProto *nd = oari_xp_node1(x, "Cast", 1, &name, NULL);
        oari_xp_set_i(x, nd, "to", oari_xp_type(dt));
        name = oari_xp_out0(nd);
    }
    if (e->a[0] < 0 && v->ndim > 0) name = OP2("Reshape", name, oari_xp_i64(x, 0, NULL), NULL);
    return name;
}

/* The quantize/dequantize pair's node; y NULL: a fresh name. */
static const char *linear(oari_xp *x, const oari_xnode *e, const char *op, const char *in, oar_dtype qdt,
                          const char *y) {
    Onnx__NodeProto *nd =
        oari_xp_node1(x, op, 3, (const char *const[]){in, param(x, e, 1, OAR_F32), param(x, e, 2, qdt)}, y);
    if (e->a[0] >= 0) oari_xp_set_i(x, nd, "axis", e->a[0]);
    return oari_xp_out0(nd);
}

/* x is cast to float where it is not (ONNX's QuantizeLinear takes float). */
static const char *float_input(oari_xp *x, const oari_xnode *e) {
    if (e->dt == OAR_F32) return e->X;
    Onnx__NodeProto *nd = oari_xp_node1(x, "Cast", 1, &e->X, NULL);
    oari_xp_set_i(x, nd, "to", oari_xp_type(OAR_F32));
    return oari_xp_out0(nd);
}

int oari_onnx_emit_quantize(oari_xp *x, const oari_xnode *e) {
    linear(x, e, "QuantizeLinear", float_input(x, e), (oar_dtype)e->a[1], e->Y);
    return x->st;
}

int oari_onnx_emit_dequantize(oari_xp *x, const oari_xnode *e) {
    linear(x, e, "DequantizeLinear", e->X, e->dt, e->Y);
    return x->st;
}

int oari_onnx_emit_fake_quantize(oari_xp *x, const oari_xnode *e) {
    int64_t lo = e->a[1], hi = e->a[2];
    oar_dtype q = lo == -128 && hi == 127 ? OAR_I8 : lo == 0 && hi == 255 ? OAR_U8 : OAR_DTYPE_INVALID;
    if (q == OAR_DTYPE_INVALID)
        return oari_xp_fail(x, "fake_quantize with quant range [%lld, %lld]: only the int8 [-128, 127] and "
                            "uint8 [0, 255] ranges map to QuantizeLinear", (long long)lo, (long long)hi);
    if (e->dt != OAR_F32) return oari_xp_fail(x, "fake_quantize of %s (float32 only)", oar_dtype_name(e->dt));
    const char *qv = linear(x, e, "QuantizeLinear", e->X, q, NULL);
    linear(x, e, "DequantizeLinear", qv, q, e->Y);
    return x->st;
}

int oari_onnx_emit_qmatmul(oari_xp *x, const oari_xnode *e) {
    const char *za = oari_xp_scalar(x, e->dt, (double)e->a[0]);
    oari_xp_node1(x, "MatMulInteger", 3, (const char *const[]){e->X, e->X1, za}, e->Y);
    return x->st;
}

int oari_onnx_emit_qconv2d(oari_xp *x, const oari_xnode *e) {
    const char *za = oari_xp_scalar(x, e->dt, (double)e->a[0]);
    Onnx__NodeProto *nd = oari_xp_node1(x, "ConvInteger", 3, (const char *const[]){e->X, e->X1, za}, e->Y);
    oari_xp_set_ints(x, nd, "strides", 2, (const int64_t[]){e->a[1], e->a[2]});
    oari_xp_set_ints(x, nd, "pads", 4, (const int64_t[]){e->a[3], e->a[4], e->a[3], e->a[4]});
    oari_xp_set_ints(x, nd, "dilations", 2, (const int64_t[]){e->a[5], e->a[6]});
    oari_xp_set_i(x, nd, "group", e->a[7]);
    return x->st;
}

/* ONNX export emitters: convolutions, pooling, resize and the norms
 * (layer_norm as LayerNormalization from opset 17 or decomposed, group_norm
 * decomposed, batch_norm in eval mode, layer_norm's fused gradient decomposed). */
#define OARI_ONNX_PROTO
#include "onnx_export_internal.h"

/* 2-D spatial attributes: rank-4 inputs give 2 entries, rank-3 ([N, C, L])
 * the W entry only. */
static void spatial(oari_xp *x, Onnx__NodeProto *nd, int rank, const char *name, int64_t h,
                    int64_t w, bool pads) {
    if (pads) {
        if (rank == 4)
            oari_xp_set_ints(x, nd, name, 4, (int64_t[]){h, w, h, w});
        else
            oari_xp_set_ints(x, nd, name, 2, (int64_t[]){w, w});
    } else {
        if (rank == 4)
            oari_xp_set_ints(x, nd, name, 2, (int64_t[]){h, w});
        else
            oari_xp_set_ints(x, nd, name, 1, (int64_t[]){w});
    }
}

/* conv2d / conv_transpose2d (attributes stride2, padding2, [output_padding2,]
 * dilation2, groups; a rank-3 input [N, C, L] emits the W entries only) and
 * conv3d / conv_transpose3d (the same with 3 entries each). */
int oari_onnx_emit_conv(oari_xp *x, const oari_xnode *e) {
    const oari_op op = e->n->op;
    const bool tr = op == OARI_OP_conv_transpose2d || op == OARI_OP_conv_transpose3d;
    const int na = op == OARI_OP_conv3d || op == OARI_OP_conv_transpose3d ? 3 : 2; /* per attr */
    const int64_t *a = e->a;
    const int ns = e->rank - 2, skip = na - ns; /* skip: the unit H of a 1-D conv */
    if (ns < 1 || skip < 0 || (na == 3 && ns != 3)) return oari_xp_fail(x, "input of rank %d", e->rank);
    const oari_gvalue *wv = &x->g->values[e->n->in[1]];
    Onnx__NodeProto *nd = oari_xp_node1(x, e->row->onnx, e->X2 ? 3 : 2,
                                        (const char *const[]){e->X, e->X1, e->X2}, e->Y);
    int64_t pads[6];
    for (int i = 0; i < ns; i++)
        pads[i] = pads[ns + i] = a[na + skip + i]; /* symmetric: begins, then ends */
    oari_xp_set_ints(x, nd, "kernel_shape", ns, &wv->shape[2]);
    oari_xp_set_ints(x, nd, "strides", ns, a + skip);
    oari_xp_set_ints(x, nd, "pads", 2 * ns, pads);
    if (tr) oari_xp_set_ints(x, nd, "output_padding", ns, a + 2 * na + skip);
    oari_xp_set_ints(x, nd, "dilations", ns, a + (tr ? 3 : 2) * na + skip);
    oari_xp_set_i(x, nd, "group", a[(tr ? 4 : 3) * na]);
    return x->st;
}

/* max_pool2d (values only) / avg_pool2d. */
int oari_onnx_emit_pool(oari_xp *x, const oari_xnode *e) {
    const int64_t *a = e->a;
    if (e->rank != 4)
        return oari_xp_fail(x, "pooling of a rank-%d input (ONNX wants [N, C, H, W])", e->rank);
    bool mx = e->n->op == OARI_OP_max_pool2d;
    Onnx__NodeProto *nd = oari_xp_node1(x, e->row->onnx, 1, &e->X, e->Y);
    spatial(x, nd, 4, "kernel_shape", a[0], a[1], false);
    spatial(x, nd, 4, "strides", a[2], a[3], false);
    spatial(x, nd, 4, "pads", a[4], a[5], true);
    if (mx) {
        spatial(x, nd, 4, "dilations", a[6], a[7], false);
        oari_xp_set_i(x, nd, "ceil_mode", a[8]);
    } else {
        oari_xp_set_i(x, nd, "ceil_mode", a[6]);
        oari_xp_set_i(x, nd, "count_include_pad", a[7]);
    }
    return x->st;
}

int oari_onnx_emit_adaptive_avg_pool(oari_xp *x, const oari_xnode *e) {
    const oari_gvalue *iv = e->iv;
    const int64_t *a = e->a;
    if (e->rank != 4)
        return oari_xp_fail(x, "pooling of a rank-%d input (ONNX wants [N, C, H, W])", e->rank);
    int64_t h = iv->shape[2], w = iv->shape[3];
    if (a[0] == 1 && a[1] == 1) {
        OP1("GlobalAveragePool", e->X, e->Y);
    } else if (iv->sym[2] < 0 && iv->sym[3] < 0 && a[0] > 0 && a[1] > 0 && h % a[0] == 0 &&
               w % a[1] == 0) {
        Onnx__NodeProto *nd = oari_xp_node1(x, "AveragePool", 1, &e->X, e->Y);
        spatial(x, nd, 4, "kernel_shape", h / a[0], w / a[1], false);
        spatial(x, nd, 4, "strides", h / a[0], w / a[1], false);
    } else {
        return oari_xp_fail(
            x, "adaptive pooling of %lld x %lld to %lld x %lld (only to 1 x 1 or by whole factors)",
            (long long)h, (long long)w, (long long)a[0], (long long)a[1]);
    }
    return x->st;
}

/* Attributes mode (0 nearest, 1 bilinear), out_h, out_w, align_corners; the
 * sizes are the output's (read at run time where dynamic). */
int oari_onnx_emit_interpolate(oari_xp *x, const oari_xnode *e) {
    const oari_gvalue *ov = e->ov;
    if (e->rank != 4) return oari_xp_fail(x, "interpolate of a rank-%d input", e->rank);
    const char *sizes = oari_xp_sizes(x, 4, ov->shape, ov->sym, ov->smul);
    Onnx__NodeProto *nd =
        oari_xp_node1(x, "Resize", 4, (const char *const[]){e->X, "", "", sizes}, e->Y);
    if (e->a[0] == 0) {
        oari_xp_set_s(x, nd, "mode", "nearest");
        oari_xp_set_s(x, nd, "coordinate_transformation_mode", "asymmetric");
        oari_xp_set_s(x, nd, "nearest_mode", "floor");
    } else {
        oari_xp_set_s(x, nd, "mode", "linear");
        oari_xp_set_s(x, nd, "coordinate_transformation_mode",
                      e->a[3] ? "align_corners" : "pytorch_half_pixel");
    }
    return x->st;
}

/* Layer norm decomposed: mean, var over the trailing k dims; M and R name
 * the mean and rstd outputs (NULL: unused). Returns Y. */
static const char *layer_norm_chain(oari_xp *x, const char *X, const char *W, const char *B,
                                    oar_dtype dt, int ndim, int k, double eps, const char *Y,
                                    const char *M, const char *R) {
    int64_t axes[OAR_MAX_DIMS];
    for (int d = 0; d < k; d++)
        axes[d] = ndim - k + d;
    const char *mean = oari_xp_reduce(x, "ReduceMean", X, k, axes, true, M);
    const char *dx = OP2("Sub", X, mean, NULL);
    const char *var =
        oari_xp_reduce(x, "ReduceMean", OP2("Mul", dx, dx, NULL), k, axes, true, NULL);
    const char *rstd =
        OP1("Reciprocal", OP1("Sqrt", OP2("Add", var, oari_xp_scalar(x, dt, eps), NULL), NULL), R);
    const char *y = OP2("Mul", dx, rstd, W || B ? NULL : Y);
    if (W) y = OP2("Mul", y, W, B ? NULL : Y);
    if (B) y = OP2("Add", y, B, Y);
    return y;
}

/* layer_norm: attribute 0 the normalised trailing dims, float 0 eps; ins
 * x, weight?, bias?; outs y, mean, rstd. */
int oari_onnx_emit_layer_norm_decomposed(oari_xp *x, const oari_xnode *e) {
    const int *out = e->n->out;
    layer_norm_chain(x, e->X, e->X1, e->X2, e->dt, e->rank, (int)e->a[0], e->f[0], e->Y,
                     x->uses[out[1]] ? x->names[out[1]] : NULL,
                     x->uses[out[2]] ? x->names[out[2]] : NULL);
    return x->st;
}

/* LayerNormalization has only y (its mean / rstd outputs are optional
 * training outputs) and static normalised dims: else the decomposition. */
int oari_onnx_emit_layer_norm(oari_xp *x, const oari_xnode *e) {
    int k = (int)e->a[0], rank = e->rank;
    bool plain = !x->uses[e->n->out[1]] && !x->uses[e->n->out[2]];
    for (int d = rank - k; d < rank; d++)
        plain = plain && e->iv->sym[d] < 0;
    if (!plain) return oari_onnx_emit_layer_norm_decomposed(x, e);
    /* Scale is required: ones when oar has no weight */
    const char *W = e->X1 ? e->X1 : oari_xp_filled(x, e->dt, k, e->iv->shape + rank - k, 1.0);
    Onnx__NodeProto *nd = oari_xp_node1(x, "LayerNormalization", e->X2 ? 3 : 2,
                                        (const char *const[]){e->X, W, e->X2}, e->Y);
    oari_xp_set_i(x, nd, "axis", rank - k);
    oari_xp_set_f(x, nd, "epsilon", e->f[0]);
    return x->st;
}

/* batch_norm in eval mode: ins x, running_mean, running_var, weight?, bias?;
 * attribute 0 training; float 0 eps. */
int oari_onnx_emit_batch_norm(oari_xp *x, const oari_xnode *e) {
    const oari_gnode *n = e->n;
    if (e->a[0]) return oari_xp_fail(x, "training-mode batch norm (export the graph in eval mode)");
    const char *M = e->X1, *V = e->X2;
    const char *W = n->n_in > 3 && n->in[3] >= 0 ? x->names[n->in[3]] : NULL;
    const char *B = n->n_in > 4 && n->in[4] >= 0 ? x->names[n->in[4]] : NULL;
    if (!M || !V) return oari_xp_fail(x, "batch norm without running statistics");
    if (e->rank < 2) return oari_xp_fail(x, "batch norm of a rank-%d input", e->rank);
    /* scale and bias are required: ones and zeros when oar has none */
    if (!W) W = oari_xp_filled(x, e->dt, 1, &e->iv->shape[1], 1.0);
    if (!B) B = oari_xp_filled(x, e->dt, 1, &e->iv->shape[1], 0.0);
    Onnx__NodeProto *nd =
        oari_xp_node1(x, "BatchNormalization", 5, (const char *const[]){e->X, W, B, M, V}, e->Y);
    oari_xp_set_f(x, nd, "epsilon", e->f[0]);
    return x->st;
}

/* group_norm: [N, G, -1] normalised over the last dim, reshaped back, then
 * the per-channel scale and shift. */
int oari_onnx_emit_group_norm(oari_xp *x, const oari_xnode *e) {
    const char *X = e->X, *X1 = e->X1, *X2 = e->X2, *Y = e->Y;
    int rank = e->rank;
    if (rank < 3) return oari_xp_fail(x, "group norm of a rank-%d input", rank);
    int64_t G = e->a[0], c = e->iv->shape[1];
    const char *r = OP2("Reshape", X, oari_xp_i64(x, 3, (int64_t[]){0, G, -1}), NULL);
    const char *y = layer_norm_chain(x, r, NULL, NULL, e->dt, 3, 1, e->f[0], NULL, NULL, NULL);
    y = OP2("Reshape", y, OP1("Shape", X, NULL), X1 || X2 ? NULL : Y);
    int64_t cshape[OAR_MAX_DIMS];
    cshape[0] = c;
    for (int d = 1; d < rank - 1; d++)
        cshape[d] = 1;
    const char *cs = X1 || X2 ? oari_xp_i64(x, rank - 1, cshape) : NULL;
    if (X1) y = OP2("Mul", y, OP2("Reshape", X1, cs, NULL), X2 ? NULL : Y);
    if (X2) OP2("Add", y, OP2("Reshape", X2, cs, NULL), Y);
    return x->st;
}

/* layer_norm_backward (ins gy, x, mean, rstd, weight?; outs gx, gw, gb;
 * attribute 0 the normalised trailing dims), decomposed as the composite
 * gradient: xhat = (x - mean) rstd, a = gy w, gx = rstd (a - E[a] -
 * xhat E[a xhat]) with E the mean over the normalised dims, gw = sum gy
 * xhat and gb = sum gy over the leading dims. (batch_norm_backward has no
 * mapping: its forward, training-mode batch norm, is refused.) */
int oari_onnx_emit_layer_norm_backward(oari_xp *x, const oari_xnode *e) {
    const oari_gnode *n = e->n;
    const int rank = e->rank, k = (int)e->a[0];
    int64_t stat[OAR_MAX_DIMS], lead[OAR_MAX_DIMS];
    int ns = 0, nl = 0;
    for (int d = 0; d < rank; d++) {
        if (d >= rank - k) stat[ns++] = d;
        else lead[nl++] = d;
    }
    const char *W = n->n_in > 4 && n->in[4] >= 0 ? x->names[n->in[4]] : NULL;
    const char *gy = e->X, *R = x->names[n->in[3]];
    const char *xhat = OP2("Mul", OP2("Sub", e->X1, e->X2, NULL), R, NULL);
    const char *a = W ? OP2("Mul", gy, W, NULL) : gy;
    const char *ea = oari_xp_reduce(x, "ReduceMean", a, ns, stat, true, NULL);
    const char *eax = oari_xp_reduce(x, "ReduceMean", OP2("Mul", a, xhat, NULL), ns, stat, true, NULL);
    OP2("Mul", R, OP2("Sub", OP2("Sub", a, ea, NULL), OP2("Mul", xhat, eax, NULL), NULL), e->Y);
    const int *out = n->out;
    if (x->uses[out[1]]) {
        const char *p = OP2("Mul", gy, xhat, nl ? NULL : x->names[out[1]]);
        if (nl) oari_xp_reduce(x, "ReduceSum", p, nl, lead, false, x->names[out[1]]);
    }
    if (x->uses[out[2]]) {
        if (nl) oari_xp_reduce(x, "ReduceSum", gy, nl, lead, false, x->names[out[2]]);
        else OP1("Identity", gy, x->names[out[2]]);
    }
    return x->st;
}

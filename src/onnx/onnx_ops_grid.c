/* ONNX import, GridSample (opset 16, 4-D): PyTorch's grid_sample written
 * with oar ops: unnormalise the grid, apply the padding mode, and gather
 * the taps (1 nearest, 4 bilinear, 16 bicubic) from the flattened planes. */
#define OARI_ONNX_PROTO
#include "onnx_internal.h"
#include <string.h>

typedef struct {
    oar_tensor *xf; /* [N, C, H*W] */
    int64_t N, C, H, W, Ho, Wo;
    int pad;        /* 0 zeros, 1 border, 2 reflection */
    bool align;
    oar_dtype dt;
} grid;

static oar_tensor *sc(const grid *g, double v) { return oari_onnx_scalar(v, g->dt); }

/* PyTorch's reflect_coordinates then clip, for a dim of size n. */
static oar_tensor *reflect(const grid *g, oar_tensor *c, int64_t n) {
    double lo = g->align ? 0 : -1, hi = g->align ? 2.0 * (double)(n - 1) : 2.0 * (double)n - 1;
    if (lo == hi) return oar_mul_scalar(c, 0);
    double mn = lo / 2, span = (hi - lo) / 2;
    oar_tensor *in = oar_abs(oar_sub_scalar(c, mn));
    oar_tensor *extra = oar_remainder(in, sc(g, span)), *flips = oar_floor(oar_div_scalar(in, span));
    oar_tensor *even = oar_eq(oar_remainder(flips, sc(g, 2)), sc(g, 0));
    oar_tensor *r = oar_where(even, oar_add_scalar(extra, mn), oar_add_scalar(oar_neg(extra), span + mn));
    return oar_clamp(r, 0, (double)(n - 1));
}

static oar_tensor *padded(const grid *g, oar_tensor *c, int64_t n) {
    if (g->pad == 1) return oar_clamp(c, 0, (double)(n - 1));
    if (g->pad == 2) return reflect(g, c, n);
    return c;
}

/* X at integral coordinates (xi, yi) [N, Ho, Wo]: [N, C, Ho, Wo], zero outside. */
static oar_tensor *tap(const grid *g, oar_tensor *xi, oar_tensor *yi) {
    oar_tensor *valid = oar_logical_and(oar_logical_and(oar_ge(xi, sc(g, 0)), oar_le(xi, sc(g, (double)(g->W - 1)))),
                                        oar_logical_and(oar_ge(yi, sc(g, 0)), oar_le(yi, sc(g, (double)(g->H - 1)))));
    oar_tensor *xc = oar_clamp(xi, 0, (double)(g->W - 1)), *yc = oar_clamp(yi, 0, (double)(g->H - 1));
    oar_tensor *lin = oar_cast(oar_add(oar_mul_scalar(yc, (double)g->W), xc), OAR_I64);
    lin = oar_reshape(lin, 3, (int64_t[]){g->N, 1, g->Ho * g->Wo});
    lin = oar_contiguous(oar_expand(lin, 3, (int64_t[]){g->N, g->C, g->Ho * g->Wo}));
    oar_tensor *v = oar_reshape(oar_gather(g->xf, 2, lin), 4, (int64_t[]){g->N, g->C, g->Ho, g->Wo});
    return oar_mul(v, oar_cast(oar_unsqueeze(valid, 1), g->dt));
}

/* cubic convolution weights (A = -0.75) of the 4 taps at offset t in [0, 1) */
static void cubic_w(oar_tensor *t, oar_tensor **w) {
    const double A = -0.75;
    oar_tensor *t1 = oar_add_scalar(t, 1.0), *u = oar_add_scalar(oar_neg(t), 1.0), *u1 = oar_add_scalar(u, 1.0);
    /* far taps: ((A x - 5A) x + 8A) x - 4A; near: ((A + 2) x - (A + 3)) x x + 1 */
    oar_tensor *far0 = oar_sub_scalar(oar_mul(oar_add_scalar(oar_mul(oar_sub_scalar(oar_mul_scalar(t1, A), 5 * A), t1), 8 * A), t1), 4 * A);
    oar_tensor *near0 = oar_add_scalar(oar_mul(oar_mul(oar_sub_scalar(oar_mul_scalar(t, A + 2), A + 3), t), t), 1.0);
    oar_tensor *near1 = oar_add_scalar(oar_mul(oar_mul(oar_sub_scalar(oar_mul_scalar(u, A + 2), A + 3), u), u), 1.0);
    oar_tensor *far1 = oar_sub_scalar(oar_mul(oar_add_scalar(oar_mul(oar_sub_scalar(oar_mul_scalar(u1, A), 5 * A), u1), 8 * A), u1), 4 * A);
    w[0] = far0, w[1] = near0, w[2] = near1, w[3] = far1;
}

int oari_onnx_conv_grid_sample(oari_onnx_node *nd) {
    int st = oari_onnx_need(nd, 2);
    if (st) return st;
    oar_tensor *x = nd->in[0], *gr = nd->in[1];
    if (oar_tensor_ndim(x) != 4 || oar_tensor_ndim(gr) != 4 || oar_tensor_shape(gr)[3] != 2)
        return oari_error(OAR_ERR_UNSUPPORTED, "only 4-D X with a [N, H, W, 2] grid is supported");
    grid g = {.N = oar_tensor_shape(x)[0], .C = oar_tensor_shape(x)[1], .H = oar_tensor_shape(x)[2],
              .W = oar_tensor_shape(x)[3], .Ho = oar_tensor_shape(gr)[1], .Wo = oar_tensor_shape(gr)[2],
              .align = oari_onnx_attr_i(nd, "align_corners", 0) != 0, .dt = oar_tensor_dtype(x)};
    if (oari_onnx_attr_s_is(nd, "padding_mode", "zeros", "border")) g.pad = 1;
    else if (oari_onnx_attr_s_is(nd, "padding_mode", "zeros", "reflection")) g.pad = 2;
    else if (!oari_onnx_attr_s_is(nd, "padding_mode", "zeros", "zeros")) return oari_error(OAR_ERR_INVALID, "unknown padding_mode");
    int mode = oari_onnx_attr_s_is(nd, "mode", "bilinear", "bilinear") ? 1
             : oari_onnx_attr_s_is(nd, "mode", "bilinear", "nearest") ? 0
             : oari_onnx_attr_s_is(nd, "mode", "bilinear", "bicubic") ? 2 : -1;
    if (mode < 0) return oari_error(OAR_ERR_INVALID, "unknown mode");
    g.xf = oar_reshape(x, 3, (int64_t[]){g.N, g.C, g.H * g.W});
    oar_tensor *gc = oar_cast(gr, g.dt);
    oar_tensor *gx = oar_squeeze(oar_slice(gc, 3, 0, 1, 1), 3), *gy = oar_squeeze(oar_slice(gc, 3, 1, 2, 1), 3);
    /* unnormalise: align_corners ((c + 1) / 2) (n - 1), else ((c + 1) n - 1) / 2 */
    oar_tensor *ix = g.align ? oar_mul_scalar(oar_add_scalar(gx, 1.0), (double)(g.W - 1) / 2)
                             : oar_mul_scalar(oar_sub_scalar(oar_mul_scalar(oar_add_scalar(gx, 1.0), (double)g.W), 1.0), 0.5);
    oar_tensor *iy = g.align ? oar_mul_scalar(oar_add_scalar(gy, 1.0), (double)(g.H - 1) / 2)
                             : oar_mul_scalar(oar_sub_scalar(oar_mul_scalar(oar_add_scalar(gy, 1.0), (double)g.H), 1.0), 0.5);
    oar_tensor *y = NULL;
    if (mode == 0) {
        y = tap(&g, oar_round(padded(&g, ix, g.W)), oar_round(padded(&g, iy, g.H)));
    } else if (mode == 1) {
        ix = padded(&g, ix, g.W);
        iy = padded(&g, iy, g.H);
        oar_tensor *x0 = oar_floor(ix), *y0 = oar_floor(iy), *x1 = oar_add_scalar(x0, 1.0), *y1 = oar_add_scalar(y0, 1.0);
        oar_tensor *wx1 = oar_sub(ix, x0), *wy1 = oar_sub(iy, y0);
        oar_tensor *wx0 = oar_add_scalar(oar_neg(wx1), 1.0), *wy0 = oar_add_scalar(oar_neg(wy1), 1.0);
        oar_tensor *xs[2] = {x0, x1}, *ys[2] = {y0, y1}, *wxs[2] = {wx0, wx1}, *wys[2] = {wy0, wy1};
        for (int a = 0; a < 2; a++)
            for (int b = 0; b < 2; b++) {
                oar_tensor *t = oar_mul(tap(&g, xs[b], ys[a]), oar_unsqueeze(oar_mul(wxs[b], wys[a]), 1));
                y = y ? oar_add(y, t) : t;
            }
    } else { /* bicubic: padding applies to each tap's coordinate */
        oar_tensor *x0 = oar_floor(ix), *y0 = oar_floor(iy), *wx[4], *wy[4];
        cubic_w(oar_sub(ix, x0), wx);
        cubic_w(oar_sub(iy, y0), wy);
        for (int a = 0; a < 4; a++)
            for (int b = 0; b < 4; b++) {
                oar_tensor *xi = padded(&g, oar_add_scalar(x0, b - 1), g.W), *yi = padded(&g, oar_add_scalar(y0, a - 1), g.H);
                oar_tensor *t = oar_mul(tap(&g, xi, yi), oar_unsqueeze(oar_mul(wx[b], wy[a]), 1));
                y = y ? oar_add(y, t) : t;
            }
    }
    nd->out[0] = y;
    return y ? 0 : OAR_ERR_INVALID;
}

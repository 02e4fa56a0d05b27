/* Convolutions, pools and interpolation: definitions (shape/dtype rules and
 * gradient rules written with ops) and public functions. Kernels:
 * src/backends/cpu/cpu_conv.c. Attribute layouts: src/ops/defs/conv.def. */
#include "op.h"
#include <oar/complex.h>
#include <string.h>

/* ---- shared checks ---------------------------------------------------------- */

static int check_float(const char *op, const char *what, const oar_tensor *t) {
    if (oar_dtype_is_float(t->dtype)) return 0;
    return oari_error(OAR_ERR_INVALID, "%s: %s must be floating (f16, bf16, f32, f64), got %s", op,
                      what, oar_dtype_name(t->dtype));
}

static int check_same_dtype(const char *op, const char *what, const oar_tensor *x,
                            const oar_tensor *t) {
    if (!t || t->dtype == x->dtype) return 0;
    return oari_error(OAR_ERR_INVALID, "%s: %s dtype %s differs from the input's %s; cast it first",
                      op, what, oar_dtype_name(t->dtype), oar_dtype_name(x->dtype));
}

/* Pool/interpolate inputs: [N, C, H, W] or [C, H, W]. */
static int check_planes(const char *op, const oar_tensor *x) {
    char b[200];
    if (x->ndim != 3 && x->ndim != 4)
        return oari_error(OAR_ERR_INVALID,
                          "%s: expected a 3-D [C, H, W] or 4-D [N, C, H, W] input, "
                          "got %s",
                          op, oari_shape_str(b, x->ndim, x->shape));
    return check_float(op, "input", x);
}

/* ---- convolution geometry ------------------------------------------------------ */

/* Spatial sizes of a conv operand: [N, C, H, W], or [N, C, L] as H = 1. */
static void spatial(const oar_tensor *t, int64_t *h, int64_t *w) {
    *h = t->ndim == 4 ? t->shape[2] : 1;
    *w = t->shape[t->ndim - 1];
}

static int64_t conv_out_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) {
    return (in + 2 * p - d * (k - 1) - 1) / s + 1;
}

/* Checks the shared part of conv2d / conv_transpose2d: ranks, dtypes,
 * attributes. transposed: w is [C, O/g, kh, kw]. */
static int conv_check(const char *op, oar_tensor *const *in, int n_in, const int64_t *st,
                      const int64_t *pad, const int64_t *dil, int64_t groups, bool transposed) {
    const oar_tensor *x = in[0], *w = in[1], *b = n_in > 2 ? in[2] : NULL;
    char bx[200], bw[200];
    if (!w) return oari_error(OAR_ERR_INVALID, "%s: weight is NULL", op);
    if ((x->ndim != 4 && x->ndim != 3) || w->ndim != x->ndim)
        return oari_error(OAR_ERR_INVALID,
                          "%s: expected input [N, C, H, W] and weight [O, C/groups, "
                          "kh, kw] (or both 3-D for 1-D convolution), got input %s and weight %s",
                          op, oari_shape_str(bx, x->ndim, x->shape),
                          oari_shape_str(bw, w->ndim, w->shape));
    if (check_float(op, "input", x) || check_same_dtype(op, "weight", x, w) ||
        check_same_dtype(op, "bias", x, b))
        return OAR_ERR_INVALID;
    for (int i = 0; i < 2; i++) {
        if (st[i] < 1 || dil[i] < 1 || pad[i] < 0)
            return oari_error(OAR_ERR_INVALID,
                              "%s: stride (%lld, %lld) and dilation (%lld, %lld) must "
                              "be >= 1 and padding (%lld, %lld) >= 0",
                              op, (long long)st[0], (long long)st[1], (long long)dil[0],
                              (long long)dil[1], (long long)pad[0], (long long)pad[1]);
    }
    if (groups < 1)
        return oari_error(OAR_ERR_INVALID, "%s: groups must be >= 1, got %lld", op,
                          (long long)groups);
    int64_t c = x->shape[1];
    int64_t lead = w->shape[0]; /* O for conv, C for transposed */
    if (c % groups)
        return oari_error(OAR_ERR_INVALID,
                          "%s: groups %lld does not divide the %lld input channels "
                          "of input %s",
                          op, (long long)groups, (long long)c,
                          oari_shape_str(bx, x->ndim, x->shape));
    if (!transposed) {
        if (lead % groups)
            return oari_error(OAR_ERR_INVALID,
                              "%s: groups %lld does not divide the %lld output "
                              "channels of weight %s",
                              op, (long long)groups, (long long)lead,
                              oari_shape_str(bw, w->ndim, w->shape));
        if (w->shape[1] * groups != c)
            return oari_error(OAR_ERR_INVALID,
                              "%s: input %s has %lld channels but weight %s expects "
                              "%lld (%lld per group x %lld groups)",
                              op, oari_shape_str(bx, x->ndim, x->shape), (long long)c,
                              oari_shape_str(bw, w->ndim, w->shape),
                              (long long)(w->shape[1] * groups), (long long)w->shape[1],
                              (long long)groups);
    } else if (lead != c) {
        return oari_error(OAR_ERR_INVALID,
                          "%s: input %s has %lld channels but weight %s expects %lld "
                          "(weight is [C, O/groups, kh, kw])",
                          op, oari_shape_str(bx, x->ndim, x->shape), (long long)c,
                          oari_shape_str(bw, w->ndim, w->shape), (long long)lead);
    }
    int64_t out_c = transposed ? w->shape[1] * groups : lead;
    if (b && (b->ndim != 1 || b->shape[0] != out_c)) {
        char bb[200];
        return oari_error(OAR_ERR_INVALID, "%s: bias %s must be [%lld] (one per output channel)",
                          op, oari_shape_str(bb, b->ndim, b->shape), (long long)out_c);
    }
    if (x->ndim == 3 && (st[0] != 1 || pad[0] != 0 || dil[0] != 1))
        return oari_error(OAR_ERR_INVALID,
                          "%s: 3-D input takes stride 1, padding 0, dilation 1 on "
                          "the missing H axis",
                          op);
    return 0;
}

static int infer_conv2d(oari_infer *c) {
    const int64_t *a = c->attrs->i;
    if (c->attrs->ni != 7) return oari_error(OAR_ERR_INVALID, "conv2d: expected 7 attributes");
    if (conv_check("conv2d", c->in, c->n_in, a, a + 2, a + 4, a[6], false)) return OAR_ERR_INVALID;
    const oar_tensor *x = c->in[0], *w = c->in[1];
    int64_t h, wd, kh, kw;
    spatial(x, &h, &wd);
    spatial(w, &kh, &kw);
    int64_t eh = a[4] * (kh - 1) + 1, ew = a[5] * (kw - 1) + 1;
    if (h + 2 * a[2] < eh || wd + 2 * a[3] < ew) {
        char bx[200], bw[200];
        return oari_error(OAR_ERR_INVALID,
                          "conv2d: kernel of %s (dilated %lld x %lld) is larger "
                          "than the padded input %lld x %lld of input %s",
                          oari_shape_str(bw, w->ndim, w->shape), (long long)eh, (long long)ew,
                          (long long)(h + 2 * a[2]), (long long)(wd + 2 * a[3]),
                          oari_shape_str(bx, x->ndim, x->shape));
    }
    c->out[0].dtype = x->dtype;
    c->out[0].ndim = x->ndim;
    c->out[0].shape[0] = x->shape[0];
    c->out[0].shape[1] = w->shape[0];
    if (x->ndim == 4) c->out[0].shape[2] = conv_out_size(h, kh, a[0], a[2], a[4]);
    c->out[0].shape[x->ndim - 1] = conv_out_size(wd, kw, a[1], a[3], a[5]);
    return 0;
}

static int infer_conv_transpose2d(oari_infer *c) {
    const int64_t *a = c->attrs->i;
    if (c->attrs->ni != 9)
        return oari_error(OAR_ERR_INVALID, "conv_transpose2d: expected 9 attributes");
    const char *op = "conv_transpose2d";
    if (conv_check(op, c->in, c->n_in, a, a + 2, a + 6, a[8], true)) return OAR_ERR_INVALID;
    const oar_tensor *x = c->in[0], *w = c->in[1];
    for (int i = 0; i < 2; i++)
        if (a[4 + i] < 0 || (a[4 + i] >= a[i] && a[4 + i] >= a[6 + i]))
            return oari_error(OAR_ERR_INVALID,
                              "%s: output_padding (%lld, %lld) must be >= 0 and "
                              "smaller than stride (%lld, %lld) or dilation (%lld, %lld)",
                              op, (long long)a[4], (long long)a[5], (long long)a[0],
                              (long long)a[1], (long long)a[6], (long long)a[7]);
    if (x->ndim == 3 && a[4] != 0)
        return oari_error(OAR_ERR_INVALID, "%s: 3-D input takes output_padding 0 on the H axis",
                          op);
    int64_t h, wd, kh, kw;
    spatial(x, &h, &wd);
    spatial(w, &kh, &kw);
    int64_t oh = (h - 1) * a[0] - 2 * a[2] + a[6] * (kh - 1) + a[4] + 1;
    int64_t ow = (wd - 1) * a[1] - 2 * a[3] + a[7] * (kw - 1) + a[5] + 1;
    if (oh < 1 || ow < 1) {
        char bx[200];
        return oari_error(OAR_ERR_INVALID,
                          "%s: output size %lld x %lld of input %s is not positive; "
                          "reduce padding",
                          op, (long long)oh, (long long)ow, oari_shape_str(bx, x->ndim, x->shape));
    }
    c->out[0].dtype = x->dtype;
    c->out[0].ndim = x->ndim;
    c->out[0].shape[0] = x->shape[0];
    c->out[0].shape[1] = w->shape[1] * a[8];
    if (x->ndim == 4) c->out[0].shape[2] = oh;
    c->out[0].shape[x->ndim - 1] = ow;
    return 0;
}

/* iattr: O, C/g, kh, kw, stride2, padding2, dilation2, groups. */
static int infer_conv2d_weight_grad(oari_infer *c) {
    const int64_t *a = c->attrs->i;
    const oar_tensor *x = c->in[0], *gy = c->in[1];
    char bx[200], bg[200];
    if (c->attrs->ni != 11 || (x->ndim != 4 && x->ndim != 3) || gy->ndim != x->ndim ||
        gy->shape[0] != x->shape[0] || gy->shape[1] != a[0] || x->shape[1] != a[1] * a[10])
        return oari_error(OAR_ERR_INVALID,
                          "conv2d_weight_grad: input %s and grad_out %s do not "
                          "match the weight's shape",
                          oari_shape_str(bx, x->ndim, x->shape),
                          oari_shape_str(bg, gy->ndim, gy->shape));
    if (check_float("conv2d_weight_grad", "input", x) ||
        check_same_dtype("conv2d_weight_grad", "grad_out", x, gy))
        return OAR_ERR_INVALID;
    c->out[0].dtype = x->dtype;
    c->out[0].ndim = x->ndim;
    c->out[0].shape[0] = a[0];
    c->out[0].shape[1] = a[1];
    if (x->ndim == 4) c->out[0].shape[2] = a[2];
    c->out[0].shape[x->ndim - 1] = a[3];
    return 0;
}

/* ---- convolution gradients ------------------------------------------------------- */

/* Sums a conv output's gradient over all dims but the channels (bias gradient). */
static oar_tensor *bias_grad(oar_tensor *gy) {
    int64_t dims[3] = {0, 2, 3};
    return oar_sum(gy, gy->ndim - 1, dims, false);
}

/* conv_transpose2d(gy, w) giving exactly h x w (the input size of a conv). */
static oar_tensor *conv_input_grad(oar_tensor *gy, oar_tensor *w, const int64_t *st,
                                   const int64_t *pad, const int64_t *dil, int64_t groups,
                                   const oari_meta *xm) {
    int nd = xm->ndim;
    int64_t in_h = nd == 4 ? xm->shape[2] : 1, in_w = xm->shape[nd - 1];
    int64_t kh = nd == 4 ? w->shape[2] : 1, kw = w->shape[nd - 1];
    int64_t gh = nd == 4 ? gy->shape[2] : 1, gw = gy->shape[nd - 1];
    int64_t oph = in_h - ((gh - 1) * st[0] - 2 * pad[0] + dil[0] * (kh - 1) + 1);
    int64_t opw = in_w - ((gw - 1) * st[1] - 2 * pad[1] + dil[1] * (kw - 1) + 1);
    oari_attrs a = {.ni = 9, .i = {st[0], st[1], pad[0], pad[1], oph, opw, dil[0], dil[1], groups}};
    oar_tensor *in[3] = {gy, w, NULL};
    return oari_call(OARI_OP_conv_transpose2d, 3, in, &a);
}

static oar_tensor *weight_grad(oar_tensor *x, oar_tensor *gy, const oari_meta *wm,
                               const int64_t *st, const int64_t *pad, const int64_t *dil,
                               int64_t groups) {
    int nd = wm->ndim;
    oari_attrs a = {.ni = 11,
                    .i = {wm->shape[0], wm->shape[1], nd == 4 ? wm->shape[2] : 1, wm->shape[nd - 1],
                          st[0], st[1], pad[0], pad[1], dil[0], dil[1], groups}};
    return oari_call2(OARI_OP_conv2d_weight_grad, x, gy, &a);
}

static oar_tensor *plain_conv(oar_tensor *x, oar_tensor *w, const int64_t *st, const int64_t *pad,
                              const int64_t *dil, int64_t groups) {
    oari_attrs a = {.ni = 7, .i = {st[0], st[1], pad[0], pad[1], dil[0], dil[1], groups}};
    oar_tensor *in[3] = {x, w, NULL};
    return oari_call(OARI_OP_conv2d, 3, in, &a);
}

/* plain_conv cut to want's spatial sizes: with output_padding >= stride
 * (allowed below dilation), a conv_transpose2d's output maps back to more
 * positions than its input had. */
static oar_tensor *plain_conv_to(oar_tensor *x, oar_tensor *w, const int64_t *st,
                                 const int64_t *pad, const int64_t *dil, int64_t groups,
                                 const oari_meta *want) {
    oar_tensor *y = plain_conv(x, w, st, pad, dil, groups);
    for (int d = 2; y && d < want->ndim; d++)
        if (y->shape[d] > want->shape[d]) y = oar_slice(y, d, 0, want->shape[d], 1);
    return y;
}

static int grad_conv2d(oari_grad_ctx *g) {
    const int64_t *a = g->attrs->i;
    oar_tensor *gy = g->gout[0];
    if (g->needs[0] &&
        !(g->gin[0] = conv_input_grad(gy, g->in[1], a, a + 2, a + 4, a[6], &g->in_meta[0])))
        return oari_fail_status();
    if (g->needs[1] &&
        !(g->gin[1] = weight_grad(g->in[0], gy, &g->in_meta[1], a, a + 2, a + 4, a[6])))
        return oari_fail_status();
    if (g->n_in > 2 && g->needs[2] && !(g->gin[2] = bias_grad(gy))) return oari_fail_status();
    return 0;
}

/* conv_transpose2d is the adjoint of conv2d(., w): its input gradient is a
 * conv2d, its weight gradient the weight gradient of that conv2d with the
 * roles of input and output swapped. */
static int grad_conv_transpose2d(oari_grad_ctx *g) {
    const int64_t *a = g->attrs->i;
    oar_tensor *gy = g->gout[0];
    if (g->needs[0] &&
        !(g->gin[0] = plain_conv_to(gy, g->in[1], a, a + 2, a + 6, a[8], &g->in_meta[0])))
        return oari_fail_status();
    if (g->needs[1] &&
        !(g->gin[1] = weight_grad(gy, g->in[0], &g->in_meta[1], a, a + 2, a + 6, a[8])))
        return oari_fail_status();
    if (g->n_in > 2 && g->needs[2] && !(g->gin[2] = bias_grad(gy))) return oari_fail_status();
    return 0;
}

/* gw = W(x, gy) is bilinear: <ggw, W(x, gy)> = <conv2d(x, ggw), gy>. */
static int grad_conv2d_weight_grad(oari_grad_ctx *g) {
    const int64_t *a = g->attrs->i;
    oar_tensor *ggw = g->gout[0];
    if (g->needs[0] &&
        !(g->gin[0] = conv_input_grad(g->in[1], ggw, a + 4, a + 6, a + 8, a[10], &g->in_meta[0])))
        return oari_fail_status();
    if (g->needs[1] && !(g->gin[1] = plain_conv_to(g->in[0], ggw, a + 4, a + 6, a + 8, a[10],
                                                   &g->in_meta[1])))
        return oari_fail_status();
    return 0;
}

const oari_op_def oari_def_conv2d = {
    .name = "conv2d",
    .n_in = 3,
    .n_out = 1,
    .fusion = OARI_FUSE_OPAQUE,
    .flags = OARI_F_OPTIONAL_IN,
    .saved = OARI_SAVE_IN(0) | OARI_SAVE_IN(1),
    .infer = infer_conv2d,
    .grad = grad_conv2d,
};
/* ---- conv2d_prepacked: conv2d on a weight packed once ----------------------------
 * Attributes (defs/conv.def): stride2, padding2, dilation2, O, C, kh, kw,
 * order, ib, ob, act. */
enum { PK_SH, PK_SW, PK_PH, PK_PW, PK_DH, PK_DW, PK_O, PK_C, PK_KH, PK_KW, PK_ORDER, PK_IB, PK_OB, PK_ACT,
       PK_COUNT };

oari_conv_prepack_hooks oari_conv_prepack;

int64_t oari_conv2d_packed_shape(const int64_t *a, int64_t d[6]) {
    const int64_t ob = (a[PK_O] + a[PK_OB] - 1) / a[PK_OB], cb = (a[PK_C] + a[PK_IB] - 1) / a[PK_IB];
    const int64_t o0[6] = {ob, cb, a[PK_KH], a[PK_KW], a[PK_IB], a[PK_OB]};
    const int64_t o1[6] = {ob, a[PK_KH], a[PK_KW], cb, a[PK_IB], a[PK_OB]};
    const int64_t o2[6] = {6, 6, a[PK_O], a[PK_C], 1, 1};
    memcpy(d, a[PK_ORDER] == 2 ? o2 : a[PK_ORDER] ? o1 : o0, sizeof o0);
    int64_t n = 1;
    for (int i = 0; i < 6; i++) n *= d[i];
    return n;
}

/* Where weight element (o, c, i, j) lies in the packed weight. */
static int64_t packed_at(const int64_t *a, int64_t o, int64_t c, int64_t i, int64_t j) {
    const int64_t ib = a[PK_IB], obk = a[PK_OB], cb = (a[PK_C] + ib - 1) / ib;
    const int64_t kh = a[PK_KH], kw = a[PK_KW];
    const int64_t blk = a[PK_ORDER] ? ((o / obk * kh + i) * kw + j) * cb + c / ib
                                    : ((o / obk * cb + c / ib) * kh + i) * kw + j;
    return (blk * ib + c % ib) * obk + o % obk;
}

void oari_conv2d_pack(const float *w, float *wp, const int64_t *a) {
    int64_t d[6];
    memset(wp, 0, (size_t)oari_conv2d_packed_shape(a, d) * sizeof *wp);
    const int64_t O = a[PK_O], C = a[PK_C], kh = a[PK_KH], kw = a[PK_KW];
    for (int64_t o = 0; o < O; o++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t i = 0; i < kh; i++)
                for (int64_t j = 0; j < kw; j++)
                    wp[packed_at(a, o, c, i, j)] = w[((o * C + c) * kh + i) * kw + j];
}

void oari_conv2d_unpack(const float *wp, float *w, const int64_t *a) {
    const int64_t O = a[PK_O], C = a[PK_C], kh = a[PK_KH], kw = a[PK_KW];
    for (int64_t o = 0; o < O; o++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t i = 0; i < kh; i++)
                for (int64_t j = 0; j < kw; j++)
                    w[((o * C + c) * kh + i) * kw + j] = wp[packed_at(a, o, c, i, j)];
}

/* x f32 [N, C, H, W], wp f32 (oari_conv2d_packed_shape), bias f32 [O] or NULL. */
static int infer_conv2d_prepacked(oari_infer *c) {
    const int64_t *a = c->attrs->i;
    const oar_tensor *x = c->in[0], *wp = c->in[1], *b = c->in[2];
    char bx[200], bw[200], bd[200];
    if (c->attrs->ni != PK_COUNT)
        return oari_error(OAR_ERR_INVALID, "conv2d_prepacked: expected %d integer attributes, got %d", PK_COUNT,
                          c->attrs->ni);
    if (!wp) return oari_error(OAR_ERR_INVALID, "conv2d_prepacked: the packed weight is NULL");
    if (x->dtype != OAR_F32 || wp->dtype != OAR_F32 || (b && b->dtype != OAR_F32))
        return oari_error(OAR_ERR_INVALID, "conv2d_prepacked: input, packed weight and bias must be float32, got "
                          "%s, %s and %s", oar_dtype_name(x->dtype), oar_dtype_name(wp->dtype),
                          b ? oar_dtype_name(b->dtype) : "none");
    bool bad = false;
    for (int k = PK_SH; k <= PK_DW; k++) bad |= k == PK_PH || k == PK_PW ? a[k] < 0 : a[k] < 1;
    for (int k = PK_O; k <= PK_KW; k++) bad |= a[k] < 1;
    bad |= a[PK_ORDER] < 0 || a[PK_ORDER] > 2 || a[PK_IB] < 1 || a[PK_IB] > 64 || a[PK_OB] < 1 ||
           a[PK_OB] > 64 || (a[PK_ACT] != 0 && a[PK_ACT] != 1);
    /* order 2, Winograd F(4x4, 3x3)'s filter transform: 3x3, stride 1,
     * undilated, blocks 1 */
    bad |= a[PK_ORDER] == 2 && (a[PK_KH] != 3 || a[PK_KW] != 3 || a[PK_SH] != 1 || a[PK_SW] != 1 ||
                                a[PK_DH] != 1 || a[PK_DW] != 1 || a[PK_IB] != 1 || a[PK_OB] != 1);
    if (bad)
        return oari_error(OAR_ERR_INVALID, "conv2d_prepacked: bad attributes (stride and dilation >= 1, padding "
                          ">= 0, O, C, kh, kw >= 1, order 0, 1 or 2, blocks in [1, 64], act 0 or 1; order 2: "
                          "a 3x3 kernel, stride and dilation 1, blocks 1)");
    int64_t d[6];
    oari_conv2d_packed_shape(a, d);
    if (x->ndim != 4 || x->shape[1] != a[PK_C] || wp->ndim != 6 || memcmp(wp->shape, d, sizeof d))
        return oari_error(OAR_ERR_INVALID, "conv2d_prepacked: input %s and packed weight %s do not fit a weight "
                          "[%lld, %lld, %lld, %lld] packed as %s (expected input [N, %lld, H, W], weight %s)",
                          oari_shape_str(bx, x->ndim, x->shape), oari_shape_str(bw, wp->ndim, wp->shape),
                          (long long)a[PK_O], (long long)a[PK_C], (long long)a[PK_KH], (long long)a[PK_KW],
                          a[PK_ORDER] == 2 ? "order 2" : a[PK_ORDER] ? "order 1" : "order 0", (long long)a[PK_C],
                          oari_shape_str(bd, 6, d));
    if (b && (b->ndim != 1 || b->shape[0] != a[PK_O]))
        return oari_error(OAR_ERR_INVALID, "conv2d_prepacked: bias %s is not [%lld]",
                          oari_shape_str(bx, b->ndim, b->shape), (long long)a[PK_O]);
    int64_t eh = a[PK_DH] * (a[PK_KH] - 1) + 1, ew = a[PK_DW] * (a[PK_KW] - 1) + 1;
    if (x->shape[2] + 2 * a[PK_PH] < eh || x->shape[3] + 2 * a[PK_PW] < ew)
        return oari_error(OAR_ERR_INVALID, "conv2d_prepacked: kernel %lld x %lld (dilated %lld x %lld) is larger "
                          "than the padded input of %s", (long long)a[PK_KH], (long long)a[PK_KW], (long long)eh,
                          (long long)ew, oari_shape_str(bx, x->ndim, x->shape));
    c->out[0].dtype = OAR_F32;
    c->out[0].ndim = 4;
    c->out[0].shape[0] = x->shape[0];
    c->out[0].shape[1] = a[PK_O];
    c->out[0].shape[2] = conv_out_size(x->shape[2], a[PK_KH], a[PK_SH], a[PK_PH], a[PK_DH]);
    c->out[0].shape[3] = conv_out_size(x->shape[3], a[PK_KW], a[PK_SW], a[PK_PW], a[PK_DW]);
    return 0;
}

const oari_op_def oari_def_conv2d_prepacked = {
    .name = "conv2d_prepacked",
    .n_in = 3,
    .n_out = 1,
    .fusion = OARI_FUSE_OPAQUE,
    .flags = OARI_F_NONDIFF | OARI_F_OPTIONAL_IN,
    .infer = infer_conv2d_prepacked,
};
const oari_op_def oari_def_conv_transpose2d = {
    .name = "conv_transpose2d",
    .n_in = 3,
    .n_out = 1,
    .fusion = OARI_FUSE_OPAQUE,
    .flags = OARI_F_OPTIONAL_IN,
    .saved = OARI_SAVE_IN(0) | OARI_SAVE_IN(1),
    .infer = infer_conv_transpose2d,
    .grad = grad_conv_transpose2d,
};
const oari_op_def oari_def_conv2d_weight_grad = {
    .name = "conv2d_weight_grad",
    .n_in = 2,
    .n_out = 1,
    .fusion = OARI_FUSE_OPAQUE,
    .saved = OARI_SAVE_IN(0) | OARI_SAVE_IN(1),
    .infer = infer_conv2d_weight_grad,
    .grad = grad_conv2d_weight_grad,
};

/* ---- pools ------------------------------------------------------------------------ */

/* PyTorch's pooling_output_shape: with ceil_mode the last window must start
 * inside the input or the left padding. */
static int64_t pool_out_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d,
                             bool ceil_mode) {
    int64_t num = in + 2 * p - d * (k - 1) - 1 + (ceil_mode ? s - 1 : 0);
    int64_t o = (num >= 0 ? num / s : -((-num + s - 1) / s)) + 1;
    if (ceil_mode && (o - 1) * s >= in + p) o--;
    return o;
}

/* Shared checks of max/avg pools; fills the output meta. k, s, p, d: pairs. */
static int pool_infer(oari_infer *c, const int64_t *k, const int64_t *s, const int64_t *p,
                      const int64_t *d, bool ceil_mode) {
    const oar_tensor *x = c->in[0];
    if (check_planes(c->op, x)) return OAR_ERR_INVALID;
    for (int i = 0; i < 2; i++) {
        if (k[i] < 1 || s[i] < 1 || d[i] < 1 || p[i] < 0)
            return oari_error(OAR_ERR_INVALID,
                              "%s: kernel (%lld, %lld), stride (%lld, %lld) and "
                              "dilation must be >= 1, padding (%lld, %lld) >= 0",
                              c->op, (long long)k[0], (long long)k[1], (long long)s[0],
                              (long long)s[1], (long long)p[0], (long long)p[1]);
        if (p[i] > k[i] / 2)
            return oari_error(OAR_ERR_INVALID,
                              "%s: padding (%lld, %lld) must be at most half the "
                              "kernel size (%lld, %lld)",
                              c->op, (long long)p[0], (long long)p[1], (long long)k[0],
                              (long long)k[1]);
    }
    int nd = x->ndim;
    int64_t h = x->shape[nd - 2], w = x->shape[nd - 1];
    int64_t oh = pool_out_size(h, k[0], s[0], p[0], d[0], ceil_mode);
    int64_t ow = pool_out_size(w, k[1], s[1], p[1], d[1], ceil_mode);
    if (oh < 1 || ow < 1) {
        char b[200];
        return oari_error(OAR_ERR_INVALID,
                          "%s: input %s is too small for kernel (%lld, %lld) with "
                          "padding (%lld, %lld) and dilation (%lld, %lld): output %lld x %lld",
                          c->op, oari_shape_str(b, nd, x->shape), (long long)k[0], (long long)k[1],
                          (long long)p[0], (long long)p[1], (long long)d[0], (long long)d[1],
                          (long long)oh, (long long)ow);
    }
    oari_meta_from(&c->out[0], x);
    c->out[0].shape[nd - 2] = oh;
    c->out[0].shape[nd - 1] = ow;
    return 0;
}

static int infer_max_pool2d(oari_infer *c) {
    const int64_t *a = c->attrs->i;
    if (c->attrs->ni != 9) return oari_error(OAR_ERR_INVALID, "max_pool2d: expected 9 attributes");
    if (pool_infer(c, a, a + 2, a + 4, a + 6, a[8] != 0)) return OAR_ERR_INVALID;
    c->out[1] = c->out[0];
    c->out[1].dtype = OAR_I64;
    return 0;
}

static int infer_max_pool2d_values(oari_infer *c) {
    const int64_t *a = c->attrs->i;
    if (c->attrs->ni != 9) return oari_error(OAR_ERR_INVALID, "max_pool2d_values: expected 9 attributes");
    return pool_infer(c, a, a + 2, a + 4, a + 6, a[8] != 0);
}

static int infer_avg_pool2d(oari_infer *c) {
    const int64_t *a = c->attrs->i;
    static const int64_t one[2] = {1, 1};
    if (c->attrs->ni != 8) return oari_error(OAR_ERR_INVALID, "avg_pool2d: expected 8 attributes");
    return pool_infer(c, a, a + 2, a + 4, one, a[6] != 0);
}

static int infer_adaptive_avg_pool2d(oari_infer *c) {
    const int64_t *a = c->attrs->i;
    if (check_planes(c->op, c->in[0])) return OAR_ERR_INVALID;
    if (c->attrs->ni != 2 || a[0] < 1 || a[1] < 1)
        return oari_error(OAR_ERR_INVALID,
                          "adaptive_avg_pool2d: output size (%lld, %lld) must be "
                          ">= 1",
                          (long long)a[0], (long long)a[1]);
    int nd = c->in[0]->ndim;
    oari_meta_from(&c->out[0], c->in[0]);
    c->out[0].shape[nd - 2] = a[0];
    c->out[0].shape[nd - 1] = a[1];
    return 0;
}

static int infer_interpolate(oari_infer *c) {
    const int64_t *a = c->attrs->i;
    if (check_planes(c->op, c->in[0])) return OAR_ERR_INVALID;
    if (c->attrs->ni != 4 || (a[0] != 0 && a[0] != 1))
        return oari_error(OAR_ERR_INVALID, "interpolate: mode must be nearest or bilinear");
    if (a[1] < 1 || a[2] < 1)
        return oari_error(OAR_ERR_INVALID, "interpolate: output size (%lld, %lld) must be >= 1",
                          (long long)a[1], (long long)a[2]);
    int nd = c->in[0]->ndim;
    oari_meta_from(&c->out[0], c->in[0]);
    c->out[0].shape[nd - 2] = a[1];
    c->out[0].shape[nd - 1] = a[2];
    return 0;
}

/* Backward primitives: grad_out [..., oh, ow] -> [..., h, w]. */
static int infer_plane_backward(oari_infer *c, int64_t h, int64_t w) {
    const oar_tensor *gy = c->in[0];
    if (check_planes(c->op, gy)) return OAR_ERR_INVALID;
    if (h < 1 || w < 1)
        return oari_error(OAR_ERR_INVALID, "%s: input size %lld x %lld must be positive", c->op,
                          (long long)h, (long long)w);
    oari_meta_from(&c->out[0], gy);
    c->out[0].shape[gy->ndim - 2] = h;
    c->out[0].shape[gy->ndim - 1] = w;
    return 0;
}

static int infer_max_pool2d_backward(oari_infer *c) {
    const oar_tensor *gy = c->in[0], *idx = c->in[1];
    if (idx->dtype != OAR_I64 || idx->ndim != gy->ndim ||
        memcmp(idx->shape, gy->shape, (size_t)gy->ndim * sizeof *gy->shape))
        return oari_error(OAR_ERR_INVALID, "max_pool2d_backward: indices must be i64 shaped like "
                                           "grad_out");
    if (c->attrs->ni != 2)
        return oari_error(OAR_ERR_INVALID, "max_pool2d_backward: bad attributes");
    return infer_plane_backward(c, c->attrs->i[0], c->attrs->i[1]);
}

/* Calls a one-input pool primitive with attrs a (n values) plus in_h, in_w. */
static oar_tensor *call_with_size(oari_op op, oar_tensor *x, const int64_t *a, int n, int64_t h,
                                  int64_t w) {
    oari_attrs at = oari_attrs_ints(n, a);
    at.i[at.ni++] = h;
    at.i[at.ni++] = w;
    return oari_call1(op, x, &at);
}

static int plane_h(const oari_meta *m) { return (int)m->shape[m->ndim - 2]; }
static int plane_w(const oari_meta *m) { return (int)m->shape[m->ndim - 1]; }

static int grad_max_pool2d(oari_grad_ctx *g) {
    oari_attrs a = {.ni = 2, .i = {plane_h(&g->in_meta[0]), plane_w(&g->in_meta[0])}};
    oar_tensor *in[2] = {g->gout[0], g->out[1]};
    g->gin[0] = oari_call(OARI_OP_max_pool2d_backward, 2, in, &a);
    return g->gin[0] ? 0 : oari_fail_status();
}

/* max_pool2d_backward is linear in grad_out: its adjoint gathers at the indices. */
static int grad_max_pool2d_backward(oari_grad_ctx *g) {
    if (!g->needs[0]) return 0;
    oar_tensor *gg = g->gout[0], *idx = g->in[1];
    const oari_meta *m = &g->in_meta[0];
    int nd = gg->ndim;
    int64_t flat[OAR_MAX_DIMS];
    memcpy(flat, gg->shape, sizeof flat);
    flat[nd - 2] = gg->shape[nd - 2] * gg->shape[nd - 1];
    int64_t iflat[OAR_MAX_DIMS];
    memcpy(iflat, m->shape, sizeof iflat);
    iflat[nd - 2] = m->shape[nd - 2] * m->shape[nd - 1];
    oar_tensor *r =
        oar_gather(oar_reshape(gg, nd - 1, flat), nd - 2, oar_reshape(idx, nd - 1, iflat));
    g->gin[0] = oar_reshape(r, m->ndim, m->shape);
    return g->gin[0] ? 0 : oari_fail_status();
}

static int grad_avg_pool2d(oari_grad_ctx *g) {
    const oari_meta *m = &g->in_meta[0];
    g->gin[0] = call_with_size(OARI_OP_avg_pool2d_backward, g->gout[0], g->attrs->i, 8, plane_h(m),
                               plane_w(m));
    return g->gin[0] ? 0 : oari_fail_status();
}

static int grad_avg_pool2d_backward(oari_grad_ctx *g) {
    oari_attrs a = oari_attrs_ints(8, g->attrs->i);
    g->gin[0] = oari_call1(OARI_OP_avg_pool2d, g->gout[0], &a);
    return g->gin[0] ? 0 : oari_fail_status();
}

static int grad_adaptive_avg_pool2d(oari_grad_ctx *g) {
    const oari_meta *m = &g->in_meta[0];
    g->gin[0] = call_with_size(OARI_OP_adaptive_avg_pool2d_backward, g->gout[0], NULL, 0,
                               plane_h(m), plane_w(m));
    return g->gin[0] ? 0 : oari_fail_status();
}

static int grad_adaptive_avg_pool2d_backward(oari_grad_ctx *g) {
    const oari_meta *m = &g->in_meta[0];
    oari_attrs a = {.ni = 2, .i = {plane_h(m), plane_w(m)}};
    g->gin[0] = oari_call1(OARI_OP_adaptive_avg_pool2d, g->gout[0], &a);
    return g->gin[0] ? 0 : oari_fail_status();
}

static int grad_interpolate(oari_grad_ctx *g) {
    const oari_meta *m = &g->in_meta[0];
    const int64_t *a = g->attrs->i;
    oari_attrs b = {.ni = 4, .i = {a[0], plane_h(m), plane_w(m), a[3]}};
    g->gin[0] = oari_call1(OARI_OP_interpolate_backward, g->gout[0], &b);
    return g->gin[0] ? 0 : oari_fail_status();
}

static int grad_interpolate_backward(oari_grad_ctx *g) {
    const oari_meta *m = &g->in_meta[0];
    const int64_t *a = g->attrs->i;
    oari_attrs b = {.ni = 4, .i = {a[0], plane_h(m), plane_w(m), a[3]}};
    g->gin[0] = oari_call1(OARI_OP_interpolate, g->gout[0], &b);
    return g->gin[0] ? 0 : oari_fail_status();
}

static int infer_interpolate_backward(oari_infer *c) {
    const int64_t *a = c->attrs->i;
    if (c->attrs->ni != 4 || (a[0] != 0 && a[0] != 1))
        return oari_error(OAR_ERR_INVALID, "interpolate_backward: bad attributes");
    return infer_plane_backward(c, a[1], a[2]);
}

static int infer_avg_pool2d_backward(oari_infer *c) {
    if (c->attrs->ni != 10)
        return oari_error(OAR_ERR_INVALID, "avg_pool2d_backward: bad attributes");
    return infer_plane_backward(c, c->attrs->i[8], c->attrs->i[9]);
}

static int infer_adaptive_backward(oari_infer *c) {
    if (c->attrs->ni != 2)
        return oari_error(OAR_ERR_INVALID, "adaptive_avg_pool2d_backward: bad attributes");
    return infer_plane_backward(c, c->attrs->i[0], c->attrs->i[1]);
}

const oari_op_def oari_def_max_pool2d = {
    .name = "max_pool2d",
    .n_in = 1,
    .n_out = 2,
    .fusion = OARI_FUSE_OPAQUE,
    .saved = OARI_SAVE_OUT(1),
    .infer = infer_max_pool2d,
    .grad = grad_max_pool2d,
};
const oari_op_def oari_def_max_pool2d_values = {
    .name = "max_pool2d_values",
    .n_in = 1,
    .n_out = 1,
    .fusion = OARI_FUSE_OPAQUE,
    .flags = OARI_F_NONDIFF,
    .infer = infer_max_pool2d_values,
};
const oari_op_def oari_def_max_pool2d_backward = {
    .name = "max_pool2d_backward",
    .n_in = 2,
    .n_out = 1,
    .fusion = OARI_FUSE_OPAQUE,
    .saved = OARI_SAVE_IN(1),
    .infer = infer_max_pool2d_backward,
    .grad = grad_max_pool2d_backward,
};
const oari_op_def oari_def_avg_pool2d = {
    .name = "avg_pool2d",
    .n_in = 1,
    .n_out = 1,
    .fusion = OARI_FUSE_OPAQUE,
    .infer = infer_avg_pool2d,
    .grad = grad_avg_pool2d,
};
const oari_op_def oari_def_avg_pool2d_backward = {
    .name = "avg_pool2d_backward",
    .n_in = 1,
    .n_out = 1,
    .fusion = OARI_FUSE_OPAQUE,
    .infer = infer_avg_pool2d_backward,
    .grad = grad_avg_pool2d_backward,
};
const oari_op_def oari_def_adaptive_avg_pool2d = {
    .name = "adaptive_avg_pool2d",
    .n_in = 1,
    .n_out = 1,
    .fusion = OARI_FUSE_OPAQUE,
    .infer = infer_adaptive_avg_pool2d,
    .grad = grad_adaptive_avg_pool2d,
};
const oari_op_def oari_def_adaptive_avg_pool2d_backward = {
    .name = "adaptive_avg_pool2d_backward",
    .n_in = 1,
    .n_out = 1,
    .fusion = OARI_FUSE_OPAQUE,
    .infer = infer_adaptive_backward,
    .grad = grad_adaptive_avg_pool2d_backward,
};
const oari_op_def oari_def_interpolate = {
    .name = "interpolate",
    .n_in = 1,
    .n_out = 1,
    .fusion = OARI_FUSE_OPAQUE,
    .infer = infer_interpolate,
    .grad = grad_interpolate,
};
const oari_op_def oari_def_interpolate_backward = {
    .name = "interpolate_backward",
    .n_in = 1,
    .n_out = 1,
    .fusion = OARI_FUSE_OPAQUE,
    .infer = infer_interpolate_backward,
    .grad = grad_interpolate_backward,
};

/* ---- public functions --------------------------------------------------------------- */

static bool null_arg(const char *op, const void *p, const char *what) {
    if (p) return false;
    oari_error(OAR_ERR_INVALID, "%s: %s is NULL", op, what);
    return true;
}

/* An unbatched input ([C, ...] as torch takes it) runs as a batch of one:
 * a view in, the batch dim dropped from the result (both views, so autograd
 * and tracing see them); NULL stays NULL with the error kept. */
static oar_tensor *batch_of_one(oar_tensor *x) { return oar_unsqueeze(x, 0); }
static oar_tensor *unbatch(oar_tensor *y) { return y ? oar_squeeze(y, 0) : NULL; }

/* Complex convolution (input and weight of one complex dtype, as torch):
 * four real convolutions, y = (xr*wr - xi*wi + br) + i (xr*wi + xi*wr + bi),
 * built from differentiable ops so gradients (and their gradients) follow
 * the conjugate convention of every complex op. conv is one of the real
 * wrappers with its other arguments bound in args. */
typedef oar_tensor *(*real_conv_fn)(oar_tensor *x, oar_tensor *w, oar_tensor *b, const void *args);

static bool is_complex_conv(oar_tensor *x, oar_tensor *w) {
    return x && w && (oar_dtype_is_complex(x->dtype) || oar_dtype_is_complex(w->dtype));
}

static oar_tensor *complex_conv(const char *op, oar_tensor *x, oar_tensor *w, oar_tensor *bias,
                                real_conv_fn conv, const void *args) {
    if (check_same_dtype(op, "weight", x, w) || check_same_dtype(op, "bias", x, bias)) return NULL;
    oar_tensor *xr = oar_real(x), *xi = oar_imag(x), *wr = oar_real(w), *wi = oar_imag(w);
    oar_tensor *br = bias ? oar_real(bias) : NULL, *bi = bias ? oar_imag(bias) : NULL;
    oar_tensor *re = oar_sub(conv(xr, wr, br, args), conv(xi, wi, NULL, args));
    oar_tensor *im = oar_add(conv(xr, wi, bi, args), conv(xi, wr, NULL, args));
    return oar_complex(re, im);
}

typedef struct conv2d_args {
    const int64_t *stride, *padding, *dilation;
    int64_t groups;
} conv2d_args;
static oar_tensor *real_conv2d(oar_tensor *x, oar_tensor *w, oar_tensor *b, const void *args) {
    const conv2d_args *a = args;
    return oar_conv2d(x, w, b, a->stride, a->padding, a->dilation, a->groups);
}
typedef struct conv1d_args {
    int64_t stride, padding, dilation, groups;
} conv1d_args;
static oar_tensor *real_conv1d(oar_tensor *x, oar_tensor *w, oar_tensor *b, const void *args) {
    const conv1d_args *a = args;
    return oar_conv1d(x, w, b, a->stride, a->padding, a->dilation, a->groups);
}
typedef struct conv_t_args {
    const int64_t *stride, *padding, *output_padding, *dilation;
    int64_t groups;
} conv_t_args;
static oar_tensor *real_conv_t(oar_tensor *x, oar_tensor *w, oar_tensor *b, const void *args) {
    const conv_t_args *a = args;
    return oar_conv_transpose2d(x, w, b, a->stride, a->padding, a->output_padding, a->dilation,
                                a->groups);
}
typedef struct conv_t1_args {
    int64_t stride, padding, output_padding, dilation, groups;
} conv_t1_args;
static oar_tensor *real_conv_t1(oar_tensor *x, oar_tensor *w, oar_tensor *b, const void *args) {
    const conv_t1_args *a = args;
    return oar_conv_transpose1d(x, w, b, a->stride, a->padding, a->output_padding, a->dilation,
                                a->groups);
}

oar_tensor *oar_conv2d(oar_tensor *x, oar_tensor *w, oar_tensor *bias, const int64_t stride[2],
                       const int64_t padding[2], const int64_t dilation[2], int64_t groups) {
    if (null_arg("conv2d", stride, "stride") || null_arg("conv2d", padding, "padding") ||
        null_arg("conv2d", dilation, "dilation"))
        return NULL;
    if (x && x->ndim == 3)
        return unbatch(oar_conv2d(batch_of_one(x), w, bias, stride, padding, dilation, groups));
    if (is_complex_conv(x, w))
        return complex_conv("conv2d", x, w, bias, real_conv2d,
                            &(conv2d_args){stride, padding, dilation, groups});
    oari_attrs a = {
        .ni = 7,
        .i = {stride[0], stride[1], padding[0], padding[1], dilation[0], dilation[1], groups}};
    if (x && x->ndim != 4) {
        char b[200];
        oari_error(OAR_ERR_INVALID, "conv2d: expected a 4-D input [N, C, H, W] or 3-D [C, H, W], got %s",
                   oari_shape_str(b, x->ndim, x->shape));
        return NULL;
    }
    oar_tensor *in[3] = {x, w, bias};
    if (x && !w) {
        if (!oari_error_pending()) oari_error(OAR_ERR_INVALID, "conv2d: weight is NULL");
        return NULL;
    }
    return oari_call(OARI_OP_conv2d, 3, in, &a);
}

oar_tensor *oar_conv1d(oar_tensor *x, oar_tensor *w, oar_tensor *bias, int64_t stride,
                       int64_t padding, int64_t dilation, int64_t groups) {
    if (x && x->ndim == 2)
        return unbatch(oar_conv1d(batch_of_one(x), w, bias, stride, padding, dilation, groups));
    if (is_complex_conv(x, w))
        return complex_conv("conv1d", x, w, bias, real_conv1d,
                            &(conv1d_args){stride, padding, dilation, groups});
    if (x && x->ndim != 3) {
        char b[200];
        oari_error(OAR_ERR_INVALID, "conv1d: expected a 3-D input [N, C, L] or 2-D [C, L], got %s",
                   oari_shape_str(b, x->ndim, x->shape));
        return NULL;
    }
    if (x && !w) {
        if (!oari_error_pending()) oari_error(OAR_ERR_INVALID, "conv1d: weight is NULL");
        return NULL;
    }
    oari_attrs a = {.ni = 7, .i = {1, stride, 0, padding, 1, dilation, groups}};
    oar_tensor *in[3] = {x, w, bias};
    return oari_call(OARI_OP_conv2d, 3, in, &a);
}

/* conv_transpose2d on [N, C, L] read as H = 1, as oar_conv1d. */
oar_tensor *oar_conv_transpose1d(oar_tensor *x, oar_tensor *w, oar_tensor *bias, int64_t stride,
                                 int64_t padding, int64_t output_padding, int64_t dilation,
                                 int64_t groups) {
    const char *op = "conv_transpose1d";
    if (x && x->ndim == 2)
        return unbatch(oar_conv_transpose1d(batch_of_one(x), w, bias, stride, padding,
                                            output_padding, dilation, groups));
    if (is_complex_conv(x, w))
        return complex_conv(op, x, w, bias, real_conv_t1,
                            &(conv_t1_args){stride, padding, output_padding, dilation, groups});
    if (x && x->ndim != 3) {
        char b[200];
        oari_error(OAR_ERR_INVALID, "%s: expected a 3-D input [N, C, L] or 2-D [C, L], got %s", op,
                   oari_shape_str(b, x->ndim, x->shape));
        return NULL;
    }
    if (x && !w) {
        if (!oari_error_pending()) oari_error(OAR_ERR_INVALID, "%s: weight is NULL", op);
        return NULL;
    }
    oari_attrs a = {.ni = 9, .i = {1, stride, 0, padding, 0, output_padding, 1, dilation, groups}};
    oar_tensor *in[3] = {x, w, bias};
    return oari_call(OARI_OP_conv_transpose2d, 3, in, &a);
}

oar_tensor *oar_conv_transpose2d(oar_tensor *x, oar_tensor *w, oar_tensor *bias,
                                 const int64_t stride[2], const int64_t padding[2],
                                 const int64_t output_padding[2], const int64_t dilation[2],
                                 int64_t groups) {
    const char *op = "conv_transpose2d";
    if (null_arg(op, stride, "stride") || null_arg(op, padding, "padding") ||
        null_arg(op, output_padding, "output_padding") || null_arg(op, dilation, "dilation"))
        return NULL;
    if (x && x->ndim == 3)
        return unbatch(oar_conv_transpose2d(batch_of_one(x), w, bias, stride, padding,
                                            output_padding, dilation, groups));
    if (is_complex_conv(x, w))
        return complex_conv(op, x, w, bias, real_conv_t,
                            &(conv_t_args){stride, padding, output_padding, dilation, groups});
    if (x && x->ndim != 4) {
        char b[200];
        oari_error(OAR_ERR_INVALID, "%s: expected a 4-D input [N, C, H, W] or 3-D [C, H, W], got %s", op,
                   oari_shape_str(b, x->ndim, x->shape));
        return NULL;
    }
    if (x && !w) {
        if (!oari_error_pending()) oari_error(OAR_ERR_INVALID, "%s: weight is NULL", op);
        return NULL;
    }
    oari_attrs a = {.ni = 9,
                    .i = {stride[0], stride[1], padding[0], padding[1], output_padding[0],
                          output_padding[1], dilation[0], dilation[1], groups}};
    oar_tensor *in[3] = {x, w, bias};
    return oari_call(OARI_OP_conv_transpose2d, 3, in, &a);
}

oar_tensor *oar_max_pool2d(oar_tensor *x, const int64_t kernel[2], const int64_t stride[2],
                           const int64_t padding[2], const int64_t dilation[2], bool ceil_mode,
                           oar_tensor **indices) {
    if (indices) *indices = NULL;
    if (null_arg("max_pool2d", kernel, "kernel")) return NULL;
    const int64_t *s = stride ? stride : kernel; /* NULL stride: the kernel size, as torch */
    static const int64_t zero[2] = {0, 0}, one[2] = {1, 1};
    const int64_t *p = padding ? padding : zero, *d = dilation ? dilation : one;
    oari_attrs a = {.ni = 9,
                    .i = {kernel[0], kernel[1], s[0], s[1], p[0], p[1], d[0], d[1], ceil_mode}};
    /* No indices asked for and no gradient to record (inference, no_grad):
     * the values alone, without an index per output (the demo CNN's 2x2
     * pool of 64 x 16 x 28 x 28 in 0.4 of the time). A CPU tensor only, and
     * not while tracing or for a dtensor: graphs, their backward and the
     * dist rules know max_pool2d. */
    if (!indices && x && x->storage && x->storage->device == oari_device_cpu() && !x->ext[OARI_EXT_DIST] &&
        !oari_trace_current && !(x->requires_grad && oari_grad_mode_enabled()))
        return oari_call1(OARI_OP_max_pool2d_values, x, &a);
    oar_tensor *out[OARI_MAX_OUT];
    if (oari_dispatch(OARI_OP_max_pool2d, 1, &x, &a, out)) return NULL;
    if (indices)
        *indices = oari_pool_adopt(out[1]);
    else
        oar_tensor_release(out[1]);
    return oari_pool_adopt(out[0]);
}

oar_tensor *oar_avg_pool2d(oar_tensor *x, const int64_t kernel[2], const int64_t stride[2],
                           const int64_t padding[2], bool ceil_mode, bool count_include_pad) {
    if (null_arg("avg_pool2d", kernel, "kernel")) return NULL;
    const int64_t *s = stride ? stride : kernel;
    static const int64_t zero[2] = {0, 0};
    const int64_t *p = padding ? padding : zero;
    oari_attrs a = {
        .ni = 8, .i = {kernel[0], kernel[1], s[0], s[1], p[0], p[1], ceil_mode, count_include_pad}};
    return oari_call1(OARI_OP_avg_pool2d, x, &a);
}

oar_tensor *oar_adaptive_avg_pool2d(oar_tensor *x, const int64_t output_size[2]) {
    if (null_arg("adaptive_avg_pool2d", output_size, "output_size")) return NULL;
    oari_attrs a = {.ni = 2, .i = {output_size[0], output_size[1]}};
    return oari_call1(OARI_OP_adaptive_avg_pool2d, x, &a);
}

oar_tensor *oar_interpolate(oar_tensor *x, const int64_t size[2], oar_interp_mode mode,
                            bool align_corners) {
    if (null_arg("interpolate", size, "size")) return NULL;
    if (mode != OAR_INTERP_NEAREST && mode != OAR_INTERP_BILINEAR)
        return oari_error(OAR_ERR_INVALID, "interpolate: unknown mode %d", (int)mode), NULL;
    if (mode == OAR_INTERP_NEAREST && align_corners)
        return oari_error(OAR_ERR_INVALID, "interpolate: align_corners only applies to bilinear "
                                           "mode"),
               NULL;
    oari_attrs a = {.ni = 4, .i = {mode, size[0], size[1], align_corners}};
    return oari_call1(OARI_OP_interpolate, x, &a);
}

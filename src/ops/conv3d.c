/* 3-D convolutions: conv3d, conv_transpose3d and conv3d_weight_grad, their
 * shape/dtype rules, gradient rules written with ops (so they differentiate
 * again) and public functions. They mirror conv2d's (src/ops/conv.c) with a
 * depth axis; kernels: src/backends/cpu/cpu_conv3d.c. Attribute layouts:
 * src/ops/defs/conv.def. */
#include "op.h"
#include <oar/complex.h>
#include <string.h>

/* ---- checks ------------------------------------------------------------------------ */

static int check_dtypes(const char *op, const oar_tensor *x, const oar_tensor *w,
                        const oar_tensor *b) {
    if (!oar_dtype_is_float(x->dtype))
        return oari_error(OAR_ERR_INVALID,
                          "%s: input must be floating (f16, bf16, f32, f64), got %s", op,
                          oar_dtype_name(x->dtype));
    const oar_tensor *other[2] = {w, b};
    static const char *what[2] = {"weight", "bias"};
    for (int i = 0; i < 2; i++)
        if (other[i] && other[i]->dtype != x->dtype)
            return oari_error(OAR_ERR_INVALID,
                              "%s: %s dtype %s differs from the input's %s; cast it first", op,
                              what[i], oar_dtype_name(other[i]->dtype), oar_dtype_name(x->dtype));
    return 0;
}

static int64_t conv_out_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) {
    return (in + 2 * p - d * (k - 1) - 1) / s + 1;
}

/* The shared part of conv3d / conv_transpose3d: ranks, dtypes, attributes,
 * channels and bias. transposed: w is [C, O/g, kd, kh, kw]. */
static int conv3d_check(const char *op, oar_tensor *const *in, int n_in, const int64_t *st,
                        const int64_t *pad, const int64_t *dil, int64_t groups, bool transposed) {
    const oar_tensor *x = in[0], *w = in[1], *b = n_in > 2 ? in[2] : NULL;
    char bx[200], bw[200];
    if (!w) return oari_error(OAR_ERR_INVALID, "%s: weight is NULL", op);
    if (x->ndim != 5 || w->ndim != 5)
        return oari_error(OAR_ERR_INVALID,
                          "%s: expected input [N, C, D, H, W] and weight %s, got input %s and "
                          "weight %s",
                          op, transposed ? "[C, O/groups, kd, kh, kw]" : "[O, C/groups, kd, kh, kw]",
                          oari_shape_str(bx, x->ndim, x->shape),
                          oari_shape_str(bw, w->ndim, w->shape));
    if (check_dtypes(op, x, w, b)) return OAR_ERR_INVALID;
    for (int i = 0; i < 3; i++)
        if (st[i] < 1 || dil[i] < 1 || pad[i] < 0)
            return oari_error(OAR_ERR_INVALID,
                              "%s: stride (%lld, %lld, %lld) and dilation (%lld, %lld, %lld) "
                              "must be >= 1 and padding (%lld, %lld, %lld) >= 0",
                              op, (long long)st[0], (long long)st[1], (long long)st[2],
                              (long long)dil[0], (long long)dil[1], (long long)dil[2],
                              (long long)pad[0], (long long)pad[1], (long long)pad[2]);
    if (groups < 1)
        return oari_error(OAR_ERR_INVALID, "%s: groups must be >= 1, got %lld", op,
                          (long long)groups);
    const int64_t c = x->shape[1], lead = w->shape[0]; /* lead: O for conv, C for transposed */
    if (c % groups)
        return oari_error(OAR_ERR_INVALID,
                          "%s: groups %lld does not divide the %lld input channels of input %s",
                          op, (long long)groups, (long long)c,
                          oari_shape_str(bx, x->ndim, x->shape));
    if (!transposed) {
        if (lead % groups)
            return oari_error(OAR_ERR_INVALID,
                              "%s: groups %lld does not divide the %lld output channels of "
                              "weight %s",
                              op, (long long)groups, (long long)lead,
                              oari_shape_str(bw, w->ndim, w->shape));
        if (w->shape[1] * groups != c)
            return oari_error(OAR_ERR_INVALID,
                              "%s: input %s has %lld channels but weight %s expects %lld (%lld "
                              "per group x %lld groups)",
                              op, oari_shape_str(bx, x->ndim, x->shape), (long long)c,
                              oari_shape_str(bw, w->ndim, w->shape),
                              (long long)(w->shape[1] * groups), (long long)w->shape[1],
                              (long long)groups);
    } else if (lead != c) {
        return oari_error(OAR_ERR_INVALID,
                          "%s: input %s has %lld channels but weight %s expects %lld (weight is "
                          "[C, O/groups, kd, kh, kw])",
                          op, oari_shape_str(bx, x->ndim, x->shape), (long long)c,
                          oari_shape_str(bw, w->ndim, w->shape), (long long)lead);
    }
    const int64_t out_c = transposed ? w->shape[1] * groups : lead;
    if (b && (b->ndim != 1 || b->shape[0] != out_c)) {
        char bb[200];
        return oari_error(OAR_ERR_INVALID, "%s: bias %s must be [%lld] (one per output channel)",
                          op, oari_shape_str(bb, b->ndim, b->shape), (long long)out_c);
    }
    return 0;
}

/* iattr: stride3, padding3, dilation3, groups. */
static int infer_conv3d(oari_infer *c) {
    const int64_t *a = c->attrs->i;
    if (c->attrs->ni != 10) return oari_error(OAR_ERR_INVALID, "conv3d: expected 10 attributes");
    if (conv3d_check("conv3d", c->in, c->n_in, a, a + 3, a + 6, a[9], false))
        return OAR_ERR_INVALID;
    const oar_tensor *x = c->in[0], *w = c->in[1];
    c->out[0].dtype = x->dtype;
    c->out[0].ndim = 5;
    c->out[0].shape[0] = x->shape[0];
    c->out[0].shape[1] = w->shape[0];
    for (int i = 0; i < 3; i++) {
        const int64_t in = x->shape[2 + i] + 2 * a[3 + i], k = a[6 + i] * (w->shape[2 + i] - 1) + 1;
        if (in < k) {
            char bx[200], bw[200];
            return oari_error(OAR_ERR_INVALID,
                              "conv3d: kernel of %s (dilated %lld on spatial axis %d) is larger "
                              "than the padded input (%lld) of input %s",
                              oari_shape_str(bw, 5, w->shape), (long long)k, i, (long long)in,
                              oari_shape_str(bx, 5, x->shape));
        }
        c->out[0].shape[2 + i] = conv_out_size(x->shape[2 + i], w->shape[2 + i], a[i], a[3 + i],
                                               a[6 + i]);
    }
    return 0;
}

/* iattr: stride3, padding3, output_padding3, dilation3, groups. */
static int infer_conv_transpose3d(oari_infer *c) {
    const int64_t *a = c->attrs->i;
    const char *op = "conv_transpose3d";
    if (c->attrs->ni != 13) return oari_error(OAR_ERR_INVALID, "%s: expected 13 attributes", op);
    if (conv3d_check(op, c->in, c->n_in, a, a + 3, a + 9, a[12], true)) return OAR_ERR_INVALID;
    const oar_tensor *x = c->in[0], *w = c->in[1];
    const int64_t *opad = a + 6, *dil = a + 9;
    for (int i = 0; i < 3; i++)
        if (opad[i] < 0 || (opad[i] >= a[i] && opad[i] >= dil[i]))
            return oari_error(OAR_ERR_INVALID,
                              "%s: output_padding (%lld, %lld, %lld) must be >= 0 and smaller "
                              "than stride (%lld, %lld, %lld) or dilation (%lld, %lld, %lld)",
                              op, (long long)opad[0], (long long)opad[1], (long long)opad[2],
                              (long long)a[0], (long long)a[1], (long long)a[2],
                              (long long)dil[0], (long long)dil[1], (long long)dil[2]);
    c->out[0].dtype = x->dtype;
    c->out[0].ndim = 5;
    c->out[0].shape[0] = x->shape[0];
    c->out[0].shape[1] = w->shape[1] * a[12];
    for (int i = 0; i < 3; i++) {
        const int64_t o = (x->shape[2 + i] - 1) * a[i] - 2 * a[3 + i] +
                          dil[i] * (w->shape[2 + i] - 1) + opad[i] + 1;
        if (o < 1) {
            char bx[200];
            return oari_error(OAR_ERR_INVALID,
                              "%s: output size %lld on spatial axis %d of input %s is not "
                              "positive; reduce padding",
                              op, (long long)o, i, oari_shape_str(bx, 5, x->shape));
        }
        c->out[0].shape[2 + i] = o;
    }
    return 0;
}

/* iattr: weight shape5 (O, C/g, kd, kh, kw), stride3, padding3, dilation3,
 * groups. grad_out's spatial sizes may be smaller than the conv's (the
 * weight gradient of a conv_transpose3d with output_padding >= stride sees
 * only the outputs that conv maps). */
static int infer_conv3d_weight_grad(oari_infer *c) {
    const int64_t *a = c->attrs->i;
    const oar_tensor *x = c->in[0], *gy = c->in[1];
    char bx[200], bg[200];
    bool ok = c->attrs->ni == 15 && x->ndim == 5 && gy->ndim == 5 && a[14] >= 1 &&
              gy->shape[0] == x->shape[0] && gy->shape[1] == a[0] && a[0] % a[14] == 0 &&
              x->shape[1] == a[1] * a[14];
    for (int i = 0; ok && i < 3; i++) {
        const int64_t s = a[5 + i], p = a[8 + i], d = a[11 + i], k = a[2 + i];
        ok = s >= 1 && d >= 1 && p >= 0 && k >= 1 && x->shape[2 + i] + 2 * p >= d * (k - 1) + 1 &&
             gy->shape[2 + i] <= conv_out_size(x->shape[2 + i], k, s, p, d);
    }
    if (!ok)
        return oari_error(OAR_ERR_INVALID,
                          "conv3d_weight_grad: input %s and grad_out %s do not match the "
                          "weight's shape and the attributes",
                          oari_shape_str(bx, x->ndim, x->shape),
                          oari_shape_str(bg, gy->ndim, gy->shape));
    if (check_dtypes("conv3d_weight_grad", x, gy, NULL)) return OAR_ERR_INVALID;
    c->out[0].dtype = x->dtype;
    c->out[0].ndim = 5;
    for (int i = 0; i < 5; i++)
        c->out[0].shape[i] = a[i];
    return 0;
}

/* ---- gradients ---------------------------------------------------------------------- */

static oar_tensor *bias_grad(oar_tensor *gy) {
    int64_t dims[4] = {0, 2, 3, 4};
    return oar_sum(gy, 4, dims, false);
}

/* conv_transpose3d(gy, w) giving exactly the input size of a conv whose
 * output gradient is gy: the rows the conv's stride skipped at the end come
 * back as output_padding. */
static oar_tensor *conv_input_grad(oar_tensor *gy, oar_tensor *w, const int64_t *st,
                                   const int64_t *pad, const int64_t *dil, int64_t groups,
                                   const oari_meta *xm) {
    oari_attrs a = {.ni = 13};
    for (int i = 0; i < 3; i++) {
        a.i[i] = st[i];
        a.i[3 + i] = pad[i];
        a.i[6 + i] = xm->shape[2 + i] -
                     ((gy->shape[2 + i] - 1) * st[i] - 2 * pad[i] + dil[i] * (w->shape[2 + i] - 1) + 1);
        a.i[9 + i] = dil[i];
    }
    a.i[12] = groups;
    oar_tensor *in[3] = {gy, w, NULL};
    return oari_call(OARI_OP_conv_transpose3d, 3, in, &a);
}

static oar_tensor *weight_grad(oar_tensor *x, oar_tensor *gy, const oari_meta *wm,
                               const int64_t *st, const int64_t *pad, const int64_t *dil,
                               int64_t groups) {
    oari_attrs a = {.ni = 15};
    for (int i = 0; i < 5; i++)
        a.i[i] = wm->shape[i];
    for (int i = 0; i < 3; i++) {
        a.i[5 + i] = st[i];
        a.i[8 + i] = pad[i];
        a.i[11 + i] = dil[i];
    }
    a.i[14] = groups;
    return oari_call2(OARI_OP_conv3d_weight_grad, x, gy, &a);
}

/* conv3d(x, w) cut to the spatial sizes of want: with output_padding >=
 * stride, a conv_transpose3d's output maps back to more positions than its
 * input had. */
static oar_tensor *conv_to(oar_tensor *x, oar_tensor *w, const int64_t *st, const int64_t *pad,
                           const int64_t *dil, int64_t groups, const oari_meta *want) {
    oari_attrs a = {.ni = 10};
    for (int i = 0; i < 3; i++) {
        a.i[i] = st[i];
        a.i[3 + i] = pad[i];
        a.i[6 + i] = dil[i];
    }
    a.i[9] = groups;
    oar_tensor *in[3] = {x, w, NULL};
    oar_tensor *y = oari_call(OARI_OP_conv3d, 3, in, &a);
    for (int i = 0; y && i < 3; i++)
        if (y->shape[2 + i] > want->shape[2 + i]) y = oar_slice(y, 2 + i, 0, want->shape[2 + i], 1);
    return y;
}

static int grad_conv3d(oari_grad_ctx *g) {
    const int64_t *a = g->attrs->i;
    oar_tensor *gy = g->gout[0];
    if (g->needs[0] &&
        !(g->gin[0] = conv_input_grad(gy, g->in[1], a, a + 3, a + 6, a[9], &g->in_meta[0])))
        return oari_fail_status();
    if (g->needs[1] &&
        !(g->gin[1] = weight_grad(g->in[0], gy, &g->in_meta[1], a, a + 3, a + 6, a[9])))
        return oari_fail_status();
    if (g->n_in > 2 && g->needs[2] && !(g->gin[2] = bias_grad(gy))) return oari_fail_status();
    return 0;
}

/* conv_transpose3d is the adjoint of conv3d(., w): its input gradient is a
 * conv3d, its weight gradient that conv3d's with input and output swapped. */
static int grad_conv_transpose3d(oari_grad_ctx *g) {
    const int64_t *a = g->attrs->i;
    oar_tensor *gy = g->gout[0];
    if (g->needs[0] &&
        !(g->gin[0] = conv_to(gy, g->in[1], a, a + 3, a + 9, a[12], &g->in_meta[0])))
        return oari_fail_status();
    if (g->needs[1] &&
        !(g->gin[1] = weight_grad(gy, g->in[0], &g->in_meta[1], a, a + 3, a + 9, a[12])))
        return oari_fail_status();
    if (g->n_in > 2 && g->needs[2] && !(g->gin[2] = bias_grad(gy))) return oari_fail_status();
    return 0;
}

/* gw = W(x, gy) is bilinear: <ggw, W(x, gy)> = <conv3d(x, ggw), gy>. */
static int grad_conv3d_weight_grad(oari_grad_ctx *g) {
    const int64_t *a = g->attrs->i;
    oar_tensor *ggw = g->gout[0];
    if (g->needs[0] && !(g->gin[0] = conv_input_grad(g->in[1], ggw, a + 5, a + 8, a + 11, a[14],
                                                     &g->in_meta[0])))
        return oari_fail_status();
    if (g->needs[1] &&
        !(g->gin[1] = conv_to(g->in[0], ggw, a + 5, a + 8, a + 11, a[14], &g->in_meta[1])))
        return oari_fail_status();
    return 0;
}

const oari_op_def oari_def_conv3d = {
    .name = "conv3d",
    .n_in = 3,
    .n_out = 1,
    .fusion = OARI_FUSE_OPAQUE,
    .flags = OARI_F_OPTIONAL_IN,
    .saved = OARI_SAVE_IN(0) | OARI_SAVE_IN(1),
    .infer = infer_conv3d,
    .grad = grad_conv3d,
};
const oari_op_def oari_def_conv_transpose3d = {
    .name = "conv_transpose3d",
    .n_in = 3,
    .n_out = 1,
    .fusion = OARI_FUSE_OPAQUE,
    .flags = OARI_F_OPTIONAL_IN,
    .saved = OARI_SAVE_IN(0) | OARI_SAVE_IN(1),
    .infer = infer_conv_transpose3d,
    .grad = grad_conv_transpose3d,
};
const oari_op_def oari_def_conv3d_weight_grad = {
    .name = "conv3d_weight_grad",
    .n_in = 2,
    .n_out = 1,
    .fusion = OARI_FUSE_OPAQUE,
    .saved = OARI_SAVE_IN(0) | OARI_SAVE_IN(1),
    .infer = infer_conv3d_weight_grad,
    .grad = grad_conv3d_weight_grad,
};

/* ---- public functions --------------------------------------------------------------- */

/* Checks what the rule cannot: NULL arrays, an input rank the batch-of-one
 * path does not take, a NULL weight beside a good input. */
static bool bad_args(const char *op, const oar_tensor *x, const oar_tensor *w,
                     const int64_t *const *arrays, const char *const *names, int n) {
    for (int i = 0; i < n; i++)
        if (!arrays[i]) {
            oari_error(OAR_ERR_INVALID, "%s: %s is NULL", op, names[i]);
            return true;
        }
    if (x && x->ndim != 5 && x->ndim != 4) {
        char b[200];
        oari_error(OAR_ERR_INVALID,
                   "%s: expected a 5-D input [N, C, D, H, W] or 4-D [C, D, H, W], got %s", op,
                   oari_shape_str(b, x->ndim, x->shape));
        return true;
    }
    if (x && !w) {
        if (!oari_error_pending()) oari_error(OAR_ERR_INVALID, "%s: weight is NULL", op);
        return true;
    }
    return false;
}

/* Complex convolution (input, weight and bias of one complex dtype, as
 * torch): four real ones, y = (xr*wr - xi*wi + br) + i (xr*wi + xi*wr + bi),
 * all ops, so gradients follow the conjugate convention of every complex op.
 * conv is oar_conv3d or oar_conv_transpose3d with the attributes bound. */
typedef oar_tensor *(*real_conv_fn)(oar_tensor *x, oar_tensor *w, oar_tensor *b, const void *args);

static bool is_complex_conv(const oar_tensor *x, const oar_tensor *w) {
    return x && w && (oar_dtype_is_complex(x->dtype) || oar_dtype_is_complex(w->dtype));
}

static oar_tensor *complex_conv(const char *op, oar_tensor *x, oar_tensor *w, oar_tensor *bias,
                                real_conv_fn conv, const void *args) {
    const oar_tensor *odd = w->dtype != x->dtype ? w : bias && bias->dtype != x->dtype ? bias : NULL;
    if (odd) {
        oari_error(OAR_ERR_INVALID, "%s: %s dtype %s differs from the input's %s; cast it first", op,
                   odd == w ? "weight" : "bias", oar_dtype_name(odd->dtype),
                   oar_dtype_name(x->dtype));
        return NULL;
    }
    oar_tensor *xr = oar_real(x), *xi = oar_imag(x), *wr = oar_real(w), *wi = oar_imag(w);
    oar_tensor *br = bias ? oar_real(bias) : NULL, *bi = bias ? oar_imag(bias) : NULL;
    oar_tensor *re = oar_sub(conv(xr, wr, br, args), conv(xi, wi, NULL, args));
    oar_tensor *im = oar_add(conv(xr, wi, bi, args), conv(xi, wr, NULL, args));
    return oar_complex(re, im);
}

typedef struct conv3d_args {
    const int64_t *stride, *padding, *output_padding, *dilation; /* output_padding: transposed */
    int64_t groups;
} conv3d_args;
static oar_tensor *real_conv3d(oar_tensor *x, oar_tensor *w, oar_tensor *b, const void *args) {
    const conv3d_args *a = args;
    return oar_conv3d(x, w, b, a->stride, a->padding, a->dilation, a->groups);
}
static oar_tensor *real_conv_t3d(oar_tensor *x, oar_tensor *w, oar_tensor *b, const void *args) {
    const conv3d_args *a = args;
    return oar_conv_transpose3d(x, w, b, a->stride, a->padding, a->output_padding, a->dilation,
                                a->groups);
}

oar_tensor *oar_conv3d(oar_tensor *x, oar_tensor *w, oar_tensor *bias, const int64_t stride[3],
                       const int64_t padding[3], const int64_t dilation[3], int64_t groups) {
    const int64_t *arr[3] = {stride, padding, dilation};
    static const char *const names[3] = {"stride", "padding", "dilation"};
    if (bad_args("conv3d", x, w, arr, names, 3)) return NULL;
    if (x && x->ndim == 4) { /* unbatched [C, D, H, W]: a batch of one */
        oar_tensor *y = oar_conv3d(oar_unsqueeze(x, 0), w, bias, stride, padding, dilation, groups);
        return y ? oar_squeeze(y, 0) : NULL;
    }
    if (is_complex_conv(x, w))
        return complex_conv("conv3d", x, w, bias, real_conv3d,
                            &(conv3d_args){stride, padding, NULL, dilation, groups});
    oari_attrs a = {.ni = 10};
    for (int i = 0; i < 3; i++) {
        a.i[i] = stride[i];
        a.i[3 + i] = padding[i];
        a.i[6 + i] = dilation[i];
    }
    a.i[9] = groups;
    oar_tensor *in[3] = {x, w, bias};
    return oari_call(OARI_OP_conv3d, 3, in, &a);
}

oar_tensor *oar_conv_transpose3d(oar_tensor *x, oar_tensor *w, oar_tensor *bias,
                                 const int64_t stride[3], const int64_t padding[3],
                                 const int64_t output_padding[3], const int64_t dilation[3],
                                 int64_t groups) {
    const int64_t *arr[4] = {stride, padding, output_padding, dilation};
    static const char *const names[4] = {"stride", "padding", "output_padding", "dilation"};
    if (bad_args("conv_transpose3d", x, w, arr, names, 4)) return NULL;
    if (x && x->ndim == 4) {
        oar_tensor *y = oar_conv_transpose3d(oar_unsqueeze(x, 0), w, bias, stride, padding,
                                             output_padding, dilation, groups);
        return y ? oar_squeeze(y, 0) : NULL;
    }
    if (is_complex_conv(x, w))
        return complex_conv("conv_transpose3d", x, w, bias, real_conv_t3d,
                            &(conv3d_args){stride, padding, output_padding, dilation, groups});
    oari_attrs a = {.ni = 13};
    for (int i = 0; i < 3; i++) {
        a.i[i] = stride[i];
        a.i[3 + i] = padding[i];
        a.i[6 + i] = output_padding[i];
        a.i[9 + i] = dilation[i];
    }
    a.i[12] = groups;
    oar_tensor *in[3] = {x, w, bias};
    return oari_call(OARI_OP_conv_transpose3d, 3, in, &a);
}

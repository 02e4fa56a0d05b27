/* ONNX import, neural-network ops: matmul, convolution, pooling,
 * normalisation, softmax, dropout and the losses, mapped onto oar ops (1-D
 * convolution and pooling run as 2-D with a unit height, 3-D convolutions
 * on conv3d / conv_transpose3d; asymmetric pads become an explicit pad
 * before the op). */
#define OARI_ONNX_PROTO
#include "onnx_internal.h"
#include <math.h>
#include <string.h>


int oari_onnx_conv_matmul(oari_onnx_node *nd) {
    NEED(2);
    RESULT(oar_matmul(nd->in[0], nd->in[1]));
}

int oari_onnx_conv_gemm(oari_onnx_node *nd) {
    NEED(2);
    double alpha = oari_onnx_attr_f(nd, "alpha", 1.0), beta = oari_onnx_attr_f(nd, "beta", 1.0);
    if (oar_tensor_ndim(nd->in[0]) != 2 || oar_tensor_ndim(nd->in[1]) != 2)
        return oari_error(OAR_ERR_INVALID, "A and B must be 2-D (ranks %d, %d)", oar_tensor_ndim(nd->in[0]),
                          oar_tensor_ndim(nd->in[1]));
    oar_tensor *a = oari_onnx_attr_i(nd, "transA", 0) ? oar_transpose(nd->in[0], 0, 1) : nd->in[0];
    oar_tensor *b = oari_onnx_attr_i(nd, "transB", 0) ? oar_transpose(nd->in[1], 0, 1) : nd->in[1];
    oar_tensor *y = oar_matmul(a, b);
    if (alpha != 1.0) y = oar_mul_scalar(y, alpha);
    oar_tensor *c = nd->n_in > 2 ? nd->in[2] : NULL;
    if (c && beta != 0.0) y = oar_add(y, beta != 1.0 ? oar_mul_scalar(c, beta) : c);
    RESULT(y);
}

int oari_onnx_conv_einsum(oari_onnx_node *nd) {
    NEED(1);
    const Onnx__AttributeProto *a = oari_onnx_attr(nd, "equation");
    if (!a || !a->has_s || a->s.len >= 256) return oari_error(OAR_ERR_INVALID, "equation is missing or too long");
    char eq[256];
    size_t k = 0;
    for (size_t i = 0; i < a->s.len; i++)
        if (a->s.data[i] != ' ') eq[k++] = (char)a->s.data[i];
    eq[k] = 0;
    RESULT(oar_einsum(eq, nd->n_in, nd->in));
}

/* ---- convolution and pooling ---------------------------------------------------- */

/* The spatial parameters of a conv or pool node, always 2-D (a 1-D node has
 * a unit first dim). */
typedef struct {
    int ns;                 /* spatial dims of the node: 1 or 2 */
    int64_t k[2], stride[2], dil[2], pb[2], pe[2]; /* pads: begin, end */
} window;

/* The node's kernel, strides, dilations and pads over ns (1..3) spatial
 * dims, into arrays of ns. */
static int window_attrs(oari_onnx_node *nd, int ns, const int64_t *in_size, const int64_t *kernel, int64_t *k,
                        int64_t *stride, int64_t *dil, int64_t *pb, int64_t *pe) {
    int64_t p[6];
    int n;
    for (int i = 0; i < ns; i++) k[i] = kernel[i], stride[i] = dil[i] = 1, pb[i] = pe[i] = 0;
    if ((n = oari_onnx_attr_ints(nd, "strides", stride, ns)) >= 0 && n != ns) return oari_error(OAR_ERR_INVALID, "strides has %d entries for %d-D", n, ns);
    if (n < -1) return n;
    if ((n = oari_onnx_attr_ints(nd, "dilations", dil, ns)) >= 0 && n != ns) return oari_error(OAR_ERR_INVALID, "dilations has %d entries for %d-D", n, ns);
    if (n < -1) return n;
    for (int i = 0; i < ns; i++)
        if (k[i] < 1 || stride[i] < 1 || dil[i] < 1)
            return oari_error(OAR_ERR_INVALID, "kernel, strides and dilations must be >= 1");
    bool same_upper = oari_onnx_attr_s_is(nd, "auto_pad", "NOTSET", "SAME_UPPER");
    bool same_lower = oari_onnx_attr_s_is(nd, "auto_pad", "NOTSET", "SAME_LOWER");
    bool valid = oari_onnx_attr_s_is(nd, "auto_pad", "NOTSET", "VALID");
    if (same_upper || same_lower) {
        for (int i = 0; i < ns; i++) {
            int64_t in = in_size[i], st = stride[i];
            int64_t out = (in + st - 1) / st;
            int64_t tot = (out - 1) * st + (k[i] - 1) * dil[i] + 1 - in;
            if (tot < 0) tot = 0;
            pb[i] = same_upper ? tot / 2 : tot - tot / 2;
            pe[i] = tot - pb[i];
        }
    } else if (!valid) {
        if (!oari_onnx_attr_s_is(nd, "auto_pad", "NOTSET", "NOTSET"))
            return oari_error(OAR_ERR_INVALID, "unknown auto_pad");
        if ((n = oari_onnx_attr_ints(nd, "pads", p, 2 * ns)) >= 0 && n != 2 * ns)
            return oari_error(OAR_ERR_INVALID, "pads has %d entries for %d-D", n, ns);
        if (n < -1) return n;
        for (int i = 0; i < ns && n > 0; i++) {
            pb[i] = p[i];
            pe[i] = p[ns + i];
            if (p[i] < 0 || p[ns + i] < 0) return oari_error(OAR_ERR_UNSUPPORTED, "negative pads");
        }
    }
    return 0;
}

static int window_of(oari_onnx_node *nd, int ns, const int64_t *in_size, const int64_t *kernel, window *w) {
    if (ns < 1 || ns > 2) return oari_error(OAR_ERR_UNSUPPORTED, "%d-D %s: only 1-D and 2-D are supported", ns, nd->n->op_type);
    w->ns = ns;
    for (int i = 0; i < 2; i++) w->k[i] = w->stride[i] = w->dil[i] = 1, w->pb[i] = w->pe[i] = 0;
    int o = 2 - ns;
    return window_attrs(nd, ns, in_size, kernel, w->k + o, w->stride + o, w->dil + o, w->pb + o, w->pe + o);
}

/* x [N, C, L] as [N, C, 1, L]. */
static oar_tensor *to2d(oar_tensor *x, int ns) { return ns == 1 ? oar_unsqueeze(x, 2) : x; }
static oar_tensor *from2d(oar_tensor *y, int ns) { return ns == 1 && y ? oar_squeeze(y, 2) : y; }

/* x padded explicitly (value v) by w's pads; w's pads then zero. */
static oar_tensor *prepad(oar_tensor *x, window *w, double v) {
    int64_t pads[4] = {w->pb[1], w->pe[1], w->pb[0], w->pe[0]};
    for (int i = 0; i < 2; i++) w->pb[i] = w->pe[i] = 0;
    return oar_pad(x, 4, pads, OAR_PAD_CONSTANT, v);
}
static bool symmetric(const window *w) { return w->pb[0] == w->pe[0] && w->pb[1] == w->pe[1]; }

int oari_onnx_conv_conv(oari_onnx_node *nd) {
    NEED(2);
    oar_tensor *x = nd->in[0], *wt = nd->in[1], *b = nd->n_in > 2 ? nd->in[2] : NULL;
    int ns = oar_tensor_ndim(wt) - 2;
    if (oar_tensor_ndim(x) != ns + 2)
        return oari_error(OAR_ERR_INVALID, "X rank %d and W rank %d disagree", oar_tensor_ndim(x), ns + 2);
    int64_t group = oari_onnx_attr_i(nd, "group", 1);
    if (ns == 3) { /* native conv3d; asymmetric pads as an explicit Pad */
        int64_t k[3], st[3], dl[3], pb[3], pe[3];
        int e = window_attrs(nd, 3, oar_tensor_shape(x) + 2, oar_tensor_shape(wt) + 2, k, st, dl, pb, pe);
        if (e) return e;
        if (pb[0] != pe[0] || pb[1] != pe[1] || pb[2] != pe[2]) {
            int64_t pads[6] = {pb[2], pe[2], pb[1], pe[1], pb[0], pe[0]};
            x = oar_pad(x, 6, pads, OAR_PAD_CONSTANT, 0.0);
            memset(pb, 0, sizeof pb);
        }
        RESULT(oar_conv3d(x, wt, b, st, pb, dl, group));
    }
    int64_t ks[2];
    window w;
    if (ns >= 1 && ns <= 2) memcpy(ks, oar_tensor_shape(wt) + 2, (size_t)ns * sizeof *ks);
    int st = window_of(nd, ns, oar_tensor_shape(x) + 2, ks, &w);
    if (st) return st;
    oar_tensor *x2 = to2d(x, ns), *w2 = to2d(wt, ns);
    if (!symmetric(&w)) x2 = prepad(x2, &w, 0.0);
    RESULT(from2d(oar_conv2d(x2, w2, b, w.stride, w.pb, w.dil, group), ns));
}

/* 3-D ConvTranspose whose pads oar's symmetric padding and output_padding
 * (< stride or dilation) cannot say: the full output (no padding), grown
 * at the end by output padding op (zeros there) and cut to [pb, full + op
 * - pe) on each axis. */
static oar_tensor *conv_transpose3d_cropped(oar_tensor *x, oar_tensor *wt, oar_tensor *b, const int64_t *s,
                                            const int64_t *d, const int64_t *op, const int64_t *full,
                                            const int64_t *pb, const int64_t *pe, int64_t groups) {
    static const int64_t zero[3] = {0, 0, 0};
    oar_tensor *y = oar_conv_transpose3d(x, wt, NULL, s, zero, zero, d, groups);
    int64_t grow[6] = {0, op[2], 0, op[1], 0, op[0]}; /* full[i] includes op[i] */
    if (op[0] || op[1] || op[2]) y = oar_pad(y, 6, grow, OAR_PAD_CONSTANT, 0.0);
    for (int i = 0; i < 3 && y; i++)
        if (pb[i] || pe[i]) y = oar_slice(y, 2 + i, pb[i], full[i] - pe[i], 1);
    if (b && y) y = oar_add(y, oar_reshape(b, 4, (int64_t[]){-1, 1, 1, 1}));
    return y;
}

int oari_onnx_conv_conv_transpose(oari_onnx_node *nd) {
    NEED(2);
    oar_tensor *x = nd->in[0], *wt = nd->in[1], *b = nd->n_in > 2 ? nd->in[2] : NULL;
    int ns = oar_tensor_ndim(wt) - 2;
    if (ns < 1 || ns > 3) return oari_error(OAR_ERR_UNSUPPORTED, "%d-D ConvTranspose: only 1-D, 2-D and 3-D are supported", ns);
    if (oar_tensor_ndim(x) != ns + 2)
        return oari_error(OAR_ERR_INVALID, "X rank %d and W rank %d disagree", oar_tensor_ndim(x), ns + 2);
    int o = 3 - ns; /* dims 0..2: D, H, W; a 1-D or 2-D node uses the last ones */
    int64_t k[3] = {1, 1, 1}, s[3] = {1, 1, 1}, d[3] = {1, 1, 1}, pb[3] = {0}, pe[3] = {0}, op[3] = {0}, v[6];
    int64_t in[3] = {1, 1, 1};
    for (int i = 0; i < ns; i++) k[o + i] = oar_tensor_shape(wt)[2 + i], in[o + i] = oar_tensor_shape(x)[2 + i];
    int n;
    if ((n = oari_onnx_attr_ints(nd, "strides", v, 3)) == ns) memcpy(s + o, v, (size_t)ns * 8);
    else if (n != -1) return oari_error(OAR_ERR_INVALID, "bad strides");
    if ((n = oari_onnx_attr_ints(nd, "dilations", v, 3)) == ns) memcpy(d + o, v, (size_t)ns * 8);
    else if (n != -1) return oari_error(OAR_ERR_INVALID, "bad dilations");
    if ((n = oari_onnx_attr_ints(nd, "output_padding", v, 3)) == ns) memcpy(op + o, v, (size_t)ns * 8);
    else if (n != -1) return oari_error(OAR_ERR_INVALID, "bad output_padding");
    for (int i = 0; i < 3; i++)
        if (s[i] < 1 || d[i] < 1 || op[i] < 0) return oari_error(OAR_ERR_INVALID, "strides and dilations must be >= 1");
    int64_t full[3], want[3];
    for (int i = 0; i < 3; i++) full[i] = s[i] * (in[i] - 1) + op[i] + (k[i] - 1) * d[i] + 1;
    if ((n = oari_onnx_attr_ints(nd, "output_shape", v, 6)) >= 0) {
        if (n != ns) return oari_error(OAR_ERR_UNSUPPORTED, "output_shape with %d entries for %d-D", n, ns);
        for (int i = 0; i < 3; i++) want[i] = i < o ? 1 : v[i - o];
        bool lower = oari_onnx_attr_s_is(nd, "auto_pad", "NOTSET", "SAME_LOWER");
        for (int i = 0; i < 3; i++) {
            int64_t tot = full[i] - want[i];
            if (tot < 0) { /* more than the full output: extra output padding */
                op[i] += -tot;
                full[i] += -tot;
                tot = 0;
            }
            pb[i] = lower ? tot - tot / 2 : tot / 2;
            pe[i] = tot - pb[i];
        }
    } else if (oari_onnx_attr_s_is(nd, "auto_pad", "NOTSET", "SAME_UPPER") ||
               oari_onnx_attr_s_is(nd, "auto_pad", "NOTSET", "SAME_LOWER")) {
        bool lower = oari_onnx_attr_s_is(nd, "auto_pad", "NOTSET", "SAME_LOWER");
        for (int i = 0; i < 3; i++) {
            int64_t tot = full[i] - in[i] * s[i];
            if (tot < 0) tot = 0;
            pb[i] = lower ? tot - tot / 2 : tot / 2;
            pe[i] = tot - pb[i];
        }
    } else if ((n = oari_onnx_attr_ints(nd, "pads", v, 6)) >= 0) {
        if (n != 2 * ns) return oari_error(OAR_ERR_INVALID, "pads has %d entries for %d-D", n, ns);
        for (int i = 0; i < ns; i++) pb[o + i] = v[i], pe[o + i] = v[ns + i];
    } else if (n < -1) {
        return n;
    }
    /* oar pads both sides by pb; a larger end pad crops after, a smaller
     * one is output padding */
    int64_t pad[3], opad[3], crop[3];
    for (int i = 0; i < 3; i++) {
        pad[i] = pb[i];
        int64_t extra = pb[i] - pe[i]; /* > 0: the end is padded less */
        opad[i] = op[i] + (extra > 0 ? extra : 0);
        crop[i] = extra < 0 ? -extra : 0;
    }
    int64_t groups = oari_onnx_attr_i(nd, "group", 1);
    if (ns == 3) {
        bool direct = true;
        for (int i = 0; i < 3; i++) {
            if (pb[i] < 0 || pe[i] < 0 || pb[i] + pe[i] >= full[i])
                return oari_error(OAR_ERR_INVALID, "pads %lld, %lld on axis %d for a full output of %lld",
                                  (long long)pb[i], (long long)pe[i], i, (long long)full[i]);
            direct = direct && pb[i] == pe[i] && (op[i] < s[i] || op[i] < d[i]);
        }
        if (direct) RESULT(oar_conv_transpose3d(x, wt, b, s, pb, op, d, groups));
        RESULT(conv_transpose3d_cropped(x, wt, b, s, d, op, full, pb, pe, groups));
    }
    oar_tensor *y = oar_conv_transpose2d(to2d(x, ns), to2d(wt, ns), b, s + 1, pad + 1, opad + 1, d + 1, groups);
    for (int i = 1; i < 3 && y; i++)
        if (crop[i]) y = oar_slice(y, 1 + i, 0, oar_tensor_shape(y)[1 + i] - crop[i], 1);
    RESULT(from2d(y, ns));
}

/* MaxPool or AveragePool of 4-D x2 over window w (values only). */
static oar_tensor *pool_core(oari_onnx_node *nd, oar_tensor *x2, window w, bool ceil) {
    bool big = w.pb[0] > w.k[0] / 2 || w.pb[1] > w.k[1] / 2;
    if (OP_IS("MaxPool")) {
        if (!symmetric(&w) || big) x2 = prepad(x2, &w, -INFINITY);
        return oar_max_pool2d(x2, w.k, w.stride, w.pb, w.dil, ceil, NULL);
    }
    if (w.dil[0] != 1 || w.dil[1] != 1) return oari_error(OAR_ERR_UNSUPPORTED, "dilated AveragePool"), NULL;
    bool incl = oari_onnx_attr_i(nd, "count_include_pad", 0) != 0;
    if (symmetric(&w) && !big) return oar_avg_pool2d(x2, w.k, w.stride, w.pb, ceil, incl);
    window wm = w;
    oar_tensor *xp = prepad(x2, &w, 0.0);
    oar_tensor *y = oar_avg_pool2d(xp, w.k, w.stride, w.pb, ceil, true);
    if (!incl) { /* the mean over the real elements: avg(x padded) / avg(mask padded) */
        const int64_t *s = oar_tensor_shape(x2);
        oar_tensor *m = prepad(oar_ones(oar_tensor_dtype(x2), 4, (int64_t[]){1, 1, s[2], s[3]}), &wm, 0.0);
        y = oar_div(y, oar_avg_pool2d(m, w.k, w.stride, w.pb, ceil, true));
    }
    return y;
}

/* 3-D pooling as two passes (max and the mean over a box, padding
 * excluded or not, are separable): over (H, W) on [N, C*D, H, W], then
 * over D on [N, C*H'*W', 1, D]. */
static int pool3d(oari_onnx_node *nd, oar_tensor *x, const int64_t *ks, bool ceil) {
    if (nd->n_out > 1 && nd->n->output[1][0]) return oari_error(OAR_ERR_UNSUPPORTED, "Indices of 3-D MaxPool");
    int64_t k[3], st[3], dl[3], pb[3], pe[3];
    const int64_t *xs = oar_tensor_shape(x);
    int e = window_attrs(nd, 3, xs + 2, ks, k, st, dl, pb, pe);
    if (e) return e;
    window hw = {.ns = 2, .k = {k[1], k[2]}, .stride = {st[1], st[2]}, .dil = {dl[1], dl[2]},
                 .pb = {pb[1], pb[2]}, .pe = {pe[1], pe[2]}};
    window d = {.ns = 1, .k = {1, k[0]}, .stride = {1, st[0]}, .dil = {1, dl[0]}, .pb = {0, pb[0]}, .pe = {0, pe[0]}};
    int64_t N = xs[0], C = xs[1], D = xs[2];
    oar_tensor *y = pool_core(nd, oar_reshape(x, 4, (int64_t[]){N, C * D, xs[3], xs[4]}), hw, ceil);
    if (!y) return OAR_ERR_INVALID;
    int64_t H = oar_tensor_shape(y)[2], W = oar_tensor_shape(y)[3];
    y = oar_permute(oar_reshape(y, 4, (int64_t[]){N, C, D, H * W}), (int64_t[]){0, 1, 3, 2});
    y = pool_core(nd, oar_reshape(y, 4, (int64_t[]){N, C * H * W, 1, D}), d, ceil);
    if (!y) return OAR_ERR_INVALID;
    int64_t D2 = oar_tensor_shape(y)[3];
    y = oar_permute(oar_reshape(y, 5, (int64_t[]){N, C, H, W, D2}), (int64_t[]){0, 1, 4, 2, 3});
    RESULT(oar_contiguous(y));
}

int oari_onnx_conv_pool(oari_onnx_node *nd) {
    NEED(1);
    oar_tensor *x = nd->in[0];
    int ns = oar_tensor_ndim(x) - 2;
    int64_t ks[3];
    int n = oari_onnx_attr_ints(nd, "kernel_shape", ks, 3);
    if (n == -1) return oari_error(OAR_ERR_INVALID, "kernel_shape is required");
    if (n < -1) return oari_error(OAR_ERR_UNSUPPORTED, "%zu-D pooling: only 1-D, 2-D and 3-D are supported",
                                  oari_onnx_attr(nd, "kernel_shape")->n_ints);
    if (n != ns) return oari_error(OAR_ERR_INVALID, "kernel_shape has %d entries for input rank %d", n, ns + 2);
    bool col_major = oari_onnx_attr_i(nd, "storage_order", 0) != 0;
    bool ceil = oari_onnx_attr_i(nd, "ceil_mode", 0) != 0;
    oar_dtype dt = oar_tensor_dtype(x);
    if (OP_IS("AveragePool") && !oar_dtype_is_float(dt))
        return oari_error(OAR_ERR_UNSUPPORTED, "AveragePool of %s", oar_dtype_name(dt));
    if (!oar_dtype_is_float(dt)) x = oar_cast(x, OAR_F32); /* integer pools: exact in f32 up to 2^24 */
    if (ns == 3) {
        int st = pool3d(nd, x, ks, ceil);
        if (!st && nd->out[0]) nd->out[0] = oar_cast(nd->out[0], dt);
        return st ? st : nd->out[0] ? 0 : OAR_ERR_INVALID;
    }
    window w;
    int st = window_of(nd, ns, oar_tensor_shape(x) + 2, ks, &w);
    if (st) return st;
    oar_tensor *x2 = to2d(x, ns);
    bool big = w.pb[0] > w.k[0] / 2 || w.pb[1] > w.k[1] / 2;
    if (OP_IS("MaxPool") && nd->n_out > 1 && nd->n->output[1][0]) { /* with Indices */
        if (!symmetric(&w) || big) return oari_error(OAR_ERR_UNSUPPORTED, "Indices with asymmetric pads");
        oar_tensor *idx = NULL;
        oar_tensor *y = oar_max_pool2d(x2, w.k, w.stride, w.pb, w.dil, ceil, &idx);
        if (y) { /* oar's indices count within each plane; ONNX's over the tensor */
            const int64_t *s = oar_tensor_shape(x2);
            oar_tensor *base = oar_reshape(oar_arange(0, (double)(s[0] * s[1]), 1, OAR_I64), 4,
                                           (int64_t[]){s[0], s[1], 1, 1});
            if (col_major) { /* h * W + w -> w * H + h */
                oar_tensor *W = oari_onnx_scalar((double)s[3], OAR_I64);
                idx = oar_add(oar_mul_scalar(oar_remainder(idx, W), (double)s[2]), oar_floor_div(idx, W));
            }
            nd->out[1] = from2d(oar_add(idx, oar_mul_scalar(base, (double)(s[2] * s[3]))), ns);
            if (!nd->out[1]) return OAR_ERR_INVALID;
        }
        RESULT(from2d(oar_cast(y, dt), ns));
    }
    oar_tensor *y = pool_core(nd, x2, w, ceil);
    RESULT(from2d(y ? oar_cast(y, dt) : NULL, ns));
}

int oari_onnx_conv_global_pool(oari_onnx_node *nd) {
    NEED(1);
    int r = oar_tensor_ndim(nd->in[0]);
    if (r < 3) return oari_error(OAR_ERR_INVALID, "input rank %d < 3", r);
    int64_t dims[OAR_MAX_DIMS];
    for (int d = 2; d < r; d++) dims[d - 2] = d;
    RESULT(OP_IS("GlobalMaxPool") ? oar_amax(nd->in[0], r - 2, dims, true) : oar_mean(nd->in[0], r - 2, dims, true));
}

/* ---- normalisation ------------------------------------------------------------------ */

/* v [C] shaped to broadcast against [N, C, ...] of rank r. */
static oar_tensor *per_channel(oar_tensor *v, int r) {
    int64_t s[OAR_MAX_DIMS];
    for (int d = 0; d < r; d++) s[d] = 1;
    s[1] = oar_tensor_numel(v);
    return oar_reshape(v, r, s);
}

int oari_onnx_conv_batch_norm(oari_onnx_node *nd) {
    NEED(5);
    oar_tensor *x = nd->in[0], *scale = nd->in[1], *b = nd->in[2], *mean = nd->in[3], *var = nd->in[4];
    double eps = oari_onnx_attr_f(nd, "epsilon", 1e-5), mom = oari_onnx_attr_f(nd, "momentum", 0.9);
    bool training = oari_onnx_attr_i(nd, "training_mode", 0) != 0;
    if (oar_tensor_ndim(x) < 2) return oari_error(OAR_ERR_INVALID, "X rank %d < 2", oar_tensor_ndim(x));
    if (!training) {
        for (int j = 1; j < nd->n_out; j++)
            if (nd->n->output[j][0]) return oari_error(OAR_ERR_UNSUPPORTED, "output %d outside training mode", j);
        RESULT(oar_batch_norm(x, mean, var, scale, b, false, 0.1, eps));
    }
    /* training: batch statistics (population variance); running stats out */
    int r = oar_tensor_ndim(x);
    int64_t dims[OAR_MAX_DIMS];
    int k = 0;
    for (int d = 0; d < r; d++)
        if (d != 1) dims[k++] = d;
    oar_tensor *bm = oar_mean(x, k, dims, false), *bv = oar_var(x, k, dims, 0.0, false);
    oar_tensor *y = oar_div(oar_sub(x, per_channel(bm, r)), oar_sqrt(oar_add_scalar(per_channel(bv, r), eps)));
    y = oar_add(oar_mul(y, per_channel(scale, r)), per_channel(b, r));
    if (nd->n_out > 1) nd->out[1] = oar_add(oar_mul_scalar(mean, mom), oar_mul_scalar(bm, 1 - mom));
    if (nd->n_out > 2) nd->out[2] = oar_add(oar_mul_scalar(var, mom), oar_mul_scalar(bv, 1 - mom));
    if (nd->n_out > 3) return oari_error(OAR_ERR_UNSUPPORTED, "%d outputs (at most 3)", nd->n_out);
    RESULT(y);
}

int oari_onnx_conv_instance_norm(oari_onnx_node *nd) {
    NEED(3);
    oar_tensor *x = nd->in[0];
    if (oar_tensor_ndim(x) < 3) return oari_error(OAR_ERR_INVALID, "input rank %d < 3", oar_tensor_ndim(x));
    RESULT(oar_group_norm(x, oar_tensor_shape(x)[1], nd->in[1], nd->in[2], oari_onnx_attr_f(nd, "epsilon", 1e-5)));
}

int oari_onnx_conv_layer_norm(oari_onnx_node *nd) {
    NEED(2);
    oar_tensor *x = nd->in[0], *scale = nd->in[1], *b = nd->n_in > 2 ? nd->in[2] : NULL;
    int r = oar_tensor_ndim(x);
    int64_t axis;
    int st = oari_onnx_axis(oari_onnx_attr_i(nd, "axis", -1), r, false, &axis);
    if (st) return st;
    double eps = oari_onnx_attr_f(nd, "epsilon", 1e-5);
    int k = r - (int)axis;
    const int64_t *xs = oar_tensor_shape(x);
    /* scale and bias broadcast to the normalised shape */
    if (scale) scale = oar_expand(scale, k, xs + axis);
    if (b) b = oar_expand(b, k, xs + axis);
    oar_tensor *y = oar_layer_norm(x, k, scale ? oar_contiguous(scale) : NULL, b ? oar_contiguous(b) : NULL, eps);
    bool want_stats = (nd->n_out > 1 && nd->n->output[1][0]) || (nd->n_out > 2 && nd->n->output[2][0]);
    if (want_stats) {
        int64_t dims[OAR_MAX_DIMS];
        for (int d = 0; d < k; d++) dims[d] = axis + d;
        nd->out[1] = oar_mean(x, k, dims, true);
        if (nd->n_out > 2) nd->out[2] = oar_rsqrt(oar_add_scalar(oar_var(x, k, dims, 0.0, true), eps));
    }
    RESULT(y);
}

int oari_onnx_conv_lrn(oari_onnx_node *nd) {
    NEED(1);
    oar_tensor *x = nd->in[0];
    int r = oar_tensor_ndim(x);
    int64_t size = oari_onnx_attr_i(nd, "size", 0);
    if (r < 3 || size < 1) return oari_error(OAR_ERR_INVALID, "rank %d, size %lld", r, (long long)size);
    double alpha = oari_onnx_attr_f(nd, "alpha", 1e-4), beta = oari_onnx_attr_f(nd, "beta", 0.75);
    double bias = oari_onnx_attr_f(nd, "bias", 1.0);
    int64_t pads[2 * OAR_MAX_DIMS] = {0};
    pads[2 * (r - 2)] = (size - 1) / 2;     /* dim 1, before */
    pads[2 * (r - 2) + 1] = size / 2;       /* after */
    oar_tensor *sq = oar_pad(oar_square(x), 2 * (r - 1), pads, OAR_PAD_CONSTANT, 0.0), *sum = NULL;
    int64_t C = oar_tensor_shape(x)[1];
    for (int64_t i = 0; i < size; i++) {
        oar_tensor *s = oar_slice(sq, 1, i, i + C, 1);
        sum = sum ? oar_add(sum, s) : s;
    }
    oar_tensor *den = oar_pow_scalar(oar_add_scalar(oar_mul_scalar(sum, alpha / (double)size), bias), beta);
    RESULT(oar_div(x, den));
}

int oari_onnx_conv_mvn(oari_onnx_node *nd) {
    NEED(1);
    oar_tensor *x = nd->in[0];
    int64_t axes[OAR_MAX_DIMS] = {0, 2, 3};
    int k = oari_onnx_attr_ints(nd, "axes", axes, OAR_MAX_DIMS);
    if (k < -1) return k;
    if (k == -1) k = 3;
    for (int i = 0; i < k; i++) {
        int st = oari_onnx_axis(axes[i], oar_tensor_ndim(x), false, &axes[i]);
        if (st) return st;
    }
    oar_tensor *c = oar_sub(x, oar_mean(x, k, axes, true));
    RESULT(oar_div(c, oar_add_scalar(oar_sqrt(oar_mean(oar_square(c), k, axes, true)), 1e-9)));
}

/* ---- softmax family ------------------------------------------------------------------- */

static oar_tensor *hardmax_dim(oar_tensor *x, int dim) {
    int r = oar_tensor_ndim(x);
    int64_t n = oar_tensor_shape(x)[dim], s[OAR_MAX_DIMS];
    for (int d = 0; d < r; d++) s[d] = d == dim ? n : 1;
    oar_tensor *pos = oar_reshape(oar_arange(0, (double)n, 1, OAR_I64), r, s);
    return oar_cast(oar_eq(pos, oar_argmax(x, dim, true)), oar_tensor_dtype(x));
}

static oar_tensor *softmax_kind(oari_onnx_node *nd, oar_tensor *x, int dim) {
    if (OP_IS("Softmax")) return oar_softmax(x, dim);
    if (OP_IS("LogSoftmax")) return oar_log_softmax(x, dim);
    return hardmax_dim(x, dim);
}

/* opset < 13: over the 2-D flattening at axis (default 1) */
int oari_onnx_conv_softmax_old(oari_onnx_node *nd) {
    NEED(1);
    oar_tensor *x = nd->in[0];
    oar_tensor *f = oari_onnx_flatten2d(x, oari_onnx_attr_i(nd, "axis", 1));
    oar_tensor *s = f ? softmax_kind(nd, f, 1) : NULL;
    RESULT(s ? oar_reshape(s, oar_tensor_ndim(x), oar_tensor_shape(x)) : NULL);
}

int oari_onnx_conv_softmax(oari_onnx_node *nd) {
    NEED(1);
    int64_t axis;
    int st = oari_onnx_axis(oari_onnx_attr_i(nd, "axis", -1), oar_tensor_ndim(nd->in[0]), false, &axis);
    if (st) return st;
    RESULT(softmax_kind(nd, nd->in[0], (int)axis));
}

/* NumPy's legacy generator (MT19937 seeded by init_genrand, random_sample
 * from two draws: 53 bits): np.random.seed(seed); np.random.uniform(0, 1, n)
 * into u[0..n-1]. */
static void numpy_uniform(uint32_t seed, int64_t n, double *u) {
    uint32_t mt[624];
    int i = 624;
    mt[0] = seed;
    for (int k = 1; k < 624; k++) mt[k] = 1812433253u * (mt[k - 1] ^ (mt[k - 1] >> 30)) + (uint32_t)k;
    for (int64_t j = 0; j < n; j++) {
        uint32_t w[2];
        for (int h = 0; h < 2; h++) {
            if (i >= 624) { /* the next 624 words */
                for (int k = 0; k < 624; k++) {
                    uint32_t y = (mt[k] & 0x80000000u) | (mt[(k + 1) % 624] & 0x7fffffffu);
                    mt[k] = mt[(k + 397) % 624] ^ (y >> 1) ^ (y & 1 ? 0x9908b0dfu : 0);
                }
                i = 0;
            }
            uint32_t y = mt[i++];
            y ^= y >> 11;
            y ^= (y << 7) & 0x9d2c5680u;
            y ^= (y << 15) & 0xefc60000u;
            w[h] = y ^ (y >> 18);
        }
        u[j] = ((w[0] >> 5) * 67108864.0 + (w[1] >> 6)) / 9007199254740992.0;
    }
}

/* Training mode with ratio > 0: y = x * mask / (1 - ratio), mask = u >= ratio.
 * With a seed attribute and a static shape the mask is NumPy's for that
 * seed (ONNX's reference), drawn at import: the same mask every run; else
 * oar's generator draws a new one each run (a random node). */
static int dropout_train(oari_onnx_node *nd, oar_tensor *x, double ratio) {
    if (!(ratio >= 0 && ratio < 1)) return oari_error(OAR_ERR_INVALID, "ratio %g outside [0, 1)", ratio);
    oar_tensor *mask;
    const int64_t *shape = oar_tensor_shape(x);
    int r = oar_tensor_ndim(x);
    if (oari_onnx_attr(nd, "seed") && (nd->static_shapes || !oari_onnx_dynamic_shape(r, shape))) {
        int64_t n = oar_tensor_numel(x);
        double *u = oari_malloc((size_t)(n ? n : 1) * sizeof *u);
        if (!u) return oari_fail_status();
        numpy_uniform((uint32_t)oari_onnx_attr_i(nd, "seed", 0), n, u);
        oar_tensor *ut = oar_tensor_from_data(u, OAR_F64, r, shape);
        oari_free(u, (size_t)(n ? n : 1) * sizeof *u);
        mask = oar_ge(ut, oari_onnx_scalar(ratio, OAR_F64));
    } else {
        /* bernoulli of a traced probability: a random node, drawn again each run */
        oar_tensor *p = oari_onnx_traced(oari_onnx_scalar(1 - ratio, OAR_F32));
        mask = p ? oar_cast(oar_bernoulli(oar_expand(p, r, shape)), OAR_BOOL) : NULL;
    }
    if (nd->n_out > 1 && nd->n->output[1][0]) nd->out[1] = mask;
    oar_dtype dt = oar_tensor_dtype(x);
    RESULT(oar_mul(oar_mul(x, oar_cast(mask, dt)), oari_onnx_scalar(1 / (1 - ratio), dt)));
}

int oari_onnx_conv_dropout(oari_onnx_node *nd) {
    NEED(1);
    oar_tensor *x = nd->in[0];
    bool training = false;
    double ratio = nd->opset >= 12 ? 0.5 : oari_onnx_attr_f(nd, "ratio", 0.5);
    if (nd->opset >= 12 && nd->n_in > 1 && nd->in[1]) {
        int st = oari_onnx_input_double(nd, 1, &ratio);
        if (st) return st;
    }
    if (nd->opset >= 12 && nd->n_in > 2 && nd->in[2]) {
        double t;
        int st = oari_onnx_input_double(nd, 2, &t);
        if (st) return st;
        training = t != 0;
    }
    if (training && ratio != 0) return dropout_train(nd, x, ratio);
    if (nd->n_out > 1 && nd->n->output[1][0]) nd->out[1] = oar_ones_like(oar_cast(x, OAR_BOOL));
    RESULT(oar_clone(x));
}

/* ---- losses ------------------------------------------------------------------------------- */

/* -logp[n, t[n, ...], ...] weighted; reduction none / sum / mean as ONNX
 * (mean: divided by the sum of the weights of the targets not ignored). */
static oar_tensor *nll(oari_onnx_node *nd, oar_tensor *logp, oar_tensor *t, oar_tensor *w) {
    bool has_ii = oari_onnx_attr(nd, "ignore_index") != NULL;
    int64_t ii = oari_onnx_attr_i(nd, "ignore_index", 0);
    oar_dtype dt = oar_tensor_dtype(logp);
    t = oar_cast(t, OAR_I64);
    oar_tensor *mask = has_ii ? oar_ne(t, oari_onnx_scalar((double)ii, OAR_I64)) : NULL;
    oar_tensor *ts = mask ? oar_where(mask, t, oari_onnx_scalar(0, OAR_I64)) : t;
    oar_tensor *picked = oar_squeeze(oar_gather(logp, 1, oar_unsqueeze(ts, 1)), 1);
    oar_tensor *wt = NULL;
    if (w) {
        int r = oar_tensor_ndim(ts);
        oar_tensor *flat = oar_reshape(ts, 1, (int64_t[]){-1});
        wt = ts ? oar_reshape(oar_index_select(w, 0, flat), r, oar_tensor_shape(ts)) : NULL;
    }
    if (mask) wt = wt ? oar_mul(wt, oar_cast(mask, dt)) : oar_cast(mask, dt);
    oar_tensor *loss = oar_neg(wt ? oar_mul(picked, wt) : picked);
    if (oari_onnx_attr_s_is(nd, "reduction", "mean", "none")) return loss;
    if (oari_onnx_attr_s_is(nd, "reduction", "mean", "sum")) return oar_sum(loss, 0, NULL, false);
    if (!oari_onnx_attr_s_is(nd, "reduction", "mean", "mean")) {
        oari_error(OAR_ERR_INVALID, "unknown reduction");
        return NULL;
    }
    if (!wt) return oar_mean(loss, 0, NULL, false);
    return oar_div(oar_sum(loss, 0, NULL, false), oar_sum(wt, 0, NULL, false));
}

int oari_onnx_conv_nll_loss(oari_onnx_node *nd) {
    NEED(2);
    RESULT(nll(nd, nd->in[0], nd->in[1], nd->n_in > 2 ? nd->in[2] : NULL));
}

int oari_onnx_conv_sce_loss(oari_onnx_node *nd) {
    NEED(2);
    if (oar_tensor_ndim(nd->in[0]) < 2) return oari_error(OAR_ERR_INVALID, "scores rank < 2");
    oar_tensor *logp = oar_log_softmax(nd->in[0], 1);
    if (nd->n_out > 1 && nd->n->output[1][0]) nd->out[1] = logp;
    RESULT(nll(nd, logp, nd->in[1], nd->n_in > 2 ? nd->in[2] : NULL));
}

/* ---- Det (by cofactors: matrices up to 3x3) ------------------------------------------------ */

int oari_onnx_conv_det(oari_onnx_node *nd) {
    NEED(1);
    oar_tensor *x = nd->in[0];
    int r = oar_tensor_ndim(x);
    if (r < 2 || oar_tensor_shape(x)[r - 1] != oar_tensor_shape(x)[r - 2])
        return oari_error(OAR_ERR_INVALID, "needs square matrices in the last two dims");
    int64_t n = oar_tensor_shape(x)[r - 1];
    if (n > 3) return oari_error(OAR_ERR_UNSUPPORTED, "%lldx%lld matrices are not supported (up to 3x3)", (long long)n, (long long)n);
    oar_tensor *e[3][3];
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++)
            e[i][j] = oar_squeeze(oar_squeeze(oar_slice(oar_slice(x, r - 2, i, i + 1, 1), r - 1, j, j + 1, 1), r - 1), r - 2);
    if (n == 1) RESULT(oar_clone(e[0][0]));
    if (n == 2) RESULT(oar_sub(oar_mul(e[0][0], e[1][1]), oar_mul(e[0][1], e[1][0])));
    oar_tensor *d = NULL;
    for (int j = 0; j < 3; j++) { /* expansion along the first row */
        oar_tensor *minor = oar_sub(oar_mul(e[1][(j + 1) % 3], e[2][(j + 2) % 3]), oar_mul(e[1][(j + 2) % 3], e[2][(j + 1) % 3]));
        oar_tensor *t = oar_mul(e[0][j], minor);
        d = d ? oar_add(d, t) : t;
    }
    RESULT(d);
}

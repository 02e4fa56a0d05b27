/* ONNX import, N-d indexing: GatherND, ScatterND, ReverseSequence and
 * MaxUnpool, as linear indices into a flattened tensor (built with oar
 * ops, so the indices may be computed at run time) and one index_select
 * or scatter. */
#define OARI_ONNX_PROTO
#include "onnx_internal.h"
#include <string.h>


static int64_t prod(const int64_t *s, int from, int to) {
    int64_t p = 1;
    for (int d = from; d < to; d++) p *= s[d];
    return p;
}

/* The linear index into data's dims b..b+k-1 (batch dims 0..b-1 folded in
 * first) of each index tuple: [idx.shape[:-1]], i64. */
static oar_tensor *linear_index(oar_tensor *data, oar_tensor *idx, int b) {
    const int64_t *ds = oar_tensor_shape(data), *is = oar_tensor_shape(idx);
    int q = oar_tensor_ndim(idx);
    int64_t k = is[q - 1];
    oar_tensor *lin = NULL, *ix = oar_cast(idx, OAR_I64), *zero = oari_onnx_scalar(0, OAR_I64);
    for (int64_t j = 0; j < k; j++) {
        int64_t n = ds[b + j];
        oar_tensor *c = oar_squeeze(oar_slice(ix, q - 1, j, j + 1, 1), q - 1);
        c = oar_where(oar_lt(c, zero), oar_add_scalar(c, (double)n), c);
        c = oar_mul_scalar(c, (double)prod(ds, b + (int)j + 1, b + (int)k));
        lin = lin ? oar_add(lin, c) : c;
    }
    if (!lin) lin = oar_sum(oar_mul_scalar(ix, 0), 1, (int64_t[]){q - 1}, false); /* k = 0 */
    if (b > 0) {
        int64_t s[OAR_MAX_DIMS];
        for (int d = 0; d < q - 1; d++) s[d] = d < b ? is[d] : 1;
        oar_tensor *off = oar_reshape(oar_arange(0, (double)prod(ds, 0, b), 1, OAR_I64), q - 1, s);
        lin = oar_add(lin, oar_mul_scalar(off, (double)prod(ds, b, b + (int)k)));
    }
    return lin;
}

int oari_onnx_conv_gather_nd(oari_onnx_node *nd) {
    NEED(2);
    oar_tensor *data = nd->in[0], *idx = nd->in[1];
    int r = oar_tensor_ndim(data), q = oar_tensor_ndim(idx);
    int64_t b = oari_onnx_attr_i(nd, "batch_dims", 0);
    if (q < 1 || b < 0 || b >= q || b >= r) return oari_error(OAR_ERR_INVALID, "ranks %d, %d with batch_dims %lld", r, q, (long long)b);
    int64_t k = oar_tensor_shape(idx)[q - 1];
    if (b + k > r) return oari_error(OAR_ERR_INVALID, "index tuples of %lld past rank %d", (long long)k, r);
    const int64_t *ds = oar_tensor_shape(data);
    int64_t flat[OAR_MAX_DIMS], out[2 * OAR_MAX_DIMS];
    int nf = 0, no = 0;
    flat[nf++] = prod(ds, 0, (int)(b + k));
    for (int d = (int)(b + k); d < r; d++) flat[nf++] = ds[d];
    for (int d = 0; d < q - 1; d++) out[no++] = oar_tensor_shape(idx)[d];
    for (int d = (int)(b + k); d < r; d++) out[no++] = ds[d];
    if (no > OAR_MAX_DIMS) return oari_error(OAR_ERR_UNSUPPORTED, "output rank %d", no);
    oar_tensor *lin = oar_reshape(linear_index(data, idx, (int)b), 1, (int64_t[]){-1});
    nd->out[0] = oar_reshape(oar_index_select(oar_reshape(data, nf, flat), 0, lin), no, out);
    return nd->out[0] ? 0 : OAR_ERR_INVALID;
}

int oari_onnx_conv_scatter_nd(oari_onnx_node *nd) {
    NEED(3);
    oar_tensor *data = nd->in[0], *idx = nd->in[1], *upd = nd->in[2];
    int r = oar_tensor_ndim(data), q = oar_tensor_ndim(idx);
    if (q < 1) return oari_error(OAR_ERR_INVALID, "indices rank 0");
    int64_t k = oar_tensor_shape(idx)[q - 1];
    if (k > r) return oari_error(OAR_ERR_INVALID, "index tuples of %lld past rank %d", (long long)k, r);
    const int64_t *ds = oar_tensor_shape(data);
    int64_t rows = prod(ds, 0, (int)k), cols = prod(ds, (int)k, r), m = prod(oar_tensor_shape(idx), 0, q - 1);
    oar_tensor *lin = oar_reshape(linear_index(data, idx, 0), 2, (int64_t[]){m, 1});
    oar_tensor *index = oar_contiguous(oar_expand(lin, 2, (int64_t[]){m, cols}));
    oar_tensor *flat = oar_reshape(data, 2, (int64_t[]){rows, cols}), *u = oar_reshape(upd, 2, (int64_t[]){m, cols});
    oar_tensor *y;
    if (oari_onnx_attr_s_is(nd, "reduction", "none", "add")) y = oar_scatter_add(flat, 0, index, u);
    else if (oari_onnx_attr_s_is(nd, "reduction", "none", "none")) y = oar_scatter(flat, 0, index, u);
    else return oari_error(OAR_ERR_UNSUPPORTED, "reductions other than none and add are not supported (oar has no mul/min/max scatter)");
    nd->out[0] = oar_reshape(y, r, ds);
    return nd->out[0] ? 0 : OAR_ERR_INVALID;
}

int oari_onnx_conv_reverse_sequence(oari_onnx_node *nd) {
    NEED(2);
    oar_tensor *x = nd->in[0], *lens = oar_cast(nd->in[1], OAR_I64);
    int r = oar_tensor_ndim(x);
    int64_t ta = oari_onnx_attr_i(nd, "time_axis", 0), ba = oari_onnx_attr_i(nd, "batch_axis", 1);
    if (r < 2 || !((ta == 0 && ba == 1) || (ta == 1 && ba == 0))) return oari_error(OAR_ERR_INVALID, "time_axis, batch_axis must be 0, 1");
    int64_t T = oar_tensor_shape(x)[ta], B = oar_tensor_shape(x)[ba];
    /* source time of (t, b): t < len[b] ? len[b] - 1 - t : t, shaped as x's first two dims */
    int64_t ts[2] = {1, 1}, ls[2] = {1, 1};
    ts[ta] = T;
    ls[ba] = B;
    oar_tensor *t = oar_reshape(oar_arange(0, (double)T, 1, OAR_I64), 2, ts), *l = oar_reshape(lens, 2, ls);
    oar_tensor *src = oar_where(oar_lt(t, l), oar_sub(oar_add_scalar(l, -1.0), t), oar_add(t, oar_mul_scalar(l, 0)));
    int64_t s[OAR_MAX_DIMS];
    for (int d = 0; d < r; d++) s[d] = d < 2 ? oar_tensor_shape(x)[d] : 1;
    oar_tensor *index = oar_contiguous(oar_expand(oar_reshape(src, r, s), r, oar_tensor_shape(x)));
    nd->out[0] = oar_gather(x, (int)ta, index);
    return nd->out[0] ? 0 : OAR_ERR_INVALID;
}

int oari_onnx_conv_max_unpool(oari_onnx_node *nd) {
    NEED(2);
    oar_tensor *x = nd->in[0], *idx = nd->in[1];
    int r = oar_tensor_ndim(x), ns = r - 2;
    if (ns < 1) return oari_error(OAR_ERR_INVALID, "input rank %d < 3", r);
    int64_t out[OAR_MAX_DIMS], want[OAR_MAX_DIMS], ks[OAR_MAX_DIMS], st[OAR_MAX_DIMS], p[2 * OAR_MAX_DIMS];
    if (oari_onnx_attr_ints(nd, "kernel_shape", ks, OAR_MAX_DIMS) != ns) return oari_error(OAR_ERR_INVALID, "kernel_shape");
    int n = oari_onnx_attr_ints(nd, "strides", st, OAR_MAX_DIMS);
    if (n == -1) for (int d = 0; d < ns; d++) st[d] = 1;
    else if (n != ns) return oari_error(OAR_ERR_INVALID, "strides");
    n = oari_onnx_attr_ints(nd, "pads", p, 2 * OAR_MAX_DIMS);
    if (n == -1) for (int d = 0; d < 2 * ns; d++) p[d] = 0;
    else if (n != 2 * ns) return oari_error(OAR_ERR_INVALID, "pads");
    /* the indices count in the default output; output_shape pads its end */
    out[0] = oar_tensor_shape(x)[0];
    out[1] = oar_tensor_shape(x)[1];
    for (int d = 0; d < ns; d++) out[2 + d] = (oar_tensor_shape(x)[2 + d] - 1) * st[d] + ks[d] - p[d] - p[ns + d];
    bool given = nd->n_in > 2 && nd->in[2];
    if (given) {
        int k = oari_onnx_input_ints(nd, 2, want, OAR_MAX_DIMS);
        if (k < 0) return k;
        if (k != r) return oari_error(OAR_ERR_INVALID, "output_shape has %d entries for rank %d", k, r);
        for (int d = 0; d < r; d++)
            if (want[d] < out[d] || (d < 2 && want[d] != out[d]))
                return oari_error(OAR_ERR_INVALID, "output_shape smaller than the default output");
    }
    int64_t total = prod(out, 0, r);
    oar_tensor *z = oar_zeros(oar_tensor_dtype(x), 1, &total);
    oar_tensor *y = oar_scatter(z, 0, oar_reshape(oar_cast(idx, OAR_I64), 1, (int64_t[]){-1}), oar_reshape(x, 1, (int64_t[]){-1}));
    y = oar_reshape(y, r, out);
    if (given) {
        int64_t pads[2 * OAR_MAX_DIMS];
        for (int d = 0; d < ns; d++) pads[2 * (ns - 1 - d)] = 0, pads[2 * (ns - 1 - d) + 1] = want[2 + d] - out[2 + d];
        y = oar_pad(y, 2 * ns, pads, OAR_PAD_CONSTANT, 0.0);
    }
    nd->out[0] = y;
    return nd->out[0] ? 0 : OAR_ERR_INVALID;
}

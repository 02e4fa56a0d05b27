/* ONNX import, shape and movement ops: reshape, slicing, gathers and
 * scatters, padding and the ops that build tensors from shapes. Values an
 * op's output shape depends on (a Reshape's shape, Slice's starts) must be
 * constants at import: oar graphs have static shapes. */
#define OARI_ONNX_PROTO
#include "onnx_internal.h"
#include <math.h>
#include <string.h>


/* The ints of an attribute (opset < since) or of input i (from since). */
static int ints_attr_or_input(oari_onnx_node *nd, int64_t since, const char *attr, int i, int64_t *out, int max) {
    if (nd->opset < since) return oari_onnx_attr_ints(nd, attr, out, max);
    if (nd->n_in <= i || !nd->in[i]) return -1;
    return oari_onnx_input_ints(nd, i, out, max);
}

int oari_onnx_conv_reshape(oari_onnx_node *nd) {
    NEED(2);
    oar_tensor *x = nd->in[0];
    int64_t v[OAR_MAX_DIMS], shape[OAR_MAX_DIMS];
    int k = oari_onnx_input_ints(nd, 1, v, OAR_MAX_DIMS);
    if (k < 0) return k;
    bool allowzero = oari_onnx_attr_i(nd, "allowzero", 0) != 0;
    int r = oar_tensor_ndim(x);
    for (int i = 0; i < k; i++) {
        shape[i] = v[i];
        if (v[i] == 0 && !allowzero) { /* 0 copies the input's dim */
            if (i >= r) return oari_error(OAR_ERR_INVALID, "shape[%d] = 0 past the input's rank %d", i, r);
            shape[i] = oar_tensor_shape(x)[i];
        }
    }
    RESULT(oar_reshape(x, k, shape));
}

int oari_onnx_conv_flatten(oari_onnx_node *nd) {
    NEED(1);
    RESULT(oari_onnx_flatten2d(nd->in[0], oari_onnx_attr_i(nd, "axis", 1)));
}

int oari_onnx_conv_transpose(oari_onnx_node *nd) {
    NEED(1);
    int r = oar_tensor_ndim(nd->in[0]);
    int64_t perm[OAR_MAX_DIMS];
    int k = oari_onnx_attr_ints(nd, "perm", perm, OAR_MAX_DIMS);
    if (k < -1) return k;
    if (k == -1)
        for (int d = 0; d < r; d++) perm[d] = r - 1 - d;
    else if (k != r)
        return oari_error(OAR_ERR_INVALID, "perm has %d entries for rank %d", k, r);
    RESULT(oar_permute(nd->in[0], perm));
}

int oari_onnx_conv_squeeze(oari_onnx_node *nd) {
    NEED(1);
    oar_tensor *x = nd->in[0];
    int r = oar_tensor_ndim(x);
    const int64_t *s = oar_tensor_shape(x);
    int64_t axes[OAR_MAX_DIMS], shape[OAR_MAX_DIMS];
    int k = ints_attr_or_input(nd, 13, "axes", 1, axes, OAR_MAX_DIMS);
    if (k < -1) return k;
    bool drop[OAR_MAX_DIMS] = {false};
    for (int i = 0; i < k; i++) {
        int st = oari_onnx_axis(axes[i], r, false, &axes[i]);
        if (st) return st;
        if (s[axes[i]] != 1)
            return oari_error(OAR_ERR_INVALID, "dim %lld has size %lld, not 1", (long long)axes[i], (long long)s[axes[i]]);
        drop[axes[i]] = true;
    }
    int n = 0;
    for (int d = 0; d < r; d++)
        if (!(k <= 0 ? s[d] == 1 : drop[d])) shape[n++] = s[d];
    RESULT(oar_reshape(x, n, shape));
}

int oari_onnx_conv_unsqueeze(oari_onnx_node *nd) {
    NEED(1);
    oar_tensor *x = nd->in[0];
    int r = oar_tensor_ndim(x);
    int64_t axes[OAR_MAX_DIMS], shape[OAR_MAX_DIMS];
    int k = ints_attr_or_input(nd, 13, "axes", 1, axes, OAR_MAX_DIMS);
    if (k < -1) return k;
    if (k < 0) return oari_error(OAR_ERR_INVALID, "axes are required");
    int out = r + k;
    if (out > OAR_MAX_DIMS) return oari_error(OAR_ERR_UNSUPPORTED, "rank %d (at most %d)", out, OAR_MAX_DIMS);
    bool ins[OAR_MAX_DIMS] = {false};
    for (int i = 0; i < k; i++) {
        int st = oari_onnx_axis(axes[i], out, false, &axes[i]);
        if (st) return st;
        if (ins[axes[i]]) return oari_error(OAR_ERR_INVALID, "axis %lld repeated", (long long)axes[i]);
        ins[axes[i]] = true;
    }
    for (int d = 0, j = 0; d < out; d++) shape[d] = ins[d] ? 1 : oar_tensor_shape(x)[j++];
    RESULT(oar_reshape(x, out, shape));
}

int oari_onnx_conv_concat(oari_onnx_node *nd) {
    NEED(1);
    int64_t axis;
    if (!oari_onnx_attr(nd, "axis")) return oari_error(OAR_ERR_INVALID, "axis is required");
    int st = oari_onnx_axis(oari_onnx_attr_i(nd, "axis", 0), oar_tensor_ndim(nd->in[0]), false, &axis);
    if (st) return st;
    NEED(nd->n_in);
    RESULT(nd->n_in == 1 ? oar_clone(nd->in[0]) : oar_concat(nd->n_in, nd->in, (int)axis));
}

int oari_onnx_conv_split(oari_onnx_node *nd) {
    NEED(1);
    oar_tensor *x = nd->in[0];
    int64_t axis, sizes[OARI_ONNX_MAX_IO];
    int st = oari_onnx_axis(oari_onnx_attr_i(nd, "axis", 0), oar_tensor_ndim(x), false, &axis);
    if (st) return st;
    int64_t n = oar_tensor_shape(x)[axis];
    int k = ints_attr_or_input(nd, 13, "split", 1, sizes, OARI_ONNX_MAX_IO);
    if (k < -1) return k;
    if (k == -1 && oari_onnx_attr(nd, "num_outputs")) { /* opset 18: ceil(n / parts) each, the last smaller */
        int64_t parts = oari_onnx_attr_i(nd, "num_outputs", 0);
        if (parts != nd->n_out || parts < 1) return oari_error(OAR_ERR_INVALID, "num_outputs %lld for %d outputs", (long long)parts, nd->n_out);
        int64_t each = (n + parts - 1) / parts;
        k = nd->n_out;
        for (int j = 0; j < k; j++) sizes[j] = (j + 1) * each <= n ? each : n - j * each > 0 ? n - j * each : 0;
    } else if (k == -1) {
        if (n % nd->n_out) return oari_error(OAR_ERR_INVALID, "dim %lld of size %lld in %d equal parts", (long long)axis,
                                             (long long)n, nd->n_out);
        k = nd->n_out;
        for (int j = 0; j < k; j++) sizes[j] = n / k;
    }
    if (k != nd->n_out) return oari_error(OAR_ERR_INVALID, "split has %d entries for %d outputs", k, nd->n_out);
    int64_t at = 0;
    for (int j = 0; j < k; j++) {
        if (sizes[j] < 0 || at + sizes[j] > n) return oari_error(OAR_ERR_INVALID, "split sizes exceed dim size %lld", (long long)n);
        nd->out[j] = oar_contiguous(oar_slice(x, (int)axis, at, at + sizes[j], 1));
        if (!nd->out[j]) return OAR_ERR_INVALID;
        at += sizes[j];
    }
    if (at != n) return oari_error(OAR_ERR_INVALID, "split sizes sum to %lld, not %lld", (long long)at, (long long)n);
    return 0;
}

/* One axis of a Slice with ONNX's clamping (negative steps included). */
static oar_tensor *slice_axis(oar_tensor *x, int axis, int64_t start, int64_t end, int64_t step) {
    int64_t n = oar_tensor_shape(x)[axis];
    if (step == 0) {
        oari_error(OAR_ERR_INVALID, "step 0");
        return NULL;
    }
    if (start < 0) start = start < -n ? 0 : start + n;
    if (end < 0) end = end < -n ? -1 : end + n;
    if (step > 0) {
        start = start > n ? n : start;
        end = end < 0 ? 0 : end > n ? n : end;
        if (end < start) end = start;
        return oar_slice(x, axis, start, end, step);
    }
    /* step < 0: start in [0, n-1], end in [-1, n-1]; on the flipped dim
     * that is start' = n-1-start, end' = n-1-end */
    start = start > n - 1 ? n - 1 : start;
    end = end > n - 1 ? n - 1 : end;
    if (n == 0 || start <= end) return oar_slice(x, axis, 0, 0, 1);
    int64_t dim = axis;
    return oar_slice(oar_flip(x, 1, &dim), axis, n - 1 - start, n - 1 - end, -step);
}

static int slice_with(oari_onnx_node *nd, int k, const int64_t *starts, const int64_t *ends, const int64_t *axes_in,
                      const int64_t *steps) {
    oar_tensor *y = nd->in[0];
    int r = oar_tensor_ndim(y);
    bool seen[OAR_MAX_DIMS] = {false};
    for (int i = 0; i < k; i++) {
        int64_t axis = axes_in ? axes_in[i] : i;
        int st = oari_onnx_axis(axis, r, false, &axis);
        if (st) return st;
        if (seen[axis]) return oari_error(OAR_ERR_INVALID, "axis %lld repeated", (long long)axis);
        seen[axis] = true;
        y = slice_axis(y, (int)axis, starts[i], ends[i], steps ? steps[i] : 1);
    }
    RESULT(y == nd->in[0] ? oar_clone(y) : oar_contiguous(y));
}

int oari_onnx_conv_slice_old(oari_onnx_node *nd) { /* opset 1..9: attributes */
    NEED(1);
    int64_t s[OAR_MAX_DIMS], e[OAR_MAX_DIMS], a[OAR_MAX_DIMS];
    int ks = oari_onnx_attr_ints(nd, "starts", s, OAR_MAX_DIMS), ke = oari_onnx_attr_ints(nd, "ends", e, OAR_MAX_DIMS);
    int ka = oari_onnx_attr_ints(nd, "axes", a, OAR_MAX_DIMS);
    if (ks < 0 || ke != ks || (ka >= 0 && ka != ks) || ka < -1)
        return oari_error(OAR_ERR_INVALID, "starts, ends and axes must have one length");
    return slice_with(nd, ks, s, e, ka >= 0 ? a : NULL, NULL);
}

int oari_onnx_conv_slice(oari_onnx_node *nd) { /* opset 10..: inputs */
    NEED(3);
    int64_t s[OAR_MAX_DIMS], e[OAR_MAX_DIMS], a[OAR_MAX_DIMS], t[OAR_MAX_DIMS];
    int ks = oari_onnx_input_ints(nd, 1, s, OAR_MAX_DIMS);
    if (ks < 0) return ks;
    int ke = oari_onnx_input_ints(nd, 2, e, OAR_MAX_DIMS);
    if (ke < 0) return ke;
    int ka = nd->n_in > 3 && nd->in[3] ? oari_onnx_input_ints(nd, 3, a, OAR_MAX_DIMS) : -1;
    if (ka < -1) return ka;
    int kt = nd->n_in > 4 && nd->in[4] ? oari_onnx_input_ints(nd, 4, t, OAR_MAX_DIMS) : -1;
    if (kt < -1) return kt;
    if (ke != ks || (ka >= 0 && ka != ks) || (kt >= 0 && kt != ks))
        return oari_error(OAR_ERR_INVALID, "starts, ends, axes and steps must have one length");
    return slice_with(nd, ks, s, e, ka >= 0 ? a : NULL, kt >= 0 ? t : NULL);
}

/* idx with negative entries counted from the end of a dim of size n. */
static oar_tensor *wrap_index(oar_tensor *idx, int64_t n) {
    idx = oar_cast(idx, OAR_I64);
    oar_tensor *zero = oari_onnx_scalar(0, OAR_I64);
    return oar_where(oar_lt(idx, zero), oar_add_scalar(idx, (double)n), idx);
}

int oari_onnx_conv_gather(oari_onnx_node *nd) {
    NEED(2);
    oar_tensor *x = nd->in[0], *idx = nd->in[1];
    int r = oar_tensor_ndim(x), ri = oar_tensor_ndim(idx);
    int64_t axis;
    int st = oari_onnx_axis(oari_onnx_attr_i(nd, "axis", 0), r, false, &axis);
    if (st) return st;
    if (r - 1 + ri > OAR_MAX_DIMS) return oari_error(OAR_ERR_UNSUPPORTED, "output rank %d", r - 1 + ri);
    const int64_t *xs = oar_tensor_shape(x);
    int64_t shape[OAR_MAX_DIMS];
    int k = 0;
    for (int d = 0; d < axis; d++) shape[k++] = xs[d];
    for (int d = 0; d < ri; d++) shape[k++] = oar_tensor_shape(idx)[d];
    for (int d = (int)axis + 1; d < r; d++) shape[k++] = xs[d];
    oar_tensor *flat = oar_reshape(wrap_index(idx, xs[axis]), 1, (int64_t[]){-1});
    RESULT(oar_reshape(oar_index_select(x, (int)axis, flat), k, shape));
}

int oari_onnx_conv_gather_elements(oari_onnx_node *nd) {
    NEED(2);
    oar_tensor *x = nd->in[0];
    int64_t axis;
    int st = oari_onnx_axis(oari_onnx_attr_i(nd, "axis", 0), oar_tensor_ndim(x), false, &axis);
    if (st) return st;
    RESULT(oar_gather(x, (int)axis, wrap_index(nd->in[1], oar_tensor_shape(x)[axis])));
}

int oari_onnx_conv_scatter_elements(oari_onnx_node *nd) {
    NEED(3);
    oar_tensor *x = nd->in[0];
    int64_t axis;
    int st = oari_onnx_axis(oari_onnx_attr_i(nd, "axis", 0), oar_tensor_ndim(x), false, &axis);
    if (st) return st;
    oar_tensor *idx = wrap_index(nd->in[1], oar_tensor_shape(x)[axis]);
    if (oari_onnx_attr_s_is(nd, "reduction", "none", "add")) RESULT(oar_scatter_add(x, (int)axis, idx, nd->in[2]));
    if (!oari_onnx_attr_s_is(nd, "reduction", "none", "none"))
        return oari_error(OAR_ERR_UNSUPPORTED, "reductions other than none and add are not supported (oar has no mul/min/max scatter)");
    RESULT(oar_scatter(x, (int)axis, idx, nd->in[2]));
}

int oari_onnx_conv_expand(oari_onnx_node *nd) { /* bidirectional broadcast */
    NEED(2);
    oar_tensor *x = nd->in[0];
    int64_t v[OAR_MAX_DIMS], shape[OAR_MAX_DIMS];
    int k = oari_onnx_input_ints(nd, 1, v, OAR_MAX_DIMS);
    if (k < 0) return k;
    int r = oar_tensor_ndim(x), out = k > r ? k : r;
    for (int d = 0; d < out; d++) {
        int dx = d - (out - r), dv = d - (out - k);
        int64_t a = dx >= 0 ? oar_tensor_shape(x)[dx] : 1, b = dv >= 0 ? v[dv] : 1;
        if (a != b && a != 1 && b != 1)
            return oari_error(OAR_ERR_INVALID, "shape %lld does not broadcast with %lld at dim %d", (long long)b,
                              (long long)a, d);
        shape[d] = a == 1 ? b : a;
    }
    if (oari_onnx_dynamic_shape(out, shape) && !(x = oari_onnx_traced(x))) return oari_fail_status();
    RESULT(oar_contiguous(oar_expand(x, out, shape)));
}

int oari_onnx_conv_tile(oari_onnx_node *nd) {
    NEED(2);
    int64_t rep[OAR_MAX_DIMS];
    int k = oari_onnx_input_ints(nd, 1, rep, OAR_MAX_DIMS);
    if (k < 0) return k;
    if (k != oar_tensor_ndim(nd->in[0])) return oari_error(OAR_ERR_INVALID, "%d repeats for rank %d", k, oar_tensor_ndim(nd->in[0]));
    RESULT(oar_repeat(nd->in[0], k, rep));
}

int oari_onnx_conv_pad(oari_onnx_node *nd) {
    NEED(1);
    oar_tensor *x = nd->in[0];
    int r = oar_tensor_ndim(x);
    int64_t p[2 * OAR_MAX_DIMS], q[2 * OAR_MAX_DIMS];
    double value = 0;
    int k;
    if (nd->opset < 11) {
        k = oari_onnx_attr_ints(nd, "pads", p, 2 * OAR_MAX_DIMS);
        value = oari_onnx_attr_f(nd, "value", 0.0);
    } else {
        NEED(2);
        k = oari_onnx_input_ints(nd, 1, p, 2 * OAR_MAX_DIMS);
        int st;
        if (nd->n_in > 2 && nd->in[2] && (st = oari_onnx_input_double(nd, 2, &value))) return st;
        if (nd->n_in > 3 && nd->in[3]) { /* opset 18: pads for these axes only */
            int64_t axes[OAR_MAX_DIMS], full[2 * OAR_MAX_DIMS] = {0};
            int ka = oari_onnx_input_ints(nd, 3, axes, OAR_MAX_DIMS);
            if (ka < 0) return ka;
            if (k != 2 * ka) return oari_error(OAR_ERR_INVALID, "%d pads for %d axes", k, ka);
            for (int i = 0; i < ka; i++) {
                if ((st = oari_onnx_axis(axes[i], r, false, &axes[i]))) return st;
                full[axes[i]] = p[i];
                full[r + axes[i]] = p[ka + i];
            }
            memcpy(p, full, (size_t)(2 * r) * sizeof *p);
            k = 2 * r;
        }
    }
    if (k < -1) return k;
    if (k != 2 * r) return oari_error(OAR_ERR_INVALID, "%d pads for rank %d", k, r);
    for (int d = 0; d < r; d++) { /* ONNX: all begins then all ends; oar: pairs from the last dim */
        q[2 * (r - 1 - d)] = p[d];
        q[2 * (r - 1 - d) + 1] = p[r + d];
        if (p[d] < 0 || p[r + d] < 0) return oari_error(OAR_ERR_UNSUPPORTED, "negative pads");
    }
    oar_pad_mode mode;
    if (oari_onnx_attr_s_is(nd, "mode", "constant", "constant")) mode = OAR_PAD_CONSTANT;
    else if (oari_onnx_attr_s_is(nd, "mode", "constant", "reflect")) mode = OAR_PAD_REFLECT;
    else if (oari_onnx_attr_s_is(nd, "mode", "constant", "edge")) mode = OAR_PAD_REPLICATE;
    else return oari_error(OAR_ERR_UNSUPPORTED, "pad mode (constant, reflect, edge)");
    RESULT(oar_pad(x, 2 * r, q, mode, value));
}

int oari_onnx_conv_shape(oari_onnx_node *nd) {
    NEED(1);
    /* with dynamic dims the values hold placeholders: the importer tracks what they stand for (onnx_sym.c) */
    int r = oar_tensor_ndim(nd->in[0]);
    int64_t start = oari_onnx_attr_i(nd, "start", 0), end = oari_onnx_attr_i(nd, "end", r);
    if (start < 0) start += r;
    if (end < 0) end += r;
    start = start < 0 ? 0 : start > r ? r : start;
    end = end < 0 ? 0 : end > r ? r : end;
    int64_t n = end > start ? end - start : 0;
    RESULT(oar_tensor_from_data(n ? oar_tensor_shape(nd->in[0]) + start : NULL, OAR_I64, 1, &n));
}

int oari_onnx_conv_size(oari_onnx_node *nd) {
    NEED(1); /* with dynamic dims a placeholder count: the importer tracks what it stands for */
    RESULT(oari_onnx_scalar((double)oar_tensor_numel(nd->in[0]), OAR_I64));
}

int oari_onnx_conv_constant_of_shape(oari_onnx_node *nd) {
    NEED(1);
    int64_t shape[OAR_MAX_DIMS];
    int k = oari_onnx_input_ints(nd, 0, shape, OAR_MAX_DIMS);
    if (k < 0) return k;
    oar_dtype dt = OAR_F32;
    double v = 0;
    const Onnx__AttributeProto *a = oari_onnx_attr(nd, "value");
    if (a && a->t) {
        oar_tensor *t = oari_onnx_tensor_of(a->t, "value");
        if (!t) return OAR_ERR_INVALID;
        if (oar_tensor_numel(t) != 1) return oari_error(OAR_ERR_INVALID, "value must hold one element");
        dt = oar_tensor_dtype(t);
        v = oar_tensor_item(t);
    }
    if (oari_onnx_dynamic_shape(k, shape)) { /* a node expanding the value, not a constant */
        oar_tensor *s = oari_onnx_traced(oari_onnx_scalar(v, dt));
        RESULT(s ? oar_contiguous(oar_expand(s, k, shape)) : NULL);
    }
    RESULT(oar_full(dt, k, shape, v));
}

int oari_onnx_conv_range(oari_onnx_node *nd) {
    NEED(3);
    double s, l, d;
    int st;
    if ((st = oari_onnx_input_double(nd, 0, &s)) || (st = oari_onnx_input_double(nd, 1, &l)) ||
        (st = oari_onnx_input_double(nd, 2, &d)))
        return st;
    if (d == 0) return oari_error(OAR_ERR_INVALID, "delta 0");
    double n = ceil((l - s) / d);
    if (n < 0) n = 0;
    if (!(n <= 1e9)) return oari_error(OAR_ERR_INVALID, "range of %g elements", n);
    oar_dtype dt = oar_tensor_dtype(nd->in[0]);
    /* start + i * delta, as ONNX defines it */
    oar_tensor *i = oar_arange(0, n, 1, OAR_F64);
    RESULT(oar_cast(oar_add_scalar(oar_mul_scalar(i, d), s), dt));
}

int oari_onnx_conv_trilu(oari_onnx_node *nd) {
    NEED(1);
    int64_t k = 0;
    if (nd->n_in > 1 && nd->in[1]) {
        int n = oari_onnx_input_ints(nd, 1, &k, 1);
        if (n < 0) return n;
    }
    if (oar_tensor_ndim(nd->in[0]) < 2) return oari_error(OAR_ERR_INVALID, "input rank < 2");
    RESULT(oari_onnx_attr_i(nd, "upper", 1) ? oar_triu(nd->in[0], k) : oar_tril(nd->in[0], k));
}

int oari_onnx_conv_one_hot(oari_onnx_node *nd) {
    NEED(3);
    oar_tensor *idx = nd->in[0], *vals = nd->in[2];
    double depth;
    int st = oari_onnx_input_double(nd, 1, &depth);
    if (st) return st;
    if (!(depth >= 1 && depth <= 1e9)) return oari_error(OAR_ERR_INVALID, "depth %g", depth);
    int64_t n = (int64_t)depth;
    int r = oar_tensor_ndim(idx);
    int64_t axis;
    if ((st = oari_onnx_axis(oari_onnx_attr_i(nd, "axis", -1), r + 1, false, &axis))) return st;
    if (r + 1 > OAR_MAX_DIMS) return oari_error(OAR_ERR_UNSUPPORTED, "output rank %d", r + 1);
    if (oar_tensor_numel(vals) != 2) return oari_error(OAR_ERR_INVALID, "values must hold [off, on]");
    int64_t s[OAR_MAX_DIMS];
    for (int d = 0; d <= r; d++) s[d] = d == axis ? n : 1;
    oar_tensor *pos = oar_reshape(oar_arange(0, (double)n, 1, OAR_I64), r + 1, s);
    oar_tensor *iw = oar_unsqueeze(wrap_index(oar_cast(idx, OAR_I64), n), (int)axis);
    oar_tensor *vf = oar_reshape(vals, 1, (int64_t[]){2});
    RESULT(oar_where(oar_eq(pos, iw), oar_reshape(oar_slice(vf, 0, 1, 2, 1), 0, NULL),
                     oar_reshape(oar_slice(vf, 0, 0, 1, 1), 0, NULL)));
}

int oari_onnx_conv_eye_like(oari_onnx_node *nd) {
    NEED(1);
    oar_tensor *x = nd->in[0];
    if (oar_tensor_ndim(x) != 2) return oari_error(OAR_ERR_INVALID, "input rank %d (needs 2)", oar_tensor_ndim(x));
    oar_dtype dt = oar_tensor_dtype(x);
    if (oari_onnx_attr(nd, "dtype")) {
        dt = oari_onnx_dtype((int32_t)oari_onnx_attr_i(nd, "dtype", 1));
        if (dt == OAR_DTYPE_INVALID) return oari_error(OAR_ERR_UNSUPPORTED, "dtype is not an oar dtype");
    }
    int64_t n = oar_tensor_shape(x)[0], m = oar_tensor_shape(x)[1], k = oari_onnx_attr_i(nd, "k", 0);
    oar_tensor *row = oar_reshape(oar_arange(0, (double)n, 1, OAR_I64), 2, (int64_t[]){n, 1});
    oar_tensor *col = oar_reshape(oar_arange(0, (double)m, 1, OAR_I64), 2, (int64_t[]){1, m});
    RESULT(oar_cast(oar_eq(oar_sub(col, row), oari_onnx_scalar((double)k, OAR_I64)), dt));
}

int oari_onnx_conv_depth_to_space(oari_onnx_node *nd) {
    NEED(1);
    oar_tensor *x = nd->in[0];
    int64_t b = oari_onnx_attr_i(nd, "blocksize", 0);
    if (oar_tensor_ndim(x) != 4 || b < 1) return oari_error(OAR_ERR_INVALID, "needs a 4-D input and blocksize >= 1");
    const int64_t *s = oar_tensor_shape(x);
    int64_t N = s[0], C = s[1], H = s[2], W = s[3];
    if (C % (b * b)) return oari_error(OAR_ERR_INVALID, "channels %lld not divisible by blocksize^2", (long long)C);
    int64_t c = C / (b * b);
    bool crd = oari_onnx_attr_s_is(nd, "mode", "DCR", "CRD");
    oar_tensor *t = crd ? oar_reshape(x, 6, (int64_t[]){N, c, b, b, H, W}) : oar_reshape(x, 6, (int64_t[]){N, b, b, c, H, W});
    t = oar_permute(t, crd ? (int64_t[]){0, 1, 4, 2, 5, 3} : (int64_t[]){0, 3, 4, 1, 5, 2});
    RESULT(oar_reshape(t, 4, (int64_t[]){N, c, H * b, W * b}));
}

int oari_onnx_conv_space_to_depth(oari_onnx_node *nd) {
    NEED(1);
    oar_tensor *x = nd->in[0];
    int64_t b = oari_onnx_attr_i(nd, "blocksize", 0);
    if (oar_tensor_ndim(x) != 4 || b < 1) return oari_error(OAR_ERR_INVALID, "needs a 4-D input and blocksize >= 1");
    const int64_t *s = oar_tensor_shape(x);
    int64_t N = s[0], C = s[1], H = s[2], W = s[3];
    if (H % b || W % b) return oari_error(OAR_ERR_INVALID, "H, W not divisible by blocksize");
    oar_tensor *t = oar_reshape(x, 6, (int64_t[]){N, C, H / b, b, W / b, b});
    t = oar_permute(t, (int64_t[]){0, 3, 5, 1, 2, 4});
    RESULT(oar_reshape(t, 4, (int64_t[]){N, C * b * b, H / b, W / b}));
}

int oari_onnx_conv_topk(oari_onnx_node *nd) {
    NEED(1);
    oar_tensor *x = nd->in[0];
    int64_t k;
    if (nd->opset < 10) {
        k = oari_onnx_attr_i(nd, "k", -1);
    } else {
        int n = oari_onnx_input_ints(nd, 1, &k, 1);
        if (n < 0) return n;
        if (n != 1) return oari_error(OAR_ERR_INVALID, "K must hold one value");
    }
    int64_t axis;
    int st = oari_onnx_axis(oari_onnx_attr_i(nd, "axis", -1), oar_tensor_ndim(x), false, &axis);
    if (st) return st;
    oar_tensor *idx = NULL;
    nd->out[0] = oar_topk(x, k, (int)axis, oari_onnx_attr_i(nd, "largest", 1) != 0, true, &idx);
    if (nd->n_out > 1) nd->out[1] = idx;
    return nd->out[0] ? 0 : OAR_ERR_INVALID;
}

int oari_onnx_conv_compress(oari_onnx_node *nd) {
    NEED(2);
    oar_tensor *x = nd->in[0], *c = nd->in[1];
    if (!oar_tensor_data(c))
        return oari_error(OAR_ERR_UNSUPPORTED, "the condition is computed at run time (the output size depends on it)");
    if (oar_tensor_ndim(c) != 1) return oari_error(OAR_ERR_INVALID, "condition must be 1-D");
    oar_tensor *cb = oar_contiguous(oar_cast(c, OAR_BOOL));
    if (!cb) return OAR_ERR_INVALID;
    const bool *v = oar_tensor_data(cb);
    int64_t n = oar_tensor_numel(cb), m = 0;
    oar_tensor *idx = oar_empty(OAR_I64, 1, &n, NULL);
    if (!idx) return OAR_ERR_INVALID;
    int64_t *iv = oar_tensor_data(idx);
    for (int64_t i = 0; i < n; i++)
        if (v[i]) iv[m++] = i;
    idx = oar_slice(idx, 0, 0, m, 1);
    oar_tensor *src = x;
    int64_t axis = 0;
    if (oari_onnx_attr(nd, "axis")) {
        int st = oari_onnx_axis(oari_onnx_attr_i(nd, "axis", 0), oar_tensor_ndim(x), false, &axis);
        if (st) return st;
    } else {
        src = oar_reshape(x, 1, (int64_t[]){-1});
    }
    if (src && n > oar_tensor_shape(src)[axis]) return oari_error(OAR_ERR_INVALID, "condition longer than the dim");
    RESULT(oar_index_select(src, (int)axis, oar_contiguous(idx)));
}

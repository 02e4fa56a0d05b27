/* Shape and movement ops: the views (view, permute, expand, slice,
 * diagonal), the copying primitives (concat, pad, flip, roll, tril, triu and
 * the transposes of slice, diagonal and pad used by gradients), and the
 * composites built on them (reshape, squeeze, stack, split, repeat, ...).
 * Kernels: src/backends/cpu/cpu_movement.c. */
#include "op.h"

#include <string.h>

/* ---- helpers ---------------------------------------------------------------- */

static bool null_input(const char *op, const oar_tensor *x) {
    if (x) return false;
    if (!oari_error_pending()) oari_error(OAR_ERR_INVALID, "%s: input is NULL", op);
    return true;
}

static int done1(oari_grad_ctx *g) { return g->gin[0] ? 0 : oari_fail_status(); }

/* PyTorch's computeStride: strides that let a tensor of (shape, strides)
 * be viewed with new_shape, or false when no view exists (reshape copies). */
static bool compute_stride(int nd, const int64_t *shape, const int64_t *strides, int64_t numel,
                           int new_nd, const int64_t *new_shape, int64_t *new_strides) {
    if (nd == 0) {
        for (int d = 0; d < new_nd; d++) new_strides[d] = 1;
        return true;
    }
    if (numel == 0) {
        if (nd == new_nd && !memcmp(shape, new_shape, (size_t)nd * sizeof *shape)) {
            memcpy(new_strides, strides, (size_t)nd * sizeof *strides);
            return true;
        }
        for (int d = new_nd - 1; d >= 0; d--)
            new_strides[d] = d == new_nd - 1 ? 1
                             : (new_shape[d + 1] > 1 ? new_shape[d + 1] : 1) * new_strides[d + 1];
        return true;
    }
    int view_d = new_nd - 1;
    int64_t chunk_base_stride = strides[nd - 1], tensor_numel = 1, view_numel = 1;
    for (int td = nd - 1; td >= 0; td--) {
        tensor_numel *= shape[td];
        if (td == 0 || (shape[td - 1] != 1 && strides[td - 1] != tensor_numel * chunk_base_stride)) {
            while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
                new_strides[view_d] = view_numel * chunk_base_stride;
                view_numel *= new_shape[view_d];
                view_d--;
            }
            if (view_numel != tensor_numel) return false;
            if (td > 0) {
                chunk_base_stride = strides[td - 1];
                tensor_numel = 1;
                view_numel = 1;
            }
        }
    }
    return view_d == -1;
}

/* Length and first element of a diagonal (PyTorch's rule). */
static int64_t diag_len(int64_t s1, int64_t s2, int64_t offset) {
    int64_t n = offset >= 0 ? (s1 < s2 - offset ? s1 : s2 - offset)
                            : (s1 + offset < s2 ? s1 + offset : s2);
    return n > 0 ? n : 0;
}

/* Shape of diagonal(x) for (offset, d1, d2) over (nd, shape). Returns the ndim. */
static int diag_shape(int nd, const int64_t *shape, int64_t offset, int d1, int d2, int64_t *out) {
    int k = 0;
    for (int d = 0; d < nd; d++)
        if (d != d1 && d != d2) out[k++] = shape[d];
    out[k++] = diag_len(shape[d1], shape[d2], offset);
    return k;
}

/* ---- view ------------------------------------------------------------------ */

static int infer_view(oari_infer *c) {
    const oar_tensor *x = c->in[0];
    const oari_attrs *a = c->attrs;
    char s1[200], s2[200];
    if (a->ni > OAR_MAX_DIMS)
        return oari_error(OAR_ERR_INVALID, "view: rank %d exceeds %d", a->ni, OAR_MAX_DIMS);
    int64_t n = oari_shape_numel("view", a->ni, a->i);
    if (n < 0) return OAR_ERR_INVALID;
    if (n != x->numel)
        return oari_error(OAR_ERR_INVALID, "view: cannot reshape tensor of shape %s (%lld elements) "
                          "into shape %s", oari_shape_str(s1, x->ndim, x->shape),
                          (long long)x->numel, oari_shape_str(s2, a->ni, a->i));
    int64_t st[OAR_MAX_DIMS];
    if (!compute_stride(x->ndim, x->shape, x->strides, x->numel, a->ni, a->i, st))
        return oari_error(OAR_ERR_INVALID, "view: shape %s is not compatible with the strides of "
                          "the input of shape %s; use reshape (it copies)",
                          oari_shape_str(s2, a->ni, a->i), oari_shape_str(s1, x->ndim, x->shape));
    c->out[0].dtype = x->dtype;
    c->out[0].ndim = a->ni;
    memcpy(c->out[0].shape, a->i, (size_t)a->ni * sizeof *a->i);
    return 0;
}

static oar_tensor *view_view(oar_tensor *x, const oari_attrs *a) {
    int64_t st[OAR_MAX_DIMS];
    if (!compute_stride(x->ndim, x->shape, x->strides, x->numel, a->ni, a->i, st)) {
        oari_error(OAR_ERR_INVALID, "view: incompatible strides");
        return NULL;
    }
    return oari_tensor_view(x, a->ni, a->i, st, x->offset);
}

static int grad_view(oari_grad_ctx *g) {
    g->gin[0] = oar_reshape(g->gout[0], g->in_meta[0].ndim, g->in_meta[0].shape);
    return done1(g);
}

const oari_op_def oari_def_view = {
    .name = "view", .n_in = 1, .n_out = 1, .fusion = OARI_FUSE_INJECTIVE, .flags = OARI_F_VIEW,
    .infer = infer_view, .view = view_view, .grad = grad_view,
};

/* ---- permute --------------------------------------------------------------- */

static int infer_permute(oari_infer *c) {
    const oar_tensor *x = c->in[0];
    const oari_attrs *a = c->attrs;
    if (a->ni != x->ndim)
        return oari_error(OAR_ERR_INVALID, "permute: got %d dims for a tensor of rank %d", a->ni,
                          x->ndim);
    bool seen[OAR_MAX_DIMS] = {0};
    for (int d = 0; d < a->ni; d++) {
        if (a->i[d] < 0 || a->i[d] >= x->ndim || seen[a->i[d]])
            return oari_error(OAR_ERR_INVALID, "permute: invalid or repeated dim %lld",
                              (long long)a->i[d]);
        seen[a->i[d]] = true;
    }
    c->out[0].dtype = x->dtype;
    c->out[0].ndim = x->ndim;
    for (int d = 0; d < x->ndim; d++) c->out[0].shape[d] = x->shape[a->i[d]];
    return 0;
}

static oar_tensor *view_permute(oar_tensor *x, const oari_attrs *a) {
    int64_t sh[OAR_MAX_DIMS], st[OAR_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++) {
        sh[d] = x->shape[a->i[d]];
        st[d] = x->strides[a->i[d]];
    }
    return oari_tensor_view(x, x->ndim, sh, st, x->offset);
}

static int grad_permute(oari_grad_ctx *g) {
    int64_t inv[OAR_MAX_DIMS];
    for (int d = 0; d < g->attrs->ni; d++) inv[g->attrs->i[d]] = d;
    g->gin[0] = oar_permute(g->gout[0], inv);
    return done1(g);
}

const oari_op_def oari_def_permute = {
    .name = "permute", .n_in = 1, .n_out = 1, .fusion = OARI_FUSE_INJECTIVE, .flags = OARI_F_VIEW,
    .infer = infer_permute, .view = view_permute, .grad = grad_permute,
};

/* ---- expand ----------------------------------------------------------------- */

static int infer_expand(oari_infer *c) {
    const oar_tensor *x = c->in[0];
    const oari_attrs *a = c->attrs;
    char s1[200], s2[200];
    if (a->ni < x->ndim || a->ni > OAR_MAX_DIMS)
        return oari_error(OAR_ERR_INVALID, "expand: cannot expand a tensor of shape %s to rank %d",
                          oari_shape_str(s1, x->ndim, x->shape), a->ni);
    int lead = a->ni - x->ndim;
    for (int d = 0; d < a->ni; d++) {
        int64_t want = a->i[d];
        bool ok = want >= 0 && (d < lead || x->shape[d - lead] == want || x->shape[d - lead] == 1);
        if (!ok)
            return oari_error(OAR_ERR_INVALID, "expand: cannot expand shape %s to %s (only size-1 "
                              "dims expand; dim %d)", oari_shape_str(s1, x->ndim, x->shape),
                              oari_shape_str(s2, a->ni, a->i), d);
    }
    c->out[0].dtype = x->dtype;
    c->out[0].ndim = a->ni;
    memcpy(c->out[0].shape, a->i, (size_t)a->ni * sizeof *a->i);
    return 0;
}

static oar_tensor *view_expand(oar_tensor *x, const oari_attrs *a) {
    int64_t st[OAR_MAX_DIMS];
    int lead = a->ni - x->ndim;
    for (int d = 0; d < a->ni; d++)
        st[d] = d < lead || (x->shape[d - lead] == 1 && a->i[d] != 1) ? 0 : x->strides[d - lead];
    return oari_tensor_view(x, a->ni, a->i, st, x->offset);
}

static int grad_expand(oari_grad_ctx *g) {
    g->gin[0] = oari_sum_to(g->gout[0], &g->in_meta[0]);
    return done1(g);
}

const oari_op_def oari_def_expand = {
    .name = "expand", .n_in = 1, .n_out = 1, .fusion = OARI_FUSE_INJECTIVE, .flags = OARI_F_VIEW,
    .infer = infer_expand, .view = view_expand, .grad = grad_expand,
};

/* ---- slice ------------------------------------------------------------------ */

static int64_t slice_len(int64_t start, int64_t end, int64_t step) {
    return end > start ? (end - start + step - 1) / step : 0;
}

static int check_slice_attrs(const char *op, const oari_attrs *a, int nd, const int64_t *shape) {
    if (a->ni < 4 || a->i[0] < 0 || a->i[0] >= nd)
        return oari_error(OAR_ERR_INVALID, "%s: bad attributes (dim)", op);
    int64_t n = shape[a->i[0]];
    if (a->i[3] < 1 || a->i[1] < 0 || a->i[2] < a->i[1] || a->i[2] > n)
        return oari_error(OAR_ERR_INVALID, "%s: bad range [%lld, %lld) step %lld for size %lld", op,
                          (long long)a->i[1], (long long)a->i[2], (long long)a->i[3], (long long)n);
    return 0;
}

static int infer_slice(oari_infer *c) {
    const oar_tensor *x = c->in[0];
    if (check_slice_attrs("slice", c->attrs, x->ndim, x->shape)) return OAR_ERR_INVALID;
    oari_meta_from(&c->out[0], x);
    c->out[0].shape[c->attrs->i[0]] = slice_len(c->attrs->i[1], c->attrs->i[2], c->attrs->i[3]);
    return 0;
}

static oar_tensor *view_slice(oar_tensor *x, const oari_attrs *a) {
    int d = (int)a->i[0];
    int64_t sh[OAR_MAX_DIMS], st[OAR_MAX_DIMS];
    memcpy(sh, x->shape, sizeof sh);
    memcpy(st, x->strides, sizeof st);
    sh[d] = slice_len(a->i[1], a->i[2], a->i[3]);
    st[d] = x->strides[d] * a->i[3];
    int64_t off = x->offset + (sh[d] ? a->i[1] * x->strides[d] : 0);
    return oari_tensor_view(x, x->ndim, sh, st, off);
}

static int grad_slice(oari_grad_ctx *g) {
    oari_attrs a = {.ni = 4 + g->in_meta[0].ndim};
    memcpy(a.i, g->attrs->i, 4 * sizeof *a.i);
    memcpy(a.i + 4, g->in_meta[0].shape, (size_t)g->in_meta[0].ndim * sizeof *a.i);
    g->gin[0] = oari_call1(OARI_OP_slice_backward, g->gout[0], &a);
    return done1(g);
}

const oari_op_def oari_def_slice = {
    .name = "slice", .n_in = 1, .n_out = 1, .fusion = OARI_FUSE_INJECTIVE, .flags = OARI_F_VIEW,
    .infer = infer_slice, .view = view_slice, .grad = grad_slice,
};

/* slice_backward: iattr dim, start, end, step, then the shape of the result. */
static int infer_slice_backward(oari_infer *c) {
    const oar_tensor *gy = c->in[0];
    const oari_attrs *a = c->attrs;
    int nd = a->ni - 4;
    if (nd != gy->ndim) return oari_error(OAR_ERR_INVALID, "slice_backward: rank mismatch");
    if (check_slice_attrs("slice_backward", a, nd, a->i + 4)) return OAR_ERR_INVALID;
    for (int d = 0; d < nd; d++) {
        int64_t want = d == a->i[0] ? slice_len(a->i[1], a->i[2], a->i[3]) : a->i[4 + d];
        if (gy->shape[d] != want)
            return oari_error(OAR_ERR_INVALID, "slice_backward: gradient shape mismatch at dim %d", d);
    }
    c->out[0].dtype = gy->dtype;
    c->out[0].ndim = nd;
    memcpy(c->out[0].shape, a->i + 4, (size_t)nd * sizeof *a->i);
    return 0;
}

static int grad_slice_backward(oari_grad_ctx *g) {
    const int64_t *a = g->attrs->i;
    g->gin[0] = oar_slice(g->gout[0], (int)a[0], a[1], a[2], a[3]);
    return done1(g);
}

const oari_op_def oari_def_slice_backward = {
    .name = "slice_backward", .n_in = 1, .n_out = 1, .fusion = OARI_FUSE_INJECTIVE,
    .infer = infer_slice_backward, .grad = grad_slice_backward,
};

/* ---- diagonal ---------------------------------------------------------------- */

static int check_diag_attrs(const char *op, const oari_attrs *a, int nd) {
    if (a->ni < 3 || nd < 2 || a->i[1] < 0 || a->i[1] >= nd || a->i[2] < 0 || a->i[2] >= nd ||
        a->i[1] == a->i[2])
        return oari_error(OAR_ERR_INVALID, "%s: bad attributes (dims)", op);
    return 0;
}

static int infer_diagonal(oari_infer *c) {
    const oar_tensor *x = c->in[0];
    const oari_attrs *a = c->attrs;
    if (check_diag_attrs("diagonal", a, x->ndim)) return OAR_ERR_INVALID;
    c->out[0].dtype = x->dtype;
    c->out[0].ndim = diag_shape(x->ndim, x->shape, a->i[0], (int)a->i[1], (int)a->i[2],
                                c->out[0].shape);
    return 0;
}

static oar_tensor *view_diagonal(oar_tensor *x, const oari_attrs *a) {
    int64_t off = a->i[0];
    int d1 = (int)a->i[1], d2 = (int)a->i[2];
    int64_t sh[OAR_MAX_DIMS], st[OAR_MAX_DIMS];
    int k = 0;
    for (int d = 0; d < x->ndim; d++) {
        if (d == d1 || d == d2) continue;
        sh[k] = x->shape[d];
        st[k++] = x->strides[d];
    }
    sh[k] = diag_len(x->shape[d1], x->shape[d2], off);
    st[k++] = x->strides[d1] + x->strides[d2];
    int64_t base = x->offset;
    if (sh[k - 1] > 0) base += off >= 0 ? off * x->strides[d2] : -off * x->strides[d1];
    return oari_tensor_view(x, k, sh, st, base);
}

static int grad_diagonal(oari_grad_ctx *g) {
    oari_attrs a = {.ni = 3 + g->in_meta[0].ndim};
    memcpy(a.i, g->attrs->i, 3 * sizeof *a.i);
    memcpy(a.i + 3, g->in_meta[0].shape, (size_t)g->in_meta[0].ndim * sizeof *a.i);
    g->gin[0] = oari_call1(OARI_OP_diagonal_backward, g->gout[0], &a);
    return done1(g);
}

const oari_op_def oari_def_diagonal = {
    .name = "diagonal", .n_in = 1, .n_out = 1, .fusion = OARI_FUSE_INJECTIVE, .flags = OARI_F_VIEW,
    .infer = infer_diagonal, .view = view_diagonal, .grad = grad_diagonal,
};

/* diagonal_backward: iattr offset, dim1, dim2, then the shape of the result. */
static int infer_diagonal_backward(oari_infer *c) {
    const oar_tensor *gy = c->in[0];
    const oari_attrs *a = c->attrs;
    int nd = a->ni - 3;
    if (nd < 2 || nd > OAR_MAX_DIMS || check_diag_attrs("diagonal_backward", a, nd))
        return oari_error(OAR_ERR_INVALID, "diagonal_backward: bad attributes");
    int64_t want[OAR_MAX_DIMS];
    int k = diag_shape(nd, a->i + 3, a->i[0], (int)a->i[1], (int)a->i[2], want);
    if (k != gy->ndim || memcmp(want, gy->shape, (size_t)k * sizeof *want))
        return oari_error(OAR_ERR_INVALID, "diagonal_backward: gradient shape mismatch");
    c->out[0].dtype = gy->dtype;
    c->out[0].ndim = nd;
    memcpy(c->out[0].shape, a->i + 3, (size_t)nd * sizeof *a->i);
    return 0;
}

static int grad_diagonal_backward(oari_grad_ctx *g) {
    const int64_t *a = g->attrs->i;
    g->gin[0] = oar_diagonal(g->gout[0], a[0], (int)a[1], (int)a[2]);
    return done1(g);
}

const oari_op_def oari_def_diagonal_backward = {
    .name = "diagonal_backward", .n_in = 1, .n_out = 1, .fusion = OARI_FUSE_INJECTIVE,
    .infer = infer_diagonal_backward, .grad = grad_diagonal_backward,
};

/* ---- concat ------------------------------------------------------------------- */

static int infer_concat(oari_infer *c) {
    const oar_tensor *x0 = c->in[0];
    int dim = c->attrs->ni ? (int)c->attrs->i[0] : -1;
    char s1[200], s2[200];
    if (x0->ndim == 0)
        return oari_error(OAR_ERR_INVALID, "concat: zero-dimensional tensor (at position 0) "
                          "cannot be concatenated");
    if (dim < 0 || dim >= x0->ndim)
        return oari_error(OAR_ERR_INVALID, "concat: dim %d out of range for rank %d", dim, x0->ndim);
    int64_t total = 0;
    for (int i = 0; i < c->n_in; i++) {
        const oar_tensor *x = c->in[i];
        bool ok = x->ndim == x0->ndim;
        for (int d = 0; ok && d < x0->ndim; d++) ok = d == dim || x->shape[d] == x0->shape[d];
        if (!ok)
            return oari_error(OAR_ERR_INVALID, "concat: shapes must match except in dim %d, got %s "
                              "(input 0) and %s (input %d)", dim,
                              oari_shape_str(s1, x0->ndim, x0->shape),
                              oari_shape_str(s2, x->ndim, x->shape), i);
        total += x->shape[dim];
    }
    oar_dtype d = oari_result_type(c->n_in, c->in);
    for (int i = 0; i < c->n_in; i++) c->in_dtype[i] = d;
    c->kernel_dtype = d;
    oari_meta_from(&c->out[0], x0);
    c->out[0].dtype = d;
    c->out[0].shape[dim] = total;
    return 0;
}

static int grad_concat(oari_grad_ctx *g) {
    int dim = (int)g->attrs->i[0];
    int64_t off = 0;
    for (int i = 0; i < g->n_in; i++) {
        int64_t n = g->in_meta[i].shape[dim];
        if (g->needs[i] && !(g->gin[i] = oar_slice(g->gout[0], dim, off, off + n, 1)))
            return oari_fail_status();
        off += n;
    }
    return 0;
}

const oari_op_def oari_def_concat = {
    .name = "concat", .n_in = -1, .n_out = 1, .fusion = OARI_FUSE_INJECTIVE,
    .infer = infer_concat, .grad = grad_concat,
};

/* ---- pad -------------------------------------------------------------------- */

/* iattr: mode, then (before, after) pairs from the last dim. For
 * pad_backward the input is the padded gradient and the output unpadded. */
static int infer_pad_common(oari_infer *c, bool backward) {
    const oar_tensor *x = c->in[0];
    const oari_attrs *a = c->attrs;
    char s1[200];
    int np = (a->ni - 1) / 2;
    if (a->ni < 1 || (a->ni - 1) % 2 || np > x->ndim)
        return oari_error(OAR_ERR_INVALID, "%s: %d pad values for a tensor of rank %d", c->op,
                          a->ni - 1, x->ndim);
    int64_t mode = a->i[0];
    if (mode < 0 || mode > 2 || (backward && mode == 0))
        return oari_error(OAR_ERR_INVALID, "%s: invalid mode %lld", c->op, (long long)mode);
    oari_meta_from(&c->out[0], x);
    for (int k = 0; k < np; k++) {
        int d = x->ndim - 1 - k;
        int64_t before = a->i[1 + 2 * k], after = a->i[2 + 2 * k];
        int64_t n = backward ? x->shape[d] - before - after : x->shape[d];
        int64_t m = backward ? x->shape[d] : n + before + after;
        if (n < 0 || m < 0 || (mode != 0 && (n == 0 || m == 0) && (before || after)))
            return oari_error(OAR_ERR_INVALID, "%s: padding (%lld, %lld) of dim %d of input %s gives "
                              "an invalid size", c->op, (long long)before, (long long)after, d,
                              oari_shape_str(s1, x->ndim, x->shape));
        if (mode == 1 && (before >= n || after >= n))
            return oari_error(OAR_ERR_INVALID, "%s: padding size should be less than the "
                              "corresponding input dimension, but got padding (%lld, %lld) at "
                              "dim %d of size %lld", c->op, (long long)before, (long long)after, d,
                              (long long)n);
        c->out[0].shape[d] = backward ? n : m;
    }
    if (backward && !(oar_dtype_is_float(x->dtype) || oar_dtype_is_complex(x->dtype)))
        return oari_error(OAR_ERR_INVALID, "%s: expected a floating or complex gradient, got %s",
                          c->op, oar_dtype_name(x->dtype));
    return 0;
}

static int infer_pad(oari_infer *c) { return infer_pad_common(c, false); }
static int infer_pad_backward(oari_infer *c) { return infer_pad_common(c, true); }

static int grad_pad(oari_grad_ctx *g) {
    const oari_attrs *a = g->attrs;
    if (a->i[0] == OAR_PAD_CONSTANT) {
        int64_t neg[OARI_MAX_IATTR];
        for (int k = 1; k < a->ni; k++) neg[k - 1] = -a->i[k];
        g->gin[0] = oar_pad(g->gout[0], a->ni - 1, neg, OAR_PAD_CONSTANT, 0.0);
    } else {
        g->gin[0] = oari_call1(OARI_OP_pad_backward, g->gout[0], a);
    }
    return done1(g);
}

static int grad_pad_backward(oari_grad_ctx *g) {
    const oari_attrs *a = g->attrs;
    g->gin[0] = oar_pad(g->gout[0], a->ni - 1, a->i + 1, (oar_pad_mode)a->i[0], 0.0);
    return done1(g);
}

const oari_op_def oari_def_pad = {
    .name = "pad", .n_in = 1, .n_out = 1, .fusion = OARI_FUSE_INJECTIVE,
    .infer = infer_pad, .grad = grad_pad,
};
const oari_op_def oari_def_pad_backward = {
    .name = "pad_backward", .n_in = 1, .n_out = 1, .fusion = OARI_FUSE_OPAQUE,
    .infer = infer_pad_backward, .grad = grad_pad_backward,
};

/* ---- flip, roll, tril, triu ---------------------------------------------------- */

static int infer_same(oari_infer *c) {
    oari_meta_from(&c->out[0], c->in[0]);
    return 0;
}

static int infer_flip(oari_infer *c) {
    int64_t mask = c->attrs->ni ? c->attrs->i[0] : 0;
    if (mask < 0 || mask >= ((int64_t)1 << (c->in[0]->ndim > 0 ? c->in[0]->ndim : 1)))
        return oari_error(OAR_ERR_INVALID, "flip: bad dim mask %lld", (long long)mask);
    return infer_same(c);
}

static int grad_flip(oari_grad_ctx *g) {
    g->gin[0] = oari_call1(OARI_OP_flip, g->gout[0], g->attrs);
    return done1(g);
}

static int infer_roll(oari_infer *c) {
    const oari_attrs *a = c->attrs;
    if (a->ni % 2) return oari_error(OAR_ERR_INVALID, "roll: attributes must be (shift, dim) pairs");
    for (int k = 0; k < a->ni; k += 2)
        if (a->i[k + 1] < 0 || a->i[k + 1] >= c->in[0]->ndim)
            return oari_error(OAR_ERR_INVALID, "roll: dim %lld out of range", (long long)a->i[k + 1]);
    return infer_same(c);
}

static int grad_roll(oari_grad_ctx *g) {
    oari_attrs a = *g->attrs;
    for (int k = 0; k < a.ni; k += 2) a.i[k] = -a.i[k];
    g->gin[0] = oari_call1(OARI_OP_roll, g->gout[0], &a);
    return done1(g);
}

static int infer_tri(oari_infer *c) {
    if (c->in[0]->ndim < 2)
        return oari_error(OAR_ERR_INVALID, "%s: input tensor must have at least 2 dimensions, got %d",
                          c->op, c->in[0]->ndim);
    if (c->attrs->ni != 1) return oari_error(OAR_ERR_INVALID, "%s: expected 1 attribute", c->op);
    return infer_same(c);
}

static int grad_tril(oari_grad_ctx *g) {
    g->gin[0] = oar_tril(g->gout[0], g->attrs->i[0]);
    return done1(g);
}
static int grad_triu(oari_grad_ctx *g) {
    g->gin[0] = oar_triu(g->gout[0], g->attrs->i[0]);
    return done1(g);
}

const oari_op_def oari_def_flip = {
    .name = "flip", .n_in = 1, .n_out = 1, .fusion = OARI_FUSE_INJECTIVE,
    .infer = infer_flip, .grad = grad_flip,
};
const oari_op_def oari_def_roll = {
    .name = "roll", .n_in = 1, .n_out = 1, .fusion = OARI_FUSE_INJECTIVE,
    .infer = infer_roll, .grad = grad_roll,
};
const oari_op_def oari_def_tril = {
    .name = "tril", .n_in = 1, .n_out = 1, .fusion = OARI_FUSE_INJECTIVE,
    .infer = infer_tri, .grad = grad_tril,
};
const oari_op_def oari_def_triu = {
    .name = "triu", .n_in = 1, .n_out = 1, .fusion = OARI_FUSE_INJECTIVE,
    .infer = infer_tri, .grad = grad_triu,
};

/* ---- public functions ------------------------------------------------------------ */

static int check_shape_arg(const char *op, int ndim, const int64_t *shape) {
    if (ndim < 0 || ndim > OAR_MAX_DIMS)
        return oari_error(OAR_ERR_INVALID, "%s: rank %d is out of range [0, %d]", op, ndim,
                          OAR_MAX_DIMS);
    if (ndim && !shape) return oari_error(OAR_ERR_INVALID, "%s: shape is NULL", op);
    return 0;
}

static oar_tensor *call_view(oar_tensor *x, int ndim, const int64_t *shape) {
    oari_attrs a = oari_attrs_ints(ndim, shape);
    return oari_call1(OARI_OP_view, x, &a);
}

oar_tensor *oar_reshape(oar_tensor *x, int ndim, const int64_t *shape) {
    if (null_input("reshape", x) || check_shape_arg("reshape", ndim, shape)) return NULL;
    int64_t sh[OAR_MAX_DIMS];
    int infer_at = -1;
    int64_t known = 1;
    char s1[200], s2[200];
    for (int d = 0; d < ndim; d++) {
        sh[d] = shape[d];
        if (shape[d] == -1) {
            if (infer_at >= 0)
                return oari_error(OAR_ERR_INVALID, "reshape: cannot reshape: only one dimension can "
                                  "be inferred (-1), got shape %s", oari_shape_str(s1, ndim, shape)),
                       NULL;
            infer_at = d;
        } else if (shape[d] < 0) {
            return oari_error(OAR_ERR_INVALID, "reshape: cannot reshape: invalid size %lld in shape %s",
                              (long long)shape[d], oari_shape_str(s1, ndim, shape)), NULL;
        } else {
            known = shape[d] && known > INT64_MAX / shape[d] ? -1 : known * shape[d];
            if (known < 0)
                return oari_error(OAR_ERR_INVALID, "reshape: cannot reshape: shape %s overflows",
                                  oari_shape_str(s1, ndim, shape)), NULL;
        }
    }
    if (infer_at >= 0) {
        if (known == 0 || x->numel % known)
            return oari_error(OAR_ERR_INVALID, "reshape: cannot reshape tensor of shape %s into shape "
                              "%s", oari_shape_str(s1, x->ndim, x->shape),
                              oari_shape_str(s2, ndim, shape)), NULL;
        sh[infer_at] = x->numel / known;
        known *= sh[infer_at];
    }
    if (known != x->numel)
        return oari_error(OAR_ERR_INVALID, "reshape: cannot reshape tensor of shape %s (%lld elements) "
                          "into shape %s", oari_shape_str(s1, x->ndim, x->shape),
                          (long long)x->numel, oari_shape_str(s2, ndim, shape)), NULL;
    int64_t st[OAR_MAX_DIMS];
    if (compute_stride(x->ndim, x->shape, x->strides, x->numel, ndim, sh, st))
        return call_view(x, ndim, sh);
    oar_pool *p = oar_pool_push();
    oar_tensor *r = call_view(oar_contiguous(x), ndim, sh);
    return oari_pool_return(p, r);
}

oar_tensor *oar_permute(oar_tensor *x, const int64_t *dims) {
    if (null_input("permute", x)) return NULL;
    if (x->ndim && !dims) return oari_error(OAR_ERR_INVALID, "permute: dims is NULL"), NULL;
    oari_attrs a = {.ni = x->ndim};
    bool seen[OAR_MAX_DIMS] = {0};
    for (int d = 0; d < x->ndim; d++) {
        int w = oari_wrap_dim("permute", dims[d], x->ndim);
        if (w < 0) return NULL;
        if (seen[w])
            return oari_error(OAR_ERR_INVALID, "permute: dim %lld appears more than once",
                              (long long)dims[d]), NULL;
        seen[w] = true;
        a.i[d] = w;
    }
    return oari_call1(OARI_OP_permute, x, &a);
}

oar_tensor *oar_transpose(oar_tensor *x, int dim0, int dim1) {
    if (null_input("transpose", x)) return NULL;
    int a = oari_wrap_dim("transpose", dim0, x->ndim), b = oari_wrap_dim("transpose", dim1, x->ndim);
    if (a < 0 || b < 0) return NULL;
    int64_t perm[OAR_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++) perm[d] = d;
    if (x->ndim) {
        perm[a] = b;
        perm[b] = a;
    }
    return oar_permute(x, perm);
}

oar_tensor *oar_expand(oar_tensor *x, int ndim, const int64_t *shape) {
    if (null_input("expand", x) || check_shape_arg("expand", ndim, shape)) return NULL;
    char s1[200], s2[200];
    if (ndim < x->ndim)
        return oari_error(OAR_ERR_INVALID, "expand: the number of sizes provided (%d) must be at "
                          "least the rank of the tensor (%d, shape %s)", ndim, x->ndim,
                          oari_shape_str(s1, x->ndim, x->shape)), NULL;
    int lead = ndim - x->ndim;
    int64_t sh[OAR_MAX_DIMS];
    for (int d = 0; d < ndim; d++) {
        sh[d] = shape[d];
        if (shape[d] == -1 && d >= lead) sh[d] = x->shape[d - lead];
        if (sh[d] < 0)
            return oari_error(OAR_ERR_INVALID, "expand: invalid size %lld at dim %d of shape %s "
                              "(-1 only keeps an existing dim)", (long long)shape[d], d,
                              oari_shape_str(s2, ndim, shape)), NULL;
    }
    oari_attrs a = oari_attrs_ints(ndim, sh);
    return oari_call1(OARI_OP_expand, x, &a);
}

oar_tensor *oar_squeeze(oar_tensor *x, int dim) {
    if (null_input("squeeze", x)) return NULL;
    int64_t sh[OAR_MAX_DIMS];
    int n = 0;
    if (dim == OAR_DIM_ALL) {
        for (int d = 0; d < x->ndim; d++)
            if (x->shape[d] != 1) sh[n++] = x->shape[d];
    } else {
        int w = oari_wrap_dim("squeeze", dim, x->ndim);
        if (w < 0) return NULL;
        for (int d = 0; d < x->ndim; d++)
            if (d != w || x->shape[d] != 1) sh[n++] = x->shape[d];
    }
    return call_view(x, n, sh);
}

oar_tensor *oar_unsqueeze(oar_tensor *x, int dim) {
    if (null_input("unsqueeze", x)) return NULL;
    if (x->ndim >= OAR_MAX_DIMS)
        return oari_error(OAR_ERR_INVALID, "unsqueeze: rank %d would exceed %d", x->ndim + 1,
                          OAR_MAX_DIMS), NULL;
    int w = oari_wrap_dim("unsqueeze", dim, x->ndim + 1);
    if (w < 0) return NULL;
    int64_t sh[OAR_MAX_DIMS];
    for (int d = 0, k = 0; d <= x->ndim; d++) sh[d] = d == w ? 1 : x->shape[k++];
    return call_view(x, x->ndim + 1, sh);
}

oar_tensor *oar_flatten(oar_tensor *x, int start_dim, int end_dim) {
    if (null_input("flatten", x)) return NULL;
    int s = oari_wrap_dim("flatten", start_dim, x->ndim), e = oari_wrap_dim("flatten", end_dim, x->ndim);
    if (s < 0 || e < 0) return NULL;
    if (s > e)
        return oari_error(OAR_ERR_INVALID, "flatten: start_dim %d comes after end_dim %d", start_dim,
                          end_dim), NULL;
    if (x->ndim == 0) return oar_reshape(x, 1, (const int64_t[]){1});
    int64_t sh[OAR_MAX_DIMS];
    int n = 0;
    for (int d = 0; d < s; d++) sh[n++] = x->shape[d];
    int64_t m = 1;
    for (int d = s; d <= e; d++) m *= x->shape[d];
    sh[n++] = m;
    for (int d = e + 1; d < x->ndim; d++) sh[n++] = x->shape[d];
    return oar_reshape(x, n, sh);
}

oar_tensor *oar_slice(oar_tensor *x, int dim, int64_t start, int64_t end, int64_t step) {
    if (null_input("slice", x)) return NULL;
    if (x->ndim == 0) return oari_error(OAR_ERR_INVALID, "slice: cannot slice a 0-d tensor"), NULL;
    int d = oari_wrap_dim("slice", dim, x->ndim);
    if (d < 0) return NULL;
    if (step <= 0)
        return oari_error(OAR_ERR_INVALID, "slice: step must be positive, got %lld", (long long)step),
               NULL;
    int64_t n = x->shape[d];
    if (start < 0) start = start < -n ? 0 : start + n;
    if (end < 0) end = end < -n ? 0 : end + n;
    if (start > n) start = n;
    if (end > n) end = n;
    if (end < start) end = start;
    oari_attrs a = {.ni = 4, .i = {d, start, end, step}};
    return oari_call1(OARI_OP_slice, x, &a);
}

oar_tensor *oar_diagonal(oar_tensor *x, int64_t offset, int dim1, int dim2) {
    if (null_input("diagonal", x)) return NULL;
    char s1[200];
    if (x->ndim < 2)
        return oari_error(OAR_ERR_INVALID, "diagonal: input of shape %s has fewer than 2 dims",
                          oari_shape_str(s1, x->ndim, x->shape)), NULL;
    int a = oari_wrap_dim("diagonal", dim1, x->ndim), b = oari_wrap_dim("diagonal", dim2, x->ndim);
    if (a < 0 || b < 0) return NULL;
    if (a == b)
        return oari_error(OAR_ERR_INVALID, "diagonal: dim1 and dim2 cannot be identical (%d, %d)",
                          dim1, dim2), NULL;
    oari_attrs at = {.ni = 3, .i = {offset, a, b}};
    return oari_call1(OARI_OP_diagonal, x, &at);
}

oar_tensor *oar_concat(int n, oar_tensor *const *xs, int dim) {
    if (n < 1 || !xs)
        return oari_error(OAR_ERR_INVALID, "concat: expected a non-empty list of tensors"), NULL;
    for (int i = 0; i < n; i++)
        if (!xs[i]) {
            if (!oari_error_pending()) oari_error(OAR_ERR_INVALID, "concat: input %d is NULL", i);
            return NULL;
        }
    oar_pool *p = oar_pool_push();
    /* PyTorch's legacy rule: 1-d empty tensors are skipped beside others. */
    oar_tensor **keep = oari_malloc((size_t)n * sizeof *keep);
    oar_tensor *r = NULL;
    if (!keep) goto out;
    int m = 0;
    for (int i = 0; i < n; i++)
        if (!(xs[i]->ndim == 1 && xs[i]->numel == 0)) keep[m++] = xs[i];
    if (m == 0 || m == n) {
        m = n;
        memcpy(keep, xs, (size_t)n * sizeof *keep);
    }
    for (int i = 0; i < m; i++)
        if (keep[i]->ndim == 0) {
            oari_error(OAR_ERR_INVALID, "concat: zero-dimensional tensor (at position %d) cannot be "
                       "concatenated", i);
            goto out;
        }
    int d = oari_wrap_dim("concat", dim, keep[0]->ndim);
    if (d < 0) goto out;
    oari_attrs a = {.ni = 1, .i = {d}};
    if (m <= OARI_MAX_IN) {
        r = oari_call(OARI_OP_concat, m, keep, &a);
    } else { /* more inputs than one call takes: concat in groups */
        oar_tensor *parts[(OARI_MAX_IN + 1)];
        int np = 0;
        int group = (m + OARI_MAX_IN - 1) / OARI_MAX_IN;
        for (int i = 0; i < m && np <= OARI_MAX_IN; i += group) {
            int k = m - i < group ? m - i : group;
            if (!(parts[np++] = oar_concat(k, keep + i, d))) goto out;
        }
        r = oar_concat(np, parts, d);
    }
out:
    oari_free(keep, (size_t)n * sizeof *keep);
    return oari_pool_return(p, r);
}

oar_tensor *oar_stack(int n, oar_tensor *const *xs, int dim) {
    if (n < 1 || !xs)
        return oari_error(OAR_ERR_INVALID, "stack: expected a non-empty list of tensors"), NULL;
    for (int i = 0; i < n; i++)
        if (!xs[i]) {
            if (!oari_error_pending()) oari_error(OAR_ERR_INVALID, "stack: input %d is NULL", i);
            return NULL;
        }
    char s1[200], s2[200];
    for (int i = 1; i < n; i++)
        if (xs[i]->ndim != xs[0]->ndim ||
            memcmp(xs[i]->shape, xs[0]->shape, (size_t)xs[0]->ndim * sizeof(int64_t)))
            return oari_error(OAR_ERR_INVALID, "stack: expects each tensor to be equal size, but got "
                              "%s at entry 0 and %s at entry %d",
                              oari_shape_str(s1, xs[0]->ndim, xs[0]->shape),
                              oari_shape_str(s2, xs[i]->ndim, xs[i]->shape), i), NULL;
    int d = oari_wrap_dim("stack", dim, xs[0]->ndim + 1);
    if (d < 0) return NULL;
    oar_pool *p = oar_pool_push();
    oar_tensor *r = NULL;
    oar_tensor **u = oari_malloc((size_t)n * sizeof *u);
    if (u) {
        bool ok = true;
        for (int i = 0; i < n && ok; i++) ok = (u[i] = oar_unsqueeze(xs[i], d)) != NULL;
        if (ok) r = oar_concat(n, u, d);
        oari_free(u, (size_t)n * sizeof *u);
    }
    return oari_pool_return(p, r);
}

/* `count` slices of `size` along d (the last may be shorter); writes up to
 * max_out of them and returns count. */
static int split_pieces(const char *op, oar_tensor *x, int64_t size, int64_t count, int d,
                        int max_out, oar_tensor **outs) {
    if (max_out > 0 && !outs) return oari_error(OAR_ERR_INVALID, "%s: outs is NULL", op), -1;
    if (count > INT32_MAX) return oari_error(OAR_ERR_INVALID, "%s: too many pieces", op), -1;
    int64_t n = x->shape[d];
    for (int64_t k = 0; k < count && k < max_out; k++) {
        int64_t s = k * size < n ? k * size : n;
        outs[k] = oar_slice(x, d, s, s + size, 1);
        if (!outs[k]) {
            for (int64_t j = 0; j < k; j++) outs[j] = NULL;
            return -1;
        }
    }
    return (int)count;
}

int oar_split(oar_tensor *x, int64_t split_size, int dim, int max_out, oar_tensor **outs) {
    if (null_input("split", x)) return -1;
    if (x->ndim == 0) return oari_error(OAR_ERR_INVALID, "split: cannot split a 0-d tensor"), -1;
    int d = oari_wrap_dim("split", dim, x->ndim);
    if (d < 0) return -1;
    int64_t n = x->shape[d];
    if (split_size < 0 || (split_size == 0 && n != 0))
        return oari_error(OAR_ERR_INVALID, "split: split_size must be positive, got %lld for a dim of "
                          "size %lld", (long long)split_size, (long long)n), -1;
    int64_t count = n == 0 ? 1 : (n + split_size - 1) / split_size;
    return split_pieces("split", x, split_size, count, d, max_out, outs);
}

int oar_chunk(oar_tensor *x, int chunks, int dim, int max_out, oar_tensor **outs) {
    if (null_input("chunk", x)) return -1;
    if (x->ndim == 0) return oari_error(OAR_ERR_INVALID, "chunk: cannot chunk a 0-d tensor"), -1;
    int d = oari_wrap_dim("chunk", dim, x->ndim);
    if (d < 0) return -1;
    if (chunks <= 0)
        return oari_error(OAR_ERR_INVALID, "chunk: number of chunks must be positive, got %d", chunks),
               -1;
    int64_t n = x->shape[d];
    if (n == 0) return split_pieces("chunk", x, 0, chunks, d, max_out, outs);
    int64_t size = (n + chunks - 1) / chunks;
    return split_pieces("chunk", x, size, (n + size - 1) / size, d, max_out, outs);
}

oar_tensor *oar_pad(oar_tensor *x, int npads, const int64_t *pads, oar_pad_mode mode, double value) {
    if (null_input("pad", x)) return NULL;
    if (npads < 0 || npads % 2 || npads / 2 > x->ndim || (npads && !pads))
        return oari_error(OAR_ERR_INVALID, "pad: expected an even number of pads, at most twice the "
                          "rank %d, got %d", x->ndim, npads), NULL;
    if ((unsigned)mode > OAR_PAD_REPLICATE)
        return oari_error(OAR_ERR_INVALID, "pad: invalid mode %d", (int)mode), NULL;
    oari_attrs a = {.ni = 1 + npads, .nf = 1, .i = {mode}, .f = {value}};
    if (npads) memcpy(a.i + 1, pads, (size_t)npads * sizeof *pads);
    return oari_call1(OARI_OP_pad, x, &a);
}

oar_tensor *oar_flip(oar_tensor *x, int ndims, const int64_t *dims) {
    if (null_input("flip", x)) return NULL;
    if (ndims < 0 || (ndims && !dims))
        return oari_error(OAR_ERR_INVALID, "flip: bad dims list (%d dims)", ndims), NULL;
    int64_t mask = 0;
    for (int k = 0; k < ndims; k++) {
        int d = oari_wrap_dim("flip", dims[k], x->ndim);
        if (d < 0) return NULL;
        if (mask & ((int64_t)1 << d))
            return oari_error(OAR_ERR_INVALID, "flip: dim %d appears multiple times in the list of "
                              "dims", d), NULL;
        mask |= (int64_t)1 << d;
    }
    if (x->ndim == 0) mask = 0;
    oari_attrs a = {.ni = 1, .i = {mask}};
    return oari_call1(OARI_OP_flip, x, &a);
}

oar_tensor *oar_roll(oar_tensor *x, int nshifts, const int64_t *shifts, const int64_t *dims) {
    if (null_input("roll", x)) return NULL;
    if (nshifts < 1 || !shifts)
        return oari_error(OAR_ERR_INVALID, "roll: expected at least one shift"), NULL;
    if (!dims) { /* roll the flattened tensor, as torch.roll without dims */
        if (nshifts != 1)
            return oari_error(OAR_ERR_INVALID, "roll: %d shifts without dims (expected 1)", nshifts),
                   NULL;
        oar_pool *p = oar_pool_push();
        int64_t s = shifts[0], zero = 0;
        oar_tensor *r = oar_reshape(oar_roll(oar_reshape(x, 1, (const int64_t[]){-1}), 1, &s, &zero),
                                    x->ndim, x->shape);
        return oari_pool_return(p, r);
    }
    if (x->ndim == 0) return oari_error(OAR_ERR_INVALID, "roll: cannot roll a 0-d tensor along a dim"), NULL;
    /* one (shift mod size, dim) pair per distinct dim */
    int64_t total[OAR_MAX_DIMS] = {0};
    bool used[OAR_MAX_DIMS] = {0};
    for (int k = 0; k < nshifts; k++) {
        int d = oari_wrap_dim("roll", dims[k], x->ndim);
        if (d < 0) return NULL;
        int64_t n = x->shape[d];
        int64_t s = n ? shifts[k] % n : 0;
        total[d] = n ? ((total[d] + s) % n + n) % n : 0;
        used[d] = true;
    }
    oari_attrs a = {0};
    for (int d = 0; d < x->ndim; d++)
        if (used[d] && total[d]) {
            a.i[a.ni++] = total[d];
            a.i[a.ni++] = d;
        }
    return oari_call1(OARI_OP_roll, x, &a);
}

oar_tensor *oar_repeat(oar_tensor *x, int ndim, const int64_t *repeats) {
    if (null_input("repeat", x) || check_shape_arg("repeat", ndim, repeats)) return NULL;
    if (ndim < x->ndim)
        return oari_error(OAR_ERR_INVALID, "repeat: number of repeat dims (%d) can not be smaller "
                          "than the number of dimensions of the tensor (%d)", ndim, x->ndim), NULL;
    for (int d = 0; d < ndim; d++)
        if (repeats[d] < 0)
            return oari_error(OAR_ERR_INVALID, "repeat: negative repeat %lld at dim %d",
                              (long long)repeats[d], d), NULL;
    int lead = ndim - x->ndim;
    int64_t src[OAR_MAX_DIMS], fin[OAR_MAX_DIMS];
    for (int d = 0; d < ndim; d++) {
        src[d] = d < lead ? 1 : x->shape[d - lead];
        fin[d] = src[d] * repeats[d];
    }
    if (oari_shape_numel("repeat", ndim, fin) < 0) return NULL;
    oar_pool *p = oar_pool_push();
    oar_tensor *r = oar_reshape(x, ndim, src);
    /* Interleave a new dim of size repeats[d] before each dim that needs one
     * (one expand and one copy) when the rank allows, else one dim at a time. */
    int64_t ush[OAR_MAX_DIMS * 2], esh[OAR_MAX_DIMS * 2];
    int nu = 0;
    for (int d = 0; d < ndim; d++) {
        if (repeats[d] != 1 && src[d] != 1) {
            ush[nu] = 1;
            esh[nu++] = repeats[d];
        }
        ush[nu] = src[d];
        esh[nu++] = src[d] == 1 ? repeats[d] : src[d];
    }
    if (nu <= OAR_MAX_DIMS) {
        r = oar_reshape(oar_expand(oar_reshape(r, nu, ush), nu, esh), ndim, fin);
    } else {
        int64_t cur[OAR_MAX_DIMS];
        memcpy(cur, src, sizeof cur);
        for (int d = 0; d < ndim && r; d++) {
            if (repeats[d] == 1) continue;
            int64_t outer = 1, inner = 1;
            for (int k = 0; k < d; k++) outer *= cur[k];
            for (int k = d; k < ndim; k++) inner *= cur[k];
            int64_t s3[3] = {outer, 1, inner}, e3[3] = {outer, repeats[d], inner};
            cur[d] *= repeats[d];
            r = oar_reshape(oar_expand(oar_reshape(r, 3, s3), 3, e3), ndim, cur);
        }
    }
    return oari_pool_return(p, r);
}

oar_tensor *oar_tril(oar_tensor *x, int64_t diagonal) {
    oari_attrs a = {.ni = 1, .i = {diagonal}};
    return oari_call1(OARI_OP_tril, x, &a);
}

oar_tensor *oar_triu(oar_tensor *x, int64_t diagonal) {
    oari_attrs a = {.ni = 1, .i = {diagonal}};
    return oari_call1(OARI_OP_triu, x, &a);
}

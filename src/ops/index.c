/* Indexing and sorting: gather, scatter, scatter_add, index_select,
 * index_add, one_hot, sort and topk (definitions and public functions), and
 * the composite masked_fill. Kernels: src/backends/cpu/cpu_index.c. */
#include "op.h"

#include <stdio.h>
#include <string.h>

/* ---- shape rules -------------------------------------------------------- */

/* Index input i must be i64; i32 is cast to it. */
static int index_dtype(oari_infer *c, int i) {
    oar_dtype d = c->in[i]->dtype;
    if (d == OAR_I64) return 0;
    if (d == OAR_I32) {
        c->in_dtype[i] = OAR_I64;
        return 0;
    }
    return oari_error(OAR_ERR_INVALID, "%s: index must be an int64 or int32 tensor, got %s", c->op,
                      oar_dtype_name(d));
}

/* The op's dim attribute (attrs->i[slot]) normalised against x's rank. */
static int attr_dim(oari_infer *c, int slot, const oar_tensor *x) {
    return oari_wrap_dim(c->op, c->attrs->ni > slot ? c->attrs->i[slot] : 0, x->ndim);
}

static int64_t size_at(const oar_tensor *t, int d) { return t->ndim ? t->shape[d] : 1; }

/* Every index is out of range for an empty dim; said here because a kernel
 * may not run when the output is empty. */
static int check_empty_dim(oari_infer *c, const oar_tensor *x, const oar_tensor *idx, int dim) {
    if (idx->numel && !size_at(x, dim))
        return oari_error(OAR_ERR_INVALID, "%s: index is out of range for dim %d of size 0", c->op,
                          dim);
    return 0;
}

/* gather/scatter: index has x's rank and is no larger than x off `dim`. */
static int check_scatter_gather_index(oari_infer *c, const oar_tensor *x, const oar_tensor *idx,
                                      int dim) {
    char a[200], b[200];
    if (idx->ndim != x->ndim)
        return oari_error(OAR_ERR_INVALID, "%s: index of shape %s must have the same rank as the "
                          "input of shape %s", c->op, oari_shape_str(a, idx->ndim, idx->shape),
                          oari_shape_str(b, x->ndim, x->shape));
    for (int d = 0; d < x->ndim; d++)
        if (d != dim && idx->shape[d] > x->shape[d])
            return oari_error(OAR_ERR_INVALID, "%s: index of shape %s is larger than the input of "
                              "shape %s at dim %d", c->op, oari_shape_str(a, idx->ndim, idx->shape),
                              oari_shape_str(b, x->ndim, x->shape), d);
    return check_empty_dim(c, x, idx, dim);
}

static int infer_gather(oari_infer *c) {
    const oar_tensor *x = c->in[0], *idx = c->in[1];
    int dim = attr_dim(c, 0, x);
    if (dim < 0 || index_dtype(c, 1) || check_scatter_gather_index(c, x, idx, dim))
        return OAR_ERR_INVALID;
    oari_meta_from(&c->out[0], idx);
    c->out[0].dtype = x->dtype;
    c->kernel_dtype = x->dtype;
    return 0;
}

/* scatter, scatter_add: src has the index's rank and is at least as large,
 * or is 0-d (one value written everywhere); it is cast to x's dtype. */
static int infer_scatter(oari_infer *c) {
    const oar_tensor *x = c->in[0], *idx = c->in[1], *src = c->in[2];
    int dim = attr_dim(c, 0, x);
    if (dim < 0 || index_dtype(c, 1) || check_scatter_gather_index(c, x, idx, dim))
        return OAR_ERR_INVALID;
    if (src->ndim) {
        char a[200], b[200];
        bool ok = src->ndim == idx->ndim;
        for (int d = 0; ok && d < idx->ndim; d++) ok = idx->shape[d] <= src->shape[d];
        if (!ok)
            return oari_error(OAR_ERR_INVALID, "%s: src of shape %s must have the index's rank and "
                              "be at least as large as the index of shape %s", c->op,
                              oari_shape_str(a, src->ndim, src->shape),
                              oari_shape_str(b, idx->ndim, idx->shape));
    }
    c->in_dtype[2] = x->dtype;
    oari_meta_from(&c->out[0], x);
    c->kernel_dtype = x->dtype;
    return 0;
}

static int check_vector_index(oari_infer *c, const oar_tensor *idx) {
    if (idx->ndim > 1) {
        char a[200];
        return oari_error(OAR_ERR_INVALID, "%s: index must be 0-d or 1-d, got shape %s", c->op,
                          oari_shape_str(a, idx->ndim, idx->shape));
    }
    return index_dtype(c, 1);
}

static int infer_index_select(oari_infer *c) {
    const oar_tensor *x = c->in[0], *idx = c->in[1];
    int dim = attr_dim(c, 0, x);
    if (dim < 0 || check_vector_index(c, idx) || check_empty_dim(c, x, idx, dim))
        return OAR_ERR_INVALID;
    oari_meta_from(&c->out[0], x);
    if (x->ndim) c->out[0].shape[dim] = idx->numel;
    else if (idx->numel != 1)
        return oari_error(OAR_ERR_INVALID, "%s: a 0-d input takes one index, got %lld", c->op,
                          (long long)idx->numel);
    c->kernel_dtype = x->dtype;
    return 0;
}

static int infer_index_add(oari_infer *c) {
    const oar_tensor *x = c->in[0], *idx = c->in[1], *src = c->in[2];
    int dim = attr_dim(c, 0, x);
    if (dim < 0 || check_vector_index(c, idx) || check_empty_dim(c, x, idx, dim))
        return OAR_ERR_INVALID;
    bool ok = src->ndim == x->ndim && idx->numel == size_at(src, dim);
    for (int d = 0; ok && d < x->ndim; d++) ok = d == dim || src->shape[d] == x->shape[d];
    if (!ok) {
        char a[200], b[200];
        return oari_error(OAR_ERR_INVALID, "%s: src of shape %s must match the input of shape %s "
                          "except at dim %d, whose size must be the index's %lld", c->op,
                          oari_shape_str(a, src->ndim, src->shape),
                          oari_shape_str(b, x->ndim, x->shape), dim, (long long)idx->numel);
    }
    c->in_dtype[2] = x->dtype;
    oari_meta_from(&c->out[0], x);
    c->kernel_dtype = x->dtype;
    return 0;
}

static int infer_one_hot(oari_infer *c) {
    const oar_tensor *idx = c->in[0];
    int64_t n = c->attrs->ni ? c->attrs->i[0] : -1;
    if (idx->dtype != OAR_I64 && idx->dtype != OAR_I32)
        return oari_error(OAR_ERR_INVALID,
                          "one_hot: index must be an int64 or int32 tensor, got %s",
                          oar_dtype_name(idx->dtype));
    if (n < 0) return oari_error(OAR_ERR_INVALID, "one_hot: num_classes %lld < 0", (long long)n);
    if (idx->ndim >= OAR_MAX_DIMS)
        return oari_error(OAR_ERR_INVALID, "one_hot: index of rank %d leaves no room for the class "
                          "dim (at most %d dims)", idx->ndim, OAR_MAX_DIMS);
    c->in_dtype[0] = OAR_I64;
    oari_meta_from(&c->out[0], idx);
    c->out[0].shape[c->out[0].ndim++] = n;
    c->out[0].dtype = OAR_I64;
    c->kernel_dtype = OAR_I64;
    return 0;
}

static int check_sortable(oari_infer *c, const oar_tensor *x) {
    if (oar_dtype_is_complex(x->dtype))
        return oari_error(OAR_ERR_INVALID, "%s: %s tensors have no order", c->op,
                          oar_dtype_name(x->dtype));
    return 0;
}

static int infer_sort(oari_infer *c) {
    const oar_tensor *x = c->in[0];
    if (attr_dim(c, 0, x) < 0 || check_sortable(c, x)) return OAR_ERR_INVALID;
    oari_meta_from(&c->out[0], x);
    oari_meta_from(&c->out[1], x);
    c->out[1].dtype = OAR_I64;
    return 0;
}

static int infer_topk(oari_infer *c) {
    const oar_tensor *x = c->in[0];
    int dim = attr_dim(c, 1, x);
    if (dim < 0 || check_sortable(c, x)) return OAR_ERR_INVALID;
    int64_t k = c->attrs->i[0], n = size_at(x, dim);
    if (k < 0 || k > n || (!x->ndim && k != 1))
        return oari_error(OAR_ERR_INVALID, "topk: k %lld is out of range for dim %d of size %lld",
                          (long long)k, dim, (long long)n);
    oari_meta_from(&c->out[0], x);
    if (x->ndim) c->out[0].shape[dim] = k;
    c->out[1] = c->out[0];
    c->out[1].dtype = OAR_I64;
    return 0;
}

/* ---- gradient rules ------------------------------------------------------ */

static oar_tensor *adopt_same(oar_tensor *g) { return oari_pool_adopt(oar_tensor_retain(g)); }

/* The gradient of src given gather(gout) of the index's shape: zero-padded
 * up to src's shape when src is larger, summed when src is 0-d. */
static oar_tensor *src_grad(oar_tensor *gathered, const oari_meta *src) {
    if (!gathered || !src->ndim) return oari_sum_to(gathered, src);
    int64_t pads[2 * OAR_MAX_DIMS];
    bool any = false;
    for (int d = 0; d < src->ndim; d++) {
        int from_last = src->ndim - 1 - d;
        pads[2 * from_last] = 0;
        pads[2 * from_last + 1] = src->shape[d] - gathered->shape[d];
        any = any || pads[2 * from_last + 1];
    }
    if (!any) return gathered;
    return oar_pad(gathered, 2 * src->ndim, pads, OAR_PAD_CONSTANT, 0.0);
}

#define DIM(g) ((int)(g)->attrs->i[0])

static int grad_gather(oari_grad_ctx *g) {
    oar_tensor *gy = g->gout[0];
    if (!gy || !g->needs[0]) return 0;
    const oari_meta *m = &g->in_meta[0];
    oar_tensor *zeros = oar_full_on(gy->dtype, m->ndim, m->shape, 0, oar_tensor_device(gy));
    g->gin[0] = oar_scatter_add(zeros, DIM(g), g->in[1], gy);
    return g->gin[0] ? 0 : oari_fail_status();
}

static int grad_scatter(oari_grad_ctx *g) {
    oar_tensor *gy = g->gout[0];
    if (!gy) return 0;
    if (g->needs[0] &&
        !(g->gin[0] = oar_scatter(gy, DIM(g), g->in[1], oar_scalar_of(0.0, gy->dtype))))
        return oari_fail_status();
    if (g->needs[2] && !(g->gin[2] = src_grad(oar_gather(gy, DIM(g), g->in[1]), &g->in_meta[2])))
        return oari_fail_status();
    return 0;
}

static int grad_scatter_add(oari_grad_ctx *g) {
    oar_tensor *gy = g->gout[0];
    if (!gy) return 0;
    if (g->needs[0] && !(g->gin[0] = adopt_same(gy))) return oari_fail_status();
    if (g->needs[2] && !(g->gin[2] = src_grad(oar_gather(gy, DIM(g), g->in[1]), &g->in_meta[2])))
        return oari_fail_status();
    return 0;
}

static int grad_index_select(oari_grad_ctx *g) {
    oar_tensor *gy = g->gout[0];
    if (!gy || !g->needs[0]) return 0;
    const oari_meta *m = &g->in_meta[0];
    oar_tensor *zeros = oar_full_on(gy->dtype, m->ndim, m->shape, 0, oar_tensor_device(gy));
    g->gin[0] = oar_index_add(zeros, DIM(g), g->in[1], gy);
    return g->gin[0] ? 0 : oari_fail_status();
}

static int grad_index_add(oari_grad_ctx *g) {
    oar_tensor *gy = g->gout[0];
    if (!gy) return 0;
    if (g->needs[0] && !(g->gin[0] = adopt_same(gy))) return oari_fail_status();
    if (g->needs[2] && !(g->gin[2] = oar_index_select(gy, DIM(g), g->in[1]))) return oari_fail_status();
    return 0;
}

/* sort and topk: the values' gradient goes back to where they came from. */
static int grad_select_values(oari_grad_ctx *g, int dim) {
    oar_tensor *gy = g->gout[0];
    if (!gy || !g->needs[0]) return 0;
    const oari_meta *m = &g->in_meta[0];
    oar_tensor *zeros = oar_full_on(gy->dtype, m->ndim, m->shape, 0, oar_tensor_device(gy));
    g->gin[0] = oar_scatter(zeros, dim, g->out[1], gy);
    return g->gin[0] ? 0 : oari_fail_status();
}

static int grad_sort(oari_grad_ctx *g) { return grad_select_values(g, (int)g->attrs->i[0]); }
static int grad_topk(oari_grad_ctx *g) { return grad_select_values(g, (int)g->attrs->i[1]); }

const oari_op_def oari_def_gather = {
    .name = "gather", .n_in = 2, .n_out = 1, .fusion = OARI_FUSE_INJECTIVE,
    .saved = OARI_SAVE_IN(1), .infer = infer_gather, .grad = grad_gather,
};
const oari_op_def oari_def_scatter = {
    .name = "scatter", .n_in = 3, .n_out = 1, .fusion = OARI_FUSE_OPAQUE,
    .saved = OARI_SAVE_IN(1), .infer = infer_scatter, .grad = grad_scatter,
};
const oari_op_def oari_def_scatter_add = {
    .name = "scatter_add", .n_in = 3, .n_out = 1, .fusion = OARI_FUSE_OPAQUE,
    .saved = OARI_SAVE_IN(1), .infer = infer_scatter, .grad = grad_scatter_add,
};
const oari_op_def oari_def_index_select = {
    .name = "index_select", .n_in = 2, .n_out = 1, .fusion = OARI_FUSE_INJECTIVE,
    .saved = OARI_SAVE_IN(1), .infer = infer_index_select, .grad = grad_index_select,
};
const oari_op_def oari_def_index_add = {
    .name = "index_add", .n_in = 3, .n_out = 1, .fusion = OARI_FUSE_OPAQUE,
    .saved = OARI_SAVE_IN(1), .infer = infer_index_add, .grad = grad_index_add,
};
const oari_op_def oari_def_one_hot = {
    .name = "one_hot", .n_in = 1, .n_out = 1, .fusion = OARI_FUSE_OPAQUE,
    .flags = OARI_F_NONDIFF, .infer = infer_one_hot,
};
const oari_op_def oari_def_sort = {
    .name = "sort", .n_in = 1, .n_out = 2, .fusion = OARI_FUSE_OPAQUE,
    .saved = OARI_SAVE_OUT(1), .infer = infer_sort, .grad = grad_sort,
};
const oari_op_def oari_def_topk = {
    .name = "topk", .n_in = 1, .n_out = 2, .fusion = OARI_FUSE_OPAQUE,
    .saved = OARI_SAVE_OUT(1), .infer = infer_topk, .grad = grad_topk,
};

/* ---- public functions ----------------------------------------------------- */

/* The dim attribute, normalised when x is known (dispatch reports NULLs). */
static int64_t wrap_dim(const char *op, const oar_tensor *x, int dim, bool *bad) {
    if (!x) return dim;
    int d = oari_wrap_dim(op, dim, x->ndim);
    *bad = d < 0;
    return d;
}

static oar_tensor *call_dim(oari_op op, int n_in, oar_tensor *const *in, int dim) {
    bool bad = false;
    oari_attrs a = {.ni = 1, .i = {wrap_dim(oari_op_name(op), in[0], dim, &bad)}};
    if (bad) return NULL;
    return oari_call(op, n_in, in, &a);
}

oar_tensor *oar_gather(oar_tensor *x, int dim, oar_tensor *index) {
    oar_tensor *in[2] = {x, index};
    return call_dim(OARI_OP_gather, 2, in, dim);
}

oar_tensor *oar_scatter(oar_tensor *x, int dim, oar_tensor *index, oar_tensor *src) {
    oar_tensor *in[3] = {x, index, src};
    return call_dim(OARI_OP_scatter, 3, in, dim);
}

oar_tensor *oar_scatter_add(oar_tensor *x, int dim, oar_tensor *index, oar_tensor *src) {
    oar_tensor *in[3] = {x, index, src};
    return call_dim(OARI_OP_scatter_add, 3, in, dim);
}

oar_tensor *oar_index_select(oar_tensor *x, int dim, oar_tensor *index) {
    oar_tensor *in[2] = {x, index};
    return call_dim(OARI_OP_index_select, 2, in, dim);
}

oar_tensor *oar_index_add(oar_tensor *x, int dim, oar_tensor *index, oar_tensor *src) {
    oar_tensor *in[3] = {x, index, src};
    return call_dim(OARI_OP_index_add, 3, in, dim);
}

oar_tensor *oar_masked_fill(oar_tensor *x, oar_tensor *mask, double value) {
    if (!x || !mask) {
        if (!oari_error_pending())
            oari_error(OAR_ERR_INVALID, "masked_fill: %s is NULL", x ? "mask" : "input");
        return NULL;
    }
    if (mask->dtype != OAR_BOOL)
        return oari_error(OAR_ERR_INVALID, "masked_fill: mask must be a bool tensor, got %s",
                          oar_dtype_name(mask->dtype)), NULL;
    oar_pool *p = oar_pool_push();
    oar_tensor *r = oar_where(mask, oar_scalar_of(value, x->dtype), x);
    return oari_pool_return(p, r);
}

/* The largest class in index, for num_classes -1 (needs concrete values). */
static int64_t max_class(oar_tensor *index) {
    if (index->dtype != OAR_I64 && index->dtype != OAR_I32)
        return oari_error(OAR_ERR_INVALID,
                          "one_hot: index must be an int64 or int32 tensor, got %s",
                          oar_dtype_name(index->dtype)), -1;
    if (!index->storage)
        return oari_error(OAR_ERR_STATE, "one_hot: num_classes -1 needs the index's values; pass "
                          "num_classes when tracing"), -1;
    if (!index->numel)
        return oari_error(OAR_ERR_INVALID, "one_hot: cannot infer the number of classes from an "
                          "empty index; pass num_classes"), -1;
    size_t nbytes = (size_t)index->numel * sizeof(int64_t);
    int64_t *v = oari_malloc(nbytes), best = -1;
    if (!v) return -1;
    oar_pool *p = oar_pool_push();
    oari_no_grad_push();
    int st = oar_tensor_to_host(oar_cast(index, OAR_I64), v, nbytes);
    oari_no_grad_pop();
    oar_pool_pop(p);
    for (int64_t i = 0; !st && i < index->numel; i++) {
        if (v[i] < 0) {
            st = oari_error(OAR_ERR_INVALID, "one_hot: class values must be non-negative, got %lld",
                            (long long)v[i]);
            break;
        }
        if (v[i] > best) best = v[i];
    }
    oari_free(v, nbytes);
    return st ? -1 : best;
}

oar_tensor *oar_one_hot(oar_tensor *index, int64_t num_classes) {
    if (num_classes < -1)
        return oari_error(OAR_ERR_INVALID, "one_hot: num_classes %lld must be -1 or >= 0",
                          (long long)num_classes), NULL;
    if (num_classes == -1 && index) {
        int64_t m = max_class(index);
        if (m < 0) return NULL;
        num_classes = m + 1;
    }
    oari_attrs a = {.ni = 1, .i = {num_classes}};
    return oari_call1(OARI_OP_one_hot, index, &a);
}

/* Runs a values+indices op; *indices (if asked) gets the i64 indices. */
static oar_tensor *call_two(oari_op op, oar_tensor *x, const oari_attrs *a, oar_tensor **indices) {
    oar_tensor *out[OARI_MAX_OUT];
    if (indices) *indices = NULL;
    if (oari_dispatch(op, 1, &x, a, out)) return NULL;
    if (!indices) oar_tensor_release(out[1]);
    oar_tensor *values = oari_pool_adopt(out[0]);
    if (!values) {
        if (indices) oar_tensor_release(out[1]);
        return NULL;
    }
    if (indices && !(*indices = oari_pool_adopt(out[1]))) return NULL;
    return values;
}

oar_tensor *oar_sort(oar_tensor *x, int dim, bool descending, oar_tensor **indices) {
    bool bad = false;
    oari_attrs a = {.ni = 3, .i = {wrap_dim("sort", x, dim, &bad), descending, 1}};
    if (bad) {
        if (indices) *indices = NULL;
        return NULL;
    }
    return call_two(OARI_OP_sort, x, &a, indices);
}

oar_tensor *oar_topk(oar_tensor *x, int64_t k, int dim, bool largest, bool sorted,
                     oar_tensor **indices) {
    bool bad = false;
    oari_attrs a = {.ni = 4, .i = {k, wrap_dim("topk", x, dim, &bad), largest, sorted}};
    if (bad) {
        if (indices) *indices = NULL;
        return NULL;
    }
    return call_two(OARI_OP_topk, x, &a, indices);
}

/* Creation, copies, casts and random draws: the definitions of fill, copy,
 * cast, contiguous and the random ops, and the public functions built on
 * them. */
#include "op.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- shape rules -------------------------------------------------------- */

static int infer_inplace(oari_infer *c) {
    oari_meta_from(&c->out[0], c->in[0]);
    return 0;
}

static int infer_copy(oari_infer *c) {
    const oar_tensor *dst = c->in[0], *src = c->in[1];
    int64_t shape[OAR_MAX_DIMS];
    int nd = oari_broadcast_shapes("copy_", dst->ndim, dst->shape, src->ndim, src->shape, shape);
    if (nd < 0) return OAR_ERR_INVALID;
    if (nd != dst->ndim || memcmp(shape, dst->shape, (size_t)nd * sizeof *shape)) {
        char a[200], b[200];
        return oari_error(OAR_ERR_INVALID, "copy_: source of shape %s does not broadcast to the "
                          "destination's shape %s", oari_shape_str(a, src->ndim, src->shape),
                          oari_shape_str(b, dst->ndim, dst->shape));
    }
    oari_meta_from(&c->out[0], dst);
    c->kernel_dtype = dst->dtype;
    return 0;
}

static int infer_cast(oari_infer *c) {
    int64_t d = c->attrs->ni ? c->attrs->i[0] : -1;
    if (d < 0 || d >= OAR_DTYPE_COUNT)
        return oari_error(OAR_ERR_INVALID, "cast: invalid dtype %lld", (long long)d);
    oari_meta_from(&c->out[0], c->in[0]);
    c->out[0].dtype = (oar_dtype)d;
    c->kernel_dtype = (oar_dtype)d;
    return 0;
}

static int infer_same(oari_infer *c) {
    oari_meta_from(&c->out[0], c->in[0]);
    return 0;
}

static int infer_random_float(oari_infer *c) {
    if (!oar_dtype_is_float(c->in[0]->dtype))
        return oari_error(OAR_ERR_INVALID, "%s: expected a floating tensor, got %s", c->op,
                          oar_dtype_name(c->in[0]->dtype));
    return infer_inplace(c);
}

static int infer_randint(oari_infer *c) {
    oar_dtype d = c->in[0]->dtype;
    if (d == OAR_BOOL || oar_dtype_is_complex(d) || d == OAR_F16 || d == OAR_BF16)
        return oari_error(OAR_ERR_INVALID, "randint: unsupported dtype %s", oar_dtype_name(d));
    return infer_inplace(c);
}

/* ---- gradient rules ------------------------------------------------------ */

static int grad_cast(oari_grad_ctx *g) {
    /* The gradient goes back in the input's dtype; complex -> real keeps the real part. */
    oar_tensor *gy = g->gout[0];
    oar_dtype want = g->in_meta[0].dtype;
    if (oar_dtype_is_complex(gy->dtype) && !oar_dtype_is_complex(want)) gy = oar_real(gy);
    g->gin[0] = oar_cast(gy, want);
    return g->gin[0] ? 0 : oari_fail_status();
}

static int grad_identity(oari_grad_ctx *g) {
    g->gin[0] = oar_tensor_retain(g->gout[0]);
    return oari_pool_adopt(g->gin[0]) ? 0 : oari_fail_status();
}

const oari_op_def oari_def_fill = {
    .name = "fill", .n_in = 1, .n_out = 1, .fusion = OARI_FUSE_ELEMWISE,
    .flags = OARI_F_INPLACE | OARI_F_NONDIFF, .infer = infer_inplace,
};
const oari_op_def oari_def_copy = {
    .name = "copy", .n_in = 2, .n_out = 1, .fusion = OARI_FUSE_BROADCAST,
    .flags = OARI_F_INPLACE | OARI_F_BROADCAST | OARI_F_NONDIFF, .infer = infer_copy,
};
const oari_op_def oari_def_cast = {
    .name = "cast", .n_in = 1, .n_out = 1, .fusion = OARI_FUSE_ELEMWISE,
    .infer = infer_cast, .grad = grad_cast,
};
const oari_op_def oari_def_contiguous = {
    .name = "contiguous", .n_in = 1, .n_out = 1, .fusion = OARI_FUSE_INJECTIVE,
    .infer = infer_same, .grad = grad_identity,
};
const oari_op_def oari_def_uniform = {
    .name = "uniform", .n_in = 1, .n_out = 1, .fusion = OARI_FUSE_OPAQUE,
    .flags = OARI_F_INPLACE | OARI_F_RANDOM | OARI_F_NONDIFF, .infer = infer_random_float,
};
const oari_op_def oari_def_normal = {
    .name = "normal", .n_in = 1, .n_out = 1, .fusion = OARI_FUSE_OPAQUE,
    .flags = OARI_F_INPLACE | OARI_F_RANDOM | OARI_F_NONDIFF, .infer = infer_random_float,
};
const oari_op_def oari_def_randint = {
    .name = "randint", .n_in = 1, .n_out = 1, .fusion = OARI_FUSE_OPAQUE,
    .flags = OARI_F_INPLACE | OARI_F_RANDOM | OARI_F_NONDIFF, .infer = infer_randint,
};
const oari_op_def oari_def_bernoulli = {
    .name = "bernoulli", .n_in = 1, .n_out = 1, .fusion = OARI_FUSE_OPAQUE,
    .flags = OARI_F_RANDOM | OARI_F_NONDIFF, .infer = infer_random_float,
};

/* ---- the generator -------------------------------------------------------- */

static uint64_t gen_seed = 0x853c49e6748fea9bULL;
static uint64_t gen_offset;

void oar_manual_seed(uint64_t seed) {
    __atomic_store_n(&gen_seed, seed, __ATOMIC_RELAXED);
    __atomic_store_n(&gen_offset, 0, __ATOMIC_RELAXED);
}

void oari_rng_get(uint64_t *seed, uint64_t *offset) {
    *seed = __atomic_load_n(&gen_seed, __ATOMIC_RELAXED);
    *offset = __atomic_load_n(&gen_offset, __ATOMIC_RELAXED);
}

void oari_rng_set(uint64_t seed, uint64_t offset) {
    __atomic_store_n(&gen_seed, seed, __ATOMIC_RELAXED);
    __atomic_store_n(&gen_offset, offset, __ATOMIC_RELAXED);
}

/* Reserves n counters of the global stream. */
static void gen_take(int64_t n, int64_t *seed, int64_t *offset) {
    *seed = (int64_t)__atomic_load_n(&gen_seed, __ATOMIC_RELAXED);
    *offset = (int64_t)__atomic_fetch_add(&gen_offset, (uint64_t)n, __ATOMIC_RELAXED);
}

static int random_inplace(oari_op op, oar_tensor *t, double f0, double f1, int64_t lo, int64_t hi) {
    if (!t) {
        if (!oari_error_pending()) oari_error(OAR_ERR_INVALID, "%s: tensor is NULL", oari_op_name(op));
        return OAR_ERR_INVALID;
    }
    oari_attrs a = {.ni = 4, .nf = 2, .f = {f0, f1}};
    gen_take(t->numel, &a.i[0], &a.i[1]);
    a.i[2] = lo;
    a.i[3] = hi;
    oar_tensor *r = NULL;
    int st = oari_dispatch(op, 1, &t, &a, &r);
    oar_tensor_release(r);
    return st;
}

int oar_uniform_(oar_tensor *t, double low, double high) {
    if (!(low <= high))
        return oari_error(OAR_ERR_INVALID, "uniform_: low %g must not exceed high %g", low, high);
    return random_inplace(OARI_OP_uniform, t, low, high, 0, 0);
}

int oar_normal_(oar_tensor *t, double mean, double std) {
    if (!(std >= 0)) return oari_error(OAR_ERR_INVALID, "normal_: std %g must be >= 0", std);
    return random_inplace(OARI_OP_normal, t, mean, std, 0, 0);
}

static oar_tensor *filled_random(oari_op op, oar_dtype dtype, int ndim, const int64_t *shape,
                                 double f0, double f1, int64_t lo, int64_t hi) {
    oar_tensor *t = oari_tensor_empty(NULL, dtype, ndim, shape);
    if (!t) return NULL;
    if (random_inplace(op, t, f0, f1, lo, hi)) {
        oar_tensor_release(t);
        return NULL;
    }
    return oari_pool_adopt(t);
}

oar_tensor *oar_rand(oar_dtype dtype, int ndim, const int64_t *shape) {
    return filled_random(OARI_OP_uniform, dtype, ndim, shape, 0.0, 1.0, 0, 0);
}

oar_tensor *oar_randn(oar_dtype dtype, int ndim, const int64_t *shape) {
    return filled_random(OARI_OP_normal, dtype, ndim, shape, 0.0, 1.0, 0, 0);
}

oar_tensor *oar_randint(int64_t low, int64_t high, oar_dtype dtype, int ndim, const int64_t *shape) {
    if (low >= high)
        return oari_error(OAR_ERR_INVALID, "randint: low %lld must be below high %lld",
                          (long long)low, (long long)high), NULL;
    return filled_random(OARI_OP_randint, dtype, ndim, shape, 0, 0, low, high);
}

oar_tensor *oar_bernoulli(oar_tensor *p) {
    oari_attrs a = {.ni = 2};
    if (p) gen_take(p->numel, &a.i[0], &a.i[1]);
    return oari_call1(OARI_OP_bernoulli, p, &a);
}

/* ---- creation ---------------------------------------------------------- */

oar_tensor *oar_empty(oar_dtype dtype, int ndim, const int64_t *shape, oar_device *device) {
    if (ndim && !shape) return oari_error(OAR_ERR_INVALID, "empty: shape is NULL"), NULL;
    return oari_pool_adopt(oari_tensor_empty(device, dtype, ndim, shape));
}

static oar_tensor *filled(oar_device *dev, oar_dtype dtype, int ndim, const int64_t *shape, double v) {
    if (ndim && !shape) return oari_error(OAR_ERR_INVALID, "full: shape is NULL"), NULL;
    oar_tensor *t = oari_tensor_empty(dev, dtype, ndim, shape);
    if (!t) return NULL;
    oari_attrs a = {.nf = 2, .f = {v, 0}};
    oar_tensor *r = NULL;
    if (oari_dispatch(OARI_OP_fill, 1, &t, &a, &r)) {
        oar_tensor_release(t);
        return NULL;
    }
    oar_tensor_release(r);
    return oari_pool_adopt(t);
}

oar_tensor *oar_zeros(oar_dtype dtype, int ndim, const int64_t *shape) {
    return filled(NULL, dtype, ndim, shape, 0.0);
}
oar_tensor *oar_ones(oar_dtype dtype, int ndim, const int64_t *shape) {
    return filled(NULL, dtype, ndim, shape, 1.0);
}
oar_tensor *oar_full(oar_dtype dtype, int ndim, const int64_t *shape, double value) {
    return filled(NULL, dtype, ndim, shape, value);
}

oar_tensor *oar_full_like(oar_tensor *x, double value) {
    if (!x) {
        if (!oari_error_pending()) oari_error(OAR_ERR_INVALID, "full_like: input is NULL");
        return NULL;
    }
    return filled(oar_tensor_device(x), x->dtype, x->ndim, x->shape, value);
}
oar_tensor *oar_zeros_like(oar_tensor *x) { return oar_full_like(x, 0.0); }
oar_tensor *oar_ones_like(oar_tensor *x) { return oar_full_like(x, 1.0); }

oar_tensor *oar_scalar_of(double v, oar_dtype dtype) {
    if ((unsigned)dtype >= OAR_DTYPE_COUNT)
        return oari_error(OAR_ERR_INVALID, "scalar: invalid dtype %d", (int)dtype), NULL;
    unsigned char buf[16] = {0};
    oari_store_f64(buf, dtype, v);
    return oar_tensor_from_data(buf, dtype, 0, NULL);
}

oar_tensor *oar_scalar(double v) {
    /* A Python number: integral values stay integral (i64), others are f32. */
    bool integral = v == v && fabs(v) < 9.007199254740992e15 && v == (double)(int64_t)v;
    oar_tensor *t = oar_scalar_of(v, integral ? OAR_I64 : OAR_F64);
    if (t) t->wrapped_number = true;
    return t;
}

oar_tensor *oar_tensor_from_data(const void *data, oar_dtype dtype, int ndim, const int64_t *shape) {
    if ((unsigned)dtype >= OAR_DTYPE_COUNT)
        return oari_error(OAR_ERR_INVALID, "from_data: invalid dtype %d", (int)dtype), NULL;
    if (ndim && !shape) return oari_error(OAR_ERR_INVALID, "from_data: shape is NULL"), NULL;
    oar_tensor *t = oari_tensor_empty(NULL, dtype, ndim, shape);
    if (!t) return NULL;
    size_t n = (size_t)t->numel * oar_dtype_size(dtype);
    if (n && !data) {
        oari_error(OAR_ERR_INVALID, "from_data: data is NULL for %lld elements", (long long)t->numel);
        oar_tensor_release(t);
        return NULL;
    }
    oar_device *d = t->storage->device;
    if (n && d->iface->copy_to_device(d->ctx, d->index, t->storage->data, 0, data, n)) {
        oar_tensor_release(t);
        return oari_error(OAR_ERR_IO, "from_data: copy to %s failed", d->name), NULL;
    }
    return oari_pool_adopt(t);
}

oar_tensor *oar_arange(double start, double end, double step, oar_dtype dtype) {
    if (step == 0 || step != step || start != start || end != end)
        return oari_error(OAR_ERR_INVALID, "arange: step must be non-zero and bounds finite"), NULL;
    if ((end - start) / step > 9e15)
        return oari_error(OAR_ERR_INVALID, "arange: too many elements"), NULL;
    double count = ceil((end - start) / step);
    int64_t n = count > 0 ? (int64_t)count : 0;
    oar_tensor *t = oari_tensor_empty(NULL, dtype, 1, &n);
    if (!t) return NULL;
    size_t es = oar_dtype_size(dtype);
    for (int64_t i = 0; i < n; i++)
        oari_store_f64((char *)t->storage->data + (size_t)i * es, dtype, start + (double)i * step);
    return oari_pool_adopt(t);
}

oar_tensor *oar_linspace(double start, double end, int64_t n, oar_dtype dtype) {
    if (n < 0) return oari_error(OAR_ERR_INVALID, "linspace: n %lld < 0", (long long)n), NULL;
    oar_tensor *t = oari_tensor_empty(NULL, dtype, 1, &n);
    if (!t) return NULL;
    size_t es = oar_dtype_size(dtype);
    double step = n > 1 ? (end - start) / (double)(n - 1) : 0;
    for (int64_t i = 0; i < n; i++) {
        /* symmetric, as torch.linspace: the second half counts back from end */
        double v = i < n / 2 ? start + step * (double)i : end - step * (double)(n - 1 - i);
        oari_store_f64((char *)t->storage->data + (size_t)i * es, dtype, v);
    }
    return oari_pool_adopt(t);
}

oar_tensor *oar_eye(int64_t n, int64_t m, oar_dtype dtype) {
    if (m < 0) m = n;
    int64_t shape[2] = {n, m};
    oar_tensor *t = filled(NULL, dtype, 2, shape, 0.0);
    if (!t) return NULL;
    size_t es = oar_dtype_size(dtype);
    for (int64_t i = 0; i < n && i < m; i++)
        oari_store_f64((char *)t->storage->data + (size_t)(i * m + i) * es, dtype, 1.0);
    return t;
}

/* ---- copies and casts ----------------------------------------------------- */

oar_tensor *oar_cast(oar_tensor *x, oar_dtype dtype) {
    if (x && x->dtype == dtype) return oari_pool_adopt(oar_tensor_retain(x));
    oari_attrs a = {.ni = 1, .i = {dtype}};
    return oari_call1(OARI_OP_cast, x, &a);
}

oar_tensor *oar_clone(oar_tensor *x) { return oari_call1(OARI_OP_contiguous, x, NULL); }

oar_tensor *oar_contiguous(oar_tensor *x) {
    if (x && oar_tensor_is_contiguous(x)) return oari_pool_adopt(oar_tensor_retain(x));
    return oari_call1(OARI_OP_contiguous, x, NULL);
}

oar_tensor *oar_detach(oar_tensor *x) {
    if (!x) {
        if (!oari_error_pending()) oari_error(OAR_ERR_INVALID, "detach: input is NULL");
        return NULL;
    }
    /* a dtensor has no storage to view: a new dtensor on the same shard,
     * made by the dist slot's class (dist sits above ops) */
    void *dist = x->ext[OARI_EXT_DIST];
    const oari_ext_class *cls = oari_ext_class_of(OARI_EXT_DIST);
    if (dist && cls->remake) return oari_pool_adopt(cls->remake(dist, x->dtype, x->ndim, x->shape));
    return oari_pool_adopt(oari_tensor_view(x, x->ndim, x->shape, x->strides, x->offset));
}

int oar_fill_(oar_tensor *t, double value) {
    oari_attrs a = {.nf = 2, .f = {value, 0}};
    oar_tensor *r = NULL;
    int st = oari_dispatch(OARI_OP_fill, 1, &t, &a, &r);
    oar_tensor_release(r);
    return st;
}

int oar_copy_(oar_tensor *dst, oar_tensor *src) {
    oar_tensor *in[2] = {dst, src}, *r = NULL;
    int st = oari_dispatch(OARI_OP_copy, 2, in, NULL, &r);
    oar_tensor_release(r);
    return st;
}

/* ---- reading values back ------------------------------------------------- */

int oar_tensor_to_host(const oar_tensor *t, void *dst, size_t nbytes) {
    if (!t) {
        if (!oari_error_pending()) oari_error(OAR_ERR_INVALID, "to_host: tensor is NULL");
        return OAR_ERR_INVALID;
    }
    if (t->ext[OARI_EXT_DIST])
        return oari_error(OAR_ERR_STATE, "to_host: tensor is distributed; use oar_unshard or "
                          "oar_dtensor_local");
    if (!t->storage) return oari_error(OAR_ERR_STATE, "to_host: tensor is symbolic (traced)");
    size_t need = (size_t)t->numel * oar_dtype_size(t->dtype);
    if (nbytes != need)
        return oari_error(OAR_ERR_INVALID, "to_host: buffer of %zu bytes for a %s tensor of %lld "
                          "elements (needs %zu)", nbytes, oar_dtype_name(t->dtype),
                          (long long)t->numel, need);
    if (!need) return 0;
    if (!dst) return oari_error(OAR_ERR_INVALID, "to_host: dst is NULL");
    oar_tensor *c = (oar_tensor *)t;
    bool owned = false;
    if (!oar_tensor_is_contiguous(t)) {
        oar_tensor *src = c;
        oari_no_grad_push();
        int st = oari_dispatch(OARI_OP_contiguous, 1, &src, NULL, &c);
        oari_no_grad_pop();
        if (st) return st;
        owned = true;
    }
    oar_device *d = c->storage->device;
    int st = d->iface->copy_to_host(d->ctx, d->index, dst, c->storage->data,
                                    (size_t)c->offset * oar_dtype_size(c->dtype), need);
    if (owned) oar_tensor_release(c);
    return st ? oari_error(OAR_ERR_IO, "to_host: copy from %s failed", d->name) : 0;
}

double oar_tensor_item(const oar_tensor *t) {
    if (t && t->numel != 1) {
        oari_error(OAR_ERR_INVALID, "item: tensor has %lld elements, expected 1", (long long)t->numel);
        return NAN;
    }
    unsigned char buf[16];
    if (oar_tensor_to_host(t, buf, t ? oar_dtype_size(t->dtype) : 0)) return NAN;
    return oari_load_f64(buf, t->dtype);
}

typedef struct { char *buf; size_t size, len; } sbuf;

static void put(sbuf *s, const char *fmt, ...) OARI_PRINTF(2, 3);
static void put(sbuf *s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *dst = s->len < s->size ? s->buf + s->len : NULL;
    int n = vsnprintf(dst, dst ? s->size - s->len : 0, fmt, ap);
    va_end(ap);
    if (n > 0) s->len += (size_t)n;
}

static void put_value(sbuf *s, const unsigned char *p, oar_dtype dt) {
    if (dt == OAR_C64) put(s, "%g%+gj", ((const float *)p)[0], ((const float *)p)[1]);
    else if (dt == OAR_C128) put(s, "%g%+gj", ((const double *)p)[0], ((const double *)p)[1]);
    else if (dt == OAR_BOOL) put(s, "%s", *p ? "true" : "false");
    else if (oar_dtype_is_integral(dt)) put(s, "%lld", (long long)oari_load_f64(p, dt));
    else put(s, "%.6g", oari_load_f64(p, dt));
}

int oar_tensor_format(const oar_tensor *t, char *buf, size_t size) {
    if (!t) return oari_error(OAR_ERR_INVALID, "format: tensor is NULL"), -1;
    if (size && !buf) return oari_error(OAR_ERR_INVALID, "format: buf is NULL"), -1;
    sbuf s = {buf, size, 0};
    if (size) buf[0] = 0;
    size_t es = oar_dtype_size(t->dtype);
    unsigned char *host = NULL;
    if (t->storage && t->numel) {
        host = oari_malloc((size_t)t->numel * es);
        if (!host || oar_tensor_to_host(t, host, (size_t)t->numel * es)) {
            oari_free(host, (size_t)t->numel * es);
            return -1;
        }
    }
    put(&s, "tensor(");
    if (!t->storage) {
        put(&s, "<symbolic>");
    } else if (t->ndim == 0) {
        put_value(&s, host, t->dtype);
    } else {
        const int64_t limit = 1000; /* elements shown before eliding */
        for (int64_t i = 0; i < t->numel && i < limit; i++) {
            int64_t rem = i;
            int opens = 0;
            for (int d = t->ndim - 1; d >= 0 && rem % t->shape[d] == 0; d--) { opens++; rem /= t->shape[d]; }
            if (i) put(&s, ", ");
            for (int k = 0; k < opens; k++) put(&s, "[");
            put_value(&s, host + (size_t)i * es, t->dtype);
            rem = i + 1;
            int closes = 0;
            for (int d = t->ndim - 1; d >= 0 && rem % t->shape[d] == 0; d--) { closes++; rem /= t->shape[d]; }
            for (int k = 0; k < closes; k++) put(&s, "]");
        }
        if (t->numel > limit) put(&s, ", ...]");
        if (t->numel == 0) put(&s, "[]");
    }
    char shp[200];
    put(&s, ", shape=%s, dtype=%s)", oari_shape_str(shp, t->ndim, t->shape), oar_dtype_name(t->dtype));
    oari_free(host, (size_t)t->numel * es);
    if (size) buf[s.len < size ? s.len : size - 1] = 0;
    return (int)s.len;
}

void oar_tensor_print(const oar_tensor *t, const char *name) {
    char small[4096];
    int n = oar_tensor_format(t, small, sizeof small);
    if (n < 0) {
        printf("%s: <error: %s>\n", name ? name : "tensor", oar_last_error());
        return;
    }
    char *text = small;
    if ((size_t)n >= sizeof small) { /* longer than the stack buffer: the whole text, not a cut */
        if (!(text = oari_malloc((size_t)n + 1)) || oar_tensor_format(t, text, (size_t)n + 1) < 0) {
            oari_free(text, (size_t)n + 1);
            printf("%s: <error: %s>\n", name ? name : "tensor", oar_last_error());
            return;
        }
    }
    printf("%s = %s\n", name ? name : "tensor", text);
    if (text != small) oari_free(text, (size_t)n + 1);
}

/* In-memory datasets, Fashion-MNIST, and the batch loader (seeded
 * shuffle, drop_last, scale/normalize to f32). */
#include "../core/core.h"
#include "../profiler/hooks.h" /* profiler hook */

#include <oar/data.h>
#include <oar/ops.h>
#include <stdio.h>
#include <string.h>

struct oar_dataset {
    oar_tensor *x, *y; /* retained, contiguous, CPU */
    int64_t n;
};

oar_dataset *oar_dataset_new(oar_tensor *x, oar_tensor *y) {
    if (!x || !y) {
        if (!oari_error_pending()) oari_error(OAR_ERR_INVALID, "dataset_new: x or y is NULL");
        return NULL;
    }
    if (x->ndim < 1 || y->ndim < 1 || x->shape[0] != y->shape[0]) {
        char a[200], b[200];
        return oari_error(OAR_ERR_INVALID,
                          "dataset_new: x %s and y %s must have the same size in "
                          "dim 0",
                          oari_shape_str(a, x->ndim, x->shape),
                          oari_shape_str(b, y->ndim, y->shape)),
               NULL;
    }
    if (!oar_tensor_data(x) || !oar_tensor_data(y))
        return oari_error(OAR_ERR_INVALID, "dataset_new: x and y must be CPU tensors"), NULL;
    oar_dataset *ds = oari_calloc(1, sizeof *ds);
    if (!ds) return NULL;
    oar_pool *p = oar_pool_push();
    ds->x = oar_tensor_retain(oar_contiguous(x));
    ds->y = oar_tensor_retain(oar_contiguous(y));
    oar_pool_pop(p);
    ds->n = x->shape[0];
    if (!ds->x || !ds->y) {
        oar_dataset_free(ds);
        return NULL;
    }
    return ds;
}

void oar_dataset_free(oar_dataset *ds) {
    if (!ds) return;
    oar_tensor_release(ds->x);
    oar_tensor_release(ds->y);
    oari_free(ds, sizeof *ds);
}

int64_t oar_dataset_size(const oar_dataset *ds) { return ds ? ds->n : -1; }
oar_tensor *oar_dataset_x(const oar_dataset *ds) { return ds ? ds->x : NULL; }
oar_tensor *oar_dataset_y(const oar_dataset *ds) { return ds ? ds->y : NULL; }

/* Rows idx[0..b) of a contiguous tensor t (owned by the caller). */
static oar_tensor *gather_rows(const oar_tensor *t, const int64_t *idx, int64_t b) {
    int64_t shape[OAR_MAX_DIMS];
    memcpy(shape, t->shape, sizeof shape);
    shape[0] = b;
    oar_tensor *r = oari_tensor_empty(NULL, t->dtype, t->ndim, shape);
    if (!r) return NULL;
    size_t row = (size_t)(t->shape[0] ? t->numel / t->shape[0] : 0) * oar_dtype_size(t->dtype);
    const char *src = (const char *)oar_tensor_data(t);
    char *dst = r->storage->data;
    for (int64_t i = 0; i < b; i++)
        memcpy(dst + (size_t)i * row, src + (size_t)idx[i] * row, row);
    return r;
}

oar_dataset *oar_dataset_slice(const oar_dataset *ds, int64_t start, int64_t end) {
    if (!ds) return oari_error(OAR_ERR_INVALID, "dataset_slice: dataset is NULL"), NULL;
    if (start < 0 || end < start || end > ds->n)
        return oari_error(OAR_ERR_INVALID, "dataset_slice: range [%lld, %lld) is outside [0, %lld)",
                          (long long)start, (long long)end, (long long)ds->n),
               NULL;
    int64_t b = end - start;
    int64_t *idx = oari_malloc((size_t)(b ? b : 1) * sizeof *idx);
    if (!idx) return NULL;
    for (int64_t i = 0; i < b; i++)
        idx[i] = start + i;
    oar_tensor *x = gather_rows(ds->x, idx, b), *y = gather_rows(ds->y, idx, b);
    oari_free(idx, (size_t)(b ? b : 1) * sizeof *idx);
    oar_dataset *r = x && y ? oar_dataset_new(x, y) : NULL;
    oar_tensor_release(x);
    oar_tensor_release(y);
    return r;
}

oar_dataset *oar_fashion_mnist_load(const char *dir, bool train) {
    if (!dir) dir = "/usr/share/datasets/fashion-mnist";
    char ip[1024], lp[1024];
    const char *split = train ? "train" : "t10k";
    snprintf(ip, sizeof ip, "%s/%s-images-idx3-ubyte.gz", dir, split);
    snprintf(lp, sizeof lp, "%s/%s-labels-idx1-ubyte.gz", dir, split);
    oar_pool *p = oar_pool_push();
    oar_dataset *ds = NULL;
    oar_tensor *x = oar_idx_load(ip);
    oar_tensor *y = x ? oar_idx_load(lp) : NULL;
    if (x && y) {
        if (x->ndim != 3 || x->dtype != OAR_U8 || y->ndim != 1 || y->shape[0] != x->shape[0]) {
            char a[200], b[200];
            oari_error(OAR_ERR_IO,
                       "fashion_mnist_load: %s %s and %s %s are not N images and N "
                       "labels",
                       ip, oari_shape_str(a, x->ndim, x->shape), lp,
                       oari_shape_str(b, y->ndim, y->shape));
        } else {
            int64_t shape[4] = {x->shape[0], 1, x->shape[1], x->shape[2]}, strides[4];
            oari_contiguous_strides(4, shape, strides);
            oar_tensor *x4 = oari_pool_adopt(oari_tensor_view(x, 4, shape, strides, 0));
            ds = oar_dataset_new(x4, oar_cast(y, OAR_I64));
        }
    }
    oar_pool_pop(p);
    return ds;
}

/* ---- the loader ---------------------------------------------------------------- */

struct oar_loader {
    const oar_dataset *ds;
    oar_loader_options o;
    int64_t *perm;
    int64_t pos, epoch;
};

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* The epoch's order: identity, or a Fisher-Yates shuffle seeded by (seed, epoch). */
static void make_order(oar_loader *l) {
    int64_t n = l->ds->n;
    for (int64_t i = 0; i < n; i++)
        l->perm[i] = i;
    if (!l->o.shuffle) return;
    uint64_t s = l->o.seed * 0x2545f4914f6cdd1dULL + (uint64_t)l->epoch;
    for (int64_t i = n - 1; i > 0; i--) {
        /* unbiased draw in [0, i] by rejection */
        uint64_t bound = (uint64_t)i + 1, limit = UINT64_MAX - UINT64_MAX % bound, r;
        do
            r = splitmix64(&s);
        while (r >= limit);
        int64_t j = (int64_t)(r % bound);
        int64_t t = l->perm[i];
        l->perm[i] = l->perm[j];
        l->perm[j] = t;
    }
}

oar_loader *oar_loader_new(const oar_dataset *ds, const oar_loader_options *o) {
    if (!ds || !o)
        return oari_error(OAR_ERR_INVALID, "loader_new: dataset or options are NULL"), NULL;
    if (o->batch_size < 1)
        return oari_error(OAR_ERR_INVALID, "loader_new: batch_size %lld must be >= 1",
                          (long long)o->batch_size),
               NULL;
    if (o->std < 0 || o->std != o->std)
        return oari_error(OAR_ERR_INVALID, "loader_new: std %g must be >= 0 (0: no normalization)",
                          o->std),
               NULL;
    oar_loader *l = oari_calloc(1, sizeof *l);
    if (!l) return NULL;
    l->ds = ds;
    l->o = *o;
    if (l->o.scale == 0) l->o.scale = 1;
    l->perm = oari_malloc((size_t)(ds->n ? ds->n : 1) * sizeof *l->perm);
    if (!l->perm) {
        oari_free(l, sizeof *l);
        return NULL;
    }
    make_order(l);
    return l;
}

void oar_loader_free(oar_loader *l) {
    if (!l) return;
    oari_free(l->perm, (size_t)(l->ds->n ? l->ds->n : 1) * sizeof *l->perm);
    oari_free(l, sizeof *l);
}

int64_t oar_loader_num_batches(const oar_loader *l) {
    if (!l) return -1;
    int64_t n = l->ds->n, b = l->o.batch_size;
    return l->o.drop_last ? n / b : (n + b - 1) / b;
}

int64_t oar_loader_index(const oar_loader *l, int64_t k) {
    return l && k >= 0 && k < l->ds->n ? l->perm[k] : -1;
}

int64_t oar_loader_epoch(const oar_loader *l) { return l ? l->epoch : -1; }

/* x rows as f32 with (v * scale - mean) / std. */
static oar_tensor *to_f32(const oar_loader *l, oar_tensor *xb) {
    oar_tensor *r = oari_tensor_empty(NULL, OAR_F32, xb->ndim, xb->shape);
    if (!r) return NULL;
    float *dst = r->storage->data;
    double scale = l->o.scale, mean = l->o.std ? l->o.mean : 0, inv = l->o.std ? 1 / l->o.std : 1;
    float a = (float)(scale * inv), b = (float)(-mean * inv);
    const void *src = xb->storage->data;
    int64_t n = xb->numel;
    if (xb->dtype == OAR_U8)
        for (int64_t i = 0; i < n; i++)
            dst[i] = (float)((const uint8_t *)src)[i] * a + b;
    else if (xb->dtype == OAR_F32)
        for (int64_t i = 0; i < n; i++)
            dst[i] = ((const float *)src)[i] * a + b;
    else
        for (int64_t i = 0; i < n; i++)
            dst[i] =
                (float)(oari_load_f64((const char *)src + (size_t)i * oar_dtype_size(xb->dtype),
                                      xb->dtype) *
                            scale * inv -
                        mean * inv);
    return r;
}

int oar_loader_next(oar_loader *l, oar_tensor **x, oar_tensor **y) {
    if (x) *x = NULL;
    if (y) *y = NULL;
    if (!l || !x || !y) return oari_error(OAR_ERR_INVALID, "loader_next: NULL argument");
    int64_t n = l->ds->n, left = n - l->pos;
    int64_t b = left < l->o.batch_size ? left : l->o.batch_size;
    if (b == 0 || (l->o.drop_last && b < l->o.batch_size)) {
        l->epoch++;
        l->pos = 0;
        make_order(l);
        return 0;
    }
    int64_t prof_t0 = OARI_PROF_BEGIN(); /* profiler */
    const int64_t *idx = l->perm + l->pos;
    oar_tensor *xb = gather_rows(l->ds->x, idx, b);
    oar_tensor *xf = xb ? to_f32(l, xb) : NULL;
    oar_tensor *yb = xf ? gather_rows(l->ds->y, idx, b) : NULL;
    oar_tensor_release(xb);
    if (!xf || !yb) {
        oar_tensor_release(xf);
        oar_tensor_release(yb);
        return OAR_ERR_NOMEM;
    }
    l->pos += b;
    *x = oari_pool_adopt(xf);
    *y = oari_pool_adopt(yb);
    OARI_PROF_END(OAR_PROFILER_DATA, "loader_next", prof_t0, 0, NULL); /* profiler */
    return *x && *y ? 1 : OAR_ERR_NOMEM;
}

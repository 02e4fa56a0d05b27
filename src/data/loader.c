/* In-memory datasets, Fashion-MNIST, and the batch loader (seeded
 * shuffle, drop_last, scale/normalize to f32). */
#include "../core/core.h"
#include "../profiler/hooks.h" /* profiler hook */

#include <oar/data.h>
#include <oar/ops.h>
#include <pthread.h>
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

int64_t oar_dataset_size(const oar_dataset *ds) {
    return ds ? ds->n : (oari_null_arg(__func__, "dataset"), -1);
}
oar_tensor *oar_dataset_x(const oar_dataset *ds) {
    return ds ? ds->x : (oari_null_arg(__func__, "dataset"), NULL);
}
oar_tensor *oar_dataset_y(const oar_dataset *ds) {
    return ds ? ds->y : (oari_null_arg(__func__, "dataset"), NULL);
}

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

/* ---- the loader ----------------------------------------------------------------
 * Batches are produced by produce() into a slot of host buffers, from a
 * cursor (epoch, position): by the caller's thread, or with prefetch by a
 * worker thread that fills the slot while the caller trains on the batch
 * before. Every random draw (the shuffle, crops, flips) is seeded from
 * (seed, epoch, sample position), so the batches are the same either way. */

struct oar_loader {
    const oar_dataset *ds;
    oar_loader_options o;
    int64_t *perm;   /* the consumer's epoch order (oar_loader_index) */
    int64_t *pperm;  /* the producer's epoch order */
    int64_t epoch;   /* consumer: epochs completed */
    int64_t pepoch, ppos; /* producer cursor */
    int64_t row_x, row_y; /* elements per sample of x and y */
    /* the slot: one batch, with its row count and status */
    float *sx;
    char *sy;
    int64_t sb;
    int sresult;
    char serr[256];
    /* prefetch */
    bool started, stop, full;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int64_t wait_ns; /* time callers spent in oar_loader_next */
};

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* The epoch's order: identity, or a Fisher-Yates shuffle seeded by (seed, epoch). */
static void make_order(const oar_loader *l, int64_t *perm, int64_t epoch) {
    int64_t n = l->ds->n;
    for (int64_t i = 0; i < n; i++)
        perm[i] = i;
    if (!l->o.shuffle) return;
    uint64_t s = l->o.seed * 0x2545f4914f6cdd1dULL + (uint64_t)epoch;
    for (int64_t i = n - 1; i > 0; i--) {
        /* unbiased draw in [0, i] by rejection */
        uint64_t bound = (uint64_t)i + 1, limit = UINT64_MAX - UINT64_MAX % bound, r;
        do
            r = splitmix64(&s);
        while (r >= limit);
        int64_t j = (int64_t)(r % bound);
        int64_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

uint64_t oar_loader_sample_seed(uint64_t seed, int64_t epoch, int64_t position) {
    uint64_t s = seed ^ 0x6a09e667f3bcc909ULL;
    splitmix64(&s);
    s ^= (uint64_t)epoch * 0xbb67ae8584caa73bULL;
    splitmix64(&s);
    s ^= (uint64_t)position * 0x3c6ef372fe94f82bULL;
    return splitmix64(&s);
}

/* Zero-pads the last two dims of a sample by pad, then crops a random
 * window of the original size; fill is the padding value. */
static void random_crop(float *x, float *tmp, int ndim, const int64_t *shape, int64_t pad,
                        float fill, uint64_t *rng) {
    int64_t h = shape[ndim - 2], w = shape[ndim - 1], planes = 1;
    for (int d = 0; d < ndim - 2; d++)
        planes *= shape[d];
    int64_t dy = (int64_t)(splitmix64(rng) % (uint64_t)(2 * pad + 1)) - pad;
    int64_t dx = (int64_t)(splitmix64(rng) % (uint64_t)(2 * pad + 1)) - pad;
    memcpy(tmp, x, (size_t)(planes * h * w) * sizeof *x);
    for (int64_t c = 0; c < planes; c++)
        for (int64_t i = 0; i < h; i++)
            for (int64_t j = 0; j < w; j++) {
                int64_t si = i + dy, sj = j + dx;
                x[(c * h + i) * w + j] =
                    si >= 0 && si < h && sj >= 0 && sj < w ? tmp[(c * h + si) * w + sj] : fill;
            }
}

static void random_hflip(float *x, int ndim, const int64_t *shape, uint64_t *rng) {
    if (!(splitmix64(rng) >> 63)) return;
    int64_t w = shape[ndim - 1], rows = 1;
    for (int d = 0; d < ndim - 1; d++)
        rows *= shape[d];
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < w / 2; j++) {
            float t = x[r * w + j];
            x[r * w + j] = x[r * w + w - 1 - j];
            x[r * w + w - 1 - j] = t;
        }
}

/* Fills the slot with the batch at the producer cursor and advances it:
 * 1 for a batch, 0 at the end of an epoch (the cursor moves to the next
 * epoch), negative on error (message in serr). Touches no oar state but
 * the loader's, so it can run on the worker thread. */
static int produce(oar_loader *l) {
    int64_t n = l->ds->n, left = n - l->ppos;
    int64_t b = left < l->o.batch_size ? left : l->o.batch_size;
    if (b == 0 || (l->o.drop_last && b < l->o.batch_size)) {
        l->pepoch++;
        l->ppos = 0;
        make_order(l, l->pperm, l->pepoch);
        return 0;
    }
    const oar_tensor *tx = l->ds->x, *ty = l->ds->y;
    double scale = l->o.scale, mean = l->o.std ? l->o.mean : 0, inv = l->o.std ? 1 / l->o.std : 1;
    float a = (float)(scale * inv), c = (float)(-mean * inv);
    size_t xes = oar_dtype_size(tx->dtype), yrow = (size_t)l->row_y * oar_dtype_size(ty->dtype);
    int sdim = tx->ndim - 1;
    const int64_t *sshape = tx->shape + 1;
    float *tmp = l->sx + l->o.batch_size * l->row_x; /* scratch sample after the batch */
    for (int64_t r = 0; r < b; r++) {
        int64_t k = l->ppos + r, idx = l->pperm[k];
        float *dst = l->sx + r * l->row_x;
        const char *src = (const char *)tx->storage->data + (size_t)(idx * l->row_x) * xes;
        if (tx->dtype == OAR_U8)
            for (int64_t i = 0; i < l->row_x; i++)
                dst[i] = (float)((const uint8_t *)src)[i] * a + c;
        else if (tx->dtype == OAR_F32)
            for (int64_t i = 0; i < l->row_x; i++)
                dst[i] = ((const float *)src)[i] * a + c;
        else
            for (int64_t i = 0; i < l->row_x; i++)
                dst[i] = (float)(oari_load_f64(src + (size_t)i * xes, tx->dtype) * scale * inv -
                                 mean * inv);
        memcpy(l->sy + (size_t)r * yrow, (const char *)ty->storage->data + (size_t)idx * yrow,
               yrow);
        uint64_t rng = oar_loader_sample_seed(l->o.seed, l->pepoch, k);
        if (l->o.random_crop_padding) random_crop(dst, tmp, sdim, sshape, l->o.random_crop_padding, c, &rng);
        if (l->o.random_hflip) random_hflip(dst, sdim, sshape, &rng);
        if (l->o.transform) {
            int st = l->o.transform(l->o.transform_ctx, dst, sdim, sshape, rng);
            if (st) {
                snprintf(l->serr, sizeof l->serr,
                         "loader_next: the transform failed (status %d) on sample %lld of epoch "
                         "%lld",
                         st, (long long)idx, (long long)l->pepoch);
                return OAR_ERR_INVALID;
            }
        }
    }
    l->sb = b;
    l->ppos += b;
    return 1;
}

static void *worker(void *arg) {
    oar_loader *l = arg;
    pthread_mutex_lock(&l->mu);
    while (!l->stop) {
        if (l->full) {
            pthread_cond_wait(&l->cv, &l->mu);
            continue;
        }
        pthread_mutex_unlock(&l->mu);
        int r = produce(l);
        pthread_mutex_lock(&l->mu);
        l->sresult = r;
        l->full = true;
        pthread_cond_broadcast(&l->cv);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

static void stop_worker(oar_loader *l) {
    if (!l->started) return;
    pthread_mutex_lock(&l->mu);
    l->stop = true;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->thread, NULL);
    l->started = l->stop = l->full = false;
}

static size_t slot_x_bytes(const oar_loader *l) {
    return (size_t)((l->o.batch_size + 1) * l->row_x) * sizeof(float);
}
static size_t slot_y_bytes(const oar_loader *l) {
    return (size_t)(l->o.batch_size * l->row_y) * oar_dtype_size(l->ds->y->dtype);
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
    if ((o->random_crop_padding || o->random_hflip) && ds->x->ndim < 3) {
        char sh[200];
        return oari_error(OAR_ERR_INVALID,
                          "loader_new: random crop and flip need samples of at least 2 dims "
                          "([N, ..., H, W]), x is %s",
                          oari_shape_str(sh, ds->x->ndim, ds->x->shape)),
               NULL;
    }
    if (o->random_crop_padding < 0 || o->random_crop_padding > (1 << 20))
        return oari_error(OAR_ERR_INVALID, "loader_new: random_crop_padding %lld must be >= 0",
                          (long long)o->random_crop_padding),
               NULL;
    oar_loader *l = oari_calloc(1, sizeof *l);
    if (!l) return NULL;
    l->ds = ds;
    l->o = *o;
    if (l->o.scale == 0) l->o.scale = 1;
    l->row_x = ds->n ? ds->x->numel / ds->n : 0;
    l->row_y = ds->n ? ds->y->numel / ds->n : 0;
    if (!ds->n) {
        l->row_x = 1, l->row_y = 1;
        for (int d = 1; d < ds->x->ndim; d++)
            l->row_x *= ds->x->shape[d];
        for (int d = 1; d < ds->y->ndim; d++)
            l->row_y *= ds->y->shape[d];
    }
    size_t pn = (size_t)(ds->n ? ds->n : 1) * sizeof *l->perm;
    l->perm = oari_malloc(pn);
    l->pperm = oari_malloc(pn);
    l->sx = oari_malloc(slot_x_bytes(l) ? slot_x_bytes(l) : 1);
    l->sy = oari_malloc(slot_y_bytes(l) ? slot_y_bytes(l) : 1);
    if (pthread_mutex_init(&l->mu, NULL)) {
        oari_free(l->perm, pn), oari_free(l->pperm, pn);
        oari_free(l->sx, slot_x_bytes(l) ? slot_x_bytes(l) : 1);
        oari_free(l->sy, slot_y_bytes(l) ? slot_y_bytes(l) : 1);
        oari_free(l, sizeof *l);
        return oari_error(OAR_ERR_NOMEM, "loader_new: cannot create a mutex"), NULL;
    }
    pthread_cond_init(&l->cv, NULL);
    if (!l->perm || !l->pperm || !l->sx || !l->sy) {
        oar_loader_free(l);
        return NULL;
    }
    make_order(l, l->perm, 0);
    make_order(l, l->pperm, 0);
    return l;
}

void oar_loader_free(oar_loader *l) {
    if (!l) return;
    stop_worker(l);
    size_t pn = (size_t)(l->ds->n ? l->ds->n : 1) * sizeof *l->perm;
    oari_free(l->perm, pn);
    oari_free(l->pperm, pn);
    oari_free(l->sx, slot_x_bytes(l) ? slot_x_bytes(l) : 1);
    oari_free(l->sy, slot_y_bytes(l) ? slot_y_bytes(l) : 1);
    pthread_cond_destroy(&l->cv);
    pthread_mutex_destroy(&l->mu);
    oari_free(l, sizeof *l);
}

int64_t oar_loader_num_batches(const oar_loader *l) {
    if (!l) return oari_null_arg(__func__, "loader"), -1;
    int64_t n = l->ds->n, b = l->o.batch_size;
    return l->o.drop_last ? n / b : (n + b - 1) / b;
}

int64_t oar_loader_index(const oar_loader *l, int64_t k) {
    if (!l) return oari_null_arg(__func__, "loader"), -1;
    if (k < 0 || k >= l->ds->n)
        return oari_error(OAR_ERR_INVALID, "%s: position %lld is out of range [0, %lld)", __func__, (long long)k,
                          (long long)l->ds->n), -1;
    return l->perm[k];
}

int64_t oar_loader_epoch(const oar_loader *l) {
    return l ? l->epoch : (oari_null_arg(__func__, "loader"), -1);
}

int oar_loader_set_epoch(oar_loader *l, int64_t epoch) {
    if (!l) return oari_error(OAR_ERR_INVALID, "loader_set_epoch: loader is NULL");
    if (epoch < 0)
        return oari_error(OAR_ERR_INVALID, "loader_set_epoch: epoch %lld must be >= 0",
                          (long long)epoch);
    stop_worker(l);
    l->epoch = l->pepoch = epoch;
    l->ppos = 0;
    make_order(l, l->perm, epoch);
    make_order(l, l->pperm, epoch);
    return 0;
}

/* Turns the full slot into tensors (caller holds the lock with prefetch). */
static int take_slot(oar_loader *l, int r, oar_tensor **x, oar_tensor **y) {
    if (r < 0) return oari_error(OAR_ERR_INVALID, "%s", l->serr);
    if (r == 0) {
        l->epoch++;
        make_order(l, l->perm, l->epoch);
        return 0;
    }
    int64_t xs[OAR_MAX_DIMS], ys[OAR_MAX_DIMS];
    memcpy(xs, l->ds->x->shape, sizeof xs);
    memcpy(ys, l->ds->y->shape, sizeof ys);
    xs[0] = ys[0] = l->sb;
    oar_tensor *xf = oari_tensor_empty(NULL, OAR_F32, l->ds->x->ndim, xs);
    oar_tensor *yb = xf ? oari_tensor_empty(NULL, l->ds->y->dtype, l->ds->y->ndim, ys) : NULL;
    if (!xf || !yb) {
        oar_tensor_release(xf);
        return oari_fail_status();
    }
    memcpy(xf->storage->data, l->sx, (size_t)(l->sb * l->row_x) * sizeof(float));
    memcpy(yb->storage->data, l->sy, (size_t)(l->sb * l->row_y) * oar_dtype_size(yb->dtype));
    *x = oari_pool_adopt(xf);
    *y = oari_pool_adopt(yb);
    return *x && *y ? 1 : oari_fail_status();
}

static int loader_next(oar_loader *l, oar_tensor **x, oar_tensor **y) {
    if (x) *x = NULL;
    if (y) *y = NULL;
    if (!l || !x || !y) return oari_error(OAR_ERR_INVALID, "loader_next: NULL argument");
    if (!l->o.prefetch) return take_slot(l, produce(l), x, y);
    if (!l->started) {
        l->stop = l->full = false;
        if (pthread_create(&l->thread, NULL, worker, l))
            return take_slot(l, produce(l), x, y); /* no thread: work synchronously */
        l->started = true;
    }
    pthread_mutex_lock(&l->mu);
    while (!l->full)
        pthread_cond_wait(&l->cv, &l->mu);
    int r = take_slot(l, l->sresult, x, y);
    if (r < 0 && l->sresult < 0) {
        /* the worker stops at an error; a retry starts it again at the cursor */
        l->full = false;
        pthread_mutex_unlock(&l->mu);
        stop_worker(l);
        return r;
    }
    if (r < 0) {
        /* out of memory here: keep the batch for the next call */
        pthread_mutex_unlock(&l->mu);
        return r;
    }
    l->full = false;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    return r;
}

/* The profiler sees the time a step waits here (for a prefetching loader,
 * only the wait for the worker). */
int oar_loader_next(oar_loader *l, oar_tensor **x, oar_tensor **y) {
    int64_t prof_t0 = OARI_PROF_BEGIN(); /* profiler */
    int64_t t0 = oari_prof_now();
    int r = loader_next(l, x, y);
    if (l) l->wait_ns += oari_prof_now() - t0;
    OARI_PROF_END(OAR_PROFILER_DATA, "loader_next", prof_t0, 0, NULL); /* profiler */
    return r;
}

double oar_loader_wait_seconds(const oar_loader *l) {
    if (!l) return oari_error(OAR_ERR_INVALID, "loader_wait_seconds: loader is NULL"), -1.0;
    return 1e-9 * (double)l->wait_ns;
}

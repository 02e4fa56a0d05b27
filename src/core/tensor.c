/* Tensor objects: creation of the struct, reference counting, views, shape
 * helpers and properties. Ops live in src/ops/. */
#include "core.h"

#include <string.h>

/* ---- extension slots --------------------------------------------------- */

static const oari_ext_class no_class;
static const oari_ext_class *ext_classes[OARI_EXT_COUNT];

void oari_ext_register(oari_ext_slot slot, const oari_ext_class *cls) {
    if ((unsigned)slot < OARI_EXT_COUNT) __atomic_store_n(&ext_classes[slot], cls, __ATOMIC_RELEASE);
}

const oari_ext_class *oari_ext_class_of(oari_ext_slot slot) {
    const oari_ext_class *c =
        (unsigned)slot < OARI_EXT_COUNT ? __atomic_load_n(&ext_classes[slot], __ATOMIC_ACQUIRE) : NULL;
    return c ? c : &no_class;
}

/* ---- shapes and tensors -------------------------------------------------- */

int64_t oari_shape_numel(const char *op, int ndim, const int64_t *shape) {
    int64_t n = 1;
    char buf[200];
    if (ndim < 0 || ndim > OAR_MAX_DIMS) {
        oari_error(OAR_ERR_INVALID, "%s: rank %d is out of range [0, %d]", op, ndim, OAR_MAX_DIMS);
        return -1;
    }
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) {
            oari_error(OAR_ERR_INVALID, "%s: negative dimension in shape %s", op,
                       oari_shape_str(buf, ndim, shape));
            return -1;
        }
        if (shape[i] && n > INT64_MAX / shape[i]) {
            oari_error(OAR_ERR_INVALID, "%s: the number of elements of shape %s overflows int64",
                       op, oari_shape_str(buf, ndim, shape));
            return -1;
        }
        n *= shape[i];
    }
    return n;
}

void oari_contiguous_strides(int ndim, const int64_t *shape, int64_t *strides) {
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        strides[i] = s;
        /* an empty tensor's other dims may multiply past int64 (its strides
         * are never used to reach an element): saturate */
        if (__builtin_mul_overflow(s, shape[i] > 1 ? shape[i] : 1, &s)) s = INT64_MAX;
    }
}

int oari_wrap_dim(const char *op, int64_t dim, int ndim) {
    int n = ndim > 0 ? ndim : 1; /* a scalar accepts dim 0 and -1, as in PyTorch */
    if (dim < -n || dim >= n) {
        oari_error(OAR_ERR_INVALID, "%s: dim %lld is out of range for a tensor of rank %d "
                   "(expected [%d, %d])", op, (long long)dim, ndim, -n, n - 1);
        return -1;
    }
    return (int)(dim < 0 ? dim + n : dim);
}

int oari_broadcast_shapes(const char *op, int na, const int64_t *a, int nb, const int64_t *b,
                          int64_t *out) {
    int n = na > nb ? na : nb;
    for (int i = 0; i < n; i++) {
        int64_t da = i < n - na ? 1 : a[i - (n - na)];
        int64_t db = i < n - nb ? 1 : b[i - (n - nb)];
        if (da != db && da != 1 && db != 1) {
            char sa[200], sb[200], za[64], zb[64];
            oari_error(OAR_ERR_INVALID, "%s: shapes %s and %s do not broadcast (dim %d: %s vs %s)",
                       op, oari_shape_str(sa, na, a), oari_shape_str(sb, nb, b), i,
                       oari_size_str(za, da), oari_size_str(zb, db));
            return -1;
        }
        out[i] = da == 1 ? db : da;
    }
    return n;
}

oar_tensor *oari_tensor_make(oari_storage *storage, oar_dtype dtype, int ndim,
                             const int64_t *shape, const int64_t *strides, int64_t offset) {
    int64_t numel = oari_shape_numel("tensor", ndim, shape);
    if (numel < 0) return NULL;
    oar_tensor *t = oari_obj_calloc(sizeof *t);
    if (!t) return NULL;
    t->refcount = 1;
    t->dtype = dtype;
    t->ndim = ndim;
    t->numel = numel;
    t->offset = offset;
    if (ndim) memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
    if (strides) {
        if (ndim) memcpy(t->strides, strides, (size_t)ndim * sizeof *strides);
    } else {
        oari_contiguous_strides(ndim, shape, t->strides);
    }
    if (storage) {
        __atomic_add_fetch(&storage->refcount, 1, __ATOMIC_RELAXED);
        t->storage = storage;
    }
    return t;
}

oar_tensor *oari_tensor_empty(oar_device *device, oar_dtype dtype, int ndim,
                              const int64_t *shape) {
    if ((unsigned)dtype >= OAR_DTYPE_COUNT)
        return oari_error(OAR_ERR_INVALID, "empty: invalid dtype %d", (int)dtype), NULL;
    int64_t numel = oari_shape_numel("empty", ndim, shape);
    if (numel < 0) return NULL;
    if ((uint64_t)numel > SIZE_MAX / 16) {
        oari_error(OAR_ERR_INVALID, "empty: %lld elements do not fit in memory", (long long)numel);
        return NULL;
    }
    if (!device) device = oari_device_cpu();
    oari_storage *s = oari_obj_calloc(sizeof *s);
    if (!s) return NULL;
    s->refcount = 1;
    s->nbytes = (size_t)numel * oar_dtype_size(dtype);
    s->device = device;
    s->data = oari_device_alloc(device, s->nbytes);
    if (!s->data) {
        oari_obj_free(s, sizeof *s);
        return NULL;
    }
    /* The tensor retains the storage; drop our own reference. */
    oar_tensor *t = oari_tensor_make(s, dtype, ndim, shape, NULL, 0);
    oari_storage_release(s);
    return t;
}

oar_tensor *oari_tensor_view(oar_tensor *x, int ndim, const int64_t *shape,
                             const int64_t *strides, int64_t offset) {
    oar_tensor *t = oari_tensor_make(x->storage, x->dtype, ndim, shape, strides, offset);
    if (t) t->wrapped_number = false;
    return t;
}

void oari_storage_release(oari_storage *s) {
    if (!s || __atomic_sub_fetch(&s->refcount, 1, __ATOMIC_ACQ_REL) != 0) return;
    oari_device_free(s->device, s->data, s->nbytes);
    oari_obj_free(s, sizeof *s);
}

void oari_storage_bump_version(oari_storage *s) {
    if (s) __atomic_add_fetch(&s->version, 1, __ATOMIC_RELAXED);
}

oar_tensor *oar_tensor_retain(oar_tensor *t) {
    if (t) __atomic_add_fetch(&t->refcount, 1, __ATOMIC_RELAXED);
    return t;
}

void oar_tensor_release(oar_tensor *t) {
    if (!t || __atomic_sub_fetch(&t->refcount, 1, __ATOMIC_ACQ_REL) != 0) return;
    oari_storage_release(t->storage);
    oar_tensor_release(t->grad);
    _Static_assert(OARI_EXT_COUNT == 3, "the test below names every slot");
    bool any_ext = t->ext[0] || t->ext[1] || t->ext[2];
    for (int s = 0; __builtin_expect(any_ext, 0) && s < OARI_EXT_COUNT; s++) {
        if (!t->ext[s]) continue;
        const oari_ext_class *c = oari_ext_class_of((oari_ext_slot)s);
        if (c->release) c->release(t->ext[s]);
    }
    oari_obj_free(t, sizeof *t);
}

void oari_ktensor(const oar_tensor *t, oar_ktensor *k) {
    /* Hot path of every op: copy only the dims in use. */
    k->dtype = t->dtype;
    k->ndim = t->ndim;
    k->offset = t->offset;
    for (int i = 0; i < t->ndim; i++) {
        k->shape[i] = t->shape[i];
        k->strides[i] = t->strides[i];
    }
    if (t->storage) {
        k->buffer = t->storage->data;
        k->data = (char *)t->storage->data + t->offset * (int64_t)oar_dtype_size(t->dtype);
    } else {
        k->buffer = k->data = NULL;
    }
}

/* ---- properties -------------------------------------------------------- */

int oar_tensor_ndim(const oar_tensor *t) { return t ? t->ndim : (oari_null_arg(__func__, "tensor"), -1); }
const int64_t *oar_tensor_shape(const oar_tensor *t) {
    return t ? t->shape : (oari_null_arg(__func__, "tensor"), NULL);
}
const int64_t *oar_tensor_strides(const oar_tensor *t) {
    return t ? t->strides : (oari_null_arg(__func__, "tensor"), NULL);
}
int64_t oar_tensor_offset(const oar_tensor *t) {
    return t ? t->offset : (oari_null_arg(__func__, "tensor"), -1);
}
int64_t oar_tensor_numel(const oar_tensor *t) {
    return t ? t->numel : (oari_null_arg(__func__, "tensor"), -1);
}
oar_dtype oar_tensor_dtype(const oar_tensor *t) {
    return t ? t->dtype : (oari_null_arg(__func__, "tensor"), OAR_DTYPE_INVALID);
}
oar_device *oar_tensor_device(const oar_tensor *t) {
    if (!t) return oari_null_arg(__func__, "tensor"), NULL;
    return t->storage ? t->storage->device : NULL; /* symbolic (traced): none */
}

int64_t oar_tensor_dim(const oar_tensor *t, int dim) {
    if (!t) return oari_error(OAR_ERR_INVALID, "oar_tensor_dim: tensor is NULL"), -1;
    int d = oari_wrap_dim("oar_tensor_dim", dim, t->ndim);
    if (d < 0) return -1;
    return t->ndim ? t->shape[d] : 1;
}

bool oar_tensor_is_contiguous(const oar_tensor *t) {
    if (!t) return oari_null_arg(__func__, "tensor"), false;
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->strides[i] != s) return false;
        s *= t->shape[i];
    }
    return true;
}

bool oar_tensor_shares_storage(const oar_tensor *a, const oar_tensor *b) {
    if (!a || !b) return oari_null_arg(__func__, "tensor"), false;
    return a->storage && a->storage == b->storage;
}

void *oar_tensor_data(const oar_tensor *t) {
    if (!t || !t->storage || t->storage->device != oari_device_cpu()) return NULL;
    return (char *)t->storage->data + t->offset * (int64_t)oar_dtype_size(t->dtype);
}

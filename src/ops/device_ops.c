/* Tensors on devices: moving them (oar_tensor_to, the to_device op),
 * creating them there (oar_full_on), and the two things dispatch does for
 * a device other than the CPU: 0-d CPU inputs follow the device, and ops without a device
 * kernel run on the CPU with copies and a one-time warning. */
#include "device_ops.h"

#include <string.h>

static int64_t fallback_count;
static unsigned char warned[OARI_OP_COUNT];

int64_t oar_device_fallback_count(void) { return __atomic_load_n(&fallback_count, __ATOMIC_RELAXED); }
void oar_device_fallback_reset(void) { __atomic_store_n(&fallback_count, 0, __ATOMIC_RELAXED); }

/* ---- moving tensors ----------------------------------------------------- */

/* A contiguous copy of t on d (owned), or t retained if it is there. Not
 * recorded by autograd. */
static oar_tensor *moved(oar_tensor *t, oar_device *d) {
    oar_device *s = t->storage->device;
    if (s == d) return oar_tensor_retain(t);
    oar_tensor *c = t;
    if (!oar_tensor_is_contiguous(t)) {
        oari_no_grad_push();
        int st = oari_dispatch(OARI_OP_contiguous, 1, &t, NULL, &c);
        oari_no_grad_pop();
        if (st) return NULL;
    }
    oar_tensor *r = oari_tensor_empty(d, t->dtype, t->ndim, t->shape);
    size_t es = oar_dtype_size(t->dtype), n = (size_t)t->numel * es;
    size_t off = (size_t)c->offset * es;
    int st = r ? 0 : oari_fail_status();
    if (!st && n) {
        if (s == oari_device_cpu()) {
            st = oari_device_from_host(d, r->storage->data, 0, (char *)c->storage->data + off, n);
        } else if (d == oari_device_cpu()) {
            st = oari_device_to_host(s, r->storage->data, c->storage->data, off, n);
        } else { /* between two devices: through host memory */
            void *tmp = oari_malloc(n);
            st = tmp ? oari_device_to_host(s, tmp, c->storage->data, off, n) : oari_fail_status();
            if (!st) st = oari_device_from_host(d, r->storage->data, 0, tmp, n);
            oari_free(tmp, n);
        }
    }
    if (c != t) oar_tensor_release(c);
    if (st) {
        oar_tensor_release(r);
        return NULL;
    }
    return r;
}

/* The to_device op: a move is an op, so autograd records it like any
 * other (dispatch's view path runs it: its output lives on another device
 * than its input, which no kernel expresses). Its gradient is the move
 * back, itself a to_device, so it differentiates again. */
static int infer_to_device(oari_infer *c) {
    const oari_attrs *a = c->attrs;
    int n = oar_device_count();
    if (a->ni != 2 || a->i[0] < 0 || a->i[0] >= n || a->i[1] < 0 || a->i[1] >= n)
        return oari_error(OAR_ERR_INVALID, "to_device: malformed attributes (device ids out of "
                          "range [0, %d))", n);
    oari_meta_from(&c->out[0], c->in[0]);
    return 0;
}

static oar_tensor *view_to_device(oar_tensor *x, const oari_attrs *a) {
    oar_device *d = oar_device_at((int)a->i[0]);
    return d ? moved(x, d) : NULL;
}

static int grad_to_device(oari_grad_ctx *g) {
    oari_attrs back = {.ni = 2, .i = {g->attrs->i[1], g->attrs->i[0]}};
    g->gin[0] = oari_call1(OARI_OP_to_device, g->gout[0], &back);
    return g->gin[0] ? 0 : OAR_ERR_INVALID;
}

const oari_op_def oari_def_to_device = {
    .name = "to_device", .n_in = 1, .n_out = 1, .fusion = OARI_FUSE_OPAQUE, .flags = OARI_F_VIEW,
    .infer = infer_to_device, .view = view_to_device, .grad = grad_to_device,
};

oar_tensor *oar_tensor_to(oar_tensor *t, oar_device *d) {
    if (!t) {
        if (!oari_error_pending()) oari_error(OAR_ERR_INVALID, "oar_tensor_to: tensor is NULL");
        return NULL;
    }
    if (!d) return oari_error(OAR_ERR_INVALID, "oar_tensor_to: device is NULL"), NULL;
    if (!t->storage)
        return oari_error(OAR_ERR_STATE, "oar_tensor_to: tensor is symbolic (traced): a move between "
                          "devices cannot be traced; move the model and the inputs before tracing"), NULL;
    if (t->storage->device == d) return oari_pool_adopt(oar_tensor_retain(t)); /* no copy, no node */
    oari_attrs a = {.ni = 2, .i = {d->id, t->storage->device->id}};
    return oari_call1(OARI_OP_to_device, t, &a);
}

oar_tensor *oar_full_on(int32_t dtype, int ndim, const int64_t *shape, double value,
                        oar_device *d) {
    if (ndim && !shape) return oari_error(OAR_ERR_INVALID, "full_on: shape is NULL"), NULL;
    oar_tensor *t = oari_tensor_empty(d, (oar_dtype)dtype, ndim, shape);
    if (!t) return NULL;
    oari_attrs a = {.nf = 2, .f = {value, 0}};
    oar_tensor *r = NULL;
    int st = oari_dispatch(OARI_OP_fill, 1, &t, &a, &r);
    oar_tensor_release(r);
    if (st) {
        oar_tensor_release(t);
        return NULL;
    }
    return oari_pool_adopt(t);
}

/* ---- dispatch's device steps -------------------------------------------- */

bool oari_device_follows(const oar_tensor *t, bool inplace_target) {
    return t && t->ndim == 0 && t->storage && t->storage->device == oari_device_cpu() &&
           !t->requires_grad && !inplace_target;
}

int oari_device_move_scalars(oar_device *dev, bool inplace, int n_in, oar_tensor *const *in,
                             oar_tensor **cin, int *n_replaced) {
    for (int i = 0; i < n_in; i++) {
        if (!oari_device_follows(cin[i], inplace && i == 0)) continue;
        oar_tensor *r = moved(cin[i], dev);
        if (!r) return oari_fail_status();
        if (cin[i] != in[i]) oar_tensor_release(cin[i]);
        cin[i] = r;
        (*n_replaced)++;
    }
    return 0;
}

bool oari_device_claims_k(oar_device *dev, oari_op op, oar_dtype kdtype, int n_in, const oar_ktensor *kin,
                          const oari_attrs *attrs) {
    if (!oari_kernel_lookup(dev, op, kdtype)) return false;
    if (!dev->iface->supports_op) return true;
    oar_kernel_call call = {
        .op = oari_op_name(op), .n_in = n_in, .n_out = 0, .in = kin, .out = NULL,
        .n_iattr = attrs->ni, .n_fattr = attrs->nf, .iattr = attrs->i, .fattr = attrs->f,
    };
    return dev->iface->supports_op(dev->ctx, dev->index, &call) != 0;
}

void oari_ktensor_f32_temp(const oar_tensor *t, oar_ktensor *k) {
    oari_ktensor(t, k);
    k->dtype = OAR_F32;
    k->offset = 0;
    k->data = k->buffer = NULL;
    oari_contiguous_strides(k->ndim, k->shape, k->strides);
}

/* The kernel tensors of the call's inputs; with via_f32, each f16/bf16
 * input as the f32 temporary the planner gives its kernel instead. */
static void kinputs(int n_in, oar_tensor *const *in, bool via_f32, oar_ktensor *kin) {
    for (int i = 0; i < n_in; i++) {
        if (!in[i]) {
            memset(&kin[i], 0, sizeof kin[i]);
            kin[i].dtype = -1;
            continue;
        }
        if (via_f32 && oari_is_half(in[i]->dtype)) oari_ktensor_f32_temp(in[i], &kin[i]);
        else oari_ktensor(in[i], &kin[i]);
    }
}

bool oari_device_claims(oar_device *dev, oari_op op, oar_dtype kdtype, int n_in,
                        oar_tensor *const *in, const oari_attrs *attrs) {
    oar_ktensor kin[OARI_MAX_IN];
    kinputs(n_in, in, false, kin);
    return oari_device_claims_k(dev, op, kdtype, n_in, kin, attrs);
}

bool oari_device_claims_via_f32(oar_device *dev, oari_op op, int n_in, oar_tensor *const *in,
                                const oari_attrs *attrs) {
    oar_ktensor kin[OARI_MAX_IN];
    kinputs(n_in, in, true, kin);
    return oari_device_claims_k(dev, op, OAR_F32, n_in, kin, attrs);
}

bool oari_fused_op_here(oari_op op, const oar_tensor *x) {
    oar_device *d = x->storage ? x->storage->device : oari_device_cpu(); /* traced: a CPU graph */
    return d == oari_device_cpu() || oari_kernel_lookup(d, op, x->dtype) ||
           (oari_is_half(x->dtype) && oari_kernel_lookup(d, op, OAR_F32));
}

/* A CPU tensor with t's geometry over a copy of t's whole storage. */
static oar_tensor *host_mirror(oar_tensor *t) {
    oar_device *d = t->storage->device;
    int64_t nbytes = (int64_t)t->storage->nbytes;
    oar_tensor *bytes = oari_tensor_empty(NULL, OAR_U8, 1, &nbytes);
    if (!bytes) return NULL;
    oar_tensor *h = oari_tensor_make(bytes->storage, t->dtype, t->ndim, t->shape, t->strides,
                                     t->offset);
    oar_tensor_release(bytes);
    if (h && oari_device_to_host(d, h->storage->data, t->storage->data, 0, t->storage->nbytes)) {
        oar_tensor_release(h);
        return NULL;
    }
    return h;
}

int oari_device_run_on_cpu(oari_op op, oar_device *dev, int n_in, oar_tensor *const *in,
                           const oari_attrs *attrs, int n_out, oar_tensor *const *out) {
    const oari_op_def *def = oari_op_defs[op];
    if (!__atomic_exchange_n(&warned[op], 1, __ATOMIC_RELAXED))
        oari_log(OAR_LOG_WARN, dev->name,
                 "no kernel for op %s (dtype of %s); it runs on the CPU with copies (warned once "
                 "per op)", def->name, n_in && in[0] ? oar_dtype_name(in[0]->dtype) : "-");
    __atomic_add_fetch(&fallback_count, 1, __ATOMIC_RELAXED);

    oar_tensor *hin[OARI_MAX_IN] = {0}, *hout[OARI_MAX_OUT] = {0};
    int st = 0;
    for (int i = 0; i < n_in && !st; i++) {
        if (!in[i]) continue;
        hin[i] = in[i]->storage->device == dev ? host_mirror(in[i]) : oar_tensor_retain(in[i]);
        if (!hin[i]) st = oari_fail_status();
    }
    /* without autocast: the call's dtypes were decided for dev (autocast
     * ran before this call), and the CPU's scope dtype may differ */
    oari_no_grad_push();
    if (!st) st = oari_dispatch_run(op, n_in, hin, attrs, hout);
    oari_no_grad_pop();
    for (int j = 0; j < n_out && !st; j++) {
        if (def->flags & OARI_F_INPLACE) { /* the whole storage back, as it was mirrored */
            st = oari_device_from_host(dev, out[0]->storage->data, 0, hin[0]->storage->data,
                                       out[0]->storage->nbytes);
            break;
        }
        size_t n = (size_t)out[j]->numel * oar_dtype_size(out[j]->dtype);
        oar_tensor *c = hout[j];
        if (c->dtype != out[j]->dtype || c->numel != out[j]->numel) {
            st = oari_error(OAR_ERR_STATE, "%s: the CPU's result (%s) does not match %s's output (%s)", def->name,
                            oar_dtype_name(c->dtype), dev->name, oar_dtype_name(out[j]->dtype));
            break;
        }
        st = oari_device_from_host(dev, out[j]->storage->data,
                                   (size_t)out[j]->offset * oar_dtype_size(out[j]->dtype),
                                   (char *)c->storage->data +
                                       (size_t)c->offset * oar_dtype_size(c->dtype), n);
    }
    for (int i = 0; i < n_in; i++) oar_tensor_release(hin[i]);
    for (int j = 0; j < n_out; j++) oar_tensor_release(hout[j]);
    return st;
}

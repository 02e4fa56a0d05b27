/* The one dispatch (invariant 3 of docs/architecture.md): every op call comes through
 * oari_dispatch, which checks inputs, runs the op's shape rule, casts
 * inputs, runs the device kernel found through the device table (or makes a
 * view), and records the call on the autograd tape. */
#include "op.h"
#include "device_ops.h" /* devices: scalar inputs follow, CPU fallback */
#include "../profiler/hooks.h" /* profiler hook */

#include <string.h>

#define MAX_CACHED_DEVICES 16

oari_dispatch_hooks oari_hooks;
_Thread_local void *oari_trace_current;

/* Per (device, op, dtype): the kernel, or `absent` once looked up and missing. */
static oar_kernel_fn kernel_cache[MAX_CACHED_DEVICES][OARI_OP_COUNT][OAR_DTYPE_COUNT];

static int absent(void *ctx, const oar_kernel_call *call) {
    (void)ctx;
    (void)call;
    return OAR_ERR_UNSUPPORTED;
}

oar_kernel_fn oari_kernel_lookup(oar_device *dev, oari_op op, oar_dtype dtype) {
    oar_kernel_fn *slot = dev->id < MAX_CACHED_DEVICES ? &kernel_cache[dev->id][op][dtype] : NULL;
    oar_kernel_fn k = slot ? __atomic_load_n(slot, __ATOMIC_RELAXED) : NULL;
    if (!k) {
        k = dev->iface->get_kernel(dev->ctx, dev->index, oari_op_name(op), (int32_t)dtype);
        if (!k) k = absent;
        if (slot) __atomic_store_n(slot, k, __ATOMIC_RELAXED);
    }
    return k == absent ? NULL : k;
}

/* A kernel view of t broadcast to (ndim, shape): stride 0 on expanded dims. */
static void ktensor_expanded(const oar_tensor *t, int ndim, const int64_t *shape, oar_ktensor *k) {
    oari_ktensor(t, k);
    if (t->ndim == ndim && !memcmp(t->shape, shape, (size_t)ndim * sizeof *shape)) return;
    int lead = ndim - t->ndim;
    k->ndim = ndim;
    for (int i = ndim - 1; i >= 0; i--) {
        int src = i - lead;
        bool broadcast = src < 0 || t->shape[src] != shape[i];
        k->shape[i] = shape[i];
        k->strides[i] = broadcast ? 0 : t->strides[src];
    }
}

static bool is_half(oar_dtype d) { return d == OAR_F16 || d == OAR_BF16; }

static int run_kernel(const oari_op_def *def, oari_op op, oar_device *dev, oar_dtype kdtype,
                      int n_in, oar_tensor *const *in, const oari_attrs *attrs, int n_out,
                      oar_tensor *const *out) {
    oar_kernel_fn k = oari_kernel_lookup(dev, op, kdtype);
    if (!k)
        return oari_error(OAR_ERR_UNSUPPORTED, "%s: no kernel for dtype %s on device %s",
                          def->name, oar_dtype_name(kdtype), dev->name);
    oar_ktensor kin[OARI_MAX_IN], kout[OARI_MAX_OUT];
    for (int i = 0; i < n_in; i++) {
        if (!in[i]) {
            memset(&kin[i], 0, sizeof kin[i]);
            kin[i].dtype = -1;
        } else if (def->flags & OARI_F_BROADCAST) {
            ktensor_expanded(in[i], out[0]->ndim, out[0]->shape, &kin[i]);
        } else {
            oari_ktensor(in[i], &kin[i]);
        }
    }
    for (int j = 0; j < n_out; j++) oari_ktensor(out[j], &kout[j]);
    oar_kernel_call call = {
        .op = def->name, .n_in = n_in, .n_out = n_out, .in = kin, .out = kout,
        .n_iattr = attrs->ni, .n_fattr = attrs->nf, .iattr = attrs->i, .fattr = attrs->f,
    };
    return k(dev->ctx, &call);
}

/* Casts x to dtype outside autograd; an owned reference. */
static oar_tensor *cast_owned(oar_tensor *x, oar_dtype dtype) {
    oari_attrs a = {.ni = 1, .i = {dtype}};
    oar_tensor *r = NULL;
    oari_dispatch(OARI_OP_cast, 1, &x, &a, &r);
    return r;
}

/* f16/bf16 are stored as such and computed in f32: when a device has no
 * half kernel, run the f32 one on converted copies. Not recorded by
 * autograd: the caller records the op on its real inputs and outputs. */
static int run_half_via_f32(const oari_op_def *def, oari_op op, oar_device *dev, int n_in,
                            oar_tensor *const *in, const oari_attrs *attrs, int n_out,
                            oar_tensor *const *out) {
    oar_tensor *fin[OARI_MAX_IN] = {0}, *fout[OARI_MAX_OUT] = {0};
    int st = 0;
    oari_no_grad_push();
    for (int i = 0; i < n_in && !st; i++) {
        fin[i] = in[i] && is_half(in[i]->dtype) ? cast_owned(in[i], OAR_F32) : oar_tensor_retain(in[i]);
        if (in[i] && !fin[i]) st = oari_fail_status();
    }
    for (int j = 0; j < n_out && !st; j++) {
        if (!is_half(out[j]->dtype)) fout[j] = oar_tensor_retain(out[j]);
        else if (def->flags & OARI_F_INPLACE) fout[j] = oar_tensor_retain(fin[0]);
        else fout[j] = oari_tensor_empty(dev, OAR_F32, out[j]->ndim, out[j]->shape);
        if (!fout[j]) st = oari_fail_status();
    }
    if (!st) st = run_kernel(def, op, dev, OAR_F32, n_in, fin, attrs, n_out, fout);
    for (int j = 0; j < n_out && !st; j++) {
        if (fout[j] == out[j]) continue;
        oar_tensor *pair[2] = {out[j], fout[j]}, *r = NULL;
        st = oari_dispatch(OARI_OP_copy, 2, pair, NULL, &r);
        oar_tensor_release(r);
    }
    for (int i = 0; i < n_in; i++) oar_tensor_release(fin[i]);
    for (int j = 0; j < n_out; j++) oar_tensor_release(fout[j]);
    oari_no_grad_pop();
    return st;
}

static bool wants_grad(const oari_op_def *def, int n_in, oar_tensor *const *in) {
    if ((def->flags & OARI_F_NONDIFF) || !oari_grad_mode_enabled()) return false;
    for (int i = 0; i < n_in; i++)
        if (in[i] && in[i]->requires_grad) return true;
    return false;
}

int oari_dispatch(oari_op op, int n_in, oar_tensor *const *in, const oari_attrs *attrs,
                  oar_tensor **out) {
    static const oari_attrs no_attrs;
    const oari_op_def *def = (unsigned)op < OARI_OP_COUNT ? oari_op_defs[op] : NULL;
    if (!def) return oari_error(OAR_ERR_UNSUPPORTED, "%s: op is not implemented", oari_op_name(op));
    if (!attrs) attrs = &no_attrs;
    const int n_out = def->n_out;
    for (int j = 0; j < n_out; j++) out[j] = NULL;
    if (def->n_in >= 0 ? n_in != def->n_in : (n_in < 1 || n_in > OARI_MAX_IN))
        return oari_error(OAR_ERR_INVALID, "%s: got %d inputs, expected %s%d", def->name, n_in,
                          def->n_in >= 0 ? "" : "1 to ", def->n_in >= 0 ? def->n_in : OARI_MAX_IN);
    for (int i = 0; i < n_in; i++) {
        if (in[i] || (i > 0 && (def->flags & OARI_F_OPTIONAL_IN))) continue;
        /* keep the message of whatever produced the NULL */
        if (!oari_error_pending()) oari_error(OAR_ERR_INVALID, "%s: input %d is NULL", def->name, i);
        return OAR_ERR_INVALID;
    }
    /* dtensors: the sharding rule decides, then this dispatch runs on the shards */
    if (__builtin_expect(oari_dist_any(n_in, in), 0)) {
        if (!oari_hooks.dist) return oari_error(OAR_ERR_STATE, "%s: a dtensor input, but dist is not installed", def->name);
        return oari_hooks.dist(op, n_in, in, attrs, out);
    }

    int64_t prof_t0 = OARI_PROF_BEGIN(); /* profiler: one predictable branch when off */
    oari_infer c;
    c.op = def->name;
    c.n_in = n_in;
    c.in = in;
    c.attrs = attrs;
    memset(c.out, 0, sizeof c.out);
    for (int i = 0; i < n_in; i++) c.in_dtype[i] = in[i] ? in[i]->dtype : OAR_F32;
    c.kernel_dtype = n_in ? in[0]->dtype : OAR_F32;
    int st = def->infer(&c);
    if (st) return st;
    /* Static graph: a call with a traced input appends a node (1: not traced). */
    if (oari_trace_current && oari_hooks.trace) {
        int traced = oari_hooks.trace(op, &c, out);
        if (traced != 1) return traced;
    }
    if ((def->flags & OARI_F_INPLACE) && oari_grad_mode_enabled() && in[0]->requires_grad)
        return oari_error(OAR_ERR_STATE, "%s: in-place write into a tensor that requires grad; do it "
                          "inside oar_no_grad_push/pop (an optimizer step, an initialisation) or "
                          "on a clone", def->name);

    oar_device *dev = NULL;
    for (int i = 0; i < n_in; i++) {
        if (!in[i] || !in[i]->storage) continue;
        if (oari_device_follows(in[i], i == 0 && (def->flags & OARI_F_INPLACE))) continue; /* devices */
        oar_device *d = in[i]->storage->device;
        if (!dev) dev = d;
        else if (d != dev)
            return oari_error(OAR_ERR_INVALID, "%s: inputs are on different devices (%s and %s); "
                              "move them to one with oar_tensor_to", def->name, dev->name, d->name);
    }
    if (!dev) dev = oari_device_cpu();

    oar_tensor *cin[OARI_MAX_IN];
    int n_cast = 0;
    for (int i = 0; i < n_in; i++) cin[i] = in[i];

    if (def->flags & OARI_F_VIEW) {
        if (!(out[0] = def->view(in[0], attrs))) return oari_fail_status();
    } else {
        /* Cast inputs to the dtypes the shape rule chose; the casts are
         * recorded by autograd, so gradients flow back through them. */
        for (int i = 0; i < n_in && !st; i++) {
            if (!in[i] || in[i]->dtype == c.in_dtype[i]) continue;
            oari_attrs ca = {.ni = 1, .i = {c.in_dtype[i]}};
            oar_tensor *r = NULL;
            if ((st = oari_dispatch(OARI_OP_cast, 1, &in[i], &ca, &r))) break;
            cin[i] = r;
            n_cast++;
        }
        if (!st && dev != oari_device_cpu()) /* devices: 0-d CPU inputs follow */
            st = oari_device_move_scalars(dev, def->flags & OARI_F_INPLACE, n_in, in, cin, &n_cast);
        for (int j = 0; j < n_out && !st; j++) {
            out[j] = (def->flags & OARI_F_INPLACE)
                         ? oar_tensor_retain(in[0])
                         : oari_tensor_empty(dev, c.out[j].dtype, c.out[j].ndim, c.out[j].shape);
            if (!out[j]) st = oari_fail_status();
        }
        if (!st) {
            bool empty = !(def->flags & OARI_F_INPLACE);
            for (int j = 0; j < n_out; j++) empty = empty && out[j]->numel == 0;
            if (!empty) {
                if (oari_device_needs_fallback(dev, op, c.kernel_dtype, n_in, cin, attrs)) /* devices */
                    st = oari_device_run_on_cpu(op, dev, n_in, cin, attrs, n_out, out);
                else if (is_half(c.kernel_dtype) && !oari_kernel_lookup(dev, op, c.kernel_dtype))
                    st = run_half_via_f32(def, op, dev, n_in, cin, attrs, n_out, out);
                else
                    st = run_kernel(def, op, dev, c.kernel_dtype, n_in, cin, attrs, n_out, out);
            }
            if (!st && (def->flags & OARI_F_INPLACE)) oari_storage_bump_version(in[0]->storage);
        }
    }
    if (!st && wants_grad(def, n_in, cin))
        st = oari_hooks.record ? oari_hooks.record(op, attrs, n_in, cin, n_out, out)
                               : oari_error(OAR_ERR_STATE, "%s: an input requires grad, but autograd is not installed",
                                            def->name);
    if (n_cast)
        for (int i = 0; i < n_in; i++)
            if (cin[i] != in[i]) oar_tensor_release(cin[i]);
    if (st) {
        for (int j = 0; j < n_out; j++) {
            oar_tensor_release(out[j]);
            out[j] = NULL;
        }
    }
    OARI_PROF_END(OAR_PROFILER_OP, def->name, prof_t0, n_in, in); /* profiler */
    return st;
}

oar_tensor *oari_call(oari_op op, int n_in, oar_tensor *const *in, const oari_attrs *attrs) {
    oar_tensor *out[OARI_MAX_OUT];
    if (oari_dispatch(op, n_in, in, attrs, out)) return NULL;
    const oari_op_def *def = oari_op_defs[op];
    for (int j = 1; j < def->n_out; j++) oar_tensor_release(out[j]);
    return oari_pool_adopt(out[0]);
}

oar_tensor *oari_call1(oari_op op, oar_tensor *x, const oari_attrs *attrs) {
    return oari_call(op, 1, &x, attrs);
}

oar_tensor *oari_call2(oari_op op, oar_tensor *a, oar_tensor *b, const oari_attrs *attrs) {
    oar_tensor *in[2] = {a, b};
    return oari_call(op, 2, in, attrs);
}

/* The kernel-call planner (plan.h): the route of a call, its kernel and
 * kernel tensors, and the casts of an f16/bf16 call run in f32. Shared by
 * eager dispatch (plan, run, clear) and the executor (a plan per node). */
#include "plan.h"
#include "custom_op.h"
#include "device_ops.h"

#include <string.h>

#define MAX_CACHED_DEVICES 16

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

/* Whether dev casts a tensor of k's geometry from k's dtype to `to` with a
 * kernel of its own (its supports_op asked, as for any call). */
static bool cast_k_runs_on(oar_device *dev, const oar_ktensor *k, oar_dtype to) {
    oari_attrs a = {.ni = 1, .i = {to}};
    return oari_device_claims_k(dev, OARI_OP_cast, to, 1, k, &a);
}

/* The same for a tensor shaped like `like`, read from `from`. */
static bool cast_runs_on(oar_device *dev, const oar_tensor *like, oar_dtype from, oar_dtype to) {
    oar_ktensor k;
    oari_ktensor(like, &k);
    k.dtype = from;
    return cast_k_runs_on(dev, &k, to);
}

/* Whether dev casts the f32 temporary of a half output (dtype `to`) back,
 * here shaped like the first input (the output's shape is not known yet;
 * rank 0 where the call has no input). */
static bool out_cast_runs_on(oar_device *dev, int n_in, oar_tensor *const *in, oar_dtype to) {
    oar_ktensor k;
    memset(&k, 0, sizeof k);
    k.dtype = OAR_F32;
    for (int i = 0; i < n_in; i++)
        if (in[i]) {
            oari_ktensor_f32_temp(in[i], &k);
            break;
        }
    return cast_k_runs_on(dev, &k, to);
}

/* The route, and in *kernel the kernel it runs (KERNEL, VIA_F32). */
static inline __attribute__((always_inline)) oari_route route_of(oar_device *dev, oari_op op, oar_dtype kdtype, int n_in, oar_tensor *const *in,
                           const oari_attrs *attrs, oar_kernel_fn *kernel) {
    const bool cpu = dev == oari_device_cpu();
    if (__builtin_expect(op == OARI_OP_custom, 0)) return (oari_route)oari_custom_route(dev, attrs);
    if ((*kernel = oari_kernel_lookup(dev, op, kdtype)) &&
        (cpu || oari_device_claims(dev, op, kdtype, n_in, in, attrs)))
        return OARI_ROUTE_KERNEL;
    /* f16/bf16 are stored as such and computed in f32 where a device has
     * no half kernel for the call, if it can also cast each way (each half
     * input to f32 and back, f32 to the half outputs) and its f32 kernel
     * takes the call it will get: the one on the temporaries. A cast to a
     * half dtype the device has no cast kernel for thus runs on the CPU
     * (its f32 route would need that very kernel for its output). */
    bool via_f32 = oari_is_half(kdtype) && (*kernel = oari_kernel_lookup(dev, op, OAR_F32)) &&
                   (cpu || out_cast_runs_on(dev, n_in, in, kdtype)); /* the CPU casts every way */
    for (int i = 0; i < n_in && via_f32; i++)
        if (in[i] && oari_is_half(in[i]->dtype))
            via_f32 = cast_runs_on(dev, in[i], in[i]->dtype, OAR_F32) &&
                      cast_runs_on(dev, in[i], OAR_F32, in[i]->dtype);
    if (via_f32 && (cpu || oari_device_claims_via_f32(dev, op, n_in, in, attrs)))
        return OARI_ROUTE_VIA_F32;
    return cpu ? OARI_ROUTE_NONE : OARI_ROUTE_ON_CPU; /* no kernel takes it, or no casts */
}

oari_route oari_plan_route(oar_device *dev, oari_op op, oar_dtype kdtype, int n_in, oar_tensor *const *in,
                           const oari_attrs *attrs) {
    oar_kernel_fn k;
    return route_of(dev, op, kdtype, n_in, in, attrs, &k);
}

/* Adds the cast of `from` into `to` (the kernel keyed by to's dtype). */
static int add_cast(oari_plan *p, const oar_tensor *from, const oar_tensor *to) {
    oari_cast_step *c = &p->casts[p->n_casts];
    c->dtype = to->dtype;
    if (!(c->k = oari_kernel_lookup(p->dev, OARI_OP_cast, to->dtype)))
        return oari_error(OAR_ERR_UNSUPPORTED, "%s: no cast kernel to %s on %s", oari_op_name(p->op),
                          oar_dtype_name(to->dtype), p->dev->name);
    oari_ktensor(from, &c->in);
    oari_ktensor(to, &c->out);
    c->call = (oar_kernel_call){.op = "cast", .n_in = 1, .n_out = 1, .in = &c->in, .out = &c->out,
                                .n_iattr = 1, .iattr = &c->dtype};
    p->n_casts++;
    return 0;
}

static oar_tensor *fresh_temp(oari_plan *p, const oar_tensor *like) {
    return oari_tensor_empty(p->dev, OAR_F32, like->ndim, like->shape);
}

/* VIA_F32: an f32 temporary for every half tensor of the call (an in-place
 * op's target once), casts into the inputs' and out of the outputs'; the
 * kernel then sees the temporaries (tin / tout). */
static int plan_casts(oari_plan *p, bool inplace, int n_in, oar_tensor *const *in, int n_out,
                      oar_tensor *const *out, oar_tensor **tin, oar_tensor **tout, oari_temp_fn temp,
                      void *temp_ctx) {
    int n = n_in + n_out;
    if (!(p->casts = oari_calloc((size_t)n, sizeof *p->casts)) ||
        !(p->temps = oari_calloc((size_t)n, sizeof *p->temps)))
        return oari_fail_status();
    p->cap_casts = n;
    int nt = 0;
    for (int k = 0; k < n; k++) {
        bool is_in = k < n_in;
        oar_tensor *t = is_in ? in[k] : out[k - n_in];
        oar_tensor **slot = is_in ? &tin[k] : &tout[k - n_in];
        *slot = t;
        if (!t || !oari_is_half(t->dtype)) continue;
        if (!is_in && inplace && k == n_in) { /* the target's temporary, cast back afterwards */
            *slot = tin[0];
        } else {
            oar_tensor *tmp = temp ? temp(temp_ctx, t) : fresh_temp(p, t);
            if (!tmp) return oari_fail_status();
            p->temps[nt++] = *slot = tmp;
        }
        if (is_in) {
            int st = add_cast(p, t, *slot);
            if (st) return st;
            p->n_pre = p->n_casts;
        } else {
            int st = add_cast(p, *slot, t);
            if (st) return st;
        }
    }
    return 0;
}

int oari_plan_make(oari_plan *p, oari_op op, oar_device *dev, oar_dtype kdtype, int n_in,
                   oar_tensor *const *in, const oari_attrs *attrs, int n_out, oar_tensor *const *out,
                   oar_ktensor *kin, oar_ktensor *kout, oari_temp_fn temp, void *temp_ctx) {
    const oari_op_def *def = oari_op_defs[op];
    p->op = op;
    p->dev = dev;
    p->n_in = n_in;
    p->n_out = n_out;
    p->attrs = attrs;
    p->casts = NULL;
    p->temps = NULL;
    p->io = NULL;
    p->n_pre = p->n_casts = p->cap_casts = 0;
    p->route = route_of(dev, op, kdtype, n_in, in, attrs, &p->kernel);
    if (p->route == OARI_ROUTE_NONE && op == OARI_OP_custom) return oari_custom_no_kernel(dev, attrs);
    if (p->route == OARI_ROUTE_NONE)
        return oari_error(OAR_ERR_UNSUPPORTED, "%s: no kernel for dtype %s on device %s", def->name,
                          oar_dtype_name(kdtype), dev->name);
    int st;
    if (p->route == OARI_ROUTE_ON_CPU || p->route == OARI_ROUTE_CUSTOM) {
        if (!(p->io = oari_malloc((size_t)(n_in + n_out) * sizeof *p->io))) return oari_fail_status();
        memcpy(p->io, in, (size_t)n_in * sizeof *in);
        memcpy(p->io + n_in, out, (size_t)n_out * sizeof *out);
        /* a custom call also keeps kernel tensors: where the executor points
         * a graph input's readers on each run */
        if (p->route == OARI_ROUTE_ON_CPU) return 0;
    }
    oar_tensor *tin[OARI_MAX_IN], *tout[OARI_MAX_OUT];
    oar_tensor *const *kin_t = in, *const *kout_t = out;
    if (p->route == OARI_ROUTE_VIA_F32) {
        if ((st = plan_casts(p, def->flags & OARI_F_INPLACE, n_in, in, n_out, out, tin, tout, temp, temp_ctx))) {
            oari_plan_clear(p);
            return st;
        }
        kin_t = tin;
        kout_t = tout;
    }
    for (int i = 0; i < n_in; i++) {
        if (!kin_t[i]) {
            memset(&kin[i], 0, sizeof kin[i]);
            kin[i].dtype = -1;
        } else if (def->flags & OARI_F_BROADCAST) {
            ktensor_expanded(kin_t[i], kout_t[0]->ndim, kout_t[0]->shape, &kin[i]);
        } else {
            oari_ktensor(kin_t[i], &kin[i]);
        }
    }
    for (int j = 0; j < n_out; j++) oari_ktensor(kout_t[j], &kout[j]);
    p->call = (oar_kernel_call){
        .op = def->name, .n_in = n_in, .n_out = n_out, .in = kin, .out = kout,
        .n_iattr = attrs->ni, .n_fattr = attrs->nf, .iattr = attrs->i, .fattr = attrs->f,
    };
    return 0;
}

int oari_plan_run_routed(oari_plan *p) {
    void *ctx = p->dev->ctx;
    int st = 0;
    switch (p->route) {
    case OARI_ROUTE_NONE:
        break;
    case OARI_ROUTE_KERNEL:
        return p->kernel(ctx, &p->call);
    case OARI_ROUTE_VIA_F32:
        for (int c = 0; c < p->n_pre && !st; c++) st = p->casts[c].k(ctx, &p->casts[c].call);
        if (!st) st = p->kernel(ctx, &p->call);
        for (int c = p->n_pre; c < p->n_casts && !st; c++) st = p->casts[c].k(ctx, &p->casts[c].call);
        return st;
    case OARI_ROUTE_ON_CPU:
        return oari_device_run_on_cpu(p->op, p->dev, p->n_in, p->io, p->attrs, p->n_out, p->io + p->n_in);
    case OARI_ROUTE_CUSTOM:
        return oari_custom_run(p->dev, p->n_in, p->io, p->call.in, p->attrs, p->n_out, p->io + p->n_in,
                               p->call.out);
    }
    return OAR_ERR_STATE;
}

void oari_plan_free_owned(oari_plan *p) {
    if (p->temps)
        for (int k = 0; k < p->cap_casts; k++) oar_tensor_release(p->temps[k]);
    oari_free(p->temps, (size_t)p->cap_casts * sizeof *p->temps);
    oari_free(p->casts, (size_t)p->cap_casts * sizeof *p->casts);
    oari_free(p->io, (size_t)(p->n_in + p->n_out) * sizeof *p->io);
    p->temps = NULL;
    p->casts = NULL;
    p->io = NULL;
    p->n_casts = p->n_pre = p->cap_casts = 0;
}

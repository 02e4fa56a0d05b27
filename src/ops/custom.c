/* Custom ops (include/oar/custom.h): the registry of user ops, the
 * definition of the op row `custom` that forwards its shape rule and
 * gradient rule to the user's functions, the kernel call the planner makes
 * for it (custom_op.h), the public call and the library loader.
 *
 * A call is one dispatch of OARI_OP_custom (invariant 3): attribute i[0]
 * is the op's registry id, i[1..] and f[] the call's attributes. The row
 * has OARI_MAX_OUT outputs; those past the op's n_out are 0-d placeholders
 * that oar_custom_call drops. The registry is a fixed table with no
 * allocation (an op lives until exit, so it would only show up as a leak);
 * ids are per process, so a saved graph names the op instead. */
#include "custom_op.h"
#include "plan.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define MAX_OPS 256
#define MAX_TYPE 32

struct oar_custom_op {
    int id;
    char name[OAR_CUSTOM_MAX_NAME + 1];
    char kernel_type[OAR_CUSTOM_MAX_KERNELS][MAX_TYPE];
    oar_custom_op_desc desc; /* name and kernel types point into the arrays above */
};

static oar_custom_op registry[MAX_OPS];
static int n_registered; /* written under lock, read with acquire */
static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- registry ------------------------------------------------------------ */

static const oar_custom_op *find_locked(const char *name) {
    int n = __atomic_load_n(&n_registered, __ATOMIC_ACQUIRE);
    for (int k = 0; k < n; k++)
        if (!strcmp(registry[k].name, name)) return &registry[k];
    return NULL;
}

static int check_desc(const oar_custom_op_desc *d) {
    if (!d) return oari_error(OAR_ERR_INVALID, "oar_custom_register: the descriptor is NULL");
    if (!d->name || !d->name[0] || strlen(d->name) > OAR_CUSTOM_MAX_NAME)
        return oari_error(OAR_ERR_INVALID, "oar_custom_register: the name is %s (1 to %d bytes wanted)",
                          d->name ? "too long" : "NULL", OAR_CUSTOM_MAX_NAME);
    const char *nm = d->name;
    if ((d->n_in < 1 && d->n_in != -1) || d->n_in > OAR_CUSTOM_MAX_IN)
        return oari_error(OAR_ERR_INVALID, "oar_custom_register: %s: n_in is %d (1..%d, or -1: any)", nm,
                          d->n_in, OAR_CUSTOM_MAX_IN);
    if (d->n_out < 1 || d->n_out > OAR_CUSTOM_MAX_OUT)
        return oari_error(OAR_ERR_INVALID, "oar_custom_register: %s: n_out is %d (1..%d)", nm, d->n_out,
                          OAR_CUSTOM_MAX_OUT);
    if (d->flags & ~(unsigned)(OAR_CUSTOM_ELEMENTWISE | OAR_CUSTOM_RANDOM))
        return oari_error(OAR_ERR_INVALID, "oar_custom_register: %s: unknown flags 0x%x", nm, d->flags);
    if ((d->flags & OAR_CUSTOM_ELEMENTWISE) && d->n_out != 1)
        return oari_error(OAR_ERR_INVALID, "oar_custom_register: %s: an elementwise op has one output, "
                          "not %d", nm, d->n_out);
    int n_kernels = 0;
    for (int k = 0; k < OAR_CUSTOM_MAX_KERNELS; k++) {
        const oar_custom_kernel *kk = &d->kernels[k];
        if (!kk->fn && !kk->device_type) continue;
        if (!kk->fn || !kk->device_type || !kk->device_type[0] || strlen(kk->device_type) >= MAX_TYPE)
            return oari_error(OAR_ERR_INVALID, "oar_custom_register: %s: kernel %d needs a device type "
                              "(1 to %d bytes) and a function", nm, k, MAX_TYPE - 1);
        for (int q = 0; q < k; q++)
            if (d->kernels[q].device_type && !strcmp(d->kernels[q].device_type, kk->device_type))
                return oari_error(OAR_ERR_INVALID, "oar_custom_register: %s: two kernels for device "
                                  "type %s", nm, kk->device_type);
        n_kernels++;
    }
    if (!n_kernels && !d->forward)
        return oari_error(OAR_ERR_INVALID, "oar_custom_register: %s has neither kernels nor a forward",
                          nm);
    return 0;
}

const oar_custom_op *oar_custom_register(const oar_custom_op_desc *desc) {
    if (check_desc(desc)) return NULL;
    pthread_mutex_lock(&registry_lock);
    oar_custom_op *op = NULL;
    if (find_locked(desc->name))
        oari_error(OAR_ERR_INVALID, "oar_custom_register: a custom op named \"%s\" is already "
                   "registered", desc->name);
    else if (n_registered == MAX_OPS)
        oari_error(OAR_ERR_STATE, "oar_custom_register: %s: the registry is full (%d ops)", desc->name,
                   MAX_OPS);
    else
        op = &registry[n_registered];
    if (op) {
        op->id = n_registered;
        op->desc = *desc;
        snprintf(op->name, sizeof op->name, "%s", desc->name);
        op->desc.name = op->name;
        for (int k = 0; k < OAR_CUSTOM_MAX_KERNELS; k++) {
            if (!desc->kernels[k].fn) continue;
            snprintf(op->kernel_type[k], MAX_TYPE, "%s", desc->kernels[k].device_type);
            op->desc.kernels[k].device_type = op->kernel_type[k];
        }
        __atomic_store_n(&n_registered, n_registered + 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&registry_lock);
    return op;
}

const oar_custom_op *oar_custom_find(const char *name) {
    if (!name) return oari_error(OAR_ERR_INVALID, "oar_custom_find: name is NULL"), NULL;
    const oar_custom_op *op = find_locked(name);
    if (!op) oari_error(OAR_ERR_INVALID, "oar_custom_find: no custom op named \"%s\" is registered", name);
    return op;
}

const char *oar_custom_name(const oar_custom_op *op) { return op ? op->name : ""; }
int oar_custom_num_inputs(const oar_custom_op *op) { return op ? op->desc.n_in : -1; }
int oar_custom_num_outputs(const oar_custom_op *op) { return op ? op->desc.n_out : -1; }

const oar_custom_op *oari_custom_of(const oari_attrs *a) {
    int n = __atomic_load_n(&n_registered, __ATOMIC_ACQUIRE);
    return a && a->ni >= 1 && a->i[0] >= 0 && a->i[0] < n ? &registry[a->i[0]] : NULL;
}

const char *oari_custom_name_of(const oari_attrs *a) {
    const oar_custom_op *op = oari_custom_of(a);
    return op ? op->name : "?";
}

unsigned oari_custom_flags_of(const oari_attrs *a) {
    const oar_custom_op *op = oari_custom_of(a);
    return op ? op->desc.flags : 0;
}

int oari_custom_outputs_of(const oari_attrs *a) {
    const oar_custom_op *op = oari_custom_of(a);
    return op ? op->desc.n_out : 0;
}

int oari_custom_id(const char *name) {
    const oar_custom_op *op = name ? find_locked(name) : NULL;
    return op ? op->id : -1;
}

/* ---- the user's functions, their failures named ---------------------------- */

/* The call's own attributes: the row's past i[0]. */
static void user_attrs(const oari_attrs *a, oar_custom_attrs *u) {
    memset(u, 0, sizeof *u);
    u->ni = a->ni - 1;
    u->nf = a->nf;
    memcpy(u->i, a->i + 1, (size_t)u->ni * sizeof *u->i);
    memcpy(u->f, a->f, (size_t)u->nf * sizeof *u->f);
}

/* A user function failed with status st: its message, prefixed with the
 * op's name, or a generic one if it set none. */
static int user_failed(const oar_custom_op *op, const char *what, int st) {
    if (!st) st = OAR_ERR_INVALID;
    if (!oari_error_pending())
        return oari_error(st, "%s: the %s failed (status %d) without a message; set one with "
                          "oar_set_error", op->name, what, st);
    char msg[900];
    snprintf(msg, sizeof msg, "%s", oar_last_error()); /* copied: the message is rewritten below */
    return oari_error(st, "%s: %s", op->name, msg);
}

static const oar_custom_op *op_or_fail(const oari_attrs *a) {
    const oar_custom_op *op = oari_custom_of(a);
    if (!op)
        oari_error(OAR_ERR_INVALID, "custom: attribute 0 (%lld) names no registered custom op",
                   a && a->ni ? (long long)a->i[0] : -1LL);
    return op;
}

static bool meta_ok(const oar_custom_meta *m) {
    if (m->dtype < 0 || m->dtype >= OAR_DTYPE_COUNT || m->ndim < 0 || m->ndim > OAR_MAX_DIMS) return false;
    for (int d = 0; d < m->ndim; d++)
        if (m->shape[d] < 0) return false;
    return true;
}

/* ---- the op row `custom` --------------------------------------------------- */

static int infer_custom(oari_infer *c) {
    const oar_custom_op *op = op_or_fail(c->attrs);
    if (!op) return OAR_ERR_INVALID;
    const oar_custom_op_desc *d = &op->desc;
    if (d->n_in >= 0 ? c->n_in != d->n_in : c->n_in > OAR_CUSTOM_MAX_IN)
        return oari_error(OAR_ERR_INVALID, "%s: got %d inputs, expected %s%d", op->name, c->n_in,
                          d->n_in >= 0 ? "" : "1 to ", d->n_in >= 0 ? d->n_in : OAR_CUSTOM_MAX_IN);
    oar_custom_meta in[OAR_CUSTOM_MAX_IN], out[OAR_CUSTOM_MAX_OUT];
    for (int i = 0; i < c->n_in; i++) {
        in[i].dtype = c->in[i]->dtype;
        in[i].ndim = c->in[i]->ndim;
        memcpy(in[i].shape, c->in[i]->shape, sizeof in[i].shape);
    }
    for (int j = 0; j < d->n_out; j++) out[j] = in[0];
    if (d->infer) {
        oar_custom_attrs ua;
        user_attrs(c->attrs, &ua);
        oar_clear_error(); /* so that a rule failing without a message is told apart */
        int st = d->infer(d->user_data, c->n_in, in, &ua, out);
        if (st) return user_failed(op, "shape rule", st);
    }
    for (int j = 0; j < OARI_MAX_OUT; j++) {
        if (j >= d->n_out) { /* a placeholder */
            c->out[j] = (oari_meta){.dtype = OAR_F32, .ndim = 0};
            continue;
        }
        if (!meta_ok(&out[j]))
            return oari_error(OAR_ERR_INVALID, "%s: the shape rule gave output %d dtype %d, %d dims: not "
                              "a valid dtype and shape", op->name, j, (int)out[j].dtype, out[j].ndim);
        c->out[j].dtype = out[j].dtype;
        c->out[j].ndim = out[j].ndim;
        memcpy(c->out[j].shape, out[j].shape, sizeof c->out[j].shape);
    }
    return 0;
}

static bool same_meta(const oar_tensor *t, const oari_meta *m) {
    return t->dtype == m->dtype && t->ndim == m->ndim &&
           !memcmp(t->shape, m->shape, (size_t)m->ndim * sizeof *m->shape);
}

static int grad_custom(oari_grad_ctx *g) {
    const oar_custom_op *op = op_or_fail(g->attrs);
    if (!op) return OAR_ERR_INVALID;
    const oar_custom_op_desc *d = &op->desc;
    for (int i = 0; i < g->n_in; i++) g->gin[i] = NULL;
    if (!d->grad) return 0; /* documented: a zero gradient */
    oar_tensor *gout[OAR_CUSTOM_MAX_OUT], *gin[OAR_CUSTOM_MAX_IN] = {0};
    for (int j = 0; j < d->n_out; j++) { /* zeros where no gradient flowed */
        gout[j] = g->gout[j];
        if (!gout[j] && g->out[j] && !(gout[j] = oar_zeros_like(g->out[j]))) return oari_fail_status();
        if (!gout[j])
            return oari_error(OAR_ERR_STATE, "%s: output %d has no saved value to shape its zero "
                              "gradient", op->name, j);
    }
    oar_custom_attrs ua;
    user_attrs(g->attrs, &ua);
    oar_custom_grad_args args = {
        .user_data = d->user_data, .attrs = &ua, .n_in = g->n_in, .n_out = d->n_out,
        .in = g->in, .out = g->out, .grad_out = gout, .needs = g->needs, .grad_in = gin,
    };
    oar_clear_error();
    int st = d->grad(&args);
    if (st) return user_failed(op, "gradient", st);
    for (int i = 0; i < g->n_in; i++) {
        if (!g->needs[i] || !gin[i]) continue;
        if (!same_meta(gin[i], &g->in_meta[i])) {
            char a[200], b[200];
            return oari_error(OAR_ERR_INVALID, "%s: the gradient gave a %s %s gradient for input %d, "
                              "which is %s %s", op->name, oar_dtype_name(gin[i]->dtype),
                              oari_shape_str(a, gin[i]->ndim, gin[i]->shape), i,
                              oar_dtype_name(g->in_meta[i].dtype),
                              oari_shape_str(b, g->in_meta[i].ndim, g->in_meta[i].shape));
        }
        g->gin[i] = gin[i];
    }
    return 0;
}

/* Every input and real output saved: the user's gradient may read any. */
const oari_op_def oari_def_custom = {
    .name = "custom", .n_in = -1, .n_out = OARI_MAX_OUT, .fusion = OARI_FUSE_OPAQUE,
    .saved = OARI_SAVE_ALL_IN | OARI_SAVE_OUT(0) | OARI_SAVE_OUT(1) | OARI_SAVE_OUT(2) | OARI_SAVE_OUT(3),
    .infer = infer_custom, .grad = grad_custom,
};

/* ---- the kernel call ------------------------------------------------------- */

static const oar_custom_kernel *kernel_for(const oar_custom_op *op, const char *type) {
    for (int k = 0; k < OAR_CUSTOM_MAX_KERNELS; k++)
        if (op->desc.kernels[k].fn && !strcmp(op->kernel_type[k], type)) return &op->desc.kernels[k];
    return NULL;
}

int oari_custom_route(const oar_device *dev, const oari_attrs *a) {
    const oar_custom_op *op = oari_custom_of(a);
    if (!op) return OARI_ROUTE_NONE;
    if (op->desc.forward || kernel_for(op, dev->iface->type_name)) return OARI_ROUTE_CUSTOM;
    if (dev != oari_device_cpu() && kernel_for(op, "cpu")) return OARI_ROUTE_ON_CPU;
    return OARI_ROUTE_NONE;
}

int oari_custom_no_kernel(const oar_device *dev, const oari_attrs *a) {
    const oar_custom_op *op = op_or_fail(a);
    if (!op) return OAR_ERR_INVALID;
    char have[256] = "";
    size_t len = 0;
    for (int k = 0; k < OAR_CUSTOM_MAX_KERNELS; k++) {
        if (!op->desc.kernels[k].fn) continue;
        int w = snprintf(have + len, sizeof have - len, "%s%s", len ? ", " : "", op->kernel_type[k]);
        if (w > 0 && (size_t)w < sizeof have - len) len += (size_t)w;
    }
    return oari_error(OAR_ERR_UNSUPPORTED, "%s: no kernel for device %s (type %s); it has kernels for: "
                      "%s. Register one for that type, or move the inputs with oar_tensor_to",
                      op->name, dev->name, dev->iface->type_name, have);
}

/* The forward of a custom autograd function: the user's ops on the inputs,
 * with grad off, copied into the preallocated outputs. */
static int run_forward(const oar_custom_op *op, int n_in, oar_tensor *const *in, const oar_custom_attrs *ua,
                       oar_tensor *const *out) {
    const oar_custom_op_desc *d = &op->desc;
    oar_tensor *res[OAR_CUSTOM_MAX_OUT] = {0};
    oar_clear_error();
    int st = d->forward(d->user_data, n_in, in, ua, res);
    if (st) return user_failed(op, "forward", st);
    for (int j = 0; j < d->n_out && !st; j++) {
        if (!res[j]) {
            st = oari_error(OAR_ERR_INVALID, "%s: the forward left output %d NULL", op->name, j);
        } else if (res[j]->dtype != out[j]->dtype || res[j]->ndim != out[j]->ndim ||
                   memcmp(res[j]->shape, out[j]->shape, (size_t)out[j]->ndim * sizeof *out[j]->shape)) {
            char a[200], b[200];
            st = oari_error(OAR_ERR_INVALID, "%s: the forward gave output %d as %s %s, but the shape "
                            "rule said %s %s", op->name, j, oar_dtype_name(res[j]->dtype),
                            oari_shape_str(a, res[j]->ndim, res[j]->shape), oar_dtype_name(out[j]->dtype),
                            oari_shape_str(b, out[j]->ndim, out[j]->shape));
        } else {
            st = oar_copy_(out[j], res[j]);
        }
    }
    return st;
}

/* The tensor a kernel tensor stands for: t itself when they agree, else a
 * view of k's memory over a borrowed storage (`holder`, on the caller's
 * stack, with a count that never reaches zero: the memory is the
 * executor's). Owned by the caller; NULL with the error set. */
static oar_tensor *bind(oar_tensor *t, const oar_ktensor *k, oari_storage *holder) {
    if (t->storage && k->buffer == t->storage->data && k->offset == t->offset) return oar_tensor_retain(t);
    *holder = (oari_storage){.refcount = 1 << 30, .device = t->storage ? t->storage->device : oari_device_cpu(),
                             .data = k->buffer,
                             .nbytes = (size_t)(k->offset + t->numel) * oar_dtype_size(t->dtype)};
    return oari_tensor_make(holder, t->dtype, t->ndim, t->shape, t->strides, k->offset);
}

int oari_custom_run(oar_device *dev, int n_in, oar_tensor *const *in, const oar_ktensor *kin, const oari_attrs *a,
                    int n_out, oar_tensor *const *out, const oar_ktensor *kout) {
    const oar_custom_op *op = op_or_fail(a);
    if (!op) return OAR_ERR_INVALID;
    const oar_custom_op_desc *d = &op->desc;
    const oar_custom_kernel *k = d->forward ? NULL : kernel_for(op, dev->iface->type_name);
    if (!d->forward && !k) return oari_custom_no_kernel(dev, a);
    oar_custom_attrs ua;
    user_attrs(a, &ua);
    oari_storage holders[OAR_CUSTOM_MAX_IN + OARI_MAX_OUT];
    oar_tensor *bin[OAR_CUSTOM_MAX_IN] = {0}, *bout[OARI_MAX_OUT] = {0};
    int st = 0;
    for (int i = 0; i < n_in && !st; i++)
        if (!(bin[i] = bind(in[i], &kin[i], &holders[i]))) st = oari_fail_status();
    for (int j = 0; j < n_out && !st; j++)
        if (!(bout[j] = bind(out[j], &kout[j], &holders[n_in + j]))) st = oari_fail_status();
    /* the user's code calls ops (contiguous copies, a forward): on
     * concrete tensors, with grad off, their temporaries in a pool */
    oar_pool *pool = st ? NULL : oar_pool_push();
    if (!st && !pool) st = oari_fail_status();
    if (!st) oari_no_grad_push();
    if (!st && d->forward) {
        st = run_forward(op, n_in, bin, &ua, bout);
    } else if (!st) {
        oar_tensor *cin[OAR_CUSTOM_MAX_IN];
        oar_ktensor ckin[OAR_CUSTOM_MAX_IN], ckout[OAR_CUSTOM_MAX_OUT];
        for (int i = 0; i < n_in && !st; i++) {
            cin[i] = oar_tensor_is_contiguous(bin[i]) ? bin[i] : oar_contiguous(bin[i]);
            if (!cin[i]) st = oari_fail_status();
            else oari_ktensor(cin[i], &ckin[i]);
        }
        for (int j = 0; j < d->n_out; j++) oari_ktensor(bout[j], &ckout[j]);
        oar_custom_kernel_args args = {
            .user_data = d->user_data, .device = dev, .attrs = &ua, .n_in = n_in, .n_out = d->n_out,
            .in = cin, .out = bout, .kin = ckin, .kout = ckout,
        };
        if (!st) {
            oar_clear_error();
            if ((st = k->fn(&args))) st = user_failed(op, "kernel", st);
        }
    }
    /* the placeholders hold a zero, so a reader finds no garbage */
    for (int j = d->n_out; j < n_out && !st; j++)
        if (oar_tensor_data(bout[j])) memset(oar_tensor_data(bout[j]), 0, oar_dtype_size(bout[j]->dtype));
    if (pool) {
        oari_no_grad_pop();
        oar_pool_pop(pool);
    }
    for (int i = 0; i < n_in; i++) oar_tensor_release(bin[i]);
    for (int j = 0; j < n_out; j++) oar_tensor_release(bout[j]);
    return st;
}

/* ---- public calls ------------------------------------------------------------ */

int oar_custom_call(const oar_custom_op *op, int n_in, oar_tensor *const *in, const oar_custom_attrs *attrs,
                    int n_out, oar_tensor **out) {
    if (out)
        for (int j = 0; j < n_out && j < OAR_CUSTOM_MAX_OUT; j++) out[j] = NULL;
    if (!op) return oari_error(OAR_ERR_INVALID, "oar_custom_call: op is NULL");
    if (!out || n_out != op->desc.n_out)
        return oari_error(OAR_ERR_INVALID, "%s: %s (the op has %d outputs)", op->name,
                          out ? "n_out does not match" : "out is NULL", op->desc.n_out);
    if (n_in < 1 || n_in > OAR_CUSTOM_MAX_IN || !in)
        return oari_error(OAR_ERR_INVALID, "%s: got %d inputs%s (1 to %d)", op->name, n_in,
                          in ? "" : " and a NULL array", OAR_CUSTOM_MAX_IN);
    oari_attrs a = {.ni = 1, .i = {op->id}};
    if (attrs) {
        if (attrs->ni < 0 || attrs->ni > OAR_CUSTOM_MAX_IATTR || attrs->nf < 0 || attrs->nf > OAR_CUSTOM_MAX_FATTR)
            return oari_error(OAR_ERR_INVALID, "%s: %d integer and %d float attributes (at most %d and %d)",
                              op->name, attrs->ni, attrs->nf, OAR_CUSTOM_MAX_IATTR, OAR_CUSTOM_MAX_FATTR);
        a.ni += attrs->ni;
        a.nf = attrs->nf;
        memcpy(a.i + 1, attrs->i, (size_t)attrs->ni * sizeof *attrs->i);
        memcpy(a.f, attrs->f, (size_t)attrs->nf * sizeof *attrs->f);
    }
    oar_tensor *res[OARI_MAX_OUT];
    int st = oari_dispatch(OARI_OP_custom, n_in, in, &a, res);
    if (st) return st;
    for (int j = op->desc.n_out; j < OARI_MAX_OUT; j++) oar_tensor_release(res[j]);
    for (int j = 0; j < n_out; j++) out[j] = oari_pool_adopt(res[j]);
    return 0;
}

oar_tensor *oar_custom_call1(const oar_custom_op *op, int n_in, oar_tensor *const *in,
                             const oar_custom_attrs *attrs) {
    if (op && op->desc.n_out != 1)
        return oari_error(OAR_ERR_INVALID, "%s: oar_custom_call1 on an op with %d outputs; use "
                          "oar_custom_call", op->name, op->desc.n_out), NULL;
    oar_tensor *y = NULL;
    return oar_custom_call(op, n_in, in, attrs, 1, &y) ? NULL : y;
}

int oar_custom_load_library(const char *path) {
    if (!path) return oari_error(OAR_ERR_INVALID, "oar_custom_load_library: path is NULL");
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        return oari_error(OAR_ERR_IO, "oar_custom_load_library: cannot open %s: %s", path,
                          e ? e : "dlopen failed");
    }
    int (*init)(void);
    *(void **)&init = dlsym(h, OAR_CUSTOM_LIBRARY_INIT);
    if (!init) {
        dlclose(h);
        return oari_error(OAR_ERR_INVALID, "oar_custom_load_library: %s has no entry point %s (define "
                          "int %s(void) that registers its ops)", path, OAR_CUSTOM_LIBRARY_INIT,
                          OAR_CUSTOM_LIBRARY_INIT);
    }
    oar_clear_error();
    int st = init();
    /* kept open even on failure: ops it registered before failing point into it */
    if (st) {
        char msg[800];
        snprintf(msg, sizeof msg, "%s", oari_error_pending() ? oar_last_error() : "no message");
        return oari_error(st, "oar_custom_load_library: %s: %s failed: %s", path, OAR_CUSTOM_LIBRARY_INIT, msg);
    }
    return 0;
}

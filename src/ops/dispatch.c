/* The one dispatch (invariant 3 of docs/architecture.md): every op call
 * comes through oari_dispatch, which checks inputs, runs the op's shape
 * rule, hands a traced call to the tracer and a distributed one to dist
 * (hooks), casts inputs, plans and runs the kernel call (plan.c) or makes
 * a view, and records the call on the autograd tape (a hook). */
#include "op.h"
#include "device_ops.h" /* devices: scalar inputs follow */
#include "plan.h"
#include "../profiler/hooks.h" /* profiler hook */

#include <string.h>

oari_dispatch_hooks oari_hooks;
_Thread_local void *oari_trace_current;

static bool wants_grad(const oari_op_def *def, int n_in, oar_tensor *const *in) {
    if ((def->flags & OARI_F_NONDIFF) || !oari_grad_mode_enabled()) return false;
    for (int i = 0; i < n_in; i++)
        if (in[i] && in[i]->requires_grad) return true;
    return false;
}

int oari_dispatch(oari_op op, int n_in, oar_tensor *const *in, const oari_attrs *attrs,
                  oar_tensor **out) {
    /* autocast (autocast.c): casts the inputs by the op's policy first */
    if (__builtin_expect(oari_autocast_active, 0)) return oari_autocast_dispatch(op, n_in, in, attrs, out);
    return oari_dispatch_run(op, n_in, in, attrs, out);
}

int oari_dispatch_run(oari_op op, int n_in, oar_tensor *const *in, const oari_attrs *attrs,
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
            if (!empty) { /* plan the kernel call (plan.c), run it once */
                oar_ktensor kin[OARI_MAX_IN], kout[OARI_MAX_OUT];
                oari_plan plan;
                st = oari_plan_make(&plan, op, dev, c.kernel_dtype, n_in, cin, attrs, n_out, out, kin, kout,
                                    NULL, NULL);
                if (!st) st = oari_plan_run(&plan);
                oari_plan_clear(&plan);
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

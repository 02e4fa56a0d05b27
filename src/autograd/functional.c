/* Functional transforms over a user function of tensors: vjp, jvp (two
 * reverse passes), jacobian, hessian and hvp, all built on oar_grad. */
#include "node.h"

#include <string.h>

/* Scratch arrays of tensor pointers (borrowed entries). */
static oar_tensor **tarray(int n) { return oari_calloc((size_t)(n > 0 ? n : 1), sizeof(oar_tensor *)); }
static void tfree(oar_tensor **a, int n) { oari_free(a, (size_t)(n > 0 ? n : 1) * sizeof *a); }

/* The inputs the function sees: fresh leaves that require grad, or with
 * create_graph the inputs themselves when they already require grad (so
 * results stay differentiable with respect to them). Pool-owned. */
static int prep_inputs(const char *api, int n_in, oar_tensor *const *inputs, bool create_graph,
                       oar_tensor **xs) {
    if (n_in < 1 || !inputs) return oari_error(OAR_ERR_INVALID, "%s: no inputs given", api);
    for (int i = 0; i < n_in; i++) {
        oar_tensor *x = inputs[i];
        if (!x) {
            if (!oari_error_pending()) oari_error(OAR_ERR_INVALID, "%s: input %d is NULL", api, i);
            return OAR_ERR_INVALID;
        }
        if (!oar_dtype_is_float(x->dtype) && !oar_dtype_is_complex(x->dtype))
            return oari_error(OAR_ERR_INVALID, "%s: input %d is %s; only floating and complex "
                              "inputs can be differentiated", api, i, oar_dtype_name(x->dtype));
        if (create_graph && x->requires_grad) {
            xs[i] = x;
            continue;
        }
        if (!(xs[i] = oar_detach(x))) return oari_fail_status();
        xs[i]->requires_grad = true;
    }
    return 0;
}

static int call_fn(const char *api, oar_fn fn, void *ctx, int n_in, oar_tensor **xs, int n_out,
                   oar_tensor **outs) {
    if (!fn) return oari_error(OAR_ERR_INVALID, "%s: fn is NULL", api);
    if (n_out < 1) return oari_error(OAR_ERR_INVALID, "%s: n_out %d must be >= 1", api, n_out);
    int st = fn(ctx, n_in, xs, n_out, outs);
    if (st) {
        if (!oari_error_pending()) oari_error(st, "%s: the function failed (status %d)", api, st);
        return st;
    }
    for (int j = 0; j < n_out; j++)
        if (!outs[j]) {
            if (!oari_error_pending()) oari_error(OAR_ERR_INVALID, "%s: the function left output %d NULL", api, j);
            return OAR_ERR_INVALID;
        }
    return 0;
}

/* grads[i] = d(sum_j <gout_j, out_j>)/d in_i over the outputs that require
 * grad; zeros for inputs nothing depends on. Pool-owned results. */
static int grad_or_zeros(int n_out, oar_tensor **outs, oar_tensor *const *gouts, int n_in,
                         oar_tensor **ins, unsigned flags, oar_tensor **grads) {
    oar_tensor **o = tarray(n_out), **go = tarray(n_out);
    int st = o && go ? 0 : oari_fail_status(), m = 0;
    for (int j = 0; j < n_out && !st; j++) {
        if (!outs[j]->requires_grad) continue;
        o[m] = outs[j];
        go[m++] = gouts ? gouts[j] : NULL;
    }
    for (int i = 0; i < n_in; i++) grads[i] = NULL;
    if (!st && m) st = oar_grad_ex(m, o, go, n_in, ins, flags | OAR_GRAD_ALLOW_UNUSED, grads);
    for (int i = 0; i < n_in && !st; i++)
        if (!grads[i] && !(grads[i] = oar_zeros_like(ins[i]))) st = oari_fail_status();
    tfree(o, n_out);
    tfree(go, n_out);
    return st;
}

/* Moves n results out of pool p into the caller's pool (or to the caller). */
static int hand_out(oar_pool *p, int st, int n, oar_tensor **res) {
    for (int i = 0; i < n; i++) res[i] = st ? NULL : oar_tensor_retain(res[i]);
    oar_pool_pop(p);
    for (int i = 0; i < n && !st; i++)
        if (!oari_pool_adopt(res[i])) st = oari_fail_status();
    if (st)
        for (int i = 0; i < n; i++) res[i] = NULL;
    return st;
}

/* Outputs as the caller sees them: detached unless create_graph. */
static int detach_outputs(int n, oar_tensor **outs, bool create_graph) {
    for (int j = 0; j < n && !create_graph; j++)
        if (outs[j]->requires_grad && !(outs[j] = oar_detach(outs[j]))) return oari_fail_status();
    return 0;
}

int oar_vjp(oar_fn fn, void *ctx, int n_in, oar_tensor *const *inputs, int n_out,
            oar_tensor *const *v, bool create_graph, oar_tensor **outputs, oar_tensor **vjp) {
    if (!vjp) return oari_error(OAR_ERR_INVALID, "oar_vjp: vjp is NULL");
    oar_pool *p = oar_pool_push();
    int n_res = n_in + n_out;
    oar_tensor **xs = tarray(n_in), **res = tarray(n_res);
    int st = xs && res ? 0 : oari_fail_status();
    oar_tensor **outs = res ? res + n_in : NULL;
    if (!st) st = prep_inputs("oar_vjp", n_in, inputs, create_graph, xs);
    if (!st) st = call_fn("oar_vjp", fn, ctx, n_in, xs, n_out, outs);
    if (!st) st = grad_or_zeros(n_out, outs, v, n_in, xs, create_graph ? OAR_GRAD_CREATE_GRAPH : 0, res);
    if (!st) st = detach_outputs(n_out, outs, create_graph);
    st = hand_out(p, st, res ? (outputs ? n_res : n_in) : 0, res);
    for (int i = 0; i < n_in; i++) vjp[i] = res && !st ? res[i] : NULL;
    for (int j = 0; outputs && j < n_out; j++) outputs[j] = res && !st ? res[n_in + j] : NULL;
    if (xs) tfree(xs, n_in);
    if (res) tfree(res, n_res);
    return st;
}

int oar_jvp(oar_fn fn, void *ctx, int n_in, oar_tensor *const *inputs, oar_tensor *const *t,
            int n_out, bool create_graph, oar_tensor **outputs, oar_tensor **jvp) {
    if (!jvp || !t) return oari_error(OAR_ERR_INVALID, "oar_jvp: %s is NULL", jvp ? "t" : "jvp");
    oar_pool *p = oar_pool_push();
    int n_res = 2 * n_out;
    oar_tensor **xs = tarray(n_in), **res = tarray(n_res), **u = tarray(n_out),
               **g = tarray(n_in), **gr = tarray(n_in), **tr = tarray(n_in);
    int st = xs && res && u && g && gr && tr ? 0 : oari_fail_status();
    oar_tensor **outs = res ? res + n_out : NULL;
    if (!st) st = prep_inputs("oar_jvp", n_in, inputs, create_graph, xs);
    for (int i = 0; i < n_in && !st; i++) {
        if (!t[i]) {
            if (!oari_error_pending()) oari_error(OAR_ERR_INVALID, "oar_jvp: t[%d] is NULL", i);
            st = OAR_ERR_INVALID;
        }
    }
    if (!st) st = call_fn("oar_jvp", fn, ctx, n_in, xs, n_out, outs);
    /* g = J^T u, linear in the dummy cotangents u; then d<g, t>/du = J t */
    for (int j = 0; j < n_out && !st; j++) {
        if (oar_dtype_is_complex(outs[j]->dtype))
            st = oari_error(OAR_ERR_INVALID, "oar_jvp: output %d is complex; jvp supports real "
                            "functions (use oar_vjp or oar_jacobian)", j);
        else if (!(u[j] = oar_zeros_like(outs[j])))
            st = oari_fail_status();
        else
            u[j]->requires_grad = true;
    }
    if (!st) st = grad_or_zeros(n_out, outs, u, n_in, xs, OAR_GRAD_CREATE_GRAPH, g);
    int m = 0;
    for (int i = 0; i < n_in && !st; i++) {
        if (!g[i]->requires_grad) continue;
        gr[m] = g[i];
        tr[m++] = t[i];
    }
    for (int j = 0; j < n_out && res; j++) res[j] = NULL;
    if (!st && m)
        st = oar_grad_ex(m, gr, tr, n_out, u,
                         OAR_GRAD_ALLOW_UNUSED | (create_graph ? OAR_GRAD_CREATE_GRAPH : 0), res);
    for (int j = 0; j < n_out && !st; j++)
        if (!res[j] && !(res[j] = oar_zeros_like(outs[j]))) st = oari_fail_status();
    if (!st) st = detach_outputs(n_out, outs, create_graph);
    st = hand_out(p, st, res ? (outputs ? n_res : n_out) : 0, res);
    for (int j = 0; j < n_out; j++) jvp[j] = res && !st ? res[j] : NULL;
    for (int j = 0; outputs && j < n_out; j++) outputs[j] = res && !st ? res[n_out + j] : NULL;
    tfree(xs, n_in); tfree(res, n_res); tfree(u, n_out); tfree(g, n_in); tfree(gr, n_in); tfree(tr, n_in);
    return st;
}

/* A one-hot tensor shaped like o with a 1 at flat index k. Pool-owned. */
static oar_tensor *one_hot_like(oar_tensor *o, int64_t k) {
    oar_tensor *e = oar_zeros_like(o);
    if (!e) return NULL;
    char *d = oar_tensor_data(e);
    if (!d) return oari_error(OAR_ERR_UNSUPPORTED, "oar_jacobian: CPU tensors only"), NULL;
    oari_store_f64(d + (size_t)k * oar_dtype_size(e->dtype), e->dtype, 1.0);
    return e;
}

int oar_jacobian(oar_fn fn, void *ctx, int n_in, oar_tensor *const *inputs, int n_out,
                 bool create_graph, oar_tensor **jac) {
    if (!jac) return oari_error(OAR_ERR_INVALID, "oar_jacobian: jac is NULL");
    oar_pool *p = oar_pool_push();
    int n_res = n_out * n_in;
    oar_tensor **xs = tarray(n_in), **outs = tarray(n_out), **res = tarray(n_res), **g = tarray(n_in);
    int st = xs && outs && res && g ? 0 : oari_fail_status();
    if (!st) st = prep_inputs("oar_jacobian", n_in, inputs, create_graph, xs);
    if (!st) st = call_fn("oar_jacobian", fn, ctx, n_in, xs, n_out, outs);
    unsigned flags = OAR_GRAD_RETAIN_GRAPH | OAR_GRAD_ALLOW_UNUSED | (create_graph ? OAR_GRAD_CREATE_GRAPH : 0);
    for (int j = 0; j < n_out && !st; j++) {
        oar_tensor *o = outs[j];
        int64_t m = o->numel;
        for (int i = 0; i < n_in && !st; i++) {
            if (o->ndim + xs[i]->ndim > OAR_MAX_DIMS)
                st = oari_error(OAR_ERR_INVALID, "oar_jacobian: output %d (rank %d) and input %d "
                                "(rank %d) give a jacobian of rank above %d", j, o->ndim, i,
                                xs[i]->ndim, OAR_MAX_DIMS);
        }
        if (st) break;
        oar_tensor **rows = tarray((int)(m * n_in));
        if (!rows) { st = oari_fail_status(); break; }
        bool live = o->requires_grad && m > 0;
        for (int64_t k = 0; k < m && live && !st; k++) {
            oar_tensor *e = one_hot_like(o, k);
            if (!e) { st = oari_fail_status(); break; }
            st = oar_grad_ex(1, &o, &e, n_in, xs, flags, g);
            for (int i = 0; i < n_in && !st; i++)
                if (!(rows[i * m + k] = g[i] ? g[i] : oar_zeros_like(xs[i]))) st = oari_fail_status();
        }
        for (int i = 0; i < n_in && !st; i++) {
            int64_t shape[OAR_MAX_DIMS];
            int nd = o->ndim + xs[i]->ndim;
            memcpy(shape, o->shape, (size_t)o->ndim * sizeof *shape);
            memcpy(shape + o->ndim, xs[i]->shape, (size_t)xs[i]->ndim * sizeof *shape);
            oar_tensor *r = live ? oar_reshape(oar_stack((int)m, rows + i * m, 0), nd, shape)
                                 : oar_zeros(xs[i]->dtype, nd, shape);
            if (!(res[j * n_in + i] = r)) st = oari_fail_status();
        }
        tfree(rows, (int)(m * n_in));
    }
    st = hand_out(p, st, res ? n_res : 0, res);
    for (int k = 0; k < n_res; k++) jac[k] = res && !st ? res[k] : NULL;
    tfree(xs, n_in); tfree(outs, n_out); tfree(res, n_res); tfree(g, n_in);
    return st;
}

/* The gradient of a scalar function, as a function (for the hessian). */
typedef struct grad_of {
    oar_fn fn;
    void *ctx;
} grad_of;

static int scalar_value(const char *api, oar_fn fn, void *ctx, int n_in, oar_tensor **xs,
                        oar_tensor **f) {
    int st = call_fn(api, fn, ctx, n_in, xs, 1, f);
    if (!st && ((*f)->numel != 1 || oar_dtype_is_complex((*f)->dtype)))
        st = oari_error(OAR_ERR_INVALID, "%s: the function must return one real element, got %lld "
                        "elements of %s", api, (long long)(*f)->numel, oar_dtype_name((*f)->dtype));
    return st;
}

static int gradient_fn(void *ctx, int n_in, oar_tensor *const *in, int n_out, oar_tensor **out) {
    grad_of *c = ctx;
    (void)n_out;
    oar_tensor *f = NULL;
    int st = scalar_value("oar_hessian", c->fn, c->ctx, n_in, (oar_tensor **)in, &f);
    return st ? st : grad_or_zeros(1, &f, NULL, n_in, (oar_tensor **)in, OAR_GRAD_CREATE_GRAPH, out);
}

int oar_hessian(oar_fn fn, void *ctx, int n_in, oar_tensor *const *inputs, bool create_graph,
                oar_tensor **hess) {
    if (!fn) return oari_error(OAR_ERR_INVALID, "oar_hessian: fn is NULL");
    grad_of c = {fn, ctx};
    return oar_jacobian(gradient_fn, &c, n_in, inputs, n_in, create_graph, hess);
}

int oar_hvp(oar_fn fn, void *ctx, int n_in, oar_tensor *const *inputs, oar_tensor *const *v,
            bool create_graph, oar_tensor **value, oar_tensor **hvp) {
    if (!hvp || !v) return oari_error(OAR_ERR_INVALID, "oar_hvp: %s is NULL", hvp ? "v" : "hvp");
    oar_pool *p = oar_pool_push();
    int n_res = n_in + 1;
    oar_tensor **xs = tarray(n_in), **res = tarray(n_res), **g = tarray(n_in);
    int st = xs && res && g ? 0 : oari_fail_status();
    if (!st) st = prep_inputs("oar_hvp", n_in, inputs, create_graph, xs);
    for (int i = 0; i < n_in && !st; i++) {
        if (v[i]) continue;
        if (!oari_error_pending()) oari_error(OAR_ERR_INVALID, "oar_hvp: v[%d] is NULL", i);
        st = OAR_ERR_INVALID;
    }
    if (!st) st = scalar_value("oar_hvp", fn, ctx, n_in, xs, &res[n_in]);
    if (!st) st = grad_or_zeros(1, &res[n_in], NULL, n_in, xs, OAR_GRAD_CREATE_GRAPH, g);
    if (!st) st = grad_or_zeros(n_in, g, v, n_in, xs, create_graph ? OAR_GRAD_CREATE_GRAPH : 0, res);
    if (!st) st = detach_outputs(1, &res[n_in], create_graph);
    st = hand_out(p, st, res ? (value ? n_res : n_in) : 0, res);
    for (int i = 0; i < n_in; i++) hvp[i] = res && !st ? res[i] : NULL;
    if (value) *value = res && !st ? res[n_in] : NULL;
    tfree(xs, n_in); tfree(res, n_res); tfree(g, n_in);
    return st;
}

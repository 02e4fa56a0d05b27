/* Value-dependent control flow (include/oar/graph.h "control flow"):
 * oar_cond and oar_while_loop run their callbacks on real values. While
 * tracing, a predicate that is a traced value is refused with an error
 * (recording sub-graphs is not implemented), so a trace never silently
 * bakes in one branch or one trip count. */
#include "ir.h"

#include <string.h>

extern _Thread_local void *oari_trace_current;

/* The truth of a one-element predicate; 0/1, or a negative status. */
static int truth(const char *fn, const oar_tensor *p) {
    char sh[200];
    if (!p) return oari_error(OAR_ERR_INVALID, "%s: the predicate is NULL", fn);
    if (!p->storage)
        return oari_error(OAR_ERR_UNSUPPORTED, "%s: the predicate is a traced (symbolic) value; "
                          "recording data-dependent control flow in a graph is not supported: "
                          "trace each case separately or compute the result with where()", fn);
    if (p->numel != 1)
        return oari_error(OAR_ERR_INVALID, "%s: the predicate must have one element, got shape %s",
                          fn, oari_shape_str(sh, p->ndim, p->shape));
    if (oar_dtype_is_complex(p->dtype))
        return oari_error(OAR_ERR_INVALID, "%s: the predicate is complex (%s)", fn,
                          oar_dtype_name(p->dtype));
    double x = oar_tensor_item(p);
    return x != 0;
}

int oar_cond(oar_tensor *pred, oar_fn then_fn, oar_fn else_fn, void *ctx, int n_in,
             oar_tensor *const *in, int n_out, oar_tensor **out) {
    if (!then_fn || !else_fn)
        return oari_error(OAR_ERR_INVALID, "cond: then_fn or else_fn is NULL");
    if (n_in < 0 || (n_in && !in) || n_out < 1 || !out)
        return oari_error(OAR_ERR_INVALID, "cond: need inputs (%d given) and 1 or more outputs "
                          "(%d given) with an output array", n_in, n_out);
    for (int j = 0; j < n_out; j++) out[j] = NULL;
    int t = truth("cond", pred);
    if (t < 0) return t;
    const char *which = t ? "then" : "else";
    int st = (t ? then_fn : else_fn)(ctx, n_in, in, n_out, out);
    if (st && !oari_error_pending()) oari_error(st, "cond: the %s branch failed", which);
    for (int j = 0; j < n_out && !st; j++)
        if (!out[j]) st = oari_error(OAR_ERR_INVALID, "cond: the %s branch left output %d NULL", which, j);
    if (st)
        for (int j = 0; j < n_out; j++) out[j] = NULL;
    return st;
}

/* 0 if a and b have one dtype and shape; else an error naming the var. */
static int same_meta(int iter, int j, const oar_tensor *a, const oar_tensor *b) {
    char s1[200], s2[200];
    if (!b)
        return oari_error(OAR_ERR_INVALID, "while_loop: the body left loop variable %d NULL "
                          "(iteration %d)", j, iter);
    if (a->dtype == b->dtype && a->ndim == b->ndim &&
        !memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof *a->shape))
        return 0;
    return oari_error(OAR_ERR_INVALID, "while_loop: iteration %d changes loop variable %d from %s %s "
                      "to %s %s; loop variables keep their dtype and shape", iter, j,
                      oar_dtype_name(a->dtype), oari_shape_str(s1, a->ndim, a->shape),
                      oar_dtype_name(b->dtype), oari_shape_str(s2, b->ndim, b->shape));
}

static void release_all(int n, oar_tensor **t) {
    for (int j = 0; j < n; j++) {
        oar_tensor_release(t[j]);
        t[j] = NULL;
    }
}

int oar_while_loop(oar_fn cond_fn, oar_fn body_fn, void *ctx, int n_vars, oar_tensor *const *init,
                   int64_t max_iters, oar_tensor **out) {
    enum { MAXV = 64 };
    if (!cond_fn || !body_fn) return oari_error(OAR_ERR_INVALID, "while_loop: cond_fn or body_fn is NULL");
    if (n_vars < 1 || n_vars > MAXV || !init || !out)
        return oari_error(OAR_ERR_INVALID, "while_loop: need 1 to %d loop variables (got %d), "
                          "initial values and an output array", MAXV, n_vars);
    for (int j = 0; j < n_vars; j++) {
        out[j] = NULL;
        if (!init[j]) return oari_error(OAR_ERR_INVALID, "while_loop: initial value %d is NULL", j);
        if (!init[j]->storage && oari_trace_current)
            return oari_error(OAR_ERR_UNSUPPORTED, "while_loop: loop variable %d is a traced "
                              "(symbolic) value; recording loops in a graph is not supported", j);
    }
    /* cur holds one owned reference per variable; each step runs in its own
     * pool so an iteration's temporaries die with it */
    oar_tensor *cur[MAXV], *next[MAXV];
    for (int j = 0; j < n_vars; j++) cur[j] = oar_tensor_retain(init[j]);
    int st = 0;
    for (int64_t iter = 0;; iter++) {
        oar_pool *p = oar_pool_push();
        oar_tensor *pred = NULL;
        st = cond_fn(ctx, n_vars, cur, 1, &pred);
        if (st && !oari_error_pending()) oari_error(st, "while_loop: cond_fn failed (iteration %lld)",
                                                    (long long)iter);
        int t = st ? st : truth("while_loop", pred);
        if (t <= 0) {
            oar_pool_pop(p);
            st = t;
            break;
        }
        if (max_iters >= 0 && iter >= max_iters) {
            oar_pool_pop(p);
            st = oari_error(OAR_ERR_INVALID, "while_loop: still running after max_iters = %lld "
                            "iterations", (long long)max_iters);
            break;
        }
        for (int j = 0; j < n_vars; j++) next[j] = NULL;
        st = body_fn(ctx, n_vars, cur, n_vars, next);
        if (st && !oari_error_pending()) oari_error(st, "while_loop: body_fn failed (iteration %lld)",
                                                    (long long)iter);
        for (int j = 0; j < n_vars && !st; j++) st = same_meta((int)iter, j, cur[j], next[j]);
        for (int j = 0; j < n_vars; j++) next[j] = st ? NULL : oar_tensor_retain(next[j]);
        oar_pool_pop(p);
        if (st) break;
        release_all(n_vars, cur);
        memcpy(cur, next, (size_t)n_vars * sizeof *cur);
    }
    if (st) {
        release_all(n_vars, cur);
        return st;
    }
    for (int j = 0; j < n_vars; j++) {
        if (!(out[j] = oari_pool_adopt(cur[j]))) {
            for (int k = j + 1; k < n_vars; k++) oar_tensor_release(cur[k]);
            return OAR_ERR_NOMEM;
        }
    }
    return 0;
}

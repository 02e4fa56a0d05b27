/* ONNX import, control flow. If with a constant condition and Loop with a
 * constant trip count and conditions run their sub-graphs inline while
 * tracing (the graph gets the branch taken, the unrolled loop); with a
 * condition or trip count computed at run time they become oar's cond and
 * while nodes (oar_cond, oar_while_loop: each sub-graph traced once, outer
 * names read by it become captures). Scan is unrolled. */
#define OARI_ONNX_PROTO
#include "onnx_internal.h"
#include <oar/graph.h>
#include <string.h>

#define MAX_ITERS 4096

static const Onnx__GraphProto *graph_attr(oari_onnx_node *nd, const char *name) {
    const Onnx__AttributeProto *a = oari_onnx_attr(nd, name);
    return a ? a->g : NULL;
}

static int concrete_bool(oar_tensor *t, const char *what, bool *out) {
    if (!oar_tensor_data(t))
        return oari_error(OAR_ERR_UNSUPPORTED, "%s is computed at run time; oar graphs record no control flow, "
                          "so it must be a constant", what);
    if (oar_tensor_numel(t) != 1) return oari_error(OAR_ERR_INVALID, "%s must hold one value", what);
    *out = oar_tensor_item(t) != 0;
    return 0;
}

/* If on a traced condition: a cond node whose branches run the ONNX branches. */
typedef struct {
    oari_onnx_node *nd;
    const Onnx__GraphProto *g[2]; /* then, else */
} if_ctx;

static int run_branch(if_ctx *b, int k, int n_out, oar_tensor **out) {
    oar_tensor *res[OARI_ONNX_MAX_IO];
    int st = oari_onnx_run_subgraph(b->nd, b->g[k], 0, NULL, n_out, res);
    for (int j = 0; j < n_out && !st; j++) out[j] = res[j];
    return st;
}
static int then_fn(void *c, int n_in, oar_tensor *const *in, int n_out, oar_tensor **out) {
    (void)n_in, (void)in;
    return run_branch(c, 0, n_out, out);
}
static int else_fn(void *c, int n_in, oar_tensor *const *in, int n_out, oar_tensor **out) {
    (void)n_in, (void)in;
    return run_branch(c, 1, n_out, out);
}

int oari_onnx_conv_if(oari_onnx_node *nd) {
    int st = oari_onnx_need(nd, 1);
    bool cond;
    if (st) return st;
    if (!oar_tensor_data(nd->in[0])) {
        if (oar_tensor_numel(nd->in[0]) != 1) return oari_error(OAR_ERR_INVALID, "the condition must hold one value");
        if_ctx b = {nd, {graph_attr(nd, "then_branch"), graph_attr(nd, "else_branch")}};
        if (!b.g[0] || !b.g[1]) return oari_error(OAR_ERR_INVALID, "a branch is missing");
        return oar_cond(nd->in[0], then_fn, else_fn, &b, 0, NULL, nd->n_out, nd->out);
    }
    if ((st = concrete_bool(nd->in[0], "the condition", &cond))) return st;
    st = oari_onnx_run_subgraph(nd, graph_attr(nd, cond ? "then_branch" : "else_branch"), 0, NULL, nd->n_out, nd->out);
    for (int j = 0; j < nd->n_out && !st; j++) /* an outer value passed through gets its own result */
        for (int i = 0; i < nd->n_in; i++)
            if (nd->out[j] == nd->in[i]) nd->out[j] = oar_clone(nd->out[j]);
    return st;
}

/* Loop on a trip count or condition computed at run time: a while node over
 * (iter, M, cond, v...): it runs while iter < M and cond, the body runs the
 * ONNX body on (iter, cond, v...) and adds 1 to iter. */
typedef struct {
    oari_onnx_node *nd;
    const Onnx__GraphProto *body;
    int nv;
} loop_ctx;

static int loop_cond(void *c, int n_in, oar_tensor *const *in, int n_out, oar_tensor **out) {
    (void)c, (void)n_in, (void)n_out;
    out[0] = oar_logical_and(oar_lt(in[0], in[1]), in[2]);
    return out[0] ? 0 : OAR_ERR_INVALID;
}

static int loop_body(void *vc, int n_in, oar_tensor *const *in, int n_out, oar_tensor **out) {
    loop_ctx *l = vc;
    oar_tensor *bin[OARI_ONNX_MAX_IO], *bout[OARI_ONNX_MAX_IO];
    (void)n_in, (void)n_out;
    bin[0] = in[0];
    bin[1] = in[2];
    for (int i = 0; i < l->nv; i++) bin[2 + i] = in[3 + i];
    int st = oari_onnx_run_subgraph(l->nd, l->body, 2 + l->nv, bin, 1 + l->nv, bout);
    if (st) return st;
    out[0] = oar_add_scalar(in[0], 1);
    out[1] = in[1];
    out[2] = oar_reshape(oar_cast(bout[0], OAR_BOOL), 0, NULL);
    for (int i = 0; i < l->nv; i++) out[3 + i] = bout[1 + i];
    for (int j = 0; j < 3 + l->nv; j++)
        if (!out[j]) return OAR_ERR_INVALID;
    return 0;
}

static int loop_node(oari_onnx_node *nd, const Onnx__GraphProto *body, int nv, int nscan) {
    if (nscan)
        return oari_error(OAR_ERR_UNSUPPORTED, "scan outputs of a loop whose trip count is computed at run time "
                          "(their length would be too)");
    if (nv + 3 > OARI_ONNX_MAX_IO) return oari_error(OAR_ERR_UNSUPPORTED, "%d loop-carried values", nv);
    oar_tensor *init[OARI_ONNX_MAX_IO], *out[OARI_ONNX_MAX_IO];
    init[0] = oari_onnx_scalar(0, OAR_I64);
    init[1] = nd->in[0] ? oar_reshape(oar_cast(nd->in[0], OAR_I64), 0, NULL) : oari_onnx_scalar(9.2e18, OAR_I64);
    init[2] = nd->in[1] ? oar_reshape(oar_cast(nd->in[1], OAR_BOOL), 0, NULL) : oari_onnx_scalar(1, OAR_BOOL);
    for (int i = 0; i < nv; i++) init[3 + i] = nd->in[2 + i];
    if (!init[1] || !init[2]) return OAR_ERR_INVALID;
    loop_ctx l = {nd, body, nv};
    int st = oar_while_loop(loop_cond, loop_body, &l, 3 + nv, init, -1, out);
    for (int i = 0; i < nv && !st; i++) nd->out[i] = out[3 + i];
    return st;
}

/* Loop: M (trip count), cond, v_initial...; body (iter, cond, v...) ->
 * (cond, v..., scan...); outputs v_final..., scan outputs stacked. */
int oari_onnx_conv_loop(oari_onnx_node *nd) {
    const Onnx__GraphProto *body = graph_attr(nd, "body");
    if (!body) return oari_error(OAR_ERR_INVALID, "body is missing");
    int nv = nd->n_in - 2, nscan = nd->n_out - nv;
    if (nv < 0 || nscan < 0 || (int)body->n_output != 1 + nv + nscan)
        return oari_error(OAR_ERR_INVALID, "%d inputs, %d outputs and a body of %zu outputs disagree", nd->n_in,
                          nd->n_out, body->n_output);
    int64_t M = -1;
    bool cond = true;
    int st;
    for (int i = 0; i < nv; i++)
        if (!nd->in[2 + i]) return oari_error(OAR_ERR_INVALID, "loop-carried value %d is missing", i);
    if ((nd->in[0] && !oar_tensor_data(nd->in[0])) || (nd->in[1] && !oar_tensor_data(nd->in[1])))
        return loop_node(nd, body, nv, nscan);
    if (nd->in[0]) {
        int k = oari_onnx_input_ints(nd, 0, &M, 1);
        if (k < 0) return k;
    }
    if (nd->in[1] && (st = concrete_bool(nd->in[1], "the loop condition", &cond))) return st;
    if (M < 0 && !nd->in[1]) return oari_error(OAR_ERR_UNSUPPORTED, "an unbounded loop");
    oar_tensor *v[OARI_ONNX_MAX_IO], *bin[OARI_ONNX_MAX_IO], *bout[OARI_ONNX_MAX_IO];
    for (int i = 0; i < nv; i++)
        if (!(v[i] = nd->in[2 + i])) return oari_error(OAR_ERR_INVALID, "loop-carried value %d is missing", i);
    oar_tensor **scans = NULL;
    int64_t iters = 0, cap = 0;
    for (int64_t it = 0; cond && (M < 0 || it < M); it++) {
        if (it >= MAX_ITERS) {
            st = oari_error(OAR_ERR_UNSUPPORTED, "more than %d iterations (unrolled)", MAX_ITERS);
            break;
        }
        bin[0] = oari_onnx_scalar((double)it, OAR_I64);
        bin[1] = oari_onnx_scalar(1, OAR_BOOL);
        for (int i = 0; i < nv; i++) bin[2 + i] = v[i];
        if ((st = oari_onnx_run_subgraph(nd, body, 2 + nv, bin, 1 + nv + nscan, bout))) break;
        if (!oar_tensor_data(bout[0]) && oar_tensor_numel(bout[0]) == 1) { /* decided at run time */
            oari_free(scans, (size_t)(cap * nscan) * sizeof *scans);
            return loop_node(nd, body, nv, nscan); /* the unrolled nodes so far are left unused */
        }
        if ((st = concrete_bool(bout[0], "the body's condition", &cond))) break;
        for (int i = 0; i < nv; i++) v[i] = bout[1 + i];
        if (nscan) {
            if (iters == cap) {
                int64_t nc = cap ? 2 * cap : 16;
                oar_tensor **ns = oari_realloc(scans, (size_t)(cap * nscan) * sizeof *ns, (size_t)(nc * nscan) * sizeof *ns);
                if (!ns) {
                    st = oari_fail_status();
                    break;
                }
                scans = ns;
                cap = nc;
            }
            for (int j = 0; j < nscan; j++) scans[iters * nscan + j] = bout[1 + nv + j];
        }
        iters++;
    }
    for (int i = 0; i < nv && !st; i++) nd->out[i] = v[i] == nd->in[2 + i] ? oar_clone(v[i]) : v[i];
    for (int j = 0; j < nscan && !st; j++) {
        if (!iters) {
            st = oari_error(OAR_ERR_UNSUPPORTED, "scan outputs of a loop that runs no iteration");
            break;
        }
        oar_tensor **col = oari_malloc((size_t)iters * sizeof *col);
        if (!col) {
            st = oari_fail_status();
            break;
        }
        for (int64_t t = 0; t < iters; t++) col[t] = scans[t * nscan + j];
        nd->out[nv + j] = oar_stack((int)iters, col, 0);
        oari_free(col, (size_t)iters * sizeof *col);
        if (!nd->out[nv + j]) st = OAR_ERR_INVALID;
    }
    oari_free(scans, (size_t)(cap * nscan) * sizeof *scans);
    return st;
}

/* Scan (opset 9..): N states then num_scan_inputs scanned along axis 0,
 * forward; body (states..., slices...) -> (states..., scan outputs...). */
int oari_onnx_conv_scan(oari_onnx_node *nd) {
    const Onnx__GraphProto *body = graph_attr(nd, "body");
    int m = (int)oari_onnx_attr_i(nd, "num_scan_inputs", 0), n = nd->n_in - m, k = nd->n_out - n;
    if (!body || m < 1 || n < 0 || k < 0) return oari_error(OAR_ERR_INVALID, "num_scan_inputs %d for %d inputs", m, nd->n_in);
    static const char *const other[] = {"scan_input_axes", "scan_input_directions", "scan_output_axes",
                                        "scan_output_directions"};
    for (int i = 0; i < 4; i++) {
        int64_t v[OARI_ONNX_MAX_IO];
        int c = oari_onnx_attr_ints(nd, other[i], v, OARI_ONNX_MAX_IO);
        for (int j = 0; j < c; j++)
            if (v[j]) return oari_error(OAR_ERR_UNSUPPORTED, "%s other than 0 are not supported", other[i]);
    }
    int st = oari_onnx_need(nd, nd->n_in);
    if (st) return st;
    int64_t T = oar_tensor_ndim(nd->in[n]) > 0 ? oar_tensor_shape(nd->in[n])[0] : -1;
    if (T < 1 || T > MAX_ITERS) return oari_error(OAR_ERR_UNSUPPORTED, "scan length %lld (1..%d)", (long long)T, MAX_ITERS);
    oar_tensor *s[OARI_ONNX_MAX_IO], *bin[OARI_ONNX_MAX_IO], *bout[OARI_ONNX_MAX_IO];
    for (int i = 0; i < n; i++) s[i] = nd->in[i];
    oar_tensor **outs = oari_calloc((size_t)(T * (k ? k : 1)), sizeof *outs);
    if (!outs) return oari_fail_status();
    for (int64_t t = 0; t < T && !st; t++) {
        for (int i = 0; i < n; i++) bin[i] = s[i];
        for (int j = 0; j < m; j++) {
            oar_tensor *x = nd->in[n + j];
            if (oar_tensor_shape(x)[0] != T) st = oari_error(OAR_ERR_INVALID, "scan inputs of different lengths");
            bin[n + j] = oar_squeeze(oar_slice(x, 0, t, t + 1, 1), 0);
        }
        if (!st) st = oari_onnx_run_subgraph(nd, body, n + m, bin, n + k, bout);
        for (int i = 0; i < n && !st; i++) s[i] = bout[i];
        for (int j = 0; j < k && !st; j++) outs[t * k + j] = bout[n + j];
    }
    for (int i = 0; i < n && !st; i++) nd->out[i] = s[i] == nd->in[i] ? oar_clone(s[i]) : s[i];
    for (int j = 0; j < k && !st; j++) {
        oar_tensor *col[MAX_ITERS];
        for (int64_t t = 0; t < T; t++) col[t] = outs[t * k + j];
        if (!(nd->out[n + j] = oar_stack((int)T, col, 0))) st = OAR_ERR_INVALID;
    }
    oari_free(outs, (size_t)(T * (k ? k : 1)) * sizeof *outs);
    return st;
}

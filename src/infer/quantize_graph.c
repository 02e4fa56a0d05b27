/* Post-training quantization of a graph (include/oar/quant.h,
 * docs/quantization.md): the f32 matrix products and convolutions whose
 * weights are constants become int8 products on the VNNI kernels.
 *
 * 1. Candidates: matmul(x, W) with W a 2-D float constant or a permute
 *    [1, 0] of one (a traced Linear's weight) and x at least 2-D; conv2d(x, W, b?) with
 *    W a 4-D float constant. Only the top graph (not cond/while bodies).
 * 2. Calibration: a clone of the graph with each candidate's activation x
 *    as an extra output runs on the batches; one observer per distinct x.
 * 3. Rewrite, traced onto the graph in place of each candidate:
 *      xq = quantize(x; s_x, z_x) as uint8
 *      y  = cast(qmatmul(xq, Wq) or qconv2d(xq, Wq), f32) * (s_x * s_w)
 *    (+ the conv's bias), with Wq int8 per output channel (or per tensor)
 *    and s_x, z_x from the observer's range. The new nodes take the old
 *    node's place in the order; dead nodes and values are compacted away. */
#include "../graph/ir.h"
#include "../exec/exec.h"
#include <oar/quant.h>
#include <string.h>

typedef struct candidate {
    int node;          /* index in the graph as given */
    int x;             /* the activation value */
    int obs;           /* its observer (shared by candidates reading one x) */
    bool conv;
} candidate;

static bool float_const(const oar_graph *g, int v, int ndim) {
    const oari_gvalue *gv = v >= 0 ? &g->values[v] : NULL;
    return gv && gv->kind == OARI_V_CONST && gv->ndim == ndim && (gv->dtype == OAR_F32 || gv->dtype == OAR_F64);
}

/* The constant a matmul weight value v stands for: v itself, a 2-D float
 * constant, or a traced Linear's permute [1, 0] of one (a view node the
 * tracer keeps so the parameter stays named; *transposed set). -1 if v is
 * neither. */
static int matmul_weight_src(const oar_graph *g, int v, bool *transposed) {
    *transposed = false;
    if (float_const(g, v, 2)) return v;
    const oari_gvalue *gv = &g->values[v];
    if (gv->kind != OARI_V_NODE) return -1;
    const oari_gnode *p = &g->nodes[gv->producer];
    if (p->dead || p->op != OARI_OP_permute || p->n_in != 1 || !float_const(g, p->in[0], 2) ||
        p->attrs.ni != 2 || p->attrs.i[0] != 1 || p->attrs.i[1] != 0)
        return -1;
    *transposed = true;
    return p->in[0];
}

static bool is_candidate(const oar_graph *g, const oari_gnode *n, bool *conv) {
    if (n->dead || oari_is_ctrl(n->op) || n->n_in < 2 || n->in[0] < 0) return false;
    const oari_gvalue *x = &g->values[n->in[0]];
    if (x->kind == OARI_V_CONST || x->dtype != OAR_F32) return false;
    *conv = n->op == OARI_OP_conv2d;
    if (n->op == OARI_OP_matmul && n->n_in == 2 && x->ndim >= 2) {
        bool tr;
        int w = matmul_weight_src(g, n->in[1], &tr);
        return w >= 0 && g->values[w].shape[tr ? 1 : 0] <= OAR_QMATMUL_MAX_K;
    }
    if (n->op == OARI_OP_conv2d && x->ndim == 4 && float_const(g, n->in[1], 4)) {
        const oari_gvalue *w = &g->values[n->in[1]];
        return w->shape[1] * w->shape[2] * w->shape[3] <= OAR_QMATMUL_MAX_K;
    }
    return false;
}

/* Appends output v to g (a calibration clone; named calib:<v>). */
static int add_output(oar_graph *g, int v) {
    int n = g->n_outputs;
    int *o = oari_realloc(g->outputs, (size_t)n * sizeof *o, (size_t)(n + 1) * sizeof *o);
    if (!o) return oari_fail_status();
    g->outputs = o;
    char **nm = oari_realloc(g->output_names, (size_t)n * sizeof *nm, (size_t)(n + 1) * sizeof *nm);
    if (!nm) return oari_fail_status();
    g->output_names = nm;
    char *s = oari_malloc(24);
    if (!s) return oari_fail_status();
    snprintf(s, 24, "calib:%d", v);
    g->outputs[n] = v;
    g->output_names[n] = s;
    g->n_outputs = n + 1;
    return 0;
}

/* Runs the batches through a clone of g with the n_obs activations xs[] as
 * extra outputs, feeding observer k with xs[k]. */
static int calibrate(const oar_graph *g, const oar_quantize_config *cfg, const int *xs, int n_obs,
                     oar_calib_observer **obs, oar_calib_observer **minmax) {
    oar_graph *c = oar_graph_clone(g);
    if (!c) return oari_fail_status();
    int st = 0, n_out0 = c->n_outputs;
    for (int k = 0; k < n_obs && !st; k++) st = add_output(c, xs[k]);
    oar_executor *ex = st ? NULL : oar_executor_new(c);
    oar_tensor **outs = ex ? oari_calloc((size_t)c->n_outputs, sizeof *outs) : NULL;
    if (!st && !outs) st = oari_fail_status();
    const int n_in = g->n_inputs;
    for (int b = 0; b < cfg->n_batches && !st; b++) {
        for (int i = 0; i < c->n_outputs; i++) outs[i] = NULL;
        char why[256];
        if ((st = oar_executor_run(ex, cfg->batches + (size_t)b * (size_t)n_in, outs))) {
            snprintf(why, sizeof why, "%s", oar_last_error()); /* (the error buffer is rewritten) */
            st = oari_error(st, "graph_quantize: calibration batch %d: %s", b, why);
            break;
        }
        for (int k = 0; k < n_obs && !st; k++)
            if ((st = oar_calib_observer_update(obs[k], outs[n_out0 + k])) ||
                (minmax[k] != obs[k] && (st = oar_calib_observer_update(minmax[k], outs[n_out0 + k])))) {
                snprintf(why, sizeof why, "%s", oar_last_error());
                st = oari_error(st, "graph_quantize: calibration batch %d, the input of a quantized layer: %s",
                                b, why);
            }
    }
    if (outs) oari_free(outs, (size_t)c->n_outputs * sizeof *outs);
    oar_executor_free(ex);
    oar_graph_free(c);
    return st;
}

/* The int8 replacement of candidate cd traced onto g; *out gets the value
 * that stands for the old node's output. xq[cd->obs]: x quantized, made by
 * the first candidate reading x and shared by the others (one quantize
 * node per activation; they share its scale and zero point). */
static int rewrite(oar_graph *g, const candidate *cd, double xs, int64_t xz, bool per_tensor, oar_tensor **xq,
                   int *out) {
    oari_gnode n = g->nodes[cd->node]; /* a copy: tracing moves g->nodes */
    if (!xq[cd->obs]) {
        oar_tensor *x = oari_pool_adopt(oari_graph_symbolic(&g->values[cd->x]));
        if (!x) return oari_fail_status();
        oari_trace_bind(x, cd->x);
        if (!(xq[cd->obs] = oar_quantize_per_tensor(x, xs, xz, OAR_U8))) return oari_fail_status();
    }
    bool tr = false;
    int wv = cd->conv ? n.in[1] : matmul_weight_src(g, n.in[1], &tr);
    oar_tensor *w0 = g->values[wv].constant;
    oar_tensor *w = oar_cast(tr ? oar_transpose(w0, 0, 1) : w0, OAR_F32), *wq = NULL, *ws = NULL;
    if (!w) return oari_fail_status();
    int axis = cd->conv ? 0 : 1; /* the output channel: conv [o, c, kh, kw], matmul [k, n] */
    if (per_tensor) axis = -1;
    if (axis < 0) { /* one scale: max |w| / 127 */
        double amax = oar_tensor_item(oar_amax(oar_abs(w), 0, NULL, false));
        double s = amax > 0 ? amax / 127 : 1;
        ws = oar_full(OAR_F64, 0, NULL, s);
        wq = oar_quantize_per_tensor(w, s, 0, OAR_I8);
    } else if (oar_quantize_weight(w, axis, &wq, &ws)) {
        return oari_fail_status();
    }
    if (!wq || !ws) return oari_fail_status();
    oar_tensor *acc;
    if (cd->conv) {
        const int64_t *ia = n.attrs.i;
        acc = oar_qconv2d(xq[cd->obs], xz, wq, ia, ia + 2, ia + 4, ia[6]);
    } else {
        acc = oar_qmatmul(xq[cd->obs], xz, wq);
    }
    /* the combined scale, broadcast along the output channel */
    oar_tensor *scale = oar_cast(oar_mul_scalar(ws, xs), OAR_F32);
    if (scale && cd->conv && oar_tensor_ndim(scale) == 1)
        scale = oar_reshape(scale, 4, (int64_t[]){1, oar_tensor_shape(scale)[0], 1, 1});
    oar_tensor *y = oar_mul(oar_cast(acc, OAR_F32), scale);
    if (y && cd->conv && n.n_in > 2 && n.in[2] >= 0) {
        int bv = n.in[2];
        oar_tensor *b;
        if (g->values[bv].kind == OARI_V_CONST) {
            b = oar_cast(g->values[bv].constant, OAR_F32);
        } else {
            b = oari_pool_adopt(oari_graph_symbolic(&g->values[bv]));
            if (b) oari_trace_bind(b, bv);
        }
        int64_t o = g->values[n.in[1]].shape[0];
        y = b ? oar_add(y, oar_reshape(b, 4, (int64_t[]){1, o, 1, 1})) : NULL;
    }
    int v = y ? oari_trace_value_of(y) : -1;
    if (v < 0) return oari_fail_status();
    *out = v;
    return 0;
}

int oar_graph_quantize(oar_graph *g, const oar_quantize_config *cfg) {
    if (!g || !cfg) return oari_error(OAR_ERR_INVALID, "graph_quantize: %s is NULL", g ? "config" : "graph");
    if (cfg->n_batches < 1 || !cfg->batches)
        return oari_error(OAR_ERR_INVALID, "graph_quantize: no calibration batches (n_batches %d)", cfg->n_batches);
    for (int i = 0; i < cfg->n_batches * g->n_inputs; i++)
        if (!cfg->batches[i])
            return oari_error(OAR_ERR_INVALID, "graph_quantize: calibration batch %d, input %d is NULL",
                              i / (g->n_inputs ? g->n_inputs : 1), i % (g->n_inputs ? g->n_inputs : 1));
    const int N0 = g->n_nodes;
    candidate *cands = oari_calloc((size_t)(N0 ? N0 : 1), sizeof *cands);
    int *xs = oari_calloc((size_t)(N0 ? N0 : 1), sizeof *xs);
    oar_calib_observer **obs = oari_calloc((size_t)(N0 ? N0 : 1), sizeof *obs);
    oar_calib_observer **minmax = oari_calloc((size_t)(N0 ? N0 : 1), sizeof *minmax);
    int *order = NULL, *repl = NULL, *first_new = NULL;
    int nc = 0, n_obs = 0, st = 0, n_order = 0;
    if (!cands || !xs || !obs || !minmax) st = oari_fail_status();
    for (int i = 0; i < N0 && !st; i++) {
        bool conv;
        if (!is_candidate(g, &g->nodes[i], &conv)) continue;
        int x = g->nodes[i].in[0], k = 0;
        while (k < n_obs && xs[k] != x) k++;
        if (k == n_obs) {
            if (!(obs[k] = oar_calib_observer_new(cfg->method, cfg->percentile, cfg->bins))) {
                char why[256];
                snprintf(why, sizeof why, "%s", oar_last_error()); /* (the error buffer is rewritten) */
                st = oari_error(OAR_ERR_INVALID, "graph_quantize: %s", why);
                break;
            }
            /* the exact min beside a histogram method's [-t, t]: an x that
             * is never negative (a relu's output) keeps all 256 levels for [0, t] */
            minmax[k] = cfg->method == OAR_CALIB_MINMAX ? obs[k] : oar_calib_observer_new(OAR_CALIB_MINMAX, 0, 0);
            if (!minmax[k]) {
                oar_calib_observer_free(obs[k]);
                st = oari_fail_status();
                break;
            }
            xs[n_obs++] = x;
        }
        cands[nc++] = (candidate){.node = i, .x = x, .obs = k, .conv = conv};
    }
    if (!st && nc == 0) goto done; /* nothing to quantize: the graph as it was */
    if (!st) st = calibrate(g, cfg, xs, n_obs, obs, minmax);
    /* rewrite, remembering where each candidate's new nodes start */
    repl = st ? NULL : oari_calloc((size_t)nc, sizeof *repl);
    first_new = st ? NULL : oari_calloc((size_t)nc + 1, sizeof *first_new);
    if (!st && (!repl || !first_new)) st = oari_fail_status();
    void *tracer = st ? NULL : oari_trace_attach(g);
    if (!st && !tracer) st = OAR_ERR_STATE;
    oar_pool *pool = tracer ? oar_pool_push() : NULL;
    oar_tensor **xq = tracer ? oari_calloc((size_t)n_obs, sizeof *xq) : NULL; /* (pool-owned tensors) */
    if (tracer && !xq) st = oari_fail_status();
    for (int c = 0; c < nc && !st; c++) {
        double lo, hi, min, max, scale;
        int64_t zp;
        first_new[c] = g->n_nodes;
        if ((st = oar_calib_observer_range(obs[cands[c].obs], &lo, &hi)) ||
            (st = oar_calib_observer_range(minmax[cands[c].obs], &min, &max)))
            break;
        if (min >= 0) lo = 0;
        if ((st = oar_quant_params(lo, hi, OAR_U8, false, &scale, &zp))) break;
        st = rewrite(g, &cands[c], scale, zp, cfg->per_tensor_weights, xq, &repl[c]);
    }
    if (!st) first_new[nc] = g->n_nodes;
    if (xq) oari_free(xq, (size_t)n_obs * sizeof *xq);
    if (tracer) oari_trace_detach(tracer);
    if (pool) oar_pool_pop(pool);
    if (st) goto done;
    /* the new nodes in place of the old ones, which die */
    n_order = g->n_nodes;
    order = oari_calloc((size_t)n_order, sizeof *order);
    if (!order) {
        st = oari_fail_status();
        goto done;
    }
    for (int i = 0, c = 0, at = 0; i < N0; i++) {
        order[at++] = i;
        if (c < nc && cands[c].node == i) {
            for (int j = first_new[c]; j < first_new[c + 1]; j++) order[at++] = j;
            c++;
        }
    }
    for (int c = 0; c < nc; c++) {
        oari_graph_replace_uses(g, g->nodes[cands[c].node].out[0], repl[c]);
        oari_graph_kill(g, cands[c].node);
    }
    /* (dce: the weights' permute nodes lost their last use) */
    if (!(st = oari_graph_reorder(g, order)) && (st = oari_pass_dce(g)) >= 0 && !(st = oari_graph_compact(g)))
        st = oar_graph_verify(g);
done:
    for (int k = 0; k < n_obs; k++) {
        if (minmax[k] != obs[k]) oar_calib_observer_free(minmax[k]);
        oar_calib_observer_free(obs[k]);
    }
    if (order) oari_free(order, (size_t)n_order * sizeof *order);
    if (repl) oari_free(repl, (size_t)nc * sizeof *repl);
    if (first_new) oari_free(first_new, ((size_t)nc + 1) * sizeof *first_new);
    if (cands) oari_free(cands, (size_t)(N0 ? N0 : 1) * sizeof *cands);
    if (xs) oari_free(xs, (size_t)(N0 ? N0 : 1) * sizeof *xs);
    if (obs) oari_free(obs, (size_t)(N0 ? N0 : 1) * sizeof *obs);
    if (minmax) oari_free(minmax, (size_t)(N0 ? N0 : 1) * sizeof *minmax);
    return st ? st : nc;
}

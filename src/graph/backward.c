/* Backward on the graph: walks the nodes in reverse and calls each op's own
 * gradient rule (invariant 2 of docs/architecture.md) on tensors standing for the graph's
 * values while tracing onto the graph, so the rules' op calls append the
 * gradient nodes. Also a traced SGD update. */
#include "ir.h"

#include <math.h>
#include <string.h>

static void meta_of(const oari_gvalue *v, oari_meta *m) {
    m->dtype = v->dtype;
    m->ndim = v->ndim;
    memcpy(m->shape, v->shape, (size_t)v->ndim * sizeof *v->shape);
}

static bool differentiable(oar_dtype d) { return oar_dtype_is_float(d) || oar_dtype_is_complex(d); }

/* Appends output value v named `prefix` + name. */
static int add_output(oar_graph *g, int v, const char *prefix, const char *name) {
    int n = g->n_outputs;
    int *o = oari_realloc(g->outputs, (size_t)n * sizeof *o, (size_t)(n + 1) * sizeof *o);
    if (!o) return oari_fail_status();
    g->outputs = o;
    char **nm = oari_realloc(g->output_names, (size_t)n * sizeof *nm, (size_t)(n + 1) * sizeof *nm);
    if (!nm) return oari_fail_status(); /* outputs keeps its larger size until the next add */
    g->output_names = nm;
    size_t len = strlen(prefix) + strlen(name) + 1;
    char *s = oari_malloc(len);
    if (!s) return oari_fail_status();
    snprintf(s, len, "%s%s", prefix, name);
    g->outputs[n] = v;
    g->output_names[n] = s;
    g->n_outputs = n + 1;
    return 0;
}

/* Marks, for nodes [a, b) in order, the outputs that need a gradient:
 * floating outputs of a live differentiable node reading a value that does. */
static void mark_required(const oar_graph *g, int a, int b, bool *req) {
    for (int i = a; i < b; i++) {
        const oari_gnode *n = &g->nodes[i];
        bool r = false;
        for (int k = 0; k < n->n_in; k++) r = r || (n->in[k] >= 0 && req[n->in[k]]);
        if (n->dead || (oari_gnode_def(n)->flags & OARI_F_NONDIFF)) r = false;
        for (int j = 0; j < n->n_out; j++) req[n->out[j]] = r && differentiable(g->values[n->out[j]].dtype);
    }
}

/* The tensors standing for values [v0, nv): constants as themselves
 * (retained), others symbolic and bound to their value. */
static int bind_values(oar_graph *g, int v0, int nv, oar_tensor **t) {
    for (int v = v0; v < nv; v++) {
        const oari_gvalue *gv = &g->values[v];
        if (gv->kind == OARI_V_CONST) {
            t[v] = oar_tensor_retain(gv->constant);
            continue;
        }
        if (!(t[v] = oari_graph_symbolic(gv))) return oari_fail_status();
        oari_trace_bind(t[v], v);
    }
    return 0;
}

/* Appends a copy of each live node of recompute segment s among the first
 * n0 (in their order), reading the copies of values made earlier in the
 * segment and the original values otherwise; remap[v] and rt[v] become the
 * copy of value v and a tensor standing for it. Control nodes are not
 * copied: their outputs are kept. */
static int recompute_segment(oar_graph *g, int n0, int s, int *remap, oar_tensor **rt) {
    for (int i = 0; i < n0; i++) {
        oari_gnode n = g->nodes[i]; /* a copy: adding nodes moves g->nodes */
        if (n.dead || n.segment != s || oari_is_ctrl(n.op)) continue;
        const oari_op_def *def = oari_gnode_def(&n);
        int in[OARI_MAX_IN];
        oari_meta meta[OARI_GMAX_OUT];
        for (int k = 0; k < n.n_in; k++) in[k] = n.in[k] >= 0 && remap[n.in[k]] >= 0 ? remap[n.in[k]] : n.in[k];
        if ((def->flags & OARI_F_INPLACE) && in[0] == n.in[0])
            return oari_error(OAR_ERR_UNSUPPORTED, "graph_backward: %s (node %d) writes in place into a "
                              "value from outside its checkpointed segment, which recomputing would "
                              "write again; make the in-place op out of place or move it out of the "
                              "oar_checkpoint", def->name, i);
        for (int j = 0; j < n.n_out; j++) meta_of(&g->values[n.out[j]], &meta[j]);
        int c = oari_graph_add_node(g, n.op, &n.attrs, n.n_in, in, n.n_out, meta);
        if (c < 0) return oari_fail_status();
        oari_gnode *cn = &g->nodes[c];
        memcpy(cn->isym, n.isym, sizeof n.isym);
        memcpy(cn->imul, n.imul, sizeof n.imul);
        cn->recompute = true;
        for (int j = 0; j < n.n_out; j++) {
            int v = n.out[j], w = cn->out[j];
            memcpy(g->values[w].sym, g->values[v].sym, sizeof g->values[v].sym);
            memcpy(g->values[w].smul, g->values[v].smul, sizeof g->values[v].smul);
            remap[v] = w;
            if (!(rt[v] = oari_pool_adopt(oari_graph_symbolic(&g->values[w])))) return oari_fail_status();
            oari_trace_bind(rt[v], w);
        }
    }
    return 0;
}

static int node_backward(const oar_graph *g, int i, const bool *req, oar_tensor **t, oar_tensor **rt,
                         oar_tensor **gr);

/* The gradient of node n (def without a rule, with a decomposition) into
 * gin[]: its decomposition is traced onto the graph (nodes appended: they
 * compute n's outputs again, from in[]) and differentiated as any nodes
 * are, seeded with gout[]. */
static int decomposed_backward(const oari_gnode *n, const oari_op_def *def, oar_tensor **in, const bool *needs,
                               oar_tensor **gout, oar_tensor **gin) {
    oar_graph *g = oari_trace_graph();
    if (!g) return oari_error(OAR_ERR_STATE, "graph_backward: %s: no graph being traced", def->name);
    const int a = g->n_nodes, nva = g->n_values;
    int id[OARI_MAX_IN];
    for (int k = 0; k < n->n_in; k++) id[k] = in[k] ? oari_trace_value_of(in[k]) : -1;
    oar_tensor *out[OARI_GMAX_OUT] = {0};
    int st = def->decompose(in, &n->attrs, out);
    if (st) return st;
    const int b = g->n_nodes, nvb = g->n_values;
    bool *req = oari_calloc((size_t)nvb, sizeof *req);
    oar_tensor **t = oari_calloc((size_t)nvb, sizeof *t), **gr = oari_calloc((size_t)nvb, sizeof *gr);
    if (!req || !t || !gr) st = oari_fail_status();
    /* stand-ins: the node's inputs, and new tensors for the values the
     * decomposition made; what needs a gradient, forward from the inputs */
    for (int k = 0; !st && k < n->n_in; k++) {
        if (id[k] < 0) continue;
        t[id[k]] = in[k];
        req[id[k]] = req[id[k]] || needs[k];
    }
    if (!st) {
        st = bind_values(g, nva, nvb, t);
        for (int v = nva; v < nvb; v++) /* (the pool owns them, those bound before a failure too) */
            if (t[v] && !oari_pool_adopt(t[v]) && !st) st = oari_fail_status();
    }
    for (int i = a; !st && i < b; i++)
        for (int k = 0; k < g->nodes[i].n_in && !st; k++) {
            const int v = g->nodes[i].in[k];
            if (v >= 0 && v < nva && !t[v])
                st = oari_error(OAR_ERR_UNSUPPORTED, "graph_backward: %s's decomposition reads value %d, "
                                "not one of its inputs", def->name, v);
        }
    if (!st) mark_required(g, a, b, req);
    for (int j = 0; !st && j < n->n_out; j++) {
        const int v = out[j] ? oari_trace_value_of(out[j]) : -1;
        if (v < 0 && gout[j]) st = oari_fail_status();
        else if (v >= 0 && gout[j] && !(gr[v] = gr[v] ? oar_add(gr[v], gout[j]) : gout[j])) st = oari_fail_status();
    }
    for (int i = b - 1; !st && i >= a; i--) st = node_backward(g, i, req, t, NULL, gr);
    /* an input read twice (two slots, one value) takes its gradient once */
    for (int k = 0; !st && k < n->n_in; k++) {
        bool first = true;
        for (int q = 0; q < k; q++) first = first && id[q] != id[k];
        if (needs[k] && id[k] >= 0 && first) gin[k] = gr[id[k]];
    }
    oari_free(req, (size_t)nvb * sizeof *req);
    oari_free(t, (size_t)nvb * sizeof *t);
    oari_free(gr, (size_t)nvb * sizeof *gr);
    return st;
}

/* The gradient of node i into gr[], reading rt[v] (a recomputed value) in
 * place of t[v] where there is one (rt may be NULL). */
static int node_backward(const oar_graph *g, int i, const bool *req, oar_tensor **t, oar_tensor **rt,
                         oar_tensor **gr) {
    /* a copy: the rule's op calls append nodes, which may move g->nodes */
    oari_gnode node = g->nodes[i], *n = &node;
    if (n->dead) return 0;
    const oari_op_def *def = oari_gnode_def(n);
    oar_tensor *gout[OARI_GMAX_OUT], *out[OARI_GMAX_OUT], *in[OARI_MAX_IN], *gin[OARI_MAX_IN];
    bool needs[OARI_MAX_IN], any_out = false, any_in = false;
    oari_meta in_meta[OARI_MAX_IN], out_meta[OARI_GMAX_OUT];
    for (int j = 0; j < n->n_out; j++) {
        gout[j] = gr[n->out[j]];
        out[j] = rt && rt[n->out[j]] ? rt[n->out[j]] : t[n->out[j]];
        meta_of(&g->values[n->out[j]], &out_meta[j]);
        any_out = any_out || gout[j];
    }
    for (int k = 0; k < n->n_in; k++) {
        int v = n->in[k];
        needs[k] = v >= 0 && req[v];
        any_in = any_in || needs[k];
        in[k] = v < 0 ? NULL : rt && rt[v] ? rt[v] : t[v];
        gin[k] = NULL;
        if (v >= 0) meta_of(&g->values[v], &in_meta[k]);
        else memset(&in_meta[k], 0, sizeof in_meta[k]);
    }
    if (!any_out || !any_in) return 0;
    if (oari_is_ctrl(n->op)) { /* control.c: a cond of the branches' gradients; loops for a while */
        int st = n->op == OARI_OP_COND ? oari_cond_grad(n, in, gout, needs, gin)
                                       : oari_while_grad(n, in, gout, needs, gin);
        if (st) return st;
    } else if (!def->grad && def->decompose) {
        int st = decomposed_backward(n, def, in, needs, gout, gin);
        if (st) return st;
    } else {
        if (!def->grad)
            return oari_error(OAR_ERR_UNSUPPORTED, "graph_backward: %s (node %d) has no gradient rule",
                              def->name, i);
        oari_grad_ctx c = {.op = n->op, .attrs = &n->attrs, .n_in = n->n_in, .n_out = n->n_out,
                           .in = in, .in_meta = in_meta, .out = out, .out_meta = out_meta,
                           .gout = gout, .needs = needs, .gin = gin};
        int st = def->grad(&c);
        if (st) {
            if (!oari_error_pending()) oari_error(st, "graph_backward: the gradient rule of %s failed", def->name);
            return st;
        }
    }
    for (int k = 0; k < n->n_in; k++) {
        if (!needs[k] || !gin[k]) continue;
        int v = n->in[k];
        oar_tensor *sum = gr[v] ? oar_add(gr[v], gin[k]) : gin[k];
        if (!sum) return oari_fail_status();
        gr[v] = sum; /* pool-owned, like every tensor made here */
    }
    return 0;
}

int oari_graph_backward_nodes(const oar_graph *g, int n0, const bool *req, oar_tensor **t, oar_tensor **gr,
                              oar_graph *emit) {
    /* recompute: per value, its copy (-1: none) and a tensor standing for it */
    int nv = g->n_values, st = 0;
    int *remap = emit ? oari_malloc((size_t)(nv ? nv : 1) * sizeof *remap) : NULL;
    oar_tensor **rt = emit ? oari_calloc((size_t)(nv ? nv : 1), sizeof *rt) : NULL;
    if (emit && (!remap || !rt)) st = oari_fail_status();
    for (int v = 0; remap && v < nv; v++) remap[v] = -1;
    for (int i = n0 - 1; i >= 0 && !st; i--) {
        const oari_gnode *n = &g->nodes[i];
        if (emit && n->segment && !n->dead && !oari_is_ctrl(n->op)) {
            /* the first node of a segment whose gradient runs, met walking
             * back: copy the segment */
            bool copied = false, flows = false, wanted = false;
            for (int j = 0; j < n->n_out; j++) {
                copied = copied || remap[n->out[j]] >= 0;
                flows = flows || gr[n->out[j]];
            }
            for (int k = 0; k < n->n_in; k++) wanted = wanted || (n->in[k] >= 0 && req[n->in[k]]);
            copied = copied || !flows || !wanted;
            if (!copied && (st = recompute_segment(emit, n0, n->segment, remap, rt))) break;
        }
        st = node_backward(g, i, req, t, rt, gr);
    }
    oari_free(remap, (size_t)(nv ? nv : 1) * sizeof *remap);
    oari_free(rt, (size_t)(nv ? nv : 1) * sizeof *rt);
    return st;
}

/* Turns each live node among the first n0 that reads a value depending on
 * wrt, and whose op has a train form for its attributes
 * (oari_op_def.train_form: lstm_layer and the GRU rnn_layer keep their
 * gates), into that form: its extra output is what the gradient rule reads
 * instead of recomputing (for those, two GEMMs over all steps fewer). The
 * rule also takes a gradient into it, so the backward still
 * differentiates again, and the graph computes the same either way. 0 or a
 * status. */
static int take_train_forms(oar_graph *g, int n0, int n_wrt, const int *wrt) {
    int nv0 = g->n_values, st = 0;
    size_t dep_n = (size_t)(nv0 ? nv0 : 1) * sizeof(bool);
    bool *dep = oari_calloc(1, dep_n); /* value v depends on wrt (v < nv0) */
    if (!dep) return oari_fail_status();
    for (int k = 0; k < n_wrt; k++) dep[g->inputs[wrt[k]]] = true;
    for (int i = 0; i < n0 && !st; i++) {
        oari_gnode *n = &g->nodes[i];
        bool d = false;
        for (int k = 0; k < n->n_in; k++) d = d || (n->in[k] >= 0 && dep[n->in[k]]);
        for (int j = 0; j < n->n_out; j++)
            if (n->out[j] < nv0) dep[n->out[j]] = d;
        const oari_op_def *def = oari_gnode_def(n);
        oari_meta y, extra;
        if (!d || n->dead || !def->train_form) continue;
        meta_of(&g->values[n->out[0]], &y);
        int train = def->train_form(&n->attrs, &y, &extra);
        if (train < 0) continue;
        int r = oari_graph_add_value(g, OARI_V_NODE, extra.dtype, extra.ndim, extra.shape);
        if (r < 0) {
            st = oari_fail_status();
            break;
        }
        n = &g->nodes[i]; /* (adding a value moves no node, but read it again) */
        g->values[r].producer = i;
        g->values[r].out_index = n->n_out;
        n->op = (oari_op)train;
        n->out[n->n_out++] = r;
    }
    oari_free(dep, dep_n);
    return st;
}

int oar_graph_append_backward(oar_graph *g, int output, int n_wrt, const int *wrt) {
    if (!g || (n_wrt && !wrt) || n_wrt < 0)
        return oari_error(OAR_ERR_INVALID, "graph_backward: graph or wrt is NULL");
    if (output < 0 || output >= g->n_outputs)
        return oari_error(OAR_ERR_INVALID, "graph_backward: output %d out of range [0, %d)", output,
                          g->n_outputs);
    for (int k = 0; k < n_wrt; k++)
        if (wrt[k] < 0 || wrt[k] >= g->n_inputs)
            return oari_error(OAR_ERR_INVALID, "graph_backward: input %d out of range [0, %d)", wrt[k],
                              g->n_inputs);
    int n0 = g->n_nodes, first = g->n_outputs, st = take_train_forms(g, n0, n_wrt, wrt);
    if (st) return st;
    int nv = g->n_values;
    bool *req = oari_calloc((size_t)(nv ? nv : 1), sizeof *req);
    oar_tensor **t = oari_calloc((size_t)(nv ? nv : 1), sizeof *t);
    oar_tensor **gr = oari_calloc((size_t)(nv ? nv : 1), sizeof *gr);
    void *tracer = NULL;
    oar_pool *pool = NULL;
    if (!req || !t || !gr) {
        st = oari_fail_status();
        goto done;
    }
    for (int k = 0; k < n_wrt; k++) req[g->inputs[wrt[k]]] = differentiable(g->values[g->inputs[wrt[k]]].dtype);
    mark_required(g, 0, n0, req);
    int L = g->outputs[output];
    if (!req[L]) {
        st = oari_error(OAR_ERR_INVALID, "graph_backward: output %d (%s) does not depend on the inputs "
                        "given (or is not floating)", output, g->output_names[output]);
        goto done;
    }
    if (!(tracer = oari_trace_attach(g))) {
        st = OAR_ERR_STATE;
        goto done;
    }
    pool = oar_pool_push();
    if ((st = bind_values(g, 0, nv, t))) goto done;
    /* the seed: a constant 1 standing as a traced value, expanded to the output */
    oari_gvalue lval = g->values[L], *lv = &lval; /* a copy: adding values moves g->values */
    oar_tensor *one = oar_scalar_of(1, lv->dtype);
    int sv = one ? oari_trace_value_of(one) : -1;
    oar_tensor *seed = sv >= 0 ? oari_pool_adopt(oari_graph_symbolic(&g->values[sv])) : NULL;
    if (seed) oari_trace_bind(seed, sv);
    if (seed && lv->ndim) seed = oar_expand(seed, lv->ndim, lv->shape);
    if (!seed) {
        st = oari_fail_status();
        goto done;
    }
    gr[L] = seed;
    oari_autocast_suspend(); /* gradient nodes in their forward nodes' dtypes */
    st = oari_graph_backward_nodes(g, n0, req, t, gr, g);
    oari_autocast_resume();
    if (st) goto done;
    for (int k = 0; k < n_wrt && !st; k++) {
        int v = g->inputs[wrt[k]];
        oar_tensor *gw = gr[v] ? gr[v] : oar_mul_scalar(t[v], 0);
        int gv = gw ? oari_trace_value_of(gw) : -1;
        if (gv < 0) st = oari_fail_status();
        else st = add_output(g, gv, "grad:", g->values[v].name);
    }
done:
    oari_trace_detach(tracer);
    for (int v = 0; t && v < nv; v++) oar_tensor_release(t[v]);
    if (pool) oar_pool_pop(pool);
    oari_free(req, (size_t)(nv ? nv : 1) * sizeof *req);
    oari_free(t, (size_t)(nv ? nv : 1) * sizeof *t);
    oari_free(gr, (size_t)(nv ? nv : 1) * sizeof *gr);
    if (!st) st = oar_graph_verify(g);
    return st ? st : first;
}

int oar_graph_append_sgd(oar_graph *g, double lr) {
    if (!g) return oari_error(OAR_ERR_INVALID, "graph_append_sgd: graph is NULL");
    int nv = g->n_values, added = 0, st = 0, n_out0 = g->n_outputs;
    oar_tensor **t = oari_calloc((size_t)(nv ? nv : 1), sizeof *t);
    void *tracer = t ? oari_trace_attach(g) : NULL;
    oar_pool *pool = tracer ? oar_pool_push() : NULL;
    if (!t || !tracer) st = t ? OAR_ERR_STATE : oari_fail_status();
    if (!st) st = bind_values(g, 0, nv, t);
    for (int i = 0; i < g->n_inputs && !st; i++) {
        int x = g->inputs[i];
        const char *name = g->values[x].name;
        for (int j = 0; j < n_out0 && !st; j++) {
            const char *on = g->output_names[j];
            if (strncmp(on, "grad:", 5) || strcmp(on + 5, name)) continue;
            oar_tensor *next = oar_sub(t[x], oar_mul_scalar(t[g->outputs[j]], lr));
            int v = next ? oari_trace_value_of(next) : -1;
            st = v < 0 ? (oari_fail_status()) : add_output(g, v, "next:", name);
            added++;
        }
    }
    oari_trace_detach(tracer);
    for (int v = 0; t && v < nv; v++) oar_tensor_release(t[v]);
    if (pool) oar_pool_pop(pool);
    oari_free(t, (size_t)(nv ? nv : 1) * sizeof *t);
    if (!st) st = oar_graph_verify(g);
    return st ? st : added;
}

/* Adds graph input `prefix` + name with v's dtype and shape (static dims). */
static int add_state_input(oar_graph *g, const char *prefix, const char *name, const oari_gvalue *like) {
    oari_gvalue meta = *like; /* copied: adding a value may move g->values */
    int v = oari_graph_add_value(g, OARI_V_INPUT, meta.dtype, meta.ndim, meta.shape);
    if (v < 0) return -1;
    size_t len = strlen(prefix) + strlen(name) + 1;
    char *s = oari_malloc(len);
    if (!s || oari_graph_add_input(g, v)) {
        oari_free(s, len);
        g->n_values--;
        return -1;
    }
    snprintf(s, len, "%s%s", prefix, name);
    g->values[v].name = s;
    memcpy(g->values[v].sym, meta.sym, sizeof meta.sym);
    return v;
}

/* Moves nodes [from, g->n_nodes) that read only graph inputs, constants
 * and each other to the front (the step count's bias corrections: every
 * parameter's update reads them, and the "schedule" pass can then place
 * each update as soon as its gradient exists). */
static void hoist_input_only(oar_graph *g, int from) {
    int nn = g->n_nodes, k = 0;
    size_t sz = (size_t)(nn ? nn : 1);
    bool *early = oari_calloc(sz, sizeof *early);
    int *order = oari_malloc(sz * sizeof *order);
    for (int i = from; i < nn && early && order; i++) {
        const oari_gnode *n = &g->nodes[i];
        bool ok = true;
        for (int q = 0; q < n->n_in && ok; q++) {
            int v = n->in[q];
            ok = v < 0 || g->values[v].kind != OARI_V_NODE || early[g->values[v].producer];
        }
        if ((early[i] = ok)) order[k++] = i;
    }
    if (early && order) {
        for (int i = 0; i < from; i++) order[k++] = i;
        for (int i = from; i < nn; i++)
            if (!early[i]) order[k++] = i;
        oari_graph_reorder(g, order); /* out of memory: only a worse order */
    }
    oari_free(early, sz * sizeof *early);
    oari_free(order, sz * sizeof *order);
}

int oar_graph_append_adamw(oar_graph *g, double lr, double beta1, double beta2, double eps,
                           double weight_decay) {
    if (!g) return oari_error(OAR_ERR_INVALID, "graph_append_adamw: graph is NULL");
    if (!(lr > 0) || !(beta1 >= 0 && beta1 < 1) || !(beta2 >= 0 && beta2 < 1) || !(eps >= 0) ||
        !(weight_decay >= 0))
        return oari_error(OAR_ERR_INVALID, "graph_append_adamw: invalid lr %g, betas (%g, %g), eps %g or "
                          "weight_decay %g (lr > 0, betas in [0, 1), eps and weight_decay >= 0)",
                          lr, beta1, beta2, eps, weight_decay);
    int n_in0 = g->n_inputs, n_out0 = g->n_outputs, n_nodes0 = g->n_nodes, added = 0, st = 0, np = 0, step;
    /* per parameter with a gradient: its input index, the gradient's value,
     * the m and v inputs' values */
    size_t arr = (size_t)(n_in0 ? n_in0 : 1) * 4 * sizeof(int);
    int *params = oari_malloc(arr);
    if (!params) return oari_fail_status();
    int *grads = params + n_in0, *ms = grads + n_in0, *vs = ms + n_in0;
    for (int i = 0; i < n_in0; i++) {
        const char *name = g->values[g->inputs[i]].name;
        for (int j = 0; j < n_out0; j++)
            if (!strncmp(g->output_names[j], "grad:", 5) && !strcmp(g->output_names[j] + 5, name)) {
                params[np] = i;
                grads[np++] = g->outputs[j];
                break;
            }
    }
    if (!np) {
        oari_free(params, arr);
        return 0;
    }
    oari_gvalue scalar = {.dtype = OAR_F64, .ndim = 0};
    memset(scalar.sym, -1, sizeof scalar.sym);
    for (int k = 0; k < np && !st; k++) {
        const char *name = g->values[g->inputs[params[k]]].name;
        if ((ms[k] = add_state_input(g, "adam_m:", name, &g->values[g->inputs[params[k]]])) < 0 ||
            (vs[k] = add_state_input(g, "adam_v:", name, &g->values[g->inputs[params[k]]])) < 0)
            st = oari_fail_status();
    }
    if (!st && (step = add_state_input(g, "", "adam_step", &scalar)) < 0) st = oari_fail_status();
    if (st) {
        oari_free(params, arr);
        return st;
    }
    int nv = g->n_values;
    oar_tensor **t = oari_calloc((size_t)nv, sizeof *t);
    void *tracer = t ? oari_trace_attach(g) : NULL;
    oar_pool *pool = tracer ? oar_pool_push() : NULL;
    if (!t || !tracer) st = t ? OAR_ERR_STATE : oari_fail_status();
    if (!st) st = bind_values(g, 0, nv, t);
    /* torch.optim.AdamW (oar_adamw_new's formulas): step t = step + 1,
     * bias corrections 1 - beta^t */
    oar_tensor *tn = NULL, *bc1 = NULL, *sbc2 = NULL;
    if (!st) {
        tn = oar_add_scalar(t[step], 1);
        /* beta^t = exp(t log beta); beta = 0 gives log 0 = -inf and exp(-inf) = 0 */
        bc1 = oar_neg(oar_add_scalar(oar_exp(oar_mul_scalar(tn, log(beta1))), -1));
        sbc2 = oar_sqrt(oar_neg(oar_add_scalar(oar_exp(oar_mul_scalar(tn, log(beta2))), -1)));
        if (!tn || !bc1 || !sbc2) st = oari_fail_status();
    }
    for (int k = 0; k < np && !st; k++) {
        const char *name = g->values[g->inputs[params[k]]].name;
        oar_tensor *x = t[g->inputs[params[k]]], *gr = t[grads[k]], *m = t[ms[k]], *v = t[vs[k]];
        if (weight_decay) x = oar_add(x, oar_mul_scalar(x, -lr * weight_decay));
        oar_tensor *mn = oar_add(m, oar_mul_scalar(oar_sub(gr, m), 1 - beta1));
        oar_tensor *vn = oar_add(v, oar_mul_scalar(oar_sub(oar_mul(gr, gr), v), 1 - beta2));
        oar_tensor *den = oar_add_scalar(oar_div(oar_sqrt(vn), sbc2), eps);
        oar_tensor *xn = oar_add(x, oar_div(oar_mul_scalar(oar_div(mn, den), -lr), bc1));
        int vx = xn ? oari_trace_value_of(xn) : -1, vm = mn ? oari_trace_value_of(mn) : -1,
            vv = vn ? oari_trace_value_of(vn) : -1;
        if (vx < 0 || vm < 0 || vv < 0) {
            st = oari_fail_status();
            break;
        }
        if ((st = add_output(g, vx, "next:", name)) || (st = add_output(g, vm, "next:adam_m:", name)) ||
            (st = add_output(g, vv, "next:adam_v:", name)))
            break;
        added += 3;
    }
    if (!st) {
        int vt = oari_trace_value_of(tn);
        st = vt < 0 ? oari_fail_status() : add_output(g, vt, "next:", "adam_step");
        added += !st;
    }
    oari_trace_detach(tracer);
    for (int v = 0; t && v < nv; v++) oar_tensor_release(t[v]);
    if (pool) oar_pool_pop(pool);
    oari_free(t, (size_t)nv * sizeof *t);
    oari_free(params, arr);
    if (!st) hoist_input_only(g, n_nodes0);
    if (!st) st = oar_graph_verify(g);
    return st ? st : added;
}

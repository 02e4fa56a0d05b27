/* The backward engine: from the outputs, find the nodes of the graph,
 * order them by dependency counts, and run each node's gradient rule once
 * all the gradients of its outputs are summed. Shared by oar_backward
 * (accumulates into leaves' .grad) and oar_grad (returns gradients). */
#include "node.h"
#include "../profiler/hooks.h" /* profiler hook */

#include <stdio.h>
#include <string.h>

typedef struct slot {
    struct oari_node *node;
    int deps;       /* edges from nodes in the graph still to run */
    int goff;       /* its outputs' gradients start at grads[goff] */
    bool needed;    /* its rule must run (leads to something wanted) */
    bool capture;   /* an input of oar_grad is one of its outputs */
} slot;

typedef struct engine {
    bool grad_mode;          /* oar_grad: results to `res`, not .grad */
    bool create_graph, retain;
    int n_in;
    oar_tensor *const *inputs;
    oar_tensor **res;        /* [n_in] owned */
    bool *reached;           /* [n_in] */
    oar_tensor *const *seeds; /* the user's grad_outputs (for aliasing checks) */
    int n_seeds;
    slot *slots;
    int n, cap;
    oar_tensor **grads;      /* owned; NULL = zero */
    int ngrads, capgrads;
    int *order, norder;
} engine;

static int add_node(engine *e, struct oari_node *n) {
    if (e->n == e->cap) {
        int cap = e->cap ? e->cap * 2 : 64;
        slot *s = oari_obj_realloc(e->slots, (size_t)e->cap * sizeof *s, (size_t)cap * sizeof *s);
        if (!s) return oari_fail_status();
        e->slots = s;
        e->cap = cap;
    }
    if (e->ngrads + n->n_out > e->capgrads) {
        int cap = e->capgrads ? e->capgrads * 2 : 128;
        while (cap < e->ngrads + n->n_out) cap *= 2;
        oar_tensor **g = oari_obj_realloc(e->grads, (size_t)e->capgrads * sizeof *g, (size_t)cap * sizeof *g);
        if (!g) return oari_fail_status();
        memset(g + e->capgrads, 0, (size_t)(cap - e->capgrads) * sizeof *g);
        e->grads = g;
        e->capgrads = cap;
    }
    slot *s = &e->slots[e->n];
    memset(s, 0, sizeof *s);
    s->node = n;
    s->goff = e->ngrads;
    e->ngrads += n->n_out;
    n->bw_slot = e->n++;
    return 0;
}

static void engine_free(engine *e) {
    for (int i = 0; i < e->n; i++) e->slots[i].node->bw_slot = -1;
    for (int i = 0; i < e->ngrads; i++) oar_tensor_release(e->grads[i]);
    oari_obj_free(e->slots, (size_t)e->cap * sizeof *e->slots);
    oari_obj_free(e->grads, (size_t)e->capgrads * sizeof *e->grads);
    oari_obj_free(e->order, (size_t)e->norder * sizeof *e->order);
}

/* *acc += g (g borrowed; *acc owned). Sums are ops, so they are recorded
 * under create_graph. */
static int accumulate(oar_tensor **acc, oar_tensor *g) {
    if (!*acc) {
        *acc = oar_tensor_retain(g);
        return 0;
    }
    oar_pool *p = oar_pool_push();
    oar_tensor *s = oar_tensor_retain(oar_add(*acc, g));
    oar_pool_pop(p);
    if (!s) return oari_fail_status();
    oar_tensor_release(*acc);
    *acc = s;
    return 0;
}

static int input_index(const engine *e, const oar_tensor *t, int from) {
    for (int i = from; i < e->n_in; i++)
        if (e->inputs[i] == t) return i;
    return -1;
}

oari_leaf_hooks oari_leaf_hook; /* dist branch: see node.h */

static int to_leaf_sum(engine *e, oar_tensor *leaf, oar_tensor *g);

/* The gradient g (borrowed) arrives at a leaf. */
static int to_leaf(engine *e, oar_tensor *leaf, oar_tensor *g) {
    int st = to_leaf_sum(e, leaf, g);
    if (!st && !e->grad_mode && oari_leaf_hook.arrive) oari_leaf_hook.arrive(leaf); /* dist branch */
    return st;
}

static int to_leaf_sum(engine *e, oar_tensor *leaf, oar_tensor *g) {
    if (e->grad_mode) {
        for (int i = input_index(e, leaf, 0); i >= 0; i = input_index(e, leaf, i + 1)) {
            e->reached[i] = true;
            if (g && accumulate(&e->res[i], g)) return oari_fail_status();
        }
        return 0;
    }
    if (!g) return 0;
    if (!leaf->grad && !e->create_graph) {
        /* .grad must not alias a tensor the caller holds, nor be a broadcast view */
        bool alias = !oar_tensor_is_contiguous(g) || oar_tensor_shares_storage(g, leaf);
        for (int i = 0; i < e->n_seeds && !alias; i++) alias = oar_tensor_shares_storage(g, e->seeds[i]);
        if (alias) {
            oar_pool *p = oar_pool_push();
            oar_tensor *c = oar_tensor_retain(oar_clone(g));
            oar_pool_pop(p);
            if (!c) return oari_fail_status();
            leaf->grad = c;
            return 0;
        }
    }
    return accumulate(&leaf->grad, g);
}

static bool wanted_leaf(const engine *e, const oar_tensor *leaf) {
    return !e->grad_mode || input_index(e, leaf, 0) >= 0;
}

static bool edge_wanted(const engine *e, const oari_edge *ed) {
    if (ed->fn) {
        int s = ed->fn->bw_slot;
        return s >= 0 && (e->slots[s].needed || e->slots[s].capture);
    }
    return ed->leaf && wanted_leaf(e, ed->leaf);
}

static bool same_meta(const oar_tensor *t, const oari_meta *m) {
    return t->dtype == m->dtype && t->ndim == m->ndim &&
           !memcmp(t->shape, m->shape, (size_t)m->ndim * sizeof *m->shape);
}

/* Runs one node's rule and sends its input gradients along the edges. */
static int run_node(engine *e, slot *s) {
    struct oari_node *n = s->node;
    const oari_op_def *def = n->custom ? NULL : oari_op_defs[n->op];
    const char *name = oari_node_name(n);
    int64_t prof_t0 = OARI_PROF_BEGIN(); /* profiler: one predictable branch when off */
    if (!n->custom && (!def || !def->grad))
        return oari_error(OAR_ERR_UNSUPPORTED, "autograd: %s has no gradient rule; compute it "
                          "under oar_no_grad_push or on detached inputs", name);
    int n_in = n->n_in, n_out = n->n_out, st = 0;
    oar_tensor *stack_buf[16];
    bool needs_buf[8];
    oar_tensor **buf = stack_buf;
    bool *needs = needs_buf;
    size_t nbuf = (size_t)(2 * n_in + n_out), nbytes = nbuf * sizeof *buf;
    if (nbuf > 16 && !(buf = oari_calloc(nbuf, sizeof *buf))) return oari_fail_status();
    if (n_in > 8 && !(needs = oari_calloc((size_t)n_in, sizeof *needs))) {
        if (buf != stack_buf) oari_free(buf, nbytes);
        return oari_fail_status();
    }
    memset(buf, 0, nbuf * sizeof *buf);
    oar_tensor **in = buf, **out = buf + n_in, **gin = buf + n_in + n_out;
    bool any = false;
    for (int i = 0; i < n_in; i++) {
        needs[i] = edge_wanted(e, &n->edges[i]);
        any = any || needs[i];
    }
    oar_pool *p = oar_pool_push();
    for (int k = 0; k < n_in + n_out && !st && any && !n->custom; k++) { /* a custom node unpacks its own */
        oar_tensor *t = NULL;
        st = oari_saved_unpack(n, k, e->create_graph, &t);
        if (t && !oari_pool_adopt(t)) st = oari_fail_status();
        if (k < n_in) in[k] = t;
        else out[k - n_in] = t;
    }
    if (!st && any && n->custom) {
        st = n->custom->backward(n, e->create_graph, e->grads + s->goff, needs, gin);
        if (st && !oari_error_pending())
            oari_error(st, "autograd: the backward of %s failed", name);
    } else if (!st && any) {
        oari_grad_ctx g = {
            .op = (oari_op)n->op, .attrs = &n->attrs, .n_in = n_in, .n_out = n_out,
            .in = in, .in_meta = n->in_meta, .out = out, .out_meta = n->out_meta,
            .gout = e->grads + s->goff, .needs = needs, .gin = gin,
        };
        st = def->grad(&g);
        if (st && !oari_error_pending())
            oari_error(st, "autograd: the gradient rule of %s failed", name);
    }
    for (int i = 0; i < n_in && !st && any; i++) {
        if (!needs[i]) continue;
        oar_tensor *gi = gin[i];
        if (gi && !same_meta(gi, &n->in_meta[i])) {
            char a[200], b[200];
            st = oari_error(OAR_ERR_INVALID, "autograd: the gradient rule of %s returned a %s %s "
                            "gradient for input %d, which is %s %s (a bug in the rule)", name,
                            oar_dtype_name(gi->dtype), oari_shape_str(a, gi->ndim, gi->shape), i,
                            oar_dtype_name(n->in_meta[i].dtype),
                            oari_shape_str(b, n->in_meta[i].ndim, n->in_meta[i].shape));
            break;
        }
        oari_edge *ed = &n->edges[i];
        if (ed->fn) {
            if (gi) st = accumulate(&e->grads[e->slots[ed->fn->bw_slot].goff + ed->index], gi);
        } else if (ed->leaf) {
            st = to_leaf(e, ed->leaf, gi);
        }
    }
    oar_pool_pop(p);
    if (buf != stack_buf) oari_free(buf, nbytes);
    if (needs != needs_buf) oari_free(needs, (size_t)n_in * sizeof *needs);
    OARI_PROF_END(OAR_PROFILER_BACKWARD, name, prof_t0, 0, NULL); /* profiler */
    return st;
}

/* Discovers the graph from the roots, orders it (Kahn), marks what must
 * run, and runs it. */
static int run_graph(engine *e) {
    int st = 0;
    /* discovery: slots[] doubles as the DFS stack (slots are never removed) */
    for (int k = 0; k < e->n && !st; k++) {
        struct oari_node *n = e->slots[k].node;
        for (int i = 0; i < n->n_in && !st; i++) {
            struct oari_node *f = n->edges[i].fn;
            if (!f && n->edges[i].leaf && !e->grad_mode && oari_leaf_hook.expect)
                oari_leaf_hook.expect(n->edges[i].leaf); /* dist branch */
            if (!f) continue;
            if (f->bw_slot < 0 && (st = add_node(e, f))) break;
            e->slots[f->bw_slot].deps++;
        }
    }
    if (st) return st;
    e->norder = e->n ? e->n : 1;
    if (!(e->order = oari_obj_alloc((size_t)e->norder * sizeof *e->order))) return oari_fail_status();
    int head = 0, tail = 0;
    for (int k = 0; k < e->n; k++)
        if (e->slots[k].deps == 0) e->order[tail++] = k;
    while (head < tail) {
        struct oari_node *n = e->slots[e->order[head++]].node;
        for (int i = 0; i < n->n_in; i++) {
            struct oari_node *f = n->edges[i].fn;
            if (f && --e->slots[f->bw_slot].deps == 0) e->order[tail++] = f->bw_slot;
        }
    }
    if (tail != e->n) return oari_error(OAR_ERR_STATE, "autograd: the graph has a cycle");
    /* what must run: a node whose edges lead to a wanted leaf or node */
    if (e->grad_mode) {
        for (int i = 0; i < e->n_in; i++) {
            struct oari_node *f = oari_grad_fn(e->inputs[i]);
            if (f && f->bw_slot >= 0) e->slots[f->bw_slot].capture = true;
        }
    }
    for (int k = e->n - 1; k >= 0; k--) {
        slot *s = &e->slots[e->order[k]];
        for (int i = 0; i < s->node->n_in && !s->needed; i++)
            s->needed = edge_wanted(e, &s->node->edges[i]);
    }
    for (int k = 0; k < e->n && !st; k++) {
        slot *s = &e->slots[e->order[k]];
        struct oari_node *n = s->node;
        oar_tensor **go = e->grads + s->goff;
        if (s->capture) {
            for (int i = 0; i < e->n_in && !st; i++) {
                if (oari_grad_fn(e->inputs[i]) != n) continue;
                e->reached[i] = true;
                oar_tensor *g = go[e->inputs[i]->output_index];
                if (g) st = accumulate(&e->res[i], g);
            }
        }
        bool any = false;
        for (int j = 0; j < n->n_out; j++) any = any || go[j];
        if (!st && s->needed && any) {
            st = run_node(e, s);
            if (!e->retain) oari_node_release_saved(n);
        } else if (!st && s->needed) {
            /* zero gradient: the leaves it reaches count as used */
            for (int i = 0; i < n->n_in; i++)
                if (n->edges[i].leaf) st = st ? st : to_leaf(e, n->edges[i].leaf, NULL);
        }
        for (int j = 0; j < n->n_out; j++) {
            oar_tensor_release(go[j]);
            go[j] = NULL;
        }
    }
    return st;
}

static int engine_run(int n_out, oar_tensor *const *outputs, oar_tensor *const *grad_outputs,
                      int n_in, oar_tensor *const *inputs, unsigned flags, oar_tensor **grads,
                      bool grad_mode) {
    const char *api = grad_mode ? "oar_grad" : "oar_backward";
    if (grads)
        for (int i = 0; i < n_in; i++) grads[i] = NULL;
    if (n_out < 1 || !outputs)
        return oari_error(OAR_ERR_INVALID, "%s: no outputs given", api);
    for (int k = 0; k < n_out; k++) {
        if (outputs[k]) continue;
        if (!oari_error_pending()) oari_error(OAR_ERR_INVALID, "%s: output %d is NULL", api, k);
        return OAR_ERR_INVALID;
    }
    if (grad_mode) {
        if (n_in < 1 || !inputs || !grads)
            return oari_error(OAR_ERR_INVALID, "oar_grad: no inputs given");
        for (int i = 0; i < n_in; i++) {
            if (!inputs[i]) {
                if (!oari_error_pending()) oari_error(OAR_ERR_INVALID, "oar_grad: input %d is NULL", i);
                return OAR_ERR_INVALID;
            }
            if (!inputs[i]->requires_grad)
                return oari_error(OAR_ERR_INVALID, "oar_grad: input %d does not require grad; call "
                                  "oar_tensor_set_requires_grad on it before computing the outputs", i);
        }
    }
    engine e = {
        .grad_mode = grad_mode, .create_graph = flags & OAR_GRAD_CREATE_GRAPH,
        .retain = flags & (OAR_GRAD_RETAIN_GRAPH | OAR_GRAD_CREATE_GRAPH),
        .n_in = grad_mode ? n_in : 0, .inputs = inputs,
        .seeds = grad_outputs, .n_seeds = grad_outputs ? n_out : 0,
    };
    int st = 0;
    if (grad_mode) {
        e.res = oari_obj_calloc((size_t)n_in * sizeof *e.res);
        e.reached = oari_obj_calloc((size_t)n_in * sizeof *e.reached);
        if (!e.res || !e.reached) st = oari_fail_status();
    }
    int old_depth = oari_grad_mode_set_depth(e.create_graph ? 0 : 1);
    oari_autocast_suspend(); /* gradient ops run in their forward ops' dtypes */
    oar_pool *p = oar_pool_push();
    if (!p) st = oari_fail_status();
    /* seed the roots */
    for (int k = 0; k < n_out && !st; k++) {
        oar_tensor *o = outputs[k];
        oar_tensor *go = grad_outputs ? grad_outputs[k] : NULL;
        char a[200], b[200];
        if (!o->requires_grad) {
            st = oari_error(OAR_ERR_INVALID, "%s: output %d does not require grad and has no grad_fn "
                            "(did you set requires_grad on an input, and compute it outside no_grad?)",
                            api, k);
        } else if (!go) {
            if (o->numel != 1 || oar_dtype_is_complex(o->dtype))
                st = oari_error(OAR_ERR_INVALID, "%s: grad_output can be created implicitly only for "
                                "a one-element real output; output %d is %s %s: pass grad_output", api,
                                k, oar_dtype_name(o->dtype), oari_shape_str(a, o->ndim, o->shape));
            else if (!(go = oar_ones_like(o)))
                st = oari_fail_status();
        } else if (go->ndim != o->ndim || memcmp(go->shape, o->shape, (size_t)o->ndim * sizeof *o->shape)) {
            st = oari_error(OAR_ERR_INVALID, "%s: grad_output %d has shape %s but output %d has shape %s",
                            api, k, oari_shape_str(a, go->ndim, go->shape), k,
                            oari_shape_str(b, o->ndim, o->shape));
        } else if (go->dtype != o->dtype) {
            if (oar_dtype_is_complex(go->dtype) && !oar_dtype_is_complex(o->dtype))
                st = oari_error(OAR_ERR_INVALID, "%s: grad_output %d is complex (%s) but output %d "
                                "is real (%s)", api, k, oar_dtype_name(go->dtype), k,
                                oar_dtype_name(o->dtype));
            else if (!(go = oar_cast(go, o->dtype)))
                st = oari_fail_status();
        }
        if (st) break;
        if (oari_grad_fn(o)) {
            if (oari_grad_fn(o)->bw_slot < 0 && (st = add_node(&e, oari_grad_fn(o)))) break;
            st = accumulate(&e.grads[e.slots[oari_grad_fn(o)->bw_slot].goff + o->output_index], go);
        } else {
            st = to_leaf(&e, o, go);
        }
    }
    if (!st) st = run_graph(&e);
    for (int i = 0; i < e.n_in && !st && e.res; i++) {
        if (e.res[i] || !e.reached[i]) {
            if (!e.reached[i] && !(flags & OAR_GRAD_ALLOW_UNUSED))
                st = oari_error(OAR_ERR_INVALID, "oar_grad: input %d was not used to compute the "
                                "outputs (pass allow_unused to get NULL for it)", i);
            continue;
        }
        if (!(e.res[i] = oar_tensor_retain(oar_zeros_like(inputs[i])))) st = oari_fail_status();
    }
    engine_free(&e);
    oar_pool_pop(p);
    oari_autocast_resume();
    oari_grad_mode_set_depth(old_depth);
    for (int i = 0; i < e.n_in && e.res; i++) {
        if (!st) {
            if (e.res[i] && !(grads[i] = oari_pool_adopt(e.res[i]))) st = oari_fail_status();
        } else {
            oar_tensor_release(e.res[i]);
        }
        e.res[i] = NULL;
    }
    if (st)
        for (int i = 0; i < e.n_in; i++) {
            grads[i] = NULL; /* pool-owned ones are freed with the pool */
        }
    if (e.res) oari_obj_free(e.res, (size_t)n_in * sizeof *e.res);
    if (e.reached) oari_obj_free(e.reached, (size_t)n_in * sizeof *e.reached);
    return st;
}

int oar_backward_ex(int n_out, oar_tensor *const *outputs, oar_tensor *const *grad_outputs,
                    unsigned flags) {
    return engine_run(n_out, outputs, grad_outputs, 0, NULL, flags, NULL, false);
}

int oar_backward(oar_tensor *loss, oar_tensor *grad_output) {
    return engine_run(1, &loss, grad_output ? &grad_output : NULL, 0, NULL, 0, NULL, false);
}

int oar_grad_ex(int n_out, oar_tensor *const *outputs, oar_tensor *const *grad_outputs, int n_in,
                oar_tensor *const *inputs, unsigned flags, oar_tensor **grads) {
    return engine_run(n_out, outputs, grad_outputs, n_in, inputs, flags, grads, true);
}

int oar_grad(int n_out, oar_tensor *const *outputs, oar_tensor *const *grad_outputs, int n_in,
             oar_tensor *const *inputs, bool create_graph, bool allow_unused, oar_tensor **grads) {
    unsigned f = (create_graph ? OAR_GRAD_CREATE_GRAPH : 0u) | (allow_unused ? OAR_GRAD_ALLOW_UNUSED : 0u);
    return engine_run(n_out, outputs, grad_outputs, n_in, inputs, f, grads, true);
}

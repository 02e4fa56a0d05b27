/* The tracer: runs a user function on symbolic tensors. While this thread
 * traces, oari_dispatch calls the trace hook (installed here at start-up)
 * after an op's shape rule; a call with a traced input becomes a node
 * (invariant 3 of docs/architecture.md), a call on concrete tensors only
 * runs eagerly and its result becomes a constant when a node reads it. */
#include "ir.h"

#include <math.h>
#include <string.h>

#define OARI_TRACE_PASS 1
/* Dynamic dims are traced at these sizes (primes unlikely as real sizes),
 * so attributes and shapes that carry them can be found again. */
static const int64_t trace_sizes[OARI_MAX_SYMS] = {1031, 1033, 1039, 1049, 1051, 1061, 1063, 1069};

typedef struct oari_tracer {
    oar_graph *g;
    const oar_trace_options *opt;
    const oar_state_entry *state;
    int n_state;
    oar_tensor **consts;   /* concrete tensors already in the graph, by value id */
    int n_consts, cap_consts;
    int *const_ids;
    /* nested tracing (a cond branch, a loop body): the enclosing tracer, and
     * the values captured from it as inputs of this one's sub-graph */
    struct oari_tracer *parent;
    int *cap_outer, *cap_inner, n_caps, cap_caps;
    intptr_t serial;       /* tags the tensors this tracer binds */
} oari_tracer;


/* A tensor's trace_value holds (serial << SHIFT) | (value id + 1), so the
 * value ids of a nested trace never collide with its parent's. */
#define SERIAL_SHIFT (sizeof(intptr_t) >= 8 ? 32 : 24)
static _Thread_local intptr_t last_serial;
static intptr_t new_serial(void) {
    last_serial = (last_serial + 1) & (sizeof(intptr_t) >= 8 ? 0x7fffffff : 0x7f);
    if (!last_serial) last_serial = 1;
    return last_serial;
}

static int traced_id(const oari_tracer *tr, const oar_tensor *t) {
    if (!t || !t->ext[OARI_EXT_TRACE]) return -1;
    intptr_t x = (intptr_t)t->ext[OARI_EXT_TRACE];
    if (x >> SERIAL_SHIFT != tr->serial) return -1;
    int v = (int)((x & (((intptr_t)1 << SERIAL_SHIFT) - 1)) - 1);
    return v >= 0 && v < tr->g->n_values ? v : -1;
}

static void set_traced(const oari_tracer *tr, oar_tensor *t, int v) {
    t->ext[OARI_EXT_TRACE] = (void *)((tr->serial << SERIAL_SHIFT) | (intptr_t)(v + 1));
}

/* Whether t is a value of tr's trace or of one enclosing it. */
static bool traced_here_or_above(const oari_tracer *tr, const oar_tensor *t) {
    for (; tr; tr = tr->parent)
        if (traced_id(tr, t) >= 0) return true;
    return false;
}

static int const_id(oari_tracer *tr, oar_tensor *t, const char *op);

/* The value id of t in tr's graph: its own value, a capture of a value of
 * an enclosing trace (a new sub-graph input, made once per value), or a
 * constant (of the top graph, captured down). -1 with an error. */
static int resolve(oari_tracer *tr, oar_tensor *t, const char *op) {
    int v = traced_id(tr, t);
    if (v >= 0) return v;
    if (!tr->parent) return const_id(tr, t, op);
    if (!t->storage && !traced_here_or_above(tr->parent, t))
        return oari_error(OAR_ERR_STATE, "trace: %s reads a symbolic tensor of another trace (a value "
                          "of another branch or an earlier loop body?); symbolic tensors must not escape "
                          "the function that made them", op), -1;
    int pv = resolve(tr->parent, t, op);
    if (pv < 0) return -1;
    for (int k = 0; k < tr->n_caps; k++)
        if (tr->cap_outer[k] == pv) return tr->cap_inner[k];
    if (tr->n_caps == tr->cap_caps) {
        int nc = tr->cap_caps ? tr->cap_caps * 2 : 8;
        int *a = oari_realloc(tr->cap_outer, (size_t)tr->cap_caps * sizeof *a, (size_t)nc * sizeof *a);
        if (!a) return -1;
        tr->cap_outer = a;
        int *b = oari_realloc(tr->cap_inner, (size_t)tr->cap_caps * sizeof *b, (size_t)nc * sizeof *b);
        if (!b) return -1;
        tr->cap_inner = b;
        tr->cap_caps = nc;
    }
    const oari_gvalue *ov = &tr->parent->g->values[pv];
    oari_gvalue meta = *ov; /* a copy: adding values may move the array */
    oar_graph *g = tr->g;
    int iv = oari_graph_add_value(g, OARI_V_INPUT, meta.dtype, meta.ndim, meta.shape);
    if (iv < 0) return -1;
    memcpy(g->values[iv].sym, meta.sym, sizeof meta.sym);
    memcpy(g->values[iv].smul, meta.smul, sizeof meta.smul);
    char buf[32];
    snprintf(buf, sizeof buf, "cap%d", tr->n_caps);
    if (!(g->values[iv].name = oari_strdup(buf)) || oari_graph_add_input(g, iv)) return -1;
    tr->cap_outer[tr->n_caps] = pv;
    tr->cap_inner[tr->n_caps++] = iv;
    return iv;
}

/* True if t is contiguous with every element equal (oar_full, zeros_like). */
static bool is_splat(const oar_tensor *t) {
    const char *p = oar_tensor_data(t);
    size_t es = oar_dtype_size(t->dtype);
    if (!p || !oar_tensor_is_contiguous(t) || t->numel < 1) return false;
    for (int64_t i = 1; i < t->numel; i++)
        if (memcmp(p, p + (size_t)i * es, es)) return false;
    return true;
}

static int remember(oari_tracer *tr, oar_tensor *t, int v) {
    if (tr->n_consts == tr->cap_consts) {
        int nc = tr->cap_consts ? tr->cap_consts * 2 : 32;
        oar_tensor **a = oari_realloc(tr->consts, (size_t)tr->cap_consts * sizeof *a, (size_t)nc * sizeof *a);
        if (!a) return -1;
        tr->consts = a;
        int *b = oari_realloc(tr->const_ids, (size_t)tr->cap_consts * sizeof *b, (size_t)nc * sizeof *b);
        if (!b) return -1;
        tr->const_ids = b;
        tr->cap_consts = nc;
    }
    tr->consts[tr->n_consts] = t;
    tr->const_ids[tr->n_consts++] = v;
    return v;
}

/* A splat constant whose shape follows a dynamic dim (dropout's oar_full
 * of the input's shape) becomes expand(scalar, shape) with symbolic sizes. */
static int splat_id(oari_tracer *tr, oar_tensor *t) {
    oar_graph *g = tr->g;
    oar_tensor *s = oari_tensor_empty(NULL, t->dtype, 0, NULL);
    if (!s) return -1;
    memcpy(oar_tensor_data(s), oar_tensor_data(t), oar_dtype_size(t->dtype));
    int cv = oari_graph_add_const(g, s, NULL);
    oar_tensor_release(s);
    if (cv < 0) return -1;
    oari_attrs a = oari_attrs_ints(t->ndim, t->shape);
    oari_meta m = {.dtype = t->dtype, .ndim = t->ndim};
    memcpy(m.shape, t->shape, (size_t)t->ndim * sizeof *t->shape);
    int ni = oari_graph_add_node(g, OARI_OP_expand, &a, 1, &cv, 1, &m);
    if (ni < 0) return -1;
    oari_graph_mark_attr_syms(g, &g->nodes[ni]);
    return remember(tr, t, g->nodes[ni].out[0]);
}

/* True if a 0-d constant's value looks computed from a dynamic dim's
 * trace size S (k*S or 1/(k*S): a mean's divisor), which would be baked in. */
static bool derived_from(const oar_graph *g, const oar_tensor *t, int *sym) {
    if (t->ndim || !oar_dtype_is_float(t->dtype) || !oar_tensor_data(t)) return false;
    double x = fabs(oari_load_f64(oar_tensor_data(t), t->dtype));
    for (int s = 0; s < g->n_syms; s++) {
        double S = (double)g->syms[s].trace_size;
        double r = x >= S ? x / S : x > 0 && x <= 1 / S ? 1 / x / S : 0;
        if (r >= 1 && fabs(r - round(r)) < 1e-5 * r) {
            *sym = s;
            return true;
        }
    }
    return false;
}

/* The value id of a concrete tensor read by a node: one constant each. */
static int const_id(oari_tracer *tr, oar_tensor *t, const char *op) {
    for (int k = 0; k < tr->n_consts; k++)
        if (tr->consts[k] == t) return tr->const_ids[k];
    if (!t->storage)
        return oari_error(OAR_ERR_STATE, "trace: %s reads a symbolic tensor of another trace; "
                          "symbolic tensors must not escape the traced function", op), -1;
    oar_graph *g = tr->g;
    for (int d = 0; d < t->ndim; d++) {
        int s = oari_graph_sym_of(g, t->shape[d], NULL);
        if (s >= 0 && is_splat(t)) return splat_id(tr, t);
        if (s >= 0) {
            char sh[200];
            return oari_error(OAR_ERR_INVALID, "trace: %s reads a constant of shape %s whose dim "
                              "%d follows the dynamic dim %s; a tensor made from a traced shape "
                              "(zeros_like, full) cannot follow it; build it with ops on the "
                              "traced tensor or trace with a fixed size", op,
                              oari_shape_str(sh, t->ndim, t->shape), d, g->syms[s].name), -1;
        }
    }
    int ds;
    if (derived_from(g, t, &ds))
        return oari_error(OAR_ERR_INVALID, "trace: %s reads the constant %g, which looks computed "
                          "from the dynamic dim %s (a mean over it?); such sizes are not symbolic: "
                          "trace with a fixed size, or use a sum", op,
                          oari_load_f64(oar_tensor_data(t), t->dtype), g->syms[ds].name), -1;
    const char *name = NULL;
    for (int s = 0; s < tr->n_state && !name; s++)
        if (tr->state[s].tensor == t) name = tr->state[s].name;
    int v = oari_graph_add_const(g, t, name);
    return v < 0 ? -1 : remember(tr, t, v);
}

/* core's message hook (oari_size_namer): while this thread traces, a size
 * that stands for a dynamic dim (a multiple of a symbol's trace size, the
 * rule that marks the graph's dims) reads as the dim's name, "N" or "2*N",
 * in the shapes ops print; other sizes print as numbers. */
static bool trace_size_name(int64_t size, char *buf, size_t cap) {
    const oari_tracer *tr = oari_trace_current;
    int32_t mul = 1;
    int s = tr ? oari_graph_sym_of(tr->g, size, &mul) : -1;
    if (s < 0) return false;
    if (mul != 1) snprintf(buf, cap, "%d*%s", (int)mul, tr->g->syms[s].name);
    else snprintf(buf, cap, "%s", tr->g->syms[s].name);
    return true;
}

static bool trace_size_is_dynamic(int64_t size) {
    const oari_tracer *tr = oari_trace_current;
    return tr && oari_graph_sym_of(tr->g, size, NULL) >= 0;
}

static int trace_dispatch(oari_op op, oari_infer *c, oar_tensor **out) {
    oari_tracer *tr = oari_trace_current;
    const oari_op_def *def = oari_op_defs[op];
    bool any = false;
    for (int i = 0; i < c->n_in; i++) any = any || traced_here_or_above(tr, c->in[i]);
    /* a view of a module's tensor (a linear weight's transpose) stays a node,
     * so the graph keeps the named weight rather than a copy of its view */
    for (int s = 0; s < tr->n_state && !any && (def->flags & OARI_F_VIEW); s++)
        any = tr->state[s].tensor == c->in[0];
    /* random draws stay nodes, so the graph draws again on each run */
    if ((def->flags & OARI_F_RANDOM) && !(def->flags & OARI_F_INPLACE)) any = true;
    if (!any) return OARI_TRACE_PASS;
    /* a move names devices of this process, and the executor plans views
     * once: move the model and the inputs before tracing */
    if (op == OARI_OP_to_device)
        return oari_error(OAR_ERR_UNSUPPORTED, "trace: oar_tensor_to (a move between devices) cannot "
                          "be traced; move the model and the inputs before tracing");
    if ((def->flags & OARI_F_INPLACE) && traced_id(tr, c->in[0]) < 0 && traced_here_or_above(tr, c->in[0]))
        return oari_error(OAR_ERR_STATE, "trace: %s writes in place into a value from outside the "
                          "branch or loop body being traced; write into a copy made inside it", def->name);
    if ((def->flags & OARI_F_INPLACE) && traced_id(tr, c->in[0]) < 0)
        return oari_error(OAR_ERR_STATE, "trace: %s writes traced values into a concrete tensor "
                          "in place (a running statistic, an optimizer update); trace in eval "
                          "mode, or pass the tensor as a graph input", def->name);
    /* casts the shape rule asked for become nodes (or eager casts of constants) */
    oar_tensor *cin[OARI_MAX_IN];
    int st = 0;
    for (int i = 0; i < c->n_in; i++) cin[i] = NULL;
    for (int i = 0; i < c->n_in && !st; i++) {
        if (!c->in[i] || c->in[i]->dtype == c->in_dtype[i]) continue;
        oari_attrs ca = {.ni = 1, .i = {c->in_dtype[i]}};
        st = oari_dispatch(OARI_OP_cast, 1, &c->in[i], &ca, &cin[i]);
    }
    int in_ids[OARI_MAX_IN];
    oari_gnode *node = NULL;
    int ni = -1;
    for (int i = 0; i < c->n_in && !st; i++) {
        oar_tensor *t = cin[i] ? cin[i] : c->in[i];
        if (!t) in_ids[i] = -1;
        else if ((in_ids[i] = resolve(tr, t, def->name)) < 0)
            st = oari_error_pending() ? OAR_ERR_INVALID : oari_nomem("trace");
    }
    if (!st && (ni = oari_graph_add_node(tr->g, op, c->attrs, c->n_in, in_ids, def->n_out, c->out)) < 0)
        st = oari_fail_status();
    if (!st) {
        node = &tr->g->nodes[ni];
        node->segment = oari_recompute_segment();
        oari_graph_mark_attr_syms(tr->g, node);
        for (int j = 0; j < def->n_out && !st; j++) {
            if (def->flags & OARI_F_INPLACE) out[j] = oar_tensor_retain(c->in[0]);
            else if (def->flags & OARI_F_VIEW) out[j] = def->view(cin[0] ? cin[0] : c->in[0], c->attrs);
            else out[j] = oari_tensor_make(NULL, c->out[j].dtype, c->out[j].ndim, c->out[j].shape, NULL, 0);
            if (!out[j]) st = oari_fail_status();
            else set_traced(tr, out[j], node->out[j]);
        }
    }
    for (int i = 0; i < c->n_in; i++) oar_tensor_release(cin[i]);
    if (st) {
        for (int j = 0; j < def->n_out; j++) {
            oar_tensor_release(out[j]);
            out[j] = NULL;
        }
    }
    return st;
}

static void free_tracer(oari_tracer *tr) {
    oari_free(tr->consts, (size_t)tr->cap_consts * sizeof *tr->consts);
    oari_free(tr->const_ids, (size_t)tr->cap_consts * sizeof *tr->const_ids);
    oari_free(tr->cap_outer, (size_t)tr->cap_caps * sizeof *tr->cap_outer);
    oari_free(tr->cap_inner, (size_t)tr->cap_caps * sizeof *tr->cap_inner);
}

static int add_sym(oar_graph *g, const char *name) {
    for (int s = 0; s < g->n_syms; s++)
        if (name && !strcmp(g->syms[s].name, name)) return s;
    if (g->n_syms == OARI_MAX_SYMS)
        return oari_error(OAR_ERR_INVALID, "trace: more than %d dynamic dims", OARI_MAX_SYMS);
    char buf[16];
    snprintf(buf, sizeof buf, "s%d", g->n_syms);
    if (!(g->syms[g->n_syms].name = oari_strdup(name ? name : buf))) return oari_fail_status();
    g->syms[g->n_syms].trace_size = trace_sizes[g->n_syms];
    return g->n_syms++;
}

oar_graph *oar_trace(oar_trace_fn fn, void *ctx, int n_inputs, const oar_graph_input_spec *specs,
                     int n_outputs, const oar_trace_options *opt) {
    static const oar_trace_options no_opt;
    if (!fn || n_inputs < 0 || (n_inputs && !specs) || n_outputs < 1 || n_outputs > 64)
        return oari_error(OAR_ERR_INVALID, "trace: need a function, input specs and 1 to 64 "
                          "outputs (got %d inputs, %d outputs)", n_inputs, n_outputs), NULL;
    if (oari_trace_current)
        return oari_error(OAR_ERR_STATE, "trace: this thread is already tracing"), NULL;
    if (!opt) opt = &no_opt;
    if (opt->params_as_inputs && !opt->module)
        return oari_error(OAR_ERR_INVALID, "trace: params_as_inputs needs the module"), NULL;
    oari_tracer tr = {.opt = opt, .serial = new_serial()};
    oar_graph *g = tr.g = oari_graph_new();
    if (!g) return NULL;
    if (opt->module && (tr.n_state = oar_module_state(opt->module, &tr.state)) < 0) goto fail;

    oar_tensor *sym_in[64] = {0};
    oar_tensor **in = n_inputs <= 64 ? sym_in : oari_calloc((size_t)n_inputs, sizeof *in);
    oar_tensor *outs[64] = {0};
    int n_params = 0, st = 0;
    oar_pool *pool = NULL;
    if (!in) goto fail;
    for (int i = 0; i < n_inputs && !st; i++) {
        const oar_graph_input_spec *sp = &specs[i];
        int64_t shape[OAR_MAX_DIMS];
        if (sp->ndim < 0 || sp->ndim > OAR_MAX_DIMS || (unsigned)sp->dtype >= OAR_DTYPE_COUNT) {
            st = oari_error(OAR_ERR_INVALID, "trace: input %d has rank %d or dtype %d", i, sp->ndim,
                            (int)sp->dtype);
            break;
        }
        for (int d = 0; d < sp->ndim && !st; d++) {
            if (sp->shape[d] >= 0) {
                shape[d] = sp->shape[d];
                if (oari_graph_sym_of(g, shape[d], NULL) >= 0)
                    st = oari_error(OAR_ERR_INVALID, "trace: input %d dim %d is %lld, a multiple of "
                                    "a size the tracer keeps for dynamic dims", i, d, (long long)shape[d]);
                continue;
            }
            if (sp->shape[d] != -1) {
                st = oari_error(OAR_ERR_INVALID, "trace: input %d dim %d is %lld (sizes are >= 0, or -1 "
                                "for a dynamic dim)", i, d, (long long)sp->shape[d]);
                break;
            }
            int s = add_sym(g, sp->dim_names[d]);
            if (s < 0) st = s;
            else shape[d] = g->syms[s].trace_size;
        }
        if (st) break;
        int v = oari_graph_add_value(g, OARI_V_INPUT, sp->dtype, sp->ndim, shape);
        char buf[32];
        snprintf(buf, sizeof buf, "input%d", i);
        if (v < 0 || !(g->values[v].name = oari_strdup(sp->name ? sp->name : buf)) || oari_graph_add_input(g, v) ||
            !(in[i] = oari_tensor_make(NULL, sp->dtype, sp->ndim, shape, NULL, 0))) {
            st = oari_fail_status();
            break;
        }
        set_traced(&tr, in[i], v);
    }
    /* parameters as graph inputs: the module's own tensors become traced */
    for (int s = 0; s < tr.n_state && opt->params_as_inputs && !st; s++) {
        if (!tr.state[s].is_parameter) continue;
        oar_tensor *t = tr.state[s].tensor;
        int v = oari_graph_add_value(g, OARI_V_INPUT, t->dtype, t->ndim, t->shape);
        if (v < 0 || !(g->values[v].name = oari_strdup(tr.state[s].name)) || oari_graph_add_input(g, v)) {
            st = oari_fail_status();
            break;
        }
        for (int d = 0; d < OAR_MAX_DIMS; d++) g->values[v].sym[d] = -1;
        set_traced(&tr, t, v);
        n_params++;
    }
    if (!st) {
        pool = oar_pool_push();
        oari_no_grad_push();
        oari_trace_current = &tr;
        st = fn(ctx, in, outs);
        oari_trace_current = NULL;
        oari_no_grad_pop();
        if (st && !oari_error_pending()) oari_error(st, "trace: the traced function failed");
    }
    if (!st) {
        g->outputs = oari_calloc((size_t)n_outputs, sizeof *g->outputs);
        g->output_names = oari_calloc((size_t)n_outputs, sizeof *g->output_names);
        if (!g->outputs || !g->output_names) {
            oari_free(g->outputs, (size_t)n_outputs * sizeof *g->outputs);
            oari_free(g->output_names, (size_t)n_outputs * sizeof *g->output_names);
            g->outputs = NULL;
            g->output_names = NULL;
            st = oari_fail_status();
        } else {
            g->n_outputs = n_outputs;
        }
    }
    for (int j = 0; j < n_outputs && !st; j++) {
        if (!outs[j]) {
            st = oari_error(OAR_ERR_INVALID, "trace: output %d is NULL", j);
            break;
        }
        int v = traced_id(&tr, outs[j]);
        if (v < 0 && (v = const_id(&tr, outs[j], "output")) < 0) st = OAR_ERR_INVALID;
        char buf[32];
        snprintf(buf, sizeof buf, "output%d", j);
        g->outputs[j] = v < 0 ? 0 : v;
        const char *nm = opt->output_names && opt->output_names[j] ? opt->output_names[j] : buf;
        if (!(g->output_names[j] = oari_strdup(nm))) st = oari_fail_status();
    }
    if (pool) oar_pool_pop(pool);
    for (int s = 0; s < tr.n_state && opt->params_as_inputs; s++) tr.state[s].tensor->ext[OARI_EXT_TRACE] = NULL;
    for (int i = 0; i < n_inputs; i++) oar_tensor_release(in[i]);
    if (in != sym_in) oari_free(in, (size_t)n_inputs * sizeof *in);
    free_tracer(&tr);
    if (!st && (st = oar_graph_verify(g)) == 0) return g;
    oar_graph_free(g);
    return NULL;
fail:
    free_tracer(&tr);
    oar_graph_free(g);
    return NULL;
}

/* ---- tracing onto an existing graph (backward.c) ------------------------------ */

void *oari_trace_attach(oar_graph *g) {
    if (oari_trace_current)
        return oari_error(OAR_ERR_STATE, "trace: this thread is already tracing"), NULL;
    oari_tracer *tr = oari_calloc(1, sizeof *tr);
    if (!tr) return NULL;
    tr->g = g;
    tr->serial = new_serial();
    for (int v = 0; v < g->n_values; v++)
        if (g->values[v].kind == OARI_V_CONST && remember(tr, g->values[v].constant, v) < 0) {
            oari_trace_detach(tr);
            return NULL;
        }
    oari_no_grad_push();
    oari_trace_current = tr;
    return tr;
}

void oari_trace_detach(void *p) {
    oari_tracer *tr = p;
    if (!tr) return;
    if (oari_trace_current == tr) {
        oari_trace_current = NULL;
        oari_no_grad_pop();
    }
    free_tracer(tr);
    oari_free(tr, sizeof *tr);
}

void oari_trace_bind(oar_tensor *t, int v) {
    if (oari_trace_current) set_traced(oari_trace_current, t, v);
}

int oari_trace_value_of(oar_tensor *t) {
    oari_tracer *tr = oari_trace_current;
    if (!tr || !t) return -1;
    return resolve(tr, t, "trace");
}

/* ---- nested tracing (control.c) ------------------------------------------------ */

oar_graph *oari_trace_graph(void) {
    oari_tracer *tr = oari_trace_current;
    return tr ? tr->g : NULL;
}

bool oari_trace_is_traced(const oar_tensor *t) {
    return t && oari_trace_current && traced_here_or_above(oari_trace_current, t);
}

void *oari_trace_push(oar_graph *sub) {
    oari_tracer *parent = oari_trace_current;
    if (!parent) return oari_error(OAR_ERR_STATE, "trace: no trace to nest into"), NULL;
    oari_tracer *tr = oari_calloc(1, sizeof *tr);
    if (!tr) return NULL;
    tr->g = sub;
    tr->opt = parent->opt;
    tr->state = parent->state;
    tr->n_state = parent->n_state;
    tr->parent = parent;
    tr->serial = new_serial();
    oari_trace_current = tr;
    return tr;
}

int oari_trace_captures(void *p, const int **outer, const int **inner) {
    oari_tracer *tr = p;
    *outer = tr->cap_outer;
    *inner = tr->cap_inner;
    return tr->n_caps;
}

void oari_trace_pop(void *p) {
    oari_tracer *tr = p;
    if (!tr) return;
    if (oari_trace_current == tr) oari_trace_current = tr->parent;
    free_tracer(tr);
    oari_free(tr, sizeof *tr);
}

static int module_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    out[0] = oar_module_forward(ctx, in[0]);
    return out[0] ? 0 : OAR_ERR_INVALID;
}

oar_graph *oar_trace_module(oar_module *m, const oar_graph_input_spec *spec) {
    if (!m || !spec) return oari_error(OAR_ERR_INVALID, "trace_module: module or spec is NULL"), NULL;
    static const char *const names[] = {"y"};
    oar_trace_options opt = {.module = m, .output_names = names};
    return oar_trace(module_fn, m, 1, spec, 1, &opt);
}

void oari_graph_install(void) {
    oari_hooks.trace = trace_dispatch;
    oari_hooks.trace_size_is_dynamic = trace_size_is_dynamic;
    oari_size_namer = trace_size_name;
}

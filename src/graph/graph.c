/* The graph IR: building, editing, compacting, printing and verifying an
 * SSA graph of op nodes (types in ir.h). */
#include "ir.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

oar_graph *oari_graph_new(void) { return oari_calloc(1, sizeof(oar_graph)); }

/* Control nodes: opaque, never folded, merged or fused (RANDOM: their
 * sub-graphs may draw), no shape, view or gradient rule. */
const oari_op_def oari_ctrl_defs[2] = {
    {.name = "cond", .n_in = -1, .n_out = -1, .fusion = OARI_FUSE_OPAQUE, .flags = OARI_F_RANDOM},
    {.name = "while", .n_in = -1, .n_out = -1, .fusion = OARI_FUSE_OPAQUE, .flags = OARI_F_RANDOM},
};

int oari_graph_op_lookup(const char *name) {
    for (int c = 0; c < 2; c++)
        if (!strcmp(name, oari_ctrl_defs[c].name)) return OARI_OP_COUNT + c;
    return oari_op_lookup(name);
}

oar_graph *oari_graph_new_sub(const oar_graph *g) {
    oar_graph *s = oari_graph_new();
    for (int k = 0; s && k < g->n_syms; k++) {
        if (!(s->syms[k].name = oari_strdup(g->syms[k].name))) {
            oar_graph_free(s);
            return NULL;
        }
        s->syms[k].trace_size = g->syms[k].trace_size;
        s->n_syms++;
    }
    return s;
}

static int grow(void **p, int *cap, int need, size_t elem) {
    if (need <= *cap) return 0;
    int nc = *cap ? *cap * 2 : 16;
    while (nc < need) nc *= 2;
    void *q = oari_realloc(*p, (size_t)*cap * elem, (size_t)nc * elem);
    if (!q) return oari_fail_status();
    *p = q;
    *cap = nc;
    return 0;
}

int oari_graph_sym_of(const oar_graph *g, int64_t size, int32_t *mul) {
    for (int s = 0; s < g->n_syms; s++) {
        int64_t S = g->syms[s].trace_size;
        if (S < 2) continue; /* (the loader and the verifier refuse such symbols) */
        if (size > 0 && size % S == 0 && size / S <= INT32_MAX) {
            if (mul) *mul = (int32_t)(size / S);
            return s;
        }
    }
    if (mul) *mul = 1;
    return -1;
}

void oari_graph_mark_syms(const oar_graph *g, oari_gvalue *v) {
    for (int d = 0; d < OAR_MAX_DIMS; d++) {
        v->smul[d] = 1;
        v->sym[d] = (int8_t)(d < v->ndim ? oari_graph_sym_of(g, v->shape[d], &v->smul[d]) : -1);
    }
}

void oari_graph_mark_attr_syms(const oar_graph *g, oari_gnode *n) {
    for (int k = 0; k < OARI_MAX_IATTR; k++) {
        n->imul[k] = 1;
        n->isym[k] = (int8_t)(k < n->attrs.ni ? oari_graph_sym_of(g, n->attrs.i[k], &n->imul[k]) : -1);
    }
}

/* Writes "N" or "5*N" for symbol s times mul. */
static void print_sym(const oar_graph *g, int s, int32_t mul, FILE *f) {
    if (mul != 1) fprintf(f, "%d*", (int)mul);
    fputs(g->syms[s].name, f);
}

int oari_graph_add_value(oar_graph *g, oari_vkind kind, oar_dtype dtype, int ndim,
                         const int64_t *shape) {
    if (grow((void **)&g->values, &g->cap_values, g->n_values + 1, sizeof *g->values)) return -1;
    oari_gvalue *v = &g->values[g->n_values];
    memset(v, 0, sizeof *v);
    v->kind = kind;
    v->dtype = dtype;
    v->ndim = ndim;
    if (ndim) memcpy(v->shape, shape, (size_t)ndim * sizeof *shape);
    v->producer = -1;
    oari_graph_mark_syms(g, v);
    return g->n_values++;
}

int oari_graph_add_const(oar_graph *g, oar_tensor *t, const char *name) {
    int v = oari_graph_add_value(g, OARI_V_CONST, t->dtype, t->ndim, t->shape);
    if (v < 0) return -1;
    char buf[32];
    if (!name) snprintf(buf, sizeof buf, "c%d", v);
    if (!(g->values[v].name = oari_strdup(name ? name : buf))) {
        g->n_values--;
        return -1;
    }
    g->values[v].constant = oar_tensor_retain(t);
    memset(g->values[v].sym, -1, sizeof g->values[v].sym); /* constants are static */
    return v;
}

int oari_graph_reorder(oar_graph *g, const int *order) {
    size_t sz = (size_t)(g->n_nodes ? g->n_nodes : 1) * sizeof(oari_gnode);
    oari_gnode *tmp = oari_malloc(sz);
    if (!tmp) return oari_fail_status();
    for (int i = 0; i < g->n_nodes; i++) tmp[i] = g->nodes[order[i]];
    memcpy(g->nodes, tmp, (size_t)g->n_nodes * sizeof *tmp);
    oari_free(tmp, sz);
    for (int i = 0; i < g->n_nodes; i++)
        for (int j = 0; j < g->nodes[i].n_out; j++) g->values[g->nodes[i].out[j]].producer = i;
    return 0;
}

int oari_graph_add_input(oar_graph *g, int v) {
    int *a = oari_realloc(g->inputs, (size_t)g->cap_inputs * sizeof *a, (size_t)(g->n_inputs + 1) * sizeof *a);
    if (!a) return oari_fail_status();
    g->inputs = a;
    g->cap_inputs = g->n_inputs + 1;
    g->inputs[g->n_inputs++] = v;
    return 0;
}

int oari_graph_insert_node(oar_graph *g, int at, oari_op op, const oari_attrs *attrs, int n_in,
                           const int *in, int n_out, const oari_meta *out) {
    int last = oari_graph_add_node(g, op, attrs, n_in, in, n_out, out);
    if (last < 0) return -1;
    oari_gnode moved = g->nodes[last];
    memmove(&g->nodes[at + 1], &g->nodes[at], (size_t)(last - at) * sizeof *g->nodes);
    g->nodes[at] = moved;
    for (int i = at; i <= last; i++)
        for (int j = 0; j < g->nodes[i].n_out; j++) g->values[g->nodes[i].out[j]].producer = i;
    return at;
}

int oari_graph_add_node(oar_graph *g, oari_op op, const oari_attrs *attrs, int n_in,
                        const int *in, int n_out, const oari_meta *out) {
    if (grow((void **)&g->nodes, &g->cap_nodes, g->n_nodes + 1, sizeof *g->nodes)) return -1;
    int *ins = oari_malloc((size_t)(n_in ? n_in : 1) * sizeof *ins);
    if (!ins) return -1;
    if (n_in) memcpy(ins, in, (size_t)n_in * sizeof *in);
    int first = g->n_values;
    for (int j = 0; j < n_out; j++) {
        if (oari_graph_add_value(g, OARI_V_NODE, out[j].dtype, out[j].ndim, out[j].shape) < 0) {
            g->n_values = first;
            oari_free(ins, (size_t)(n_in ? n_in : 1) * sizeof *ins);
            return -1;
        }
    }
    oari_gnode *nd = &g->nodes[g->n_nodes];
    memset(nd, 0, sizeof *nd);
    nd->op = op;
    if (attrs) nd->attrs = *attrs;
    memset(nd->isym, -1, sizeof nd->isym);
    for (int k = 0; k < OARI_MAX_IATTR; k++) nd->imul[k] = 1;
    nd->n_in = n_in;
    nd->n_out = n_out;
    nd->in = ins;
    for (int j = 0; j < n_out; j++) {
        nd->out[j] = first + j;
        g->values[first + j].producer = g->n_nodes;
        g->values[first + j].out_index = j;
    }
    return g->n_nodes++;
}

static void free_node(oari_gnode *n) {
    oari_free(n->in, (size_t)(n->n_in ? n->n_in : 1) * sizeof *n->in);
    oar_graph_free(n->sub[0]);
    oar_graph_free(n->sub[1]);
}

static void free_value(oari_gvalue *v) {
    oar_tensor_release(v->constant);
    oari_strfree(v->name);
    oari_gdist_free(v->dist);
}

void oar_graph_free(oar_graph *g) {
    if (!g) return;
    for (int i = 0; i < g->n_nodes; i++) free_node(&g->nodes[i]);
    for (int i = 0; i < g->n_values; i++) free_value(&g->values[i]);
    for (int j = 0; j < g->n_outputs; j++) oari_strfree(g->output_names[j]);
    for (int s = 0; s < g->n_syms; s++) oari_strfree(g->syms[s].name);
    oari_free(g->nodes, (size_t)g->cap_nodes * sizeof *g->nodes);
    oari_free(g->values, (size_t)g->cap_values * sizeof *g->values);
    oari_free(g->inputs, (size_t)g->cap_inputs * sizeof *g->inputs);
    oari_free(g->outputs, (size_t)g->n_outputs * sizeof *g->outputs);
    oari_free(g->output_names, (size_t)g->n_outputs * sizeof *g->output_names);
    oari_free(g, sizeof *g);
}

oar_graph *oar_graph_clone(const oar_graph *g) {
    if (!g) return oari_error(OAR_ERR_INVALID, "graph_clone: graph is NULL"), NULL;
    oar_graph *c = oari_graph_new();
    if (!c) return NULL;
    c->values = oari_calloc((size_t)(g->n_values ? g->n_values : 1), sizeof *c->values);
    c->nodes = oari_calloc((size_t)(g->n_nodes ? g->n_nodes : 1), sizeof *c->nodes);
    c->inputs = oari_calloc((size_t)(g->n_inputs ? g->n_inputs : 1), sizeof *c->inputs);
    c->outputs = oari_calloc((size_t)(g->n_outputs ? g->n_outputs : 1), sizeof *c->outputs);
    c->output_names = oari_calloc((size_t)(g->n_outputs ? g->n_outputs : 1), sizeof(char *));
    c->cap_values = g->n_values ? g->n_values : 1;
    c->cap_nodes = g->n_nodes ? g->n_nodes : 1;
    if (!c->values || !c->nodes || !c->inputs || !c->outputs || !c->output_names) goto fail;
    /* counts grow as each part is copied, so a failure frees only what exists */
    for (int i = 0; i < g->n_values; i++) {
        c->values[i] = g->values[i];
        c->values[i].name = NULL;
        c->values[i].constant = NULL;
        c->values[i].dist = NULL;
        c->n_values++;
        if (g->values[i].name && !(c->values[i].name = oari_strdup(g->values[i].name))) goto fail;
        if (oari_gdist_dup(g->values[i].dist, &c->values[i].dist)) goto fail;
        c->values[i].constant = oar_tensor_retain(g->values[i].constant);
    }
    for (int i = 0; i < g->n_nodes; i++) {
        c->nodes[i] = g->nodes[i];
        c->nodes[i].sub[0] = c->nodes[i].sub[1] = NULL;
        int n = g->nodes[i].n_in ? g->nodes[i].n_in : 1;
        if (!(c->nodes[i].in = oari_malloc((size_t)n * sizeof(int)))) goto fail;
        memcpy(c->nodes[i].in, g->nodes[i].in, (size_t)n * sizeof(int));
        c->n_nodes++;
        for (int k = 0; k < 2; k++) /* control nodes: their sub-graphs too */
            if (g->nodes[i].sub[k] && !(c->nodes[i].sub[k] = oar_graph_clone(g->nodes[i].sub[k]))) goto fail;
    }
    if (g->n_inputs) memcpy(c->inputs, g->inputs, (size_t)g->n_inputs * sizeof *c->inputs); /* onnxconf: a graph may have no inputs */
    c->n_inputs = g->n_inputs;
    c->cap_inputs = g->n_inputs ? g->n_inputs : 1;
    c->n_outputs = g->n_outputs;
    memcpy(c->outputs, g->outputs, (size_t)g->n_outputs * sizeof *c->outputs);
    for (int j = 0; j < g->n_outputs; j++)
        if (!(c->output_names[j] = oari_strdup(g->output_names[j]))) goto fail;
    for (int s = 0; s < g->n_syms; s++) {
        c->syms[s].trace_size = g->syms[s].trace_size;
        if (!(c->syms[s].name = oari_strdup(g->syms[s].name))) goto fail;
        c->n_syms++;
    }
    return c;
fail:
    oar_graph_free(c);
    return NULL;
}

void oari_graph_replace_uses(oar_graph *g, int from, int to) {
    for (int i = 0; i < g->n_nodes; i++) {
        oari_gnode *n = &g->nodes[i];
        if (n->dead) continue;
        for (int k = 0; k < n->n_in; k++)
            if (n->in[k] == from) n->in[k] = to;
    }
    for (int j = 0; j < g->n_outputs; j++)
        if (g->outputs[j] == from) g->outputs[j] = to;
}

void oari_graph_use_counts(const oar_graph *g, int *counts) {
    memset(counts, 0, (size_t)g->n_values * sizeof *counts);
    for (int i = 0; i < g->n_nodes; i++) {
        const oari_gnode *n = &g->nodes[i];
        if (n->dead) continue;
        for (int k = 0; k < n->n_in; k++)
            if (n->in[k] >= 0) counts[n->in[k]]++;
    }
    for (int j = 0; j < g->n_outputs; j++) counts[g->outputs[j]]++;
}

void oari_graph_kill(oar_graph *g, int node) { g->nodes[node].dead = true; }

int oari_graph_compact(oar_graph *g) {
    int nv = g->n_values;
    int *keep = oari_calloc((size_t)(nv ? nv : 1), sizeof *keep);
    if (!keep) return oari_fail_status();
    for (int i = 0; i < g->n_inputs; i++) keep[g->inputs[i]] = 1;
    for (int j = 0; j < g->n_outputs; j++) keep[g->outputs[j]] = 1;
    for (int i = 0; i < g->n_nodes; i++) {
        oari_gnode *n = &g->nodes[i];
        if (n->dead) continue;
        for (int k = 0; k < n->n_in; k++)
            if (n->in[k] >= 0) keep[n->in[k]] = 1;
        for (int j = 0; j < n->n_out; j++) keep[n->out[j]] = 1;
    }
    /* new ids */
    int m = 0;
    for (int v = 0; v < nv; v++) {
        if (keep[v]) {
            keep[v] = m;
            g->values[m++] = g->values[v];
        } else {
            free_value(&g->values[v]);
            keep[v] = -1;
        }
    }
    g->n_values = m;
    int nn = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        oari_gnode *n = &g->nodes[i];
        if (n->dead) {
            free_node(n);
            continue;
        }
        for (int k = 0; k < n->n_in; k++)
            if (n->in[k] >= 0) n->in[k] = keep[n->in[k]];
        for (int j = 0; j < n->n_out; j++) {
            n->out[j] = keep[n->out[j]];
            g->values[n->out[j]].producer = nn;
        }
        g->nodes[nn++] = *n;
    }
    g->n_nodes = nn;
    for (int i = 0; i < g->n_inputs; i++) g->inputs[i] = keep[g->inputs[i]];
    for (int j = 0; j < g->n_outputs; j++) g->outputs[j] = keep[g->outputs[j]];
    oari_free(keep, (size_t)(nv ? nv : 1) * sizeof *keep);
    return 0;
}

oar_tensor *oari_graph_symbolic(const oari_gvalue *v) {
    return oari_tensor_make(NULL, v->dtype, v->ndim, v->shape, NULL, 0);
}

bool oari_graph_const_is(const oar_graph *g, int v, double x) {
    if (v < 0 || g->values[v].kind != OARI_V_CONST) return false;
    oar_tensor *t = g->values[v].constant;
    if (t->numel > 64 || !oar_tensor_data(t) || oar_dtype_is_complex(t->dtype)) return false;
    const char *base = oar_tensor_data(t);
    size_t es = oar_dtype_size(t->dtype);
    int64_t idx[OAR_MAX_DIMS] = {0};
    for (int64_t e = 0; e < t->numel; e++) {
        int64_t off = 0;
        for (int d = 0; d < t->ndim; d++) off += idx[d] * t->strides[d];
        if (oari_load_f64(base + off * (int64_t)es, t->dtype) != x) return false;
        for (int d = t->ndim - 1; d >= 0 && ++idx[d] == t->shape[d]; d--) idx[d] = 0;
    }
    return true;
}

oar_dtype oari_dtype_from_name(const char *name) {
    for (int d = 0; d < OAR_DTYPE_COUNT; d++)
        if (!strcmp(oar_dtype_name((oar_dtype)d), name)) return (oar_dtype)d;
    return OAR_DTYPE_INVALID;
}

/* ---- accessors ----------------------------------------------------------------- */

int oar_graph_num_nodes(const oar_graph *g) {
    return g ? g->n_nodes : (oari_null_arg(__func__, "graph"), -1);
}
int oar_graph_num_inputs(const oar_graph *g) {
    return g ? g->n_inputs : (oari_null_arg(__func__, "graph"), -1);
}
int oar_graph_num_outputs(const oar_graph *g) {
    return g ? g->n_outputs : (oari_null_arg(__func__, "graph"), -1);
}

int oar_graph_num_constants(const oar_graph *g) {
    if (!g) return oari_null_arg(__func__, "graph"), -1;
    int n = 0;
    for (int v = 0; v < g->n_values; v++) n += g->values[v].kind == OARI_V_CONST;
    return n;
}

int oar_graph_count_op(const oar_graph *g, const char *op_name) {
    if (!g || !op_name) return -1;
    int op = oari_graph_op_lookup(op_name), n = 0;
    for (int i = 0; i < g->n_nodes; i++) n += !g->nodes[i].dead && (int)g->nodes[i].op == op;
    return n;
}

/* Whether i indexes one of n inputs or outputs of g; says why not. */
static bool io_index_ok(const char *fn, const oar_graph *g, int i, bool input) {
    if (!g) return oari_null_arg(fn, "graph"), false;
    int n = input ? g->n_inputs : g->n_outputs;
    if (i >= 0 && i < n) return true;
    oari_error(OAR_ERR_INVALID, "%s: %s %d is out of range [0, %d)", fn, input ? "input" : "output", i, n);
    return false;
}
const char *oar_graph_input_name(const oar_graph *g, int i) {
    return io_index_ok(__func__, g, i, true) ? g->values[g->inputs[i]].name : NULL;
}
const char *oar_graph_output_name(const oar_graph *g, int i) {
    return io_index_ok(__func__, g, i, false) ? g->output_names[i] : NULL;
}

static int value_shape(const oari_gvalue *v, oar_dtype *dtype, int64_t *shape) {
    if (dtype) *dtype = v->dtype;
    for (int d = 0; shape && d < v->ndim; d++) shape[d] = v->sym[d] >= 0 ? -1 : v->shape[d];
    return v->ndim;
}

int oar_graph_input_shape(const oar_graph *g, int i, oar_dtype *dtype, int64_t *shape) {
    if (!g || i < 0 || i >= g->n_inputs) return -1;
    return value_shape(&g->values[g->inputs[i]], dtype, shape);
}
int oar_graph_output_shape(const oar_graph *g, int i, oar_dtype *dtype, int64_t *shape) {
    if (!g || i < 0 || i >= g->n_outputs) return -1;
    return value_shape(&g->values[g->outputs[i]], dtype, shape);
}

/* ---- printing ------------------------------------------------------------------ */

static void print_type(const oar_graph *g, const oari_gvalue *v, FILE *f) {
    fprintf(f, "%s[", oar_dtype_name(v->dtype));
    for (int d = 0; d < v->ndim; d++) {
        if (d) fputs(", ", f);
        if (v->sym[d] >= 0) print_sym(g, v->sym[d], v->smul[d], f);
        else fprintf(f, "%lld", (long long)v->shape[d]);
    }
    fputc(']', f);
    oari_gdist_print(v->dist, f); /* placements, after oar_graph_annotate / complete */
}

static const char *const sub_labels[2][2] = {{"then", "else"}, {"cond", "body"}};

/* Prints g as `label(inputs) { ... }` indented by ind spaces; control
 * nodes' sub-graphs follow their line, indented further. */
static void print_graph(const oar_graph *g, FILE *f, int ind, const char *label) {
    fprintf(f, "%*s%s(", ind, "", label);
    for (int i = 0; i < g->n_inputs; i++) {
        const oari_gvalue *v = &g->values[g->inputs[i]];
        fprintf(f, "%s%%%d %s: ", i ? ", " : "", g->inputs[i], v->name ? v->name : "?");
        print_type(g, v, f);
    }
    fprintf(f, ") {\n");
    for (int v = 0; v < g->n_values; v++) {
        if (g->values[v].kind != OARI_V_CONST) continue;
        fprintf(f, "%*s  %%%d = const %s : ", ind, "", v, g->values[v].name);
        print_type(g, &g->values[v], f);
        fputc('\n', f);
    }
    for (int i = 0; i < g->n_nodes; i++) {
        const oari_gnode *n = &g->nodes[i];
        if (n->dead) continue;
        fprintf(f, "%*s  ", ind, "");
        for (int j = 0; j < n->n_out; j++) fprintf(f, "%s%%%d", j ? ", " : "", n->out[j]);
        fprintf(f, " = %s(", oari_gnode_def(n)->name);
        for (int k = 0; k < n->n_in; k++) {
            if (n->in[k] < 0) fprintf(f, "%s_", k ? ", " : "");
            else fprintf(f, "%s%%%d", k ? ", " : "", n->in[k]);
        }
        fputc(')', f);
        if (n->attrs.ni) {
            fputs(" i=[", f);
            for (int k = 0; k < n->attrs.ni; k++) {
                if (k) fputs(", ", f);
                if (n->isym[k] >= 0) print_sym(g, n->isym[k], n->imul[k], f);
                else fprintf(f, "%lld", (long long)n->attrs.i[k]);
            }
            fputc(']', f);
        }
        if (n->attrs.nf) {
            fputs(" f=[", f);
            for (int k = 0; k < n->attrs.nf; k++) fprintf(f, "%s%g", k ? ", " : "", n->attrs.f[k]);
            fputc(']', f);
        }
        fputs(" : ", f);
        for (int j = 0; j < n->n_out; j++) {
            if (j) fputs(", ", f);
            print_type(g, &g->values[n->out[j]], f);
        }
        if (n->segment) fprintf(f, "  # checkpoint segment %d", n->segment);
        if (n->recompute) fputs("  # recomputed", f);
        fputc('\n', f);
        for (int k = 0; k < 2 && oari_is_ctrl(n->op); k++)
            if (n->sub[k]) print_graph(n->sub[k], f, ind + 4, sub_labels[n->op == OARI_OP_WHILE][k]);
    }
    fprintf(f, "%*s  return ", ind, "");
    for (int j = 0; j < g->n_outputs; j++)
        fprintf(f, "%s%s=%%%d", j ? ", " : "", g->output_names[j], g->outputs[j]);
    fprintf(f, "\n%*s}\n", ind, "");
}

int oar_graph_print(const oar_graph *g, FILE *f) {
    if (!g || !f) return oari_error(OAR_ERR_INVALID, "graph_print: graph or file is NULL");
    print_graph(g, f, 0, "graph");
    return 0;
}

/* ---- verifying ---------------------------------------------------------------- */

/* 0 if value v (recorded) has t's dtype and shape, else an error naming
 * the node, the place (`what`) and both. */
static int same_as(const oari_gvalue *v, const oar_tensor *t, int i, const char *name, const char *what) {
    char s1[200], s2[200];
    if (v->dtype == t->dtype && v->ndim == t->ndim && !memcmp(v->shape, t->shape, (size_t)v->ndim * sizeof *v->shape))
        return 0;
    return oari_error(OAR_ERR_INVALID, "graph: node %d (%s): %s is %s %s but should be %s %s", i, name, what,
                      oar_dtype_name(v->dtype), oari_shape_str(s1, v->ndim, v->shape),
                      oar_dtype_name(t->dtype), oari_shape_str(s2, t->ndim, t->shape));
}

static int64_t value_numel(const oari_gvalue *v) {
    int64_t n = 1;
    for (int d = 0; d < v->ndim; d++) n *= v->shape[d];
    return n;
}

/* Checks control node i (ir.h): arities, its sub-graphs (verified in turn)
 * against the values it passes and the outputs it records; sets t[] of its
 * outputs. */
static int verify_ctrl(const oar_graph *g, int i, oar_tensor **t) {
    const oari_gnode *n = &g->nodes[i];
    bool loop = n->op == OARI_OP_WHILE;
    const char *name = oari_gnode_def(n)->name;
    int first = loop ? 0 : 1, st = 0; /* node inputs from `first` on are the sub-graphs' inputs */
    char what[96];
    if (!n->sub[0] || !n->sub[1])
        return oari_error(OAR_ERR_INVALID, "graph: node %d (%s) lacks its sub-graphs", i, name);
    if (n->n_out < 1 || n->n_in < first || (loop && n->n_in < n->n_out))
        return oari_error(OAR_ERR_INVALID, "graph: node %d (%s) has %d inputs and %d outputs", i, name,
                          n->n_in, n->n_out);
    if (loop && (n->attrs.ni != 1 || n->attrs.i[0] < -1))
        return oari_error(OAR_ERR_INVALID, "graph: node %d (while) needs one attribute, max_iters >= -1", i);
    for (int k = 0; k < n->n_in; k++)
        if (n->in[k] < 0 || n->in[k] >= g->n_values || !t[n->in[k]])
            return oari_error(OAR_ERR_INVALID, "graph: node %d (%s) input %d (%%%d) is not defined before it",
                              i, name, k, n->in[k]);
    if (!loop && (t[n->in[0]]->numel != 1 || oar_dtype_is_complex(t[n->in[0]]->dtype)))
        return oari_error(OAR_ERR_INVALID, "graph: node %d (cond): the predicate must be one real element", i);
    for (int s = 0; s < 2; s++) {
        const oar_graph *sg = n->sub[s];
        const char *label = sub_labels[loop][s];
        int want_out = loop && s == 0 ? 1 : n->n_out;
        if (sg->n_inputs != n->n_in - first || sg->n_outputs != want_out)
            return oari_error(OAR_ERR_INVALID, "graph: node %d (%s): the %s sub-graph has %d inputs and %d "
                              "outputs; the node passes %d and wants %d", i, name, label, sg->n_inputs,
                              sg->n_outputs, n->n_in - first, want_out);
        if ((st = oar_graph_verify(sg))) {
            char msg[400];
            snprintf(msg, sizeof msg, "%s", oar_last_error());
            return oari_error(st, "graph: node %d (%s), %s sub-graph: %s", i, name, label, msg);
        }
        for (int k = 0; k < sg->n_inputs; k++) {
            int v = sg->inputs[k];
            if (v < 0 || v >= sg->n_values || sg->values[v].kind != OARI_V_INPUT)
                return oari_error(OAR_ERR_INVALID, "graph: node %d (%s): %s input %d is not an input value",
                                  i, name, label, k);
            snprintf(what, sizeof what, "%s input %d", label, k);
            if ((st = same_as(&sg->values[v], t[n->in[first + k]], i, name, what))) return st;
        }
        for (int j = 0; j < want_out; j++) {
            const oari_gvalue *ov = &sg->values[sg->outputs[j]];
            if (loop && s == 0) {
                if (value_numel(ov) != 1 || oar_dtype_is_complex(ov->dtype))
                    return oari_error(OAR_ERR_INVALID, "graph: node %d (while): the cond sub-graph must "
                                      "give one real element", i);
                continue;
            }
            oar_tensor *o = oari_graph_symbolic(&g->values[n->out[j]]);
            if (!o) return oari_fail_status();
            snprintf(what, sizeof what, "%s output %d", label, j);
            st = same_as(ov, o, i, name, what);
            if (!st && loop) { /* loop variables keep their dtype and shape */
                snprintf(what, sizeof what, "loop variable %d", j);
                st = same_as(&g->values[n->out[j]], t[n->in[j]], i, name, what);
            }
            oar_tensor_release(o);
            if (st) return st;
        }
    }
    for (int j = 0; j < n->n_out; j++)
        if (!(t[n->out[j]] = oari_graph_symbolic(&g->values[n->out[j]]))) return oari_fail_status();
    return 0;
}

/* What the executor and the passes take for granted of values, inputs and
 * symbols (a hand-edited model.json can break any of it): each input value
 * listed once in the inputs and each listed input an input value; each
 * constant holding a tensor of its dtype and shape; symbols with a usable
 * trace size, and symbolic dims that name one. */
static int verify_values(const oar_graph *g) {
    char s1[200], s2[200];
    if (g->n_syms < 0 || g->n_syms > OARI_MAX_SYMS)
        return oari_error(OAR_ERR_INVALID, "graph: %d symbols (at most %d)", g->n_syms, OARI_MAX_SYMS);
    for (int s = 0; s < g->n_syms; s++)
        if (!g->syms[s].name || g->syms[s].trace_size < 2)
            return oari_error(OAR_ERR_INVALID, "graph: symbol %d (%s) has trace size %lld (it must be >= 2)", s,
                              g->syms[s].name ? g->syms[s].name : "unnamed", (long long)g->syms[s].trace_size);
    for (int i = 0; i < g->n_inputs; i++) {
        int v = g->inputs[i];
        if (v < 0 || v >= g->n_values || g->values[v].kind != OARI_V_INPUT)
            return oari_error(OAR_ERR_INVALID, "graph: input %d refers to value %d, which is not an input value", i, v);
        for (int k = 0; k < i; k++)
            if (g->inputs[k] == v)
                return oari_error(OAR_ERR_INVALID, "graph: inputs %d and %d are both value %d", k, i, v);
    }
    for (int v = 0; v < g->n_values; v++) {
        const oari_gvalue *gv = &g->values[v];
        if (gv->kind != OARI_V_NODE && gv->kind != OARI_V_INPUT && gv->kind != OARI_V_CONST)
            return oari_error(OAR_ERR_INVALID, "graph: value %d has an unknown kind %d", v, (int)gv->kind);
        if (gv->ndim < 0 || gv->ndim > OAR_MAX_DIMS)
            return oari_error(OAR_ERR_INVALID, "graph: value %d has rank %d", v, gv->ndim);
        uint64_t span = 16; /* the product of the dims (zeros as 1): the strides must fit int64 */
        for (int d = 0; d < gv->ndim; d++) {
            int s = gv->sym[d];
            if (gv->shape[d] > 1 && span > ((uint64_t)1 << 62) / (uint64_t)gv->shape[d])
                return oari_error(OAR_ERR_INVALID, "graph: value %d has shape %s, past int64", v,
                                  oari_shape_str(s1, gv->ndim, gv->shape));
            if (gv->shape[d] > 1) span *= (uint64_t)gv->shape[d];
            if (gv->shape[d] < 0 || s >= g->n_syms || s < -1 || (s >= 0 && gv->smul[d] < 1))
                return oari_error(OAR_ERR_INVALID, "graph: value %d dim %d (size %lld, symbol %d of %d) is "
                                  "malformed", v, d, (long long)gv->shape[d], s, g->n_syms);
        }
        if (gv->kind == OARI_V_INPUT) {
            bool listed = false;
            for (int i = 0; i < g->n_inputs && !listed; i++) listed = g->inputs[i] == v;
            if (!listed)
                return oari_error(OAR_ERR_INVALID, "graph: value %d (%s) is an input value, but not one of the "
                                  "graph's %d inputs", v, gv->name ? gv->name : "unnamed", g->n_inputs);
        }
        const oar_tensor *c = gv->constant;
        if (gv->kind == OARI_V_CONST &&
            (!c || c->dtype != gv->dtype || c->ndim != gv->ndim ||
             memcmp(c->shape, gv->shape, (size_t)gv->ndim * sizeof *gv->shape)))
            return oari_error(OAR_ERR_INVALID, "graph: constant value %d (%s) is %s %s but holds %s %s", v,
                              gv->name ? gv->name : "unnamed", oar_dtype_name(gv->dtype),
                              oari_shape_str(s1, gv->ndim, gv->shape), c ? oar_dtype_name(c->dtype) : "no",
                              c ? oari_shape_str(s2, c->ndim, c->shape) : "tensor");
    }
    return 0;
}

int oar_graph_verify(const oar_graph *g) {
    if (!g) return oari_error(OAR_ERR_INVALID, "graph_verify: graph is NULL");
    int st = verify_values(g);
    if (st) return st;
    oar_tensor **t = oari_calloc((size_t)(g->n_values ? g->n_values : 1), sizeof *t);
    if (!t) return oari_fail_status();
    for (int v = 0; v < g->n_values && !st; v++) {
        const oari_gvalue *gv = &g->values[v];
        if (gv->kind == OARI_V_CONST) t[v] = oar_tensor_retain(gv->constant);
        else if (gv->kind == OARI_V_INPUT) t[v] = oari_graph_symbolic(gv);
        if (gv->kind != OARI_V_NODE && !t[v]) st = oari_fail_status();
    }
    for (int i = 0; i < g->n_nodes && !st; i++) {
        const oari_gnode *n = &g->nodes[i];
        if (n->dead) continue;
        if (oari_is_ctrl(n->op)) {
            if (n->op != OARI_OP_COND && n->op != OARI_OP_WHILE) {
                st = oari_error(OAR_ERR_INVALID, "graph: node %d has an unknown op id %d", i, (int)n->op);
                break;
            }
            if ((st = verify_ctrl(g, i, t))) break;
            continue;
        }
        const oari_op_def *def = oari_op_defs[n->op];
        const char *name = oari_op_name(n->op);
        if (def->n_in >= 0 ? n->n_in != def->n_in : n->n_in < 1) {
            st = oari_error(OAR_ERR_INVALID, "graph: node %d (%s) has %d inputs, the op takes %d",
                            i, name, n->n_in, def->n_in);
            break;
        }
        if (n->n_out != def->n_out) {
            st = oari_error(OAR_ERR_INVALID, "graph: node %d (%s) has %d outputs, the op has %d", i,
                            name, n->n_out, def->n_out);
            break;
        }
        oar_tensor *in[OARI_MAX_IN];
        for (int k = 0; k < n->n_in && !st; k++) {
            int v = n->in[k];
            if (v < -1 || v >= g->n_values || (v >= 0 && !t[v]) ||
                (v < 0 && !(k > 0 && (def->flags & OARI_F_OPTIONAL_IN))))
                st = oari_error(OAR_ERR_INVALID, "graph: node %d (%s) input %d (%%%d) is not "
                                "defined before it", i, name, k, v);
            else in[k] = v >= 0 ? t[v] : NULL;
        }
        if (st) break;
        oari_infer c;
        memset(&c, 0, sizeof c);
        c.op = name;
        c.n_in = n->n_in;
        c.in = in;
        c.attrs = &n->attrs;
        for (int k = 0; k < n->n_in; k++) c.in_dtype[k] = in[k] ? in[k]->dtype : OAR_F32;
        c.kernel_dtype = in[0]->dtype;
        if ((st = def->infer(&c))) {
            char msg[400];
            snprintf(msg, sizeof msg, "%s", oar_last_error());
            st = oari_error(st, "graph: node %d (%s): %s", i, name, msg);
            break;
        }
        for (int k = 0; k < n->n_in && !st; k++)
            if (in[k] && c.in_dtype[k] != in[k]->dtype)
                st = oari_error(OAR_ERR_INVALID, "graph: node %d (%s) input %d is %s but the op "
                                "wants %s (a cast node is missing)", i, name, k,
                                oar_dtype_name(in[k]->dtype), oar_dtype_name(c.in_dtype[k]));
        for (int j = 0; j < n->n_out && !st; j++) {
            const oari_gvalue *ov = &g->values[n->out[j]];
            if (c.out[j].dtype != ov->dtype || c.out[j].ndim != ov->ndim ||
                memcmp(c.out[j].shape, ov->shape, (size_t)ov->ndim * sizeof *ov->shape)) {
                char s1[200], s2[200];
                st = oari_error(OAR_ERR_INVALID, "graph: node %d (%s) output %d: the shape rule "
                                "gives %s %s, the graph records %s %s", i, name, j,
                                oar_dtype_name(c.out[j].dtype),
                                oari_shape_str(s1, c.out[j].ndim, c.out[j].shape),
                                oar_dtype_name(ov->dtype), oari_shape_str(s2, ov->ndim, ov->shape));
                break;
            }
            if (def->flags & OARI_F_VIEW) {
                t[n->out[j]] = def->view(in[0], &n->attrs);
            } else {
                t[n->out[j]] = oari_tensor_make(NULL, ov->dtype, ov->ndim, ov->shape, NULL, 0);
            }
            if (!t[n->out[j]]) st = oari_fail_status();
        }
    }
    for (int j = 0; j < g->n_outputs && !st; j++)
        if (g->outputs[j] < 0 || g->outputs[j] >= g->n_values || !t[g->outputs[j]])
            st = oari_error(OAR_ERR_INVALID, "graph: output %d is not defined", j);
    for (int v = 0; v < g->n_values; v++) oar_tensor_release(t[v]);
    oari_free(t, (size_t)(g->n_values ? g->n_values : 1) * sizeof *t);
    return st;
}

/* ---- freezing parameters ------------------------------------------------------ */

int oar_graph_freeze(oar_graph *g, oar_module *m) {
    if (!g || !m) return oari_error(OAR_ERR_INVALID, "graph_freeze: graph or module is NULL");
    const oar_state_entry *e;
    int ne = oar_module_state(m, &e);
    if (ne < 0) return ne;
    int turned = 0, k = 0;
    for (int i = 0; i < g->n_inputs; i++) {
        oari_gvalue *v = &g->values[g->inputs[i]];
        int hit = -1;
        for (int s = 0; s < ne && hit < 0; s++)
            if (e[s].is_parameter && !strcmp(e[s].name, v->name)) hit = s;
        if (hit < 0) {
            g->inputs[k++] = g->inputs[i];
            continue;
        }
        oar_tensor *t = e[hit].tensor;
        if (t->ndim != v->ndim || t->dtype != v->dtype ||
            memcmp(t->shape, v->shape, (size_t)t->ndim * sizeof *t->shape))
            return oari_error(OAR_ERR_INVALID, "graph_freeze: parameter %s changed shape or dtype "
                              "since the trace", v->name);
        v->kind = OARI_V_CONST;
        v->constant = oar_tensor_retain(t);
        turned++;
    }
    g->n_inputs = k; /* the array keeps its capacity */
    return turned;
}

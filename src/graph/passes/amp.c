/* The AMP pass: the casts autocast would insert (include/oar/amp.h), put
 * into a graph traced without autocast. Walking the nodes in order, each
 * op node gets a cast node before every input autocast's policy
 * (oari_autocast_targets, the function eager dispatch asks) retypes, then
 * its shape rule runs again on the new input dtypes, so dtypes propagate
 * to the nodes after it (with the casts a rule asks for, as the tracer
 * adds them). Control nodes get their inputs cast back to the dtypes their
 * sub-graphs were traced with, and graph outputs keep their dtypes (a cast
 * back at the end), so callers and optimizer updates see the graph they
 * traced. Applied to a training step (forward, backward, update) the
 * gradient nodes are retyped by the same lists, unlike eager autocast,
 * whose backward runs each gradient in its forward op's dtype; trace the
 * forward pass inside oar_autocast_push to get exactly that. */
#include "../ir.h"

#include <string.h>

/* Inserts `cast(v -> to)` at node index *at (moving the node there up
 * one); returns the cast's value or a negative status. */
static int insert_cast(oar_graph *g, int *at, int v, oar_dtype to, int segment) {
    oari_meta m = {.dtype = to, .ndim = g->values[v].ndim};
    memcpy(m.shape, g->values[v].shape, sizeof m.shape);
    oari_attrs ca = {.ni = 1, .i = {to}};
    int ni = oari_graph_insert_node(g, *at, OARI_OP_cast, &ca, 1, &v, 1, &m);
    if (ni < 0) return oari_fail_status();
    (*at)++;
    g->nodes[ni].segment = segment;
    int nv = g->nodes[ni].out[0];
    memcpy(g->values[nv].sym, g->values[v].sym, sizeof g->values[nv].sym);
    memcpy(g->values[nv].smul, g->values[v].smul, sizeof g->values[nv].smul);
    return nv;
}

/* A tensor standing for value v in a shape rule: the constant itself (a
 * wrapped number keeps its weak type), else a symbolic tensor. */
static oar_tensor *stand_in(const oar_graph *g, int v) {
    const oari_gvalue *gv = &g->values[v];
    return gv->kind == OARI_V_CONST ? oar_tensor_retain(gv->constant) : oari_graph_symbolic(gv);
}

/* Retypes op node *at; returns the number of changes or a status. */
static int retype_node(oar_graph *g, int *at, oar_dtype low) {
    oari_gnode *n = &g->nodes[*at];
    const oari_op_def *def = oari_op_defs[n->op];
    const int n_in = n->n_in, segment = n->segment;
    oar_tensor *in[OARI_MAX_IN] = {0};
    oar_dtype want[OARI_MAX_IN];
    int changes = 0, st = 0;
    if (n_in > OARI_MAX_IN) return oari_error(OAR_ERR_INVALID, "amp pass: node %d has %d inputs", *at, n_in);
    for (int k = 0; k < n_in && !st; k++)
        if (n->in[k] >= 0 && !(in[k] = stand_in(g, n->in[k]))) st = oari_fail_status();
    /* autocast's casts, then the casts the shape rule asks for */
    for (int pass = 0; pass < 2 && !st; pass++) {
        oari_infer c;
        memset(&c, 0, sizeof c);
        if (pass == 0) {
            if (!oari_autocast_targets(n->op, low, n_in, in, want)) continue;
        } else {
            c.op = def->name;
            c.n_in = n_in;
            c.in = in;
            c.attrs = &n->attrs;
            for (int k = 0; k < n_in; k++) c.in_dtype[k] = in[k] ? in[k]->dtype : OAR_F32;
            c.kernel_dtype = in[0] ? in[0]->dtype : OAR_F32;
            if ((st = def->infer(&c))) break;
            for (int k = 0; k < n_in; k++) want[k] = c.in_dtype[k];
            /* the outputs take the dtypes the rule gives now */
            for (int j = 0; j < n->n_out; j++) {
                oari_gvalue *ov = &g->values[n->out[j]];
                if (ov->dtype == c.out[j].dtype) continue;
                ov->dtype = c.out[j].dtype;
                changes++;
            }
        }
        for (int k = 0; k < n_in && !st; k++) {
            if (!in[k] || want[k] == in[k]->dtype) continue;
            int v = insert_cast(g, at, g->nodes[*at].in[k], want[k], segment);
            if (v < 0) {
                st = v;
                break;
            }
            n = &g->nodes[*at];
            n->in[k] = v;
            oar_tensor_release(in[k]);
            if (!(in[k] = stand_in(g, v))) st = oari_fail_status();
            changes++;
        }
    }
    for (int k = 0; k < n_in; k++) oar_tensor_release(in[k]);
    return st ? st : changes;
}

static int amp_pass(oar_graph *g, oar_dtype low) {
    const int nv0 = g->n_values, n_outputs = g->n_outputs;
    oar_dtype *traced = oari_malloc((size_t)(nv0 + n_outputs + 1) * sizeof *traced);
    if (!traced) return oari_fail_status();
    oar_dtype *out_dtype = traced + nv0;
    for (int v = 0; v < nv0; v++) traced[v] = g->values[v].dtype;
    for (int j = 0; j < n_outputs; j++) out_dtype[j] = g->values[g->outputs[j]].dtype;
    int changes = 0, st = 0;
    for (int i = 0; i < g->n_nodes && !st; i++) {
        if (g->nodes[i].dead) continue;
        if (oari_is_ctrl(g->nodes[i].op)) { /* sub-graphs keep the dtypes they were traced with */
            for (int k = 0; k < g->nodes[i].n_in && !st; k++) {
                int v = g->nodes[i].in[k];
                if (v < 0 || v >= nv0 || g->values[v].dtype == traced[v]) continue;
                int c = insert_cast(g, &i, v, traced[v], g->nodes[i].segment);
                if (c < 0) st = c;
                else g->nodes[i].in[k] = c, changes++;
            }
            continue;
        }
        int r = retype_node(g, &i, low);
        if (r < 0) st = r;
        else changes += r;
    }
    for (int j = 0; j < n_outputs && !st; j++) {
        int v = g->outputs[j];
        if (g->values[v].dtype == out_dtype[j]) continue;
        int end = g->n_nodes;
        int c = insert_cast(g, &end, v, out_dtype[j], 0);
        if (c < 0) st = c;
        else g->outputs[j] = c, changes++;
    }
    oari_free(traced, (size_t)(nv0 + n_outputs + 1) * sizeof *traced);
    return st ? st : changes;
}

int oari_pass_amp(oar_graph *g) { return amp_pass(g, OAR_BF16); }
int oari_pass_amp_f16(oar_graph *g) { return amp_pass(g, OAR_F16); }

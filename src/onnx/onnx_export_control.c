/* ONNX export emitters: the control nodes. A cond node becomes an If whose
 * branches are its sub-graphs, a while node a Loop; the sub-graphs' nodes
 * go through the same table (oari_xp_export_node) into the branch or body
 * graph, sharing the export's arena and name counters. */
#define OARI_ONNX_PROTO
#include "onnx_export_internal.h"
#include <string.h>

/* Emits sub-graph S's nodes into y's node list (and its initializers), S's
 * inputs standing for the names in[], its other values named "/s<k>/v<id>";
 * out[] gets the names of S's outputs. Shares y's arena and counters. */
static int inline_sub(oari_xp *y, const oar_graph *S, const char *const *in, const char **out) {
    if (y->st) return y->st;
    oari_xp c = *y;
    c.g = S;
    c.node = -1;
    c.n_shapes = 0;
    c.names = oari_xp_alloc(y, (size_t)(S->n_values ? S->n_values : 1) * sizeof *c.names);
    c.uses = oari_xp_alloc(y, (size_t)(S->n_values ? S->n_values : 1) * sizeof *c.uses);
    c.mem = y->mem; /* oari_xp_alloc above moved y's arena head */
    if (!c.names || !c.uses) return y->st;
    oari_graph_use_counts(S, c.uses);
    int k = y->n_tmp++;
    c.n_tmp = y->n_tmp;
    for (int i = 0; i < S->n_inputs; i++)
        c.names[S->inputs[i]] = in[i];
    for (int v = 0; v < S->n_values; v++)
        if (!c.names[v]) c.names[v] = oari_xp_str(&c, "/s%d/v%d", k, v);
    for (int i = 0; i < S->n_nodes && !c.st; i++)
        if (!S->nodes[i].dead) oari_xp_export_node(&c, i);
    for (int j = 0; j < S->n_outputs; j++)
        out[j] = c.names[S->outputs[j]];
    /* back into y: arena, counters, node and initializer lists, status */
    y->mem = c.mem;
    y->n_tmp = c.n_tmp;
    y->n_onnx_nodes = c.n_onnx_nodes;
    y->nodes = c.nodes, y->n_nodes = c.n_nodes, y->cap_nodes = c.cap_nodes;
    y->inits = c.inits, y->n_inits = c.n_inits, y->cap_inits = c.cap_inits;
    y->st = c.st;
    return y->st;
}

/* A fresh context for a sub-graph body of x: its own node and initializer
 * lists, x's arena and counters. */
static oari_xp sub_ctx(oari_xp *x) {
    oari_xp y = *x;
    y.nodes = NULL, y.n_nodes = y.cap_nodes = 0;
    y.inits = NULL, y.n_inits = y.cap_inits = 0;
    return y;
}

/* y's nodes as a GraphProto with formal inputs fin[0..n_fin-1] (values of
 * S: fin_v) and outputs named out[] typed as S's values out_v[]; an output
 * that is not made in y (an outer name, an input) goes through an Identity.
 * Gives x back the arena and counters. */
static Onnx__GraphProto *finish_sub(oari_xp *x, oari_xp *y, const oar_graph *S, int n_fin,
                                    const char *const *fin, const int *fin_v, int n_out,
                                    const char **out, const int *out_v, const char *name) {
    Onnx__ValueInfoProto **ins = oari_xp_alloc(y, (size_t)(n_fin ? n_fin : 1) * sizeof *ins);
    Onnx__ValueInfoProto **outs = oari_xp_alloc(y, (size_t)(n_out ? n_out : 1) * sizeof *outs);
    Onnx__GraphProto *gp = oari_xp_alloc(y, sizeof *gp);
    const oar_graph *keep = y->g;
    y->g = S;
    int mark = y->node;
    y->node = -1;
    for (int j = 0; j < n_out && !y->st; j++) {
        bool made = false;
        for (size_t k = 0; k < y->n_nodes && !made; k++)
            for (size_t o = 0; o < y->nodes[k]->n_output; o++)
                made = made || !strcmp(y->nodes[k]->output[o], out[j]);
        for (int k = 0; k < j; k++)
            made = made && strcmp(out[k], out[j]); /* a second output of one value */
        if (!made)
            out[j] =
                oari_xp_out0(oari_xp_node1(y, "Identity", 1, (const char *const[]){out[j]}, NULL));
    }
    for (int i = 0; i < n_fin && ins; i++)
        ins[i] = oari_xp_value_info(y, fin[i], fin_v[i]);
    for (int j = 0; j < n_out && outs; j++)
        outs[j] = oari_xp_value_info(y, out[j], out_v[j]);
    y->g = keep;
    y->node = mark;
    if (gp && !y->st) {
        onnx__graph_proto__init(gp);
        gp->name = (char *)name;
        gp->n_input = (size_t)n_fin, gp->input = ins;
        gp->n_output = (size_t)n_out, gp->output = outs;
        gp->n_node = y->n_nodes, gp->node = y->nodes;
        gp->n_initializer = y->n_inits, gp->initializer = y->inits;
    }
    x->mem = y->mem;
    x->n_tmp = y->n_tmp;
    x->n_onnx_nodes = y->n_onnx_nodes;
    x->st = y->st;
    return x->st ? NULL : gp;
}

/* name as a bool (ONNX's If and Loop conditions), given its dtype. */
static const char *as_bool(oari_xp *x, const char *name, oar_dtype dt) {
    if (dt == OAR_BOOL) return name;
    Onnx__NodeProto *nd = oari_xp_node1(x, "Cast", 1, (const char *const[]){name}, NULL);
    oari_xp_set_i(x, nd, "to", ONNX__TENSOR_PROTO__DATA_TYPE__BOOL);
    return oari_xp_out0(nd);
}

#define MAX_CTRL_IO 96

/* cond node [pred, operands..., captures...] -> If whose branches read
 * the operands and captures by their outer names; while node [vars...,
 * captures...] -> Loop over the vars (no trip count): cond_init is the
 * cond sub-graph on the initial vars, the body runs the body sub-graph and
 * then the cond sub-graph on its results. max_iters is not kept. */
int oari_onnx_emit_control(oari_xp *x, const oari_xnode *e) {
    const oar_graph *g = x->g;
    const oari_gnode *n = e->n;
    const char *in[MAX_CTRL_IO], *outs[MAX_CTRL_IO], *res[MAX_CTRL_IO];
    int out_v[MAX_CTRL_IO];
    if (n->n_in > MAX_CTRL_IO || n->n_out > MAX_CTRL_IO)
        return oari_xp_fail(x, "%d inputs, %d outputs (at most %d)", n->n_in, n->n_out,
                            MAX_CTRL_IO);
    for (int i = 0; i < n->n_in; i++)
        in[i] = x->names[n->in[i]];
    for (int j = 0; j < n->n_out; j++)
        outs[j] = x->names[n->out[j]];
    if (n->op == OARI_OP_COND) {
        const char *pred = as_bool(x, in[0], g->values[n->in[0]].dtype);
        Onnx__GraphProto *br[2];
        for (int b = 0; b < 2; b++) {
            const oar_graph *S = n->sub[b];
            oari_xp y = sub_ctx(x);
            inline_sub(&y, S, in + 1, res);
            for (int j = 0; j < n->n_out; j++)
                out_v[j] = S->outputs[j];
            br[b] = finish_sub(x, &y, S, 0, NULL, NULL, n->n_out, res, out_v, b ? "else" : "then");
            if (!br[b]) return x->st;
        }
        Onnx__NodeProto *nd = oari_xp_node(x, "If", 1, (const char *const[]){pred}, n->n_out, outs);
        oari_xp_set_graph(x, nd, "then_branch", br[0]);
        oari_xp_set_graph(x, nd, "else_branch", br[1]);
        return x->st;
    }
    /* while */
    const oar_graph *C = n->sub[0], *B = n->sub[1];
    int nv = n->n_out;
    const char *c0[1] = {0}, *body_in[MAX_CTRL_IO] = {0}, *fin[MAX_CTRL_IO] = {0},
               *cond_in[MAX_CTRL_IO] = {0};
    int fin_v[MAX_CTRL_IO] = {0};
    if (inline_sub(x, C, in, c0)) return x->st;
    const char *cond_init = as_bool(x, c0[0], C->values[C->outputs[0]].dtype);
    oari_xp y = sub_ctx(x);
    /* formal inputs: the iteration (unused), the condition (unused: the
     * body recomputes it), the vars */
    fin[0] = oari_xp_tmp(&y);
    fin[1] = oari_xp_tmp(&y);
    for (int j = 0; j < nv; j++)
        body_in[j] = fin[2 + j] = oari_xp_tmp(&y);
    for (int i = nv; i < n->n_in; i++)
        body_in[i] = in[i];
    inline_sub(&y, B, body_in, res + 1);
    for (int j = 0; j < nv; j++)
        cond_in[j] = res[1 + j];
    for (int i = nv; i < n->n_in; i++)
        cond_in[i] = in[i];
    inline_sub(&y, C, cond_in, c0);
    if (y.st) return x->st = y.st;
    res[0] = as_bool(&y, c0[0], C->values[C->outputs[0]].dtype);
    /* types: iteration int64 [], condition bool [] -- typed from scalar stand-ins below */
    out_v[0] = B->outputs[0]; /* a stand-in: the condition's type is written below */
    for (int j = 0; j < nv; j++) {
        fin_v[2 + j] = B->inputs[j];
        out_v[1 + j] = B->outputs[j];
    }
    Onnx__GraphProto *body = finish_sub(x, &y, B, 0, NULL, NULL, 1 + nv, res, out_v, "body");
    if (!body) return x->st;
    /* the formal inputs and the condition output's type, written by hand */
    Onnx__ValueInfoProto **bin = oari_xp_alloc(x, (size_t)(2 + nv) * sizeof *bin);
    if (!bin) return x->st;
    oari_xp z = *x;
    z.g = B;
    for (int j = 0; j < nv; j++)
        bin[2 + j] = oari_xp_value_info(&z, fin[2 + j], fin_v[2 + j]);
    x->mem = z.mem;
    x->st = z.st;
    static const int elem[2] = {ONNX__TENSOR_PROTO__DATA_TYPE__INT64,
                                ONNX__TENSOR_PROTO__DATA_TYPE__BOOL};
    for (int k = 0; k < 2 && !x->st; k++) {
        Onnx__ValueInfoProto *vi = oari_xp_alloc(x, sizeof *vi);
        Onnx__TypeProto *tp = oari_xp_alloc(x, sizeof *tp);
        Onnx__TypeProto__Tensor *tt = oari_xp_alloc(x, sizeof *tt);
        Onnx__TensorShapeProto *sp = oari_xp_alloc(x, sizeof *sp);
        if (!vi || !tp || !tt || !sp) return x->st;
        onnx__value_info_proto__init(vi);
        onnx__type_proto__init(tp);
        onnx__type_proto__tensor__init(tt);
        onnx__tensor_shape_proto__init(sp);
        tt->has_elem_type = 1;
        tt->elem_type = elem[k];
        tt->shape = sp;
        tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
        tp->tensor_type = tt;
        vi->name = (char *)fin[k];
        vi->type = tp;
        bin[k] = vi;
        if (k == 1) { /* the body's condition output: bool [] as well */
            Onnx__ValueInfoProto *vo = oari_xp_alloc(x, sizeof *vo);
            if (!vo) return x->st;
            *vo = *vi;
            vo->name = body->output[0]->name;
            body->output[0] = vo;
        }
    }
    if (x->st) return x->st;
    body->n_input = (size_t)(2 + nv);
    body->input = (Onnx__ValueInfoProto **)bin;
    const char *lin[MAX_CTRL_IO + 2];
    lin[0] = "";
    lin[1] = cond_init;
    for (int j = 0; j < nv; j++)
        lin[2 + j] = in[j];
    Onnx__NodeProto *nd = oari_xp_node(x, "Loop", 2 + nv, lin, nv, outs);
    oari_xp_set_graph(x, nd, "body", body);
    return x->st;
}

/* ---- graph, names, model -------------------------------------------------------- */

/* ONNX export (include/oar/onnx.h): an oar graph becomes a ModelProto
 * (default domain, opset 13..17) packed with protobuf-c. This file walks the
 * graph: it names the values, writes the used constants as initializers
 * (raw_data, little-endian), maps each live node through its row of the
 * export table (onnx_export_table.c: a direct mapping or an emitter), and
 * assembles and writes the model. Dynamic dims become dim_params named by
 * the graph's symbols. The builders are in onnx_export_proto.c. */
#define OARI_ONNX_PROTO
#include "onnx_export_internal.h"
#include "../io/file.h" /* write_file: the save protocol */
#include "../ops/custom_op.h" /* a custom node's name */
#include <errno.h>
#include <oar/onnx.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define IR_VERSION 8 /* ONNX 1.10..1.13 (opsets 15..18); readers accept it for 13 and 14 too */

/* The ONNX names of node n's inputs (NULL for absent optional ones). */
static const char *in_name(oari_xp *x, const oari_gnode *n, int i) {
    return i < n->n_in && n->in[i] >= 0 ? x->names[n->in[i]] : NULL;
}

/* A direct row: one node of the row's type, the inputs (an absent optional
 * one omitted as "") and outputs in order. */
static int export_direct(oari_xp *x, const oari_xnode *e) {
    const oari_gnode *n = e->n;
    const char *in[OARI_MAX_IN], *out[OARI_GMAX_OUT];
    for (int i = 0; i < n->n_in; i++)
        in[i] = n->in[i] >= 0 ? x->names[n->in[i]] : "";
    for (int j = 0; j < n->n_out; j++)
        out[j] = x->names[n->out[j]];
    oari_xp_node(x, e->row->onnx, n->n_in, in, n->n_out, out);
    return x->st;
}

int oari_xp_export_node(oari_xp *x, int ni) {
    const oar_graph *g = x->g;
    const oari_gnode *n = &g->nodes[ni];
    x->node = ni;
    char msg[320];
    if (n->op == OARI_OP_custom) /* name the user's op, not the row all custom ops share */
        return oari_xp_fail(x, "the custom op \"%s\" has no ONNX equivalent (its kernel is user code)",
                            oari_custom_name_of(&n->attrs));
    const oari_onnx_xrow *row = oari_onnx_xfind(n->op, x->opset, msg, sizeof msg);
    if (!row) return oari_xp_fail(x, "%s", msg);
    /* what ONNX cannot say unless the row's emitter handles it (a direct row
     * writes every output) */
    bool outputs = !row->emit || (row->flags & OARI_XF_OUTPUTS);
    for (int j = 1; j < n->n_out && !outputs; j++)
        if (x->uses[n->out[j]])
            return oari_xp_fail(x, "its output %d is used; only output 0 has an ONNX equivalent",
                                j);
    for (int k = 0; k < n->attrs.ni && !(row->flags & OARI_XF_SYM_ATTRS); k++)
        if (n->isym[k] >= 0)
            return oari_xp_fail(x, "attribute %d follows the dynamic dim '%s'", k,
                                g->syms[n->isym[k]].name);
    const oari_gvalue *iv = n->n_in && n->in[0] >= 0 ? &g->values[n->in[0]] : NULL;
    oari_xnode e = {
        .n = n,
        .row = row,
        .iv = iv,
        .ov = n->n_out ? &g->values[n->out[0]] : NULL,
        .X = in_name(x, n, 0),
        .X1 = in_name(x, n, 1),
        .X2 = in_name(x, n, 2),
        .Y = n->n_out ? x->names[n->out[0]] : NULL,
        .a = n->attrs.i,
        .f = n->attrs.f,
        .dt = iv ? iv->dtype : OAR_DTYPE_INVALID,
        .rank = iv ? iv->ndim : 0,
    };
    return row->emit ? row->emit(x, &e) : export_direct(x, &e);
}

/* ---- names, model ---------------------------------------------------------------- */

static bool name_taken(oari_xp *x, int n, const char *s) {
    for (int v = 0; v < n; v++)
        if (x->names[v] && !strcmp(x->names[v], s)) return true;
    return false;
}

/* Names every value, first come first served among: graph inputs, node
 * values that are graph outputs (the output's name), constants (their
 * names); a name already taken gets ".v<id>". Other values are "/v<id>". */
static void assign_names(oari_xp *x, const int *out_owner) {
    const oar_graph *g = x->g;
    for (int pass = 0; pass < 4 && !x->st; pass++) {
        for (int v = 0; v < g->n_values && !x->st; v++) {
            const oari_gvalue *gv = &g->values[v];
            const char *base = NULL;
            if (pass == 0 && gv->kind == OARI_V_INPUT)
                base = gv->name ? gv->name : "input";
            else if (pass == 1 && gv->kind == OARI_V_NODE && out_owner[v] >= 0)
                base = g->output_names[out_owner[v]];
            else if (pass == 2 && gv->kind == OARI_V_CONST)
                base = gv->name ? gv->name : "const";
            else if (pass == 3 && !x->names[v])
                x->names[v] = oari_xp_str(x, "/v%d", v);
            if (base)
                x->names[v] = name_taken(x, g->n_values, base) ? oari_xp_str(x, "%s.v%d", base, v)
                                                               : oari_xp_str(x, "%s", base);
        }
    }
}

/* Writes n bytes to path through the save protocol (src/core/save.h). */
static int write_file(const char *path, const void *buf, size_t n) {
    return oari_file_save(path, buf, n, "oar_onnx_export");
}

static int build_model(oari_xp *x, Onnx__ModelProto *m) {
    const oar_graph *g = x->g;
    int *owner = oari_calloc((size_t)(g->n_values ? g->n_values : 1), sizeof *owner);
    if (!owner) return x->st = OAR_ERR_NOMEM;
    for (int v = 0; v < g->n_values; v++)
        owner[v] = -1;
    for (int j = g->n_outputs - 1; j >= 0; j--)
        owner[g->outputs[j]] = j; /* the first output naming v */
    assign_names(x, owner);
    /* graph inputs */
    Onnx__GraphProto *gp = oari_xp_alloc(x, sizeof *gp);
    Onnx__ValueInfoProto **ins =
        oari_xp_alloc(x, (size_t)(g->n_inputs ? g->n_inputs : 1) * sizeof *ins);
    Onnx__ValueInfoProto **outs =
        oari_xp_alloc(x, (size_t)(g->n_outputs ? g->n_outputs : 1) * sizeof *outs);
    if (!gp || !ins || !outs) goto done;
    onnx__graph_proto__init(gp);
    gp->name = "oar";
    for (int i = 0; i < g->n_inputs; i++)
        if (!(ins[i] = oari_xp_value_info(x, x->names[g->inputs[i]], g->inputs[i]))) goto done;
    /* used constants */
    oari_xp_quant_param_uses(x);
    for (int v = 0; v < g->n_values && !x->st; v++)
        if (g->values[v].kind == OARI_V_CONST && x->uses[v]) oari_xp_const(x, v);
    /* nodes, in order */
    for (int i = 0; i < g->n_nodes && !x->st; i++)
        if (!g->nodes[i].dead) oari_xp_export_node(x, i);
    /* outputs: a value named otherwise (an input, a constant, another output's value) gets an
     * Identity */
    x->node = -1;
    for (int j = 0; j < g->n_outputs && !x->st; j++) {
        int v = g->outputs[j];
        const char *name = x->names[v];
        if (owner[v] != j || g->values[v].kind != OARI_V_NODE) {
            name = name_taken(x, g->n_values, g->output_names[j])
                       ? oari_xp_str(x, "%s.out%d", g->output_names[j], j)
                       : g->output_names[j];
            OP1("Identity", x->names[v], name);
        }
        if (!(outs[j] = oari_xp_value_info(x, name, v))) goto done;
    }
    if (x->st) goto done;
    gp->n_input = (size_t)g->n_inputs;
    gp->input = ins;
    gp->n_output = (size_t)g->n_outputs;
    gp->output = outs;
    gp->n_node = x->n_nodes;
    gp->node = x->nodes;
    gp->n_initializer = x->n_inits;
    gp->initializer = x->inits;
    Onnx__OperatorSetIdProto *os = oari_xp_alloc(x, sizeof *os);
    Onnx__OperatorSetIdProto **osa = oari_xp_alloc(x, sizeof *osa);
    if (!os || !osa) goto done;
    onnx__operator_set_id_proto__init(os);
    os->domain = "";
    os->has_version = 1;
    os->version = x->opset;
    osa[0] = os;
    m->has_ir_version = 1;
    m->ir_version = IR_VERSION;
    m->producer_name = "oar";
    m->n_opset_import = 1;
    m->opset_import = osa;
    m->graph = gp;
done:
    oari_free(owner, (size_t)(g->n_values ? g->n_values : 1) * sizeof *owner);
    if (x->st == OAR_ERR_NOMEM) oari_nomem("oar_onnx_export");
    return x->st;
}

OAR_API int oar_onnx_export(const oar_graph *g, const char *path,
                            const oar_onnx_export_options *opt) {
    if (!g || !path)
        return oari_error(OAR_ERR_INVALID, "oar_onnx_export: NULL %s", g ? "path" : "graph");
    int opset = opt && opt->opset ? opt->opset : OARI_ONNX_XDEFAULT;
    if (opset < OARI_ONNX_XMIN || opset > OARI_ONNX_XMAX)
        return oari_error(OAR_ERR_UNSUPPORTED,
                          "oar_onnx_export: opset %d is not supported (%d..%d)", opset,
                          OARI_ONNX_XMIN, OARI_ONNX_XMAX);
    oar_graph *qdq = NULL; /* the QDQ form of g's int8 products, unless asked for the operator form */
    if (!(opt && opt->integer_ops) && (oar_graph_count_op(g, "qmatmul") || oar_graph_count_op(g, "qconv2d"))) {
        if (!(qdq = oari_onnx_qdq_form(g))) return oari_fail_status();
        g = qdq;
    }
    oari_xp x = {.g = g, .opset = opset, .node = -1};
    size_t nv = (size_t)(g->n_values ? g->n_values : 1);
    x.names = oari_calloc(nv, sizeof *x.names);
    x.uses = oari_calloc(nv, sizeof *x.uses);
    int st;
    if (!x.names || !x.uses) {
        st = oari_fail_status();
    } else {
        oari_graph_use_counts(g, x.uses);
        Onnx__ModelProto m;
        onnx__model_proto__init(&m);
        st = build_model(&x, &m);
        size_t n = st ? 0 : onnx__model_proto__get_packed_size(&m);
        uint8_t *buf = NULL;
        if (!st && n > (size_t)INT32_MAX) /* protobuf's limit; external data is not written */
            st = oari_error(OAR_ERR_UNSUPPORTED,
                            "oar_onnx_export: the model is %zu bytes, over protobuf's 2 GiB limit "
                            "(external data is not supported)",
                            n);
        if (!st && !(buf = oari_malloc(n ? n : 1))) st = oari_fail_status();
        if (!st) {
            onnx__model_proto__pack(&m, buf);
            st = write_file(path, buf, n);
        }
        if (buf) oari_free(buf, n ? n : 1);
    }
    oari_xp_free(&x);
    oari_free(x.names, nv * sizeof *x.names);
    oari_free(x.uses, nv * sizeof *x.uses);
    oar_graph_free(qdq);
    return st;
}

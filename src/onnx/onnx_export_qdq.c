/* ONNX export, the QDQ form: before export, each int8 product that
 * oar_graph_quantize (or the QDQ import) wrote,
 *
 *     xq = quantize(x; s_x, z_x)                      per tensor
 *     y  = cast(qmatmul(xq, Wq) | qconv2d(xq, Wq), f32) * s
 *
 * with Wq an int8 constant and s a constant (one value, or one per output
 * channel), is rewritten on a copy of the graph as
 *
 *     y  = matmul | conv2d(dequantize(xq; s_x, z_x), dequantize(Wq; s / s_x, 0))
 *
 * which the exporter writes as QuantizeLinear -> DequantizeLinear ->
 * MatMul/Conv <- DequantizeLinear(int8 initializer). A conv's constant
 * bias added after the scale becomes the conv's bias input (ONNX Runtime
 * makes a QLinearConv of the group only then). This is the form ONNX
 * Runtime's quantize_static writes and fuses onto its own int8 kernels,
 * and that oar's importer folds back (onnx_qdq_fold.c). A product whose
 * neighbours are anything else keeps the operator form (MatMulInteger,
 * ConvInteger; onnx_export_quant.c). */
#define OARI_ONNX_PROTO
#include "onnx_export_internal.h"
#include <math.h>
#include <string.h>

typedef struct {
    int node, cast, mul; /* the q op, its cast to f32, the mul by s */
    int add, b;          /* a conv's bias add and the bias value, or -1 */
    int s;               /* the value of s */
    double sx;           /* the activation's scale */
    int64_t zx;
    int quant;           /* the activation's quantize node */
} qdq_site;

/* The only live node reading value v (uses[v] must be 1), or -1. */
static int only_user(const oar_graph *g, int v) {
    for (int i = 0; i < g->n_nodes; i++) {
        const oari_gnode *n = &g->nodes[i];
        if (n->dead) continue;
        for (int k = 0; k < n->n_in; k++)
            if (n->in[k] == v) return i;
    }
    return -1;
}

static bool const_scalar(const oar_graph *g, int v, double *out) {
    const oari_gvalue *gv = v >= 0 ? &g->values[v] : NULL;
    if (!gv || gv->kind != OARI_V_CONST || oar_tensor_numel(gv->constant) != 1) return false;
    *out = oar_tensor_item(gv->constant);
    return isfinite(*out);
}

/* Whether v is [1, o, 1, 1] or [o]: one value per output channel of a conv. */
static bool per_channel(const oari_gvalue *v, int64_t o) {
    return (v->ndim == 4 && v->shape[0] == 1 && v->shape[1] == o && v->shape[2] == 1 && v->shape[3] == 1) ||
           (v->ndim == 1 && v->shape[0] == o);
}

/* The constant bias added to conv site s's scaled output, if one is
 * (s->add, s->b; else left -1). */
static void bias_of(const oar_graph *g, qdq_site *s, int64_t o) {
    int a = only_user(g, g->nodes[s->mul].out[0]);
    const oari_gnode *n = a >= 0 ? &g->nodes[a] : NULL;
    if (!n || n->op != OARI_OP_add || n->n_in != 2) return;
    int b = n->in[0] == g->nodes[s->mul].out[0] ? n->in[1] : n->in[0];
    const oari_gvalue *bv = &g->values[b];
    if (bv->kind != OARI_V_CONST || bv->dtype != OAR_F32 || !per_channel(bv, o)) return;
    s->add = a, s->b = b;
}

/* Whether node i heads the pattern; fills *s. */
static bool match(const oar_graph *g, const int *uses, int i, qdq_site *s) {
    const oari_gnode *n = &g->nodes[i];
    if (n->dead || (n->op != OARI_OP_qmatmul && n->op != OARI_OP_qconv2d) || n->n_in != 2) return false;
    const oari_gvalue *xq = &g->values[n->in[0]], *w = &g->values[n->in[1]];
    if (w->kind != OARI_V_CONST || w->dtype != OAR_I8 || xq->kind != OARI_V_NODE) return false;
    const oari_gnode *q = &g->nodes[xq->producer];
    if (q->op != OARI_OP_quantize || q->n_in < 3 || q->attrs.i[0] != -1 || !const_scalar(g, q->in[1], &s->sx) ||
        !(s->sx > 0) || !const_scalar(g, q->in[2], &(double){0}) ||
        (int64_t)oar_tensor_item(g->values[q->in[2]].constant) != n->attrs.i[0])
        return false;
    s->zx = n->attrs.i[0];
    s->quant = xq->producer;
    if (uses[n->out[0]] != 1 || (s->cast = only_user(g, n->out[0])) < 0) return false;
    const oari_gnode *c = &g->nodes[s->cast];
    if (c->op != OARI_OP_cast || g->values[c->out[0]].dtype != OAR_F32 || uses[c->out[0]] != 1 ||
        (s->mul = only_user(g, c->out[0])) < 0)
        return false;
    const oari_gnode *m = &g->nodes[s->mul];
    if (m->op != OARI_OP_mul || m->n_in != 2) return false;
    s->s = m->in[0] == c->out[0] ? m->in[1] : m->in[0];
    const oari_gvalue *sv = &g->values[s->s];
    if (sv->kind != OARI_V_CONST || !oar_dtype_is_float(sv->dtype) || !oar_tensor_data(sv->constant)) return false;
    /* s: one value, or one per output channel where the output has it
     * (matmul: the last dim; conv: dim 1 of [1, o, 1, 1]) */
    int64_t o = w->shape[n->op == OARI_OP_qmatmul ? 1 : 0], k = oar_tensor_numel(sv->constant);
    if (k != 1 && k != o) return false;
    if (k != 1 && n->op == OARI_OP_qmatmul && !(sv->ndim >= 1 && sv->shape[sv->ndim - 1] == o)) return false;
    if (k != 1 && n->op == OARI_OP_qconv2d && !per_channel(sv, o)) return false;
    s->add = s->b = -1;
    if (n->op == OARI_OP_qconv2d && uses[m->out[0]] == 1) bias_of(g, s, o);
    return true;
}

/* A symbolic tensor standing for value v of the graph being traced. */
static oar_tensor *bound(oar_graph *g, int v) {
    oar_tensor *t = oari_pool_adopt(oari_graph_symbolic(&g->values[v]));
    if (t) oari_trace_bind(t, v);
    return t;
}

/* The float product of site s traced onto g; its value, or -1. */
static int unfold(oar_graph *g, const qdq_site *s) {
    oari_gnode n = g->nodes[s->node]; /* a copy: tracing moves g->nodes */
    const oari_gvalue *w = &g->values[n.in[1]];
    oar_dtype xdt = g->values[n.in[0]].dtype;
    int64_t o = w->shape[n.op == OARI_OP_qmatmul ? 1 : 0];
    /* the weight's scale, s / s_x, one per output channel */
    oar_tensor *ws = oar_reshape(oar_cast(g->values[s->s].constant, OAR_F64), 1,
                                 (int64_t[]){oar_tensor_numel(g->values[s->s].constant)});
    ws = oar_cast(oar_div_scalar(oar_expand(ws, 1, (int64_t[]){o}), s->sx), OAR_F32);
    oar_tensor *xd = oar_dequantize(bound(g, n.in[0]), oar_full(OAR_F32, 0, NULL, s->sx),
                                    oar_full(xdt, 0, NULL, (double)s->zx), -1);
    oar_tensor *wd = oar_dequantize(bound(g, n.in[1]), ws, oar_zeros(OAR_I8, 1, (int64_t[]){o}),
                                    n.op == OARI_OP_qmatmul ? 1 : 0);
    oar_tensor *y;
    if (n.op == OARI_OP_qmatmul) {
        y = oar_matmul(xd, wd);
    } else {
        const int64_t *a = n.attrs.i; /* zero point, stride h w, padding h w, dilation h w, groups */
        oar_tensor *b = s->b >= 0 ? oar_reshape(g->values[s->b].constant, 1, (int64_t[]){o}) : NULL;
        y = oar_conv2d(xd, wd, b, a + 1, a + 3, a + 5, a[7]);
    }
    return y ? oari_trace_value_of(y) : -1;
}

oar_graph *oari_onnx_qdq_form(const oar_graph *g0) {
    oar_graph *g = oar_graph_clone(g0);
    if (!g) return NULL;
    const int N0 = g->n_nodes;
    const size_t NV = (size_t)(g->n_values ? g->n_values : 1); /* (before tracing adds values) */
    int *uses = oari_calloc(NV, sizeof *uses);
    qdq_site *sites = oari_calloc((size_t)(N0 ? N0 : 1), sizeof *sites);
    int *repl = oari_calloc((size_t)(N0 ? N0 : 1), sizeof *repl);
    int *first_new = oari_calloc((size_t)N0 + 1, sizeof *first_new), *order = NULL;
    size_t n_order = 0;
    int ns = 0, st = 0;
    if (!uses || !sites || !repl || !first_new) st = oari_fail_status();
    if (!st) oari_graph_use_counts(g, uses);
    for (int i = 0; i < N0 && !st; i++)
        if (match(g, uses, i, &sites[ns])) sites[ns++].node = i;
    void *tracer = !st && ns ? oari_trace_attach(g) : NULL;
    if (!st && ns && !tracer) st = OAR_ERR_STATE;
    oar_pool *pool = tracer ? oar_pool_push() : NULL;
    for (int k = 0; k < ns && !st; k++) {
        first_new[k] = g->n_nodes;
        if ((repl[k] = unfold(g, &sites[k])) < 0) st = oari_fail_status();
    }
    if (tracer) {
        first_new[ns] = g->n_nodes;
        oari_trace_detach(tracer);
    }
    if (pool) oar_pool_pop(pool);
    if (!st && ns) {
        /* each site's new nodes where its mul was (after everything they read) */
        n_order = (size_t)g->n_nodes;
        if (!(order = oari_calloc(n_order, sizeof *order))) st = oari_fail_status();
        int at = 0;
        for (int i = 0; i < N0 && !st; i++) {
            order[at++] = i;
            for (int k = 0; k < ns; k++)
                if ((sites[k].add >= 0 ? sites[k].add : sites[k].mul) == i)
                    for (int j = first_new[k]; j < first_new[k + 1]; j++) order[at++] = j;
        }
        for (int k = 0; k < ns && !st; k++) {
            int last = sites[k].add >= 0 ? sites[k].add : sites[k].mul;
            oari_graph_replace_uses(g, g->nodes[last].out[0], repl[k]);
            if (sites[k].add >= 0) oari_graph_kill(g, sites[k].add);
            oari_graph_kill(g, sites[k].mul);
            oari_graph_kill(g, sites[k].cast);
            oari_graph_kill(g, sites[k].node);
        }
        if (!st && !(st = oari_graph_reorder(g, order)) && (st = oari_pass_dce(g)) >= 0)
            st = oari_graph_compact(g);
    }
    if (order) oari_free(order, n_order * sizeof *order);
    if (uses) oari_free(uses, NV * sizeof *uses);
    if (sites) oari_free(sites, (size_t)(N0 ? N0 : 1) * sizeof *sites);
    if (repl) oari_free(repl, (size_t)(N0 ? N0 : 1) * sizeof *repl);
    if (first_new) oari_free(first_new, ((size_t)N0 + 1) * sizeof *first_new);
    if (st) {
        oar_graph_free(g);
        return NULL;
    }
    return g;
}

/* Algebraic simplification: x*1, 1*x, x/1, x+0, 0+x, x-0 become x (when
 * the result has x's dtype and shape); permute of permute becomes one
 * permute (or nothing); view of view becomes one view; a view to x's own
 * shape becomes x; the transpose of a 2-D matmul used nowhere else becomes
 * the matmul of the transposes, (a b)^T = b^T a^T, which makes a weight
 * gradient contiguous (the GEMM reads transposed operands for free); and
 * ReLU's backward mask moves through max pooling (below). */
#include "../ir.h"

#include <string.h>

static bool same_meta(const oari_gvalue *a, const oari_gvalue *b) {
    return a->dtype == b->dtype && a->ndim == b->ndim &&
           !memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof *a->shape);
}

/* The node producing v if it is live and runs op, else NULL. */
static oari_gnode *producer(oar_graph *g, int v, oari_op op) {
    if (v < 0 || g->values[v].kind != OARI_V_NODE) return NULL;
    oari_gnode *p = &g->nodes[g->values[v].producer];
    return !p->dead && p->op == op ? p : NULL;
}

/* A value known to be contiguous: an input, a constant stored contiguous,
 * or a non-view node's output. */
static bool contiguous(oar_graph *g, int v) {
    const oari_gvalue *gv = &g->values[v];
    if (gv->kind == OARI_V_CONST) return oar_tensor_is_contiguous(gv->constant);
    if (gv->kind == OARI_V_INPUT) return true;
    return !(oari_gnode_def(&g->nodes[gv->producer])->flags & OARI_F_VIEW);
}

static bool is_identity(const oari_gnode *n) {
    for (int d = 0; d < n->attrs.ni; d++)
        if (n->attrs.i[d] != d) return false;
    return true;
}

/* A transpose view of 2-D value v placed at node index `at`; the new
 * value, or -1. */
static int insert_transpose(oar_graph *g, int at, int v) {
    const oari_gvalue *x = &g->values[v];
    oari_meta m = {.dtype = x->dtype, .ndim = 2, .shape = {x->shape[1], x->shape[0]}};
    oari_attrs a = {.ni = 2, .i = {1, 0}};
    int8_t sym[2] = {x->sym[1], x->sym[0]};
    int32_t smul[2] = {x->smul[1], x->smul[0]};
    if (oari_graph_insert_node(g, at, OARI_OP_permute, &a, 1, &v, 1, &m) < 0) return -1;
    oari_gvalue *t = &g->values[g->nodes[at].out[0]];
    memcpy(t->sym, sym, sizeof sym);
    memcpy(t->smul, smul, sizeof smul);
    return g->nodes[at].out[0];
}

/* permute(matmul(a, b), [1, 0]) -> matmul(b^T, a^T) when the product is
 * 2-D and used only there; returns the number of nodes inserted before
 * node i (2), 0 when the rule does not apply, or a negative status. */
static int transpose_of_matmul(oar_graph *g, int i, const int *uses) {
    oari_gnode *n = &g->nodes[i];
    int t = n->in[0];
    oari_gnode *p = producer(g, t, OARI_OP_matmul);
    if (!p || uses[t] != 1 || n->attrs.ni != 2 || n->attrs.i[0] != 1 || g->values[t].ndim != 2 ||
        g->values[p->in[0]].ndim != 2 || g->values[p->in[1]].ndim != 2)
        return 0;
    int at = g->values[t].producer, a = p->in[0], b = p->in[1];
    int bt = insert_transpose(g, at, b);
    int at_ = bt < 0 ? -1 : insert_transpose(g, at + 1, a);
    if (at_ < 0) return OAR_ERR_NOMEM;
    p = &g->nodes[at + 2]; /* the matmul, moved up two */
    p->in[0] = bt;
    p->in[1] = at_;
    n = &g->nodes[i + 2];
    oari_gvalue *tv = &g->values[t];
    const oari_gvalue *y = &g->values[n->out[0]];
    memcpy(tv->shape, y->shape, sizeof tv->shape);
    memcpy(tv->sym, y->sym, sizeof tv->sym);
    memcpy(tv->smul, y->smul, sizeof tv->smul);
    oari_graph_replace_uses(g, n->out[0], t);
    n->dead = true;
    return 2;
}

/* mul(max_pool2d_backward(g, idx), sign(r)) with idx the indices of
 * p = max_pool2d(r) -> max_pool2d_backward(g * sign(p), idx): the
 * backward only writes at each window's argmax, where r equals p (and
 * sums overlapping windows that all picked that element), so the mask can
 * be taken on the pooled values. ReLU's backward is that mask: r, the
 * pre-pool activation, then dies after the forward pass instead of being
 * kept for backward. Returns the nodes inserted before node i (2), 0, or a
 * negative status. */
static int mask_through_max_pool(oar_graph *g, int i, const int *uses) {
    oari_gnode *n = &g->nodes[i];
    for (int side = 0; side < 2; side++) {
        int a = n->in[side], s = n->in[1 - side];
        oari_gnode *bw = producer(g, a, OARI_OP_max_pool2d_backward), *sg = producer(g, s, OARI_OP_sign);
        if (!bw || !sg || uses[a] != 1 || !same_meta(&g->values[a], &g->values[s]) ||
            !same_meta(&g->values[a], &g->values[n->out[0]]))
            continue;
        int idx = bw->in[1];
        oari_gnode *pool = producer(g, idx, OARI_OP_max_pool2d);
        if (!pool || pool->out[1] != idx || pool->in[0] != sg->in[0]) continue;
        int at = g->values[a].producer, pooled = pool->out[0], grad = bw->in[0];
        const oari_gvalue *pv = &g->values[pooled];
        oari_meta m = {.dtype = pv->dtype, .ndim = pv->ndim};
        memcpy(m.shape, pv->shape, sizeof m.shape);
        if (oari_graph_insert_node(g, at, OARI_OP_sign, NULL, 1, &pooled, 1, &m) < 0) return OAR_ERR_NOMEM;
        int mask = g->nodes[at].out[0];
        int mul_in[2] = {grad, mask};
        if (oari_graph_insert_node(g, at + 1, OARI_OP_mul, NULL, 2, mul_in, 1, &m) < 0) return OAR_ERR_NOMEM;
        int masked = g->nodes[at + 1].out[0];
        for (int k = 0; k < 2; k++) { /* the new values take the pooled value's symbolic dims */
            oari_gvalue *v = &g->values[k ? masked : mask];
            memcpy(v->sym, g->values[pooled].sym, sizeof v->sym);
            memcpy(v->smul, g->values[pooled].smul, sizeof v->smul);
        }
        g->nodes[at + 2].in[0] = masked; /* the backward, moved up two */
        n = &g->nodes[i + 2];
        oari_graph_replace_uses(g, n->out[0], a);
        n->dead = true;
        return 2;
    }
    return 0;
}

int oari_pass_simplify(oar_graph *g) {
    int changes = 0;
    int *uses = oari_malloc((size_t)(g->n_values ? g->n_values : 1) * sizeof *uses);
    if (!uses) return OAR_ERR_NOMEM;
    oari_graph_use_counts(g, uses);
    for (int i = 0; i < g->n_nodes; i++) {
        oari_gnode *n = &g->nodes[i];
        if (n->dead) continue;
        int out = n->out[0], keep = -1, inserted = 0; /* nodes a rewrite placed before i */
        switch (n->op) {
        case OARI_OP_mul: {
            if (oari_graph_const_is(g, n->in[1], 1)) keep = n->in[0];
            else if (oari_graph_const_is(g, n->in[0], 1)) keep = n->in[1];
            if (keep >= 0) break;
            inserted = mask_through_max_pool(g, i, uses);
            break;
        }
        case OARI_OP_add:
            if (oari_graph_const_is(g, n->in[1], 0)) keep = n->in[0];
            else if (oari_graph_const_is(g, n->in[0], 0)) keep = n->in[1];
            break;
        case OARI_OP_sub:
            if (oari_graph_const_is(g, n->in[1], 0)) keep = n->in[0];
            break;
        case OARI_OP_div:
            if (oari_graph_const_is(g, n->in[1], 1)) keep = n->in[0];
            break;
        case OARI_OP_permute: {
            oari_gnode *p = producer(g, n->in[0], OARI_OP_permute);
            if (p) { /* permute(permute(x, a), b) = permute(x, a[b]) */
                int64_t c[OAR_MAX_DIMS];
                for (int d = 0; d < n->attrs.ni; d++) c[d] = p->attrs.i[n->attrs.i[d]];
                memcpy(n->attrs.i, c, (size_t)n->attrs.ni * sizeof *c);
                n->in[0] = p->in[0];
                changes++;
            }
            if (is_identity(n)) keep = n->in[0];
            if (keep < 0 && !p) inserted = transpose_of_matmul(g, i, uses);
            break;
        }
        case OARI_OP_view: {
            oari_gnode *p = producer(g, n->in[0], OARI_OP_view);
            if (p && contiguous(g, p->in[0])) {
                n->in[0] = p->in[0];
                changes++;
            }
            if (contiguous(g, n->in[0]) && same_meta(&g->values[n->in[0]], &g->values[out]))
                keep = n->in[0];
            break;
        }
        default:
            break;
        }
        if (inserted < 0) {
            oari_free(uses, (size_t)(g->n_values ? g->n_values : 1) * sizeof *uses);
            return inserted;
        }
        if (inserted) { /* node i moved to i + inserted and is dead */
            i += inserted;
            changes++;
            continue;
        }
        if (keep >= 0 && same_meta(&g->values[keep], &g->values[out])) {
            oari_graph_replace_uses(g, out, keep);
            n->dead = true;
            changes++;
        }
    }
    oari_free(uses, (size_t)(g->n_values ? g->n_values : 1) * sizeof *uses);
    int st = oari_graph_compact(g);
    return st ? st : changes;
}

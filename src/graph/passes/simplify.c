/* Algebraic simplification: x*1, 1*x, x/1, x+0, 0+x, x-0 become x (when
 * the result has x's dtype and shape); permute of permute becomes one
 * permute (or nothing); view of view becomes one view; a view to x's own
 * shape becomes x. */
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

int oari_pass_simplify(oar_graph *g) {
    int changes = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        oari_gnode *n = &g->nodes[i];
        if (n->dead) continue;
        int out = n->out[0], keep = -1;
        switch (n->op) {
        case OARI_OP_mul:
            if (oari_graph_const_is(g, n->in[1], 1)) keep = n->in[0];
            else if (oari_graph_const_is(g, n->in[0], 1)) keep = n->in[1];
            break;
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
        if (keep >= 0 && same_meta(&g->values[keep], &g->values[out])) {
            oari_graph_replace_uses(g, out, keep);
            n->dead = true;
            changes++;
        }
    }
    int st = oari_graph_compact(g);
    return st ? st : changes;
}

/* Inference: drops dropout traced in training mode. oar_dropout builds
 * x * (bernoulli(keep) * 1/(1-p)); at inference the product is x. (Traced
 * in eval mode, dropout leaves no node at all.) */
#include "../ir.h"

static oari_gnode *producer(oar_graph *g, int v, oari_op op) {
    if (v < 0 || g->values[v].kind != OARI_V_NODE) return NULL;
    oari_gnode *p = &g->nodes[g->values[v].producer];
    return !p->dead && p->op == op ? p : NULL;
}

/* True if v is bernoulli(...) times a constant. */
static bool is_mask(oar_graph *g, int v) {
    oari_gnode *m = producer(g, v, OARI_OP_mul);
    if (!m) return false;
    for (int k = 0; k < 2; k++)
        if (producer(g, m->in[k], OARI_OP_bernoulli) && g->values[m->in[1 - k]].kind == OARI_V_CONST)
            return true;
    return false;
}

int oari_pass_drop_dropout(oar_graph *g) {
    int changes = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        oari_gnode *n = &g->nodes[i];
        if (n->dead || n->op != OARI_OP_mul) continue;
        for (int k = 0; k < 2; k++) {
            int x = n->in[1 - k];
            const oari_gvalue *xv = &g->values[x], *ov = &g->values[n->out[0]];
            if (!is_mask(g, n->in[k]) || xv->dtype != ov->dtype || xv->ndim != ov->ndim) continue;
            oari_graph_replace_uses(g, n->out[0], x);
            n->dead = true;
            changes++;
            break;
        }
    }
    if (changes) {
        int st = oari_pass_dce(g);
        if (st < 0) return st;
    }
    return changes;
}

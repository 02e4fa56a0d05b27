/* Common subexpression elimination: a node with the same op, attributes
 * and inputs as an earlier one (and not random, and neither a recompute
 * copy: merging it would keep the original's output alive) reuses its
 * outputs; equal small constants (same dtype, shape and bytes) become one. */
#include "../ir.h"

#include <string.h>

static bool same_node(const oari_gnode *a, const oari_gnode *b) {
    if (a->op != b->op || a->n_in != b->n_in || a->attrs.ni != b->attrs.ni || a->attrs.nf != b->attrs.nf)
        return false;
    if (memcmp(a->in, b->in, (size_t)a->n_in * sizeof *a->in)) return false;
    if (memcmp(a->attrs.i, b->attrs.i, (size_t)a->attrs.ni * sizeof *a->attrs.i)) return false;
    if (memcmp(a->isym, b->isym, sizeof a->isym) || memcmp(a->imul, b->imul, sizeof a->imul)) return false;
    for (int k = 0; k < a->attrs.nf; k++)
        if (memcmp(&a->attrs.f[k], &b->attrs.f[k], sizeof(double))) return false;
    return true;
}

static bool same_const(const oar_tensor *a, const oar_tensor *b) {
    if (a->dtype != b->dtype || a->ndim != b->ndim || a->numel != b->numel || a->numel > 4096) return false;
    if (memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof *a->shape)) return false;
    if (!oar_tensor_is_contiguous(a) || !oar_tensor_is_contiguous(b)) return false;
    const void *pa = oar_tensor_data(a), *pb = oar_tensor_data(b);
    if (!pa || !pb) return false;
    return a->wrapped_number == b->wrapped_number &&
           !memcmp(pa, pb, (size_t)a->numel * oar_dtype_size(a->dtype));
}

int oari_pass_cse(oar_graph *g) {
    int changes = 0;
    for (int v = 0; v < g->n_values; v++) {
        if (g->values[v].kind != OARI_V_CONST) continue;
        for (int w = 0; w < v; w++) {
            if (g->values[w].kind != OARI_V_CONST || !same_const(g->values[v].constant, g->values[w].constant))
                continue;
            oari_graph_replace_uses(g, v, w);
            changes++;
            break;
        }
    }
    for (int i = 0; i < g->n_nodes; i++) {
        oari_gnode *n = &g->nodes[i];
        if (n->dead || n->recompute || (oari_gnode_flags(n) & OARI_F_RANDOM)) continue;
        for (int j = 0; j < i; j++) {
            oari_gnode *m = &g->nodes[j];
            if (m->dead || m->recompute || !same_node(n, m)) continue;
            for (int o = 0; o < n->n_out; o++) oari_graph_replace_uses(g, n->out[o], m->out[o]);
            n->dead = true;
            changes++;
            break;
        }
    }
    int st = oari_graph_compact(g);
    return st ? st : changes;
}

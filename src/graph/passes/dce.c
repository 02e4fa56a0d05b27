/* Dead code elimination: removes nodes none of whose outputs is used by a
 * live node or a graph output (every node is pure: in-place writes were
 * renamed to new values by the tracer), then unused constants. */
#include "../ir.h"

int oari_pass_dce(oar_graph *g) {
    int *uses = oari_malloc((size_t)(g->n_values ? g->n_values : 1) * sizeof *uses);
    if (!uses) return oari_fail_status();
    oari_graph_use_counts(g, uses);
    int removed = 0;
    for (int i = g->n_nodes - 1; i >= 0; i--) {
        oari_gnode *n = &g->nodes[i];
        if (n->dead) continue;
        bool used = false;
        for (int j = 0; j < n->n_out; j++) used = used || uses[n->out[j]] > 0;
        if (used) continue;
        n->dead = true;
        removed++;
        for (int k = 0; k < n->n_in; k++)
            if (n->in[k] >= 0) uses[n->in[k]]--;
    }
    oari_free(uses, (size_t)(g->n_values ? g->n_values : 1) * sizeof *uses);
    int st = oari_graph_compact(g);
    return st ? st : removed;
}

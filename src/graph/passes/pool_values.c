/* Inference: a max_pool2d whose indices nothing reads (no node, no graph
 * output) becomes max_pool2d_values (src/ops/defs/conv.def), which writes
 * the values alone: the i64 indices are a third of the pool's bytes and
 * only its gradient reads them (ResNet's stem pool, a small CNN's pools at
 * batch 64). The values are max_pool2d's, bit for bit (the same kernel).
 * Run by the predictor after fuse_qlinear, which turns such pools on
 * quantized values into qmax_pool2d first. */
#include "../ir.h"

int oari_pass_pool_values(oar_graph *g) {
    size_t nbytes = (size_t)(g->n_values + 1) * sizeof(int);
    int *uses = oari_malloc(nbytes);
    if (!uses) return oari_fail_status();
    oari_graph_use_counts(g, uses);
    int changes = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        oari_gnode *n = &g->nodes[i];
        if (n->dead || n->op != OARI_OP_max_pool2d || n->n_out != 2 || n->out[1] < 0 || uses[n->out[1]] != 0)
            continue;
        n->op = OARI_OP_max_pool2d_values;
        n->n_out = 1, n->out[1] = -1; /* the indices' value, now unreferenced, goes in the compaction */
        changes++;
    }
    oari_free(uses, nbytes);
    int cst = changes ? oari_graph_compact(g) : 0;
    return cst ? cst : changes;
}

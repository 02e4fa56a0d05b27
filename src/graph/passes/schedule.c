/* Scheduling for memory: a node whose outputs only leave the graph (a
 * sink, like a train step's `next:w = w - lr * grad:w`) is moved, with the
 * producers that feed only it, to just after the last node that produces
 * or reads any of its inputs (through views too). There its inputs die:
 * a gradient no longer waits for the end of backward to be consumed, and
 * the sink is the last reader of the parameter it updates, so the executor
 * may write it over the parameter (oar_executor_donate). Values are
 * unchanged; only the order moves, and only earlier. */
#include "../ir.h"

#include <string.h>

/* The value whose buffer v uses: v itself, or the root of a view's input. */
static int root_of(const oar_graph *g, int v) {
    while (g->values[v].kind == OARI_V_NODE) {
        const oari_gnode *n = &g->nodes[g->values[v].producer];
        if (!(oari_gnode_def(n)->flags & OARI_F_VIEW) || n->in[0] < 0) break;
        v = n->in[0];
    }
    return v;
}

/* Moves the nodes marked in `chain` that lie after node `after` (kept in
 * their order) to just after it. perm is scratch of n_nodes ints. */
static int move_after(oar_graph *g, const bool *chain, int after, int *perm) {
    int nn = g->n_nodes, m = 0;
    for (int i = 0; i <= after; i++) perm[m++] = i;
    for (int i = after + 1; i < nn; i++)
        if (chain[i]) perm[m++] = i;
    for (int i = after + 1; i < nn; i++)
        if (!chain[i]) perm[m++] = i;
    return oari_graph_reorder(g, perm);
}

/* An elementwise op or a view: cheap to move, so it may join a chain
 * even when its output also leaves the graph (an optimizer's next moment,
 * read by the parameter's update). */
static bool cheap(const oari_gnode *n) {
    const oari_op_def *def = oari_gnode_def(n);
    return def->fusion == OARI_FUSE_ELEMWISE || def->fusion == OARI_FUSE_BROADCAST || (def->flags & OARI_F_VIEW);
}

/* Marks in chain[] sink s and the producers whose outputs feed only the
 * chain (and leave the graph nowhere, unless cheap), walking back from s. */
static void find_chain(const oar_graph *g, int s, const int *uses, const int *outs, bool *chain,
                       int *chain_uses) {
    memset(chain, 0, (size_t)g->n_nodes * sizeof *chain);
    memset(chain_uses, 0, (size_t)g->n_values * sizeof *chain_uses);
    chain[s] = true;
    for (int i = s; i >= 0; i--) {
        const oari_gnode *n = &g->nodes[i];
        if (i < s) {
            bool only = n->n_out > 0;
            for (int j = 0; j < n->n_out && only; j++) {
                int v = n->out[j];
                only = (!outs[v] || cheap(n)) && uses[v] > 0 && chain_uses[v] == uses[v];
            }
            chain[i] = only;
        }
        if (chain[i])
            for (int k = 0; k < n->n_in; k++)
                if (n->in[k] >= 0) chain_uses[n->in[k]]++;
    }
}

int oari_pass_schedule(oar_graph *g) {
    int nn = g->n_nodes, nv = g->n_values, moved = 0, st = 0, n_sinks = 0;
    size_t vsz = (size_t)(nv ? nv : 1), nsz = (size_t)(nn ? nn : 1);
    int *uses = oari_malloc(vsz * sizeof *uses);       /* uses by nodes */
    int *outs = oari_calloc(vsz, sizeof *outs);        /* uses as graph outputs */
    int *chain_uses = oari_malloc(vsz * sizeof *chain_uses);
    int *root = oari_malloc(vsz * sizeof *root);
    int *last = oari_malloc(vsz * sizeof *last);       /* per root: last node touching it */
    int *sinks = oari_malloc(nsz * sizeof *sinks);     /* each sink's first output value */
    int *perm = oari_malloc(nsz * sizeof *perm);
    bool *chain = oari_malloc(nsz * sizeof *chain);
    bool *in_a_chain = oari_calloc(vsz, sizeof *in_a_chain);
    if (!uses || !outs || !chain_uses || !root || !last || !sinks || !perm || !chain || !in_a_chain) {
        st = oari_fail_status();
        goto done;
    }
    for (int j = 0; j < g->n_outputs; j++) outs[g->outputs[j]]++;
    oari_graph_use_counts(g, uses);
    for (int v = 0; v < nv; v++) {
        uses[v] -= outs[v];
        root[v] = root_of(g, v);
    }
    for (int i = 0; i < nn; i++) {
        const oari_gnode *n = &g->nodes[i];
        bool sink = false, used = false;
        for (int j = 0; j < n->n_out; j++) {
            sink = sink || outs[n->out[j]];
            used = used || uses[n->out[j]];
        }
        if (sink && !used) sinks[n_sinks++] = n->out[0];
    }
    /* every node of some chain, marked on its first output (positions move) */
    for (int q = 0; q < n_sinks; q++) {
        find_chain(g, g->values[sinks[q]].producer, uses, outs, chain, chain_uses);
        for (int i = 0; i < nn; i++)
            if (chain[i]) in_a_chain[g->nodes[i].out[0]] = true;
    }
    for (int q = 0; q < n_sinks; q++) {
        int s = g->values[sinks[q]].producer; /* where it is now */
        find_chain(g, s, uses, outs, chain, chain_uses);
        /* the last node outside the chain touching a buffer the chain
         * reads (constants never die and do not count) */
        for (int v = 0; v < nv; v++) last[v] = -1;
        for (int i = 0; i < nn; i++) {
            if (chain[i]) continue;
            const oari_gnode *n = &g->nodes[i];
            for (int k = 0; k < n->n_in; k++)
                if (n->in[k] >= 0) last[root[n->in[k]]] = i;
            for (int j = 0; j < n->n_out; j++) last[root[n->out[j]]] = i;
        }
        int after = -1;
        for (int i = 0; i <= s; i++) {
            if (!chain[i]) continue;
            const oari_gnode *n = &g->nodes[i];
            for (int k = 0; k < n->n_in; k++) {
                int v = n->in[k];
                if (v < 0 || g->values[root[v]].kind == OARI_V_CONST) continue;
                if (g->values[v].kind == OARI_V_NODE && chain[g->values[v].producer]) continue;
                if (last[root[v]] > after) after = last[root[v]];
            }
        }
        /* already placed when only chains (this one or other sinks') lie
         * between `after` and s: moving past those gains nothing */
        bool placed = true;
        for (int i = after + 1; i < s && placed; i++) placed = chain[i] || in_a_chain[g->nodes[i].out[0]];
        if (placed) continue;
        if ((st = move_after(g, chain, after, perm))) break;
        moved++;
    }
done:
    oari_free(uses, vsz * sizeof *uses);
    oari_free(outs, vsz * sizeof *outs);
    oari_free(chain_uses, vsz * sizeof *chain_uses);
    oari_free(root, vsz * sizeof *root);
    oari_free(last, vsz * sizeof *last);
    oari_free(sinks, nsz * sizeof *sinks);
    oari_free(perm, nsz * sizeof *perm);
    oari_free(chain, nsz * sizeof *chain);
    oari_free(in_a_chain, vsz * sizeof *in_a_chain);
    return st ? st : moved;
}

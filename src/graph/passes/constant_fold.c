/* Constant folding: a node whose inputs are all constants (and that is not
 * random, in place or a view, and has no symbolic attribute) is run once,
 * eagerly through dispatch, and its outputs become constants. Views are
 * left as nodes: they cost nothing at run time and keep weights shared. */
#include "../ir.h"

#include <string.h>

int oari_pass_constant_fold(oar_graph *g) {
    int changes = 0, st = 0;
    for (int i = 0; i < g->n_nodes && !st; i++) {
        oari_gnode *n = &g->nodes[i];
        if (n->dead || (oari_gnode_flags(n) & (OARI_F_RANDOM | OARI_F_INPLACE | OARI_F_VIEW))) continue;
        bool all = true;
        for (int k = 0; k < n->attrs.ni && all; k++) all = n->isym[k] < 0;
        oar_tensor *in[OARI_MAX_IN];
        for (int k = 0; k < n->n_in && all; k++) {
            int v = n->in[k];
            all = v < 0 || g->values[v].kind == OARI_V_CONST;
            in[k] = v < 0 ? NULL : g->values[v].constant;
        }
        if (!all) continue;
        oar_tensor *out[OARI_MAX_OUT] = {0};
        oari_no_grad_push();
        st = oari_dispatch(n->op, n->n_in, in, &n->attrs, out);
        oari_no_grad_pop();
        if (st) break;
        char *names[OARI_MAX_OUT] = {0};
        for (int j = 0; j < n->n_out && !st; j++) {
            char name[32];
            snprintf(name, sizeof name, "fold%d", n->out[j]);
            if (!(names[j] = oari_strdup(name))) st = oari_fail_status();
        }
        if (st) {
            for (int j = 0; j < n->n_out; j++) {
                oar_tensor_release(out[j]);
                oari_strfree(names[j]);
            }
            break;
        }
        for (int j = 0; j < n->n_out; j++) {
            oari_gvalue *ov = &g->values[n->out[j]];
            ov->kind = OARI_V_CONST;
            ov->constant = out[j];
            ov->name = names[j];
            ov->producer = -1;
            memset(ov->sym, -1, sizeof ov->sym);
        }
        n->dead = true;
        changes++;
    }
    int cst = oari_graph_compact(g);
    return st ? st : cst ? cst : changes;
}

/* The pass manager: named passes, and a list of them per purpose run until
 * the graph stops changing, with an optional dump after each pass
 * (OAR_PASS_PRINT or OAR_DEBUG >= 2) and a verify after the list. */
#include "ir.h"

#include <stdlib.h>
#include <string.h>

typedef struct pass {
    const char *name;
    int (*run)(oar_graph *g);
} pass;

static const pass all_passes[] = {
    {"dce", oari_pass_dce},
    {"cse", oari_pass_cse},
    {"constant_fold", oari_pass_constant_fold},
    {"simplify", oari_pass_simplify},
    {"drop_dropout", oari_pass_drop_dropout},
    {"fold_batch_norm", oari_pass_fold_batch_norm},
    {"schedule", oari_pass_schedule},
    {"amp", oari_pass_amp},
    {"amp_f16", oari_pass_amp_f16},
    {"fuse_qlinear", oari_pass_fuse_qlinear},
    {"prepack_conv", oari_pass_prepack_conv},
    {"pool_values", oari_pass_pool_values},
};

static const char *const training_list[] = {"dce", "cse", "constant_fold", "simplify",
                                            "schedule", NULL};
static const char *const inference_list[] = {"drop_dropout", "fold_batch_norm", "dce", "cse",
                                             "constant_fold", "simplify", "schedule", NULL};

int oar_graph_run_pass(oar_graph *g, const char *name) {
    if (!g || !name) return oari_error(OAR_ERR_INVALID, "graph_run_pass: graph or name is NULL");
    for (size_t i = 0; i < sizeof all_passes / sizeof *all_passes; i++)
        if (!strcmp(all_passes[i].name, name)) return all_passes[i].run(g);
    return oari_error(OAR_ERR_INVALID, "graph_run_pass: unknown pass \"%s\" (dce, cse, constant_fold, "
                      "simplify, drop_dropout, fold_batch_norm, schedule, amp, amp_f16, fuse_qlinear, prepack_conv, pool_values)",
                      name);
}

/* The sub-graphs of control nodes (ir.h), recursively: the passes that
 * need no constants (sub-graphs hold none), until nothing changes. Their
 * inputs and outputs stay as they are. */
/* Runs the passes `names` until the graph stops changing (at most 8
 * rounds), printing the graph after each pass when asked. */
static int run_list(oar_graph *g, const char *const *names, bool print) {
    for (int round = 0; round < 8; round++) {
        int changed = 0;
        for (int p = 0; names[p]; p++) {
            int r = oar_graph_run_pass(g, names[p]);
            if (r < 0) return r;
            changed += r;
            if (print) {
                fprintf(stderr, "-- after %s (%d changes)\n", names[p], r);
                oar_graph_print(g, stderr);
            }
        }
        if (!changed) break;
    }
    return 0;
}

static int optimize_subs(oar_graph *g) {
    static const char *const sub_list[] = {"dce", "cse", "simplify", NULL};
    for (int i = 0; i < g->n_nodes; i++) {
        const oari_gnode *n = &g->nodes[i];
        if (n->dead || !oari_is_ctrl(n->op)) continue;
        for (int k = 0; k < 2; k++) {
            int st = run_list(n->sub[k], sub_list, false);
            if (!st) st = optimize_subs(n->sub[k]);
            if (st) return st;
        }
    }
    return 0;
}

int oar_graph_optimize(oar_graph *g, oar_pass_list list, unsigned flags) {
    if (!g) return oari_error(OAR_ERR_INVALID, "graph_optimize: graph is NULL");
    if (list != OAR_PASSES_TRAINING && list != OAR_PASSES_INFERENCE)
        return oari_error(OAR_ERR_INVALID, "graph_optimize: unknown pass list %d", (int)list);
    const char *dbg = getenv("OAR_DEBUG");
    bool print = (flags & OAR_PASS_PRINT) || (dbg && atoi(dbg) >= 2);
    int st = 0;
    if (flags & (OAR_PASS_AMP_BF16 | OAR_PASS_AMP_F16)) { /* once, before the list */
        int r = oar_graph_run_pass(g, (flags & OAR_PASS_AMP_BF16) ? "amp" : "amp_f16");
        st = r < 0 ? r : 0;
    }
    if (!st) st = run_list(g, list == OAR_PASSES_INFERENCE ? inference_list : training_list, print);
    if (!st) st = optimize_subs(g);
    return st ? st : oar_graph_verify(g);
}

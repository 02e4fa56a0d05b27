/* The "schedule" pass: in a train step each next:x update moves to just
 * after the last node that reads x or makes grad:x, so it is the last
 * reader of x (donation can write it in place) and grad:x dies there; the
 * values do not change, and a second run moves nothing. */
#include "pass_test_util.h"

#include "graph/ir.h"

#include <string.h>

/* Node index of the last reader of input x other than `except`, through views. */
static int last_reader(const oar_graph *g, int x, int except) {
    int last = -1;
    bool *of_x = calloc((size_t)g->n_values, 1);
    of_x[x] = true;
    for (int i = 0; i < g->n_nodes; i++) {
        const oari_gnode *n = &g->nodes[i];
        bool reads = false;
        for (int k = 0; k < n->n_in; k++) reads = reads || (n->in[k] >= 0 && of_x[n->in[k]]);
        if (!reads) continue;
        if (oari_op_defs[n->op]->flags & OARI_F_VIEW) of_x[n->out[0]] = true;
        if (i != except) last = i;
    }
    free(of_x);
    return last;
}

static void run_step(oar_graph *g, oar_tensor **in, oar_tensor **res) {
    oar_executor *ex = oar_executor_new(g);
    oar_tensor *out[16];
    CHECK(oar_executor_run(ex, in, out) == 0);
    for (int j = 0; j < oar_graph_num_outputs(g); j++) res[j] = oar_clone(out[j]);
    oar_executor_free(ex);
}

static void test_train_step_updates_move_up(void) {
    oar_module *m = make_mlp();
    oar_graph_input_spec specs[2] = {{.name = "x", .dtype = OAR_F32, .ndim = 2, .shape = {8, 8}},
                                     {.name = "t", .dtype = OAR_F32, .ndim = 2, .shape = {8, 4}}};
    oar_graph *g = oar_trace(module_mse_loss, m, 2, specs, 1, &(oar_trace_options){.module = m, .params_as_inputs = true});
    CHECK(oar_graph_append_backward(g, 0, 4, (int[]){2, 3, 4, 5}) == 1 && oar_graph_append_sgd(g, 0.1) == 4);
    CHECK(oar_graph_run_pass(g, "dce") >= 0);
    oar_pool *p = oar_pool_push();
    oar_tensor *in[6] = {oar_randn(OAR_F32, 2, (int64_t[]){8, 8}), oar_randn(OAR_F32, 2, (int64_t[]){8, 4})};
    oar_module_parameters(m, in + 2, 4);
    oar_tensor *before[9], *after[9];
    run_step(g, in, before);
    int moved = oar_graph_run_pass(g, "schedule");
    CHECK(moved > 0);
    CHECK(oar_graph_verify(g) == 0);
    CHECK(oar_graph_run_pass(g, "schedule") == 0); /* stable */
    int at_end = 0; /* updates among the last four nodes: not all of them */
    for (int j = 5; j < 9; j++) {
        int upd = g->values[g->outputs[j]].producer, x = g->inputs[2 + j - 5], grad = g->outputs[j - 4];
        CHECK(strncmp(g->output_names[j], "next:", 5) == 0);
        /* after the last other reader of x and the gradient's maker... */
        CHECK(last_reader(g, x, upd) < upd);
        CHECK(g->values[grad].producer < upd);
        at_end += upd >= g->n_nodes - 4;
    }
    CHECK(at_end < 4);
    run_step(g, in, after);
    for (int j = 0; j < 9; j++) CHECK_NEAR(max_diff(before[j], after[j]), 0, 0);
    oar_pool_pop(p);
    oar_graph_free(g);
    oar_module_free(m);
}

/* A graph without sinks to move is left alone. */
static int f_plain(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    out[0] = oar_relu(oar_exp(in[0]));
    return out[0] ? 0 : -1;
}

static void test_nothing_to_move(void) {
    oar_graph *g = trace1(f_plain, NULL);
    CHECK(oar_graph_run_pass(g, "schedule") == 0);
    CHECK(oar_graph_num_nodes(g) == 2);
    oar_graph_free(g);
}

int main(void) {
    RUN(test_train_step_updates_move_up);
    RUN(test_nothing_to_move);
    return test_summary();
}

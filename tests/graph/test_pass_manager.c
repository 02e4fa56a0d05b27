/* The pass manager: pass lists per purpose, printing after each pass, and
 * errors for unknown passes and lists. */
#include "pass_test_util.h"

#include <unistd.h>

static int fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    oar_tensor *unused = oar_log(in[0]);
    (void)unused;
    oar_tensor *a = oar_add(oar_exp(in[0]), oar_exp(in[0]));
    out[0] = oar_dropout(oar_mul(a, oar_scalar(1)), 0.25, ctx != NULL);
    return out[0] ? 0 : -1;
}

static void test_lists(void) {
    int training = 1;
    oar_graph *g = trace1(fn, &training);
    oar_graph *t = oar_graph_clone(g);
    CHECK(oar_graph_optimize(t, OAR_PASSES_TRAINING, 0) == 0);
    CHECK(oar_graph_count_op(t, "bernoulli") == 1); /* training keeps dropout */
    CHECK(oar_graph_count_op(t, "exp") == 1 && oar_graph_count_op(t, "log") == 0);
    oar_graph_free(t);
    /* print after each pass into a file standing in for stderr */
    char path[] = "/tmp/oar_passes_XXXXXX";
    int fd = mkstemp(path), saved = dup(2);
    fflush(stderr);
    dup2(fd, 2);
    CHECK(oar_graph_optimize(g, OAR_PASSES_INFERENCE, OAR_PASS_PRINT) == 0);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    char buf[65536] = {0};
    lseek(fd, 0, SEEK_SET);
    CHECK(read(fd, buf, sizeof buf - 1) > 0);
    close(fd);
    unlink(path);
    CHECK(strstr(buf, "-- after drop_dropout") && strstr(buf, "-- after cse") && strstr(buf, "graph("));
    CHECK(oar_graph_count_op(g, "bernoulli") == 0);
    CHECK(oar_graph_num_nodes(g) == 2); /* exp, add */
    CHECK_NEAR(graph_vs_eager(g, fn, NULL), 0, 1e-5);
    CHECK(oar_graph_run_pass(g, "nope") == OAR_ERR_INVALID);
    CHECK(strstr(oar_last_error(), "unknown pass") != NULL);
    CHECK_STATUS_FAILS(oar_graph_optimize(g, (oar_pass_list)7, 0), "unknown pass list");
    CHECK_STATUS_FAILS(oar_graph_optimize(NULL, OAR_PASSES_TRAINING, 0), "NULL");
    oar_graph_free(g);
}

int main(void) {
    RUN(test_lists);
    return test_summary();
}

/* The generated C of every row of the elementwise table: each row, in each
 * dtype of its gen column (and gelu's tanh form), fuses with the op that
 * reads it into one kernel, and the compiled graph computes what the CPU
 * kernels do (the same formulas, through the same words of
 * src/ops/ew_math.h). Needs a C compiler; without one the test is skipped. */
#include "compiler/ew_graphs.h"

#include "compiler/jit.h"

static void test_every_row_fuses_and_matches(void) {
    oar_pool *outer = oar_pool_push(); /* the graphs' inputs */
    int graphs = 0, rows = 0;
    for (size_t t = 0; t < sizeof ew_gen_dtypes / sizeof *ew_gen_dtypes; t++)
        for (int alt = 0; alt < 2; alt++) {
            oar_dtype dt = ew_gen_dtypes[t];
            ew_graph eg;
            for (int cursor = 0; ew_graph_next(&eg, dt, alt, &cursor);) {
                oar_pool *p = oar_pool_push();
                oar_graph *g = ew_graph_trace(&eg);
                CHECK(g != NULL);
                oar_executor *plain = g ? oar_executor_new(g) : NULL, *fused = g ? oar_executor_new(g) : NULL;
                CHECK(fused && oar_executor_compile(fused) == 0);
                /* one kernel per row: the row's op fused with its reader */
                int kernels = fused ? oar_executor_num_kernels(fused) : -1;
                if (kernels != eg.n_rows)
                    fprintf(stderr, "%s%s: %d kernels for %d rows (a row without a fused form?)\n%s",
                            oar_dtype_name(dt), alt ? " alt" : "", kernels, eg.n_rows,
                            fused ? oar_executor_kernel_source(fused) : "");
                CHECK(kernels == eg.n_rows);
                oar_tensor *y0[EW_GRAPH_ROWS] = {0}, *y1[EW_GRAPH_ROWS] = {0};
                CHECK(plain && oar_executor_run(plain, eg.inputs, y0) == 0);
                CHECK(fused && oar_executor_run(fused, eg.inputs, y1) == 0);
                double tol = dt == OAR_F32 ? 2e-6 : dt == OAR_F64 ? 1e-12 : 0;
                for (int j = 0; j < eg.n_rows; j++) {
                    char what[96];
                    snprintf(what, sizeof what, "%s (%s%s) compiled", ew_test_rows[eg.rows[j]].op,
                             oar_dtype_name(dt), alt ? ", alt" : "");
                    CHECK(ew_graph_same(y0[j], y1[j], tol, what));
                }
                rows += eg.n_rows;
                graphs++;
                oar_executor_free(plain);
                oar_executor_free(fused);
                oar_graph_free(g);
                ew_graph_free(&eg);
                oar_pool_pop(p);
            }
        }
    fprintf(stderr, "%d rows in %d graphs compiled and compared\n", rows, graphs);
    CHECK(rows > 60);
    oar_pool_pop(outer);
}

int main(void) {
    if (!oari_jit_available()) {
        fprintf(stderr, "no C compiler: skipped\n");
        return 77;
    }
    RUN(test_every_row_fuses_and_matches);
    return test_summary();
}

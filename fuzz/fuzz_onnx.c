/* libFuzzer harness for the ONNX importer: every input is parsed from
 * memory as a model. A model that loads must verify as a graph and run
 * through the executor on zero inputs of its traced shapes (dynamic dims
 * 1) without a crash (ASan checks the reads); one that does not load must
 * say why.
 *
 *     cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DOAR_FUZZ=ON
 *     cmake --build build-fuzz --target fuzz_onnx
 *     mkdir -p corpus && cp tests/onnx/[a-z]*.onnx corpus/
 *     (the backend node models of libonnx-testdata make a wider corpus:
 *      find /usr/share/libonnx-testdata/data/node -name model.onnx, copied under distinct names)
 *     ./build-fuzz/fuzz_onnx -max_total_time=300 corpus
 *
 * The corpus is not committed. */
#include <oar/oar.h>
#include <oar/graph.h>
#include <oar/onnx.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static void check(int cond, const char *what) {
    if (!cond) {
        fprintf(stderr, "fuzz_onnx: %s (%s)\n", what, oar_last_error());
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    oar_clear_error();
    oar_graph *g = oar_onnx_load_buffer(data, size);
    if (!g) {
        check(oar_last_error()[0] != 0, "a failed load left no message");
        return 0;
    }
    check(oar_graph_verify(g) == 0, "an imported graph does not verify");
    int ni = oar_graph_num_inputs(g);
    oar_executor *ex = ni <= 64 ? oar_executor_new(g) : NULL;
    oar_pool *pool = oar_pool_push();
    oar_tensor *in[64] = {0}, *out[256];
    int ok = ex != NULL && oar_graph_num_outputs(g) <= 256;
    for (int i = 0; i < ni && ok; i++) {
        int64_t shape[OAR_MAX_DIMS];
        oar_dtype dt;
        int nd = oar_graph_input_shape(g, i, &dt, shape);
        int64_t numel = 1;
        for (int d = 0; d < nd; d++) {
            if (shape[d] < 0) shape[d] = 1;
            numel *= shape[d];
        }
        ok = nd >= 0 && numel <= (1 << 20) && (in[i] = oar_zeros(dt, nd, shape)) != NULL;
    }
    if (ok && oar_executor_run(ex, in, out) != 0) check(oar_last_error()[0] != 0, "a failed run left no message");
    oar_pool_pop(pool);
    oar_executor_free(ex);
    oar_graph_free(g);
    return 0;
}

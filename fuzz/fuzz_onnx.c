/* libFuzzer harness for the ONNX importer: every input is parsed from
 * memory as a model. A model that loads must verify as a graph and run
 * through the executor on zero inputs of its traced shapes (dynamic dims
 * 1) without a crash (ASan checks the reads); one that does not load must
 * say why. Initializers are TensorProtos (fuzz_onnx_tensor for those
 * alone).
 *
 *     make fuzz                        (all harnesses; docs/fuzzing.md)
 *     ./build-fuzz/fuzz_onnx -max_total_time=300 build-fuzz/corpus/fuzz_onnx fuzz/corpus/fuzz_onnx
 *     (the backend node models of libonnx-testdata make a wider corpus:
 *      find /usr/share/libonnx-testdata/data/node -name model.onnx, copied under distinct names) */
#include "fuzz_util.h"

#include <oar/onnx.h>

static int fuzz_one(const uint8_t *data, size_t size) {
    oar_clear_error();
    oar_graph *g = oar_onnx_load_buffer(data, size);
    fuzz_note("fuzz_onnx", g != NULL);
    if (!g) {
        fuzz_check(oar_last_error()[0] != 0, "fuzz_onnx", "a failed load left no message");
        return 0;
    }
    fuzz_check(oar_graph_verify(g) == 0, "fuzz_onnx", "an imported graph does not verify");
    fuzz_run_graph(g, "fuzz_onnx");
    oar_graph_free(g);
    return 0;
}

FUZZ_TARGET(fuzz_one)

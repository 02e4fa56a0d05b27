/* libFuzzer harness for the ONNX TensorProto reader
 * (oar_onnx_tensor_load_buffer, src/onnx/onnx_import.c): one that loads
 * must hold readable data of its shape; one that does not must say why.
 * A TensorProto declaring more elements than its data holds must fail
 * before the tensor is allocated (the 34-byte file asked 12 GB).
 *
 *     ./build-fuzz/fuzz_onnx_tensor -max_total_time=300 build-fuzz/corpus/fuzz_onnx_tensor fuzz/corpus/fuzz_onnx_tensor */
#include "fuzz_util.h"

#include <oar/onnx.h>

static int fuzz_one(const uint8_t *data, size_t size) {
    oar_clear_error();
    oar_pool *pool = oar_pool_push();
    oar_tensor *t = oar_onnx_tensor_load_buffer(data, size);
    fuzz_note("fuzz_onnx_tensor", t != NULL);
    if (!t) {
        fuzz_check(oar_last_error()[0] != 0, "fuzz_onnx_tensor", "a failed load left no message");
    } else {
        size_t n = (size_t)oar_tensor_numel(t) * oar_dtype_size(oar_tensor_dtype(t));
        unsigned char *b = malloc(n ? n : 1);
        fuzz_check(oar_tensor_to_host(t, b, n) == 0, "fuzz_onnx_tensor", "tensor data unreadable");
        free(b);
    }
    oar_pool_pop(pool);
    return 0;
}

FUZZ_TARGET(fuzz_one)

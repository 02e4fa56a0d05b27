/* Out of memory in ONNX import (invariant 5 of docs/architecture.md): make the Nth host
 * allocation fail, for every N, while parsing and importing models (a
 * PyTorch CNN, a Reshape with a bound shape, sizes following a dynamic
 * batch, a Loop imported as a while node, a TensorProto file, and when
 * libonnx-testdata is installed an LSTM and a cubic Resize node test).
 * Each failure must be reported, leak nothing and leave oar usable. */
#include "test.h"
#include <oar/onnx.h>
#include <unistd.h>
#include "alloc_fail_loop.h"

#define NODE_DIR "/usr/share/libonnx-testdata/data/node/"

static bool with_testdata;

/* 0 if every load succeeds. */
static int step(void) {
    int st = 0;
    oar_graph *g = oar_onnx_load("onnx/cnn13.onnx");
    st |= g == NULL;
    oar_graph_free(g);
    oar_tensor *shape = oar_tensor_from_data((int64_t[]){3, 2}, OAR_I64, 1, (int64_t[]){2});
    oar_tensor *vals[2] = {NULL, shape};
    g = shape ? oar_onnx_load_with("onnx/runtime_shape.onnx", &(oar_onnx_options){.n_values = 2, .values = vals}) : NULL;
    st |= g == NULL;
    oar_graph_free(g);
    oar_tensor_release(shape);
    /* symbolic sizes (size_of, Range, ConstantOfShape nodes) and a while node */
    g = oar_onnx_load("onnx/torch/sizes_op17_dynamic.onnx");
    st |= g == NULL;
    oar_graph_free(g);
    g = oar_onnx_load("onnx/control_loop.onnx");
    st |= g == NULL;
    oar_graph_free(g);
    oar_tensor *t = oar_onnx_tensor_load("onnx/tensor_i64.pb");
    st |= t == NULL;
    oar_tensor_release(t);
    if (with_testdata) {
        g = oar_onnx_load(NODE_DIR "test_lstm_with_peepholes/model.onnx");
        st |= g == NULL;
        oar_graph_free(g);
        /* inputs X and scales; scales bound */
        oar_tensor *scales = oar_onnx_tensor_load(NODE_DIR "test_resize_upsample_scales_cubic/test_data_set_0/input_1.pb");
        oar_tensor *v[2] = {NULL, scales};
        g = scales ? oar_onnx_load_with(NODE_DIR "test_resize_upsample_scales_cubic/model.onnx",
                                        &(oar_onnx_options){.n_values = 2, .values = v})
                   : NULL;
        st |= g == NULL;
        oar_graph_free(g);
        oar_tensor_release(scales);
    }
    return st ? -1 : 0;
}

static void test_every_allocation_fails_cleanly(void) {
    with_testdata = access(NODE_DIR "test_lstm_with_peepholes/model.onnx", R_OK) == 0;
    CHECK(step() == 0);
    int failures, n = fail_each_allocation_with(step, &failures, (fail_loop_opts){.any_message = true});
    printf("failed each of %d allocations of the ONNX loads%s\n", n, with_testdata ? " (with node tests)" : "");
    CHECK(failures > 100);
    CHECK(n < 200000);
}

int main(void) {
    oar_set_allocator(failing_alloc, NULL);
    RUN(test_every_allocation_fails_cleanly);
    oar_memory_empty_cache();
    oar_set_allocator(NULL, NULL);
    return test_summary();
}

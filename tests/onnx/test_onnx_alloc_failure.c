/* Out of memory in ONNX import (DESIGN.md invariant 5): make the Nth host
 * allocation fail, for every N, while parsing and importing models (a
 * PyTorch CNN, a Reshape with a bound shape, sizes following a dynamic
 * batch, a Loop imported as a while node, a TensorProto file, and when
 * libonnx-testdata is installed an LSTM and a cubic Resize node test).
 * Each failure must be reported, leak nothing and leave oar usable. */
#include "test.h"
#include <oar/onnx.h>
#include <unistd.h>
#include "alloc_fail.h"

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
    oar_memory_empty_cache();
    oar_memory_stats base;
    oar_memory_stats_get(&base);
    long base_live = live;
    int failures = 0, n;
    for (n = 0; n < 200000; n++) {
        n_calls = 0;
        fail_at = n;
        oar_clear_error();
        int st = step();
        fail_at = -1;
        if (st == 0 && n_calls <= n) break;
        if (st != 0) {
            failures++;
            if (!oar_last_error()[0]) {
                test_failed++;
                fprintf(stderr, "allocation %d failed with no message\n", n);
            }
        }
        oar_memory_empty_cache();
        oar_memory_stats s;
        oar_memory_stats_get(&s);
        if (s.bytes_in_use != base.bytes_in_use || live != base_live) {
            test_failed++;
            fprintf(stderr, "after failing allocation %d: %zu bytes in use (base %zu), %ld live blocks (base %ld); "
                    "last error \"%s\"\n", n, s.bytes_in_use, base.bytes_in_use, live, base_live, oar_last_error());
            break;
        }
        if (step() != 0) {
            test_failed++;
            fprintf(stderr, "oar unusable after failing allocation %d: %s\n", n, oar_last_error());
            break;
        }
    }
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

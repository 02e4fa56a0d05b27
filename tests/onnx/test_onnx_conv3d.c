/* ONNX import of 3-D convolutions beyond what oar's ops say directly:
 * Conv with asymmetric pads (an explicit Pad, then conv3d) and
 * ConvTranspose with asymmetric pads and an output_padding not below the
 * stride (the full conv_transpose3d output, grown and cropped), against
 * PyTorch's conv3d of the padded input and a NumPy scatter loop of the
 * ONNX definition (tests/ref/gen_onnx_conv3d.py). */
#include "test.h"
#include "onnx/conv3d_ref.h"
#include <oar/oar.h>
#include <oar/onnx.h>

static void check_model(const char *path, const char *op, const double *x, const int64_t *xshape,
                        const double *want, const int64_t *yshape) {
    oar_graph *g = oar_onnx_load(path);
    if (!g) fprintf(stderr, "%s: %s\n", path, oar_last_error());
    CHECK(g != NULL);
    if (!g) return;
    CHECK(oar_graph_count_op(g, op) == 1); /* on the 3-D op, not emulated */
    oar_pool *p = oar_pool_push();
    oar_tensor *xt = oar_cast(oar_tensor_from_data(x, OAR_F64, 5, xshape), OAR_F32), *y = NULL;
    oar_executor *ex = oar_executor_new(g);
    CHECK(ex && oar_executor_run(ex, &xt, &y) == 0);
    bool shape_ok = y && oar_tensor_ndim(y) == 5;
    for (int d = 0; shape_ok && d < 5; d++)
        shape_ok = oar_tensor_shape(y)[d] == yshape[d];
    CHECK(shape_ok);
    if (shape_ok)
        CHECK_VALUES(y, want, oar_tensor_numel(y), 1e-4);
    oar_executor_free(ex);
    oar_pool_pop(p);
    oar_graph_free(g);
}

static void test_conv3d_asymmetric(void) {
    check_model("onnx/conv3d_asym.onnx", "conv3d", conv3d_asym_x, (int64_t[]){2, 4, 5, 6, 5},
                conv3d_asym_y, conv3d_asym_shape);
}

static void test_conv_transpose3d_cropped(void) {
    check_model("onnx/convt3d_asym.onnx", "conv_transpose3d", convt3d_asym_x,
                (int64_t[]){1, 4, 3, 3, 2}, convt3d_asym_y, convt3d_asym_shape);
}

int main(void) {
    RUN(test_conv3d_asymmetric);
    RUN(test_conv_transpose3d_cropped);
    return test_summary();
}

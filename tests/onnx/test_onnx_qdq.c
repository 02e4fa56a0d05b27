/* An ONNX model in ONNX Runtime's QDQ form (int8 weights with per-channel
 * scales and zero points, int8 activations, a uint8 output, int8
 * QLinearMatMul and MatMulInteger) imported and run, against NumPy's
 * evaluation of the same graph (tests/ref/gen_onnx_qdq.py). Run from tests/. */
#include "test.h"

#include "onnx/qdq_ref.h"

static void test_qdq_model(void) {
    oar_graph *g = oar_onnx_load("onnx/qdq.onnx");
    CHECK(g != NULL);
    if (!g) return;
    /* the activations' pairs run as quantize/dequantize nodes; the int8
     * weight's DequantizeLinear, all constants, is evaluated at import */
    CHECK(oar_graph_count_op(g, "dequantize") == 2 && oar_graph_count_op(g, "quantize") == 2);
    oar_predictor *p = oar_predictor_from_graph(g, NULL);
    oar_graph_free(g);
    CHECK(p != NULL);
    oar_tensor *x = oar_cast(oar_tensor_from_data(qdq_x, OAR_F64, 2, (int64_t[]){2, 4}), OAR_F32);
    oar_tensor *y[4] = {NULL, NULL, NULL, NULL};
    CHECK(p && oar_predictor_run(p, &x, y) == 0);
    CHECK(y[0] && oar_tensor_dtype(y[0]) == OAR_U8);
    CHECK_VALUES(y[0], qdq_yq, 6, 0);
    CHECK_VALUES(y[1], qdq_yd, 6, 1e-7);
    CHECK(y[2] && oar_tensor_dtype(y[2]) == OAR_I8);
    CHECK_VALUES(y[2], qdq_mq, 4, 0);
    CHECK(y[3] && oar_tensor_dtype(y[3]) == OAR_I32);
    CHECK_VALUES(y[3], qdq_mi, 4, 0);
    for (int j = 0; j < 4; j++) oar_tensor_release(y[j]);
    oar_tensor_release(x);
    oar_predictor_free(p);
}

int main(void) {
    RUN(test_qdq_model);
    return test_summary();
}

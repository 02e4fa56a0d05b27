/* QLinearMatMul, MatMulInteger and QLinearConv with symmetric int8 weights
 * (zero points 0) imported onto the int8 kernels (oar_qmatmul,
 * oar_qconv2d; ConvInteger with unequal pads on the f64 conv), run by the
 * predictor,
 * against NumPy's evaluation (tests/ref/gen_quant_onnx.py, which also
 * checks ONNX Runtime agrees); and a quantized two-layer model traced,
 * exported (QuantizeLinear, MatMulInteger, DequantizeLinear), imported
 * back onto the int8 kernels and run to the same values. Run from tests/. */
#include "test.h"

#include <math.h>
#include <oar/quant.h>
#include <unistd.h>

#include "onnx/quant_sym_ref.h"

#ifdef OAR_TEST_WITH_DNNL
#include "backends/cpu/cpu_dnnl_int8.h"
#endif

static void test_quant_sym_model(void) {
    oar_graph *g = oar_onnx_load("onnx/quant_sym.onnx");
    CHECK(g != NULL);
    if (!g) return;
    CHECK(oar_graph_count_op(g, "qmatmul") == 2); /* both on the int8 kernel, no f64 matmul */
    CHECK(oar_graph_count_op(g, "matmul") == 0);
    /* QLinearConv on the int8 conv; ConvInteger's unequal pads take the f64 conv */
    CHECK(oar_graph_count_op(g, "qconv2d") == 1 && oar_graph_count_op(g, "conv2d") == 1);
    oar_predictor *p = oar_predictor_from_graph(g, NULL);
    oar_graph_free(g);
    CHECK(p != NULL);
    oar_tensor *x = oar_cast(oar_tensor_from_data(qs_x, OAR_F64, 3, (int64_t[]){2, 3, 37}), OAR_U8);
    oar_tensor *cx = oar_cast(oar_tensor_from_data(qs_cx, OAR_F64, 4, (int64_t[]){2, 3, 7, 6}), OAR_U8);
    oar_tensor *y[4] = {NULL, NULL, NULL, NULL};
    CHECK(p && oar_predictor_run(p, (oar_tensor *[]){x, cx}, y) == 0);
    CHECK(y[2] && oar_tensor_dtype(y[2]) == OAR_U8);
    CHECK_VALUES(y[2], qs_cq, 96, 0);
    CHECK(y[3] && oar_tensor_dtype(y[3]) == OAR_I32);
    CHECK_VALUES(y[3], qs_ci, 240, 0);
    oar_tensor_release(cx);
    CHECK(y[0] && oar_tensor_dtype(y[0]) == OAR_U8);
    CHECK_VALUES(y[0], qs_yq, 30, 0);
    CHECK(y[1] && oar_tensor_dtype(y[1]) == OAR_I32);
    CHECK_VALUES(y[1], qs_mi, 30, 0);
#ifdef OAR_TEST_WITH_DNNL
    CHECK((oari_dnnl_int8_cached_primitives() > 0) == oari_dnnl_int8_exact()); /* without VNNI: the loop */
#endif
    for (int j = 0; j < 4; j++) oar_tensor_release(y[j]);
    oar_tensor_release(x);
    oar_predictor_free(p);
}

typedef struct { oar_tensor *w1q, *s1, *b1, *w2q, *s2, *b2; } qmodel;

/* x [n, 8] f32 -> uint8 (scale 1/32, zero point 128) -> 16 relu -> uint8 -> 3 */
static int qmodel_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    qmodel *m = ctx;
    oar_tensor *h = oar_relu(oar_qlinear(oar_quantize_per_tensor(in[0], 1.0 / 32, 128, OAR_U8), 1.0 / 32, 128,
                                         m->w1q, m->s1, m->b1));
    out[0] = oar_qlinear(oar_quantize_per_tensor(h, 0.05, 0, OAR_U8), 0.05, 0, m->w2q, m->s2, m->b2);
    return out[0] ? 0 : -1;
}

static void test_export_round_trip(void) {
    oar_pool *pool = oar_pool_push();
    qmodel m = {0};
    double w1[8 * 16], w2[16 * 3], x[5 * 8];
    for (int i = 0; i < 8 * 16; i++) w1[i] = sin(0.7 * i) * 0.4;
    for (int i = 0; i < 16 * 3; i++) w2[i] = cos(1.3 * i) * 0.3;
    for (int i = 0; i < 5 * 8; i++) x[i] = sin(2.1 * i + 0.3) * 3;
    CHECK(oar_quantize_weight(oar_tensor_from_data(w1, OAR_F64, 2, (int64_t[]){8, 16}), 1, &m.w1q, &m.s1) == 0);
    CHECK(oar_quantize_weight(oar_tensor_from_data(w2, OAR_F64, 2, (int64_t[]){16, 3}), 1, &m.w2q, &m.s2) == 0);
    m.b1 = oar_full(OAR_F32, 1, (int64_t[]){16}, 0.05);
    m.b2 = oar_full(OAR_F32, 1, (int64_t[]){3}, -0.1);
    oar_tensor *xt = oar_cast(oar_tensor_from_data(x, OAR_F64, 2, (int64_t[]){5, 8}), OAR_F32);
    oar_graph_input_spec s = {.name = "x", .dtype = OAR_F32, .ndim = 2, .shape = {5, 8}};
    oar_graph *g = oar_trace(qmodel_fn, &m, 1, &s, 1, NULL);
    CHECK(g && oar_graph_count_op(g, "qmatmul") == 2);
    char path[] = "/tmp/oar_quant_export_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd >= 0) close(fd);
    CHECK(g && oar_onnx_export(g, path, &(oar_onnx_export_options){.opset = 13}) == 0);
    oar_graph *back = oar_onnx_load(path);
    unlink(path);
    CHECK(back && oar_graph_count_op(back, "qmatmul") == 2); /* MatMulInteger back onto the int8 kernel */
    /* the traced graph's values (an eager call of qmodel_fn here instead left
     * six objects to LeakSanitizer, not understood yet: see the report) */
    oar_predictor *p0 = g ? oar_predictor_from_graph(g, NULL) : NULL;
    oar_tensor *want = NULL;
    CHECK(p0 && oar_predictor_run(p0, &xt, &want) == 0);
    double *wv = test_values(want);
    oar_tensor_release(want);
    oar_predictor_free(p0);
    oar_predictor *p = back ? oar_predictor_from_graph(back, NULL) : NULL;
    oar_tensor *y = NULL;
    CHECK(p && oar_predictor_run(p, &xt, &y) == 0);
    /* ONNX's QuantizeLinear divides (x / scale) where oar multiplies by the
     * reciprocal: the scales here are powers of two or their products meet
     * no tie, so the values agree to f32 rounding */
    if (wv) CHECK_VALUES(y, wv, 15, 1e-6);
    free(wv);
    oar_tensor_release(y);
    oar_predictor_free(p);
    oar_graph_free(back);
    oar_graph_free(g);
    oar_pool_pop(pool);
}

/* a quantized conv: uint8 x -> qconv2d (stride 2, padding 1, dilation 1) -> int32 */
static int qconv_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    oar_tensor *xq = oar_quantize_per_tensor(in[0], 0.1, 100, OAR_U8);
    out[0] = oar_qconv2d(xq, 100, ctx, (int64_t[]){2, 2}, (int64_t[]){1, 1}, NULL, 1);
    return out[0] ? 0 : -1;
}

static void test_export_qconv(void) {
    oar_pool *pool = oar_pool_push();
    int8_t w[4 * 3 * 3 * 3];
    for (int i = 0; i < 4 * 27; i++) w[i] = (int8_t)((i * 37) % 255 - 127);
    oar_tensor *wt = oar_tensor_from_data(w, OAR_I8, 4, (int64_t[]){4, 3, 3, 3});
    oar_graph_input_spec s = {.name = "x", .dtype = OAR_F32, .ndim = 4, .shape = {2, 3, 7, 6}};
    oar_graph *g = oar_trace(qconv_fn, wt, 1, &s, 1, NULL);
    char path[] = "/tmp/oar_qconv_export_XXXXXX";
    int fd = mkstemp(path);
    if (fd >= 0) close(fd);
    CHECK(g && oar_onnx_export(g, path, &(oar_onnx_export_options){.opset = 13}) == 0);
    oar_graph *back = oar_onnx_load(path);
    unlink(path);
    CHECK(back && oar_graph_count_op(back, "qconv2d") == 1); /* ConvInteger back onto the int8 conv */
    double x[2 * 3 * 7 * 6];
    for (int i = 0; i < 2 * 3 * 7 * 6; i++) x[i] = 5 * sin(0.37 * i);
    oar_tensor *xt = oar_cast(oar_tensor_from_data(x, OAR_F64, 4, (int64_t[]){2, 3, 7, 6}), OAR_F32), *want = NULL;
    CHECK(qconv_fn(wt, &xt, &want) == 0);
    double *wv = test_values(want);
    oar_predictor *p = back ? oar_predictor_from_graph(back, NULL) : NULL;
    oar_tensor *y = NULL;
    CHECK(p && oar_predictor_run(p, &xt, &y) == 0);
    if (wv) CHECK_VALUES(y, wv, oar_tensor_numel(want), 0);
    free(wv);
    oar_tensor_release(y);
    oar_predictor_free(p);
    oar_graph_free(back);
    oar_graph_free(g);
    oar_pool_pop(pool);
}

int main(void) {
    RUN(test_quant_sym_model);
    RUN(test_export_round_trip);
    RUN(test_export_qconv);
    return test_summary();
}

/* The QDQ form at import (src/onnx/onnx_qdq_fold.c): a CNN that ONNX
 * Runtime's own quantize_static wrote (tests/ref/gen_qdq_static.py) runs on
 * the int8 kernels, with no f32 conv or matmul left, and gives ONNX
 * Runtime's int8 outputs; oar_onnx_options.keep_qdq keeps the f32 ops; and
 * each case the importer must tell apart (tests/onnx/qdq_variants.onnx)
 * folds or stays f32 as it should, with ONNX Runtime's values. The
 * folded model exported again is in the QDQ form (DequantizeLinear into
 * Conv and MatMul) and imports back to the same int8 graph and values;
 * with integer_ops it is in the operator form (ConvInteger, MatMulInteger).
 * Run from tests/. */
#include "test.h"

#include <math.h>
#include <oar/onnx.h>
#include <unistd.h>

#include "onnx/qdq_static_ref.h"

/* The model's output for input x [2, 3, 8, 8], or NULL. */
static oar_tensor *run_cnn(oar_graph *g, const double *x) {
    oar_predictor *p = oar_predictor_from_graph(g, NULL);
    CHECK(p != NULL);
    oar_pool *pool = oar_pool_push(); /* (the input and its f64 source) */
    oar_tensor *xt = oar_cast(oar_tensor_from_data(x, OAR_F64, 4, (int64_t[]){2, 3, 8, 8}), OAR_F32);
    oar_tensor *y = NULL;
    CHECK(p && xt && oar_predictor_run(p, &xt, &y) == 0);
    oar_pool_pop(pool);
    oar_predictor_free(p);
    return y;
}

/* Largest |a - want| over n values, in units of step. */
static double steps_off(oar_tensor *a, const double *want, int n, double step) {
    double *v = a ? test_values(a) : NULL, worst = INFINITY;
    if (v) {
        worst = 0;
        for (int i = 0; i < n; i++) worst = fmax(worst, fabs(v[i] - want[i]) / step);
    }
    free(v);
    return worst;
}

static void test_quantize_static_cnn(void) {
    oar_graph *g = oar_onnx_load("onnx/qdq_static.onnx");
    CHECK(g != NULL);
    if (!g) return;
    /* both convs and both matrix products on the int8 kernels */
    CHECK(oar_graph_count_op(g, "qconv2d") == 2 && oar_graph_count_op(g, "qmatmul") == 2);
    CHECK(oar_graph_count_op(g, "conv2d") == 0 && oar_graph_count_op(g, "matmul") == 0);
    /* the bypassed dequantize nodes are gone: left are the Flatten's input and the output */
    CHECK(oar_graph_count_op(g, "dequantize") == 2);
    /* the predictor's fuse_qlinear takes the convs, the Gemm and the MatMul
     * as it takes oar_graph_quantize's layers (the same pattern) */
    oar_graph *fused = oar_graph_clone(g);
    /* (five changes: the four layers, and a quantize moved up through the Flatten) */
    CHECK(fused && oar_graph_run_pass(fused, "fuse_qlinear") == 5 && oar_graph_count_op(fused, "qlinear") == 2 &&
          oar_graph_count_op(fused, "qlinear_conv2d") == 2 && oar_graph_count_op(fused, "qconv2d") == 0);
    oar_graph_free(fused);
    oar_graph *kept = oar_onnx_load_with("onnx/qdq_static.onnx", &(oar_onnx_options){.keep_qdq = true});
    CHECK(kept && oar_graph_count_op(kept, "qconv2d") == 0 && oar_graph_count_op(kept, "qmatmul") == 0);
    CHECK(kept && oar_graph_count_op(kept, "conv2d") == 2);
    const double *xs[2] = {qdq_x0, qdq_x1}, *ort_int8[2] = {qdq_y0, qdq_y1}, *f32[2] = {qdq_f0, qdq_f1};
    for (int r = 0; r < 2; r++) {
        oar_tensor *y = run_cnn(g, xs[r]), *yk = kept ? run_cnn(kept, xs[r]) : NULL;
        CHECK(y && oar_tensor_ndim(y) == 2 && oar_tensor_shape(y)[0] == 2 && oar_tensor_shape(y)[1] == 5);
        /* the same int32 sums and the same quantization levels as ONNX
         * Runtime's at every layer (measured: 1.2e-7 of a level apart, the
         * f32 rounding of the dequantized output) */
        CHECK(steps_off(y, ort_int8[r], 10, qdq_y_scale) < 1e-3);
        /* and the quantized model stays near the f32 one (ONNX Runtime's
         * own int8 is 0.066 off at most) */
        CHECK(steps_off(y, f32[r], 10, 1.0) < 0.1);
        CHECK(steps_off(yk, ort_int8[r], 10, qdq_y_scale) < 1e-3);
        oar_tensor_release(y);
        oar_tensor_release(yk);
    }
    oar_graph_free(kept);
    oar_graph_free(g);
}

static void test_variants(void) {
    oar_graph *g = oar_onnx_load("onnx/qdq_variants.onnx");
    CHECK(g != NULL);
    if (!g) return;
    /* folded: the Gemm and the batched MatMul (qmatmul), the grouped conv;
     * left f32: the MatMul with weight zero point 1, the conv with unequal pads */
    CHECK(oar_graph_count_op(g, "qmatmul") == 2 && oar_graph_count_op(g, "matmul") == 1);
    CHECK(oar_graph_count_op(g, "qconv2d") == 1 && oar_graph_count_op(g, "conv2d") == 1);
    oar_predictor *p = oar_predictor_from_graph(g, NULL);
    CHECK(p != NULL);
    oar_pool *pool = oar_pool_push(); /* (the inputs and their f64 sources) */
    oar_tensor *in[3] = {
        oar_cast(oar_tensor_from_data(qv_x, OAR_F64, 2, (int64_t[]){4, 24}), OAR_F32),
        oar_cast(oar_tensor_from_data(qv_x3, OAR_F64, 3, (int64_t[]){2, 3, 24}), OAR_F32),
        oar_cast(oar_tensor_from_data(qv_c, OAR_F64, 4, (int64_t[]){1, 4, 7, 7}), OAR_F32)};
    oar_tensor *y[5] = {0};
    CHECK(p && oar_predictor_run(p, in, y) == 0);
    /* f32 results: ONNX Runtime's within f32 rounding of the scaled sums */
    CHECK_VALUES(y[0], qv_gemm, 28, 1e-5);
    CHECK_VALUES(y[1], qv_mm3, 42, 1e-5);
    CHECK_VALUES(y[2], qv_mm_asym, 28, 1e-5);
    CHECK_VALUES(y[3], qv_conv_g, 96, 1e-5);
    CHECK_VALUES(y[4], qv_conv_pads, 216, 1e-5);
    for (int i = 0; i < 5; i++) oar_tensor_release(y[i]);
    oar_pool_pop(pool);
    oar_predictor_free(p);
    oar_graph_free(g);
}

/* The folded CNN exported (opt) and imported again (keep_qdq), or NULL. */
static oar_graph *round_trip(oar_graph *g, const oar_onnx_export_options *opt, bool keep_qdq) {
    char path[] = "/tmp/oar_qdq_export_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0) return NULL;
    close(fd);
    CHECK(oar_onnx_export(g, path, opt) == 0);
    oar_graph *back = oar_onnx_load_with(path, &(oar_onnx_options){.keep_qdq = keep_qdq});
    CHECK(back != NULL);
    unlink(path);
    return back;
}

static void test_export_qdq_form(void) {
    oar_graph *g = oar_onnx_load("onnx/qdq_static.onnx");
    CHECK(g != NULL);
    if (!g) return;
    /* the QDQ form: read as written, f32 convs and matmuls between
     * dequantized int8 tensors; folded, the int8 kernels again */
    oar_graph *as_written = round_trip(g, NULL, true), *folded = round_trip(g, NULL, false);
    CHECK(as_written && oar_graph_count_op(as_written, "conv2d") == 2 && oar_graph_count_op(as_written, "matmul") == 2);
    CHECK(as_written && oar_graph_count_op(as_written, "qconv2d") == 0 && oar_graph_count_op(as_written, "qmatmul") == 0);
    CHECK(as_written && oar_graph_count_op(as_written, "dequantize") == 6); /* six activations (the weights fold at import) */
    CHECK(folded && oar_graph_count_op(folded, "qconv2d") == 2 && oar_graph_count_op(folded, "qmatmul") == 2);
    CHECK(folded && oar_graph_count_op(folded, "conv2d") == 0 && oar_graph_count_op(folded, "matmul") == 0);
    /* the operator form: ConvInteger and MatMulInteger, read as written */
    oar_graph *ops = round_trip(g, &(oar_onnx_export_options){.integer_ops = true}, true);
    CHECK(ops && oar_graph_count_op(ops, "qconv2d") == 2 && oar_graph_count_op(ops, "qmatmul") == 2);
    const double *xs[2] = {qdq_x0, qdq_x1}, *ort_int8[2] = {qdq_y0, qdq_y1};
    for (int r = 0; r < 2 && as_written && folded && ops; r++) {
        oar_tensor *y[3] = {run_cnn(as_written, xs[r]), run_cnn(folded, xs[r]), run_cnn(ops, xs[r])};
        for (int k = 0; k < 3; k++) {
            CHECK(steps_off(y[k], ort_int8[r], 10, qdq_y_scale) < 1e-3);
            oar_tensor_release(y[k]);
        }
    }
    oar_graph_free(ops);
    oar_graph_free(folded);
    oar_graph_free(as_written);
    oar_graph_free(g);
}

int main(void) {
    RUN(test_quantize_static_cnn);
    RUN(test_variants);
    RUN(test_export_qdq_form);
    return test_summary();
}

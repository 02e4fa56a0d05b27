/* ONNX import (include/oar/onnx.h): PyTorch-exported models (and a few
 * hand-built ones) loaded, run through the predictor at a batch other than
 * the traced one, compared with PyTorch/NumPy values from
 * tests/ref/gen_onnx.py; malformed files and unsupported ops fail with a
 * message naming the node. */
#include "test.h"
#include "onnx/onnx_ref.h"
#include "onnx/dyn13_ref.h"
#include "onnx/pool3d_ref.h"
#include <math.h>
#include <oar/oar.h>
#include <oar/onnx.h>
#include <unistd.h>

/* Loads path, runs x (f64 values as f32) and compares with want. */
static void check_model(const char *path, const double *x, int xnd, const int64_t *xshape, const double *want,
                        int ynd, const int64_t *yshape) {
    oar_graph *g = oar_onnx_load(path);
    CHECK(g != NULL);
    if (!g) return;
    oar_predictor *p = oar_predictor_from_graph(g, NULL);
    oar_graph_free(g);
    CHECK(p != NULL);
    if (!p) return;
    int64_t n = 1;
    for (int d = 0; d < xnd; d++) n *= xshape[d];
    float *xf = malloc((size_t)n * sizeof *xf);
    for (int64_t i = 0; i < n; i++) xf[i] = (float)x[i];
    oar_tensor *xt = oar_tensor_from_data(xf, OAR_F32, xnd, xshape), *y = NULL;
    free(xf);
    CHECK(oar_predictor_run(p, &xt, &y) == 0);
    if (y) {
        CHECK(oar_tensor_ndim(y) == ynd);
        int64_t m = 1;
        for (int d = 0; d < ynd && d < oar_tensor_ndim(y); d++) {
            CHECK(oar_tensor_shape(y)[d] == yshape[d]);
            m *= yshape[d];
        }
        CHECK(oar_tensor_numel(y) == m);
        CHECK(oar_tensor_dtype(y) == OAR_F32);
        const float *yv = oar_tensor_data(y);
        for (int64_t i = 0; i < m && oar_tensor_numel(y) == m; i++) CHECK_NEAR(yv[i], want[i], 1e-5);
    }
    oar_tensor_release(y);
    oar_tensor_release(xt);
    oar_predictor_free(p);
}

#define MODEL(name, xnd, ynd)                                                                            \
    check_model("onnx/" #name ".onnx", name##_x, xnd, name##_xshape, name##_y, ynd, name##_yshape)

static void test_pytorch_models(void) {
    MODEL(mlp13, 2, 2);  /* Gemm Sigmoid Softmax */
    MODEL(mlp11, 2, 2);  /* the same at opset 11 */
    MODEL(cnn13, 4, 2);  /* Conv (dilated, grouped) Relu MaxPool Tanh AveragePool Flatten Gemm */
    MODEL(misc13, 4, 3); /* GlobalAveragePool Sub Mul Div Reshape Transpose Constant */
}

static void test_softmax_opset11(void) {
    /* axis=1 on [2, 3, 4] at opset 11: one softmax over the last 12 values */
    static const int64_t s[] = {2, 3, 4};
    check_model("onnx/softmax11.onnx", softmax11_x, 3, s, softmax11_y, 3, s);
}

static void test_typed_initializers(void) {
    /* float_data / int64_data initializers: y = reshape(x + [1..6], [3, 2]) */
    static const double x[] = {0.5, -1, 2, 0, 3, -4}, want[] = {1.5, 1, 5, 4, 8, 2};
    check_model("onnx/typed.onnx", x, 1, (const int64_t[]){6}, want, 2, (const int64_t[]){3, 2});
}

static unsigned char *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    unsigned char *buf = malloc(1 << 16);
    *n = fread(buf, 1, 1 << 16, f);
    fclose(f);
    return buf;
}

static void test_errors(void) {
    CHECK_FAILS(oar_onnx_load("onnx/unknown_op.onnx"), "node 1 'mystery' (FooBar, opset 13): op is not supported");
    CHECK_FAILS(oar_onnx_load("onnx/no_such_file.onnx"), "cannot open");
    CHECK_FAILS(oar_onnx_load(NULL), "NULL path");
    CHECK_FAILS(oar_onnx_load_buffer(NULL, 3), "NULL data");
    size_t n = 0;
    unsigned char *buf = read_all("onnx/cnn13.onnx", &n);
    CHECK(buf != NULL && n > 100);
    if (!buf) return;
    /* truncated in the middle of the weights */
    CHECK_FAILS(oar_onnx_load_buffer(buf, n / 2), "not a valid ONNX model");
    CHECK_FAILS(oar_onnx_load_buffer(buf, n - 1), "not a valid ONNX model");
    /* garbage: a field number 0 and bad wire types */
    static const unsigned char junk[] = {0x00, 0xff, 0xff, 0xff, 0x07, 0x13, 0x37};
    CHECK_FAILS(oar_onnx_load_buffer(junk, sizeof junk), "not a valid ONNX model");
    /* a ModelProto with an empty graph (field 7) and opset_import (field 8)
     * {version (field 2) = 99} */
    static const unsigned char opset99[] = {0x3a, 0x00, 0x42, 0x02, 0x10, 0x63};
    CHECK_FAILS(oar_onnx_load_buffer(opset99, sizeof opset99), "opset 99 of the default domain is not supported");
    /* an empty buffer parses as an empty ModelProto: no graph */
    CHECK_FAILS(oar_onnx_load_buffer(buf, 0), "no graph");
    free(buf);
}

/* Every byte of each model overwritten in turn (0xff, 0x00, +1): each load
 * gives a graph or fails with a message, never crashes (run under ASan). */
static void test_mutations(void) {
    static const char *const files[] = {"onnx/cnn13.onnx", "onnx/misc13.onnx", "onnx/typed.onnx", "onnx/softmax11.onnx"};
    int loaded = 0, refused = 0, silent = 0;
    for (size_t f = 0; f < sizeof files / sizeof *files; f++) {
        size_t n = 0;
        unsigned char *buf = read_all(files[f], &n);
        CHECK(buf != NULL);
        if (!buf) continue;
        for (size_t i = 0; i < n; i++) {
            unsigned char keep = buf[i];
            const unsigned char vals[3] = {0xff, 0x00, (unsigned char)(keep + 1)};
            for (int v = 0; v < 3; v++) {
                buf[i] = vals[v];
                oar_clear_error();
                oar_graph *g = oar_onnx_load_buffer(buf, n);
                if (g) loaded++;
                else if (oar_last_error()[0]) refused++;
                else silent++;
                oar_graph_free(g);
            }
            buf[i] = keep;
        }
        free(buf);
    }
    CHECK(silent == 0);
    CHECK(refused > 0 && loaded > 0);
}

/* A dynamic batch whose reshape sizes come from Shape (PyTorch's
 * x.reshape(x.size(0), -1)): traced at 2, run at 5 against PyTorch; and
 * arithmetic on such a size as an output (N + 1, computed at run time). */
static void test_dynamic_shape_values(void) {
    MODEL(dyn13, 3, 2);
    oar_graph *g = oar_onnx_load("onnx/shape_arith.onnx");
    CHECK(g != NULL);
    oar_executor *ex = g ? oar_executor_new(g) : NULL;
    for (int64_t n = 2; ex && n <= 5; n += 3) {
        oar_tensor *x = oar_zeros(OAR_F32, 2, (int64_t[]){n, 3}), *y = NULL;
        CHECK(oar_executor_run(ex, &x, &y) == 0);
        CHECK(y && oar_tensor_dtype(y) == OAR_I64 && oar_tensor_ndim(y) == 0);
        if (y) CHECK(*(const int64_t *)oar_tensor_data(y) == n + 1);
        oar_tensor_release(x);
    }
    oar_executor_free(ex);
    oar_graph_free(g);
}

#define NODE_TESTS "/usr/share/libonnx-testdata/data/node"

/* The same byte mutations over node-test models of the ops with the most
 * code (recurrent, Resize, GridSample, control flow, the loss expansions).
 * Its own test, `test_onnx --node-models`, skipped as a whole without
 * libonnx-testdata; with it, every model named here must be there. */
static void test_mutations_node_models(void) {
    static const char *const tests[] = {"test_lstm_with_peepholes", "test_resize_upsample_scales_cubic",
                                        "test_gridsample_bicubic", "test_loop11", "test_if", "test_scan9_sum",
                                        "test_gathernd_example_int32_batch_dim1", "test_convtranspose_output_shape",
                                        "test_maxpool_2d_same_lower", "test_sce_mean_weight_ii_4d_log_prob_expanded"};
    int loaded = 0, refused = 0, silent = 0, files = 0;
    for (size_t f = 0; f < sizeof tests / sizeof *tests; f++) {
        char path[256];
        snprintf(path, sizeof path, NODE_TESTS "/%s/model.onnx", tests[f]);
        size_t n = 0;
        unsigned char *buf = read_all(path, &n);
        if (!buf) fprintf(stderr, "cannot read %s\n", path);
        CHECK(buf != NULL);
        if (!buf) continue;
        files++;
        for (size_t i = 0; i < n; i++) {
            unsigned char keep = buf[i];
            const unsigned char vals[3] = {0xff, 0x00, (unsigned char)(keep + 1)};
            for (int v = 0; v < 3; v++) {
                buf[i] = vals[v];
                oar_clear_error();
                oar_graph *g = oar_onnx_load_buffer(buf, n);
                if (g) loaded++;
                else if (oar_last_error()[0]) refused++;
                else silent++;
                oar_graph_free(g);
            }
            buf[i] = keep;
        }
        free(buf);
    }
    CHECK(files > 0);
    CHECK(silent == 0);
    CHECK(refused > 0 && loaded > 0);
}

/* onnxconf: errors naming the node, the op and opset; bound inputs;
 * TensorProto files. Models from tests/ref/gen_onnx_errors.py. */
static void test_conformance_errors(void) {
    CHECK_FAILS(oar_onnx_load("onnx/bad_opset_op.onnx"),
                "node 0 'sc' (Scatter, opset 13): op Scatter is not supported at opset 13 (supported at opsets 9..10)");
    CHECK_FAILS(oar_onnx_load("onnx/bad_shapes.onnx"), "node 1 'add' (Add, opset 13)");
    CHECK_FAILS(oar_onnx_load("onnx/bad_shapes.onnx"), "[4, 5]");
    CHECK_FAILS(oar_onnx_load("onnx/bad_dtype.onnx"), "input 'x': element type int16 (5) is not an oar dtype");
    CHECK_FAILS(oar_onnx_load("onnx/opset19.onnx"), "opset 19 of the default domain is not supported (1..18)");
    /* opset 18: ReduceMean's axes from an input, Pad with axes, Split by num_outputs */
    oar_graph *g18 = oar_onnx_load("onnx/opset18.onnx");
    CHECK(g18 != NULL);
    if (g18) {
        oar_predictor *p = oar_predictor_from_graph(g18, NULL);
        oar_graph_free(g18);
        oar_tensor *x = oar_tensor_from_data((float[]){1, 2, 3, 4, 5, 9}, OAR_F32, 2, (int64_t[]){2, 3});
        oar_tensor *y[4] = {NULL, NULL, NULL, NULL};
        CHECK(p && oar_predictor_run(p, &x, y) == 0);
        if (y[0] && y[1] && y[2] && y[3]) {
            const float *m = oar_tensor_data(y[0]), *pd = oar_tensor_data(y[1]);
            CHECK(oar_tensor_ndim(y[0]) == 1 && m[0] == 2 && m[1] == 6);
            CHECK(oar_tensor_shape(y[1])[1] == 6 && pd[0] == 0 && pd[1] == 1 && pd[3] == 3 && pd[4] == 0 && pd[7] == 4);
            CHECK(oar_tensor_shape(y[2])[1] == 2 && oar_tensor_shape(y[3])[1] == 1);
            CHECK(((const float *)oar_tensor_data(y[3]))[1] == 9);
        }
        for (int j = 0; j < 4; j++) oar_tensor_release(y[j]);
        oar_tensor_release(x);
        oar_predictor_free(p);
    }
    CHECK_FAILS(oar_onnx_load("onnx/runtime_shape.onnx"), "node 0 'rs' (Reshape, opset 13): input 1 's' is computed at run time");
    /* the shape bound as a value: the graph keeps one input, x */
    oar_tensor *shape = oar_tensor_from_data((int64_t[]){3, 2}, OAR_I64, 1, (int64_t[]){2});
    oar_tensor *vals[2] = {NULL, shape};
    CHECK_FAILS(oar_onnx_load_with("onnx/runtime_shape.onnx", &(oar_onnx_options){.n_values = 1, .values = vals}),
                "1 bound values for 2 graph inputs");
    CHECK_FAILS(oar_onnx_load_buffer_with("", 0, &(oar_onnx_options){.n_values = -1}), "n_values -1 < 0");
    oar_graph *g = oar_onnx_load_with("onnx/runtime_shape.onnx", &(oar_onnx_options){.n_values = 2, .values = vals});
    CHECK(g != NULL);
    if (g) {
        CHECK(oar_graph_num_inputs(g) == 1 && !strcmp(oar_graph_input_name(g, 0), "x"));
        oar_predictor *p = oar_predictor_from_graph(g, NULL);
        oar_graph_free(g);
        oar_tensor *x = oar_tensor_from_data((float[]){1, 2, 3, 4, 5, 6}, OAR_F32, 2, (int64_t[]){2, 3}), *y = NULL;
        CHECK(p && oar_predictor_run(p, &x, &y) == 0);
        CHECK(y && oar_tensor_ndim(y) == 2 && oar_tensor_shape(y)[0] == 3 && oar_tensor_shape(y)[1] == 2);
        if (y) CHECK(((const float *)oar_tensor_data(y))[5] == 6);
        oar_tensor_release(x);
        oar_tensor_release(y);
        oar_predictor_free(p);
    }
    oar_tensor_release(shape);
    /* TensorProto files */
    oar_tensor *t = oar_onnx_tensor_load("onnx/tensor_i64.pb");
    CHECK(t && oar_tensor_dtype(t) == OAR_I64 && oar_tensor_ndim(t) == 2 && oar_tensor_numel(t) == 4);
    if (t) CHECK(((const int64_t *)oar_tensor_data(t))[1] == -2 && ((const int64_t *)oar_tensor_data(t))[3] == (int64_t)1 << 40);
    oar_tensor_release(t);
    t = oar_onnx_tensor_load("onnx/tensor_i8.pb"); /* int8 in int32_data, one entry each */
    CHECK(t && oar_tensor_dtype(t) == OAR_I8 && oar_tensor_numel(t) == 2);
    if (t) CHECK(((const int8_t *)oar_tensor_data(t))[0] == 1 && ((const int8_t *)oar_tensor_data(t))[1] == -2);
    oar_tensor_release(t);
    CHECK_FAILS(oar_onnx_tensor_load("onnx/tensor_i16.pb"), "onnx/tensor_i16.pb: onnx: tensor 't16': element type int16 (5) is not an oar dtype");
    CHECK_FAILS(oar_onnx_tensor_load("onnx/no_such.pb"), "cannot open");
    CHECK_FAILS(oar_onnx_tensor_load(NULL), "NULL path");
    CHECK_FAILS(oar_onnx_tensor_load_buffer(NULL, 2), "NULL data");
    static const unsigned char junk[] = {0x00, 0xff, 0xff, 0xff, 0x07};
    CHECK_FAILS(oar_onnx_tensor_load_buffer(junk, sizeof junk), "not a valid TensorProto");
    /* dims [2] (field 1) of FLOAT (field 2 = 1) with one float (field 4) */
    static const unsigned char short_data[] = {0x08, 0x02, 0x10, 0x01, 0x25, 0x00, 0x00, 0x80, 0x3f};
    CHECK_FAILS(oar_onnx_tensor_load_buffer(short_data, sizeof short_data), "does not hold 2 float elements");
}

/* 3-D MaxPool / AveragePool (strides, pads, dilations, ceil_mode,
 * count_include_pad; imported as two separable passes) against PyTorch's
 * max_pool3d / avg_pool3d (tests/ref/gen_onnx_pool3d.py). */
static void test_pool3d(void) {
    float x[sizeof pool3d_x / sizeof *pool3d_x];
    for (size_t i = 0; i < sizeof x / sizeof *x; i++)
        x[i] = (float)pool3d_x[i];
    for (int c = 0; c < 4; c++) {
        char path[64];
        snprintf(path, sizeof path, "onnx/pool3d_%d.onnx", c);
        oar_graph *g = oar_onnx_load(path);
        if (!g) fprintf(stderr, "%s: %s\n", path, oar_last_error());
        CHECK(g != NULL);
        oar_executor *ex = g ? oar_executor_new(g) : NULL;
        oar_tensor *xt = oar_tensor_from_data(x, OAR_F32, 5, (int64_t[]){2, 3, 5, 6, 7}), *y = NULL;
        CHECK(!ex || oar_executor_run(ex, &xt, &y) == 0);
        if (y) {
            int64_t n = 1;
            for (int d = 0; d < 5; d++) {
                CHECK(oar_tensor_shape(y)[d] == pool3d_shape[c][d]);
                n *= pool3d_shape[c][d];
            }
            CHECK(oar_tensor_numel(y) == n);
            const float *v = oar_tensor_data(y);
            for (int64_t i = 0; i < n && oar_tensor_numel(y) == n; i++)
                CHECK_NEAR(v[i], pool3d_y[c][i], 1e-5);
        }
        oar_tensor_release(xt);
        oar_executor_free(ex);
        oar_graph_free(g);
    }
}

/* 3-D ConvTranspose (strides, pads, output_padding, dilations, 2 groups,
 * bias; one conv_transpose3d) against PyTorch's
 * conv_transpose3d (tests/ref/gen_onnx_pool3d.py). */
static void test_conv_transpose3d(void) {
    float x[sizeof convt3d_x / sizeof *convt3d_x];
    for (size_t i = 0; i < sizeof x / sizeof *x; i++)
        x[i] = (float)convt3d_x[i];
    oar_graph *g = oar_onnx_load("onnx/convt3d.onnx");
    if (!g) fprintf(stderr, "convt3d: %s\n", oar_last_error());
    CHECK(g != NULL);
    oar_executor *ex = g ? oar_executor_new(g) : NULL;
    oar_tensor *xt = oar_tensor_from_data(x, OAR_F32, 5, (int64_t[]){1, 4, 3, 4, 3}), *y = NULL;
    CHECK(!ex || oar_executor_run(ex, &xt, &y) == 0);
    if (y) {
        int64_t n = 1;
        for (int d = 0; d < 5; d++) {
            CHECK(oar_tensor_shape(y)[d] == convt3d_shape[d]);
            n *= convt3d_shape[d];
        }
        CHECK(oar_tensor_numel(y) == n);
        const float *v = oar_tensor_data(y);
        for (int64_t i = 0; i < n && oar_tensor_numel(y) == n; i++)
            CHECK_NEAR(v[i], convt3d_y[i], 1e-4);
    }
    oar_tensor_release(xt);
    oar_executor_free(ex);
    oar_graph_free(g);
}

/* Issue 27 (found while fuzzing): an input of dims [0, 2^62, 210] has no
 * elements, but its strides multiply past int64 (UBSan): refused. And the
 * 34-byte TensorProto that asked for 12 GB (tests/io/test_hostile_files.c
 * checks the allocations). */
static void test_hostile_shapes(void) {
    static const unsigned char model[] = {
        0x08, 0x07, 0x3a, 0x42, 0x0a, 0x10, 0x0a, 0x01, 0x78, 0x12, 0x01, 0x79, 0x22, 0x08, 0x49, 0x64, 0x65, 0x6e, 0x74,
        0x69, 0x74, 0x79, 0x12, 0x01, 0x67, 0x5a, 0x20, 0x0a, 0x01, 0x78, 0x12, 0x1b, 0x0a, 0x19, 0x08, 0x01, 0x12, 0x15,
        0x0a, 0x02, 0x08, 0x00, 0x0a, 0x0a, 0x08, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x40, 0x0a, 0x03, 0x08,
        0xd2, 0x01, 0x62, 0x09, 0x0a, 0x01, 0x79, 0x12, 0x04, 0x0a, 0x02, 0x08, 0x01, 0x42, 0x02, 0x10, 0x0d};
    CHECK_FAILS(oar_onnx_load_buffer(model, sizeof model), "onnx: input 'x': shape [0, 4611686018427387904, 210] overflows");
    unsigned char tensor[34] = {0x08, 0x80, 0xbc, 0xc1, 0x96, 0x0b, 0x10, 0x01, 0x4a, 24};
    CHECK_FAILS(oar_onnx_tensor_load_buffer(tensor, sizeof tensor), "does not hold 3000000000 float elements");
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--node-models")) {
        if (access(NODE_TESTS, R_OK)) {
            printf("skip: no %s (Debian: libonnx-testdata)\n", NODE_TESTS);
            return 77;
        }
        RUN(test_mutations_node_models);
        return test_summary();
    }
    RUN(test_pytorch_models);
    RUN(test_hostile_shapes);
    RUN(test_softmax_opset11);
    RUN(test_typed_initializers);
    RUN(test_errors);
    RUN(test_mutations);
    RUN(test_conformance_errors);
    RUN(test_dynamic_shape_values);
    RUN(test_pool3d);
    RUN(test_conv_transpose3d);
    return test_summary();
}

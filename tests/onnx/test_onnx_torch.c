/* PyTorch-exported models read by oar's ONNX importer (include/oar/onnx.h):
 * a LeNet-like CNN, nn.TransformerEncoderLayer and a GPT-style block, each
 * at opsets 14 and 17 with a static and a dynamic batch
 * (tests/ref/gen_onnx_torch.py); oar's outputs must match PyTorch's to
 * 1e-4, dynamic ones at two batch sizes; and a model whose sizes follow
 * the batch through shape arithmetic (tests/ref/gen_onnx_sizes.py). */
#include "test.h"
#include "onnx/torch_ref.h"
#include "onnx/sizes_ref.h"
#include <math.h>
#include <oar/oar.h>
#include <oar/onnx.h>

/* Runs ex on x (shape xshape) and compares output `out` with y (1e-4). */
static void run_compare(const char *path, oar_executor *ex, int n_out, int out, const double *x, int xnd,
                        const int64_t *xshape, const double *y, int ynd, const int64_t *yshape) {
    int64_t n = 1, m = 1;
    for (int d = 0; d < xnd; d++)
        n *= xshape[d];
    for (int d = 0; d < ynd; d++)
        m *= yshape[d];
    float *xf = malloc((size_t)n * sizeof *xf);
    for (int64_t i = 0; i < n; i++)
        xf[i] = (float)x[i];
    oar_tensor *xt = oar_tensor_from_data(xf, OAR_F32, xnd, xshape), *ys[8] = {0};
    free(xf);
    CHECK(n_out <= 8 && oar_executor_run(ex, &xt, ys) == 0);
    oar_tensor *yt = ys[out];
    if (yt) {
        CHECK(oar_tensor_ndim(yt) == ynd && oar_tensor_numel(yt) == m);
        for (int d = 0; d < ynd && oar_tensor_ndim(yt) == ynd; d++)
            CHECK(oar_tensor_shape(yt)[d] == yshape[d]);
        oar_tensor *yd = oar_cast(yt, OAR_F64);
        const double *v = oar_tensor_data(yd);
        double worst = 0;
        for (int64_t i = 0; i < m && oar_tensor_numel(yt) == m; i++)
            worst = fmax(worst, fabs(v[i] - y[i]));
        if (!(worst <= 1e-4)) fprintf(stderr, "%s (batch %lld): max |oar - torch| = %g\n", path,
                                      (long long)xshape[0], worst);
        CHECK(worst <= 1e-4);
        oar_tensor_release(yd);
    }
    oar_tensor_release(xt);
}

/* Every model loads. A dynamic model runs at its own reference batch (3)
 * and then, on the same executor, at the static model's (2): the same
 * network, so PyTorch's static outputs are the reference there. */
static void check_case(const torch_case *c, const torch_case *fixed, int opset) {
    char path[256];
    snprintf(path, sizeof path, "onnx/torch/%s_op%d_%s.onnx", c->model, opset,
             c->dynamic ? "dynamic" : "static");
    oar_graph *g = oar_onnx_load(path);
    if (!g) {
        fprintf(stderr, "%s: %s\n", path, oar_last_error());
        CHECK(g != NULL);
        return;
    }
    oar_executor *ex = oar_executor_new(g);
    CHECK(ex != NULL);
    if (ex) {
        run_compare(path, ex, 1, 0, c->x, c->xnd, c->xshape, c->y, c->ynd, c->yshape);
        if (c->dynamic && fixed)
            run_compare(path, ex, 1, 0, fixed->x, fixed->xnd, fixed->xshape, fixed->y, fixed->ynd, fixed->yshape);
    }
    oar_executor_free(ex);
    oar_graph_free(g);
}

static void test_torch_models(void) {
    size_t n = sizeof torch_cases / sizeof *torch_cases;
    for (size_t i = 0; i < n; i++) {
        const torch_case *fixed = NULL;
        for (size_t k = 0; k < n; k++)
            if (!strcmp(torch_cases[k].model, torch_cases[i].model) && !torch_cases[k].dynamic) fixed = &torch_cases[k];
        for (int opset = 14; opset <= 17; opset += 3)
            check_case(&torch_cases[i], fixed, opset);
    }
}

/* Sizes that follow the dynamic batch through shape arithmetic
 * (tests/ref/gen_onnx_sizes.py): reshaped to 3N, used as values (a mean,
 * a factor n + 1: size_of at run time), a ConstantOfShape, a Range, the
 * element count as an int64 output, expand(-1, t, -1) (Equal, Where), a
 * slice to 2N times x.numel(); at batches 2 and 5 on one executor. */
static void test_size_arithmetic(void) {
    const char *path = "onnx/torch/sizes_op17_dynamic.onnx";
    oar_graph *g = oar_onnx_load(path);
    if (!g) fprintf(stderr, "%s: %s\n", path, oar_last_error());
    CHECK(g != NULL);
    oar_executor *ex = g ? oar_executor_new(g) : NULL;
    CHECK(!g || ex);
    for (int k = 0; ex && k < 2; k++) {
        int64_t n = k ? 5 : 2, xs[3] = {n, 6, 4}, zs[3] = {n, 3, 8}, ms[1] = {8};
        const double *x = k ? sizes_x5 : sizes_x2, *z = k ? sizes_z5 : sizes_z2, *mean = k ? sizes_mean5 : sizes_mean2;
        run_compare(path, ex, 5, 0, x, 3, xs, z, 3, zs);
        run_compare(path, ex, 5, 1, x, 3, xs, mean, 1, ms);
        double count = (double)(k ? sizes_count5 : sizes_count2);
        run_compare(path, ex, 5, 2, x, 3, xs, &count, 1, (int64_t[]){1});
        run_compare(path, ex, 5, 3, x, 3, xs, k ? sizes_e5 : sizes_e2, 3, xs);
        run_compare(path, ex, 5, 4, x, 3, xs, k ? sizes_f5 : sizes_f2, 1, (int64_t[]){4});
    }
    oar_executor_free(ex);
    oar_graph_free(g);
}

/* Sizes the graph cannot hold are refused at import, naming the size. */
static void test_size_refusals(void) {
    /* a batch and a sequence both dynamic: PyTorch's encoder reshapes to N*T */
    oar_graph *g = oar_onnx_load("onnx/torch/encoder_op17_dynseq.onnx");
    CHECK(g == NULL);
    CHECK(strstr(oar_last_error(), "N*T") != NULL);
    oar_graph_free(g);
    /* N + 1 as a reshape size */
    g = oar_onnx_load("onnx/size_refused.onnx");
    CHECK(g == NULL);
    CHECK(strstr(oar_last_error(), "node 5 'rs' (Reshape, opset 13): input 1 (a shape) entry 0 is N + 1") != NULL);
    oar_graph_free(g);
}

int main(void) {
    RUN(test_torch_models);
    RUN(test_size_arithmetic);
    RUN(test_size_refusals);
    return test_summary();
}

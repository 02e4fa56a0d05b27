/* ONNX external data: tests/onnx/mlp13_ext.onnx is mlp13.onnx with its
 * initializers in mlp13_ext.data (tests/ref/gen_onnx_external.py): both
 * give the same outputs. The failures each name the tensor and the file:
 * a model loaded from memory, a missing or truncated data file, and a
 * location outside the model's folder (absolute or through ".."), made here
 * by rewriting the location string in the model's bytes. Run from tests/. */
#include "test.h"

#include <oar/onnx.h>
#include <unistd.h>

static void *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *b = malloc((size_t)len);
    *n = b && fread(b, 1, (size_t)len, f) == (size_t)len ? (size_t)len : 0;
    fclose(f);
    return b;
}

static bool spill(const char *path, const void *b, size_t n) {
    FILE *f = fopen(path, "wb");
    bool ok = f && fwrite(b, 1, n, f) == n;
    if (f) fclose(f);
    return ok;
}

/* y of graph g for the fixed input x [3, 8] into out[12]. */
static bool run(oar_graph *g, double *out) {
    float xv[24];
    for (int i = 0; i < 24; i++) xv[i] = (float)(i % 7) * 0.25f - 0.7f;
    oar_pool *p = oar_pool_push();
    oar_tensor *x = oar_tensor_from_data(xv, OAR_F32, 2, (int64_t[]){3, 8}), *y = NULL;
    oar_executor *ex = g ? oar_executor_new(g) : NULL;
    bool ok = ex && oar_executor_run(ex, &x, &y) == 0 && oar_tensor_numel(y) == 12 &&
              oar_tensor_to_host(oar_cast(y, OAR_F64), out, 12 * sizeof *out) == 0;
    oar_executor_free(ex);
    oar_pool_pop(p);
    return ok;
}

static void test_same_as_inline(void) {
    oar_graph *inline_g = oar_onnx_load("onnx/mlp13.onnx"), *ext = oar_onnx_load("onnx/mlp13_ext.onnx");
    CHECK(inline_g && ext);
    double a[12], b[12];
    CHECK(run(inline_g, a) && run(ext, b));
    int same = 0;
    for (int i = 0; i < 12; i++) same += a[i] == b[i];
    CHECK(same == 12);
    oar_graph_free(inline_g);
    oar_graph_free(ext);
}

/* The model's bytes with its location "mlp13_ext.data" replaced by loc
 * (same length, so the protobuf stays valid), written to dir/model.onnx. */
static bool rewritten(const char *dir, const char *loc) {
    size_t n = 0;
    char *b = slurp("onnx/mlp13_ext.onnx", &n);
    const char *old = "mlp13_ext.data";
    size_t k = strlen(old), hits = 0;
    for (size_t i = 0; b && i + k <= n; i++)
        if (!memcmp(b + i, old, k)) memcpy(b + i, loc, k), hits++;
    char path[512];
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    bool ok = hits == 4 && strlen(loc) == k && spill(path, b, n);
    free(b);
    return ok;
}

static void test_failures(void) {
    char dir[] = "/tmp/oar-onnx-ext-XXXXXX", model[600], data[600];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(model, sizeof model, "%s/model.onnx", dir);
    snprintf(data, sizeof data, "%s/mlp13_ext.data", dir);
    /* from memory: no folder to read the data from */
    size_t n = 0;
    void *bytes = slurp("onnx/mlp13_ext.onnx", &n);
    CHECK_FAILS(oar_onnx_load_buffer(bytes, n), "load the model from its file");
    free(bytes);
    /* the model without its data file */
    CHECK(rewritten(dir, "mlp13_ext.data"));
    CHECK_FAILS(oar_onnx_load(model), "cannot open its external data file");
    CHECK_FAILS(oar_onnx_load(model), "mlp13_ext.data");
    /* a truncated data file: the tensors past its end are named */
    void *d = slurp("onnx/mlp13_ext.data", &n);
    CHECK(d && n == 848 && spill(data, d, 600));
    CHECK_FAILS(oar_onnx_load(model), "holds 600 bytes, the tensor needs 256 at offset 576 (truncated?)");
    /* whole again: loads from the other folder */
    CHECK(spill(data, d, n));
    oar_graph *g = oar_onnx_load(model);
    double y[12];
    CHECK(g && run(g, y));
    oar_graph_free(g);
    free(d);
    /* locations outside the model's folder */
    CHECK(rewritten(dir, "../3_ext.data/"));
    CHECK_FAILS(oar_onnx_load(model), "must be a path inside the model's folder");
    CHECK(rewritten(dir, "/tmp/3ext.data"));
    CHECK_FAILS(oar_onnx_load(model), "must be a path inside the model's folder");
    CHECK(rewritten(dir, "a/../ext.data1"));
    CHECK_FAILS(oar_onnx_load(model), "'a/../ext.data1' must be a path inside");
    unlink(model);
    unlink(data);
    CHECK(rmdir(dir) == 0);
}

int main(void) {
    RUN(test_same_as_inline);
    RUN(test_failures);
    return test_summary();
}

/* Saved model folders: a round trip runs the same as the traced graph, and
 * every kind of damage gives a clear error naming the file. */
#include "graph_test_util.h"

#include <sys/stat.h>
#include <unistd.h>

static char dir[] = "/tmp/oar_saved_XXXXXX";

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = calloc(*n + 1, 1);
    if (fread(b, 1, *n, f) != *n) *n = 0;
    fclose(f);
    return b;
}

static void spit(const char *path, const char *b, size_t n) {
    FILE *f = fopen(path, "wb");
    fwrite(b, 1, n, f);
    fclose(f);
}

static char json_path[256], weights_path[256], *json_text, *weights_bytes;
static size_t json_len, weights_len;

static void restore(void) {
    spit(json_path, json_text, json_len);
    spit(weights_path, weights_bytes, weights_len);
}

/* Writes model.json with the first `from` replaced by `to`. */
static void edit_json(const char *from, const char *to) {
    char *at = strstr(json_text, from);
    CHECK(at != NULL);
    if (!at) return;
    FILE *f = fopen(json_path, "wb");
    fwrite(json_text, 1, (size_t)(at - json_text), f);
    fputs(to, f);
    fputs(at + strlen(from), f);
    fclose(f);
}

static double run_diff(oar_graph *a, oar_graph *b, int ndim, const int64_t *shape) {
    oar_pool *p = oar_pool_push();
    oar_tensor *x = oar_randn(OAR_F32, ndim, shape), *ya = NULL, *yb = NULL;
    oar_executor *ea = oar_executor_new(a), *eb = oar_executor_new(b);
    double d = oar_executor_run(ea, &x, &ya) || oar_executor_run(eb, &x, &yb) ? INFINITY : max_diff(ya, yb);
    oar_executor_free(ea);
    oar_executor_free(eb);
    oar_pool_pop(p);
    return d;
}

static void test_round_trip(void) {
    oar_module *m = make_cnn();
    oar_graph_input_spec s = {.name = "x", .dtype = OAR_F32, .ndim = 4, .shape = {-1, 1, 8, 8}, .dim_names = {"N"}};
    oar_graph *g = oar_trace_module(m, &s);
    CHECK(oar_graph_save(g, dir) == 0);
    oar_graph *h = oar_graph_load(dir);
    CHECK(h != NULL);
    CHECK(oar_graph_num_nodes(h) == oar_graph_num_nodes(g));
    CHECK(oar_graph_num_constants(h) == oar_graph_num_constants(g));
    CHECK(strcmp(oar_graph_input_name(h, 0), "x") == 0 && strcmp(oar_graph_output_name(h, 0), "y") == 0);
    int64_t shape[4];
    CHECK(oar_graph_input_shape(h, 0, NULL, shape) == 4 && shape[0] == -1 && shape[3] == 8);
    CHECK_NEAR(run_diff(g, h, 4, (int64_t[]){3, 1, 8, 8}), 0, 0);
    oar_graph_free(h);
    /* an optimised graph (new constant names) round-trips too */
    CHECK(oar_graph_optimize(g, OAR_PASSES_INFERENCE, 0) == 0);
    CHECK(oar_graph_save(g, dir) == 0);
    h = oar_graph_load(dir);
    CHECK(h && oar_graph_count_op(h, "batch_norm") == 0);
    CHECK_NEAR(run_diff(g, h, 4, (int64_t[]){2, 1, 8, 8}), 0, 0);
    oar_graph_free(h);
    oar_graph_free(g);
    oar_module_free(m);
}

static void test_damage(void) {
    oar_module *m = make_mlp();
    oar_graph_input_spec s = {.name = "x", .dtype = OAR_F32, .ndim = 2, .shape = {-1, 8}};
    oar_graph *g = oar_trace_module(m, &s);
    CHECK(oar_graph_save(g, dir) == 0);
    snprintf(json_path, sizeof json_path, "%s/model.json", dir);
    snprintf(weights_path, sizeof weights_path, "%s/weights.safetensors", dir);
    json_text = slurp(json_path, &json_len);
    weights_bytes = slurp(weights_path, &weights_len);
    oar_graph *ok = oar_graph_load(dir);
    CHECK(ok != NULL);
    oar_graph_free(ok);

    CHECK_FAILS(oar_graph_load("/nonexistent/oar"), "cannot open");
    edit_json("\"version\":\t1", "\"version\":\t7");
    CHECK_FAILS(oar_graph_load(dir), "unsupported format version 7");
    restore();
    edit_json("\"relu\"", "\"frobnicate\"");
    CHECK_FAILS(oar_graph_load(dir), "unknown op \"frobnicate\"");
    restore();
    edit_json("\"0.bias\"", "\"0.gone\"");
    CHECK_FAILS(oar_graph_load(dir), "weight \"0.gone\" is missing");
    restore();
    /* a weights file whose tensor has the wrong shape */
    oar_pool *p = oar_pool_push();
    const char *names[4] = {"0.weight", "0.bias", "2.weight", "2.bias"};
    oar_tensor *ts[4] = {oar_module_get(m, "0.weight"), oar_zeros(OAR_F32, 1, (int64_t[]){17}),
                         oar_module_get(m, "2.weight"), oar_module_get(m, "2.bias")};
    CHECK(oar_safetensors_save(weights_path, 4, names, ts) == 0);
    CHECK_FAILS(oar_graph_load(dir), "weight \"0.bias\" is float32 [17]; model.json wants float32 [16]");
    oar_pool_pop(p);
    restore();
    spit(json_path, json_text, json_len / 2); /* truncated */
    CHECK_FAILS(oar_graph_load(dir), "not valid JSON");
    restore();
    spit(weights_path, weights_bytes, weights_len - 7); /* truncated weights */
    CHECK_FAILS(oar_graph_load(dir), "weights.safetensors");
    restore();
    char *junk = strdup(json_text);
    junk[0] = 'X';
    spit(json_path, junk, json_len); /* corrupted */
    CHECK_FAILS(oar_graph_load(dir), "not valid JSON");
    free(junk);
    restore();
    /* a node whose recorded shape disagrees with the op's shape rule */
    edit_json("\"float32\",\n\t\t\t\"shape\":\t[\"s0\", 16]", "\"float32\",\n\t\t\t\"shape\":\t[\"s0\", 15]");
    oar_graph *bad = oar_graph_load(dir);
    CHECK(bad == NULL);
    oar_graph_free(bad);
    restore();
    edit_json("\"format\":\t\"oar.graph\"", "\"format\":\t\"onnx\"");
    CHECK_FAILS(oar_graph_load(dir), "not an oar graph");
    restore();
    CHECK_STATUS_FAILS(oar_graph_save(g, "/nonexistent/oar/x"), "cannot create folder");
    free(json_text);
    free(weights_bytes);
    oar_graph_free(g);
    oar_module_free(m);
}

int main(void) {
    if (!mkdtemp(dir)) return 1;
    RUN(test_round_trip);
    RUN(test_damage);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) return 1;
    return test_summary();
}

/* Saved model folders: a round trip runs the same as the traced graph;
 * every kind of damage gives a clear error naming the file; a forged
 * model.json (an input value the inputs do not list, a symbol's trace
 * size of 0 or 1e300) is refused by the loader and the verifier and never
 * crashes the executor or the predictor; the manifest (model.json's
 * "weights" record) is checked against the weights file. */
#include "graph_test_util.h"
#include "saved_model_util.h"

#include "graph/ir.h"
#include <oar/infer.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[] = "/tmp/oar_saved_XXXXXX";

static char json_path[256], weights_path[4400], *json_text, *weights_bytes;
static size_t json_len, weights_len;

static void restore(void) {
    sm_spit(json_path, json_text, json_len);
    sm_spit(weights_path, weights_bytes, weights_len);
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

/* Saves m traced on [N, 8] into dir and keeps its files' bytes for
 * restore(); the traced graph. */
static oar_graph *save_mlp(oar_module *m) {
    oar_graph_input_spec s = {.name = "x", .dtype = OAR_F32, .ndim = 2, .shape = {-1, 8}};
    oar_graph *g = oar_trace_module(m, &s);
    CHECK(oar_graph_save(g, dir) == 0);
    snprintf(json_path, sizeof json_path, "%s/model.json", dir);
    CHECK(sm_weights_path(dir, weights_path, sizeof weights_path) == 0);
    free(json_text);
    free(weights_bytes);
    json_text = sm_slurp(json_path, &json_len);
    weights_bytes = sm_slurp(weights_path, &weights_len);
    return g;
}

static void test_damage(void) {
    oar_module *m = make_mlp();
    oar_graph *g = save_mlp(m);
    oar_graph *ok = oar_graph_load(dir);
    CHECK(ok != NULL);
    oar_graph_free(ok);
    CHECK(sm_count(dir, "") == 2 && sm_count(dir, ".tmp.") == 0); /* model.json and its weights, nothing else */

    CHECK_FAILS(oar_graph_load("/nonexistent/oar"), "cannot open");
    edit_json("\"version\":\t3", "\"version\":\t7");
    CHECK_FAILS(oar_graph_load(dir), "unsupported format version 7");
    restore();
    edit_json("\"relu\"", "\"frobnicate\"");
    CHECK_FAILS(oar_graph_load(dir), "unknown op \"frobnicate\"");
    restore();
    edit_json("\"0.bias\"", "\"0.gone\"");
    CHECK_FAILS(oar_graph_load(dir), "weight \"0.gone\" is missing");
    restore();
    /* a weights file whose tensor has the wrong shape (the manifest made to
     * match it, so that the shape check is what fails) */
    oar_pool *p = oar_pool_push();
    const char *names[4] = {"0.weight", "0.bias", "2.weight", "2.bias"};
    oar_tensor *ts[4] = {oar_module_get(m, "0.weight"), oar_zeros(OAR_F32, 1, (int64_t[]){17}),
                         oar_module_get(m, "2.weight"), oar_module_get(m, "2.bias")};
    CHECK(oar_safetensors_save(weights_path, 4, names, ts) == 0);
    CHECK_FAILS(oar_graph_load(dir), "holds"); /* first: not the weights model.json was saved with */
    sm_recommit(dir);
    CHECK_FAILS(oar_graph_load(dir), "weight \"0.bias\" is float32 [17]; model.json wants float32 [16]");
    oar_pool_pop(p);
    restore();
    sm_spit(json_path, json_text, json_len / 2); /* truncated */
    CHECK_FAILS(oar_graph_load(dir), "not valid JSON");
    restore();
    sm_spit(weights_path, weights_bytes, weights_len - 7); /* truncated weights */
    CHECK_FAILS(oar_graph_load(dir), "weights.");
    restore();
    char *junk = strdup(json_text);
    junk[0] = 'X';
    sm_spit(json_path, junk, json_len); /* corrupted */
    CHECK_FAILS(oar_graph_load(dir), "not valid JSON");
    free(junk);
    restore();
    /* a node whose recorded shape disagrees with the op's shape rule */
    edit_json("\"float32\",\n\t\t\t\"shape\":\t[\"s0\", 16]", "\"float32\",\n\t\t\t\"shape\":\t[\"s0\", 15]");
    oar_graph *bad = oar_graph_load(dir);
    CHECK(bad == NULL);
    oar_graph_free(bad);
    restore();
    /* shapes that are negative, or whose dims multiply past int64 even with
     * a 0 among them (the strides of an empty tensor still do) */
    edit_json("\"shape\":\t[\"s0\", 16]", "\"shape\":\t[\"s0\", -16]");
    CHECK_FAILS(oar_graph_load(dir), "has shape [1031, -16], negative or past int64");
    edit_json("\"shape\":\t[\"s0\", 16]", "\"shape\":\t[0, \"4611686018427387904\", 16]");
    CHECK_FAILS(oar_graph_load(dir), "has shape [0, 4611686018427387904], negative or past int64");
    restore();
    edit_json("\"format\":\t\"oar.graph\"", "\"format\":\t\"onnx\"");
    CHECK_FAILS(oar_graph_load(dir), "not an oar graph");
    restore();
    CHECK_STATUS_FAILS(oar_graph_save(g, "/nonexistent/oar/x"), "cannot create folder");
    oar_graph_free(g);
    oar_module_free(m);
}

/* The manifest: model.json's "weights" record names the weights file with
 * its size and crc32; a folder whose files do not match it does not load. */
static void test_manifest(void) {
    oar_module *m = make_mlp();
    oar_graph *g = save_mlp(m);
    const char *wname = strrchr(weights_path, '/') + 1;
    char from[300], to[300];
    snprintf(from, sizeof from, "\"file\":\t\"%s\"", wname);
    snprintf(to, sizeof to, "\"nofile\":\t\"%s\"", wname);
    edit_json("\"weights\":\t{", "\"weightz\":\t{");
    CHECK_FAILS(oar_graph_load(dir), "no \"weights\" record");
    edit_json(from, to);
    CHECK_FAILS(oar_graph_load(dir), "\"weights\".\"file\" is not a weights file name");
    const char *hostile[] = {"../../etc/passwd", "/etc/passwd", "weights.safetensors", "weights.1.x.safetensors",
                             "weights.1.2.safetensors/../../x.1.2.safetensors"};
    for (size_t k = 0; k < sizeof hostile / sizeof *hostile; k++) {
        snprintf(to, sizeof to, "\"file\":\t\"%s\"", hostile[k]);
        edit_json(from, to);
        CHECK_FAILS(oar_graph_load(dir), "is not a weights file name");
    }
    edit_json("\"bytes\":\t", "\"bytes\":\t-");
    CHECK_FAILS(oar_graph_load(dir), "needs \"bytes\" and \"crc32\" as whole numbers");
    edit_json("\"crc32\":\t", "\"crc32\":\t-");
    CHECK_FAILS(oar_graph_load(dir), "needs \"bytes\" and \"crc32\" as whole numbers");
    snprintf(to, sizeof to, "\"file\":\t\"weights.99999999.1.safetensors\"");
    edit_json(from, to);
    CHECK_FAILS(oar_graph_load(dir), "does not exist");
    restore();
    /* the same size, one byte changed: the crc32 tells */
    char *w = malloc(weights_len);
    memcpy(w, weights_bytes, weights_len);
    w[weights_len - 1] ^= 1;
    sm_spit(weights_path, w, weights_len);
    CHECK_FAILS(oar_graph_load(dir), "crc32 is");
    free(w);
    sm_spit(weights_path, weights_bytes, weights_len / 2);
    CHECK_FAILS(oar_graph_load(dir), "bytes; it records");
    restore();
    /* formats 1 and 2 (older oar) had no manifest and a fixed weights file:
     * read as they are */
    char legacy[300];
    snprintf(legacy, sizeof legacy, "%s/weights.safetensors", dir);
    for (int v = 1; v <= 2; v++) {
        char want[32];
        snprintf(want, sizeof want, "\"version\":\t%d", v);
        edit_json("\"version\":\t3", want);
        CHECK_FAILS(oar_graph_load(dir), "cannot open");
        CHECK(rename(weights_path, legacy) == 0);
        oar_graph *old = oar_graph_load(dir);
        CHECK(old && oar_graph_num_nodes(old) == oar_graph_num_nodes(g));
        oar_graph_free(old);
        CHECK(rename(legacy, weights_path) == 0);
        restore();
    }
    edit_json("\"version\":\t3", "\"version\":\t4");
    CHECK_FAILS(oar_graph_load(dir), "unsupported format version 4");
    edit_json("\"version\":\t3", "\"version\":\t2"); /* a folder an older oar saved */
    /* saving over such a folder replaces it: its weights.safetensors goes */
    unlink(weights_path);
    sm_spit(legacy, "old", 3);
    CHECK(oar_graph_save(g, dir) == 0);
    CHECK(access(legacy, F_OK) != 0 && sm_count(dir, "") == 2);
    oar_graph *h = oar_graph_load(dir);
    CHECK(h != NULL);
    oar_graph_free(h);
    /* saving again removes the weights the last model.json named */
    char before[4400];
    CHECK(sm_weights_path(dir, before, sizeof before) == 0);
    CHECK(oar_graph_save(g, dir) == 0);
    CHECK(access(before, F_OK) != 0 && sm_count(dir, "") == 2);
    oar_graph_free(g);
    oar_module_free(m);
}

/* oari_graph_from_json (the fuzzers' entry): the same reader on a text and
 * a weights dict, without the manifest. */
static void test_from_json(void) {
    oar_module *m = make_mlp();
    oar_graph *g = save_mlp(m);
    oar_tensor_dict *w = oar_safetensors_load(weights_path);
    oar_graph *h = oari_graph_from_json(json_text, json_len, w, "model.json", "weights");
    CHECK(h && oar_graph_num_constants(h) == 4);
    oar_graph_free(h);
    CHECK_FAILS(oari_graph_from_json(NULL, 0, w, "model.json", "weights"), "graph_from_json: NULL argument");
    CHECK_FAILS(oari_graph_from_json(json_text, json_len / 2, w, "model.json", "weights"), "model.json: not valid JSON");
    CHECK_FAILS(oari_graph_from_json("{\"format\":\"oar.graph\",\"version\":3}", 36, w, "m.json", "weights"),
                "m.json: the model has no \"symbols\" list");
    oar_tensor_dict_free(w);
    oar_graph_free(g);
    oar_module_free(m);
}

/* Issue 27: a model.json whose constant's "kind" says "input" passed the
 * loader and the verifier, and the executor then read a NULL tensor. The
 * loader refuses it naming the value; the verifier refuses such a graph in
 * memory; the executor and the predictor fail with a message, no crash. */
static void test_forged_input(void) {
    oar_module *m = make_mlp();
    oar_graph *g = save_mlp(m);
    edit_json("\"kind\":\t\"const\"", "\"kind\":\t\"input\"");
    CHECK_FAILS(oar_graph_load(dir), "is an input value, but not one of the graph's 1 inputs");
    CHECK_FAILS(oar_graph_load(dir), "model.json");
    oar_predictor_config cfg = {.model_dir = dir, .optimize = true};
    CHECK_FAILS(oar_predictor_create(&cfg), "is an input value, but not one of the graph's 1 inputs");
    cfg.no_compile = true;
    CHECK_FAILS(oar_predictor_create(&cfg), "is an input value");
    restore();
    /* an inputs list naming a value twice, or a constant */
    edit_json("\"inputs\":\t[0]", "\"inputs\":\t[0, 0]");
    CHECK_FAILS(oar_graph_load(dir), "inputs 0 and 1 are both value 0");
    restore();
    /* the same graph in memory: the verifier, then the executor's guard */
    oar_graph *h = oar_graph_clone(g);
    int c = -1;
    for (int v = 0; v < h->n_values && c < 0; v++)
        if (h->values[v].kind == OARI_V_CONST) c = v;
    CHECK(c >= 0);
    h->values[c].kind = OARI_V_INPUT;
    CHECK_STATUS_FAILS(oar_graph_verify(h), "is an input value, but not one of the graph's");
    oar_pool *p = oar_pool_push();
    oar_executor *ex = oar_executor_new(h);
    oar_tensor *x = oar_randn(OAR_F32, 2, (int64_t[]){3, 8}), *y = NULL;
    CHECK_STATUS_FAILS(oar_executor_run(ex, &x, &y), "is an input the graph does not list");
    oar_executor_free(ex);
    /* a constant without its tensor */
    h->values[c].kind = OARI_V_CONST;
    oar_tensor *keep = h->values[c].constant;
    h->values[c].constant = NULL;
    CHECK_STATUS_FAILS(oar_graph_verify(h), "but holds no tensor");
    ex = oar_executor_new(h);
    CHECK_STATUS_FAILS(oar_executor_run(ex, &x, &y), "a constant without a tensor");
    oar_executor_free(ex);
    h->values[c].constant = keep;
    CHECK(oar_graph_verify(h) == 0);
    oar_pool_pop(p);
    oar_graph_free(h);
    oar_graph_free(g);
    oar_module_free(m);
}

/* Issue 27: a symbol's trace size of 0 divided by zero in the symbol
 * lookup (oar info, oar run); 1e300 was undefined behaviour converting to
 * int64. Both are refused, as is any size not a whole number in [2, 2^31). */
static void test_trace_size(void) {
    oar_module *m = make_mlp();
    oar_graph_input_spec s = {.name = "x", .dtype = OAR_F32, .ndim = 2, .shape = {-1, 8}, .dim_names = {"N"}};
    oar_graph *g = oar_trace_module(m, &s);
    CHECK(oar_graph_save(g, dir) == 0);
    free(json_text);
    json_text = sm_slurp(json_path, &json_len);
    const char *bad[] = {"0", "1e300", "-1031", "1", "2.5", "\"N\"", "1e19", "nan"};
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        char to[64];
        snprintf(to, sizeof to, "\"trace_size\":\t%s", bad[k]);
        edit_json("\"trace_size\":\t1031", to);
        oar_graph *h = oar_graph_load(dir);
        CHECK(h == NULL && (strstr(oar_last_error(), "trace_size") || strstr(oar_last_error(), "not valid JSON")));
        oar_graph_free(h);
    }
    edit_json("\"trace_size\":\t1031", "\"trace_size\":\t0");
    CHECK_FAILS(oar_graph_load(dir), "symbol \"N\" has trace_size 0; it must be a whole number in [2, 2147483647]");
    edit_json("\"trace_size\":\t1031", "\"trace_size\":\t1e300");
    CHECK_FAILS(oar_graph_load(dir), "has trace_size 1e+300");
    sm_spit(json_path, json_text, json_len);
    oar_graph *h = oar_graph_load(dir);
    CHECK(h != NULL);
    oar_graph_free(h);
    /* in memory: the verifier refuses the symbol, and the lookup skips it */
    h = oar_graph_clone(g);
    h->syms[0].trace_size = 0;
    CHECK_STATUS_FAILS(oar_graph_verify(h), "symbol 0 (N) has trace size 0");
    CHECK(oari_graph_sym_of(h, 2062, NULL) == -1);
    oar_graph_free(h);
    oar_graph_free(g);
    oar_module_free(m);
}

int main(void) {
    if (!mkdtemp(dir)) return 1;
    RUN(test_round_trip);
    RUN(test_damage);
    RUN(test_manifest);
    RUN(test_from_json);
    RUN(test_forged_input);
    RUN(test_trace_size);
    free(json_text);
    free(weights_bytes);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) return 1;
    return test_summary();
}

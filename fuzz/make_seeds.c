/* Writes the committed seed corpora, fuzz/corpus/<harness>/ (small valid
 * files of each format, the issue-27 reproducers, and the test fixtures):
 *
 *     ./build-fuzz/make_seeds . fuzz/corpus      (from the source root)
 *
 * Rerun it when a format changes; docs/fuzzing.md. */
#include <oar/oar.h>
#include <oar/autograd.h>
#include <oar/data.h>
#include <oar/graph.h>
#include <oar/infer.h>
#include <oar/io.h>
#include <oar/optim.h>

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

static const char *src, *out;

static void die(const char *what) {
    fprintf(stderr, "make_seeds: %s (%s)\n", what, oar_last_error());
    exit(1);
}

static char *path_of(const char *harness, const char *name) {
    static char p[1024];
    snprintf(p, sizeof p, "%s/%s", out, harness);
    mkdir(p, 0777);
    snprintf(p, sizeof p, "%s/%s/%s", out, harness, name);
    return p;
}

static void put(const char *harness, const char *name, const void *data, size_t n) {
    FILE *f = fopen(path_of(harness, name), "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n)) die(name);
    fclose(f);
}

static unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) die(path);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*n + 1);
    if (fread(b, 1, *n, f) != *n) die(path);
    b[*n] = 0;
    fclose(f);
    return b;
}

static void copy(const char *harness, const char *from, const char *name) {
    size_t n;
    unsigned char *b = slurp(from, &n);
    put(harness, name, b, n);
    free(b);
}

/* Copies files of folder `from` (under the source root) ending in suffix
 * and at most max bytes. */
static void copy_dir(const char *harness, const char *from, const char *suffix, size_t max) {
    char d[1024];
    snprintf(d, sizeof d, "%s/%s", src, from);
    DIR *dir = opendir(d);
    if (!dir) die(d);
    struct dirent *e;
    while ((e = readdir(dir))) {
        size_t l = strlen(e->d_name), sl = strlen(suffix);
        if (l < sl || strcmp(e->d_name + l - sl, suffix)) continue;
        char p[2048];
        snprintf(p, sizeof p, "%s/%s", d, e->d_name);
        struct stat sb;
        if (stat(p, &sb) || (size_t)sb.st_size > max) continue;
        copy(harness, p, e->d_name);
    }
    closedir(dir);
}

/* ---- .npy, IDX, CSV, safetensors ------------------------------------------------ */

static void npy_seeds(void) {
    char tmp[] = "/tmp/oar_seeds_XXXXXX";
    if (!mkdtemp(tmp)) die("mkdtemp");
    char p[256];
    snprintf(p, sizeof p, "%s/x.npy", tmp);
    oar_manual_seed(3);
    struct { const char *name; oar_tensor *t; } ts[] = {
        {"f32_2x3.npy", oar_randn(OAR_F32, 2, (int64_t[]){2, 3})},
        {"f64_4.npy", oar_randn(OAR_F64, 1, (int64_t[]){4})},
        {"i64_empty.npy", oar_zeros(OAR_I64, 2, (int64_t[]){0, 3})},
        {"u8_0d.npy", oar_ones(OAR_U8, 0, NULL)},
        {"c64_2.npy", oar_zeros(OAR_C64, 1, (int64_t[]){2})},
        {"f16_3x1x2.npy", oar_ones(OAR_F16, 3, (int64_t[]){3, 1, 2})},
    };
    for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) {
        if (oar_npy_save(p, ts[i].t)) die("npy_save");
        copy("fuzz_npy", p, ts[i].name);
    }
    copy_dir("fuzz_npy", "tests/infer", ".npy", 4096);
    /* the reproducers: 2e9 float64 in 150 bytes; a header ending in "'descr': '" */
    unsigned char b[256] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 118, 0};
    const char *h = "{'descr': '<f8', 'fortran_order': False, 'shape': (2000000000,), }";
    memset(b + 10, ' ', 118);
    memcpy(b + 10, h, strlen(h));
    b[127] = '\n';
    put("fuzz_npy", "issue27_16gb.npy", b, 150);
    const char *cut = "{'shape': (2,), 'fortran_order': False, 'descr': '";
    b[8] = (unsigned char)strlen(cut);
    memcpy(b + 10, cut, strlen(cut));
    put("fuzz_npy", "issue27_descr_cut.npy", b, 10 + strlen(cut));
    remove(p);
    rmdir(tmp);
}

static void idx_seeds(void) {
    unsigned char u8[40] = {0, 0, 0x08, 3, 0, 0, 0, 3, 0, 0, 0, 2, 0, 0, 0, 4};
    for (int i = 0; i < 24; i++) u8[16 + i] = (unsigned char)(3 * i + 1);
    put("fuzz_idx", "u8_3x2x4.idx", u8, sizeof u8);
    unsigned char i8[] = {0, 0, 0x09, 1, 0, 0, 0, 2, 0xff, 0x05};
    unsigned char i16[] = {0, 0, 0x0B, 1, 0, 0, 0, 2, 0xff, 0xfe, 0x01, 0x00};
    unsigned char i32[] = {0, 0, 0x0C, 1, 0, 0, 0, 1, 0x80, 0, 0, 1};
    unsigned char f32[] = {0, 0, 0x0D, 2, 0, 0, 0, 1, 0, 0, 0, 1, 0x3f, 0x80, 0, 0};
    unsigned char f64[] = {0, 0, 0x0E, 1, 0, 0, 0, 1, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0};
    unsigned char big[] = {0, 0, 0x08, 1, 0xff, 0xff, 0xff, 0xff, 1, 2, 3}; /* 4 GiB - 1 declared */
    put("fuzz_idx", "i8.idx", i8, sizeof i8);
    put("fuzz_idx", "i16.idx", i16, sizeof i16);
    put("fuzz_idx", "i32.idx", i32, sizeof i32);
    put("fuzz_idx", "f32.idx", f32, sizeof f32);
    put("fuzz_idx", "f64.idx", f64, sizeof f64);
    put("fuzz_idx", "big_claim.idx", big, sizeof big);
    gzFile g = gzopen(path_of("fuzz_idx", "u8_3x2x4.idx.gz"), "wb");
    gzwrite(g, u8, sizeof u8);
    gzclose(g);
}

static void csv_seeds(void) {
    /* the first byte: delimiter (bits 0-1: , ; tab space), header (bit 2), f64 (bit 3) */
    const struct { const char *name, *text; } c[] = {
        {"plain.csv", "\x00" "1,2,3\n4,5,6\n"},
        {"header_f64.csv", "\x0c" "a,b\n1.5,-2e3\r\n3,4\n"},
        {"semicolon.csv", "\x01" "1;2\n\n3;4\n"},
        {"tabs.csv", "\x02" "1\t2\n3\t4\n"},
        {"spaces_nan.csv", "\x03" "nan inf\n-inf 0x1p3\n"},
        {"ragged.csv", "\x00" "1,2\n3\n"},
    };
    for (size_t i = 0; i < sizeof c / sizeof *c; i++) put("fuzz_csv", c[i].name, c[i].text, 1 + strlen(c[i].text + 1));
}

static void safetensors_seeds(void) {
    copy_dir("fuzz_safetensors", "tests/io", ".safetensors", 8192);
    oar_manual_seed(4);
    oar_tensor *ts[4] = {oar_randn(OAR_F32, 2, (int64_t[]){2, 2}), oar_ones(OAR_BOOL, 1, (int64_t[]){3}),
                         oar_zeros(OAR_BF16, 0, NULL), oar_zeros(OAR_I64, 1, (int64_t[]){0})};
    if (oar_safetensors_save_meta(path_of("fuzz_safetensors", "mixed.safetensors"), 4,
                                  (const char *[]){"w", "mask", "s", "empty"}, ts, 1, (const char *[]){"k"},
                                  (const char *[]){"v"}))
        die("safetensors_save");
}

/* ---- ONNX TensorProtos, hand-encoded ------------------------------------------ */

static size_t varint(unsigned char *b, uint64_t v) {
    size_t n = 0;
    do {
        b[n++] = (unsigned char)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    return n;
}

/* dims, data_type, name and one data field (tag, bytes). */
static size_t tensor_proto(unsigned char *b, int nd, const int64_t *dims, int type, int tag, const void *data,
                           size_t n) {
    size_t k = 0;
    for (int d = 0; d < nd; d++) b[k++] = 0x08, k += varint(b + k, (uint64_t)dims[d]);
    b[k++] = 0x10, k += varint(b + k, (uint64_t)type);
    b[k++] = 0x42, b[k++] = 1, b[k++] = 't'; /* name (field 8) */
    b[k++] = (unsigned char)(tag << 3 | 2), k += varint(b + k, n);
    memcpy(b + k, data, n);
    return k + n;
}

static void onnx_tensor_seeds(void) {
    copy_dir("fuzz_onnx_tensor", "tests/onnx", ".pb", 4096);
    unsigned char b[512];
    float f[6] = {1, 2, 3, 4, 5, 6};
    double d[2] = {0.5, -1};
    unsigned char i64[3] = {1, 2, 0x7f}; /* packed varints */
    unsigned char i32[2] = {1, 0};
    put("fuzz_onnx_tensor", "raw_f32_2x3.pb", b, tensor_proto(b, 2, (int64_t[]){2, 3}, 1, 9, f, sizeof f));
    put("fuzz_onnx_tensor", "float_data.pb", b, tensor_proto(b, 1, (int64_t[]){6}, 1, 4, f, sizeof f));
    put("fuzz_onnx_tensor", "double_data.pb", b, tensor_proto(b, 1, (int64_t[]){2}, 11, 10, d, sizeof d));
    put("fuzz_onnx_tensor", "int64_data.pb", b, tensor_proto(b, 1, (int64_t[]){3}, 7, 7, i64, sizeof i64));
    put("fuzz_onnx_tensor", "bool_int32.pb", b, tensor_proto(b, 1, (int64_t[]){2}, 9, 5, i32, sizeof i32));
    put("fuzz_onnx_tensor", "c64_float.pb", b, tensor_proto(b, 1, (int64_t[]){3}, 14, 4, f, sizeof f));
    /* the reproducer: 3e9 float32 declared in 34 bytes */
    unsigned char r[34] = {0x08, 0x80, 0xbc, 0xc1, 0x96, 0x0b, 0x10, 0x01, 0x4a, 24};
    put("fuzz_onnx_tensor", "issue27_12gb.pb", r, sizeof r);
}

/* ---- optimizer state ----------------------------------------------------------- */

static void optim_seeds(void) {
    /* the parameters of fuzz/fuzz_optim.c */
    oar_tensor *p[2] = {oar_zeros(OAR_F32, 2, (int64_t[]){3, 2}), oar_zeros(OAR_F64, 1, (int64_t[]){2})};
    for (int i = 0; i < 2; i++) oar_tensor_set_requires_grad(p[i], true);
    oar_optimizer *o[3] = {oar_sgd_new(2, p, &(oar_sgd_options){.lr = 0.1, .momentum = 0.9}),
                           oar_adam_new(2, p, &(oar_adam_options){.lr = 0.01}),
                           oar_rmsprop_new(2, p, &(oar_rmsprop_options){.lr = 0.01, .momentum = 0.5, .centered = true})};
    const char *names[3] = {"sgd.safetensors", "adam.safetensors", "rmsprop.safetensors"};
    if (oar_backward(oar_add(oar_sum(p[0], 0, NULL, false), oar_sum(p[1], 0, NULL, false)), NULL)) die("backward");
    for (int k = 0; k < 3; k++) {
        if (oar_optim_step(o[k]) || oar_optim_save(o[k], path_of("fuzz_optim", names[k]))) die("optim_save");
        oar_optim_free(o[k]);
    }
}

/* ---- graphs: model.json texts and whole folders -------------------------------- */

static oar_tensor *cap_y;

static int neg_branch(void *ctx, int n_in, oar_tensor *const *in, int n_out, oar_tensor **o) {
    (void)ctx, (void)n_in, (void)n_out;
    o[0] = oar_neg(oar_add(in[0], cap_y));
    return o[0] ? 0 : -1;
}
static int exp_branch(void *ctx, int n_in, oar_tensor *const *in, int n_out, oar_tensor **o) {
    (void)ctx, (void)n_in, (void)n_out;
    o[0] = oar_exp(in[0]);
    return o[0] ? 0 : -1;
}
static int cond_model(void *ctx, oar_tensor *const *in, oar_tensor **o) {
    cap_y = in[1];
    oar_tensor *pred = oar_gt(oar_sum(in[0], 0, NULL, false), oar_scalar(0));
    return oar_cond(pred, neg_branch, exp_branch, ctx, 1, in, 1, o);
}
static int below(void *ctx, int n_in, oar_tensor *const *in, int n_out, oar_tensor **o) {
    (void)ctx, (void)n_in, (void)n_out;
    o[0] = oar_lt(oar_sum(in[0], 0, NULL, false), oar_scalar(100));
    return o[0] ? 0 : -1;
}
static int grow(void *ctx, int n_in, oar_tensor *const *in, int n_out, oar_tensor **o) {
    (void)ctx, (void)n_in, (void)n_out;
    o[0] = oar_add_scalar(oar_mul_scalar(in[0], 2), 1);
    o[1] = oar_add_scalar(in[1], 1);
    return o[0] && o[1] ? 0 : -1;
}
static int while_model(void *ctx, oar_tensor *const *in, oar_tensor **o) {
    oar_tensor *init[2] = {in[0], oar_scalar(0)};
    return oar_while_loop(below, grow, ctx, 2, init, 50, o);
}

/* Saves g into a scratch folder and writes the harnesses' seeds from it:
 * model.json (fuzz_graph_json) and [len][model.json][weights] with and
 * without the top bit (fuzz_saved_model); edits[] give forged variants. */
static void graph_seeds(oar_graph *g, const char *name, const char *const *edits, int n_edits) {
    char dir[] = "/tmp/oar_seeds_model_XXXXXX";
    if (!mkdtemp(dir) || oar_graph_save(g, dir)) die("graph_save");
    char jp[256], wp[512], fname[256];
    snprintf(jp, sizeof jp, "%s/model.json", dir);
    size_t jn, wn;
    unsigned char *json = slurp(jp, &jn);
    const char *f = strstr((char *)json, "\"file\":\t\"");
    if (!f) die("no weights record");
    f += strlen("\"file\":\t\"");
    snprintf(wp, sizeof wp, "%s/%.*s", dir, (int)(strchr(f, '"') - f), f);
    unsigned char *w = slurp(wp, &wn);
    for (int e = -1; e < n_edits; e++) {
        unsigned char *j = json;
        size_t n = jn;
        char *edited = NULL;
        if (e >= 0) { /* "from\0to": the first from replaced */
            const char *from = edits[e], *to = from + strlen(from) + 1;
            char *at = strstr((char *)json, from);
            if (!at) die(from);
            n = jn - strlen(from) + strlen(to);
            edited = malloc(n + 1);
            sprintf(edited, "%.*s%s%s", (int)(at - (char *)json), (char *)json, to, at + strlen(from));
            j = (unsigned char *)edited;
        }
        char tag[64];
        snprintf(tag, sizeof tag, e < 0 ? "%s" : "%s_forged%d", name, e);
        snprintf(fname, sizeof fname, "%s.json", tag);
        put("fuzz_graph_json", fname, j, n);
        for (int fix = 0; fix < 2; fix++) {
            unsigned char *b = malloc(4 + n + wn);
            uint32_t len = (uint32_t)n | (fix ? 0x80000000u : 0);
            for (int i = 0; i < 4; i++) b[i] = (unsigned char)(len >> (8 * i));
            memcpy(b + 4, j, n);
            memcpy(b + 4 + n, w, wn);
            snprintf(fname, sizeof fname, "%s%s.bin", tag, fix ? "_fixed" : "");
            if (e < 0 || fix) put("fuzz_saved_model", fname, b, 4 + n + wn);
            free(b);
        }
        free(edited);
    }
    free(json);
    free(w);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) die("rm");
}

static void model_seeds(void) {
    oar_manual_seed(5);
    oar_module *mlp = oar_sequential_new(3, (oar_module *[]){oar_linear_new(8, 6, true), oar_relu_new(),
                                                             oar_linear_new(6, 3, true)});
    oar_graph_input_spec s = {.name = "x", .dtype = OAR_F32, .ndim = 2, .shape = {-1, 8}, .dim_names = {"N"}};
    oar_graph *g = oar_trace_module(mlp, &s);
    if (!g) die("trace mlp");
    /* issue 27: a constant forged into an input; trace sizes 0 and 1e300 */
    const char *forged[] = {"\"kind\":\t\"const\"\0\"kind\":\t\"input\"", "\"trace_size\":\t1031\0\"trace_size\":\t0",
                            "\"trace_size\":\t1031\0\"trace_size\":\t1e300"};
    graph_seeds(g, "mlp", forged, 3);
    oar_graph_free(g);
    oar_module *cnn = oar_sequential_new(
        5, (oar_module *[]){oar_conv2d_new(1, 2, 3, 1, 1, 1, 1, true), oar_batch_norm2d_new(2, 1e-5, 0.1, true),
                            oar_relu_new(), oar_max_pool2d_new(2, 0, 0), oar_flatten_new(1, -1)});
    oar_module_train(cnn, false);
    oar_graph_input_spec cs = {.name = "x", .dtype = OAR_F32, .ndim = 4, .shape = {-1, 1, 4, 4}, .dim_names = {"B"}};
    if (!(g = oar_trace_module(cnn, &cs))) die("trace cnn");
    graph_seeds(g, "cnn", NULL, 0);
    if (oar_graph_optimize(g, OAR_PASSES_INFERENCE, 0)) die("optimize");
    graph_seeds(g, "cnn_folded", NULL, 0);
    oar_graph_free(g);
    oar_graph_input_spec two[2] = {{.name = "x", .dtype = OAR_F32, .ndim = 1, .shape = {3}},
                                   {.name = "y", .dtype = OAR_F32, .ndim = 1, .shape = {3}}};
    if (!(g = oar_trace(cond_model, NULL, 2, two, 1, NULL))) die("trace cond");
    graph_seeds(g, "cond", NULL, 0);
    oar_graph_free(g);
    if (!(g = oar_trace(while_model, NULL, 1, two, 2, NULL))) die("trace while");
    graph_seeds(g, "while", NULL, 0);
    oar_graph_free(g);
    oar_module_free(mlp);
    oar_module_free(cnn);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: make_seeds SOURCE_ROOT OUT_FOLDER\n");
        return 2;
    }
    src = argv[1];
    out = argv[2];
    mkdir(out, 0777);
    oar_pool *p = oar_pool_push();
    npy_seeds();
    idx_seeds();
    csv_seeds();
    safetensors_seeds();
    onnx_tensor_seeds();
    optim_seeds();
    model_seeds();
    copy_dir("fuzz_onnx", "tests/onnx", ".onnx", 4096);
    oar_pool_pop(p);
    printf("make_seeds: corpora written under %s\n", out);
    return 0;
}

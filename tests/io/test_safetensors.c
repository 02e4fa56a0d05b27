/* safetensors: round trip of every dtype (strided inputs included), complex
 * tensors as float parts with a trailing dim of 2 and their metadata
 * marking (reserved keys, foreign files, bad markings), a file written by
 * Python read by oar, module save/load with mismatch reports
 * that leave the module unchanged, and truncated or corrupt files giving
 * clean errors. Two more parts run as tests of their own, each skipped as
 * a whole (exit 77) when its Python is missing:
 *   test_safetensors --python  the committed reader (io/read_safetensors.py)
 *                              under Debian's /usr/bin/python3 with numpy
 *   test_safetensors --hf      safetensors.numpy (PyPI) under python3 */
#include "test.h"

#include <oar/io.h>
#include <oar/nn.h>
#include <unistd.h>

/* Debian's interpreter, where deps.sh's python3-* packages live (a python3
 * earlier on PATH, a pyenv or a venv, may lack them) */
#define DEBIAN_PYTHON "/usr/bin/python3"

static char dir[256];

static const char *tmp_path(const char *name) {
    static char buf[4][512];
    static int k;
    char *p = buf[k++ % 4];
    snprintf(p, 512, "%s/%s", dir, name);
    return p;
}

static unsigned char *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    rewind(f);
    unsigned char *b = malloc(*n ? *n : 1);
    if (fread(b, 1, *n, f) != *n) *n = 0;
    fclose(f);
    return b;
}

static void write_file(const char *path, const void *b, size_t n) {
    FILE *f = fopen(path, "wb");
    fwrite(b, 1, n, f);
    fclose(f);
}

static bool same_bytes(oar_tensor *a, oar_tensor *b) {
    if (!a || !b || oar_tensor_dtype(a) != oar_tensor_dtype(b) ||
        oar_tensor_ndim(a) != oar_tensor_ndim(b))
        return false;
    for (int i = 0; i < oar_tensor_ndim(a); i++)
        if (oar_tensor_shape(a)[i] != oar_tensor_shape(b)[i]) return false;
    size_t n = (size_t)oar_tensor_numel(a) * oar_dtype_size(oar_tensor_dtype(a));
    unsigned char *x = malloc(n + 1), *y = malloc(n + 1);
    bool ok = !oar_tensor_to_host(a, x, n) && !oar_tensor_to_host(b, y, n) && !memcmp(x, y, n);
    free(x);
    free(y);
    return ok;
}

#define NT 12
static const char *names[NT] = {"f32", "f64",  "f16", "bf16", "i32",    "i64",
                                "u8",  "bool", "c64", "c128", "scalar", "empty"};

/* One tensor of every dtype, the f32 one a transposed (strided) view. */
static void make_tensors(oar_tensor **ts) {
    int64_t s23[2] = {2, 3}, s4 = 4, s03[2] = {0, 3};
    oar_tensor *base = oar_arange(0, 6, 1, OAR_F32);
    ts[0] = oar_transpose(oar_reshape(oar_add_scalar(base, 0.25), 2, s23), 0, 1);
    ts[1] = oar_linspace(-1, 1, 5, OAR_F64);
    ts[2] =
        oar_cast(oar_tensor_from_data((double[]){0.5, -1, 65504, 1e-7}, OAR_F64, 1, &s4), OAR_F16);
    ts[3] = oar_cast(oar_tensor_from_data((double[]){1, -2.5, 3.14159, 1e30}, OAR_F64, 1, &s4),
                     OAR_BF16);
    ts[4] = oar_tensor_from_data((int32_t[]){-7, 8, INT32_MAX, INT32_MIN}, OAR_I32, 1, &s4);
    ts[5] = oar_tensor_from_data((int64_t[]){-1, (int64_t)1 << 50, 3, 0, 5, 6}, OAR_I64, 2, s23);
    ts[6] = oar_tensor_from_data((uint8_t[]){0, 1, 128, 255}, OAR_U8, 1, &s4);
    ts[7] = oar_tensor_from_data((bool[]){true, false, false, true}, OAR_BOOL, 1, &s4);
    ts[8] = oar_tensor_from_data((float[]){1, 2, -3, 4.5f}, OAR_C64, 1, (int64_t[]){2});
    ts[9] = oar_tensor_from_data((double[]){0.1, -0.2}, OAR_C128, 0, NULL);
    ts[10] = oar_scalar_of(3.5, OAR_F32);
    ts[11] = oar_zeros(OAR_F32, 2, s03);
}

static void test_round_trip(void) {
    oar_pool *pool = oar_pool_push();
    oar_tensor *ts[NT];
    make_tensors(ts);
    CHECK(ts[0] && !oar_tensor_is_contiguous(ts[0]));
    const char *path = tmp_path("all.safetensors");
    CHECK(oar_safetensors_save(path, NT, names, ts) == 0);
    oar_tensor_dict *d = oar_safetensors_load(path);
    CHECK(d && oar_tensor_dict_size(d) == NT);
    for (int i = 0; i < NT && d; i++) {
        CHECK(!strcmp(oar_tensor_dict_name(d, i), names[i]));
        CHECK(same_bytes(oar_tensor_dict_get(d, names[i]), ts[i]));
    }
    CHECK_VALUES(oar_tensor_dict_get(d, "f32"), ((double[]){0.25, 3.25, 1.25, 4.25, 2.25, 5.25}), 6,
                 0);
    CHECK(d && !strcmp(oar_tensor_dict_metadata(d, "format"), "oar"));
    CHECK(oar_tensor_dict_get(d, "nope") == NULL && oar_tensor_dict_tensor(d, NT) == NULL);
    /* the header length is a multiple of 8 and no temporary file is left */
    size_t n = 0;
    unsigned char *b = read_file(path, &n);
    CHECK(b && n > 8 && b[0] % 8 == 0);
    free(b);
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    CHECK(access(tmp, F_OK) != 0);
    oar_tensor_dict_free(d);

    /* bad arguments leave an existing file untouched */
    CHECK_STATUS_FAILS(oar_safetensors_save(path, 2, (const char *[]){"a", "a"}, ts),
                       "duplicate name");
    CHECK_STATUS_FAILS(oar_safetensors_save(path, 1, (const char *[]){"__metadata__"}, ts),
                       "invalid name");
    CHECK_STATUS_FAILS(
        oar_safetensors_save(path, 2, (const char *[]){"a", "b"}, (oar_tensor *[]){ts[0], NULL}),
        "tensor 1 is NULL");
    CHECK_STATUS_FAILS(oar_safetensors_save(tmp_path("no/such/dir/x.safetensors"), 1, names, ts),
                       "cannot create");
    d = oar_safetensors_load(path);
    CHECK(d && oar_tensor_dict_size(d) == NT);
    oar_tensor_dict_free(d);
    oar_pool_pop(pool);
}

/* tests/io/fixture_py.safetensors, written by tests/ref/gen_train.py. */
static void test_python_fixture(void) {
    oar_tensor_dict *d = oar_safetensors_load("io/fixture_py.safetensors");
    CHECK(d && oar_tensor_dict_size(d) == 12);
    if (!d) return;
    oar_tensor *w = oar_tensor_dict_get(d, "layer.weight");
    CHECK(oar_tensor_dtype(w) == OAR_F32 && oar_tensor_ndim(w) == 2 && oar_tensor_shape(w)[1] == 3);
    CHECK_VALUES(w, ((double[]){-0.5, -0.25, 0, 0.25, 0.5, 0.75}), 6, 0);
    CHECK_VALUES(oar_tensor_dict_get(d, "layer.bias"), ((double[]){1.5, -2.25}), 2, 0);
    CHECK(oar_tensor_dtype(oar_tensor_dict_get(d, "half")) == OAR_F16);
    CHECK_VALUES(oar_tensor_dict_get(d, "half"), ((double[]){0.5, -1, 65504}), 3, 0);
    CHECK(oar_tensor_dtype(oar_tensor_dict_get(d, "brain")) == OAR_BF16);
    CHECK_VALUES(oar_tensor_dict_get(d, "brain"), ((double[]){1, -2.5, 3.140625}), 3, 0);
    CHECK_VALUES(oar_tensor_dict_get(d, "steps"), ((double[]){1, -2, 3, 1099511627776.0}), 4, 0);
    CHECK_VALUES(oar_tensor_dict_get(d, "ints"), ((double[]){7, -8, 9}), 3, 0);
    CHECK_VALUES(oar_tensor_dict_get(d, "bytes"), ((double[]){0, 128, 255}), 3, 0);
    CHECK(oar_tensor_dtype(oar_tensor_dict_get(d, "mask")) == OAR_BOOL);
    CHECK_VALUES(oar_tensor_dict_get(d, "mask"), ((double[]){1, 0, 1, 1}), 4, 0);
    float z[4];
    CHECK(oar_tensor_to_host(oar_tensor_dict_get(d, "z"), z, sizeof z) == 0);
    CHECK(z[0] == 1 && z[1] == 2 && z[2] == -3.5f && z[3] == -0.25f);
    double zz[2];
    CHECK(oar_tensor_to_host(oar_tensor_dict_get(d, "zz"), zz, sizeof zz) == 0);
    CHECK(zz[0] == 0.5 && zz[1] == -1);
    CHECK(oar_tensor_ndim(oar_tensor_dict_get(d, "scalar")) == 0);
    CHECK_VALUES(oar_tensor_dict_get(d, "scalar"), ((double[]){3.25}), 1, 0);
    CHECK(oar_tensor_numel(oar_tensor_dict_get(d, "empty")) == 0);
    CHECK(!strcmp(oar_tensor_dict_metadata(d, "source"), "gen_train.py"));
    oar_tensor_dict_free(d);
}

/* The committed Python reader parses what oar wrote and sees the same
 * values. */
static void test_python_reader(void) {
    oar_pool *pool = oar_pool_push();
    oar_tensor *ts[NT];
    make_tensors(ts);
    const char *path = tmp_path("for_python.safetensors");
    CHECK(oar_safetensors_save(path, NT, names, ts) == 0);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "%s io/read_safetensors.py %s", DEBIAN_PYTHON, path);
    FILE *p = popen(cmd, "r");
    CHECK(p != NULL);
    char line[4096];
    int lines = 0;
    while (p && fgets(line, sizeof line, p)) {
        char name[64], dt[16], shape[64];
        int off = 0;
        if (sscanf(line, "%63s %15s %63s %n", name, dt, shape, &off) < 3) continue;
        int i = 0;
        while (i < NT && strcmp(names[i], name))
            i++;
        CHECK(i < NT);
        if (i == NT) continue;
        lines++;
        oar_tensor *t = ts[i];
        bool cplx = oar_dtype_is_complex(oar_tensor_dtype(t));
        if (cplx) { /* float parts with a trailing dim of 2 */
            char want_shape[64] = "[";
            for (int k = 0; k < oar_tensor_ndim(t); k++)
                snprintf(want_shape + strlen(want_shape), sizeof want_shape - strlen(want_shape),
                         "%lld,", (long long)oar_tensor_shape(t)[k]);
            strcat(want_shape, "2]");
            CHECK(!strcmp(dt, oar_tensor_dtype(t) == OAR_C64 ? "F32" : "F64"));
            CHECK(!strcmp(shape, want_shape));
            if (strcmp(shape, want_shape)) fprintf(stderr, "python reader: %s is %s %s\n", name, dt, shape);
        }
        int64_t n = oar_tensor_numel(t) * (cplx ? 2 : 1);
        double *want = malloc((size_t)(n + 1) * sizeof *want);
        if (cplx) {
            oar_tensor *c = oar_cast(t, OAR_C128);
            oar_tensor_to_host(c, want, (size_t)n * sizeof *want);
        } else {
            double *v = test_values(t);
            memcpy(want, v, (size_t)n * sizeof *want);
            free(v);
        }
        char *q = line + off;
        int bad = 0;
        for (int64_t k = 0; k < n; k++) {
            char *end;
            double got = strtod(q, &end);
            if (end == q || got != want[k]) bad++;
            q = end;
        }
        if (bad) fprintf(stderr, "python reader disagrees on %s: %s", name, line);
        CHECK(bad == 0);
        free(want);
    }
    CHECK(p && pclose(p) == 0);
    CHECK(lines == NT);
    oar_pool_pop(pool);
}

static oar_module *small_net(void) {
    return oar_sequential_new(3, (oar_module *[]){oar_linear_new(4, 3, true),
                                                  oar_batch_norm1d_new(3, 1e-5, 0.1, true),
                                                  oar_linear_new(3, 2, false)});
}

static void test_module_save_load(void) {
    oar_pool *pool = oar_pool_push();
    oar_manual_seed(11);
    oar_module *a = small_net(), *b = small_net();
    const char *path = tmp_path("net.safetensors");
    CHECK(oar_module_save(a, path) == 0);
    CHECK(!same_bytes(oar_module_get(a, "0.weight"), oar_module_get(b, "0.weight")));
    oar_tensor *bw = oar_module_get(b, "0.weight");
    CHECK(oar_module_load(b, path) == 0);
    CHECK(oar_module_get(b, "0.weight") == bw); /* loaded in place */
    const oar_state_entry *sa, *sb;
    int n = oar_module_state(a, &sa);
    CHECK(n == 8 && oar_module_state(b, &sb) == n);
    for (int i = 0; i < n; i++)
        CHECK(same_bytes(sa[i].tensor, sb[i].tensor));

    /* a different structure: every mismatch listed, nothing changed */
    oar_module *c = oar_sequential_new(
        4, (oar_module *[]){oar_linear_new(4, 5, true), oar_relu_new(), oar_linear_new(3, 2, false),
                            oar_linear_new(2, 2, false)});
    oar_tensor *before = oar_clone(oar_module_get(c, "0.weight"));
    oar_clear_error();
    CHECK(oar_module_load(c, path) != 0);
    const char *msg = oar_last_error();
    CHECK(strstr(msg, "\"0.weight\" is float32 [3, 4] in the file, float32 [5, 4] in the module"));
    CHECK(strstr(msg, "missing \"3.weight\""));
    CHECK(strstr(msg, "\"0.bias\" is float32 [3] in the file, float32 [5] in the module"));
    CHECK(strstr(msg, "unexpected \"1.running_mean\""));
    CHECK(strstr(msg, "unexpected \"2.weight\"") == NULL);
    CHECK(strstr(msg, "unexpected \"1.num_batches_tracked\""));
    CHECK(same_bytes(before, oar_module_get(c, "0.weight")));
    /* a dtype mismatch */
    oar_tensor *w64 = oar_cast(oar_module_get(a, "0.weight"), OAR_F64);
    const char *nm[] = {"weight"};
    CHECK(oar_safetensors_save(tmp_path("w64.safetensors"), 1, nm, &w64) == 0);
    oar_module *lin = oar_linear_new(4, 3, false);
    CHECK_STATUS_FAILS(oar_module_load(lin, tmp_path("w64.safetensors")),
                       "\"weight\" is float64 [3, 4] in the file, float32 [3, 4] in the module");
    CHECK_STATUS_FAILS(oar_module_load(lin, tmp_path("missing.safetensors")), "cannot open");
    oar_module_free(a);
    oar_module_free(b);
    oar_module_free(c);
    oar_module_free(lin);
    oar_pool_pop(pool);
}

/* Every truncation of a valid file, and a set of corruptions, fail with a
 * message naming the file; none crashes (ASan checks reads). */
static void test_corrupt_files(void) {
    oar_pool *pool = oar_pool_push();
    oar_tensor *ts[NT];
    make_tensors(ts);
    const char *good = tmp_path("good.safetensors"), *bad = tmp_path("bad.safetensors");
    CHECK(oar_safetensors_save(good, NT, names, ts) == 0);
    size_t n = 0;
    unsigned char *b = read_file(good, &n);
    CHECK(b && n > 100);
    int failures = 0;
    for (size_t len = 0; len < n; len++) {
        write_file(bad, b, len);
        oar_clear_error();
        oar_tensor_dict *d = oar_safetensors_load(bad);
        bool ok =
            !d && strstr(oar_last_error(), "safetensors_load") && strstr(oar_last_error(), bad);
        if (!ok && failures++ < 3)
            fprintf(stderr, "truncation at %zu: %s\n", len, d ? "loaded" : oar_last_error());
        oar_tensor_dict_free(d);
    }
    CHECK(failures == 0);
    write_file(bad, b, 5);
    CHECK_FAILS(oar_safetensors_load(bad), "shorter than the 8-byte header length");
    write_file(bad, b, n - 1);
    CHECK_FAILS(oar_safetensors_load(bad), "file truncated?");

    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | b[i];
    unsigned char *c = malloc(n);
    /* a header length past the end */
    memcpy(c, b, n);
    c[5] = 0x7f;
    write_file(bad, c, n);
    CHECK_FAILS(oar_safetensors_load(bad), "does not fit");
    /* garbage in the JSON */
    memcpy(c, b, n);
    c[8] = 'x';
    write_file(bad, c, n);
    CHECK_FAILS(oar_safetensors_load(bad), "not a JSON object");
    /* an unknown dtype, a wrong byte span, an invalid bool */
    struct {
        const char *from, *to, *msg;
    } edits[] = {
        {"\"F64\"", "\"F65\"", "unsupported dtype \"F65\""},
        {"\"shape\":[5]", "\"shape\":[6]", "spans 40 bytes but its shape and dtype need 48"},
        {"\"shape\":[5]", "\"shape\":[5.5]", "invalid shape"},
        {"\"shape\":[5]", "\"shape\":[5,1,1,1,1,1,1,1,1]", "more than 8 dims"},
        {"\"f64\":{", "\"f32\":{", "duplicate tensor name"},
        {"\"complex128\"}", "\"complex128\"},\"__metadata__\":{}", "repeated __metadata__"},
        {"\"shape\":[5]", "\"shape\":[-5]", "invalid shape"},
        {"\"dtype\":\"F64\"", "\"dtypf\":\"F64\"", "lacks dtype, shape or data_offsets"},
    };
    for (size_t e = 0; e < sizeof edits / sizeof *edits; e++) {
        /* rebuild the file with the edited header and the same data */
        char *h = malloc(hlen + 64);
        memcpy(h, b + 8, hlen);
        h[hlen] = 0;
        char *at = strstr(h, edits[e].from);
        CHECK(at != NULL);
        if (!at) {
            free(h);
            continue;
        }
        size_t lf = strlen(edits[e].from), lt = strlen(edits[e].to);
        memmove(at + lt, at + lf, strlen(at + lf) + 1);
        memcpy(at, edits[e].to, lt);
        uint64_t nh = strlen(h);
        unsigned char *f = malloc(8 + nh + (n - 8 - hlen));
        for (int i = 0; i < 8; i++)
            f[i] = (unsigned char)(nh >> (8 * i));
        memcpy(f + 8, h, nh);
        memcpy(f + 8 + nh, b + 8 + hlen, n - 8 - hlen);
        write_file(bad, f, 8 + nh + (n - 8 - hlen));
        CHECK_FAILS(oar_safetensors_load(bad), edits[e].msg);
        free(f);
        free(h);
    }
    /* corrupt one bool byte: find the bool tensor's offset via the dict */
    oar_tensor_dict *d = oar_safetensors_load(good);
    CHECK(d != NULL);
    oar_tensor_dict_free(d);
    const char *hb = strstr((const char *)b + 8, "\"bool\"");
    long bo = -1;
    if (hb) {
        const char *off = strstr(hb, "data_offsets\":[");
        if (off) bo = strtol(off + 15, NULL, 10);
    }
    CHECK(bo >= 0);
    if (bo >= 0) {
        memcpy(c, b, n);
        c[8 + hlen + (size_t)bo] = 7;
        write_file(bad, c, n);
        CHECK_FAILS(oar_safetensors_load(bad), "neither 0 nor 1");
    }
    free(c);
    free(b);
    CHECK_FAILS(oar_safetensors_load(NULL), "path is NULL");
    oar_pool_pop(pool);
}

/* Loading from memory gives what loading the file gives; every truncation
 * of the buffer fails naming the buffer; metadata written by
 * safetensors_save_meta reads back. */
static void test_memory_and_metadata(void) {
    size_t n = 0;
    unsigned char *b = read_file("io/fixture_py.safetensors", &n);
    CHECK(b && n > 100);
    if (!b) return;
    oar_tensor_dict *m = oar_safetensors_load_memory(b, n, "fixture");
    oar_tensor_dict *f = oar_safetensors_load("io/fixture_py.safetensors");
    CHECK(m && f && oar_tensor_dict_size(m) == oar_tensor_dict_size(f));
    for (int i = 0; m && f && i < oar_tensor_dict_size(f); i++) {
        CHECK(!strcmp(oar_tensor_dict_name(m, i), oar_tensor_dict_name(f, i)));
        CHECK(same_bytes(oar_tensor_dict_tensor(m, i), oar_tensor_dict_tensor(f, i)));
    }
    oar_tensor_dict_free(m);
    oar_tensor_dict_free(f);
    int failures = 0;
    for (size_t len = 1; len < n; len += 7) {
        oar_clear_error();
        oar_tensor_dict *d = oar_safetensors_load_memory(b, len, "cut");
        failures += d != NULL || !strstr(oar_last_error(), "safetensors_load: cut: ");
        oar_tensor_dict_free(d);
    }
    CHECK(failures == 0);
    CHECK_FAILS(oar_safetensors_load_memory(NULL, 10, NULL), "(memory): buffer is NULL");
    CHECK_FAILS(oar_safetensors_load_memory(b, 0, "x"), "x: buffer is empty");
    free(b);

    oar_pool *pool = oar_pool_push();
    oar_tensor *t = oar_ones(OAR_F32, 1, (int64_t[]){3});
    const char *nm[1] = {"t"};
    const char *keys[2] = {"epoch", "note"}, *vals[2] = {"7", "a \"quoted\" value"};
    const char *path = tmp_path("meta.safetensors");
    CHECK(oar_safetensors_save_meta(path, 1, nm, &t, 2, keys, vals) == 0);
    oar_tensor_dict *d = oar_safetensors_load(path);
    CHECK(d && !strcmp(oar_tensor_dict_metadata(d, "epoch"), "7"));
    CHECK(d && !strcmp(oar_tensor_dict_metadata(d, "note"), "a \"quoted\" value"));
    CHECK(d && !strcmp(oar_tensor_dict_metadata(d, "format"), "oar"));
    CHECK(oar_tensor_dict_metadata(d, "absent") == NULL);
    oar_tensor_dict_free(d);
    CHECK_STATUS_FAILS(oar_safetensors_save_meta(path, 1, nm, &t, 2, (const char *[]){"a", "a"}, vals),
                       "duplicate metadata key \"a\"");
    CHECK_STATUS_FAILS(oar_safetensors_save_meta(path, 1, nm, &t, 1, (const char *[]){""}, vals),
                       "metadata entry 0");
    CHECK_STATUS_FAILS(oar_safetensors_save_meta(path, 1, nm, &t, 1, NULL, vals), "bad metadata");
    oar_pool_pop(pool);
}

/* ---- complex tensors: float parts with a trailing dim of 2 ------------------ */

/* A safetensors file from a header (padded here) and a data section. */
static void write_st(const char *path, const char *header, const void *data, size_t n) {
    size_t hl = strlen(header), pl = (hl + 7) & ~(size_t)7;
    unsigned char *b = malloc(8 + pl + n + 1);
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)((uint64_t)pl >> (8 * i));
    memcpy(b + 8, header, hl);
    memset(b + 8 + hl, ' ', pl - hl);
    if (n) memcpy(b + 8 + pl, data, n);
    write_file(path, b, 8 + pl + n);
    free(b);
}

/* The JSON header of a file (malloc'd), or NULL. */
static char *header_of(const char *path) {
    size_t n = 0;
    unsigned char *b = read_file(path, &n);
    if (!b || n < 8) return free(b), NULL;
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--)
        hl = hl << 8 | b[i];
    char *h = NULL;
    if (hl <= n - 8) {
        h = malloc(hl + 1);
        memcpy(h, b + 8, hl);
        h[hl] = 0;
    }
    free(b);
    return h;
}

static void test_complex_round_trip(void) {
    oar_pool *pool = oar_pool_push();
    /* c64 [2, 3] as a transposed (strided) view of [3, 2]; c128 [2]; a c128
     * scalar; an empty c64; a c128 of rank 8 (9 dims in the file); a c64
     * slice with a step (strided, offset) */
    float zf[12];
    for (int i = 0; i < 12; i++)
        zf[i] = (float)(i % 2 ? -0.5 * i : 1.25 * i);
    oar_tensor *a = oar_transpose(oar_tensor_from_data(zf, OAR_C64, 2, (int64_t[]){3, 2}), 0, 1);
    oar_tensor *b = oar_tensor_from_data((double[]){0.1, -0.2, 3e300, -4e-300}, OAR_C128, 1, (int64_t[]){2});
    oar_tensor *c = oar_tensor_from_data((double[]){1.5, -2.5}, OAR_C128, 0, NULL);
    oar_tensor *e = oar_zeros(OAR_C64, 2, (int64_t[]){0, 3});
    int64_t s8[8] = {1, 2, 1, 1, 2, 1, 1, 2};
    oar_tensor *r8 = oar_cast(oar_arange(0, 8, 1, OAR_F64), OAR_C128);
    r8 = oar_reshape(oar_mul(r8, oar_tensor_from_data((double[]){0.5, 2}, OAR_C128, 0, NULL)), 8, s8);
    oar_tensor *sl = oar_slice(oar_tensor_from_data(zf, OAR_C64, 1, (int64_t[]){6}), 0, 1, 6, 2);
    CHECK(a && b && c && e && r8 && sl);
    CHECK(!oar_tensor_is_contiguous(a) && !oar_tensor_is_contiguous(sl));
    const char *nm[6] = {"za", "zb", "zc", "ze", "z8", "zs"};
    oar_tensor *ts[6] = {a, b, c, e, r8, sl};
    const char *path = tmp_path("complex.safetensors");
    CHECK(oar_safetensors_save_meta(path, 6, nm, ts, 1, (const char *[]){"oar.note"},
                                    (const char *[]){"user keys under oar. are fine"}) == 0);
    oar_tensor_dict *d = oar_safetensors_load(path);
    CHECK(d && oar_tensor_dict_size(d) == 6);
    for (int i = 0; d && i < 6; i++) {
        test_current = nm[i];
        CHECK(same_bytes(oar_tensor_dict_get(d, nm[i]), ts[i]));
    }
    test_current = "test_complex_round_trip";
    CHECK(d && !strcmp(oar_tensor_dict_metadata(d, "oar.dtype.za"), "complex64"));
    CHECK(d && !strcmp(oar_tensor_dict_metadata(d, "oar.dtype.zb"), "complex128"));
    CHECK(d && !strcmp(oar_tensor_dict_metadata(d, "oar.note"), "user keys under oar. are fine"));
    oar_tensor_dict_free(d);
    /* the header: float dtypes safetensors knows, a trailing dim of 2 */
    char *h = header_of(path);
    CHECK(h && !strstr(h, "C64") && !strstr(h, "C128"));
    CHECK(h && strstr(h, "\"za\":{\"dtype\":\"F32\",\"shape\":[2,3,2]"));
    CHECK(h && strstr(h, "\"zb\":{\"dtype\":\"F64\",\"shape\":[2,2]"));
    CHECK(h && strstr(h, "\"zc\":{\"dtype\":\"F64\",\"shape\":[2]"));
    CHECK(h && strstr(h, "\"ze\":{\"dtype\":\"F32\",\"shape\":[0,3,2]"));
    CHECK(h && strstr(h, "\"z8\":{\"dtype\":\"F64\",\"shape\":[1,2,1,1,2,1,1,2,2]"));
    CHECK(h && strstr(h, "\"oar.dtype.za\":\"complex64\"") && strstr(h, "\"oar.dtype.zc\":\"complex128\""));
    CHECK(h && !strstr(h, "\"oar.dtype.f")); /* only complex tensors are marked */
    free(h);
    /* the values: the float view of za is its complex values, in order */
    float got[12];
    oar_tensor_dict *d2 = oar_safetensors_load(path);
    CHECK(d2 && oar_tensor_to_host(oar_tensor_dict_get(d2, "za"), got, sizeof got) == 0);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 2; j++) { /* za[j][i] = zf complex (i, j) */
            CHECK(got[2 * (j * 3 + i)] == zf[2 * (i * 2 + j)]);
            CHECK(got[2 * (j * 3 + i) + 1] == zf[2 * (i * 2 + j) + 1]);
        }
    oar_tensor_dict_free(d2);
    oar_pool_pop(pool);
}

/* User metadata cannot take the reserved prefix. */
static void test_complex_reserved_key(void) {
    oar_pool *pool = oar_pool_push();
    oar_tensor *t = oar_ones(OAR_F32, 1, (int64_t[]){3});
    const char *path = tmp_path("reserved.safetensors");
    CHECK_STATUS_FAILS(oar_safetensors_save_meta(path, 1, (const char *[]){"t"}, &t, 1,
                                                 (const char *[]){"oar.dtype.t"},
                                                 (const char *[]){"complex64"}),
                       "metadata key \"oar.dtype.t\" starts with \"oar.dtype.\", which is reserved");
    CHECK(access(path, F_OK) != 0);
    oar_pool_pop(pool);
}

/* Files written by other tools: a marking anywhere in the header reads as
 * complex; a marking whose tensor lacks the trailing 2, has the wrong float
 * dtype or an unknown complex name fails cleanly, naming the tensor. */
static void test_complex_foreign_files(void) {
    const char *path = tmp_path("foreign.safetensors");
    float f[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    /* the metadata after the tensors, a stale marking of an absent tensor */
    write_st(path,
             "{\"z\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
             "\"r\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[16,32]},"
             "\"__metadata__\":{\"oar.dtype.z\":\"complex64\",\"oar.dtype.gone\":\"complex128\"}}",
             f, sizeof f);
    oar_tensor_dict *d = oar_safetensors_load(path);
    CHECK(d != NULL);
    oar_tensor *z = oar_tensor_dict_get(d, "z"), *r = oar_tensor_dict_get(d, "r");
    CHECK(z && oar_tensor_dtype(z) == OAR_C64 && oar_tensor_ndim(z) == 1 && oar_tensor_shape(z)[0] == 2);
    CHECK(r && oar_tensor_dtype(r) == OAR_F32 && oar_tensor_ndim(r) == 1);
    float zv[4] = {0};
    CHECK(z && oar_tensor_to_host(z, zv, sizeof zv) == 0 && zv[0] == 1 && zv[1] == 2 && zv[3] == 4);
    oar_tensor_dict_free(d);
    struct {
        const char *header, *msg;
    } bad[] = {
        {"{\"__metadata__\":{\"oar.dtype.z\":\"complex64\"},"
         "\"z\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}",
         "marks tensor \"z\" complex64, stored as F32 with a trailing dim of 2 (real, imaginary), "
         "but the file holds it as F32 [4]"},
        {"{\"__metadata__\":{\"oar.dtype.z\":\"complex64\"},"
         "\"z\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}",
         "but the file holds it as F32 []"},
        {"{\"__metadata__\":{\"oar.dtype.z\":\"complex128\"},"
         "\"z\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}",
         "marks tensor \"z\" complex128, stored as F64"},
        {"{\"__metadata__\":{\"oar.dtype.z\":\"complex32\"},"
         "\"z\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}",
         "gives tensor \"z\" the dtype \"complex32\""},
        {"{\"__metadata__\":{\"oar.dtype.z\":\"complex64\"},"
         "\"z\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,12]}}",
         "spans 12 bytes but its shape and dtype need 16"},
        {"{\"__metadata__\":{\"oar.dtype.z\":\"complex64\",\"oar.dtype.z\":\"complex64\"},"
         "\"z\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}",
         "the metadata marks tensor \"z\" twice"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        write_st(path, bad[i].header, f, 16);
        oar_clear_error();
        d = oar_safetensors_load(path);
        CHECK(d == NULL);
        CHECK(strstr(oar_last_error(), "safetensors_load: ") && strstr(oar_last_error(), path));
        if (!strstr(oar_last_error(), bad[i].msg))
            fprintf(stderr, "case %zu: got \"%s\"\n", i, oar_last_error());
        CHECK(strstr(oar_last_error(), bad[i].msg) != NULL);
        oar_tensor_dict_free(d);
    }
    /* an older oar file (C64 / C128 names) still loads: the committed
     * fixture's z and zz (test_python_fixture) */
}

/* ---- interop with the safetensors package (tests/ref/gen_safetensors.py) ---- */
#include "ref/safetensors_hf_ref.h"

static oar_dtype hf_dtype(const char *name) {
    static const struct {
        const char *name;
        oar_dtype dt;
    } map[] = {{"F32", OAR_F32}, {"F64", OAR_F64}, {"F16", OAR_F16}, {"I64", OAR_I64},
               {"I32", OAR_I32}, {"U8", OAR_U8},   {"BOOL", OAR_BOOL}};
    for (size_t i = 0; i < sizeof map / sizeof *map; i++)
        if (!strcmp(map[i].name, name)) return map[i].dt;
    return OAR_F64;
}

#define N_HF ((int)(sizeof hf_refs / sizeof *hf_refs))

/* A file written by safetensors.numpy.save_file loads with every dtype,
 * shape, value and the metadata. */
static void test_hf_fixture(void) {
    oar_tensor_dict *d = oar_safetensors_load("io/fixture_hf.safetensors");
    CHECK(d && oar_tensor_dict_size(d) == N_HF);
    if (!d) return;
    for (int i = 0; i < N_HF; i++) {
        const hf_ref *r = &hf_refs[i];
        oar_tensor *t = oar_tensor_dict_get(d, r->name);
        test_current = r->name;
        CHECK(t && oar_tensor_dtype(t) == hf_dtype(r->dtype) && oar_tensor_ndim(t) == r->ndim);
        for (int k = 0; t && k < r->ndim; k++)
            CHECK(oar_tensor_shape(t)[k] == r->shape[k]);
        CHECK_VALUES(t, r->values, r->n, 0);
    }
    test_current = "test_hf_fixture";
    CHECK(!strcmp(oar_tensor_dict_metadata(d, "writer"), "safetensors.numpy"));
    CHECK(!strcmp(oar_tensor_dict_metadata(d, "epoch"), "3"));
    oar_tensor_dict_free(d);
}

/* The same tensors written by oar load with safetensors.numpy.load_file
 * and match. */
static void test_hf_reader(void) {
    oar_pool *pool = oar_pool_push();
    const char *names[N_HF];
    oar_tensor *ts[N_HF];
    for (int i = 0; i < N_HF; i++) {
        const hf_ref *r = &hf_refs[i];
        int64_t shape[4] = {r->shape[0], r->shape[1], r->shape[2], r->shape[3]};
        names[i] = r->name;
        ts[i] = oar_cast(oar_tensor_from_data(r->values, OAR_F64, r->ndim, shape), hf_dtype(r->dtype));
    }
    const char *path = tmp_path("oar_for_hf.safetensors");
    CHECK(oar_safetensors_save(path, N_HF, names, ts) == 0);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "python3 ref/gen_safetensors.py --check %s", path);
    CHECK(system(cmd) == 0);
    oar_pool_pop(pool);
}

int main(int argc, char **argv) {
    const char *part = argc > 1 ? argv[1] : "";
    if (!strcmp(part, "--python") &&
        system(DEBIAN_PYTHON " -c 'import numpy' >/dev/null 2>&1") != 0) {
        printf("skip: " DEBIAN_PYTHON " cannot import numpy (Debian: python3-numpy)\n");
        return 77;
    }
    if (!strcmp(part, "--hf") && system("python3 -c 'import safetensors.numpy' >/dev/null 2>&1") != 0) {
        printf("skip: python3 cannot import safetensors.numpy (pip install safetensors numpy)\n");
        return 77;
    }
    snprintf(dir, sizeof dir, "/tmp/oar_io_test_XXXXXX");
    if (!mkdtemp(dir)) return 1;
    if (!strcmp(part, "--python")) {
        RUN(test_python_reader);
    } else if (!strcmp(part, "--hf")) {
        RUN(test_hf_reader);
    } else {
        RUN(test_round_trip);
        RUN(test_python_fixture);
        RUN(test_module_save_load);
        RUN(test_corrupt_files);
        RUN(test_memory_and_metadata);
        RUN(test_hf_fixture);
        RUN(test_complex_round_trip);
        RUN(test_complex_reserved_key);
        RUN(test_complex_foreign_files);
    }
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return test_summary();
}

/* Hostile files (issue 27): every loader checks each size a header declares
 * against the bytes present, and against the load limit, before it
 * allocates; a header cut in the middle of a value is never read past its
 * buffer. The reproducers are the issue's: a 150-byte .npy declaring
 * 2,000,000,000 float64 (16 GB), a 34-byte ONNX TensorProto declaring
 * 3,000,000,000 float32 (12 GB), a .npy header ending in "'descr': '".
 * The allocation hook records the largest request: none may come near
 * what the headers declare. */
#include "test.h"

#include <oar/autograd.h>
#include <oar/data.h>
#include <oar/infer.h>
#include <oar/io.h>
#include <oar/onnx.h>
#include <oar/optim.h>
#include <unistd.h>
#include <zlib.h>

static size_t largest; /* the largest allocation asked of the hook */

static void *tracking_alloc(void *ctx, void *ptr, size_t old_size, size_t new_size) {
    (void)ctx;
    (void)old_size;
    if (new_size == 0) {
        free(ptr);
        return NULL;
    }
    if (new_size > largest) largest = new_size;
    return new_size > ((size_t)1 << 30) ? NULL : realloc(ptr, new_size);
}

static char dir[] = "/tmp/oar_hostile_XXXXXX";

static const char *tmp_path(const char *name) {
    static char buf[4][512];
    static int k;
    char *p = buf[k++ % 4];
    snprintf(p, 512, "%s/%s", dir, name);
    return p;
}

static void spit(const char *path, const void *b, size_t n) {
    FILE *f = fopen(path, "wb");
    fwrite(b, 1, n, f);
    fclose(f);
}

/* A version 1.0 .npy: magic, header padded to a 128-byte preamble (or not
 * padded when pad is false), then n data bytes of 0. */
static size_t make_npy(unsigned char *buf, const char *header, bool pad, size_t n) {
    size_t h = strlen(header), total = pad ? 128 : 10 + h;
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    buf[8] = (unsigned char)((total - 10) & 0xff);
    buf[9] = (unsigned char)((total - 10) >> 8);
    memcpy(buf + 10, header, h);
    for (size_t i = 10 + h; i < total; i++) buf[i] = i + 1 == total ? '\n' : ' ';
    memset(buf + total, 0, n);
    return total + n;
}

static void test_npy(void) {
    unsigned char buf[512];
    /* 150 bytes declaring 2e9 float64 */
    size_t n = make_npy(buf, "{'descr': '<f8', 'fortran_order': False, 'shape': (2000000000,), }", true, 22);
    CHECK(n == 150);
    spit(tmp_path("big.npy"), buf, n);
    largest = 0;
    CHECK_FAILS(oar_npy_load(tmp_path("big.npy")), "the shape declares 16000000000 bytes, but the file holds 22 more");
    CHECK(largest < (1 << 20));
    /* a product that overflows, and one past the load limit */
    n = make_npy(buf, "{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296, 16), }", true, 8);
    spit(tmp_path("huge.npy"), buf, n);
    CHECK_FAILS(oar_npy_load(tmp_path("huge.npy")), "the shape [4294967296, 4294967296, 16] overflows");
    n = make_npy(buf, "{'descr': '<f8', 'fortran_order': False, 'shape': (0, 4294967296, 4294967296, 16), }", true, 8);
    spit(tmp_path("empty_huge.npy"), buf, n); /* no elements, but strides past int64 */
    CHECK_FAILS(oar_npy_load(tmp_path("empty_huge.npy")), "overflows");
    n = make_npy(buf, "{'descr': '<f8', 'fortran_order': False, 'shape': (100000000,), }", true, 8);
    spit(tmp_path("limit_big.npy"), buf, n);
    CHECK_FAILS(oar_npy_load(tmp_path("limit_big.npy")), "declares 800000000 bytes, but the file holds 8 more");
    uint64_t old = oar_set_load_limit(64);
    n = make_npy(buf, "{'descr': '<f4', 'fortran_order': False, 'shape': (20,), }", true, 80);
    spit(tmp_path("limit.npy"), buf, n);
    CHECK_FAILS(oar_npy_load(tmp_path("limit.npy")), "declares 80 bytes, over the load limit of 64");
    oar_set_load_limit(old);
    oar_tensor *t = oar_npy_load(tmp_path("limit.npy"));
    CHECK(t && oar_tensor_numel(t) == 20);
    oar_tensor_release(t);
    /* the header ends inside descr's value: the reader stopped one byte past
     * its buffer (ASan saw it); every cut of a valid header fails cleanly */
    const char *full = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
    for (size_t cut = 1; cut < (size_t)(strstr(full, "(2,)") - full) + 3; cut++) {
        char h[128];
        snprintf(h, sizeof h, "%.*s", (int)cut, full);
        n = make_npy(buf, h, false, 8);
        spit(tmp_path("cut.npy"), buf, n);
        oar_tensor *c = oar_npy_load(tmp_path("cut.npy"));
        CHECK(c == NULL && strstr(oar_last_error(), "npy"));
        oar_tensor_release(c);
    }
    n = make_npy(buf, "{'fortran_order': False, 'shape': (2,), 'descr': '", false, 8);
    spit(tmp_path("descr.npy"), buf, n);
    CHECK_FAILS(oar_npy_load(tmp_path("descr.npy")), "header lacks descr, fortran_order or shape");
}

#ifdef OAR_TEST_NO_ONNX /* built without ONNX: the loaders exist and refuse */
static void test_onnx_tensor(void) {
    unsigned char pb[4] = {0};
    CHECK_FAILS(oar_onnx_tensor_load_buffer(pb, sizeof pb), "built without ONNX");
}
#else
static void test_onnx_tensor(void) {
    /* dims [3000000000], FLOAT, 24 bytes of raw_data: 34 bytes */
    unsigned char pb[64] = {0x08, 0x80, 0xbc, 0xc1, 0x96, 0x0b, 0x10, 0x01, 0x4a, 24};
    size_t n = 10 + 24;
    CHECK(n == 34);
    largest = 0;
    CHECK_FAILS(oar_onnx_tensor_load_buffer(pb, n), "the data does not hold 3000000000 float elements");
    CHECK(largest < (1 << 20));
    spit(tmp_path("big.pb"), pb, n);
    CHECK_FAILS(oar_onnx_tensor_load(tmp_path("big.pb")), "big.pb");
    /* dims [0, 2^62, 210]: no elements, strides past int64 (UBSan saw the overflow) */
    unsigned char zero[] = {0x08, 0x00, 0x08, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x40, 0x08, 0xd2, 0x01,
                            0x10, 0x01};
    CHECK_FAILS(oar_onnx_tensor_load_buffer(zero, sizeof zero), "[0, 4611686018427387904, 210] overflows");
    /* typed data: 2 floats declared, 1 present */
    unsigned char typed[] = {0x08, 0x02, 0x10, 0x01, 0x22, 0x04, 0, 0, 0x80, 0x3f};
    CHECK_FAILS(oar_onnx_tensor_load_buffer(typed, sizeof typed), "does not hold 2 float elements");
    typed[1] = 1;
    oar_tensor *t = oar_onnx_tensor_load_buffer(typed, sizeof typed);
    CHECK_VALUES(t, ((double[]){1}), 1, 0);
    /* the load limit */
    uint64_t old = oar_set_load_limit(2);
    CHECK_FAILS(oar_onnx_tensor_load_buffer(typed, sizeof typed), "declares 4 bytes, over the load limit of 2");
    oar_set_load_limit(old);
}
#endif

static void test_safetensors(void) {
    /* a header declaring 2^40 float32 in a tiny file */
    const char *h = "{\"a\":{\"dtype\":\"F32\",\"shape\":[1099511627776],\"data_offsets\":[0,4398046511104]}}";
    unsigned char buf[256] = {0};
    size_t hl = strlen(h);
    buf[0] = (unsigned char)hl;
    memcpy(buf + 8, h, hl);
    largest = 0;
    CHECK_FAILS(oar_safetensors_load_memory(buf, 8 + hl + 16, "big"), "over the load limit");
    CHECK(largest < (1 << 20));
    /* no elements, but dims whose product (the strides) passes int64 */
    const char *z = "{\"a\":{\"dtype\":\"F32\",\"shape\":[0,4503599627370496,4503599627370496],\"data_offsets\":[0,0]}}";
    size_t zl = strlen(z);
    memset(buf, 0, sizeof buf);
    buf[0] = (unsigned char)zl;
    memcpy(buf + 8, z, zl);
    CHECK_FAILS(oar_safetensors_load_memory(buf, 8 + zl, "empty"), "tensor \"a\" [0, 4503599627370496, 4503599627370496] overflows");
    memset(buf, 0, sizeof buf);
    buf[0] = (unsigned char)hl;
    memcpy(buf + 8, h, hl);
    uint64_t old = oar_set_load_limit(1ull << 50);
    CHECK_FAILS(oar_safetensors_load_memory(buf, 8 + hl + 16, "big"), "file truncated");
    CHECK(largest < (1 << 20));
    oar_set_load_limit(8);
    oar_pool *p = oar_pool_push();
    oar_tensor *ts[1] = {oar_zeros(OAR_F32, 1, (int64_t[]){4})};
    CHECK(oar_safetensors_save(tmp_path("s.safetensors"), 1, (const char *[]){"w"}, ts) == 0);
    CHECK_FAILS(oar_safetensors_load(tmp_path("s.safetensors")), "tensor \"w\" declares 16 bytes, over the load limit of 8");
    /* optimizer state and module checkpoints read through the same loader */
    oar_tensor *w = oar_ones(OAR_F32, 1, (int64_t[]){4});
    oar_tensor_set_requires_grad(w, true);
    oar_optimizer *o = oar_adam_new(1, &w, NULL);
    CHECK(oar_backward(oar_sum(oar_mul(w, w), 0, NULL, false), NULL) == 0 && oar_optim_step(o) == 0);
    oar_set_load_limit(0);
    CHECK(oar_load_limit() == OAR_DEFAULT_LOAD_LIMIT);
    CHECK(oar_optim_save(o, tmp_path("o.safetensors")) == 0);
    CHECK(oar_optim_load(o, tmp_path("o.safetensors")) == 0);
    oar_set_load_limit(8);
    CHECK_STATUS_FAILS(oar_optim_load(o, tmp_path("o.safetensors")), "over the load limit");
    oar_set_load_limit(old);
    /* found by fuzz_optim: an Adam state with one moment of a parameter (the
     * next step overwrote the lone one and leaked it) */
    const char *keys[4] = {"oar.optimizer", "oar.steps", "oar.lr", "oar.num_params"};
    const char *vals[4] = {"adam", "1", "0.01", "1"};
    CHECK(oar_safetensors_save_meta(tmp_path("half.safetensors"), 1, (const char *[]){"state.0.exp_avg_sq"}, &w, 4, keys,
                                    vals) == 0);
    CHECK_STATUS_FAILS(oar_optim_load(o, tmp_path("half.safetensors")), "parameter 0 has exp_avg_sq but not exp_avg");
    CHECK(oar_optim_steps(o) == 1 && oar_optim_step(o) == 0);
    oar_optim_free(o);
    oar_pool_pop(p);
}

static void test_idx_csv(void) {
    /* an IDX u8 file of 4 GiB - 1 declared and 8 bytes present, plain and gzip'd */
    unsigned char idx[20] = {0, 0, 0x08, 1, 0xff, 0xff, 0xff, 0xff};
    spit(tmp_path("big.idx"), idx, sizeof idx);
    largest = 0;
    CHECK_FAILS(oar_idx_load(tmp_path("big.idx")), "file truncated");
    CHECK(largest < (4 << 20));
    gzFile gz = gzopen(tmp_path("big.idx.gz"), "wb");
    gzwrite(gz, idx, sizeof idx);
    gzclose(gz);
    CHECK_FAILS(oar_idx_load(tmp_path("big.idx.gz")), "file truncated");
    CHECK(largest < (4 << 20));
    unsigned char zero[40] = {0, 0, 0x0E, 8, 0, 0, 0, 0}; /* dims 0 then 7 x (2^32 - 1): no data, strides past int64 */
    memset(zero + 8, 0xff, 28);
    spit(tmp_path("zero.idx"), zero, 36);
    CHECK_FAILS(oar_idx_load(tmp_path("zero.idx")), "overflows");
    uint64_t old = oar_set_load_limit(100);
    CHECK_FAILS(oar_idx_load(tmp_path("big.idx")), "the dims declares 4294967295 bytes, over the load limit of 100");
    /* CSV: no header declares a size; the values read are held to the limit */
    FILE *f = fopen(tmp_path("a.csv"), "w");
    for (int i = 0; i < 100; i++) fprintf(f, "%d,%d\n", i, -i);
    fclose(f);
    oar_set_load_limit(1000);
    CHECK_FAILS(oar_csv_load(tmp_path("a.csv"), NULL), "over the load limit of 1000");
    oar_set_load_limit(old);
    oar_tensor *t = oar_csv_load(tmp_path("a.csv"), NULL);
    CHECK(t && oar_tensor_numel(t) == 200);
}

int main(void) {
    oar_set_allocator(tracking_alloc, NULL);
    if (!mkdtemp(dir)) return 1;
    oar_pool *pool = oar_pool_push(); /* (results the loaders hand to the pool) */
    RUN(test_npy);
    RUN(test_onnx_tensor);
    RUN(test_safetensors);
    RUN(test_idx_csv);
    oar_pool_pop(pool);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) return 1;
    return test_summary();
}

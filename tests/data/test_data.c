/* Data: the IDX reader on small generated files (gzip and raw, every
 * element type), truncated and corrupt files, the loader's seeded shuffle,
 * drop_last and normalization; and, as a test of its own (test_data
 * --fashion-mnist, skipped as a whole where the Debian package
 * dataset-fashion-mnist is missing), the installed Fashion-MNIST. */
#include "test.h"

#include <oar/data.h>
#include <unistd.h>
#include <zlib.h>

static char dir[256];

static const char *tmp_path(const char *name) {
    static char buf[4][512];
    static int k;
    char *p = buf[k++ % 4];
    snprintf(p, 512, "%s/%s", dir, name);
    return p;
}

static void write_raw(const char *path, const void *b, size_t n) {
    FILE *f = fopen(path, "wb");
    fwrite(b, 1, n, f);
    fclose(f);
}

static void write_gz(const char *path, const void *b, size_t n) {
    gzFile f = gzopen(path, "wb");
    gzwrite(f, b, (unsigned)n);
    gzclose(f);
}

/* An IDX u8 file of shape [3, 2, 4], values 3 * i + 1 (mod 256). */
static size_t make_u8(unsigned char *buf) {
    unsigned char head[16] = {0, 0, 0x08, 3, 0, 0, 0, 3, 0, 0, 0, 2, 0, 0, 0, 4};
    memcpy(buf, head, 16);
    for (int i = 0; i < 24; i++)
        buf[16 + i] = (unsigned char)(3 * i + 1);
    return 40;
}

static void test_idx_types(void) {
    oar_pool *pool = oar_pool_push();
    unsigned char buf[256];
    size_t n = make_u8(buf);
    write_gz(tmp_path("u8.gz"), buf, n);
    write_raw(tmp_path("u8.raw"), buf, n);
    const char *paths[2] = {tmp_path("u8.gz"), tmp_path("u8.raw")};
    for (int k = 0; k < 2; k++) {
        oar_tensor *t = oar_idx_load(paths[k]);
        CHECK(t && oar_tensor_dtype(t) == OAR_U8 && oar_tensor_ndim(t) == 3);
        CHECK(t && oar_tensor_shape(t)[0] == 3 && oar_tensor_shape(t)[1] == 2 &&
              oar_tensor_shape(t)[2] == 4);
        double want[24];
        for (int i = 0; i < 24; i++)
            want[i] = 3 * i + 1;
        CHECK_VALUES(t, want, 24, 0);
    }
    /* big-endian i8, i16, i32, f32, f64 */
    unsigned char i8[] = {0, 0, 0x09, 1, 0, 0, 0, 2, 0xff, 0x05};
    unsigned char i16[] = {0, 0, 0x0B, 1, 0, 0, 0, 2, 0xff, 0xfe, 0x01, 0x00};
    unsigned char i32[] = {0, 0, 0x0C, 1, 0, 0, 0, 2, 0x80, 0, 0, 0, 0, 1, 0, 0};
    unsigned char f32[] = {0, 0, 0x0D, 1, 0, 0, 0, 2, 0x3f, 0xc0, 0, 0, 0xc0, 0x20, 0, 0};
    unsigned char f64[] = {0,    0,    0x0E, 1,    0,    0,    0,    1,
                           0x40, 0x09, 0x21, 0xfb, 0x54, 0x44, 0x2d, 0x18};
    struct {
        unsigned char *b;
        size_t n;
        oar_dtype dt;
        double want[2];
        int count;
    } cases[] = {
        {i8, sizeof i8, OAR_I32, {-1, 5}, 2},
        {i16, sizeof i16, OAR_I32, {-2, 256}, 2},
        {i32, sizeof i32, OAR_I32, {-2147483648.0, 65536}, 2},
        {f32, sizeof f32, OAR_F32, {1.5, -2.5}, 2},
        {f64, sizeof f64, OAR_F64, {3.141592653589793}, 1},
    };
    for (int c = 0; c < 5; c++) {
        write_gz(tmp_path("t.gz"), cases[c].b, cases[c].n);
        oar_tensor *t = oar_idx_load(tmp_path("t.gz"));
        CHECK(t && oar_tensor_dtype(t) == cases[c].dt);
        CHECK_VALUES(t, cases[c].want, cases[c].count, 0);
    }
    oar_pool_pop(pool);
}

static void test_idx_damaged(void) {
    unsigned char buf[256];
    size_t n = make_u8(buf);
    /* every truncation of the raw and of the gzip file fails cleanly */
    int failures = 0;
    for (size_t len = 0; len < n; len++) {
        write_raw(tmp_path("cut.raw"), buf, len);
        write_gz(tmp_path("cut.gz"), buf, len);
        for (int k = 0; k < 2; k++) {
            const char *p = tmp_path(k ? "cut.gz" : "cut.raw");
            oar_clear_error();
            oar_tensor *t = oar_idx_load(p);
            if (t || !strstr(oar_last_error(), "truncated") || !strstr(oar_last_error(), p)) {
                if (failures++ < 3) fprintf(stderr, "len %zu: %s\n", len, oar_last_error());
            }
            oar_tensor_release(t);
        }
    }
    CHECK(failures == 0);
    /* a gzip stream cut short: truncated or corrupt, never a crash */
    write_gz(tmp_path("full.gz"), buf, n);
    FILE *f = fopen(tmp_path("full.gz"), "rb");
    unsigned char gz[512];
    size_t gn = fread(gz, 1, sizeof gz, f);
    fclose(f);
    int gz_fail = 0;
    for (size_t len = 0; len + 8 < gn; len++) {
        write_raw(tmp_path("cutgz.gz"), gz, len);
        oar_clear_error();
        oar_tensor *t = oar_idx_load(tmp_path("cutgz.gz"));
        if (t || !strstr(oar_last_error(), "idx_load")) {
            if (gz_fail++ < 3)
                fprintf(stderr, "gzip cut at %zu of %zu: %s\n", len, gn,
                        t ? "loaded" : oar_last_error());
        }
        oar_tensor_release(t);
    }
    CHECK(gz_fail == 0);
    /* a corrupted deflate stream */
    memcpy(gz + gn / 2, "\xff\xff\xff\xff", 4);
    write_raw(tmp_path("bad.gz"), gz, gn);
    CHECK_FAILS(oar_idx_load(tmp_path("bad.gz")), "idx_load");
    /* bad magic, zero dims, a header claiming more data than exists */
    unsigned char bad[16];
    memcpy(bad, buf, 16);
    bad[0] = 1;
    write_raw(tmp_path("magic"), bad, 16);
    CHECK_FAILS(oar_idx_load(tmp_path("magic")), "not an IDX file");
    memcpy(bad, buf, 16);
    bad[2] = 0x07;
    write_raw(tmp_path("type"), bad, 16);
    CHECK_FAILS(oar_idx_load(tmp_path("type")), "not an IDX file");
    unsigned char huge[16] = {0,    0,    0x08, 3,    0x7f, 0xff, 0xff, 0xff,
                              0x7f, 0xff, 0xff, 0xff, 0,    0,    0,    2};
    write_raw(tmp_path("huge"), huge, 16);
    CHECK_FAILS(oar_idx_load(tmp_path("huge")), "more than 4 GiB");
    unsigned char lie[] = {0, 0, 0x08, 1, 0x10, 0, 0, 0, 1, 2, 3}; /* claims 256 MiB */
    write_gz(tmp_path("lie.gz"), lie, sizeof lie);
    CHECK_FAILS(oar_idx_load(tmp_path("lie.gz")), "file truncated");
    unsigned char longer[64];
    memcpy(longer, buf, n);
    longer[n] = 9;
    write_gz(tmp_path("long.gz"), longer, n + 1);
    CHECK_FAILS(oar_idx_load(tmp_path("long.gz")), "data continues past the 24 bytes");
    CHECK_FAILS(oar_idx_load(tmp_path("does-not-exist")), "cannot open");
    CHECK_FAILS(oar_idx_load(NULL), "path is NULL");
}

static oar_dataset *make_ds(int64_t n) {
    oar_pool *p = oar_pool_push();
    int64_t xs[2] = {n, 2};
    oar_tensor *x =
        oar_cast(oar_reshape(oar_arange(0, (double)(2 * n), 1, OAR_I64), 2, xs), OAR_U8);
    oar_tensor *y = oar_arange(0, (double)n, 1, OAR_I64);
    oar_dataset *ds = oar_dataset_new(x, y);
    oar_pool_pop(p);
    return ds;
}

static void test_loader(void) {
    oar_dataset *ds = make_ds(10);
    CHECK(ds && oar_dataset_size(ds) == 10);
    oar_loader_options o = {
        .batch_size = 4, .shuffle = true, .seed = 42, .scale = 0.5, .mean = 1, .std = 2};
    oar_loader *a = oar_loader_new(ds, &o), *b = oar_loader_new(ds, &o);
    CHECK(oar_loader_num_batches(a) == 3);
    /* the same seed gives the same order; it is a permutation, not the identity */
    int seen[10] = {0}, same = 1, identity = 1;
    for (int k = 0; k < 10; k++) {
        int64_t i = oar_loader_index(a, k);
        CHECK(i >= 0 && i < 10);
        if (i >= 0 && i < 10) seen[i]++;
        same &= i == oar_loader_index(b, k);
        identity &= i == k;
    }
    for (int k = 0; k < 10; k++)
        CHECK(seen[k] == 1);
    CHECK(same && !identity);
    int64_t order0[10];
    for (int k = 0; k < 10; k++)
        order0[k] = oar_loader_index(a, k);
    /* batches follow the order, x transformed, y as stored */
    oar_pool *pool = oar_pool_push();
    oar_tensor *x, *y;
    int64_t sizes[3], got = 0;
    int nb = 0;
    while (oar_loader_next(a, &x, &y) == 1 && nb < 5) {
        sizes[nb++] = oar_tensor_shape(x)[0];
        CHECK(oar_tensor_dtype(x) == OAR_F32 && oar_tensor_dtype(y) == OAR_I64);
        double *xv = test_values(x), *yv = test_values(y);
        for (int64_t r = 0; r < oar_tensor_shape(x)[0]; r++) {
            int64_t i = order0[got + r];
            CHECK(yv[r] == (double)i);
            CHECK_NEAR(xv[2 * r + 1], ((2 * i + 1) * 0.5 - 1) / 2, 1e-6);
        }
        got += oar_tensor_shape(x)[0];
        free(xv);
        free(yv);
    }
    CHECK(nb == 3 && sizes[0] == 4 && sizes[1] == 4 && sizes[2] == 2 && got == 10);
    CHECK(oar_loader_epoch(a) == 1);
    /* the next epoch is shuffled differently, and reproducibly */
    int differs = 0;
    oar_loader *c = oar_loader_new(ds, &o);
    while (oar_loader_next(c, &x, &y) == 1) {
    }
    for (int k = 0; k < 10; k++) {
        differs |= oar_loader_index(a, k) != order0[k];
        CHECK(oar_loader_index(a, k) == oar_loader_index(c, k));
    }
    CHECK(differs);
    oar_pool_pop(pool);

    /* drop_last, no shuffle, no normalization */
    oar_loader_options d = {.batch_size = 4, .drop_last = true};
    oar_loader *dl = oar_loader_new(ds, &d);
    CHECK(oar_loader_num_batches(dl) == 2);
    pool = oar_pool_push();
    nb = 0;
    while (oar_loader_next(dl, &x, &y) == 1) {
        nb++;
        CHECK(oar_tensor_shape(x)[0] == 4);
        if (nb == 2) CHECK_VALUES(x, ((double[]){8, 9, 10, 11, 12, 13, 14, 15}), 8, 0);
    }
    CHECK(nb == 2);
    oar_pool_pop(pool);

    CHECK_FAILS(oar_loader_new(ds, &(oar_loader_options){.batch_size = 0}), "batch_size 0");
    CHECK_FAILS(oar_loader_new(ds, &(oar_loader_options){.batch_size = 1, .std = -1}), "std");
    CHECK_STATUS_FAILS(oar_loader_next(dl, NULL, &y), "NULL argument");
    oar_dataset *part = oar_dataset_slice(ds, 3, 7);
    CHECK(part && oar_dataset_size(part) == 4);
    CHECK_VALUES(oar_dataset_y(part), ((double[]){3, 4, 5, 6}), 4, 0);
    CHECK_FAILS(oar_dataset_slice(ds, 5, 11), "outside [0, 10)");
    oar_pool *p2 = oar_pool_push();
    CHECK_FAILS(oar_dataset_new(oar_zeros(OAR_F32, 1, (int64_t[]){3}),
                                oar_zeros(OAR_I64, 1, (int64_t[]){4})),
                "same size in dim 0");
    oar_pool_pop(p2);
    oar_dataset_free(part);
    oar_loader_free(a);
    oar_loader_free(b);
    oar_loader_free(c);
    oar_loader_free(dl);
    oar_dataset_free(ds);
}

#define FASHION_TEST_IMAGES "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz"

static void test_fashion_mnist(void) {
    oar_dataset *ds = oar_fashion_mnist_load(NULL, false);
    CHECK(ds && oar_dataset_size(ds) == 10000);
    if (!ds) return;
    const int64_t *s = oar_tensor_shape(oar_dataset_x(ds));
    CHECK(s[0] == 10000 && s[1] == 1 && s[2] == 28 && s[3] == 28);
    oar_pool *p = oar_pool_push();
    oar_tensor *y = oar_dataset_y(ds);
    CHECK(oar_tensor_item(oar_amin(y, 0, NULL, false)) == 0 &&
          oar_tensor_item(oar_amax(y, 0, NULL, false)) == 9);
    /* 1000 test images per class */
    double count3 = oar_tensor_item(oar_sum(oar_eq(y, oar_scalar(3)), 0, NULL, false));
    CHECK(count3 == 1000);
    oar_pool_pop(p);
    oar_dataset_free(ds);
    CHECK_FAILS(oar_fashion_mnist_load(dir, true), "cannot open");
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--fashion-mnist")) {
        if (access(FASHION_TEST_IMAGES, R_OK) != 0) {
            printf("skip: no %s (Debian: dataset-fashion-mnist)\n", FASHION_TEST_IMAGES);
            return 77;
        }
        RUN(test_fashion_mnist);
        return test_summary();
    }
    snprintf(dir, sizeof dir, "/tmp/oar_data_test_XXXXXX");
    if (!mkdtemp(dir)) return 1;
    RUN(test_idx_types);
    RUN(test_idx_damaged);
    RUN(test_loader);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return test_summary();
}

/* NumPy .npy files: fixtures written by NumPy (tests/ref/gen_npy.py) read
 * back with the right values, round trips of every dtype, and errors. */
#include "test.h"

#include <oar/infer.h>
#include <unistd.h>

static void test_fixtures(void) {
    oar_tensor *t = oar_npy_load("infer/fixture_f64_fortran.npy");
    CHECK(t && oar_tensor_dtype(t) == OAR_F64 && oar_tensor_ndim(t) == 3);
    CHECK(t && oar_tensor_shape(t)[0] == 2 && oar_tensor_shape(t)[1] == 3 && oar_tensor_shape(t)[2] == 4);
    const double *v = oar_tensor_data(t);
    int bad = 0;
    for (int i = 0; v && i < 24; i++) bad += v[i] != i / 8.0 - 1.0;
    CHECK(v && bad == 0);
    oar_tensor_release(t);
    t = oar_npy_load("infer/fixture_i32.npy");
    CHECK(t && oar_tensor_dtype(t) == OAR_I32 && oar_tensor_numel(t) == 6);
    const int32_t *w = oar_tensor_data(t);
    CHECK(w && w[3] == 40000 && w[1] == -2);
    oar_tensor_release(t);
    t = oar_npy_load("infer/fixture_bool0d.npy");
    CHECK(t && oar_tensor_ndim(t) == 0 && oar_tensor_dtype(t) == OAR_BOOL && oar_tensor_item(t) == 1);
    oar_tensor_release(t);
    CHECK_FAILS(oar_npy_load("infer/fixture_f32_big_endian.npy"), "unsupported dtype >f4");
}

static void test_round_trip(void) {
    const oar_dtype dts[] = {OAR_BOOL, OAR_U8, OAR_I32, OAR_I64, OAR_F16, OAR_F32, OAR_F64, OAR_C64, OAR_C128};
    const int64_t shapes[3][3] = {{5, 0, 0}, {2, 3, 0}, {2, 1, 3}};
    char path[] = "/tmp/oar_npy_XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    for (size_t d = 0; d < sizeof dts / sizeof *dts; d++) {
        for (int r = 0; r < 4; r++) {
            oar_pool *p = oar_pool_push();
            int ndim = r; /* 0-d, 1-d, 2-d, 3-d */
            const int64_t *sh = r ? shapes[r - 1] : NULL;
            oar_tensor *x = oar_cast(oar_mul_scalar(oar_randn(OAR_F64, ndim, sh), 3), dts[d]);
            if (ndim == 2) x = oar_transpose(x, 0, 1); /* not contiguous */
            CHECK(oar_npy_save(path, x) == 0);
            oar_tensor *y = oar_npy_load(path);
            CHECK(y && oar_tensor_dtype(y) == dts[d] && oar_tensor_ndim(y) == ndim);
            bool same = y && oar_tensor_item(oar_all(oar_eq(x, y), 0, NULL, false)) == 1;
            CHECK(same);
            oar_tensor_release(y);
            oar_pool_pop(p);
        }
    }
    /* header padded to a multiple of 64 bytes, as NumPy writes it */
    oar_pool *p = oar_pool_push();
    CHECK(oar_npy_save(path, oar_zeros(OAR_F32, 2, (int64_t[]){3, 4})) == 0);
    FILE *f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    CHECK(ftell(f) == 128 + 48);
    fclose(f);
    CHECK_STATUS_FAILS(oar_npy_save(path, oar_zeros(OAR_BF16, 1, (int64_t[]){2})), "bfloat16");
    CHECK_STATUS_FAILS(oar_npy_save("/nonexistent/x.npy", oar_zeros(OAR_F32, 1, (int64_t[]){2})), "cannot write");
    oar_pool_pop(p);
    unlink(path);
}

static void test_errors(void) {
    char path[] = "/tmp/oar_npy_XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    CHECK_FAILS(oar_npy_load("/nonexistent.npy"), "cannot open");
    FILE *f = fopen(path, "wb");
    fputs("not numpy at all", f);
    fclose(f);
    CHECK_FAILS(oar_npy_load(path), "bad magic");
    /* a valid file cut short */
    oar_pool *p = oar_pool_push();
    CHECK(oar_npy_save(path, oar_ones(OAR_F32, 1, (int64_t[]){100})) == 0);
    oar_pool_pop(p);
    CHECK(truncate(path, 128 + 200) == 0);
    CHECK_FAILS(oar_npy_load(path), "the shape declares 400 bytes, but the file holds 200 more");
    CHECK(truncate(path, 40) == 0);
    CHECK_FAILS(oar_npy_load(path), "truncated header");
    unlink(path);
    CHECK_FAILS(oar_npy_load(NULL), "NULL");
}

int main(void) {
    RUN(test_fixtures);
    RUN(test_round_trip);
    RUN(test_errors);
    return test_summary();
}

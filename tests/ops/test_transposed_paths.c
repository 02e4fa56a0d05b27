/* The tiled walk of the CPU iterator (src/backends/cpu/cpu_iter.c): an
 * elementwise op, cast or copy whose input is a transposed matrix runs in
 * 32 x 32 blocks, each such input first copied into a small buffer. Checked
 * here exactly, on the raw memory of contiguous results against loops over
 * the source arrays (not through another strided op, which would take the
 * same path): odd shapes and shapes at the tile size, one and two threads,
 * element sizes 1 to 16 (u8, i32, f32, f64, c128), two transposed inputs
 * (both buffered), three (the third read in place), and in-place adds. */
#include "test.h"

#ifdef _OPENMP
#include <omp.h>
#endif

#include <complex.h>

/* A contiguous [m, n] tensor of dtype dt holding v(i, j) (real part; the
 * imaginary part of a complex one is -v). */
static oar_tensor *filled(oar_dtype dt, int64_t m, int64_t n, double (*v)(int64_t, int64_t)) {
    oar_tensor *t = oar_zeros(dt, 2, (int64_t[]){m, n});
    if (!t) return NULL;
    char *p = oar_tensor_data(t);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double x = v(i, j);
            int64_t e = i * n + j;
            switch (dt) {
            case OAR_U8: ((uint8_t *)p)[e] = (uint8_t)x; break;
            case OAR_I32: ((int32_t *)p)[e] = (int32_t)x; break;
            case OAR_F32: ((float *)p)[e] = (float)x; break;
            case OAR_F64: ((double *)p)[e] = x; break;
            case OAR_C128: ((double complex *)p)[e] = x - x * I; break;
            default: break;
            }
        }
    return t;
}

static double va(int64_t i, int64_t j) { return (double)((i * 7 + j * 13) % 97); }
static double vb(int64_t i, int64_t j) { return (double)((i * 5 + j * 3) % 89) + 0.5; }

/* Element e of contiguous t as a double (real part). */
static double at(oar_tensor *t, int64_t e) {
    const char *p = oar_tensor_data(t);
    switch (oar_tensor_dtype(t)) {
    case OAR_U8: return ((const uint8_t *)p)[e];
    case OAR_I32: return ((const int32_t *)p)[e];
    case OAR_F32: return ((const float *)p)[e];
    case OAR_F64: return ((const double *)p)[e];
    case OAR_C128: return creal(((const double complex *)p)[e]);
    default: return NAN;
    }
}

/* b [n, m] -> bt [m, n]; checks contiguous(bt), a + bt, bt + bt2 (two
 * transposed inputs), where(ct, bt, bt2) (three) and a += 2 bt. */
static void check(oar_dtype dt, int64_t m, int64_t n) {
    oar_pool *pool = oar_pool_push();
    oar_tensor *a = filled(dt, m, n, va), *b = filled(dt, n, m, vb), *b2 = filled(dt, n, m, va);
    oar_tensor *bt = oar_transpose(b, 0, 1), *bt2 = oar_transpose(b2, 0, 1);
    /* (the condition from f64 copies: complex values do not compare) */
    oar_tensor *c = oar_transpose(oar_gt(filled(OAR_F64, n, m, vb), filled(OAR_F64, n, m, va)), 0, 1);
    oar_tensor *y = oar_contiguous(bt), *z = oar_add(a, bt), *w = oar_add(bt, bt2), *s = oar_where(c, bt, bt2);
    CHECK(y && z && w && s && oar_tensor_is_contiguous(z) && oar_tensor_is_contiguous(w));
    int64_t bad = 0;
    for (int64_t i = 0; y && z && w && s && i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            int64_t e = i * n + j, et = j * m + i;
            double bv = at(b, et), b2v = at(b2, et);
            /* the sums are exact in every dtype here (small integers, halves) */
            double zs = at(a, e) + bv, ws = bv + b2v;
            if (dt == OAR_U8) zs = (double)(uint8_t)(int)zs, ws = (double)(uint8_t)(int)ws;
            bad += at(y, e) != bv || at(z, e) != zs || at(w, e) != ws || at(s, e) != (bv > b2v ? bv : b2v);
        }
    if (bad) fprintf(stderr, "%s [%lld, %lld]: %lld wrong\n", oar_dtype_name(dt), (long long)m, (long long)n,
                     (long long)bad);
    CHECK(bad == 0);
    if (dt == OAR_F32 || dt == OAR_F64) { /* in place: a += 2 bt */
        oar_tensor *a2 = oar_clone(a);
        CHECK(a2 && oar_add_scaled_(a2, bt, 2.0) == 0);
        bad = 0;
        for (int64_t i = 0; a2 && i < m; i++)
            for (int64_t j = 0; j < n; j++) bad += at(a2, i * n + j) != at(a, i * n + j) + 2 * at(b, j * m + i);
        CHECK(bad == 0);
    }
    oar_pool_pop(pool);
}

static void test_transposed(void) {
    static const int64_t shapes[][2] = {{2, 2}, {3, 5}, {32, 32}, {33, 31}, {64, 96}, {67, 45}, {300, 129}, {1031, 300}};
    static const oar_dtype dts[] = {OAR_U8, OAR_I32, OAR_F32, OAR_F64, OAR_C128};
#ifdef _OPENMP
    for (int threads = 1; threads <= 2; threads++) {
        omp_set_num_threads(threads);
#endif
        for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
            for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
                if (dts[d] != OAR_C128 || shapes[k][0] * shapes[k][1] < 100000) /* (c128 where is slow to check) */
                    check(dts[d], shapes[k][0], shapes[k][1]);
#ifdef _OPENMP
    }
#endif
}

int main(void) {
    RUN(test_transposed);
    return test_summary();
}

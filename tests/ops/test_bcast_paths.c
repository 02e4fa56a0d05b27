/* The 2-D path of the binary kernels (an iteration that merges to two dims:
 * a row or a column broadcast over a matrix) against the same op in f64
 * rounded to f32 (exact for mul: a product of two floats is exact in
 * double), at the parallel threshold (OARI_PARALLEL_GRAIN = 32768
 * elements) and either side of it, with odd row lengths, one row, one
 * column, a transposed operand, and on one and two threads. */
#include "test.h"

#ifdef _OPENMP
#include <omp.h>
#endif

static oar_tensor *f64(oar_tensor *x) { return oar_cast(x, OAR_F64); }
static oar_tensor *f32(oar_tensor *x) { return oar_cast(x, OAR_F32); }

/* Number of elements of a and b that differ (NaN never appears here). */
static int64_t n_diff(oar_tensor *a, oar_tensor *b) {
    if (!a || !b || oar_tensor_numel(a) != oar_tensor_numel(b)) return -1;
    double *u = test_values(a), *v = test_values(b);
    int64_t d = 0;
    for (int64_t i = 0; u && v && i < oar_tensor_numel(a); i++) d += u[i] != v[i];
    free(u);
    free(v);
    return u && v ? d : -1;
}

static void check_shapes(void) {
    static const int64_t shapes[][2] = {
        {256, 128}, /* exactly the grain: parallel */
        {255, 128}, /* just under: serial */
        {257, 128}, /* rows not divisible by the threads */
        {3001, 11}, /* odd short rows */
        {1, 40000}, /* one row */
        {3, 20000}, /* few long rows: the generic walk */
        {16, 2048}, /* just enough rows for the 2-D loop */
        {40000, 1}, /* one column */
        {7, 5},
    };
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        oar_pool *p = oar_pool_push();
        int64_t r = shapes[k][0], c = shapes[k][1];
        oar_tensor *a = oar_randn(OAR_F32, 2, shapes[k]);
        oar_tensor *row = oar_randn(OAR_F32, 1, (int64_t[]){c});
        oar_tensor *col = oar_randn(OAR_F32, 2, (int64_t[]){r, 1});
        /* a [c, r] transposed: strides (1, r), a generic inner stride */
        oar_tensor *at = oar_transpose(oar_randn(OAR_F32, 2, (int64_t[]){c, r}), 0, 1);
        CHECK(n_diff(oar_mul(a, row), f32(oar_mul(f64(a), f64(row)))) == 0);
        CHECK(n_diff(oar_mul(row, a), f32(oar_mul(f64(row), f64(a)))) == 0);
        CHECK(n_diff(oar_mul(a, col), f32(oar_mul(f64(a), f64(col)))) == 0);
        CHECK(n_diff(oar_mul(col, a), f32(oar_mul(f64(col), f64(a)))) == 0);
        CHECK(n_diff(oar_mul(at, row), f32(oar_mul(f64(at), f64(row)))) == 0);
        CHECK(n_diff(oar_mul(a, at), f32(oar_mul(f64(a), f64(at)))) == 0);
        /* integer ops take the same loops */
        oar_tensor *ai = oar_cast(oar_mul_scalar(a, 100), OAR_I32);
        oar_tensor *ri = oar_cast(oar_mul_scalar(row, 100), OAR_I32);
        CHECK(n_diff(oar_sub(ai, ri), oar_cast(oar_sub(f64(ai), f64(ri)), OAR_I32)) == 0);
        oar_pool_pop(p);
    }
}

static void test_broadcast_2d(void) {
#ifdef _OPENMP
    int saved = omp_get_max_threads();
    for (int t = 1; t <= 2; t++) {
        omp_set_num_threads(t);
        check_shapes();
    }
    omp_set_num_threads(saved);
#else
    check_shapes();
#endif
}

int main(void) {
    oar_manual_seed(3);
    RUN(test_broadcast_2d);
    return test_summary();
}

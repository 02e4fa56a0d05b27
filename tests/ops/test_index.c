/* Indexing and sorting ops against PyTorch references (tests/ref/gen_index.py):
 * gather, scatter, scatter_add, index_select, index_add, one_hot, sort, topk,
 * masked_fill; dtypes, i32 indices, non-contiguous views, empty tensors,
 * duplicates, ties and NaN, and bad input. */
#include "backends/cpu/cpu.h" /* oari_cpu_topk_vector_use */
#include "core/core.h" /* oari_tensor_view: non-contiguous views without movement ops */
#include "ref/index_ref.h"
#include "test.h"

#define N(a) ((int64_t)(sizeof(a) / sizeof((a)[0])))
#define SHAPE(...) ((const int64_t[]){__VA_ARGS__})

/* A tensor of `dtype` holding the doubles v (row-major). */
static oar_tensor *tens(const double *v, oar_dtype dtype, int ndim, const int64_t *shape) {
    return oar_cast(oar_tensor_from_data(v, OAR_F64, ndim, shape), dtype);
}

static oar_tensor *idx64(const int64_t *v, int ndim, const int64_t *shape) {
    return oar_tensor_from_data(v, OAR_I64, ndim, shape);
}

/* The same values as the row-major [a, b] data `t`, stored transposed: a
 * non-contiguous [a, b] view with strides [1, a]. */
static oar_tensor *transposed(oar_tensor *t) {
    if (!t || oar_tensor_ndim(t) != 2) return NULL;
    int64_t a = oar_tensor_shape(t)[0], b = oar_tensor_shape(t)[1];
    size_t es = oar_dtype_size(oar_tensor_dtype(t));
    char *src = malloc((size_t)(a * b) * es + 1), *dst = malloc((size_t)(a * b) * es + 1);
    oar_tensor_to_host(t, src, (size_t)(a * b) * es);
    for (int64_t i = 0; i < a; i++)
        for (int64_t j = 0; j < b; j++)
            memcpy(dst + (j * a + i) * es, src + (i * b + j) * es, es);
    oar_tensor *store = oar_tensor_from_data(dst, oar_tensor_dtype(t), 2, SHAPE(b, a));
    free(src);
    free(dst);
    oar_tensor *v = oari_pool_adopt(oari_tensor_view(store, 2, SHAPE(a, b), SHAPE(1, a), 0));
    CHECK(v && !oar_tensor_is_contiguous(v));
    return v;
}

static void check_i64(const char *what, oar_tensor *t, const int64_t *want, int64_t n, int line) {
    double *w = malloc((size_t)(n ? n : 1) * sizeof *w);
    for (int64_t i = 0; i < n; i++)
        w[i] = (double)want[i];
    CHECK(!t || oar_tensor_dtype(t) == OAR_I64);
    test_expect_values(what, t, w, n, 0, __FILE__, line);
    free(w);
}
#define CHECK_IDX(t, want, n) check_i64(#t, t, want, n, __LINE__)

/* Complex values: (re, im) pairs. */
static void check_complex(oar_tensor *t, const double *want, int64_t n, double tol) {
    CHECK(t && oar_tensor_numel(t) == n);
    if (!t) return;
    oar_pool *p = oar_pool_push();
    oar_tensor *d = oar_cast(t, OAR_C128);
    double *v = malloc((size_t)(2 * n) * sizeof *v);
    CHECK(oar_tensor_to_host(d, v, (size_t)(2 * n) * sizeof *v) == 0);
    for (int64_t i = 0; i < 2 * n; i++)
        CHECK_NEAR(v[i], want[i], tol);
    free(v);
    oar_pool_pop(p);
}

static void test_gather(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *x = tens(gather_x, OAR_F32, 2, SHAPE(3, 4));
    oar_tensor *i1 = idx64(gather_i1, 2, SHAPE(3, 2)), *i0 = idx64(gather_i0, 2, SHAPE(2, 3));
    oar_tensor *r = oar_gather(x, 1, i1);
    CHECK(r && oar_tensor_dtype(r) == OAR_F32 && oar_tensor_shape(r)[1] == 2);
    CHECK_VALUES(r, gather_d1, N(gather_d1), 1e-6);
    CHECK_VALUES(oar_gather(x, -1, i1), gather_d1, N(gather_d1), 1e-6);
    CHECK_VALUES(oar_gather(x, 0, i0), gather_d0, N(gather_d0), 1e-6);
    /* every dtype moves bytes: f64, f16, bf16, i64, complex, bool */
    CHECK_VALUES(oar_gather(tens(gather_x, OAR_F64, 2, SHAPE(3, 4)), 1, i1), gather_d1, 6, 0);
    CHECK_VALUES(oar_gather(tens(gather_x, OAR_F16, 2, SHAPE(3, 4)), 1, i1), gather_d1, 6, 1e-3);
    CHECK_VALUES(oar_gather(tens(gather_x, OAR_BF16, 2, SHAPE(3, 4)), 1, i1), gather_d1, 6, 1e-2);
    double trunc_want[6];
    for (int i = 0; i < 6; i++)
        trunc_want[i] = trunc(gather_d1[i]);
    CHECK_VALUES(oar_gather(tens(gather_x, OAR_I64, 2, SHAPE(3, 4)), 1, i1), trunc_want, 6, 0);
    oar_tensor *rc = oar_gather(tens(gather_x, OAR_C128, 2, SHAPE(3, 4)), 1, i1);
    CHECK(rc && oar_tensor_dtype(rc) == OAR_C128);
    CHECK_VALUES(rc, gather_d1, 6, 0);
    double bool_want[6];
    for (int i = 0; i < 6; i++)
        bool_want[i] = gather_d1[i] != 0;
    CHECK_VALUES(oar_gather(tens(gather_x, OAR_BOOL, 2, SHAPE(3, 4)), 1, i1), bool_want, 6, 0);
    /* i32 indices */
    CHECK_VALUES(oar_gather(x, 1, oar_cast(i1, OAR_I32)), gather_d1, 6, 1e-6);
    /* 3-d, negative dim */
    oar_tensor *x3 = tens(gather3_x, OAR_F64, 3, SHAPE(2, 3, 4));
    CHECK_VALUES(oar_gather(x3, -2, idx64(gather3_i, 3, SHAPE(2, 5, 3))), gather3, N(gather3), 0);
    /* non-contiguous input and index */
    CHECK_VALUES(oar_gather(transposed(x), 1, transposed(i1)), gather_d1, 6, 1e-6);
    CHECK_VALUES(oar_gather(transposed(x), 0, i0), gather_d0, 6, 1e-6);
    /* empty index, and an empty input with an empty index */
    oar_tensor *e = oar_gather(x, 1, oar_zeros(OAR_I64, 2, SHAPE(3, 0)));
    CHECK(e && oar_tensor_numel(e) == 0 && oar_tensor_shape(e)[0] == 3);
    e = oar_gather(oar_zeros(OAR_F32, 2, SHAPE(0, 4)), 0, oar_zeros(OAR_I64, 2, SHAPE(0, 2)));
    CHECK(e && oar_tensor_numel(e) == 0);
    /* 0-d */
    oar_tensor *s = oar_gather(oar_scalar_of(2.5, OAR_F32), 0, oar_scalar_of(0, OAR_I64));
    CHECK(s && oar_tensor_ndim(s) == 0 && oar_tensor_item(s) == 2.5);
    oar_pool_pop(p);
}

static void test_scatter(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *x = tens(scatter_x, OAR_F32, 2, SHAPE(3, 5));
    oar_tensor *i = idx64(scatter_i, 2, SHAPE(2, 3));
    oar_tensor *src = tens(scatter_src, OAR_F32, 2, SHAPE(2, 4));
    /* duplicates: the last write along the dim wins, as torch on the CPU */
    oar_tensor *r = oar_scatter(x, 1, i, src);
    CHECK(r && oar_tensor_ndim(r) == 2 && oar_tensor_shape(r)[1] == 5);
    CHECK_VALUES(r, scatter_d1, N(scatter_d1), 1e-6);
    /* out of place: x unchanged */
    CHECK_VALUES(x, scatter_x, N(scatter_x), 1e-6);
    /* a 0-d src writes one value */
    CHECK_VALUES(oar_scatter(x, 1, i, oar_scalar_of(7.5, OAR_F32)), scatter_value, 15, 1e-6);
    /* f64, complex, i32 index, non-contiguous x / index / src */
    CHECK_VALUES(oar_scatter(tens(scatter_x, OAR_F64, 2, SHAPE(3, 5)), -1, oar_cast(i, OAR_I32),
                             tens(scatter_src, OAR_F64, 2, SHAPE(2, 4))),
                 scatter_d1, 15, 0);
    CHECK_VALUES(oar_scatter(tens(scatter_x, OAR_C64, 2, SHAPE(3, 5)), 1, i,
                             tens(scatter_src, OAR_C64, 2, SHAPE(2, 4))),
                 scatter_d1, 15, 1e-6);
    CHECK_VALUES(oar_scatter(transposed(x), 1, transposed(i), transposed(src)), scatter_d1, 15,
                 1e-6);
    /* src of another dtype is cast to x's */
    oar_tensor *rc = oar_scatter(x, 1, i, tens(scatter_src, OAR_F64, 2, SHAPE(2, 4)));
    CHECK(rc && oar_tensor_dtype(rc) == OAR_F32);
    CHECK_VALUES(rc, scatter_d1, 15, 1e-6);
    /* empty index: a copy of x */
    CHECK_VALUES(oar_scatter(x, 1, oar_zeros(OAR_I64, 2, SHAPE(2, 0)), src), scatter_x, 15, 1e-6);
    oar_pool_pop(p);
}

static void test_scatter_add(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *x = tens(scatter_add_x, OAR_F64, 2, SHAPE(4, 3));
    oar_tensor *i = idx64(scatter_add_i, 2, SHAPE(6, 3));
    oar_tensor *src = tens(scatter_add_src, OAR_F64, 2, SHAPE(6, 3));
    CHECK_VALUES(oar_scatter_add(x, 0, i, src), scatter_add_d0, 12, 1e-12);
    CHECK_VALUES(oar_scatter_add(transposed(x), 0, transposed(i), transposed(src)), scatter_add_d0,
                 12, 1e-12);
    CHECK_VALUES(oar_scatter_add(tens(scatter_add_x, OAR_F32, 2, SHAPE(4, 3)), 0,
                                 oar_cast(i, OAR_I32),
                                 tens(scatter_add_src, OAR_F32, 2, SHAPE(6, 3))),
                 scatter_add_d0, 12, 1e-5);
    /* f16 runs in f32 */
    oar_tensor *h = oar_scatter_add(tens(scatter_add_x, OAR_F16, 2, SHAPE(4, 3)), 0, i,
                                    tens(scatter_add_src, OAR_F16, 2, SHAPE(6, 3)));
    CHECK(h && oar_tensor_dtype(h) == OAR_F16);
    CHECK_VALUES(h, scatter_add_d0, 12, 1e-2);
    /* complex */
    oar_tensor *cx =
        oar_cast(oar_tensor_from_data(scatter_add_cx, OAR_C128, 2, SHAPE(4, 3)), OAR_C64);
    oar_tensor *cs = oar_tensor_from_data(scatter_add_csrc, OAR_C128, 2, SHAPE(6, 3));
    check_complex(oar_scatter_add(cx, 0, i, oar_cast(cs, OAR_C64)), scatter_add_c, 12, 1e-5);
    check_complex(
        oar_scatter_add(oar_tensor_from_data(scatter_add_cx, OAR_C128, 2, SHAPE(4, 3)), 0, i, cs),
        scatter_add_c, 12, 1e-12);
    /* integers: counts (closed form) */
    int64_t bins[5] = {0, 1, 0, 3, 0};
    CHECK_VALUES(oar_scatter_add(oar_zeros(OAR_I32, 1, SHAPE(4)), 0, idx64(bins, 1, SHAPE(5)),
                                 oar_ones(OAR_I32, 1, SHAPE(5))),
                 ((double[]){3, 1, 0, 1}), 4, 0);
    CHECK_VALUES(oar_scatter_add(oar_ones(OAR_I64, 1, SHAPE(4)), 0, idx64(bins, 1, SHAPE(5)),
                                 oar_full(OAR_I64, 1, SHAPE(5), 2)),
                 ((double[]){7, 3, 1, 3}), 4, 0);
    /* many duplicates over threads: exact counts, deterministic */
    enum { M = 100003 };
    int64_t *bi = malloc(M * sizeof *bi);
    double counts[7] = {0};
    for (int64_t k = 0; k < M; k++)
        bi[k] = (k * 5) % 7, counts[(k * 5) % 7] += 1;
    oar_tensor *big = idx64(bi, 1, SHAPE(M));
    oar_tensor *ones = oar_ones(OAR_F64, 1, SHAPE(M));
    CHECK_VALUES(oar_scatter_add(oar_zeros(OAR_F64, 1, SHAPE(7)), 0, big, ones), counts, 7, 0);
    free(bi);
    /* 2-d with many lines (parallel over lines): counts per column */
    enum { R = 40, C = 1000 };
    int64_t *bi2 = malloc(R * C * sizeof *bi2);
    double *want2 = calloc(7 * C, sizeof *want2);
    for (int64_t r = 0; r < R; r++)
        for (int64_t c = 0; c < C; c++)
            bi2[r * C + c] = (r * 3 + c) % 7, want2[((r * 3 + c) % 7) * C + c] += 1;
    CHECK_VALUES(oar_scatter_add(oar_zeros(OAR_F32, 2, SHAPE(7, C)), 0, idx64(bi2, 2, SHAPE(R, C)),
                                 oar_ones(OAR_F32, 2, SHAPE(R, C))),
                 want2, 7 * C, 0);
    free(bi2);
    free(want2);
    /* bool has no addition kernel */
    CHECK_FAILS(oar_scatter_add(oar_zeros(OAR_BOOL, 1, SHAPE(4)), 0, idx64(bins, 1, SHAPE(5)),
                                oar_ones(OAR_BOOL, 1, SHAPE(5))),
                "no kernel");
    oar_pool_pop(p);
}

static void test_index_select(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *x = tens(isel_x, OAR_F32, 2, SHAPE(4, 3));
    oar_tensor *i = idx64(isel_i, 1, SHAPE(4));
    oar_tensor *r = oar_index_select(x, 0, i);
    CHECK(r && oar_tensor_shape(r)[0] == 4 && oar_tensor_shape(r)[1] == 3);
    CHECK_VALUES(r, isel_d0, 12, 1e-6);
    int64_t cols[3] = {2, 2, 0};
    CHECK_VALUES(oar_index_select(x, -1, idx64(cols, 1, SHAPE(3))), isel_d1, 12, 1e-6);
    CHECK_VALUES(oar_index_select(transposed(x), 1, oar_cast(idx64(cols, 1, SHAPE(3)), OAR_I32)),
                 isel_d1, 12, 1e-6);
    CHECK_VALUES(oar_index_select(tens(isel_x, OAR_BF16, 2, SHAPE(4, 3)), 0, i), isel_d0, 12, 1e-2);
    CHECK_VALUES(oar_index_select(tens(isel_x, OAR_C128, 2, SHAPE(4, 3)), 0, i), isel_d0, 12, 0);
    /* 0-d index keeps the dim with size 1 */
    oar_tensor *one = oar_index_select(x, 0, oar_scalar_of(3, OAR_I64));
    CHECK(one && oar_tensor_ndim(one) == 2 && oar_tensor_shape(one)[0] == 1);
    CHECK_VALUES(one, isel_x + 9, 3, 1e-6);
    /* empty index */
    oar_tensor *e = oar_index_select(x, 0, oar_zeros(OAR_I64, 1, SHAPE(0)));
    CHECK(e && oar_tensor_numel(e) == 0 && oar_tensor_shape(e)[1] == 3);
    oar_pool_pop(p);
}

static void test_index_add(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *x = tens(iadd_x, OAR_F64, 2, SHAPE(5, 3));
    oar_tensor *i = idx64(iadd_i, 1, SHAPE(4));
    oar_tensor *src = tens(iadd_src, OAR_F64, 2, SHAPE(4, 3));
    CHECK_VALUES(oar_index_add(x, 0, i, src), iadd_d0, 15, 1e-12);
    CHECK_VALUES(oar_index_add(tens(iadd_x, OAR_F32, 2, SHAPE(5, 3)), 0, oar_cast(i, OAR_I32),
                               tens(iadd_src, OAR_F32, 2, SHAPE(4, 3))),
                 iadd_d0, 15, 1e-5);
    int64_t cols[2] = {2, 2};
    oar_tensor *src1 = tens(iadd_src1, OAR_F64, 2, SHAPE(5, 2));
    CHECK_VALUES(oar_index_add(x, 1, idx64(cols, 1, SHAPE(2)), src1), iadd_d1, 15, 1e-12);
    oar_tensor *xt = transposed(tens(iadd_x, OAR_F64, 2, SHAPE(5, 3)));
    CHECK_VALUES(oar_index_add(xt, 1, idx64(cols, 1, SHAPE(2)), transposed(src1)), iadd_d1, 15,
                 1e-12);
    CHECK_VALUES(oar_index_add(oar_zeros(OAR_I64, 1, SHAPE(3)), 0, idx64(cols, 1, SHAPE(2)),
                               oar_full(OAR_I64, 1, SHAPE(2), 4)),
                 ((double[]){0, 0, 8}), 3, 0);
    /* 0-d input and index */
    oar_tensor *z = oar_index_add(oar_scalar_of(1.5, OAR_F64), 0, oar_scalar_of(0, OAR_I64),
                                  oar_scalar_of(2, OAR_F64));
    CHECK(z && oar_tensor_ndim(z) == 0 && oar_tensor_item(z) == 3.5);
    z = oar_index_select(oar_scalar_of(1.5, OAR_F64), 0, oar_scalar_of(0, OAR_I64));
    CHECK(z && oar_tensor_ndim(z) == 0 && oar_tensor_item(z) == 1.5);
    CHECK_FAILS(oar_index_select(oar_scalar_of(1.5, OAR_F64), 0, oar_scalar_of(1, OAR_I64)),
                "index 1 is out of range for dim 0 of size 1");
    z = oar_scatter(oar_scalar_of(1.5, OAR_F32), 0, oar_scalar_of(0, OAR_I32),
                    oar_scalar_of(-2, OAR_F32));
    CHECK(z && oar_tensor_ndim(z) == 0 && oar_tensor_item(z) == -2);
    z = oar_topk(oar_scalar_of(4, OAR_F32), 1, 0, true, true, NULL);
    CHECK(z && oar_tensor_ndim(z) == 0 && oar_tensor_item(z) == 4);
    /* empty index: a copy of x */
    CHECK_VALUES(
        oar_index_add(x, 0, oar_zeros(OAR_I64, 1, SHAPE(0)), oar_zeros(OAR_F64, 2, SHAPE(0, 3))),
        iadd_x, 15, 0);
    oar_pool_pop(p);
}

static void test_one_hot(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *i = idx64(one_hot_i, 2, SHAPE(2, 3));
    oar_tensor *r = oar_one_hot(i, 5);
    CHECK(r && oar_tensor_dtype(r) == OAR_I64 && oar_tensor_ndim(r) == 3 &&
          oar_tensor_shape(r)[2] == 5);
    CHECK_VALUES(r, one_hot_5, 30, 0);
    oar_tensor *a = oar_one_hot(oar_cast(i, OAR_I32), -1);
    CHECK(a && oar_tensor_shape(a)[2] == 5);
    CHECK_VALUES(a, one_hot_auto, N(one_hot_auto), 0);
    CHECK_VALUES(oar_one_hot(transposed(i), 5), one_hot_5, 30, 0);
    oar_tensor *e = oar_one_hot(oar_zeros(OAR_I64, 1, SHAPE(0)), 3);
    CHECK(e && oar_tensor_numel(e) == 0 && oar_tensor_shape(e)[1] == 3);
    int64_t neg[2] = {1, -1};
    CHECK_FAILS(oar_one_hot(idx64(neg, 1, SHAPE(2)), 3), "non-negative");
    CHECK_FAILS(oar_one_hot(idx64(neg, 1, SHAPE(2)), -1), "non-negative");
    CHECK_FAILS(oar_one_hot(i, 4), "out of range");
    CHECK_FAILS(oar_one_hot(oar_zeros(OAR_F32, 1, SHAPE(2)), 3), "int64 or int32");
    CHECK_FAILS(oar_one_hot(oar_zeros(OAR_I64, 1, SHAPE(0)), -1), "empty");
    CHECK_FAILS(oar_one_hot(i, -2), "num_classes");
    oar_pool_pop(p);
}

static void test_sort(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *x = tens(sort_x, OAR_F32, 2, SHAPE(3, 6)), *ix = NULL;
    oar_tensor *v = oar_sort(x, 1, false, &ix);
    CHECK_VALUES(v, sort_asc1_v, 18, 0);
    CHECK_IDX(ix, sort_asc1_i, 18);
    v = oar_sort(x, -1, true, &ix);
    CHECK_VALUES(v, sort_desc1_v, 18, 0);
    CHECK_IDX(ix, sort_desc1_i, 18);
    v = oar_sort(oar_cast(x, OAR_F64), 0, false, &ix);
    CHECK_VALUES(v, sort_asc0_v, 18, 0);
    CHECK_IDX(ix, sort_asc0_i, 18);
    v = oar_sort(transposed(x), 0, true, &ix);
    CHECK_VALUES(v, sort_desc0_v, 18, 0);
    CHECK_IDX(ix, sort_desc0_i, 18);
    /* f16 runs in f32 and keeps its dtype */
    v = oar_sort(oar_cast(x, OAR_F16), 1, false, &ix);
    CHECK(v && oar_tensor_dtype(v) == OAR_F16);
    CHECK_VALUES(v, sort_asc1_v, 18, 0);
    CHECK_IDX(ix, sort_asc1_i, 18);
    /* integers with ties: stable */
    oar_tensor *xi = tens(sort_int_x, OAR_I32, 1, SHAPE(8));
    v = oar_sort(xi, 0, false, &ix);
    CHECK(v && oar_tensor_dtype(v) == OAR_I32);
    CHECK_VALUES(v, sort_int_asc_v, 8, 0);
    CHECK_IDX(ix, sort_int_asc_i, 8);
    v = oar_sort(oar_cast(xi, OAR_I64), 0, true, &ix);
    CHECK_VALUES(v, sort_int_desc_v, 8, 0);
    CHECK_IDX(ix, sort_int_desc_i, 8);
    /* bool (closed form), indices not asked for */
    double b[5] = {1, 0, 1, 0, 0};
    CHECK_VALUES(oar_sort(tens(b, OAR_BOOL, 1, SHAPE(5)), 0, false, NULL),
                 ((double[]){0, 0, 0, 1, 1}), 5, 0);
    v = oar_sort(tens(b, OAR_BOOL, 1, SHAPE(5)), 0, true, &ix);
    CHECK_IDX(ix, ((int64_t[]){0, 2, 1, 3, 4}), 5);
    /* empty and 0-d */
    v = oar_sort(oar_zeros(OAR_F32, 2, SHAPE(3, 0)), 1, false, &ix);
    CHECK(v && ix && oar_tensor_numel(v) == 0 && oar_tensor_numel(ix) == 0);
    v = oar_sort(oar_scalar_of(4, OAR_F64), 0, false, &ix);
    CHECK(v && oar_tensor_item(v) == 4 && oar_tensor_item(ix) == 0);
    /* many lines across threads: sorted, and values == x at the indices */
    oar_manual_seed(7);
    oar_tensor *big = oar_randint(-50, 50, OAR_I64, 2, SHAPE(300, 211));
    v = oar_sort(big, 1, false, &ix);
    int64_t n = 300 * 211;
    int64_t *vv = malloc(n * sizeof *vv), *ii = malloc(n * sizeof *ii),
            *xx = malloc(n * sizeof *xx);
    CHECK(oar_tensor_to_host(v, vv, n * sizeof *vv) == 0);
    CHECK(oar_tensor_to_host(ix, ii, n * sizeof *ii) == 0);
    CHECK(oar_tensor_to_host(big, xx, n * sizeof *xx) == 0);
    int bad = 0;
    for (int64_t r = 0; r < 300; r++)
        for (int64_t j = 0; j < 211; j++) {
            int64_t k = r * 211 + j;
            if (vv[k] != xx[r * 211 + ii[k]]) bad++;
            if (j && (vv[k] < vv[k - 1] || (vv[k] == vv[k - 1] && ii[k] <= ii[k - 1]))) bad++;
        }
    CHECK(bad == 0);
    free(vv);
    free(ii);
    free(xx);
    oar_pool_pop(p);
}

static void test_topk(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *x = tens(topk_x, OAR_F32, 2, SHAPE(2, 6)), *ix = NULL;
    oar_tensor *v = oar_topk(x, 3, 1, true, true, &ix);
    CHECK(v && oar_tensor_shape(v)[1] == 3 && oar_tensor_shape(ix)[1] == 3);
    CHECK_VALUES(v, topk_large_v, 6, 0);
    CHECK_IDX(ix, topk_large_i, 6);
    v = oar_topk(oar_cast(x, OAR_F64), 3, -1, false, true, &ix);
    CHECK_VALUES(v, topk_small_v, 6, 0);
    CHECK_IDX(ix, topk_small_i, 6);
    v = oar_topk(transposed(x), 3, 1, true, false, &ix);
    CHECK_VALUES(v, topk_large_v, 6, 0);
    CHECK_IDX(ix, topk_large_i, 6);
    /* along dim 0, ints */
    CHECK_VALUES(oar_topk(tens(topk_x, OAR_I32, 2, SHAPE(2, 6)), 1, 0, true, true, NULL),
                 ((double[]){4, 6, 7, 2, 2, 3}), 6, 0);
    v = oar_topk(x, 0, 1, true, true, &ix);
    CHECK(v && oar_tensor_numel(v) == 0 && oar_tensor_numel(ix) == 0);
    CHECK_FAILS(oar_topk(x, 7, 1, true, true, &ix), "out of range");
    CHECK(ix == NULL);
    CHECK_FAILS(oar_topk(x, -1, 1, true, true, NULL), "out of range");
    oar_pool_pop(p);
}

/* Lines long enough for the selections (k <= n/4: insertion up to k 16,
 * the heap above), with many ties and NaNs, both directions, a strided
 * input and f64/i32: every result checked
 * against a plain O(n k) selection written here (best value first, ties to
 * the lower position, NaN largest). */
static bool topk_before(double a, int64_t ia, double b, int64_t ib, bool largest) {
    bool an = a != a, bn = b != b;
    if (an != bn) return largest ? an : bn;
    if (!an && a != b) return largest ? a > b : a < b;
    return ia < ib;
}

static void test_topk_long_lines(void) {
    oar_pool *p = oar_pool_push();
    enum { R = 5, L = 257 };
    /* x: the lines (NaN in the float copy only); xt: the same, transposed in
     * memory, read back through a transposed view (strided lines) */
    double *x = malloc(R * L * sizeof *x), *xi = malloc(R * L * sizeof *xi);
    double *xt = malloc(R * L * sizeof *xt), *xti = malloc(R * L * sizeof *xti);
    uint64_t seed = 12345;
    for (int64_t r = 0; r < R; r++)
        for (int64_t i = 0; i < L; i++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            int64_t u = (int64_t)(seed >> 33) % 40; /* 40 values: ties everywhere */
            x[r * L + i] = xt[i * R + r] = u == 0 ? NAN : (double)(u - 20);
            xi[r * L + i] = xti[i * R + r] = (double)(u - 20);
        }
    const oar_dtype dts[3] = {OAR_F32, OAR_F64, OAR_I32};
    const int64_t ks[5] = {1, 5, 16, 17, 64};
    int bad = 0, checked = 0;
    double *got = malloc(R * 64 * sizeof *got);
    int64_t *gi = malloc(R * 64 * sizeof *gi);
    for (int d = 0; d < 3; d++)
        for (int kk = 0; kk < 5; kk++)
            for (int largest = 0; largest < 2; largest++)
                for (int strided = 0; strided < 2; strided++) {
                    const int64_t k = ks[kk];
                    const double *want = dts[d] == OAR_I32 ? xi : x;
                    const double *data = dts[d] == OAR_I32 ? (strided ? xti : xi) : (strided ? xt : x);
                    oar_tensor *src = strided ? oar_transpose(tens(data, dts[d], 2, SHAPE(L, R)), 0, 1)
                                              : tens(data, dts[d], 2, SHAPE(R, L));
                    oar_tensor *ix = NULL, *v = oar_topk(src, k, 1, largest, true, &ix);
                    CHECK(v && oar_tensor_to_host(oar_cast(v, OAR_F64), got, R * k * sizeof *got) == 0);
                    CHECK(ix && oar_tensor_to_host(ix, gi, R * k * sizeof *gi) == 0);
                    for (int64_t r = 0; r < R; r++) {
                        const double *line = want + r * L;
                        bool used[L] = {false};
                        for (int64_t j = 0; j < k; j++) {
                            int64_t best = -1;
                            for (int64_t i = 0; i < L; i++)
                                if (!used[i] && (best < 0 || topk_before(line[i], i, line[best], best, largest)))
                                    best = i;
                            used[best] = true;
                            double g = got[r * k + j];
                            bool same = (g != g && line[best] != line[best]) || g == line[best];
                            bad += !same || gi[r * k + j] != best;
                            checked++;
                        }
                    }
                }
    CHECK(checked == 3 * 2 * 2 * R * (1 + 5 + 16 + 17 + 64));
    CHECK(bad == 0);
    free(x), free(xi), free(xt), free(xti), free(got), free(gi);
    oar_pool_pop(p);
}

/* f32 topk with k <= 16 (the vector of kept keys on x86-64-v4, sorted
 * insertion elsewhere; each where it runs, any line length): -0
 * ties +0, NaNs of either sign tie each other above +inf, infinities,
 * lines with more NaNs than k, lines shorter than 4k and of one element;
 * values compared by their bits (a -0 stays -0), positions exactly,
 * against the plain selection of topk_before. */
static void topk_small_k_f32(void) {
    oar_pool *p = oar_pool_push();
    const float nneg = -NAN, special[8] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1.0f, -1.0f, 0.0f};
    const int64_t lens[7] = {1, 3, 20, 33, 64, 128, 300}, ks[4] = {1, 3, 16, 16};
    uint64_t seed = 99;
    int bad = 0, checked = 0;
    for (int li = 0; li < 7; li++)
        for (int ki = 0; ki < 4; ki++)
            for (int largest = 0; largest < 2; largest++) {
                const int64_t n = lens[li], R = 3, k = ks[ki] < n ? ks[ki] : n;
                float *x = malloc((size_t)(R * n) * sizeof *x);
                for (int64_t i = 0; i < R * n; i++) {
                    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
                    uint32_t u = (uint32_t)(seed >> 33);
                    /* row 0: specials and small integers; row 1: mostly NaN
                     * (both signs); row 2: spread values */
                    x[i] = i < n ? (u % 3 ? special[u % 8] : (float)(u % 5) - 2.0f)
                         : i < 2 * n ? (u % 4 == 0 ? 0.5f * (float)(u % 7) : (u % 2 ? NAN : nneg))
                                     : (float)(u % 100000) / 997.0f - 50.0f;
                }
                oar_tensor *ix = NULL;
                oar_tensor *v = oar_topk(oar_tensor_from_data(x, OAR_F32, 2, SHAPE(R, n)), k, 1,
                                         largest, true, &ix);
                CHECK(v && ix);
                const float *got = v ? oar_tensor_data(v) : NULL;
                const int64_t *gi = ix ? oar_tensor_data(ix) : NULL;
                for (int64_t r = 0; got && gi && r < R; r++) {
                    const float *line = x + r * n;
                    bool used[300] = {false};
                    for (int64_t j = 0; j < k; j++) {
                        int64_t best = -1;
                        for (int64_t i = 0; i < n; i++)
                            if (!used[i] && (best < 0 || topk_before(line[i], i, line[best], best, largest)))
                                best = i;
                        used[best] = true;
                        bad += gi[r * k + j] != best ||
                               memcmp(&got[r * k + j], &line[best], sizeof(float)) != 0;
                        checked++;
                    }
                }
                free(x);
            }
    CHECK(checked > 0 && bad == 0);
    oar_pool_pop(p);
}

static void test_topk_small_k_f32(void) {
    int was = oari_cpu_topk_vector_use(0);
    topk_small_k_f32();
    oari_cpu_topk_vector_use(1);
    if (oari_cpu_topk_vector_use(1)) topk_small_k_f32(); /* (the CPU has x86-64-v4) */
    else printf("  (no x86-64-v4: the vector of kept keys is not tested here)\n");
    oari_cpu_topk_vector_use(-1);
    CHECK(oari_cpu_topk_vector_use(-1) == was);
}

static void test_masked_fill(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *x = tens(masked_x, OAR_F32, 2, SHAPE(2, 3));
    oar_tensor *m = tens(masked_m, OAR_BOOL, 2, SHAPE(2, 3));
    oar_tensor *r = oar_masked_fill(x, m, -4.25);
    CHECK(r && oar_tensor_dtype(r) == OAR_F32);
    CHECK_VALUES(r, masked_fill, 6, 1e-6);
    double row[3] = {0, 1, 0};
    CHECK_VALUES(oar_masked_fill(x, tens(row, OAR_BOOL, 1, SHAPE(3)), 9), masked_fill_row, 6, 1e-6);
    CHECK_VALUES(oar_masked_fill(tens(masked_x, OAR_F64, 2, SHAPE(2, 3)), m, -4.25), masked_fill, 6,
                 0);
    CHECK_VALUES(oar_masked_fill(transposed(x), transposed(m), -4.25), masked_fill, 6, 1e-6);
    oar_tensor *ri = oar_masked_fill(tens(masked_x, OAR_I32, 2, SHAPE(2, 3)), m, -4.25);
    CHECK(ri && oar_tensor_dtype(ri) == OAR_I32);
    double wi[6];
    for (int i = 0; i < 6; i++)
        wi[i] = masked_m[i] != 0 ? -4 : trunc(masked_x[i]);
    CHECK_VALUES(ri, wi, 6, 0);
    CHECK_FAILS(oar_masked_fill(x, x, 1), "bool");
    CHECK_FAILS(oar_masked_fill(NULL, m, 1), "NULL");
    oar_pool_pop(p);
}

static void test_bad_input(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *x = tens(gather_x, OAR_F32, 2, SHAPE(3, 4));
    int64_t bad[2] = {1, 4}, neg[2] = {0, -1};
    oar_tensor *ib = idx64(bad, 2, SHAPE(1, 2)), *in = idx64(neg, 2, SHAPE(2, 1));
    CHECK_FAILS(oar_gather(x, 1, ib), "out of range");
    CHECK_FAILS(oar_gather(x, 1, ib), "index 4 is out of range for dim 1 of size 4");
    CHECK_FAILS(oar_gather(x, 0, in), "index -1 is out of range for dim 0 of size 3");
    int64_t bad4[4] = {0, 1, 4, 2};
    CHECK_FAILS(oar_gather(x, 1, transposed(idx64(bad4, 2, SHAPE(2, 2)))), "index 4");
    CHECK_FAILS(oar_scatter(x, 1, ib, x), "scatter: index 4 is out of range");
    CHECK_FAILS(oar_scatter_add(x, 0, in, x), "scatter_add: index -1 is out of range");
    CHECK_FAILS(oar_index_select(x, 0, idx64(bad, 1, SHAPE(2))),
                "index_select: index 4 is out of range");
    CHECK_FAILS(oar_index_add(x, 1, idx64(neg, 1, SHAPE(2)), oar_zeros(OAR_F32, 2, SHAPE(3, 2))),
                "index -1 is out of range");
    /* a large index with one bad entry, found across threads */
    enum { M = 70001 };
    int64_t *many = calloc(M, sizeof *many);
    many[M - 5] = 3;
    many[M - 2] = 9;
    CHECK_FAILS(oar_index_select(x, 0, idx64(many, 1, SHAPE(M))),
                "index 3 is out of range for dim 0");
    free(many);
    /* any index is out of range for an empty dim, even when the result is empty */
    int64_t one = 1;
    CHECK_FAILS(oar_index_select(oar_zeros(OAR_F32, 2, SHAPE(0, 0)), 0, idx64(&one, 1, SHAPE(1))),
                "out of range for dim 0 of size 0");
    CHECK_FAILS(oar_scatter(oar_zeros(OAR_F32, 1, SHAPE(0)), 0, idx64(&one, 1, SHAPE(1)),
                            oar_zeros(OAR_F32, 1, SHAPE(1))),
                "out of range");
    CHECK_FAILS(oar_index_add(oar_zeros(OAR_F32, 2, SHAPE(0, 0)), 0, idx64(&one, 1, SHAPE(1)),
                              oar_zeros(OAR_F32, 2, SHAPE(1, 0))),
                "out of range");
    /* index dtype, rank, size */
    CHECK_FAILS(oar_gather(x, 1, oar_zeros(OAR_F32, 2, SHAPE(3, 2))),
                "index must be an int64 or int32");
    CHECK_FAILS(oar_index_select(x, 1, oar_zeros(OAR_F64, 1, SHAPE(2))), "index must be an int64");
    CHECK_FAILS(oar_scatter(x, 1, oar_zeros(OAR_BOOL, 2, SHAPE(3, 2)), x), "index must be");
    CHECK_FAILS(oar_gather(x, 1, oar_zeros(OAR_I64, 1, SHAPE(3))), "same rank");
    CHECK_FAILS(oar_gather(x, 1, oar_zeros(OAR_I64, 2, SHAPE(4, 1))), "larger than the input");
    CHECK_FAILS(
        oar_scatter(x, 1, oar_zeros(OAR_I64, 2, SHAPE(3, 2)), oar_zeros(OAR_F32, 2, SHAPE(3, 1))),
        "at least as large");
    CHECK_FAILS(oar_index_select(x, 0, oar_zeros(OAR_I64, 2, SHAPE(1, 1))), "0-d or 1-d");
    CHECK_FAILS(
        oar_index_add(x, 0, oar_zeros(OAR_I64, 1, SHAPE(2)), oar_zeros(OAR_F32, 2, SHAPE(3, 4))),
        "must match the input");
    /* dims */
    CHECK_FAILS(oar_gather(x, 2, oar_zeros(OAR_I64, 2, SHAPE(1, 1))), "dim 2 is out of range");
    CHECK_FAILS(oar_sort(x, -3, false, NULL), "dim -3 is out of range");
    CHECK_FAILS(oar_topk(x, 1, 5, true, true, NULL), "out of range");
    /* sort of complex */
    CHECK_FAILS(oar_sort(oar_zeros(OAR_C64, 1, SHAPE(3)), 0, false, NULL), "no order");
    /* NULL inputs keep the first message */
    CHECK_FAILS(oar_gather(NULL, 0, ib), "NULL");
    CHECK_FAILS(oar_scatter(x, 0, NULL, x), "NULL");
    CHECK_FAILS(oar_index_select(x, 0, NULL), "NULL");
    CHECK_FAILS(oar_one_hot(NULL, 3), "NULL");
    CHECK_FAILS(oar_sort(NULL, 0, false, NULL), "NULL");
    CHECK_FAILS(oar_topk(NULL, 1, 0, true, true, NULL), "NULL");
    oar_clear_error();
    CHECK(oar_gather(oar_gather(x, 1, ib), 0, ib) == NULL && strstr(oar_last_error(), "index 4"));
    oar_pool_pop(p);
}

/* ---- gradients: central differences in f64, first and second order ---------
 * L = sum(w * y + y * y / 2) with y = f(inputs), so dL/dy = w + y and the
 * second-order check (H v = J^T J v) runs every backward rule backwards. */
typedef oar_tensor *(*op_fn)(oar_tensor *const *in);

static oar_tensor *loss_of(op_fn f, oar_tensor *const *in) {
    oar_tensor *y = f(in);
    if (!y) return NULL;
    int64_t n = oar_tensor_numel(y);
    oar_tensor *w = oar_reshape(oar_sin(oar_arange(1, (double)n + 1, 1, OAR_F64)),
                                oar_tensor_ndim(y), oar_tensor_shape(y));
    oar_tensor *t = oar_add(oar_mul(w, y), oar_mul_scalar(oar_mul(y, y), 0.5));
    return oar_sum(t, 0, NULL, false);
}

/* in[wrt] (f64) replaced by host values v; returns dL/d in[wrt] as host values. */
static int grad_at(op_fn f, oar_tensor *const *in, int n_in, int wrt, const double *v, double *g,
                   int64_t n) {
    oar_pool *p = oar_pool_push();
    oar_tensor *args[4];
    for (int i = 0; i < n_in; i++)
        args[i] = in[i];
    args[wrt] =
        oar_tensor_from_data(v, OAR_F64, oar_tensor_ndim(in[wrt]), oar_tensor_shape(in[wrt]));
    oar_tensor_set_requires_grad(args[wrt], true);
    oar_tensor *L = loss_of(f, args), *gr = NULL;
    int st = L ? oar_grad(1, &L, NULL, 1, &args[wrt], false, false, &gr) : -1;
    if (!st) st = oar_tensor_to_host(gr, g, (size_t)n * sizeof *g);
    oar_pool_pop(p);
    return st;
}

static double loss_at(op_fn f, oar_tensor *const *in, int n_in, int wrt, const double *v) {
    oar_pool *p = oar_pool_push();
    oar_tensor *args[4];
    for (int i = 0; i < n_in; i++)
        args[i] = in[i];
    args[wrt] =
        oar_tensor_from_data(v, OAR_F64, oar_tensor_ndim(in[wrt]), oar_tensor_shape(in[wrt]));
    double r = oar_tensor_item(loss_of(f, args));
    oar_pool_pop(p);
    return r;
}

static void gradcheck(const char *what, op_fn f, int n_in, oar_tensor *const *in, int wrt) {
    oar_pool *p = oar_pool_push();
    int64_t n = oar_tensor_numel(in[wrt]);
    size_t nb = (size_t)n * sizeof(double);
    double *x = malloc(nb), *xp = malloc(nb), *g = malloc(nb), *gp = malloc(nb), *gm = malloc(nb),
           *hv = malloc(nb), *v = malloc(nb);
    const double h = 1e-6;
    int bad = 0;
    CHECK(oar_tensor_to_host(in[wrt], x, nb) == 0);
    /* first order */
    CHECK(grad_at(f, in, n_in, wrt, x, g, n) == 0);
    for (int64_t i = 0; i < n; i++) {
        memcpy(xp, x, nb);
        xp[i] = x[i] + h;
        double lp = loss_at(f, in, n_in, wrt, xp);
        xp[i] = x[i] - h;
        double lm = loss_at(f, in, n_in, wrt, xp);
        double num = (lp - lm) / (2 * h);
        if (!(fabs(num - g[i]) <= 1e-5 * (1 + fabs(num)))) {
            if (bad++ < 3)
                fprintf(stderr, "%s: d/d in%d [%lld]: analytic %.10g, numeric %.10g\n", what, wrt,
                        (long long)i, g[i], num);
        }
    }
    /* second order: H v through the create_graph gradient vs differences of gradients */
    for (int64_t i = 0; i < n; i++)
        v[i] = cos(1.0 + 0.7 * (double)i);
    oar_pool *q = oar_pool_push();
    oar_tensor *args[4];
    for (int i = 0; i < n_in; i++)
        args[i] = in[i];
    args[wrt] =
        oar_tensor_from_data(x, OAR_F64, oar_tensor_ndim(in[wrt]), oar_tensor_shape(in[wrt]));
    oar_tensor_set_requires_grad(args[wrt], true);
    oar_tensor *L = loss_of(f, args), *g1 = NULL, *g2 = NULL;
    int st = L ? oar_grad(1, &L, NULL, 1, &args[wrt], true, false, &g1) : -1;
    oar_tensor *vt =
        oar_tensor_from_data(v, OAR_F64, oar_tensor_ndim(in[wrt]), oar_tensor_shape(in[wrt]));
    oar_tensor *s = st ? NULL : oar_sum(oar_mul(g1, vt), 0, NULL, false);
    st = s ? oar_grad(1, &s, NULL, 1, &args[wrt], false, true, &g2) : -1;
    CHECK(st == 0);
    if (!st && g2)
        CHECK(oar_tensor_to_host(g2, hv, nb) == 0);
    else if (!st)
        memset(hv, 0, nb); /* unused: H v = 0 */
    oar_pool_pop(q);
    for (int64_t i = 0; i < n; i++)
        xp[i] = x[i] + h * v[i];
    CHECK(grad_at(f, in, n_in, wrt, xp, gp, n) == 0);
    for (int64_t i = 0; i < n; i++)
        xp[i] = x[i] - h * v[i];
    CHECK(grad_at(f, in, n_in, wrt, xp, gm, n) == 0);
    for (int64_t i = 0; !st && i < n; i++) {
        double num = (gp[i] - gm[i]) / (2 * h);
        if (!(fabs(num - hv[i]) <= 1e-5 * (1 + fabs(num)))) {
            if (bad++ < 6)
                fprintf(stderr, "%s: H v wrt in%d [%lld]: analytic %.10g, numeric %.10g\n", what,
                        wrt, (long long)i, hv[i], num);
        }
    }
    if (bad) fprintf(stderr, "%s: %d gradient mismatches\n", what, bad);
    CHECK(bad == 0);
    free(x), free(xp), free(g), free(gp), free(gm), free(hv), free(v);
    oar_pool_pop(p);
}

static oar_tensor *f_gather(oar_tensor *const *in) { return oar_gather(in[0], 1, in[1]); }
static oar_tensor *f_scatter(oar_tensor *const *in) { return oar_scatter(in[0], 1, in[1], in[2]); }
static oar_tensor *f_scatter_add(oar_tensor *const *in) {
    return oar_scatter_add(in[0], 0, in[1], in[2]);
}
static oar_tensor *f_index_select(oar_tensor *const *in) {
    return oar_index_select(in[0], 0, in[1]);
}
static oar_tensor *f_index_add(oar_tensor *const *in) {
    return oar_index_add(in[0], 0, in[1], in[2]);
}
static oar_tensor *f_sort(oar_tensor *const *in) { return oar_sort(in[0], 1, true, NULL); }
static oar_tensor *f_sort0(oar_tensor *const *in) { return oar_sort(in[0], 0, false, NULL); }
static oar_tensor *f_topk(oar_tensor *const *in) { return oar_topk(in[0], 2, 1, true, true, NULL); }
static oar_tensor *f_masked_fill(oar_tensor *const *in) {
    return oar_masked_fill(in[0], in[1], 2.5);
}

static void test_gradients(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *x = tens(gather_x, OAR_F64, 2, SHAPE(3, 4));
    /* gather with repeated indices (the gradient accumulates) */
    oar_tensor *g_in[2] = {x, idx64(gather_i1, 2, SHAPE(3, 2))};
    gradcheck("gather", f_gather, 2, g_in, 0);
    /* scatter: distinct indices per line, src larger than the index */
    int64_t si[6] = {0, 3, 1, 2, 1, 0};
    oar_tensor *s_in[3] = {x, idx64(si, 2, SHAPE(2, 3)),
                           tens(scatter_src, OAR_F64, 2, SHAPE(2, 4))};
    gradcheck("scatter", f_scatter, 3, s_in, 0);
    gradcheck("scatter", f_scatter, 3, s_in, 2);
    /* scatter_add with duplicates */
    oar_tensor *a_in[3] = {tens(scatter_add_x, OAR_F64, 2, SHAPE(4, 3)),
                           idx64(scatter_add_i, 2, SHAPE(6, 3)),
                           tens(scatter_add_src, OAR_F64, 2, SHAPE(6, 3))};
    gradcheck("scatter_add", f_scatter_add, 3, a_in, 0);
    gradcheck("scatter_add", f_scatter_add, 3, a_in, 2);
    oar_tensor *i_in[2] = {tens(isel_x, OAR_F64, 2, SHAPE(4, 3)), idx64(isel_i, 1, SHAPE(4))};
    gradcheck("index_select", f_index_select, 2, i_in, 0);
    oar_tensor *ia_in[3] = {tens(iadd_x, OAR_F64, 2, SHAPE(5, 3)), idx64(iadd_i, 1, SHAPE(4)),
                            tens(iadd_src, OAR_F64, 2, SHAPE(4, 3))};
    gradcheck("index_add", f_index_add, 3, ia_in, 0);
    gradcheck("index_add", f_index_add, 3, ia_in, 2);
    /* sort/topk: values without ties */
    gradcheck("sort", f_sort, 1, &x, 0);
    gradcheck("sort dim 0", f_sort0, 1, &x, 0);
    gradcheck("topk", f_topk, 1, &x, 0);
    oar_tensor *m_in[2] = {tens(masked_x, OAR_F64, 2, SHAPE(2, 3)),
                           tens(masked_m, OAR_BOOL, 2, SHAPE(2, 3))};
    gradcheck("masked_fill", f_masked_fill, 2, m_in, 0);
    /* one_hot and the indices outputs are not differentiable */
    oar_tensor *leaf = oar_clone(x), *ix = NULL;
    oar_tensor_set_requires_grad(leaf, true);
    oar_tensor *v = oar_sort(leaf, 1, false, &ix);
    CHECK(v && oar_tensor_requires_grad(v) && !oar_tensor_requires_grad(ix));
    oar_pool_pop(p);
}

int main(void) {
    RUN(test_gather);
    RUN(test_scatter);
    RUN(test_scatter_add);
    RUN(test_index_select);
    RUN(test_index_add);
    RUN(test_one_hot);
    RUN(test_sort);
    RUN(test_topk);
    RUN(test_topk_long_lines);
    RUN(test_topk_small_k_f32);
    RUN(test_masked_fill);
    RUN(test_bad_input);
    RUN(test_gradients);
    return test_summary();
}

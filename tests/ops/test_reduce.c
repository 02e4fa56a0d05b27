/* Reductions and scans: every op against PyTorch values (tests/ref/
 * reduce_ref.h) over dims combinations, dtypes (f64, f32, ints, bool,
 * complex, f16, bf16) and non-contiguous inputs; NaN, empty tensors,
 * accuracy of long f32 sums, large inputs against naive loops, results
 * independent of the thread count, and bad input. */
#include "test.h"

#include "ref/reduce_ref.h"

#ifdef _OPENMP
#include <omp.h>
#endif

static const int64_t shape3[3] = {3, 4, 5};

/* The named input of the reference cases (owned by the current pool). */
static oar_tensor *make_input(const char *src, oar_dtype real_dtype) {
    if (!strcmp(src, "x") || !strcmp(src, "xp")) {
        oar_tensor *x = oar_cast(oar_tensor_from_data(ref_x, OAR_F64, 3, shape3), real_dtype);
        if (!strcmp(src, "x")) return x;
        return oar_permute(x, (const int64_t[]){2, 0, 1}); /* non-contiguous view */
    }
    if (!strcmp(src, "xi")) return oar_cast(oar_tensor_from_data(ref_xi, OAR_F64, 3, shape3), OAR_I32);
    if (!strcmp(src, "xb")) {
        uint8_t b[60];
        for (int i = 0; i < 60; i++) b[i] = ref_xi[i] > 0;
        return oar_tensor_from_data(b, OAR_BOOL, 3, shape3);
    }
    if (!strcmp(src, "xc")) {
        double c[12];
        for (int i = 0; i < 6; i++) c[2 * i] = ref_xc_re[i], c[2 * i + 1] = ref_xc_im[i];
        return oar_tensor_from_data(c, OAR_C128, 2, (const int64_t[]){2, 3});
    }
    if (!strcmp(src, "xh") || !strcmp(src, "xbf")) {
        double v[60];
        for (int i = 0; i < 60; i++) v[i] = ref_x[i] * 10;
        return oar_cast(oar_tensor_from_data(v, OAR_F64, 3, shape3), src[2] == 'f' ? OAR_BF16 : OAR_F16);
    }
    return NULL;
}

static oar_tensor *run_case(const reduce_case *c, oar_tensor *x, bool keepdim) {
    const char *op = c->op;
    int nd = c->ndims;
    const int64_t *d = c->dims;
    if (!strcmp(op, "sum")) return oar_sum(x, nd, d, keepdim);
    if (!strcmp(op, "prod")) return oar_prod(x, nd, d, keepdim);
    if (!strcmp(op, "amax")) return oar_amax(x, nd, d, keepdim);
    if (!strcmp(op, "amin")) return oar_amin(x, nd, d, keepdim);
    if (!strcmp(op, "mean")) return oar_mean(x, nd, d, keepdim);
    /* on the real inputs x/xp the reference tests x > -1.5 (all) and x > 1.5 (any) */
    bool real_src = c->src[0] == 'x' && (c->src[1] == 0 || c->src[1] == 'p');
    if (!strcmp(op, "all")) return oar_all(real_src ? oar_gt(x, oar_scalar(-1.5)) : x, nd, d, keepdim);
    if (!strcmp(op, "any")) return oar_any(real_src ? oar_gt(x, oar_scalar(1.5)) : x, nd, d, keepdim);
    if (!strcmp(op, "var0")) return oar_var(x, nd, d, 0, keepdim);
    if (!strcmp(op, "var1")) return oar_var(x, nd, d, 1, keepdim);
    if (!strcmp(op, "std1")) return oar_std(x, nd, d, 1, keepdim);
    if (!strcmp(op, "logsumexp")) return oar_logsumexp(x, nd, d, keepdim);
    if (!strcmp(op, "norm1")) return oar_norm(x, 1, nd, d, keepdim);
    if (!strcmp(op, "norm2")) return oar_norm(x, 2, nd, d, keepdim);
    if (!strcmp(op, "norminf")) return oar_norm(x, INFINITY, nd, d, keepdim);
    int dim = nd ? (int)d[0] : OAR_DIM_ALL;
    if (!strcmp(op, "argmax")) return oar_argmax(x, dim, keepdim);
    if (!strcmp(op, "argmin")) return oar_argmin(x, dim, keepdim);
    if (!strcmp(op, "cumsum")) return oar_cumsum(x, dim);
    if (!strcmp(op, "cumprod")) return oar_cumprod(x, dim);
    return NULL;
}

/* The dtype PyTorch gives the result. */
static oar_dtype want_dtype(const char *op, oar_dtype in) {
    if (!strncmp(op, "arg", 3)) return OAR_I64;
    if (!strcmp(op, "all") || !strcmp(op, "any")) return OAR_BOOL;
    if ((!strcmp(op, "sum") || !strcmp(op, "prod") || !strncmp(op, "cum", 3)) && oar_dtype_is_integral(in))
        return OAR_I64;
    if (!strncmp(op, "var", 3) || !strncmp(op, "std", 3) || !strncmp(op, "norm", 4))
        return in == OAR_C128 ? OAR_F64 : in == OAR_C64 ? OAR_F32 : in;
    return in;
}

static void check_case(const reduce_case *c, oar_dtype real_dtype, double tol) {
    oar_pool *p = oar_pool_push();
    oar_tensor *x = make_input(c->src, real_dtype);
    oar_tensor *r = run_case(c, x, false);
    if (!r || oar_tensor_numel(r) != c->n || oar_tensor_dtype(r) != want_dtype(c->op, oar_tensor_dtype(x))) {
        test_failed++;
        fprintf(stderr, "%s: %s(%s, ndims %d dims[0] %lld) as %s: %s (numel %lld, dtype %s)\n",
                test_current, c->op, c->src, c->ndims, (long long)c->dims[0],
                oar_dtype_name(real_dtype), r ? "wrong result" : oar_last_error(),
                (long long)oar_tensor_numel(r), r ? oar_dtype_name(oar_tensor_dtype(r)) : "-");
        oar_pool_pop(p);
        return;
    }
    int before = test_failed;
    CHECK_CVALUES(r, c->want, c->want_im, c->n, tol); /* want_im NULL: a real result, or 0 */
    if (test_failed != before)
        fprintf(stderr, "  in case %s(%s, ndims %d, dims %lld %lld) as %s\n", c->op, c->src, c->ndims,
                (long long)c->dims[0], (long long)c->dims[1], oar_dtype_name(real_dtype));
    /* keepdim keeps the reduced dims as 1 with the same values */
    if (strncmp(c->op, "cum", 3)) {
        oar_tensor *rk = run_case(c, x, true);
        int xnd = oar_tensor_ndim(x);
        CHECK(rk && oar_tensor_ndim(rk) == (xnd ? xnd : 0));
        if (rk && c->ndims == 1 && xnd)
            CHECK(oar_tensor_shape(rk)[c->dims[0] < 0 ? c->dims[0] + xnd : c->dims[0]] == 1);
        CHECK_CVALUES(rk, c->want, c->want_im, c->n, tol);
    }
    oar_pool_pop(p);
}

static void test_reference_cases(void) {
    for (int i = 0; i < REF_N_CASES; i++) {
        const reduce_case *c = &ref_cases[i];
        const char *s = c->src;
        if (!strcmp(s, "xh")) check_case(c, OAR_F16, 1.5e-3);
        else if (!strcmp(s, "xbf")) check_case(c, OAR_BF16, 1e-2);
        else check_case(c, OAR_F64, 1e-12);
        /* the same in f32 */
        if (!strcmp(s, "x") || !strcmp(s, "xp")) check_case(c, OAR_F32, 2e-5);
    }
}

static void test_sum_dtypes(void) {
    oar_pool *p = oar_pool_push();
    int64_t n = 4;
    int32_t vi[4] = {INT32_MAX, INT32_MAX, 1, -5};
    oar_tensor *xi = oar_tensor_from_data(vi, OAR_I32, 1, &n);
    oar_tensor *s = oar_sum(xi, 0, NULL, false);
    CHECK(s && oar_tensor_dtype(s) == OAR_I64 && oar_tensor_ndim(s) == 0);
    CHECK_VALUES(s, ((double[]){2.0 * INT32_MAX - 4}), 1, 0); /* no i32 overflow */
    uint8_t vu[4] = {200, 100, 3, 0};
    oar_tensor *su = oar_sum(oar_tensor_from_data(vu, OAR_U8, 1, &n), 0, NULL, false);
    CHECK(su && oar_tensor_dtype(su) == OAR_I64);
    CHECK_VALUES(su, ((double[]){303}), 1, 0);
    CHECK_VALUES(oar_amax(oar_tensor_from_data(vu, OAR_U8, 1, &n), 0, NULL, false), ((double[]){200}), 1, 0);
    CHECK_VALUES(oar_argmin(oar_tensor_from_data(vu, OAR_U8, 1, &n), 0, false), ((double[]){3}), 1, 0);
    /* c64 */
    float vc[4] = {1, 2, -3, 0.5f};
    oar_tensor *c = oar_tensor_from_data(vc, OAR_C64, 1, (const int64_t[]){2});
    oar_tensor *cs = oar_sum(c, 0, NULL, false), *cp = oar_prod(c, 0, NULL, false);
    CHECK(cs && oar_tensor_dtype(cs) == OAR_C64);
    CHECK_CVALUES(cs, ((double[]){-2}), ((double[]){2.5}), 1, 1e-7);
    /* (1+2i)(-3+0.5i) = -3 - 1 + i(0.5 - 6) */
    CHECK_CVALUES(cp, ((double[]){-4}), ((double[]){-5.5}), 1, 1e-7);
    CHECK_VALUES(oar_imag(oar_cumsum(c, 0)), ((double[]){2, 2.5}), 2, 1e-7);
    /* f16/bf16 all/any read the bits: -0 is zero, NaN is not */
    oar_tensor *hv = oar_tensor_from_data((double[]){0, -0.0, 1.5, NAN}, OAR_F64, 2, (const int64_t[]){2, 2});
    for (int k = 0; k < 2; k++) {
        oar_tensor *h = oar_cast(hv, k ? OAR_BF16 : OAR_F16);
        CHECK_VALUES(oar_any(h, 1, (const int64_t[]){1}, false), ((double[]){0, 1}), 2, 0);
        CHECK_VALUES(oar_all(h, 1, (const int64_t[]){1}, false), ((double[]){0, 1}), 2, 0);
        CHECK_VALUES(oar_all(h, 1, (const int64_t[]){0}, false), ((double[]){0, 0}), 2, 0);
    }
    /* bool: amax is any, amin is all; prod gives i64 */
    oar_tensor *b = oar_tensor_from_data((uint8_t[]){1, 0, 1, 1}, OAR_BOOL, 2, (const int64_t[]){2, 2});
    oar_tensor *bm = oar_amin(b, 1, (const int64_t[]){1}, false);
    CHECK(bm && oar_tensor_dtype(bm) == OAR_BOOL);
    CHECK_VALUES(bm, ((double[]){0, 1}), 2, 0);
    CHECK_VALUES(oar_amax(b, 1, (const int64_t[]){0}, false), ((double[]){1, 1}), 2, 0);
    oar_tensor *bp = oar_prod(b, 1, (const int64_t[]){1}, false);
    CHECK(bp && oar_tensor_dtype(bp) == OAR_I64);
    CHECK_VALUES(bp, ((double[]){0, 1}), 2, 0);
    CHECK_VALUES(oar_cumsum(b, 1), ((double[]){1, 1, 1, 2}), 4, 0);
    /* a 0-d input: dim 0 and -1 are allowed and reduce nothing */
    oar_tensor *s0 = oar_scalar_of(2.5, OAR_F64);
    oar_tensor *r0 = oar_sum(s0, 1, (const int64_t[]){-1}, true);
    CHECK(r0 && oar_tensor_ndim(r0) == 0);
    CHECK_VALUES(r0, ((double[]){2.5}), 1, 0);
    CHECK_VALUES(oar_argmax(s0, 0, false), ((double[]){0}), 1, 0);
    CHECK_VALUES(oar_cumprod(s0, 0), ((double[]){2.5}), 1, 0);
    CHECK_VALUES(oar_mean(s0, 0, NULL, false), ((double[]){2.5}), 1, 0);
    oar_pool_pop(p);
}

static void test_max_min_dim(void) {
    oar_pool *p = oar_pool_push();
    double v[6] = {1, 5, 5, -2, 7, -2};
    oar_tensor *x = oar_tensor_from_data(v, OAR_F64, 2, (const int64_t[]){2, 3});
    oar_tensor *idx = NULL;
    oar_tensor *m = oar_max_dim(x, 1, false, &idx);
    CHECK_VALUES(m, ((double[]){5, 7}), 2, 0);
    CHECK(idx && oar_tensor_dtype(idx) == OAR_I64);
    CHECK_VALUES(idx, ((double[]){1, 1}), 2, 0); /* first index of a tie */
    m = oar_min_dim(x, -1, true, &idx);
    CHECK(m && oar_tensor_ndim(m) == 2 && oar_tensor_shape(m)[1] == 1);
    CHECK_VALUES(m, ((double[]){1, -2}), 2, 0);
    CHECK_VALUES(idx, ((double[]){0, 0}), 2, 0);
    CHECK_VALUES(oar_max_dim(x, 0, false, NULL), ((double[]){1, 7, 5}), 3, 0);
    CHECK_FAILS(oar_max_dim(x, 2, false, &idx), "out of range");
    CHECK(idx == NULL);
    oar_pool_pop(p);
}

static void test_nan(void) {
    oar_pool *p = oar_pool_push();
    double v[8] = {1, NAN, 3, NAN, 2, 0, 9, -1};
    oar_tensor *x = oar_tensor_from_data(v, OAR_F64, 2, (const int64_t[]){2, 4});
    CHECK_VALUES(oar_amax(x, 1, (const int64_t[]){1}, false), ((double[]){NAN, 9}), 2, 0);
    CHECK_VALUES(oar_amin(x, 1, (const int64_t[]){1}, false), ((double[]){NAN, -1}), 2, 0);
    CHECK_VALUES(oar_amax(x, 1, (const int64_t[]){0}, false), ((double[]){2, NAN, 9, NAN}), 4, 0);
    CHECK_VALUES(oar_argmax(x, 1, false), ((double[]){1, 2}), 2, 0); /* the first NaN */
    CHECK_VALUES(oar_argmin(x, 1, false), ((double[]){1, 3}), 2, 0);
    CHECK_VALUES(oar_argmax(x, 0, false), ((double[]){1, 0, 1, 0}), 4, 0);
    CHECK_VALUES(oar_argmax(x, OAR_DIM_ALL, false), ((double[]){1}), 1, 0);
    CHECK_VALUES(oar_sum(x, 1, (const int64_t[]){1}, false), ((double[]){NAN, 10}), 2, 0);
    CHECK(oar_tensor_item(oar_all(x, 0, NULL, false)) == 0); /* 0 present; NaN is true */
    CHECK(oar_tensor_item(oar_any(oar_isnan(x), 0, NULL, false)) == 1);
    /* f32 through the vectorised runs: a NaN late in a long run */
    int64_t n = 1000;
    oar_tensor *big = oar_zeros(OAR_F32, 1, &n);
    float *d = oar_tensor_data(big);
    d[997] = NAN;
    d[10] = 5;
    CHECK(isnan(oar_tensor_item(oar_amax(big, 0, NULL, false))));
    CHECK(isnan(oar_tensor_item(oar_amin(big, 0, NULL, false))));
    CHECK(oar_tensor_item(oar_argmax(big, OAR_DIM_ALL, false)) == 997);
    d[997] = 0;
    CHECK(oar_tensor_item(oar_amax(big, 0, NULL, false)) == 5);
    oar_pool_pop(p);
}

static void test_empty(void) {
    oar_pool *p = oar_pool_push();
    int64_t s[2] = {0, 3};
    oar_tensor *e = oar_zeros(OAR_F32, 2, s);
    oar_tensor *r = oar_sum(e, 1, (const int64_t[]){0}, false);
    CHECK(r && oar_tensor_numel(r) == 3);
    CHECK_VALUES(r, ((double[]){0, 0, 0}), 3, 0);
    CHECK_VALUES(oar_prod(e, 1, (const int64_t[]){0}, false), ((double[]){1, 1, 1}), 3, 0);
    CHECK_VALUES(oar_sum(e, 0, NULL, false), ((double[]){0}), 1, 0);
    CHECK_VALUES(oar_mean(e, 1, (const int64_t[]){0}, false), ((double[]){NAN, NAN, NAN}), 3, 0);
    CHECK_VALUES(oar_all(e, 0, NULL, false), ((double[]){1}), 1, 0);
    CHECK_VALUES(oar_any(e, 0, NULL, false), ((double[]){0}), 1, 0);
    CHECK_VALUES(oar_logsumexp(e, 1, (const int64_t[]){0}, false), ((double[]){-INFINITY, -INFINITY, -INFINITY}), 3, 0);
    r = oar_sum(e, 1, (const int64_t[]){1}, true);
    CHECK(r && oar_tensor_ndim(r) == 2 && oar_tensor_shape(r)[0] == 0 && oar_tensor_shape(r)[1] == 1);
    r = oar_amax(e, 1, (const int64_t[]){1}, false); /* kept dim empty: fine */
    CHECK(r && oar_tensor_numel(r) == 0);
    CHECK(oar_tensor_numel(oar_cumsum(e, 0)) == 0);
    CHECK(oar_tensor_numel(oar_argmax(e, 1, false)) == 0);
    CHECK_FAILS(oar_amax(e, 1, (const int64_t[]){0}, false), "size 0");
    CHECK_FAILS(oar_amin(e, 0, NULL, false), "size 0");
    CHECK_FAILS(oar_argmax(e, 0, false), "size 0");
    CHECK_FAILS(oar_argmin(e, OAR_DIM_ALL, false), "empty");
    CHECK_FAILS(oar_max_dim(e, 0, false, NULL), "size 0");
    oar_pool_pop(p);
}

/* f32 sums accumulate in double, pairwise: 1e6 x 0.1f is exact to f32 rounding. */
static void test_accuracy(void) {
    oar_pool *p = oar_pool_push();
    int64_t n = 1000000;
    oar_tensor *x = oar_full(OAR_F32, 1, &n, 0.1);
    double want = 1e6 * (double)0.1f;
    CHECK_NEAR(oar_tensor_item(oar_sum(x, 0, NULL, false)), want, 0.01);
    CHECK_NEAR(oar_tensor_item(oar_mean(x, 0, NULL, false)), (double)0.1f, 1e-8);
    /* leading-dim reduction (outer order) and last-dim (inner order) */
    int64_t s2[2] = {250000, 4};
    oar_tensor *x2 = oar_reshape(x, 2, s2);
    double w4[4] = {want / 4, want / 4, want / 4, want / 4};
    CHECK_VALUES(oar_sum(x2, 1, (const int64_t[]){0}, false), w4, 4, 1e-7);
    oar_tensor *x3 = oar_reshape(x, 2, (const int64_t[]){4, 250000});
    CHECK_VALUES(oar_sum(x3, 1, (const int64_t[]){1}, false), w4, 4, 1e-7);
    /* cumsum accumulates in double too */
    oar_tensor *cs = oar_cumsum(x, 0);
    CHECK_NEAR(((float *)oar_tensor_data(cs))[n - 1], want, 0.01);
    /* f16: the mean is computed in f32 (81920 overflows f16, the mean does not) */
    int64_t m = 8192;
    oar_tensor *h = oar_full(OAR_F16, 1, &m, 10.0);
    CHECK_VALUES(oar_mean(h, 0, NULL, false), ((double[]){10}), 1, 0);
    CHECK(isinf(oar_tensor_item(oar_sum(h, 0, NULL, false)))); /* as torch: inf */
    oar_pool_pop(p);
}

/* Large random inputs against naive double loops: both loop orders, chunked
 * reduced spaces, strided (sliced) views. */
static void test_large(void) {
    oar_pool *p = oar_pool_push();
    oar_manual_seed(7);
    const int64_t R = 300, C = 701;
    oar_tensor *x = oar_randn(OAR_F64, 2, (const int64_t[]){R, C});
    const double *v = oar_tensor_data(x);
    double *col = calloc((size_t)C, sizeof *col), *row = calloc((size_t)R, sizeof *row);
    double *cmax = malloc((size_t)C * sizeof *cmax), total = 0, gmax = -INFINITY;
    int64_t gidx = 0, *cidx = calloc((size_t)C, sizeof *cidx);
    for (int64_t j = 0; j < C; j++) cmax[j] = -INFINITY;
    for (int64_t i = 0; i < R; i++)
        for (int64_t j = 0; j < C; j++) {
            double a = v[i * C + j];
            col[j] += a;
            row[i] += a;
            total += a;
            if (a > cmax[j]) cmax[j] = a, cidx[j] = i;
            if (a > gmax) gmax = a, gidx = i * C + j;
        }
    CHECK_VALUES(oar_sum(x, 1, (const int64_t[]){0}, false), col, C, 1e-12);
    CHECK_VALUES(oar_sum(x, 1, (const int64_t[]){1}, false), row, R, 1e-12);
    CHECK_VALUES(oar_sum(x, 0, NULL, false), &total, 1, 1e-12);
    CHECK_VALUES(oar_amax(x, 1, (const int64_t[]){0}, false), cmax, C, 0);
    CHECK(oar_tensor_item(oar_amax(x, 0, NULL, false)) == gmax);
    CHECK(oar_tensor_item(oar_argmax(x, OAR_DIM_ALL, false)) == (double)gidx);
    double *ci = malloc((size_t)C * sizeof *ci);
    for (int64_t j = 0; j < C; j++) ci[j] = (double)cidx[j];
    CHECK_VALUES(oar_argmax(x, 0, false), ci, C, 0);
    /* transposed: the same sums with dims swapped */
    oar_tensor *xt = oar_transpose(x, 0, 1);
    CHECK(xt && !oar_tensor_is_contiguous(xt));
    CHECK_VALUES(oar_sum(xt, 1, (const int64_t[]){1}, false), col, C, 1e-12);
    CHECK_VALUES(oar_sum(xt, 1, (const int64_t[]){0}, false), row, R, 1e-12);
    CHECK_VALUES(oar_argmax(xt, 1, false), ci, C, 0);
    CHECK(oar_tensor_item(oar_argmax(xt, OAR_DIM_ALL, false)) ==
          (double)((gidx % C) * R + gidx / C)); /* row-major index of the transposed view */
    /* cumsum along both dims: the last element of each line is the sum */
    oar_tensor *c0 = oar_cumsum(x, 0), *c1 = oar_cumsum(xt, 0);
    const double *c0d = oar_tensor_data(c0);
    CHECK_VALUES(oar_slice(c0, 0, R - 1, R, 1), col, C, 1e-12);
    CHECK_VALUES(oar_slice(c1, 0, C - 1, C, 1), row, R, 1e-12);
    CHECK_NEAR(c0d[C + 5], v[5] + v[C + 5], 1e-14);
    /* a strided (sliced) view: every other column */
    oar_tensor *xs = oar_slice(x, 1, 0, C, 2);
    int64_t Cs = (C + 1) / 2;
    double *rs = calloc((size_t)R, sizeof *rs);
    for (int64_t i = 0; i < R; i++)
        for (int64_t j = 0; j < C; j += 2) rs[i] += v[i * C + j];
    CHECK_VALUES(oar_sum(xs, 1, (const int64_t[]){1}, false), rs, R, 1e-12);
    CHECK(oar_tensor_numel(xs) == R * Cs);
    free(col), free(row), free(cmax), free(cidx), free(ci), free(rs);
    oar_pool_pop(p);
}

/* Results are bit-identical for 1 and 2 threads. */
static void test_threads(void) {
#ifdef _OPENMP
    oar_pool *p = oar_pool_push();
    oar_manual_seed(3);
    oar_tensor *x = oar_randn(OAR_F32, 3, (const int64_t[]){64, 50, 300});
    const int64_t dsets[4][2] = {{0, 0}, {2, 2}, {1, 1}, {0, 2}};
    const int nds[4] = {1, 1, 1, 2};
    for (int k = 0; k < 5; k++) {
        float a[19200 * 2], b[19200 * 2];
        oar_tensor *r1, *r2;
        omp_set_num_threads(1);
        r1 = k < 4 ? oar_sum(x, nds[k], dsets[k], false) : oar_sum(x, 0, NULL, false);
        omp_set_num_threads(2);
        r2 = k < 4 ? oar_sum(x, nds[k], dsets[k], false) : oar_sum(x, 0, NULL, false);
        int64_t n = oar_tensor_numel(r1);
        CHECK(n == oar_tensor_numel(r2) && n <= 19200 * 2);
        if (n > 19200 * 2 || n < 0) continue;
        oar_tensor_to_host(r1, a, (size_t)n * 4);
        oar_tensor_to_host(r2, b, (size_t)n * 4);
        CHECK(!memcmp(a, b, (size_t)n * 4));
    }
    oar_pool_pop(p);
#endif
}

static void test_bad_input(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *x = oar_tensor_from_data(ref_x, OAR_F64, 3, shape3);
    CHECK_FAILS(oar_sum(x, 1, (const int64_t[]){3}, false), "out of range");
    CHECK_FAILS(oar_amax(x, 1, (const int64_t[]){-4}, false), "out of range");
    CHECK_FAILS(oar_argmax(x, 5, false), "out of range");
    CHECK_FAILS(oar_cumsum(x, -4), "out of range");
    CHECK_FAILS(oar_sum(x, 2, (const int64_t[]){1, -2}, false), "more than once");
    CHECK_FAILS(oar_mean(x, 2, (const int64_t[]){0, 0}, false), "more than once");
    CHECK_FAILS(oar_sum(x, -1, NULL, false), "bad dims list");
    CHECK_FAILS(oar_sum(x, 9, (const int64_t[]){0, 1, 2, 0, 1, 2, 0, 1, 2}, false), "bad dims list");
    double total = 0;
    for (int i = 0; i < 60; i++) total += ref_x[i];
    oar_tensor *all = oar_sum(x, 2, NULL, false); /* dims NULL: every dim */
    CHECK(all && oar_tensor_ndim(all) == 0);
    CHECK_VALUES(all, &total, 1, 1e-12);
    oar_tensor *xi = oar_cast(x, OAR_I64);
    CHECK_FAILS(oar_mean(xi, 0, NULL, false), "floating");
    CHECK_FAILS(oar_var(xi, 0, NULL, 1, false), "floating");
    CHECK_FAILS(oar_norm(xi, 2, 0, NULL, false), "floating");
    CHECK_FAILS(oar_norm(x, 3, 0, NULL, false), "p must be");
    oar_tensor *xc = oar_cast(x, OAR_C64);
    CHECK_FAILS(oar_amax(xc, 0, NULL, false), "complex");
    CHECK_FAILS(oar_argmin(xc, 0, false), "complex");
    CHECK_FAILS(oar_logsumexp(xc, 0, NULL, false), "complex");
    CHECK_FAILS(oar_sum(NULL, 0, NULL, false), "NULL");
    CHECK_FAILS(oar_cumprod(NULL, 0), "NULL");
    CHECK_FAILS(oar_var(NULL, 0, NULL, 1, false), "NULL");
    /* a NULL input keeps the first error */
    oar_clear_error();
    oar_tensor *bad = oar_sum(x, 1, (const int64_t[]){9}, false);
    CHECK(!bad && !oar_mean(oar_exp(bad), 0, NULL, false) && strstr(oar_last_error(), "sum:"));
    oar_clear_error();
    oar_pool_pop(p);
}


/* ---- gradients: central differences in f64, first and second order ---------- */

typedef oar_tensor *(*unary_fn)(oar_tensor *x);

/* L(x) = sum(f(x) * w) with fixed weights w. */
static oar_tensor *weighted(unary_fn f, oar_tensor *x) {
    oar_tensor *y = f(x);
    if (!y) return NULL;
    int64_t n = oar_tensor_numel(y);
    double *w = malloc((size_t)(n ? n : 1) * sizeof *w);
    for (int64_t i = 0; i < n; i++) w[i] = 0.5 + 0.25 * sin(1.0 + (double)i);
    oar_tensor *wt = oar_tensor_from_data(w, OAR_F64, oar_tensor_ndim(y), oar_tensor_shape(y));
    free(w);
    oar_tensor *yr = oar_dtype_is_complex(oar_tensor_dtype(y)) ? oar_real(y) : y;
    return oar_sum(oar_mul(yr, wt), 0, NULL, false);
}

static double loss_at(unary_fn f, const double *x, int nd, const int64_t *shape) {
    oar_pool *p = oar_pool_push();
    double v = oar_tensor_item(weighted(f, oar_tensor_from_data(x, OAR_F64, nd, shape)));
    oar_pool_pop(p);
    return v;
}

/* The gradient of L at x into g (n values); with v, also d(g . v)/dx into hv. */
static int grad_at(unary_fn f, const double *x, int nd, const int64_t *shape, int64_t n, double *g,
                   const double *v, double *hv) {
    oar_pool *p = oar_pool_push();
    oar_tensor *xt = oar_tensor_from_data(x, OAR_F64, nd, shape);
    oar_tensor_set_requires_grad(xt, true);
    oar_tensor *gx = NULL;
    int st = oar_grad(1, (oar_tensor *[]){weighted(f, xt)}, NULL, 1, &xt, v != NULL, false, &gx);
    if (!st) st = oar_tensor_to_host(oar_contiguous(gx), g, (size_t)n * 8);
    if (!st && v && !oar_tensor_requires_grad(gx)) {
        memset(hv, 0, (size_t)n * 8); /* g does not depend on x (a linear f) */
    } else if (!st && v) {
        oar_tensor *vt = oar_tensor_from_data(v, OAR_F64, nd, shape), *h = NULL;
        oar_tensor *s = oar_sum(oar_mul(gx, vt), 0, NULL, false);
        st = oar_grad(1, &s, NULL, 1, &xt, false, true, &h);
        if (!st && h) st = oar_tensor_to_host(oar_contiguous(h), hv, (size_t)n * 8);
        else if (!st) memset(hv, 0, (size_t)n * 8); /* g does not depend on x */
    }
    oar_pool_pop(p);
    return st;
}

static void check_grad(const char *name, unary_fn f, const double *x0, int nd, const int64_t *shape,
                       bool second) {
    int64_t n = 1;
    for (int i = 0; i < nd; i++) n *= shape[i];
    double x[16], g[16], hv[16], v[16], gp[16], gm[16], tmp[16];
    memcpy(x, x0, (size_t)n * 8);
    for (int64_t i = 0; i < n; i++) v[i] = cos(0.7 * (double)i);
    if (grad_at(f, x, nd, shape, n, g, second ? v : NULL, hv)) {
        test_failed++;
        fprintf(stderr, "%s: grad of %s failed: %s\n", test_current, name, oar_last_error());
        return;
    }
    const double h = 1e-6;
    int before = test_failed;
    for (int64_t i = 0; i < n; i++) {
        x[i] = x0[i] + h;
        double lp = loss_at(f, x, nd, shape);
        if (second) grad_at(f, x, nd, shape, n, gp, NULL, tmp);
        x[i] = x0[i] - h;
        double lm = loss_at(f, x, nd, shape);
        if (second) grad_at(f, x, nd, shape, n, gm, NULL, tmp);
        x[i] = x0[i];
        CHECK_NEAR(g[i], (lp - lm) / (2 * h), 1e-6 * (1 + fabs(g[i])));
        if (second) {
            double d = 0;
            for (int64_t j = 0; j < n; j++) d += (gp[j] - gm[j]) / (2 * h) * v[j];
            CHECK_NEAR(hv[i], d, 1e-5 * (1 + fabs(d)));
        }
    }
    if (test_failed != before) fprintf(stderr, "  in the gradient of %s\n", name);
}

static oar_tensor *f_sum1(oar_tensor *x) { return oar_sum(x, 1, (const int64_t[]){1}, false); }
static oar_tensor *f_sum_sq(oar_tensor *x) { return oar_sum(oar_mul(x, x), 1, (const int64_t[]){0}, true); }
static oar_tensor *f_prod1(oar_tensor *x) { return oar_prod(x, 1, (const int64_t[]){-1}, false); }
static oar_tensor *f_prod_all(oar_tensor *x) { return oar_prod(x, 0, NULL, false); }
static oar_tensor *f_amax1(oar_tensor *x) { return oar_amax(x, 1, (const int64_t[]){1}, false); }
static oar_tensor *f_amin0(oar_tensor *x) { return oar_amin(x, 1, (const int64_t[]){0}, true); }
static oar_tensor *f_cumsum0(oar_tensor *x) { return oar_cumsum(x, 0); }
static oar_tensor *f_cumsum_sq(oar_tensor *x) { return oar_cumsum(oar_mul(x, x), 1); }
static oar_tensor *f_cumprod1(oar_tensor *x) { return oar_cumprod(x, 1); }
static oar_tensor *f_cumprod0(oar_tensor *x) { return oar_cumprod(x, 0); }
static oar_tensor *f_mean(oar_tensor *x) { return oar_mean(x, 1, (const int64_t[]){0}, false); }
static oar_tensor *f_var(oar_tensor *x) { return oar_var(x, 1, (const int64_t[]){1}, 1, false); }
static oar_tensor *f_std(oar_tensor *x) { return oar_std(x, 0, NULL, 0, false); }
static oar_tensor *f_lse(oar_tensor *x) { return oar_logsumexp(x, 1, (const int64_t[]){1}, false); }
static oar_tensor *f_norm1(oar_tensor *x) { return oar_norm(x, 1, 1, (const int64_t[]){0}, false); }
static oar_tensor *f_norm2(oar_tensor *x) { return oar_norm(x, 2, 0, NULL, false); }
static oar_tensor *f_norminf(oar_tensor *x) { return oar_norm(x, INFINITY, 1, (const int64_t[]){1}, false); }
static oar_tensor *f_maxdim(oar_tensor *x) { return oar_max_dim(x, 0, false, NULL); }

static void test_gradients(void) {
    const int64_t s[2] = {3, 4};
    const double x[12] = {0.5, -1.25, 2.0, 0.75, -0.3, 1.1, -2.2, 0.9, 1.7, -0.6, 0.4, -1.4};
    /* zeros: one in row 0, two in row 1, none in row 2 */
    const double xz[12] = {0.5, 0.0, 2.0, 0.75, 0.0, 1.1, 0.0, 0.9, 1.7, -0.6, 0.4, -1.4};
    check_grad("sum", f_sum1, x, 2, s, true);
    check_grad("sum(x*x) keepdim", f_sum_sq, x, 2, s, true);
    check_grad("prod", f_prod1, x, 2, s, true);
    check_grad("prod all", f_prod_all, x, 2, s, true);
    check_grad("prod with zeros", f_prod1, xz, 2, s, false);
    check_grad("amax", f_amax1, x, 2, s, true);
    check_grad("amin keepdim", f_amin0, x, 2, s, true);
    check_grad("cumsum", f_cumsum0, x, 2, s, true);
    check_grad("cumsum(x*x)", f_cumsum_sq, x, 2, s, true);
    check_grad("cumprod", f_cumprod1, x, 2, s, true);
    check_grad("cumprod dim 0", f_cumprod0, x, 2, s, true);
    check_grad("cumprod with zeros", f_cumprod1, xz, 2, s, false);
    check_grad("cumprod dim 0 with zeros", f_cumprod0, xz, 2, s, false);
    check_grad("mean", f_mean, x, 2, s, true);
    check_grad("var", f_var, x, 2, s, true);
    check_grad("std", f_std, x, 2, s, true);
    check_grad("logsumexp", f_lse, x, 2, s, true);
    check_grad("norm1", f_norm1, x, 2, s, false);
    check_grad("norm2", f_norm2, x, 2, s, true);
    check_grad("norminf", f_norminf, x, 2, s, true);
    check_grad("max_dim", f_maxdim, x, 2, s, true);

    /* ties share the gradient of amax evenly; max_dim (through amax) too */
    oar_pool *p = oar_pool_push();
    oar_tensor *t = oar_tensor_from_data((double[]){1, 3, 3, -1}, OAR_F64, 1, (const int64_t[]){4});
    oar_tensor_set_requires_grad(t, true);
    oar_tensor *gt = NULL;
    CHECK(oar_grad(1, (oar_tensor *[]){oar_amax(t, 0, NULL, false)}, NULL, 1, &t, false, false, &gt) == 0);
    CHECK_VALUES(gt, ((double[]){0, 0.5, 0.5, 0}), 4, 1e-15);
    /* f32 gradients keep the dtype */
    oar_tensor *t32 = oar_tensor_from_data((float[]){1, 2, 3, 4}, OAR_F32, 1, (const int64_t[]){4});
    oar_tensor_set_requires_grad(t32, true);
    CHECK(oar_grad(1, (oar_tensor *[]){oar_prod(t32, 0, NULL, false)}, NULL, 1, &t32, false, false, &gt) == 0);
    CHECK(gt && oar_tensor_dtype(gt) == OAR_F32);
    CHECK_VALUES(gt, ((double[]){24, 12, 8, 6}), 4, 1e-6);
    /* complex: d/dz of Re(sum(z)) is 1; of Re(prod) is conj(prod of the others) */
    oar_tensor *z = oar_tensor_from_data((double[]){1, 2, -3, 0.5}, OAR_C128, 1, (const int64_t[]){2});
    oar_tensor_set_requires_grad(z, true);
    CHECK(oar_grad(1, (oar_tensor *[]){oar_real(oar_prod(z, 0, NULL, false))}, NULL, 1, &z, false, false, &gt) == 0);
    CHECK_CVALUES(gt, ((double[]){-3, 1}), ((double[]){-0.5, -2}), 2, 1e-12);
    oar_pool_pop(p);
}

int main(void) {
    RUN(test_reference_cases);
    RUN(test_sum_dtypes);
    RUN(test_max_min_dim);
    RUN(test_nan);
    RUN(test_empty);
    RUN(test_accuracy);
    RUN(test_large);
    RUN(test_threads);
    RUN(test_bad_input);
    RUN(test_gradients);
    return test_summary();
}

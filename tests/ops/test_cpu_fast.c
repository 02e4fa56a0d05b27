/* The CPU fast paths (vector loops, fused row kernels, the x86-64-v3
 * clones): contiguous and strided inputs give the same values, vector-loop
 * tails (sizes 1, 7, 17, 1023) are right against a float64 reference, the
 * vectorized erf is within 2 ulp of erf in double, and complex -> bool
 * casts test both parts. */
#include "test.h"

#include <stdint.h>

static const int64_t sizes[] = {1, 7, 17, 1023};

/* max |a - b| over all elements (real parts), or INFINITY on a failure or a
 * shape mismatch; NaN at the same place counts as equal. */
static double max_diff(oar_tensor *a, oar_tensor *b) {
    if (!a || !b || oar_tensor_numel(a) != oar_tensor_numel(b)) return INFINITY;
    double *u = test_values(a), *v = test_values(b), m = u && v ? 0 : INFINITY;
    for (int64_t i = 0; u && v && i < oar_tensor_numel(a); i++) {
        if (isnan(u[i]) && isnan(v[i])) continue;
        double d = u[i] == v[i] ? 0 : fabs(u[i] - v[i]) / (1 + fabs(v[i]));
        if (!(d <= m)) m = d;
    }
    free(u);
    free(v);
    return m;
}

/* A random f32 tensor [rows, n] scaled by `scale`, and the same values as a
 * strided view (every other column of a [rows, 2n] tensor). */
static void make_pair(int64_t rows, int64_t n, double scale, oar_tensor **contig,
                      oar_tensor **strided) {
    int64_t wide[2] = {rows, 2 * n};
    oar_tensor *w = oar_mul_scalar(oar_randn(OAR_F32, 2, wide), scale);
    *strided = oar_slice(w, 1, 0, 2 * n, 2);
    *contig = oar_contiguous(*strided);
}

static oar_tensor *f64(oar_tensor *x) { return oar_cast(x, OAR_F64); }
static oar_tensor *f32(oar_tensor *x) { return oar_cast(x, OAR_F32); }

typedef oar_tensor *(*unary_fn)(oar_tensor *);
static oar_tensor *u_gelu(oar_tensor *x) { return oar_gelu(x, false); }
static oar_tensor *u_gelu_tanh(oar_tensor *x) { return oar_gelu(x, true); }

static void test_unary_paths(void) {
    static const struct { const char *name; unary_fn fn; double scale, tol; } ops[] = {
        {"exp", oar_exp, 8, 3e-7},     {"gelu", u_gelu, 4, 5e-7},
        {"gelu_tanh", u_gelu_tanh, 4, 5e-7}, {"erf", oar_erf, 2, 3e-7},
        {"sigmoid", oar_sigmoid, 8, 3e-7}, {"silu", oar_silu, 8, 5e-7},
        {"relu", oar_relu, 1, 0},      {"tanh", oar_tanh, 3, 3e-7}};
    for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++)
        for (size_t s = 0; s < 4; s++) {
            oar_pool *p = oar_pool_push();
            oar_tensor *xc, *xs;
            make_pair(2, sizes[s], ops[k].scale, &xc, &xs);
            oar_tensor *yc = ops[k].fn(xc), *ys = ops[k].fn(xs);
            double d_same = max_diff(yc, ys);
            double d_ref = max_diff(yc, f32(ops[k].fn(f64(xc))));
            CHECK(d_same == 0);
            CHECK(d_ref <= ops[k].tol);
            if (d_same != 0 || d_ref > ops[k].tol)
                fprintf(stderr, "  %s n=%lld: strided diff %g, ref diff %g\n", ops[k].name,
                        (long long)sizes[s], d_same, d_ref);
            oar_pool_pop(p);
        }
}

static void test_binary_paths(void) {
    for (size_t s = 0; s < 4; s++) {
        oar_pool *p = oar_pool_push();
        int64_t n = sizes[s];
        oar_tensor *ac, *as, *bc, *bs, *rc, *rs;
        make_pair(3, n, 1, &ac, &as);
        make_pair(3, n, 1, &bc, &bs);
        make_pair(1, n, 1, &rc, &rs);
        CHECK(max_diff(oar_add(ac, bc), oar_add(as, bs)) == 0);
        CHECK(max_diff(oar_add(ac, bc), f32(oar_add(f64(ac), f64(bc)))) == 0);
        /* a row broadcast over the rows, and a scalar-like column */
        oar_tensor *row = oar_reshape(rc, 1, (int64_t[]){n});
        CHECK(max_diff(oar_mul(ac, row), oar_mul(as, rs)) == 0);
        CHECK(max_diff(oar_mul(ac, row), f32(oar_mul(f64(ac), f64(row)))) == 0);
        oar_tensor *col = oar_slice(ac, 1, 0, 1, 1); /* [3, 1] */
        CHECK(max_diff(oar_mul(col, ac), f32(oar_mul(f64(col), f64(ac)))) == 0);
        CHECK(max_diff(oar_sub(ac, col), f32(oar_sub(f64(ac), f64(col)))) == 0);
        oar_pool_pop(p);
    }
}

/* An f32 sum over dim of x (float64 here) against cpu_reduce.c's bound:
 * within 2^-23 of the sum of |x| plus an ulp of the exact sum. */
static bool sum_within_bound(oar_tensor *got, oar_tensor *xd, int64_t dim) {
    oar_tensor *want = oar_sum(xd, 1, &dim, false), *mag = oar_sum(oar_abs(xd), 1, &dim, false);
    if (!got || !want || !mag || oar_tensor_numel(got) != oar_tensor_numel(want)) return false;
    double *g = test_values(got), *w = test_values(want), *m = test_values(mag);
    bool ok = g && w && m;
    for (int64_t i = 0; ok && i < oar_tensor_numel(got); i++) {
        double ulp = fabs(nextafterf((float)w[i], INFINITY) - (float)w[i]);
        ok = fabs(g[i] - w[i]) <= 0x1p-23 * m[i] + ulp;
    }
    free(g);
    free(w);
    free(m);
    return ok;
}

static void test_reduction_paths(void) {
    for (size_t s = 0; s < 4; s++) {
        oar_pool *p = oar_pool_push();
        int64_t n = sizes[s], last = -1, first = 0;
        oar_tensor *xc, *xs;
        make_pair(5, n, 1, &xc, &xs);
        oar_tensor *xd = f64(xc);
        /* (the contiguous and strided sums may differ in the last bits: the
         * column loop groups rows in float, the strided row loop does not) */
        CHECK(sum_within_bound(oar_sum(xc, 1, &last, false), xd, last));
        CHECK(sum_within_bound(oar_sum(xs, 1, &last, false), xd, last));
        CHECK(sum_within_bound(oar_sum(xc, 1, &first, false), xd, first));
        CHECK(sum_within_bound(oar_sum(xs, 1, &first, false), xd, first));
        CHECK(max_diff(oar_mean(xc, 1, &last, false), f32(oar_mean(xd, 1, &last, false))) <= 1e-7);
        CHECK(max_diff(oar_amax(xc, 1, &last, false), oar_amax(xs, 1, &last, false)) == 0);
        CHECK(max_diff(oar_amax(xc, 1, &last, false), f32(oar_amax(xd, 1, &last, false))) == 0);
        CHECK(max_diff(oar_amin(xc, 1, &first, false), f32(oar_amin(xd, 1, &first, false))) == 0);
        oar_pool_pop(p);
    }
    /* a reduction over the first dim with few rows and many columns is split
     * over threads by column blocks: same values as float64 */
    oar_pool *p = oar_pool_push();
    int64_t shape[2] = {3, 4100}, first = 0;
    oar_tensor *x = oar_randn(OAR_F32, 2, shape);
    CHECK(max_diff(oar_sum(x, 1, &first, false), f32(oar_sum(f64(x), 1, &first, false))) <= 1e-7);
    oar_pool_pop(p);
}

static void test_softmax_norm_paths(void) {
    for (size_t s = 0; s < 4; s++) {
        oar_pool *p = oar_pool_push();
        int64_t n = sizes[s];
        oar_tensor *xc, *xs;
        make_pair(4, n, 5, &xc, &xs);
        CHECK(max_diff(oar_softmax(xc, 1), oar_softmax(xs, 1)) <= 2e-7);
        CHECK(max_diff(oar_softmax(xc, 1), f32(oar_softmax(f64(xc), 1))) <= 2e-7);
        CHECK(max_diff(oar_log_softmax(xc, 1), oar_log_softmax(xs, 1)) <= 2e-7);
        CHECK(max_diff(oar_log_softmax(xc, 1), f32(oar_log_softmax(f64(xc), 1))) <= 2e-7);
        oar_tensor *wc, *ws, *bc, *bs;
        make_pair(1, n, 1, &wc, &ws);
        make_pair(1, n, 1, &bc, &bs);
        oar_tensor *w = oar_reshape(wc, 1, (int64_t[]){n}), *b = oar_reshape(bc, 1, (int64_t[]){n});
        oar_tensor *yc = oar_layer_norm(xc, 1, w, b, 1e-5);
        CHECK(max_diff(yc, oar_layer_norm(xs, 1, oar_reshape(ws, 1, (int64_t[]){n}),
                                          oar_reshape(bs, 1, (int64_t[]){n}), 1e-5)) <= 1e-6);
        CHECK(max_diff(yc, f32(oar_layer_norm(f64(xc), 1, f64(w), f64(b), 1e-5))) <= 1e-6);
        /* a mean far from 0 (1000 + N(0, 1)) keeps its accuracy */
        oar_tensor *xf = oar_add_scalar(xc, 1000);
        CHECK(max_diff(oar_layer_norm(xf, 1, w, b, 1e-5),
                       f32(oar_layer_norm(f64(xf), 1, f64(w), f64(b), 1e-5))) <= 1e-6);
        CHECK(max_diff(oar_layer_norm(xc, 1, NULL, b, 1e-5),
                       f32(oar_layer_norm(f64(xc), 1, NULL, f64(b), 1e-5))) <= 1e-6);
        oar_pool_pop(p);
    }
}

/* erf in f32 (a vectorized rational form): within 2 ulp of erf in double
 * rounded to float, over [-6, 6], tiny arguments and the special values. */
static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}
static void test_erf_f32_accuracy(void) {
    oar_pool *p = oar_pool_push();
    int64_t n = 1 << 20;
    float *v = malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = -6.0f + 12.0f * (float)i / (float)n;
    float special[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e-30f, -1e-38f, 0.9f, -0.9f,
                       3.99f, 4.0f, 1e-45f};
    for (int i = 0; i < 12; i++) v[i] = special[i];
    oar_tensor *e = oar_erf(oar_tensor_from_data(v, OAR_F32, 1, &n));
    const float *ev = e ? oar_tensor_data(e) : NULL;
    int64_t worst = 0, bad = 0;
    for (int64_t i = 0; ev && i < n; i++) {
        float want = (float)erf((double)v[i]);
        if (isnan(want)) {
            bad += !isnan(ev[i]);
            continue;
        }
        if (signbit(want) != signbit(ev[i])) bad++;
        int64_t d = llabs((int64_t)f32_bits(ev[i]) - (int64_t)f32_bits(want));
        if (d > worst) worst = d;
    }
    CHECK(ev && worst <= 2 && bad == 0);
    if (worst > 2 || bad) fprintf(stderr, "erf f32: worst %lld ulp, %lld bad\n", (long long)worst, (long long)bad);
    free(v);
    oar_pool_pop(p);
}

/* tanh in f32 (Cephes' polynomial below 0.625, exp beyond): within 2 ulp
 * of tanh in double rounded to float, over [-12, 12] and special values. */
static void test_tanh_f32_accuracy(void) {
    oar_pool *p = oar_pool_push();
    int64_t n = 1 << 20;
    float *v = malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = -12.0f + 24.0f * (float)i / (float)n;
    float special[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e-30f, -1e-38f, 0.625f, -0.625f,
                       0.62499994f, 20.0f, 1e-45f, 100.0f, -100.0f};
    for (int i = 0; i < 14; i++) v[i] = special[i];
    oar_tensor *e = oar_tanh(oar_tensor_from_data(v, OAR_F32, 1, &n));
    const float *ev = e ? oar_tensor_data(e) : NULL;
    int64_t worst = 0, bad = 0;
    for (int64_t i = 0; ev && i < n; i++) {
        float want = (float)tanh((double)v[i]);
        if (isnan(want)) {
            bad += !isnan(ev[i]);
            continue;
        }
        if (signbit(want) != signbit(ev[i])) bad++;
        int64_t d = llabs((int64_t)f32_bits(ev[i]) - (int64_t)f32_bits(want));
        if (d > worst) worst = d;
    }
    CHECK(ev && worst <= 2 && bad == 0);
    if (worst > 2 || bad) fprintf(stderr, "tanh f32: worst %lld ulp, %lld bad\n", (long long)worst, (long long)bad);
    free(v);
    oar_pool_pop(p);
}

/* complex -> bool is z != 0: a nonzero imaginary part alone makes true. */
/* Contiguous f32 softmax rows of up to 512 run through each step in
 * groups of eight: a row gives the same bits in a group as alone (a
 * one-row call), whatever the group's size or the other rows hold (a NaN,
 * a row of -inf); the values are right against float64. */
static void test_softmax_row_groups(void) {
    static const int64_t shapes[][2] = {{37, 64}, {9, 17}, {11, 512}, {3, 513}, {70, 5}, {8, 16}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        oar_pool *p = oar_pool_push();
        const int64_t rows = shapes[s][0], n = shapes[s][1];
        oar_tensor *x = oar_mul_scalar(oar_randn(OAR_F32, 2, shapes[s]), 6);
        float *xv = x ? oar_tensor_data(x) : NULL;
        CHECK(xv != NULL);
        if (!xv) { oar_pool_pop(p); continue; }
        xv[2 * n + n / 2] = NAN;                           /* row 2: NaN */
        for (int64_t j = 0; j < n; j++) xv[n + j] = -INFINITY; /* row 1: all -inf */
        for (int lg = 0; lg < 2; lg++) {
            oar_tensor *y = lg ? oar_log_softmax(x, 1) : oar_softmax(x, 1);
            CHECK(y != NULL);
            if (!y) continue;
            const float *yv = oar_tensor_data(y);
            bool same = true;
            for (int64_t r = 0; r < rows; r++) {
                oar_tensor *row = oar_slice(x, 0, r, r + 1, 1);
                oar_tensor *yr = lg ? oar_log_softmax(row, 1) : oar_softmax(row, 1);
                const float *w = yr ? oar_tensor_data(yr) : NULL;
                for (int64_t j = 0; w && j < n; j++)
                    same = same && memcmp(&w[j], &yv[r * n + j], sizeof(float)) == 0;
                if (!w) same = false;
            }
            CHECK(same);
            for (int64_t j = 0; j < n; j++) CHECK(isnan(yv[n + j]) && isnan(yv[2 * n + j]));
            oar_tensor *rest = oar_slice(x, 0, 3, rows, 1);
            oar_tensor *yd = lg ? oar_log_softmax(f64(rest), 1) : oar_softmax(f64(rest), 1);
            CHECK(max_diff(oar_slice(y, 0, 3, rows, 1), f32(yd)) <= 2e-7);
        }
        oar_pool_pop(p);
    }
}

static void test_complex_to_bool(void) {
    oar_pool *p = oar_pool_push();
    const double z[] = {0, 0, 0, 1, 2, 0, 0, -0.5, NAN, 0, -0.0, 0.0};
    int64_t n = 6;
    oar_tensor *c128 = oar_tensor_from_data(z, OAR_C128, 1, &n);
    const double want[] = {0, 1, 1, 1, 1, 0};
    test_expect_values("c128 -> bool", oar_cast(c128, OAR_BOOL), want, n, 0, __FILE__, __LINE__);
    test_expect_values("c64 -> bool", oar_cast(oar_cast(c128, OAR_C64), OAR_BOOL), want, n, 0,
                       __FILE__, __LINE__);
    /* and a strided complex input */
    oar_tensor *st = oar_slice(c128, 0, 1, 6, 2); /* 0+1i, 0-0.5i, -0+0i */
    test_expect_values("strided c128 -> bool", oar_cast(st, OAR_BOOL), (const double[]){1, 1, 0}, 3,
                       0, __FILE__, __LINE__);
    /* complex -> real still keeps the real part */
    test_expect_values("c128 -> f64", oar_cast(c128, OAR_F64), (const double[]){0, 0, 2, 0, NAN, -0.0},
                       n, 0, __FILE__, __LINE__);
    oar_pool_pop(p);
}

int main(void) {
    oar_manual_seed(3);
    RUN(test_unary_paths);
    RUN(test_binary_paths);
    RUN(test_reduction_paths);
    RUN(test_softmax_norm_paths);
    RUN(test_softmax_row_groups);
    RUN(test_erf_f32_accuracy);
    RUN(test_tanh_f32_accuracy);
    RUN(test_complex_to_bool);
    return test_summary();
}

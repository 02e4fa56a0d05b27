/* Binary elementwise ops and where: values against PyTorch
 * (tests/ref/elementwise_ref.h) for every op and dtype class, mixed dtypes,
 * type promotion with 0-d tensors and oar_scalar, broadcasting, strided
 * and large inputs, empty tensors, defined integer division by zero, bad
 * input, and each gradient rule against central differences. */
#include "test.h"

#include "ops/op.h"
#include "ew_rows.h"
#include "ref/elementwise_ref.h"

/* ---- helpers ---- */

static oar_tensor *make(oar_dtype dtype, const double *re, const double *im, int64_t n) {
    if (im) {
        double *z = malloc(sizeof(double) * 2 * (size_t)(n ? n : 1));
        for (int64_t i = 0; i < n; i++) z[2 * i] = re[i], z[2 * i + 1] = im[i];
        oar_tensor *t = oar_cast(oar_tensor_from_data(z, OAR_C128, 1, &n), dtype);
        free(z);
        return t;
    }
    return oar_cast(oar_tensor_from_data(re, OAR_F64, 1, &n), dtype);
}

static oar_tensor *from2(oar_dtype dtype, int64_t r, int64_t c, const double *v) {
    int64_t shape[2] = {r, c};
    return oar_cast(oar_tensor_from_data(v, OAR_F64, 2, shape), dtype);
}

static double tol_for(oar_dtype d) {
    switch (d) {
    case OAR_F16: return 2e-3;
    case OAR_BF16: return 1e-2;
    case OAR_F32: return 2e-6;
    case OAR_C64: return 2e-5;
    case OAR_F64: case OAR_C128: return 1e-12;
    default: return 0;
    }
}

static void expect(const char *what, oar_tensor *out, int out_dtype, const double *re,
                   const double *im, int64_t n) {
    if (!out) {
        test_failed++;
        fprintf(stderr, "%s: failed: %s\n", what, oar_last_error());
        return;
    }
    if (oar_tensor_dtype(out) != out_dtype) {
        test_failed++;
        fprintf(stderr, "%s: dtype %s, expected %s\n", what, oar_dtype_name(oar_tensor_dtype(out)),
                oar_dtype_name((oar_dtype)out_dtype));
        return;
    }
    double tol = tol_for((oar_dtype)out_dtype);
    if (im) {
        test_expect_values(what, oar_real(out), re, n, tol, __FILE__, __LINE__);
        test_expect_values(what, oar_imag(out), im, n, tol, __FILE__, __LINE__);
    } else {
        test_expect_values(what, out, re, n, tol, __FILE__, __LINE__);
    }
}

typedef oar_tensor *(*binary_fn)(oar_tensor *, oar_tensor *);

/* ---- forward values against PyTorch: every binary row of the elementwise
 * table (tests/ew_rows.h) has cases, and each case names a row ---- */

static void test_reference_values(void) {
    int n_cases = (int)(sizeof ew_binary_cases / sizeof ew_binary_cases[0]);
    bool seen[EW_N_TEST_ROWS];
    memset(seen, 0, sizeof seen);
    for (int k = 0; k < n_cases; k++) {
        const ew_case *c = &ew_binary_cases[k];
        const ew_test_row *r = ew_test_row_of(c->op);
        if (!r || r->n_in != 2) fprintf(stderr, "case %d: %s is no binary row of the table\n", k, c->op);
        CHECK(r && r->n_in == 2);
        if (!r || r->n_in != 2) continue;
        seen[r - ew_test_rows] = true;
        oar_pool *p = oar_pool_push();
        char what[96];
        snprintf(what, sizeof what, "%s(%s, %s) [case %d]", c->op, oar_dtype_name((oar_dtype)c->a_dtype),
                 oar_dtype_name((oar_dtype)c->b_dtype), k);
        oar_tensor *a = make((oar_dtype)c->a_dtype, c->a_re, c->a_im, c->n);
        oar_tensor *b = make((oar_dtype)c->b_dtype, c->b_re, c->b_im, c->n);
        expect(what, oari_call2((oari_op)oari_op_lookup(c->op), a, b, NULL), c->out_dtype, c->want_re,
               c->want_im, c->n);
        oar_pool_pop(p);
    }
    for (int i = 0; i < EW_N_TEST_ROWS; i++) {
        if (ew_test_rows[i].n_in != 2) continue;
        if (!seen[i])
            fprintf(stderr, "no reference case for %s: add its PyTorch line to tests/ref/gen_elementwise.py\n",
                    ew_test_rows[i].op);
        CHECK(seen[i]);
    }
    /* the public functions are the table's calls */
    oar_pool *p = oar_pool_push();
    oar_tensor *a = oar_scalar_of(3, OAR_F32), *b = oar_scalar_of(-2, OAR_F32);
    CHECK_NEAR(oar_tensor_item(oar_sub(a, b)), 5, 0);
    CHECK_NEAR(oar_tensor_item(oar_floor_div(a, b)), -2, 0);
    oar_pool_pop(p);
}

/* ---- promotion with 0-d tensors and Python-like scalars ---- */

static void test_promotion(void) {
    oar_pool *p = oar_pool_push();
    int64_t n = 3;
    oar_tensor *i64 = make(OAR_I64, (double[]){1, -2, 3}, NULL, n);
    oar_tensor *f16 = make(OAR_F16, (double[]){0.5, 1, -2}, NULL, n);
    oar_tensor *u8 = make(OAR_U8, (double[]){1, 2, 250}, NULL, n);
    oar_tensor *f32 = make(OAR_F32, (double[]){1, 2, 3}, NULL, n);

    oar_tensor *r = oar_mul(i64, oar_scalar(2.5)); /* i64 tensor * 2.5 -> f32 */
    CHECK(r && oar_tensor_dtype(r) == OAR_F32);
    CHECK_VALUES(r, ((double[]){2.5, -5, 7.5}), 3, 0);
    r = oar_mul_scalar(i64, 2.5);
    CHECK(r && oar_tensor_dtype(r) == OAR_F32);
    r = oar_add(f16, oar_scalar(1)); /* stays f16 */
    CHECK(r && oar_tensor_dtype(r) == OAR_F16);
    CHECK_VALUES(r, ((double[]){1.5, 2, -1}), 3, 0);
    r = oar_add_scalar(f16, 0.25);
    CHECK(r && oar_tensor_dtype(r) == OAR_F16);
    CHECK_VALUES(r, ((double[]){0.75, 1.25, -1.75}), 3, 0);
    r = oar_mul_scalar(i64, 3); /* int scalar keeps i64 */
    CHECK(r && oar_tensor_dtype(r) == OAR_I64);
    CHECK_VALUES(r, ((double[]){3, -6, 9}), 3, 0);
    /* a 0-d tensor does not raise a dimensioned tensor's dtype in its category */
    r = oar_add(f32, oar_scalar_of(1, OAR_F64));
    CHECK(r && oar_tensor_dtype(r) == OAR_F32);
    r = oar_add(u8, oar_scalar_of(10, OAR_I64)); /* u8 wraps: 250 + 10 = 4 */
    CHECK(r && oar_tensor_dtype(r) == OAR_U8);
    CHECK_VALUES(r, ((double[]){11, 12, 4}), 3, 0);
    /* ... but a higher category does: i64 tensor + 0-d f64 -> f64 (0-d's dtype) */
    r = oar_add(i64, oar_scalar_of(0.5, OAR_F64));
    CHECK(r && oar_tensor_dtype(r) == OAR_F64);
    /* 0-d with 0-d: ordinary promotion */
    r = oar_add(oar_scalar_of(1, OAR_I32), oar_scalar_of(1, OAR_F64));
    CHECK(r && oar_tensor_dtype(r) == OAR_F64 && oar_tensor_ndim(r) == 0 && oar_tensor_item(r) == 2);
    /* true division of integers is f32; comparisons give bool */
    r = oar_div(i64, oar_scalar(2));
    CHECK(r && oar_tensor_dtype(r) == OAR_F32);
    CHECK_VALUES(r, ((double[]){0.5, -1, 1.5}), 3, 0);
    r = oar_div_scalar(f16, 4);
    CHECK(r && oar_tensor_dtype(r) == OAR_F16);
    CHECK_VALUES(r, ((double[]){0.125, 0.25, -0.5}), 3, 0);
    r = oar_sub_scalar(i64, 1);
    CHECK_VALUES(r, ((double[]){0, -3, 2}), 3, 0);
    r = oar_gt(f16, oar_scalar(0.75));
    CHECK(r && oar_tensor_dtype(r) == OAR_BOOL);
    CHECK_VALUES(r, ((double[]){0, 1, 0}), 3, 0);
    /* pow with scalars */
    r = oar_pow_scalar(i64, 2);
    CHECK(r && oar_tensor_dtype(r) == OAR_I64);
    CHECK_VALUES(r, ((double[]){1, 4, 9}), 3, 0);
    r = oar_pow_scalar(i64, 0.5);
    CHECK(r && oar_tensor_dtype(r) == OAR_F32);
    CHECK_VALUES(r, ((double[]){1, NAN, sqrt(3.0)}), 3, 1e-6);
    r = oar_pow_scalar(f32, -1);
    CHECK_VALUES(r, ((double[]){1, 0.5, 1.0 / 3}), 3, 1e-7);
    CHECK_FAILS(oar_pow_scalar(i64, -2), "negative integer powers");
    oar_pool_pop(p);
}

/* ---- broadcasting, strides, where ---- */

static void test_broadcast(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *a = from2(OAR_F32, 2, 3, (double[]){1, 2, 3, 4, 5, 6});
    oar_tensor *row = make(OAR_F32, (double[]){10, 20, 30}, NULL, 3);
    oar_tensor *col = from2(OAR_F32, 2, 1, (double[]){100, 200});
    oar_tensor *r = oar_add(a, row);
    CHECK(r && oar_tensor_ndim(r) == 2 && oar_tensor_shape(r)[0] == 2 && oar_tensor_shape(r)[1] == 3);
    CHECK_VALUES(r, ((double[]){11, 22, 33, 14, 25, 36}), 6, 0);
    /* [3] - [2, 3]: the broadcast operand on the left */
    CHECK_VALUES(oar_sub(row, a), ((double[]){9, 18, 27, 6, 15, 24}), 6, 0);
    /* [2, 1] * [3] -> [2, 3] */
    r = oar_mul(col, row);
    CHECK(r && oar_tensor_shape(r)[0] == 2 && oar_tensor_shape(r)[1] == 3);
    CHECK_VALUES(r, ((double[]){1000, 2000, 3000, 2000, 4000, 6000}), 6, 0);
    /* 0-d tensor on either side */
    CHECK_VALUES(oar_sub(oar_scalar_of(1, OAR_F32), a), ((double[]){0, -1, -2, -3, -4, -5}), 6, 0);
    CHECK_VALUES(oar_maximum(a, oar_scalar(3.5)), ((double[]){3.5, 3.5, 3.5, 4, 5, 6}), 6, 0);
    /* a transposed view: a^T [3, 2] + col^T [1, 2] */
    int64_t ts[2] = {3, 2}, tst[2] = {1, 3};
    oar_tensor *at = oari_pool_adopt(oari_tensor_view(a, 2, ts, tst, 0));
    int64_t cs[2] = {1, 2}, cst[2] = {2, 1};
    oar_tensor *ct = oari_pool_adopt(oari_tensor_view(col, 2, cs, cst, 0));
    CHECK(!oar_tensor_is_contiguous(at));
    CHECK_VALUES(oar_add(at, ct), ((double[]){101, 204, 102, 205, 103, 206}), 6, 0);
    CHECK_VALUES(oar_ge(at, oar_scalar(3)), ((double[]){0, 1, 0, 1, 1, 1}), 6, 0);

    /* where: all three broadcast; a f32 and b i64 promote to f32 */
    oar_tensor *cond = oar_gt(a, oar_scalar(2.5)); /* [2, 3] */
    oar_tensor *bi = make(OAR_I64, (double[]){-1, -2, -3}, NULL, 3);
    r = oar_where(cond, col, bi);
    CHECK(r && oar_tensor_dtype(r) == OAR_F32 && oar_tensor_shape(r)[1] == 3);
    CHECK_VALUES(r, ((double[]){-1, -2, 100, 200, 200, 200}), 6, 0);
    r = oar_where(oar_lt(row, oar_scalar(25)), oar_scalar(1), oar_scalar(0.5)); /* scalars */
    CHECK(r && oar_tensor_dtype(r) == OAR_F32);
    CHECK_VALUES(r, ((double[]){1, 1, 0.5}), 3, 0);
    /* where keeps every dtype, including complex and half */
    oar_tensor *zc = make(OAR_C128, (double[]){1, 2, 3}, (double[]){-1, -2, -3}, 3);
    r = oar_where(oar_eq(row, oar_scalar(20)), zc, oar_scalar(0));
    CHECK(r && oar_tensor_dtype(r) == OAR_C128);
    CHECK_VALUES(oar_imag(r), ((double[]){0, -2, 0}), 3, 0);
    oar_tensor *h = make(OAR_BF16, (double[]){1.5, 2.5, 3.5}, NULL, 3);
    r = oar_where(oar_ne(row, oar_scalar(20)), h, oar_neg(h));
    CHECK(r && oar_tensor_dtype(r) == OAR_BF16);
    CHECK_VALUES(r, ((double[]){1.5, -2.5, 3.5}), 3, 0);

    /* empty: [0, 3] + [3] -> [0, 3]; where with an empty cond */
    int64_t es[2] = {0, 3};
    oar_tensor *e = oar_zeros(OAR_I32, 2, es);
    r = oar_add(e, row);
    CHECK(r && oar_tensor_numel(r) == 0 && oar_tensor_dtype(r) == OAR_F32 && oar_tensor_shape(r)[0] == 0);
    r = oar_where(oar_eq(e, oar_scalar(0)), e, row);
    CHECK(r && oar_tensor_numel(r) == 0);
    oar_pool_pop(p);
}

static void test_large(void) {
    oar_pool *p = oar_pool_push();
    int64_t n = 2 * OARI_PARALLEL_GRAIN + 7;
    oar_tensor *x = oar_arange(0, (double)n, 1, OAR_I64);
    oar_tensor *y = oar_remainder(oar_sub_scalar(x, 1000), oar_scalar(-7));
    int64_t *v = y ? oar_tensor_data(y) : NULL;
    int bad = 0;
    for (int64_t i = 0; v && i < n; i++) {
        int64_t a = i - 1000, r = a % -7;
        if (r > 0) r -= 7;
        if (v[i] != r) bad++;
    }
    CHECK(v && bad == 0);
    /* a [n/2] stride-2 view times a broadcast 0-d tensor, f64 */
    oar_tensor *xf = oar_cast(x, OAR_F64);
    int64_t h = n / 2, st = 2;
    oar_tensor *xs = oari_pool_adopt(oari_tensor_view(xf, 1, &h, &st, 1));
    oar_tensor *z = oar_mul(xs, oar_scalar_of(0.5, OAR_F64));
    double *zv = z ? oar_tensor_data(z) : NULL;
    bad = 0;
    for (int64_t i = 0; zv && i < h; i++)
        if (zv[i] != 0.5 * (double)(2 * i + 1)) bad++;
    CHECK(zv && bad == 0);
    oar_pool_pop(p);
}

/* Integer division by zero is defined (0), never a trap; INT_MIN // -1 wraps. */
/* where over runs long enough for the vector loops: the values contiguous or
 * one broadcast scalar on either side, every element size, and a [n] mask
 * broadcast over [3, n] rows (a causal mask's shape). */
static void test_where_runs(void) {
    oar_pool *p = oar_pool_push();
    enum { N = 203 };
    double cv[N], av[N], w1[3 * N], w2[N];
    for (int i = 0; i < N; i++) cv[i] = (i * 7 % 5) < 2, av[i] = i % 100;
    oar_tensor *cond = oar_cast(make(OAR_F32, cv, NULL, N), OAR_BOOL);
    static const oar_dtype dts[] = {OAR_U8, OAR_BF16, OAR_F32, OAR_F64, OAR_C128};
    for (size_t d = 0; d < sizeof dts / sizeof *dts; d++) {
        oar_tensor *a = oar_cast(make(OAR_F64, av, NULL, N), dts[d]);
        oar_tensor *b = oar_cast(oar_scalar(3), dts[d]);
        for (int i = 0; i < N; i++) w1[i] = cv[i] ? av[i] : 3, w2[i] = cv[i] ? 3 : av[i];
        oar_tensor *r = oar_where(cond, a, b);
        CHECK(r && oar_tensor_dtype(r) == dts[d]);
        CHECK_VALUES(dts[d] == OAR_C128 ? oar_real(r) : r, w1, N, 0);
        r = oar_where(cond, b, a);
        CHECK_VALUES(dts[d] == OAR_C128 ? oar_real(r) : r, w2, N, 0);
        r = oar_where(cond, a, a);
        CHECK_VALUES(dts[d] == OAR_C128 ? oar_real(r) : r, av, N, 0);
    }
    oar_tensor *rows = oar_reshape(oar_arange(0, 3 * N, 1, OAR_F32), 2, (int64_t[]){3, N});
    for (int r = 0; r < 3; r++)
        for (int i = 0; i < N; i++) w1[r * N + i] = cv[i] ? r * N + i : -1e9;
    CHECK_VALUES(oar_where(cond, rows, oar_scalar(-1e9)), w1, 3 * N, 0);
    oar_pool_pop(p);
}

static void test_integer_edges(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *a = make(OAR_I64, (double[]){7, -7, 0, 5}, NULL, 4);
    oar_tensor *z = oar_zeros(OAR_I64, 1, (int64_t[]){4});
    CHECK_VALUES(oar_floor_div(a, z), ((double[]){0, 0, 0, 0}), 4, 0);
    CHECK_VALUES(oar_remainder(a, z), ((double[]){0, 0, 0, 0}), 4, 0);
    oar_tensor *zu = oar_zeros(OAR_U8, 1, (int64_t[]){4});
    CHECK_VALUES(oar_floor_div(oar_cast(oar_abs(a), OAR_U8), zu), ((double[]){0, 0, 0, 0}), 4, 0);
    int32_t mn[2] = {INT32_MIN, INT32_MIN}, m1[2] = {-1, 2};
    oar_tensor *tm = oar_tensor_from_data(mn, OAR_I32, 1, (int64_t[]){2});
    oar_tensor *t1 = oar_tensor_from_data(m1, OAR_I32, 1, (int64_t[]){2});
    CHECK_VALUES(oar_floor_div(tm, t1), ((double[]){INT32_MIN, INT32_MIN / 2}), 2, 0);
    CHECK_VALUES(oar_remainder(tm, t1), ((double[]){0, 0}), 2, 0);
    /* integer overflow wraps as two's complement */
    CHECK_VALUES(oar_sub(tm, oar_scalar(1)), ((double[]){INT32_MAX, INT32_MAX}), 2, 0);
    CHECK_VALUES(oar_pow(oar_scalar_of(3, OAR_I32), oar_scalar_of(21, OAR_I32)),
                 ((double[]){(double)(int32_t)(uint32_t)10460353203ULL}), 1, 0);
    oar_pool_pop(p);
}

static void test_bad_input(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *a = oar_zeros(OAR_F32, 2, (int64_t[]){2, 3});
    oar_tensor *b = oar_zeros(OAR_F32, 2, (int64_t[]){2, 4});
    oar_tensor *c = oar_zeros(OAR_C64, 1, (int64_t[]){3});
    oar_tensor *bo = oar_zeros(OAR_BOOL, 1, (int64_t[]){3});
    CHECK_FAILS(oar_add(a, b), "do not broadcast");
    CHECK_FAILS(oar_eq(a, b), "[2, 3]");
    CHECK_FAILS(oar_where(oar_gt(a, oar_scalar(0)), a, b), "do not broadcast");
    CHECK_FAILS(oar_maximum(a, c), "maximum: not defined for complex");
    CHECK_FAILS(oar_lt(c, c), "complex");
    CHECK_FAILS(oar_atan2(c, a), "complex");
    CHECK_FAILS(oar_floor_div(c, c), "complex");
    CHECK_FAILS(oar_sub(bo, bo), "sub: not defined for bool");
    CHECK_FAILS(oar_where(a, a, a), "where: condition must be bool");
    CHECK_FAILS(oar_add(NULL, a), "add: input 0 is NULL");
    CHECK_FAILS(oar_mul(a, NULL), "input 1 is NULL");
    CHECK_FAILS(oar_where(bo, NULL, bo), "NULL");
    CHECK_FAILS(oar_add_scalar(NULL, 1), "NULL");
    CHECK_FAILS(oar_pow_scalar(NULL, 2), "NULL");
    /* the first error survives a chain */
    oar_clear_error();
    CHECK(oar_mul(oar_add(oar_add(a, b), a), a) == NULL);
    CHECK(strstr(oar_last_error(), "broadcast") != NULL);
    oar_pool_pop(p);
}

/* ---- gradient rules against central differences ---- */

static oar_tensor *imag_unit(void) {
    double v[2] = {0, 1};
    return oar_tensor_from_data(v, OAR_C128, 0, NULL);
}

/* Runs op's gradient rule on inputs in[0..n-1] (same shape) with grad gy;
 * gin[k] is the gradient of input k. */
static int run_grad(oari_op op, int n, oar_tensor **in, oar_tensor *y, oar_tensor *gy, oar_tensor **gin) {
    const oari_op_def *def = oari_op_defs[op];
    if (!def || !def->grad) return -1;
    oari_meta in_meta[3], out_meta;
    bool needs[3];
    for (int i = 0; i < n; i++) {
        oari_meta_from(&in_meta[i], in[i]);
        needs[i] = oar_dtype_is_float(oar_tensor_dtype(in[i])) || oar_dtype_is_complex(oar_tensor_dtype(in[i]));
        gin[i] = NULL;
    }
    oari_meta_from(&out_meta, y);
    oar_tensor *out[1] = {y}, *gout[1] = {gy};
    static const oari_attrs none;
    oari_grad_ctx g = {.op = op, .attrs = &none, .n_in = n, .n_out = 1, .in = in,
                       .in_meta = in_meta, .out = out, .out_meta = &out_meta, .gout = gout,
                       .needs = needs, .gin = gin};
    return def->grad(&g);
}

typedef oar_tensor *(*ternary_fn)(oar_tensor *, oar_tensor *, oar_tensor *);

/* f over 2 or 3 inputs */
static oar_tensor *apply(binary_fn f2, ternary_fn f3, oar_tensor **in) {
    return f3 ? f3(in[0], in[1], in[2]) : f2(in[0], in[1]);
}

static void grad_check(const char *name, oari_op op, binary_fn f2, ternary_fn f3, oar_tensor **in) {
    oar_pool *p = oar_pool_push();
    int n_in = f3 ? 3 : 2;
    oar_tensor *y = apply(f2, f3, in);
    int64_t n = oar_tensor_numel(y);
    bool cx = oar_dtype_is_complex(oar_tensor_dtype(y));
    double gv[6] = {0.7, -1.3, 0.4, 2.1, -0.6, 1.1}, gi[6] = {0.2, 0.5, -0.9, 0.3, -0.4, 0.8};
    oar_tensor *gy = make(oar_tensor_dtype(y), gv, cx ? gi : NULL, n);
    oar_tensor *gin[3];
    int st = run_grad(op, n_in, in, y, gy, gin);
    CHECK(st == 0);
    const double h = 1e-6;
    for (int k = 0; k < n_in && !st; k++) {
        oar_dtype dk = oar_tensor_dtype(in[k]);
        if (!oar_dtype_is_float(dk) && !oar_dtype_is_complex(dk)) continue;
        char what[64];
        snprintf(what, sizeof what, "grad %s input %d (%s)", name, k, oar_dtype_name(dk));
        if (!gin[k] || oar_tensor_dtype(gin[k]) != dk || oar_tensor_numel(gin[k]) != n) {
            test_failed++;
            fprintf(stderr, "%s: missing or wrong dtype (%s)\n", what, oar_last_error());
            continue;
        }
        int parts = oar_dtype_is_complex(dk) ? 2 : 1;
        for (int part = 0; part < parts; part++) {
            oar_tensor *d = part ? oar_mul(imag_unit(), oar_scalar(h)) : oar_scalar(h);
            oar_tensor *plus[3], *minus[3];
            for (int i = 0; i < n_in; i++) plus[i] = minus[i] = in[i];
            plus[k] = oar_add(in[k], d);
            minus[k] = oar_sub(in[k], d);
            oar_tensor *diff = oar_sub(apply(f2, f3, plus), apply(f2, f3, minus));
            oar_tensor *num = oar_div_scalar(oar_real(oar_mul(oar_conj(gy), diff)), 2 * h);
            double *w = test_values(num);
            oar_tensor *got = part ? oar_imag(gin[k]) : oar_real(gin[k]);
            test_expect_values(what, got, w, n, 1e-6, __FILE__, __LINE__);
            free(w);
        }
    }
    oar_pool_pop(p);
}

static void test_gradients(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *a = make(OAR_F64, (double[]){-1.3, 0.6, 2.35, 0.8, -1.7, 2.2}, NULL, 6);
    oar_tensor *b = make(OAR_F64, (double[]){0.9, -1.4, 0.75, 1.8, -0.6, 2.6}, NULL, 6);
    oar_tensor *pa = make(OAR_F64, (double[]){0.3, 0.55, 1.8, 1.2, 1.7, 2.2}, NULL, 6);
    oar_tensor *za = make(OAR_C128, (double[]){0.7, -0.5, 1.2, -0.8}, (double[]){0.4, 0.9, -0.3, -0.6}, 4);
    oar_tensor *zb = make(OAR_C128, (double[]){-0.3, 1.1, 0.6, 0.9}, (double[]){1.2, -0.4, 0.5, -1.6}, 4);
    struct { const char *name; oari_op op; binary_fn f; bool pos, cx; } g[] = {
        {"add", OARI_OP_add, oar_add, false, true},
        {"sub", OARI_OP_sub, oar_sub, false, true},
        {"mul", OARI_OP_mul, oar_mul, false, true},
        {"div", OARI_OP_div, oar_div, false, true},
        {"remainder", OARI_OP_remainder, oar_remainder, false, false},
        {"pow", OARI_OP_pow, oar_pow, true, true},
        {"atan2", OARI_OP_atan2, oar_atan2, false, false},
        {"maximum", OARI_OP_maximum, oar_maximum, false, false},
        {"minimum", OARI_OP_minimum, oar_minimum, false, false},
    };
    for (size_t i = 0; i < sizeof g / sizeof g[0]; i++) {
        oar_tensor *in[2] = {g[i].pos ? pa : a, b};
        grad_check(g[i].name, g[i].op, g[i].f, NULL, in);
        oar_tensor *zin[2] = {za, zb};
        if (g[i].cx) grad_check(g[i].name, g[i].op, g[i].f, NULL, zin);
    }
    /* where: the gradient goes to the chosen side */
    oar_tensor *cond = oar_gt(a, b);
    oar_tensor *win[3] = {cond, a, b};
    grad_check("where", OARI_OP_where, NULL, oar_where, win);
    /* maximum/minimum split ties in half (PyTorch) */
    oar_tensor *gy = oar_ones(OAR_F64, 1, (int64_t[]){6});
    oar_tensor *tin[2] = {a, a}, *gin[3];
    CHECK(run_grad(OARI_OP_maximum, 2, tin, oar_maximum(a, a), gy, gin) == 0);
    CHECK_VALUES(gin[0], ((double[]){0.5, 0.5, 0.5, 0.5, 0.5, 0.5}), 6, 0);
    /* floor_div has zero gradient; comparisons are not differentiable */
    oar_tensor *fin[2] = {a, b};
    CHECK(run_grad(OARI_OP_floor_div, 2, fin, oar_floor_div(a, b), gy, gin) == 0);
    CHECK_VALUES(gin[1], ((double[]){0, 0, 0, 0, 0, 0}), 6, 0);
    CHECK(oari_op_defs[OARI_OP_lt]->flags & OARI_F_NONDIFF);
    CHECK(oari_op_defs[OARI_OP_logical_xor]->flags & OARI_F_NONDIFF);
    /* pow at a = 0 with b > 0: d/db is 0, not NaN */
    oar_tensor *z0 = oar_zeros(OAR_F64, 1, (int64_t[]){6});
    oar_tensor *pin[2] = {z0, pa};
    CHECK(run_grad(OARI_OP_pow, 2, pin, oar_pow(z0, pa), gy, gin) == 0);
    CHECK_VALUES(gin[1], ((double[]){0, 0, 0, 0, 0, 0}), 6, 0);
    oar_pool_pop(p);
}

int main(void) {
    RUN(test_reference_values);
    RUN(test_promotion);
    RUN(test_broadcast);
    RUN(test_large);
    RUN(test_where_runs);
    RUN(test_integer_edges);
    RUN(test_bad_input);
    RUN(test_gradients);
    return test_summary();
}

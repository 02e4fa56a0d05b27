/* Unary elementwise ops: values against PyTorch (tests/ref/elementwise_ref.h)
 * for every op and dtype class, strided and large inputs, 0-d and empty
 * tensors, attributes, bad input, and each gradient rule against central
 * differences in float64/complex128. */
#include "test.h"

#include "ops/op.h"
#include "ew_rows.h"
#include "ref/elementwise_ref.h"

/* ---- helpers ---- */

/* A tensor of dtype from doubles (im NULL: real). */
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

static double tol_for(oar_dtype d) {
    switch (d) {
    case OAR_F16: return 2e-3;
    case OAR_BF16: return 1e-2;
    case OAR_F32: return 2e-6;
    case OAR_C64: return 2e-5;
    case OAR_F64: case OAR_C128: return 1e-10;
    default: return 0;
    }
}

/* Checks out (maybe complex) against re/im with a message naming the case. */
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

static oar_tensor *u_leaky_relu(oar_tensor *x) { return oar_leaky_relu(x, 0.1); }
static oar_tensor *u_elu(oar_tensor *x) { return oar_elu(x, 1.5); }
static oar_tensor *u_gelu(oar_tensor *x) { return oar_gelu(x, false); }
static oar_tensor *u_gelu_tanh(oar_tensor *x) { return oar_gelu(x, true); }
static oar_tensor *u_softplus(oar_tensor *x) { return oar_softplus(x, 2.0, 5.0); }
static oar_tensor *u_clamp(oar_tensor *x) { return oar_clamp(x, -0.5, 0.7); }
static oar_tensor *u_clamp_max(oar_tensor *x) { return oar_clamp(x, NAN, 0.5); }
static oar_tensor *u_clamp_int(oar_tensor *x) {
    return oar_tensor_dtype(x) == OAR_U8 ? oar_clamp(x, 2, 100) : oar_clamp(x, -2, 3);
}
static oar_tensor *u_clamp_frac(oar_tensor *x) { return oar_clamp(x, 0.5, NAN); }

typedef oar_tensor *(*unary_fn)(oar_tensor *);

/* Reference cases whose op takes attributes: the case's name, the row it
 * checks, and the call with the attributes gen_elementwise.py used. Any
 * other case names a row of the table, called without attributes. */
static const struct { const char *name, *op; unary_fn fn; } variants[] = {
    {"leaky_relu", "leaky_relu", u_leaky_relu}, {"elu", "elu", u_elu}, {"gelu", "gelu", u_gelu},
    {"gelu_tanh", "gelu", u_gelu_tanh}, {"softplus", "softplus", u_softplus}, {"clamp", "clamp", u_clamp},
    {"clamp_max", "clamp", u_clamp_max}, {"clamp_int", "clamp", u_clamp_int},
    {"clamp_frac", "clamp", u_clamp_frac},
};

/* ---- forward values against PyTorch: every unary row of the elementwise
 * table (tests/ew_rows.h) has cases, and each case names a row ---- */

static void test_reference_values(void) {
    int n_cases = (int)(sizeof ew_unary_cases / sizeof ew_unary_cases[0]);
    bool seen[EW_N_TEST_ROWS];
    memset(seen, 0, sizeof seen);
    for (int k = 0; k < n_cases; k++) {
        const ew_case *c = &ew_unary_cases[k];
        unary_fn fn = NULL;
        const char *op = c->op;
        for (size_t i = 0; i < sizeof variants / sizeof *variants; i++)
            if (!strcmp(variants[i].name, c->op)) fn = variants[i].fn, op = variants[i].op;
        const ew_test_row *r = ew_test_row_of(op);
        if (!r || r->n_in != 1 || (!fn && r->attrs))
            fprintf(stderr, "case %d: %s is no unary row of the table without attributes, nor a variant "
                    "here\n", k, c->op);
        CHECK(r && r->n_in == 1 && (fn || !r->attrs));
        if (!r || r->n_in != 1 || (!fn && r->attrs)) continue;
        seen[r - ew_test_rows] = true;
        oar_pool *p = oar_pool_push();
        char what[96];
        snprintf(what, sizeof what, "%s(%s) [case %d]", c->op, oar_dtype_name((oar_dtype)c->a_dtype), k);
        oar_tensor *x = make((oar_dtype)c->a_dtype, c->a_re, c->a_im, c->n);
        oar_tensor *y = fn ? fn(x) : oari_call1((oari_op)oari_op_lookup(op), x, NULL);
        expect(what, y, c->out_dtype, c->want_re, c->want_im, c->n);
        oar_pool_pop(p);
    }
    /* every row has reference values */
    for (int i = 0; i < EW_N_TEST_ROWS; i++) {
        if (ew_test_rows[i].n_in != 1) continue;
        if (!seen[i])
            fprintf(stderr, "no reference case for %s: add its PyTorch line to tests/ref/gen_elementwise.py\n",
                    ew_test_rows[i].op);
        CHECK(seen[i]);
    }
    /* the public functions are the table's calls */
    oar_pool *p = oar_pool_push();
    CHECK_NEAR(oar_tensor_item(oar_exp(oar_scalar_of(1, OAR_F64))), M_E, 1e-15);
    CHECK_NEAR(oar_tensor_item(oar_relu6(oar_scalar_of(7, OAR_F64))), 6, 0);
    CHECK_NEAR(oar_tensor_item(oar_hardswish(oar_scalar_of(1, OAR_F64))), 4.0 / 6, 1e-15); /* 1 relu6(4) / 6 */
    CHECK_NEAR(oar_tensor_item(oar_hardswish(oar_scalar_of(-4, OAR_F64))), 0, 0);
    const double special[4] = {INFINITY, -INFINITY, NAN, 1e308};
    oar_tensor *inf = oar_isinf(oar_tensor_from_data(special, OAR_F64, 1, (int64_t[]){4}));
    CHECK(inf && oar_tensor_dtype(inf) == OAR_BOOL);
    if (inf) { /* the bytes themselves: a bool element is 0 or 1 (-inf once gave 255) */
        const uint8_t *b = oar_tensor_data(oar_contiguous(inf));
        CHECK(b && b[0] == 1 && b[1] == 1 && b[2] == 0 && b[3] == 0);
    }
    CHECK_FAILS(oar_hardswish(NULL) != NULL, "NULL");
    CHECK_FAILS(oar_isinf(NULL) != NULL, "NULL");
    oar_pool_pop(p);
}

/* ---- geometry: strided, large, 0-d, empty ---- */

static void test_strided_and_large(void) {
    oar_pool *p = oar_pool_push();
    /* a transposed view of a [3, 4] tensor */
    double v[12];
    for (int i = 0; i < 12; i++) v[i] = 0.25 * i - 1.3;
    int64_t shape[2] = {3, 4}, tshape[2] = {4, 3}, tstrides[2] = {1, 4};
    oar_tensor *x = oar_tensor_from_data(v, OAR_F64, 2, shape);
    oar_tensor *xt = oari_pool_adopt(oari_tensor_view(x, 2, tshape, tstrides, 0));
    CHECK(!oar_tensor_is_contiguous(xt));
    oar_tensor *y = oar_exp(xt);
    double want[12];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 3; j++) want[i * 3 + j] = exp(v[j * 4 + i]);
    CHECK(y && oar_tensor_ndim(y) == 2 && oar_tensor_shape(y)[0] == 4);
    CHECK_VALUES(y, want, 12, 1e-15);
    /* every other element (stride 2) of an i32 tensor */
    int64_t n = 6, s2 = 2;
    oar_tensor *xi = oar_cast(x, OAR_I32); /* [-1, -1, 0, 0, 0, 0, ...] truncated */
    oar_tensor *half = oari_pool_adopt(oari_tensor_view(xi, 1, &n, &s2, 1));
    double wi[6];
    for (int i = 0; i < 6; i++) wi[i] = fabs((double)(int)v[2 * i + 1]);
    CHECK_VALUES(oar_abs(half), wi, 6, 0);

    /* large enough for the parallel path, contiguous and strided */
    int64_t big = 3 * OARI_PARALLEL_GRAIN + 5;
    oar_tensor *r = oar_arange(0, (double)big, 1, OAR_F32);
    oar_tensor *s = oar_sin(oar_mul_scalar(r, 0.001));
    float *sv = s ? oar_tensor_data(s) : NULL;
    int bad = 0;
    for (int64_t i = 0; sv && i < big; i++)
        if (fabsf(sv[i] - sinf((float)i * 0.001f)) > 2e-6f) bad++;
    CHECK(sv && bad == 0);
    int64_t half_n = big / 2, st = 2;
    oar_tensor *rs = oari_pool_adopt(oari_tensor_view(r, 1, &half_n, &st, 0));
    oar_tensor *sq = oar_square(rs);
    float *qv = sq ? oar_tensor_data(sq) : NULL;
    bad = 0;
    for (int64_t i = 0; qv && i < half_n; i++)
        if (qv[i] != (float)(2 * i) * (float)(2 * i)) bad++;
    CHECK(qv && bad == 0);
    oar_pool_pop(p);
}

/* exp in f32 runs a vectorized polynomial: within 2 ulp of exp over the
 * whole range (subnormal results included), exact at the edges. */
static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}
static void test_exp_f32_accuracy(void) {
    oar_pool *p = oar_pool_push();
    int64_t n = 1 << 21;
    float *v = malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = -104.5f + 194.0f * (float)i / (float)n;
    float special[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 88.72283f, 88.7229f, -87.33655f,
                       -103.97f, -104.0f, 1e-8f, -1e-8f};
    for (int i = 0; i < 12; i++) v[i] = special[i];
    oar_tensor *x = oar_tensor_from_data(v, OAR_F32, 1, &n);
    oar_tensor *e = oar_exp(x), *s = oar_sigmoid(x);
    const float *ev = e ? oar_tensor_data(e) : NULL, *sv = s ? oar_tensor_data(s) : NULL;
    int64_t worst = 0, bad = 0;
    for (int64_t i = 0; ev && sv && i < n; i++) {
        float want = (float)exp((double)v[i]);
        if (isnan(want)) {
            if (!isnan(ev[i])) bad++;
            continue;
        }
        int64_t d = llabs((int64_t)f32_bits(ev[i]) - (int64_t)f32_bits(want));
        if (d > worst) worst = d;
        float ws = (float)(1.0 / (1.0 + exp(-(double)v[i])));
        if (fabsf(sv[i] - ws) > 3e-7f * ws + 1e-37f) bad++; /* 0 once exp(-x) overflows */
    }
    CHECK(ev && sv && worst <= 2 && bad == 0);
    if (worst > 2 || bad) fprintf(stderr, "exp f32: worst %lld ulp, %lld bad\n", (long long)worst, (long long)bad);
    free(v);
    oar_pool_pop(p);
}

static void test_scalar_and_empty(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *e = oar_exp(oar_scalar_of(1, OAR_F64));
    CHECK(e && oar_tensor_ndim(e) == 0);
    CHECK_NEAR(oar_tensor_item(e), M_E, 1e-15);
    /* an int scalar promotes to f32 */
    oar_tensor *s = oar_sqrt(oar_scalar_of(4, OAR_I64));
    CHECK(s && oar_tensor_dtype(s) == OAR_F32 && oar_tensor_item(s) == 2);
    int64_t shape[2] = {0, 3};
    oar_tensor *z = oar_zeros(OAR_F16, 2, shape);
    oar_tensor *r = oar_tanh(z);
    CHECK(r && oar_tensor_numel(r) == 0 && oar_tensor_dtype(r) == OAR_F16 &&
          oar_tensor_shape(r)[1] == 3);
    oar_tensor *b = oar_isnan(oar_zeros(OAR_C64, 2, shape));
    CHECK(b && oar_tensor_dtype(b) == OAR_BOOL && oar_tensor_numel(b) == 0);
    oar_tensor *a = oar_abs(oar_zeros(OAR_C128, 2, shape));
    CHECK(a && oar_tensor_dtype(a) == OAR_F64);
    oar_pool_pop(p);
}

static void test_attributes(void) {
    oar_pool *p = oar_pool_push();
    double v[5] = {-2, -0.5, 0, 1, 30};
    int64_t n = 5;
    oar_tensor *x = oar_tensor_from_data(v, OAR_F64, 1, &n);
    /* clamp with no bounds is the identity; min > max gives max (PyTorch) */
    CHECK_VALUES(oar_clamp(x, NAN, NAN), v, 5, 0);
    CHECK_VALUES(oar_clamp(x, 2, 1), ((double[]){1, 1, 1, 1, 1}), 5, 0);
    /* softplus with PyTorch's defaults: linear above 20 */
    double sp[5];
    for (int i = 0; i < 5; i++) sp[i] = v[i] > 20 ? v[i] : log1p(exp(v[i]));
    CHECK_VALUES(oar_softplus(x, 1, 20), sp, 5, 1e-15);
    /* leaky_relu slope 0 is relu */
    CHECK_VALUES(oar_leaky_relu(x, 0), ((double[]){0, 0, 0, 1, 30}), 5, 0);
    /* clamp of an int tensor with infinite bounds stays int */
    oar_tensor *ci = oar_clamp(oar_cast(x, OAR_I64), -INFINITY, 1);
    CHECK(ci && oar_tensor_dtype(ci) == OAR_I64);
    CHECK_VALUES(ci, ((double[]){-2, 0, 0, 1, 1}), 5, 0);
    /* integer abs/neg of the minimum wrap, as PyTorch */
    int32_t m = INT32_MIN;
    int64_t one = 1;
    oar_tensor *mi = oar_tensor_from_data(&m, OAR_I32, 1, &one);
    CHECK_VALUES(oar_abs(mi), ((double[]){INT32_MIN}), 1, 0);
    CHECK_VALUES(oar_neg(mi), ((double[]){INT32_MIN}), 1, 0);
    oar_pool_pop(p);
}

static void test_bad_input(void) {
    oar_pool *p = oar_pool_push();
    int64_t n = 2;
    oar_tensor *c = oar_zeros(OAR_C64, 1, &n), *b = oar_zeros(OAR_BOOL, 1, &n);
    oar_tensor *f = oar_zeros(OAR_F32, 1, &n);
    CHECK_FAILS(oar_relu(c), "relu: not defined for complex");
    CHECK_FAILS(oar_erf(c), "complex");
    CHECK_FAILS(oar_floor(c), "complex");
    CHECK_FAILS(oar_clamp(c, 0, 1), "complex");
    CHECK_FAILS(oar_gelu(c, false), "complex");
    CHECK_FAILS(oar_neg(b), "neg: not defined for bool");
    CHECK_FAILS(oar_imag(f), "imag: not defined for real input");
    CHECK_FAILS(oar_softplus(f, 0, 20), "beta must be non-zero");
    CHECK_FAILS(oar_exp(NULL), "exp: input 0 is NULL");
    CHECK_FAILS(oar_leaky_relu(NULL, 0.1), "NULL");
    /* a NULL input keeps the first message */
    oar_clear_error();
    CHECK(oar_sin(oar_exp(oar_imag(f))) == NULL);
    CHECK(strstr(oar_last_error(), "imag") != NULL);
    oar_pool_pop(p);
}

/* ---- gradient rules against central differences ---- */

/* Calls op's gradient rule for y = f(x) with grad_out gy; returns gin[0]. */
static oar_tensor *run_grad(oari_op op, const oari_attrs *attrs, oar_tensor *x, oar_tensor *y,
                            oar_tensor *gy) {
    const oari_op_def *def = oari_op_defs[op];
    if (!def || !def->grad) return NULL;
    oari_meta in_meta, out_meta;
    oari_meta_from(&in_meta, x);
    oari_meta_from(&out_meta, y);
    oar_tensor *in[1] = {x}, *out[1] = {y}, *gout[1] = {gy}, *gin[1] = {NULL};
    bool needs[1] = {true};
    static const oari_attrs none;
    oari_grad_ctx g = {.op = op, .attrs = attrs ? attrs : &none, .n_in = 1, .n_out = 1,
                       .in = in, .in_meta = &in_meta, .out = out, .out_meta = &out_meta,
                       .gout = gout, .needs = needs, .gin = gin};
    if (def->grad(&g)) return NULL;
    return gin[0];
}

static oar_tensor *imag_unit(void) {
    double v[2] = {0, 1};
    return oar_tensor_from_data(v, OAR_C128, 0, NULL);
}

/* Numerical vector-Jacobian product: re + i im with
 * re = Re(conj(g) (f(x+h) - f(x-h))) / 2h and im likewise along i h. */
static oar_tensor *numeric_vjp(unary_fn f, oar_tensor *x, oar_tensor *gy) {
    const double h = 1e-6;
    oar_tensor *dh = oar_scalar(h);
    oar_tensor *cg = oar_conj(gy);
    oar_tensor *re = oar_real(oar_mul(cg, oar_sub(f(oar_add(x, dh)), f(oar_sub(x, dh)))));
    re = oar_div_scalar(re, 2 * h);
    if (!oar_dtype_is_complex(oar_tensor_dtype(x))) return re;
    oar_tensor *ih = oar_mul(imag_unit(), dh);
    oar_tensor *im = oar_real(oar_mul(cg, oar_sub(f(oar_add(x, ih)), f(oar_sub(x, ih)))));
    im = oar_div_scalar(im, 2 * h);
    return oar_add(re, oar_mul(im, imag_unit()));
}

static void grad_check(const char *name, oari_op op, const oari_attrs *attrs, unary_fn f,
                       oar_tensor *x) {
    oar_pool *p = oar_pool_push();
    oar_tensor *y = f(x);
    int64_t n = oar_tensor_numel(x);
    double gv[6] = {0.7, -1.3, 0.4, 2.1, -0.6, 1.1}, gi[6] = {0.2, 0.5, -0.9, 0.3, -0.4, 0.8};
    oar_tensor *gy = make(oar_tensor_dtype(y), gv, oar_dtype_is_complex(oar_tensor_dtype(y)) ? gi : NULL, n);
    oar_tensor *got = run_grad(op, attrs, x, y, gy);
    oar_tensor *want = numeric_vjp(f, x, gy);
    char what[64];
    snprintf(what, sizeof what, "grad %s(%s)", name, oar_dtype_name(oar_tensor_dtype(x)));
    if (!got || !want || oar_tensor_dtype(got) != oar_tensor_dtype(x) || oar_tensor_numel(got) != n) {
        test_failed++;
        fprintf(stderr, "%s: no gradient or wrong dtype/shape (%s)\n", what, oar_last_error());
    } else {
        double *w = test_values(oar_real(want));
        test_expect_values(what, oar_real(got), w, n, 1e-6, __FILE__, __LINE__);
        free(w);
        if (oar_dtype_is_complex(oar_tensor_dtype(x))) {
            w = test_values(oar_imag(want));
            test_expect_values(what, oar_imag(got), w, n, 1e-6, __FILE__, __LINE__);
            free(w);
        }
    }
    oar_pool_pop(p);
}

static void test_gradients(void) {
    oar_pool *p = oar_pool_push();
    double xv[6] = {-1.3, -0.6, 0.35, 0.8, 1.7, 2.2};
    double pv[6] = {0.3, 0.55, 0.8, 1.2, 1.7, 2.2};    /* positive domain */
    double uv[6] = {-0.7, -0.45, -0.2, 0.3, 0.6, 0.9}; /* (-1, 1) */
    double zr[4] = {0.7, -0.5, 1.2, -0.8}, zi[4] = {0.4, 0.9, -0.3, -0.6};
    oar_tensor *x = make(OAR_F64, xv, NULL, 6), *xp = make(OAR_F64, pv, NULL, 6);
    oar_tensor *xu = make(OAR_F64, uv, NULL, 6), *z = make(OAR_C128, zr, zi, 4);
    oari_attrs a_leaky = {.nf = 1, .f = {0.1}}, a_elu = {.nf = 1, .f = {1.5}};
    oari_attrs a_gelu = {.ni = 1, .i = {0}}, a_gelu_t = {.ni = 1, .i = {1}};
    oari_attrs a_sp = {.nf = 2, .f = {2.0, 5.0}}, a_clamp = {.nf = 2, .f = {-0.5, 0.7}};
    oari_attrs a_clamp_max = {.nf = 2, .f = {NAN, 0.5}};
    struct { const char *name; oari_op op; const oari_attrs *a; unary_fn f; int dom; bool cx; } g[] = {
        {"neg", OARI_OP_neg, NULL, oar_neg, 0, true},
        {"abs", OARI_OP_abs, NULL, oar_abs, 0, true},
        {"exp", OARI_OP_exp, NULL, oar_exp, 0, true},
        {"exp2", OARI_OP_exp2, NULL, oar_exp2, 0, false},
        {"log", OARI_OP_log, NULL, oar_log, 1, true},
        {"log2", OARI_OP_log2, NULL, oar_log2, 1, true},
        {"log1p", OARI_OP_log1p, NULL, oar_log1p, 1, false},
        {"expm1", OARI_OP_expm1, NULL, oar_expm1, 0, false},
        {"sqrt", OARI_OP_sqrt, NULL, oar_sqrt, 1, true},
        {"rsqrt", OARI_OP_rsqrt, NULL, oar_rsqrt, 1, true},
        {"square", OARI_OP_square, NULL, oar_square, 0, true},
        {"reciprocal", OARI_OP_reciprocal, NULL, oar_reciprocal, 1, true},
        {"sin", OARI_OP_sin, NULL, oar_sin, 0, true},
        {"cos", OARI_OP_cos, NULL, oar_cos, 0, true},
        {"tan", OARI_OP_tan, NULL, oar_tan, 2, true},
        {"asin", OARI_OP_asin, NULL, oar_asin, 2, true},
        {"acos", OARI_OP_acos, NULL, oar_acos, 2, true},
        {"atan", OARI_OP_atan, NULL, oar_atan, 0, true},
        {"sinh", OARI_OP_sinh, NULL, oar_sinh, 0, true},
        {"cosh", OARI_OP_cosh, NULL, oar_cosh, 0, true},
        {"tanh", OARI_OP_tanh, NULL, oar_tanh, 0, true},
        {"sigmoid", OARI_OP_sigmoid, NULL, oar_sigmoid, 0, true},
        {"relu", OARI_OP_relu, NULL, oar_relu, 0, false},
        {"relu6", OARI_OP_relu6, NULL, oar_relu6, 0, false},
        {"leaky_relu", OARI_OP_leaky_relu, &a_leaky, u_leaky_relu, 0, false},
        {"elu", OARI_OP_elu, &a_elu, u_elu, 0, false},
        {"gelu", OARI_OP_gelu, &a_gelu, u_gelu, 0, false},
        {"gelu_tanh", OARI_OP_gelu, &a_gelu_t, u_gelu_tanh, 0, false},
        {"silu", OARI_OP_silu, NULL, oar_silu, 0, false},
        {"softplus", OARI_OP_softplus, &a_sp, u_softplus, 0, false},
        {"erf", OARI_OP_erf, NULL, oar_erf, 0, false},
        {"clamp", OARI_OP_clamp, &a_clamp, u_clamp, 0, false},
        {"clamp_max", OARI_OP_clamp, &a_clamp_max, u_clamp_max, 0, false},
        {"floor", OARI_OP_floor, NULL, oar_floor, 0, false},
        {"ceil", OARI_OP_ceil, NULL, oar_ceil, 0, false},
        {"round", OARI_OP_round, NULL, oar_round, 0, false},
        {"trunc", OARI_OP_trunc, NULL, oar_trunc, 0, false},
        {"sign", OARI_OP_sign, NULL, oar_sign, 0, true},
        {"angle", OARI_OP_angle, NULL, oar_angle, 1, true},
        {"conj", OARI_OP_conj, NULL, oar_conj, 0, true},
        {"real", OARI_OP_real, NULL, oar_real, 0, true},
        {"imag", OARI_OP_imag, NULL, oar_imag, 3, true},
    };
    for (size_t i = 0; i < sizeof g / sizeof g[0]; i++) {
        oar_tensor *in = g[i].dom == 1 ? xp : g[i].dom == 2 ? xu : x;
        if (g[i].dom != 3) grad_check(g[i].name, g[i].op, g[i].a, g[i].f, in);
        if (g[i].cx) grad_check(g[i].name, g[i].op, g[i].a, g[i].f, z);
    }
    /* comparisons and predicates are not differentiable */
    CHECK(oari_op_defs[OARI_OP_isnan]->flags & OARI_F_NONDIFF);
    CHECK(oari_op_defs[OARI_OP_logical_not]->flags & OARI_F_NONDIFF);
    oar_pool_pop(p);
}

int main(void) {
    RUN(test_reference_values);
    RUN(test_strided_and_large);
    RUN(test_exp_f32_accuracy);
    RUN(test_scalar_and_empty);
    RUN(test_attributes);
    RUN(test_bad_input);
    RUN(test_gradients);
    return test_summary();
}

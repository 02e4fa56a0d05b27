/* Max pools without indices: max_pool2d_values gives max_pool2d's values
 * bit for bit (NaN included) on every path of its kernel (2x2 stride 2,
 * 3x3 at stride 1 and 2 with padding, the generic window with dilation
 * and ceil_mode, odd planes, a strided input, f32, f64 and f16 through
 * f32), and fails cleanly on bad input. The predictor's pool_values pass
 * turns a pool whose indices no one reads into it, and leaves pools whose
 * indices are read or are an output; the rewritten graph runs, saves and
 * loads. */
#include "test.h"

#include "ops/op.h"

#include <oar/infer.h>
#include <unistd.h>

/* Bitwise equal, NaN where NaN. */
static bool same_values(oar_tensor *a, oar_tensor *b) {
    if (!a || !b || oar_tensor_numel(a) != oar_tensor_numel(b)) return false;
    oar_tensor *ca = oar_contiguous(oar_cast(a, OAR_F64)), *cb = oar_contiguous(oar_cast(b, OAR_F64));
    return ca && cb && !memcmp(oar_tensor_data(ca), oar_tensor_data(cb), (size_t)oar_tensor_numel(ca) * sizeof(double));
}

static oari_attrs pool_attrs(const int64_t k[2], const int64_t s[2], const int64_t p[2], const int64_t d[2],
                             bool ceil_mode) {
    return oari_attrs_ints(9, (int64_t[]){k[0], k[1], s[0], s[1], p[0], p[1], d[0], d[1], ceil_mode});
}

static void test_op(void) {
    static const struct { int64_t x[4], k[2], s[2], p[2], d[2]; bool ceil; } cases[] = {
        {{2, 3, 8, 10}, {2, 2}, {2, 2}, {0, 0}, {1, 1}, false},   /* 2x2 stride 2 */
        {{1, 5, 9, 11}, {2, 2}, {2, 2}, {0, 0}, {1, 1}, true},    /* odd plane, ceil: the generic loop */
        {{1, 4, 15, 17}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, false},  /* ResNet's stem pool */
        {{2, 3, 7, 6}, {3, 3}, {1, 1}, {1, 0}, {1, 1}, false},    /* 3x3 stride 1 */
        {{1, 2, 12, 13}, {3, 3}, {3, 2}, {1, 1}, {1, 1}, true},   /* other strides */
        {{1, 3, 13, 9}, {3, 2}, {2, 1}, {1, 1}, {2, 3}, true},    /* dilated, the generic loop */
    };
    const oar_dtype dts[] = {OAR_F32, OAR_F64, OAR_F16};
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++)
        for (size_t di = 0; di < sizeof dts / sizeof *dts; di++) {
            oar_pool *pool = oar_pool_push();
            oar_tensor *x = oar_cast(oar_randn(OAR_F32, 4, cases[ci].x), dts[di]);
            if (ci == 2) { /* NaN in a window, and a strided x */
                float *v = oar_tensor_data(x = oar_contiguous(oar_cast(x, OAR_F32)));
                v[20] = NAN, v[77] = NAN;
                x = oar_permute(oar_contiguous(oar_permute(x, (int64_t[]){0, 1, 3, 2})), (int64_t[]){0, 1, 3, 2});
                CHECK(!oar_tensor_is_contiguous(x));
            }
            oar_tensor *want = oar_max_pool2d(x, cases[ci].k, cases[ci].s, cases[ci].p, cases[ci].d, cases[ci].ceil,
                                              NULL);
            oari_attrs a = pool_attrs(cases[ci].k, cases[ci].s, cases[ci].p, cases[ci].d, cases[ci].ceil);
            oar_tensor *got = oari_call(OARI_OP_max_pool2d_values, 1, &x, &a);
            CHECK(got && oar_tensor_dtype(got) == oar_tensor_dtype(want) && oar_tensor_ndim(got) == 4 &&
                  !memcmp(oar_tensor_shape(got), oar_tensor_shape(want), 4 * sizeof(int64_t)));
            if (!same_values(got, want)) fprintf(stderr, "case %zu, dtype %zu: values differ\n", ci, di);
            CHECK(same_values(got, want));
            oar_pool_pop(pool);
        }
}

static void test_bad_input(void) {
    oar_pool *pool = oar_pool_push();
    oar_tensor *x = oar_randn(OAR_F32, 4, (int64_t[]){1, 2, 5, 5});
    oari_attrs eight = oari_attrs_ints(8, (int64_t[]){2, 2, 2, 2, 0, 0, 1, 1});
    CHECK_FAILS(oari_call(OARI_OP_max_pool2d_values, 1, &x, &eight), "max_pool2d_values: expected 9");
    oari_attrs big = pool_attrs((int64_t[]){7, 7}, (int64_t[]){1, 1}, (int64_t[]){0, 0}, (int64_t[]){1, 1}, false);
    CHECK_FAILS(oari_call(OARI_OP_max_pool2d_values, 1, &x, &big), "max_pool2d_values");
    oari_attrs ok = pool_attrs((int64_t[]){2, 2}, (int64_t[]){2, 2}, (int64_t[]){0, 0}, (int64_t[]){1, 1}, false);
    oar_tensor *v = oar_randn(OAR_F32, 1, (int64_t[]){5});
    CHECK_FAILS(oari_call(OARI_OP_max_pool2d_values, 1, &v, &ok), "max_pool2d_values");
    oar_tensor *i = oar_cast(x, OAR_I64);
    CHECK_FAILS(oari_call(OARI_OP_max_pool2d_values, 1, &i, &ok), "max_pool2d_values");
    oar_tensor *none = NULL;
    CHECK(oari_call(OARI_OP_max_pool2d_values, 1, &none, &ok) == NULL);
    oar_pool_pop(pool);
}

/* ---- the pass --------------------------------------------------------------------- */

static const int64_t K3[2] = {3, 3}, S2[2] = {2, 2}, P1[2] = {1, 1}, D1[2] = {1, 1};

/* relu, the stem's 3x3 stride 2 pool, then a 2x2 pool: no indices read */
static int unused_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    oar_tensor *h = oar_max_pool2d(oar_relu(in[0]), K3, S2, P1, D1, false, NULL);
    out[0] = oar_max_pool2d(h, S2, S2, (int64_t[]){0, 0}, D1, true, NULL);
    return out[0] ? 0 : -1;
}
/* the indices an output */
static int output_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    out[0] = oar_max_pool2d(in[0], K3, S2, P1, D1, false, &out[1]);
    return out[0] && out[1] ? 0 : -1;
}
/* the indices read by a node */
static int read_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    oar_tensor *ind = NULL, *v = oar_max_pool2d(in[0], K3, S2, P1, D1, false, &ind);
    out[0] = oar_add(v, oar_cast(ind, OAR_F32));
    return out[0] ? 0 : -1;
}

static oar_tensor *run1(const oar_graph *g, oar_tensor *x) {
    oar_executor *ex = oar_executor_new(g);
    oar_tensor *y = NULL;
    int st = ex ? oar_executor_run(ex, &x, &y) : -1;
    oar_tensor *r = !st && y ? oar_clone(y) : NULL;
    oar_executor_free(ex);
    return r;
}

static void test_pass(void) {
    oar_pool *pool = oar_pool_push();
    oar_graph_input_spec spec = {.name = "x", .dtype = OAR_F32, .ndim = 4, .shape = {-1, 3, 17, 15}};
    oar_graph *g = oar_trace(unused_fn, NULL, 1, &spec, 1, NULL);
    CHECK(g && oar_graph_count_op(g, "max_pool2d") == 2);
    oar_graph *f = g ? oar_graph_clone(g) : NULL;
    CHECK(f && oar_graph_run_pass(f, "pool_values") == 2 && oar_graph_verify(f) == 0);
    CHECK(oar_graph_count_op(f, "max_pool2d") == 0 && oar_graph_count_op(f, "max_pool2d_values") == 2);
    CHECK(f && oar_graph_run_pass(f, "pool_values") == 0); /* nothing left */
    for (int64_t n = 1; n <= 3; n += 2) {
        oar_tensor *x = oar_randn(OAR_F32, 4, (int64_t[]){n, 3, 17, 15});
        CHECK(same_values(run1(f, x), run1(g, x)));
    }
    /* saved and loaded */
    char dir[] = "/tmp/oar-test-pool-values-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    CHECK(f && oar_graph_save(f, dir) == 0);
    oar_graph *l = oar_graph_load(dir);
    CHECK(l && oar_graph_count_op(l, "max_pool2d_values") == 2);
    oar_tensor *x = oar_randn(OAR_F32, 4, (int64_t[]){2, 3, 17, 15});
    CHECK(l && same_values(run1(l, x), run1(g, x)));
    oar_graph_free(l);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    /* the predictor runs the pass */
    oar_predictor *p = g ? oar_predictor_from_graph(g, &(oar_predictor_config){.optimize = true}) : NULL;
    CHECK(p && oar_graph_count_op(oar_predictor_graph(p), "max_pool2d_values") == 2 &&
          oar_graph_count_op(oar_predictor_graph(p), "max_pool2d") == 0);
    oar_tensor *served = NULL;
    CHECK(p && oar_predictor_run(p, &x, &served) == 0 && same_values(served, run1(g, x)));
    oar_tensor_release(served);
    oar_predictor_free(p);
    oar_graph_free(f);
    oar_graph_free(g);
    /* pools whose indices are an output, or read, stay */
    oar_graph *o = oar_trace(output_fn, NULL, 1, &spec, 2, NULL), *r = oar_trace(read_fn, NULL, 1, &spec, 1, NULL);
    CHECK(o && oar_graph_run_pass(o, "pool_values") == 0 && oar_graph_count_op(o, "max_pool2d") == 1);
    CHECK(r && oar_graph_run_pass(r, "pool_values") == 0 && oar_graph_count_op(r, "max_pool2d") == 1);
    oar_graph_free(o);
    oar_graph_free(r);
    oar_pool_pop(pool);
}

int main(void) {
    RUN(test_op);
    RUN(test_bad_input);
    RUN(test_pass);
    return test_summary();
}

/* Tracing beyond modules: attention, layer norm, embedding lookups from a
 * traced index input, multi-output ops, concat/split, comparisons and
 * where, dtype promotion between inputs (cast nodes) and in-place writes
 * into traced tensors. Each function runs eagerly and through its graph
 * at two sizes of a dynamic dim; results must agree. */
#include "graph_test_util.h"

static oar_tensor *wq, *wk, *wv, *ln_w, *ln_b, *emb;

static int attention(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx; /* x [B, 6, 8] */
    oar_tensor *h = oar_layer_norm(in[0], 1, ln_w, ln_b, 1e-5);
    oar_tensor *q = oar_matmul(h, wq), *k = oar_matmul(h, wk), *v = oar_matmul(h, wv);
    oar_tensor *a = oar_scaled_dot_product_attention(q, k, v, NULL, 0.0, true, 0.0);
    out[0] = oar_add(in[0], oar_gelu(a, false));
    return out[0] ? 0 : -1;
}

static int lookup(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx; /* indices [B, 5] i64 -> [B, 5, 4] -> mean over the 5 (a static dim) */
    out[0] = oar_mean(oar_embedding(emb, in[0]), 1, (int64_t[]){1}, false);
    return out[0] ? 0 : -1;
}

static int multi(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx; /* x [B, 6] f32, n [B, 6] i64 */
    oar_tensor *idx = NULL, *vals = oar_topk(in[0], 3, 1, true, true, &idx);
    oar_tensor *parts[3];
    oar_split(in[0], 2, 1, 3, parts);
    oar_tensor *cat = oar_concat(3, (oar_tensor *[]){parts[2], parts[0], parts[1]}, 1);
    oar_tensor *mixed = oar_add(cat, in[1]); /* f32 + i64: a cast node */
    oar_tensor *sel = oar_where(oar_gt(mixed, oar_scalar(0.5)), mixed, oar_cumsum(cat, 1));
    out[0] = oar_add(oar_sum(sel, 1, (int64_t[]){1}, true), vals);
    out[1] = idx;
    return out[0] && out[1] ? 0 : -1;
}

static int inplace(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    oar_tensor *t = oar_clone(in[0]);
    if (oar_copy_(t, oar_exp(in[0]))) return -1;       /* t is renamed to a new value */
    oar_tensor *u = oar_mul_scalar(t, 2);
    if (oar_fill_(t, 3.0)) return -1;                  /* and again */
    out[0] = oar_add(oar_add(u, t), in[0]);            /* 2 e^x + 3 + x */
    return out[0] ? 0 : -1;
}

static oar_tensor *w16;

static int half(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx; /* f16 in, f16 weights: ops without half kernels run in f32, as eagerly */
    out[0] = oar_softmax(oar_add(oar_matmul(in[0], w16), oar_exp(in[0])), 1);
    return out[0] ? 0 : -1;
}

static void check(oar_trace_fn fn, int n_in, const oar_graph_input_spec *specs, int n_out,
                  oar_tensor *(*make)(int i, int64_t batch)) {
    oar_graph *g = oar_trace(fn, NULL, n_in, specs, n_out, NULL);
    CHECK(g != NULL);
    if (!g) return;
    oar_executor *ex = oar_executor_new(g);
    for (int64_t batch = 2; batch <= 3; batch++) {
        oar_pool *p = oar_pool_push();
        oar_tensor *in[4], *want[4], *got[4];
        for (int i = 0; i < n_in; i++) in[i] = make(i, batch);
        CHECK(fn(NULL, in, want) == 0);
        CHECK(oar_executor_run(ex, in, got) == 0);
        for (int j = 0; j < n_out; j++) CHECK_NEAR(max_diff(got[j], want[j]), 0, 1e-5);
        oar_pool_pop(p);
    }
    /* the optimised graph agrees too */
    CHECK(oar_graph_optimize(g, OAR_PASSES_INFERENCE, 0) == 0);
    oar_executor_free(ex);
    ex = oar_executor_new(g);
    oar_pool *p = oar_pool_push();
    oar_tensor *in[4], *want[4], *got[4];
    for (int i = 0; i < n_in; i++) in[i] = make(i, 4);
    CHECK(fn(NULL, in, want) == 0 && oar_executor_run(ex, in, got) == 0);
    for (int j = 0; j < n_out; j++) CHECK_NEAR(max_diff(got[j], want[j]), 0, 1e-5);
    oar_pool_pop(p);
    oar_executor_free(ex);
    oar_graph_free(g);
}

static oar_tensor *make_x3(int i, int64_t b) { (void)i; return oar_randn(OAR_F32, 3, (int64_t[]){b, 6, 8}); }
static oar_tensor *make_idx(int i, int64_t b) { (void)i; return oar_randint(0, 10, OAR_I64, 2, (int64_t[]){b, 5}); }
static oar_tensor *make_multi(int i, int64_t b) {
    return i == 0 ? oar_randn(OAR_F32, 2, (int64_t[]){b, 6}) : oar_randint(-2, 3, OAR_I64, 2, (int64_t[]){b, 6});
}
static oar_tensor *make_x2(int i, int64_t b) { (void)i; return oar_randn(OAR_F32, 2, (int64_t[]){b, 6}); }

static oar_tensor *make_h(int i, int64_t b) {
    (void)i;
    return oar_cast(oar_randn(OAR_F32, 2, (int64_t[]){b, 6}), OAR_F16);
}

static void test_half(void) {
    oar_graph_input_spec s = {.name = "x", .dtype = OAR_F16, .ndim = 2, .shape = {-1, 6}, .dim_names = {"B"}};
    check(half, 1, &s, 1, make_h);
}

static void test_attention(void) {
    oar_graph_input_spec s = {.name = "x", .dtype = OAR_F32, .ndim = 3, .shape = {-1, 6, 8}, .dim_names = {"B"}};
    check(attention, 1, &s, 1, make_x3);
}

static void test_lookup(void) {
    oar_graph_input_spec s = {.name = "tokens", .dtype = OAR_I64, .ndim = 2, .shape = {-1, 5}, .dim_names = {"B"}};
    check(lookup, 1, &s, 1, make_idx);
    /* the flattened [B*5] is a multiple of the symbol: printed, saved and loaded as such */
    oar_graph *g = oar_trace(lookup, NULL, 1, &s, 1, NULL);
    char buf[8192] = {0};
    FILE *f = fmemopen(buf, sizeof buf - 1, "w");
    oar_graph_print(g, f);
    fclose(f);
    CHECK(strstr(buf, "i=[5*B]") != NULL);
    char dir[] = "/tmp/oar_ops_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    CHECK(oar_graph_save(g, dir) == 0);
    oar_graph *h = oar_graph_load(dir);
    CHECK(h != NULL);
    oar_executor *ex = oar_executor_new(h);
    oar_pool *p = oar_pool_push();
    oar_tensor *idx = make_idx(0, 7), *want = NULL, *got = NULL;
    lookup(NULL, &idx, &want);
    CHECK(oar_executor_run(ex, &idx, &got) == 0);
    CHECK_NEAR(max_diff(got, want), 0, 1e-6);
    oar_pool_pop(p);
    oar_executor_free(ex);
    oar_graph_free(h);
    oar_graph_free(g);
    char cmd[64];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

static void test_multi(void) {
    oar_graph_input_spec s[2] = {
        {.name = "x", .dtype = OAR_F32, .ndim = 2, .shape = {-1, 6}, .dim_names = {"B"}},
        {.name = "n", .dtype = OAR_I64, .ndim = 2, .shape = {-1, 6}, .dim_names = {"B"}}};
    check(multi, 2, s, 2, make_multi);
}

static void test_inplace(void) {
    oar_graph_input_spec s = {.name = "x", .dtype = OAR_F32, .ndim = 2, .shape = {-1, 6}, .dim_names = {"B"}};
    check(inplace, 1, &s, 1, make_x2);
}

int main(void) {
    oar_manual_seed(9);
    wq = oar_randn(OAR_F32, 2, (int64_t[]){8, 8});
    wk = oar_randn(OAR_F32, 2, (int64_t[]){8, 8});
    wv = oar_randn(OAR_F32, 2, (int64_t[]){8, 8});
    ln_w = oar_rand(OAR_F32, 1, (int64_t[]){8});
    ln_b = oar_randn(OAR_F32, 1, (int64_t[]){8});
    emb = oar_randn(OAR_F32, 2, (int64_t[]){10, 4});
    oar_pool *p = oar_pool_push();
    w16 = oar_tensor_retain(oar_cast(oar_randn(OAR_F32, 2, (int64_t[]){6, 6}), OAR_F16));
    oar_pool_pop(p);
    RUN(test_attention);
    RUN(test_lookup);
    RUN(test_multi);
    RUN(test_inplace);
    RUN(test_half);
    oar_tensor_release(w16);
    oar_tensor *all[] = {wq, wk, wv, ln_w, ln_b, emb};
    for (int i = 0; i < 6; i++) oar_tensor_release(all[i]);
    return test_summary();
}

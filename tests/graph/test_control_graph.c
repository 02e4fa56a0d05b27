/* Control flow in static graphs: oar_cond / oar_while_loop on traced values
 * become cond / while nodes with sub-graphs. The graph, run at inputs that
 * take different branches and trip counts (and batch sizes), agrees with
 * the same function run eagerly; nesting, captured outer values, the
 * passes, cloning, compiling, saving, loading and the predictor keep it so;
 * malformed sub-graphs in model.json, max_iters and shape changes fail
 * with messages naming the problem. */
#include "graph_test_util.h"
#include "saved_model_util.h"

#include <oar/infer.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* What the model functions read besides their inputs: values captured by
 * the callbacks (symbolic while tracing, concrete when run eagerly). */
typedef struct model_ctx {
    oar_tensor *y;            /* the second input, read inside branches and bodies */
    oar_tensor *bias;         /* a concrete tensor read inside a branch */
    double limit;
    int64_t max_iters;
} model_ctx;

static oar_tensor *vec(int n, const float *v) { return oar_tensor_from_data(v, OAR_F32, 1, (int64_t[]){n}); }

static oar_tensor *mat(int r, int c, const float *v) {
    return oar_tensor_from_data(v, OAR_F32, 2, (int64_t[]){r, c});
}

/* ---- cond: y = sum(x) > 0 ? (x*x + w + bias, sum x) : (exp(-x) * w, 2 sum x) -- */

static int then_a(void *ctx, int n_in, oar_tensor *const *in, int n_out, oar_tensor **out) {
    model_ctx *m = ctx;
    (void)n_in, (void)n_out;
    out[0] = oar_add(oar_add(oar_mul(in[0], in[0]), in[1]), m->bias);
    out[1] = oar_sum(in[0], 0, NULL, false);
    return out[0] && out[1] ? 0 : -1;
}

static int else_a(void *ctx, int n_in, oar_tensor *const *in, int n_out, oar_tensor **out) {
    (void)ctx, (void)n_in, (void)n_out;
    out[0] = oar_mul(oar_exp(oar_neg(in[0])), in[1]);
    out[1] = oar_mul_scalar(oar_sum(in[0], 0, NULL, false), 2);
    return out[0] && out[1] ? 0 : -1;
}

static int cond_model(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    oar_tensor *pred = oar_gt(oar_sum(in[0], 0, NULL, false), oar_scalar(0));
    oar_tensor *args[2] = {in[0], in[1]}, *o[2];
    int st = oar_cond(pred, then_a, else_a, ctx, 2, args, 2, o);
    if (st) return st;
    out[0] = oar_add_scalar(o[0], 1); /* ops after the node */
    out[1] = o[1];
    return 0;
}

/* Runs g's executor and the model eagerly on the same inputs; compares. */
static void check_against_eager(oar_executor *ex, oar_trace_fn fn, model_ctx *m, int n_in, oar_tensor **in,
                                int n_out, double tol) {
    oar_tensor *got[4] = {0}, *want[4] = {0};
    CHECK(oar_executor_run(ex, in, got) == 0);
    oar_tensor *y = m->y;
    m->y = n_in > 1 ? in[1] : NULL;
    CHECK(fn(m, in, want) == 0);
    m->y = y;
    for (int j = 0; j < n_out; j++) CHECK_NEAR(max_diff(got[j], want[j]), 0, tol);
}

static oar_graph *trace_cond_model(model_ctx *m) {
    oar_graph_input_spec s[2] = {{.name = "x", .dtype = OAR_F32, .ndim = 2, .shape = {-1, 3}, .dim_names = {"N"}},
                                 {.name = "w", .dtype = OAR_F32, .ndim = 1, .shape = {3}}};
    return oar_trace(cond_model, m, 2, s, 2, NULL);
}

static void test_cond_graph(void) {
    oar_pool *p = oar_pool_push();
    model_ctx m = {.bias = vec(3, (float[]){0.5f, -1, 2})};
    oar_graph *g = trace_cond_model(&m);
    CHECK(g != NULL);
    if (!g) return;
    CHECK(oar_graph_count_op(g, "cond") == 1);
    CHECK(oar_graph_verify(g) == 0);
    oar_executor *ex = oar_executor_new(g);
    oar_tensor *w = vec(3, (float[]){1, 2, -3});
    /* positive sum (then) at N = 2, negative (else) at N = 4, then again */
    oar_tensor *xp = mat(2, 3, (float[]){1, 2, 3, -1, 0.5f, 0.25f});
    oar_tensor *xn = mat(4, 3, (float[]){-1, -2, 0.5f, 0.1f, -0.3f, 0.2f, -1, 1, -2, 0.7f, -0.1f, 0});
    for (int r = 0; r < 2; r++) {
        check_against_eager(ex, cond_model, &m, 2, (oar_tensor *[]){xp, w}, 2, 1e-5);
        check_against_eager(ex, cond_model, &m, 2, (oar_tensor *[]){xn, w}, 2, 1e-5);
    }
    oar_tensor *o[2];
    CHECK(oar_executor_run(ex, (oar_tensor *[]){xp, w}, o) == 0);
    CHECK_NEAR(oar_tensor_item(o[1]), 5.75, 1e-6);  /* then: sum x */
    CHECK(oar_executor_run(ex, (oar_tensor *[]){xn, w}, o) == 0);
    CHECK_NEAR(oar_tensor_item(o[1]), -7.8, 1e-5);  /* else: 2 sum x */
    /* the printer shows both branches, indented */
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    CHECK(oar_graph_print(g, f) == 0);
    fclose(f);
    CHECK(strstr(text, " = cond(") && strstr(text, "\n    then(") && strstr(text, "\n    else(") &&
          strstr(text, "      return out0="));
    free(text);
    oar_executor_free(ex);
    oar_graph_free(g);
    oar_pool_pop(p);
}

/* ---- while: (x, i): while sum(x) < limit: x = 2x + y, i += 1 ------------------ */

static int below(void *ctx, int n_in, oar_tensor *const *in, int n_out, oar_tensor **out) {
    model_ctx *m = ctx;
    (void)n_in, (void)n_out;
    out[0] = oar_lt(oar_sum(in[0], 0, NULL, false), oar_scalar(m->limit));
    return out[0] ? 0 : -1;
}

static int grow_body(void *ctx, int n_in, oar_tensor *const *in, int n_out, oar_tensor **out) {
    model_ctx *m = ctx;
    (void)n_in, (void)n_out;
    out[0] = oar_add(oar_mul_scalar(in[0], 2), m->y);
    out[1] = oar_add_scalar(in[1], 1);
    return out[0] && out[1] ? 0 : -1;
}

static int while_model(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    model_ctx *m = ctx;
    m->y = in[1];
    oar_tensor *init[2] = {in[0], oar_scalar(0)}, *o[2];
    int st = oar_while_loop(below, grow_body, m, 2, init, m->max_iters, o);
    if (st) return st;
    out[0] = oar_mul_scalar(o[0], 0.5);
    out[1] = o[1];
    return 0;
}

static void test_while_graph(void) {
    oar_pool *p = oar_pool_push();
    model_ctx m = {.limit = 100, .max_iters = -1};
    oar_graph_input_spec s[2] = {{.name = "x", .dtype = OAR_F32, .ndim = 1, .shape = {3}},
                                 {.name = "y", .dtype = OAR_F32, .ndim = 1, .shape = {3}}};
    oar_graph *g = oar_trace(while_model, &m, 2, s, 2, NULL);
    CHECK(g != NULL);
    if (!g) return;
    CHECK(oar_graph_count_op(g, "while") == 1);
    oar_executor *ex = oar_executor_new(g);
    oar_tensor *y = vec(3, (float[]){0.5f, 0, -0.25f});
    /* trip counts 0, 2 and 5 */
    const float starts[3] = {60, 10, 1};
    const int trips[3] = {0, 2, 5};
    for (int c = 0; c < 3; c++) {
        oar_tensor *x = vec(3, (float[]){starts[c], starts[c], starts[c]});
        check_against_eager(ex, while_model, &m, 2, (oar_tensor *[]){x, y}, 2, 1e-5);
        oar_tensor *o[2];
        CHECK(oar_executor_run(ex, (oar_tensor *[]){x, y}, o) == 0);
        CHECK_NEAR(oar_tensor_item(o[1]), trips[c], 0);
    }
    oar_executor_free(ex);
    oar_graph_free(g);
    /* max_iters: a bound the graph keeps; exceeding it fails at run time */
    m.max_iters = 3;
    g = oar_trace(while_model, &m, 2, s, 2, NULL);
    CHECK(g != NULL);
    ex = oar_executor_new(g);
    oar_tensor *o[2];
    CHECK(oar_executor_run(ex, (oar_tensor *[]){vec(3, (float[]){10, 10, 10}), y}, o) == 0);
    CHECK_STATUS_FAILS(oar_executor_run(ex, (oar_tensor *[]){vec(3, (float[]){1, 1, 1}), y}, o),
                       "still running after max_iters = 3");
    CHECK(oar_executor_run(ex, (oar_tensor *[]){vec(3, (float[]){10, 10, 10}), y}, o) == 0);
    CHECK_NEAR(oar_tensor_item(o[1]), 2, 0);
    oar_executor_free(ex);
    oar_graph_free(g);
    oar_pool_pop(p);
}

/* ---- nested: a cond inside a while body, its else branch reading y ----------- */

static int times3(void *ctx, int n_in, oar_tensor *const *in, int n_out, oar_tensor **out) {
    (void)ctx, (void)n_in, (void)n_out;
    out[0] = oar_mul_scalar(in[0], 3);
    return out[0] ? 0 : -1;
}

static int plus_y(void *ctx, int n_in, oar_tensor *const *in, int n_out, oar_tensor **out) {
    model_ctx *m = ctx;
    (void)n_in, (void)n_out;
    out[0] = oar_add(in[0], oar_exp(m->y)); /* y: two levels up */
    return out[0] ? 0 : -1;
}

static int count_below(void *ctx, int n_in, oar_tensor *const *in, int n_out, oar_tensor **out) {
    (void)ctx, (void)n_in, (void)n_out;
    out[0] = oar_lt(in[1], oar_scalar(6));
    return out[0] ? 0 : -1;
}

static int nested_body(void *ctx, int n_in, oar_tensor *const *in, int n_out, oar_tensor **out) {
    (void)n_in, (void)n_out;
    oar_tensor *pred = oar_lt(oar_sum(in[0], 0, NULL, false), oar_scalar(10));
    oar_tensor *x = NULL;
    int st = oar_cond(pred, times3, plus_y, ctx, 1, &in[0], 1, &x);
    if (st) return st;
    out[0] = x;
    out[1] = oar_add_scalar(in[1], 1);
    return out[1] ? 0 : -1;
}

static int nested_model(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    model_ctx *m = ctx;
    m->y = in[1];
    oar_tensor *init[2] = {in[0], oar_scalar(0)}, *o[2];
    int st = oar_while_loop(count_below, nested_body, m, 2, init, 100, o);
    if (st) return st;
    out[0] = o[0];
    return 0;
}

static oar_graph *trace_nested(model_ctx *m) {
    oar_graph_input_spec s[2] = {{.name = "x", .dtype = OAR_F32, .ndim = 2, .shape = {-1, 2}, .dim_names = {"N"}},
                                 {.name = "y", .dtype = OAR_F32, .ndim = 1, .shape = {2}}};
    return oar_trace(nested_model, m, 2, s, 1, NULL);
}

static oar_tensor *nested_x(int n, float scale) {
    float v[16];
    for (int i = 0; i < 2 * n; i++) v[i] = scale * (float)((i % 3) - 0.5);
    return mat(n, 2, v);
}

static void test_nested(void) {
    oar_pool *p = oar_pool_push();
    model_ctx m = {0};
    oar_graph *g = trace_nested(&m);
    CHECK(g != NULL);
    if (!g) return;
    oar_executor *ex = oar_executor_new(g);
    oar_tensor *y = vec(2, (float[]){0.1f, -0.2f});
    for (int n = 1; n <= 4; n += 3)
        for (float sc = -1; sc <= 1; sc += 2)
            check_against_eager(ex, nested_model, &m, 2, (oar_tensor *[]){nested_x(n, sc), y}, 1, 1e-4);
    /* a deep copy runs alike after the original is gone */
    oar_graph *c = oar_graph_clone(g);
    oar_executor_free(ex);
    oar_graph_free(g);
    CHECK(c != NULL);
    ex = oar_executor_new(c);
    check_against_eager(ex, nested_model, &m, 2, (oar_tensor *[]){nested_x(3, 1), y}, 1, 1e-4);
    oar_executor_free(ex);
    oar_graph_free(c);
    oar_pool_pop(p);
}

/* ---- passes, compiled kernels --------------------------------------------------- */

/* a body with dead code (an unused exp) and x*1 */
static int dead_body(void *ctx, int n_in, oar_tensor *const *in, int n_out, oar_tensor **out) {
    model_ctx *m = ctx;
    (void)n_in, (void)n_out;
    oar_exp(in[0]);
    out[0] = oar_mul_scalar(oar_add(oar_mul_scalar(in[0], 2), m->y), 1);
    out[1] = oar_add_scalar(in[1], 1);
    return out[0] && out[1] ? 0 : -1;
}

static int dead_model(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    model_ctx *m = ctx;
    m->y = in[1];
    oar_tensor *init[2] = {in[0], oar_scalar(0)}, *o[2], *unused[2];
    int st = oar_while_loop(below, dead_body, m, 2, init, -1, o);
    /* a cond whose results nobody reads: removed whole by dce */
    oar_tensor *pred = oar_gt(oar_sum(in[0], 0, NULL, false), oar_scalar(0));
    if (!st) st = oar_cond(pred, times3, times3, m, 1, &in[1], 1, unused);
    if (st) return st;
    out[0] = oar_tanh(oar_mul_scalar(oar_add_scalar(o[0], 1), 0.01)); /* a fusible chain after it */
    return out[0] ? 0 : -1;
}

static int count_text(const oar_graph *g, const char *needle) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    oar_graph_print(g, f);
    fclose(f);
    int n = 0;
    for (const char *s = text; (s = strstr(s, needle)); s++) n++;
    free(text);
    return n;
}

static void test_passes(void) {
    oar_pool *p = oar_pool_push();
    model_ctx m = {.limit = 50};
    oar_graph_input_spec s[2] = {{.name = "x", .dtype = OAR_F32, .ndim = 1, .shape = {3}},
                                 {.name = "y", .dtype = OAR_F32, .ndim = 1, .shape = {3}}};
    oar_tensor *y = vec(3, (float[]){1, 0, 0.5f});
    oar_tensor *xs[2] = {vec(3, (float[]){1, 2, 3}), vec(3, (float[]){-20, 1, 0})};
    static const char *const passes[] = {"dce", "cse", "constant_fold", "simplify", "drop_dropout",
                                         "fold_batch_norm"};
    for (int k = 0; k < 7; k++) { /* each pass alone, then the whole list */
        oar_graph *g = oar_trace(dead_model, &m, 2, s, 1, NULL);
        CHECK(g != NULL);
        if (!g) continue;
        CHECK(count_text(g, "exp(") == 1 && oar_graph_count_op(g, "cond") == 1);
        if (k < 6) CHECK(oar_graph_run_pass(g, passes[k]) >= 0);
        else CHECK(oar_graph_optimize(g, OAR_PASSES_INFERENCE, 0) == 0);
        CHECK(oar_graph_verify(g) == 0);
        if (k == 0 || k == 6) CHECK(oar_graph_count_op(g, "cond") == 0);
        if (k == 6) CHECK(count_text(g, "exp(") == 0); /* dce inside the body */
        CHECK(oar_graph_count_op(g, "while") == 1);
        oar_executor *ex = oar_executor_new(g);
        for (int i = 0; i < 2; i++) check_against_eager(ex, dead_model, &m, 2, (oar_tensor *[]){xs[i], y}, 1, 1e-5);
        /* compiled: the while node is a barrier, the chain after it fuses */
        if (k == 6) {
            CHECK(oar_executor_compile(ex) == 0);
            for (int i = 0; i < 2; i++)
                check_against_eager(ex, dead_model, &m, 2, (oar_tensor *[]){xs[i], y}, 1, 1e-5);
        }
        oar_executor_free(ex);
        oar_graph_free(g);
    }
    oar_pool_pop(p);
}

/* ---- saved models and the predictor --------------------------------------------- */

static char dir[] = "/tmp/oar_ctrl_XXXXXX";

static void test_save_load(void) {
    oar_pool *p = oar_pool_push();
    model_ctx m = {.bias = vec(3, (float[]){0.5f, -1, 2})};
    char sub[64];
    snprintf(sub, sizeof sub, "%s/cond", dir);
    oar_graph *g = trace_cond_model(&m);
    CHECK(g && oar_graph_save(g, sub) == 0);
    oar_graph *l = oar_graph_load(sub);
    CHECK(l != NULL);
    if (l) {
        CHECK(oar_graph_count_op(l, "cond") == 1);
        oar_executor *ex = oar_executor_new(l);
        oar_tensor *w = vec(3, (float[]){1, 2, -3});
        check_against_eager(ex, cond_model, &m, 2, (oar_tensor *[]){mat(1, 3, (float[]){1, 1, 1}), w}, 2, 1e-5);
        check_against_eager(ex, cond_model, &m, 2, (oar_tensor *[]){mat(2, 3, (float[]){-1, 1, -1, 0, 0, -3}), w}, 2, 1e-5);
        oar_executor_free(ex);
    }
    oar_graph_free(l);
    oar_graph_free(g);
    /* the nested model through the predictor (inference passes, compiled) and a clone */
    snprintf(sub, sizeof sub, "%s/nested", dir);
    g = trace_nested(&m);
    CHECK(g && oar_graph_save(g, sub) == 0);
    oar_graph_free(g);
    oar_predictor_config cfg = {.model_dir = sub, .optimize = true};
    oar_predictor *pr = oar_predictor_create(&cfg);
    CHECK(pr != NULL);
    oar_predictor *pc = pr ? oar_predictor_clone(pr) : NULL;
    oar_tensor *y = vec(2, (float[]){0.1f, -0.2f});
    for (int n = 1; pr && pc && n <= 5; n += 4) {
        oar_tensor *x = nested_x(n, n == 1 ? 1 : -1), *in[2] = {x, y}, *want[1] = {NULL}, *got[1] = {NULL}, *got2[1] = {NULL};
        m.y = y;
        CHECK(nested_model(&m, in, want) == 0);
        CHECK(oar_predictor_run(pr, in, got) == 0);
        CHECK(oar_predictor_run(pc, in, got2) == 0);
        CHECK_NEAR(max_diff(got[0], want[0]), 0, 1e-4);
        CHECK_NEAR(max_diff(got2[0], want[0]), 0, 1e-4);
        oar_tensor_release(got[0]);
        oar_tensor_release(got2[0]);
    }
    oar_predictor_free(pc);
    oar_predictor_free(pr);
    oar_pool_pop(p);
}

/* A hand-written model.json: y = p ? -x : x (x f32 [3], p f32 []). THEN and
 * ELSE are the sub-graphs; variants break one thing each. */
#define VALUES_X "{\"kind\":\"input\",\"dtype\":\"float32\",\"shape\":[3],\"name\":\"in0\"}"
#define THEN_OK "{\"values\":[" VALUES_X ",{\"kind\":\"node\",\"dtype\":\"float32\",\"shape\":[3]}],\"inputs\":[0]," \
                "\"nodes\":[{\"op\":\"neg\",\"in\":[0],\"out\":[1],\"i\":[],\"f\":[]}],\"outputs\":[{\"name\":\"out0\",\"value\":1}]}"
#define ELSE_OK "{\"values\":[" VALUES_X "],\"inputs\":[0],\"nodes\":[],\"outputs\":[{\"name\":\"out0\",\"value\":0}]}"

static char weights_record[1024]; /* the saved folder's manifest, for the hand-written files */

static void write_model(const char *path, int version, const char *op, const char *graphs) {
    FILE *f = fopen(path, "w");
    fprintf(f,
            "{\"format\":\"oar.graph\",\"version\":%d,%s,\"symbols\":[],\"values\":["
            "{\"kind\":\"input\",\"dtype\":\"float32\",\"shape\":[3],\"name\":\"x\"},"
            "{\"kind\":\"input\",\"dtype\":\"float32\",\"shape\":[],\"name\":\"p\"},"
            "{\"kind\":\"node\",\"dtype\":\"float32\",\"shape\":[3]}],\"inputs\":[0,1],"
            "\"nodes\":[{\"op\":\"%s\",\"in\":[1,0],\"out\":[2],\"i\":[],\"f\":[]%s%s}],"
            "\"outputs\":[{\"name\":\"y\",\"value\":2}]}",
            version, weights_record, op, graphs ? ",\"graphs\":" : "", graphs ? graphs : "");
    fclose(f);
}

static int select_model(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    return oar_cond(in[1], times3, times3, ctx, 1, in, 1, out);
}

static void test_malformed(void) {
    oar_pool *p = oar_pool_push();
    char sub[64], path[96];
    snprintf(sub, sizeof sub, "%s/bad", dir);
    snprintf(path, sizeof path, "%s/model.json", sub);
    /* a saved model with no constants gives the (empty) weights file */
    oar_graph_input_spec s[2] = {{.name = "x", .dtype = OAR_F32, .ndim = 1, .shape = {3}},
                                 {.name = "p", .dtype = OAR_F32, .ndim = 0}};
    oar_graph *g = oar_trace(select_model, NULL, 2, s, 1, NULL);
    CHECK(g && oar_graph_save(g, sub) == 0);
    oar_graph_free(g);
    sm_weights_record(sub, weights_record, sizeof weights_record);
    { /* the same weights under the name older formats (1, 2) read */
        char wp[512], legacy[512];
        size_t n = 0;
        CHECK(sm_weights_path(sub, wp, sizeof wp) == 0);
        char *w = sm_slurp(wp, &n);
        snprintf(legacy, sizeof legacy, "%s/weights.safetensors", sub);
        if (w) sm_spit(legacy, w, n);
        free(w);
    }
    write_model(path, 3, "cond", "[" THEN_OK "," ELSE_OK "]");
    g = oar_graph_load(sub);
    CHECK(g != NULL);
    if (g) {
        oar_executor *ex = oar_executor_new(g);
        oar_tensor *x = vec(3, (float[]){1, -2, 3}), *o;
        CHECK(oar_executor_run(ex, (oar_tensor *[]){x, oar_scalar_of(1, OAR_F32)}, &o) == 0);
        CHECK_VALUES(o, ((double[]){-1, 2, -3}), 3, 0);
        CHECK(oar_executor_run(ex, (oar_tensor *[]){x, oar_scalar_of(0, OAR_F32)}, &o) == 0);
        CHECK_VALUES(o, ((double[]){1, -2, 3}), 3, 0);
        oar_executor_free(ex);
        oar_graph_free(g);
    }
    struct {
        int version;
        const char *op, *graphs, *needle;
    } bad[] = {
        {1, "cond", "[" THEN_OK "," ELSE_OK "]", "needs format version 2"},
        {3, "cond", NULL, "needs \"graphs\""},
        {3, "cond", "[" THEN_OK "]", "needs \"graphs\""},
        {3, "neg", "[" THEN_OK "," ELSE_OK "]", "only cond and while nodes have sub-graphs"},
        {3, "cond", "[" THEN_OK ",7]", "else sub-graph: is not an object"},
        {3, "cond", "[" THEN_OK ",{\"values\":[]}]", "a sub-graph has no"},
        {3, "cond", "[{\"values\":[" VALUES_X "],\"inputs\":[0],\"nodes\":[{\"op\":\"neg\",\"in\":[5],\"out\":[1],"
                    "\"i\":[],\"f\":[]}],\"outputs\":[{\"name\":\"out0\",\"value\":0}]}," ELSE_OK "]",
         "then sub-graph: node 0 is not a value id"},
        {3, "cond", "[{\"values\":[" VALUES_X ",{\"kind\":\"const\",\"dtype\":\"float32\",\"shape\":[3],\"name\":\"k\"}],"
                    "\"inputs\":[0],\"nodes\":[],\"outputs\":[{\"name\":\"out0\",\"value\":1}]}," ELSE_OK "]",
         "sub-graphs take constants as inputs"},
        {3, "cond", "[" THEN_OK ",{\"values\":[{\"kind\":\"input\",\"dtype\":\"float32\",\"shape\":[4],\"name\":\"a\"}],"
                    "\"inputs\":[0],\"nodes\":[],\"outputs\":[{\"name\":\"out0\",\"value\":0}]}]",
         "else input 0 is float32 [4] but should be float32 [3]"},
        {3, "cond", "[" THEN_OK ",{\"values\":[" VALUES_X "," VALUES_X "],\"inputs\":[0,1],\"nodes\":[],"
                    "\"outputs\":[{\"name\":\"out0\",\"value\":0}]}]",
         "the else sub-graph has 2 inputs and 1 outputs; the node passes 1"},
        {3, "cond", "[" THEN_OK ",{\"values\":[" VALUES_X "],\"inputs\":[0],\"nodes\":[],\"outputs\":[{\"name\":\"o\",\"value\":3}]}]",
         "an output is not a value id"},
        {3, "while", "[" THEN_OK "," ELSE_OK "]", "needs one attribute, max_iters"},
        {3, "cond", "[" THEN_OK "," ELSE_OK "]]", "not valid JSON"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        write_model(path, bad[k].version, bad[k].op, bad[k].graphs);
        CHECK_FAILS(oar_graph_load(sub), bad[k].needle);
    }
    /* every truncation of a valid file fails cleanly */
    write_model(path, 3, "cond", "[" THEN_OK "," ELSE_OK "]");
    FILE *f = fopen(path, "rb");
    char full[4096];
    size_t n = fread(full, 1, sizeof full, f);
    fclose(f);
    int failed = 0;
    for (size_t cut = 0; cut + 1 < n; cut += 3) {
        f = fopen(path, "wb");
        fwrite(full, 1, cut, f);
        fclose(f);
        oar_graph *t = oar_graph_load(sub);
        failed += t == NULL && strstr(oar_last_error(), "model.json") != NULL;
        oar_graph_free(t);
    }
    CHECK(failed == (int)((n - 2) / 3 + 1));
    oar_pool_pop(p);
}

/* ---- graph gradients through a cond node ---------------------------------------- */

/* cond_model's output 0 summed: then x*x + w + bias + 1, else exp(-x) * w + 1.
 * First order (closed forms): then d/dx = 2x, d/dw = N; else d/dx =
 * -exp(-x) w, d/dw = sum over rows of exp(-x). Second order of sum(d/dx)
 * by x: then 2, else exp(-x) w. */
static void test_cond_gradient(void) {
    oar_pool *p = oar_pool_push();
    model_ctx m = {.bias = vec(3, (float[]){0.5f, -1, 2})};
    oar_graph *g = trace_cond_model(&m);
    CHECK(g != NULL);
    if (!g) return;
    int first = oar_graph_append_backward(g, 0, 2, (int[]){0, 1});
    CHECK(first == 2);
    CHECK(oar_graph_count_op(g, "cond") == 2); /* the forward one and the gradient one */
    int second = oar_graph_append_backward(g, 2, 1, (int[]){0});
    CHECK(second == 4);
    CHECK(oar_graph_count_op(g, "cond") == 3);
    CHECK(oar_graph_optimize(g, OAR_PASSES_TRAINING, 0) == 0);
    oar_executor *ex = oar_executor_new(g);
    oar_tensor *w = vec(3, (float[]){1, 2, -3});
    float xv[2][6] = {{1, 2, 3, -1, 0.5f, 0.25f}, {-1, -2, 0.5f, 0.1f, -0.3f, 0.2f}};
    for (int c = 0; c < 2; c++) {
        oar_tensor *x = mat(2, 3, xv[c]), *o[5];
        CHECK(oar_executor_run(ex, (oar_tensor *[]){x, w}, o) == 0);
        double gx[6], gw[3] = {0, 0, 0}, hx[6];
        const float *wv = (const float[]){1, 2, -3};
        for (int i = 0; i < 6; i++) {
            double e = exp(-(double)xv[c][i]);
            gx[i] = c == 0 ? 2.0 * xv[c][i] : -e * wv[i % 3];
            gw[i % 3] += c == 0 ? 1 : e;
            hx[i] = c == 0 ? 2 : e * wv[i % 3];
        }
        CHECK_VALUES(o[2], gx, 6, 1e-5);
        CHECK_VALUES(o[3], gw, 3, 1e-5);
        CHECK_VALUES(o[4], hx, 6, 1e-5);
    }
    oar_executor_free(ex);
    oar_graph_free(g);
    oar_pool_pop(p);
}

/* while_model's output 0 summed: x_n = 2^n x + (2^n - 1) y after n trips,
 * times 0.5: d/dx = 2^(n-1), d/dy = (2^n - 1) / 2 per element (the trip
 * count is piecewise constant in x). */
static void test_while_gradient(void) {
    oar_pool *p = oar_pool_push();
    model_ctx m = {.limit = 100, .max_iters = -1};
    oar_graph_input_spec s[2] = {{.name = "x", .dtype = OAR_F32, .ndim = 1, .shape = {3}},
                                 {.name = "y", .dtype = OAR_F32, .ndim = 1, .shape = {3}}};
    oar_graph *g = oar_trace(while_model, &m, 2, s, 2, NULL);
    CHECK(g != NULL);
    if (!g) return;
    CHECK(oar_graph_append_backward(g, 0, 2, (int[]){0, 1}) == 2);
    CHECK(oar_graph_optimize(g, OAR_PASSES_TRAINING, 0) == 0);
    oar_executor *ex = oar_executor_new(g);
    oar_tensor *y = vec(3, (float[]){0.5f, 0, -0.25f});
    const float starts[3] = {60, 10, 1};
    const int trips[3] = {0, 2, 5};
    for (int c = 0; c < 3; c++) {
        oar_tensor *x = vec(3, (float[]){starts[c], starts[c], starts[c]}), *o[4];
        CHECK(oar_executor_run(ex, (oar_tensor *[]){x, y}, o) == 0);
        double p2 = (double)(1 << trips[c]), gx[3] = {p2 / 2, p2 / 2, p2 / 2};
        double gy[3] = {(p2 - 1) / 2, (p2 - 1) / 2, (p2 - 1) / 2};
        CHECK_NEAR(oar_tensor_item(o[1]), trips[c], 0);
        CHECK_VALUES(o[2], gx, 3, 1e-6);
        CHECK_VALUES(o[3], gy, 3, 1e-6);
    }
    oar_executor_free(ex);
    oar_graph_free(g);
    oar_pool_pop(p);
}

/* ---- trace-time errors and limits ----------------------------------------------- */

static int widen_body(void *ctx, int n_in, oar_tensor *const *in, int n_out, oar_tensor **out) {
    (void)ctx, (void)n_in, (void)n_out;
    out[0] = oar_concat(2, (oar_tensor *[]){in[0], in[0]}, 0);
    out[1] = oar_add_scalar(in[1], 1);
    return 0;
}

static int widen_model(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    oar_tensor *init[2] = {in[0], oar_scalar(0)}, *o[2];
    int st = oar_while_loop(below, widen_body, ctx, 2, init, -1, o);
    out[0] = st ? NULL : o[0];
    return st;
}

static int sum_fn(void *ctx, int n_in, oar_tensor *const *in, int n_out, oar_tensor **out) {
    (void)ctx, (void)n_in, (void)n_out;
    out[0] = oar_sum(in[0], 0, NULL, false);
    return 0;
}

static int disagree_model(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    oar_tensor *pred = oar_gt(oar_sum(in[0], 0, NULL, false), oar_scalar(0));
    return oar_cond(pred, times3, sum_fn, ctx, 1, in, 1, out);
}

/* loop variables concrete, the predicate reading a traced value */
static int uncarried_cond(void *ctx, int n_in, oar_tensor *const *in, int n_out, oar_tensor **out) {
    model_ctx *m = ctx;
    (void)n_in, (void)n_out;
    out[0] = oar_lt(oar_add(in[0], oar_sum(m->y, 0, NULL, false)), oar_scalar(5));
    return 0;
}

static int count_up(void *ctx, int n_in, oar_tensor *const *in, int n_out, oar_tensor **out) {
    (void)ctx, (void)n_in, (void)n_out;
    out[0] = oar_add_scalar(in[0], 1);
    return 0;
}

static int uncarried_model(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    model_ctx *m = ctx;
    m->y = in[0];
    oar_tensor *i0 = oar_scalar(0);
    return oar_while_loop(uncarried_cond, count_up, ctx, 1, &i0, -1, out);
}

/* the then branch keeps a symbolic tensor that the else branch reads */
static oar_tensor *stash;

static int stash_then(void *ctx, int n_in, oar_tensor *const *in, int n_out, oar_tensor **out) {
    (void)ctx, (void)n_in, (void)n_out;
    out[0] = oar_exp(in[0]);
    stash = oar_tensor_retain(out[0]); /* kept past the branch (the misuse under test) */
    return 0;
}

static int stash_else(void *ctx, int n_in, oar_tensor *const *in, int n_out, oar_tensor **out) {
    (void)ctx, (void)n_in, (void)n_out;
    out[0] = oar_add(in[0], stash);
    return 0;
}

static int escape_model(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    oar_tensor *pred = oar_gt(oar_sum(in[0], 0, NULL, false), oar_scalar(0));
    return oar_cond(pred, stash_then, stash_else, ctx, 1, in, 1, out);
}

/* a cond whose then branch holds a while loop */
static int loop_branch(void *ctx, int n_in, oar_tensor *const *in, int n_out, oar_tensor **out) {
    (void)n_in, (void)n_out;
    oar_tensor *init[2] = {in[0], oar_scalar(0)}, *o[2];
    int st = oar_while_loop(below, grow_body, ctx, 2, init, -1, o);
    out[0] = st ? NULL : o[0];
    return st;
}

static int loop_in_cond_model(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    model_ctx *m = ctx;
    m->y = in[0];
    oar_tensor *pred = oar_gt(oar_sum(in[0], 0, NULL, false), oar_scalar(0));
    return oar_cond(pred, loop_branch, times3, ctx, 1, in, 1, out);
}

static void test_trace_errors(void) {
    oar_pool *p = oar_pool_push();
    model_ctx m = {.limit = 100};
    oar_graph_input_spec s = {.name = "x", .dtype = OAR_F32, .ndim = 1, .shape = {3}};
    CHECK_FAILS(oar_trace(widen_model, &m, 1, &s, 1, NULL),
                "traced body changes loop variable 0 from float32 [3] to float32 [6]");
    CHECK_FAILS(oar_trace(disagree_model, &m, 1, &s, 1, NULL),
                "output 0 is float32 [3] in the then branch but float32 [] in the else branch");
    CHECK_FAILS(oar_trace(uncarried_model, &m, 1, &s, 1, NULL), "pass the traced values the loop reads as loop variables");
    CHECK_FAILS(oar_trace(escape_model, &m, 1, &s, 1, NULL), "reads a symbolic tensor of another trace");
    oar_tensor_release(stash);
    oar_pool_pop(p);
}

/* Graph gradients of a model with nested control flow (traced with
 * specs, one output) against eager autograd on the same inputs. */
static void check_nested_gradient(oar_trace_fn fn, model_ctx *m, int n_in, const oar_graph_input_spec *specs,
                                  oar_tensor **in) {
    oar_graph *g = oar_trace(fn, m, n_in, specs, 1, NULL);
    CHECK(g != NULL);
    if (!g) return;
    int all[4] = {0, 1, 2, 3};
    CHECK(oar_graph_append_backward(g, 0, n_in, all) == 1);
    oar_executor *ex = oar_executor_new(g);
    oar_tensor *got[5] = {0};
    CHECK(oar_executor_run(ex, in, got) == 0);
    oar_tensor *leaf[4], *want[4] = {0}, *y[1] = {0};
    for (int i = 0; i < n_in; i++) {
        leaf[i] = oar_clone(in[i]);
        oar_tensor_set_requires_grad(leaf[i], true);
    }
    CHECK(fn(m, leaf, y) == 0);
    oar_tensor *s = oar_sum(y[0], 0, NULL, false);
    CHECK(oar_grad(1, &s, NULL, n_in, leaf, false, true, want) == 0);
    CHECK_NEAR(max_diff(got[0], y[0]), 0, 1e-4);
    for (int i = 0; i < n_in; i++) /* unused eagerly (a branch not taken): zeros in the graph */
        CHECK_NEAR(max_diff(got[1 + i], want[i] ? want[i] : oar_mul_scalar(leaf[i], 0)), 0, 1e-4);
    oar_executor_free(ex);
    oar_graph_free(g);
}

/* gradients through a cond inside a while body (with y captured two levels
 * down) and through a while loop inside a cond branch */
static void test_nested_gradient(void) {
    oar_pool *p = oar_pool_push();
    model_ctx m = {.limit = 30};
    oar_graph_input_spec s[2] = {{.name = "x", .dtype = OAR_F32, .ndim = 2, .shape = {-1, 2}, .dim_names = {"N"}},
                                 {.name = "y", .dtype = OAR_F32, .ndim = 1, .shape = {2}}};
    oar_tensor *y = vec(2, (float[]){0.1f, -0.2f});
    for (float sc = -1; sc <= 1; sc += 2)
        check_nested_gradient(nested_model, &m, 2, s, (oar_tensor *[]){nested_x(3, sc), y});
    oar_graph_input_spec s1 = {.name = "x", .dtype = OAR_F32, .ndim = 1, .shape = {3}};
    check_nested_gradient(loop_in_cond_model, &m, 1, &s1, (oar_tensor *[]){vec(3, (float[]){1, 2, 0.5f})});
    check_nested_gradient(loop_in_cond_model, &m, 1, &s1, (oar_tensor *[]){vec(3, (float[]){-1, 2, -3})});
    oar_pool_pop(p);
}

int main(void) {
    if (!mkdtemp(dir)) return 1;
    RUN(test_cond_graph);
    RUN(test_while_graph);
    RUN(test_nested);
    RUN(test_passes);
    RUN(test_save_load);
    RUN(test_malformed);
    RUN(test_cond_gradient);
    RUN(test_while_gradient);
    RUN(test_nested_gradient);
    RUN(test_trace_errors);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) return 1;
    return test_summary();
}

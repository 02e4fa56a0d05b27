/* ONNX export (include/oar/onnx.h): traced models (MLP, CNN with conv, pool
 * and batch norm, a transformer encoder layer, and one function calling
 * every mapped op) are exported at opsets 13, 14 and 17, read back with
 * oar's ONNX importer and run by the executor at a batch other than the
 * traced one; outputs must equal the original graph's. Failure paths: NULL
 * arguments, bad opsets, an unwritable path, ops and outputs with no ONNX
 * equivalent, every allocation failing in turn, and the `oar export` CLI.
 *
 * With OAR_ONNX_EXPORT_DIR set, each exported model and its inputs and oar
 * outputs (.npy) are also written there, for tests/ref/onnx_export_check.py
 * (onnx.checker and ONNX Runtime; Python is never needed by this test). */
#include "graph/graph_test_util.h"

#include <oar/infer.h>
#include <oar/onnx.h>
#include <oar/oar.h>
#include <sys/stat.h>
#include <unistd.h>
#include "alloc_fail.h"

static char dir[] = "/tmp/oar_onnxexp_XXXXXX", exe[4096];
/* When set, the re-imported graph must have as many nodes of each of these
 * ops as the exported one (the same graph, up to the weight transposes the
 * importer folds into its constants). */
static const char *const *same_ops;

#define MAX_IO 64

typedef struct model_case {
    const char *name;
    oar_graph *g;
    int n_in;
    oar_tensor *in[MAX_IO]; /* inputs at the test batch */
} model_case;

/* Runs g on the case inputs; outputs are new references (caller releases). */
static int run_graph(const oar_graph *g, model_case *c, oar_tensor **out) {
    oar_executor *ex = oar_executor_new(g);
    oar_tensor *y[MAX_IO];
    int st = ex ? oar_executor_run(ex, c->in, y) : -1;
    for (int j = 0; j < oar_graph_num_outputs(g); j++) {
        out[j] = NULL;
        if (!st) {
            out[j] = y[j];
            oar_tensor_retain(y[j]);
        }
    }
    oar_executor_free(ex);
    return st;
}

/* Writes the model's files for the Python check when OAR_ONNX_EXPORT_DIR is set. */
static void dump_for_python(model_case *c, const char *tag, int opset, oar_tensor *const *want) {
    const char *d = getenv("OAR_ONNX_EXPORT_DIR");
    if (!d || !d[0]) return;
    mkdir(d, 0777);
    char path[4096];
    snprintf(path, sizeof path, "%s/%s%s_op%d.onnx", d, c->name, tag, opset);
    CHECK(oar_onnx_export(c->g, path, &(oar_onnx_export_options){.opset = opset}) == 0);
    for (int i = 0; i < c->n_in; i++) {
        snprintf(path, sizeof path, "%s/%s%s_op%d.in%d.npy", d, c->name, tag, opset, i);
        CHECK(oar_npy_save(path, c->in[i]) == 0);
    }
    for (int j = 0; j < oar_graph_num_outputs(c->g); j++) {
        snprintf(path, sizeof path, "%s/%s%s_op%d.out%d.npy", d, c->name, tag, opset, j);
        CHECK(oar_npy_save(path, want[j]) == 0);
    }
}

/* Exports c at `opset`, re-imports, runs both; outputs must agree to 1e-5.
 * Every export must read back (an importer refusal fails the test; the
 * exports are also checked by ONNX's checker: tests/onnx/export_checker.sh).
 * Returns the re-imported graph's node count (-1 if none). */
static int round_trip(model_case *c, int opset, const char *tag) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s%s_op%d.onnx", dir, c->name, tag, opset);
    int st = oar_onnx_export(c->g, path, &(oar_onnx_export_options){.opset = opset});
    if (st) fprintf(stderr, "export %s at opset %d: %s\n", c->name, opset, oar_last_error());
    CHECK(st == 0);
    if (st) return -1;
    oar_tensor *want[MAX_IO] = {0}, *got[MAX_IO] = {0};
    int n_out = oar_graph_num_outputs(c->g);
    CHECK(run_graph(c->g, c, want) == 0);
    dump_for_python(c, tag, opset, want);
    oar_graph *h = oar_onnx_load(path);
    int nodes = -1;
    if (!h) fprintf(stderr, "re-import of %s at opset %d: %s\n", c->name, opset, oar_last_error());
    CHECK(h != NULL);
    if (h) {
        nodes = oar_graph_num_nodes(h);
        for (int k = 0; same_ops && same_ops[k]; k++) {
            int a = oar_graph_count_op(c->g, same_ops[k]), b = oar_graph_count_op(h, same_ops[k]);
            if (a != b)
                fprintf(stderr, "%s opset %d: %d %s nodes, %d after re-import\n", c->name, opset, a,
                        same_ops[k], b);
            CHECK(a == b);
        }
        CHECK(oar_graph_num_inputs(h) == c->n_in);
        CHECK(oar_graph_num_outputs(h) == n_out);
        for (int j = 0; j < n_out && j < oar_graph_num_outputs(h); j++)
            CHECK(!strcmp(oar_graph_output_name(h, j), oar_graph_output_name(c->g, j)));
        for (int i = 0; i < c->n_in && i < oar_graph_num_inputs(h); i++)
            CHECK(!strcmp(oar_graph_input_name(h, i), oar_graph_input_name(c->g, i)));
        CHECK(run_graph(h, c, got) == 0);
        for (int j = 0; j < n_out; j++) {
            double d = max_diff(want[j], got[j]);
            if (!(d <= 1e-5))
                fprintf(stderr, "%s opset %d output %d (%s): max diff %g\n", c->name, opset, j,
                        oar_graph_output_name(c->g, j), d);
            CHECK(d <= 1e-5);
        }
        oar_graph_free(h);
    }
    for (int j = 0; j < n_out; j++) {
        oar_tensor_release(want[j]);
        oar_tensor_release(got[j]);
    }
    return nodes;
}

static void case_free(model_case *c) {
    oar_graph_free(c->g);
    for (int i = 0; i < c->n_in; i++)
        oar_tensor_release(c->in[i]);
}

static oar_graph *trace_module(oar_module *m, int ndim, const int64_t *shape) {
    oar_graph_input_spec s = {.name = "x", .dtype = OAR_F32, .ndim = ndim, .dim_names = {"N"}};
    memcpy(s.shape, shape, (size_t)ndim * sizeof *shape);
    s.shape[0] = -1;
    return oar_trace_module(m, &s);
}

static void test_mlp(void) {
    oar_module *m = make_mlp();
    model_case c = {.name = "mlp", .g = trace_module(m, 2, (int64_t[]){0, 8}), .n_in = 1};
    CHECK(c.g != NULL);
    c.in[0] = oar_randn(OAR_F32, 2, (int64_t[]){3, 8});
    if (c.g) {
        int orig = oar_graph_num_nodes(c.g);
        same_ops = (const char *const[]){"matmul", "add", "relu", NULL};
        for (int opset = 13; opset <= 17; opset++) {
            int n = round_trip(&c, opset, "");
            /* the importer folds the two weight transposes */
            CHECK(n == orig - 2 && oar_graph_count_op(c.g, "permute") == 2);
        }
        same_ops = NULL;
    }
    case_free(&c);
    oar_module_free(m);
}

static void test_cnn(void) {
    oar_module *m = make_cnn();
    model_case c = {.name = "cnn", .g = trace_module(m, 4, (int64_t[]){0, 1, 8, 8}), .n_in = 1};
    CHECK(c.g != NULL);
    c.in[0] = oar_randn(OAR_F32, 4, (int64_t[]){3, 1, 8, 8});
    if (c.g) {
        /* as traced: Conv BatchNormalization Relu MaxPool Reshape MatMul Add */
        round_trip(&c, 17, "");
        round_trip(&c, 13, "");
        /* batch norm folded into the convolution: everything the importer reads */
        CHECK(oar_graph_optimize(c.g, OAR_PASSES_INFERENCE, 0) == 0);
        CHECK(oar_graph_count_op(c.g, "batch_norm") == 0);
        int orig = oar_graph_num_nodes(c.g);
        same_ops =
            (const char *const[]){"conv2d", "relu", "max_pool2d", "view", "matmul", "add", NULL};
        int n = round_trip(&c, 17, "_folded");
        CHECK(n == orig - oar_graph_count_op(c.g, "permute"));
        CHECK(round_trip(&c, 13, "_folded") == n);
        same_ops = NULL;
    }
    case_free(&c);
    oar_module_free(m);
}

static void test_transformer(void) {
    oar_manual_seed(5);
    /* post-norm ReLU; pre-norm GELU; causal (a mask constant) */
    for (int variant = 0; variant < 3; variant++) {
        bool gelu = variant == 1;
        oar_module *m = oar_transformer_encoder_layer_new(
            16, 4,
            &(oar_transformer_options){.dim_feedforward = 32,
                                       .activation = gelu ? OAR_ACTIVATION_GELU : 0,
                                       .norm_first = gelu,
                                       .causal = variant == 2});
        CHECK(m != NULL);
        if (!m) return;
        oar_module_train(m, false);
        static const char *const names[] = {"transformer", "transformer_gelu_prenorm",
                                            "transformer_causal"};
        model_case c = {
            .name = names[variant], .g = trace_module(m, 3, (int64_t[]){0, 5, 16}), .n_in = 1};
        CHECK(c.g != NULL);
        c.in[0] = oar_randn(OAR_F32, 3, (int64_t[]){2, 5, 16});
        if (c.g) {
            CHECK(oar_graph_optimize(c.g, OAR_PASSES_INFERENCE, 0) == 0);
            int orig = oar_graph_num_nodes(c.g);
            /* LayerNormalization at 17; decomposed (ReduceMean, Sqrt, ...) at 13 and 14 */
            for (int opset = 13; opset <= 17; opset += opset == 14 ? 3 : 1) {
                int n = round_trip(&c, opset, "");
                if (n >= 0)
                    CHECK(n <= 3 * orig); /* layer norm and gelu decompose into a few nodes each */
            }
        }
        case_free(&c);
        oar_module_free(m);
    }
}

/* ---- every mapped op ------------------------------------------------------------ */

typedef struct ops_ctx {
    int opset;
    oar_tensor *w2, *w2t, *w1, *wg, *w1d, *wt, *ln_w, *bn_m, *bn_v, *idx;
    const char *names[MAX_IO];
    int n_out;
} ops_ctx;

static int ops_fn(void *vc, oar_tensor *const *in, oar_tensor **out) {
    ops_ctx *c = vc;
    oar_tensor *x = in[0]; /* [N, 3, 4, 4] */
    int k = 0;
#define OUT(name, expr)                                                                            \
    do {                                                                                           \
        c->names[k] = name;                                                                        \
        out[k++] = (expr);                                                                         \
    } while (0)
    oar_tensor *ax = oar_abs(x), *pos = oar_add_scalar(ax, 0.5);
    OUT("tanh_sigmoid_relu", oar_add(oar_add(oar_tanh(x), oar_sigmoid(x)), oar_relu(x)));
    OUT("relu6_leaky_elu",
        oar_add(oar_add(oar_relu6(oar_mul_scalar(x, 4)), oar_leaky_relu(x, 0.1)), oar_elu(x, 0.7)));
    OUT("gelu_erf", oar_gelu(x, false));
    OUT("gelu_tanh_silu", oar_add(oar_gelu(x, true), oar_silu(x)));
    OUT("softplus", oar_add(oar_softplus(x, 1, 20), oar_softplus(x, 2, 20)));
    OUT("erf_floor_ceil_round",
        oar_add(oar_add(oar_erf(x), oar_floor(x)), oar_add(oar_ceil(x), oar_round(x))));
    OUT("trunc_clamp", oar_add(oar_trunc(oar_mul_scalar(x, 3)),
                               oar_add(oar_clamp(x, -0.5, 0.5), oar_clamp(x, NAN, 0.3))));
    OUT("trig", oar_add(oar_add(oar_sin(x), oar_cos(x)), oar_add(oar_atan(x), oar_tanh(x))));
    OUT("neg_sign_exp",
        oar_add(oar_add(oar_neg(x), oar_sign(x)), oar_add(oar_exp(x), oar_exp2(x))));
    OUT("logs_recip_sqrt", oar_add(oar_add(oar_add(oar_log(pos), oar_log2(pos)), oar_log1p(ax)),
                                   oar_add(oar_reciprocal(pos), oar_sqrt(ax))));
    OUT("expm1_rsqrt_square", oar_add(oar_add(oar_expm1(x), oar_rsqrt(pos)), oar_square(x)));
    oar_tensor *y = oar_mul_scalar(oar_flip(x, 1, (int64_t[]){3}), 0.7);
    OUT("floor_div_remainder",
        oar_add(oar_floor_div(x, pos), oar_remainder(x, oar_add_scalar(y, 2))));
    OUT("pow_max_min", oar_add(oar_pow(pos, y), oar_add(oar_maximum(x, y), oar_minimum(x, y))));
    oar_tensor *gt = oar_gt(x, y);
    OUT("where", oar_where(gt, x, oar_mul_scalar(y, 0.5)));
    OUT("compare", oar_add(oar_add(oar_cast(oar_eq(oar_floor(x), oar_floor(y)), OAR_F32),
                                   oar_cast(oar_ne(x, y), OAR_F32)),
                           oar_add(oar_cast(oar_le(x, y), OAR_F32),
                                   oar_cast(oar_logical_xor(gt, oar_lt(x, y)), OAR_F32))));
    OUT("logical",
        oar_logical_or(oar_logical_and(gt, oar_ge(x, y)), oar_logical_not(oar_isnan(x))));
    OUT("sum_prod",
        oar_add(oar_sum(x, 1, (int64_t[]){3}, false), oar_prod(x, 1, (int64_t[]){3}, false)));
    OUT("amax_amin_mean",
        oar_add(oar_add(oar_amax(x, 1, (int64_t[]){1}, true), oar_amin(x, 1, (int64_t[]){1}, true)),
                oar_mean(x, 2, (int64_t[]){2, 3}, true)));
    OUT("all_any", oar_logical_and(oar_all(gt, 1, (int64_t[]){3}, false),
                                   oar_any(x, 1, (int64_t[]){2}, false)));
    OUT("argmax_argmin", oar_add(oar_argmax(x, 1, false), oar_argmin(x, 1, false)));
    OUT("argmax_flat", oar_argmax(x, OAR_DIM_ALL, false));
    OUT("sum_all", oar_sum(x, 4, (int64_t[]){0, 1, 2, 3}, false));
    OUT("cumsum", oar_cumsum(x, 2));
    OUT("softmax", oar_add(oar_softmax(x, 1), oar_log_softmax(x, 3)));
    OUT("reshape_matmul",
        oar_matmul(oar_reshape(x, 3, (int64_t[]){-1, 3, 16}), c->w2)); /* [N, 3, 5] */
    OUT("strided_const",
        oar_matmul(oar_reshape(x, 3, (int64_t[]){-1, 3, 16}), oar_transpose(c->w2t, 0, 1)));
    OUT("flatten_permute", oar_permute(oar_reshape(x, 2, (int64_t[]){-1, 48}), (int64_t[]){1, 0}));
    OUT("expand", oar_expand(oar_sum(x, 1, (int64_t[]){1}, true), 4, (int64_t[]){-1, 3, 4, 4}));
    OUT("slice_concat",
        oar_concat(3, (oar_tensor *[]){oar_slice(x, 3, 1, 4, 2), oar_slice(x, 3, 0, 1, 1), x}, 3));
    OUT("pad_constant", oar_pad(x, 4, (int64_t[]){1, 2, 0, 1}, OAR_PAD_CONSTANT, 0.25));
    OUT("pad_reflect", oar_pad(x, 4, (int64_t[]){1, 2, 3, 1}, OAR_PAD_REFLECT, 0));
    OUT("pad_replicate", oar_pad(x, 2, (int64_t[]){2, 1}, OAR_PAD_REPLICATE, 0));
    OUT("flip_roll", oar_add(oar_flip(x, 2, (int64_t[]){1, 2}),
                             oar_roll(x, 2, (int64_t[]){1, -3}, (int64_t[]){3, 2})));
    oar_tensor *am = oar_argmax(x, 3, true); /* [N, 3, 4, 1] */
    OUT("gather", oar_gather(x, 3, am));
    OUT("index_select", oar_index_select(x, 2, c->idx));
    OUT("scatter", oar_scatter(x, 3, am, oar_mul_scalar(oar_slice(x, 3, 0, 1, 1), 10)));
    OUT("one_hot", oar_one_hot(oar_argmax(x, 1, false), 3));
    oar_tensor *ti = NULL;
    OUT("topk", oar_topk(x, 2, 3, true, true, &ti));
    OUT("topk_indices", ti);
    oar_tensor *si = NULL;
    OUT("sort_desc", oar_sort(oar_floor(oar_mul_scalar(x, 2)), 3, true, &si)); /* ties: stable */
    OUT("sort_indices", si);
    OUT("sort_asc", oar_sort(x, 0, false, NULL)); /* along the dynamic dim */
    OUT("diagonal", oar_add(oar_diagonal(x, 0, 2, 3), oar_diagonal(x, 0, 3, 2)));  /* [N, 3, 4] */
    OUT("diagonal_below", oar_diagonal(x, -1, 1, 3));                              /* [N, 4, 2] */
    OUT("diagonal_above", oar_diagonal(x, 1, 3, 2));                               /* [N, 3, 3] */
    OUT("atan2", oar_add(oar_atan2(x, y), oar_atan2(oar_floor(x), oar_floor(y)))); /* zeros too */
    OUT("layer_norm",
        oar_add(oar_layer_norm(x, 2, c->ln_w, NULL, 1e-5), oar_layer_norm(x, 1, NULL, NULL, 1e-3)));
    OUT("group_norm", oar_group_norm(x, 3, c->bn_v, c->bn_m, 1e-5));
    OUT("batch_norm", oar_batch_norm(x, c->bn_m, c->bn_v, NULL, NULL, false, 0.1, 1e-5));
    OUT("conv2d",
        oar_conv2d(x, c->w1, NULL, (int64_t[]){2, 1}, (int64_t[]){1, 1}, (int64_t[]){1, 2}, 1));
    OUT("conv2d_grouped", oar_conv2d(x, c->wg, c->bn_m, (int64_t[]){1, 1}, (int64_t[]){2, 2},
                                     (int64_t[]){2, 2}, 3)); /* depthwise, dilated, bias */
    OUT("pools_ceil", oar_add(oar_max_pool2d(x, (int64_t[]){2, 2}, (int64_t[]){3, 3},
                                             (int64_t[]){1, 1}, (int64_t[]){2, 2}, true, NULL),
                              oar_avg_pool2d(x, (int64_t[]){3, 3}, (int64_t[]){3, 3},
                                             (int64_t[]){1, 1}, true, true)));
    OUT("conv1d", oar_conv1d(oar_reshape(x, 3, (int64_t[]){-1, 3, 16}), c->w1d, NULL, 2, 1, 1, 1));
    OUT("conv_transpose2d",
        oar_conv_transpose2d(x, c->wt, NULL, (int64_t[]){2, 2}, (int64_t[]){1, 0},
                             (int64_t[]){1, 0}, (int64_t[]){1, 1}, 1));
    OUT("max_pool2d", oar_max_pool2d(x, (int64_t[]){3, 3}, (int64_t[]){1, 2}, (int64_t[]){1, 1},
                                     (int64_t[]){1, 1}, false, NULL));
    OUT("avg_pool2d",
        oar_avg_pool2d(x, (int64_t[]){2, 2}, (int64_t[]){2, 1}, (int64_t[]){1, 0}, false, true));
    OUT("avg_pool2d_nopad",
        oar_avg_pool2d(x, (int64_t[]){3, 3}, (int64_t[]){1, 1}, (int64_t[]){1, 1}, false, false));
    OUT("adaptive_pool", oar_add(oar_adaptive_avg_pool2d(x, (int64_t[]){2, 2}),
                                 oar_adaptive_avg_pool2d(x, (int64_t[]){1, 1})));
    OUT("interp_nearest", oar_interpolate(x, (int64_t[]){8, 6}, OAR_INTERP_NEAREST, false));
    OUT("interp_bilinear", oar_interpolate(x, (int64_t[]){8, 8}, OAR_INTERP_BILINEAR, false));
    OUT("interp_bilinear_ac", oar_interpolate(x, (int64_t[]){7, 5}, OAR_INTERP_BILINEAR, true));
    if (c->opset >= 14) OUT("tril_triu", oar_add(oar_tril(x, 0), oar_triu(x, 1)));
    if (c->opset >= 16) OUT("scatter_add", oar_scatter_add(x, 3, am, oar_slice(x, 3, 0, 1, 1)));
#undef OUT
    c->n_out = k;
    for (int j = 0; j < k; j++)
        if (!out[j]) return -1;
    return 0;
}

static void test_every_op(void) {
    oar_manual_seed(7);
    ops_ctx c = {
        .w2 = oar_randn(OAR_F32, 2, (int64_t[]){16, 5}),
        .w2t = oar_randn(OAR_F32, 2, (int64_t[]){5, 16}), /* its transpose: a strided constant */
        .w1 = oar_randn(OAR_F32, 4, (int64_t[]){2, 3, 1, 3}),
        .wg = oar_randn(OAR_F32, 4, (int64_t[]){3, 1, 3, 3}),
        .wt = oar_randn(OAR_F32, 4, (int64_t[]){3, 2, 3, 2}),
        .ln_w = oar_randn(OAR_F32, 2, (int64_t[]){4, 4}),
        .bn_m = oar_randn(OAR_F32, 1, (int64_t[]){3}),
        .bn_v = oar_rand(OAR_F32, 1, (int64_t[]){3}),
        .idx = oar_tensor_from_data((int64_t[]){3, 0, 0, 2, 1}, OAR_I64, 1, (int64_t[]){5}),
    };
    c.w1d = oar_reshape(c.w1, 3, (int64_t[]){2, 3, 3});
    CHECK(oar_uniform_(c.bn_v, 0.5, 1.5) == 0); /* running variances */
    oar_tensor *x = oar_randn(OAR_F32, 4, (int64_t[]){3, 3, 4, 4});
    for (int opset = 13; opset <= 17; opset++) {
        if (opset == 15) continue;
        c.opset = opset;
        oar_graph_input_spec s = {
            .name = "x", .dtype = OAR_F32, .ndim = 4, .shape = {-1, 3, 4, 4}, .dim_names = {"N"}};
        ops_ctx probe = c;
        /* a first trace counts the outputs */
        oar_tensor *tmp[MAX_IO];
        oar_pool *p = oar_pool_push();
        int st = ops_fn(&probe, &x, tmp);
        oar_pool_pop(p);
        CHECK(st == 0);
        if (st) break;
        oar_graph *g = oar_trace(ops_fn, &c, 1, &s, probe.n_out,
                                 &(oar_trace_options){.output_names = probe.names});
        if (!g) fprintf(stderr, "trace: %s\n", oar_last_error());
        CHECK(g != NULL);
        if (!g) break;
        model_case mc = {.name = "ops", .g = g, .n_in = 1, .in = {x}};
        oar_tensor_retain(x);
        round_trip(&mc, opset, "");
        case_free(&mc);
    }
    oar_tensor_release(x);
    oar_tensor *ts[] = {c.w2, c.w2t, c.w1, c.wg, c.w1d, c.wt, c.ln_w, c.bn_m, c.bn_v, c.idx};
    for (size_t i = 0; i < sizeof ts / sizeof *ts; i++)
        oar_tensor_release(ts[i]);
}

/* 3-D convolutions: conv3d (strided, padded, dilated, grouped, bias) and
 * conv_transpose3d (output_padding) export as Conv / ConvTranspose and
 * import back onto the same ops. */
static oar_tensor *c3_w, *c3_b, *c3_wt;
static int conv3d_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx; /* x [N, 4, 5, 6, 4] */
    const int64_t one[3] = {1, 1, 1};
    oar_tensor *h = oar_conv3d(in[0], c3_w, c3_b, (int64_t[]){2, 1, 1}, (int64_t[]){1, 0, 1},
                               (int64_t[]){1, 2, 1}, 2);
    out[0] = oar_conv_transpose3d(oar_relu(h), c3_wt, NULL, (int64_t[]){2, 1, 2}, one,
                                  (int64_t[]){1, 0, 1}, one, 1);
    return out[0] ? 0 : -1;
}

static void test_conv3d(void) {
    oar_manual_seed(13);
    c3_w = oar_randn(OAR_F32, 5, (int64_t[]){6, 2, 3, 2, 3});
    c3_b = oar_randn(OAR_F32, 1, (int64_t[]){6});
    c3_wt = oar_randn(OAR_F32, 5, (int64_t[]){6, 3, 2, 3, 2});
    oar_graph_input_spec s = {
        .name = "x", .dtype = OAR_F32, .ndim = 5, .shape = {-1, 4, 5, 6, 4}, .dim_names = {"N"}};
    model_case c = {.name = "conv3d", .n_in = 1};
    c.g = oar_trace(conv3d_fn, NULL, 1, &s, 1, NULL);
    CHECK(c.g != NULL);
    c.in[0] = oar_randn(OAR_F32, 5, (int64_t[]){3, 4, 5, 6, 4});
    if (c.g) {
        same_ops = (const char *const[]){"conv3d", "conv_transpose3d", "relu", NULL};
        for (int opset = 13; opset <= 17; opset += 4)
            CHECK(round_trip(&c, opset, "") == oar_graph_num_nodes(c.g));
        same_ops = NULL;
    }
    case_free(&c);
    oar_tensor_release(c3_w);
    oar_tensor_release(c3_b);
    oar_tensor_release(c3_wt);
}

/* A model with only ops today's importer reads (softmax, sigmoid, tanh,
 * sub, div, transposes, a dynamic reshape, pools): must round-trip. */
static int importable_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    oar_tensor *x = in[0]; /* [N, 2, 4, 4] */
    oar_tensor *a =
        oar_avg_pool2d(x, (int64_t[]){2, 2}, (int64_t[]){2, 2}, (int64_t[]){0, 0}, false, true);
    oar_tensor *b = oar_adaptive_avg_pool2d(x, (int64_t[]){1, 1});
    oar_tensor *c =
        oar_div(oar_sub(oar_sigmoid(a), oar_tanh(b)), oar_add_scalar(oar_sigmoid(b), 1));
    oar_tensor *r = oar_reshape(oar_permute(c, (int64_t[]){0, 2, 3, 1}), 2, (int64_t[]){-1, 8});
    out[0] = oar_softmax(r, 1);
    out[1] = oar_mul(oar_sigmoid(x), oar_relu(x)); /* two outputs */
    return out[0] && out[1] ? 0 : -1;
}

static void test_importable(void) {
    oar_graph_input_spec s = {.name = "images",
                              .dtype = OAR_F32,
                              .ndim = 4,
                              .shape = {-1, 2, 4, 4},
                              .dim_names = {"batch"}};
    model_case c = {.name = "importable", .n_in = 1};
    c.g = oar_trace(importable_fn, NULL, 1, &s, 2,
                    &(oar_trace_options){.output_names = (const char *[]){"probs", "act"}});
    CHECK(c.g != NULL);
    c.in[0] = oar_randn(OAR_F32, 4, (int64_t[]){5, 2, 4, 4});
    if (c.g) {
        int orig = oar_graph_num_nodes(c.g);
        for (int opset = 13; opset <= 17; opset += 2) {
            int n = round_trip(&c, opset, "");
            CHECK(n > 0 && n <= orig + 2);
        }
    }
    case_free(&c);
}

/* Two dynamic dims (N, T): reshapes and expands that need their run-time
 * sizes (Shape, Gather, Concat in the file), a slice to the end of T. */
static int dyn_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    oar_tensor *x = in[0]; /* [N, T, 4] */
    int64_t n = oar_tensor_shape(x)[0], t = oar_tensor_shape(x)[1];
    out[0] = oar_reshape(x, 3, (int64_t[]){t, n, 4});
    out[1] = oar_expand(oar_sum(x, 1, (int64_t[]){0}, true), 3, (int64_t[]){n, t, 4});
    out[2] = oar_slice(oar_slice(x, 1, 0, t, 1), 2, 1, 3, 1);
    out[3] = oar_mean(x, 2, (int64_t[]){0, 1}, false); /* divides by N*T: Shape, Gather, ReduceProd */
    return out[0] && out[1] && out[2] && out[3] ? 0 : -1;
}

static void test_two_dynamic_dims(void) {
    oar_graph_input_spec s = {
        .name = "x", .dtype = OAR_F32, .ndim = 3, .shape = {-1, -1, 4}, .dim_names = {"N", "T"}};
    model_case c = {.name = "dyn", .n_in = 1};
    c.g = oar_trace(dyn_fn, NULL, 1, &s, 4,
                    &(oar_trace_options){.output_names = (const char *[]){"a", "b", "c", "d"}});
    CHECK(c.g != NULL);
    c.in[0] = oar_randn(OAR_F32, 3, (int64_t[]){3, 5, 4});
    if (c.g) {
        round_trip(&c, 17, "");
        round_trip(&c, 13, "");
    }
    case_free(&c);
}

/* Recurrent modules: each layer and direction is one rnn_layer /
 * lstm_layer node, exported as one ONNX LSTM, GRU or RNN node; oar's
 * importer (an independent implementation, unrolled into matmuls) must
 * give the traced graph's outputs, which must match the eager module's. */
typedef struct rnn_export_ctx {
    oar_module *m;
    bool lengths;
} rnn_export_ctx;

static int rnn_export_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    rnn_export_ctx *c = ctx;
    oar_tensor *hn = NULL, *cn = NULL;
    out[0] = oar_rnn_forward(c->m, in[0], NULL, NULL, c->lengths ? in[1] : NULL, &hn, &cn);
    out[1] = hn;
    if (cn) out[2] = cn;
    return out[0] && out[1] ? 0 : -1;
}

static void test_recurrent(void) {
    static const int64_t lens[3] = {6, 2, 4};
    struct {
        const char *name, *op;
        oar_module *(*ctor)(int64_t, int64_t, const oar_rnn_options *);
        oar_rnn_options o;
        bool lengths;
        int nodes; /* recurrent nodes traced: layers x directions */
    } cases[] = {
        {"lstm2bi", "lstm_layer", oar_lstm_new, {.num_layers = 2, .bidirectional = true}, false, 4},
        {"lstm2bi_len", "lstm_layer", oar_lstm_new, {.num_layers = 2, .bidirectional = true}, true, 4},
        {"gru_bi_len", "rnn_layer", oar_gru_new, {.bidirectional = true}, true, 2},
        {"gru_nobias", "rnn_layer", oar_gru_new, {.no_bias = true}, false, 1},
        {"rnn_tanh2", "rnn_layer", oar_rnn_new, {.num_layers = 2}, false, 2},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        oar_pool *p = oar_pool_push();
        oar_manual_seed(11 + k);
        bool lstm = cases[k].ctor == oar_lstm_new;
        rnn_export_ctx ctx = {cases[k].ctor(4, 5, &cases[k].o), cases[k].lengths};
        oar_graph_input_spec s[2] = {
            {.name = "x", .dtype = OAR_F32, .ndim = 3, .shape = {6, 3, 4}},
            {.name = "lengths", .dtype = OAR_I64, .ndim = 1, .shape = {3}}};
        model_case c = {.name = cases[k].name, .n_in = ctx.lengths ? 2 : 1};
        c.g = oar_trace(rnn_export_fn, &ctx, c.n_in, s, lstm ? 3 : 2,
                        &(oar_trace_options){.output_names = (const char *[]){"y", "h_n", "c_n"}});
        CHECK(c.g != NULL);
        c.in[0] = oar_randn(OAR_F32, 3, (int64_t[]){6, 3, 4});
        oar_tensor_retain(c.in[0]);
        if (ctx.lengths) {
            c.in[1] = oar_tensor_from_data(lens, OAR_I64, 1, (int64_t[]){3});
            oar_tensor_retain(c.in[1]);
        }
        if (c.g) {
            CHECK(oar_graph_count_op(c.g, cases[k].op) == cases[k].nodes);
            /* the graph (executor) against the eager module */
            oar_tensor *want[3] = {NULL, NULL, NULL}, *got[MAX_IO] = {NULL};
            want[0] = oar_rnn_forward(ctx.m, c.in[0], NULL, NULL, ctx.lengths ? c.in[1] : NULL,
                                      &want[1], &want[2]);
            CHECK(run_graph(c.g, &c, got) == 0);
            for (int j = 0; j < (lstm ? 3 : 2); j++) {
                CHECK(max_diff(want[j], got[j]) <= 1e-6);
                oar_tensor_release(got[j]);
            }
            round_trip(&c, 17, "");
            round_trip(&c, 14, "");
        }
        case_free(&c);
        oar_module_free(ctx.m);
        oar_pool_pop(p);
    }
}

/* float64 throughout (scalar constants, LayerNormalization, tanh GELU in double;
 * ONNX Runtime 1.32 has no double Erf kernel, so the erf form is not used). */
static int f64_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    oar_tensor *w = ctx, *x = in[0]; /* [N, 6] */
    oar_tensor *h =
        oar_add(oar_mul_scalar(oar_gelu(x, true), 2), oar_layer_norm(x, 1, w, NULL, 1e-6));
    out[0] = oar_log_softmax(oar_add(h, oar_sum(oar_square(x), 1, (int64_t[]){1}, true)), 1);
    return out[0] ? 0 : -1;
}

/* An int64 input: embedding rows picked by index, then a mean over the sequence. */
static int embed_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    oar_tensor *w = ctx;                                                  /* [10, 8] */
    out[0] = oar_mean(oar_embedding(w, in[0]), 1, (int64_t[]){1}, false); /* [N, 8] */
    return out[0] ? 0 : -1;
}

static void test_dtypes(void) {
    oar_tensor *w = oar_randn(OAR_F64, 1, (int64_t[]){6});
    oar_graph_input_spec s = {
        .name = "x", .dtype = OAR_F64, .ndim = 2, .shape = {-1, 6}, .dim_names = {"N"}};
    model_case c = {.name = "f64", .n_in = 1};
    c.g = oar_trace(f64_fn, w, 1, &s, 1, NULL);
    CHECK(c.g != NULL);
    c.in[0] = oar_randn(OAR_F64, 2, (int64_t[]){3, 6});
    if (c.g) {
        round_trip(&c, 17, "");
        round_trip(&c, 13, "");
    }
    case_free(&c);
    oar_tensor_release(w);

    w = oar_randn(OAR_F32, 2, (int64_t[]){10, 8});
    oar_graph_input_spec si = {
        .name = "tokens", .dtype = OAR_I64, .ndim = 2, .shape = {-1, 5}, .dim_names = {"N"}};
    model_case e = {.name = "embed", .n_in = 1};
    e.g = oar_trace(embed_fn, w, 1, &si, 1, NULL);
    CHECK(e.g != NULL);
    e.in[0] = oar_randint(0, 10, OAR_I64, 2, (int64_t[]){4, 5});
    if (e.g) round_trip(&e, 17, "");
    case_free(&e);
    oar_tensor_release(w);
}

/* A backward graph: layer_norm's mean and rstd outputs are used (the
 * decomposition at every opset), the seed gradient is expanded to [N, 6]
 * with a run-time shape. */
static int ln_loss_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    out[0] = oar_sum(oar_mul(oar_layer_norm(in[0], 1, NULL, NULL, 1e-5), ctx), 2, (int64_t[]){0, 1},
                     false);
    return out[0] ? 0 : -1;
}

static void test_backward_graph(void) {
    oar_tensor *w = oar_randn(OAR_F32, 1, (int64_t[]){6});
    oar_graph_input_spec s = {
        .name = "x", .dtype = OAR_F32, .ndim = 2, .shape = {-1, 6}, .dim_names = {"N"}};
    model_case c = {.name = "backward", .n_in = 1};
    c.g = oar_trace(ln_loss_fn, w, 1, &s, 1, NULL);
    CHECK(c.g != NULL);
    CHECK(c.g && oar_graph_append_backward(c.g, 0, 1, (int[]){0}) == 1);
    c.in[0] = oar_randn(OAR_F32, 2, (int64_t[]){4, 6});
    if (c.g) {
        round_trip(&c, 17, "");
        round_trip(&c, 13, "");
    }
    case_free(&c);
    oar_tensor_release(w);
}

/* layer_norm with its weight and bias as inputs, over the last two dims
 * of a rank-3 input: the backward's fused layer_norm_backward exports its
 * three outputs (gx, and gw, gb summed over the leading dim). */
static int ln_affine_loss_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    oar_tensor *y = oar_layer_norm(in[0], 2, in[1], in[2], 1e-5);
    out[0] = oar_sum(oar_mul(y, oar_sin(in[0])), 3, (int64_t[]){0, 1, 2}, false);
    return out[0] ? 0 : -1;
}

static void test_norm_backward_graph(void) {
    oar_graph_input_spec s[3] = {
        {.name = "x", .dtype = OAR_F32, .ndim = 3, .shape = {-1, 3, 4}, .dim_names = {"N"}},
        {.name = "w", .dtype = OAR_F32, .ndim = 2, .shape = {3, 4}},
        {.name = "b", .dtype = OAR_F32, .ndim = 2, .shape = {3, 4}}};
    model_case c = {.name = "ln_backward", .n_in = 3};
    c.g = oar_trace(ln_affine_loss_fn, NULL, 3, s, 1, NULL);
    CHECK(c.g && oar_graph_append_backward(c.g, 0, 3, (int[]){0, 1, 2}) == 1);
    CHECK(c.g && oar_graph_count_op(c.g, "layer_norm_backward") == 1);
    c.in[0] = oar_randn(OAR_F32, 3, (int64_t[]){5, 3, 4});
    c.in[1] = oar_randn(OAR_F32, 2, (int64_t[]){3, 4});
    c.in[2] = oar_randn(OAR_F32, 2, (int64_t[]){3, 4});
    if (c.g) {
        round_trip(&c, 17, "");
        round_trip(&c, 13, "");
    }
    case_free(&c);
}

/* The gradient of an embedding lookup: index_add (ScatterElements add). */
static int lookup_loss_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    oar_tensor *rows = oar_index_select(in[0], 0, ctx); /* repeated indices accumulate */
    out[0] = oar_sum(oar_square(rows), 2, (int64_t[]){0, 1}, false);
    return out[0] ? 0 : -1;
}

static void test_index_add(void) {
    oar_tensor *idx = oar_tensor_from_data((int64_t[]){3, 0, 3, 7, 3}, OAR_I64, 1, (int64_t[]){5});
    oar_graph_input_spec s = {.name = "w", .dtype = OAR_F32, .ndim = 2, .shape = {10, 4}};
    model_case c = {.name = "index_add", .n_in = 1};
    c.g = oar_trace(lookup_loss_fn, idx, 1, &s, 1, NULL);
    CHECK(c.g && oar_graph_append_backward(c.g, 0, 1, (int[]){0}) == 1);
    CHECK(c.g && oar_graph_count_op(c.g, "index_add") == 1);
    c.in[0] = oar_randn(OAR_F32, 2, (int64_t[]){10, 4});
    if (c.g) round_trip(&c, 16, "");
    case_free(&c);
    oar_tensor_release(idx);
}

/* Quantization: per-channel int8 and per-tensor uint8 quantize/dequantize
 * pairs and an int8-range fake quantization, exported as QuantizeLinear /
 * DequantizeLinear (their scales and zero points cast to ONNX's dtypes). */
typedef struct { oar_tensor *scales, *zps; } quant_ctx;

static int quant_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    quant_ctx *q = ctx;
    out[0] = oar_dequantize(oar_quantize_per_channel(in[0], q->scales, q->zps, 1, OAR_I8), q->scales, q->zps, 1);
    oar_tensor *u = oar_quantize_per_tensor(in[0], 0.05, 128, OAR_U8);
    out[1] = oar_dequantize(u, oar_scalar_of(0.05, OAR_F32), oar_scalar_of(128, OAR_U8), 0);
    out[2] = oar_fake_quantize_per_tensor(in[0], 0.1, -3, -128, 127);
    return out[0] && out[1] && out[2] ? 0 : -1;
}

static void test_quantize(void) {
    quant_ctx q = {.scales = oar_tensor_from_data((float[]){0.02f, 0.05f, 0.1f}, OAR_F32, 1, (int64_t[]){3}),
                   .zps = oar_tensor_from_data((int8_t[]){0, -5, 7}, OAR_I8, 1, (int64_t[]){3})};
    oar_graph_input_spec s = {.name = "x", .dtype = OAR_F32, .ndim = 3, .shape = {2, 3, 4}};
    model_case c = {.name = "quantize", .n_in = 1};
    c.g = oar_trace(quant_fn, &q, 1, &s, 3, NULL);
    CHECK(c.g && oar_graph_count_op(c.g, "quantize") == 2 && oar_graph_count_op(c.g, "fake_quantize") == 1);
    c.in[0] = oar_randn(OAR_F32, 3, (int64_t[]){2, 3, 4});
    if (c.g) round_trip(&c, 13, "");
    case_free(&c);
    oar_tensor_release(q.scales);
    oar_tensor_release(q.zps);
}

/* A whole training step: cross-entropy of the MLP, the gradients of the
 * parameters (graph inputs) and the SGD update, exported as one model
 * (scatter_add: opset >= 16). */
static int ce_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    out[0] = oar_cross_entropy(oar_module_forward(ctx, in[0]), in[1], NULL, -100, 0.0,
                               OAR_REDUCTION_MEAN);
    return out[0] ? 0 : -1;
}

static void test_train_step(void) {
    oar_module *m = make_mlp();
    oar_graph_input_spec s[2] = {{.name = "x", .dtype = OAR_F32, .ndim = 2, .shape = {6, 8}},
                                 {.name = "target", .dtype = OAR_I64, .ndim = 1, .shape = {6}}};
    model_case c = {.name = "train_step"};
    c.g = oar_trace(ce_fn, m, 2, s, 1, &(oar_trace_options){.module = m, .params_as_inputs = true});
    CHECK(c.g != NULL);
    if (!c.g) {
        oar_module_free(m);
        return;
    }
    c.n_in = oar_graph_num_inputs(c.g);
    CHECK(c.n_in == 6);
    int wrt[4] = {2, 3, 4, 5};
    CHECK(oar_graph_append_backward(c.g, 0, 4, wrt) == 1);
    CHECK(oar_graph_append_sgd(c.g, 0.1) == 4);
    c.in[0] = oar_randn(OAR_F32, 2, (int64_t[]){6, 8});
    c.in[1] = oar_randint(0, 4, OAR_I64, 1, (int64_t[]){6});
    for (int i = 2; i < c.n_in; i++) {
        c.in[i] = oar_module_get(m, oar_graph_input_name(c.g, i));
        CHECK(c.in[i] != NULL);
        oar_tensor_retain(c.in[i]);
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/train14.onnx", dir);
    CHECK(oar_onnx_export(c.g, path, &(oar_onnx_export_options){.opset = 14}) != 0);
    CHECK(strstr(oar_last_error(), "(scatter_add): op 'scatter_add' cannot be exported at opset 14 "
                                   "(supported at opsets 16..17)"));
    round_trip(&c, 16, "");
    round_trip(&c, 17, "");
    case_free(&c);
    oar_module_free(m);
}

/* Outputs that are an input, a constant, or the same value twice get Identity nodes. */
static int aliases_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    oar_tensor *w = ctx;
    out[0] = oar_add(in[0], w);
    out[1] = out[0];
    out[2] = in[0];
    out[3] = w;
    return 0;
}

static void test_output_aliases(void) {
    oar_tensor *w = oar_randn(OAR_F32, 1, (int64_t[]){3});
    oar_graph_input_spec s = {
        .name = "x", .dtype = OAR_F32, .ndim = 2, .shape = {-1, 3}, .dim_names = {"N"}};
    model_case c = {.name = "aliases", .n_in = 1};
    c.g = oar_trace(
        aliases_fn, w, 1, &s, 4,
        &(oar_trace_options){.output_names = (const char *[]){"a", "b", "x_copy", "w_copy"}});
    CHECK(c.g != NULL);
    c.in[0] = oar_randn(OAR_F32, 2, (int64_t[]){2, 3});
    if (c.g) round_trip(&c, 17, "");
    case_free(&c);
    oar_tensor_release(w);
}

/* ---- failures --------------------------------------------------------------------- */

static int cumprod_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    out[0] = oar_cumprod(in[0], 1);
    return out[0] ? 0 : -1;
}
static int pool_indices_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    oar_tensor *idx = NULL;
    oar_tensor *v = oar_max_pool2d(in[0], (int64_t[]){2, 2}, (int64_t[]){2, 2}, (int64_t[]){0, 0},
                                   (int64_t[]){1, 1}, false, &idx);
    out[0] = v;
    out[1] = idx;
    return v && idx ? 0 : -1;
}
static int tril_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    out[0] = oar_tril(in[0], 0);
    return out[0] ? 0 : -1;
}
static int bn_train_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    out[0] = oar_batch_norm(in[0], NULL, NULL, NULL, NULL, true, 0.1, 1e-5);
    return out[0] ? 0 : -1;
}

static void test_failures(void) {
    oar_graph_input_spec s = {.name = "x", .dtype = OAR_F32, .ndim = 4, .shape = {2, 3, 4, 4}};
    oar_graph *g = oar_trace(tril_fn, NULL, 1, &s, 1, NULL);
    CHECK(g != NULL);
    char path[4096];
    snprintf(path, sizeof path, "%s/f.onnx", dir);
    CHECK_STATUS_FAILS(oar_onnx_export(NULL, path, NULL), "NULL graph");
    CHECK_STATUS_FAILS(oar_onnx_export(g, NULL, NULL), "NULL path");
    CHECK_STATUS_FAILS(oar_onnx_export(g, path, &(oar_onnx_export_options){.opset = 12}),
                       "opset 12 is not supported");
    CHECK_STATUS_FAILS(oar_onnx_export(g, path, &(oar_onnx_export_options){.opset = 18}),
                       "opset 18 is not supported");
    CHECK_STATUS_FAILS(oar_onnx_export(g, "/nonexistent/dir/f.onnx", NULL),
                       "cannot write /nonexistent/dir/f.onnx");
    CHECK(access("/nonexistent/dir/f.onnx.tmp", F_OK) != 0);
    /* Trilu is opset 14: the table's row for tril starts there */
    CHECK_STATUS_FAILS(oar_onnx_export(g, path, &(oar_onnx_export_options){.opset = 13}),
                       "node 0 (tril): op 'tril' cannot be exported at opset 13 (supported at "
                       "opsets 14..17)");
    CHECK(access(path, F_OK) != 0); /* nothing written on failure */
    CHECK(oar_onnx_export(g, path, &(oar_onnx_export_options){.opset = 14}) == 0);
    CHECK(oar_onnx_export(g, path, NULL) == 0);
    oar_graph_free(g);

    g = oar_trace(cumprod_fn, NULL, 1, &s, 1, NULL);
    CHECK_STATUS_FAILS(oar_onnx_export(g, path, NULL),
                       "node 0 (cumprod): op 'cumprod' has no ONNX mapping in the exporter: ONNX "
                       "has no cumulative product"); /* the reason of its row */
    oar_graph_free(g);
    g = oar_trace(pool_indices_fn, NULL, 1, &s, 2, NULL);
    CHECK_STATUS_FAILS(oar_onnx_export(g, path, NULL), "node 0 (max_pool2d): its output 1 is used");
    oar_graph_free(g);
    g = oar_trace(bn_train_fn, NULL, 1, &s, 1, NULL);
    CHECK(g != NULL);
    CHECK_STATUS_FAILS(oar_onnx_export(g, path, NULL), "training-mode batch norm");
    oar_graph_free(g);
}

/* Out of memory: every allocation of an export fails in turn; each is
 * reported and nothing leaks (the allocator counts live blocks). */

static void test_allocation_failures(void) {
    oar_module *m = make_cnn();
    oar_graph *g = trace_module(m, 4, (int64_t[]){0, 1, 8, 8});
    CHECK(g != NULL);
    char path[4096];
    snprintf(path, sizeof path, "%s/oom.onnx", dir);
    oar_set_allocator(failing_alloc, NULL);
    long base = live;
    int n, failures = 0;
    for (n = 0; n < 100000; n++) {
        n_calls = 0;
        fail_at = n;
        oar_clear_error();
        int st = oar_onnx_export(g, path, NULL);
        fail_at = -1;
        if (st == 0 && n_calls <= n) break;
        if (st) {
            failures++;
            if (!strstr(oar_last_error(), "out of memory")) {
                test_failed++;
                fprintf(stderr, "allocation %d: \"%s\"\n", n, oar_last_error());
            }
        }
        if (live != base) {
            test_failed++;
            fprintf(stderr, "allocation %d: %ld live blocks (base %ld)\n", n, live, base);
            break;
        }
    }
    oar_set_allocator(NULL, NULL);
    CHECK(failures > 50);
    CHECK(n < 100000);
    oar_graph_free(g);
    oar_module_free(m);
}

/* `oar export MODEL_DIR out.onnx [--opset N]`, then `oar info` on the file. */
static char *oar_cmd(const char *args, int *rc) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s %s 2>&1", exe, args);
    FILE *f = popen(cmd, "r");
    char *out = calloc(1 << 16, 1);
    size_t n = f ? fread(out, 1, (1 << 16) - 1, f) : 0;
    out[n] = 0;
    *rc = f ? pclose(f) : -1;
    return out;
}

static void test_cli(void) {
    /* built with the tests (make build): its absence is a failure */
    CHECK(access(exe, X_OK) == 0);
    if (access(exe, X_OK)) {
        fprintf(stderr, "%s not built (build the oar_cli target)\n", exe);
        return;
    }
    oar_module *m = make_mlp();
    oar_graph *g = trace_module(m, 2, (int64_t[]){0, 8});
    char mdir[4200], args[16384];
    snprintf(mdir, sizeof mdir, "%s/mlp_model", dir);
    CHECK(oar_graph_save(g, mdir) == 0);
    int rc;
    snprintf(args, sizeof args, "export %s %s/cli.onnx --opset 13", mdir, dir);
    char *out = oar_cmd(args, &rc);
    CHECK(rc == 0 && strstr(out, "opset 13"));
    free(out);
    snprintf(args, sizeof args, "info %s/cli.onnx", dir);
    out = oar_cmd(args, &rc);
    CHECK(rc == 0 && strstr(out, "input  0: x float32 [?, 8]") &&
          strstr(out, "output 0: y float32 [?, 4]"));
    free(out);
    snprintf(args, sizeof args, "%s/cli.onnx", dir);
    oar_graph *h = oar_onnx_load(args);
    CHECK(h != NULL);
    if (h) {
        oar_tensor *x = oar_randn(OAR_F32, 2, (int64_t[]){4, 8});
        model_case c = {.name = "cli", .g = h, .n_in = 1, .in = {x}};
        oar_tensor *want[1] = {0}, *got[1] = {0};
        CHECK(run_graph(g, &c, want) == 0 && run_graph(h, &c, got) == 0);
        CHECK_NEAR(max_diff(want[0], got[0]), 0, 1e-6);
        oar_tensor_release(want[0]);
        oar_tensor_release(got[0]);
        case_free(&c);
    }
    snprintf(args, sizeof args, "export %s %s/cli.onnx --opset 9", mdir, dir);
    out = oar_cmd(args, &rc);
    CHECK(rc != 0 && strstr(out, "opset 9 is not supported"));
    free(out);
    out = oar_cmd("export /nonexistent/model x.onnx", &rc);
    CHECK(rc != 0 && strstr(out, "cannot open"));
    free(out);
    snprintf(args, sizeof args, "export %s", mdir);
    out = oar_cmd(args, &rc); /* a usage error: exit 2, the argument, where the help is */
    CHECK(rc == 2 << 8 && strstr(out, "oar export: OUT.onnx: missing") && strstr(out, "see 'oar export --help'"));
    free(out);
    oar_graph_free(g);
    oar_module_free(m);
}

int main(void) {
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 8);
    if (n <= 0 || !mkdtemp(dir)) return 1;
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (slash) strcpy(slash + 1, "oar");
    RUN(test_mlp);
    RUN(test_cnn);
    RUN(test_transformer);
    RUN(test_every_op);
    RUN(test_conv3d);
    RUN(test_importable);
    RUN(test_two_dynamic_dims);
    RUN(test_recurrent);
    RUN(test_dtypes);
    RUN(test_backward_graph);
    RUN(test_norm_backward_graph);
    RUN(test_train_step);
    RUN(test_index_add);
    RUN(test_quantize);
    RUN(test_output_aliases);
    RUN(test_failures);
    RUN(test_allocation_failures);
    RUN(test_cli);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) return 1;
    return test_summary();
}

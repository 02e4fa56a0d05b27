/* The fusing compiler: how many kernels a graph becomes (as tinygrad's
 * tests count them), and that the compiled graph computes what the
 * unfused one does. Needs a C compiler; without one the test is skipped. */
#include "graph/graph_test_util.h"

#include <oar/graph.h>
#include <oar/infer.h>

#include "compiler/jit.h"

static oar_tensor *W1, *B1, *WQ, *WK, *WV, *LNW, *LNB; /* constants the functions close over */

/* x -> 8 elementwise ops */
static int f_chain(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    oar_tensor *x = in[0];
    oar_tensor *y = oar_mul_scalar(oar_add_scalar(x, 1.0), 0.5);
    y = oar_tanh(oar_exp(oar_neg(y)));
    y = oar_sigmoid(oar_mul(y, x));
    out[0] = oar_sub(oar_relu(y), x);
    return out[0] ? 0 : -1;
}

/* elementwise, transpose, reshape, elementwise */
static int f_movement(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    oar_tensor *y = oar_exp(in[0]);                  /* [N, 6, 4] */
    y = oar_transpose(y, 1, 2);                      /* [N, 4, 6] */
    y = oar_reshape(y, 2, (int64_t[]){-1, 24});      /* [N, 24] */
    out[0] = oar_mul(oar_sin(y), in[1]);             /* * [24] */
    return out[0] ? 0 : -1;
}

static int f_softmax(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    out[0] = oar_softmax(oar_mul_scalar(in[0], 0.125), -1);
    return out[0] ? 0 : -1;
}

/* softmax written out: max, sub, exp, sum, div */
static int f_softmax_ops(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    int64_t last = -1;
    oar_tensor *e = oar_exp(oar_sub(in[0], oar_amax(in[0], 1, &last, true)));
    out[0] = oar_div(e, oar_sum(e, 1, &last, true));
    return out[0] ? 0 : -1;
}

static int f_layer_norm_gelu(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    out[0] = oar_gelu(oar_layer_norm(in[0], 1, LNW, LNB, 1e-5), false);
    return out[0] ? 0 : -1;
}

/* x * rsqrt(mean(x^2) + eps) * w */
static int f_rms_norm(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    int64_t last = -1;
    oar_tensor *ms = oar_mean(oar_square(in[0]), 1, &last, true);
    out[0] = oar_mul(oar_mul(in[0], oar_rsqrt(oar_add_scalar(ms, 1e-6))), LNW);
    return out[0] ? 0 : -1;
}

static int f_gemm_bias_gelu(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    out[0] = oar_gelu(oar_add(oar_matmul(in[0], W1), B1), true);
    return out[0] ? 0 : -1;
}

/* one attention head: softmax(q k^T / sqrt(d)) v over [N, T, D] */
static int f_attention(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    oar_tensor *q = oar_matmul(in[0], WQ), *k = oar_matmul(in[0], WK), *v = oar_matmul(in[0], WV);
    oar_tensor *s = oar_mul_scalar(oar_matmul(q, oar_transpose(k, 1, 2)), 0.25);
    out[0] = oar_matmul(oar_softmax(s, -1), v);
    return out[0] ? 0 : -1;
}

/* reductions over leading dims with an elementwise prologue (bias and
 * norm-weight gradients): amax through the column template; sums stay
 * library calls (their column sums are faster than the template's) */
static int f_column(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    oar_tensor *p = oar_mul(in[0], oar_tanh(in[0]));
    oar_tensor *a = oar_sum(p, 2, (int64_t[]){0, 1}, false);                     /* [40] */
    oar_tensor *b = oar_amax(oar_add_scalar(p, 1), 1, (int64_t[]){1}, true);      /* [N, 1, 40] */
    oar_tensor *c = oar_sum(oar_mul_scalar(p, 3), 1, (int64_t[]){0}, true);       /* [1, 5, 40] */
    out[0] = oar_add(oar_add(a, oar_sum(b, 1, (int64_t[]){0}, false)), oar_sum(c, 2, (int64_t[]){0, 1}, false));
    return out[0] ? 0 : -1;
}

/* Traces fn, runs it unfused and compiled on `inputs`, compares, and
 * returns the compiled kernel count (-1 on failure). */
static int fused_kernels(oar_trace_fn fn, int n_in, const oar_graph_input_spec *specs, oar_tensor *const *inputs,
                         double tol) {
    oar_graph *g = oar_trace(fn, NULL, n_in, specs, 1, NULL);
    CHECK(g != NULL);
    if (!g) return -1;
    oar_graph_optimize(g, OAR_PASSES_INFERENCE, 0);
    oar_executor *plain = oar_executor_new(g), *fused = oar_executor_new(g);
    CHECK(oar_executor_compile(fused) == 0);
    CHECK(oar_executor_is_compiled(fused));
    oar_tensor *y0 = NULL, *y1 = NULL;
    CHECK(oar_executor_run(plain, inputs, &y0) == 0);
    CHECK(oar_executor_run(fused, inputs, &y1) == 0);
    double d = max_diff(y0, y1);
    CHECK(d <= tol);
    if (d > tol) {
        fprintf(stderr, "max diff %g\n%s", d, oar_executor_kernel_source(fused));
        oar_graph_print(g, stderr);
    }
    int n = oar_executor_num_kernels(fused);
    if (getenv("SHOW")) fputs(oar_executor_kernel_source(fused), stderr);
    oar_executor_free(plain);
    oar_executor_free(fused);
    oar_graph_free(g);
    return n;
}

/* x + (x @ W1 + B1): a kernel with a broadcast leaf, whose output may be
 * written over the GEMM's result */
static int f_residual_bias(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    out[0] = oar_add(in[0], oar_add(oar_matmul(in[0], W1), B1));
    return out[0] ? 0 : -1;
}

/* log_softmax's backward, g - exp(y) * sum(g), y a GEMM's result: a row
 * kernel reading y only at the element it writes */
static int f_log_softmax_backward(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    oar_tensor *y = oar_matmul(in[0], W1);
    out[0] = oar_sub(in[1], oar_mul(oar_exp(y), oar_sum(in[1], 1, (int64_t[]){-1}, true)));
    return out[0] ? 0 : -1;
}

static oar_graph_input_spec spec(const char *name, int ndim, const int64_t *shape) {
    oar_graph_input_spec s = {.name = name, .dtype = OAR_F32, .ndim = ndim};
    for (int d = 0; d < ndim; d++) {
        s.shape[d] = shape[d];
        s.dim_names[d] = shape[d] < 0 ? "N" : NULL;
    }
    return s;
}

static void test_elementwise_chain_is_one_kernel(void) {
    oar_pool *p = oar_pool_push();
    int64_t sh[2] = {-1, 37}, real[2] = {5, 37};
    oar_graph_input_spec s = spec("x", 2, sh);
    oar_tensor *x = oar_randn(OAR_F32, 2, real);
    CHECK(fused_kernels(f_chain, 1, &s, &x, 1e-6) == 1);
    oar_pool_pop(p);
}

static void test_movement_between_elementwise_is_one_kernel(void) {
    oar_pool *p = oar_pool_push();
    oar_graph_input_spec s[2] = {spec("x", 3, (int64_t[]){-1, 6, 4}), spec("w", 1, (int64_t[]){24})};
    oar_tensor *in[2] = {oar_randn(OAR_F32, 3, (int64_t[]){3, 6, 4}), oar_randn(OAR_F32, 1, (int64_t[]){24})};
    CHECK(fused_kernels(f_movement, 2, s, in, 1e-6) == 1);
    oar_pool_pop(p);
}

static void test_column_reductions(void) {
    oar_pool *p = oar_pool_push();
    oar_graph_input_spec s = spec("x", 3, (int64_t[]){-1, 5, 40});
    oar_tensor *x = oar_randn(OAR_F32, 3, (int64_t[]){7, 5, 40});
    CHECK(fused_kernels(f_column, 1, &s, &x, 1e-4) > 0);
    oar_graph *g = oar_trace(f_column, NULL, 1, &s, 1, NULL);
    oar_executor *ex = g ? oar_executor_new(g) : NULL;
    oar_tensor *y = NULL;
    CHECK(ex && oar_executor_compile(ex) == 0 && oar_executor_run(ex, &x, &y) == 0);
    const char *src = ex ? oar_executor_kernel_source(ex) : NULL;
    CHECK(src && strstr(src, "(amax), column reduction") && !strstr(src, "(sum), column reduction"));
    oar_executor_free(ex);
    oar_graph_free(g);
    oar_pool_pop(p);
}

static void test_softmax_is_one_kernel(void) {
    oar_pool *p = oar_pool_push();
    oar_graph_input_spec s = spec("x", 3, (int64_t[]){-1, 7, 33});
    oar_tensor *x = oar_mul_scalar(oar_randn(OAR_F32, 3, (int64_t[]){2, 7, 33}), 4);
    CHECK(fused_kernels(f_softmax, 1, &s, &x, 1e-6) == 1);
    CHECK(fused_kernels(f_softmax_ops, 1, &s, &x, 1e-6) == 1);
    oar_pool_pop(p);
}

static void test_norms_are_one_kernel(void) {
    oar_pool *p = oar_pool_push();
    LNW = oar_randn(OAR_F32, 1, (int64_t[]){48});
    LNB = oar_randn(OAR_F32, 1, (int64_t[]){48});
    oar_graph_input_spec s = spec("x", 2, (int64_t[]){-1, 48});
    oar_tensor *x = oar_add_scalar(oar_randn(OAR_F32, 2, (int64_t[]){9, 48}), 3);
    CHECK(fused_kernels(f_layer_norm_gelu, 1, &s, &x, 1e-5) == 1);
    CHECK(fused_kernels(f_rms_norm, 1, &s, &x, 1e-5) == 1);
    oar_pool_pop(p);
}

static void test_gemm_epilogue_is_one_kernel(void) {
    oar_pool *p = oar_pool_push();
    W1 = oar_randn(OAR_F32, 2, (int64_t[]){16, 24});
    B1 = oar_randn(OAR_F32, 1, (int64_t[]){24});
    oar_graph_input_spec s = spec("x", 2, (int64_t[]){-1, 16});
    oar_tensor *x = oar_randn(OAR_F32, 2, (int64_t[]){6, 16});
    CHECK(fused_kernels(f_gemm_bias_gelu, 1, &s, &x, 1e-5) == 2); /* GEMM + 1 */
    oar_pool_pop(p);
}

static void test_attention_is_two_gemms_and_one(void) {
    oar_pool *p = oar_pool_push();
    WQ = oar_randn(OAR_F32, 2, (int64_t[]){16, 16});
    WK = oar_randn(OAR_F32, 2, (int64_t[]){16, 16});
    WV = oar_randn(OAR_F32, 2, (int64_t[]){16, 16});
    oar_graph_input_spec s = spec("x", 3, (int64_t[]){-1, 10, 16});
    oar_tensor *x = oar_mul_scalar(oar_randn(OAR_F32, 3, (int64_t[]){2, 10, 16}), 0.3);
    /* the q, k, v projections are three more GEMMs */
    CHECK(fused_kernels(f_attention, 1, &s, &x, 1e-5) == 3 + 2 + 1);
    oar_pool_pop(p);
}

static void test_conv_batch_norm_inference(void) {
    oar_pool *p = oar_pool_push();
    oar_module *m = make_cnn(); /* conv, bn, relu, pool, flatten, linear */
    oar_graph_input_spec s = spec("x", 4, (int64_t[]){-1, 1, 8, 8});
    oar_graph *g = oar_trace_module(m, &s);
    CHECK(g != NULL);
    oar_graph_optimize(g, OAR_PASSES_INFERENCE, 0);
    oar_executor *ex = oar_executor_new(g), *plain = oar_executor_new(g);
    CHECK(oar_executor_compile(ex) == 0);
    /* batch norm folds into the conv; relu alone is no fusion: conv, relu,
     * pool, matmul, add at most */
    CHECK(oar_executor_num_kernels(ex) <= oar_executor_num_kernels(plain));
    CHECK(oar_graph_count_op(g, "batch_norm") == 0);
    oar_tensor *x = oar_randn(OAR_F32, 4, (int64_t[]){3, 1, 8, 8}), *y0, *y1;
    CHECK(oar_executor_run(plain, &x, &y0) == 0);
    CHECK(oar_executor_run(ex, &x, &y1) == 0);
    CHECK(max_diff(y0, y1) <= 1e-5);
    oar_executor_free(ex);
    oar_executor_free(plain);
    oar_graph_free(g);
    oar_module_free(m);
    oar_pool_pop(p);
}

/* A dynamic batch is a kernel argument: new sizes run without compiling. */
static void test_new_batch_size_does_not_recompile(void) {
    oar_pool *p = oar_pool_push();
    oar_graph_input_spec s = spec("x", 3, (int64_t[]){-1, 7, 33});
    oar_graph *g = oar_trace(f_softmax, NULL, 1, &s, 1, NULL);
    oar_executor *ex = oar_executor_new(g), *plain = oar_executor_new(g);
    CHECK(oar_executor_compile(ex) == 0);
    int compiles = oari_jit_compile_count();
    static const int64_t sizes[] = {1, 2, 3, 4, 2, 1}; /* back to cached plans: their own sizes */
    for (int k = 0; k < 6; k++) {
        int64_t n = sizes[k];
        oar_tensor *x = oar_randn(OAR_F32, 3, (int64_t[]){n, 7, 33}), *y0, *y1;
        CHECK(oar_executor_run(ex, &x, &y1) == 0);
        CHECK(oar_executor_run(plain, &x, &y0) == 0);
        CHECK(max_diff(y0, y1) <= 1e-6);
        CHECK(oar_tensor_shape(y1)[0] == n);
    }
    CHECK(oari_jit_compile_count() == compiles);
    oar_executor_free(ex);
    oar_executor_free(plain);
    oar_graph_free(g);
    oar_pool_pop(p);
}

/* Inputs read only by kernels are read in place; a strided input is
 * copied into the arena first, and gives the same result. */
/* A compiled kernel's output is planned over a leaf that dies there when
 * every read of it is at the element written, as a library elementwise op
 * writes over its input: the arena is no bigger than unfused. */
static void test_output_over_dying_leaf(void) {
    oar_pool *p = oar_pool_push();
    oar_manual_seed(3);
    W1 = oar_mul_scalar(oar_randn(OAR_F32, 2, (int64_t[]){32, 32}), 0.1); /* exp(y) stays small */
    B1 = oar_randn(OAR_F32, 1, (int64_t[]){32});
    oar_tensor *x = oar_randn(OAR_F32, 2, (int64_t[]){64, 32}), *gr = oar_randn(OAR_F32, 2, (int64_t[]){64, 32});
    oar_graph_input_spec s[2] = {spec("x", 2, (int64_t[]){64, 32}), spec("g", 2, (int64_t[]){64, 32})};
    oar_trace_fn fns[2] = {f_residual_bias, f_log_softmax_backward};
    for (int f = 0; f < 2; f++) {
        oar_graph *g = oar_trace(fns[f], NULL, f + 1, s, 1, NULL);
        CHECK(g != NULL);
        if (!g) continue;
        oar_executor *plain = oar_executor_new(g), *fused = oar_executor_new(g);
        CHECK(oar_executor_compile(fused) == 0 && oar_executor_num_kernels(fused) == 2); /* GEMM + 1 */
        oar_tensor *in[2] = {x, gr}, *y0 = NULL, *y1 = NULL;
        CHECK(oar_executor_run(plain, in, &y0) == 0 && oar_executor_run(fused, in, &y1) == 0);
        CHECK(max_diff(y0, y1) <= 1e-4);
        if (max_diff(y0, y1) > 1e-4) fprintf(stderr, "graph %d: max diff %g\n", f, max_diff(y0, y1));
        int64_t bp = oar_executor_planned_bytes(plain), bf = oar_executor_planned_bytes(fused);
        CHECK(bf > 0 && bf <= bp);
        if (bf > bp) fprintf(stderr, "graph %d: arena %lld bytes compiled, %lld unfused\n", f, (long long)bf, (long long)bp);
        oar_executor_free(plain);
        oar_executor_free(fused);
        oar_graph_free(g);
    }
    oar_pool_pop(p);
}

static void test_strided_input(void) {
    oar_pool *p = oar_pool_push();
    int64_t sh[2] = {-1, 37};
    oar_graph_input_spec s = spec("x", 2, sh);
    oar_graph *g = oar_trace(f_chain, NULL, 1, &s, 1, NULL);
    oar_executor *ex = oar_executor_new(g);
    CHECK(oar_executor_compile(ex) == 0);
    oar_tensor *xt = oar_randn(OAR_F32, 2, (int64_t[]){37, 6});
    oar_tensor *x = oar_transpose(xt, 0, 1), *xc = oar_contiguous(x), *y;
    CHECK(!oar_tensor_is_contiguous(x));
    CHECK(oar_executor_run(ex, &xc, &y) == 0);
    oar_tensor *y_contig = oar_contiguous(y); /* y is the executor's until the next run */
    CHECK(oar_executor_run(ex, &x, &y) == 0);
    CHECK(max_diff(y, y_contig) == 0);
    oar_executor_free(ex);
    oar_graph_free(g);
    oar_pool_pop(p);
}

/* Rows that codegen_c.c runs in blocks of one vector (rows with a tail, 2
 * to 8 vectors wide; write_blocked_reduction and the inner loop of
 * c_function): sum, amax, amin, prod, softmax, log_softmax, layer_norm over
 * the last dim, and a sum over the last two dims (an outer reduced loop
 * around the blocks), each after an elementwise op fused in. */
static int f_row_reductions(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    oar_tensor *x[8]; /* one scaled copy per output: each kernel fuses its own */
    for (int k = 0; k < 8; k++) x[k] = oar_mul_scalar(in[0], 0.5 + 0.125 * k);
    int64_t last = -1;
    out[0] = oar_sum(x[0], 1, &last, true);
    out[1] = oar_amax(x[1], 1, &last, false);
    out[2] = oar_amin(x[2], 1, &last, false);
    out[3] = oar_prod(oar_add_scalar(oar_mul_scalar(x[3], 0.01), 1), 1, &last, false);
    out[4] = oar_softmax(x[4], -1);
    out[5] = oar_log_softmax(x[5], -1);
    out[6] = oar_layer_norm(x[6], 1, NULL, NULL, 1e-5);
    out[7] = oar_sum(x[7], 2, (int64_t[]){1, 2}, false);
    return 0;
}

/* Compiled against unfused for one dtype and row width, with NaNs placed in
 * the last block, in the stretch the last block overlaps, and in the first. */
static void check_row_reductions(oar_dtype dt, int64_t n, double tol) {
    oar_pool *p = oar_pool_push();
    oar_graph_input_spec s = {.name = "x", .dtype = dt, .ndim = 3, .shape = {4, 3, n}};
    oar_graph *g = oar_trace(f_row_reductions, NULL, 1, &s, 8, NULL);
    oar_executor *plain = g ? oar_executor_new(g) : NULL, *fused = g ? oar_executor_new(g) : NULL;
    CHECK(fused && oar_executor_compile(fused) == 0 && oar_executor_is_compiled(fused));
    const char *src = fused ? oar_executor_kernel_source(fused) : NULL;
    CHECK(oar_executor_num_kernels(fused) == 8);
    CHECK(src && strstr(src, "#pragma omp simd\n    for (int64_t q")); /* reductions in blocks */
    CHECK(src && strstr(src, "const int64_t o = b + ")); /* and log_softmax's and layer_norm's rows */
    oar_tensor *x = oar_mul_scalar(oar_randn(dt, 3, (int64_t[]){4, 3, n}), 3);
    for (int with_nan = 0; with_nan < 2; with_nan++) {
        if (with_nan) { /* rows (0, 1), (1, 2), (2, 0); row 3 stays finite */
            int64_t at[3] = {1 * n + n - 1, 5 * n + n - 9, 6 * n + 2};
            for (int k = 0; k < 3; k++) {
                if (dt == OAR_F32) ((float *)oar_tensor_data(x))[at[k]] = NAN;
                else ((double *)oar_tensor_data(x))[at[k]] = NAN;
            }
        }
        oar_tensor *y0[8], *y1[8];
        CHECK(oar_executor_run(plain, &x, y0) == 0);
        for (int k = 0; k < 8; k++) y0[k] = oar_contiguous(y0[k]); /* the executor's until its next run */
        CHECK(oar_executor_run(fused, &x, y1) == 0);
        for (int k = 0; k < 8; k++) {
            double *a = test_values(y0[k]), *b = test_values(y1[k]), worst = 0;
            int64_t m = oar_tensor_numel(y0[k]);
            bool same_nans = m == oar_tensor_numel(y1[k]);
            for (int64_t i = 0; same_nans && i < m; i++) {
                same_nans = isnan(a[i]) == isnan(b[i]);
                if (!isnan(a[i])) worst = fmax(worst, fabs(a[i] - b[i]) / fmax(1, fabs(a[i])));
            }
            CHECK(same_nans && worst <= tol);
            if (!same_nans || worst > tol)
                fprintf(stderr, "%s n=%lld output %d nan=%d: diff %g\n", oar_dtype_name(dt), (long long)n, k,
                        with_nan, worst);
            free(a);
            free(b);
        }
    }
    oar_executor_free(plain);
    oar_executor_free(fused);
    oar_graph_free(g);
    oar_pool_pop(p);
}

static void test_blocked_row_reductions(void) {
    static const int64_t f32_widths[] = {33, 73, 100, 127}, f64_widths[] = {17, 23, 63};
    for (size_t i = 0; i < sizeof f32_widths / sizeof *f32_widths; i++) check_row_reductions(OAR_F32, f32_widths[i], 1e-5);
    for (size_t i = 0; i < sizeof f64_widths / sizeof *f64_widths; i++) check_row_reductions(OAR_F64, f64_widths[i], 1e-12);
}

/* The predictor compiles by default and shares the kernels between its
 * executors; no_compile runs unfused; both agree. */
static void test_predictor(void) {
    oar_pool *p = oar_pool_push();
    oar_graph_input_spec s = spec("x", 2, (int64_t[]){-1, 37});
    oar_graph *g = oar_trace(f_chain, NULL, 1, &s, 1, NULL);
    oar_predictor *pc = oar_predictor_from_graph(g, NULL);
    oar_predictor *pu = oar_predictor_from_graph(g, &(oar_predictor_config){.no_compile = true});
    CHECK(oar_predictor_is_compiled(pc) && !oar_predictor_is_compiled(pu) && !oar_predictor_is_compiled(NULL));
    oar_predictor *pc2 = oar_predictor_clone(pc);
    CHECK(oar_predictor_is_compiled(pc2));
    oar_tensor *x = oar_randn(OAR_F32, 2, (int64_t[]){4, 37}), *y0 = NULL, *y1 = NULL, *y2 = NULL;
    CHECK(oar_predictor_run(pu, &x, &y0) == 0);
    CHECK(oar_predictor_run(pc, &x, &y1) == 0);
    CHECK(oar_predictor_run(pc2, &x, &y2) == 0);
    CHECK(max_diff(y0, y1) <= 1e-6 && max_diff(y1, y2) == 0);
    oar_tensor_release(y0);
    oar_tensor_release(y1);
    oar_tensor_release(y2);
    oar_predictor_free(pc);
    oar_predictor_free(pc2);
    oar_predictor_free(pu);
    oar_graph_free(g);
    oar_pool_pop(p);
}

static void test_bad_input(void) {
    CHECK_STATUS_FAILS(oar_executor_compile(NULL), "NULL");
    CHECK(oar_executor_num_kernels(NULL) < 0);
    CHECK(!oar_executor_is_compiled(NULL));
    CHECK(oar_executor_kernel_source(NULL) == NULL);
    /* nothing to fuse: compiles to nothing, source NULL */
    oar_pool *p = oar_pool_push();
    W1 = oar_randn(OAR_F32, 2, (int64_t[]){16, 24});
    B1 = oar_randn(OAR_F32, 1, (int64_t[]){24});
    oar_graph_input_spec s = spec("x", 2, (int64_t[]){-1, 16});
    oar_graph *g = oar_trace(f_gemm_bias_gelu, NULL, 1, &s, 1, NULL);
    oar_executor *ex = oar_executor_new(g);
    CHECK(oar_executor_kernel_source(ex) == NULL);
    CHECK(oar_executor_num_kernels(ex) == 3);
    CHECK(oar_executor_compile(ex) == 0);
    CHECK(oar_executor_compile(ex) == 0); /* twice is once */
    CHECK(oar_executor_kernel_source(ex) != NULL);
    oar_executor_free(ex);
    oar_graph_free(g);
    oar_pool_pop(p);
}

int main(void) {
    if (!oari_jit_available()) {
        fprintf(stderr, "no C compiler: skipped\n");
        return 77;
    }
    RUN(test_elementwise_chain_is_one_kernel);
    RUN(test_movement_between_elementwise_is_one_kernel);
    RUN(test_softmax_is_one_kernel);
    RUN(test_column_reductions);
    RUN(test_norms_are_one_kernel);
    RUN(test_gemm_epilogue_is_one_kernel);
    RUN(test_attention_is_two_gemms_and_one);
    RUN(test_conv_batch_norm_inference);
    RUN(test_new_batch_size_does_not_recompile);
    RUN(test_output_over_dying_leaf);
    RUN(test_strided_input);
    RUN(test_blocked_row_reductions);
    RUN(test_predictor);
    RUN(test_bad_input);
    return test_summary();
}

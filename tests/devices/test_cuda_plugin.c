/* The cuda plugin built in this tree loads: dlopen resolves every symbol
 * (CUDA runtime, cuBLAS) and oar_plugin_init runs. Without a GPU it is
 * refused with the driver's reason and oar keeps running on the CPU; with
 * one, the ops it claims run on cuda:0 without fallback and equal the CPU's
 * results (test_backend_ops then also runs every claimed kernel), and a
 * compiled graph runs its generated CUDA kernels there. With
 * OAR_REQUIRE_CUDA=1 (scripts/gpu-check.sh) a refusal fails the test
 * instead. An expanded operand of matmul (and a permuted attention head)
 * is copied dense on the device by the plugin, with the right values and
 * no fallback. On a GPU, check_coverage runs
 * what the plugin claims beyond f32 elementwise with no CPU fallback and
 * the CPU's values: f64 elementwise (broadcast, where), reductions and
 * softmax in f32, f64, f16 and bf16, casts among
 * bool/u8/i32/i64/f16/bf16/f32/f64, f16/bf16 elementwise through the f32
 * route, fill, and matmul as one strided-batched cuBLAS GEMM in f32, f64,
 * f16 and bf16 (batch dims, a broadcast batch, an expanded batch: stride
 * 0, 1-D operands, transposed operands). Skipped (exit 77) where the
 * plugin was not built (no CUDA toolkit). OAR_TEST_CUDA_PLUGIN names the
 * plugin file where the build tree was moved (scripts/gpu-check.sh). */
#include "test.h"
#include "graph/graph_test_util.h" /* max_diff */

#include <stdlib.h>

#ifdef OAR_CUDA_PLUGIN
static void check_close(oar_tensor *got, oar_tensor *want, double tol) {
    CHECK(got && want);
    CHECK_NEAR(max_diff(got, want), 0, tol);
}

/* A traced chain with a softmax row, compiled: on cuda:0 its kernels are
 * CUDA C built by NVRTC (src/compiler/codegen_cu.c, cuda_jit.c); the
 * results equal the CPU executor's and fewer launches run than unfused. */
static int chain(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    oar_tensor *x = in[0];
    out[0] = oar_softmax(oar_sub(oar_mul(oar_tanh(oar_add_scalar(oar_mul_scalar(x, 0.5), 1.0)), x), oar_relu(x)), 1);
    return out[0] ? 0 : -1;
}

static void check_compiled_on(oar_device *d) {
    oar_pool *pool = oar_pool_push();
    oar_graph_input_spec spec = {.name = "x", .dtype = OAR_F32, .ndim = 2, .shape = {-1, 77}, .dim_names = {"N"}};
    oar_graph *g = oar_trace(chain, NULL, 1, &spec, 1, NULL);
    oar_executor *cpu = g ? oar_executor_new(g) : NULL, *gpu = g ? oar_executor_new(g) : NULL;
    CHECK(cpu && gpu && oar_executor_compile(gpu) == 0);
    for (int64_t batch = 3; batch <= 300; batch *= 10) { /* a new batch never recompiles */
        oar_tensor *x = oar_randn(OAR_F32, 2, (int64_t[]){batch, 77}), *dx = oar_tensor_to(x, d), *y0, *y1;
        CHECK(oar_executor_run(cpu, &x, &y0) == 0 && oar_executor_run(gpu, &dx, &y1) == 0);
        CHECK(oar_tensor_device(y1) == d);
        check_close(oar_tensor_to(y1, oar_device_cpu()), y0, 1e-5);
    }
    CHECK(oar_executor_num_kernels(gpu) < oar_executor_num_kernels(cpu));
    oar_executor_free(cpu);
    oar_executor_free(gpu);
    oar_graph_free(g);
    oar_pool_pop(pool);
}

/* a and b (any float dtype, any device) equal within tol, compared in f64 on the CPU */
static void check_close_as_f64(oar_tensor *got, oar_tensor *want, double tol) {
    CHECK(got && want);
    if (!got || !want) return;
    oar_tensor *g = oar_cast(oar_tensor_to(got, oar_device_cpu()), OAR_F64);
    oar_tensor *w = oar_cast(oar_tensor_to(want, oar_device_cpu()), OAR_F64);
    CHECK_NEAR(max_diff(g, w), 0, tol);
}

/* matmul of CPU operands a, b, and of their copies on d (through view, which
 * makes a view of each: transpose, expand...), equal within tol; with
 * on_gpu the device call ran without the CPU fallback. */
static void check_matmul(oar_device *d, oar_tensor *a, oar_tensor *b, double tol, bool on_gpu) {
    oar_tensor *da = oar_tensor_to(a, d), *db = oar_tensor_to(b, d);
    int64_t before = oar_device_fallback_count();
    oar_tensor *y = oar_matmul(da, db);
    CHECK(y && oar_tensor_device(y) == d);
    if (on_gpu) CHECK(oar_device_fallback_count() == before);
    check_close_as_f64(y, oar_matmul(a, b), tol);
}

static void check_coverage(oar_device *d) {
    oar_pool *pool = oar_pool_push();
    oar_device_fallback_reset();
    /* f64 elementwise with a broadcast operand, a comparison and where */
    oar_tensor *x = oar_randn(OAR_F64, 2, (int64_t[]){33, 17}), *r = oar_randn(OAR_F64, 1, (int64_t[]){17});
    oar_tensor *dx = oar_tensor_to(x, d), *dr = oar_tensor_to(r, d);
    oar_tensor *y = oar_where(oar_gt(dx, dr), oar_tanh(oar_mul(dx, dr)), oar_exp(oar_sub(dr, dx)));
    CHECK(oar_tensor_dtype(y) == OAR_F64 && oar_tensor_device(y) == d);
    check_close(y, oar_where(oar_gt(x, r), oar_tanh(oar_mul(x, r)), oar_exp(oar_sub(r, x))), 1e-12);
    CHECK(oar_device_fallback_count() == 0);
    /* reductions over some dims (of a transposed view), softmax and log_softmax along either dim */
    oar_tensor *xt = oar_transpose(x, 0, 1), *dxt = oar_transpose(dx, 0, 1);
    check_close(oar_sum(dxt, 1, (int64_t[]){1}, false), oar_sum(xt, 1, (int64_t[]){1}, false), 1e-12);
    check_close(oar_amax(dx, 1, (int64_t[]){0}, true), oar_amax(x, 1, (int64_t[]){0}, true), 0);
    check_close(oar_prod(dr, 0, NULL, false), oar_prod(r, 0, NULL, false), 1e-12);
    oar_tensor *x32 = oar_cast(x, OAR_F32), *dx32 = oar_tensor_to(x32, d);
    check_close(oar_sum(dx32, 0, NULL, false), oar_sum(x32, 0, NULL, false), 1e-4);
    check_close(oar_log_softmax(oar_transpose(dx32, 0, 1), 0), oar_log_softmax(oar_transpose(x32, 0, 1), 0), 1e-5);
    check_close(oar_softmax(dx, 0), oar_softmax(x, 0), 1e-12);
    CHECK(oar_device_fallback_count() == 0);
    /* casts every way among the eight dtypes, from values each holds exactly */
    static const oar_dtype dts[] = {OAR_BOOL, OAR_U8, OAR_I32, OAR_I64, OAR_F16, OAR_BF16, OAR_F32, OAR_F64};
    float v[12] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 16, 32, 100};
    oar_tensor *base = oar_tensor_from_data(v, OAR_F32, 2, (int64_t[]){3, 4});
    for (size_t i = 0; i < 8; i++)
        for (size_t j = 0; j < 8; j++) {
            oar_tensor *src = oar_cast(base, dts[i]), *got = oar_cast(oar_tensor_to(src, d), dts[j]);
            CHECK(got && oar_tensor_dtype(got) == dts[j] && oar_tensor_device(got) == d);
            check_close_as_f64(got, oar_cast(src, dts[j]), 0);
        }
    /* contiguous of a transposed view, fill */
    check_close(oar_contiguous(oar_transpose(dx, 0, 1)), oar_contiguous(oar_transpose(x, 0, 1)), 0);
    oar_tensor *f = oar_full_on(OAR_BF16, 2, (int64_t[]){3, 5}, 2.5, d);
    CHECK(f && oar_tensor_device(f) == d);
    check_close_as_f64(f, oar_full(OAR_BF16, 2, (int64_t[]){3, 5}, 2.5), 0);
    CHECK(oar_device_fallback_count() == 0);
    /* f16 and bf16 elementwise: oar's f32 route, casts on the device */
    oar_tensor *h = oar_cast(oar_randn(OAR_F32, 2, (int64_t[]){9, 31}), OAR_BF16);
    check_close_as_f64(oar_relu(oar_add(oar_tensor_to(h, d), oar_tensor_to(h, d))), oar_relu(oar_add(h, h)), 0);
    oar_tensor *hh = oar_cast(h, OAR_F16);
    check_close_as_f64(oar_sigmoid(oar_tensor_to(hh, d)), oar_sigmoid(hh), 1e-3);
    CHECK(oar_device_fallback_count() == 0);
    /* f16 and bf16 reductions and softmax: the plugin's half kernels (f32
     * inside, one rounding), within an ulp or two of the CPU's */
    for (int k = 0; k < 2; k++) {
        oar_dtype t = k ? OAR_BF16 : OAR_F16;
        double ulp = k ? 1.0 / 128 : 1.0 / 1024; /* relative */
        oar_tensor *hx = oar_cast(x, t), *dhx = oar_tensor_to(hx, d);
        oar_tensor *hxt = oar_transpose(hx, 0, 1), *dhxt = oar_transpose(dhx, 0, 1);
        oar_tensor *hs = oar_sum(dhxt, 1, (int64_t[]){1}, false);
        CHECK(hs && oar_tensor_dtype(hs) == t && oar_tensor_device(hs) == d);
        check_close_as_f64(hs, oar_sum(hxt, 1, (int64_t[]){1}, false), 16 * 2 * ulp);
        check_close_as_f64(oar_amax(dhx, 1, (int64_t[]){0}, true), oar_amax(hx, 1, (int64_t[]){0}, true), 0);
        check_close_as_f64(oar_amin(dhxt, 1, (int64_t[]){0}, false), oar_amin(hxt, 1, (int64_t[]){0}, false), 0);
        oar_tensor *hr = oar_cast(oar_add_scalar(oar_mul_scalar(r, 0.1), 1.0), t);
        check_close_as_f64(oar_prod(oar_tensor_to(hr, d), 0, NULL, false), oar_prod(hr, 0, NULL, false), 4 * ulp);
        check_close_as_f64(oar_softmax(dhx, 1), oar_softmax(hx, 1), 2 * ulp);
        check_close_as_f64(oar_log_softmax(dhxt, 0), oar_log_softmax(hxt, 0), 16 * 2 * ulp);
    }
    CHECK(oar_device_fallback_count() == 0);
    /* matmul: batched, a broadcast batch, transposed operands, 1-D operands */
    static const oar_dtype mdt[] = {OAR_F32, OAR_F64, OAR_F16, OAR_BF16};
    static const double tol[] = {1e-4, 1e-11, 5e-2, 2.5e-1};
    for (int i = 0; i < 4; i++) {
        oar_dtype t = mdt[i];
        oar_tensor *a = oar_cast(oar_randn(OAR_F32, 3, (int64_t[]){5, 19, 24}), t);
        oar_tensor *b = oar_cast(oar_randn(OAR_F32, 3, (int64_t[]){5, 24, 13}), t);
        oar_tensor *w = oar_cast(oar_randn(OAR_F32, 2, (int64_t[]){24, 13}), t);
        oar_tensor *v1 = oar_cast(oar_randn(OAR_F32, 1, (int64_t[]){24}), t);
        check_matmul(d, a, b, tol[i], true);                                            /* [5] batches */
        check_matmul(d, a, w, tol[i], true);                                            /* w for every batch */
        check_matmul(d, oar_transpose(oar_transpose(a, 1, 2), 1, 2), b, tol[i], true);  /* (a view of a) */
        check_matmul(d, v1, b, tol[i], true);                                           /* [24] @ [5, 24, 13] */
        check_matmul(d, a, v1, tol[i], true);                                           /* [5, 19, 24] @ [24] */
    }
    /* operands made on the device as views: transposed, an expanded batch (stride 0) */
    oar_tensor *a = oar_randn(OAR_F32, 3, (int64_t[]){4, 24, 19}), *b1 = oar_randn(OAR_F32, 3, (int64_t[]){1, 24, 13});
    oar_tensor *da = oar_tensor_to(a, d), *db1 = oar_tensor_to(b1, d);
    int64_t before = oar_device_fallback_count();
    oar_tensor *ym = oar_matmul(oar_transpose(da, 1, 2), oar_expand(db1, 3, (int64_t[]){4, 24, 13}));
    CHECK(oar_device_fallback_count() == before); /* batch stride 0 for b: one GEMM */
    check_close(ym, oar_matmul(oar_transpose(a, 1, 2), oar_expand(b1, 3, (int64_t[]){4, 24, 13})), 1e-4);
    /* a batch of expanded rows (stride 0 inside a matrix): copied dense on the device first, right values */
    oar_tensor *row = oar_randn(OAR_F32, 3, (int64_t[]){4, 1, 24}), *drow = oar_tensor_to(row, d);
    check_close(oar_matmul(oar_expand(drow, 3, (int64_t[]){4, 19, 24}), oar_tensor_to(oar_transpose(a, 1, 2), d)),
                oar_matmul(oar_expand(row, 3, (int64_t[]){4, 19, 24}), oar_transpose(a, 1, 2)), 1e-4);
    /* a permuted attention head ([B, H, T, E] from [B, T, H, E]: batch dims of no single stride) */
    oar_tensor *bthe = oar_randn(OAR_F32, 4, (int64_t[]){3, 10, 4, 8}), *dbthe = oar_tensor_to(bthe, d);
    const int64_t bhte[4] = {0, 2, 1, 3};
    oar_tensor *hq = oar_permute(dbthe, bhte), *hq_cpu = oar_permute(bthe, bhte);
    check_close(oar_matmul(hq, oar_transpose(hq, 2, 3)), oar_matmul(hq_cpu, oar_transpose(hq_cpu, 2, 3)), 1e-4);
    CHECK(oar_device_fallback_count() == before); /* none of them on the CPU */
    oar_pool_pop(pool);
}
#endif

int main(void) {
#ifndef OAR_CUDA_PLUGIN
    printf("SKIP: the cuda plugin was not built (no CUDA toolkit found by CMake)\n");
    return 77;
#else
    setenv("OAR_PLUGIN_PATH", "/nonexistent-folder", 1);
    setenv("OAR_PLUGIN_NO_INSTALL_DIR", "1", 1);
    oar_clear_error();
    const char *file = getenv("OAR_TEST_CUDA_PLUGIN"); /* a build tree carried to another path */
    int st = oar_plugin_load(file && *file ? file : OAR_CUDA_PLUGIN);
    oar_plugin_info in;
    CHECK(oar_plugin_count() == 1 && oar_plugin_get_info(0, &in) == 0);
    CHECK(!strcmp(in.name, "cuda"));
    if (st && getenv("OAR_REQUIRE_CUDA") && *getenv("OAR_REQUIRE_CUDA") && strcmp(getenv("OAR_REQUIRE_CUDA"), "0")) {
        /* on a GPU machine (scripts/gpu-check.sh): a refusal is a failure */
        fprintf(stderr, "OAR_REQUIRE_CUDA is set and the cuda plugin was refused: %s\n", in.reason);
        CHECK(st == 0);
        return test_summary();
    }
    if (st) { /* loaded as a library, refused by its init: no usable GPU here */
        printf("cuda plugin refused (expected without a GPU): %s\n", in.reason);
        CHECK(strstr(in.reason, "oar_plugin_init failed") != NULL);
        CHECK(strstr(in.reason, "cuda: no CUDA device") != NULL);
        CHECK(oar_device_count() == 1);
        CHECK_FAILS(oar_device_get("cuda:0"), "no device \"cuda:0\" (available: cpu)");
        oar_tensor *x = oar_ones(OAR_F32, 1, (int64_t[]){3});
        CHECK(oar_tensor_item(oar_sum(x, 0, NULL, false)) == 3); /* oar keeps running */
        return test_summary();
    }
    oar_device *d = oar_device_get("cuda:0");
    CHECK(d != NULL);
    oar_pool *pool = oar_pool_push();
    int64_t sa[2] = {37, 45}, sb[2] = {45, 19};
    oar_tensor *a = oar_randn(OAR_F32, 2, sa), *b = oar_randn(OAR_F32, 2, sb);
    oar_tensor *da = oar_tensor_to(a, d), *db = oar_tensor_to(b, d);
    oar_device_fallback_reset();
    oar_tensor *y = oar_relu(oar_add(oar_matmul(da, db), oar_scalar(0.5)));
    oar_tensor *yt = oar_matmul(oar_transpose(db, 0, 1), oar_transpose(da, 0, 1));
    CHECK(oar_device_fallback_count() == 0);
    check_close(y, oar_relu(oar_add(oar_matmul(a, b), oar_scalar(0.5))), 1e-4);
    check_close(yt, oar_matmul(oar_transpose(b, 0, 1), oar_transpose(a, 0, 1)), 1e-4);
    /* expanded operands (stride 0): cuBLAS would read past the buffer, so
     * the plugin copies them dense first (plugins/cuda/cuda_gemm_layout.h) */
    oar_tensor *row = oar_randn(OAR_F32, 2, (int64_t[]){1, 45}), *drow = oar_tensor_to(row, d);
    oar_tensor *wide = oar_expand(drow, 2, (int64_t[]){37, 45}), *wide_cpu = oar_expand(row, 2, (int64_t[]){37, 45});
    check_close(oar_matmul(wide, db), oar_matmul(wide_cpu, b), 1e-4);
    check_close(oar_matmul(oar_transpose(db, 0, 1), oar_transpose(wide, 0, 1)),
                oar_matmul(oar_transpose(b, 0, 1), oar_transpose(wide_cpu, 0, 1)), 1e-4);
    check_close(oar_cumsum(da, 1), oar_cumsum(a, 1), 1e-4); /* through the CPU fallback */
    CHECK(oar_device_fallback_count() > 0);
    oar_pool_pop(pool);
    check_compiled_on(d);
    check_coverage(d);
    return test_summary();
#endif
}

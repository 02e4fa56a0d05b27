/* The cuda plugin built in this tree loads: dlopen resolves every symbol
 * (CUDA runtime, cuBLAS) and oar_plugin_init runs. Without a GPU it is
 * refused with the driver's reason and oar keeps running on the CPU; with
 * one, the ops it claims run on cuda:0 without fallback and equal the CPU's
 * results (test_backend_ops then also runs every claimed kernel), and a
 * compiled graph runs its generated CUDA kernels there. With
 * OAR_REQUIRE_CUDA=1 (scripts/gpu-check.sh) a refusal fails the test
 * instead. An expanded operand of matmul is refused by the plugin and
 * runs on the CPU, with the right values. Skipped (exit 77) where the
 * plugin was not built (no CUDA toolkit). */
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
#endif

int main(void) {
#ifndef OAR_CUDA_PLUGIN
    printf("SKIP: the cuda plugin was not built (no CUDA toolkit found by CMake)\n");
    return 77;
#else
    setenv("OAR_PLUGIN_PATH", "/nonexistent-folder", 1);
    setenv("OAR_PLUGIN_NO_INSTALL_DIR", "1", 1);
    oar_clear_error();
    int st = oar_plugin_load(OAR_CUDA_PLUGIN);
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
     * the plugin refuses them (plugins/cuda/cuda_gemm_layout.h) */
    oar_tensor *row = oar_randn(OAR_F32, 2, (int64_t[]){1, 45}), *drow = oar_tensor_to(row, d);
    oar_tensor *wide = oar_expand(drow, 2, (int64_t[]){37, 45}), *wide_cpu = oar_expand(row, 2, (int64_t[]){37, 45});
    check_close(oar_matmul(wide, db), oar_matmul(wide_cpu, b), 1e-4);
    check_close(oar_matmul(oar_transpose(db, 0, 1), oar_transpose(wide, 0, 1)),
                oar_matmul(oar_transpose(b, 0, 1), oar_transpose(wide_cpu, 0, 1)), 1e-4);
    check_close(oar_softmax(da, 1), oar_softmax(a, 1), 1e-6); /* through the CPU fallback */
    CHECK(oar_device_fallback_count() > 0);
    oar_pool_pop(pool);
    check_compiled_on(d);
    return test_summary();
#endif
}

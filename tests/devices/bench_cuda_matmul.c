/* matmul on cuda:0 through oar (dispatch, the cuda plugin's caching
 * allocator and its cublasGemmStridedBatchedEx) against raw cuBLAS
 * (cublasGemmEx on buffers of its own, the same data types and compute
 * type: f32 without TF32, bf16 with f32 accumulation) at n x n x n, in
 * f32 and bf16. Prints GFLOP/s of each, the ratio (issue 25's target: at
 * least 0.9) and how far oar's product is from cuBLAS's and from a
 * double-precision product of sampled entries. Exit 0 when both products
 * are right, 1 when one is wrong or a step fails; the ratio is reported,
 * not checked (a timing is no test). 77 where there is no cuda:0, unless
 * OAR_REQUIRE_CUDA is set (then 1). Usage: bench_cuda_matmul [n [reps]]
 * (default 2048, 20). Built where the cuda plugin is (scripts/gpu-check.sh
 * runs it). */
#include <oar/oar.h>

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static float bf16_to_f32(uint16_t h) {
    union { uint32_t u; float f; } v = {.u = (uint32_t)h << 16};
    return v.f;
}

/* one dtype: 0 on success, 1 when a product is wrong or a step failed */
static int run(oar_device *d, oar_dtype dt, int64_t n, int reps) {
    const bool bf = dt == OAR_BF16;
    const size_t es = bf ? 2 : 4, bytes = (size_t)(n * n) * es;
    int64_t shape[2] = {n, n};
    oar_pool *pool = oar_pool_push();
    oar_manual_seed(7);
    oar_tensor *a_h = oar_cast(oar_randn(OAR_F32, 2, shape), dt), *b_h = oar_cast(oar_randn(OAR_F32, 2, shape), dt);
    oar_tensor *a = oar_tensor_to(a_h, d), *b = oar_tensor_to(b_h, d);
    void *ha = malloc(bytes), *hb = malloc(bytes), *hc = malloc(bytes), *hr = malloc(bytes);
    int bad = !a || !b || !ha || !hb || !hc || !hr || oar_tensor_to_host(a_h, ha, bytes) || oar_tensor_to_host(b_h, hb, bytes);
    /* oar: reps products, timed from the first call to the device's last work */
    double t_oar = INFINITY;
    oar_tensor *c = NULL;
    for (int round = 0; round < 5 && !bad; round++) {
        oar_pool *p = oar_pool_push();
        double t0 = now();
        for (int r = 0; r < reps && !bad; r++) bad = !oar_matmul(a, b);
        bad = bad || oar_device_synchronize(d);
        double t = now() - t0;
        oar_pool_pop(p);
        if (round > 0 && t < t_oar) t_oar = t; /* (round 0: warm-up) */
    }
    if (!bad) c = oar_matmul(a, b);
    bad = bad || !c || oar_tensor_to_host(c, hc, bytes);
    if (bad) fprintf(stderr, "oar matmul on %s failed: %s\n", oar_device_name(d), oar_last_error());
    /* raw cuBLAS on buffers of its own */
    double t_blas = INFINITY;
    void *da = NULL, *db = NULL, *dc = NULL;
    cublasHandle_t h = NULL;
    int rb = bad || cudaMalloc(&da, bytes) || cudaMalloc(&db, bytes) || cudaMalloc(&dc, bytes) ||
             cudaMemcpy(da, ha, bytes, cudaMemcpyHostToDevice) || cudaMemcpy(db, hb, bytes, cudaMemcpyHostToDevice) ||
             cublasCreate(&h);
    const float one = 1, zero = 0;
    const cudaDataType_t t = bf ? CUDA_R_16BF : CUDA_R_32F;
    for (int round = 0; round < 5 && !rb; round++) {
        double t0 = now();
        /* row-major C = A B is column-major C^T = B^T A^T */
        for (int r = 0; r < reps && !rb; r++)
            rb = cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, (int)n, (int)n, (int)n, &one, db, t, (int)n, da, t, (int)n,
                              &zero, dc, t, (int)n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS;
        rb = rb || cudaDeviceSynchronize();
        double el = now() - t0;
        if (round > 0 && el < t_blas) t_blas = el;
    }
    rb = rb || cudaMemcpy(hr, dc, bytes, cudaMemcpyDeviceToHost);
    if (!bad && rb) fprintf(stderr, "raw cuBLAS failed\n");
    bad = bad || rb;
    /* oar's product against cuBLAS's, and sampled entries against a double product */
    double vs_blas = 0, vs_ref = 0;
    const double tol_blas = bf ? 1.6e-2 : 1e-4, tol_ref = bf ? 1.6e-2 : 1e-4;
    for (int64_t i = 0; i < n * n && !bad; i++) {
        double x = bf ? bf16_to_f32(((uint16_t *)hc)[i]) : ((float *)hc)[i];
        double y = bf ? bf16_to_f32(((uint16_t *)hr)[i]) : ((float *)hr)[i];
        double e = fabs(x - y) / (1 + fabs(y));
        if (!(e <= vs_blas)) vs_blas = e;
    }
    for (int s = 0; s < 256 && !bad; s++) {
        int64_t i = (int64_t)(((uint64_t)s * 2654435761u) % (uint64_t)n), j = (int64_t)(((uint64_t)s * 40503u + 17) % (uint64_t)n);
        double acc = 0, mag = 0;
        for (int64_t k = 0; k < n; k++) {
            double av = bf ? bf16_to_f32(((uint16_t *)ha)[i * n + k]) : ((float *)ha)[i * n + k];
            double bv = bf ? bf16_to_f32(((uint16_t *)hb)[k * n + j]) : ((float *)hb)[k * n + j];
            acc += av * bv;
            mag += fabs(av * bv);
        }
        double got = bf ? bf16_to_f32(((uint16_t *)hc)[i * n + j]) : ((float *)hc)[i * n + j];
        double e = fabs(got - acc) / (1 + fabs(acc) + (bf ? 0 : 1e-6 * mag));
        if (!(e <= vs_ref)) vs_ref = e;
    }
    const double flop = 2.0 * (double)n * (double)n * (double)n * reps;
    bool right = !bad && vs_blas <= tol_blas && vs_ref <= tol_ref;
    printf("matmul %lld %s on %s: oar %.0f GFLOP/s, raw cuBLAS %.0f GFLOP/s, ratio %.3f; oar vs cuBLAS %.2g, vs "
           "double %.2g: %s\n",
           (long long)n, bf ? "bf16" : "f32", oar_device_name(d), bad ? 0 : flop / t_oar / 1e9,
           bad ? 0 : flop / t_blas / 1e9, bad ? 0 : t_blas / t_oar, vs_blas, vs_ref, right ? "right" : "WRONG");
    if (h) cublasDestroy(h);
    cudaFree(da), cudaFree(db), cudaFree(dc);
    free(ha), free(hb), free(hc), free(hr);
    oar_pool_pop(pool);
    return right ? 0 : 1;
}

int main(int argc, char **argv) {
    int64_t n = argc > 1 ? atoll(argv[1]) : 2048;
    int reps = argc > 2 ? atoi(argv[2]) : 20;
    if (n < 1 || n > 16384 || reps < 1 || argc > 3) {
        fprintf(stderr, "usage: %s [n (1..16384) [reps]]\n", argv[0]);
        return 2;
    }
#ifdef OAR_PLUGIN_BUILD_DIR
    if (!getenv("OAR_PLUGIN_PATH")) setenv("OAR_PLUGIN_PATH", OAR_PLUGIN_BUILD_DIR, 1);
#endif
    const char *req = getenv("OAR_REQUIRE_CUDA");
    bool required = req && *req && strcmp(req, "0");
    oar_device *d = oar_device_get("cuda:0");
    if (!d) {
        printf("%s: no cuda:0 (%s)\n", required ? "FAIL" : "SKIP", oar_last_error());
        return required ? 1 : 77;
    }
    int st = run(d, OAR_F32, n, reps);
    st |= run(d, OAR_BF16, n, reps);
    int64_t fb = oar_device_fallback_count();
    if (fb) printf("%lld ops ran on the CPU instead of cuda:0\n", (long long)fb);
    return st || fb ? 1 : 0;
}

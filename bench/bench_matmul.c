/* oar_matmul f32 against raw cblas_sgemm on the same inputs, measured in
 * the same run: prints GFLOP/s of both and their ratio (target >= 0.95).
 * Best of a few repetitions each, interleaved so that both see the same
 * machine load. Usage: bench_matmul [reps] (default 5 at 2048, 4x that at
 * 1024). */
#include <oar/oar.h>

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 5;
    if (reps < 1) reps = 1;
    const int64_t sizes[2] = {1024, 2048};
    int status = 0;
    printf("%-6s %14s %14s %8s\n", "n", "oar GFLOP/s", "cblas GFLOP/s", "ratio");
    for (int s = 0; s < 2; s++) {
        int64_t n = sizes[s], shape[2] = {n, n};
        oar_manual_seed(1);
        oar_tensor *a = oar_randn(OAR_F32, 2, shape), *b = oar_randn(OAR_F32, 2, shape);
        float *c = malloc(sizeof(float) * (size_t)(n * n));
        if (!a || !b || !c) {
            fprintf(stderr, "bench_matmul: setup failed: %s\n", oar_last_error());
            return 1;
        }
        const float *pa = oar_tensor_data(a), *pb = oar_tensor_data(b);
        double best_oar = 1e30, best_blas = 1e30;
        int nrep = n <= 1024 ? 4 * reps : reps;
        for (int r = 0; r <= nrep; r++) { /* r == 0 warms up */
            double t0 = now();
            oar_tensor *y = oar_matmul(a, b);
            double t1 = now();
            if (!y) {
                fprintf(stderr, "bench_matmul: %s\n", oar_last_error());
                return 1;
            }
            oar_tensor_release(y);
            double t2 = now();
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)n, (int)n, 1.0f, pa,
                        (int)n, pb, (int)n, 0.0f, c, (int)n);
            double t3 = now();
            if (r > 0) {
                if (t1 - t0 < best_oar) best_oar = t1 - t0;
                if (t3 - t2 < best_blas) best_blas = t3 - t2;
            }
        }
        double flop = 2.0 * (double)n * (double)n * (double)n;
        double g_oar = flop / best_oar * 1e-9, g_blas = flop / best_blas * 1e-9;
        printf("%-6lld %14.1f %14.1f %8.3f\n", (long long)n, g_oar, g_blas, g_oar / g_blas);
        free(c);
        oar_tensor_release(a);
        oar_tensor_release(b);
    }
    return status;
}

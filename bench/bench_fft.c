/* FFT timings: fft of complex64 [4096, 256] along the last dim, rfft2 of
 * float32 [16, 256, 256], and each forward + backward (oar_grad with a
 * given output gradient). Prints "oar <metric> <us per call> us", the
 * fastest single call of 5 x iters (the machine is shared: a mean over
 * calls mostly measures the neighbours); the peer, bench/peer/fft.py,
 * measures the same way. With OAR_BENCH_CPU_TIME=1 both time CPU time of
 * the process instead (with OMP_NUM_THREADS=1 here and one torch thread
 * there): on a machine loaded by others, wall time mostly measures them. */
#include <oar/oar.h>

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    static int cpu = -1;
    if (cpu < 0) cpu = getenv("OAR_BENCH_CPU_TIME") && atoi(getenv("OAR_BENCH_CPU_TIME"));
    clock_gettime(cpu ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef oar_tensor *(*fwd_fn)(oar_tensor *x);

static oar_tensor *f_fft(oar_tensor *x) { return oar_fft_fft(x, -1, -1, NULL); }
static oar_tensor *f_rfft2(oar_tensor *x) { return oar_fft_rfft2(x, NULL, NULL, NULL); }

/* backward: forward under autograd, then oar_grad with g */
static void bench(const char *name, fwd_fn fn, oar_tensor *x, oar_tensor *g, int iters) {
    double best = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        for (int i = 0; i < iters; i++) {
            double t0 = now();
            oar_pool *q = oar_pool_push();
            oar_tensor *y = fn(x);
            if (!y) fprintf(stderr, "%s failed: %s\n", name, oar_last_error());
            if (g) {
                oar_tensor *dx = NULL;
                if (oar_grad(1, &y, &g, 1, &x, false, false, &dx))
                    fprintf(stderr, "%s backward failed: %s\n", name, oar_last_error());
            }
            oar_pool_pop(q);
            double us = (now() - t0) * 1e6;
            if (us < best) best = us;
        }
    }
    printf("oar %s %.2f us\n", name, best);
}

int main(void) {
    oar_manual_seed(0);
    int64_t s1[2] = {4096, 256}, s2[3] = {16, 256, 256}, s2h[3] = {16, 256, 129};
    oar_pool *p = oar_pool_push();
    oar_tensor *xc = oar_cast(oar_randn(OAR_F32, 2, s1), OAR_C64);
    oar_tensor *xr = oar_randn(OAR_F32, 3, s2);
    oar_tensor *gc = oar_cast(oar_randn(OAR_F32, 2, s1), OAR_C64);
    oar_tensor *gr = oar_cast(oar_randn(OAR_F32, 3, s2h), OAR_C64);
    bench("fft_c64_4096x256", f_fft, xc, NULL, 20);
    bench("rfft2_f32_16x256x256", f_rfft2, xr, NULL, 20);
    oar_tensor_set_requires_grad(xc, true);
    oar_tensor_set_requires_grad(xr, true);
    bench("fft_c64_4096x256_fwd_bwd", f_fft, xc, gc, 10);
    bench("rfft2_f32_16x256x256_fwd_bwd", f_rfft2, xr, gr, 10);
    oar_pool_pop(p);
    return 0;
}

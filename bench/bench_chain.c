/* Autograd bookkeeping cost: a chain of 1000 tiny ops (mul, add, sin in
 * turn on 4-element f32 tensors) recorded on the tape, then backward to
 * the one leaf. Prints the time of forward + backward per chain and per
 * op. One OpenMP thread, as the peer (bench/peer/chain.py). */
#include <oar/oar.h>

#include <omp.h>
#include <stdio.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

enum { LEN = 1000 };

static int chain(oar_tensor *x, oar_tensor *c) {
    oar_pool *p = oar_pool_push();
    oar_tensor *h = x;
    for (int i = 0; i < LEN; i++) {
        switch (i % 3) {
        case 0: h = oar_mul(h, c); break;
        case 1: h = oar_add(h, c); break;
        default: h = oar_sin(h); break;
        }
    }
    int st = h ? oar_backward(oar_sum(h, 0, NULL, false), NULL) : -1;
    oar_tensor_zero_grad(x);
    oar_pool_pop(p);
    return st;
}

int main(void) {
    omp_set_num_threads(1);
    int64_t four = 4;
    float xv[4] = {0.1f, 0.2f, 0.3f, 0.4f}, cv[4] = {0.9f, 0.8f, 0.7f, 0.6f};
    oar_tensor *x = oar_tensor_from_data(xv, OAR_F32, 1, &four);
    oar_tensor *c = oar_tensor_from_data(cv, OAR_F32, 1, &four);
    oar_tensor_set_requires_grad(x, true);
    double best = 1e30;
    for (int rep = 0; rep < 7; rep++) {
        const int n = 50;
        double t0 = now();
        for (int k = 0; k < n; k++)
            if (chain(x, c)) {
                fprintf(stderr, "bench_chain: %s\n", oar_last_error());
                return 1;
            }
        double us = (now() - t0) * 1e6 / n;
        if (rep > 0 && us < best) best = us;
    }
    printf("oar chain1000_fwd_bwd %.1f us\n", best);
    printf("oar chain_per_op %.1f ns\n", best * 1e3 / LEN);
    oar_tensor_release(x);
    oar_tensor_release(c);
    return 0;
}

/* The profiler's cost on the MLP 784-512-512-10 training step (batch 128,
 * SGD, as bench_mlp_step): blocks of steps with the profiler off and on,
 * alternating, median per-step time of each. Off, the hooks are one branch
 * per op call, below the noise here; measure that part with callgrind on
 * `bench_profiler off 20`, built with and without -DOARI_PROF_DISABLED
 * (bench/RESULTS.md gives the figures). Peer: bench/peer/profiler.py
 * (torch.profiler with shapes and memory on the same step).
 *   bench_profiler            the comparison
 *   bench_profiler off N      N steps with the profiler off only
 *   bench_profiler on N       N steps recorded (for callgrind) */
#include <oar/oar.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static oar_tensor *param(int64_t rows, int64_t cols) {
    int64_t shape[2] = {rows, cols};
    oar_tensor *w = oar_randn(OAR_F32, cols ? 2 : 1, cols ? shape : &rows);
    oar_tensor *s = oar_mul_scalar(w, 0.05);
    oar_tensor *p = oar_clone(s);
    oar_tensor_release(w);
    oar_tensor_release(s);
    oar_tensor_set_requires_grad(p, true);
    return p;
}

static oar_tensor *w[3], *b[3], *x, *y;

static int step(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *h = x;
    for (int l = 0; l < 3; l++) {
        h = oar_add(oar_matmul(h, w[l]), b[l]);
        if (l < 2) h = oar_relu(h);
    }
    oar_tensor *loss = oar_cross_entropy(h, y, NULL, -100, 0.0, OAR_REDUCTION_MEAN);
    if (!loss || oar_backward(loss, NULL)) {
        fprintf(stderr, "step failed: %s\n", oar_last_error());
        oar_pool_pop(p);
        return 1;
    }
    oar_no_grad_push();
    for (int l = 0; l < 3; l++) {
        oar_tensor *ps[2] = {w[l], b[l]};
        for (int k = 0; k < 2; k++) {
            oar_copy_(ps[k], oar_sub(ps[k], oar_mul_scalar(oar_tensor_grad(ps[k]), 0.01)));
            oar_tensor_zero_grad(ps[k]);
        }
    }
    oar_no_grad_pop();
    oar_pool_pop(p);
    return 0;
}

/* Seconds per step over n steps. */
static double block(int n) {
    double t0 = now();
    for (int s = 0; s < n; s++)
        if (step()) exit(1);
    return (now() - t0) / n;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    oar_manual_seed(0);
    w[0] = param(784, 512), w[1] = param(512, 512), w[2] = param(512, 10);
    b[0] = param(512, 0), b[1] = param(512, 0), b[2] = param(10, 0);
    int64_t xs[2] = {128, 784}, ys[1] = {128};
    x = oar_randn(OAR_F32, 2, xs);
    y = oar_randint(0, 10, OAR_I64, 1, ys);
    block(5); /* warm */
    if (argc > 2 && !strcmp(argv[1], "off")) {
        block(atoi(argv[2]));
    } else if (argc > 2 && !strcmp(argv[1], "on")) {
        if (oar_profiler_start()) {
            fprintf(stderr, "%s\n", oar_last_error());
            return 1;
        }
        block(atoi(argv[2]));
        oar_profiler_stop();
        oar_profiler_reset();
    } else {
        enum { ROUNDS = 8, STEPS = 10 };
        double off[ROUNDS], on[ROUNDS];
        int64_t events = 0;
        for (int r = 0; r < ROUNDS; r++) {
            off[r] = block(STEPS);
            if (oar_profiler_start()) {
                fprintf(stderr, "%s\n", oar_last_error());
                return 1;
            }
            on[r] = block(STEPS);
            oar_profiler_stop();
            oar_profiler_totals t;
            oar_profiler_totals_get(&t);
            events = t.n_events / STEPS;
        }
        qsort(off, ROUNDS, sizeof *off, cmp);
        qsort(on, ROUNDS, sizeof *on, cmp);
        double moff = 0.5 * (off[ROUNDS / 2 - 1] + off[ROUNDS / 2]);
        double mon = 0.5 * (on[ROUNDS / 2 - 1] + on[ROUNDS / 2]);
        printf("oar mlp_step_profiler_off %.3f ms\n", moff * 1e3);
        printf("oar mlp_step_profiler_on %.3f ms\n", mon * 1e3);
        printf("oar profiler_on_overhead %.3f x\n", mon / moff);
        printf("oar profiler_events_per_step %lld events\n", (long long)events);
        printf("ratio mlp_step profiler_on/profiler_off = %.3f\n", mon / moff);
        oar_profiler_reset();
    }
    for (int l = 0; l < 3; l++) {
        oar_tensor_release(w[l]);
        oar_tensor_release(b[l]);
    }
    oar_tensor_release(x);
    oar_tensor_release(y);
    return 0;
}

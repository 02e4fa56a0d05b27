/* conv2d forward at LeNet sizes (batch 64: 1->6 5x5 on 28x28, 6->16 5x5 on
 * 12x12) and a 64->64 3x3 conv on 32x32: oar's time per call. The PyTorch
 * column is added by the lead's comparison script. Runs in a few seconds. */
#include <oar/oar.h>

#include <stdio.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct {
    const char *name;
    int64_t n, c, h, w, o, k, pad;
} conv_case;

/* Median-free but warm: best of `reps` timed calls after one warm-up call. */
static int run_case(const conv_case *cc, int reps) {
    oar_manual_seed(1);
    oar_pool *outer = oar_pool_push();
    oar_tensor *x = oar_randn(OAR_F32, 4, (int64_t[]){cc->n, cc->c, cc->h, cc->w});
    oar_tensor *w = oar_randn(OAR_F32, 4, (int64_t[]){cc->o, cc->c, cc->k, cc->k});
    oar_tensor *b = oar_randn(OAR_F32, 1, (int64_t[]){cc->o});
    const int64_t s[2] = {1, 1}, p[2] = {cc->pad, cc->pad}, d[2] = {1, 1};
    double best = 1e30;
    for (int r = 0; r <= reps; r++) {
        oar_pool *pool = oar_pool_push();
        double t0 = now();
        oar_tensor *y = oar_conv2d(x, w, b, s, p, d, 1);
        double dt = now() - t0;
        if (!y) {
            fprintf(stderr, "%s: %s\n", cc->name, oar_last_error());
            oar_pool_pop(pool);
            oar_pool_pop(outer);
            return 1;
        }
        if (r > 0 && dt < best) best = dt;
        oar_pool_pop(pool);
    }
    int64_t oh = cc->h + 2 * cc->pad - cc->k + 1, ow = cc->w + 2 * cc->pad - cc->k + 1;
    double flops = 2.0 * (double)(cc->n * cc->o * oh * ow) * (double)(cc->c * cc->k * cc->k);
    printf("%-28s oar %9.3f ms  %7.2f GFLOP/s\n", cc->name, best * 1e3, flops / best * 1e-9);
    oar_pool_pop(outer);
    return 0;
}

int main(void) {
    const conv_case cases[] = {
        {"lenet conv1 64x1x28x28 k5", 64, 1, 28, 28, 6, 5, 0},
        {"lenet conv2 64x6x12x12 k5", 64, 6, 12, 12, 16, 5, 0},
        {"conv3x3 16x64x32x32", 16, 64, 32, 32, 64, 3, 1},
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        bad |= run_case(&cases[i], 10);
    return bad;
}

/* conv2d forward at LeNet sizes (batch 64: 1->6 5x5 on 28x28, 6->16 5x5 on
 * 12x12), a 64->64 3x3 conv on 32x32, and every distinct conv of ResNet-18
 * at 224x224 with its 3x3 stride-2 max_pool (batch 1, or argv[1]).
 * Prints "oar <metric> <ms per call> ms" (median of the repetitions) and,
 * for ResNet-18, the sum over the network's 20 convs weighted by how often
 * each shape occurs; the peer is bench/peer/conv.py. OAR_BENCH_CPUTIME=1
 * times process CPU time (run with OMP_NUM_THREADS=1 on a shared machine).
 * Optional argv[2]: run only the cases whose name contains it. */
#include <oar/oar.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static clockid_t clock_id = CLOCK_MONOTONIC;

static double now(void) {
    struct timespec ts;
    clock_gettime(clock_id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct {
    const char *name;
    int64_t n, c, h, w, o, k, stride, pad;
    int times; /* how often the shape occurs in the network (0: not ResNet) */
    int pool;  /* 1: max_pool2d k x k instead of a conv (o unused) */
} conv_case;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median of `reps` timed calls after one warm-up call, in seconds; < 0 on error. */
static double run_case(const conv_case *cc, int reps) {
    oar_manual_seed(1);
    oar_pool *outer = oar_pool_push();
    oar_tensor *x = oar_randn(OAR_F32, 4, (int64_t[]){cc->n, cc->c, cc->h, cc->w});
    oar_tensor *w = oar_randn(OAR_F32, 4, (int64_t[]){cc->o, cc->c, cc->k, cc->k});
    oar_tensor *b = oar_randn(OAR_F32, 1, (int64_t[]){cc->o});
    const int64_t s[2] = {cc->stride, cc->stride}, p[2] = {cc->pad, cc->pad}, d[2] = {1, 1};
    const int64_t k[2] = {cc->k, cc->k};
    double t[64];
    if (reps > 63) reps = 63;
    for (int r = 0; r <= reps; r++) {
        oar_pool *pool = oar_pool_push();
        double t0 = now();
        oar_tensor *y = cc->pool ? oar_max_pool2d(x, k, s, p, d, false, NULL)
                                 : oar_conv2d(x, w, b, s, p, d, 1);
        double dt = now() - t0;
        if (!y) {
            fprintf(stderr, "%s: %s\n", cc->name, oar_last_error());
            oar_pool_pop(pool);
            oar_pool_pop(outer);
            return -1;
        }
        if (r > 0) t[r - 1] = dt;
        oar_pool_pop(pool);
    }
    qsort(t, (size_t)reps, sizeof t[0], cmp_double);
    oar_pool_pop(outer);
    return t[reps / 2];
}

int main(int argc, char **argv) {
    const char *cpu = getenv("OAR_BENCH_CPUTIME");
    if (cpu && *cpu == '1') clock_id = CLOCK_PROCESS_CPUTIME_ID;
    const int64_t N = argc > 1 ? atoll(argv[1]) : 1;
    const char *only = argc > 2 ? argv[2] : NULL;
    const conv_case cases[] = {
        {"lenet_conv1", 64, 1, 28, 28, 6, 5, 1, 0, 0, 0},
        {"lenet_conv2", 64, 6, 12, 12, 16, 5, 1, 0, 0, 0},
        {"conv3x3_16x64x32x32", 16, 64, 32, 32, 64, 3, 1, 1, 0, 0},
        {"r18_stem_7x7s2", N, 3, 224, 224, 64, 7, 2, 3, 1, 0},
        {"r18_maxpool_3x3s2", N, 64, 112, 112, 64, 3, 2, 1, 1, 1},
        {"r18_l1_3x3", N, 64, 56, 56, 64, 3, 1, 1, 4, 0},
        {"r18_l2_3x3s2", N, 64, 56, 56, 128, 3, 2, 1, 1, 0},
        {"r18_l2_1x1s2", N, 64, 56, 56, 128, 1, 2, 0, 1, 0},
        {"r18_l2_3x3", N, 128, 28, 28, 128, 3, 1, 1, 3, 0},
        {"r18_l3_3x3s2", N, 128, 28, 28, 256, 3, 2, 1, 1, 0},
        {"r18_l3_1x1s2", N, 128, 28, 28, 256, 1, 2, 0, 1, 0},
        {"r18_l3_3x3", N, 256, 14, 14, 256, 3, 1, 1, 3, 0},
        {"r18_l4_3x3s2", N, 256, 14, 14, 512, 3, 2, 1, 1, 0},
        {"r18_l4_1x1s2", N, 256, 14, 14, 512, 1, 2, 0, 1, 0},
        {"r18_l4_3x3", N, 512, 7, 7, 512, 3, 1, 1, 3, 0},
    };
    double total = 0;
    int bad = 0, all = 1;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const conv_case *cc = &cases[i];
        if (only && !strstr(cc->name, only)) {
            all = 0;
            continue;
        }
        int64_t oh = (cc->h + 2 * cc->pad - cc->k) / cc->stride + 1;
        int64_t ow = (cc->w + 2 * cc->pad - cc->k) / cc->stride + 1;
        double macs = (double)(cc->n * cc->o * oh * ow) * (double)(cc->c * cc->k * cc->k);
        int reps = macs * cc->n > 2e9 ? 5 : 15;
        double t = run_case(cc, reps);
        if (t < 0) {
            bad = 1;
            continue;
        }
        if (cc->pool)
            printf("oar %s %.3f ms\n", cc->name, t * 1e3);
        else
            printf("oar %s %.3f ms  # %.1f GFLOP/s\n", cc->name, t * 1e3, 2 * macs / t * 1e-9);
        total += t * cc->times;
    }
    if (all) printf("oar r18_convs_and_pool_b%lld %.3f ms\n", (long long)N, total * 1e3);
    return bad;
}

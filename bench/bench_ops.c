/* Op timings at the sizes of a LeNet and a small transformer (batch 64;
 * d=128, seq 64, batch 8): elementwise, reductions, softmax, layer_norm,
 * conv2d and pooling. Prints "oar <metric> <us per call> us"; the peer is
 * bench/peer/ops.py. Best of several repetitions. */
#include <oar/oar.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Optional argv[1]: run only the ops whose name contains it; argv[2]: a
 * scale for the iteration counts (for profilers, e.g. 0.05). */
static const char *only;
static double scale = 1.0;

/* OAR_BENCH_CPUTIME=1 times process CPU time instead of wall time: on a
 * shared machine, run single-threaded (OMP_NUM_THREADS=1, and the peer
 * with the same variable) so that time spent descheduled is not counted. */
static clockid_t clock_id = CLOCK_MONOTONIC;

static double now(void) {
    struct timespec ts;
    clock_gettime(clock_id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef oar_tensor *(*op_fn)(oar_tensor **in);

static void bench(const char *name, op_fn fn, oar_tensor **in, int iters) {
    if (only && !strstr(name, only)) return;
    iters = (int)(iters * scale) > 0 ? (int)(iters * scale) : 1;
    double best = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        oar_pool *p = oar_pool_push();
        double t0 = now();
        for (int i = 0; i < iters; i++) {
            oar_pool *q = oar_pool_push();
            if (!fn(in)) fprintf(stderr, "%s failed: %s\n", name, oar_last_error());
            oar_pool_pop(q);
        }
        double us = (now() - t0) * 1e6 / iters;
        if (us < best) best = us;
        oar_pool_pop(p);
    }
    printf("oar %s %.2f us\n", name, best);
}

static oar_tensor *f_add(oar_tensor **in) { return oar_add(in[0], in[1]); }
static oar_tensor *f_mul_bcast(oar_tensor **in) { return oar_mul(in[0], in[2]); }
static oar_tensor *f_gelu(oar_tensor **in) { return oar_gelu(in[0], false); }
static oar_tensor *f_exp(oar_tensor **in) { return oar_exp(in[0]); }
static oar_tensor *f_sum_last(oar_tensor **in) { int64_t d = -1; return oar_sum(in[0], 1, &d, false); }
static oar_tensor *f_sum_first(oar_tensor **in) { int64_t d = 0; return oar_sum(in[0], 1, &d, false); }
static oar_tensor *f_mean_last(oar_tensor **in) { int64_t d = -1; return oar_mean(in[0], 1, &d, false); }
static oar_tensor *f_amax_last(oar_tensor **in) { int64_t d = -1; return oar_amax(in[0], 1, &d, false); }
static oar_tensor *f_softmax(oar_tensor **in) { return oar_softmax(in[3], -1); }
static oar_tensor *f_layer_norm(oar_tensor **in) { return oar_layer_norm(in[0], 1, in[4], in[5], 1e-5); }
static oar_tensor *f_topk_vocab(oar_tensor **in) { return oar_topk(in[13], 50, -1, true, true, NULL); }
static oar_tensor *f_topk_rows(oar_tensor **in) { return oar_topk(in[0], 16, -1, true, true, NULL); }
static oar_tensor *f_conv1(oar_tensor **in) {
    int64_t s[2] = {1, 1}, p[2] = {0, 0}, d[2] = {1, 1};
    return oar_conv2d(in[6], in[7], in[8], s, p, d, 1);
}
static oar_tensor *f_conv2(oar_tensor **in) {
    int64_t s[2] = {1, 1}, p[2] = {0, 0}, d[2] = {1, 1};
    return oar_conv2d(in[9], in[10], in[11], s, p, d, 1);
}
static oar_tensor *f_maxpool(oar_tensor **in) {
    int64_t k[2] = {2, 2}, p[2] = {0, 0}, d[2] = {1, 1};
    return oar_max_pool2d(in[12], k, k, p, d, false, NULL);
}

int main(int argc, char **argv) {
    if (argc > 1) only = argv[1];
    if (argc > 2) scale = atof(argv[2]);
    const char *cpu = getenv("OAR_BENCH_CPUTIME");
    if (cpu && *cpu == '1') clock_id = CLOCK_PROCESS_CPUTIME_ID;
    oar_manual_seed(0);
    int64_t act[2] = {512, 128}, row[1] = {128}, att[3] = {32, 64, 64};
    int64_t x1[4] = {64, 1, 28, 28}, w1[4] = {6, 1, 5, 5}, b1[1] = {6};
    int64_t x2[4] = {64, 6, 12, 12}, w2[4] = {16, 6, 5, 5}, b2[1] = {16};
    int64_t pool_in[4] = {64, 6, 24, 24}, logits[2] = {8, 32000};
    oar_tensor *in[14] = {
        oar_randn(OAR_F32, 2, act), oar_randn(OAR_F32, 2, act), oar_randn(OAR_F32, 1, row),
        oar_randn(OAR_F32, 3, att), oar_ones(OAR_F32, 1, row), oar_zeros(OAR_F32, 1, row),
        oar_randn(OAR_F32, 4, x1), oar_randn(OAR_F32, 4, w1), oar_randn(OAR_F32, 1, b1),
        oar_randn(OAR_F32, 4, x2), oar_randn(OAR_F32, 4, w2), oar_randn(OAR_F32, 1, b2),
        oar_randn(OAR_F32, 4, pool_in), oar_randn(OAR_F32, 2, logits)};
    bench("add_512x128", f_add, in, 2000);
    bench("mul_bcast_512x128", f_mul_bcast, in, 2000);
    bench("exp_512x128", f_exp, in, 2000);
    bench("gelu_512x128", f_gelu, in, 1000);
    bench("sum_last_512x128", f_sum_last, in, 2000);
    bench("sum_first_512x128", f_sum_first, in, 2000);
    bench("mean_last_512x128", f_mean_last, in, 2000);
    bench("amax_last_512x128", f_amax_last, in, 2000);
    bench("softmax_32x64x64", f_softmax, in, 1000);
    bench("layer_norm_512x128", f_layer_norm, in, 1000);
    bench("conv2d_lenet1", f_conv1, in, 100);
    bench("conv2d_lenet2", f_conv2, in, 100);
    bench("max_pool2d_lenet", f_maxpool, in, 200);
    bench("topk_8x32000_k50", f_topk_vocab, in, 100);
    bench("topk_512x128_k16", f_topk_rows, in, 200);
    for (int i = 0; i < 14; i++) oar_tensor_release(in[i]);
    return 0;
}

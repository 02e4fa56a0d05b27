/* bf16 matmul (oneDNN's kernel through oar, where built with OAR_WITH_DNNL;
 * else f32 between casts) against f32 (oneDNN's or OpenBLAS's sgemm through
 * oar, src/backends/cpu/cpu_gemm.c), the raw library calls on the same
 * inputs (oneDNN's bf16 primitive, dnnl_sgemm and cblas_sgemm)
 * and PyTorch's torch.matmul on bf16 and f32 CPU tensors
 * (bench/peer/bf16_matmul.py, run by this program at the same thread
 * count), all in one run: GFLOP/s, best of `reps` each, the oar calls and
 * the raw ones interleaved so they see the same machine load. Then bf16
 * conv2d (oneDNN's kernel, or f32 between casts) against oar's f32 and
 * torch's F.conv2d in both dtypes on a few layer shapes: ms.
 * Usage, from the repository root: bench_bf16 [reps] [n] (default 5, 2048);
 * OMP_NUM_THREADS sets the threads of all of them. */
#include <oar/oar.h>

#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef OAR_BENCH_WITH_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#ifdef OAR_BENCH_WITH_DNNL
/* The raw oneDNN call: a bf16 [n, n] x [n, n] primitive made once,
 * executed on the same bf16 buffers as oar's call. */
typedef struct {
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    dnnl_primitive_t prim;
    dnnl_memory_t a, b, c;
} raw_dnnl;

static int raw_dnnl_make(raw_dnnl *r, int64_t n, void *a, void *b, void *c) {
    dnnl_dims_t dims = {n, n};
    dnnl_memory_desc_t md;
    dnnl_matmul_desc_t desc;
    dnnl_primitive_desc_t pd;
    if (dnnl_engine_create(&r->engine, dnnl_cpu, 0) ||
        dnnl_stream_create(&r->stream, r->engine, dnnl_stream_default_flags) ||
        dnnl_memory_desc_init_by_tag(&md, 2, dims, dnnl_bf16, dnnl_ab) ||
        dnnl_matmul_desc_init(&desc, &md, &md, NULL, &md) ||
        dnnl_primitive_desc_create(&pd, &desc, NULL, r->engine, NULL))
        return -1;
    int st = dnnl_primitive_create(&r->prim, pd) || dnnl_memory_create(&r->a, &md, r->engine, a) ||
             dnnl_memory_create(&r->b, &md, r->engine, b) || dnnl_memory_create(&r->c, &md, r->engine, c);
    dnnl_primitive_desc_destroy(pd);
    return st ? -1 : 0;
}

static int raw_dnnl_run(raw_dnnl *r) {
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, r->a}, {DNNL_ARG_WEIGHTS, r->b}, {DNNL_ARG_DST, r->c}};
    return dnnl_primitive_execute(r->prim, r->stream, 3, args) || dnnl_stream_wait(r->stream) ? -1 : 0;
}

static void raw_dnnl_free(raw_dnnl *r) {
    dnnl_memory_destroy(r->a);
    dnnl_memory_destroy(r->b);
    dnnl_memory_destroy(r->c);
    dnnl_primitive_destroy(r->prim);
    dnnl_stream_destroy(r->stream);
    dnnl_engine_destroy(r->engine);
}
#endif

/* The peer's figure for `metric` ("f32", "bf16", "conv0_f32", ...), from
 * its output lines "torch <metric> <value> <unit>"; 0 when missing. */
static double peer_figure(const char *out, const char *metric) {
    char key[64];
    snprintf(key, sizeof key, "torch %s ", metric);
    const char *p = strstr(out, key);
    return p ? atof(p + strlen(key)) : 0;
}

/* The conv2d layers timed (bench/peer/bf16_matmul.py has the same list):
 * N, C, H (= W), O, kernel, stride, padding. */
static const struct {
    const char *name;
    int64_t n, c, h, o, k, s, p;
} convs[] = {
    {"3x3 8x64x56x56 -> 64", 8, 64, 56, 64, 3, 1, 1},
    {"1x1 8x256x28x28 -> 128", 8, 256, 28, 128, 1, 1, 0},
    {"3x3 s2 8x128x28x28 -> 256", 8, 128, 28, 256, 3, 2, 1},
    {"7x7 s2 8x3x112x112 -> 64", 8, 3, 112, 64, 7, 2, 3},
};
#define N_CONVS (int)(sizeof convs / sizeof convs[0])

/* Best times (s) of conv i in f32 and bf16 through oar, interleaved. */
static int time_conv(int i, int reps, double best[2]) {
    int64_t xs[4] = {convs[i].n, convs[i].c, convs[i].h, convs[i].h};
    int64_t ws[4] = {convs[i].o, convs[i].c, convs[i].k, convs[i].k};
    const int64_t stride[2] = {convs[i].s, convs[i].s}, pad[2] = {convs[i].p, convs[i].p}, dil[2] = {1, 1};
    oar_pool *pool = oar_pool_push();
    oar_tensor *x = oar_randn(OAR_F32, 4, xs), *w = oar_randn(OAR_F32, 4, ws);
    oar_tensor *in[2][2] = {{x, w}, {oar_cast(x, OAR_BF16), oar_cast(w, OAR_BF16)}};
    best[0] = best[1] = 1e30;
    for (int r = 0; r <= reps; r++)
        for (int d = 0; d < 2; d++) {
            double t0 = now();
            oar_tensor *y = oar_conv2d(in[d][0], in[d][1], NULL, stride, pad, dil, 1);
            double t = now() - t0;
            if (!y) {
                fprintf(stderr, "bench_bf16: %s\n", oar_last_error());
                oar_pool_pop(pool);
                return 1;
            }
            oar_tensor_release(y);
            if (r > 0 && t < best[d]) best[d] = t;
        }
    oar_pool_pop(pool);
    return 0;
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 5;
    int64_t n = argc > 2 ? atoll(argv[2]) : 2048;
    if (reps < 1) reps = 1;
    if (n < 1) n = 2048;
    int threads = omp_get_max_threads();
    int64_t shape[2] = {n, n};
    oar_manual_seed(1);
    oar_tensor *a = oar_randn(OAR_F32, 2, shape), *b = oar_randn(OAR_F32, 2, shape);
    oar_tensor *ah = oar_cast(a, OAR_BF16), *bh = oar_cast(b, OAR_BF16);
    float *c32 = malloc(sizeof(float) * (size_t)(n * n));
    uint16_t *c16 = malloc(sizeof(uint16_t) * (size_t)(n * n));
    if (!a || !b || !ah || !bh || !c32 || !c16) {
        fprintf(stderr, "bench_bf16: setup failed: %s\n", oar_last_error());
        return 1;
    }
#ifdef OAR_BENCH_WITH_DNNL
    raw_dnnl raw;
    if (raw_dnnl_make(&raw, n, oar_tensor_data(ah), oar_tensor_data(bh), c16)) {
        fprintf(stderr, "bench_bf16: the raw oneDNN primitive could not be made\n");
        return 1;
    }
#endif
    const float *pa = oar_tensor_data(a), *pb = oar_tensor_data(b);
    enum { OAR_F32_, OAR_BF16_, RAW_BLAS, RAW_DNNL, RAW_DNNL_SGEMM, N_WAYS };
    double best[N_WAYS] = {1e30, 1e30, 1e30, 1e30, 1e30};
    for (int r = 0; r <= reps; r++) { /* r == 0 warms up (and makes oar's primitive) */
        double t[N_WAYS] = {0};
        for (int w = 0; w < N_WAYS; w++) {
            double t0 = now();
            if (w == OAR_F32_ || w == OAR_BF16_) {
                oar_tensor *y = w == OAR_F32_ ? oar_matmul(a, b) : oar_matmul(ah, bh);
                if (!y) {
                    fprintf(stderr, "bench_bf16: %s\n", oar_last_error());
                    return 1;
                }
                oar_tensor_release(y);
            } else if (w == RAW_BLAS) {
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)n, (int)n, 1.0f, pa,
                            (int)n, pb, (int)n, 0.0f, c32, (int)n);
            } else if (w == RAW_DNNL_SGEMM) {
#ifdef OAR_BENCH_WITH_DNNL
                if (dnnl_sgemm('N', 'N', n, n, n, 1.0f, pa, n, pb, n, 0.0f, c32, n) != dnnl_success) {
                    fprintf(stderr, "bench_bf16: the raw dnnl_sgemm call failed\n");
                    return 1;
                }
#endif
            } else {
#ifdef OAR_BENCH_WITH_DNNL
                if (raw_dnnl_run(&raw)) {
                    fprintf(stderr, "bench_bf16: the raw oneDNN call failed\n");
                    return 1;
                }
#endif
            }
            t[w] = now() - t0;
        }
        for (int w = 0; w < N_WAYS && r > 0; w++)
            if (t[w] < best[w]) best[w] = t[w];
    }
    double flop = 2.0 * (double)n * (double)n * (double)n, g[N_WAYS];
    for (int w = 0; w < N_WAYS; w++) g[w] = flop / best[w] * 1e-9;

    /* the peer, at the same thread count and size */
    double conv_best[N_CONVS][2];
    for (int i = 0; i < N_CONVS; i++)
        if (time_conv(i, reps, conv_best[i])) return 1;

    char cmd[512], out[4096] = "";
    const char *py = getenv("OAR_PEER_PYTHON") ? getenv("OAR_PEER_PYTHON") : "/usr/bin/python3";
    snprintf(cmd, sizeof cmd, "%s bench/peer/bf16_matmul.py %d %d %lld 2>/dev/null", py, threads, reps,
             (long long)n);
    FILE *f = popen(cmd, "r");
    if (f) {
        size_t len = fread(out, 1, sizeof out - 1, f);
        out[len] = 0;
        pclose(f);
    }
    double t32 = peer_figure(out, "f32"), t16 = peer_figure(out, "bf16");

    printf("matmul %lldx%lldx%lld, %d threads, GFLOP/s (best of %d)\n", (long long)n, (long long)n,
           (long long)n, threads, reps);
    printf("%-34s %10s %12s %8s\n", "", "oar", "peer", "ratio");
    printf("%-34s %10.1f %12.1f %8.3f\n", "f32: oar vs raw cblas_sgemm", g[OAR_F32_], g[RAW_BLAS],
           g[OAR_F32_] / g[RAW_BLAS]);
#ifdef OAR_BENCH_WITH_DNNL
    printf("%-34s %10.1f %12.1f %8.3f\n", "f32: oar vs raw dnnl_sgemm", g[OAR_F32_], g[RAW_DNNL_SGEMM],
           g[OAR_F32_] / g[RAW_DNNL_SGEMM]);
    printf("%-34s %10.1f %12.1f %8.3f\n", "bf16: oar vs raw oneDNN", g[OAR_BF16_], g[RAW_DNNL],
           g[OAR_BF16_] / g[RAW_DNNL]);
#else
    printf("%-34s %10.1f %12s %8s\n", "bf16 (no oneDNN: via f32)", g[OAR_BF16_], "-", "-");
#endif
    printf("%-34s %10.1f %12.1f %8.3f\n", "bf16 vs f32, oar", g[OAR_BF16_], g[OAR_F32_],
           g[OAR_BF16_] / g[OAR_F32_]);
    if (t32 > 0 && t16 > 0) {
        printf("%-34s %10.1f %12.1f %8.3f\n", "f32: oar vs torch.matmul", g[OAR_F32_], t32, g[OAR_F32_] / t32);
        printf("%-34s %10.1f %12.1f %8.3f\n", "bf16: oar vs torch.matmul", g[OAR_BF16_], t16, g[OAR_BF16_] / t16);
    } else {
        printf("(no peer figures: %s bench/peer/bf16_matmul.py needs PyTorch, run from the repository root)\n", py);
    }
    printf("\nconv2d, %d threads, ms (best of %d); ratio: oar bf16 over torch bf16 (lower is better)\n", threads,
           reps);
    printf("%-28s %9s %9s %11s %11s %8s\n", "", "oar f32", "oar bf16", "torch f32", "torch bf16", "ratio");
    for (int i = 0; i < N_CONVS; i++) {
        char k32[32], k16[32];
        snprintf(k32, sizeof k32, "conv%d_f32", i);
        snprintf(k16, sizeof k16, "conv%d_bf16", i);
        double p32 = peer_figure(out, k32), p16 = peer_figure(out, k16);
        printf("%-28s %9.2f %9.2f %11.2f %11.2f %8.3f\n", convs[i].name, conv_best[i][0] * 1e3,
               conv_best[i][1] * 1e3, p32, p16, p16 > 0 ? conv_best[i][1] * 1e3 / p16 : 0);
    }
#ifdef OAR_BENCH_WITH_DNNL
    raw_dnnl_free(&raw);
#endif
    free(c32);
    free(c16);
    oar_tensor_release(a);
    oar_tensor_release(b);
    oar_tensor_release(ah);
    oar_tensor_release(bh);
    return 0;
}

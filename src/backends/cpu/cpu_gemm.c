/* The CPU's f32 GEMM (oari_cpu_sgemm, cpu.h): every f32 product of the CPU
 * backend (matmul, im2col conv, Winograd's tile products, the RNN gates)
 * goes through here, to oneDNN's dnnl_sgemm or to CBLAS (OpenBLAS).
 *
 * Why two: OpenBLAS 0.3.21 (Debian 12) picks its kernels by CPU model, and
 * on a model newer than it knows it falls back to its generic SSE3 kernels
 * ("Prescott"): on an Intel Xeon of model 207 with AVX-512 that was 36 of
 * the 188 GFLOP/s its SkylakeX kernels reach (sgemm 2048, 2 threads), and
 * the char LM's f32 step took 187 ms instead of 57. The user can only fix
 * that with OPENBLAS_CORETYPE, read when OpenBLAS loads. oneDNN dispatches
 * on the instruction sets cpuid reports, and measured as fast or faster
 * than OpenBLAS's own AVX-512 kernels at every size a model here runs
 * (bench/RESULTS.md, 2026-12-07): 1.1-2x on the thin products of a
 * transformer and of im2col convs. Its call costs about 0.4 us more, so
 * products under 32^3 multiply-adds stay with OpenBLAS.
 *
 * f64 and complex products and gemv stay with OpenBLAS (oneDNN has none).
 * OAR_CPU_SGEMM=openblas|onednn pins the choice (read once); builds
 * without oneDNN (OAR_WITH_DNNL off) always use OpenBLAS. */
#include "cpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef OAR_WITH_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif

/* Products of fewer multiply-adds than this run on OpenBLAS: below it the
 * fixed cost of a call decides (8x8x8: 0.07 us against 0.41). */
#define ONEDNN_MIN_MACS (32 * 32 * 32)

/* -1: not read yet; else an oari_sgemm_provider */
static int provider = -1;

static int provider_from_env(void) {
#ifdef OAR_WITH_DNNL
    const char *v = getenv("OAR_CPU_SGEMM");
    if (!v || !*v || !strcmp(v, "auto")) return OARI_SGEMM_AUTO;
    if (!strcmp(v, "onednn")) return OARI_SGEMM_ONEDNN;
    if (!strcmp(v, "openblas")) return OARI_SGEMM_OPENBLAS;
    fprintf(stderr, "oar: OAR_CPU_SGEMM=%s is not one of auto, onednn, openblas; using auto\n", v);
    return OARI_SGEMM_AUTO;
#else
    return OARI_SGEMM_OPENBLAS; /* (the variable names nothing this build has) */
#endif
}

static int current(void) {
    int p = __atomic_load_n(&provider, __ATOMIC_RELAXED);
    if (p < 0) { /* two threads may both read the environment: they agree */
        p = provider_from_env();
        __atomic_store_n(&provider, p, __ATOMIC_RELAXED);
    }
    return p;
}

int oari_cpu_sgemm_use(int p) {
    int was = current();
#ifdef OAR_WITH_DNNL
    if (p == OARI_SGEMM_AUTO || p == OARI_SGEMM_ONEDNN || p == OARI_SGEMM_OPENBLAS)
#else
    if (p == OARI_SGEMM_OPENBLAS)
#endif
        __atomic_store_n(&provider, p, __ATOMIC_RELAXED);
    return was;
}

bool oari_cpu_sgemm_onednn(int64_t m, int64_t n, int64_t k) {
#ifdef OAR_WITH_DNNL
    int p = current();
    return p == OARI_SGEMM_ONEDNN || (p == OARI_SGEMM_AUTO && m * n * k >= ONEDNN_MIN_MACS);
#else
    (void)m, (void)n, (void)k;
    return false;
#endif
}

void oari_cpu_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb,
                    blasint m, blasint n, blasint k, float alpha, const float *a, blasint lda,
                    const float *b, blasint ldb, float beta, float *c, blasint ldc) {
#ifdef OAR_WITH_DNNL
    /* dnnl_sgemm is row-major; a column-major call (none in oar today) stays with CBLAS */
    if (order == CblasRowMajor && oari_cpu_sgemm_onednn(m, n, k) &&
        dnnl_sgemm(ta == CblasNoTrans ? 'N' : 'T', tb == CblasNoTrans ? 'N' : 'T', m, n, k, alpha,
                   a, lda, b, ldb, beta, c, ldc) == dnnl_success)
        return; /* (it refuses only what CBLAS would too: a leading dimension too small) */
#endif
    cblas_sgemm(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

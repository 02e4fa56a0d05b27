/* The CPU's f32 GEMM and GEMV (oari_cpu_sgemm, oari_cpu_sgemv; cpu.h):
 * every f32 product of the CPU backend (matmul, im2col conv, Winograd's
 * tile products, the RNN gates) goes through here, to oneDNN's dnnl_sgemm
 * or to CBLAS (OpenBLAS).
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
 * products under 32^3 multiply-adds stay with OpenBLAS, unless OpenBLAS
 * runs kernels without AVX on a CPU with AVX2 (then from 16^3, where
 * oneDNN already wins 4x). Matrix-vector products stay with sgemv, which
 * matches dnnl_sgemm with AVX kernels, except on such a pre-AVX OpenBLAS
 * (3-4x slower there).
 *
 * f64 and complex products stay with OpenBLAS (oneDNN has none): on a
 * pre-AVX OpenBLAS the first such product of some size says so once on
 * stderr, with the fix (oari_cpu_blas_note). OAR_CPU_SGEMM=openblas|onednn
 * pins the f32 choice (read once); builds without oneDNN (OAR_WITH_DNNL
 * off) always use OpenBLAS. */
#include "cpu.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef OAR_WITH_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif

/* Products of fewer multiply-adds than these run on OpenBLAS: below them
 * the fixed cost of a call decides (8x8x8: 0.07 us against 0.41). */
#define ONEDNN_MIN_MACS (32 * 32 * 32)
#define ONEDNN_MIN_MACS_PRE_AVX (16 * 16 * 16)

/* ---- what OpenBLAS runs ---------------------------------------------------- */

/* OpenBLAS's x86-64 kernel sets without AVX (its DYNAMIC_ARCH core names):
 * what it falls back to on a CPU model it does not know. */
static bool pre_avx_core(const char *name) {
    static const char *const cores[] = {"Prescott",  "Core2",  "Penryn",  "Dunnington",
                                        "Nehalem",   "Atom",   "Opteron", "Opteron_SSE3",
                                        "Barcelona", "Bobcat", "Nano"};
    for (size_t i = 0; name && i < sizeof cores / sizeof *cores; i++)
        if (!strcmp(name, cores[i])) return true;
    return false;
}

static bool blas_pre_avx; /* OpenBLAS runs pre-AVX kernels on a CPU with AVX2 */
static pthread_once_t blas_probed = PTHREAD_ONCE_INIT;

static void probe_blas(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    blas_pre_avx = __builtin_cpu_supports("avx2") && pre_avx_core(openblas_get_corename());
#endif
}

static bool openblas_pre_avx(void) {
    pthread_once(&blas_probed, probe_blas);
    return blas_pre_avx;
}

static void warn_pre_avx(void) {
#if defined(__x86_64__) && defined(__GNUC__)
#ifdef OAR_WITH_DNNL
    const char *f32 =
        "f64 and complex matrix products run several times slower than the CPU allows "
        "(f32 products go to oneDNN and are not affected)";
#else
    const char *f32 = "f64, complex and f32 matrix products run several times slower than the CPU "
                      "allows (this build has no oneDNN)";
#endif
    if (openblas_pre_avx())
        oari_log(
            OAR_LOG_WARN, "blas",
            "OpenBLAS runs its generic '%s' kernels on this CPU (a model it does not know), so %s; "
            "set OPENBLAS_CORETYPE=%s before the program starts",
            openblas_get_corename(), f32,
            __builtin_cpu_supports("avx512f") ? "SkylakeX" : "Haswell");
#endif
}

void oari_cpu_blas_note(int64_t macs) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    if (macs >= ONEDNN_MIN_MACS) pthread_once(&once, warn_pre_avx);
}

/* ---- the f32 choice ---------------------------------------------------------- */

/* -1: not read yet; else an OARI_SGEMM_* */
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
    if (p != OARI_SGEMM_AUTO) return p == OARI_SGEMM_ONEDNN;
    return m * n * k >= (openblas_pre_avx() ? ONEDNN_MIN_MACS_PRE_AVX : ONEDNN_MIN_MACS);
#else
    (void)m, (void)n, (void)k;
    return false;
#endif
}

bool oari_cpu_sgemv_onednn(int64_t rows, int64_t cols) {
#ifdef OAR_WITH_DNNL
    int p = current();
    if (p != OARI_SGEMM_AUTO) return p == OARI_SGEMM_ONEDNN;
    return openblas_pre_avx() && rows * cols >= ONEDNN_MIN_MACS_PRE_AVX;
#else
    (void)rows, (void)cols;
    return false;
#endif
}

/* ---- the calls ------------------------------------------------------------------ */

void oari_cpu_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb,
                    blasint m, blasint n, blasint k, float alpha, const float *a, blasint lda,
                    const float *b, blasint ldb, float beta, float *c, blasint ldc) {
    oari_lib_icv icv = oari_lib_enter(0);
#ifdef OAR_WITH_DNNL
    /* dnnl_sgemm is row-major; a column-major call (none in oar today) stays with CBLAS.
     * (It refuses only what CBLAS would too: a leading dimension too small.) */
    if (order == CblasRowMajor && oari_cpu_sgemm_onednn(m, n, k) &&
        dnnl_sgemm(ta == CblasNoTrans ? 'N' : 'T', tb == CblasNoTrans ? 'N' : 'T', m, n, k, alpha,
                   a, lda, b, ldb, beta, c, ldc) == dnnl_success) {
        oari_lib_leave(icv);
        return;
    }
#endif
    cblas_sgemm(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    oari_lib_leave(icv);
}

void oari_cpu_dgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb,
                    blasint m, blasint n, blasint k, double alpha, const double *a, blasint lda,
                    const double *b, blasint ldb, double beta, double *c, blasint ldc) {
    oari_lib_icv icv = oari_lib_enter(0);
    cblas_dgemm(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    oari_lib_leave(icv);
}

void oari_cpu_sgemv(bool trans, int64_t rows, int64_t cols, const float *mat, int64_t ld,
                    const float *x, int64_t incx, float *y) {
    oari_lib_icv icv = oari_lib_enter(0);
#ifdef OAR_WITH_DNNL
    /* as a GEMM with a one-column (or one-row) side; x read at stride incx as the
     * transpose of a [len, 1] matrix of leading dimension incx */
    if (oari_cpu_sgemv_onednn(rows, cols) && incx >= 1) {
        dnnl_status_t st =
            trans ? dnnl_sgemm('T', 'N', 1, cols, rows, 1.0f, x, incx, mat, ld, 0.0f, y, cols)
                  : dnnl_sgemm('N', 'N', rows, 1, cols, 1.0f, mat, ld, x, incx, 0.0f, y, 1);
        if (st == dnnl_success) {
            oari_lib_leave(icv);
            return;
        }
    }
#endif
    cblas_sgemv(CblasRowMajor, trans ? CblasTrans : CblasNoTrans, (blasint)rows, (blasint)cols,
                1.0f, mat, (blasint)ld, x, (blasint)incx, 0.0f, y, 1);
    oari_lib_leave(icv);
}

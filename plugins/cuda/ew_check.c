/* A standalone check of the CUDA plugin's elementwise kernels on a GPU,
 * with nothing of liboar: every launcher of oar_cuda_ew_table
 * (cuda_kernels.cu) runs on inputs in its row's test range (tests/ew_rows.h),
 * a [5, 7] input with [7] ones broadcast, and is compared with the same
 * row's formula evaluated on the CPU with the CPU's words (ew_math.h,
 * cpu_vmath.h). Build and run (plugins/cuda/ew_check.sh):
 *   nvcc -c cuda_kernels.cu; cc ew_check.c cuda_kernels.o -lcudart
 * Exit 0 when every kernel agrees (f32: within 1e-5 relative, bool exactly). */
#include "cuda_kernels.h"

#include <cuda_runtime.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/backends/cpu/cpu_vmath.h"
#include "ew_math.h"
#include "ew_rows.h"
#include "ew_words.h"

#define ROWS 5
#define COLS 7
#define N (ROWS * COLS)

/* ---- the reference: each row's f32 formula over [5, 7], b and c broadcast [7] ---- */
typedef void (*ref_fn)(void *o, const void *const *in, float p0, float p1, int alt);
#define ALT(f) REF_ALT2, f
#define NO_ALT REF_ALT1, 0
#define REF_ALT1(NAME, TO, EXPR, unused) REF_UNARY_FN(NAME, TO, EXPR, EXPR)
#define REF_ALT2(NAME, TO, EXPR, ALT_EXPR) REF_UNARY_FN(NAME, TO, EXPR, ALT_EXPR)
#define REF_UNARY_FN(NAME, TO, EXPR, ALT_EXPR)                                                 \
    static void ref_##NAME(void *o, const void *const *in, float p0, float p1, int alt) {      \
        const float *px = in[0];                                                               \
        for (int i = 0; i < N; i++) {                                                          \
            float x = px[i];                                                                   \
            ((TO *)o)[i] = alt ? (TO)(ALT_EXPR) : (TO)(EXPR);                                  \
        }                                                                                      \
    }
#define REF_UNARY(...) REF_UNARY_(__VA_ARGS__)
#define REF_UNARY_(NAME, TO, EXPR, kind, ALT_EXPR) kind(NAME, TO, EXPR, ALT_EXPR)
#define REF_BINARY(NAME, TO, EXPR)                                                             \
    static void ref_##NAME(void *o, const void *const *in, float p0, float p1, int alt) {      \
        (void)p0, (void)p1, (void)alt;                                                         \
        const float *pa = in[0], *pb = in[1];                                                  \
        for (int i = 0; i < N; i++) {                                                          \
            float a = pa[i], b = pb[i % COLS];                                                 \
            ((TO *)o)[i] = (TO)(EXPR);                                                         \
        }                                                                                      \
    }
#define REF_TERNARY(NAME, TO, EXPR)                                                            \
    static void ref_##NAME(void *o, const void *const *in, float p0, float p1, int alt) {      \
        (void)p0, (void)p1, (void)alt;                                                         \
        const unsigned char *pa = in[0];                                                       \
        const float *pb = in[1], *pc = in[2];                                                  \
        for (int i = 0; i < N; i++) {                                                          \
            unsigned char a = pa[i];                                                           \
            float b = pb[i % COLS], c = pc[i % COLS];                                          \
            ((TO *)o)[i] = (TO)(EXPR);                                                         \
        }                                                                                      \
    }
#define REF_BINARY_N(...) REF_BINARY(__VA_ARGS__)
#define REF_TERNARY_N(...) REF_TERNARY(__VA_ARGS__)
#define EW_PASS_B EW_DROP
#define EW_PASS_I EW_DROP
#define EW_PASS_R EW_KEEP
#define EW_SFX f32
#define EW_UNARY(op, rule, cpu, gen, api, forward, alt, ...)                                   \
    EW_GEN_IN(gen)(REF_UNARY(EW_SFX_NAME(op##_), EW_OUT_T(rule), forward, alt))
#define EW_BINARY(op, rule, cpu, gen, api, forward, ...)                                       \
    EW_GEN_IN(gen)(REF_BINARY_N(EW_SFX_NAME(op##_), EW_OUT_T(rule), forward))
#define EW_TERNARY(op, rule, cpu, gen, api, forward, ...)                                      \
    EW_GEN_IN(gen)(REF_TERNARY_N(EW_SFX_NAME(op##_), EW_OUT_T(rule), forward))
#define EW_NONE(op, why)
#include "elementwise.def"
#undef EW_UNARY
#undef EW_BINARY
#undef EW_TERNARY

#define REF_ENTRY(name, NAME) {name, ref_##NAME},
#define REF_ENTRY_N(...) REF_ENTRY(__VA_ARGS__)
#define EW_UNARY(op, rule, cpu, gen, ...) EW_GEN_IN(gen)(REF_ENTRY_N(#op, EW_SFX_NAME(op##_)))
#define EW_BINARY(op, rule, cpu, gen, ...) EW_GEN_IN(gen)(REF_ENTRY_N(#op, EW_SFX_NAME(op##_)))
#define EW_TERNARY(op, rule, cpu, gen, ...) EW_GEN_IN(gen)(REF_ENTRY_N(#op, EW_SFX_NAME(op##_)))
static const struct { const char *op; ref_fn fn; } refs[] = {
#include "elementwise.def"
};

/* ---- the check ---- */

static unsigned long long rng = 0x9E3779B97F4A7C15ull;
static float urand(float lo, float hi) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return lo + (hi - lo) * (float)((double)(rng >> 11) / 9007199254740992.0);
}

static oar_cuda_desc desc(int nd, int64_t s0, int64_t s1, int64_t st0, int64_t st1) {
    oar_cuda_desc d;
    memset(&d, 0, sizeof d);
    d.nd = nd;
    d.shape[0] = s0, d.shape[1] = s1, d.st[0] = st0, d.st[1] = st1;
    return d;
}

/* One launcher against the reference; prints and returns whether it agrees. */
static bool check(const oar_cuda_ew *e, int alt) {
    const ew_test_row *r = ew_test_row_of(e->op);
    ref_fn ref = NULL;
    for (size_t i = 0; i < sizeof refs / sizeof *refs; i++)
        if (!strcmp(refs[i].op, e->op)) ref = refs[i].fn;
    if (!r || !ref) {
        printf("FAIL %-12s no row or reference\n", e->op);
        return false;
    }
    float p0 = 0, p1 = 0; /* the attributes of the tests' device cases */
    if (!strcmp(e->op, "leaky_relu")) p0 = 0.07f;
    if (!strcmp(e->op, "elu")) p0 = 1.3f;
    if (!strcmp(e->op, "softplus")) p0 = 1.5f, p1 = 4;
    if (!strcmp(e->op, "clamp")) p0 = -1, p1 = 0.5f;
    float hx[3][N];
    unsigned char cond[N];
    const void *hin[3];
    void *din[3] = {0};
    oar_cuda_desc ti[3];
    for (int k = 0; k < e->n_in; k++) {
        int n = k ? COLS : N;
        float lo = k == 1 ? (float)r->blo : (float)r->lo, hi = k == 1 ? (float)r->bhi : (float)r->hi;
        size_t bytes = (size_t)n * sizeof(float);
        if (e->n_in == 3 && k == 0) {
            for (int i = 0; i < N; i++) cond[i] = urand(0, 1) < 0.5f;
            hin[k] = cond;
            bytes = N;
        } else {
            for (int i = 0; i < n; i++) hx[k][i] = r->out_bool ? floorf(urand(-2, 2)) : urand(lo, hi);
            hin[k] = hx[k];
        }
        if (cudaMalloc(&din[k], bytes) || cudaMemcpy(din[k], hin[k], bytes, cudaMemcpyHostToDevice)) {
            printf("FAIL %-12s cudaMalloc/cudaMemcpy\n", e->op);
            return false;
        }
        ti[k] = k ? desc(2, ROWS, COLS, 0, 1) : desc(2, ROWS, COLS, COLS, 1); /* b, c broadcast */
    }
    size_t es = r->out_bool ? 1 : sizeof(float);
    void *dout = NULL;
    unsigned char got[N * sizeof(float)], want[N * sizeof(float)];
    int err = cudaMalloc(&dout, N * es);
    if (!err) err = e->launch(dout, desc(2, ROWS, COLS, COLS, 1), (const void *const *)din, ti, p0, p1, alt, N, NULL);
    if (!err) err = cudaMemcpy(got, dout, N * es, cudaMemcpyDeviceToHost);
    for (int k = 0; k < e->n_in; k++) cudaFree(din[k]);
    cudaFree(dout);
    if (err) {
        printf("FAIL %-12s CUDA error %d (%s)\n", e->op, err, cudaGetErrorString((cudaError_t)err));
        return false;
    }
    ref(want, hin, p0, p1, alt);
    double worst = 0;
    for (int i = 0; i < N; i++) {
        double g = r->out_bool ? got[i] : ((float *)got)[i], w = r->out_bool ? want[i] : ((float *)want)[i];
        if (isnan(g) && isnan(w)) continue;
        double d = fabs(g - w) / fmax(1.0, fabs(w));
        if (!(d <= worst)) worst = d;
    }
    bool ok = worst <= (r->out_bool ? 0 : 1e-5);
    printf("%-4s %-12s%s max error %.3g\n", ok ? "ok" : "FAIL", e->op, alt ? " (alt)" : "     ", worst);
    return ok;
}

int main(void) {
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) || !n_dev) {
        printf("no CUDA device\n");
        return 77;
    }
    int run = 0, bad = 0, rows = 0;
    for (const oar_cuda_ew *e = oar_cuda_ew_table; e->op; e++) {
        const ew_test_row *r = ew_test_row_of(e->op);
        for (int alt = 0; alt <= (r && r->has_alt); alt++) {
            bad += !check(e, alt);
            run++;
        }
    }
    for (int i = 0; i < EW_N_TEST_ROWS; i++) rows += ew_test_rows[i].n_in && (ew_test_rows[i].gen & EW_K_R);
    printf("%d launches checked, %d wrong; %d table rows with a device form, %d launchers\n", run, bad, rows,
           (int)(sizeof refs / sizeof *refs));
    return bad || rows != (int)(sizeof refs / sizeof *refs) ? 1 : 0;
}

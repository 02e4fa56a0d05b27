/* CPU kernels of softmax and log_softmax: numerically stable row kernels
 * (max, sum of exp, scale) over one dim, rows spread over OpenMP threads.
 * f16/bf16 run through the f32 kernels (dispatch converts). */
#include "cpu.h"
#include "cpu_vmath.h"

/* As in cpu_unary.c: without trapping math, comparisons become selects and
 * the max/min/clamp loops vectorize; no kernel reads FP flags or errno. */
#pragma GCC optimize("no-trapping-math", "no-math-errno")

#include <math.h>
#include <string.h>

/* One row of n elements at stride si (input) and so (output): subtract the
 * row max, exponentiate, scale by the inverse sum (softmax) or subtract its
 * log (log_softmax). Sums accumulate in double. A row of NaN or all -inf
 * gives NaN, as in PyTorch. */
#define SOFTMAX_ROWS(SFX, T, EXP)                                                            \
    static T row_max_##SFX(const T *x, int64_t si, int64_t n) {                              \
        T m = -INFINITY;                                                                     \
        for (int64_t i = 0; i < n; i++)                                                      \
            if (x[i * si] > m) m = x[i * si];                                                \
        return m;                                                                            \
    }                                                                                        \
    OARI_SIMD_CLONES static void row_softmax_##SFX(const T *x, int64_t si, T *y, int64_t so, int64_t n) {     \
        T m = row_max_##SFX(x, si, n);                                                       \
        double sum = 0;                                                                      \
        for (int64_t i = 0; i < n; i++) {                                                    \
            T e = EXP(x[i * si] - m);                                                        \
            y[i * so] = e;                                                                   \
            sum += (double)e;                                                                \
        }                                                                                    \
        T inv = (T)(1.0 / sum);                                                              \
        for (int64_t i = 0; i < n; i++) y[i * so] *= inv;                                    \
    }                                                                                        \
    OARI_SIMD_CLONES static void row_log_softmax_##SFX(const T *x, int64_t si, T *y, int64_t so, int64_t n) { \
        T m = row_max_##SFX(x, si, n);                                                       \
        double sum = 0;                                                                      \
        for (int64_t i = 0; i < n; i++) sum += (double)EXP(x[i * si] - m);                   \
        T ls = (T)log(sum);                                                                  \
        for (int64_t i = 0; i < n; i++) y[i * so] = (x[i * si] - m) - ls;                    \
    }

SOFTMAX_ROWS(f32, float, oari_vexpf)
SOFTMAX_ROWS(f64, double, exp)

typedef float v4f_t __attribute__((vector_size(16)));
typedef float v8f_t __attribute__((vector_size(32)));
typedef int32_t v8i_t __attribute__((vector_size(32)));
typedef double v4d_t __attribute__((vector_size(32)));

/* The same for contiguous f32 rows, in vector loops: the max, the sum of
 * exp in double lanes (combined in a fixed order, so the result does not
 * depend on the thread count or on how rows are grouped). */

/* the max of a row (NaN never wins a compare, as in row_max), lanes in
 * registers */
OARI_VINLINE float contig_max_f32(const float *x, int64_t n) {
    /* 16 lanes, a select per lane that the clones make one max instruction */
    float a[16];
    for (int l = 0; l < 16; l++) a[l] = -INFINITY;
    int64_t k = 0;
    for (; k + 16 <= n; k += 16)
        for (int l = 0; l < 16; l++) a[l] = x[k + l] > a[l] ? x[k + l] : a[l];
    for (int l = 0; l < 8; l++) a[l] = a[l + 8] > a[l] ? a[l + 8] : a[l];
    for (int l = 0; l < 4; l++) a[l] = a[l + 4] > a[l] ? a[l + 4] : a[l];
    float m = -INFINITY;
    for (int l = 0; l < 4; l++) m = a[l] > m ? a[l] : m;
    for (; k < n; k++) m = x[k] > m ? x[k] : m;
    return m;
}

/* the sum of a row in 8 double lanes kept in registers (an omp simd
 * reduction folds its lanes through memory) */
OARI_VINLINE double contig_sum_f32(const float *y, int64_t n) {
    v4d_t a0 = {0, 0, 0, 0}, a1 = a0;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        v4f_t lo, hi;
        memcpy(&lo, y + i, sizeof lo);
        memcpy(&hi, y + i + 4, sizeof hi);
        a0 += __builtin_convertvector(lo, v4d_t);
        a1 += __builtin_convertvector(hi, v4d_t);
    }
    a0 += a1;
    double sum = (a0[0] + a0[2]) + (a0[1] + a0[3]);
    for (; i < n; i++) sum += (double)y[i];
    return sum;
}

/* Rows of a short last dim go through each step in groups of ROW_GROUP:
 * a 64-element row alone waited on its own chain (max, lane fold, sum,
 * division) step after step; in a group the rows' chains overlap. A group
 * of 8 rows of up to GROUP_MAX_N floats stays in L1. */
enum { ROW_GROUP = 8, GROUP_MAX_N = 512 };

/* `rows` contiguous rows of n at x (input) and y (output). Each row's
 * arithmetic is the one-row kernel's whatever the grouping. */
OARI_SIMD_CLONES
static void rows_contig_f32(const float *x, float *y, int64_t n, int64_t rows, bool log_out) {
    const int64_t g = n <= GROUP_MAX_N ? ROW_GROUP : 1;
    for (int64_t r0 = 0; r0 < rows; r0 += g) {
        const int nb = (int)(rows - r0 < g ? rows - r0 : g);
        const float *xg = x + r0 * n;
        float *yg = y + r0 * n;
        float m[ROW_GROUP];
        double sum[ROW_GROUP];
        for (int b = 0; b < nb; b++) m[b] = contig_max_f32(xg + b * n, n);
        if (log_out) {
            for (int b = 0; b < nb; b++) {
                const float *xr = xg + b * n, mb = m[b];
                double s = 0;
#pragma omp simd reduction(+ : s)
                for (int64_t i = 0; i < n; i++) s += (double)oari_vexpf(xr[i] - mb);
                sum[b] = s;
            }
            for (int b = 0; b < nb; b++) {
                const float *xr = xg + b * n, mb = m[b];
                float *yr = yg + b * n;
                const float ls = (float)log(sum[b]);
#pragma omp simd
                for (int64_t i = 0; i < n; i++) yr[i] = (xr[i] - mb) - ls;
            }
            continue;
        }
        for (int b = 0; b < nb; b++) {
            const float *xr = xg + b * n, mb = m[b];
            float *yr = yg + b * n;
#pragma omp simd
            for (int64_t i = 0; i < n; i++) yr[i] = oari_vexpf(xr[i] - mb);
        }
        /* the sum of each row just written (in L1) */
        for (int b = 0; b < nb; b++) sum[b] = contig_sum_f32(yg + b * n, n);
        for (int b = 0; b < nb; b++) {
            float *yr = yg + b * n;
            const float inv = (float)(1.0 / sum[b]);
#pragma omp simd
            for (int64_t j = 0; j < n; j++) yr[j] *= inv;
        }
    }
}

/* A contiguous [n, inner] slab reduced over n, for columns j0 .. j0+nb-1
 * (nb <= COLS): the same arithmetic as the row kernels, in the same order,
 * but reading whole stretches of each row, so a middle dim streams. */
#define COLS 64
#define SOFTMAX_COLS(SFX, T, EXP)                                                              \
    OARI_SIMD_CLONES static void cols_##SFX(const T *x, T *y, int64_t n, int64_t inner, int64_t nb,             \
                           bool log_out) {                                                     \
        T m[COLS], k[COLS];                                                                    \
        double sum[COLS];                                                                      \
        for (int64_t j = 0; j < nb; j++) m[j] = -INFINITY, sum[j] = 0;                         \
        for (int64_t i = 0; i < n; i++)                                                        \
            for (int64_t j = 0; j < nb; j++)                                                   \
                if (x[i * inner + j] > m[j]) m[j] = x[i * inner + j];                          \
        for (int64_t i = 0; i < n; i++)                                                        \
            for (int64_t j = 0; j < nb; j++) {                                                 \
                T e = EXP(x[i * inner + j] - m[j]);                                            \
                if (!log_out) y[i * inner + j] = e;                                            \
                sum[j] += (double)e;                                                           \
            }                                                                                  \
        for (int64_t j = 0; j < nb; j++) k[j] = log_out ? (T)log(sum[j]) : (T)(1.0 / sum[j]);  \
        for (int64_t i = 0; i < n; i++)                                                        \
            for (int64_t j = 0; j < nb; j++) {                                                 \
                if (log_out) y[i * inner + j] = (x[i * inner + j] - m[j]) - k[j];              \
                else y[i * inner + j] *= k[j];                                                 \
            }                                                                                  \
    }

SOFTMAX_COLS(f32, float, oari_vexpf)
SOFTMAX_COLS(f64, double, exp)

/* Contiguous input, dim not the last: [outer, n, inner] in blocks of
 * COLS columns. */
static void softmax_middle(const oar_ktensor *in, const oar_ktensor *out, int dim, bool log_out) {
    int64_t outer = 1, inner = 1, n = in->shape[dim];
    for (int d = 0; d < dim; d++) outer *= in->shape[d];
    for (int d = dim + 1; d < in->ndim; d++) inner *= in->shape[d];
    int64_t blocks = (inner + COLS - 1) / COLS, tasks = outer * blocks;
    const bool is64 = in->dtype == OAR_F64;
    OARI_PARALLEL_FOR_IF(outer * n * inner > OARI_PARALLEL_GRAIN && tasks > 1,
    for (int64_t t = 0; t < tasks; t++) {
        int64_t o = t / blocks, j0 = (t % blocks) * COLS;
        int64_t nb = inner - j0 < COLS ? inner - j0 : COLS, off = o * n * inner + j0;
        if (is64)
            cols_f64((const double *)in->data + off, (double *)out->data + off, n, inner, nb,
                     log_out);
        else
            cols_f32((const float *)in->data + off, (float *)out->data + off, n, inner, nb,
                     log_out);
    });
}

static int softmax_common(const oar_kernel_call *c, bool log_out) {
    const oar_ktensor *in = &c->in[0], *out = &c->out[0];
    int nd = in->ndim, dim = nd ? (int)c->iattr[0] : 0;
    int64_t n = nd ? in->shape[dim] : 1;
    int64_t si = nd ? in->strides[dim] : 1, so = nd ? out->strides[dim] : 1;
    /* the rows: every dim but `dim` */
    int64_t rshape[OAR_MAX_DIMS], rin[OAR_MAX_DIMS], rout[OAR_MAX_DIMS];
    int rn = 0;
    int64_t rows = 1;
    for (int d = 0; d < nd; d++) {
        if (d == dim) continue;
        rshape[rn] = in->shape[d];
        rin[rn] = in->strides[d];
        rout[rn] = out->strides[d];
        rows *= in->shape[d];
        rn++;
    }
    if (n == 0 || rows == 0) return 0;
    if (nd && dim < nd - 1 && n > 1 && oari_kt_contiguous(in)) {
        softmax_middle(in, out, dim, log_out);
        return 0;
    }
    const size_t es = oar_dtype_size((oar_dtype)in->dtype);
    const char *xd = in->data;
    char *yd = out->data;
    const bool is64 = in->dtype == OAR_F64;
    /* rows of a contiguous input and output over the last dim sit at r * n
     * (no index division per row) */
    const bool flat = nd && dim == nd - 1 && oari_kt_contiguous(in) && oari_kt_contiguous(out);
    if (flat && !is64) {
        /* blocks of whole groups of short rows; long rows one by one */
        const int64_t blk = n <= GROUP_MAX_N ? 8 * ROW_GROUP : 1, nblk = (rows + blk - 1) / blk;
        OARI_PARALLEL_FOR_IF(rows * n > OARI_PARALLEL_GRAIN && nblk > 1,
        for (int64_t t = 0; t < nblk; t++) {
            const int64_t r0 = t * blk, nr = rows - r0 < blk ? rows - r0 : blk;
            rows_contig_f32((const float *)xd + r0 * n, (float *)yd + r0 * n, n, nr, log_out);
        });
        return 0;
    }
    OARI_PARALLEL_FOR_IF(rows * n > OARI_PARALLEL_GRAIN && rows > 1,
    for (int64_t r = 0; r < rows; r++) {
        int64_t oi = flat ? r * n : oari_strided_index(rn, rshape, rin, r);
        int64_t oo = flat ? r * n : oari_strided_index(rn, rshape, rout, r);
        const char *x = xd + oi * (int64_t)es;
        char *y = yd + oo * (int64_t)es;
        if (is64) {
            if (log_out) row_log_softmax_f64((const double *)x, si, (double *)y, so, n);
            else row_softmax_f64((const double *)x, si, (double *)y, so, n);
        } else if (si == 1 && so == 1) {
            rows_contig_f32((const float *)x, (float *)y, n, 1, log_out);
        } else {
            if (log_out) row_log_softmax_f32((const float *)x, si, (float *)y, so, n);
            else row_softmax_f32((const float *)x, si, (float *)y, so, n);
        }
    });
    return 0;
}

static int k_softmax(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    return softmax_common(c, false);
}

static int k_log_softmax(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    return softmax_common(c, true);
}

const oari_cpu_kernels oari_cpu_k_softmax = {[OAR_F32] = k_softmax, [OAR_F64] = k_softmax};
const oari_cpu_kernels oari_cpu_k_log_softmax = {[OAR_F32] = k_log_softmax,
                                                 [OAR_F64] = k_log_softmax};

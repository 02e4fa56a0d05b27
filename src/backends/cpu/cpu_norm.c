/* CPU kernels of layer, group and batch norm: statistics accumulated in
 * double with two passes, rows in parallel. The f32 and f64 kernels come
 * from one template: this file includes itself with NORM_T defined. f16 and
 * bf16 run through f32 (dispatch converts). */
#ifndef NORM_T
#include "cpu.h"

/* As in cpu_unary.c: without trapping math, comparisons become selects and
 * the max/min/clamp loops vectorize; no kernel reads FP flags or errno. */
#pragma GCC optimize("no-trapping-math", "no-math-errno")

#include <math.h>
#include <string.h>

/* Scratch buffers come from the CPU block cache: a fresh multi-megabyte
 * malloc costs a page fault per 4 KiB on first touch, which used to
 * dominate small convolutions. NULL with the error set on failure. */
static void *scratch_alloc(size_t n) { return oari_cpu_block_alloc(n ? n : 1); }
static void scratch_free(void *p, size_t n) {
    if (p) oari_cpu_block_free(p, n ? n : 1);
}

/* k's elements in row-major order: k's own data when contiguous, else a
 * copy in *owned (*owned_n bytes, freed by the caller); NULL if the copy
 * cannot be allocated. An absent optional input (dtype -1) gives NULL. */
static const void *contig(const oar_ktensor *k, void **owned, size_t *owned_n) {
    *owned = NULL;
    *owned_n = 0;
    if (k->dtype < 0 || oari_kt_contiguous(k)) return k->data;
    size_t es = oar_dtype_size((oar_dtype)k->dtype);
    int64_t n = oari_kt_numel(k);
    void *buf = scratch_alloc((size_t)(n ? n : 1) * es);
    if (!buf) return NULL;
    oar_ktensor dst = *k;
    dst.data = buf;
    oari_contiguous_strides(k->ndim, k->shape, dst.strides);
    oari_copy_strided(&dst, k);
    *owned = buf;
    *owned_n = (size_t)(n ? n : 1) * es;
    return buf;
}

/* x [N, C, *]: N, C and the count S of the spatial dims (batch and group norm). */
static void nc_s(const oar_ktensor *x, int64_t *n, int64_t *ch, int64_t *s) {
    *n = x->shape[0];
    *ch = x->shape[1];
    *s = 1;
    for (int d = 2; d < x->ndim; d++)
        *s *= x->shape[d];
}

/* Up to 5 inputs made contiguous; absent ones stay NULL. */
typedef struct {
    const void *p[5];
    void *owned[5];
    size_t n[5];
} inputs;

static int load_inputs(const oar_kernel_call *c, inputs *in) {
    memset(in, 0, sizeof *in);
    for (int i = 0; i < c->n_in && i < 5; i++) {
        in->p[i] = contig(&c->in[i], &in->owned[i], &in->n[i]);
        if (!in->p[i] && c->in[i].dtype >= 0 && oari_kt_numel(&c->in[i])) return oari_fail_status();
    }
    return 0;
}

static void free_inputs(inputs *in) {
    for (int i = 0; i < 5; i++)
        scratch_free(in->owned[i], in->n[i]);
}

/* x's rows and the count m of values a row when the last n dims are normalised (layer norm). */
static void rows_m(const oar_ktensor *x, int n, int64_t *rows, int64_t *m) {
    *rows = *m = 1;
    for (int d = 0; d < x->ndim; d++) {
        if (d < x->ndim - n) *rows *= x->shape[d];
        else *m *= x->shape[d];
    }
}

/* layer_norm_backward's weight and bias sums: columns a block */
#define LN_COLS 64

typedef float v4f_t __attribute__((vector_size(16)));
typedef double v4d_t __attribute__((vector_size(32)));

#define NORM_T float
#define NORM_SFX f32
#define NORM_VEC 1
#include "cpu_norm.c"
#undef NORM_T
#undef NORM_SFX
#undef NORM_VEC

#define NORM_T double
#define NORM_SFX f64
#define NORM_VEC 0
#include "cpu_norm.c"
#undef NORM_VEC
#undef NORM_T
#undef NORM_SFX

#define TABLE(name)                                                                                \
    const oari_cpu_kernels oari_cpu_k_##name = {                                                   \
        [OAR_F32] = k_##name##_f32, [OAR_F64] = k_##name##_f64}
TABLE(layer_norm);
TABLE(layer_norm_backward);
TABLE(group_norm);
TABLE(batch_norm);
TABLE(batch_norm_backward);

#else /* ---- the template: NORM_T, NORM_SFX ------------------------------------------- */

#define CAT2(a, b) a##_##b
#define CAT(a, b) CAT2(a, b)
#define FN(name) CAT(name, NORM_SFX)
typedef NORM_T FN(real);
#define T FN(real)

/* Mean and biased variance of n values at stride 1 (two passes, in double
 * lanes combined in a fixed order; for f32 the 8 lanes are vector
 * registers, as an omp simd reduction folds its lanes through the stack). */
OARI_SIMD_CLONES
static void FN(moments)(const T *x, int64_t n, double *mean, double *var) {
    double s = 0, v = 0, m;
#if NORM_VEC
    v4d_t a0 = {0, 0, 0, 0}, a1 = a0;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        v4f_t lo, hi;
        memcpy(&lo, x + i, sizeof lo);
        memcpy(&hi, x + i + 4, sizeof hi);
        a0 += __builtin_convertvector(lo, v4d_t);
        a1 += __builtin_convertvector(hi, v4d_t);
    }
    a0 += a1;
    s = (a0[0] + a0[2]) + (a0[1] + a0[3]);
    for (; i < n; i++) s += (double)x[i];
    m = n ? s / (double)n : 0;
    const v4d_t mv = {m, m, m, m};
    a0 = (v4d_t){0, 0, 0, 0};
    a1 = a0;
    for (i = 0; i + 8 <= n; i += 8) {
        v4f_t lo, hi;
        memcpy(&lo, x + i, sizeof lo);
        memcpy(&hi, x + i + 4, sizeof hi);
        v4d_t d0 = __builtin_convertvector(lo, v4d_t) - mv;
        v4d_t d1 = __builtin_convertvector(hi, v4d_t) - mv;
        a0 += d0 * d0;
        a1 += d1 * d1;
    }
    a0 += a1;
    v = (a0[0] + a0[2]) + (a0[1] + a0[3]);
    for (; i < n; i++) {
        double d = (double)x[i] - m;
        v += d * d;
    }
#else
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; i++)
        s += (double)x[i];
    m = n ? s / (double)n : 0;
#pragma omp simd reduction(+ : v)
    for (int64_t i = 0; i < n; i++) {
        double d = (double)x[i] - m;
        v += d * d;
    }
#endif
    *mean = m;
    *var = n ? v / (double)n : 0;
}

/* One layer_norm row: y = (x - mean) rstd w + b, w and b optional. */
OARI_SIMD_CLONES
static void FN(ln_row)(const T *xr, T *yr, const T *w, const T *b, int64_t m, double eps,
                       T *mo, T *ro) {
    double mean, var;
    FN(moments)(xr, m, &mean, &var);
    const double rstd = 1.0 / sqrt(var + eps);
    if (w && b) {
        /* in T (float for f32): (x - mean) rstd w + b, the mean split in two
         * parts (x - hi is exact near the mean), so a mean far from 0
         * costs no accuracy */
        const T mh = (T)mean, ml = (T)(mean - (double)mh), rt = (T)rstd;
#pragma omp simd
        for (int64_t i = 0; i < m; i++)
            yr[i] = ((xr[i] - mh) - ml) * rt * w[i] + b[i];
    } else {
#pragma omp simd
        for (int64_t i = 0; i < m; i++) {
            double v = ((double)xr[i] - mean) * rstd;
            if (w) v *= (double)w[i];
            if (b) v += (double)b[i];
            yr[i] = (T)v;
        }
    }
    *mo = (T)mean;
    *ro = (T)rstd;
}

/* layer_norm: rows of M = prod(last n dims) elements. */
static int FN(k_layer_norm)(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    inputs in;
    if (load_inputs(c, &in)) {
        free_inputs(&in);
        return oari_fail_status();
    }
    const T *x = in.p[0], *w = in.p[1], *b = in.p[2];
    int64_t m, rows;
    rows_m(&c->in[0], (int)c->iattr[0], &rows, &m);
    const double eps = c->fattr[0];
    T *y = c->out[0].data, *mo = c->out[1].data, *ro = c->out[2].data;
    OARI_PARALLEL_FOR_IF(rows > 1 && rows * m > OARI_PARALLEL_GRAIN,
    for (int64_t r = 0; r < rows; r++)
        FN(ln_row)(x + r * m, y + r * m, w, b, m, eps, mo + r, ro + r););
    free_inputs(&in);
    return 0;
}

/* One row of layer_norm's backward: with a = gy w (w optional) and
 * xc = x - mean, the sums of a and a xc in double lanes, then
 * gx = rstd (a - E[a]) - rstd^3 E[a xc] xc. */
typedef double FN(v8d) __attribute__((vector_size(64)));
/* *a = 8 values of gy w (w optional) from j, in doubles (through a
 * pointer: a 64-byte vector returned by value changes the ABI). */
static inline __attribute__((always_inline)) void FN(gyw8)(const T *gy, const T *w, int64_t j, FN(v8d) *a) {
    typedef T vt __attribute__((vector_size(8 * sizeof(T))));
    vt g, wv;
    memcpy(&g, gy + j, sizeof g);
    *a = __builtin_convertvector(g, FN(v8d));
    if (w) {
        memcpy(&wv, w + j, sizeof wv);
        *a *= __builtin_convertvector(wv, FN(v8d));
    }
}

OARI_SIMD_CLONES
static void FN(ln_grad_row)(const T *gy, const T *x, const T *w, T *gx, int64_t m, double mean, double rstd) {
    typedef T vt __attribute__((vector_size(8 * sizeof(T))));
    typedef FN(v8d) vd;
    vd as = {0}, axs = {0};
    int64_t j = 0;
    for (; j + 8 <= m; j += 8) {
        vt v;
        memcpy(&v, x + j, sizeof v);
        vd a;
        FN(gyw8)(gy, w, j, &a);
        as += a;
        axs += a * (__builtin_convertvector(v, vd) - mean);
    }
    double sa = 0, sax = 0;
    for (int l = 0; l < 8; l++) {
        sa += as[l];
        sax += axs[l];
    }
    for (; j < m; j++) {
        const double a = (double)gy[j] * (w ? (double)w[j] : 1.0);
        sa += a;
        sax += a * ((double)x[j] - mean);
    }
    const double k0 = -rstd * sa / (double)m, kx = rstd * rstd * rstd * sax / (double)m;
    j = 0;
    for (; j + 8 <= m; j += 8) {
        vt v;
        memcpy(&v, x + j, sizeof v);
        vd a;
        FN(gyw8)(gy, w, j, &a);
        const vt y = __builtin_convertvector(a * rstd + k0 - (__builtin_convertvector(v, vd) - mean) * kx, vt);
        memcpy(gx + j, &y, sizeof y);
    }
    for (; j < m; j++) {
        const double a = (double)gy[j] * (w ? (double)w[j] : 1.0);
        gx[j] = (T)(a * rstd + k0 - ((double)x[j] - mean) * kx);
    }
}

/* layer_norm_backward (defs/conv.def): gx row by row (rows in parallel),
 * then gw = sum gy xhat and gb = sum gy over the rows, in double, by
 * blocks of LN_COLS columns (blocks in parallel; a fixed order). */
static int FN(k_layer_norm_backward)(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    inputs in;
    if (load_inputs(c, &in)) {
        free_inputs(&in);
        return oari_fail_status();
    }
    const T *gy = in.p[0], *x = in.p[1], *mo = in.p[2], *ro = in.p[3], *w = in.p[4];
    int64_t m, rows;
    rows_m(&c->in[1], (int)c->iattr[0], &rows, &m);
    T *gx = c->out[0].data, *gw = c->out[1].data, *gb = c->out[2].data;
    OARI_PARALLEL_FOR_IF(rows > 1 && rows * m > OARI_PARALLEL_GRAIN,
    for (int64_t r = 0; r < rows; r++)
        FN(ln_grad_row)(gy + r * m, x + r * m, w, gx + r * m, m, (double)mo[r], (double)ro[r]););
    const int64_t blocks = (m + LN_COLS - 1) / LN_COLS;
    OARI_PARALLEL_FOR_IF(blocks > 1 && rows * m > OARI_PARALLEL_GRAIN,
    for (int64_t b = 0; b < blocks; b++) {
        const int64_t j0 = b * LN_COLS, nj = m - j0 < LN_COLS ? m - j0 : LN_COLS;
        double sw[LN_COLS] = {0}, sb[LN_COLS] = {0};
        for (int64_t r = 0; r < rows; r++) {
            const T *g = gy + r * m + j0, *v = x + r * m + j0;
            const double mean = (double)mo[r], rstd = (double)ro[r];
            _Pragma("omp simd") for (int64_t j = 0; j < nj; j++) {
                sw[j] += (double)g[j] * (((double)v[j] - mean) * rstd);
                sb[j] += (double)g[j];
            }
        }
        for (int64_t j = 0; j < nj; j++) {
            gw[j0 + j] = (T)sw[j];
            gb[j0 + j] = (T)sb[j];
        }
    });
    free_inputs(&in);
    return 0;
}

/* group_norm: x [N, C, *]; each (n, group) is Cg * S contiguous elements. */
static int FN(k_group_norm)(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    inputs in;
    if (load_inputs(c, &in)) {
        free_inputs(&in);
        return oari_fail_status();
    }
    const T *x = in.p[0], *w = in.p[1], *b = in.p[2];
    int64_t n, ch, s;
    nc_s(&c->in[0], &n, &ch, &s);
    const int64_t groups = c->iattr[0], cg = ch / groups;
    const double eps = c->fattr[0];
    T *y = c->out[0].data, *mo = c->out[1].data, *ro = c->out[2].data;
    OARI_PARALLEL_FOR_IF(n * groups > 1 && n * ch * s > OARI_PARALLEL_GRAIN,
    for (int64_t ng = 0; ng < n * groups; ng++) {
        const T *xg = x + ng * cg * s;
        double mean, var;
        FN(moments)(xg, cg * s, &mean, &var);
        double rstd = 1.0 / sqrt(var + eps);
        T *yg = y + ng * cg * s;
        for (int64_t ci = 0; ci < cg; ci++) {
            int64_t cc = (ng % groups) * cg + ci;
            double wc = w ? (double)w[cc] : 1.0, bc = b ? (double)b[cc] : 0.0;
            for (int64_t i = ci * s; i < (ci + 1) * s; i++)
                yg[i] = (T)(((double)xg[i] - mean) * rstd * wc + bc);
        }
        mo[ng] = (T)mean;
        ro[ng] = (T)rstd;
    });
    free_inputs(&in);
    return 0;
}

/* batch_norm's per-channel loops over one image's s contiguous values, 8 at
 * a time in GNU vectors of doubles: a scalar double sum is one add chain (4
 * cycles a value) and gcc's -O2 cost model leaves these loops scalar, which
 * made batch_norm 13% of the demo CNN's training step. The sum (squares:
 * of squared deviations from shift) in 8 lanes, then the lanes in order. */
OARI_SIMD_CLONES
static double FN(bn_sum)(const T *p, int64_t s, double shift, bool squares) {
    typedef T vt __attribute__((vector_size(8 * sizeof(T))));
    typedef double vd __attribute__((vector_size(64)));
    vd acc = {0};
    int64_t j = 0;
    for (; j + 8 <= s; j += 8) {
        vt x;
        memcpy(&x, p + j, sizeof x);
        const vd d = __builtin_convertvector(x, vd) - shift;
        acc += squares ? d * d : d;
    }
    double t = 0;
    for (int l = 0; l < 8; l++) t += acc[l];
    for (; j < s; j++) {
        const double d = (double)p[j] - shift;
        t += squares ? d * d : d;
    }
    return t;
}

/* q = ((p - mean) * rstd) * wc + bc, in double, as the scalar loop did. */
OARI_SIMD_CLONES
static void FN(bn_apply)(const T *p, T *q, int64_t s, double mean, double rstd, double wc, double bc) {
    typedef T vt __attribute__((vector_size(8 * sizeof(T))));
    typedef double vd __attribute__((vector_size(64)));
    int64_t j = 0;
    for (; j + 8 <= s; j += 8) {
        vt x;
        memcpy(&x, p + j, sizeof x);
        const vt y = __builtin_convertvector((__builtin_convertvector(x, vd) - mean) * rstd * wc + bc, vt);
        memcpy(q + j, &y, sizeof y);
    }
    for (; j < s; j++) q[j] = (T)(((double)p[j] - mean) * rstd * wc + bc);
}

/* batch_norm: x [N, C, *]; per channel over N and the spatial dims.
 * Training: batch mean and biased variance; out[3] the unbiased variance
 * (for the running stats). Eval: running stats (out[3] = running_var). */
static int FN(k_batch_norm)(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    inputs in;
    if (load_inputs(c, &in)) {
        free_inputs(&in);
        return oari_fail_status();
    }
    const T *x = in.p[0], *rm = in.p[1], *rv = in.p[2], *w = in.p[3], *b = in.p[4];
    int64_t n, ch, s;
    nc_s(&c->in[0], &n, &ch, &s);
    const bool training = c->iattr[0] != 0;
    const double eps = c->fattr[0], cnt = (double)(n * s);
    T *y = c->out[0].data, *mo = c->out[1].data, *ro = c->out[2].data, *uv = c->out[3].data;
    OARI_PARALLEL_FOR_IF(ch > 1 && n * ch * s > OARI_PARALLEL_GRAIN,
    for (int64_t cc = 0; cc < ch; cc++) {
        double mean, var;
        if (training) {
            double sum = 0, sq = 0;
            for (int64_t i = 0; i < n; i++) sum += FN(bn_sum)(x + (i * ch + cc) * s, s, 0, false);
            mean = cnt > 0 ? sum / cnt : 0;
            for (int64_t i = 0; i < n; i++) sq += FN(bn_sum)(x + (i * ch + cc) * s, s, mean, true);
            var = cnt > 0 ? sq / cnt : 0;
            uv[cc] = (T)(cnt > 1 ? sq / (cnt - 1) : var);
        } else {
            mean = (double)rm[cc];
            var = (double)rv[cc];
            uv[cc] = rv[cc];
        }
        double rstd = 1.0 / sqrt(var + eps);
        double wc = w ? (double)w[cc] : 1.0, bc = b ? (double)b[cc] : 0.0;
        for (int64_t i = 0; i < n; i++)
            FN(bn_apply)(x + (i * ch + cc) * s, y + (i * ch + cc) * s, s, mean, rstd, wc, bc);
        mo[cc] = (T)mean;
        ro[cc] = (T)rstd;
    });
    free_inputs(&in);
    return 0;
}

/* Per-channel sums of batch_norm's backward over one image's s values:
 * *sg += sum gy, *sgx += sum gy (x - mean), in 8 double lanes as bn_sum. */
OARI_SIMD_CLONES
static void FN(bn_grad_sums)(const T *gy, const T *x, int64_t s, double mean, double *sg,
                             double *sgx) {
    typedef T vt __attribute__((vector_size(8 * sizeof(T))));
    typedef double vd __attribute__((vector_size(64)));
    vd ag = {0}, ax = {0};
    int64_t j = 0;
    for (; j + 8 <= s; j += 8) {
        vt g, v;
        memcpy(&g, gy + j, sizeof g);
        memcpy(&v, x + j, sizeof v);
        const vd gd = __builtin_convertvector(g, vd);
        ag += gd;
        ax += gd * (__builtin_convertvector(v, vd) - mean);
    }
    double tg = 0, tx = 0;
    for (int l = 0; l < 8; l++) {
        tg += ag[l];
        tx += ax[l];
    }
    for (; j < s; j++) {
        tg += (double)gy[j];
        tx += (double)gy[j] * ((double)x[j] - mean);
    }
    *sg += tg;
    *sgx += tx;
}

/* gx = k_gy gy - k_x (x - mean) + k_0, in double as bn_apply. */
OARI_SIMD_CLONES
static void FN(bn_grad_apply)(const T *gy, const T *x, T *gx, int64_t s, double mean, double k_gy,
                              double k_x, double k_0) {
    typedef T vt __attribute__((vector_size(8 * sizeof(T))));
    typedef double vd __attribute__((vector_size(64)));
    int64_t j = 0;
    for (; j + 8 <= s; j += 8) {
        vt g, v;
        memcpy(&g, gy + j, sizeof g);
        memcpy(&v, x + j, sizeof v);
        const vd r = __builtin_convertvector(g, vd) * k_gy -
                     (__builtin_convertvector(v, vd) - mean) * k_x + k_0;
        const vt y = __builtin_convertvector(r, vt);
        memcpy(gx + j, &y, sizeof y);
    }
    for (; j < s; j++) gx[j] = (T)((double)gy[j] * k_gy - ((double)x[j] - mean) * k_x + k_0);
}

/* batch_norm_backward (defs/conv.def): per channel, one pass for the sums
 * and one for gx = rstd w (gy - E[gy] - xhat E[gy xhat]), where
 * E[gy xhat] = rstd sum(gy (x - mean)) / M. */
static int FN(k_batch_norm_backward)(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    inputs in;
    if (load_inputs(c, &in)) {
        free_inputs(&in);
        return oari_fail_status();
    }
    const T *gy = in.p[0], *x = in.p[1], *mo = in.p[2], *ro = in.p[3], *w = in.p[4];
    int64_t n, ch, s;
    nc_s(&c->in[1], &n, &ch, &s);
    const double cnt = (double)(n * s);
    T *gx = c->out[0].data, *gw = c->out[1].data, *gb = c->out[2].data;
    OARI_PARALLEL_FOR_IF(ch > 1 && n * ch * s > OARI_PARALLEL_GRAIN,
    for (int64_t cc = 0; cc < ch; cc++) {
        const double mean = (double)mo[cc], rstd = (double)ro[cc], wc = w ? (double)w[cc] : 1.0;
        double sg = 0, sgx = 0;
        for (int64_t i = 0; i < n; i++)
            FN(bn_grad_sums)(gy + (i * ch + cc) * s, x + (i * ch + cc) * s, s, mean, &sg, &sgx);
        gw[cc] = (T)(rstd * sgx);
        gb[cc] = (T)sg;
        if (cnt > 0) {
            const double k_gy = rstd * wc, k_x = k_gy * rstd * rstd * sgx / cnt, k_0 = -k_gy * sg / cnt;
            for (int64_t i = 0; i < n; i++)
                FN(bn_grad_apply)(gy + (i * ch + cc) * s, x + (i * ch + cc) * s, gx + (i * ch + cc) * s, s,
                                  mean, k_gy, k_x, k_0);
        }
    });
    free_inputs(&in);
    return 0;
}

#undef T
#undef FN
#undef CAT
#undef CAT2
#endif

/* CPU kernels of the 3-D convolutions: conv3d, conv_transpose3d and
 * conv3d_weight_grad, as vol2col/col2vol + CBLAS gemm, OpenMP over the
 * batch. A volume's columns are taken a slab of output depth planes at a
 * time, so the column buffer stays near VOL_CHUNK_ELEMS elements however
 * large the volume. The f32 and f64 kernels come from one template: this
 * file includes itself with C3_T defined (see the end of the file);
 * f16/bf16 run through f32 (dispatch converts). */
#ifndef C3_T
#include "cpu.h"

#include <cblas.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

static int max_threads(void) {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

static int thread_id(void) {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

static void *scratch_alloc(size_t n) { return oari_cpu_block_alloc(n ? n : 1); }
static void scratch_free(void *p, size_t n) {
    if (p) oari_cpu_block_free(p, n ? n : 1);
}

/* k's elements in row-major order: k's own data when contiguous, else a
 * copy in *owned (*owned_n bytes; the caller frees it). NULL when the copy
 * cannot be allocated (error set). */
static const void *contig(const oar_ktensor *k, void **owned, size_t *owned_n) {
    static const double empty; /* a non-NULL pointer for tensors without elements */
    *owned = NULL;
    *owned_n = 0;
    if (oari_kt_contiguous(k)) return k->data ? k->data : &empty;
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

/* One 3-D convolution seen from the conv's side: input volume in[3], kernel
 * k[3], output volume out[3] (depth, height, width), and the attributes. */
typedef struct {
    int64_t in[3], k[3], out[3], s[3], p[3], d[3];
} geom3;

static int64_t vol(const int64_t v[3]) { return v[0] * v[1] * v[2]; }

/* The outputs o in [*o0, *o1) whose input o * s + off lies in [0, in). */
static void valid_range(int64_t off, int64_t s, int64_t in, int64_t n, int64_t *o0, int64_t *o1) {
    int64_t lo = off >= 0 ? 0 : (-off + s - 1) / s;
    int64_t hi = in - 1 - off < 0 ? 0 : (in - 1 - off) / s + 1;
    *o0 = lo < n ? lo : n;
    *o1 = hi < n ? hi : n;
    if (*o1 < *o0) *o1 = *o0;
}

/* Output depth planes per column slab: about VOL_CHUNK_ELEMS column
 * elements, at least one plane. From the shapes alone. */
#define VOL_CHUNK_ELEMS ((int64_t)1 << 20)
static int64_t slab_planes(int64_t rows, const geom3 *g) {
    const int64_t plane = g->out[1] * g->out[2];
    int64_t dz = rows * plane > 0 ? VOL_CHUNK_ELEMS / (rows * plane) : g->out[0];
    return dz < 1 ? 1 : dz > g->out[0] ? g->out[0] : dz;
}

/* The batch is cut into at most WG_PARTS runs (from the shapes alone) whose
 * weight-gradient partials are added in order: results do not depend on
 * the number of threads. */
#define WG_PARTS 8

#define C3_T float
#define C3_SFX f32
#define C3_GEMM oari_cpu_sgemm
#include "cpu_conv3d.c"
#undef C3_T
#undef C3_SFX
#undef C3_GEMM

#define C3_T double
#define C3_SFX f64
#define C3_GEMM oari_cpu_dgemm
#include "cpu_conv3d.c"
#undef C3_T
#undef C3_SFX
#undef C3_GEMM

const oari_cpu_kernels oari_cpu_k_conv3d = {[OAR_F32] = k_conv3d_f32, [OAR_F64] = k_conv3d_f64};
const oari_cpu_kernels oari_cpu_k_conv_transpose3d = {[OAR_F32] = k_conv_transpose3d_f32,
                                                      [OAR_F64] = k_conv_transpose3d_f64};
const oari_cpu_kernels oari_cpu_k_conv3d_weight_grad = {[OAR_F32] = k_conv3d_weight_grad_f32,
                                                        [OAR_F64] = k_conv3d_weight_grad_f64};

#else /* ---- the template: C3_T, C3_SFX, C3_GEMM ------------------------------------- */

#define CAT2(a, b) a##_##b
#define CAT(a, b) CAT2(a, b)
#define FN(name) CAT(name, C3_SFX)
typedef C3_T FN(real);
#define T FN(real)

/* col [c * kd*kh*kw, (oz1 - oz0) * oh*ow] (row stride ld) from the input
 * volumes x [c, id, ih, iw], output depth planes oz0..oz1; zeros where a
 * tap falls in the padding. */
static void FN(vol2col)(const T *restrict x, int64_t c, const geom3 *g, int64_t oz0, int64_t oz1,
                        T *restrict col, int64_t ld) {
    const int64_t kv = vol(g->k), ivol = vol(g->in), oh = g->out[1], ow = g->out[2];
    for (int64_t r = 0; r < c * kv; r++) {
        const int64_t ci = r / kv, kz = r / (g->k[1] * g->k[2]) % g->k[0];
        const int64_t ky = r / g->k[2] % g->k[1], kx = r % g->k[2];
        const T *xc = x + ci * ivol;
        T *dst = col + r * ld;
        int64_t x0, x1;
        valid_range(kx * g->d[2] - g->p[2], g->s[2], g->in[2], ow, &x0, &x1);
        for (int64_t oz = oz0; oz < oz1; oz++) {
            const int64_t iz = oz * g->s[0] - g->p[0] + kz * g->d[0];
            for (int64_t oy = 0; oy < oh; oy++, dst += ow) {
                const int64_t iy = oy * g->s[1] - g->p[1] + ky * g->d[1];
                if (iz < 0 || iz >= g->in[0] || iy < 0 || iy >= g->in[1]) {
                    memset(dst, 0, (size_t)ow * sizeof(T));
                    continue;
                }
                /* the row's first tap; taps before x0 fall in the padding */
                const int64_t base = (iz * g->in[1] + iy) * g->in[2] + kx * g->d[2] - g->p[2];
                for (int64_t ox = 0; ox < x0; ox++)
                    dst[ox] = 0;
                if (g->s[2] == 1) /* a plain run: copied as one block */
                    memcpy(dst + x0, xc + base + x0, (size_t)(x1 - x0) * sizeof(T));
                else
                    for (int64_t ox = x0; ox < x1; ox++)
                        dst[ox] = xc[base + ox * g->s[2]];
                for (int64_t ox = x1; ox < ow; ox++)
                    dst[ox] = 0;
            }
        }
    }
}

/* The adjoint of vol2col: adds col's entries into the volumes y [c, id, ih, iw]. */
static void FN(col2vol)(const T *restrict col, int64_t c, const geom3 *g, int64_t oz0,
                        int64_t oz1, T *restrict y, int64_t ld) {
    const int64_t kv = vol(g->k), ivol = vol(g->in), oh = g->out[1], ow = g->out[2];
    for (int64_t r = 0; r < c * kv; r++) {
        const int64_t ci = r / kv, kz = r / (g->k[1] * g->k[2]) % g->k[0];
        const int64_t ky = r / g->k[2] % g->k[1], kx = r % g->k[2];
        T *yc = y + ci * ivol;
        const T *src = col + r * ld;
        int64_t x0, x1;
        valid_range(kx * g->d[2] - g->p[2], g->s[2], g->in[2], ow, &x0, &x1);
        for (int64_t oz = oz0; oz < oz1; oz++) {
            const int64_t iz = oz * g->s[0] - g->p[0] + kz * g->d[0];
            for (int64_t oy = 0; oy < oh; oy++, src += ow) {
                const int64_t iy = oy * g->s[1] - g->p[1] + ky * g->d[1];
                if (iz < 0 || iz >= g->in[0] || iy < 0 || iy >= g->in[1]) continue;
                const int64_t base = (iz * g->in[1] + iy) * g->in[2] + kx * g->d[2] - g->p[2];
                if (g->s[2] == 1) {
                    T *dst = yc + base + x0;
                    const T *from = src + x0;
#pragma omp simd
                    for (int64_t i = 0; i < x1 - x0; i++)
                        dst[i] += from[i];
                } else {
                    for (int64_t ox = x0; ox < x1; ox++)
                        yc[base + ox * g->s[2]] += src[ox];
                }
            }
        }
    }
}

static void FN(add_bias)(T *y, const oar_ktensor *b, int64_t channels, int64_t plane) {
    if (b->dtype < 0) return;
    for (int64_t o = 0; o < channels; o++) {
        const T v = *((const T *)b->data + o * b->strides[0]);
        for (int64_t i = 0; i < plane; i++)
            y[o * plane + i] += v;
    }
}

/* conv3d: in x [N, C, D, H, W], w [O, C/g, kd, kh, kw], bias? [O]; out y
 * [N, O, OD, OH, OW]. Per image and group, per slab of output planes:
 * col [K, slab] = vol2col(x), y_g [og, slab] = w_g [og, K] col. */
static int FN(k_conv3d)(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    const int64_t *a = c->iattr;
    const oar_ktensor *xk = &c->in[0], *wk = &c->in[1], *yk = &c->out[0];
    const int64_t n = xk->shape[0], ch = xk->shape[1], oc = wk->shape[0], groups = a[9];
    const int64_t cg = ch / groups, og = oc / groups;
    geom3 g;
    for (int i = 0; i < 3; i++) {
        g.in[i] = xk->shape[2 + i];
        g.k[i] = wk->shape[2 + i];
        g.out[i] = yk->shape[2 + i];
        g.s[i] = a[i];
        g.p[i] = a[3 + i];
        g.d[i] = a[6 + i];
    }
    const int64_t K = cg * vol(g.k), P = vol(g.out), plane = g.out[1] * g.out[2];
    T *y = yk->data;
    if (n == 0 || oc == 0 || P == 0) return 0;
    void *xo, *wo;
    size_t xn, wn;
    const T *x = contig(xk, &xo, &xn);
    const T *w = x ? contig(wk, &wo, &wn) : NULL;
    if (!w) {
        scratch_free(xo, xn);
        return oari_fail_status();
    }
    const int64_t dz = slab_planes(K, &g);
    const bool par = n > 1 && (double)n * (double)K * (double)P * (double)oc > 5e5;
    const int nt = par ? max_threads() : 1;
    const size_t per = (size_t)(K * dz * plane), coln = per * (size_t)nt;
    T *cols = scratch_alloc((coln ? coln : 1) * sizeof(T));
    int st = cols ? 0 : oari_fail_status();
    if (!st) {
        OARI_PARALLEL_FOR_DYNAMIC_IF(par,
            for (int64_t b = 0; b < n; b++) {
                T *col = cols + (size_t)(par ? thread_id() : 0) * per;
                for (int64_t gi = 0; gi < groups; gi++) {
                    const T *xg = x + (b * ch + gi * cg) * vol(g.in);
                    T *yg = y + (b * oc + gi * og) * P;
                    for (int64_t oz = 0; oz < g.out[0]; oz += dz) {
                        const int64_t oz1 = oz + dz < g.out[0] ? oz + dz : g.out[0];
                        const int64_t cols_n = (oz1 - oz) * plane;
                        if (K == 0) {
                            for (int64_t o = 0; o < og; o++)
                                memset(yg + o * P + oz * plane, 0, (size_t)cols_n * sizeof(T));
                            continue;
                        }
                        FN(vol2col)(xg, cg, &g, oz, oz1, col, cols_n);
                        C3_GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)og, (int)cols_n, (int)K,
                                1, w + gi * og * K, (int)K, col, (int)cols_n, 0, yg + oz * plane,
                                (int)P);
                    }
                }
                FN(add_bias)(y + b * oc * P, &c->in[2], oc, P);
            });
    }
    scratch_free(cols, (coln ? coln : 1) * sizeof(T));
    scratch_free(xo, xn);
    scratch_free(wo, wn);
    return st;
}

/* conv_transpose3d: in x [N, C, D, H, W], w [C, O/g, kd, kh, kw], bias? [O];
 * out y [N, O, OD, OH, OW], the adjoint of conv3d(y-shaped, w). Per image
 * and group, per slab of x's depth planes: col [K, slab] = w_g^T x_g, then
 * col2vol adds it into y. */
static int FN(k_conv_transpose3d)(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    const int64_t *a = c->iattr;
    const oar_ktensor *xk = &c->in[0], *wk = &c->in[1], *yk = &c->out[0];
    const int64_t n = xk->shape[0], ch = xk->shape[1], oc = yk->shape[1], groups = a[12];
    const int64_t cg = ch / groups, og = wk->shape[1];
    geom3 g; /* the conv's geometry: its input is our output, its output our input */
    for (int i = 0; i < 3; i++) {
        g.in[i] = yk->shape[2 + i];
        g.k[i] = wk->shape[2 + i];
        g.out[i] = xk->shape[2 + i];
        g.s[i] = a[i];
        g.p[i] = a[3 + i];
        g.d[i] = a[9 + i];
    }
    const int64_t K = og * vol(g.k), P = vol(g.out), Y = vol(g.in), plane = g.out[1] * g.out[2];
    T *y = yk->data;
    if (n == 0 || oc == 0 || Y == 0) return 0;
    void *xo, *wo;
    size_t xn, wn;
    const T *x = contig(xk, &xo, &xn);
    const T *w = x ? contig(wk, &wo, &wn) : NULL;
    if (!w) {
        scratch_free(xo, xn);
        return oari_fail_status();
    }
    const int64_t dz = slab_planes(K, &g);
    const bool par = n > 1 && (double)n * (double)K * (double)P * (double)ch > 5e5;
    const int nt = par ? max_threads() : 1;
    const size_t per = (size_t)(K * dz * plane), coln = per * (size_t)nt;
    T *cols = scratch_alloc((coln ? coln : 1) * sizeof(T));
    int st = cols ? 0 : oari_fail_status();
    if (!st) {
        OARI_PARALLEL_FOR_DYNAMIC_IF(par,
            for (int64_t b = 0; b < n; b++) {
                T *col = cols + (size_t)(par ? thread_id() : 0) * per;
                T *yb = y + b * oc * Y;
                memset(yb, 0, (size_t)(oc * Y) * sizeof(T));
                for (int64_t gi = 0; gi < groups && cg > 0 && K > 0; gi++) {
                    const T *xg = x + (b * ch + gi * cg) * P;
                    for (int64_t oz = 0; oz < g.out[0]; oz += dz) {
                        const int64_t oz1 = oz + dz < g.out[0] ? oz + dz : g.out[0];
                        const int64_t cols_n = (oz1 - oz) * plane;
                        /* col [K, cols_n] = w_g^T [K, cg] x_g [cg, cols_n] */
                        C3_GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, (int)K, (int)cols_n, (int)cg,
                                1, w + gi * cg * K, (int)K, xg + oz * plane, (int)P, 0, col,
                                (int)cols_n);
                        FN(col2vol)(col, og, &g, oz, oz1, yb + gi * og * Y, cols_n);
                    }
                }
                FN(add_bias)(yb, &c->in[2], oc, Y);
            });
    }
    scratch_free(cols, (coln ? coln : 1) * sizeof(T));
    scratch_free(xo, xn);
    scratch_free(wo, wn);
    return st;
}

/* conv3d_weight_grad: in x [N, C, D, H, W], gy [N, O, OD, OH, OW]; out gw
 * [O, C/g, kd, kh, kw]. gw_g [og, K] += gy_g [og, slab] col^T [slab, K] over
 * images and slabs; each run of images sums into its own partial, and the
 * partials are added in order. */
static int FN(k_conv3d_weight_grad)(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    const int64_t *a = c->iattr;
    const oar_ktensor *xk = &c->in[0], *gk = &c->in[1];
    const int64_t n = xk->shape[0], ch = xk->shape[1], oc = a[0], groups = a[14];
    const int64_t cg = a[1], og = oc / groups;
    geom3 g;
    for (int i = 0; i < 3; i++) {
        g.in[i] = xk->shape[2 + i];
        g.k[i] = a[2 + i];
        g.out[i] = gk->shape[2 + i];
        g.s[i] = a[5 + i];
        g.p[i] = a[8 + i];
        g.d[i] = a[11 + i];
    }
    const int64_t K = cg * vol(g.k), P = vol(g.out), WN = oc * K, plane = g.out[1] * g.out[2];
    T *gw = c->out[0].data;
    memset(gw, 0, (size_t)WN * sizeof(T));
    if (K == 0 || P == 0 || n == 0 || oc == 0) return 0;
    void *xo, *yo;
    size_t xn, yn;
    const T *x = contig(xk, &xo, &xn);
    const T *gy = x ? contig(gk, &yo, &yn) : NULL;
    if (!gy) {
        scratch_free(xo, xn);
        return oari_fail_status();
    }
    int64_t parts = n < WG_PARTS ? n : WG_PARTS;
    const int64_t run = (n + parts - 1) / parts;
    parts = (n + run - 1) / run;
    const int64_t dz = slab_planes(K, &g);
    const bool par = parts > 1 && (double)n * (double)K * (double)P * (double)og > 5e5;
    const int nt = par ? max_threads() : 1;
    const size_t per = (size_t)(K * dz * plane), coln = per * (size_t)nt;
    const size_t partn = (size_t)((parts - 1) * WN);
    T *cols = scratch_alloc(coln * sizeof(T));
    T *part = partn ? scratch_alloc(partn * sizeof(T)) : NULL;
    int st = !cols || (partn && !part) ? oari_fail_status() : 0;
    if (!st) {
        OARI_PARALLEL_FOR_DYNAMIC_IF(par,
            for (int64_t r = 0; r < parts; r++) {
                T *col = cols + (size_t)(par ? thread_id() : 0) * per;
                T *acc = r == 0 ? gw : part + (size_t)((r - 1) * WN);
                if (r > 0) memset(acc, 0, (size_t)WN * sizeof(T));
                const int64_t b1 = (r + 1) * run < n ? (r + 1) * run : n;
                for (int64_t b = r * run; b < b1; b++)
                    for (int64_t gi = 0; gi < groups; gi++) {
                        const T *xg = x + (b * ch + gi * cg) * vol(g.in);
                        const T *gyg = gy + (b * oc + gi * og) * P;
                        for (int64_t oz = 0; oz < g.out[0]; oz += dz) {
                            const int64_t oz1 = oz + dz < g.out[0] ? oz + dz : g.out[0];
                            const int64_t cols_n = (oz1 - oz) * plane;
                            FN(vol2col)(xg, cg, &g, oz, oz1, col, cols_n);
                            C3_GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, (int)og, (int)K,
                                    (int)cols_n, 1, gyg + oz * plane, (int)P, col, (int)cols_n, 1,
                                    acc + gi * og * K, (int)K);
                        }
                    }
            });
        for (int64_t r = 1; r < parts; r++) {
            const T *p = part + (size_t)((r - 1) * WN);
            for (int64_t i = 0; i < WN; i++)
                gw[i] += p[i];
        }
    }
    scratch_free(part, partn * sizeof(T));
    scratch_free(cols, coln * sizeof(T));
    scratch_free(xo, xn);
    scratch_free(yo, yn);
    return st;
}

#undef T
#undef FN
#undef CAT
#undef CAT2
#endif

/* OpenCL C kernels of the oar opencl plugin (embedded into the plugin as a
 * string by CMake and built per device on first use). Every tensor
 * arrives as a buffer plus a descriptor `T` (offset, rank, shape, strides
 * in elements; stride 0 on broadcast dims), so views, broadcasts and
 * non-contiguous inputs need no copies. One work item per output element
 * unless said otherwise.
 *
 * The source is built twice: as it is, giving the f32 kernels (named
 * <kernel>_f32), the bool/u8/i32/i64 ones and the f16/bf16 conversions
 * and fills (16-bit storage, no cl_khr_fp16); and, on a device with
 * cl_khr_fp64, with -DOAR_F64, giving the same floating-point kernels in
 * double (<kernel>_f64, accumulating in double) and the conversions and
 * fill of f64. The elementwise kernels come from the op table (below). `real` is the floating-point type, R(x)
 * a literal of it (x##f in f32, so f32 keeps single-precision constants),
 * K(name) the kernel's name with the suffix. */
#ifdef OAR_F64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#define EW_FP64 1 /* the f64 words of ew_math.h */
typedef double real;
#define R(x) x
#define K(name) name##_f64
#else
typedef float real;
#define R(x) x##f
#define K(name) name##_f32
#endif

typedef struct { long off; long nd; long shape[8]; long st[8]; } T;

/* element offset of the i-th element (row-major) of t */
static long at(const T *t, long i) {
    long off = t->off;
    for (long d = t->nd - 1; d >= 0; d--) {
        long s = t->shape[d];
        off += (i % s) * t->st[d];
        i /= s;
    }
    return off;
}

/* ---- elementwise: one kernel per row of src/ops/elementwise.def and dtype
 * of its gen column, named <op>_<suffix> (<op>_alt_<suffix>: the form of
 * integer attribute 0), made from the row's formula over the vocabulary of
 * ew_math.h (both inlined into this source by embed.cmake). Unary kernels
 * take the float attributes p0, p1 (P0, P1); where's condition is a. ---- */
#include "ew_math.h"
#include "ew_table.h"
#include "ew_words.h"

#define EW_UNARY_KERNEL(NAME, TI, TO, EXPR)                                                 \
    __kernel void NAME(__global TO *o, T to, __global const TI *px, T tx, real p0, real p1,  \
                       long n) {                                                            \
        long i = get_global_id(0);                                                          \
        if (i >= n) return;                                                                 \
        TI x = px[at(&tx, i)];                                                              \
        o[at(&to, i)] = (TO)(EXPR);                                                         \
    }
#define ALT(f) EW_ALT2, f
#define NO_ALT EW_ALT1, 0
#define EW_UNARY_KERNELS(...) EW_UNARY_KERNELS_(__VA_ARGS__)
#define EW_UNARY_KERNELS_(NAME, ALT_NAME, TI, TO, EXPR, alt_kind, ALT_EXPR)                 \
    alt_kind(NAME, ALT_NAME, TI, TO, EXPR, ALT_EXPR)
#define EW_ALT1(NAME, ALT_NAME, TI, TO, EXPR, unused) EW_UNARY_KERNEL(NAME, TI, TO, EXPR)
#define EW_ALT2(NAME, ALT_NAME, TI, TO, EXPR, ALT_EXPR)                                     \
    EW_UNARY_KERNEL(NAME, TI, TO, EXPR) EW_UNARY_KERNEL(ALT_NAME, TI, TO, ALT_EXPR)
#define EW_BINARY_KERNEL(NAME, TI, TO, EXPR)                                                \
    __kernel void NAME(__global TO *o, T to, __global const TI *pa, T ta,                   \
                       __global const TI *pb, T tb, long n) {                               \
        long i = get_global_id(0);                                                          \
        if (i >= n) return;                                                                 \
        TI a = pa[at(&ta, i)], b = pb[at(&tb, i)];                                          \
        o[at(&to, i)] = (TO)(EXPR);                                                         \
    }
#define EW_TERNARY_KERNEL(NAME, TI, TO, EXPR)                                               \
    __kernel void NAME(__global TO *o, T to, __global const uchar *pa, T ta,                \
                       __global const TI *pb, T tb, __global const TI *pc, T tc, long n) {  \
        long i = get_global_id(0);                                                          \
        if (i >= n) return;                                                                 \
        uchar a = pa[at(&ta, i)];                                                           \
        TI b = pb[at(&tb, i)], c = pc[at(&tc, i)];                                          \
        o[at(&to, i)] = (TO)(EXPR);                                                         \
    }

#define EW_UNARY(op, rule, cpu, gen, api, forward, alt, gradient, saved, test, onnx, doc)  \
    EW_GEN_IN(gen)(EW_UNARY_KERNELS(EW_SFX_NAME(op##_), EW_SFX_NAME(op##_alt_), EW_TI,          \
                                    EW_OUT_T(rule), forward, alt))
#define EW_BINARY(op, rule, cpu, gen, api, forward, gradient, saved, test, onnx, doc)      \
    EW_GEN_IN(gen)(EW_BINARY_KERNEL_N(EW_SFX_NAME(op##_), EW_TI, EW_OUT_T(rule), forward))
#define EW_TERNARY(op, rule, cpu, gen, api, forward, gradient, saved, test, onnx, doc)     \
    EW_GEN_IN(gen)(EW_TERNARY_KERNEL_N(EW_SFX_NAME(op##_), EW_TI, EW_OUT_T(rule), forward))
#define EW_BINARY_KERNEL_N(...) EW_BINARY_KERNEL(__VA_ARGS__)
#define EW_TERNARY_KERNEL_N(...) EW_TERNARY_KERNEL(__VA_ARGS__)
#define EW_NONE(op, why)

/* One pass over the table per suffix: the f64 program holds f64, the other
 * f32 and the bool and integer forms. */
#define EW_PASS_B EW_DROP
#define EW_PASS_I EW_DROP
#define EW_PASS_R EW_DROP
#ifdef OAR_F64
#undef EW_PASS_R
#define EW_PASS_R EW_KEEP
#define EW_SFX f64
#include "elementwise.def"
#undef EW_SFX
#else
#undef EW_PASS_R
#define EW_PASS_R EW_KEEP
#define EW_SFX f32
#include "elementwise.def"
#undef EW_SFX
#undef EW_PASS_R
#define EW_PASS_R EW_DROP
#undef EW_PASS_B
#define EW_PASS_B EW_KEEP
#define EW_SFX b1
#include "elementwise.def"
#undef EW_SFX
#undef EW_PASS_B
#define EW_PASS_B EW_DROP
#undef EW_PASS_I
#define EW_PASS_I EW_KEEP
#define EW_SFX u8
#include "elementwise.def"
#undef EW_SFX
#define EW_SFX i32
#include "elementwise.def"
#undef EW_SFX
#define EW_SFX i64
#include "elementwise.def"
#undef EW_SFX
#endif

/* ---- conversions: cast, copy, contiguous, fill ---------------------------
 * f16 and bf16 are stored as 16-bit words (ushort buffers) and converted
 * through f32 exactly as oar's CPU does (src/core/dtype.c, core.h), bit
 * for bit, with no need of cl_khr_fp16:
 * - f16: vload_half / vstore_half_rte (core OpenCL C: round to nearest
 *   even, subnormals kept, past 65504 to inf); NaN explicitly, as the CPU:
 *   f16 -> f32 keeps sign and payload, f32 -> f16 gives sign | 0x7e00;
 * - bf16: the high half of the f32 word, rounded to nearest even; NaN
 *   kept a quiet NaN (sign and high payload, quiet bit set).
 * Other dtypes convert to and from them through f32 as well (f64 and i64
 * round to f32 first, as the CPU's float conversion does); a half copied
 * to its own dtype keeps its bits. */
static float ld_f16(__global const ushort *p, long e) {
    uint h = p[e];
    if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu)) /* NaN: sign and payload as they are */
        return as_float(((h & 0x8000u) << 16) | 0x7f800000u | ((h & 0x3ffu) << 13));
    return vload_half((size_t)e, (__global const half *)p);
}
static void st_f16(__global ushort *p, long e, float v) {
    uint u = as_uint(v);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        p[e] = (ushort)(((u >> 16) & 0x8000u) | 0x7e00u);
    else
        vstore_half_rte(v, (size_t)e, (__global half *)p);
}
static float ld_bf16(__global const ushort *p, long e) { return as_float((uint)p[e] << 16); }
static ushort f32_to_bf16(float v) {
    uint u = as_uint(v);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (ushort)((u >> 16) | 0x40u); /* quiet NaN */
    return (ushort)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); /* round to nearest even */
}

/* LD_<name>(p, e): element e of a buffer of that dtype, as a value;
 * ST_<name>(p, e, v): stores v converted to it */
#define LD_b(p, e) ((p)[e])
#define LD_u8(p, e) ((p)[e])
#define LD_i32(p, e) ((p)[e])
#define LD_i64(p, e) ((p)[e])
#define LD_f32(p, e) ((p)[e])
#define LD_f64(p, e) ((p)[e])
#define LD_f16(p, e) ld_f16(p, e)
#define LD_bf16(p, e) ld_bf16(p, e)
#define ST_b(p, e, v) ((p)[e] = (uchar)((v) != 0))
#define ST_u8(p, e, v) ((p)[e] = (uchar)(v))
#define ST_i32(p, e, v) ((p)[e] = (int)(v))
#define ST_i64(p, e, v) ((p)[e] = (long)(v))
#define ST_f32(p, e, v) ((p)[e] = (float)(v))
#define ST_f64(p, e, v) ((p)[e] = (double)(v))
#define ST_f16(p, e, v) st_f16(p, e, (float)(v))
#define ST_bf16(p, e, v) ((p)[e] = f32_to_bf16((float)(v)))
#define CONVERT(TI, NI, TO, NO)                                                            \
    __kernel void convert_##NI##_##NO(__global TO *o, T to, __global const TI *x, T tx,   \
                                      long n) {                                            \
        long i = get_global_id(0);                                                         \
        if (i < n) ST_##NO(o, at(&to, i), LD_##NI(x, at(&tx, i)));                         \
    }
/* a half to its own dtype: the 16 bits as they are (a NaN's payload too) */
#define CONVERT_BITS(N)                                                                    \
    __kernel void convert_##N##_##N(__global ushort *o, T to, __global const ushort *x,   \
                                    T tx, long n) {                                        \
        long i = get_global_id(0);                                                         \
        if (i < n) o[at(&to, i)] = x[at(&tx, i)];                                          \
    }
#define CONVERT_FROM(TI, NI)                                                               \
    CONVERT(TI, NI, uchar, b) CONVERT(TI, NI, uchar, u8) CONVERT(TI, NI, int, i32)         \
    CONVERT(TI, NI, long, i64) CONVERT(TI, NI, float, f32) CONVERT(TI, NI, ushort, f16)    \
    CONVERT(TI, NI, ushort, bf16)
/* from a half N: to the other types through f32, to the other half O, to
 * itself bit for bit */
#define CONVERT_FROM_HALF(N, O)                                                            \
    CONVERT(ushort, N, uchar, b) CONVERT(ushort, N, uchar, u8)                             \
    CONVERT(ushort, N, int, i32) CONVERT(ushort, N, long, i64)                             \
    CONVERT(ushort, N, float, f32) CONVERT(ushort, N, ushort, O) CONVERT_BITS(N)
#ifdef OAR_F64 /* every conversion to or from f64 */
CONVERT_FROM(double, f64)
CONVERT(double, f64, double, f64)
CONVERT(uchar, b, double, f64)
CONVERT(uchar, u8, double, f64)
CONVERT(int, i32, double, f64)
CONVERT(long, i64, double, f64)
CONVERT(float, f32, double, f64)
CONVERT(ushort, f16, double, f64)
CONVERT(ushort, bf16, double, f64)
#else
CONVERT_FROM(uchar, b)
CONVERT_FROM(uchar, u8)
CONVERT_FROM(int, i32)
CONVERT_FROM(long, i64)
CONVERT_FROM(float, f32)
CONVERT_FROM_HALF(f16, bf16)
CONVERT_FROM_HALF(bf16, f16)
#endif

#define FILL(TO, NO)                                                                       \
    __kernel void fill_##NO(__global TO *o, T to, TO v, long n) {                          \
        long i = get_global_id(0);                                                         \
        if (i < n) o[at(&to, i)] = v;                                                      \
    }
/* f16/bf16: v is the value in f32 (oar's CPU rounds a fill value to f32
 * first too), stored converted */
#define FILL_HALF(NO)                                                                      \
    __kernel void fill_##NO(__global ushort *o, T to, float v, long n) {                  \
        long i = get_global_id(0);                                                         \
        if (i < n) ST_##NO(o, at(&to, i), v);                                              \
    }
#ifdef OAR_F64
FILL(double, f64)
#else
FILL(uchar, b)
FILL(uchar, u8)
FILL(int, i32)
FILL(long, i64)
FILL(float, f32)
FILL_HALF(f16)
FILL_HALF(bf16)
#endif

/* ---- reductions: one work item per output element ------------------- */
/* kept: the kept dims of x (shape, x's strides, x's offset); red: the
 * reduced dims (shape, x's strides, offset 0). Output contiguous. */
enum { R_SUM, R_MAX, R_MIN, R_PROD };

__kernel void K(reduce)(__global real *o, long o_off, __global const real *x, T kept, T red,
                        int op, long n_out, long n_red) {
    long i = get_global_id(0);
    if (i >= n_out) return;
    long base = at(&kept, i);
    real acc = op == R_SUM ? R(0.0) : op == R_PROD ? R(1.0) : op == R_MAX ? -INFINITY : INFINITY;
    real comp = R(0.0); /* Kahan compensation of the sum */
    for (long r = 0; r < n_red; r++) {
        real v = x[base + at(&red, r)];
        if (op == R_SUM) {
            real y = v - comp, t = acc + y;
            comp = (t - acc) - y;
            acc = t;
        } else if (op == R_PROD) {
            acc *= v;
        } else if (isnan(v) || isnan(acc)) {
            acc = NAN;
        } else {
            acc = op == R_MAX ? fmax(acc, v) : fmin(acc, v);
        }
    }
    o[o_off + i] = acc;
}

/* ---- matmul: 16x16 tiles through local memory ------------------------ */
/* o[b, i, j] = sum_k a[b, i, k] b[b, k, j]; ba/bb: the batch dims (out's
 * batch shape, the operand's strides, 0 on broadcast; offset: operand's). */
#define TS 16
__kernel void K(matmul)(__global real *o, long o_off, __global const real *a,
                        __global const real *b, long n, long m, long k, long sa_n, long sa_k,
                        long sb_k, long sb_m, T ba, T bb) {
    __local real As[TS][TS];
    __local real Bs[TS][TS + 1];
    long col = get_global_id(0), row = get_global_id(1), z = get_global_id(2);
    int lc = get_local_id(0), lr = get_local_id(1);
    long a0 = at(&ba, z), b0 = at(&bb, z);
    real acc = R(0.0);
    for (long t = 0; t < k; t += TS) {
        long ka = t + lc, kb = t + lr;
        As[lr][lc] = row < n && ka < k ? a[a0 + row * sa_n + ka * sa_k] : R(0.0);
        Bs[lr][lc] = kb < k && col < m ? b[b0 + kb * sb_k + col * sb_m] : R(0.0);
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int q = 0; q < TS; q++) acc += As[lr][q] * Bs[q][lc];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (row < n && col < m) o[o_off + (z * n + row) * m + col] = acc;
}

/* ---- softmax / log_softmax: one work item per row --------------------- */
/* rows_x / rows_o: x's / o's dims other than the softmax dim. */
__kernel void K(softmax)(__global real *o, __global const real *x, T rows_x, T rows_o,
                         long len, long sx, long so, int log_, long n_rows) {
    long r = get_global_id(0);
    if (r >= n_rows) return;
    long bx = at(&rows_x, r), bo = at(&rows_o, r);
    real mx = -INFINITY;
    for (long j = 0; j < len; j++) mx = fmax(mx, x[bx + j * sx]);
    real s = R(0.0);
    for (long j = 0; j < len; j++) s += exp(x[bx + j * sx] - mx);
    real ls = log(s);
    for (long j = 0; j < len; j++) {
        real v = x[bx + j * sx] - mx;
        o[bo + j * so] = log_ ? v - ls : exp(v) / s;
    }
}

/* ---- layer_norm: one work item per row of d normalised elements ------- */
/* y contiguous [rows, d]; mean, rstd [rows]; w, b: descriptors over [d]. */
__kernel void K(layer_norm)(__global real *y, __global real *mean, __global real *rstd,
                            long y_off, long mean_off, long rstd_off,
                            __global const real *x, T tx, __global const real *w, T tw,
                            __global const real *b, T tb, int has_w, int has_b, real eps,
                            long d, long rows) {
    long r = get_global_id(0);
    if (r >= rows) return;
    real mu = R(0.0);
    for (long j = 0; j < d; j++) mu += x[at(&tx, r * d + j)];
    mu /= (real)d;
    real var = R(0.0);
    for (long j = 0; j < d; j++) {
        real c = x[at(&tx, r * d + j)] - mu;
        var += c * c;
    }
    var /= (real)d;
    real rs = R(1.0) / sqrt(var + eps);
    mean[mean_off + r] = mu;
    rstd[rstd_off + r] = rs;
    for (long j = 0; j < d; j++) {
        real v = (x[at(&tx, r * d + j)] - mu) * rs;
        if (has_w) v *= w[at(&tw, j)];
        if (has_b) v += b[at(&tb, j)];
        y[y_off + r * d + j] = v;
    }
}

/* ---- indexing with i64 indices --------------------------------------- */
/* o = x gathered along dim by idx (same rank, idx's shape); to/tx/ti full
 * descriptors; sd: x's stride along dim; bad[0] set on an out-of-range index */
__kernel void K(gather)(__global real *o, T to, __global const real *x, T tx,
                        __global const long *idx, T ti, long dim, long size,
                        __global int *bad, long n) {
    long i = get_global_id(0);
    if (i >= n) return;
    long j = idx[at(&ti, i)];
    if (j < 0 || j >= size) {
        bad[0] = 1;
        o[at(&to, i)] = R(0.0);
        return;
    }
    /* x's offset of the element with i's coordinates, dim replaced by j */
    long off = tx.off, rest = i;
    for (long d = to.nd - 1; d >= 0; d--) {
        long c = rest % to.shape[d];
        rest /= to.shape[d];
        off += (d == dim ? j : c) * tx.st[d];
    }
    o[at(&to, i)] = x[off];
}

/* o = x with its rows along dim picked by the 1-D idx (index_select) */
__kernel void K(index_select)(__global real *o, T to, __global const real *x, T tx,
                              __global const long *idx, T ti, long dim, long size,
                              __global int *bad, long n) {
    long i = get_global_id(0);
    if (i >= n) return;
    long off = tx.off, rest = i;
    for (long d = to.nd - 1; d >= 0; d--) {
        long c = rest % to.shape[d];
        rest /= to.shape[d];
        if (d == dim) {
            long j = idx[at(&ti, c)];
            if (j < 0 || j >= size) {
                bad[0] = 1;
                j = 0;
            }
            c = j;
        }
        off += c * tx.st[d];
    }
    o[at(&to, i)] = x[off];
}

/* scatter_add (and index_add, whose index the host views over src's shape
 * with stride 0 off dim): o = x, plus src[p] at each index position p whose
 * index names this element's coordinate along dim. One work item per output
 * element adds its contributions in index order, as the CPU does, so the
 * sums are deterministic. ti, ts: the index and src over the index's shape. */
__kernel void K(scatter_add)(__global real *o, T to, __global const real *x, T tx,
                             __global const long *idx, T ti, __global const real *src, T ts,
                             long dim, long size, __global int *bad, long n) {
    long i = get_global_id(0);
    if (i >= n) return;
    long c[8], rest = i;
    for (long d = to.nd - 1; d >= 0; d--) {
        c[d] = rest % to.shape[d];
        rest /= to.shape[d];
    }
    real v = x[at(&tx, i)];
    bool inside = true;
    for (long d = 0; d < ti.nd; d++)
        if (d != dim && c[d] >= ti.shape[d]) inside = false;
    long len = ti.nd ? ti.shape[dim] : 1;
    for (long t = 0; inside && t < len; t++) {
        long oi = ti.off, os = ts.off;
        for (long d = 0; d < ti.nd; d++) {
            long cd = d == dim ? t : c[d];
            oi += cd * ti.st[d];
            os += cd * ts.st[d];
        }
        long j = idx[oi];
        if (j < 0 || j >= size) {
            bad[0] = 1;
            continue;
        }
        if (j == (to.nd ? c[dim] : 0)) v += src[os];
    }
    o[at(&to, i)] = v;
}

/* ---- convolutions and max pooling (direct; one work item per output) -- */
/* Operands [N, C, H, W], or [N, C, L] read as H = 1. */
static long at4(const T *t, long n, long c, long h, long w) {
    if (t->nd == 4) return t->off + n * t->st[0] + c * t->st[1] + h * t->st[2] + w * t->st[3];
    return t->off + n * t->st[0] + c * t->st[1] + w * t->st[2];
}
static long dim_h(const T *t) { return t->nd == 4 ? t->shape[2] : 1; }
static long dim_w(const T *t) { return t->shape[t->nd - 1]; }

/* a: stride2, padding2, dilation2, groups */
__kernel void K(conv2d)(__global real *y, T ty, __global const real *x, T tx,
                        __global const real *w, T tw, __global const real *b, T tb,
                        int has_b, long8 a, long n_out) {
    long i = get_global_id(0);
    if (i >= n_out) return;
    long OH = dim_h(&ty), OW = dim_w(&ty), O = ty.shape[1];
    long ox = i % OW, oy = (i / OW) % OH, o = (i / (OW * OH)) % O, n = i / (OW * OH * O);
    long groups = a.s6, cg = tx.shape[1] / groups, og = O / groups, g = o / og;
    long H = dim_h(&tx), W = dim_w(&tx), KH = dim_h(&tw), KW = dim_w(&tw);
    real acc = R(0.0);
    for (long c = 0; c < cg; c++)
        for (long ky = 0; ky < KH; ky++) {
            long iy = oy * a.s0 - a.s2 + ky * a.s4;
            if (iy < 0 || iy >= H) continue;
            for (long kx = 0; kx < KW; kx++) {
                long ix = ox * a.s1 - a.s3 + kx * a.s5;
                if (ix < 0 || ix >= W) continue;
                acc += x[at4(&tx, n, g * cg + c, iy, ix)] * w[at4(&tw, o, c, ky, kx)];
            }
        }
    if (has_b) acc += b[at(&tb, o)];
    y[at4(&ty, n, o, oy, ox)] = acc;
}

/* a: stride2, padding2, output_padding2, dilation2; groups separately */
__kernel void K(conv_transpose2d)(__global real *y, T ty, __global const real *x, T tx,
                                  __global const real *w, T tw, __global const real *b, T tb,
                                  int has_b, long8 a, long groups, long n_out) {
    long i = get_global_id(0);
    if (i >= n_out) return;
    long YH = dim_h(&ty), YW = dim_w(&ty), O = ty.shape[1];
    long ix = i % YW, iy = (i / YW) % YH, o = (i / (YW * YH)) % O, n = i / (YW * YH * O);
    long cg = tx.shape[1] / groups, og = tw.shape[1], g = o / og, oo = o % og;
    long H = dim_h(&tx), W = dim_w(&tx), KH = dim_h(&tw), KW = dim_w(&tw);
    real acc = R(0.0);
    for (long c = 0; c < cg; c++)
        for (long ky = 0; ky < KH; ky++) {
            long ty_ = iy + a.s2 - ky * a.s6; /* = oy * sh */
            if (ty_ < 0 || ty_ % a.s0) continue;
            long oy = ty_ / a.s0;
            if (oy >= H) continue;
            for (long kx = 0; kx < KW; kx++) {
                long tx_ = ix + a.s3 - kx * a.s7;
                if (tx_ < 0 || tx_ % a.s1) continue;
                long ox = tx_ / a.s1;
                if (ox >= W) continue;
                acc += x[at4(&tx, n, g * cg + c, oy, ox)] * w[at4(&tw, g * cg + c, oo, ky, kx)];
            }
        }
    if (has_b) acc += b[at(&tb, o)];
    y[at4(&ty, n, o, iy, ix)] = acc;
}

/* gw [O, cg, kh, kw]; a: stride2, padding2, dilation2; groups separately */
__kernel void K(conv2d_weight_grad)(__global real *gw, T tg, __global const real *x, T tx,
                                    __global const real *gy, T ty, long8 a, long groups,
                                    long n_out) {
    long i = get_global_id(0);
    if (i >= n_out) return;
    long KH = dim_h(&tg), KW = dim_w(&tg), CG = tg.shape[1], O = tg.shape[0];
    long kx = i % KW, ky = (i / KW) % KH, c = (i / (KW * KH)) % CG, o = i / (KW * KH * CG);
    long og = O / groups, g = o / og;
    long N = tx.shape[0], H = dim_h(&tx), W = dim_w(&tx), OH = dim_h(&ty), OW = dim_w(&ty);
    real acc = R(0.0);
    for (long n = 0; n < N; n++)
        for (long oy = 0; oy < OH; oy++) {
            long iy = oy * a.s0 - a.s2 + ky * a.s4;
            if (iy < 0 || iy >= H) continue;
            for (long ox = 0; ox < OW; ox++) {
                long ix = ox * a.s1 - a.s3 + kx * a.s5;
                if (ix < 0 || ix >= W) continue;
                acc += gy[at4(&ty, n, o, oy, ox)] * x[at4(&tx, n, g * CG + c, iy, ix)];
            }
        }
    gw[at4(&tg, o, c, ky, kx)] = acc;
}

/* max_pool2d over the last two dims; a: kernel2, stride2, padding2,
 * dilation2. Indices are h * W + w in the input plane (first maximum; NaN
 * wins), as the CPU's. */
__kernel void K(max_pool2d)(__global real *y, T ty, __global long *ind, T ti,
                            __global const real *x, T tx, long8 a, long n_out) {
    long i = get_global_id(0);
    if (i >= n_out) return;
    long OH = ty.shape[ty.nd - 2], OW = ty.shape[ty.nd - 1];
    long H = tx.shape[tx.nd - 2], W = tx.shape[tx.nd - 1];
    long ox = i % OW, oy = (i / OW) % OH, p = i / (OW * OH);
    long y0 = oy * a.s2 - a.s4, x0 = ox * a.s3 - a.s5;
    long y1 = y0 + (a.s0 - 1) * a.s6 + 1, x1 = x0 + (a.s1 - 1) * a.s7 + 1;
    if (y1 > H) y1 = H;
    if (x1 > W) x1 = W;
    while (y0 < 0) y0 += a.s6;
    while (x0 < 0) x0 += a.s7;
    long best = y0 * W + x0;
    real m = -INFINITY;
    for (long iy = y0; iy < y1; iy += a.s6)
        for (long ix = x0; ix < x1; ix += a.s7) {
            real v = x[at(&tx, p * H * W + iy * W + ix)];
            if (v > m || isnan(v)) {
                m = v;
                best = iy * W + ix;
            }
        }
    y[at(&ty, i)] = m;
    ind[at(&ti, i)] = best;
}

/* gx [..., H, W] = gy summed at the indices (in order: deterministic) */
__kernel void K(max_pool2d_backward)(__global real *gx, T tgx, __global const real *gy, T tgy,
                                     __global const long *ind, T ti, __global int *bad,
                                     long n_out) {
    long i = get_global_id(0);
    if (i >= n_out) return;
    long H = tgx.shape[tgx.nd - 2], W = tgx.shape[tgx.nd - 1];
    long OH = tgy.shape[tgy.nd - 2], OW = tgy.shape[tgy.nd - 1];
    long k = i % (H * W), p = i / (H * W);
    real acc = R(0.0);
    for (long j = 0; j < OH * OW; j++) {
        long q = ind[at(&ti, p * OH * OW + j)];
        if (q < 0 || q >= H * W) bad[0] = 1;
        else if (q == k) acc += gy[at(&tgy, p * OH * OW + j)];
    }
    gx[at(&tgx, i)] = acc;
}

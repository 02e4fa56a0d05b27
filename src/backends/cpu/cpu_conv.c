/* CPU kernels of the convolutions (im2col/col2im + CBLAS gemm), pools and
 * interpolation, with their backward primitives. The f32 and f64 kernels
 * come from one template: this file includes itself with CONV_T defined
 * (see the end of the file). f16/bf16 run through f32 (dispatch converts),
 * but for bf16 conv2d, conv_transpose2d and conv2d_weight_grad through
 * oneDNN where built with it (cpu_dnnl.c). */
#ifndef CONV_T
#include "cpu.h"

/* As in cpu_unary.c: without trapping math, comparisons become selects and
 * the max/min/clamp loops vectorize; no kernel reads FP flags or errno. */
#pragma GCC optimize("no-trapping-math", "no-math-errno")

#include <cblas.h>
#include <math.h>
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

/* Scratch buffers come from the CPU block cache: a fresh multi-megabyte
 * malloc costs a page fault per 4 KiB on first touch, which used to
 * dominate small convolutions. NULL with the error set on failure. */
static void *scratch_alloc(size_t n) { return oari_cpu_block_alloc(n ? n : 1); }
static void scratch_free(void *p, size_t n) {
    if (p) oari_cpu_block_free(p, n ? n : 1);
}

/* k's elements in row-major order: k's own data when contiguous, else a
 * copy in *owned (size *owned_n bytes; the caller frees it). NULL when the
 * copy cannot be allocated (error set). */
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

/* Conv operands: [N, C, H, W], or [N, C, L] read as H = 1. */
typedef struct {
    int64_t n, c, h, w;
} dims4;

static dims4 dims_of(const oar_ktensor *t) {
    dims4 d = {t->shape[0], t->shape[1], t->ndim == 4 ? t->shape[2] : 1, t->shape[t->ndim - 1]};
    return d;
}

/* Geometry of one 2-D convolution, from the conv's point of view: an input
 * plane ih x iw, a kernel kh x kw, an output plane oh x ow. */
typedef struct {
    int64_t ih, iw, kh, kw, oh, ow;
    int64_t sh, sw, ph, pw, dh, dw;
} geom;

/* The outputs ox in [*x0, *x1) whose input column ox * s + off lies in
 * [0, in); n outputs in all. */
static void valid_range(int64_t off, int64_t s, int64_t in, int64_t n, int64_t *x0, int64_t *x1) {
    int64_t lo = off >= 0 ? 0 : (-off + s - 1) / s;             /* ceil(-off / s) */
    int64_t hi = in - 1 - off < 0 ? 0 : (in - 1 - off) / s + 1; /* floor((in-1-off)/s) + 1 */
    *x0 = lo < n ? lo : n;
    *x1 = hi < n ? hi : n;
    if (*x1 < *x0) *x1 = *x0;
}

/* Planes of a pool/interpolate operand [..., H, W]: count, height, width. */
static void planes_of(const oar_ktensor *t, int64_t *np, int64_t *h, int64_t *w) {
    *h = t->shape[t->ndim - 2];
    *w = t->shape[t->ndim - 1];
    *np = 1;
    for (int i = 0; i < t->ndim - 2; i++)
        *np *= t->shape[i];
}

/* PyTorch's source index of nearest-neighbour resampling (float arithmetic). */
static int64_t nearest_src(int64_t dst, int64_t in, int64_t out) {
    if (out == in) return dst;
    if (out == 2 * in) return dst >> 1;
    float scale = (float)in / (float)out;
    int64_t s = (int64_t)floorf((float)dst * scale);
    return s < in - 1 ? s : in - 1;
}

/* Start and end (exclusive) of adaptive pooling window o of out over in. */
static int64_t adaptive_start(int64_t o, int64_t out, int64_t in) { return (o * in) / out; }
static int64_t adaptive_end(int64_t o, int64_t out, int64_t in) {
    return ((o + 1) * in + out - 1) / out;
}

/* Whether 64-byte vectors are registers (AVX-512). The direct kernel's
 * channel-vector form (direct_row, below) keeps eight of them as
 * accumulators: with AVX2 each takes two of the 16 registers and they
 * spill. The demo CNN's 16 -> 32 3x3 conv on 14 x 14 planes took 290 us
 * an image there, against 148 by Winograd and 60 by oneDNN (Zen 1). */
static int wide_vectors_pin = -1; /* oari_cpu_conv_wide_vectors_use */
static bool zmm_registers(void) {
    int pin = __atomic_load_n(&wide_vectors_pin, __ATOMIC_RELAXED);
    if (pin >= 0) return pin;
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f");
#else
    return false;
#endif
}

int oari_cpu_conv_wide_vectors_use(int pin) {
    return __atomic_exchange_n(&wide_vectors_pin, pin < 0 ? -1 : pin > 0, __ATOMIC_RELAXED);
}

/* The shapes the channel-vector direct kernel is for: stride 1, no
 * dilation, few output channels a group, a width not a multiple of 8 (the
 * column-vector form takes those), K = cg kh kw from 64 to 1024. */
static bool channel_vector_shape(const int64_t *a, int64_t og, int64_t K, int64_t ow) {
    return a[0] == 1 && a[1] == 1 && a[4] == 1 && a[5] == 1 && og <= 32 && K >= 64 && K <= 1024 &&
           ow >= 4 && ow % 8 != 0;
}

#define CONV_T float
#define CONV_SFX f32
#define CONV_GEMM oari_cpu_sgemm
#define CONV_WINO /* float32 3x3 convs may take Winograd (cpu_conv_wino.c) */
#include "cpu_conv.c"
#undef CONV_WINO
#undef CONV_T
#undef CONV_SFX
#undef CONV_GEMM

#define CONV_T double
#define CONV_SFX f64
#define CONV_GEMM oari_cpu_dgemm
#include "cpu_conv.c"
#undef CONV_T
#undef CONV_SFX
#undef CONV_GEMM

#ifdef OAR_WITH_DNNL
/* bf16 conv2d and its two backward ops through oneDNN (cpu_dnnl.c): f32
 * accumulation, bf16 results. Strided operands are copied first. oneDNN
 * takes no dim of size 0: those calls are answered here (the bias, or
 * zeros). */
static void fill_bf16(uint16_t *y, int64_t n, int64_t c, int64_t plane, const oar_ktensor *bias) {
    for (int64_t i = 0; i < n * c; i++) {
        uint16_t v = !bias || bias->dtype < 0 ? 0 : *((const uint16_t *)bias->data + (i % c) * bias->strides[0]);
        for (int64_t p = 0; p < plane; p++) y[i * plane + p] = v;
    }
}

/* Runs args (pass, shapes and attributes filled) on contiguous copies of
 * the call's inputs 0 and 1, which are the arguments in0 and in1 name. */
static int dnnl_conv_call(const oar_kernel_call *c, oari_dnnl_conv2d_args *args, void **in0, void **in1) {
    void *own[2] = {NULL, NULL};
    size_t own_n[2] = {0, 0};
    const void *p0 = contig(&c->in[0], &own[0], &own_n[0]);
    const void *p1 = p0 ? contig(&c->in[1], &own[1], &own_n[1]) : NULL;
    int st;
    if (!p1) {
        st = oari_fail_status();
    } else {
        *in0 = (void *)p0, *in1 = (void *)p1;
        st = oari_dnnl_conv2d(args);
    }
    for (int i = 0; i < 2; i++) scratch_free(own[i], own_n[i]);
    return st;
}

static int k_conv2d_dnnl(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    const int64_t *a = c->iattr;
    dims4 xd = dims_of(&c->in[0]), wd = dims_of(&c->in[1]), yd = dims_of(&c->out[0]);
    if (oari_kt_numel(&c->out[0]) == 0) return 0;
    if (xd.c == 0) {
        fill_bf16(c->out[0].data, yd.n, yd.c, yd.h * yd.w, &c->in[2]);
        return 0;
    }
    oari_dnnl_conv2d_args args = {
        .dtype = c->out[0].dtype, .pass = OARI_DNNL_FORWARD, .n = xd.n, .c = xd.c, .h = xd.h, .w = xd.w,
        .o = wd.n, .kh = wd.h, .kw = wd.w, .oh = yd.h, .ow = yd.w, .sh = a[0], .sw = a[1], .ph = a[2],
        .pw = a[3], .dh = a[4], .dw = a[5], .groups = a[6], .y = c->out[0].data};
    void *own = NULL;
    size_t own_n = 0;
    if (c->in[2].dtype >= 0 && !(args.bias = contig(&c->in[2], &own, &own_n))) return oari_fail_status();
    int st = dnnl_conv_call(c, &args, &args.x, &args.weight);
    scratch_free(own, own_n);
    return st;
}

/* conv_transpose2d: x [N, C, H, W] is the gradient at the output of the
 * conv whose input has our output's shape and whose weight is ours
 * ([C, O/g, kh, kw] read as [o, c/g, kh, kw] with o = C). With a bias,
 * oneDNN writes f32 and the bias is added before the one rounding. */
static int k_conv_transpose2d_dnnl(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    const int64_t *a = c->iattr;
    dims4 xd = dims_of(&c->in[0]), wd = dims_of(&c->in[1]), yd = dims_of(&c->out[0]);
    uint16_t *y = c->out[0].data;
    const oar_ktensor *b = &c->in[2];
    if (oari_kt_numel(&c->out[0]) == 0) return 0;
    if (xd.c == 0) {
        fill_bf16(y, yd.n, yd.c, yd.h * yd.w, b);
        return 0;
    }
    const int64_t P = yd.h * yd.w, numel = yd.n * yd.c * P;
    float *sum = NULL;
    if (b->dtype >= 0 && !(sum = scratch_alloc((size_t)numel * sizeof(float)))) return oari_fail_status();
    oari_dnnl_conv2d_args args = {
        .dtype = c->out[0].dtype, .pass = OARI_DNNL_BACKWARD_DATA, .f32_out = sum != NULL, .n = yd.n, .c = yd.c,
        .h = yd.h, .w = yd.w, .o = wd.n, .kh = wd.h, .kw = wd.w, .oh = xd.h, .ow = xd.w, .sh = a[0], .sw = a[1],
        .ph = a[2], .pw = a[3], .dh = a[6], .dw = a[7], .groups = a[8], .x = sum ? (void *)sum : (void *)y};
    int st = dnnl_conv_call(c, &args, &args.y, &args.weight);
    if (!st && sum) {
#pragma omp parallel for if (numel > 65536)
        for (int64_t i = 0; i < yd.n * yd.c; i++) {
            float bv = oari_ld_bf16((const uint16_t *)b->data + (i % yd.c) * b->strides[0]);
            for (int64_t p = 0; p < P; p++) y[i * P + p] = oari_f32_to_bf16(sum[i * P + p] + bv);
        }
    }
    if (sum) scratch_free(sum, (size_t)numel * sizeof(float));
    return st;
}

/* conv2d_weight_grad: x [N, C, H, W], gy [N, O, OH, OW] -> gw [O, C/g, kh, kw]. */
static int k_conv2d_weight_grad_dnnl(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    const int64_t *a = c->iattr;
    dims4 xd = dims_of(&c->in[0]), gd = dims_of(&c->in[1]), wd = dims_of(&c->out[0]);
    if (oari_kt_numel(&c->out[0]) == 0) return 0;
    if (xd.n == 0 || gd.h * gd.w == 0) { /* no products: zeros */
        fill_bf16(c->out[0].data, wd.n, wd.c, wd.h * wd.w, NULL);
        return 0;
    }
    oari_dnnl_conv2d_args args = {
        .dtype = c->out[0].dtype, .pass = OARI_DNNL_BACKWARD_WEIGHTS, .n = xd.n, .c = xd.c, .h = xd.h,
        .w = xd.w, .o = gd.c, .kh = wd.h, .kw = wd.w, .oh = gd.h, .ow = gd.w, .sh = a[4], .sw = a[5],
        .ph = a[6], .pw = a[7], .dh = a[8], .dw = a[9], .groups = a[10], .weight = c->out[0].data};
    return dnnl_conv_call(c, &args, &args.x, &args.y);
}
#endif

#ifdef OAR_WITH_DNNL
/* f32 conv2d: oneDNN's f32 convolution (blocked layouts, its JIT kernels)
 * for the shapes where it measured faster than oar's own kernels: one
 * image, a kernel of 7x7 or more at stride 2 or more (ResNet's stem); and,
 * without AVX-512, the channel-vector direct kernel's shapes, where oneDNN
 * took 0.2-0.6 of the time of Winograd or im2col + gemm (2 threads, Zen 1:
 * 60 against 147 us for 16 -> 32 3x3 on 14 x 14 at batch 1, 1.7 against
 * 6.4 ms at batch 64; 6 -> 16 5x5 on 14 x 14, 8 -> 16 and 32 -> 32 3x3
 * likewise). A failed oneDNN call falls back to oar's kernels. */
static int k_conv2d_f32_route(void *ctx, const oar_kernel_call *c) {
    const int64_t *a = c->iattr;
    dims4 xd = dims_of(&c->in[0]), wd = dims_of(&c->in[1]), yd = dims_of(&c->out[0]);
    const int64_t groups = a[6] > 0 ? a[6] : 1;
    const bool stem = xd.n == 1 && wd.h * wd.w >= 49 && a[0] >= 2 && a[1] >= 2 && a[4] == 1 && a[5] == 1;
    const bool narrow =
        !zmm_registers() && channel_vector_shape(a, wd.n / groups, xd.c / groups * wd.h * wd.w, yd.w);
    if (xd.c > 0 && oari_kt_numel(&c->out[0]) > 0 && (stem || narrow)) {
        if (k_conv2d_dnnl(ctx, c) == 0) return 0;
        oar_clear_error();
    }
    return k_conv2d_f32(ctx, c);
}
#define K_CONV2D_F32 k_conv2d_f32_route
#else
#define K_CONV2D_F32 k_conv2d_f32
#endif

/* ---- conv2d_prepacked (defs/conv.def): conv2d on a weight packed once -------------
 * The predictor's prepack_conv pass packs a constant f32 weight in the
 * layout oneDNN's convolution asked for (oari_cpu_conv2d_prepack_layout),
 * so the kernel hands it over as it is, with relu as oneDNN's post-op; or
 * (order 2) as Winograd F(4x4)'s filter transform, which the kernel starts
 * from, with relu in its output transform.
 * Without oneDNN, or when oneDNN fails other than for memory (a batch size
 * whose primitive wants another layout is reordered by oneDNN instead, and
 * still runs there), the weight is unpacked into scratch and conv2d's own
 * kernel runs it. */
static int conv2d_unpacked(void *ctx, const oar_kernel_call *c) {
    const int64_t *a = c->iattr, O = a[6], C = a[7], kh = a[8], kw = a[9];
    void *own;
    size_t own_n, wn = (size_t)(O * C * kh * kw) * sizeof(float);
    const float *wp = contig(&c->in[1], &own, &own_n);
    float *w = wp ? scratch_alloc(wn) : NULL;
    if (!w) {
        scratch_free(own, own_n);
        return oari_fail_status();
    }
    oari_conv2d_unpack(wp, w, a);
    scratch_free(own, own_n);
    oar_ktensor in[3] = {c->in[0], {.data = w, .buffer = w, .dtype = OAR_F32, .ndim = 4, .shape = {O, C, kh, kw},
                                    .strides = {C * kh * kw, kh * kw, kw, 1}}, c->in[2]};
    const int64_t attrs[7] = {a[0], a[1], a[2], a[3], a[4], a[5], 1};
    oar_kernel_call plain = *c;
    plain.in = in, plain.iattr = attrs, plain.n_iattr = 7;
    int st = k_conv2d_f32(ctx, &plain);
    scratch_free(w, wn);
    float *y = c->out[0].data;
    const int64_t n = oari_kt_numel(&c->out[0]);
    if (!st && a[13])
#pragma omp parallel for if (n > 65536)
        for (int64_t i = 0; i < n; i++) y[i] = y[i] < 0 ? 0 : y[i];
    return st;
}

/* Order 2: Winograd F(4x4) from the filter transform computed once. */
static int conv2d_wino_prepacked(const oar_kernel_call *c) {
    const int64_t *a = c->iattr;
    dims4 xd = dims_of(&c->in[0]), yd = dims_of(&c->out[0]);
    void *xo, *uo;
    size_t xn, un;
    const float *x = contig(&c->in[0], &xo, &xn);
    const float *U = x ? contig(&c->in[1], &uo, &un) : NULL;
    if (!U) {
        scratch_free(xo, xn);
        return oari_fail_status();
    }
    int st = oari_cpu_conv2d_wino_packed(x, U, &c->in[2], c->out[0].data, xd.n, xd.c, xd.h, xd.w, yd.c, yd.h,
                                         yd.w, a[2], a[3], a[13] != 0);
    scratch_free(xo, xn);
    scratch_free(uo, un);
    return st;
}

static int k_conv2d_prepacked(void *ctx, const oar_kernel_call *c) {
    if (oari_kt_numel(&c->out[0]) == 0) return 0;
    if (c->iattr[10] == 2) return conv2d_wino_prepacked(c);
#ifdef OAR_WITH_DNNL
    const int64_t *a = c->iattr;
    dims4 xd = dims_of(&c->in[0]), yd = dims_of(&c->out[0]);
    oari_dnnl_conv2d_args args = {
        .dtype = OAR_F32, .pass = OARI_DNNL_FORWARD, .relu = a[13] != 0, .packed = (int)a[10] + 1, .n = xd.n,
        .c = xd.c, .h = xd.h, .w = xd.w, .o = a[6], .kh = a[8], .kw = a[9], .oh = yd.h, .ow = yd.w, .sh = a[0],
        .sw = a[1], .ph = a[2], .pw = a[3], .dh = a[4], .dw = a[5], .groups = 1, .ib = a[11], .ob = a[12],
        .y = c->out[0].data};
    void *own = NULL;
    size_t own_n = 0;
    if (c->in[2].dtype >= 0 && !(args.bias = contig(&c->in[2], &own, &own_n))) return oari_fail_status();
    int st = dnnl_conv_call(c, &args, &args.x, &args.weight);
    scratch_free(own, own_n);
    if (st == 0 || st == OAR_ERR_NOMEM) return st;
    oar_clear_error();
#endif
    return conv2d_unpacked(ctx, c);
}
const oari_cpu_kernels oari_cpu_k_conv2d_prepacked = {[OAR_F32] = k_conv2d_prepacked};

int oari_cpu_conv2d_prepack_layout(int64_t *a, int64_t n, int64_t h, int64_t w, bool bias) {
    const int64_t oh = (h + 2 * a[2] - a[4] * (a[8] - 1) - 1) / a[0] + 1;
    const int64_t ow = (w + 2 * a[3] - a[5] * (a[9] - 1) - 1) / a[1] + 1;
    /* conv2d's Winograd F(4x4) does a quarter of the multiplications: at
     * batch 1 it beat oneDNN's direct convolution on the packed weight for
     * ResNet-18's 64 x 56 x 56 convs (1.15-1.4 ms against 1.6-2.0, loaded
     * machine) and tied at 128 x 28 x 28; those keep it, on the filter
     * transform computed once (order 2) */
    if (oh > 0 && ow > 0 && oari_cpu_wino_ok(n, a[7], a[6], oh, ow, a[8], a[9], a[0], a[1], a[4], a[5], 1) == 4) {
        a[10] = 2, a[11] = 1, a[12] = 1;
        return 1;
    }
#ifdef OAR_WITH_DNNL
    /* a 1x1 conv's own path is a strided copy of x (or none) and one gemm
     * that repacks only the weight: oneDNN's reorders of x and y cost more
     * unless the weight outweighs x (ResNet-18's 64 -> 128 and 128 -> 256
     * shortcuts at batch 1 ran faster as conv2d; 256 -> 512 on 14 x 14, a
     * 0.5 MB weight against 0.2 MB of x, as conv2d_prepacked) */
    if (a[8] == 1 && a[9] == 1 && a[6] * a[7] < n * a[7] * h * w) return 0;
    oari_dnnl_conv2d_args args = {
        .dtype = OAR_F32, .pass = OARI_DNNL_FORWARD, .relu = a[13] != 0, .n = n, .c = a[7], .h = h, .w = w,
        .o = a[6], .kh = a[8], .kw = a[9], .oh = oh, .ow = ow, .sh = a[0], .sw = a[1], .ph = a[2], .pw = a[3],
        .dh = a[4], .dw = a[5], .groups = 1, .bias = bias ? (const void *)a : NULL};
    int order;
    if (oari_dnnl_conv2d_layout(&args, &order, &a[11], &a[12])) {
        oar_clear_error();
        return 0;
    }
    a[10] = order;
    return 1;
#else
    (void)bias;
    return 0;
#endif
}

void oari_cpu_conv2d_pack(const float *w, float *wp, const int64_t *a) {
    if (a[10] == 2) oari_cpu_wino_filter(w, a[7], a[6], wp);
    else oari_conv2d_pack(w, wp, a);
}

#define TABLE(name)                                                                                \
    const oari_cpu_kernels oari_cpu_k_##name = {                                                   \
        [OAR_F32] = k_##name##_f32, [OAR_F64] = k_##name##_f64}
const oari_cpu_kernels oari_cpu_k_conv2d = {
    [OAR_F32] = K_CONV2D_F32, [OAR_F64] = k_conv2d_f64,
#ifdef OAR_WITH_DNNL
    [OAR_BF16] = k_conv2d_dnnl,
#endif
};
const oari_cpu_kernels oari_cpu_k_conv_transpose2d = {
    [OAR_F32] = k_conv_transpose2d_f32, [OAR_F64] = k_conv_transpose2d_f64,
#ifdef OAR_WITH_DNNL
    [OAR_BF16] = k_conv_transpose2d_dnnl,
#endif
};
const oari_cpu_kernels oari_cpu_k_conv2d_weight_grad = {
    [OAR_F32] = k_conv2d_weight_grad_f32, [OAR_F64] = k_conv2d_weight_grad_f64,
#ifdef OAR_WITH_DNNL
    [OAR_BF16] = k_conv2d_weight_grad_dnnl,
#endif
};
TABLE(max_pool2d);
TABLE(max_pool2d_values);
TABLE(max_pool2d_backward);
TABLE(avg_pool2d);
TABLE(avg_pool2d_backward);
TABLE(adaptive_avg_pool2d);
TABLE(adaptive_avg_pool2d_backward);
TABLE(interpolate);
TABLE(interpolate_backward);

#else /* ---- the template: CONV_T, CONV_SFX, CONV_GEMM ------------------------------- */

#define CAT2(a, b) a##_##b
#define CAT(a, b) CAT2(a, b)
#define FN(name) CAT(name, CONV_SFX)
typedef CONV_T FN(real);
#define T FN(real)

/* im2col for stride 1, no padding, dilation 1 (LeNet's convs): every row
 * is a plain window copy; short rows are copied by a loop (a memcpy call
 * per row of a few elements cost more than the copy). */
/* (no-tree-loop-distribute-patterns: gcc would turn each short row copy
 * back into a memcpy call.) */
OARI_SIMD_CLONES __attribute__((optimize("no-tree-loop-distribute-patterns")))
static void FN(im2col_s1)(const T *restrict x, int64_t c, const geom *g, int64_t oy0,
                          int64_t oy1, T *restrict col, int64_t ld) {
    const int64_t ow = g->ow, iw = g->iw, ih = g->ih, kh = g->kh, kw = g->kw;
    for (int64_t ci = 0; ci < c; ci++)
        for (int64_t ki = 0; ki < kh; ki++)
            for (int64_t kj = 0; kj < kw; kj++) {
                T *restrict row = col + ((ci * kh + ki) * kw + kj) * ld - oy0 * ow;
                const T *restrict src = x + (ci * ih + ki) * iw + kj;
                for (int64_t oy = oy0; oy < oy1; oy++) {
#pragma omp simd
                    for (int64_t ox = 0; ox < ow; ox++)
                        row[oy * ow + ox] = src[oy * iw + ox];
                }
            }
}

/* col [kh*kw*c rows ordered (c, ki, kj), (oy1 - oy0) * ow] <- input planes
 * x [c, ih, iw]: output rows oy0 .. oy1 - 1 of every kernel tap. Stride 2
 * (ResNet's stem and downsampling) has its own gather loop, which
 * vectorizes with a constant stride. */
OARI_SIMD_CLONES static void FN(im2col)(const T *x, int64_t c, const geom *g, int64_t oy0,
                                        int64_t oy1, T *col, int64_t ld) {
    if (g->sh == 1 && g->sw == 1 && g->ph == 0 && g->pw == 0 && g->dh == 1 && g->dw == 1 &&
        g->oh + g->kh - 1 == g->ih && g->ow + g->kw - 1 == g->iw) {
        FN(im2col_s1)(x, c, g, oy0, oy1, col, ld);
        return;
    }
    for (int64_t ci = 0; ci < c; ci++)
        for (int64_t ki = 0; ki < g->kh; ki++)
            for (int64_t kj = 0; kj < g->kw; kj++) {
                T *row = col + ((ci * g->kh + ki) * g->kw + kj) * ld;
                const T *plane = x + ci * g->ih * g->iw;
                const int64_t off = kj * g->dw - g->pw; /* ix = ox * sw + off */
                int64_t x0, x1;
                valid_range(off, g->sw, g->iw, g->ow, &x0, &x1);
                for (int64_t oy = oy0; oy < oy1; oy++) {
                    int64_t iy = oy * g->sh - g->ph + ki * g->dh;
                    T *r = row + (oy - oy0) * g->ow;
                    if (iy < 0 || iy >= g->ih || x0 >= x1) {
                        memset(r, 0, (size_t)g->ow * sizeof(T));
                        continue;
                    }
                    const T *src = plane + iy * g->iw + off;
                    for (int64_t ox = 0; ox < x0; ox++)
                        r[ox] = 0;
                    if (g->sw == 1) {
                        memcpy(r + x0, src + x0, (size_t)(x1 - x0) * sizeof(T));
                    } else if (g->sw == 2) {
#pragma omp simd
                        for (int64_t ox = x0; ox < x1; ox++)
                            r[ox] = src[2 * ox];
                    } else {
                        for (int64_t ox = x0; ox < x1; ox++)
                            r[ox] = src[ox * g->sw];
                    }
                    for (int64_t ox = x1; ox < g->ow; ox++)
                        r[ox] = 0;
                }
            }
}

/* x [c, ih, iw] += col (the adjoint of im2col; col's rows ld apart). */
OARI_SIMD_CLONES static void FN(col2im)(const T *col, int64_t c, const geom *g, T *x, int64_t ld) {
    for (int64_t ci = 0; ci < c; ci++)
        for (int64_t ki = 0; ki < g->kh; ki++)
            for (int64_t kj = 0; kj < g->kw; kj++) {
                const T *row = col + ((ci * g->kh + ki) * g->kw + kj) * ld;
                T *plane = x + ci * g->ih * g->iw;
                const int64_t off = kj * g->dw - g->pw;
                int64_t x0, x1;
                valid_range(off, g->sw, g->iw, g->ow, &x0, &x1);
                for (int64_t oy = 0; oy < g->oh; oy++) {
                    int64_t iy = oy * g->sh - g->ph + ki * g->dh;
                    if (iy < 0 || iy >= g->ih) continue;
                    const T *r = row + oy * g->ow;
                    T *dst = plane + iy * g->iw + off;
                    if (g->sw == 1) {
#pragma omp simd
                        for (int64_t ox = x0; ox < x1; ox++)
                            dst[ox] += r[ox];
                    } else {
                        for (int64_t ox = x0; ox < x1; ox++)
                            dst[ox * g->sw] += r[ox];
                    }
                }
            }
}

/* out [no rows ld apart][cols] += bias[o0 + row] (nothing without a bias). */
OARI_SIMD_CLONES static void FN(add_bias)(T *out, const oar_ktensor *b, int64_t o0, int64_t no,
                                          int64_t cols, int64_t ld) {
    if (b->dtype < 0) return;
    for (int64_t o = 0; o < no; o++) {
        T v = *((const T *)b->data + (o0 + o) * b->strides[0]);
        T *p = out + o * ld;
#pragma omp simd
        for (int64_t i = 0; i < cols; i++)
            p[i] += v;
    }
}

/* Images per gemm of conv2d and conv_transpose2d: small images are taken
 * CONV_CHUNK_ELEMS columns' worth at a time, side by side in one gemm
 * (a gemm per small image costs more in packing and set-up than in
 * arithmetic). From the shapes alone, so results never depend on the
 * number of threads. */
#ifndef CONV_CHUNK_ELEMS
#define CONV_CHUNK_ELEMS ((int64_t)1 << 17)
static int64_t conv_chunk(int64_t n, int64_t rows, int64_t p) {
    int64_t nb = rows * p > 0 ? CONV_CHUNK_ELEMS / (rows * p) : n;
    return nb < 1 ? 1 : nb > n ? n : nb;
}
#endif

/* ---- direct conv2d for few channels (LeNet's second conv) ---------------------
 * Stride 1, dilation 1: the output channels of a group in 64-byte vectors
 * of VL (weights repacked [ob][k][VL], zero past og), a tile of 8 output columns
 * in eight vector accumulators, each input value broadcast against a
 * weight vector; no im2col and no gemm packing, which cost more than the
 * arithmetic when og and K are small. Padding reads a zero-padded copy of
 * the image. Each output sums k = (c, ki, kj) in order. */
typedef T FN(vec) __attribute__((vector_size(64)));
#define VL ((int64_t)(64 / sizeof(T)))
#define DIRECT_TW 8

/* One output row oy of block ob: columns [ox0, ox0 + tw), tw <= 8. xp: the
 * (padded) image [cg, xh, xw]; wp: the block's [K, VL] weights. */
OARI_SIMD_CLONES static void FN(direct_row)(const T *xp, int64_t xw, int64_t xh, const T *wp,
                                            int64_t cg, int64_t kh, int64_t kw, int64_t oy,
                                            int64_t ox0, int64_t tw, T *out, int64_t ldo,
                                            int64_t nvl) {
    FN(vec) a0 = {0}, a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    for (int64_t c = 0; c < cg; c++)
        for (int64_t ki = 0; ki < kh; ki++) {
            const T *xr = xp + (c * xh + (oy + ki)) * xw + ox0;
            const T *wr = wp + ((c * kh + ki) * kw) * VL;
            for (int64_t kj = 0; kj < kw; kj++) {
                FN(vec) wv;
                memcpy(&wv, wr + kj * VL, sizeof wv);
                const T *q = xr + kj;
                if (tw == DIRECT_TW) {
                    a0 += wv * q[0], a1 += wv * q[1], a2 += wv * q[2], a3 += wv * q[3];
                    a4 += wv * q[4], a5 += wv * q[5], a6 += wv * q[6], a7 += wv * q[7];
                } else { /* a short last tile: never reads past column ox0 + tw */
                    a0 += wv * q[0];
                    if (tw > 1) a1 += wv * q[1];
                    if (tw > 2) a2 += wv * q[2];
                    if (tw > 3) a3 += wv * q[3];
                    if (tw > 4) a4 += wv * q[4];
                    if (tw > 5) a5 += wv * q[5];
                    if (tw > 6) a6 += wv * q[6];
                }
            }
        }
    /* out[l * ldo + t]: channel l of the block, column ox0 + t */
    FN(vec) acc[DIRECT_TW] = {a0, a1, a2, a3, a4, a5, a6, a7};
    for (int64_t l = 0; l < nvl; l++)
        for (int64_t t = 0; t < tw; t++)
            out[l * ldo + t] = acc[t][l];
}

/* The same for a plane whose width is a multiple of 8, vectorised the other
 * way: 8 output columns in a vector, 8 output channels in eight vectors,
 * each weight broadcast against the input row; the accumulators are the
 * output rows as they are stored (no transposition). wp: [K, 8]. */
typedef T FN(vec8) __attribute__((vector_size(8 * sizeof(T))));
OARI_SIMD_CLONES static void FN(direct_cols8)(const T *xp, int64_t xw, int64_t xh, const T *wp,
                                              int64_t cg, int64_t kh, int64_t kw, int64_t oy,
                                              int64_t ox0, T *out, int64_t ldo, int64_t nvl) {
    FN(vec8) a0 = {0}, a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    for (int64_t c = 0; c < cg; c++)
        for (int64_t ki = 0; ki < kh; ki++) {
            const T *xr = xp + (c * xh + (oy + ki)) * xw + ox0;
            const T *wr = wp + ((c * kh + ki) * kw) * 8;
            for (int64_t kj = 0; kj < kw; kj++) {
                FN(vec8) xv;
                memcpy(&xv, xr + kj, sizeof xv);
                const T *wk = wr + kj * 8;
                a0 += wk[0] * xv, a1 += wk[1] * xv, a2 += wk[2] * xv, a3 += wk[3] * xv;
                a4 += wk[4] * xv, a5 += wk[5] * xv, a6 += wk[6] * xv, a7 += wk[7] * xv;
            }
        }
    FN(vec8) acc[8] = {a0, a1, a2, a3, a4, a5, a6, a7};
    for (int64_t j = 0; j < nvl; j++)
        memcpy(out + j * ldo, &acc[j], sizeof acc[j]);
}

/* direct_cols8 for two output rows oy, oy + 1 at once: 16 accumulators
 * (8 in flight on two FMA pipes of latency 4 left no slack), each weight
 * broadcast serving both rows. Every output sums the same terms in the same
 * order as direct_cols8, so the results are the same bits. */
OARI_SIMD_CLONES static void FN(direct_cols8x2)(const T *xp, int64_t xw, int64_t xh, const T *wp,
                                                int64_t cg, int64_t kh, int64_t kw, int64_t oy,
                                                int64_t ox0, T *out, int64_t ldo, int64_t ow,
                                                int64_t nvl) {
    FN(vec8) a0 = {0}, a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    FN(vec8) b0 = a0, b1 = a0, b2 = a0, b3 = a0, b4 = a0, b5 = a0, b6 = a0, b7 = a0;
    for (int64_t c = 0; c < cg; c++)
        for (int64_t ki = 0; ki < kh; ki++) {
            const T *xr = xp + (c * xh + (oy + ki)) * xw + ox0;
            const T *wr = wp + ((c * kh + ki) * kw) * 8;
            for (int64_t kj = 0; kj < kw; kj++) {
                FN(vec8) xv, xu;
                memcpy(&xv, xr + kj, sizeof xv);
                memcpy(&xu, xr + xw + kj, sizeof xu);
                const T *wk = wr + kj * 8;
                T w0 = wk[0], w1 = wk[1], w2 = wk[2], w3 = wk[3];
                T w4 = wk[4], w5 = wk[5], w6 = wk[6], w7 = wk[7];
                a0 += w0 * xv, a1 += w1 * xv, a2 += w2 * xv, a3 += w3 * xv;
                a4 += w4 * xv, a5 += w5 * xv, a6 += w6 * xv, a7 += w7 * xv;
                b0 += w0 * xu, b1 += w1 * xu, b2 += w2 * xu, b3 += w3 * xu;
                b4 += w4 * xu, b5 += w5 * xu, b6 += w6 * xu, b7 += w7 * xu;
            }
        }
    /* row oy at out, row oy + 1 at out + ow */
    FN(vec8) acc[8] = {a0, a1, a2, a3, a4, a5, a6, a7};
    FN(vec8) acc2[8] = {b0, b1, b2, b3, b4, b5, b6, b7};
    for (int64_t j = 0; j < nvl; j++) {
        memcpy(out + j * ldo, &acc[j], sizeof acc[j]);
        memcpy(out + j * ldo + ow, &acc2[j], sizeof acc2[j]);
    }
}

/* When the direct kernels beat im2col + gemm (one thread, CPU time, us):
 * LeNet's second conv (K 150, og 16, width 8) 215-250 against 400-430;
 * its first without padding (K 25, og 6, width 24) 185 against 255; with
 * padding (width 28: the channel-vector kernel, mostly empty vectors) 515
 * against 400-430, so short K stays with gemm unless the width is a
 * multiple of 8, and many channels (gemm at full speed) too. (Measured with
 * AVX-512; with AVX2 the channel-vector form spills: see zmm_registers.) */
static bool FN(direct_ok)(const geom *g, int64_t og, int64_t K) {
    if (g->ow % 8 != 0) { /* the channel-vector form: only where its vectors are registers */
        const int64_t a[6] = {g->sh, g->sw, g->ph, g->pw, g->dh, g->dw};
        return channel_vector_shape(a, og, K, g->ow) && zmm_registers();
    }
    return g->sh == 1 && g->sw == 1 && g->dh == 1 && g->dw == 1 && og <= 32 && K <= 1024 && g->ow > 0;
}

static int FN(conv2d_direct)(const T *x, const T *w, const oar_ktensor *bias, T *y, dims4 xd,
                             dims4 wd, const geom *g, int64_t groups) {
    const int64_t cg = xd.c / groups, og = wd.n / groups, K = cg * g->kh * g->kw;
    /* channel blocks of BL: 8 for the column-vector kernel (width a multiple
     * of 8), VL for the channel-vector one */
    const bool cols8 = g->ow % 8 == 0;
    const int64_t BL = cols8 ? 8 : VL;
    const int64_t P = g->oh * g->ow, nob = (og + BL - 1) / BL;
    const int64_t phh = g->ih + 2 * g->ph, phw = g->iw + 2 * g->pw;
    const bool pad = g->ph || g->pw;
    /* weights [groups][nob][K][VL] */
    const size_t wpn = (size_t)(groups * nob * K * BL);
    T *wp = scratch_alloc(wpn * sizeof(T));
    if (!wp) return oari_fail_status();
    for (int64_t gi = 0; gi < groups; gi++)
        for (int64_t ob = 0; ob < nob; ob++)
            for (int64_t k = 0; k < K; k++)
                for (int64_t l = 0; l < BL; l++) {
                    int64_t o = ob * BL + l;
                    wp[((gi * nob + ob) * K + k) * BL + l] = o < og ? w[(gi * og + o) * K + k] : 0;
                }
    const bool par = xd.n > 1 && (double)xd.n * (double)K * (double)P * (double)wd.n > 5e5;
    const int nt = par ? max_threads() : 1;
    /* per thread: a padded image of one group, and a block's output rows */
    const size_t padn = pad ? (size_t)(cg * phh * phw) : 0, per = padn + (size_t)(VL * g->ow);
    T *buf = scratch_alloc(per * (size_t)nt * sizeof(T));
    if (!buf) {
        scratch_free(wp, wpn * sizeof(T));
        return oari_fail_status();
    }
#pragma omp parallel for schedule(static) if (par)
    for (int64_t n = 0; n < xd.n; n++) {
        T *xb = buf + (size_t)(par ? thread_id() : 0) * per, *ob_rows = xb + padn;
        for (int64_t gi = 0; gi < groups; gi++) {
            const T *xg = x + (n * xd.c + gi * cg) * g->ih * g->iw, *xp = xg;
            if (pad) {
                memset(xb, 0, padn * sizeof(T));
                for (int64_t c = 0; c < cg; c++)
                    for (int64_t iy = 0; iy < g->ih; iy++)
                        memcpy(xb + (c * phh + iy + g->ph) * phw + g->pw,
                               xg + (c * g->ih + iy) * g->iw, (size_t)g->iw * sizeof(T));
                xp = xb;
            }
            for (int64_t ob = 0; ob < nob; ob++) {
                const int64_t nvl = og - ob * BL < BL ? og - ob * BL : BL;
                const T *wb = wp + (gi * nob + ob) * K * BL;
                T *yb = y + (n * wd.n + gi * og + ob * BL) * P;
                if (cols8) {
                    int64_t oy = 0;
                    for (; oy + 2 <= g->oh; oy += 2)
                        for (int64_t ox0 = 0; ox0 < g->ow; ox0 += 8)
                            FN(direct_cols8x2)(xp, phw, phh, wb, cg, g->kh, g->kw, oy, ox0,
                                               yb + oy * g->ow + ox0, P, g->ow, nvl);
                    for (; oy < g->oh; oy++)
                        for (int64_t ox0 = 0; ox0 < g->ow; ox0 += 8)
                            FN(direct_cols8)(xp, phw, phh, wb, cg, g->kh, g->kw, oy, ox0,
                                             yb + oy * g->ow + ox0, P, nvl);
                    continue;
                }
                for (int64_t oy = 0; oy < g->oh; oy++) {
                    for (int64_t ox0 = 0; ox0 < g->ow; ox0 += DIRECT_TW) {
                        int64_t tw = g->ow - ox0 < DIRECT_TW ? g->ow - ox0 : DIRECT_TW;
                        FN(direct_row)(xp, phw, phh, wb, cg, g->kh, g->kw, oy, ox0, tw,
                                       ob_rows + ox0, g->ow, nvl);
                    }
                    for (int64_t l = 0; l < nvl; l++)
                        memcpy(yb + l * P + oy * g->ow, ob_rows + l * g->ow,
                               (size_t)g->ow * sizeof(T));
                }
            }
        }
        FN(add_bias)(y + n * wd.n * P, bias, 0, wd.n, P, P);
    }
    scratch_free(buf, per * (size_t)nt * sizeof(T));
    scratch_free(wp, wpn * sizeof(T));
    return 0;
}
#undef VL

/* ---- conv2d on images too large to batch: tiles of output rows ----------------
 * Each (image, group) is cut into tiles of whole output rows, about
 * CONV_TILE_BYTES of im2col columns each (so a tile's col stays in L2 from
 * im2col to gemm), and the group's output channels into blocks (see
 * below); one gemm per (tile, block) writes y in place, and the bias is
 * added to the tile while it is in cache. The tiles and blocks follow from
 * the shapes alone, so the gemm calls, and the results, are the same for
 * every thread count. Many tiles: threads take whole tiles (im2col into
 * their own buffer, then every block). Few (small planes, or batch 1 deep
 * in the network): one (image, group) at a time, its im2col split over
 * input channels and its (tile, block) gemms over the threads. 1x1 stride-1
 * convs read x in place (no im2col). */
#ifndef CONV_TILE_BYTES
#define CONV_TILE_BYTES ((int64_t)512 << 10)
#define CONV_TILE_MIN_COLS 192
/* (each block packs the tile's col again: ResNet's 512 x 4608 weights on
 * 49 columns in 4 blocks cost 10% more than in 2, on one thread) */
#define CONV_UNITS 2
#define CONV_OB_MIN 64
#endif
static int FN(conv2d_tiled)(const T *x, const T *w, const oar_ktensor *bias, T *y, dims4 xd,
                            dims4 wd, const geom *g, int64_t groups, bool direct) {
    const int64_t cg = xd.c / groups, og = wd.n / groups, K = cg * g->kh * g->kw;
    const int64_t P = g->oh * g->ow, X = g->ih * g->iw, kk = g->kh * g->kw;
    /* rows per tile, tiles per plane; blocks of output channels */
    int64_t R = CONV_TILE_BYTES / (int64_t)sizeof(T) / (K * g->ow);
    if (R * g->ow < CONV_TILE_MIN_COLS) R = (CONV_TILE_MIN_COLS + g->ow - 1) / g->ow;
    if (R < 1) R = 1;
    if (R > g->oh) R = g->oh;
    const int64_t ntile = (g->oh + R - 1) / R, units = xd.n * groups * ntile;
    R = (g->oh + ntile - 1) / ntile; /* tiles of equal height (the last may be shorter) */
    /* fewer than CONV_UNITS tiles in all: the channels in as many blocks
     * (of CONV_OB_MIN rows at least, a multiple of 16) as make up the number */
    int64_t nob = units < CONV_UNITS ? (CONV_UNITS + units - 1) / units : 1;
    if (nob > og / CONV_OB_MIN) nob = og / CONV_OB_MIN;
    if (nob < 1) nob = 1;
    int64_t OB = (og + nob - 1) / nob;
    if (nob > 1) OB = (OB + 15) / 16 * 16;
    nob = (og + OB - 1) / OB;
    const int nt = max_threads();
    const bool par = nt > 1 && (double)xd.n * (double)K * (double)P * (double)wd.n > 5e5;
    const bool wide = par && units < 2 * nt; /* threads inside one (image, group) */
    const size_t per = direct ? 0 : wide ? (size_t)(K * P) : (size_t)(K * R * g->ow);
    const size_t coln = per * (size_t)(wide || !par ? 1 : nt);
    T *cols = coln ? scratch_alloc(coln * sizeof(T)) : NULL;
    if (coln && !cols) return oari_fail_status();
    const bool has_bias = bias->dtype >= 0;
    if (!wide) {
        OARI_PARALLEL_FOR_DYNAMIC_IF(par,
            for (int64_t u = 0; u < units; u++) {
                const int64_t n = u / (groups * ntile), gi = u / ntile % groups, t = u % ntile;
                const int64_t oy0 = t * R, oy1 = oy0 + R < g->oh ? oy0 + R : g->oh;
                const int64_t pc = (oy1 - oy0) * g->ow;
                const T *xg = x + (n * xd.c + gi * cg) * X, *src = xg + oy0 * g->ow;
                int64_t ld = P;
                if (!direct) {
                    T *col = cols + (size_t)(par ? thread_id() : 0) * per;
                    FN(im2col)(xg, cg, g, oy0, oy1, col, pc);
                    src = col, ld = pc;
                }
                T *yt = y + (n * wd.n + gi * og) * P + oy0 * g->ow;
                for (int64_t ob = 0; ob < nob; ob++) {
                    const int64_t o0 = ob * OB, no = og - o0 < OB ? og - o0 : OB;
                    CONV_GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)no, (int)pc, (int)K,
                              1, w + (gi * og + o0) * K, (int)K, src, (int)ld, 0, yt + o0 * P,
                              (int)P);
                    if (has_bias) FN(add_bias)(yt + o0 * P, bias, gi * og + o0, no, pc, P);
                }
            });
    } else {
        for (int64_t ng = 0; ng < xd.n * groups; ng++) {
            const int64_t n = ng / groups, gi = ng % groups;
            const T *xg = x + (n * xd.c + gi * cg) * X, *src = direct ? xg : cols;
#pragma omp parallel
            {
                if (!direct) {
#pragma omp for schedule(static)
                    for (int64_t ci = 0; ci < cg; ci++)
                        FN(im2col)(xg + ci * X, 1, g, 0, g->oh, cols + ci * kk * P, P);
                }
#pragma omp for schedule(dynamic)
                for (int64_t tb = 0; tb < ntile * nob; tb++) {
                    const int64_t t = tb / nob, ob = tb % nob;
                    const int64_t oy0 = t * R, oy1 = oy0 + R < g->oh ? oy0 + R : g->oh;
                    const int64_t pc = (oy1 - oy0) * g->ow;
                    const int64_t o0 = ob * OB, no = og - o0 < OB ? og - o0 : OB;
                    T *yt = y + (n * wd.n + gi * og + o0) * P + oy0 * g->ow;
                    CONV_GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)no, (int)pc,
                              (int)K, 1, w + (gi * og + o0) * K, (int)K, src + oy0 * g->ow,
                              (int)P, 0, yt, (int)P);
                    if (has_bias) FN(add_bias)(yt, bias, gi * og + o0, no, pc, P);
                }
            }
        }
    }
    scratch_free(cols, coln * sizeof(T));
    return 0;
}

/* conv2d: in x [N, C, H, W], w [O, C/g, kh, kw], bias? [O]; out [N, O, OH, OW].
 * nb images at a time: col [K, nb*P] (im2col side by side), one gemm per
 * group into yb [og, nb*P], then copied to each image's planes; nb = 1
 * writes y directly. */
static int FN(k_conv2d)(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    const int64_t *a = c->iattr;
    dims4 xd = dims_of(&c->in[0]), wd = dims_of(&c->in[1]), yd = dims_of(&c->out[0]);
    const int64_t groups = a[6], cg = xd.c / groups, og = wd.n / groups;
    geom g = {xd.h, xd.w, wd.h, wd.w, yd.h, yd.w, a[0], a[1], a[2], a[3], a[4], a[5]};
    const int64_t K = cg * g.kh * g.kw, P = g.oh * g.ow;
    T *y = c->out[0].data;
    if (xd.n == 0) return 0;
    void *xo, *wo;
    size_t xn, wn;
    const T *x = contig(&c->in[0], &xo, &xn);
    const T *w = x ? contig(&c->in[1], &wo, &wn) : NULL;
    if (!w) {
        scratch_free(xo, xn);
        return oari_fail_status();
    }
    if (K == 0) { /* no input channels (or an empty kernel): y is the bias */
        if (wd.n * P > 0) {
            memset(y, 0, (size_t)(xd.n * wd.n * P) * sizeof(T));
            for (int64_t n = 0; n < xd.n; n++) FN(add_bias)(y + n * wd.n * P, &c->in[2], 0, wd.n, P, P);
        }
        scratch_free(xo, xn);
        scratch_free(wo, wn);
        return 0;
    }
    if (FN(direct_ok)(&g, og, K)) {
        int st = FN(conv2d_direct)(x, w, &c->in[2], y, xd, wd, &g, groups);
        scratch_free(xo, xn);
        scratch_free(wo, wn);
        return st;
    }
#ifdef CONV_WINO
    const int wm = oari_cpu_wino_ok(xd.n, xd.c, wd.n, g.oh, g.ow, g.kh, g.kw, g.sh, g.sw, g.dh,
                                    g.dw, groups);
    if (wm) {
        int st = oari_cpu_conv2d_wino(x, w, &c->in[2], y, xd.n, xd.c, g.ih, g.iw, wd.n, g.oh,
                                      g.ow, g.ph, g.pw, wm);
        scratch_free(xo, xn);
        scratch_free(wo, wn);
        return st;
    }
#endif
    const bool direct = g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.ph == 0 &&
                        g.pw == 0 && g.ih == g.oh && g.iw == g.ow;
    int64_t nb = direct ? 1 : conv_chunk(xd.n, K + og, P);
    /* small planes with many channels (ResNet's last stage, 7x7): at least
     * CONV_TILE_MIN_COLS columns per gemm all the same, so that the weights
     * are packed once for several images (batch 32: 3.8 -> 2.7 ms an image
     * for 512 x 4608 weights on 49 columns, OpenBLAS on one thread) */
    if (!direct && P > 0 && nb * P < CONV_TILE_MIN_COLS) {
        const int64_t m = (CONV_TILE_MIN_COLS + P - 1) / P;
        nb = m < xd.n ? m : xd.n;
    }
    if (nb == 1 && P > 0) {
        int st = FN(conv2d_tiled)(x, w, &c->in[2], y, xd, wd, &g, groups, direct);
        scratch_free(xo, xn);
        scratch_free(wo, wn);
        return st;
    }
    const int64_t nch = (xd.n + nb - 1) / nb;
    const bool par = nch > 1 && (double)xd.n * (double)K * (double)P * (double)wd.n > 5e5;
    const int nt = par ? max_threads() : 1;
    /* per thread: col [K, nb*P] and, for nb > 1, yb [og, nb*P] */
    const size_t per = direct ? 0 : (size_t)((K + (nb > 1 ? og : 0)) * nb * P);
    size_t coln = per * (size_t)nt;
    T *cols = coln ? scratch_alloc(coln * sizeof(T)) : NULL;
    int st = coln && !cols ? OAR_ERR_NOMEM : 0;
    if (!st) {
        OARI_PARALLEL_FOR_DYNAMIC_IF(par,
            for (int64_t ch = 0; ch < nch; ch++) {
                T *col = cols ? cols + (size_t)(par ? thread_id() : 0) * per : NULL;
                T *yb = col ? col + K * nb * P : NULL;
                const int64_t n0 = ch * nb, m = xd.n - n0 < nb ? xd.n - n0 : nb, ld = m * P;
                for (int64_t gi = 0; gi < groups; gi++) {
                    const T *src = x + (n0 * xd.c + gi * cg) * g.ih * g.iw;
                    if (!direct) {
                        for (int64_t i = 0; i < m; i++)
                            FN(im2col)(x + ((n0 + i) * xd.c + gi * cg) * g.ih * g.iw, cg, &g, 0,
                                       g.oh, col + i * P, ld);
                        src = col;
                    }
                    T *dst = m > 1 ? yb : y + (n0 * wd.n + gi * og) * P;
                    const int64_t ldd = m > 1 ? ld : P;
                    CONV_GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)og, (int)ld, (int)K, 1,
                              w + gi * og * K, (int)K, src, (int)ld, 0, dst, (int)ldd);
                    if (m > 1)
                        for (int64_t i = 0; i < m; i++)
                            for (int64_t o = 0; o < og; o++)
                                memcpy(y + ((n0 + i) * wd.n + gi * og + o) * P, yb + o * ld + i * P,
                                       (size_t)P * sizeof(T));
                }
                for (int64_t i = 0; i < m; i++)
                    FN(add_bias)(y + (n0 + i) * wd.n * P, &c->in[2], 0, wd.n, P, P);
            });
    }
    scratch_free(cols, coln * sizeof(T));
    scratch_free(xo, xn);
    scratch_free(wo, wn);
    return st;
}

/* conv_transpose2d: in x [N, C, H, W], w [C, O/g, kh, kw], bias? [O];
 * out [N, O, OH, OW]. The adjoint of conv2d(out-shaped, w). nb images at
 * a time: xt [cg, nb*P] (the images' planes side by side), one gemm per
 * group col [K, nb*P] = w_g^T xt, then col2im per image. */
static int FN(k_conv_transpose2d)(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    const int64_t *a = c->iattr;
    dims4 xd = dims_of(&c->in[0]), wd = dims_of(&c->in[1]), yd = dims_of(&c->out[0]);
    const int64_t groups = a[8], cg = xd.c / groups, og = wd.c;
    /* conv geometry: the conv's input is our output, its output our input */
    geom g = {yd.h, yd.w, wd.h, wd.w, xd.h, xd.w, a[0], a[1], a[2], a[3], a[6], a[7]};
    const int64_t K = og * g.kh * g.kw, P = g.oh * g.ow, Y = g.ih * g.iw;
    T *y = c->out[0].data;
    if (xd.n == 0) return 0;
    void *xo, *wo;
    size_t xn, wn;
    const T *x = contig(&c->in[0], &xo, &xn);
    const T *w = x ? contig(&c->in[1], &wo, &wn) : NULL;
    if (!w) {
        scratch_free(xo, xn);
        return oari_fail_status();
    }
    const int64_t nb = conv_chunk(xd.n, K + cg, P), nch = (xd.n + nb - 1) / nb;
    const bool par = nch > 1 && (double)xd.n * (double)K * (double)P * (double)xd.c > 5e5;
    const int nt = par ? max_threads() : 1;
    /* per thread: col [K, nb*P] and, for nb > 1, xt [cg, nb*P] */
    const size_t per = (size_t)((K + (nb > 1 ? cg : 0)) * nb * P);
    size_t coln = per * (size_t)nt;
    T *cols = scratch_alloc((coln ? coln : 1) * sizeof(T));
    int st = cols ? 0 : oari_fail_status();
    if (!st) {
        OARI_PARALLEL_FOR_DYNAMIC_IF(par,
            for (int64_t ch = 0; ch < nch; ch++) {
                T *col = cols + (size_t)(par ? thread_id() : 0) * per, *xt = col + K * nb * P;
                const int64_t n0 = ch * nb, m = xd.n - n0 < nb ? xd.n - n0 : nb, ld = m * P;
                T *yn = y + n0 * yd.c * Y;
                memset(yn, 0, (size_t)(m * yd.c * Y) * sizeof(T));
                for (int64_t gi = 0; gi < groups; gi++) {
                    if (cg == 0 || K == 0) continue;
                    const T *src = x + (n0 * xd.c + gi * cg) * P;
                    if (m > 1) {
                        for (int64_t ci = 0; ci < cg; ci++)
                            for (int64_t i = 0; i < m; i++)
                                memcpy(xt + ci * ld + i * P, x + ((n0 + i) * xd.c + gi * cg + ci) * P,
                                       (size_t)P * sizeof(T));
                        src = xt;
                    }
                    /* col [og*kh*kw, m*P] = w_g^T [K, cg] x_g [cg, m*P] */
                    CONV_GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, (int)K, (int)ld, (int)cg, 1,
                              w + gi * cg * K, (int)K, src, (int)ld, 0, col, (int)ld);
                    for (int64_t i = 0; i < m; i++)
                        FN(col2im)(col + i * P, og, &g, yn + (i * yd.c + gi * og) * Y, ld);
                }
                for (int64_t i = 0; i < m; i++)
                    FN(add_bias)(yn + i * yd.c * Y, &c->in[2], 0, yd.c, Y, Y);
            });
    }
    scratch_free(cols, (coln ? coln : 1) * sizeof(T));
    scratch_free(xo, xn);
    scratch_free(wo, wn);
    return st;
}

/* conv2d_weight_grad: in x [N, C, H, W], gy [N, O, OH, OW]; out gw [O, C/g, kh, kw].
 * One image at a time: im2col of the image (small enough to stay in cache)
 * and one gemm per group accumulating into gw (beta 1). The images are cut
 * into at most WG_PARTS fixed runs (from the shapes alone, never from the
 * thread count); each run sums its images in order into its own partial,
 * and the partials are added in order, so the result does not depend on
 * the number of threads. */
#ifndef WG_PARTS
#define WG_PARTS 8
#define WG_PART_ELEMS ((int64_t)1 << 21) /* bound on all partials, elements */
#endif
static int FN(k_conv2d_weight_grad)(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    const int64_t *a = c->iattr;
    dims4 xd = dims_of(&c->in[0]), yd = dims_of(&c->in[1]);
    const int64_t groups = a[10], cg = a[1], og = a[0] / groups;
    geom g = {xd.h, xd.w, a[2], a[3], yd.h, yd.w, a[4], a[5], a[6], a[7], a[8], a[9]};
    const int64_t K = cg * g.kh * g.kw, P = g.oh * g.ow, WN = a[0] * K;
    T *gw = c->out[0].data;
    memset(gw, 0, (size_t)WN * sizeof(T));
    if (K == 0 || P == 0 || xd.n == 0) return 0;
    void *xo, *yo;
    size_t xn, yn;
    const T *x = contig(&c->in[0], &xo, &xn);
    const T *gy = x ? contig(&c->in[1], &yo, &yn) : NULL;
    if (!gy) {
        scratch_free(xo, xn);
        return oari_fail_status();
    }
    /* parts: runs of images, each with its own partial (part 0 is gw) */
    int64_t parts = xd.n < WG_PARTS ? xd.n : WG_PARTS;
    if (parts > 1 && (parts - 1) * WN > WG_PART_ELEMS) parts = 1 + WG_PART_ELEMS / WN;
    if (parts < 1) parts = 1;
    const int64_t per = (xd.n + parts - 1) / parts;
    parts = (xd.n + per - 1) / per;
    const bool direct = g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.ph == 0 &&
                        g.pw == 0 && g.ih == g.oh && g.iw == g.ow;
    const bool par = parts > 1 && (double)xd.n * (double)K * (double)P * (double)og > 5e5;
    const int nt = par ? max_threads() : 1;
    size_t coln = direct ? 0 : (size_t)(K * P) * (size_t)nt, partn = (size_t)((parts - 1) * WN);
    T *col = coln ? scratch_alloc(coln * sizeof(T)) : NULL;
    T *part = partn ? scratch_alloc(partn * sizeof(T)) : NULL;
    int st = (coln && !col) || (partn && !part) ? OAR_ERR_NOMEM : 0;
    if (!st) {
        OARI_PARALLEL_FOR_DYNAMIC_IF(par,
            for (int64_t r = 0; r < parts; r++) {
                T *cb = col ? col + (size_t)(par ? thread_id() : 0) * (size_t)(K * P) : NULL;
                T *acc = r == 0 ? gw : part + (size_t)((r - 1) * WN);
                const int64_t n1 = (r + 1) * per < xd.n ? (r + 1) * per : xd.n;
                for (int64_t n = r * per; n < n1; n++)
                    for (int64_t gi = 0; gi < groups; gi++) {
                        const T *xg = x + (n * xd.c + gi * cg) * g.ih * g.iw, *src = xg;
                        if (!direct) {
                            FN(im2col)(xg, cg, &g, 0, g.oh, cb, P);
                            src = cb;
                        }
                        /* gw_g [og, K] (+)= gy_n,g [og, P] x col^T [P, K] */
                        CONV_GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, (int)og, (int)K, (int)P, 1,
                                  gy + (n * yd.c + gi * og) * P, (int)P, src, (int)P,
                                  n == r * per ? 0 : 1, acc + gi * og * K, (int)K);
                    }
            });
        for (int64_t r = 1; r < parts; r++) {
            const T *pr = part + (size_t)((r - 1) * WN);
#pragma omp simd
            for (int64_t i = 0; i < WN; i++)
                gw[i] += pr[i];
        }
    }
    scratch_free(part, partn * sizeof(T));
    scratch_free(col, coln * sizeof(T));
    scratch_free(xo, xn);
    scratch_free(yo, yn);
    return st;
}

/* ---- pools ------------------------------------------------------------------ */

/* The pools write their indices where ind is not NULL (max_pool2d) and
 * only the values where it is (max_pool2d_values, which the predictor
 * runs where no one reads the indices: a third of max_pool2d's bytes). The
 * 3x3 loops take that as a constant (wi), so each form is its own loop;
 * the 2x2 has a row function for each. */

/* The 2x2 stride-2 window without padding (every window inside the plane):
 * the generic loop's scan (row by row; a value replaces the best if larger
 * or NaN) with selects instead of branches, which random data mispredicts.
 * Eight windows at a time in GNU vectors (each row's 16 values split into
 * even and odd columns): gcc 12 left the `omp simd` loop below scalar and
 * branchy (a NaN test per value), 13% of the demo CNN's training step. */
/* A row pair's 2N values (lo, hi) split into each window's four: v[0], v[1]
 * from the top row's even and odd columns, v[2], v[3] from the bottom's. */
#define MAX2X2_SPLIT8(v, lo0, hi0, lo1, hi1, vm)                                                   \
    (v[0] = OARI_SHUFFLE2(lo0, hi0, vm, 0, 2, 4, 6, 8, 10, 12, 14),                               \
     v[1] = OARI_SHUFFLE2(lo0, hi0, vm, 1, 3, 5, 7, 9, 11, 13, 15),                               \
     v[2] = OARI_SHUFFLE2(lo1, hi1, vm, 0, 2, 4, 6, 8, 10, 12, 14),                               \
     v[3] = OARI_SHUFFLE2(lo1, hi1, vm, 1, 3, 5, 7, 9, 11, 13, 15))
#define MAX2X2_SPLIT4(v, lo0, hi0, lo1, hi1, vm)                                                   \
    (v[0] = OARI_SHUFFLE2(lo0, hi0, vm, 0, 2, 4, 6), v[1] = OARI_SHUFFLE2(lo0, hi0, vm, 1, 3, 5, 7), \
     v[2] = OARI_SHUFFLE2(lo1, hi1, vm, 0, 2, 4, 6), v[3] = OARI_SHUFFLE2(lo1, hi1, vm, 1, 3, 5, 7))
static inline __attribute__((always_inline)) void FN(max_row_2x2)(const T *r0, int64_t W, int64_t b0, int64_t OW,
                                                                  T *yo, int64_t *io) {
    const T *r1 = r0 + W;
    typedef T vt __attribute__((vector_size(8 * sizeof(T))));
    typedef __typeof__(_Generic((T)0, float: (int32_t)0, default: (int64_t)0)) lane_int;
    typedef lane_int vm __attribute__((vector_size(8 * sizeof(T)))); /* the lanes' masks */
    typedef int64_t vi __attribute__((vector_size(64)));
    const vi lane2 = {0, 2, 4, 6, 8, 10, 12, 14};
    int64_t o8 = 0;
    for (; o8 + 8 <= OW; o8 += 8) {
        vt lo0, hi0, lo1, hi1;
        memcpy(&lo0, r0 + 2 * o8, sizeof lo0);
        memcpy(&hi0, r0 + 2 * o8 + 8, sizeof hi0);
        memcpy(&lo1, r1 + 2 * o8, sizeof lo1);
        memcpy(&hi1, r1 + 2 * o8 + 8, sizeof hi1);
        vt v[4];
        MAX2X2_SPLIT8(v, lo0, hi0, lo1, hi1, vm);
        const int64_t off[4] = {0, 1, W, W + 1};
        vt m = v[0];
        vi bi = lane2 + (b0 + 2 * o8);
        for (int k = 1; k < 4; k++) {
            const vm t = (vm)(v[k] > m) | (vm)(v[k] != v[k]);
            m = (vt)(((vm)v[k] & t) | ((vm)m & ~t));
            const vi ti = __builtin_convertvector(t, vi);
            bi = ((lane2 + (b0 + 2 * o8 + off[k])) & ti) | (bi & ~ti);
        }
        memcpy(yo + o8, &m, sizeof m);
        memcpy(io + o8, &bi, sizeof bi);
    }
#pragma omp simd
    for (int64_t ox = o8; ox < OW; ox++) {
        T m = r0[2 * ox], v;
        int64_t bi = b0 + 2 * ox;
        bool t;
        v = r0[2 * ox + 1], t = v > m || v != v, m = t ? v : m, bi = t ? b0 + 2 * ox + 1 : bi;
        v = r1[2 * ox], t = v > m || v != v, m = t ? v : m, bi = t ? b0 + W + 2 * ox : bi;
        v = r1[2 * ox + 1], t = v > m || v != v, m = t ? v : m, bi = t ? b0 + W + 2 * ox + 1 : bi;
        yo[ox] = m;
        io[ox] = bi;
    }
}

/* The values alone (max_pool2d_values, and eager pools with no gradient):
 * 8 outputs a step, the row's last step moved back to overlap the one
 * before (it writes the same values again), 4 a step below 8 outputs; so
 * the demo CNN's 14- and 7-wide rows run no scalar tail. Each lane scans
 * its window as max_row_2x2 does (a later value wins if larger or NaN). */
#define MAX2X2_STEP(N, o)                                                                          \
    do {                                                                                           \
        typedef T vt_ __attribute__((vector_size(N * sizeof(T))));                                 \
        typedef __typeof__(_Generic((T)0, float: (int32_t)0, default: (int64_t)0)) li_;            \
        typedef li_ vm_ __attribute__((vector_size(N * sizeof(T))));                               \
        vt_ lo0, hi0, lo1, hi1, v[4];                                                              \
        memcpy(&lo0, r0 + 2 * (o), sizeof lo0);                                                    \
        memcpy(&hi0, r0 + 2 * (o) + N, sizeof hi0);                                                \
        memcpy(&lo1, r1 + 2 * (o), sizeof lo1);                                                    \
        memcpy(&hi1, r1 + 2 * (o) + N, sizeof hi1);                                                \
        MAX2X2_SPLIT##N(v, lo0, hi0, lo1, hi1, vm_);                                               \
        vt_ m = v[0];                                                                              \
        for (int k = 1; k < 4; k++) {                                                              \
            const vm_ t = (vm_)(v[k] > m) | (vm_)(v[k] != v[k]);                                   \
            m = (vt_)(((vm_)v[k] & t) | ((vm_)m & ~t));                                            \
        }                                                                                          \
        memcpy(yo + (o), &m, sizeof m);                                                            \
    } while (0)
static inline __attribute__((always_inline)) void FN(max_row_2x2_values)(const T *r0, int64_t W, int64_t OW,
                                                                         T *yo) {
    const T *r1 = r0 + W;
    if (OW >= 8) {
        int64_t o = 0;
        for (; o + 8 <= OW; o += 8) MAX2X2_STEP(8, o);
        if (o < OW) MAX2X2_STEP(8, OW - 8);
        return;
    }
    if (OW >= 4) {
        MAX2X2_STEP(4, 0);
        MAX2X2_STEP(4, OW - 4);
        return;
    }
    for (int64_t ox = 0; ox < OW; ox++) {
        T m = r0[2 * ox], v;
        v = r0[2 * ox + 1], m = v > m || v != v ? v : m;
        v = r1[2 * ox], m = v > m || v != v ? v : m;
        v = r1[2 * ox + 1], m = v > m || v != v ? v : m;
        yo[ox] = m;
    }
}
#undef MAX2X2_STEP
#undef MAX2X2_SPLIT8
#undef MAX2X2_SPLIT4

OARI_SIMD_CLONES static void FN(max_pool_2x2)(const T *x, T *y, int64_t *ind, int64_t np,
                                               int64_t H, int64_t W, int64_t OH, int64_t OW) {
#pragma omp parallel for schedule(static) if (np * OH * OW * 4 > OARI_PARALLEL_GRAIN)
    for (int64_t p = 0; p < np; p++)
        for (int64_t oy = 0; oy < OH; oy++) {
            const T *r0 = x + p * H * W + 2 * oy * W;
            T *yo = y + (p * OH + oy) * OW;
            if (ind) FN(max_row_2x2)(r0, W, 2 * oy * W, OW, yo, ind + (p * OH + oy) * OW);
            else FN(max_row_2x2_values)(r0, W, OW, yo);
        }
}

/* One max_pool2d output: the window at (y0, x0) (top-left, may start in the
 * padding) scanned row by row; a value replaces the best if larger or NaN.
 * The index (when io is not NULL) is that of the first element in the
 * plane when none wins. */
static inline void FN(max_window)(const T *xp, int64_t H, int64_t W, int64_t y0, int64_t x0,
                                  int64_t kh, int64_t kw, int64_t dh, int64_t dw, T *yo,
                                  int64_t *io) {
    int64_t y1 = y0 + (kh - 1) * dh + 1, x1 = x0 + (kw - 1) * dw + 1;
    if (y1 > H) y1 = H;
    if (x1 > W) x1 = W;
    while (y0 < 0)
        y0 += dh;
    while (x0 < 0)
        x0 += dw;
    int64_t best = y0 * W + x0;
    T m = -(T)INFINITY;
    for (int64_t iy = y0; iy < y1; iy += dh)
        for (int64_t ix = x0; ix < x1; ix += dw) {
            T v = xp[iy * W + ix];
            if (v > m || isnan(v)) {
                m = v;
                best = iy * W + ix;
            }
        }
    *yo = m;
    if (io) *io = best;
}

/* One output row of the 3x3 pool over the outputs ox0..ox1 whose windows
 * lie inside the plane: rows r0, r0 + W, r0 + 2W from column sw * ox,
 * in the generic scan's order with selects instead of branches; b0 is
 * r0's index in the plane. Inlined, so a constant sw specialises it. */
static inline __attribute__((always_inline)) void FN(max_row_3x3)(const T *r0, int64_t W, int64_t b0,
                                                                  int64_t sw, int64_t ox0, int64_t ox1, T *yo,
                                                                  int64_t *io, bool wi) {
    const T *r1 = r0 + W, *r2 = r1 + W;
#pragma omp simd
    for (int64_t ox = ox0; ox < ox1; ox++) {
        const int64_t c = ox * sw;
        T m = r0[c], v;
        int64_t bi = b0 + c;
        bool t;
#define MAX_STEP(row, dc, off)                                                                     \
    v = row[c + dc], t = v > m || v != v, m = t ? v : m, bi = t ? b0 + (off) + c + dc : bi
        MAX_STEP(r0, 1, 0);
        MAX_STEP(r0, 2, 0);
        MAX_STEP(r1, 0, W);
        MAX_STEP(r1, 1, W);
        MAX_STEP(r1, 2, W);
        MAX_STEP(r2, 0, 2 * W);
        MAX_STEP(r2, 1, 2 * W);
        MAX_STEP(r2, 2, 2 * W);
#undef MAX_STEP
        yo[ox] = m;
        if (wi) io[ox] = bi;
    }
}

/* The 3x3 window, dilation 1, any stride and padding (ResNet's stem pool,
 * 3x3 stride 2 pad 1): the outputs whose window lies inside the plane take
 * the generic scan's order with selects instead of branches; the border
 * rows and columns take max_window. Threaded over the planes. */
OARI_SIMD_CLONES static void FN(max_pool_3x3)(const T *x, T *y, int64_t *ind, int64_t np,
                                               int64_t H, int64_t W, int64_t OH, int64_t OW,
                                               int64_t sh, int64_t sw, int64_t ph, int64_t pw) {
    int64_t oy0, oy1, ox0, ox1; /* outputs whose 3 rows / 3 columns are all inside */
    valid_range(-ph, sh, H - 2, OH, &oy0, &oy1);
    valid_range(-pw, sw, W - 2, OW, &ox0, &ox1);
#pragma omp parallel for schedule(static) if (np * OH * OW * 9 > OARI_PARALLEL_GRAIN)
    for (int64_t p = 0; p < np; p++) {
        const T *xp = x + p * H * W;
        T *yp = y + p * OH * OW;
        for (int64_t oy = 0; oy < OH; oy++) {
            const int64_t iy = oy * sh - ph;
            T *yo = yp + oy * OW;
            int64_t *io = ind ? ind + (p * OH + oy) * OW : NULL;
            const bool inner = oy >= oy0 && oy < oy1;
            for (int64_t ox = 0; ox < (inner ? ox0 : OW); ox++)
                FN(max_window)(xp, H, W, iy, ox * sw - pw, 3, 3, 1, 1, yo + ox, io ? io + ox : NULL);
            if (!inner) continue;
            for (int64_t ox = ox1; ox < OW; ox++)
                FN(max_window)(xp, H, W, iy, ox * sw - pw, 3, 3, 1, 1, yo + ox, io ? io + ox : NULL);
            const T *r0 = xp + iy * W - pw;
            /* stride 2 (ResNet's) as a constant: the compiler loads the
             * even columns with two loads and a permute, not a gather */
            if (sw == 2 && io) FN(max_row_3x3)(r0, W, iy * W - pw, 2, ox0, ox1, yo, io, true);
            else if (sw == 2) FN(max_row_3x3)(r0, W, iy * W - pw, 2, ox0, ox1, yo, NULL, false);
            else if (io) FN(max_row_3x3)(r0, W, iy * W - pw, sw, ox0, ox1, yo, io, true);
            else FN(max_row_3x3)(r0, W, iy * W - pw, sw, ox0, ox1, yo, NULL, false);
        }
    }
}

/* The pool's values into y and, where ind is not NULL, its i64 indices
 * (h * W + w in the input plane). */
static int FN(max_pool2d_run)(const oar_kernel_call *c, int64_t *ind) {
    const int64_t *a = c->iattr;
    int64_t np, H, W, OH, OW;
    planes_of(&c->in[0], &np, &H, &W);
    planes_of(&c->out[0], &np, &OH, &OW);
    void *xo;
    size_t xn;
    const T *x = contig(&c->in[0], &xo, &xn);
    if (!x) return oari_fail_status();
    T *y = c->out[0].data;
    const int64_t kh = a[0], kw = a[1], sh = a[2], sw = a[3], ph = a[4], pw = a[5], dh = a[6],
                  dw = a[7];
    if (kh == 2 && kw == 2 && sh == 2 && sw == 2 && ph == 0 && pw == 0 && dh == 1 && dw == 1 &&
        2 * OH <= H && 2 * OW <= W) {
        FN(max_pool_2x2)(x, y, ind, np, H, W, OH, OW);
        scratch_free(xo, xn);
        return 0;
    }
    if (kh == 3 && kw == 3 && dh == 1 && dw == 1 && H >= 3 && W >= 3) {
        FN(max_pool_3x3)(x, y, ind, np, H, W, OH, OW, sh, sw, ph, pw);
        scratch_free(xo, xn);
        return 0;
    }
#pragma omp parallel for schedule(static) if (np * OH * OW * kh * kw > OARI_PARALLEL_GRAIN)
    for (int64_t p = 0; p < np; p++) {
        const T *xp = x + p * H * W;
        for (int64_t oy = 0; oy < OH; oy++)
            for (int64_t ox = 0; ox < OW; ox++)
                FN(max_window)(xp, H, W, oy * sh - ph, ox * sw - pw, kh, kw, dh, dw,
                               y + (p * OH + oy) * OW + ox, ind ? ind + (p * OH + oy) * OW + ox : NULL);
    }
    scratch_free(xo, xn);
    return 0;
}

/* max_pool2d: out[0] values, out[1] i64 indices. */
static int FN(k_max_pool2d)(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    return FN(max_pool2d_run)(c, c->out[1].data);
}

/* max_pool2d_values: out[0] the values alone. */
static int FN(k_max_pool2d_values)(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    return FN(max_pool2d_run)(c, NULL);
}

/* max_pool2d_backward: in gy [..., OH, OW], indices; out gx [..., H, W]. */
static int FN(k_max_pool2d_backward)(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    int64_t np, H, W, OH, OW;
    planes_of(&c->out[0], &np, &H, &W);
    planes_of(&c->in[0], &np, &OH, &OW);
    void *go, *io;
    size_t gn, in_;
    const T *gy = contig(&c->in[0], &go, &gn);
    const int64_t *ind = gy ? contig(&c->in[1], &io, &in_) : NULL;
    if (!ind) {
        scratch_free(go, gn);
        return oari_fail_status();
    }
    T *gx = c->out[0].data;
    int bad = 0;
#pragma omp parallel for schedule(static) reduction(| : bad) if (np * H * W > OARI_PARALLEL_GRAIN)
    for (int64_t p = 0; p < np; p++) {
        T *gp = gx + p * H * W;
        for (int64_t i = 0; i < H * W; i++)
            gp[i] = 0;
        for (int64_t i = 0; i < OH * OW; i++) {
            int64_t k = ind[p * OH * OW + i];
            if (k >= 0 && k < H * W)
                gp[k] += gy[p * OH * OW + i];
            else
                bad = 1;
        }
    }
    scratch_free(go, gn);
    scratch_free(io, in_);
    if (bad)
        return oari_error(OAR_ERR_INVALID,
                          "max_pool2d_backward: index out of range of the %lld x %lld plane",
                          (long long)H, (long long)W);
    return 0;
}

/* The window of avg_pool2d output (oy, ox) clipped to the input, and its divisor. */
static T FN(avg_window)(const int64_t *a, int64_t H, int64_t W, int64_t oy, int64_t ox, int64_t *y0,
                        int64_t *y1, int64_t *x0, int64_t *x1) {
    int64_t h0 = oy * a[2] - a[4], w0 = ox * a[3] - a[5];
    int64_t h1 = h0 + a[0], w1 = w0 + a[1];
    if (h1 > H + a[4]) h1 = H + a[4];
    if (w1 > W + a[5]) w1 = W + a[5];
    int64_t pool = (h1 - h0) * (w1 - w0);
    if (h0 < 0) h0 = 0;
    if (w0 < 0) w0 = 0;
    if (h1 > H) h1 = H;
    if (w1 > W) w1 = W;
    *y0 = h0, *y1 = h1, *x0 = w0, *x1 = w1;
    if (h0 >= h1 || w0 >= w1) return 0;
    return (T)(a[7] ? pool : (h1 - h0) * (w1 - w0));
}

/* avg_pool2d: iattr kernel2, stride2, padding2, ceil_mode, count_include_pad. */
static int FN(k_avg_pool2d)(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    const int64_t *a = c->iattr;
    int64_t np, H, W, OH, OW;
    planes_of(&c->in[0], &np, &H, &W);
    planes_of(&c->out[0], &np, &OH, &OW);
    void *xo;
    size_t xn;
    const T *x = contig(&c->in[0], &xo, &xn);
    if (!x) return oari_fail_status();
    T *y = c->out[0].data;
#pragma omp parallel for schedule(static) if (np * OH * OW * a[0] * a[1] > OARI_PARALLEL_GRAIN)
    for (int64_t p = 0; p < np; p++) {
        const T *xp = x + p * H * W;
        for (int64_t oy = 0; oy < OH; oy++)
            for (int64_t ox = 0; ox < OW; ox++) {
                int64_t y0, y1, x0, x1;
                T div = FN(avg_window)(a, H, W, oy, ox, &y0, &y1, &x0, &x1);
                T s = 0;
                for (int64_t iy = y0; iy < y1; iy++)
                    for (int64_t ix = x0; ix < x1; ix++)
                        s += xp[iy * W + ix];
                y[(p * OH + oy) * OW + ox] = div != 0 ? s / div : 0;
            }
    }
    scratch_free(xo, xn);
    return 0;
}

/* avg_pool2d_backward: in gy [..., OH, OW]; iattr avg_pool2d's 8, H, W. */
static int FN(k_avg_pool2d_backward)(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    const int64_t *a = c->iattr;
    int64_t np, H, W, OH, OW;
    planes_of(&c->out[0], &np, &H, &W);
    planes_of(&c->in[0], &np, &OH, &OW);
    void *go;
    size_t gn;
    const T *gy = contig(&c->in[0], &go, &gn);
    if (!gy) return oari_fail_status();
    T *gx = c->out[0].data;
#pragma omp parallel for schedule(static) if (np * OH * OW * a[0] * a[1] > OARI_PARALLEL_GRAIN)
    for (int64_t p = 0; p < np; p++) {
        T *gp = gx + p * H * W;
        for (int64_t i = 0; i < H * W; i++)
            gp[i] = 0;
        for (int64_t oy = 0; oy < OH; oy++)
            for (int64_t ox = 0; ox < OW; ox++) {
                int64_t y0, y1, x0, x1;
                T div = FN(avg_window)(a, H, W, oy, ox, &y0, &y1, &x0, &x1);
                if (div == 0) continue;
                T v = gy[(p * OH + oy) * OW + ox] / div;
                for (int64_t iy = y0; iy < y1; iy++)
                    for (int64_t ix = x0; ix < x1; ix++)
                        gp[iy * W + ix] += v;
            }
    }
    scratch_free(go, gn);
    return 0;
}

static int FN(k_adaptive_avg_pool2d)(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    int64_t np, H, W, OH, OW;
    planes_of(&c->in[0], &np, &H, &W);
    planes_of(&c->out[0], &np, &OH, &OW);
    void *xo;
    size_t xn;
    const T *x = contig(&c->in[0], &xo, &xn);
    if (!x) return oari_fail_status();
    T *y = c->out[0].data;
#pragma omp parallel for schedule(static) if (np * H * W > OARI_PARALLEL_GRAIN)
    for (int64_t p = 0; p < np; p++) {
        const T *xp = x + p * H * W;
        for (int64_t oy = 0; oy < OH; oy++) {
            int64_t y0 = adaptive_start(oy, OH, H), y1 = adaptive_end(oy, OH, H);
            for (int64_t ox = 0; ox < OW; ox++) {
                int64_t x0 = adaptive_start(ox, OW, W), x1 = adaptive_end(ox, OW, W);
                T s = 0;
                for (int64_t iy = y0; iy < y1; iy++)
                    for (int64_t ix = x0; ix < x1; ix++)
                        s += xp[iy * W + ix];
                y[(p * OH + oy) * OW + ox] = s / (T)((y1 - y0) * (x1 - x0));
            }
        }
    }
    scratch_free(xo, xn);
    return 0;
}

static int FN(k_adaptive_avg_pool2d_backward)(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    int64_t np, H, W, OH, OW;
    planes_of(&c->out[0], &np, &H, &W);
    planes_of(&c->in[0], &np, &OH, &OW);
    void *go;
    size_t gn;
    const T *gy = contig(&c->in[0], &go, &gn);
    if (!gy) return oari_fail_status();
    T *gx = c->out[0].data;
#pragma omp parallel for schedule(static) if (np * H * W > OARI_PARALLEL_GRAIN)
    for (int64_t p = 0; p < np; p++) {
        T *gp = gx + p * H * W;
        for (int64_t i = 0; i < H * W; i++)
            gp[i] = 0;
        for (int64_t oy = 0; oy < OH; oy++) {
            int64_t y0 = adaptive_start(oy, OH, H), y1 = adaptive_end(oy, OH, H);
            for (int64_t ox = 0; ox < OW; ox++) {
                int64_t x0 = adaptive_start(ox, OW, W), x1 = adaptive_end(ox, OW, W);
                T v = gy[(p * OH + oy) * OW + ox] / (T)((y1 - y0) * (x1 - x0));
                for (int64_t iy = y0; iy < y1; iy++)
                    for (int64_t ix = x0; ix < x1; ix++)
                        gp[iy * W + ix] += v;
            }
        }
    }
    scratch_free(go, gn);
    return 0;
}

/* ---- interpolation ----------------------------------------------------------- */

/* Bilinear source taps along one axis: i0, i1 and weights l0, l1 (PyTorch's
 * area_pixel_compute_source_index). */
static void FN(linear_taps)(int64_t dst, int64_t in, int64_t out, bool align, int64_t *i0,
                            int64_t *i1, T *l0, T *l1) {
    T scale = align ? (out > 1 ? (T)(in - 1) / (T)(out - 1) : 0) : (T)in / (T)out;
    T src = align ? scale * (T)dst : scale * ((T)dst + (T)0.5) - (T)0.5;
    if (src < 0) src = 0;
    int64_t i = (int64_t)src;
    if (i > in - 1) i = in - 1;
    *i0 = i;
    *i1 = i + (i < in - 1 ? 1 : 0);
    *l1 = src - (T)i;
    *l0 = (T)1 - *l1;
}

/* interpolate (forward, backward = 0) or its adjoint (backward = 1): the
 * small plane is hw x ww ... both directions share the taps. */
static int FN(interp)(const oar_kernel_call *c, bool backward) {
    const int64_t mode = c->iattr[0];
    const bool align = c->iattr[3] != 0;
    int64_t np, H, W, OH, OW;
    /* H x W: the interpolated op's input plane; OH x OW: its output plane */
    planes_of(backward ? &c->out[0] : &c->in[0], &np, &H, &W);
    planes_of(backward ? &c->in[0] : &c->out[0], &np, &OH, &OW);
    void *xo;
    size_t xn;
    const T *x = contig(&c->in[0], &xo, &xn);
    if (!x) return oari_fail_status();
    T *y = c->out[0].data;
#pragma omp parallel for schedule(static) if (np * OH * OW > OARI_PARALLEL_GRAIN)
    for (int64_t p = 0; p < np; p++) {
        const T *src = x + p * (backward ? OH * OW : H * W);
        T *dst = y + p * (backward ? H * W : OH * OW);
        if (backward)
            for (int64_t i = 0; i < H * W; i++)
                dst[i] = 0;
        for (int64_t oy = 0; oy < OH; oy++) {
            int64_t y0, y1;
            T ly0, ly1;
            if (mode == 0) {
                y0 = y1 = nearest_src(oy, H, OH);
                ly0 = 1, ly1 = 0;
            } else {
                FN(linear_taps)(oy, H, OH, align, &y0, &y1, &ly0, &ly1);
            }
            for (int64_t ox = 0; ox < OW; ox++) {
                int64_t x0, x1;
                T lx0, lx1;
                if (mode == 0) {
                    x0 = x1 = nearest_src(ox, W, OW);
                    lx0 = 1, lx1 = 0;
                } else {
                    FN(linear_taps)(ox, W, OW, align, &x0, &x1, &lx0, &lx1);
                }
                if (mode == 0 && !backward) {
                    dst[oy * OW + ox] = src[y0 * W + x0];
                } else if (!backward) {
                    dst[oy * OW + ox] = ly0 * (lx0 * src[y0 * W + x0] + lx1 * src[y0 * W + x1]) +
                                        ly1 * (lx0 * src[y1 * W + x0] + lx1 * src[y1 * W + x1]);
                } else {
                    T g = src[oy * OW + ox];
                    dst[y0 * W + x0] += ly0 * lx0 * g;
                    dst[y0 * W + x1] += ly0 * lx1 * g;
                    dst[y1 * W + x0] += ly1 * lx0 * g;
                    dst[y1 * W + x1] += ly1 * lx1 * g;
                }
            }
        }
    }
    scratch_free(xo, xn);
    return 0;
}

static int FN(k_interpolate)(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    return FN(interp)(c, false);
}

static int FN(k_interpolate_backward)(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    return FN(interp)(c, true);
}

#undef T
#undef FN
#undef CAT
#undef CAT2
#endif

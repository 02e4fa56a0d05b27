/* A fake libcudnn for the cuda plugin's cuDNN code (plugins/cuda/
 * cuda_dnn.c) on a machine without a GPU: a shared library exporting the
 * calls the plugin opens with dlopen (it loads this one where
 * OAR_CUDA_CUDNN_LIB names it), each checking its arguments as cuDNN's
 * documentation states them (packed NCHW descriptors, an output of the
 * size the convolution gives, a workspace of at least the size asked,
 * which the call then writes whole; with OAR_FAKE_CUDNN_STRICT=1 an
 * algorithm query repeated for the same convolution fails) and computing by the definition in
 * double over "device" memory that is host memory (the fake runtime's):
 * y = alpha conv(x, w) + beta y (cross-correlation with padding, stride,
 * dilation and groups), its backward data and backward filter, and
 * C = alpha A + beta C with A broadcast over its extent-1 dims. */
#include <cudnn.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

struct cudnnContext { cudaStream_t stream; };
struct cudnnTensorStruct { bool set; cudnnDataType_t dt; int d[4]; };
struct cudnnFilterStruct { bool set; cudnnDataType_t dt; int d[4]; };
struct cudnnConvolutionStruct { bool set; int pad[2], stride[2], dil[2], groups; cudnnDataType_t dt; };

EXPORT size_t cudnnGetVersion(void) { return CUDNN_VERSION; }
EXPORT const char *cudnnGetErrorString(cudnnStatus_t s) { return s ? "a fake cuDNN error" : "CUDNN_STATUS_SUCCESS"; }
EXPORT cudnnStatus_t cudnnCreate(cudnnHandle_t *h) {
    return (*h = calloc(1, sizeof **h)) ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_ALLOC_FAILED;
}
EXPORT cudnnStatus_t cudnnDestroy(cudnnHandle_t h) { return free(h), CUDNN_STATUS_SUCCESS; }
EXPORT cudnnStatus_t cudnnSetStream(cudnnHandle_t h, cudaStream_t s) { return h->stream = s, CUDNN_STATUS_SUCCESS; }

#define DESC_FUNCS(NAME, T)                                                                                  \
    EXPORT cudnnStatus_t cudnnCreate##NAME##Descriptor(T *d) {                                               \
        return (*d = calloc(1, sizeof **d)) ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_ALLOC_FAILED;               \
    }                                                                                                        \
    EXPORT cudnnStatus_t cudnnDestroy##NAME##Descriptor(T d) { return free(d), CUDNN_STATUS_SUCCESS; }
DESC_FUNCS(Tensor, cudnnTensorDescriptor_t)
DESC_FUNCS(Filter, cudnnFilterDescriptor_t)
DESC_FUNCS(Convolution, cudnnConvolutionDescriptor_t)

static bool dt_ok(cudnnDataType_t dt) { return dt == CUDNN_DATA_FLOAT || dt == CUDNN_DATA_DOUBLE; }

EXPORT cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t d, cudnnTensorFormat_t f, cudnnDataType_t dt,
                                                int n, int c, int h, int w) {
    if (!d || f != CUDNN_TENSOR_NCHW || !dt_ok(dt) || n < 1 || c < 1 || h < 1 || w < 1) return CUDNN_STATUS_BAD_PARAM;
    *d = (struct cudnnTensorStruct){true, dt, {n, c, h, w}};
    return CUDNN_STATUS_SUCCESS;
}
EXPORT cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t d, cudnnDataType_t dt, cudnnTensorFormat_t f,
                                                int k, int c, int h, int w) {
    if (!d || f != CUDNN_TENSOR_NCHW || !dt_ok(dt) || k < 1 || c < 1 || h < 1 || w < 1) return CUDNN_STATUS_BAD_PARAM;
    *d = (struct cudnnFilterStruct){true, dt, {k, c, h, w}};
    return CUDNN_STATUS_SUCCESS;
}
EXPORT cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t d, int ph, int pw, int u, int v,
                                                     int dh, int dw, cudnnConvolutionMode_t mode, cudnnDataType_t dt) {
    if (!d || ph < 0 || pw < 0 || u < 1 || v < 1 || dh < 1 || dw < 1 || mode != CUDNN_CROSS_CORRELATION || !dt_ok(dt))
        return CUDNN_STATUS_BAD_PARAM;
    *d = (struct cudnnConvolutionStruct){true, {ph, pw}, {u, v}, {dh, dw}, 1, dt};
    return CUDNN_STATUS_SUCCESS;
}
EXPORT cudnnStatus_t cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t d, int g) {
    return !d || g < 1 ? CUDNN_STATUS_BAD_PARAM : (d->groups = g, CUDNN_STATUS_SUCCESS);
}
EXPORT cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t d, cudnnMathType_t m) {
    return !d || (m != CUDNN_DEFAULT_MATH && m != CUDNN_TENSOR_OP_MATH && m != CUDNN_FMA_MATH &&
                  m != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION)
               ? CUDNN_STATUS_BAD_PARAM
               : CUDNN_STATUS_SUCCESS;
}

/* x, w, y agree: the data types, channels and groups, and y's size is the convolution's */
static bool conv_ok(cudnnTensorDescriptor_t x, cudnnFilterDescriptor_t w, cudnnConvolutionDescriptor_t c,
                    cudnnTensorDescriptor_t y) {
    if (!x || !w || !c || !y || !x->set || !w->set || !c->set || !y->set) return false;
    if (x->dt != w->dt || x->dt != y->dt || x->dt != c->dt) return false;
    int g = c->groups;
    if (x->d[1] != w->d[1] * g || w->d[0] % g || y->d[1] != w->d[0] || y->d[0] != x->d[0]) return false;
    for (int i = 0; i < 2; i++) {
        int span = c->dil[i] * (w->d[2 + i] - 1) + 1, in = x->d[2 + i] + 2 * c->pad[i];
        if (in < span || y->d[2 + i] != (in - span) / c->stride[i] + 1) return false;
    }
    return true;
}

/* OAR_FAKE_CUDNN_STRICT=1: a heuristic query repeated for the same
 * convolution fails, so a caller that should remember its choice is
 * caught asking again */
static bool seen_before(int which, cudnnTensorDescriptor_t x, cudnnFilterDescriptor_t w,
                        cudnnConvolutionDescriptor_t c, cudnnTensorDescriptor_t y) {
    static int keys[512][20], n_keys;
    const char *strict = getenv("OAR_FAKE_CUDNN_STRICT");
    if (!strict || strcmp(strict, "1")) return false;
    int k[20] = {which, (int)x->dt, c->groups, c->pad[0], c->pad[1], c->stride[0], c->stride[1], c->dil[0], c->dil[1]};
    for (int i = 0; i < 4; i++) k[9 + i] = x->d[i], k[13 + i] = y->d[i];
    for (int i = 0; i < 3; i++) k[17 + i] = w->d[i]; /* (w's last dim follows from the others and y) */
    for (int i = 0; i < n_keys; i++)
        if (!memcmp(keys[i], k, sizeof k)) return true;
    if (n_keys < 512) memcpy(keys[n_keys++], k, sizeof k);
    return false;
}

#define WS_BYTES 96 /* the workspace every algorithm asks for */
#define ALGO_QUERY(NAME, PERF, A, B, C, D, TA, TB, TD, OK, SEEN)                                                  \
    EXPORT cudnnStatus_t NAME(cudnnHandle_t h, TA A, TB B, cudnnConvolutionDescriptor_t C, TD D, const int req,   \
                              int *n, PERF *p) {                                                                    \
        if (!h || req < 1 || !n || !p || !(OK) || (SEEN)) return CUDNN_STATUS_BAD_PARAM;                            \
        memset(p, 0, sizeof *p);                                                                                    \
        p->algo = 1, p->status = CUDNN_STATUS_SUCCESS, p->memory = WS_BYTES;                                         \
        *n = 1;                                                                                                     \
        return CUDNN_STATUS_SUCCESS;                                                                                \
    }
#define WS_QUERY(NAME, ALGO, A, B, C, D, TA, TB, TD, OK)                                                         \
    EXPORT cudnnStatus_t NAME(cudnnHandle_t h, TA A, TB B, cudnnConvolutionDescriptor_t C, TD D, ALGO algo,        \
                              size_t *sz) {                                                                         \
        if (!h || !sz || (int)algo != 1 || !(OK)) return CUDNN_STATUS_BAD_PARAM;                                    \
        *sz = WS_BYTES;                                                                                             \
        return CUDNN_STATUS_SUCCESS;                                                                                \
    }
ALGO_QUERY(cudnnGetConvolutionForwardAlgorithm_v7, cudnnConvolutionFwdAlgoPerf_t, x, w, c, y, cudnnTensorDescriptor_t,
           cudnnFilterDescriptor_t, cudnnTensorDescriptor_t, conv_ok(x, w, c, y), seen_before(0, x, w, c, y))
ALGO_QUERY(cudnnGetConvolutionBackwardDataAlgorithm_v7, cudnnConvolutionBwdDataAlgoPerf_t, w, dy, c, dx,
           cudnnFilterDescriptor_t, cudnnTensorDescriptor_t, cudnnTensorDescriptor_t, conv_ok(dx, w, c, dy),
           seen_before(1, dx, w, c, dy))
ALGO_QUERY(cudnnGetConvolutionBackwardFilterAlgorithm_v7, cudnnConvolutionBwdFilterAlgoPerf_t, x, dy, c, dw,
           cudnnTensorDescriptor_t, cudnnTensorDescriptor_t, cudnnFilterDescriptor_t, conv_ok(x, dw, c, dy),
           seen_before(2, x, dw, c, dy))
WS_QUERY(cudnnGetConvolutionForwardWorkspaceSize, cudnnConvolutionFwdAlgo_t, x, w, c, y, cudnnTensorDescriptor_t,
         cudnnFilterDescriptor_t, cudnnTensorDescriptor_t, conv_ok(x, w, c, y))
WS_QUERY(cudnnGetConvolutionBackwardDataWorkspaceSize, cudnnConvolutionBwdDataAlgo_t, w, dy, c, dx,
         cudnnFilterDescriptor_t, cudnnTensorDescriptor_t, cudnnTensorDescriptor_t, conv_ok(dx, w, c, dy))
WS_QUERY(cudnnGetConvolutionBackwardFilterWorkspaceSize, cudnnConvolutionBwdFilterAlgo_t, x, dy, c, dw,
         cudnnTensorDescriptor_t, cudnnTensorDescriptor_t, cudnnFilterDescriptor_t, conv_ok(x, dw, c, dy))

static double ld(const void *p, bool dbl, long i) { return dbl ? ((const double *)p)[i] : ((const float *)p)[i]; }
static void st(void *p, bool dbl, long i, double v) {
    if (dbl) ((double *)p)[i] = v;
    else ((float *)p)[i] = (float)v;
}
static double scal(const void *p, bool dbl) { return dbl ? *(const double *)p : *(const float *)p; }

/* which: 0 y = conv(x, w), 1 dx = conv's transpose of dy, 2 dw = the filter gradient; out = alpha r + beta out */
static cudnnStatus_t conv_run(int which, const void *alpha, cudnnTensorDescriptor_t xd, const void *x,
                              cudnnFilterDescriptor_t wd, const void *w, cudnnConvolutionDescriptor_t cd,
                              cudnnTensorDescriptor_t yd, const void *y, void *out, int algo, void *ws, size_t wsb,
                              const void *beta) {
    if (!conv_ok(xd, wd, cd, yd) || algo != 1 || !alpha || !beta || !out || wsb < WS_BYTES || !ws)
        return CUDNN_STATUS_BAD_PARAM;
    memset(ws, 0x5A, wsb); /* the whole workspace is the call's */
    const bool dbl = xd->dt == CUDNN_DATA_DOUBLE;
    const int N = xd->d[0], C = xd->d[1], H = xd->d[2], W = xd->d[3], K = wd->d[0], Cg = wd->d[1], R = wd->d[2],
              S = wd->d[3], P = yd->d[2], Q = yd->d[3], G = cd->groups, Kg = K / G;
    const long nout = which == 0 ? (long)N * K * P * Q : which == 1 ? (long)N * C * H * W : (long)K * Cg * R * S;
    double *acc = calloc((size_t)nout, sizeof *acc);
    if (!acc) return CUDNN_STATUS_ALLOC_FAILED;
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K; k++)
            for (int p = 0; p < P; p++)
                for (int q = 0; q < Q; q++)
                    for (int c = 0; c < Cg; c++)
                        for (int r = 0; r < R; r++)
                            for (int s = 0; s < S; s++) {
                                int ih = p * cd->stride[0] - cd->pad[0] + r * cd->dil[0];
                                int iw = q * cd->stride[1] - cd->pad[1] + s * cd->dil[1];
                                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                                int ic = (k / Kg) * Cg + c;
                                long xi = (((long)n * C + ic) * H + ih) * W + iw;
                                long wi = (((long)k * Cg + c) * R + r) * S + s;
                                long yi = (((long)n * K + k) * P + p) * Q + q;
                                if (which == 0) acc[yi] += ld(x, dbl, xi) * ld(w, dbl, wi);
                                else if (which == 1) acc[xi] += ld(y, dbl, yi) * ld(w, dbl, wi);
                                else acc[wi] += ld(x, dbl, xi) * ld(y, dbl, yi);
                            }
    double a = scal(alpha, dbl), b = scal(beta, dbl);
    for (long i = 0; i < nout; i++) st(out, dbl, i, a * acc[i] + (b != 0 ? b * ld(out, dbl, i) : 0));
    free(acc);
    return CUDNN_STATUS_SUCCESS;
}

EXPORT cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t h, const void *alpha, cudnnTensorDescriptor_t xd,
                                             const void *x, cudnnFilterDescriptor_t wd, const void *w,
                                             cudnnConvolutionDescriptor_t cd, cudnnConvolutionFwdAlgo_t algo, void *ws,
                                             size_t wsb, const void *beta, cudnnTensorDescriptor_t yd, void *y) {
    if (!h || !x || !w) return CUDNN_STATUS_BAD_PARAM;
    return conv_run(0, alpha, xd, x, wd, w, cd, yd, NULL, y, (int)algo, ws, wsb, beta);
}
EXPORT cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t h, const void *alpha, cudnnFilterDescriptor_t wd,
                                                  const void *w, cudnnTensorDescriptor_t dyd, const void *dy,
                                                  cudnnConvolutionDescriptor_t cd, cudnnConvolutionBwdDataAlgo_t algo,
                                                  void *ws, size_t wsb, const void *beta, cudnnTensorDescriptor_t dxd,
                                                  void *dx) {
    if (!h || !w || !dy) return CUDNN_STATUS_BAD_PARAM;
    return conv_run(1, alpha, dxd, NULL, wd, w, cd, dyd, dy, dx, (int)algo, ws, wsb, beta);
}
EXPORT cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t h, const void *alpha, cudnnTensorDescriptor_t xd,
                                                    const void *x, cudnnTensorDescriptor_t dyd, const void *dy,
                                                    cudnnConvolutionDescriptor_t cd,
                                                    cudnnConvolutionBwdFilterAlgo_t algo, void *ws, size_t wsb,
                                                    const void *beta, cudnnFilterDescriptor_t dwd, void *dw) {
    if (!h || !x || !dy) return CUDNN_STATUS_BAD_PARAM;
    return conv_run(2, alpha, xd, x, dwd, NULL, cd, dyd, dy, dw, (int)algo, ws, wsb, beta);
}

EXPORT cudnnStatus_t cudnnAddTensor(cudnnHandle_t h, const void *alpha, cudnnTensorDescriptor_t ad, const void *A,
                                    const void *beta, cudnnTensorDescriptor_t cdsc, void *C) {
    if (!h || !ad || !cdsc || !ad->set || !cdsc->set || ad->dt != cdsc->dt || !A || !C) return CUDNN_STATUS_BAD_PARAM;
    for (int i = 0; i < 4; i++)
        if (ad->d[i] != 1 && ad->d[i] != cdsc->d[i]) return CUDNN_STATUS_BAD_PARAM;
    const bool dbl = ad->dt == CUDNN_DATA_DOUBLE;
    const double a = scal(alpha, dbl), b = scal(beta, dbl);
    const int *cd = cdsc->d, *adim = ad->d;
    for (long i = 0; i < (long)cd[0] * cd[1] * cd[2] * cd[3]; i++) {
        long r = i, ai = 0, mul = 1;
        int idx[4];
        for (int d = 3; d >= 0; d--) idx[d] = (int)(r % cd[d]), r /= cd[d];
        for (int d = 3; d >= 0; d--) {
            ai += (adim[d] == 1 ? 0 : idx[d]) * mul;
            mul *= adim[d];
        }
        st(C, dbl, i, a * ld(A, dbl, ai) + b * ld(C, dbl, i));
    }
    return CUDNN_STATUS_SUCCESS;
}

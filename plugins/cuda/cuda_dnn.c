/* conv2d, conv_transpose2d (cuDNN's backward data) and conv2d_weight_grad
 * (cuDNN's backward filter) of the cuda plugin, in f32 and f64, through
 * cuDNN's convolution API, opened at run time: dlopen("libcudnn.so.9") on
 * the first claim asked, so the plugin needs cuDNN neither to build (CMake
 * defines OAR_CUDA_CUDNN only where it finds cudnn.h) nor to load; where
 * the library cannot be opened, or OAR_CUDA_CUDNN=0, these ops are not
 * claimed and run on the CPU; OAR_CUDA_CUDNN_LIB names another library to
 * open instead (the tests' fake, tests/devices/plugins/fake_cudnn.c).
 * [N, C, L] operands are [N, C, 1, L].
 * Operands that are not dense NCHW are first copied into dense scratch on
 * the device (cuDNN's filters must be packed; expanded inputs too), and a
 * result for an output that is not dense is made in scratch and copied out.
 * f32 runs with CUDNN_FMA_MATH (no TF32: the CPU's values), the algorithm
 * is cuDNN's first heuristic choice (the _v7 queries) whose workspace size
 * it gives, remembered per shape (64 kept), the workspace and scratch come from the plugin's caching
 * allocator and go back once their work is queued (cuda_mem.c's stream
 * rule), and each device has one cuDNN handle on its stream. */
#include "cuda_dnn.h"

#include <cudnn.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_kernels.h"

#define DT_F32 6
#define DT_F64 7

#define DNN_FUNCS(X)                                                                                         \
    X(cudnnGetVersion) X(cudnnCreate) X(cudnnDestroy) X(cudnnSetStream) X(cudnnGetErrorString)               \
    X(cudnnCreateTensorDescriptor) X(cudnnDestroyTensorDescriptor) X(cudnnSetTensor4dDescriptor)             \
    X(cudnnCreateFilterDescriptor) X(cudnnDestroyFilterDescriptor) X(cudnnSetFilter4dDescriptor)             \
    X(cudnnCreateConvolutionDescriptor) X(cudnnDestroyConvolutionDescriptor)                                 \
    X(cudnnSetConvolution2dDescriptor) X(cudnnSetConvolutionGroupCount) X(cudnnSetConvolutionMathType)       \
    X(cudnnGetConvolutionForwardAlgorithm_v7) X(cudnnGetConvolutionForwardWorkspaceSize)                     \
    X(cudnnConvolutionForward) X(cudnnGetConvolutionBackwardDataAlgorithm_v7)                                \
    X(cudnnGetConvolutionBackwardDataWorkspaceSize) X(cudnnConvolutionBackwardData)                          \
    X(cudnnGetConvolutionBackwardFilterAlgorithm_v7) X(cudnnGetConvolutionBackwardFilterWorkspaceSize)       \
    X(cudnnConvolutionBackwardFilter) X(cudnnAddTensor)

static struct {
    void *lib;
    bool ok;
#define DNN_DECL(f) __typeof__(&f) f;
    DNN_FUNCS(DNN_DECL)
#undef DNN_DECL
} dnn;
static pthread_once_t dnn_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t dnn_lock = PTHREAD_MUTEX_INITIALIZER;
static cudnnHandle_t handles[OAR_CUDA_MAX_DEV];
static const oar_host_api *host;

void oar_cuda_dnn_init(const oar_host_api *h) { host = h; }

static void dnn_open(void) {
    const char *off = getenv("OAR_CUDA_CUDNN");
    if (off && !strcmp(off, "0")) return;
    const char *path = getenv("OAR_CUDA_CUDNN_LIB"); /* another library (the tests' fake) */
    void *lib = dlopen(path && *path ? path : "libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
    if (!lib && !(path && *path)) lib = dlopen("libcudnn.so", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        char msg[300];
        snprintf(msg, sizeof msg, "cuDNN not found (%s): conv2d and its gradients run on the CPU", dlerror());
        if (host && host->log) host->log(1, "cuda", msg);
        return;
    }
    bool all = true;
#define DNN_LOAD(f) all = all && (*(void **)&dnn.f = dlsym(lib, #f)) != NULL;
    DNN_FUNCS(DNN_LOAD)
#undef DNN_LOAD
    if (!all || dnn.cudnnGetVersion() < 90000) {
        if (host && host->log) host->log(1, "cuda", "libcudnn lacks a function or is older than 9: conv2d runs on the CPU");
        dlclose(lib);
        memset(&dnn, 0, sizeof dnn);
        return;
    }
    dnn.lib = lib;
    dnn.ok = true;
}

void oar_cuda_dnn_shutdown(void) {
    pthread_mutex_lock(&dnn_lock);
    for (int i = 0; i < OAR_CUDA_MAX_DEV; i++)
        if (handles[i]) {
            dnn.cudnnDestroy(handles[i]);
            handles[i] = NULL;
        }
    pthread_mutex_unlock(&dnn_lock);
    /* the library stays open: dlclose of cuDNN at exit is not safe (its own atexit work) */
}

enum { CONV_FWD, CONV_BWD_DATA, CONV_BWD_FILTER };

static int conv_kind(const char *op) {
    if (!op) return -1;
    if (!strcmp(op, "conv2d")) return CONV_FWD;
    if (!strcmp(op, "conv_transpose2d")) return CONV_BWD_DATA;
    if (!strcmp(op, "conv2d_weight_grad")) return CONV_BWD_FILTER;
    return -1;
}

bool oar_cuda_dnn_claims(const char *op, int32_t dt) {
    if (conv_kind(op) < 0 || (dt != DT_F32 && dt != DT_F64)) return false;
    pthread_once(&dnn_once, dnn_open);
    return dnn.ok;
}

/* A convolution as cuDNN sees it: x [N, C, H, W] -> y [N, K, P, Q] with a
 * filter [K, C/g, R, S]; which of them the call's tensors are depends on
 * the op: conv2d x, w -> y; conv_transpose2d: its input is y (dy), its
 * weight the filter, its output x (dx); conv2d_weight_grad: x, y (dy) ->
 * the filter (dw). */
typedef struct {
    int kind;
    int64_t x[4], y[4], f[4];
    int pad[2], stride[2], dil[2], groups;
    const oar_ktensor *tx, *ty, *tf, *bias; /* the call's tensors in those roles (bias: conv outputs') */
} conv_geom;

/* t's dims as 4 ([N, C, L] as [N, C, 1, L]) */
static void dims4(const oar_ktensor *t, int64_t *d) {
    d[0] = t->shape[0], d[1] = t->shape[1];
    d[2] = t->ndim == 4 ? t->shape[2] : 1;
    d[3] = t->shape[t->ndim - 1];
}

static int64_t fwd_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) {
    return (in + 2 * p - d * (k - 1) - 1) / s + 1;
}

/* The call's geometry; false for what cuDNN (or this code) does not take.
 * With no output yet (supports_op's question) the output's role is left
 * out of the checks that need it. */
static bool geom_of(const oar_kernel_call *c, conv_geom *g) {
    memset(g, 0, sizeof *g);
    g->kind = conv_kind(c->op);
    if (g->kind < 0 || c->n_in < 2 || !c->iattr) return false;
    const oar_ktensor *a = &c->in[0], *b = &c->in[1];
    const int nd = a->ndim;
    const int32_t dt = a->dtype;
    if ((nd != 3 && nd != 4) || b->ndim != nd || (dt != DT_F32 && dt != DT_F64) || b->dtype != dt) return false;
    const int64_t *ia = c->iattr;
    const int64_t *st, *pad, *dil;
    int64_t groups;
    if (g->kind == CONV_FWD) {
        if (c->n_iattr != 7) return false;
        st = ia, pad = ia + 2, dil = ia + 4, groups = ia[6];
    } else if (g->kind == CONV_BWD_DATA) {
        if (c->n_iattr != 9) return false;
        st = ia, pad = ia + 2, dil = ia + 6, groups = ia[8];
    } else {
        if (c->n_iattr != 11) return false;
        st = ia + 4, pad = ia + 6, dil = ia + 8, groups = ia[10];
    }
    for (int i = 0; i < 2; i++) {
        if (st[i] < 1 || pad[i] < 0 || dil[i] < 1 || st[i] > 1 << 20 || pad[i] > 1 << 20 || dil[i] > 1 << 20)
            return false;
        g->stride[i] = (int)st[i], g->pad[i] = (int)pad[i], g->dil[i] = (int)dil[i];
    }
    if (groups < 1 || groups > 1 << 20) return false;
    g->groups = (int)groups;
    const oar_ktensor *bias = c->n_in > 2 && c->in[2].buffer && c->in[2].dtype >= 0 ? &c->in[2] : NULL;
    if (bias && (bias->dtype != dt || bias->ndim != 1)) return false;
    const oar_ktensor *out = c->n_out > 0 ? &c->out[0] : NULL;
    if (out && (out->dtype != dt || out->ndim != nd)) return false;
    if (g->kind == CONV_FWD) {
        g->tx = a, g->tf = b, g->ty = out, g->bias = bias;
        dims4(a, g->x), dims4(b, g->f);
        g->y[0] = g->x[0], g->y[1] = g->f[0];
        g->y[2] = fwd_size(g->x[2], g->f[2], st[0], pad[0], dil[0]);
        g->y[3] = fwd_size(g->x[3], g->f[3], st[1], pad[1], dil[1]);
    } else if (g->kind == CONV_BWD_DATA) {
        g->ty = a, g->tf = b, g->tx = out, g->bias = bias;
        dims4(a, g->y), dims4(b, g->f);
        const int64_t *op = ia + 4;
        g->x[0] = g->y[0], g->x[1] = g->f[1] * groups;
        for (int i = 0; i < 2; i++)
            g->x[2 + i] = (g->y[2 + i] - 1) * st[i] - 2 * pad[i] + dil[i] * (g->f[2 + i] - 1) + op[i] + 1;
        /* cuDNN takes dx only where the forward convolution of it gives dy's size (output_padding < stride) */
        for (int i = 0; i < 2; i++)
            if (op[i] < 0 || op[i] >= st[i] || fwd_size(g->x[2 + i], g->f[2 + i], st[i], pad[i], dil[i]) != g->y[2 + i])
                return false;
    } else {
        g->tx = a, g->ty = b, g->tf = out;
        dims4(a, g->x), dims4(b, g->y);
        g->f[0] = ia[0], g->f[1] = ia[1], g->f[2] = nd == 4 ? ia[2] : 1, g->f[3] = ia[3];
        if (nd == 3 && ia[2] != 1 && ia[2] != 0) return false;
        if (fwd_size(g->x[2], g->f[2], st[0], pad[0], dil[0]) != g->y[2] ||
            fwd_size(g->x[3], g->f[3], st[1], pad[1], dil[1]) != g->y[3])
            return false;
    }
    if (nd == 3 && (g->stride[0] != 1 || g->pad[0] != 0 || g->dil[0] != 1)) return false;
    if (g->x[1] != g->f[1] * groups || g->f[0] % groups || g->y[1] != g->f[0] || g->x[0] != g->y[0]) return false;
    if (bias && bias->shape[0] != (g->kind == CONV_BWD_DATA ? g->x[1] : g->f[0])) /* the output's channels */
        return false;
    for (int i = 0; i < 4; i++)
        if (g->x[i] < 1 || g->y[i] < 1 || g->f[i] < 1 || g->x[i] > 1 << 30 || g->y[i] > 1 << 30 || g->f[i] > 1 << 30)
            return false;
    if (out) { /* the output of the shape the geometry says */
        const int64_t *want = g->kind == CONV_FWD ? g->y : g->kind == CONV_BWD_DATA ? g->x : g->f;
        int64_t d[4];
        dims4(out, d);
        if (memcmp(d, want, sizeof d)) return false;
    }
    return true;
}

int oar_cuda_dnn_supports(const oar_kernel_call *c) {
    conv_geom g;
    return geom_of(c, &g);
}

static int dnn_fail(const char *what, cudnnStatus_t s) {
    char msg[256];
    snprintf(msg, sizeof msg, "cuda conv: %s failed: %s", what, dnn.cudnnGetErrorString(s));
    return host->error(-4, msg);
}

/* Whether t is dense NCHW (in its 4-dim reading): then cuDNN reads it in place. */
static bool is_dense(const oar_ktensor *t) {
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->strides[i] != s) return false;
        s *= t->shape[i];
    }
    return true;
}

static int64_t n_elems(const oar_ktensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

static oar_cuda_desc desc_of(const oar_ktensor *t, int64_t off) {
    oar_cuda_desc d;
    memset(&d, 0, sizeof d);
    d.off = off;
    d.nd = t->ndim;
    for (int i = 0; i < t->ndim; i++) d.shape[i] = t->shape[i], d.st[i] = t->strides[i];
    return d;
}

static oar_cuda_desc dense_desc(const oar_ktensor *t) {
    oar_cuda_desc d;
    memset(&d, 0, sizeof d);
    d.nd = t->ndim;
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) d.shape[i] = t->shape[i], d.st[i] = s, s *= t->shape[i];
    return d;
}

typedef struct {
    void *p;
    size_t bytes;
} scratch;

/* t's data as dense NCHW on the device: in place, or copied into scratch s
 * (copy_in: its values copied there; an output's scratch is written by
 * cuDNN and copied out later). NULL after reporting. */
static void *dense_ptr(int dev, cudaStream_t st, const oar_ktensor *t, size_t es, bool copy_in, scratch *s) {
    if (is_dense(t)) return (char *)t->buffer + t->offset * (int64_t)es;
    s->bytes = (size_t)n_elems(t) * es;
    if (!(s->p = oar_cuda_mem_alloc(dev, s->bytes ? s->bytes : 1))) return NULL;
    if (copy_in) {
        int e = oar_cuda_convert(s->p, t->dtype, dense_desc(t), t->buffer, t->dtype, desc_of(t, t->offset), n_elems(t), st);
        if (e) {
            char msg[160];
            snprintf(msg, sizeof msg, "cuda conv: copying an operand into dense scratch failed: %s",
                     cudaGetErrorString((cudaError_t)e));
            host->error(-4, msg);
            return NULL;
        }
    }
    return s->p;
}

/* the device's cuDNN handle, on its stream */
static cudnnHandle_t handle_of(int dev, cudaStream_t st) {
    pthread_mutex_lock(&dnn_lock);
    cudnnStatus_t s = CUDNN_STATUS_SUCCESS;
    if (!handles[dev]) {
        cudnnHandle_t h;
        s = dnn.cudnnCreate(&h);
        if (s == CUDNN_STATUS_SUCCESS && (s = dnn.cudnnSetStream(h, st)) != CUDNN_STATUS_SUCCESS) dnn.cudnnDestroy(h);
        if (s == CUDNN_STATUS_SUCCESS) handles[dev] = h;
    }
    cudnnHandle_t h = handles[dev];
    pthread_mutex_unlock(&dnn_lock);
    if (s != CUDNN_STATUS_SUCCESS) dnn_fail("cudnnCreate or cudnnSetStream", s);
    return h;
}

/* The algorithm of a convolution and its workspace: cuDNN's first
 * heuristic choice (the _v7 query) whose workspace size it can say,
 * remembered per (device, dtype, geometry) so that later calls of the
 * same shape make no query (N_CHOICES kept, replaced in turn). */
#define N_CHOICES 64
typedef struct {
    bool used;
    int64_t key[24];
    int algo;
    size_t ws;
} choice;
static choice choices[N_CHOICES];
static int next_choice;

static void key_of(int dev, int32_t dt, const conv_geom *g, int64_t *k) {
    memset(k, 0, sizeof(int64_t) * 24);
    k[0] = dev, k[1] = dt, k[2] = g->kind, k[3] = g->groups;
    for (int i = 0; i < 4; i++) k[4 + i] = g->x[i], k[8 + i] = g->y[i], k[12 + i] = g->f[i];
    for (int i = 0; i < 2; i++) k[16 + i] = g->pad[i], k[18 + i] = g->stride[i], k[20 + i] = g->dil[i];
}

static int choose(cudnnHandle_t h, int dev, int32_t dt, const conv_geom *g, cudnnTensorDescriptor_t xd,
                  cudnnFilterDescriptor_t fd, cudnnConvolutionDescriptor_t cd, cudnnTensorDescriptor_t yd, int *algo,
                  size_t *ws) {
    int64_t key[24];
    key_of(dev, dt, g, key);
    pthread_mutex_lock(&dnn_lock);
    for (int i = 0; i < N_CHOICES; i++)
        if (choices[i].used && !memcmp(choices[i].key, key, sizeof key)) {
            *algo = choices[i].algo, *ws = choices[i].ws;
            pthread_mutex_unlock(&dnn_lock);
            return 0;
        }
    pthread_mutex_unlock(&dnn_lock);
    enum { N_ALGO = 8 };
    int n = 0, pick = -1, algos[N_ALGO];
    cudnnStatus_t s, status[N_ALGO];
    if (g->kind == CONV_FWD) {
        cudnnConvolutionFwdAlgoPerf_t perf[N_ALGO];
        s = dnn.cudnnGetConvolutionForwardAlgorithm_v7(h, xd, fd, cd, yd, N_ALGO, &n, perf);
        for (int i = 0; i < n && i < N_ALGO; i++) algos[i] = (int)perf[i].algo, status[i] = perf[i].status;
    } else if (g->kind == CONV_BWD_DATA) {
        cudnnConvolutionBwdDataAlgoPerf_t perf[N_ALGO];
        s = dnn.cudnnGetConvolutionBackwardDataAlgorithm_v7(h, fd, yd, cd, xd, N_ALGO, &n, perf);
        for (int i = 0; i < n && i < N_ALGO; i++) algos[i] = (int)perf[i].algo, status[i] = perf[i].status;
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t perf[N_ALGO];
        s = dnn.cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, xd, yd, cd, fd, N_ALGO, &n, perf);
        for (int i = 0; i < n && i < N_ALGO; i++) algos[i] = (int)perf[i].algo, status[i] = perf[i].status;
    }
    if (s != CUDNN_STATUS_SUCCESS) return dnn_fail("choosing an algorithm", s);
    for (int i = 0; i < n && i < N_ALGO && pick < 0; i++) {
        if (status[i] != CUDNN_STATUS_SUCCESS) continue;
        if (g->kind == CONV_FWD)
            s = dnn.cudnnGetConvolutionForwardWorkspaceSize(h, xd, fd, cd, yd, (cudnnConvolutionFwdAlgo_t)algos[i], ws);
        else if (g->kind == CONV_BWD_DATA)
            s = dnn.cudnnGetConvolutionBackwardDataWorkspaceSize(h, fd, yd, cd, xd,
                                                                 (cudnnConvolutionBwdDataAlgo_t)algos[i], ws);
        else
            s = dnn.cudnnGetConvolutionBackwardFilterWorkspaceSize(h, xd, yd, cd, fd,
                                                                   (cudnnConvolutionBwdFilterAlgo_t)algos[i], ws);
        if (s == CUDNN_STATUS_SUCCESS) pick = i;
    }
    if (pick < 0) return host->error(-4, "cuda conv: cuDNN offers no algorithm for this convolution");
    *algo = algos[pick];
    pthread_mutex_lock(&dnn_lock);
    choice *c = &choices[next_choice];
    next_choice = (next_choice + 1) % N_CHOICES;
    c->used = true, c->algo = *algo, c->ws = *ws;
    memcpy(c->key, key, sizeof key);
    pthread_mutex_unlock(&dnn_lock);
    return 0;
}

int oar_cuda_dnn_run(const oar_kernel_call *c, int dev, cudaStream_t st) {
    conv_geom g;
    if (!dnn.ok) return host->error(-3, "cuda conv: cuDNN is not loaded");
    if (c->n_out < 1 || !geom_of(c, &g))
        return host->error(-3, "cuda conv: a convolution cuDNN does not take here (its attributes, ranks or "
                               "dtypes); supports_op refuses these, so oar runs them on the CPU");
    cudnnHandle_t h = handle_of(dev, st);
    if (!h) return -4;
    const int32_t dt = c->in[0].dtype;
    const size_t es = dt == DT_F64 ? 8 : 4;
    const cudnnDataType_t cdt = dt == DT_F64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
    const oar_ktensor *out = &c->out[0];
    scratch sx = {0}, sy = {0}, sf = {0}, sw = {0};
    void *px = dense_ptr(dev, st, g.tx, es, g.tx != out, &sx);
    void *py = px ? dense_ptr(dev, st, g.ty, es, g.ty != out, &sy) : NULL;
    void *pf = py ? dense_ptr(dev, st, g.tf, es, g.tf != out, &sf) : NULL;
    cudnnTensorDescriptor_t xd = NULL, yd = NULL, bd = NULL;
    cudnnFilterDescriptor_t fd = NULL;
    cudnnConvolutionDescriptor_t cd = NULL;
    cudnnStatus_t s = CUDNN_STATUS_SUCCESS;
    int rc = pf ? 0 : -4;
    const char *what = "a descriptor";
#define DNN(call)                                                                                            \
    if (!rc && (s = (call)) != CUDNN_STATUS_SUCCESS) rc = dnn_fail(what, s)
    DNN(dnn.cudnnCreateTensorDescriptor(&xd));
    DNN(dnn.cudnnCreateTensorDescriptor(&yd));
    DNN(dnn.cudnnCreateFilterDescriptor(&fd));
    DNN(dnn.cudnnCreateConvolutionDescriptor(&cd));
    DNN(dnn.cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NCHW, cdt, (int)g.x[0], (int)g.x[1], (int)g.x[2], (int)g.x[3]));
    DNN(dnn.cudnnSetTensor4dDescriptor(yd, CUDNN_TENSOR_NCHW, cdt, (int)g.y[0], (int)g.y[1], (int)g.y[2], (int)g.y[3]));
    DNN(dnn.cudnnSetFilter4dDescriptor(fd, cdt, CUDNN_TENSOR_NCHW, (int)g.f[0], (int)g.f[1], (int)g.f[2], (int)g.f[3]));
    what = "the convolution descriptor";
    DNN(dnn.cudnnSetConvolution2dDescriptor(cd, g.pad[0], g.pad[1], g.stride[0], g.stride[1], g.dil[0], g.dil[1],
                                            CUDNN_CROSS_CORRELATION, cdt));
    DNN(dnn.cudnnSetConvolutionGroupCount(cd, g.groups));
    DNN(dnn.cudnnSetConvolutionMathType(cd, dt == DT_F32 ? CUDNN_FMA_MATH : CUDNN_DEFAULT_MATH)); /* no TF32 */
    const double one_d = 1, zero_d = 0;
    const float one_f = 1, zero_f = 0;
    const void *one = dt == DT_F64 ? (const void *)&one_d : (const void *)&one_f;
    const void *zero = dt == DT_F64 ? (const void *)&zero_d : (const void *)&zero_f;
    int algo = 0;
    size_t ws = 0;
    void *work = NULL;
    what = "choosing an algorithm";
    if (!rc) rc = choose(h, dev, dt, &g, xd, fd, cd, yd, &algo, &ws);
    if (!rc && ws && !(work = oar_cuda_mem_alloc(dev, ws))) rc = -4;
    if (g.kind == CONV_FWD) {
        what = "cudnnConvolutionForward";
        DNN(dnn.cudnnConvolutionForward(h, one, xd, px, fd, pf, cd, (cudnnConvolutionFwdAlgo_t)algo, work, ws, zero,
                                        yd, py));
    } else if (g.kind == CONV_BWD_DATA) {
        what = "cudnnConvolutionBackwardData";
        DNN(dnn.cudnnConvolutionBackwardData(h, one, fd, pf, yd, py, cd, (cudnnConvolutionBwdDataAlgo_t)algo, work, ws,
                                             zero, xd, px));
    } else {
        what = "cudnnConvolutionBackwardFilter";
        DNN(dnn.cudnnConvolutionBackwardFilter(h, one, xd, px, yd, py, cd, (cudnnConvolutionBwdFilterAlgo_t)algo, work,
                                               ws, zero, fd, pf));
    }
    /* the bias of conv2d / conv_transpose2d, added over [1, channels, 1, 1] */
    const oar_ktensor *bias = g.bias;
    void *pb = NULL;
    void *pout = g.kind == CONV_FWD ? py : g.kind == CONV_BWD_DATA ? px : pf;
    if (!rc && bias) {
        what = "adding the bias";
        pb = dense_ptr(dev, st, bias, es, true, &sw);
        if (!pb) rc = -4;
        DNN(dnn.cudnnCreateTensorDescriptor(&bd));
        DNN(dnn.cudnnSetTensor4dDescriptor(bd, CUDNN_TENSOR_NCHW, cdt, 1, (int)bias->shape[0], 1, 1));
        DNN(dnn.cudnnAddTensor(h, one, bd, pb, one, g.kind == CONV_FWD ? yd : xd, pout));
    }
#undef DNN
    /* a result made in scratch goes to the output view */
    scratch *so = g.kind == CONV_FWD ? &sy : g.kind == CONV_BWD_DATA ? &sx : &sf;
    if (!rc && so->p) {
        int e = oar_cuda_convert(out->buffer, dt, desc_of(out, out->offset), so->p, dt, dense_desc(out), n_elems(out), st);
        if (e) {
            char msg[160];
            snprintf(msg, sizeof msg, "cuda conv: copying the result out failed: %s", cudaGetErrorString((cudaError_t)e));
            rc = host->error(-4, msg);
        }
    }
    if (bd) dnn.cudnnDestroyTensorDescriptor(bd);
    if (xd) dnn.cudnnDestroyTensorDescriptor(xd);
    if (yd) dnn.cudnnDestroyTensorDescriptor(yd);
    if (fd) dnn.cudnnDestroyFilterDescriptor(fd);
    if (cd) dnn.cudnnDestroyConvolutionDescriptor(cd);
    if (work) oar_cuda_mem_free(dev, work, ws); /* queued work first: the allocator's stream rule */
    scratch *all[4] = {&sx, &sy, &sf, &sw};
    for (int i = 0; i < 4; i++)
        if (all[i]->p) oar_cuda_mem_free(dev, all[i]->p, all[i]->bytes ? all[i]->bytes : 1);
    return rc;
}

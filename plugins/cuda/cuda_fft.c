/* The FFT ops of the cuda plugin through cuFFT: a call is turned into a
 * layout (cuda_fft_layout.h: a gather of the input into a dense scratch
 * in a permuted dim order, one or two cuFFT transforms on it, for c2r the
 * imaginary parts cuFFT must not see set to 0, and a scaled scatter into
 * the output view), and the layout's transforms run through cuFFT plans
 * cached per (device, precision, plan shape). Everything is queued on the
 * device's stream: the gathers and scatters (cuda_kernels.cu), the plans
 * (cufftSetStream before each exec), and the scratch and the plans' work
 * areas, which come from the plugin's caching allocator (cuFFT allocates
 * nothing itself: cufftSetAutoAllocation 0) and go back to it as soon as
 * their work is queued, which the allocator's stream rule makes safe
 * (cuda_mem.c). f32/c64 and f64/c128; f16 has no route (oar's FFT ops
 * have no half dtypes).
 * cuFFT is opened at run time, as cuda_dnn.c opens cuDNN: dlopen of
 * libcufft.so.12 on the first claim asked, so the plugin loads, and claims
 * every other op, on a machine without cuFFT (the library is 280 MB and not
 * every GPU image has it). Where it cannot be opened, or OAR_CUDA_CUFFT=0,
 * the FFT ops are not claimed and run on the CPU, and a line in oar's log
 * says why; OAR_CUDA_CUFFT_LIB names another library to open instead (the
 * tests' model of cuFFT, tests/devices/plugins/fake_cufft_lib.c). Only
 * cufft.h is needed to build. */
#include "cuda_fft.h"

#include <cufft.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_fft_layout.h"
#include "cuda_kernels.h"

#define DT_F32 6
#define DT_F64 7
#define DT_C64 8
#define DT_C128 9
#define N_PLANS 32 /* cached plans, least recently used replaced */

static const oar_host_api *host;

#define FFT_FUNCS(X)                                                                                         \
    X(cufftGetVersion) X(cufftCreate) X(cufftDestroy) X(cufftSetAutoAllocation) X(cufftSetWorkArea)           \
    X(cufftSetStream) X(cufftMakePlanMany64) X(cufftExecC2C) X(cufftExecZ2Z) X(cufftExecR2C) X(cufftExecD2Z) \
    X(cufftExecC2R) X(cufftExecZ2D)

static struct {
    bool ok;
#define FFT_DECL(f) __typeof__(&f) f;
    FFT_FUNCS(FFT_DECL)
#undef FFT_DECL
} fft;
static pthread_once_t fft_once = PTHREAD_ONCE_INIT;
static char fft_why[360]; /* why cuFFT is not there ("" when it is, or before the first claim asked) */

/* Opens cuFFT once (the library stays open: plans name it until shutdown). */
static void fft_open(void) {
    const char *off = getenv("OAR_CUDA_CUFFT");
    if (off && !strcmp(off, "0")) {
        snprintf(fft_why, sizeof fft_why, "cuFFT is off (OAR_CUDA_CUFFT=0)");
        return;
    }
    const char *path = getenv("OAR_CUDA_CUFFT_LIB"); /* another library (the tests' model of cuFFT) */
    void *lib = dlopen(path && *path ? path : "libcufft.so.12", RTLD_NOW | RTLD_LOCAL);
    if (!lib && !(path && *path)) lib = dlopen("libcufft.so", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *e = dlerror();
        snprintf(fft_why, sizeof fft_why, "cuFFT not found (%s)", e ? e : "dlopen failed");
    } else {
        bool all = true;
#define FFT_LOAD(f) all = all && (*(void **)&fft.f = dlsym(lib, #f)) != NULL;
        FFT_FUNCS(FFT_LOAD)
#undef FFT_LOAD
        int version = 0;
        if (all && fft.cufftGetVersion(&version) == CUFFT_SUCCESS && version >= 11000) {
            fft.ok = true;
            return;
        }
        snprintf(fft_why, sizeof fft_why, "libcufft lacks a function or is older than 11 (version %d)", version);
        dlclose(lib);
        memset(&fft, 0, sizeof fft);
    }
    if (host && host->log) {
        char msg[sizeof fft_why + 64];
        snprintf(msg, sizeof msg, "%s: fft_c2c, fft_r2c and fft_c2r run on the CPU", fft_why);
        host->log(1, "cuda", msg);
    }
}

bool oar_cuda_fft_available(void) {
    pthread_once(&fft_once, fft_open);
    return fft.ok;
}

typedef struct {
    bool used;
    int dev;
    bool dbl;
    oar_cuda_fft_many key;
    cufftHandle h;
    size_t work; /* the plan's work area, in bytes (allocated per exec) */
    unsigned long long last;
} plan_slot;
static plan_slot plans[N_PLANS];
static unsigned long long plan_clock;
static pthread_mutex_t plan_lock = PTHREAD_MUTEX_INITIALIZER;

void oar_cuda_fft_init(const oar_host_api *h) { host = h; }

void oar_cuda_fft_shutdown(void) {
    pthread_mutex_lock(&plan_lock);
    for (int i = 0; i < N_PLANS; i++)
        if (plans[i].used) { /* (a plan exists only where cuFFT was opened) */
            fft.cufftDestroy(plans[i].h);
            plans[i].used = false;
        }
    pthread_mutex_unlock(&plan_lock);
}

int oar_cuda_fft_cached_plans(void) {
    int n = 0;
    pthread_mutex_lock(&plan_lock);
    for (int i = 0; i < N_PLANS; i++) n += plans[i].used;
    pthread_mutex_unlock(&plan_lock);
    return n;
}

static int kind_of(const char *op) {
    if (!op) return -1;
    if (!strcmp(op, "fft_c2c")) return OAR_CUDA_FFT_C2C;
    if (!strcmp(op, "fft_r2c")) return OAR_CUDA_FFT_R2C;
    if (!strcmp(op, "fft_c2r")) return OAR_CUDA_FFT_C2R;
    return -1;
}

bool oar_cuda_fft_claims(const char *op, int32_t dt) {
    int k = kind_of(op);
    bool typed = k == OAR_CUDA_FFT_R2C ? dt == DT_F32 || dt == DT_F64 : k >= 0 && (dt == DT_C64 || dt == DT_C128);
    return typed && oar_cuda_fft_available(); /* (opens cuFFT at the first FFT op asked) */
}

static const char *result_str(cufftResult r) {
    switch (r) {
    case CUFFT_INVALID_PLAN: return "invalid plan";
    case CUFFT_ALLOC_FAILED: return "allocation failed";
    case CUFFT_INVALID_TYPE: return "invalid type";
    case CUFFT_INVALID_VALUE: return "invalid value";
    case CUFFT_INTERNAL_ERROR: return "internal error";
    case CUFFT_EXEC_FAILED: return "exec failed";
    case CUFFT_SETUP_FAILED: return "setup failed";
    case CUFFT_INVALID_SIZE: return "invalid size";
    case CUFFT_NOT_SUPPORTED: return "not supported";
    default: return "error";
    }
}

static int cufft_fail(const char *what, cufftResult r) {
    char msg[160];
    snprintf(msg, sizeof msg, "cuda fft: %s failed: %s (cufftResult %d)", what, result_str(r), (int)r);
    return host->error(-4, msg);
}

static int cuda_fail(const char *what, int e) {
    char msg[200];
    snprintf(msg, sizeof msg, "cuda fft: %s failed: %s", what, cudaGetErrorString((cudaError_t)e));
    return host->error(-4, msg);
}

/* The input and output dtypes of a kind in a precision. */
static void dtypes_of(int kind, bool dbl, int32_t *in, int32_t *out) {
    int32_t r = dbl ? DT_F64 : DT_F32, cx = dbl ? DT_C128 : DT_C64;
    *in = kind == OAR_CUDA_FFT_R2C ? r : cx;
    *out = kind == OAR_CUDA_FFT_C2R ? r : cx;
}

static cufftType cufft_type(int t, bool dbl) {
    if (t == OAR_CUDA_FFT_R2C) return dbl ? CUFFT_D2Z : CUFFT_R2C;
    if (t == OAR_CUDA_FFT_C2R) return dbl ? CUFFT_Z2D : CUFFT_C2R;
    return dbl ? CUFFT_Z2Z : CUFFT_C2C;
}

/* The same cuFFT plan (the direction is the exec's, not the plan's). */
static bool same_plan(const oar_cuda_fft_many *a, const oar_cuda_fft_many *b) {
    if (a->type != b->type || a->rank != b->rank || a->istride != b->istride || a->idist != b->idist ||
        a->ostride != b->ostride || a->odist != b->odist || a->batch != b->batch)
        return false;
    for (int j = 0; j < a->rank; j++)
        if (a->n[j] != b->n[j] || a->inembed[j] != b->inembed[j] || a->onembed[j] != b->onembed[j]) return false;
    return true;
}

/* The cached plan of (dev, dbl, m), made when missing; plan_lock held.
 * NULL after reporting. */
static plan_slot *plan_get(int dev, bool dbl, const oar_cuda_fft_many *m) {
    plan_slot *victim = NULL;
    for (int i = 0; i < N_PLANS; i++) {
        plan_slot *s = &plans[i];
        if (s->used && s->dev == dev && s->dbl == dbl && same_plan(&s->key, m)) {
            s->last = ++plan_clock;
            return s;
        }
        if (!victim || (victim->used && (!s->used || s->last < victim->last))) victim = s;
    }
    if (victim->used) {
        fft.cufftDestroy(victim->h);
        victim->used = false;
    }
    cufftHandle h;
    cufftResult r = fft.cufftCreate(&h);
    if (r != CUFFT_SUCCESS) return cufft_fail("cufftCreate", r), NULL;
    long long n[3], ie[3], oe[3];
    for (int j = 0; j < 3; j++) n[j] = m->n[j], ie[j] = m->inembed[j], oe[j] = m->onembed[j];
    size_t work = 0;
    if ((r = fft.cufftSetAutoAllocation(h, 0)) != CUFFT_SUCCESS ||
        (r = fft.cufftMakePlanMany64(h, m->rank, n, ie, m->istride, m->idist, oe, m->ostride, m->odist,
                                 cufft_type(m->type, dbl), m->batch, &work)) != CUFFT_SUCCESS) {
        fft.cufftDestroy(h);
        return cufft_fail("cufftMakePlanMany64", r), NULL;
    }
    *victim = (plan_slot){.used = true, .dev = dev, .dbl = dbl, .key = *m, .h = h, .work = work,
                          .last = ++plan_clock};
    return victim;
}

/* Runs one transform of the layout on stream st: in -> out (the same
 * buffer for an in-place one). */
static int plan_run(int dev, cudaStream_t st, bool dbl, const oar_cuda_fft_many *m, void *in, void *out) {
    pthread_mutex_lock(&plan_lock); /* the plan's stream and work area are set per exec */
    plan_slot *s = plan_get(dev, dbl, m);
    void *work = NULL;
    size_t wbytes = s ? s->work : 0;
    int rc = s ? 0 : -4;
    cufftResult r = CUFFT_SUCCESS;
    if (!rc && wbytes && !(work = oar_cuda_mem_alloc(dev, wbytes))) rc = -4;
    if (!rc && ((r = fft.cufftSetWorkArea(s->h, work)) != CUFFT_SUCCESS || (r = fft.cufftSetStream(s->h, st)) != CUFFT_SUCCESS))
        rc = cufft_fail("cufftSetWorkArea or cufftSetStream", r);
    if (!rc) {
        switch (m->type) {
        case OAR_CUDA_FFT_C2C:
            r = dbl ? fft.cufftExecZ2Z(s->h, in, out, m->dir) : fft.cufftExecC2C(s->h, in, out, m->dir);
            break;
        case OAR_CUDA_FFT_R2C: r = dbl ? fft.cufftExecD2Z(s->h, in, out) : fft.cufftExecR2C(s->h, in, out); break;
        default: r = dbl ? fft.cufftExecZ2D(s->h, in, out) : fft.cufftExecC2R(s->h, in, out); break;
        }
        if (r != CUFFT_SUCCESS) rc = cufft_fail("cufftExec", r);
    }
    pthread_mutex_unlock(&plan_lock);
    if (work) oar_cuda_mem_free(dev, work, wbytes); /* its exec is queued before any next user's */
    return rc;
}

/* The call's layout, from its views and attributes; false when it has
 * none (what supports_op refuses). out_shape: the output's shape (from
 * the output, or the op's shape rule when there is no output yet). */
static bool layout_of(const oar_kernel_call *c, oar_cuda_fft_layout *L, bool *dbl) {
    int kind = kind_of(c->op);
    if (kind < 0 || c->n_in < 1 || c->n_iattr < 4 || !c->iattr) return false;
    const oar_ktensor *x = &c->in[0];
    int k = (int)c->iattr[2];
    if (k < 1 || k > x->ndim || c->n_iattr != 3 + k || x->ndim > 8) return false;
    const int32_t xd = x->dtype;
    *dbl = xd == DT_F64 || xd == DT_C128;
    int32_t want_in, want_out;
    dtypes_of(kind, *dbl, &want_in, &want_out);
    if (xd != want_in) return false;
    int64_t out_shape[8];
    memcpy(out_shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    const int64_t *dims = c->iattr + 3;
    int h = (int)dims[k - 1];
    if (h < 0 || h >= x->ndim) return false;
    if (kind == OAR_CUDA_FFT_R2C) out_shape[h] = x->shape[h] / 2 + 1;
    if (kind == OAR_CUDA_FFT_C2R) out_shape[h] = c->iattr[1];
    if (c->n_out > 0) {
        const oar_ktensor *o = &c->out[0];
        if (o->dtype != want_out || o->ndim != x->ndim || memcmp(o->shape, out_shape, sizeof(int64_t) * (size_t)x->ndim))
            return false;
    }
    return oar_cuda_fft_layout_make(kind, x->ndim, x->shape, out_shape, k, dims, (int)c->iattr[1], (int)c->iattr[0], L);
}

int oar_cuda_fft_supports(const oar_kernel_call *c) {
    oar_cuda_fft_layout L;
    bool dbl;
    return oar_cuda_fft_available() && layout_of(c, &L, &dbl);
}

/* t's view in the layout's dim order (perm), its strides and offset */
static oar_cuda_desc permuted(const oar_ktensor *t, const int *perm) {
    oar_cuda_desc d;
    memset(&d, 0, sizeof d);
    d.off = t->offset;
    d.nd = t->ndim;
    for (int i = 0; i < t->ndim; i++) {
        d.shape[i] = t->shape[perm[i]];
        d.st[i] = t->strides[perm[i]];
    }
    return d;
}

/* the dense scratch of t's shape in the layout's dim order */
static oar_cuda_desc dense(const oar_ktensor *t, const int *perm) {
    oar_cuda_desc d;
    memset(&d, 0, sizeof d);
    d.nd = t->ndim;
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        d.shape[i] = t->shape[perm[i]];
        d.st[i] = s;
        s *= d.shape[i];
    }
    return d;
}

int oar_cuda_fft_run(const oar_kernel_call *c, int dev, cudaStream_t st) {
    oar_cuda_fft_layout L;
    bool dbl;
    if (!oar_cuda_fft_available()) { /* (get_kernel does not claim these then: a caller that asked nothing) */
        char msg[sizeof fft_why + 128];
        snprintf(msg, sizeof msg, "cuda fft: %s; the plugin does not claim the FFT ops without it (install "
                 "libcufft.so.12 or put its folder on LD_LIBRARY_PATH)", fft_why);
        return host->error(-3, msg);
    }
    if (c->n_out < 1 || !layout_of(c, &L, &dbl))
        return host->error(-3, "cuda fft: a transform the plugin cannot lay out for cuFFT (more than three "
                               "dims of extent > 1, a half dim of extent 1, or mismatched views); supports_op "
                               "refuses these, so oar runs them on the CPU");
    if (L.in_numel == 0) return 0;
    const oar_ktensor *x = &c->in[0], *o = &c->out[0];
    const size_t es_in = x->dtype == DT_C128 ? 16 : x->dtype == DT_F32 ? 4 : 8;
    const size_t es_out = o->dtype == DT_C128 ? 16 : o->dtype == DT_F32 ? 4 : 8;
    const size_t a_bytes = (size_t)L.in_numel * es_in, b_bytes = L.out_in_place ? 0 : (size_t)L.out_numel * es_out;
    void *a = oar_cuda_mem_alloc(dev, a_bytes), *b = NULL;
    if (!a) return -4;
    if (b_bytes && !(b = oar_cuda_mem_alloc(dev, b_bytes))) {
        oar_cuda_mem_free(dev, a, a_bytes);
        return -4;
    }
    int rc = 0, e = oar_cuda_scaled_copy(a, dense(x, L.perm), x->buffer, permuted(x, L.perm), x->dtype, 1.0, L.in_numel, st);
    if (e) rc = cuda_fail("the gather", e);
    for (int p = 0; p < L.n_plans && !rc; p++) {
        const oar_cuda_fft_many *m = &L.plan[p];
        if (m->type == OAR_CUDA_FFT_C2R) /* what a Hermitian half cannot hold: oar's c2r ignores it */
            for (int z = 0; z < L.n_zero && !rc; z++)
                if ((e = oar_cuda_zero_imag(a, x->dtype, L.zero_off[z], L.zero_stride, L.zero_count, st)))
                    rc = cuda_fail("zeroing imaginary parts", e);
        if (!rc) rc = plan_run(dev, st, dbl, m, a, m->type == OAR_CUDA_FFT_C2C ? a : b);
    }
    if (!rc) {
        const void *res = L.out_in_place ? a : b;
        e = oar_cuda_scaled_copy(o->buffer, permuted(o, L.perm), res, dense(o, L.perm), o->dtype, L.scale,
                                 L.out_numel, st);
        if (e) rc = cuda_fail("the scatter", e);
    }
    oar_cuda_mem_free(dev, a, a_bytes); /* queued work first: the allocator's stream rule */
    if (b) oar_cuda_mem_free(dev, b, b_bytes);
    return rc;
}

/* The optional FFTW3 engine (fft_engine.h, oari_fft_fftw_dim): built only
 * with -DOAR_FFTW=ON, because FFTW is GPL-2+ and oar is Apache-2.0; the
 * in-tree engine stays the default. One FFTW guru plan transforms every
 * line along one dim of a tensor (the other dims are FFTW's "howmany"
 * loops), so a plan is made once per (kind, length, precision, direction,
 * strides, batch shape, in-place, alignment, threads) and cached for the
 * life of the process. FFTW's planner is not thread-safe: lookups and
 * planning hold one mutex; execution runs outside it on the caller's arrays
 * (fftw_execute_dft and friends are thread-safe), with the same strides
 * and alignment as planned. Plans use FFTW_ESTIMATE: FFTW_MEASURE would
 * time candidate plans on the whole batch (tens to hundreds of ms per new
 * shape, every shape a test or a model meets) for a few percent at run
 * time; see bench/RESULTS.md. */
#ifdef OAR_FFTW

#include "fft_engine.h"

#include <fftw3.h>
#include <omp.h>
#include <pthread.h>
#include <string.h>

/* The cache key: only int64_t members (no padding), compared bytewise. */
typedef struct {
    int64_t kind, dbl, sign, nthreads, inplace, align_in, align_out;
    int64_t n, is, os, hrank;
    int64_t hn[OAR_MAX_DIMS], his[OAR_MAX_DIMS], hos[OAR_MAX_DIMS];
} fkey;

typedef struct fentry {
    fkey key;
    void *plan; /* fftw_plan or fftwf_plan; NULL: FFTW could not plan it */
    struct fentry *next;
} fentry;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static fentry *cache;
static long cache_blocks;
static bool threads_ready;

long oari_fft_fftw_cache_blocks(void) {
    pthread_mutex_lock(&lock);
    long n = cache_blocks;
    pthread_mutex_unlock(&lock);
    return n;
}

/* Makes the plan for k (lock held); in, out: the arrays of this call (not
 * touched by FFTW_ESTIMATE planning). */
static void *make_plan(const fkey *k, void *in, void *out) {
    if (!threads_ready) {
        fftw_init_threads();
        fftwf_init_threads();
        threads_ready = true;
    }
    fftw_iodim64 dim = {.n = k->n, .is = k->is, .os = k->os}, hd[OAR_MAX_DIMS];
    fftwf_iodim64 dimf = {.n = k->n, .is = k->is, .os = k->os}, hdf[OAR_MAX_DIMS];
    for (int i = 0; i < k->hrank; i++) {
        hd[i] = (fftw_iodim64){.n = k->hn[i], .is = k->his[i], .os = k->hos[i]};
        hdf[i] = (fftwf_iodim64){.n = k->hn[i], .is = k->his[i], .os = k->hos[i]};
    }
    const int hr = (int)k->hrank;
    const unsigned flags = FFTW_ESTIMATE | (k->kind == OARI_FFT_C2R ? FFTW_PRESERVE_INPUT : 0);
    if (k->dbl) {
        fftw_plan_with_nthreads((int)k->nthreads);
        switch (k->kind) {
        case OARI_FFT_C2C: return fftw_plan_guru64_dft(1, &dim, hr, hd, in, out, (int)k->sign, flags);
        case OARI_FFT_R2C: return fftw_plan_guru64_dft_r2c(1, &dim, hr, hd, in, out, flags);
        default: return fftw_plan_guru64_dft_c2r(1, &dim, hr, hd, in, out, flags);
        }
    }
    fftwf_plan_with_nthreads((int)k->nthreads);
    switch (k->kind) {
    case OARI_FFT_C2C: return fftwf_plan_guru64_dft(1, &dimf, hr, hdf, in, out, (int)k->sign, flags);
    case OARI_FFT_R2C: return fftwf_plan_guru64_dft_r2c(1, &dimf, hr, hdf, in, out, flags);
    default: return fftwf_plan_guru64_dft_c2r(1, &dimf, hr, hdf, in, out, flags);
    }
}

/* The cached plan for k, planning it on first use. *plan NULL: FFTW has
 * none. Nonzero (error set) only when the cache entry cannot be allocated. */
static int plan_get(const fkey *k, void *in, void *out, void **plan) {
    pthread_mutex_lock(&lock);
    fentry *e = cache;
    while (e && memcmp(&e->key, k, sizeof *k)) e = e->next;
    if (!e && (e = oari_malloc(sizeof *e))) {
        e->key = *k;
        e->plan = make_plan(k, in, out);
        e->next = cache;
        cache = e;
        cache_blocks++;
    }
    pthread_mutex_unlock(&lock);
    if (!e) return OAR_ERR_NOMEM;
    *plan = e->plan;
    return 0;
}

/* dst *= scale over every line (n_out elements of es reals each). */
static void scale_lines(const fkey *k, int64_t n_out, int64_t es, void *dst, double scale) {
    int64_t lines = 1;
    for (int i = 0; i < k->hrank; i++) lines *= k->hn[i];
#pragma omp parallel for schedule(static) num_threads((int)k->nthreads) if (k->nthreads > 1)
    for (int64_t l = 0; l < lines; l++) {
        int64_t off = 0, r = l;
        for (int i = (int)k->hrank - 1; i >= 0; i--) {
            off += (r % k->hn[i]) * k->hos[i];
            r /= k->hn[i];
        }
        if (k->dbl) {
            double *o = (double *)dst + off * es;
            for (int64_t j = 0; j < n_out; j++)
                for (int64_t c = 0; c < es; c++) o[j * k->os * es + c] *= scale;
        } else {
            float *o = (float *)dst + off * es;
            const float s = (float)scale;
            for (int64_t j = 0; j < n_out; j++)
                for (int64_t c = 0; c < es; c++) o[j * k->os * es + c] *= s;
        }
    }
}

int oari_fft_fftw_dim(oari_fft_kind kind, int64_t n, bool dbl, bool inverse, double scale,
                      int nthreads, int ndim, const int64_t *shape, int d, const void *src,
                      const int64_t *src_strides, void *dst, const int64_t *dst_strides) {
    fkey k;
    memset(&k, 0, sizeof k);
    k.kind = kind;
    k.dbl = dbl;
    k.sign = inverse ? FFTW_BACKWARD : FFTW_FORWARD;
    k.nthreads = omp_in_parallel() ? 1 : nthreads; /* nested: FFTW's threads would not run */
    k.inplace = src == dst;
    void *in = (void *)src; /* FFTW takes non-const arrays; it reads this one only */
    k.align_in = dbl ? fftw_alignment_of(in) : fftwf_alignment_of(in);
    k.align_out = dbl ? fftw_alignment_of(dst) : fftwf_alignment_of(dst);
    k.n = n;
    k.is = src_strides[d];
    k.os = dst_strides[d];
    for (int i = 0; i < ndim; i++) {
        if (i == d || shape[i] == 1) continue;
        k.hn[k.hrank] = shape[i];
        k.his[k.hrank] = src_strides[i];
        k.hos[k.hrank++] = dst_strides[i];
    }
    void *plan;
    int st = plan_get(&k, in, dst, &plan);
    if (st) return st;
    if (!plan) return 1;
    if (dbl) {
        switch (kind) {
        case OARI_FFT_C2C: fftw_execute_dft(plan, in, dst); break;
        case OARI_FFT_R2C: fftw_execute_dft_r2c(plan, in, dst); break;
        case OARI_FFT_C2R: fftw_execute_dft_c2r(plan, in, dst); break;
        }
    } else {
        switch (kind) {
        case OARI_FFT_C2C: fftwf_execute_dft(plan, in, dst); break;
        case OARI_FFT_R2C: fftwf_execute_dft_r2c(plan, in, dst); break;
        case OARI_FFT_C2R: fftwf_execute_dft_c2r(plan, in, dst); break;
        }
    }
    if (scale != 1.0)
        scale_lines(&k, kind == OARI_FFT_C2R ? n : kind == OARI_FFT_R2C ? n / 2 + 1 : n,
                    kind == OARI_FFT_C2R ? 1 : 2, dst, scale);
    return 0;
}

#else
typedef int oari_fft_fftw_unused; /* ISO C: a translation unit is not empty */
#endif

/* The optional FFTW3 engine (fft_engine.h, oari_fft_fftw_dim): built only
 * with -DOAR_FFTW=ON, because FFTW is GPL-2+ and oar is Apache-2.0; the
 * in-tree engine stays the default. One FFTW guru plan transforms every
 * line along one dim of a tensor (the other dims are FFTW's "howmany"
 * loops), so a plan is made once per (kind, length, precision, direction,
 * strides, batch shape, in-place, alignment, threads) and cached for the
 * life of the process. FFTW's planner is not thread-safe: lookups and
 * planning hold one mutex; execution runs outside it on the caller's arrays
 * (fftw_execute_dft and friends are thread-safe), with the same strides
 * and alignment as planned. Plans use FFTW_ESTIMATE: FFTW_MEASURE times
 * candidate plans on the whole batch, 35 ms (rows) to 390 ms (columns) for
 * each new 16x256x256 shape a test or a model meets, to save ~0.7 ms per
 * row pass; most of what it would win on column passes the buffered path
 * below wins too. No wisdom is saved. FFTW's own allocations do
 * not go through oari_malloc (FFTW has no allocator hook). */
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
    if (!e) return oari_fail_status();
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

/* Lines along a strided dim (a column pass) are not FFTW_ESTIMATE's
 * strength: its plan walks each line at the stride, several times slower
 * than a row pass. Those go GROUP lines at a time through a small buffer
 * laid out as the source is, element e of line j at e * GROUP + j (so
 * adjacent lines copy as one run of GROUP elements), transformed there by
 * one FFTW plan (stride GROUP, GROUP lines 1 apart: FFTW's vector loop),
 * and scattered back with the scale; groups spread over OpenMP threads. */
#define GROUP 8

/* Element offset of line l: row-major over the batch dims of k. */
static int64_t line_off(const fkey *k, int64_t l, bool out) {
    int64_t off = 0;
    for (int i = (int)k->hrank - 1; i >= 0; i--) {
        off += (l % k->hn[i]) * (out ? k->hos[i] : k->his[i]);
        l /= k->hn[i];
    }
    return off;
}

#define MOVE_FN(SFX, T)                                                                        \
    /* nl lines from line l0: buf (element e of line j at e * GROUP + j) <-> x (n          \
     * elements of c reals each, stride st); to buf when in, else from buf times s */      \
    static void move_##SFX(const fkey *k, bool in, int64_t l0, int nl, int64_t n, int c,     \
                           int64_t st, T *x, T *buf, T s) {                                    \
        int64_t off[GROUP];                                                                    \
        bool adj = true;                                                                       \
        for (int j = 0; j < nl; j++) {                                                         \
            off[j] = line_off(k, l0 + j, !in) * c;                                             \
            adj = adj && off[j] == off[0] + j * c;                                             \
        }                                                                                      \
        for (int64_t e = 0; e < n; e++) {                                                      \
            T *a = x + off[0] + e * st * c, *b = buf + e * GROUP * c;                          \
            if (adj && in) {                                                                   \
                memcpy(b, a, (size_t)(nl * c) * sizeof(T));                                    \
            } else if (adj) {                                                                  \
                for (int i = 0; i < nl * c; i++) a[i] = b[i] * s;                              \
            } else {                                                                           \
                for (int j = 0; j < nl; j++)                                                   \
                    for (int i = 0; i < c; i++) {                                              \
                        T *aj = x + off[j] + e * st * c + i, *bj = b + j * c + i;              \
                        if (in) *bj = *aj;                                                     \
                        else *aj = *bj * s;                                                    \
                    }                                                                          \
            }                                                                                  \
        }                                                                                      \
    }
MOVE_FN(f32, float)
MOVE_FN(f64, double)

static void execute(const fkey *k, void *plan, void *in, void *out) {
    if (k->dbl) {
        switch (k->kind) {
        case OARI_FFT_C2C: fftw_execute_dft(plan, in, out); break;
        case OARI_FFT_R2C: fftw_execute_dft_r2c(plan, in, out); break;
        default: fftw_execute_dft_c2r(plan, in, out); break;
        }
    } else {
        switch (k->kind) {
        case OARI_FFT_C2C: fftwf_execute_dft(plan, in, out); break;
        case OARI_FFT_R2C: fftwf_execute_dft_r2c(plan, in, out); break;
        default: fftwf_execute_dft_c2r(plan, in, out); break;
        }
    }
}

/* The strided dim of k through per-thread buffers (see GROUP). */
static int run_grouped(const fkey *k, int64_t lines, const void *src, void *dst, double scale) {
    const int64_t n_in = k->kind == OARI_FFT_C2R ? k->n / 2 + 1 : k->n;
    const int64_t n_out = k->kind == OARI_FFT_R2C ? k->n / 2 + 1 : k->n;
    const int c_in = k->kind == OARI_FFT_R2C ? 1 : 2, c_out = k->kind == OARI_FFT_C2R ? 1 : 2;
    const size_t es = k->dbl ? sizeof(double) : sizeof(float);
    /* per thread: GROUP input lines, GROUP output lines, each 64-byte aligned */
    const size_t bin = ((size_t)(GROUP * n_in * c_in) * es + 63) & ~(size_t)63;
    const size_t per = bin + (((size_t)(GROUP * n_out * c_out) * es + 63) & ~(size_t)63);
    const int nt = (int)k->nthreads;
    const size_t bytes = (size_t)nt * per + 64;
    char *mem = oari_malloc(bytes);
    if (!mem) return oari_fail_status();
    char *base = (char *)(((uintptr_t)mem + 63) & ~(uintptr_t)63);
    /* plans for GROUP contiguous lines and for the last lines % GROUP */
    fkey g = *k;
    g.nthreads = 1;
    g.inplace = 0;
    g.is = g.os = GROUP;
    g.hrank = 1;
    g.his[0] = g.hos[0] = 1;
    g.align_in = g.align_out = 0;
    memset(g.hn + 1, 0, sizeof g.hn - sizeof g.hn[0]);
    memset(g.his + 1, 0, sizeof g.his - sizeof g.his[0]);
    memset(g.hos + 1, 0, sizeof g.hos - sizeof g.hos[0]);
    fkey r = g;
    g.hn[0] = GROUP;
    r.hn[0] = lines % GROUP;
    void *pg = NULL, *pr = NULL;
    int st = 0;
    if (lines >= GROUP) st = plan_get(&g, base, base + bin, &pg);
    if (!st && r.hn[0]) st = plan_get(&r, base, base + bin, &pr);
    if (st || (lines >= GROUP && !pg) || (r.hn[0] && !pr)) {
        oari_free(mem, bytes);
        return st ? st : 1;
    }
    const int64_t groups = (lines + GROUP - 1) / GROUP;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        char *bi = base + (size_t)omp_get_thread_num() * per, *bo = bi + bin;
#pragma omp for schedule(static)
        for (int64_t q = 0; q < groups; q++) {
            const int64_t l0 = q * GROUP;
            const int nl = lines - l0 < GROUP ? (int)(lines - l0) : GROUP;
            if (k->dbl) move_f64(k, true, l0, nl, n_in, c_in, k->is, (double *)src, (double *)bi, 1);
            else move_f32(k, true, l0, nl, n_in, c_in, k->is, (float *)src, (float *)bi, 1);
            execute(k, nl == GROUP ? pg : pr, bi, bo);
            if (k->dbl) move_f64(k, false, l0, nl, n_out, c_out, k->os, dst, (double *)bo, scale);
            else move_f32(k, false, l0, nl, n_out, c_out, k->os, dst, (float *)bo, (float)scale);
        }
    }
    oari_free(mem, bytes);
    return 0;
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
    int64_t lines = 1;
    for (int i = 0; i < ndim; i++) {
        if (i == d || shape[i] == 1) continue;
        lines *= shape[i];
        k.hn[k.hrank] = shape[i];
        k.his[k.hrank] = src_strides[i];
        k.hos[k.hrank++] = dst_strides[i];
    }
    if ((k.is != 1 || k.os != 1) && n > 1) return run_grouped(&k, lines, src, dst, scale);
    void *plan;
    int st = plan_get(&k, in, dst, &plan);
    if (st) return st;
    if (!plan) return 1;
    execute(&k, plan, in, dst);
    if (scale != 1.0)
        scale_lines(&k, kind == OARI_FFT_C2R ? n : kind == OARI_FFT_R2C ? n / 2 + 1 : n,
                    kind == OARI_FFT_C2R ? 1 : 2, dst, scale);
    return 0;
}

#else
typedef int oari_fft_fftw_unused; /* ISO C: a translation unit is not empty */
#endif

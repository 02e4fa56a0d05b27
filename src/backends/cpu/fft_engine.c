/* The CPU FFT engine (fft_engine.h): plans and their cache. The transform
 * itself is in fft_engine_impl.h, compiled once per precision. */
#include "fft_engine.h"

#include <math.h>
#include <pthread.h>

/* Prime factors above this go through Bluestein instead of the O(p^2)
 * generic butterfly. */
#define OARI_FFT_MAX_RADIX 32

struct oari_fft_plan {
    int64_t n;
    bool dbl, inverse;
    bool real;                /* a real plan: sub is the half-length plan, tw the n/2 twiddles */
    int64_t fac[2 * 64];      /* (radix, remaining length) per stage */
    void *tw;                 /* n twiddles exp(-+2 pi i k / n) (direct plans) */
    size_t tw_bytes;
    int64_t m;                /* Bluestein convolution length; 0 for direct plans */
    const oari_fft_plan *sub; /* forward direct plan of length m */
    void *chirp, *bfft;
    size_t chirp_bytes, bfft_bytes;
    int64_t work;
    struct oari_fft_plan *next;
};

#ifndef __clang__ /* clang has no such pragma */
#pragma GCC optimize("no-trapping-math", "no-math-errno")
#endif

#define FT float
#define FSFX f32
#include "fft_engine_impl.h"
#undef FT
#undef FSFX
#define FT double
#define FSFX f64
#include "fft_engine_impl.h"
#undef FT
#undef FSFX
/* OARI_FFT_LANES transforms at once, one per vector lane */
typedef float oari_v4f __attribute__((vector_size(16)));
typedef double oari_v2d __attribute__((vector_size(16)));
#define FT float
#define FV oari_v4f
#define FSFX v4f
#include "fft_engine_impl.h"
#undef FT
#undef FSFX
#define FT double
#define FV oari_v2d
#define FSFX v2d
#include "fft_engine_impl.h"
#undef FT
#undef FSFX

#if OARI_FFT_X86
/* 8 (float) or 4 (double) lanes where the CPU has AVX2 and FMA: the same
 * code compiled for that target, chosen at run time. */
OARI_FFT_AVX2_BEGIN
typedef float oari_v8f __attribute__((vector_size(32)));
typedef double oari_v4d __attribute__((vector_size(32)));
#define FT float
#define FV oari_v8f
#define FSFX v8f
#include "fft_engine_impl.h"
#undef FT
#undef FSFX
#define FT double
#define FV oari_v4d
#define FSFX v4d
#include "fft_engine_impl.h"
#undef FT
#undef FSFX
OARI_FFT_AVX2_END

static bool force_narrow;

bool oari_fft_have_avx2(void) {
    static int have = -1;
    if (__atomic_load_n(&force_narrow, __ATOMIC_RELAXED)) return false;
    if (have < 0) {
        __builtin_cpu_init();
        have = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    }
    return have;
}
#endif

/* Factors n as KissFFT does (4s first, then 2, 3, 5, ...). Returns false if
 * a prime factor exceeds OARI_FFT_MAX_RADIX. */
static bool factorize(int64_t n, int64_t *fac) {
    int64_t p = 4;
    int k = 0;
    do {
        while (n % p) {
            switch (p) {
            case 4: p = 2; break;
            case 2: p = 3; break;
            default: p += 2; break;
            }
            if (p * p > n) p = n;
        }
        if (p > OARI_FFT_MAX_RADIX) return false;
        n /= p;
        fac[k++] = p;
        fac[k++] = n;
    } while (n > 1);
    return true;
}

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static oari_fft_plan *cache;
static long cache_blocks; /* allocations held by cached plans */

static void cache_insert(oari_fft_plan *pl) {
    pl->next = cache;
    cache = pl;
    cache_blocks += 1 + (pl->tw != NULL) + (pl->chirp != NULL) + (pl->bfft != NULL);
}

long oari_fft_plan_cache_blocks(void) {
    pthread_mutex_lock(&cache_lock);
    long n = cache_blocks;
    pthread_mutex_unlock(&cache_lock);
#ifdef OAR_FFTW
    n += oari_fft_fftw_cache_blocks();
#endif
    return n;
}

const char *oari_fft_engine_name(void) {
#ifdef OAR_FFTW
    return "fftw3";
#else
    return "oar";
#endif
}

static oari_fft_plan *plan_new(int64_t n, bool dbl, bool inverse) {
    oari_fft_plan *pl = oari_calloc(1, sizeof *pl);
    if (!pl) return NULL;
    pl->n = n;
    pl->dbl = dbl;
    pl->inverse = inverse;
    if (n > 1 && !factorize(n, pl->fac)) {
        int64_t m = 1;
        while (m < 2 * n - 1) m *= 2;
        pl->m = m;
    }
    return pl;
}

static void plan_free(oari_fft_plan *pl) {
    if (!pl) return;
    oari_free(pl->tw, pl->tw_bytes);
    oari_free(pl->chirp, pl->chirp_bytes);
    oari_free(pl->bfft, pl->bfft_bytes);
    oari_free(pl, sizeof *pl);
}

static const oari_fft_plan *plan_get_locked(int64_t n, bool dbl, bool inverse) {
    for (oari_fft_plan *p = cache; p; p = p->next)
        if (p->n == n && p->dbl == dbl && p->inverse == inverse && !p->real) return p;
    oari_fft_plan *pl = plan_new(n, dbl, inverse);
    if (!pl) return NULL;
    if (pl->m && !(pl->sub = plan_get_locked(pl->m, dbl, false))) {
        plan_free(pl);
        return NULL;
    }
    if ((dbl ? plan_tables_f64(pl) : plan_tables_f32(pl))) {
        plan_free(pl);
        return NULL;
    }
    cache_insert(pl);
    return pl;
}

const oari_fft_plan *oari_fft_plan_get(int64_t n, bool dbl, bool inverse) {
    pthread_mutex_lock(&cache_lock);
    const oari_fft_plan *p = plan_get_locked(n, dbl, inverse);
    pthread_mutex_unlock(&cache_lock);
    return p;
}

/* n/2 twiddles exp(-+2 pi i k / n) in the plan's precision. */
static void *real_twiddles(int64_t n, bool dbl, bool inverse, size_t *bytes) {
    const int64_t h = n / 2;
    const size_t es = dbl ? sizeof(double) : sizeof(float);
    *bytes = (size_t)h * 2 * es;
    void *t = oari_malloc(*bytes);
    if (!t) return NULL;
    for (int64_t k = 0; k < h; k++) {
        double ang = (inverse ? 2.0 : -2.0) * M_PI * (double)k / (double)n;
        if (dbl) {
            ((double *)t)[2 * k] = cos(ang);
            ((double *)t)[2 * k + 1] = sin(ang);
        } else {
            ((float *)t)[2 * k] = (float)cos(ang);
            ((float *)t)[2 * k + 1] = (float)sin(ang);
        }
    }
    return t;
}

const oari_fft_plan *oari_fft_plan_get_real(int64_t n, bool dbl, bool inverse) {
    pthread_mutex_lock(&cache_lock);
    oari_fft_plan *pl = NULL;
    for (oari_fft_plan *p = cache; p && !pl; p = p->next)
        if (p->n == n && p->dbl == dbl && p->inverse == inverse && p->real) pl = p;
    if (!pl && (pl = oari_calloc(1, sizeof *pl))) {
        pl->n = n;
        pl->dbl = dbl;
        pl->inverse = inverse;
        pl->real = true;
        if (!(pl->sub = plan_get_locked(n / 2, dbl, inverse)) ||
            !(pl->tw = real_twiddles(n, dbl, inverse, &pl->tw_bytes))) {
            plan_free(pl);
            pl = NULL;
        } else {
            pl->work = pl->sub->work;
            cache_insert(pl);
        }
    }
    pthread_mutex_unlock(&cache_lock);
    return pl;
}

const oari_fft_plan *oari_fft_plan_half(const oari_fft_plan *p) { return p->sub; }
const void *oari_fft_plan_real_twiddles(const oari_fft_plan *p) { return p->tw; }

int64_t oari_fft_plan_work(const oari_fft_plan *p) { return p->work; }

void oari_fft_force_narrow(bool on) {
#if OARI_FFT_X86
    __atomic_store_n(&force_narrow, on, __ATOMIC_RELAXED);
#else
    (void)on;
#endif
}

/* The transform of fft_engine.c for one element type: included once per
 * type with FT (float or double), FSFX (the name suffix) and optionally FV
 * (a GCC vector of FT: V independent transforms run in lockstep, one per
 * lane; twiddles stay scalar). A mixed-radix decimation-in-time FFT in the
 * manner of KissFFT (radix 4, 2, 3 and a generic butterfly for the other
 * primes up to OARI_FFT_MAX_RADIX); longer prime factors go through
 * Bluestein's chirp-z convolution on a power-of-two plan. */

#ifndef FV
#define FV FT
#define FSCALAR 1
#endif

#define FCAT_(a, b) a##_##b
#define FCAT(a, b) FCAT_(a, b)
#define F(name) FCAT(name, FSFX)
#define TX F(tx)
#define DX F(dx)

typedef struct { FT r, i; } TX; /* twiddles, chirps: scalar */
typedef struct { FV r, i; } DX; /* data: scalar or one vector per part */

static inline DX F(cmul)(DX a, TX b) {
    DX c = {a.r * b.r - a.i * b.i, a.r * b.i + a.i * b.r};
    return c;
}
static inline DX F(cadd)(DX a, DX b) { DX c = {a.r + b.r, a.i + b.i}; return c; }
static inline DX F(csub)(DX a, DX b) { DX c = {a.r - b.r, a.i - b.i}; return c; }

static void F(bfly2)(DX *out, int64_t fstride, const TX *tw, int64_t m) {
    DX *o2 = out + m;
    for (int64_t k = 0; k < m; k++) {
        DX t = F(cmul)(o2[k], tw[k * fstride]);
        o2[k] = F(csub)(out[k], t);
        out[k] = F(cadd)(out[k], t);
    }
}

/* The 4-point DFT of (a0, a1, a2, a3), twiddles already applied, into
 * o[0], o[m], o[2m], o[3m]: the radix-4 butterfly's arithmetic, shared by
 * bfly4 and the twiddle-free leaves. */
static inline void F(dft4)(DX a0, DX a1, DX a2, DX a3, bool inverse, DX *o, int64_t m) {
    DX s5 = F(csub)(a0, a2), a = F(cadd)(a0, a2), s3 = F(cadd)(a1, a3), s4 = F(csub)(a1, a3);
    o[0] = F(cadd)(a, s3);
    o[2 * m] = F(csub)(a, s3);
    if (inverse) {
        o[m] = (DX){s5.r - s4.i, s5.i + s4.r};
        o[3 * m] = (DX){s5.r + s4.i, s5.i - s4.r};
    } else {
        o[m] = (DX){s5.r + s4.i, s5.i - s4.r};
        o[3 * m] = (DX){s5.r - s4.i, s5.i + s4.r};
    }
}

static void F(bfly4)(DX *out, int64_t fstride, const TX *tw, int64_t m, bool inverse) {
    for (int64_t k = 0; k < m; k++)
        F(dft4)(out[k], F(cmul)(out[k + m], tw[k * fstride]), F(cmul)(out[k + 2 * m], tw[2 * k * fstride]),
                F(cmul)(out[k + 3 * m], tw[3 * k * fstride]), inverse, out + k, m);
}

static void F(bfly3)(DX *out, int64_t fstride, const TX *tw, int64_t m, FT epi3_i) {
    const int64_t m2 = 2 * m;
    for (int64_t k = 0; k < m; k++) {
        DX s1 = F(cmul)(out[k + m], tw[k * fstride]);
        DX s2 = F(cmul)(out[k + m2], tw[2 * k * fstride]);
        DX s3 = F(cadd)(s1, s2), s0 = F(csub)(s1, s2);
        DX a = {out[k].r - s3.r * (FT)0.5, out[k].i - s3.i * (FT)0.5};
        s0.r *= epi3_i;
        s0.i *= epi3_i;
        out[k] = F(cadd)(out[k], s3);
        out[k + m2] = (DX){a.r + s0.i, a.i - s0.r};
        out[k + m] = (DX){a.r - s0.i, a.i + s0.r};
    }
}

/* Any radix p <= OARI_FFT_MAX_RADIX, O(p^2) per group. */
static void F(bfly_generic)(DX *out, int64_t fstride, const TX *tw, int64_t m, int64_t p, int64_t n) {
    DX scratch[OARI_FFT_MAX_RADIX];
    for (int64_t u = 0; u < m; u++) {
        for (int64_t q = 0, k = u; q < p; q++, k += m) scratch[q] = out[k];
        for (int64_t q1 = 0, k = u; q1 < p; q1++, k += m) {
            int64_t twidx = 0;
            DX acc = scratch[0];
            for (int64_t q = 1; q < p; q++) {
                twidx += fstride * k;
                twidx %= n;
                acc = F(cadd)(acc, F(cmul)(scratch[q], tw[twidx]));
            }
            out[k] = acc;
        }
    }
}

static void F(work)(const oari_fft_plan *pl, DX *out, const DX *in, int64_t fstride,
                    int64_t in_stride, const int64_t *fac) {
    const TX *tw = (const TX *)pl->tw;
    const int64_t p = fac[0], m = fac[1];
    DX *const beg = out, *const end = out + p * m;
    if (m == 1) {
        for (DX *o = out; o != end; o++, in += fstride * in_stride) *o = *in;
    } else if (fac[2] == 4 && fac[3] == 1) {
        /* leaves of 4: their twiddles are all 1, so the butterfly reads the
         * input directly instead of copying it and multiplying by 1 (300
         * ffts of 4096 lines of 256 on one thread: 1.60 -> 1.35 s) */
        const int64_t st = fstride * p * in_stride;
        for (DX *o = out; o != end; o += m, in += fstride * in_stride)
            F(dft4)(in[0], in[st], in[2 * st], in[3 * st], pl->inverse, o, 1);
    } else if (fac[2] == 2 && fac[3] == 1) { /* leaves of 2: a sum and a difference */
        const int64_t st = fstride * p * in_stride;
        for (DX *o = out; o != end; o += m, in += fstride * in_stride) {
            DX a0 = in[0], a1 = in[st];
            o[0] = F(cadd)(a0, a1);
            o[1] = F(csub)(a0, a1);
        }
    } else {
        for (DX *o = out; o != end; o += m, in += fstride * in_stride)
            F(work)(pl, o, in, fstride * p, in_stride, fac + 2);
    }
    switch (p) {
    case 2: F(bfly2)(beg, fstride, tw, m); break;
    case 3: F(bfly3)(beg, fstride, tw, m, tw[fstride * m].i); break;
    case 4: F(bfly4)(beg, fstride, tw, m, pl->inverse); break;
    default: F(bfly_generic)(beg, fstride, tw, m, p, pl->n); break;
    }
}

void F(oari_fft_exec)(const oari_fft_plan *pl, const void *in_, int64_t in_stride, void *out_,
                      void *work_) {
    const DX *in = (const DX *)in_;
    DX *out = (DX *)out_;
    if (pl->n == 1) {
        out[0] = in[0];
        return;
    }
    if (!pl->m) {
        F(work)(pl, out, in, 1, in_stride, pl->fac);
        return;
    }
    /* Bluestein: X_k = c_k sum_j (x_j c_j) conj(c_{k-j}), c_k = exp(-+ i pi k^2 / n),
     * the convolution done as a cyclic one of length m >= 2n - 1. */
    const int64_t n = pl->n, m = pl->m;
    const TX *chirp = (const TX *)pl->chirp, *bf = (const TX *)pl->bfft;
    DX *a = (DX *)work_, *A = a + m;
    const DX zero = {(FV){0} * (FT)0, (FV){0} * (FT)0};
    for (int64_t j = 0; j < n; j++) a[j] = F(cmul)(in[j * in_stride], chirp[j]);
    for (int64_t j = n; j < m; j++) a[j] = zero;
    F(work)(pl->sub, A, a, 1, 1, pl->sub->fac);
    /* inverse transform as conj(fft(conj(.))); bf already holds 1/m */
    for (int64_t j = 0; j < m; j++) {
        DX t = F(cmul)(A[j], bf[j]);
        A[j] = (DX){t.r, -t.i};
    }
    F(work)(pl->sub, a, A, 1, 1, pl->sub->fac);
    for (int64_t k = 0; k < n; k++) {
        DX t = {a[k].r, -a[k].i};
        out[k] = F(cmul)(t, chirp[k]);
    }
}

#ifdef FSCALAR
/* Fills the plan's twiddles (and Bluestein tables) in this precision. */
static int F(plan_tables)(oari_fft_plan *pl) {
    const double sgn = pl->inverse ? 1.0 : -1.0;
    const int64_t n = pl->m ? pl->m : pl->n;
    if (!pl->m) {
        TX *tw = oari_malloc((size_t)n * sizeof *tw);
        if (!tw) return oari_fail_status();
        for (int64_t k = 0; k < n; k++) {
            double ang = sgn * 2.0 * M_PI * (double)k / (double)n;
            tw[k] = (TX){(FT)cos(ang), (FT)sin(ang)};
        }
        pl->tw = tw;
        pl->tw_bytes = (size_t)n * sizeof *tw;
        return 0;
    }
    const int64_t len = pl->n, m = pl->m;
    TX *chirp = oari_malloc((size_t)len * sizeof *chirp);
    TX *bf = oari_malloc((size_t)m * sizeof *bf);
    TX *tmp = oari_malloc((size_t)m * sizeof *tmp);
    if (!chirp || !bf || !tmp) {
        oari_free(chirp, (size_t)len * sizeof *chirp);
        oari_free(bf, (size_t)m * sizeof *bf);
        oari_free(tmp, (size_t)m * sizeof *tmp);
        return oari_fail_status();
    }
    for (int64_t k = 0; k < len; k++) {
        /* k^2 mod 2n keeps the angle exact for large k */
        int64_t k2 = (int64_t)(((unsigned __int128)k * (unsigned __int128)k) % (unsigned __int128)(2 * len));
        double ang = sgn * M_PI * (double)k2 / (double)len;
        chirp[k] = (TX){(FT)cos(ang), (FT)sin(ang)};
    }
    for (int64_t j = 0; j < m; j++) tmp[j] = (TX){0, 0};
    for (int64_t j = 0; j < len; j++) {
        TX c = {chirp[j].r / (FT)m, -chirp[j].i / (FT)m};
        tmp[j] = c;
        if (j) tmp[m - j] = c;
    }
    /* TX and DX have one layout when scalar */
    F(work)(pl->sub, (DX *)bf, (const DX *)tmp, 1, 1, pl->sub->fac);
    oari_free(tmp, (size_t)m * sizeof *tmp);
    pl->chirp = chirp;
    pl->chirp_bytes = (size_t)len * sizeof *chirp;
    pl->bfft = bf;
    pl->bfft_bytes = (size_t)m * sizeof *bf;
    pl->work = 2 * m;
    return 0;
}
#endif

#undef FV
#undef FSCALAR
#undef TX
#undef DX
#undef F

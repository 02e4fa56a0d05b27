/* The transform of fft_engine.c for one precision: included twice, with
 * FT (float or double) and FSFX (f32 or f64) defined. A mixed-radix
 * decimation-in-time FFT in the manner of KissFFT (radix 4, 2, 3 and a
 * generic butterfly for the other small primes); lengths with a prime
 * factor above OARI_FFT_MAX_RADIX go through Bluestein's chirp-z
 * convolution on a power-of-two plan. */

#define FCAT_(a, b) a##_##b
#define FCAT(a, b) FCAT_(a, b)
#define CX FCAT(cx, FSFX)
#define F(name) FCAT(name, FSFX)

typedef struct { FT r, i; } CX;

static inline CX F(cmul)(CX a, CX b) {
    CX c = {a.r * b.r - a.i * b.i, a.r * b.i + a.i * b.r};
    return c;
}
static inline CX F(cadd)(CX a, CX b) { CX c = {a.r + b.r, a.i + b.i}; return c; }
static inline CX F(csub)(CX a, CX b) { CX c = {a.r - b.r, a.i - b.i}; return c; }

static void F(bfly2)(CX *out, int64_t fstride, const CX *tw, int64_t m) {
    CX *o2 = out + m;
    for (int64_t k = 0; k < m; k++) {
        CX t = F(cmul)(o2[k], tw[k * fstride]);
        o2[k] = F(csub)(out[k], t);
        out[k] = F(cadd)(out[k], t);
    }
}

static void F(bfly4)(CX *out, int64_t fstride, const CX *tw, int64_t m, bool inverse) {
    const int64_t m2 = 2 * m, m3 = 3 * m;
    for (int64_t k = 0; k < m; k++) {
        CX s0 = F(cmul)(out[k + m], tw[k * fstride]);
        CX s1 = F(cmul)(out[k + m2], tw[2 * k * fstride]);
        CX s2 = F(cmul)(out[k + m3], tw[3 * k * fstride]);
        CX s5 = F(csub)(out[k], s1);
        CX a = F(cadd)(out[k], s1);
        CX s3 = F(cadd)(s0, s2), s4 = F(csub)(s0, s2);
        out[k + m2] = F(csub)(a, s3);
        out[k] = F(cadd)(a, s3);
        if (inverse) {
            out[k + m] = (CX){s5.r - s4.i, s5.i + s4.r};
            out[k + m3] = (CX){s5.r + s4.i, s5.i - s4.r};
        } else {
            out[k + m] = (CX){s5.r + s4.i, s5.i - s4.r};
            out[k + m3] = (CX){s5.r - s4.i, s5.i + s4.r};
        }
    }
}

static void F(bfly3)(CX *out, int64_t fstride, const CX *tw, int64_t m, FT epi3_i) {
    const int64_t m2 = 2 * m;
    for (int64_t k = 0; k < m; k++) {
        CX s1 = F(cmul)(out[k + m], tw[k * fstride]);
        CX s2 = F(cmul)(out[k + m2], tw[2 * k * fstride]);
        CX s3 = F(cadd)(s1, s2), s0 = F(csub)(s1, s2);
        CX a = {out[k].r - s3.r * (FT)0.5, out[k].i - s3.i * (FT)0.5};
        s0.r *= epi3_i;
        s0.i *= epi3_i;
        out[k] = F(cadd)(out[k], s3);
        out[k + m2] = (CX){a.r + s0.i, a.i - s0.r};
        out[k + m] = (CX){a.r - s0.i, a.i + s0.r};
    }
}

/* Any radix p <= OARI_FFT_MAX_RADIX, O(p^2) per group. */
static void F(bfly_generic)(CX *out, int64_t fstride, const CX *tw, int64_t m, int64_t p, int64_t n) {
    CX scratch[OARI_FFT_MAX_RADIX];
    for (int64_t u = 0; u < m; u++) {
        for (int64_t q = 0, k = u; q < p; q++, k += m) scratch[q] = out[k];
        for (int64_t q1 = 0, k = u; q1 < p; q1++, k += m) {
            int64_t twidx = 0;
            CX acc = scratch[0];
            for (int64_t q = 1; q < p; q++) {
                twidx += fstride * k;
                twidx %= n;
                acc = F(cadd)(acc, F(cmul)(scratch[q], tw[twidx]));
            }
            out[k] = acc;
        }
    }
}

static void F(work)(const oari_fft_plan *pl, CX *out, const CX *in, int64_t fstride,
                    int64_t in_stride, const int64_t *fac) {
    const CX *tw = (const CX *)pl->tw;
    const int64_t p = fac[0], m = fac[1];
    CX *const beg = out, *const end = out + p * m;
    if (m == 1) {
        for (CX *o = out; o != end; o++, in += fstride * in_stride) *o = *in;
    } else {
        for (CX *o = out; o != end; o += m, in += fstride * in_stride)
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
    const CX *in = (const CX *)in_;
    CX *out = (CX *)out_;
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
    const CX *chirp = (const CX *)pl->chirp, *bf = (const CX *)pl->bfft;
    CX *a = (CX *)work_, *A = a + m;
    for (int64_t j = 0; j < n; j++) a[j] = F(cmul)(in[j * in_stride], chirp[j]);
    for (int64_t j = n; j < m; j++) a[j] = (CX){0, 0};
    F(work)(pl->sub, A, a, 1, 1, pl->sub->fac);
    /* inverse transform as conj(fft(conj(.))); bf already holds 1/m */
    for (int64_t j = 0; j < m; j++) {
        CX t = F(cmul)(A[j], bf[j]);
        A[j] = (CX){t.r, -t.i};
    }
    F(work)(pl->sub, a, A, 1, 1, pl->sub->fac);
    for (int64_t k = 0; k < n; k++) {
        CX t = {a[k].r, -a[k].i};
        out[k] = F(cmul)(t, chirp[k]);
    }
}

/* Fills the plan's twiddles (and Bluestein tables) in this precision. */
static int F(plan_tables)(oari_fft_plan *pl) {
    const double sgn = pl->inverse ? 1.0 : -1.0;
    const int64_t n = pl->m ? pl->m : pl->n;
    if (!pl->m) {
        CX *tw = oari_malloc((size_t)n * sizeof *tw);
        if (!tw) return OAR_ERR_NOMEM;
        for (int64_t k = 0; k < n; k++) {
            double ang = sgn * 2.0 * M_PI * (double)k / (double)n;
            tw[k] = (CX){(FT)cos(ang), (FT)sin(ang)};
        }
        pl->tw = tw;
        pl->tw_bytes = (size_t)n * sizeof *tw;
        return 0;
    }
    const int64_t len = pl->n, m = pl->m;
    CX *chirp = oari_malloc((size_t)len * sizeof *chirp);
    CX *bf = oari_malloc((size_t)m * sizeof *bf);
    CX *tmp = oari_malloc((size_t)m * sizeof *tmp);
    if (!chirp || !bf || !tmp) {
        oari_free(chirp, (size_t)len * sizeof *chirp);
        oari_free(bf, (size_t)m * sizeof *bf);
        oari_free(tmp, (size_t)m * sizeof *tmp);
        return OAR_ERR_NOMEM;
    }
    for (int64_t k = 0; k < len; k++) {
        /* k^2 mod 2n keeps the angle exact for large k */
        int64_t k2 = (int64_t)(((unsigned __int128)k * (unsigned __int128)k) % (unsigned __int128)(2 * len));
        double ang = sgn * M_PI * (double)k2 / (double)len;
        chirp[k] = (CX){(FT)cos(ang), (FT)sin(ang)};
    }
    for (int64_t j = 0; j < m; j++) tmp[j] = (CX){0, 0};
    for (int64_t j = 0; j < len; j++) {
        CX c = {chirp[j].r / (FT)m, -chirp[j].i / (FT)m};
        tmp[j] = c;
        if (j) tmp[m - j] = c;
    }
    F(work)(pl->sub, bf, tmp, 1, 1, pl->sub->fac);
    oari_free(tmp, (size_t)m * sizeof *tmp);
    pl->chirp = chirp;
    pl->chirp_bytes = (size_t)len * sizeof *chirp;
    pl->bfft = bf;
    pl->bfft_bytes = (size_t)m * sizeof *bf;
    pl->work = 2 * m;
    return 0;
}

#undef CX
#undef F

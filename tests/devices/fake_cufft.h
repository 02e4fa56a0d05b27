/* A fake cuFFT for the tests without a GPU (test_cuda_fft_layout.c, and
 * as a library the cuda plugin opens, plugins/fake_cufft_lib.c): the calls the cuda plugin makes (cuda_fft.c),
 * each checking its arguments as cuFFT's documentation states them, and
 * execs that compute the transforms' definitions directly in double over
 * cuFFT's advanced data layout: element x = (x0, .., x_r-1) of batch b is
 * at b * dist + ((x0 * embed[1] + x1) * embed[2] + x2) * stride, an R2C's
 * output and a C2R's input hold the first n/2 + 1 elements of the last
 * dim. Reads and writes touch exactly the layout's elements, so ASan sees
 * a layout that reaches past its buffer. Stricter than cuFFT where cuFFT
 * leaves the result undefined: a C2R fails (CUFFT_EXEC_FAILED) when an
 * imaginary part a real signal's spectrum cannot have (element 0's, and
 * element n/2's for an even n) is not 0, and only rank 1 C2R exists here
 * (the plugin plans no other). A plan made with auto allocation off must
 * be given a work area of at least its size before an exec, which writes
 * all of it. Include once per program. */
#ifndef OAR_FAKE_CUFFT_H
#define OAR_FAKE_CUFFT_H

#include <cufft.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    bool live, made, auto_alloc;
    int rank;
    cufftType type;
    long long n[3], ie[3], oe[3], istride, idist, ostride, odist, batch;
    size_t work_size;
    void *work;
    cudaStream_t stream;
} fake_plan;
#define FAKE_CUFFT_MAX 256
static fake_plan fake_plans[FAKE_CUFFT_MAX];
static int fake_cufft_execs, fake_cufft_makes, fake_cufft_live;
static cudaStream_t fake_cufft_last_stream;

cufftResult cufftGetVersion(int *version) {
    if (!version) return CUFFT_INVALID_VALUE;
    *version = CUFFT_VERSION;
    return CUFFT_SUCCESS;
}

static fake_plan *fake_plan_of(cufftHandle h) {
    return h >= 1 && h <= FAKE_CUFFT_MAX && fake_plans[h - 1].live ? &fake_plans[h - 1] : NULL;
}

cufftResult cufftCreate(cufftHandle *h) {
    for (int i = 0; i < FAKE_CUFFT_MAX; i++)
        if (!fake_plans[i].live) {
            memset(&fake_plans[i], 0, sizeof fake_plans[i]);
            fake_plans[i].live = true;
            fake_plans[i].auto_alloc = true;
            fake_cufft_live++;
            *h = i + 1;
            return CUFFT_SUCCESS;
        }
    return CUFFT_ALLOC_FAILED;
}
cufftResult cufftDestroy(cufftHandle h) {
    fake_plan *p = fake_plan_of(h);
    if (!p) return CUFFT_INVALID_PLAN;
    if (p->auto_alloc) free(p->work);
    p->live = false;
    fake_cufft_live--;
    return CUFFT_SUCCESS;
}
cufftResult cufftSetAutoAllocation(cufftHandle h, int a) {
    fake_plan *p = fake_plan_of(h);
    if (!p || p->made) return CUFFT_INVALID_PLAN; /* before the plan is made */
    p->auto_alloc = a != 0;
    return CUFFT_SUCCESS;
}
cufftResult cufftSetWorkArea(cufftHandle h, void *w) {
    fake_plan *p = fake_plan_of(h);
    if (!p || !p->made) return CUFFT_INVALID_PLAN;
    p->work = w;
    return CUFFT_SUCCESS;
}
cufftResult cufftSetStream(cufftHandle h, cudaStream_t s) {
    fake_plan *p = fake_plan_of(h);
    if (!p) return CUFFT_INVALID_PLAN;
    p->stream = s;
    return CUFFT_SUCCESS;
}

static bool fake_cufft_real_in(cufftType t) { return t == CUFFT_R2C || t == CUFFT_D2Z; }
static bool fake_cufft_real_out(cufftType t) { return t == CUFFT_C2R || t == CUFFT_Z2D; }
static bool fake_cufft_dbl(cufftType t) { return t == CUFFT_Z2Z || t == CUFFT_D2Z || t == CUFFT_Z2D; }

cufftResult cufftMakePlanMany64(cufftHandle h, int rank, long long *n, long long *inembed, long long istride,
                                long long idist, long long *onembed, long long ostride, long long odist,
                                cufftType type, long long batch, size_t *work) {
    fake_plan *p = fake_plan_of(h);
    if (!p || p->made) return CUFFT_INVALID_PLAN;
    if (type != CUFFT_C2C && type != CUFFT_Z2Z && type != CUFFT_R2C && type != CUFFT_D2Z && type != CUFFT_C2R &&
        type != CUFFT_Z2D)
        return CUFFT_INVALID_TYPE;
    if (rank < 1 || rank > 3 || batch < 1 || istride < 1 || ostride < 1 || idist < 1 || odist < 1 || !n)
        return CUFFT_INVALID_VALUE;
    if (fake_cufft_real_out(type) && rank != 1) return CUFFT_NOT_SUPPORTED; /* (here only) */
    for (int j = 0; j < rank; j++) {
        if (n[j] < 1) return CUFFT_INVALID_SIZE;
        /* the embeds hold a dim's logical elements (the half side: n/2 + 1) */
        long long last_in = j == rank - 1 && fake_cufft_real_out(type) ? n[j] / 2 + 1 : n[j];
        long long last_out = j == rank - 1 && fake_cufft_real_in(type) ? n[j] / 2 + 1 : n[j];
        if (j > 0 && ((inembed && inembed[j] < last_in) || (onembed && onembed[j] < last_out)))
            return CUFFT_INVALID_VALUE;
        p->n[j] = n[j];
        p->ie[j] = inembed ? inembed[j] : last_in;
        p->oe[j] = onembed ? onembed[j] : last_out;
    }
    p->rank = rank, p->type = type, p->istride = istride, p->idist = idist, p->ostride = ostride;
    p->odist = odist, p->batch = batch;
    p->work_size = 64 + (size_t)(16 * n[0]); /* some work area, of a size the caller must honour */
    if (p->auto_alloc && !(p->work = malloc(p->work_size))) return CUFFT_ALLOC_FAILED;
    p->made = true;
    fake_cufft_makes++;
    if (work) *work = p->work_size;
    return CUFFT_SUCCESS;
}

/* the offset of logical element x (rank r, embeds e) in batch b */
static long long fake_cufft_at(const fake_plan *p, const long long *x, const long long *e, long long stride,
                               long long dist, long long b) {
    long long lin = 0;
    for (int j = 0; j < p->rank; j++) lin = lin * (j ? e[j] : 1) + x[j];
    return b * dist + lin * stride;
}

/* increments the multi-index x over shape[0..r) (row-major); false past the end */
static bool fake_cufft_next(long long *x, const long long *shape, int r) {
    for (int j = r - 1; j >= 0; j--) {
        if (++x[j] < shape[j]) return true;
        x[j] = 0;
    }
    return false;
}

static cufftResult fake_cufft_exec(cufftHandle h, cufftType want, const void *in, void *out, int dir) {
    fake_plan *p = fake_plan_of(h);
    if (!p || !p->made) return CUFFT_INVALID_PLAN;
    if (p->type != want) return CUFFT_INVALID_TYPE;
    if (want == CUFFT_C2C || want == CUFFT_Z2Z) {
        if (dir != CUFFT_FORWARD && dir != CUFFT_INVERSE) return CUFFT_INVALID_VALUE;
    }
    if (!in || !out) return CUFFT_INVALID_VALUE;
    if (!p->auto_alloc && !p->work) return CUFFT_NO_WORKSPACE;
    memset(p->work, 0xEE, p->work_size);
    fake_cufft_last_stream = p->stream;
    fake_cufft_execs++;
    const bool dbl = fake_cufft_dbl(want), rin = fake_cufft_real_in(want), rout = fake_cufft_real_out(want);
    const int r = p->rank;
    long long lin_shape[3], lout_shape[3], total_out = 1;
    for (int j = 0; j < r; j++) {
        lin_shape[j] = j == r - 1 && rout ? p->n[j] / 2 + 1 : p->n[j];
        lout_shape[j] = j == r - 1 && rin ? p->n[j] / 2 + 1 : p->n[j];
        total_out *= lout_shape[j];
    }
    const double sgn = rin ? -1 : rout ? 1 : dir; /* exp(sgn 2 pi i k x / n) */
    /* every batch computed before any is written: in place is safe */
    double *res = malloc(sizeof(double) * 2 * (size_t)(total_out * p->batch));
    if (!res) return CUFFT_ALLOC_FAILED;
    cufftResult rc = CUFFT_SUCCESS;
    /* element x's value: real or complex, in float or double */
#define FAKE_LD(ptr, off, part)                                                                    \
    (dbl ? ((const double *)(ptr))[(rin ? 1 : 2) * (off) + (part)]                                 \
         : (double)((const float *)(ptr))[(rin ? 1 : 2) * (off) + (part)])
    for (long long b = 0; b < p->batch && rc == CUFFT_SUCCESS; b++) {
        if (rout) { /* a rank-1 Hermitian half: its first (and middle) element real */
            long long n = p->n[0], z[2] = {0, n / 2};
            for (int q = 0; q < (n % 2 == 0 ? 2 : 1); q++) {
                double im = FAKE_LD(in, fake_cufft_at(p, &z[q], p->ie, p->istride, p->idist, b), 1);
                if (im != 0) rc = CUFFT_EXEC_FAILED;
            }
            if (rc) break;
        }
        long long k[3] = {0, 0, 0};
        long long o = b * total_out;
        do {
            double sr = 0, si = 0;
            long long x[3] = {0, 0, 0};
            long long full[3];
            for (int j = 0; j < r; j++) full[j] = p->n[j];
            do { /* every element of the full signal */
                double vr, vi;
                if (rout && x[0] >= lin_shape[0]) { /* the Hermitian extension */
                    long long m = p->n[0] - x[0];
                    long long off = fake_cufft_at(p, &m, p->ie, p->istride, p->idist, b);
                    vr = FAKE_LD(in, off, 0), vi = -FAKE_LD(in, off, 1);
                } else {
                    long long off = fake_cufft_at(p, x, p->ie, p->istride, p->idist, b);
                    vr = FAKE_LD(in, off, 0), vi = rin ? 0 : FAKE_LD(in, off, 1);
                }
                double ph = 0;
                for (int j = 0; j < r; j++) ph += (double)(k[j] * x[j] % p->n[j]) / (double)p->n[j];
                double c = cos(2 * 3.14159265358979323846 * ph), s = sgn * sin(2 * 3.14159265358979323846 * ph);
                sr += vr * c - vi * s;
                si += vr * s + vi * c;
            } while (fake_cufft_next(x, full, r));
            res[2 * o] = sr, res[2 * o + 1] = si;
            o++;
        } while (fake_cufft_next(k, lout_shape, r));
    }
    for (long long b = 0; b < p->batch && rc == CUFFT_SUCCESS; b++) {
        long long k[3] = {0, 0, 0};
        long long o = b * total_out;
        do {
            long long off = fake_cufft_at(p, k, p->oe, p->ostride, p->odist, b);
            if (rout) {
                if (dbl) ((double *)out)[off] = res[2 * o];
                else ((float *)out)[off] = (float)res[2 * o];
            } else if (dbl) {
                ((double *)out)[2 * off] = res[2 * o], ((double *)out)[2 * off + 1] = res[2 * o + 1];
            } else {
                ((float *)out)[2 * off] = (float)res[2 * o], ((float *)out)[2 * off + 1] = (float)res[2 * o + 1];
            }
            o++;
        } while (fake_cufft_next(k, lout_shape, r));
    }
#undef FAKE_LD
    free(res);
    return rc;
}

cufftResult cufftExecC2C(cufftHandle h, cufftComplex *in, cufftComplex *out, int dir) {
    return fake_cufft_exec(h, CUFFT_C2C, in, out, dir);
}
cufftResult cufftExecZ2Z(cufftHandle h, cufftDoubleComplex *in, cufftDoubleComplex *out, int dir) {
    return fake_cufft_exec(h, CUFFT_Z2Z, in, out, dir);
}
cufftResult cufftExecR2C(cufftHandle h, cufftReal *in, cufftComplex *out) {
    return fake_cufft_exec(h, CUFFT_R2C, in, out, 0);
}
cufftResult cufftExecD2Z(cufftHandle h, cufftDoubleReal *in, cufftDoubleComplex *out) {
    return fake_cufft_exec(h, CUFFT_D2Z, in, out, 0);
}
cufftResult cufftExecC2R(cufftHandle h, cufftComplex *in, cufftReal *out) {
    return fake_cufft_exec(h, CUFFT_C2R, in, out, 0);
}
cufftResult cufftExecZ2D(cufftHandle h, cufftDoubleComplex *in, cufftDoubleReal *out) {
    return fake_cufft_exec(h, CUFFT_Z2D, in, out, 0);
}

#endif

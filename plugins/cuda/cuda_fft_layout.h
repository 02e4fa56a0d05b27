/* How the cuda plugin runs oar's FFT ops (src/ops/defs/fft.def) through
 * cuFFT, kept apart from the CUDA code so a CPU-only test checks it
 * (tests/devices/test_cuda_fft_layout.c, against a model of cuFFT's
 * advanced-layout addressing and a direct DFT). An op transforms any set
 * of dims of a strided view; cuFFT transforms up to three innermost dims
 * of data laid out as batch * idist + index * istride, with one batch
 * stride. So the plugin
 *   1. gathers the input into a dense scratch in a permuted dim order
 *      (`perm`: scratch dim i is the tensor's dim perm[i]),
 *   2. runs one or two cufftPlanMany-shaped transforms on the scratch,
 *   3. (c2r) zeroes the imaginary parts cuFFT must not see,
 *   4. scatters the result into the output view, multiplied by `scale`.
 * c2c: the batch dims first, then the transformed dims in the order the op
 * lists them; one rank-k C2C in place. r2c: the batch dims, the other
 * transformed dims, the half dim last; one rank-k R2C into a second
 * scratch. c2r: cuFFT's multi-dim C2R assumes Hermitian symmetry in every
 * dim, which oar's does not (the CPU, src/backends/cpu/cpu_fft.c, runs an
 * inverse c2c over the other dims, then a 1-D c2r along the half dim that
 * ignores the imaginary parts of its first element and, for an even
 * length, of its middle one), so the plugin does the same in two steps:
 * with the half dim first ([h, batch..., other...]), a rank-(k-1) inverse
 * C2C in place over the innermost dims (batch h * batch), the imaginary
 * parts of rows 0 and n/2 (even n) of the half dim set to 0, then a rank-1
 * C2R with stride and batch the size of one row (distance 1). With k = 1
 * the half dim stays last ([batch..., h]) and the C2R is the plain one.
 * Transformed dims of extent 1 are identities and join the batch (a c2c
 * with none left is a scaled copy); a half dim of extent 1, or more than
 * three transformed dims of extent > 1, is refused (the op then runs on
 * the CPU). */
#ifndef OAR_CUDA_FFT_LAYOUT_H
#define OAR_CUDA_FFT_LAYOUT_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

enum { OAR_CUDA_FFT_C2C = 0, OAR_CUDA_FFT_R2C = 1, OAR_CUDA_FFT_C2R = 2 };

/* One cufftMakePlanMany64 call and its exec: rank 1..3, n[], the embeds
 * (inembed[0], onembed[0] unused), strides and distances in elements of
 * the side's type (real or complex), batch; type one of the kinds above;
 * dir for C2C: -1 forward (CUFFT_FORWARD), +1 inverse. */
typedef struct {
    int type, rank, dir;
    long long n[3], inembed[3], istride, idist, onembed[3], ostride, odist, batch;
} oar_cuda_fft_many;

typedef struct {
    int kind;            /* OAR_CUDA_FFT_* */
    int ndim;
    int perm[8];         /* scratch dim i holds the tensor's dim perm[i] */
    int64_t in_numel;    /* elements of the scratch the input is gathered into */
    int64_t out_numel;   /* elements of the scratch scattered from (the input's scratch for c2c, c2r's first step) */
    bool out_in_place;   /* the result is in the input's scratch (c2c) */
    int n_plans;         /* 0 (a c2c of extent-1 dims: a scaled copy), 1 or 2 */
    oar_cuda_fft_many plan[2];
    /* c2r: the imaginary parts to zero before the C2R (between plan[0] and
     * plan[1], or before plan[0] when it is the C2R): n_zero runs of
     * zero_count elements, zero_off[r] + j * zero_stride, in the input's scratch */
    int n_zero;
    int64_t zero_off[2], zero_stride, zero_count;
    double scale;        /* the norm mode's factor, applied in the scatter */
} oar_cuda_fft_layout;

/* Builds the layout of fft op `kind` of an input of shape in_shape (rank
 * ndim, 1..8) into an output of shape out_shape, transforming the k dims
 * dims[] (the half dim last for r2c/c2r), forward (c2c: 1 forward, 0
 * inverse), with norm mode `norm` (0 none, 1 1/sqrt(N), 2 1/N, N the
 * product of the signal sizes). False for what it cannot express; then the
 * op runs on the CPU. Shapes must agree as the op's shape rule says
 * (checked: a mismatch is refused). */
static inline bool oar_cuda_fft_layout_make(int kind, int ndim, const int64_t *in_shape, const int64_t *out_shape,
                                            int k, const int64_t *dims, int forward, int norm,
                                            oar_cuda_fft_layout *L) {
    memset(L, 0, sizeof *L);
    if (kind < 0 || kind > 2 || ndim < 1 || ndim > 8 || k < 1 || k > ndim || norm < 0 || norm > 2) return false;
    bool is_t[8] = {false};
    for (int j = 0; j < k; j++) {
        if (dims[j] < 0 || dims[j] >= ndim || is_t[dims[j]]) return false;
        is_t[dims[j]] = true;
    }
    const int h = (int)dims[k - 1];
    for (int i = 0; i < ndim; i++) {
        int64_t want = in_shape[i];
        if (kind == OAR_CUDA_FFT_R2C && i == h) want = in_shape[i] / 2 + 1;
        if (kind == OAR_CUDA_FFT_C2R && i == h) {
            if (in_shape[i] != out_shape[i] / 2 + 1) return false;
            want = out_shape[i];
        }
        if (in_shape[i] < 0 || out_shape[i] != want || (is_t[i] && in_shape[i] < 1)) return false;
    }
    /* the signal's dims: N (all listed dims) and the ones cuFFT sees (extent > 1) */
    const int64_t *sig = kind == OAR_CUDA_FFT_R2C ? in_shape : out_shape;
    double N = 1;
    for (int j = 0; j < k; j++) N *= (double)sig[dims[j]];
    L->scale = norm == 1 ? 1.0 / sqrt(N) : norm == 2 ? 1.0 / N : 1.0;
    L->kind = kind;
    L->ndim = ndim;
    int other[8], n_other = 0; /* transformed dims of extent > 1 other than the half dim */
    for (int j = 0; j < k; j++) {
        int d = (int)dims[j];
        if (kind != OAR_CUDA_FFT_C2C && d == h) continue;
        if (sig[d] > 1) other[n_other++] = d;
        else is_t[d] = false; /* an identity: batch */
    }
    if (kind != OAR_CUDA_FFT_C2C && sig[h] < 2) return false; /* a half dim of extent 1 */
    if (n_other + (kind != OAR_CUDA_FFT_C2C) > 3) return false;
    int np = 0;
    const bool half_first = kind == OAR_CUDA_FFT_C2R && n_other > 0;
    if (half_first) L->perm[np++] = h;
    for (int i = 0; i < ndim; i++)
        if (!is_t[i]) L->perm[np++] = i;
    for (int j = 0; j < n_other; j++) L->perm[np++] = other[j];
    if (kind != OAR_CUDA_FFT_C2C && !half_first) L->perm[np++] = h;
    int64_t in_numel = 1, out_numel = 1, batch = 1;
    for (int i = 0; i < ndim; i++) {
        in_numel *= in_shape[i];
        out_numel *= out_shape[i];
        if (!is_t[i]) batch *= in_shape[i];
    }
    L->in_numel = in_numel;
    L->out_numel = kind == OAR_CUDA_FFT_C2C ? in_numel : out_numel;
    L->out_in_place = kind == OAR_CUDA_FFT_C2C;
    if (in_numel == 0) return true; /* an empty batch: nothing to run */
    long long other_n[3];
    int64_t other_prod = 1;
    for (int j = 0; j < n_other; j++) other_n[j] = sig[other[j]], other_prod *= sig[other[j]];
    oar_cuda_fft_many *p = L->plan;
    if (kind == OAR_CUDA_FFT_C2C) {
        if (n_other == 0) return true; /* a scaled copy */
        p->type = OAR_CUDA_FFT_C2C, p->rank = n_other, p->dir = forward ? -1 : 1;
        for (int j = 0; j < n_other; j++) p->n[j] = p->inembed[j] = p->onembed[j] = other_n[j];
        p->istride = p->ostride = 1, p->idist = p->odist = other_prod, p->batch = batch;
        L->n_plans = 1;
        return true;
    }
    const int64_t n = sig[h]; /* the real length */
    const int64_t H = n / 2 + 1;
    if (kind == OAR_CUDA_FFT_R2C) {
        p->type = OAR_CUDA_FFT_R2C, p->rank = n_other + 1, p->dir = -1;
        for (int j = 0; j < n_other; j++) p->n[j] = p->inembed[j] = p->onembed[j] = other_n[j];
        p->n[n_other] = p->inembed[n_other] = n;
        p->onembed[n_other] = H;
        p->istride = p->ostride = 1, p->idist = other_prod * n, p->odist = other_prod * H, p->batch = batch;
        L->n_plans = 1;
        return true;
    }
    /* c2r */
    const int64_t row = other_prod * batch; /* elements of one row of the half dim (k > 1) */
    if (n_other > 0) {
        p->type = OAR_CUDA_FFT_C2C, p->rank = n_other, p->dir = 1;
        for (int j = 0; j < n_other; j++) p->n[j] = p->inembed[j] = p->onembed[j] = other_n[j];
        p->istride = p->ostride = 1, p->idist = p->odist = other_prod, p->batch = batch * H;
        p++;
        L->zero_stride = 1, L->zero_count = row;
        L->zero_off[0] = 0, L->zero_off[1] = (n / 2) * row;
    } else {
        L->zero_stride = H, L->zero_count = batch;
        L->zero_off[0] = 0, L->zero_off[1] = n / 2;
    }
    L->n_zero = n % 2 == 0 ? 2 : 1;
    p->type = OAR_CUDA_FFT_C2R, p->rank = 1, p->dir = 1;
    p->n[0] = n, p->inembed[0] = H, p->onembed[0] = n;
    if (n_other > 0) p->istride = p->ostride = row, p->idist = p->odist = 1, p->batch = row;
    else p->istride = p->ostride = 1, p->idist = H, p->odist = n, p->batch = batch;
    L->n_plans = n_other > 0 ? 2 : 1;
    return true;
}

#endif

/* CPU kernels of the reductions (sum, prod, amax, amin, all, any, argmax,
 * argmin) and scans (cumsum, cumprod): one strided driver, per-dtype loops.
 * f16/bf16 run through the f32 kernels (dispatch converts). */
#include "cpu.h"

/* As in cpu_unary.c: without trapping math, comparisons become selects and
 * the max/min/clamp loops vectorize; no kernel reads FP flags or errno. */
#pragma GCC optimize("no-trapping-math", "no-math-errno")

#include <math.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* ---- the reduction plan ---------------------------------------------------
 * The input's dims split into kept dims (the output, contiguous, in their
 * order) and reduced dims; size-1 dims are dropped and neighbours merged
 * where strides allow. The reduced space [0, R) is cut into chunks whose size
 * depends only on the shapes, each chunk reduced into its own accumulator
 * and the chunks combined in order, so no result depends on the number of
 * threads. Two loop orders:
 *  - inner: each output reduces its own runs along the reduced dim of
 *    smallest stride (last-dim reductions; vectorised runs, pairwise sums);
 *  - outer: rows of the kept innermost dim are accumulated row by row
 *    (leading-dim reductions: acc[j] += x[r, j], vectorised over j). */

#define CHUNK_INNER 16384 /* reduced elements per work item, inner order */
#define CHUNK_OUTER 131072 /* input elements per work item, outer order */
#define JBLOCK 1024       /* kept elements per work item, outer order */

typedef struct rplan {
    int nk, nr;
    int64_t kshape[OAR_MAX_DIMS], kstride[OAR_MAX_DIMS];
    int64_t rshape[OAR_MAX_DIMS], rstride[OAR_MAX_DIMS];
    int64_t n_out, R;
} rplan;

/* How one op reduces one dtype. Accumulators are acc_size bytes. */
typedef struct rkind {
    size_t acc_size;
    void (*init)(void *acc, int64_t n);
    /* acc op= the strided run p[0..n) (element stride s); pos: reduced index of p[0] */
    void (*run)(void *acc, const char *p, int64_t s, int64_t n, int64_t pos);
    /* acc[j] op= p[j * s] for j < m; pos: the reduced index of this row */
    void (*row)(void *acc, const char *p, int64_t s, int64_t m, int64_t pos);
    /* a op= b, b covering later reduced indices than a */
    void (*combine)(void *a, const void *b);
    void (*store)(char *out, const void *acc);
    /* optional: out[r] = the reduction of contiguous rows p + r * rs, r < nrows,
     * of n elements each (last-dim reductions of a contiguous input) */
    void (*rows)(char *out, const char *p, int64_t nrows, int64_t rs, int64_t n);
    /* optional: acc[j] op= p[r * rs + j] for r < nrows in order, j < m (the
     * outer order's rows when contiguous: columns kept in registers) */
    void (*cols)(void *acc, const char *p, int64_t rs, int64_t nrows, int64_t m);
} rkind;

static void plan_build(rplan *pl, const oar_ktensor *x, uint64_t mask, bool keep_order) {
    memset(pl, 0, sizeof *pl);
    bool zero_kept = false, zero_red = false;
    for (int d = 0; d < x->ndim; d++) {
        bool red = (mask >> d) & 1u;
        int64_t n = x->shape[d], s = x->strides[d];
        if (n == 0) {
            if (red) zero_red = true;
            else zero_kept = true;
        }
        if (n <= 1) continue; /* size 0: nothing is read (n_out or R is 0) */
        if (!red) {
            if (pl->nk && pl->kstride[pl->nk - 1] == s * n) {
                pl->kshape[pl->nk - 1] *= n;
                pl->kstride[pl->nk - 1] = s;
            } else {
                pl->kshape[pl->nk] = n;
                pl->kstride[pl->nk++] = s;
            }
        } else {
            pl->rshape[pl->nr] = n;
            pl->rstride[pl->nr++] = s;
        }
    }
    if (!keep_order) { /* reduced dims by decreasing stride (insertion sort, stable) */
        for (int i = 1; i < pl->nr; i++) {
            int64_t n = pl->rshape[i], s = pl->rstride[i];
            int j = i;
            for (; j > 0 && pl->rstride[j - 1] < s; j--) {
                pl->rshape[j] = pl->rshape[j - 1];
                pl->rstride[j] = pl->rstride[j - 1];
            }
            pl->rshape[j] = n;
            pl->rstride[j] = s;
        }
    }
    int m = 0;
    for (int i = 0; i < pl->nr; i++) {
        if (m && pl->rstride[m - 1] == pl->rstride[i] * pl->rshape[i]) {
            pl->rshape[m - 1] *= pl->rshape[i];
            pl->rstride[m - 1] = pl->rstride[i];
        } else {
            pl->rshape[m] = pl->rshape[i];
            pl->rstride[m++] = pl->rstride[i];
        }
    }
    pl->nr = m;
    pl->n_out = 1;
    for (int i = 0; i < pl->nk; i++) pl->n_out *= pl->kshape[i];
    pl->R = 1;
    for (int i = 0; i < pl->nr; i++) pl->R *= pl->rshape[i];
    if (zero_kept) pl->n_out = 0;
    if (zero_red) pl->R = 0;
}

/* Offset (elements) of linear index i over (n, shape, stride). */
static inline int64_t lin_offset(int n, const int64_t *shape, const int64_t *stride, int64_t i) {
    int64_t off = 0;
    for (int d = n - 1; d >= 0; d--) {
        off += (i % shape[d]) * stride[d];
        i /= shape[d];
    }
    return off;
}

/* Reduces reduced indices [r0, r1) of the slice at `base` into acc (inner order). */
static void inner_range(const rkind *k, const rplan *pl, const char *base, int64_t es, void *acc,
                        int64_t r0, int64_t r1) {
    if (pl->nr == 0) {
        if (r0 < r1) k->run(acc, base, 0, 1, 0);
        return;
    }
    const int last = pl->nr - 1;
    const int64_t run = pl->rshape[last], s = pl->rstride[last];
    int64_t idx[OAR_MAX_DIMS], rem = r0;
    for (int d = last; d >= 0; d--) {
        idx[d] = rem % pl->rshape[d];
        rem /= pl->rshape[d];
    }
    int64_t pos = r0;
    while (pos < r1) {
        int64_t n = run - idx[last];
        if (n > r1 - pos) n = r1 - pos;
        int64_t off = 0;
        for (int d = 0; d <= last; d++) off += idx[d] * pl->rstride[d];
        k->run(acc, base + off * es, s, n, pos);
        pos += n;
        idx[last] += n;
        for (int d = last; d > 0 && idx[d] >= pl->rshape[d]; d--) {
            idx[d] = 0;
            idx[d - 1]++;
        }
    }
}

static int reduce_run(const rkind *k, const oar_ktensor *x, const oar_ktensor *out, uint64_t mask,
                      bool keep_order) {
    rplan pl;
    plan_build(&pl, x, mask, keep_order);
    if (pl.n_out == 0) return 0;
    const int64_t es = (int64_t)oar_dtype_size((oar_dtype)x->dtype);
    const int64_t os = (int64_t)oar_dtype_size((oar_dtype)out->dtype);
    const size_t as = k->acc_size;
    const char *xd = x->data;
    char *od = out->data;
    /* (one thread: no parallel region at all; libgomp still sets up a team) */
    bool parallel = pl.n_out * (pl.R ? pl.R : 1) >= OARI_PARALLEL_GRAIN;
#ifdef _OPENMP
    parallel = parallel && omp_get_max_threads() > 1;
#endif
    const bool outer = pl.nk >= 1 && pl.kshape[pl.nk - 1] > 1 &&
                       (pl.nr == 0 || pl.kstride[pl.nk - 1] < pl.rstride[pl.nr - 1]);

    if (!outer) {
        const int64_t nch = pl.R > CHUNK_INNER ? (pl.R + CHUNK_INNER - 1) / CHUNK_INNER : 1;
        if (nch == 1 && k->rows && pl.nk == 1 && pl.nr == 1 && pl.rstride[0] == 1) {
            const int64_t blk = 64, nb = (pl.n_out + blk - 1) / blk;
            OARI_PARALLEL_FOR_IF(parallel,
            for (int64_t b = 0; b < nb; b++) {
                int64_t r0 = b * blk, nr = pl.n_out - r0 < blk ? pl.n_out - r0 : blk;
                k->rows(od + r0 * os, xd + r0 * pl.kstride[0] * es, nr, pl.kstride[0], pl.R);
            });
            return 0;
        }
        if (nch == 1 && as <= 32) { /* one chunk per output: no shared buffer, one region */
            OARI_PARALLEL_FOR_IF(parallel,
            for (int64_t o = 0; o < pl.n_out; o++) {
                _Alignas(16) char a[32];
                k->init(a, 1);
                /* (one kept dim: no division per output) */
                const int64_t ko = pl.nk == 1 ? o * pl.kstride[0]
                                              : lin_offset(pl.nk, pl.kshape, pl.kstride, o);
                const char *base = xd + ko * es;
                if (pl.nr == 1)
                    k->run(a, base, pl.rstride[0], pl.R, 0);
                else
                    inner_range(k, &pl, base, es, a, 0, pl.R);
                k->store(od + o * os, a);
            });
            return 0;
        }
        const int64_t items = pl.n_out * nch;
        char *acc = oari_malloc((size_t)items * as);
        if (!acc) return oari_fail_status();
        k->init(acc, items);
        OARI_PARALLEL_FOR_IF(parallel,
        for (int64_t w = 0; w < items; w++) {
            int64_t o = w / nch, c = w % nch;
            int64_t r0 = c * CHUNK_INNER, r1 = r0 + CHUNK_INNER < pl.R ? r0 + CHUNK_INNER : pl.R;
            const char *base = xd + lin_offset(pl.nk, pl.kshape, pl.kstride, o) * es;
            inner_range(k, &pl, base, es, acc + (size_t)w * as, r0, r1);
        });
        OARI_PARALLEL_FOR_IF(parallel,
        for (int64_t o = 0; o < pl.n_out; o++) {
            char *a = acc + (size_t)(o * nch) * as;
            for (int64_t c = 1; c < nch; c++) k->combine(a, a + (size_t)c * as);
            k->store(od + o * os, a);
        });
        oari_free(acc, (size_t)items * as);
        return 0;
    }

    /* outer order */
    const int64_t m = pl.kshape[pl.nk - 1], sk = pl.kstride[pl.nk - 1];
    const int64_t n_ko = pl.n_out / m;
    int64_t jb = m < JBLOCK ? m : JBLOCK;
    int64_t rows = CHUNK_OUTER / jb;
    if (rows < 1) rows = 1;
    const int64_t nch = pl.R > rows ? (pl.R + rows - 1) / rows : 1;
#ifdef _OPENMP
    /* Too few work items for the threads: split the kept block further.
     * Each output still sums the same rows in the same order, so this
     * changes no result. */
    const int nt = parallel ? omp_get_max_threads() : 1;
    if (nt > 1 && n_ko * nch < nt && jb >= 32) {
        int64_t j2 = (jb + nt - 1) / nt;
        jb = j2 < 16 ? 16 : (j2 + 15) & ~(int64_t)15;
    }
#endif
    const int64_t nj = (m + jb - 1) / jb;
    const int64_t n_acc = nch * pl.n_out;
    char *acc = oari_malloc((size_t)n_acc * as);
    if (!acc) return oari_fail_status();
    k->init(acc, n_acc);
    const int64_t items = n_ko * nj * nch;
    OARI_PARALLEL_FOR_IF(parallel,
    for (int64_t w = 0; w < items; w++) {
        int64_t c = w % nch, rest = w / nch;
        int64_t bj = rest % nj, ko = rest / nj;
        int64_t j0 = bj * jb, len = j0 + jb < m ? jb : m - j0;
        int64_t r0 = c * rows, r1 = r0 + rows < pl.R ? r0 + rows : pl.R;
        const char *base = xd + (lin_offset(pl.nk - 1, pl.kshape, pl.kstride, ko) + j0 * sk) * es;
        char *a = acc + (size_t)(c * pl.n_out + ko * m + j0) * as;
        if (pl.nr == 0) {
            if (r0 < r1) k->row(a, base, sk, len, 0);
            continue;
        }
        if (k->cols && pl.nr == 1 && sk == 1) {
            k->cols(a, base + r0 * pl.rstride[0] * es, pl.rstride[0], r1 - r0, len);
            continue;
        }
        int64_t idx[OAR_MAX_DIMS], rem = r0;
        for (int d = pl.nr - 1; d >= 0; d--) {
            idx[d] = rem % pl.rshape[d];
            rem /= pl.rshape[d];
        }
        for (int64_t r = r0; r < r1; r++) {
            int64_t off = 0;
            for (int d = 0; d < pl.nr; d++) off += idx[d] * pl.rstride[d];
            k->row(a, base + off * es, sk, len, r);
            for (int d = pl.nr - 1; d >= 0; d--) {
                if (++idx[d] < pl.rshape[d]) break;
                idx[d] = 0;
            }
        }
    });
    OARI_PARALLEL_FOR_IF(parallel && pl.n_out * nch >= OARI_PARALLEL_GRAIN / 4,
    for (int64_t o = 0; o < pl.n_out; o++) {
        char *a = acc + (size_t)o * as;
        for (int64_t c = 1; c < nch; c++) k->combine(a, acc + (size_t)(c * pl.n_out + o) * as);
        k->store(od + o * os, a);
    });
    oari_free(acc, (size_t)n_acc * as);
    return 0;
}

/* ---- sum and prod -----------------------------------------------------------
 * Accumulators: double for f32/f64, double complex for c64/c128, wrapping
 * uint64 for integers and bool (result i64). Sums are pairwise over runs
 * (blocks of 16 lanes, enough independent vector adds to keep the adder
 * busy), so f32 and f64 sums stay accurate.
 *
 * f32 sums add groups of four elements in float, as (a + b) + (c + d),
 * before the group reaches a double lane (x[i + k], x[i + 16 + k],
 * x[i + 32 + k], x[i + 48 + k] in a run; rows r..r + 3 in the column loop):
 * widening every element to double ran at a third of the speed of float
 * loads on this CPU, and one widening per four elements runs 1.5x faster.
 * The three float roundings of a group cost at most 2^-23 of its |a| +
 * |b| + |c| + |d|, so a sum is within 2^-23 of the sum of |x|, plus its
 * final rounding, whatever n is (PyTorch's float cascade: about log2(n)
 * times that). */

#define LD_int(T, v) ((uint64_t)(int64_t)(v))
#define LD_flt(T, v) ((double)(v))
#define LD_cpx(T, v) ((c128_t)(v))

/* The sum of contiguous p[0..n), n <= 256, in exactly the order of the
 * generic 16-lane loop below (lane k takes the elements i + k of each
 * whole block, f32 grouping blocks of 64 as above; the tail goes to lane
 * 0, then the lanes fold in halves), written with vector types so the lanes
 * and the fold stay in registers (as an array gcc keeps them on the stack). */
typedef float v4f_t __attribute__((vector_size(16)));
typedef double v4d_t __attribute__((vector_size(32)));
/* (macros, not functions: a function returning a 32-byte vector changes
 * the ABI between the baseline and the AVX clone) */
/* (a vector literal of four conversions: gcc 12 makes it one vcvtps2pd from
 * memory, where __builtin_convertvector converts two halves through the stack) */
#define load4_f32(q)                                                                     \
    ({                                                                                   \
        const float *q_ = (q);                                                           \
        (v4d_t){(double)q_[0], (double)q_[1], (double)q_[2], (double)q_[3]};             \
    })
#define load4_f64(q) ({ v4d_t x_; memcpy(&x_, (q), sizeof x_); x_; })
/* Four-element groups of eight lanes: (q[k] + q[h + k]) + (q[2h + k] +
 * q[3h + k]) for k < 8 in float (eight-wide adds, 1.2x faster than
 * four-wide), widened to double and added to lo (k < 4) and hi. */
typedef float v8f_t __attribute__((vector_size(32)));
#define quad8_f32(q, h, lo, hi)                                                          \
    do {                                                                                 \
        const float *q_ = (q);                                                           \
        v8f_t u_, v_, w_, y_;                                                            \
        memcpy(&u_, q_, sizeof u_);                                                      \
        memcpy(&v_, q_ + (h), sizeof v_);                                                \
        memcpy(&w_, q_ + 2 * (h), sizeof w_);                                            \
        memcpy(&y_, q_ + 3 * (h), sizeof y_);                                            \
        u_ = (u_ + v_) + (w_ + y_);                                                      \
        (lo) += (v4d_t){(double)u_[0], (double)u_[1], (double)u_[2], (double)u_[3]};     \
        (hi) += (v4d_t){(double)u_[4], (double)u_[5], (double)u_[6], (double)u_[7]};     \
    } while (0)
#define quad8_f64(q, h, lo, hi) ((void)(q)) /* (never called: f64 does not group) */
/* the same for four lanes (the column loop's 4-wide tail) */
#define quad4_f32(q, h)                                                                  \
    ({                                                                                   \
        const float *q_ = (q);                                                           \
        v4f_t u_, v_, w_, y_;                                                            \
        memcpy(&u_, q_, sizeof u_);                                                      \
        memcpy(&v_, q_ + (h), sizeof v_);                                                \
        memcpy(&w_, q_ + 2 * (h), sizeof w_);                                            \
        memcpy(&y_, q_ + 3 * (h), sizeof y_);                                            \
        u_ = (u_ + v_) + (w_ + y_);                                                      \
        (v4d_t){(double)u_[0], (double)u_[1], (double)u_[2], (double)u_[3]};             \
    })
#define quad4_f64(q, h) load4_f64(q)
#define SUM16(NAME, T, LOADV, QUADV8, QUAD)                                              \
    static inline __attribute__((always_inline)) double NAME(const T *p, int64_t n) {    \
        v4d_t a0 = {0, 0, 0, 0}, a1 = a0, a2 = a0, a3 = a0;                              \
        int64_t i = 0;                                                                   \
        for (; QUAD && i + 64 <= n; i += 64) {                                           \
            QUADV8(p + i, 16, a0, a1);                                                   \
            QUADV8(p + i + 8, 16, a2, a3);                                               \
        }                                                                                \
        for (; i + 16 <= n; i += 16) {                                                   \
            a0 += LOADV(p + i);                                                          \
            a1 += LOADV(p + i + 4);                                                      \
            a2 += LOADV(p + i + 8);                                                      \
            a3 += LOADV(p + i + 12);                                                     \
        }                                                                                \
        double t = a0[0];                                                                \
        for (; i < n; i++) t += (double)p[i];                                            \
        a0[0] = t;                                                                       \
        a0 += a2;                                                                        \
        a1 += a3;                                                                        \
        a0 += a1;                                                                        \
        return (a0[0] + a0[2]) + (a0[1] + a0[3]);                                        \
    }
SUM16(sum16_f32, float, load4_f32, quad8_f32, 1)
SUM16(sum16_f64, double, load4_f64, quad8_f64, 0)
#define sum16_f32_ok 1
#define sum16_f64_ok 1
#define NO_VEC16(p, n) 0
#define NO_VEC16_ok 0

/* Column sums for the outer order: acc[j] += p[r * rs + j] over rows r in
 * order (f32: rows r..r + 3 grouped in float first), 32 columns at a time
 * in eight double vectors that stay in registers across the rows. Every
 * column gets the same additions whichever of the three loops takes it. */
#define SUMCOLS(NAME, T, LOADV, QUADV, QUADV8, QUAD)                                     \
    OARI_SIMD_CLONES static void NAME(void *accv, const char *pv, int64_t rs, int64_t nrows, \
                                      int64_t m) {                                       \
        double *acc = accv;                                                              \
        const T *p = (const T *)pv;                                                      \
        const int64_t nquad = QUAD ? nrows & ~(int64_t)3 : 0;                            \
        int64_t j = 0;                                                                   \
        for (; j + 32 <= m; j += 32) { /* (named vectors: an array lives on the stack) */ \
            v4d_t a0, a1, a2, a3, a4, a5, a6, a7;                                        \
            memcpy(&a0, acc + j, 32), memcpy(&a1, acc + j + 4, 32);                      \
            memcpy(&a2, acc + j + 8, 32), memcpy(&a3, acc + j + 12, 32);                 \
            memcpy(&a4, acc + j + 16, 32), memcpy(&a5, acc + j + 20, 32);                \
            memcpy(&a6, acc + j + 24, 32), memcpy(&a7, acc + j + 28, 32);                \
            int64_t r = 0;                                                               \
            for (; r < nquad; r += 4) {                                                  \
                const T *q = p + r * rs + j;                                             \
                QUADV8(q, rs, a0, a1);                                                   \
                QUADV8(q + 8, rs, a2, a3);                                               \
                QUADV8(q + 16, rs, a4, a5);                                              \
                QUADV8(q + 24, rs, a6, a7);                                              \
            }                                                                            \
            for (; r < nrows; r++) {                                                     \
                const T *q = p + r * rs + j;                                             \
                a0 += LOADV(q), a1 += LOADV(q + 4), a2 += LOADV(q + 8);                  \
                a3 += LOADV(q + 12), a4 += LOADV(q + 16), a5 += LOADV(q + 20);           \
                a6 += LOADV(q + 24), a7 += LOADV(q + 28);                                \
            }                                                                            \
            memcpy(acc + j, &a0, 32), memcpy(acc + j + 4, &a1, 32);                      \
            memcpy(acc + j + 8, &a2, 32), memcpy(acc + j + 12, &a3, 32);                 \
            memcpy(acc + j + 16, &a4, 32), memcpy(acc + j + 20, &a5, 32);                \
            memcpy(acc + j + 24, &a6, 32), memcpy(acc + j + 28, &a7, 32);                \
        }                                                                                \
        for (; j + 4 <= m; j += 4) {                                                     \
            v4d_t a;                                                                     \
            memcpy(&a, acc + j, sizeof a);                                               \
            int64_t r = 0;                                                               \
            for (; r < nquad; r += 4) a += QUADV(p + r * rs + j, rs);                    \
            for (; r < nrows; r++) a += LOADV(p + r * rs + j);                           \
            memcpy(acc + j, &a, sizeof a);                                               \
        }                                                                                \
        for (; j < m; j++) {                                                             \
            double a = acc[j];                                                           \
            int64_t r = 0;                                                               \
            for (; r < nquad; r += 4) {                                                  \
                const T *q = p + r * rs + j;                                             \
                a += (double)(T)((T)(q[0] + q[rs]) + (T)(q[2 * rs] + q[3 * rs]));        \
            }                                                                            \
            for (; r < nrows; r++) a += (double)p[r * rs + j];                           \
            acc[j] = a;                                                                  \
        }                                                                                \
    }
SUMCOLS(sumcols_f32, float, load4_f32, quad4_f32, quad8_f32, 1)
SUMCOLS(sumcols_f64, double, load4_f64, quad4_f64, quad8_f64, 0)
#define sum16_f32_cols sumcols_f32
#define sum16_f64_cols sumcols_f64
#define NO_VEC16_cols NULL

/* QUAD: f32 sums, whose runs group four elements in T first (see above). */
#define SUMPROD(N, T, A, LD, TO, OPEQ, ONE, VEC16, QUAD)                                 \
    OARI_SIMD_CLONES static A N##_pw(const T *p, int64_t s, int64_t n) {                 \
        if (n <= 256) {                                                                  \
            if (VEC16##_ok && s == 1) return (A)VEC16(p, n);                             \
            A a[16];                                                                     \
            for (int k = 0; k < 16; k++) a[k] = ONE;                                     \
            int64_t i = 0;                                                               \
            for (; QUAD && i + 64 <= n; i += 64)                                         \
                for (int k = 0; k < 16; k++) {                                           \
                    const T *q = p + (i + k) * s;                                        \
                    a[k] OPEQ LD(T, (T)((T)(q[0] + q[16 * s]) + (T)(q[32 * s] + q[48 * s]))); \
                }                                                                        \
            if (s == 1) {                                                                \
                for (; i + 16 <= n; i += 16) {                                           \
                    _Pragma("omp simd")                                                  \
                    for (int k = 0; k < 16; k++) a[k] OPEQ LD(T, p[i + k]);              \
                }                                                                        \
            } else {                                                                     \
                for (; i + 16 <= n; i += 16)                                             \
                    for (int k = 0; k < 16; k++) a[k] OPEQ LD(T, p[(i + k) * s]);        \
            }                                                                            \
            for (; i < n; i++) a[0] OPEQ LD(T, p[i * s]);                                \
            for (int w = 8; w >= 1; w /= 2)                                              \
                for (int k = 0; k < w; k++) a[k] OPEQ a[k + w];                          \
            return a[0];                                                                 \
        }                                                                                \
        int64_t h = (n / 2) & ~(int64_t)(QUAD ? 63 : 15);                                \
        A l = N##_pw(p, s, h);                                                           \
        l OPEQ N##_pw(p + h * s, s, n - h);                                              \
        return l;                                                                        \
    }                                                                                    \
    static void N##_init(void *acc, int64_t n) {                                         \
        for (int64_t i = 0; i < n; i++) ((A *)acc)[i] = ONE;                             \
    }                                                                                    \
    static void N##_run(void *acc, const char *p, int64_t s, int64_t n, int64_t pos) {   \
        (void)pos;                                                                       \
        *(A *)acc OPEQ N##_pw((const T *)p, s, n);                                       \
    }                                                                                    \
    OARI_SIMD_CLONES                                                                     \
    static void N##_row(void *acc, const char *p, int64_t s, int64_t m, int64_t pos) {   \
        (void)pos;                                                                       \
        A *a = acc;                                                                      \
        const T *x = (const T *)p;                                                       \
        if (s == 1) {                                                                    \
            _Pragma("omp simd")                                                          \
            for (int64_t j = 0; j < m; j++) a[j] OPEQ LD(T, x[j]);                       \
        } else {                                                                         \
            for (int64_t j = 0; j < m; j++) a[j] OPEQ LD(T, x[j * s]);                   \
        }                                                                                \
    }                                                                                    \
    static void N##_combine(void *a, const void *b) { *(A *)a OPEQ *(const A *)b; }      \
    static void N##_store(char *out, const void *acc) { *(TO *)out = (TO) * (const A *)acc; } \
    OARI_SIMD_CLONES                                                                     \
    static void N##_rows(char *out, const char *p, int64_t nrows, int64_t rs, int64_t n) { \
        for (int64_t r = 0; r < nrows; r++) {                                            \
            const T *x = (const T *)p + r * rs;                                          \
            A a = ONE;                                                                   \
            if (VEC16##_ok && n <= 256) a OPEQ (A)VEC16(x, n);                           \
            else a OPEQ N##_pw(x, 1, n);                                                 \
            ((TO *)out)[r] = (TO)a;                                                      \
        }                                                                                \
    }                                                                                    \
    static const rkind N##_kind = {sizeof(A), N##_init, N##_run, N##_row, N##_combine, N##_store, \
                                   VEC16##_ok ? N##_rows : NULL, VEC16##_cols};

#define SUMPROD_ALL(OP, OPEQ, ONE, V32, V64, Q32)                                        \
    SUMPROD(OP##_b8, uint8_t, uint64_t, LD_int, int64_t, OPEQ, ONE, NO_VEC16, 0)         \
    SUMPROD(OP##_u8, uint8_t, uint64_t, LD_int, int64_t, OPEQ, ONE, NO_VEC16, 0)         \
    SUMPROD(OP##_i8, int8_t, uint64_t, LD_int, int64_t, OPEQ, ONE, NO_VEC16, 0)          \
    SUMPROD(OP##_i32, int32_t, uint64_t, LD_int, int64_t, OPEQ, ONE, NO_VEC16, 0)        \
    SUMPROD(OP##_i64, int64_t, uint64_t, LD_int, int64_t, OPEQ, ONE, NO_VEC16, 0)        \
    SUMPROD(OP##_f32, float, double, LD_flt, float, OPEQ, ONE, V32, Q32)                 \
    SUMPROD(OP##_f64, double, double, LD_flt, double, OPEQ, ONE, V64, 0)                 \
    SUMPROD(OP##_c64, c64_t, c128_t, LD_cpx, c64_t, OPEQ, ONE, NO_VEC16, 0)              \
    SUMPROD(OP##_c128, c128_t, c128_t, LD_cpx, c128_t, OPEQ, ONE, NO_VEC16, 0)

SUMPROD_ALL(sum, +=, 0, sum16_f32, sum16_f64, 1)
SUMPROD_ALL(prod, *=, 1, NO_VEC16, NO_VEC16, 0)

/* ---- amax and amin: NaN propagates ------------------------------------------ */

/* Float amax/amin of a contiguous run in 32-byte vectors (compare, then
 * select by masks) plus a NaN flag; on a NaN the first NaN is the result,
 * as in the generic loop. */
typedef float v8f_t __attribute__((vector_size(32)));
typedef int32_t v8i_t __attribute__((vector_size(32)));
typedef int64_t v4i_t __attribute__((vector_size(32)));
#define FAST_EXTREME(T, VT, VI, CMP)                                                     \
    if (s == 1 && a0 == a0 && n >= 2 * (int64_t)(sizeof(VT) / sizeof(T))) {              \
        enum { L = sizeof(VT) / sizeof(T) };                                             \
        VT m0, m1;                                                                       \
        VI nan = {0};                                                                    \
        memcpy(&m0, x, sizeof m0);                                                       \
        memcpy(&m1, x + L, sizeof m1);                                                   \
        nan |= (m0 != m0) | (m1 != m1);                                                  \
        int64_t i = 2 * L;                                                               \
        for (; i + 2 * L <= n; i += 2 * L) {                                             \
            VT v0, v1;                                                                   \
            memcpy(&v0, x + i, sizeof v0);                                               \
            memcpy(&v1, x + i + L, sizeof v1);                                           \
            VI k0 = v0 CMP m0, k1 = v1 CMP m1;                                           \
            nan |= (v0 != v0) | (v1 != v1);                                              \
            m0 = (VT)(((VI)v0 & k0) | ((VI)m0 & ~k0));                                   \
            m1 = (VT)(((VI)v1 & k1) | ((VI)m1 & ~k1));                                   \
        }                                                                                \
        int any = 0;                                                                     \
        for (int k = 0; k < L; k++) any |= nan[k] != 0;                                  \
        /* fold the lanes in vector halves (a row of 128 spent a third of its            \
         * time in a lane-by-lane fold); NaN lanes are handled below */                  \
        VI k1 = m1 CMP m0;                                                               \
        m0 = (VT)(((VI)m1 & k1) | ((VI)m0 & ~k1));                                       \
        for (int h = L / 2; h >= 1; h /= 2) {                                            \
            VI idx;                                                                      \
            for (int k = 0; k < L; k++) idx[k] = k ^ h;                                  \
            VT sw = OARI_SHUFFLE1(m0, idx);                                              \
            VI kk = sw CMP m0;                                                           \
            m0 = (VT)(((VI)sw & kk) | ((VI)m0 & ~kk));                                   \
        }                                                                                \
        T m = m0[0] CMP a0 ? m0[0] : a0;                                                 \
        for (; i < n; i++) {                                                             \
            any |= x[i] != x[i];                                                         \
            m = x[i] CMP m ? x[i] : m;                                                   \
        }                                                                                \
        for (int64_t j = 0; any && j < n; j++)                                           \
            if (x[j] != x[j]) {                                                          \
                m = x[j];                                                                \
                break;                                                                   \
            }                                                                            \
        *(T *)acc = m;                                                                   \
        return;                                                                          \
    }
#define FAST_MAX_f32(T) FAST_EXTREME(T, v8f_t, v8i_t, >)
#define FAST_MIN_f32(T) FAST_EXTREME(T, v8f_t, v8i_t, <)
#define FAST_MAX_f64(T) FAST_EXTREME(T, v4d_t, v4i_t, >)
#define FAST_MIN_f64(T) FAST_EXTREME(T, v4d_t, v4i_t, <)
#define FAST_NONE(T)

/* f32 amax/amin of contiguous rows (last-dim reductions), eight rows at a
 * time: each row keeps its own vector of lane extremes, so eight
 * compare-select chains run side by side, and one transpose-and-reduce of
 * the eight vectors (three levels of shuffles) gives the eight results. A
 * row alone waited on its single chain and folded its lanes by itself: 1.3x
 * PyTorch's time at 512 rows of 128. One NaN flag covers the eight rows;
 * when set, each row is reduced again by the exact loop (`run`: the first
 * NaN is the result). The rows left over (fewer than eight) and rows
 * shorter than eight go through `run` too. */
#define SEL8(CMP, a, b) ({ v8i_t k_ = (a) CMP (b); (v8f_t)(((v8i_t)(a) & k_) | ((v8i_t)(b) & ~k_)); })
/* one level of the transpose-and-reduce: lanes LO of (a, b) against lanes HI */
/* lanes of the three levels (lo lanes, then hi lanes): pairs of rows, then
 * quads, then the two halves */
#define PAIRS1 0, 8, 1, 9, 4, 12, 5, 13, 2, 10, 3, 11, 6, 14, 7, 15
#define PAIRS2 0, 1, 8, 9, 4, 5, 12, 13, 2, 3, 10, 11, 6, 7, 14, 15
#define PAIRS3 0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 12, 13, 14, 15
#define LEVEL8(CMP, a, b, LANES) LEVEL8_(CMP, a, b, LANES) /* (LANES expands first) */
#define LEVEL8_(CMP, a, b, l0, l1, l2, l3, l4, l5, l6, l7, h0, h1, h2, h3, h4, h5, h6, h7) \
    ({                                                                                   \
        v8f_t lo_ = OARI_SHUFFLE2(a, b, v8i_t, l0, l1, l2, l3, l4, l5, l6, l7);          \
        v8f_t hi_ = OARI_SHUFFLE2(a, b, v8i_t, h0, h1, h2, h3, h4, h5, h6, h7);          \
        SEL8(CMP, lo_, hi_);                                                             \
    })
#define EXTREME_ROWS8(NAME, CMP, RUN, WORST)                                             \
    OARI_SIMD_CLONES static void NAME(char *out, const char *p, int64_t nrows, int64_t rs, \
                                      int64_t n) {                                       \
        float *o = (float *)out;                                                         \
        const float *x = (const float *)p;                                               \
        int64_t r = 0;                                                                   \
        for (; n >= 8 && r + 8 <= nrows; r += 8) {                                       \
            const float *q = x + r * rs;                                                 \
            v8f_t m0, m1, m2, m3, m4, m5, m6, m7;                                        \
            memcpy(&m0, q, 32), memcpy(&m1, q + rs, 32), memcpy(&m2, q + 2 * rs, 32);    \
            memcpy(&m3, q + 3 * rs, 32), memcpy(&m4, q + 4 * rs, 32);                    \
            memcpy(&m5, q + 5 * rs, 32), memcpy(&m6, q + 6 * rs, 32);                    \
            memcpy(&m7, q + 7 * rs, 32);                                                 \
            v8i_t nan = (m0 != m0) | (m1 != m1) | (m2 != m2) | (m3 != m3) | (m4 != m4) |   \
                      (m5 != m5) | (m6 != m6) | (m7 != m7);                              \
            int64_t i = 8;                                                               \
            for (; i + 8 <= n; i += 8) {                                                 \
                v8f_t v;                                                                 \
                memcpy(&v, q + i, 32), nan |= v != v, m0 = SEL8(CMP, v, m0);             \
                memcpy(&v, q + rs + i, 32), nan |= v != v, m1 = SEL8(CMP, v, m1);        \
                memcpy(&v, q + 2 * rs + i, 32), nan |= v != v, m2 = SEL8(CMP, v, m2);    \
                memcpy(&v, q + 3 * rs + i, 32), nan |= v != v, m3 = SEL8(CMP, v, m3);    \
                memcpy(&v, q + 4 * rs + i, 32), nan |= v != v, m4 = SEL8(CMP, v, m4);    \
                memcpy(&v, q + 5 * rs + i, 32), nan |= v != v, m5 = SEL8(CMP, v, m5);    \
                memcpy(&v, q + 6 * rs + i, 32), nan |= v != v, m6 = SEL8(CMP, v, m6);    \
                memcpy(&v, q + 7 * rs + i, 32), nan |= v != v, m7 = SEL8(CMP, v, m7);    \
            }                                                                            \
            /* lane k of e: the extreme of row k's vector */                             \
            v8f_t c01 = LEVEL8(CMP, m0, m1, PAIRS1);                                     \
            v8f_t c23 = LEVEL8(CMP, m2, m3, PAIRS1);                                     \
            v8f_t c45 = LEVEL8(CMP, m4, m5, PAIRS1);                                     \
            v8f_t c67 = LEVEL8(CMP, m6, m7, PAIRS1);                                     \
            v8f_t d03 = LEVEL8(CMP, c01, c23, PAIRS2);                                   \
            v8f_t d47 = LEVEL8(CMP, c45, c67, PAIRS2);                                   \
            v8f_t e = LEVEL8(CMP, d03, d47, PAIRS3);                                     \
            int any = 0;                                                                 \
            for (int k = 0; k < 8; k++) any |= nan[k] != 0;                              \
            for (int k = 0; k < 8; k++) {                                                \
                const float *row = q + k * rs;                                           \
                float m = e[k];                                                          \
                for (int64_t t = i; t < n; t++) {                                        \
                    any |= row[t] != row[t];                                             \
                    m = row[t] CMP m ? row[t] : m;                                       \
                }                                                                        \
                o[r + k] = m;                                                            \
            }                                                                            \
            for (int k = 0; any && k < 8; k++) {                                         \
                float a = WORST;                                                         \
                RUN(&a, (const char *)(q + k * rs), 1, n, 0);                            \
                o[r + k] = a;                                                            \
            }                                                                            \
        }                                                                                \
        for (; r < nrows; r++) {                                                         \
            float a = WORST;                                                             \
            RUN(&a, (const char *)(x + r * rs), 1, n, 0);                                \
            o[r] = a;                                                                    \
        }                                                                                \
    }

#define MINMAX(N, T, BETTER, WORST, FAST, ROWS)                                          \
    static void N##_init(void *acc, int64_t n) {                                         \
        for (int64_t i = 0; i < n; i++) ((T *)acc)[i] = WORST;                           \
    }                                                                                    \
    OARI_SIMD_CLONES                                                                     \
    static void N##_run(void *acc, const char *p, int64_t s, int64_t n, int64_t pos) {   \
        (void)pos;                                                                       \
        const T *x = (const T *)p;                                                       \
        const T a0 = *(T *)acc;                                                          \
        (void)a0;                                                                        \
        FAST(T)                                                                          \
        T a[8];                                                                          \
        for (int k = 0; k < 8; k++) a[k] = *(T *)acc;                                    \
        int64_t i = 0;                                                                   \
        if (s == 1) {                                                                    \
            for (; i + 8 <= n; i += 8) {                                                 \
                _Pragma("omp simd")                                                      \
                for (int k = 0; k < 8; k++) {                                            \
                    T v = x[i + k];                                                      \
                    a[k] = BETTER(v, a[k]) ? v : a[k];                                   \
                }                                                                        \
            }                                                                            \
        }                                                                                \
        for (; i < n; i++) {                                                             \
            T v = x[i * s];                                                              \
            a[0] = BETTER(v, a[0]) ? v : a[0];                                           \
        }                                                                                \
        for (int k = 1; k < 8; k++) a[0] = BETTER(a[k], a[0]) ? a[k] : a[0];             \
        *(T *)acc = a[0];                                                                \
    }                                                                                    \
    OARI_SIMD_CLONES                                                                     \
    static void N##_row(void *acc, const char *p, int64_t s, int64_t m, int64_t pos) {   \
        (void)pos;                                                                       \
        T *a = acc;                                                                      \
        const T *x = (const T *)p;                                                       \
        if (s == 1) {                                                                    \
            _Pragma("omp simd")                                                          \
            for (int64_t j = 0; j < m; j++) a[j] = BETTER(x[j], a[j]) ? x[j] : a[j];     \
        } else                                                                           \
            for (int64_t j = 0; j < m; j++) {                                            \
                T v = x[j * s];                                                          \
                a[j] = BETTER(v, a[j]) ? v : a[j];                                       \
            }                                                                            \
    }                                                                                    \
    static void N##_combine(void *a, const void *b) {                                    \
        T v = *(const T *)b;                                                             \
        if (BETTER(v, *(T *)a)) *(T *)a = v;                                             \
    }                                                                                    \
    static void N##_store(char *out, const void *acc) { *(T *)out = *(const T *)acc; }   \
    static const rkind N##_kind = {sizeof(T), N##_init, N##_run, N##_row, N##_combine, N##_store, ROWS, NULL};

/* v replaces the best so far if larger (smaller), or NaN: once NaN, stays NaN. */
#define GT_NAN(v, a) ((v) > (a) || (v) != (v))
#define LT_NAN(v, a) ((v) < (a) || (v) != (v))
#define GT_INT(v, a) ((v) > (a))
#define MINMAX_I(N, T, B, W) MINMAX(N, T, B, W, FAST_NONE, NULL)
#define LT_INT(v, a) ((v) < (a))

OARI_SIMD_CLONES static void amax_f32_rows8(char *, const char *, int64_t, int64_t, int64_t);
OARI_SIMD_CLONES static void amin_f32_rows8(char *, const char *, int64_t, int64_t, int64_t);
MINMAX_I(amax_b8, uint8_t, GT_INT, 0)
MINMAX_I(amax_u8, uint8_t, GT_INT, 0)
MINMAX_I(amax_i8, int8_t, GT_INT, INT8_MIN)
MINMAX_I(amax_i32, int32_t, GT_INT, INT32_MIN)
MINMAX_I(amax_i64, int64_t, GT_INT, INT64_MIN)
MINMAX(amax_f32, float, GT_NAN, -INFINITY, FAST_MAX_f32, amax_f32_rows8)
MINMAX(amax_f64, double, GT_NAN, -INFINITY, FAST_MAX_f64, NULL)
MINMAX_I(amin_b8, uint8_t, LT_INT, 1)
MINMAX_I(amin_u8, uint8_t, LT_INT, UINT8_MAX)
MINMAX_I(amin_i8, int8_t, LT_INT, INT8_MAX)
MINMAX_I(amin_i32, int32_t, LT_INT, INT32_MAX)
MINMAX_I(amin_i64, int64_t, LT_INT, INT64_MAX)
MINMAX(amin_f32, float, LT_NAN, INFINITY, FAST_MIN_f32, amin_f32_rows8)
MINMAX(amin_f64, double, LT_NAN, INFINITY, FAST_MIN_f64, NULL)
EXTREME_ROWS8(amax_f32_rows8, >, amax_f32_run, -INFINITY)
EXTREME_ROWS8(amin_f32_rows8, <, amin_f32_run, INFINITY)

/* ---- argmax and argmin: the first index of the extreme; NaN counts as the
 * extreme (the first NaN wins), as in PyTorch. ---------------------------------- */

#define ARGEXT(N, T, BETTER)                                                             \
    typedef struct { T v; int64_t i; } N##_acc;                                          \
    static inline bool N##_wins(T v, const N##_acc *a) {                                 \
        return a->i < 0 || (a->v == a->v && BETTER(v, a->v));                            \
    }                                                                                    \
    static void N##_init(void *acc, int64_t n) {                                         \
        for (int64_t i = 0; i < n; i++) {                                                \
            ((N##_acc *)acc)[i].v = 0;                                                   \
            ((N##_acc *)acc)[i].i = -1;                                                  \
        }                                                                                \
    }                                                                                    \
    static void N##_run(void *acc, const char *p, int64_t s, int64_t n, int64_t pos) {   \
        N##_acc *a = acc;                                                                \
        const T *x = (const T *)p;                                                       \
        for (int64_t i = 0; i < n; i++) {                                                \
            T v = x[i * s];                                                              \
            if (N##_wins(v, a)) {                                                        \
                a->v = v;                                                                \
                a->i = pos + i;                                                          \
            }                                                                            \
        }                                                                                \
    }                                                                                    \
    static void N##_row(void *acc, const char *p, int64_t s, int64_t m, int64_t pos) {   \
        N##_acc *a = acc;                                                                \
        const T *x = (const T *)p;                                                       \
        for (int64_t j = 0; j < m; j++) {                                                \
            T v = x[j * s];                                                              \
            if (N##_wins(v, &a[j])) {                                                    \
                a[j].v = v;                                                              \
                a[j].i = pos;                                                            \
            }                                                                            \
        }                                                                                \
    }                                                                                    \
    static void N##_combine(void *a, const void *b) {                                    \
        const N##_acc *y = b;                                                            \
        if (y->i >= 0 && N##_wins(y->v, a)) *(N##_acc *)a = *y;                          \
    }                                                                                    \
    static void N##_store(char *out, const void *acc) {                                  \
        *(int64_t *)out = ((const N##_acc *)acc)->i;                                     \
    }                                                                                    \
    static const rkind N##_kind = {sizeof(N##_acc), N##_init, N##_run, N##_row, N##_combine, \
                                   N##_store, NULL, NULL};

ARGEXT(argmax_b8, uint8_t, GT_NAN)
ARGEXT(argmax_u8, uint8_t, GT_NAN)
ARGEXT(argmax_i8, int8_t, GT_NAN)
ARGEXT(argmax_i32, int32_t, GT_NAN)
ARGEXT(argmax_i64, int64_t, GT_NAN)
ARGEXT(argmax_f32, float, GT_NAN)
ARGEXT(argmax_f64, double, GT_NAN)
ARGEXT(argmin_b8, uint8_t, LT_NAN)
ARGEXT(argmin_u8, uint8_t, LT_NAN)
ARGEXT(argmin_i8, int8_t, LT_NAN)
ARGEXT(argmin_i32, int32_t, LT_NAN)
ARGEXT(argmin_i64, int64_t, LT_NAN)
ARGEXT(argmin_f32, float, LT_NAN)
ARGEXT(argmin_f64, double, LT_NAN)

/* ---- all and any: every dtype in, bool out ----------------------------------- */

#define NZ_real(v) ((v) != 0)
#define NZ_cpx(v) (creal(v) != 0 || cimag(v) != 0)

#define ALLANY(N, T, NZ, IS_ALL)                                                         \
    static void N##_init(void *acc, int64_t n) { memset(acc, IS_ALL, (size_t)n); }       \
    static void N##_run(void *acc, const char *p, int64_t s, int64_t n, int64_t pos) {   \
        (void)pos;                                                                       \
        const T *x = (const T *)p;                                                       \
        uint8_t a = *(uint8_t *)acc;                                                     \
        if (IS_ALL) {                                                                    \
            _Pragma("omp simd reduction(&: a)")                                          \
            for (int64_t i = 0; i < n; i++) a &= (uint8_t)NZ(x[i * s]);                  \
        } else {                                                                         \
            _Pragma("omp simd reduction(|: a)")                                          \
            for (int64_t i = 0; i < n; i++) a |= (uint8_t)NZ(x[i * s]);                  \
        }                                                                                \
        *(uint8_t *)acc = a;                                                             \
    }                                                                                    \
    static void N##_row(void *acc, const char *p, int64_t s, int64_t m, int64_t pos) {   \
        (void)pos;                                                                       \
        uint8_t *a = acc;                                                                \
        const T *x = (const T *)p;                                                       \
        if (IS_ALL) {                                                                    \
            _Pragma("omp simd")                                                          \
            for (int64_t j = 0; j < m; j++) a[j] &= (uint8_t)NZ(x[j * s]);               \
        } else {                                                                         \
            _Pragma("omp simd")                                                          \
            for (int64_t j = 0; j < m; j++) a[j] |= (uint8_t)NZ(x[j * s]);               \
        }                                                                                \
    }                                                                                    \
    static void N##_combine(void *a, const void *b) {                                    \
        if (IS_ALL) *(uint8_t *)a &= *(const uint8_t *)b;                                \
        else *(uint8_t *)a |= *(const uint8_t *)b;                                       \
    }                                                                                    \
    static void N##_store(char *out, const void *acc) { *(uint8_t *)out = *(const uint8_t *)acc; } \
    static const rkind N##_kind = {1, N##_init, N##_run, N##_row, N##_combine, N##_store, NULL, NULL};

#define ALLANY_ALL(OP, IS_ALL)                                                           \
    ALLANY(OP##_b8, uint8_t, NZ_real, IS_ALL)                                            \
    ALLANY(OP##_u8, uint8_t, NZ_real, IS_ALL)                                            \
    ALLANY(OP##_i8, int8_t, NZ_real, IS_ALL)                                             \
    ALLANY(OP##_i32, int32_t, NZ_real, IS_ALL)                                           \
    ALLANY(OP##_i64, int64_t, NZ_real, IS_ALL)                                           \
    ALLANY(OP##_f16, uint16_t, NZ_half, IS_ALL)                                          \
    ALLANY(OP##_f32, float, NZ_real, IS_ALL)                                             \
    ALLANY(OP##_f64, double, NZ_real, IS_ALL)                                            \
    ALLANY(OP##_c64, c64_t, NZ_cpx, IS_ALL)                                              \
    ALLANY(OP##_c128, c128_t, NZ_cpx, IS_ALL)

/* f16 and bf16 are zero when every bit but the sign is (NaN is non-zero). */
#define NZ_half(v) (((v) & 0x7fffu) != 0)

ALLANY_ALL(all, 1)
ALLANY_ALL(any, 0)

/* ---- kernel entries ------------------------------------------------------------ */

static int reduce_kernel(const rkind *k, const oar_kernel_call *c, bool keep_order) {
    return reduce_run(k, &c->in[0], &c->out[0], (uint64_t)c->iattr[0], keep_order);
}

#define KERNEL(N)                                                                        \
    static int k_##N(void *ctx, const oar_kernel_call *c) {                              \
        (void)ctx;                                                                       \
        return reduce_kernel(&N##_kind, c, false);                                       \
    }
/* argmax/argmin: iattr[0] is a dim, or -1 for the flattened tensor; the
 * reduced dims keep their logical order so positions are row-major indices. */
#define ARG_KERNEL(N)                                                                    \
    static int k_##N(void *ctx, const oar_kernel_call *c) {                              \
        (void)ctx;                                                                       \
        int64_t d = c->iattr[0];                                                         \
        uint64_t mask = d < 0 ? ~(uint64_t)0 : (uint64_t)1 << d;                         \
        return reduce_run(&N##_kind, &c->in[0], &c->out[0], mask, true);                 \
    }

#define TABLE_SUMPROD(OP)                                                                \
    KERNEL(OP##_b8) KERNEL(OP##_u8) KERNEL(OP##_i32) KERNEL(OP##_i64) KERNEL(OP##_f32)   \
    KERNEL(OP##_f64) KERNEL(OP##_c64) KERNEL(OP##_c128) KERNEL(OP##_i8)                  \
    const oari_cpu_kernels oari_cpu_k_##OP = {                                           \
        [OAR_BOOL] = k_##OP##_b8, [OAR_U8] = k_##OP##_u8, [OAR_I8] = k_##OP##_i8,        \
        [OAR_I32] = k_##OP##_i32,                                                        \
        [OAR_I64] = k_##OP##_i64, [OAR_F32] = k_##OP##_f32, [OAR_F64] = k_##OP##_f64,    \
        [OAR_C64] = k_##OP##_c64, [OAR_C128] = k_##OP##_c128};

TABLE_SUMPROD(sum)
TABLE_SUMPROD(prod)

#define TABLE_REAL(OP, K)                                                                \
    K(OP##_b8) K(OP##_u8) K(OP##_i32) K(OP##_i64) K(OP##_f32) K(OP##_f64) K(OP##_i8)     \
    const oari_cpu_kernels oari_cpu_k_##OP = {                                           \
        [OAR_BOOL] = k_##OP##_b8, [OAR_U8] = k_##OP##_u8, [OAR_I8] = k_##OP##_i8,        \
        [OAR_I32] = k_##OP##_i32,                                                        \
        [OAR_I64] = k_##OP##_i64, [OAR_F32] = k_##OP##_f32, [OAR_F64] = k_##OP##_f64};

TABLE_REAL(amax, KERNEL)
TABLE_REAL(amin, KERNEL)
TABLE_REAL(argmax, ARG_KERNEL)
TABLE_REAL(argmin, ARG_KERNEL)

#define TABLE_ALLANY(OP)                                                                 \
    KERNEL(OP##_b8) KERNEL(OP##_u8) KERNEL(OP##_i32) KERNEL(OP##_i64) KERNEL(OP##_f16)   \
    KERNEL(OP##_f32) KERNEL(OP##_f64) KERNEL(OP##_c64) KERNEL(OP##_c128) KERNEL(OP##_i8) \
    const oari_cpu_kernels oari_cpu_k_##OP = {                                           \
        [OAR_BOOL] = k_##OP##_b8, [OAR_U8] = k_##OP##_u8, [OAR_I8] = k_##OP##_i8,        \
        [OAR_I32] = k_##OP##_i32,                                                        \
        [OAR_I64] = k_##OP##_i64, [OAR_F16] = k_##OP##_f16, [OAR_BF16] = k_##OP##_f16,   \
        [OAR_F32] = k_##OP##_f32, [OAR_F64] = k_##OP##_f64, [OAR_C64] = k_##OP##_c64,    \
        [OAR_C128] = k_##OP##_c128};

TABLE_ALLANY(all)
TABLE_ALLANY(any)

/* ---- cumsum and cumprod ---------------------------------------------------------
 * iattr[0]: dim. Output contiguous, same shape; ints and bool give i64.
 * Accumulated in double (f32, f64), double complex, or wrapping uint64. */

#define SCAN_BLOCK 1024

#define SCAN(N, T, A, LD, TO, OPEQ, ONE)                                                 \
    static void N##_line(const T *x, int64_t sx, TO *o, int64_t so, int64_t n) {         \
        A a = ONE;                                                                       \
        for (int64_t i = 0; i < n; i++) {                                                \
            a OPEQ LD(T, x[i * sx]);                                                     \
            o[i * so] = (TO)a;                                                           \
        }                                                                                \
    }                                                                                    \
    static void N##_block(const T *x, int64_t sd, int64_t si, TO *o, int64_t inner,      \
                          int64_t n, int64_t m) {                                        \
        A a[SCAN_BLOCK];                                                                 \
        for (int64_t j = 0; j < m; j++) a[j] = ONE;                                      \
        for (int64_t i = 0; i < n; i++) {                                                \
            const T *xr = x + i * sd;                                                    \
            TO *orow = o + i * inner;                                                    \
            if (si == 1) {                                                               \
                _Pragma("omp simd")                                                      \
                for (int64_t j = 0; j < m; j++) a[j] OPEQ LD(T, xr[j]);                  \
            } else {                                                                     \
                for (int64_t j = 0; j < m; j++) a[j] OPEQ LD(T, xr[j * si]);             \
            }                                                                            \
            _Pragma("omp simd")                                                          \
            for (int64_t j = 0; j < m; j++) orow[j] = (TO)a[j];                          \
        }                                                                                \
    }                                                                                    \
    static int k_##N(void *ctx, const oar_kernel_call *c) {                              \
        (void)ctx;                                                                       \
        return scan_run(c, (scan_line_fn)N##_line, (scan_block_fn)N##_block);            \
    }

typedef void (*scan_line_fn)(const void *x, int64_t sx, void *o, int64_t so, int64_t n);
typedef void (*scan_block_fn)(const void *x, int64_t sd, int64_t si, void *o, int64_t inner,
                              int64_t n, int64_t m);

static int scan_run(const oar_kernel_call *c, scan_line_fn line, scan_block_fn block) {
    const oar_ktensor *x = &c->in[0], *out = &c->out[0];
    if (x->ndim == 0) {
        line(x->data, 1, out->data, 1, 1);
        return 0;
    }
    const int dim = (int)c->iattr[0];
    const int64_t es = (int64_t)oar_dtype_size((oar_dtype)x->dtype);
    const int64_t os = (int64_t)oar_dtype_size((oar_dtype)out->dtype);
    const int64_t n = x->shape[dim], sd = x->strides[dim];
    /* outer dims before `dim` (kept as they are), inner dims after it merged if possible */
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < dim; d++) outer *= x->shape[d];
    int ni = 0;
    int64_t ishape[OAR_MAX_DIMS], istride[OAR_MAX_DIMS];
    for (int d = dim + 1; d < x->ndim; d++) {
        inner *= x->shape[d];
        if (x->shape[d] == 1) continue;
        if (ni && istride[ni - 1] == x->strides[d] * x->shape[d]) {
            ishape[ni - 1] *= x->shape[d];
            istride[ni - 1] = x->strides[d];
        } else {
            ishape[ni] = x->shape[d];
            istride[ni++] = x->strides[d];
        }
    }
    const int64_t total = outer * n * inner;
    if (total == 0) return 0;
    const bool parallel = total >= OARI_PARALLEL_GRAIN;
    const char *xd = x->data;
    char *od = out->data;
    if (ni <= 1 && inner > 1) {
        /* rows of the merged inner dim are scanned together, vectorised over it */
        const int64_t si = ni ? istride[0] : 0;
        const int64_t nj = (inner + SCAN_BLOCK - 1) / SCAN_BLOCK;
        OARI_PARALLEL_FOR_IF(parallel,
        for (int64_t w = 0; w < outer * nj; w++) {
            int64_t o = w / nj, j0 = (w % nj) * SCAN_BLOCK;
            int64_t m = j0 + SCAN_BLOCK < inner ? SCAN_BLOCK : inner - j0;
            int64_t xoff = lin_offset(dim, x->shape, x->strides, o) + j0 * si;
            block(xd + xoff * es, sd, si, od + (o * n * inner + j0) * os, inner, n, m);
        });
        return 0;
    }
    /* one line per (outer, inner) position */
    OARI_PARALLEL_FOR_IF(parallel,
    for (int64_t l = 0; l < outer * inner; l++) {
        int64_t o = l / inner, j = l % inner;
        int64_t xoff = lin_offset(dim, x->shape, x->strides, o) + lin_offset(ni, ishape, istride, j);
        line(xd + xoff * es, sd, od + (o * n * inner + j) * os, inner, n);
    });
    return 0;
}

#define SCAN_ALL(OP, OPEQ, ONE)                                                          \
    SCAN(OP##_b8, uint8_t, uint64_t, LD_int, int64_t, OPEQ, ONE)                         \
    SCAN(OP##_u8, uint8_t, uint64_t, LD_int, int64_t, OPEQ, ONE)                         \
    SCAN(OP##_i8, int8_t, uint64_t, LD_int, int64_t, OPEQ, ONE)                          \
    SCAN(OP##_i32, int32_t, uint64_t, LD_int, int64_t, OPEQ, ONE)                        \
    SCAN(OP##_i64, int64_t, uint64_t, LD_int, int64_t, OPEQ, ONE)                        \
    SCAN(OP##_f32, float, double, LD_flt, float, OPEQ, ONE)                              \
    SCAN(OP##_f64, double, double, LD_flt, double, OPEQ, ONE)                            \
    SCAN(OP##_c64, c64_t, c128_t, LD_cpx, c64_t, OPEQ, ONE)                              \
    SCAN(OP##_c128, c128_t, c128_t, LD_cpx, c128_t, OPEQ, ONE)                           \
    const oari_cpu_kernels oari_cpu_k_##OP = {                                           \
        [OAR_BOOL] = k_##OP##_b8, [OAR_U8] = k_##OP##_u8, [OAR_I8] = k_##OP##_i8,        \
        [OAR_I32] = k_##OP##_i32,                                                        \
        [OAR_I64] = k_##OP##_i64, [OAR_F32] = k_##OP##_f32, [OAR_F64] = k_##OP##_f64,    \
        [OAR_C64] = k_##OP##_c64, [OAR_C128] = k_##OP##_c128};

SCAN_ALL(cumsum, +=, 0)
SCAN_ALL(cumprod, *=, 1)

/* ---- size_of ---------------------------------------------------------------------
 * The product of the dims iattr[0] selects from in[0]'s shape (its values are
 * never read), stored as a 0-d float of the output's dtype. */
static int k_size_of(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    double n = 1;
    for (int d = 0; d < c->in[0].ndim; d++)
        if ((c->iattr[0] >> d) & 1) n *= (double)c->in[0].shape[d];
    oari_store_f64(c->out[0].data, (oar_dtype)c->out[0].dtype, n);
    return 0;
}

const oari_cpu_kernels oari_cpu_k_size_of = {
    [OAR_F16] = k_size_of, [OAR_BF16] = k_size_of, [OAR_F32] = k_size_of, [OAR_F64] = k_size_of};

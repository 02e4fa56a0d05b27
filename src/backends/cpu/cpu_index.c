/* CPU kernels for the indexing and sorting ops: gather/scatter style loops
 * (byte-generic moves, typed accumulation), one_hot, and a stable merge sort
 * behind sort and topk. Every index is checked before anything is written. */
#include "cpu.h"

#include <omp.h>
#include <string.h>

/* A kernel view with rank >= 1 (a 0-d tensor is one element of a 1-d one). */
static oar_ktensor kt1(const oar_ktensor *k) {
    oar_ktensor r = *k;
    if (r.ndim == 0) {
        r.ndim = 1;
        r.shape[0] = 1;
        r.strides[0] = 0;
    }
    return r;
}

static int64_t elsize(const oar_ktensor *k) { return (int64_t)oar_dtype_size((oar_dtype)k->dtype); }

/* Checks that every element of the (i64) index lies in [0, limit). */
static int check_index(const char *op, const oar_ktensor *index, int64_t limit, int dim) {
    oar_ktensor k = kt1(index);
    int64_t n = oari_kt_numel(&k);
    if (!n) return 0;
    const int nd = k.ndim;
    const int64_t last = k.shape[nd - 1], ls = k.strides[nd - 1], rows = n / last;
    const int64_t *data = k.data;
    int64_t first = INT64_MAX; /* linear position of the first bad index */
#pragma omp parallel for schedule(static) reduction(min : first) if (n >= OARI_PARALLEL_GRAIN)
    for (int64_t r = 0; r < rows; r++) {
        const int64_t *p = data + oari_strided_index(nd - 1, k.shape, k.strides, r);
        for (int64_t j = 0; j < last; j++) {
            if ((uint64_t)p[j * ls] >= (uint64_t)limit) {
                if (r * last + j < first) first = r * last + j;
                break;
            }
        }
    }
    if (first == INT64_MAX) return 0;
    int64_t v = data[oari_strided_index(nd, k.shape, k.strides, first)];
    return oari_error(OAR_ERR_INVALID, "%s: index %lld is out of range for dim %d of size %lld",
                      op, (long long)v, dim, (long long)limit);
}

/* ---- walking slices along one dim ------------------------------------------
 * The iteration space is `shape` (the index's); a "line" is all positions
 * that differ only along `dim`. Each operand has its own strides over that
 * space. Lines never share an output element in gather/scatter, so they are
 * what threads split. */
#define MAX_OPS 4

typedef struct line_walk {
    int ndim, dim, n_ops;
    int64_t shape[OAR_MAX_DIMS];
    int64_t strides[MAX_OPS][OAR_MAX_DIMS];
    int64_t lines, len; /* number of lines; length of each (shape[dim]) */
} line_walk;

static void walk_init(line_walk *w, int ndim, const int64_t *shape, int dim) {
    memset(w, 0, sizeof *w);
    w->ndim = ndim;
    w->dim = dim;
    memcpy(w->shape, shape, (size_t)ndim * sizeof *shape);
    w->len = shape[dim];
    w->lines = 1;
    for (int d = 0; d < ndim; d++)
        if (d != dim) w->lines *= shape[d];
}

static void walk_add(line_walk *w, const int64_t *strides) {
    memcpy(w->strides[w->n_ops++], strides, (size_t)w->ndim * sizeof *strides);
}

/* Element offsets of each operand at the start of line l. */
static void walk_line(const line_walk *w, int64_t l, int64_t *off) {
    for (int k = 0; k < w->n_ops; k++) off[k] = 0;
    for (int d = w->ndim - 1; d >= 0; d--) {
        if (d == w->dim) continue;
        int64_t c = l % w->shape[d];
        l /= w->shape[d];
        for (int k = 0; k < w->n_ops; k++) off[k] += c * w->strides[k][d];
    }
}

/* ---- the line loop ------------------------------------------------------------
 * Threads take blocks of LINES consecutive lines (and, for gather, of JBLOCK
 * positions along them). Within a block the loop runs along dim innermost
 * when the output is contiguous along dim, and across lines otherwise; both
 * orders visit each line's positions in increasing order, so results never
 * depend on the order or the thread count. */
typedef struct { uint64_t a, b; } u128_t;

enum { LINES = 64, JBLOCK = 4096 };

typedef struct line_loop {
    const line_walk *w;
    char *out;
    const char *src;
    const int64_t *idx;
    int64_t os, ss, is;      /* strides along dim: output, source, index */
    bool gather;             /* gather: out[j] = src[idx[j]]; scatter: out[idx[j]] op= src[j] */
} line_loop;

/* One element of line b at position j (names from line_loop_*). */
#define GATHER_ONE(OP, b, j)                                                                    \
    OP(o[off[b][0] + (j) * os], sp[off[b][1] + ip[off[b][2] + (j) * is] * ss])
#define SCATTER_ONE(OP, b, j)                                                                   \
    OP(o[off[b][0] + ip[off[b][2] + (j) * is] * os], sp[off[b][1] + (j) * ss])

#define LINE_LOOP_FN(NAME, T, OP)                                                              \
    static void line_loop_##NAME(const line_loop *L) {                                         \
        const line_walk *w = L->w;                                                             \
        const int64_t os = L->os, ss = L->ss, is = L->is;                                      \
        const bool gather = L->gather, j_inner = os == 1 || w->lines == 1;                     \
        const int64_t nlb = (w->lines + LINES - 1) / LINES;                                    \
        /* scatter lines are walked whole by one thread (duplicates stay in order) */          \
        const int64_t jb = gather ? JBLOCK : w->len, njb = (w->len + jb - 1) / jb;             \
        const bool par = w->lines * w->len >= OARI_PARALLEL_GRAIN;                             \
        _Pragma("omp parallel for schedule(static) if (par)")                                  \
        for (int64_t t = 0; t < nlb * njb; t++) {                                              \
            int64_t off[LINES][3];                                                             \
            const int64_t l0 = (t / njb) * LINES, j0 = (t % njb) * jb;                        \
            const int64_t nl = w->lines - l0 < LINES ? w->lines - l0 : LINES;                  \
            const int64_t j1 = j0 + jb < w->len ? j0 + jb : w->len;                            \
            for (int64_t b = 0; b < nl; b++) walk_line(w, l0 + b, off[b]);                     \
            T *o = (T *)L->out;                                                                \
            const T *sp = (const T *)L->src;                                                   \
            const int64_t *ip = L->idx;                                                        \
            if (gather) {                                                                      \
                if (j_inner) {                                                                 \
                    for (int64_t b = 0; b < nl; b++)                                           \
                        for (int64_t j = j0; j < j1; j++)                                      \
                            GATHER_ONE(OP, b, j);                                             \
                } else {                                                                       \
                    for (int64_t j = j0; j < j1; j++)                                          \
                        for (int64_t b = 0; b < nl; b++)                                       \
                            GATHER_ONE(OP, b, j);                                             \
                }                                                                              \
            } else {                                                                           \
                if (j_inner) {                                                                 \
                    for (int64_t b = 0; b < nl; b++)                                           \
                        for (int64_t j = j0; j < j1; j++)                                      \
                            SCATTER_ONE(OP, b, j);                                            \
                } else {                                                                       \
                    for (int64_t j = j0; j < j1; j++)                                          \
                        for (int64_t b = 0; b < nl; b++)                                       \
                            SCATTER_ONE(OP, b, j);                                            \
                }                                                                              \
            }                                                                                  \
        }                                                                                      \
    }

#define SET(a, b) ((a) = (b))
#define ADD(a, b) ((a) += (b))
#define ADD_U8(a, b) ((a) = (uint8_t)((a) + (b)))
#define ADD_I8(a, b) ((a) = (int8_t)(uint8_t)((unsigned)(a) + (unsigned)(b))) /* wraps */
#define ADD_I32(a, b) ((a) = (int32_t)((uint32_t)(a) + (uint32_t)(b)))
#define ADD_I64(a, b) ((a) = (int64_t)((uint64_t)(a) + (uint64_t)(b)))

LINE_LOOP_FN(set1, uint8_t, SET)
LINE_LOOP_FN(set2, uint16_t, SET)
LINE_LOOP_FN(set4, uint32_t, SET)
LINE_LOOP_FN(set8, uint64_t, SET)
LINE_LOOP_FN(set16, u128_t, SET)
LINE_LOOP_FN(add_u8, uint8_t, ADD_U8)
LINE_LOOP_FN(add_i8, int8_t, ADD_I8)
LINE_LOOP_FN(add_i32, int32_t, ADD_I32)
LINE_LOOP_FN(add_i64, int64_t, ADD_I64)
LINE_LOOP_FN(add_f32, float, ADD)
LINE_LOOP_FN(add_f64, double, ADD)
LINE_LOOP_FN(add_c64, c64_t, ADD)
LINE_LOOP_FN(add_c128, c128_t, ADD)

static void line_loop_set(const line_loop *L, int64_t es) {
    switch (es) {
    case 1: line_loop_set1(L); break;
    case 2: line_loop_set2(L); break;
    case 4: line_loop_set4(L); break;
    case 8: line_loop_set8(L); break;
    default: line_loop_set16(L); break;
    }
}

static void line_loop_add(const line_loop *L, int dtype) {
    switch (dtype) {
    case OAR_U8: line_loop_add_u8(L); break;
    case OAR_I8: line_loop_add_i8(L); break;
    case OAR_I32: line_loop_add_i32(L); break;
    case OAR_I64: line_loop_add_i64(L); break;
    case OAR_F32: line_loop_add_f32(L); break;
    case OAR_F64: line_loop_add_f64(L); break;
    case OAR_C64: line_loop_add_c64(L); break;
    case OAR_C128: line_loop_add_c128(L); break;
    default: break; /* no table entry for other dtypes */
    }
}

/* ---- gather -----------------------------------------------------------------
 * out[p] = x[p with p[dim] = index[p]], over index's shape (already checked). */
static void gather_core(const oar_ktensor *out, const oar_ktensor *x, const oar_ktensor *idx,
                        int dim) {
    line_walk w;
    walk_init(&w, idx->ndim, idx->shape, dim);
    walk_add(&w, out->strides);
    walk_add(&w, x->strides);
    walk_add(&w, idx->strides);
    if (!w.lines || !w.len) return;
    line_loop L = {.w = &w, .out = out->data, .src = x->data, .idx = idx->data,
                   .os = out->strides[dim], .ss = x->strides[dim], .is = idx->strides[dim],
                   .gather = true};
    line_loop_set(&L, elsize(x));
}

static int k_gather(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    int dim = (int)c->iattr[0];
    oar_ktensor out = kt1(&c->out[0]), x = kt1(&c->in[0]), idx = kt1(&c->in[1]);
    int st = check_index(c->op, &idx, x.shape[dim], dim);
    if (!st) gather_core(&out, &x, &idx, dim);
    return st;
}

/* index_select is a gather whose index is broadcast over the other dims. */
static int k_index_select(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    int dim = (int)c->iattr[0];
    oar_ktensor out = kt1(&c->out[0]), x = kt1(&c->in[0]), idx = kt1(&c->in[1]);
    int st = check_index(c->op, &idx, x.shape[dim], dim);
    if (st) return st;
    int64_t n_idx = out.shape[dim], slice = n_idx ? oari_kt_numel(&out) / n_idx : 0;
    if (slice >= 8 * n_idx) { /* few large slices (q, k and v picked out of one projection):
                               * a strided copy each, not one walk per element along dim */
        const int64_t es = elsize(&x), *ip = idx.data;
        oar_ktensor dst = out, src = x;
        dst.shape[dim] = src.shape[dim] = 1;
        for (int64_t j = 0; j < n_idx; j++) {
            dst.data = (char *)out.data + j * out.strides[dim] * es;
            src.data = (char *)x.data + ip[j * idx.strides[0]] * x.strides[dim] * es;
            oari_copy_strided(&dst, &src);
        }
        return 0;
    }
    oar_ktensor b = out;
    b.data = idx.data;
    b.dtype = OAR_I64;
    for (int d = 0; d < b.ndim; d++) b.strides[d] = d == dim ? idx.strides[0] : 0;
    gather_core(&out, &x, &b, dim);
    return 0;
}

/* ---- scatter ------------------------------------------------------------------
 * out = x, then along each line in index order out[.., index, ..] (op)= src:
 * duplicates resolve the same way (last write wins; sums in index order) on
 * any number of threads. */
static void copy_into(const oar_ktensor *dst, const oar_ktensor *src) { oari_copy_strided(dst, src); }

typedef enum { S_SET, S_ADD } scatter_mode;

/* src is viewed over the index's shape (0-d src: stride 0 everywhere). */
static void scatter_core(const oar_ktensor *out, const oar_ktensor *idx, const oar_ktensor *src,
                         int dim, scatter_mode mode) {
    int64_t sstr[OAR_MAX_DIMS] = {0};
    if (src->ndim == idx->ndim) memcpy(sstr, src->strides, (size_t)idx->ndim * sizeof *sstr);
    line_walk w;
    walk_init(&w, idx->ndim, idx->shape, dim);
    walk_add(&w, out->strides);
    walk_add(&w, sstr);
    walk_add(&w, idx->strides);
    if (!w.lines || !w.len) return;
    line_loop L = {.w = &w, .out = out->data, .src = src->data, .idx = idx->data,
                   .os = out->strides[dim], .ss = sstr[dim], .is = idx->strides[dim],
                   .gather = false};
    if (mode == S_SET) line_loop_set(&L, elsize(out));
    else line_loop_add(&L, out->dtype);
}

static int scatter_kernel(const oar_kernel_call *c, scatter_mode mode) {
    int dim = (int)c->iattr[0];
    oar_ktensor out = kt1(&c->out[0]), x = kt1(&c->in[0]), idx = kt1(&c->in[1]);
    oar_ktensor src = c->in[2].ndim ? kt1(&c->in[2]) : c->in[2];
    int st = check_index(c->op, &idx, out.shape[dim], dim);
    if (st) return st;
    copy_into(&out, &x);
    scatter_core(&out, &idx, &src, dim, mode);
    return 0;
}

static int k_scatter(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    return scatter_kernel(c, S_SET);
}

static int k_scatter_add(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    return scatter_kernel(c, S_ADD);
}

/* index_add is a scatter_add whose index is broadcast over src's other dims. */
static int k_index_add(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    int dim = (int)c->iattr[0];
    oar_ktensor out = kt1(&c->out[0]), x = kt1(&c->in[0]), idx = kt1(&c->in[1]);
    oar_ktensor src = kt1(&c->in[2]);
    int st = check_index(c->op, &idx, out.shape[dim], dim);
    if (st) return st;
    copy_into(&out, &x);
    oar_ktensor b = src;
    b.data = idx.data;
    b.dtype = OAR_I64;
    for (int d = 0; d < b.ndim; d++) b.strides[d] = d == dim ? idx.strides[0] : 0;
    scatter_core(&out, &b, &src, dim, S_ADD);
    return 0;
}

/* ---- one_hot --------------------------------------------------------------- */
static int k_one_hot(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    const int64_t classes = c->iattr[0];
    oar_ktensor idx = c->in[0];
    const int64_t n = oari_kt_numel(&idx);
    int64_t *o = c->out[0].data;
    memset(o, 0, (size_t)(n * classes) * sizeof *o);
    const int64_t *data = idx.data;
    for (int64_t i = 0; i < n; i++) {
        int64_t v = data[oari_strided_index(idx.ndim, idx.shape, idx.strides, i)];
        if (v < 0)
            return oari_error(OAR_ERR_INVALID,
                              "one_hot: class values must be non-negative, got %lld", (long long)v);
        if (v >= classes)
            return oari_error(OAR_ERR_INVALID,
                              "one_hot: index %lld is out of range for %lld classes", (long long)v,
                              (long long)classes);
        o[i * classes + v] = 1;
    }
    return 0;
}

/* ---- sort and topk -----------------------------------------------------------
 * Each line along dim is copied into (value, position) pairs and merge
 * sorted: stable, NaN after every number ascending and before descending,
 * as PyTorch. topk keeps the first k of that order: when k is small against
 * the line (LLM sampling: k 50 of a 50k vocabulary) a heap of the k best
 * so far sees each element once (n log k, most elements rejected by one
 * comparison with the heap's worst); ties go to the lower position, as in
 * the stable sort, so both paths give the same answer. */
#define FLT_BEFORE_ASC(a, b) ((a) < (b) || ((b) != (b) && (a) == (a)))
#define FLT_BEFORE_DESC(a, b) ((a) > (b) || ((a) != (a) && (b) == (b)))
#define INT_BEFORE_ASC(a, b) ((a) < (b))
#define INT_BEFORE_DESC(a, b) ((a) > (b))

/* Heap selection when k is at most a quarter of the line. Measured on one
 * thread in f32: the heap is 4.6x faster than the merge sort at k = n/16 and
 * 2.3x at k = n/8 (n = 128), even at about k = n/3 (n 16 to 1024), slower
 * above; 45x for k 50 of 32000. */
#define TOPK_BY_HEAP(k, n) ((k) * 4 <= (n))
/* Insertion into a sorted array of the k best for k <= 16 (its shifts grow
 * with k): 2x the heap at k 16 of 128. (f32 lines with k <= 16 take the
 * vector of keys below instead.) */
#define TOPK_BY_INSERTION(k, n) ((k) <= 16 && TOPK_BY_HEAP(k, n))

#define SORT_FNS(NAME, T, ASC, DESC)                                                          \
    typedef struct { T v; int64_t i; } pair_##NAME;                                           \
    static void merge_##NAME(const pair_##NAME *a, int64_t na, const pair_##NAME *b,          \
                             int64_t nb, pair_##NAME *o, bool desc) {                         \
        int64_t i = 0, j = 0, k = 0;                                                          \
        if (desc) {                                                                           \
            while (i < na && j < nb) o[k++] = DESC(b[j].v, a[i].v) ? b[j++] : a[i++];         \
        } else {                                                                              \
            while (i < na && j < nb) o[k++] = ASC(b[j].v, a[i].v) ? b[j++] : a[i++];          \
        }                                                                                     \
        while (i < na) o[k++] = a[i++];                                                       \
        while (j < nb) o[k++] = b[j++];                                                       \
    }                                                                                         \
    /* Sorts buf[0..n) using tmp; returns whichever holds the result. */                      \
    static pair_##NAME *msort_##NAME(pair_##NAME *buf, pair_##NAME *tmp, int64_t n,           \
                                     bool desc) {                                             \
        enum { RUN = 16 }; /* runs of RUN by stable insertion, then merges */                  \
        for (int64_t lo = 0; lo < n; lo += RUN) {                                             \
            int64_t hi = lo + RUN < n ? lo + RUN : n;                                         \
            for (int64_t i = lo + 1; i < hi; i++) {                                           \
                pair_##NAME key = buf[i];                                                     \
                int64_t j = i;                                                                \
                if (desc)                                                                     \
                    for (; j > lo && DESC(key.v, buf[j - 1].v); j--) buf[j] = buf[j - 1];     \
                else                                                                          \
                    for (; j > lo && ASC(key.v, buf[j - 1].v); j--) buf[j] = buf[j - 1];      \
                buf[j] = key;                                                                 \
            }                                                                                 \
        }                                                                                     \
        for (int64_t w = RUN; w < n; w *= 2) {                                                \
            for (int64_t lo = 0; lo < n; lo += 2 * w) {                                       \
                int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;  \
                merge_##NAME(buf + lo, mid - lo, buf + mid, hi - mid, tmp + lo, desc);        \
            }                                                                                 \
            pair_##NAME *t = buf;                                                             \
            buf = tmp;                                                                        \
            tmp = t;                                                                          \
        }                                                                                     \
        return buf;                                                                           \
    }                                                                                         \
    /* Whether a goes before b in the topk order: by value, ties by position. */            \
    static inline bool better_##NAME(pair_##NAME a, pair_##NAME b, bool desc) {               \
        if (desc) return DESC(a.v, b.v) || (!DESC(b.v, a.v) && a.i < b.i);                    \
        return ASC(a.v, b.v) || (!ASC(b.v, a.v) && a.i < b.i);                                \
    }                                                                                         \
    /* Restores the heap below p: every node goes after (is worse than) its children. */     \
    static void sift_##NAME(pair_##NAME *h, int64_t n, int64_t p, bool desc) {                \
        for (;;) {                                                                            \
            int64_t c = 2 * p + 1;                                                            \
            if (c >= n) return;                                                               \
            if (c + 1 < n && better_##NAME(h[c], h[c + 1], desc)) c++;                        \
            if (!better_##NAME(h[p], h[c], desc)) return;                                     \
            pair_##NAME t = h[p];                                                             \
            h[p] = h[c];                                                                      \
            h[c] = t;                                                                         \
            p = c;                                                                            \
        }                                                                                     \
    }                                                                                         \
    /* The k best of the n elements x[j * xs], best first, into out (k <= n). */              \
    static void select_##NAME(const T *x, int64_t xs, int64_t n, int64_t k, bool desc,        \
                              pair_##NAME *h, pair_##NAME *out) {                             \
        for (int64_t j = 0; j < k; j++) h[j] = (pair_##NAME){x[j * xs], j};                   \
        for (int64_t p = k / 2 - 1; p >= 0; p--) sift_##NAME(h, k, p, desc);                  \
        for (int64_t j = k; j < n; j++) {                                                     \
            pair_##NAME e = {x[j * xs], j};                                                   \
            if (better_##NAME(e, h[0], desc)) {                                               \
                h[0] = e;                                                                     \
                sift_##NAME(h, k, 0, desc);                                                   \
            }                                                                                 \
        }                                                                                     \
        for (int64_t m = k - 1; m >= 0; m--) { /* pop the worst to the back */                \
            out[m] = h[0];                                                                    \
            h[0] = h[m];                                                                      \
            sift_##NAME(h, m, 0, desc);                                                       \
        }                                                                                     \
    }                                                                                         \
    /* The same by insertion into a sorted array of the k best (k small): a                 \
     * later element never wins a tie, so it goes in only when strictly                      \
     * before the worst kept, and after every equal one. */                                  \
    static void insert_select_##NAME(const T *x, int64_t xs, int64_t n, int64_t k, bool desc, \
                                     pair_##NAME *out) {                                      \
        int64_t m = 0;                                                                        \
        for (int64_t j = 0; j < n; j++) {                                                     \
            T v = x[j * xs];                                                                  \
            if (m == k && !(desc ? DESC(v, out[k - 1].v) : ASC(v, out[k - 1].v))) continue;    \
            int64_t p = m < k ? m++ : k - 1;                                                  \
            if (desc)                                                                         \
                for (; p > 0 && DESC(v, out[p - 1].v); p--) out[p] = out[p - 1];              \
            else                                                                              \
                for (; p > 0 && ASC(v, out[p - 1].v); p--) out[p] = out[p - 1];               \
            out[p] = (pair_##NAME){v, j};                                                     \
        }                                                                                     \
    }                                                                                         \
    static void sort_lines_##NAME(const sort_job *s) {                                        \
        const line_walk *w = &s->w;                                                           \
        const int64_t n = w->len, k = s->k, xs = w->strides[0][w->dim],                       \
                      vs = s->vstride, is = s->istride;                                       \
        const bool desc = s->desc;                                                            \
        _Pragma("omp parallel num_threads(s->nt) if (s->nt > 1)")                             \
        {                                                                                     \
            pair_##NAME *buf = (pair_##NAME *)s->scratch + 2 * n * omp_get_thread_num();      \
            _Pragma("omp for schedule(static)")                                               \
            for (int64_t l = 0; l < w->lines; l++) {                                          \
                int64_t off[3];                                                               \
                walk_line(w, l, off);                                                         \
                const T *xp = (const T *)s->x + off[0];                                       \
                pair_##NAME *r = buf;                                                         \
                if (TOPK_BY_INSERTION(k, n)) {                                                \
                    insert_select_##NAME(xp, xs, n, k, desc, buf);                            \
                } else if (TOPK_BY_HEAP(k, n)) {                                              \
                    select_##NAME(xp, xs, n, k, desc, buf + n, buf);                          \
                } else {                                                                      \
                    for (int64_t j = 0; j < n; j++) buf[j] = (pair_##NAME){xp[j * xs], j};    \
                    r = msort_##NAME(buf, buf + n, n, desc);                                  \
                }                                                                             \
                T *vp = (T *)s->v + off[1];                                                   \
                int64_t *ip = s->ix + off[2];                                                 \
                for (int64_t j = 0; j < k; j++) {                                             \
                    vp[j * vs] = r[j].v;                                                      \
                    ip[j * is] = r[j].i;                                                      \
                }                                                                             \
            }                                                                                 \
        }                                                                                     \
    }

typedef struct sort_job {
    line_walk w;             /* over x's shape: operands x, values, indices */
    const void *x;
    void *v;
    int64_t *ix;
    int64_t k, vstride, istride; /* kept per line; outputs' strides along dim */
    bool desc;
    int nt;                  /* threads; scratch holds 2 * len pairs per thread */
    void *scratch;
} sort_job;

SORT_FNS(b8, uint8_t, INT_BEFORE_ASC, INT_BEFORE_DESC)
SORT_FNS(i8, int8_t, INT_BEFORE_ASC, INT_BEFORE_DESC)
SORT_FNS(i32, int32_t, INT_BEFORE_ASC, INT_BEFORE_DESC)
SORT_FNS(i64, int64_t, INT_BEFORE_ASC, INT_BEFORE_DESC)
SORT_FNS(f32, float, FLT_BEFORE_ASC, FLT_BEFORE_DESC)
SORT_FNS(f64, double, FLT_BEFORE_ASC, FLT_BEFORE_DESC)

/* ---- topk of f32 with k <= 16 ---------------------------------------------------
 * The k best so far sit in one vector of 16 int32 keys, sorted best first
 * (with their positions in another): an element that beats the worst kept
 * goes in by a compare, a lane shift and two selects, with no loop over
 * the kept ones and no branch but the one test against the worst. A key
 * orders f32 values as the sort does: -0 ties +0, every NaN is one key
 * above +inf, and ascending order flips the bits, so larger keys always
 * come first and ties keep the lower position (a later element goes in
 * only when strictly better, after every equal one). INT32_MIN, below
 * every key in both orders, fills the empty lanes. 512 lines of 128, k 16,
 * one thread, with the floor below: 158 us against the insertion sort's 540;
 * with the 32-group floor and the keys computed 16 at a time, 123-144 us
 * (two threads: 58 us, PyTorch 80). That is on AVX-512, where a 16-lane
 * vector is one register. Without it GCC spills the vector to the stack at
 * every lane shift: 1760 us on one thread of a Zen 1 (AVX2), 3x PyTorch.
 * So the vector of keys is compiled for x86-64-v4 only and picked at run
 * time; other CPUs insert into two sorted arrays (topk_ins_line_f32). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(OAR_NO_SIMD_CLONES)
#define TOPK_HAS_V4 1
#define TOPK_V4 __attribute__((target("arch=x86-64-v4")))
#else
#define TOPK_HAS_V4 0
#define TOPK_V4
#endif
typedef int32_t topk_v16i __attribute__((vector_size(64)));
typedef int32_t topk_v8i __attribute__((vector_size(32)));
enum { TOPK_VEC_K = 16, TOPK_KEY_BLOCK = 256 };

/* (integer operations only, so the loop over a block vectorises) */
static inline int32_t topk_key_f32(float v, int32_t flip) {
    int32_t b;
    memcpy(&b, &v, sizeof b);
    const int32_t mag = b & 0x7fffffff;
    b = mag == 0 ? 0 : b;
    b ^= (b >> 31) & 0x7fffffff;
    b = mag > 0x7f800000 ? 0x7ffffffe : b;
    return b ^ flip;
}

/* topk_key_f32 of the floats at x into keys, a vector type VT of lanes at a time */
#define TOPK_KEYS(VT, x, keys, flip)                                         \
    do {                                                                     \
        VT b_;                                                               \
        memcpy(&b_, (x), sizeof b_);                                         \
        const VT mag_ = b_ & 0x7fffffff, nan_ = mag_ > 0x7f800000;           \
        b_ &= ~(mag_ == 0);                                                  \
        b_ ^= (b_ >> 31) & 0x7fffffff;                                       \
        b_ = ((b_ & ~nan_) | (nan_ & 0x7ffffffe)) ^ (flip);                  \
        memcpy((keys), &b_, sizeof b_);                                      \
    } while (0)

/* A bitonic network sorting 16 lanes ascending: stage s pairs lane i with lane
 * bitonic_perm[s][i], and the lanes of bitonic_min[s] keep the smaller. */
static const topk_v16i bitonic_perm[10] = {
    {1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14},
    {2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13},
    {1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14},
    {4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11},
    {2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13},
    {1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14},
    {8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7},
    {4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11},
    {2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13},
    {1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14}};
static const topk_v16i bitonic_min[10] = {
    {-1, 0, 0, -1, -1, 0, 0, -1, -1, 0, 0, -1, -1, 0, 0, -1},
    {-1, -1, 0, 0, 0, 0, -1, -1, -1, -1, 0, 0, 0, 0, -1, -1},
    {-1, 0, -1, 0, 0, -1, 0, -1, -1, 0, -1, 0, 0, -1, 0, -1},
    {-1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0, -1, -1, -1, -1},
    {-1, -1, 0, 0, -1, -1, 0, 0, 0, 0, -1, -1, 0, 0, -1, -1},
    {-1, 0, -1, 0, -1, 0, -1, 0, 0, -1, 0, -1, 0, -1, 0, -1},
    {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0},
    {-1, -1, -1, -1, 0, 0, 0, 0, -1, -1, -1, -1, 0, 0, 0, 0},
    {-1, -1, 0, 0, -1, -1, 0, 0, -1, -1, 0, 0, -1, -1, 0, 0},
    {-1, 0, -1, 0, -1, 0, -1, 0, -1, 0, -1, 0, -1, 0, -1, 0}};

/* (macros, not functions: a 64-byte vector passed or returned changes the ABI outside the
 * AVX-512 clone; in it they expand to a few instructions) */
#define TOPK_VMAX(a, b) __extension__({ const topk_v16i m_ = (a) > (b); ((a) & m_) | ((b) & ~m_); })
#define TOPK_SORT16(v)                                                                          \
    do {                                                                                        \
        for (int s_ = 0; s_ < 10; s_++) {                                                       \
            const topk_v16i w_ = OARI_SHUFFLE1(v, bitonic_perm[s_]), gt_ = (v) > w_;           \
            const topk_v16i mn_ = (w_ & gt_) | ((v) & ~gt_), mx_ = ((v) & gt_) | (w_ & ~gt_);  \
            (v) = (mn_ & bitonic_min[s_]) | (mx_ & ~bitonic_min[s_]);                           \
        }                                                                                       \
    } while (0)

/* A floor under the k-th best key (k <= 16) of keys[0..m), m >= 32: the 32
 * groups j mod 32 have 32 distinct maxima, so the k-th best is at least the
 * 16th of those. That is the least of the lane-wise maxima of the first 16
 * sorted descending and the other 16 ascending (a bitonic half-cleaner).
 * Fewer elements pass it than the 16 groups' least maximum (lines of 128
 * normal values, k 16: 18.5 insertions a line against 30.8), each one a
 * mispredicted branch and an insertion saved: 81 -> 77 us for 512 lines on
 * two threads. */
static inline __attribute__((always_inline)) int32_t topk_floor32(const int32_t *keys, int64_t m) {
    topk_v16i a = (topk_v16i){0} + INT32_MIN, b = a, x;
    int64_t j = 0;
    for (; j + 32 <= m; j += 32) {
        memcpy(&x, keys + j, sizeof x);
        a = TOPK_VMAX(a, x);
        memcpy(&x, keys + j + 16, sizeof x);
        b = TOPK_VMAX(b, x);
    }
    for (int64_t l = 0; j + l < m; l++) { /* the rest, into their groups */
        const int32_t key = keys[j + l];
        if (l < 16) a[l] = key > a[l] ? key : a[l];
        else b[l - 16] = key > b[l - 16] ? key : b[l - 16];
    }
    const topk_v16i rev = {15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0};
    TOPK_SORT16(a);
    TOPK_SORT16(b);
    a = OARI_SHUFFLE1(a, rev);
    const topk_v16i top = TOPK_VMAX(a, b);
    int32_t fl = top[0];
    for (int l = 1; l < 16; l++) fl = top[l] < fl ? top[l] : fl;
    return fl;
}

TOPK_V4
static void topk_vec_line_f32(const float *x, int64_t xs, int64_t n, int64_t k, bool desc,
                              float *vo, int64_t vs, int64_t *io, int64_t is) {
    const int32_t flip = desc ? 0 : -1;
    const topk_v16i shift = {0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14};
    const topk_v16i lane0 = {-1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    const topk_v16i last = (topk_v16i){0} + (int32_t)(k - 1);
    topk_v16i kv = (topk_v16i){0} + INT32_MIN, iv = (topk_v16i){0};
    int32_t worst = INT32_MIN, low = INT32_MIN, keys[TOPK_KEY_BLOCK];
    for (int64_t j0 = 0; j0 < n; j0 += TOPK_KEY_BLOCK) {
        const int64_t m = n - j0 < TOPK_KEY_BLOCK ? n - j0 : TOPK_KEY_BLOCK;
        const float *xb = x + j0 * xs;
        if (xs == 1) {
            /* 16 at a time by hand: GCC's -O2 cost model leaves the scalar loop (a third of
             * the time of 512 lines of 128) unvectorised */
            int64_t j = 0;
            for (; j + TOPK_VEC_K <= m; j += TOPK_VEC_K) TOPK_KEYS(topk_v16i, xb + j, keys + j, flip);
            for (; j < m; j++) keys[j] = topk_key_f32(xb[j], flip);
        } else
            for (int64_t j = 0; j < m; j++) keys[j] = topk_key_f32(xb[j * xs], flip);
        if (j0 == 0 && m >= 2 * TOPK_VEC_K) {
            low = topk_floor32(keys, m) - 1; /* (keys exceed INT32_MIN) */
            worst = low;
        } else if (j0 == 0 && m >= TOPK_VEC_K) {
            /* A floor: the 16 groups j mod 16 of the first block have 16
             * distinct maxima, so the k-th best (k <= 16) is at least their
             * minimum; anything below it never goes in (fewer tests fail
             * late, fewer mispredicted branches). */
            int32_t gm[TOPK_VEC_K];
            for (int l = 0; l < TOPK_VEC_K; l++) gm[l] = INT32_MIN;
            int64_t j = 0;
            for (; j + TOPK_VEC_K <= m; j += TOPK_VEC_K)
                for (int l = 0; l < TOPK_VEC_K; l++) gm[l] = keys[j + l] > gm[l] ? keys[j + l] : gm[l];
            for (int l = 0; j + l < m; l++) gm[l] = keys[j + l] > gm[l] ? keys[j + l] : gm[l];
            int32_t fl = gm[0];
            for (int l = 1; l < TOPK_VEC_K; l++) fl = gm[l] < fl ? gm[l] : fl;
            low = fl - 1; /* (keys exceed INT32_MIN) */
            worst = low;
        }
        for (int64_t j = 0; j < m; j++) {
            const int32_t key = keys[j];
            if (key <= worst) continue;
            const topk_v16i kb = (topk_v16i){0} + key, jb = (topk_v16i){0} + (int32_t)(j0 + j);
            const topk_v16i ks = OARI_SHUFFLE1(kv, shift), is1 = OARI_SHUFFLE1(iv, shift);
            const topk_v16i stay = kv >= kb;           /* the kept ones before it */
            const topk_v16i at = ((ks >= kb) | lane0) & ~stay; /* its lane */
            kv = (stay & kv) | (at & kb) | (~(stay | at) & ks);
            iv = (stay & iv) | (at & jb) | (~(stay | at) & is1);
            worst = OARI_SHUFFLE1(kv, last)[0];
            worst = worst > low ? worst : low;
        }
    }
    for (int64_t j = 0; j < k; j++) {
        io[j * is] = iv[j];
        vo[j * vs] = x[(int64_t)iv[j] * xs];
    }
}

/* The same selection without a 16-lane vector: the keys 8 at a time, the
 * floor of the first block's 16 groups j mod 16, then each key above the
 * worst kept goes into sorted arrays of keys and positions by a shift
 * (about 31 of a line of 128 normal values, k 16, pass the floor). 512
 * lines of 128, k 16, on a Zen 1 (AVX2): 1760 -> 600 us on one thread,
 * 297 on two (PyTorch 2.15: 537). */
OARI_SIMD_CLONES
static void topk_ins_line_f32(const float *x, int64_t xs, int64_t n, int64_t k, bool desc,
                              float *vo, int64_t vs, int64_t *io, int64_t is) {
    const int32_t flip = desc ? 0 : -1;
    int32_t kk[TOPK_VEC_K], ki[TOPK_VEC_K], keys[TOPK_KEY_BLOCK];
    int32_t worst = INT32_MIN, low = INT32_MIN; /* (keys exceed INT32_MIN) */
    int64_t kept = 0;
    for (int64_t j0 = 0; j0 < n; j0 += TOPK_KEY_BLOCK) {
        const int64_t m = n - j0 < TOPK_KEY_BLOCK ? n - j0 : TOPK_KEY_BLOCK;
        const float *xb = x + j0 * xs;
        int64_t j = 0;
        if (xs == 1)
            for (; j + 8 <= m; j += 8) TOPK_KEYS(topk_v8i, xb + j, keys + j, flip);
        for (; j < m; j++) keys[j] = topk_key_f32(xb[j * xs], flip);
        if (j0 == 0 && m >= TOPK_VEC_K) {
            /* the 16 groups j mod 16 have 16 distinct maxima, so the k-th
             * best (k <= 16) is at least the least of them */
            topk_v8i g0 = (topk_v8i){0} + INT32_MIN, g1 = g0, v;
            for (j = 0; j + TOPK_VEC_K <= m; j += TOPK_VEC_K) {
                memcpy(&v, keys + j, sizeof v);
                topk_v8i gt = g0 > v;
                g0 = (g0 & gt) | (v & ~gt);
                memcpy(&v, keys + j + 8, sizeof v);
                gt = g1 > v;
                g1 = (g1 & gt) | (v & ~gt);
            }
            for (int64_t l = 0; j + l < m; l++) {
                if (l < 8) g0[l] = keys[j + l] > g0[l] ? keys[j + l] : g0[l];
                else g1[l - 8] = keys[j + l] > g1[l - 8] ? keys[j + l] : g1[l - 8];
            }
            const topk_v8i lt = g0 < g1;
            g0 = (g0 & lt) | (g1 & ~lt);
            int32_t fl = g0[0];
            for (int l = 1; l < 8; l++) fl = g0[l] < fl ? g0[l] : fl;
            worst = low = fl - 1;
        }
        for (j = 0; j < m; j++) {
            const int32_t key = keys[j];
            if (key <= worst) continue;
            /* a later equal key goes after the kept one: ties keep the lower position */
            int64_t p = kept < k ? kept++ : k - 1;
            for (; p > 0 && kk[p - 1] < key; p--) {
                kk[p] = kk[p - 1];
                ki[p] = ki[p - 1];
            }
            kk[p] = key;
            ki[p] = (int32_t)(j0 + j);
            if (kept == k) worst = kk[k - 1] > low ? kk[k - 1] : low;
        }
    }
    for (int64_t j = 0; j < k; j++) {
        io[j * is] = ki[j];
        vo[j * vs] = x[(int64_t)ki[j] * xs];
    }
}

/* -1: by the CPU; 0 or 1: pinned by oari_cpu_topk_vector_use */
static int topk_vector_pin = -1;

static bool topk_vector_keys(void) {
    int pin = __atomic_load_n(&topk_vector_pin, __ATOMIC_RELAXED);
#if TOPK_HAS_V4
    if (pin >= 0) return pin;
    __builtin_cpu_init();
    return __builtin_cpu_supports("x86-64-v4");
#else
    (void)pin;
    return false;
#endif
}

int oari_cpu_topk_vector_use(int use) {
    int was = topk_vector_keys();
#if TOPK_HAS_V4
    __builtin_cpu_init();
    if (use < 0 || !use || __builtin_cpu_supports("x86-64-v4"))
        __atomic_store_n(&topk_vector_pin, use < 0 ? -1 : use, __ATOMIC_RELAXED);
#else
    (void)use;
#endif
    return was;
}

/* Every line of an f32 topk with k <= TOPK_VEC_K and lines shorter than 2^31. */
static void topk_vec_lines_f32(const sort_job *s) {
    const line_walk *w = &s->w;
    const int64_t n = w->len, k = s->k, xs = w->strides[0][w->dim], vs = s->vstride,
                  is = s->istride;
    const bool vec = topk_vector_keys();
    OARI_PARALLEL_FOR_IF(s->nt > 1,
    for (int64_t l = 0; l < w->lines; l++) {
        int64_t off[3];
        walk_line(w, l, off);
        (vec ? topk_vec_line_f32 : topk_ins_line_f32)((const float *)s->x + off[0], xs, n, k,
                                                      s->desc, (float *)s->v + off[1], vs,
                                                      s->ix + off[2], is);
    });
}

/* x sorted along dim into values/indices, keeping the first k per line. */
static int sort_kernel(const oar_kernel_call *c, int dim, int64_t k, bool desc) {
    oar_ktensor x = kt1(&c->in[0]), v = kt1(&c->out[0]), ix = kt1(&c->out[1]);
    sort_job s;
    walk_init(&s.w, x.ndim, x.shape, dim);
    walk_add(&s.w, x.strides);
    walk_add(&s.w, v.strides);
    walk_add(&s.w, ix.strides);
    if (!s.w.lines || !s.w.len || !k) return 0;
    s.x = x.data;
    s.v = v.data;
    s.ix = ix.data;
    s.k = k;
    s.vstride = v.strides[dim];
    s.istride = ix.strides[dim];
    s.desc = desc;
    bool big = s.w.lines > 1 && s.w.lines * s.w.len >= OARI_PARALLEL_GRAIN;
    s.nt = big ? omp_get_max_threads() : 1;
    if (s.nt < 1) s.nt = 1;
    if (x.dtype == OAR_F32 && k <= TOPK_VEC_K && s.w.len <= INT32_MAX) {
        topk_vec_lines_f32(&s);
        return 0;
    }
    size_t nbytes = (size_t)s.nt * (size_t)(2 * s.w.len) * 16; /* a pair is at most 16 bytes */
    if (!(s.scratch = oari_malloc(nbytes))) return oari_fail_status();
    switch (x.dtype) {
    case OAR_BOOL:
    case OAR_U8: sort_lines_b8(&s); break;
    case OAR_I8: sort_lines_i8(&s); break;
    case OAR_I32: sort_lines_i32(&s); break;
    case OAR_I64: sort_lines_i64(&s); break;
    case OAR_F32: sort_lines_f32(&s); break;
    case OAR_F64: sort_lines_f64(&s); break;
    default: break; /* no table entry for other dtypes */
    }
    oari_free(s.scratch, nbytes);
    return 0;
}

static int k_sort(void *ctx, const oar_kernel_call *c) { /* iattr: dim, descending, stable */
    (void)ctx;
    int dim = (int)c->iattr[0];
    return sort_kernel(c, dim, c->in[0].ndim ? c->in[0].shape[dim] : 1, c->iattr[1] != 0);
}

static int k_topk(void *ctx, const oar_kernel_call *c) { /* iattr: k, dim, largest, sorted */
    (void)ctx;
    return sort_kernel(c, (int)c->iattr[1], c->iattr[0], c->iattr[2] != 0);
}

/* ---- tables ---------------------------------------------------------------------
 * Order: bool u8 i32 i64 f16 bf16 f32 f64 c64 c128 i8. NULL f16/bf16 entries
 * run the f32 kernel on converted copies. */
#define ALL(k) {k, k, k, k, k, k, k, k, k, k, k}
const oari_cpu_kernels oari_cpu_k_gather = ALL(k_gather);
const oari_cpu_kernels oari_cpu_k_index_select = ALL(k_index_select);
const oari_cpu_kernels oari_cpu_k_scatter = ALL(k_scatter);
const oari_cpu_kernels oari_cpu_k_scatter_add = {
    [OAR_U8] = k_scatter_add, [OAR_I8] = k_scatter_add, [OAR_I32] = k_scatter_add, [OAR_I64] = k_scatter_add,
    [OAR_F32] = k_scatter_add, [OAR_F64] = k_scatter_add, [OAR_C64] = k_scatter_add,
    [OAR_C128] = k_scatter_add,
};
const oari_cpu_kernels oari_cpu_k_index_add = {
    [OAR_U8] = k_index_add, [OAR_I8] = k_index_add, [OAR_I32] = k_index_add, [OAR_I64] = k_index_add,
    [OAR_F32] = k_index_add, [OAR_F64] = k_index_add, [OAR_C64] = k_index_add,
    [OAR_C128] = k_index_add,
};
const oari_cpu_kernels oari_cpu_k_one_hot = {[OAR_I64] = k_one_hot};
#define SORTABLE(k) {[OAR_BOOL] = k, [OAR_U8] = k, [OAR_I8] = k, [OAR_I32] = k, [OAR_I64] = k, \
                     [OAR_F32] = k, [OAR_F64] = k}
const oari_cpu_kernels oari_cpu_k_sort = SORTABLE(k_sort);
const oari_cpu_kernels oari_cpu_k_topk = SORTABLE(k_topk);

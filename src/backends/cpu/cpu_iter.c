/* The strided iterator under every elementwise CPU kernel. */
#include "cpu.h"

#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

void oari_iter_init(oari_iter *it, int n_ops, const oar_ktensor *const *ops) {
    it->n_ops = n_ops;
    const oar_ktensor *o = ops[0];
    int nd = 0;
    /* Drop size-1 dims, then merge dim d into d+1 when every operand's
     * strides make them one run. */
    int64_t shape[OAR_MAX_DIMS], strides[OARI_ITER_MAX][OAR_MAX_DIMS];
    for (int d = 0; d < o->ndim; d++) {
        if (o->shape[d] == 1) continue;
        shape[nd] = o->shape[d];
        for (int k = 0; k < n_ops; k++) strides[k][nd] = ops[k]->strides[d];
        nd++;
    }
    int m = 0;
    for (int d = 0; d < nd; d++) {
        if (m > 0) {
            bool merge = true;
            for (int k = 0; k < n_ops && merge; k++)
                merge = it->strides[k][m - 1] == strides[k][d] * shape[d];
            if (merge) {
                it->shape[m - 1] *= shape[d];
                for (int k = 0; k < n_ops; k++) it->strides[k][m - 1] = strides[k][d];
                continue;
            }
        }
        it->shape[m] = shape[d];
        for (int k = 0; k < n_ops; k++) it->strides[k][m] = strides[k][d];
        m++;
    }
    if (m == 0) { /* a scalar or all size-1 dims: one run of length 1 */
        it->shape[0] = 1;
        for (int k = 0; k < n_ops; k++) it->strides[k][0] = 1;
        m = 1;
    }
    it->ndim = m;
    it->numel = 1;
    for (int d = 0; d < m; d++) it->numel *= it->shape[d];
    for (int d = 0; d < o->ndim; d++)
        if (o->shape[d] == 0) it->numel = 0;
    for (int k = 0; k < n_ops; k++) {
        it->data[k] = ops[k]->data;
        it->elsize[k] = (int64_t)oar_dtype_size((oar_dtype)ops[k]->dtype);
    }
}

/* The calling thread's share [*b, *e) of n items split over the team's
 * threads (all of them outside a parallel region), chunks rounded up to
 * a multiple of align. */
static void thread_share(int64_t n, int64_t align, int64_t *b, int64_t *e) {
#ifdef _OPENMP
    int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
#else
    int64_t nt = 1, t = 0;
#endif
    int64_t chunk = ((n + nt - 1) / nt + align - 1) / align * align;
    *b = t * chunk < n ? t * chunk : n;
    *e = *b + chunk < n ? *b + chunk : n;
}

/* Runs the linear element range [begin, end). */
static void run_range(const oari_iter *it, oari_inner_fn fn, void *ctx, int64_t begin, int64_t end) {
    const int nd = it->ndim, last = nd - 1;
    const int64_t run = it->shape[last];
    int64_t idx[OAR_MAX_DIMS];
    int64_t rem = begin;
    for (int d = last; d >= 0; d--) {
        idx[d] = rem % it->shape[d];
        rem /= it->shape[d];
    }
    char *ptrs[OARI_ITER_MAX];
    int64_t inner[OARI_ITER_MAX], off[OARI_ITER_MAX];
    const int n_ops = it->n_ops;
    for (int k = 0; k < n_ops; k++) {
        inner[k] = it->strides[k][last];
        off[k] = 0;
        for (int d = 0; d < nd; d++) off[k] += idx[d] * it->strides[k][d];
    }
    /* offsets advance with the index (no per-run recomputation: broadcast
     * ops run many short rows) */
    int64_t pos = begin;
    while (pos < end) {
        int64_t n = run - idx[last];
        if (n > end - pos) n = end - pos;
        for (int k = 0; k < n_ops; k++) ptrs[k] = it->data[k] + off[k] * it->elsize[k];
        fn(ptrs, inner, n, ctx);
        pos += n;
        idx[last] += n;
        for (int k = 0; k < n_ops; k++) off[k] += n * inner[k];
        for (int d = last; d > 0 && idx[d] >= it->shape[d]; d--) {
            for (int k = 0; k < n_ops; k++)
                off[k] += it->strides[k][d - 1] - idx[d] * it->strides[k][d];
            idx[d] = 0;
            idx[d - 1]++;
        }
    }
}

/* A 2-D walk with an input that runs across the rows (a transposed
 * matrix: a large stride along the run, a step of under a cache line from
 * row to row) goes in ITER_TILE x ITER_TILE blocks: each such input's
 * block is first copied, transposed, into a small buffer read along its
 * own rows (every element of its column on a separate line, often a
 * separate page: an add of a 1024 x 1024 transpose took 3.5 ms against
 * 0.18 contiguous), then the kernel runs on the block's rows with every
 * operand contiguous. Elements are independent, so the order changes no
 * value; an output that runs across rows (a transposed destination) is
 * not tiled. */
enum { ITER_TILE = 32, ITER_TILE_MAX_ES = 16, ITER_TILED_MAX = 2 /* buffered inputs (16 KB each); others strided */ };

/* Whether operand k runs across the rows. */
static bool crosses(const oari_iter *it, int k) {
    int64_t run = it->strides[k][1], row = it->strides[k][0];
    run = run < 0 ? -run : run;
    row = row < 0 ? -row : row;
    return run > 1 && row != 0 && row * it->elsize[k] < 64 && it->elsize[k] <= ITER_TILE_MAX_ES;
}

static bool across_rows(const oari_iter *it) {
    if (it->ndim != 2 || it->shape[0] < 2 || it->shape[1] < 2 || crosses(it, 0))
        return false;
    for (int k = 1; k < it->n_ops; k++)
        if (crosses(it, k)) return true;
    return false;
}

/* dst[r][c] = src at r * rs + c * cs (elements of es bytes), r < nr, c < nc;
 * dst rows ITER_TILE long. */
static void tile_in(char *dst, const char *src, int64_t rs, int64_t cs, int64_t nr, int64_t nc, int64_t es) {
#define TILE_IN(T)                                                                                  \
    for (int64_t c = 0; c < nc; c++)                                                                \
        for (int64_t r = 0; r < nr; r++)                                                            \
            memcpy(dst + (r * ITER_TILE + c) * es, src + (r * rs + c * cs) * es, sizeof(T));        \
    break
    switch (es) {
    case 1: TILE_IN(uint8_t);
    case 2: TILE_IN(uint16_t);
    case 4: TILE_IN(uint32_t);
    case 8: TILE_IN(uint64_t);
    default: TILE_IN(char[ITER_TILE_MAX_ES]);
    }
#undef TILE_IN
}

/* Row blocks [b0, b1) of a tiled walk. */
static void run_tiles(const oari_iter *it, oari_inner_fn fn, void *ctx, int64_t b0, int64_t b1) {
    const int64_t rows = it->shape[0], len = it->shape[1];
    const int n_ops = it->n_ops;
    _Alignas(64) char buf[ITER_TILED_MAX][ITER_TILE * ITER_TILE * ITER_TILE_MAX_ES];
    int slot[OARI_ITER_MAX], n_tiled = 0; /* the buffer of a tiled input, or -1 */
    int64_t inner[OARI_ITER_MAX];
    char *ptrs[OARI_ITER_MAX];
    for (int k = 0; k < n_ops; k++) {
        slot[k] = k > 0 && n_tiled < ITER_TILED_MAX && crosses(it, k) ? n_tiled++ : -1;
        inner[k] = slot[k] >= 0 ? 1 : it->strides[k][1];
    }
    for (int64_t r0 = b0 * ITER_TILE; r0 < b1 * ITER_TILE && r0 < rows; r0 += ITER_TILE) {
        const int64_t nr = rows - r0 < ITER_TILE ? rows - r0 : ITER_TILE;
        for (int64_t c0 = 0; c0 < len; c0 += ITER_TILE) {
            const int64_t n = len - c0 < ITER_TILE ? len - c0 : ITER_TILE;
            for (int k = 0; k < n_ops; k++)
                if (slot[k] >= 0)
                    tile_in(buf[slot[k]], it->data[k] + (r0 * it->strides[k][0] + c0 * it->strides[k][1]) * it->elsize[k],
                            it->strides[k][0], it->strides[k][1], nr, n, it->elsize[k]);
            for (int64_t r = 0; r < nr; r++) {
                for (int k = 0; k < n_ops; k++)
                    ptrs[k] = slot[k] >= 0 ? buf[slot[k]] + r * ITER_TILE * it->elsize[k]
                                       : it->data[k] + ((r0 + r) * it->strides[k][0] + c0 * inner[k]) * it->elsize[k];
                fn(ptrs, inner, n, ctx);
            }
        }
    }
}

static void run_tiled(const oari_iter *it, oari_inner_fn fn, void *ctx) {
    const int64_t blocks = (it->shape[0] + ITER_TILE - 1) / ITER_TILE;
    if (it->numel < OARI_PARALLEL_GRAIN || blocks < 2) {
        run_tiles(it, fn, ctx, 0, blocks);
        return;
    }
#pragma omp parallel
    {
        int64_t b0, b1;
        thread_share(blocks, 1, &b0, &b1);
        if (b0 < b1) run_tiles(it, fn, ctx, b0, b1);
    }
}

void oari_iter_run(const oari_iter *it, oari_inner_fn fn, void *ctx) {
    const int64_t total = it->numel;
    if (total == 0) return;
    if (across_rows(it)) {
        run_tiled(it, fn, ctx);
        return;
    }
    if (total < OARI_PARALLEL_GRAIN) {
        run_range(it, fn, ctx, 0, total);
        return;
    }
#pragma omp parallel
    {
        /* chunks of 16 elements so threads never share a cache line of f32 output */
        int64_t b, e;
        thread_share(total, 16, &b, &e);
        if (b < e) run_range(it, fn, ctx, b, e);
    }
}

/* The iterator over a call's output and inputs. */
static void iter_of_call(const oar_kernel_call *call, oari_iter *it) {
    const oar_ktensor *ops[OARI_ITER_MAX];
    int n = 0;
    ops[n++] = &call->out[0];
    for (int i = 0; i < call->n_in && n < OARI_ITER_MAX; i++) ops[n++] = &call->in[i];
    oari_iter_init(it, n, ops);
}

void oari_iter_call(const oar_kernel_call *call, oari_inner_fn fn, void *ctx) {
    oari_iter it;
    iter_of_call(call, &it);
    oari_iter_run(&it, fn, ctx);
}

/* The calling thread's share of the rows of a 2-D walk (all of them outside
 * a parallel region). */
static void rows_of_thread(const oari_iter *it, oari_inner2d_fn fn2, void *ctx, int64_t rows,
                           int64_t len, const int64_t *inner, const int64_t *outer) {
    int64_t r0, r1;
    thread_share(rows, 1, &r0, &r1);
    if (r0 < r1) {
        char *ptrs[OARI_ITER_MAX];
        for (int k = 0; k < it->n_ops; k++) ptrs[k] = it->data[k] + r0 * outer[k] * it->elsize[k];
        fn2(ptrs, inner, outer, r1 - r0, len, ctx);
    }
}

void oari_iter_call2d(const oar_kernel_call *call, oari_inner_fn fn, oari_inner2d_fn fn2,
                      void *ctx) {
    oari_iter it;
    iter_of_call(call, &it);
    /* (few long rows over threads: whole rows would balance badly, so the
     * element split of the generic walk; a transposed operand: its tiles) */
    if (it.ndim != 2 || it.numel == 0 || (it.numel >= OARI_PARALLEL_GRAIN && it.shape[0] < 16) || across_rows(&it)) {
        oari_iter_run(&it, fn, ctx);
        return;
    }
    const int64_t rows = it.shape[0], len = it.shape[1];
    int64_t inner[OARI_ITER_MAX], outer[OARI_ITER_MAX];
    for (int k = 0; k < it.n_ops; k++) {
        inner[k] = it.strides[k][1];
        outer[k] = it.strides[k][0];
    }
    /* (a branch, not an if clause: a serialised region still costs a futex
     * syscall in libgomp; see OARI_PARALLEL_FOR_IF) */
    if (it.numel >= OARI_PARALLEL_GRAIN && rows > 1) {
#pragma omp parallel
        rows_of_thread(&it, fn2, ctx, rows, len, inner, outer);
    } else {
        rows_of_thread(&it, fn2, ctx, rows, len, inner, outer);
    }
}

/* One run of a same-dtype copy; ctx: the element size. */
static void copy_run(char **p, const int64_t *s, int64_t n, void *ctx) {
    const size_t es = *(const size_t *)ctx;
    if (s[0] == 1 && s[1] == 1) {
        memcpy(p[0], p[1], (size_t)n * es);
        return;
    }
    const int64_t so = s[0] * (int64_t)es, si = s[1] * (int64_t)es;
    char *o = p[0];
    const char *a = p[1];
#define COPY_RUN(SIZE) \
    for (int64_t i = 0; i < n; i++) memcpy(o + i * so, a + i * si, SIZE); \
    break
    switch (es) {
    case 1: COPY_RUN(1);
    case 2: COPY_RUN(2);
    case 4: COPY_RUN(4);
    case 8: COPY_RUN(8);
    case 16: COPY_RUN(16);
    default: COPY_RUN(es);
    }
#undef COPY_RUN
}

void oari_copy_strided(const oar_ktensor *dst, const oar_ktensor *src) {
    const oar_ktensor *ops[2] = {dst, src};
    oari_iter it;
    oari_iter_init(&it, 2, ops);
    size_t es = oar_dtype_size((oar_dtype)dst->dtype);
    oari_iter_run(&it, copy_run, &es);
}

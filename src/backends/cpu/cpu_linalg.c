/* CPU kernel of matmul: CBLAS gemm for f32/f64/c64/c128 (strided operands
 * are passed as they are when row- or column-major in their last two dims,
 * copied otherwise), oneDNN for bf16 where built with it (cpu_dnnl.c), a
 * plain loop for integers. Batches loop over gemm calls; broadcast batch
 * dims have stride 0. */
#include "cpu.h"

#include <cblas.h>
#include <limits.h>
#include <omp.h>
#include <string.h>

/* One operand as a batch of matrices [rows, cols] with strides (sr, sc)
 * and per-output-batch-dim strides (0 where broadcast). */
typedef struct {
    const char *data;
    int64_t rows, cols, sr, sc;
    int64_t bstride[OAR_MAX_DIMS];
} mat_view;

typedef struct {
    int nbatch;
    int64_t bshape[OAR_MAX_DIMS];
    int64_t nb;           /* number of matrices */
    int64_t n, k, m;
} mm_shape;

/* Element offsets of batch b in a and b. */
static void batch_offsets(const mm_shape *s, const mat_view *a, const mat_view *b, int64_t bi,
                          int64_t *oa, int64_t *ob) {
    int64_t offa = 0, offb = 0;
    for (int d = s->nbatch - 1; d >= 0; d--) {
        int64_t i = bi % s->bshape[d];
        bi /= s->bshape[d];
        offa += i * a->bstride[d];
        offb += i * b->bstride[d];
    }
    *oa = offa;
    *ob = offb;
}

/* The view of kernel operand t (1-D promoted as matmul does: [k] is [1, k]
 * when left, [k, 1] when right) against the output batch dims. */
static void make_view(const oar_ktensor *t, bool left, const mm_shape *s, mat_view *v) {
    v->data = t->data;
    int nd = t->ndim, nb_own;
    if (nd == 1) {
        if (left) v->rows = 1, v->cols = t->shape[0], v->sr = t->shape[0], v->sc = t->strides[0];
        else v->rows = t->shape[0], v->cols = 1, v->sr = t->strides[0], v->sc = 1;
        nb_own = 0;
    } else {
        v->rows = t->shape[nd - 2], v->cols = t->shape[nd - 1];
        v->sr = t->strides[nd - 2], v->sc = t->strides[nd - 1];
        nb_own = nd - 2;
    }
    for (int d = 0; d < s->nbatch; d++) {
        int src = d - (s->nbatch - nb_own);
        v->bstride[d] = src < 0 || t->shape[src] == 1 ? 0 : t->strides[src];
    }
}

/* How BLAS can read a matrix: 0 row-major, 1 column-major (pass with
 * CblasTrans), -1 neither (copy). *ld gets the leading dimension. */
static int blas_layout(int64_t r, int64_t c, int64_t sr, int64_t sc, int64_t *ld) {
    int64_t lr = c > 1 ? c : 1, lc = r > 1 ? r : 1;
    if ((c == 1 || sc == 1) && (r == 1 || sr >= lr)) {
        *ld = r == 1 ? lr : sr;
        return 0;
    }
    if ((r == 1 || sr == 1) && (c == 1 || sc >= lc)) {
        *ld = c == 1 ? lc : sc;
        return 1;
    }
    return -1;
}

/* Copies the operand t into a fresh contiguous buffer (same shape) and
 * points the kernel view *c at it. Returns the buffer, or NULL on OOM. */
static void *pack(const oar_ktensor *t, oar_ktensor *c, size_t *nbytes) {
    int64_t n = oari_kt_numel(t);
    size_t es = oar_dtype_size((oar_dtype)t->dtype);
    *nbytes = (size_t)(n ? n : 1) * es;
    char *buf = oari_malloc(*nbytes);
    if (!buf) return NULL;
    *c = *t;
    c->data = buf;
    oari_contiguous_strides(t->ndim, t->shape, c->strides);
    oari_copy_strided(c, t);
    return buf;
}

/* One BLAS call: C [n, m] (row-major, ldc) = op(A) [n, k] op(B) [k, m]. */
static void blas_gemm(int dt, bool ta, bool tb, int64_t n, int64_t m, int64_t k, const void *a, int64_t lda,
                      const void *b, int64_t ldb, void *c, int64_t ldc) {
    enum CBLAS_TRANSPOSE tra = ta ? CblasTrans : CblasNoTrans, trb = tb ? CblasTrans : CblasNoTrans;
    blasint N = (blasint)n, M = (blasint)m, K = (blasint)k;
    blasint LA = (blasint)lda, LB = (blasint)ldb, LC = (blasint)ldc;
    if (dt != OAR_F32) oari_cpu_blas_note(n * m * k);
    switch (dt) {
    case OAR_F32:
        oari_cpu_sgemm(CblasRowMajor, tra, trb, N, M, K, 1.0f, a, LA, b, LB, 0.0f, c, LC);
        break;
    case OAR_F64:
        oari_cpu_dgemm(CblasRowMajor, tra, trb, N, M, K, 1.0, a, LA, b, LB, 0.0, c, LC);
        break;
    case OAR_C64: {
        const float one[2] = {1, 0}, zero[2] = {0, 0};
        oari_lib_icv icv = oari_lib_enter(0);
        cblas_cgemm(CblasRowMajor, tra, trb, N, M, K, one, a, LA, b, LB, zero, c, LC);
        oari_lib_leave(icv);
        break;
    }
    case OAR_C128: {
        const double one[2] = {1, 0}, zero[2] = {0, 0};
        oari_lib_icv icv = oari_lib_enter(0);
        cblas_zgemm(CblasRowMajor, tra, trb, N, M, K, one, a, LA, b, LB, zero, c, LC);
        oari_lib_leave(icv);
        break;
    }
    }
}

/* C = op(A) op(B) on the calling thread's threads. Below 2^23
 * multiply-adds a product runs on one thread: OpenBLAS's OpenMP build
 * threads every product, and for small ones (a transformer's 512x128x128)
 * two threads cost 4x one (the transformer step went from 166 to 43 ms).
 * Above, C is split into one block of rows (or of columns, when it has
 * more of them; at least 64 each) per thread, each a one-thread BLAS call inside one
 * parallel region (where OpenBLAS runs on the calling thread): OpenBLAS's
 * own threads share packed panels and wait on each other inside a
 * product, and ran 1.0-1.7x slower here than independent blocks
 * (1024x128x512 on 2 threads: 847-1388 us against 828-839 us). */
static void gemm(int dt, bool ta, bool tb, int64_t n, int64_t m, int64_t k, const void *a,
                 int64_t lda, const void *b, int64_t ldb, void *c, int64_t ldc) {
    const int64_t small = (int64_t)1 << 23, es = (int64_t)oar_dtype_size((oar_dtype)dt);
    int threads = omp_get_max_threads();
    if (threads == 1 || omp_in_parallel() || (dt == OAR_F32 && oari_cpu_sgemm_onednn(n, m, k))) {
        /* (oneDNN threads its own products well at every size: 128x128x64
         * on two threads ran in 0.63 of one thread's time, 2048x128x512 in 0.50) */
        blas_gemm(dt, ta, tb, n, m, k, a, lda, b, ldb, c, ldc);
    } else if (n * m * k < small) {
        oari_lib_icv icv = oari_lib_enter(1);
        blas_gemm(dt, ta, tb, n, m, k, a, lda, b, ldb, c, ldc);
        oari_lib_leave(icv);
    } else if (n < 64 * threads && m < 64 * threads) { /* blocks too thin: OpenBLAS's threads */
        blas_gemm(dt, ta, tb, n, m, k, a, lda, b, ldb, c, ldc);
    } else {
        bool rows = n >= m;
        int64_t len = rows ? n : m, per = ((len + threads - 1) / threads + 15) / 16 * 16;
        const char *A = a, *B = b;
        char *C = c;
#pragma omp parallel for schedule(static)
        for (int t = 0; t < threads; t++) {
            int64_t s = t * per, l = len - s < per ? len - s : per;
            if (l <= 0) continue;
            if (rows) /* rows s.. of op(A) and of C */
                blas_gemm(dt, ta, tb, l, m, k, A + (ta ? s : s * lda) * es, lda, B, ldb, C + s * ldc * es, ldc);
            else /* columns s.. of op(B) and of C */
                blas_gemm(dt, ta, tb, n, l, k, A, lda, B + (tb ? s * ldb : s) * es, ldb, C + s * es, ldc);
        }
    }
}

/* y = op(M) x with M stored row-major (rows x cols, ld), x at stride incx. */
static void gemv(int dt, bool trans, int64_t rows, int64_t cols, const void *mat, int64_t ld,
                 const void *x, int64_t incx, void *y) {
    enum CBLAS_TRANSPOSE tr = trans ? CblasTrans : CblasNoTrans;
    blasint R = (blasint)rows, C = (blasint)cols, L = (blasint)ld, INC = (blasint)incx;
    if (dt == OAR_F32) { /* (oari_cpu_sgemv pins the team itself) */
        oari_cpu_sgemv(trans, rows, cols, mat, ld, x, incx, y);
        return;
    }
    oari_cpu_blas_note(rows * cols);
    oari_lib_icv icv = oari_lib_enter(0);
    switch (dt) {
    case OAR_F64: cblas_dgemv(CblasRowMajor, tr, R, C, 1.0, mat, L, x, INC, 0.0, y, 1); break;
    case OAR_C64: {
        const float one[2] = {1, 0}, zero[2] = {0, 0};
        cblas_cgemv(CblasRowMajor, tr, R, C, one, mat, L, x, INC, zero, y, 1);
        break;
    }
    case OAR_C128: {
        const double one[2] = {1, 0}, zero[2] = {0, 0};
        cblas_zgemv(CblasRowMajor, tr, R, C, one, mat, L, x, INC, zero, y, 1);
        break;
    }
    }
    oari_lib_leave(icv);
}

/* One product of the batch: gemv when a side is a vector (BLAS's gemm is
 * much slower there), gemm otherwise. la/lb: 0 row-major, 1 column-major. */
static void product(int dt, const mm_shape *s, int la, int lb, const char *a, int64_t lda,
                    const char *b, int64_t ldb, char *c) {
    if (s->m == 1) { /* c[n] = A b, b a column at stride ldb (row-major) or 1 */
        int64_t inc = lb == 0 ? ldb : 1;
        if (la == 0) gemv(dt, false, s->n, s->k, a, lda, b, inc, c);
        else gemv(dt, true, s->k, s->n, a, lda, b, inc, c);
    } else if (s->n == 1) { /* c[m] = B^T a, a a row at stride 1 or lda (column-major) */
        int64_t inc = la == 0 ? 1 : lda;
        if (lb == 0) gemv(dt, true, s->k, s->m, b, ldb, a, inc, c);
        else gemv(dt, false, s->m, s->k, b, ldb, a, inc, c);
    } else {
        gemm(dt, la == 1, lb == 1, s->n, s->m, s->k, a, lda, b, ldb, c, s->m);
    }
}

static bool fits_blas(int64_t v) { return v <= (int64_t)INT_MAX; }

static void setup(const oar_kernel_call *call, mm_shape *s, mat_view *a, mat_view *b) {
    const oar_ktensor *A = &call->in[0], *B = &call->in[1], *O = &call->out[0];
    bool a1 = A->ndim == 1, b1 = B->ndim == 1;
    s->nbatch = O->ndim - !a1 - !b1;
    s->nb = 1;
    for (int d = 0; d < s->nbatch; d++) s->bshape[d] = O->shape[d], s->nb *= O->shape[d];
    make_view(A, true, s, a);
    make_view(B, false, s, b);
    s->n = a->rows, s->k = a->cols, s->m = b->cols;
}

/* A batch of rows of A over a B shared by every batch folds into one gemm
 * when A's batch dims step by whole matrices of rows. */
static void fold_batches(mm_shape *s, mat_view *a, const mat_view *b) {
    if (s->nb <= 1 || (a->sc != 1 && a->cols != 1)) return;
    if (s->n == 1) { /* one row a batch: its stride is free, so take the innermost batch step
                      * (a sequence-first [T, 1, d] view of [1, T, d] times W: one GEMM, not
                      * T gemv calls that each read all of W) */
        for (int d = s->nbatch - 1; d >= 0; d--)
            if (s->bshape[d] != 1) {
                if (a->bstride[d] > 0) a->sr = a->bstride[d];
                break;
            }
    }
    if (a->sr < a->cols) return;
    int64_t expect = a->sr * s->n;
    for (int d = s->nbatch - 1; d >= 0; d--) {
        if (b->bstride[d] != 0) return;
        if (s->bshape[d] == 1) continue;
        if (a->bstride[d] != expect) return;
        expect *= s->bshape[d];
    }
    s->n *= s->nb;
    a->rows = s->n;
    s->nb = 1;
    s->nbatch = 0;
}

/* Whether a dense copy of A would fold the batch into one GEMM where A as
 * it is did not: several batches of fewer than 256 rows, one B for all of
 * them, and every batch dim A's own (not broadcast). */
static bool dense_copy_folds(const oar_kernel_call *call, const mm_shape *s, const mat_view *a,
                             const mat_view *b) {
    if (s->nb <= 1 || s->n >= 256 || call->in[0].ndim != call->out[0].ndim) return false;
    for (int d = 0; d < s->nbatch; d++)
        if (b->bstride[d] != 0 || (s->bshape[d] > 1 && a->bstride[d] == 0)) return false;
    return true;
}

/* Copies the operands neither row- nor column-major in their last two dims
 * (blas_layout) and views the copies instead; *la, *lb get the layouts.
 * bufs/sizes: the copies, for oari_free. 0, or a status (OOM). */
static int pack_unreadable(const oar_kernel_call *call, const mm_shape *s, mat_view *a, mat_view *b,
                           int *la, int64_t *lda, int *lb, int64_t *ldb, oar_ktensor packed[2],
                           void *bufs[2], size_t sizes[2]) {
    *la = blas_layout(a->rows, a->cols, a->sr, a->sc, lda);
    *lb = blas_layout(b->rows, b->cols, b->sr, b->sc, ldb);
    if (*la < 0) {
        if (!(bufs[0] = pack(&call->in[0], &packed[0], &sizes[0]))) return oari_fail_status();
        make_view(&packed[0], true, s, a);
        *la = blas_layout(a->rows, a->cols, a->sr, a->sc, lda);
    }
    if (*lb < 0) {
        if (!(bufs[1] = pack(&call->in[1], &packed[1], &sizes[1]))) {
            oari_free(bufs[0], sizes[0]);
            bufs[0] = NULL;
            return oari_fail_status();
        }
        make_view(&packed[1], false, s, b);
        *lb = blas_layout(b->rows, b->cols, b->sr, b->sc, ldb);
    }
    return 0;
}

static int k_matmul_blas(void *ctx, const oar_kernel_call *call) {
    (void)ctx;
    const oar_ktensor *O = &call->out[0];
    int dt = O->dtype;
    size_t es = oar_dtype_size((oar_dtype)dt);
    mm_shape s;
    mat_view a, b;
    setup(call, &s, &a, &b);
    char *out = O->data;
    if (s.k == 0) {
        memset(out, 0, (size_t)oari_kt_numel(O) * es);
        return 0;
    }
    /* copy operands BLAS cannot read as they are */
    oar_ktensor packed[2];
    void *bufs[2] = {NULL, NULL};
    size_t sizes[2] = {0, 0};
    int64_t lda, ldb;
    int la, lb;
    int st = pack_unreadable(call, &s, &a, &b, &la, &lda, &lb, &ldb, packed, bufs, sizes);
    if (st) return st;
    if (la == 0) fold_batches(&s, &a, &b);
    if (dense_copy_folds(call, &s, &a, &b) && !bufs[0]) {
        /* batches of few rows over one B whose rows do not line up (a [T, B, d] view of
         * [B, T, d], a sequence-first layer at batch > 1): a dense copy of A folds into
         * one GEMM, where T products of B rows each repacked all of B (64 x 32 x 256 x 768:
         * 14 ms, against one copy and one GEMM) */
        if (!(bufs[0] = pack(&call->in[0], &packed[0], &sizes[0]))) {
            oari_free(bufs[1], sizes[1]);
            return oari_fail_status();
        }
        make_view(&packed[0], true, &s, &a);
        la = blas_layout(a.rows, a.cols, a.sr, a.sc, &lda);
        fold_batches(&s, &a, &b);
    }
    if (la == 0) blas_layout(a.rows, a.cols, a.sr, a.sc, &lda);
    if (!fits_blas(s.n) || !fits_blas(s.m) || !fits_blas(s.k) || !fits_blas(lda) ||
        !fits_blas(ldb)) {
        st = oari_error(OAR_ERR_UNSUPPORTED,
                        "matmul: a dim or stride exceeds the BLAS integer range");
    } else {
        int64_t mat = s.n * s.m;
        /* many small products: one thread per product (BLAS then runs
         * single-threaded inside the parallel region) */
        bool par = s.nb > 1 && s.n * s.m * s.k < (int64_t)1 << 21;
        /* large products one after another, outside any region: each gets
         * the library's threads (inside a region of one thread it would get
         * one, oari_lib_enter) */
        OARI_PARALLEL_FOR_IF(par, for (int64_t bi = 0; bi < s.nb; bi++) {
            int64_t oa, ob;
            batch_offsets(&s, &a, &b, bi, &oa, &ob);
            product(dt, &s, la, lb, a.data + oa * (int64_t)es, lda, b.data + ob * (int64_t)es, ldb,
                    out + bi * mat * (int64_t)es);
        });
    }
    oari_free(bufs[0], sizes[0]);
    oari_free(bufs[1], sizes[1]);
    return st;
}

/* Integer matmul: a plain loop, wrapping on overflow as PyTorch does. */
#define INT_MATMUL(NAME, T, UT)                                                             \
    static int NAME(void *ctx, const oar_kernel_call *call) {                               \
        (void)ctx;                                                                          \
        mm_shape s;                                                                         \
        mat_view a, b;                                                                      \
        setup(call, &s, &a, &b);                                                            \
        T *out = call->out[0].data;                                                         \
        int64_t rows = s.nb * s.n, work = rows * s.m * (s.k ? s.k : 1);                     \
        _Pragma("omp parallel for if (work > OARI_PARALLEL_GRAIN) schedule(static)")        \
        for (int64_t r = 0; r < rows; r++) {                                                \
            int64_t bi = r / s.n, i = r % s.n, oa, ob;                                      \
            batch_offsets(&s, &a, &b, bi, &oa, &ob);                                        \
            const T *pa = (const T *)a.data + oa + i * a.sr;                                \
            const T *pb = (const T *)b.data + ob;                                           \
            T *po = out + r * s.m;                                                          \
            for (int64_t j = 0; j < s.m; j++) {                                             \
                UT acc = 0;                                                                 \
                for (int64_t p = 0; p < s.k; p++)                                           \
                    acc += (UT)pa[p * a.sc] * (UT)pb[p * b.sr + j * b.sc];                  \
                po[j] = (T)acc;                                                             \
            }                                                                               \
        }                                                                                   \
        return 0;                                                                           \
    }

INT_MATMUL(k_matmul_u8, uint8_t, uint32_t)
INT_MATMUL(k_matmul_i8, int8_t, uint32_t)
INT_MATMUL(k_matmul_i32, int32_t, uint32_t)
INT_MATMUL(k_matmul_i64, int64_t, uint64_t)

#ifdef OAR_WITH_DNNL
/* One operand's dims and strides for oneDNN: its batch dims (1 where
 * broadcast, with the stride of a dense stack: stride 0 sends oneDNN to its
 * reference kernel), then rows and columns. */
static void dnnl_operand(const mm_shape *s, const mat_view *v, int64_t *dims, int64_t *strides) {
    int nb = s->nbatch;
    dims[nb] = v->rows, dims[nb + 1] = v->cols;
    strides[nb] = v->sr, strides[nb + 1] = v->sc;
    int64_t span = 1 + (v->rows - 1) * v->sr + (v->cols - 1) * v->sc;
    for (int d = nb - 1; d >= 0; d--) {
        bool own = v->bstride[d] != 0;
        dims[d] = own ? s->bshape[d] : 1;
        strides[d] = own ? v->bstride[d] : span;
        int64_t reach = 1 + (dims[d] - 1) * strides[d] + (span - 1);
        if (reach > span) span = reach;
    }
}

/* bf16 matmul through oneDNN (cpu_dnnl.c): f32 accumulation, bf16 result,
 * the whole batch one call. Operands neither row- nor column-major in their
 * last two dims are copied first, as for BLAS (oneDNN would read them with
 * its reference kernel). Without this kernel bf16 runs VIA_F32. */
static int k_matmul_dnnl(void *ctx, const oar_kernel_call *call) {
    (void)ctx;
    const oar_ktensor *O = &call->out[0];
    mm_shape s;
    mat_view a, b;
    setup(call, &s, &a, &b);
    int64_t numel = oari_kt_numel(O);
    if (numel == 0) return 0;
    if (s.k == 0) { /* oneDNN takes no zero dims */
        memset(O->data, 0, (size_t)numel * oar_dtype_size((oar_dtype)O->dtype));
        return 0;
    }
    oar_ktensor packed[2];
    void *bufs[2] = {NULL, NULL};
    size_t sizes[2] = {0, 0};
    int64_t lda, ldb;
    int la, lb;
    int st = pack_unreadable(call, &s, &a, &b, &la, &lda, &lb, &ldb, packed, bufs, sizes);
    if (st) return st;
    oari_dnnl_matmul_args m = {.dtype = O->dtype, .rank = s.nbatch + 2, .a = a.data, .b = b.data,
                               .c = O->data};
    dnnl_operand(&s, &a, m.a_dims, m.a_strides);
    dnnl_operand(&s, &b, m.b_dims, m.b_strides);
    memcpy(m.c_dims, s.bshape, (size_t)s.nbatch * sizeof *s.bshape);
    m.c_dims[s.nbatch] = s.n, m.c_dims[s.nbatch + 1] = s.m;
    st = oari_dnnl_matmul(&m);
    oari_free(bufs[0], sizes[0]);
    oari_free(bufs[1], sizes[1]);
    return st;
}
#endif

const oari_cpu_kernels oari_cpu_k_matmul = {
    [OAR_U8] = k_matmul_u8, [OAR_I8] = k_matmul_i8, [OAR_I32] = k_matmul_i32,
    [OAR_I64] = k_matmul_i64,
    [OAR_F32] = k_matmul_blas, [OAR_F64] = k_matmul_blas, [OAR_C64] = k_matmul_blas,
    [OAR_C128] = k_matmul_blas,
#ifdef OAR_WITH_DNNL /* f16 stays VIA_F32: oneDNN 2.6 has f16 matmul only on AVX512_FP16 */
    [OAR_BF16] = k_matmul_dnnl,
#endif
};

/* add_scaled: out (= in[0]) += alpha * in[1], in[1] expanded by dispatch. */
#define AXPY_LOOP(NAME, T, S)                                                       \
    static void NAME(char **p, const int64_t *s, int64_t n, void *ctx) {            \
        const S alpha = *(const S *)ctx;                                            \
        T *o = (T *)p[0];                                                           \
        const T *d = (const T *)p[1], *x = (const T *)p[2];                         \
        if (s[0] == 1 && s[1] == 1 && s[2] == 1) {                                  \
            _Pragma("omp simd")                                                     \
            for (int64_t i = 0; i < n; i++) o[i] = d[i] + alpha * x[i];             \
        } else {                                                                    \
            for (int64_t i = 0; i < n; i++)                                         \
                o[i * s[0]] = d[i * s[1]] + alpha * x[i * s[2]];                    \
        }                                                                           \
    }                                                                               \
    static int k_##NAME(void *ctx, const oar_kernel_call *c) {                      \
        (void)ctx;                                                                  \
        S alpha = (S)c->fattr[0];                                                   \
        oari_iter_call(c, NAME, &alpha);                                            \
        return 0;                                                                   \
    }
AXPY_LOOP(axpy_f32, float, float)
AXPY_LOOP(axpy_f64, double, double)
AXPY_LOOP(axpy_c64, c64_t, float)
AXPY_LOOP(axpy_c128, c128_t, double)

const oari_cpu_kernels oari_cpu_k_add_scaled = {
    [OAR_F32] = k_axpy_f32, [OAR_F64] = k_axpy_f64, [OAR_C64] = k_axpy_c64,
    [OAR_C128] = k_axpy_c128,
};

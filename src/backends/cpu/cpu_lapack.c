/* CPU kernels of the LAPACK ops (src/ops/defs/lapack.def) through LAPACKE's
 * column-major _work functions, which allocate nothing: each matrix of the
 * batch is copied (any strides) into a column-major buffer from oar's
 * allocator, factored there, and its results copied out. Batches run one
 * after the other (LAPACK threads inside a call through OpenBLAS). A
 * numerical failure (singular, not positive-definite, no convergence) is
 * an error naming the op and the batch element. Inputs of qr and svd may
 * be non-square ([..., m, n]). */
#include "cpu.h"

#include <lapacke.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* Matrices in a batch: the product of all dims but the last `mat` ones. */
static int64_t batch_count(const oar_ktensor *t, int mat) {
    int64_t nb = 1;
    for (int d = 0; d < t->ndim - mat; d++) nb *= t->shape[d];
    return nb;
}

/* Element offset of batch element bi of t (its last `mat` dims excluded). */
static int64_t batch_offset(const oar_ktensor *t, int mat, int64_t bi) {
    return oari_strided_index(t->ndim - mat, t->shape, t->strides, bi);
}

/* Matrix bi of t ([..., rows, cols]) as a 2-D view, and the same shape
 * over a column-major buffer (ld rows): gather and scatter copy between
 * them with oari_copy_strided. */
static oar_ktensor matrix_view(const oar_ktensor *t, int64_t bi) {
    oar_ktensor m = {.dtype = t->dtype, .ndim = 2};
    size_t es = oar_dtype_size((oar_dtype)t->dtype);
    m.data = (char *)t->data + batch_offset(t, 2, bi) * (int64_t)es;
    for (int d = 0; d < 2; d++) {
        m.shape[d] = t->shape[t->ndim - 2 + d];
        m.strides[d] = t->strides[t->ndim - 2 + d];
    }
    return m;
}

static oar_ktensor column_major(const oar_ktensor *m, void *buf) {
    oar_ktensor c = *m;
    c.data = buf;
    c.strides[0] = 1;
    c.strides[1] = m->shape[0];
    return c;
}

static void gather(const oar_ktensor *t, int64_t bi, char *buf) {
    oar_ktensor m = matrix_view(t, bi), c = column_major(&m, buf);
    oari_copy_strided(&c, &m);
}

static void scatter(const oar_ktensor *t, int64_t bi, const char *buf) {
    oar_ktensor m = matrix_view(t, bi), c = column_major(&m, (void *)buf);
    oari_copy_strided(&m, &c);
}

/* Vector bi of t ([..., n]) <- a contiguous buffer of n elements. */
static void scatter_vector(const oar_ktensor *t, int64_t bi, const void *buf) {
    size_t es = oar_dtype_size((oar_dtype)t->dtype);
    oar_ktensor v = {.dtype = t->dtype, .ndim = 1, .shape = {t->shape[t->ndim - 1]},
                     .strides = {t->strides[t->ndim - 1]}};
    v.data = (char *)t->data + batch_offset(t, 1, bi) * (int64_t)es;
    oar_ktensor c = v;
    c.data = (void *)buf;
    c.strides[0] = 1;
    oari_copy_strided(&v, &c);
}

/* " (batch element 3)" when the input has batch dims, "" otherwise. */
static const char *where(char *buf, size_t len, const oar_ktensor *t, int64_t bi) {
    if (t->ndim <= 2) return "";
    snprintf(buf, len, " (batch element %lld)", (long long)bi);
    return buf;
}

static int too_big(const char *op, int64_t n) {
    return oari_error(OAR_ERR_UNSUPPORTED, "%s: a matrix dim of %lld exceeds LAPACK's integer "
                      "range", op, (long long)n);
}

static int lapack_arg(const char *op, lapack_int info) {
    return oari_error(OAR_ERR_INVALID, "%s: LAPACK rejected argument %d (internal error)", op,
                      (int)-info);
}

static lapack_int getrf(int dt, lapack_int n, void *a, lapack_int *ipiv) {
    lapack_int ld = n > 1 ? n : 1;
    switch (dt) {
    case OAR_F32: return LAPACKE_sgetrf_work(LAPACK_COL_MAJOR, n, n, a, ld, ipiv);
    case OAR_F64: return LAPACKE_dgetrf_work(LAPACK_COL_MAJOR, n, n, a, ld, ipiv);
    case OAR_C64: return LAPACKE_cgetrf_work(LAPACK_COL_MAJOR, n, n, a, ld, ipiv);
    default: return LAPACKE_zgetrf_work(LAPACK_COL_MAJOR, n, n, a, ld, ipiv);
    }
}

static lapack_int getrs(int dt, lapack_int n, lapack_int k, const void *a, const lapack_int *ipiv,
                        void *b) {
    lapack_int ld = n > 1 ? n : 1;
    switch (dt) {
    case OAR_F32: return LAPACKE_sgetrs_work(LAPACK_COL_MAJOR, 'N', n, k, a, ld, ipiv, b, ld);
    case OAR_F64: return LAPACKE_dgetrs_work(LAPACK_COL_MAJOR, 'N', n, k, a, ld, ipiv, b, ld);
    case OAR_C64: return LAPACKE_cgetrs_work(LAPACK_COL_MAJOR, 'N', n, k, a, ld, ipiv, b, ld);
    default: return LAPACKE_zgetrs_work(LAPACK_COL_MAJOR, 'N', n, k, a, ld, ipiv, b, ld);
    }
}

/* ---- linalg_solve ---------------------------------------------------------- */

static int k_solve(void *ctx, const oar_kernel_call *call) {
    (void)ctx;
    const oar_ktensor *A = &call->in[0], *B = &call->in[1], *X = &call->out[0];
    int64_t caller = call->n_iattr > 0 ? call->iattr[0] : 0;
    const char *op = caller == 1   ? "linalg_inv"
                     : caller == 2 ? "linalg_matrix_exp"
                                   : "linalg_solve";
    int dt = X->dtype;
    size_t es = oar_dtype_size((oar_dtype)dt);
    int64_t n = A->shape[A->ndim - 1], k = B->shape[B->ndim - 1], nb = batch_count(A, 2);
    if (n > INT_MAX || k > INT_MAX) return too_big(op, n > k ? n : k);
    if (n == 0 || k == 0 || nb == 0) return 0;
    size_t sa = (size_t)(n * n) * es, sb = (size_t)(n * k) * es, sp = (size_t)n * sizeof(lapack_int);
    char *a = oari_malloc(sa), *b = oari_malloc(sb);
    lapack_int *ipiv = oari_malloc(sp);
    int st = a && b && ipiv ? 0 : oari_fail_status();
    for (int64_t bi = 0; bi < nb && !st; bi++) {
        gather(A, bi, a);
        gather(B, bi, b);
        lapack_int info = getrf(dt, (lapack_int)n, a, ipiv);
        char w[64];
        if (info > 0)
            st = oari_error(OAR_ERR_INVALID, "%s: the matrix%s is singular (U[%d, %d] of its LU "
                            "factorization is exactly zero)", op, where(w, sizeof w, A, bi),
                            (int)info - 1, (int)info - 1);
        else if (info < 0) st = lapack_arg(op, info);
        else if ((info = getrs(dt, (lapack_int)n, (lapack_int)k, a, ipiv, b)) != 0)
            st = lapack_arg(op, info);
        else scatter(X, bi, b);
    }
    oari_free(a, sa);
    oari_free(b, sb);
    oari_free(ipiv, sp);
    return st;
}

/* ---- linalg_slogdet -------------------------------------------------------- */

/* sign and log|det| of matrix a (LU-factored by getrf, info > 0: singular). */
static void lu_slogdet(int dt, int64_t n, const char *a, const lapack_int *ipiv, lapack_int info,
                       double _Complex *sign, double *logabs) {
    if (info > 0) {
        *sign = 0;
        *logabs = -INFINITY;
        return;
    }
    double _Complex s = 1;
    double l = 0;
    for (int64_t i = 0; i < n; i++) {
        const char *p = a + (size_t)(i + i * n) * oar_dtype_size((oar_dtype)dt);
        double _Complex u = dt == OAR_F32   ? *(const float *)p
                            : dt == OAR_F64 ? *(const double *)p
                            : dt == OAR_C64 ? (double _Complex) * (const float _Complex *)p
                                            : *(const double _Complex *)p;
        double m = cabs(u);
        l += log(m);
        s *= u / m;
        if (ipiv[i] != i + 1) s = -s;
    }
    *sign = s;
    *logabs = l;
}

static void put_scalar(const oar_ktensor *t, int64_t bi, double _Complex v) {
    int64_t off = batch_offset(t, 0, bi);
    switch (t->dtype) {
    case OAR_F32: ((float *)t->data)[off] = (float)creal(v); break;
    case OAR_F64: ((double *)t->data)[off] = creal(v); break;
    case OAR_C64: ((float _Complex *)t->data)[off] = (float _Complex)v; break;
    default: ((double _Complex *)t->data)[off] = v; break;
    }
}

static int k_slogdet(void *ctx, const oar_kernel_call *call) {
    (void)ctx;
    const oar_ktensor *A = &call->in[0], *S = &call->out[0], *L = &call->out[1];
    int dt = A->dtype;
    size_t es = oar_dtype_size((oar_dtype)dt);
    int64_t n = A->shape[A->ndim - 1], nb = batch_count(A, 2);
    if (n > INT_MAX) return too_big("linalg_slogdet", n);
    size_t sa = (size_t)(n * n) * es + es, sp = (size_t)(n + 1) * sizeof(lapack_int);
    char *a = oari_malloc(sa);
    lapack_int *ipiv = oari_malloc(sp);
    int st = a && ipiv ? 0 : oari_fail_status();
    for (int64_t bi = 0; bi < nb && !st; bi++) {
        gather(A, bi, a);
        lapack_int info = n ? getrf(dt, (lapack_int)n, a, ipiv) : 0;
        if (info < 0) {
            st = lapack_arg("linalg_slogdet", info);
            break;
        }
        double _Complex s;
        double l;
        lu_slogdet(dt, n, a, ipiv, info, &s, &l);
        put_scalar(S, bi, s);
        put_scalar(L, bi, l);
    }
    oari_free(a, sa);
    oari_free(ipiv, sp);
    return st;
}

/* ---- linalg_cholesky ------------------------------------------------------- */

static void conj_elem(int dt, char *p) {
    if (dt == OAR_C64) ((float *)p)[1] = -((float *)p)[1];
    else if (dt == OAR_C128) ((double *)p)[1] = -((double *)p)[1];
}

static int k_cholesky(void *ctx, const oar_kernel_call *call) {
    (void)ctx;
    const oar_ktensor *A = &call->in[0], *O = &call->out[0];
    bool upper = call->n_iattr > 0 && call->iattr[0];
    int dt = A->dtype;
    size_t es = oar_dtype_size((oar_dtype)dt);
    int64_t n = A->shape[A->ndim - 1], nb = batch_count(A, 2);
    if (n > INT_MAX) return too_big("linalg_cholesky", n);
    if (n == 0 || nb == 0) return 0;
    size_t sa = (size_t)(n * n) * es;
    char *a = oari_malloc(sa);
    if (!a) return oari_fail_status();
    int st = 0;
    lapack_int ld = (lapack_int)n;
    for (int64_t bi = 0; bi < nb && !st; bi++) {
        gather(A, bi, a);
        lapack_int info;
        switch (dt) {
        case OAR_F32: info = LAPACKE_spotrf_work(LAPACK_COL_MAJOR, 'L', ld, (float *)a, ld); break;
        case OAR_F64: info = LAPACKE_dpotrf_work(LAPACK_COL_MAJOR, 'L', ld, (double *)a, ld); break;
        case OAR_C64:
            info = LAPACKE_cpotrf_work(LAPACK_COL_MAJOR, 'L', ld, (lapack_complex_float *)a, ld);
            break;
        default:
            info = LAPACKE_zpotrf_work(LAPACK_COL_MAJOR, 'L', ld, (lapack_complex_double *)a, ld);
            break;
        }
        char w[64];
        if (info > 0) {
            st = oari_error(OAR_ERR_INVALID, "linalg_cholesky: the input%s is not positive-definite "
                            "(the leading minor of order %d is not positive-definite); hint: "
                            "a Hermitian positive-definite matrix is needed, e.g. X X^H + eps I",
                            where(w, sizeof w, A, bi), (int)info);
            break;
        }
        if (info < 0) {
            st = lapack_arg("linalg_cholesky", info);
            break;
        }
        for (int64_t j = 0; j < n; j++) /* L: zero above the diagonal; U = L^H */
            for (int64_t i = 0; i < j; i++) {
                char *up = a + (size_t)(i + j * n) * es, *lo = a + (size_t)(j + i * n) * es;
                if (upper) {
                    memcpy(up, lo, es);
                    conj_elem(dt, up);
                    memset(lo, 0, es);
                } else {
                    memset(up, 0, es);
                }
            }
        scatter(O, bi, a);
    }
    oari_free(a, sa);
    return st;
}

/* ---- linalg_eigh ----------------------------------------------------------- */

static int k_eigh(void *ctx, const oar_kernel_call *call) {
    (void)ctx;
    const oar_ktensor *A = &call->in[0], *W = &call->out[0], *V = &call->out[1];
    char uplo = call->n_iattr > 0 && call->iattr[0] ? 'U' : 'L';
    int dt = A->dtype;
    bool cplx = dt == OAR_C64 || dt == OAR_C128, dbl = dt == OAR_F64 || dt == OAR_C128;
    size_t es = oar_dtype_size((oar_dtype)dt), rs = dbl ? sizeof(double) : sizeof(float);
    int64_t n = A->shape[A->ndim - 1], nb = batch_count(A, 2);
    if (n == 0 || nb == 0) return 0;
    if (n > 30000) return too_big("linalg_eigh", n); /* (its workspace sizes) */
    /* workspace sizes of ?syevd / ?heevd with eigenvectors (LAPACK's docs) */
    int64_t lwork = cplx ? 2 * n + n * n : 1 + 6 * n + 2 * n * n;
    int64_t lrwork = cplx ? 1 + 5 * n + 2 * n * n : 0, liwork = 3 + 5 * n;
    size_t sa = (size_t)(n * n) * es, sw = (size_t)n * rs, swork = (size_t)lwork * es,
           srw = (size_t)(lrwork ? lrwork : 1) * rs, siw = (size_t)liwork * sizeof(lapack_int);
    char *a = oari_malloc(sa), *w = oari_malloc(sw), *work = oari_malloc(swork);
    char *rwork = oari_malloc(srw);
    lapack_int *iwork = oari_malloc(siw);
    int st = a && w && work && rwork && iwork ? 0 : oari_fail_status();
    lapack_int N = (lapack_int)n, LW = (lapack_int)lwork, LRW = (lapack_int)lrwork,
               LIW = (lapack_int)liwork;
    for (int64_t bi = 0; bi < nb && !st; bi++) {
        gather(A, bi, a);
        lapack_int info;
        switch (dt) {
        case OAR_F32:
            info = LAPACKE_ssyevd_work(LAPACK_COL_MAJOR, 'V', uplo, N, (float *)a, N, (float *)w,
                                       (float *)work, LW, iwork, LIW);
            break;
        case OAR_F64:
            info = LAPACKE_dsyevd_work(LAPACK_COL_MAJOR, 'V', uplo, N, (double *)a, N, (double *)w,
                                       (double *)work, LW, iwork, LIW);
            break;
        case OAR_C64:
            info = LAPACKE_cheevd_work(LAPACK_COL_MAJOR, 'V', uplo, N, (lapack_complex_float *)a, N,
                                       (float *)w, (lapack_complex_float *)work, LW,
                                       (float *)rwork, LRW, iwork, LIW);
            break;
        default:
            info = LAPACKE_zheevd_work(LAPACK_COL_MAJOR, 'V', uplo, N, (lapack_complex_double *)a,
                                       N, (double *)w, (lapack_complex_double *)work, LW,
                                       (double *)rwork, LRW, iwork, LIW);
            break;
        }
        char wh[64];
        if (info > 0) {
            st = oari_error(OAR_ERR_INVALID, "linalg_eigh: the eigenvalue algorithm failed to "
                            "converge on the input%s (LAPACK info %d); hint: check it for inf or "
                            "nan", where(wh, sizeof wh, A, bi), (int)info);
            break;
        }
        if (info < 0) {
            st = lapack_arg("linalg_eigh", info);
            break;
        }
        scatter_vector(W, bi, w);
        scatter(V, bi, a);
    }
    oari_free(a, sa);
    oari_free(w, sw);
    oari_free(work, swork);
    oari_free(rwork, srw);
    oari_free(iwork, siw);
    return st;
}

/* ---- linalg_qr ------------------------------------------------------------- */

/* Blocked LAPACK routines run faster with a workspace of a block (64
 * columns) per column; the documented minimum is one per column. */
static int64_t block_work(int64_t cols) { return 64 * (cols > 1 ? cols : 1); }

static lapack_int geqrf(int dt, lapack_int m, lapack_int n, void *a, lapack_int ld, void *tau,
                        void *work, lapack_int lw) {
    switch (dt) {
    case OAR_F32: return LAPACKE_sgeqrf_work(LAPACK_COL_MAJOR, m, n, a, ld, tau, work, lw);
    case OAR_F64: return LAPACKE_dgeqrf_work(LAPACK_COL_MAJOR, m, n, a, ld, tau, work, lw);
    case OAR_C64: return LAPACKE_cgeqrf_work(LAPACK_COL_MAJOR, m, n, a, ld, tau, work, lw);
    default: return LAPACKE_zgeqrf_work(LAPACK_COL_MAJOR, m, n, a, ld, tau, work, lw);
    }
}

/* Q's first qc columns from geqrf's k reflectors (orgqr, ungqr). */
static lapack_int orgqr(int dt, lapack_int m, lapack_int qc, lapack_int k, void *a, lapack_int ld,
                        const void *tau, void *work, lapack_int lw) {
    switch (dt) {
    case OAR_F32: return LAPACKE_sorgqr_work(LAPACK_COL_MAJOR, m, qc, k, a, ld, tau, work, lw);
    case OAR_F64: return LAPACKE_dorgqr_work(LAPACK_COL_MAJOR, m, qc, k, a, ld, tau, work, lw);
    case OAR_C64: return LAPACKE_cungqr_work(LAPACK_COL_MAJOR, m, qc, k, a, ld, tau, work, lw);
    default: return LAPACKE_zungqr_work(LAPACK_COL_MAJOR, m, qc, k, a, ld, tau, work, lw);
    }
}

/* A [..., m, n] -> Q [..., m, qc], R [..., qc, n] (qc: k = min(m, n), or m
 * when complete): geqrf on an m x max(m, n) buffer, R read off its upper
 * triangle, then orgqr/ungqr forms Q in place. */
static int k_qr(void *ctx, const oar_kernel_call *call) {
    (void)ctx;
    const oar_ktensor *A = &call->in[0], *Q = &call->out[0], *R = &call->out[1];
    int dt = A->dtype;
    size_t es = oar_dtype_size((oar_dtype)dt);
    int64_t m = A->shape[A->ndim - 2], n = A->shape[A->ndim - 1], nb = batch_count(A, 2);
    int64_t k = m < n ? m : n, qc = Q->shape[Q->ndim - 1], w = m > n ? m : n;
    if (w > INT_MAX / 64) return too_big("linalg_qr", w);
    if (nb == 0 || m == 0) return 0;
    int64_t lwork = block_work(w);
    size_t sa = (size_t)(m * w) * es + es, sr = (size_t)(qc * n) * es + es,
           st_ = (size_t)k * es + es, sw = (size_t)lwork * es;
    char *a = oari_malloc(sa), *r = oari_malloc(sr), *tau = oari_malloc(st_);
    char *work = oari_malloc(sw);
    int st = a && r && tau && work ? 0 : oari_fail_status();
    lapack_int M = (lapack_int)m, LD = M > 1 ? M : 1;
    for (int64_t bi = 0; bi < nb && !st; bi++) {
        gather(A, bi, a);
        lapack_int info = geqrf(dt, M, (lapack_int)n, a, LD, tau, work, (lapack_int)lwork);
        if (info) {
            st = lapack_arg("linalg_qr", info);
            break;
        }
        for (int64_t j = 0; j < n; j++) /* R: the upper triangle of qc rows */
            for (int64_t i = 0; i < qc; i++) {
                char *d = r + (size_t)(i + j * qc) * es;
                if (i <= j) memcpy(d, a + (size_t)(i + j * m) * es, es);
                else memset(d, 0, es);
            }
        info = orgqr(dt, M, (lapack_int)qc, (lapack_int)k, a, LD, tau, work, (lapack_int)lwork);
        if (info) {
            st = lapack_arg("linalg_qr", info);
            break;
        }
        scatter(Q, bi, a);
        scatter(R, bi, r);
    }
    oari_free(a, sa);
    oari_free(r, sr);
    oari_free(tau, st_);
    oari_free(work, sw);
    return st;
}

/* ---- linalg_svd ------------------------------------------------------------ */

/* ?gesdd with jobz; lwork -1 is LAPACK's workspace query (the size in
 * work[0]). rwork is used by the complex ones only. */
static lapack_int gesdd(int dt, char jobz, lapack_int m, lapack_int n, void *a, void *s, void *u,
                        lapack_int ldu, void *vt, lapack_int ldvt, void *work, lapack_int lw,
                        void *rwork, lapack_int *iwork) {
    lapack_int lda = m > 1 ? m : 1;
    switch (dt) {
    case OAR_F32:
        return LAPACKE_sgesdd_work(LAPACK_COL_MAJOR, jobz, m, n, a, lda, s, u, ldu, vt, ldvt, work,
                                   lw, iwork);
    case OAR_F64:
        return LAPACKE_dgesdd_work(LAPACK_COL_MAJOR, jobz, m, n, a, lda, s, u, ldu, vt, ldvt, work,
                                   lw, iwork);
    case OAR_C64:
        return LAPACKE_cgesdd_work(LAPACK_COL_MAJOR, jobz, m, n, a, lda, s, u, ldu, vt, ldvt, work,
                                   lw, rwork, iwork);
    default:
        return LAPACKE_zgesdd_work(LAPACK_COL_MAJOR, jobz, m, n, a, lda, s, u, ldu, vt, ldvt, work,
                                   lw, rwork, iwork);
    }
}

/* An identity of rows x rows, column-major, of dtype dt. */
static void eye_into(int dt, int64_t rows, char *buf) {
    size_t es = oar_dtype_size((oar_dtype)dt);
    memset(buf, 0, (size_t)(rows * rows) * es);
    for (int64_t i = 0; i < rows; i++) {
        char *p = buf + (size_t)(i + i * rows) * es;
        if (dt == OAR_F32 || dt == OAR_C64) *(float *)p = 1;
        else *(double *)p = 1;
    }
}

/* A [..., m, n] -> U [..., m, uc], S [..., k] (descending, real dtype), Vh
 * [..., vr, n]: gesdd, jobz 'A' (uc = m, vr = n) or 'S' (uc = vr = k). */
static int k_svd(void *ctx, const oar_kernel_call *call) {
    (void)ctx;
    const oar_ktensor *A = &call->in[0], *U = &call->out[0], *S = &call->out[1],
                      *VH = &call->out[2];
    int dt = A->dtype;
    bool cplx = dt == OAR_C64 || dt == OAR_C128, dbl = dt == OAR_F64 || dt == OAR_C128;
    size_t es = oar_dtype_size((oar_dtype)dt), rs = dbl ? sizeof(double) : sizeof(float);
    int64_t m = A->shape[A->ndim - 2], n = A->shape[A->ndim - 1], nb = batch_count(A, 2);
    int64_t k = m < n ? m : n, mx = m > n ? m : n;
    int64_t uc = U->shape[U->ndim - 1], vr = VH->shape[VH->ndim - 2];
    if (mx > 30000) return too_big("linalg_svd", mx); /* (its workspace sizes) */
    if (nb == 0) return 0;
    /* rwork: LAPACK's documented minimum for jobz 'S' / 'A' */
    int64_t lrwork = cplx ? (5 * k * k + 5 * k > 2 * mx * k + 2 * k * k + k
                                 ? 5 * k * k + 5 * k : 2 * mx * k + 2 * k * k + k) : 0;
    size_t sa = (size_t)(m * n) * es + es, ss = (size_t)k * rs + rs,
           su = (size_t)(m * uc) * es + es, sv = (size_t)(vr * n) * es + es, srw = (size_t)(lrwork + 1) * rs,
           siw = (size_t)(8 * k + 1) * sizeof(lapack_int), sw = 0;
    char *a = oari_malloc(sa), *s = oari_malloc(ss), *u = oari_malloc(su), *vt = oari_malloc(sv);
    char *rwork = oari_malloc(srw), *work = NULL;
    lapack_int *iwork = oari_malloc(siw);
    int st = a && s && u && vt && rwork && iwork ? 0 : oari_fail_status();
    char jobz = uc == m && vr == n ? 'A' : 'S';
    lapack_int M = (lapack_int)m, N = (lapack_int)n, LDU = M > 1 ? M : 1,
               LDV = vr > 1 ? (lapack_int)vr : 1, LW = 0;
    if (!st && k > 0) { /* the workspace query */
        double q[2] = {0, 0};
        float qf[2] = {0, 0};
        lapack_int info = gesdd(dt, jobz, M, N, a, s, u, LDU, vt, LDV, dbl ? (void *)q : (void *)qf,
                                -1, rwork, iwork);
        double want = dbl ? q[0] : qf[0];
        if (info) st = lapack_arg("linalg_svd", info);
        else if (want > INT_MAX) st = too_big("linalg_svd", mx);
        else if (!(work = oari_malloc(sw = (size_t)((LW = (lapack_int)want + 1)) * es)))
            st = oari_fail_status();
    }
    for (int64_t bi = 0; bi < nb && !st; bi++) {
        if (k == 0) { /* no singular values; full U and Vh are identities */
            if (uc) eye_into(dt, m, u), scatter(U, bi, u);
            if (vr) eye_into(dt, n, vt), scatter(VH, bi, vt);
            continue;
        }
        gather(A, bi, a);
        lapack_int info = gesdd(dt, jobz, M, N, a, s, u, LDU, vt, LDV, work, LW, rwork, iwork);
        char wh[64];
        if (info > 0) {
            st = oari_error(OAR_ERR_INVALID, "linalg_svd: the SVD algorithm failed to converge on "
                            "the input%s (LAPACK info %d); hint: check it for inf or nan",
                            where(wh, sizeof wh, A, bi), (int)info);
            break;
        }
        if (info == -5) { /* gesdd's argument 4, A, holding nan (LAPACK 3.6 on; LAPACKE
                           * counts its layout argument first) */
            st = oari_error(OAR_ERR_INVALID, "linalg_svd: the input%s contains nan",
                            where(wh, sizeof wh, A, bi));
            break;
        }
        if (info < 0) {
            st = lapack_arg("linalg_svd", info);
            break;
        }
        scatter_vector(S, bi, s);
        scatter(U, bi, u);
        scatter(VH, bi, vt);
    }
    oari_free(a, sa);
    oari_free(s, ss);
    oari_free(u, su);
    oari_free(vt, sv);
    oari_free(rwork, srw);
    oari_free(iwork, siw);
    oari_free(work, sw);
    return st;
}

/* Each kernel under oari_lib_enter (cpu.h): OpenBLAS's LAPACK threads its
 * factorizations through the same GEMM threads. */
#define LIB_THREADS(k)                                               \
    static int k##_lib(void *ctx, const oar_kernel_call *call) {     \
        oari_lib_icv icv = oari_lib_enter(0);                        \
        int st = k(ctx, call);                                       \
        oari_lib_leave(icv);                                         \
        return st;                                                   \
    }
LIB_THREADS(k_solve)
LIB_THREADS(k_slogdet)
LIB_THREADS(k_cholesky)
LIB_THREADS(k_eigh)
LIB_THREADS(k_qr)
LIB_THREADS(k_svd)

#define LAPACK_TABLE(k) {[OAR_F32] = k##_lib, [OAR_F64] = k##_lib, [OAR_C64] = k##_lib, [OAR_C128] = k##_lib}
const oari_cpu_kernels oari_cpu_k_linalg_solve = LAPACK_TABLE(k_solve);
const oari_cpu_kernels oari_cpu_k_linalg_slogdet = LAPACK_TABLE(k_slogdet);
const oari_cpu_kernels oari_cpu_k_linalg_cholesky = LAPACK_TABLE(k_cholesky);
const oari_cpu_kernels oari_cpu_k_linalg_eigh = LAPACK_TABLE(k_eigh);
const oari_cpu_kernels oari_cpu_k_linalg_qr = LAPACK_TABLE(k_qr);
const oari_cpu_kernels oari_cpu_k_linalg_svd = LAPACK_TABLE(k_svd);

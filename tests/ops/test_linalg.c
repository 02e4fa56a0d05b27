/* Linear algebra: matmul (1-D, 2-D, batched, broadcast, non-contiguous,
 * every dtype class), bmm, dot, outer and einsum against PyTorch values
 * (tests/ref/gen_linalg_nn.py), larger products against a naive loop (one
 * split over threads), and bad input. */
#include "test.h"

#include <omp.h>

#include "ref/linalg_nn_ref.h"

#define N_(a) ((int64_t)(sizeof(a) / sizeof((a)[0])))
#define SHAPE(...) ((const int64_t[]){__VA_ARGS__})

/* A tensor of dtype dt from float64 values. */
static oar_tensor *mk(const double *v, oar_dtype dt, int ndim, const int64_t *shape) {
    oar_tensor *t = oar_tensor_from_data(v, OAR_F64, ndim, shape);
    return oar_cast(t, dt);
}

/* A complex tensor from real and imaginary parts. */
static oar_tensor *mkc(const double *re, const double *im, int64_t n, oar_dtype dt, int ndim,
                       const int64_t *shape) {
    double *buf = malloc((size_t)n * 2 * sizeof(double));
    for (int64_t i = 0; i < n; i++) buf[2 * i] = re[i], buf[2 * i + 1] = im[i];
    oar_tensor *t = oar_tensor_from_data(buf, OAR_C128, ndim, shape);
    free(buf);
    return oar_cast(t, dt);
}

/* Imaginary parts of a complex tensor, as doubles (malloc'd). */
static double *imag_values(oar_tensor *t) {
    oar_pool *p = oar_pool_push();
    double *v = test_values(oar_imag(t));
    oar_pool_pop(p);
    return v;
}

static void test_matmul_shapes(void) {
    oar_pool *p = oar_pool_push();
    oar_dtype dts[2] = {OAR_F32, OAR_F64};
    for (int i = 0; i < 2; i++) {
        oar_dtype dt = dts[i];
        double tol = dt == OAR_F32 ? 1e-5 : 1e-12;
        oar_tensor *a = mk(mm_a34, dt, 2, SHAPE(3, 4)), *b = mk(mm_b45, dt, 2, SHAPE(4, 5));
        oar_tensor *v = mk(mm_v4, dt, 1, SHAPE(4)), *w = mk(mm_w4, dt, 1, SHAPE(4));
        oar_tensor *r = oar_matmul(a, b);
        CHECK(r && oar_tensor_ndim(r) == 2 && oar_tensor_shape(r)[1] == 5 &&
              oar_tensor_dtype(r) == dt);
        CHECK_VALUES(r, mm_ab, N_(mm_ab), tol);
        r = oar_matmul(a, v); /* [3] */
        CHECK(r && oar_tensor_ndim(r) == 1);
        CHECK_VALUES(r, mm_av, 3, tol);
        r = oar_matmul(v, b); /* [5] */
        CHECK(r && oar_tensor_ndim(r) == 1);
        CHECK_VALUES(r, mm_vb, 5, tol);
        r = oar_matmul(v, w); /* [] */
        CHECK(r && oar_tensor_ndim(r) == 0);
        CHECK_VALUES(r, mm_vw, 1, tol);
        CHECK_VALUES(oar_dot(v, w), mm_vw, 1, tol);
        r = oar_outer(v, w);
        CHECK(r && oar_tensor_ndim(r) == 2 && oar_tensor_shape(r)[0] == 4);
        CHECK_VALUES(r, mm_outer, 16, tol);
        /* batched with broadcast batch dims: [2,1,3,4] @ [3,4,2] -> [2,3,3,2] */
        r = oar_matmul(mk(mm_a2134, dt, 4, SHAPE(2, 1, 3, 4)), mk(mm_b342, dt, 3, SHAPE(3, 4, 2)));
        CHECK(r && oar_tensor_ndim(r) == 4 && oar_tensor_shape(r)[1] == 3 &&
              oar_tensor_shape(r)[3] == 2);
        CHECK_VALUES(r, mm_bcast, N_(mm_bcast), tol);
        /* 1-D against batched */
        oar_tensor *b243 = mk(mm_b243, dt, 3, SHAPE(2, 4, 3)),
                   *a234 = mk(mm_a234, dt, 3, SHAPE(2, 3, 4));
        r = oar_matmul(v, b243);
        CHECK(r && oar_tensor_ndim(r) == 2 && oar_tensor_shape(r)[1] == 3);
        CHECK_VALUES(r, mm_vB, 6, tol);
        r = oar_matmul(a234, v);
        CHECK(r && oar_tensor_ndim(r) == 2 && oar_tensor_shape(r)[1] == 3);
        CHECK_VALUES(r, mm_Av, 6, tol);
        /* batched @ 2-D (the folded path) and bmm */
        CHECK_VALUES(oar_matmul(a234, b), mm_fold, N_(mm_fold), tol);
        CHECK_VALUES(oar_matmul(a234, oar_reshape(b, 3, SHAPE(1, 4, 5))), mm_fold, N_(mm_fold),
                     tol);
        /* batches that are not one block of rows (every other matrix) */
        oar_tensor *a2x =
            oar_reshape(oar_contiguous(oar_expand(oar_unsqueeze(a234, 1), 4, SHAPE(2, 2, 3, 4))), 3,
                        SHAPE(4, 3, 4));
        oar_tensor *every2 = oar_slice(a2x, 0, 0, 4, 2);
        CHECK(every2 && oar_tensor_shape(every2)[0] == 2 && !oar_tensor_is_contiguous(every2));
        CHECK_VALUES(oar_matmul(every2, b), mm_fold, N_(mm_fold), tol);
        oar_tensor *b254 = mk(mm_b254, dt, 3, SHAPE(2, 5, 4));
        oar_tensor *bt = oar_transpose(b254, 1, 2); /* [2,4,5], column-major matrices */
        CHECK(bt && !oar_tensor_is_contiguous(bt));
        CHECK_VALUES(oar_matmul(a234, bt), mm_bt, N_(mm_bt), tol);
        CHECK_VALUES(oar_bmm(a234, bt), mm_bt, N_(mm_bt), tol);
        /* transposed (column-major) and sliced (copied) left operands */
        oar_tensor *at = oar_transpose(mk(mm_at43, dt, 2, SHAPE(4, 3)), 0, 1);
        CHECK(at && !oar_tensor_is_contiguous(at));
        CHECK_VALUES(oar_matmul(at, b), mm_atb, N_(mm_atb), tol);
        oar_tensor *as = oar_slice(mk(mm_a38, dt, 2, SHAPE(3, 8)), 1, 0, 8, 2);
        CHECK(as && oar_tensor_shape(as)[1] == 4 && !oar_tensor_is_contiguous(as));
        CHECK_VALUES(oar_matmul(as, b), mm_sliceb, N_(mm_sliceb), tol);
        /* the transposed operand on the right too: (B^T)^T = B */
        CHECK_VALUES(oar_matmul(a, oar_transpose(oar_transpose(b, 0, 1), 0, 1)), mm_ab, 15, tol);
        CHECK_VALUES(oar_matmul(a, oar_contiguous(oar_transpose(oar_transpose(b, 0, 1), 0, 1))),
                     mm_ab, 15, tol);
        /* a strided vector (a column of a matrix) */
        oar_tensor *col = oar_squeeze(
            oar_slice(oar_transpose(mk(mm_v4, dt, 2, SHAPE(1, 4)), 0, 1), 1, 0, 1, 1), 1);
        CHECK_VALUES(oar_matmul(a, col), mm_av, 3, tol);
        /* an expanded (stride 0) right operand */
        oar_tensor *ones4 = oar_expand(oar_ones(dt, 1, SHAPE(1)), 1, SHAPE(4));
        double rows[3];
        for (int r_ = 0; r_ < 3; r_++)
            rows[r_] =
                mm_a34[4 * r_] + mm_a34[4 * r_ + 1] + mm_a34[4 * r_ + 2] + mm_a34[4 * r_ + 3];
        CHECK_VALUES(oar_matmul(a, ones4), rows, 3, tol);
    }
    oar_pool_pop(p);
}

/* Matrix-vector products (the gemv paths) over row- and column-major
 * matrices and strided vectors, against loops over the same data. */
static void test_matmul_vectors(void) {
    oar_pool *p = oar_pool_push();
    oar_dtype dts[4] = {OAR_F32, OAR_F64, OAR_C64, OAR_C128};
    for (int i = 0; i < 4; i++) {
        oar_dtype dt = dts[i];
        double tol = dt == OAR_F32 || dt == OAR_C64 ? 1e-5 : 1e-12;
        /* x: row 0 of mm_a38 at stride 2 */
        oar_tensor *x = oar_squeeze(
            oar_slice(oar_slice(mk(mm_a38, dt, 2, SHAPE(3, 8)), 1, 0, 8, 2), 0, 0, 1, 1), 0);
        CHECK(x && oar_tensor_ndim(x) == 1 && oar_tensor_strides(x)[0] == 2);
        double xv[4] = {mm_a38[0], mm_a38[2], mm_a38[4], mm_a38[6]};
        /* A [3,4] row-major and column-major (mm_at43^T) times x */
        double want_a[3] = {0}, want_t[3] = {0};
        for (int r = 0; r < 3; r++)
            for (int q = 0; q < 4; q++) {
                want_a[r] += mm_a34[r * 4 + q] * xv[q];
                want_t[r] += mm_at43[q * 3 + r] * xv[q];
            }
        CHECK_VALUES(oar_matmul(mk(mm_a34, dt, 2, SHAPE(3, 4)), x), want_a, 3, tol);
        oar_tensor *at = oar_transpose(mk(mm_at43, dt, 2, SHAPE(4, 3)), 0, 1);
        CHECK_VALUES(oar_matmul(at, x), want_t, 3, tol);
        /* x times B [4,5] row-major and column-major (mm_b254[0]^T) */
        double want_b[5] = {0}, want_bt[5] = {0};
        for (int c = 0; c < 5; c++)
            for (int q = 0; q < 4; q++) {
                want_b[c] += xv[q] * mm_b45[q * 5 + c];
                want_bt[c] += xv[q] * mm_b254[c * 4 + q];
            }
        CHECK_VALUES(oar_matmul(x, mk(mm_b45, dt, 2, SHAPE(4, 5))), want_b, 5, tol);
        oar_tensor *bt = oar_transpose(mk(mm_b254, dt, 3, SHAPE(2, 5, 4)), 1, 2); /* [2,4,5] */
        oar_tensor *r = oar_matmul(x, bt);
        CHECK(r && oar_tensor_ndim(r) == 2);
        CHECK_VALUES(oar_slice(r, 0, 0, 1, 1), want_bt, 5, tol);
        /* [1, k] and [k, 1] matrices */
        CHECK_VALUES(oar_matmul(oar_unsqueeze(x, 0), mk(mm_b45, dt, 2, SHAPE(4, 5))), want_b, 5,
                     tol);
        CHECK_VALUES(oar_matmul(mk(mm_a34, dt, 2, SHAPE(3, 4)), oar_unsqueeze(x, 1)), want_a, 3,
                     tol);
        double dot = 0;
        for (int q = 0; q < 4; q++) dot += xv[q] * mm_v4[q];
        CHECK_VALUES(oar_dot(x, mk(mm_v4, dt, 1, SHAPE(4))), &dot, 1, tol);
        CHECK_VALUES(oar_matmul(oar_unsqueeze(x, 0), oar_unsqueeze(mk(mm_v4, dt, 1, SHAPE(4)), 1)),
                     &dot, 1, tol);
    }
    oar_pool_pop(p);
}

static void test_matmul_dtypes(void) {
    oar_pool *p = oar_pool_push();
    /* complex */
    oar_dtype cd[2] = {OAR_C64, OAR_C128};
    for (int i = 0; i < 2; i++) {
        double tol = i == 0 ? 1e-5 : 1e-12;
        oar_tensor *a = mkc(mm_ac_re, mm_ac_im, 6, cd[i], 2, SHAPE(2, 3));
        oar_tensor *b = mkc(mm_bc_re, mm_bc_im, 6, cd[i], 2, SHAPE(3, 2));
        oar_tensor *r = oar_matmul(a, b);
        CHECK(r && oar_tensor_dtype(r) == cd[i]);
        CHECK_CVALUES(r, mm_c_re, mm_c_im, 4, tol);
        /* a transposed complex operand: (B^T)^T */
        oar_tensor *bt = oar_transpose(oar_contiguous(oar_transpose(b, 0, 1)), 0, 1);
        CHECK_CVALUES(oar_matmul(a, bt), mm_c_re, mm_c_im, 4, tol);
    }
    /* integers */
    oar_dtype idt[2] = {OAR_I64, OAR_I32};
    for (int i = 0; i < 2; i++) {
        oar_tensor *r =
            oar_matmul(mk(mm_ai, idt[i], 2, SHAPE(3, 4)), mk(mm_bi, idt[i], 2, SHAPE(4, 2)));
        CHECK(r && oar_tensor_dtype(r) == idt[i]);
        CHECK_VALUES(r, mm_i, 6, 0);
        oar_tensor *at = oar_transpose(
            oar_contiguous(oar_transpose(mk(mm_ai, idt[i], 2, SHAPE(3, 4)), 0, 1)), 0, 1);
        CHECK_VALUES(oar_matmul(at, mk(mm_bi, idt[i], 2, SHAPE(4, 2))), mm_i, 6, 0);
    }
    /* f16 / bf16 through the f32 kernel; mixed dtypes promote */
    oar_tensor *h =
        oar_matmul(mk(mm_a34, OAR_F16, 2, SHAPE(3, 4)), mk(mm_b45, OAR_F16, 2, SHAPE(4, 5)));
    CHECK(h && oar_tensor_dtype(h) == OAR_F16);
    CHECK_VALUES(h, mm_ab, 15, 1e-2);
    oar_tensor *bf =
        oar_matmul(mk(mm_a34, OAR_BF16, 2, SHAPE(3, 4)), mk(mm_b45, OAR_BF16, 2, SHAPE(4, 5)));
    CHECK(bf && oar_tensor_dtype(bf) == OAR_BF16);
    CHECK_VALUES(bf, mm_ab, 15, 3e-2);
    oar_tensor *mixed =
        oar_matmul(mk(mm_a34, OAR_F32, 2, SHAPE(3, 4)), mk(mm_b45, OAR_F64, 2, SHAPE(4, 5)));
    CHECK(mixed && oar_tensor_dtype(mixed) == OAR_F64);
    CHECK_VALUES(mixed, mm_ab, 15, 1e-6);
    oar_pool_pop(p);
}

static void test_matmul_empty_and_large(void) {
    oar_pool *p = oar_pool_push();
    /* k = 0 gives zeros; n = 0 gives an empty result */
    oar_tensor *r =
        oar_matmul(oar_ones(OAR_F32, 2, SHAPE(2, 0)), oar_ones(OAR_F32, 2, SHAPE(0, 3)));
    CHECK(r && oar_tensor_numel(r) == 6);
    CHECK_VALUES(r, ((double[]){0, 0, 0, 0, 0, 0}), 6, 0);
    r = oar_matmul(oar_ones(OAR_I64, 2, SHAPE(2, 0)), oar_ones(OAR_I64, 2, SHAPE(0, 1)));
    CHECK_VALUES(r, ((double[]){0, 0}), 2, 0);
    r = oar_matmul(oar_ones(OAR_F64, 3, SHAPE(0, 2, 3)), oar_ones(OAR_F64, 2, SHAPE(3, 4)));
    CHECK(r && oar_tensor_numel(r) == 0 && oar_tensor_ndim(r) == 3 && oar_tensor_shape(r)[2] == 4);
    /* a larger batched product (threads, BLAS blocking) against a naive loop */
    enum { B = 3, n = 37, k = 70, m = 45 };
    oar_manual_seed(7);
    oar_tensor *a = oar_randn(OAR_F64, 3, SHAPE(B, n, k)),
               *b = oar_randn(OAR_F64, 3, SHAPE(B, m, k));
    oar_tensor *bt = oar_transpose(b, 1, 2);
    double *av = test_values(a), *bv = test_values(b);
    double *want = malloc(sizeof(double) * B * n * m);
    for (int s = 0; s < B; s++)
        for (int i = 0; i < n; i++)
            for (int j = 0; j < m; j++) {
                double acc = 0;
                for (int q = 0; q < k; q++)
                    acc += av[(s * n + i) * k + q] * bv[(s * m + j) * k + q];
                want[(s * n + i) * m + j] = acc;
            }
    CHECK_VALUES(oar_matmul(a, bt), want, B * n * m, 1e-12);
    CHECK_VALUES(oar_matmul(oar_cast(a, OAR_F32), oar_cast(bt, OAR_F32)), want, B * n * m, 1e-4);
    CHECK_VALUES(oar_matmul(oar_cast(a, OAR_C128), oar_cast(bt, OAR_C128)), want, B * n * m, 1e-12);
    free(av);
    free(bv);
    free(want);
    oar_pool_pop(p);
}

/* A product of at least 2^23 multiply-adds on several threads is split
 * into blocks of C's rows (n >= m) or columns, one BLAS call each
 * (cpu_linalg.c): every dtype and transposition, on 2 and 3 threads (an
 * uneven split), against the naive sum in double. Complex values with
 * both parts nonzero: (1 + 2i) x. */
static void split_product(int n, int m, int k, bool ta, bool tb) {
    oar_pool *p = oar_pool_push();
    oar_tensor *a = oar_randn(OAR_F64, 2, ta ? SHAPE(k, n) : SHAPE(n, k));
    oar_tensor *b = oar_randn(OAR_F64, 2, tb ? SHAPE(m, k) : SHAPE(k, m));
    double *av = test_values(a), *bv = test_values(b), *want = malloc(sizeof(double) * (size_t)n * m);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < m; j++) {
            double acc = 0;
            for (int q = 0; q < k; q++)
                acc += av[ta ? q * n + i : i * k + q] * bv[tb ? j * k + q : q * m + j];
            want[i * m + j] = acc;
        }
    oar_tensor *ao = ta ? oar_transpose(a, 0, 1) : a, *bo = tb ? oar_transpose(b, 0, 1) : b;
    for (int threads = 2; threads <= 3; threads++) {
        omp_set_num_threads(threads);
        CHECK_VALUES(oar_matmul(ao, bo), want, (int64_t)n * m, 1e-11);
        CHECK_VALUES(oar_matmul(oar_cast(ao, OAR_F32), oar_cast(bo, OAR_F32)), want, (int64_t)n * m, 1e-3);
        oar_tensor *c = oar_matmul(oar_mul(oar_cast(ao, OAR_C128), oar_complex(oar_cast(oar_scalar(1), OAR_F64), oar_cast(oar_scalar(2), OAR_F64))),
                                   oar_cast(bo, OAR_C128));
        double *re = test_values(oar_real(c)), *im = imag_values(c), worst = 0;
        for (int64_t i = 0; re && im && i < (int64_t)n * m; i++) {
            double e = fabs(re[i] - want[i]) + fabs(im[i] - 2 * want[i]);
            worst = e > worst ? e : worst;
        }
        CHECK(re && im && worst < 1e-10);
        free(re);
        free(im);
        CHECK_VALUES(oar_real(oar_matmul(oar_cast(ao, OAR_C64), oar_cast(bo, OAR_C64))), want, (int64_t)n * m, 1e-3);
    }
    omp_set_num_threads(1);
    free(av);
    free(bv);
    free(want);
    oar_pool_pop(p);
}

static void test_matmul_split(void) {
    int threads = omp_get_max_threads();
    oar_manual_seed(11);
    split_product(203, 161, 257, false, false); /* rows: 8.4M multiply-adds */
    split_product(203, 161, 257, true, true);
    split_product(64, 515, 256, false, true); /* columns */
    split_product(64, 515, 256, true, false);
    omp_set_num_threads(threads);
}

static void test_einsum(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *ea = mk(es_a, OAR_F64, 3, SHAPE(2, 2, 3)),
               *eb = mk(es_b, OAR_F64, 3, SHAPE(2, 3, 2));
    oar_tensor *a = mk(mm_a34, OAR_F64, 2, SHAPE(3, 4)), *b = mk(mm_b45, OAR_F64, 2, SHAPE(4, 5));
    oar_tensor *s = mk(es_s, OAR_F64, 2, SHAPE(3, 3));
    oar_tensor *v = mk(mm_v4, OAR_F64, 1, SHAPE(4)), *w = mk(mm_w4, OAR_F64, 1, SHAPE(4));
    const double tol = 1e-12;
    CHECK_VALUES(oar_einsum("bij,bjk->bik", 2, (oar_tensor *[]){ea, eb}), es_bmm, 8, tol);
    CHECK_VALUES(oar_einsum("ii->i", 1, &s), es_diag, 3, tol);
    oar_tensor *tr = oar_einsum("ii->", 1, &s);
    CHECK(tr && oar_tensor_ndim(tr) == 0);
    CHECK_VALUES(tr, es_trace, 1, tol);
    oar_tensor *t = oar_einsum("ij->ji", 1, &a);
    CHECK(t && oar_tensor_shape(t)[0] == 4);
    CHECK_VALUES(t, es_t, 12, tol);
    CHECK_VALUES(oar_einsum("ij->i", 1, &a), es_rowsum, 3, tol);
    CHECK_VALUES(oar_einsum("bij->", 1, &ea), es_all, 1, tol);
    CHECK_VALUES(oar_einsum("ij,ij->", 2, (oar_tensor *[]){a, a}), es_inner, 1, tol);
    CHECK_VALUES(oar_einsum("i,j->ij", 2, (oar_tensor *[]){v, w}), es_outer, 16, tol);
    CHECK_VALUES(oar_einsum(" ij , jk , kl -> il ", 3,
                            (oar_tensor *[]){a, b, mk(es_c56, OAR_F64, 2, SHAPE(5, 6))}),
                 es_chain, 18, 1e-11);
    oar_tensor *imp = oar_einsum("ij,jk", 2, (oar_tensor *[]){a, b});
    CHECK(imp && oar_tensor_shape(imp)[0] == 3 && oar_tensor_shape(imp)[1] == 5);
    CHECK_VALUES(imp, es_implicit, 15, tol);
    oar_tensor *ell =
        oar_einsum("...ij,jk->...ik", 2, (oar_tensor *[]){ea, mk(es_b32, OAR_F64, 2, SHAPE(3, 2))});
    CHECK(ell && oar_tensor_ndim(ell) == 3);
    CHECK_VALUES(ell, es_ell, 8, tol);
    oar_tensor *q = mk(es_q, OAR_F64, 4, SHAPE(1, 2, 3, 4)),
               *k = mk(es_k, OAR_F64, 4, SHAPE(1, 2, 5, 4));
    oar_tensor *at = oar_einsum("bhqd,bhkd->bhqk", 2, (oar_tensor *[]){q, k});
    CHECK(at && oar_tensor_ndim(at) == 4 && oar_tensor_shape(at)[3] == 5);
    CHECK_VALUES(at, es_attn, 30, tol);
    /* ellipses of different ranks broadcast; dropped from the output they are summed */
    oar_tensor *xa = mk(es_ea, OAR_F64, 4, SHAPE(2, 1, 2, 3)),
               *xb = mk(es_eb, OAR_F64, 3, SHAPE(3, 3, 2));
    oar_tensor *e2 = oar_einsum("...ij,...jk->...ik", 2, (oar_tensor *[]){xa, xb});
    CHECK(e2 && oar_tensor_ndim(e2) == 4 && oar_tensor_shape(e2)[0] == 2 &&
          oar_tensor_shape(e2)[1] == 3);
    CHECK_VALUES(e2, es_ell2, 24, tol);
    CHECK_VALUES(oar_einsum("...ij,...jk", 2, (oar_tensor *[]){xa, xb}), es_ell2, 24, tol);
    CHECK_VALUES(oar_einsum("...ij,...jk->ik", 2, (oar_tensor *[]){xa, xb}), es_ell_sum, 4, tol);
    oar_tensor *ib = oar_einsum("bij,bjk", 2, (oar_tensor *[]){ea, eb});
    CHECK(ib && oar_tensor_ndim(ib) == 2);
    CHECK_VALUES(ib, es_imp_b, 4, tol);
    /* a size-1 dim broadcasts */
    CHECK_VALUES(oar_einsum("ij,j->ij", 2, (oar_tensor *[]){a, oar_full(OAR_F64, 1, SHAPE(1), 2)}),
                 es_bcast, 12, tol);
    /* f32 and a non-contiguous operand */
    oar_tensor *af = oar_cast(a, OAR_F32);
    CHECK_VALUES(oar_einsum("ji->ij", 1, (oar_tensor *[]){oar_transpose(af, 0, 1)}), mm_a34, 12,
                 1e-6);
    CHECK_VALUES(
        oar_einsum("ij,jk->ik", 2,
                   (oar_tensor *[]){oar_transpose(mk(mm_at43, OAR_F32, 2, SHAPE(4, 3)), 0, 1),
                                    oar_cast(b, OAR_F32)}),
        mm_atb, 15, 1e-5);
    oar_pool_pop(p);
}

/* ---- gradients against central differences (float64) ------------------------ */

typedef oar_tensor *(*grad_fn)(oar_tensor *const *xs, void *ctx);

/* The largest |analytic - numeric| gradient of sum(f(xs) * R) over every
 * element of every input (xs: contiguous f64 leaves), or INFINITY when the
 * gradient or the double-backward graph cannot be built. */
static double grad_error(grad_fn f, void *ctx, int n, oar_tensor *const *xs) {
    oar_pool *pool = oar_pool_push();
    double err = INFINITY;
    oar_tensor *y = f(xs, ctx);
    oar_tensor *r = y ? oar_randn(OAR_F64, oar_tensor_ndim(y), oar_tensor_shape(y)) : NULL;
    oar_tensor *grads[4] = {0};
    for (int i = 0; i < n; i++) oar_tensor_set_requires_grad(xs[i], true);
    oar_tensor *loss = r ? oar_sum(oar_mul(f(xs, ctx), r), 0, NULL, false) : NULL;
    if (loss && !oar_grad(1, &loss, NULL, n, xs, true, false, grads)) {
        /* second order: the gradients are differentiable again */
        oar_tensor *l2 = oar_sum(oar_mul(grads[0], grads[0]), 0, NULL, false), *g2[4];
        if (!oar_grad(1, &l2, NULL, n, xs, false, true, g2)) err = 0;
    }
    for (int i = 0; i < n && err == 0; i++) {
        int64_t m = oar_tensor_numel(xs[i]);
        double *d = oar_tensor_data(xs[i]), *g = test_values(grads[i]);
        for (int64_t j = 0; j < m && g; j++) {
            double keep = d[j], h = 1e-6, lp, lm;
            oar_no_grad_push();
            d[j] = keep + h;
            lp = oar_tensor_item(oar_sum(oar_mul(f(xs, ctx), r), 0, NULL, false));
            d[j] = keep - h;
            lm = oar_tensor_item(oar_sum(oar_mul(f(xs, ctx), r), 0, NULL, false));
            oar_no_grad_pop();
            d[j] = keep;
            double e = fabs((lp - lm) / (2 * h) - g[j]);
            if (!(e <= err)) err = e;
        }
        if (!g) err = INFINITY;
        free(g);
    }
    for (int i = 0; i < n; i++) oar_tensor_set_requires_grad(xs[i], false);
    oar_pool_pop(pool);
    return err;
}

static oar_tensor *f_matmul(oar_tensor *const *xs, void *ctx) {
    (void)ctx;
    return oar_matmul(xs[0], xs[1]);
}

static oar_tensor *f_einsum(oar_tensor *const *xs, void *ctx) {
    return oar_einsum((const char *)ctx, 2, xs);
}

static void test_gradients(void) {
    oar_pool *p = oar_pool_push();
    oar_manual_seed(11);
    const int64_t shapes[][2][5] = {
        /* {ndim, dims...} for a, then b */
        {{2, 3, 4}, {2, 4, 2}},       {{1, 4}, {1, 4}},          {{1, 4}, {3, 2, 4, 3}},
        {{3, 2, 3, 4}, {1, 4}},       {{4, 2, 1, 3, 4}, {3, 3, 4, 2}}, {{3, 2, 3, 4}, {2, 4, 2}},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        oar_tensor *xs[2] = {oar_randn(OAR_F64, (int)shapes[i][0][0], &shapes[i][0][1]),
                             oar_randn(OAR_F64, (int)shapes[i][1][0], &shapes[i][1][1])};
        double e = grad_error(f_matmul, NULL, 2, xs);
        CHECK(e < 1e-7);
        if (!(e < 1e-7)) fprintf(stderr, "  matmul gradient case %zu: error %g\n", i, e);
    }
    oar_tensor *xs[2] = {oar_randn(OAR_F64, 3, SHAPE(2, 3, 4)), oar_randn(OAR_F64, 2, SHAPE(4, 3))};
    CHECK(grad_error(f_einsum, "bij,jk->bki", 2, xs) < 1e-7);
    oar_tensor *ys[2] = {oar_randn(OAR_F64, 2, SHAPE(3, 3)), oar_randn(OAR_F64, 1, SHAPE(3))};
    CHECK(grad_error(f_einsum, "ii,i->i", 2, ys) < 1e-7);
    oar_pool_pop(p);
}

static void test_bad_input(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *a = oar_ones(OAR_F32, 2, SHAPE(2, 3)), *b = oar_ones(OAR_F32, 2, SHAPE(4, 5));
    CHECK_FAILS(oar_matmul(a, b), "cannot multiply");
    CHECK_FAILS(oar_matmul(a, b), "[2, 3]");
    CHECK_FAILS(oar_matmul(a, b), "[4, 5]");
    CHECK_FAILS(oar_matmul(oar_ones(OAR_F32, 1, SHAPE(3)), oar_ones(OAR_F32, 1, SHAPE(4))),
                "cannot multiply");
    CHECK_FAILS(
        oar_matmul(oar_ones(OAR_F32, 3, SHAPE(2, 2, 3)), oar_ones(OAR_F32, 3, SHAPE(3, 3, 2))),
        "do not broadcast");
    CHECK_FAILS(oar_matmul(oar_scalar_of(1, OAR_F32), a), "at least 1 dimension");
    CHECK_FAILS(oar_matmul(oar_ones(OAR_BOOL, 2, SHAPE(2, 2)), oar_ones(OAR_BOOL, 2, SHAPE(2, 2))),
                "bool");
    CHECK_FAILS(oar_matmul(NULL, a), "NULL");
    CHECK_FAILS(oar_bmm(a, a), "bmm");
    CHECK_FAILS(oar_bmm(oar_ones(OAR_F32, 3, SHAPE(2, 2, 3)), oar_ones(OAR_F32, 3, SHAPE(3, 3, 2))),
                "same B");
    CHECK_FAILS(oar_dot(a, a), "1-D");
    CHECK_FAILS(oar_dot(oar_ones(OAR_F32, 1, SHAPE(3)), oar_ones(OAR_F32, 1, SHAPE(2))),
                "one length");
    CHECK_FAILS(oar_outer(a, a), "1-D");
    CHECK_FAILS(oar_einsum("ij,jk->ik", 1, &a), "more terms");
    CHECK_FAILS(oar_einsum("ij->ij", 2, (oar_tensor *[]){a, a}), "fewer terms");
    CHECK_FAILS(oar_einsum("ij->ik", 1, &a), "appears in no input");
    CHECK_FAILS(oar_einsum("ij->ii", 1, &a), "repeated");
    CHECK_FAILS(oar_einsum("i1->i", 1, &a), "invalid character");
    CHECK_FAILS(oar_einsum("ijk->i", 1, &a), "subscripts");
    CHECK_FAILS(oar_einsum("i..j->i", 1, &a), "ellipsis");
    CHECK_FAILS(oar_einsum("ij,jk->ik", 2, (oar_tensor *[]){a, b}), "do not broadcast");
    CHECK_FAILS(oar_einsum("ii->i", 1, &a), "sizes 2 and 3");
    CHECK_FAILS(oar_einsum("ii->i", 1, (oar_tensor *[]){oar_ones(OAR_F32, 2, SHAPE(3, 1))}),
                "repeated subscript");
    CHECK_FAILS(oar_einsum(NULL, 1, &a), "NULL");
    CHECK_FAILS(oar_einsum("ij,jk->ik", 2, (oar_tensor *[]){a, NULL}), "NULL");
    CHECK_FAILS(oar_einsum("ij->ij", 0, NULL), "operands");
    /* a NULL input keeps the first error */
    oar_clear_error();
    CHECK(oar_matmul(oar_matmul(a, b), a) == NULL && strstr(oar_last_error(), "cannot multiply"));
    oar_pool_pop(p);
}

int main(void) {
    RUN(test_matmul_shapes);
    RUN(test_matmul_vectors);
    RUN(test_matmul_dtypes);
    RUN(test_matmul_empty_and_large);
    RUN(test_matmul_split);
    RUN(test_einsum);
    RUN(test_gradients);
    RUN(test_bad_input);
    return test_summary();
}

/* The gradcheck table: at least one case for every differentiable op of
 * the registry (src/ops/defs/), used by test_gradcheck_ops.c (which
 * runs them) and test_ops_doc.c (which lists them in docs/ops.md). Each
 * case calls the op through its public function (or oari_call for the
 * internal backward ops) on f64/c128 inputs; gradcheck adds strided
 * (non-contiguous) layouts, and shapes like [3, 1] with [4] broadcast.
 * Every differentiable row of the elementwise table without attributes
 * has a case made from the row (ew_row_case, below); the explicit cases
 * here add the rest (complex inputs, attributes, other shapes). */
#ifndef OAR_GRADCHECK_CASES_H
#define OAR_GRADCHECK_CASES_H

#include "gradcheck.h"
#include "ops/op.h"
#include <oar/custom.h>

typedef struct op_case {
    const char *op;     /* registry name */
    const char *label;  /* what the case exercises */
    gc_fn fn;
    int n;
    gc_input in[4];
    gc_opts o;
} op_case;

#define FN(name, expr)                                                  \
    static oar_tensor *name(void *c, int n, oar_tensor *const *x) {     \
        (void)c; (void)n; (void)x;                                      \
        return (expr);                                                  \
    }
#define SH1(a) .ndim = 1, .shape = {a}
#define SH2(a, b) .ndim = 2, .shape = {a, b}
#define SH3(a, b, c) .ndim = 3, .shape = {a, b, c}
#define SH4(a, b, c, d) .ndim = 4, .shape = {a, b, c, d}
#define SH5(a, b, c, d, e) .ndim = 5, .shape = {a, b, c, d, e}
#define C128 .dtype = OAR_C128
#define POS .lo = 0.5, .hi = 2.0
#define NOOPT {.eps = 0}
#define KINK0 {.kinks = {0}, .n_kinks = 1, .margin = 0.05}
#define INTS {.kinks = {-2, -1, 0, 1, 2}, .n_kinks = 5, .margin = 0.01}
#define HALVES {.kinks = {-1.5, -0.5, 0.5, 1.5}, .n_kinks = 4, .margin = 0.01}

static oar_tensor *gc_call(oari_op op, int n, oar_tensor *const *in, oari_attrs a) {
    return oari_call(op, n, in, &a);
}

/* unary */
FN(f_neg, oar_neg(x[0])) FN(f_abs, oar_abs(x[0])) FN(f_exp, oar_exp(x[0])) FN(f_log, oar_log(x[0]))
FN(f_sqrt, oar_sqrt(x[0])) FN(f_rsqrt, oar_rsqrt(x[0])) FN(f_square, oar_square(x[0]))
FN(f_reciprocal, oar_reciprocal(x[0])) FN(f_sin, oar_sin(x[0])) FN(f_cos, oar_cos(x[0]))
FN(f_tanh, oar_tanh(x[0])) FN(f_sigmoid, oar_sigmoid(x[0]))
FN(f_leaky_relu, oar_leaky_relu(x[0], 0.1)) FN(f_elu, oar_elu(x[0], 1.3))
FN(f_gelu, oar_gelu(x[0], false)) FN(f_gelu_tanh, oar_gelu(x[0], true))
FN(f_softplus, oar_softplus(x[0], 1.5, 20)) FN(f_softplus_thr, oar_softplus(x[0], 1.0, 1.0))
FN(f_clamp, oar_clamp(x[0], -1, 1)) FN(f_clamp_min, oar_clamp(x[0], -0.5, NAN))
FN(f_real, oar_real(x[0])) FN(f_conj, oar_conj(x[0])) FN(f_angle, oar_angle(x[0]))
/* binary */
FN(f_add, oar_add(x[0], x[1])) FN(f_sub, oar_sub(x[0], x[1])) FN(f_mul, oar_mul(x[0], x[1]))
FN(f_div, oar_div(x[0], x[1])) FN(f_pow, oar_pow(x[0], x[1]))
FN(f_where, oar_where(x[0], x[1], x[2]))
/* misc */
FN(f_cast_c, oar_cast(x[0], OAR_C128))
FN(f_cast_f32, oar_cast(oar_cast(x[0], OAR_F32), OAR_F64))
FN(f_clone, oar_clone(x[0]))
/* reductions */
static const int64_t dim1[1] = {1}, dim0[1] = {0}, dims02[2] = {0, 2};
FN(f_sum_all, oar_sum(x[0], 0, NULL, false)) FN(f_sum_1, oar_sum(x[0], 1, dim1, true))
FN(f_sum_02, oar_sum(x[0], 2, dims02, false))
FN(f_prod_1, oar_prod(x[0], 1, dim1, false)) FN(f_prod_all, oar_prod(x[0], 0, NULL, false))
FN(f_amax_1, oar_amax(x[0], 1, dim1, false)) FN(f_amin_0, oar_amin(x[0], 1, dim0, true))
FN(f_cumsum, oar_cumsum(x[0], 1)) FN(f_cumprod, oar_cumprod(x[0], 1))
/* movement */
static const int64_t sh43[2] = {4, 3}, perm10[2] = {1, 0}, perm201[3] = {2, 0, 1},
                     sh234[3] = {2, 3, 4}, roll_s[2] = {1, -2}, roll_d[2] = {1, 0};
static const int64_t pads1[2] = {1, 2}, pads2[4] = {1, 1, 2, 0};
FN(f_view, oar_reshape(x[0], 2, sh43)) FN(f_permute, oar_permute(x[0], perm10))
FN(f_permute3, oar_permute(x[0], perm201))
FN(f_expand, oar_expand(x[0], 3, sh234)) FN(f_slice, oar_slice(x[0], 1, 1, 4, 2))
FN(f_slice0, oar_slice(x[0], 0, -2, 3, 1))
FN(f_diagonal, oar_diagonal(x[0], 0, 0, 1)) FN(f_diagonal1, oar_diagonal(x[0], 1, 1, 0))
FN(f_concat, oar_concat(2, x, 0)) FN(f_concat1, oar_concat(2, x, 1))
FN(f_pad_c, oar_pad(x[0], 4, pads2, OAR_PAD_CONSTANT, 0.5))
FN(f_pad_r, oar_pad(x[0], 2, pads1, OAR_PAD_REFLECT, 0))
FN(f_pad_e, oar_pad(x[0], 4, pads2, OAR_PAD_REPLICATE, 0))
FN(f_flip, oar_flip(x[0], 1, dim1)) FN(f_roll, oar_roll(x[0], 2, roll_s, roll_d))
FN(f_tril, oar_tril(x[0], 0)) FN(f_triu, oar_triu(x[0], 1))
FN(f_slice_bw, gc_call(OARI_OP_slice_backward, 1, x, (oari_attrs){.ni = 6, .i = {1, 1, 4, 2, 3, 4}}))
FN(f_diag_bw, gc_call(OARI_OP_diagonal_backward, 1, x, (oari_attrs){.ni = 5, .i = {0, 0, 1, 3, 4}}))
FN(f_pad_bw, gc_call(OARI_OP_pad_backward, 1, x, (oari_attrs){.ni = 3, .i = {1, 1, 2}}))
FN(f_pad_bw_e, gc_call(OARI_OP_pad_backward, 1, x, (oari_attrs){.ni = 5, .i = {2, 1, 1, 2, 0}}))
/* indexing */
static const int64_t idx_g[6] = {3, 0, 1, 1, 2, 3};           /* [3, 2] into dim 1 of [3, 4] */
static const int64_t idx_s[6] = {3, 0, 1, 2, 2, 0};           /* distinct per row */
static const int64_t idx_sel[3] = {2, 0, 2};
static const int64_t idx_add[2] = {1, 0};
FN(f_gather, oar_gather(x[0], 1, x[1])) FN(f_scatter, oar_scatter(x[0], 1, x[1], x[2]))
FN(f_scatter_add, oar_scatter_add(x[0], 1, x[1], x[2]))
FN(f_index_select, oar_index_select(x[0], 0, x[1]))
FN(f_index_add, oar_index_add(x[0], 0, x[1], x[2]))
FN(f_sort, oar_sort(x[0], 1, false, NULL)) FN(f_sort_desc, oar_sort(x[0], 0, true, NULL))
FN(f_topk, oar_topk(x[0], 2, 1, true, true, NULL))
/* linalg, nn */
FN(f_matmul, oar_matmul(x[0], x[1]))
FN(f_matmul_wt, oar_matmul(x[0], oar_transpose(x[1], 0, 1))) /* a linear layer's x W^T */
FN(f_matmul_at, oar_matmul(oar_transpose(x[0], 0, 1), x[1]))
FN(f_softmax, oar_softmax(x[0], 1)) FN(f_log_softmax, oar_log_softmax(x[0], -1))
FN(f_layer_norm, oar_layer_norm(x[0], 1, x[1], x[2], 1e-5))
FN(f_layer_norm2, oar_layer_norm(x[0], 2, NULL, NULL, 1e-5))
FN(f_group_norm, oar_group_norm(x[0], 2, x[1], x[2], 1e-5))
FN(f_batch_norm, oar_batch_norm(x[0], NULL, NULL, x[1], x[2], true, 0.1, 1e-5))
FN(f_batch_norm_eval, oar_batch_norm(x[0], x[1], x[2], x[3], NULL, false, 0.1, 1e-5))
FN(f_batch_norm_nw, oar_batch_norm(x[0], NULL, NULL, NULL, x[1], true, 0.1, 1e-5))
/* batch_norm_backward's three outputs in one tensor: gx + 0.7 gw + 1.3 gb
 * (gw, gb broadcast per channel), with the mean taken from x (so its
 * gradient reaches x) and rstd an input of its own. */
static oar_tensor *bn_bw_all(oar_tensor *gy, oar_tensor *x, oar_tensor *rstd, oar_tensor *w) {
    int64_t dims[OAR_MAX_DIMS], cshape[OAR_MAX_DIMS];
    int nd = 0;
    for (int i = 0; i < x->ndim; i++) {
        cshape[i] = i == 1 ? x->shape[1] : 1;
        if (i != 1) dims[nd++] = i;
    }
    oar_tensor *in[5] = {gy, x, oar_mean(x, nd, dims, false), rstd, w}, *out[OARI_MAX_OUT] = {0};
    if (oari_dispatch(OARI_OP_batch_norm_backward, 5, in, NULL, out)) return NULL;
    for (int j = 0; j < 3; j++)
        oari_pool_adopt(out[j]);
    oar_tensor *gw = oar_reshape(out[1], x->ndim, cshape), *gb = oar_reshape(out[2], x->ndim, cshape);
    return oar_add(out[0], oar_add(oar_mul_scalar(gw, 0.7), oar_mul_scalar(gb, 1.3)));
}
FN(f_bn_bw, bn_bw_all(x[0], x[1], x[2], x[3]))
/* layer_norm_backward the same way over the last n dims: gx + 0.7 gw + 1.3 gb. */
static oar_tensor *ln_bw_all(oar_tensor *gy, oar_tensor *x, oar_tensor *rstd, oar_tensor *w, int n) {
    int64_t dims[OAR_MAX_DIMS];
    for (int i = 0; i < n; i++) dims[i] = x->ndim - n + i;
    oar_tensor *in[5] = {gy, x, oar_mean(x, n, dims, true), rstd, w}, *out[OARI_MAX_OUT] = {0};
    oari_attrs a = {.ni = 1, .i = {n}};
    if (oari_dispatch(OARI_OP_layer_norm_backward, 5, in, &a, out)) return NULL;
    for (int j = 0; j < 3; j++)
        oari_pool_adopt(out[j]);
    return oar_add(out[0], oar_add(oar_mul_scalar(out[1], 0.7), oar_mul_scalar(out[2], 1.3)));
}
FN(f_ln_bw, ln_bw_all(x[0], x[1], x[2], x[3], 1))
FN(f_ln_bw2, ln_bw_all(x[0], x[1], x[2], NULL, 2))
FN(f_bn_bw_nw, bn_bw_all(x[0], x[1], x[2], NULL))
static const int64_t one2[2] = {1, 1}, two2[2] = {2, 2}, zero2[2] = {0, 0};
FN(f_conv2d, oar_conv2d(x[0], x[1], x[2], one2, one2, one2, 1))
FN(f_conv2d_s, oar_conv2d(x[0], x[1], NULL, two2, zero2, two2, 2))
FN(f_conv1d, oar_conv1d(x[0], x[1], x[2], 2, 1, 1, 1))
FN(f_convt, oar_conv_transpose2d(x[0], x[1], x[2], two2, one2, one2, one2, 1))
FN(f_conv_wg, gc_call(OARI_OP_conv2d_weight_grad, 2, x,
                      (oari_attrs){.ni = 11, .i = {3, 2, 3, 3, 1, 1, 1, 1, 1, 1, 1}}))
static const int64_t one3[3] = {1, 1, 1}, s3[3] = {2, 1, 2}, d3[3] = {1, 2, 1}, p3[3] = {1, 0, 1};
FN(f_conv3d, oar_conv3d(x[0], x[1], x[2], s3, p3, d3, 1))
FN(f_conv3d_g, oar_conv3d(x[0], x[1], NULL, one3, one3, one3, 2))
FN(f_convt3d, oar_conv_transpose3d(x[0], x[1], x[2], s3, p3, (int64_t[]){1, 1, 0}, d3, 1))
FN(f_convt3d_g, oar_conv_transpose3d(x[0], x[1], NULL, (int64_t[]){2, 2, 1}, one3, one3,
                                     (int64_t[]){1, 1, 2}, 2))
FN(f_convt1d, oar_conv_transpose1d(x[0], x[1], x[2], 2, 1, 1, 1, 1))
FN(f_convt1d_op, oar_conv_transpose1d(x[0], x[1], NULL, 1, 0, 1, 2, 1)) /* output_padding 1 >= stride 1 */
FN(f_conv3d_wg, gc_call(OARI_OP_conv3d_weight_grad, 2, x,
                        (oari_attrs){.ni = 15, .i = {3, 2, 2, 2, 2, 2, 1, 1, 1, 0, 1, 1, 1, 1, 1}}))
FN(f_max_pool, oar_max_pool2d(x[0], two2, two2, zero2, one2, false, NULL))
FN(f_max_pool_p, oar_max_pool2d(x[0], two2, one2, one2, one2, true, NULL))
FN(f_avg_pool, oar_avg_pool2d(x[0], two2, one2, one2, false, false))
FN(f_avg_pool_c, oar_avg_pool2d(x[0], two2, two2, one2, true, true))
static const int64_t ad23[2] = {2, 3}, sz56[2] = {5, 6};
FN(f_adaptive, oar_adaptive_avg_pool2d(x[0], ad23))
FN(f_interp_n, oar_interpolate(x[0], sz56, OAR_INTERP_NEAREST, false))
FN(f_interp_b, oar_interpolate(x[0], sz56, OAR_INTERP_BILINEAR, false))
FN(f_interp_ba, oar_interpolate(x[0], sz56, OAR_INTERP_BILINEAR, true))
static const int64_t mp_idx[8] = {0, 3, 9, 14, 4, 6, 13, 15};
FN(f_max_pool_bw, gc_call(OARI_OP_max_pool2d_backward, 2, x, (oari_attrs){.ni = 2, .i = {4, 4}}))
FN(f_avg_pool_bw, gc_call(OARI_OP_avg_pool2d_backward, 1, x,
                          (oari_attrs){.ni = 10, .i = {2, 2, 1, 1, 1, 1, 0, 0, 4, 4}}))
FN(f_adaptive_bw, gc_call(OARI_OP_adaptive_avg_pool2d_backward, 1, x, (oari_attrs){.ni = 2, .i = {4, 5}}))
FN(f_interp_bw, gc_call(OARI_OP_interpolate_backward, 1, x, (oari_attrs){.ni = 4, .i = {1, 3, 4, 0}}))

/* fft (fft branch) */
static const int64_t fft_d10[2] = {1, 0}, fft_s35[2] = {3, 5};
FN(f_fft_c2c, oar_fft_fftn(x[0], 2, NULL, fft_d10, "ortho"))
FN(f_fft_c2c_pad, oar_fft_ifft(x[0], 6, 1, NULL))
FN(f_fft_r2c, oar_fft_rfft2(x[0], NULL, NULL, NULL))
FN(f_fft_r2c_s, oar_fft_rfftn(x[0], 2, fft_s35, NULL, "forward"))
FN(f_fft_c2r, oar_fft_irfft(x[0], 7, -1, "forward"))
FN(f_fft_c2r2, oar_fft_irfft2(x[0], NULL, NULL, NULL))
FN(f_fft_hfft, oar_fft_hfft(x[0], -1, 0, "ortho"))
FN(f_view_as_real, oar_view_as_real(x[0]))
FN(f_view_as_complex, oar_mul(oar_view_as_complex(x[0]), oar_view_as_complex(x[0])))
FN(f_complex, oar_complex(x[0], x[1])) FN(f_polar, oar_polar(x[0], x[1]))

/* linalg through LAPACK (include/oar/linalg.h): matrices kept away from
 * singular (x + 4 I), positive-definite (x x^H + 3 I) or Hermitian (x +
 * x^H, distinct eigenvalues for random x); eigenvector losses that do not
 * depend on their sign or phase */
static oar_tensor *lg_mh(oar_tensor *x) {
    oar_tensor *t = oar_transpose(x, -2, -1);
    return t && oar_dtype_is_complex(oar_tensor_dtype(t)) ? oar_conj(t) : t;
}
static oar_tensor *lg_shift(oar_tensor *x, double s) {
    int64_t n = oar_tensor_shape(x)[oar_tensor_ndim(x) - 1];
    return oar_add(x, oar_mul_scalar(oar_eye(n, -1, OAR_F64), s));
}
static oar_tensor *lg_slogdet(oar_tensor *x, bool with_sign) {
    oar_tensor *s, *l;
    if (oar_linalg_slogdet(lg_shift(x, 2), &s, &l)) return NULL;
    return with_sign ? oar_add(s, l) : l;
}
static oar_tensor *lg_eigh(oar_tensor *x, const char *uplo, bool values_only) {
    oar_tensor *w, *v;
    if (oar_linalg_eigh(oar_add(x, lg_mh(x)), uplo, &w, &v)) return NULL;
    if (values_only) return w;
    oar_tensor *f = oar_matmul(oar_mul(v, oar_unsqueeze(oar_sin(w), -2)), lg_mh(v));
    oar_tensor *a2 = oar_dtype_is_complex(oar_tensor_dtype(v)) ? oar_real(oar_mul(v, oar_conj(v)))
                                                               : oar_square(v);
    return oar_add(f, oar_mul(a2, oar_unsqueeze(w, -2)));
}
FN(f_lg_solve, oar_linalg_solve(lg_shift(x[0], 4), x[1]))
FN(f_lg_inv, oar_linalg_inv(lg_shift(x[0], 4)))
FN(f_lg_det, oar_linalg_det(lg_shift(x[0], 2)))
FN(f_lg_logabsdet, lg_slogdet(x[0], false)) FN(f_lg_slogdet_c, lg_slogdet(x[0], true))
FN(f_lg_chol, oar_linalg_cholesky(lg_shift(oar_matmul(x[0], lg_mh(x[0])), 3), false))
FN(f_lg_chol_u, oar_linalg_cholesky(lg_shift(oar_matmul(x[0], lg_mh(x[0])), 3), true))
FN(f_lg_eigvals, lg_eigh(x[0], "L", true))
FN(f_lg_eigh, lg_eigh(x[0], "L", false)) FN(f_lg_eigh_u, lg_eigh(x[0], "U", false))
/* qr: Q and R stacked ([m + c, ...] when their column counts agree), or
 * one of them */
static oar_tensor *lg_qr(oar_tensor *x, const char *mode, int which) {
    oar_tensor *q = NULL, *r = NULL;
    if (oar_linalg_qr(x, mode, which == 2 ? NULL : &q, &r)) return NULL;
    if (which) return which == 1 ? q : r;
    oar_tensor *qr[2] = {q, r};
    return oar_concat(2, qr, -2);
}
/* svd: U diag(sin S) Vh + (|U|^2 S) |Vh|^2, which does not depend on the
 * sign (phase) of the singular vectors; full_matrices: U and Vh cut to k */
static oar_tensor *lg_abs2(oar_tensor *v) {
    return oar_dtype_is_complex(oar_tensor_dtype(v)) ? oar_real(oar_mul(v, oar_conj(v)))
                                                     : oar_square(v);
}
static oar_tensor *lg_svd(oar_tensor *x, bool full) {
    oar_tensor *u, *s, *vh;
    if (oar_linalg_svd(x, full, &u, &s, &vh)) return NULL;
    int64_t k = oar_tensor_shape(s)[oar_tensor_ndim(s) - 1];
    if (full) u = oar_slice(u, -1, 0, k, 1), vh = oar_slice(vh, -2, 0, k, 1);
    oar_tensor *f = oar_matmul(oar_mul(u, oar_unsqueeze(oar_sin(s), -2)), vh);
    return oar_add(f, oar_matmul(oar_mul(lg_abs2(u), oar_unsqueeze(s, -2)), lg_abs2(vh)));
}
FN(f_lg_qr, lg_qr(x[0], "reduced", 0)) FN(f_lg_qr_c, lg_qr(x[0], "complete", 0))
FN(f_lg_qr_q, lg_qr(x[0], NULL, 1)) FN(f_lg_qr_r, lg_qr(x[0], "r", 2))
FN(f_lg_qr_wide_q, lg_qr(x[0], "reduced", 1)) FN(f_lg_qr_wide_r, lg_qr(x[0], "reduced", 2))
FN(f_lg_svd, lg_svd(x[0], false)) FN(f_lg_svd_full, lg_svd(x[0], true))
FN(f_lg_svdvals, oar_linalg_svdvals(x[0]))
FN(f_lg_nuc, oar_linalg_matrix_norm(x[0], "nuc", false))
FN(f_lg_norm2, oar_linalg_matrix_norm(x[0], "2", false))
FN(f_lg_norm_m2, oar_linalg_matrix_norm(x[0], "-2", true))
FN(f_lg_pinv, oar_linalg_pinv(x[0])) FN(f_lg_lstsq, oar_linalg_lstsq(x[0], x[1]))
FN(f_lg_mexp, oar_linalg_matrix_exp(x[0]))
FN(f_lg_mexp_big, oar_linalg_matrix_exp(oar_mul_scalar(x[0], 4))) /* squared */

/* rnn_layer / lstm_layer (T 3, B 2, I 2, H 2): sum(y^2) + sum(tanh(h_n)) (+
 * sum(c_n^2)), so the gradient of every output flows; the operands not
 * differentiated are fixed values */
static const double rl_vals[16] = {0.3,  -0.5, 0.8,  0.1, -0.7, 0.4, 0.6,  -0.2,
                                   -0.4, 0.9,  -0.1, 0.5, 0.2,  -0.6, 0.7, -0.3};
static const int64_t rl_len[2] = {3, 1};
static oar_tensor *rl_fixed(int ndim, int64_t d0, int64_t d1) {
    int64_t shape[2] = {d0, d1};
    return oar_tensor_from_data(rl_vals, OAR_F64, ndim, shape);
}
/* lstm_layer itself, called directly: oar_rnn_layer takes lstm_layer_train
 * where the gradient is recorded eagerly, as here */
static int rl_lstm_op(bool reverse, oar_tensor *x, oar_tensor *h0, oar_tensor *c0, oar_tensor *w_ih,
                      oar_tensor *w_hh, oar_tensor *b_ih, oar_tensor *b_hh, oar_tensor *len,
                      oar_tensor **y, oar_tensor **hn, oar_tensor **cn) {
    oar_tensor *in[8] = {x, h0, c0, w_ih, w_hh, b_ih, b_hh, len}, *out[OARI_MAX_OUT] = {0};
    oari_attrs a = oari_attrs_ints(1, (int64_t[]){reverse});
    if (oari_dispatch(OARI_OP_lstm_layer, 8, in, &a, out)) return -1;
    *y = oari_pool_adopt(out[0]);
    *hn = oari_pool_adopt(out[1]);
    *cn = oari_pool_adopt(out[2]);
    return *y && *hn && *cn ? 0 : -1;
}
/* rnn_layer itself with the GRU cell: oar_rnn_layer takes gru_layer_train
 * where the gradient is recorded eagerly */
static int rl_gru_op(bool reverse, oar_tensor *x, oar_tensor *h0, oar_tensor *w_ih, oar_tensor *w_hh,
                     oar_tensor *b_ih, oar_tensor *b_hh, oar_tensor *len, oar_tensor **y, oar_tensor **hn) {
    oar_tensor *in[7] = {x, h0, w_ih, w_hh, b_ih, b_hh, len}, *out[OARI_MAX_OUT] = {0};
    oari_attrs a = oari_attrs_ints(2, (int64_t[]){OAR_RNN_GRU, reverse});
    if (oari_dispatch(OARI_OP_rnn_layer, 7, in, &a, out)) return -1;
    *y = oari_pool_adopt(out[0]);
    *hn = oari_pool_adopt(out[1]);
    return *y && *hn ? 0 : -1;
}
/* cell OAR_RNN_LSTM + 1: lstm_layer directly; OAR_RNN_LSTM + 2: rnn_layer
 * (GRU) directly */
static oar_tensor *rl_sum(int cell, bool reverse, oar_tensor *x, oar_tensor *h0,
                          oar_tensor *c0, oar_tensor *w_ih, oar_tensor *w_hh, oar_tensor *b_ih,
                          oar_tensor *b_hh, bool lengths) {
    oar_tensor *y = NULL, *hn = NULL, *cn = NULL;
    oar_tensor *len = lengths ? oar_tensor_from_data(rl_len, OAR_I64, 1, (int64_t[]){2}) : NULL;
    if (cell == OAR_RNN_LSTM + 2 ? rl_gru_op(reverse, x, h0, w_ih, w_hh, b_ih, b_hh, len, &y, &hn)
        : cell > OAR_RNN_LSTM    ? rl_lstm_op(reverse, x, h0, c0, w_ih, w_hh, b_ih, b_hh, len, &y, &hn, &cn)
                                 : oar_rnn_layer(cell, reverse, x, h0, c0, w_ih, w_hh, b_ih, b_hh, len,
                                                 &y, &hn, &cn))
        return NULL;
    oar_tensor *s = oar_add(oar_sum(oar_mul(y, y), 0, NULL, false), oar_sum(oar_tanh(hn), 0, NULL, false));
    return cn ? oar_add(s, oar_sum(oar_mul(cn, cn), 0, NULL, false)) : s;
}
FN(f_rl_tanh, rl_sum(OAR_RNN_TANH, false, x[0], x[1], NULL, x[2], x[3], rl_fixed(1, 2, 0),
                     rl_fixed(1, 2, 0), false))
FN(f_rl_gru, rl_sum(OAR_RNN_LSTM + 2, true, x[0], x[1], NULL, rl_fixed(2, 6, 2), rl_fixed(2, 6, 2),
                    x[2], x[3], true))
/* the GRU through oar_rnn_layer: gru_layer_train, whose gates come from
 * its reserve (the second order takes the reserve's gradient) */
FN(f_rl_gru_train, rl_sum(OAR_RNN_GRU, false, x[0], x[1], NULL, x[2], x[3], rl_fixed(1, 6, 0),
                          rl_fixed(1, 6, 0), false))
FN(f_rl_gru_train_len, rl_sum(OAR_RNN_GRU, true, x[0], x[1], NULL, rl_fixed(2, 6, 2), rl_fixed(2, 6, 2),
                              x[2], x[3], true))
FN(f_rl_lstm, rl_sum(OAR_RNN_LSTM + 1, false, x[0], x[1], rl_fixed(2, 2, 2), x[2], x[3],
                     rl_fixed(1, 8, 0), NULL, false))
FN(f_rl_lstm_len, rl_sum(OAR_RNN_LSTM + 1, true, x[0], rl_fixed(2, 2, 2), x[1], rl_fixed(2, 8, 2),
                         x[2], NULL, x[3], true))
/* the same through oar_rnn_layer: lstm_layer_train, whose first-order
 * gradient is lstm_layer_backward's (the second order is the ops') */
FN(f_rl_lstm_train, rl_sum(OAR_RNN_LSTM, false, x[0], x[1], rl_fixed(2, 2, 2), x[2], x[3],
                           rl_fixed(1, 8, 0), NULL, false))
FN(f_rl_lstm_train_len, rl_sum(OAR_RNN_LSTM, true, x[0], rl_fixed(2, 2, 2), x[1],
                               rl_fixed(2, 8, 2), x[2], NULL, x[3], true))

/* custom: a registered op (include/oar/custom.h) y = a * b^2 with a CPU
 * kernel and a gradient written with ops (da = g b^2, db = 2 g a b);
 * tests/ops/test_custom_op.c covers the API itself */
static int gc_custom_kernel(const oar_custom_kernel_args *k) {
    const double *a = oar_tensor_data(k->in[0]), *b = oar_tensor_data(k->in[1]);
    double *y = oar_tensor_data(k->out[0]);
    if (oar_tensor_dtype(k->in[0]) != OAR_F64) return oar_set_error(OAR_ERR_INVALID, "f64 only");
    for (int64_t i = 0; i < oar_tensor_numel(k->out[0]); i++) y[i] = a[i] * b[i] * b[i];
    return 0;
}
static int gc_custom_grad(const oar_custom_grad_args *g) {
    oar_tensor *a = g->in[0], *b = g->in[1], *go = g->grad_out[0];
    if (g->needs[0]) g->grad_in[0] = oar_mul(go, oar_mul(b, b));
    if (g->needs[1]) g->grad_in[1] = oar_mul_scalar(oar_mul(go, oar_mul(a, b)), 2);
    return 0;
}
static oar_tensor *f_custom(void *c, int n, oar_tensor *const *x) {
    (void)c, (void)n;
    static const oar_custom_op *op;
    if (!op) op = oar_custom_find("gradcheck.a_b2");
    if (!op) {
        oar_clear_error();
        op = oar_custom_register(&(oar_custom_op_desc){
            .name = "gradcheck.a_b2", .n_in = 2, .n_out = 1, .kernels = {{"cpu", gc_custom_kernel}},
            .grad = gc_custom_grad});
    }
    return op ? oar_custom_call1(op, 2, x, NULL) : NULL;
}

static const bool where_cond[12] = {1, 0, 0, 1, 1, 1, 0, 0, 1, 0, 1, 0};

static const op_case op_cases[] = {
    {"neg", "complex", f_neg, 1, {{SH2(3, 4), C128}}, NOOPT},
    {"abs", "complex", f_abs, 1, {{SH2(3, 4), C128}}, NOOPT},
    {"exp", "complex", f_exp, 1, {{SH2(3, 4), C128}}, NOOPT},
    {"log", "complex", f_log, 1, {{SH2(3, 4), C128, POS}}, NOOPT},
    {"sqrt", "complex", f_sqrt, 1, {{SH2(3, 4), C128, POS}}, NOOPT},
    {"rsqrt", "complex", f_rsqrt, 1, {{SH2(3, 4), C128, POS}}, NOOPT},
    {"square", "complex", f_square, 1, {{SH2(3, 4), C128}}, NOOPT},
    {"reciprocal", "complex", f_reciprocal, 1, {{SH2(3, 4), C128, POS}}, NOOPT},
    {"sin", "complex", f_sin, 1, {{SH2(3, 4), C128}}, NOOPT},
    {"cos", "complex", f_cos, 1, {{SH2(3, 4), C128}}, NOOPT},
    {"tanh", "complex", f_tanh, 1, {{SH2(3, 4), C128, .lo = -1, .hi = 1}}, NOOPT},
    {"sigmoid", "complex", f_sigmoid, 1, {{SH2(3, 4), C128, .lo = -1, .hi = 1}}, NOOPT},
    {"leaky_relu", "", f_leaky_relu, 1, {{SH2(3, 4)}}, KINK0},
    {"elu", "", f_elu, 1, {{SH2(3, 4)}}, KINK0},
    {"gelu", "erf", f_gelu, 1, {{SH2(3, 4)}}, NOOPT},
    {"gelu", "tanh", f_gelu_tanh, 1, {{SH2(3, 4)}}, NOOPT},
    {"softplus", "", f_softplus, 1, {{SH2(3, 4)}}, NOOPT},
    {"softplus", "threshold", f_softplus_thr, 1, {{SH2(3, 4)}}, {.kinks = {1}, .n_kinks = 1, .margin = 0.05}},
    {"clamp", "", f_clamp, 1, {{SH2(3, 4)}}, {.kinks = {-1, 1}, .n_kinks = 2, .margin = 0.05}},
    {"clamp", "min only", f_clamp_min, 1, {{SH2(3, 4)}}, {.kinks = {-0.5}, .n_kinks = 1, .margin = 0.05}},
    {"real", "complex", f_real, 1, {{SH2(3, 4), C128}}, NOOPT},
    {"conj", "complex", f_conj, 1, {{SH2(3, 4), C128}}, NOOPT},
    {"angle", "complex", f_angle, 1, {{SH2(3, 4), C128}}, NOOPT},

    {"add", "complex", f_add, 2, {{SH2(3, 4), C128}, {SH1(4)}}, NOOPT},
    {"sub", "broadcast", f_sub, 2, {{SH1(4)}, {SH2(3, 4)}}, NOOPT},
    {"sub", "complex", f_sub, 2, {{SH1(4), C128}, {SH2(3, 4), C128}}, NOOPT},
    {"mul", "complex", f_mul, 2, {{SH2(3, 4), C128}, {SH2(1, 4), C128}}, NOOPT},
    {"div", "complex", f_div, 2, {{SH2(3, 4), C128}, {SH1(4), C128, POS}}, NOOPT},
    {"pow", "complex", f_pow, 2, {{SH2(3, 4), C128, POS}, {SH1(4), C128}}, NOOPT},
    {"where", "broadcast", f_where, 3, {{SH2(3, 4), .dtype = OAR_BOOL, .data = where_cond}, {SH2(3, 1)}, {SH1(4)}}, NOOPT},

    {"cast", "f64 to c128", f_cast_c, 1, {{SH2(3, 4)}}, NOOPT},
    {"cast", "f64 to f32 and back", f_cast_f32, 1, {{SH2(3, 4)}}, {.atol = 1e-3, .rtol = 1e-3, .eps = 1e-3}},
    {"contiguous", "", f_clone, 1, {{SH2(3, 4)}}, NOOPT},

    {"sum", "all", f_sum_all, 1, {{SH2(3, 4)}}, NOOPT},
    {"sum", "dim 1 keepdim", f_sum_1, 1, {{SH2(3, 4)}}, NOOPT},
    {"sum", "dims 0 2 complex", f_sum_02, 1, {{SH3(2, 3, 2), C128}}, NOOPT},
    {"prod", "dim 1", f_prod_1, 1, {{SH2(3, 4), .lo = 0.5, .hi = 1.5}}, NOOPT},
    {"prod", "all", f_prod_all, 1, {{SH2(2, 3), .lo = -1.5, .hi = 1.5}}, KINK0},
    {"amax", "dim 1", f_amax_1, 1, {{SH2(3, 4)}}, NOOPT},
    {"amin", "dim 0 keepdim", f_amin_0, 1, {{SH2(3, 4)}}, NOOPT},
    {"cumsum", "", f_cumsum, 1, {{SH2(3, 4)}}, NOOPT},
    {"cumsum", "complex", f_cumsum, 1, {{SH2(3, 4), C128}}, NOOPT},
    {"cumprod", "complex", f_cumprod, 1, {{SH2(3, 4), C128}}, NOOPT},
    {"prod", "complex", f_prod_1, 1, {{SH2(3, 4), C128, .lo = 0.5, .hi = 1.5}}, NOOPT},
    {"cumprod", "", f_cumprod, 1, {{SH2(3, 4)}}, KINK0},

    {"view", "", f_view, 1, {{SH2(3, 4)}}, NOOPT},
    {"permute", "", f_permute, 1, {{SH2(3, 4)}}, NOOPT},
    {"permute", "complex", f_permute, 1, {{SH2(3, 4), C128}}, NOOPT},
    {"permute", "rank 3", f_permute3, 1, {{SH3(2, 3, 4)}}, NOOPT},
    {"expand", "", f_expand, 1, {{SH2(3, 1)}}, NOOPT},
    {"slice", "step 2", f_slice, 1, {{SH2(3, 4)}}, NOOPT},
    {"slice", "negative start", f_slice0, 1, {{SH2(3, 4)}}, NOOPT},
    {"diagonal", "", f_diagonal, 1, {{SH2(3, 4)}}, NOOPT},
    {"diagonal", "offset 1, dims swapped", f_diagonal1, 1, {{SH2(3, 4)}}, NOOPT},
    {"concat", "dim 0", f_concat, 2, {{SH2(2, 4)}, {SH2(3, 4)}}, NOOPT},
    {"concat", "dim 1", f_concat1, 2, {{SH2(3, 1)}, {SH2(3, 2)}}, NOOPT},
    {"pad", "constant", f_pad_c, 1, {{SH3(2, 3, 4)}}, NOOPT},
    {"pad", "reflect", f_pad_r, 1, {{SH3(2, 3, 4)}}, NOOPT},
    {"pad", "replicate", f_pad_e, 1, {{SH3(2, 3, 4)}}, NOOPT},
    {"flip", "", f_flip, 1, {{SH2(3, 4)}}, NOOPT},
    {"roll", "", f_roll, 1, {{SH2(3, 4)}}, NOOPT},
    {"tril", "", f_tril, 1, {{SH2(3, 4)}}, NOOPT},
    {"triu", "", f_triu, 1, {{SH2(4, 3)}}, NOOPT},
    {"slice_backward", "", f_slice_bw, 1, {{SH2(3, 2)}}, NOOPT},
    {"diagonal_backward", "", f_diag_bw, 1, {{SH1(3)}}, NOOPT},
    {"pad_backward", "reflect", f_pad_bw, 1, {{SH3(2, 3, 6)}}, NOOPT},
    {"pad_backward", "replicate", f_pad_bw_e, 1, {{SH3(2, 5, 6)}}, NOOPT},

    {"gather", "", f_gather, 2, {{SH2(3, 4)}, {SH2(3, 2), .dtype = OAR_I64, .data = idx_g}}, NOOPT},
    {"gather", "complex", f_gather, 2, {{SH2(3, 4), C128}, {SH2(3, 2), .dtype = OAR_I64, .data = idx_g}}, NOOPT},
    {"scatter", "", f_scatter, 3, {{SH2(3, 4)}, {SH2(3, 2), .dtype = OAR_I64, .data = idx_s}, {SH2(3, 2)}}, NOOPT},
    {"scatter_add", "", f_scatter_add, 3, {{SH2(3, 4)}, {SH2(3, 2), .dtype = OAR_I64, .data = idx_g}, {SH2(3, 2)}}, NOOPT},
    {"index_select", "repeated", f_index_select, 2, {{SH2(3, 4)}, {SH1(3), .dtype = OAR_I64, .data = idx_sel}}, NOOPT},
    {"index_add", "", f_index_add, 3, {{SH2(3, 4)}, {SH1(2), .dtype = OAR_I64, .data = idx_add}, {SH2(2, 4)}}, NOOPT},
    {"sort", "", f_sort, 1, {{SH2(3, 4)}}, NOOPT},
    {"sort", "descending dim 0", f_sort_desc, 1, {{SH2(3, 4)}}, NOOPT},
    {"topk", "", f_topk, 1, {{SH2(3, 4)}}, NOOPT},

    {"matmul", "batched broadcast", f_matmul, 2, {{SH3(2, 3, 4)}, {SH2(4, 2)}}, NOOPT},
    {"matmul", "vector", f_matmul, 2, {{SH1(4)}, {SH3(2, 4, 3)}}, NOOPT},
    {"matmul", "complex", f_matmul, 2, {{SH2(2, 3), C128}, {SH2(3, 2), C128}}, NOOPT},
    /* a 2-D right operand under a batched left one: its gradient is one GEMM
     * over the folded batch (linalg.c), here with 2 batch dims and complex */
    {"matmul", "4-D times 2-D", f_matmul, 2, {{SH4(2, 2, 3, 4)}, {SH2(4, 2)}}, NOOPT},
    {"matmul", "batched complex", f_matmul, 2, {{SH3(2, 3, 4), C128}, {SH2(4, 2), C128}}, NOOPT},
    /* operands stored transposed: their gradients are made as transposes of
     * contiguous products (linalg.c, stored_transposed) */
    {"matmul", "x W^T", f_matmul_wt, 2, {{SH2(3, 4)}, {SH2(2, 4)}}, NOOPT},
    {"matmul", "batched x W^T", f_matmul_wt, 2, {{SH3(2, 3, 4)}, {SH2(2, 4)}}, NOOPT},
    {"matmul", "complex x W^T", f_matmul_wt, 2, {{SH2(3, 4), C128}, {SH2(2, 4), C128}}, NOOPT},
    {"matmul", "A^T B", f_matmul_at, 2, {{SH2(4, 3)}, {SH2(4, 2)}}, NOOPT},
    {"matmul", "complex A^T B", f_matmul_at, 2, {{SH2(4, 3), C128}, {SH2(4, 2), C128}}, NOOPT},
    {"softmax", "", f_softmax, 1, {{SH2(3, 4)}}, NOOPT},
    {"log_softmax", "", f_log_softmax, 1, {{SH2(3, 4)}}, NOOPT},

    {"layer_norm", "affine", f_layer_norm, 3, {{SH3(2, 3, 4)}, {SH1(4)}, {SH1(4)}}, NOOPT},
    {"layer_norm", "2 dims, no affine", f_layer_norm2, 1, {{SH3(2, 3, 4)}}, NOOPT},
    {"group_norm", "", f_group_norm, 3, {{SH4(2, 4, 2, 2)}, {SH1(4)}, {SH1(4)}}, NOOPT},
    {"batch_norm", "training", f_batch_norm, 3, {{SH3(3, 2, 4)}, {SH1(2)}, {SH1(2)}}, NOOPT},
    {"batch_norm", "training, 4-d, bias only", f_batch_norm_nw, 2, {{SH4(2, 3, 2, 2)}, {SH1(3)}}, NOOPT},
    {"layer_norm_backward", "weight", f_ln_bw, 4, {{SH3(2, 3, 4)}, {SH3(2, 3, 4)}, {SH3(2, 3, 1), POS}, {SH1(4)}}, NOOPT},
    {"layer_norm_backward", "2 dims, no weight", f_ln_bw2, 3, {{SH3(2, 3, 4)}, {SH3(2, 3, 4)}, {SH3(2, 1, 1), POS}}, NOOPT},
    {"batch_norm_backward", "weight", f_bn_bw, 4, {{SH3(3, 2, 4)}, {SH3(3, 2, 4)}, {SH1(2), POS}, {SH1(2)}}, NOOPT},
    {"batch_norm_backward", "4-d, no weight", f_bn_bw_nw, 3, {{SH4(2, 3, 2, 2)}, {SH4(2, 3, 2, 2)}, {SH1(3), POS}}, NOOPT},
    {"batch_norm", "eval", f_batch_norm_eval, 4, {{SH3(3, 2, 4)}, {SH1(2), .constant = true}, {SH1(2), POS, .constant = true}, {SH1(2)}}, NOOPT},
    {"conv2d", "padding 1 bias", f_conv2d, 3, {{SH4(2, 2, 4, 4)}, {SH4(3, 2, 3, 3)}, {SH1(3)}}, NOOPT},
    {"conv2d", "stride 2 dilation 2 groups 2", f_conv2d_s, 2, {{SH4(1, 4, 6, 6)}, {SH4(2, 2, 2, 2)}}, NOOPT},
    {"conv2d", "1-d", f_conv1d, 3, {{SH3(2, 2, 7)}, {SH3(3, 2, 3)}, {SH1(3)}}, NOOPT},
    {"conv_transpose2d", "stride 2", f_convt, 3, {{SH4(1, 2, 3, 3)}, {SH4(2, 3, 2, 2)}, {SH1(3)}}, NOOPT},
    {"conv2d_weight_grad", "", f_conv_wg, 2, {{SH4(2, 2, 4, 4)}, {SH4(2, 3, 4, 4)}}, NOOPT},
    {"conv3d", "stride, padding, dilation, bias", f_conv3d, 3, {{SH5(1, 2, 4, 4, 3)}, {SH5(2, 2, 2, 2, 2)}, {SH1(2)}}, NOOPT},
    {"conv3d", "groups 2, padding 1", f_conv3d_g, 2, {{SH5(1, 4, 3, 3, 2)}, {SH5(2, 2, 2, 2, 2)}}, NOOPT},
    {"conv3d", "complex", f_conv3d, 3, {{SH5(1, 2, 3, 3, 3), C128}, {SH5(2, 2, 2, 2, 2), C128}, {SH1(2), C128}}, NOOPT},
    {"conv_transpose3d", "complex", f_convt3d, 3, {{SH5(1, 2, 2, 2, 2), C128}, {SH5(2, 1, 2, 2, 2), C128}, {SH1(1), C128}}, NOOPT},
    {"conv_transpose3d", "stride, padding, output_padding, dilation, bias", f_convt3d, 3, {{SH5(1, 2, 2, 3, 2)}, {SH5(2, 2, 2, 2, 2)}, {SH1(2)}}, NOOPT},
    {"conv_transpose3d", "groups 2, output_padding >= stride", f_convt3d_g, 2, {{SH5(1, 2, 2, 2, 2)}, {SH5(2, 1, 2, 2, 2)}}, NOOPT},
    {"conv_transpose2d", "1-d (conv_transpose1d)", f_convt1d, 3, {{SH3(2, 2, 4)}, {SH3(2, 3, 3)}, {SH1(3)}}, NOOPT},
    {"conv_transpose2d", "1-d, output_padding >= stride", f_convt1d_op, 2, {{SH3(1, 2, 4)}, {SH3(2, 2, 2)}}, NOOPT},
    {"conv3d_weight_grad", "stride 2 on depth", f_conv3d_wg, 2, {{SH5(1, 2, 4, 3, 3)}, {SH5(1, 3, 3, 2, 4)}}, NOOPT},
    {"max_pool2d", "", f_max_pool, 1, {{SH4(1, 2, 4, 4)}}, NOOPT},
    {"max_pool2d", "padding, ceil", f_max_pool_p, 1, {{SH4(1, 2, 3, 3)}}, NOOPT},
    {"avg_pool2d", "", f_avg_pool, 1, {{SH4(1, 2, 4, 4)}}, NOOPT},
    {"avg_pool2d", "ceil, count pad", f_avg_pool_c, 1, {{SH4(1, 2, 5, 5)}}, NOOPT},
    {"adaptive_avg_pool2d", "", f_adaptive, 1, {{SH4(1, 2, 4, 5)}}, NOOPT},
    {"interpolate", "nearest", f_interp_n, 1, {{SH4(1, 2, 3, 4)}}, NOOPT},
    {"interpolate", "bilinear", f_interp_b, 1, {{SH4(1, 2, 3, 4)}}, NOOPT},
    {"interpolate", "bilinear align_corners", f_interp_ba, 1, {{SH4(1, 2, 3, 4)}}, NOOPT},
    {"max_pool2d_backward", "", f_max_pool_bw, 2, {{SH4(1, 2, 2, 2)}, {SH4(1, 2, 2, 2), .dtype = OAR_I64, .data = mp_idx}}, NOOPT},
    {"avg_pool2d_backward", "", f_avg_pool_bw, 1, {{SH4(1, 2, 5, 5)}}, NOOPT},
    {"adaptive_avg_pool2d_backward", "", f_adaptive_bw, 1, {{SH4(1, 2, 2, 3)}}, NOOPT},
    {"interpolate_backward", "bilinear", f_interp_bw, 1, {{SH4(1, 2, 5, 6)}}, NOOPT},
    {"fft_c2c", "fftn ortho, dims 1 0", f_fft_c2c, 1, {{SH2(3, 4), C128}}, NOOPT},
    {"fft_c2c", "ifft of a real input, padded", f_fft_c2c_pad, 1, {{SH2(2, 5)}}, NOOPT},
    {"fft_r2c", "rfft2, odd last dim", f_fft_r2c, 1, {{SH3(2, 3, 5)}}, NOOPT},
    {"fft_r2c", "rfftn forward, s crops and pads", f_fft_r2c_s, 1, {{SH2(4, 4)}}, NOOPT},
    {"fft_c2r", "irfft n 7, forward", f_fft_c2r, 1, {{SH2(3, 4), C128}}, NOOPT},
    {"fft_c2r", "irfft2, even output", f_fft_c2r2, 1, {{SH3(2, 3, 4), C128}}, NOOPT},
    {"fft_c2r", "hfft ortho along dim 0", f_fft_hfft, 1, {{SH2(4, 3), C128}}, NOOPT},
    {"view_as_real", "", f_view_as_real, 1, {{SH2(3, 2), C128}}, NOOPT},
    {"view_as_complex", "squared", f_view_as_complex, 1, {{SH2(3, 2)}}, NOOPT},
    {"view_as_complex", "oar_complex, broadcast", f_complex, 2, {{SH2(3, 4)}, {SH1(4)}}, NOOPT},
    {"view_as_complex", "oar_polar", f_polar, 2, {{SH2(3, 4), POS}, {SH2(3, 4)}}, NOOPT},
    {"linalg_solve", "A X = B, both inputs", f_lg_solve, 2, {{SH2(3, 3)}, {SH2(3, 2)}}, NOOPT},
    {"linalg_solve", "batched A, broadcast B", f_lg_solve, 2, {{SH3(2, 3, 3)}, {SH2(3, 2)}}, NOOPT},
    {"linalg_solve", "vector b", f_lg_solve, 2, {{SH2(3, 3)}, {SH1(3)}}, NOOPT},
    {"linalg_solve", "complex, batched", f_lg_solve, 2, {{SH3(2, 3, 3), C128}, {SH3(2, 3, 2), C128}}, NOOPT},
    {"linalg_solve", "oar_linalg_inv", f_lg_inv, 1, {{SH3(2, 3, 3)}}, NOOPT},
    {"linalg_solve", "oar_linalg_inv, complex", f_lg_inv, 1, {{SH2(3, 3), C128}}, NOOPT},
    {"linalg_slogdet", "logabsdet, batched", f_lg_logabsdet, 1, {{SH3(2, 3, 3)}}, NOOPT},
    {"linalg_slogdet", "complex sign + logabsdet", f_lg_slogdet_c, 1, {{SH2(3, 3), C128}}, NOOPT},
    {"linalg_slogdet", "oar_linalg_det, batched", f_lg_det, 1, {{SH3(2, 3, 3)}}, NOOPT},
    {"linalg_slogdet", "oar_linalg_det, complex", f_lg_det, 1, {{SH2(3, 3), C128}}, NOOPT},
    {"linalg_cholesky", "of X X^T + 3 I, batched", f_lg_chol, 1, {{SH3(2, 3, 3)}}, NOOPT},
    {"linalg_cholesky", "upper", f_lg_chol_u, 1, {{SH2(3, 3)}}, NOOPT},
    {"linalg_cholesky", "complex", f_lg_chol, 1, {{SH2(3, 3), C128}}, NOOPT},
    {"linalg_eigh", "eigenvalues only, batched", f_lg_eigvals, 1, {{SH3(2, 3, 3)}}, NOOPT},
    {"linalg_eigh", "V sin(w) V^T + |V|^2 w, batched", f_lg_eigh, 1, {{SH3(2, 3, 3)}}, NOOPT},
    {"linalg_eigh", "UPLO U", f_lg_eigh_u, 1, {{SH2(3, 3)}}, NOOPT},
    {"linalg_eigh", "complex", f_lg_eigh, 1, {{SH2(3, 3), C128}}, NOOPT},
    {"linalg_qr", "Q and R, tall, batched", f_lg_qr, 1, {{SH3(2, 4, 3)}}, NOOPT},
    {"linalg_qr", "square, complete", f_lg_qr_c, 1, {{SH2(3, 3)}}, NOOPT},
    {"linalg_qr", "Q only, complex", f_lg_qr_q, 1, {{SH2(4, 3), C128}}, NOOPT},
    {"linalg_qr", "R only (mode r), complex", f_lg_qr_r, 1, {{SH2(4, 3), C128}}, NOOPT},
    {"linalg_qr", "Q and R, complex, square", f_lg_qr, 1, {{SH2(3, 3), C128}}, NOOPT},
    {"linalg_qr", "wide (m < n), Q", f_lg_qr_wide_q, 1, {{SH2(3, 5)}}, NOOPT},
    {"linalg_qr", "wide (m < n), R, complex", f_lg_qr_wide_r, 1, {{SH3(2, 3, 5), C128}}, NOOPT},
    {"linalg_svd", "U sin(S) Vh + |U|^2 S |Vh|^2, tall, batched", f_lg_svd, 1, {{SH3(2, 4, 3)}}, NOOPT},
    {"linalg_svd", "wide", f_lg_svd, 1, {{SH2(3, 5)}}, NOOPT},
    {"linalg_svd", "square, complex", f_lg_svd, 1, {{SH2(3, 3), C128}}, NOOPT},
    {"linalg_svd", "tall, complex", f_lg_svd, 1, {{SH2(4, 3), C128}}, NOOPT},
    {"linalg_svd", "full_matrices, wide", f_lg_svd_full, 1, {{SH2(3, 4)}}, NOOPT},
    {"linalg_svd", "oar_linalg_svdvals, batched", f_lg_svdvals, 1, {{SH3(2, 3, 4)}}, NOOPT},
    {"linalg_svd", "oar_linalg_svdvals, complex", f_lg_svdvals, 1, {{SH2(4, 3), C128}}, NOOPT},
    {"linalg_svd", "oar_linalg_matrix_norm nuc, batched", f_lg_nuc, 1, {{SH3(2, 3, 4)}}, NOOPT},
    {"linalg_svd", "oar_linalg_matrix_norm 2, complex", f_lg_norm2, 1, {{SH2(4, 3), C128}}, NOOPT},
    {"linalg_svd", "oar_linalg_matrix_norm -2, keepdim", f_lg_norm_m2, 1, {{SH2(3, 4)}}, NOOPT},
    {"linalg_svd", "oar_linalg_pinv, tall, batched", f_lg_pinv, 1, {{SH3(2, 4, 3)}}, NOOPT},
    {"linalg_svd", "oar_linalg_pinv, wide, complex", f_lg_pinv, 1, {{SH2(3, 4), C128}}, NOOPT},
    {"linalg_svd", "oar_linalg_lstsq", f_lg_lstsq, 2, {{SH2(4, 3)}, {SH2(4, 2)}}, NOOPT},
    {"linalg_svd", "oar_linalg_lstsq, complex, vector b", f_lg_lstsq, 2, {{SH3(2, 4, 3), C128}, {SH2(2, 4), C128}}, NOOPT},
    {"linalg_solve", "oar_linalg_matrix_exp, batched", f_lg_mexp, 1, {{SH3(2, 3, 3)}}, NOOPT},
    {"linalg_solve", "oar_linalg_matrix_exp, complex", f_lg_mexp, 1, {{SH2(3, 3), C128}}, NOOPT},
    {"linalg_solve", "oar_linalg_matrix_exp, scaled and squared", f_lg_mexp_big, 1, {{SH2(3, 3)}}, NOOPT},
    {"rnn_layer", "tanh: x, h0, w_ih, w_hh (T 3, B 2, H 2)", f_rl_tanh, 4,
     {{SH3(3, 2, 2)}, {SH2(2, 2)}, {SH2(2, 2), .lo = -1, .hi = 1}, {SH2(2, 2), .lo = -1, .hi = 1}}, NOOPT},
    {"rnn_layer", "gru, reverse, lengths {3, 1}: x, h0, b_ih, b_hh", f_rl_gru, 4,
     {{SH3(3, 2, 2)}, {SH2(2, 2)}, {SH1(6)}, {SH1(6)}}, NOOPT},
    {"gru_layer_train", "x, h0, w_ih, w_hh (biases fixed)", f_rl_gru_train, 4,
     {{SH3(3, 2, 2)}, {SH2(2, 2)}, {SH2(6, 2), .lo = -1, .hi = 1}, {SH2(6, 2), .lo = -1, .hi = 1}}, NOOPT},
    {"gru_layer_train", "reverse, lengths {3, 1}: x, h0, b_ih, b_hh", f_rl_gru_train_len, 4,
     {{SH3(3, 2, 2)}, {SH2(2, 2)}, {SH1(6)}, {SH1(6)}}, NOOPT},
    {"lstm_layer", "x, h0, w_ih, w_hh (c0, b_ih fixed)", f_rl_lstm, 4,
     {{SH3(3, 2, 2)}, {SH2(2, 2)}, {SH2(8, 2), .lo = -1, .hi = 1}, {SH2(8, 2), .lo = -1, .hi = 1}}, NOOPT},
    {"lstm_layer", "reverse, lengths {3, 1}: x, c0, w_hh, b_hh", f_rl_lstm_len, 4,
     {{SH3(3, 2, 2)}, {SH2(2, 2)}, {SH2(8, 2), .lo = -1, .hi = 1}, {SH1(8)}}, NOOPT},
    {"lstm_layer_train", "x, h0, w_ih, w_hh (c0, b_ih fixed)", f_rl_lstm_train, 4,
     {{SH3(3, 2, 2)}, {SH2(2, 2)}, {SH2(8, 2), .lo = -1, .hi = 1}, {SH2(8, 2), .lo = -1, .hi = 1}}, NOOPT},
    {"lstm_layer_train", "reverse, lengths {3, 1}: x, c0, w_hh, b_hh", f_rl_lstm_train_len, 4,
     {{SH3(3, 2, 2)}, {SH2(2, 2)}, {SH2(8, 2), .lo = -1, .hi = 1}, {SH1(8)}}, NOOPT},
    {"custom", "a registered op a * b^2, gradient written with ops", f_custom, 2,
     {{SH2(3, 4)}, {SH2(3, 4)}}, NOOPT},
};

#define N_OP_CASES ((int)(sizeof op_cases / sizeof op_cases[0]))

/* ---- cases from the elementwise table (src/ops/elementwise.def): each
 * differentiable unary or binary row without attributes, on [3, 4] (unary)
 * or [3, 1] with [4] (binary) in the ranges and away from the kinks of its
 * test column, f64 (c128 for complex-only rows), to second order ---- */
#include "ew_rows.h"

static oar_tensor *f_ew_row(void *ctx, int n, oar_tensor *const *x) {
    const ew_test_row *r = ctx;
    return oari_call((oari_op)oari_op_lookup(r->op), n, x, NULL);
}

/* The table's case of op into *c, with the ctx its fn takes; false when
 * the table makes none. */
static bool ew_row_case(const char *op, op_case *c, void **ctx) {
    const ew_test_row *r = ew_test_row_of(op);
    if (!r || (r->n_in != 1 && r->n_in != 2) || !r->differentiable || r->attrs) return false;
    memset(c, 0, sizeof *c);
    c->op = r->op;
    c->label = "from the table";
    c->fn = f_ew_row;
    *ctx = (void *)r;
    c->n = r->n_in;
    oar_dtype dt = r->cpu_real ? OAR_F64 : OAR_C128;
    if (r->n_in == 1) {
        c->in[0] = (gc_input){.dtype = dt, .ndim = 2, .shape = {3, 4}, .lo = r->lo, .hi = r->hi};
    } else {
        c->in[0] = (gc_input){.dtype = dt, .ndim = 2, .shape = {3, 1}, .lo = r->lo, .hi = r->hi};
        c->in[1] = (gc_input){.dtype = dt, .ndim = 1, .shape = {4}, .lo = r->blo, .hi = r->bhi};
    }
    for (int k = 0; k < r->n_kinks; k++) c->o.kinks[k] = r->kinks[k];
    c->o.n_kinks = r->n_kinks;
    c->o.margin = 0.05;
    return true;
}

/* Whether op has a case with second order (and how many cases). */
static int op_case_count(const char *op, bool *second) {
    int n = 0;
    *second = false;
    for (int i = 0; i < N_OP_CASES; i++) {
        if (strcmp(op_cases[i].op, op)) continue;
        n++;
        if (!op_cases[i].o.first_only) *second = true;
    }
    op_case table;
    void *ctx;
    if (ew_row_case(op, &table, &ctx)) {
        n++;
        *second = true;
    }
    return n;
}

#endif

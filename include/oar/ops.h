/* oar ops. Every op takes tensors and plain C values and returns a new
 * tensor (owned by the innermost pool, or by the caller outside any pool),
 * or NULL with oar_last_error() naming the op and the shapes. An op given a
 * NULL input returns NULL and keeps the first error, so a chain can be
 * checked once at its end. Inputs broadcast and promote as in PyTorch.
 * Negative dims count from the end. */
#ifndef OAR_OPS_H
#define OAR_OPS_H

#include <oar/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- unary elementwise ----------------------------------------------------
 * Integer inputs of math functions (exp, sin, sqrt, ...) promote to f32, as
 * in PyTorch. */
OAR_API oar_tensor *oar_neg(oar_tensor *x);
OAR_API oar_tensor *oar_abs(oar_tensor *x);        /* complex: modulus, real dtype */
OAR_API oar_tensor *oar_sign(oar_tensor *x);
OAR_API oar_tensor *oar_exp(oar_tensor *x);
OAR_API oar_tensor *oar_exp2(oar_tensor *x);
OAR_API oar_tensor *oar_log(oar_tensor *x);
OAR_API oar_tensor *oar_log2(oar_tensor *x);
OAR_API oar_tensor *oar_log1p(oar_tensor *x);
OAR_API oar_tensor *oar_expm1(oar_tensor *x);
OAR_API oar_tensor *oar_sqrt(oar_tensor *x);
OAR_API oar_tensor *oar_rsqrt(oar_tensor *x);
OAR_API oar_tensor *oar_square(oar_tensor *x);
OAR_API oar_tensor *oar_reciprocal(oar_tensor *x);
OAR_API oar_tensor *oar_sin(oar_tensor *x);
OAR_API oar_tensor *oar_cos(oar_tensor *x);
OAR_API oar_tensor *oar_tan(oar_tensor *x);
OAR_API oar_tensor *oar_asin(oar_tensor *x);
OAR_API oar_tensor *oar_acos(oar_tensor *x);
OAR_API oar_tensor *oar_atan(oar_tensor *x);
OAR_API oar_tensor *oar_sinh(oar_tensor *x);
OAR_API oar_tensor *oar_cosh(oar_tensor *x);
OAR_API oar_tensor *oar_tanh(oar_tensor *x);
OAR_API oar_tensor *oar_sigmoid(oar_tensor *x);
OAR_API oar_tensor *oar_relu(oar_tensor *x);
OAR_API oar_tensor *oar_relu6(oar_tensor *x);
OAR_API oar_tensor *oar_leaky_relu(oar_tensor *x, double negative_slope);
OAR_API oar_tensor *oar_elu(oar_tensor *x, double alpha);
/* tanh_approx false: x * Phi(x) with erf; true: the tanh approximation. */
OAR_API oar_tensor *oar_gelu(oar_tensor *x, bool tanh_approx);
OAR_API oar_tensor *oar_silu(oar_tensor *x);
/* log(1 + exp(beta x)) / beta, linear above threshold (PyTorch: 1, 20). */
OAR_API oar_tensor *oar_softplus(oar_tensor *x, double beta, double threshold);
OAR_API oar_tensor *oar_erf(oar_tensor *x);
OAR_API oar_tensor *oar_floor(oar_tensor *x);
OAR_API oar_tensor *oar_ceil(oar_tensor *x);
OAR_API oar_tensor *oar_round(oar_tensor *x);      /* half to even */
OAR_API oar_tensor *oar_trunc(oar_tensor *x);
/* NAN for min or max means no bound on that side. */
OAR_API oar_tensor *oar_clamp(oar_tensor *x, double min, double max);
OAR_API oar_tensor *oar_isnan(oar_tensor *x);      /* bool */
OAR_API oar_tensor *oar_isinf(oar_tensor *x);      /* bool */
OAR_API oar_tensor *oar_logical_not(oar_tensor *x); /* bool */
/* Complex parts; on real inputs real/conj return x and imag fails. */
OAR_API oar_tensor *oar_real(oar_tensor *x);
OAR_API oar_tensor *oar_imag(oar_tensor *x);
OAR_API oar_tensor *oar_conj(oar_tensor *x);
OAR_API oar_tensor *oar_angle(oar_tensor *x);
/* x * relu6(x + 3) / 6, as torch.nn.functional.hardswish; integers -> f32.
 * Gradient: 0 below -3, x / 3 + 1/2 on [-3, 3], 1 above. */
OAR_API oar_tensor *oar_hardswish(oar_tensor *x);

/* ---- binary elementwise (broadcasting) ----------------------------------- */
OAR_API oar_tensor *oar_add(oar_tensor *a, oar_tensor *b);
OAR_API oar_tensor *oar_sub(oar_tensor *a, oar_tensor *b);
OAR_API oar_tensor *oar_mul(oar_tensor *a, oar_tensor *b);
OAR_API oar_tensor *oar_div(oar_tensor *a, oar_tensor *b);       /* true division */
OAR_API oar_tensor *oar_floor_div(oar_tensor *a, oar_tensor *b);
OAR_API oar_tensor *oar_remainder(oar_tensor *a, oar_tensor *b); /* sign of b, as Python */
OAR_API oar_tensor *oar_pow(oar_tensor *a, oar_tensor *b);
OAR_API oar_tensor *oar_atan2(oar_tensor *a, oar_tensor *b);
OAR_API oar_tensor *oar_maximum(oar_tensor *a, oar_tensor *b);
OAR_API oar_tensor *oar_minimum(oar_tensor *a, oar_tensor *b);
OAR_API oar_tensor *oar_eq(oar_tensor *a, oar_tensor *b);        /* comparisons give bool */
OAR_API oar_tensor *oar_ne(oar_tensor *a, oar_tensor *b);
OAR_API oar_tensor *oar_lt(oar_tensor *a, oar_tensor *b);
OAR_API oar_tensor *oar_le(oar_tensor *a, oar_tensor *b);
OAR_API oar_tensor *oar_gt(oar_tensor *a, oar_tensor *b);
OAR_API oar_tensor *oar_ge(oar_tensor *a, oar_tensor *b);
OAR_API oar_tensor *oar_logical_and(oar_tensor *a, oar_tensor *b);
OAR_API oar_tensor *oar_logical_or(oar_tensor *a, oar_tensor *b);
OAR_API oar_tensor *oar_logical_xor(oar_tensor *a, oar_tensor *b);
/* cond ? a : b, all three broadcast; cond is bool. */
OAR_API oar_tensor *oar_where(oar_tensor *cond, oar_tensor *a, oar_tensor *b);
/* With a Python-number-like scalar (oar_scalar rules). */
OAR_API oar_tensor *oar_add_scalar(oar_tensor *x, double v);
OAR_API oar_tensor *oar_sub_scalar(oar_tensor *x, double v);
OAR_API oar_tensor *oar_mul_scalar(oar_tensor *x, double v);
OAR_API oar_tensor *oar_div_scalar(oar_tensor *x, double v);
OAR_API oar_tensor *oar_pow_scalar(oar_tensor *x, double exponent);

/* ---- reductions ------------------------------------------------------------
 * dims: ndims entries (NULL or ndims 0: all dims); keepdim keeps them as 1. */
OAR_API oar_tensor *oar_sum(oar_tensor *x, int ndims, const int64_t *dims, bool keepdim);
OAR_API oar_tensor *oar_mean(oar_tensor *x, int ndims, const int64_t *dims, bool keepdim);
OAR_API oar_tensor *oar_prod(oar_tensor *x, int ndims, const int64_t *dims, bool keepdim);
OAR_API oar_tensor *oar_amax(oar_tensor *x, int ndims, const int64_t *dims, bool keepdim);
OAR_API oar_tensor *oar_amin(oar_tensor *x, int ndims, const int64_t *dims, bool keepdim);
/* The maximum along one dim and, if indices is not NULL, its index (i64). */
OAR_API oar_tensor *oar_max_dim(oar_tensor *x, int dim, bool keepdim, oar_tensor **indices);
OAR_API oar_tensor *oar_min_dim(oar_tensor *x, int dim, bool keepdim, oar_tensor **indices);
/* dim OAR_DIM_ALL: over the flattened tensor. Result i64. */
#define OAR_DIM_ALL INT32_MIN
OAR_API oar_tensor *oar_argmax(oar_tensor *x, int dim, bool keepdim);
OAR_API oar_tensor *oar_argmin(oar_tensor *x, int dim, bool keepdim);
/* correction: 1 for the unbiased estimate, 0 for the population one. */
OAR_API oar_tensor *oar_var(oar_tensor *x, int ndims, const int64_t *dims, double correction,
                            bool keepdim);
OAR_API oar_tensor *oar_std(oar_tensor *x, int ndims, const int64_t *dims, double correction,
                            bool keepdim);
OAR_API oar_tensor *oar_logsumexp(oar_tensor *x, int ndims, const int64_t *dims, bool keepdim);
/* p: 1, 2 or INFINITY. */
OAR_API oar_tensor *oar_norm(oar_tensor *x, double p, int ndims, const int64_t *dims,
                             bool keepdim);
OAR_API oar_tensor *oar_all(oar_tensor *x, int ndims, const int64_t *dims, bool keepdim);
OAR_API oar_tensor *oar_any(oar_tensor *x, int ndims, const int64_t *dims, bool keepdim);
OAR_API oar_tensor *oar_cumsum(oar_tensor *x, int dim);
OAR_API oar_tensor *oar_cumprod(oar_tensor *x, int dim);

/* ---- shape and movement ----------------------------------------------------
 * reshape, permute, transpose, expand, squeeze, unsqueeze, flatten, slice and
 * diagonal return views sharing x's storage when the strides allow (reshape
 * copies otherwise). */
OAR_API oar_tensor *oar_reshape(oar_tensor *x, int ndim, const int64_t *shape); /* one -1 allowed */
OAR_API oar_tensor *oar_permute(oar_tensor *x, const int64_t *dims); /* x's rank entries */
OAR_API oar_tensor *oar_transpose(oar_tensor *x, int dim0, int dim1);
OAR_API oar_tensor *oar_expand(oar_tensor *x, int ndim, const int64_t *shape); /* -1 keeps */
OAR_API oar_tensor *oar_squeeze(oar_tensor *x, int dim);  /* OAR_DIM_ALL: every size-1 dim */
OAR_API oar_tensor *oar_unsqueeze(oar_tensor *x, int dim);
OAR_API oar_tensor *oar_flatten(oar_tensor *x, int start_dim, int end_dim);
/* Elements start, start+step, ... < end along dim; start/end clamp to the
 * size as in Python slicing (negative ones count from the end); step >= 1. */
OAR_API oar_tensor *oar_slice(oar_tensor *x, int dim, int64_t start, int64_t end, int64_t step);
OAR_API oar_tensor *oar_diagonal(oar_tensor *x, int64_t offset, int dim1, int dim2);
OAR_API oar_tensor *oar_contiguous(oar_tensor *x);  /* x itself (retained) if contiguous */
OAR_API oar_tensor *oar_concat(int n, oar_tensor *const *xs, int dim);
OAR_API oar_tensor *oar_stack(int n, oar_tensor *const *xs, int dim);
/* Splits into pieces of split_size along dim (the last may be smaller).
 * Writes up to max_out views to outs; returns the number of pieces, or -1. */
OAR_API int oar_split(oar_tensor *x, int64_t split_size, int dim, int max_out, oar_tensor **outs);
OAR_API int oar_chunk(oar_tensor *x, int chunks, int dim, int max_out, oar_tensor **outs);
typedef enum oar_pad_mode { OAR_PAD_CONSTANT = 0, OAR_PAD_REFLECT = 1, OAR_PAD_REPLICATE = 2 } oar_pad_mode;
/* pads: npads/2 (before, after) pairs starting from the last dim, as
 * torch.nn.functional.pad. */
OAR_API oar_tensor *oar_pad(oar_tensor *x, int npads, const int64_t *pads, oar_pad_mode mode,
                            double value);
OAR_API oar_tensor *oar_flip(oar_tensor *x, int ndims, const int64_t *dims);
OAR_API oar_tensor *oar_roll(oar_tensor *x, int nshifts, const int64_t *shifts, const int64_t *dims);
OAR_API oar_tensor *oar_repeat(oar_tensor *x, int ndim, const int64_t *repeats);
OAR_API oar_tensor *oar_tril(oar_tensor *x, int64_t diagonal);
OAR_API oar_tensor *oar_triu(oar_tensor *x, int64_t diagonal);

/* ---- indexing and sorting ---------------------------------------------------
 * Indices are i64 (i32 accepted); out-of-range indices are an error. */
OAR_API oar_tensor *oar_gather(oar_tensor *x, int dim, oar_tensor *index);
OAR_API oar_tensor *oar_scatter(oar_tensor *x, int dim, oar_tensor *index, oar_tensor *src);
OAR_API oar_tensor *oar_scatter_add(oar_tensor *x, int dim, oar_tensor *index, oar_tensor *src);
OAR_API oar_tensor *oar_index_select(oar_tensor *x, int dim, oar_tensor *index);
OAR_API oar_tensor *oar_index_add(oar_tensor *x, int dim, oar_tensor *index, oar_tensor *src);
OAR_API oar_tensor *oar_masked_fill(oar_tensor *x, oar_tensor *mask, double value);
OAR_API oar_tensor *oar_one_hot(oar_tensor *index, int64_t num_classes); /* i64 result */
/* Sorted values; indices (i64) if not NULL. Stable. */
OAR_API oar_tensor *oar_sort(oar_tensor *x, int dim, bool descending, oar_tensor **indices);
OAR_API oar_tensor *oar_topk(oar_tensor *x, int64_t k, int dim, bool largest, bool sorted,
                             oar_tensor **indices);

/* ---- linear algebra --------------------------------------------------------- */
/* torch.matmul: 1-D, 2-D and batched with broadcasting batch dims. */
OAR_API oar_tensor *oar_matmul(oar_tensor *a, oar_tensor *b);
OAR_API oar_tensor *oar_bmm(oar_tensor *a, oar_tensor *b);   /* [B,n,k] x [B,k,m] */
OAR_API oar_tensor *oar_outer(oar_tensor *a, oar_tensor *b);
OAR_API oar_tensor *oar_dot(oar_tensor *a, oar_tensor *b);   /* 1-D, no conjugation */
/* einsum("bij,bjk->bik", 2, (oar_tensor*[]){a, b}); contractions through matmul. */
OAR_API oar_tensor *oar_einsum(const char *equation, int n, oar_tensor *const *xs);

/* ---- neural-network ops ------------------------------------------------------ */
typedef enum oar_reduction { OAR_REDUCTION_NONE = 0, OAR_REDUCTION_MEAN = 1, OAR_REDUCTION_SUM = 2 } oar_reduction;

OAR_API oar_tensor *oar_softmax(oar_tensor *x, int dim);
OAR_API oar_tensor *oar_log_softmax(oar_tensor *x, int dim);
/* logits [N, C] or [N, C, d...]; target: class indices (i64) [N] or
 * [N, d...], or probabilities shaped like logits. weight: [C] or NULL. */
OAR_API oar_tensor *oar_cross_entropy(oar_tensor *logits, oar_tensor *target, oar_tensor *weight,
                                      int64_t ignore_index, double label_smoothing,
                                      oar_reduction reduction);
OAR_API oar_tensor *oar_nll_loss(oar_tensor *log_probs, oar_tensor *target, oar_tensor *weight,
                                 int64_t ignore_index, oar_reduction reduction);
OAR_API oar_tensor *oar_mse_loss(oar_tensor *input, oar_tensor *target, oar_reduction reduction);
OAR_API oar_tensor *oar_l1_loss(oar_tensor *input, oar_tensor *target, oar_reduction reduction);
OAR_API oar_tensor *oar_smooth_l1_loss(oar_tensor *input, oar_tensor *target, double beta,
                                       oar_reduction reduction);
/* weight, pos_weight may be NULL. */
OAR_API oar_tensor *oar_binary_cross_entropy_with_logits(oar_tensor *logits, oar_tensor *target,
                                                         oar_tensor *weight, oar_tensor *pos_weight,
                                                         oar_reduction reduction);
/* Normalises the last n_norm_dims dims; weight, bias NULL or of that shape. */
OAR_API oar_tensor *oar_layer_norm(oar_tensor *x, int n_norm_dims, oar_tensor *weight,
                                   oar_tensor *bias, double eps);
OAR_API oar_tensor *oar_group_norm(oar_tensor *x, int64_t groups, oar_tensor *weight,
                                   oar_tensor *bias, double eps);
/* x [N, C, ...]. training: batch statistics, and running stats (if given)
 * are updated in place with momentum; eval: running stats are used. */
OAR_API oar_tensor *oar_batch_norm(oar_tensor *x, oar_tensor *running_mean, oar_tensor *running_var,
                                   oar_tensor *weight, oar_tensor *bias, bool training,
                                   double momentum, double eps);
/* Zeroes with probability p and scales by 1/(1-p) when training. */
OAR_API oar_tensor *oar_dropout(oar_tensor *x, double p, bool training);
/* weight [num, dim], indices any shape -> [..., dim]. */
OAR_API oar_tensor *oar_embedding(oar_tensor *weight, oar_tensor *indices);
/* x [N, C, L] (or unbatched [C, L], giving [O, L']), w [O, C/groups, K];
 * bias NULL or [O]. The convolutions take float or complex tensors, input,
 * weight and bias of one dtype (complex: four real convolutions). */
OAR_API oar_tensor *oar_conv1d(oar_tensor *x, oar_tensor *w, oar_tensor *bias, int64_t stride,
                               int64_t padding, int64_t dilation, int64_t groups);
/* x [N, C, H, W] (or unbatched [C, H, W], giving [O, H', W']),
 * w [O, C/groups, kh, kw]; bias NULL or [O]. */
OAR_API oar_tensor *oar_conv2d(oar_tensor *x, oar_tensor *w, oar_tensor *bias,
                               const int64_t stride[2], const int64_t padding[2],
                               const int64_t dilation[2], int64_t groups);
/* x [N, C, H, W] or unbatched [C, H, W]; w [C, O/groups, kh, kw]. */
OAR_API oar_tensor *oar_conv_transpose2d(oar_tensor *x, oar_tensor *w, oar_tensor *bias,
                                         const int64_t stride[2], const int64_t padding[2],
                                         const int64_t output_padding[2],
                                         const int64_t dilation[2], int64_t groups);
/* x [N, C, L] or unbatched [C, L]; w [C, O/groups, K]; bias NULL or [O].
 * Output length (L - 1) stride - 2 padding + dilation (K - 1) +
 * output_padding + 1; output_padding must be smaller than stride or
 * dilation. As torch's conv_transpose1d, with dilation before groups as in
 * oar_conv_transpose2d. Runs as conv_transpose2d with a unit height. */
OAR_API oar_tensor *oar_conv_transpose1d(oar_tensor *x, oar_tensor *w, oar_tensor *bias,
                                         int64_t stride, int64_t padding, int64_t output_padding,
                                         int64_t dilation, int64_t groups);
/* x [N, C, D, H, W] (or unbatched [C, D, H, W], giving [O, D', H', W']),
 * w [O, C/groups, kd, kh, kw]; bias NULL or [O]. Float or complex inputs
 * of one dtype, as the 2-D ones. The arrays are (depth, height, width). */
OAR_API oar_tensor *oar_conv3d(oar_tensor *x, oar_tensor *w, oar_tensor *bias,
                               const int64_t stride[3], const int64_t padding[3],
                               const int64_t dilation[3], int64_t groups);
/* x [N, C, D, H, W] or unbatched [C, D, H, W]; w [C, O/groups, kd, kh, kw];
 * bias NULL or [O]. The adjoint of oar_conv3d; output_padding (added at
 * the far end of each axis) must be smaller than stride or dilation. */
OAR_API oar_tensor *oar_conv_transpose3d(oar_tensor *x, oar_tensor *w, oar_tensor *bias,
                                         const int64_t stride[3], const int64_t padding[3],
                                         const int64_t output_padding[3],
                                         const int64_t dilation[3], int64_t groups);
/* indices (flat index into each H*W plane, i64) written if not NULL. */
OAR_API oar_tensor *oar_max_pool2d(oar_tensor *x, const int64_t kernel[2], const int64_t stride[2],
                                   const int64_t padding[2], const int64_t dilation[2],
                                   bool ceil_mode, oar_tensor **indices);
OAR_API oar_tensor *oar_avg_pool2d(oar_tensor *x, const int64_t kernel[2], const int64_t stride[2],
                                   const int64_t padding[2], bool ceil_mode,
                                   bool count_include_pad);
OAR_API oar_tensor *oar_adaptive_avg_pool2d(oar_tensor *x, const int64_t output_size[2]);
typedef enum oar_interp_mode { OAR_INTERP_NEAREST = 0, OAR_INTERP_BILINEAR = 1 } oar_interp_mode;
OAR_API oar_tensor *oar_interpolate(oar_tensor *x, const int64_t size[2], oar_interp_mode mode,
                                    bool align_corners);
/* q [..., L, E], k [..., S, E], v [..., S, Ev]; mask NULL, bool (true keeps)
 * or additive float, broadcast to [..., L, S]; scale 0: 1/sqrt(E).
 * is_causal (with no mask) keeps key j for query i where j <= i, its mask
 * made on q's device. */
OAR_API oar_tensor *oar_scaled_dot_product_attention(oar_tensor *q, oar_tensor *k, oar_tensor *v,
                                                     oar_tensor *mask, double dropout_p,
                                                     bool is_causal, double scale);

/* One recurrent layer in one direction over a whole sequence, fused (the
 * op behind oar_rnn_new, oar_lstm_new and oar_gru_new of include/oar/nn.h,
 * one call per layer and direction). With T steps, B sequences, I inputs,
 * H hidden units and G gates (1 tanh/relu, 3 GRU, 4 LSTM):
 *   x [T, B, I]; h0 [B, H]; c0 [B, H] for OAR_RNN_LSTM (NULL otherwise);
 *   w_ih [G*H, I], w_hh [G*H, H], b_ih and b_hh [G*H] or NULL, gate blocks
 *   in PyTorch's order (GRU r, z, n; LSTM i, f, g, o) and formulas
 *   (torch.nn.RNN/GRU/LSTM); all of x's dtype, float32 or float64;
 *   lengths NULL or int64 [B], each in [0, T]: steps at or past lengths[b]
 *   give zeros in y and leave the state alone (reverse starts at step
 *   lengths[b] - 1), as a packed sequence does.
 * reverse runs the steps from T-1 down to 0. Writes, where not NULL, *y
 * [T, B, H] (h after every step), *h_n and (LSTM) *c_n [B, H], the final
 * states; they follow the pool rule. Differentiable to any order.
 * Returns 0, or a status with oar_last_error() naming rnn_layer or
 * lstm_layer, the cell and the shapes (a length out of range is reported
 * when the kernel runs); the outputs are then NULL. */
typedef enum oar_rnn_cell {
    OAR_RNN_TANH = 0,
    OAR_RNN_RELU = 1,
    OAR_RNN_GRU = 2,
    OAR_RNN_LSTM = 3,
} oar_rnn_cell;
OAR_API int oar_rnn_layer(oar_rnn_cell cell, bool reverse, oar_tensor *x, oar_tensor *h0,
                          oar_tensor *c0, oar_tensor *w_ih, oar_tensor *w_hh, oar_tensor *b_ih,
                          oar_tensor *b_hh, oar_tensor *lengths, oar_tensor **y,
                          oar_tensor **h_n, oar_tensor **c_n);

/* ---- quantization ------------------------------------------------------------ */
/* Affine quantization to plain int8/uint8 tensors; the scale and zero point
 * are passed around beside them (ONNX's QuantizeLinear/DequantizeLinear).
 * quantize: q = clamp(zp + round(x * (1 / scale)), dtype's range), rounding
 * half to even, the product in x's float dtype (f32 for f16/bf16; an f32 x
 * uses the scale as a float), as torch.quantize_per_tensor(...).int_repr()
 * and torch.quantize_per_channel on x86: NaN and +-inf give the dtype's
 * minimum. dtype is OAR_I8 or OAR_U8; x real float. Per channel: scales
 * (float) and zero_points (integer) are 1-d of x's size along axis
 * (negative counts from the end). oar_quantize is ONNX's QuantizeLinear:
 * round(x / scale) (a division: it can differ from the reciprocal's
 * product at a tie), a 0-d or one-element scale per tensor, a 1-d one
 * along axis, zero_point NULL meaning 0. dequantize: (q - zp) * scale as f32, for int8,
 * uint8 or int32 (ONNX's bias) q, per tensor or along axis like
 * oar_quantize, multiplied at the scale's precision (an f32 scale: one
 * float product, as torch per tensor and ONNX; f64: torch's per-channel
 * double scales). Not differentiable. NULL with an error naming the op and
 * the shapes for: a complex or integer x, a scale that is not positive and
 * finite, a zero point outside dtype's range, an axis out of range, a
 * scale count that is not x's size along axis. */
OAR_API oar_tensor *oar_quantize_per_tensor(oar_tensor *x, double scale, int64_t zero_point, oar_dtype dtype);
OAR_API oar_tensor *oar_quantize_per_channel(oar_tensor *x, oar_tensor *scales, oar_tensor *zero_points,
                                             int axis, oar_dtype dtype);
OAR_API oar_tensor *oar_quantize(oar_tensor *x, oar_tensor *scale, oar_tensor *zero_point, int axis,
                                 oar_dtype dtype);
OAR_API oar_tensor *oar_dequantize(oar_tensor *q, oar_tensor *scale, oar_tensor *zero_point, int axis);
/* Fake quantization, torch.fake_quantize_per_tensor_affine and
 * _per_channel_affine: (clamp(zp + round(x * (1 / scale)), quant_min,
 * quant_max) - zp) * scale in x's dtype. Its gradient is the
 * straight-through estimator, not the forward's derivative: dy where
 * zp + round(x / scale) lies in [quant_min, quant_max], else 0 (none to
 * scale and zero point); differentiable again (the mask is a constant).
 * Fails as above, and when quant_min > quant_max or the zero point is
 * outside [quant_min, quant_max]. */
OAR_API oar_tensor *oar_fake_quantize_per_tensor(oar_tensor *x, double scale, int64_t zero_point,
                                                 int64_t quant_min, int64_t quant_max);
OAR_API oar_tensor *oar_fake_quantize_per_channel(oar_tensor *x, oar_tensor *scales, oar_tensor *zero_points,
                                                  int axis, int64_t quant_min, int64_t quant_max);
/* The most terms an int8 product sums (qmatmul's k, qconv2d's c/groups *
 * kh * kw): each is at most 255 * 128 in magnitude, so every int32 sum of
 * this many is exact. */
#define OAR_QMATMUL_MAX_K ((int64_t)(2147483647 / (255 * 128)))
/* int8 products (docs/quantization.md). qmatmul: (a - a_zero_point) @ b as
 * int32, exact: a uint8 or int8 [..., m, k] (a quantized activation,
 * a_zero_point in its dtype's range), b int8 [k, n] (a symmetric weight,
 * zero point 0), int32 accumulation of k <= 65793 terms (no overflow); on
 * the CPU through oneDNN's VNNI kernels where built with OAR_WITH_DNNL and
 * a and b are dense, else an exact integer loop. qlinear: the layer
 * y = dequantized (xq - x_zero_point) @ wq * (x_scale * w_scales[j]) + bias
 * as f32 [..., m, n]: w_scales a 0-d or 1-d float tensor of one or n
 * scales (per output channel), bias f32 [n] or NULL. Not differentiable.
 * NULL with an error naming the op for: a float, complex or int32 a, a b
 * that is not int8, shapes that do not multiply, a zero point outside a's
 * range, x_scale not positive and finite, a wrong scale count, and a device
 * without an int8 kernel (a plugin device that lacks qmatmul: the planner
 * runs the CPU's on copies, warning once). */
OAR_API oar_tensor *oar_qmatmul(oar_tensor *a, int64_t a_zero_point, oar_tensor *b);
OAR_API oar_tensor *oar_qlinear(oar_tensor *xq, double x_scale, int64_t x_zero_point, oar_tensor *wq,
                                oar_tensor *w_scales, oar_tensor *bias);
/* int8 conv2d: conv2d(x - x_zero_point, w) as int32, exact, x uint8 or
 * int8 [n, c, h, w], w int8 [o, c/groups, kh, kw] (symmetric), stride,
 * padding (both sides) and dilation as oar_conv2d's (NULL: 1, 0, 1); a
 * padded tap adds 0. Runs as im2col onto the int8 product (oneDNN's VNNI
 * kernel where built with it). NULL with an error for the dtypes and zero
 * points refused as qmatmul's, shapes that do not convolve, a stride or
 * dilation < 1, negative padding, a kernel larger than the padded input,
 * more than 65793 terms per output. */
OAR_API oar_tensor *oar_qconv2d(oar_tensor *x, int64_t x_zero_point, oar_tensor *w, const int64_t stride[2],
                                const int64_t padding[2], const int64_t dilation[2], int64_t groups);

/* ---- copies, casts, in-place ------------------------------------------------- */
OAR_API oar_tensor *oar_cast(oar_tensor *x, oar_dtype dtype);  /* x itself (retained) if same */
OAR_API oar_tensor *oar_clone(oar_tensor *x);                  /* always a fresh copy */
/* Shares storage, never requires grad. */
OAR_API oar_tensor *oar_detach(oar_tensor *x);
/* In place; 0 on success. copy_ broadcasts and casts src into dst. */
OAR_API int oar_fill_(oar_tensor *t, double value);
OAR_API int oar_copy_(oar_tensor *dst, oar_tensor *src);
/* dst += alpha * src in place (torch's dst.add_(src, alpha=alpha)), in one
 * pass: src broadcasts to dst's shape and is cast to dst's dtype, which
 * must be float or complex. Not differentiable: like copy_, it fails on a
 * dst that requires grad unless under oar_no_grad_push (an optimizer
 * update). 0 on success; an error naming add_scaled_ and the shapes or
 * dtypes otherwise. */
OAR_API int oar_add_scaled_(oar_tensor *dst, oar_tensor *src, double alpha);

#ifdef __cplusplus
}
#endif
#endif

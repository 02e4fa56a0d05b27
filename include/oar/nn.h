/* Neural-network modules: a module owns named parameters and buffers and
 * named child modules ("features.0.weight"), has a train/eval mode and a
 * forward function. Built-in layers (Linear, Conv2d, BatchNorm, LayerNorm,
 * Embedding, Dropout, activations, pooling, Flatten, Sequential, the
 * Transformer blocks, RNN/LSTM/GRU) and the initialisers PyTorch uses by
 * default.
 *
 *     oar_module *net = oar_sequential_new(3, (oar_module *[]){
 *         oar_linear_new(784, 128, true), oar_relu_new(), oar_linear_new(128, 10, true)});
 *     oar_tensor *logits = oar_module_forward(net, x);   // pool-owned
 *     oar_module_free(net);
 *
 * Parameters and buffers are retained by their module (not pool-owned),
 * parameters require grad. Constructors draw their initial values from the
 * global generator (oar_manual_seed). */
#ifndef OAR_NN_H
#define OAR_NN_H

#include <oar/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct oar_module oar_module;

/* The forward function of a module: returns a result owned as an op's
 * result is (innermost pool), or NULL with an error set. */
typedef oar_tensor *(*oar_module_forward_fn)(oar_module *m, oar_tensor *x);

/* ---- the module system ---------------------------------------------------- */

/* A new empty module of the given type name ("MyBlock"). forward may be
 * NULL (the module then only groups children). ctx is user data; free_ctx
 * (optional) is called on it when the module is freed. NULL on failure. */
OAR_API oar_module *oar_module_new(const char *type_name, oar_module_forward_fn forward, void *ctx,
                                   void (*free_ctx)(void *ctx));
/* Frees the module, its children, and drops its references to parameters
 * and buffers. NULL is ignored. */
OAR_API void oar_module_free(oar_module *m);
OAR_API const char *oar_module_type(const oar_module *m);
OAR_API void *oar_module_ctx(const oar_module *m);

/* Registers t under `name` (no dots) and retains it. Parameters are made
 * to require grad. A NULL t, a duplicate or malformed name is an error
 * (non-zero status); on error t is not retained. */
OAR_API int oar_module_add_parameter(oar_module *m, const char *name, oar_tensor *t);
OAR_API int oar_module_add_buffer(oar_module *m, const char *name, oar_tensor *t);
/* Adds a child under `name`; the parent takes ownership of the child, even
 * on failure (then the child is freed) -- except when the child already
 * has a parent, which is an error that leaves it with that parent. */
OAR_API int oar_module_add_child(oar_module *m, const char *name, oar_module *child);

/* Runs m's forward function. */
OAR_API oar_tensor *oar_module_forward(oar_module *m, oar_tensor *x);
/* oar_module_forward(m, x) as one recompute segment (oar_checkpoint in
 * <oar/autograd.h>, torch.utils.checkpoint around a module's forward): m's
 * intermediate tensors are not kept for backward but computed again
 * there, with the same dropout masks; m's parameters get the same
 * gradients as without it. m must live until the backward pass. NULL m or
 * x, or a failing forward, is an error naming the module (NULL). */
OAR_API oar_tensor *oar_module_checkpoint(oar_module *m, oar_tensor *x);

/* Sets training mode (true) or eval mode (false) on m and all children. */
OAR_API void oar_module_train(oar_module *m, bool training);
OAR_API bool oar_module_is_training(const oar_module *m);

/* A child by name ("features" or dotted "features.0"); borrowed, NULL if
 * absent (with an error). */
OAR_API oar_module *oar_module_child(oar_module *m, const char *name);
OAR_API int oar_module_num_children(const oar_module *m);
/* The i-th direct child (borrowed), NULL if out of range. */
OAR_API oar_module *oar_module_child_at(oar_module *m, int i);

/* A parameter or buffer by dotted name ("features.0.weight"); borrowed,
 * NULL if absent (with an error). */
OAR_API oar_tensor *oar_module_get(oar_module *m, const char *name);
/* Puts t (retained) in the place of the parameter or buffer `name`, which
 * it must match in dtype and shape (a dtensor matches by its global shape;
 * oar_parallelize uses this). A parameter's replacement requires grad as
 * the old one did. Invalidates state arrays obtained before. 0 or an error. */
OAR_API int oar_module_set(oar_module *m, const char *name, oar_tensor *t);

/* One entry of a module's state: a parameter or a buffer with its full
 * dotted name. */
typedef struct oar_state_entry {
    const char *name;
    oar_tensor *tensor; /* borrowed */
    bool is_parameter;
} oar_state_entry;

/* All parameters and buffers of m and its children, depth first in
 * registration order (a module's own tensors before its children's). Sets
 * *entries to an array owned by m, valid until m's structure changes or m
 * is freed; returns the count, or -1 on failure. */
OAR_API int oar_module_state(oar_module *m, const oar_state_entry **entries);

/* Writes up to max borrowed parameter pointers (not buffers) to out, in
 * state order, and returns the total number of parameters (-1 on error).
 * Call with out NULL to count. */
OAR_API int oar_module_parameters(oar_module *m, oar_tensor **out, int max);
/* Total number of parameter elements. */
OAR_API int64_t oar_module_num_elements(oar_module *m);

/* Drops the gradient of every parameter (PyTorch's set_to_none). */
OAR_API void oar_module_zero_grad(oar_module *m);

/* ---- built-in modules (NULL with an error on bad arguments) ---------------- */

/* y = x W^T + b; weight [out, in], bias [out]. */
OAR_API oar_module *oar_linear_new(int64_t in_features, int64_t out_features, bool bias);
/* weight [out, in/groups, kh, kw]; bias [out]. Square kernel, symmetric
 * stride/padding/dilation. */
OAR_API oar_module *oar_conv2d_new(int64_t in_channels, int64_t out_channels, int64_t kernel,
                                   int64_t stride, int64_t padding, int64_t dilation,
                                   int64_t groups, bool bias);
/* weight, bias [C] (if affine); buffers running_mean, running_var [C],
 * num_batches_tracked (i64 scalar). Input [N, C, H, W] (2d) or [N, C] /
 * [N, C, L] (1d). */
OAR_API oar_module *oar_batch_norm2d_new(int64_t num_features, double eps, double momentum,
                                         bool affine);
OAR_API oar_module *oar_batch_norm1d_new(int64_t num_features, double eps, double momentum,
                                         bool affine);
/* Normalises the last ndim dims of shape `normalized_shape`. */
OAR_API oar_module *oar_layer_norm_new(int ndim, const int64_t *normalized_shape, double eps,
                                       bool elementwise_affine);
/* weight [num, dim] ~ N(0, 1); input: indices of any shape. */
OAR_API oar_module *oar_embedding_new(int64_t num_embeddings, int64_t embedding_dim);
OAR_API oar_module *oar_dropout_new(double p);
OAR_API oar_module *oar_relu_new(void);
OAR_API oar_module *oar_gelu_new(bool tanh_approx);
OAR_API oar_module *oar_tanh_new(void);
/* stride 0 means stride = kernel. */
OAR_API oar_module *oar_max_pool2d_new(int64_t kernel, int64_t stride, int64_t padding);
OAR_API oar_module *oar_avg_pool2d_new(int64_t kernel, int64_t stride, int64_t padding);
/* Flattens dims start_dim..end_dim (PyTorch's nn.Flatten: 1, -1). */
OAR_API oar_module *oar_flatten_new(int start_dim, int end_dim);
/* Runs its children in order; they are named "0", "1", ... Takes ownership
 * of the n modules (freed on failure; a NULL among them fails). */
OAR_API oar_module *oar_sequential_new(int n, oar_module *const *mods);
OAR_API int oar_sequential_append(oar_module *seq, oar_module *m);

/* weight [out, in/groups, k]; bias [out]. Input [N, C, L]. PyTorch's
 * default initialisation (kaiming_uniform a = sqrt(5), bias U(+-1/sqrt(fan_in))). */
OAR_API oar_module *oar_conv1d_new(int64_t in_channels, int64_t out_channels, int64_t kernel,
                                   int64_t stride, int64_t padding, int64_t dilation,
                                   int64_t groups, bool bias);
/* weight [in, out/groups, k, k]; bias [out]. Square kernel, symmetric
 * stride/padding/output_padding/dilation; output_padding must be smaller
 * than stride or dilation. Initialised as torch.nn.ConvTranspose2d. */
OAR_API oar_module *oar_conv_transpose2d_new(int64_t in_channels, int64_t out_channels,
                                             int64_t kernel, int64_t stride, int64_t padding,
                                             int64_t output_padding, int64_t dilation,
                                             int64_t groups, bool bias);
/* weight [out, in/groups, k, k, k]; bias [out]. Input [N, C, D, H, W] (or
 * unbatched [C, D, H, W]). Cubic kernel, the same stride/padding/dilation
 * on every axis. Initialised as torch.nn.Conv3d. */
OAR_API oar_module *oar_conv3d_new(int64_t in_channels, int64_t out_channels, int64_t kernel,
                                   int64_t stride, int64_t padding, int64_t dilation,
                                   int64_t groups, bool bias);
/* weight [in, out/groups, k]; bias [out]. Input [N, C, L] (or [C, L]);
 * output_padding must be smaller than stride or dilation. Initialised as
 * torch.nn.ConvTranspose1d. */
OAR_API oar_module *oar_conv_transpose1d_new(int64_t in_channels, int64_t out_channels,
                                             int64_t kernel, int64_t stride, int64_t padding,
                                             int64_t output_padding, int64_t dilation,
                                             int64_t groups, bool bias);
/* weight [in, out/groups, k, k, k]; bias [out]. Input [N, C, D, H, W] (or
 * [C, D, H, W]); cubic kernel, the same stride/padding/output_padding/
 * dilation on every axis. Initialised as torch.nn.ConvTranspose3d. */
OAR_API oar_module *oar_conv_transpose3d_new(int64_t in_channels, int64_t out_channels,
                                             int64_t kernel, int64_t stride, int64_t padding,
                                             int64_t output_padding, int64_t dilation,
                                             int64_t groups, bool bias);
/* Normalises groups of num_channels / num_groups channels of [N, C, ...];
 * weight (ones), bias (zeros) [C] if affine. */
OAR_API oar_module *oar_group_norm_new(int64_t num_groups, int64_t num_channels, double eps,
                                       bool affine);
/* Average pooling of [N, C, H, W] to [N, C, out_h, out_w]. */
OAR_API oar_module *oar_adaptive_avg_pool2d_new(int64_t out_h, int64_t out_w);
/* Elementwise activations as modules (the ops of the same name). softplus:
 * beta > 0 (PyTorch default 1), linear above threshold (default 20);
 * leaky_relu: PyTorch default slope 0.01; elu: default alpha 1. */
OAR_API oar_module *oar_sigmoid_new(void);
OAR_API oar_module *oar_silu_new(void);
OAR_API oar_module *oar_softplus_new(double beta, double threshold);
OAR_API oar_module *oar_leaky_relu_new(double negative_slope);
OAR_API oar_module *oar_elu_new(double alpha);

/* ---- initialisers (in place, without recording gradients; 0 on success) --- */
OAR_API int oar_init_uniform_(oar_tensor *t, double low, double high);
OAR_API int oar_init_normal_(oar_tensor *t, double mean, double std);
OAR_API int oar_init_zeros_(oar_tensor *t);
OAR_API int oar_init_ones_(oar_tensor *t);
/* U(-a, a), a = gain * sqrt(6 / (fan_in + fan_out)). */
OAR_API int oar_init_xavier_uniform_(oar_tensor *t, double gain);
/* U(-b, b), b = sqrt(2 / (1 + a^2)) * sqrt(3 / fan_in), the leaky_relu
 * gain (torch.nn.init.kaiming_uniform_ with mode fan_in). Linear and
 * Conv2d weights use a = sqrt(5). */
OAR_API int oar_init_kaiming_uniform_(oar_tensor *t, double a);
/* fan_in and fan_out of a weight shape as PyTorch computes them
 * (dims >= 2); 0 on success. */
OAR_API int oar_init_fans(const oar_tensor *t, int64_t *fan_in, int64_t *fan_out);

/* ==== Transformer (src/nn/transformer.c) ====================================
 * Multi-head attention and the Transformer encoder layer, batch first
 * ([N, L, E]; an unbatched [L, E] input is accepted too). Parameter names
 * and initialisation follow torch.nn.MultiheadAttention and
 * torch.nn.TransformerEncoderLayer, so their state dicts load by name:
 * "self_attn.in_proj_weight" [3E, E], "self_attn.in_proj_bias" [3E],
 * "self_attn.out_proj.weight" [E, E], "self_attn.out_proj.bias",
 * "linear1.weight" [F, E], "linear1.bias", "linear2.weight" [E, F],
 * "linear2.bias", "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias".
 *
 * Masks use PyTorch's MultiheadAttention meaning: a bool mask is true where
 * attention is NOT allowed; a floating mask is added to the attention
 * scores. attn_mask is [L, S] or [N * num_heads, L, S]; key_padding_mask is
 * [N, S] (true marks padding keys). A query row with every key masked gives
 * NaN, as in PyTorch. The GPT block (a pre-norm causal layer), its cached
 * forward over a KV cache, a GPT model and generation are in
 * <oar/generate.h>. */

/* Multi-head attention as a function of its weights
 * (torch.nn.functional.multi_head_attention_forward, batch first, no
 * attention weights returned). query [N, L, E], key [N, S, E], value
 * [N, S, E]; in_proj_weight [3E, E] holds the q, k, v projections stacked;
 * in_proj_bias [3E] or NULL; out_proj_weight [E, E]; out_proj_bias [E] or
 * NULL. E must divide by num_heads. is_causal masks future keys (j > i),
 * combined with any other mask. dropout_p applies to the attention weights
 * (always; pass 0 in eval mode). Returns [N, L, E] (pool rule), or NULL with
 * an error naming "multi_head_attention" and the shapes. */
OAR_API oar_tensor *oar_multi_head_attention(oar_tensor *query, oar_tensor *key, oar_tensor *value,
                                             int64_t num_heads, oar_tensor *in_proj_weight,
                                             oar_tensor *in_proj_bias, oar_tensor *out_proj_weight,
                                             oar_tensor *out_proj_bias,
                                             oar_tensor *key_padding_mask, oar_tensor *attn_mask,
                                             bool is_causal, double dropout_p);

/* A MultiheadAttention module (f32): parameters in_proj_weight
 * (xavier_uniform), in_proj_bias (zeros, if bias), child "out_proj" (a
 * Linear with zero bias). dropout applies to attention weights in training
 * mode. oar_module_forward(m, x) is self-attention on x, causal if
 * `causal`. NULL with an error on bad sizes. */
OAR_API oar_module *oar_multihead_attention_new(int64_t embed_dim, int64_t num_heads,
                                                double dropout, bool bias, bool causal);
/* The full call of a MultiheadAttention module: masks may be NULL; the
 * module's own causal flag is ignored in favour of is_causal. Result as
 * oar_multi_head_attention. */
OAR_API oar_tensor *oar_multihead_attention_forward(oar_module *m, oar_tensor *query,
                                                    oar_tensor *key, oar_tensor *value,
                                                    oar_tensor *key_padding_mask,
                                                    oar_tensor *attn_mask, bool is_causal);

typedef enum oar_activation {
    OAR_ACTIVATION_RELU = 0,
    OAR_ACTIVATION_GELU = 1, /* exact (erf) GELU */
} oar_activation;

/* Options of oar_transformer_encoder_layer_new. Zero-valued fields give the
 * defaults noted, so `&(oar_transformer_options){.dim_feedforward = 512}`
 * reads well. Unlike PyTorch, dropout defaults to none. */
typedef struct oar_transformer_options {
    int64_t dim_feedforward;   /* 0: 2048, as PyTorch */
    double dropout;            /* on attention weights, after attention, inside and after the
                                  feed-forward block (training mode); 0: none */
    oar_activation activation; /* of the feed-forward block; default ReLU */
    double layer_norm_eps;     /* 0: 1e-5 */
    bool norm_first;           /* pre-norm (x + f(norm(x))); false: post-norm (norm(x + f(x))) */
    bool causal;               /* oar_module_forward masks future positions */
    bool no_bias;              /* drop the biases of the linear layers and of attention (not
                                  of the norms) */
    oar_dtype dtype;           /* of the parameters: OAR_F32 (also for 0) or OAR_F64 */
} oar_transformer_options;

/* A TransformerEncoderLayer (o may be NULL for all defaults). Children:
 * self_attn, linear1, dropout, linear2, norm1, norm2, dropout1, dropout2.
 * oar_module_forward(m, x) runs it on x [N, L, d_model], causal if
 * o->causal. NULL with an error on bad sizes or options. */
OAR_API oar_module *oar_transformer_encoder_layer_new(int64_t d_model, int64_t nhead,
                                                      const oar_transformer_options *o);
/* The full call: src_mask ([L, S] or [N * nhead, L, S]) and
 * src_key_padding_mask ([N, S]) may be NULL; is_causal replaces the
 * module's own flag. Returns [N, L, d_model] (pool rule) or NULL. */
OAR_API oar_tensor *oar_transformer_encoder_layer_forward(oar_module *m, oar_tensor *src,
                                                          oar_tensor *src_mask,
                                                          oar_tensor *src_key_padding_mask,
                                                          bool is_causal);
/* ==== end of Transformer ===================================================== */

/* ==== Recurrent layers (src/nn/rnn.c) ======================================
 * RNN (tanh or ReLU), LSTM and GRU, matching torch.nn.RNN, torch.nn.LSTM and
 * torch.nn.GRU: the same parameter names, shapes, gate order and default
 * initialisation (every parameter U(-1/sqrt(hidden), 1/sqrt(hidden))), so
 * their state dicts load by name. With G = 1 (RNN), 4 (LSTM) or 3 (GRU),
 * D = 2 if bidirectional else 1, layer k in 0..num_layers-1, and the
 * reverse direction's names suffixed "_reverse", each layer registers, in
 * PyTorch's order:
 *     weight_ih_l{k}[_reverse]  [G * hidden, k ? D * hidden : input_size]
 *     weight_hh_l{k}[_reverse]  [G * hidden, hidden]
 *     bias_ih_l{k}[_reverse]    [G * hidden]   (unless no_bias)
 *     bias_hh_l{k}[_reverse]    [G * hidden]   (unless no_bias)
 * Gate blocks are stacked in the rows as PyTorch stacks them: LSTM i, f,
 * g, o (c' = f * c + i * g, h' = o * tanh(c')); GRU r, z, n (n = tanh(W_in
 * x + b_in + r * (W_hn h + b_hn)), h' = (1 - z) * n + z * h); RNN h' =
 * tanh or relu(W_ih x + b_ih + W_hh h + b_hh).
 *
 * Each layer and direction is one call of the fused op oar_rnn_layer
 * (include/oar/ops.h: a CPU kernel, a gradient rule written with ops, so
 * gradients of any order; ONNX export as RNN / GRU / LSTM nodes). Other
 * devices run the op on the CPU with copies. No proj_size (LSTM
 * projections). */

/* Options of oar_rnn_new, oar_lstm_new and oar_gru_new. Zero-valued fields
 * give PyTorch's defaults, so `&(oar_rnn_options){.num_layers = 2}` reads
 * well; o NULL means all defaults. */
typedef struct oar_rnn_options {
    int64_t num_layers; /* stacked layers; 0: 1 */
    bool bidirectional; /* a reverse direction per layer, outputs concatenated (fwd, rev) */
    bool batch_first;   /* input and output [batch, seq_len, *] instead of [seq_len, batch, *]
                           (not the states, which stay [D * num_layers, batch, hidden]) */
    bool no_bias;       /* PyTorch's bias=False: no bias_ih / bias_hh */
    double dropout;     /* in [0, 1]: dropout on the output of every layer but the last, in
                           training mode only; 0: none */
    bool relu;          /* RNN only: nonlinearity='relu' instead of tanh (an error for LSTM/GRU) */
    oar_dtype dtype;    /* of the parameters: OAR_F32 (also for 0) or OAR_F64 */
} oar_rnn_options;

/* An Elman RNN (torch.nn.RNN), an LSTM (torch.nn.LSTM) or a GRU
 * (torch.nn.GRU) of input_size features to hidden_size; options as above
 * (NULL: defaults). Module types "RNN", "LSTM", "GRU". NULL with an error
 * naming the module on a non-positive size or num_layers, a dropout outside
 * [0, 1], a dtype other than f32/f64, or relu for LSTM/GRU.
 * oar_module_forward(m, x) runs oar_rnn_forward(m, x, NULL, NULL, NULL,
 * NULL, NULL) and returns the output only. */
OAR_API oar_module *oar_rnn_new(int64_t input_size, int64_t hidden_size, const oar_rnn_options *o);
OAR_API oar_module *oar_lstm_new(int64_t input_size, int64_t hidden_size, const oar_rnn_options *o);
OAR_API oar_module *oar_gru_new(int64_t input_size, int64_t hidden_size, const oar_rnn_options *o);

/* The full call of an RNN, LSTM or GRU module (PyTorch's module(input, hx)
 * with hx = h0 or (h0, c0)). With T = seq_len, N = batch, D and H as above:
 *   input    [T, N, input_size] ([N, T, input_size] if batch_first), or
 *            unbatched [T, input_size]; the parameters' dtype.
 *   h0       [D * num_layers, N, H] (unbatched: [D * num_layers, H]), or
 *            NULL for zeros; index layer * D + direction, as PyTorch.
 *   c0       LSTM only (an error otherwise): the initial cell state, same
 *            shape as h0, NULL for zeros (h0 and c0 may each be NULL).
 *   lengths  NULL, or int64 [N] (host or device) with 1 <= lengths[b] <= T,
 *            in any order: the valid steps of each sequence, as
 *            pack_padded_sequence(input, lengths, enforce_sorted=False)
 *            fed to the module and pad_packed_sequence(total_length=T) on
 *            the output. Steps at or past lengths[b] give zeros in the
 *            output and leave the state alone, so h_n / c_n hold the state
 *            at the last valid step (for the reverse direction, which
 *            starts at step lengths[b] - 1, the state after step 0).
 *            Batched input only.
 * Returns the output [T, N, D * H] ([N, T, D * H] if batch_first;
 * unbatched [T, D * H]), the last layer's h at every step with the two
 * directions concatenated. Writes, when not NULL, *h_n [D * num_layers, N,
 * H] (unbatched [D * num_layers, H]) and, for an LSTM, *c_n (the same
 * shape; NULL for RNN/GRU). All results follow the pool rule (innermost
 * pool). Dropout between layers applies in training mode only.
 * On failure returns NULL with oar_last_error() naming the module ("LSTM:
 * ...") and what is wrong: m NULL or not a recurrent module, input NULL,
 * not 2-D/3-D or of the wrong feature size, a dtype other than the
 * parameters' (non-float included), h0/c0 of the wrong shape or dtype, c0
 * for a non-LSTM, lengths not int64 [N], a length < 1 or > T, lengths with
 * an unbatched input; *h_n and *c_n are then NULL. */
OAR_API oar_tensor *oar_rnn_forward(oar_module *m, oar_tensor *input, oar_tensor *h0,
                                    oar_tensor *c0, oar_tensor *lengths, oar_tensor **h_n,
                                    oar_tensor **c_n);
/* ==== end of recurrent layers ================================================ */

#ifdef __cplusplus
}
#endif
#endif

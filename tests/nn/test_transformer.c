/* MultiheadAttention and TransformerEncoderLayer (src/nn/transformer.c):
 * outputs and gradients against PyTorch for fixed weights
 * (tests/ref/gen_transformer.py), parameter names and initialisation,
 * float64 gradchecks of tiny configurations (first and second order),
 * and bad-input errors. */
#include "gradcheck.h"
#include "test.h"

#include <oar/nn.h>

#include "ref/transformer_ref.h"

#define TOL 1e-10
#define N 2
#define E 8
#define H 2

static oar_tensor *f64(const double *v, int ndim, const int64_t *shape) {
    return oar_tensor_from_data(v, OAR_F64, ndim, shape);
}

static oar_tensor *leaf(const double *v, int ndim, const int64_t *shape) {
    oar_tensor *t = f64(v, ndim, shape);
    oar_tensor_set_requires_grad(t, true);
    return t;
}

/* A bool tensor from 0/1 doubles. */
static oar_tensor *mask_of(const double *v, int ndim, const int64_t *shape) {
    return oar_cast(f64(v, ndim, shape), OAR_BOOL);
}

static oar_tensor *weighted_sum(oar_tensor *y, const double *r) {
    return oar_sum(oar_mul(y, f64(r, oar_tensor_ndim(y), oar_tensor_shape(y))), 0, NULL, false);
}

/* ---- MultiheadAttention against PyTorch ------------------------------------ */

static void test_mha_self_matches_torch(void) {
    oar_pool *p = oar_pool_push();
    int64_t xs[3] = {N, 5, E}, iw[2] = {3 * E, E}, ib = 3 * E, ow[2] = {E, E}, ob = E,
            ks[2] = {N, 5}, cs[2] = {5, 5};
    oar_tensor *x = leaf(mha_self_x, 3, xs);
    oar_tensor *w[4] = {leaf(mha_self_p0, 2, iw), leaf(mha_self_p1, 1, &ib),
                        leaf(mha_self_p2, 2, ow), leaf(mha_self_p3, 1, &ob)};
    oar_tensor *kpm = mask_of(mha_self_kpm, 2, ks);
    /* PyTorch got the causal mask as a bool attn_mask; is_causal must agree */
    oar_tensor *y =
        oar_multi_head_attention(x, x, x, H, w[0], w[1], w[2], w[3], kpm, NULL, true, 0.0);
    CHECK_VALUES(y, mha_self_y, N * 5 * E, TOL);
    oar_tensor *causal = oar_triu(oar_ones(OAR_BOOL, 2, cs), 1);
    oar_tensor *y2 =
        oar_multi_head_attention(x, x, x, H, w[0], w[1], w[2], w[3], kpm, causal, false, 0.0);
    CHECK_VALUES(y2, mha_self_y, N * 5 * E, TOL);
    CHECK(oar_backward(weighted_sum(y, mha_self_r), NULL) == 0);
    CHECK_VALUES(oar_tensor_grad(x), mha_self_gx, N * 5 * E, TOL);
    const double *g[4] = {mha_self_g0, mha_self_g1, mha_self_g2, mha_self_g3};
    for (int i = 0; i < 4; i++)
        CHECK_VALUES(oar_tensor_grad(w[i]), g[i], oar_tensor_numel(w[i]), TOL);
    oar_pool_pop(p);
}

static void test_mha_cross_matches_torch(void) {
    oar_pool *p = oar_pool_push();
    int64_t qs[3] = {N, 4, E}, ks[3] = {N, 6, E}, iw[2] = {3 * E, E}, ib = 3 * E, ow[2] = {E, E},
            ob = E, ms[2] = {4, 6}, bs[3] = {N * H, 4, 6};
    oar_tensor *q = leaf(mha_cross_q, 3, qs), *k = leaf(mha_cross_k, 3, ks),
               *v = leaf(mha_cross_v, 3, ks);
    oar_tensor *w[4] = {leaf(mha_cross_p0, 2, iw), leaf(mha_cross_p1, 1, &ib),
                        leaf(mha_cross_p2, 2, ow), leaf(mha_cross_p3, 1, &ob)};
    oar_tensor *y = oar_multi_head_attention(q, k, v, H, w[0], w[1], w[2], w[3], NULL,
                                             f64(mha_cross_fmask, 2, ms), false, 0.0);
    CHECK_VALUES(y, mha_cross_y, N * 4 * E, TOL);
    CHECK(oar_backward(weighted_sum(y, mha_cross_r), NULL) == 0);
    CHECK_VALUES(oar_tensor_grad(q), mha_cross_gq, N * 4 * E, TOL);
    CHECK_VALUES(oar_tensor_grad(k), mha_cross_gk, N * 6 * E, TOL);
    CHECK_VALUES(oar_tensor_grad(v), mha_cross_gv, N * 6 * E, TOL);
    const double *g[4] = {mha_cross_g0, mha_cross_g1, mha_cross_g2, mha_cross_g3};
    for (int i = 0; i < 4; i++)
        CHECK_VALUES(oar_tensor_grad(w[i]), g[i], oar_tensor_numel(w[i]), TOL);
    /* a per-head 3-D bool mask */
    oar_tensor *y3 = oar_multi_head_attention(q, k, v, H, w[0], w[1], w[2], w[3], NULL,
                                              mask_of(mha_cross_bmask, 3, bs), false, 0.0);
    CHECK_VALUES(y3, mha_cross_y3, N * 4 * E, TOL);
    oar_pool_pop(p);
}

/* Copies the reference weights into module m by their PyTorch names. */
static void load_by_name(oar_module *m, int n, const char *const *names,
                         const double *const *vals) {
    oar_no_grad_push();
    for (int i = 0; i < n; i++) {
        oar_tensor *t = oar_module_get(m, names[i]);
        CHECK(t != NULL);
        if (!t) continue;
        oar_tensor *src = f64(vals[i], oar_tensor_ndim(t), oar_tensor_shape(t));
        CHECK(oar_copy_(t, src) == 0);
    }
    oar_no_grad_pop();
}

static void test_mha_module_names_and_values(void) {
    oar_pool *p = oar_pool_push();
    oar_module *m = oar_multihead_attention_new(E, H, 0.0, true, false);
    CHECK(m != NULL);
    const oar_state_entry *st;
    int n = oar_module_state(m, &st);
    CHECK(n == MHA_CROSS_NPARAMS);
    for (int i = 0; i < n && i < MHA_CROSS_NPARAMS; i++)
        CHECK(!strcmp(st[i].name, mha_cross_names[i]) && st[i].is_parameter);
    const double *vals[4] = {mha_cross_p0, mha_cross_p1, mha_cross_p2, mha_cross_p3};
    load_by_name(m, 4, mha_cross_names, vals);
    int64_t qs[3] = {N, 4, E}, ks[3] = {N, 6, E}, ms[2] = {4, 6};
    oar_tensor *q = oar_cast(f64(mha_cross_q, 3, qs), OAR_F32);
    oar_tensor *k = oar_cast(f64(mha_cross_k, 3, ks), OAR_F32);
    oar_tensor *v = oar_cast(f64(mha_cross_v, 3, ks), OAR_F32);
    oar_tensor *y = oar_multihead_attention_forward(
        m, q, k, v, NULL, oar_cast(f64(mha_cross_fmask, 2, ms), OAR_F32), false);
    CHECK(y && oar_tensor_dtype(y) == OAR_F32);
    CHECK_VALUES(y, mha_cross_y, N * 4 * E, 1e-5);
    oar_module_free(m);
    oar_pool_pop(p);
}

static void test_mha_init(void) {
    oar_pool *p = oar_pool_push();
    oar_manual_seed(7);
    oar_module *m = oar_multihead_attention_new(64, 4, 0.1, true, true);
    CHECK(m != NULL);
    /* xavier_uniform over [192, 64]: bound sqrt(6 / 256); zero biases */
    double bound = sqrt(6.0 / 256.0);
    oar_tensor *w = oar_module_get(m, "in_proj_weight");
    CHECK(oar_tensor_item(oar_amax(oar_abs(w), 0, NULL, false)) <= bound);
    CHECK(oar_tensor_item(oar_amax(oar_abs(w), 0, NULL, false)) > 0.9 * bound);
    CHECK(oar_tensor_item(oar_sum(oar_abs(oar_module_get(m, "in_proj_bias")), 0, NULL, false)) ==
          0);
    CHECK(oar_tensor_item(oar_sum(oar_abs(oar_module_get(m, "out_proj.bias")), 0, NULL, false)) ==
          0);
    /* out_proj.weight keeps Linear's kaiming_uniform(a = sqrt 5): bound 1/sqrt(64) */
    double ob =
        oar_tensor_item(oar_amax(oar_abs(oar_module_get(m, "out_proj.weight")), 0, NULL, false));
    CHECK(ob <= 0.125 && ob > 0.1);
    CHECK(oar_module_num_elements(m) == 4 * 64 * 64 + 4 * 64);
    oar_module_free(m);
    oar_pool_pop(p);
}

/* Self-attention through the module forward is causal when asked, and
 * dropout acts only in training mode. */
static void test_mha_module_forward(void) {
    oar_pool *p = oar_pool_push();
    oar_manual_seed(3);
    oar_module *m = oar_multihead_attention_new(8, 2, 0.5, true, true);
    int64_t xs[3] = {2, 5, 8};
    oar_tensor *x = oar_randn(OAR_F32, 3, xs);
    oar_module_train(m, false);
    oar_tensor *y = oar_module_forward(m, x);
    oar_tensor *ref = oar_multihead_attention_forward(m, x, x, x, NULL, NULL, true);
    CHECK_NEAR(oar_tensor_item(oar_amax(oar_abs(oar_sub(y, ref)), 0, NULL, false)), 0, 0);
    /* changing a later position leaves earlier outputs alone */
    oar_tensor *x2 = oar_clone(x);
    oar_no_grad_push();
    oar_fill_(oar_slice(x2, 1, 4, 5, 1), 3.0);
    oar_no_grad_pop();
    oar_tensor *y2 = oar_module_forward(m, x2);
    oar_tensor *d = oar_abs(oar_sub(y, y2));
    CHECK_NEAR(oar_tensor_item(oar_amax(oar_slice(d, 1, 0, 4, 1), 0, NULL, false)), 0, 1e-6);
    CHECK(oar_tensor_item(oar_amax(oar_slice(d, 1, 4, 5, 1), 0, NULL, false)) > 1e-3);
    oar_module_train(m, true);
    oar_tensor *yt = oar_module_forward(m, x);
    CHECK(oar_tensor_item(oar_amax(oar_abs(oar_sub(yt, y)), 0, NULL, false)) > 1e-3);
    /* unbatched input [L, E] */
    oar_module_train(m, false);
    oar_tensor *x0 = oar_squeeze(oar_slice(x, 0, 0, 1, 1), 0);
    oar_tensor *y0 = oar_module_forward(m, x0);
    CHECK(y0 && oar_tensor_ndim(y0) == 2);
    CHECK_NEAR(oar_tensor_item(oar_amax(
                   oar_abs(oar_sub(y0, oar_squeeze(oar_slice(y, 0, 0, 1, 1), 0))), 0, NULL, false)),
               0, 1e-6);
    oar_module_free(m);
    oar_pool_pop(p);
}

/* ---- TransformerEncoderLayer against PyTorch -------------------------------- */

static void layer_case(const oar_transformer_options *o, int64_t L, bool use_kpm, bool causal,
                       const char *const *names, const double *const *vals,
                       const double *const *grads, const double *x_ref, const double *kpm_ref,
                       const double *r, const double *y_ref, const double *gx_ref) {
    oar_pool *p = oar_pool_push();
    oar_module *m = oar_transformer_encoder_layer_new(E, H, o);
    CHECK(m != NULL);
    if (!m) {
        oar_pool_pop(p);
        return;
    }
    const oar_state_entry *st;
    int n = oar_module_state(m, &st);
    CHECK(n == 12);
    for (int i = 0; i < n && i < 12; i++)
        CHECK(!strcmp(st[i].name, names[i]) && oar_tensor_dtype(st[i].tensor) == OAR_F64);
    load_by_name(m, 12, names, vals);
    int64_t xs[3] = {N, L, E}, ks[2] = {N, L};
    oar_tensor *x = leaf(x_ref, 3, xs);
    oar_tensor *y = oar_transformer_encoder_layer_forward(
        m, x, NULL, use_kpm ? mask_of(kpm_ref, 2, ks) : NULL, causal);
    CHECK_VALUES(y, y_ref, N * L * E, TOL);
    if (!use_kpm) { /* the plain module forward gives the same */
        oar_tensor *y1 = oar_module_forward(m, x);
        CHECK_VALUES(y1, y_ref, N * L * E, TOL);
    }
    CHECK(oar_backward(weighted_sum(y, r), NULL) == 0);
    CHECK_VALUES(oar_tensor_grad(x), gx_ref, N * L * E, TOL);
    for (int i = 0; i < 12; i++) {
        oar_tensor *t = oar_module_get(m, names[i]);
        CHECK_VALUES(oar_tensor_grad(t), grads[i], oar_tensor_numel(t), TOL);
    }
    oar_module_free(m);
    oar_pool_pop(p);
}

static void test_encoder_post_norm_relu(void) {
    const double *vals[12] = {enc_post_p0, enc_post_p1, enc_post_p2,  enc_post_p3,
                              enc_post_p4, enc_post_p5, enc_post_p6,  enc_post_p7,
                              enc_post_p8, enc_post_p9, enc_post_p10, enc_post_p11};
    const double *grads[12] = {enc_post_g0, enc_post_g1, enc_post_g2,  enc_post_g3,
                               enc_post_g4, enc_post_g5, enc_post_g6,  enc_post_g7,
                               enc_post_g8, enc_post_g9, enc_post_g10, enc_post_g11};
    layer_case(&(oar_transformer_options){.dim_feedforward = 16, .dtype = OAR_F64}, 5, true, false,
               enc_post_names, vals, grads, enc_post_x, enc_post_kpm, enc_post_r, enc_post_y,
               enc_post_gx);
}

static void test_encoder_pre_norm_gelu_causal(void) {
    const double *vals[12] = {enc_pre_p0, enc_pre_p1, enc_pre_p2,  enc_pre_p3,
                              enc_pre_p4, enc_pre_p5, enc_pre_p6,  enc_pre_p7,
                              enc_pre_p8, enc_pre_p9, enc_pre_p10, enc_pre_p11};
    const double *grads[12] = {enc_pre_g0, enc_pre_g1, enc_pre_g2,  enc_pre_g3,
                               enc_pre_g4, enc_pre_g5, enc_pre_g6,  enc_pre_g7,
                               enc_pre_g8, enc_pre_g9, enc_pre_g10, enc_pre_g11};
    layer_case(&(oar_transformer_options){.dim_feedforward = 16,
                                          .activation = OAR_ACTIVATION_GELU,
                                          .norm_first = true,
                                          .causal = true,
                                          .dtype = OAR_F64},
               6, false, true, enc_pre_names, vals, grads, enc_pre_x, enc_pre_kpm, enc_pre_r,
               enc_pre_y, enc_pre_gx);
}

static void test_encoder_dropout_and_defaults(void) {
    oar_pool *p = oar_pool_push();
    oar_manual_seed(5);
    oar_module *m = oar_transformer_encoder_layer_new(16, 4, NULL);
    CHECK(m != NULL);
    /* PyTorch's defaults: dim_feedforward 2048, f32 */
    CHECK(oar_tensor_dim(oar_module_get(m, "linear1.weight"), 0) == 2048);
    CHECK(oar_tensor_dtype(oar_module_get(m, "linear1.weight")) == OAR_F32);
    CHECK(oar_module_parameters(m, NULL, 0) == 12);
    oar_module_free(m);
    m = oar_transformer_encoder_layer_new(
        16, 4, &(oar_transformer_options){.dim_feedforward = 32, .dropout = 0.3, .no_bias = true});
    CHECK(oar_module_parameters(m, NULL, 0) == 8); /* in_proj, out_proj, 2 linears, 2 x 2 norms */
    int64_t xs[3] = {3, 7, 16};
    oar_tensor *x = oar_randn(OAR_F32, 3, xs);
    oar_module_train(m, false);
    oar_tensor *a = oar_module_forward(m, x), *b = oar_module_forward(m, x);
    CHECK(a && oar_tensor_item(oar_amax(oar_abs(oar_sub(a, b)), 0, NULL, false)) == 0);
    oar_module_train(m, true);
    oar_tensor *c = oar_module_forward(m, x);
    CHECK(c && oar_tensor_item(oar_amax(oar_abs(oar_sub(a, c)), 0, NULL, false)) > 1e-3);
    oar_module_free(m);
    oar_pool_pop(p);
}

/* ---- float64 gradchecks ---------------------------------------------------- */

typedef struct {
    bool causal, kpm, cross;
} mha_cfg;

/* x [2, 3, 4] (q, k, v or, if cross, q and kv [2, 4, 4]), in_w, in_b,
 * out_w, out_b; H 2. */
static oar_tensor *mha_fn(void *ctx, int n, oar_tensor *const *in) {
    const mha_cfg *c = ctx;
    oar_tensor *q = in[0], *kv = c->cross ? in[5] : in[0];
    oar_tensor *kpm = NULL;
    if (c->kpm) {
        bool pad[2][3] = {{false, false, false}, {false, true, true}};
        kpm = oar_tensor_from_data(pad, OAR_BOOL, 2, (int64_t[]){2, 3});
    }
    return oar_multi_head_attention(q, kv, kv, 2, in[1], in[2], in[3], in[4], kpm, NULL, c->causal,
                                    0.0);
}

static void test_mha_gradcheck(void) {
    gc_input ins[6] = {
        {.ndim = 3, .shape = {2, 3, 4}}, {.ndim = 2, .shape = {12, 4}, .lo = -1, .hi = 1},
        {.ndim = 1, .shape = {12}},      {.ndim = 2, .shape = {4, 4}, .lo = -1, .hi = 1},
        {.ndim = 1, .shape = {4}},       {.ndim = 3, .shape = {2, 3, 4}},
    };
    CHECK(gradcheck("mha self causal", mha_fn, &(mha_cfg){.causal = true}, 5, ins, NULL));
    CHECK(gradcheck("mha self padded", mha_fn, &(mha_cfg){.kpm = true}, 5, ins, NULL));
    CHECK(gradcheck("mha cross causal padded", mha_fn,
                    &(mha_cfg){.causal = true, .kpm = true, .cross = true}, 6, ins, NULL));
}

static oar_tensor *layer_fn(void *ctx, int n, oar_tensor *const *in) {
    return oar_module_forward(ctx, in[0]);
}

static void test_encoder_gradcheck(void) {
    gc_input x = {.ndim = 3, .shape = {2, 3, 4}};
    oar_manual_seed(11);
    oar_module *m = oar_transformer_encoder_layer_new(
        4, 2,
        &(oar_transformer_options){.dim_feedforward = 6,
                                   .activation = OAR_ACTIVATION_GELU,
                                   .norm_first = true,
                                   .causal = true,
                                   .dtype = OAR_F64});
    CHECK(gradcheck("encoder layer pre-norm gelu causal", layer_fn, m, 1, &x, NULL));
    oar_module_free(m);
    /* post-norm ReLU: first order (ReLU has a kink) */
    m = oar_transformer_encoder_layer_new(
        4, 2, &(oar_transformer_options){.dim_feedforward = 6, .dtype = OAR_F64});
    CHECK(gradcheck("encoder layer post-norm relu", layer_fn, m, 1, &x,
                    &(gc_opts){.first_only = true}));
    oar_module_free(m);
}

/* ---- errors ------------------------------------------------------------------ */

static void test_errors(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *x = oar_zeros(OAR_F32, 3, (int64_t[]){2, 5, 8});
    oar_tensor *iw = oar_zeros(OAR_F32, 2, (int64_t[]){24, 8}),
               *ow = oar_zeros(OAR_F32, 2, (int64_t[]){8, 8});
    CHECK_FAILS(oar_multi_head_attention(x, x, x, 3, iw, NULL, ow, NULL, NULL, NULL, false, 0),
                "num_heads 3");
    CHECK_FAILS(oar_multi_head_attention(x, x, x, 0, iw, NULL, ow, NULL, NULL, NULL, false, 0),
                "num_heads 0");
    CHECK_FAILS(oar_multi_head_attention(x, x, x, 2, ow, NULL, ow, NULL, NULL, NULL, false, 0),
                "in_proj_weight [8, 8]");
    oar_tensor *k = oar_zeros(OAR_F32, 3, (int64_t[]){3, 5, 8});
    CHECK_FAILS(oar_multi_head_attention(x, k, k, 2, iw, NULL, ow, NULL, NULL, NULL, false, 0),
                "[2, 5, 8], [3, 5, 8]");
    oar_tensor *x4 = oar_zeros(OAR_F32, 4, (int64_t[]){1, 2, 5, 8});
    CHECK_FAILS(oar_multi_head_attention(x4, x4, x4, 2, iw, NULL, ow, NULL, NULL, NULL, false, 0),
                "[1, 2, 5, 8]");
    oar_tensor *bad_kpm = oar_zeros(OAR_BOOL, 2, (int64_t[]){2, 4});
    CHECK_FAILS(oar_multi_head_attention(x, x, x, 2, iw, NULL, ow, NULL, bad_kpm, NULL, false, 0),
                "key_padding_mask");
    oar_tensor *bad_mask = oar_zeros(OAR_BOOL, 2, (int64_t[]){5, 4});
    CHECK_FAILS(oar_multi_head_attention(x, x, x, 2, iw, NULL, ow, NULL, NULL, bad_mask, false, 0),
                "attn_mask");
    oar_tensor *int_mask = oar_zeros(OAR_I64, 2, (int64_t[]){5, 5});
    CHECK_FAILS(oar_multi_head_attention(x, x, x, 2, iw, NULL, ow, NULL, NULL, int_mask, false, 0),
                "int64");
    CHECK_FAILS(oar_multi_head_attention(x, x, x, 2, iw, NULL, ow, NULL, NULL, NULL, false, 1.5),
                "dropout_p");
    oar_tensor *xi = oar_zeros(OAR_I64, 3, (int64_t[]){2, 5, 8});
    CHECK_FAILS(oar_multi_head_attention(xi, xi, xi, 2, iw, NULL, ow, NULL, NULL, NULL, false, 0),
                "floating");
    /* a NULL input keeps the first error */
    CHECK_FAILS(oar_multi_head_attention(NULL, x, x, 2, iw, NULL, ow, NULL, NULL, NULL, false, 0),
                "query is NULL");
    oar_clear_error();
    oar_tensor *bad = oar_reshape(x, 1, (int64_t[]){7}); /* fails: 80 elements */
    CHECK(bad == NULL);
    const char *first = oar_last_error();
    char saved[256];
    snprintf(saved, sizeof saved, "%s", first);
    CHECK(oar_multi_head_attention(bad, bad, bad, 2, iw, NULL, ow, NULL, NULL, NULL, false, 0) ==
          NULL);
    CHECK(!strcmp(oar_last_error(), saved));

    CHECK_FAILS(oar_multihead_attention_new(10, 3, 0, true, false), "num_heads 3");
    CHECK_FAILS(oar_multihead_attention_new(8, 2, 2.0, true, false), "dropout 2");
    CHECK_FAILS(oar_transformer_encoder_layer_new(8, 3, NULL), "num_heads 3");
    CHECK_FAILS(
        oar_transformer_encoder_layer_new(8, 2, &(oar_transformer_options){.dtype = OAR_I32}),
        "int32");
    CHECK_FAILS(oar_transformer_encoder_layer_new(
                    8, 2, &(oar_transformer_options){.activation = (oar_activation)7}),
                "activation 7");
    CHECK_FAILS(
        oar_transformer_encoder_layer_new(8, 2, &(oar_transformer_options){.layer_norm_eps = -1}),
        "layer_norm_eps");

    oar_module *layer =
        oar_transformer_encoder_layer_new(8, 2, &(oar_transformer_options){.dim_feedforward = 16});
    oar_module *mha = oar_multihead_attention_new(8, 2, 0, true, false);
    oar_tensor *x6 = oar_zeros(OAR_F32, 3, (int64_t[]){2, 5, 6});
    CHECK_FAILS(oar_module_forward(layer, x6), "[2, 5, 6]");
    CHECK_FAILS(oar_module_forward(mha, x6), "in_proj_weight [24, 8]");
    CHECK_FAILS(oar_transformer_encoder_layer_forward(mha, x, NULL, NULL, false),
                "expected a TransformerEncoderLayer module, got MultiheadAttention");
    CHECK_FAILS(oar_multihead_attention_forward(layer, x, x, x, NULL, NULL, false),
                "expected a MultiheadAttention module");
    CHECK_FAILS(oar_transformer_encoder_layer_forward(layer, x, bad_mask, NULL, false),
                "attn_mask");
    CHECK_FAILS(oar_transformer_encoder_layer_forward(layer, NULL, NULL, NULL, false),
                "src is NULL");
    oar_module_free(layer);
    oar_module_free(mha);
    oar_pool_pop(p);
}

int main(void) {
    RUN(test_mha_self_matches_torch);
    RUN(test_mha_cross_matches_torch);
    RUN(test_mha_module_names_and_values);
    RUN(test_mha_init);
    RUN(test_mha_module_forward);
    RUN(test_encoder_post_norm_relu);
    RUN(test_encoder_pre_norm_gelu_causal);
    RUN(test_encoder_dropout_and_defaults);
    RUN(test_mha_gradcheck);
    RUN(test_encoder_gradcheck);
    RUN(test_errors);
    return test_summary();
}

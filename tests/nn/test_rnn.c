/* RNN, LSTM and GRU (src/nn/rnn.c): outputs and final states against
 * PyTorch for fixed parameters loaded by name (tests/ref/gen_rnn_ref.py:
 * 2 layers, bidirectional or not, batch_first both ways, with and without
 * lengths), in f32 and f64; parameter names and initialisation; dropout
 * and unbatched input; float64 gradchecks (first and second order) of a
 * small LSTM and GRU with respect to the input, a weight and h0; and every
 * bad input. */
#include "gradcheck.h"
#include "test.h"

#include <oar/autograd.h>
#include <oar/nn.h>

#include "rnn_ref.h"

static oar_tensor *f64(const double *v, int ndim, const int64_t *shape) {
    return oar_tensor_from_data(v, OAR_F64, ndim, shape);
}

static double max_abs(oar_tensor *t) {
    return oar_tensor_item(oar_amax(oar_abs(t), 0, NULL, false));
}

/* ---- against PyTorch --------------------------------------------------------- */

typedef oar_module *(*rnn_ctor)(int64_t, int64_t, const oar_rnn_options *);

typedef struct {
    const char *name;
    rnn_ctor ctor;
    int64_t layers;
    bool bidir, batch_first, no_bias, relu;
    int nparams;
    const char *const *names;
    const double *const *params;
    const double *x, *h0, *c0, *y, *hn, *cn;
    const int64_t *len;
} ref_case;

#define I_ 3
#define H_ 4
#define T_ 5
#define B_ 3

static void run_case(const ref_case *c, oar_dtype dtype, double tol) {
    oar_pool *p = oar_pool_push();
    int64_t D = c->bidir ? 2 : 1, DL = D * c->layers;
    oar_module *m = c->ctor(I_, H_,
                            &(oar_rnn_options){.num_layers = c->layers,
                                               .bidirectional = c->bidir,
                                               .batch_first = c->batch_first,
                                               .no_bias = c->no_bias,
                                               .relu = c->relu,
                                               .dtype = dtype});
    CHECK(m != NULL);
    if (!m) {
        oar_pool_pop(p);
        return;
    }
    /* the same names in the same order as named_parameters() */
    const oar_state_entry *st;
    int n = oar_module_state(m, &st);
    CHECK(n == c->nparams);
    for (int i = 0; i < n && i < c->nparams; i++)
        CHECK(!strcmp(st[i].name, c->names[i]) && st[i].is_parameter &&
              oar_tensor_dtype(st[i].tensor) == dtype);
    oar_no_grad_push();
    for (int i = 0; i < c->nparams; i++) {
        oar_tensor *t = oar_module_get(m, c->names[i]);
        CHECK(t != NULL);
        if (t) CHECK(oar_copy_(t, f64(c->params[i], oar_tensor_ndim(t), oar_tensor_shape(t))) == 0);
    }
    oar_no_grad_pop();
    int64_t xs[3] = {c->batch_first ? B_ : T_, c->batch_first ? T_ : B_, I_}, ss[3] = {DL, B_, H_};
    oar_tensor *x = oar_cast(f64(c->x, 3, xs), dtype);
    oar_tensor *h0 = c->h0 ? oar_cast(f64(c->h0, 3, ss), dtype) : NULL;
    oar_tensor *c0 = c->c0 ? oar_cast(f64(c->c0, 3, ss), dtype) : NULL;
    oar_tensor *len = c->len ? oar_tensor_from_data(c->len, OAR_I64, 1, (int64_t[]){B_}) : NULL;
    oar_tensor *hn = NULL, *cn = NULL;
    oar_tensor *y = oar_rnn_forward(m, x, h0, c0, len, &hn, &cn);
    CHECK(y && oar_tensor_dtype(y) == dtype && oar_tensor_ndim(y) == 3);
    if (y) CHECK(oar_tensor_dim(y, 2) == D * H_ && oar_tensor_dim(y, c->batch_first) == T_);
    CHECK_VALUES(y, c->y, T_ * B_ * D * H_, tol);
    CHECK_VALUES(hn, c->hn, DL * B_ * H_, tol);
    if (c->cn)
        CHECK_VALUES(cn, c->cn, DL * B_ * H_, tol);
    else
        CHECK(cn == NULL);
    if (!c->h0 && !c->len) /* the plain module forward gives the same output */
        CHECK_VALUES(oar_module_forward(m, x), c->y, T_ * B_ * D * H_, tol);
    /* gradients reach every parameter */
    if (y) {
        CHECK(oar_backward(oar_add(oar_sum(y, 0, NULL, false), oar_sum(hn, 0, NULL, false)),
                           NULL) == 0);
        for (int i = 0; i < c->nparams; i++)
            CHECK(oar_tensor_grad(oar_module_get(m, c->names[i])) != NULL);
    }
    oar_module_free(m);
    oar_pool_pop(p);
}

#define REF(prefix, ctor_, layers_, bidir_, bf_, ...)                                              \
    (ref_case) {                                                                                   \
        .name = #prefix, .ctor = ctor_, .layers = layers_, .bidir = bidir_, .batch_first = bf_,    \
        .nparams = (int)(sizeof prefix##_names / sizeof *prefix##_names), .names = prefix##_names, \
        .params = prefix##_params, .x = prefix##_x, .y = prefix##_y, .hn = prefix##_hn,            \
        __VA_ARGS__                                                                                \
    }

static void test_matches_torch(void) {
    const ref_case cases[] = {
        REF(lstm_a, oar_lstm_new, 2, true, false, .h0 = lstm_a_h0, .c0 = lstm_a_c0,
            .cn = lstm_a_cn),
        REF(lstm_b, oar_lstm_new, 2, true, true, .h0 = lstm_b_h0, .c0 = lstm_b_c0, .cn = lstm_b_cn,
            .len = lstm_b_len),
        REF(lstm_c, oar_lstm_new, 2, false, false, .cn = lstm_c_cn, .len = lstm_c_len),
        REF(gru_a, oar_gru_new, 2, true, true, .h0 = NULL),
        REF(gru_b, oar_gru_new, 2, true, false, .h0 = gru_b_h0, .len = gru_b_len),
        REF(rnn_a, oar_rnn_new, 2, true, true, .h0 = rnn_a_h0, .len = rnn_a_len),
        REF(rnn_b, oar_rnn_new, 2, false, false, .h0 = rnn_b_h0, .no_bias = true, .relu = true),
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int failed = test_failed;
        run_case(&cases[i], OAR_F32, 1e-5);
        run_case(&cases[i], OAR_F64, 1e-10);
        if (test_failed != failed) fprintf(stderr, "  (in case %s)\n", cases[i].name);
    }
}

/* ---- construction, modes ----------------------------------------------------- */

static void test_init_and_names(void) {
    oar_pool *p = oar_pool_push();
    oar_manual_seed(3);
    oar_module *m = oar_gru_new(10, 16, &(oar_rnn_options){.num_layers = 3, .bidirectional = true});
    CHECK(m && !strcmp(oar_module_type(m), "GRU"));
    CHECK(oar_module_parameters(m, NULL, 0) == 3 * 2 * 4);
    CHECK(oar_tensor_dim(oar_module_get(m, "weight_ih_l0"), 0) == 48);
    CHECK(oar_tensor_dim(oar_module_get(m, "weight_ih_l0"), 1) == 10);
    CHECK(oar_tensor_dim(oar_module_get(m, "weight_ih_l2_reverse"), 1) == 32);
    CHECK(oar_tensor_dtype(oar_module_get(m, "bias_hh_l1_reverse")) == OAR_F32);
    /* every parameter U(-1/sqrt(16), 1/sqrt(16)) */
    const oar_state_entry *st;
    int n = oar_module_state(m, &st);
    for (int i = 0; i < n; i++) {
        double a = max_abs(st[i].tensor);
        CHECK(a <= 0.25 && a > 0.2);
    }
    oar_module_free(m);
    m = oar_rnn_new(5, 7, &(oar_rnn_options){.no_bias = true});
    CHECK(m && !strcmp(oar_module_type(m), "RNN") && oar_module_parameters(m, NULL, 0) == 2);
    CHECK(oar_module_num_elements(m) == 7 * 5 + 7 * 7);
    oar_module_free(m);
    m = oar_lstm_new(5, 7, NULL);
    CHECK(m && !strcmp(oar_module_type(m), "LSTM") &&
          oar_module_num_elements(m) == 4 * 7 * (5 + 7 + 2));
    oar_module_free(m);
    oar_pool_pop(p);
}

/* Dropout between layers acts in training mode only; unbatched input
 * gives the batched result's slice. */
static void test_dropout_and_unbatched(void) {
    oar_pool *p = oar_pool_push();
    oar_manual_seed(4);
    oar_module *m = oar_lstm_new(
        3, 5, &(oar_rnn_options){.num_layers = 2, .dropout = 0.5, .bidirectional = true});
    oar_tensor *x = oar_randn(OAR_F32, 3, (int64_t[]){6, 2, 3});
    oar_module_train(m, false);
    oar_tensor *a = oar_module_forward(m, x), *b = oar_module_forward(m, x);
    CHECK(a && b && max_abs(oar_sub(a, b)) == 0);
    oar_module_train(m, true);
    oar_tensor *c = oar_module_forward(m, x);
    CHECK(c && max_abs(oar_sub(a, c)) > 1e-3);
    oar_module_train(m, false);
    oar_tensor *h0 = oar_randn(OAR_F32, 3, (int64_t[]){4, 2, 5});
    oar_tensor *hn, *cn;
    oar_tensor *y = oar_rnn_forward(m, x, h0, NULL, NULL, &hn, &cn);
    oar_tensor *x1 = oar_squeeze(oar_slice(x, 1, 1, 2, 1), 1);
    oar_tensor *h01 = oar_squeeze(oar_slice(h0, 1, 1, 2, 1), 1);
    oar_tensor *hn1, *cn1;
    oar_tensor *y1 = oar_rnn_forward(m, x1, h01, NULL, NULL, &hn1, &cn1);
    CHECK(y1 && oar_tensor_ndim(y1) == 2 && oar_tensor_dim(y1, 1) == 10);
    CHECK(hn1 && oar_tensor_ndim(hn1) == 2 && cn1 && oar_tensor_ndim(cn1) == 2);
    if (y && y1) {
        CHECK_NEAR(max_abs(oar_sub(y1, oar_squeeze(oar_slice(y, 1, 1, 2, 1), 1))), 0, 1e-6);
        CHECK_NEAR(max_abs(oar_sub(hn1, oar_squeeze(oar_slice(hn, 1, 1, 2, 1), 1))), 0, 1e-6);
        CHECK_NEAR(max_abs(oar_sub(cn1, oar_squeeze(oar_slice(cn, 1, 1, 2, 1), 1))), 0, 1e-6);
    }
    /* h_n and c_n may be left out */
    CHECK(oar_rnn_forward(m, x, NULL, NULL, NULL, NULL, NULL) != NULL);
    oar_module_free(m);
    oar_pool_pop(p);
}

/* ---- float64 gradchecks -------------------------------------------------------- */

typedef struct {
    oar_module *m;
    const char *weight; /* the parameter replaced by in[1] */
    bool lengths;
} gc_ctx;

/* in[0] x, in[1] a weight, in[2] h0: the output plus the final states. */
static oar_tensor *rnn_fn(void *ctx, int n, oar_tensor *const *in) {
    gc_ctx *c = ctx;
    if (oar_module_set(c->m, c->weight, in[1])) return NULL;
    int64_t lv[2] = {3, 1};
    oar_tensor *len = c->lengths ? oar_tensor_from_data(lv, OAR_I64, 1, (int64_t[]){2}) : NULL;
    oar_tensor *hn = NULL, *cn = NULL;
    oar_tensor *y = oar_rnn_forward(c->m, in[0], in[2], NULL, len, &hn, &cn);
    if (!y) return NULL;
    oar_tensor *s = oar_add(oar_sum(oar_mul(y, y), 0, NULL, false), oar_sum(hn, 0, NULL, false));
    return cn ? oar_add(s, oar_sum(oar_tanh(cn), 0, NULL, false)) : s;
}

static void test_gradcheck(void) {
    oar_manual_seed(9);
    /* LSTM 2 -> 3, 2 layers, bidirectional, T 3, B 2, lengths {3, 1} */
    oar_module *m = oar_lstm_new(
        2, 3, &(oar_rnn_options){.num_layers = 2, .bidirectional = true, .dtype = OAR_F64});
    gc_input lstm_in[3] = {{.ndim = 3, .shape = {3, 2, 2}},
                           {.ndim = 2, .shape = {12, 3}, .lo = -1, .hi = 1},
                           {.ndim = 3, .shape = {4, 2, 3}, .lo = -1, .hi = 1}};
    CHECK(gradcheck("lstm x, weight_hh_l0, h0 (lengths)", rnn_fn,
                    &(gc_ctx){m, "weight_hh_l0", true}, 3, lstm_in, NULL));
    oar_module_free(m);
    /* GRU 2 -> 3, 1 layer, bidirectional, batch first [B 2, T 3] */
    m = oar_gru_new(
        2, 3, &(oar_rnn_options){.bidirectional = true, .batch_first = true, .dtype = OAR_F64});
    gc_input gru_in[3] = {{.ndim = 3, .shape = {2, 3, 2}},
                          {.ndim = 2, .shape = {9, 2}, .lo = -1, .hi = 1},
                          {.ndim = 3, .shape = {2, 2, 3}, .lo = -1, .hi = 1}};
    CHECK(gradcheck("gru x, weight_ih_l0_reverse, h0", rnn_fn,
                    &(gc_ctx){m, "weight_ih_l0_reverse", false}, 3, gru_in, NULL));
    CHECK(gradcheck("gru x, weight_ih_l0_reverse, h0 (lengths)", rnn_fn,
                    &(gc_ctx){m, "weight_ih_l0_reverse", true}, 3, gru_in, NULL));
    oar_module_free(m);
    /* tanh RNN, 2 layers */
    m = oar_rnn_new(2, 3, &(oar_rnn_options){.num_layers = 2, .dtype = OAR_F64});
    gc_input rnn_in[3] = {{.ndim = 3, .shape = {3, 2, 2}},
                          {.ndim = 2, .shape = {3, 3}, .lo = -1, .hi = 1},
                          {.ndim = 3, .shape = {2, 2, 3}, .lo = -1, .hi = 1}};
    CHECK(gradcheck("rnn x, weight_hh_l1, h0", rnn_fn, &(gc_ctx){m, "weight_hh_l1", true}, 3,
                    rnn_in, NULL));
    oar_module_free(m);
}

/* ---- errors ------------------------------------------------------------------------ */

static void test_errors(void) {
    oar_pool *p = oar_pool_push();
    CHECK_FAILS(oar_lstm_new(0, 4, NULL), "LSTM: input_size 0");
    CHECK_FAILS(oar_gru_new(3, -1, NULL), "GRU: input_size 3, hidden_size -1");
    CHECK_FAILS(oar_rnn_new(3, 4, &(oar_rnn_options){.num_layers = -2}), "num_layers -2");
    CHECK_FAILS(oar_lstm_new(3, 4, &(oar_rnn_options){.dropout = 1.5}), "dropout");
    CHECK_FAILS(oar_gru_new(3, 4, &(oar_rnn_options){.dtype = OAR_I32}), "int32");
    CHECK_FAILS(oar_lstm_new(3, 4, &(oar_rnn_options){.relu = true}), "RNN only");

    oar_module *lstm = oar_lstm_new(3, 4, &(oar_rnn_options){.num_layers = 2});
    oar_module *gru = oar_gru_new(3, 4, &(oar_rnn_options){.bidirectional = true});
    oar_module *lin = oar_linear_new(3, 4, true);
    oar_tensor *x = oar_zeros(OAR_F32, 3, (int64_t[]){5, 2, 3});
    oar_tensor *hn = (oar_tensor *)1, *cn = (oar_tensor *)1;
    CHECK_FAILS(oar_rnn_forward(NULL, x, NULL, NULL, NULL, &hn, &cn), "got NULL");
    CHECK(hn == NULL && cn == NULL);
    CHECK_FAILS(oar_rnn_forward(lin, x, NULL, NULL, NULL, NULL, NULL),
                "expected an RNN, LSTM or GRU module, got Linear");
    CHECK_FAILS(oar_rnn_forward(lstm, NULL, NULL, NULL, NULL, NULL, NULL), "LSTM: input is NULL");
    CHECK_FAILS(oar_module_forward(lstm, oar_zeros(OAR_F32, 4, (int64_t[]){1, 5, 2, 3})),
                "LSTM: expected input [seq_len, batch, 3]");
    CHECK_FAILS(oar_module_forward(lstm, oar_zeros(OAR_F32, 1, (int64_t[]){3})), "got [3]");
    CHECK_FAILS(oar_module_forward(gru, oar_zeros(OAR_F32, 3, (int64_t[]){5, 2, 6})),
                "GRU: expected input [seq_len, batch, 3]");
    CHECK_FAILS(oar_module_forward(gru, oar_zeros(OAR_I64, 3, (int64_t[]){5, 2, 3})),
                "GRU: input is int64, expected float32");
    CHECK_FAILS(oar_module_forward(gru, oar_zeros(OAR_F64, 3, (int64_t[]){5, 2, 3})),
                "input is float64");
    CHECK_FAILS(oar_module_forward(gru, oar_zeros(OAR_F32, 3, (int64_t[]){0, 2, 3})),
                "no time steps");
    /* states */
    oar_tensor *h_bad = oar_zeros(OAR_F32, 3, (int64_t[]){1, 2, 4});
    CHECK_FAILS(oar_rnn_forward(lstm, x, h_bad, NULL, NULL, NULL, NULL),
                "LSTM: expected h0 of shape [2, 2, 4]");
    CHECK_FAILS(oar_rnn_forward(lstm, x, NULL, h_bad, NULL, NULL, NULL),
                "expected c0 of shape [2, 2, 4]");
    CHECK_FAILS(
        oar_rnn_forward(gru, x, oar_zeros(OAR_F32, 2, (int64_t[]){2, 4}), NULL, NULL, NULL, NULL),
        "GRU: expected h0 of shape [2, 2, 4]");
    CHECK_FAILS(oar_rnn_forward(gru, x, oar_zeros(OAR_F64, 3, (int64_t[]){2, 2, 4}), NULL, NULL,
                                NULL, NULL),
                "h0 is float64");
    CHECK_FAILS(oar_rnn_forward(gru, x, NULL, oar_zeros(OAR_F32, 3, (int64_t[]){2, 2, 4}), NULL,
                                NULL, NULL),
                "GRU: c0 is for LSTM only");
    oar_tensor *xu = oar_zeros(OAR_F32, 2, (int64_t[]){5, 3});
    CHECK_FAILS(oar_rnn_forward(gru, xu, oar_zeros(OAR_F32, 3, (int64_t[]){2, 1, 4}), NULL, NULL,
                                NULL, NULL),
                "expected h0 of shape [2, 4]");
    /* lengths */
    int64_t l_ok[2] = {5, 2}, l_zero[2] = {5, 0}, l_long[2] = {6, 1};
    int32_t l_i32[2] = {5, 2};
    CHECK_FAILS(oar_rnn_forward(lstm, x, NULL, NULL,
                                oar_tensor_from_data(l_zero, OAR_I64, 1, (int64_t[]){2}), NULL,
                                NULL),
                "LSTM: lengths[1] = 0 is outside [1, seq_len = 5]");
    CHECK_FAILS(oar_rnn_forward(lstm, x, NULL, NULL,
                                oar_tensor_from_data(l_long, OAR_I64, 1, (int64_t[]){2}), NULL,
                                NULL),
                "lengths[0] = 6");
    CHECK_FAILS(oar_rnn_forward(lstm, x, NULL, NULL,
                                oar_tensor_from_data(l_i32, OAR_I32, 1, (int64_t[]){2}), NULL,
                                NULL),
                "lengths must be int64 [batch] = [2], got int32");
    CHECK_FAILS(oar_rnn_forward(lstm, x, NULL, NULL,
                                oar_tensor_from_data(l_ok, OAR_I64, 2, (int64_t[]){1, 2}), NULL,
                                NULL),
                "got int64 [1, 2]");
    CHECK_FAILS(oar_rnn_forward(gru, xu, NULL, NULL,
                                oar_tensor_from_data(l_ok, OAR_I64, 1, (int64_t[]){1}), NULL, NULL),
                "lengths needs a batched input");
    /* a good call still works after all that */
    oar_clear_error();
    CHECK(oar_rnn_forward(lstm, x, NULL, NULL,
                          oar_tensor_from_data(l_ok, OAR_I64, 1, (int64_t[]){2}), &hn, &cn) &&
          hn && cn);
    oar_module_free(lstm);
    oar_module_free(gru);
    oar_module_free(lin);
    oar_pool_pop(p);
}

int main(void) {
    RUN(test_matches_torch);
    RUN(test_init_and_names);
    RUN(test_dropout_and_unbatched);
    RUN(test_gradcheck);
    RUN(test_errors);
    return test_summary();
}

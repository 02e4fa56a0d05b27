/* The fused recurrent ops rnn_layer and lstm_layer (oar_rnn_layer,
 * src/ops/rnn.c, kernel src/backends/cpu/cpu_rnn.c): every cell (tanh,
 * relu, GRU, LSTM), both directions, with and without lengths (a length 0
 * included), with and without biases, f64 and f32 on a strided input,
 * against the cell formulas unrolled step by step with elementwise ops
 * here (an independent reference); first and second order gradchecks of
 * the relu cell (the other cells: tests/autograd/gradcheck_cases.h and the
 * modules' in test_rnn.c); every bad input of the shape rule and the
 * kernel's length check; the eager LSTM training path (lstm_layer_train's
 * reserve and lstm_layer_backward) against the rule's ops, and the
 * backward op's refusals; a traced LSTM module run by the executor,
 * compiled (the op stays a library call) and loaded by the predictor from
 * a saved model, all equal to eager; the graph backward of an LSTM and a
 * GRU (lstm_layer_train, gru_layer_train) to first and second order, equal
 * to eager; the GRU's eager gradient over its reserve against rnn_layer's. */
#include "gradcheck.h"
#include "test.h"

#include "ops/op.h" /* lstm_layer_backward called directly, for its refusals */

#include <oar/autograd.h>
#include <oar/graph.h>
#include <oar/infer.h>
#include <oar/nn.h>
#include <oar/ops.h>

#include <stdlib.h>
#include <unistd.h>

static double max_diff(oar_tensor *a, oar_tensor *b) {
    if (!a || !b) return INFINITY;
    return oar_tensor_item(oar_amax(oar_abs(oar_sub(oar_cast(a, OAR_F64), oar_cast(b, OAR_F64))),
                                    0, NULL, false));
}

static oar_tensor *row(oar_tensor *x, int64_t t) {
    return oar_squeeze(oar_slice(x, 0, t, t + 1, 1), 0);
}

/* block k of the gates [B, G*H] */
static oar_tensor *blk(oar_tensor *g, int k, int64_t H) {
    return oar_slice(g, 1, k * H, (k + 1) * H, 1);
}

/* The reference: the formulas of torch.nn.RNN/GRU/LSTM, step by step. */
static void reference(oar_rnn_cell cell, bool reverse, oar_tensor *x, oar_tensor *h,
                      oar_tensor *c, oar_tensor *w_ih, oar_tensor *w_hh, oar_tensor *b_ih,
                      oar_tensor *b_hh, const int64_t *len, oar_tensor **y, oar_tensor **h_n,
                      oar_tensor **c_n) {
    int64_t T = oar_tensor_shape(x)[0], B = oar_tensor_shape(x)[1], H = oar_tensor_shape(h)[1];
    oar_tensor *outs[16];
    for (int64_t s = 0; s < T; s++) {
        int64_t t = reverse ? T - 1 - s : s;
        oar_tensor *gi = oar_matmul(row(x, t), oar_transpose(w_ih, 0, 1));
        oar_tensor *gh = oar_matmul(h, oar_transpose(w_hh, 0, 1));
        if (b_ih) gi = oar_add(gi, b_ih);
        if (b_hh) gh = oar_add(gh, b_hh);
        oar_tensor *h2, *c2 = c;
        if (cell == OAR_RNN_LSTM) {
            oar_tensor *a = oar_add(gi, gh);
            c2 = oar_add(oar_mul(oar_sigmoid(blk(a, 1, H)), c),
                         oar_mul(oar_sigmoid(blk(a, 0, H)), oar_tanh(blk(a, 2, H))));
            h2 = oar_mul(oar_sigmoid(blk(a, 3, H)), oar_tanh(c2));
        } else if (cell == OAR_RNN_GRU) {
            oar_tensor *r = oar_sigmoid(oar_add(blk(gi, 0, H), blk(gh, 0, H)));
            oar_tensor *z = oar_sigmoid(oar_add(blk(gi, 1, H), blk(gh, 1, H)));
            oar_tensor *n = oar_tanh(oar_add(blk(gi, 2, H), oar_mul(r, blk(gh, 2, H))));
            h2 = oar_add(oar_mul(oar_sub(oar_scalar(1), z), n), oar_mul(z, h));
        } else {
            oar_tensor *a = oar_add(gi, gh);
            h2 = cell == OAR_RNN_RELU ? oar_relu(a) : oar_tanh(a);
        }
        if (len) { /* per sequence: past its length, zeros out and the state held */
            bool mv[8];
            for (int64_t b = 0; b < B; b++) mv[b] = t < len[b];
            oar_tensor *m = oar_tensor_from_data(mv, OAR_BOOL, 2, (int64_t[]){B, 1});
            outs[t] = oar_where(m, h2, oar_scalar(0));
            h = oar_where(m, h2, h);
            if (c) c = oar_where(m, c2, c);
        } else {
            outs[t] = h = h2;
            c = c2;
        }
    }
    *y = oar_stack((int)T, outs, 0);
    *h_n = h;
    *c_n = c;
}

/* sequence b of y [T, B, H] (dim 1) or of a state [B, H] (dim 0), kept as a dim of 1 */
static oar_tensor *seq(oar_tensor *t, int dim, int64_t b) { return oar_slice(t, dim, b, b + 1, 1); }


static oar_tensor *rnd(oar_dtype dt, int ndim, const int64_t *shape) {
    return oar_cast(oar_mul_scalar(oar_rand(OAR_F64, ndim, shape), 1.6), dt);
}

static void test_against_reference(void) {
    oar_manual_seed(3);
    const int64_t T = 5, B = 3, In = 4, H = 3;
    const int64_t lens[3] = {5, 0, 2};
    for (int cell = OAR_RNN_TANH; cell <= OAR_RNN_LSTM; cell++)
        for (int variant = 0; variant < 8; variant++) {
            oar_pool *p = oar_pool_push();
            bool reverse = variant & 1, with_len = variant & 2, f32 = variant & 4;
            bool bias = variant != 6; /* one f32 variant without biases */
            oar_dtype dt = f32 ? OAR_F32 : OAR_F64;
            int64_t G = cell == OAR_RNN_LSTM ? 4 : cell == OAR_RNN_GRU ? 3 : 1;
            /* f32: x as a transposed view of [B, T, I] (strided) */
            oar_tensor *x = f32 ? oar_transpose(rnd(dt, 3, (int64_t[]){B, T, In}), 0, 1)
                                : rnd(dt, 3, (int64_t[]){T, B, In});
            oar_tensor *h0 = rnd(dt, 2, (int64_t[]){B, H});
            oar_tensor *c0 = cell == OAR_RNN_LSTM ? rnd(dt, 2, (int64_t[]){B, H}) : NULL;
            oar_tensor *w_ih = oar_sub_scalar(rnd(dt, 2, (int64_t[]){G * H, In}), 0.8);
            oar_tensor *w_hh = oar_sub_scalar(rnd(dt, 2, (int64_t[]){G * H, H}), 0.8);
            oar_tensor *b_ih = bias ? oar_sub_scalar(rnd(dt, 1, (int64_t[]){G * H}), 0.8) : NULL;
            oar_tensor *b_hh = bias ? oar_sub_scalar(rnd(dt, 1, (int64_t[]){G * H}), 0.8) : NULL;
            oar_tensor *len = with_len ? oar_tensor_from_data(lens, OAR_I64, 1, (int64_t[]){B}) : NULL;
            oar_tensor *y = NULL, *hn = NULL, *cn = NULL, *ry, *rh, *rc;
            CHECK(oar_rnn_layer(cell, reverse, x, h0, c0, w_ih, w_hh, b_ih, b_hh, len, &y, &hn,
                                &cn) == 0);
            reference(cell, reverse, x, h0, c0, w_ih, w_hh, b_ih, b_hh, with_len ? lens : NULL,
                      &ry, &rh, &rc);
            double tol = f32 ? 2e-6 : 1e-13;
            double dy = max_diff(y, ry), dh = max_diff(hn, rh);
            if (!(dy <= tol && dh <= tol))
                fprintf(stderr, "cell %d variant %d: y diff %g, h_n diff %g\n", cell, variant, dy,
                        dh);
            CHECK(dy <= tol && dh <= tol);
            CHECK(oar_tensor_dtype(y) == dt && oar_tensor_shape(y)[0] == T &&
                  oar_tensor_shape(y)[2] == H);
            if (cell == OAR_RNN_LSTM) CHECK(max_diff(cn, rc) <= tol);
            else CHECK(cn == NULL);
            if (with_len) /* sequence 1 has length 0: zeros out, h_n = h0 */
                CHECK(max_diff(seq(y, 1, 1), oar_zeros_like(seq(y, 1, 1))) == 0 &&
                      max_diff(seq(hn, 0, 1), seq(h0, 0, 1)) == 0);
            oar_pool_pop(p);
        }
}

/* ---- gradients of the relu cell (its kink kept away by the values) ------- */

static oar_tensor *relu_fn(void *ctx, int n, oar_tensor *const *in) {
    (void)ctx;
    (void)n;
    static const int64_t lens[2] = {3, 2};
    oar_tensor *y = NULL, *hn = NULL;
    oar_tensor *len = oar_tensor_from_data(lens, OAR_I64, 1, (int64_t[]){2});
    if (oar_rnn_layer(OAR_RNN_RELU, true, in[0], in[1], NULL, in[2], in[3], NULL, NULL, len, &y,
                      &hn, NULL))
        return NULL;
    return oar_add(oar_sum(oar_mul(y, y), 0, NULL, false), oar_sum(hn, 0, NULL, false));
}

static void test_relu_gradcheck(void) {
    /* positive inputs and weights: every pre-activation is well above 0 */
    gc_input in[4] = {{.ndim = 3, .shape = {3, 2, 2}, .lo = 0.2, .hi = 1},
                      {.ndim = 2, .shape = {2, 2}, .lo = 0.2, .hi = 1},
                      {.ndim = 2, .shape = {2, 2}, .lo = 0.2, .hi = 1},
                      {.ndim = 2, .shape = {2, 2}, .lo = 0.2, .hi = 1}};
    CHECK(gradcheck("rnn_layer relu, reverse, lengths {3, 2}", relu_fn, NULL, 4, in, NULL));
}

/* ---- bad input -------------------------------------------------------------- */

static void test_errors(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *x = oar_zeros(OAR_F32, 3, (int64_t[]){5, 2, 3});
    oar_tensor *h = oar_zeros(OAR_F32, 2, (int64_t[]){2, 4});
    oar_tensor *wi = oar_zeros(OAR_F32, 2, (int64_t[]){12, 3}), *wh = oar_zeros(OAR_F32, 2, (int64_t[]){12, 4});
    oar_tensor *wi4 = oar_zeros(OAR_F32, 2, (int64_t[]){16, 3}), *wh4 = oar_zeros(OAR_F32, 2, (int64_t[]){16, 4});
    oar_tensor *y = (oar_tensor *)1, *hn = (oar_tensor *)1, *cn = (oar_tensor *)1;
    CHECK_STATUS_FAILS(oar_rnn_layer(7, false, x, h, NULL, wi, wh, NULL, NULL, NULL, &y, &hn, &cn),
                       "rnn_layer: cell 7");
    CHECK(y == NULL && hn == NULL && cn == NULL);
    CHECK_STATUS_FAILS(oar_rnn_layer(OAR_RNN_GRU, false, NULL, h, NULL, wi, wh, NULL, NULL, NULL,
                                     &y, NULL, NULL),
                       "rnn_layer: x, h0, w_ih and w_hh are required");
    CHECK_STATUS_FAILS(oar_rnn_layer(OAR_RNN_LSTM, false, x, h, NULL, wi4, wh4, NULL, NULL, NULL,
                                     &y, NULL, NULL),
                       "lstm_layer: x, h0, c0, w_ih and w_hh are required");
    CHECK_STATUS_FAILS(oar_rnn_layer(OAR_RNN_GRU, false, x, h, h, wi, wh, NULL, NULL, NULL, &y,
                                     NULL, NULL),
                       "rnn_layer (gru): c0 is for OAR_RNN_LSTM only");
    CHECK_STATUS_FAILS(oar_rnn_layer(OAR_RNN_GRU, false, oar_zeros(OAR_F32, 2, (int64_t[]){5, 3}),
                                     h, NULL, wi, wh, NULL, NULL, NULL, &y, NULL, NULL),
                       "rnn_layer (gru): expected x [seq_len, batch, input], got [5, 3]");
    CHECK_STATUS_FAILS(oar_rnn_layer(OAR_RNN_TANH, false, x, h, NULL, wi, wh, NULL, NULL, NULL, &y,
                                     NULL, NULL),
                       "rnn_layer (tanh): expected w_hh [1 * hidden, hidden] (hidden > 0), got [12, 4]");
    CHECK_STATUS_FAILS(oar_rnn_layer(OAR_RNN_GRU, false, x, h, NULL, wh, wh, NULL, NULL, NULL, &y,
                                     NULL, NULL),
                       "rnn_layer (gru): expected w_ih of shape [12, 3], got [12, 4]");
    CHECK_STATUS_FAILS(oar_rnn_layer(OAR_RNN_GRU, false, x, oar_zeros(OAR_F32, 2, (int64_t[]){3, 4}),
                                     NULL, wi, wh, NULL, NULL, NULL, &y, NULL, NULL),
                       "expected h0 of shape [2, 4] (batch of x [5, 2, 3], hidden of w_hh [12, "
                       "4]), got [3, 4]");
    CHECK_STATUS_FAILS(oar_rnn_layer(OAR_RNN_LSTM, false, x, h, oar_zeros(OAR_F32, 1, (int64_t[]){4}),
                                     wi4, wh4, NULL, NULL, NULL, &y, NULL, NULL),
                       "lstm_layer (lstm): expected c0 of shape [2, 4]");
    CHECK_STATUS_FAILS(oar_rnn_layer(OAR_RNN_GRU, false, x, h, NULL, wi, wh,
                                     oar_zeros(OAR_F32, 1, (int64_t[]){4}), NULL, NULL, &y, NULL, NULL),
                       "expected b_ih of shape [12], got [4]");
    CHECK_STATUS_FAILS(oar_rnn_layer(OAR_RNN_GRU, false, x, h, NULL, wi, wh, NULL,
                                     oar_zeros(OAR_F32, 2, (int64_t[]){1, 12}), NULL, &y, NULL, NULL),
                       "expected b_hh of shape [12], got [1, 12]");
    CHECK_STATUS_FAILS(oar_rnn_layer(OAR_RNN_GRU, false, x, oar_zeros(OAR_F64, 2, (int64_t[]){2, 4}),
                                     NULL, wi, wh, NULL, NULL, NULL, &y, NULL, NULL),
                       "rnn_layer (gru): input 1 is float64 but x is float32");
    CHECK_STATUS_FAILS(oar_rnn_layer(OAR_RNN_GRU, false, oar_zeros(OAR_F16, 3, (int64_t[]){5, 2, 3}),
                                     h, NULL, wi, wh, NULL, NULL, NULL, &y, NULL, NULL),
                       "input 0 is float16; expected float32 or float64");
    int32_t l32[2] = {1, 2};
    int64_t l_long[2] = {6, 1}, l_neg[2] = {2, -1};
    CHECK_STATUS_FAILS(oar_rnn_layer(OAR_RNN_GRU, false, x, h, NULL, wi, wh, NULL, NULL,
                                     oar_tensor_from_data(l32, OAR_I32, 1, (int64_t[]){2}), &y,
                                     NULL, NULL),
                       "rnn_layer (gru): lengths must be int64 [batch] = [2], got int32 [2]");
    CHECK_STATUS_FAILS(oar_rnn_layer(OAR_RNN_GRU, false, x, h, NULL, wi, wh, NULL, NULL,
                                     oar_tensor_from_data(l_long, OAR_I64, 1, (int64_t[]){2}), &y,
                                     NULL, NULL),
                       "rnn_layer (gru): lengths[0] = 6 is outside [0, seq_len = 5]");
    CHECK_STATUS_FAILS(oar_rnn_layer(OAR_RNN_LSTM, true, x, h, h, wi4, wh4, NULL, NULL,
                                     oar_tensor_from_data(l_neg, OAR_I64, 1, (int64_t[]){2}), &y,
                                     NULL, NULL),
                       "lstm_layer (lstm): lengths[1] = -1");
    /* a good call after all that; T = 0 gives the initial states back */
    oar_clear_error();
    oar_tensor *x0 = oar_zeros(OAR_F32, 3, (int64_t[]){0, 2, 3});
    oar_tensor *h1 = oar_full(OAR_F32, 2, (int64_t[]){2, 4}, 0.5);
    CHECK(oar_rnn_layer(OAR_RNN_LSTM, false, x0, h1, h1, wi4, wh4, NULL, NULL, NULL, &y, &hn, &cn) == 0);
    CHECK(y && oar_tensor_shape(y)[0] == 0 && max_diff(hn, h1) == 0 && max_diff(cn, h1) == 0);
    oar_pool_pop(p);
}

/* ---- lstm_layer_train and lstm_layer_backward ------------------------------- */

/* An LSTM whose inputs require grad goes through lstm_layer_train, and its
 * first-order gradient (oar_grad without create_graph) through
 * lstm_layer_backward over the reserve; with create_graph, through the
 * rule's ops. Both against each other, for each set of output gradients
 * (y only, h_n only, all three), both directions, lengths with a 0, no
 * biases, f64 and f32 on a strided x, T = 0 and T = 1. (Each against
 * central differences: tests/autograd/gradcheck_cases.h.) */
static void test_fused_backward(void) {
    oar_manual_seed(5);
    const int64_t B = 3, In = 4, H = 5, lens[3] = {6, 0, 2};
    const int64_t Ts[3] = {6, 1, 0};
    int runs = 0;
    for (int ti = 0; ti < 3; ti++)
        for (int variant = 0; variant < 16; variant++)
            for (int outs = 0; outs < 3; outs++) {
                oar_pool *p = oar_pool_push();
                const int64_t T = Ts[ti];
                bool reverse = variant & 1, with_len = (variant & 2) && T == 6, f32 = variant & 4,
                     bias = !(variant & 8);
                oar_dtype dt = f32 ? OAR_F32 : OAR_F64;
                oar_tensor *x = f32 ? oar_transpose(rnd(dt, 3, (int64_t[]){B, T, In}), 0, 1)
                                    : rnd(dt, 3, (int64_t[]){T, B, In});
                oar_tensor *v[7] = {
                    x,
                    rnd(dt, 2, (int64_t[]){B, H}),
                    rnd(dt, 2, (int64_t[]){B, H}),
                    oar_sub_scalar(rnd(dt, 2, (int64_t[]){4 * H, In}), 0.8),
                    oar_sub_scalar(rnd(dt, 2, (int64_t[]){4 * H, H}), 0.8),
                    bias ? oar_sub_scalar(rnd(dt, 1, (int64_t[]){4 * H}), 0.8) : NULL,
                    bias ? oar_sub_scalar(rnd(dt, 1, (int64_t[]){4 * H}), 0.8) : NULL};
                int nv = bias ? 7 : 5;
                for (int k = 0; k < nv; k++) {
                    v[k] = oar_tensor_retain(v[k]); /* leaves (x: a contiguous-later copy) */
                    CHECK(oar_tensor_set_requires_grad(v[k], true) == 0);
                }
                oar_tensor *len = with_len ? oar_tensor_from_data(lens, OAR_I64, 1, (int64_t[]){B}) : NULL;
                oar_tensor *gw = rnd(dt, 3, (int64_t[]){T, B, H}), *hw = rnd(dt, 2, (int64_t[]){B, H});
                oar_tensor *g_fused[7] = {0}, *g_ops[7] = {0};
                for (int create = 0; create < 2; create++) {
                    oar_tensor *y = NULL, *hn = NULL, *cn = NULL;
                    CHECK(oar_rnn_layer(OAR_RNN_LSTM, reverse, v[0], v[1], v[2], v[3], v[4], v[5],
                                        v[6], len, &y, &hn, &cn) == 0);
                    oar_tensor *ly = oar_sum(oar_mul(y, gw), 0, NULL, false);
                    oar_tensor *lh = oar_sum(oar_mul(hn, hw), 0, NULL, false);
                    oar_tensor *lc = oar_sum(oar_mul(oar_mul(cn, cn), hw), 0, NULL, false);
                    oar_tensor *loss = outs == 0 ? ly : outs == 1 ? lh : oar_add(oar_add(ly, lh), lc);
                    CHECK(oar_grad(1, &loss, NULL, nv, v, create, true, create ? g_ops : g_fused) == 0);
                }
                double tol = f32 ? 2e-5 : 1e-12;
                for (int k = 0; k < nv; k++) {
                    bool empty = g_fused[k] && g_ops[k] && oar_tensor_numel(g_fused[k]) == 0 &&
                                 oar_tensor_numel(g_ops[k]) == 0; /* x when T = 0 */
                    double d = empty || (!g_fused[k] && !g_ops[k]) ? 0 : max_diff(g_fused[k], g_ops[k]);
                    if (!(d <= tol))
                        fprintf(stderr, "T %lld variant %d outs %d input %d: fused - ops = %g\n",
                                (long long)T, variant, outs, k, d);
                    CHECK(d <= tol);
                }
                runs++;
                for (int k = 0; k < nv; k++) oar_tensor_release(v[k]);
                oar_pool_pop(p);
            }
    CHECK(runs == 3 * 16 * 3);
}

/* lstm_layer_backward's refusals (it is reached only through the rule, but
 * fails cleanly all the same), and lstm_layer_train's shape rule. */
static void test_backward_op_errors(void) {
    oar_pool *p = oar_pool_push();
    const int64_t T = 3, B = 2, H = 4;
    oar_tensor *c0 = oar_zeros(OAR_F32, 2, (int64_t[]){B, H});
    oar_tensor *whh = oar_zeros(OAR_F32, 2, (int64_t[]){4 * H, H});
    oar_tensor *res = oar_zeros(OAR_F32, 3, (int64_t[]){T, B, 5 * H});
    oar_tensor *gy = oar_zeros(OAR_F32, 3, (int64_t[]){T, B, H});
    int64_t l_ok[2] = {3, 1}, l_bad[2] = {4, 1};
    oar_tensor *len = oar_tensor_from_data(l_ok, OAR_I64, 1, (int64_t[]){B});
    oari_attrs fwd = oari_attrs_ints(1, (int64_t[]){0}), bad_attr = oari_attrs_ints(1, (int64_t[]){2});
    oar_tensor *out[OARI_MAX_OUT];
#define BW(attrs, ...) oari_dispatch(OARI_OP_lstm_layer_backward, 7, (oar_tensor *[]){__VA_ARGS__}, attrs, out)
    CHECK(BW(&fwd, c0, whh, res, len, gy, c0, c0) == 0);
    for (int j = 0; j < 3; j++) oar_tensor_release(out[j]);
    CHECK_STATUS_FAILS(BW(&bad_attr, c0, whh, res, NULL, gy, NULL, NULL),
                       "lstm_layer_backward: bad attributes (expected [reverse 0/1])");
    CHECK_STATUS_FAILS(BW(&fwd, c0, whh, NULL, NULL, gy, NULL, NULL),
                       "lstm_layer_backward: c0, w_hh and reserve are required, got NULL");
    CHECK_STATUS_FAILS(BW(&fwd, c0, oar_zeros(OAR_F32, 2, (int64_t[]){4 * H, H + 1}), res, NULL,
                          gy, NULL, NULL),
                       "lstm_layer_backward: expected w_hh [4 * hidden, hidden] (hidden > 0), got [16, 5]");
    CHECK_STATUS_FAILS(BW(&fwd, c0, oar_zeros(OAR_I32, 2, (int64_t[]){4 * H, H}), res, NULL, gy,
                          NULL, NULL),
                       "lstm_layer_backward: w_hh is int32; expected float32 or float64");
    CHECK_STATUS_FAILS(BW(&fwd, c0, whh, gy, NULL, gy, NULL, NULL),
                       "lstm_layer_backward: expected reserve [seq_len, batch, 5 * 4], got [3, 2, 4]");
    CHECK_STATUS_FAILS(BW(&fwd, c0, whh, oar_zeros(OAR_F64, 3, (int64_t[]){T, B, 5 * H}), NULL,
                          NULL, NULL, NULL),
                       "lstm_layer_backward: reserve is float64 but w_hh is float32");
    CHECK_STATUS_FAILS(BW(&fwd, oar_zeros(OAR_F32, 2, (int64_t[]){B + 1, H}), whh, res, NULL, gy,
                          NULL, NULL),
                       "lstm_layer_backward: expected c0 of shape [2, 4], got [3, 4]");
    CHECK_STATUS_FAILS(BW(&fwd, c0, whh, res, NULL, oar_zeros(OAR_F32, 3, (int64_t[]){T + 1, B, H}),
                          NULL, NULL),
                       "lstm_layer_backward: expected gy of shape [3, 2, 4], got [4, 2, 4]");
    CHECK_STATUS_FAILS(BW(&fwd, c0, whh, res, NULL, gy, oar_zeros(OAR_F64, 2, (int64_t[]){B, H}),
                          NULL),
                       "lstm_layer_backward: dh_n is float64 but w_hh is float32");
    CHECK_STATUS_FAILS(BW(&fwd, c0, whh, res, NULL, gy, NULL, oar_zeros(OAR_F32, 1, (int64_t[]){H})),
                       "lstm_layer_backward: expected dc_n of shape [2, 4], got [4]");
    CHECK_STATUS_FAILS(BW(&fwd, c0, whh, res, oar_tensor_from_data(l_ok, OAR_I64, 1, (int64_t[]){1}), gy, NULL, NULL),
                       "lstm_layer_backward: lengths must be int64 [batch] = [2], got int64 [1]");
    CHECK_STATUS_FAILS(BW(&fwd, c0, whh, res, oar_tensor_from_data(l_bad, OAR_I64, 1, (int64_t[]){B}),
                          gy, NULL, NULL),
                       "lstm_layer_backward (lstm): lengths[0] = 4 is outside [0, seq_len = 3]");
#undef BW
    /* lstm_layer_train: lstm_layer's shape rule, plus the reserve */
    oar_tensor *x = oar_zeros(OAR_F32, 3, (int64_t[]){T, B, 3});
    oar_tensor *wih = oar_zeros(OAR_F32, 2, (int64_t[]){4 * H, 3});
    CHECK(oari_dispatch(OARI_OP_lstm_layer_train, 8,
                        (oar_tensor *[]){x, c0, c0, wih, whh, NULL, NULL, NULL}, &fwd, out) == 0);
    CHECK(out[3] && oar_tensor_ndim(out[3]) == 3 && oar_tensor_shape(out[3])[2] == 5 * H);
    for (int j = 0; j < 4; j++) oar_tensor_release(out[j]);
    CHECK_STATUS_FAILS(oari_dispatch(OARI_OP_lstm_layer_train, 8,
                                     (oar_tensor *[]){x, c0, c0, whh, whh, NULL, NULL, NULL}, &fwd,
                                     out),
                       "lstm_layer_train (lstm): expected w_ih of shape [16, 3], got [16, 4]");
    oar_pool_pop(p);
}

/* ---- traced: executor, compiler, predictor ---------------------------------- */

static int lstm_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    oar_tensor *hn = NULL, *cn = NULL;
    out[0] = oar_rnn_forward(ctx, in[0], NULL, NULL, in[1], &hn, &cn);
    out[1] = hn;
    out[2] = cn;
    return out[0] && hn && cn ? 0 : -1;
}

static void test_traced(void) {
    oar_pool *p = oar_pool_push();
    oar_manual_seed(4);
    oar_module *m =
        oar_lstm_new(3, 4, &(oar_rnn_options){.num_layers = 2, .bidirectional = true});
    static const int64_t lens[2] = {5, 3};
    oar_tensor *in[2] = {oar_randn(OAR_F32, 3, (int64_t[]){5, 2, 3}),
                         oar_tensor_from_data(lens, OAR_I64, 1, (int64_t[]){2})};
    oar_tensor *want[3] = {NULL, NULL, NULL};
    want[0] = oar_rnn_forward(m, in[0], NULL, NULL, in[1], &want[1], &want[2]);
    oar_graph_input_spec s[2] = {{.name = "x", .dtype = OAR_F32, .ndim = 3, .shape = {5, 2, 3}},
                                 {.name = "lengths", .dtype = OAR_I64, .ndim = 1, .shape = {2}}};
    oar_graph *g = oar_trace(lstm_fn, m, 2, s, 3,
                             &(oar_trace_options){.output_names = (const char *[]){"y", "h_n", "c_n"}});
    CHECK(g != NULL);
    if (!g) {
        oar_module_free(m);
        oar_pool_pop(p);
        return;
    }
    CHECK(oar_graph_count_op(g, "lstm_layer") == 4);
    for (int compiled = 0; compiled < 2; compiled++) {
        oar_executor *ex = oar_executor_new(g);
        CHECK(ex != NULL);
        if (compiled) CHECK(oar_executor_compile(ex) == 0);
        oar_tensor *got[3] = {NULL, NULL, NULL};
        CHECK(ex && oar_executor_run(ex, in, got) == 0);
        for (int j = 0; j < 3; j++) CHECK(max_diff(want[j], got[j]) <= 1e-6);
        oar_executor_free(ex);
    }
    char dir[] = "/tmp/oar_rnn_model_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    CHECK(oar_graph_save(g, dir) == 0);
    oar_predictor *pr = oar_predictor_create(&(oar_predictor_config){.model_dir = dir, .optimize = true});
    CHECK(pr != NULL);
    if (pr) {
        oar_tensor *got[3] = {NULL, NULL, NULL};
        CHECK(oar_predictor_run(pr, in, got) == 0);
        for (int j = 0; j < 3; j++) {
            CHECK(max_diff(want[j], got[j]) <= 1e-6);
            oar_tensor_release(got[j]);
        }
        oar_predictor_free(pr);
    }
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    oar_graph_free(g);
    oar_module_free(m);
    oar_pool_pop(p);
}

/* A traced LSTM and GRU (2 layers, bidirectional, lengths 5 and 3, f64)
 * trained through the graph: oar_graph_append_backward turns their
 * lstm_layer / GRU rnn_layer nodes into lstm_layer_train / gru_layer_train,
 * whose rules read the reserve. The gradients of the loss equal eager's
 * (the LSTM's fused lstm_layer_backward), and a second append_backward, of
 * sum(grad:x), equals eager's second order through create_graph (itself
 * checked against central differences in gradcheck_cases.h): the
 * reserve's own gradient is taken. */
static int rnn_loss_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    oar_tensor *hn = NULL, *cn = NULL, *y = oar_rnn_forward(ctx, in[0], NULL, NULL, in[1], &hn, &cn);
    out[0] = oar_add(oar_sum(oar_mul(y, y), 0, NULL, false), oar_sum(oar_tanh(hn), 0, NULL, false));
    if (cn) out[0] = oar_add(out[0], oar_sum(oar_mul(cn, cn), 0, NULL, false));
    return out[0] ? 0 : -1;
}

static void test_traced_backward(void) {
    for (int gru = 0; gru < 2; gru++) {
        oar_pool *p = oar_pool_push();
        oar_manual_seed(6);
        const oar_rnn_options o = {.num_layers = 2, .bidirectional = true, .dtype = OAR_F64};
        oar_module *m = gru ? oar_gru_new(3, 4, &o) : oar_lstm_new(3, 4, &o);
        const char *train_op = gru ? "gru_layer_train" : "lstm_layer_train", *op = gru ? "rnn_layer" : "lstm_layer";
        enum { MAXP = 16 };
        oar_tensor *params[MAXP];
        int np = oar_module_parameters(m, params, MAXP);
        CHECK(np == 16);
        static const int64_t lens[2] = {5, 3};
        oar_tensor *x = oar_tensor_retain(oar_randn(OAR_F64, 3, (int64_t[]){5, 2, 3}));
        oar_tensor *len = oar_tensor_from_data(lens, OAR_I64, 1, (int64_t[]){2});
        /* eager: first order, then d sum(dL/dx) / d(x, params) */
        oar_tensor *wrt[1 + MAXP] = {x}, *g1[1 + MAXP] = {0}, *g2[1 + MAXP] = {0}, *gx = NULL, *loss = NULL;
        for (int k = 0; k < np; k++) wrt[1 + k] = params[k];
        CHECK(oar_tensor_set_requires_grad(x, true) == 0);
        CHECK(rnn_loss_fn(m, (oar_tensor *[]){x, len}, &loss) == 0);
        CHECK(oar_grad(1, &loss, NULL, 1 + np, wrt, false, true, g1) == 0);
        CHECK(rnn_loss_fn(m, (oar_tensor *[]){x, len}, &loss) == 0);
        CHECK(oar_grad(1, &loss, NULL, 1, &x, true, true, &gx) == 0);
        oar_tensor *sgx = oar_sum(gx, 0, NULL, false);
        CHECK(oar_grad(1, &sgx, NULL, 1 + np, wrt, false, true, g2) == 0);
        /* the graph */
        oar_graph_input_spec s[2] = {{.name = "x", .dtype = OAR_F64, .ndim = 3, .shape = {5, 2, 3}},
                                     {.name = "lengths", .dtype = OAR_I64, .ndim = 1, .shape = {2}}};
        oar_graph *g = oar_trace(rnn_loss_fn, m, 2, s, 1, &(oar_trace_options){.module = m, .params_as_inputs = true});
        CHECK(g != NULL);
        int iw[1 + MAXP] = {0};
        for (int k = 0; k < np; k++) iw[1 + k] = 2 + k;
        int first = g ? oar_graph_append_backward(g, 0, 1 + np, iw) : -1;
        CHECK(first == 1);
        CHECK(oar_graph_count_op(g, op) == 0 && oar_graph_count_op(g, train_op) == 4);
        /* the LSTM's first order in one kernel per layer and direction; the
         * second goes through that op's decomposition */
        CHECK(oar_graph_count_op(g, "lstm_layer_backward") == (gru ? 0 : 4));
        int second = first == 1 ? oar_graph_append_backward(g, first, 1 + np, iw) : -1;
        CHECK(second == 2 + np);
        if (second == 2 + np) {
            oar_executor *ex = oar_executor_new(g);
            oar_tensor *in[2 + MAXP] = {x, len}, *out[3 + 2 * MAXP] = {0};
            for (int k = 0; k < np; k++) in[2 + k] = params[k];
            CHECK(ex && oar_executor_run(ex, in, out) == 0);
            double d1 = 0, d2 = 0;
            for (int k = 0; k < 1 + np; k++) {
                d1 = fmax(d1, max_diff(g1[k], out[1 + k]));
                d2 = fmax(d2, max_diff(g2[k], out[2 + np + k]));
            }
            if (!(d1 <= 1e-12 && d2 <= 1e-12))
                fprintf(stderr, "%s graph - eager: first order %g, second %g\n", op, d1, d2);
            CHECK(d1 <= 1e-12 && d2 <= 1e-12);
            CHECK(max_diff(g2[0], oar_zeros_like(g2[0])) > 1e-3); /* (not vacuous) */
            oar_executor_free(ex); /* (its outputs are borrowed) */
        }
        oar_graph_free(g);
        oar_tensor_release(x);
        oar_module_free(m);
        oar_pool_pop(p);
    }
}

/* One LSTM layer with its states as inputs (x, h0, c0, w_ih, w_hh,
 * lengths; ctx: reverse): y . y / 2 + h_n . h_n + c_n . c_n. */
static int lstm_states_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    oar_tensor *y = NULL, *hn = NULL, *cn = NULL;
    if (oar_rnn_layer(OAR_RNN_LSTM, *(const bool *)ctx, in[0], in[1], in[2], in[3], in[4], NULL, NULL, in[5], &y,
                      &hn, &cn))
        return -1;
    oar_tensor *sq[3] = {oar_mul_scalar(oar_sum(oar_mul(y, y), 0, NULL, false), 0.5),
                         oar_sum(oar_mul(hn, hn), 0, NULL, false), oar_sum(oar_mul(cn, cn), 0, NULL, false)};
    out[0] = oar_add(oar_add(sq[0], sq[1]), sq[2]);
    return out[0] ? 0 : -1;
}

/* A traced LSTM layer's graph backward holds lstm_layer_backward; a second
 * backward of the gradients of x, h0 and c0 each goes through that op's
 * decomposition, dh0 and dc0 included, and matches eager (the ops' rule)
 * to 1e-12, both directions, with lengths {5, 0, 2}. */
static void test_traced_states(void) {
    for (int reverse = 0; reverse < 2; reverse++) {
        oar_pool *p = oar_pool_push();
        oar_manual_seed(9);
        const int64_t T = 5, B = 3, In = 2, H = 3, lens[3] = {5, 0, 2};
        oar_tensor *v[6] = {rnd(OAR_F64, 3, (int64_t[]){T, B, In}), rnd(OAR_F64, 2, (int64_t[]){B, H}),
                            rnd(OAR_F64, 2, (int64_t[]){B, H}),
                            oar_sub_scalar(rnd(OAR_F64, 2, (int64_t[]){4 * H, In}), 0.8),
                            oar_sub_scalar(rnd(OAR_F64, 2, (int64_t[]){4 * H, H}), 0.8),
                            oar_tensor_from_data(lens, OAR_I64, 1, (int64_t[]){B})};
        bool rev = reverse;
        oar_graph_input_spec s[6];
        for (int k = 0; k < 6; k++) {
            s[k] = (oar_graph_input_spec){.name = (const char *[]){"x", "h0", "c0", "w_ih", "w_hh", "len"}[k],
                                          .dtype = oar_tensor_dtype(v[k]), .ndim = oar_tensor_ndim(v[k])};
            memcpy(s[k].shape, oar_tensor_shape(v[k]), (size_t)s[k].ndim * sizeof *s[k].shape);
        }
        oar_graph *g = oar_trace(lstm_states_fn, &rev, 6, s, 1, NULL);
        const int wrt[5] = {0, 1, 2, 3, 4};
        int first = g ? oar_graph_append_backward(g, 0, 5, wrt) : -1; /* grad:x .. grad:w_hh: outputs 1..5 */
        CHECK(first == 1 && oar_graph_count_op(g, "lstm_layer_backward") == 1);
        /* second order: of the gradient of x, of h0 and of c0 (each summed) */
        int second[3] = {-1, -1, -1};
        for (int q = 0; first == 1 && q < 3; q++) second[q] = oar_graph_append_backward(g, 1 + q, 5, wrt);
        CHECK(second[0] == 6 && second[1] == 11 && second[2] == 16);
        /* eager */
        for (int k = 0; k < 5; k++) CHECK(oar_tensor_set_requires_grad(v[k], true) == 0);
        oar_tensor *loss = NULL, *g1[5] = {0};
        CHECK(lstm_states_fn(&rev, v, &loss) == 0);
        CHECK(oar_grad(1, &loss, NULL, 5, v, true, true, g1) == 0);
        oar_executor *ex = second[2] == 16 ? oar_executor_new(g) : NULL;
        oar_tensor *out[21] = {0};
        CHECK(ex && oar_executor_run(ex, v, out) == 0);
        double d1 = 0, d2 = 0, mag = 0;
        for (int k = 0; ex && k < 5; k++) d1 = fmax(d1, max_diff(g1[k], out[1 + k]));
        for (int q = 0; ex && q < 3; q++) {
            oar_tensor *sg = oar_sum(g1[q], 0, NULL, false), *g2[5] = {0};
            CHECK(oar_grad(1, &sg, NULL, 5, v, true, true, g2) == 0);
            for (int k = 0; k < 5; k++) {
                d2 = fmax(d2, max_diff(g2[k], out[6 + 5 * q + k]));
                mag = fmax(mag, max_diff(g2[k], oar_zeros_like(g2[k])));
            }
        }
        if (!(d1 <= 1e-12 && d2 <= 1e-12)) fprintf(stderr, "reverse %d: first order %g, second %g\n", reverse, d1, d2);
        CHECK(d1 <= 1e-12 && d2 <= 1e-12 && mag > 1e-3);
        oar_executor_free(ex); /* (its outputs are borrowed) */
        oar_graph_free(g);
        oar_pool_pop(p);
    }
}

/* A GRU's eager gradient goes through gru_layer_train, and its rule reads
 * the gates from the reserve: the same gradients as rnn_layer's rule,
 * which recomputes them (f32 and f64, both directions, lengths with a 0,
 * with and without biases); and oar_rnn_layer gives no c_n for a GRU. */
static void test_gru_train(void) {
    oar_manual_seed(7);
    const int64_t B = 3, In = 4, H = 5, T = 6, lens[3] = {6, 0, 2};
    for (int variant = 0; variant < 16; variant++) {
        oar_pool *p = oar_pool_push();
        bool reverse = variant & 1, with_len = variant & 2, f32 = variant & 4, bias = !(variant & 8);
        oar_dtype dt = f32 ? OAR_F32 : OAR_F64;
        oar_tensor *v[6] = {rnd(dt, 3, (int64_t[]){T, B, In}), rnd(dt, 2, (int64_t[]){B, H}),
                            oar_sub_scalar(rnd(dt, 2, (int64_t[]){3 * H, In}), 0.8),
                            oar_sub_scalar(rnd(dt, 2, (int64_t[]){3 * H, H}), 0.8),
                            bias ? oar_sub_scalar(rnd(dt, 1, (int64_t[]){3 * H}), 0.8) : NULL,
                            bias ? oar_sub_scalar(rnd(dt, 1, (int64_t[]){3 * H}), 0.8) : NULL};
        int nv = bias ? 6 : 4;
        for (int k = 0; k < nv; k++) {
            v[k] = oar_tensor_retain(v[k]);
            CHECK(oar_tensor_set_requires_grad(v[k], true) == 0);
        }
        oar_tensor *len = with_len ? oar_tensor_from_data(lens, OAR_I64, 1, (int64_t[]){B}) : NULL;
        oar_tensor *gw = rnd(dt, 3, (int64_t[]){T, B, H}), *hw = rnd(dt, 2, (int64_t[]){B, H});
        oar_tensor *g[2][6] = {{0}};
        for (int direct = 0; direct < 2; direct++) {
            oar_tensor *y = NULL, *hn = NULL, *cn = oar_scalar(1); /* (must come back NULL) */
            if (direct) {
                oar_tensor *in[7] = {v[0], v[1], v[2], v[3], v[4], v[5], len}, *out[OARI_MAX_OUT] = {0};
                oari_attrs a = oari_attrs_ints(2, (int64_t[]){OAR_RNN_GRU, reverse});
                CHECK(oari_dispatch(OARI_OP_rnn_layer, 7, in, &a, out) == 0);
                y = oari_pool_adopt(out[0]);
                hn = oari_pool_adopt(out[1]);
            } else {
                CHECK(oar_rnn_layer(OAR_RNN_GRU, reverse, v[0], v[1], NULL, v[2], v[3], v[4], v[5], len, &y, &hn,
                                    &cn) == 0);
                CHECK(cn == NULL);
            }
            oar_tensor *loss = oar_add(oar_sum(oar_mul(y, gw), 0, NULL, false), oar_sum(oar_mul(hn, hw), 0, NULL, false));
            CHECK(oar_grad(1, &loss, NULL, nv, v, false, true, g[direct]) == 0);
        }
        double tol = f32 ? 2e-5 : 1e-12;
        for (int k = 0; k < nv; k++) {
            double d = max_diff(g[0][k], g[1][k]);
            if (!(d <= tol)) fprintf(stderr, "variant %d input %d: reserve - recomputed = %g\n", variant, k, d);
            CHECK(d <= tol);
        }
        for (int k = 0; k < nv; k++) oar_tensor_release(v[k]);
        oar_pool_pop(p);
    }
}

int main(void) {
    RUN(test_against_reference);
    RUN(test_relu_gradcheck);
    RUN(test_errors);
    RUN(test_fused_backward);
    RUN(test_backward_op_errors);
    RUN(test_traced);
    RUN(test_traced_backward);
    RUN(test_traced_states);
    RUN(test_gru_train);
    return test_summary();
}

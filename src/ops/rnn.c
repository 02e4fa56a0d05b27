/* Recurrent layers over a whole sequence (src/ops/defs/rnn.def): the
 * primitives rnn_layer (tanh, relu, GRU cells) and lstm_layer, their shape
 * rules, their gradient rules and the public function oar_rnn_layer; and
 * lstm_layer_train with lstm_layer_backward, the training path of an LSTM
 * (a reserve of gates and cell states, then BPTT in one kernel), taken
 * eagerly where nothing differentiates the gradient again and in graph
 * backward (a later one differentiates the node as its decomposition); and
 * gru_layer_train, a GRU rnn_layer that keeps its gates likewise. Elsewhere
 * the rules of the two (also a graph backward's, which turns lstm_layer
 * and GRU rnn_layer nodes into them) run the ops below over the reserve
 * instead of recomputing the gates.
 *
 * The gradient is backpropagation through time written with ops, so it
 * differentiates again. It recomputes what it needs from the saved inputs
 * and the output y: the state before each step is y of the step before
 * (h0 for the first), so every gate pre-activation comes from two batched
 * matmuls over all steps; the LSTM cell states, which y does not hold,
 * come from a forward loop of elementwise ops. The loop over steps runs
 * backward carrying dh (and dc), and the weight gradients are two matmuls
 * over the gate gradients of all steps.
 * Kernels: src/backends/cpu/cpu_rnn.c. */
#include "device_ops.h"
#include "op.h"

#include <oar/autograd.h>
#include <oar/device.h>

#include <stdlib.h>
#include <string.h>

enum { CELL_TANH, CELL_RELU, CELL_GRU, CELL_LSTM };

static const char *const cell_names[] = {"tanh", "relu", "gru", "lstm"};

static int64_t cell_gates(int cell) { return cell == CELL_LSTM ? 4 : cell == CELL_GRU ? 3 : 1; }

/* Where each operand sits in the inputs of the two rows (c0: -1 none). */
typedef struct rnn_io {
    int x, h0, c0, w_ih, w_hh, b_ih, b_hh, len, n_in;
} rnn_io;
static const rnn_io rnn_io_rnn = {0, 1, -1, 2, 3, 4, 5, 6, 7};
static const rnn_io rnn_io_lstm = {0, 1, 2, 3, 4, 5, 6, 7, 8};

/* The cell and direction of a call from its attributes; -1 cell if bad. */
static int call_cell(bool lstm, const oari_attrs *a, bool *reverse) {
    int64_t cell = lstm ? CELL_LSTM : a && a->ni > 0 ? a->i[0] : -1;
    int64_t rev = a && a->ni > (lstm ? 0 : 1) ? a->i[lstm ? 0 : 1] : -1;
    *reverse = rev == 1;
    if (cell < 0 || cell > (lstm ? CELL_LSTM : CELL_GRU) || (rev != 0 && rev != 1)) return -1;
    return (int)cell;
}

/* ---- shape rule ------------------------------------------------------------ */

static int shape_error(const char *op, const char *cell, const char *name, const char *want,
                       const oar_tensor *t) {
    char s[200];
    return oari_error(OAR_ERR_INVALID, "%s (%s): expected %s of shape %s, got %s", op, cell, name,
                      want, oari_shape_str(s, t->ndim, t->shape));
}

static bool shape_is(const oar_tensor *t, int ndim, int64_t d0, int64_t d1) {
    return t->ndim == ndim && t->shape[0] == d0 && (ndim < 2 || t->shape[1] == d1);
}

static int infer_layer(oari_infer *c, bool lstm) {
    const rnn_io *io = lstm ? &rnn_io_lstm : &rnn_io_rnn;
    bool reverse;
    int cell = call_cell(lstm, c->attrs, &reverse);
    if (cell < 0)
        return oari_error(OAR_ERR_INVALID,
                          "%s: bad attributes (expected %s, each in range)", c->op,
                          lstm ? "[reverse 0/1]" : "[cell 0 tanh / 1 relu / 2 gru, reverse 0/1]");
    const char *cn = cell_names[cell];
    oar_tensor *const *in = c->in;
    const oar_tensor *x = in[io->x], *w_ih = in[io->w_ih], *w_hh = in[io->w_hh];
    char s1[200], s2[200], s3[200], want[200];
    for (int i = 0; i < io->n_in; i++) {
        if (i == io->len || !in[i]) continue;
        if (in[i]->dtype != OAR_F32 && in[i]->dtype != OAR_F64)
            return oari_error(OAR_ERR_INVALID,
                              "%s (%s): input %d is %s; expected float32 or float64 (cast it)",
                              c->op, cn, i, oar_dtype_name(in[i]->dtype));
        if (in[i]->dtype != x->dtype)
            return oari_error(OAR_ERR_INVALID,
                              "%s (%s): input %d is %s but x is %s; all float inputs share one "
                              "dtype",
                              c->op, cn, i, oar_dtype_name(in[i]->dtype),
                              oar_dtype_name(x->dtype));
    }
    if (!in[io->h0] || !in[io->w_ih] || !in[io->w_hh] || (lstm && !in[io->c0]))
        return oari_error(OAR_ERR_INVALID, "%s (%s): h0%s, w_ih and w_hh are required, got NULL",
                          c->op, cn, lstm ? ", c0" : "");
    if (x->ndim != 3)
        return oari_error(OAR_ERR_INVALID, "%s (%s): expected x [seq_len, batch, input], got %s",
                          c->op, cn, oari_shape_str(s1, x->ndim, x->shape));
    int64_t T = x->shape[0], B = x->shape[1], I = x->shape[2], G = cell_gates(cell);
    if (w_hh->ndim != 2 || w_hh->shape[1] <= 0 || w_hh->shape[0] != G * w_hh->shape[1])
        return oari_error(OAR_ERR_INVALID,
                          "%s (%s): expected w_hh [%lld * hidden, hidden] (hidden > 0), got %s",
                          c->op, cn, (long long)G, oari_shape_str(s1, w_hh->ndim, w_hh->shape));
    int64_t H = w_hh->shape[1];
    if (!shape_is(w_ih, 2, G * H, I))
        return shape_error(c->op, cn, "w_ih", oari_shape_str(want, 2, (int64_t[]){G * H, I}), w_ih);
    for (int k = 0; k < 2 && (k == 0 || lstm); k++) { /* h0, and c0 (LSTM only: c0 is -1 otherwise) */
        const oar_tensor *s = in[k ? io->c0 : io->h0];
        if (!shape_is(s, 2, B, H))
            return oari_error(OAR_ERR_INVALID,
                              "%s (%s): expected %s of shape %s (batch of x %s, hidden of w_hh "
                              "%s), got %s",
                              c->op, cn, k ? "c0" : "h0", oari_shape_str(want, 2, (int64_t[]){B, H}),
                              oari_shape_str(s1, 3, x->shape), oari_shape_str(s2, 2, w_hh->shape),
                              oari_shape_str(s3, s->ndim, s->shape));
    }
    for (int k = 0; k < 2; k++) {
        const oar_tensor *b = in[k ? io->b_hh : io->b_ih];
        if (b && !shape_is(b, 1, G * H, 0))
            return shape_error(c->op, cn, k ? "b_hh" : "b_ih",
                               oari_shape_str(want, 1, (int64_t[]){G * H}), b);
    }
    const oar_tensor *len = in[io->len];
    if (len && (len->dtype != OAR_I64 || !shape_is(len, 1, B, 0)))
        return oari_error(OAR_ERR_INVALID, "%s (%s): lengths must be int64 [batch] = [%lld], got %s %s",
                          c->op, cn, (long long)B, oar_dtype_name(len->dtype),
                          oari_shape_str(s1, len->ndim, len->shape));
    oari_meta *o = c->out;
    o[0] = (oari_meta){.dtype = x->dtype, .ndim = 3, .shape = {T, B, H}};
    o[1] = (oari_meta){.dtype = x->dtype, .ndim = 2, .shape = {B, H}};
    if (lstm) o[2] = o[1];
    c->kernel_dtype = x->dtype;
    return 0;
}

static int infer_rnn_layer(oari_infer *c) { return infer_layer(c, false); }
static int infer_lstm_layer(oari_infer *c) { return infer_layer(c, true); }

/* The train forms (oari_op_def.train_form): lstm_layer's is
 * lstm_layer_train, the GRU rnn_layer's gru_layer_train; each keeps a
 * reserve [T, B, rows * H] (y [T, B, H]) of 5 rows (gates i, f, g, o and
 * c) or 4 (r, z, n and hn). */
static void reserve_meta(const oari_meta *y, int rows, oari_meta *r) {
    *r = (oari_meta){.dtype = y->dtype, .ndim = 3, .shape = {y->shape[0], y->shape[1], rows * y->shape[2]}};
}
static int lstm_train_form(const oari_attrs *a, const oari_meta *y, oari_meta *extra) {
    (void)a;
    if (y && extra) reserve_meta(y, 5, extra);
    return OARI_OP_lstm_layer_train;
}
static int rnn_train_form(const oari_attrs *a, const oari_meta *y, oari_meta *extra) {
    if (a->ni < 1 || a->i[0] != CELL_GRU) return -1;
    if (y && extra) reserve_meta(y, 4, extra);
    return OARI_OP_gru_layer_train;
}

static int infer_gru_layer_train(oari_infer *c) {
    int st = infer_layer(c, false);
    if (st) return st;
    if (rnn_train_form(c->attrs, &c->out[0], &c->out[2]) < 0)
        return oari_error(OAR_ERR_INVALID, "%s: cell %lld is not 2 (gru)", c->op, (long long)c->attrs->i[0]);
    return 0;
}

static int infer_lstm_layer_train(oari_infer *c) {
    int st = infer_layer(c, true);
    if (!st) lstm_train_form(c->attrs, &c->out[0], &c->out[3]);
    return st;
}

/* lstm_layer_backward's inputs */
enum { BW_C0, BW_WHH, BW_RES, BW_LEN, BW_GY, BW_DH, BW_DC, BW_N };

static int infer_lstm_layer_backward(oari_infer *c) {
    oar_tensor *const *in = c->in;
    const oari_attrs *a = c->attrs;
    if (!a || a->ni < 1 || (a->i[0] != 0 && a->i[0] != 1))
        return oari_error(OAR_ERR_INVALID, "%s: bad attributes (expected [reverse 0/1])", c->op);
    if (!in[BW_C0] || !in[BW_WHH] || !in[BW_RES])
        return oari_error(OAR_ERR_INVALID, "%s: c0, w_hh and reserve are required, got NULL",
                          c->op);
    const oar_tensor *w_hh = in[BW_WHH], *res = in[BW_RES];
    char s1[200], want[200];
    if (w_hh->dtype != OAR_F32 && w_hh->dtype != OAR_F64)
        return oari_error(OAR_ERR_INVALID, "%s: w_hh is %s; expected float32 or float64", c->op,
                          oar_dtype_name(w_hh->dtype));
    if (w_hh->ndim != 2 || w_hh->shape[1] <= 0 || w_hh->shape[0] != 4 * w_hh->shape[1])
        return oari_error(OAR_ERR_INVALID, "%s: expected w_hh [4 * hidden, hidden] (hidden > 0), "
                          "got %s", c->op, oari_shape_str(s1, w_hh->ndim, w_hh->shape));
    const int64_t H = w_hh->shape[1];
    if (res->ndim != 3 || res->shape[2] != 5 * H)
        return oari_error(OAR_ERR_INVALID, "%s: expected reserve [seq_len, batch, 5 * %lld], got %s",
                          c->op, (long long)H, oari_shape_str(s1, res->ndim, res->shape));
    const int64_t T = res->shape[0], B = res->shape[1];
    static const char *const names[BW_N] = {"c0", "w_hh", "reserve", "lengths", "gy", "dh_n", "dc_n"};
    for (int i = 0; i < BW_N; i++) {
        const oar_tensor *t = in[i];
        if (!t || i == BW_WHH || i == BW_RES) continue;
        if (i == BW_LEN) {
            if (t->dtype != OAR_I64 || !shape_is(t, 1, B, 0))
                return oari_error(OAR_ERR_INVALID, "%s: lengths must be int64 [batch] = [%lld], "
                                  "got %s %s", c->op, (long long)B, oar_dtype_name(t->dtype),
                                  oari_shape_str(s1, t->ndim, t->shape));
            continue;
        }
        if (t->dtype != w_hh->dtype)
            return oari_error(OAR_ERR_INVALID, "%s: %s is %s but w_hh is %s; all float inputs "
                              "share one dtype", c->op, names[i], oar_dtype_name(t->dtype),
                              oar_dtype_name(w_hh->dtype));
        bool seq = i == BW_GY;
        if (seq ? !(t->ndim == 3 && t->shape[0] == T && t->shape[1] == B && t->shape[2] == H)
                : !shape_is(t, 2, B, H))
            return oari_error(OAR_ERR_INVALID, "%s: expected %s of shape %s, got %s", c->op,
                              names[i],
                              seq ? oari_shape_str(want, 3, (int64_t[]){T, B, H})
                                  : oari_shape_str(want, 2, (int64_t[]){B, H}),
                              oari_shape_str(s1, t->ndim, t->shape));
    }
    if (res->dtype != w_hh->dtype)
        return oari_error(OAR_ERR_INVALID, "%s: reserve is %s but w_hh is %s", c->op,
                          oar_dtype_name(res->dtype), oar_dtype_name(w_hh->dtype));
    c->out[0] = (oari_meta){.dtype = w_hh->dtype, .ndim = 3, .shape = {T, B, 4 * H}};
    c->out[1] = c->out[2] = (oari_meta){.dtype = w_hh->dtype, .ndim = 2, .shape = {B, H}};
    c->kernel_dtype = w_hh->dtype;
    return 0;
}

/* ---- gradient rule (ops only) ------------------------------------------------ */

/* Row t of a [T, ...] tensor. */
static oar_tensor *step(oar_tensor *x, int64_t t) {
    return oar_squeeze(oar_slice(x, 0, t, t + 1, 1), 0);
}

/* x W^T + b (b may be NULL) over the last dim. */
static oar_tensor *linear(oar_tensor *x, oar_tensor *w, oar_tensor *b) {
    oar_tensor *y = oar_matmul(x, oar_transpose(w, 0, 1));
    return b ? oar_add(y, b) : y;
}

/* bool [T, B, 1]: step t + shift is inside sequence b (lengths[b] > t +
 * shift), as ops on lengths so a traced graph reads them at run time. */
static oar_tensor *step_mask(oar_tensor *len, int64_t T, int64_t shift, oar_tensor *like) {
    int64_t *v = malloc((size_t)(T ? T : 1) * sizeof *v);
    if (!v) return oari_error(OAR_ERR_NOMEM, "rnn_layer backward: out of memory"), NULL;
    for (int64_t t = 0; t < T; t++) v[t] = t + shift;
    oar_tensor *steps = oar_tensor_from_data(v, OAR_I64, 3, (int64_t[]){T, 1, 1});
    free(v);
    oar_device *d = oar_tensor_device(like);
    if (steps && d && d != oar_tensor_device(steps)) steps = oar_tensor_to(steps, d); /* d NULL: traced */
    return oar_gt(oar_reshape(len, 3, (int64_t[]){1, -1, 1}), steps);
}

static oar_tensor *one_minus(oar_tensor *t) { return oar_sub(oar_scalar(1), t); }
/* s (1 - s): the derivative of a sigmoid from its value. */
static oar_tensor *dsigmoid(oar_tensor *s) { return oar_mul(s, one_minus(s)); }
/* 1 - t^2: the derivative of tanh from its value. */
static oar_tensor *dtanh(oar_tensor *t) { return one_minus(oar_mul(t, t)); }

/* The recomputed forward of one call: per-step values the backward loop
 * slices, each [T, B, H] (hp: the state before each step). */
typedef struct fwd {
    oar_tensor *hp, *act;            /* tanh/relu: act = the new h, pre = its argument */
    oar_tensor *pre;
    oar_tensor *i, *f, *g, *o;       /* LSTM gates */
    oar_tensor **c;                  /* LSTM: c after step t (an array of T) */
    oar_tensor *kc, *k;              /* LSTM: the backward's per-step factors */
    oar_tensor *r, *z, *n, *hn;      /* GRU; hn = W_hn h + b_hn */
} fwd;

static int input_grads(oari_grad_ctx *g, const rnn_io *io, oar_tensor *dA_ih, oar_tensor *dA_hh,
                       oar_tensor *dh, oar_tensor *dc, oar_tensor *hp);

/* LSTM: the gates from the reserve R [T, B, 5H] into f, and the cell
 * states after each step (*C) and before it (*CP: c0 first; reverse, the
 * step after). */
static void lstm_reserve_states(oar_tensor *R, oar_tensor *c0, int64_t T, int64_t H, bool reverse, fwd *f,
                                oar_tensor **C, oar_tensor **CP) {
    f->i = oar_slice(R, 2, 0, H, 1);
    f->f = oar_slice(R, 2, H, 2 * H, 1);
    f->g = oar_slice(R, 2, 2 * H, 3 * H, 1);
    f->o = oar_slice(R, 2, 3 * H, 4 * H, 1);
    *C = oar_slice(R, 2, 4 * H, 5 * H, 1);
    oar_tensor *c0r = oar_unsqueeze(c0, 0); /* (past a length the reserve holds c) */
    *CP = T == 1 ? c0r
          : !reverse ? oar_concat(2, (oar_tensor *[]){c0r, oar_slice(*C, 0, 0, T - 1, 1)}, 0)
                     : oar_concat(2, (oar_tensor *[]){oar_slice(*C, 0, 1, T, 1), c0r}, 0);
}

/* LSTM: the per-step factors for all steps at once, kc = o tanh'(c) and
 * k = [g sigmoid'(i), c_prev sigmoid'(f), i tanh'(g), tanh(c) sigmoid'(o)]. */
static void lstm_step_factors(fwd *f, oar_tensor *C, oar_tensor *CP) {
    oar_tensor *tc = oar_tanh(C);
    f->kc = oar_mul(f->o, dtanh(tc));
    f->k = oar_concat(4,
                      (oar_tensor *[]){oar_mul(f->g, dsigmoid(f->i)), oar_mul(CP, dsigmoid(f->f)),
                                       oar_mul(f->i, dtanh(f->g)), oar_mul(tc, dsigmoid(f->o))},
                      2);
}

/* Backward over the steps, carrying *dh (and the LSTM's *dc) from the last
 * step to the first: the gate pre-activations' gradients of step t into
 * da_ih[t] and da_hh[t] (the same tensor but for the GRU). mask: [T, B, 1]
 * steps inside each sequence, or NULL. dA_R, dAh_R, dC_R: what a gradient
 * of the reserve adds at each step, or NULL. */
static void steps_backward(int cell, bool reverse, int64_t T, const fwd *f, oar_tensor *mask, oar_tensor *gy,
                           oar_tensor *w_hh, oar_tensor *dA_R, oar_tensor *dAh_R, oar_tensor *dC_R, oar_tensor **dhp,
                           oar_tensor **dcp, oar_tensor **da_ih, oar_tensor **da_hh) {
    oar_tensor *zero = oar_scalar(0), *dh = *dhp, *dc = dcp ? *dcp : NULL;
    for (int64_t s = T - 1; s >= 0; s--) {
        int64_t t = reverse ? T - 1 - s : s;
        oar_tensor *m = mask ? step(mask, t) : NULL;
        oar_tensor *dht = gy ? oar_add(dh, step(gy, t)) : dh;
        oar_tensor *dai = NULL, *dah = NULL, *dh_new = NULL, *dc_new = NULL;
        if (cell == CELL_LSTM) {
            /* dc_t = dc + dh o tanh'(c); the gate gradients are (dc, dc, dc, dh) times
             * the factors of f.k (plus what the reserve's gradient gives step t) */
            if (dC_R) dc = oar_add(dc, step(dC_R, t));
            oar_tensor *dct = oar_add(dc, oar_mul(dht, step(f->kc, t)));
            dai = dah = oar_mul(oar_concat(4, (oar_tensor *[]){dct, dct, dct, dht}, 1), step(f->k, t));
            if (dA_R) dai = dah = oar_add(dai, step(dA_R, t));
            dc_new = oar_mul(dct, step(f->f, t));
            dh_new = oar_matmul(dah, w_hh);
        } else if (cell == CELL_GRU) {
            oar_tensor *r = step(f->r, t), *z = step(f->z, t), *n = step(f->n, t), *hp = step(f->hp, t),
                       *hn = step(f->hn, t);
            oar_tensor *dan = oar_mul(oar_mul(dht, one_minus(z)), dtanh(n));
            oar_tensor *dar = oar_mul(oar_mul(dan, hn), dsigmoid(r));
            oar_tensor *daz = oar_mul(oar_mul(dht, oar_sub(hp, n)), dsigmoid(z));
            dai = oar_concat(3, (oar_tensor *[]){dar, daz, dan}, 1);
            dah = oar_concat(3, (oar_tensor *[]){dar, daz, oar_mul(dan, r)}, 1);
            if (dA_R) { /* (plus what the reserve's gradient gives step t) */
                dai = oar_add(dai, step(dA_R, t));
                dah = oar_add(dah, step(dAh_R, t));
            }
            dh_new = oar_add(oar_mul(dht, z), oar_matmul(dah, w_hh));
        } else {
            oar_tensor *act = step(f->act, t);
            dai = dah = cell == CELL_RELU ? oar_where(oar_gt(step(f->pre, t), zero), dht, zero)
                                          : oar_mul(dht, dtanh(act));
            dh_new = oar_matmul(dah, w_hh);
        }
        if (m) { /* past a length: no gate gradient, the carry passes through */
            bool shared = dah == dai;
            dai = oar_where(m, dai, zero);
            dah = shared ? dai : oar_where(m, dah, zero);
            dh = oar_where(m, dh_new, dh);
            if (cell == CELL_LSTM) dc = oar_where(m, dc_new, dc);
        } else {
            dh = dh_new;
            dc = dc_new;
        }
        da_ih[t] = dai;
        da_hh[t] = dah;
    }
    *dhp = dh;
    if (dcp) *dcp = dc;
}

/* Whether the gradient of an LSTM layer may run as lstm_layer_backward,
 * which has no gradient rule of its own. Eagerly: where nothing
 * differentiates the result again (grad mode off: oar_grad/oar_backward
 * without create_graph) and x's device has the kernel. In a trace (graph
 * backward) always: a graph backward that meets the node goes through its
 * decomposition (lstm_backward_ops), and a traced value has no device to
 * ask, so the node runs on the CPU's kernel (elsewhere: a fallback). */
static bool fused_lstm_backward_here(const oar_tensor *x) {
    if (oari_trace_current) return true;
    return !oar_grad_enabled() && x->storage && oari_fused_op_here(OARI_OP_lstm_layer_backward, x);
}

/* lstm_layer_backward as the rule's ops (its decomposition, which a graph
 * backward differentiates where the node has to be differentiated
 * again): the same outputs from the same inputs. */
static int lstm_backward_ops(oar_tensor *const *in, const oari_attrs *a, oar_tensor **out) {
    oar_tensor *c0 = in[BW_C0], *w_hh = in[BW_WHH], *R = in[BW_RES], *len = in[BW_LEN];
    oar_tensor *dh = in[BW_DH] ? in[BW_DH] : oar_zeros_like(c0), *dc = in[BW_DC] ? in[BW_DC] : oar_zeros_like(c0);
    const bool reverse = a->i[0];
    const int64_t T = R->shape[0], B = R->shape[1], H = w_hh->shape[1];
    if (T == 0) {
        out[0] = oar_zeros(w_hh->dtype, 3, (int64_t[]){0, B, 4 * H});
        out[1] = dh;
        out[2] = dc;
        return out[0] && dh && dc ? 0 : oari_fail_status();
    }
    fwd f = {0};
    oar_tensor *C = NULL, *CP = NULL, *mask = len ? step_mask(len, T, 0, c0) : NULL;
    if (len && !mask) return oari_fail_status();
    lstm_reserve_states(R, c0, T, H, reverse, &f, &C, &CP);
    lstm_step_factors(&f, C, CP);
    oar_tensor **da = calloc((size_t)(2 * T), sizeof *da);
    if (!da) return oari_error(OAR_ERR_NOMEM, "lstm_layer_backward: out of memory");
    steps_backward(CELL_LSTM, reverse, T, &f, mask, in[BW_GY], w_hh, NULL, NULL, NULL, &dh, &dc, da, da + T);
    out[0] = oar_stack((int)T, da, 0);
    free(da);
    out[1] = dh;
    out[2] = dc;
    return out[0] && dh && dc ? 0 : oari_fail_status();
}

/* lstm_layer_train's gradient through lstm_layer_backward over its reserve
 * (hp: the state before each step, made by the caller). */
static int fused_lstm_grad(oari_grad_ctx *g, bool reverse, oar_tensor *hp) {
    const rnn_io *io = &rnn_io_lstm;
    oar_tensor *in[BW_N] = {g->in[io->c0], g->in[io->w_hh], g->out[3], g->in[io->len],
                            g->gout[0],    g->gout[1],      g->gout[2]};
    oar_tensor *out[OARI_MAX_OUT] = {0};
    oari_attrs a = oari_attrs_ints(1, (int64_t[]){reverse});
    if (oari_dispatch(OARI_OP_lstm_layer_backward, BW_N, in, &a, out)) return oari_fail_status();
    bool ok = true;
    for (int j = 0; j < 3; j++) ok = oari_pool_adopt(out[j]) && ok;
    if (!ok) return oari_fail_status();
    return input_grads(g, io, out[0], out[0], out[1], out[2], hp);
}

static int grad_layer(oari_grad_ctx *g) {
    bool lstm = g->op == OARI_OP_lstm_layer || g->op == OARI_OP_lstm_layer_train, reverse;
    const rnn_io *io = lstm ? &rnn_io_lstm : &rnn_io_rnn;
    int cell = call_cell(lstm, g->attrs, &reverse);
    oar_tensor *x = g->in[io->x], *h0 = g->in[io->h0], *c0 = lstm ? g->in[io->c0] : NULL;
    oar_tensor *w_ih = g->in[io->w_ih], *w_hh = g->in[io->w_hh], *b_ih = g->in[io->b_ih],
               *b_hh = g->in[io->b_hh], *len = g->in[io->len], *y = g->out[0];
    oar_tensor *gy = g->gout[0], *dh = g->gout[1], *dc = lstm ? g->gout[2] : NULL;
    /* lstm_layer_train, gru_layer_train: the gates (and LSTM cell states)
     * come from the reserve, which may have a gradient of its own (a
     * backward differentiated) */
    const int r_out = g->op == OARI_OP_lstm_layer_train ? 3 : g->op == OARI_OP_gru_layer_train ? 2 : -1;
    oar_tensor *R = r_out >= 0 ? g->out[r_out] : NULL;
    oar_tensor *gR = R ? g->gout[r_out] : NULL;
    const int64_t T = g->in_meta[io->x].shape[0], H = g->in_meta[io->h0].shape[1];
    if (!gy && !dh && !dc && !gR) return 0;
    if (oari_trace_size_is_dynamic(T))
        return oari_error(OAR_ERR_UNSUPPORTED,
                          "%s: the gradient unrolls the seq_len steps, so graph backward needs a "
                          "static seq_len (traced %lld is dynamic)",
                          lstm ? "lstm_layer" : "rnn_layer", (long long)T);
    if (!dh) dh = oar_zeros_like(h0);
    if (lstm && !dc) dc = oar_zeros_like(c0);
    if (T == 0) { /* h_n = h0, c_n = c0 */
        if (g->needs[io->h0]) g->gin[io->h0] = dh;
        if (lstm && g->needs[io->c0]) g->gin[io->c0] = dc;
        return 0;
    }
    /* the state before each step: y of the step before, h0 for the first
     * (reverse: the step after, and h0 at lengths[b] - 1 and past it) */
    oar_tensor *h0r = oar_unsqueeze(h0, 0);
    fwd f = {0};
    if (T == 1) {
        f.hp = h0r;
    } else if (!reverse) {
        f.hp = oar_concat(2, (oar_tensor *[]){h0r, oar_slice(y, 0, 0, T - 1, 1)}, 0);
    } else {
        f.hp = oar_concat(2, (oar_tensor *[]){oar_slice(y, 0, 1, T, 1), h0r}, 0);
        if (len) f.hp = oar_where(step_mask(len, T, 1, x), f.hp, h0r);
    }
    if (lstm && R && !gR && fused_lstm_backward_here(x)) return fused_lstm_grad(g, reverse, f.hp);
    oar_tensor *mask = len ? step_mask(len, T, 0, x) : NULL;
    if (len && !mask) return oari_fail_status();
    oar_tensor *a_ih = R ? NULL : linear(x, w_ih, b_ih), *a_hh = R ? NULL : linear(f.hp, w_hh, b_hh);
    oar_tensor **steps = calloc((size_t)(4 * T), sizeof *steps);
    if (!steps) return oari_error(OAR_ERR_NOMEM, "rnn_layer backward: out of memory");
    oar_tensor **da_ih = steps, **da_hh = steps + T, **cbuf = steps + 2 * T; /* c, c_prev */
    /* the reserve's gradient, as that of the gate pre-activations (GRU: of
     * x W_ih^T and of h W_hh^T apart) and of the LSTM cell states */
    oar_tensor *dA_R = NULL, *dAh_R = NULL, *dC_R = NULL;
    if (cell == CELL_LSTM) {
        oar_tensor *C, *CP; /* the cell state after and before each step, [T, B, H] */
        if (R) {
            lstm_reserve_states(R, c0, T, H, reverse, &f, &C, &CP);
        } else {
            oar_tensor *gate[4] = {NULL, NULL, NULL, NULL};
            if (oar_chunk(oar_add(a_ih, a_hh), 4, 2, 4, gate) == 4) {
                f.i = oar_sigmoid(gate[0]);
                f.f = oar_sigmoid(gate[1]);
                f.g = oar_tanh(gate[2]);
                f.o = oar_sigmoid(gate[3]);
            }
            /* the cell states, forward: c_t = f c_{t-1} + i g (held past a length) */
            f.c = cbuf;
            oar_tensor *c = c0;
            for (int64_t s = 0; s < T; s++) {
                int64_t t = reverse ? T - 1 - s : s;
                oar_tensor *cn = oar_add(oar_mul(step(f.f, t), c), oar_mul(step(f.i, t), step(f.g, t)));
                c = f.c[t] = mask ? oar_where(step(mask, t), cn, c) : cn;
            }
            for (int64_t t = 0; t < T; t++) /* c_prev in time order */
                cbuf[T + t] = reverse ? (t == T - 1 ? c0 : f.c[t + 1]) : (t == 0 ? c0 : f.c[t - 1]);
            C = oar_stack((int)T, f.c, 0);
            CP = oar_stack((int)T, cbuf + T, 0);
        }
        lstm_step_factors(&f, C, CP);
        if (gR) {
            oar_tensor *gi = oar_slice(gR, 2, 0, H, 1), *gf = oar_slice(gR, 2, H, 2 * H, 1),
                       *gg = oar_slice(gR, 2, 2 * H, 3 * H, 1), *go = oar_slice(gR, 2, 3 * H, 4 * H, 1);
            dA_R = oar_concat(4,
                              (oar_tensor *[]){oar_mul(gi, dsigmoid(f.i)), oar_mul(gf, dsigmoid(f.f)),
                                               oar_mul(gg, dtanh(f.g)), oar_mul(go, dsigmoid(f.o))},
                              2);
            dC_R = oar_slice(gR, 2, 4 * H, 5 * H, 1);
        }
    } else if (cell == CELL_GRU) {
        oar_tensor *gi[3] = {NULL, NULL, NULL}, *gh[3] = {NULL, NULL, NULL};
        if (R) {
            f.r = oar_slice(R, 2, 0, H, 1);
            f.z = oar_slice(R, 2, H, 2 * H, 1);
            f.n = oar_slice(R, 2, 2 * H, 3 * H, 1);
            f.hn = oar_slice(R, 2, 3 * H, 4 * H, 1);
        } else if (oar_chunk(a_ih, 3, 2, 3, gi) == 3 && oar_chunk(a_hh, 3, 2, 3, gh) == 3) {
            f.r = oar_sigmoid(oar_add(gi[0], gh[0]));
            f.z = oar_sigmoid(oar_add(gi[1], gh[1]));
            f.hn = gh[2];
            f.n = oar_tanh(oar_add(gi[2], oar_mul(f.r, gh[2])));
        }
        if (gR) { /* n = tanh(a_n + r hn): n's gradient reaches r and hn too */
            oar_tensor *gpn = oar_mul(oar_slice(gR, 2, 2 * H, 3 * H, 1), dtanh(f.n));
            oar_tensor *dar = oar_mul(oar_add(oar_slice(gR, 2, 0, H, 1), oar_mul(gpn, f.hn)), dsigmoid(f.r));
            oar_tensor *daz = oar_mul(oar_slice(gR, 2, H, 2 * H, 1), dsigmoid(f.z));
            oar_tensor *dhn = oar_add(oar_slice(gR, 2, 3 * H, 4 * H, 1), oar_mul(gpn, f.r));
            dA_R = oar_concat(3, (oar_tensor *[]){dar, daz, gpn}, 2);
            dAh_R = oar_concat(3, (oar_tensor *[]){dar, daz, dhn}, 2);
        }
    } else {
        f.pre = oar_add(a_ih, a_hh);
        f.act = cell == CELL_RELU ? oar_relu(f.pre) : oar_tanh(f.pre);
    }

    steps_backward(cell, reverse, T, &f, mask, gy, w_hh, dA_R, dAh_R, dC_R, &dh, lstm ? &dc : NULL, da_ih, da_hh);
    oar_tensor *dA_ih = oar_stack((int)T, da_ih, 0);
    oar_tensor *dA_hh = cell == CELL_GRU ? oar_stack((int)T, da_hh, 0) : dA_ih;
    free(steps);
    return input_grads(g, io, dA_ih, dA_hh, dh, dc, f.hp);
}

/* The gradients of the inputs from those of the gate pre-activations
 * (dA_ih = x W_ih^T's, dA_hh = hp W_hh^T's, each [T, B, G*H]), the
 * carries at the first step (dh, dc) and the states before each step hp. */
static int input_grads(oari_grad_ctx *g, const rnn_io *io, oar_tensor *dA_ih, oar_tensor *dA_hh,
                       oar_tensor *dh, oar_tensor *dc, oar_tensor *hp) {
    oar_tensor *x = g->in[io->x], *w_ih = g->in[io->w_ih], *b_ih = g->in[io->b_ih],
               *b_hh = g->in[io->b_hh];
    const int64_t T = g->in_meta[io->x].shape[0], B = g->in_meta[io->x].shape[1],
                  I = g->in_meta[io->x].shape[2], H = g->in_meta[io->h0].shape[1],
                  GH = g->in_meta[io->w_hh].shape[0];
    oar_tensor *dA_ih2 = oar_reshape(dA_ih, 2, (int64_t[]){T * B, GH});
    oar_tensor *dA_hh2 = oar_reshape(dA_hh, 2, (int64_t[]){T * B, GH});
    int64_t sum01[2] = {0, 1};
    struct {
        int i;
        oar_tensor *v;
    } res[] = {
        {io->x, g->needs[io->x] ? oar_matmul(dA_ih, w_ih) : NULL},
        {io->h0, dh},
        {io->c0, dc},
        {io->w_ih, g->needs[io->w_ih]
                       ? oar_matmul(oar_transpose(dA_ih2, 0, 1),
                                    oar_reshape(x, 2, (int64_t[]){T * B, I}))
                       : NULL},
        {io->w_hh, g->needs[io->w_hh]
                       ? oar_matmul(oar_transpose(dA_hh2, 0, 1),
                                    oar_reshape(hp, 2, (int64_t[]){T * B, H}))
                       : NULL},
        {io->b_ih, b_ih && g->needs[io->b_ih] ? oar_sum(dA_ih, 2, sum01, false) : NULL},
        {io->b_hh, b_hh && g->needs[io->b_hh] ? oar_sum(dA_hh, 2, sum01, false) : NULL},
    };
    for (size_t k = 0; k < sizeof res / sizeof *res; k++) {
        int i = res[k].i;
        if (i < 0 || !g->needs[i] || !g->in[i]) continue;
        if (!(g->gin[i] = res[k].v)) return oari_fail_status();
    }
    return 0;
}

const oari_op_def oari_def_rnn_layer = {
    .name = "rnn_layer",
    .n_in = 7,
    .n_out = 2,
    .fusion = OARI_FUSE_OPAQUE,
    .flags = OARI_F_OPTIONAL_IN | OARI_F_NO_HALF,
    .saved = OARI_SAVE_ALL_IN | OARI_SAVE_OUT(0),
    .infer = infer_rnn_layer,
    .grad = grad_layer,
    .train_form = rnn_train_form,
};
const oari_op_def oari_def_gru_layer_train = {
    .name = "gru_layer_train",
    .n_in = 7,
    .n_out = 3,
    .fusion = OARI_FUSE_OPAQUE,
    .flags = OARI_F_OPTIONAL_IN | OARI_F_NO_HALF,
    .saved = OARI_SAVE_ALL_IN | OARI_SAVE_OUT(0) | OARI_SAVE_OUT(2),
    .infer = infer_gru_layer_train,
    .grad = grad_layer,
};
const oari_op_def oari_def_lstm_layer_train = {
    .name = "lstm_layer_train",
    .n_in = 8,
    .n_out = 4,
    .fusion = OARI_FUSE_OPAQUE,
    .flags = OARI_F_OPTIONAL_IN | OARI_F_NO_HALF,
    .saved = OARI_SAVE_ALL_IN | OARI_SAVE_OUT(0) | OARI_SAVE_OUT(3),
    .infer = infer_lstm_layer_train,
    .grad = grad_layer,
};
const oari_op_def oari_def_lstm_layer_backward = {
    .name = "lstm_layer_backward",
    .n_in = BW_N,
    .n_out = 3,
    .fusion = OARI_FUSE_OPAQUE,
    .flags = OARI_F_OPTIONAL_IN | OARI_F_NO_HALF,
    .infer = infer_lstm_layer_backward,
    .decompose = lstm_backward_ops, /* (no rule: see rnn.def) */
};
const oari_op_def oari_def_lstm_layer = {
    .name = "lstm_layer",
    .n_in = 8,
    .n_out = 3,
    .fusion = OARI_FUSE_OPAQUE,
    .flags = OARI_F_OPTIONAL_IN | OARI_F_NO_HALF,
    .saved = OARI_SAVE_ALL_IN | OARI_SAVE_OUT(0),
    .infer = infer_lstm_layer,
    .grad = grad_layer,
    .train_form = lstm_train_form,
};

/* ---- public function --------------------------------------------------------- */

/* Whether a layer over these inputs runs as its train form `train`
 * (lstm_layer_train, gru_layer_train): its gradient is recorded eagerly
 * (grad mode on, a float input requiring grad, no trace) on plain tensors
 * of a device with the kernels (an LSTM's: lstm_layer_backward's too). */
static bool train_here(int n, oar_tensor *const *in, oari_op train) {
    if (!oar_grad_enabled() || oari_trace_current || oari_dist_any(n, in) || !in[0]->storage ||
        !oari_fused_op_here(train, in[0]) ||
        (train == OARI_OP_lstm_layer_train && !oari_fused_op_here(OARI_OP_lstm_layer_backward, in[0])))
        return false;
    for (int i = 0; i < n; i++)
        if (in[i] && in[i]->requires_grad) return true;
    return false;
}

int oar_rnn_layer(oar_rnn_cell cell, bool reverse, oar_tensor *x, oar_tensor *h0, oar_tensor *c0,
                  oar_tensor *w_ih, oar_tensor *w_hh, oar_tensor *b_ih, oar_tensor *b_hh,
                  oar_tensor *lengths, oar_tensor **y, oar_tensor **h_n, oar_tensor **c_n) {
    if (y) *y = NULL;
    if (h_n) *h_n = NULL;
    if (c_n) *c_n = NULL;
    if ((unsigned)cell > OAR_RNN_LSTM)
        return oari_error(OAR_ERR_INVALID,
                          "rnn_layer: cell %d is not one of OAR_RNN_TANH, OAR_RNN_RELU, "
                          "OAR_RNN_GRU, OAR_RNN_LSTM",
                          (int)cell);
    bool lstm = cell == OAR_RNN_LSTM;
    if (!x || !h0 || !w_ih || !w_hh || (lstm && !c0)) {
        if (!oari_error_pending())
            oari_error(OAR_ERR_INVALID, "%s: x, h0%s, w_ih and w_hh are required, got NULL",
                       lstm ? "lstm_layer" : "rnn_layer", lstm ? ", c0" : "");
        return oari_fail_status();
    }
    if (!lstm && c0)
        return oari_error(OAR_ERR_INVALID,
                          "rnn_layer (%s): c0 is for OAR_RNN_LSTM only; pass NULL",
                          cell_names[cell]);
    oar_tensor *in[8], *out[OARI_MAX_OUT];
    int n = 0;
    in[n++] = x;
    in[n++] = h0;
    if (lstm) in[n++] = c0;
    in[n++] = w_ih;
    in[n++] = w_hh;
    in[n++] = b_ih;
    in[n++] = b_hh;
    in[n++] = lengths;
    oari_attrs at = lstm ? (oari_attrs){.ni = 1, .i = {reverse}}
                         : (oari_attrs){.ni = 2, .i = {cell, reverse}};
    oari_op op = lstm ? OARI_OP_lstm_layer : OARI_OP_rnn_layer;
    const int train = oari_op_defs[op]->train_form(&at, NULL, NULL);
    if (train >= 0 && train_here(n, in, (oari_op)train)) op = (oari_op)train;
    int st = oari_dispatch(op, n, in, &at, out);
    if (st) return st;
    int n_out = oari_op_defs[op]->n_out;
    oar_tensor *r[4] = {NULL, NULL, NULL, NULL}; /* (the reserve lives on in the tape) */
    bool ok = true;
    for (int j = 0; j < n_out; j++) ok = (r[j] = oari_pool_adopt(out[j])) && ok;
    if (!ok) return oari_fail_status();
    if (y) *y = r[0];
    if (h_n) *h_n = r[1];
    if (c_n && lstm) *c_n = r[2]; /* (a GRU's r[2] is its reserve) */
    return 0;
}

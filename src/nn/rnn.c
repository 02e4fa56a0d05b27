/* Recurrent layers: RNN (tanh or ReLU), LSTM and GRU as modules, one
 * fused op call (oar_rnn_layer: the rnn_layer / lstm_layer rows of
 * src/ops/defs/rnn.def) per layer and direction, so their gradients of any
 * order come from the op's gradient rule and a traced module is one node
 * per layer and direction (exported as ONNX RNN / GRU / LSTM). Parameter
 * names, shapes, gate order and initialisation follow torch.nn.RNN,
 * torch.nn.LSTM and torch.nn.GRU; variable-length batches behave as
 * PyTorch's pack_padded_sequence(enforce_sorted=False) round trip. */
#include "module.h"

#include <math.h>
#include <oar/autograd.h>
#include <oar/device.h>
#include <oar/ops.h>
#include <stdio.h>
#include <stdlib.h>

enum { MODE_RNN_TANH, MODE_RNN_RELU, MODE_LSTM, MODE_GRU };

/* cfg of an RNN module */
enum { C_MODE, C_INPUT, C_HIDDEN, C_LAYERS, C_BIDIR, C_BATCH_FIRST, C_BIAS };

static const char *mode_name(int64_t mode) {
    return mode == MODE_LSTM ? "LSTM" : mode == MODE_GRU ? "GRU" : "RNN";
}

/* gates per step: 4 for LSTM (i, f, g, o), 3 for GRU (r, z, n), 1 for RNN */
static int64_t n_gates(int64_t mode) { return mode == MODE_LSTM ? 4 : mode == MODE_GRU ? 3 : 1; }

static oar_module *fail(oar_module *m) {
    oar_module_free(m);
    return NULL;
}

static oar_tensor *rnn_forward(oar_module *m, oar_tensor *x);

/* ---- construction ------------------------------------------------------- */

/* Adds a parameter of the given shape drawn from U(-bound, bound); 0 or an
 * error status. */
static int add_param(oar_module *m, const char *name, oar_dtype dtype, int ndim,
                     const int64_t *shape, double bound) {
    oar_tensor *t = oari_tensor_empty(NULL, dtype, ndim, shape);
    if (!t) return oari_fail_status();
    int st = oar_init_uniform_(t, -bound, bound);
    if (!st) st = oar_module_add_parameter(m, name, t);
    oar_tensor_release(t);
    return st;
}

static oar_module *rnn_new(int mode, int64_t input_size, int64_t hidden_size,
                           const oar_rnn_options *opts) {
    const char *what = mode_name(mode);
    oar_rnn_options o = opts ? *opts : (oar_rnn_options){0};
    if (o.num_layers == 0) o.num_layers = 1;
    if (o.dtype == 0) o.dtype = OAR_F32;
    if (input_size <= 0 || hidden_size <= 0 || o.num_layers < 0)
        return oari_error(OAR_ERR_INVALID,
                          "%s: input_size %lld, hidden_size %lld and num_layers %lld must be "
                          "positive",
                          what, (long long)input_size, (long long)hidden_size,
                          (long long)o.num_layers),
               NULL;
    if (!(o.dropout >= 0 && o.dropout <= 1))
        return oari_error(OAR_ERR_INVALID, "%s: dropout must be in [0, 1], got %g", what,
                          o.dropout),
               NULL;
    if (o.dtype != OAR_F32 && o.dtype != OAR_F64)
        return oari_error(OAR_ERR_INVALID, "%s: dtype must be float32 or float64, got %s", what,
                          oar_dtype_name(o.dtype)),
               NULL;
    if (o.relu && mode != MODE_RNN_TANH)
        return oari_error(OAR_ERR_INVALID,
                          "%s: the relu option is for RNN only (LSTM and GRU have fixed "
                          "nonlinearities)",
                          what),
               NULL;
    if (o.relu) mode = MODE_RNN_RELU;
    oar_module *m = oar_module_new(what, rnn_forward, NULL, NULL);
    if (!m) return NULL;
    m->cfg[C_MODE] = mode;
    m->cfg[C_INPUT] = input_size;
    m->cfg[C_HIDDEN] = hidden_size;
    m->cfg[C_LAYERS] = o.num_layers;
    m->cfg[C_BIDIR] = o.bidirectional;
    m->cfg[C_BATCH_FIRST] = o.batch_first;
    m->cfg[C_BIAS] = !o.no_bias;
    m->cfgf[0] = o.dropout;
    int64_t D = o.bidirectional ? 2 : 1, G = n_gates(mode) * hidden_size;
    double bound = 1.0 / sqrt((double)hidden_size); /* PyTorch's reset_parameters */
    for (int64_t k = 0; k < o.num_layers; k++) {
        for (int64_t d = 0; d < D; d++) {
            const char *sfx = d ? "_reverse" : "";
            int64_t in = k ? D * hidden_size : input_size;
            char name[64];
            int st;
            snprintf(name, sizeof name, "weight_ih_l%lld%s", (long long)k, sfx);
            st = add_param(m, name, o.dtype, 2, (int64_t[]){G, in}, bound);
            snprintf(name, sizeof name, "weight_hh_l%lld%s", (long long)k, sfx);
            if (!st) st = add_param(m, name, o.dtype, 2, (int64_t[]){G, hidden_size}, bound);
            if (!st && !o.no_bias) {
                snprintf(name, sizeof name, "bias_ih_l%lld%s", (long long)k, sfx);
                st = add_param(m, name, o.dtype, 1, &G, bound);
                snprintf(name, sizeof name, "bias_hh_l%lld%s", (long long)k, sfx);
                if (!st) st = add_param(m, name, o.dtype, 1, &G, bound);
            }
            if (st) return fail(m);
        }
    }
    return m;
}

oar_module *oar_rnn_new(int64_t input_size, int64_t hidden_size, const oar_rnn_options *o) {
    return rnn_new(MODE_RNN_TANH, input_size, hidden_size, o);
}

oar_module *oar_lstm_new(int64_t input_size, int64_t hidden_size, const oar_rnn_options *o) {
    return rnn_new(MODE_LSTM, input_size, hidden_size, o);
}

oar_module *oar_gru_new(int64_t input_size, int64_t hidden_size, const oar_rnn_options *o) {
    return rnn_new(MODE_GRU, input_size, hidden_size, o);
}

/* ---- forward ------------------------------------------------------------- */

/* The weights of one layer and direction. */
typedef struct {
    oar_tensor *w_ih, *w_hh, *b_ih, *b_hh; /* biases NULL without bias */
} cell_weights;

static cell_weights weights_of(oar_module *m, int64_t layer, int64_t dir) {
    int64_t D = m->cfg[C_BIDIR] ? 2 : 1, P = m->cfg[C_BIAS] ? 4 : 2;
    struct oari_mod_tensor *t = m->tensors + (layer * D + dir) * P;
    return (cell_weights){t[0].t, t[1].t, P == 4 ? t[2].t : NULL, P == 4 ? t[3].t : NULL};
}

/* Row t of a [T, ...] tensor. */
static oar_tensor *step(oar_tensor *x, int64_t t) {
    return oar_squeeze(oar_slice(x, 0, t, t + 1, 1), 0);
}

/* t on the device of `like` (moved if it is elsewhere). */
static oar_tensor *on_device_of(oar_tensor *t, oar_tensor *like) {
    if (!t || !like) return NULL;
    oar_device *d = oar_tensor_device(like);
    /* a traced (symbolic) tensor has no device: the graph runs t where it runs */
    return !d || !oar_tensor_device(t) || d == oar_tensor_device(t) ? t : oar_tensor_to(t, d);
}

static bool has_shape(const oar_tensor *t, int ndim, const int64_t *shape) {
    if (t->ndim != ndim) return false;
    for (int i = 0; i < ndim; i++)
        if (t->shape[i] != shape[i]) return false;
    return true;
}

/* Checks an initial state against [D * num_layers, B, H] (unbatched:
 * [D * num_layers, H]) and the parameters' dtype. 0 or an error. */
static int check_state(const char *what, const char *name, const oar_tensor *s, bool unbatched,
                       int64_t DL, int64_t B, int64_t H, oar_dtype dtype) {
    if (!s) return 0;
    int64_t want[3] = {DL, B, H}, want_u[2] = {DL, H};
    char s1[200], s2[200];
    if (unbatched ? !has_shape(s, 2, want_u) : !has_shape(s, 3, want))
        return oari_error(OAR_ERR_INVALID,
                          "%s: expected %s of shape %s (D * num_layers, %sH), got %s", what, name,
                          unbatched ? oari_shape_str(s1, 2, want_u) : oari_shape_str(s1, 3, want),
                          unbatched ? "" : "batch, ", oari_shape_str(s2, s->ndim, s->shape));
    if (s->dtype != dtype)
        return oari_error(OAR_ERR_INVALID, "%s: %s is %s, expected %s like the parameters", what,
                          name, oar_dtype_name(s->dtype), oar_dtype_name(dtype));
    return 0;
}

/* Reads and checks lengths (int64 [B], each in [1, T]); a malloc'd host
 * copy or NULL with an error. */
static int64_t *read_lengths(const char *what, oar_tensor *lengths, int64_t B, int64_t T) {
    char s1[200];
    if (lengths->dtype != OAR_I64 || lengths->ndim != 1 || lengths->shape[0] != B)
        return oari_error(OAR_ERR_INVALID, "%s: lengths must be int64 [batch] = [%lld], got %s %s",
                          what, (long long)B, oar_dtype_name(lengths->dtype),
                          oari_shape_str(s1, lengths->ndim, lengths->shape)),
               NULL;
    int64_t *len = malloc((size_t)(B ? B : 1) * sizeof *len);
    if (!len) return oari_error(OAR_ERR_NOMEM, "%s: out of memory for lengths", what), NULL;
    oar_pool *pool = oar_pool_push();
    oar_tensor *c = oar_contiguous(lengths);
    int st = c ? oar_tensor_to_host(c, len, (size_t)B * sizeof *len) : oari_fail_status();
    oar_pool_pop(pool);
    if (st) {
        free(len);
        return NULL;
    }
    for (int64_t b = 0; b < B; b++)
        if (len[b] < 1 || len[b] > T) {
            oari_error(OAR_ERR_INVALID, "%s: lengths[%lld] = %lld is outside [1, seq_len = %lld]",
                       what, (long long)b, (long long)len[b], (long long)T);
            free(len);
            return NULL;
        }
    return len;
}

/* Runs one direction of one layer over x [T, B, I] (the fused op).
 * lengths: int64 [B] on x's device, or NULL. Returns the outputs [T, B, H]
 * and writes the final states. */
static oar_tensor *run_direction(int64_t mode, oar_tensor *x, oar_tensor *lengths,
                                 const cell_weights *w, bool reverse, oar_tensor *h, oar_tensor *c,
                                 oar_tensor **h_n, oar_tensor **c_n) {
    static const oar_rnn_cell cells[] = {[MODE_RNN_TANH] = OAR_RNN_TANH,
                                         [MODE_RNN_RELU] = OAR_RNN_RELU,
                                         [MODE_LSTM] = OAR_RNN_LSTM, [MODE_GRU] = OAR_RNN_GRU};
    oar_tensor *y = NULL;
    if (oar_rnn_layer(cells[mode], reverse, x, h, c, w->w_ih, w->w_hh, w->b_ih, w->b_hh, lengths,
                      &y, h_n, c_n))
        return NULL;
    return y;
}

/* The whole forward pass; results in the caller's pool. */
static oar_tensor *rnn_call(oar_module *m, oar_tensor *input, oar_tensor *h0, oar_tensor *c0,
                            oar_tensor *lengths, oar_tensor **h_n, oar_tensor **c_n) {
    const char *what = m->type;
    int64_t mode = m->cfg[C_MODE], I = m->cfg[C_INPUT], H = m->cfg[C_HIDDEN], L = m->cfg[C_LAYERS],
            D = m->cfg[C_BIDIR] ? 2 : 1;
    bool batch_first = m->cfg[C_BATCH_FIRST];
    oar_dtype dtype = m->tensors[0].t->dtype;
    char s1[200];
    if (!input) {
        if (!oari_error_pending()) oari_error(OAR_ERR_INVALID, "%s: input is NULL", what);
        return NULL;
    }
    if ((input->ndim != 2 && input->ndim != 3) || input->shape[input->ndim - 1] != I)
        return oari_error(OAR_ERR_INVALID,
                          "%s: expected input [seq_len, batch, %lld] (batch_first: [batch, "
                          "seq_len, %lld]; unbatched: [seq_len, %lld]), got %s",
                          what, (long long)I, (long long)I, (long long)I,
                          oari_shape_str(s1, input->ndim, input->shape)),
               NULL;
    if (!oar_dtype_is_float(input->dtype) || input->dtype != dtype)
        return oari_error(OAR_ERR_INVALID,
                          "%s: input is %s, expected %s like the parameters (build the module "
                          "with that dtype or cast the input)",
                          what, oar_dtype_name(input->dtype), oar_dtype_name(dtype)),
               NULL;
    if (c0 && mode != MODE_LSTM)
        return oari_error(OAR_ERR_INVALID, "%s: c0 is for LSTM only; pass NULL", what), NULL;
    bool unbatched = input->ndim == 2;
    if (unbatched && lengths)
        return oari_error(OAR_ERR_INVALID,
                          "%s: lengths needs a batched input [seq_len, batch, %lld], got %s", what,
                          (long long)I, oari_shape_str(s1, input->ndim, input->shape)),
               NULL;
    int64_t T = unbatched || !batch_first ? input->shape[0] : input->shape[1];
    int64_t B = unbatched ? 1 : batch_first ? input->shape[0] : input->shape[1];
    if (T < 1)
        return oari_error(OAR_ERR_INVALID, "%s: the input has no time steps (%s)", what,
                          oari_shape_str(s1, input->ndim, input->shape)),
               NULL;
    if (check_state(what, "h0", h0, unbatched, D * L, B, H, dtype) ||
        check_state(what, "c0", c0, unbatched, D * L, B, H, dtype))
        return NULL;
    /* traced lengths (no storage) are checked by the kernel when the graph runs */
    bool host_check = lengths && lengths->storage;
    int64_t *len = host_check ? read_lengths(what, lengths, B, T) : NULL;
    if (host_check && !len) return NULL;
    if (lengths && !host_check && (lengths->dtype != OAR_I64 || lengths->ndim != 1 ||
                                   lengths->shape[0] != B))
        return oari_error(OAR_ERR_INVALID, "%s: lengths must be int64 [batch] = [%lld], got %s %s",
                          what, (long long)B, oar_dtype_name(lengths->dtype),
                          oari_shape_str(s1, lengths->ndim, lengths->shape)),
               NULL;

    oar_pool *pool = oar_pool_push();
    /* time major [T, B, I]; states [D * L, B, H] */
    oar_tensor *x = unbatched     ? oar_unsqueeze(input, 1)
                    : batch_first ? oar_transpose(input, 0, 1)
                                  : input;
    if (unbatched) {
        if (h0) h0 = oar_unsqueeze(h0, 1);
        if (c0) c0 = oar_unsqueeze(c0, 1);
    }
    /* the lengths were checked on the host; the op reads them on x's device */
    oar_tensor *len_dev = len ? on_device_of(lengths, x) : lengths;
    free(len);
    if (lengths && !len_dev) return oari_pool_return(pool, NULL);
    oar_tensor *zero = on_device_of(oar_zeros(dtype, 2, (int64_t[]){B, H}), x);
    oar_tensor **hs = calloc((size_t)(2 * D * L), sizeof *hs), **cs = hs + D * L;
    if (!hs) {
        oari_error(OAR_ERR_NOMEM, "%s: out of memory", what);
        return oari_pool_return(pool, NULL);
    }
    bool training = m->training && m->cfgf[0] > 0;
    for (int64_t k = 0; k < L && x; k++) {
        oar_tensor *ys[2] = {NULL, NULL};
        for (int64_t d = 0; d < D; d++) {
            int64_t s = k * D + d;
            cell_weights w = weights_of(m, k, d);
            oar_tensor *h = h0 ? step(h0, s) : zero, *c = c0 ? step(c0, s) : zero;
            ys[d] = run_direction(mode, x, len_dev, &w, d == 1, h, mode == MODE_LSTM ? c : NULL,
                                  &hs[s], &cs[s]);
        }
        x = D == 2 ? oar_concat(2, ys, 2) : ys[0];
        if (training && k < L - 1) x = oar_dropout(x, m->cfgf[0], true);
    }
    oar_tensor *y = x;
    if (y) y = unbatched ? oar_squeeze(y, 1) : batch_first ? oar_transpose(y, 0, 1) : y;
    oar_tensor *hn = y ? oar_stack((int)(D * L), hs, 0) : NULL;
    oar_tensor *cn = y && mode == MODE_LSTM ? oar_stack((int)(D * L), cs, 0) : NULL;
    free(hs);
    if (unbatched) {
        hn = oar_squeeze(hn, 1);
        if (cn) cn = oar_squeeze(cn, 1);
    }
    if (!y || !hn || (mode == MODE_LSTM && !cn)) return oari_pool_return(pool, NULL);
    /* hand the states to the caller's pool along with y */
    oar_tensor_retain(hn);
    if (cn) oar_tensor_retain(cn);
    y = oari_pool_return(pool, y);
    hn = oari_pool_adopt(hn);
    cn = oari_pool_adopt(cn);
    if (!y || !hn || (mode == MODE_LSTM && !cn)) return NULL;
    if (h_n) *h_n = hn;
    if (c_n) *c_n = cn;
    return y;
}

static oar_tensor *rnn_forward(oar_module *m, oar_tensor *x) {
    return rnn_call(m, x, NULL, NULL, NULL, NULL, NULL);
}

oar_tensor *oar_rnn_forward(oar_module *m, oar_tensor *input, oar_tensor *h0, oar_tensor *c0,
                            oar_tensor *lengths, oar_tensor **h_n, oar_tensor **c_n) {
    if (h_n) *h_n = NULL;
    if (c_n) *c_n = NULL;
    if (!m || m->forward != rnn_forward)
        return oari_error(OAR_ERR_INVALID,
                          "rnn_forward: expected an RNN, LSTM or GRU module, got %s",
                          m ? m->type : "NULL"),
               NULL;
    return rnn_call(m, input, h0, c0, lengths, h_n, c_n);
}

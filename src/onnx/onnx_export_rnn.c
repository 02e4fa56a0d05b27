/* ONNX export, recurrent layers: rnn_layer and lstm_layer (one layer, one
 * direction; src/ops/defs/rnn.def) as one ONNX RNN, GRU or LSTM node of
 * direction "forward" or "reverse". What differs between the two:
 *   - weights: oar's w_ih [G*H, I] / w_hh [G*H, H] become W [1, G*H, I] /
 *     R [1, G*H, H] with the gate blocks in ONNX's order (PyTorch's LSTM
 *     i, f, g, o is ONNX's i, o, f, c; GRU r, z, n is z, r, h), by Split
 *     and Concat, so constant weights stay constants;
 *   - biases: B [1, 2*G*H] = the two reordered biases concatenated (a
 *     missing one: zeros; both missing: no B);
 *   - GRU: PyTorch's cell is ONNX's linear_before_reset = 1;
 *   - states: h0 [B, H] is initial_h [1, B, H]; y [T, B, H] is Y [T, 1, B,
 *     H] squeezed, h_n / c_n are Y_h / Y_c [1, B, H] squeezed;
 *   - lengths (int64) become sequence_lens (int32, Cast). */
#define OARI_ONNX_PROTO
#include "onnx_export_internal.h"

#include <string.h>

/* ONNX's gate order as positions in oar's (PyTorch's) blocks. */
static const int lstm_order[4] = {0, 3, 1, 2}; /* i, o, f, c <- i, f, g, o */
static const int gru_order[3] = {1, 0, 2};     /* z, r, h <- r, z, n */

/* t [G*H, ...] with its G gate blocks in ONNX's order, then given a
 * leading dim of 1 ([1, G*H, ...]) unless flat. */
static const char *onnx_gates(oari_xp *x, const char *t, int G, const int *order, bool flat) {
    if (G > 1) {
        Onnx__NodeProto *nd = oari_xp_node(x, "Split", 1, (const char *const[]){t}, G,
                                           (const char *const[]){NULL, NULL, NULL, NULL});
        oari_xp_set_i(x, nd, "axis", 0);
        if (!nd) return NULL;
        const char *parts[4];
        for (int k = 0; k < G; k++) parts[k] = nd->output[order[k]];
        Onnx__NodeProto *cat = oari_xp_node1(x, "Concat", G, parts, NULL);
        oari_xp_set_i(x, cat, "axis", 0);
        t = oari_xp_out0(cat);
    }
    return flat ? t : OP2("Unsqueeze", t, oari_xp_i64(x, 1, (int64_t[]){0}), NULL);
}

/* The attribute activations = [name] (STRINGS). */
static void set_activation(oari_xp *x, Onnx__NodeProto *nd, const char *name) {
    if (!nd) return;
    Onnx__AttributeProto *a = oari_xp_alloc(x, sizeof *a);
    Onnx__AttributeProto **arr = oari_xp_alloc(x, (nd->n_attribute + 1) * sizeof *arr);
    ProtobufCBinaryData *s = oari_xp_alloc(x, sizeof *s);
    if (!a || !arr || !s) return;
    onnx__attribute_proto__init(a);
    a->name = "activations";
    a->has_type = 1;
    a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS;
    s->data = (uint8_t *)name;
    s->len = strlen(name);
    a->n_strings = 1;
    a->strings = s;
    if (nd->n_attribute) memcpy(arr, nd->attribute, nd->n_attribute * sizeof *arr);
    arr[nd->n_attribute++] = a;
    nd->attribute = arr;
}

/* Output j of the oar node from the ONNX output `full` squeezed on axis,
 * when the graph uses it. */
static void squeeze_out(oari_xp *x, const oari_xnode *e, int j, const char *full, int64_t axis) {
    int v = e->n->out[j];
    if (j > 0 && !x->uses[v]) return;
    OP2("Squeeze", full, oari_xp_i64(x, 1, &axis), x->names[v]);
}

int oari_onnx_emit_rnn(oari_xp *x, const oari_xnode *e) {
    const oari_gnode *n = e->n;
    bool lstm = n->op == OARI_OP_lstm_layer;
    int cell = lstm ? 3 : (int)e->a[0]; /* 0 tanh, 1 relu, 2 gru, 3 lstm */
    bool reverse = lstm ? e->a[0] != 0 : e->a[1] != 0;
    /* inputs: x, h0, (c0), w_ih, w_hh, b_ih?, b_hh?, lengths? */
    int k0 = lstm ? 3 : 2;
    const char *in[8] = {NULL};
    for (int k = 0; k < n->n_in && k < 8; k++) in[k] = n->in[k] >= 0 ? x->names[n->in[k]] : NULL;
    const char *c0 = lstm ? in[2] : NULL, *w_ih = in[k0], *w_hh = in[k0 + 1], *b_ih = in[k0 + 2],
               *b_hh = in[k0 + 3], *len = in[k0 + 4];
    const oari_gvalue *whv = &x->g->values[n->in[k0 + 1]];
    int G = cell == 3 ? 4 : cell == 2 ? 3 : 1;
    int64_t H = whv->shape[1], GH = G * H;
    if (whv->sym[0] >= 0 || whv->sym[1] >= 0)
        return oari_xp_fail(x, "a recurrent layer whose hidden size is dynamic");
    const int *order = cell == 3 ? lstm_order : cell == 2 ? gru_order : NULL;
    const char *W = onnx_gates(x, w_ih, G, order, false), *R = onnx_gates(x, w_hh, G, order, false);
    const char *B = "";
    if (b_ih || b_hh) {
        const char *zero = b_ih && b_hh ? NULL : oari_xp_filled(x, e->dt, 1, &GH, 0.0);
        const char *bi = b_ih ? onnx_gates(x, b_ih, G, order, true) : zero;
        const char *bh = b_hh ? onnx_gates(x, b_hh, G, order, true) : zero;
        Onnx__NodeProto *cat = oari_xp_node1(x, "Concat", 2, (const char *const[]){bi, bh}, NULL);
        oari_xp_set_i(x, cat, "axis", 0);
        B = OP2("Unsqueeze", oari_xp_out0(cat), oari_xp_i64(x, 1, (int64_t[]){0}), NULL);
    }
    const char *lens = "";
    if (len) {
        Onnx__NodeProto *cast = oari_xp_node1(x, "Cast", 1, (const char *const[]){len}, NULL);
        oari_xp_set_i(x, cast, "to", ONNX__TENSOR_PROTO__DATA_TYPE__INT32);
        lens = oari_xp_out0(cast);
    }
    const char *axis0 = oari_xp_i64(x, 1, (int64_t[]){0});
    const char *h0 = OP2("Unsqueeze", in[1], axis0, NULL);
    const char *cinit = lstm ? OP2("Unsqueeze", c0, axis0, NULL) : NULL;
    const char *type = cell == 3 ? "LSTM" : cell == 2 ? "GRU" : "RNN";
    Onnx__NodeProto *nd =
        oari_xp_node(x, type, lstm ? 7 : 6, (const char *const[]){e->X, W, R, B, lens, h0, cinit},
                     lstm ? 3 : 2, (const char *const[]){NULL, NULL, NULL});
    oari_xp_set_i(x, nd, "hidden_size", H);
    oari_xp_set_s(x, nd, "direction", reverse ? "reverse" : "forward");
    if (cell == 2) oari_xp_set_i(x, nd, "linear_before_reset", 1);
    if (cell == 1) set_activation(x, nd, "Relu");
    if (!nd) return x->st;
    squeeze_out(x, e, 0, nd->output[0], 1); /* Y [T, 1, B, H] */
    squeeze_out(x, e, 1, nd->output[1], 0); /* Y_h [1, B, H] */
    if (lstm) squeeze_out(x, e, 2, nd->output[2], 0);
    return x->st;
}

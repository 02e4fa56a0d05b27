/* ONNX import, recurrent ops (RNN, GRU, LSTM): unrolled over the (static)
 * sequence into matmuls and activations, one direction at a time; the
 * default activations only. sequence_lens masks the steps past each
 * batch entry's length (outputs zero there, the state kept). */
#define OARI_ONNX_PROTO
#include "onnx_internal.h"
#include <string.h>


typedef struct {
    int kind;         /* 0 RNN, 1 GRU, 2 LSTM */
    int64_t H, gates; /* hidden size; gates per kind: 1, 3, 4 */
    double clip;      /* 0: none */
    bool lbr;         /* GRU linear_before_reset */
} cell;

static oar_tensor *pre(const cell *c, oar_tensor *g) { return c->clip > 0 ? oar_clamp(g, -c->clip, c->clip) : g; }
/* gate k of a [B, gates*H] tensor */
static oar_tensor *gate(const cell *c, oar_tensor *g, int k) { return oar_slice(g, 1, k * c->H, (k + 1) * c->H, 1); }

/* One direction: x [T, B, I] (borrowed), w [G*H, I], r [G*H, H], wb/rb
 * [G*H] or NULL, p [3H] or NULL, h0/c0 [B, H]; lens [B] or NULL. Writes
 * the per-step outputs ys[T] and the final state. */
static int run_dir(const cell *c, oar_tensor *x, oar_tensor *w, oar_tensor *r, oar_tensor *wb, oar_tensor *rb,
                   oar_tensor *p, oar_tensor *h, oar_tensor *cs, oar_tensor *lens, bool reverse, oar_tensor **ys,
                   oar_tensor **h_out, oar_tensor **c_out) {
    int64_t T = oar_tensor_shape(x)[0];
    oar_tensor *xw = oar_matmul(x, oar_transpose(w, 0, 1)); /* [T, B, G*H] */
    if (wb && c->kind != 1) xw = oar_add(xw, wb);
    if (wb && c->kind == 1) xw = oar_add(xw, oar_concat(2, (oar_tensor *[]){oar_slice(oar_add(wb, rb), 0, 0, 2 * c->H, 1),
                                                                            oar_slice(wb, 0, 2 * c->H, 3 * c->H, 1)}, 0));
    if (rb && c->kind != 1) xw = oar_add(xw, rb);
    oar_tensor *rt = oar_transpose(r, 0, 1);
    oar_dtype dt = oar_tensor_dtype(x);
    for (int64_t s = 0; s < T; s++) {
        int64_t t = reverse ? T - 1 - s : s;
        oar_tensor *xt = oar_squeeze(oar_slice(xw, 0, t, t + 1, 1), 0); /* [B, G*H] */
        oar_tensor *hn, *cn = NULL;
        if (c->kind == 0) {
            hn = oar_tanh(pre(c, oar_add(xt, oar_matmul(h, rt))));
        } else if (c->kind == 1) {
            oar_tensor *rzr = oar_matmul(h, oar_slice(rt, 1, 0, 2 * c->H, 1)); /* [B, 2H] */
            oar_tensor *zr = oar_add(oar_slice(xt, 1, 0, 2 * c->H, 1), rzr);
            oar_tensor *z = oar_sigmoid(pre(c, gate(c, zr, 0))), *rr = oar_sigmoid(pre(c, gate(c, zr, 1)));
            oar_tensor *rh = oar_slice(rt, 1, 2 * c->H, 3 * c->H, 1), *rbh = rb ? oar_slice(rb, 0, 2 * c->H, 3 * c->H, 1) : NULL;
            oar_tensor *hh;
            if (c->lbr) {
                oar_tensor *hr = oar_matmul(h, rh);
                if (rbh) hr = oar_add(hr, rbh);
                hh = oar_add(gate(c, xt, 2), oar_mul(rr, hr));
            } else {
                hh = oar_add(gate(c, xt, 2), oar_matmul(oar_mul(rr, h), rh));
                if (rbh) hh = oar_add(hh, rbh);
            }
            hh = oar_tanh(pre(c, hh));
            hn = oar_add(oar_mul(oar_add_scalar(oar_neg(z), 1.0), hh), oar_mul(z, h));
        } else {
            oar_tensor *g = oar_add(xt, oar_matmul(h, rt));
            oar_tensor *gi = gate(c, g, 0), *go = gate(c, g, 1), *gf = gate(c, g, 2), *gc = gate(c, g, 3);
            if (p) {
                gi = oar_add(gi, oar_mul(oar_slice(p, 0, 0, c->H, 1), cs));
                gf = oar_add(gf, oar_mul(oar_slice(p, 0, 2 * c->H, 3 * c->H, 1), cs));
            }
            oar_tensor *i = oar_sigmoid(pre(c, gi)), *f = oar_sigmoid(pre(c, gf)), *cc = oar_tanh(pre(c, gc));
            cn = oar_add(oar_mul(f, cs), oar_mul(i, cc));
            if (p) go = oar_add(go, oar_mul(oar_slice(p, 0, c->H, 2 * c->H, 1), cn));
            hn = oar_mul(oar_sigmoid(pre(c, go)), oar_tanh(cn));
        }
        if (lens) { /* steps past a sequence's length keep the state and output zeros */
            oar_tensor *m = oar_unsqueeze(oar_gt(lens, oari_onnx_scalar((double)t, oar_tensor_dtype(lens))), 1);
            oar_tensor *zero = oari_onnx_scalar(0, dt);
            ys[t] = oar_where(m, hn, zero);
            hn = oar_where(m, hn, h);
            if (cn) cn = oar_where(m, cn, cs);
        } else {
            ys[t] = hn;
        }
        h = hn;
        if (cn) cs = cn;
        if (!h) return OAR_ERR_INVALID;
    }
    *h_out = h;
    *c_out = cs;
    return 0;
}

int oari_onnx_conv_rnn(oari_onnx_node *nd) {
    int st = oari_onnx_need(nd, 3);
    if (st) return st;
    cell c = {.kind = OP_IS("RNN") ? 0 : OP_IS("GRU") ? 1 : 2};
    c.gates = c.kind == 0 ? 1 : c.kind == 1 ? 3 : 4;
    c.H = oari_onnx_attr_i(nd, "hidden_size", 0);
    c.clip = oari_onnx_attr_f(nd, "clip", 0);
    c.lbr = oari_onnx_attr_i(nd, "linear_before_reset", 0) != 0;
    if (oari_onnx_attr(nd, "activations") || oari_onnx_attr(nd, "activation_alpha"))
        return oari_error(OAR_ERR_UNSUPPORTED, "activations other than the defaults are not supported");
    if (oari_onnx_attr_i(nd, "input_forget", 0)) return oari_error(OAR_ERR_UNSUPPORTED, "input_forget=1 is not supported");
    bool batch_first = oari_onnx_attr_i(nd, "layout", 0) != 0;
    int ndir = 1;
    bool rev = false;
    if (oari_onnx_attr_s_is(nd, "direction", "forward", "bidirectional")) ndir = 2;
    else if (oari_onnx_attr_s_is(nd, "direction", "forward", "reverse")) rev = true;
    else if (!oari_onnx_attr_s_is(nd, "direction", "forward", "forward")) return oari_error(OAR_ERR_INVALID, "unknown direction");
    oar_tensor *x = nd->in[0], *W = nd->in[1], *R = nd->in[2];
    oar_tensor *B = nd->n_in > 3 ? nd->in[3] : NULL, *lens = nd->n_in > 4 ? nd->in[4] : NULL;
    oar_tensor *h0 = nd->n_in > 5 ? nd->in[5] : NULL, *c0 = c.kind == 2 && nd->n_in > 6 ? nd->in[6] : NULL;
    oar_tensor *P = c.kind == 2 && nd->n_in > 7 ? nd->in[7] : NULL;
    if (oar_tensor_ndim(x) != 3 || oar_tensor_ndim(W) != 3 || oar_tensor_ndim(R) != 3)
        return oari_error(OAR_ERR_INVALID, "X, W, R must be 3-D");
    if (c.H <= 0) c.H = oar_tensor_shape(R)[2];
    if (oar_tensor_shape(W)[0] != ndir || oar_tensor_shape(W)[1] != c.gates * c.H || oar_tensor_shape(R)[1] != c.gates * c.H)
        return oari_error(OAR_ERR_INVALID, "W, R shapes disagree with %d directions, hidden size %lld", ndir, (long long)c.H);
    if (batch_first) {
        x = oar_transpose(x, 0, 1);
        if (h0) h0 = oar_transpose(h0, 0, 1);
        if (c0) c0 = oar_transpose(c0, 0, 1);
    }
    int64_t T = oar_tensor_shape(x)[0], Bn = oar_tensor_shape(x)[1];
    if (T > 4096) return oari_error(OAR_ERR_UNSUPPORTED, "sequence length %lld (at most 4096 unrolled)", (long long)T);
    oar_dtype dt = oar_tensor_dtype(x);
    oar_tensor **ys = oari_calloc((size_t)T, sizeof *ys);
    if (!ys) return oari_fail_status();
    oar_tensor *ydir[2] = {NULL, NULL}, *hdir[2] = {NULL, NULL}, *cdir[2] = {NULL, NULL};
    for (int d = 0; d < ndir && !st; d++) {
        oar_tensor *w = oar_squeeze(oar_slice(W, 0, d, d + 1, 1), 0), *r = oar_squeeze(oar_slice(R, 0, d, d + 1, 1), 0);
        oar_tensor *wb = NULL, *rb = NULL, *p = NULL;
        if (B) {
            oar_tensor *b = oar_squeeze(oar_slice(B, 0, d, d + 1, 1), 0);
            wb = oar_slice(b, 0, 0, c.gates * c.H, 1);
            rb = oar_slice(b, 0, c.gates * c.H, 2 * c.gates * c.H, 1);
        }
        if (P) p = oar_squeeze(oar_slice(P, 0, d, d + 1, 1), 0);
        oar_tensor *h = h0 ? oar_squeeze(oar_slice(h0, 0, d, d + 1, 1), 0) : oar_zeros(dt, 2, (int64_t[]){Bn, c.H});
        oar_tensor *cs = c.kind == 2 ? (c0 ? oar_squeeze(oar_slice(c0, 0, d, d + 1, 1), 0) : oar_zeros(dt, 2, (int64_t[]){Bn, c.H})) : NULL;
        st = run_dir(&c, x, w, r, wb, rb, p, h, cs, lens, rev || d == 1, ys, &hdir[d], &cdir[d]);
        if (!st) ydir[d] = oar_stack((int)T, ys, 0); /* [T, B, H] */
        if (!st && !ydir[d]) st = OAR_ERR_INVALID;
    }
    oari_free(ys, (size_t)T * sizeof *ys);
    if (st) return st;
    oar_tensor *Y = oar_stack(ndir, ydir, 1);       /* [T, D, B, H] */
    oar_tensor *Yh = oar_stack(ndir, hdir, 0);      /* [D, B, H] */
    oar_tensor *Yc = c.kind == 2 ? oar_stack(ndir, cdir, 0) : NULL;
    if (batch_first) {
        Y = oar_permute(Y, (int64_t[]){2, 0, 1, 3});
        Yh = oar_transpose(Yh, 0, 1);
        if (Yc) Yc = oar_transpose(Yc, 0, 1);
    }
    nd->out[0] = oar_contiguous(Y);
    if (nd->n_out > 1) nd->out[1] = oar_contiguous(Yh);
    if (nd->n_out > 2) nd->out[2] = Yc ? oar_contiguous(Yc) : NULL;
    return nd->out[0] ? 0 : OAR_ERR_INVALID;
}

/* Inference: fuses a quantized linear layer into one qlinear node
 * (src/ops/defs/quant.def). The pattern is what oar_graph_quantize and the
 * ONNX importer's QDQ folding emit for a matrix product,
 *     y = cast(qmatmul(xq, Wq), f32) * s  (+ b) (relu)
 * with Wq a 2-D int8 constant, s an f32 constant of one or n elements and b
 * an f32 constant of n; each intermediate value used once and no graph
 * output. It becomes y = qlinear(xq, pack(Wq), colsum(Wq), s, b; zp, relu):
 * no int32 tensor in memory, no separate scale, bias and relu passes, and
 * the weight packed once here for the kernel (VNNI's 4 x 16 blocks) rather
 * than at every call. Where y's one use is a per-tensor quantize with
 * constant parameters (the next layer's input), that quantize moves into
 * the epilogue too and the layer writes the next one's uint8 directly. The
 * values are the same ops in the same order: the exact int32 sum,
 * converted, times s, plus b, relu, quantize's rounding. The qmatmul node
 * becomes the qlinear node; the rest die.
 *
 * A convolution, cast(qconv2d(xq, Wq), f32) * s (+ b) (relu) (quantize),
 * Wq a 4-D int8 constant of groups 1 and s, b constants along the channel
 * ([1, o, 1, 1], [o, 1, 1], or s of one element), becomes the same way one
 * qlinear_conv2d node (Wq packed as [o, ceil(c kh kw / 4), 4] with its row
 * sums), written NCHW.
 *
 * First, a per-tensor quantize with constant parameters moves up through
 * the nodes between a layer and it that commute with it: a view (a
 * reshape: quantize is elementwise) and max_pool2d's values (quantize is
 * monotonic, so the max of the quantized window is the quantized max; the
 * pool becomes qmax_pool2d on the bytes, its indices unused and not
 * written). So conv, relu, pool, quantize (the demo CNN) becomes conv,
 * relu, quantize, pool on uint8, and the conv takes the quantize into its
 * epilogue. The values are the same for every pool input that is not NaN
 * or +-inf and whose x / scale stays below 2^63 (quantize sends those to
 * the low end, which is not monotonic).
 *
 * Last, a 2 x 2 stride-2 qmax_pool2d (no padding) of a requantized
 * qlinear_conv2d's one use, the conv's scales positive and finite and its
 * bias finite, goes into the conv (its attribute 12): it pools the int32
 * sums and runs its epilogue once per pooled output. The epilogue is
 * non-decreasing in the sum, so the values are quantize of the f32 pool,
 * the unfused order. */
#include "../ir.h"

#include <math.h>
#include <string.h>

static bool const_of(const oar_graph *g, int v, oar_dtype dt) {
    return v >= 0 && g->values[v].kind == OARI_V_CONST && g->values[v].dtype == dt;
}

/* The one live node reading v (after node `from`), when v's only use is
 * there (not a graph output); -1 otherwise. */
static int sole_user(const oar_graph *g, int v, const int *uses, int from) {
    if (uses[v] != 1) return -1;
    for (int i = from + 1; i < g->n_nodes; i++) {
        const oari_gnode *n = &g->nodes[i];
        if (n->dead) continue;
        for (int k = 0; k < n->n_in; k++)
            if (n->in[k] == v) return oari_is_ctrl(n->op) ? -1 : i;
    }
    return -1;
}

static bool same_shape(const oari_gvalue *a, const oari_gvalue *b) {
    return a->ndim == b->ndim && !memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof *a->shape);
}

/* A constant of n elements (or one, when one is allowed) laid out along
 * the last dim only: [], [n], [1, n], ... */
static bool along_last(const oari_gvalue *c, int64_t n, bool one_ok, int max_ndim) {
    if (c->ndim > max_ndim) return false;
    int64_t numel = 1;
    for (int d = 0; d < c->ndim; d++) {
        if (d < c->ndim - 1 && c->shape[d] != 1) return false;
        numel *= c->shape[d];
    }
    return numel == n || (one_ok && numel == 1);
}

/* The other input of binary node b, which reads v; -1 if b does not read v
 * exactly once. */
static int other_input(const oari_gnode *b, int v) {
    if (b->n_in != 2) return -1;
    if (b->in[0] == v && b->in[1] != v) return b->in[1];
    if (b->in[1] == v && b->in[0] != v) return b->in[0];
    return -1;
}

/* W [k, n] int8 packed as [ceil(n/16), ceil(k/4), 16, 4] with zeros past
 * k and n, and its column sums; new tensors (the caller's pool). */
static int pack(oar_tensor *w, oar_tensor **packed, oar_tensor **sums) {
    oar_tensor *wc = oar_contiguous(w);
    if (!wc) return oari_fail_status();
    const int8_t *src = oar_tensor_data(wc);
    int64_t k = wc->shape[0], n = wc->shape[1], kb = (k + 3) / 4, nb = (n + 15) / 16;
    size_t bytes = (size_t)(nb * kb * 64);
    int8_t *p = oari_calloc(bytes ? bytes : 1, 1);
    int32_t *s = oari_calloc((size_t)(n ? n : 1), sizeof *s);
    if (!p || !s) {
        if (p) oari_free(p, bytes ? bytes : 1);
        if (s) oari_free(s, (size_t)(n ? n : 1) * sizeof *s);
        return oari_fail_status();
    }
    for (int64_t r = 0; r < k; r++)
        for (int64_t j = 0; j < n; j++) {
            int8_t v = src[r * n + j];
            p[((j / 16) * kb + r / 4) * 64 + (j % 16) * 4 + r % 4] = v;
            s[j] += v;
        }
    *packed = oar_tensor_from_data(p, OAR_I8, 4, (int64_t[]){nb, kb, 16, 4});
    *sums = oar_tensor_from_data(s, OAR_I32, 1, &n);
    oari_free(p, bytes ? bytes : 1);
    oari_free(s, (size_t)(n ? n : 1) * sizeof *s);
    return *packed && *sums ? 0 : oari_fail_status();
}

/* c as a contiguous f32 [n], or a 0-d one when it has one element and
 * scalar_ok. */
static oar_tensor *flat(oar_tensor *c, int64_t n, bool scalar_ok) {
    bool scalar = scalar_ok && c->numel == 1;
    return oar_contiguous(oar_reshape(c, scalar ? 0 : 1, &n));
}

/* Adds t as a constant named after value `like`; -1 on failure. */
static int add_const(oar_graph *g, oar_tensor *t, int like, const char *suffix) {
    char name[256];
    const char *base = g->values[like].name ? g->values[like].name : "qlinear";
    snprintf(name, sizeof name, "%s.%s", base, suffix);
    return t ? oari_graph_add_const(g, t, name) : -1;
}

/* One element of constant v as a double (v is a float or int64 constant
 * of one element). */
static double one_value(const oar_graph *g, int v) {
    oar_tensor *t = g->values[v].constant;
    const void *d = oar_tensor_data(t);
    switch (t->dtype) {
    case OAR_F32: return *(const float *)d;
    case OAR_F64: return *(const double *)d;
    default: return (double)*(const int64_t *)d;
    }
}

/* Whether node q quantizes its input per tensor with constant, valid
 * parameters (a scale of one f32 or f64, positive and finite; a zero
 * point of one int64 in the output's range). */
static bool fusable_quantize(const oar_graph *g, const oari_gnode *q) {
    if (q->op != OARI_OP_quantize || q->n_in != 3 || q->attrs.ni < 3) return false;
    int sv = q->in[1], zv = q->in[2];
    if (!(const_of(g, sv, OAR_F32) || const_of(g, sv, OAR_F64)) || !const_of(g, zv, OAR_I64) ||
        g->values[sv].constant->numel != 1 || g->values[zv].constant->numel != 1)
        return false;
    oar_dtype dt = (oar_dtype)q->attrs.i[1];
    double sc = one_value(g, sv), z = one_value(g, zv);
    double lo = dt == OAR_I8 ? -128 : 0, hi = dt == OAR_I8 ? 127 : 255;
    return (dt == OAR_U8 || dt == OAR_I8) && g->values[q->out[0]].dtype == dt && sc > 0 &&
           isfinite(sc) && z >= lo && z <= hi;
}


/* ---- quantize moved up through views and max pools ---------------------------- */

/* Swaps what nodes a and b compute (op, attributes, inputs), not their
 * outputs. */
static void swap_ops(oari_gnode *a, oari_gnode *b) {
    oari_gnode t = *a;
    a->op = b->op, a->attrs = b->attrs, a->n_in = b->n_in, a->in = b->in;
    memcpy(a->isym, b->isym, sizeof a->isym), memcpy(a->imul, b->imul, sizeof a->imul);
    b->op = t.op, b->attrs = t.attrs, b->n_in = t.n_in, b->in = t.in;
    memcpy(b->isym, t.isym, sizeof b->isym), memcpy(b->imul, t.imul, sizeof b->imul);
}

/* Value `to` takes the meta (dtype aside) of value `from`. */
static void take_meta(oar_graph *g, int to, int from, oar_dtype dt) {
    oari_gvalue *t = &g->values[to];
    const oari_gvalue *f = &g->values[from];
    t->ndim = f->ndim, t->dtype = dt;
    memcpy(t->shape, f->shape, sizeof t->shape), memcpy(t->sym, f->sym, sizeof t->sym);
    memcpy(t->smul, f->smul, sizeof t->smul);
}

/* Quantize node iq reads the one use of a view's or a max_pool2d's values
 * (its indices unused): the producer p becomes the quantize of p's input
 * and node iq the view, or qmax_pool2d, of that. 1 if it moved, else 0. */
static int move_quantize(oar_graph *g, int iq, const int *uses) {
    oari_gnode *q = &g->nodes[iq];
    if (q->dead || !fusable_quantize(g, q)) return 0;
    int v = q->in[0];
    const oari_gvalue *gv = &g->values[v];
    if (gv->kind != OARI_V_NODE || uses[v] != 1 || gv->out_index != 0) return 0;
    int ip = gv->producer;
    oari_gnode *p = &g->nodes[ip];
    if (p->dead || p->n_in != 1 || p->in[0] < 0) return 0;
    int y = p->in[0];
    oar_dtype yt = g->values[y].dtype;
    if ((yt != OAR_F32 && yt != OAR_F64) || g->values[y].kind == OARI_V_CONST) return 0;
    bool pool = p->op == OARI_OP_max_pool2d && p->n_out == 2 && uses[p->out[1]] == 0 && p->attrs.ni == 9;
    if (!pool && p->op != OARI_OP_view) return 0;
    oar_dtype qt = g->values[q->out[0]].dtype;
    swap_ops(p, q);
    p->in[0] = y; /* p: quantize(y, s, z) -> v */
    q->in[0] = v; /* q: view or pool of v */
    if (pool) {
        q->op = OARI_OP_qmax_pool2d;
        p->n_out = 1, p->out[1] = -1;
    }
    take_meta(g, v, y, qt);
    return 1;
}

/* A constant of n elements (or one, when one is allowed) along the
 * channel dim of an [n, c, h, w] value: [c, 1, 1] or [1, c, 1, 1]; one
 * element in any shape of at most 4 dims. */
static bool along_channel(const oari_gvalue *c, int64_t n, bool one_ok) {
    if (c->ndim > 4) return false;
    int64_t numel = 1;
    for (int d = 0; d < c->ndim; d++) numel *= c->shape[d];
    if (one_ok && numel == 1) return true;
    if (c->ndim < 3 || numel != n) return false;
    return c->shape[c->ndim - 3] == n && c->shape[c->ndim - 2] == 1 && c->shape[c->ndim - 1] == 1;
}

/* W [o, c, kh, kw] int8 packed as [o, ceil(c kh kw / 4), 4] with zeros
 * past c kh kw, and its row sums; new tensors (the caller's pool). */
static int pack_conv(oar_tensor *w, oar_tensor **packed, oar_tensor **sums) {
    oar_tensor *wc = oar_contiguous(w);
    if (!wc) return oari_fail_status();
    const int8_t *src = oar_tensor_data(wc);
    int64_t o = wc->shape[0], k = wc->shape[1] * wc->shape[2] * wc->shape[3], kb = (k + 3) / 4;
    size_t bytes = (size_t)(o * kb * 4);
    int8_t *p = oari_calloc(bytes ? bytes : 1, 1);
    int32_t *s = oari_calloc((size_t)(o ? o : 1), sizeof *s);
    if (!p || !s) {
        if (p) oari_free(p, bytes ? bytes : 1);
        if (s) oari_free(s, (size_t)(o ? o : 1) * sizeof *s);
        return oari_fail_status();
    }
    for (int64_t r = 0; r < o; r++)
        for (int64_t j = 0; j < k; j++) {
            p[r * kb * 4 + j] = src[r * k + j];
            s[r] += src[r * k + j];
        }
    *packed = oar_tensor_from_data(p, OAR_I8, 3, (int64_t[]){o, kb, 4});
    *sums = oar_tensor_from_data(s, OAR_I32, 1, &o);
    oari_free(p, bytes ? bytes : 1);
    oari_free(s, (size_t)(o ? o : 1) * sizeof *s);
    return *packed && *sums ? 0 : oari_fail_status();
}

/* The scale of a layer's outputs (n of them) is constant sv: along the
 * last dim (a matrix product) or the channel (a conv). */
static bool scale_ok(const oar_graph *g, int sv, int64_t n, bool conv, int acc_ndim) {
    return const_of(g, sv, OAR_F32) &&
           (conv ? along_channel(&g->values[sv], n, true) : along_last(&g->values[sv], n, true, acc_ndim));
}
static bool bias_ok(const oar_graph *g, int bv, int64_t n, bool conv, int acc_ndim) {
    return const_of(g, bv, OAR_F32) &&
           (conv ? along_channel(&g->values[bv], n, false) : along_last(&g->values[bv], n, false, acc_ndim));
}

/* Fuses the layer whose qmatmul (or qconv2d) is node i; 1 if it did, 0 if
 * the pattern does not hold, < 0 on failure. */
static int fuse_one(oar_graph *g, int i, const int *uses) {
    oari_gnode *mm = &g->nodes[i];
    const bool conv = mm->op == OARI_OP_qconv2d;
    int x = mm->in[0], wv = mm->in[1], acc = mm->out[0];
    if (mm->n_in != 2 || x < 0 || !const_of(g, wv, OAR_I8) || g->values[wv].ndim != (conv ? 4 : 2)) return 0;
    if (conv && (mm->attrs.ni != 8 || mm->attrs.i[7] != 1 || g->values[x].ndim != 4)) return 0; /* groups 1 */
    int64_t n = g->values[wv].shape[conv ? 0 : 1];
    const int acc_nd = g->values[acc].ndim;
    int ic = sole_user(g, acc, uses, i);
    const oari_gnode *cast = ic >= 0 ? &g->nodes[ic] : NULL;
    if (!cast || cast->op != OARI_OP_cast || g->values[cast->out[0]].dtype != OAR_F32) return 0;
    int im = sole_user(g, cast->out[0], uses, ic);
    const oari_gnode *mul = im >= 0 ? &g->nodes[im] : NULL;
    int sv = mul && mul->op == OARI_OP_mul ? other_input(mul, cast->out[0]) : -1;
    if (!scale_ok(g, sv, n, conv, acc_nd) || !same_shape(&g->values[mul->out[0]], &g->values[acc]) ||
        g->values[mul->out[0]].dtype != OAR_F32)
        return 0;
    int last = mul->out[0], chain[3] = {ic, im, -1}, n_chain = 2, bv = -1, relu = 0;
    int ia = sole_user(g, last, uses, im);
    const oari_gnode *add = ia >= 0 && g->nodes[ia].op == OARI_OP_add ? &g->nodes[ia] : NULL;
    int b = add ? other_input(add, last) : -1;
    if (b >= 0 && bias_ok(g, b, n, conv, acc_nd) && same_shape(&g->values[add->out[0]], &g->values[acc]) &&
        g->values[add->out[0]].dtype == OAR_F32) {
        bv = b, last = add->out[0], chain[n_chain++] = ia;
    }
    int from = chain[n_chain - 1], ir = sole_user(g, last, uses, from);
    int *nin = NULL;
    if (ir >= 0 && g->nodes[ir].op == OARI_OP_relu && g->nodes[ir].n_in == 1) {
        relu = 1;
        last = g->nodes[ir].out[0];
        from = ir;
    } else {
        ir = -1;
    }
    int iq = sole_user(g, last, uses, from);
    if (iq >= 0 && !fusable_quantize(g, &g->nodes[iq])) iq = -1;
    /* the constants the kernel reads */
    oar_pool *pool = oar_pool_push();
    oar_tensor *wp = NULL, *ws = NULL;
    int st = !pool ? oari_fail_status()
             : conv ? pack_conv(g->values[wv].constant, &wp, &ws)
                    : pack(g->values[wv].constant, &wp, &ws);
    oar_tensor *s = st ? NULL : flat(g->values[sv].constant, n, true);
    oar_tensor *bias = st || bv < 0 ? NULL : flat(g->values[bv].constant, n, false);
    int wpv = st || !s || (bv >= 0 && !bias) ? -1 : add_const(g, wp, wv, "packed");
    int wsv = wpv >= 0 ? add_const(g, ws, wv, conv ? "rowsum" : "colsum") : -1;
    int s2 = wsv >= 0 ? add_const(g, s, sv, "flat") : -1;
    int b2 = s2 >= 0 && bv >= 0 ? add_const(g, bias, bv, "flat") : -1;
    if (pool) oar_pool_pop(pool);
    if (s2 < 0 || (bv >= 0 && b2 < 0) || !(nin = oari_malloc(7 * sizeof *nin))) return oari_fail_status();
    mm = &g->nodes[i]; /* (adding values moves no node, but read it again) */
    const oari_gnode *qn = iq >= 0 ? &g->nodes[iq] : NULL;
    nin[0] = x, nin[1] = wpv, nin[2] = wsv, nin[3] = s2, nin[4] = b2;
    nin[5] = qn ? qn->in[1] : -1, nin[6] = qn ? qn->in[2] : -1;
    int64_t at[12], nat = 0;
    at[nat++] = mm->attrs.i[0]; /* zp */
    if (conv) {
        for (int k = 1; k <= 6; k++) at[nat++] = mm->attrs.i[k]; /* stride, padding, dilation */
        at[nat++] = g->values[wv].shape[2], at[nat++] = g->values[wv].shape[3];
    }
    at[nat++] = relu;
    if (qn) at[nat++] = qn->attrs.i[1], at[nat++] = qn->attrs.i[2];
    oari_free(mm->in, (size_t)mm->n_in * sizeof *mm->in);
    mm->in = nin;
    mm->n_in = 7;
    mm->op = conv ? OARI_OP_qlinear_conv2d : OARI_OP_qlinear;
    mm->attrs = oari_attrs_ints((int)nat, at);
    for (int k = 0; k < OARI_MAX_IATTR; k++) mm->isym[k] = -1, mm->imul[k] = 1;
    g->values[acc].dtype = qn ? (oar_dtype)qn->attrs.i[1] : OAR_F32;
    if (qn) last = qn->out[0];
    oari_graph_replace_uses(g, last, acc);
    if (iq >= 0) oari_graph_kill(g, iq);
    if (ir >= 0) oari_graph_kill(g, ir);
    for (int c = n_chain - 1; c >= 0; c--) oari_graph_kill(g, chain[c]);
    return 1;
}

/* 1 when every element of f32 constant v is finite and (when pos) > 0
 * (v -1: no constant, 1), 0 when not, a negative status on failure. */
static int all_finite(const oar_graph *g, int v, bool pos) {
    if (v < 0) return 1;
    if (!const_of(g, v, OAR_F32)) return 0;
    oar_pool *pool = oar_pool_push();
    oar_tensor *c = pool ? oar_contiguous(g->values[v].constant) : NULL;
    const float *d = c ? oar_tensor_data(c) : NULL;
    int ok = d ? 1 : oari_fail_status();
    for (int64_t i = 0; ok == 1 && i < c->numel; i++) ok = isfinite(d[i]) && (!pos || d[i] > 0);
    if (pool) oar_pool_pop(pool);
    return ok;
}

/* Pool node ip reads the one use of a requantized qlinear_conv2d's output:
 * a 2 x 2 stride-2 pool without padding, dilation or ceil mode, the conv's
 * scales positive and finite and its bias finite, static spatial dims. The
 * conv then takes the pool (attribute 12): it pools its int32 sums, and
 * its epilogue, non-decreasing in them, runs on a quarter of the outputs;
 * f32 conv, relu, max pool, quantize give the same values in that order
 * (max commutes with a non-decreasing function). 1 if fused, 0 if not, a
 * negative status on failure. */
static int fuse_pool(oar_graph *g, int ip, const int *uses) {
    oari_gnode *pl = &g->nodes[ip];
    static const int64_t want[9] = {2, 2, 2, 2, 0, 0, 1, 1, 0};
    if (pl->dead || pl->op != OARI_OP_qmax_pool2d || pl->attrs.ni != 9 || pl->in[0] < 0 ||
        memcmp(pl->attrs.i, want, sizeof want))
        return 0;
    int v = pl->in[0];
    const oari_gvalue *gv = &g->values[v];
    if (gv->kind != OARI_V_NODE || uses[v] != 1 || gv->ndim != 4 || gv->sym[2] >= 0 || gv->sym[3] >= 0 ||
        gv->shape[2] < 2 || gv->shape[3] < 2)
        return 0;
    oari_gnode *cv = &g->nodes[gv->producer];
    if (cv->dead || cv->op != OARI_OP_qlinear_conv2d || cv->attrs.ni != 12 || cv->n_in < 5) return 0;
    int ok = all_finite(g, cv->in[3], true);
    if (ok == 1) ok = all_finite(g, cv->in[4], false);
    if (ok != 1) return ok;
    int64_t at[13];
    memcpy(at, cv->attrs.i, 12 * sizeof *at);
    at[12] = 1;
    cv->attrs = oari_attrs_ints(13, at);
    cv->isym[12] = -1, cv->imul[12] = 1;
    int y = pl->out[0];
    take_meta(g, v, y, g->values[y].dtype);
    oari_graph_replace_uses(g, y, v);
    oari_graph_kill(g, ip);
    return 1;
}

/* uses[] sized for g's values now (grown when the pass added some). */
static int *use_counts(oar_graph *g, int *uses, size_t *nbytes) {
    size_t want = (size_t)(g->n_values + 1) * sizeof(int);
    if (!uses || want != *nbytes) {
        if (uses) oari_free(uses, *nbytes);
        *nbytes = want;
        if (!(uses = oari_malloc(want))) return NULL;
    }
    oari_graph_use_counts(g, uses);
    return uses;
}

int oari_pass_fuse_qlinear(oar_graph *g) {
    int changes = 0, st = 0;
    size_t nbytes = 0;
    int *uses = NULL;
    /* quantizes up through views and pools, as far as they go */
    for (bool moved = true; moved;) {
        moved = false;
        for (int i = 0; i < g->n_nodes; i++) {
            if (g->nodes[i].dead || g->nodes[i].op != OARI_OP_quantize) continue;
            if (!(uses = use_counts(g, uses, &nbytes))) return oari_fail_status();
            if (move_quantize(g, i, uses)) moved = true, changes++;
        }
    }
    for (int i = 0; i < g->n_nodes && !st; i++) {
        oari_op op = g->nodes[i].op;
        if (g->nodes[i].dead || (op != OARI_OP_qmatmul && op != OARI_OP_qconv2d)) continue;
        if (!(uses = use_counts(g, uses, &nbytes))) return oari_fail_status();
        st = fuse_one(g, i, uses);
        if (st > 0) changes++, st = 0;
    }
    for (int i = 0; i < g->n_nodes && !st; i++) {
        if (g->nodes[i].dead || g->nodes[i].op != OARI_OP_qmax_pool2d) continue;
        if (!(uses = use_counts(g, uses, &nbytes))) return oari_fail_status();
        st = fuse_pool(g, i, uses);
        if (st > 0) changes++, st = 0;
    }
    if (uses) oari_free(uses, nbytes);
    if (st) return st;
    int cst = changes ? oari_graph_compact(g) : 0;
    return cst ? cst : changes;
}

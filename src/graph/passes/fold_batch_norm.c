/* Inference: folds an eval-mode batch_norm into the conv2d or linear
 * (matmul, optionally + bias) before it, when the weights are constants
 * and the conv/linear result feeds only the batch norm:
 *   y = (W x + b - mean) * s + beta,  s = gamma / sqrt(var + eps)
 *     = (W * s) x + ((b - mean) * s + beta). */
#include "../ir.h"

static oari_gnode *producer(oar_graph *g, int v, oari_op op) {
    if (v < 0 || g->values[v].kind != OARI_V_NODE) return NULL;
    oari_gnode *p = &g->nodes[g->values[v].producer];
    return !p->dead && p->op == op ? p : NULL;
}

static bool is_const(const oar_graph *g, int v) { return v >= 0 && g->values[v].kind == OARI_V_CONST; }
static oar_tensor *cval(const oar_graph *g, int v) { return v >= 0 ? g->values[v].constant : NULL; }

/* The tensor behind v: a constant, or a view node of a constant (a
 * linear weight's transpose) evaluated now. A new reference, or NULL. */
static oar_tensor *const_value(oar_graph *g, int v) {
    if (is_const(g, v)) return oar_tensor_retain(g->values[v].constant);
    if (v < 0 || g->values[v].kind != OARI_V_NODE) return NULL;
    oari_gnode *p = &g->nodes[g->values[v].producer];
    if (p->dead || !(oari_gnode_def(p)->flags & OARI_F_VIEW) || !is_const(g, p->in[0])) return NULL;
    for (int k = 0; k < p->attrs.ni; k++)
        if (p->isym[k] >= 0) return NULL;
    oar_tensor *out[OARI_MAX_OUT] = {0};
    oar_tensor *in = g->values[p->in[0]].constant;
    return oari_dispatch(p->op, 1, &in, &p->attrs, out) ? NULL : out[0];
}

/* Adds t as a constant (retained); -1 on failure. */
static int add_const(oar_graph *g, oar_tensor *t, int like, const char *suffix) {
    if (!t) return -1;
    oar_tensor *c = oar_contiguous(t);
    char name[256];
    const char *base = like >= 0 && g->values[like].name ? g->values[like].name : "bn";
    snprintf(name, sizeof name, "%s.%s", base, suffix);
    return c ? oari_graph_add_const(g, c, name) : -1;
}

static int fold_one(oar_graph *g, oari_gnode *bn, const int *uses) {
    int xin = bn->in[0];
    if (bn->attrs.i[0] != 0 || !is_const(g, bn->in[1]) || !is_const(g, bn->in[2])) return 0;
    if ((bn->in[3] >= 0 && !is_const(g, bn->in[3])) || (bn->in[4] >= 0 && !is_const(g, bn->in[4]))) return 0;
    for (int j = 1; j < bn->n_out; j++)
        if (uses[bn->out[j]]) return 0;
    if (uses[xin] != 1) return 0;
    oari_gnode *conv = producer(g, xin, OARI_OP_conv2d);
    oari_gnode *add = conv ? NULL : producer(g, xin, OARI_OP_add);
    oari_gnode *mm = conv ? NULL : producer(g, add ? add->in[0] : xin, OARI_OP_matmul);
    int bias_v = -1;
    if (conv) {
        if (!is_const(g, conv->in[1]) || (conv->in[2] >= 0 && !is_const(g, conv->in[2]))) return 0;
        bias_v = conv->in[2];
    } else if (mm) {
        if (g->values[mm->in[1]].ndim != 2 || g->values[xin].ndim != 2) return 0;
        if (add) {
            if (uses[add->in[0]] != 1 || !is_const(g, add->in[1]) || g->values[add->in[1]].ndim != 1) return 0;
            bias_v = add->in[1];
        }
    } else {
        return 0;
    }
    oar_tensor *w = const_value(g, conv ? conv->in[1] : mm->in[1]), *nw;
    if (!w) return 0;
    oar_tensor *mean = cval(g, bn->in[1]), *var = cval(g, bn->in[2]);
    oar_tensor *gamma = cval(g, bn->in[3]), *beta = cval(g, bn->in[4]);
    int64_t C = mean->numel;
    oar_pool *pool = oar_pool_push();
    oar_tensor *s = oar_rsqrt(oar_add_scalar(var, bn->attrs.f[0]));
    if (gamma) s = oar_mul(s, gamma);
    oar_tensor *b = bias_v >= 0 ? cval(g, bias_v) : oar_zeros_like(mean);
    oar_tensor *nb = oar_mul(oar_sub(b, mean), s);
    if (beta) nb = oar_add(nb, beta);
    if (conv) {
        int64_t sh[4] = {C, 1, 1, 1};
        nw = oar_mul(w, oar_reshape(s, 4, sh));
    } else {
        nw = oar_mul(w, s); /* [in, C] * [C] */
    }
    if (nw) nw = oar_cast(nw, w->dtype);
    if (nb) nb = oar_cast(nb, g->values[xin].dtype);
    int wsrc = conv ? conv->in[1] : mm->in[1];
    if (!conv && g->values[wsrc].kind == OARI_V_NODE) wsrc = g->nodes[g->values[wsrc].producer].in[0];
    int wv = add_const(g, nw, wsrc, "bn_folded");
    int bv = wv >= 0 ? add_const(g, nb, bn->in[1], "bn_folded_bias") : -1;
    oar_pool_pop(pool);
    oar_tensor_release(w);
    if (wv < 0 || bv < 0) return oari_fail_status();
    if (conv) {
        conv->in[1] = wv;
        conv->in[2] = bv;
        oari_graph_replace_uses(g, bn->out[0], xin);
        bn->dead = true;
    } else {
        mm->in[1] = wv;
        if (add) {
            add->in[1] = bv;
            oari_graph_replace_uses(g, bn->out[0], xin);
            bn->dead = true;
        } else { /* the batch norm node becomes add(matmul, bias) */
            int *in2 = oari_malloc(2 * sizeof *in2);
            if (!in2) return oari_fail_status();
            in2[0] = xin;
            in2[1] = bv;
            oari_free(bn->in, (size_t)bn->n_in * sizeof *bn->in);
            bn->in = in2;
            bn->op = OARI_OP_add;
            bn->n_in = 2;
            bn->n_out = 1;
            bn->attrs = oari_attrs_none();
            for (int k = 0; k < OARI_MAX_IATTR; k++) bn->isym[k] = -1, bn->imul[k] = 1;
        }
    }
    return 1;
}

int oari_pass_fold_batch_norm(oar_graph *g) {
    int changes = 0, st = 0;
    size_t nbytes = (size_t)(g->n_values + 2 * g->n_nodes + 1) * sizeof(int);
    int *uses = oari_malloc(nbytes);
    if (!uses) return oari_fail_status();
    for (int i = 0; i < g->n_nodes && !st; i++) {
        oari_gnode *n = &g->nodes[i];
        if (n->dead || n->op != OARI_OP_batch_norm) continue;
        oari_graph_use_counts(g, uses);
        st = fold_one(g, n, uses);
        if (st > 0) changes++, st = 0;
    }
    oari_free(uses, nbytes);
    if (st) return st;
    int cst = oari_graph_compact(g);
    return cst ? cst : changes;
}

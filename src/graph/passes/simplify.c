/* Algebraic simplification: x*1, 1*x, x/1, x+0, 0+x, x-0 become x (when
 * the result has x's dtype and shape); permute of permute becomes one
 * permute (or nothing); view of view becomes one view; a view to x's own
 * shape becomes x; the transpose of a 2-D matmul used nowhere else becomes
 * the matmul of the transposes, (a b)^T = b^T a^T, which makes a weight
 * gradient contiguous (the GEMM reads transposed operands for free);
 * ReLU's backward mask moves through max pooling; and the gradient of a
 * tensor split in pieces is joined by one concat (all below). */
#include "../ir.h"

#include <string.h>

static bool same_meta(const oari_gvalue *a, const oari_gvalue *b) {
    return a->dtype == b->dtype && a->ndim == b->ndim &&
           !memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof *a->shape);
}

/* Uses of each value counted when the pass began; a value a rewrite made
 * since has none counted (the next round of the pass list counts it). */
typedef struct use_counts {
    int *n;
    int len;
} use_counts;

static bool used_once(const use_counts *u, int v) { return v >= 0 && v < u->len && u->n[v] == 1; }

/* The node producing v if it is live and runs op, else NULL. */
static oari_gnode *producer(oar_graph *g, int v, oari_op op) {
    if (v < 0 || g->values[v].kind != OARI_V_NODE) return NULL;
    oari_gnode *p = &g->nodes[g->values[v].producer];
    return !p->dead && p->op == op ? p : NULL;
}

/* A value known to be contiguous: an input, a constant stored contiguous,
 * or a non-view node's output. */
static bool contiguous(oar_graph *g, int v) {
    const oari_gvalue *gv = &g->values[v];
    if (gv->kind == OARI_V_CONST) return oar_tensor_is_contiguous(gv->constant);
    if (gv->kind == OARI_V_INPUT) return true;
    return !(oari_gnode_def(&g->nodes[gv->producer])->flags & OARI_F_VIEW);
}

static bool is_identity(const oari_gnode *n) {
    for (int d = 0; d < n->attrs.ni; d++)
        if (n->attrs.i[d] != d) return false;
    return true;
}

/* A transpose view of 2-D value v placed at node index `at`; the new
 * value, or -1. */
static int insert_transpose(oar_graph *g, int at, int v) {
    const oari_gvalue *x = &g->values[v];
    oari_meta m = {.dtype = x->dtype, .ndim = 2, .shape = {x->shape[1], x->shape[0]}};
    oari_attrs a = {.ni = 2, .i = {1, 0}};
    int8_t sym[2] = {x->sym[1], x->sym[0]};
    int32_t smul[2] = {x->smul[1], x->smul[0]};
    if (oari_graph_insert_node(g, at, OARI_OP_permute, &a, 1, &v, 1, &m) < 0) return -1;
    oari_gvalue *t = &g->values[g->nodes[at].out[0]];
    memcpy(t->sym, sym, sizeof sym);
    memcpy(t->smul, smul, sizeof smul);
    return g->nodes[at].out[0];
}

/* permute(matmul(a, b), [1, 0]) -> matmul(b^T, a^T) when the product is
 * 2-D and used only there; returns the number of nodes inserted before
 * node i (2), 0 when the rule does not apply, or a negative status. */
static int transpose_of_matmul(oar_graph *g, int i, const use_counts *uses) {
    oari_gnode *n = &g->nodes[i];
    int t = n->in[0];
    oari_gnode *p = producer(g, t, OARI_OP_matmul);
    if (!p || !used_once(uses, t) || n->attrs.ni != 2 || n->attrs.i[0] != 1 || g->values[t].ndim != 2 ||
        g->values[p->in[0]].ndim != 2 || g->values[p->in[1]].ndim != 2)
        return 0;
    int at = g->values[t].producer, a = p->in[0], b = p->in[1];
    int bt = insert_transpose(g, at, b);
    int at_ = bt < 0 ? -1 : insert_transpose(g, at + 1, a);
    if (at_ < 0) return oari_fail_status();
    p = &g->nodes[at + 2]; /* the matmul, moved up two */
    p->in[0] = bt;
    p->in[1] = at_;
    n = &g->nodes[i + 2];
    oari_gvalue *tv = &g->values[t];
    const oari_gvalue *y = &g->values[n->out[0]];
    memcpy(tv->shape, y->shape, sizeof tv->shape);
    memcpy(tv->sym, y->sym, sizeof tv->sym);
    memcpy(tv->smul, y->smul, sizeof tv->smul);
    oari_graph_replace_uses(g, n->out[0], t);
    n->dead = true;
    return 2;
}

/* mul(max_pool2d_backward(g, idx), sign(r)) with idx the indices of
 * p = max_pool2d(r) -> max_pool2d_backward(g * sign(p), idx): the
 * backward only writes at each window's argmax, where r equals p (and
 * sums overlapping windows that all picked that element), so the mask can
 * be taken on the pooled values. ReLU's backward is that mask: r, the
 * pre-pool activation, then dies after the forward pass instead of being
 * kept for backward. Returns the nodes inserted before node i (2), 0, or a
 * negative status. */
static int mask_through_max_pool(oar_graph *g, int i, const use_counts *uses) {
    oari_gnode *n = &g->nodes[i];
    for (int side = 0; side < 2; side++) {
        int a = n->in[side], s = n->in[1 - side];
        oari_gnode *bw = producer(g, a, OARI_OP_max_pool2d_backward), *sg = producer(g, s, OARI_OP_sign);
        if (!bw || !sg || !used_once(uses, a) || !same_meta(&g->values[a], &g->values[s]) ||
            !same_meta(&g->values[a], &g->values[n->out[0]]))
            continue;
        int idx = bw->in[1];
        oari_gnode *pool = producer(g, idx, OARI_OP_max_pool2d);
        if (!pool || pool->out[1] != idx || pool->in[0] != sg->in[0]) continue;
        int at = g->values[a].producer, pooled = pool->out[0], grad = bw->in[0];
        const oari_gvalue *pv = &g->values[pooled];
        oari_meta m = {.dtype = pv->dtype, .ndim = pv->ndim};
        memcpy(m.shape, pv->shape, sizeof m.shape);
        if (oari_graph_insert_node(g, at, OARI_OP_sign, NULL, 1, &pooled, 1, &m) < 0) return oari_fail_status();
        int mask = g->nodes[at].out[0];
        int mul_in[2] = {grad, mask};
        if (oari_graph_insert_node(g, at + 1, OARI_OP_mul, NULL, 2, mul_in, 1, &m) < 0) return oari_fail_status();
        int masked = g->nodes[at + 1].out[0];
        for (int k = 0; k < 2; k++) { /* the new values take the pooled value's symbolic dims */
            oari_gvalue *v = &g->values[k ? masked : mask];
            memcpy(v->sym, g->values[pooled].sym, sizeof v->sym);
            memcpy(v->smul, g->values[pooled].smul, sizeof v->smul);
        }
        g->nodes[at + 2].in[0] = masked; /* the backward, moved up two */
        n = &g->nodes[i + 2];
        oari_graph_replace_uses(g, n->out[0], a);
        n->dead = true;
        return 2;
    }
    return 0;
}

/* Node p, a slice_backward with static dim, start and end, step 1: its
 * interval [*lo, *hi) along *dim. */
static bool slice_interval(const oari_gnode *p, int *dim, int64_t *lo, int64_t *hi) {
    for (int k = 0; k < 4; k++)
        if (p->isym[k] >= 0) return false;
    *dim = (int)p->attrs.i[0], *lo = p->attrs.i[1], *hi = p->attrs.i[2];
    return p->attrs.i[3] == 1 && *lo >= 0 && *lo < *hi;
}

/* add(slice_backward(a), slice_backward(b)) of adjacent intervals of one
 * dim -> slice_backward(concat(a, b)) over both: a gradient split into
 * pieces (the q, k and v of a fused projection) is put together by one
 * copy instead of zero-filled full-size tensors summed. Repeated, the
 * three pieces become one concat over the whole dim, an identity
 * slice_backward (removed below). Returns the nodes inserted before node
 * i (2), 0, or a negative status. */
static int join_slice_grads(oar_graph *g, int i, const use_counts *uses) {
    oari_gnode *n = &g->nodes[i];
    int a = n->in[0], b = n->in[1];
    oari_gnode *pa = producer(g, a, OARI_OP_slice_backward), *pb = producer(g, b, OARI_OP_slice_backward);
    int da, db;
    int64_t la, ha, lb, hb;
    if (!pa || !pb || !used_once(uses, a) || !used_once(uses, b) || !same_meta(&g->values[a], &g->values[b]) ||
        !same_meta(&g->values[a], &g->values[n->out[0]]) || !slice_interval(pa, &da, &la, &ha) ||
        !slice_interval(pb, &db, &lb, &hb) || da != db || pa->attrs.ni != pb->attrs.ni ||
        memcmp(pa->attrs.i + 4, pb->attrs.i + 4, (size_t)(pa->attrs.ni - 4) * sizeof *pa->attrs.i) ||
        (ha != lb && hb != la))
        return 0;
    if (hb == la) { /* a's piece comes second */
        oari_gnode *t = pa;
        pa = pb, pb = t;
        la = lb, hb = ha;
    }
    int pieces[2] = {pa->in[0], pb->in[0]};
    const oari_gvalue *x = &g->values[pieces[0]], *y = &g->values[pieces[1]];
    if (x->dtype != y->dtype || x->sym[da] >= 0 || y->sym[da] >= 0) return 0;
    oari_meta m = {.dtype = x->dtype, .ndim = x->ndim};
    memcpy(m.shape, x->shape, sizeof m.shape);
    m.shape[da] += y->shape[da];
    int8_t sym[OAR_MAX_DIMS];
    int32_t smul[OAR_MAX_DIMS];
    memcpy(sym, x->sym, sizeof sym);
    memcpy(smul, x->smul, sizeof smul);
    oari_gnode first = *pa; /* its attributes and their symbols, before the arrays move */
    if (oari_graph_insert_node(g, i, OARI_OP_concat, &(oari_attrs){.ni = 1, .i = {da}}, 2, pieces, 1, &m) < 0)
        return oari_fail_status();
    int joined = g->nodes[i].out[0];
    memcpy(g->values[joined].sym, sym, sizeof sym);
    memcpy(g->values[joined].smul, smul, sizeof smul);
    oari_attrs sa = first.attrs;
    sa.i[1] = la, sa.i[2] = hb;
    const oari_gvalue *o = &g->values[g->nodes[i + 1].out[0]];
    oari_meta om = {.dtype = o->dtype, .ndim = o->ndim};
    memcpy(om.shape, o->shape, sizeof om.shape);
    if (oari_graph_insert_node(g, i + 1, OARI_OP_slice_backward, &sa, 1, &joined, 1, &om) < 0)
        return oari_fail_status();
    oari_gnode *s = &g->nodes[i + 1];
    memcpy(s->isym, first.isym, sizeof s->isym);
    memcpy(s->imul, first.imul, sizeof s->imul);
    n = &g->nodes[i + 2];
    oari_gvalue *sv = &g->values[s->out[0]];
    memcpy(sv->sym, g->values[n->out[0]].sym, sizeof sv->sym);
    memcpy(sv->smul, g->values[n->out[0]].smul, sizeof sv->smul);
    oari_graph_replace_uses(g, n->out[0], s->out[0]);
    n->dead = true;
    return 2;
}

/* concat(concat(a, b), c) along one dim, the inner one used only there ->
 * concat(a, b, c): one copy. Returns 1 (the node inserted before i), 0,
 * or a negative status. */
static int flatten_concat(oar_graph *g, int i, const use_counts *uses) {
    oari_gnode *n = &g->nodes[i];
    int total = 0, in[64];
    bool any = false;
    for (int k = 0; k < n->n_in; k++) {
        oari_gnode *p = producer(g, n->in[k], OARI_OP_concat);
        bool merge = p && used_once(uses, n->in[k]) && p->attrs.i[0] == n->attrs.i[0];
        int add = merge ? p->n_in : 1;
        if (total + add > 64) return 0;
        if (merge) memcpy(in + total, p->in, (size_t)p->n_in * sizeof *in);
        else in[total] = n->in[k];
        total += add;
        any = any || merge;
    }
    if (!any) return 0;
    const oari_gvalue *o = &g->values[n->out[0]];
    oari_meta m = {.dtype = o->dtype, .ndim = o->ndim};
    memcpy(m.shape, o->shape, sizeof m.shape);
    oari_attrs at = n->attrs;
    if (oari_graph_insert_node(g, i, OARI_OP_concat, &at, total, in, 1, &m) < 0) return oari_fail_status();
    int v = g->nodes[i].out[0];
    n = &g->nodes[i + 1];
    memcpy(g->values[v].sym, g->values[n->out[0]].sym, sizeof g->values[v].sym);
    memcpy(g->values[v].smul, g->values[n->out[0]].smul, sizeof g->values[v].smul);
    oari_graph_replace_uses(g, n->out[0], v);
    n->dead = true;
    return 1;
}

/* slice_backward over the whole of its dim (start 0, step 1, the input
 * already the output's shape): the input itself. */
static bool whole_slice_backward(const oar_graph *g, const oari_gnode *n) {
    int d;
    int64_t lo, hi;
    const oari_gvalue *x = &g->values[n->in[0]], *y = &g->values[n->out[0]];
    if (!slice_interval(n, &d, &lo, &hi) || lo != 0 || !same_meta(x, y) || hi != y->shape[d] || x->sym[d] >= 0)
        return false;
    for (int k = 0; k < x->ndim; k++)
        if (x->sym[k] != y->sym[k] || (x->sym[k] >= 0 && x->smul[k] != y->smul[k])) return false;
    return true;
}

int oari_pass_simplify(oar_graph *g) {
    int changes = 0;
    use_counts u = {.len = g->n_values}, *uses = &u;
    size_t bytes = (size_t)(u.len ? u.len : 1) * sizeof *u.n;
    if (!(u.n = oari_malloc(bytes))) return oari_fail_status();
    oari_graph_use_counts(g, u.n);
    for (int i = 0; i < g->n_nodes; i++) {
        oari_gnode *n = &g->nodes[i];
        if (n->dead) continue;
        int out = n->out[0], keep = -1, inserted = 0; /* nodes a rewrite placed before i */
        switch (n->op) {
        case OARI_OP_mul: {
            if (oari_graph_const_is(g, n->in[1], 1)) keep = n->in[0];
            else if (oari_graph_const_is(g, n->in[0], 1)) keep = n->in[1];
            if (keep >= 0) break;
            inserted = mask_through_max_pool(g, i, uses);
            break;
        }
        case OARI_OP_add:
            if (oari_graph_const_is(g, n->in[1], 0)) keep = n->in[0];
            else if (oari_graph_const_is(g, n->in[0], 0)) keep = n->in[1];
            else inserted = join_slice_grads(g, i, uses);
            break;
        case OARI_OP_concat:
            inserted = flatten_concat(g, i, uses);
            break;
        case OARI_OP_slice_backward:
            if (whole_slice_backward(g, n)) keep = n->in[0];
            break;
        case OARI_OP_sub:
            if (oari_graph_const_is(g, n->in[1], 0)) keep = n->in[0];
            break;
        case OARI_OP_div:
            if (oari_graph_const_is(g, n->in[1], 1)) keep = n->in[0];
            break;
        case OARI_OP_permute: {
            oari_gnode *p = producer(g, n->in[0], OARI_OP_permute);
            if (p) { /* permute(permute(x, a), b) = permute(x, a[b]) */
                int64_t c[OAR_MAX_DIMS];
                for (int d = 0; d < n->attrs.ni; d++) c[d] = p->attrs.i[n->attrs.i[d]];
                memcpy(n->attrs.i, c, (size_t)n->attrs.ni * sizeof *c);
                n->in[0] = p->in[0];
                changes++;
            }
            if (is_identity(n)) keep = n->in[0];
            if (keep < 0 && !p) inserted = transpose_of_matmul(g, i, uses);
            break;
        }
        case OARI_OP_view: {
            oari_gnode *p = producer(g, n->in[0], OARI_OP_view);
            if (p && contiguous(g, p->in[0])) {
                n->in[0] = p->in[0];
                changes++;
            }
            if (contiguous(g, n->in[0]) && same_meta(&g->values[n->in[0]], &g->values[out]))
                keep = n->in[0];
            break;
        }
        default:
            break;
        }
        if (inserted < 0) {
            oari_free(u.n, bytes);
            return inserted;
        }
        if (inserted) { /* node i moved to i + inserted and is dead */
            i += inserted;
            changes++;
            continue;
        }
        if (keep >= 0 && same_meta(&g->values[keep], &g->values[out])) {
            oari_graph_replace_uses(g, out, keep);
            n->dead = true;
            changes++;
        }
    }
    oari_free(u.n, bytes);
    int st = oari_graph_compact(g);
    return st ? st : changes;
}

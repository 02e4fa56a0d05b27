/* Sharding rules: for an op call, the placements its inputs must have and
 * those of its outputs. Each mesh dim is decided on its own. Which rule an
 * op follows is decided in one table (rules_table.c, oari_dist_rule_of):
 * pointwise ops (elementwise and broadcast fusion kinds), matmul, the
 * movement ops permute, view, expand and slice (a dim-transform rule: a
 * sharded dim that passes through whole stays sharded, and shapes in the
 * local op's attributes become local), layer_norm, index_select,
 * convolutions (batch, output and input channels), custom ops registered
 * as elementwise, and the "free dims" rule of every op that works along
 * some dims and leaves the others independent (reductions, softmax,
 * cumulative ops, sort, gather/scatter, concat, pad, flip, roll, FFT,
 * pooling, batched linear algebra); the table names the ops that replicate
 * by design. Calls that need a local computation of their own
 * (vocab-parallel lookups, softmax along a sharded dim) are in
 * rules_vocab.c.
 *
 * The rules are chosen by table and op, not stored on the op definitions:
 * one pointwise rule covers every elementwise op, and the ops layer sits
 * below dist (docs/architecture.md, "Layers"). */
#include "dist.h"
#include "../ops/custom_op.h" /* elementwise custom ops */

#include <string.h>

static oar_placement R(void) { return oar_replicate(); }

static bool is_partial(oar_placement p, oar_reduce_op op) {
    return p.kind == OAR_PLACEMENT_PARTIAL && p.reduce == op;
}

/* Per call: which tensor dims a mesh dim already claimed, so that no
 * tensor dim is sharded twice. */
typedef struct claims {
    bool in[OARI_MAX_IN][OAR_MAX_DIMS];
    bool out[OAR_MAX_DIMS];
} claims;

/* ---- pointwise ----------------------------------------------------------- */

/* Ops f with f(a + b) = f(a) + f(b) in every input at once. */
static bool additive(oari_op op) { return op == OARI_OP_add || op == OARI_OP_sub || op == OARI_OP_neg; }

static void pointwise_dim(oari_op op, int n_in, const oari_meta *in,
                          oar_placement (*in_p)[OAR_MESH_MAX_DIMS], const oari_meta *out, int d,
                          claims *cl, oari_shard_plan *plan) {
    int n_partial = 0, partial_at = -1;
    for (int i = 0; i < n_in; i++)
        if (in[i].ndim >= 0 && in_p[i][d].kind == OAR_PLACEMENT_PARTIAL) n_partial++, partial_at = i;
    for (int i = 0; i < n_in; i++) plan->in[i][d] = R();
    plan->out[0][d] = R();
    if (n_partial) {
        /* Keep Partial(sum) where the op is linear in it: add/sub/neg of
         * partial sums, or a product with (a quotient of) replicated values. */
        bool all_sum = true;
        for (int i = 0; i < n_in; i++) all_sum = all_sum && (in[i].ndim < 0 || is_partial(in_p[i][d], OAR_REDUCE_SUM));
        bool scale = n_partial == 1 && is_partial(in_p[partial_at][d], OAR_REDUCE_SUM) &&
                     (op == OARI_OP_mul || (op == OARI_OP_div && partial_at == 0));
        if ((additive(op) && all_sum) || scale) {
            if (scale) plan->in[partial_at][d] = in_p[partial_at][d];
            else
                for (int i = 0; i < n_in; i++) plan->in[i][d] = in_p[i][d];
            plan->out[0][d] = oar_partial(OAR_REDUCE_SUM);
        }
        return;
    }
    /* Follow the first input sharded on a dim that is not broadcast. */
    int o = -1;
    for (int i = 0; i < n_in && o < 0; i++) {
        if (in[i].ndim < 0 || in_p[i][d].kind != OAR_PLACEMENT_SHARD) continue;
        int k = in_p[i][d].dim, cand = k + out->ndim - in[i].ndim;
        if (in[i].shape[k] == out->shape[cand] && !cl->out[cand]) o = cand;
    }
    if (o < 0) return;
    cl->out[o] = true;
    plan->out[0][d] = oar_shard(o);
    for (int i = 0; i < n_in; i++) {
        if (in[i].ndim < 0) continue;
        int k = o - (out->ndim - in[i].ndim);
        if (k >= 0 && in[i].shape[k] == out->shape[o] && !cl->in[i][k]) {
            plan->in[i][d] = oar_shard(k);
            cl->in[i][k] = true;
        }
    }
}

/* ---- matmul: a[..., m, k] @ b[..., k, n] ---------------------------------- */

static void matmul_dim(const oari_meta *a, const oari_meta *b, oar_placement pa, oar_placement pb,
                       const oari_meta *out, int d, claims *cl, oari_shard_plan *plan) {
    const int am = a->ndim - 2, ak = a->ndim - 1, bk = b->ndim - 2, bn = b->ndim - 1;
    const int om = out->ndim - 2, on = out->ndim - 1;
    oar_placement *ia = &plan->in[0][d], *ib = &plan->in[1][d], *o = &plan->out[0][d];
    *ia = *ib = *o = R();
    /* Partial(sum) times replicated stays a partial sum. */
    if (pa.kind == OAR_PLACEMENT_PARTIAL || pb.kind == OAR_PLACEMENT_PARTIAL) {
        if (is_partial(pa, OAR_REDUCE_SUM) && pb.kind == OAR_PLACEMENT_REPLICATE) *ia = pa, *o = pa;
        else if (is_partial(pb, OAR_REDUCE_SUM) && pa.kind == OAR_PLACEMENT_REPLICATE) *ib = pb, *o = pb;
        return;
    }
    bool sa = pa.kind == OAR_PLACEMENT_SHARD, sb = pb.kind == OAR_PLACEMENT_SHARD;
    /* A contracted dim sharded on either side: shard both, sum partials. */
    if ((sa && pa.dim == ak) || (sb && pb.dim == bk)) {
        if (cl->in[0][ak] || cl->in[1][bk]) return;
        cl->in[0][ak] = cl->in[1][bk] = true;
        *ia = oar_shard(ak);
        *ib = oar_shard(bk);
        *o = oar_partial(OAR_REDUCE_SUM);
        return;
    }
    if (sa && pa.dim == am && !cl->out[om]) {
        cl->out[om] = cl->in[0][am] = true;
        *ia = pa;
        *o = oar_shard(om);
        return;
    }
    if (sb && pb.dim == bn && !cl->out[on]) {
        cl->out[on] = cl->in[1][bn] = true;
        *ib = pb;
        *o = oar_shard(on);
        return;
    }
    /* A batch dim: shard it on both sides where it is not broadcast. */
    const oari_meta *x = sa ? a : sb ? b : NULL;
    if (!x) return;
    int k = sa ? pa.dim : pb.dim, ob = k + (out->ndim - x->ndim);
    if (ob < 0 || ob >= om || x->shape[k] != out->shape[ob] || cl->out[ob]) return;
    cl->out[ob] = true;
    *o = oar_shard(ob);
    const oari_meta *const ab[2] = {a, b};
    for (int i = 0; i < 2; i++) {
        int ki = ob - (out->ndim - ab[i]->ndim);
        if (ki >= 0 && ki < ab[i]->ndim - 2 && ab[i]->shape[ki] == out->shape[ob] && !cl->in[i][ki]) {
            cl->in[i][ki] = true;
            plan->in[i][d] = oar_shard(ki);
        }
    }
}

/* ---- one-input ops whose sharded dims pass through ------------------------ */

/* Where input dim k lands in the output, or -1 if it does not pass whole. */
static int passes_to(oari_op op, const oari_meta *x, const oari_attrs *a, const oari_meta *out, int k) {
    switch (op) {
    case OARI_OP_permute:
        for (int o = 0; o < out->ndim; o++)
            if (a->i[o] == k) return o;
        return -1;
    case OARI_OP_expand: {
        int o = k + out->ndim - x->ndim;
        return x->shape[k] == out->shape[o] ? o : -1;
    }
    case OARI_OP_slice: case OARI_OP_slice_backward:
        return k == a->i[0] ? -1 : k;
    case OARI_OP_view: {
        /* the dims before k hold as many elements before and after */
        int64_t before = 1;
        for (int i = 0; i < k; i++) before *= x->shape[i];
        int64_t acc = 1;
        for (int o = 0; o < out->ndim; o++) {
            if (acc == before && out->shape[o] == x->shape[k]) return o;
            acc *= out->shape[o];
            if (acc > before) return -1;
        }
        return -1;
    }
    default: return -1;
    }
}

/* view: where sharded input dim k lands when it is the outermost of dims
 * k..j merged into one output dim (a linear layer's [batch, seq, k] ->
 * [batch*seq, k]), or -1. The merged dim is sharded like dim k only when
 * dim k splits evenly over the mesh dim (size m): then each rank's chunk of
 * the merged dim is its chunk of dim k times the inner dims. No other mesh
 * dim may shard a dim inside the merge. */
static int merges_to(const oari_meta *x, const oari_meta *out, int k, int64_t m, int d,
                     oar_placement (*in_p)[OAR_MESH_MAX_DIMS], int mesh_ndim) {
    if (x->shape[k] % m) return -1;
    int64_t before = 1;
    for (int i = 0; i < k; i++) before *= x->shape[i];
    int64_t acc = 1;
    int o = 0;
    while (o < out->ndim && acc < before) acc *= out->shape[o++];
    if (acc != before || o >= out->ndim) return -1;
    int64_t merged = x->shape[k];
    int j = k;
    while (merged < out->shape[o] && j + 1 < x->ndim) merged *= x->shape[++j];
    if (merged != out->shape[o] || j == k) return -1;
    for (int d2 = 0; d2 < mesh_ndim; d2++)
        if (d2 != d && in_p[0][d2].kind == OAR_PLACEMENT_SHARD && in_p[0][d2].dim > k && in_p[0][d2].dim <= j)
            return -1;
    return o;
}

/* Ops that are linear in their input: Partial(sum) passes through. */
static bool linear_movement(oari_op op) {
    return op == OARI_OP_permute || op == OARI_OP_expand || op == OARI_OP_slice || op == OARI_OP_view ||
           op == OARI_OP_slice_backward;
}

static void passthrough(oari_op op, const oari_meta *x, oar_placement (*in_p)[OAR_MESH_MAX_DIMS],
                        const oari_attrs *attrs, const oari_meta *out, const oar_mesh *mesh,
                        oari_shard_plan *plan) {
    for (int d = 0; d < mesh->ndim; d++) {
        oar_placement p = in_p[0][d];
        plan->in[0][d] = plan->out[0][d] = oar_replicate();
        if (p.kind == OAR_PLACEMENT_PARTIAL) {
            if (linear_movement(op) && p.reduce == OAR_REDUCE_SUM) plan->in[0][d] = plan->out[0][d] = p;
        } else if (p.kind == OAR_PLACEMENT_SHARD) {
            int o = passes_to(op, x, attrs, out, p.dim);
            if (o < 0 && op == OARI_OP_view) o = merges_to(x, out, p.dim, mesh->shape[d], d, in_p, mesh->ndim);
            if (o >= 0) {
                plan->in[0][d] = p;
                plan->out[0][d] = oar_shard(o);
            }
        }
    }
    /* view, expand and slice_backward name the output shape (the latter
     * after its four slice attributes): make the sharded dims local */
    int at = op == OARI_OP_slice_backward ? 4 : 0;
    if (op == OARI_OP_view || op == OARI_OP_expand || op == OARI_OP_slice_backward) {
        plan->local_attrs = true;
        plan->attrs = *attrs;
        for (int d = 0; d < mesh->ndim; d++) {
            if (plan->out[0][d].kind != OAR_PLACEMENT_SHARD) continue;
            int o = plan->out[0][d].dim;
            int64_t start;
            oari_chunk(out->shape[o], mesh->shape[d], mesh->coord[d], &start, &plan->attrs.i[at + o]);
        }
    }
}

/* ---- layer_norm: the leading (not normalised) dims are independent ------- */

static void layer_norm_rule(oari_op op, int n_in, const oari_meta *in, oar_placement (*in_p)[OAR_MESH_MAX_DIMS],
                            const oari_attrs *a, const oar_mesh *mesh, oari_shard_plan *plan) {
    /* layer_norm_backward: ins gy, x, mean, rstd, weight?; its weight and
     * bias gradients sum over the leading dims, so partial where they are
     * sharded */
    const bool bw = op == OARI_OP_layer_norm_backward;
    const int ix = bw ? 1 : 0, n_follow = bw ? 4 : 1;
    int lead = in[ix].ndim - (int)a->i[0];
    for (int d = 0; d < mesh->ndim; d++) {
        oar_placement p = in_p[ix][d], o = oar_replicate();
        if (p.kind == OAR_PLACEMENT_SHARD && p.dim < lead) o = p;
        for (int i = 0; i < n_in; i++) plan->in[i][d] = i < n_follow ? o : oar_replicate();
        for (int j = 0; j < 3; j++)
            plan->out[j][d] = bw && j > 0 && o.kind == OAR_PLACEMENT_SHARD ? oar_partial(OAR_REDUCE_SUM) : o;
    }
}

/* ---- index_select(x, idx, dim): rows of x picked by a 1-D index ----------- */

static void index_select_rule(oar_placement (*in_p)[OAR_MESH_MAX_DIMS], const oari_attrs *a,
                              const oar_mesh *mesh, claims *cl, oari_shard_plan *plan) {
    int dim = (int)a->i[0];
    for (int d = 0; d < mesh->ndim; d++) {
        oar_placement px = in_p[0][d], pi = in_p[1][d];
        plan->in[0][d] = plan->in[1][d] = plan->out[0][d] = oar_replicate();
        if (pi.kind == OAR_PLACEMENT_SHARD && !cl->out[dim]) {
            /* a sharded index picks a sharded set of rows */
            cl->out[dim] = true;
            plan->in[1][d] = pi;
            plan->out[0][d] = oar_shard(dim);
        } else if (px.kind == OAR_PLACEMENT_SHARD && px.dim != dim && !cl->out[px.dim]) {
            cl->out[px.dim] = true;
            plan->in[0][d] = px;
            plan->out[0][d] = px;
        } else if (is_partial(px, OAR_REDUCE_SUM) && pi.kind == OAR_PLACEMENT_REPLICATE) {
            plan->in[0][d] = plan->out[0][d] = px;
        }
    }
}

/* ---- free dims: ops that work along some dims, the others independent ---- */

static uint64_t bit(int64_t k) { return k >= 0 && k < 64 ? UINT64_C(1) << k : 0; }

/* The dims of x (in[0]) along which the op's slices are independent. */
static uint64_t free_mask(const oari_dist_rule *r, const oari_meta *x, const oari_attrs *a) {
    const int nd = x->ndim;
    const uint64_t all = nd > 0 ? (UINT64_C(1) << nd) - 1 : 0, lead2 = nd > 2 ? (UINT64_C(1) << (nd - 2)) - 1 : 0;
    uint64_t m = all;
    switch (r->kind) {
    case OARI_RULE_ALONG: case OARI_RULE_INDEX_SELECT:
        return a->ni > r->dim_attr ? all & ~bit(a->i[r->dim_attr]) : 0;
    case OARI_RULE_ARGREDUCE: return a->i[0] < 0 ? 0 : all & ~bit(a->i[0]);
    case OARI_RULE_REDUCE: return all & ~(uint64_t)a->i[0];
    case OARI_RULE_LEADING: case OARI_RULE_SPATIAL: return lead2;
    case OARI_RULE_ALL_DIMS: return all;
    case OARI_RULE_LAST_FREE: return nd > 0 ? all & ~bit(nd - 1) : 0;
    case OARI_RULE_FLIP: return all & ~(uint64_t)a->i[0];
    case OARI_RULE_ROLL:
        for (int k = 1; k < a->ni; k += 2) m &= ~bit(a->i[k]);
        return m;
    case OARI_RULE_PAD:
        for (int k = 0; k < (a->ni - 1) / 2; k++)
            if (a->i[1 + 2 * k] || a->i[2 + 2 * k]) m &= ~bit(nd - 1 - k);
        return m;
    case OARI_RULE_FFT:
        for (int k = 0; k < a->i[2] && 3 + k < a->ni; k++) m &= ~bit(a->i[3 + k]);
        return m;
    case OARI_RULE_GROUP_NORM: return nd > 0 ? 1 : 0;
    default: return 0;
    }
}

/* Where free dim k of x lands in the outputs. */
static int free_out_dim(const oari_dist_rule *r, const oari_attrs *a, int k) {
    if (r->kind == OARI_RULE_REDUCE && !a->i[1]) return k - __builtin_popcountll((uint64_t)a->i[0] & (bit(k) - 1));
    if (r->kind == OARI_RULE_ARGREDUCE && !a->i[1]) return k - (k > a->i[0]);
    return k;
}

/* The Partial a reduction of a sharded dim leaves, or Replicate. */
static oar_placement reduce_partial(oari_op op) {
    switch (op) {
    case OARI_OP_sum: return oar_partial(OAR_REDUCE_SUM);
    case OARI_OP_prod: return oar_partial(OAR_REDUCE_PROD);
    case OARI_OP_amax: return oar_partial(OAR_REDUCE_MAX);
    case OARI_OP_amin: return oar_partial(OAR_REDUCE_MIN);
    default: return oar_replicate();
    }
}

void oari_rule_free_dims(const oari_dist_rule *r, oari_op op, int n_in, const oari_meta *in,
                         oar_placement (*in_p)[OAR_MESH_MAX_DIMS], const oari_attrs *attrs, int n_out,
                         const oari_meta *out_meta, const oar_mesh *mesh, oari_shard_plan *plan) {
    const oari_meta *x = &in[0];
    const uint64_t free = free_mask(r, x, attrs);
    bool claimed[OAR_MAX_DIMS] = {false};
    for (int d = 0; d < mesh->ndim; d++) {
        for (int i = 0; i < n_in; i++) plan->in[i][d] = R();
        for (int j = 0; j < n_out; j++) plan->out[j][d] = R();
        /* Partial: through a reduction of its own kind, or an op linear in it */
        int n_partial = 0;
        bool all_sum_linear = true;
        for (int i = 0; i < n_in; i++) {
            if (in[i].ndim < 0 || in_p[i][d].kind != OAR_PLACEMENT_PARTIAL) continue;
            n_partial++;
            all_sum_linear = all_sum_linear && is_partial(in_p[i][d], OAR_REDUCE_SUM) && ((r->linear >> i) & 1);
        }
        if (n_partial) {
            if (r->kind == OARI_RULE_REDUCE && n_in == 1 && op != OARI_OP_sum) {
                oar_placement want = reduce_partial(op);
                if (want.kind == OAR_PLACEMENT_PARTIAL && is_partial(in_p[0][d], want.reduce))
                    plan->in[0][d] = plan->out[0][d] = want;
            } else if (all_sum_linear && (r->linear & 1)) {
                for (int i = 0; i < n_in; i++)
                    if (in[i].ndim >= 0 && ((r->linear >> i) & 1)) plan->in[i][d] = oar_partial(OAR_REDUCE_SUM);
                plan->out[0][d] = oar_partial(OAR_REDUCE_SUM);
            }
            continue;
        }
        /* Shard: the first input of x's rank sharded on a free dim */
        int k = -1;
        for (int i = 0; i < n_in && k < 0; i++) {
            if (in[i].ndim != x->ndim || in_p[i][d].kind != OAR_PLACEMENT_SHARD) continue;
            int c = in_p[i][d].dim;
            if (c >= 0 && c < x->ndim && (free & bit(c)) && !claimed[c]) k = c;
        }
        if (k < 0) {
            /* a reduced sharded dim: each rank reduces its part */
            oar_placement p = in_p[0][d], part = reduce_partial(op);
            /* (max and min have no identity: an empty chunk, an uneven split's last, is gathered) */
            int64_t start, last = 1;
            if (p.kind == OAR_PLACEMENT_SHARD && p.dim < x->ndim)
                oari_chunk(x->shape[p.dim], mesh->shape[d], mesh->shape[d] - 1, &start, &last);
            bool empty_ok = last > 0 || op == OARI_OP_sum || op == OARI_OP_prod;
            if (r->kind == OARI_RULE_REDUCE && p.kind == OAR_PLACEMENT_SHARD && empty_ok &&
                ((uint64_t)attrs->i[0] & bit(p.dim)) && part.kind == OAR_PLACEMENT_PARTIAL) {
                plan->in[0][d] = p;
                plan->out[0][d] = part;
            }
            continue;
        }
        bool ok = true;
        for (int i = 0; i < n_in; i++)
            if (in[i].ndim == x->ndim && in[i].shape[k] != x->shape[k]) ok = false;
        int o = free_out_dim(r, attrs, k);
        for (int j = 0; j < n_out; j++)
            if (o >= out_meta[j].ndim || out_meta[j].shape[o] != x->shape[k]) ok = false;
        if (!ok) continue;
        claimed[k] = true;
        for (int i = 0; i < n_in; i++)
            if (in[i].ndim == x->ndim) plan->in[i][d] = oar_shard(k);
        for (int j = 0; j < n_out; j++) plan->out[j][d] = oar_shard(o);
    }
}

/* ---- convolutions: batch, output channels, input channels ---------------- */

static void conv_rule(oari_op op, int n_in, const oari_meta *in, oar_placement (*in_p)[OAR_MESH_MAX_DIMS],
                      const oari_attrs *a, const oari_meta *out, const oar_mesh *mesh, oari_shard_plan *plan) {
    const bool d3 = op == OARI_OP_conv3d || op == OARI_OP_conv_transpose3d || op == OARI_OP_conv3d_weight_grad;
    const bool wgrad = op == OARI_OP_conv2d_weight_grad || op == OARI_OP_conv3d_weight_grad;
    const bool transpose = op == OARI_OP_conv_transpose2d || op == OARI_OP_conv_transpose3d;
    const int sp = d3 ? 3 : 2;
    /* groups: after stride, padding, (output padding,) dilation; wgrad: after the weight shape too */
    const int gi = wgrad ? (sp + 2) + 3 * sp : transpose ? 4 * sp : 3 * sp;
    const bool g1 = gi < a->ni && a->i[gi] == 1;
    const bool bias = n_in > 2 && in[2].ndim >= 0;
    const int w_out = transpose ? 1 : 0, w_in = transpose ? 0 : 1; /* the weight's channel dims */
    for (int d = 0; d < mesh->ndim; d++) {
        for (int i = 0; i < n_in; i++) plan->in[i][d] = R();
        plan->out[0][d] = R();
        if (in[0].ndim < 3 || in[1].ndim < 3) continue;
        oar_placement p0 = in_p[0][d], p1 = in_p[1][d];
        bool s0 = p0.kind == OAR_PLACEMENT_SHARD, s1 = p1.kind == OAR_PLACEMENT_SHARD;
        if (wgrad) { /* x [N, C, ...], gy [N, O, ...] -> gw [O, C/g, ...] */
            if ((s0 && p0.dim == 0) || (s1 && p1.dim == 0)) {
                plan->in[0][d] = plan->in[1][d] = oar_shard(0);
                plan->out[0][d] = oar_partial(OAR_REDUCE_SUM);
            } else if (g1 && s1 && p1.dim == 1) {
                plan->in[1][d] = p1;
                plan->out[0][d] = oar_shard(0);
            } else if (g1 && s0 && p0.dim == 1) {
                plan->in[0][d] = p0;
                plan->out[0][d] = oar_shard(1);
            } else if (is_partial(p0, OAR_REDUCE_SUM) != is_partial(p1, OAR_REDUCE_SUM) &&
                       p0.kind != OAR_PLACEMENT_SHARD && p1.kind != OAR_PLACEMENT_SHARD) {
                plan->in[0][d] = p0.kind == OAR_PLACEMENT_PARTIAL ? p0 : R();
                plan->in[1][d] = p1.kind == OAR_PLACEMENT_PARTIAL ? p1 : R();
                if (plan->in[0][d].kind == OAR_PLACEMENT_PARTIAL || plan->in[1][d].kind == OAR_PLACEMENT_PARTIAL)
                    plan->out[0][d] = oar_partial(OAR_REDUCE_SUM);
            }
            continue;
        }
        if (s0 && p0.dim == 0) {
            plan->in[0][d] = plan->out[0][d] = p0;
        } else if (g1 && s1 && p1.dim == w_out) {
            plan->in[1][d] = p1;
            if (bias) plan->in[2][d] = oar_shard(0);
            plan->out[0][d] = oar_shard(1);
        } else if (g1 && !bias && ((s0 && p0.dim == 1) || (s1 && p1.dim == w_in))) {
            plan->in[0][d] = oar_shard(1);
            plan->in[1][d] = oar_shard(w_in);
            plan->out[0][d] = oar_partial(OAR_REDUCE_SUM);
        } else if (!bias && is_partial(p0, OAR_REDUCE_SUM) && p1.kind != OAR_PLACEMENT_PARTIAL) {
            plan->in[0][d] = plan->out[0][d] = p0; /* linear in x */
        } else if (!bias && is_partial(p1, OAR_REDUCE_SUM) && p0.kind != OAR_PLACEMENT_PARTIAL) {
            plan->in[1][d] = plan->out[0][d] = p1; /* linear in w */
        }
    }
    /* the weight gradient names the weight's shape: make its sharded dims local */
    if (wgrad) {
        plan->local_attrs = true;
        plan->attrs = *a;
        for (int d = 0; d < mesh->ndim; d++) {
            if (plan->out[0][d].kind != OAR_PLACEMENT_SHARD) continue;
            int o = plan->out[0][d].dim;
            int64_t start;
            oari_chunk(out->shape[o], mesh->shape[d], mesh->coord[d], &start, &plan->attrs.i[o]);
        }
    }
}

int oari_shard_rule(oari_op op, const oari_op_def *def, int n_in, const oari_meta *in,
                    oar_placement (*in_p)[OAR_MESH_MAX_DIMS], const oari_attrs *attrs,
                    const oari_meta *out_meta, const oar_mesh *mesh, oari_shard_plan *plan) {
    const int mesh_ndim = mesh->ndim;
    const oari_dist_rule r = oari_dist_rule_of(op);
    claims cl;
    memset(&cl, 0, sizeof cl);
    switch (r.kind) {
    case OARI_RULE_MOVEMENT:
        passthrough(op, &in[0], in_p, attrs, &out_meta[0], mesh, plan);
        return 1;
    case OARI_RULE_LAYER_NORM:
        layer_norm_rule(op, n_in, in, in_p, attrs, mesh, plan);
        return 1;
    case OARI_RULE_INDEX_SELECT:
        if (in[0].ndim <= 0) return 0;
        index_select_rule(in_p, attrs, mesh, &cl, plan);
        return 1;
    case OARI_RULE_CUSTOM: /* an elementwise custom op follows its inputs; others replicate */
        if (!(oari_custom_flags_of(attrs) & OAR_CUSTOM_ELEMENTWISE)) return 0;
        for (int d = 0; d < mesh_ndim; d++) {
            pointwise_dim(op, n_in, in, in_p, &out_meta[0], d, &cl, plan);
            for (int j = 1; j < def->n_out; j++) plan->out[j][d] = R(); /* the 0-d placeholders */
        }
        return 1;
    case OARI_RULE_POINTWISE:
        for (int d = 0; d < mesh_ndim; d++) pointwise_dim(op, n_in, in, in_p, &out_meta[0], d, &cl, plan);
        return 1;
    case OARI_RULE_MATMUL:
        if (in[0].ndim < 2 || in[1].ndim < 2) return 0;
        for (int d = 0; d < mesh_ndim; d++)
            matmul_dim(&in[0], &in[1], in_p[0][d], in_p[1][d], &out_meta[0], d, &cl, plan);
        return 1;
    case OARI_RULE_CONV:
        conv_rule(op, n_in, in, in_p, attrs, out_meta, mesh, plan);
        return 1;
    case OARI_RULE_REDUCE: case OARI_RULE_ARGREDUCE: case OARI_RULE_ALONG: case OARI_RULE_LEADING:
    case OARI_RULE_SPATIAL: case OARI_RULE_ALL_DIMS: case OARI_RULE_LAST_FREE: case OARI_RULE_FLIP:
    case OARI_RULE_ROLL: case OARI_RULE_PAD: case OARI_RULE_FFT: case OARI_RULE_GROUP_NORM:
        if (in[0].ndim < 0) return 0;
        oari_rule_free_dims(&r, op, n_in, in, in_p, attrs, def->n_out, out_meta, mesh, plan);
        return 1;
    default: return 0; /* replicate by design, in place, reshard, or no decision */
    }
}

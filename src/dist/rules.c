/* Sharding rules: for an op call, the placements its inputs must have and
 * those of its outputs. Each mesh dim is decided on its own. Rules exist
 * for pointwise ops (elementwise and broadcast fusion kinds), matmul, sum,
 * softmax/log_softmax, layer_norm and index_select (leading or picked
 * dims pass through), the movement ops permute, view, expand and
 * slice (a dim-transform rule: a sharded dim that passes through whole
 * stays sharded, and shapes in the local op's attributes become local),
 * and custom ops registered as elementwise (the pointwise rule);
 * every other op replicates (the caller's fallback).
 *
 * The rules are chosen here by fusion kind and op, not stored on the op
 * definitions: one pointwise rule covers every elementwise op, and the
 * ops layer sits below dist (docs/architecture.md, "Layers"). */
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

/* ---- sum over a dim mask ------------------------------------------------- */

static void sum_dim(oar_placement p, const oari_attrs *a, int d, oari_shard_plan *plan) {
    int64_t mask = a->i[0];
    bool keepdim = a->i[1] != 0;
    plan->in[0][d] = p;
    plan->out[0][d] = R();
    if (is_partial(p, OAR_REDUCE_SUM)) {
        plan->out[0][d] = p;
    } else if (p.kind == OAR_PLACEMENT_PARTIAL) {
        plan->in[0][d] = R();
    } else if (p.kind == OAR_PLACEMENT_SHARD) {
        if (mask & (INT64_C(1) << p.dim)) {
            plan->out[0][d] = oar_partial(OAR_REDUCE_SUM);
        } else {
            int k = p.dim;
            if (!keepdim)
                for (int i = 0; i < p.dim; i++) k -= (int)((mask >> i) & 1);
            plan->out[0][d] = oar_shard(k);
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
    case OARI_OP_softmax: case OARI_OP_log_softmax:
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

static void layer_norm_rule(int n_in, const oari_meta *in, oar_placement (*in_p)[OAR_MESH_MAX_DIMS],
                            const oari_attrs *a, const oar_mesh *mesh, oari_shard_plan *plan) {
    int lead = in[0].ndim - (int)a->i[0];
    for (int d = 0; d < mesh->ndim; d++) {
        oar_placement p = in_p[0][d], o = oar_replicate();
        if (p.kind == OAR_PLACEMENT_SHARD && p.dim < lead) o = p;
        plan->in[0][d] = o;
        for (int i = 1; i < n_in; i++) plan->in[i][d] = oar_replicate();
        for (int j = 0; j < 3; j++) plan->out[j][d] = o;
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

int oari_shard_rule(oari_op op, const oari_op_def *def, int n_in, const oari_meta *in,
                    oar_placement (*in_p)[OAR_MESH_MAX_DIMS], const oari_attrs *attrs,
                    const oari_meta *out_meta, const oar_mesh *mesh, oari_shard_plan *plan) {
    const int mesh_ndim = mesh->ndim;
    if (op == OARI_OP_permute || op == OARI_OP_view || op == OARI_OP_expand || op == OARI_OP_slice ||
        op == OARI_OP_slice_backward || op == OARI_OP_softmax || op == OARI_OP_log_softmax) {
        passthrough(op, &in[0], in_p, attrs, &out_meta[0], mesh, plan);
        return 1;
    }
    if (op == OARI_OP_layer_norm) {
        layer_norm_rule(n_in, in, in_p, attrs, mesh, plan);
        return 1;
    }
    claims cl;
    memset(&cl, 0, sizeof cl);
    if (op == OARI_OP_index_select && in[0].ndim > 0) {
        index_select_rule(in_p, attrs, mesh, &cl, plan);
        return 1;
    }
    if (op == OARI_OP_custom) { /* an elementwise custom op follows its inputs; others replicate */
        if (!(oari_custom_flags_of(attrs) & OAR_CUSTOM_ELEMENTWISE)) return 0;
        for (int d = 0; d < mesh_ndim; d++) {
            pointwise_dim(op, n_in, in, in_p, &out_meta[0], d, &cl, plan);
            for (int j = 1; j < def->n_out; j++) plan->out[j][d] = R(); /* the 0-d placeholders */
        }
        return 1;
    }
    bool pointwise = (def->fusion == OARI_FUSE_ELEMWISE || def->fusion == OARI_FUSE_BROADCAST) &&
                     !(def->flags & (OARI_F_VIEW | OARI_F_INPLACE | OARI_F_RANDOM)) && def->n_out == 1;
    if (pointwise) {
        for (int d = 0; d < mesh_ndim; d++) pointwise_dim(op, n_in, in, in_p, &out_meta[0], d, &cl, plan);
        return 1;
    }
    if (op == OARI_OP_matmul && in[0].ndim >= 2 && in[1].ndim >= 2) {
        for (int d = 0; d < mesh_ndim; d++)
            matmul_dim(&in[0], &in[1], in_p[0][d], in_p[1][d], &out_meta[0], d, &cl, plan);
        return 1;
    }
    if (op == OARI_OP_sum && in[0].ndim > 0) {
        for (int d = 0; d < mesh_ndim; d++) sum_dim(in_p[0][d], attrs, d, plan);
        return 1;
    }
    return 0;
}

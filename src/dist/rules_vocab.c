/* Sharded calls that placements alone cannot express: the local op is not
 * the op itself on the shards.
 *
 * - index_select(x, dim, idx) and gather(x, dim, idx) with x sharded along
 *   `dim` (a vocab-parallel embedding table [V, D] sharded on V; the pick
 *   of a cross-entropy over vocab-parallel logits): each rank looks up the
 *   indices that fall in its range [start, start + len), writes zeros for
 *   the others, and the output is Partial(sum) (Megatron's
 *   VocabParallelEmbedding). Indices are replicated on that mesh dim.
 * - softmax / log_softmax along a sharded dim (vocab-parallel logits): the
 *   local max is all-reduced (max), then the local sum of exp(x - max)
 *   (sum), and each rank normalises its shard: the output stays sharded
 *   (Megatron's vocab-parallel cross-entropy). Gradients need nothing
 *   special: the calls are recorded on the dtensors, and the gradient
 *   rules (index_add, scatter_add, the softmax ones) run through the
 *   ordinary rules.
 *
 * oari_shard_rule never returns these plans (it replicates such calls),
 * so a caller that only knows placements (static completion) stays
 * correct; dist_dispatch.c asks oari_shard_special first. */
#include "dist.h"

#include <math.h>
#include <string.h>

/* The mesh dim that shards x's dim `dim`, or -1. */
static int sharding(oar_placement (*in_p)[OAR_MESH_MAX_DIMS], int i, int dim, const oar_mesh *mesh) {
    for (int d = 0; d < mesh->ndim; d++)
        if (in_p[i][d].kind == OAR_PLACEMENT_SHARD && in_p[i][d].dim == dim) return d;
    return -1;
}

int oari_shard_special(oari_op op, int n_in, const oari_meta *in, oar_placement (*in_p)[OAR_MESH_MAX_DIMS],
                       const oari_attrs *attrs, const oari_meta *out_meta, const oar_mesh *mesh,
                       oari_shard_plan *plan) {
    if (op != OARI_OP_index_select && op != OARI_OP_gather && op != OARI_OP_softmax && op != OARI_OP_log_softmax)
        return 0;
    if (n_in < 1 || in[0].ndim <= 0 || attrs->ni < 1) return 0;
    const int dim = (int)attrs->i[0];
    const int v = sharding(in_p, 0, dim, mesh);
    if (v < 0) return 0;
    /* the other mesh dims follow the ordinary rule, with this one replicated */
    static _Thread_local oar_placement p[OARI_MAX_IN][OAR_MESH_MAX_DIMS];
    memcpy(p, in_p, sizeof(oar_placement) * OAR_MESH_MAX_DIMS * (size_t)n_in);
    p[0][v] = oar_replicate();
    if (op == OARI_OP_index_select || op == OARI_OP_gather) {
        /* only Replicate or Shard placements elsewhere: a Partial index is refused by the ops */
        p[1][v] = oar_replicate();
        oari_dist_rule r = oari_dist_rule_of(op);
        if (op == OARI_OP_gather) {
            oari_rule_free_dims(&r, op, n_in, in, p, attrs, 1, out_meta, mesh, plan);
        } else {
            /* index_select's ordinary rule: oari_shard_rule on the copy */
            oari_shard_rule(op, oari_op_defs[op], n_in, in, p, attrs, out_meta, mesh, plan);
        }
        for (int d = 0; d < mesh->ndim; d++)
            if (d != v && plan->in[0][d].kind == OAR_PLACEMENT_PARTIAL) return 0; /* keep it simple */
        plan->in[0][v] = oar_shard(dim);
        plan->in[1][v] = oar_replicate();
        plan->out[0][v] = oar_partial(OAR_REDUCE_SUM);
        return 1;
    }
    oari_dist_rule r = oari_dist_rule_of(op);
    oari_rule_free_dims(&r, op, n_in, in, p, attrs, 1, out_meta, mesh, plan);
    for (int d = 0; d < mesh->ndim; d++)
        if (d != v && plan->in[0][d].kind == OAR_PLACEMENT_PARTIAL) return 0;
    plan->in[0][v] = plan->out[0][v] = oar_shard(dim);
    return 1;
}

/* x's placements under plan with mesh dim v a Partial(op): the all-reduce
 * of a local value along v (other mesh dims as they are). */
static oar_tensor *all_reduce_along(oar_tensor *x, oar_mesh *mesh, int v, oar_reduce_op rop) {
    return oari_all_reduce(x, rop, mesh, v);
}

/* index_select / gather on this rank's rows [start, start + len) of dim:
 * indices outside give zeros. */
static oar_tensor *masked_pick(oari_op op, oar_tensor *x, oar_tensor *idx, int dim, int64_t n, int64_t start,
                               int64_t len, const oari_meta *out) {
    oar_tensor *i64 = idx->dtype == OAR_I64 ? idx : oar_cast(idx, OAR_I64);
    /* an index outside the whole dim fails as the plain op does (on every
     * rank of the mesh dim: the indices are replicated along it) */
    oar_tensor *bad = oar_any(oar_logical_or(oar_lt(i64, oar_scalar(0)), oar_ge(i64, oar_scalar((double)n))), 0,
                              NULL, false);
    if (!bad) return NULL;
    if (oar_tensor_item(bad) != 0)
        return oari_error(OAR_ERR_INVALID, "%s: an index is out of range [0, %lld) of dim %d (the table is "
                          "sharded along it)", oari_op_name(op), (long long)n, dim), NULL;
    oar_tensor *in_range = oar_logical_and(oar_ge(i64, oar_scalar((double)start)),
                                           oar_lt(i64, oar_scalar((double)(start + len))));
    if (!len) {
        /* an empty shard (uneven split): nothing of this rank is picked */
        return oar_zeros(x->dtype, out->ndim, out->shape);
    }
    /* local index (idx - start) where in range, else 0 (a row every rank has) */
    oar_tensor *local = oar_mul(oar_sub(i64, oar_full(OAR_I64, 0, NULL, (double)start)), oar_cast(in_range, OAR_I64));
    oar_tensor *y = op == OARI_OP_index_select ? oar_index_select(x, dim, local) : oar_gather(x, dim, local);
    if (!y) return NULL;
    oar_tensor *keep = in_range;
    if (op == OARI_OP_index_select) {
        /* the 1-D mask along dim of y */
        int64_t shape[OAR_MAX_DIMS];
        for (int k = 0; k < y->ndim; k++) shape[k] = k == dim ? y->shape[k] : 1;
        keep = oar_reshape(in_range, y->ndim, shape);
    }
    return oar_where(keep, y, oar_zeros(y->dtype, 0, NULL));
}

int oari_shard_special_run(oari_op op, int n_in, oar_tensor *const *local, const oari_meta *in,
                           const oari_attrs *attrs, oar_mesh *mesh, const oari_shard_plan *plan, oar_tensor **lout) {
    (void)n_in;
    const int dim = (int)attrs->i[0];
    int v = -1;
    for (int d = 0; d < mesh->ndim && v < 0; d++)
        if (plan->in[0][d].kind == OAR_PLACEMENT_SHARD && plan->in[0][d].dim == dim) v = d;
    if (v < 0) return oari_error(OAR_ERR_STATE, "%s: special sharding path without a sharded dim", oari_op_name(op));
    oar_pool *pool = oar_pool_push();
    oar_tensor *y = NULL, *x = local[0];
    if (op == OARI_OP_index_select || op == OARI_OP_gather) {
        int64_t start, len;
        oari_chunk(in[0].shape[dim], mesh->shape[v], mesh->coord[v], &start, &len);
        /* the output's local shape: the ordinary rule's, from the local index */
        oari_meta om = {.dtype = x->dtype, .ndim = x->ndim};
        memcpy(om.shape, (op == OARI_OP_gather ? local[1] : x)->shape, sizeof(int64_t) * (size_t)x->ndim);
        if (op == OARI_OP_index_select) om.shape[dim] = local[1]->shape[0];
        y = masked_pick(op, x, local[1], dim, in[0].shape[dim], start, len, &om);
    } else {
        /* max, then sum of exp(x - max), each all-reduced along v */
        int64_t d64 = dim;
        oar_tensor *m = x->shape[dim] ? oar_amax(x, 1, &d64, true) : NULL;
        if (!x->shape[dim]) {
            int64_t shape[OAR_MAX_DIMS];
            memcpy(shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
            shape[dim] = 1;
            m = oar_full(x->dtype, x->ndim, shape, -INFINITY);
        }
        oar_tensor *gm = m ? all_reduce_along(m, mesh, v, OAR_REDUCE_MAX) : NULL;
        if (gm) oari_pool_adopt(gm);
        /* rows whose every value is -inf keep max 0, as the local op would give NaN anyway */
        oar_tensor *shifted = gm ? oar_sub(x, gm) : NULL;
        oar_tensor *e = oar_exp(shifted);
        oar_tensor *s = e ? oar_sum(e, 1, &d64, true) : NULL;
        oar_tensor *gs = s ? all_reduce_along(s, mesh, v, OAR_REDUCE_SUM) : NULL;
        if (gs) oari_pool_adopt(gs);
        if (gs) y = op == OARI_OP_softmax ? oar_div(e, gs) : oar_sub(shifted, oar_log(gs));
    }
    lout[0] = y ? oari_pop_owned(pool, oar_contiguous(y)) : (oar_pool_pop(pool), NULL);
    return lout[0] ? 0 : oari_fail_status();
}

/* The dist_reshard op: the same global value with other placements, or
 * as a plain tensor (unshard), or a plain tensor taken as replicated and
 * placed (its input is then plain). Being an op, autograd records it: its
 * gradient is the reverse reshard, landing the gradient in the source's
 * layout with Partial turned into Replicate (as DTensor's redistribute
 * does). The gradient of a global value's identity map is the identity, so
 * any layout would be correct; this one keeps gradients where the data is. */
#include "dist.h"

#include <string.h>

void oari_rs_put(oari_attrs *a, int at, int nd, const oar_placement *p) {
    for (int d = 0; d < nd; d++) {
        a->i[at + 3 * d] = p[d].kind;
        a->i[at + 3 * d + 1] = p[d].dim;
        a->i[at + 3 * d + 2] = p[d].reduce;
    }
    if (a->ni < at + 3 * nd) a->ni = at + 3 * nd;
}

void oari_rs_get(const oari_attrs *a, int at, int nd, oar_placement *p) {
    for (int d = 0; d < nd; d++)
        p[d] = (oar_placement){.kind = (oar_placement_kind)a->i[at + 3 * d],
                               .dim = (int)a->i[at + 3 * d + 1],
                               .reduce = (oar_reduce_op)a->i[at + 3 * d + 2]};
}

static int infer_reshard(oari_infer *c) {
    const oari_attrs *a = c->attrs;
    if (a->ni < OARI_RS_TO || a->i[OARI_RS_NDIM] < 1 || a->i[OARI_RS_NDIM] > OAR_MESH_MAX_DIMS ||
        a->i[OARI_RS_FROM_NDIM] < 1 || a->i[OARI_RS_FROM_NDIM] > OAR_MESH_MAX_DIMS ||
        a->ni != OARI_RS_FROM(a->i[OARI_RS_NDIM]) + 3 * a->i[OARI_RS_FROM_NDIM])
        return oari_error(OAR_ERR_INVALID, "dist_reshard: malformed attributes");
    oari_meta_from(&c->out[0], c->in[0]);
    return 0;
}

/* Places a local value (the whole global value when `from` is all
 * Replicate) and wraps it, or returns the global value when to_plain. */
static oar_tensor *place(oar_tensor *local, oar_mesh *m, int ndim, const int64_t *shape,
                         const oar_placement *from, const oari_attrs *a) {
    oar_placement to[OAR_MESH_MAX_DIMS];
    if (a->i[OARI_RS_TO_PLAIN])
        for (int d = 0; d < m->ndim; d++) to[d] = oar_replicate();
    else
        oari_rs_get(a, OARI_RS_TO, m->ndim, to);
    if (m->coord[0] < 0) { /* a rank outside the mesh: no data; a gradient of zeros */
        oar_device *dev = local->storage ? local->storage->device : NULL;
        if (!a->i[OARI_RS_TO_PLAIN]) return oari_dtensor_outside(m, to, local->dtype, ndim, shape, dev);
        oar_pool *p = oar_pool_push();
        return oari_pop_owned(p, oar_zeros(local->dtype, ndim, shape));
    }
    oar_tensor *l = oari_reshard_local(local, m, shape, from, to);
    if (!l) return NULL;
    if (a->i[OARI_RS_TO_PLAIN]) {
        /* the caller may write the result: never hand out the shard itself */
        if (l != local) return l;
        oar_tensor_release(l);
        oar_pool *p = oar_pool_push();
        return oari_pop_owned(p, oar_clone(local));
    }
    oar_tensor *r = oari_dtensor_wrap(l, m, to, ndim, shape);
    oar_tensor_release(l);
    return r;
}

/* A plain input is a replicated global value (the "view" path of dispatch). */
static oar_tensor *view_reshard(oar_tensor *x, const oari_attrs *a) {
    oar_mesh *m = oari_mesh_by_id(a->i[OARI_RS_MESH]);
    if (!m) return NULL;
    if (m->ndim != a->i[OARI_RS_NDIM]) return oari_error(OAR_ERR_INVALID, "dist_reshard: mesh rank changed"), NULL;
    oar_placement rep[OAR_MESH_MAX_DIMS];
    for (int d = 0; d < m->ndim; d++) rep[d] = oar_replicate();
    if (a->i[OARI_RS_TO_PLAIN]) return oar_tensor_retain(x);
    return place(x, m, x->ndim, x->shape, rep, a);
}

int oari_dist_reshard_run(oar_tensor *x, const oari_attrs *a, oar_tensor **out) {
    oari_dist_attr *da = oari_dist(x);
    if (da->mesh->id != a->i[OARI_RS_MESH]) { /* a move between meshes */
        oar_mesh *b = oari_mesh_by_id(a->i[OARI_RS_MESH]);
        if (!b) return OAR_ERR_STATE;
        oar_placement to[OAR_MESH_MAX_DIMS];
        oari_rs_get(a, OARI_RS_TO, b->ndim, to);
        *out = a->i[OARI_RS_TO_PLAIN] ? NULL : oari_dist_move(x, b, to);
        if (a->i[OARI_RS_TO_PLAIN]) oari_error(OAR_ERR_INVALID, "dist_reshard: unshard onto another mesh");
        return *out ? 0 : OAR_ERR_INVALID;
    }
    *out = place(da->local, da->mesh, x->ndim, x->shape, da->p, a);
    return *out ? 0 : OAR_ERR_INVALID;
}

static int grad_reshard(oari_grad_ctx *g) {
    const oari_attrs *a = g->attrs;
    int nd = (int)a->i[OARI_RS_NDIM], fnd = (int)a->i[OARI_RS_FROM_NDIM];
    oari_attrs b = {.ni = 0};
    oar_placement from[OAR_MESH_MAX_DIMS], to[OAR_MESH_MAX_DIMS];
    oari_rs_get(a, OARI_RS_FROM(nd), fnd, from);
    oari_rs_get(a, OARI_RS_TO, nd, to);
    for (int d = 0; d < fnd; d++)
        if (from[d].kind == OAR_PLACEMENT_PARTIAL) from[d] = oar_replicate();
    /* the reverse reshard (a move back to the source mesh for a move) */
    b.i[OARI_RS_MESH] = a->i[OARI_RS_FROM_MESH];
    b.i[OARI_RS_NDIM] = fnd;
    b.i[OARI_RS_FROM_MESH] = a->i[OARI_RS_MESH];
    b.i[OARI_RS_FROM_NDIM] = nd;
    b.i[OARI_RS_TO_PLAIN] = a->i[OARI_RS_FROM_PLAIN];
    b.i[OARI_RS_FROM_PLAIN] = a->i[OARI_RS_TO_PLAIN];
    oari_rs_put(&b, OARI_RS_TO, fnd, from);
    oari_rs_put(&b, OARI_RS_FROM(fnd), nd, to);
    g->gin[0] = oari_call1(OARI_OP_dist_reshard, g->gout[0], &b);
    return g->gin[0] ? 0 : oari_fail_status();
}

const oari_op_def oari_def_dist_reshard = {
    .name = "dist_reshard", .n_in = 1, .n_out = 1, .fusion = OARI_FUSE_OPAQUE, .flags = OARI_F_VIEW,
    .infer = infer_reshard, .view = view_reshard, .grad = grad_reshard,
};

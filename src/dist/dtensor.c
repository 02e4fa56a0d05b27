/* Dtensors: creation from a global value or a local shard, reshard by an
 * ordered table of conversions, unshard, accessors. */
#include "dist.h"

#include <string.h>

/* ---- the OARI_EXT_DIST slot's class (installed by oari_dist_install) ---- */

static void attr_free(void *v) {
    oari_dist_attr *a = v;
    if (!a) return;
    oar_tensor_release(a->local);
    oar_mesh_release(a->mesh);
    oari_free(a, sizeof *a);
}

/* A copy (mesh and shard retained) for autograd's saved tensors. */
static void *attr_copy(void *v) {
    const oari_dist_attr *a = v;
    oari_dist_attr *c = oari_calloc(1, sizeof *c);
    if (!c) return NULL;
    *c = *a;
    oari_mesh_retain(c->mesh);
    oar_tensor_retain(c->local);
    return c;
}

/* A dtensor of the given global dtype and shape made from a saved copy. */
static oar_tensor *attr_remake(void *v, oar_dtype dtype, int ndim, const int64_t *shape) {
    const oari_dist_attr *a = v;
    oar_tensor *t = oari_dtensor_wrap(a->local, a->mesh, a->p, ndim, shape);
    if (t) t->dtype = dtype;
    return t;
}

const oari_ext_class oari_dist_ext_class = {.release = attr_free, .retain = attr_copy, .remake = attr_remake};

oar_tensor *oari_dtensor_wrap(oar_tensor *local, oar_mesh *mesh, const oar_placement *p, int ndim,
                              const int64_t *global_shape) {
    oari_dist_attr *a = oari_calloc(1, sizeof *a);
    if (!a) return NULL;
    oar_tensor *t = oari_tensor_make(NULL, local->dtype, ndim, global_shape, NULL, 0);
    if (!t) return oari_free(a, sizeof *a), NULL;
    a->mesh = oari_mesh_retain(mesh);
    memcpy(a->p, p, sizeof(oar_placement) * (size_t)mesh->ndim);
    a->local = oar_tensor_retain(local);
    t->ext[OARI_EXT_DIST] = a;
    return t;
}

oar_tensor *oari_dtensor_outside(oar_mesh *m, const oar_placement *p, oar_dtype dtype, int ndim,
                                 const int64_t *global_shape, oar_device *dev) {
    oar_pool *pool = oar_pool_push();
    oar_tensor *none = oari_pool_adopt(oari_tensor_empty(dev, dtype, 1, (int64_t[]){0}));
    oar_tensor *r = none ? oari_dtensor_wrap(none, m, p, ndim, global_shape) : NULL;
    oar_pool_pop(pool);
    return r;
}

/* Checks placements against a tensor rank; writes normalised ones to out.
 * outside_ok: this rank may be outside the mesh. */
static int check_placements(const char *what, const oar_mesh *m, const oar_placement *p, int ndim,
                            oar_placement *out, bool outside_ok) {
    if (!m || !p) return oari_error(OAR_ERR_INVALID, "%s: mesh or placements is NULL", what);
    if (m->coord[0] < 0 && !outside_ok) return oari_error(OAR_ERR_STATE, "%s: this rank is not in the mesh", what);
    bool used[OAR_MAX_DIMS] = {false};
    for (int d = 0; d < m->ndim; d++) {
        out[d] = p[d];
        switch (p[d].kind) {
        case OAR_PLACEMENT_REPLICATE: break;
        case OAR_PLACEMENT_PARTIAL:
            if ((unsigned)p[d].reduce > OAR_REDUCE_PROD)
                return oari_error(OAR_ERR_INVALID, "%s: mesh dim %d: unknown reduction %d", what, d,
                                  (int)p[d].reduce);
            break;
        case OAR_PLACEMENT_SHARD: {
            int k = p[d].dim < 0 ? p[d].dim + ndim : p[d].dim;
            if (k < 0 || k >= ndim)
                return oari_error(OAR_ERR_INVALID, "%s: mesh dim %d shards dim %d of a %d-d tensor", what,
                                  d, p[d].dim, ndim);
            if (used[k])
                return oari_error(OAR_ERR_UNSUPPORTED, "%s: tensor dim %d is sharded by two mesh dims",
                                  what, k);
            used[k] = true;
            out[d].dim = k;
            break;
        }
        default:
            return oari_error(OAR_ERR_INVALID, "%s: mesh dim %d: unknown placement kind %d", what, d,
                              (int)p[d].kind);
        }
    }
    return 0;
}

/* The local shape of a global shape under placements on this rank. */
static void local_shape(const oar_mesh *m, const oar_placement *p, int ndim, const int64_t *global,
                        int64_t *out) {
    memcpy(out, global, sizeof(int64_t) * (size_t)ndim);
    for (int d = 0; d < m->ndim; d++) {
        if (p[d].kind != OAR_PLACEMENT_SHARD) continue;
        int64_t start;
        oari_chunk(global[p[d].dim], m->shape[d], m->coord[d], &start, &out[p[d].dim]);
    }
}

/* This rank's chunk of x (which holds the whole extent of `dim`) along mesh dim d. */
static oar_tensor *take_chunk(oar_tensor *x, int dim, const oar_mesh *m, int d) {
    int64_t start, len;
    oari_chunk(x->shape[dim], m->shape[d], m->coord[d], &start, &len);
    return oar_slice(x, dim, start, start + len, 1);
}

/* Turns a replicated value into a Partial(op) one along mesh dim d. */
static oar_tensor *make_partial(oar_tensor *x, oar_reduce_op op, const oar_mesh *m, int d) {
    if (m->coord[d] == 0) return x;
    if (op == OAR_REDUCE_SUM) return oar_zeros_like(x);
    if (op == OAR_REDUCE_PROD) return oar_ones_like(x);
    return x; /* avg, max, min of equal values is the value */
}

static bool same(oar_placement a, oar_placement b) {
    if (a.kind != b.kind) return false;
    if (a.kind == OAR_PLACEMENT_SHARD) return a.dim == b.dim;
    if (a.kind == OAR_PLACEMENT_PARTIAL) return a.reduce == b.reduce;
    return true;
}

oar_tensor *oari_reshard_local(oar_tensor *local, oar_mesh *m, const int64_t *global_shape,
                               const oar_placement *from, const oar_placement *to) {
    oar_placement cur[OAR_MESH_MAX_DIMS];
    memcpy(cur, from, sizeof(oar_placement) * (size_t)m->ndim);
    oar_pool *pool = oar_pool_push();
    oar_tensor *x = local;
    /* 1. Partial -> reduce-scatter straight into the wanted shard, or all-reduce. */
    for (int d = 0; d < m->ndim && x; d++) {
        if (cur[d].kind != OAR_PLACEMENT_PARTIAL || same(cur[d], to[d])) continue;
        bool scatter = to[d].kind == OAR_PLACEMENT_SHARD;
        for (int e = 0; e < m->ndim && scatter; e++)
            scatter = !(cur[e].kind == OAR_PLACEMENT_SHARD && cur[e].dim == to[d].dim);
        if (scatter) {
            x = oari_pool_adopt(oari_reduce_scatter(x, to[d].dim, cur[d].reduce, m, d));
            cur[d] = to[d];
        } else {
            x = oari_pool_adopt(oari_all_reduce(x, cur[d].reduce, m, d));
            cur[d] = oar_replicate();
        }
    }
    /* 2. Shard(a) -> Shard(b) along a mesh dim: one all-to-all, once no
     * other mesh dim shards tensor dim b. Where none can go (a cycle, as
     * [S(0), S(1)] -> [S(1), S(0)]) one shard is all-gathered, which
     * frees its dim (shards going to Replicate or Partial first). */
    for (bool again = true; again && x;) {
        again = false;
        for (int d = 0; d < m->ndim && x; d++) {
            if (cur[d].kind != OAR_PLACEMENT_SHARD || to[d].kind != OAR_PLACEMENT_SHARD ||
                cur[d].dim == to[d].dim)
                continue;
            bool free_dim = true;
            for (int e = 0; e < m->ndim; e++)
                free_dim = free_dim && !(e != d && cur[e].kind == OAR_PLACEMENT_SHARD && cur[e].dim == to[d].dim);
            if (!free_dim) continue;
            x = oari_pool_adopt(oari_all_to_all(x, cur[d].dim, global_shape[cur[d].dim], to[d].dim, m, d));
            cur[d] = to[d];
            again = true;
        }
        /* gather shards bound elsewhere first: that may unblock an all-to-all */
        for (int pass = 0; pass < 2 && !again; pass++)
            for (int d = 0; d < m->ndim && x && !again; d++) {
                if (cur[d].kind != OAR_PLACEMENT_SHARD || same(cur[d], to[d])) continue;
                if (pass == 0 && to[d].kind == OAR_PLACEMENT_SHARD) continue;
                x = oari_pool_adopt(oari_all_gather(x, cur[d].dim, m, d));
                cur[d] = oar_replicate();
                again = true;
            }
    }
    /* 3. Replicate -> local chunk, or Partial by keeping the value on coordinate 0. */
    bool sliced = false;
    for (int d = 0; d < m->ndim && x; d++) {
        if (cur[d].kind != OAR_PLACEMENT_REPLICATE || same(cur[d], to[d])) continue;
        if (to[d].kind == OAR_PLACEMENT_SHARD) {
            x = take_chunk(x, to[d].dim, m, d);
            sliced = true;
        } else {
            x = make_partial(x, to[d].reduce, m, d);
        }
        cur[d] = to[d];
    }
    /* A chunk keeps no more memory alive than its own. */
    if (x && sliced) x = oar_clone(x);
    return oari_pop_owned(pool, x);
}

/* Calls the dist_reshard op, so autograd records it. */
static oar_tensor *reshard_call(oar_tensor *t, oar_mesh *from_mesh, const oar_placement *from, bool from_plain,
                                oar_mesh *mesh, const oar_placement *to, bool to_plain) {
    oari_attrs a = {.ni = 0};
    a.i[OARI_RS_MESH] = mesh->id;
    a.i[OARI_RS_NDIM] = mesh->ndim;
    a.i[OARI_RS_TO_PLAIN] = to_plain;
    a.i[OARI_RS_FROM_PLAIN] = from_plain;
    a.i[OARI_RS_FROM_MESH] = from_mesh->id;
    a.i[OARI_RS_FROM_NDIM] = from_mesh->ndim;
    oari_rs_put(&a, OARI_RS_TO, mesh->ndim, to);
    oari_rs_put(&a, OARI_RS_FROM(mesh->ndim), from_mesh->ndim, from);
    return oari_call1(OARI_OP_dist_reshard, t, &a);
}

oar_tensor *oar_shard_tensor(oar_tensor *global, oar_mesh *mesh, const oar_placement *placements) {
    oar_placement p[OAR_MESH_MAX_DIMS], rep[OAR_MESH_MAX_DIMS];
    if (!global) {
        if (!oari_error_pending()) oari_error(OAR_ERR_INVALID, "oar_shard_tensor: tensor is NULL");
        return NULL;
    }
    if (oari_dist(global))
        return oari_error(OAR_ERR_INVALID, "oar_shard_tensor: tensor is already distributed; use "
                                           "oar_reshard"), NULL;
    if (check_placements("oar_shard_tensor", mesh, placements, global->ndim, p, true)) return NULL;
    for (int d = 0; d < mesh->ndim; d++) rep[d] = oar_replicate();
    return reshard_call(global, mesh, rep, true, mesh, p, false);
}

oar_tensor *oar_dtensor_from_local(oar_tensor *local, oar_mesh *mesh, const oar_placement *placements,
                                   const int64_t *global_shape) {
    oar_placement p[OAR_MESH_MAX_DIMS];
    if (!local) {
        if (!oari_error_pending()) oari_error(OAR_ERR_INVALID, "oar_dtensor_from_local: tensor is NULL");
        return NULL;
    }
    if (oari_dist(local))
        return oari_error(OAR_ERR_INVALID, "oar_dtensor_from_local: tensor is already distributed"), NULL;
    if (!local->storage)
        return oari_error(OAR_ERR_INVALID, "oar_dtensor_from_local: tensor has no data (symbolic)"), NULL;
    if (check_placements("oar_dtensor_from_local", mesh, placements, local->ndim, p, false)) return NULL;
    int64_t global[OAR_MAX_DIMS], want[OAR_MAX_DIMS];
    memcpy(global, local->shape, sizeof(int64_t) * (size_t)local->ndim);
    if (global_shape) {
        memcpy(global, global_shape, sizeof(int64_t) * (size_t)local->ndim);
        local_shape(mesh, p, local->ndim, global, want);
        char a[200], b[200], c[200];
        if (memcmp(want, local->shape, sizeof(int64_t) * (size_t)local->ndim))
            return oari_error(OAR_ERR_INVALID, "oar_dtensor_from_local: local shard %s does not match "
                              "the shard %s of global shape %s on this rank",
                              oari_shape_str(a, local->ndim, local->shape),
                              oari_shape_str(b, local->ndim, want),
                              oari_shape_str(c, local->ndim, global)), NULL;
    } else {
        for (int d = 0; d < mesh->ndim; d++)
            if (p[d].kind == OAR_PLACEMENT_SHARD && oari_sum_i64(&global[p[d].dim], mesh, d)) return NULL;
        local_shape(mesh, p, local->ndim, global, want);
        if (memcmp(want, local->shape, sizeof(int64_t) * (size_t)local->ndim))
            return oari_error(OAR_ERR_INVALID, "oar_dtensor_from_local: the ranks' shard sizes are not "
                              "chunks of ceil(n / ranks) (pass global_shape)"), NULL;
    }
    return oari_pool_adopt(oari_dtensor_wrap(local, mesh, p, local->ndim, global));
}

static oari_dist_attr *dist_of(const char *what, const oar_tensor *t) {
    if (!t) {
        if (!oari_error_pending()) oari_error(OAR_ERR_INVALID, "%s: tensor is NULL", what);
        return NULL;
    }
    if (!oari_dist(t)) oari_error(OAR_ERR_INVALID, "%s: tensor is not distributed", what);
    return oari_dist(t);
}

oar_tensor *oar_reshard(oar_tensor *t, oar_mesh *mesh, const oar_placement *placements) {
    oari_dist_attr *a = dist_of("oar_reshard", t);
    if (!a) return NULL;
    oar_placement p[OAR_MESH_MAX_DIMS];
    if (check_placements("oar_reshard", mesh, placements, t->ndim, p, true)) return NULL;
    if (a->mesh->coord[0] < 0 && mesh->coord[0] < 0 && mesh != a->mesh)
        return oari_error(OAR_ERR_STATE, "oar_reshard: this rank is in neither mesh"), NULL;
    return reshard_call(t, a->mesh, a->p, false, mesh, p, false);
}

oar_tensor *oar_unshard(oar_tensor *t) {
    oari_dist_attr *a = dist_of("oar_unshard", t);
    if (!a) return NULL;
    if (a->mesh->coord[0] < 0)
        return oari_error(OAR_ERR_STATE, "oar_unshard: this rank is not in the tensor's mesh"), NULL;
    oar_placement rep[OAR_MESH_MAX_DIMS];
    for (int d = 0; d < a->mesh->ndim; d++) rep[d] = oar_replicate();
    return reshard_call(t, a->mesh, a->p, false, a->mesh, rep, true);
}

bool oar_tensor_is_dist(const oar_tensor *t) {
    return t ? oari_dist(t) != NULL : (oari_null_arg(__func__, "tensor"), false);
}

oar_tensor *oar_dtensor_local(oar_tensor *t) {
    oari_dist_attr *a = dist_of("oar_dtensor_local", t);
    return a ? a->local : NULL;
}

oar_mesh *oar_dtensor_mesh(const oar_tensor *t) {
    oari_dist_attr *a = dist_of("oar_dtensor_mesh", t);
    return a ? a->mesh : NULL;
}

const oar_placement *oar_dtensor_placements(const oar_tensor *t) {
    oari_dist_attr *a = dist_of("oar_dtensor_placements", t);
    return a ? a->p : NULL;
}

/* Moves of a dtensor between two meshes (other ranks, or the same ranks
 * arranged otherwise) by point-to-point messages. Every rank works out the
 * same plan from the two meshes, the placements and the global shape:
 *   1. on the source mesh, Partial dims are reduced (Replicate), so each
 *      source rank holds a box (an interval per tensor dim) of the value;
 *   2. each target rank needs the box of its shard (target Partial dims
 *      taken as Replicate); for every class of source ranks that hold the
 *      same box (they differ only along Replicate mesh dims) one sends the
 *      overlap: the target rank itself if it is in the class (a local
 *      copy), else the class member (target position mod class size), so
 *      replicas share the sending;
 *   3. the target rank assembles its shard from the pieces and makes the
 *      target's Partial dims (the value on coordinate 0, the identity
 *      elsewhere).
 * Ranks outside the source mesh hold dtensors without data; ranks outside
 * the target mesh get one. Ranks in neither take no part.
 * Shards on a device move through the device's send and recv members when
 * every rank of the move has them (the pieces are cut and assembled on the
 * device); otherwise the pieces go through host memory and MPI. */
#include "dist.h"

#include <string.h>

typedef struct box {
    int64_t lo[OAR_MAX_DIMS], hi[OAR_MAX_DIMS];
} box;

static void box_of(const oar_mesh *m, int64_t pos, const oar_placement *p, int ndim, const int64_t *shape,
                   box *b) {
    int coord[OAR_MESH_MAX_DIMS];
    oari_mesh_coords(m, pos, coord);
    for (int k = 0; k < ndim; k++) b->lo[k] = 0, b->hi[k] = shape[k];
    for (int d = 0; d < m->ndim; d++) {
        if (p[d].kind != OAR_PLACEMENT_SHARD) continue;
        int64_t s, l;
        oari_chunk(shape[p[d].dim], m->shape[d], coord[d], &s, &l);
        b->lo[p[d].dim] = s;
        b->hi[p[d].dim] = s + l;
    }
}

/* a and b overlap (in at least one element; a 0-d value always) */
static bool overlap(const box *a, const box *b, int ndim, box *out) {
    for (int k = 0; k < ndim; k++) {
        out->lo[k] = a->lo[k] > b->lo[k] ? a->lo[k] : b->lo[k];
        out->hi[k] = a->hi[k] < b->hi[k] ? a->hi[k] : b->hi[k];
        if (out->lo[k] >= out->hi[k]) return false;
    }
    return true;
}

/* The position in source mesh a that sends to target rank q (position qi)
 * for the class of source position pi. */
static int64_t sender(const oar_mesh *a, const oar_placement *from, int64_t pi, int q, int64_t qi) {
    int cp[OAR_MESH_MAX_DIMS], cj[OAR_MESH_MAX_DIMS];
    oari_mesh_coords(a, pi, cp);
    int64_t n = 0;
    for (int64_t pj = 0; pj < a->size; pj++) {
        oari_mesh_coords(a, pj, cj);
        bool same_class = true;
        for (int d = 0; d < a->ndim; d++)
            if (from[d].kind == OAR_PLACEMENT_SHARD && cj[d] != cp[d]) same_class = false;
        if (!same_class) continue;
        if (a->ranks[pj] == q) return pj;
        n++;
    }
    int64_t want = qi % n;
    for (int64_t pj = 0; pj < a->size; pj++) {
        oari_mesh_coords(a, pj, cj);
        bool same_class = true;
        for (int d = 0; d < a->ndim; d++)
            if (from[d].kind == OAR_PLACEMENT_SHARD && cj[d] != cp[d]) same_class = false;
        if (same_class && want-- == 0) return pj;
    }
    return pi;
}

static int64_t position(const oar_mesh *m, int rank) {
    for (int64_t i = 0; i < m->size; i++)
        if (m->ranks[i] == rank) return i;
    return -1;
}

/* The part `b` (global coordinates) of a local value holding box `have`. */
static oar_tensor *cut(oar_tensor *local, const box *have, const box *b, int ndim) {
    oar_tensor *x = local;
    for (int k = 0; k < ndim && x; k++)
        if (b->lo[k] != have->lo[k] || b->hi[k] != have->hi[k])
            x = oar_slice(x, k, b->lo[k] - have->lo[k], b->hi[k] - have->lo[k], 1);
    return x;
}

/* A message's buffer: the part of `have` (box hb) to send, as a tensor of
 * its own on a device (members send whole buffers); in the caller's pool. */
static oar_tensor *piece(oar_tensor *have, const box *hb, const box *part, int ndim, bool whole) {
    oar_tensor *p = oar_contiguous(cut(have, hb, part, ndim));
    return p && whole && p->offset ? oar_clone(p) : p;
}

oar_tensor *oari_dist_move(oar_tensor *x, oar_mesh *b, const oar_placement *to) {
    oari_dist_attr *da = oari_dist(x);
    oar_mesh *a = da->mesh;
    int ndim = x->ndim, me = oar_dist_rank();
    const int64_t *shape = x->shape;
    if (a->broken || b->broken)
        return oari_error(OAR_ERR_STATE, "oar_reshard: a mesh is unusable after a timed-out collective"), NULL;
    oar_placement from_r[OAR_MESH_MAX_DIMS], to_r[OAR_MESH_MAX_DIMS];
    for (int d = 0; d < a->ndim; d++)
        from_r[d] = da->p[d].kind == OAR_PLACEMENT_PARTIAL ? oar_replicate() : da->p[d];
    for (int d = 0; d < b->ndim; d++)
        to_r[d] = to[d].kind == OAR_PLACEMENT_PARTIAL ? oar_replicate() : to[d];
    int64_t my_a = position(a, me), my_b = position(b, me);
    oar_device *dev = da->local && da->local->storage ? da->local->storage->device : oari_device_cpu();
    if (my_a < 0 && my_b < 0) return oari_dtensor_outside(b, to, x->dtype, ndim, shape, dev);

    oar_mesh *group;
    void *dcomm;
    int st = oari_move_device_comm(a, b, dev, &group, &dcomm);
    if (st) return NULL;
    oar_device *at = dcomm ? dev : oari_device_cpu(); /* where the pieces are cut and assembled */
    oar_pool *pool = oar_pool_push();
    oari_no_grad_push();
    /* 1. this rank's box of the value on the source mesh */
    oar_tensor *have = NULL;
    box hb;
    if (my_a >= 0) {
        have = oari_pool_adopt(oari_reshard_local(da->local, a, shape, da->p, from_r));
        if (have && have->storage->device != at) have = oar_tensor_to(have, at); /* staged */
        if (!have) st = OAR_ERR_INVALID;
        box_of(a, my_a, from_r, ndim, shape, &hb);
    }
    /* 2. the plan: messages this rank sends and receives */
    box want;
    oar_tensor *out = NULL;
    if (!st && my_b >= 0) {
        box_of(b, my_b, to_r, ndim, shape, &want);
        int64_t lshape[OAR_MAX_DIMS];
        for (int k = 0; k < ndim; k++) lshape[k] = want.hi[k] - want.lo[k];
        if (!(out = oari_pool_adopt(oari_tensor_empty(at, x->dtype, ndim, lshape)))) st = oari_fail_status();
    }
    int n = 0, peer[128];
    bool is_send[128];
    oar_tensor *buf[128];
    box where[128];
    for (int64_t qi = 0; qi < b->size && !st; qi++) {
        int q = b->ranks[qi];
        box qb;
        box_of(b, qi, to_r, ndim, shape, &qb);
        for (int64_t pi = 0; pi < a->size && !st; pi++) {
            int p = a->ranks[pi];
            if ((p != me && q != me) || sender(a, from_r, pi, q, qi) != pi) continue;
            box ab, part;
            box_of(a, pi, from_r, ndim, shape, &ab);
            if (!overlap(&ab, &qb, ndim, &part)) continue;
            if (n == 128) {
                st = oari_error(OAR_ERR_UNSUPPORTED, "oar_reshard: a move of more than 128 messages per rank");
                break;
            }
            if (p == me && q == me) { /* a local copy */
                oar_tensor *src = cut(have, &hb, &part, ndim), *dst = cut(out, &want, &part, ndim);
                if (!src || !dst || oar_copy_(dst, src)) st = OAR_ERR_INVALID;
                continue;
            }
            if (p == me) {
                buf[n] = piece(have, &hb, &part, ndim, dcomm != NULL);
                peer[n] = q;
                is_send[n] = true;
            } else {
                int64_t pshape[OAR_MAX_DIMS];
                for (int k = 0; k < ndim; k++) pshape[k] = part.hi[k] - part.lo[k];
                buf[n] = oari_pool_adopt(oari_tensor_empty(at, x->dtype, ndim, pshape));
                peer[n] = p;
                is_send[n] = false;
            }
            where[n] = part;
            if (!buf[n++]) st = oari_fail_status();
        }
    }
    if (!st && n) {
        st = dcomm ? oari_exchange_device(group, dcomm, dev, n, peer, buf, is_send)
                   : oari_exchange(n, peer, buf, is_send);
        if (st) a->broken = b->broken = true;
    }
    /* 3. assemble, then the target's Partial dims */
    for (int i = 0; i < n && !st; i++) {
        if (is_send[i]) continue;
        oar_tensor *dst = cut(out, &want, &where[i], ndim);
        if (!dst || oar_copy_(dst, buf[i])) st = OAR_ERR_INVALID;
    }
    oar_tensor *r = NULL;
    if (!st && my_b >= 0) {
        oar_tensor *l = oari_pool_adopt(oari_reshard_local(out, b, shape, to_r, to));
        if (l && at != dev) l = oar_tensor_to(l, dev); /* staged: back to the device */
        r = l ? oari_dtensor_wrap(l, b, to, ndim, shape) : NULL;
    } else if (!st) {
        r = oari_dtensor_outside(b, to, x->dtype, ndim, shape, dev);
    }
    oari_no_grad_pop();
    oar_pool_pop(pool);
    return r;
}

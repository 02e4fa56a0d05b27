/* The collective nodes of static auto parallel (src/graph/dist_static.c):
 * what a partitioned graph runs where a consumer needs other placements
 * than its producer gives. Each is a custom op (src/ops/custom.c) of this
 * layer, so the executor runs it like any node (the custom route of the
 * planner) and a saved graph names it: "dist.all_reduce" (Partial ->
 * Replicate), "dist.all_gather" (Shard -> Replicate), "dist.reduce_scatter"
 * (Partial -> Shard), "dist.shard" (Replicate -> Shard: a local slice, no
 * message) and "dist.reshard" (any other change). All five share one rule
 * and one forward: this rank's value under the target placements from its
 * value under the source ones, through oari_reshard_local (comm.c's
 * collectives). They are flagged random, so that CSE and constant folding
 * leave each one where partition put it: every rank's graph holds the same
 * collectives in the same order.
 *
 * Attributes (user ones, after the registry id): OARI_CO_* below. */
#include "dist.h"
#include "../ops/custom_op.h" /* oari_custom_id */

#include <oar/custom.h>
#include <pthread.h>
#include <string.h>

static const char *const coll_names[OARI_CO_N_KINDS] = {
    "dist.all_reduce", "dist.all_gather", "dist.reduce_scatter", "dist.shard", "dist.reshard",
};
static int coll_ids[OARI_CO_N_KINDS];
static bool registered;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

int64_t oari_co_pack(oar_placement p) {
    return ((int64_t)p.kind << 16) | ((int64_t)(p.dim & 0xff) << 8) | (int64_t)(p.reduce & 0xff);
}

oar_placement oari_co_unpack(int64_t v) {
    return (oar_placement){.kind = (oar_placement_kind)(v >> 16),
                           .dim = (int)((v >> 8) & 0xff),
                           .reduce = (oar_reduce_op)(v & 0xff)};
}

/* What a call's attributes say; the mesh is looked up by the forward only,
 * so that a saved graph's shape rules hold in any process. */
typedef struct co_call {
    int mnd, ndim;
    int64_t mshape[OAR_MESH_MAX_DIMS];
    int coord[OAR_MESH_MAX_DIMS];
    int64_t shape[OAR_MAX_DIMS];
    oar_placement from[OAR_MESH_MAX_DIMS], to[OAR_MESH_MAX_DIMS];
} co_call;

static bool placement_ok(oar_placement p, int ndim) {
    if (p.kind == OAR_PLACEMENT_SHARD) return p.dim >= 0 && p.dim < ndim;
    return p.kind == OAR_PLACEMENT_REPLICATE || p.kind == OAR_PLACEMENT_PARTIAL;
}

static int read_call(const oar_custom_attrs *a, co_call *c) {
    if (a->ni < OARI_CO_MSHAPE || a->i[OARI_CO_NDIM] < 0 || a->i[OARI_CO_NDIM] > OAR_MAX_DIMS ||
        a->i[OARI_CO_MNDIM] < 1 || a->i[OARI_CO_MNDIM] > OAR_MESH_MAX_DIMS ||
        a->ni != OARI_CO_NATTR((int)a->i[OARI_CO_MNDIM], (int)a->i[OARI_CO_NDIM]))
        return oari_error(OAR_ERR_INVALID,
                          "malformed attributes (mesh, mesh ndim, ndim, mesh shape, "
                          "coordinates, global shape, source and target placements)");
    c->mnd = (int)a->i[OARI_CO_MNDIM];
    c->ndim = (int)a->i[OARI_CO_NDIM];
    const int64_t *x = a->i + OARI_CO_MSHAPE;
    for (int d = 0; d < c->mnd; d++) {
        c->mshape[d] = x[d];
        c->coord[d] = (int)x[c->mnd + d];
        if (x[d] < 1 || x[c->mnd + d] < 0 || x[c->mnd + d] >= x[d])
            return oari_error(OAR_ERR_INVALID, "mesh dim %d of size %lld at coordinate %lld", d,
                              (long long)x[d], (long long)x[c->mnd + d]);
    }
    x += 2 * c->mnd;
    for (int k = 0; k < c->ndim; k++)
        if ((c->shape[k] = x[k]) < 0) return oari_error(OAR_ERR_INVALID, "a negative global dim");
    x += c->ndim;
    for (int d = 0; d < c->mnd; d++) {
        c->from[d] = oari_co_unpack(x[d]);
        c->to[d] = oari_co_unpack(x[c->mnd + d]);
        if (!placement_ok(c->from[d], c->ndim) || !placement_ok(c->to[d], c->ndim))
            return oari_error(OAR_ERR_INVALID, "a placement names no valid kind or tensor dim");
    }
    return 0;
}

void oari_co_local_shape(int mnd, const int64_t *mshape, const int *coord, const oar_placement *p,
                         int ndim, const int64_t *global, int64_t *out) {
    memcpy(out, global, sizeof(int64_t) * (size_t)ndim);
    for (int d = 0; d < mnd; d++) {
        if (p[d].kind != OAR_PLACEMENT_SHARD) continue;
        int64_t start;
        oari_chunk(global[p[d].dim], mshape[d], coord[d], &start, &out[p[d].dim]);
    }
}

static int co_infer(void *u, int n_in, const oar_custom_meta *in, const oar_custom_attrs *a,
                    oar_custom_meta *out) {
    (void)u;
    co_call c;
    int st = read_call(a, &c);
    if (st) return st;
    if (n_in != 1 || in[0].ndim != c.ndim)
        return oari_error(OAR_ERR_INVALID, "takes one input of rank %d", c.ndim);
    int64_t want[OAR_MAX_DIMS];
    oari_co_local_shape(c.mnd, c.mshape, c.coord, c.from, c.ndim, c.shape, want);
    if (memcmp(want, in[0].shape, (size_t)c.ndim * sizeof *want)) {
        char s1[200], s2[200];
        return oari_error(OAR_ERR_INVALID, "input shape %s is not this rank's shard %s",
                          oari_shape_str(s1, c.ndim, in[0].shape),
                          oari_shape_str(s2, c.ndim, want));
    }
    out[0] = in[0];
    oari_co_local_shape(c.mnd, c.mshape, c.coord, c.to, c.ndim, c.shape, out[0].shape);
    return 0;
}

static int co_forward(void *u, int n_in, oar_tensor *const *in, const oar_custom_attrs *a,
                      oar_tensor **out) {
    (void)u;
    (void)n_in;
    co_call c;
    int st = read_call(a, &c);
    if (st) return st;
    oar_mesh *m = oari_mesh_by_id(a->i[OARI_CO_MESH]);
    if (!m) return oari_fail_status();
    bool same = m->ndim == c.mnd;
    for (int d = 0; d < c.mnd && same; d++)
        same = m->shape[d] == c.mshape[d] && m->coord[d] == c.coord[d];
    if (!same)
        return oari_error(OAR_ERR_INVALID,
                          "mesh %d is not the mesh (or this rank not at the coordinates) the "
                          "graph was partitioned for (mesh mismatch)",
                          m->id);
    oar_tensor *r = oari_reshard_local(in[0], m, c.shape, c.from, c.to);
    if (!r) return oari_fail_status();
    out[0] = oari_pool_adopt(r);
    return out[0] ? 0 : oari_fail_status();
}

/* Registers what is missing (an out-of-memory failure is retried on the next call). */
int oari_co_register(void) {
    if (__atomic_load_n(&registered, __ATOMIC_ACQUIRE)) return 0;
    pthread_mutex_lock(&lock);
    int st = 0;
    for (int k = 0; k < OARI_CO_N_KINDS && !st; k++) {
        const oar_custom_op *op = oar_custom_find(coll_names[k]);
        if (!op) {
            oar_custom_op_desc d = {.name = coll_names[k],
                                    .n_in = 1,
                                    .n_out = 1,
                                    .flags = OAR_CUSTOM_RANDOM,
                                    .infer = co_infer,
                                    .forward = co_forward};
            op = oar_custom_register(&d);
        }
        if (!op || (coll_ids[k] = oari_custom_id(coll_names[k])) < 0) st = oari_fail_status();
    }
    if (!st) __atomic_store_n(&registered, true, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&lock);
    return st;
}

int oari_co_id(oari_co_kind kind) {
    if (oari_co_register()) return -1;
    return coll_ids[kind];
}

int oari_co_kind_of(int custom_id) {
    if (oari_co_register()) return -1;
    for (int k = 0; k < OARI_CO_N_KINDS; k++)
        if (coll_ids[k] == custom_id) return k;
    return -1;
}

const char *oari_co_name(oari_co_kind kind) { return coll_names[kind]; }

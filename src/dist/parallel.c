/* Parallel training recipes built on dtensors: laying a module's
 * parameters out over a mesh by name patterns, and reducing Partial
 * gradients in buckets. */
#include "dist.h"

#include <fnmatch.h>
#include <stdio.h>
#include <oar/autograd.h>
#include <oar/nn.h>
#include <string.h>

static oar_placement style_placement(oar_parallel_style style, const oar_tensor *t) {
    switch (style) {
    case OAR_PARALLEL_COLWISE: return oar_shard(0);
    case OAR_PARALLEL_ROWWISE: return t->ndim >= 2 ? oar_shard(1) : oar_replicate();
    default: return oar_replicate();
    }
}

int oar_parallelize(oar_module *m, oar_mesh *mesh, int mesh_dim, int n_rules,
                    const oar_parallel_rule *rules) {
    if (!m || !mesh) return oari_error(OAR_ERR_INVALID, "oar_parallelize: module or mesh is NULL");
    if (mesh_dim < 0 || mesh_dim >= mesh->ndim)
        return oari_error(OAR_ERR_INVALID, "oar_parallelize: mesh dim %d of a %d-d mesh", mesh_dim,
                          mesh->ndim);
    if (n_rules < 0 || (n_rules && !rules))
        return oari_error(OAR_ERR_INVALID, "oar_parallelize: bad rule list");
    for (int r = 0; r < n_rules; r++)
        if (!rules[r].pattern || (unsigned)rules[r].style > OAR_PARALLEL_ROWWISE)
            return oari_error(OAR_ERR_INVALID, "oar_parallelize: rule %d has no pattern or a bad style", r);
    const oar_state_entry *state;
    int n = oar_module_state(m, &state);
    if (n < 0) return OAR_ERR_INVALID;
    /* Names first: module_set invalidates the state array. */
    char **names = oari_calloc((size_t)(n ? n : 1), sizeof *names);
    if (!names) return OAR_ERR_NOMEM;
    int st = 0;
    for (int i = 0; i < n && !st; i++)
        if (!(names[i] = oari_strdup(state[i].name))) st = OAR_ERR_NOMEM;
    for (int i = 0; i < n && !st; i++) {
        oar_tensor *t = oar_module_get(m, names[i]);
        if (!t) {
            st = OAR_ERR_INVALID;
            break;
        }
        if (t->dist) continue;
        oar_placement p[OAR_MESH_MAX_DIMS];
        for (int d = 0; d < mesh->ndim; d++) p[d] = oar_replicate();
        for (int r = 0; r < n_rules; r++)
            if (!fnmatch(rules[r].pattern, names[i], 0)) {
                p[mesh_dim] = style_placement(rules[r].style, t);
                break;
            }
        oar_pool *pool = oar_pool_push();
        oari_no_grad_push();
        oar_tensor *d = oar_shard_tensor(t, mesh, p);
        oari_no_grad_pop();
        if (!d || oar_module_set(m, names[i], d)) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", oar_last_error());
            st = oari_error(OAR_ERR_INVALID, "oar_parallelize: parameter \"%s\": %s", names[i], msg);
        }
        oar_pool_pop(pool);
    }
    for (int i = 0; i < n; i++) oari_strfree(names[i]);
    oari_free(names, (size_t)(n ? n : 1) * sizeof *names);
    return st;
}

/* ---- bucketed gradient all-reduce ------------------------------------------- */

static bool has_partial(const oari_dist_attr *a) {
    for (int d = 0; d < a->mesh->ndim; d++)
        if (a->p[d].kind == OAR_PLACEMENT_PARTIAL) return true;
    return false;
}

static bool same_layout(const oar_tensor *g, const oar_tensor *h) {
    const oari_dist_attr *a = g->dist, *b = h->dist;
    if (a->mesh != b->mesh || g->dtype != h->dtype) return false;
    for (int d = 0; d < a->mesh->ndim; d++)
        if (a->p[d].kind != b->p[d].kind || a->p[d].dim != b->p[d].dim || a->p[d].reduce != b->p[d].reduce)
            return false;
    return true;
}

/* All-reduces the gradients of params[from..to) (one layout) as one flat
 * buffer and makes them Replicate along the partial mesh dims. */
static int flush(oar_tensor *const *params, int from, int to, int *calls) {
    oar_tensor *g0 = params[from]->grad;
    oari_dist_attr *a = g0->dist;
    oar_mesh *m = a->mesh;
    oar_pool *pool = oar_pool_push();
    oar_tensor *flat[256];
    int k = 0, st = 0;
    for (int i = from; i < to; i++) flat[k++] = oar_reshape(params[i]->grad->dist->local, 1, (int64_t[]){-1});
    oar_tensor *buf = k == 1 ? flat[0] : oar_concat(k, flat, 0);
    oar_placement p[OAR_MESH_MAX_DIMS];
    memcpy(p, a->p, sizeof p);
    for (int d = 0; d < m->ndim && buf; d++) {
        if (p[d].kind != OAR_PLACEMENT_PARTIAL) continue;
        buf = oari_pool_adopt(oari_all_reduce(buf, p[d].reduce, m, d));
        p[d] = oar_replicate();
        (*calls)++;
    }
    if (!buf) st = OAR_ERR_INVALID;
    int64_t off = 0;
    for (int i = from; i < to && !st; i++) {
        oar_tensor *g = params[i]->grad, *loc = g->dist->local;
        oar_tensor *part = oar_reshape(oar_slice(buf, 0, off, off + loc->numel, 1), loc->ndim, loc->shape);
        off += loc->numel;
        oar_tensor *ng = part ? oari_dtensor_wrap(part, m, p, g->ndim, g->shape) : NULL;
        if (!ng) {
            st = OAR_ERR_NOMEM;
            break;
        }
        params[i]->grad = ng;
        oar_tensor_release(g);
    }
    oar_pool_pop(pool);
    return st;
}

int oar_dist_reduce_grads(int n, oar_tensor *const *params, size_t bucket_bytes) {
    if (n < 0 || (n && !params)) return oari_error(OAR_ERR_INVALID, "oar_dist_reduce_grads: bad parameter list"), -1;
    if (!bucket_bytes) bucket_bytes = (size_t)25 << 20;
    int calls = 0, start = -1;
    size_t bytes = 0;
    for (int i = 0; i <= n; i++) {
        oar_tensor *g = NULL;
        if (i < n) {
            if (!params[i]) return oari_error(OAR_ERR_INVALID, "oar_dist_reduce_grads: parameter %d is NULL", i), -1;
            g = params[i]->grad;
            if (g && (!g->dist || !has_partial(g->dist))) g = NULL;
        }
        size_t gb = g ? (size_t)g->dist->local->numel * oar_dtype_size(g->dtype) : 0;
        /* close the open bucket when the layout changes, it is full, or at the end */
        bool close = start >= 0 && (!g || !same_layout(params[start]->grad, g) ||
                                    bytes + gb > bucket_bytes || i - start >= 256);
        if (close) {
            if (flush(params, start, i, &calls)) return -1;
            start = -1;
            bytes = 0;
        }
        if (g) {
            if (start < 0) start = i;
            bytes += gb;
        }
    }
    return calls;
}

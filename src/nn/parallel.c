/* Parallel training recipes built on dtensors: laying a module's
 * parameters out over a mesh by name patterns, and reducing Partial
 * gradients in buckets. */
#include "../dist/dist.h"

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
    if (!names) return oari_fail_status();
    int st = 0;
    for (int i = 0; i < n && !st; i++)
        if (!(names[i] = oari_strdup(state[i].name))) st = oari_fail_status();
    for (int i = 0; i < n && !st; i++) {
        oar_tensor *t = oar_module_get(m, names[i]);
        if (!t) {
            st = OAR_ERR_INVALID;
            break;
        }
        if (oari_dist(t)) continue;
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
    const oari_dist_attr *a = oari_dist(g), *b = oari_dist(h);
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
    oari_dist_attr *a = oari_dist(g0);
    oar_mesh *m = a->mesh;
    oar_pool *pool = oar_pool_push();
    oar_tensor *flat[256];
    int k = 0, st = 0;
    for (int i = from; i < to; i++) flat[k++] = oar_reshape(oari_dist(params[i]->grad)->local, 1, (int64_t[]){-1});
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
        oar_tensor *g = params[i]->grad, *loc = oari_dist(g)->local;
        oar_tensor *part = oar_reshape(oar_slice(buf, 0, off, off + loc->numel, 1), loc->ndim, loc->shape);
        off += loc->numel;
        oar_tensor *ng = part ? oari_dtensor_wrap(part, m, p, g->ndim, g->shape) : NULL;
        if (!ng) {
            st = oari_fail_status();
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
            if (g && (!oari_dist(g) || !has_partial(oari_dist(g)))) g = NULL;
        }
        size_t gb = g ? (size_t)oari_dist(g)->local->numel * oar_dtype_size(g->dtype) : 0;
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

/* ---- gradient buckets overlapped with backward ------------------------------
 * A reducer splits the parameters, last first (backward makes their
 * gradients roughly in that order), into buckets. The autograd engine's
 * leaf hooks (src/autograd/node.h) count, per parameter, the edges that
 * will deliver a gradient in this backward and the deliveries so far; when
 * every parameter of a bucket is complete, its Partial gradients start one
 * non-blocking all-reduce (per layout) while backward goes on, and each
 * later delivery lets MPI progress what is in flight. wait() starts the
 * rest, waits, and splits the results back into the .grad dtensors, as
 * oar_dist_reduce_grads does. */

#include "../autograd/node.h"

#define MAX_REDUCERS 16

typedef struct rgroup {             /* one all-reduce: gradients of one layout in a bucket */
    int first, count;               /* into the reducer's member list */
    oari_pending pend;
    oar_placement p[OAR_MESH_MAX_DIMS];
    int d;                          /* the mesh dim in flight */
} rgroup;

struct oar_dist_reducer {
    int n;
    oar_tensor **params;            /* borrowed */
    int *pending;                   /* per parameter: deliveries still to come in this backward */
    int *bucket_of;                 /* per parameter */
    int n_buckets;
    int *bucket_start;              /* [n_buckets + 1] into order[] */
    int *order;                     /* parameter indices, bucket by bucket */
    bool *started;                  /* per bucket */
    int *members;                   /* [n]: parameters of the groups, in launch order */
    oar_tensor **launched_grad;     /* [n]: their .grad at launch (retained) */
    int n_members;
    rgroup *groups;                 /* [n] at most */
    int n_groups, overlapped, last_overlapped, calls;
    int error;                      /* a launch failed during backward */
    char message[256];
};

static oar_dist_reducer *reducers[MAX_REDUCERS];

static int param_index(const oar_dist_reducer *r, const oar_tensor *t) {
    for (int i = 0; i < r->n; i++)
        if (r->params[i] == t) return i;
    return -1;
}

static void hook_expect(oar_tensor *leaf) {
    for (int k = 0; k < MAX_REDUCERS; k++) {
        oar_dist_reducer *r = reducers[k];
        int i = r ? param_index(r, leaf) : -1;
        if (i >= 0) r->pending[i]++;
    }
}

/* Starts bucket b's all-reduces: its Partial gradients grouped by layout. */
static int launch(oar_dist_reducer *r, int b) {
    r->started[b] = true;
    int st = 0;
    for (int k = r->bucket_start[b]; k < r->bucket_start[b + 1] && !st; k++) {
        int i = r->order[k];
        oar_tensor *g = r->params[i]->grad;
        if (!g || !oari_dist(g) || !has_partial(oari_dist(g))) continue;
        /* this gradient and the rest of the bucket of its layout, unless already taken */
        bool taken = false;
        for (int m = 0; m < r->n_members && !taken; m++) taken = r->members[m] == i;
        if (taken) continue;
        rgroup *gr = &r->groups[r->n_groups];
        gr->first = r->n_members;
        gr->count = 0;
        for (int k2 = k; k2 < r->bucket_start[b + 1]; k2++) {
            int i2 = r->order[k2];
            oar_tensor *g2 = r->params[i2]->grad;
            if (!g2 || !oari_dist(g2) || !has_partial(oari_dist(g2)) || !same_layout(g, g2)) continue;
            r->members[r->n_members] = i2;
            r->launched_grad[r->n_members++] = oar_tensor_retain(g2);
            gr->count++;
        }
        oari_dist_attr *a = oari_dist(g);
        memcpy(gr->p, a->p, sizeof gr->p);
        gr->d = 0;
        while (gr->p[gr->d].kind != OAR_PLACEMENT_PARTIAL) gr->d++;
        oar_pool *pool = oar_pool_push();
        oar_tensor *flat[256], *buf = NULL;
        int nf = 0;
        for (int m = gr->first; m < gr->first + gr->count && nf < 256; m++)
            flat[nf++] = oar_reshape(oari_dist(r->params[r->members[m]]->grad)->local, 1, (int64_t[]){-1});
        buf = nf == 1 ? flat[0] : oar_concat(nf, flat, 0);
        st = buf ? oari_all_reduce_start(buf, gr->p[gr->d].reduce, a->mesh, gr->d, &gr->pend) : OAR_ERR_INVALID;
        oar_pool_pop(pool);
        r->n_groups++;
        if (!st) r->calls++;
    }
    return st;
}

static void hook_arrive(oar_tensor *leaf) {
    for (int k = 0; k < MAX_REDUCERS; k++) {
        oar_dist_reducer *r = reducers[k];
        if (!r) continue;
        for (int g = 0; g < r->n_groups; g++) oari_all_reduce_poke(&r->groups[g].pend); /* progress */
        int i = param_index(r, leaf);
        if (i < 0 || --r->pending[i] != 0 || r->error) continue;
        int b = r->bucket_of[i];
        bool complete = !r->started[b];
        for (int q = r->bucket_start[b]; q < r->bucket_start[b + 1] && complete; q++)
            complete = r->pending[r->order[q]] == 0;
        if (!complete) continue;
        if (launch(r, b)) { /* reported by wait(); backward itself goes on */
            r->error = OAR_ERR_STATE;
            snprintf(r->message, sizeof r->message, "%s", oar_last_error());
            oar_clear_error();
        } else {
            r->overlapped++;
        }
    }
}

static void hooks_update(void) {
    bool any = false;
    for (int k = 0; k < MAX_REDUCERS; k++) any = any || reducers[k];
    oari_leaf_hook.expect = any ? hook_expect : NULL;
    oari_leaf_hook.arrive = any ? hook_arrive : NULL;
}

void oar_dist_reducer_free(oar_dist_reducer *r) {
    if (!r) return;
    for (int k = 0; k < MAX_REDUCERS; k++)
        if (reducers[k] == r) reducers[k] = NULL;
    hooks_update();
    for (int g = 0; g < r->n_groups; g++) { /* in flight: wait, so MPI writes no freed buffer */
        oar_pool *p = oar_pool_push();
        if (r->groups[g].pend.buf) oari_pool_adopt(oari_all_reduce_wait(&r->groups[g].pend));
        oar_pool_pop(p);
    }
    for (int m = 0; m < r->n_members; m++) oar_tensor_release(r->launched_grad[m]);
    size_t n = (size_t)r->n;
    oari_free(r->params, n * sizeof *r->params);
    oari_free(r->pending, n * sizeof *r->pending);
    oari_free(r->bucket_of, n * sizeof *r->bucket_of);
    oari_free(r->bucket_start, (n + 1) * sizeof *r->bucket_start);
    oari_free(r->order, n * sizeof *r->order);
    oari_free(r->started, n * sizeof *r->started);
    oari_free(r->members, n * sizeof *r->members);
    oari_free(r->launched_grad, n * sizeof *r->launched_grad);
    oari_free(r->groups, n * sizeof *r->groups);
    oari_free(r, sizeof *r);
}

oar_dist_reducer *oar_dist_reducer_new(int n, oar_tensor *const *params, size_t bucket_bytes) {
    if (n < 1 || !params)
        return oari_error(OAR_ERR_INVALID, "oar_dist_reducer_new: bad parameter list (n %d)", n), NULL;
    for (int i = 0; i < n; i++)
        if (!params[i]) return oari_error(OAR_ERR_INVALID, "oar_dist_reducer_new: parameter %d is NULL", i), NULL;
    int slot = -1;
    for (int k = 0; k < MAX_REDUCERS && slot < 0; k++)
        if (!reducers[k]) slot = k;
    if (slot < 0)
        return oari_error(OAR_ERR_UNSUPPORTED, "oar_dist_reducer_new: more than %d reducers alive", MAX_REDUCERS), NULL;
    oar_dist_reducer *r = oari_calloc(1, sizeof *r);
    if (!r) return NULL;
    size_t un = (size_t)n;
    r->n = n;
    r->params = oari_calloc(un, sizeof *r->params);
    r->pending = oari_calloc(un, sizeof *r->pending);
    r->bucket_of = oari_calloc(un, sizeof *r->bucket_of);
    r->bucket_start = oari_calloc(un + 1, sizeof *r->bucket_start);
    r->order = oari_calloc(un, sizeof *r->order);
    r->started = oari_calloc(un, sizeof *r->started);
    r->members = oari_calloc(un, sizeof *r->members);
    r->launched_grad = oari_calloc(un, sizeof *r->launched_grad);
    r->groups = oari_calloc(un, sizeof *r->groups);
    if (!r->params || !r->pending || !r->bucket_of || !r->bucket_start || !r->order ||
        !r->started || !r->members || !r->launched_grad || !r->groups) {
        oar_dist_reducer_free(r);
        return NULL;
    }
    memcpy(r->params, params, un * sizeof *params);
    /* buckets, last parameter first: the first up to 1 MiB (it can start
     * early), the others up to bucket_bytes (0: 25 MiB), as PyTorch's DDP */
    size_t cap = bucket_bytes ? bucket_bytes : (size_t)25 << 20, first = cap < ((size_t)1 << 20) ? cap : (size_t)1 << 20;
    size_t bytes = 0;
    for (int k = 0; k < n; k++) {
        int i = n - 1 - k;
        oar_tensor *t = params[i];
        size_t tb = (size_t)(oari_dist(t) ? oari_dist(t)->local->numel : t->numel) * oar_dtype_size(t->dtype);
        size_t limit = r->n_buckets <= 1 ? first : cap;
        if (k == 0 || (bytes + tb > limit && bytes > 0) || k - r->bucket_start[r->n_buckets - 1] >= 256) {
            r->bucket_start[r->n_buckets++] = k;
            bytes = 0;
        }
        r->order[k] = i;
        r->bucket_of[i] = r->n_buckets - 1;
        bytes += tb;
    }
    r->bucket_start[r->n_buckets] = n;
    reducers[slot] = r;
    hooks_update();
    return r;
}

int oar_dist_reducer_overlapped(const oar_dist_reducer *r) {
    return r ? r->last_overlapped : (oari_null_arg(__func__, "reducer"), 0);
}

/* Back to the state before a backward. */
static void reducer_reset(oar_dist_reducer *r) {
    for (int m = 0; m < r->n_members; m++) oar_tensor_release(r->launched_grad[m]);
    r->n_members = r->n_groups = r->calls = r->overlapped = 0;
    r->error = 0;
    memset(r->pending, 0, (size_t)r->n * sizeof *r->pending);
    memset(r->started, 0, (size_t)r->n * sizeof *r->started);
}

int oar_dist_reducer_wait(oar_dist_reducer *r) {
    if (!r) return oari_error(OAR_ERR_INVALID, "oar_dist_reducer_wait: reducer is NULL"), -1;
    int st = r->error;
    if (st) oari_error(st, "oar_dist_reducer_wait: a bucket failed to start during backward: %s", r->message);
    r->last_overlapped = r->overlapped;
    for (int b = 0; b < r->n_buckets && !st; b++)
        if (!r->started[b]) st = launch(r, b);
    /* every started all-reduce is waited for, even after an error */
    for (int g = 0; g < r->n_groups; g++) {
        rgroup *gr = &r->groups[g];
        oar_pool *pool = oar_pool_push();
        oar_tensor *buf = gr->pend.buf ? oari_pool_adopt(oari_all_reduce_wait(&gr->pend)) : NULL;
        if (!buf && !st) st = OAR_ERR_STATE;
        oari_dist_attr *a = st ? NULL : oari_dist(r->params[r->members[gr->first]]->grad);
        gr->p[gr->d] = oar_replicate();
        /* further Partial mesh dims, one blocking all-reduce each */
        for (int d = gr->d + 1; d < OAR_MESH_MAX_DIMS && a && d < a->mesh->ndim && buf; d++) {
            if (gr->p[d].kind != OAR_PLACEMENT_PARTIAL) continue;
            buf = oari_pool_adopt(oari_all_reduce(buf, gr->p[d].reduce, a->mesh, d));
            gr->p[d] = oar_replicate();
            r->calls++;
            if (!buf) st = OAR_ERR_STATE;
        }
        int64_t off = 0;
        for (int m = gr->first; m < gr->first + gr->count && !st; m++) {
            oar_tensor *param = r->params[r->members[m]], *g0 = param->grad;
            if (g0 != r->launched_grad[m]) {
                st = oari_error(OAR_ERR_STATE, "oar_dist_reducer_wait: the gradient of parameter %d changed after "
                                "its bucket was reduced (two backwards in one step? use oar_dist_reduce_grads "
                                "to accumulate)", r->members[m]);
                break;
            }
            oar_tensor *loc = oari_dist(g0)->local;
            oar_tensor *part = oar_reshape(oar_slice(buf, 0, off, off + loc->numel, 1), loc->ndim, loc->shape);
            off += loc->numel;
            oar_tensor *ng = part ? oari_dtensor_wrap(part, a->mesh, gr->p, g0->ndim, g0->shape) : NULL;
            if (!ng) {
                st = oari_fail_status();
                break;
            }
            param->grad = ng;
            oar_tensor_release(g0);
        }
        oar_pool_pop(pool);
    }
    int calls = r->calls;
    reducer_reset(r);
    return st ? -1 : calls;
}

/* Pipeline parallel (eager): a model cut into p contiguous stages along
 * one mesh axis, run over m micro-batches with the GPipe or the 1F1B
 * schedule. Activations go forward and their gradients back by
 * point-to-point messages between neighbouring stages (oari_p2p_* in
 * src/dist/comm.c, waited with the deadline); gradients accumulate in the
 * parameters' .grad over the micro-batches, and Partial ones (data
 * parallel on another axis) are all-reduced after the last. Each rank
 * runs the stage of its coordinate along the axis. docs/internals/dist.md,
 * "Pipeline parallel". */
#include "../dist/dist.h"

#include <oar/autograd.h>
#include <oar/nn.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define PIPE_TAG 0x7070 /* pipeline messages on the move communicator */
#define PIPE_MAX_MICRO 4096
enum { H_MAGIC, H_DTYPE, H_NDIM, H_LOCAL, H_GLOBAL = H_LOCAL + OAR_MAX_DIMS, H_MNDIM = H_GLOBAL + OAR_MAX_DIMS,
       H_PLACE, H_LEN = H_PLACE + 3 * OAR_MESH_MAX_DIMS };
#define PIPE_MAGIC 0x70697065

struct oar_pipeline {
    oar_module **mods;          /* this rank's stage: borrowed */
    int n_mods;
    oar_mesh *mesh;             /* retained */
    int axis, p, stage, m;
    oar_pipe_schedule schedule;
    oar_pipe_loss_fn loss_fn;
    void *loss_ctx;
    oar_mesh *stage_mesh;       /* the other axes of this stage's ranks (NULL for a 1-d mesh) */
    int prev_rank, next_rank;   /* world ranks of the neighbours (-1 at the ends) */
    /* one step's state */
    oar_tensor **st_in, **st_out; /* stash per micro-batch: received input, output (last stage: scaled loss) */
    oari_p2p *sends;            /* in flight until the end of the step */
    int n_sends;
    int live, peak;             /* stashed micro-batches now, and the most in the last step */
    double busy_s, step_s;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* World rank at coordinates c of mesh m (row-major). */
static int rank_at(const oar_mesh *m, const int *c) {
    int64_t lin = 0;
    for (int d = 0; d < m->ndim; d++) lin = lin * m->shape[d] + c[d];
    return m->ranks[lin];
}

/* Makes every stage's mesh (collective over the world, as oar_mesh_create
 * is) and keeps this rank's. */
static int make_stage_meshes(oar_pipeline *pl) {
    oar_mesh *m = pl->mesh;
    if (m->ndim == 1) return 0;
    int nd = m->ndim - 1, n = (int)(m->size / pl->p);
    int64_t shape[OAR_MESH_MAX_DIMS];
    const char *names[OAR_MESH_MAX_DIMS];
    for (int d = 0, k = 0; d < m->ndim; d++)
        if (d != pl->axis) {
            shape[k] = m->shape[d];
            names[k++] = m->names[d];
        }
    int *ranks = oari_calloc((size_t)n, sizeof *ranks);
    if (!ranks) return oari_fail_status();
    int st = 0;
    int64_t stride = 1;
    for (int d = pl->axis + 1; d < m->ndim; d++) stride *= m->shape[d];
    for (int s = 0; s < pl->p; s++) {
        int k = 0;
        for (int64_t lin = 0; lin < m->size; lin++)
            if ((lin / stride) % m->shape[pl->axis] == s) ranks[k++] = m->ranks[lin];
        oar_mesh *sm = oar_mesh_create(nd, shape, ranks, names);
        if (!sm) {
            st = oari_fail_status();
            break;
        }
        if (s == pl->stage) pl->stage_mesh = sm;
        else oar_mesh_release(sm);
    }
    oari_free(ranks, (size_t)n * sizeof *ranks);
    return st;
}

oar_pipeline *oar_pipeline_new(int n_modules, oar_module *const *modules, oar_mesh *mesh, int axis, int m,
                               oar_pipe_schedule schedule, oar_pipe_loss_fn loss_fn, void *loss_ctx) {
    if (!mesh || !modules || !loss_fn)
        return oari_error(OAR_ERR_INVALID, "oar_pipeline_new: mesh, modules or loss_fn is NULL"), NULL;
    if (axis < 0 || axis >= mesh->ndim)
        return oari_error(OAR_ERR_INVALID, "oar_pipeline_new: mesh axis %d of a %d-d mesh", axis, mesh->ndim),
               NULL;
    int p = (int)mesh->shape[axis];
    if (n_modules < p || n_modules % p)
        return oari_error(OAR_ERR_INVALID, "oar_pipeline_new: %d modules cannot be cut into %d stages (the "
                          "size of mesh axis %s): give a multiple of %d", n_modules, p, mesh->names[axis], p),
               NULL;
    if (m < 1 || m > PIPE_MAX_MICRO)
        return oari_error(OAR_ERR_INVALID, "oar_pipeline_new: %d micro-batches (1 .. %d)", m, PIPE_MAX_MICRO),
               NULL;
    if (schedule != OAR_PIPE_GPIPE && schedule != OAR_PIPE_1F1B)
        return oari_error(OAR_ERR_INVALID, "oar_pipeline_new: unknown schedule %d (OAR_PIPE_GPIPE, "
                          "OAR_PIPE_1F1B)", (int)schedule), NULL;
    if (mesh->coord[axis] < 0)
        return oari_error(OAR_ERR_INVALID, "oar_pipeline_new: rank %d is not in the mesh", oar_dist_rank()), NULL;
    int k = n_modules / p, stage = mesh->coord[axis];
    for (int i = 0; i < k; i++)
        if (!modules[stage * k + i])
            return oari_error(OAR_ERR_INVALID, "oar_pipeline_new: module %d (of stage %d) is NULL", stage * k + i,
                              stage), NULL;
    oar_pipeline *pl = oari_calloc(1, sizeof *pl);
    if (!pl) return NULL;
    pl->mods = oari_calloc((size_t)k, sizeof *pl->mods);
    pl->st_in = oari_calloc((size_t)m, sizeof *pl->st_in);
    pl->st_out = oari_calloc((size_t)m, sizeof *pl->st_out);
    pl->sends = oari_calloc((size_t)(3 * m), sizeof *pl->sends);
    pl->mesh = oari_mesh_retain(mesh);
    pl->n_mods = k;
    pl->m = m;
    if (!pl->mods || !pl->st_in || !pl->st_out || !pl->sends) {
        int st = oari_fail_status();
        oar_pipeline_free(pl);
        return oari_error(st, "oar_pipeline_new: out of memory"), NULL;
    }
    memcpy(pl->mods, modules + stage * k, (size_t)k * sizeof *pl->mods);
    pl->axis = axis;
    pl->p = p;
    pl->stage = stage;
    pl->schedule = schedule;
    pl->loss_fn = loss_fn;
    pl->loss_ctx = loss_ctx;
    int c[OAR_MESH_MAX_DIMS];
    for (int d = 0; d < mesh->ndim; d++) c[d] = mesh->coord[d];
    pl->prev_rank = pl->next_rank = -1;
    if (stage > 0) {
        c[axis] = stage - 1;
        pl->prev_rank = rank_at(mesh, c);
    }
    if (stage < p - 1) {
        c[axis] = stage + 1;
        pl->next_rank = rank_at(mesh, c);
    }
    if (make_stage_meshes(pl)) {
        int st = oari_fail_status();
        char msg[512];
        snprintf(msg, sizeof msg, "%s", oar_last_error());
        oar_pipeline_free(pl);
        return oari_error(st, "oar_pipeline_new: stage meshes: %s", msg), NULL;
    }
    return pl;
}

int oar_pipeline_stage(const oar_pipeline *pl) { return pl ? pl->stage : -1; }
oar_mesh *oar_pipeline_stage_mesh(const oar_pipeline *pl) { return pl ? pl->stage_mesh : NULL; }
int oar_pipeline_peak_stash(const oar_pipeline *pl) { return pl ? pl->peak : -1; }

int oar_pipeline_times(const oar_pipeline *pl, double *busy, double *total) {
    if (!pl) return oari_error(OAR_ERR_INVALID, "oar_pipeline_times: NULL pipeline"), -1;
    if (busy) *busy = pl->busy_s;
    if (total) *total = pl->step_s;
    return 0;
}

static void drop_stash(oar_pipeline *pl) {
    for (int i = 0; i < pl->m; i++) {
        oar_tensor_release(pl->st_in[i]);
        oar_tensor_release(pl->st_out[i]);
        pl->st_in[i] = pl->st_out[i] = NULL;
    }
    pl->live = 0;
}

void oar_pipeline_free(oar_pipeline *pl) {
    if (!pl) return;
    if (pl->sends) oari_p2p_abandon(pl->n_sends, pl->sends);
    if (pl->st_in && pl->st_out) drop_stash(pl);
    if (pl->stage_mesh) oar_mesh_release(pl->stage_mesh);
    if (pl->mesh) oar_mesh_release(pl->mesh);
    oari_free(pl->mods, (size_t)pl->n_mods * sizeof *pl->mods);
    oari_free(pl->st_in, (size_t)pl->m * sizeof *pl->st_in);
    oari_free(pl->st_out, (size_t)pl->m * sizeof *pl->st_out);
    oari_free(pl->sends, (size_t)(3 * pl->m) * sizeof *pl->sends);
    oari_free(pl, sizeof *pl);
}

/* ---- one step ------------------------------------------------------------- */

/* Rows of x (a dtensor: of its local shard) split into m; "" if they do,
 * else why not (into why). */
static bool splits(const oar_pipeline *pl, oar_tensor *x, const char *name, char *why, size_t size) {
    if (!x) return snprintf(why, size, "stage %d has no %s", pl->stage, name), false;
    oari_dist_attr *a = oari_dist(x);
    oar_tensor *l = a ? a->local : x;
    if (l->ndim < 1 || l->shape[0] % pl->m || x->shape[0] % pl->m)
        return snprintf(why, size, "the %s's %lld rows (%lld on this rank) are not divisible into %d micro-batches",
                        name, (long long)x->shape[0], (long long)(l->ndim ? l->shape[0] : 0), pl->m), false;
    if (a) {
        int64_t n = l->shape[0];
        for (int d = 0; d < a->mesh->ndim; d++)
            if (a->p[d].kind == OAR_PLACEMENT_SHARD && a->p[d].dim == 0) n *= a->mesh->shape[d];
        if (n != x->shape[0])
            return snprintf(why, size, "the %s's rows are sharded unevenly", name), false;
        if (a->mesh != pl->stage_mesh)
            return snprintf(why, size, "the %s is a dtensor on another mesh than stage %d's "
                            "(oar_pipeline_stage_mesh)", name, pl->stage), false;
    }
    return true;
}

/* Micro-batch i of x: rows [i b, (i + 1) b) of x or of its local shard
 * (then a dtensor of global rows x->shape[0] / m). Pool-owned. */
static oar_tensor *micro(const oar_pipeline *pl, oar_tensor *x, int i) {
    oari_dist_attr *a = oari_dist(x);
    oar_tensor *l = a ? a->local : x;
    int64_t b = l->shape[0] / pl->m;
    oar_tensor *piece = oar_contiguous(oar_slice(l, 0, i * b, (i + 1) * b, 1));
    if (!a || !piece) return piece;
    int64_t g[OAR_MAX_DIMS];
    memcpy(g, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    g[0] /= pl->m;
    return oar_dtensor_from_local(piece, a->mesh, a->p, g);
}

/* A whole contiguous CPU copy of a value's data (a dtensor: of its local
 * shard), pool-owned. */
static oar_tensor *whole(oar_tensor *t) {
    oari_dist_attr *a = oari_dist(t);
    oar_tensor *l = a ? a->local : t;
    if (!l) return NULL;
    if (!l->offset && oar_tensor_is_contiguous(l)) return oar_contiguous(l);
    return oar_clone(l);
}

static int send(oar_pipeline *pl, oar_tensor *buf, int peer) {
    if (!buf) return oari_fail_status();
    if (pl->n_sends >= 3 * pl->m) return oari_error(OAR_ERR_STATE, "oar_pipeline_step: internal: too many sends");
    return oari_p2p_start(buf, peer, true, PIPE_TAG, &pl->sends[pl->n_sends++]);
}

/* Receives one message into buf from world rank peer, waiting with the deadline. */
static int recv(oar_pipeline *pl, oar_tensor *buf, int peer, const char *what, int i) {
    if (!buf) return oari_fail_status();
    oari_p2p r;
    int st = oari_p2p_start(buf, peer, false, PIPE_TAG, &r);
    if (st) return st;
    char msg[160];
    snprintf(msg, sizeof msg, "oar_pipeline_step: stage %d, %s of micro-batch %d from stage %d", pl->stage, what,
             i, peer == pl->prev_rank ? pl->stage - 1 : pl->stage + 1);
    return oari_p2p_wait(1, &r, msg);
}

/* Sends an activation: its header, then its data. */
static int send_activation(oar_pipeline *pl, oar_tensor *y) {
    oari_dist_attr *a = oari_dist(y);
    oar_tensor *l = a ? a->local : y;
    int64_t h[H_LEN] = {[H_MAGIC] = PIPE_MAGIC, [H_DTYPE] = y->dtype, [H_NDIM] = y->ndim};
    for (int d = 0; d < y->ndim; d++) {
        h[H_LOCAL + d] = l->shape[d];
        h[H_GLOBAL + d] = y->shape[d];
    }
    if (a) {
        h[H_MNDIM] = a->mesh->ndim;
        for (int d = 0; d < a->mesh->ndim; d++) {
            h[H_PLACE + 3 * d] = a->p[d].kind;
            h[H_PLACE + 3 * d + 1] = a->p[d].dim;
            h[H_PLACE + 3 * d + 2] = a->p[d].reduce;
        }
    }
    int st = send(pl, oar_tensor_from_data(h, OAR_I64, 1, (int64_t[]){H_LEN}), pl->next_rank);
    return st ? st : send(pl, whole(y), pl->next_rank);
}

/* Receives an activation (pool-owned, a leaf that requires grad), or NULL. */
static oar_tensor *recv_activation(oar_pipeline *pl, int i) {
    oar_tensor *hb = oar_empty(OAR_I64, 1, (int64_t[]){H_LEN}, NULL);
    if (recv(pl, hb, pl->prev_rank, "the header of the activation", i)) return NULL;
    const int64_t *h = oar_tensor_data(hb);
    int ndim = (int)h[H_NDIM], mnd = (int)h[H_MNDIM];
    bool ok = h[H_MAGIC] == PIPE_MAGIC && ndim >= 0 && ndim <= OAR_MAX_DIMS && h[H_DTYPE] >= 0 &&
              h[H_DTYPE] < OAR_DTYPE_COUNT && (mnd == 0 || (pl->stage_mesh && mnd == pl->stage_mesh->ndim));
    if (!ok)
        return oari_error(OAR_ERR_STATE, "oar_pipeline_step: stage %d got a bad activation header from stage %d "
                          "(a dtensor on a %d-d mesh, stage mesh %s)", pl->stage, pl->stage - 1, mnd,
                          pl->stage_mesh ? "present" : "absent"), NULL;
    oar_tensor *buf = oar_empty((oar_dtype)h[H_DTYPE], ndim, h + H_LOCAL, NULL);
    if (recv(pl, buf, pl->prev_rank, "the activation", i)) return NULL;
    oar_tensor *x = buf;
    if (mnd) {
        oar_placement p[OAR_MESH_MAX_DIMS];
        for (int d = 0; d < mnd; d++)
            p[d] = (oar_placement){.kind = (oar_placement_kind)h[H_PLACE + 3 * d], .dim = (int)h[H_PLACE + 3 * d + 1],
                                   .reduce = (oar_reduce_op)h[H_PLACE + 3 * d + 2]};
        x = oar_dtensor_from_local(buf, pl->stage_mesh, p, h + H_GLOBAL);
    }
    if (x && oar_tensor_set_requires_grad(x, true)) return NULL;
    return x;
}

/* The gradient of this stage's output y, received from the next stage:
 * a tensor (dtensor) of y's layout, pool-owned, or NULL. */
static oar_tensor *recv_grad(oar_pipeline *pl, oar_tensor *y, int i) {
    oari_dist_attr *a = oari_dist(y);
    oar_tensor *l = a ? a->local : y;
    oar_tensor *buf = oar_empty(y->dtype, l->ndim, l->shape, NULL);
    if (recv(pl, buf, pl->next_rank, "the gradient", i)) return NULL;
    return a ? oar_dtensor_from_local(buf, a->mesh, a->p, y->shape) : buf;
}

/* Sends the gradient of a received input x, in x's layout (zeros when the
 * output did not depend on it). */
static int send_grad(oar_pipeline *pl, oar_tensor *x) {
    oar_tensor *g = oar_tensor_grad(x);
    oari_dist_attr *a = oari_dist(x);
    oar_no_grad_push();
    if (!g) g = a ? oar_dtensor_from_local(oar_zeros_like(a->local), a->mesh, a->p, x->shape) : oar_zeros_like(x);
    else if (a) g = oar_reshard(g, a->mesh, a->p);
    oar_tensor *w = g ? whole(g) : NULL;
    oar_no_grad_pop();
    return send(pl, w, pl->prev_rank);
}

static oar_tensor *stage_forward(oar_pipeline *pl, oar_tensor *h) {
    for (int k = 0; k < pl->n_mods && h; k++) h = oar_module_forward(pl->mods[k], h);
    return h;
}

/* Forward of micro-batch i; the last stage adds its loss to *loss_sum. */
static int run_forward(oar_pipeline *pl, oar_tensor *x, oar_tensor *target, int i, double *loss_sum) {
    oar_pool *pool = oar_pool_push();
    int st = 0;
    oar_tensor *in = pl->stage ? recv_activation(pl, i) : micro(pl, x, i);
    double t0 = now_s();
    oar_tensor *out = in ? stage_forward(pl, in) : NULL;
    if (out && pl->stage == pl->p - 1) {
        oar_tensor *l = pl->loss_fn(out, micro(pl, target, i), pl->loss_ctx);
        if (l && oar_tensor_numel(l) != 1)
            l = (oari_error(OAR_ERR_INVALID, "oar_pipeline_step: the loss of micro-batch %d has %lld elements, "
                            "not one", i, (long long)oar_tensor_numel(l)), NULL);
        out = l ? oar_mul_scalar(l, 1.0 / pl->m) : NULL;
        if (out) {
            oar_no_grad_push();
            oar_tensor *v = oari_dist(out) ? oar_unshard(out) : out;
            oar_no_grad_pop();
            if (v) *loss_sum += oar_tensor_item(v);
            else out = NULL;
        }
    }
    pl->busy_s += now_s() - t0;
    if (!out) st = oari_fail_status();
    else if (pl->stage < pl->p - 1) st = send_activation(pl, out);
    if (!st) {
        pl->st_in[i] = pl->stage ? oar_tensor_retain(in) : NULL;
        pl->st_out[i] = oar_tensor_retain(out);
        if (++pl->live > pl->peak) pl->peak = pl->live;
    }
    oar_pool_pop(pool);
    return st;
}

static int run_backward(oar_pipeline *pl, int i) {
    oar_pool *pool = oar_pool_push();
    oar_tensor *out = pl->st_out[i];
    oar_tensor *g = NULL;
    int st = 0;
    if (pl->stage < pl->p - 1 && !(g = recv_grad(pl, out, i))) st = oari_fail_status();
    double t0 = now_s();
    if (!st) st = oar_backward(out, g);
    pl->busy_s += now_s() - t0;
    if (!st && pl->stage > 0) st = send_grad(pl, pl->st_in[i]);
    oar_tensor_release(pl->st_in[i]);
    oar_tensor_release(pl->st_out[i]);
    pl->st_in[i] = pl->st_out[i] = NULL;
    pl->live--;
    oar_pool_pop(pool);
    return st;
}

/* The order of this stage's work: op[k] = micro-batch + 1 for a forward,
 * -(micro-batch + 1) for a backward. */
static void schedule(const oar_pipeline *pl, int *op) {
    int m = pl->m, k = 0;
    if (pl->schedule == OAR_PIPE_GPIPE) {
        for (int i = 0; i < m; i++) op[k++] = i + 1;
        for (int i = 0; i < m; i++) op[k++] = -(i + 1);
        return;
    }
    int warm = pl->p - pl->stage - 1 < m ? pl->p - pl->stage - 1 : m;
    for (int i = 0; i < warm; i++) op[k++] = i + 1;
    for (int i = 0; i < m - warm; i++) {
        op[k++] = warm + i + 1;
        op[k++] = -(i + 1);
    }
    for (int i = m - warm; i < m; i++) op[k++] = -(i + 1);
}

/* The stages agree that every one can start: a sum over the axis of the
 * refusals. */
static int agree(oar_pipeline *pl, const char *why) {
    int64_t bad = why[0] != 0;
    if (oari_sum_i64(&bad, pl->mesh, pl->axis)) return oari_fail_status();
    if (why[0]) return oari_error(OAR_ERR_INVALID, "oar_pipeline_step: %s", why);
    if (bad)
        return oari_error(OAR_ERR_INVALID, "oar_pipeline_step: %lld other stage(s) refused the step (a missing "
                          "or indivisible batch or target: see their error)", (long long)bad);
    return 0;
}

static int dp_reduce(oar_pipeline *pl) {
    int st = 0;
    for (int k = 0; k < pl->n_mods && !st; k++) {
        oar_tensor *params[256];
        int n = oar_module_parameters(pl->mods[k], params, 256);
        if (n < 0) return oari_fail_status();
        if (n > 256) return oari_error(OAR_ERR_UNSUPPORTED, "oar_pipeline_step: a stage module with %d "
                                       "parameters (at most 256)", n);
        if (oar_dist_reduce_grads(n, params, 0) < 0) st = oari_fail_status();
    }
    return st;
}

int oar_pipeline_step(oar_pipeline *pl, oar_tensor *x, oar_tensor *target, double *loss) {
    if (!pl) return oari_error(OAR_ERR_INVALID, "oar_pipeline_step: NULL pipeline");
    double t_start = now_s();
    pl->busy_s = 0;
    pl->peak = 0;
    char why[256] = "";
    if (pl->stage == 0) splits(pl, x, "batch", why, sizeof why);
    if (!why[0] && pl->stage == pl->p - 1) splits(pl, target, "target", why, sizeof why);
    int st = agree(pl, why);
    if (st) return st;
    int *op = oari_calloc((size_t)(2 * pl->m), sizeof *op);
    if (!op) return oari_fail_status();
    schedule(pl, op);
    double loss_sum = 0;
    for (int k = 0; k < 2 * pl->m && !st; k++)
        st = op[k] > 0 ? run_forward(pl, x, target, op[k] - 1, &loss_sum) : run_backward(pl, -op[k] - 1);
    oari_free(op, (size_t)(2 * pl->m) * sizeof *op);
    if (!st) {
        char msg[96];
        snprintf(msg, sizeof msg, "oar_pipeline_step: stage %d, the messages it sent", pl->stage);
        st = oari_p2p_wait(pl->n_sends, pl->sends, msg);
    } else {
        oari_p2p_abandon(pl->n_sends, pl->sends);
    }
    pl->n_sends = 0;
    drop_stash(pl);
    if (!st) st = dp_reduce(pl); /* communication: not counted as busy */
    if (!st) {
        oar_pool *pool = oar_pool_push();
        oar_tensor *v = oar_full(OAR_F64, 0, NULL, loss_sum);
        st = v ? oar_dist_broadcast_(v, pl->mesh, pl->axis, pl->p - 1) : oari_fail_status();
        if (!st && loss) *loss = oar_tensor_item(v);
        oar_pool_pop(pool);
    }
    pl->step_s = now_s() - t_start;
    return st;
}

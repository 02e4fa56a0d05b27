/* Collectives on local CPU tensors over one mesh dim, as MPI calls on the
 * mesh's communicator for that dim. A collective along a tensor dim moves
 * that dim to the front so each rank's part is one contiguous block. Then
 * the messages of moves between meshes, local tensors on devices, the
 * public broadcast, and device messages of moves (in a deadlock-free order). */
#include "dist.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The transport's element type of dtype d (f16/bf16 are widened first). */
static oari_mpi_type mpi_type(oar_dtype d) {
    switch (d) {
    case OAR_BOOL: return OARI_MPI_BOOL;
    case OAR_U8: return OARI_MPI_U8;
    case OAR_I8: return OARI_MPI_I8;
    case OAR_I32: return OARI_MPI_I32;
    case OAR_I64: return OARI_MPI_I64;
    case OAR_F32: return OARI_MPI_F32;
    case OAR_F64: return OARI_MPI_F64;
    case OAR_C64: return OARI_MPI_C64;
    case OAR_C128: return OARI_MPI_C128;
    default: return OARI_MPI_BYTE;
    }
}

static bool is_complex(oar_dtype d) { return d == OAR_C64 || d == OAR_C128; }
static bool is_half(oar_dtype d) { return d == OAR_F16 || d == OAR_BF16; }
static bool is_int(oar_dtype d) { return oar_dtype_is_integral(d); }

/* The MPI op for a reduction on dtype d, or -1 with the error set. */
static int mpi_op(const char *what, oar_reduce_op op, oar_dtype d) {
    if (d == OAR_BOOL) {
        if (op == OAR_REDUCE_MAX) return OARI_MPI_LOR;
        if (op == OAR_REDUCE_MIN) return OARI_MPI_LAND;
    } else if ((op == OAR_REDUCE_MAX || op == OAR_REDUCE_MIN) && is_complex(d)) {
        /* falls through to the error: complex numbers have no order */
    } else if (op == OAR_REDUCE_AVG && is_int(d)) {
        /* falls through: an average of integers is not an integer */
    } else {
        switch (op) {
        case OAR_REDUCE_SUM: case OAR_REDUCE_AVG: return OARI_MPI_SUM;
        case OAR_REDUCE_MAX: return OARI_MPI_MAX;
        case OAR_REDUCE_MIN: return OARI_MPI_MIN;
        case OAR_REDUCE_PROD: return OARI_MPI_PROD;
        }
    }
    static const char *const names[] = {"sum", "max", "min", "avg", "prod"}; /* oar_reduce_op order */
    oari_error(OAR_ERR_INVALID, "%s: reduction %s is not defined for dtype %s", what,
               (unsigned)op < 5 ? names[op] : "?", oar_dtype_name(d));
    return -1;
}

static int check_mesh(const char *what, oar_tensor *x, oar_mesh *m, int d) {
    if (!x || !m || d < 0 || d >= m->ndim)
        return oari_error(OAR_ERR_INVALID, "%s: bad tensor or mesh dim", what);
    if (!m->comm[d])
        return oari_error(OAR_ERR_STATE, "%s: this rank is not in the mesh", what);
    if (m->broken)
        return oari_error(OAR_ERR_STATE, "%s: the mesh is unusable after a timed-out collective", what);
    return 0;
}

/* The MPI paths take CPU tensors (device shards are staged before them). */
static int check_local(const char *what, oar_tensor *x, oar_mesh *m, int d) {
    int st = check_mesh(what, x, m, d);
    if (st) return st;
    if (x->storage && x->storage->device != oari_device_cpu())
        return oari_error(OAR_ERR_UNSUPPORTED, "%s: internal: the MPI path got a tensor on %s "
                          "(device shards are staged first)", what, x->storage->device->name);
    return 0;
}

static int mpi_fail(const char *what, int rc) {
    char msg[512];
    oari_mpi->error_string(rc, msg, sizeof msg);
    return oari_error(OAR_ERR_STATE, "%s: MPI error: %s", what, msg);
}

/* ---- waiting with a timeout ------------------------------------------------
 * Collectives are started non-blocking and waited for with a deadline, so a
 * peer that died or never arrives ends in an error instead of a hang. The
 * buffers of a collective given up on stay alive (MPI may still write
 * them) until oar_dist_finalize. */

static int64_t bytes_moved; /* payload handed to collectives by this rank */

int64_t oar_dist_bytes_moved(void) { return __atomic_load_n(&bytes_moved, __ATOMIC_RELAXED); }
static void count(int64_t n) { __atomic_add_fetch(&bytes_moved, n, __ATOMIC_RELAXED); }

static double timeout_s = -1; /* < 0: not read from OAR_DIST_TIMEOUT yet */
static oar_tensor *abandoned[64];
static int n_abandoned;
/* Requests of moves between meshes given up on (mesh collectives keep
 * theirs in the mesh), and whether any given-up request never completed
 * when drained: then a peer is dead or stopped, and MPI_Finalize would wait
 * for it forever. */
static oari_mpi_req lost_moves[256];
static int n_lost_moves;
static bool peers_lost;
/* A timed-out rank found peers that did not answer (missing_peers): what
 * it gave up on is then given only a moment more at oar_dist_finalize. */
static bool peers_silent;

void oar_dist_set_timeout(double seconds) { timeout_s = seconds > 0 ? seconds : 0; }

double oar_dist_timeout(void) {
    if (timeout_s < 0) {
        const char *e = getenv("OAR_DIST_TIMEOUT");
        double v = e ? atof(e) : 300.0;
        timeout_s = v > 0 ? v : 0;
    }
    return timeout_s;
}

void oari_dist_release_abandoned(void) {
    for (int i = 0; i < n_abandoned; i++) oar_tensor_release(abandoned[i]);
    n_abandoned = 0;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The seconds a timed-out rank spends finding its missing peers, and that
 * oar_dist_finalize gives collectives given up on to complete: a few, so
 * that a survivor leaves within OAR_DIST_TIMEOUT plus a few seconds. */
static double grace_s(double limit) { return limit > 0 && limit < 2 ? limit : 2; }

/* The world rank at coordinate c along mesh dim d, the other coordinates
 * this rank's. */
static int world_rank_at(const oar_mesh *m, int d, int c) {
    int64_t idx = 0;
    for (int k = 0; k < m->ndim; k++) idx = idx * m->shape[k] + (k == d ? c : m->coord[k]);
    return m->ranks[idx];
}

/* After a timeout on mesh dim d: which peers are gone? Every rank that
 * times out sends each peer of the dim a beacon (its world rank) and
 * collects theirs for grace_s: the ranks of the same call give up at about
 * the same time and answer; a dead or stopped rank, or one that never made
 * the call, does not. Writes "world ranks 1, 2" (those that did not
 * answer) into buf, or "" if all did. Point-to-point on the dim's
 * communicator, which collectives (another context) never see; receives
 * are posted only for beacons already there (iprobe), so no receive is
 * left pending into a buffer that goes away. */
static void missing_peers(oar_mesh *m, int d, char *buf, size_t size) {
    enum { TAG = 0x6f62 };
    static int beacon = -1; /* the payload outlives the sends */
    buf[0] = 0;
    int n = (int)m->shape[d], me = m->coord[d];
    if (n < 2 || n > 4096 || !m->comm[d]) return;
    beacon = oar_dist_rank();
    char seen[4096] = {0};
    oari_mpi_req sends[64] = {0}; /* the first 64 peers' sends are tested; the rest are left to MPI */
    for (int c = 0; c < n; c++) {
        oari_mpi_req r = NULL;
        if (c == me || oari_mpi->isend(&beacon, 1, OARI_MPI_I32, c, TAG, m->comm[d], &r)) continue;
        if (c < 64) sends[c] = r;
    }
    seen[me] = 1;
    int left = n - 1;
    double start = now_s(), limit = grace_s(oar_dist_timeout());
    while (left > 0 && now_s() - start < limit) {
        for (int c = 0; c < n; c++) {
            int flag = 0, done = 0, got = -1;
            if (c < 64 && sends[c]) oari_mpi->test(&sends[c], &done);
            if (seen[c] || oari_mpi->iprobe(c, TAG, m->comm[d], &flag) || !flag) continue;
            oari_mpi_req r = NULL;
            if (oari_mpi->irecv(&got, 1, OARI_MPI_I32, c, TAG, m->comm[d], &r)) continue;
            while (r && !oari_mpi->test(&r, &done) && !done) {} /* probed: already here */
            seen[c] = 1;
            left--;
        }
        nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
    }
    if (left > 0) peers_silent = true;
    size_t len = 0;
    for (int c = 0; c < n && len + 16 < size; c++)
        if (!seen[c])
            len += (size_t)snprintf(buf + len, size - len, "%s%d", len ? ", " : "world rank(s) ", world_rank_at(m, d, c));
}

/* Waits for req; on timeout keeps buf_a/buf_b alive, marks the mesh broken
 * and reports, naming the ranks that are gone. rc is the status of the
 * call that started req. */
static int finish(const char *what, int rc, oari_mpi_req *req, oar_mesh *m, int d, oar_tensor *buf_a,
                  oar_tensor *buf_b) {
    if (rc) return mpi_fail(what, rc);
    double limit = oar_dist_timeout(), start = now_s();
    for (long spins = 0;; spins++) {
        int done = 0;
        if ((rc = oari_mpi->test(req, &done))) return mpi_fail(what, rc);
        if (done) return 0;
        if (spins > 20000) nanosleep(&(struct timespec){.tv_nsec = 100000}, NULL);
        if ((spins & 255) == 0 && limit > 0 && now_s() - start > limit) break;
    }
    m->broken = true;
    if (m->n_pending < (int)(sizeof m->pending / sizeof *m->pending)) m->pending[m->n_pending++] = *req;
    if (n_abandoned + 2 <= (int)(sizeof abandoned / sizeof *abandoned)) {
        if (buf_a) abandoned[n_abandoned++] = oar_tensor_retain(buf_a);
        if (buf_b) abandoned[n_abandoned++] = oar_tensor_retain(buf_b);
    }
    char gone[256];
    missing_peers(m, d, gone, sizeof gone);
    if (gone[0])
        return oari_error(OAR_ERR_STATE, "%s: rank %d waited %.0f s for the other ranks of mesh dim %s "
                          "(OAR_DIST_TIMEOUT); %s did not answer: dead, stopped, or they did not make the same "
                          "call. The mesh is unusable from now on", what, oar_dist_rank(), limit, m->names[d], gone);
    return oari_error(OAR_ERR_STATE, "%s: rank %d waited %.0f s for the other ranks of mesh dim %s "
                      "(OAR_DIST_TIMEOUT); a peer died or did not make the same call. The mesh "
                      "is unusable from now on", what, oar_dist_rank(), limit, m->names[d]);
}

/* Gives requests given up on a few more seconds (grace_s, in all; a tenth
 * of a second once peers were found silent) to complete; true if all did. */
static bool drain(oari_mpi_req *req, int n) {
    double limit = peers_silent ? 0.1 : grace_s(oar_dist_timeout()), start = now_s();
    bool all = true;
    for (int i = 0; i < n; i++) {
        for (long spins = 0;; spins++) {
            int done = 0;
            if (oari_mpi->test(&req[i], &done)) break;
            if (done) break;
            if (spins > 20000) nanosleep(&(struct timespec){.tv_nsec = 100000}, NULL);
            if ((spins & 255) == 0 && limit > 0 && now_s() - start > limit) {
                all = false;
                break;
            }
        }
        if (!all) break;
    }
    if (!all) peers_lost = true;
    return all;
}

bool oari_mesh_drain(oar_mesh *m) {
    bool all = drain(m->pending, m->n_pending);
    m->n_pending = 0;
    return all;
}

bool oari_dist_drain_moves(void) {
    bool all = drain(lost_moves, n_lost_moves);
    n_lost_moves = 0;
    return all;
}

bool oari_dist_peers_lost(void) { return peers_lost; }

/* x with dim `dim` moved to the front, contiguous, retained by the caller's pool. */
static oar_tensor *dim_to_front(oar_tensor *x, int dim, int64_t *perm) {
    for (int i = 0, k = 1; i < x->ndim; i++) {
        if (i == dim) perm[0] = i;
        else perm[k++] = i;
    }
    return oar_contiguous(oar_permute(x, perm));
}

static oar_tensor *front_to_dim(oar_tensor *y, const int64_t *perm, int ndim) {
    int64_t inv[OAR_MAX_DIMS];
    for (int i = 0; i < ndim; i++) inv[perm[i]] = i;
    return oar_contiguous(oar_permute(y, inv));
}

static oar_tensor *staged_back(oar_tensor *r, oar_device *dev);

/* f16/bf16 are reduced in f32 (MPI has no half types); the caller casts back. */
static oar_tensor *widen(oar_tensor *x) { return is_half(x->dtype) ? oar_cast(x, OAR_F32) : x; }

static int all_reduce_start_host(oar_tensor *x, oar_reduce_op op, oar_mesh *m, int d, oari_pending *p) {
    if (check_local("all_reduce", x, m, d)) return OAR_ERR_INVALID;
    oar_pool *pool = oar_pool_push();
    oar_tensor *w = widen(x);
    oar_tensor *out = w ? oar_clone(w) : NULL;
    int mop = out ? mpi_op("all_reduce", op, out->dtype) : -1;
    if (mop < 0) out = NULL;
    if (out && out->numel > INT_MAX) {
        oari_error(OAR_ERR_UNSUPPORTED, "all_reduce: %lld elements exceed one MPI call", (long long)out->numel);
        out = NULL;
    }
    int st = out ? 0 : OAR_ERR_INVALID;
    if (!st) {
        count(out->numel * (int64_t)oar_dtype_size(out->dtype));
        oari_dist_count_call(OARI_COLL_ALL_REDUCE);
        int rc = oari_mpi->iallreduce_inplace(oar_tensor_data(out), (int)out->numel, mpi_type(out->dtype),
                                              (oari_mpi_op)mop, m->comm[d], &p->req);
        if (rc) st = mpi_fail("all_reduce", rc);
    }
    if (!st) {
        p->buf = oar_tensor_retain(out);
        p->mesh = m;
        p->d = d;
        p->op = op;
        p->dtype = x->dtype;
    }
    oar_pool_pop(pool);
    return st;
}

void oari_all_reduce_poke(oari_pending *p) {
    int done = 0;
    if (p->buf && !p->done && !oari_mpi->test(&p->req, &done) && done) p->done = true;
}

oar_tensor *oari_all_reduce_wait(oari_pending *p) {
    oar_tensor *out = p->buf;
    if (!out) return oari_error(OAR_ERR_STATE, "all_reduce: nothing in flight"), NULL;
    p->buf = NULL;
    oar_pool *pool = oar_pool_push();
    oari_pool_adopt(out);
    if (!p->done && finish("all_reduce", 0, &p->req, p->mesh, p->d, out, NULL)) out = NULL;
    if (out && p->op == OAR_REDUCE_AVG) out = oar_div_scalar(out, (double)p->mesh->shape[p->d]);
    if (out && out->dtype != p->dtype) out = oar_cast(out, p->dtype);
    if (out && p->stage_dev) out = staged_back(out, p->stage_dev); /* devices: back from the host */
    return oari_pop_owned(pool, out);
}

oar_tensor *oari_all_reduce(oar_tensor *x, oar_reduce_op op, oar_mesh *m, int d) {
    oari_pending p;
    return oari_all_reduce_start(x, op, m, d, &p) ? NULL : oari_all_reduce_wait(&p);
}

/* Gathers each rank's int64 v along mesh dim d into all[] (m->shape[d]
 * entries). Buffers are tensors, so a given-up call can keep them. */
static int gather_i64(int64_t v, int64_t *all, oar_mesh *m, int d) {
    oar_pool *pool = oar_pool_push();
    oar_tensor *mine = oar_tensor_from_data(&v, OAR_I64, 0, NULL);
    oar_tensor *every = oar_zeros(OAR_I64, 1, (int64_t[]){m->shape[d]});
    int st = mine && every ? 0 : oari_fail_status();
    if (!st) {
        oari_mpi_req req;
        int rc = oari_mpi->iallgather(oar_tensor_data(mine), oar_tensor_data(every), 1, OARI_MPI_I64, m->comm[d],
                                      &req);
        st = finish("all_gather", rc, &req, m, d, mine, every);
    }
    if (!st) memcpy(all, oar_tensor_data(every), sizeof(int64_t) * (size_t)m->shape[d]);
    oar_pool_pop(pool);
    return st;
}

int oari_sum_i64(int64_t *v, oar_mesh *m, int d) {
    if (m->broken) return oari_error(OAR_ERR_STATE, "dtensor: the mesh is unusable after a timed-out collective");
    oar_pool *pool = oar_pool_push();
    oar_tensor *t = oar_tensor_from_data(v, OAR_I64, 0, NULL);
    int st = t ? 0 : oari_fail_status();
    if (!st) {
        oari_mpi_req req;
        int rc = oari_mpi->iallreduce_inplace(oar_tensor_data(t), 1, OARI_MPI_I64, OARI_MPI_SUM, m->comm[d], &req);
        st = finish("dtensor", rc, &req, m, d, t, NULL);
    }
    if (!st) *v = *(int64_t *)oar_tensor_data(t);
    oar_pool_pop(pool);
    return st;
}

static oar_tensor *all_gather_host(oar_tensor *x, int dim, oar_mesh *m, int d) {
    if (check_local("all_gather", x, m, d)) return NULL;
    if (dim < 0 || dim >= x->ndim)
        return oari_error(OAR_ERR_INVALID, "all_gather: dim %d of a %d-d tensor", dim, x->ndim), NULL;
    int n = (int)m->shape[d];
    int64_t sizes[64];
    if (n > 64) return oari_error(OAR_ERR_UNSUPPORTED, "all_gather: mesh dim of %d ranks (at most 64)", n), NULL;
    oar_pool *pool = oar_pool_push();
    int64_t perm[OAR_MAX_DIMS];
    oar_tensor *f = dim_to_front(x, dim, perm), *out = NULL;
    if (f && !gather_i64(f->shape[0], sizes, m, d)) {
        int64_t shape[OAR_MAX_DIMS], total = 0, inner = 1;
        for (int i = 1; i < f->ndim; i++) inner *= f->shape[i];
        for (int c = 0; c < n; c++) total += sizes[c];
        memcpy(shape, f->shape, sizeof(int64_t) * (size_t)f->ndim);
        shape[0] = total;
        int64_t es = (int64_t)oar_dtype_size(x->dtype);
        int counts[64], displs[64];
        bool fits = total * inner * es <= INT_MAX;
        for (int c = 0, off = 0; c < n && fits; c++) {
            counts[c] = (int)(sizes[c] * inner * es);
            displs[c] = off;
            off += counts[c];
        }
        oar_tensor *y = fits ? oari_pool_adopt(oari_tensor_empty(NULL, x->dtype, f->ndim, shape)) : NULL;
        if (!fits) oari_error(OAR_ERR_UNSUPPORTED, "all_gather: result exceeds one MPI call (2 GiB)");
        if (y) {
            oari_mpi_req req;
            count(f->numel * es);
            oari_dist_count_call(OARI_COLL_ALL_GATHER);
            int rc = oari_mpi->iallgatherv(oar_tensor_data(f), (int)(f->numel * es), oar_tensor_data(y), counts,
                                           displs, OARI_MPI_BYTE, m->comm[d], &req);
            if (!finish("all_gather", rc, &req, m, d, f, y)) out = front_to_dim(y, perm, x->ndim);
        }
    }
    return oari_pop_owned(pool, out);
}

static oar_tensor *reduce_scatter_host(oar_tensor *x, int dim, oar_reduce_op op, oar_mesh *m, int d) {
    if (check_local("reduce_scatter", x, m, d)) return NULL;
    if (dim < 0 || dim >= x->ndim)
        return oari_error(OAR_ERR_INVALID, "reduce_scatter: dim %d of a %d-d tensor", dim, x->ndim), NULL;
    int n = (int)m->shape[d];
    if (n > 64) return oari_error(OAR_ERR_UNSUPPORTED, "reduce_scatter: mesh dim of %d ranks (at most 64)", n), NULL;
    oar_pool *pool = oar_pool_push();
    int64_t perm[OAR_MAX_DIMS];
    oar_tensor *w = widen(x);
    oar_tensor *f = w ? dim_to_front(w, dim, perm) : NULL, *out = NULL;
    int mop = f ? mpi_op("reduce_scatter", op, f->dtype) : -1;
    if (mop >= 0) {
        int64_t inner = 1, start, len, shape[OAR_MAX_DIMS];
        for (int i = 1; i < f->ndim; i++) inner *= f->shape[i];
        int counts[64];
        bool fits = f->numel <= INT_MAX;
        for (int c = 0; c < n; c++) {
            oari_chunk(f->shape[0], n, c, &start, &len);
            counts[c] = (int)(len * inner);
        }
        oari_chunk(f->shape[0], n, m->coord[d], &start, &len);
        memcpy(shape, f->shape, sizeof(int64_t) * (size_t)f->ndim);
        shape[0] = len;
        oar_tensor *y = fits ? oari_pool_adopt(oari_tensor_empty(NULL, f->dtype, f->ndim, shape)) : NULL;
        if (!fits) oari_error(OAR_ERR_UNSUPPORTED, "reduce_scatter: input exceeds one MPI call");
        if (y) {
            oari_mpi_req req;
            count(f->numel * (int64_t)oar_dtype_size(f->dtype));
            oari_dist_count_call(OARI_COLL_REDUCE_SCATTER);
            int rc = oari_mpi->ireduce_scatter(oar_tensor_data(f), oar_tensor_data(y), counts, mpi_type(f->dtype),
                                               (oari_mpi_op)mop, m->comm[d], &req);
            if (!finish("reduce_scatter", rc, &req, m, d, f, y)) out = front_to_dim(y, perm, x->ndim);
        }
        if (out && op == OAR_REDUCE_AVG) out = oar_div_scalar(out, (double)n);
        if (out && out->dtype != x->dtype) out = oar_cast(out, x->dtype);
    }
    return oari_pop_owned(pool, out);
}

/* Per-kind call counts (tests check which collective a reshard used). */
static int64_t coll_calls[OARI_COLL_N];
int64_t oari_dist_calls(oari_coll kind) {
    return (unsigned)kind < OARI_COLL_N ? __atomic_load_n(&coll_calls[kind], __ATOMIC_RELAXED) : 0;
}
void oari_dist_count_call(oari_coll kind) { __atomic_add_fetch(&coll_calls[kind], 1, __ATOMIC_RELAXED); }

/* True if the dims of shape before `dim` all have extent 1, so a range
 * along `dim` of a contiguous tensor is one block of memory. */
static bool outermost(const int64_t *shape, int dim) {
    for (int i = 0; i < dim; i++)
        if (shape[i] != 1) return false;
    return true;
}

static oar_tensor *all_to_all_host(oar_tensor *x, int from, int64_t n_from, int to, oar_mesh *m, int d) {
    if (check_local("all_to_all", x, m, d)) return NULL;
    if (from < 0 || from >= x->ndim || to < 0 || to >= x->ndim || from == to)
        return oari_error(OAR_ERR_INVALID, "all_to_all: dims %d -> %d of a %d-d tensor", from, to, x->ndim), NULL;
    int n = (int)m->shape[d], me = m->coord[d];
    if (n > 64) return oari_error(OAR_ERR_UNSUPPORTED, "all_to_all: mesh dim of %d ranks (at most 64)", n), NULL;
    int64_t start, len;
    oari_chunk(n_from, n, me, &start, &len);
    if (len != x->shape[from])
        return oari_error(OAR_ERR_INVALID, "all_to_all: this rank holds %lld of dim %d, its chunk of %lld is %lld",
                          (long long)x->shape[from], from, (long long)n_from, (long long)len), NULL;
    /* Blocks keep the dim order. The block for rank c is x's chunk c of
     * `to`: sent straight from x when that is one piece of memory, else
     * packed by one strided copy. The block from rank c is the result's
     * chunk c of `from`: received in place when that is one piece, else
     * received whole and copied in. This rank's own block is copied. */
    int64_t n_to = x->shape[to], my_start, my_len, inner = 1, es = (int64_t)oar_dtype_size(x->dtype);
    for (int i = 0; i < x->ndim; i++)
        if (i != from && i != to) inner *= x->shape[i];
    oari_chunk(n_to, n, me, &my_start, &my_len);
    int64_t yshape[OAR_MAX_DIMS], bshape[OAR_MAX_DIMS];
    memcpy(yshape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    yshape[from] = n_from;
    yshape[to] = my_len;
    bool send_direct = oar_tensor_is_contiguous(x) && outermost(x->shape, to);
    bool recv_direct = outermost(yshape, from);
    int scounts[64], sdispls[64], rcounts[64], rdispls[64];
    int64_t soff = 0, roff = 0;
    for (int c = 0; c < n; c++) {
        int64_t s, l, fs, fl;
        oari_chunk(n_to, n, c, &s, &l);
        oari_chunk(n_from, n, c, &fs, &fl);
        int64_t sb = c == me ? 0 : len * l * inner * es, rb = c == me ? 0 : fl * my_len * inner * es;
        int64_t sd = send_direct ? s * (x->numel / (n_to ? n_to : 1)) * es : soff;
        int64_t rd = recv_direct ? fs * my_len * inner * es : roff;
        if (sd + sb > INT_MAX || rd + rb > INT_MAX)
            return oari_error(OAR_ERR_UNSUPPORTED, "all_to_all: data exceeds one MPI call (2 GiB)"), NULL;
        scounts[c] = (int)sb, sdispls[c] = (int)sd, soff += sb;
        rcounts[c] = (int)rb, rdispls[c] = (int)rd, roff += rb;
    }
    oar_pool *pool = oar_pool_push();
    oari_no_grad_push();
    oar_tensor *y = oari_pool_adopt(oari_tensor_empty(NULL, x->dtype, x->ndim, yshape)), *out = NULL;
    oar_tensor *sbuf = send_direct ? x : oari_pool_adopt(oari_tensor_empty(NULL, x->dtype, 1, (int64_t[]){soff / es}));
    oar_tensor *rbuf = recv_direct ? y : oari_pool_adopt(oari_tensor_empty(NULL, x->dtype, 1, (int64_t[]){roff / es}));
    bool ok = y && sbuf && rbuf;
    for (int c = 0; c < n && ok; c++) { /* pack, and this rank's own block */
        if (c != me && send_direct) continue;
        int64_t s, l;
        oari_chunk(n_to, n, c, &s, &l);
        oar_tensor *src = oar_slice(x, to, s, s + l, 1), *dst;
        if (c == me) {
            dst = oar_slice(y, from, start, start + len, 1);
        } else {
            memcpy(bshape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
            bshape[to] = l;
            dst = oar_reshape(oar_slice(sbuf, 0, sdispls[c] / es, (sdispls[c] + scounts[c]) / es, 1), x->ndim, bshape);
        }
        ok = src && dst && (!oar_tensor_numel(src) || !oar_copy_(dst, src));
    }
    if (ok) {
        oari_mpi_req req;
        count(x->numel * es);
        oari_dist_count_call(OARI_COLL_ALL_TO_ALL);
        int rc = oari_mpi->ialltoallv(oar_tensor_numel(sbuf) ? oar_tensor_data(sbuf) : NULL, scounts, sdispls,
                                      oar_tensor_numel(rbuf) ? oar_tensor_data(rbuf) : NULL, rcounts, rdispls,
                                      OARI_MPI_BYTE, m->comm[d], &req);
        ok = !finish("all_to_all", rc, &req, m, d, sbuf, rbuf);
    }
    for (int c = 0; c < n && ok && !recv_direct; c++) { /* unpack */
        if (c == me || !rcounts[c]) continue;
        int64_t fs, fl;
        oari_chunk(n_from, n, c, &fs, &fl);
        memcpy(bshape, yshape, sizeof(int64_t) * (size_t)x->ndim);
        bshape[from] = fl;
        oar_tensor *src = oar_reshape(oar_slice(rbuf, 0, rdispls[c] / es, (rdispls[c] + rcounts[c]) / es, 1),
                                      x->ndim, bshape);
        oar_tensor *dst = oar_slice(y, from, fs, fs + fl, 1);
        ok = src && dst && !oar_copy_(dst, src);
    }
    oari_no_grad_pop();
    if (ok) out = y;
    return oari_pop_owned(pool, out);
}

/* ---- point-to-point exchange (moves between meshes) --------------------- */

int oari_exchange(int n, const int *peer, oar_tensor *const *buf, const bool *is_send) {
    extern oari_mpi_comm oari_p2p_comm;
    if (!oari_p2p_comm)
        return oari_error(OAR_ERR_STATE, "oar_reshard: moving between meshes needs oar_dist_init");
    if (n > 128) return oari_error(OAR_ERR_UNSUPPORTED, "oar_reshard: %d messages in one move (at most 128)", n);
    oari_mpi_req req[128];
    int started = 0, rc = 0;
    int64_t es_sent = 0;
    /* receives first, then sends: nothing waits on a peer's order */
    for (int pass = 0; pass < 2 && !rc; pass++)
        for (int i = 0; i < n && !rc; i++) {
            if (is_send[i] != (pass == 1)) continue;
            int64_t bytes = buf[i]->numel * (int64_t)oar_dtype_size(buf[i]->dtype);
            if (bytes > INT_MAX) return oari_error(OAR_ERR_UNSUPPORTED, "oar_reshard: a message exceeds 2 GiB");
            void *p = bytes ? oar_tensor_data(buf[i]) : NULL;
            if (is_send[i]) {
                es_sent += bytes;
                rc = oari_mpi->isend(p, (int)bytes, OARI_MPI_BYTE, peer[i], 0x6f61, oari_p2p_comm, &req[started++]);
            } else {
                rc = oari_mpi->irecv(p, (int)bytes, OARI_MPI_BYTE, peer[i], 0x6f61, oari_p2p_comm, &req[started++]);
            }
        }
    if (rc) { /* the requests already posted may still touch their buffers */
        for (int i = 0; i < n && n_abandoned < (int)(sizeof abandoned / sizeof *abandoned); i++)
            abandoned[n_abandoned++] = oar_tensor_retain(buf[i]);
        return mpi_fail("oar_reshard", rc);
    }
    count(es_sent);
    oari_dist_count_call(OARI_COLL_SEND_RECV);
    double limit = oar_dist_timeout(), start = now_s();
    for (long spins = 0;; spins++) {
        int done = 0;
        if ((rc = oari_mpi->testall(started, req, &done)))
            return mpi_fail("oar_reshard", rc);
        if (done) return 0;
        if (spins > 20000) nanosleep(&(struct timespec){.tv_nsec = 100000}, NULL);
        if ((spins & 255) == 0 && limit > 0 && now_s() - start > limit) break;
    }
    /* MPI may still write the buffers: keep them until oar_dist_finalize,
     * and the requests, which oar_dist_finalize drains */
    for (int i = 0; i < n && n_abandoned < (int)(sizeof abandoned / sizeof *abandoned); i++)
        abandoned[n_abandoned++] = oar_tensor_retain(buf[i]);
    for (int i = 0; i < started; i++) {
        if (!req[i]) continue; /* completed */
        if (n_lost_moves < (int)(sizeof lost_moves / sizeof *lost_moves)) lost_moves[n_lost_moves++] = req[i];
        else peers_lost = true; /* cannot be drained: assume the worst */
    }
    return oari_error(OAR_ERR_STATE, "oar_reshard: rank %d waited %.0f s for the ranks of a move between "
                      "meshes (OAR_DIST_TIMEOUT); a peer died or did not make the same call",
                      oar_dist_rank(), limit);
}

/* ---- local tensors on devices ---------------------------------------------
 * A shard on a device other than the CPU goes through the device's
 * collective members (include/oar/device.h) when every rank of the mesh
 * dim has them: one device communicator per mesh dim, made on first use
 * by all ranks of the dim together. Otherwise it is staged: copied to host
 * memory, sent through MPI as a CPU tensor is, and the result copied back
 * to the device. Copies run outside autograd: dist_reshard records the
 * whole move. */

static oar_device *device_of(const oar_tensor *x) {
    return x && x->storage ? x->storage->device : oari_device_cpu();
}

/* dev has communicators and the members m's communicator serves: send and
 * recv for the group of a move between meshes, all_reduce for a mesh dim
 * (the other collectives are checked where they are called). */
static bool has_collectives(const oar_mesh *m, const oar_device *dev) {
    const oar_device_iface *f = dev->iface;
    bool members = m->move_group ? f->send && f->recv : f->all_reduce != NULL;
    return dev != oari_device_cpu() && f->comm_unique_id && f->comm_create && f->comm_destroy && members;
}

/* A copy of x (on a device) in host memory, owned; NULL with the error set. */
static oar_tensor *staged(oar_tensor *x) {
    oar_pool *pool = oar_pool_push();
    oari_no_grad_push();
    oar_tensor *h = oar_tensor_to(x, oari_device_cpu());
    oari_no_grad_pop();
    return oari_pop_owned(pool, h);
}

/* r (a host result, in the caller's pool) copied to dev, in the caller's pool. */
static oar_tensor *staged_back(oar_tensor *r, oar_device *dev) {
    oari_no_grad_push();
    oar_tensor *t = oar_tensor_to(r, dev);
    oari_no_grad_pop();
    return t;
}

/* The device communicator of mesh dim d on dev, or NULL when the shards
 * are staged. The first call on a dim is collective over it: the ranks
 * agree that all have collective members, the dim's first rank asks its
 * device for a communicator id, MPI sends it to the others, and each makes
 * its communicator (all ranks must succeed, else the dim is staged). */
static void *device_comm(oar_mesh *m, int d, oar_device *dev) {
    if (m->dev_state[d] > 0) return m->dev_of[d] == dev ? m->dev_comm[d] : NULL;
    if (m->dev_state[d] < 0) return NULL;
    m->dev_state[d] = -1;
    int64_t n = m->shape[d], all = has_collectives(m, dev);
    if (oari_sum_i64(&all, m, d) || all != n) return NULL;
    /* the id, with its length in front (-1: the first rank could not make one) */
    oar_pool *pool = oar_pool_push();
    oar_tensor *buf = oari_pool_adopt(oari_tensor_empty(NULL, OAR_U8, 1, (int64_t[]){8 + OAR_COMM_ID_BYTES}));
    void *c = NULL;
    int st = buf ? 0 : oari_fail_status();
    if (!st) {
        unsigned char *b = buf->storage->data;
        memset(b, 0, 8 + OAR_COMM_ID_BYTES);
        int64_t len = -1;
        if (m->coord[d] == 0) {
            size_t got = 0;
            oari_device_reported = false;
            if (!dev->iface->comm_unique_id(dev->ctx, dev->index, b + 8, &got) && got <= OAR_COMM_ID_BYTES)
                len = (int64_t)got;
        }
        memcpy(b, &len, 8);
        oari_mpi_req req;
        int rc = oari_mpi->ibcast(b, 8 + OAR_COMM_ID_BYTES, OARI_MPI_BYTE, 0, m->comm[d], &req);
        st = finish("dist: device communicator", rc, &req, m, d, buf, NULL);
        if (!st) memcpy(&len, b, 8);
        if (!st && len >= 0) {
            oari_device_reported = false;
            c = dev->iface->comm_create(dev->ctx, dev->index, (int)n, m->coord[d], b + 8, (size_t)len);
        }
        int64_t ok = c != NULL;
        if (!st && len >= 0 && (st = oari_sum_i64(&ok, m, d)) == 0 && ok != n && c) {
            dev->iface->comm_destroy(dev->ctx, dev->index, c);
            c = NULL;
        }
    }
    oar_pool_pop(pool);
    if (!c) {
        if (!st) oari_log(OAR_LOG_WARN, dev->name, "no device communicator for mesh dim %s; "
                          "collectives go through host memory and MPI", m->names[d]);
        return NULL;
    }
    m->dev_state[d] = 1;
    m->dev_of[d] = dev;
    m->dev_comm[d] = c;
    return c;
}

void oari_mesh_free_device_comms(oar_mesh *m) {
    for (int d = 0; d < m->ndim; d++) {
        oar_device *dev = m->dev_of[d];
        if (m->dev_state[d] > 0) dev->iface->comm_destroy(dev->ctx, dev->index, m->dev_comm[d]);
        m->dev_state[d] = 0;
        m->dev_comm[d] = NULL;
    }
}

/* Reports a failed collective member (unless the plugin did). */
static int member_failed(const char *what, oar_device *dev, int rc) {
    if (!oari_device_reported)
        oari_error(OAR_ERR_IO, "%s: %s's %s member failed (%d)", what, dev->name, what, rc);
    return rc;
}

/* all_reduce through dev's member, in place on a fresh copy of x: an owned
 * result on dev, or NULL with the error set. */
static oar_tensor *device_all_reduce(oar_tensor *x, oar_reduce_op op, oar_mesh *m, int d, oar_device *dev,
                                     void *comm) {
    oar_pool *pool = oar_pool_push();
    oari_no_grad_push();
    oar_tensor *y = oar_clone(x); /* its own buffer, from offset 0 */
    if (y && y->numel) {
        count(y->numel * (int64_t)oar_dtype_size(y->dtype));
        oari_dist_count_call(OARI_COLL_ALL_REDUCE);
        oari_device_reported = false;
        void *b = y->storage->data;
        int rc = dev->iface->all_reduce(dev->ctx, dev->index, comm, b, b, (size_t)y->numel, (int32_t)y->dtype,
                                        op == OAR_REDUCE_AVG ? OAR_REDUCE_SUM : op, NULL);
        if (!rc) rc = oar_device_synchronize(dev);
        if (rc) {
            member_failed("all_reduce", dev, rc);
            y = NULL;
        }
    }
    if (y && op == OAR_REDUCE_AVG) y = oar_div_scalar(y, (double)m->shape[d]);
    oari_no_grad_pop();
    return oari_pop_owned(pool, y);
}

int oari_all_reduce_start(oar_tensor *x, oar_reduce_op op, oar_mesh *m, int d, oari_pending *p) {
    memset(p, 0, sizeof *p);
    oar_device *dev = device_of(x);
    if (dev == oari_device_cpu()) return all_reduce_start_host(x, op, m, d, p);
    if (check_mesh("all_reduce", x, m, d)) return OAR_ERR_INVALID;
    void *comm = device_comm(m, d, dev);
    if (comm) { /* done when it returns: wait only hands the result over */
        oar_tensor *y = device_all_reduce(x, op, m, d, dev, comm);
        if (!y) return OAR_ERR_INVALID;
        *p = (oari_pending){.buf = y, .mesh = m, .d = d, .op = OAR_REDUCE_SUM, .dtype = y->dtype, .done = true};
        return 0;
    }
    oar_tensor *h = staged(x);
    int st = h ? all_reduce_start_host(h, op, m, d, p) : oari_fail_status();
    oar_tensor_release(h);
    if (!st) p->stage_dev = dev;
    return st;
}

/* all_gather / reduce_scatter through dev's member on x with tensor dim
 * `dim` moved to the front (in a buffer of its own): this rank's part is
 * f's block, the result's first dim is n times (gather) or 1/n of
 * (scatter, avg divided after) f's. Returns an owned result on dev, or
 * NULL with the error set. */
static oar_tensor *device_gather_scatter(bool gather, oar_tensor *x, int dim, oar_reduce_op op, oar_mesh *m,
                                         int d, oar_device *dev, void *comm) {
    int64_t n = m->shape[d], perm[OAR_MAX_DIMS], shape[OAR_MAX_DIMS];
    oar_pool *pool = oar_pool_push();
    oari_no_grad_push();
    oar_tensor *f = dim_to_front(x, dim, perm);
    if (f && f->offset) f = oar_clone(f); /* the member reads from the buffer's start */
    oar_tensor *y = NULL, *out = NULL;
    if (f) {
        memcpy(shape, f->shape, sizeof(int64_t) * (size_t)f->ndim);
        shape[0] = gather ? shape[0] * n : shape[0] / n;
        y = oari_pool_adopt(oari_tensor_empty(dev, f->dtype, f->ndim, shape));
    }
    if (y) {
        const char *what = gather ? "all_gather" : "reduce_scatter";
        count(f->numel * (int64_t)oar_dtype_size(f->dtype));
        oari_dist_count_call(gather ? OARI_COLL_ALL_GATHER : OARI_COLL_REDUCE_SCATTER);
        oari_device_reported = false;
        const oar_device_iface *fi = dev->iface;
        int rc = !y->numel ? 0
                 : gather ? fi->all_gather(dev->ctx, dev->index, comm, f->storage->data, y->storage->data,
                                           (size_t)f->numel, (int32_t)f->dtype, NULL)
                          : fi->reduce_scatter(dev->ctx, dev->index, comm, f->storage->data, y->storage->data,
                                               (size_t)y->numel, (int32_t)f->dtype,
                                               op == OAR_REDUCE_AVG ? OAR_REDUCE_SUM : op, NULL);
        if (!rc) rc = oar_device_synchronize(dev);
        if (rc) member_failed(what, dev, rc);
        else out = front_to_dim(y, perm, x->ndim);
        if (out && !gather && op == OAR_REDUCE_AVG) out = oar_div_scalar(out, (double)n);
    }
    oari_no_grad_pop();
    return oari_pop_owned(pool, out);
}

/* The device communicator for a gather or scatter of x along `dim` when
 * dev has the member and the parts are even (n equal blocks), else NULL
 * (staged; the host path reports bad arguments). Collective over mesh dim
 * d, as the calls that use it. */
static void *even_comm(bool gather, oar_tensor *x, int dim, oar_mesh *m, int d, oar_device *dev) {
    if (check_mesh(gather ? "all_gather" : "reduce_scatter", x, m, d) || dim < 0 || dim >= x->ndim)
        return NULL;
    if (gather ? !dev->iface->all_gather : !dev->iface->reduce_scatter) return NULL;
    void *comm = device_comm(m, d, dev);
    if (!comm) return NULL;
    int64_t n = m->shape[d], len = x->shape[dim];
    if (!gather) return len % n == 0 ? comm : NULL;
    int64_t sizes[64];
    if (n > 64 || gather_i64(len, sizes, m, d)) return NULL;
    for (int64_t c = 0; c < n; c++)
        if (sizes[c] != len) return NULL;
    return comm;
}

oar_tensor *oari_all_gather(oar_tensor *x, int dim, oar_mesh *m, int d) {
    oar_device *dev = device_of(x);
    if (dev == oari_device_cpu()) return all_gather_host(x, dim, m, d);
    void *comm = even_comm(true, x, dim, m, d, dev);
    if (comm) return device_gather_scatter(true, x, dim, OAR_REDUCE_SUM, m, d, dev, comm);
    oar_pool *pool = oar_pool_push(); /* staged */
    oar_tensor *h = oari_pool_adopt(staged(x));
    oar_tensor *r = h ? oari_pool_adopt(all_gather_host(h, dim, m, d)) : NULL;
    return oari_pop_owned(pool, r ? staged_back(r, dev) : NULL);
}

oar_tensor *oari_reduce_scatter(oar_tensor *x, int dim, oar_reduce_op op, oar_mesh *m, int d) {
    oar_device *dev = device_of(x);
    if (dev == oari_device_cpu()) return reduce_scatter_host(x, dim, op, m, d);
    void *comm = even_comm(false, x, dim, m, d, dev);
    if (comm) return device_gather_scatter(false, x, dim, op, m, d, dev, comm);
    oar_pool *pool = oar_pool_push(); /* staged */
    oar_tensor *h = oari_pool_adopt(staged(x));
    oar_tensor *r = h ? oari_pool_adopt(reduce_scatter_host(h, dim, op, m, d)) : NULL;
    return oari_pop_owned(pool, r ? staged_back(r, dev) : NULL);
}

/* All-to-all stages device shards through the host. */
oar_tensor *oari_all_to_all(oar_tensor *x, int from, int64_t n_from, int to, oar_mesh *m, int d) {
    oar_device *dev = device_of(x);
    if (dev == oari_device_cpu()) return all_to_all_host(x, from, n_from, to, m, d);
    oar_pool *pool = oar_pool_push();
    oar_tensor *h = oari_pool_adopt(staged(x));
    oar_tensor *r = h ? oari_pool_adopt(all_to_all_host(h, from, n_from, to, m, d)) : NULL;
    return oari_pop_owned(pool, r ? staged_back(r, dev) : NULL);
}

/* ---- broadcast ------------------------------------------------------------
 * In place on a plain local tensor, from coordinate `root` of mesh dim d:
 * MPI_Ibcast of its bytes on the CPU, the device's broadcast member on a
 * device that has it (through the dim's device communicator), else staged
 * through host memory. */

static int check_broadcast(const char *what, oar_tensor *t, oar_mesh *m, int d, int root) {
    if (!t && oari_error_pending()) return oari_last_status(); /* t came from a failed call: keep its message */
    if (!t || !m) return oari_error(OAR_ERR_INVALID, "%s: the %s is NULL", what, t ? "mesh" : "tensor");
    if (oari_dist(t))
        return oari_error(OAR_ERR_INVALID, "%s: the tensor is a dtensor; broadcast its local shard "
                          "(oar_dtensor_local) or reshard it to Replicate", what);
    if (!t->storage) return oari_error(OAR_ERR_INVALID, "%s: a traced tensor has no data to send", what);
    if (!oar_tensor_is_contiguous(t)) {
        char s[200];
        return oari_error(OAR_ERR_INVALID, "%s: the tensor %s is not contiguous; broadcast "
                          "oar_contiguous(t) and copy it back", what, oari_shape_str(s, t->ndim, t->shape));
    }
    if (d < 0 || d >= m->ndim)
        return oari_error(OAR_ERR_INVALID, "%s: mesh dim %d of a %d-d mesh", what, d, m->ndim);
    if (root < 0 || root >= m->shape[d])
        return oari_error(OAR_ERR_INVALID, "%s: root %d is not a coordinate of mesh dim %s (size %lld)", what,
                          root, m->names[d], (long long)m->shape[d]);
    return check_mesh(what, t, m, d);
}

/* n bytes at data (in keep, which outlives a call given up on) from root. */
static int broadcast_mpi(void *data, int64_t n, oar_tensor *keep, int root, oar_mesh *m, int d) {
    if (n > INT_MAX)
        return oari_error(OAR_ERR_UNSUPPORTED, "oar_dist_broadcast_: %lld bytes exceed one MPI call (2 GiB)",
                          (long long)n);
    oari_mpi_req req;
    int rc = oari_mpi->ibcast(data, (int)n, OARI_MPI_BYTE, root, m->comm[d], &req);
    return finish("oar_dist_broadcast_", rc, &req, m, d, keep, NULL);
}

/* Through dev's member, in place in t's buffer, or in a copy when t does
 * not start its buffer (members address whole buffers; the root's copy
 * needs no writing back). */
static int broadcast_device(oar_tensor *t, int root, bool is_root, oar_device *dev, void *comm) {
    if (!t->numel) return 0;
    oar_pool *pool = oar_pool_push();
    oari_no_grad_push();
    oar_tensor *y = t->offset ? oar_clone(t) : t;
    int rc = y ? 0 : oari_last_status();
    if (!rc) {
        oari_device_reported = false;
        void *b = y->storage->data;
        rc = dev->iface->broadcast(dev->ctx, dev->index, comm, b, b, (size_t)y->numel, (int32_t)y->dtype, root,
                                   NULL);
        if (!rc) rc = oar_device_synchronize(dev);
        if (rc) member_failed("broadcast", dev, rc);
    }
    if (!rc && y != t && !is_root) rc = oar_copy_(t, y);
    oari_no_grad_pop();
    oar_pool_pop(pool);
    return rc;
}

/* Through host memory: a copy of t broadcast by MPI, written back to t
 * (but on the root). */
static int broadcast_staged(oar_tensor *t, int64_t n, int root, bool is_root, oar_mesh *m, int d,
                            oar_device *dev) {
    oar_tensor *h = staged(t);
    int st = h ? broadcast_mpi(oar_tensor_data(h), n, h, root, m, d) : oari_last_status();
    if (!st && !is_root) {
        size_t at = (size_t)t->offset * oar_dtype_size(t->dtype);
        st = oari_device_from_host(dev, t->storage->data, at, oar_tensor_data(h), (size_t)n);
    }
    oar_tensor_release(h);
    return st;
}

int oar_dist_broadcast_(oar_tensor *t, oar_mesh *mesh, int mesh_dim, int root) {
    int st = check_broadcast("oar_dist_broadcast_", t, mesh, mesh_dim, root);
    if (st) return st;
    oar_device *dev = device_of(t);
    int64_t n = t->numel * (int64_t)oar_dtype_size(t->dtype);
    count(n);
    oari_dist_count_call(OARI_COLL_BROADCAST);
    bool is_root = mesh->coord[mesh_dim] == root;
    void *comm = NULL;
    if (dev == oari_device_cpu()) st = broadcast_mpi(oar_tensor_data(t), n, t, root, mesh, mesh_dim);
    else if (dev->iface->broadcast && (comm = device_comm(mesh, mesh_dim, dev)))
        st = broadcast_device(t, root, is_root, dev, comm);
    else st = broadcast_staged(t, n, root, is_root, mesh, mesh_dim, dev);
    if (!st && !is_root) oari_storage_bump_version(t->storage); /* autograd sees the write */
    return st;
}

/* ---- point-to-point on devices (moves between meshes) ---------------------
 * A device's send may wait until the peer has posted the matching recv
 * (NCCL's ncclSend outside a group does), and the ABI has no group calls.
 * So every rank handles its messages in one global order of pairs
 * (min(rank, peer), max(rank, peer)); within a pair the lower rank sends
 * first and the higher receives first. The least pair not yet done then
 * always has both its ranks at it, so no cycle of waits can form. */

int oari_move_device_comm(oar_mesh *a, oar_mesh *b, oar_device *dev, oar_mesh **group, void **comm) {
    *group = NULL;
    *comm = NULL;
    if (dev == oari_device_cpu()) return 0;
    oar_mesh *g = oari_move_group(a, b);
    if (!g) return oari_last_status();
    *group = g;
    *comm = device_comm(g, 0, dev); /* the ranks agree there that all have send and recv */
    return g->broken ? oari_error(OAR_ERR_STATE, "oar_reshard: the ranks of the move did not agree on "
                                  "their devices (a peer died or did not make the same call)") : 0;
}

/* The place of message i in this rank's order (smaller first). */
static int64_t pair_key(int me, int peer, bool is_send, int64_t world) {
    int64_t lo = me < peer ? me : peer, hi = me < peer ? peer : me;
    bool first = (me < peer) == is_send; /* the lower rank sends first, the higher receives first */
    return (lo * world + hi) * 2 + !first;
}

/* order[] = 0..n-1 sorted by pair_key, ties (one pair and direction) in
 * list order, as the peer lists them. */
static void pair_order(int n, const int *peer, const bool *is_send, int *order) {
    int me = oar_dist_rank();
    int64_t world = oar_dist_world_size();
    for (int i = 0; i < n; i++) {
        int64_t k = pair_key(me, peer[i], is_send[i], world);
        int j = i;
        for (; j > 0 && pair_key(me, peer[order[j - 1]], is_send[order[j - 1]], world) > k; j--)
            order[j] = order[j - 1];
        order[j] = i;
    }
}

static int group_position(const oar_mesh *g, int rank) {
    for (int64_t i = 0; i < g->size; i++)
        if (g->ranks[i] == rank) return (int)i;
    return -1;
}

int oari_exchange_device(oar_mesh *group, void *comm, oar_device *dev, int n, const int *peer,
                         oar_tensor *const *buf, const bool *is_send) {
    if (n > 128) return oari_error(OAR_ERR_UNSUPPORTED, "oar_reshard: %d messages in one move (at most 128)", n);
    int order[128];
    pair_order(n, peer, is_send, order);
    const oar_device_iface *f = dev->iface;
    int64_t sent = 0;
    for (int k = 0; k < n; k++) {
        int i = order[k], to = group_position(group, peer[i]);
        oar_tensor *t = buf[i];
        if (to < 0 || t->offset || !oar_tensor_is_contiguous(t) || device_of(t) != dev)
            return oari_error(OAR_ERR_STATE, "oar_reshard: internal: a message that is not a whole buffer "
                              "on %s, or to a rank outside the move", dev->name);
        if (!t->numel) continue;
        oari_device_reported = false;
        int rc = is_send[i] ? f->send(dev->ctx, dev->index, comm, t->storage->data, (size_t)t->numel,
                                      (int32_t)t->dtype, to, NULL)
                            : f->recv(dev->ctx, dev->index, comm, t->storage->data, (size_t)t->numel,
                                      (int32_t)t->dtype, to, NULL);
        if (rc) return member_failed(is_send[i] ? "send" : "recv", dev, rc);
        if (is_send[i]) sent += t->numel * (int64_t)oar_dtype_size(t->dtype);
    }
    int rc = oar_device_synchronize(dev);
    if (rc) return member_failed("synchronize", dev, rc);
    count(sent);
    oari_dist_count_call(OARI_COLL_SEND_RECV);
    return 0;
}

/* ---- point-to-point messages of the pipeline runner -----------------------
 * src/nn/pipeline.c passes activations and gradients between neighbouring
 * stages: each message is started here (a send may be waited for long
 * after; a receive at once) on the duplicate of MPI_COMM_WORLD that moves
 * use, with a tag of its own, and waited with the deadline. A message
 * given up on keeps its buffer alive and its request for
 * oar_dist_finalize to drain, as a move's. */

int oari_p2p_start(oar_tensor *buf, int peer, bool is_send, int tag, oari_p2p *r) {
    extern oari_mpi_comm oari_p2p_comm;
    r->req = NULL;
    r->buf = NULL;
    r->peer = peer;
    if (!oari_p2p_comm) return oari_error(OAR_ERR_STATE, "oari_p2p_start: point-to-point needs oar_dist_init");
    if (!buf || buf->offset || !oar_tensor_is_contiguous(buf) || device_of(buf) != oari_device_cpu())
        return oari_error(OAR_ERR_STATE, "oari_p2p_start: internal: a message that is not a whole CPU buffer");
    if (peer < 0 || peer >= oar_dist_world_size())
        return oari_error(OAR_ERR_INVALID, "oari_p2p_start: world rank %d out of range", peer);
    int64_t bytes = buf->numel * (int64_t)oar_dtype_size(buf->dtype);
    if (bytes > INT_MAX) return oari_error(OAR_ERR_UNSUPPORTED, "point-to-point: a message exceeds 2 GiB");
    void *p = bytes ? oar_tensor_data(buf) : NULL;
    int rc = is_send ? oari_mpi->isend(p, (int)bytes, OARI_MPI_BYTE, peer, tag, oari_p2p_comm, &r->req)
                     : oari_mpi->irecv(p, (int)bytes, OARI_MPI_BYTE, peer, tag, oari_p2p_comm, &r->req);
    if (rc) return mpi_fail("point-to-point", rc);
    r->buf = oar_tensor_retain(buf);
    if (is_send) count(bytes);
    oari_dist_count_call(OARI_COLL_SEND_RECV);
    return 0;
}

void oari_p2p_abandon(int n, oari_p2p *r) {
    for (int i = 0; i < n; i++) {
        if (r[i].req) {
            int done = 0;
            if (oari_mpi->testall(1, &r[i].req, &done) || !done) {
                if (n_lost_moves < (int)(sizeof lost_moves / sizeof *lost_moves)) lost_moves[n_lost_moves++] = r[i].req;
                else peers_lost = true;
                r[i].req = NULL;
                /* MPI may still touch the buffer: keep it to oar_dist_finalize */
                if (r[i].buf && n_abandoned < (int)(sizeof abandoned / sizeof *abandoned))
                    abandoned[n_abandoned++] = r[i].buf;
                r[i].buf = NULL; /* (beyond the list's room: left alive, never freed) */
                continue;
            }
        }
        oar_tensor_release(r[i].buf);
        r[i].buf = NULL;
        r[i].req = NULL;
    }
}

int oari_p2p_wait(int n, oari_p2p *r, const char *what) {
    double limit = oar_dist_timeout(), start = now_s();
    for (long spins = 0;; spins++) {
        bool all = true;
        for (int i = 0; i < n; i++) {
            if (!r[i].req) continue;
            int done = 0, rc = oari_mpi->testall(1, &r[i].req, &done);
            if (rc) {
                oari_p2p_abandon(n, r);
                return mpi_fail(what, rc);
            }
            if (done) {
                r[i].req = NULL;
                oar_tensor_release(r[i].buf);
                r[i].buf = NULL;
            } else {
                all = false;
            }
        }
        if (all) return 0;
        if (spins > 20000) nanosleep(&(struct timespec){.tv_nsec = 100000}, NULL);
        if ((spins & 255) == 0 && limit > 0 && now_s() - start > limit) break;
    }
    char gone[128] = "";
    size_t len = 0;
    for (int i = 0; i < n && len + 16 < sizeof gone; i++) {
        if (!r[i].req) continue;
        bool seen = false;
        for (int j = 0; j < i; j++) seen |= r[j].req && r[j].peer == r[i].peer;
        if (!seen) len += (size_t)snprintf(gone + len, sizeof gone - len, "%s%d", len ? ", " : "", r[i].peer);
    }
    oari_p2p_abandon(n, r);
    return oari_error(OAR_ERR_STATE, "%s: rank %d waited %.0f s for world rank(s) %s (OAR_DIST_TIMEOUT): "
                      "dead, stopped, or not in the same step", what, oar_dist_rank(), limit, gone);
}

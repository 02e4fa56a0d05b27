/* MPI start-up and process meshes. Each mesh makes one communicator per
 * mesh dim when it is created, by the same sequence of collective calls on
 * every rank, so groups are never created in different orders. */
#include "dist.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool we_initialised;
oari_mpi_comm oari_p2p_comm; /* moves between meshes: a world of their own tags (NULL: none yet) */

bool oari_dist_ready(void) { return oari_mpi && oari_mpi->ready(); }

int oar_dist_init(int *argc, char ***argv) {
    int st = oari_mpi_load("oar_dist_init"); /* the first use of MPI in this process */
    if (st) return st;
    if (!oari_dist_ready()) {
        /* (errors then come back as codes, which oar turns into messages,
         * instead of aborting the job) */
        if (oari_mpi->init(argc, argv))
            return oari_error(OAR_ERR_STATE, "oar_dist_init: MPI_Init_thread failed");
        we_initialised = true;
    }
    /* the communicator of moves between meshes (collective over the world) */
    if (!oari_p2p_comm && oari_mpi->comm_dup(oari_mpi->world(), &oari_p2p_comm))
        return oari_error(OAR_ERR_STATE, "oar_dist_init: MPI_Comm_dup failed");
    return 0;
}

static void free_move_groups(void);

static void drain_live_meshes(void);

int oar_dist_finalize(void) {
    int st = 0;
    if (oari_dist_ready()) { /* collectives given up on: one more timeout each to complete */
        drain_live_meshes();
        oari_dist_drain_moves();
    }
    bool lost = oari_dist_peers_lost();
    free_move_groups();
    if (oari_p2p_comm && oari_dist_ready() && !lost) oari_mpi->comm_free(&oari_p2p_comm);
    oari_p2p_comm = NULL;
    if (we_initialised && oari_dist_ready()) {
        if (!lost) oari_mpi->finalize();
        else /* MPI_Finalize would wait for them forever: leave without it */
            st = oari_error(OAR_ERR_STATE, "oar_dist_finalize: collectives timed out (OAR_DIST_TIMEOUT) "
                            "and never completed: a peer is dead or stopped. MPI_Finalize would wait "
                            "for it forever, so this rank leaves MPI without it; mpirun will report "
                            "the job as failed");
    }
    if (!lost) we_initialised = false; /* (MPI stays initialised: no second init) */
    oari_dist_release_abandoned();
    return st;
}

int oar_dist_rank(void) {
    int r = 0;
    if (oari_dist_ready()) oari_mpi->comm_rank(oari_mpi->world(), &r);
    return r;
}

int oar_dist_world_size(void) {
    int n = 1;
    if (oari_dist_ready()) oari_mpi->comm_size(oari_mpi->world(), &n);
    return n;
}

/* Live meshes by id, so that op attributes (plain integers) can name one. */
#define MAX_MESHES 256
static oar_mesh *registry[MAX_MESHES];
static int registry_lock; /* a spin lock: meshes are made rarely */

static void lock(void) { while (__atomic_exchange_n(&registry_lock, 1, __ATOMIC_ACQUIRE)) {} }
static void unlock(void) { __atomic_store_n(&registry_lock, 0, __ATOMIC_RELEASE); }

static int registry_add(oar_mesh *m) {
    lock();
    int id = -1;
    for (int i = 0; i < MAX_MESHES && id < 0; i++)
        if (!registry[i]) registry[i] = m, id = i;
    unlock();
    return id;
}

/* The collectives given up on in meshes still alive (mesh_free drains
 * those of a mesh released earlier). */
static void drain_live_meshes(void) {
    for (int i = 0; i < MAX_MESHES; i++) {
        lock();
        oar_mesh *m = registry[i];
        unlock();
        if (m && m->n_pending) oari_mesh_drain(m);
    }
}

oar_mesh *oari_mesh_by_id(int64_t id) {
    lock();
    oar_mesh *m = id >= 0 && id < MAX_MESHES ? registry[id] : NULL;
    unlock();
    if (!m) oari_error(OAR_ERR_STATE, "dist: mesh %lld no longer exists", (long long)id);
    return m;
}

static void mesh_free(oar_mesh *m) {
    if (m->id >= 0) {
        lock();
        registry[m->id] = NULL;
        unlock();
    }
    /* A communicator with a collective still in flight must not be freed. */
    bool idle = !m->n_pending || (oari_dist_ready() && oari_mesh_drain(m));
    if (idle) oari_mesh_free_device_comms(m); /* devices: their communicators (comm.c) */
    for (int d = 0; d < m->ndim && idle; d++)
        if (m->comm[d] && oari_dist_ready()) oari_mpi->comm_free(&m->comm[d]);
    oari_free(m->ranks, (size_t)m->size * sizeof *m->ranks);
    oari_free(m, sizeof *m);
}

oar_mesh *oari_mesh_retain(oar_mesh *m) {
    if (m) __atomic_add_fetch(&m->refcount, 1, __ATOMIC_RELAXED);
    return m;
}

void oar_mesh_release(oar_mesh *m) {
    if (m && __atomic_sub_fetch(&m->refcount, 1, __ATOMIC_ACQ_REL) == 0) mesh_free(m);
}

/* A mesh of `size` ranks (not filled in), outside the registry, with no
 * communicators; NULL with the error set. */
static oar_mesh *mesh_new(int ndim, int64_t size) {
    oar_mesh *m = oari_calloc(1, sizeof *m);
    if (!m) return NULL;
    m->ranks = oari_malloc((size_t)size * sizeof *m->ranks);
    if (!m->ranks) return oari_free(m, sizeof *m), NULL;
    m->refcount = 1;
    m->id = -1;
    m->ndim = ndim;
    m->size = size;
    for (int d = 0; d < OAR_MESH_MAX_DIMS; d++) {
        m->comm[d] = NULL;
        m->coord[d] = -1;
    }
    return m;
}

oar_mesh *oar_mesh_create(int ndim, const int64_t *shape, const int *ranks,
                          const char *const *dim_names) {
    if (!oari_dist_ready())
        return oari_error(OAR_ERR_STATE, "oar_mesh_create: call oar_dist_init first"), NULL;
    if (ndim < 1 || ndim > OAR_MESH_MAX_DIMS || !shape)
        return oari_error(OAR_ERR_INVALID, "oar_mesh_create: ndim must be 1 to %d with a shape, got %d",
                          OAR_MESH_MAX_DIMS, ndim), NULL;
    int world = oar_dist_world_size(), me = oar_dist_rank();
    int64_t size = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 1 || shape[d] > world)
            return oari_error(OAR_ERR_INVALID, "oar_mesh_create: mesh dim %d has size %lld (world size %d)",
                              d, (long long)shape[d], world), NULL;
        size *= shape[d];
    }
    if (size > world || (!ranks && size != world))
        return oari_error(OAR_ERR_INVALID, "oar_mesh_create: a mesh of %lld ranks %s the world size %d",
                          (long long)size, ranks ? "exceeds" : "does not match", world), NULL;
    oar_mesh *m = mesh_new(ndim, size);
    if (!m) return NULL;
    int64_t mine = -1;
    for (int64_t i = 0; i < size; i++) {
        int r = ranks ? ranks[i] : (int)i;
        bool repeated = false;
        for (int64_t j = 0; j < i; j++) repeated = repeated || m->ranks[j] == r;
        if (r < 0 || r >= world || repeated) {
            oari_error(OAR_ERR_INVALID, "oar_mesh_create: rank %d at position %lld is %s", r,
                       (long long)i, repeated ? "repeated" : "out of range");
            m->ndim = 0;
            mesh_free(m);
            return NULL;
        }
        m->ranks[i] = r;
        if (r == me) mine = i;
    }
    for (int d = 0; d < ndim; d++) {
        m->shape[d] = shape[d];
        if (dim_names && dim_names[d]) snprintf(m->names[d], sizeof m->names[d], "%s", dim_names[d]);
        else snprintf(m->names[d], sizeof m->names[d], "d%d", d);
    }
    if (mine >= 0) oari_mesh_coords(m, mine, m->coord);
    /* One communicator per mesh dim: ranks whose other coordinates agree.
     * Every world rank takes part in every split, in dim order. */
    for (int d = 0; d < ndim; d++) {
        int color = -1; /* MPI_UNDEFINED: in no communicator of this dim */
        if (mine >= 0) {
            color = 0;
            for (int e = 0; e < ndim; e++)
                if (e != d) color = color * (int)shape[e] + m->coord[e];
        }
        if (oari_mpi->comm_split(oari_mpi->world(), color, mine >= 0 ? m->coord[d] : 0, &m->comm[d])) {
            oari_error(OAR_ERR_STATE, "oar_mesh_create: MPI_Comm_split failed for mesh dim %d", d);
            mesh_free(m);
            return NULL;
        }
    }
    if ((m->id = registry_add(m)) < 0) {
        oari_error(OAR_ERR_UNSUPPORTED, "oar_mesh_create: more than %d live meshes", MAX_MESHES);
        mesh_free(m);
        return NULL;
    }
    return m;
}

int oar_mesh_ndim(const oar_mesh *m) { return m ? m->ndim : (oari_null_arg(__func__, "mesh"), 0); }
const int64_t *oar_mesh_shape(const oar_mesh *m) {
    return m ? m->shape : (oari_null_arg(__func__, "mesh"), NULL);
}

/* Whether dim is a mesh dim of m; says why not. */
static bool mesh_dim_ok(const char *fn, const oar_mesh *m, int dim) {
    if (!m) return oari_null_arg(fn, "mesh"), false;
    if (dim >= 0 && dim < m->ndim) return true;
    oari_error(OAR_ERR_INVALID, "%s: mesh dim %d is out of range [0, %d)", fn, dim, m->ndim);
    return false;
}

const char *oar_mesh_dim_name(const oar_mesh *m, int dim) {
    return mesh_dim_ok(__func__, m, dim) ? m->names[dim] : NULL;
}

void oari_mesh_coords(const oar_mesh *m, int64_t pos, int *coord) {
    for (int d = m->ndim - 1; d >= 0; d--) {
        coord[d] = (int)(pos % m->shape[d]);
        pos /= m->shape[d];
    }
}

int oar_mesh_coord(const oar_mesh *m, int dim) {
    return mesh_dim_ok(__func__, m, dim) ? m->coord[dim] : -1;
}

oar_placement oar_shard(int tensor_dim) {
    return (oar_placement){.kind = OAR_PLACEMENT_SHARD, .dim = tensor_dim};
}
oar_placement oar_replicate(void) { return (oar_placement){.kind = OAR_PLACEMENT_REPLICATE}; }
oar_placement oar_partial(oar_reduce_op op) {
    return (oar_placement){.kind = OAR_PLACEMENT_PARTIAL, .reduce = op};
}

const char *oar_placements_str(const oar_mesh *m, const oar_placement *p, char *buf, size_t size) {
    static const char *const reduce[] = {"sum", "max", "min", "avg", "prod"}; /* oar_reduce_op order */
    if (!buf || !size) return buf;
    size_t len = 0;
    buf[0] = 0;
    int n = m ? m->ndim : 0;
    for (int d = 0; d < n && p && len < size; d++) {
        const char *sep = d ? ", " : "";
        int k;
        if (p[d].kind == OAR_PLACEMENT_SHARD) k = snprintf(buf + len, size - len, "%sS(%d)", sep, p[d].dim);
        else if (p[d].kind == OAR_PLACEMENT_PARTIAL)
            k = snprintf(buf + len, size - len, "%sP(%s)", sep,
                         (unsigned)p[d].reduce < 5 ? reduce[p[d].reduce] : "?");
        else k = snprintf(buf + len, size - len, "%sR", sep);
        if (k < 0) break;
        len += (size_t)k;
    }
    if (len >= size) buf[size - 1] = 0;
    return buf;
}

/* ---- the ranks of moves between meshes ------------------------------------
 * A move between meshes of shards on devices sends through a device
 * communicator over exactly the ranks of the two meshes (ranks in neither
 * take no part, so nothing may need the whole world). Each such rank set
 * gets a 1-D mesh of its own, its MPI communicator made with
 * MPI_Comm_create_group, collective over those ranks only, on the first
 * move over them; comm.c hangs the device communicator on it. */

static oar_mesh **groups;
static int n_groups, cap_groups;

static int by_rank(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

/* The group of ranks[0..n-1] (sorted), made collectively over them. */
static oar_mesh *make_group(const int *ranks, int n) {
    if (n_groups == cap_groups) {
        int cap = cap_groups ? 2 * cap_groups : 8;
        oar_mesh **g = oari_malloc((size_t)cap * sizeof *g);
        if (!g) return NULL;
        if (n_groups) memcpy(g, groups, (size_t)n_groups * sizeof *g);
        oari_free(groups, (size_t)cap_groups * sizeof *groups);
        groups = g;
        cap_groups = cap;
    }
    oar_mesh *m = mesh_new(1, n);
    if (!m) return NULL;
    memcpy(m->ranks, ranks, (size_t)n * sizeof *ranks);
    m->shape[0] = n;
    m->move_group = true;
    snprintf(m->names[0], sizeof m->names[0], "move");
    for (int i = 0, me = oar_dist_rank(); i < n; i++)
        if (ranks[i] == me) m->coord[0] = i;
    if (oari_mpi->comm_create_group(oari_mpi->world(), n, ranks, 0x6f62, &m->comm[0])) {
        oari_error(OAR_ERR_STATE, "oar_reshard: MPI_Comm_create_group failed for the %d ranks of a move", n);
        mesh_free(m);
        return NULL;
    }
    groups[n_groups++] = m;
    return m;
}

oar_mesh *oari_move_group(const oar_mesh *a, const oar_mesh *b) {
    size_t cap = (size_t)(a->size + b->size);
    int *u = oari_malloc(cap * sizeof *u), n = 0;
    if (!u) return NULL;
    memcpy(u, a->ranks, (size_t)a->size * sizeof *u);
    memcpy(u + a->size, b->ranks, (size_t)b->size * sizeof *u);
    qsort(u, cap, sizeof *u, by_rank);
    for (size_t i = 0; i < cap; i++)
        if (!n || u[n - 1] != u[i]) u[n++] = u[i];
    oar_mesh *g = NULL;
    for (int i = 0; i < n_groups && !g; i++)
        if (groups[i]->size == n && !memcmp(groups[i]->ranks, u, (size_t)n * sizeof *u)) g = groups[i];
    if (!g) g = make_group(u, n);
    oari_free(u, cap * sizeof *u);
    return g;
}

static void free_move_groups(void) {
    for (int i = 0; i < n_groups; i++) oar_mesh_release(groups[i]);
    oari_free(groups, (size_t)cap_groups * sizeof *groups);
    groups = NULL;
    n_groups = cap_groups = 0;
}

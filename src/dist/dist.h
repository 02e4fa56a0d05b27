/* Internal distributed layer: meshes with their communicators, the dist
 * attribute of a tensor, collectives on local tensors, sharding rules. */
#ifndef OARI_DIST_H
#define OARI_DIST_H

#include "../ops/op.h"
#include "mpi_api.h"
#include <oar/dist.h>

struct oar_mesh {
    int refcount;
    int id;                             /* index in the mesh registry (op attributes name meshes by it) */
    int ndim;
    int64_t shape[OAR_MESH_MAX_DIMS];
    int64_t size;
    int *ranks;                         /* size entries, row-major */
    char names[OAR_MESH_MAX_DIMS][16];
    int coord[OAR_MESH_MAX_DIMS];       /* this rank's; -1 outside the mesh */
    oari_mpi_comm comm[OAR_MESH_MAX_DIMS]; /* ranks that differ only along dim d; ordered by coord */
    bool broken;                        /* a collective timed out: refuse further ones */
    int n_pending;                      /* requests of collectives given up on */
    oari_mpi_req pending[8];
    /* devices with collective members (comm.c): per dim, 0 not tried yet,
     * 1 dev_comm made on device dev_of, -1 shards on devices are staged */
    int dev_state[OAR_MESH_MAX_DIMS];
    oar_device *dev_of[OAR_MESH_MAX_DIMS];
    void *dev_comm[OAR_MESH_MAX_DIMS];
    bool move_group;                    /* the ranks of moves between meshes (oari_move_group), not a user's mesh */
};

/* What a dtensor carries: its mesh, placements and this rank's shard. The
 * tensor itself holds the global dtype and shape and no storage. */
typedef struct oari_dist_attr {
    oar_mesh *mesh;                     /* retained */
    oar_placement p[OAR_MESH_MAX_DIMS];
    oar_tensor *local;                  /* owned */
} oari_dist_attr;

/* A dtensor's attribute (its OARI_EXT_DIST slot), borrowed; NULL if local. */
static inline oari_dist_attr *oari_dist(const oar_tensor *t) { return (oari_dist_attr *)t->ext[OARI_EXT_DIST]; }
/* Installs the dist slot's class, the dispatch hooks and the dist_reshard
 * op definition (src/init/, at start-up). */
OARI_HIDDEN void oari_dist_install(void);
OARI_HIDDEN extern const oari_ext_class oari_dist_ext_class; /* dtensor.c */
OARI_HIDDEN extern const oari_op_def oari_def_dist_reshard;  /* reshard_op.c */

/* The MPI transport, liboar_mpi.so (mpi_api.h, mpi_load.c): NULL until
 * oari_mpi_load opens it (oar_dist_init does), so that programs without
 * dtensors never load libmpi. oari_mpi_load returns 0, or the status with
 * the error set, naming `who`, when the module is missing or stale. */
OARI_HIDDEN extern const oari_mpi_api *oari_mpi;
OARI_HIDDEN int oari_mpi_load(const char *who);
OARI_HIDDEN bool oari_dist_ready(void);   /* MPI loaded and initialised */
/* Frees buffers of collectives given up on (after MPI_Finalize). */
OARI_HIDDEN void oari_dist_release_abandoned(void);
/* Before a broken mesh's communicators are freed: gives its abandoned
 * collectives one more timeout to complete. True if all did. */
OARI_HIDDEN bool oari_mesh_drain(oar_mesh *m);
/* The same for the requests of moves between meshes given up on. */
OARI_HIDDEN bool oari_dist_drain_moves(void);
/* Whether a drain found requests that never completed (a dead or stopped
 * peer): MPI_Finalize would then wait forever. */
OARI_HIDDEN bool oari_dist_peers_lost(void);

/* Pops pool p and returns r (computed inside it) as an owned reference. */
static inline oar_tensor *oari_pop_owned(oar_pool *p, oar_tensor *r) {
    oar_tensor_retain(r);
    oar_pool_pop(p);
    return r;
}
OARI_HIDDEN oar_mesh *oari_mesh_retain(oar_mesh *m);
/* The live mesh with this id, or NULL with the error set. */
OARI_HIDDEN oar_mesh *oari_mesh_by_id(int64_t id);

/* The dist_reshard op's attributes: target mesh id and ndim, whether the
 * output is a plain tensor (the global value), whether the forward input
 * was plain, source mesh id and ndim (the target's unless a move between
 * meshes), then (kind, dim, reduce) per mesh dim for the target placements
 * and for the source ones (read by the gradient rule only). */
enum { OARI_RS_MESH, OARI_RS_NDIM, OARI_RS_TO_PLAIN, OARI_RS_FROM_PLAIN, OARI_RS_FROM_MESH, OARI_RS_FROM_NDIM,
       OARI_RS_TO };
#define OARI_RS_FROM(nd) (OARI_RS_TO + 3 * (nd))
OARI_HIDDEN void oari_rs_put(oari_attrs *a, int at, int nd, const oar_placement *p);
OARI_HIDDEN void oari_rs_get(const oari_attrs *a, int at, int nd, oar_placement *p);
/* The dist_reshard op on a dtensor input (dist dispatch calls it). */
OARI_HIDDEN int oari_dist_reshard_run(oar_tensor *x, const oari_attrs *a, oar_tensor **out);

/* The row-major coordinates in m of mesh position pos (0 .. size-1). */
OARI_HIDDEN void oari_mesh_coords(const oar_mesh *m, int64_t pos, int *coord);
/* Shard extent of a dim of size n split over m ranks, at coordinate c. */
static inline void oari_chunk(int64_t n, int64_t m, int64_t c, int64_t *start, int64_t *len) {
    int64_t size = (n + m - 1) / m;
    int64_t s = c * size < n ? c * size : n;
    int64_t e = s + size < n ? s + size : n;
    *start = s;
    *len = e - s;
}

/* A new dtensor (owned by the caller, in no pool) wrapping `local`
 * (retained) with the given global shape. */
OARI_HIDDEN oar_tensor *oari_dtensor_wrap(oar_tensor *local, oar_mesh *mesh, const oar_placement *p,
                                          int ndim, const int64_t *global_shape);
/* This rank's value under placements `to`, from its value `local` under
 * placements `from` (same mesh, same global value of shape global_shape,
 * which has local->ndim dims). Returns an owned
 * reference, possibly `local` itself. */
OARI_HIDDEN oar_tensor *oari_reshard_local(oar_tensor *local, oar_mesh *mesh, const int64_t *global_shape,
                                           const oar_placement *from, const oar_placement *to);

/* Collectives on local tensors over mesh dim d; each returns an owned
 * reference or NULL with the error set. A local tensor on a device other
 * than the CPU goes through that device's collective members when every
 * rank of the dim has them (all ranks of a dim keep their shards on one
 * device type), else through host memory and MPI; the result is on the
 * input's device. */
OARI_HIDDEN oar_tensor *oari_all_reduce(oar_tensor *x, oar_reduce_op op, oar_mesh *m, int d);
/* The same in two halves, so that work runs while it is in flight: start
 * copies x and starts the non-blocking all-reduce (0 or the error set);
 * poke lets MPI progress it; wait returns the owned result (after the
 * timeout: NULL with the error set, and the mesh broken). Every started
 * one must be waited for. */
typedef struct oari_pending {
    oari_mpi_req req;
    oar_tensor *buf;        /* owned while in flight */
    oar_mesh *mesh;
    int d;
    oar_reduce_op op;
    oar_dtype dtype;        /* of the input (f16/bf16 are reduced in f32) */
    bool done;
    oar_device *stage_dev;  /* the input's device when it was staged through the host, else NULL */
} oari_pending;
OARI_HIDDEN int oari_all_reduce_start(oar_tensor *x, oar_reduce_op op, oar_mesh *m, int d, oari_pending *p);
OARI_HIDDEN void oari_all_reduce_poke(oari_pending *p);
OARI_HIDDEN oar_tensor *oari_all_reduce_wait(oari_pending *p);
/* Concatenates the ranks' x along tensor dim `dim` (sizes may differ). */
OARI_HIDDEN oar_tensor *oari_all_gather(oar_tensor *x, int dim, oar_mesh *m, int d);
/* Reduces x over the ranks and keeps this rank's chunk of tensor dim `dim`. */
OARI_HIDDEN oar_tensor *oari_reduce_scatter(oar_tensor *x, int dim, oar_reduce_op op, oar_mesh *m,
                                            int d);
/* Shard(from) -> Shard(to) along mesh dim d in one all-to-all: x holds
 * this rank's chunk of tensor dim `from` (global extent n_from) and the
 * whole extent of `to`; the result holds the whole of `from` and this
 * rank's chunk of `to`. Uneven chunks as oari_chunk makes them. */
OARI_HIDDEN oar_tensor *oari_all_to_all(oar_tensor *x, int from, int64_t n_from, int to, oar_mesh *m,
                                        int d);
/* Calls made by this process per collective kind (tests check which ran). */
typedef enum oari_coll {
    OARI_COLL_ALL_REDUCE, OARI_COLL_ALL_GATHER, OARI_COLL_REDUCE_SCATTER, OARI_COLL_ALL_TO_ALL,
    OARI_COLL_SEND_RECV, OARI_COLL_BROADCAST, OARI_COLL_N
} oari_coll;
OARI_HIDDEN int64_t oari_dist_calls(oari_coll kind);
OARI_HIDDEN void oari_dist_count_call(oari_coll kind);
/* Point-to-point messages of a move between meshes, on a duplicate of
 * MPI_COMM_WORLD: buf[i] (contiguous) goes to or comes from world rank
 * peer[i]. Waits for all with the timeout. 0 or the error set. */
OARI_HIDDEN int oari_exchange(int n, const int *peer, oar_tensor *const *buf, const bool *is_send);
/* The same messages through dev's send and recv members on comm, the
 * device communicator of group (oari_move_device_comm); buf[i] are whole
 * buffers on dev (contiguous, offset 0). Orders the messages so that
 * sends that wait for their receive cannot wait in a cycle. */
OARI_HIDDEN int oari_exchange_device(oar_mesh *group, void *comm, oar_device *dev, int n, const int *peer,
                                     oar_tensor *const *buf, const bool *is_send);
/* Point-to-point messages of the pipeline runner (src/nn/pipeline.c), on
 * the duplicate of MPI_COMM_WORLD that moves use, with the caller's tag.
 * start posts one non-blocking send or receive of buf (a whole contiguous
 * CPU tensor, retained until the message completes) to or from world rank
 * peer; wait waits for n started messages with the deadline
 * (oar_dist_timeout) and on a timeout fails naming the world ranks whose
 * messages did not complete, prefixed by `what`; abandon gives up on
 * messages not complete (their buffers and requests kept for
 * oar_dist_finalize). Both leave every entry finished (req and buf NULL). */
typedef struct oari_p2p {
    oari_mpi_req req;
    oar_tensor *buf;
    int peer;
} oari_p2p;
OARI_HIDDEN int oari_p2p_start(oar_tensor *buf, int peer, bool is_send, int tag, oari_p2p *r);
OARI_HIDDEN int oari_p2p_wait(int n, oari_p2p *r, const char *what);
OARI_HIDDEN void oari_p2p_abandon(int n, oari_p2p *r);
/* The mesh of the ranks of a and b (sorted by world rank, one mesh dim):
 * made on the first call for a rank set, collectively over exactly those
 * ranks, and kept until oar_dist_finalize. Borrowed; NULL with the error
 * set. */
OARI_HIDDEN oar_mesh *oari_move_group(const oar_mesh *a, const oar_mesh *b);
/* For a move between meshes a and b of shards on dev: *comm is the device
 * communicator of the move's ranks (*group) when every one of them holds
 * its shard on a device with send and recv members, else NULL (staged
 * through host memory; always on the CPU). Collective over the ranks of
 * a and b on devices. 0 or the error set. */
OARI_HIDDEN int oari_move_device_comm(oar_mesh *a, oar_mesh *b, oar_device *dev, oar_mesh **group,
                                      void **comm);
/* The move of a dtensor (placements `from` on mesh a, possibly a rank
 * outside it) to mesh b with placements `to`: an owned dtensor on b. */
OARI_HIDDEN oar_tensor *oari_dist_move(oar_tensor *x, oar_mesh *b, const oar_placement *to);
/* A dtensor on a rank outside its mesh: no data (local is an empty tensor
 * on dev, NULL: the CPU, so that a move from or to it knows the device
 * type of the shards). */
OARI_HIDDEN oar_tensor *oari_dtensor_outside(oar_mesh *m, const oar_placement *p, oar_dtype dtype, int ndim,
                                             const int64_t *global_shape, oar_device *dev);
/* Frees the device communicators of m (mesh.c, when m is freed). */
OARI_HIDDEN void oari_mesh_free_device_comms(oar_mesh *m);
/* Sums one int64 over mesh dim d. */
OARI_HIDDEN int oari_sum_i64(int64_t *v, oar_mesh *m, int d);

/* ---- collective nodes of static auto parallel (collective_ops.c) ---------
 * Custom ops registered on first use (oari_co_register, 0 or the error
 * set): one local input, one local output. User attributes: mesh id, mesh
 * ndim (mnd), tensor ndim, the mesh shape (mnd), this rank's coordinates
 * (mnd), the global shape (ndim), then the source and the target
 * placements, one packed int per mesh dim each (oari_co_pack). The shape
 * rule reads the attributes only; the forward checks the mesh against them. */
typedef enum oari_co_kind {
    OARI_CO_ALL_REDUCE, OARI_CO_ALL_GATHER, OARI_CO_REDUCE_SCATTER, OARI_CO_SHARD, OARI_CO_RESHARD,
    OARI_CO_N_KINDS
} oari_co_kind;
enum { OARI_CO_MESH, OARI_CO_MNDIM, OARI_CO_NDIM, OARI_CO_MSHAPE };
#define OARI_CO_NATTR(mnd, ndim) (OARI_CO_MSHAPE + 4 * (mnd) + (ndim))
OARI_HIDDEN int oari_co_register(void);
/* The custom registry id of a kind (what attribute 0 of its node holds), or -1 with the error set. */
OARI_HIDDEN int oari_co_id(oari_co_kind kind);
/* The kind of a custom registry id, or -1 when it is none of them. */
OARI_HIDDEN int oari_co_kind_of(int custom_id);
OARI_HIDDEN const char *oari_co_name(oari_co_kind kind);
OARI_HIDDEN int64_t oari_co_pack(oar_placement p);
OARI_HIDDEN oar_placement oari_co_unpack(int64_t v);
/* The local shape at mesh coordinates coord of a global shape under placements p. */
OARI_HIDDEN void oari_co_local_shape(int mnd, const int64_t *mshape, const int *coord, const oar_placement *p,
                                     int ndim, const int64_t *global, int64_t *out);

/* A sharding plan for one op call: the placements each input must have
 * and those of each output. */
typedef struct oari_shard_plan {
    oar_placement in[OARI_MAX_IN][OAR_MESH_MAX_DIMS];
    oar_placement out[OARI_MAX_OUT][OAR_MESH_MAX_DIMS];
    bool local_attrs;       /* the local op takes `attrs` below (shapes in them made local) */
    oari_attrs attrs;
} oari_shard_plan;

/* Fills plan for op over inputs with placements in_p (global metas in
 * `in`, ndim -1 for an absent optional input; attributes, output metas from the shape rule). Reads metas only, so
 * that eager dispatch and static completion share it. Returns 1 if the op
 * has a rule, 0 if it has none (the caller replicates), <0 on error. */
OARI_HIDDEN int oari_shard_rule(oari_op op, const oari_op_def *def, int n_in,
                                const oari_meta *in, oar_placement (*in_p)[OAR_MESH_MAX_DIMS],
                                const oari_attrs *attrs, const oari_meta *out_meta,
                                const oar_mesh *mesh, oari_shard_plan *plan);

/* ---- the per-op sharding decisions (rules_table.c; docs/dist_rules.md) ---- */

/* Which rule of rules.c an op follows, or why it replicates. */
typedef enum oari_rule_kind {
    OARI_RULE_NONE = 0,     /* no decision: tests/dist/test_dist_rules.c fails on it */
    OARI_RULE_REPLICATE,    /* replicated by design (the note says why) */
    OARI_RULE_INPLACE,      /* the in-place path of dist_dispatch.c */
    OARI_RULE_RESHARD,      /* dist_reshard: its own path */
    OARI_RULE_POINTWISE,    /* elementwise and broadcast fusion kinds */
    OARI_RULE_MATMUL,
    OARI_RULE_REDUCE,       /* a mask of reduced dims: a reduced sharded dim gives Partial */
    OARI_RULE_ARGREDUCE,    /* one reduced dim (attribute dim_attr, -1: all) */
    OARI_RULE_MOVEMENT,     /* permute, view, expand, slice: the dim-transform rule */
    OARI_RULE_ALONG,        /* works along one dim (attribute dim_attr): the others are free */
    OARI_RULE_LEADING,      /* works on the last two dims: the leading ones are free */
    OARI_RULE_SPATIAL,      /* pooling, interpolation: batch and channel dims are free */
    OARI_RULE_ALL_DIMS,     /* every dim of in[0] is free */
    OARI_RULE_LAST_FREE,    /* every dim but the last is free */
    OARI_RULE_FLIP,         /* the dims of the mask in attribute 0 are taken */
    OARI_RULE_ROLL,         /* the dims of the (shift, dim) pairs are taken */
    OARI_RULE_PAD,          /* the padded trailing dims are taken */
    OARI_RULE_FFT,          /* the transformed dims are taken */
    OARI_RULE_LAYER_NORM,   /* the leading, not normalised, dims are free */
    OARI_RULE_GROUP_NORM,   /* the batch dim is free */
    OARI_RULE_INDEX_SELECT, /* sharded index, free dims; a vocab-sharded table: rules_vocab.c */
    OARI_RULE_CONV,         /* batch, output channels, input channels (Partial) */
    OARI_RULE_CUSTOM,       /* elementwise custom ops: pointwise; others replicate */
} oari_rule_kind;

/* One op's decision. dim_attr: for ALONG and ARGREDUCE, the attribute
 * holding the dim. linear: bit i set when the op is linear in input i
 * jointly with the other set bits, so that Partial(sum) passes through.
 * vocab: the op has a special path (rules_vocab.c) for its dim sharded. */
typedef struct oari_dist_rule {
    oari_rule_kind kind;
    int dim_attr;
    unsigned linear;
    bool vocab;
    const char *note;       /* one line for docs/dist_rules.md (NULL: the kind's) */
} oari_dist_rule;

/* The decision for op (never NULL; kind NONE if there is none). The one
 * place every op's sharding is decided: oari_shard_rule follows it, and
 * docs/dist_rules.md is generated from it. */
OARI_HIDDEN oari_dist_rule oari_dist_rule_of(oari_op op);
/* A short name and a one-line description of a kind. */
OARI_HIDDEN const char *oari_rule_kind_name(oari_rule_kind k);
OARI_HIDDEN const char *oari_rule_kind_doc(oari_rule_kind k);
/* Writes docs/dist_rules.md's text (markdown) into buf (size n): 0, or
 * OAR_ERR_INVALID if n is too small. */
OARI_HIDDEN int oari_dist_rules_doc(char *buf, size_t n);

/* Calls that need a local computation of their own, not only placements
 * (rules_vocab.c): index_select and gather on a table sharded along the
 * picked dim (vocab-parallel embedding, a vocab-parallel cross-entropy's
 * pick: each rank looks up its range, masks the rest, Partial(sum)), and
 * softmax / log_softmax along a sharded dim (the max and the sum of exp
 * all-reduced, as Megatron does). oari_shard_special fills plan and returns
 * 1 for such a call, 0 otherwise (oari_shard_rule then decides; it never
 * returns these plans, so a caller that cannot run them stays correct).
 * oari_shard_special_run computes the outputs (owned, lout) from the
 * inputs resharded to plan->in; 0 or the error set. */
OARI_HIDDEN int oari_shard_special(oari_op op, int n_in, const oari_meta *in,
                                   oar_placement (*in_p)[OAR_MESH_MAX_DIMS], const oari_attrs *attrs,
                                   const oari_meta *out_meta, const oar_mesh *mesh, oari_shard_plan *plan);
OARI_HIDDEN int oari_shard_special_run(oari_op op, int n_in, oar_tensor *const *local, const oari_meta *in,
                                       const oari_attrs *attrs, oar_mesh *mesh, const oari_shard_plan *plan,
                                       oar_tensor **lout);
/* The rule of oari_shard_rule for the kinds whose free dims follow from
 * metas and attributes (rules.c): fills plan. */
OARI_HIDDEN void oari_rule_free_dims(const oari_dist_rule *r, oari_op op, int n_in, const oari_meta *in,
                                     oar_placement (*in_p)[OAR_MESH_MAX_DIMS], const oari_attrs *attrs,
                                     int n_out, const oari_meta *out_meta, const oar_mesh *mesh,
                                     oari_shard_plan *plan);

#endif

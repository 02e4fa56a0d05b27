/* Distributed tensors over MPI: process meshes, placements, reshard.
 *
 * A distributed tensor (dtensor) has a global shape and, on each rank, a
 * local shard. One placement per mesh dim says how the global value maps
 * to the shards along that mesh dim:
 *   Shard(d)      tensor dim d is split in chunks of ceil(n / m) over the m
 *                 ranks of the mesh dim (the last chunks may be smaller or
 *                 empty, as torch.chunk does);
 *   Replicate     every rank holds the whole extent;
 *   Partial(op)   the global value is op over the ranks' local values.
 * A tensor dim is sharded by at most one mesh dim.
 *
 *     oar_dist_init(&argc, &argv);
 *     oar_mesh *mesh = oar_mesh_create(1, (int64_t[]){oar_dist_world_size()}, NULL, NULL);
 *     oar_tensor *xd = oar_shard_tensor(x, mesh, (oar_placement[]){oar_shard(0)});
 *     oar_tensor *yd = oar_matmul(xd, wd);            (ops accept dtensors)
 *     oar_tensor *y = oar_unshard(yd);                (the global value)
 *
 * Ops on dtensors go through the op's sharding rule (elementwise and
 * broadcast ops, matmul, sum): inputs are resharded to what the rule needs,
 * the op runs on the local shards and the outputs carry the rule's
 * placements. Ops without a rule replicate their inputs and run on the
 * whole value (counted by oar_dist_fallback_count). Plain tensors mixed
 * with dtensors are taken as replicated: every rank must pass the same
 * value. Autograd works on dtensors as on any tensor: the op is recorded on
 * the dtensors, and its gradient rule (built from ops) runs on dtensors
 * through the same sharding rules; oar_shard_tensor, oar_reshard and
 * oar_unshard are differentiable (the gradient of a reshard is the reverse
 * reshard, with Partial turned into Replicate). The gradient of a
 * replicated weight used with sharded data comes out Partial(sum); reshard
 * it to Replicate (one all-reduce) where a replicated value is needed.
 * oar_dtensor_local and oar_dtensor_from_local do not carry gradients.
 *
 * Every function that communicates is collective: all ranks of the mesh
 * must call it in the same order. Dtensors follow the pool rule like any
 * other tensor. */
#ifndef OAR_DIST_H
#define OAR_DIST_H

#include <oar/device.h>
#include <oar/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

#define OAR_MESH_MAX_DIMS 4

typedef struct oar_mesh oar_mesh;

/* oar_reduce_op (OAR_REDUCE_SUM, _AVG, _MAX, _MIN, _PROD) is the device
 * ABI's, in <oar/device.h>. */

typedef enum oar_placement_kind {
    OAR_PLACEMENT_REPLICATE, OAR_PLACEMENT_SHARD, OAR_PLACEMENT_PARTIAL,
} oar_placement_kind;

/* One per mesh dim; passed by value. `dim` is meaningful for Shard,
 * `reduce` for Partial. */
typedef struct oar_placement {
    oar_placement_kind kind;
    int dim;
    oar_reduce_op reduce;
} oar_placement;

/* Initialises MPI (if the program has not) with thread support
 * MPI_THREAD_FUNNELED. argc/argv may be NULL. 0 on success. Calling it
 * again is a no-op. liboar does not link libmpi: this opens oar's MPI
 * module, liboar_mpi.so, installed next to liboar (found from liboar's own
 * folder, or the program's when linked statically), which loads libmpi;
 * OAR_ERR_STATE when it is missing or libmpi cannot be loaded, and
 * OAR_ERR_UNSUPPORTED when oar was built without MPI (OAR_WITH_MPI=OFF). */
OAR_API int oar_dist_init(int *argc, char ***argv);
/* Frees every communicator oar made and finalizes MPI if oar_dist_init
 * initialised it. Meshes must not be used afterwards. After collectives
 * timed out, those given up on get a few more seconds (2, or the timeout
 * if shorter; 0.1 s when a timeout found peers that did not answer) to
 * complete; if some never do (a peer is dead or stopped),
 * MPI_Finalize would wait forever, so MPI is left without it and
 * OAR_ERR_STATE says so (the process can then exit; mpirun reports the job
 * as failed). 0 otherwise. */
OAR_API int oar_dist_finalize(void);
/* How long a collective waits for the other ranks before it fails (the
 * mesh is then unusable): OAR_DIST_TIMEOUT seconds, default 300; 0 waits
 * forever. A rank that timed out then spends up to 2 s more (the timeout
 * if shorter) exchanging a message with every peer of the mesh dim, and
 * its error names the world ranks that did not answer (dead, stopped, or
 * not in the same call). A survivor of a dead peer thus fails within the
 * timeout + 2 s and leaves oar_dist_finalize at once. */
OAR_API void oar_dist_set_timeout(double seconds);
OAR_API double oar_dist_timeout(void);
/* This process's rank and the world size; 0 and 1 before oar_dist_init. */
OAR_API int oar_dist_rank(void);
OAR_API int oar_dist_world_size(void);

/* A process mesh: an N-d array (ndim 1..OAR_MESH_MAX_DIMS) of distinct
 * world ranks. ranks NULL: 0..n-1 in row-major order; dim_names NULL:
 * "d0", "d1", ... Collective over the world (every rank calls it, even
 * ranks outside the mesh). Returns a new mesh with one reference, or NULL
 * with the error set (bad shape, rank out of range or repeated, product not
 * matching the world size when ranks is NULL). */
OAR_API oar_mesh *oar_mesh_create(int ndim, const int64_t *shape, const int *ranks,
                                  const char *const *dim_names);
/* Drops the caller's reference; dtensors on the mesh keep their own. */
OAR_API void oar_mesh_release(oar_mesh *m);
OAR_API int oar_mesh_ndim(const oar_mesh *m);
OAR_API const int64_t *oar_mesh_shape(const oar_mesh *m);          /* borrowed */
OAR_API const char *oar_mesh_dim_name(const oar_mesh *m, int dim);  /* borrowed; NULL if bad */
/* This rank's coordinate along mesh dim `dim`; -1 if not in the mesh or dim is bad. */
OAR_API int oar_mesh_coord(const oar_mesh *m, int dim);

OAR_API oar_placement oar_shard(int tensor_dim);
OAR_API oar_placement oar_replicate(void);
OAR_API oar_placement oar_partial(oar_reduce_op op);

/* From a global value that every rank holds: each rank keeps its shard (a
 * copy). Partial placements keep the value on coordinate 0 and the
 * identity of the reduction elsewhere (zeros for sum; the value itself for
 * avg, max, min; ones for prod). placements has oar_mesh_ndim entries.
 * On a rank outside the mesh: a dtensor without data (for oar_reshard to
 * another mesh). */
OAR_API oar_tensor *oar_shard_tensor(oar_tensor *global, oar_mesh *mesh,
                                     const oar_placement *placements);
/* Wraps this rank's local shard (retained, not copied). global_shape NULL
 * infers it by summing the shard sizes over each sharding mesh dim
 * (collective). */
OAR_API oar_tensor *oar_dtensor_from_local(oar_tensor *local, oar_mesh *mesh,
                                           const oar_placement *placements,
                                           const int64_t *global_shape);
/* The same global value with other placements. On the tensor's own mesh
 * the collectives it needs (all-gather, all-reduce, reduce-scatter, and
 * all-to-all for Shard(a) -> Shard(b)) run on communicators made once per
 * mesh dim. On another mesh (other ranks, or the same ranks arranged
 * otherwise) the value moves by point-to-point messages; every rank of
 * either mesh calls it, and a rank outside the target mesh gets a dtensor
 * without data (one outside the source mesh passes one, as
 * oar_shard_tensor makes it there), which only reshard and autograd
 * accept. Differentiable: the gradient is the reverse reshard or move
 * (ranks outside the source mesh get zeros). Shards on a device move
 * through the device's send and recv members when every rank of the move
 * has them (a device communicator over the ranks of both meshes, made on
 * the first such move and kept until oar_dist_finalize), else through host
 * memory; every rank of a move must hold its shard on the same device
 * type (a rank outside the source mesh: the device of the tensor
 * oar_shard_tensor got there; the first device move over a set of ranks
 * makes their communicator with MPI_Comm_create_group, which waits
 * without a deadline for a rank whose shard is on the CPU). Collective. */
OAR_API oar_tensor *oar_reshard(oar_tensor *t, oar_mesh *mesh, const oar_placement *placements);
/* The global value as a plain tensor on every rank of the mesh (an error
 * on a rank outside it). Collective. */
OAR_API oar_tensor *oar_unshard(oar_tensor *t);

/* Broadcast, as torch.distributed.broadcast and paddle.distributed.broadcast
 * do it, e.g. to start data-parallel training from the same parameters:
 * in place on t, a plain (not distributed) contiguous tensor on any
 * device, every rank of this rank's group along mesh dim `mesh_dim` (the
 * ranks whose other coordinates equal this rank's) gets the values of the
 * group's member whose coordinate along mesh_dim is `root` (0 ..
 * shape[mesh_dim] - 1; on a 1-D mesh over the world, the world rank
 * mesh->ranks[root]). On a 2-D mesh, each group broadcasts from its own
 * root. The bytes are copied as they are: every rank of the group must
 * pass a tensor of the same dtype, shape and device type (a byte count
 * that differs is an MPI error at best; a dtype that differs is not
 * detected). Autograd does not record it (t's version is bumped on the
 * ranks other than the root, so a value saved for backward before it is
 * reported as modified there); a leaf that requires grad may be
 * broadcast. Collective over the group: CPU tensors go through MPI_Ibcast
 * on the mesh dim's communicator, device tensors through the device's
 * broadcast member where it has one (else through host memory), waited
 * for as every collective (oar_dist_set_timeout). 0, or a status with oar_last_error() naming the
 * problem: a NULL tensor or mesh, a dtensor, a non-contiguous or traced
 * tensor, a bad mesh dim or root, this rank outside the mesh (an error,
 * not a no-op: it has no group), a mesh made unusable by a timeout, a
 * peer that timed out (the mesh is then unusable), or a tensor over 2 GiB
 * on the MPI path. */
OAR_API int oar_dist_broadcast_(oar_tensor *t, oar_mesh *mesh, int mesh_dim, int root);

OAR_API bool oar_tensor_is_dist(const oar_tensor *t);
OAR_API oar_tensor *oar_dtensor_local(oar_tensor *t);                   /* borrowed; NULL if not a dtensor */
OAR_API oar_mesh *oar_dtensor_mesh(const oar_tensor *t);                /* borrowed */
OAR_API const oar_placement *oar_dtensor_placements(const oar_tensor *t); /* borrowed, mesh ndim entries */
/* Writes "[S(0), R]" etc. into buf (size >= 64); returns buf. */
OAR_API const char *oar_placements_str(const oar_mesh *m, const oar_placement *p, char *buf,
                                       size_t size);

/* ---- parallel training recipes ------------------------------------------- */

typedef struct oar_module oar_module;

/* How a parameter is laid out over one mesh dim, in the manner of
 * Megatron-LM and Paddle's parallelize: a Linear weight [out, in] split by
 * output features (colwise: Shard(0), its bias Shard(0)) or by input
 * features (rowwise: Shard(1), its bias replicated), or replicated. */
typedef enum oar_parallel_style {
    OAR_PARALLEL_REPLICATE, OAR_PARALLEL_COLWISE, OAR_PARALLEL_ROWWISE,
} oar_parallel_style;

/* A parameter-name pattern (fnmatch(3): "layers.*.mlp.fc1.*") and the
 * style for the parameters it matches; the first matching rule wins. */
typedef struct oar_parallel_rule {
    const char *pattern;
    oar_parallel_style style;
} oar_parallel_rule;

/* Turns every parameter and buffer of m into a dtensor on `mesh`: those a
 * rule matches are laid out by its style along mesh dim `mesh_dim`, all
 * others (and every other mesh dim) replicated. Every rank must hold the
 * same initial values (seed the generator alike). Then m's forward runs on
 * dtensors: feed it a batch sharded over a data-parallel mesh dim, a plain
 * (replicated) tensor, or both. Collective. 0 or an error naming the
 * parameter. */
OAR_API int oar_parallelize(oar_module *m, oar_mesh *mesh, int mesh_dim, int n_rules,
                            const oar_parallel_rule *rules);

/* Reduces the Partial gradients of params (their .grad dtensors) to
 * Replicate, packing gradients of one dtype and layout into buckets of up
 * to bucket_bytes (0: 25 MiB) so that each bucket is one all-reduce per
 * mesh dim. Call after backward, before the optimizer step. Collective.
 * Not overlapped with backward (oar_dist_reducer is). Returns the number of all-reduce calls
 * made, or -1 with the error set. */
OAR_API int oar_dist_reduce_grads(int n, oar_tensor *const *params, size_t bucket_bytes);

/* Data-parallel gradient reduction overlapped with backward, as PyTorch's
 * DistributedDataParallel does it. The parameters (dtensors, as
 * oar_parallelize leaves them) are split, last first, into buckets: the
 * first up to 1 MiB, the others up to bucket_bytes (0: 25 MiB). During
 * each oar_backward, once every gradient of a bucket is complete, its
 * Partial gradients start one non-blocking all-reduce (per layout) while
 * backward goes on. oar_dist_reducer_wait, after backward and before the
 * optimizer step, starts the rest, waits for all and leaves the gradients
 * Replicate: the values oar_dist_reduce_grads gives. One backward per
 * wait; to accumulate gradients over several backwards, use
 * oar_dist_reduce_grads instead. The parameter list is copied, the
 * parameters are borrowed (they must outlive the reducer). Returns a new
 * reducer (free it with oar_dist_reducer_free) or NULL with the error set
 * (empty or NULL list, a NULL parameter, more than 16 reducers alive). */
typedef struct oar_dist_reducer oar_dist_reducer;
OAR_API oar_dist_reducer *oar_dist_reducer_new(int n, oar_tensor *const *params, size_t bucket_bytes);
/* Collective. The number of all-reduce calls of this step, or -1 with the
 * error set (a gradient changed after its bucket started, as a second
 * backward does; a bucket that could not start; a peer that timed out).
 * Either way the reducer is ready for the next step. */
OAR_API int oar_dist_reducer_wait(oar_dist_reducer *r);
/* How many buckets of the last waited step started during backward. */
OAR_API int oar_dist_reducer_overlapped(const oar_dist_reducer *r);
/* Waits for anything still in flight and frees r (NULL: no-op). */
OAR_API void oar_dist_reducer_free(oar_dist_reducer *r);

/* ---- pipeline parallel (src/nn/pipeline.c) ------------------------------
 * The model is a list of modules cut into p contiguous stages (p the size
 * of mesh axis `axis`; stage s runs modules [s*k, (s+1)*k), k = n / p) and
 * each rank runs the stage of its coordinate along the axis. A step splits
 * the batch (dim 0) into m micro-batches and runs forward and backward
 * over them with a schedule: GPipe (every forward, then every backward;
 * m activations stashed per stage) or 1F1B (PipeDream-flush, as
 * Megatron-LM: stage s runs min(p - s - 1, m) forwards, then alternates one
 * forward and one backward, then drains the backwards; at most p stashed).
 * A stage's output goes to the next stage by point-to-point messages (a
 * small header with dtype, shapes and placements, then the data), and the
 * gradient of its input comes back the same way; every wait has the
 * deadline (oar_dist_set_timeout), and a neighbour that does not answer
 * ends the step in an error naming its world rank. The last stage applies
 * loss_fn to its output and the micro-batch's target; each micro-batch's
 * loss is scaled by 1/m and differentiated, so the parameters' .grad
 * accumulate the gradient of the mean of the micro-batch losses (that of
 * the whole batch for a mean loss of equal micro-batches); the step
 * returns that mean on every rank.
 *
 * Other mesh axes compose: the ranks of one stage form a mesh of the other
 * axes (oar_pipeline_stage_mesh). Lay the stage's modules out on it with
 * oar_parallelize (data parallel: all replicated, the batch sharded over
 * the dp axis; tensor parallel: colwise/rowwise rules over the tp axis),
 * and pass the batch as a dtensor on stage 0's stage mesh (the target on
 * the last stage's). Activations are dtensors there, passed shard by shard
 * between the ranks of equal coordinates on the other axes; after the last
 * micro-batch, Partial gradients are all-reduced (oar_dist_reduce_grads).
 * Shards must live on the CPU.
 *
 *     oar_mesh *mesh = oar_mesh_create(3, (int64_t[]){2, 2, 2}, NULL, (const char *[]){"dp", "tp", "pp"});
 *     oar_pipeline *pl = oar_pipeline_new(4, blocks, mesh, 2, 4, OAR_PIPE_1F1B, mse, NULL);
 *     oar_parallelize(blocks[2 * stage], oar_pipeline_stage_mesh(pl), 1, 2, megatron);  (and 2*stage+1)
 *     for (...) { oar_optim_zero_grad(opt); oar_pipeline_step(pl, x, y, &loss); oar_optim_step(opt); } */
typedef enum oar_pipe_schedule {
    OAR_PIPE_GPIPE = 0,
    OAR_PIPE_1F1B = 1,
} oar_pipe_schedule;
typedef struct oar_pipeline oar_pipeline;
/* The loss of one micro-batch from the last stage's output and its target
 * (both dtensors when the stage has a stage mesh): a one-element tensor
 * (or dtensor), pool-owned, or NULL with the error set. */
typedef oar_tensor *(*oar_pipe_loss_fn)(oar_tensor *output, oar_tensor *target, void *ctx);

/* A pipeline over `mesh` along mesh axis `axis`, of n_modules modules
 * (n_modules a multiple of the axis's size p; only this rank's stage's
 * entries are used, and must be non-NULL; borrowed: they must outlive the
 * pipeline), m micro-batches per step (1 .. 4096), the schedule, and the
 * loss. On a mesh of more than one axis it makes every stage's mesh of the
 * other axes (oar_mesh_create, collective over the world). NULL with the
 * error set: NULL mesh, modules or loss_fn, a bad axis, a module count
 * that is not a multiple of p, m out of range, an unknown schedule, this
 * rank outside the mesh. */
OAR_API oar_pipeline *oar_pipeline_new(int n_modules, oar_module *const *modules, oar_mesh *mesh, int axis,
                                       int m, oar_pipe_schedule schedule, oar_pipe_loss_fn loss_fn,
                                       void *loss_ctx);
/* One step: forward and backward of the m micro-batches of x (read on
 * stage 0, ignored elsewhere: may be NULL there) against target (read on
 * the last stage), accumulating into the stage parameters' .grad (zero them
 * before, step the optimizer after). x and target are split along dim 0
 * (a dtensor: its local shard, whose rows must split evenly). *loss (NULL
 * skips) gets the mean micro-batch loss on every rank. Collective over the
 * mesh. 0, or a status with oar_last_error() naming the problem on every
 * rank: first the stages check their inputs together (a missing x or
 * target, a batch not divisible into m micro-batches, a stage without
 * modules) and all fail alike; later a failed op, or a neighbour that
 * timed out (named by world rank). */
OAR_API int oar_pipeline_step(oar_pipeline *pl, oar_tensor *x, oar_tensor *target, double *loss);
/* This rank's stage (its coordinate along the axis), or -1 on NULL. */
OAR_API int oar_pipeline_stage(const oar_pipeline *pl);
/* The mesh of this stage's ranks over the other axes (borrowed), or NULL
 * for a pipeline on a 1-d mesh (or NULL pl). */
OAR_API oar_mesh *oar_pipeline_stage_mesh(const oar_pipeline *pl);
/* The most micro-batches this stage held stashed (forward done, backward
 * not yet) at once during the last step: min(p - stage, m) under 1F1B,
 * m under GPipe. -1 on NULL. */
OAR_API int oar_pipeline_peak_stash(const oar_pipeline *pl);
/* Seconds of the last step on this rank: *busy (NULL skips) in the
 * stage's forward and backward computations, *total (NULL skips) the whole
 * step; 1 - busy/total is the stage's bubble (idle) fraction. 0, or -1
 * with the error set on NULL pl. */
OAR_API int oar_pipeline_times(const oar_pipeline *pl, double *busy, double *total);
/* Frees pl (NULL: no-op); the modules stay the caller's. */
OAR_API void oar_pipeline_free(oar_pipeline *pl);

/* ---- ZeRO: sharded data parallel (src/optim/zero.c, src/nn/zero3.c) -----
 * ZeRO stages 1, 2 and 3 (DeepSpeed; PyTorch's ZeroRedundancyOptimizer is
 * stage 1, its FSDP stage 3). The parameters, laid flat end to end (in
 * list order, padded with zeros to a multiple of N, the ranks of the
 * data-parallel mesh dim),
 * are cut into N equal shards; each rank keeps the optimizer state (Adam's
 * m and v, SGD's momentum...) of its shard only, 1/N of the whole. A step:
 *   stage 1: the gradients are all-reduced (as plain data parallel), each
 *            rank takes its shard of the sum;
 *   stage 2: the gradients are reduce-scattered: each rank receives only
 *            its shard of the sum (1/N of the reduced gradient);
 * then each rank updates its shard of the parameters with the optimizer's
 * own rule, and the shards are all-gathered back into every rank's
 * parameters. The values are those of plain data parallel with the same
 * optimizer (every update rule is elementwise). Gradient accumulation:
 * with accum_steps = k, the first k - 1 calls of oar_zero_step only count
 * (backward keeps summing into .grad locally, no communication) and the
 * k-th communicates once, divides the summed gradient by k and updates, so
 * k micro-batches with mean losses give the step of their whole batch.
 * Stage 3 also shards the parameters (FSDP's FULL_SHARD): they are cut
 * into units, one per module (a layer, a block) as the options group
 * them, each unit laid flat and padded to N shards of its own. Between
 * steps a rank keeps only its shard of every unit (the parameters read as
 * zeros: stride-0 views of one zero); oar_zero_forward all-gathers a
 * unit's parameters, runs the module without recording and frees them; its
 * backward gathers them again, recomputes the module with grad on,
 * differentiates it, reduce-scatters the unit's parameter gradients into
 * this rank's gradient shard at once (every micro-step) and frees the
 * parameters. Parameter memory peaks at the shards plus one unit's full
 * parameters (oar_zero_param_bytes). The parameters' .grad stays unset.
 * offload_state keeps the optimizer state and a copy of the shard in host
 * memory and steps there (for shards on a plugin device; on the CPU it
 * costs one more shard copy and saves nothing).
 *
 *     oar_parallelize(net, mesh, 0, 0, NULL);               (all replicated)
 *     oar_optimizer *adam = oar_adam_new(n, params, &(oar_adam_options){.lr = 1e-3});
 *     oar_zero *z = oar_zero_new(adam, mesh, 0, &(oar_zero_options){.stage = 2});
 *     oar_optim_free(adam);                                (only a template)
 *     for (...) { loss = ...(batch sharded over mesh dim 0); oar_backward(loss, NULL); oar_zero_step(z); }
 *
 * Stage 3, each Linear of [Linear, Tanh, Linear] a unit of 2 parameters:
 *     z = oar_zero_new(adam, mesh, 0, &(oar_zero_options){.stage = 3, .n_units = 2,
 *                                                         .unit_params = (int[]){2, 2}});
 *     h = oar_zero_forward(z, lin1, x); h = oar_module_forward(tanh, h); y = oar_zero_forward(z, lin2, h); */
typedef struct oar_optimizer oar_optimizer;
typedef struct oar_zero oar_zero;

typedef struct oar_zero_options {
    int stage;        /* 1: shard the optimizer state; 2: also the reduced gradients; 3: also the parameters */
    int accum_steps;  /* micro-steps per update; 0 means 1 */
    /* stage 3 only: the units, groups of parameters gathered together
     * (each a module's: oar_zero_forward runs it): unit u is the next
     * unit_params[u] parameters of the optimizer's list, in its order
     * (oar_module_parameters' order for that module) */
    int n_units;
    const int *unit_params;
    bool offload_state; /* optimizer state and its step in host memory */
} oar_zero_options;

/* A ZeRO optimizer over opt's parameters, sharded along mesh dim mesh_dim.
 * opt is a template: its kind (SGD, Adam, AdamW, RMSProp), hyperparameters
 * and parameter list are copied (the parameters retained), and an
 * optimizer of the same kind is made over this rank's flat shard; opt must
 * not have stepped (it holds no state to shard) and stays the caller's.
 * The parameters must be dtensors on `mesh`, Replicate on every mesh dim
 * (as oar_parallelize leaves them without rules), of one floating dtype.
 * Each rank also keeps its shard of the parameters (a flat copy, 1/N of
 * them). It makes no collective call, but every rank of the mesh dim must
 * make one alike (its steps are collective). Stage 3 keeps only the
 * shards: it frees the parameters' values on return. NULL with the error
 * set: NULL arguments, a stage other than 1, 2 or 3, accum_steps < 0, a bad
 * mesh dim, a rank outside the mesh, a parameter that is not a replicated
 * dtensor on this mesh, dtypes that differ, an optimizer that already
 * stepped; stage 3: no units, unit sizes < 1 or not summing to the
 * optimizer's parameters, a parameter listed twice. */
OAR_API oar_zero *oar_zero_new(const oar_optimizer *opt, oar_mesh *mesh, int mesh_dim,
                               const oar_zero_options *o);
/* One micro-step (see accum_steps): 0 after only counting, 1 after an
 * update, -1 with the error set (a parameter without a gradient at an
 * update, a gradient of another dtype, or one that is not Partial(sum or
 * avg) or Replicate along the mesh dim and Replicate elsewhere, the same
 * for all, a NULL z, a peer that timed out).
 * After an update, and after a failed one, the parameters' gradients are
 * dropped (set to none) and the count starts again; between micro-steps
 * they are kept (do not zero them). Collective over the mesh dim. */
OAR_API int oar_zero_step(oar_zero *z);
/* The optimizer over this rank's shard (borrowed): set its lr, hang a
 * learning-rate schedule on it, or save it (each rank its own shard). */
OAR_API oar_optimizer *oar_zero_inner(oar_zero *z);
/* Bytes of optimizer state this rank holds (0 before the first update):
 * the state tensors of the shard optimizer. */
OAR_API int64_t oar_zero_state_bytes(const oar_zero *z);
/* This rank's shard: the elements [*start, *start + length) of the flat
 * parameters, whose padded length (N x length) goes to *total (NULL
 * outputs are skipped). Stage 3: the length is the sum of this rank's
 * shards of the units (each unit padded on its own), *start is the rank's
 * coordinate times it. Returns the length (the same on every rank), or
 * -1 with the error set on NULL. */
OAR_API int64_t oar_zero_shard(const oar_zero *z, int64_t *start, int64_t *total);
/* Stage 3 (src/nn/zero3.c): oar_module_forward(m, x) with m's parameters
 * (a unit: exactly the parameters of one of z's units, in order)
 * all-gathered for the call and freed after it; with grad on, one node
 * whose backward regathers, recomputes and reduce-scatters, as above. A
 * module without parameters needs no wrapping: call oar_module_forward.
 * Every rank of the mesh dim must call it for the same units in the same
 * order, and run backward alike. NULL with the error set: NULL arguments,
 * z not of stage 3, a module whose parameters are not one of z's units
 * ("not wrapped"), the module's own error, a peer that timed out.
 * Collective. */
OAR_API oar_tensor *oar_zero_forward(oar_zero *z, oar_module *m, oar_tensor *x);
/* Stage 3: all-gathers every unit's parameters so that they hold their
 * values (to read, save or evaluate them) until oar_zero_release_params;
 * a no-op for stages 1 and 2. 0 or -1 with the error set. Collective. */
OAR_API int oar_zero_gather_params(oar_zero *z);
/* Stage 3: frees the gathered parameters again (they read as zeros). 0 or
 * -1 with the error set on NULL; a no-op for stages 1 and 2. */
OAR_API int oar_zero_release_params(oar_zero *z);
/* Bytes of parameter values this rank holds now, and (peak, NULL skips)
 * the most since oar_zero_new: stages 1 and 2, the whole parameters plus
 * the shard; stage 3, the shards plus the units gathered at the moment.
 * -1 with the error set on NULL. */
OAR_API int64_t oar_zero_param_bytes(const oar_zero *z, int64_t *peak);
/* Frees z (NULL: no-op); releases the parameters and the shard state. At
 * stage 3 the parameters are left as they are (read as zeros unless
 * gathered). */
OAR_API void oar_zero_free(oar_zero *z);

/* ---- distributed checkpoints (src/dist/checkpoint.c) -------------------- */

/* Saves n named tensors into folder dir (made if missing), as PyTorch's
 * torch.distributed.checkpoint and Paddle's dist.save_state_dict do: each
 * rank writes the shards it owns, once per element, to
 * dir/shard-<generation>-<rank>.safetensors through the save protocol
 * (temporary, fsync, rename), and rank 0 writes dir/index.json last, with
 * each tensor's dtype, global shape, placements and chunks (file, offset,
 * shape). Until the index is renamed into place the folder keeps the
 * checkpoint it held before; rank 0 then removes the older shard files.
 * A dtensor's shard is written by the ranks at coordinate 0 along every
 * mesh dim where it is replicated; Partial placements are reduced to
 * Replicate first (an all-reduce); a plain tensor is written by rank 0
 * (every rank must pass the same value). Names must be unique and
 * non-empty. Collective over every rank of the world (all call it with the
 * same names, in the same order); in a process without oar_dist_init it
 * saves plain tensors alone. 0, or the same error status on every rank:
 * when any rank fails to write, the checkpoint in dir is left as it was. */
OAR_API int oar_dist_checkpoint_save(const char *dir, int n, const char *const *names,
                                     oar_tensor *const *tensors);
/* Loads the tensors named names[] from the checkpoint in dir into
 * tensors[], in place: a dtensor's local shard gets its part of the global
 * value (the chunks that overlap it are read, whatever mesh and
 * placements they were saved with: a checkpoint of 4 ranks loads onto 2,
 * or into one process), a plain tensor the whole value. Each target's
 * global shape and dtype must equal the saved ones; otherwise
 * OAR_ERR_INVALID naming the tensor and both shapes (or dtypes). A name
 * the checkpoint lacks is OAR_ERR_INVALID; a missing, truncated or
 * inconsistent file (a chunk whose shape differs from the index, chunks
 * that do not cover the target) is OAR_ERR_IO naming it. Targets with a
 * Partial placement are refused (load into Replicate and reshard). Reads
 * files only (no communication); gradients are not recorded. Each rank
 * reads whole shard files (those it needs), so it holds one shard file in
 * memory at a time at most per tensor read. 0 or the status. */
OAR_API int oar_dist_checkpoint_load(const char *dir, int n, const char *const *names,
                                     oar_tensor *const *tensors);
/* The whole global value of one saved tensor as a new plain tensor (pool
 * rule), e.g. to inspect a checkpoint in one process; NULL with the error
 * set as oar_dist_checkpoint_load. */
OAR_API oar_tensor *oar_dist_checkpoint_read(const char *dir, const char *name);

/* Bytes of tensor data this rank has handed to all-reduce, all-gather,
 * reduce-scatter, all-to-all and broadcast since the process started
 * (each call's local payload, on every rank of a broadcast), and sent to
 * other ranks in moves between meshes. */
OAR_API int64_t oar_dist_bytes_moved(void);

/* How many op calls on dtensors ran by replicating their inputs because
 * the op has no sharding rule (since the process started). */
OAR_API int64_t oar_dist_fallback_count(void);

#ifdef __cplusplus
}
#endif
#endif

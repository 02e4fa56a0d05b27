/* Automatic parallel strategy: a cost model and a planner (issue 23).
 *
 * Given a model (per-layer cost records read off a traced graph, or built
 * from a transformer's configuration), a global batch size and a cluster
 * description, oar_plan_parallel() searches data x tensor x pipeline x ZeRO
 * degrees, micro-batch counts and recompute, prunes by memory per rank,
 * picks each layer's placement under tensor parallelism by propagation
 * (replicated or sharded activations between layers, the cheaper chain
 * wins, memory breaks ties) and returns the chosen plan, the runners-up
 * and why each pruned family was pruned. docs/internals/plan.md has the
 * model and its limits.
 *
 *     oar_plan_model *m = oar_plan_model_transformer(&(oar_plan_transformer){
 *         .layers = 96, .d_model = 12288, .heads = 96, .seq = 2048, .vocab = 51200});
 *     oar_cluster c;
 *     oar_cluster_preset(&c, "h200", 1024);
 *     oar_plan_result *r = oar_plan_parallel(m, &c, &(oar_plan_options){.global_batch = 1536});
 *     oar_plan_result_print(r, stdout);
 *     oar_plan_result_free(r);
 *     oar_plan_model_free(m);
 *
 * Times are seconds, sizes bytes, rates per second. Every function fails
 * cleanly: NULL or a negative status, with oar_last_error() saying why. */
#ifndef OAR_PLAN_H
#define OAR_PLAN_H

#include <oar/tensor.h>
#include <oar/graph.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the cluster ---------------------------------------------------------- */

/* The smallest GEMM dimensions (2, 4, ..., 512) at which gemm_rate is given. */
#define OAR_PLAN_GEMM_CLASSES 9
OAR_API extern const double oar_plan_gemm_dims[OAR_PLAN_GEMM_CLASSES];
/* The weights (elements, k x n) the two GEMM tables are measured at: gemm_rate at
 * 512 x 512 (1 MiB of f32, held in cache), gemm_rate_wide at 1024 x 1024 (4 MiB, streamed from
 * memory: a GEMM with few rows reads and writes its weight-sized operands at memory speed). */
#define OAR_PLAN_GEMM_WEIGHT (512.0 * 512.0)
#define OAR_PLAN_GEMM_WEIGHT_WIDE (1024.0 * 1024.0)

/* Families of memory-bound ops whose kernels run well below the elementwise add's bandwidth,
 * each calibrated by one representative's forward and backward at 2^18 f32 elements:
 * transcendental (exp, log, tanh, sigmoid, gelu, silu, erf, ...; timed: gelu), normalisation
 * (layer_norm, group_norm, batch_norm; timed: layer_norm over 128 features), softmax (softmax,
 * log_softmax; timed: over 64), select (where; timed: a [64, 64] mask broadcast, as in a causal
 * attention). Other memory-bound ops run at mem_bw. */
typedef enum oar_plan_op_family {
    OAR_PLAN_FAMILY_TRANSCENDENTAL = 0,
    OAR_PLAN_FAMILY_NORM = 1,
    OAR_PLAN_FAMILY_SOFTMAX = 2,
    OAR_PLAN_FAMILY_SELECT = 3,
} oar_plan_op_family;
#define OAR_PLAN_OP_FAMILIES 4
/* Their names ("transcendental", "norm", "softmax", "select"), as the calibration file keys them. */
OAR_API extern const char *const oar_plan_op_family_names[OAR_PLAN_OP_FAMILIES];

/* A homogeneous cluster: nodes of devices_per_node devices. Bandwidths are
 * per device (what one rank can push through its link), latencies per
 * message. */
typedef struct oar_cluster {
    int n_devices;        /* ranks in all; > 0 */
    int devices_per_node; /* > 0; n_devices is a multiple of it, or smaller */
    double mem_bytes;     /* memory per device; > 0 */
    double flops;         /* dense GEMM FLOP/s per device; > 0 */
    double mem_bw;        /* device memory bytes/s (memory-bound ops); > 0 */
    double intra_bw;      /* bytes/s per device inside a node; > 0 */
    double intra_lat;     /* seconds per message inside a node; >= 0 */
    double inter_bw;      /* bytes/s per device across nodes; > 0 */
    double inter_lat;     /* seconds per message across nodes; >= 0 */
    double op_overhead;   /* seconds per op call (launch, dispatch); >= 0 */
    /* Optional, measured by oar_plan_calibrate (0: not modelled). */
    double gemm_rate[OAR_PLAN_GEMM_CLASSES]; /* GEMM FLOP/s at smallest dimension
                             oar_plan_gemm_dims[i] (interpolated in log dimension; beyond the
                             table: its end); all 0: `flops` for every GEMM. All > 0 or all 0 */
    double optim_time_per_param; /* seconds per parameter element of the optimizer step;
                                    0: Adam as 28 bytes an element at mem_bw */
    double sync_lat;      /* seconds a synchronising collective (all-reduce, reduce-scatter,
                             all-gather; not a pipeline's send) waits for the slowest rank, on
                             top of its latency and bandwidth terms, after sync_phase seconds of
                             compute: ranks that share cores with other processes drift apart
                             as they compute; >= 0 */
    double sync_phase;    /* the compute before it: a collective after a shorter phase waits
                             sync_lat x phase / sync_phase; 0: sync_lat after any phase; >= 0 */
    double gemm_rate_wide[OAR_PLAN_GEMM_CLASSES]; /* optional: the same as gemm_rate at a weight
                             of OAR_PLAN_GEMM_WEIGHT_WIDE elements (gemm_rate's weight is
                             OAR_PLAN_GEMM_WEIGHT; between: linear in log weight; beyond: the
                             nearer table). All > 0 (then gemm_rate too) or all 0: gemm_rate for
                             every weight */
    double family_bw[OAR_PLAN_OP_FAMILIES]; /* optional: bytes/s of each op family's forward
                             bytes, its backward counted as two forwards (as the cost model counts
                             every pass): 3 x forward bytes / (forward + backward time); 0: mem_bw */
    /* Optional: memory past the cache (0: not modelled). A step whose working set (the ranks
     * of a node together: parameters, gradients, optimizer state, activations) outgrows the
     * cache they share streams its weights, gradients and optimizer state from memory at every
     * pass; the fraction of that set the cache holds, h = 1 / (1 + (set / cache_bytes)^4),
     * runs at the rates above and the rest at these (a time-weighted blend). A CPU's
     * last-level cache; 0 for a GPU, whose rates above already are memory's. */
    double cache_bytes;   /* the effective cache the ranks of a node share, bytes: the working
                             set the cache half holds; >= 0 (0: not modelled) */
    double mem_bw_cold;   /* bytes/s of elementwise work on data past the cache (gradient
                             accumulation); 0: mem_bw */
    double optim_time_cold; /* optim_time_per_param on state past the cache; 0: the warm one */
    double gemm_rate_cold[OAR_PLAN_GEMM_CLASSES]; /* gemm_rate_wide with each call's weight
                             past the cache; all > 0 or all 0 (0: the warm tables) */
} oar_cluster;

/* Fills c for n_devices of a named kind: "h200" (8 per node, 141 GB,
 * 989 TFLOP/s bf16 dense x 0.5 achieved, 4.8 TB/s, NVLink 450 GB/s,
 * InfiniBand 50 GB/s per GPU), "a100" (the Megatron-LM paper's cluster:
 * 8 per node, 80 GB, 312 TFLOP/s x 0.5, 2 TB/s, NVLink 300 GB/s,
 * InfiniBand 25 GB/s per GPU). 0, or OAR_ERR_INVALID naming the kinds. */
OAR_API int oar_cluster_preset(oar_cluster *c, const char *kind, int n_devices);
/* 0 if c is usable, else OAR_ERR_INVALID naming the first bad field. */
OAR_API int oar_cluster_check(const oar_cluster *c);

/* ---- calibration: measured rates of this machine -------------------------- */

/* What oar_plan_calibrate measures: achieved rates per op family and
 * alpha-beta constants of the collectives (seconds = alpha + bytes * beta
 * for one ring step; see oar_plan_allreduce_time). */
typedef struct oar_plan_calib {
    double matmul_flops;  /* achieved FLOP/s of oar's GEMM (f32) */
    double ew_bw;         /* achieved bytes/s of elementwise kernels */
    double op_overhead;   /* seconds per eager op call */
    double alpha;         /* seconds per message of the MPI collectives here */
    double beta;          /* seconds per byte of them (1 / bandwidth) */
    int ranks;            /* ranks the collectives were measured at (1: not measured) */
    double optim_time;    /* seconds per parameter element of oar's Adam step (0: not measured) */
    double sync;          /* seconds a compute phase and the all-reduce after it take beyond
                             the phase's price at matmul_flops and an all-reduce made back to
                             back: waiting for the slowest rank (0: not measured) */
    double sync_phase;    /* that phase's price at matmul_flops, seconds (0: not measured) */
    double gemm_rate[OAR_PLAN_GEMM_CLASSES]; /* FLOP/s of a linear layer's three training GEMMs
                             (y = x W^T, dx = g W, dW = g^T x; x, g [d, 512], W [512, 512]) at
                             smallest dimension d = oar_plan_gemm_dims[i] (0: not measured) */
    double gemm_rate_wide[OAR_PLAN_GEMM_CLASSES]; /* the same at W [1024, 1024], x, g [d, 1024]
                             (0: not measured) */
    double family_bw[OAR_PLAN_OP_FAMILIES]; /* oar_cluster.family_bw as measured (0: not) */
    /* memory past the last-level cache (oar_cluster.cache_bytes and the cold rates; 0: not
     * measured): an add, an Adam step and the wide GEMM table measured on operands rotated
     * through twice the size the OS reports, and the effective cache: the node working set
     * at which Adam's time per element is halfway from a small set's to that cold one's */
    double cache_bytes;
    double ew_bw_cold;    /* bytes/s of an add on arrays past the cache */
    double optim_time_cold; /* optim_time on a parameter whose state is past the cache */
    double gemm_rate_cold[OAR_PLAN_GEMM_CLASSES]; /* gemm_rate_wide, each call a weight past the cache */
} oar_plan_calib;

/* Measures oar's own kernels (a GEMM, an elementwise add, the per-op cost
 * of a tiny training step, a linear layer's training GEMMs at each
 * smallest dimension of oar_plan_gemm_dims and two weight sizes, each op
 * family's representative forward and backward, an Adam step) and, when
 * oar_dist_init ran with more than one rank, the MPI all-reduce at several
 * sizes (a least-squares fit of alpha and beta), the same add, Adam step
 * and wide GEMMs on operands past the last-level cache (when the OS
 * reports its size, at most 128 MiB), the wait for the slowest
 * rank after a compute phase (sync, sync_phase) and the step's per-op cost
 * on dtensors. Collective then: every
 * rank must call it, and all get the mean of the ranks' figures, so that
 * they plan alike. Fills *out. 0 or a status. */
OAR_API int oar_plan_calibrate(oar_plan_calib *out);
/* Writes / reads a calibration file (JSON, "oar-plan-calibration-2";
 * written atomically; optim_time, sync, sync_phase, gemm_rate,
 * gemm_rate_wide ("gemm_rates_wide"), family_bw (an object
 * "family_bw" keyed by oar_plan_op_family_names) and the cold figures
 * (cache_bytes, ew_bw_cold, optim_time_cold, "gemm_rates_cold") written
 * when measured, > 0). Loading also reads version 1 files, and version 2 files without
 * the later tables, which lack them (left 0), and GEMM tables written
 * before the 2-row class (8 entries from 4 rows: the 2-row class gets the
 * 4-row rate, as those files priced it). 0, or OAR_ERR_IO naming the
 * file and the bad field. */
OAR_API int oar_plan_calib_save(const oar_plan_calib *c, const char *path);
OAR_API int oar_plan_calib_load(oar_plan_calib *c, const char *path);
/* A cluster of n_devices ranks on this machine from a calibration: every
 * rate from c (gemm_rate, gemm_rate_wide, family_bw, optim_time_per_param,
 * sync_lat, sync_phase and the cold figures included), devices_per_node = n_devices (one node), mem_bytes given. */
OAR_API int oar_cluster_from_calib(oar_cluster *out, const oar_plan_calib *c, int n_devices, double mem_bytes);

/* ---- the model: per-layer cost records ------------------------------------ */

/* How a layer can be placed under tensor parallelism. */
typedef enum oar_plan_layer_kind {
    OAR_PLAN_LAYER_REPLICATED = 0, /* runs on replicated input only (norms, softmax, loss) */
    OAR_PLAN_LAYER_POINTWISE = 1,  /* runs on replicated or feature-sharded input alike */
    OAR_PLAN_LAYER_LINEAR = 2,     /* one weight GEMM: column-split (R in, S out) or row-split
                                      (S in, Partial out: an all-reduce), or replicated */
    OAR_PLAN_LAYER_BLOCK = 3,      /* a Megatron pair (attention, MLP, vocab-parallel embedding):
                                      R in, R out, one all-reduce forward and one backward */
} oar_plan_layer_kind;

/* One layer's costs. Per-sample fields scale with the micro-batch size. */
typedef struct oar_plan_layer {
    const char *name;         /* copied by oar_plan_model_add_layer; NULL: "layer<i>" */
    oar_plan_layer_kind kind;
    double flops;             /* forward GEMM FLOPs per sample */
    double bytes;             /* forward bytes per sample through memory-bound ops */
    int n_ops;                /* op calls in the forward (each costs op_overhead) */
    double params;            /* parameters (elements) */
    double act_bytes;         /* bytes per sample kept for backward */
    double in_bytes;          /* the layer's input activation, bytes per sample */
    double out_bytes;         /* its output activation, bytes per sample */
    int tp_max;               /* the largest tensor-parallel degree it splits by (heads,
                                 features); 0: any */
    /* Optional: the shape of its weight GEMMs, for the GEMM rate by smallest dimension
     * (oar_cluster.gemm_rate). 0: unknown (the peak rate). */
    double gemm_rows;         /* GEMM rows per sample (a micro-batch of b samples: b x gemm_rows) */
    double gemm_k, gemm_n;    /* its weight's input and output features (FLOP-weighted over
                                 the layer's weight GEMMs); column split divides n, row split k */
    /* A LINEAR layer that adds its result to an activation made before it (a residual add).
     * Not column-split: its feature-sharded output would make the residual stream sharded, and
     * dist dispatch's pointwise rule keeps it so through every later add (gathers in forward
     * and backward that the layer chain does not price). */
    bool residual;
    /* Optional: the part of `bytes` through ops of each oar_plan_op_family (at
     * oar_cluster.family_bw); the rest runs at mem_bw. Each >= 0, their sum <= bytes. */
    double family_bytes[OAR_PLAN_OP_FAMILIES];
} oar_plan_layer;

typedef struct oar_plan_model oar_plan_model;

/* An empty model; param_bytes: bytes per parameter element as trained
 * (4 for f32, 2 for bf16 mixed precision, whose optimizer then keeps an
 * f32 master copy). NULL on failure. */
OAR_API oar_plan_model *oar_plan_model_new(const char *name, int param_bytes);
OAR_API void oar_plan_model_free(oar_plan_model *m);
/* Appends a copy of *l (fields checked: finite, >= 0). 0 or a status. */
OAR_API int oar_plan_model_add_layer(oar_plan_model *m, const oar_plan_layer *l);
OAR_API int oar_plan_model_num_layers(const oar_plan_model *m);
/* Layer i (borrowed), NULL if out of range. */
OAR_API const oar_plan_layer *oar_plan_model_layer(const oar_plan_model *m, int i);
OAR_API double oar_plan_model_params(const oar_plan_model *m);
OAR_API const char *oar_plan_model_name(const oar_plan_model *m);

/* The layers of a traced forward graph g run at batch size `batch` (its
 * first input's dim 0 when batch <= 0): nodes are grouped into layers by
 * the parameter each reads (module names, "fc1.weight" -> "fc1"); a node
 * reading none joins the layer before it. Per-node FLOPs and bytes come
 * from the traced shapes; a layer with a matmul on a parameter is LINEAR,
 * one of elementwise ops only POINTWISE, others REPLICATED; a LINEAR layer
 * whose GEMM result meets an activation from before it in an elementwise
 * op is `residual`. f32 (4 bytes per parameter). NULL on failure. */
OAR_API oar_plan_model *oar_plan_model_from_graph(const oar_graph *g, int64_t batch);

/* A decoder-only transformer by its configuration (GPT-style, as in
 * Narayanan et al. 2021): an embedding, `layers` x (attention block, MLP
 * block with 4d hidden), a final norm and the vocabulary head tied to the
 * embedding. bf16 mixed precision unless param_bytes says otherwise. */
typedef struct oar_plan_transformer {
    int layers, d_model, heads, seq, vocab;
    int param_bytes; /* 0: 2 (bf16 mixed precision) */
} oar_plan_transformer;
OAR_API oar_plan_model *oar_plan_model_transformer(const oar_plan_transformer *cfg);

/* ---- the cost model -------------------------------------------------------- */

/* Ring all-reduce of `bytes` over n ranks: 2(n-1) alpha + 2(n-1)/n bytes/bw.
 * Reduce-scatter and all-gather are half of it each. n == 1: 0. */
OAR_API double oar_plan_allreduce_time(double bytes, int n, double alpha, double bw);
/* flops / flop_rate + bytes / byte_rate + n_ops * overhead. */
OAR_API double oar_plan_compute_time(double flops, double bytes, int n_ops, const oar_cluster *c);
/* Seconds of a layer's memory-bound forward bytes (per sample, times `samples`): each family's
 * part (l->family_bytes) at c->family_bw (mem_bw where 0), the rest at mem_bw. -1 on NULL
 * (error set). */
OAR_API double oar_plan_memory_time(const oar_plan_layer *l, double samples, const oar_cluster *c);
/* Seconds of `flops` FLOPs of GEMMs whose smallest dimension is `dim`:
 * flops / the rate c->gemm_rate interpolates at dim (linear in log dim
 * between oar_plan_gemm_dims; clamped to the table's ends), or flops /
 * c->flops when c has no gemm_rate or dim <= 0 (unknown). -1 on a NULL
 * cluster (error set). */
OAR_API double oar_plan_gemm_time(double flops, double dim, const oar_cluster *c);
/* The same for GEMMs whose weight has `weight` elements (k x n, this rank's part): the rate at
 * dim from gemm_rate (weight <= OAR_PLAN_GEMM_WEIGHT), gemm_rate_wide (>= OAR_PLAN_GEMM_WEIGHT_WIDE)
 * or between them linearly in log weight; gemm_rate alone when c has no wide table or weight <= 0
 * (unknown). -1 on a NULL cluster (error set). */
OAR_API double oar_plan_gemm_time_weight(double flops, double dim, double weight, const oar_cluster *c);

/* One point of the search space. */
typedef struct oar_plan_config {
    int dp, tp, pp;    /* degrees; dp * tp * pp = devices */
    int zero;          /* 0: none, 1: optimizer state, 2: + gradients, 3: + parameters, over dp */
    int micro_batches; /* per step, per data-parallel rank (gradient accumulation or pipeline) */
    int recompute;     /* 1: every layer's activations recomputed in backward */
} oar_plan_config;

/* What the cost model predicts for one configuration. */
typedef struct oar_plan_estimate {
    double step_time;   /* seconds per optimizer step */
    double compute_time, tp_comm_time, dp_comm_time, pp_time, optim_time; /* its parts; pp_time:
                                                                           bubble and sends */
    double mem;         /* bytes per rank (the fullest pipeline stage) */
    double mem_params, mem_grads, mem_optim, mem_act; /* its parts */
    bool fits;          /* mem <= the cluster's memory per device */
    bool runnable;      /* oar runs it today (ZeRO 1/2 only with data parallelism alone) */
    double accum_time;  /* part of step_time: adding each micro-batch's gradients after the first */
    double cache_fraction; /* the part of a node's working set its cache holds (oar_cluster.
                              cache_bytes): 1 when the cache is not modelled */
} oar_plan_estimate;

/* Estimates configuration *cfg of model m on cluster c at global batch
 * `global_batch` (placements chosen as the planner does). 0 or
 * OAR_ERR_INVALID naming the reason (degrees not matching the devices, a
 * batch the data and micro-batch degrees do not divide, tp beyond a
 * layer's tp_max, pp beyond the layers). */
OAR_API int oar_plan_estimate_config(const oar_plan_model *m, const oar_cluster *c, int64_t global_batch,
                                     const oar_plan_config *cfg, oar_plan_estimate *out);

/* The layout the cost model assumes for *cfg (the placements the planner
 * would choose, as oar_plan_estimate_config prices them), to run the same
 * thing: for each of the n layers (n = oar_plan_model_num_layers(m)),
 * place[i] its placement under tensor parallelism ("replicate", "shard",
 * "column", "row" or "block"; static strings) and stage[i] its pipeline
 * stage (0 .. pp - 1, contiguous). Either may be NULL. 0, or
 * OAR_ERR_INVALID as oar_plan_estimate_config, or naming an n that is not
 * the layer count. */
OAR_API int oar_plan_estimate_layout(const oar_plan_model *m, const oar_cluster *c, int64_t global_batch,
                                     const oar_plan_config *cfg, int n, const char **place, int *stage);

/* ---- the planner ------------------------------------------------------------ */

typedef struct oar_plan_options {
    int64_t global_batch;  /* samples per optimizer step; > 0 */
    int runners_up;        /* plans listed after the chosen one; 0: 5 */
    bool runnable_only;    /* search only what oar runs today (ZeRO 1/2 only with dp alone) */
    int max_micro_batches; /* 0: 64 */
} oar_plan_options;

typedef struct oar_plan_result oar_plan_result;

/* Searches the plans of m on c, prunes those that do not fit and returns
 * the fastest, the runners-up and the pruned families. NULL with an error
 * on bad input, and when no plan fits: the message says so and names the
 * least memory any plan needs. */
OAR_API oar_plan_result *oar_plan_parallel(const oar_plan_model *m, const oar_cluster *c,
                                           const oar_plan_options *opt);
OAR_API void oar_plan_result_free(oar_plan_result *r);
/* Ranked plans: 0 is the chosen one, then the runners-up. Count, and the
 * i-th (borrowed; NULL out of range). */
OAR_API int oar_plan_result_count(const oar_plan_result *r);
OAR_API const oar_plan_config *oar_plan_result_config(const oar_plan_result *r, int i,
                                                      oar_plan_estimate *est);
/* The chosen plan's placement of layer i under tensor parallelism:
 * "replicate", "shard" (pointwise on sharded features), "column", "row"
 * or "block"; NULL out of range. */
OAR_API const char *oar_plan_result_placement(const oar_plan_result *r, int layer);
/* Pruned families (dp x tp x pp x ZeRO): count, and the i-th's text
 * ("dp 8 tp 1 pp 1 zero 0: memory: needs 312.4 GiB per rank, 141.0 GiB
 * available"). */
OAR_API int oar_plan_result_num_pruned(const oar_plan_result *r);
OAR_API const char *oar_plan_result_pruned(const oar_plan_result *r, int i);
/* Configurations evaluated. */
OAR_API int64_t oar_plan_result_evaluated(const oar_plan_result *r);
/* The chosen plan, placements, runners-up and pruned families as text. */
OAR_API int oar_plan_result_print(const oar_plan_result *r, FILE *f);

#ifdef __cplusplus
}
#endif

#endif

/* Static graphs (docs/architecture.md, "Modes"): trace the same C function that runs
 * eagerly into an SSA graph of ops, optimise it with passes, run it from a
 * preallocated arena, save it as a model folder.
 *
 *     static int fwd(void *ctx, oar_tensor *const *in, oar_tensor **out) {
 *         out[0] = oar_module_forward(ctx, in[0]);
 *         return out[0] ? 0 : -1;
 *     }
 *     oar_graph_input_spec x = {.name = "x", .dtype = OAR_F32, .ndim = 2,
 *                               .shape = {-1, 784}, .dim_names = {"N"}};
 *     oar_graph *g = oar_trace(fwd, net, 1, &x, 1, &(oar_trace_options){.module = net});
 *     oar_graph_optimize(g, OAR_PASSES_INFERENCE, 0);
 *     oar_executor *ex = oar_executor_new(g);
 *     oar_tensor *y;
 *     oar_executor_run(ex, &batch, &y);      // y borrowed until the next run
 *
 * Tracing runs the function on symbolic tensors (no storage): every op call
 * with a symbolic input appends a node built from the op's own shape rule
 * (one op, one definition); calls on concrete tensors only (weights, their
 * transposes, scalars) run eagerly and their results become constants. A
 * dynamic dim (-1 in a spec) is traced as a placeholder size; nodes whose
 * attributes carry that size or a multiple of it (reshape targets) are
 * rewritten at run time, and every shape rule is re-run for the new input
 * shapes. Limits: other derived sizes (N/2, N*T) are not symbolic and a
 * constant computed from N (a mean's 1/N) is refused; value-dependent
 * control flow (oar_cond, oar_while_loop on a traced value) becomes a cond
 * or while node owning sub-graphs (see "control flow" below); symbolic
 * tensors must not escape the traced function (or a branch or loop body). */
#ifndef OAR_GRAPH_H
#define OAR_GRAPH_H

#include <oar/autograd.h>
#include <oar/dist.h>
#include <oar/nn.h>
#include <oar/tensor.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct oar_graph oar_graph;
typedef struct oar_executor oar_executor;

/* One input of a traced function. shape[d] = -1 marks a dynamic dim;
 * dim_names[d] names it (dims with one name have one size; NULL gives a
 * fresh name). name NULL gives "input<i>". */
typedef struct oar_graph_input_spec {
    const char *name;
    oar_dtype dtype;
    int ndim;
    int64_t shape[OAR_MAX_DIMS];
    const char *dim_names[OAR_MAX_DIMS];
} oar_graph_input_spec;

/* The traced function: reads n symbolic inputs, writes n_outputs results
 * (owned as op results are) to outputs and returns 0, or non-zero with an
 * error set. */
typedef int (*oar_trace_fn)(void *ctx, oar_tensor *const *inputs, oar_tensor **outputs);

typedef struct oar_trace_options {
    /* optional: names constants and parameter inputs by m's state names */
    oar_module *module;
    /* with module: its parameters become graph inputs (after the data
     * inputs, in state order) instead of constants */
    bool params_as_inputs;
    /* optional: n_outputs names; NULL gives "output<j>" */
    const char *const *output_names;
} oar_trace_options;

/* Traces fn into a new graph (the caller frees it). opt may be NULL. NULL
 * with an error naming the op on failure: a shape error inside fn, an
 * in-place write of a traced value into a concrete tensor, nested tracing,
 * a constant whose shape follows a dynamic dim. */
OAR_API oar_graph *oar_trace(oar_trace_fn fn, void *ctx, int n_inputs,
                             const oar_graph_input_spec *specs, int n_outputs,
                             const oar_trace_options *opt);
/* Traces oar_module_forward(m, x) with one input and one output "y"
 * (constants named by m's state). */
OAR_API oar_graph *oar_trace_module(oar_module *m, const oar_graph_input_spec *spec);
OAR_API void oar_graph_free(oar_graph *g);
/* A deep copy (constants shared: they are read-only). NULL on failure. */
OAR_API oar_graph *oar_graph_clone(const oar_graph *g);

/* Writes a readable dump (one line per node, shapes with symbolic dims;
 * a cond / while node's sub-graphs indented below it) to f. 0 or an error
 * status. */
OAR_API int oar_graph_print(const oar_graph *g, FILE *f);
/* Checks the graph (each input value listed once among the inputs and
 * each listed input an input value, constants holding tensors of their
 * dtype and shape, symbols with trace sizes >= 2, shapes whose dims
 * multiply within int64, topological order, input arities, every shape
 * rule reproducing the recorded shapes; control nodes' sub-graphs in turn
 * and against the node); 0 or OAR_ERR_INVALID naming the value or node. */
OAR_API int oar_graph_verify(const oar_graph *g);

OAR_API int oar_graph_num_nodes(const oar_graph *g);
OAR_API int oar_graph_num_constants(const oar_graph *g);
/* Number of nodes running op `op_name` ("cond" and "while" count control
 * nodes; sub-graphs are not searched). */
OAR_API int oar_graph_count_op(const oar_graph *g, const char *op_name);
OAR_API int oar_graph_num_inputs(const oar_graph *g);
OAR_API int oar_graph_num_outputs(const oar_graph *g);
/* Borrowed names; NULL if i is out of range. */
OAR_API const char *oar_graph_input_name(const oar_graph *g, int i);
OAR_API const char *oar_graph_output_name(const oar_graph *g, int i);
/* Dtype and shape (-1 on dynamic dims) of input/output i; returns the
 * rank, or -1 if i is out of range. */
OAR_API int oar_graph_input_shape(const oar_graph *g, int i, oar_dtype *dtype, int64_t *shape);
OAR_API int oar_graph_output_shape(const oar_graph *g, int i, oar_dtype *dtype, int64_t *shape);

/* Turns every graph input whose name is a parameter of m into a constant
 * holding that parameter's current value (retained). Returns the number
 * turned, or a negative status. */
OAR_API int oar_graph_freeze(oar_graph *g, oar_module *m);

/* ---- value-dependent control flow --------------------------------------------
 * Callbacks are oar_fn (include/oar/autograd.h): read in[0..n_in-1]
 * (borrowed), write n_out op results to out[], return 0 or non-zero with an
 * error set. Eagerly, the functions run on real values; gradients flow
 * through the branch taken and through every loop iteration (ordinary
 * autograd).
 * While tracing, a traced predicate (oar_cond) or a traced loop variable
 * (oar_while_loop) records one node instead: each callback is traced once
 * on symbolic inputs into a sub-graph (then/else, cond/body); values of the
 * enclosing trace or concrete tensors a callback reads (through ctx) become
 * extra inputs of the node (captures), so nesting works to any depth. out[]
 * then get symbolic results. With a traced predicate both branches must
 * give the same dtypes and shapes; a traced body must keep every loop
 * variable's dtype and shape (else the trace fails naming the variable and
 * both shapes); at most 16 outputs / loop variables, and a sub-graph with
 * at most 64 inputs. The executor runs the branch taken / the loop
 * (max_iters is kept and checked at run time, with eager's error).
 * oar_graph_append_backward differentiates a cond node into a cond of the
 * branches' gradients (which differentiates again), and a while node into
 * loops that count the trips and pull gradients back one body step at a
 * time, recomputing that step's variables from the start (O(n^2) body
 * steps for n trips, nothing stored per trip); nested control flow is
 * differentiated alike. A loop whose
 * variables are all concrete runs eagerly even while tracing; if its
 * predicate then reads a traced value the call fails: make that value a
 * loop variable. */

/* Runs then_fn if pred (one real element) is non-zero, else else_fn, on
 * in[0..n_in-1]; out[0..n_out-1] get the branch's results (pool rule, as op
 * results). 0, or an error status with out[] all NULL: a NULL callback, a
 * predicate that is NULL, complex, not one element or traced, a failing
 * branch, a branch leaving an output NULL. */
OAR_API int oar_cond(oar_tensor *pred, oar_fn then_fn, oar_fn else_fn, void *ctx, int n_in,
                     oar_tensor *const *in, int n_out, oar_tensor **out);
/* vars = init; while (cond_fn(vars) -> one-element predicate is non-zero)
 * vars = body_fn(vars) (n_vars in, n_vars out); out[] gets the final vars
 * (pool rule; an unchanged init is returned with a new reference owned as
 * op results are). Each iteration runs in its own pool. Every body result
 * must keep its variable's dtype and shape. max_iters >= 0 bounds the trip
 * count (exceeding it is an error), -1: no bound. 0, or an error status
 * with out[] NULL naming the iteration, the variable and both shapes. */
OAR_API int oar_while_loop(oar_fn cond_fn, oar_fn body_fn, void *ctx, int n_vars,
                           oar_tensor *const *init, int64_t max_iters, oar_tensor **out);

/* ---- backward on the graph ---------------------------------------------------- */

/* Appends the backward pass of output `output` (weighted by ones) with
 * respect to inputs wrt[0..n_wrt-1] (input indices), built from the ops'
 * own gradient rules, and adds one output "grad:<input name>" per entry
 * (zeros for an input the output does not depend on). Returns the index of
 * the first new output, or a negative status (an op without a gradient
 * rule, an output that depends on none of the inputs). */
OAR_API int oar_graph_append_backward(oar_graph *g, int output, int n_wrt, const int *wrt);
/* A traced SGD step: for every input x with a "grad:x" output, appends an
 * output "next:x" = x - lr * grad:x. Feeding next:x back as x trains.
 * Returns the number of outputs added, or a negative status. */
OAR_API int oar_graph_append_sgd(oar_graph *g, double lr);
/* A traced AdamW step, as torch.optim.AdamW and oar_adamw_new (Adam when
 * weight_decay is 0): for every input x with a "grad:x" output, adds the
 * state inputs "adam_m:x" and "adam_v:x" (x's dtype and shape; zeros
 * before the first step) and one input "adam_step" (float64, 0-d: the
 * steps taken so far), and the outputs "next:x", "next:adam_m:x",
 * "next:adam_v:x" and "next:adam_step". Feeding each next:* back as its
 * input trains (oar_executor_update_in_place does it in place). Returns
 * the number of outputs added (0 without gradients), or a negative status
 * (invalid hyper-parameters: lr > 0, betas in [0, 1), eps >= 0,
 * weight_decay >= 0; out of memory). */
OAR_API int oar_graph_append_adamw(oar_graph *g, double lr, double beta1, double beta2, double eps,
                                   double weight_decay);

/* ---- passes ------------------------------------------------------------------- */

typedef enum oar_pass_list {
    OAR_PASSES_TRAINING = 0,  /* dce, cse, constant folding, algebraic simplification, schedule */
    OAR_PASSES_INFERENCE = 1, /* the above, drop dropout, fold batch norm */
} oar_pass_list;

enum {
    OAR_PASS_PRINT = 1u << 0, /* prints the graph to stderr after each pass */
    /* run the "amp" ("amp_f16") pass once before the list (include/oar/amp.h) */
    OAR_PASS_AMP_BF16 = 1u << 1,
    OAR_PASS_AMP_F16 = 1u << 2,
};

/* Runs a pass list until the graph stops changing (OAR_DEBUG=2 also
 * prints after each pass), then dce, cse and simplify inside the
 * sub-graphs of control nodes. 0 or an error status; on error the graph is
 * left valid but partly optimised. */
OAR_API int oar_graph_optimize(oar_graph *g, oar_pass_list list, unsigned flags);
/* Runs one pass by name: "dce", "cse", "constant_fold", "simplify",
 * "drop_dropout", "fold_batch_norm", "schedule" (moves each node whose
 * outputs only leave the graph, with the producers feeding only it, to just
 * after the last node touching its inputs: a train step's `next:w` update
 * then runs as soon as grad:w is made and w is read no more), "amp" and
 * "amp_f16" (inserts autocast's casts to bf16 / f16 by the lists of
 * include/oar/amp.h into a graph traced without autocast; graph outputs
 * keep their dtypes). Returns the number of changes (>= 0),
 * or a negative status (unknown name: OAR_ERR_INVALID). */
OAR_API int oar_graph_run_pass(oar_graph *g, const char *name);

/* ---- executor ----------------------------------------------------------------- */

/* A runner of g (g must outlive it and not change while it lives). One
 * executor is used by one thread at a time. NULL on failure. */
OAR_API oar_executor *oar_executor_new(const oar_graph *g);
OAR_API void oar_executor_free(oar_executor *ex);
/* Runs the graph on CPU inputs (dtypes as the graph's; shapes matching,
 * dynamic dims free). outputs[j] are borrowed from the executor and valid
 * until its next run or free. A new input shape plans an arena once (the
 * plans of the last four shapes are kept); later runs with that shape
 * allocate no storage. Random ops draw new values on each run. 0 or an
 * error status (naming the input and both shapes, or the failing node). */
OAR_API int oar_executor_run(oar_executor *ex, oar_tensor *const *inputs, oar_tensor **outputs);
/* Bytes of the arena planned for the last input shape (the planned peak of
 * intermediate memory), and the bytes the same values would take without
 * buffer reuse (the sub-graphs of cond / while nodes run from arenas of
 * their own, not counted here). -1 before the first run. */
OAR_API int64_t oar_executor_planned_bytes(const oar_executor *ex);
OAR_API int64_t oar_executor_unplanned_bytes(const oar_executor *ex);
/* How many times the executor planned an arena (once per input shape,
 * again for a shape whose plan was evicted). */
OAR_API int oar_executor_num_plans(const oar_executor *ex);

/* Donation (JAX's donate_argnums): output `output` is written into the
 * caller's tensor for input `input` (same dtype and shape, dynamic dims
 * included). After each run inputs[input] holds the output's value and
 * outputs[output] is inputs[input] (the caller's tensor). The executor
 * computes it in place -- no arena slot -- when the node making it is
 * elementwise, reads the input only at the element it writes, and is the
 * last to read the input (a train step's next:w after the "schedule"
 * pass); otherwise it is computed in the arena and copied into the input
 * at the end of the run (oar_executor_donated_in_place tells which). An
 * input or output donated once cannot be donated again. Plans made before
 * are dropped. 0 or OAR_ERR_INVALID naming the indices and shapes. */
OAR_API int oar_executor_donate(oar_executor *ex, int input, int output);
/* Marks output j as not wanted: its buffer is reused once the nodes that
 * read it are done, and each run sets outputs[j] to NULL (the grad:*
 * outputs of a train step whose next:* outputs are used). Plans made
 * before are dropped. 0 or OAR_ERR_INVALID. */
OAR_API int oar_executor_discard_output(oar_executor *ex, int output);
/* For a train step from oar_graph_append_sgd: donates every "next:x"
 * output to input "x" and discards every "grad:x" output that has one, so
 * parameters are updated in place and no gradient outlives its update.
 * Returns the number of donated outputs, or a negative status. */
OAR_API int oar_executor_update_in_place(oar_executor *ex);
/* Whether donated output j is computed in place by the current plan: 1 in
 * place, 0 copied into the input at the end of a run, or a negative status
 * (NULL, j out of range or not donated, no run yet). */
OAR_API int oar_executor_donated_in_place(const oar_executor *ex, int output);

/* ---- compiled kernels (src/compiler/) ---------------------------------------
 * Groups the fusible nodes of ex's graph (elementwise and broadcast chains,
 * the views between them, reductions with their inputs and outputs, the
 * rows of softmax and layer_norm) into kernels, writes C for each (one
 * function per kernel; OAR_DEBUG=1 prints it), compiles them with $CC
 * (else cc) into a shared library cached on disk ($OAR_CACHE_DIR) and runs
 * them from then on; GEMM, conv and the other ops stay library calls.
 * Symbolic dims are kernel arguments: a new batch size never recompiles.
 * Plans made before are dropped. Returns 0 (also when there is nothing to
 * fuse, and when no C compiler exists: the graph then runs unfused, which
 * is said once on stderr), or an error status (out of memory, code that
 * does not compile, a cache directory that cannot be written). */
OAR_API int oar_executor_compile(oar_executor *ex);
/* Whether compiled kernels run (false before oar_executor_compile, with
 * nothing to fuse, without a C compiler, or for NULL). */
OAR_API bool oar_executor_is_compiled(const oar_executor *ex);
/* Kernel launches per run: compiled kernels plus the nodes that run their
 * library kernel (views launch nothing). A negative status for NULL. */
OAR_API int oar_executor_num_kernels(const oar_executor *ex);
/* The generated C (borrowed, valid while ex lives), or NULL when nothing
 * is compiled. */
OAR_API const char *oar_executor_kernel_source(const oar_executor *ex);

/* ---- saved models ------------------------------------------------------------- */

/* Writes a saved model into `dir` (created if needed), committed as a
 * whole: the constants to a new weights file of a unique name
 * (`dir`/weights.<pid>.<n>.safetensors), then `dir`/model.json (the graph,
 * format version 3; cond / while nodes nest their sub-graphs), which names
 * that file with its size and crc32 and is renamed into place last; every
 * file goes through the save protocol of <oar/io.h> (temporary, fsync,
 * rename, folder fsync). After a crash at any point the folder loads as
 * the old model or the new one; concurrent saves to one folder each
 * succeed, the last to rename model.json wins. The weights the old
 * model.json named, and what dead writers left, are removed. 0 or an error
 * status (on failure the old model stays). */
OAR_API int oar_graph_save(const oar_graph *g, const char *dir);
/* Loads a folder written by oar_graph_save (or by an older oar: format
 * versions 1 and 2, with a fixed weights.safetensors and no manifest, are
 * read as they are); a new graph. NULL with an error naming the file and
 * the problem: missing or corrupt file, unsupported version, a version-3
 * model.json without its "weights" record or whose weights file is missing or does not
 * match its size and crc32, unknown op, missing weight, weight of the wrong
 * shape or dtype, a symbol whose trace size is not a whole number in
 * [2, 2^31), an input value the inputs do not list, a node whose shape
 * rule disagrees with the recorded shapes, a malformed sub-graph of a
 * cond / while node (named by its node and branch). */
OAR_API oar_graph *oar_graph_load(const char *dir);

/* ---- static auto parallel (docs/internals/dist.md) ------------------------------
 * A traced program (forward, oar_graph_append_backward, an optimizer step)
 * with a few annotated inputs or constants is completed (placements for
 * every value, from the sharding rules eager dtensors use) and partitioned
 * into this rank's program: local shapes, and explicit collective nodes
 * ("dist.all_reduce", "dist.all_gather", "dist.reduce_scatter",
 * "dist.shard", "dist.reshard") where a consumer needs other placements
 * than its producer gives. The partitioned graph runs in the executor like
 * any graph (memory plan, oar_executor_compile); every rank of the mesh
 * runs its own at once, since the collectives pair up across ranks.
 *
 *     oar_graph_annotate(g, "x", mesh, (oar_placement[]){oar_shard(0)});   // data parallel
 *     oar_graph_complete(g, mesh);
 *     oar_graph *local = oar_graph_partition(g, mesh);
 *     oar_executor *ex = oar_executor_new(local);   // fed this rank's shard of x
 *
 * Unannotated inputs and constants replicate (an input "prefix:x", such as
 * AdamW's "adam_m:x", takes the placements of annotated x of its shape);
 * ops without a sharding rule replicate their inputs and outputs. Where
 * the placements leave a choice, the one moving fewer bytes is taken: a
 * Partial value that one consumer needs Replicate is reduced once where it
 * is made, for all its consumers (a gradient that grad:w returns whole is
 * not reduced a second time, scaled by lr, for its update). Graph
 * outputs are made Replicate, except "grad:x" and "next:x" (of x's shape),
 * which keep input x's placements so that a train step's updates feed back
 * as this rank's shards. Not handled yet: dynamic dims, control-flow nodes,
 * random ops (each rank draws for its shard, so results differ from the
 * unpartitioned graph). Placements are saved with a graph (oar_graph_save),
 * but mesh ids hold in one process only: annotate a loaded graph again
 * before completing it. */

/* Places input or constant `name` of g on `mesh` with one placement per
 * mesh dim (Shard(d) or Replicate; a tensor dim sharded once). 0, or
 * OAR_ERR_INVALID naming the value (unknown name, a placement the shape
 * cannot take, Partial, this rank outside the mesh). */
OAR_API int oar_graph_annotate(oar_graph *g, const char *name, oar_mesh *mesh, const oar_placement *placements);
/* Gives every value of g placements on `mesh` (oar_graph_print shows them:
 * `float32[8, 16] [S(0),R]`). Again after a change of the graph or of the
 * annotations. 0 or an error status: a value annotated on another mesh
 * (mesh mismatch), dynamic dims or control flow (OAR_ERR_UNSUPPORTED). */
OAR_API int oar_graph_complete(oar_graph *g, oar_mesh *mesh);
/* This rank's program of completed graph g (a new graph, the caller frees
 * it; g unchanged): inputs of local shapes (feed this rank's shards), the
 * constants sliced, collective nodes inserted, outputs as said above. NULL
 * with an error: not completed (a value without placements, such as a node
 * added since), or completed for another mesh. */
OAR_API oar_graph *oar_graph_partition(const oar_graph *g, oar_mesh *mesh);
/* The number of collective nodes named `name` ("dist.all_reduce", ...; NULL:
 * all of them) in g, or a negative status. */
OAR_API int oar_graph_count_collectives(const oar_graph *g, const char *name);
/* The placements of input, constant or output `name` into placements[]
 * (room for OAR_MESH_MAX_DIMS): returns the mesh ndim, 0 when the value has
 * none (not completed), or a negative status (unknown name). */
OAR_API int oar_graph_value_placements(const oar_graph *g, const char *name, oar_placement *placements);
/* Saves this rank's partitioned graph to `dir`/rank<r> (oar_graph_save);
 * rank 0 writes `dir`/dist_index.json (world size, mesh shape). Collective
 * over the mesh (which must span the ranks that save): every rank returns
 * 0 only when all saved. */
OAR_API int oar_graph_save_dist(const oar_graph *part, const char *dir, oar_mesh *mesh);
/* Loads this rank's graph saved by oar_graph_save_dist, its collectives
 * and placements pointed at `mesh`. NULL with an error: a missing or
 * malformed index, a world of another size than the one that saved, a mesh
 * of another shape (mesh mismatch), or what oar_graph_load refuses. */
OAR_API oar_graph *oar_graph_load_dist(const char *dir, oar_mesh *mesh);

#ifdef __cplusplus
}
#endif
#endif

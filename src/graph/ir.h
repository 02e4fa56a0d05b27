/* Internal graph IR: SSA values and nodes over the op table (src/ops/op.h),
 * shared by the tracer, the passes, the serializer, the compiler and the
 * executor (src/exec/). */
#ifndef OARI_GRAPH_IR_H
#define OARI_GRAPH_IR_H

#include "../ops/op.h"
#include "../ops/custom_op.h" /* oari_gnode_flags */
#include <oar/graph.h>
#include <oar/io.h> /* oar_tensor_dict: oari_graph_from_json */
#include <oar/dist.h> /* oar_placement: a value's dist slot */

#define OARI_MAX_SYMS 8
#define OARI_GMAX_OUT 16   /* outputs of a node: OARI_MAX_OUT for ops, more for control nodes */

/* Graph-only node kinds past the op table (never dispatched): control flow
 * owning two sub-graphs (control.c; src/exec/exec_control.c runs them). A cond node reads
 * [pred, operands..., captures...] and runs sub[0] (then) or sub[1] (else)
 * on [operands..., captures...]; a while node reads [vars..., captures...],
 * runs sub[0] (cond: one predicate out) and sub[1] (body: the vars out) on
 * them, attrs.i[0] = max_iters (-1: no bound). Sub-graphs share the top
 * graph's symbols and hold no constants (concrete tensors are captured from
 * the top graph as inputs). */
#define OARI_OP_COND ((oari_op)(OARI_OP_COUNT + 0))
#define OARI_OP_WHILE ((oari_op)(OARI_OP_COUNT + 1))

typedef enum oari_vkind {
    OARI_V_NODE = 0,   /* produced by a node */
    OARI_V_INPUT = 1,  /* a graph input */
    OARI_V_CONST = 2,  /* a constant tensor held by the graph */
} oari_vkind;

/* A value: dtype and shape as traced; sym[d] >= 0 marks dim d symbolic
 * (shape[d] then holds the symbol's trace size). */
typedef struct oari_gvalue {
    oari_vkind kind;
    oar_dtype dtype;
    int ndim;
    int64_t shape[OAR_MAX_DIMS];
    int8_t sym[OAR_MAX_DIMS];
    int32_t smul[OAR_MAX_DIMS]; /* dim d = smul[d] * symbol (a flattened N*5) */
    int producer, out_index;   /* kind NODE: the node and which of its outputs */
    oar_tensor *constant;      /* kind CONST: owned reference */
    char *name;                /* inputs and constants; NULL otherwise */
    void *dist;                /* placements (an oari_gdist, owned; dist_static.c), or NULL */
} oari_gvalue;

/* A node: the op, the attributes it was called with, and value ids.
 * isym[k] >= 0: integer attribute k is imul[k] times that symbol's size. */
typedef struct oari_gnode {
    oari_op op;
    oari_attrs attrs;
    int8_t isym[OARI_MAX_IATTR];
    int32_t imul[OARI_MAX_IATTR];
    int n_in, n_out;
    int *in;                   /* n_in value ids; -1 for an absent optional input */
    int out[OARI_GMAX_OUT];
    bool dead;                 /* marked by a pass; removed by oari_graph_compact */
    int segment;               /* recompute segment traced inside oar_checkpoint; 0: none */
    bool recompute;            /* a copy made by graph backward to recompute a segment */
    oar_graph *sub[2];         /* control nodes: then/else or cond/body (owned); NULL otherwise */
} oari_gnode;

static inline bool oari_is_ctrl(oari_op op) { return (unsigned)op >= OARI_OP_COUNT; }
/* Definitions standing for the control nodes (name, opaque, no rules: the
 * graph code handles them itself), so flag tests on any node are safe. */
OARI_HIDDEN extern const oari_op_def oari_ctrl_defs[2];
/* Node n's op definition: the op table's, or a control node's stand-in. */
static inline const oari_op_def *oari_gnode_def(const oari_gnode *n) {
    return oari_is_ctrl(n->op) ? &oari_ctrl_defs[n->op - OARI_OP_COUNT] : oari_op_defs[n->op];
}
/* Node n's flags as passes read them: its definition's, plus OARI_F_RANDOM
 * for a call of a custom op registered as random (one op row serves every
 * custom op, so that flag lives in the registry). */
static inline unsigned oari_gnode_flags(const oari_gnode *n) {
    unsigned f = oari_gnode_def(n)->flags;
    if (n->op == OARI_OP_custom && (oari_custom_flags_of(&n->attrs) & OAR_CUSTOM_RANDOM)) f |= OARI_F_RANDOM;
    return f;
}

typedef struct oari_gsym {
    char *name;
    int64_t trace_size;
} oari_gsym;

struct oar_graph {
    oari_gvalue *values;
    int n_values, cap_values;
    oari_gnode *nodes;
    int n_nodes, cap_nodes;
    int *inputs, n_inputs, cap_inputs;
    int *outputs, n_outputs;
    char **output_names;
    oari_gsym syms[OARI_MAX_SYMS];
    int n_syms;
};

/* Installs the tracer's dispatch hooks (src/init/, at start-up). */
OARI_HIDDEN void oari_graph_install(void);
OARI_HIDDEN oar_graph *oari_graph_new(void);
/* New value ids (or -1 with an error). */
OARI_HIDDEN int oari_graph_add_value(oar_graph *g, oari_vkind kind, oar_dtype dtype, int ndim,
                                     const int64_t *shape);
/* A constant value holding t (retained), named `name` (copied; NULL: "c<id>"). */
OARI_HIDDEN int oari_graph_add_const(oar_graph *g, oar_tensor *t, const char *name);
/* Appends a node; its outputs get new values with the given metas. Returns
 * the node index or -1. */
OARI_HIDDEN int oari_graph_add_node(oar_graph *g, oari_op op, const oari_attrs *attrs, int n_in,
                                    const int *in, int n_out, const oari_meta *out);
/* Reorders the nodes: new node i is old node order[i] (a permutation the
 * caller keeps topological); producers follow. 0 or OAR_ERR_NOMEM. */
OARI_HIDDEN int oari_graph_reorder(oar_graph *g, const int *order);
/* Appends value v (kind OARI_V_INPUT, named) to the graph inputs. 0 or
 * OAR_ERR_NOMEM. */
OARI_HIDDEN int oari_graph_add_input(oar_graph *g, int v);
/* The same as oari_graph_add_node, placed at index `at` (nodes from there on move up one); the
 * caller keeps the order topological. Returns at or -1. */
OARI_HIDDEN int oari_graph_insert_node(oar_graph *g, int at, oari_op op, const oari_attrs *attrs, int n_in,
                                       const int *in, int n_out, const oari_meta *out);
/* Replaces every use of value `from` (node inputs, graph outputs) by `to`. */
OARI_HIDDEN void oari_graph_replace_uses(oar_graph *g, int from, int to);
/* Number of uses of each value (node inputs of live nodes and graph
 * outputs) into counts[n_values]. */
OARI_HIDDEN void oari_graph_use_counts(const oar_graph *g, int *counts);
/* Removes dead nodes and values nothing refers to; renumbers. 0 or NOMEM. */
OARI_HIDDEN int oari_graph_compact(oar_graph *g);
/* The symbol whose trace size divides `size` (a positive multiple k of
 * it: *mul = k; mul may be NULL), or -1. */
OARI_HIDDEN int oari_graph_sym_of(const oar_graph *g, int64_t size, int32_t *mul);
/* Sets node n's isym/imul from its integer attributes. */
OARI_HIDDEN void oari_graph_mark_attr_syms(const oar_graph *g, oari_gnode *n);
/* Sets v's sym[] from its shape. */
OARI_HIDDEN void oari_graph_mark_syms(const oar_graph *g, oari_gvalue *v);
/* A symbolic tensor (no storage) with v's dtype and traced shape. */
OARI_HIDDEN oar_tensor *oari_graph_symbolic(const oari_gvalue *v);
/* True if the value is a constant whose elements all equal x. */
OARI_HIDDEN bool oari_graph_const_is(const oar_graph *g, int v, double x);
/* Marks the node dead; its outputs must have no uses left. */
OARI_HIDDEN void oari_graph_kill(oar_graph *g, int node);
OARI_HIDDEN oar_dtype oari_dtype_from_name(const char *name);
/* An op id by name, control nodes ("cond", "while") included; -1 if none. */
OARI_HIDDEN int oari_graph_op_lookup(const char *name);
/* A new empty graph with g's symbols (a sub-graph of g); NULL on failure. */
OARI_HIDDEN oar_graph *oari_graph_new_sub(const oar_graph *g);
/* The graph a model.json text (len bytes) describes, its constants from w,
 * checked and verified as oar_graph_load does but for the manifest (the
 * file layer's: the weights record); jfile and wfile name the files in
 * messages. NULL with an error. For the fuzzers (fuzz/fuzz_graph_json.c). */
OARI_HIDDEN oar_graph *oari_graph_from_json(const char *text, size_t len, const oar_tensor_dict *w,
                                            const char *jfile, const char *wfile);

/* ---- tracing onto an existing graph (src/graph/trace.c) ------------------ */
/* Starts tracing onto g on this thread (g's constants map to their values,
 * grad mode off); NULL with an error if the thread already traces. */
OARI_HIDDEN void *oari_trace_attach(oar_graph *g);
OARI_HIDDEN void oari_trace_detach(void *tracer);
/* Marks t as standing for value v of the graph being traced. */
OARI_HIDDEN void oari_trace_bind(oar_tensor *t, int v);
/* The value t stands for (a concrete t becomes a constant, a value of an
 * enclosing trace a capture), or -1. */
OARI_HIDDEN int oari_trace_value_of(oar_tensor *t);
/* Nested tracing into a sub-graph (control.c): the current tracer's graph;
 * whether t is a value of the current trace or of one enclosing it; a
 * child tracer onto sub made current (NULL on failure), its captures (the
 * enclosing graph's value ids and the sub-graph inputs standing for them,
 * in capture order; borrowed), and its end (the parent is current again). */
OARI_HIDDEN oar_graph *oari_trace_graph(void);
OARI_HIDDEN bool oari_trace_is_traced(const oar_tensor *t);
OARI_HIDDEN void *oari_trace_push(oar_graph *sub);
OARI_HIDDEN int oari_trace_captures(void *tracer, const int **outer, const int **inner);
OARI_HIDDEN void oari_trace_pop(void *tracer);

/* ---- gradients on the graph (backward.c, control.c) ---------------------- */
/* Calls the gradient rules of g's nodes [0, n0) in reverse on t[] (tensors
 * standing for g's values, traced onto the current graph), accumulating
 * gradients in gr[] (pool-owned); req[v]: value v needs a gradient. With
 * emit (g itself, being traced onto), the nodes of each recompute segment
 * are copied onto it just before the segment's gradients, and those read
 * the copies: the originals' outputs die after the forward pass. */
OARI_HIDDEN int oari_graph_backward_nodes(const oar_graph *g, int n0, const bool *req, oar_tensor **t,
                                          oar_tensor **gr, oar_graph *emit);
/* The gradient of cond node n (in[]: its inputs' tensors, gout[] its
 * outputs' gradients or NULL): a cond node whose branches are the vjps of
 * n's, traced onto the current graph; sets gin[k] for every needs[k]. */
OARI_HIDDEN int oari_cond_grad(const oari_gnode *n, oar_tensor *const *in, oar_tensor *const *gout,
                               const bool *needs, oar_tensor **gin);
/* The same for while node n: loops counting the trips and running the
 * body's vjp backwards, recomputing each step's variables from the start. */
OARI_HIDDEN int oari_while_grad(const oari_gnode *n, oar_tensor *const *in, oar_tensor *const *gout,
                                const bool *needs, oar_tensor **gin);

/* ---- passes (src/graph/passes/, one file each) --------------------------- */
/* Each returns the number of changes (>= 0) or a negative status. */
OARI_HIDDEN int oari_pass_dce(oar_graph *g);
OARI_HIDDEN int oari_pass_cse(oar_graph *g);
OARI_HIDDEN int oari_pass_constant_fold(oar_graph *g);
OARI_HIDDEN int oari_pass_simplify(oar_graph *g);
OARI_HIDDEN int oari_pass_drop_dropout(oar_graph *g);
OARI_HIDDEN int oari_pass_fold_batch_norm(oar_graph *g);
OARI_HIDDEN int oari_pass_schedule(oar_graph *g);
/* the predictor's: quantized linear layers into qlinear nodes (passes/fuse_qlinear.c) */
OARI_HIDDEN int oari_pass_fuse_qlinear(oar_graph *g);
/* the predictor's: f32 convs on constant weights onto weights packed once (passes/prepack_conv.c) */
OARI_HIDDEN int oari_pass_prepack_conv(oar_graph *g);
/* the same, packing convs whose input batch is dynamic for `batch` (>= 1;
 * the pass by name uses 1) */
OARI_HIDDEN int oari_pass_prepack_conv_at(oar_graph *g, int64_t batch);
/* the predictor's: max pools whose indices no one reads onto max_pool2d_values (passes/pool_values.c) */
OARI_HIDDEN int oari_pass_pool_values(oar_graph *g);
/* autocast's casts (include/oar/amp.h) to bf16 / f16 (passes/amp.c) */
OARI_HIDDEN int oari_pass_amp(oar_graph *g);
OARI_HIDDEN int oari_pass_amp_f16(oar_graph *g);

/* ---- static auto parallel (src/graph/dist_static.c) ---------------------- */
/* What a value's dist slot holds: the mesh (its id in this process and
 * ndim) and one placement per mesh dim of the global value. Set by
 * oar_graph_annotate and oar_graph_complete, kept by clone, compact and the
 * serializer ("dist": [mesh, ndim, (kind, dim, reduce) per mesh dim,
 * annotated]). */
typedef struct oari_gdist {
    int mesh, ndim;
    oar_placement p[OAR_MESH_MAX_DIMS];
    bool annotated;   /* set by oar_graph_annotate (completion keeps it), not derived */
} oari_gdist;
/* Frees a dist slot (NULL is fine). */
OARI_HIDDEN void oari_gdist_free(void *d);
/* A copy of a dist slot into *to (NULL for NULL); 0 or OAR_ERR_NOMEM. */
OARI_HIDDEN int oari_gdist_dup(const void *d, void **to);
/* Prints " [S(0),R]" for a value with placements; nothing otherwise. */
OARI_HIDDEN void oari_gdist_print(const void *d, FILE *f);

/* Memory planner (src/graph/passes/memplan.c): buffers with a size and a
 * live range [first, last] (node indices, inclusive) get offsets (64-byte
 * aligned) so that buffers live at once never overlap. Returns the arena
 * size in bytes; *unplanned gets the sum of the aligned sizes. */
typedef struct oari_membuf {
    int64_t size, offset;
    int first, last;
} oari_membuf;
OARI_HIDDEN int64_t oari_memplan(oari_membuf *bufs, int n, int64_t *unplanned);

#endif

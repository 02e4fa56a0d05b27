/* Internal executor: running a graph (exec.c) with its control nodes
 * (exec_control.c). It sits above the compiler, whose fused kernels it
 * runs, and below infer. */
#ifndef OARI_EXEC_H
#define OARI_EXEC_H

#include "../compiler/compiler.h"
#include "../graph/ir.h"

/* ---- control nodes in the executor (exec_control.c) ------------ */
typedef struct oari_ctrl_exec oari_ctrl_exec;
/* Output tensors (symbolic) of control node n for the symbol sizes given,
 * into sym[n->out[j]]; 0 or NOMEM. */
OARI_HIDDEN int oari_exec_control_shapes(const oar_graph *g, const oari_gnode *n,
                                         const int64_t *sym_vals, oar_tensor **sym);
/* Runs control node n (index `node`) on in[0..n_in-1], writing out[0..n_out-1]
 * (the planned buffers); *state holds its sub-graph executors, made on first
 * use. 0 or an error status naming the node. */
OARI_HIDDEN int oari_exec_control(oari_ctrl_exec **state, const oari_gnode *n, int node,
                                  oar_tensor *const *in, oar_tensor *const *out);
OARI_HIDDEN void oari_exec_control_free(oari_ctrl_exec *state);
/* dst <- src, same dtype and shape, any strides, outside autograd (dst may
 * be a parameter): the executor's copies of inputs and results. 0 or a
 * status. */
OARI_HIDDEN int oari_exec_copy(oar_tensor *dst, oar_tensor *src);

/* The executor side (exec.c): ex's compiled kernels (borrowed;
 * NULL when uncompiled), and running ex with the kernels of f, compiled
 * for the same graph by another executor (predictors share one). */
OARI_HIDDEN oari_fusion *oari_executor_fusion(const oar_executor *ex);
OARI_HIDDEN int oari_executor_use_fusion(oar_executor *ex, oari_fusion *f);
/* Benchmarks: while ns is set, each run adds every node's time (a compiled
 * kernel's at its root) into ns[node], n_nodes entries; NULL stops. */
OARI_HIDDEN void oari_executor_time_nodes(oar_executor *ex, double *ns);

#endif

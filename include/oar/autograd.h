/* Reverse-mode automatic differentiation to any order: requires_grad on
 * leaves, oar_backward into .grad, oar_grad (with create_graph, so results
 * can be differentiated again) and the functional transforms vjp, jvp,
 * jacobian, hessian and hvp.
 *
 * Example:
 *     oar_tensor_set_requires_grad(w, true);
 *     oar_pool *p = oar_pool_push();
 *     oar_tensor *loss = oar_sum(oar_square(oar_mul(w, x)), 0, NULL, false);
 *     oar_backward(loss, NULL);          // w's .grad += d loss / d w
 *     oar_pool_pop(p);
 *
 * Complex numbers follow PyTorch: the gradient of a real loss L with
 * respect to z = a + ib is dL/da + i dL/db (the conjugate Wirtinger
 * derivative, times 2).
 *
 * Threads: each thread has its own grad mode; one graph is differentiated
 * by one thread at a time (different graphs may run concurrently). */
#ifndef OAR_AUTOGRAD_H
#define OAR_AUTOGRAD_H

#include <oar/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Inside a no_grad scope ops record nothing for backward. Scopes nest and
 * are per thread. */
OAR_API void oar_no_grad_push(void);
OAR_API void oar_no_grad_pop(void);
OAR_API bool oar_grad_enabled(void);

/* ---- tensors ------------------------------------------------------------ */

/* Marks a leaf tensor as a variable to differentiate with respect to.
 * Fails for integral and bool dtypes, and for turning it off on a non-leaf
 * tensor (one made by a recorded op; use oar_detach). 0 on success. */
OAR_API int oar_tensor_set_requires_grad(oar_tensor *t, bool on);
OAR_API bool oar_tensor_requires_grad(const oar_tensor *t);
/* True unless t was made by a recorded op (then it has a gradient function). */
OAR_API bool oar_tensor_is_leaf(const oar_tensor *t);
/* The gradient accumulated by oar_backward, borrowed; NULL if none. */
OAR_API oar_tensor *oar_tensor_grad(const oar_tensor *t);
/* Drops the accumulated gradient (the next backward starts from zero). */
OAR_API int oar_tensor_zero_grad(oar_tensor *t);

/* ---- reverse mode ----------------------------------------------------------- */

/* Accumulates d loss / d leaf into the .grad of every leaf that requires
 * grad and that loss depends on (accumulation adds to an existing .grad;
 * .grad holds its own reference, outside any pool). grad_output: the
 * gradient of loss (its shape), or NULL when loss has one real element.
 * Saved tensors of the graph are freed afterwards: a second backward
 * through the same graph fails (use oar_backward_ex with retain_graph). */
OAR_API int oar_backward(oar_tensor *loss, oar_tensor *grad_output);

/* Flags for oar_backward_ex and oar_grad_ex. */
enum {
    OAR_GRAD_CREATE_GRAPH = 1u << 0, /* record the backward pass: results can be differentiated */
    OAR_GRAD_RETAIN_GRAPH = 1u << 1, /* keep saved tensors for another backward (implied by CREATE_GRAPH) */
    OAR_GRAD_ALLOW_UNUSED = 1u << 2, /* an input the outputs do not depend on gets NULL, not an error */
};

/* oar_backward over several outputs; grad_outputs may be NULL (or hold
 * NULLs) for one-element real outputs. With OAR_GRAD_CREATE_GRAPH the
 * .grad tensors carry a graph that references their leaves: drop them with
 * oar_tensor_zero_grad when done, or the leaves are never freed. On
 * failure some .grad may already hold part of the sum. */
OAR_API int oar_backward_ex(int n_out, oar_tensor *const *outputs,
                            oar_tensor *const *grad_outputs, unsigned flags);

/* Gradients of the outputs (weighted by grad_outputs; NULL or a NULL entry
 * means ones for a one-element real output) with respect to `inputs`, which
 * may be leaves or intermediate tensors. Does not touch .grad. Writes n_in
 * new references to grads[] following the pool rule (owned by the innermost
 * pool, or by the caller outside pools); an unused input gets NULL when
 * allow_unused, otherwise it is an error. With create_graph the gradients
 * are themselves differentiable (second and higher order). The graph's
 * saved tensors are kept iff create_graph; oar_grad_ex chooses. 0 on
 * success; on failure grads[] are NULL. */
OAR_API int oar_grad(int n_out, oar_tensor *const *outputs, oar_tensor *const *grad_outputs,
                     int n_in, oar_tensor *const *inputs, bool create_graph, bool allow_unused,
                     oar_tensor **grads);
OAR_API int oar_grad_ex(int n_out, oar_tensor *const *outputs, oar_tensor *const *grad_outputs,
                        int n_in, oar_tensor *const *inputs, unsigned flags, oar_tensor **grads);

/* ---- functional transforms ---------------------------------------------------
 * A function of tensors: reads in[0..n_in-1] (borrowed) and writes n_out
 * results to out[] following the pool rule (just store op results). It
 * returns 0, or non-zero with an error set. The transforms call it inside
 * their own pool on fresh leaves that require grad; with create_graph an
 * input that already requires grad is used as is, so the results can be
 * differentiated with respect to it.
 * Every tensor a transform writes follows the pool rule; outputs written to
 * an optional `outputs` array are the function's values (detached unless
 * create_graph). An input the function does not depend on gets zeros. */
typedef int (*oar_fn)(void *ctx, int n_in, oar_tensor *const *in, int n_out, oar_tensor **out);

/* Vector-Jacobian products: vjp[i] = sum_j v[j]^H dOut_j/dIn_i, shaped like
 * inputs[i]. v[j] shaped like out j (NULL: ones for a one-element output). */
OAR_API int oar_vjp(oar_fn fn, void *ctx, int n_in, oar_tensor *const *inputs, int n_out,
                    oar_tensor *const *v, bool create_graph, oar_tensor **outputs,
                    oar_tensor **vjp);
/* Jacobian-vector products: jvp[j] = sum_i dOut_j/dIn_i t[i], shaped like
 * out j (computed exactly with two reverse passes). t[i] shaped like
 * inputs[i]. Real functions only. */
OAR_API int oar_jvp(oar_fn fn, void *ctx, int n_in, oar_tensor *const *inputs,
                    oar_tensor *const *t, int n_out, bool create_graph, oar_tensor **outputs,
                    oar_tensor **jvp);
/* jac[j * n_in + i] = dOut_j/dIn_i of shape out_j.shape + in_i.shape. */
OAR_API int oar_jacobian(oar_fn fn, void *ctx, int n_in, oar_tensor *const *inputs, int n_out,
                         bool create_graph, oar_tensor **jac);
/* fn returns one real one-element tensor; hess[i * n_in + k] =
 * d2 f / dIn_i dIn_k of shape in_i.shape + in_k.shape. */
OAR_API int oar_hessian(oar_fn fn, void *ctx, int n_in, oar_tensor *const *inputs,
                        bool create_graph, oar_tensor **hess);
/* Hessian-vector product of a scalar fn: hvp[i] = sum_k d2 f/dIn_i dIn_k v[k].
 * value (may be NULL) receives f. */
OAR_API int oar_hvp(oar_fn fn, void *ctx, int n_in, oar_tensor *const *inputs,
                    oar_tensor *const *v, bool create_graph, oar_tensor **value,
                    oar_tensor **hvp);

/* ---- recompute (gradient checkpointing) -------------------------------------
 * Runs the segment fn(ctx, inputs) -> outputs (an oar_fn) without keeping
 * its intermediate tensors for backward, as torch.utils.checkpoint: the
 * forward pass records one node for the whole segment, whose inputs are
 * `inputs` and the parameters fn uses (the leaves that require grad that
 * its ops read, found while it runs), and whose outputs are outputs[]
 * (pool rule). Backward runs fn again with grad enabled on copies of the
 * inputs, with the global generator set as it was for the forward pass (the
 * same dropout masks), and differentiates the recomputed outputs: the
 * inputs' gradients flow on, and the parameters' .grad (oar_backward) or
 * oar_grad results equal those of the same computation without the
 * checkpoint. Memory: a chain of checkpointed segments keeps only the
 * segments' inputs and outputs, plus one segment's intermediates at a time
 * during backward; the cost is a second forward pass of each segment.
 *
 * fn must compute the same thing on every call; ctx and what it points to
 * must live until the backward pass. Every output must be floating point
 * (or complex). A tensor that requires grad and is made by a recorded op
 * must reach fn through `inputs`, not ctx (an error otherwise). Checkpoints
 * nest. Under no_grad, or inside another segment's forward pass, fn simply
 * runs. While tracing (<oar/graph.h>), fn's nodes are tagged as one
 * recompute segment (a nested one joins the outer), and
 * oar_graph_append_backward copies the segment's nodes just before the
 * segment's gradients, which read the copies: the originals' outputs die
 * after the forward pass, and random ops in the copies draw what the
 * originals drew. A segment that writes in place into a value from outside
 * it cannot be recomputed (oar_graph_append_backward fails). Gradients with
 * create_graph through a segment are refused (OAR_ERR_UNSUPPORTED): run
 * that segment without the checkpoint to differentiate twice. Errors from
 * fn, in the forward pass or the recomputation, are reported as the
 * checkpoint's with fn's message appended. 0 on success; on failure
 * outputs[] are NULL. */
OAR_API int oar_checkpoint(oar_fn fn, void *ctx, int n_in, oar_tensor *const *inputs, int n_out,
                           oar_tensor **outputs);

#ifdef __cplusplus
}
#endif
#endif

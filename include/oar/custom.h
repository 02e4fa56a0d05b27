/* Custom ops and custom autograd functions: ops a program or a shared
 * library adds at run time, without rebuilding oar.
 *
 * A custom op is a descriptor registered under a unique name
 * ("mylib.swish"): a shape/dtype rule, a kernel per device type, an
 * optional gradient written with oar's public ops, and flags. Calls go
 * through oar's one dispatch as the op row `custom`, so a custom op
 *
 *   - runs eagerly and is recorded by autograd (its gradient differentiates
 *     again, since it is written with ops: second order works);
 *   - traces as one graph node, runs in the executor, is left alone by
 *     fusion (opaque) and, when flagged OAR_CUSTOM_RANDOM, by CSE;
 *   - saves with its graph by name: a saved model that uses it loads (in
 *     oar_graph_load or the predictor) only once the op is registered again
 *     in that process, e.g. by oar_custom_load_library; otherwise loading
 *     fails naming the op;
 *   - takes dtensors: the inputs are replicated and the op runs on the
 *     whole tensors (the replicate fallback), or, flagged
 *     OAR_CUSTOM_ELEMENTWISE, it follows its input's shards;
 *   - is refused by the ONNX exporter, which names it.
 *
 * A custom autograd function (PyTorch's torch.autograd.Function) is the
 * same descriptor with `forward` instead of kernels: a forward written with
 * ops, run with grad off on concrete tensors on any device, and `grad`, the
 * backward, written with ops. Autograd records the call as one node whose
 * gradient is `grad`, whatever the forward computed (a straight-through
 * estimator, a clipped or rescaled gradient). Under oar_trace the call is
 * one node too: the executor runs `forward` on the node's inputs, and the
 * graph's backward (oar_graph_append_backward) traces `grad`.
 *
 *     static int swish_rule(void *u, int n_in, const oar_custom_meta *in,
 *                           const oar_custom_attrs *a, oar_custom_meta *out) {
 *         out[0] = in[0];   // same dtype and shape
 *         return 0;
 *     }
 *     static int swish_cpu(const oar_custom_kernel_args *k) { ... k->in[0] ... k->out[0] ... }
 *     static int swish_grad(const oar_custom_grad_args *g) {
 *         oar_tensor *s = oar_sigmoid(g->in[0]);  // d/dx x*s(x) = s + x*s*(1-s)
 *         ...
 *         g->grad_in[0] = oar_mul(g->grad_out[0], ds);
 *         return 0;
 *     }
 *     static const oar_custom_op_desc swish = {
 *         .name = "mylib.swish", .n_in = 1, .n_out = 1, .flags = OAR_CUSTOM_ELEMENTWISE,
 *         .infer = swish_rule, .kernels = {{"cpu", swish_cpu}}, .grad = swish_grad,
 *     };
 *     const oar_custom_op *op = oar_custom_register(&swish);
 *     oar_tensor *y;
 *     oar_custom_call(op, 1, &x, NULL, 1, &y);   // y follows the pool rule
 *
 * docs/custom_ops.md walks through it, with the library entry point. */
#ifndef OAR_CUSTOM_H
#define OAR_CUSTOM_H

#include <oar/tensor.h>
#include <oar/device.h> /* oar_ktensor: the kernel's view of a tensor */

#ifdef __cplusplus
extern "C" {
#endif

#define OAR_CUSTOM_MAX_IN 16     /* inputs of one call (all saved for the gradient) */
#define OAR_CUSTOM_MAX_OUT 4     /* outputs of one op */
#define OAR_CUSTOM_MAX_IATTR 32  /* integer attributes of one call */
#define OAR_CUSTOM_MAX_FATTR 4   /* float attributes of one call */
#define OAR_CUSTOM_MAX_KERNELS 8 /* device types one op has kernels for */
#define OAR_CUSTOM_MAX_NAME 63   /* bytes of a name */

/* The shared library entry point oar_custom_load_library calls: a function
 * `int oar_custom_library_init(void)` that registers the library's ops and
 * returns 0, or non-zero after oar_set_error. */
#define OAR_CUSTOM_LIBRARY_INIT "oar_custom_library_init"

typedef struct oar_custom_op oar_custom_op; /* a registered op (lives until exit) */

/* The attributes of one call: integers and doubles whose meaning the op
 * documents. They travel unchanged to the rule, kernels and gradient, and
 * are saved with a traced graph. */
typedef struct oar_custom_attrs {
    int ni, nf;
    int64_t i[OAR_CUSTOM_MAX_IATTR];
    double f[OAR_CUSTOM_MAX_FATTR];
} oar_custom_attrs;

/* What a shape rule sees of a tensor. Under oar_trace a dynamic dim reads
 * as its trace size; the executor reruns the rule with each run's sizes. */
typedef struct oar_custom_meta {
    oar_dtype dtype;
    int ndim;
    int64_t shape[OAR_MAX_DIMS];
} oar_custom_meta;

/* The shape/dtype rule: fills out[0..n_out) from the inputs and returns 0,
 * or returns non-zero after oar_set_error (tensor.h; the message reaches the caller,
 * prefixed with the op's name). out[] starts as copies of in[0]. Inputs
 * are passed to kernels in their own dtypes (no casts). */
typedef int (*oar_custom_infer_fn)(void *user_data, int n_in, const oar_custom_meta *in,
                                   const oar_custom_attrs *attrs, oar_custom_meta *out);

/* What a kernel gets. The inputs are contiguous (oar copies strided ones
 * first); the outputs are preallocated, contiguous, on the same device, of
 * the rule's dtypes and shapes, and are to be written in full. On the CPU
 * read and write through oar_tensor_data; on a plugin device through the
 * kernel tensors kin/kout (their `buffer` and `offset`). */
typedef struct oar_custom_kernel_args {
    void *user_data;
    oar_device *device;
    const oar_custom_attrs *attrs;
    int n_in, n_out;
    oar_tensor *const *in;
    oar_tensor *const *out;
    const oar_ktensor *kin;
    const oar_ktensor *kout;
} oar_custom_kernel_args;
/* 0, or non-zero after oar_set_error. */
typedef int (*oar_custom_kernel_fn)(const oar_custom_kernel_args *args);

typedef struct oar_custom_kernel {
    const char *device_type; /* "cpu", or a plugin's type name ("opencl", "cuda") */
    oar_custom_kernel_fn fn;
} oar_custom_kernel;

/* A forward written with ops (a custom autograd function): sets
 * out[0..n_out) to new tensors (following the pool rule) of the rule's
 * dtypes and shapes, computed with public ops. It runs with grad off, on
 * concrete tensors; 0, or non-zero after oar_set_error. */
typedef int (*oar_custom_forward_fn)(void *user_data, int n_in, oar_tensor *const *in,
                                     const oar_custom_attrs *attrs, oar_tensor **out);

/* What a gradient (backward) gets: the call's inputs and outputs, the
 * gradient of each output (zeros where none flowed) and which inputs want
 * one. It sets grad_in[i] for each i with needs[i] to a tensor of input i's
 * dtype and shape built with public ops (or other custom ops), following
 * the pool rule, or leaves it NULL for a zero gradient. Built with ops, the
 * result differentiates again (create_graph, second order) and traces into
 * a graph's backward. */
typedef struct oar_custom_grad_args {
    void *user_data;
    const oar_custom_attrs *attrs;
    int n_in, n_out;
    oar_tensor *const *in;
    oar_tensor *const *out;
    oar_tensor *const *grad_out;
    const bool *needs;
    oar_tensor **grad_in;
} oar_custom_grad_args;
/* 0, or non-zero after oar_set_error. */
typedef int (*oar_custom_grad_fn)(const oar_custom_grad_args *args);

enum {
    /* out[0] = f(in[i]) element by element, over inputs of out[0]'s shape:
     * with dtensors the op follows the first sharded input's placement
     * instead of replicating (one output only). */
    OAR_CUSTOM_ELEMENTWISE = 1u << 0,
    /* not a pure function of its inputs: CSE never merges two calls */
    OAR_CUSTOM_RANDOM = 1u << 1,
};

typedef struct oar_custom_op_desc {
    const char *name;   /* unique, at most OAR_CUSTOM_MAX_NAME bytes: "mylib.swish" */
    int n_in;           /* 1..OAR_CUSTOM_MAX_IN; -1: any number from 1 */
    int n_out;          /* 1..OAR_CUSTOM_MAX_OUT */
    unsigned flags;     /* OAR_CUSTOM_* */
    oar_custom_infer_fn infer; /* optional: NULL means every output is like in[0] */
    /* one per device type, the unused ones zero; a device without its own
     * kernel runs the "cpu" one on copies. Ignored when forward is set. */
    oar_custom_kernel kernels[OAR_CUSTOM_MAX_KERNELS];
    oar_custom_forward_fn forward; /* optional: a custom autograd function */
    oar_custom_grad_fn grad;       /* optional: NULL means a zero gradient */
    void *user_data;               /* passed to each function */
} oar_custom_op_desc;

/* Registers an op; the descriptor is copied (its name too). NULL with an
 * error for a NULL or malformed descriptor, a name already registered, or
 * neither kernels nor a forward. Thread-safe; an op is never unregistered. */
OAR_API const oar_custom_op *oar_custom_register(const oar_custom_op_desc *desc);
/* The op registered under name, or NULL with an error naming it. */
OAR_API const oar_custom_op *oar_custom_find(const char *name);
/* Its name, and counts (n_in -1: variadic); "" / -1 for NULL. */
OAR_API const char *oar_custom_name(const oar_custom_op *op);
OAR_API int oar_custom_num_inputs(const oar_custom_op *op);
OAR_API int oar_custom_num_outputs(const oar_custom_op *op);

/* Calls op on in[0..n_in) with attrs (NULL: none): sets out[0..n_out)
 * (n_out must be the op's) to its outputs, which follow the pool rule.
 * Returns 0, or a status with out[] NULL and a message naming the op. */
OAR_API int oar_custom_call(const oar_custom_op *op, int n_in, oar_tensor *const *in,
                            const oar_custom_attrs *attrs, int n_out, oar_tensor **out);
/* One-output convenience: the output, or NULL. */
OAR_API oar_tensor *oar_custom_call1(const oar_custom_op *op, int n_in, oar_tensor *const *in,
                                     const oar_custom_attrs *attrs);

/* Opens a shared library (dlopen, kept open) and calls its
 * OAR_CUSTOM_LIBRARY_INIT entry point, which registers its ops. 0, or a
 * status with a message: the library cannot be opened, has no entry point,
 * or its entry point failed. Loading a library twice is refused by its
 * duplicate names unless its entry point checks oar_custom_find first. */
OAR_API int oar_custom_load_library(const char *path);

#ifdef __cplusplus
}
#endif
#endif

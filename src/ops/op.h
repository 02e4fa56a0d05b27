/* Internal op layer: the op enum, op definitions, attributes and the one
 * dispatch entry (invariants 1 and 3 of docs/architecture.md). */
#ifndef OARI_OP_H
#define OARI_OP_H

#include "../core/core.h"
#include <oar/ops.h>

typedef enum oari_op {
#define OP(name) OARI_OP_##name,
#include "ops.def"
#undef OP
    OARI_OP_COUNT
} oari_op;

/* How the compiler may fuse an op (src/compiler/). */
typedef enum oari_fusion_kind {
    OARI_FUSE_ELEMWISE,   /* out[i] = f(in[i]) */
    OARI_FUSE_BROADCAST,  /* elementwise over broadcast inputs */
    OARI_FUSE_INJECTIVE,  /* each output element reads one input element (movement) */
    OARI_FUSE_REDUCE,
    OARI_FUSE_OPAQUE,     /* GEMM, conv, sort: library calls */
} oari_fusion_kind;

#define OARI_MAX_IATTR 40
#define OARI_MAX_FATTR 8
#define OARI_MAX_IN 256   /* variadic ops (concat) take at most this many */
#define OARI_MAX_OUT 4

/* Attributes of a call: plain integers and doubles, whose meaning each op
 * documents in src/ops/defs/. They travel unchanged to kernels and graphs. */
typedef struct oari_attrs {
    int ni, nf;
    int64_t i[OARI_MAX_IATTR];
    double f[OARI_MAX_FATTR];
} oari_attrs;

typedef struct oari_meta {
    oar_dtype dtype;
    int ndim;
    int64_t shape[OAR_MAX_DIMS];
} oari_meta;

/* What a shape/dtype rule reads and fills. Inputs may be symbolic (no
 * storage): a rule reads only their dtype and shape. Before the rule runs,
 * in_dtype[i] holds input i's dtype and kernel_dtype in[0]'s; the rule sets
 * out[] and may change both (dispatch casts input i to in_dtype[i]). An
 * optional input passed as NULL is allowed where the op's flags say so. */
typedef struct oari_infer {
    const char *op;
    int n_in;
    oar_tensor *const *in;
    const oari_attrs *attrs;
    oari_meta out[OARI_MAX_OUT];
    oar_dtype in_dtype[OARI_MAX_IN];
    oar_dtype kernel_dtype;
} oari_infer;

/* What a gradient rule reads and fills (src/autograd/). in[i] is the saved
 * input (NULL unless the op's `saved` mask names it); in_meta[i] always
 * holds its dtype and shape. out[j] likewise for outputs. gout[j] is the
 * gradient of output j (NULL: zero). The rule sets gin[i] for every i with
 * needs[i], to a tensor of input i's shape built with ops (so it can be
 * differentiated again), or NULL for a zero gradient. */
typedef struct oari_grad_ctx {
    oari_op op;
    const oari_attrs *attrs;
    int n_in, n_out;
    oar_tensor *const *in;
    const oari_meta *in_meta;
    oar_tensor *const *out;
    const oari_meta *out_meta;
    oar_tensor *const *gout;
    const bool *needs;
    oar_tensor **gin;
} oari_grad_ctx;

#define OARI_SAVE_IN(i) (1u << (i))
#define OARI_SAVE_OUT(j) (1u << (16 + (j)))
#define OARI_SAVE_ALL_IN 0xffffu

enum {
    OARI_F_BROADCAST = 1u << 0,  /* kernel sees inputs expanded to out[0]'s shape */
    OARI_F_VIEW = 1u << 1,       /* out[0] is a view made by def->view; no kernel */
    OARI_F_INPLACE = 1u << 2,    /* writes in[0]; returns it; no output allocated */
    OARI_F_OPTIONAL_IN = 1u << 3, /* inputs after the first may be NULL */
    OARI_F_RANDOM = 1u << 4,     /* not a pure function of its inputs (no CSE) */
    OARI_F_NONDIFF = 1u << 5,    /* outputs never require grad (comparisons, argmax) */
    OARI_F_NO_HALF = 1u << 6,    /* the shape rule refuses f16/bf16 (not computed through f32 copies) */
};

typedef struct oari_op_def {
    const char *name;
    int n_in;                 /* -1: variadic, at least 1 */
    int n_out;
    oari_fusion_kind fusion;
    unsigned flags;
    unsigned saved;           /* OARI_SAVE_IN / OARI_SAVE_OUT bits the gradient rule needs */
    int (*infer)(oari_infer *c);
    /* view ops: the output as a view of in[0] (geometry only) */
    oar_tensor *(*view)(oar_tensor *x, const oari_attrs *a);
    /* gradient rule, written with ops; NULL: not differentiable */
    int (*grad)(oari_grad_ctx *g);
    /* the op to run instead where the gradient will be taken, or -1 for
     * these attributes: the same inputs and attributes, and one output more
     * (whose meta it writes to *extra from out[0]'s *y, when both are
     * given), which its gradient rule reads instead of recomputing it
     * (lstm_layer -> lstm_layer_train). NULL: none. Graph backward and the
     * eager calls that record a gradient take it. */
    int (*train_form)(const oari_attrs *a, const oari_meta *y, oari_meta *extra);
    /* the op written with other ops (traced stand-ins in, out[0..n_out-1]
     * out, pool-owned), for an op without a gradient rule: graph backward
     * differentiates the decomposition where a gradient has to pass
     * through such a node (lstm_layer_backward, differentiated again).
     * NULL: none. */
    int (*decompose)(oar_tensor *const *in, const oari_attrs *a, oar_tensor **out);
} oari_op_def;

/* The table of definitions, indexed by oari_op. An entry is NULL while an
 * op has no definition yet; dispatch then reports it as unsupported. */
OARI_HIDDEN extern const oari_op_def *oari_op_defs[OARI_OP_COUNT];
/* oari_op by name, -1 if none. */
OARI_HIDDEN int oari_op_lookup(const char *name);
OARI_HIDDEN const char *oari_op_name(oari_op op);

/* The one entry for every op call (invariant 3 of docs/architecture.md). Checks inputs,
 * runs the shape rule, casts, traces or runs the device kernel, records on
 * the tape. Fills out[0..n_out-1] with new references the caller owns (in
 * no pool); returns 0, or a status with the error set and out[] NULL. */
OARI_HIDDEN int oari_dispatch(oari_op op, int n_in, oar_tensor *const *in,
                              const oari_attrs *attrs, oar_tensor **out);
/* oari_dispatch without autocast (autocast.c calls it after its casts). */
OARI_HIDDEN int oari_dispatch_run(oari_op op, int n_in, oar_tensor *const *in,
                                  const oari_attrs *attrs, oar_tensor **out);
/* conv2d_prepacked's weight layout (defs/conv.def; `a` its attributes):
 * the packed weight's shape into d and its element count; for orders 0
 * and 1 (oneDNN's blocked layouts), w [O, C, kh, kw] contiguous packed
 * into wp (zeros past O and C), and back. Order 2 (a Winograd transform)
 * is packed by the backend (oari_conv_prepack.pack). */
OARI_HIDDEN int64_t oari_conv2d_packed_shape(const int64_t *a, int64_t d[6]);
OARI_HIDDEN void oari_conv2d_pack(const float *w, float *wp, const int64_t *a);
OARI_HIDDEN void oari_conv2d_unpack(const float *wp, float *w, const int64_t *a);
/* Single-output conveniences with public semantics: the output, adopted
 * by the innermost pool, or NULL. */
OARI_HIDDEN oar_tensor *oari_call(oari_op op, int n_in, oar_tensor *const *in,
                                  const oari_attrs *attrs);
OARI_HIDDEN oar_tensor *oari_call1(oari_op op, oar_tensor *x, const oari_attrs *attrs);
OARI_HIDDEN oar_tensor *oari_call2(oari_op op, oar_tensor *a, oar_tensor *b,
                                   const oari_attrs *attrs);

/* Attribute builders. */
static inline oari_attrs oari_attrs_none(void) { oari_attrs a = {0}; return a; }
OARI_HIDDEN oari_attrs oari_attrs_ints(int n, const int64_t *v);

/* Shape-rule helpers shared by op groups. */
OARI_HIDDEN void oari_meta_from(oari_meta *m, const oar_tensor *t);
/* The dtype of an op over these inputs by PyTorch's rules: dimensioned
 * tensors outrank 0-d ones within a category, 0-d ones outrank wrapped
 * numbers. NULL inputs are skipped. */
OARI_HIDDEN oar_dtype oari_result_type(int n, oar_tensor *const *in);
/* Returns 0 if t is NULL-free etc.; reports "<op>: <what>" otherwise. */
OARI_HIDDEN int oari_check_dtype(const char *op, const oar_tensor *t, bool ok, const char *want);

/* Grad mode (grad_mode.c): a per-thread depth of no_grad scopes, read by
 * dispatch to decide whether to record. */
OARI_HIDDEN bool oari_grad_mode_enabled(void);
OARI_HIDDEN void oari_no_grad_push(void);
OARI_HIDDEN void oari_no_grad_pop(void);
OARI_HIDDEN int oari_grad_mode_set_depth(int depth); /* returns the previous depth */
/* Autocast (autocast.c, include/oar/amp.h): true while this thread's
 * innermost scope is bf16/f16 and no backward pass suspends it; dispatch
 * then hands the call to oari_autocast_dispatch, which casts the inputs by
 * the op's policy and calls oari_dispatch_run. */
OARI_HIDDEN extern _Thread_local bool oari_autocast_active;
OARI_HIDDEN int oari_autocast_dispatch(oari_op op, int n_in, oar_tensor *const *in,
                                       const oari_attrs *attrs, oar_tensor **out);
/* The op's policy (OAR_AUTOCAST_* of include/oar/amp.h). */
OARI_HIDDEN int oari_autocast_policy(oari_op op);
/* Fills want[0..n_in-1] with the dtype autocast to `low` gives each input
 * of a call of op (the input's own dtype where it keeps it); true if any
 * differs. */
OARI_HIDDEN bool oari_autocast_targets(oari_op op, oar_dtype low, int n_in, oar_tensor *const *in,
                                       oar_dtype *want);
/* Backward passes run with autocast suspended (nesting); resume undoes one
 * suspend. */
OARI_HIDDEN int oari_autocast_suspend(void);
OARI_HIDDEN void oari_autocast_resume(void);
/* Runs code as a scope of `low` (OAR_F32: none) would, suspended or not
 * (a checkpoint's recompute repeats its forward pass's casts); end takes
 * the value begin saved. begin fails when scopes are nested too deep. */
OARI_HIDDEN int oari_autocast_replay_begin(oar_dtype low, int *saved);
OARI_HIDDEN void oari_autocast_replay_end(int saved);

/* The recompute segment that traced nodes belong to (oar_checkpoint under
 * a trace; 0: none). The setter returns the previous one. */
OARI_HIDDEN int oari_recompute_segment(void);
OARI_HIDDEN int oari_recompute_segment_set(int segment);

/* The global generator's state (misc.c): its seed and the offset of the
 * next draw. Saving and restoring it replays the same random numbers
 * (autograd's checkpoint recomputes a segment with the same dropout masks). */
OARI_HIDDEN void oari_rng_get(uint64_t *seed, uint64_t *offset);
OARI_HIDDEN void oari_rng_set(uint64_t seed, uint64_t offset);

/* What dispatch reaches in the layers above it. Each member is installed
 * once at start-up (src/init/) by the layer that owns it; dispatch calls
 * it only when the call needs that layer (a traced input, an input that
 * requires grad, a dtensor), so a NULL member means the layer is absent
 * and such a call fails with a message. Never a prototype of a higher
 * layer's function declared here. */
typedef struct oari_dispatch_hooks {
    /* graph: appends a node for a call with a traced input; 1 when no
     * input is traced (dispatch then runs the call), else 0 or a status. */
    int (*trace)(oari_op op, oari_infer *c, oar_tensor **out);
    /* graph: whether a dim of this size stands for a dynamic dim. */
    bool (*trace_size_is_dynamic)(int64_t size);
    /* autograd: records the call on the tape. */
    int (*record)(oari_op op, const oari_attrs *attrs, int n_in, oar_tensor *const *in, int n_out,
                  oar_tensor **out);
    /* dist: a call with a dtensor input (the sharding rule, then this
     * dispatch on the shards). */
    int (*dist)(oari_op op, int n_in, oar_tensor *const *in, const oari_attrs *attrs,
                oar_tensor **out);
    /* dist: a dtensor's local shard (borrowed), for gradient rules that
     * look at the layout (matmul's). */
    oar_tensor *(*dist_local)(oar_tensor *t);
} oari_dispatch_hooks;
OARI_HIDDEN extern oari_dispatch_hooks oari_hooks;

/* What the predictor's prepack_conv pass (src/graph/passes/) asks of the
 * backend whose kernel runs conv2d_prepacked: installed at start-up by the
 * CPU backend (oari_cpu_install), so the pass names no backend. NULL
 * members: no backend packs, and the pass leaves every conv. */
typedef struct oari_conv_prepack_hooks {
    /* whether an f32 conv2d with conv2d_prepacked's attributes a (the
     * layout's a[10..12] unset) on x [n, a[7], h, w], with a bias or not,
     * runs faster on a weight packed once: 1 with the layout filled in,
     * else 0 */
    int (*layout)(int64_t *a, int64_t n, int64_t h, int64_t w, bool bias);
    /* w [O, C, kh, kw] contiguous packed as a says into wp
     * (oari_conv2d_packed_shape's elements) */
    void (*pack)(const float *w, float *wp, const int64_t *a);
} oari_conv_prepack_hooks;
OARI_HIDDEN extern oari_conv_prepack_hooks oari_conv_prepack;
/* Non-NULL while this thread traces (set by the tracer, src/graph/). */
OARI_HIDDEN extern _Thread_local void *oari_trace_current;

/* While this thread traces: whether a dim of this size stands for a dynamic
 * dim (a multiple of a symbol's trace size); false when not tracing. Ops
 * whose arithmetic uses a size (mean's divisor) then read it at run time. */
static inline bool oari_trace_size_is_dynamic(int64_t size) {
    return oari_trace_current && oari_hooks.trace_size_is_dynamic && oari_hooks.trace_size_is_dynamic(size);
}

/* Calls with a dtensor input go to the distributed dispatch (src/dist/). */
static inline bool oari_dist_any(int n_in, oar_tensor *const *in) {
    for (int i = 0; i < n_in; i++)
        if (in[i] && in[i]->ext[OARI_EXT_DIST]) return true;
    return false;
}

/* An op whose definition a higher layer installs at start-up (an
 * OP_INSTALLED row of ops.def: dist_reshard). Fails on any other op. */
OARI_HIDDEN int oari_op_install(oari_op op, const oari_op_def *def);

/* Sums a broadcast gradient g back to the shape and dtype of m (an input
 * of the op); complex gradients of real inputs keep their real part.
 * Result follows the pool rule. */
OARI_HIDDEN oar_tensor *oari_sum_to(oar_tensor *g, const oari_meta *m);

/* Kernel lookup through the device table, cached per (device, op, dtype). */
OARI_HIDDEN oar_kernel_fn oari_kernel_lookup(oar_device *dev, oari_op op, oar_dtype dtype);

#endif

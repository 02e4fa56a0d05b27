/* Internal autograd: the tape node (one allocation per recorded op call),
 * saved tensors, and the grad-mode switches the engine uses. */
#ifndef OARI_NODE_H
#define OARI_NODE_H

#include "../ops/op.h"

#include <oar/autograd.h>

/* Where the gradient of one input goes: the node that made it (and which
 * of its outputs), or the leaf to accumulate into, or nowhere. */
typedef struct oari_edge {
    struct oari_node *fn;   /* owned reference, or NULL */
    oar_tensor *leaf;       /* owned reference (a leaf never references the node), or NULL */
    int index;              /* output index in fn */
} oari_edge;

/* A saved tensor: its storage (retained) and geometry, no tensor object,
 * so saving an output makes no cycle node -> output -> node. */
typedef struct oari_saved {
    oari_storage *storage;  /* NULL once released (or never saved) */
    void *dist;             /* a saved dtensor's OARI_EXT_DIST value (retained) instead of storage */
    uint32_t version;       /* storage version when saved */
    bool wrapped_number;
    int64_t offset;
    int64_t strides[OAR_MAX_DIMS];
} oari_saved;

struct oari_node;

/* A node with a backward of its own instead of an op's gradient rule
 * (checkpoint.c). backward fills gin[i] for every needs[i] like a gradient
 * rule (NULL: zero), from gout[j] (NULL: zero); release frees ctx. */
typedef struct oari_node_fn {
    const char *name;
    int (*backward)(struct oari_node *n, bool create_graph, oar_tensor *const *gout,
                    const bool *needs, oar_tensor **gin);
    void (*release)(void *ctx);
} oari_node_fn;

struct oari_node {
    int refcount;            /* atomic: outputs' grad_fn, edges of later nodes, unpacked aliases */
    int16_t op;              /* -1 for a custom node */
    int16_t n_in, n_out;
    bool had_saved;          /* the op saved tensors ... */
    bool saved_released;     /* ... and they were freed by a backward */
    int bw_slot;             /* index in a running backward, -1 otherwise */
    struct oari_node *next;  /* free list while releasing */
    const oari_node_fn *custom; /* NULL for an op's node */
    void *custom_ctx;        /* owned: custom->release frees it */
    oari_attrs attrs;
    /* inline arrays, carved from the same allocation */
    oari_meta *in_meta;      /* [n_in] */
    oari_meta *out_meta;     /* [n_out] */
    oari_edge *edges;        /* [n_in] */
    oari_saved *saved;       /* [n_in + n_out]: inputs then outputs */
};

/* The op's name, or the custom node's. */
static inline const char *oari_node_name(const struct oari_node *n) {
    return n->custom ? n->custom->name : oari_op_name((oari_op)n->op);
}

/* A custom node with n_in inputs (edges to those that require grad, their
 * metas; nothing saved) and n_out outputs (metas only). Refcount 0: attach
 * outputs with oari_node_attach_output, or release it with refcount 1. */
OARI_HIDDEN struct oari_node *oari_node_new_custom(const oari_node_fn *fn, void *ctx, int n_in,
                                                   oar_tensor *const *in, int n_out,
                                                   oar_tensor *const *out);
/* Keeps t's storage and geometry in saved slot k (inputs 0..n_in-1). */
OARI_HIDDEN void oari_node_save(struct oari_node *n, int k, const oar_tensor *t);
/* Makes t output j of n (its grad_fn, requires_grad). */
OARI_HIDDEN void oari_node_attach_output(struct oari_node *n, int j, oar_tensor *t);

/* checkpoint.c: while a checkpointed segment runs its forward pass, the
 * record hook hands op calls here instead of recording them; it notes the
 * leaves that require grad (the parameters the segment uses). */
OARI_HIDDEN extern _Thread_local struct oari_ckpt_collector *oari_ckpt_current;
OARI_HIDDEN int oari_ckpt_note(oari_op op, int n_in, oar_tensor *const *in);

/* Makes a tensor for saved slot k of n (inputs 0..n_in-1, then outputs):
 * NULL if nothing was saved there. With `graph`, the tensor carries the
 * gradient path of the original (its grad_fn, or the leaf itself). Fails
 * with a clear message if the storage was modified in place since, or the
 * saved tensors were freed. Returns an owned reference in *out. */
OARI_HIDDEN int oari_saved_unpack(struct oari_node *n, int k, bool graph, oar_tensor **out);
/* Frees the node's saved tensors (after a backward without retain_graph). */
OARI_HIDDEN void oari_node_release_saved(struct oari_node *n);
OARI_HIDDEN struct oari_node *oari_node_retain(struct oari_node *n);
OARI_HIDDEN void oari_node_release(struct oari_node *n);

/* The node that made t (its OARI_EXT_GRAD_FN slot), borrowed; NULL for a leaf. */
static inline struct oari_node *oari_grad_fn(const oar_tensor *t) {
    return (struct oari_node *)t->ext[OARI_EXT_GRAD_FN];
}
/* Records an op call on the tape (dispatch's record hook). */
OARI_HIDDEN int oari_autograd_record(oari_op op, const oari_attrs *attrs, int n_in, oar_tensor *const *in,
                                     int n_out, oar_tensor **out);
/* Installs the record hook and the grad_fn slot's class (src/init/). */
OARI_HIDDEN void oari_autograd_install(void);

/* dist branch: leaf-gradient hooks, NULL unless a data-parallel reducer
 * (src/nn/parallel.c) is alive. In oar_backward (not oar_grad), `expect`
 * runs once per edge into a leaf as the graph is found, `arrive` once per
 * gradient (or NULL gradient) delivered along such an edge, after it is
 * summed into .grad: when arrivals match expectations, .grad is complete
 * and its bucket's all-reduce can start while backward goes on. */
typedef struct oari_leaf_hooks {
    void (*expect)(oar_tensor *leaf);
    void (*arrive)(oar_tensor *leaf);
} oari_leaf_hooks;
OARI_HIDDEN extern oari_leaf_hooks oari_leaf_hook;


#endif

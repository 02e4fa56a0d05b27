/* Recompute (gradient checkpointing). Eager, as torch.utils.checkpoint:
 * the forward pass of a segment records no nodes and keeps no saved
 * tensors; one custom node stands for the segment, and
 * its backward runs the segment again with grad enabled on copies of the
 * inputs (same random numbers), then takes oar_grad of the recomputed
 * outputs with respect to those copies and to the parameters the segment
 * used (the leaves that require grad, found while the forward pass ran).
 * Traced, the segment's nodes are only tagged; src/graph/backward.c does
 * the recomputing on the graph. */
#include "node.h"

#include <oar/amp.h> /* autocast: a recompute repeats the forward pass's casts */

#include <stdio.h>
#include <string.h>

/* What the forward pass of a segment saw (checkpoint.c's record hook). */
struct oari_ckpt_collector {
    oar_tensor **leaves; /* owned references, without duplicates */
    int n, cap;
};

_Thread_local struct oari_ckpt_collector *oari_ckpt_current;

int oari_ckpt_note(oari_op op, int n_in, oar_tensor *const *in) {
    struct oari_ckpt_collector *c = oari_ckpt_current;
    const oari_op_def *def = oari_op_defs[op];
    for (int i = 0; i < n_in; i++) {
        oar_tensor *t = in[i];
        if (!t || !t->requires_grad) continue;
        if (oari_grad_fn(t))
            return oari_error(OAR_ERR_INVALID, "checkpoint: the segment's %s uses a tensor that "
                              "requires grad (made by %s) but is not one of the checkpoint's "
                              "inputs; pass it in `inputs` so its gradient can flow",
                              def->name, oari_node_name(oari_grad_fn(t)));
        if (i == 0 && (def->flags & OARI_F_INPLACE))
            return oari_error(OAR_ERR_STATE, "checkpoint: %s: a leaf tensor that requires grad is "
                              "used in an in-place operation inside the segment; do it outside "
                              "the checkpoint, under oar_no_grad_push/pop", def->name);
        bool seen = false;
        for (int k = 0; k < c->n && !seen; k++) seen = c->leaves[k] == t;
        if (seen) continue;
        if (c->n == c->cap) {
            int cap = c->cap ? 2 * c->cap : 16;
            oar_tensor **l = oari_obj_realloc(c->leaves, (size_t)c->cap * sizeof *l, (size_t)cap * sizeof *l);
            if (!l) return oari_fail_status();
            c->leaves = l;
            c->cap = cap;
        }
        c->leaves[c->n++] = oar_tensor_retain(t);
    }
    return 0;
}

static void collector_free(struct oari_ckpt_collector *c) {
    for (int k = 0; k < c->n; k++) oar_tensor_release(c->leaves[k]);
    oari_obj_free(c->leaves, (size_t)c->cap * sizeof *c->leaves);
}

/* The node's context: the segment and the generator before its forward. */
typedef struct ckpt {
    oar_fn fn;
    void *ctx;
    int n_in;              /* the caller's inputs; the node's inputs after them are parameters */
    uint64_t seed, offset; /* the global generator when the forward pass began */
    oar_dtype autocast;    /* the autocast dtype then (OAR_F32: none); recompute casts alike */
} ckpt;

static int fn_failed(int st, const char *phase) {
    char inner[600];
    snprintf(inner, sizeof inner, "%s", oar_last_error()[0] ? oar_last_error() : "(fn set no message)");
    int code = st >= OAR_ERR_STATE && st <= OAR_ERR_INVALID ? st : oari_last_status();
    return oari_error(code ? code : OAR_ERR_INVALID, "checkpoint: the segment's fn failed %s "
                      "(status %d): %s", phase, st, inner);
}

/* Runs the segment inside a pool of its own (its intermediates are freed
 * on return) and checks its outputs. out[] receives owned references. */
static int run_segment(const ckpt *c, oar_tensor *const *in, int n_out, oar_tensor **out,
                       const char *phase) {
    for (int j = 0; j < n_out; j++) out[j] = NULL;
    oar_pool *p = oar_pool_push();
    if (!p) return oari_fail_status();
    oar_clear_error();
    int st = c->fn(c->ctx, c->n_in, in, n_out, out);
    if (st) st = fn_failed(st, phase);
    for (int j = 0; j < n_out && !st; j++) {
        if (!out[j])
            st = oari_error(OAR_ERR_INVALID, "checkpoint: the segment's fn returned 0 but wrote no "
                            "tensor to output %d (%s)", j, phase);
        else if (!oar_dtype_is_float(out[j]->dtype) && !oar_dtype_is_complex(out[j]->dtype))
            st = oari_error(OAR_ERR_INVALID, "checkpoint: output %d of the segment is %s; the "
                            "outputs of a checkpointed segment must be floating point (return "
                            "integer results from a call outside the checkpoint)", j,
                            oar_dtype_name(out[j]->dtype));
    }
    for (int j = 0; j < n_out; j++) out[j] = st ? NULL : oar_tensor_retain(out[j]);
    oar_pool_pop(p);
    return st;
}

static int ckpt_backward(struct oari_node *n, bool create_graph, oar_tensor *const *gout,
                         const bool *needs, oar_tensor **gin);

static void ckpt_release(void *ctx) { oari_obj_free(ctx, sizeof(ckpt)); }

static const oari_node_fn ckpt_node_fn = {
    .name = "checkpoint", .backward = ckpt_backward, .release = ckpt_release,
};

/* Makes the segment's node: its inputs are the caller's and the parameters
 * found; outputs become the node's. versions: the inputs' storage versions
 * before the forward pass (an in-place change by fn shows at backward). */
static int make_node(const ckpt *c, oar_tensor *const *inputs, const uint32_t *versions,
                     const struct oari_ckpt_collector *col, int n_out, oar_tensor **out) {
    int n_all = c->n_in + col->n;
    if (n_all > INT16_MAX || n_out > INT16_MAX)
        return oari_error(OAR_ERR_INVALID, "checkpoint: %d inputs and parameters, %d outputs: "
                          "at most %d of each", n_all, n_out, INT16_MAX);
    size_t bytes = (size_t)(n_all ? n_all : 1) * sizeof(oar_tensor *);
    oar_tensor **all = oari_obj_alloc(bytes);
    ckpt *cc = oari_obj_alloc(sizeof *cc);
    if (!all || !cc) {
        oari_obj_free(all, all ? bytes : 0);
        oari_obj_free(cc, cc ? sizeof *cc : 0);
        return oari_fail_status();
    }
    *cc = *c;
    for (int i = 0; i < c->n_in; i++) all[i] = inputs[i];
    for (int k = 0; k < col->n; k++) all[c->n_in + k] = col->leaves[k];
    int st = 0;
    /* an output that already requires grad (a parameter returned as is, or
     * one tensor returned twice) becomes a detached alias first */
    oar_pool *p = oar_pool_push();
    if (!p) st = oari_fail_status();
    for (int j = 0; j < n_out && !st; j++) {
        bool again = out[j]->requires_grad;
        for (int k = 0; k < j && !again; k++) again = out[k] == out[j];
        if (!again) continue;
        oar_tensor *d = oar_tensor_retain(oar_detach(out[j]));
        if (!d) {
            st = oari_fail_status();
            break;
        }
        oar_tensor_release(out[j]);
        out[j] = d;
    }
    if (p) oar_pool_pop(p);
    struct oari_node *n = st ? NULL : oari_node_new_custom(&ckpt_node_fn, cc, n_all, all, n_out, out);
    oari_obj_free(all, bytes);
    if (!n) {
        ckpt_release(cc);
        return st ? st : oari_fail_status();
    }
    for (int i = 0; i < c->n_in; i++) {
        oari_node_save(n, i, inputs[i]);
        n->saved[i].version = versions[i];
    }
    for (int j = 0; j < n_out; j++) oari_node_attach_output(n, j, out[j]);
    return 0;
}

int oar_checkpoint(oar_fn fn, void *ctx, int n_in, oar_tensor *const *inputs, int n_out,
                   oar_tensor **outputs) {
    if (!outputs || n_out < 1)
        return oari_error(OAR_ERR_INVALID, "checkpoint: no outputs (outputs is NULL or n_out = %d)", n_out);
    for (int j = 0; j < n_out; j++) outputs[j] = NULL;
    if (!fn) return oari_error(OAR_ERR_INVALID, "checkpoint: fn is NULL");
    if (n_in < 0 || (n_in > 0 && !inputs))
        return oari_error(OAR_ERR_INVALID, "checkpoint: inputs is NULL (n_in = %d)", n_in);
    for (int i = 0; i < n_in; i++)
        if (!inputs[i]) {
            if (!oari_error_pending()) oari_error(OAR_ERR_INVALID, "checkpoint: input %d is NULL", i);
            return OAR_ERR_INVALID;
        }
    ckpt c = {.fn = fn, .ctx = ctx, .n_in = n_in};
    oari_rng_get(&c.seed, &c.offset);
    c.autocast = oar_autocast_dtype();
    int st = 0;
    /* Traced: the segment's nodes are tagged with a segment number, and
     * the graph's backward (oar_graph_append_backward) recomputes them
     * from the segment's inputs instead of keeping their outputs. A
     * segment inside another joins the outer one. */
    if (oari_trace_current) {
        static int last_segment;
        int outer = oari_recompute_segment();
        oari_recompute_segment_set(outer ? outer : __atomic_add_fetch(&last_segment, 1, __ATOMIC_RELAXED));
        st = run_segment(&c, inputs, n_out, outputs, "during the forward pass");
        oari_recompute_segment_set(outer);
    } else if (!oari_grad_mode_enabled() || oari_ckpt_current) {
        /* nothing to record (no grad, or inside another segment's forward
         * pass, whose collector sees these ops): run it plainly */
        st = run_segment(&c, inputs, n_out, outputs, "during the forward pass");
    } else {
        size_t bytes = (size_t)(n_in ? n_in : 1) * (sizeof(oar_tensor *) + sizeof(uint32_t));
        oar_tensor **det = oari_obj_calloc(bytes);
        uint32_t *versions = det ? (uint32_t *)(det + (n_in ? n_in : 1)) : NULL;
        struct oari_ckpt_collector col = {0};
        oar_pool *p = det ? oar_pool_push() : NULL;
        if (!p) st = oari_fail_status();
        for (int i = 0; i < n_in && !st; i++) {
            versions[i] = inputs[i]->storage ? __atomic_load_n(&inputs[i]->storage->version, __ATOMIC_RELAXED) : 0;
            if (!(det[i] = oar_detach(inputs[i]))) st = oari_fail_status();
        }
        if (!st) {
            oari_ckpt_current = &col;
            st = run_segment(&c, det, n_out, outputs, "during the forward pass");
            oari_ckpt_current = NULL;
        }
        if (p) oar_pool_pop(p);
        bool any = col.n > 0;
        for (int i = 0; i < n_in; i++) any = any || inputs[i]->requires_grad;
        if (!st && any) st = make_node(&c, inputs, versions, &col, n_out, outputs);
        collector_free(&col);
        if (det) oari_obj_free(det, bytes);
    }
    for (int j = 0; j < n_out; j++) {
        if (st) {
            oar_tensor_release(outputs[j]);
            outputs[j] = NULL;
        } else if (!(outputs[j] = oari_pool_adopt(outputs[j]))) {
            st = oari_fail_status();
            for (int k = j + 1; k < n_out; k++) { /* the pool owns those before j */
                oar_tensor_release(outputs[k]);
                outputs[k] = NULL;
            }
        }
    }
    return st;
}

/* Recomputes the segment and differentiates it: gin[i] for the caller's
 * inputs and the parameters (the node's inputs after them) that need it. */
static int ckpt_backward(struct oari_node *n, bool create_graph, oar_tensor *const *gout,
                         const bool *needs, oar_tensor **gin) {
    const ckpt *c = n->custom_ctx;
    if (create_graph)
        return oari_error(OAR_ERR_UNSUPPORTED, "checkpoint: create_graph (a gradient to be "
                          "differentiated again) through a checkpointed segment is not supported; "
                          "run that segment without oar_checkpoint for higher-order gradients");
    int n_in = c->n_in, n_all = n->n_in, n_out = n->n_out;
    /* x[n_in] re[n_out] outs[n_out] gos[n_out] inps[n_all] res[n_all], map[n_all] */
    size_t nt = (size_t)n_in + 3 * (size_t)n_out + 2 * (size_t)n_all;
    size_t bytes = nt * sizeof(oar_tensor *) + (size_t)n_all * sizeof(int);
    oar_tensor **x = oari_obj_calloc(bytes);
    if (!x) return oari_fail_status();
    oar_tensor **re = x + n_in, **outs = re + n_out, **gos = outs + n_out, **inps = gos + n_out,
               **res = inps + n_all;
    int *map = (int *)(res + n_all);
    int st = 0;
    oar_pool *p = oar_pool_push();
    if (!p) st = oari_fail_status();
    for (int i = 0; i < n_in && !st; i++) {
        st = oari_saved_unpack(n, i, false, &x[i]);
        if (!st && !x[i]) st = oari_error(OAR_ERR_STATE, "checkpoint: input %d of the segment was not saved", i);
        if (st) break;
        if (!oari_pool_adopt(x[i])) {
            st = oari_fail_status();
            break;
        }
        x[i]->requires_grad = n->edges[i].fn || n->edges[i].leaf;
    }
    if (!st) { /* the same random numbers as the forward pass, then the stream as it was */
        uint64_t seed, offset;
        oari_rng_get(&seed, &offset);
        oari_rng_set(c->seed, c->offset);
        int depth = oari_grad_mode_set_depth(0), autocast_saved = 0;
        st = oari_autocast_replay_begin(c->autocast, &autocast_saved);
        if (!st) {
            st = run_segment(c, x, n_out, re, "while recomputing the segment for backward");
            oari_autocast_replay_end(autocast_saved);
        }
        oari_grad_mode_set_depth(depth);
        oari_rng_set(seed, offset);
    }
    for (int j = 0; j < n_out && !st; j++) {
        const oari_meta *m = &n->out_meta[j];
        if (re[j]->dtype != m->dtype || re[j]->ndim != m->ndim ||
            memcmp(re[j]->shape, m->shape, (size_t)m->ndim * sizeof *m->shape)) {
            char a[200], b[200];
            st = oari_error(OAR_ERR_STATE, "checkpoint: recomputing the segment gave output %d as "
                            "%s %s, but the forward pass gave %s %s; fn must compute the same "
                            "thing on every call", j, oar_dtype_name(re[j]->dtype),
                            oari_shape_str(a, re[j]->ndim, re[j]->shape), oar_dtype_name(m->dtype),
                            oari_shape_str(b, m->ndim, m->shape));
        }
    }
    int no = 0, ni = 0;
    for (int j = 0; j < n_out && !st; j++)
        if (gout[j] && re[j]->requires_grad) {
            outs[no] = re[j];
            gos[no++] = gout[j];
        }
    for (int i = 0; i < n_all && !st; i++)
        if (needs[i]) {
            inps[ni] = i < n_in ? x[i] : n->edges[i].leaf;
            map[ni++] = i;
        }
    if (!st && no && ni) st = oar_grad_ex(no, outs, gos, ni, inps, OAR_GRAD_ALLOW_UNUSED, res);
    for (int k = 0; k < ni && !st; k++) res[k] = oar_tensor_retain(res[k]); /* outlive p */
    for (int j = 0; j < n_out; j++) oar_tensor_release(re[j]);
    if (p) oar_pool_pop(p);
    for (int k = 0; k < ni && !st && no; k++) {
        if (res[k] && !oari_pool_adopt(res[k])) {
            st = oari_fail_status();
            for (int m = k + 1; m < ni; m++) oar_tensor_release(res[m]);
            break;
        }
        gin[map[k]] = res[k];
    }
    oari_obj_free(x, bytes);
    return st;
}

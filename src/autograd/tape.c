/* The tape: recording an op call as a node (one allocation), node
 * lifetime, saved tensors with version checks, and requires_grad. */
#include "node.h"

#include <string.h>

static bool differentiable_dtype(oar_dtype d) {
    return oar_dtype_is_float(d) || oar_dtype_is_complex(d);
}

static size_t align8(size_t n) { return (n + 7) & ~(size_t)7; }

static void save(oari_saved *s, const oar_tensor *t) {
    if (t && t->ext[OARI_EXT_DIST]) { /* a dtensor: keep its mesh, placements and shard */
        const oari_ext_class *c = oari_ext_class_of(OARI_EXT_DIST);
        s->dist = c->retain ? c->retain(t->ext[OARI_EXT_DIST]) : NULL;
        return;
    }
    if (!t || !t->storage) return;
    s->storage = t->storage;
    __atomic_add_fetch(&s->storage->refcount, 1, __ATOMIC_RELAXED);
    s->version = __atomic_load_n(&t->storage->version, __ATOMIC_RELAXED);
    s->wrapped_number = t->wrapped_number;
    s->offset = t->offset;
    memcpy(s->strides, t->strides, sizeof s->strides);
}

/* The edge of input i to where its gradient goes: the node that made it,
 * or the leaf itself (none when it does not require grad). */
static void link_input(struct oari_node *n, int i, oar_tensor *t) {
    if (!t->requires_grad) return;
    if (oari_grad_fn(t)) {
        n->edges[i].fn = oari_node_retain(oari_grad_fn(t));
        n->edges[i].index = t->output_index;
    } else {
        n->edges[i].leaf = oar_tensor_retain(t);
    }
}

int oari_autograd_record(oari_op op, const oari_attrs *attrs, int n_in, oar_tensor *const *in,
                         int n_out, oar_tensor **out) {
    const oari_op_def *def = oari_op_defs[op];
    if (oari_ckpt_current) return oari_ckpt_note(op, n_in, in); /* a checkpoint's forward: no node */
    if ((def->flags & OARI_F_INPLACE) && in[0]->requires_grad && !oari_grad_fn(in[0]))
        return oari_error(OAR_ERR_STATE, "%s: a leaf tensor that requires grad is used in an "
                          "in-place operation; do it inside oar_no_grad_push/pop or on a clone",
                          def->name);
    size_t head = align8(sizeof(struct oari_node));
    size_t n_meta = (size_t)(n_in + n_out);
    size_t size = head + n_meta * sizeof(oari_meta) + (size_t)n_in * sizeof(oari_edge) +
                  n_meta * sizeof(oari_saved);
    struct oari_node *n = oari_obj_calloc(size);
    if (!n) return oari_fail_status();
    char *p = (char *)n + head;
    n->in_meta = (oari_meta *)p;
    n->out_meta = n->in_meta + n_in;
    n->edges = (oari_edge *)(n->out_meta + n_out);
    n->saved = (oari_saved *)(n->edges + n_in);
    n->refcount = 0;
    n->op = (int16_t)op;
    n->n_in = (int16_t)n_in;
    n->n_out = (int16_t)n_out;
    n->bw_slot = -1;
    n->attrs = *attrs;
    for (int i = 0; i < n_in; i++) {
        if (!in[i]) {
            n->in_meta[i].dtype = OAR_DTYPE_INVALID;
            continue;
        }
        oari_meta_from(&n->in_meta[i], in[i]);
        link_input(n, i, in[i]);
    }
    for (int j = 0; j < n_out; j++) oari_meta_from(&n->out_meta[j], out[j]);
    unsigned mask = def->saved;
    for (int i = 0; i < n_in && i < 16; i++)
        if (mask & OARI_SAVE_IN(i)) save(&n->saved[i], in[i]);
    for (int j = 0; j < n_out && j < 16; j++)
        if (mask & OARI_SAVE_OUT(j)) save(&n->saved[n_in + j], out[j]);
    n->had_saved = mask != 0;
    /* Outputs last: an in-place op's out[0] is in[0], whose old grad_fn the
     * edge above already holds. */
    for (int j = 0; j < n_out; j++) {
        if (!differentiable_dtype(out[j]->dtype)) continue;
        struct oari_node *old = oari_grad_fn(out[j]);
        out[j]->requires_grad = true;
        out[j]->ext[OARI_EXT_GRAD_FN] = oari_node_retain(n);
        out[j]->output_index = j;
        if (old) oari_node_release(old);
    }
    if (n->refcount == 0) { /* no differentiable output: nothing refers to it */
        n->refcount = 1;
        oari_node_release(n);
    }
    return 0;
}

struct oari_node *oari_node_new_custom(const oari_node_fn *fn, void *ctx, int n_in,
                                       oar_tensor *const *in, int n_out, oar_tensor *const *out) {
    size_t head = align8(sizeof(struct oari_node));
    size_t n_meta = (size_t)(n_in + n_out);
    size_t size = head + n_meta * sizeof(oari_meta) + (size_t)n_in * sizeof(oari_edge) +
                  n_meta * sizeof(oari_saved);
    struct oari_node *n = oari_obj_calloc(size);
    if (!n) return NULL;
    char *p = (char *)n + head;
    n->in_meta = (oari_meta *)p;
    n->out_meta = n->in_meta + n_in;
    n->edges = (oari_edge *)(n->out_meta + n_out);
    n->saved = (oari_saved *)(n->edges + n_in);
    n->op = -1;
    n->n_in = (int16_t)n_in;
    n->n_out = (int16_t)n_out;
    n->bw_slot = -1;
    n->custom = fn;
    n->custom_ctx = ctx;
    for (int i = 0; i < n_in; i++) {
        oari_meta_from(&n->in_meta[i], in[i]);
        link_input(n, i, in[i]);
    }
    for (int j = 0; j < n_out; j++) oari_meta_from(&n->out_meta[j], out[j]);
    return n;
}

void oari_node_save(struct oari_node *n, int k, const oar_tensor *t) {
    save(&n->saved[k], t);
    n->had_saved = true;
}

void oari_node_attach_output(struct oari_node *n, int j, oar_tensor *t) {
    struct oari_node *old = oari_grad_fn(t);
    t->requires_grad = true;
    t->ext[OARI_EXT_GRAD_FN] = oari_node_retain(n);
    t->output_index = j;
    if (old) oari_node_release(old);
}

struct oari_node *oari_node_retain(struct oari_node *n) {
    if (n) __atomic_add_fetch(&n->refcount, 1, __ATOMIC_RELAXED);
    return n;
}

void oari_node_release_saved(struct oari_node *n) {
    int k = n->n_in + n->n_out;
    for (int i = 0; i < k; i++) {
        oari_storage_release(n->saved[i].storage);
        n->saved[i].storage = NULL;
        if (n->saved[i].dist) {
            const oari_ext_class *c = oari_ext_class_of(OARI_EXT_DIST);
            if (c->release) c->release(n->saved[i].dist);
            n->saved[i].dist = NULL;
        }
    }
    if (n->had_saved) n->saved_released = true;
}

static size_t node_size(const struct oari_node *n) {
    size_t k = (size_t)(n->n_in + n->n_out);
    return align8(sizeof *n) + k * sizeof(oari_meta) + (size_t)n->n_in * sizeof(oari_edge) +
           k * sizeof(oari_saved);
}

/* Iterative, so dropping the last reference to a long chain of nodes does
 * not recurse once per node. */
void oari_node_release(struct oari_node *n) {
    if (!n || __atomic_sub_fetch(&n->refcount, 1, __ATOMIC_ACQ_REL) != 0) return;
    n->next = NULL;
    struct oari_node *todo = n;
    while (todo) {
        struct oari_node *cur = todo;
        todo = cur->next;
        for (int i = 0; i < cur->n_in; i++) {
            oar_tensor_release(cur->edges[i].leaf);
            struct oari_node *f = cur->edges[i].fn;
            if (f && __atomic_sub_fetch(&f->refcount, 1, __ATOMIC_ACQ_REL) == 0) {
                f->next = todo;
                todo = f;
            }
        }
        oari_node_release_saved(cur);
        if (cur->custom && cur->custom->release) cur->custom->release(cur->custom_ctx);
        oari_obj_free(cur, node_size(cur));
    }
}

int oari_saved_unpack(struct oari_node *n, int k, bool graph, oar_tensor **out) {
    *out = NULL;
    const char *name = oari_node_name(n);
    bool is_in = k < n->n_in;
    int idx = is_in ? k : k - n->n_in;
    const oari_meta *m = is_in ? &n->in_meta[idx] : &n->out_meta[idx];
    oari_saved *s = &n->saved[k];
    if (!s->storage && !s->dist) {
        if (n->saved_released)
            return oari_error(OAR_ERR_STATE, "autograd: trying to backward through the graph a "
                              "second time (the saved tensors of %s were freed by the first "
                              "backward); pass OAR_GRAD_RETAIN_GRAPH to the first call if you "
                              "need to go through it again", name);
        return 0;
    }
    uint32_t v = s->storage ? __atomic_load_n(&s->storage->version, __ATOMIC_RELAXED) : s->version;
    if (v != s->version) {
        char sh[200];
        return oari_error(OAR_ERR_STATE, "autograd: one of the variables needed for gradient "
                          "computation has been modified by an in-place operation: %s's %s %d "
                          "(%s %s) is at version %u; expected version %u. Compute on a clone, "
                          "or do the in-place change after backward", name,
                          is_in ? "input" : "output", idx, oar_dtype_name(m->dtype),
                          oari_shape_str(sh, m->ndim, m->shape), v, s->version);
    }
    if (graph && is_in && n->edges[idx].leaf) {
        *out = oar_tensor_retain(n->edges[idx].leaf);
        return 0;
    }
    const oari_ext_class *dc = oari_ext_class_of(OARI_EXT_DIST);
    oar_tensor *t = !s->dist ? oari_tensor_make(s->storage, m->dtype, m->ndim, m->shape, s->strides, s->offset)
                    : dc->remake ? dc->remake(s->dist, m->dtype, m->ndim, m->shape)
                                 : (oari_error(OAR_ERR_STATE, "autograd: a saved dtensor, but dist is not installed"), NULL);
    if (!t) return oari_fail_status();
    t->wrapped_number = s->wrapped_number;
    if (graph) {
        struct oari_node *fn = is_in ? n->edges[idx].fn : n;
        if (fn) {
            t->requires_grad = true;
            t->ext[OARI_EXT_GRAD_FN] = oari_node_retain(fn);
            t->output_index = is_in ? n->edges[idx].index : idx;
        }
    }
    *out = t;
    return 0;
}

/* ---- public tensor properties ----------------------------------------------- */

int oar_tensor_set_requires_grad(oar_tensor *t, bool on) {
    if (!t) {
        if (!oari_error_pending()) oari_error(OAR_ERR_INVALID, "set_requires_grad: tensor is NULL");
        return OAR_ERR_INVALID;
    }
    if (on && !differentiable_dtype(t->dtype))
        return oari_error(OAR_ERR_INVALID, "set_requires_grad: only floating and complex tensors "
                          "can require gradients (got %s); cast it first",
                          oar_dtype_name(t->dtype));
    if (!on && oari_grad_fn(t))
        return oari_error(OAR_ERR_STATE, "set_requires_grad: can only turn it off on a leaf "
                          "tensor; this one was made by %s (use oar_detach)",
                          oari_node_name(oari_grad_fn(t)));
    t->requires_grad = on;
    return 0;
}

bool oar_tensor_requires_grad(const oar_tensor *t) {
    return t ? (t->requires_grad) : (oari_null_arg(__func__, "tensor"), false);
}

bool oar_tensor_is_leaf(const oar_tensor *t) {
    return t ? (!oari_grad_fn(t)) : (oari_null_arg(__func__, "tensor"), false);
}

oar_tensor *oar_tensor_grad(const oar_tensor *t) {
    return t ? t->grad : (oari_null_arg(__func__, "tensor"), NULL);
}

int oar_tensor_zero_grad(oar_tensor *t) {
    if (!t) {
        if (!oari_error_pending()) oari_error(OAR_ERR_INVALID, "zero_grad: tensor is NULL");
        return OAR_ERR_INVALID;
    }
    oar_tensor *g = t->grad;
    t->grad = NULL;
    oar_tensor_release(g);
    return 0;
}

static void release_grad_fn(void *node) { oari_node_release(node); }

void oari_autograd_install(void) {
    static const oari_ext_class grad_fn_class = {.release = release_grad_fn};
    oari_ext_register(OARI_EXT_GRAD_FN, &grad_fn_class);
    oari_hooks.record = oari_autograd_record;
}

/* The module system: named parameters, buffers and children, train/eval
 * mode, and the flattened state ("features.0.weight") that optimizers and
 * checkpoints read. */
#include "module.h"

#include <oar/autograd.h>
#include <oar/ops.h>
#include <stdio.h>
#include <string.h>

#define MAX_NAME 128

oar_module *oar_module_new(const char *type_name, oar_module_forward_fn forward, void *ctx,
                           void (*free_ctx)(void *ctx)) {
    oar_module *m = oari_calloc(1, sizeof *m);
    if (!m) return NULL;
    m->type = oari_strdup(type_name ? type_name : "Module");
    if (!m->type) {
        oari_free(m, sizeof *m);
        return NULL;
    }
    m->forward = forward;
    m->ctx = ctx;
    m->free_ctx = free_ctx;
    m->training = true;
    return m;
}

static void free_state(oar_module *m) {
    for (int i = 0; i < m->n_state; i++)
        oari_strfree((char *)m->state[i].name);
    oari_free(m->state, (size_t)m->cap_state * sizeof *m->state);
    m->state = NULL;
    m->n_state = m->cap_state = 0;
    m->state_valid = false;
}

void oar_module_free(oar_module *m) {
    if (!m) return;
    for (int i = 0; i < m->n_children; i++) {
        oar_module_free(m->children[i].m);
        oari_strfree(m->children[i].name);
    }
    for (int i = 0; i < m->n_tensors; i++) {
        oar_tensor_release(m->tensors[i].t);
        oari_strfree(m->tensors[i].name);
    }
    oari_free(m->children, (size_t)m->cap_children * sizeof *m->children);
    oari_free(m->tensors, (size_t)m->cap_tensors * sizeof *m->tensors);
    free_state(m);
    if (m->free_ctx) m->free_ctx(m->ctx);
    oari_strfree(m->type);
    oari_free(m, sizeof *m);
}

const char *oar_module_type(const oar_module *m) {
    return m ? m->type : (oari_null_arg(__func__, "module"), NULL);
}
void *oar_module_ctx(const oar_module *m) { return m ? m->ctx : (oari_null_arg(__func__, "module"), NULL); }

static void invalidate(oar_module *m) {
    for (; m; m = m->parent)
        m->state_valid = false;
}

static int check_name(const char *what, oar_module *m, const char *name) {
    if (!m) return oari_error(OAR_ERR_INVALID, "%s: module is NULL", what);
    if (!name || !name[0] || strchr(name, '.') || strlen(name) >= MAX_NAME)
        return oari_error(OAR_ERR_INVALID,
                          "%s: invalid name \"%s\" (non-empty, no dots, under %d "
                          "characters)",
                          what, name ? name : "(null)", MAX_NAME);
    for (int i = 0; i < m->n_tensors; i++)
        if (!strcmp(m->tensors[i].name, name))
            return oari_error(OAR_ERR_INVALID, "%s: module %s already has a tensor named \"%s\"",
                              what, m->type, name);
    for (int i = 0; i < m->n_children; i++)
        if (!strcmp(m->children[i].name, name))
            return oari_error(OAR_ERR_INVALID, "%s: module %s already has a child named \"%s\"",
                              what, m->type, name);
    return 0;
}

static int add_tensor(const char *what, oar_module *m, const char *name, oar_tensor *t,
                      bool param) {
    if (!t) {
        if (!oari_error_pending())
            oari_error(OAR_ERR_INVALID, "%s: tensor \"%s\" is NULL", what, name ? name : "(null)");
        return OAR_ERR_INVALID;
    }
    int st = check_name(what, m, name);
    if (st) return st;
    if (param && !oar_dtype_is_float(t->dtype) && !oar_dtype_is_complex(t->dtype))
        return oari_error(OAR_ERR_INVALID,
                          "%s: parameter \"%s\" must be floating or complex, got "
                          "%s",
                          what, name, oar_dtype_name(t->dtype));
    if (param && (st = oar_tensor_set_requires_grad(t, true))) return st;
    if (m->n_tensors == m->cap_tensors) {
        int cap = m->cap_tensors ? 2 * m->cap_tensors : 4;
        void *ts = oari_realloc(m->tensors, (size_t)m->cap_tensors * sizeof *m->tensors,
                                (size_t)cap * sizeof *m->tensors);
        if (!ts) return oari_fail_status();
        m->tensors = ts;
        m->cap_tensors = cap;
    }
    char *copy = oari_strdup(name);
    if (!copy) return oari_fail_status();
    m->tensors[m->n_tensors++] = (struct oari_mod_tensor){copy, oar_tensor_retain(t), param};
    invalidate(m);
    return 0;
}

int oar_module_add_parameter(oar_module *m, const char *name, oar_tensor *t) {
    return add_tensor("module_add_parameter", m, name, t, true);
}

int oar_module_add_buffer(oar_module *m, const char *name, oar_tensor *t) {
    return add_tensor("module_add_buffer", m, name, t, false);
}

int oar_module_add_child(oar_module *m, const char *name, oar_module *child) {
    int st = 0;
    if (!child) {
        if (!oari_error_pending()) oari_error(OAR_ERR_INVALID, "module_add_child: child is NULL");
        st = OAR_ERR_INVALID;
    } else if (child->parent || child == m) {
        /* not ours to free: it belongs to another module */
        return oari_error(OAR_ERR_INVALID, "module_add_child: module %s already has a parent",
                          child->type);
    }
    if (!st) st = check_name("module_add_child", m, name);
    if (!st && m->n_children == m->cap_children) {
        int cap = m->cap_children ? 2 * m->cap_children : 4;
        void *cs = oari_realloc(m->children, (size_t)m->cap_children * sizeof *m->children,
                                (size_t)cap * sizeof *m->children);
        if (cs) {
            m->children = cs;
            m->cap_children = cap;
        } else {
            st = oari_fail_status();
        }
    }
    char *copy = st ? NULL : oari_strdup(name);
    if (!st && !copy) st = oari_fail_status();
    if (st) {
        oar_module_free(child);
        return st;
    }
    m->children[m->n_children++] = (struct oari_mod_child){copy, child};
    child->parent = m;
    invalidate(m);
    return 0;
}

oar_tensor *oar_module_forward(oar_module *m, oar_tensor *x) {
    if (!m) return oari_error(OAR_ERR_INVALID, "module_forward: module is NULL"), NULL;
    if (!m->forward)
        return oari_error(OAR_ERR_STATE, "module_forward: module %s has no forward function",
                          m->type),
               NULL;
    if (!x) {
        if (!oari_error_pending()) oari_error(OAR_ERR_INVALID, "%s: input is NULL", m->type);
        return NULL;
    }
    return m->forward(m, x);
}

/* The segment of oar_module_checkpoint: ctx is the module. */
static int forward_segment(void *ctx, int n_in, oar_tensor *const *in, int n_out, oar_tensor **out) {
    (void)n_in, (void)n_out;
    out[0] = oar_module_forward(ctx, in[0]);
    return out[0] ? 0 : oari_fail_status();
}

oar_tensor *oar_module_checkpoint(oar_module *m, oar_tensor *x) {
    if (!m) return oari_error(OAR_ERR_INVALID, "module_checkpoint: module is NULL"), NULL;
    if (!x) {
        if (!oari_error_pending()) oari_error(OAR_ERR_INVALID, "module_checkpoint: %s: input is NULL", m->type);
        return NULL;
    }
    oar_tensor *y = NULL;
    return oar_checkpoint(forward_segment, m, 1, &x, 1, &y) ? NULL : y;
}

void oar_module_train(oar_module *m, bool training) {
    if (!m) {
        oari_null_arg(__func__, "module");
        return;
    }
    m->training = training;
    for (int i = 0; i < m->n_children; i++)
        oar_module_train(m->children[i].m, training);
}

bool oar_module_is_training(const oar_module *m) {
    return m ? (m->training) : (oari_null_arg(__func__, "module"), false);
}

int oar_module_num_children(const oar_module *m) {
    return m ? m->n_children : (oari_null_arg(__func__, "module"), -1);
}

oar_module *oar_module_child_at(oar_module *m, int i) {
    if (!m || i < 0 || i >= m->n_children) {
        oari_error(OAR_ERR_INVALID, "module_child_at: index %d out of range (%d children)", i,
                   m ? m->n_children : 0);
        return NULL;
    }
    return m->children[i].m;
}

/* Follows a dotted path over children; *rest gets the last component when
 * want_leaf (the tensor name), else the whole path names a child. */
static oar_module *walk(const char *what, oar_module *m, const char *path, bool want_leaf,
                        const char **rest) {
    if (!m || !path) {
        oari_error(OAR_ERR_INVALID, "%s: module or name is NULL", what);
        return NULL;
    }
    const char *p = path;
    for (;;) {
        const char *dot = strchr(p, '.');
        if (!dot && want_leaf) {
            *rest = p;
            return m;
        }
        size_t len = dot ? (size_t)(dot - p) : strlen(p);
        oar_module *next = NULL;
        for (int i = 0; i < m->n_children && !next; i++)
            if (strlen(m->children[i].name) == len && !strncmp(m->children[i].name, p, len))
                next = m->children[i].m;
        if (!next) {
            oari_error(OAR_ERR_INVALID, "%s: no child \"%.*s\" in \"%s\"", what, (int)len, p, path);
            return NULL;
        }
        m = next;
        if (!dot) return m;
        p = dot + 1;
    }
}

oar_module *oar_module_child(oar_module *m, const char *name) {
    return walk("module_child", m, name, false, NULL);
}

oar_tensor *oar_module_get(oar_module *m, const char *name) {
    const char *leaf = NULL;
    oar_module *owner = walk("module_get", m, name, true, &leaf);
    if (!owner) return NULL;
    for (int i = 0; i < owner->n_tensors; i++)
        if (!strcmp(owner->tensors[i].name, leaf)) return owner->tensors[i].t;
    oari_error(OAR_ERR_INVALID, "module_get: no parameter or buffer named \"%s\"", name);
    return NULL;
}

int oar_module_set(oar_module *m, const char *name, oar_tensor *t) {
    const char *leaf = NULL;
    oar_module *owner = walk("module_set", m, name, true, &leaf);
    if (!owner) return OAR_ERR_INVALID;
    if (!t) return oari_error(OAR_ERR_INVALID, "module_set: tensor for \"%s\" is NULL", name);
    for (int i = 0; i < owner->n_tensors; i++) {
        oar_tensor *old = owner->tensors[i].t;
        if (strcmp(owner->tensors[i].name, leaf)) continue;
        if (old == t) return 0;
        char a[200], b[200];
        if (old->dtype != t->dtype || old->ndim != t->ndim ||
            memcmp(old->shape, t->shape, sizeof(int64_t) * (size_t)t->ndim))
            return oari_error(OAR_ERR_INVALID, "module_set: \"%s\" is %s %s; got %s %s", name,
                              oar_dtype_name(old->dtype), oari_shape_str(a, old->ndim, old->shape),
                              oar_dtype_name(t->dtype), oari_shape_str(b, t->ndim, t->shape));
        if (old->requires_grad && !t->requires_grad && oar_tensor_set_requires_grad(t, true))
            return OAR_ERR_INVALID;
        owner->tensors[i].t = oar_tensor_retain(t);
        oar_tensor_release(old);
        invalidate(owner);
        return 0;
    }
    return oari_error(OAR_ERR_INVALID, "module_set: no parameter or buffer named \"%s\"", name);
}

static int state_push(oar_module *root, const char *prefix, const char *name, oar_tensor *t,
                      bool param) {
    if (root->n_state == root->cap_state) {
        int cap = root->cap_state ? 2 * root->cap_state : 16;
        oar_state_entry *s =
            oari_realloc(root->state, (size_t)root->cap_state * sizeof *s, (size_t)cap * sizeof *s);
        if (!s) return oari_fail_status();
        root->state = s;
        root->cap_state = cap;
    }
    size_t n = strlen(prefix) + strlen(name) + 1;
    char *full = oari_malloc(n);
    if (!full) return oari_fail_status();
    snprintf(full, n, "%s%s", prefix, name);
    /* oari_strfree frees strlen + 1 bytes: the exact size allocated */
    root->state[root->n_state++] =
        (oar_state_entry){.name = full, .tensor = t, .is_parameter = param};
    return 0;
}

static int collect(oar_module *root, oar_module *m, char *prefix, size_t plen, int depth) {
    if (depth > 64) return oari_error(OAR_ERR_INVALID, "module_state: modules nest too deep");
    for (int i = 0; i < m->n_tensors; i++) {
        int st = state_push(root, prefix, m->tensors[i].name, m->tensors[i].t, m->tensors[i].param);
        if (st) return st;
    }
    for (int i = 0; i < m->n_children; i++) {
        size_t n = strlen(m->children[i].name);
        if (plen + n + 2 > 64 * MAX_NAME)
            return oari_error(OAR_ERR_INVALID, "module_state: name too long");
        memcpy(prefix + plen, m->children[i].name, n);
        prefix[plen + n] = '.';
        prefix[plen + n + 1] = 0;
        int st = collect(root, m->children[i].m, prefix, plen + n + 1, depth + 1);
        prefix[plen] = 0;
        if (st) return st;
    }
    return 0;
}

int oar_module_state(oar_module *m, const oar_state_entry **entries) {
    if (!m) return oari_error(OAR_ERR_INVALID, "module_state: module is NULL"), -1;
    if (!m->state_valid) {
        for (int i = 0; i < m->n_state; i++)
            oari_strfree((char *)m->state[i].name);
        m->n_state = 0;
        char *prefix = oari_malloc(64 * MAX_NAME);
        if (!prefix) return -1;
        prefix[0] = 0;
        int st = collect(m, m, prefix, 0, 0);
        oari_free(prefix, 64 * MAX_NAME);
        if (st) {
            free_state(m);
            return -1;
        }
        m->state_valid = true;
    }
    if (entries) *entries = m->state;
    return m->n_state;
}

int oar_module_parameters(oar_module *m, oar_tensor **out, int max) {
    const oar_state_entry *s;
    int n = oar_module_state(m, &s);
    if (n < 0) return -1;
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (!s[i].is_parameter) continue;
        if (out && k < max) out[k] = s[i].tensor;
        k++;
    }
    return k;
}

int64_t oar_module_num_elements(oar_module *m) {
    const oar_state_entry *s;
    int n = oar_module_state(m, &s);
    if (n < 0) return -1;
    int64_t total = 0;
    for (int i = 0; i < n; i++)
        if (s[i].is_parameter) total += oar_tensor_numel(s[i].tensor);
    return total;
}

void oar_module_zero_grad(oar_module *m) {
    const oar_state_entry *s;
    int n = oar_module_state(m, &s);
    for (int i = 0; i < n; i++) {
        if (!s[i].is_parameter) continue;
        oar_tensor_zero_grad(s[i].tensor);
    }
}

/* Pools: every result is owned by the innermost pool of its thread, so
 * popping a pool frees a step's temporaries (invariant 5 of docs/architecture.md). Pool
 * structs and their arrays are recycled per thread, so a steady loop of
 * push/pop allocates nothing. */
#include "core.h"

struct oar_pool {
    oar_tensor **items;
    size_t n, cap;
    oar_pool *parent;
};

static _Thread_local oar_pool *top;
static _Thread_local oar_pool *spare; /* popped pools kept for reuse, linked by parent */

oar_pool *oar_pool_push(void) {
    oar_pool *p = spare;
    if (p) {
        spare = p->parent;
    } else {
        p = oari_calloc(1, sizeof *p);
        if (!p) return NULL;
        oari_thread_register(); /* spare pools are freed at the thread's exit */
    }
    p->n = 0;
    p->parent = top;
    top = p;
    return p;
}

int oar_pool_pop(oar_pool *p) {
    if (!p) /* a failed push: keep its message */
        return oari_error_pending() ? oari_fail_status() : oari_error(OAR_ERR_INVALID, "oar_pool_pop: pool is NULL");
    if (p != top) {
        for (oar_pool *q = spare; q; q = q->parent)
            if (q == p)
                return oari_error(OAR_ERR_STATE, "oar_pool_pop: pool was already popped (a pool "
                                  "is popped once, after the pools pushed since)");
        return oari_error(OAR_ERR_STATE, "oar_pool_pop: pool is not the innermost one; pop pools "
                          "in the reverse order of push");
    }
    top = p->parent;
    /* Release newest first: later results tend to hold earlier ones. */
    for (size_t i = p->n; i-- > 0;) oar_tensor_release(p->items[i]);
    p->n = 0;
    p->parent = spare;
    spare = p;
    return 0;
}

oar_tensor *oari_pool_adopt(oar_tensor *t) {
    oar_pool *p = top;
    if (!t || !p) return t;
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 64;
        oar_tensor **items = oari_realloc(p->items, p->cap * sizeof *items, cap * sizeof *items);
        if (!items) {
            oar_tensor_release(t);
            return NULL;
        }
        p->items = items;
        p->cap = cap;
    }
    p->items[p->n++] = t;
    return t;
}

oar_tensor *oari_pool_return(oar_pool *p, oar_tensor *r) {
    oar_tensor_retain(r);
    if (oar_pool_pop(p)) { /* a composite's own pool: popping it cannot fail */
        oar_tensor_release(r);
        return NULL;
    }
    return oari_pool_adopt(r);
}

void oari_pool_trim(void) {
    while (spare) {
        oar_pool *p = spare;
        spare = p->parent;
        oari_free(p->items, p->cap * sizeof *p->items);
        oari_free(p, sizeof *p);
    }
}

/* Grad mode: a per-thread counter of no_grad scopes. It lives with
 * dispatch, which reads it on every call to decide whether to record;
 * autograd and the layers above set it. */
#include "op.h"

static _Thread_local int no_grad_depth;

/* The public three are declared in <oar/autograd.h>, a layer above this
 * file's: OAR_API here too, or the build's hidden visibility keeps them out
 * of liboar.so (tests/install/exports.sh). */
OAR_API void oar_no_grad_push(void) { no_grad_depth++; }
OAR_API void oar_no_grad_pop(void) {
    if (no_grad_depth > 0) no_grad_depth--;
}
OAR_API bool oar_grad_enabled(void) { return no_grad_depth == 0; }

void oari_no_grad_push(void) { no_grad_depth++; }
void oari_no_grad_pop(void) { no_grad_depth--; }
bool oari_grad_mode_enabled(void) { return no_grad_depth == 0; }

/* The recompute segment being traced (checkpoint.c sets it, the tracer
 * tags each node it appends with it): 0 outside any. */
static _Thread_local int recompute_segment;

int oari_recompute_segment(void) { return recompute_segment; }
int oari_recompute_segment_set(int segment) {
    int old = recompute_segment;
    recompute_segment = segment;
    return old;
}

int oari_grad_mode_set_depth(int depth) {
    int old = no_grad_depth;
    no_grad_depth = depth;
    return old;
}

/* Grad mode: a per-thread counter of no_grad scopes. It lives with
 * dispatch, which reads it on every call to decide whether to record;
 * autograd and the layers above set it. */
#include "op.h"

static _Thread_local int no_grad_depth;

void oar_no_grad_push(void) { no_grad_depth++; }
void oar_no_grad_pop(void) {
    if (no_grad_depth > 0) no_grad_depth--;
}
bool oar_grad_enabled(void) { return no_grad_depth == 0; }

void oari_no_grad_push(void) { no_grad_depth++; }
void oari_no_grad_pop(void) { no_grad_depth--; }
bool oari_grad_mode_enabled(void) { return no_grad_depth == 0; }

int oari_grad_mode_set_depth(int depth) {
    int old = no_grad_depth;
    no_grad_depth = depth;
    return old;
}

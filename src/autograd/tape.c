/* PLACEHOLDER until the autograd engine lands: nothing records. */
#include "../ops/op.h"

int oari_autograd_record(oari_op op, const oari_attrs *attrs, int n_in, oar_tensor *const *in,
                         int n_out, oar_tensor **out) {
    (void)op; (void)attrs; (void)n_in; (void)in; (void)n_out; (void)out;
    return 0;
}

void oari_node_release(struct oari_node *n) { (void)n; }

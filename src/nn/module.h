/* Internal: the module struct shared by the module system (module.c) and
 * the built-in layers (layers.c). */
#ifndef OARI_NN_MODULE_H
#define OARI_NN_MODULE_H

#include "../core/core.h"
#include <oar/nn.h>

struct oar_module {
    char *type;
    oar_module_forward_fn forward;
    void *ctx;
    void (*free_ctx)(void *ctx);
    bool training;
    oar_module *parent;

    int n_tensors, cap_tensors;
    struct oari_mod_tensor {
        char *name;
        oar_tensor *t; /* retained */
        bool param;
    } * tensors;

    int n_children, cap_children;
    struct oari_mod_child {
        char *name;
        oar_module *m; /* owned */
    } * children;

    /* configuration of built-in layers */
    int64_t cfg[8];
    double cfgf[4];

    /* the flattened state, rebuilt on demand */
    bool state_valid;
    int n_state, cap_state;
    oar_state_entry *state;
};

/* Converts every floating parameter and buffer of m and its children to
 * dtype (PyTorch's module.to(dtype)); 0 or an error status
 * (transformer.c). */
OARI_HIDDEN int oari_module_to(oar_module *m, oar_dtype dtype);

#endif

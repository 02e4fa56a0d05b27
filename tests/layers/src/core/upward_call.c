/* A deliberate upward call, for the layer check's own test (the CTest
 * check_layers_catches): by its path this object is in core, and it calls
 * into nn. It is compiled, never linked. */
#include <oar/nn.h>

int oari_layer_check_upward_call(oar_module *m);

int oari_layer_check_upward_call(oar_module *m) {
    const oar_state_entry *s;
    return oar_module_state(m, &s);
}

/* Refused: its entry point fails (as a plugin does when its hardware or
 * driver is absent), after saying why through the host. */
#define OAR_DEVICE_PLUGIN_ONLY
#include <oar/device.h>

__attribute__((visibility("default"))) int oar_plugin_init(const oar_host_api *h,
                                                           oar_plugin_desc *out) {
    out->name = "failing_init";
    return h->error(-4, "failing_init: no hardware found");
}

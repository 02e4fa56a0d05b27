/* Refused: built for a device ABI major version oar does not have. */
#define OAR_DEVICE_PLUGIN_ONLY
#include <oar/device.h>

__attribute__((visibility("default"))) int oar_plugin_init(const oar_host_api *h,
                                                           oar_plugin_desc *out) {
    (void)h;
    out->abi_version = ((OAR_DEVICE_ABI_MAJOR + 98) << 16) | 0;
    out->name = "bad_version";
    return 0;
}

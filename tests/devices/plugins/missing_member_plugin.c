/* Refused: its device table has no get_kernel (a required member). */
#define OAR_DEVICE_PLUGIN_ONLY
#include <oar/device.h>

static int count(void *ctx) { (void)ctx; return 1; }
static int props(void *ctx, int i, oar_device_props *o) { (void)ctx, (void)i, (void)o; return 0; }
static void *alloc(void *ctx, int i, size_t n) { (void)ctx, (void)i, (void)n; return 0; }
static void release(void *ctx, int i, void *p, size_t n) { (void)ctx, (void)i, (void)p, (void)n; }
static int to_dev(void *ctx, int i, void *d, size_t o, const void *s, size_t n) {
    (void)ctx, (void)i, (void)d, (void)o, (void)s, (void)n;
    return 0;
}
static int to_host(void *ctx, int i, void *d, const void *s, size_t o, size_t n) {
    (void)ctx, (void)i, (void)d, (void)o, (void)s, (void)n;
    return 0;
}

static const oar_device_iface iface = {
    .abi_version = OAR_DEVICE_ABI_VERSION,
    .struct_size = sizeof(oar_device_iface),
    .type_name = "incomplete",
    .device_count = count,
    .get_props = props,
    .alloc = alloc,
    .free = release,
    .copy_to_device = to_dev,
    .copy_to_host = to_host,
    .get_kernel = 0, /* missing */
};

__attribute__((visibility("default"))) int oar_plugin_init(const oar_host_api *h,
                                                           oar_plugin_desc *out) {
    (void)h;
    out->abi_version = OAR_DEVICE_ABI_VERSION;
    out->name = "missing_member";
    out->iface = &iface;
    return 0;
}

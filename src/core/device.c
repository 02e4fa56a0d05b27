/* The device registry. Every device, the built-in CPU first, is reached
 * through its oar_device_iface table (include/oar/device.h). */
#include "core.h"

#include <stdio.h>
#include <string.h>

extern const oar_device_iface oari_cpu_iface; /* src/backends/cpu/cpu_device.c */

#define MAX_DEVICES 32

static oar_device cpu_device = {.iface = &oari_cpu_iface, .index = 0, .id = 0, .name = "cpu"};
static oar_device *devices[MAX_DEVICES] = {&cpu_device};
static int n_devices = 1;

oar_device *oari_device_cpu(void) { return &cpu_device; }
oar_device *oar_device_cpu(void) { return &cpu_device; }

const char *oar_device_name(const oar_device *d) { return d ? d->name : "(null)"; }

oar_device *oar_device_get(const char *name) {
    if (!name) return oari_error(OAR_ERR_INVALID, "oar_device_get: name is NULL"), NULL;
    if (!strcmp(name, "cpu:0")) return &cpu_device;
    for (int i = 0; i < n_devices; i++)
        if (!strcmp(devices[i]->name, name)) return devices[i];
    char list[512];
    int n = 0;
    for (int i = 0; i < n_devices && n < 480; i++)
        n += snprintf(list + n, sizeof list - (size_t)n, i ? ", %s" : "%s", devices[i]->name);
    oari_error(OAR_ERR_INVALID, "oar_device_get: no device \"%s\" (available: %s)", name, list);
    return NULL;
}

void *oari_device_alloc(oar_device *d, size_t nbytes) {
    void *p = d->iface->alloc(d->ctx, d->index, nbytes);
    if (!p && d != &cpu_device) /* the CPU allocator reports its own failures */
        oari_error(OAR_ERR_NOMEM, "out of memory: %zu bytes on %s", nbytes, d->name);
    return p;
}

void oari_device_free(oar_device *d, void *p, size_t nbytes) {
    if (p) d->iface->free(d->ctx, d->index, p, nbytes);
}

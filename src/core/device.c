/* The device registry. Every device, the built-in CPU first, is reached
 * through its oar_device_iface table (include/oar/device.h); plugins add
 * theirs through src/core/plugin_loader.c. */
#include "core.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

oar_device *oari_cpu_device;
/* Devices live here for the life of the process (registration allocates
 * nothing, so the CPU's at start-up cannot fail). */
static oar_device device_slots[OARI_MAX_DEVICES];
static oar_device *devices[OARI_MAX_DEVICES];
static int n_devices;
static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;

/* Set by the host's error hook when a plugin reports a failure itself, so
 * the wrappers below keep its message rather than write a vaguer one. */
_Thread_local bool oari_device_reported;

/* Reports a failed device call unless the plugin already did. */
static int failed(int st, const char *fmt, ...) OARI_PRINTF(2, 3);
static int failed(int st, const char *fmt, ...) {
    if (st > 0 || st < OAR_ERR_STATE) st = OAR_ERR_IO;
    if (oari_device_reported) return st;
    va_list ap;
    va_start(ap, fmt);
    oari_verror(st, fmt, ap);
    va_end(ap);
    return st;
}

oar_device *oar_device_cpu(void) { return oari_cpu_device; }

const char *oar_device_name(const oar_device *d) {
    return d ? d->name : (oari_null_arg(__func__, "device"), "(null)");
}

int oari_device_register(const oar_device_iface *iface, void *ctx, int index) {
    pthread_mutex_lock(&registry_lock);
    int st = 0;
    if (n_devices >= OARI_MAX_DEVICES) {
        st = oari_error(OAR_ERR_STATE, "device registry is full (%d devices); %s:%d not added",
                        OARI_MAX_DEVICES, iface->type_name, index);
    } else {
        oar_device *d = &device_slots[n_devices];
        d->iface = iface;
        d->ctx = ctx;
        d->index = index;
        d->id = n_devices;
        bool cpu = !oari_cpu_device && !strcmp(iface->type_name, "cpu");
        if (cpu) strcpy(d->name, "cpu");
        else snprintf(d->name, sizeof d->name, "%.20s:%d", iface->type_name, index);
        devices[n_devices] = d;
        if (cpu) __atomic_store_n(&oari_cpu_device, d, __ATOMIC_RELEASE);
        __atomic_store_n(&n_devices, n_devices + 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&registry_lock);
    return st;
}

bool oari_device_type_taken(const char *type) {
    int n = __atomic_load_n(&n_devices, __ATOMIC_ACQUIRE);
    for (int i = 0; i < n; i++)
        if (!strcmp(devices[i]->iface->type_name, type)) return true;
    return false;
}

int oar_device_count(void) {
    oari_plugins_ensure_loaded();
    return __atomic_load_n(&n_devices, __ATOMIC_ACQUIRE);
}

oar_device *oar_device_at(int i) {
    int n = oar_device_count();
    if (i < 0 || i >= n)
        return oari_error(OAR_ERR_INVALID, "oar_device_at: index %d is out of range [0, %d)", i, n),
               NULL;
    return devices[i];
}

oar_device *oar_device_get(const char *name) {
    if (!name) return oari_error(OAR_ERR_INVALID, "oar_device_get: name is NULL"), NULL;
    if (!strcmp(name, "cpu") || !strcmp(name, "cpu:0")) return oari_cpu_device;
    int n = oar_device_count();
    char with_index[48];
    if (!strchr(name, ':') && strlen(name) < 40) { /* "opencl" means "opencl:0" */
        snprintf(with_index, sizeof with_index, "%s:0", name);
        name = with_index;
    }
    for (int i = 0; i < n; i++)
        if (!strcmp(devices[i]->name, name)) return devices[i];
    char list[512];
    int len = 0;
    for (int i = 0; i < n && len < 480; i++)
        len += snprintf(list + len, sizeof list - (size_t)len, i ? ", %s" : "%s", devices[i]->name);
    oari_error(OAR_ERR_INVALID, "oar_device_get: no device \"%s\" (available: %s); %s", name, list,
               oar_plugin_count() ? "oar_device_report lists the plugins and why any was refused"
                                  : "no plugin found: put plugins in a folder of OAR_PLUGIN_PATH");
    return NULL;
}

int oar_device_get_props(const oar_device *d, oar_device_props *out) {
    if (!d || !out) return oari_error(OAR_ERR_INVALID, "oar_device_get_props: %s is NULL",
                                      d ? "out" : "device");
    memset(out, 0, sizeof *out);
    oari_device_reported = false;
    int st = d->iface->get_props(d->ctx, d->index, out);
    out->name[sizeof out->name - 1] = 0;
    return st ? failed(st, "oar_device_get_props: %s failed (%d)", d->name, st) : 0;
}

int oar_device_native_dot(const oar_device *d, int32_t dtype) {
    if (!d) return oari_error(OAR_ERR_INVALID, "oar_device_native_dot: device is NULL");
    if (dtype < 0 || dtype >= OAR_DTYPE_COUNT)
        return oari_error(OAR_ERR_INVALID, "oar_device_native_dot: dtype code %d is not an oar dtype", (int)dtype);
    if (dtype == OAR_F32 || dtype == OAR_F64) return 1;
    if (!d->iface->native_dot) return 1;
    oari_device_reported = false;
    int r = d->iface->native_dot(d->ctx, d->index, dtype);
    return r < 0 ? failed(r, "oar_device_native_dot: %s failed (%d)", d->name, r) : r > 0;
}

int oar_device_synchronize(oar_device *d) {
    if (!d) return oari_error(OAR_ERR_INVALID, "oar_device_synchronize: device is NULL");
    if (!d->iface->synchronize) return 0;
    oari_device_reported = false;
    int st = d->iface->synchronize(d->ctx, d->index);
    return st ? failed(st, "oar_device_synchronize: %s failed (%d)", d->name, st) : 0;
}

void *oari_device_alloc(oar_device *d, size_t nbytes) {
    void *p = d->iface->alloc(d->ctx, d->index, nbytes);
    if (!p && d != oari_cpu_device) /* the CPU allocator reports its own failures */
        oari_error(OAR_ERR_NOMEM, "out of memory: %zu bytes on %s", nbytes, d->name);
    return p;
}

void oari_device_free(oar_device *d, void *p, size_t nbytes) {
    if (p) d->iface->free(d->ctx, d->index, p, nbytes);
}

int oari_device_to_host(oar_device *d, void *dst, const void *buffer, size_t offset, size_t n) {
    if (!n) return 0;
    oari_device_reported = false;
    int st = d->iface->copy_to_host(d->ctx, d->index, dst, buffer, offset, n);
    return st ? failed(st, "copy of %zu bytes from %s to the host failed", n, d->name) : 0;
}

int oari_device_from_host(oar_device *d, void *buffer, size_t offset, const void *src, size_t n) {
    if (!n) return 0;
    oari_device_reported = false;
    int st = d->iface->copy_to_device(d->ctx, d->index, buffer, offset, src, n);
    return st ? failed(st, "copy of %zu bytes from the host to %s failed", n, d->name) : 0;
}

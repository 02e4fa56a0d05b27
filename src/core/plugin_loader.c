/* The plugin loader: finds device plugins (shared libraries exporting
 * oar_plugin_init) in the folders of OAR_PLUGIN_PATH and next to liboar
 * (scan_next_to_library), checks their ABI and tables, and registers
 * their devices. A plugin that fails any check is refused with a message
 * naming it and the reason; oar keeps running. */
#include "core.h"
#include "self_dir.h"

#include <dirent.h>
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef OAR_PLUGIN_DIR
#define OAR_PLUGIN_DIR "/usr/local/lib/oar/plugins"
#endif

#define MAX_PLUGINS 64

typedef struct plugin {
    oar_plugin_info info;
    void *handle;
    oar_plugin_desc desc;
    oar_device_iface iface; /* the plugin's table, zero-extended to ours */
} plugin;

static plugin *plugins[MAX_PLUGINS];
static int n_plugins;
static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- the host table a plugin gets ----------------------------------------- */

void oari_log(int level, const char *who, const char *fmt, ...) {
    if (level == OAR_LOG_DEBUG) {
        const char *env = getenv("OAR_LOG");
        if (!env || strcmp(env, "debug")) return;
    }
    static const char *names[] = {"debug", "info", "warning", "error"};
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "oar: %s: %s: %s\n", names[level >= 0 && level <= 3 ? level : 1], who, msg);
}

static void host_log(int level, const char *who, const char *msg) {
    oari_log(level, who ? who : "plugin", "%s", msg ? msg : "");
}

static int host_error(int status, const char *msg) {
    if (status > 0 || status < OAR_ERR_STATE) status = OAR_ERR_IO;
    oari_error(status, "%s", msg ? msg : "(no message)");
    oari_device_reported = true;
    return status;
}

static void *host_alloc(size_t n) { return oari_malloc(n ? n : 1); }
static void host_free(void *p, size_t n) { oari_free(p, n ? n : 1); }

static const oar_host_api host_api = {
    .abi_version = OAR_DEVICE_ABI_VERSION,
    .struct_size = sizeof(oar_host_api),
    .log = host_log,
    .error = host_error,
    .alloc = host_alloc,
    .free = host_free,
};

/* ---- checks ---------------------------------------------------------------- */

#define MAJOR(v) ((unsigned)(v) >> 16)
#define MINOR(v) ((unsigned)(v) & 0xffffu)

/* The first missing required member of t, or NULL. */
static const char *missing_member(const oar_device_iface *t) {
    if (!t->type_name || !t->type_name[0]) return "type_name";
    if (!t->device_count) return "device_count";
    if (!t->get_props) return "get_props";
    if (!t->alloc) return "alloc";
    if (!t->free) return "free";
    if (!t->copy_to_device) return "copy_to_device";
    if (!t->copy_to_host) return "copy_to_host";
    if (!t->get_kernel) return "get_kernel";
    return NULL;
}

static void refuse(plugin *p, const char *fmt, ...) OARI_PRINTF(2, 3);
static void refuse(plugin *p, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->info.reason, sizeof p->info.reason, fmt, ap);
    va_end(ap);
}

/* Runs every check; on success registers the devices. Fills p->info. */
static void try_load(plugin *p) {
    const char *path = p->info.path;
    dlerror();
    p->handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!p->handle) {
        const char *e = dlerror();
        refuse(p, "not a loadable shared library (%s)", e ? e : "dlopen failed");
        return;
    }
    oar_plugin_init_fn init;
    *(void **)&init = dlsym(p->handle, OAR_PLUGIN_INIT_SYMBOL);
    if (!init) {
        refuse(p, "no " OAR_PLUGIN_INIT_SYMBOL " symbol (not an oar plugin)");
        return;
    }
    memset(&p->desc, 0, sizeof p->desc);
    p->desc.abi_version = OAR_DEVICE_ABI_VERSION;
    p->desc.struct_size = sizeof p->desc;
    char saved[1024];
    snprintf(saved, sizeof saved, "%s", oar_last_error());
    oar_clear_error();
    oari_device_reported = false;
    int st = init(&host_api, &p->desc);
    if (p->desc.name) snprintf(p->info.name, sizeof p->info.name, "%s", p->desc.name);
    if (st) {
        refuse(p, "oar_plugin_init failed with status %d%s%s", st,
               oari_device_reported ? ": " : "", oari_device_reported ? oar_last_error() : "");
        p->desc.shutdown = NULL; /* init failed: nothing to shut down */
        return;
    }
    oari_error(0, "%s", saved); /* keep the caller's error state as it was */
    unsigned v = p->desc.abi_version;
    if (MAJOR(v) != OAR_DEVICE_ABI_MAJOR) {
        refuse(p, "built for device ABI %u.%u, this oar has %u.%u (the major version must match; "
               "rebuild the plugin against this oar's <oar/device.h>)", MAJOR(v), MINOR(v),
               OAR_DEVICE_ABI_MAJOR, OAR_DEVICE_ABI_MINOR);
        return;
    }
    if (!p->desc.name || !p->desc.name[0]) {
        refuse(p, "its descriptor has no name (required member oar_plugin_desc.name)");
        return;
    }
    const oar_device_iface *t = p->desc.iface;
    if (!t) {
        refuse(p, "its descriptor has no device table (required member oar_plugin_desc.iface)");
        return;
    }
    if (MAJOR(t->abi_version) != OAR_DEVICE_ABI_MAJOR) {
        refuse(p, "its device table is for device ABI %u.%u, this oar has %u.%u (the major "
               "version must match)", MAJOR(t->abi_version), MINOR(t->abi_version),
               OAR_DEVICE_ABI_MAJOR, OAR_DEVICE_ABI_MINOR);
        return;
    }
    size_t need = offsetof(oar_device_iface, get_kernel) + sizeof t->get_kernel;
    if (t->struct_size < need) {
        refuse(p, "its device table declares %u bytes, fewer than the %zu of the required members",
               (unsigned)t->struct_size, need);
        return;
    }
    /* Our copy: the members the plugin declared, NULL/0 past them. */
    memset(&p->iface, 0, sizeof p->iface);
    memcpy(&p->iface, t, t->struct_size < sizeof p->iface ? t->struct_size : sizeof p->iface);
    p->iface.struct_size = sizeof p->iface;
    const char *miss = missing_member(&p->iface);
    if (miss) {
        refuse(p, "its device table lacks the required member %s", miss);
        return;
    }
    if (strlen(p->iface.type_name) > 20 || strchr(p->iface.type_name, ':')) {
        refuse(p, "device type name \"%s\" is longer than 20 characters or has a ':'",
               p->iface.type_name);
        return;
    }
    if (oari_device_type_taken(p->iface.type_name)) {
        refuse(p, "device type \"%s\" is already provided by an earlier plugin", p->iface.type_name);
        return;
    }
    int n = p->iface.device_count(p->desc.ctx);
    if (n < 0) {
        refuse(p, "device_count failed with status %d", n);
        return;
    }
    for (int i = 0; i < n; i++) {
        if (oari_device_register(&p->iface, p->desc.ctx, i)) {
            oari_log(OAR_LOG_WARN, path, "%s", oar_last_error());
            break;
        }
        p->info.n_devices++;
    }
    p->info.loaded = true;
}

static int load_locked(const char *path) {
    for (int i = 0; i < n_plugins; i++)
        if (!strcmp(plugins[i]->info.path, path)) {
            if (plugins[i]->info.loaded) return 0;
            return oari_error(OAR_ERR_STATE, "plugin %s: refused earlier: %s", path,
                              plugins[i]->info.reason);
        }
    if (n_plugins >= MAX_PLUGINS)
        return oari_error(OAR_ERR_STATE, "plugin %s: too many plugins (%d)", path, MAX_PLUGINS);
    if (strlen(path) >= sizeof plugins[0]->info.path)
        return oari_error(OAR_ERR_INVALID, "plugin path is longer than %zu characters",
                          sizeof plugins[0]->info.path - 1);
    plugin *p = oari_calloc(1, sizeof *p);
    if (!p) return oari_fail_status();
    snprintf(p->info.path, sizeof p->info.path, "%s", path);
    try_load(p);
    plugins[n_plugins++] = p;
    if (p->info.loaded) {
        oari_log(OAR_LOG_DEBUG, path, "loaded plugin %s (%d devices)", p->info.name,
                 p->info.n_devices);
        return 0;
    }
    oari_log(OAR_LOG_WARN, path, "plugin refused: %s", p->info.reason);
    if (p->desc.shutdown) p->desc.shutdown(p->desc.ctx);
    p->desc.shutdown = NULL;
    if (p->handle) dlclose(p->handle);
    p->handle = NULL;
    return oari_error(OAR_ERR_INVALID, "plugin %s refused: %s", path, p->info.reason);
}

static void shutdown_all(void) {
    /* Plugin code stays mapped (no dlclose): objects freed later at exit may
     * still call into it. */
    for (int i = n_plugins - 1; i >= 0; i--)
        if (plugins[i]->info.loaded && plugins[i]->desc.shutdown) {
            plugins[i]->desc.shutdown(plugins[i]->desc.ctx);
            plugins[i]->desc.shutdown = NULL;
        }
}

static bool scanned;

/* The folders scanned so far (real paths): one reached twice (the build
 * tree's plugins also in OAR_PLUGIN_PATH) is scanned once. */
static char scanned_dirs[16][OARI_PATH];
static int n_scanned_dirs;

/* Whether a plugin of this file name was tried already, from an earlier
 * folder: the first folder that has a name wins, as in PATH, so an
 * installed copy of a plugin the build tree also has is not refused as a
 * second provider of its device type. */
static bool name_tried(const char *name) {
    for (int i = 0; i < n_plugins; i++) {
        const char *slash = strrchr(plugins[i]->info.path, '/');
        if (!strcmp(slash ? slash + 1 : plugins[i]->info.path, name)) return true;
    }
    return false;
}

static void scan_dir(const char *dir) {
    char real[PATH_MAX];
    DIR *d = realpath(dir, real) ? opendir(real) : NULL;
    if (!d) {
        oari_log(OAR_LOG_DEBUG, "plugin loader", "cannot open plugin folder %s", dir);
        return;
    }
    for (int i = 0; i < n_scanned_dirs; i++)
        if (!strcmp(scanned_dirs[i], real)) {
            closedir(d);
            return;
        }
    if (n_scanned_dirs < 16 && strlen(real) < OARI_PATH)
        memcpy(scanned_dirs[n_scanned_dirs++], real, strlen(real) + 1); /* (length checked above) */
    /* Sorted, so the load order (and device names) do not depend on the
     * file system. */
    char *names[256];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 256) {
        size_t len = strlen(e->d_name);
        if (len < 4 || strcmp(e->d_name + len - 3, ".so")) continue;
        if (!(names[n] = oari_strdup(e->d_name))) break;
        n++;
    }
    closedir(d);
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && strcmp(names[j - 1], names[j]) > 0; j--) {
            char *t = names[j];
            names[j] = names[j - 1];
            names[j - 1] = t;
        }
    for (int i = 0; i < n; i++) {
        char path[1024];
        struct stat sb;
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (name_tried(names[i]))
            oari_log(OAR_LOG_DEBUG, path, "skipped: a plugin of that name came first from an earlier folder");
        else if (stat(path, &sb) == 0 && S_ISREG(sb.st_mode)) load_locked(path);
        oari_strfree(names[i]);
    }
}

/* The folders next to liboar, so that neither an installed program nor one
 * of the build tree needs OAR_PLUGIN_PATH: the build tree's plugins folder
 * when liboar (or the program linked with it statically) sits in a CMake
 * build folder, <libdir>/oar/plugins for each library folder (the install
 * layout: src/core/self_dir.c finds liboar's own, and for a static link
 * <program's folder>/../<libdir>), and the configured OAR_PLUGIN_DIR. */
static void scan_next_to_library(void) {
    char self[OARI_PATH], p[PATH_MAX + 32], dirs[4][OARI_PATH];
    if (oari_self_dir(self, sizeof self) >= 0) {
        snprintf(p, sizeof p, "%s/CMakeCache.txt", self);
        if (access(p, F_OK) == 0) {
            snprintf(p, sizeof p, "%s/plugins", self);
            scan_dir(p);
        }
    }
    int n = oari_lib_dirs(dirs, 4);
    for (int i = 0; i < n; i++) {
        snprintf(p, sizeof p, "%s/oar/plugins", dirs[i]);
        scan_dir(p);
    }
    scan_dir(OAR_PLUGIN_DIR);
}

void oari_plugins_ensure_loaded(void) {
    if (__atomic_load_n(&scanned, __ATOMIC_ACQUIRE)) return;
    pthread_mutex_lock(&load_lock);
    if (!scanned) {
        char saved[1024];
        snprintf(saved, sizeof saved, "%s", oar_last_error());
        const char *env = getenv("OAR_PLUGIN_PATH");
        if (env) {
            char *copy = oari_strdup(env);
            for (char *s = copy, *tok; copy && (tok = strsep(&s, ":"));)
                if (*tok) scan_dir(tok);
            oari_strfree(copy);
        }
        /* tests that need a known set of plugins turn these off */
        if (!(getenv("OAR_PLUGIN_NO_INSTALL_DIR"))) scan_next_to_library();
        atexit(shutdown_all);
        oari_error(0, "%s", saved); /* a refused plugin is logged, not left as this call's error */
        __atomic_store_n(&scanned, true, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&load_lock);
}

int oar_plugin_load(const char *path) {
    if (!path) return oari_error(OAR_ERR_INVALID, "oar_plugin_load: path is NULL");
    oari_plugins_ensure_loaded();
    pthread_mutex_lock(&load_lock);
    int st = load_locked(path);
    pthread_mutex_unlock(&load_lock);
    return st;
}

int oar_plugin_count(void) {
    oari_plugins_ensure_loaded();
    return __atomic_load_n(&n_plugins, __ATOMIC_ACQUIRE);
}

int oar_plugin_get_info(int i, oar_plugin_info *out) {
    int n = oar_plugin_count();
    if (!out) return oari_error(OAR_ERR_INVALID, "oar_plugin_get_info: out is NULL");
    if (i < 0 || i >= n)
        return oari_error(OAR_ERR_INVALID, "oar_plugin_get_info: index %d is out of range [0, %d)",
                          i, n);
    pthread_mutex_lock(&load_lock);
    *out = plugins[i]->info;
    pthread_mutex_unlock(&load_lock);
    return 0;
}

int oar_device_report(char *buf, size_t size) {
    if (size && !buf) return oari_error(OAR_ERR_INVALID, "oar_device_report: buf is NULL"), -1;
    size_t len = 0;
    char line[1024];
    int nd = oar_device_count(), np = oar_plugin_count();
    if (size) buf[0] = 0;
    for (int i = 0; i < nd + np; i++) {
        if (i < nd) {
            oar_device *d = oar_device_at(i);
            oar_device_props pr;
            if (oar_device_get_props(d, &pr)) snprintf(pr.name, sizeof pr.name, "(no properties)");
            snprintf(line, sizeof line, "device %-10s %s, %llu MiB\n", d->name, pr.name,
                     (unsigned long long)(pr.total_memory >> 20));
        } else {
            oar_plugin_info in;
            oar_plugin_get_info(i - nd, &in);
            if (in.loaded)
                snprintf(line, sizeof line, "plugin %s loaded: %s, %d device%s\n", in.path, in.name,
                         in.n_devices, in.n_devices == 1 ? "" : "s");
            else
                snprintf(line, sizeof line, "plugin %s refused: %s\n", in.path, in.reason);
        }
        size_t l = strlen(line);
        if (len + 1 < size) snprintf(buf + len, size - len, "%s", line);
        len += l;
    }
    return (int)len;
}

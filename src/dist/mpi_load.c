/* Opens the MPI transport, liboar_mpi.so (mpi_api.h), the first time
 * something needs MPI (oar_dist_init). It is looked for in the library
 * folders of src/core/self_dir.c: next to liboar (or to the program linked
 * with it statically, as in the build tree), in the install layout, then
 * in the configured libdir. Opened RTLD_GLOBAL, as a direct link would
 * have loaded libmpi: Open MPI's own components resolve symbols of libmpi
 * and open-pal through the global scope. */
#include "dist.h"

#include "../core/self_dir.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

const oari_mpi_api *oari_mpi;

#ifdef OAR_NO_MPI
int oari_mpi_load(const char *who) {
    if (oari_mpi) return 0;
    return oari_error(OAR_ERR_UNSUPPORTED, "%s: this oar was built without MPI (OAR_WITH_MPI=OFF), "
                      "so it has no distributed tensors", who);
}
#else
#define MODULE "liboar_mpi.so"

/* The module's table from the file at path, or NULL with why in `why`. */
static const oari_mpi_api *open_module(const char *path, char *why, size_t size) {
    dlerror();
    void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(why, size, "%s", e ? e : "dlopen failed");
        return NULL;
    }
    oari_mpi_module_fn fn;
    *(void **)&fn = dlsym(h, OARI_MPI_MODULE_SYMBOL);
    const oari_mpi_api *api = fn ? fn() : NULL;
    if (api && api->version == OARI_MPI_API_VERSION && api->struct_size == sizeof *api)
        return api; /* (never closed: MPI stays loaded for the process) */
    snprintf(why, size, "%s is not the MPI module of this oar (%s); reinstall oar", path,
             api ? "another version" : "no " OARI_MPI_MODULE_SYMBOL);
    dlclose(h);
    return NULL;
}

int oari_mpi_load(const char *who) {
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    if (__atomic_load_n(&oari_mpi, __ATOMIC_ACQUIRE)) return 0;
    pthread_mutex_lock(&lock);
    char dirs[4][OARI_PATH], path[PATH_MAX + 32], tried[4 * PATH_MAX + 16] = "", why[PATH_MAX + 256] = "";
    int n = oari_lib_dirs(dirs, 4);
    const oari_mpi_api *api = NULL;
    for (int i = 0; i < n && !api && !why[0]; i++) {
        snprintf(path, sizeof path, "%s/" MODULE, dirs[i]);
        size_t len = strlen(tried);
        snprintf(tried + len, sizeof tried - len, "%s%s", len ? ", " : "", dirs[i]);
        /* a file there that fails to open (libmpi missing) is the answer */
        if (access(path, F_OK) == 0) api = open_module(path, why, sizeof why);
    }
    if (api) __atomic_store_n(&oari_mpi, api, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&lock);
    if (api) return 0;
    if (why[0]) return oari_error(OAR_ERR_STATE, "%s: cannot load oar's MPI module: %s", who, why);
    return oari_error(OAR_ERR_STATE, "%s: oar's MPI module " MODULE " is in none of the folders "
                      "searched (%s); it is installed next to liboar", who, tried[0] ? tried : "none found");
}
#endif

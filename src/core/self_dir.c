/* Where this copy of liboar lives, so that what is installed or built next
 * to it (device plugins, the MPI module) is found without environment
 * variables, wherever the prefix or the build folder is. */
#define _GNU_SOURCE /* dladdr1, RTLD_DL_LINKMAP */
#include "self_dir.h"

#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef OAR_INSTALL_LIBDIR
#define OAR_INSTALL_LIBDIR "lib"                  /* relative to the prefix (GNUInstallDirs) */
#endif
#ifndef OAR_INSTALL_FULL_LIBDIR
#define OAR_INSTALL_FULL_LIBDIR "/usr/local/lib" /* the configured prefix's */
#endif

int oari_self_dir(char *dir, size_t size) {
    Dl_info info;
    struct link_map *map = NULL;
    char path[PATH_MAX];
    if (!size) return -1;
    dir[0] = 0;
    if (!dladdr1((void *)oari_self_dir, &info, (void **)&map, RTLD_DL_LINKMAP) || !map) return -1;
    /* The main program's map has no name (dladdr would give argv[0], which
     * a search of PATH leaves without a folder): ask the kernel. */
    bool exe = !map->l_name || !map->l_name[0];
    if (exe) {
        ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
        if (n <= 0) return -1;
        path[n] = 0;
    } else if (!realpath(map->l_name, path)) {
        return -1;
    }
    char *slash = strrchr(path, '/');
    if (!slash) return -1;
    *slash = 0;
    if ((size_t)snprintf(dir, size, "%s", slash == path ? "/" : path) >= size) return dir[0] = 0, -1;
    return exe;
}

/* Appends the real path of p to dirs unless it is missing or there already. */
static int add_dir(char (*dirs)[OARI_PATH], int n, int max, const char *p) {
    char real[PATH_MAX];
    if (n >= max || !realpath(p, real) || strlen(real) >= OARI_PATH) return n;
    for (int i = 0; i < n; i++)
        if (!strcmp(dirs[i], real)) return n;
    memcpy(dirs[n], real, strlen(real) + 1); /* (length checked above) */
    return n + 1;
}

int oari_lib_dirs(char (*dirs)[OARI_PATH], int max) {
    char self[OARI_PATH], p[OARI_PATH + 64];
    int n = 0, kind = oari_self_dir(self, sizeof self);
    if (kind >= 0) n = add_dir(dirs, n, max, self);
    if (kind == 1 && OAR_INSTALL_LIBDIR[0] != '/') { /* <prefix>/bin/prog linked statically */
        snprintf(p, sizeof p, "%s/../%s", self, OAR_INSTALL_LIBDIR);
        n = add_dir(dirs, n, max, p);
    }
    return add_dir(dirs, n, max, OAR_INSTALL_FULL_LIBDIR);
}

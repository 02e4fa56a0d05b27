/* Where this copy of liboar lives (self_dir.c), for what is installed or
 * built next to it: device plugins (plugin_loader.c) and the MPI module
 * (src/dist/mpi_load.c). Its own header, not core.h: few files need it. */
#ifndef OARI_SELF_DIR_H
#define OARI_SELF_DIR_H

#include <stddef.h>

#define OARI_PATH 1024

/* The folder of the object that holds liboar's code: liboar.so's (returns
 * 0), or the executable's when liboar is linked statically (returns 1);
 * -1, with dir "", when it cannot be found. */
__attribute__((visibility("hidden"))) int oari_self_dir(char *dir, size_t size);

/* The library folders where files installed or built with liboar are
 * looked for, best first, as real paths, each once, existing ones only:
 * the folder of oari_self_dir (in the build tree the programs, liboar.so
 * and liboar_mpi.so share it); for a static link also <that folder>/../
 * <libdir> (a program installed in <prefix>/bin); then the configured
 * <prefix>/<libdir>. Returns how many were written (at most max). */
__attribute__((visibility("hidden"))) int oari_lib_dirs(char (*dirs)[OARI_PATH], int max);

#endif

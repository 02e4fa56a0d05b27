/* Run-time compilation of generated C (src/compiler/jit.c): a translation
 * unit becomes a shared library, built with the system compiler ($CC, else
 * cc), cached on disk and loaded with dlopen.
 *
 * The cache ($OAR_CACHE_DIR, else $XDG_CACHE_HOME/oar/kernels, else
 * ~/.cache/oar/kernels) is keyed by a hash of the source, the flags, the
 * compiler's identity (its path and `--version` text) and OARI_JIT_VERSION.
 * One lock file per key serialises processes building the same library; a
 * library is written to a temporary name and renamed, so readers never see
 * half a file; a library that fails to load (truncated, corrupt) is rebuilt.
 *
 * Flags never include -ffast-math, -Ofast or -funsafe-math-optimizations:
 * gcc links crtfastmath.o into a shared library built that way, and loading
 * it switches the whole process to flush-to-zero. $OAR_JIT_CFLAGS (extra
 * flags) naming one of them is refused. */
/* Details of this implementation (src/compiler/jit.c):
 * - $CC and $OAR_JIT_CFLAGS are split on blanks (no quoting) and read once,
 *   with the cache folder, by the probe; the compiler runs through
 *   posix_spawnp (no shell), stdin from /dev/null, its output captured.
 * - The key also covers the CPU (cpuid on x86-64): -march=native code from
 *   one machine is never loaded on another sharing the cache folder.
 * - <cache>/<32 hex>.so is the library, <hex>.c its source (kept for
 *   reading), <hex>.lock the lock file (flock; never removed).
 * - A cached library whose ELF headers, segments or section table run past
 *   the end of the file, or that dlopen refuses, is rebuilt (with a warning
 *   on stderr naming it and why). OAR_LOG=debug logs each compile's time.
 * - The compiler runs with LC_ALL=C: the `--version` text (so the key) does
 *   not depend on the user's language, and its messages are English.
 * - Out of memory gives OAR_ERR_NOMEM; $OAR_CACHE_DIR may be 447 bytes long
 *   at most (so that oari_jit_stats.path holds every library's path).
 * - Every dlopen is guarded: a library whose loading changes the
 *   floating-point control state (MXCSR, x87 control word, rounding mode) is
 *   closed, the state restored, and the load fails (OAR_ERR_INVALID): this
 *   catches a $CC that adds -ffast-math behind our back.
 * - Refused flags ($OAR_JIT_CFLAGS or $CC naming -ffast-math, -Ofast,
 *   -funsafe-math-optimizations, -mdaz-ftz) make oari_jit_available() false
 *   and oari_jit_load fail with OAR_ERR_INVALID naming the flag. */
#ifndef OARI_JIT_H
#define OARI_JIT_H

#include "../core/core.h"

#define OARI_JIT_VERSION 1 /* bump when generated code or flags change meaning */

typedef struct oari_jit_lib oari_jit_lib;

typedef struct oari_jit_stats {
    bool compiled;        /* the compiler ran (false: a cache hit) */
    double ms;            /* wall time of oari_jit_load */
    char path[512];       /* the cached library */
} oari_jit_stats;

/* True if a working C compiler was found (probed once per process; the
 * first failure is reported once on stderr: "oar: no C compiler (...);
 * graphs run unfused"). */
OARI_HIDDEN bool oari_jit_available(void);

/* The library built from C source `src` (a whole translation unit), from
 * the cache or compiled now; stats may be NULL. NULL with an error:
 * OAR_ERR_UNSUPPORTED without a compiler, OAR_ERR_INVALID with the
 * compiler's first error lines when the source does not compile, OAR_ERR_IO
 * for cache-directory failures. */
OARI_HIDDEN oari_jit_lib *oari_jit_load(const char *src, oari_jit_stats *stats);

/* The address of an exported function of lib, or NULL with an error. */
OARI_HIDDEN void *oari_jit_symbol(oari_jit_lib *lib, const char *name);

/* Unloads lib (NULL is a no-op). */
OARI_HIDDEN void oari_jit_release(oari_jit_lib *lib);

/* The compile flags in use (borrowed): "-O3 -march=native -fPIC -shared
 * -fopenmp -fno-math-errno ..." plus $OAR_JIT_CFLAGS. */
OARI_HIDDEN const char *oari_jit_flags(void);

/* Number of compiler runs in this process (tests, benchmarks). */
OARI_HIDDEN int oari_jit_compile_count(void);

#endif

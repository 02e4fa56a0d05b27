/* The one save protocol every file oar writes goes through (in core, so
 * that every layer can use it: the profiler's traces as well as models).
 *
 * Saving: a unique temporary in the target's folder ("<path>.tmp.<pid>.<n>",
 * created exclusively), the data written, the file fsync'd, renamed over the
 * target, and the folder fsync'd. On any failure the temporary is removed
 * and the target is left as it was. A process that dies mid-save leaves its
 * temporary behind; the next save into that folder removes the temporaries
 * of processes that no longer run (oari_file_sweep). Used by safetensors
 * (and so optimizer state and module checkpoints), saved models, .npy,
 * ONNX export and profiler traces. */
#ifndef OARI_CORE_SAVE_H
#define OARI_CORE_SAVE_H

#include "core.h"

#include <stdint.h>
#include <stdio.h>

/* The system calls of a save, in the order they happen. */
typedef enum oari_file_step {
    OARI_FILE_CREATE,  /* creating the temporary */
    OARI_FILE_WRITE,   /* each oari_wfile_write */
    OARI_FILE_FSYNC,   /* the temporary's data to disk */
    OARI_FILE_RENAME,  /* the temporary over the target */
    OARI_FILE_DIRSYNC, /* the folder's entry to disk */
} oari_file_step;

/* Tests' fault injection: when set, called before each step with the
 * target's path; a non-zero return is an errno value the step then fails
 * with (nothing is done). NULL (the default): no faults. Not for
 * concurrent use with saves on other threads. */
typedef int (*oari_file_fault_fn)(oari_file_step step, const char *path);
OARI_HIDDEN extern oari_file_fault_fn oari_file_fault;

/* A file being saved. */
typedef struct oari_wfile {
    int fd;                /* the temporary; -1 when closed */
    char *path, *tmp, *dir; /* target, temporary, folder (one owned block) */
    size_t size;            /* of that block */
    const char *who;       /* the caller's name for messages ("npy_save") */
    uint64_t bytes;        /* written so far */
    uint32_t crc;          /* zlib's crc32 of those bytes */
} oari_wfile;

/* Creates the temporary for `path` (removing dead processes' temporaries of
 * it first). 0, or an error naming who and the path; nothing to undo then. */
OARI_HIDDEN int oari_wfile_open(oari_wfile *w, const char *path, const char *who);
/* Appends n bytes. On failure the temporary is removed (w is closed). */
OARI_HIDDEN int oari_wfile_write(oari_wfile *w, const void *buf, size_t n);
/* fsync, rename over the target, fsync the folder; w is closed either way
 * and on failure the temporary is removed. 0 or an OAR_ERR_IO error naming
 * who, the target and the failing step: the target is untouched, except
 * when only the folder's sync failed (the rename was done). */
OARI_HIDDEN int oari_wfile_commit(oari_wfile *w);
/* Closes w and removes its temporary (the target is untouched); safe on a
 * closed or failed w. */
OARI_HIDDEN void oari_wfile_abort(oari_wfile *w);
/* The whole protocol for one buffer. */
OARI_HIDDEN int oari_file_save(const char *path, const void *buf, size_t n, const char *who);
/* mkdir -p: path and every missing folder above it, new ones with mode
 * (less the umask). 0, or the errno of the step that failed (ENOTDIR when
 * path exists and is not a folder, ENAMETOOLONG past PATH_MAX). */
OARI_HIDDEN int oari_make_dirs(const char *path, unsigned mode);
/* fsyncs folder `dir` (file systems that cannot are not an error). */
OARI_HIDDEN int oari_dir_sync(const char *dir, const char *who);
/* Removes, from folder dir, temporaries "<name>.tmp.<pid>.<n>" whose name
 * starts with prefix and whose pid is not a running process. Best effort;
 * returns how many it removed. */
OARI_HIDDEN int oari_file_sweep(const char *dir, const char *prefix);
/* The pid a name "<anything>.<pid>.<n><suffix>" carries (digits only), or
 * -1: how the sweeps tell a live writer's files from a dead one's. */
OARI_HIDDEN long oari_file_name_pid(const char *name, const char *suffix);
/* True if pid is not a running process (kill(pid, 0) says ESRCH). */
OARI_HIDDEN bool oari_pid_dead(long pid);

#endif

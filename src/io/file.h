/* Files on disk for loaders: the limit they hold declared sizes to
 * (include/oar/io.h) and the checks that apply it; and, through save.h, the
 * save protocol. */
#ifndef OARI_IO_FILE_H
#define OARI_IO_FILE_H

#include "../core/core.h"
#include "../core/save.h"

#include <stdint.h>
#include <stdio.h>

/* Loaders: 0 if a declared size of `declared` bytes fits both the load
 * limit (oar_set_load_limit) and the `present` bytes that remain in the
 * file (UINT64_MAX: unknown, as in a compressed stream); else OAR_ERR_IO
 * naming who, the file, what and both sizes. Call before allocating. */
OARI_HIDDEN int oari_load_check(const char *who, const char *file, const char *what, uint64_t declared,
                                uint64_t present);
/* The same for a tensor's shape: its size in bytes into *nbytes, checked as
 * oari_load_check does; a dim < 0, or dims whose product overflows even
 * when another dim is 0 (the strides still multiply them), is refused
 * too. */
OARI_HIDDEN int oari_load_shape(const char *who, const char *file, const char *what, int ndim, const int64_t *shape,
                                size_t esize, uint64_t present, uint64_t *nbytes);
/* The bytes of f from its current position to its end (UINT64_MAX if it
 * cannot seek); the position is kept. */
OARI_HIDDEN uint64_t oari_file_remaining(FILE *f);

#endif

/* safetensors internals for the layers above io (the saved model of
 * src/graph/serialize.c commits its weights file by size and crc32). */
#ifndef OARI_IO_SAFETENSORS_H
#define OARI_IO_SAFETENSORS_H

#include "../core/core.h"

#include <oar/io.h>
#include <stdint.h>
#include <stdio.h>

/* oar_safetensors_save_meta that also gives the file's size and zlib crc32
 * (each may be NULL), as written. */
OARI_HIDDEN int oari_safetensors_save(const char *path, int n, const char *const *names,
                                      oar_tensor *const *tensors, int n_meta, const char *const *keys,
                                      const char *const *values, uint64_t *bytes, uint32_t *crc);
/* Reads a whole file from f, from its start (f is closed here); path names
 * it in messages. NULL with an error, as oar_safetensors_load. */
OARI_HIDDEN oar_tensor_dict *oari_safetensors_load_file(FILE *f, const char *path);

#endif

/* Checkpoints in the safetensors format (8-byte little-endian header
 * length, a JSON header naming each tensor's dtype, shape and byte range,
 * then the raw little-endian data), readable by Python's safetensors.
 * Dtype names: F16 BF16 F32 F64 I32 I64 U8 BOOL C64 C128.
 *
 * Files are written to a temporary name in the same folder and renamed,
 * so a crash never leaves a half-written checkpoint. Reading checks every
 * length, offset, dtype and shape against the file's size: a truncated or
 * corrupt file gives an OAR_ERR_IO error naming the file and the problem. */
#ifndef OAR_IO_H
#define OAR_IO_H

#include <oar/nn.h>
#include <oar/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Named tensors read from a file. */
typedef struct oar_tensor_dict oar_tensor_dict;

/* Writes n named tensors (any strides; names unique, non-empty). 0 on
 * success; on failure the file at `path` is left as it was. */
OAR_API int oar_safetensors_save(const char *path, int n, const char *const *names,
                                 oar_tensor *const *tensors);
/* As oar_safetensors_save, with n_meta string pairs written to the
 * header's "__metadata__" (after "format": "oar", which is reserved). Keys
 * must be unique and non-empty, values non-NULL. */
OAR_API int oar_safetensors_save_meta(const char *path, int n, const char *const *names,
                                      oar_tensor *const *tensors, int n_meta,
                                      const char *const *keys, const char *const *values);
/* Reads every tensor of a file (CPU tensors owned by the dict). NULL with
 * an error on failure. */
OAR_API oar_tensor_dict *oar_safetensors_load(const char *path);
/* The same from a buffer in memory (size bytes; not retained). name (may
 * be NULL) stands for the file name in messages. */
OAR_API oar_tensor_dict *oar_safetensors_load_memory(const void *data, size_t size,
                                                     const char *name);
OAR_API void oar_tensor_dict_free(oar_tensor_dict *d);
OAR_API int oar_tensor_dict_size(const oar_tensor_dict *d);
/* Entry i in file order; borrowed, valid until the dict is freed. */
OAR_API const char *oar_tensor_dict_name(const oar_tensor_dict *d, int i);
OAR_API oar_tensor *oar_tensor_dict_tensor(const oar_tensor_dict *d, int i);
/* By name; NULL (no error set) if absent. */
OAR_API oar_tensor *oar_tensor_dict_get(const oar_tensor_dict *d, const char *name);
/* The header's "__metadata__" value for key, or NULL. Borrowed. */
OAR_API const char *oar_tensor_dict_metadata(const oar_tensor_dict *d, const char *key);

/* Saves every parameter and buffer of m under its dotted name. */
OAR_API int oar_module_save(oar_module *m, const char *path);
/* Loads a file written for a module of the same structure into m's
 * parameters and buffers (in place). The file must hold exactly m's names
 * with the same dtypes and shapes; otherwise the error lists every
 * mismatch (missing, unexpected, wrong shape or dtype) and m is unchanged. */
OAR_API int oar_module_load(oar_module *m, const char *path);

#ifdef __cplusplus
}
#endif
#endif

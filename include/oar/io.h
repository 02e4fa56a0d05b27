/* Checkpoints in the safetensors format (8-byte little-endian header
 * length, a JSON header naming each tensor's dtype, shape and byte range,
 * then the raw little-endian data), readable by Python's safetensors.
 * Dtype names: F16 BF16 F32 F64 I32 I64 U8 I8 BOOL.
 *
 * Complex tensors: the safetensors format has no complex dtype, so a
 * complex64 (complex128) tensor of shape [d0, ..., dk] is written as F32
 * (F64) of shape [d0, ..., dk, 2], real and imaginary parts interleaved
 * (its layout in memory), and the header's "__metadata__" gets the entry
 *     "oar.dtype.<name>": "complex64"   (or "complex128")
 * (OAR_SAFETENSORS_DTYPE_PREFIX followed by the tensor's name). Python
 * reads such a tensor as a float array with a trailing dim of 2
 * (numpy: a.view(np.complex64)[..., 0] makes it complex again). oar reads
 * any file carrying that entry, whoever wrote it, back as complex; an entry
 * whose tensor is not of the matching float dtype with a trailing dim of 2
 * fails the load with OAR_ERR_IO, naming the tensor; an entry naming no
 * tensor of the file is ignored. The dtype names C64 and C128 are read
 * too: older oar versions wrote them (Python's safetensors refuses C128,
 * and its older versions C64 as well), and recent Python safetensors
 * (0.8) writes a numpy complex64 array as C64. Every other oar dtype has its own
 * safetensors name.
 *
 * Files are written to a unique temporary name in the same folder,
 * fsync'd, renamed and the folder fsync'd (the one save protocol of every
 * file oar writes), so a crash never leaves a half-written checkpoint and
 * concurrent saves to one path do not collide; a temporary left by a
 * process that died is removed by the next save of that file. Reading
 * checks every length, offset, dtype and shape against the file's size:
 * a truncated or corrupt file gives an OAR_ERR_IO error naming the file
 * and the problem. */
#ifndef OAR_IO_H
#define OAR_IO_H

#include <oar/nn.h>
#include <oar/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The load limit. Every loader (safetensors, module and optimizer state,
 * saved models, .npy, IDX, CSV, ONNX models and TensorProtos) checks each
 * size a file declares against the bytes the file holds before allocating;
 * where it cannot (a gzip'd IDX file, a CSV file, growing as they are
 * read), and for any one tensor besides, a declared size over this limit
 * is refused with OAR_ERR_IO naming the file and both sizes. Default
 * OAR_DEFAULT_LOAD_LIMIT bytes (64 GiB). */
#define OAR_DEFAULT_LOAD_LIMIT ((uint64_t)1 << 36)
/* Sets the limit (0: back to the default) for every thread; returns the
 * previous one. */
OAR_API uint64_t oar_set_load_limit(uint64_t max_bytes);
OAR_API uint64_t oar_load_limit(void);

/* The metadata keys that mark a tensor complex ("oar.dtype.<name>"):
 * reserved, oar_safetensors_save_meta refuses a user key that starts so. */
#define OAR_SAFETENSORS_DTYPE_PREFIX "oar.dtype."

/* Named tensors read from a file. */
typedef struct oar_tensor_dict oar_tensor_dict;

/* Writes n named tensors (any strides; names unique, non-empty). 0 on
 * success; on failure the file at `path` is left as it was. */
OAR_API int oar_safetensors_save(const char *path, int n, const char *const *names,
                                 oar_tensor *const *tensors);
/* As oar_safetensors_save, with n_meta string pairs written to the
 * header's "__metadata__" (after "format": "oar", which is reserved). Keys
 * must be unique and non-empty, values non-NULL; keys starting with
 * OAR_SAFETENSORS_DTYPE_PREFIX are reserved (OAR_ERR_INVALID). */
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
/* The header's "__metadata__" value for key, or NULL. Borrowed. (The
 * "oar.dtype.<name>" entries of complex tensors are there too.) */
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

/* Data: IDX files (MNIST, Fashion-MNIST; gzip or raw), an in-memory
 * dataset of (x, y) pairs, and a loader that yields batches with a seeded
 * shuffle, drop_last and a normalize transform.
 *
 *     oar_dataset *train = oar_fashion_mnist_load(NULL, true);
 *     oar_loader *ld = oar_loader_new(train, &(oar_loader_options){
 *         .batch_size = 64, .shuffle = true, .seed = 1, .scale = 1 / 255.0,
 *         .mean = 0.2860, .std = 0.3530});
 *     oar_tensor *x, *y;
 *     while (oar_loader_next(ld, &x, &y) == 1) { ... }   // one epoch
 *
 * Damaged files (truncated, bad magic, corrupt gzip) give OAR_ERR_IO with
 * the file name and what is wrong; nothing aborts. */
#ifndef OAR_DATA_H
#define OAR_DATA_H

#include <oar/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Reads an IDX file, gzip-compressed or not. Element types: u8 -> U8;
 * i8, i16, i32 -> I32; f32 -> F32; f64 -> F64; the shape is the file's.
 * Returns a new tensor (pool rule), or NULL with an error. */
OAR_API oar_tensor *oar_idx_load(const char *path);

/* N samples: x [N, ...] and y [N, ...]. */
typedef struct oar_dataset oar_dataset;

/* A dataset over x and y (retained; they must agree on dim 0). */
OAR_API oar_dataset *oar_dataset_new(oar_tensor *x, oar_tensor *y);
/* Fashion-MNIST (or MNIST) from dir (NULL: /usr/share/datasets/fashion-mnist):
 * {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz. x is U8 [N, 1, 28, 28],
 * y is I64 [N]. */
OAR_API oar_dataset *oar_fashion_mnist_load(const char *dir, bool train);
/* Samples [start, end) as a new dataset (copies). */
OAR_API oar_dataset *oar_dataset_slice(const oar_dataset *ds, int64_t start, int64_t end);
OAR_API void oar_dataset_free(oar_dataset *ds);
OAR_API int64_t oar_dataset_size(const oar_dataset *ds);
OAR_API oar_tensor *oar_dataset_x(const oar_dataset *ds); /* borrowed */
OAR_API oar_tensor *oar_dataset_y(const oar_dataset *ds); /* borrowed */

typedef struct oar_loader_options {
    int64_t batch_size; /* required, >= 1 */
    bool shuffle;       /* a new permutation each epoch, from seed and the epoch number */
    uint64_t seed;
    bool drop_last; /* drop a last batch smaller than batch_size */
    /* x is returned as F32: (x * scale - mean) / std. scale 0 means 1,
     * std 0 means no normalization (mean ignored). */
    double scale, mean, std;
} oar_loader_options;

typedef struct oar_loader oar_loader;

/* A loader over ds (which must outlive it). NULL with an error on bad
 * options. */
OAR_API oar_loader *oar_loader_new(const oar_dataset *ds, const oar_loader_options *o);
OAR_API void oar_loader_free(oar_loader *l);
/* Batches per epoch. */
OAR_API int64_t oar_loader_num_batches(const oar_loader *l);
/* The next batch of the epoch: *x (F32) and *y (y's dtype), owned by the
 * innermost pool (or the caller outside any pool). Returns 1 for a batch,
 * 0 at the end of the epoch (the next call starts a new epoch, reshuffled),
 * negative on error. */
OAR_API int oar_loader_next(oar_loader *l, oar_tensor **x, oar_tensor **y);
/* The index of sample k of the current epoch's order (for tests). */
OAR_API int64_t oar_loader_index(const oar_loader *l, int64_t k);
/* Epochs completed. */
OAR_API int64_t oar_loader_epoch(const oar_loader *l);

#ifdef __cplusplus
}
#endif
#endif

/* Data: IDX files (MNIST, Fashion-MNIST; gzip or raw), an in-memory
 * dataset of (x, y) pairs, and a loader that yields batches with a seeded
 * shuffle, drop_last, a normalize transform, random crop and flip, a
 * user transform hook and background prefetch; CSV files of numbers.
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

/* A per-sample transform, run by the loader after scaling/normalization and
 * the built-in augmentations: x is one sample (F32, ndim dims of `shape`,
 * contiguous) to change in place; seed is this sample's own seed (see
 * oar_loader_sample_seed) for any random draw. Return 0, or non-zero to
 * make oar_loader_next fail. With prefetch it runs on the loader's thread:
 * it must not call oar ops or touch state shared without a lock. */
typedef int (*oar_transform_fn)(void *ctx, float *x, int ndim, const int64_t *shape,
                                uint64_t seed);

typedef struct oar_loader_options {
    int64_t batch_size; /* required, >= 1 */
    bool shuffle;       /* a new permutation each epoch, from seed and the epoch number */
    uint64_t seed;
    bool drop_last; /* drop a last batch smaller than batch_size */
    /* x is returned as F32: (x * scale - mean) / std. scale 0 means 1,
     * std 0 means no normalization (mean ignored). */
    double scale, mean, std;
    /* Augmentations of samples [..., H, W] (x of 3 or more dims), drawn per
     * sample from (seed, epoch, position in the epoch):
     * random_crop_padding > 0 pads H and W by that many values (the
     * normalized value of a raw 0, as torchvision's RandomCrop(padding)
     * before Normalize) and crops a random window of the original size;
     * random_hflip reverses W with probability 1/2. */
    int64_t random_crop_padding;
    bool random_hflip;
    /* optional: a user transform (NULL: none) and its context */
    oar_transform_fn transform;
    void *transform_ctx;
    /* Prepare the next batch on a background thread while the caller
     * trains on this one. Batches are identical with and without it. */
    bool prefetch;
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
/* Seconds callers have spent inside oar_loader_next since the loader was
 * made: with prefetch, the time a training step waited for its batch;
 * without, the time spent producing batches. -1 (error set) for NULL. */
OAR_API double oar_loader_wait_seconds(const oar_loader *l);
/* The index of sample k of the current epoch's order (for tests). */
OAR_API int64_t oar_loader_index(const oar_loader *l, int64_t k);
/* Epochs completed. */
OAR_API int64_t oar_loader_epoch(const oar_loader *l);
/* Restarts at the beginning of the given epoch (its shuffle and
 * augmentations), as when resuming training from a checkpoint. 0 on
 * success. */
OAR_API int oar_loader_set_epoch(oar_loader *l, int64_t epoch);
/* The seed the loader gives a sample's augmentations and transform: a
 * hash of the loader seed, the epoch and the position in the epoch. */
OAR_API uint64_t oar_loader_sample_seed(uint64_t seed, int64_t epoch, int64_t position);

/* ---- CSV ------------------------------------------------------------------------ */

typedef struct oar_csv_options {
    bool header;     /* skip the first line (column names) */
    char delimiter;  /* 0 means ',' */
    oar_dtype dtype; /* OAR_F32 or OAR_F64; 0 (OAR_BOOL) means OAR_F32 */
} oar_csv_options;

/* Reads a CSV file of numbers into a new [rows, columns] tensor (pool
 * rule). Fields are decimal or scientific numbers, nan or inf, with
 * optional spaces around them; blank lines are skipped; \r\n line ends are
 * accepted; o may be NULL (no header, ',', F32). Errors (OAR_ERR_IO) name
 * the file and the line: a field that is not a number ("line 7, column 3:
 * \"abc\" is not a number"), a row with a different number of columns,
 * an empty file. */
OAR_API oar_tensor *oar_csv_load(const char *path, const oar_csv_options *o);

#ifdef __cplusplus
}
#endif
#endif

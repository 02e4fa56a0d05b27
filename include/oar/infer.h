/* Inference (docs/architecture.md, "Modes"): a predictor loads a saved model
 * folder (oar_graph_save), runs the inference passes and serves callers.
 *
 *     oar_predictor_config cfg = {.model_dir = "mnist_model", .optimize = true};
 *     oar_predictor *p = oar_predictor_create(&cfg);
 *     oar_tensor *y = NULL;                     // NULL: the predictor allocates it
 *     oar_predictor_run(p, &x, &y);             // y: a new reference, caller releases
 *     oar_predictor_free(p);
 *
 * A predictor is safe to call from many threads at once: each run takes an
 * idle executor (creating one when all are busy), so concurrent runs do not
 * wait on each other. oar_predictor_clone shares the model (graph and
 * weights, read-only) with a new predictor. Also here: NumPy .npy files. */
#ifndef OAR_INFER_H
#define OAR_INFER_H

#include <oar/graph.h>
#include <oar/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct oar_predictor oar_predictor;

typedef struct oar_predictor_config {
    const char *model_dir;  /* a folder written by oar_graph_save */
    int num_threads;        /* OpenMP threads per run; 0: the process default */
    bool optimize;          /* run OAR_PASSES_INFERENCE after loading */
    const char *passes;     /* optional: comma-separated pass names ("dce,cse") run
                             * once each, in order, instead of that list */
    bool print_passes;      /* print the graph after each pass (stderr) */
    bool no_compile;        /* run unfused; by default the graph's fusible ops are
                             * compiled into kernels (oar_executor_compile) once
                             * per model, when a C compiler exists (a kernel cache
                             * that cannot be written: a warning, and unfused) */
    int64_t batch;          /* the batch most runs will have, where the model's
                             * batch (first) dim is dynamic; 0 means 1. The f32
                             * convs' weights are packed once in the layout the
                             * CPU's kernels pick for it (other batches still
                             * run, about a fifth slower for ResNet-18 between
                             * batch 1 and 32); < 0 is an error */
    const int64_t *batches; /* optional, instead of batch: n_batches distinct
                             * sizes (each >= 1) to pack the convs for, one copy
                             * of the packed weights each. A run takes the copy
                             * made for its batch (the first dim of the first
                             * input whose first dim is dynamic), and batches[0]'s
                             * at any other size. Only where the graph has a
                             * dynamic batch and packs a conv; else one copy */
    int n_batches;          /* 0..OAR_PREDICTOR_MAX_BATCHES; with batch set too,
                             * an error */
    bool adapt_batches;     /* also pack for each new batch size that runs
                             * bring, while fewer than OAR_PREDICTOR_MAX_BATCHES
                             * packings exist (those of batch or batches
                             * count): the first run at a size pays for the
                             * packing and compile (shared by clones); later
                             * sizes take the first packing. A failed packing
                             * is a warning; the run goes on with the first */
} oar_predictor_config;

#define OAR_PREDICTOR_MAX_BATCHES 8

/* Loads and prepares a model. NULL with the loader's error (naming the
 * file and problem) on failure. */
OAR_API oar_predictor *oar_predictor_create(const oar_predictor_config *cfg);
/* A predictor for a graph in memory (copied; g stays the caller's). */
OAR_API oar_predictor *oar_predictor_from_graph(const oar_graph *g, const oar_predictor_config *cfg);
/* A new predictor sharing p's model; cheap. NULL on failure. */
OAR_API oar_predictor *oar_predictor_clone(oar_predictor *p);
/* Frees p; the model is freed with its last predictor. NULL is ignored. */
OAR_API void oar_predictor_free(oar_predictor *p);
/* Whether runs use compiled kernels (see no_compile); false for NULL. */
OAR_API bool oar_predictor_is_compiled(const oar_predictor *p);
/* The model's graph (borrowed, read-only): with batches, the one packed
 * for batches[0]. */
OAR_API const oar_graph *oar_predictor_graph(const oar_predictor *p);

OAR_API int oar_predictor_num_inputs(const oar_predictor *p);
OAR_API int oar_predictor_num_outputs(const oar_predictor *p);
/* Borrowed names; NULL if i is out of range. */
OAR_API const char *oar_predictor_input_name(const oar_predictor *p, int i);
OAR_API const char *oar_predictor_output_name(const oar_predictor *p, int i);
/* Dtype and shape (-1 on dynamic dims) of input/output i; returns the
 * rank, or -1 if i is out of range. */
OAR_API int oar_predictor_input_shape(const oar_predictor *p, int i, oar_dtype *dtype, int64_t *shape);
OAR_API int oar_predictor_output_shape(const oar_predictor *p, int i, oar_dtype *dtype, int64_t *shape);
/* Index of the input/output with that name, or -1. */
OAR_API int oar_predictor_input_index(const oar_predictor *p, const char *name);
OAR_API int oar_predictor_output_index(const oar_predictor *p, const char *name);

/* Runs the model on inputs[0..n_inputs-1] (CPU tensors of the model's
 * dtypes; dynamic dims free). For each output j: if outputs[j] is a tensor
 * (caller-owned buffer), the result is written into it (same dtype and
 * shape, else an error); if outputs[j] is NULL, it is set to a new tensor
 * that the caller owns and releases (not pool-owned). Thread-safe. 0 or an
 * error status; on error caller buffers may be partly written and NULL
 * slots stay NULL. */
OAR_API int oar_predictor_run(oar_predictor *p, oar_tensor *const *inputs, oar_tensor **outputs);

/* Zero-copy run: outputs[j] are set to tensors owned by the predictor,
 * valid until p's next run_borrowed call or its free. Serialised with
 * other run_borrowed calls on p (one thread at a time gets the buffers);
 * give each thread its own clone to run these concurrently. */
OAR_API int oar_predictor_run_borrowed(oar_predictor *p, oar_tensor *const *inputs, oar_tensor **outputs);

/* ---- NumPy .npy files ------------------------------------------------------- */

/* Reads a .npy file (format 1.0-3.0; dtypes bool, u1, i4, i8, f2, f4, f8,
 * c8, c16; little-endian; C or Fortran order). A new tensor (not
 * pool-owned: the caller releases it), or NULL with an error naming the
 * file and the problem. */
OAR_API oar_tensor *oar_npy_load(const char *path);
/* Writes t as a C-order little-endian .npy file (to a temporary name,
 * then renamed). bfloat16 has no NumPy dtype and is refused. 0 or an error. */
OAR_API int oar_npy_save(const char *path, const oar_tensor *t);

#ifdef __cplusplus
}
#endif
#endif

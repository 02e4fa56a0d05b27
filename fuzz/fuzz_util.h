/* Shared by the libFuzzer harnesses (fuzz/fuzz_*.c): inputs handed to
 * path-based loaders through an in-memory file, a scratch folder, the
 * checks every harness makes, and running a loaded graph on zero inputs.
 * A harness includes this once; it also builds without libFuzzer, with
 * fuzz/replay_main.c, to replay the committed corpus in CTest. */
#ifndef OAR_FUZZ_UTIL_H
#define OAR_FUZZ_UTIL_H

#define _GNU_SOURCE
#include <oar/oar.h>
#include <oar/graph.h>
#include <oar/io.h>

#include "graph/ir.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Loaders are held to 64 MiB per declared tensor, so that a header's
 * claim never trips libFuzzer's malloc limit (-malloc_limit_mb, 2 GiB by
 * default) as long as the loaders check it first. */
#define FUZZ_LOAD_LIMIT ((uint64_t)64 << 20)
/* Graphs whose recorded values are larger are parsed and verified, not run. */
#define FUZZ_RUN_BYTES ((int64_t)16 << 20)

static inline void fuzz_check(int cond, const char *harness, const char *what) {
    if (!cond) {
        fprintf(stderr, "%s: %s (last error: %s)\n", harness, what, oar_last_error());
        abort();
    }
}

/* With OAR_FUZZ_VERBOSE set, says whether each input loaded (and why not):
 * to see what a corpus reaches. */
static inline void fuzz_note(const char *harness, int loaded) {
    static int verbose = -1;
    if (verbose < 0) verbose = getenv("OAR_FUZZ_VERBOSE") != NULL;
    if (verbose) fprintf(stderr, "%s: %s%s\n", harness, loaded ? "loaded" : "refused: ", loaded ? "" : oar_last_error());
}

static inline void fuzz_init(void) {
    static int done;
    if (done) return;
    done = 1;
    oar_set_load_limit(FUZZ_LOAD_LIMIT);
}

/* A path naming an in-memory file holding data (one per process, rewritten
 * each call): "/proc/self/fd/N" opens with fopen and gzopen alike. */
static inline const char *fuzz_file(const uint8_t *data, size_t size) {
    static int fd = -1;
    static char path[64];
    if (fd < 0) {
        fd = memfd_create("oar-fuzz", 0);
        if (fd < 0) abort();
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    if (ftruncate(fd, 0) || lseek(fd, 0, SEEK_SET) != 0) abort();
    for (size_t off = 0; off < size;) {
        ssize_t k = write(fd, data + off, size - off);
        if (k <= 0) abort();
        off += (size_t)k;
    }
    return path;
}

/* A scratch folder of this process (under /dev/shm when there is one). */
static inline const char *fuzz_dir(void) {
    static char dir[128];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "%s/oar-fuzz-%ld", access("/dev/shm", W_OK) ? "/tmp" : "/dev/shm", (long)getpid());
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf %.128s && mkdir -p %.128s", dir, dir);
        if (system(cmd)) abort();
    }
    return dir;
}

/* True if every value g records is at most FUZZ_RUN_BYTES, its sub-graphs'
 * too: what the harnesses run. */
static inline int fuzz_graph_small(const oar_graph *g) {
    for (int v = 0; v < g->n_values; v++) {
        const oari_gvalue *gv = &g->values[v];
        int64_t bytes = (int64_t)oar_dtype_size(gv->dtype);
        for (int d = 0; d < gv->ndim; d++) {
            if (gv->shape[d] && bytes > FUZZ_RUN_BYTES / gv->shape[d]) return 0;
            bytes *= gv->shape[d];
        }
    }
    for (int i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < 2; k++)
            if (g->nodes[i].sub[k] && !fuzz_graph_small(g->nodes[i].sub[k])) return 0;
    return 1;
}

/* Runs g through the executor on zero inputs of its recorded shapes
 * (dynamic dims 1): it must succeed or fail with a message. */
static inline void fuzz_run_graph(const oar_graph *g, const char *harness) {
    int ni = oar_graph_num_inputs(g);
    if (ni > 64 || oar_graph_num_outputs(g) > 256 || !fuzz_graph_small(g)) return;
    oar_executor *ex = oar_executor_new(g);
    oar_pool *pool = oar_pool_push();
    oar_tensor *in[64] = {0}, *out[256];
    int ok = ex != NULL;
    for (int i = 0; i < ni && ok; i++) {
        int64_t shape[OAR_MAX_DIMS];
        oar_dtype dt;
        int nd = oar_graph_input_shape(g, i, &dt, shape);
        for (int d = 0; d < nd; d++)
            if (shape[d] < 0) shape[d] = 1;
        ok = nd >= 0 && (in[i] = oar_zeros(dt, nd, shape)) != NULL;
    }
    oar_clear_error();
    if (ok && oar_executor_run(ex, in, out) != 0) fuzz_check(oar_last_error()[0] != 0, harness, "a failed run left no message");
    oar_pool_pop(pool);
    oar_executor_free(ex);
}

/* The entry point libFuzzer calls: the harness's fuzz_one, then the
 * calling thread's object lists and block cache go back to the allocator,
 * so that LeakSanitizer, which libFuzzer runs after an input that kept
 * memory, sees only real leaks. */
#define FUZZ_TARGET(fn)                                                   \
    int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {        \
        fuzz_init();                                                      \
        fn(data, size);                                                   \
        oar_memory_empty_cache();                                         \
        return 0;                                                         \
    }

#endif

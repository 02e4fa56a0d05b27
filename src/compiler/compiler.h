/* The fusing compiler (docs/internals/compiler.md):
 * groups the fusible nodes of a graph into kernels (fuse.c), writes one C
 * function per kernel (codegen_c.c, scalar op formulas in op_c.c), builds
 * them through the JIT (jit.c) and hands the executor one call per kernel.
 *
 * A kernel is rooted at the node whose output it writes; its members are the
 * nodes it computes on the way, none of whose outputs is needed anywhere
 * else. Everything a kernel reads from outside (graph inputs, constants,
 * outputs of other kernels or of library calls) is a leaf: a contiguous
 * buffer, or a constant read through its own strides. View ops are index
 * arithmetic, never copies. The same lowering renders as C (the JIT) or as
 * OpenCL C (a device's build_program): oari_renderer. Shapes that follow a symbol (a dynamic batch)
 * are read from the syms argument, so a new batch size never recompiles. */
#ifndef OARI_COMPILER_H
#define OARI_COMPILER_H

#include "../graph/ir.h"
#include "jit.h"
#include "sbuf.h"

/* A generated kernel: writes args[0] (its root's output), reads the rest. */
typedef void (*oari_fused_fn)(void *const *args, const int64_t *syms);

/* What a renderer gets to write one kernel: the lowering (grouping, index
 * and reduction logic) is codegen_c.c's, shared; a renderer only writes the
 * function around it: signature, loops or work-items, the store. */
typedef struct oari_kernel_text {
    const oar_graph *g;
    const char *name;
    const int *args;          /* value ids: [0] the output, then the leaves (a0, a1, ...) */
    int n_args;
    bool flat;                /* one flat loop (pointers may alias: no restrict) */
    uint64_t same_index;      /* bit a: leaf a is read only at the element written (a0 and it: no restrict) */
    bool reductions;          /* the kernel reduces (loops inside its body) */
    int nd;                   /* loop dims i0.. (1 when flat) */
    const char *const *dim;   /* their sizes: expressions over s[] (the symbols' sizes) */
    unsigned outer_mask;      /* the parallel dims (threads / work-items) */
    const char *outer;        /* statements per parallel iteration */
    const char *inner;        /* statements per inner iteration, before the store */
    const char *store;        /* "    a0[...] = tN;\n" */
    bool inner_reads_output;  /* the inner loop reads a0 (softmax's row, scaled in place) */
    const char *work;         /* elements touched (the C renderer's threading threshold) */
} oari_kernel_text;

/* A back end of the code generator. */
typedef struct oari_renderer {
    const char *language;     /* "c" (the JIT), "opencl" (a device's build_program) */
    bool openmp;              /* OpenMP/simd pragmas and the column-reduction template (C only) */
    bool all_dims_parallel;   /* a kernel without reductions runs one work-item per element */
    void (*prelude)(oari_sbuf *src);
    void (*function)(const oari_kernel_text *k, oari_sbuf *src);
} oari_renderer;

OARI_HIDDEN extern const oari_renderer oari_render_c;  /* codegen_c.c */
OARI_HIDDEN extern const oari_renderer oari_render_cl; /* codegen_cl.c: one __kernel per kernel */
OARI_HIDDEN extern const oari_renderer oari_render_cu; /* codegen_cu.c: one __global__ per kernel (NVRTC) */

/* The function around a kernel for a work-item device (OpenCL, CUDA): one
 * work-item per iteration of the parallel dims; the dialect names the
 * function and buffer qualifiers, the 64-bit integer type and the global
 * work-item index. */
typedef struct oari_work_item_dialect {
    const char *qualifiers;   /* before "void" */
    const char *buffer;       /* before a buffer's element type */
    const char *int_t;        /* the 64-bit integer type */
    const char *gid;          /* the expression of the work-item's index */
} oari_work_item_dialect;
OARI_HIDDEN void oari_work_item_function(const oari_kernel_text *k, oari_sbuf *src,
                                         const oari_work_item_dialect *w);
/* The renderer for device dev's generated kernels: CUDA C on a "cuda"
 * device, OpenCL C otherwise (the device refuses a language it lacks). */
OARI_HIDDEN const oari_renderer *oari_renderer_for(const oar_device *dev);

typedef struct oari_kernel {
    int root;                 /* node whose output it writes */
    int n_members;            /* nodes it computes, root included */
    int n_args;
    int *args;                /* value ids: [0] the output, then the leaves */
    char name[32];
    size_t src_begin, src_end; /* its function in the fusion's source */
    int code;                 /* the kernel whose function it calls: itself, or an earlier kernel
                                 whose generated code is the same but for the name */
    int unit;                 /* the library holding its function, if its own (oari_fusion_build) */
    oari_fused_fn fn;         /* set by oari_fusion_build */
    void *dev_fn;             /* set by oari_fusion_build_on (the device's handle) */
    unsigned outer_mask;      /* its parallel dims (work-items: their product; all of them when flat) */
    bool flat;                /* every member elementwise over the output's shape, read at the
                                 output's index: the output may be written over an input */
    uint64_t same_index;      /* bit a (1..63): leaf a is read only at the element the kernel writes
                                 (same shape and dtype, no reductions): the output may be written
                                 over it (with flat, every such leaf) */
} oari_kernel;

typedef struct oari_fusion {
    int n_nodes;
    int *kernel_of;           /* per node: its kernel, or -1 (runs its own kernel or is a view) */
    int n_kernels, cap_kernels;
    oari_kernel *kernels;
    int n_launches;           /* kernel calls per run: fused kernels plus unfused non-view nodes */
    oari_sbuf source;         /* the prelude, then every kernel */
    size_t prelude_len;
    oari_jit_lib **libs;      /* one per unit of OARI_KERNELS_PER_UNIT functions */
    int n_libs;
    int refs;                 /* executors sharing it (atomic); freed with the last */
    const oari_renderer *renderer;
    oar_device *device;       /* oari_fusion_build_on: where the kernels were built */
} oari_fusion;

/* Groups g's nodes and writes the C of every kernel (nothing compiled
 * yet). *out gets a new fusion (free with oari_fusion_free). 0 or an error
 * status (out of memory). A graph with nothing to fuse gives zero kernels. */
OARI_HIDDEN int oari_fuse_graph(const oar_graph *g, const oari_renderer *r, oari_fusion **out);
/* Compiles (or loads from the cache) f's kernels and resolves them: units
 * of OARI_KERNELS_PER_UNIT functions (kernels sharing code count once),
 * built by parallel jobs (one per core, at most 8), each cached on its
 * own. 0, or an error status
 * (OAR_ERR_UNSUPPORTED without a C compiler). */
#define OARI_KERNELS_PER_UNIT 16
OARI_HIDDEN int oari_fusion_build(oari_fusion *f);
/* Builds f (rendered by oari_render_cl) on device dev through its
 * build_program and resolves every kernel's dev_fn (codegen_cl.c). 0;
 * OAR_ERR_UNSUPPORTED when dev runs no generated code; else the device's
 * status, with its message (a build error: the compiler's log). */
OARI_HIDDEN int oari_fusion_build_on(oari_fusion *f, oar_device *dev);
/* Tests: text appended to the OpenCL prelude (NULL: none), to make the
 * generated source fail to build on purpose. */
OARI_HIDDEN extern const char *oari_cl_prelude_extra;
/* Drops a reference (the fusion is freed with the last). */
OARI_HIDDEN void oari_fusion_free(oari_fusion *f);
/* Another reference to f. */
OARI_HIDDEN oari_fusion *oari_fusion_retain(oari_fusion *f);

/* ---- code generation (codegen_c.c) ---------------------------------------- */

/* Whether node n of g can be a kernel member at all (op, dtypes, flags). */
OARI_HIDDEN bool oari_fusible(const oar_graph *g, int n);
/* Appends the C function `name` computing the kernel rooted at node root
 * (members: the nodes m with kernel_root[m] == root) to src, and fills
 * *args / *n_args (a new array: [0] the output value, then the leaves).
 * Returns 0, a negative status, or 1 when the grouping asks for something
 * the generator will not do (a reduction that would be recomputed per
 * element): *bad then names the member to take out of the kernel. *flat
 * tells whether the kernel is one flat elementwise loop, whose pointers
 * are not `restrict` (its output may be planned over an input);
 * *same_index has bit a set when leaf a is read only at the element written
 * (no reductions), so the output may be planned over it (no `restrict`). */
OARI_HIDDEN int oari_codegen_kernel(const oar_graph *g, const oari_renderer *r, const int *kernel_root,
                                    int root, const char *name, oari_sbuf *src, int **args, int *n_args,
                                    int *bad, bool *flat, unsigned *outer_mask, uint64_t *same_index);

/* ---- scalar formulas (op_c.c) ----------------------------------------------- */

/* The C type of a dtype the generator handles ("float", "double",
 * "uint8_t", "int32_t", "int64_t"), or NULL. */
OARI_HIDDEN const char *oari_c_type(oar_dtype d);
/* Writes the C expression of elementwise node n (a row of
 * src/ops/elementwise.def, or cast) over operand expressions a[] into out;
 * false if the op or its dtypes are not handled. The expression uses the
 * words of src/ops/ew_math.h, whose text (oari_ew_words) every renderer's
 * prelude holds. */
OARI_HIDDEN bool oari_c_elementwise(const oar_graph *g, const oari_gnode *n, const char *const *a,
                                    oari_sbuf *out);
OARI_HIDDEN extern const char *const oari_ew_words;

#endif

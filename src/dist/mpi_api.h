/* The MPI transport of src/dist: every MPI call of the layer goes through
 * this table, which liboar_mpi.so (src/dist/mpi/mpi_module.c, the one
 * object of oar that links libmpi) fills. liboar opens that module on
 * oar_dist_init (mpi_load.c), so a program that never uses distributed
 * tensors never loads libmpi and what comes with it (Open MPI's
 * open-pal, hwloc, libevent, libudev). Both sides are built from this
 * header together; the version catches a stale module.
 *
 * Handles are MPI's own, carried as void *: a communicator or a request
 * (an int in MPICH, a pointer in Open MPI) fits in one; NULL stands for
 * MPI_COMM_NULL and MPI_REQUEST_NULL. Every int result is an MPI error
 * code (0 is MPI_SUCCESS). The header includes nothing of MPI. */
#ifndef OARI_MPI_API_H
#define OARI_MPI_API_H

#include <stddef.h>

#define OARI_MPI_API_VERSION 2 /* 2: iprobe */
#define OARI_MPI_MODULE_SYMBOL "oari_mpi_module" /* const oari_mpi_api *oari_mpi_module(void) */

typedef void *oari_mpi_comm;
typedef void *oari_mpi_req;

/* Element types of messages (the dtypes MPI has, and bytes). */
typedef enum oari_mpi_type {
    OARI_MPI_BYTE, OARI_MPI_BOOL, OARI_MPI_U8, OARI_MPI_I32, OARI_MPI_I64, OARI_MPI_F32, OARI_MPI_F64,
    OARI_MPI_C64, OARI_MPI_C128, OARI_MPI_I8, OARI_MPI_NTYPES
} oari_mpi_type;

/* Reductions (LOR/LAND: max and min of bools). */
typedef enum oari_mpi_op {
    OARI_MPI_SUM, OARI_MPI_MAX, OARI_MPI_MIN, OARI_MPI_PROD, OARI_MPI_LOR, OARI_MPI_LAND, OARI_MPI_NOPS
} oari_mpi_op;

typedef struct oari_mpi_api {
    int version;        /* OARI_MPI_API_VERSION */
    size_t struct_size; /* sizeof(oari_mpi_api) */
    /* MPI is initialised and not finalized. */
    int (*ready)(void);
    /* MPI_Init_thread (MPI_THREAD_FUNNELED), then errors on the world
     * communicator return codes instead of aborting the job. */
    int (*init)(int *argc, char ***argv);
    int (*finalize)(void);
    oari_mpi_comm (*world)(void);
    int (*comm_rank)(oari_mpi_comm c, int *rank);
    int (*comm_size)(oari_mpi_comm c, int *size);
    /* color < 0: MPI_UNDEFINED (*out becomes NULL). */
    int (*comm_split)(oari_mpi_comm c, int color, int key, oari_mpi_comm *out);
    int (*comm_dup)(oari_mpi_comm c, oari_mpi_comm *out);
    int (*comm_free)(oari_mpi_comm *c); /* sets *c to NULL */
    /* The communicator of ranks[0..n-1] of c, collective over them only. */
    int (*comm_create_group)(oari_mpi_comm c, int n, const int *ranks, int tag, oari_mpi_comm *out);
    /* Non-blocking collectives; each starts *req. */
    int (*iallreduce_inplace)(void *buf, int count, oari_mpi_type t, oari_mpi_op op, oari_mpi_comm c,
                              oari_mpi_req *req);
    int (*iallgather)(const void *send, void *recv, int count, oari_mpi_type t, oari_mpi_comm c,
                      oari_mpi_req *req);
    int (*iallgatherv)(const void *send, int count, void *recv, const int *counts, const int *displs,
                       oari_mpi_type t, oari_mpi_comm c, oari_mpi_req *req);
    int (*ireduce_scatter)(const void *send, void *recv, const int *counts, oari_mpi_type t, oari_mpi_op op,
                           oari_mpi_comm c, oari_mpi_req *req);
    int (*ialltoallv)(const void *send, const int *scounts, const int *sdispls, void *recv, const int *rcounts,
                      const int *rdispls, oari_mpi_type t, oari_mpi_comm c, oari_mpi_req *req);
    int (*ibcast)(void *buf, int count, oari_mpi_type t, int root, oari_mpi_comm c, oari_mpi_req *req);
    int (*isend)(const void *buf, int count, oari_mpi_type t, int peer, int tag, oari_mpi_comm c,
                 oari_mpi_req *req);
    int (*irecv)(void *buf, int count, oari_mpi_type t, int peer, int tag, oari_mpi_comm c, oari_mpi_req *req);
    /* *flag = 1 when a message from peer with tag waits to be received. */
    int (*iprobe)(int peer, int tag, oari_mpi_comm c, int *flag);
    /* *done = 1 when complete (the request then reads NULL). */
    int (*test)(oari_mpi_req *req, int *done);
    int (*testall)(int n, oari_mpi_req *req, int *done);
    void (*error_string)(int rc, char *buf, size_t size);
} oari_mpi_api;

typedef const oari_mpi_api *(*oari_mpi_module_fn)(void);

#endif

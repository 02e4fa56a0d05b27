/* liboar_mpi.so: the MPI transport of src/dist (the table of
 * ../mpi_api.h). The one object of oar that links libmpi; liboar opens
 * it on oar_dist_init (../mpi_load.c). It is not part of liboar's objects
 * and calls nothing of oar: each function is the MPI call of its name,
 * with oar's element types and reductions mapped to MPI's and handles
 * carried as void *. */
#include "../mpi_api.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(sizeof(MPI_Comm) <= sizeof(void *), "an MPI communicator handle must fit in a pointer");
_Static_assert(sizeof(MPI_Request) <= sizeof(void *), "an MPI request handle must fit in a pointer");

/* Handles in and out: MPI's null handles are NULL on oar's side. */
static MPI_Comm comm_in(oari_mpi_comm h) {
    if (!h) return MPI_COMM_NULL;
    MPI_Comm c;
    memcpy(&c, &h, sizeof c);
    return c;
}

static oari_mpi_comm comm_out(MPI_Comm c) {
    void *h = NULL;
    if (c != MPI_COMM_NULL) memcpy(&h, &c, sizeof c);
    return h;
}

static MPI_Request req_in(oari_mpi_req h) {
    if (!h) return MPI_REQUEST_NULL;
    MPI_Request r;
    memcpy(&r, &h, sizeof r);
    return r;
}

static oari_mpi_req req_out(MPI_Request r) {
    void *h = NULL;
    if (r != MPI_REQUEST_NULL) memcpy(&h, &r, sizeof r);
    return h;
}

static MPI_Datatype type_of(oari_mpi_type t) {
    switch (t) {
    case OARI_MPI_BYTE: return MPI_BYTE;
    case OARI_MPI_BOOL: return MPI_C_BOOL;
    case OARI_MPI_U8: return MPI_UINT8_T;
    case OARI_MPI_I8: return MPI_INT8_T;
    case OARI_MPI_I32: return MPI_INT32_T;
    case OARI_MPI_I64: return MPI_INT64_T;
    case OARI_MPI_F32: return MPI_FLOAT;
    case OARI_MPI_F64: return MPI_DOUBLE;
    case OARI_MPI_C64: return MPI_C_FLOAT_COMPLEX;
    case OARI_MPI_C128: return MPI_C_DOUBLE_COMPLEX;
    default: return MPI_DATATYPE_NULL;
    }
}

static MPI_Op op_of(oari_mpi_op op) {
    switch (op) {
    case OARI_MPI_SUM: return MPI_SUM;
    case OARI_MPI_MAX: return MPI_MAX;
    case OARI_MPI_MIN: return MPI_MIN;
    case OARI_MPI_PROD: return MPI_PROD;
    case OARI_MPI_LOR: return MPI_LOR;
    case OARI_MPI_LAND: return MPI_LAND;
    default: return MPI_OP_NULL;
    }
}

static int ready(void) {
    int on = 0, off = 0;
    MPI_Initialized(&on);
    if (on) MPI_Finalized(&off);
    return on && !off;
}

static int init(int *argc, char ***argv) {
    int provided = 0;
    int rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
    /* Errors come back as codes, which oar turns into messages, instead of
     * aborting the job. */
    if (rc == MPI_SUCCESS) MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    return rc;
}

static int finalize(void) { return MPI_Finalize(); }
static oari_mpi_comm world(void) { return comm_out(MPI_COMM_WORLD); }
static int comm_rank(oari_mpi_comm c, int *rank) { return MPI_Comm_rank(comm_in(c), rank); }
static int comm_size(oari_mpi_comm c, int *size) { return MPI_Comm_size(comm_in(c), size); }

static int comm_split(oari_mpi_comm c, int color, int key, oari_mpi_comm *out) {
    MPI_Comm n = MPI_COMM_NULL;
    int rc = MPI_Comm_split(comm_in(c), color < 0 ? MPI_UNDEFINED : color, key, &n);
    *out = rc == MPI_SUCCESS ? comm_out(n) : NULL;
    return rc;
}

static int comm_dup(oari_mpi_comm c, oari_mpi_comm *out) {
    MPI_Comm n = MPI_COMM_NULL;
    int rc = MPI_Comm_dup(comm_in(c), &n);
    *out = rc == MPI_SUCCESS ? comm_out(n) : NULL;
    return rc;
}

static int comm_free(oari_mpi_comm *c) {
    MPI_Comm m = comm_in(*c);
    int rc = m == MPI_COMM_NULL ? MPI_SUCCESS : MPI_Comm_free(&m);
    *c = NULL;
    return rc;
}

static int comm_create_group(oari_mpi_comm c, int n, const int *ranks, int tag, oari_mpi_comm *out) {
    MPI_Group all, g;
    MPI_Comm n_comm = MPI_COMM_NULL;
    *out = NULL;
    int rc = MPI_Comm_group(comm_in(c), &all);
    if (rc != MPI_SUCCESS) return rc;
    rc = MPI_Group_incl(all, n, ranks, &g);
    MPI_Group_free(&all);
    if (rc != MPI_SUCCESS) return rc;
    rc = MPI_Comm_create_group(comm_in(c), g, tag, &n_comm);
    MPI_Group_free(&g);
    if (rc == MPI_SUCCESS) *out = comm_out(n_comm);
    return rc;
}

/* Each non-blocking call writes its request through r, then to *req. r
 * comes by address, read once the call has returned: by value it could be
 * read before the call runs (C leaves the order of arguments open). */
static int started(int rc, const MPI_Request *r, oari_mpi_req *req) {
    *req = rc == MPI_SUCCESS ? req_out(*r) : NULL;
    return rc;
}

static int iallreduce_inplace(void *buf, int count, oari_mpi_type t, oari_mpi_op op, oari_mpi_comm c,
                              oari_mpi_req *req) {
    MPI_Request r = MPI_REQUEST_NULL;
    return started(MPI_Iallreduce(MPI_IN_PLACE, buf, count, type_of(t), op_of(op), comm_in(c), &r), &r, req);
}

static int iallgather(const void *send, void *recv, int count, oari_mpi_type t, oari_mpi_comm c,
                      oari_mpi_req *req) {
    MPI_Request r = MPI_REQUEST_NULL;
    return started(MPI_Iallgather(send, count, type_of(t), recv, count, type_of(t), comm_in(c), &r), &r, req);
}

static int iallgatherv(const void *send, int count, void *recv, const int *counts, const int *displs,
                       oari_mpi_type t, oari_mpi_comm c, oari_mpi_req *req) {
    MPI_Request r = MPI_REQUEST_NULL;
    return started(MPI_Iallgatherv(send, count, type_of(t), recv, counts, displs, type_of(t), comm_in(c), &r),
                   &r, req);
}

static int ireduce_scatter(const void *send, void *recv, const int *counts, oari_mpi_type t, oari_mpi_op op,
                           oari_mpi_comm c, oari_mpi_req *req) {
    MPI_Request r = MPI_REQUEST_NULL;
    return started(MPI_Ireduce_scatter(send, recv, counts, type_of(t), op_of(op), comm_in(c), &r), &r, req);
}

static int ialltoallv(const void *send, const int *scounts, const int *sdispls, void *recv, const int *rcounts,
                      const int *rdispls, oari_mpi_type t, oari_mpi_comm c, oari_mpi_req *req) {
    MPI_Request r = MPI_REQUEST_NULL;
    return started(MPI_Ialltoallv(send, scounts, sdispls, type_of(t), recv, rcounts, rdispls, type_of(t),
                                  comm_in(c), &r), &r, req);
}

static int ibcast(void *buf, int count, oari_mpi_type t, int root, oari_mpi_comm c, oari_mpi_req *req) {
    MPI_Request r = MPI_REQUEST_NULL;
    return started(MPI_Ibcast(buf, count, type_of(t), root, comm_in(c), &r), &r, req);
}

static int isend(const void *buf, int count, oari_mpi_type t, int peer, int tag, oari_mpi_comm c,
                 oari_mpi_req *req) {
    MPI_Request r = MPI_REQUEST_NULL;
    return started(MPI_Isend(buf, count, type_of(t), peer, tag, comm_in(c), &r), &r, req);
}

static int irecv(void *buf, int count, oari_mpi_type t, int peer, int tag, oari_mpi_comm c, oari_mpi_req *req) {
    MPI_Request r = MPI_REQUEST_NULL;
    return started(MPI_Irecv(buf, count, type_of(t), peer, tag, comm_in(c), &r), &r, req);
}

static int iprobe(int peer, int tag, oari_mpi_comm c, int *flag) {
    return MPI_Iprobe(peer, tag, comm_in(c), flag, MPI_STATUS_IGNORE);
}

static int test(oari_mpi_req *req, int *done) {
    MPI_Request r = req_in(*req);
    int rc = MPI_Test(&r, done, MPI_STATUS_IGNORE);
    *req = req_out(r);
    return rc;
}

static int testall(int n, oari_mpi_req *req, int *done) {
    MPI_Request local[128], *r = n <= 128 ? local : malloc((size_t)n * sizeof *r);
    if (!r) return MPI_ERR_NO_MEM;
    for (int i = 0; i < n; i++) r[i] = req_in(req[i]);
    int rc = MPI_Testall(n, r, done, MPI_STATUSES_IGNORE);
    for (int i = 0; i < n; i++) req[i] = req_out(r[i]);
    if (r != local) free(r);
    return rc;
}

static void error_string(int rc, char *buf, size_t size) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (!size) return;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) len = 0;
    msg[len < MPI_MAX_ERROR_STRING ? len : MPI_MAX_ERROR_STRING - 1] = 0;
    snprintf(buf, size, "%s", len ? msg : "(unknown MPI error)");
}

static const oari_mpi_api api = {
    .version = OARI_MPI_API_VERSION,
    .struct_size = sizeof(oari_mpi_api),
    .ready = ready,
    .init = init,
    .finalize = finalize,
    .world = world,
    .comm_rank = comm_rank,
    .comm_size = comm_size,
    .comm_split = comm_split,
    .comm_dup = comm_dup,
    .comm_free = comm_free,
    .comm_create_group = comm_create_group,
    .iallreduce_inplace = iallreduce_inplace,
    .iallgather = iallgather,
    .iallgatherv = iallgatherv,
    .ireduce_scatter = ireduce_scatter,
    .ialltoallv = ialltoallv,
    .ibcast = ibcast,
    .isend = isend,
    .irecv = irecv,
    .iprobe = iprobe,
    .test = test,
    .testall = testall,
    .error_string = error_string,
};

/* The module's one exported symbol (the others are hidden). */
__attribute__((visibility("default"))) const oari_mpi_api *oari_mpi_module(void) { return &api; }

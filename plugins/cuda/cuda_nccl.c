/* The CUDA plugin's collective members over NCCL: a communicator is an
 * ncclComm_t made by ncclCommInitRank from the ncclUniqueId that oar sends
 * from the group's first process to the others; every collective is queued
 * on the stream it is given (NULL: the device's stream, oar_cuda_stream,
 * where the plugin's kernels and copies run). Compiled and
 * linked here, never run: the machine it was written on has no GPU. */
#include "cuda_nccl.h"

#include "cuda_device.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

static const oar_host_api *host;

void oar_cuda_nccl_init(const oar_host_api *h) { host = h; }

static int nccl_fail(const char *what, ncclResult_t r) {
    char msg[256];
    snprintf(msg, sizeof msg, "cuda: %s failed: %s", what, ncclGetErrorString(r));
    return host->error(-4, msg);
}

#define NC(call, what)                                                                      \
    do {                                                                                    \
        ncclResult_t r_ = (call);                                                           \
        if (r_ != ncclSuccess) return nccl_fail(what, r_);                                  \
    } while (0)

static int set_device(int index) { return oar_cuda_use_device(index); }

/* The stream a collective is queued on: s, or the device's own stream
 * (the plugin's kernels and copies run there) when oar gives none. */
static cudaStream_t on_stream(int index, oar_stream s) { return s ? (cudaStream_t)s : oar_cuda_stream(index); }

/* oar dtype -> NCCL type and element multiplier (complex: two reals);
 * -1 if NCCL has no such type. */
static int nccl_type(int32_t dtype, ncclDataType_t *t, size_t *mult) {
    *mult = 1;
    switch (dtype) {
    case 0: case 1: *t = ncclUint8; return 0; /* bool as bytes */
    case 2: *t = ncclInt32; return 0;
    case 3: *t = ncclInt64; return 0;
    case 4: *t = ncclFloat16; return 0;
    case 5: *t = ncclBfloat16; return 0;
    case 6: *t = ncclFloat32; return 0;
    case 7: *t = ncclFloat64; return 0;
    case 8: *t = ncclFloat32, *mult = 2; return 0;
    case 9: *t = ncclFloat64, *mult = 2; return 0;
    default: return -1;
    }
}

/* The NCCL reduction for op on dtype; -1 where it would be wrong (complex
 * max/min/prod, a sum of bools). */
static int nccl_op(oar_reduce_op op, int32_t dtype, ncclRedOp_t *r) {
    bool complex = dtype == 8 || dtype == 9;
    switch (op) {
    case OAR_REDUCE_SUM: *r = ncclSum; return dtype == 0 ? -1 : 0;
    case OAR_REDUCE_AVG: *r = ncclAvg; return dtype <= 3 ? -1 : 0;
    case OAR_REDUCE_MAX: *r = ncclMax; return complex ? -1 : 0;
    case OAR_REDUCE_MIN: *r = ncclMin; return complex ? -1 : 0;
    case OAR_REDUCE_PROD: *r = ncclProd; return complex || dtype == 0 ? -1 : 0;
    }
    return -1;
}

static int unsupported(const char *what, int32_t dtype) {
    char msg[128];
    snprintf(msg, sizeof msg, "cuda: %s: no NCCL reduction or type for dtype %d", what, (int)dtype);
    return host->error(-3, msg);
}

int oar_cuda_nccl_unique_id(void *ctx, int index, void *id, size_t *len) {
    (void)ctx, (void)index;
    ncclUniqueId u;
    NC(ncclGetUniqueId(&u), "ncclGetUniqueId");
    memcpy(id, &u, sizeof u);
    *len = sizeof u;
    return 0;
}

void *oar_cuda_nccl_comm_create(void *ctx, int index, int nranks, int rank, const void *id, size_t len) {
    (void)ctx;
    ncclUniqueId u;
    if (len != sizeof u) {
        host->error(-1, "cuda: a communicator id of the wrong size");
        return NULL;
    }
    memcpy(&u, id, sizeof u);
    ncclComm_t comm = NULL;
    if (set_device(index)) return NULL;
    ncclResult_t r = ncclCommInitRank(&comm, nranks, u, rank);
    if (r != ncclSuccess) {
        nccl_fail("ncclCommInitRank", r);
        return NULL;
    }
    return comm;
}

void oar_cuda_nccl_comm_destroy(void *ctx, int index, void *comm) {
    (void)ctx;
    if (!set_device(index)) ncclCommDestroy((ncclComm_t)comm);
}

int oar_cuda_nccl_all_reduce(void *ctx, int index, void *comm, const void *send, void *recv,
                             size_t count, int32_t dtype, oar_reduce_op op, oar_stream s) {
    (void)ctx;
    ncclDataType_t t;
    ncclRedOp_t r;
    size_t mult;
    if (nccl_type(dtype, &t, &mult) || nccl_op(op, dtype, &r)) return unsupported("all_reduce", dtype);
    cudaStream_t st;
    if (set_device(index) || !(st = on_stream(index, s))) return -4;
    NC(ncclAllReduce(send, recv, count * mult, t, r, (ncclComm_t)comm, st), "ncclAllReduce");
    return 0;
}

int oar_cuda_nccl_all_gather(void *ctx, int index, void *comm, const void *send, void *recv,
                             size_t send_count, int32_t dtype, oar_stream s) {
    (void)ctx;
    ncclDataType_t t;
    size_t mult;
    if (nccl_type(dtype, &t, &mult)) return unsupported("all_gather", dtype);
    cudaStream_t st;
    if (set_device(index) || !(st = on_stream(index, s))) return -4;
    NC(ncclAllGather(send, recv, send_count * mult, t, (ncclComm_t)comm, st), "ncclAllGather");
    return 0;
}

int oar_cuda_nccl_reduce_scatter(void *ctx, int index, void *comm, const void *send, void *recv,
                                 size_t recv_count, int32_t dtype, oar_reduce_op op, oar_stream s) {
    (void)ctx;
    ncclDataType_t t;
    ncclRedOp_t r;
    size_t mult;
    if (nccl_type(dtype, &t, &mult) || nccl_op(op, dtype, &r)) return unsupported("reduce_scatter", dtype);
    cudaStream_t st;
    if (set_device(index) || !(st = on_stream(index, s))) return -4;
    NC(ncclReduceScatter(send, recv, recv_count * mult, t, r, (ncclComm_t)comm, st),
       "ncclReduceScatter");
    return 0;
}

int oar_cuda_nccl_broadcast(void *ctx, int index, void *comm, const void *send, void *recv,
                            size_t count, int32_t dtype, int root, oar_stream s) {
    (void)ctx;
    ncclDataType_t t;
    size_t mult;
    if (nccl_type(dtype, &t, &mult)) return unsupported("broadcast", dtype);
    cudaStream_t st;
    if (set_device(index) || !(st = on_stream(index, s))) return -4;
    NC(ncclBroadcast(send, recv, count * mult, t, root, (ncclComm_t)comm, st), "ncclBroadcast");
    return 0;
}

int oar_cuda_nccl_send(void *ctx, int index, void *comm, const void *buf, size_t count,
                       int32_t dtype, int peer, oar_stream s) {
    (void)ctx;
    ncclDataType_t t;
    size_t mult;
    if (nccl_type(dtype, &t, &mult)) return unsupported("send", dtype);
    cudaStream_t st;
    if (set_device(index) || !(st = on_stream(index, s))) return -4;
    NC(ncclSend(buf, count * mult, t, peer, (ncclComm_t)comm, st), "ncclSend");
    return 0;
}

int oar_cuda_nccl_recv(void *ctx, int index, void *comm, void *buf, size_t count, int32_t dtype,
                       int peer, oar_stream s) {
    (void)ctx;
    ncclDataType_t t;
    size_t mult;
    if (nccl_type(dtype, &t, &mult)) return unsupported("recv", dtype);
    cudaStream_t st;
    if (set_device(index) || !(st = on_stream(index, s))) return -4;
    NC(ncclRecv(buf, count * mult, t, peer, (ncclComm_t)comm, st), "ncclRecv");
    return 0;
}

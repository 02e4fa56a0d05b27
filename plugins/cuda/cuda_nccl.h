/* The CUDA plugin's collective members over NCCL (cuda_nccl.c), built when
 * CMake finds NCCL (OAR_CUDA_NCCL); signatures as in <oar/device.h>. */
#ifndef OAR_CUDA_NCCL_H
#define OAR_CUDA_NCCL_H

#ifndef OAR_DEVICE_PLUGIN_ONLY
#define OAR_DEVICE_PLUGIN_ONLY
#endif
#include <oar/device.h>

void oar_cuda_nccl_init(const oar_host_api *host);
int oar_cuda_nccl_unique_id(void *ctx, int index, void *id, size_t *len);
void *oar_cuda_nccl_comm_create(void *ctx, int index, int nranks, int rank, const void *id, size_t len);
void oar_cuda_nccl_comm_destroy(void *ctx, int index, void *comm);
int oar_cuda_nccl_all_reduce(void *ctx, int index, void *comm, const void *send, void *recv,
                             size_t count, int32_t dtype, oar_reduce_op op, oar_stream s);
int oar_cuda_nccl_all_gather(void *ctx, int index, void *comm, const void *send, void *recv,
                             size_t send_count, int32_t dtype, oar_stream s);
int oar_cuda_nccl_reduce_scatter(void *ctx, int index, void *comm, const void *send, void *recv,
                                 size_t recv_count, int32_t dtype, oar_reduce_op op, oar_stream s);
int oar_cuda_nccl_broadcast(void *ctx, int index, void *comm, const void *send, void *recv,
                            size_t count, int32_t dtype, int root, oar_stream s);
int oar_cuda_nccl_send(void *ctx, int index, void *comm, const void *buf, size_t count,
                       int32_t dtype, int peer, oar_stream s);
int oar_cuda_nccl_recv(void *ctx, int index, void *comm, void *buf, size_t count, int32_t dtype,
                       int peer, oar_stream s);

#endif

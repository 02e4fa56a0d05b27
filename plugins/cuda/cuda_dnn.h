/* conv2d, conv_transpose2d and conv2d_weight_grad of the cuda plugin
 * through cuDNN (cuda_dnn.c): cuDNN is opened at run time (dlopen of
 * libcudnn.so.9), so a plugin built with its headers still loads where the
 * library is missing; it then claims none of these ops. */
#ifndef OAR_CUDA_DNN_H
#define OAR_CUDA_DNN_H

#include <stdbool.h>

#include "cuda_device.h"

void oar_cuda_dnn_init(const oar_host_api *h);
/* Destroys the cuDNN handles and closes the library. */
void oar_cuda_dnn_shutdown(void);
/* Whether (op, kernel dtype) is a conv op the plugin claims (f32, f64) and
 * cuDNN could be opened (opened on the first call; OAR_CUDA_CUDNN=0 keeps
 * it closed, OAR_CUDA_CUDNN_LIB names another library to open). */
bool oar_cuda_dnn_claims(const char *op, int32_t dt);
/* supports_op for those ops: ranks, dtypes, attributes cuDNN takes. */
int oar_cuda_dnn_supports(const oar_kernel_call *c);
/* Runs the call on device dev (current) on stream st: 0, or the status of
 * host->error. */
int oar_cuda_dnn_run(const oar_kernel_call *c, int dev, cudaStream_t st);

#endif

/* The CUDA plugin's generated-kernel members (device ABI 1.3; cuda_jit.c):
 * oar's compiler renders CUDA C, NVRTC compiles it for the device, the
 * driver loads it. Signatures as in <oar/device.h>. */
#ifndef OAR_CUDA_JIT_H
#define OAR_CUDA_JIT_H

#ifndef OAR_DEVICE_PLUGIN_ONLY
#define OAR_DEVICE_PLUGIN_ONLY
#endif
#include <oar/device.h>

void oar_cuda_jit_init(const oar_host_api *host);
void *oar_cuda_build_program(void *ctx, int index, const char *language, const char *source);
void *oar_cuda_get_function(void *ctx, int index, void *program, const char *name);
int oar_cuda_launch(void *ctx, int index, void *fn, int n_buffers, void *const *buffers, int n_scalars,
                    const int64_t *scalars, size_t global_size);
void oar_cuda_jit_shutdown(void);

#endif

/* What the CUDA plugin's C files share (cuda_plugin.c defines
 * oar_cuda_use_device, cuda_mem.c the rest): the current-device rule, and
 * the device's stream, allocator and staged copies (cuda_mem.c's head
 * says how they work). */
#ifndef OAR_CUDA_DEVICE_H
#define OAR_CUDA_DEVICE_H

#ifndef OAR_DEVICE_PLUGIN_ONLY
#define OAR_DEVICE_PLUGIN_ONLY
#endif
#include <oar/device.h>

#include <cuda_runtime.h>
#include <stddef.h>

#define OAR_CUDA_MAX_DEV 16 /* devices past this are not listed */

/* Makes device index current on this thread when it is not already; 0, or
 * the status of host->error with cudaSetDevice's message. Each thread
 * remembers the device it last made current, so a call on the same device
 * as the thread's last one makes no CUDA call at all. */
int oar_cuda_use_device(int index);

/* Reads OAR_CUDA_CACHE_BYTES (the cap on each device's cached bytes). */
void oar_cuda_mem_init(const oar_host_api *h);
/* Gives back every cached block, the staging buffers and the streams. */
void oar_cuda_mem_shutdown(void);
/* The cap on each device's cached bytes (0: no caching). */
size_t oar_cuda_mem_cap(void);

/* Device dev's stream, on which the plugin queues all its work; made on
 * the first call (dev becomes current). NULL after reporting. */
cudaStream_t oar_cuda_stream(int dev);

/* n bytes on device dev (which must be current) from the cache or
 * cudaMalloc; NULL after reporting. */
void *oar_cuda_mem_alloc(int dev, size_t n);
/* Gives back what oar_cuda_mem_alloc(dev, n) returned (n as given), to
 * the cache or to CUDA. */
void oar_cuda_mem_free(int dev, void *p, size_t n);
/* Bytes in device dev's cache. */
size_t oar_cuda_mem_cached(int dev);

/* Host -> device through the staging buffers, queued on dev's stream: src
 * may be reused on return. 0, or the status of host->error. */
int oar_cuda_mem_to_device(int dev, void *dst, const void *src, size_t n);
/* Device -> host through the staging buffers: dst holds the data on
 * return (everything queued before on dev's stream has run). */
int oar_cuda_mem_to_host(int dev, void *dst, const void *src, size_t n);

#endif

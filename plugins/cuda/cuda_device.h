/* The CUDA plugin's current-device rule, shared by its C files
 * (cuda_plugin.c defines it): each thread remembers the device it last made
 * current, so a call on the same device as the thread's last one makes no
 * CUDA call at all (no cudaSetDevice, no cudaPointerGetAttributes). */
#ifndef OAR_CUDA_DEVICE_H
#define OAR_CUDA_DEVICE_H

/* Makes device index current on this thread when it is not already; 0, or
 * the status of host->error with cudaSetDevice's message. */
int oar_cuda_use_device(int index);

#endif

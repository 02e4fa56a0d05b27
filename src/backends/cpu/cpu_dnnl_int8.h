/* The int8 product through oneDNN (cpu_dnnl_int8.c, only in a build with
 * OAR_WITH_DNNL): C [m, n] int32 = (A - a_zero_point) B, A [m, k] uint8 or
 * int8 and B [k, n] int8, all contiguous row-major, m, k, n > 0. oneDNN
 * runs it on VNNI (vpdpbusd); call it only where oari_dnnl_int8_exact()
 * says so. The int32 sums are then exact (k is at most INT32_MAX / (255 *
 * 128), checked by the op). 0, or a
 * status with the error naming the shapes. */
#ifndef OARI_CPU_DNNL_INT8_H
#define OARI_CPU_DNNL_INT8_H

#include "cpu.h"

typedef struct {
    int a_dtype; /* OAR_U8 or OAR_I8 */
    int64_t m, k, n;
    int32_t a_zero_point;
    const void *a;
    const int8_t *b;
    int32_t *c;
} oari_dnnl_qmatmul_args;
OARI_HIDDEN int oari_dnnl_qmatmul(const oari_dnnl_qmatmul_args *q);
/* Whether oneDNN's int8 products are exact on this CPU: only through VNNI
 * (vpdpbusd; AVX512_VNNI or AVX-VNNI). Without it oneDNN 2.6 sums u8 x s8
 * pairs in int16 (vpmaddubsw), which saturates: on a Zen 1, 2776 of 4096
 * sums of a 64 x 64 x 64 product were wrong. The callers then run the
 * exact loop. */
OARI_HIDDEN bool oari_dnnl_int8_exact(void);
/* How many int8 primitives are cached: the tests' evidence that oneDNN ran. */
OARI_HIDDEN int oari_dnnl_int8_cached_primitives(void);

#endif

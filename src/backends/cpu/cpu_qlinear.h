/* The fused quantized linear layer's CPU kernel (cpu_qlinear.c): a switch
 * for the tests, and the int32 product qconv2d runs on. */
#ifndef OARI_CPU_QLINEAR_H
#define OARI_CPU_QLINEAR_H

#include "cpu.h"

/* true: every qlinear call runs the exact integer loop (the path of a CPU
 * without AVX512_VNNI); false: the VNNI kernel where the CPU has it. */
OARI_HIDDEN void oari_cpu_qlinear_force_reference(bool on);

/* c [m, n] int32 = (a - za) b exactly, a [m, k] uint8 (or int8: i8) and b
 * [k, n] int8 dense row-major, on the VNNI kernel with b packed for the
 * call (qconv2d's products: a small weight, many rows). *done false (and
 * nothing written) where the CPU lacks AVX512_VNNI or the exact loop is
 * forced; 0, or OAR_ERR_NOMEM. */
OARI_HIDDEN int oari_cpu_qgemm_vnni(const void *a, bool i8, int32_t za, const int8_t *b, int64_t m, int64_t k,
                                    int64_t n, int32_t *c, bool *done);

#endif

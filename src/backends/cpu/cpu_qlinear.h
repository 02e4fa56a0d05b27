/* The fused quantized linear layer's CPU kernel (cpu_qlinear.c): a switch
 * for the tests. */
#ifndef OARI_CPU_QLINEAR_H
#define OARI_CPU_QLINEAR_H

#include "cpu.h"

/* true: every qlinear call runs the exact integer loop (the path of a CPU
 * without AVX512_VNNI); false: the VNNI kernel where the CPU has it. */
OARI_HIDDEN void oari_cpu_qlinear_force_reference(bool on);

#endif

/* The 8-op elementwise chain that bench_fusion (CPU) and bench_opencl_fused
 * (OpenCL) compile and time against the unfused executor. */
#ifndef OAR_BENCH_FUSED_CHAIN_H
#define OAR_BENCH_FUSED_CHAIN_H

#include <oar/oar.h>

static int f_chain(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    oar_tensor *x = in[0];
    oar_tensor *y = oar_mul_scalar(oar_add_scalar(x, 1.0), 0.5); /* 2 */
    y = oar_tanh(oar_neg(y));                                     /* 4 */
    y = oar_sigmoid(oar_mul(y, x));                               /* 6 */
    out[0] = oar_sub(oar_relu(y), x);                             /* 8 */
    return out[0] ? 0 : -1;
}

#endif

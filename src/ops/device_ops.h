/* What dispatch does for devices other than the CPU (src/ops/device_ops.c):
 * 0-d CPU inputs follow the other inputs' device, and an op a device has no
 * kernel for (or refuses) runs on the CPU with copies. */
#ifndef OARI_DEVICE_OPS_H
#define OARI_DEVICE_OPS_H

#include "op.h"

/* True if input t may follow the device of the other inputs: a 0-d CPU
 * tensor that does not require grad and is not the target of an in-place
 * op (`inplace_target`). Such inputs do not choose the op's device. */
OARI_HIDDEN bool oari_device_follows(const oar_tensor *t, bool inplace_target);
/* Replaces each following input cin[i] by a copy on dev (releasing a
 * cin[i] that is not in[i]); counts the replacements into *n_replaced.
 * inplace: the op writes in[0], which then never moves. */
OARI_HIDDEN int oari_device_move_scalars(oar_device *dev, bool inplace, int n_in,
                                         oar_tensor *const *in, oar_tensor **cin,
                                         int *n_replaced);
/* Whether dev has a kernel for (op, kdtype) and its supports_op, if it
 * has one, says yes to the call on kernel tensors kin. */
OARI_HIDDEN bool oari_device_claims_k(oar_device *dev, oari_op op, oar_dtype kdtype, int n_in,
                                      const oar_ktensor *kin, const oari_attrs *attrs);
/* k: the f32 temporary the planner's f32 route gives a kernel for t
 * (dense, t's shape, at an address not yet known: plan.c's fresh_temp,
 * the executor's arena_temp). */
OARI_HIDDEN void oari_ktensor_f32_temp(const oar_tensor *t, oar_ktensor *k);
/* Whether a fused op (a norm's backward, adam_update) runs where x lives,
 * so a caller picks it over its composite: always on the CPU and for a
 * traced x (a CPU graph); on a device only where it has the kernel (for
 * f16/bf16, its f32 one), since the composite's ops run there while the
 * fused op would round-trip through the CPU. */
OARI_HIDDEN bool oari_fused_op_here(oari_op op, const oar_tensor *x);
/* Whether dev takes this call with its own kernel for (op, kdtype):
 * get_kernel has one and supports_op, if the device has it, says yes to
 * these inputs (as the op got them, before broadcast expansion). */
OARI_HIDDEN bool oari_device_claims(oar_device *dev, oari_op op, oar_dtype kdtype, int n_in,
                                    oar_tensor *const *in, const oari_attrs *attrs);
/* The same for the call an f16/bf16 call becomes on the planner's f32
 * route (plan.h, OARI_ROUTE_VIA_F32): the f32 kernel, each f16/bf16 input
 * replaced by a dense f32 tensor of its shape. When neither is claimed,
 * the op runs on the CPU with copies (oari_device_run_on_cpu). */
OARI_HIDDEN bool oari_device_claims_via_f32(oar_device *dev, oari_op op, int n_in,
                                            oar_tensor *const *in, const oari_attrs *attrs);
/* Runs op on CPU copies of in[] and copies the results into out[] (already
 * allocated on dev; for in-place ops out[0] is in[0]). Warns once per op,
 * counts the call for oar_device_fallback_count. */
OARI_HIDDEN int oari_device_run_on_cpu(oari_op op, oar_device *dev, int n_in,
                                       oar_tensor *const *in, const oari_attrs *attrs, int n_out,
                                       oar_tensor *const *out);

#endif

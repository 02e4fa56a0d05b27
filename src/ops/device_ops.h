/* What dispatch does for devices other than the CPU (src/ops/device_ops.c):
 * 0-d CPU inputs follow the other inputs' device, and an op a device has no
 * kernel for runs on the CPU with copies. */
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
/* True if dev is not the CPU and has no kernel for (op, kdtype) that
 * supports these inputs (and the f16/bf16-through-f32 path has none
 * either). */
OARI_HIDDEN bool oari_device_needs_fallback(oar_device *dev, oari_op op, oar_dtype kdtype,
                                            int n_in, oar_tensor *const *in,
                                            const oari_attrs *attrs);
/* Runs op on CPU copies of in[] and copies the results into out[] (already
 * allocated on dev; for in-place ops out[0] is in[0]). Warns once per op,
 * counts the call for oar_device_fallback_count. */
OARI_HIDDEN int oari_device_run_on_cpu(oari_op op, oar_device *dev, int n_in,
                                       oar_tensor *const *in, const oari_attrs *attrs, int n_out,
                                       oar_tensor *const *out);

#endif

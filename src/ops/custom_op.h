/* Custom ops (include/oar/custom.h) inside oar: every call is the one op row
 * `custom`, whose attribute i[0] is the registry id of the user's op and
 * i[1..] / f[] the call's own attributes. The planner runs such a call on
 * the route OARI_ROUTE_CUSTOM through oari_custom_run; the layers above
 * (the serializer, CSE, sharding, ONNX export) read the op's name and
 * flags through the functions here. */
#ifndef OARI_CUSTOM_OP_H
#define OARI_CUSTOM_OP_H

#include "op.h"
#include <oar/custom.h>

/* The registered op a call's attributes name, or NULL (no error set). */
OARI_HIDDEN const oar_custom_op *oari_custom_of(const oari_attrs *a);
/* Its name, "?" when the attributes name no registered op. */
OARI_HIDDEN const char *oari_custom_name_of(const oari_attrs *a);
/* Its OAR_CUSTOM_* flags (0 when unknown). */
OARI_HIDDEN unsigned oari_custom_flags_of(const oari_attrs *a);
/* Its number of real outputs (the row has OARI_MAX_OUT; the ones past
 * these are 0-d placeholders nobody reads); 0 when unknown. */
OARI_HIDDEN int oari_custom_outputs_of(const oari_attrs *a);
/* The registry id of the op registered under name, or -1. */
OARI_HIDDEN int oari_custom_id(const char *name);

/* How the planner runs a custom call on dev: OARI_ROUTE_CUSTOM (a kernel
 * for dev's type, or a forward written with ops), OARI_ROUTE_ON_CPU (a
 * plugin device without a kernel of its own, when the op has a "cpu" one),
 * else OARI_ROUTE_NONE (oari_custom_no_kernel says why). */
OARI_HIDDEN int oari_custom_route(const oar_device *dev, const oari_attrs *a);
OARI_HIDDEN int oari_custom_no_kernel(const oar_device *dev, const oari_attrs *a);
/* Runs the call: in[0..n_in) on dev, outputs preallocated; kin/kout are
 * the plan's kernel tensors of the same tensors, whose data pointers win
 * where they differ (the executor repoints a graph input's readers on each
 * run). 0 or a status with a message naming the op. */
OARI_HIDDEN int oari_custom_run(oar_device *dev, int n_in, oar_tensor *const *in, const oar_ktensor *kin,
                                const oari_attrs *a, int n_out, oar_tensor *const *out,
                                const oar_ktensor *kout);

#endif

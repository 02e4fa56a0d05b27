/* The kernel-call planner: how one op call runs on a device, decided and
 * prepared once. Eager dispatch plans a call and runs it at once; the
 * executor (src/exec/) keeps a plan per node and runs it on every run.
 *
 * A plan holds the route, the kernel, the kernel tensors (inputs of
 * broadcast ops expanded to the output's shape by stride 0), and for an
 * f16/bf16 call through an f32 kernel the casts around it; a call the
 * device has no kernel for runs on the CPU with copies. */
#ifndef OARI_PLAN_H
#define OARI_PLAN_H

#include "op.h"

typedef enum oari_route {
    OARI_ROUTE_NONE,    /* no way to run it (no kernel for the dtype on the CPU) */
    OARI_ROUTE_KERNEL,  /* the device's kernel for the kernel dtype */
    OARI_ROUTE_VIA_F32, /* f16/bf16: the device's f32 kernel on f32 temporaries, casts around it */
    OARI_ROUTE_ON_CPU,  /* the device lacks the kernel: the CPU's, on copies (device_ops.h) */
    OARI_ROUTE_CUSTOM,  /* a custom op (custom_op.h): the user's kernel or forward, on the call's tensors */
} oari_route;

/* One cast kernel call between a half tensor and its f32 temporary. */
typedef struct oari_cast_step {
    oar_kernel_fn k;
    oar_kernel_call call;
    oar_ktensor in, out;
    int64_t dtype; /* the cast's attribute: its target dtype */
} oari_cast_step;

/* Where the f32 temporaries of a VIA_F32 plan come from: called for each
 * half input, then each half output, in order, with the tensor it stands
 * for; returns a reference the plan keeps (NULL with the error set). NULL
 * function: fresh tensors on the plan's device (eager dispatch). */
typedef oar_tensor *(*oari_temp_fn)(void *ctx, const oar_tensor *like);

typedef struct oari_plan {
    oari_route route;
    oari_op op;
    oar_device *dev;
    oar_kernel_fn kernel;     /* KERNEL, VIA_F32 */
    oar_kernel_call call;     /* its arguments: kin / kout are the caller's arrays */
    /* VIA_F32: n_pre casts before the kernel, the rest after */
    oari_cast_step *casts;
    int n_pre, n_casts, cap_casts;
    oar_tensor **temps;       /* the temporaries (owned) */
    /* ON_CPU, CUSTOM: the call's tensors (borrowed: inputs, then outputs) */
    oar_tensor **io;
    int n_in, n_out;
    const oari_attrs *attrs;
} oari_plan;

/* How op would run on dev for kernel dtype kdtype and these inputs
 * (symbolic ones will do: only geometry and dtypes are read). Sets no
 * error: oari_plan_make reports OARI_ROUTE_NONE. */
OARI_HIDDEN oari_route oari_plan_route(oar_device *dev, oari_op op, oar_dtype kdtype, int n_in,
                                       oar_tensor *const *in, const oari_attrs *attrs);

/* Plans op on dev over the call's tensors: in[0..n_in) (NULL where an
 * optional input is absent; for an in-place op in[0] is the target) and
 * out[0..n_out), already allocated. kin[n_in] and kout[n_out] receive the
 * kernel tensors and must outlive the plan, as must in, out and attrs.
 * 0, or a status with the error set (the plan then holds nothing). */
OARI_HIDDEN int oari_plan_make(oari_plan *p, oari_op op, oar_device *dev, oar_dtype kdtype, int n_in,
                               oar_tensor *const *in, const oari_attrs *attrs, int n_out,
                               oar_tensor *const *out, oar_ktensor *kin, oar_ktensor *kout,
                               oari_temp_fn temp, void *temp_ctx);
/* Runs the planned call; 0 or the kernel's status. */
OARI_HIDDEN int oari_plan_run_routed(oari_plan *p);
static inline int oari_plan_run(oari_plan *p) {
    if (__builtin_expect(p->route == OARI_ROUTE_KERNEL, 1)) return p->kernel(p->dev->ctx, &p->call);
    return oari_plan_run_routed(p);
}
/* Drops what the plan owns (temporaries, casts); the plan may be made again. */
OARI_HIDDEN void oari_plan_free_owned(oari_plan *p);
static inline void oari_plan_clear(oari_plan *p) {
    if (p->casts || p->temps || p->io) oari_plan_free_owned(p); /* a kernel call owns nothing */
}

#endif

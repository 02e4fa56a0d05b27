/* Building and taking apart complex tensors, as torch.complex, torch.polar,
 * torch.view_as_real and torch.view_as_complex. Results follow the pool
 * rule and are differentiable to any order; bad input returns NULL with
 * oar_last_error() naming the function (a NULL input keeps the pending
 * message). oar_real, oar_imag, oar_conj, oar_angle and oar_abs are in
 * ops.h. */
#ifndef OAR_COMPLEX_H
#define OAR_COMPLEX_H

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* re + i im. re and im are float32 or float64 of one dtype, broadcast
 * together; the result is complex64 or complex128. A new tensor. */
OAR_API oar_tensor *oar_complex(oar_tensor *re, oar_tensor *im);
/* abs * (cos(angle) + i sin(angle)); dtypes as oar_complex. */
OAR_API oar_tensor *oar_polar(oar_tensor *abs, oar_tensor *angle);
/* A complex tensor as real [..., 2] (real, imaginary): a view sharing x's
 * storage. x must be complex64 or complex128. */
OAR_API oar_tensor *oar_view_as_real(oar_tensor *x);
/* A float32/float64 tensor [..., 2] as complex [...]: a view sharing x's
 * storage when its last dim has stride 1 and the other strides and the
 * offset are even; otherwise a view of a contiguous copy. */
OAR_API oar_tensor *oar_view_as_complex(oar_tensor *x);

#ifdef __cplusplus
}
#endif
#endif

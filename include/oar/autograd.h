/* Reverse-mode automatic differentiation to any order. */
#ifndef OAR_AUTOGRAD_H
#define OAR_AUTOGRAD_H

#include <oar/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Inside a no_grad scope ops record nothing for backward. Scopes nest and
 * are per thread. */
OAR_API void oar_no_grad_push(void);
OAR_API void oar_no_grad_pop(void);
OAR_API bool oar_grad_enabled(void);

#ifdef __cplusplus
}
#endif
#endif

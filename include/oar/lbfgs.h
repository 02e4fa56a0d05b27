/* L-BFGS (torch.optim.LBFGS): a quasi-Newton optimizer that re-evaluates
 * the loss through a closure, with an optional strong-Wolfe line search.
 *
 *     static double closure(void *ctx) {      // zero grads, forward, backward
 *         oar_tensor_zero_grad(p);
 *         oar_tensor *loss = f(p);
 *         oar_backward(loss, NULL);
 *         return oar_tensor_item(loss);
 *     }
 *     oar_lbfgs *opt = oar_lbfgs_new(1, &p, &(oar_lbfgs_options){.strong_wolfe = true});
 *     for (int i = 0; i < 10; i++) oar_lbfgs_step(opt, closure, NULL, &loss);
 *     oar_lbfgs_free(opt);
 *
 * The optimizer retains its parameters (floating CPU tensors) and keeps
 * its history in float64 across steps, as PyTorch keeps its state. */
#ifndef OAR_LBFGS_H
#define OAR_LBFGS_H

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct oar_lbfgs oar_lbfgs;

/* Zero fields take PyTorch's defaults. */
typedef struct oar_lbfgs_options {
    double lr;               /* 0: 1 */
    int max_iter;            /* iterations per step; 0: 20 */
    int max_eval;            /* closure calls per step; 0: max_iter * 5 / 4 */
    double tolerance_grad;   /* stop when max |grad| <= this; 0: 1e-7 */
    double tolerance_change; /* stop on smaller changes of loss or point; 0: 1e-9 */
    int history_size;        /* 0: 100 */
    bool strong_wolfe;       /* line search (c1 1e-4, c2 0.9, 25 tries); false: fixed step lr */
} oar_lbfgs_options;

/* Evaluates the loss at the parameters' current values: it must set (not
 * accumulate) every parameter's .grad (zero it, then oar_backward) and
 * return the loss. NAN means failure and stops the step. */
typedef double (*oar_lbfgs_closure)(void *ctx);

/* A new optimizer over n parameters (retained). NULL with an error naming
 * oar_lbfgs_new on bad options or parameters. */
OAR_API oar_lbfgs *oar_lbfgs_new(int n, oar_tensor *const *params, const oar_lbfgs_options *o);
/* One step (up to max_iter iterations), as torch.optim.LBFGS.step: writes
 * the loss of the first closure call to *loss (if not NULL). 0 on success;
 * non-zero with an error naming oar_lbfgs_step if the closure failed or a
 * parameter could not be read or written. */
OAR_API int oar_lbfgs_step(oar_lbfgs *opt, oar_lbfgs_closure closure, void *ctx, double *loss);
/* Closure calls made so far, over all steps (PyTorch's func_evals). */
OAR_API int64_t oar_lbfgs_evals(const oar_lbfgs *opt);
/* Releases the parameters and the history. NULL is ignored. */
OAR_API void oar_lbfgs_free(oar_lbfgs *opt);

#ifdef __cplusplus
}
#endif
#endif

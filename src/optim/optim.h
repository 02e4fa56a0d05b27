/* Internal: the optimizer struct shared by the update rules (optim.c) and
 * state saving and loading (optim_state.c). */
#ifndef OARI_OPTIM_OPTIM_H
#define OARI_OPTIM_OPTIM_H

#include "../core/core.h"
#include <oar/optim.h>

typedef enum { KIND_SGD, KIND_ADAM, KIND_ADAMW, KIND_RMSPROP } optim_kind;

struct oar_optimizer {
    optim_kind kind;
    int n, cap;            /* cap: allocated length of the arrays (n, at least 1) */
    oar_tensor **params;   /* retained */
    /* state, retained, made at a parameter's first step:
     * SGD: s1 momentum_buffer; Adam(W): s1 exp_avg, s2 exp_avg_sq;
     * RMSProp: s1 momentum_buffer, s2 square_avg, s3 grad_avg */
    oar_tensor **s1, **s2, **s3;
    int64_t *pstep;        /* per-parameter step counts (Adam bias correction) */
    int64_t steps;
    double lr, momentum, dampening, wd, beta1, beta2, eps;
    double alpha;
    bool nesterov, centered;
};

#endif

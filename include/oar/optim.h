/* Optimizers (SGD with momentum/Nesterov/weight decay, Adam, AdamW),
 * gradient clipping by global norm, and learning-rate schedules. They
 * follow torch.optim's update rules exactly.
 *
 *     oar_tensor *params[64];
 *     int n = oar_module_parameters(net, params, 64);
 *     oar_optimizer *opt = oar_adam_new(n, params, &(oar_adam_options){.lr = 1e-3});
 *     ... oar_backward(loss, NULL); oar_optim_step(opt); oar_optim_zero_grad(opt);
 *     oar_optim_free(opt);
 *
 * An optimizer retains its parameters and its state tensors. A step runs
 * without recording gradients and writes the parameters in place; a
 * parameter without a gradient is skipped, as in PyTorch. */
#ifndef OAR_OPTIM_H
#define OAR_OPTIM_H

#include <oar/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct oar_optimizer oar_optimizer;

typedef struct oar_sgd_options {
    double lr;       /* required, > 0 */
    double momentum; /* 0: plain SGD */
    double dampening;
    double weight_decay; /* L2 penalty added to the gradient */
    bool nesterov;       /* needs momentum > 0 and dampening 0 */
} oar_sgd_options;

/* Zero-valued fields of beta1, beta2 and eps take PyTorch's defaults
 * (0.9, 0.999, 1e-8); lr 0 means 1e-3. */
typedef struct oar_adam_options {
    double lr;
    double beta1, beta2;
    double eps;
    double weight_decay; /* Adam: L2 added to the gradient; AdamW: decoupled */
} oar_adam_options;

/* New optimizers over n parameters (floating tensors; retained). NULL with
 * an error on bad options or parameters. */
OAR_API oar_optimizer *oar_sgd_new(int n, oar_tensor *const *params, const oar_sgd_options *o);
OAR_API oar_optimizer *oar_adam_new(int n, oar_tensor *const *params, const oar_adam_options *o);
/* AdamW: weight_decay is applied as p *= 1 - lr * weight_decay. Pass a
 * negative weight_decay to get PyTorch's default 1e-2 (0 means none). */
OAR_API oar_optimizer *oar_adamw_new(int n, oar_tensor *const *params, const oar_adam_options *o);
/* Releases the parameters and state. NULL is ignored. */
OAR_API void oar_optim_free(oar_optimizer *opt);

/* One update of every parameter that has a gradient. 0 on success. */
OAR_API int oar_optim_step(oar_optimizer *opt);
/* Drops every parameter's gradient (set to none). */
OAR_API void oar_optim_zero_grad(oar_optimizer *opt);
OAR_API double oar_optim_lr(const oar_optimizer *opt);
OAR_API int oar_optim_set_lr(oar_optimizer *opt, double lr);
/* Number of steps taken. */
OAR_API int64_t oar_optim_steps(const oar_optimizer *opt);

/* Scales the gradients of the n parameters in place so that their global
 * L2 norm is at most max_norm (torch.nn.utils.clip_grad_norm_). Writes the
 * norm before clipping to *total_norm if not NULL. 0 on success. */
OAR_API int oar_clip_grad_norm(int n, oar_tensor *const *params, double max_norm,
                               double *total_norm);

/* ---- learning-rate schedules -------------------------------------------------
 * A schedule sets the optimizer's lr from its base lr (the lr when the
 * schedule was made) and an epoch counter that oar_lr_scheduler_step
 * advances. The optimizer must outlive the schedule. */
typedef struct oar_lr_scheduler oar_lr_scheduler;
/* lr = base * gamma ^ floor(epoch / step_size) (torch StepLR). */
OAR_API oar_lr_scheduler *oar_lr_step_new(oar_optimizer *opt, int64_t step_size, double gamma);
/* lr = eta_min + (base - eta_min) (1 + cos(pi epoch / t_max)) / 2
 * (torch CosineAnnealingLR, closed form). */
OAR_API oar_lr_scheduler *oar_lr_cosine_new(oar_optimizer *opt, int64_t t_max, double eta_min);
/* Advances the epoch and updates the optimizer's lr. 0 on success. */
OAR_API int oar_lr_scheduler_step(oar_lr_scheduler *s);
OAR_API double oar_lr_scheduler_lr(const oar_lr_scheduler *s);
OAR_API void oar_lr_scheduler_free(oar_lr_scheduler *s);

#ifdef __cplusplus
}
#endif
#endif

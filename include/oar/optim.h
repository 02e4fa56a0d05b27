/* Optimizers (SGD with momentum/Nesterov/weight decay, Adam, AdamW,
 * RMSProp), their state saved and loaded,
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

/* Zero-valued lr, alpha and eps take PyTorch's defaults (1e-2, 0.99,
 * 1e-8). torch.optim.RMSprop: square_avg = alpha sa + (1 - alpha) g^2;
 * centered subtracts the square of the running mean of g; momentum > 0
 * keeps a buffer of g / (sqrt(.) + eps). */
typedef struct oar_rmsprop_options {
    double lr;
    double alpha;
    double eps;
    double weight_decay; /* L2 added to the gradient */
    double momentum;
    bool centered;
} oar_rmsprop_options;

/* New optimizers over n parameters (floating tensors; retained). NULL with
 * an error on bad options or parameters. */
OAR_API oar_optimizer *oar_sgd_new(int n, oar_tensor *const *params, const oar_sgd_options *o);
OAR_API oar_optimizer *oar_adam_new(int n, oar_tensor *const *params, const oar_adam_options *o);
/* AdamW: weight_decay is applied as p *= 1 - lr * weight_decay. Pass a
 * negative weight_decay to get PyTorch's default 1e-2 (0 means none). */
OAR_API oar_optimizer *oar_adamw_new(int n, oar_tensor *const *params, const oar_adam_options *o);
/* RMSProp; o may be NULL for all defaults. */
OAR_API oar_optimizer *oar_rmsprop_new(int n, oar_tensor *const *params,
                                       const oar_rmsprop_options *o);
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

/* Saves the optimizer's state to a safetensors file: tensors
 * "state.<parameter index>.<name>" (momentum_buffer; exp_avg, exp_avg_sq;
 * square_avg, grad_avg) and "state.<i>.step" (i64 scalar), metadata
 * oar.optimizer (sgd, adam, adamw, rmsprop), oar.steps, oar.lr (exact,
 * %.17g) and oar.num_params. Hyperparameters other than lr are the
 * constructor's and are not saved. 0 on success; written atomically. */
OAR_API int oar_optim_save(const oar_optimizer *opt, const char *path);
/* Loads a file written by oar_optim_save into an optimizer of the same
 * kind over parameters of the same count, dtypes and shapes (e.g. a fresh
 * one over a reloaded module): replaces its state, step counts and lr, so
 * that training continues bit for bit as if never interrupted. On any
 * mismatch the error lists them all and opt is unchanged; a missing,
 * truncated or corrupt file gives OAR_ERR_IO. */
OAR_API int oar_optim_load(oar_optimizer *opt, const char *path);

/* Scales the gradients of the n parameters in place so that their global
 * L2 norm is at most max_norm (torch.nn.utils.clip_grad_norm_). Writes the
 * norm before clipping to *total_norm if not NULL. 0 on success. */
OAR_API int oar_clip_grad_norm(int n, oar_tensor *const *params, double max_norm,
                               double *total_norm);

/* ---- learning-rate schedules -------------------------------------------------
 * A schedule sets the optimizer's lr from its base lr (the lr when the
 * schedule was made) and an epoch counter that oar_lr_scheduler_step
 * advances (an "epoch" is whatever the caller steps it by: epochs or
 * batches). Each is a closed form of that counter, and sets the lr to its
 * epoch-0 value when made, as torch's schedulers do. The optimizer must
 * outlive the schedule. Constructors return NULL with an error on a NULL
 * optimizer or bad arguments. */
typedef struct oar_lr_scheduler oar_lr_scheduler;
/* lr = base * gamma ^ floor(epoch / step_size) (torch StepLR). */
OAR_API oar_lr_scheduler *oar_lr_step_new(oar_optimizer *opt, int64_t step_size, double gamma);
/* lr = eta_min + (base - eta_min) (1 + cos(pi epoch / t_max)) / 2
 * (torch CosineAnnealingLR, closed form). */
OAR_API oar_lr_scheduler *oar_lr_cosine_new(oar_optimizer *opt, int64_t t_max, double eta_min);
/* lr = base * gamma ^ (number of milestones <= epoch) (torch MultiStepLR);
 * milestones strictly increasing, >= 1 (copied). */
OAR_API oar_lr_scheduler *oar_lr_multistep_new(oar_optimizer *opt, int n_milestones,
                                               const int64_t *milestones, double gamma);
/* Linear warm-up: lr = base * (start + (end - start) * min(epoch, total_iters)
 * / total_iters) (torch LinearLR); start_factor in (0, 1], end_factor in
 * [0, 1]. */
OAR_API oar_lr_scheduler *oar_lr_linear_new(oar_optimizer *opt, double start_factor,
                                            double end_factor, int64_t total_iters);
/* One-cycle (torch OneCycleLR, two phases, cosine annealing; momentum is
 * not cycled): from max_lr / div_factor up to max_lr over the first
 * pct_start * total_steps - 1 steps, then down to max_lr / div_factor /
 * final_div_factor at step total_steps - 1. Zero div_factor and
 * final_div_factor take torch's 25 and 1e4. The optimizer's own lr is
 * ignored. Stepping past total_steps - 1 is an error. */
OAR_API oar_lr_scheduler *oar_lr_one_cycle_new(oar_optimizer *opt, double max_lr,
                                               int64_t total_steps, double pct_start,
                                               double div_factor, double final_div_factor);
/* Advances the epoch and updates the optimizer's lr. 0 on success. */
OAR_API int oar_lr_scheduler_step(oar_lr_scheduler *s);
OAR_API double oar_lr_scheduler_lr(const oar_lr_scheduler *s);
/* The epoch counter (-1 for NULL); setting it sets the lr to that epoch's
 * value, which restores a schedule after a resume. 0 on success. */
OAR_API int64_t oar_lr_scheduler_epoch(const oar_lr_scheduler *s);
OAR_API int oar_lr_scheduler_set_epoch(oar_lr_scheduler *s, int64_t epoch);
OAR_API void oar_lr_scheduler_free(oar_lr_scheduler *s);

#ifdef __cplusplus
}
#endif
#endif

/* A training loop in one call, like paddle.Model.fit or Keras's fit:
 * epochs of training with an optimizer and an optional schedule, an
 * evaluation after each epoch, metrics (loss, accuracy, top-k accuracy),
 * progress (a bar on a terminal, plain log lines otherwise), early
 * stopping on a monitored metric, and a JSON-lines log for plotting.
 *
 *     oar_fit_result r;
 *     int st = oar_fit(net, opt, train_loader, &(oar_fit_options){
 *         .epochs = 10, .eval_loader = test_loader, .accuracy = true,
 *         .monitor = "val_loss", .patience = 3, .log_path = "train.jsonl"}, &r);
 *
 * Each log line is one JSON object per epoch: {"epoch": 1, "loss": ...,
 * "acc": ..., "val_loss": ..., "val_acc": ..., "val_top5": ..., "lr": ...,
 * "samples_per_s": ..., "time_s": ..., "best": true, "stop": false};
 * metrics that do not apply are left out.
 *
 * With tb_dir, TensorBoard event files too (include/oar/summary.h): after
 * every training batch "batch/loss" and "batch/lr" (the rate that step
 * used) at step = the number of optimizer steps so far (1, 2, ...); after
 * every epoch, at step = the epoch (1-based), "epoch/loss", "epoch/acc",
 * "epoch/top<k>", "epoch/val_loss", "epoch/val_acc", "epoch/val_top<k>"
 * (those that apply, as in the JSON log), "epoch/lr" (after the epoch's
 * schedule step) and "epoch/samples_per_s". View with
 * `tensorboard --logdir <tb_dir>`. Unless progress is OAR_PROGRESS_NONE,
 * fit prints the files it logs to on one line of `out` first:
 *     fit: logging epochs to train.jsonl, TensorBoard events to runs/events.out.tfevents.<time>.<host>.<pid> */
#ifndef OAR_FIT_H
#define OAR_FIT_H

#include <oar/amp.h>
#include <oar/data.h>
#include <oar/nn.h>
#include <oar/optim.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A loss: a scalar tensor from the model's output and the batch's target
 * (results owned as an op's are), or NULL with an error set. */
typedef oar_tensor *(*oar_loss_fn)(void *ctx, oar_tensor *output, oar_tensor *target);

typedef enum oar_progress {
    OAR_PROGRESS_AUTO = 0,  /* a bar if `out` is a terminal, else lines */
    OAR_PROGRESS_BAR = 1,   /* a bar redrawn with \r */
    OAR_PROGRESS_LINES = 2, /* a plain line every log_every batches and per epoch */
    OAR_PROGRESS_NONE = 3,
} oar_progress;

typedef struct oar_fit_options {
    int64_t epochs; /* required, >= 1 */
    /* optional: NULL means cross entropy with mean reduction (the output
     * [N, C] logits, the target class indices) */
    oar_loss_fn loss;
    void *loss_ctx;
    /* optional: stepped after each epoch, or each batch if per_batch */
    oar_lr_scheduler *scheduler;
    bool scheduler_per_batch;
    double clip_grad_norm; /* > 0: clip the gradients' global norm */
    /* optional: evaluated (eval mode, no grad) after every epoch */
    oar_loader *eval_loader;
    /* classification metrics: output [N, C], target class indices [N] */
    bool accuracy;
    int topk; /* > 1: also top-k accuracy, logged as "top<k>" */
    /* early stopping: the metric watched ("loss", "acc", "top<k>", or
     * with "val_" for the evaluation; NULL: "val_loss" with an eval loader,
     * else "loss"), lower is better for losses, higher for accuracies; an
     * epoch improves when it beats the best by more than min_delta; after
     * patience epochs without improvement training stops (0: never). */
    const char *monitor;
    int64_t patience;
    double min_delta;
    /* optional: a JSON-lines file, one object per epoch (truncated first) */
    const char *log_path;
    /* progress: to out (NULL: stdout) */
    FILE *out;
    oar_progress progress;
    int64_t log_every; /* LINES: batches between lines; 0: about 10 per epoch */
    /* optional: a folder (made if missing) for a new TensorBoard event file
     * <tb_dir>/events.out.tfevents.<time>.<host>.<pid> (scalars above) */
    const char *tb_dir;
    /* AMP (include/oar/amp.h): OAR_BF16 or OAR_F16 runs every forward pass
     * and loss (training and evaluation) inside an autocast scope of that
     * dtype; 0 (the default) or OAR_F32: off. */
    oar_dtype autocast_dtype;
    /* optional: dynamic loss scaling for training steps (f16): the loss is
     * scaled before backward, the gradients unscaled before clipping, a
     * step with inf/nan gradients skipped, and the scale updated after
     * every batch. Borrowed. */
    oar_grad_scaler *scaler;
} oar_fit_options;

/* What oar_fit did; the metrics are the last epoch's (NAN when absent). */
typedef struct oar_fit_result {
    int64_t epochs_run;
    bool stopped_early;
    int64_t best_epoch; /* 1-based epoch of the best monitored value */
    double best;        /* that value */
    double loss, acc, topk;
    double val_loss, val_acc, val_topk;
} oar_fit_result;

/* Trains model with opt on the batches of train for o->epochs epochs (or
 * until early stopping). model, opt, train and the loaders are borrowed;
 * the model is left in training mode. result may be NULL. 0 on success;
 * on failure (bad options, a loss or op error naming the epoch and batch,
 * an unwritable log or tb_dir) a non-zero status with the message in
 * oar_last_error(); the model holds whatever the steps before did. */
OAR_API int oar_fit(oar_module *model, oar_optimizer *opt, oar_loader *train,
                    const oar_fit_options *o, oar_fit_result *result);

/* One pass of the model over loader in eval mode without gradients: the
 * mean loss (o's loss function; o NULL: cross entropy) and, if o asks for
 * them, accuracy and top-k accuracy, written to the val_* fields of
 * *result (the others NAN). Restores the model's mode. 0 on success. */
OAR_API int oar_evaluate(oar_module *model, oar_loader *loader, const oar_fit_options *o,
                         oar_fit_result *result);

#ifdef __cplusplus
}
#endif
#endif

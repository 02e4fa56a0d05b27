/* oar_fit and oar_evaluate: the training loop with metrics, progress,
 * early stopping, a JSON-lines log and TensorBoard event files (through
 * src/io/summary.c). Written with the public API only. */
#include "../core/core.h"

#include <errno.h>
#include <math.h>
#include <oar/autograd.h>
#include <oar/fit.h>
#include <oar/ops.h>
#include <oar/summary.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Running sums over an epoch. */
typedef struct sums {
    double loss, correct, topk;
    int64_t samples;
} sums;

static oar_tensor *default_loss(oar_tensor *out, oar_tensor *y) {
    return oar_cross_entropy(out, y, NULL, -100, 0, OAR_REDUCTION_MEAN);
}

/* Adds the batch's correct and top-k counts (no grad). */
static int count_correct(const oar_fit_options *o, oar_tensor *out, oar_tensor *y, sums *s) {
    if (!o->accuracy && o->topk <= 1) return 0;
    int64_t ndim = oar_tensor_ndim(out);
    if (ndim != 2 || oar_tensor_ndim(y) != 1 || oar_tensor_shape(y)[0] != oar_tensor_shape(out)[0] ||
        oar_dtype_is_float(oar_tensor_dtype(y)) || oar_dtype_is_complex(oar_tensor_dtype(y))) {
        char a[200], b[200];
        return oari_error(OAR_ERR_INVALID,
                          "fit: accuracy needs outputs [N, C] and integer class targets [N], "
                          "got %s and %s %s",
                          oari_shape_str(a, out->ndim, out->shape), oar_dtype_name(y->dtype),
                          oari_shape_str(b, y->ndim, y->shape));
    }
    oar_tensor *yi = oar_cast(y, OAR_I64);
    if (o->accuracy) {
        double c = oar_tensor_item(oar_sum(oar_eq(oar_argmax(out, 1, false), yi), 0, NULL, false));
        if (isnan(c)) return OAR_ERR_INVALID;
        s->correct += c;
    }
    if (o->topk > 1) {
        int64_t k = o->topk < oar_tensor_shape(out)[1] ? o->topk : oar_tensor_shape(out)[1];
        oar_tensor *idx = NULL;
        oar_topk(out, k, 1, true, false, &idx);
        oar_tensor *hit = oar_any(oar_eq(idx, oar_unsqueeze(yi, 1)), 1, (int64_t[]){1}, false);
        double c = oar_tensor_item(oar_sum(hit, 0, NULL, false));
        if (isnan(c)) return OAR_ERR_INVALID;
        s->topk += c;
    }
    return 0;
}

static void fmt_time(char *buf, size_t n, double s) {
    if (!(s >= 0) || s > 1e7) {
        snprintf(buf, n, "?");
        return;
    }
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else
        snprintf(buf, n, "%02ld:%02ld", t / 60, t % 60);
}

static void progress(const oar_fit_options *o, FILE *out, oar_progress mode, int64_t epoch,
                     int64_t batch, int64_t nbatches, const sums *s, double elapsed) {
    double rate = elapsed > 0 ? (double)s->samples / elapsed : 0;
    char eta[32];
    fmt_time(eta, sizeof eta, nbatches > 0 ? elapsed / (double)batch * (double)(nbatches - batch) : -1);
    char acc[48] = "";
    if (o->accuracy) snprintf(acc, sizeof acc, " acc %.4f", s->correct / (double)s->samples);
    if (mode == OAR_PROGRESS_BAR) {
        char bar[31];
        int fill = nbatches > 0 ? (int)(30 * batch / nbatches) : 0;
        for (int i = 0; i < 30; i++)
            bar[i] = i < fill ? '=' : i == fill ? '>' : '.';
        bar[30] = 0;
        fprintf(out, "\repoch %lld/%lld [%s] %lld/%lld loss %.4f%s %.0f samples/s ETA %s ",
                (long long)epoch, (long long)o->epochs, bar, (long long)batch,
                (long long)nbatches, s->loss / (double)s->samples, acc, rate, eta);
    } else {
        fprintf(out, "epoch %lld/%lld batch %lld/%lld loss %.4f%s %.0f samples/s ETA %s\n",
                (long long)epoch, (long long)o->epochs, (long long)batch, (long long)nbatches,
                s->loss / (double)s->samples, acc, rate, eta);
    }
    fflush(out);
}

/* Writes one scalar to the TensorBoard file (tb NULL: nothing). */
static int tb_scalar(oar_summary_writer *tb, const char *tag, int64_t step, double v) {
    return tb ? oar_summary_scalar(tb, tag, step, v) : 0;
}

/* Prefixes the pending message with "fit: <what>: "; returns st. */
static int fit_context(int st, const char *what) {
    char msg[700];
    snprintf(msg, sizeof msg, "%s", oar_last_error());
    return oari_error(st, "fit: %s: %s", what, msg);
}

/* One pass over a loader: training (with steps) or evaluation. tb (may be
 * NULL) gets each training batch's scalars at *gstep, counted here. */
static int run_epoch(oar_module *model, oar_optimizer *opt, oar_loader *ld,
                     const oar_fit_options *o, bool train, int64_t epoch, FILE *out,
                     oar_progress mode, sums *s, oar_summary_writer *tb, int64_t *gstep) {
    memset(s, 0, sizeof *s);
    int64_t nb = oar_loader_num_batches(ld), every = o->log_every;
    if (every <= 0) every = nb > 10 ? (nb + 9) / 10 : 1;
    oar_tensor *ps[1024];
    int np = 0;
    if (train && o->clip_grad_norm > 0) {
        np = oar_module_parameters(model, ps, 1024);
        if (np > 1024)
            return oari_error(OAR_ERR_INVALID,
                              "fit: clip_grad_norm supports up to 1024 parameters, the model has %d",
                              np);
    }
    double t0 = now_s();
    int64_t batch = 0;
    int st = 0, r;
    oar_tensor *x, *y;
    if (!train) oar_no_grad_push();
    oar_pool *pool = oar_pool_push();
    while ((r = oar_loader_next(ld, &x, &y)) == 1) {
        batch++;
        oar_pool *bp = oar_pool_push();
        bool amp = (o->autocast_dtype == OAR_BF16 || o->autocast_dtype == OAR_F16) &&
                   !oar_autocast_push(o->autocast_dtype);
        oar_tensor *outp = oar_module_forward(model, x);
        oar_tensor *loss = outp ? (o->loss ? o->loss(o->loss_ctx, outp, y) : default_loss(outp, y))
                                : NULL;
        if (amp) oar_autocast_pop();
        double lv = loss ? oar_tensor_item(loss) : NAN;
        double lr = train ? oar_optim_lr(opt) : NAN; /* (the rate this step uses) */
        if (!loss || oar_tensor_numel(loss) != 1) {
            if (loss)
                oari_error(OAR_ERR_INVALID, "fit: the loss must be a scalar, got %lld elements",
                           (long long)oar_tensor_numel(loss));
            st = OAR_ERR_INVALID;
        }
        if (!st && train) {
            if (o->scaler) { /* scaled backward; unscaled before clipping; skips on inf/nan */
                oar_tensor *scaled = oar_grad_scaler_scale(o->scaler, loss);
                st = scaled ? oar_backward(scaled, NULL) : oari_fail_status();
                if (!st && np) st = oar_grad_scaler_unscale(o->scaler, opt);
                if (!st && np && !oar_grad_scaler_found_inf(o->scaler))
                    st = oar_clip_grad_norm(np, ps, o->clip_grad_norm, NULL);
                if (!st) st = oar_grad_scaler_step(o->scaler, opt);
                if (!st) st = oar_grad_scaler_update(o->scaler);
            } else {
                st = oar_backward(loss, NULL);
                if (!st && np) st = oar_clip_grad_norm(np, ps, o->clip_grad_norm, NULL);
                if (!st) st = oar_optim_step(opt);
            }
            oar_optim_zero_grad(opt);
            if (!st && o->scheduler && o->scheduler_per_batch)
                st = oar_lr_scheduler_step(o->scheduler);
        }
        if (!st) {
            int64_t b = oar_tensor_shape(x)[0];
            s->loss += lv * (double)b;
            s->samples += b;
            oar_no_grad_push();
            st = count_correct(o, outp, y, s);
            oar_no_grad_pop();
        }
        if (!st && train && tb) {
            ++*gstep;
            st = tb_scalar(tb, "batch/loss", *gstep, lv);
            if (!st) st = tb_scalar(tb, "batch/lr", *gstep, lr);
        }
        oar_pool_pop(bp);
        if (st) {
            char msg[700];
            snprintf(msg, sizeof msg, "%s", oar_last_error());
            st = oari_error(st, "fit: epoch %lld, %s batch %lld: %s", (long long)epoch,
                            train ? "training" : "evaluation", (long long)batch, msg);
            break;
        }
        if (train && mode == OAR_PROGRESS_BAR)
            progress(o, out, mode, epoch, batch, nb, s, now_s() - t0);
        else if (train && mode == OAR_PROGRESS_LINES && (batch % every == 0 || batch == nb))
            progress(o, out, mode, epoch, batch, nb, s, now_s() - t0);
    }
    oar_pool_pop(pool);
    if (!train) oar_no_grad_pop();
    if (!st && r < 0) st = r;
    if (!st && s->samples == 0)
        st = oari_error(OAR_ERR_INVALID, "fit: the %s loader gave no batches in epoch %lld",
                        train ? "training" : "evaluation", (long long)epoch);
    return st;
}

static double metric_of(const sums *s, int which) {
    if (!s->samples) return NAN;
    return which == 0 ? s->loss / (double)s->samples
           : which == 1 ? s->correct / (double)s->samples
                        : s->topk / (double)s->samples;
}

/* Parses a monitor name: *val, *which (0 loss, 1 acc, 2 top-k). */
static int parse_monitor(const oar_fit_options *o, const char *name, bool *val, int *which) {
    const char *p = name;
    *val = !strncmp(p, "val_", 4);
    if (*val) p += 4;
    char topk[32];
    snprintf(topk, sizeof topk, "top%d", o->topk);
    if (!strcmp(p, "loss"))
        *which = 0;
    else if (!strcmp(p, "acc") && o->accuracy)
        *which = 1;
    else if (o->topk > 1 && !strcmp(p, topk))
        *which = 2;
    else
        return oari_error(OAR_ERR_INVALID,
                          "fit: cannot monitor \"%s\": use loss%s%s, with val_ for the "
                          "evaluation",
                          name, o->accuracy ? ", acc" : "", o->topk > 1 ? ", top<k>" : "");
    if (*val && !o->eval_loader)
        return oari_error(OAR_ERR_INVALID, "fit: monitor \"%s\" needs an eval_loader", name);
    return 0;
}

static void json_num(FILE *f, const char *key, double v) {
    if (isnan(v)) return;
    if (isinf(v))
        fprintf(f, ", \"%s\": %s", key, v > 0 ? "1e999" : "-1e999");
    else
        fprintf(f, ", \"%s\": %.17g", key, v);
}

int oar_evaluate(oar_module *model, oar_loader *loader, const oar_fit_options *o,
                 oar_fit_result *result) {
    if (!model || !loader || !result)
        return oari_error(OAR_ERR_INVALID, "evaluate: model, loader or result is NULL");
    oar_fit_options d = o ? *o : (oar_fit_options){0};
    d.epochs = 1;
    bool was = oar_module_is_training(model);
    oar_module_train(model, false);
    sums s;
    int st = run_epoch(model, NULL, loader, &d, false, 1, NULL, OAR_PROGRESS_NONE, &s, NULL, NULL);
    oar_module_train(model, was);
    *result = (oar_fit_result){.best = NAN, .loss = NAN, .acc = NAN, .topk = NAN,
                               .val_loss = NAN, .val_acc = NAN, .val_topk = NAN};
    if (st) return st;
    result->val_loss = metric_of(&s, 0);
    if (d.accuracy) result->val_acc = metric_of(&s, 1);
    if (d.topk > 1) result->val_topk = metric_of(&s, 2);
    return 0;
}

int oar_fit(oar_module *model, oar_optimizer *opt, oar_loader *train, const oar_fit_options *o,
            oar_fit_result *result) {
    if (!model || !opt || !train || !o)
        return oari_error(OAR_ERR_INVALID, "fit: model, optimizer, loader or options is NULL");
    if (o->epochs < 1)
        return oari_error(OAR_ERR_INVALID, "fit: epochs %lld must be >= 1", (long long)o->epochs);
    if (o->patience < 0 || !(o->min_delta >= 0) || o->topk < 0 || o->topk > 1000 ||
        o->clip_grad_norm < 0 || (unsigned)o->progress > OAR_PROGRESS_NONE)
        return oari_error(OAR_ERR_INVALID,
                          "fit: invalid options (patience %lld, min_delta %g, topk %d, "
                          "clip_grad_norm %g, progress %d): none may be negative",
                          (long long)o->patience, o->min_delta, o->topk, o->clip_grad_norm,
                          (int)o->progress);
    if (o->autocast_dtype != 0 && o->autocast_dtype != OAR_F32 && o->autocast_dtype != OAR_BF16 &&
        o->autocast_dtype != OAR_F16)
        return oari_error(OAR_ERR_INVALID, "fit: autocast_dtype %d is not bf16, f16, f32 or 0 (off)",
                          (int)o->autocast_dtype);
    const char *monitor = o->monitor ? o->monitor : o->eval_loader ? "val_loss" : "loss";
    bool mval = false;
    int mwhich = 0;
    int st = parse_monitor(o, monitor, &mval, &mwhich);
    if (st) return st;
    FILE *out = o->out ? o->out : stdout;
    oar_progress mode = o->progress;
    if (mode == OAR_PROGRESS_AUTO) mode = isatty(fileno(out)) ? OAR_PROGRESS_BAR : OAR_PROGRESS_LINES;
    FILE *log = NULL;
    if (o->log_path && !(log = fopen(o->log_path, "w")))
        return oari_error(OAR_ERR_IO, "fit: cannot create the log %s: %s", o->log_path,
                          strerror(errno));
    oar_summary_writer *tb = NULL;
    if (o->tb_dir && !(tb = oar_summary_open(o->tb_dir))) {
        st = fit_context(oari_fail_status(), "TensorBoard");
        if (log) fclose(log);
        return st;
    }
    if (mode != OAR_PROGRESS_NONE && (log || tb)) {
        fprintf(out, "fit: logging");
        if (log) fprintf(out, " epochs to %s%s", o->log_path, tb ? "," : "");
        if (tb) fprintf(out, " TensorBoard events to %s", oar_summary_path(tb));
        fputc('\n', out);
        fflush(out);
    }
    int64_t gstep = 0;
    oar_fit_result res = {.best = NAN, .loss = NAN, .acc = NAN, .topk = NAN, .val_loss = NAN,
                          .val_acc = NAN, .val_topk = NAN};
    bool lower = mwhich == 0;
    int64_t since_best = 0;
    char topname[40], vtopname[44];
    snprintf(topname, sizeof topname, "top%d", o->topk);
    snprintf(vtopname, sizeof vtopname, "val_top%d", o->topk);
    for (int64_t e = 1; e <= o->epochs && !st; e++) {
        double t0 = now_s();
        oar_module_train(model, true);
        sums ts, vs = {0};
        st = run_epoch(model, opt, train, o, true, e, out, mode, &ts, tb, &gstep);
        if (mode == OAR_PROGRESS_BAR) fputc('\n', out);
        double train_time = now_s() - t0;
        if (!st && o->scheduler && !o->scheduler_per_batch) st = oar_lr_scheduler_step(o->scheduler);
        if (!st && o->eval_loader) {
            oar_module_train(model, false);
            st = run_epoch(model, NULL, o->eval_loader, o, false, e, out, mode, &vs, NULL, NULL);
            oar_module_train(model, true);
        }
        if (st) break;
        res.epochs_run = e;
        res.loss = metric_of(&ts, 0);
        res.acc = o->accuracy ? metric_of(&ts, 1) : NAN;
        res.topk = o->topk > 1 ? metric_of(&ts, 2) : NAN;
        res.val_loss = o->eval_loader ? metric_of(&vs, 0) : NAN;
        res.val_acc = o->eval_loader && o->accuracy ? metric_of(&vs, 1) : NAN;
        res.val_topk = o->eval_loader && o->topk > 1 ? metric_of(&vs, 2) : NAN;
        double m = metric_of(mval ? &vs : &ts, mwhich);
        bool improved = isnan(res.best) || (lower ? m < res.best - o->min_delta
                                                  : m > res.best + o->min_delta);
        if (improved) {
            res.best = m;
            res.best_epoch = e;
            since_best = 0;
        } else {
            since_best++;
        }
        bool stop = o->patience > 0 && since_best >= o->patience && e < o->epochs;
        double rate = train_time > 0 ? (double)ts.samples / train_time : 0;
        if (mode != OAR_PROGRESS_NONE) {
            fprintf(out, "epoch %lld/%lld: loss %.4f", (long long)e, (long long)o->epochs, res.loss);
            if (o->accuracy) fprintf(out, " acc %.4f", res.acc);
            if (o->topk > 1) fprintf(out, " %s %.4f", topname, res.topk);
            if (o->eval_loader) fprintf(out, " val_loss %.4f", res.val_loss);
            if (o->eval_loader && o->accuracy) fprintf(out, " val_acc %.4f", res.val_acc);
            if (o->eval_loader && o->topk > 1) fprintf(out, " %s %.4f", vtopname, res.val_topk);
            fprintf(out, " lr %.3g (%.1f s, %.0f samples/s)%s\n", oar_optim_lr(opt), train_time,
                    rate, stop ? " -- early stop" : "");
            fflush(out);
        }
        if (log) {
            fprintf(log, "{\"epoch\": %lld", (long long)e);
            json_num(log, "loss", res.loss);
            json_num(log, "acc", res.acc);
            json_num(log, topname, res.topk);
            json_num(log, "val_loss", res.val_loss);
            json_num(log, "val_acc", res.val_acc);
            json_num(log, vtopname, res.val_topk);
            json_num(log, "lr", oar_optim_lr(opt));
            json_num(log, "samples_per_s", rate);
            json_num(log, "time_s", now_s() - t0);
            fprintf(log, ", \"best\": %s, \"stop\": %s}\n", improved ? "true" : "false",
                    stop ? "true" : "false");
            if (fflush(log) != 0)
                st = oari_error(OAR_ERR_IO, "fit: writing the log %s failed: %s", o->log_path,
                                strerror(errno));
        }
        if (tb) {
            char tag[64];
            bool val = o->eval_loader != NULL, acc = o->accuracy, top = o->topk > 1;
            const struct {
                const char *name;
                double v;
                bool on;
            } ep[] = {{"loss", res.loss, true},          {"acc", res.acc, acc},
                      {topname, res.topk, top},          {"val_loss", res.val_loss, val},
                      {"val_acc", res.val_acc, val && acc}, {vtopname, res.val_topk, val && top},
                      {"lr", oar_optim_lr(opt), true},   {"samples_per_s", rate, true}};
            for (size_t k = 0; k < sizeof ep / sizeof *ep && !st; k++) {
                if (!ep[k].on) continue;
                snprintf(tag, sizeof tag, "epoch/%s", ep[k].name);
                st = tb_scalar(tb, tag, e, ep[k].v);
            }
            if (!st) st = oar_summary_flush(tb);
            if (st) st = fit_context(st, "TensorBoard");
        }
        if (stop) {
            res.stopped_early = true;
            break;
        }
    }
    if (log && fclose(log) != 0 && !st)
        st = oari_error(OAR_ERR_IO, "fit: closing the log %s failed", o->log_path);
    if (tb) {
        int cst = oar_summary_close(tb);
        if (cst && !st) st = fit_context(cst, "TensorBoard");
    }
    oar_module_train(model, true);
    if (result) *result = res;
    return st;
}

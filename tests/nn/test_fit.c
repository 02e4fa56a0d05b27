/* oar_fit on a synthetic 4-class problem: it reaches high accuracy, its
 * JSON-lines log parses (cJSON) with one object per epoch, plain progress
 * lines and the bar carry loss, samples/s and ETA, early stopping triggers
 * after `patience` epochs without improvement, a schedule is stepped, a
 * custom loss is used, and bad options, a failing loss, classification
 * metrics on regression targets and an unwritable log all fail cleanly. */
#include "test.h"

#include <cjson/cJSON.h>
#include <unistd.h>

/* n samples of 4 Gaussian blobs in 8 dims (centres +-2 on two axes). */
static oar_dataset *blobs(int64_t n, uint64_t seed) {
    oar_manual_seed(seed);
    oar_pool *p = oar_pool_push();
    oar_tensor *y = oar_remainder(oar_arange(0, (double)n, 1, OAR_I64), oar_scalar(4));
    float centres[4][8] = {{2, 2}, {-2, 2}, {2, -2}, {-2, -2}};
    oar_tensor *c = oar_tensor_from_data(centres, OAR_F32, 2, (int64_t[]){4, 8});
    oar_tensor *x = oar_add(oar_index_select(c, 0, y),
                            oar_mul_scalar(oar_randn(OAR_F32, 2, (int64_t[]){n, 8}), 0.7));
    oar_dataset *ds = oar_dataset_new(x, y);
    oar_pool_pop(p);
    return ds;
}

static oar_module *mlp(void) {
    oar_manual_seed(1);
    return oar_sequential_new(3, (oar_module *[]){oar_linear_new(8, 32, true), oar_relu_new(),
                                                  oar_linear_new(32, 4, true)});
}

static oar_optimizer *adam(oar_module *m, double lr) {
    oar_tensor *ps[8];
    int n = oar_module_parameters(m, ps, 8);
    return oar_adam_new(n, ps, &(oar_adam_options){.lr = lr});
}

static char *slurp(FILE *f) {
    fflush(f);
    long n = ftell(f);
    char *b = calloc(1, (size_t)n + 1);
    rewind(f);
    if (fread(b, 1, (size_t)n, f) != (size_t)n) b[0] = 0;
    return b;
}

/* The log's objects (up to max), parsed; returns the line count, -1 if a
 * line does not parse. */
static int read_log(const char *path, cJSON **objs, int max) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[2048];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        cJSON *j = cJSON_Parse(line);
        if (!cJSON_IsObject(j)) {
            cJSON_Delete(j);
            fclose(f);
            return -1;
        }
        if (n < max) objs[n] = j;
        else cJSON_Delete(j);
        n++;
    }
    fclose(f);
    return n;
}

static double num(cJSON *o, const char *key) {
    cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static char logpath[64];
static int loss_calls;

static oar_tensor *smooth_ce(void *ctx, oar_tensor *out, oar_tensor *y) {
    loss_calls++;
    return oar_cross_entropy(out, y, NULL, -100, *(double *)ctx, OAR_REDUCTION_MEAN);
}

static oar_tensor *broken_loss(void *ctx, oar_tensor *out, oar_tensor *y) {
    (void)ctx, (void)y;
    return oar_sum(out, 1, (int64_t[]){5}, false); /* dim 5 does not exist */
}

static oar_tensor *mse_loss(void *ctx, oar_tensor *out, oar_tensor *y) {
    (void)ctx;
    return oar_mse_loss(out, y, OAR_REDUCTION_MEAN);
}

static void test_fit_accuracy_and_log(void) {
    oar_dataset *tr = blobs(512, 10), *va = blobs(256, 11);
    oar_loader *tl = oar_loader_new(tr, &(oar_loader_options){.batch_size = 32, .shuffle = true,
                                                             .seed = 3, .prefetch = true});
    oar_loader *vl = oar_loader_new(va, &(oar_loader_options){.batch_size = 64});
    oar_module *net = mlp();
    oar_optimizer *opt = adam(net, 0.01);
    oar_lr_scheduler *sched = oar_lr_step_new(opt, 3, 0.5);
    FILE *out = tmpfile();
    double smoothing = 0.05;
    oar_fit_result r;
    int st = oar_fit(net, opt, tl,
                     &(oar_fit_options){.epochs = 6, .loss = smooth_ce, .loss_ctx = &smoothing,
                                        .scheduler = sched, .eval_loader = vl, .accuracy = true,
                                        .topk = 2, .monitor = "val_acc", .log_path = logpath,
                                        .out = out, .clip_grad_norm = 5},
                     &r);
    CHECK(st == 0);
    CHECK(r.epochs_run == 6 && !r.stopped_early);
    CHECK(r.val_acc > 0.95 && r.acc > 0.9);
    CHECK(r.val_topk >= r.val_acc && r.val_topk <= 1);
    CHECK(r.loss < 0.5 && r.val_loss < 0.5);
    CHECK(r.best >= r.val_acc && r.best_epoch >= 1 && r.best_epoch <= 6);
    CHECK(loss_calls == 6 * (16 + 4)); /* training and evaluation batches */
    CHECK_NEAR(oar_optim_lr(opt), 0.01 * 0.25, 1e-15); /* stepped per epoch: 6 / 3 halvings */

    /* the log: 6 objects with increasing epochs and the expected keys */
    cJSON *objs[16];
    int n = read_log(logpath, objs, 16);
    CHECK(n == 6);
    for (int i = 0; i < n && i < 16; i++) {
        CHECK(num(objs[i], "epoch") == i + 1);
        CHECK(num(objs[i], "loss") > 0 && num(objs[i], "acc") > 0 && num(objs[i], "val_top2") > 0);
        CHECK(num(objs[i], "samples_per_s") > 0 && num(objs[i], "lr") > 0);
        CHECK(cJSON_IsBool(cJSON_GetObjectItemCaseSensitive(objs[i], "stop")));
        if (i == n - 1) CHECK_NEAR(num(objs[i], "val_acc"), r.val_acc, 1e-12);
        cJSON_Delete(objs[i]);
    }
    /* plain progress lines (out is not a terminal) */
    char *text = slurp(out);
    CHECK(strstr(text, "epoch 1/6 batch 16/16 loss ") && strstr(text, "samples/s ETA 00:00"));
    CHECK(strstr(text, "epoch 6/6: loss ") && strstr(text, " val_acc 0.9"));
    CHECK(!strchr(text, '\r'));
    free(text);
    fclose(out);

    /* oar_evaluate gives the last epoch's evaluation again */
    oar_fit_result ev;
    CHECK(oar_evaluate(net, vl, &(oar_fit_options){.accuracy = true, .loss = smooth_ce,
                                                   .loss_ctx = &smoothing}, &ev) == 0);
    CHECK_NEAR(ev.val_acc, r.val_acc, 0);
    CHECK_NEAR(ev.val_loss, r.val_loss, 1e-6);
    CHECK(isnan(ev.loss) && isnan(ev.val_topk));
    CHECK(oar_module_is_training(net));

    /* a progress bar when asked (as on a terminal) */
    out = tmpfile();
    CHECK(oar_fit(net, opt, tl, &(oar_fit_options){.epochs = 1, .accuracy = true, .out = out,
                                                   .progress = OAR_PROGRESS_BAR}, NULL) == 0);
    text = slurp(out);
    CHECK(strstr(text, "\repoch 1/1 [") && strstr(text, "] 16/16 loss ") && strstr(text, " acc "));
    CHECK(strstr(text, "==============================]"));
    free(text);
    fclose(out);

    oar_lr_scheduler_free(sched);
    oar_optim_free(opt);
    oar_module_free(net);
    oar_loader_free(tl);
    oar_loader_free(vl);
    oar_dataset_free(tr);
    oar_dataset_free(va);
}

static void test_early_stopping(void) {
    oar_dataset *tr = blobs(128, 20), *va = blobs(64, 21);
    oar_loader *tl = oar_loader_new(tr, &(oar_loader_options){.batch_size = 32});
    oar_loader *vl = oar_loader_new(va, &(oar_loader_options){.batch_size = 32});
    oar_module *net = mlp();
    oar_optimizer *opt = adam(net, 0.01);
    oar_fit_result r;
    /* nothing improves by 100: the best stays at epoch 1, stop after 1 + 2 */
    CHECK(oar_fit(net, opt, tl, &(oar_fit_options){.epochs = 20, .eval_loader = vl, .patience = 2,
                                                   .min_delta = 100, .log_path = logpath,
                                                   .progress = OAR_PROGRESS_NONE},
                  &r) == 0);
    CHECK(r.stopped_early && r.epochs_run == 3 && r.best_epoch == 1);
    cJSON *objs[32];
    int n = read_log(logpath, objs, 32);
    CHECK(n == 3);
    for (int i = 0; i < n && i < 32; i++) {
        CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(objs[i], "best")) == (i == 0));
        CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(objs[i], "stop")) == (i == 2));
        CHECK(cJSON_GetObjectItemCaseSensitive(objs[i], "acc") == NULL); /* not asked for */
        cJSON_Delete(objs[i]);
    }
    /* with min_delta 0 on the training loss, steady progress never stops it */
    CHECK(oar_fit(net, opt, tl, &(oar_fit_options){.epochs = 4, .monitor = "loss", .patience = 1,
                                                   .progress = OAR_PROGRESS_NONE},
                  &r) == 0);
    CHECK(!r.stopped_early && r.epochs_run == 4);

    /* failures */
    oar_fit_options ok = {.epochs = 1, .progress = OAR_PROGRESS_NONE};
    CHECK_STATUS_FAILS(oar_fit(NULL, opt, tl, &ok, NULL), "fit: model, optimizer, loader");
    CHECK_STATUS_FAILS(oar_fit(net, opt, tl, NULL, NULL), "options is NULL");
    CHECK_STATUS_FAILS(oar_fit(net, opt, tl, &(oar_fit_options){.epochs = 0}, NULL),
                       "epochs 0 must be >= 1");
    CHECK_STATUS_FAILS(oar_fit(net, opt, tl, &(oar_fit_options){.epochs = 1, .patience = -1}, NULL),
                       "invalid options");
    CHECK_STATUS_FAILS(oar_fit(net, opt, tl, &(oar_fit_options){.epochs = 1, .monitor = "val_loss"},
                               NULL),
                       "needs an eval_loader");
    CHECK_STATUS_FAILS(oar_fit(net, opt, tl, &(oar_fit_options){.epochs = 1, .monitor = "acc"}, NULL),
                       "cannot monitor \"acc\"");
    CHECK_STATUS_FAILS(oar_fit(net, opt, tl, &(oar_fit_options){.epochs = 1, .topk = 3,
                                                                .monitor = "top2"}, NULL),
                       "cannot monitor \"top2\"");
    CHECK_STATUS_FAILS(oar_fit(net, opt, tl, &(oar_fit_options){.epochs = 1,
                                                                .log_path = "/nonexistent/x.jsonl"},
                               NULL),
                       "cannot create the log /nonexistent/x.jsonl");
    CHECK_STATUS_FAILS(oar_fit(net, opt, tl, &(oar_fit_options){.epochs = 2, .loss = broken_loss,
                                                                .progress = OAR_PROGRESS_NONE},
                               NULL),
                       "fit: epoch 1, training batch 1: ");
    /* a regression target: accuracy does not apply */
    oar_pool *p = oar_pool_push();
    oar_dataset *reg = oar_dataset_new(oar_randn(OAR_F32, 2, (int64_t[]){16, 8}),
                                       oar_randn(OAR_F32, 2, (int64_t[]){16, 4}));
    oar_pool_pop(p);
    oar_loader *rl = oar_loader_new(reg, &(oar_loader_options){.batch_size = 8});
    CHECK(oar_fit(net, opt, rl, &(oar_fit_options){.epochs = 1, .loss = mse_loss,
                                                   .progress = OAR_PROGRESS_NONE}, &r) == 0);
    CHECK(r.loss > 0 && isnan(r.acc));
    CHECK_STATUS_FAILS(oar_fit(net, opt, rl, &(oar_fit_options){.epochs = 1, .loss = mse_loss,
                                                                .accuracy = true,
                                                                .progress = OAR_PROGRESS_NONE},
                               NULL),
                       "accuracy needs outputs [N, C] and integer class targets [N]");
    CHECK_STATUS_FAILS(oar_evaluate(net, NULL, NULL, &r), "evaluate: model, loader or result");
    oar_loader_free(rl);
    oar_dataset_free(reg);
    oar_optim_free(opt);
    oar_module_free(net);
    oar_loader_free(tl);
    oar_loader_free(vl);
    oar_dataset_free(tr);
    oar_dataset_free(va);
}

int main(void) {
    snprintf(logpath, sizeof logpath, "/tmp/oar_fit_%d.jsonl", (int)getpid());
    RUN(test_fit_accuracy_and_log);
    RUN(test_early_stopping);
    remove(logpath);
    return test_summary();
}

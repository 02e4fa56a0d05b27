/* Resuming training from a checkpoint is exact: 2 epochs in one run give
 * the same parameters, bit for bit, as 1 epoch, saving the module and the
 * optimizer, loading both into fresh objects (initialised differently) and
 * training 1 more epoch -- with a shuffling, prefetching loader restarted
 * at epoch 1, BatchNorm buffers, Adam state and a step schedule. */
#include "test.h"

#include <unistd.h>

static oar_module *make_net(uint64_t seed) {
    oar_manual_seed(seed);
    return oar_sequential_new(4, (oar_module *[]){oar_linear_new(5, 16, true),
                                                  oar_batch_norm1d_new(16, 1e-5, 0.1, true),
                                                  oar_relu_new(), oar_linear_new(16, 3, true)});
}

static oar_dataset *make_data(void) {
    oar_manual_seed(100);
    oar_pool *p = oar_pool_push();
    oar_tensor *x = oar_randn(OAR_F32, 2, (int64_t[]){96, 5});
    /* the class: which of the first three features is largest */
    oar_tensor *y = oar_argmax(oar_slice(x, 1, 0, 3, 1), 1, false);
    oar_dataset *ds = oar_dataset_new(x, y);
    oar_pool_pop(p);
    return ds;
}

typedef struct run {
    oar_module *net;
    oar_optimizer *opt;
    oar_lr_scheduler *sched;
    oar_loader *loader;
} run;

static void start(run *r, const oar_dataset *ds, uint64_t init_seed) {
    r->net = make_net(init_seed);
    oar_tensor *ps[16];
    int n = oar_module_parameters(r->net, ps, 16);
    r->opt = oar_adam_new(n, ps, &(oar_adam_options){.lr = 0.01, .weight_decay = 1e-4});
    r->sched = oar_lr_step_new(r->opt, 4, 0.5); /* stepped per batch */
    r->loader = oar_loader_new(ds, &(oar_loader_options){.batch_size = 16, .shuffle = true,
                                                         .seed = 77, .prefetch = true});
}

static void stop(run *r) {
    oar_lr_scheduler_free(r->sched);
    oar_loader_free(r->loader);
    oar_optim_free(r->opt);
    oar_module_free(r->net);
}

static void epoch(run *r) {
    oar_tensor *x, *y;
    oar_pool *pool = oar_pool_push();
    while (oar_loader_next(r->loader, &x, &y) == 1) {
        oar_tensor *loss = oar_cross_entropy(oar_module_forward(r->net, x), y, NULL, -100, 0,
                                             OAR_REDUCTION_MEAN);
        CHECK(loss && oar_backward(loss, NULL) == 0);
        CHECK(oar_optim_step(r->opt) == 0);
        oar_optim_zero_grad(r->opt);
        oar_lr_scheduler_step(r->sched);
    }
    oar_pool_pop(pool);
}

static bool same_state(oar_module *a, oar_module *b) {
    const oar_state_entry *sa, *sb;
    int n = oar_module_state(a, &sa);
    if (n <= 0 || oar_module_state(b, &sb) != n) return false;
    for (int i = 0; i < n; i++) {
        size_t bytes = (size_t)oar_tensor_numel(sa[i].tensor) * oar_dtype_size(oar_tensor_dtype(sa[i].tensor));
        char *x = malloc(bytes), *y = malloc(bytes);
        bool same = !oar_tensor_to_host(sa[i].tensor, x, bytes) &&
                    !oar_tensor_to_host(sb[i].tensor, y, bytes) && !memcmp(x, y, bytes);
        free(x);
        free(y);
        if (!same) {
            fprintf(stderr, "differs: %s\n", sa[i].name);
            return false;
        }
    }
    return true;
}

static void test_resume(void) {
    char mpath[64], opath[64];
    snprintf(mpath, sizeof mpath, "/tmp/oar_resume_%d.model", (int)getpid());
    snprintf(opath, sizeof opath, "/tmp/oar_resume_%d.optim", (int)getpid());
    oar_dataset *ds = make_data();

    run a;
    start(&a, ds, 1);
    epoch(&a);
    epoch(&a);

    run b;
    start(&b, ds, 1);
    epoch(&b);
    CHECK(oar_module_save(b.net, mpath) == 0);
    CHECK(oar_optim_save(b.opt, opath) == 0);
    int64_t sched_epoch = oar_lr_scheduler_epoch(b.sched);
    stop(&b);

    run c;
    start(&c, ds, 2); /* different initial weights: everything must come from the files */
    CHECK(!same_state(a.net, c.net));
    CHECK(oar_module_load(c.net, mpath) == 0);
    CHECK(oar_optim_load(c.opt, opath) == 0);
    CHECK(oar_lr_scheduler_set_epoch(c.sched, sched_epoch) == 0);
    CHECK(oar_loader_set_epoch(c.loader, 1) == 0);
    epoch(&c);
    CHECK(oar_optim_steps(c.opt) == oar_optim_steps(a.opt) && oar_optim_steps(a.opt) == 12);
    CHECK(oar_optim_lr(c.opt) == oar_optim_lr(a.opt));
    CHECK(same_state(a.net, c.net));

    /* the check has teeth: without the optimizer state the result differs */
    run d;
    start(&d, ds, 2);
    CHECK(oar_module_load(d.net, mpath) == 0);
    CHECK(oar_lr_scheduler_set_epoch(d.sched, sched_epoch) == 0);
    CHECK(oar_loader_set_epoch(d.loader, 1) == 0);
    epoch(&d);
    CHECK(!same_state(a.net, d.net));
    stop(&a);
    stop(&c);
    stop(&d);
    oar_dataset_free(ds);
    remove(mpath);
    remove(opath);
}

int main(void) {
    RUN(test_resume);
    return test_summary();
}

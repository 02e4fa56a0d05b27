/* Optimizers, gradient clipping and schedules against PyTorch: three steps
 * of each optimizer on a [3, 4] weight and a [3] bias with fixed gradients
 * (tests/ref/gen_train.py), the parameters checked after every step. */
#include "test.h"

#include <oar/nn.h>
#include <oar/optim.h>

#include "core/core.h" /* to plant fixed gradients without a backward pass */
#include "ref/train_ref.h"

static int64_t wshape[2] = {3, 4}, bshape[1] = {3};

/* Parameters w, b (f64, requires grad, caller-owned). */
static void make_params(oar_tensor **w, oar_tensor **b, oar_dtype dt) {
    oar_pool *p = oar_pool_push();
    *w = oar_tensor_retain(oar_cast(oar_tensor_from_data(train_w0, OAR_F64, 2, wshape), dt));
    *b = oar_tensor_retain(oar_cast(oar_tensor_from_data(train_b0, OAR_F64, 1, bshape), dt));
    oar_pool_pop(p);
    oar_tensor_set_requires_grad(*w, true);
    oar_tensor_set_requires_grad(*b, true);
}

static void set_grad(oar_tensor *t, const double *v, int64_t n, oar_dtype dt) {
    oar_tensor_zero_grad(t);
    oar_pool *p = oar_pool_push();
    t->grad = oar_tensor_retain(oar_cast(oar_tensor_from_data(v, OAR_F64, t->ndim, t->shape), dt));
    (void)n;
    oar_pool_pop(p);
}

static void run_case(const char *name, oar_optimizer *(*make)(oar_tensor **), const double *want_w,
                     const double *want_b, oar_dtype dt, double tol) {
    oar_tensor *w, *b;
    make_params(&w, &b, dt);
    oar_tensor *ps[2] = {w, b};
    oar_optimizer *opt = make(ps);
    CHECK(opt != NULL);
    for (int s = 0; s < 3 && opt; s++) {
        set_grad(w, train_gw + 12 * s, 12, dt);
        set_grad(b, train_gb + 3 * s, 3, dt);
        CHECK(oar_optim_step(opt) == 0);
        test_current = name;
        CHECK_VALUES(w, want_w + 12 * s, 12, tol);
        CHECK_VALUES(b, want_b + 3 * s, 3, tol);
    }
    CHECK(oar_optim_steps(opt) == 3);
    /* the parameters kept their identity and dtype */
    CHECK(oar_tensor_dtype(w) == dt && oar_tensor_requires_grad(w));
    oar_optim_zero_grad(opt);
    CHECK(oar_tensor_grad(w) == NULL && oar_tensor_grad(b) == NULL);
    /* a step without gradients changes nothing */
    CHECK(oar_optim_step(opt) == 0);
    CHECK_VALUES(w, want_w + 24, 12, tol);
    oar_optim_free(opt);
    oar_tensor_release(w);
    oar_tensor_release(b);
}

static oar_optimizer *mk_sgd(oar_tensor **p) {
    return oar_sgd_new(2, p, &(oar_sgd_options){.lr = 0.1});
}
static oar_optimizer *mk_sgd_mom(oar_tensor **p) {
    return oar_sgd_new(
        2, p,
        &(oar_sgd_options){.lr = 0.05, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01});
}
static oar_optimizer *mk_nesterov(oar_tensor **p) {
    return oar_sgd_new(
        2, p,
        &(oar_sgd_options){.lr = 0.05, .momentum = 0.9, .nesterov = true, .weight_decay = 0.02});
}
static oar_optimizer *mk_adam(oar_tensor **p) {
    return oar_adam_new(
        2, p,
        &(oar_adam_options){
            .lr = 0.01, .beta1 = 0.8, .beta2 = 0.95, .eps = 1e-6, .weight_decay = 0.05});
}
static oar_optimizer *mk_adamw(oar_tensor **p) {
    return oar_adamw_new(
        2, p,
        &(oar_adam_options){
            .lr = 0.01, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0.1});
}

static void test_optimizers_f64(void) {
    run_case("sgd", mk_sgd, train_sgd_w, train_sgd_b, OAR_F64, 1e-12);
    run_case("sgd_momentum", mk_sgd_mom, train_sgd_mom_w, train_sgd_mom_b, OAR_F64, 1e-12);
    run_case("sgd_nesterov", mk_nesterov, train_sgd_nesterov_w, train_sgd_nesterov_b, OAR_F64,
             1e-12);
    run_case("adam", mk_adam, train_adam_w, train_adam_b, OAR_F64, 1e-10);
    run_case("adamw", mk_adamw, train_adamw_w, train_adamw_b, OAR_F64, 1e-10);
}

static void test_optimizers_f32(void) {
    run_case("nesterov_f32", mk_nesterov, train_sgd_nesterov_w, train_sgd_nesterov_b, OAR_F32,
             1e-5);
    run_case("adamw_f32", mk_adamw, train_adamw_w, train_adamw_b, OAR_F32, 1e-5);
}

static void test_clip(void) {
    oar_tensor *w, *b;
    make_params(&w, &b, OAR_F64);
    set_grad(w, train_gw, 12, OAR_F64);
    set_grad(b, train_gb, 3, OAR_F64);
    double norm = 0;
    oar_tensor *ps[2] = {w, b};
    CHECK(oar_clip_grad_norm(2, ps, 1.5, &norm) == 0);
    CHECK_NEAR(norm, train_clip_norm[0], 1e-12);
    CHECK_VALUES(oar_tensor_grad(w), train_clip_gw, 12, 1e-12);
    CHECK_VALUES(oar_tensor_grad(b), train_clip_gb, 3, 1e-12);
    /* below the bound nothing changes */
    CHECK(oar_clip_grad_norm(2, ps, 100, &norm) == 0);
    CHECK_VALUES(oar_tensor_grad(b), train_clip_gb, 3, 1e-12);
    CHECK_STATUS_FAILS(oar_clip_grad_norm(2, ps, 0, NULL), "max_norm");
    oar_tensor_release(w);
    oar_tensor_release(b);
}

static void test_schedules(void) {
    oar_tensor *w, *b;
    make_params(&w, &b, OAR_F64);
    oar_tensor *ps[2] = {w, b};
    oar_optimizer *opt = oar_sgd_new(2, ps, &(oar_sgd_options){.lr = 0.2});
    oar_lr_scheduler *s = oar_lr_step_new(opt, 3, 0.5);
    for (int i = 0; i < 5; i++) {
        CHECK(oar_lr_scheduler_step(s) == 0);
        CHECK_NEAR(oar_optim_lr(opt), train_steplr_lrs[i], 1e-15);
    }
    oar_lr_scheduler_free(s);
    CHECK(oar_optim_set_lr(opt, 0.2) == 0);
    s = oar_lr_cosine_new(opt, 5, 0.01);
    for (int i = 0; i < 5; i++) {
        CHECK(oar_lr_scheduler_step(s) == 0);
        CHECK_NEAR(oar_lr_scheduler_lr(s), train_cosine_lrs[i], 1e-12);
    }
    oar_lr_scheduler_free(s);
    CHECK_FAILS(oar_lr_step_new(opt, 0, 0.5), "invalid arguments");
    CHECK_STATUS_FAILS(oar_optim_set_lr(opt, -1), "must be >= 0");
    oar_optim_free(opt);
    oar_tensor_release(w);
    oar_tensor_release(b);
}

static void test_bad_options(void) {
    oar_tensor *w, *b;
    make_params(&w, &b, OAR_F32);
    oar_tensor *ps[2] = {w, b};
    CHECK_FAILS(oar_sgd_new(2, ps, &(oar_sgd_options){.lr = 0}), "lr must be > 0");
    CHECK_FAILS(oar_sgd_new(2, ps, &(oar_sgd_options){.lr = 0.1, .nesterov = true}),
                "nesterov needs momentum");
    CHECK_FAILS(oar_adam_new(2, ps, &(oar_adam_options){.beta1 = 1.5}), "betas in (0, 1)");
    CHECK_FAILS(oar_adam_new(2, (oar_tensor *[]){w, NULL}, NULL), "parameter 1 is NULL");
    oar_tensor *idx = oar_zeros(OAR_I64, 1, bshape);
    CHECK_FAILS(oar_sgd_new(1, &idx, &(oar_sgd_options){.lr = 1}), "floating tensors");
    oar_tensor_release(idx);
    CHECK_FAILS(oar_sgd_new(2, ps, NULL), "options are NULL");
    CHECK_STATUS_FAILS(oar_optim_step(NULL), "optimizer is NULL");
    /* default Adam options and an empty parameter list are fine */
    oar_optimizer *o = oar_adam_new(0, NULL, NULL);
    CHECK(o && oar_optim_lr(o) == 1e-3 && oar_optim_step(o) == 0);
    oar_optim_free(o);
    oar_tensor_release(w);
    oar_tensor_release(b);
}

/* A module's parameters go straight into an optimizer. */
static void test_module_params(void) {
    oar_manual_seed(3);
    oar_module *lin = oar_linear_new(4, 3, true);
    oar_tensor *ps[4];
    int n = oar_module_parameters(lin, ps, 4);
    CHECK(n == 2);
    oar_optimizer *opt = oar_sgd_new(n, ps, &(oar_sgd_options){.lr = 1});
    double *before = test_values(ps[1]);
    set_grad(ps[1], (double[]){1, 2, 3}, 3, OAR_F32);
    CHECK(oar_optim_step(opt) == 0);
    double want[3] = {before[0] - 1, before[1] - 2, before[2] - 3};
    CHECK_VALUES(oar_module_get(lin, "bias"), want, 3, 1e-6);
    oar_module_zero_grad(lin);
    CHECK(oar_tensor_grad(ps[1]) == NULL);
    free(before);
    oar_optim_free(opt);
    oar_module_free(lin);
}

int main(void) {
    RUN(test_optimizers_f64);
    RUN(test_optimizers_f32);
    RUN(test_clip);
    RUN(test_schedules);
    RUN(test_bad_options);
    RUN(test_module_params);
    return test_summary();
}

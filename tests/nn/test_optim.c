/* Optimizers, gradient clipping and schedules against PyTorch: three steps
 * of each optimizer on a [3, 4] weight and a [3] bias with fixed gradients
 * (tests/ref/gen_train.py), the parameters checked after every step. */
#include "test.h"

#include <oar/nn.h>
#include <oar/optim.h>
#include <oar/io.h>
#include <unistd.h>

#include "core/core.h" /* to plant fixed gradients without a backward pass */
#include "ref/train_ref.h"
#include "ref/train_more_ref.h"

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

/* ---- RMSProp against a scalar float64 reference ------------------------------
 * The reference follows torch.optim.RMSprop's documented algorithm one
 * element at a time, independently of the tensor ops the optimizer uses. */
static void rmsprop_ref(double *p, int n, const double *g_all, int gstride, int steps, double lr,
                        double alpha, double eps, double wd, double mom, bool centered) {
    double sq[12] = {0}, ga[12] = {0}, buf[12] = {0};
    for (int s = 0; s < steps; s++)
        for (int i = 0; i < n; i++) {
            double g = g_all[s * gstride + i] + wd * p[i];
            sq[i] = alpha * sq[i] + (1 - alpha) * g * g;
            double avg;
            if (centered) {
                ga[i] = alpha * ga[i] + (1 - alpha) * g;
                avg = sqrt(sq[i] - ga[i] * ga[i]) + eps;
            } else {
                avg = sqrt(sq[i]) + eps;
            }
            if (mom > 0) {
                buf[i] = mom * buf[i] + g / avg;
                p[i] -= lr * buf[i];
            } else {
                p[i] -= lr * g / avg;
            }
        }
}

static void test_rmsprop(void) {
    struct {
        oar_rmsprop_options o;
        double alpha, eps;
    } cases[] = {
        {{.lr = 0.01}, 0.99, 1e-8},
        {{.lr = 0.02, .alpha = 0.9, .eps = 1e-6, .weight_decay = 0.05, .momentum = 0.8,
          .centered = true},
         0.9, 1e-6},
        {{.lr = 0.005, .momentum = 0.5}, 0.99, 1e-8},
    };
    for (int c = 0; c < 3; c++) {
        oar_tensor *w, *b;
        make_params(&w, &b, OAR_F64);
        oar_tensor *ps[2] = {w, b};
        oar_optimizer *opt = oar_rmsprop_new(2, ps, &cases[c].o);
        CHECK(opt != NULL);
        for (int s = 0; s < 3 && opt; s++) {
            set_grad(w, train_gw + 12 * s, 12, OAR_F64);
            set_grad(b, train_gb + 3 * s, 3, OAR_F64);
            CHECK(oar_optim_step(opt) == 0);
        }
        double rw[12], rb[3];
        memcpy(rw, train_w0, sizeof rw);
        memcpy(rb, train_b0, sizeof rb);
        const oar_rmsprop_options *o = &cases[c].o;
        rmsprop_ref(rw, 12, train_gw, 12, 3, o->lr, cases[c].alpha, cases[c].eps,
                    o->weight_decay, o->momentum, o->centered);
        rmsprop_ref(rb, 3, train_gb, 3, 3, o->lr, cases[c].alpha, cases[c].eps, o->weight_decay,
                    o->momentum, o->centered);
        CHECK_VALUES(w, rw, 12, 1e-12);
        CHECK_VALUES(b, rb, 3, 1e-12);
        /* and PyTorch's values (tests/ref/gen_train_more.py) */
        const double *tw[3] = {train_rms_plain_w, train_rms_centered_w, train_rms_momentum_w};
        const double *tb[3] = {train_rms_plain_b, train_rms_centered_b, train_rms_momentum_b};
        CHECK_VALUES(w, tw[c], 12, 1e-12);
        CHECK_VALUES(b, tb[c], 3, 1e-12);
        oar_optim_free(opt);
        oar_tensor_release(w);
        oar_tensor_release(b);
    }
    oar_optimizer *d = oar_rmsprop_new(0, NULL, NULL);
    CHECK(d && oar_optim_lr(d) == 1e-2);
    oar_optim_free(d);
    CHECK_FAILS(oar_rmsprop_new(0, NULL, &(oar_rmsprop_options){.alpha = 1}), "alpha in (0, 1)");
    CHECK_FAILS(oar_rmsprop_new(0, NULL, &(oar_rmsprop_options){.momentum = -1}),
                "rmsprop_new: invalid options");
}

/* ---- the new schedules: values worked out by hand from torch's formulas ---- */
static void test_more_schedules(void) {
    oar_tensor *w, *b;
    make_params(&w, &b, OAR_F64);
    oar_tensor *ps[2] = {w, b};
    oar_optimizer *opt = oar_sgd_new(2, ps, &(oar_sgd_options){.lr = 1});
    /* MultiStepLR milestones {2, 4}, gamma 0.1 */
    oar_lr_scheduler *s = oar_lr_multistep_new(opt, 2, (int64_t[]){2, 4}, 0.1);
    double ms[6] = {1, 1, 0.1, 0.1, 0.01, 0.01};
    for (int i = 0; i < 6; i++) {
        CHECK(oar_lr_scheduler_epoch(s) == i);
        CHECK_NEAR(oar_optim_lr(opt), ms[i], 1e-15);
        CHECK_NEAR(oar_optim_lr(opt), train_multistep_lrs[i], 1e-15);
        CHECK(oar_lr_scheduler_step(s) == 0);
    }
    oar_lr_scheduler_free(s);
    /* LinearLR warm-up from 0.25 to 1 over 4 epochs, base 0.4 (set at creation) */
    CHECK(oar_optim_set_lr(opt, 0.4) == 0);
    s = oar_lr_linear_new(opt, 0.25, 1, 4);
    double lin[7] = {0.1, 0.175, 0.25, 0.325, 0.4, 0.4, 0.4};
    for (int i = 0; i < 7; i++) {
        CHECK_NEAR(oar_optim_lr(opt), lin[i], 1e-15);
        CHECK_NEAR(oar_optim_lr(opt), train_linear_lrs[i], 1e-15);
        CHECK(oar_lr_scheduler_step(s) == 0);
    }
    oar_lr_scheduler_free(s);
    /* OneCycleLR max 1, 10 steps, pct 0.3: PyTorch's values, then by hand */
    s = oar_lr_one_cycle_new(opt, 1, 10, 0.3, 0, 0);
    for (int i = 0; i < 10; i++) {
        CHECK_NEAR(oar_optim_lr(opt), train_onecycle_lrs[i], 1e-15);
        if (i < 9) CHECK(oar_lr_scheduler_step(s) == 0);
    }
    CHECK(oar_lr_scheduler_set_epoch(s, 0) == 0);
    /* warm-up ends at step 2 */
    CHECK_NEAR(oar_optim_lr(opt), 0.04, 1e-15);
    CHECK(oar_lr_scheduler_step(s) == 0);
    CHECK_NEAR(oar_optim_lr(opt), 0.52, 1e-15); /* halfway on the cosine */
    CHECK(oar_lr_scheduler_step(s) == 0);
    CHECK_NEAR(oar_optim_lr(opt), 1, 1e-15);
    double prev = 1;
    for (int i = 3; i < 10; i++) {
        CHECK(oar_lr_scheduler_step(s) == 0);
        CHECK(oar_optim_lr(opt) < prev);
        prev = oar_optim_lr(opt);
    }
    CHECK_NEAR(prev, 4e-6, 1e-18); /* max / 25 / 1e4 */
    /* halfway down (step 5.5 is not a step; step 9 - 3.5): check step 6 by closed form */
    CHECK(oar_lr_scheduler_set_epoch(s, 6) == 0);
    CHECK_NEAR(oar_optim_lr(opt), 4e-6 + (1 - 4e-6) / 2 * (cos(M_PI * 4 / 7) + 1), 1e-15);
    CHECK(oar_lr_scheduler_set_epoch(s, 9) == 0);
    CHECK_STATUS_FAILS(oar_lr_scheduler_step(s), "past total_steps");
    CHECK(oar_lr_scheduler_epoch(s) == 9);
    oar_lr_scheduler_free(s);
    /* set_epoch gives what stepping gives: restoring a schedule */
    CHECK(oar_optim_set_lr(opt, 0.2) == 0);
    oar_lr_scheduler *a = oar_lr_cosine_new(opt, 5, 0.01);
    for (int i = 0; i < 3; i++)
        oar_lr_scheduler_step(a);
    double lr3 = oar_optim_lr(opt);
    CHECK(oar_lr_scheduler_set_epoch(a, 0) == 0 && oar_lr_scheduler_set_epoch(a, 3) == 0);
    CHECK(oar_optim_lr(opt) == lr3);
    CHECK_STATUS_FAILS(oar_lr_scheduler_set_epoch(a, -1), "out of range");
    oar_lr_scheduler_free(a);

    CHECK_FAILS(oar_lr_multistep_new(opt, 2, (int64_t[]){3, 3}, 0.1), "greater than the one before");
    CHECK_FAILS(oar_lr_multistep_new(opt, 0, NULL, 0.1), "at least one milestone");
    CHECK_FAILS(oar_lr_linear_new(opt, 0, 1, 4), "start_factor in (0, 1]");
    CHECK_FAILS(oar_lr_one_cycle_new(opt, 1, 10, 0.05, 0, 0), "more than one step");
    CHECK_FAILS(oar_lr_one_cycle_new(opt, 0, 10, 0.3, 0, 0), "lr_one_cycle_new");
    CHECK_FAILS(oar_lr_linear_new(NULL, 0.5, 1, 4), "optimizer is NULL");
    CHECK_FAILS(oar_lr_multistep_new(NULL, 1, (int64_t[]){1}, 0.1), "optimizer is NULL");
    CHECK_FAILS(oar_lr_one_cycle_new(NULL, 1, 10, 0.3, 0, 0), "optimizer is NULL");
    CHECK_STATUS_FAILS(oar_lr_scheduler_set_epoch(NULL, 1), "scheduler is NULL");
    CHECK(oar_lr_scheduler_epoch(NULL) == -1);
    oar_lr_scheduler_free(NULL);
    oar_optim_free(opt);
    oar_tensor_release(w);
    oar_tensor_release(b);
}

/* ---- optimizer state: save after 3 steps, load into a fresh optimizer over
 * fresh copies of the parameters, take 3 more steps in both: bit-identical
 * to the uninterrupted run. ---------------------------------------------------- */
static oar_optimizer *mk_rmsprop(oar_tensor **p) {
    return oar_rmsprop_new(2, p,
                           &(oar_rmsprop_options){.lr = 0.01, .momentum = 0.7, .centered = true,
                                                  .weight_decay = 0.01});
}

static bool same_bits(oar_tensor *a, oar_tensor *b) {
    size_t n = (size_t)oar_tensor_numel(a) * oar_dtype_size(oar_tensor_dtype(a));
    if (oar_tensor_numel(b) != oar_tensor_numel(a) || oar_tensor_dtype(a) != oar_tensor_dtype(b))
        return false;
    char *x = malloc(n), *y = malloc(n);
    bool same = !oar_tensor_to_host(a, x, n) && !oar_tensor_to_host(b, y, n) && !memcmp(x, y, n);
    free(x);
    free(y);
    return same;
}

static void grads_for_step(oar_tensor *w, oar_tensor *b, int s, oar_dtype dt) {
    set_grad(w, train_gw + 12 * (s % 3), 12, dt);
    set_grad(b, train_gb + 3 * (s % 3), 3, dt);
}

static void test_state_resume(void) {
    char path[] = "/tmp/oar_optim_state_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    oar_optimizer *(*makers[])(oar_tensor **) = {mk_sgd, mk_sgd_mom, mk_nesterov, mk_adam,
                                                  mk_adamw, mk_rmsprop};
    for (int c = 0; c < 6; c++) {
        oar_dtype dt = c % 2 ? OAR_F32 : OAR_F64;
        oar_tensor *w, *b, *w2, *b2;
        make_params(&w, &b, dt);
        oar_tensor *ps[2] = {w, b};
        oar_optimizer *a = makers[c](ps);
        oar_lr_scheduler *sched = oar_lr_step_new(a, 2, 0.5);
        for (int s = 0; s < 3; s++) {
            grads_for_step(w, b, s, dt);
            CHECK(oar_optim_step(a) == 0);
            oar_lr_scheduler_step(sched);
        }
        CHECK(oar_optim_save(a, path) == 0);
        /* the resumed copy: parameters copied bit for bit, a fresh optimizer */
        make_params(&w2, &b2, dt);
        oar_no_grad_push();
        CHECK(oar_copy_(w2, w) == 0 && oar_copy_(b2, b) == 0);
        oar_no_grad_pop();
        oar_tensor *ps2[2] = {w2, b2};
        oar_optimizer *r = makers[c](ps2);
        CHECK(oar_optim_load(r, path) == 0);
        CHECK(oar_optim_steps(r) == 3 && oar_optim_lr(r) == oar_optim_lr(a));
        for (int s = 3; s < 6; s++) {
            grads_for_step(w, b, s, dt);
            grads_for_step(w2, b2, s, dt);
            CHECK(oar_optim_step(a) == 0 && oar_optim_step(r) == 0);
        }
        test_current = "test_state_resume (bit-identical)";
        CHECK(same_bits(w, w2) && same_bits(b, b2));
        test_current = "test_state_resume";
        CHECK(oar_optim_steps(r) == 6);
        oar_lr_scheduler_free(sched);
        oar_optim_free(a);
        oar_optim_free(r);
        oar_tensor_release(w);
        oar_tensor_release(b);
        oar_tensor_release(w2);
        oar_tensor_release(b2);
    }

    /* mismatches: listed, nothing changed */
    oar_tensor *w, *b;
    make_params(&w, &b, OAR_F64);
    oar_tensor *ps[2] = {w, b};
    oar_optimizer *adam = mk_adam(ps);
    grads_for_step(w, b, 0, OAR_F64);
    CHECK(oar_optim_step(adam) == 0);
    CHECK(oar_optim_save(adam, path) == 0);
    oar_optimizer *sgd = mk_sgd_mom(ps);
    CHECK_STATUS_FAILS(oar_optim_load(sgd, path), "written by adam, loading into sgd");
    CHECK(oar_optim_steps(sgd) == 0 && oar_optim_lr(sgd) == 0.05);
    oar_optimizer *one = oar_adam_new(1, ps, NULL);
    CHECK_STATUS_FAILS(oar_optim_load(one, path), "2 parameters in the file, 1 in the optimizer");
    int64_t other_shape[2] = {4, 3};
    oar_tensor *wt = oar_zeros(OAR_F64, 2, other_shape);
    oar_tensor *bf = oar_zeros(OAR_F32, 1, bshape);
    oar_optimizer *shaped = oar_adam_new(2, (oar_tensor *[]){wt, bf}, NULL);
    oar_clear_error();
    CHECK(oar_optim_load(shaped, path) != 0);
    CHECK(strstr(oar_last_error(), "\"state.0.exp_avg\" is float64 [3, 4] in the file, parameter 0 is float64 [4, 3]"));
    CHECK(strstr(oar_last_error(), "\"state.1.exp_avg_sq\" is float64 [3] in the file, parameter 1 is float32 [3]"));
    CHECK(oar_optim_steps(shaped) == 0);
    /* files that are not optimizer states, truncated, or missing */
    const char *nm[1] = {"x"};
    CHECK(oar_safetensors_save(path, 1, nm, &w) == 0);
    CHECK_STATUS_FAILS(oar_optim_load(adam, path), "not an optimizer state file");
    CHECK(oar_optim_steps(adam) == 1);
    const char *keys[4] = {"oar.optimizer", "oar.steps", "oar.lr", "oar.num_params"};
    const char *vals[4] = {"adam", "1", "0.01", "2"};
    const char *bogus[1] = {"state.7.exp_avg"};
    CHECK(oar_safetensors_save_meta(path, 1, bogus, &w, 4, keys, vals) == 0);
    CHECK_STATUS_FAILS(oar_optim_load(adam, path), "unexpected \"state.7.exp_avg\"");
    CHECK(oar_optim_save(adam, path) == 0);
    CHECK(truncate(path, 100) == 0);
    CHECK_STATUS_FAILS(oar_optim_load(adam, path), path);
    CHECK_STATUS_FAILS(oar_optim_load(adam, "/nonexistent/x.safetensors"), "cannot open");
    CHECK_STATUS_FAILS(oar_optim_load(NULL, path), "optimizer or path is NULL");
    CHECK_STATUS_FAILS(oar_optim_save(adam, NULL), "optimizer or path is NULL");
    CHECK_STATUS_FAILS(oar_optim_save(adam, "/nonexistent/dir/x.safetensors"), "cannot create");
    CHECK_STATUS_FAILS(oar_safetensors_save_meta(path, 1, nm, &w, 1, (const char *[]){"format"},
                                                 (const char *[]){"x"}),
                       "reserved");
    CHECK(oar_optim_steps(adam) == 1);
    oar_optim_free(adam);
    oar_optim_free(sgd);
    oar_optim_free(one);
    oar_optim_free(shaped);
    oar_tensor_release(w);
    oar_tensor_release(b);
    oar_tensor_release(wt);
    oar_tensor_release(bf);
    remove(path);
}

/* Every allocation of saving and loading an optimizer's state fails in
 * turn: out of memory is reported, nothing crashes or leaks, and a failed
 * load leaves the optimizer's step count as it was. */
static long alloc_calls, fail_at;

static void *failing_alloc(void *ctx, void *ptr, size_t old_size, size_t new_size) {
    (void)ctx, (void)old_size;
    if (new_size == 0) {
        free(ptr);
        return NULL;
    }
    if (++alloc_calls == fail_at) return NULL;
    return realloc(ptr, new_size);
}

static void test_state_alloc_failures(void) {
    char path[] = "/tmp/oar_optim_oom_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    oar_tensor *w, *b;
    make_params(&w, &b, OAR_F32);
    oar_tensor *ps[2] = {w, b};
    oar_optimizer *a = mk_rmsprop(ps), *r = mk_rmsprop(ps);
    grads_for_step(w, b, 0, OAR_F32);
    CHECK(oar_optim_step(a) == 0);
    int bad = 0, completed = 0;
    for (fail_at = 1; fail_at < 3000 && !completed; fail_at++) {
        alloc_calls = 0;
        oar_clear_error();
        oar_set_allocator(failing_alloc, NULL);
        int st = oar_optim_save(a, path);
        int64_t before = oar_optim_steps(r);
        if (!st) {
            st = oar_optim_load(r, path);
            if (st && oar_optim_steps(r) != before) bad++;
        }
        oar_set_allocator(NULL, NULL);
        if (!st && alloc_calls < fail_at)
            completed = 1;
        else if (st && !strstr(oar_last_error(), "out of memory") && bad++ < 3)
            fprintf(stderr, "failing allocation %ld: %s\n", fail_at, oar_last_error());
    }
    CHECK(completed && bad == 0);
    CHECK(fail_at > 10 && oar_optim_steps(r) == 1);
    oar_optim_free(a);
    oar_optim_free(r);
    oar_tensor_release(w);
    oar_tensor_release(b);
    remove(path);
}

int main(void) {
    RUN(test_optimizers_f64);
    RUN(test_optimizers_f32);
    RUN(test_clip);
    RUN(test_schedules);
    RUN(test_bad_options);
    RUN(test_module_params);
    RUN(test_rmsprop);
    RUN(test_more_schedules);
    RUN(test_state_resume);
    RUN(test_state_alloc_failures);
    return test_summary();
}

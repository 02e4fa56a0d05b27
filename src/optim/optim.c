/* Optimizers, gradient clipping and learning-rate schedules. Updates are
 * written with public ops under no_grad and stored with oar_copy_, so the
 * parameters keep their identity (modules and graphs still point at them). */
#include "../core/core.h"
#include "../ops/device_ops.h"
#include "../ops/op.h"
#include "../profiler/hooks.h" /* profiler hook */

#include <math.h>
#include <oar/autograd.h>
#include <oar/dist.h>
#include <oar/ops.h>
#include <oar/optim.h>
#include <string.h>

#include "optim.h"

void oar_optim_free(oar_optimizer *o) {
    if (!o) return;
    for (int i = 0; i < o->n; i++) {
        if (o->params) oar_tensor_release(o->params[i]);
        if (o->s1) oar_tensor_release(o->s1[i]);
        if (o->s2) oar_tensor_release(o->s2[i]);
        if (o->s3) oar_tensor_release(o->s3[i]);
    }
    size_t n = (size_t)o->cap;
    oari_free(o->params, n * sizeof *o->params);
    oari_free(o->s1, n * sizeof *o->s1);
    oari_free(o->s2, n * sizeof *o->s2);
    oari_free(o->s3, n * sizeof *o->s3);
    oari_free(o->pstep, n * sizeof *o->pstep);
    oari_free(o, sizeof *o);
}

static oar_optimizer *make(const char *what, optim_kind kind, int n, oar_tensor *const *params) {
    if (n < 0 || (n > 0 && !params))
        return oari_error(OAR_ERR_INVALID, "%s: bad parameter list (n = %d)", what, n), NULL;
    for (int i = 0; i < n; i++) {
        if (!params[i]) {
            if (!oari_error_pending())
                oari_error(OAR_ERR_INVALID, "%s: parameter %d is NULL", what, i);
            return NULL;
        }
        if (!oar_dtype_is_float(params[i]->dtype))
            return oari_error(OAR_ERR_INVALID,
                              "%s: parameter %d has dtype %s; optimizers update "
                              "floating tensors",
                              what, i, oar_dtype_name(params[i]->dtype)),
                   NULL;
    }
    oar_optimizer *o = oari_calloc(1, sizeof *o);
    if (!o) return NULL;
    o->kind = kind;
    o->n = n;
    size_t m = (size_t)(n ? n : 1);
    o->params = oari_calloc(m, sizeof *o->params);
    o->s1 = oari_calloc(m, sizeof *o->s1);
    o->s2 = oari_calloc(m, sizeof *o->s2);
    o->s3 = oari_calloc(m, sizeof *o->s3);
    o->pstep = oari_calloc(m, sizeof *o->pstep);
    if (!o->params || !o->s1 || !o->s2 || !o->s3 || !o->pstep) {
        /* free with the size each was allocated with */
        oari_free(o->params, m * sizeof *o->params);
        oari_free(o->s1, m * sizeof *o->s1);
        oari_free(o->s2, m * sizeof *o->s2);
        oari_free(o->s3, m * sizeof *o->s3);
        oari_free(o->pstep, m * sizeof *o->pstep);
        oari_free(o, sizeof *o);
        return NULL;
    }
    o->cap = (int)m;
    for (int i = 0; i < n; i++)
        o->params[i] = oar_tensor_retain(params[i]);
    return o;
}

oar_optimizer *oar_sgd_new(int n, oar_tensor *const *params, const oar_sgd_options *opt) {
    if (!opt) return oari_error(OAR_ERR_INVALID, "sgd_new: options are NULL"), NULL;
    if (!(opt->lr > 0) || !(opt->momentum >= 0) || !(opt->weight_decay >= 0) ||
        !(opt->dampening >= 0))
        return oari_error(OAR_ERR_INVALID,
                          "sgd_new: invalid options (lr %g, momentum %g, dampening "
                          "%g, weight_decay %g): lr must be > 0, the others >= 0",
                          opt->lr, opt->momentum, opt->dampening, opt->weight_decay),
               NULL;
    if (opt->nesterov && (opt->momentum <= 0 || opt->dampening != 0))
        return oari_error(OAR_ERR_INVALID, "sgd_new: nesterov needs momentum > 0 and dampening 0"),
               NULL;
    oar_optimizer *o = make("sgd_new", KIND_SGD, n, params);
    if (!o) return NULL;
    o->lr = opt->lr;
    o->momentum = opt->momentum;
    o->dampening = opt->dampening;
    o->wd = opt->weight_decay;
    o->nesterov = opt->nesterov;
    return o;
}

static oar_optimizer *adam_new(const char *what, optim_kind kind, int n, oar_tensor *const *params,
                               const oar_adam_options *opt) {
    oar_adam_options d = opt ? *opt : (oar_adam_options){0};
    if (d.lr == 0) d.lr = 1e-3;
    if (d.beta1 == 0) d.beta1 = 0.9;
    if (d.beta2 == 0) d.beta2 = 0.999;
    if (d.eps == 0) d.eps = 1e-8;
    if (kind == KIND_ADAMW && d.weight_decay < 0) d.weight_decay = 1e-2;
    if (!(d.lr > 0) || !(d.beta1 > 0 && d.beta1 < 1) || !(d.beta2 > 0 && d.beta2 < 1) ||
        !(d.eps > 0) || !(d.weight_decay >= 0))
        return oari_error(OAR_ERR_INVALID,
                          "%s: invalid options (lr %g, betas %g %g, eps %g, "
                          "weight_decay %g): lr, eps > 0, betas in (0, 1), weight_decay >= 0",
                          what, d.lr, d.beta1, d.beta2, d.eps, d.weight_decay),
               NULL;
    oar_optimizer *o = make(what, kind, n, params);
    if (!o) return NULL;
    o->lr = d.lr;
    o->beta1 = d.beta1;
    o->beta2 = d.beta2;
    o->eps = d.eps;
    o->wd = d.weight_decay;
    return o;
}

oar_optimizer *oar_adam_new(int n, oar_tensor *const *params, const oar_adam_options *o) {
    return adam_new("adam_new", KIND_ADAM, n, params, o);
}

oar_optimizer *oar_adamw_new(int n, oar_tensor *const *params, const oar_adam_options *o) {
    return adam_new("adamw_new", KIND_ADAMW, n, params, o);
}

oar_optimizer *oar_rmsprop_new(int n, oar_tensor *const *params, const oar_rmsprop_options *opt) {
    oar_rmsprop_options d = opt ? *opt : (oar_rmsprop_options){0};
    if (d.lr == 0) d.lr = 1e-2;
    if (d.alpha == 0) d.alpha = 0.99;
    if (d.eps == 0) d.eps = 1e-8;
    if (!(d.lr > 0) || !(d.alpha > 0 && d.alpha < 1) || !(d.eps > 0) || !(d.weight_decay >= 0) ||
        !(d.momentum >= 0))
        return oari_error(OAR_ERR_INVALID,
                          "rmsprop_new: invalid options (lr %g, alpha %g, eps %g, weight_decay "
                          "%g, momentum %g): lr, eps > 0, alpha in (0, 1), the others >= 0",
                          d.lr, d.alpha, d.eps, d.weight_decay, d.momentum),
               NULL;
    oar_optimizer *o = make("rmsprop_new", KIND_RMSPROP, n, params);
    if (!o) return NULL;
    o->lr = d.lr;
    o->alpha = d.alpha;
    o->eps = d.eps;
    o->wd = d.weight_decay;
    o->momentum = d.momentum;
    o->centered = d.centered;
    return o;
}

/* A retained fresh copy of x (state tensors live outside pools). */
static oar_tensor *keep(oar_tensor *x) { return oar_tensor_retain(oar_clone(x)); }

/* Zeros laid out as p, for a state tensor: on a dtensor, a dtensor of
 * zero shards with p's placements (oar_zeros_like would make a plain
 * tensor of the global shape, which in-place updates from dtensors refuse). */
static oar_tensor *zeros_state(oar_tensor *p) {
    if (!oar_tensor_is_dist(p)) return oar_zeros_like(p);
    return oar_dtensor_from_local(oar_zeros_like(oar_dtensor_local(p)), oar_dtensor_mesh(p),
                                  oar_dtensor_placements(p), oar_tensor_shape(p));
}

/* dst += alpha * src: add_scaled_ in one pass on the CPU; composed of ops
 * that every device implements elsewhere (no CPU fallback there). */
static int axpy_(oar_tensor *dst, oar_tensor *src, double alpha) {
    oar_tensor *shard = oar_tensor_is_dist(dst) ? oar_dtensor_local(dst) : dst;
    if (oar_tensor_device(shard) == oar_device_cpu()) return oar_add_scaled_(dst, src, alpha);
    return oar_copy_(dst, oar_add(dst, oar_mul_scalar(src, alpha)));
}

/* torch.optim.SGD's update; the parameter moves in one pass (axpy_). */
static int sgd_update(oar_optimizer *o, int i, oar_tensor *p, oar_tensor *g) {
    if (o->wd) g = oar_add(g, oar_mul_scalar(p, o->wd));
    if (o->momentum) {
        if (!o->s1[i]) {
            if (!(o->s1[i] = keep(g))) return oari_fail_status();
        } else {
            oar_tensor *b =
                oar_add(oar_mul_scalar(o->s1[i], o->momentum), oar_mul_scalar(g, 1 - o->dampening));
            if (oar_copy_(o->s1[i], b)) return oari_fail_status();
        }
        g = o->nesterov ? oar_add(g, oar_mul_scalar(o->s1[i], o->momentum)) : o->s1[i];
    }
    return axpy_(p, g, -o->lr);
}

/* The fused update (the adam_update op, one pass) for plain tensors of a
 * real float dtype where p's device runs it; a dtensor, or a device
 * without the kernel, takes the composite below (each of its ops runs there). */
static bool fused_adam_here(const oar_tensor *p) {
    return !oar_tensor_is_dist(p) && oar_dtype_is_float(p->dtype) &&
           oari_fused_op_here(OARI_OP_adam_update, p);
}

/* p, m and v from one adam_update call, copied back into the tensors. */
static int adam_fused(oar_optimizer *o, oar_tensor *p, oar_tensor *g, oar_tensor *m, oar_tensor *v,
                      int64_t t) {
    oar_tensor *in[4] = {p, g, m, v}, *out[3] = {NULL, NULL, NULL};
    oari_attrs a = {.nf = 7,
                    .f = {o->lr, o->beta1, o->beta2, o->eps, o->wd, 1 - pow(o->beta1, (double)t),
                          1 - pow(o->beta2, (double)t)},
                    .ni = 1,
                    .i = {o->kind == KIND_ADAMW}};
    int st = oari_dispatch(OARI_OP_adam_update, 4, in, &a, out);
    if (!st && (oar_copy_(p, out[0]) || oar_copy_(m, out[1]) || oar_copy_(v, out[2])))
        st = oari_fail_status();
    for (int j = 0; j < 3; j++) oar_tensor_release(out[j]);
    return st;
}

/* torch's single-tensor Adam/AdamW, updated in place with axpy_ (m and v
 * moved by lerp), about 11 ops per parameter instead of 18; one fused op
 * where p's device has it. */
static int adam_update(oar_optimizer *o, int i, oar_tensor *p, oar_tensor *g) {
    int64_t t = ++o->pstep[i];
    if (!o->s1[i] || !o->s2[i]) { /* both moments, or neither (a partial state was refused on load) */
        oar_tensor_release(o->s1[i]);
        oar_tensor_release(o->s2[i]);
        o->s1[i] = oar_tensor_retain(zeros_state(p));
        o->s2[i] = oar_tensor_retain(zeros_state(p));
        if (!o->s1[i] || !o->s2[i]) return oari_fail_status();
    }
    if (fused_adam_here(p) && o->s1[i]->dtype == p->dtype)
        return adam_fused(o, p, g, o->s1[i], o->s2[i], t);
    if (o->kind == KIND_ADAMW && o->wd) {
        if (axpy_(p, p, -o->lr * o->wd)) return oari_fail_status();
    } else if (o->wd) {
        g = oar_add(g, oar_mul_scalar(p, o->wd));
    }
    oar_tensor *m = o->s1[i], *v = o->s2[i];
    /* m += (1 - beta1) (g - m); v += (1 - beta2) (g^2 - v) */
    if (axpy_(m, oar_sub(g, m), 1 - o->beta1) ||
        axpy_(v, oar_sub(oar_mul(g, g), v), 1 - o->beta2))
        return oari_fail_status();
    double bc1 = 1 - pow(o->beta1, (double)t), bc2 = 1 - pow(o->beta2, (double)t);
    oar_tensor *denom = oar_add_scalar(oar_div_scalar(oar_sqrt(v), sqrt(bc2)), o->eps);
    return axpy_(p, oar_div(m, denom), -o->lr / bc1);
}

/* torch.optim.RMSprop's update (foreach=False). */
static int rmsprop_update(oar_optimizer *o, int i, oar_tensor *p, oar_tensor *g) {
    o->pstep[i]++;
    if (o->wd) g = oar_add(g, oar_mul_scalar(p, o->wd));
    if (!o->s2[i]) {
        o->s2[i] = oar_tensor_retain(zeros_state(p));
        if (!o->s2[i]) return oari_fail_status();
    }
    if (o->centered && !o->s3[i] && !(o->s3[i] = oar_tensor_retain(zeros_state(p))))
        return oari_fail_status();
    if (o->momentum && !o->s1[i] && !(o->s1[i] = oar_tensor_retain(zeros_state(p))))
        return oari_fail_status();
    oar_tensor *sq = o->s2[i];
    if (oar_copy_(sq, oar_add(oar_mul_scalar(sq, o->alpha),
                              oar_mul_scalar(oar_mul(g, g), 1 - o->alpha))))
        return oari_fail_status();
    oar_tensor *avg;
    if (o->centered) {
        oar_tensor *ga = o->s3[i];
        if (oar_copy_(ga, oar_add(oar_mul_scalar(ga, o->alpha), oar_mul_scalar(g, 1 - o->alpha))))
            return oari_fail_status();
        avg = oar_add_scalar(oar_sqrt(oar_sub(sq, oar_mul(ga, ga))), o->eps);
    } else {
        avg = oar_add_scalar(oar_sqrt(sq), o->eps);
    }
    oar_tensor *upd = oar_div(g, avg);
    if (o->momentum) {
        oar_tensor *buf = o->s1[i];
        if (oar_copy_(buf, oar_add(oar_mul_scalar(buf, o->momentum), upd))) return oari_fail_status();
        upd = buf;
    }
    return oar_copy_(p, oar_sub(p, oar_mul_scalar(upd, o->lr)));
}

int oar_optim_step(oar_optimizer *o) {
    if (!o) return oari_error(OAR_ERR_INVALID, "optim_step: optimizer is NULL");
    int64_t prof_t0 = OARI_PROF_BEGIN(); /* profiler */
    int st = 0;
    oar_no_grad_push();
    for (int i = 0; i < o->n && !st; i++) {
        oar_tensor *p = o->params[i], *g = oar_tensor_grad(p);
        if (!g) continue;
        if (g->ndim != p->ndim || g->numel != p->numel) {
            char a[200], b[200];
            st = oari_error(OAR_ERR_INVALID,
                            "optim_step: gradient of shape %s does not match "
                            "parameter %d of shape %s",
                            oari_shape_str(a, g->ndim, g->shape), i,
                            oari_shape_str(b, p->ndim, p->shape));
            break;
        }
        oar_pool *pool = oar_pool_push();
        st = o->kind == KIND_SGD       ? sgd_update(o, i, p, g)
             : o->kind == KIND_RMSPROP ? rmsprop_update(o, i, p, g)
                                       : adam_update(o, i, p, g);
        oar_pool_pop(pool);
    }
    oar_no_grad_pop();
    if (!st) o->steps++;
    OARI_PROF_END(OAR_PROFILER_OPTIM, "optim_step", prof_t0, 0, NULL); /* profiler */
    return st;
}

void oar_optim_zero_grad(oar_optimizer *o) {
    if (!o) {
        oari_null_arg(__func__, "optimizer");
        return;
    }
    for (int i = 0; i < o->n; i++) {
        oar_tensor_zero_grad(o->params[i]);
    }
}

double oar_optim_lr(const oar_optimizer *o) {
    return o ? o->lr : (oari_null_arg(__func__, "optimizer"), NAN);
}

int oar_optim_set_lr(oar_optimizer *o, double lr) {
    if (!o) return oari_error(OAR_ERR_INVALID, "optim_set_lr: optimizer is NULL");
    if (!(lr >= 0)) return oari_error(OAR_ERR_INVALID, "optim_set_lr: lr %g must be >= 0", lr);
    o->lr = lr;
    return 0;
}

int64_t oar_optim_steps(const oar_optimizer *o) {
    return o ? o->steps : (oari_null_arg(__func__, "optimizer"), -1);
}

int oar_clip_grad_norm(int n, oar_tensor *const *params, double max_norm, double *total_norm) {
    if (n < 0 || (n && !params))
        return oari_error(OAR_ERR_INVALID, "clip_grad_norm: bad parameter list (n = %d)", n);
    if (!(max_norm > 0))
        return oari_error(OAR_ERR_INVALID, "clip_grad_norm: max_norm %g must be > 0", max_norm);
    int st = 0;
    double sq = 0;
    oar_no_grad_push();
    oar_pool *pool = oar_pool_push();
    for (int i = 0; i < n && !st; i++) {
        if (!params[i])
            st = oari_error(OAR_ERR_INVALID, "clip_grad_norm: parameter %d is NULL", i);
        else if (oar_tensor_grad(params[i])) {
            oar_tensor *g = oar_cast(oar_tensor_grad(params[i]), OAR_F64);
            double s = oar_tensor_item(oar_sum(oar_mul(g, g), 0, NULL, false));
            if (isnan(s) && oari_error_pending()) st = OAR_ERR_INVALID;
            sq += s;
        }
    }
    double norm = sqrt(sq);
    double coef = max_norm / (norm + 1e-6);
    for (int i = 0; i < n && !st && coef < 1; i++) {
        oar_tensor *g = oar_tensor_grad(params[i]);
        if (g) st = oar_copy_(g, oar_mul_scalar(g, coef));
    }
    oar_pool_pop(pool);
    oar_no_grad_pop();
    if (!st && total_norm) *total_norm = norm;
    return st;
}

/* ---- schedules ------------------------------------------------------------
 * Every schedule is a closed form of the epoch counter, so a schedule
 * restored with oar_lr_scheduler_set_epoch gives the same lrs as one that
 * stepped there. */

typedef enum { SCHED_STEP, SCHED_COSINE, SCHED_MULTISTEP, SCHED_LINEAR, SCHED_ONECYCLE } sched_kind;

struct oar_lr_scheduler {
    oar_optimizer *opt;
    sched_kind kind;
    int64_t period; /* step_size, t_max, total_iters or total_steps */
    double k;       /* gamma or eta_min */
    double f0, f1;  /* linear: start and end factors; one-cycle: max_lr, pct_start */
    double div, final_div;
    double base;
    int64_t epoch;
    int n_milestones;
    int64_t *milestones;
};

static double sched_lr(const oar_lr_scheduler *s, int64_t epoch) {
    double e = (double)epoch;
    switch (s->kind) {
    case SCHED_STEP:
        return s->base * pow(s->k, (double)(epoch / s->period));
    case SCHED_COSINE:
        return s->k + (s->base - s->k) * (1 + cos(M_PI * e / (double)s->period)) / 2;
    case SCHED_MULTISTEP: {
        int passed = 0;
        for (int i = 0; i < s->n_milestones; i++)
            passed += epoch >= s->milestones[i];
        return s->base * pow(s->k, passed);
    }
    case SCHED_LINEAR: {
        double t = epoch < s->period ? e / (double)s->period : 1;
        return s->base * (s->f0 + (s->f1 - s->f0) * t);
    }
    case SCHED_ONECYCLE: {
        /* torch OneCycleLR, two phases, cosine annealing */
        double initial = s->f0 / s->div, min_lr = initial / s->final_div;
        double end1 = s->f1 * (double)s->period - 1, end2 = (double)s->period - 1;
        double from, to, pct;
        if (e <= end1) {
            from = initial, to = s->f0, pct = e / end1;
        } else {
            from = s->f0, to = min_lr, pct = (e - end1) / (end2 - end1);
        }
        return to + (from - to) / 2 * (cos(M_PI * pct) + 1);
    }
    }
    return NAN;
}

static oar_lr_scheduler *sched_make(const char *what, oar_optimizer *opt, sched_kind kind) {
    if (!opt) return oari_error(OAR_ERR_INVALID, "%s: optimizer is NULL", what), NULL;
    oar_lr_scheduler *s = oari_calloc(1, sizeof *s);
    if (!s) return NULL;
    *s = (oar_lr_scheduler){.opt = opt, .kind = kind, .base = opt->lr};
    return s;
}

/* Sets the optimizer's lr to the epoch-0 value, as torch's schedulers do
 * when they are made. */
static oar_lr_scheduler *sched_start(oar_lr_scheduler *s) {
    s->opt->lr = sched_lr(s, 0);
    return s;
}

oar_lr_scheduler *oar_lr_step_new(oar_optimizer *opt, int64_t step_size, double gamma) {
    if (opt && (step_size <= 0 || !(gamma > 0)))
        return oari_error(OAR_ERR_INVALID, "lr_step_new: invalid arguments (%lld, %g)",
                          (long long)step_size, gamma),
               NULL;
    oar_lr_scheduler *s = sched_make("lr_step_new", opt, SCHED_STEP);
    if (!s) return NULL;
    s->period = step_size;
    s->k = gamma;
    return sched_start(s);
}

oar_lr_scheduler *oar_lr_cosine_new(oar_optimizer *opt, int64_t t_max, double eta_min) {
    if (opt && (t_max <= 0 || !(eta_min >= 0)))
        return oari_error(OAR_ERR_INVALID, "lr_cosine_new: invalid arguments (%lld, %g)",
                          (long long)t_max, eta_min),
               NULL;
    oar_lr_scheduler *s = sched_make("lr_cosine_new", opt, SCHED_COSINE);
    if (!s) return NULL;
    s->period = t_max;
    s->k = eta_min;
    return sched_start(s);
}

oar_lr_scheduler *oar_lr_multistep_new(oar_optimizer *opt, int n_milestones,
                                       const int64_t *milestones, double gamma) {
    if (opt && (n_milestones < 1 || !milestones || !(gamma > 0)))
        return oari_error(OAR_ERR_INVALID,
                          "lr_multistep_new: invalid arguments (%d milestones, gamma %g): "
                          "at least one milestone and gamma > 0",
                          n_milestones, gamma),
               NULL;
    for (int i = 0; opt && i < n_milestones; i++)
        if (milestones[i] < 1 || (i && milestones[i] <= milestones[i - 1]))
            return oari_error(OAR_ERR_INVALID,
                              "lr_multistep_new: milestone %d (%lld) must be >= 1 and "
                              "greater than the one before",
                              i, (long long)milestones[i]),
                   NULL;
    oar_lr_scheduler *s = sched_make("lr_multistep_new", opt, SCHED_MULTISTEP);
    if (!s) return NULL;
    s->milestones = oari_malloc((size_t)n_milestones * sizeof *s->milestones);
    if (!s->milestones) {
        oari_free(s, sizeof *s);
        return NULL;
    }
    memcpy(s->milestones, milestones, (size_t)n_milestones * sizeof *milestones);
    s->n_milestones = n_milestones;
    s->k = gamma;
    return sched_start(s);
}

oar_lr_scheduler *oar_lr_linear_new(oar_optimizer *opt, double start_factor, double end_factor,
                                    int64_t total_iters) {
    if (opt && (!(start_factor > 0 && start_factor <= 1) ||
                !(end_factor >= 0 && end_factor <= 1) || total_iters < 1))
        return oari_error(OAR_ERR_INVALID,
                          "lr_linear_new: invalid arguments (start_factor %g, end_factor %g, "
                          "total_iters %lld): start_factor in (0, 1], end_factor in [0, 1], "
                          "total_iters >= 1",
                          start_factor, end_factor, (long long)total_iters),
               NULL;
    oar_lr_scheduler *s = sched_make("lr_linear_new", opt, SCHED_LINEAR);
    if (!s) return NULL;
    s->f0 = start_factor;
    s->f1 = end_factor;
    s->period = total_iters;
    return sched_start(s);
}

oar_lr_scheduler *oar_lr_one_cycle_new(oar_optimizer *opt, double max_lr, int64_t total_steps,
                                       double pct_start, double div_factor,
                                       double final_div_factor) {
    if (div_factor == 0) div_factor = 25;
    if (final_div_factor == 0) final_div_factor = 1e4;
    if (opt && (!(max_lr > 0) || total_steps < 2 || !(pct_start > 0 && pct_start < 1) ||
                pct_start * (double)total_steps - 1 <= 0 ||
                pct_start * (double)total_steps >= (double)total_steps ||
                !(div_factor > 0) || !(final_div_factor > 0)))
        return oari_error(OAR_ERR_INVALID,
                          "lr_one_cycle_new: invalid arguments (max_lr %g, total_steps %lld, "
                          "pct_start %g, div_factor %g, final_div_factor %g): the warm-up "
                          "phase pct_start * total_steps must span more than one step and end "
                          "before the last",
                          max_lr, (long long)total_steps, pct_start, div_factor,
                          final_div_factor),
               NULL;
    oar_lr_scheduler *s = sched_make("lr_one_cycle_new", opt, SCHED_ONECYCLE);
    if (!s) return NULL;
    s->f0 = max_lr;
    s->f1 = pct_start;
    s->period = total_steps;
    s->div = div_factor;
    s->final_div = final_div_factor;
    return sched_start(s);
}

int oar_lr_scheduler_set_epoch(oar_lr_scheduler *s, int64_t epoch) {
    if (!s) return oari_error(OAR_ERR_INVALID, "lr_scheduler_set_epoch: scheduler is NULL");
    if (epoch < 0 || (s->kind == SCHED_ONECYCLE && epoch >= s->period))
        return oari_error(OAR_ERR_INVALID,
                          "lr_scheduler: epoch %lld is out of range%s", (long long)epoch,
                          s->kind == SCHED_ONECYCLE ? " (one-cycle: past total_steps - 1)" : "");
    s->epoch = epoch;
    s->opt->lr = sched_lr(s, epoch);
    return 0;
}

int oar_lr_scheduler_step(oar_lr_scheduler *s) {
    if (!s) return oari_error(OAR_ERR_INVALID, "lr_scheduler_step: scheduler is NULL");
    return oar_lr_scheduler_set_epoch(s, s->epoch + 1);
}

int64_t oar_lr_scheduler_epoch(const oar_lr_scheduler *s) {
    return s ? s->epoch : (oari_null_arg(__func__, "scheduler"), -1);
}

double oar_lr_scheduler_lr(const oar_lr_scheduler *s) {
    return s ? s->opt->lr : (oari_null_arg(__func__, "scheduler"), NAN);
}

void oar_lr_scheduler_free(oar_lr_scheduler *s) {
    if (!s) return;
    oari_free(s->milestones, (size_t)s->n_milestones * sizeof *s->milestones);
    oari_free(s, sizeof *s);
}

/* Optimizers, gradient clipping and learning-rate schedules. Updates are
 * written with public ops under no_grad and stored with oar_copy_, so the
 * parameters keep their identity (modules and graphs still point at them). */
#include "../core/core.h"
#include "../profiler/hooks.h" /* profiler hook */

#include <math.h>
#include <oar/autograd.h>
#include <oar/ops.h>
#include <oar/optim.h>

typedef enum { KIND_SGD, KIND_ADAM, KIND_ADAMW } optim_kind;

struct oar_optimizer {
    optim_kind kind;
    int n, cap;            /* cap: allocated length of the arrays (n, at least 1) */
    oar_tensor **params;   /* retained */
    oar_tensor **s1, **s2; /* momentum buffer / exp_avg, exp_avg_sq (retained, lazily made) */
    int64_t *pstep;        /* per-parameter step counts (Adam bias correction) */
    int64_t steps;
    double lr, momentum, dampening, wd, beta1, beta2, eps;
    bool nesterov;
};

void oar_optim_free(oar_optimizer *o) {
    if (!o) return;
    for (int i = 0; i < o->n; i++) {
        if (o->params) oar_tensor_release(o->params[i]);
        if (o->s1) oar_tensor_release(o->s1[i]);
        if (o->s2) oar_tensor_release(o->s2[i]);
    }
    size_t n = (size_t)o->cap;
    oari_free(o->params, n * sizeof *o->params);
    oari_free(o->s1, n * sizeof *o->s1);
    oari_free(o->s2, n * sizeof *o->s2);
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
    o->pstep = oari_calloc(m, sizeof *o->pstep);
    if (!o->params || !o->s1 || !o->s2 || !o->pstep) {
        /* free with the size each was allocated with */
        oari_free(o->params, m * sizeof *o->params);
        oari_free(o->s1, m * sizeof *o->s1);
        oari_free(o->s2, m * sizeof *o->s2);
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

/* A retained fresh copy of x (state tensors live outside pools). */
static oar_tensor *keep(oar_tensor *x) { return oar_tensor_retain(oar_clone(x)); }

static int sgd_update(oar_optimizer *o, int i, oar_tensor *p, oar_tensor *g) {
    if (o->wd) g = oar_add(g, oar_mul_scalar(p, o->wd));
    if (o->momentum) {
        if (!o->s1[i]) {
            if (!(o->s1[i] = keep(g))) return OAR_ERR_NOMEM;
        } else {
            oar_tensor *b =
                oar_add(oar_mul_scalar(o->s1[i], o->momentum), oar_mul_scalar(g, 1 - o->dampening));
            if (oar_copy_(o->s1[i], b)) return OAR_ERR_INVALID;
        }
        g = o->nesterov ? oar_add(g, oar_mul_scalar(o->s1[i], o->momentum)) : o->s1[i];
    }
    return oar_copy_(p, oar_sub(p, oar_mul_scalar(g, o->lr)));
}

static int adam_update(oar_optimizer *o, int i, oar_tensor *p, oar_tensor *g) {
    int64_t t = ++o->pstep[i];
    if (o->kind == KIND_ADAMW && o->wd) {
        if (oar_copy_(p, oar_mul_scalar(p, 1 - o->lr * o->wd))) return OAR_ERR_INVALID;
    } else if (o->wd) {
        g = oar_add(g, oar_mul_scalar(p, o->wd));
    }
    if (!o->s1[i]) {
        o->s1[i] = oar_tensor_retain(oar_zeros_like(p));
        o->s2[i] = oar_tensor_retain(oar_zeros_like(p));
        if (!o->s1[i] || !o->s2[i]) return OAR_ERR_NOMEM;
    }
    oar_tensor *m = o->s1[i], *v = o->s2[i];
    if (oar_copy_(m, oar_add(oar_mul_scalar(m, o->beta1), oar_mul_scalar(g, 1 - o->beta1))))
        return OAR_ERR_INVALID;
    if (oar_copy_(
            v, oar_add(oar_mul_scalar(v, o->beta2), oar_mul_scalar(oar_mul(g, g), 1 - o->beta2))))
        return OAR_ERR_INVALID;
    double bc1 = 1 - pow(o->beta1, (double)t), bc2 = 1 - pow(o->beta2, (double)t);
    oar_tensor *denom = oar_add_scalar(oar_div_scalar(oar_sqrt(v), sqrt(bc2)), o->eps);
    oar_tensor *upd = oar_mul_scalar(oar_div(m, denom), o->lr / bc1);
    return oar_copy_(p, oar_sub(p, upd));
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
        st = o->kind == KIND_SGD ? sgd_update(o, i, p, g) : adam_update(o, i, p, g);
        oar_pool_pop(pool);
    }
    oar_no_grad_pop();
    if (!st) o->steps++;
    OARI_PROF_END(OAR_PROFILER_OPTIM, "optim_step", prof_t0, 0, NULL); /* profiler */
    return st;
}

void oar_optim_zero_grad(oar_optimizer *o) {
    if (!o) return;
    for (int i = 0; i < o->n; i++) {
        oar_tensor_zero_grad(o->params[i]);
    }
}

double oar_optim_lr(const oar_optimizer *o) { return o ? o->lr : NAN; }

int oar_optim_set_lr(oar_optimizer *o, double lr) {
    if (!o) return oari_error(OAR_ERR_INVALID, "optim_set_lr: optimizer is NULL");
    if (!(lr >= 0)) return oari_error(OAR_ERR_INVALID, "optim_set_lr: lr %g must be >= 0", lr);
    o->lr = lr;
    return 0;
}

int64_t oar_optim_steps(const oar_optimizer *o) { return o ? o->steps : -1; }

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

/* ---- schedules ------------------------------------------------------------ */

struct oar_lr_scheduler {
    oar_optimizer *opt;
    bool cosine;
    int64_t period; /* step_size or t_max */
    double k;       /* gamma or eta_min */
    double base;
    int64_t epoch;
};

static oar_lr_scheduler *sched_new(const char *what, oar_optimizer *opt, bool cosine,
                                   int64_t period, double k) {
    if (!opt) return oari_error(OAR_ERR_INVALID, "%s: optimizer is NULL", what), NULL;
    if (period <= 0 || (!cosine && !(k > 0)) || (cosine && !(k >= 0)))
        return oari_error(OAR_ERR_INVALID, "%s: invalid arguments (%lld, %g)", what,
                          (long long)period, k),
               NULL;
    oar_lr_scheduler *s = oari_calloc(1, sizeof *s);
    if (!s) return NULL;
    *s =
        (oar_lr_scheduler){.opt = opt, .cosine = cosine, .period = period, .k = k, .base = opt->lr};
    return s;
}

oar_lr_scheduler *oar_lr_step_new(oar_optimizer *opt, int64_t step_size, double gamma) {
    return sched_new("lr_step_new", opt, false, step_size, gamma);
}

oar_lr_scheduler *oar_lr_cosine_new(oar_optimizer *opt, int64_t t_max, double eta_min) {
    return sched_new("lr_cosine_new", opt, true, t_max, eta_min);
}

int oar_lr_scheduler_step(oar_lr_scheduler *s) {
    if (!s) return oari_error(OAR_ERR_INVALID, "lr_scheduler_step: scheduler is NULL");
    s->epoch++;
    double lr;
    if (s->cosine)
        lr = s->k + (s->base - s->k) * (1 + cos(M_PI * (double)s->epoch / (double)s->period)) / 2;
    else
        lr = s->base * pow(s->k, (double)(s->epoch / s->period));
    s->opt->lr = lr;
    return 0;
}

double oar_lr_scheduler_lr(const oar_lr_scheduler *s) { return s ? s->opt->lr : NAN; }

void oar_lr_scheduler_free(oar_lr_scheduler *s) {
    if (s) oari_free(s, sizeof *s);
}

/* Dynamic loss scaling (include/oar/amp.h), torch.cuda.amp.GradScaler's
 * state machine: per optimizer READY -> UNSCALED -> STEPPED between two
 * updates; update backs the scale off on inf/nan or grows it after
 * growth_interval clean iterations. */
#include "optim.h"

#include <oar/amp.h>
#include <oar/autograd.h>
#include <oar/ops.h>
#include <math.h>

#define SCALER_MAX_OPTIMIZERS 8

typedef enum stage { STAGE_UNSCALED = 1, STAGE_STEPPED = 2 } stage;

struct oar_grad_scaler {
    double scale, growth, backoff;
    int64_t growth_interval, growth_tracker;
    /* the optimizers unscaled or stepped since the last update */
    int n_seen;
    struct {
        const oar_optimizer *opt;
        stage stage;
        bool found_inf;
    } seen[SCALER_MAX_OPTIMIZERS];
    bool list_unscaled, list_found_inf; /* oar_grad_scaler_unscale_params */
    bool last_skipped;
};

oar_grad_scaler *oar_grad_scaler_new(double init_scale, double growth_factor, double backoff_factor,
                                     int64_t growth_interval) {
    if (!(init_scale > 0) || !isfinite(init_scale) || !(growth_factor > 1) || !isfinite(growth_factor) ||
        !(backoff_factor > 0 && backoff_factor < 1) || growth_interval < 1)
        return oari_error(OAR_ERR_INVALID, "grad_scaler_new: need init_scale > 0 finite (got %g), "
                          "growth_factor > 1 (got %g), backoff_factor in (0, 1) (got %g), "
                          "growth_interval >= 1 (got %lld); torch's defaults are 65536, 2, 0.5, 2000",
                          init_scale, growth_factor, backoff_factor, (long long)growth_interval),
               NULL;
    oar_grad_scaler *s = oari_calloc(1, sizeof *s);
    if (!s) return NULL;
    s->scale = init_scale;
    s->growth = growth_factor;
    s->backoff = backoff_factor;
    s->growth_interval = growth_interval;
    return s;
}

void oar_grad_scaler_free(oar_grad_scaler *s) {
    if (s) oari_free(s, sizeof *s);
}

oar_tensor *oar_grad_scaler_scale(oar_grad_scaler *s, oar_tensor *loss) {
    if (!s) return oari_error(OAR_ERR_INVALID, "grad_scaler_scale: scaler is NULL"), NULL;
    if (!loss) {
        if (!oari_error_pending()) oari_error(OAR_ERR_INVALID, "grad_scaler_scale: loss is NULL");
        return NULL;
    }
    return oar_mul_scalar(loss, s->scale);
}

/* Divides every gradient by the scale in place; *found_inf |= a non-finite
 * element (checked after dividing, as torch's _amp_foreach_non_finite_check_and_unscale_). */
static int unscale_grads(const oar_grad_scaler *s, int n, oar_tensor *const *params, bool *found_inf) {
    int st = 0;
    double inv = 1.0 / s->scale;
    oar_no_grad_push();
    for (int i = 0; i < n && !st; i++) {
        oar_tensor *g = params[i] ? oar_tensor_grad(params[i]) : NULL;
        if (!g) continue;
        oar_pool *p = oar_pool_push();
        oar_tensor *u = oar_mul_scalar(g, inv);
        st = u ? oar_copy_(g, u) : oari_fail_status();
        if (!st && oar_dtype_is_float(g->dtype)) {
            oar_tensor *bad = oar_any(oar_logical_or(oar_isnan(g), oar_isinf(g)), 0, NULL, false);
            if (!bad) st = oari_fail_status();
            else if (oar_tensor_item(bad) != 0) *found_inf = true;
        }
        oar_pool_pop(p);
    }
    oar_no_grad_pop();
    return st;
}

static int record_of(oar_grad_scaler *s, const oar_optimizer *opt, const char *api) {
    for (int k = 0; k < s->n_seen; k++)
        if (s->seen[k].opt == opt) return k;
    if (s->n_seen == SCALER_MAX_OPTIMIZERS)
        return oari_error(OAR_ERR_STATE, "%s: more than %d optimizers between two updates",
                          api, SCALER_MAX_OPTIMIZERS);
    int k = s->n_seen++;
    s->seen[k].opt = opt;
    s->seen[k].stage = 0;
    s->seen[k].found_inf = false;
    return k;
}

int oar_grad_scaler_unscale(oar_grad_scaler *s, oar_optimizer *opt) {
    if (!s || !opt) return oari_error(OAR_ERR_INVALID, "grad_scaler_unscale: scaler or optimizer is NULL");
    int k = record_of(s, opt, "grad_scaler_unscale");
    if (k < 0) return k;
    if (s->seen[k].stage == STAGE_UNSCALED)
        return oari_error(OAR_ERR_STATE, "grad_scaler_unscale: already called on this optimizer since "
                          "the last update");
    if (s->seen[k].stage == STAGE_STEPPED)
        return oari_error(OAR_ERR_STATE, "grad_scaler_unscale: called after grad_scaler_step on this "
                          "optimizer; call grad_scaler_update first");
    bool found = false;
    int st = unscale_grads(s, opt->n, opt->params, &found);
    if (st) {
        if (s->seen[k].stage == 0) s->n_seen--; /* leave no trace of a failed call */
        return st;
    }
    s->seen[k].stage = STAGE_UNSCALED;
    s->seen[k].found_inf = found;
    return 0;
}

int oar_grad_scaler_unscale_params(oar_grad_scaler *s, int n, oar_tensor *const *params) {
    if (!s || n < 0 || (n > 0 && !params))
        return oari_error(OAR_ERR_INVALID, "grad_scaler_unscale_params: scaler or params is NULL (n = %d)", n);
    bool found = false;
    int st = unscale_grads(s, n, params, &found);
    if (st) return st;
    s->list_unscaled = true;
    s->list_found_inf = s->list_found_inf || found;
    return 0;
}

int oar_grad_scaler_step(oar_grad_scaler *s, oar_optimizer *opt) {
    if (!s || !opt) return oari_error(OAR_ERR_INVALID, "grad_scaler_step: scaler or optimizer is NULL");
    int k = record_of(s, opt, "grad_scaler_step");
    if (k < 0) return k;
    if (s->seen[k].stage == STAGE_STEPPED)
        return oari_error(OAR_ERR_STATE, "grad_scaler_step: already called on this optimizer since the "
                          "last update");
    if (s->seen[k].stage == 0) {
        int st = oar_grad_scaler_unscale(s, opt);
        if (st) return st;
    }
    s->seen[k].stage = STAGE_STEPPED;
    s->last_skipped = s->seen[k].found_inf;
    return s->last_skipped ? 0 : oar_optim_step(opt);
}

int oar_grad_scaler_update(oar_grad_scaler *s) {
    if (!s) return oari_error(OAR_ERR_INVALID, "grad_scaler_update: scaler is NULL");
    if (!s->n_seen && !s->list_unscaled)
        return oari_error(OAR_ERR_STATE, "grad_scaler_update: no gradients were unscaled since the last "
                          "update (call grad_scaler_step or grad_scaler_unscale first)");
    bool found = oar_grad_scaler_found_inf(s);
    if (found) {
        s->scale *= s->backoff;
        s->growth_tracker = 0;
    } else if (++s->growth_tracker == s->growth_interval) {
        double grown = s->scale * s->growth;
        if (isfinite(grown)) s->scale = grown;
        s->growth_tracker = 0;
    }
    s->n_seen = 0;
    s->list_unscaled = s->list_found_inf = false;
    return 0;
}

double oar_grad_scaler_get_scale(const oar_grad_scaler *s) { return s ? s->scale : NAN; }

int64_t oar_grad_scaler_growth_tracker(const oar_grad_scaler *s) { return s ? s->growth_tracker : -1; }

bool oar_grad_scaler_found_inf(const oar_grad_scaler *s) {
    if (!s) return false;
    bool found = s->list_found_inf;
    for (int k = 0; k < s->n_seen; k++) found = found || s->seen[k].found_inf;
    return found;
}

bool oar_grad_scaler_step_skipped(const oar_grad_scaler *s) { return s && s->last_skipped; }

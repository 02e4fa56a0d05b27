/* AMP O2 (include/oar/amp.h): the model's f32 parameters are replaced by
 * low-precision copies, and the optimizer updates f32 masters that keep
 * the small increments a bf16 weight would round away. */
#include "module.h"

#include <oar/amp.h>
#include <oar/autograd.h>
#include <oar/ops.h>

struct oar_amp_o2 {
    oar_module *model;
    int n;
    oar_tensor **master; /* retained, f32 (the model's original parameters) */
    oar_tensor **param;  /* retained, the model's parameters now (low copies) */
};

void oar_amp_o2_free(oar_amp_o2 *o2) {
    if (!o2) return;
    for (int i = 0; i < o2->n; i++) {
        oar_tensor_release(o2->master[i]);
        oar_tensor_release(o2->param[i]);
    }
    if (o2->master) oari_free(o2->master, (size_t)o2->n * sizeof *o2->master);
    if (o2->param) oari_free(o2->param, (size_t)o2->n * sizeof *o2->param);
    oari_free(o2, sizeof *o2);
}

/* Replaces every f32 parameter of m and its children by its low copy
 * (found by identity among the masters, so tied parameters stay tied). */
static void swap_params(oar_module *m, const oar_amp_o2 *o2) {
    for (int k = 0; k < m->n_tensors; k++) {
        if (!m->tensors[k].param) continue;
        for (int i = 0; i < o2->n; i++) {
            if (m->tensors[k].t != o2->master[i] || o2->param[i] == o2->master[i]) continue;
            oar_tensor_release(m->tensors[k].t);
            m->tensors[k].t = oar_tensor_retain(o2->param[i]);
            break;
        }
    }
    m->state_valid = false;
    for (int c = 0; c < m->n_children; c++) swap_params(m->children[c].m, o2);
}

oar_amp_o2 *oar_amp_o2_new(oar_module *model, oar_dtype low) {
    if (!model) return oari_error(OAR_ERR_INVALID, "amp_o2_new: model is NULL"), NULL;
    if (low != OAR_BF16 && low != OAR_F16)
        return oari_error(OAR_ERR_INVALID, "amp_o2_new: low dtype must be bf16 or f16, got %s",
                          (unsigned)low < OAR_DTYPE_COUNT ? oar_dtype_name(low) : "(invalid)"),
               NULL;
    int n = oar_module_parameters(model, NULL, 0);
    if (n < 0) return NULL;
    if (n == 0) return oari_error(OAR_ERR_INVALID, "amp_o2_new: the model has no parameters"), NULL;
    oar_amp_o2 *o2 = oari_calloc(1, sizeof *o2);
    if (!o2) return NULL;
    o2->model = model;
    o2->master = oari_calloc((size_t)n, sizeof *o2->master);
    o2->param = oari_calloc((size_t)n, sizeof *o2->param);
    if (!o2->master || !o2->param) {
        oar_amp_o2_free(o2);
        return NULL;
    }
    o2->n = n;
    oar_module_parameters(model, o2->master, n);
    for (int i = 0; i < n; i++) oar_tensor_retain(o2->master[i]);
    int st = 0;
    oar_no_grad_push();
    for (int i = 0; i < n && !st; i++) {
        oar_tensor *p = o2->master[i];
        if (p->dtype != OAR_F32) { /* f64 or already low: kept as it is, and its own master */
            o2->param[i] = oar_tensor_retain(p);
            continue;
        }
        oar_tensor *c = oari_tensor_empty(NULL, low, p->ndim, p->shape);
        st = c ? oar_copy_(c, p) : oari_fail_status();
        if (!st) st = oar_tensor_set_requires_grad(c, true);
        o2->param[i] = c;
    }
    oar_no_grad_pop();
    if (st) {
        oar_amp_o2_free(o2);
        return NULL;
    }
    swap_params(model, o2);
    return o2;
}

int oar_amp_o2_master_params(const oar_amp_o2 *o2, oar_tensor **out, int max) {
    if (!o2 || (max > 0 && !out) || max < 0)
        return oari_error(OAR_ERR_INVALID, "amp_o2_master_params: o2 or out is NULL (max = %d)", max);
    for (int i = 0; i < o2->n && i < max; i++) out[i] = o2->master[i];
    return o2->n;
}

int oar_amp_o2_step(oar_amp_o2 *o2, oar_optimizer *opt, oar_grad_scaler *scaler) {
    if (!o2 || !opt) return oari_error(OAR_ERR_INVALID, "amp_o2_step: o2 or optimizer is NULL");
    int st = 0;
    oar_pool *pool = oar_pool_push();
    oar_no_grad_push();
    for (int i = 0; i < o2->n && !st; i++) { /* the model's gradients, as f32, onto the masters */
        oar_tensor *p = o2->param[i], *m = o2->master[i];
        if (p == m || !p->grad) continue;
        oar_tensor *g = oar_tensor_retain(oar_cast(p->grad, OAR_F32));
        if (!g) {
            st = oari_fail_status();
            break;
        }
        oar_tensor_release(m->grad);
        m->grad = g;
        oar_tensor_release(p->grad);
        p->grad = NULL;
    }
    oar_no_grad_pop();
    if (!st) st = scaler ? oar_grad_scaler_step(scaler, opt) : oar_optim_step(opt);
    bool stepped = !st && !(scaler && oar_grad_scaler_step_skipped(scaler));
    oar_no_grad_push();
    for (int i = 0; i < o2->n && stepped && !st; i++)
        if (o2->param[i] != o2->master[i]) st = oar_copy_(o2->param[i], o2->master[i]);
    oar_no_grad_pop();
    oar_pool_pop(pool);
    return st;
}

/* Initialisers: in-place fills drawn from the global generator, without
 * recording gradients (torch.nn.init). */
#include "../core/core.h"

#include <math.h>
#include <oar/autograd.h>
#include <oar/nn.h>
#include <oar/ops.h>

static int check(const char *what, const oar_tensor *t) {
    if (!t) {
        if (!oari_error_pending()) oari_error(OAR_ERR_INVALID, "%s: tensor is NULL", what);
        return OAR_ERR_INVALID;
    }
    if (!oar_dtype_is_float(t->dtype))
        return oari_error(OAR_ERR_INVALID, "%s: expected a floating tensor, got %s", what,
                          oar_dtype_name(t->dtype));
    return 0;
}

int oar_init_uniform_(oar_tensor *t, double low, double high) {
    int st = check("init_uniform_", t);
    if (st) return st;
    oar_no_grad_push();
    st = oar_uniform_(t, low, high);
    oar_no_grad_pop();
    return st;
}

int oar_init_normal_(oar_tensor *t, double mean, double std) {
    int st = check("init_normal_", t);
    if (st) return st;
    oar_no_grad_push();
    st = oar_normal_(t, mean, std);
    oar_no_grad_pop();
    return st;
}

static int fill(const char *what, oar_tensor *t, double v) {
    if (!t) {
        if (!oari_error_pending()) oari_error(OAR_ERR_INVALID, "%s: tensor is NULL", what);
        return OAR_ERR_INVALID;
    }
    oar_no_grad_push();
    int st = oar_fill_(t, v);
    oar_no_grad_pop();
    return st;
}

int oar_init_zeros_(oar_tensor *t) { return fill("init_zeros_", t, 0); }
int oar_init_ones_(oar_tensor *t) { return fill("init_ones_", t, 1); }

int oar_init_fans(const oar_tensor *t, int64_t *fan_in, int64_t *fan_out) {
    if (!t) return oari_error(OAR_ERR_INVALID, "init_fans: tensor is NULL");
    if (t->ndim < 2) {
        char s[200];
        return oari_error(OAR_ERR_INVALID,
                          "init_fans: fan in and fan out need at least 2 dims, "
                          "got shape %s",
                          oari_shape_str(s, t->ndim, t->shape));
    }
    int64_t field = 1;
    for (int i = 2; i < t->ndim; i++)
        field *= t->shape[i];
    if (fan_in) *fan_in = t->shape[1] * field;
    if (fan_out) *fan_out = t->shape[0] * field;
    return 0;
}

int oar_init_xavier_uniform_(oar_tensor *t, double gain) {
    int64_t fi, fo;
    int st = check("init_xavier_uniform_", t);
    if (st || (st = oar_init_fans(t, &fi, &fo))) return st;
    if (fi + fo == 0) return 0;
    double a = gain * sqrt(6.0 / (double)(fi + fo));
    return oar_init_uniform_(t, -a, a);
}

int oar_init_kaiming_uniform_(oar_tensor *t, double a) {
    int64_t fi;
    int st = check("init_kaiming_uniform_", t);
    if (st || (st = oar_init_fans(t, &fi, NULL))) return st;
    if (fi == 0) return 0;
    double gain = sqrt(2.0 / (1.0 + a * a));
    double bound = gain * sqrt(3.0 / (double)fi);
    return oar_init_uniform_(t, -bound, bound);
}

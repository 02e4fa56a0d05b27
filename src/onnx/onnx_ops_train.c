/* ONNX import, the ai.onnx.preview.training optimizer ops (Adagrad,
 * Momentum, Adam, domain version 1): one update step written with oar ops,
 * for n tensors at once (inputs R, T, then n of each of X, G and the
 * states; outputs the new X, then the new states). */
#define OARI_ONNX_PROTO
#include "onnx_internal.h"
#include <string.h>

/* n: the tensors updated, given states per tensor (1 or 2). */
static int groups(oari_onnx_node *nd, int states, int *n) {
    int st = oari_onnx_need(nd, nd->n_in);
    if (st) return st;
    if (nd->n_in < 2 || (nd->n_in - 2) % (2 + states))
        return oari_error(OAR_ERR_INVALID, "%d inputs: expected R, T and %d groups of n", nd->n_in, 2 + states);
    *n = (nd->n_in - 2) / (2 + states);
    if (nd->n_out != (1 + states) * *n) return oari_error(OAR_ERR_INVALID, "%d outputs for %d tensors", nd->n_out, *n);
    return 0;
}

/* norm_coefficient * x + g */
static oar_tensor *regularized(oari_onnx_node *nd, oar_tensor *x, oar_tensor *g) {
    double nc = oari_onnx_attr_f(nd, "norm_coefficient", 0.0);
    return nc != 0 ? oar_add(oar_mul_scalar(x, nc), g) : g;
}

int oari_onnx_conv_adagrad(oari_onnx_node *nd) {
    int n, st = groups(nd, 1, &n);
    if (st) return st;
    double eps = oari_onnx_attr_f(nd, "epsilon", 1e-6), decay = oari_onnx_attr_f(nd, "decay_factor", 0.0);
    oar_tensor *R = nd->in[0], *T = nd->in[1];
    oar_tensor *r = oar_div(R, oar_add_scalar(oar_mul_scalar(oar_cast(T, oar_tensor_dtype(R)), decay), 1.0));
    for (int i = 0; i < n; i++) {
        oar_tensor *x = nd->in[2 + i], *g = regularized(nd, x, nd->in[2 + n + i]), *h = nd->in[2 + 2 * n + i];
        oar_tensor *hn = oar_add(h, oar_square(g));
        nd->out[i] = oar_sub(x, oar_div(oar_mul(r, g), oar_add_scalar(oar_sqrt(hn), eps)));
        nd->out[n + i] = hn;
        if (!nd->out[i] || !hn) return OAR_ERR_INVALID;
    }
    return 0;
}

int oari_onnx_conv_momentum(oari_onnx_node *nd) {
    int n, st = groups(nd, 1, &n);
    if (st) return st;
    double alpha = oari_onnx_attr_f(nd, "alpha", 0.0), beta = oari_onnx_attr_f(nd, "beta", 0.0);
    bool nesterov = oari_onnx_attr_s_is(nd, "mode", "standard", "nesterov");
    if (!nesterov && !oari_onnx_attr_s_is(nd, "mode", "standard", "standard")) return oari_error(OAR_ERR_INVALID, "unknown mode");
    oar_tensor *R = nd->in[0], *T = nd->in[1];
    oar_dtype dt = oar_tensor_dtype(R);
    /* beta at T > 0, 1 on the first step */
    oar_tensor *b = oar_where(oar_gt(T, oari_onnx_scalar(0, oar_tensor_dtype(T))), oari_onnx_scalar(beta, dt),
                              oari_onnx_scalar(1, dt));
    for (int i = 0; i < n; i++) {
        oar_tensor *x = nd->in[2 + i], *g = regularized(nd, x, nd->in[2 + n + i]), *v = nd->in[2 + 2 * n + i];
        oar_tensor *vn = oar_add(oar_mul_scalar(v, alpha), oar_mul(b, g));
        oar_tensor *step = nesterov ? oar_add(g, oar_mul_scalar(vn, alpha)) : vn;
        nd->out[i] = oar_sub(x, oar_mul(R, step));
        nd->out[n + i] = vn;
        if (!nd->out[i] || !vn) return OAR_ERR_INVALID;
    }
    return 0;
}

int oari_onnx_conv_adam(oari_onnx_node *nd) {
    int n, st = groups(nd, 2, &n);
    if (st) return st;
    double alpha = oari_onnx_attr_f(nd, "alpha", 0.9), beta = oari_onnx_attr_f(nd, "beta", 0.999);
    double eps = oari_onnx_attr_f(nd, "epsilon", 1e-6), post = oari_onnx_attr_f(nd, "norm_coefficient_post", 0.0);
    oar_tensor *R = nd->in[0], *T = nd->in[1];
    oar_dtype dt = oar_tensor_dtype(R);
    oar_tensor *t = oar_cast(T, OAR_F64);
    /* R sqrt(1 - beta^T) / (1 - alpha^T) at T > 0, R on the first step */
    oar_tensor *corr = oar_div(oar_sqrt(oar_add_scalar(oar_neg(oar_pow(oari_onnx_scalar(beta, OAR_F64), t)), 1.0)),
                               oar_add_scalar(oar_neg(oar_pow(oari_onnx_scalar(alpha, OAR_F64), t)), 1.0));
    oar_tensor *r = oar_where(oar_gt(T, oari_onnx_scalar(0, oar_tensor_dtype(T))), oar_cast(oar_mul(oar_cast(R, OAR_F64), corr), dt), R);
    for (int i = 0; i < n; i++) {
        oar_tensor *x = nd->in[2 + i], *g = regularized(nd, x, nd->in[2 + n + i]);
        oar_tensor *v = nd->in[2 + 2 * n + i], *h = nd->in[2 + 3 * n + i];
        oar_tensor *vn = oar_add(oar_mul_scalar(v, alpha), oar_mul_scalar(g, 1 - alpha));
        oar_tensor *hn = oar_add(oar_mul_scalar(h, beta), oar_mul_scalar(oar_square(g), 1 - beta));
        oar_tensor *xn = oar_sub(x, oar_mul(r, oar_div(vn, oar_add_scalar(oar_sqrt(hn), eps))));
        nd->out[i] = post != 0 ? oar_mul_scalar(xn, 1 - post) : xn;
        nd->out[n + i] = vn;
        nd->out[2 * n + i] = hn;
        if (!nd->out[i] || !vn || !hn) return OAR_ERR_INVALID;
    }
    return 0;
}

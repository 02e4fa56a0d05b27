/* The built-in modules: each is a constructor that registers parameters
 * and buffers with PyTorch's default initialisation, and a forward
 * function written with public ops. */
#include "module.h"

#include <math.h>
#include <stdio.h>
#include <oar/autograd.h>
#include <oar/ops.h>

/* Adds a fresh parameter of the given shape (uninitialised f32), returns it
 * borrowed or NULL. */
static oar_tensor *new_param(oar_module *m, const char *name, int ndim, const int64_t *shape,
                             bool param) {
    oar_tensor *t = oari_tensor_empty(NULL, OAR_F32, ndim, shape);
    if (!t) return NULL;
    int st = param ? oar_module_add_parameter(m, name, t) : oar_module_add_buffer(m, name, t);
    oar_tensor_release(t);
    return st ? NULL : t;
}

static oar_module *fail(oar_module *m) {
    oar_module_free(m);
    return NULL;
}

/* The weight (Kaiming-uniform with a = sqrt(5)) and, if asked, a bias of
 * n_bias entries uniform in +-1/sqrt(fan_in): PyTorch's default for linear
 * and convolution layers. 0, or an error status. */
static int add_weight_bias(oar_module *m, int ndim, const int64_t *ws, bool bias, int64_t n_bias) {
    oar_tensor *w = new_param(m, "weight", ndim, ws, true);
    if (!w || oar_init_kaiming_uniform_(w, sqrt(5.0))) return OAR_ERR_INVALID;
    if (!bias) return 0;
    int64_t fan_in = 0;
    if (oar_init_fans(w, &fan_in, NULL)) return OAR_ERR_INVALID;
    double bound = fan_in > 0 ? 1.0 / sqrt((double)fan_in) : 0;
    oar_tensor *b = new_param(m, "bias", 1, &n_bias, true);
    return !b || oar_init_uniform_(b, -bound, bound) ? OAR_ERR_INVALID : 0;
}

/* ---- Linear ------------------------------------------------------------- */

static oar_tensor *linear_forward(oar_module *m, oar_tensor *x) {
    oar_tensor *w = m->tensors[0].t;
    oar_tensor *b = m->n_tensors > 1 ? m->tensors[1].t : NULL;
    if (x->ndim < 1 || x->shape[x->ndim - 1] != m->cfg[0]) {
        char s[200];
        return oari_error(OAR_ERR_INVALID,
                          "Linear: input of shape %s does not end in in_features "
                          "%lld",
                          oari_shape_str(s, x->ndim, x->shape), (long long)m->cfg[0]),
               NULL;
    }
    oar_pool *p = oar_pool_push();
    oar_tensor *y = oar_matmul(x, oar_transpose(w, 0, 1));
    if (b) y = oar_add(y, b);
    return oari_pool_return(p, y);
}

oar_module *oar_linear_new(int64_t in_features, int64_t out_features, bool bias) {
    if (in_features <= 0 || out_features <= 0)
        return oari_error(OAR_ERR_INVALID,
                          "linear_new: features must be positive, got in %lld out "
                          "%lld",
                          (long long)in_features, (long long)out_features),
               NULL;
    oar_module *m = oar_module_new("Linear", linear_forward, NULL, NULL);
    if (!m) return NULL;
    m->cfg[0] = in_features;
    m->cfg[1] = out_features;
    int64_t ws[2] = {out_features, in_features};
    if (add_weight_bias(m, 2, ws, bias, out_features)) return fail(m);
    return m;
}

/* ---- Conv2d ------------------------------------------------------------- */

static oar_tensor *conv2d_forward(oar_module *m, oar_tensor *x) {
    oar_tensor *w = m->tensors[0].t;
    oar_tensor *b = m->n_tensors > 1 ? m->tensors[1].t : NULL;
    int64_t stride[2] = {m->cfg[0], m->cfg[0]}, pad[2] = {m->cfg[1], m->cfg[1]};
    int64_t dil[2] = {m->cfg[2], m->cfg[2]};
    return oar_conv2d(x, w, b, stride, pad, dil, m->cfg[3]);
}

oar_module *oar_conv2d_new(int64_t in_channels, int64_t out_channels, int64_t kernel,
                           int64_t stride, int64_t padding, int64_t dilation, int64_t groups,
                           bool bias) {
    if (in_channels <= 0 || out_channels <= 0 || kernel <= 0 || stride <= 0 || padding < 0 ||
        dilation <= 0 || groups <= 0 || in_channels % groups || out_channels % groups)
        return oari_error(OAR_ERR_INVALID,
                          "conv2d_new: invalid arguments (in %lld, out %lld, "
                          "kernel %lld, stride %lld, padding %lld, dilation %lld, groups %lld); "
                          "channels must divide by groups",
                          (long long)in_channels, (long long)out_channels, (long long)kernel,
                          (long long)stride, (long long)padding, (long long)dilation,
                          (long long)groups),
               NULL;
    oar_module *m = oar_module_new("Conv2d", conv2d_forward, NULL, NULL);
    if (!m) return NULL;
    m->cfg[0] = stride;
    m->cfg[1] = padding;
    m->cfg[2] = dilation;
    m->cfg[3] = groups;
    int64_t ws[4] = {out_channels, in_channels / groups, kernel, kernel};
    if (add_weight_bias(m, 4, ws, bias, out_channels)) return fail(m);
    return m;
}

/* ---- BatchNorm ------------------------------------------------------------ */

static oar_tensor *batch_norm_forward(oar_module *m, oar_tensor *x) {
    bool affine = m->cfg[0];
    int want = (int)m->cfg[1]; /* 4 for 2d; 2 or 3 for 1d */
    if (want == 4 ? x->ndim != 4 : (x->ndim != 2 && x->ndim != 3)) {
        char s[200];
        return oari_error(OAR_ERR_INVALID, "%s: expected a %s input, got shape %s", m->type,
                          want == 4 ? "4-D [N, C, H, W]" : "2-D or 3-D [N, C(, L)]",
                          oari_shape_str(s, x->ndim, x->shape)),
               NULL;
    }
    oar_tensor *w = affine ? m->tensors[0].t : NULL, *b = affine ? m->tensors[1].t : NULL;
    int k = affine ? 2 : 0;
    oar_tensor *rm = m->tensors[k].t, *rv = m->tensors[k + 1].t, *nbt = m->tensors[k + 2].t;
    oar_tensor *y = oar_batch_norm(x, rm, rv, w, b, m->training, m->cfgf[1], m->cfgf[0]);
    if (y && m->training) {
        oar_pool *p = oar_pool_push();
        oar_no_grad_push();
        int st = oar_copy_(nbt, oar_add_scalar(nbt, 1));
        oar_no_grad_pop();
        oar_pool_pop(p);
        if (st) return NULL;
    }
    return y;
}

static oar_module *batch_norm_new(const char *type, int ndim, int64_t c, double eps,
                                  double momentum, bool affine) {
    if (c <= 0 || !(eps > 0) || !(momentum >= 0 && momentum <= 1))
        return oari_error(OAR_ERR_INVALID,
                          "%s: invalid arguments (num_features %lld, eps %g, "
                          "momentum %g)",
                          type, (long long)c, eps, momentum),
               NULL;
    oar_module *m = oar_module_new(type, batch_norm_forward, NULL, NULL);
    if (!m) return NULL;
    m->cfg[0] = affine;
    m->cfg[1] = ndim;
    m->cfgf[0] = eps;
    m->cfgf[1] = momentum;
    if (affine) {
        oar_tensor *w = new_param(m, "weight", 1, &c, true);
        if (!w || oar_init_ones_(w)) return fail(m);
        oar_tensor *b = new_param(m, "bias", 1, &c, true);
        if (!b || oar_init_zeros_(b)) return fail(m);
    }
    oar_tensor *rm = new_param(m, "running_mean", 1, &c, false);
    if (!rm || oar_init_zeros_(rm)) return fail(m);
    oar_tensor *rv = new_param(m, "running_var", 1, &c, false);
    if (!rv || oar_init_ones_(rv)) return fail(m);
    oar_tensor *nbt = oari_tensor_empty(NULL, OAR_I64, 0, NULL);
    int st = !nbt || oar_fill_(nbt, 0) || oar_module_add_buffer(m, "num_batches_tracked", nbt);
    oar_tensor_release(nbt);
    return st ? fail(m) : m;
}

oar_module *oar_batch_norm2d_new(int64_t num_features, double eps, double momentum, bool affine) {
    return batch_norm_new("BatchNorm2d", 4, num_features, eps, momentum, affine);
}

oar_module *oar_batch_norm1d_new(int64_t num_features, double eps, double momentum, bool affine) {
    return batch_norm_new("BatchNorm1d", 2, num_features, eps, momentum, affine);
}

/* ---- LayerNorm ------------------------------------------------------------ */

static oar_tensor *layer_norm_forward(oar_module *m, oar_tensor *x) {
    oar_tensor *w = m->n_tensors ? m->tensors[0].t : NULL;
    oar_tensor *b = m->n_tensors ? m->tensors[1].t : NULL;
    return oar_layer_norm(x, (int)m->cfg[0], w, b, m->cfgf[0]);
}

oar_module *oar_layer_norm_new(int ndim, const int64_t *shape, double eps, bool affine) {
    if (ndim < 1 || ndim > OAR_MAX_DIMS || !shape || !(eps > 0))
        return oari_error(OAR_ERR_INVALID, "layer_norm_new: invalid arguments (ndim %d, eps %g)",
                          ndim, eps),
               NULL;
    for (int i = 0; i < ndim; i++)
        if (shape[i] <= 0)
            return oari_error(OAR_ERR_INVALID,
                              "layer_norm_new: normalized_shape[%d] = %lld must "
                              "be positive",
                              i, (long long)shape[i]),
                   NULL;
    oar_module *m = oar_module_new("LayerNorm", layer_norm_forward, NULL, NULL);
    if (!m) return NULL;
    m->cfg[0] = ndim;
    m->cfgf[0] = eps;
    if (affine) {
        oar_tensor *w = new_param(m, "weight", ndim, shape, true);
        if (!w || oar_init_ones_(w)) return fail(m);
        oar_tensor *b = new_param(m, "bias", ndim, shape, true);
        if (!b || oar_init_zeros_(b)) return fail(m);
    }
    return m;
}

/* ---- Embedding ------------------------------------------------------------ */

static oar_tensor *embedding_forward(oar_module *m, oar_tensor *x) {
    return oar_embedding(m->tensors[0].t, x);
}

oar_module *oar_embedding_new(int64_t num, int64_t dim) {
    if (num <= 0 || dim <= 0)
        return oari_error(OAR_ERR_INVALID, "embedding_new: sizes must be positive, got %lld x %lld",
                          (long long)num, (long long)dim),
               NULL;
    oar_module *m = oar_module_new("Embedding", embedding_forward, NULL, NULL);
    if (!m) return NULL;
    int64_t ws[2] = {num, dim};
    oar_tensor *w = new_param(m, "weight", 2, ws, true);
    if (!w || oar_init_normal_(w, 0, 1)) return fail(m);
    return m;
}

/* ---- parameter-free layers ------------------------------------------------- */

static oar_tensor *dropout_forward(oar_module *m, oar_tensor *x) {
    return oar_dropout(x, m->cfgf[0], m->training);
}

oar_module *oar_dropout_new(double p) {
    if (!(p >= 0 && p <= 1))
        return oari_error(OAR_ERR_INVALID, "dropout_new: p = %g must be in [0, 1]", p), NULL;
    oar_module *m = oar_module_new("Dropout", dropout_forward, NULL, NULL);
    if (m) m->cfgf[0] = p;
    return m;
}

static oar_tensor *relu_forward(oar_module *m, oar_tensor *x) { return oar_relu(x); }
static oar_tensor *tanh_forward(oar_module *m, oar_tensor *x) { return oar_tanh(x); }
static oar_tensor *gelu_forward(oar_module *m, oar_tensor *x) { return oar_gelu(x, m->cfg[0]); }

oar_module *oar_relu_new(void) { return oar_module_new("ReLU", relu_forward, NULL, NULL); }
oar_module *oar_tanh_new(void) { return oar_module_new("Tanh", tanh_forward, NULL, NULL); }
oar_module *oar_gelu_new(bool tanh_approx) {
    oar_module *m = oar_module_new("GELU", gelu_forward, NULL, NULL);
    if (m) m->cfg[0] = tanh_approx;
    return m;
}

static oar_tensor *max_pool_forward(oar_module *m, oar_tensor *x) {
    int64_t k[2] = {m->cfg[0], m->cfg[0]}, s[2] = {m->cfg[1], m->cfg[1]};
    int64_t p[2] = {m->cfg[2], m->cfg[2]}, d[2] = {1, 1};
    return oar_max_pool2d(x, k, s, p, d, false, NULL);
}

static oar_tensor *avg_pool_forward(oar_module *m, oar_tensor *x) {
    int64_t k[2] = {m->cfg[0], m->cfg[0]}, s[2] = {m->cfg[1], m->cfg[1]};
    int64_t p[2] = {m->cfg[2], m->cfg[2]};
    return oar_avg_pool2d(x, k, s, p, false, true);
}

static oar_module *pool_new(const char *type, oar_module_forward_fn fwd, int64_t kernel,
                            int64_t stride, int64_t padding) {
    if (kernel <= 0 || stride < 0 || padding < 0 || 2 * padding > kernel)
        return oari_error(OAR_ERR_INVALID,
                          "%s: invalid arguments (kernel %lld, stride %lld, "
                          "padding %lld; padding must be at most half the kernel)",
                          type, (long long)kernel, (long long)stride, (long long)padding),
               NULL;
    oar_module *m = oar_module_new(type, fwd, NULL, NULL);
    if (!m) return NULL;
    m->cfg[0] = kernel;
    m->cfg[1] = stride ? stride : kernel;
    m->cfg[2] = padding;
    return m;
}

oar_module *oar_max_pool2d_new(int64_t kernel, int64_t stride, int64_t padding) {
    return pool_new("MaxPool2d", max_pool_forward, kernel, stride, padding);
}

oar_module *oar_avg_pool2d_new(int64_t kernel, int64_t stride, int64_t padding) {
    return pool_new("AvgPool2d", avg_pool_forward, kernel, stride, padding);
}

static oar_tensor *flatten_forward(oar_module *m, oar_tensor *x) {
    return oar_flatten(x, (int)m->cfg[0], (int)m->cfg[1]);
}

oar_module *oar_flatten_new(int start_dim, int end_dim) {
    oar_module *m = oar_module_new("Flatten", flatten_forward, NULL, NULL);
    if (!m) return NULL;
    m->cfg[0] = start_dim;
    m->cfg[1] = end_dim;
    return m;
}

/* ---- Sequential ------------------------------------------------------------ */

static oar_tensor *sequential_forward(oar_module *m, oar_tensor *x) {
    if (!m->n_children) return oari_pool_adopt(oar_tensor_retain(x));
    oar_pool *p = oar_pool_push();
    for (int i = 0; i < m->n_children && x; i++)
        x = oar_module_forward(m->children[i].m, x);
    return oari_pool_return(p, x);
}

int oar_sequential_append(oar_module *seq, oar_module *m) {
    if (!seq || seq->forward != sequential_forward) {
        oar_module_free(m);
        return oari_error(OAR_ERR_INVALID, "sequential_append: not a Sequential module");
    }
    char name[24];
    snprintf(name, sizeof name, "%d", seq->n_children);
    return oar_module_add_child(seq, name, m);
}

oar_module *oar_sequential_new(int n, oar_module *const *mods) {
    oar_module *seq = oar_module_new("Sequential", sequential_forward, NULL, NULL);
    int st = seq ? 0 : oari_fail_status();
    if (n < 0 || (n && !mods)) st = oari_error(OAR_ERR_INVALID, "sequential_new: bad module list");
    for (int i = 0; i < n && mods; i++) {
        if (!st && !mods[i]) {
            if (!oari_error_pending())
                oari_error(OAR_ERR_INVALID, "sequential_new: module %d is NULL", i);
            st = OAR_ERR_INVALID;
        }
        if (st)
            oar_module_free(mods[i]);
        else
            st = oar_sequential_append(seq, mods[i]);
    }
    if (st) return fail(seq);
    return seq;
}

/* ---- Conv1d ------------------------------------------------------------- */

static oar_tensor *conv1d_forward(oar_module *m, oar_tensor *x) {
    oar_tensor *w = m->tensors[0].t;
    oar_tensor *b = m->n_tensors > 1 ? m->tensors[1].t : NULL;
    return oar_conv1d(x, w, b, m->cfg[0], m->cfg[1], m->cfg[2], m->cfg[3]);
}

oar_module *oar_conv1d_new(int64_t in_channels, int64_t out_channels, int64_t kernel,
                           int64_t stride, int64_t padding, int64_t dilation, int64_t groups,
                           bool bias) {
    if (in_channels <= 0 || out_channels <= 0 || kernel <= 0 || stride <= 0 || padding < 0 ||
        dilation <= 0 || groups <= 0 || in_channels % groups || out_channels % groups)
        return oari_error(OAR_ERR_INVALID,
                          "conv1d_new: invalid arguments (in %lld, out %lld, "
                          "kernel %lld, stride %lld, padding %lld, dilation %lld, groups %lld); "
                          "channels must divide by groups",
                          (long long)in_channels, (long long)out_channels, (long long)kernel,
                          (long long)stride, (long long)padding, (long long)dilation,
                          (long long)groups),
               NULL;
    oar_module *m = oar_module_new("Conv1d", conv1d_forward, NULL, NULL);
    if (!m) return NULL;
    m->cfg[0] = stride;
    m->cfg[1] = padding;
    m->cfg[2] = dilation;
    m->cfg[3] = groups;
    int64_t ws[3] = {out_channels, in_channels / groups, kernel};
    if (add_weight_bias(m, 3, ws, bias, out_channels)) return fail(m);
    return m;
}

/* ---- ConvTranspose2d ------------------------------------------------------ */

static oar_tensor *conv_transpose2d_forward(oar_module *m, oar_tensor *x) {
    oar_tensor *w = m->tensors[0].t;
    oar_tensor *b = m->n_tensors > 1 ? m->tensors[1].t : NULL;
    int64_t stride[2] = {m->cfg[0], m->cfg[0]}, pad[2] = {m->cfg[1], m->cfg[1]};
    int64_t opad[2] = {m->cfg[2], m->cfg[2]}, dil[2] = {m->cfg[3], m->cfg[3]};
    return oar_conv_transpose2d(x, w, b, stride, pad, opad, dil, m->cfg[4]);
}

oar_module *oar_conv_transpose2d_new(int64_t in_channels, int64_t out_channels, int64_t kernel,
                                     int64_t stride, int64_t padding, int64_t output_padding,
                                     int64_t dilation, int64_t groups, bool bias) {
    if (in_channels <= 0 || out_channels <= 0 || kernel <= 0 || stride <= 0 || padding < 0 ||
        dilation <= 0 || groups <= 0 || in_channels % groups || out_channels % groups ||
        output_padding < 0 || (output_padding >= stride && output_padding >= dilation))
        return oari_error(OAR_ERR_INVALID,
                          "conv_transpose2d_new: invalid arguments (in %lld, out %lld, kernel "
                          "%lld, stride %lld, padding %lld, output_padding %lld, dilation %lld, "
                          "groups %lld); channels must divide by groups and output_padding be "
                          "smaller than stride or dilation",
                          (long long)in_channels, (long long)out_channels, (long long)kernel,
                          (long long)stride, (long long)padding, (long long)output_padding,
                          (long long)dilation, (long long)groups),
               NULL;
    oar_module *m = oar_module_new("ConvTranspose2d", conv_transpose2d_forward, NULL, NULL);
    if (!m) return NULL;
    m->cfg[0] = stride;
    m->cfg[1] = padding;
    m->cfg[2] = output_padding;
    m->cfg[3] = dilation;
    m->cfg[4] = groups;
    int64_t ws[4] = {in_channels, out_channels / groups, kernel, kernel};
    if (add_weight_bias(m, 4, ws, bias, out_channels)) return fail(m);
    return m;
}

/* ---- Conv3d, ConvTranspose1d, ConvTranspose3d ------------------------------ */

/* Checks the arguments of the conv and transposed conv constructors (output
 * padding < 0 for a plain conv, which has none). */
static bool conv_args_ok(const char *op, int64_t in_channels, int64_t out_channels, int64_t kernel,
                         int64_t stride, int64_t padding, int64_t output_padding, int64_t dilation,
                         int64_t groups, bool transposed) {
    bool ok = in_channels > 0 && out_channels > 0 && kernel > 0 && stride > 0 && padding >= 0 &&
              dilation > 0 && groups > 0 && in_channels % groups == 0 &&
              out_channels % groups == 0;
    if (transposed)
        ok = ok && output_padding >= 0 && (output_padding < stride || output_padding < dilation);
    if (!ok)
        oari_error(OAR_ERR_INVALID,
                   "%s: invalid arguments (in %lld, out %lld, kernel %lld, stride %lld, padding "
                   "%lld, output_padding %lld, dilation %lld, groups %lld); sizes must be "
                   "positive, channels divide by groups%s",
                   op, (long long)in_channels, (long long)out_channels, (long long)kernel,
                   (long long)stride, (long long)padding, (long long)(transposed ? output_padding : 0),
                   (long long)dilation, (long long)groups,
                   transposed ? " and output_padding be smaller than stride or dilation" : "");
    return ok;
}

static oar_tensor *conv3d_forward(oar_module *m, oar_tensor *x) {
    oar_tensor *w = m->tensors[0].t;
    oar_tensor *b = m->n_tensors > 1 ? m->tensors[1].t : NULL;
    const int64_t s = m->cfg[0], p = m->cfg[1], d = m->cfg[2];
    int64_t stride[3] = {s, s, s}, pad[3] = {p, p, p}, dil[3] = {d, d, d};
    return oar_conv3d(x, w, b, stride, pad, dil, m->cfg[3]);
}

oar_module *oar_conv3d_new(int64_t in_channels, int64_t out_channels, int64_t kernel,
                           int64_t stride, int64_t padding, int64_t dilation, int64_t groups,
                           bool bias) {
    if (!conv_args_ok("conv3d_new", in_channels, out_channels, kernel, stride, padding, 0,
                      dilation, groups, false))
        return NULL;
    oar_module *m = oar_module_new("Conv3d", conv3d_forward, NULL, NULL);
    if (!m) return NULL;
    m->cfg[0] = stride;
    m->cfg[1] = padding;
    m->cfg[2] = dilation;
    m->cfg[3] = groups;
    int64_t ws[5] = {out_channels, in_channels / groups, kernel, kernel, kernel};
    if (add_weight_bias(m, 5, ws, bias, out_channels)) return fail(m);
    return m;
}

static oar_tensor *conv_transpose1d_forward(oar_module *m, oar_tensor *x) {
    oar_tensor *w = m->tensors[0].t;
    oar_tensor *b = m->n_tensors > 1 ? m->tensors[1].t : NULL;
    return oar_conv_transpose1d(x, w, b, m->cfg[0], m->cfg[1], m->cfg[2], m->cfg[3], m->cfg[4]);
}

static oar_tensor *conv_transpose3d_forward(oar_module *m, oar_tensor *x) {
    oar_tensor *w = m->tensors[0].t;
    oar_tensor *b = m->n_tensors > 1 ? m->tensors[1].t : NULL;
    const int64_t s = m->cfg[0], p = m->cfg[1], op = m->cfg[2], d = m->cfg[3];
    int64_t stride[3] = {s, s, s}, pad[3] = {p, p, p}, opad[3] = {op, op, op}, dil[3] = {d, d, d};
    return oar_conv_transpose3d(x, w, b, stride, pad, opad, dil, m->cfg[4]);
}

/* A transposed conv module of spatial rank nd: weight [in, out/groups, k...]. */
static oar_module *conv_transpose_new(const char *op, const char *type, oar_module_forward_fn fwd, int nd,
                                      int64_t in_channels, int64_t out_channels, int64_t kernel,
                                      int64_t stride, int64_t padding, int64_t output_padding,
                                      int64_t dilation, int64_t groups, bool bias) {
    if (!conv_args_ok(op, in_channels, out_channels, kernel, stride, padding, output_padding,
                      dilation, groups, true))
        return NULL;
    oar_module *m = oar_module_new(type, fwd, NULL, NULL);
    if (!m) return NULL;
    m->cfg[0] = stride;
    m->cfg[1] = padding;
    m->cfg[2] = output_padding;
    m->cfg[3] = dilation;
    m->cfg[4] = groups;
    int64_t ws[5] = {in_channels, out_channels / groups, kernel, kernel, kernel};
    if (add_weight_bias(m, 2 + nd, ws, bias, out_channels)) return fail(m);
    return m;
}

oar_module *oar_conv_transpose1d_new(int64_t in_channels, int64_t out_channels, int64_t kernel,
                                     int64_t stride, int64_t padding, int64_t output_padding,
                                     int64_t dilation, int64_t groups, bool bias) {
    return conv_transpose_new("conv_transpose1d_new", "ConvTranspose1d", conv_transpose1d_forward,
                              1, in_channels, out_channels, kernel, stride, padding,
                              output_padding, dilation, groups, bias);
}

oar_module *oar_conv_transpose3d_new(int64_t in_channels, int64_t out_channels, int64_t kernel,
                                     int64_t stride, int64_t padding, int64_t output_padding,
                                     int64_t dilation, int64_t groups, bool bias) {
    return conv_transpose_new("conv_transpose3d_new", "ConvTranspose3d", conv_transpose3d_forward,
                              3, in_channels, out_channels, kernel, stride, padding,
                              output_padding, dilation, groups, bias);
}

/* ---- GroupNorm -------------------------------------------------------------- */

static oar_tensor *group_norm_forward(oar_module *m, oar_tensor *x) {
    oar_tensor *w = m->n_tensors ? m->tensors[0].t : NULL;
    oar_tensor *b = m->n_tensors ? m->tensors[1].t : NULL;
    if (x->ndim < 2 || x->shape[1] != m->cfg[1]) {
        char s[200];
        return oari_error(OAR_ERR_INVALID,
                          "GroupNorm: expected input [N, %lld, ...], got shape %s",
                          (long long)m->cfg[1], oari_shape_str(s, x->ndim, x->shape)),
               NULL;
    }
    return oar_group_norm(x, m->cfg[0], w, b, m->cfgf[0]);
}

oar_module *oar_group_norm_new(int64_t num_groups, int64_t num_channels, double eps, bool affine) {
    if (num_groups <= 0 || num_channels <= 0 || num_channels % num_groups || !(eps > 0))
        return oari_error(OAR_ERR_INVALID,
                          "group_norm_new: invalid arguments (groups %lld, channels %lld, eps "
                          "%g); channels must divide by groups",
                          (long long)num_groups, (long long)num_channels, eps),
               NULL;
    oar_module *m = oar_module_new("GroupNorm", group_norm_forward, NULL, NULL);
    if (!m) return NULL;
    m->cfg[0] = num_groups;
    m->cfg[1] = num_channels;
    m->cfgf[0] = eps;
    if (affine) {
        oar_tensor *w = new_param(m, "weight", 1, &num_channels, true);
        if (!w || oar_init_ones_(w)) return fail(m);
        oar_tensor *b = new_param(m, "bias", 1, &num_channels, true);
        if (!b || oar_init_zeros_(b)) return fail(m);
    }
    return m;
}

/* ---- AdaptiveAvgPool2d ------------------------------------------------------ */

static oar_tensor *adaptive_avg_pool_forward(oar_module *m, oar_tensor *x) {
    int64_t out[2] = {m->cfg[0], m->cfg[1]};
    return oar_adaptive_avg_pool2d(x, out);
}

oar_module *oar_adaptive_avg_pool2d_new(int64_t out_h, int64_t out_w) {
    if (out_h <= 0 || out_w <= 0)
        return oari_error(OAR_ERR_INVALID,
                          "adaptive_avg_pool2d_new: output size %lld x %lld must be positive",
                          (long long)out_h, (long long)out_w),
               NULL;
    oar_module *m = oar_module_new("AdaptiveAvgPool2d", adaptive_avg_pool_forward, NULL, NULL);
    if (!m) return NULL;
    m->cfg[0] = out_h;
    m->cfg[1] = out_w;
    return m;
}

/* ---- more activations -------------------------------------------------------- */

static oar_tensor *sigmoid_forward(oar_module *m, oar_tensor *x) { return oar_sigmoid(x); }
static oar_tensor *silu_forward(oar_module *m, oar_tensor *x) { return oar_silu(x); }
static oar_tensor *softplus_forward(oar_module *m, oar_tensor *x) {
    return oar_softplus(x, m->cfgf[0], m->cfgf[1]);
}
static oar_tensor *leaky_relu_forward(oar_module *m, oar_tensor *x) {
    return oar_leaky_relu(x, m->cfgf[0]);
}
static oar_tensor *elu_forward(oar_module *m, oar_tensor *x) { return oar_elu(x, m->cfgf[0]); }

oar_module *oar_sigmoid_new(void) { return oar_module_new("Sigmoid", sigmoid_forward, NULL, NULL); }
oar_module *oar_silu_new(void) { return oar_module_new("SiLU", silu_forward, NULL, NULL); }

oar_module *oar_softplus_new(double beta, double threshold) {
    if (!(beta > 0) || threshold != threshold)
        return oari_error(OAR_ERR_INVALID, "softplus_new: beta %g must be > 0 (threshold %g)",
                          beta, threshold),
               NULL;
    oar_module *m = oar_module_new("Softplus", softplus_forward, NULL, NULL);
    if (!m) return NULL;
    m->cfgf[0] = beta;
    m->cfgf[1] = threshold;
    return m;
}

oar_module *oar_leaky_relu_new(double negative_slope) {
    if (!isfinite(negative_slope))
        return oari_error(OAR_ERR_INVALID, "leaky_relu_new: negative_slope %g must be finite",
                          negative_slope),
               NULL;
    oar_module *m = oar_module_new("LeakyReLU", leaky_relu_forward, NULL, NULL);
    if (m) m->cfgf[0] = negative_slope;
    return m;
}

oar_module *oar_elu_new(double alpha) {
    if (!isfinite(alpha))
        return oari_error(OAR_ERR_INVALID, "elu_new: alpha %g must be finite", alpha), NULL;
    oar_module *m = oar_module_new("ELU", elu_forward, NULL, NULL);
    if (m) m->cfgf[0] = alpha;
    return m;
}

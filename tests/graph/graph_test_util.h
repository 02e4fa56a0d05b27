/* Helpers shared by the graph and infer tests: small models from the nn
 * modules, and tensor comparison. */
#ifndef GRAPH_TEST_UTIL_H
#define GRAPH_TEST_UTIL_H

#include "test.h"

#include <oar/graph.h>

/* Largest |a - b| over the elements; INFINITY when the shapes differ. */
static inline double max_diff(oar_tensor *a, oar_tensor *b) {
    if (!a || !b || oar_tensor_ndim(a) != oar_tensor_ndim(b) || oar_tensor_numel(a) != oar_tensor_numel(b))
        return INFINITY;
    for (int d = 0; d < oar_tensor_ndim(a); d++)
        if (oar_tensor_shape(a)[d] != oar_tensor_shape(b)[d]) return INFINITY;
    double *x = test_values(a), *y = test_values(b), m = 0;
    for (int64_t i = 0; i < oar_tensor_numel(a); i++)
        if (fabs(x[i] - y[i]) > m || isnan(x[i] - y[i])) m = isnan(x[i] - y[i]) ? INFINITY : fabs(x[i] - y[i]);
    free(x);
    free(y);
    return m;
}

/* Linear(8, 16) - ReLU - Linear(16, 4). */
/* The loss the train-step tests trace: mse(m(x), t); ctx: the module m,
 * in: x and t. */
static inline int module_mse_loss(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    out[0] = oar_mse_loss(oar_module_forward(ctx, in[0]), in[1], OAR_REDUCTION_MEAN);
    return out[0] ? 0 : -1;
}

static inline oar_module *make_mlp(void) {
    oar_manual_seed(1);
    return oar_sequential_new(3, (oar_module *[]){oar_linear_new(8, 16, true), oar_relu_new(),
                                                  oar_linear_new(16, 4, true)});
}

/* Conv(1->4, 3x3, pad 1) - BatchNorm2d - ReLU - MaxPool 2 - Flatten - Linear(64, 3)
 * over [N, 1, 8, 8], in eval mode with non-trivial running statistics. */
static inline oar_module *make_cnn(void) {
    oar_manual_seed(2);
    oar_module *m = oar_sequential_new(
        6, (oar_module *[]){oar_conv2d_new(1, 4, 3, 1, 1, 1, 1, true), oar_batch_norm2d_new(4, 1e-5, 0.1, true),
                            oar_relu_new(), oar_max_pool2d_new(2, 0, 0), oar_flatten_new(1, -1),
                            oar_linear_new(64, 3, true)});
    /* a few training-mode batches give the batch norm running statistics */
    oar_pool *p = oar_pool_push();
    int64_t sh[4] = {6, 1, 8, 8};
    for (int i = 0; i < 3; i++) oar_module_forward(m, oar_add_scalar(oar_mul_scalar(oar_randn(OAR_F32, 4, sh), 2), 0.5));
    oar_pool_pop(p);
    oar_init_uniform_(oar_module_get(m, "1.weight"), 0.5, 1.5);
    oar_init_uniform_(oar_module_get(m, "1.bias"), -0.5, 0.5);
    oar_module_train(m, false);
    return m;
}

#endif

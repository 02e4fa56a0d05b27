/* A shared library of custom ops, loaded by tests/ops/test_custom_op.c with
 * oar_custom_load_library: it registers "test.swish", y = x * sigmoid(x),
 * with CPU kernels in f32 and f64 and a gradient written with ops. Built
 * by CMake as a MODULE that links nothing: its oar symbols resolve against
 * the program that loads it. Built again with CUSTOM_LIB_NO_ENTRY, it has
 * no entry point (the loader's failure path). */
#include <oar/oar.h>

#include <math.h>

#ifndef CUSTOM_LIB_NO_ENTRY

/* Floating inputs of f32 or f64 only: the kernels' dtypes. */
static int swish_rule(void *user, int n_in, const oar_custom_meta *in, const oar_custom_attrs *attrs,
                      oar_custom_meta *out) {
    (void)user, (void)n_in, (void)attrs;
    if (in[0].dtype != OAR_F32 && in[0].dtype != OAR_F64)
        return oar_set_error(OAR_ERR_INVALID, "x is %s; float32 or float64 wanted", oar_dtype_name(in[0].dtype));
    out[0] = in[0];
    return 0;
}

static int swish_cpu(const oar_custom_kernel_args *k) {
    int64_t n = oar_tensor_numel(k->in[0]);
    if (oar_tensor_dtype(k->in[0]) == OAR_F64) {
        const double *x = oar_tensor_data(k->in[0]);
        double *y = oar_tensor_data(k->out[0]);
        for (int64_t i = 0; i < n; i++) y[i] = x[i] / (1 + exp(-x[i]));
    } else {
        const float *x = oar_tensor_data(k->in[0]);
        float *y = oar_tensor_data(k->out[0]);
        for (int64_t i = 0; i < n; i++) y[i] = x[i] / (1 + expf(-x[i]));
    }
    return 0;
}

/* d/dx x s(x) = s + x s (1 - s), s = sigmoid(x): ops, so it differentiates again. */
static int swish_grad(const oar_custom_grad_args *g) {
    oar_tensor *x = g->in[0], *s = oar_sigmoid(x);
    oar_tensor *ds = oar_add(s, oar_mul(oar_mul(x, s), oar_add_scalar(oar_neg(s), 1.0)));
    g->grad_in[0] = oar_mul(g->grad_out[0], ds);
    return g->grad_in[0] ? 0 : -1;
}

__attribute__((visibility("default"))) int oar_custom_library_init(void) {
    static const oar_custom_op_desc swish = {
        .name = "test.swish", .n_in = 1, .n_out = 1, .flags = OAR_CUSTOM_ELEMENTWISE,
        .infer = swish_rule, .kernels = {{"cpu", swish_cpu}}, .grad = swish_grad,
    };
    return oar_custom_register(&swish) ? 0 : -1;
}

#else
/* a symbol, so that the library is not empty */
__attribute__((visibility("default"))) int custom_lib_without_entry(void) { return 0; }
#endif

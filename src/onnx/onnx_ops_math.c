/* ONNX import, elementwise and reduction ops: each converter maps one node
 * onto oar ops (composites expand into several), keeping ONNX's output
 * dtype (oar promotes as PyTorch does; ONNX keeps the input's type). */
#define OARI_ONNX_PROTO
#include "onnx_internal.h"
#include <float.h>
#include <math.h>
#include <string.h>


/* y cast to x's dtype (ONNX keeps the input type where oar promotes). */
static oar_tensor *like(oar_tensor *y, oar_tensor *x) {
    return y && x ? oar_cast(y, oar_tensor_dtype(x)) : NULL;
}

static oar_tensor *asinh_(oar_tensor *x) { /* log(x + sqrt(x^2 + 1)) */
    return oar_log(oar_add(x, oar_sqrt(oar_add_scalar(oar_square(x), 1.0))));
}
static oar_tensor *acosh_(oar_tensor *x) { /* log(x + sqrt(x^2 - 1)) */
    return oar_log(oar_add(x, oar_sqrt(oar_sub_scalar(oar_square(x), 1.0))));
}
static oar_tensor *atanh_(oar_tensor *x) { /* log((1 + x) / (1 - x)) / 2 */
    return oar_mul_scalar(oar_log(oar_div(oar_add_scalar(x, 1.0), oar_add_scalar(oar_neg(x), 1.0))), 0.5);
}
static oar_tensor *softsign_(oar_tensor *x) { return oar_div(x, oar_add_scalar(oar_abs(x), 1.0)); }

static const struct {
    const char *name;
    oar_tensor *(*fn)(oar_tensor *);
    bool keep_dtype; /* cast back to the input's dtype (integer inputs) */
} unary_ops[] = {
    {"Abs", oar_abs, true}, {"Neg", oar_neg, true}, {"Exp", oar_exp, false}, {"Log", oar_log, false},
    {"Sqrt", oar_sqrt, false}, {"Reciprocal", oar_reciprocal, false}, {"Sin", oar_sin, false},
    {"Cos", oar_cos, false}, {"Tan", oar_tan, false}, {"Asin", oar_asin, false}, {"Acos", oar_acos, false},
    {"Atan", oar_atan, false}, {"Sinh", oar_sinh, false}, {"Cosh", oar_cosh, false}, {"Asinh", asinh_, false},
    {"Acosh", acosh_, false}, {"Atanh", atanh_, false}, {"Tanh", oar_tanh, false},
    {"Sigmoid", oar_sigmoid, false}, {"Relu", oar_relu, true}, {"Erf", oar_erf, false},
    {"Floor", oar_floor, true}, {"Ceil", oar_ceil, true}, {"Round", oar_round, true}, {"Sign", oar_sign, true},
    {"IsNaN", oar_isnan, false}, {"Not", oar_logical_not, false}, {"Softsign", softsign_, false},
};

int oari_onnx_conv_unary(oari_onnx_node *nd) {
    NEED(1);
    for (size_t i = 0; i < sizeof unary_ops / sizeof *unary_ops; i++)
        if (OP_IS(unary_ops[i].name)) {
            oar_tensor *y = unary_ops[i].fn(nd->in[0]);
            RESULT(unary_ops[i].keep_dtype ? like(y, nd->in[0]) : y);
        }
    return oari_error(OAR_ERR_UNSUPPORTED, "no unary mapping");
}

int oari_onnx_conv_isinf(oari_onnx_node *nd) {
    NEED(1);
    oar_tensor *x = nd->in[0], *y = oar_isinf(x);
    bool neg = oari_onnx_attr_i(nd, "detect_negative", 1) != 0, pos = oari_onnx_attr_i(nd, "detect_positive", 1) != 0;
    oar_tensor *zero = oari_onnx_scalar(0, oar_tensor_dtype(x));
    if (!neg) y = oar_logical_and(y, oar_gt(x, zero));
    if (!pos) y = oar_logical_and(y, oar_lt(x, zero));
    RESULT(y);
}

int oari_onnx_conv_binary(oari_onnx_node *nd) {
    NEED(2);
    oar_tensor *a = nd->in[0], *b = nd->in[1], *y;
    if (OP_IS("Add")) y = oar_add(a, b);
    else if (OP_IS("Sub")) y = oar_sub(a, b);
    else if (OP_IS("Mul")) y = oar_mul(a, b);
    else return oari_error(OAR_ERR_UNSUPPORTED, "no binary mapping");
    RESULT(y);
}

int oari_onnx_conv_div(oari_onnx_node *nd) {
    NEED(2);
    oar_tensor *a = nd->in[0], *b = nd->in[1];
    if (oar_dtype_is_integral(oar_tensor_dtype(a))) /* integer division truncates */
        RESULT(like(oar_trunc(oar_div(oar_cast(a, OAR_F64), oar_cast(b, OAR_F64))), a));
    RESULT(oar_div(a, b));
}

int oari_onnx_conv_pow(oari_onnx_node *nd) {
    NEED(2);
    oar_tensor *a = nd->in[0], *b = nd->in[1];
    if (oar_dtype_is_integral(oar_tensor_dtype(a)) || oar_dtype_is_integral(oar_tensor_dtype(b)))
        RESULT(like(oar_round(oar_pow(oar_cast(a, OAR_F64), oar_cast(b, OAR_F64))), a));
    RESULT(like(oar_pow(a, b), a)); /* the result has the base's type */
}

int oari_onnx_conv_mod(oari_onnx_node *nd) {
    NEED(2);
    oar_tensor *a = nd->in[0], *b = nd->in[1];
    if (!oari_onnx_attr_i(nd, "fmod", 0)) {
        if (!oar_dtype_is_integral(oar_tensor_dtype(a)))
            return oari_error(OAR_ERR_INVALID, "fmod=0 needs integer inputs (float inputs need fmod=1)");
        RESULT(oar_remainder(a, b)); /* the sign of the divisor */
    }
    /* C fmod: a - b * trunc(a / b), in f64 */
    oar_tensor *a64 = oar_cast(a, OAR_F64), *b64 = oar_cast(b, OAR_F64);
    RESULT(like(oar_sub(a64, oar_mul(b64, oar_trunc(oar_div(a64, b64)))), a));
}

int oari_onnx_conv_compare(oari_onnx_node *nd) {
    NEED(2);
    oar_tensor *a = nd->in[0], *b = nd->in[1], *y;
    if (OP_IS("Equal")) y = oar_eq(a, b);
    else if (OP_IS("Less")) y = oar_lt(a, b);
    else if (OP_IS("Greater")) y = oar_gt(a, b);
    else if (OP_IS("LessOrEqual")) y = oar_le(a, b);
    else if (OP_IS("GreaterOrEqual")) y = oar_ge(a, b);
    else return oari_error(OAR_ERR_UNSUPPORTED, "no comparison mapping");
    RESULT(y);
}

int oari_onnx_conv_logical(oari_onnx_node *nd) {
    NEED(2);
    oar_tensor *a = nd->in[0], *b = nd->in[1], *y;
    if (OP_IS("And")) y = oar_logical_and(a, b);
    else if (OP_IS("Or")) y = oar_logical_or(a, b);
    else if (OP_IS("Xor")) y = oar_logical_xor(a, b);
    else return oari_error(OAR_ERR_UNSUPPORTED, "no logical mapping");
    RESULT(y);
}

int oari_onnx_conv_variadic(oari_onnx_node *nd) {
    NEED(1);
    oar_tensor *y = nd->in[0];
    for (int i = 1; i < nd->n_in; i++) {
        if (!nd->in[i]) return oari_error(OAR_ERR_INVALID, "input %d is missing", i);
        if (OP_IS("Max")) y = oar_maximum(y, nd->in[i]);
        else if (OP_IS("Min")) y = oar_minimum(y, nd->in[i]);
        else y = oar_add(y, nd->in[i]);
    }
    if (OP_IS("Mean")) y = oar_div_scalar(y, nd->n_in);
    else if (nd->n_in == 1) y = oar_clone(y); /* a node of its own */
    RESULT(y);
}

int oari_onnx_conv_where(oari_onnx_node *nd) {
    NEED(3);
    RESULT(oar_where(nd->in[0], nd->in[1], nd->in[2]));
}

/* min/max as attributes (opset 6..10) or optional inputs (11..). */
int oari_onnx_conv_clip(oari_onnx_node *nd) {
    NEED(1);
    oar_tensor *x = nd->in[0];
    if (nd->opset < 11)
        RESULT(oar_clamp(x, oari_onnx_attr_f(nd, "min", -FLT_MAX), oari_onnx_attr_f(nd, "max", FLT_MAX)));
    oar_tensor *y = x;
    for (int i = 1; i < 3 && i < nd->n_in; i++) {
        oar_tensor *b = nd->in[i];
        if (!b) continue;
        if (oar_tensor_numel(b) != 1) return oari_error(OAR_ERR_INVALID, "bound %d is not a scalar", i);
        b = oar_reshape(b, 0, NULL);
        y = i == 1 ? oar_maximum(y, b) : oar_minimum(y, b);
    }
    RESULT(y == x ? oar_clone(x) : like(y, x));
}

int oari_onnx_conv_elu(oari_onnx_node *nd) {
    NEED(1);
    RESULT(oar_elu(nd->in[0], oari_onnx_attr_f(nd, "alpha", 1.0)));
}

int oari_onnx_conv_selu(oari_onnx_node *nd) {
    NEED(1);
    double alpha = oari_onnx_attr_f(nd, "alpha", 1.67326319217681884765625);
    double gamma = oari_onnx_attr_f(nd, "gamma", 1.05070102214813232421875);
    RESULT(oar_mul_scalar(oar_elu(nd->in[0], alpha), gamma));
}

int oari_onnx_conv_celu(oari_onnx_node *nd) { /* alpha * elu(x / alpha, 1) */
    NEED(1);
    double alpha = oari_onnx_attr_f(nd, "alpha", 1.0);
    if (alpha == 0) return oari_error(OAR_ERR_INVALID, "alpha = 0");
    RESULT(oar_mul_scalar(oar_elu(oar_div_scalar(nd->in[0], alpha), 1.0), alpha));
}

int oari_onnx_conv_leaky_relu(oari_onnx_node *nd) {
    NEED(1);
    RESULT(oar_leaky_relu(nd->in[0], oari_onnx_attr_f(nd, "alpha", 0.01)));
}

int oari_onnx_conv_prelu(oari_onnx_node *nd) { /* x < 0 ? slope * x : x */
    NEED(2);
    oar_tensor *x = nd->in[0];
    oar_tensor *zero = oari_onnx_scalar(0, oar_tensor_dtype(x));
    RESULT(oar_where(oar_lt(x, zero), oar_mul(x, nd->in[1]), x));
}

static oar_tensor *hard_sigmoid(oar_tensor *x, double alpha, double beta) {
    return oar_clamp(oar_add_scalar(oar_mul_scalar(x, alpha), beta), 0.0, 1.0);
}

int oari_onnx_conv_hard_sigmoid(oari_onnx_node *nd) {
    NEED(1);
    RESULT(hard_sigmoid(nd->in[0], oari_onnx_attr_f(nd, "alpha", 0.2), oari_onnx_attr_f(nd, "beta", 0.5)));
}

int oari_onnx_conv_hard_swish(oari_onnx_node *nd) {
    NEED(1);
    RESULT(oar_mul(nd->in[0], hard_sigmoid(nd->in[0], 1.0 / 6.0, 0.5)));
}

int oari_onnx_conv_thresholded_relu(oari_onnx_node *nd) { /* x > alpha ? x : 0 */
    NEED(1);
    oar_tensor *x = nd->in[0];
    oar_dtype dt = oar_tensor_dtype(x);
    double alpha = oari_onnx_attr_f(nd, "alpha", 1.0);
    RESULT(oar_where(oar_gt(x, oari_onnx_scalar(alpha, dt)), x, oari_onnx_scalar(0, dt)));
}

int oari_onnx_conv_shrink(oari_onnx_node *nd) {
    NEED(1);
    oar_tensor *x = nd->in[0];
    oar_dtype dt = oar_tensor_dtype(x);
    double bias = oari_onnx_attr_f(nd, "bias", 0.0), lambd = oari_onnx_attr_f(nd, "lambd", 0.5);
    oar_tensor *y = oar_where(oar_lt(x, oari_onnx_scalar(-lambd, dt)), like(oar_add_scalar(x, bias), x),
                              oari_onnx_scalar(0, dt));
    RESULT(oar_where(oar_gt(x, oari_onnx_scalar(lambd, dt)), like(oar_sub_scalar(x, bias), x), y));
}

int oari_onnx_conv_softplus(oari_onnx_node *nd) { /* log(exp(x) + 1), stably */
    NEED(1);
    oar_tensor *x = nd->in[0];
    RESULT(oar_add(oar_relu(x), oar_log1p(oar_exp(oar_neg(oar_abs(x))))));
}

int oari_onnx_conv_cast(oari_onnx_node *nd) {
    NEED(1);
    int64_t to = oari_onnx_attr_i(nd, "to", -1);
    oar_dtype dt = oari_onnx_dtype((int32_t)to);
    if (dt == OAR_DTYPE_INVALID) return oari_error(OAR_ERR_UNSUPPORTED, "cast to element type %lld: not an oar dtype", (long long)to);
    oar_tensor *y = oar_cast(nd->in[0], dt);
    RESULT(y == nd->in[0] ? oar_clone(y) : y);
}

int oari_onnx_conv_cast_like(oari_onnx_node *nd) {
    NEED(2);
    oar_tensor *y = oar_cast(nd->in[0], oar_tensor_dtype(nd->in[1]));
    RESULT(y == nd->in[0] ? oar_clone(y) : y);
}

int oari_onnx_conv_identity(oari_onnx_node *nd) {
    NEED(1);
    RESULT(nd->in[0]);
}

int oari_onnx_conv_constant(oari_onnx_node *nd) {
    const Onnx__AttributeProto *a;
    if ((a = oari_onnx_attr(nd, "value")) && a->t) RESULT(oari_onnx_tensor_of(a->t, "Constant value"));
    if ((a = oari_onnx_attr(nd, "value_float")) && a->has_f) RESULT(oari_onnx_scalar(a->f, OAR_F32));
    if ((a = oari_onnx_attr(nd, "value_int")) && a->has_i) RESULT(oari_onnx_scalar((double)a->i, OAR_I64));
    if ((a = oari_onnx_attr(nd, "value_floats")))
        RESULT(oar_tensor_from_data(a->n_floats ? a->floats : NULL, OAR_F32, 1, (int64_t[]){(int64_t)a->n_floats}));
    if ((a = oari_onnx_attr(nd, "value_ints")))
        RESULT(oar_tensor_from_data(a->n_ints ? a->ints : NULL, OAR_I64, 1, (int64_t[]){(int64_t)a->n_ints}));
    return oari_error(OAR_ERR_UNSUPPORTED, "only value, value_float(s), value_int(s) are supported "
                      "(not sparse_value or strings)");
}

/* ---- reductions ----------------------------------------------------------------- */

static oar_tensor *reduce_by(const char *op, oar_tensor *x, int k, const int64_t *dims, bool keep) {
    if (!strcmp(op, "ReduceSum")) return oar_sum(x, k, dims, keep);
    if (!strcmp(op, "ReduceMean")) return oar_mean(x, k, dims, keep);
    if (!strcmp(op, "ReduceMax")) return oar_amax(x, k, dims, keep);
    if (!strcmp(op, "ReduceMin")) return oar_amin(x, k, dims, keep);
    if (!strcmp(op, "ReduceProd")) return oar_prod(x, k, dims, keep);
    if (!strcmp(op, "ReduceL1")) return oar_sum(oar_abs(x), k, dims, keep);
    if (!strcmp(op, "ReduceL2")) return oar_sqrt(oar_sum(oar_square(x), k, dims, keep));
    if (!strcmp(op, "ReduceSumSquare")) return oar_sum(oar_square(x), k, dims, keep);
    if (!strcmp(op, "ReduceLogSum")) return oar_log(oar_sum(x, k, dims, keep));
    if (!strcmp(op, "ReduceLogSumExp")) { /* by hand: oar_logsumexp detaches, which tracing does not follow */
        oar_tensor *m = oar_amax(x, k, dims, true);
        m = oar_where(oar_isinf(m), oari_onnx_scalar(0, oar_tensor_dtype(x)), m);
        oar_tensor *r = oar_add(oar_log(oar_sum(oar_exp(oar_sub(x, m)), k, dims, true)), m);
        if (keep || !r) return r;
        int64_t shape[OAR_MAX_DIMS];
        int n = 0, rk = oar_tensor_ndim(x);
        for (int d = 0; d < rk; d++) {
            bool red = k == 0;
            for (int i = 0; i < k; i++) red = red || dims[i] == d;
            if (!red) shape[n++] = oar_tensor_shape(x)[d];
        }
        return oar_reshape(r, n, shape);
    }
    oari_error(OAR_ERR_UNSUPPORTED, "no reduction mapping");
    return NULL;
}

static int reduce_with(oari_onnx_node *nd, int k, int64_t *axes) {
    oar_tensor *x = nd->in[0];
    int nd_ = oar_tensor_ndim(x);
    for (int i = 0; i < k; i++) {
        int st = oari_onnx_axis(axes[i], nd_, false, &axes[i]);
        if (st) return st;
    }
    bool keep = oari_onnx_attr_i(nd, "keepdims", 1) != 0;
    oar_tensor *y = k == 0 && nd_ == 0 ? oar_clone(x) : reduce_by(nd->n->op_type, x, k, axes, keep);
    RESULT(like(y, x));
}

/* axes as an attribute (every reduction before opset 18, except ReduceSum
 * from 13). */
int oari_onnx_conv_reduce(oari_onnx_node *nd) {
    NEED(1);
    int64_t axes[OAR_MAX_DIMS];
    int k = oari_onnx_attr_ints(nd, "axes", axes, OAR_MAX_DIMS);
    if (k < -1) return k;
    return reduce_with(nd, k < 0 ? 0 : k, axes);
}

/* axes as an optional input (ReduceSum from opset 13), noop_with_empty_axes. */
int oari_onnx_conv_reduce_axes_input(oari_onnx_node *nd) {
    NEED(1);
    int64_t axes[OAR_MAX_DIMS];
    int k = 0;
    if (nd->n_in > 1 && nd->in[1] && (k = oari_onnx_input_ints(nd, 1, axes, OAR_MAX_DIMS)) < 0) return k;
    if (k == 0 && oari_onnx_attr_i(nd, "noop_with_empty_axes", 0)) RESULT(oar_clone(nd->in[0]));
    return reduce_with(nd, k, axes);
}

int oari_onnx_conv_argmax(oari_onnx_node *nd) {
    NEED(1);
    oar_tensor *x = nd->in[0];
    int64_t axis;
    int st = oari_onnx_axis(oari_onnx_attr_i(nd, "axis", 0), oar_tensor_ndim(x), false, &axis);
    if (st) return st;
    bool keep = oari_onnx_attr_i(nd, "keepdims", 1) != 0, last = oari_onnx_attr_i(nd, "select_last_index", 0) != 0;
    bool max = OP_IS("ArgMax");
    if (!last) RESULT(max ? oar_argmax(x, (int)axis, keep) : oar_argmin(x, (int)axis, keep));
    /* the last of equal extremes: the first in the flipped tensor */
    oar_tensor *f = oar_flip(x, 1, &axis);
    oar_tensor *i = max ? oar_argmax(f, (int)axis, keep) : oar_argmin(f, (int)axis, keep);
    RESULT(oar_add_scalar(oar_neg(i), (double)(oar_tensor_shape(x)[axis] - 1)));
}

int oari_onnx_conv_cumsum(oari_onnx_node *nd) {
    NEED(2);
    oar_tensor *x = nd->in[0];
    int64_t axis;
    int st = oari_onnx_input_ints(nd, 1, &axis, 1);
    if (st < 0) return st;
    if (st != 1) return oari_error(OAR_ERR_INVALID, "axis must hold one value");
    if ((st = oari_onnx_axis(axis, oar_tensor_ndim(x), false, &axis))) return st;
    bool rev = oari_onnx_attr_i(nd, "reverse", 0) != 0, excl = oari_onnx_attr_i(nd, "exclusive", 0) != 0;
    oar_tensor *v = rev ? oar_flip(x, 1, &axis) : x;
    oar_tensor *y = oar_cumsum(v, (int)axis);
    if (excl) y = oar_sub(y, v);
    if (rev) y = oar_flip(y, 1, &axis);
    RESULT(like(y, x));
}

/* ---- windows (opset 17) ---------------------------------------------------------- */

int oari_onnx_conv_window(oari_onnx_node *nd) {
    NEED(1);
    int64_t n;
    int k = oari_onnx_input_ints(nd, 0, &n, 1);
    if (k < 0) return k;
    if (k != 1 || n < 0) return oari_error(OAR_ERR_INVALID, "size must be one value >= 0");
    oar_dtype dt = oari_onnx_dtype((int32_t)oari_onnx_attr_i(nd, "output_datatype", 1));
    if (dt == OAR_DTYPE_INVALID) return oari_error(OAR_ERR_UNSUPPORTED, "output_datatype is not an oar dtype");
    double den = oari_onnx_attr_i(nd, "periodic", 1) ? (double)n : (double)(n - 1);
    oar_tensor *t = oar_mul_scalar(oar_arange(0, (double)n, 1, OAR_F64), 2 * M_PI / (den > 0 ? den : 1));
    oar_tensor *w;
    if (OP_IS("HannWindow")) w = oar_add_scalar(oar_mul_scalar(oar_cos(t), -0.5), 0.5);
    else if (OP_IS("HammingWindow")) w = oar_add_scalar(oar_mul_scalar(oar_cos(t), -21.0 / 46.0), 25.0 / 46.0);
    else w = oar_add(oar_add_scalar(oar_mul_scalar(oar_cos(t), -0.5), 0.42), oar_mul_scalar(oar_cos(oar_mul_scalar(t, 2)), 0.08));
    RESULT(oar_cast(w, dt));
}

/* ONNX export emitters: elementwise ops that are not one ONNX node of the
 * same inputs (decompositions, attributes, dtype-dependent forms). The
 * direct ones (Relu, Add, ...) are rows of onnx_export_table.c only. */
#define OARI_ONNX_PROTO
#include "onnx_export_internal.h"
#include <math.h>

int oari_onnx_emit_ne(oari_xp *x, const oari_xnode *e) {
    OP1("Not", OP2("Equal", e->X, e->X1, NULL), e->Y);
    return x->st;
}

int oari_onnx_emit_exp2(oari_xp *x, const oari_xnode *e) {
    OP2("Pow", oari_xp_scalar(x, e->dt, 2.0), e->X, e->Y);
    return x->st;
}

int oari_onnx_emit_log2(oari_xp *x, const oari_xnode *e) {
    OP2("Div", OP1("Log", e->X, NULL), oari_xp_scalar(x, e->dt, M_LN2), e->Y);
    return x->st;
}

int oari_onnx_emit_log1p(oari_xp *x, const oari_xnode *e) {
    OP1("Log", OP2("Add", e->X, oari_xp_scalar(x, e->dt, 1.0), NULL), e->Y);
    return x->st;
}

int oari_onnx_emit_expm1(oari_xp *x, const oari_xnode *e) {
    OP2("Sub", OP1("Exp", e->X, NULL), oari_xp_scalar(x, e->dt, 1.0), e->Y);
    return x->st;
}

int oari_onnx_emit_rsqrt(oari_xp *x, const oari_xnode *e) {
    OP1("Reciprocal", OP1("Sqrt", e->X, NULL), e->Y);
    return x->st;
}

int oari_onnx_emit_square(oari_xp *x, const oari_xnode *e) {
    OP2("Mul", e->X, e->X, e->Y);
    return x->st;
}

int oari_onnx_emit_trunc(oari_xp *x, const oari_xnode *e) {
    OP2("Mul", OP1("Sign", e->X, NULL), OP1("Floor", OP1("Abs", e->X, NULL), NULL), e->Y);
    return x->st;
}

int oari_onnx_emit_silu(oari_xp *x, const oari_xnode *e) {
    OP2("Mul", e->X, OP1("Sigmoid", e->X, NULL), e->Y);
    return x->st;
}

/* Y = 0.5 * X * (1 + erf(X / sqrt 2)) or the tanh form (attribute 0: 1). */
int oari_onnx_emit_gelu(oari_xp *x, const oari_xnode *e) {
    const char *X = e->X, *inner;
    oar_dtype dt = e->dt;
    if (e->a[0] != 0) {
        const char *x3 = OP2("Mul", OP2("Mul", X, X, NULL), X, NULL);
        const char *s = OP2("Add", X, OP2("Mul", x3, oari_xp_scalar(x, dt, 0.044715), NULL), NULL);
        inner = OP1("Tanh", OP2("Mul", s, oari_xp_scalar(x, dt, sqrt(2.0 / M_PI)), NULL), NULL);
    } else {
        inner = OP1("Erf", OP2("Mul", X, oari_xp_scalar(x, dt, M_SQRT1_2), NULL), NULL);
    }
    const char *h = OP2("Mul", X, oari_xp_scalar(x, dt, 0.5), NULL);
    OP2("Mul", h, OP2("Add", inner, oari_xp_scalar(x, dt, 1.0), NULL), e->Y);
    return x->st;
}

int oari_onnx_emit_relu6(oari_xp *x, const oari_xnode *e) {
    oari_xp_node1(
        x, "Clip", 3,
        (const char *const[]){e->X, oari_xp_scalar(x, e->dt, 0), oari_xp_scalar(x, e->dt, 6)},
        e->Y);
    return x->st;
}

/* A NaN bound is no bound: its input is omitted. */
int oari_onnx_emit_clamp(oari_xp *x, const oari_xnode *e) {
    const double *f = e->f;
    oari_xp_node1(x, "Clip", 3,
                  (const char *const[]){e->X, isnan(f[0]) ? "" : oari_xp_scalar(x, e->dt, f[0]),
                                        isnan(f[1]) ? "" : oari_xp_scalar(x, e->dt, f[1])},
                  e->Y);
    return x->st;
}

int oari_onnx_emit_leaky_relu(oari_xp *x, const oari_xnode *e) {
    oari_xp_set_f(x, oari_xp_node1(x, "LeakyRelu", 1, &e->X, e->Y), "alpha", e->f[0]);
    return x->st;
}

int oari_onnx_emit_elu(oari_xp *x, const oari_xnode *e) {
    oari_xp_set_f(x, oari_xp_node1(x, "Elu", 1, &e->X, e->Y), "alpha", e->f[0]);
    return x->st;
}

/* log(1 + exp(beta x)) / beta; oar's linear branch above the threshold
 * differs from it by < exp(-threshold). */
int oari_onnx_emit_softplus(oari_xp *x, const oari_xnode *e) {
    const double *f = e->f;
    if (f[0] == 1.0)
        OP1("Softplus", e->X, e->Y);
    else
        OP2("Div", OP1("Softplus", OP2("Mul", e->X, oari_xp_scalar(x, e->dt, f[0]), NULL), NULL),
            oari_xp_scalar(x, e->dt, f[0]), e->Y);
    return x->st;
}

int oari_onnx_emit_floor_div(oari_xp *x, const oari_xnode *e) {
    if (!oar_dtype_is_float(e->dt))
        return oari_xp_fail(x, "integer floor division has no ONNX equivalent");
    OP1("Floor", OP2("Div", e->X, e->X1, NULL), e->Y);
    return x->st;
}

int oari_onnx_emit_remainder(oari_xp *x, const oari_xnode *e) {
    const char *X = e->X, *X1 = e->X1;
    if (oar_dtype_is_float(e->dt)) /* Python's: a - floor(a / b) * b */
        OP2("Sub", X, OP2("Mul", OP1("Floor", OP2("Div", X, X1, NULL), NULL), X1, NULL), e->Y);
    else
        oari_xp_set_i(x, oari_xp_node1(x, "Mod", 2, (const char *const[]){X, X1}, e->Y), "fmod", 0);
    return x->st;
}

/* atan(y / x), moved by +-pi where x < 0; 0 where both are 0. */
int oari_onnx_emit_atan2(oari_xp *x, const oari_xnode *e) {
    const char *X = e->X, *X1 = e->X1;
    oar_dtype dt = e->dt;
    if (!oar_dtype_is_float(dt)) return oari_xp_fail(x, "atan2 of %s", oar_dtype_name(dt));
    const char *zero = oari_xp_scalar(x, dt, 0);
    const char *base = OP1("Atan", OP2("Div", X, X1, NULL), NULL);
    const char *turn = oari_xp_out0(oari_xp_node1(
        x, "Where", 3,
        (const char *const[]){OP2("GreaterOrEqual", X, zero, NULL), oari_xp_scalar(x, dt, M_PI),
                              oari_xp_scalar(x, dt, -M_PI)},
        NULL));
    const char *r = OP2(
        "Add", base,
        oari_xp_out0(oari_xp_node1(
            x, "Where", 3, (const char *const[]){OP2("Less", X1, zero, NULL), turn, zero}, NULL)),
        NULL);
    const char *both0 = OP2("And", OP2("Equal", X, zero, NULL), OP2("Equal", X1, zero, NULL), NULL);
    oari_xp_node1(x, "Where", 3, (const char *const[]){both0, zero, r}, e->Y);
    return x->st;
}

int oari_onnx_emit_cast(oari_xp *x, const oari_xnode *e) {
    oari_xp_set_i(x, oari_xp_node1(x, "Cast", 1, &e->X, e->Y), "to", oari_xp_type(e->ov->dtype));
    return x->st;
}

/* Gradients and Hessian-vector products of four small models against
 * PyTorch (tests/ref/gen_autograd.py) to 1e-10 in float64: an MLP with
 * tanh, a softmax cross-entropy, an attention block and a complex-valued
 * function. Exercises oar_vjp and oar_backward (gradients) and oar_hvp
 * (second order). */
#include "test.h"

#include "ref/autograd_ref.h"

#define TOL 1e-10

typedef struct model {
    const char *name;
    oar_fn fn;
    oar_tensor *x, *r, *target; /* constants, depending on the model */
} model;

static oar_tensor *mk(const double *v, oar_dtype dt, int ndim, int64_t a, int64_t b, int64_t c) {
    int64_t shape[3] = {a, b, c};
    return oar_tensor_from_data(v, dt, ndim, shape);
}

static int mlp(void *ctx, int n_in, oar_tensor *const *p, int n_out, oar_tensor **out) {
    model *m = ctx;
    (void)n_in; (void)n_out;
    oar_tensor *h = oar_tanh(oar_add(oar_matmul(m->x, p[0]), p[1]));
    oar_tensor *y = oar_add(oar_matmul(h, p[2]), p[3]);
    out[0] = oar_mul_scalar(oar_sum(oar_square(y), 0, NULL, false), 0.25);
    return out[0] ? 0 : -1;
}

static int ce(void *ctx, int n_in, oar_tensor *const *p, int n_out, oar_tensor **out) {
    model *m = ctx;
    (void)n_in; (void)n_out;
    oar_tensor *logits = oar_add(oar_matmul(m->x, p[0]), p[1]);
    out[0] = oar_cross_entropy(logits, m->target, NULL, -100, 0.0, OAR_REDUCTION_MEAN);
    return out[0] ? 0 : -1;
}

static int attention(void *ctx, int n_in, oar_tensor *const *p, int n_out, oar_tensor **out) {
    model *m = ctx;
    (void)n_in; (void)n_out;
    oar_tensor *q = oar_matmul(m->x, p[0]), *k = oar_matmul(m->x, p[1]), *v = oar_matmul(m->x, p[2]);
    oar_tensor *a = oar_softmax(oar_mul_scalar(oar_matmul(q, oar_transpose(k, -2, -1)), 0.5), -1);
    out[0] = oar_sum(oar_mul(oar_matmul(oar_matmul(a, v), p[3]), m->r), 0, NULL, false);
    return out[0] ? 0 : -1;
}

static int complex_fn(void *ctx, int n_in, oar_tensor *const *p, int n_out, oar_tensor **out) {
    (void)ctx; (void)n_in; (void)n_out;
    oar_tensor *z = p[0], *w = p[1];
    oar_tensor *a = oar_sum(oar_square(oar_abs(oar_add(oar_exp(oar_mul(z, w)), z))), 0, NULL, false);
    oar_tensor *b = oar_sum(oar_real(oar_mul(z, oar_conj(w))), 0, NULL, false);
    out[0] = oar_add(a, b);
    return out[0] ? 0 : -1;
}

/* Compares t (f64 or c128) with n doubles (interleaved for complex). */
static void expect(const char *what, oar_tensor *t, const double *want, size_t n) {
    double *got = calloc(n, sizeof *got);
    int st = t ? oar_tensor_to_host(t, got, n * sizeof *got) : -1;
    int bad = st != 0;
    for (size_t i = 0; i < n && !st; i++) {
        if (fabs(got[i] - want[i]) > TOL * (1 + fabs(want[i]))) {
            if (bad < 3)
                fprintf(stderr, "%s: %s[%zu] = %.17g, expected %.17g\n", test_current, what, i,
                        got[i], want[i]);
            bad++;
        }
    }
    if (st) fprintf(stderr, "%s: %s: %s\n", test_current, what, oar_last_error());
    if (bad) test_failed++;
    else test_passed++;
    free(got);
}

#define N(a) (sizeof(a) / sizeof((a)[0]))

/* Gradient via oar_vjp and H v via oar_hvp for n parameters. */
static void check_model(model *m, int n, oar_tensor **params, oar_tensor **v, const double *loss,
                        const double *const *grads, const size_t *sizes,
                        const double *const *hvps) {
    oar_tensor *g[4], *hv[4], *value, *val2;
    CHECK(oar_vjp(m->fn, m, n, params, 1, NULL, false, &value, g) == 0);
    expect("loss", value, loss, 1);
    CHECK(oar_hvp(m->fn, m, n, params, v, false, &val2, hv) == 0);
    expect("loss (hvp)", val2, loss, 1);
    for (int i = 0; i < n; i++) {
        char what[32];
        snprintf(what, sizeof what, "grad %d", i);
        expect(what, g[i], grads[i], sizes[i]);
        snprintf(what, sizeof what, "hvp %d", i);
        expect(what, hv[i], hvps[i], sizes[i]);
    }
    /* the same gradients through oar_backward into .grad */
    for (int i = 0; i < n; i++) oar_tensor_set_requires_grad(params[i], true);
    oar_tensor *loss_t;
    CHECK(m->fn(m, n, params, 1, &loss_t) == 0 && oar_backward(loss_t, NULL) == 0);
    for (int i = 0; i < n; i++) {
        expect(".grad", oar_tensor_grad(params[i]), grads[i], sizes[i]);
        oar_tensor_zero_grad(params[i]);
        oar_tensor_set_requires_grad(params[i], false);
    }
}

static void test_mlp(void) {
    oar_pool *pool = oar_pool_push();
    model m = {"mlp", mlp, mk(mlp_x, OAR_F64, 2, 4, 3, 0), NULL, NULL};
    oar_tensor *p[4] = {mk(mlp_p0, OAR_F64, 2, 3, 5, 0), mk(mlp_p1, OAR_F64, 1, 5, 0, 0),
                        mk(mlp_p2, OAR_F64, 2, 5, 2, 0), mk(mlp_p3, OAR_F64, 1, 2, 0, 0)};
    oar_tensor *v[4] = {mk(mlp_v0, OAR_F64, 2, 3, 5, 0), mk(mlp_v1, OAR_F64, 1, 5, 0, 0),
                        mk(mlp_v2, OAR_F64, 2, 5, 2, 0), mk(mlp_v3, OAR_F64, 1, 2, 0, 0)};
    const double *g[4] = {mlp_grad0, mlp_grad1, mlp_grad2, mlp_grad3};
    const double *h[4] = {mlp_hvp0, mlp_hvp1, mlp_hvp2, mlp_hvp3};
    size_t sz[4] = {N(mlp_grad0), N(mlp_grad1), N(mlp_grad2), N(mlp_grad3)};
    check_model(&m, 4, p, v, mlp_loss, g, sz, h);
    oar_pool_pop(pool);
}

static void test_cross_entropy(void) {
    oar_pool *pool = oar_pool_push();
    int64_t nt = N(ce_target);
    model m = {"ce", ce, mk(ce_x, OAR_F64, 2, 6, 3, 0), NULL,
               oar_tensor_from_data(ce_target, OAR_I64, 1, &nt)};
    oar_tensor *p[2] = {mk(ce_p0, OAR_F64, 2, 3, 5, 0), mk(ce_p1, OAR_F64, 1, 5, 0, 0)};
    oar_tensor *v[2] = {mk(ce_v0, OAR_F64, 2, 3, 5, 0), mk(ce_v1, OAR_F64, 1, 5, 0, 0)};
    const double *g[2] = {ce_grad0, ce_grad1}, *h[2] = {ce_hvp0, ce_hvp1};
    size_t sz[2] = {N(ce_grad0), N(ce_grad1)};
    check_model(&m, 2, p, v, ce_loss, g, sz, h);
    oar_pool_pop(pool);
}

static void test_attention(void) {
    oar_pool *pool = oar_pool_push();
    model m = {"att", attention, mk(att_x, OAR_F64, 3, 2, 3, 4), mk(att_r, OAR_F64, 3, 2, 3, 4), NULL};
    oar_tensor *p[4] = {mk(att_p0, OAR_F64, 2, 4, 4, 0), mk(att_p1, OAR_F64, 2, 4, 4, 0),
                        mk(att_p2, OAR_F64, 2, 4, 4, 0), mk(att_p3, OAR_F64, 2, 4, 4, 0)};
    oar_tensor *v[4] = {mk(att_v0, OAR_F64, 2, 4, 4, 0), mk(att_v1, OAR_F64, 2, 4, 4, 0),
                        mk(att_v2, OAR_F64, 2, 4, 4, 0), mk(att_v3, OAR_F64, 2, 4, 4, 0)};
    const double *g[4] = {att_grad0, att_grad1, att_grad2, att_grad3};
    const double *h[4] = {att_hvp0, att_hvp1, att_hvp2, att_hvp3};
    size_t sz[4] = {16, 16, 16, 16};
    check_model(&m, 4, p, v, att_loss, g, sz, h);
    oar_pool_pop(pool);
}

static void test_complex(void) {
    oar_pool *pool = oar_pool_push();
    model m = {"cx", complex_fn, NULL, NULL, NULL};
    oar_tensor *p[2] = {mk(cx_p0, OAR_C128, 1, 3, 0, 0), mk(cx_p1, OAR_C128, 1, 3, 0, 0)};
    oar_tensor *v[2] = {mk(cx_v0, OAR_C128, 1, 3, 0, 0), mk(cx_v1, OAR_C128, 1, 3, 0, 0)};
    const double *g[2] = {cx_grad0, cx_grad1}, *h[2] = {cx_hvp0, cx_hvp1};
    size_t sz[2] = {6, 6};
    check_model(&m, 2, p, v, cx_loss, g, sz, h);
    oar_pool_pop(pool);
}

int main(void) {
    RUN(test_mlp);
    RUN(test_cross_entropy);
    RUN(test_attention);
    RUN(test_complex);
    return test_summary();
}

/* Autograd engine: backward and grad over composite expressions, several
 * paths, accumulation, retain_graph, higher order, complex, the functional
 * transforms, errors (non-scalar loss, int tensors, second backward,
 * in-place modification), no_grad, pools and memory returning to its level
 * before the forward pass. Expected values are closed forms. */
#include "test.h"

#include "autograd/node.h" /* oari_autograd_record */

static oar_tensor *vec(const double *v, int64_t n) { return oar_tensor_from_data(v, OAR_F64, 1, &n); }

static oar_tensor *leaf(const double *v, int64_t n) {
    oar_tensor *t = vec(v, n);
    oar_tensor_set_requires_grad(t, true);
    return t;
}

static oar_tensor *sum_all(oar_tensor *x) { return oar_sum(x, 0, NULL, false); }

static const double X[4] = {0.5, -1.25, 2.0, 0.1};
static const double W[4] = {1.5, 0.25, -0.75, 3.0};

static void test_backward_composite(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *x = leaf(X, 4), *w = leaf(W, 4);
    /* L = sum(exp(x) * w + -x) + sum(x * x) */
    oar_tensor *loss = oar_add(sum_all(oar_add(oar_mul(oar_exp(x), w), oar_neg(x))),
                               sum_all(oar_mul(x, x)));
    CHECK(loss && oar_tensor_requires_grad(loss) && !oar_tensor_is_leaf(loss));
    CHECK(oar_backward(loss, NULL) == 0);
    double gx[4], gw[4];
    for (int i = 0; i < 4; i++) {
        gx[i] = exp(X[i]) * W[i] - 1 + 2 * X[i];
        gw[i] = exp(X[i]);
    }
    CHECK_VALUES(oar_tensor_grad(x), gx, 4, 1e-14);
    CHECK_VALUES(oar_tensor_grad(w), gw, 4, 1e-14);
    CHECK(oar_tensor_dtype(oar_tensor_grad(x)) == OAR_F64);
    /* accumulation: a second graph adds into .grad */
    oar_tensor *loss2 = sum_all(oar_mul(x, w));
    CHECK(oar_backward(loss2, NULL) == 0);
    for (int i = 0; i < 4; i++) gx[i] += W[i];
    CHECK_VALUES(oar_tensor_grad(x), gx, 4, 1e-14);
    oar_tensor *g_keep = oar_tensor_grad(w);
    oar_pool_pop(p);
    /* .grad outlives the pool (owned by the tensor) -- x, w are pool-owned
     * and now gone, so check through a fresh pair */
    (void)g_keep;
    p = oar_pool_push();
    x = leaf(X, 4);
    CHECK(oar_backward(sum_all(oar_mul(x, x)), NULL) == 0);
    oar_tensor *keep = oar_tensor_retain(x);
    oar_pool_pop(p);
    for (int i = 0; i < 4; i++) gx[i] = 2 * X[i];
    CHECK_VALUES(oar_tensor_grad(keep), gx, 4, 1e-14);
    CHECK(oar_tensor_zero_grad(keep) == 0 && oar_tensor_grad(keep) == NULL);
    oar_tensor_release(keep);
}

static void test_diamond_and_grad(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *x = leaf(X, 4), *w = leaf(W, 4);
    oar_tensor *e = oar_exp(x);
    oar_tensor *y = oar_mul(oar_mul(e, e), w); /* exp(2x) w through two paths */
    oar_tensor *go = vec(W, 4);
    oar_tensor *g[3];
    oar_tensor *ins[3] = {x, w, e};
    CHECK(oar_grad(1, &y, &go, 3, ins, false, false, g) == 0);
    double gx[4], gw[4], ge[4];
    for (int i = 0; i < 4; i++) {
        gx[i] = 2 * exp(2 * X[i]) * W[i] * W[i];
        gw[i] = exp(2 * X[i]) * W[i];
        ge[i] = 2 * exp(X[i]) * W[i] * W[i];
    }
    CHECK_VALUES(g[0], gx, 4, 1e-13);
    CHECK_VALUES(g[1], gw, 4, 1e-13);
    CHECK_VALUES(g[2], ge, 4, 1e-13); /* w.r.t. an intermediate tensor */
    CHECK(oar_tensor_grad(x) == NULL && oar_tensor_grad(w) == NULL); /* grad leaves .grad alone */
    /* the graph was freed by that call */
    CHECK_STATUS_FAILS(oar_grad(1, &y, &go, 1, ins, false, false, g), "second time");
    /* unused inputs */
    oar_tensor *z = leaf(X, 4);
    oar_tensor *y2 = oar_mul(x, x);
    oar_tensor *ins2[2] = {x, z};
    CHECK_STATUS_FAILS(oar_grad(1, &y2, &go, 2, ins2, false, false, g), "not used");
    y2 = oar_mul(x, x);
    CHECK(oar_grad(1, &y2, &go, 2, ins2, false, true, g) == 0 && g[0] && g[1] == NULL);
    /* the output itself as an input: d y / d y = grad_output */
    oar_tensor *y3 = oar_exp(x);
    CHECK(oar_grad(1, &y3, &go, 1, &y3, false, false, g) == 0);
    CHECK_VALUES(g[0], W, 4, 0);
    oar_pool_pop(p);
}

static void test_retain_and_second_backward(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *x = leaf(X, 4);
    oar_tensor *loss = sum_all(oar_exp(oar_mul(x, x)));
    CHECK(oar_backward_ex(1, &loss, NULL, OAR_GRAD_RETAIN_GRAPH) == 0);
    CHECK(oar_backward(loss, NULL) == 0); /* allowed: the first retained it */
    double gx[4];
    for (int i = 0; i < 4; i++) gx[i] = 2 * 2 * X[i] * exp(X[i] * X[i]);
    CHECK_VALUES(oar_tensor_grad(x), gx, 4, 1e-13);
    CHECK_STATUS_FAILS(oar_backward(loss, NULL), "backward through the graph a second time");
    oar_pool_pop(p);
}

static void test_errors(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *x = leaf(X, 4);
    oar_tensor *y = oar_mul(x, x);
    CHECK_STATUS_FAILS(oar_backward(y, NULL), "one-element real output");
    oar_tensor *bad = vec(X, 3);
    CHECK_STATUS_FAILS(oar_backward(y, bad), "grad_output 0 has shape [3] but output 0 has shape [4]");
    int64_t n = 4;
    oar_tensor *ints = oar_zeros(OAR_I64, 1, &n);
    CHECK_STATUS_FAILS(oar_tensor_set_requires_grad(ints, true), "only floating and complex");
    CHECK(oar_tensor_set_requires_grad(ints, false) == 0);
    CHECK_STATUS_FAILS(oar_tensor_set_requires_grad(y, false), "leaf");
    CHECK_STATUS_FAILS(oar_tensor_set_requires_grad(NULL, true), "NULL");
    oar_tensor *c = vec(X, 4);
    CHECK_STATUS_FAILS(oar_backward(sum_all(c), NULL), "does not require grad");
    CHECK_STATUS_FAILS(oar_backward(NULL, NULL), "NULL");
    oar_tensor *g;
    CHECK_STATUS_FAILS(oar_grad(1, &y, NULL, 1, &c, false, false, &g), "input 0 does not require grad");
    /* in-place modification of a saved tensor */
    oar_tensor *ysave = sum_all(oar_mul(c, x)); /* saves c */
    CHECK(oar_fill_(c, 2.0) == 0);
    CHECK_STATUS_FAILS(oar_backward(ysave, NULL),
                       "modified by an in-place operation: mul's input 0");
    /* a saved output modified in place */
    oar_tensor *e = oar_exp(x);
    oar_tensor *le = sum_all(e);
    oar_no_grad_push();
    CHECK(oar_fill_(e, 1.0) == 0);
    oar_no_grad_pop();
    CHECK_STATUS_FAILS(oar_backward(le, NULL), "exp's output 0");
    /* a NULL from a failed op is reported as its first error */
    CHECK_STATUS_FAILS(oar_backward(oar_add(x, bad), NULL), "do not broadcast");
    oar_pool_pop(p);
}

static void test_no_grad(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *x = leaf(X, 4);
    oar_no_grad_push();
    CHECK(!oar_grad_enabled());
    oar_tensor *y = oar_mul(x, x);
    CHECK(y && !oar_tensor_requires_grad(y) && oar_tensor_is_leaf(y));
    oar_no_grad_pop();
    CHECK(oar_grad_enabled());
    oar_tensor *d = oar_detach(oar_mul(x, x));
    CHECK(d && !oar_tensor_requires_grad(d));
    /* create_graph works inside no_grad (grad mode follows create_graph) */
    oar_tensor *y3 = oar_mul(oar_mul(x, x), x);
    oar_tensor *go = vec(W, 4), *g;
    oar_no_grad_push();
    CHECK(oar_grad(1, &y3, &go, 1, &x, true, false, &g) == 0);
    oar_no_grad_pop();
    CHECK(g && oar_tensor_requires_grad(g));
    oar_pool_pop(p);
}

static void test_higher_order(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *x = leaf(X, 4);
    oar_tensor *y = oar_mul(oar_mul(x, x), oar_exp(x)); /* x^2 e^x */
    oar_tensor *ones = oar_ones_like(x), *g1, *g2, *g3;
    CHECK(oar_grad(1, &y, &ones, 1, &x, true, false, &g1) == 0);
    CHECK(oar_grad(1, &g1, &ones, 1, &x, true, false, &g2) == 0);
    CHECK(oar_grad(1, &g2, &ones, 1, &x, false, false, &g3) == 0);
    double w1[4], w2[4], w3[4];
    for (int i = 0; i < 4; i++) {
        double t = X[i], e = exp(t);
        w1[i] = (2 * t + t * t) * e;
        w2[i] = (2 + 4 * t + t * t) * e;
        w3[i] = (6 + 6 * t + t * t) * e;
    }
    CHECK_VALUES(g1, w1, 4, 1e-13);
    CHECK_VALUES(g2, w2, 4, 1e-13);
    CHECK_VALUES(g3, w3, 4, 1e-13);
    /* backward with create_graph makes .grad differentiable */
    oar_tensor *z = leaf(X, 4);
    oar_tensor *lz = sum_all(oar_mul(oar_mul(z, z), z));
    CHECK(oar_backward_ex(1, &lz, NULL, OAR_GRAD_CREATE_GRAPH) == 0);
    oar_tensor *gz = oar_tensor_grad(z), *h;
    CHECK(gz && oar_tensor_requires_grad(gz));
    oar_tensor *s = sum_all(gz);
    CHECK(oar_grad(1, &s, NULL, 1, &z, false, false, &h) == 0);
    double wh[4];
    for (int i = 0; i < 4; i++) wh[i] = 6 * X[i];
    CHECK_VALUES(h, wh, 4, 1e-13);
    oar_tensor_zero_grad(z); /* .grad holds a graph that references z */
    oar_pool_pop(p);
}

static void test_complex(void) {
    oar_pool *p = oar_pool_push();
    double zv[6] = {1.0, 2.0, -0.5, 0.25, 3.0, -1.0};
    int64_t n = 3;
    oar_tensor *z = oar_tensor_from_data(zv, OAR_C128, 1, &n);
    oar_tensor_set_requires_grad(z, true);
    /* L = sum(real(z * conj(z))) = sum |z|^2: PyTorch's grad is 2 z */
    oar_tensor *loss = sum_all(oar_real(oar_mul(z, oar_conj(z))));
    CHECK(oar_backward(loss, NULL) == 0);
    oar_tensor *g = oar_tensor_grad(z);
    CHECK(g && oar_tensor_dtype(g) == OAR_C128);
    double back[6] = {0};
    CHECK(g && oar_tensor_to_host(g, back, sizeof back) == 0);
    for (int i = 0; i < 6; i++) CHECK_NEAR(back[i], 2 * zv[i], 1e-14);
    /* L = sum(real(exp(z) * w)), w complex: grad = conj(exp(z) w)... as torch:
     * dL/dz* convention gives conj(w * exp(z)) */
    double wv[6] = {0.5, -1.0, 2.0, 0.5, -1.5, 0.75};
    oar_tensor *w = oar_tensor_from_data(wv, OAR_C128, 1, &n), *gz;
    oar_tensor *l2 = sum_all(oar_real(oar_mul(oar_exp(z), w)));
    CHECK(oar_grad(1, &l2, NULL, 1, &z, false, false, &gz) == 0);
    CHECK(gz && oar_tensor_to_host(gz, back, sizeof back) == 0);
    for (int i = 0; i < 3; i++) {
        double er = exp(zv[2 * i]) * cos(zv[2 * i + 1]), ei = exp(zv[2 * i]) * sin(zv[2 * i + 1]);
        double pr = er * wv[2 * i] - ei * wv[2 * i + 1], pi = er * wv[2 * i + 1] + ei * wv[2 * i];
        CHECK_NEAR(back[2 * i], pr, 1e-13);
        CHECK_NEAR(back[2 * i + 1], -pi, 1e-13);
    }
    CHECK_STATUS_FAILS(oar_backward(oar_mul(z, z), NULL), "real output");
    oar_pool_pop(p);
}

/* f(x, w) = [exp(x) * w, x * x] */
static int two_outputs(void *ctx, int n_in, oar_tensor *const *in, int n_out, oar_tensor **out) {
    (void)ctx; (void)n_in;
    out[0] = oar_mul(oar_exp(in[0]), in[1]);
    if (n_out > 1) out[1] = oar_mul(in[0], in[0]);
    return out[0] && (n_out < 2 || out[1]) ? 0 : -1;
}

/* f(x) = sum(x * x * exp(x)) + x0 * x1 (through a product of slices-free terms) */
static int scalar_fn(void *ctx, int n_in, oar_tensor *const *in, int n_out, oar_tensor **out) {
    (void)ctx; (void)n_in; (void)n_out;
    oar_tensor *x = in[0];
    out[0] = oar_add(sum_all(oar_mul(oar_mul(x, x), oar_exp(x))), sum_all(oar_mul(x, in[1])));
    return out[0] ? 0 : -1;
}

static void test_functional(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *x = vec(X, 4), *w = vec(W, 4);
    oar_tensor *ins[2] = {x, w};
    oar_tensor *v[2] = {vec(W, 4), vec(X, 4)};
    oar_tensor *outs[2], *vj[2], *jv[2];
    CHECK(oar_vjp(two_outputs, NULL, 2, ins, 2, v, false, outs, vj) == 0);
    double wx[4], ww[4], o0[4];
    for (int i = 0; i < 4; i++) {
        o0[i] = exp(X[i]) * W[i];
        wx[i] = exp(X[i]) * W[i] * W[i] + 2 * X[i] * X[i];
        ww[i] = exp(X[i]) * W[i];
    }
    CHECK_VALUES(outs[0], o0, 4, 1e-14);
    CHECK(!oar_tensor_requires_grad(outs[0]) && !oar_tensor_requires_grad(vj[0]));
    CHECK_VALUES(vj[0], wx, 4, 1e-13);
    CHECK_VALUES(vj[1], ww, 4, 1e-13);
    /* jvp with tangents (t_x, t_w) = (W, X) */
    oar_tensor *t[2] = {vec(W, 4), vec(X, 4)};
    CHECK(oar_jvp(two_outputs, NULL, 2, ins, t, 2, false, NULL, jv) == 0);
    double j0[4], j1[4];
    for (int i = 0; i < 4; i++) {
        j0[i] = exp(X[i]) * W[i] * W[i] + exp(X[i]) * X[i];
        j1[i] = 2 * X[i] * W[i];
    }
    CHECK_VALUES(jv[0], j0, 4, 1e-13);
    CHECK_VALUES(jv[1], j1, 4, 1e-13);
    /* jacobian: d out0 / d x = diag(exp(x) w), d out1 / d w = 0 */
    oar_tensor *jac[4];
    CHECK(oar_jacobian(two_outputs, NULL, 2, ins, 2, false, jac) == 0);
    CHECK(jac[0] && oar_tensor_ndim(jac[0]) == 2 && oar_tensor_shape(jac[0])[1] == 4);
    double d0[16] = {0}, zero[16] = {0}, d1[16] = {0};
    for (int i = 0; i < 4; i++) {
        d0[i * 5] = exp(X[i]) * W[i];
        d1[i * 5] = 2 * X[i];
    }
    CHECK_VALUES(jac[0], d0, 16, 1e-13);
    CHECK_VALUES(jac[2], d1, 16, 1e-13);
    CHECK_VALUES(jac[3], zero, 16, 0);
    /* hessian and hvp of the scalar function */
    oar_tensor *hess[4], *hv[2], *val;
    CHECK(oar_hessian(scalar_fn, NULL, 2, ins, false, hess) == 0);
    double hxx[16] = {0}, hxw[16] = {0};
    for (int i = 0; i < 4; i++) {
        hxx[i * 5] = (2 + 4 * X[i] + X[i] * X[i]) * exp(X[i]);
        hxw[i * 5] = 1;
    }
    CHECK_VALUES(hess[0], hxx, 16, 1e-13);
    CHECK_VALUES(hess[1], hxw, 16, 1e-13);
    CHECK_VALUES(hess[2], hxw, 16, 1e-13);
    CHECK_VALUES(hess[3], zero, 16, 0);
    CHECK(oar_hvp(scalar_fn, NULL, 2, ins, v, false, &val, hv) == 0);
    double hvx[4], hvw[4], f = 0;
    for (int i = 0; i < 4; i++) {
        hvx[i] = hxx[i * 5] * W[i] + X[i];
        hvw[i] = W[i];
        f += X[i] * X[i] * exp(X[i]) + X[i] * W[i];
    }
    CHECK_VALUES(hv[0], hvx, 4, 1e-13);
    CHECK_VALUES(hv[1], hvw, 4, 1e-13);
    CHECK_NEAR(oar_tensor_item(val), f, 1e-13);
    /* create_graph: the vjp is differentiable w.r.t. inputs that require grad */
    oar_tensor *xl = leaf(X, 4), *ins2[2] = {xl, w}, *g2;
    CHECK(oar_vjp(two_outputs, NULL, 2, ins2, 2, v, true, NULL, vj) == 0);
    CHECK(vj[0] && oar_tensor_requires_grad(vj[0]));
    oar_tensor *sv = sum_all(vj[0]);
    CHECK(oar_grad(1, &sv, NULL, 1, &xl, false, false, &g2) == 0);
    double wg[4];
    for (int i = 0; i < 4; i++) wg[i] = exp(X[i]) * W[i] * W[i] + 2 * X[i];
    CHECK_VALUES(g2, wg, 4, 1e-13);
    /* jacobian and jvp with create_graph stay differentiable */
    CHECK(oar_jacobian(two_outputs, NULL, 2, ins2, 2, true, jac) == 0);
    CHECK(jac[0] && oar_tensor_requires_grad(jac[0]));
    oar_tensor *sj = sum_all(jac[0]); /* sum(exp(x) w) */
    CHECK(oar_grad(1, &sj, NULL, 1, &xl, false, false, &g2) == 0);
    CHECK_VALUES(g2, o0, 4, 1e-13);
    CHECK(oar_jvp(two_outputs, NULL, 2, ins2, t, 2, true, NULL, jv) == 0);
    oar_tensor *sjv = sum_all(jv[1]); /* sum(2 x W) */
    CHECK(oar_grad(1, &sjv, NULL, 1, &xl, false, false, &g2) == 0);
    double w2x[4];
    for (int i = 0; i < 4; i++) w2x[i] = 2 * W[i];
    CHECK_VALUES(g2, w2x, 4, 1e-13);
    CHECK_STATUS_FAILS(oar_hvp(two_outputs, NULL, 2, ins, v, false, NULL, hv), "one real element");
    CHECK(hv[0] == NULL && hv[1] == NULL);
    CHECK_STATUS_FAILS(oar_vjp(NULL, NULL, 2, ins, 2, v, false, NULL, vj), "fn is NULL");
    oar_pool_pop(p);
}

static size_t in_use(void) {
    oar_memory_stats s;
    oar_memory_stats_get(&s);
    return s.bytes_in_use;
}

static void test_memory(void) {
    int64_t n = 4096;
    oar_tensor *x = oar_randn(OAR_F64, 1, &n), *w = oar_randn(OAR_F64, 1, &n);
    oar_tensor_set_requires_grad(x, true);
    oar_tensor_set_requires_grad(w, true);
    size_t base = in_use();
    oar_pool *p = oar_pool_push();
    oar_tensor *h = x;
    for (int i = 0; i < 8; i++) h = oar_mul(oar_exp(oar_mul(h, w)), w);
    oar_tensor *loss = oar_tensor_retain(sum_all(h));
    oar_pool_pop(p);
    size_t mid = in_use();
    CHECK(mid >= base + 12 * (size_t)n * 8); /* the graph keeps its saved tensors */
    CHECK(oar_backward(loss, NULL) == 0);
    CHECK(oar_tensor_grad(x) && oar_tensor_grad(w));
    oar_tensor_zero_grad(x);
    oar_tensor_zero_grad(w);
    size_t after = in_use();
    CHECK(after <= base + 256); /* only the scalar loss is left */
    oar_tensor_release(loss);
    CHECK(in_use() == base);
    /* retain_graph keeps them until the graph dies */
    p = oar_pool_push();
    loss = oar_tensor_retain(sum_all(oar_exp(oar_mul(x, w))));
    oar_pool_pop(p);
    CHECK(oar_backward_ex(1, &loss, NULL, OAR_GRAD_RETAIN_GRAPH) == 0);
    oar_tensor_zero_grad(x);
    oar_tensor_zero_grad(w);
    CHECK(in_use() > base + 256);
    oar_tensor_release(loss);
    CHECK(in_use() == base);
    /* a long chain releases without deep recursion */
    oar_tensor *y = oar_tensor_retain(x);
    for (int i = 0; i < 20000; i++) {
        oar_tensor *z = oar_neg(y);
        oar_tensor_release(y);
        y = z;
    }
    oar_tensor_release(y);
    CHECK(in_use() == base);
    oar_tensor_release(x);
    oar_tensor_release(w);
}

static void test_no_rule(void) {
    /* A node whose op has no gradient rule fails clearly. Every
     * differentiable op has a rule, so record a NONDIFF one (bernoulli, a
     * float output) on the tape by hand, as dispatch would if it were not
     * marked NONDIFF. */
    oar_pool *p = oar_pool_push();
    oar_tensor *x = leaf(X, 4);
    int64_t n = 4;
    oar_tensor *y = oar_empty(OAR_F64, 1, &n, NULL);
    oari_attrs a = {0};
    CHECK(oari_autograd_record(OARI_OP_bernoulli, &a, 1, &x, 1, &y) == 0);
    CHECK(oar_tensor_requires_grad(y) && !oar_tensor_is_leaf(y));
    oar_tensor *go = oar_ones_like(y), *g;
    CHECK_STATUS_FAILS(oar_grad(1, &y, &go, 1, &x, false, false, &g), "bernoulli has no gradient rule");
    oar_pool_pop(p);
}

/* The Nth host allocation fails, for every N: backward and grad report
 * it (or succeed) and nothing leaks. */
typedef struct failing {
    long n, fail_at;
    long long live; /* bytes currently allocated through the hook */
} failing;

static void *failing_alloc(void *ctx, void *ptr, size_t old_size, size_t new_size) {
    failing *f = ctx;
    if (new_size == 0) {
        f->live -= (long long)old_size;
        free(ptr);
        return NULL;
    }
    if (++f->n == f->fail_at) return NULL;
    void *p = realloc(ptr, new_size);
    if (p) f->live += (long long)new_size - (long long)(ptr ? old_size : 0);
    return p;
}

static int backward_once(bool use_grad) {
    oar_pool *p = oar_pool_push();
    int st = -1;
    if (p) {
        oar_tensor *x = leaf(X, 4), *w = leaf(W, 4);
        oar_tensor *loss = sum_all(oar_mul(oar_exp(oar_mul(x, w)), oar_add(x, w)));
        if (use_grad) {
            oar_tensor *ins[2] = {x, w}, *g[2], *g2[2];
            st = loss ? oar_grad(1, &loss, NULL, 2, ins, true, false, g) : -1;
            oar_tensor *s = st ? NULL : sum_all(oar_add(g[0], g[1]));
            st = s ? oar_grad(1, &s, NULL, 2, ins, false, true, g2) : -1;
        } else {
            st = loss ? oar_backward(loss, NULL) : -1;
            if (x && w) {
                oar_tensor_zero_grad(x);
                oar_tensor_zero_grad(w);
            }
        }
    }
    oar_pool_pop(p);
    return st;
}

static void test_alloc_failures(void) {
    /* one hook for the whole test: thread caches (pool arrays) made during
     * the warm-up stay; everything else must come back */
    static failing f = {0, -1, 0};
    oar_set_allocator(failing_alloc, &f);
    CHECK(backward_once(false) == 0 && backward_once(true) == 0);
    oar_memory_empty_cache();
    long long base = f.live;
    for (int mode = 0; mode < 2; mode++) {
        f.n = 0;
        CHECK(backward_once(mode == 1) == 0);
        oar_memory_empty_cache();
        long total = f.n, failed = 0, silent = 0;
        for (long n = 1; n <= total; n++) {
            f.n = 0;
            f.fail_at = n;
            oar_clear_error();
            int st = backward_once(mode == 1);
            f.fail_at = -1;
            if (st) failed++;
            if (st && !oar_last_error()[0]) silent++;
            oar_clear_error();
            oar_memory_empty_cache();
            if (f.live != base) {
                fprintf(stderr, "alloc failure %ld (mode %d): %lld bytes leaked\n", n, mode,
                        f.live - base);
                CHECK(f.live == base);
                break;
            }
        }
        CHECK(total > 20 && failed > total / 2); /* most failure points are reported */
        CHECK(silent == 0);                      /* each with a message */
    }
    oar_set_allocator(NULL, NULL);
}

/* y = x W^T, as a linear layer computes it: W's gradient comes out of the
 * GEMM in W's own layout, so backward copies nothing (no contiguous op),
 * and it equals g^T x. */
static void test_weight_grad_layout(void) {
    oar_pool *p = oar_pool_push();
    oar_manual_seed(3);
    oar_tensor *x = oar_randn(OAR_F64, 3, (int64_t[]){2, 5, 4}), *w = oar_randn(OAR_F64, 2, (int64_t[]){3, 4});
    oar_tensor_set_requires_grad(w, true);
    oar_tensor *y = oar_matmul(x, oar_transpose(w, 0, 1)); /* [2, 5, 3] */
    oar_tensor *g = oar_randn(OAR_F64, 3, (int64_t[]){2, 5, 3});
    CHECK(oar_profiler_start() == 0);
    CHECK(oar_backward(y, g) == 0);
    CHECK(oar_profiler_stop() == 0);
    oar_profiler_stat st[64];
    int n = oar_profiler_stats(st, 64);
    CHECK(n > 0 && n <= 64);
    for (int i = 0; i < n && i < 64; i++)
        if (st[i].kind == OAR_PROFILER_OP) CHECK(strcmp(st[i].name, "contiguous") && strcmp(st[i].name, "copy"));
    oar_tensor *gw = oar_tensor_grad(w);
    CHECK(gw && oar_tensor_is_contiguous(gw));
    /* closed form: sum over batch and rows of g^T x */
    double *want = test_values(oar_sum(oar_matmul(oar_transpose(g, 1, 2), x), 1, (int64_t[]){0}, false));
    CHECK_VALUES(gw, want, 12, 1e-12);
    free(want);
    oar_pool_pop(p);
}

int main(void) {
    RUN(test_alloc_failures);
    RUN(test_backward_composite);
    RUN(test_diamond_and_grad);
    RUN(test_retain_and_second_backward);
    RUN(test_errors);
    RUN(test_no_grad);
    RUN(test_higher_order);
    RUN(test_complex);
    RUN(test_functional);
    RUN(test_memory);
    RUN(test_no_rule);
    RUN(test_weight_grad_layout);
    return test_summary();
}

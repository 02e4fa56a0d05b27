/* Recompute (oar_checkpoint): values and gradients equal, bit for bit in
 * f64, to the same computation without the checkpoint: an MLP segment with
 * parameters, dropout inside (the same masks, and the generator's stream
 * after backward as without), several inputs and outputs, nested
 * checkpoints, an input that does not require grad (the parameters still
 * get .grad), oar_grad through a segment; every failure path; and the peak
 * storage of a 16-layer chain lower with a checkpoint per layer. */
#include "test.h"

#include <stdint.h>

#include "autograd/node.h" /* oari_last_status */

enum { B = 4, D = 5, H = 7 };

typedef struct mlp {
    oar_tensor *w1, *b1, *w2, *b2; /* leaves that require grad */
    double p;                       /* dropout probability inside (0: none) */
    int calls, fail_at;             /* fail_at: the call that fails (0: never) */
    struct mlp *inner;              /* nested: run the second layer as a checkpoint of its own */
} mlp;

static oar_tensor *param(int64_t r, int64_t c, uint64_t seed) {
    oar_pool *p = oar_pool_push();
    oar_manual_seed(seed);
    int64_t s[2] = {r, c};
    oar_tensor *t = oar_tensor_retain(oar_randn(OAR_F64, c ? 2 : 1, s));
    oar_pool_pop(p);
    oar_tensor_set_requires_grad(t, true);
    return t;
}

static void mlp_init(mlp *m, double p) {
    memset(m, 0, sizeof *m);
    m->w1 = param(D, H, 11);
    m->b1 = param(H, 0, 12);
    m->w2 = param(H, D, 13);
    m->b2 = param(D, 0, 14);
    m->p = p;
}

static void mlp_free(mlp *m) {
    oar_tensor *t[4] = {m->w1, m->b1, m->w2, m->b2};
    for (int i = 0; i < 4; i++) {
        oar_tensor_zero_grad(t[i]);
        oar_tensor_release(t[i]);
    }
}

static void mlp_zero_grad(mlp *m) {
    oar_tensor_zero_grad(m->w1);
    oar_tensor_zero_grad(m->b1);
    oar_tensor_zero_grad(m->w2);
    oar_tensor_zero_grad(m->b2);
}

static int layer2(void *ctx, int n_in, oar_tensor *const *in, int n_out, oar_tensor **out) {
    mlp *m = ctx;
    out[0] = oar_add(oar_matmul(in[0], m->w2), m->b2);
    return out[0] ? 0 : -1;
}

/* y = dropout(tanh(x W1 + b1)) W2 + b2; with two inputs, x = in0 * in1 and
 * a second output sin(h). */
static int mlp_fn(void *ctx, int n_in, oar_tensor *const *in, int n_out, oar_tensor **out) {
    mlp *m = ctx;
    if (++m->calls == m->fail_at) {
        oar_tensor *bad = oar_matmul(in[0], in[0]); /* [B, D] @ [B, D]: a shape error */
        (void)bad;
        return -1;
    }
    oar_tensor *x = n_in > 1 ? oar_mul(in[0], in[1]) : in[0];
    oar_tensor *h = oar_tanh(oar_add(oar_matmul(x, m->w1), m->b1));
    if (m->p > 0) h = oar_dropout(h, m->p, true);
    if (m->inner) {
        if (oar_checkpoint(layer2, m, 1, &h, 1, out)) return -1;
    } else {
        out[0] = oar_add(oar_matmul(h, m->w2), m->b2);
    }
    if (n_out > 1) out[1] = oar_sin(h);
    for (int j = 0; j < n_out; j++)
        if (!out[j]) return -1;
    return 0;
}

static oar_tensor *input(uint64_t seed, bool grad) {
    oar_manual_seed(seed);
    int64_t s[2] = {B, D};
    oar_tensor *x = oar_randn(OAR_F64, 2, s);
    if (grad) oar_tensor_set_requires_grad(x, true);
    return x;
}

/* max |a - b| over all elements (0 for equal bits on finite values);
 * INFINITY when either holds a NaN (fmax would skip it: a NaN gradient on
 * both sides must not pass as equal) */
static double maxdiff(oar_tensor *a, oar_tensor *b) {
    if (!a || !b) return a == b ? 0 : INFINITY;
    int64_t n = oar_tensor_numel(a);
    if (n != oar_tensor_numel(b)) return INFINITY;
    double *va = test_values_ri(a, NULL), *vb = test_values_ri(b, NULL);
    double d = 0;
    for (int64_t i = 0; i < n; i++) d = isnan(va[i]) || isnan(vb[i]) ? INFINITY : fmax(d, fabs(va[i] - vb[i]));
    free(va);
    free(vb);
    return d;
}

static oar_tensor *keep_grad(oar_tensor *t) {
    oar_tensor *g = oar_tensor_grad(t);
    return g ? oar_tensor_retain(oar_clone(g)) : NULL;
}

/* One run: loss = sum(y0^2) (+ sum(y1) with two outputs); backward; keeps
 * the outputs, .grad of the inputs and parameters, and the next random draw. */
typedef struct run_result {
    oar_tensor *y[2], *gx[2], *gp[4], *next;
} run_result;

static void run(mlp *m, bool ckpt, int n_in, int n_out, bool x_grad, run_result *r) {
    memset(r, 0, sizeof *r);
    oar_pool *p = oar_pool_push();
    mlp_zero_grad(m);
    oar_tensor *x[2] = {input(1, x_grad), input(2, x_grad)};
    oar_tensor *y[2] = {NULL, NULL};
    oar_manual_seed(77);
    if (ckpt) CHECK(oar_checkpoint(mlp_fn, m, n_in, x, n_out, y) == 0);
    else CHECK(mlp_fn(m, n_in, x, n_out, y) == 0);
    oar_tensor *loss = oar_sum(oar_square(y[0]), 0, NULL, false);
    if (n_out > 1) loss = oar_add(loss, oar_sum(y[1], 0, NULL, false));
    CHECK(oar_backward(loss, NULL) == 0);
    int64_t s1 = 3;
    r->next = oar_tensor_retain(oar_rand(OAR_F64, 1, &s1));
    for (int j = 0; j < n_out; j++) r->y[j] = oar_tensor_retain(oar_detach(y[j]));
    for (int i = 0; i < n_in; i++) r->gx[i] = keep_grad(x[i]);
    oar_tensor *ps[4] = {m->w1, m->b1, m->w2, m->b2};
    for (int k = 0; k < 4; k++) r->gp[k] = keep_grad(ps[k]);
    for (int i = 0; i < 2; i++) oar_tensor_zero_grad(x[i]);
    oar_pool_pop(p);
}

static void run_free(run_result *r) {
    oar_tensor **t = (oar_tensor **)r;
    for (size_t i = 0; i < sizeof *r / sizeof *t; i++) oar_tensor_release(t[i]);
}

static void compare(mlp *m, int n_in, int n_out, bool x_grad) {
    run_result a, b;
    run(m, false, n_in, n_out, x_grad, &a);
    run(m, true, n_in, n_out, x_grad, &b);
    for (int j = 0; j < n_out; j++) CHECK(a.y[j] && maxdiff(a.y[j], b.y[j]) == 0);
    for (int i = 0; i < n_in; i++) {
        CHECK((a.gx[i] != NULL) == x_grad);
        CHECK(maxdiff(a.gx[i], b.gx[i]) == 0);
    }
    for (int k = 0; k < 4; k++) CHECK(a.gp[k] && maxdiff(a.gp[k], b.gp[k]) == 0);
    CHECK(maxdiff(a.next, b.next) == 0); /* the stream after backward is the same */
    run_free(&a);
    run_free(&b);
}

static void test_mlp(void) {
    mlp m;
    mlp_init(&m, 0);
    compare(&m, 1, 1, true);
    mlp_free(&m);
}

static void test_dropout(void) {
    mlp m;
    mlp_init(&m, 0.4);
    compare(&m, 1, 1, true);
    compare(&m, 2, 2, true);
    mlp_free(&m);
}

static void test_several_inputs_outputs(void) {
    mlp m;
    mlp_init(&m, 0);
    compare(&m, 2, 2, true);
    mlp_free(&m);
}

static void test_nested(void) {
    mlp m;
    mlp_init(&m, 0.25);
    m.inner = &m;
    compare(&m, 1, 2, true);
    mlp_free(&m);
}

static void test_input_without_grad(void) {
    mlp m;
    mlp_init(&m, 0);
    compare(&m, 1, 1, false);
    compare(&m, 2, 2, false);
    mlp_free(&m);
}

/* oar_grad with respect to a parameter and the input, through a segment:
 * .grad untouched, values as without the checkpoint. */
static void test_oar_grad(void) {
    mlp m;
    mlp_init(&m, 0.3);
    oar_tensor *g[2][2];
    for (int ck = 0; ck < 2; ck++) {
        oar_pool *p = oar_pool_push();
        oar_tensor *x = input(1, true), *y = NULL;
        oar_manual_seed(5);
        CHECK((ck ? oar_checkpoint(mlp_fn, &m, 1, &x, 1, &y) : mlp_fn(&m, 1, &x, 1, &y)) == 0);
        oar_tensor *loss = oar_sum(oar_square(y), 0, NULL, false);
        oar_tensor *wrt[2] = {m.w2, x}, *res[2] = {NULL, NULL};
        CHECK(oar_grad(1, &loss, NULL, 2, wrt, false, false, res) == 0);
        for (int k = 0; k < 2; k++) g[ck][k] = oar_tensor_retain(res[k]);
        CHECK(oar_tensor_grad(m.w2) == NULL && oar_tensor_grad(m.w1) == NULL);
        oar_pool_pop(p);
    }
    for (int k = 0; k < 2; k++) {
        CHECK(g[0][k] && maxdiff(g[0][k], g[1][k]) == 0);
        oar_tensor_release(g[0][k]);
        oar_tensor_release(g[1][k]);
    }
    mlp_free(&m);
}

static int int_out(void *ctx, int n_in, oar_tensor *const *in, int n_out, oar_tensor **out) {
    out[0] = oar_argmax(in[0], 1, false);
    return out[0] ? 0 : -1;
}

static int no_out(void *ctx, int n_in, oar_tensor *const *in, int n_out, oar_tensor **out) {
    return 0;
}

/* uses a tensor that requires grad, made by an op, through ctx */
static int captures(void *ctx, int n_in, oar_tensor *const *in, int n_out, oar_tensor **out) {
    out[0] = oar_mul(in[0], (oar_tensor *)ctx);
    return out[0] ? 0 : -1;
}

static void test_errors(void) {
    mlp m;
    mlp_init(&m, 0);
    oar_pool *p = oar_pool_push();
    oar_tensor *x = input(1, true), *y[2] = {NULL, NULL};
    CHECK_STATUS_FAILS(oar_checkpoint(NULL, &m, 1, &x, 1, y), "checkpoint: fn is NULL");
    CHECK_STATUS_FAILS(oar_checkpoint(mlp_fn, &m, 1, NULL, 1, y), "checkpoint: inputs is NULL");
    CHECK_STATUS_FAILS(oar_checkpoint(mlp_fn, &m, 1, &x, 1, NULL), "checkpoint: no outputs");
    CHECK_STATUS_FAILS(oar_checkpoint(mlp_fn, &m, 1, &x, 0, y), "checkpoint: no outputs");
    oar_tensor *nul[1] = {NULL};
    CHECK_STATUS_FAILS(oar_checkpoint(mlp_fn, &m, 1, nul, 1, y), "checkpoint: input 0 is NULL");
    /* fn fails in the forward pass: the checkpoint's message, then fn's */
    m.fail_at = 1;
    m.calls = 0;
    CHECK_STATUS_FAILS(oar_checkpoint(mlp_fn, &m, 1, &x, 1, y), "failed during the forward pass");
    CHECK(strstr(oar_last_error(), "matmul") != NULL && y[0] == NULL);
    /* fn fails while recomputing for backward */
    m.calls = 0;
    m.fail_at = 2;
    CHECK(oar_checkpoint(mlp_fn, &m, 1, &x, 1, y) == 0);
    oar_tensor *loss = oar_sum(oar_square(y[0]), 0, NULL, false);
    CHECK_STATUS_FAILS(oar_backward(loss, NULL), "while recomputing the segment for backward");
    CHECK(strstr(oar_last_error(), "matmul") != NULL);
    CHECK(oari_last_status() == OAR_ERR_INVALID);
    m.fail_at = 0;
    mlp_zero_grad(&m);
    oar_tensor_zero_grad(x);
    /* outputs must be floating point; fn must write every output */
    CHECK_STATUS_FAILS(oar_checkpoint(int_out, NULL, 1, &x, 1, y), "must be floating point");
    CHECK(y[0] == NULL);
    CHECK_STATUS_FAILS(oar_checkpoint(no_out, NULL, 1, &x, 1, y), "wrote no tensor to output 0");
    /* a non-leaf that requires grad reaching fn through ctx */
    oar_tensor *c = oar_exp(x);
    CHECK_STATUS_FAILS(oar_checkpoint(captures, c, 1, &x, 1, y), "is not one of the checkpoint's inputs");
    CHECK(strstr(oar_last_error(), "made by exp") != NULL);
    /* create_graph through a segment is refused */
    CHECK(oar_checkpoint(mlp_fn, &m, 1, &x, 1, y) == 0);
    loss = oar_sum(oar_square(y[0]), 0, NULL, false);
    oar_tensor *gx = NULL;
    CHECK_STATUS_FAILS(oar_grad(1, &loss, NULL, 1, &x, true, false, &gx), "create_graph");
    CHECK(oari_last_status() == OAR_ERR_UNSUPPORTED && gx == NULL);
    /* a second backward through a segment without retain_graph */
    CHECK(oar_checkpoint(mlp_fn, &m, 1, &x, 1, y) == 0);
    oar_tensor *ones = oar_ones_like(y[0]);
    CHECK(oar_backward(y[0], ones) == 0);
    CHECK_STATUS_FAILS(oar_backward(y[0], ones), "second time");
    CHECK(strstr(oar_last_error(), "checkpoint") != NULL);
    /* with retain_graph it works twice and sums */
    mlp_zero_grad(&m);
    CHECK(oar_checkpoint(mlp_fn, &m, 1, &x, 1, y) == 0);
    loss = oar_sum(oar_square(y[0]), 0, NULL, false);
    CHECK(oar_backward_ex(1, &loss, NULL, OAR_GRAD_RETAIN_GRAPH) == 0);
    oar_tensor *g1 = oar_clone(oar_tensor_grad(m.w1));
    CHECK(oar_backward(loss, NULL) == 0);
    CHECK(maxdiff(oar_mul(g1, oar_scalar_of(2, OAR_F64)), oar_tensor_grad(m.w1)) == 0);
    /* an input changed in place after the forward pass */
    oar_tensor *x2 = oar_clone(input(3, false));
    oar_tensor_set_requires_grad(x2, false);
    CHECK(oar_checkpoint(mlp_fn, &m, 1, &x2, 1, y) == 0);
    loss = oar_sum(oar_square(y[0]), 0, NULL, false);
    CHECK(oar_uniform_(x2, 0, 1) == 0);
    CHECK_STATUS_FAILS(oar_backward(loss, NULL), "modified by an in-place operation");
    oar_tensor_zero_grad(x);
    oar_pool_pop(p);
    /* under no_grad it just runs */
    p = oar_pool_push();
    x = input(1, true);
    oar_no_grad_push();
    CHECK(oar_checkpoint(mlp_fn, &m, 1, &x, 1, y) == 0);
    CHECK(y[0] && !oar_tensor_requires_grad(y[0]));
    oar_no_grad_pop();
    oar_pool_pop(p);
    mlp_free(&m);
}

/* ---- memory: a chain of 16 layers -------------------------------------- */

enum { DEPTH = 16, WIDTH = 128, BATCH = 256 };

static int layer(void *ctx, int n_in, oar_tensor *const *in, int n_out, oar_tensor **out) {
    oar_tensor *w = ctx;
    oar_tensor *h = oar_matmul(in[0], w);
    out[0] = oar_add(oar_mul(oar_tanh(h), oar_sin(h)), in[0]);
    return out[0] ? 0 : -1;
}

static size_t chain_peak(oar_tensor *const *w, bool ckpt, oar_tensor **gw0) {
    oar_pool *p = oar_pool_push();
    int64_t s[2] = {BATCH, WIDTH};
    oar_manual_seed(3);
    oar_tensor *h = oar_mul(oar_randn(OAR_F64, 2, s), oar_scalar_of(0.1, OAR_F64));
    oar_memory_stats st;
    oar_memory_stats_get(&st);
    size_t base = st.bytes_in_use;
    oar_memory_reset_peak();
    for (int l = 0; l < DEPTH; l++) {
        oar_tensor *o = NULL;
        CHECK((ckpt ? oar_checkpoint(layer, w[l], 1, &h, 1, &o) : layer(w[l], 1, &h, 1, &o)) == 0);
        h = o;
    }
    CHECK(oar_backward(oar_sum(h, 0, NULL, false), NULL) == 0);
    oar_memory_stats_get(&st);
    *gw0 = oar_tensor_retain(oar_tensor_grad(w[0]));
    for (int l = 0; l < DEPTH; l++) oar_tensor_zero_grad(w[l]);
    oar_pool_pop(p);
    return st.peak_bytes - base;
}

static void test_memory(void) {
    oar_tensor *w[DEPTH];
    int64_t s[2] = {WIDTH, WIDTH};
    oar_manual_seed(9);
    oar_pool *p = oar_pool_push();
    for (int l = 0; l < DEPTH; l++) {
        w[l] = oar_tensor_retain(oar_mul(oar_randn(OAR_F64, 2, s), oar_scalar_of(0.1, OAR_F64)));
        oar_tensor_set_requires_grad(w[l], true);
    }
    oar_pool_pop(p);
    oar_tensor *g_plain = NULL, *g_ckpt = NULL;
    size_t plain = chain_peak(w, false, &g_plain);
    size_t ckpt = chain_peak(w, true, &g_ckpt);
    printf("peak storage of a %d-layer chain: %zu bytes without checkpoints, %zu with\n", DEPTH,
           plain, ckpt);
    CHECK(ckpt > 0 && ckpt * 2 < plain);
    CHECK(g_plain && maxdiff(g_plain, g_ckpt) == 0);
    oar_tensor_release(g_plain);
    oar_tensor_release(g_ckpt);
    for (int l = 0; l < DEPTH; l++) oar_tensor_release(w[l]);
}

/* oar_module_checkpoint: a module's forward as one segment gives its
 * parameters the gradients of the plain forward; NULL arguments fail. */
static void test_module(void) {
    oar_manual_seed(7);
    oar_module *net = oar_sequential_new(3, (oar_module *[]){oar_linear_new(6, 8, true), oar_relu_new(),
                                                              oar_linear_new(8, 3, true)});
    CHECK(net != NULL);
    oar_tensor *params[8];
    int np = oar_module_parameters(net, params, 8);
    CHECK(np == 4);
    oar_tensor *x = oar_randn(OAR_F32, 2, (int64_t[]){5, 6}), *plain[4] = {0};
    for (int round = 0; round < 2; round++) {
        oar_pool *pool = oar_pool_push();
        oar_module_zero_grad(net);
        oar_tensor *y = round ? oar_module_checkpoint(net, x) : oar_module_forward(net, x);
        CHECK(y && oar_backward(oar_sum(oar_square(y), 0, NULL, false), NULL) == 0);
        oar_pool_pop(pool);
        for (int i = 0; i < np; i++) {
            oar_tensor *g = oar_tensor_grad(params[i]);
            if (!round) plain[i] = oar_clone(g);
            else CHECK(g && maxdiff(g, plain[i]) == 0);
        }
    }
    for (int i = 0; i < np; i++) oar_tensor_release(plain[i]);
    CHECK_FAILS(oar_module_checkpoint(NULL, x), "module_checkpoint: module is NULL");
    CHECK_FAILS(oar_module_checkpoint(net, NULL), "input is NULL");
    oar_tensor_release(x);
    oar_module_free(net);
}

int main(void) {
    RUN(test_mlp);
    RUN(test_module);
    RUN(test_dropout);
    RUN(test_several_inputs_outputs);
    RUN(test_nested);
    RUN(test_input_without_grad);
    RUN(test_oar_grad);
    RUN(test_errors);
    RUN(test_memory);
    return test_summary();
}

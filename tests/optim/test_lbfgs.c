/* L-BFGS (include/oar/lbfgs.h) on the Rosenbrock function against
 * torch.optim.LBFGS (tests/ref/lbfgs_ref.h, float64): the loss each step
 * returns, the point after it and the closure calls, with the strong-Wolfe
 * line search and with fixed steps; convergence in float32; bad input. */
#include "test.h"

#include "ref/lbfgs_ref.h"

typedef struct {
    oar_tensor *p;
    int fail_at; /* closure call that fails (0: none) */
    int calls;
} rosen_ctx;

static double rosen(void *c_) {
    rosen_ctx *c = c_;
    if (++c->calls == c->fail_at) return NAN;
    oar_pool *pool = oar_pool_push();
    oar_tensor_zero_grad(c->p);
    oar_tensor *x = oar_slice(c->p, 0, 0, 1, 1), *y = oar_slice(c->p, 0, 1, 2, 1);
    oar_tensor *a = oar_square(oar_sub(oar_scalar(1), x));
    oar_tensor *b = oar_mul_scalar(oar_square(oar_sub(y, oar_square(x))), 100);
    oar_tensor *loss = oar_sum(oar_add(a, b), 0, NULL, false);
    double v = loss && !oar_backward(loss, NULL) ? oar_tensor_item(loss) : NAN;
    oar_pool_pop(pool);
    return v;
}

static void run(const char *name, const oar_lbfgs_options *opt, const double *want_loss,
                const double *want_x, const int *want_evals) {
    const double x0[2] = {-1.5, 2.0};
    int64_t two = 2;
    oar_tensor *p = oar_tensor_from_data(x0, OAR_F64, 1, &two);
    oar_tensor_set_requires_grad(p, true);
    oar_lbfgs *o = oar_lbfgs_new(1, &p, opt);
    CHECK(o != NULL);
    rosen_ctx c = {.p = p};
    for (int s = 0; o && s < 5; s++) {
        double loss = NAN;
        CHECK(oar_lbfgs_step(o, rosen, &c, &loss) == 0);
        CHECK_NEAR(loss, want_loss[s], 1e-9 * fmax(1, fabs(want_loss[s])));
        double *v = test_values(p);
        if (v) {
            CHECK_NEAR(v[0], want_x[2 * s], 1e-8);
            CHECK_NEAR(v[1], want_x[2 * s + 1], 1e-8);
        }
        free(v);
        if (oar_lbfgs_evals(o) != want_evals[s]) {
            test_failed++;
            fprintf(stderr, "%s step %d: %lld closure calls, torch made %d\n", name, s,
                    (long long)oar_lbfgs_evals(o), want_evals[s]);
        } else {
            test_passed++;
        }
    }
    oar_lbfgs_free(o);
    oar_tensor_release(p);
}

static void test_against_torch(void) {
    run("strong wolfe", &(oar_lbfgs_options){.lr = 1, .max_iter = 20, .history_size = 10, .strong_wolfe = true},
        lbfgs_wolfe_loss, lbfgs_wolfe_x, lbfgs_wolfe_evals);
    run("fixed step", &(oar_lbfgs_options){.lr = 0.002, .max_iter = 15, .history_size = 5},
        lbfgs_fixed_loss, lbfgs_fixed_x, lbfgs_fixed_evals);
}

/* float32 parameters converge to (1, 1) too */
static void test_float32(void) {
    const float x0[2] = {-1.2f, 1.0f};
    int64_t two = 2;
    oar_tensor *p = oar_tensor_from_data(x0, OAR_F32, 1, &two);
    oar_tensor_set_requires_grad(p, true);
    oar_lbfgs *o = oar_lbfgs_new(1, &p, &(oar_lbfgs_options){.strong_wolfe = true});
    rosen_ctx c = {.p = p};
    double loss = NAN;
    for (int s = 0; s < 5; s++) CHECK(oar_lbfgs_step(o, rosen, &c, &loss) == 0);
    double *v = test_values(p);
    CHECK(v && fabs(v[0] - 1) < 1e-3 && fabs(v[1] - 1) < 1e-3);
    free(v);
    oar_lbfgs_free(o);
    oar_tensor_release(p);
}

static void test_errors(void) {
    int64_t two = 2;
    oar_tensor *p = oar_zeros(OAR_F64, 1, &two), *pi = oar_zeros(OAR_I64, 1, &two);
    oar_tensor_set_requires_grad(p, true);
    CHECK_FAILS(oar_lbfgs_new(0, &p, NULL), "oar_lbfgs_new: need at least one parameter");
    CHECK_FAILS(oar_lbfgs_new(1, &pi, NULL), "oar_lbfgs_new: parameter 0 has dtype int64");
    CHECK_FAILS(oar_lbfgs_new(1, &p, &(oar_lbfgs_options){.lr = -1}), "oar_lbfgs_new: negative option");
    oar_tensor *nul = NULL;
    CHECK_FAILS(oar_lbfgs_new(1, &nul, NULL), "oar_lbfgs_new: parameter 0 is NULL");
    oar_lbfgs *o = oar_lbfgs_new(1, &p, NULL);
    CHECK(o != NULL);
    CHECK_STATUS_FAILS(oar_lbfgs_step(o, NULL, NULL, NULL), "oar_lbfgs_step: closure is NULL");
    CHECK_STATUS_FAILS(oar_lbfgs_step(NULL, rosen, NULL, NULL), "oar_lbfgs_step: optimizer is NULL");
    rosen_ctx c = {.p = p, .fail_at = 2};
    CHECK_STATUS_FAILS(oar_lbfgs_step(o, rosen, &c, NULL), "oar_lbfgs_step: the closure failed");
    oar_lbfgs_free(o);
    oar_lbfgs_free(NULL);
    oar_tensor_release(p);
    oar_tensor_release(pi);
}

int main(void) {
    RUN(test_against_torch);
    RUN(test_float32);
    RUN(test_errors);
    return test_summary();
}

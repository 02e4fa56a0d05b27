/* gelu (erf form) in f32 over a dense sweep against 0.5 x erfc(-x / sqrt 2)
 * in double: 2^21 points on [-10, 10] within 1.5e-7 (1 + |y|); the left
 * tail keeps relative accuracy (x in [-5.5, -1]: within 4e-6 relative, where
 * 1 + erf would cancel); 1, 7, 8, 9 and 17 elements (vector tails); and the
 * special values (NaN, +-inf, +-0, beyond -5.66 where Phi rounds to 0).
 * Then gelu's derivative (the gelu_grad op its backward runs) the same way. */
#include "test.h"

#include "ops/op.h" /* oari_call1: gelu_grad has no public function */

/* The reference in double. */
static double gelu_ref(double x) { return 0.5 * x * erfc(-x * M_SQRT1_2); }

static float *gelu_f32(const float *v, int64_t n, oar_tensor **keep) {
    oar_tensor *x = oar_tensor_from_data(v, OAR_F32, 1, &n);
    *keep = oar_gelu(x, false);
    return *keep ? (float *)oar_tensor_data(*keep) : NULL;
}

/* f over 2^21 points on [-10, 10] against ref in double: |y - ref| / (1 +
 * |ref|) within `bound` everywhere, and |y - ref| / |ref| within
 * `bound_tail` in the left tail (x in [-5.5, -1]). */
static void check_sweep(const char *name, float *(*f)(const float *, int64_t, oar_tensor **),
                        double (*ref)(double), double bound, double bound_tail) {
    oar_pool *p = oar_pool_push();
    const int64_t n = (int64_t)1 << 21;
    float *v = malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = -10.0f + 20.0f * (float)i / (float)n;
    oar_tensor *keep;
    const float *y = f(v, n, &keep);
    CHECK(y != NULL);
    double worst = 0, worst_tail = 0;
    for (int64_t i = 0; y && i < n; i++) {
        double r = ref(v[i]), e = fabs((double)y[i] - r);
        if (!(e / (1 + fabs(r)) <= worst)) worst = e / (1 + fabs(r));
        if (v[i] >= -5.5f && v[i] <= -1.0f && !(e / fabs(r) <= worst_tail)) worst_tail = e / fabs(r);
    }
    CHECK(worst <= bound);
    CHECK(worst_tail <= bound_tail);
    if (worst > bound || worst_tail > bound_tail || getenv("SHOW"))
        fprintf(stderr, "%s f32: worst %g (abs, scaled), %g (relative, left tail)\n", name, worst, worst_tail);
    free(v);
    oar_pool_pop(p);
}

static void test_gelu_dense_sweep(void) { check_sweep("gelu", gelu_f32, gelu_ref, 1.5e-7, 4e-6); }

static void test_gelu_tails_and_specials(void) {
    static const int64_t sizes[] = {1, 7, 8, 9, 17};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        oar_pool *p = oar_pool_push();
        float v[17];
        for (int64_t i = 0; i < sizes[s]; i++) v[i] = -3.0f + 0.37f * (float)i;
        oar_tensor *keep;
        const float *y = gelu_f32(v, sizes[s], &keep);
        CHECK(y != NULL);
        for (int64_t i = 0; y && i < sizes[s]; i++)
            CHECK_NEAR(y[i], gelu_ref(v[i]), 1.5e-7 * (1 + fabs(gelu_ref(v[i]))));
        oar_pool_pop(p);
    }
    oar_pool *p = oar_pool_push();
    const float sp[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, -6.0f, -1e30f, 1e30f, 1e-30f};
    oar_tensor *keep;
    const float *y = gelu_f32(sp, 9, &keep);
    CHECK(y != NULL);
    if (y) {
        CHECK(isnan(y[0]));
        CHECK(y[1] == INFINITY);
        CHECK(isnan(y[2])); /* -inf * Phi(-inf) = -inf * 0, as PyTorch */
        CHECK(y[3] == 0 && !signbit(y[3]));
        CHECK(y[4] == 0 && signbit(y[4]));
        CHECK(y[5] == 0 && fabs(gelu_ref(-6.0)) < 1e-7); /* Phi(-6) ~ 1e-9 rounds away */
        CHECK(y[6] == 0);
        CHECK(y[7] == 1e30f);
        CHECK_NEAR(y[8], 0.5e-30, 1e-37);
    }
    oar_pool_pop(p);
}

/* gelu's derivative, Phi(x) + x phi(x), in double */
static double gelu_grad_ref(double x) { return 0.5 * erfc(-x * M_SQRT1_2) + x * exp(-0.5 * x * x) / sqrt(2 * M_PI); }

/* d gelu / dx in f32 through oar_backward (the gelu_grad op, one kernel) */
static float *gelu_grad_f32(const float *v, int64_t n, oar_tensor **keep) {
    oar_tensor *x = oar_tensor_from_data(v, OAR_F32, 1, &n);
    oar_tensor_set_requires_grad(x, true);
    oar_tensor *y = oar_gelu(x, false);
    *keep = x;
    if (!y || oar_backward(y, oar_ones_like(y))) return NULL;
    oar_tensor *g = oar_tensor_grad(x);
    return g ? (float *)oar_tensor_data(g) : NULL;
}

/* The derivative over the same sweep: within 2e-7 (1 + |y|) (measured
 * 1.35e-7); in the left tail, where Phi and x phi nearly cancel (x in
 * [-5.5, -1]: the result falls from -0.08 to -1.3e-6), within 2e-6
 * relative (measured 6.5e-7); specials. */
static void test_gelu_grad(void) {
    check_sweep("gelu_grad", gelu_grad_f32, gelu_grad_ref, 2e-7, 2e-6);
    oar_pool *p = oar_pool_push();
    oar_tensor *keep;
    const float sp[] = {NAN, INFINITY, -INFINITY, 0.0f, 30.0f, -30.0f};
    const float *y = gelu_grad_f32(sp, 6, &keep);
    CHECK(y != NULL);
    if (y) {
        CHECK(isnan(y[0]));
        CHECK(isnan(y[1]) && isnan(y[2])); /* +-inf * phi(+-inf) = inf * 0, as the decomposition */
        CHECK(y[3] == 0.5f);
        CHECK(y[4] == 1.0f);
        CHECK(y[5] == 0.0f); /* Phi(-30) and -30 phi(-30) underflow */
    }
    /* bad input: none, a complex one (gelu is real-only) */
    CHECK_FAILS(oari_call1(OARI_OP_gelu_grad, NULL, NULL), "NULL");
    CHECK_FAILS(oari_call1(OARI_OP_gelu_grad, oar_zeros(OAR_C64, 1, (int64_t[]){3}), NULL), "complex");
    oar_pool_pop(p);
}

int main(void) {
    RUN(test_gelu_dense_sweep);
    RUN(test_gelu_tails_and_specials);
    RUN(test_gelu_grad);
    return test_summary();
}

/* oar_add_scaled_ (dst += alpha * src in place): values against the closed
 * form on contiguous, strided and broadcast operands in every float and
 * complex dtype, the version bump autograd checks, and bad input. */
#include "test.h"

static oar_tensor *from(const double *v, int ndim, const int64_t *shape, oar_dtype dt) {
    oar_tensor *t = oar_tensor_from_data(v, OAR_F64, ndim, shape);
    return oar_cast(t, dt);
}

static void test_values_all_dtypes(void) {
    const oar_dtype dts[6] = {OAR_F32, OAR_F64, OAR_F16, OAR_BF16, OAR_C64, OAR_C128};
    double dv[6] = {1, -2, 3, 0.5, 4, -1}, sv[6] = {0.5, 1, -1.5, 2, 0, 3};
    int64_t sh[2] = {2, 3};
    for (int k = 0; k < 6; k++) {
        oar_pool *p = oar_pool_push();
        oar_tensor *d = oar_clone(from(dv, 2, sh, dts[k])), *s = from(sv, 2, sh, dts[k]);
        CHECK(oar_add_scaled_(d, s, -0.5) == 0);
        double *got = test_values(d);
        double tol = dts[k] == OAR_F16 || dts[k] == OAR_BF16 ? 2e-2 : 1e-6;
        for (int i = 0; i < 6 && got; i++) CHECK_NEAR(got[i], dv[i] - 0.5 * sv[i], tol);
        free(got);
        CHECK(oar_tensor_dtype(d) == dts[k]);
        oar_pool_pop(p);
    }
}

static void test_strided_broadcast_and_cast(void) {
    oar_pool *p = oar_pool_push();
    double dv[6] = {1, 2, 3, 4, 5, 6}, row[2] = {10, 20};
    int64_t sh[2] = {3, 2}, rs[1] = {2};
    oar_tensor *base = oar_clone(from(dv, 2, sh, OAR_F32));
    oar_tensor *dt = oar_transpose(base, 0, 1); /* [2, 3], strides (1, 2) */
    oar_tensor *col = oar_reshape(from(row, 1, rs, OAR_F64), 2, (int64_t[]){2, 1});
    CHECK(oar_add_scaled_(dt, col, 2.0) == 0); /* f64 [2, 1] broadcast and cast into f32 [2, 3] */
    double *got = test_values(base);
    /* base[i][j] = dv[2i + j] + 2 * row[j] */
    for (int i = 0; i < 3 && got; i++)
        for (int j = 0; j < 2; j++) CHECK_NEAR(got[2 * i + j], dv[2 * i + j] + 2 * row[j], 1e-6);
    free(got);
    /* aliasing source and destination: x += 3 x */
    oar_tensor *x = oar_clone(from(dv, 2, sh, OAR_F64));
    CHECK(oar_add_scaled_(x, x, 3.0) == 0);
    got = test_values(x);
    for (int i = 0; i < 6 && got; i++) CHECK_NEAR(got[i], 4 * dv[i], 1e-12);
    free(got);
    /* large enough to run on several threads */
    int64_t big = 200000;
    oar_tensor *a = oar_full(OAR_F32, 1, &big, 1.0), *b = oar_full(OAR_F32, 1, &big, 2.0);
    CHECK(oar_add_scaled_(a, b, 0.25) == 0);
    CHECK_NEAR(oar_tensor_item(oar_sum(a, 0, NULL, false)), 1.5 * (double)big, 1e-3);
    oar_pool_pop(p);
}

static void test_autograd_interplay(void) {
    oar_pool *p = oar_pool_push();
    int64_t n = 4;
    oar_tensor *w = oar_full(OAR_F64, 1, &n, 1.0), *g = oar_full(OAR_F64, 1, &n, 2.0);
    oar_tensor_set_requires_grad(w, true);
    CHECK_STATUS_FAILS(oar_add_scaled_(w, g, -0.1), "requires grad");
    oar_no_grad_push();
    CHECK(oar_add_scaled_(w, g, -0.1) == 0); /* the optimizer update */
    oar_no_grad_pop();
    CHECK_NEAR(oar_tensor_item(oar_sum(w, 0, NULL, false)), 4 * 0.8, 1e-12);
    /* an in-place update of a tensor saved for backward is caught */
    oar_tensor *hsrc = oar_mul_scalar(w, 1.0);
    oar_tensor *loss = oar_sum(oar_square(hsrc), 0, NULL, false); /* square saves hsrc */
    oar_no_grad_push();
    CHECK(oar_add_scaled_(hsrc, g, 1.0) == 0);
    oar_no_grad_pop();
    CHECK_STATUS_FAILS(oar_backward(loss, NULL), "modified by an in-place operation");
    oar_pool_pop(p);
}

static void test_bad_input(void) {
    oar_pool *p = oar_pool_push();
    int64_t s3 = 3, s4 = 4, s23[2] = {2, 3};
    oar_tensor *f3 = oar_full(OAR_F32, 1, &s3, 1), *f4 = oar_full(OAR_F32, 1, &s4, 1);
    oar_tensor *i3 = oar_full(OAR_I64, 1, &s3, 1), *c3 = oar_full(OAR_C64, 1, &s3, 1);
    oar_tensor *f23 = oar_full(OAR_F32, 2, s23, 1);
    CHECK_STATUS_FAILS(oar_add_scaled_(f3, f4, 1), "add_scaled_: shapes [3] and [4] do not broadcast");
    CHECK_STATUS_FAILS(oar_add_scaled_(f3, f23, 1), "does not broadcast to the destination's shape [3]");
    CHECK_STATUS_FAILS(oar_add_scaled_(i3, f3, 1), "destination must be a float or complex");
    CHECK_STATUS_FAILS(oar_add_scaled_(f3, c3, 1), "cannot add a complex source");
    CHECK_STATUS_FAILS(oar_add_scaled_(NULL, f3, 1), "input 0 is NULL");
    CHECK_STATUS_FAILS(oar_add_scaled_(f3, NULL, 1), "input 1 is NULL");
    /* f3 untouched by the failures */
    CHECK_NEAR(oar_tensor_item(oar_sum(f3, 0, NULL, false)), 3, 0);
    oar_pool_pop(p);
}

int main(void) {
    RUN(test_values_all_dtypes);
    RUN(test_strided_broadcast_and_cast);
    RUN(test_autograd_interplay);
    RUN(test_bad_input);
    return test_summary();
}

/* Complex helpers (include/oar/complex.h): values, views sharing storage,
 * the copy fallback, gradients to second order, and bad input. */
#include "gradcheck.h"
#include "test.h"

static void test_values_and_views(void) {
    oar_pool *p = oar_pool_push();
    const double re_v[6] = {1, 2, 3, 4, 5, 6}, im_v[2] = {-1, 0.5};
    int64_t sh23[2] = {2, 3}, sh21[2] = {2, 1};
    oar_tensor *re = oar_tensor_from_data(re_v, OAR_F64, 2, sh23);
    oar_tensor *im = oar_tensor_from_data(im_v, OAR_F64, 2, sh21);
    oar_tensor *z = oar_complex(re, im); /* broadcast [2,3] */
    CHECK(z && oar_tensor_dtype(z) == OAR_C128 && oar_tensor_ndim(z) == 2 && oar_tensor_dim(z, 1) == 3);
    const double want_im[6] = {-1, -1, -1, 0.5, 0.5, 0.5};
    CHECK_VALUES(oar_real(z), re_v, 6, 0);
    CHECK_VALUES(oar_imag(z), want_im, 6, 0);
    CHECK(oar_tensor_dtype(oar_complex(oar_cast(re, OAR_F32), oar_cast(re, OAR_F32))) == OAR_C64);

    /* view_as_real shares storage: a write through it shows in z */
    oar_tensor *r = oar_view_as_real(z);
    CHECK(r && oar_tensor_shares_storage(r, z) && oar_tensor_ndim(r) == 3 && oar_tensor_dim(r, 2) == 2 &&
          oar_tensor_dtype(r) == OAR_F64);
    double *rp = oar_tensor_data(r);
    rp[1] = 42; /* imaginary part of z[0,0] */
    double *v = test_values(oar_imag(z));
    CHECK(v && v[0] == 42);
    free(v);
    /* view_as_complex of a view_as_real is z again, sharing storage */
    oar_tensor *zz = oar_view_as_complex(r);
    CHECK(zz && oar_tensor_shares_storage(zz, z) && oar_tensor_dtype(zz) == OAR_C128);
    /* a strided complex view: view_as_real of a transposed tensor */
    oar_tensor *rt = oar_view_as_real(oar_transpose(z, 0, 1));
    CHECK(rt && oar_tensor_shares_storage(rt, z) && oar_tensor_dim(rt, 0) == 3);
    const double want_rt[12] = {1, 42, 4, 0.5, 2, -1, 5, 0.5, 3, -1, 6, 0.5};
    CHECK_VALUES(rt, want_rt, 12, 0);
    /* a real [..., 2] with odd strides cannot be viewed: a copy is made */
    int64_t sh34[2] = {3, 4};
    oar_tensor *wide = oar_reshape(oar_arange(0, 12, 1, OAR_F32), 2, sh34);
    oar_tensor *odd = oar_slice(wide, 1, 1, 3, 1); /* offset 1: not viewable */
    oar_tensor *zc = oar_view_as_complex(odd);
    CHECK(zc && !oar_tensor_shares_storage(zc, wide) && oar_tensor_dtype(zc) == OAR_C64);
    const double want_re[3] = {1, 5, 9}, want_im2[3] = {2, 6, 10};
    CHECK_VALUES(oar_real(zc), want_re, 3, 0);
    CHECK_VALUES(oar_imag(zc), want_im2, 3, 0);
    oar_tensor *even = oar_slice(wide, 1, 2, 4, 1); /* offset 2, row stride 4: viewable */
    oar_tensor *ze = oar_view_as_complex(even);
    CHECK(ze && oar_tensor_shares_storage(ze, wide));

    /* polar: abs (cos + i sin) */
    const double a_v[2] = {2, 0.5}, t_v[2] = {0.3, -1.2};
    int64_t two = 2;
    oar_tensor *pz = oar_polar(oar_tensor_from_data(a_v, OAR_F64, 1, &two),
                               oar_tensor_from_data(t_v, OAR_F64, 1, &two));
    const double pre[2] = {2 * cos(0.3), 0.5 * cos(-1.2)}, pim[2] = {2 * sin(0.3), 0.5 * sin(-1.2)};
    CHECK_VALUES(oar_real(pz), pre, 2, 1e-15);
    CHECK_VALUES(oar_imag(pz), pim, 2, 1e-15);
    CHECK_VALUES(oar_abs(pz), a_v, 2, 1e-15);
    oar_pool_pop(p);
}

static oar_tensor *g_complex(void *c, int n, oar_tensor *const *x) {
    (void)c; (void)n;
    return oar_mul(oar_complex(x[0], x[1]), oar_complex(x[1], x[0]));
}
static oar_tensor *g_polar(void *c, int n, oar_tensor *const *x) {
    (void)c; (void)n;
    return oar_square(oar_polar(x[0], x[1]));
}
static oar_tensor *g_real_view(void *c, int n, oar_tensor *const *x) {
    (void)c; (void)n;
    oar_tensor *r = oar_view_as_real(oar_mul(x[0], x[0]));
    return oar_mul(r, r);
}
static oar_tensor *g_complex_view(void *c, int n, oar_tensor *const *x) {
    (void)c; (void)n;
    return oar_fft_fft(oar_view_as_complex(oar_square(x[0])), -1, 0, NULL);
}

static void test_gradients(void) {
    const gc_opts o = {0};
    gc_input two[2] = {{.ndim = 2, .shape = {2, 3}}, {.ndim = 1, .shape = {3}}};
    CHECK(gradcheck("complex broadcast", g_complex, NULL, 2, two, &o));
    gc_input pol[2] = {{.ndim = 1, .shape = {4}, .lo = 0.5, .hi = 2}, {.ndim = 1, .shape = {4}}};
    CHECK(gradcheck("polar", g_polar, NULL, 2, pol, &o));
    gc_input c1[1] = {{.dtype = OAR_C128, .ndim = 2, .shape = {3, 2}}};
    CHECK(gradcheck("view_as_real", g_real_view, NULL, 1, c1, &o));
    gc_input r1[1] = {{.ndim = 2, .shape = {5, 2}}};
    CHECK(gradcheck("view_as_complex then fft", g_complex_view, NULL, 1, r1, &o));
}

static void test_errors(void) {
    oar_pool *p = oar_pool_push();
    int64_t sh[2] = {3, 2}, sh3[2] = {3, 3};
    oar_tensor *f = oar_zeros(OAR_F32, 2, sh), *d = oar_zeros(OAR_F64, 2, sh);
    CHECK_FAILS(oar_complex(NULL, f), "oar_complex: input is NULL");
    CHECK_FAILS(oar_complex(f, d), "oar_complex: expected two float32 or two float64");
    CHECK_FAILS(oar_complex(oar_zeros(OAR_I64, 2, sh), oar_zeros(OAR_I64, 2, sh)), "oar_complex");
    CHECK_FAILS(oar_complex(f, oar_zeros(OAR_F32, 2, sh3)), "oar_complex");
    CHECK_FAILS(oar_polar(f, NULL), "oar_polar: input is NULL");
    CHECK_FAILS(oar_polar(oar_cast(f, OAR_C64), f), "oar_polar: expected two float32");
    CHECK_FAILS(oar_view_as_real(f), "oar_view_as_real: expected a complex input, got float32");
    CHECK_FAILS(oar_view_as_real(NULL), "oar_view_as_real: input is NULL");
    CHECK_FAILS(oar_view_as_complex(oar_zeros(OAR_F32, 2, sh3)), "oar_view_as_complex: expected a last dim of size 2");
    CHECK_FAILS(oar_view_as_complex(oar_cast(f, OAR_C64)), "oar_view_as_complex: expected a float32 or float64");
    CHECK_FAILS(oar_view_as_complex(oar_scalar(1)), "oar_view_as_complex");
    oar_pool_pop(p);
}

int main(void) {
    RUN(test_values_and_views);
    RUN(test_gradients);
    RUN(test_errors);
    return test_summary();
}

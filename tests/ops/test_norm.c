/* Layer, group and batch norm against PyTorch references
 * (tests/ref/gen_conv_norm.py): values, saved statistics, running-stat
 * updates, gradients through the autograd engine, f32/f64/f16/bf16,
 * non-contiguous and empty inputs, allocation failures, and bad input. */
#include "test.h"

#include "ops/op.h"
#include "ref/conv_norm_ref.h"

#define N_OF(a) ((int64_t)(sizeof(a) / sizeof((a)[0])))

static oar_tensor *make(const double *v, oar_dtype dtype, int ndim, const int64_t *shape) {
    oar_tensor *t = oar_tensor_from_data(v, OAR_F64, ndim, shape);
    return dtype == OAR_F64 ? t : oar_cast(t, dtype);
}
#define MAKE(v, dt, ...) make(v, dt, N_OF(((int64_t[]){__VA_ARGS__})), (int64_t[]){__VA_ARGS__})

/* A non-contiguous view with the values v (every other element of the last dim). */
static oar_tensor *make_strided(const double *v, oar_dtype dtype, int ndim, const int64_t *shape) {
    int64_t big[OAR_MAX_DIMS], n = 1;
    for (int i = 0; i < ndim; i++) {
        big[i] = shape[i] * (i == ndim - 1 ? 2 : 1);
        n *= shape[i];
    }
    double *buf = calloc((size_t)(2 * n), sizeof(double));
    for (int64_t i = 0; i < n; i++)
        buf[2 * i] = v[i];
    oar_tensor *t = make(buf, dtype, ndim, big);
    free(buf);
    if (!t) return NULL;
    int64_t strides[OAR_MAX_DIMS];
    memcpy(strides, oar_tensor_strides(t), sizeof strides);
    strides[ndim - 1] = 2;
    return oari_pool_adopt(oari_tensor_view(t, ndim, shape, strides, 0));
}

/* Gradients of <gy, y> with respect to xs[0..n-1] through the autograd
 * engine (the gradient rules), against want[i] (nwant[i] values). */
static void check_grads(oar_tensor *y, oar_tensor *gy, int n, oar_tensor **xs,
                        const double *const *want, const int64_t *nwant, double tol, int line) {
    oar_tensor *g[4] = {0};
    int st = y ? oar_grad(1, &y, &gy, n, xs, false, false, g) : -1;
    if (st) {
        test_failed++;
        fprintf(stderr, "%s:%d: %s: backward failed (%s)\n", __FILE__, line, test_current,
                oar_last_error());
        return;
    }
    for (int i = 0; i < n; i++)
        test_expect_values("grad", g[i], want[i], nwant[i], tol, __FILE__, line);
}
#define CHECK_GRADS(y, gy, n, xs, want, nwant, tol)                                                \
    check_grads(y, gy, n, xs, want, nwant, tol, __LINE__)

/* A leaf that requires grad. */
static oar_tensor *leaf(oar_tensor *t) {
    oar_tensor_set_requires_grad(t, true);
    return t;
}

static const oar_dtype float_types[2] = {OAR_F64, OAR_F32};
static double tol_of(oar_dtype d) { return d == OAR_F64 ? 1e-12 : 2e-5; }

/* Runs a norm primitive and hands back all its outputs (pool-owned). */
static int run_op(oari_op op, int n_in, oar_tensor **in, oari_attrs *a, oar_tensor **out) {
    int st = oari_dispatch(op, n_in, in, a, out);
    if (!st)
        for (int j = 0; j < oari_op_defs[op]->n_out; j++)
            oari_pool_adopt(out[j]);
    return st;
}

static void test_layer_norm(void) {
    for (int k = 0; k < 2; k++) {
        oar_pool *p = oar_pool_push();
        oar_dtype dt = float_types[k];
        double tol = tol_of(dt);
        oar_tensor *x = MAKE(ln_x, dt, 3, 4, 5), *w = MAKE(ln_w, dt, 4, 5),
                   *b = MAKE(ln_b, dt, 4, 5);
        oar_tensor *y = oar_layer_norm(x, 2, w, b, 1e-5);
        CHECK(y && oar_tensor_dtype(y) == dt && oar_tensor_ndim(y) == 3);
        CHECK_VALUES(y, ln1_y, N_OF(ln1_y), tol);
        CHECK_VALUES(oar_layer_norm(x, 1, NULL, NULL, 1e-3), ln2_y, N_OF(ln2_y), tol);
        /* non-contiguous input and weight */
        y = oar_layer_norm(make_strided(ln_x, dt, 3, (int64_t[]){3, 4, 5}), 2,
                           make_strided(ln_w, dt, 2, (int64_t[]){4, 5}), b, 1e-5);
        CHECK_VALUES(y, ln1_y, N_OF(ln1_y), tol);
        /* the saved statistics, keepdim-shaped [3, 1, 1] */
        oar_tensor *in[3] = {x, w, b}, *out[OARI_MAX_OUT];
        oari_attrs a = {.ni = 1, .nf = 1, .i = {2}, .f = {1e-5}};
        CHECK(run_op(OARI_OP_layer_norm, 3, in, &a, out) == 0);
        CHECK(oar_tensor_ndim(out[1]) == 3 && oar_tensor_shape(out[1])[0] == 3 &&
              oar_tensor_shape(out[1])[1] == 1 && oar_tensor_shape(out[2])[2] == 1);
        CHECK_VALUES(out[1], ln_mean, N_OF(ln_mean), tol);
        CHECK_VALUES(out[2], ln_rstd, N_OF(ln_rstd), tol);
        oar_pool_pop(p);
    }
}

static void test_group_norm(void) {
    for (int k = 0; k < 2; k++) {
        oar_pool *p = oar_pool_push();
        oar_dtype dt = float_types[k];
        double tol = tol_of(dt);
        oar_tensor *x = MAKE(gn_x, dt, 2, 6, 3, 3), *w = MAKE(gn_w, dt, 6), *b = MAKE(gn_b, dt, 6);
        CHECK_VALUES(oar_group_norm(x, 3, w, b, 1e-5), gn1_y, N_OF(gn1_y), tol);
        CHECK_VALUES(
            oar_group_norm(make_strided(gn_x, dt, 4, (int64_t[]){2, 6, 3, 3}), 3, w, b, 1e-5),
            gn1_y, N_OF(gn1_y), tol);
        CHECK_VALUES(oar_group_norm(MAKE(gn2_x, dt, 2, 4), 2, NULL, NULL, 1e-5), gn2_y, N_OF(gn2_y),
                     tol);
        oar_tensor *in[3] = {x, w, b}, *out[OARI_MAX_OUT];
        oari_attrs a = {.ni = 1, .nf = 1, .i = {3}, .f = {1e-5}};
        CHECK(run_op(OARI_OP_group_norm, 3, in, &a, out) == 0);
        CHECK(oar_tensor_ndim(out[1]) == 2 && oar_tensor_shape(out[1])[1] == 3);
        CHECK_VALUES(out[1], gn1_mean, N_OF(gn1_mean), tol);
        CHECK_VALUES(out[2], gn1_rstd, N_OF(gn1_rstd), tol);
        oar_pool_pop(p);
    }
}

/* Channel c of x [N, C, S] (doubles): its mean and sum of squared
 * deviations, two passes (the references of the long-row tests). */
static void channel_moments(const double *xd, int64_t N, int64_t C, int64_t S, int64_t c, double *mean,
                            double *sq) {
    double sum = 0;
    *sq = 0;
    for (int64_t i = 0; i < N; i++)
        for (int64_t j = 0; j < S; j++) sum += xd[(i * C + c) * S + j];
    *mean = sum / (double)(N * S);
    for (int64_t i = 0; i < N; i++)
        for (int64_t j = 0; j < S; j++) {
            const double d = xd[(i * C + c) * S + j] - *mean;
            *sq += d * d;
        }
}

/* Planes of 25 values (the kernel's 8-wide loops and a tail of 1) and of 5 (the tail alone),
 * f32 and f64, training: y, the running stats against a two-pass double reference written
 * here, with the weight and bias applied. */
static void test_batch_norm_long_rows(void) {
    const int64_t N = 3, C = 4, HW[2] = {5, 1};
    for (int k = 0; k < 2; k++)
        for (int h = 0; h < 2; h++) {
            oar_pool *p = oar_pool_push();
            oar_dtype dt = float_types[k];
            const int64_t S = 5 * HW[h], shape[4] = {N, C, 5, HW[h]}, n = N * C * S;
            double *x = malloc((size_t)n * sizeof *x), wv[4] = {0.5, 1.5, -2, 1}, bv[4] = {0, 0.25, -1, 3};
            for (int64_t i = 0; i < n; i++) x[i] = sin(0.7 * (double)i) * (1 + (double)(i % 7)) + 0.1 * (double)(i % 3);
            oar_tensor *xt = make(x, dt, 4, shape), *w = make(wv, dt, 1, &C), *b = make(bv, dt, 1, &C);
            oar_tensor *rm = oar_zeros(dt, 1, &C), *rv = oar_ones(dt, 1, &C);
            oar_tensor *y = oar_batch_norm(xt, rm, rv, w, b, true, 0.1, 1e-5);
            const double tol = dt == OAR_F64 ? 1e-12 : 2e-6;
            oar_tensor *y64 = y ? oar_cast(y, OAR_F64) : NULL, *rm64 = oar_cast(rm, OAR_F64), *rv64 = oar_cast(rv, OAR_F64);
            CHECK(y64 && rm64 && rv64);
            const double *yd = y64 ? oar_tensor_data(y64) : NULL, *rmd = oar_tensor_data(rm64), *rvd = oar_tensor_data(rv64);
            /* the inputs as the kernel saw them (rounded to dt) */
            oar_tensor *x64 = oar_cast(xt, OAR_F64);
            const double *xd = oar_tensor_data(x64);
            int bad = 0;
            for (int64_t c = 0; yd && c < C; c++) {
                double mean, sq;
                channel_moments(xd, N, C, S, c, &mean, &sq);
                const double var = sq / (double)(N * S), rstd = 1 / sqrt(var + 1e-5);
                for (int64_t i = 0; i < N; i++)
                    for (int64_t j = 0; j < S; j++) {
                        const int64_t at = (i * C + c) * S + j;
                        const double want = (xd[at] - mean) * rstd * wv[c] + bv[c];
                        bad += fabs(yd[at] - want) > tol * (1 + fabs(want));
                    }
                bad += fabs(rmd[c] - 0.1 * mean) > tol;
                bad += fabs(rvd[c] - (0.9 + 0.1 * sq / (double)(N * S - 1))) > tol * (1 + rvd[c]);
            }
            CHECK(bad == 0);
            free(x);
            oar_pool_pop(p);
        }
}

/* batch_norm's training gradient (the fused batch_norm_backward kernel)
 * on planes of 25 values (8-wide loops and a tail) and of 5 (the tail
 * alone), f32 and f64, gy strided in one of them, against a reference in
 * double written here: gx = rstd w (gy - E[gy] - xhat E[gy xhat]),
 * gw = sum gy xhat, gb = sum gy. */
static void test_batch_norm_backward_long_rows(void) {
    const int64_t N = 3, C = 4, HW[2] = {5, 1};
    for (int k = 0; k < 2; k++)
        for (int h = 0; h < 2; h++) {
            oar_pool *p = oar_pool_push();
            oar_dtype dt = float_types[k];
            const int64_t S = 5 * HW[h], shape[4] = {N, C, 5, HW[h]}, n = N * C * S;
            double *x = malloc((size_t)n * sizeof *x), *gyv = malloc((size_t)n * sizeof *gyv);
            double wv[4] = {0.5, 1.5, -2, 1}, bv[4] = {0, 0.25, -1, 3};
            for (int64_t i = 0; i < n; i++) {
                x[i] = 3 + sin(0.7 * (double)i) * (1 + (double)(i % 7)) + 0.1 * (double)(i % 3);
                gyv[i] = cos(0.3 * (double)i) + 0.05 * (double)(i % 5);
            }
            oar_tensor *xt = leaf(make(x, dt, 4, shape)), *w = leaf(make(wv, dt, 1, &C));
            oar_tensor *b = leaf(make(bv, dt, 1, &C));
            oar_tensor *gy = h ? make_strided(gyv, dt, 4, shape) : make(gyv, dt, 4, shape);
            oar_tensor *y = oar_batch_norm(xt, NULL, NULL, w, b, true, 0.1, 1e-5), *g[3] = {0};
            oar_tensor *xs[3] = {xt, w, b};
            CHECK(y && oar_grad(1, &y, &gy, 3, xs, false, false, g) == 0);
            const double tol = dt == OAR_F64 ? 1e-11 : 2e-5;
            oar_tensor *x64 = oar_cast(xt, OAR_F64), *gy64 = oar_cast(gy, OAR_F64);
            oar_tensor *g64[3] = {g[0] ? oar_cast(g[0], OAR_F64) : NULL, g[1] ? oar_cast(g[1], OAR_F64) : NULL,
                                  g[2] ? oar_cast(g[2], OAR_F64) : NULL};
            CHECK(g64[0] && g64[1] && g64[2] && x64 && gy64);
            gy64 = gy64 ? oar_contiguous(gy64) : NULL;
            const double *xd = oar_tensor_data(x64), *gd = gy64 ? oar_tensor_data(gy64) : NULL;
            int bad = 0;
            for (int64_t c = 0; g64[0] && g64[1] && g64[2] && gd && c < C; c++) {
                const double *gx = oar_tensor_data(g64[0]), *gw = oar_tensor_data(g64[1]),
                             *gb = oar_tensor_data(g64[2]);
                double mean, sq, sg = 0, sgx = 0, m = (double)(N * S);
                channel_moments(xd, N, C, S, c, &mean, &sq);
                const double rstd = 1 / sqrt(sq / m + 1e-5);
                for (int64_t i = 0; i < N; i++)
                    for (int64_t j = 0; j < S; j++) {
                        const int64_t at = (i * C + c) * S + j;
                        sg += gd[at];
                        sgx += gd[at] * (xd[at] - mean) * rstd;
                    }
                for (int64_t i = 0; i < N; i++)
                    for (int64_t j = 0; j < S; j++) {
                        const int64_t at = (i * C + c) * S + j;
                        const double xhat = (xd[at] - mean) * rstd;
                        const double want = rstd * wv[c] * (gd[at] - sg / m - xhat * sgx / m);
                        bad += fabs(gx[at] - want) > tol * (1 + fabs(want));
                    }
                bad += fabs(gw[c] - sgx) > tol * (1 + fabs(sgx)) * 4;
                bad += fabs(gb[c] - sg) > tol * (1 + fabs(sg)) * 4;
            }
            CHECK(bad == 0);
            free(x);
            free(gyv);
            oar_pool_pop(p);
        }
}

/* layer_norm's gradient (the fused layer_norm_backward kernel) on rows of
 * 37 values (8-wide loops and a tail; one column block) and of 130 (three
 * blocks of the weight sums), f32 and f64, gy strided in one of them,
 * against a reference in double written here. */
static void test_layer_norm_backward_long_rows(void) {
    const int64_t R = 7, M[2] = {37, 130};
    for (int k = 0; k < 2; k++)
        for (int h = 0; h < 2; h++) {
            oar_pool *p = oar_pool_push();
            oar_dtype dt = float_types[k];
            const int64_t m = M[h], shape[2] = {R, m}, n = R * m;
            double *x = malloc((size_t)n * sizeof *x), *gyv = malloc((size_t)n * sizeof *gyv);
            double *wv = malloc((size_t)m * sizeof *wv), *bv = malloc((size_t)m * sizeof *bv);
            for (int64_t i = 0; i < n; i++) {
                x[i] = 2 + sin(0.7 * (double)i) * (1 + (double)(i % 7)) + 0.1 * (double)(i % 3);
                gyv[i] = cos(0.3 * (double)i) + 0.05 * (double)(i % 5);
            }
            for (int64_t j = 0; j < m; j++) {
                wv[j] = 0.5 + 0.01 * (double)j;
                bv[j] = -0.2 * (double)(j % 4);
            }
            oar_tensor *xt = leaf(make(x, dt, 2, shape)), *w = leaf(make(wv, dt, 1, &m)), *b = leaf(make(bv, dt, 1, &m));
            oar_tensor *gy = h ? make_strided(gyv, dt, 2, shape) : make(gyv, dt, 2, shape);
            oar_tensor *y = oar_layer_norm(xt, 1, w, b, 1e-5), *g[3] = {0}, *xs[3] = {xt, w, b};
            CHECK(y && oar_grad(1, &y, &gy, 3, xs, false, false, g) == 0);
            const double tol = dt == OAR_F64 ? 1e-11 : 2e-5;
            oar_tensor *x64 = oar_cast(xt, OAR_F64), *gy64 = oar_contiguous(oar_cast(gy, OAR_F64));
            oar_tensor *g64[3] = {g[0] ? oar_cast(g[0], OAR_F64) : NULL, g[1] ? oar_cast(g[1], OAR_F64) : NULL,
                                  g[2] ? oar_cast(g[2], OAR_F64) : NULL};
            CHECK(g64[0] && g64[1] && g64[2] && x64 && gy64);
            int bad = 0;
            if (g64[0] && g64[1] && g64[2] && x64 && gy64) {
                const double *xd = oar_tensor_data(x64), *gd = oar_tensor_data(gy64), *gx = oar_tensor_data(g64[0]),
                             *gw = oar_tensor_data(g64[1]), *gb = oar_tensor_data(g64[2]);
                double *sw = calloc((size_t)m, sizeof *sw), *sb = calloc((size_t)m, sizeof *sb);
                for (int64_t r = 0; r < R; r++) {
                    const double *xr = xd + r * m, *gr = gd + r * m;
                    double mean = 0, var = 0, sa = 0, sax = 0;
                    for (int64_t j = 0; j < m; j++) mean += xr[j] / (double)m;
                    for (int64_t j = 0; j < m; j++) var += (xr[j] - mean) * (xr[j] - mean) / (double)m;
                    const double rstd = 1 / sqrt(var + 1e-5);
                    for (int64_t j = 0; j < m; j++) {
                        const double xhat = (xr[j] - mean) * rstd;
                        sa += gr[j] * wv[j];
                        sax += gr[j] * wv[j] * xhat;
                        sw[j] += gr[j] * xhat;
                        sb[j] += gr[j];
                    }
                    for (int64_t j = 0; j < m; j++) {
                        const double xhat = (xr[j] - mean) * rstd;
                        const double want = rstd * (gr[j] * wv[j] - sa / (double)m - xhat * sax / (double)m);
                        bad += fabs(gx[r * m + j] - want) > tol * (1 + fabs(want));
                    }
                }
                for (int64_t j = 0; j < m; j++) {
                    bad += fabs(gw[j] - sw[j]) > tol * (1 + fabs(sw[j]));
                    bad += fabs(gb[j] - sb[j]) > tol * (1 + fabs(sb[j]));
                }
                free(sw);
                free(sb);
            }
            CHECK(bad == 0);
            free(x);
            free(gyv);
            free(wv);
            free(bv);
            oar_pool_pop(p);
        }
}

/* layer_norm_backward called directly: what its shape rule refuses. */
static void test_layer_norm_backward_bad_input(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *x = oar_ones(OAR_F32, 3, (int64_t[]){2, 4, 5}), *st = oar_ones(OAR_F32, 3, (int64_t[]){2, 4, 1});
    oar_tensor *out[OARI_MAX_OUT];
    oari_attrs one = {.ni = 1, .i = {1}}, four = {.ni = 1, .i = {4}};
    CHECK(run_op(OARI_OP_layer_norm_backward, 5, (oar_tensor *[]){x, x, st, st, NULL}, &four, out) != 0);
    CHECK(strstr(oar_last_error(), "n_norm_dims 4 out of range for input [2, 4, 5]") != NULL);
    CHECK(run_op(OARI_OP_layer_norm_backward, 5, (oar_tensor *[]){x, x, x, st, NULL}, &one, out) != 0);
    CHECK(strstr(oar_last_error(), "mean [2, 4, 5] must have shape [2, 4, 1]") != NULL);
    CHECK(run_op(OARI_OP_layer_norm_backward, 5,
                 (oar_tensor *[]){x, x, st, st, oar_ones(OAR_F32, 1, (int64_t[]){4})}, &one, out) != 0);
    CHECK(strstr(oar_last_error(), "weight [4] must have shape [5]") != NULL);
    CHECK(run_op(OARI_OP_layer_norm_backward, 5, (oar_tensor *[]){st, x, st, st, NULL}, &one, out) != 0);
    CHECK(strstr(oar_last_error(), "grad_out [2, 4, 1] must have input [2, 4, 5]'s shape") != NULL);
    CHECK(run_op(OARI_OP_layer_norm_backward, 5, (oar_tensor *[]){x, x, st, st, NULL}, &one, out) == 0);
    oar_pool_pop(p);
}

/* batch_norm_backward called directly: what its shape rule refuses. */
static void test_batch_norm_backward_bad_input(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *x = oar_ones(OAR_F32, 3, (int64_t[]){2, 4, 5}), *c4 = oar_ones(OAR_F32, 1, (int64_t[]){4});
    oar_tensor *out[OARI_MAX_OUT];
    struct {
        oar_tensor *in[5];
        const char *msg;
    } cases[] = {
        {{oar_ones(OAR_F32, 3, (int64_t[]){2, 4, 4}), x, c4, c4, NULL}, "grad_out [2, 4, 4] must have input [2, 4, 5]'s shape"},
        {{oar_ones(OAR_I32, 3, (int64_t[]){2, 4, 5}), x, c4, c4, NULL}, "grad_out must be floating"},
        {{x, x, NULL, c4, NULL}, "mean and rstd are required"},
        {{x, x, c4, oar_ones(OAR_F32, 1, (int64_t[]){5}), NULL}, "rstd [5] must have shape [4]"},
        {{x, x, c4, c4, oar_ones(OAR_I64, 1, (int64_t[]){4})}, "weight must be floating"},
        {{x, oar_ones(OAR_F32, 1, (int64_t[]){4}), c4, c4, NULL}, "at least 2 dims"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        oar_clear_error();
        CHECK(run_op(OARI_OP_batch_norm_backward, 5, cases[i].in, NULL, out) != 0);
        if (!strstr(oar_last_error(), cases[i].msg)) {
            test_failed++;
            fprintf(stderr, "case %zu: error \"%s\" lacks \"%s\"\n", i, oar_last_error(), cases[i].msg);
        }
    }
    oar_pool_pop(p);
}

static void test_batch_norm(void) {
    for (int k = 0; k < 2; k++) {
        oar_pool *p = oar_pool_push();
        oar_dtype dt = float_types[k];
        double tol = tol_of(dt);
        oar_tensor *x = MAKE(bn_x, dt, 4, 3, 2, 2), *w = MAKE(bn_w, dt, 3), *b = MAKE(bn_b, dt, 3);
        oar_tensor *rm = MAKE(bn_rm, dt, 3), *rv = MAKE(bn_rv, dt, 3);
        /* eval: running stats, unchanged */
        CHECK_VALUES(oar_batch_norm(x, rm, rv, w, b, false, 0.1, 1e-5), bn_eval_y, N_OF(bn_eval_y),
                     tol);
        CHECK_VALUES(rm, bn_rm, 3, tol);
        CHECK_VALUES(rv, bn_rv, 3, tol);
        /* training: batch stats; running stats updated in place (unbiased var) */
        oar_tensor *y = oar_batch_norm(x, rm, rv, w, b, true, 0.1, 1e-5);
        CHECK_VALUES(y, bn_train_y, N_OF(bn_train_y), tol);
        CHECK_VALUES(rm, bn_train_rm, 3, tol);
        CHECK_VALUES(rv, bn_train_rv, 3, tol);
        /* no running stats, no affine, non-contiguous */
        y = oar_batch_norm(make_strided(bn_x, dt, 4, (int64_t[]){4, 3, 2, 2}), NULL, NULL, NULL,
                           NULL, true, 0.1, 1e-5);
        CHECK_VALUES(y, bn_train_nowb_y, N_OF(bn_train_nowb_y), tol);
        CHECK_VALUES(oar_batch_norm(MAKE(bn3_x, dt, 5, 3), NULL, NULL, NULL, NULL, true, 0.1, 1e-5),
                     bn3_y, N_OF(bn3_y), tol);
        oar_pool_pop(p);
    }
    /* f32 running stats with an f64 input: updated in their own dtype */
    oar_pool *p = oar_pool_push();
    oar_tensor *rm = MAKE(bn_rm, OAR_F32, 3), *rv = MAKE(bn_rv, OAR_F32, 3);
    oar_tensor *y = oar_batch_norm(MAKE(bn_x, OAR_F64, 4, 3, 2, 2), rm, rv, MAKE(bn_w, OAR_F64, 3),
                                   MAKE(bn_b, OAR_F64, 3), true, 0.1, 1e-5);
    CHECK(y && oar_tensor_dtype(y) == OAR_F64 && oar_tensor_dtype(rm) == OAR_F32);
    CHECK_VALUES(y, bn_train_y, N_OF(bn_train_y), 1e-12);
    CHECK_VALUES(rm, bn_train_rm, 3, 1e-6);
    CHECK_VALUES(rv, bn_train_rv, 3, 1e-6);
    oar_pool_pop(p);
}

/* The gradient rules through the engine, against torch's gradients. */
static void test_gradients(void) {
    for (int k = 0; k < 2; k++) {
        oar_pool *p = oar_pool_push();
        oar_dtype dt = float_types[k];
        double tol = dt == OAR_F64 ? 1e-11 : 1e-4;
        oar_tensor *x = leaf(MAKE(ln_x, dt, 3, 4, 5)), *w = leaf(MAKE(ln_w, dt, 4, 5));
        oar_tensor *b = leaf(MAKE(ln_b, dt, 4, 5));
        CHECK_GRADS(oar_layer_norm(x, 2, w, b, 1e-5), MAKE(ln1_gy, dt, 3, 4, 5), 3,
                    ((oar_tensor *[]){x, w, b}), ((const double *[]){ln1_gx, ln1_gw, ln1_gb}),
                    ((int64_t[]){N_OF(ln1_gx), N_OF(ln1_gw), N_OF(ln1_gb)}), tol);
        x = leaf(MAKE(gn_x, dt, 2, 6, 3, 3));
        w = leaf(MAKE(gn_w, dt, 6));
        b = leaf(MAKE(gn_b, dt, 6));
        CHECK_GRADS(oar_group_norm(x, 3, w, b, 1e-5), MAKE(gn1_gy, dt, 2, 6, 3, 3), 3,
                    ((oar_tensor *[]){x, w, b}), ((const double *[]){gn1_gx, gn1_gw, gn1_gb}),
                    ((int64_t[]){N_OF(gn1_gx), N_OF(gn1_gw), N_OF(gn1_gb)}), tol);
        for (int train = 1; train >= 0; train--) {
            x = leaf(MAKE(bn_x, dt, 4, 3, 2, 2));
            w = leaf(MAKE(bn_w, dt, 3));
            b = leaf(MAKE(bn_b, dt, 3));
            oar_tensor *y =
                oar_batch_norm(x, MAKE(bn_rm, dt, 3), MAKE(bn_rv, dt, 3), w, b, train, 0.1, 1e-5);
            CHECK_GRADS(y, MAKE(train ? bn_train_gy : bn_eval_gy, dt, 4, 3, 2, 2), 3,
                        ((oar_tensor *[]){x, w, b}),
                        ((const double *[]){train ? bn_train_gx : bn_eval_gx,
                                            train ? bn_train_gw : bn_eval_gw,
                                            train ? bn_train_gb : bn_eval_gb}),
                        ((int64_t[]){N_OF(bn_train_gx), N_OF(bn_train_gw), N_OF(bn_train_gb)}),
                        tol);
        }
        oar_pool_pop(p);
    }
}

static void test_half_and_empty(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *y = oar_layer_norm(MAKE(ln_x, OAR_F16, 3, 4, 5), 2, MAKE(ln_w, OAR_F16, 4, 5),
                                   MAKE(ln_b, OAR_F16, 4, 5), 1e-5);
    CHECK(y && oar_tensor_dtype(y) == OAR_F16);
    CHECK_VALUES(y, ln1_y, N_OF(ln1_y), 1e-2);
    y = oar_group_norm(MAKE(gn_x, OAR_BF16, 2, 6, 3, 3), 3, MAKE(gn_w, OAR_BF16, 6),
                       MAKE(gn_b, OAR_BF16, 6), 1e-5);
    CHECK(y && oar_tensor_dtype(y) == OAR_BF16);
    CHECK_VALUES(y, gn1_y, N_OF(gn1_y), 3e-2);
    oar_tensor *e = oar_zeros(OAR_F32, 2, (int64_t[]){0, 5});
    y = oar_layer_norm(e, 1, NULL, NULL, 1e-5);
    CHECK(y && oar_tensor_numel(y) == 0 && oar_tensor_shape(y)[1] == 5);
    y = oar_group_norm(oar_zeros(OAR_F32, 3, (int64_t[]){0, 4, 3}), 2, NULL, NULL, 1e-5);
    CHECK(y && oar_tensor_numel(y) == 0);
    oar_pool_pop(p);
}

typedef struct {
    int64_t count, fail_at;
} fail_ctx;
static void *failing_alloc(void *ctx, void *ptr, size_t old_size, size_t new_size) {
    (void)old_size;
    fail_ctx *f = ctx;
    if (new_size == 0) {
        free(ptr);
        return NULL;
    }
    if (++f->count == f->fail_at) return NULL;
    return realloc(ptr, new_size);
}

/* Every allocation of these ops fails in turn: reported, no crash, no leak. */
static void test_allocation_failures(void) {
    bool finished = false;
    for (int64_t n = 1; n < 400 && !finished; n++) {
        fail_ctx f = {0, n};
        oar_set_allocator(failing_alloc, &f);
        oar_pool *p = oar_pool_push();
        oar_clear_error();
        oar_tensor *x = make_strided(bn_x, OAR_F32, 4, (int64_t[]){4, 3, 2, 2});
        oar_tensor *rm = MAKE(bn_rm, OAR_F32, 3), *rv = MAKE(bn_rv, OAR_F32, 3);
        oar_tensor *y = oar_batch_norm(x, rm, rv, MAKE(bn_w, OAR_F32, 3), NULL, true, 0.1, 1e-5);
        y = oar_group_norm(y, 3, NULL, make_strided(bn_b, OAR_F32, 1, (int64_t[]){3}), 1e-5);
        y = oar_layer_norm(y, 2, make_strided(bn_x, OAR_F32, 2, (int64_t[]){2, 2}), NULL, 1e-5);
        /* and batch_norm's fused backward */
        oar_tensor *xg = make_strided(bn_x, OAR_F32, 4, (int64_t[]){4, 3, 2, 2}), *gx = NULL;
        if (xg) oar_tensor_set_requires_grad(xg, true);
        oar_tensor *z = xg ? oar_batch_norm(xg, NULL, NULL, NULL, NULL, true, 0.1, 1e-5) : NULL;
        bool ok = y && z && oar_grad(1, &z, (oar_tensor *[]){oar_ones_like(z)}, 1, &xg, false, false, &gx) == 0 && gx;
        /* and layer_norm's */
        oar_tensor *lw = make_strided(bn_w, OAR_F32, 1, (int64_t[]){3}), *lx = MAKE(bn_x, OAR_F32, 4, 12), *lg[2] = {0};
        if (lx && lw) {
            oar_tensor_set_requires_grad(lx, true);
            oar_tensor_set_requires_grad(lw, true);
        }
        oar_tensor *ly = lx && lw ? oar_layer_norm(oar_reshape(lx, 3, (int64_t[]){4, 4, 3}), 1, lw, NULL, 1e-5) : NULL;
        ok = ok && ly && oar_grad(1, &ly, (oar_tensor *[]){oar_ones_like(ly)}, 2, (oar_tensor *[]){lx, lw}, false, false, lg) == 0;
        CHECK(ok || oar_last_error()[0] != 0);
        finished = ok && f.count < n;
        oar_pool_pop(p);
        oar_set_allocator(NULL, NULL);
    }
    CHECK(finished);
}

static void test_bad_input(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *x = oar_ones(OAR_F32, 3, (int64_t[]){2, 4, 5});
    CHECK_FAILS(oar_layer_norm(x, 2, oar_ones(OAR_F32, 2, (int64_t[]){5, 4}), NULL, 1e-5),
                "weight [5, 4] must have shape [4, 5] (for input [2, 4, 5])");
    CHECK_FAILS(oar_layer_norm(x, 4, NULL, NULL, 1e-5),
                "n_norm_dims 4 out of range for input [2, 4, 5]");
    CHECK_FAILS(oar_layer_norm(x, 0, NULL, NULL, 1e-5), "out of range");
    CHECK_FAILS(oar_layer_norm(oar_ones(OAR_I32, 1, (int64_t[]){3}), 1, NULL, NULL, 1e-5),
                "must be floating");
    CHECK_FAILS(oar_layer_norm(NULL, 1, NULL, NULL, 1e-5), "NULL");
    CHECK_FAILS(oar_group_norm(x, 3, NULL, NULL, 1e-5),
                "groups 3 must be >= 1 and divide the 4 channels");
    CHECK_FAILS(oar_group_norm(x, 2, oar_ones(OAR_F32, 1, (int64_t[]){2}), NULL, 1e-5),
                "weight [2] must have shape [4]");
    CHECK_FAILS(oar_group_norm(oar_ones(OAR_F32, 1, (int64_t[]){4}), 2, NULL, NULL, 1e-5),
                "at least 2 dims");
    CHECK_FAILS(oar_batch_norm(x, NULL, NULL, NULL, NULL, false, 0.1, 1e-5), "needs running_mean");
    CHECK_FAILS(oar_batch_norm(oar_ones(OAR_F32, 2, (int64_t[]){1, 3}), NULL, NULL, NULL, NULL,
                               true, 0.1, 1e-5),
                "more than 1 value per channel");
    CHECK_FAILS(oar_batch_norm(x, oar_zeros(OAR_F32, 1, (int64_t[]){5}),
                               oar_ones(OAR_F32, 1, (int64_t[]){4}), NULL, NULL, false, 0.1, 1e-5),
                "running_mean [5] must have shape [4]");
    CHECK_FAILS(
        oar_batch_norm(x, NULL, NULL, oar_ones(OAR_I64, 1, (int64_t[]){4}), NULL, true, 0.1, 1e-5),
        "weight must be floating");
    oar_pool_pop(p);
}

int main(void) {
    RUN(test_layer_norm);
    RUN(test_group_norm);
    RUN(test_batch_norm);
    RUN(test_batch_norm_long_rows);
    RUN(test_batch_norm_backward_long_rows);
    RUN(test_batch_norm_backward_bad_input);
    RUN(test_layer_norm_backward_long_rows);
    RUN(test_layer_norm_backward_bad_input);
    RUN(test_gradients);
    RUN(test_half_and_empty);
    RUN(test_bad_input);
    RUN(test_allocation_failures);
    return test_summary();
}

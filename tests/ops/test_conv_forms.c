/* The other forms conv1d, conv2d and conv_transpose2d take, as PyTorch:
 * unbatched inputs ([C, ...]): the result equals the batch-of-one result
 * without its batch dim, gradients equal too, central differences agree
 * (first and second order), and bad ranks are refused with the accepted
 * shapes; complex input and weight: values against a direct complex sum
 * written here, gradients by central differences in complex128, mixed
 * dtypes refused. */
#include "gradcheck.h"

#include <complex.h>

/* Compares y with the batch-of-one result yb (shape [1, ...y's shape]). */
static bool same_as_batched(oar_tensor *y, oar_tensor *yb) {
    if (!y || !yb || oar_tensor_ndim(yb) != oar_tensor_ndim(y) + 1 || oar_tensor_shape(yb)[0] != 1)
        return false;
    for (int d = 0; d < oar_tensor_ndim(y); d++)
        if (oar_tensor_shape(y)[d] != oar_tensor_shape(yb)[d + 1]) return false;
    int64_t n = oar_tensor_numel(y);
    double *a = malloc((size_t)n * sizeof *a), *b = malloc((size_t)n * sizeof *b);
    bool ok = oar_tensor_to_host(oar_cast(y, OAR_F64), a, (size_t)n * sizeof *a) == 0 &&
              oar_tensor_to_host(oar_cast(yb, OAR_F64), b, (size_t)n * sizeof *b) == 0;
    for (int64_t i = 0; i < n && ok; i++) ok = a[i] == b[i];
    free(a), free(b);
    return ok;
}

static const int64_t s2[2] = {2, 1}, p2[2] = {1, 0}, d2[2] = {1, 2}, op2[2] = {1, 0};

static oar_tensor *conv2d_fn(void *ctx, int n, oar_tensor *const *x) {
    (void)ctx, (void)n;
    return oar_conv2d(x[0], x[1], x[2], s2, p2, d2, 1);
}
static oar_tensor *conv1d_fn(void *ctx, int n, oar_tensor *const *x) {
    (void)ctx, (void)n;
    return oar_conv1d(x[0], x[1], x[2], 2, 1, 1, 1);
}
static oar_tensor *conv_t_fn(void *ctx, int n, oar_tensor *const *x) {
    (void)ctx, (void)n;
    return oar_conv_transpose2d(x[0], x[1], x[2], s2, p2, op2, (const int64_t[2]){1, 1}, 1);
}

static void test_values_and_grads(void) {
    oar_pool *p = oar_pool_push();
    oar_manual_seed(3);
    struct {
        gc_fn fn;
        int xd;
        int64_t xs[3], ws[4], bs;
    } cases[3] = {
        {conv2d_fn, 3, {3, 7, 6}, {4, 3, 3, 2}, 4},
        {conv1d_fn, 2, {3, 9}, {5, 3, 3}, 5},
        {conv_t_fn, 3, {3, 4, 5}, {3, 2, 3, 3}, 2},
    };
    for (int c = 0; c < 3; c++) {
        int wd = c == 1 ? 3 : 4;
        oar_tensor *x = oar_randn(OAR_F64, cases[c].xd, cases[c].xs);
        oar_tensor *w = oar_randn(OAR_F64, wd, cases[c].ws);
        oar_tensor *b = oar_randn(OAR_F64, 1, &cases[c].bs);
        oar_tensor_set_requires_grad(x, true);
        oar_tensor_set_requires_grad(w, true);
        oar_tensor *y = cases[c].fn(NULL, 3, (oar_tensor *[]){x, w, b});
        oar_tensor *yb = cases[c].fn(NULL, 3, (oar_tensor *[]){oar_unsqueeze(x, 0), w, b});
        CHECK(y && oar_tensor_ndim(y) == cases[c].xd);
        CHECK(same_as_batched(y, yb));
        /* the same loss through both paths: equal gradients */
        oar_tensor *g[2], *gb[2];
        CHECK(oar_grad(1, (oar_tensor *[]){oar_sum(oar_mul(y, y), 0, NULL, false)}, NULL, 2,
                       (oar_tensor *[]){x, w}, false, false, g) == 0);
        CHECK(oar_grad(1, (oar_tensor *[]){oar_sum(oar_mul(yb, yb), 0, NULL, false)}, NULL, 2,
                       (oar_tensor *[]){x, w}, false, false, gb) == 0);
        CHECK(g[0] && oar_tensor_ndim(g[0]) == cases[c].xd);
        CHECK(same_as_batched(g[1], oar_unsqueeze(gb[1], 0)));
        CHECK(same_as_batched(g[0], oar_unsqueeze(gb[0], 0)));
        /* and central differences, first and second order */
        gc_input ins[3] = {{.ndim = cases[c].xd}, {.ndim = wd}, {.ndim = 1, .shape = {cases[c].bs}}};
        memcpy(ins[0].shape, cases[c].xs, sizeof cases[c].xs);
        memcpy(ins[1].shape, cases[c].ws, sizeof cases[c].ws);
        CHECK(gradcheck(c == 0 ? "conv2d unbatched" : c == 1 ? "conv1d unbatched" : "conv_transpose2d unbatched",
                        cases[c].fn, NULL, 3, ins, NULL));
    }
    oar_pool_pop(p);
}

static void test_bad_ranks(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *w4 = oar_ones(OAR_F32, 4, (int64_t[]){2, 3, 3, 3});
    CHECK_FAILS(oar_conv2d(oar_ones(OAR_F32, 2, (int64_t[]){3, 5}), w4, NULL, s2, p2, d2, 1),
                "expected a 4-D input [N, C, H, W] or 3-D [C, H, W], got [3, 5]");
    CHECK_FAILS(oar_conv2d(oar_ones(OAR_F32, 5, (int64_t[]){1, 1, 3, 5, 5}), w4, NULL, s2, p2, d2, 1),
                "or 3-D [C, H, W]");
    /* unbatched with the wrong channel count: the batched op's message */
    CHECK_FAILS(oar_conv2d(oar_ones(OAR_F32, 3, (int64_t[]){2, 5, 5}), w4, NULL, s2, p2, d2, 1),
                "conv2d");
    CHECK_FAILS(oar_conv1d(oar_ones(OAR_F32, 1, (int64_t[]){5}), oar_ones(OAR_F32, 3, (int64_t[]){2, 1, 3}),
                           NULL, 1, 0, 1, 1),
                "expected a 3-D input [N, C, L] or 2-D [C, L], got [5]");
    CHECK_FAILS(oar_conv_transpose2d(oar_ones(OAR_F32, 2, (int64_t[]){3, 5}), w4, NULL, s2, p2, op2, d2, 1),
                "or 3-D [C, H, W], got [3, 5]");
    CHECK_FAILS(oar_conv2d(oar_ones(OAR_F32, 3, (int64_t[]){3, 5, 5}), NULL, NULL, s2, p2, d2, 1), "weight is NULL");
    CHECK_FAILS(oar_conv2d(NULL, w4, NULL, s2, p2, d2, 1), "NULL");
    oar_pool_pop(p);
}

/* y[n, o, i, j] = b[o] + sum_{c, u, v} x[n, c, i*s + u*d - p, j*s + v*d - p] w[o, c, u, v]
 * (stride s, padding p, dilation d on both axes, groups 1), directly. */
static void direct_conv2d(const double complex *x, const double complex *w, const double complex *b,
                          int64_t N, int64_t C, int64_t H, int64_t W, int64_t O, int64_t K, int64_t s,
                          int64_t p, int64_t d, double complex *y, int64_t OH, int64_t OW) {
    for (int64_t n = 0; n < N; n++)
        for (int64_t o = 0; o < O; o++)
            for (int64_t i = 0; i < OH; i++)
                for (int64_t j = 0; j < OW; j++) {
                    double complex acc = b ? b[o] : 0;
                    for (int64_t c = 0; c < C; c++)
                        for (int64_t u = 0; u < K; u++)
                            for (int64_t v = 0; v < K; v++) {
                                int64_t hi = i * s + u * d - p, wi = j * s + v * d - p;
                                if (hi < 0 || hi >= H || wi < 0 || wi >= W) continue;
                                acc += x[((n * C + c) * H + hi) * W + wi] * w[((o * C + c) * K + u) * K + v];
                            }
                    y[((n * O + o) * OH + i) * OW + j] = acc;
                }
}

static oar_tensor *complex_tensor(const double complex *v, oar_dtype dt, int nd, const int64_t *shape) {
    return oar_cast(oar_tensor_from_data(v, OAR_C128, nd, shape), dt);
}

static void test_complex_values(void) {
    oar_pool *p = oar_pool_push();
    enum { N = 2, C = 3, H = 6, W = 5, O = 4, K = 3 };
    const int64_t s = 2, pd = 1, d = 1, OH = (H + 2 * pd - d * (K - 1) - 1) / s + 1,
                  OW = (W + 2 * pd - d * (K - 1) - 1) / s + 1;
    double complex x[N * C * H * W], w[O * C * K * K], b[O], want[N * O * 3 * 3], got[N * O * 3 * 3];
    uint64_t seed = 7;
    double complex *all[3] = {x, w, b};
    int64_t sizes[3] = {N * C * H * W, O * C * K * K, O};
    for (int t = 0; t < 3; t++)
        for (int64_t i = 0; i < sizes[t]; i++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            double re = (double)(seed >> 40) / 16777216.0 - 0.5;
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            all[t][i] = re + I * ((double)(seed >> 40) / 16777216.0 - 0.5);
        }
    CHECK(OH == 3 && OW == 3);
    direct_conv2d(x, w, b, N, C, H, W, O, K, s, pd, d, want, OH, OW);
    const oar_dtype dts[2] = {OAR_C128, OAR_C64};
    for (int k = 0; k < 2; k++) {
        oar_tensor *y = oar_conv2d(complex_tensor(x, dts[k], 4, (int64_t[]){N, C, H, W}),
                                   complex_tensor(w, dts[k], 4, (int64_t[]){O, C, K, K}),
                                   complex_tensor(b, dts[k], 1, (int64_t[]){O}), (int64_t[]){s, s},
                                   (int64_t[]){pd, pd}, (int64_t[]){d, d}, 1);
        CHECK(y && oar_tensor_dtype(y) == dts[k] && oar_tensor_shape(y)[2] == OH);
        CHECK(y && oar_tensor_to_host(oar_cast(y, OAR_C128), got, sizeof got) == 0);
        double err = 0;
        for (int64_t i = 0; i < N * O * OH * OW; i++) err = fmax(err, cabs(got[i] - want[i]));
        CHECK(err < (k == 0 ? 1e-12 : 1e-5));
    }
    /* conv1d is conv2d over a height of one */
    oar_tensor *x1 = complex_tensor(x, OAR_C128, 3, (int64_t[]){N, C, H * W});
    oar_tensor *w1 = complex_tensor(w, OAR_C128, 3, (int64_t[]){O, C, K * K});
    oar_tensor *y1 = oar_conv1d(x1, w1, NULL, 1, 0, 1, 1);
    oar_tensor *y2 = oar_conv2d(oar_unsqueeze(x1, 2), oar_unsqueeze(w1, 2), NULL, (int64_t[]){1, 1},
                                (int64_t[]){0, 0}, (int64_t[]){1, 1}, 1);
    CHECK(y1 && y2 && oar_tensor_dtype(y1) == OAR_C128);
    CHECK(same_as_batched(y1, oar_unsqueeze(oar_squeeze(y2, 2), 0)));
    oar_pool_pop(p);
}

static void test_complex_grads(void) {
    gc_input ins2[3] = {{.dtype = OAR_C128, .ndim = 4, .shape = {2, 2, 5, 4}},
                        {.dtype = OAR_C128, .ndim = 4, .shape = {3, 2, 3, 2}},
                        {.dtype = OAR_C128, .ndim = 1, .shape = {3}}};
    CHECK(gradcheck("conv2d complex", conv2d_fn, NULL, 3, ins2, NULL));
    gc_input ins1[3] = {{.dtype = OAR_C128, .ndim = 3, .shape = {2, 3, 9}},
                        {.dtype = OAR_C128, .ndim = 3, .shape = {5, 3, 3}},
                        {.dtype = OAR_C128, .ndim = 1, .shape = {5}}};
    CHECK(gradcheck("conv1d complex", conv1d_fn, NULL, 3, ins1, NULL));
    gc_input inst[3] = {{.dtype = OAR_C128, .ndim = 3, .shape = {3, 4, 5}},
                        {.dtype = OAR_C128, .ndim = 4, .shape = {3, 2, 3, 3}},
                        {.dtype = OAR_C128, .ndim = 1, .shape = {2}}};
    CHECK(gradcheck("conv_transpose2d complex unbatched", conv_t_fn, NULL, 3, inst, NULL));
}

static void test_complex_bad(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *xc = oar_zeros(OAR_C64, 4, (int64_t[]){1, 3, 5, 5});
    oar_tensor *wc = oar_zeros(OAR_C64, 4, (int64_t[]){2, 3, 3, 3});
    CHECK_FAILS(oar_conv2d(xc, oar_zeros(OAR_F32, 4, (int64_t[]){2, 3, 3, 3}), NULL, s2, p2, d2, 1),
                "conv2d: weight dtype float32 differs from the input's complex64");
    CHECK_FAILS(oar_conv2d(oar_zeros(OAR_F32, 4, (int64_t[]){1, 3, 5, 5}), wc, NULL, s2, p2, d2, 1),
                "differs from the input's");
    CHECK_FAILS(oar_conv2d(xc, wc, oar_zeros(OAR_C128, 1, (int64_t[]){2}), s2, p2, d2, 1),
                "bias dtype complex128 differs from the input's complex64");
    CHECK_FAILS(oar_conv2d(xc, wc, oar_zeros(OAR_C64, 1, (int64_t[]){3}), s2, p2, d2, 1), "bias");
    CHECK_FAILS(oar_conv2d(xc, oar_zeros(OAR_C64, 4, (int64_t[]){2, 4, 3, 3}), NULL, s2, p2, d2, 1),
                "conv2d");
    oar_pool_pop(p);
}

int main(void) {
    RUN(test_complex_values);
    RUN(test_complex_grads);
    RUN(test_complex_bad);
    RUN(test_values_and_grads);
    RUN(test_bad_ranks);
    return test_summary();
}

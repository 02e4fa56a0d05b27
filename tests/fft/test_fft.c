/* FFT functions (include/oar/fft.h): values against numpy.fft (tests/ref/
 * fft_ref.h) in complex64 and complex128, dtype promotion, strided and
 * batched (OpenMP) inputs, round trips, gradients to second order, and
 * failure paths. */
#include "gradcheck.h"
#include "test.h"

#include "backends/cpu/fft_engine.h"
#include "ref/fft_ref.h"

#include <omp.h>

static int64_t numel_of(int nd, const int64_t *shape) {
    int64_t n = 1;
    for (int d = 0; d < nd; d++) n *= shape[d];
    return n;
}

static oar_tensor *run_case(const fft_case *c, oar_tensor *x) {
    const char *f = c->fn;
    const int64_t *s = c->ns ? c->s : NULL, *dims = c->nd ? c->dims : NULL;
    int k = c->ns > c->nd ? c->ns : c->nd;
    if (!strcmp(f, "fft")) return oar_fft_fft(x, c->n, c->dim, c->norm);
    if (!strcmp(f, "ifft")) return oar_fft_ifft(x, c->n, c->dim, c->norm);
    if (!strcmp(f, "rfft")) return oar_fft_rfft(x, c->n, c->dim, c->norm);
    if (!strcmp(f, "irfft")) return oar_fft_irfft(x, c->n, c->dim, c->norm);
    if (!strcmp(f, "hfft")) return oar_fft_hfft(x, c->n, c->dim, c->norm);
    if (!strcmp(f, "ihfft")) return oar_fft_ihfft(x, c->n, c->dim, c->norm);
    if (!strcmp(f, "fft2")) return oar_fft_fft2(x, s, dims, c->norm);
    if (!strcmp(f, "ifft2")) return oar_fft_ifft2(x, s, dims, c->norm);
    if (!strcmp(f, "rfft2")) return oar_fft_rfft2(x, s, dims, c->norm);
    if (!strcmp(f, "irfft2")) return oar_fft_irfft2(x, s, dims, c->norm);
    if (!strcmp(f, "fftn")) return oar_fft_fftn(x, k, s, dims, c->norm);
    if (!strcmp(f, "ifftn")) return oar_fft_ifftn(x, k, s, dims, c->norm);
    if (!strcmp(f, "rfftn")) return oar_fft_rfftn(x, k, s, dims, c->norm);
    if (!strcmp(f, "irfftn")) return oar_fft_irfftn(x, k, s, dims, c->norm);
    if (!strcmp(f, "fftshift")) return oar_fft_fftshift(x, c->nd, dims);
    if (!strcmp(f, "ifftshift")) return oar_fft_ifftshift(x, c->nd, dims);
    return NULL;
}

/* max |got - want| over max(1, max |want|), complex values interleaved */
static double rel_err(oar_tensor *t, const double *want, int64_t nvals) {
    oar_pool *p = oar_pool_push();
    oar_tensor *d = oar_cast(t, oar_dtype_is_complex(oar_tensor_dtype(t)) ? OAR_C128 : OAR_F64);
    double *v = malloc((size_t)(nvals ? nvals : 1) * sizeof *v), err = INFINITY;
    if (d && !oar_tensor_to_host(d, v, (size_t)nvals * sizeof *v)) {
        double e = 0, m = 1;
        for (int64_t i = 0; i < nvals; i++) {
            e = fmax(e, fabs(v[i] - want[i]));
            m = fmax(m, fabs(want[i]));
        }
        err = e / m;
    }
    free(v);
    oar_pool_pop(p);
    return err;
}

static void test_numpy_values(void) {
    for (int i = 0; i < N_FFT_CASES; i++) {
        const fft_case *c = &fft_cases[i];
        for (int prec = 0; prec < 2; prec++) {
            oar_pool *p = oar_pool_push();
            bool dbl = prec == 1;
            oar_tensor *x = oar_tensor_from_data(c->in, c->in_complex ? OAR_C128 : OAR_F64, c->in_ndim,
                                                 c->in_shape);
            if (!dbl) x = oar_cast(x, c->in_complex ? OAR_C64 : OAR_F32);
            oar_tensor *y = run_case(c, x);
            oar_dtype want_dt = c->out_complex ? (dbl ? OAR_C128 : OAR_C64) : (dbl ? OAR_F64 : OAR_F32);
            bool ok = y && oar_tensor_dtype(y) == want_dt && oar_tensor_ndim(y) == c->out_ndim &&
                      !memcmp(oar_tensor_shape(y), c->out_shape, (size_t)c->out_ndim * sizeof(int64_t));
            double err = NAN, tol = dbl ? 1e-12 : 1e-5;
            if (ok) {
                int64_t nv = numel_of(c->out_ndim, c->out_shape) * (c->out_complex ? 2 : 1);
                err = rel_err(y, c->out, nv);
                ok = err <= tol;
            }
            if (ok) test_passed++;
            else {
                test_failed++;
                fprintf(stderr, "case %d: %s norm %s n %lld dim %d in %s: %s (rel err %g, tol %g; %s)\n",
                        i, c->fn, c->norm ? c->norm : "NULL", (long long)c->n, c->dim,
                        c->in_complex ? "complex" : "real", dbl ? "double" : "single", err, tol,
                        y ? "wrong shape/dtype or values" : oar_last_error());
            }
            oar_pool_pop(p);
        }
    }
}

static void test_freq(void) {
    for (size_t i = 0; i < sizeof fft_freq_cases / sizeof fft_freq_cases[0]; i++) {
        const fft_freq_case *c = &fft_freq_cases[i];
        oar_pool *p = oar_pool_push();
        oar_tensor *f = oar_fft_fftfreq(c->n, c->d, OAR_F64);
        oar_tensor *r = oar_fft_rfftfreq(c->n, c->d, OAR_F64);
        CHECK(f && oar_tensor_numel(f) == c->n && oar_tensor_dtype(f) == OAR_F64);
        CHECK(r && oar_tensor_numel(r) == c->n / 2 + 1);
        CHECK_VALUES(f, c->fftfreq, c->n, 1e-15);
        CHECK_VALUES(r, c->rfftfreq, c->n / 2 + 1, 1e-15);
        oar_tensor *f32 = oar_fft_fftfreq(c->n, c->d, OAR_F32);
        CHECK(f32 && oar_tensor_dtype(f32) == OAR_F32);
        CHECK_VALUES(f32, c->fftfreq, c->n, 1e-6);
        oar_pool_pop(p);
    }
    oar_tensor *e = oar_fft_fftfreq(0, 1.0, OAR_F32);
    CHECK(e && oar_tensor_numel(e) == 0);
    oar_tensor_release(e);
}

/* Integers and f32 promote to complex64, f64 to complex128, as PyTorch. */
static void test_promotion(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *xi = oar_arange(0, 6, 1, OAR_I64);
    oar_tensor *y = oar_fft_fft(xi, -1, 0, NULL);
    CHECK(y && oar_tensor_dtype(y) == OAR_C64);
    oar_tensor *yr = oar_fft_rfft(oar_cast(xi, OAR_I32), -1, 0, NULL);
    CHECK(yr && oar_tensor_dtype(yr) == OAR_C64 && oar_tensor_numel(yr) == 4);
    CHECK(oar_tensor_dtype(oar_fft_fft(oar_cast(xi, OAR_F64), -1, 0, NULL)) == OAR_C128);
    CHECK(oar_tensor_dtype(oar_fft_irfft(oar_cast(xi, OAR_F64), -1, 0, NULL)) == OAR_F64);
    CHECK(oar_tensor_dtype(oar_fft_hfft(oar_cast(xi, OAR_F32), -1, 0, NULL)) == OAR_F32);
    /* sum of 0..5 at k = 0; k = 3: alternating sum -3 */
    double *v = test_values(oar_real(y));
    CHECK(v && fabs(v[0] - 15) < 1e-5 && fabs(v[3] + 3) < 1e-5);
    free(v);
    oar_pool_pop(p);
}

/* Strided views, dims in any order, and batches large enough for the
 * OpenMP path, against the same transform of a contiguous copy and round
 * trips. */
static void test_layouts_and_round_trips(void) {
    oar_pool *p = oar_pool_push();
    oar_manual_seed(7);
    int64_t sh[3] = {6, 5, 7};
    oar_tensor *x = oar_randn(OAR_F64, 3, sh);
    oar_tensor *xt = oar_permute(x, (const int64_t[]){2, 0, 1}); /* [7, 6, 5] strided */
    oar_tensor *a = oar_fft_fftn(xt, 2, NULL, (const int64_t[]){2, 0}, "ortho");
    oar_tensor *b = oar_fft_fftn(oar_contiguous(oar_clone(xt)), 2, NULL, (const int64_t[]){0, 2}, "ortho");
    double *va = NULL, *vb = NULL;
    int64_t na = 0, nb = 0;
    va = gc_host(a, &na);
    vb = gc_host(b, &nb);
    double e = 0;
    for (int64_t i = 0; va && vb && i < na; i++) e = fmax(e, fabs(va[i] - vb[i]));
    CHECK(va && vb && na == nb && e < 1e-12);
    free(va);
    free(vb);

    /* irfftn(rfftn(x), s) == x for odd and prime sizes */
    oar_tensor *r = oar_fft_irfftn(oar_fft_rfftn(x, 0, NULL, NULL, NULL), 3, sh, NULL, NULL);
    CHECK(r && oar_tensor_ndim(r) == 3 && !memcmp(oar_tensor_shape(r), sh, sizeof sh));
    oar_tensor *d = oar_sub(r, x);
    CHECK(d && oar_tensor_item(oar_amax(oar_abs(d), 0, NULL, false)) < 1e-13);

    /* a batch of 512 lines of 97 (Bluestein) and of 256 in complex64 */
    int64_t bs[2] = {512, 97}, bs2[2] = {256, 512};
    oar_tensor *z = oar_randn(OAR_F32, 2, bs);
    oar_tensor *zz = oar_fft_ifft(oar_fft_fft(z, -1, -1, NULL), -1, -1, NULL);
    CHECK(zz && oar_tensor_item(oar_amax(oar_abs(oar_sub(zz, z)), 0, NULL, false)) < 1e-5);
    oar_tensor *w = oar_randn(OAR_F32, 2, bs2);
    oar_tensor *ww = oar_fft_irfft(oar_fft_rfft(w, -1, 0, NULL), 256, 0, NULL);
    CHECK(ww && oar_tensor_item(oar_amax(oar_abs(oar_sub(ww, w)), 0, NULL, false)) < 1e-5);
    /* Parseval: sum |x|^2 == sum |X|^2 under "ortho" */
    oar_tensor *X = oar_fft_fft2(oar_cast(w, OAR_F64), NULL, NULL, "ortho");
    double ex = oar_tensor_item(oar_sum(oar_square(oar_cast(w, OAR_F64)), 0, NULL, false));
    double eX = oar_tensor_item(oar_sum(oar_square(oar_abs(X)), 0, NULL, false));
    CHECK_NEAR(eX / ex, 1.0, 1e-12);
    /* a dim other than the last (lines adjacent in memory, 8 and 4 SIMD
     * lanes) against the last dim of the transposed copy and float64 */
    for (int dt = 0; dt < 2; dt++) {
        int64_t sa[2] = {12, 40};
        oar_tensor *xa = oar_cast(oar_randn(OAR_F64, 2, sa), dt ? OAR_C128 : OAR_C64);
        oar_tensor *fa = oar_fft_fft(xa, -1, 0, "ortho");
        oar_tensor *fb = oar_transpose(oar_fft_fft(oar_contiguous(oar_clone(oar_transpose(xa, 0, 1))), -1, 1, "ortho"), 0, 1);
        oar_tensor *fc = oar_fft_fft(oar_cast(xa, OAR_C128), -1, 0, "ortho");
        double tol = dt ? 1e-12 : 1e-5;
        CHECK(fa && fb && oar_tensor_item(oar_amax(oar_abs(oar_sub(fa, fb)), 0, NULL, false)) < tol);
        CHECK(fa && fc && oar_tensor_item(oar_amax(oar_abs(oar_sub(oar_cast(fa, OAR_C128), fc)), 0, NULL, false)) < tol);
        oar_tensor *ra = oar_fft_ifft(fa, -1, 0, "ortho");
        CHECK(ra && oar_tensor_item(oar_amax(oar_abs(oar_sub(ra, xa)), 0, NULL, false)) < tol);
    }
    /* fftshift then ifftshift is the identity for odd sizes */
    oar_tensor *sft = oar_fft_ifftshift(oar_fft_fftshift(x, 0, NULL), 0, NULL);
    CHECK(sft && oar_tensor_item(oar_amax(oar_abs(oar_sub(sft, x)), 0, NULL, false)) == 0);
    oar_pool_pop(p);
}

/* ---- gradients, first and second order (float64 / complex128) ---------- */
static const int64_t d10[2] = {1, 0}, s43[2] = {4, 3}, s5[1] = {5}, dm1[1] = {-1};
#define GFN(name, expr)                                                 \
    static oar_tensor *name(void *c, int n, oar_tensor *const *x) {     \
        (void)c; (void)n;                                               \
        return (expr);                                                  \
    }
GFN(g_fft_crop, oar_fft_fft(x[0], 3, 1, "forward"))
GFN(g_ifft_pad, oar_fft_ifft(x[0], 7, 0, "ortho"))
GFN(g_rfft_pad, oar_fft_rfft(x[0], 8, -1, NULL))
GFN(g_irfft_odd, oar_fft_irfft(x[0], 5, 0, "ortho"))
GFN(g_hfft, oar_fft_hfft(x[0], 6, -1, NULL))
GFN(g_ihfft, oar_fft_ihfft(x[0], -1, -1, "forward"))
GFN(g_fft2_real, oar_fft_fft2(x[0], NULL, d10, NULL))
GFN(g_rfftn_s, oar_fft_rfftn(x[0], 2, s43, NULL, "ortho"))
GFN(g_irfftn, oar_fft_irfftn(x[0], 1, s5, dm1, NULL))
GFN(g_ifftn_all, oar_fft_ifftn(x[0], 0, NULL, NULL, "forward"))
GFN(g_shift, oar_fft_fftshift(x[0], 0, NULL))
/* a loss through rfft -> |.|^2 -> irfft, the path of spectral methods */
GFN(g_chain, oar_fft_irfft(oar_mul(oar_fft_rfft(x[0], -1, -1, NULL),
                                   oar_cast(oar_fft_rfft(x[1], -1, -1, NULL), OAR_C128)), 6, -1, NULL))

static void test_gradients(void) {
    const gc_opts o = {0};
#define C2 .dtype = OAR_C128
    struct { const char *name; gc_fn fn; int n; gc_input in[2]; } cs[] = {
        {"fft n crop", g_fft_crop, 1, {{C2, .ndim = 2, .shape = {2, 5}}}},
        {"ifft n pad dim 0", g_ifft_pad, 1, {{C2, .ndim = 2, .shape = {4, 2}}}},
        {"rfft n pad", g_rfft_pad, 1, {{.ndim = 2, .shape = {2, 5}}}},
        {"irfft odd", g_irfft_odd, 1, {{C2, .ndim = 2, .shape = {3, 2}}}},
        {"hfft", g_hfft, 1, {{C2, .ndim = 2, .shape = {2, 4}}}},
        {"ihfft", g_ihfft, 1, {{.ndim = 2, .shape = {2, 7}}}},
        {"fft2 of a real input", g_fft2_real, 1, {{.ndim = 2, .shape = {3, 4}}}},
        {"rfftn s", g_rfftn_s, 1, {{.ndim = 3, .shape = {2, 3, 5}}}},
        {"irfftn s", g_irfftn, 1, {{C2, .ndim = 2, .shape = {2, 4}}}},
        {"ifftn all dims", g_ifftn_all, 1, {{C2, .ndim = 3, .shape = {2, 3, 2}}}},
        {"fftshift", g_shift, 1, {{.ndim = 2, .shape = {3, 4}}}},
        {"rfft product irfft", g_chain, 2, {{.ndim = 2, .shape = {2, 6}}, {.ndim = 2, .shape = {2, 6}}}},
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        oar_pool *p = oar_pool_push();
        CHECK(gradcheck(cs[i].name, cs[i].fn, NULL, cs[i].n, cs[i].in, &o));
        oar_pool_pop(p);
    }
}

static void test_errors(void) {
    oar_pool *p = oar_pool_push();
    int64_t sh[2] = {3, 4};
    oar_tensor *x = oar_randn(OAR_F32, 2, sh), *c = oar_cast(x, OAR_C64);
    CHECK_FAILS(oar_fft_fft(NULL, -1, 0, NULL), "oar_fft_fft: input is NULL");
    CHECK_FAILS(oar_fft_rfftn(NULL, 0, NULL, NULL, NULL), "oar_fft_rfftn: input is NULL");
    CHECK_FAILS(oar_fft_fftshift(NULL, 0, NULL), "oar_fft_fftshift");
    CHECK_FAILS(oar_fft_fft(x, -1, 2, NULL), "oar_fft_fft");
    CHECK_FAILS(oar_fft_ifft(x, -1, -3, NULL), "oar_fft_ifft");
    CHECK_FAILS(oar_fft_fft(x, 0, 0, NULL), "oar_fft_fft: invalid number of data points 0");
    CHECK_FAILS(oar_fft_rfft(x, -2, 0, NULL), "oar_fft_rfft: invalid number of data points -2");
    CHECK_FAILS(oar_fft_fft(x, -1, 0, "Ortho"), "oar_fft_fft: unknown norm \"Ortho\"");
    CHECK_FAILS(oar_fft_irfftn(c, 0, NULL, NULL, "none"), "oar_fft_irfftn: unknown norm");
    CHECK_FAILS(oar_fft_rfft(c, -1, 0, NULL), "oar_fft_rfft: expected a real input, got complex64");
    CHECK_FAILS(oar_fft_ihfft(c, -1, 0, NULL), "oar_fft_ihfft: expected a real input");
    CHECK_FAILS(oar_fft_rfft2(c, NULL, NULL, NULL), "oar_fft_rfft2: expected a real input");
    int64_t one = 1;
    oar_tensor *c1 = oar_zeros(OAR_C64, 1, &one);
    CHECK_FAILS(oar_fft_irfft(c1, -1, 0, NULL), "oar_fft_irfft: invalid number of data points (0)");
    CHECK_FAILS(oar_fft_hfft(c1, -1, 0, NULL), "oar_fft_hfft: invalid number of data points (0)");
    CHECK_FAILS(oar_fft_fftn(x, 2, NULL, (const int64_t[]){1, -1}, NULL), "oar_fft_fftn: dim 1 appears twice");
    CHECK_FAILS(oar_fft_fftn(x, 3, NULL, (const int64_t[]){0, 1, 0}, NULL), "oar_fft_fftn: 3 dims given");
    CHECK_FAILS(oar_fft_fft2(x, (const int64_t[]){3, 0}, NULL, NULL), "oar_fft_fft2: invalid number of data points 0");
    CHECK_FAILS(oar_fft_fftfreq(4, 1.0, OAR_I64), "oar_fft_fftfreq: dtype");
    CHECK_FAILS(oar_fft_rfftfreq(-1, 1.0, OAR_F32), "oar_fft_rfftfreq: n must be >= 0");
    CHECK_FAILS(oar_fft_fftfreq(4, 0.0, OAR_F32), "oar_fft_fftfreq: sample spacing");
    int64_t z[2] = {0, 4};
    CHECK_FAILS(oar_fft_fft(oar_zeros(OAR_C64, 2, z), -1, 0, NULL), "oar_fft_fft: invalid number of data points (0)");
    /* a NULL input keeps the message of what produced it */
    oar_clear_error();
    oar_tensor *bad = oar_reshape(x, 1, (const int64_t[]){5});
    const char *first = oar_last_error();
    char keep[256];
    snprintf(keep, sizeof keep, "%s", first);
    CHECK(!bad && !oar_fft_rfft(bad, -1, 0, NULL) && !strcmp(oar_last_error(), keep));
    oar_pool_pop(p);
}

/* Threads planning the same new lengths at once get one plan each and
 * the same values as a later single-threaded call. OpenMP threads rather
 * than pthreads: a thread's spare pools live until it exits (core keeps
 * them per thread and frees them with nothing), and the OpenMP workers
 * outlive the test. */
#define N_THREADS 4
static const int64_t thread_lengths[3] = {523, 1536, 2310};
static double thread_sums[N_THREADS][3][2];

static void fft_thread(int t) {
    for (int i = 0; i < 3; i++) {
        oar_pool *p = oar_pool_push();
        int64_t shape[2] = {3, thread_lengths[i]};
        oar_tensor *x = oar_reshape(oar_arange(0, (double)(3 * thread_lengths[i]), 1, OAR_F64), 2, shape);
        oar_tensor *y = oar_fft_fft(oar_sin(x), -1, -1, "ortho");
        thread_sums[t][i][0] = y ? oar_tensor_item(oar_sum(oar_abs(y), 0, NULL, false)) : NAN;
        thread_sums[t][i][1] = y ? oar_tensor_item(oar_sum(oar_real(y), 0, NULL, false)) : NAN;
        oar_pool_pop(p);
    }
}

static void test_threads(void) {
    int ran = 0;
#pragma omp parallel num_threads(N_THREADS) reduction(+ : ran)
    {
        fft_thread(omp_get_thread_num());
        ran = 1;
    }
    CHECK(ran >= 1); /* N_THREADS unless the runtime gives fewer */
    double ref[3][2];
    memcpy(ref, thread_sums[0], sizeof ref);
    fft_thread(0); /* again, plans cached */
    for (int t = 0; t < ran && t < N_THREADS; t++)
        for (int i = 0; i < 3; i++) {
            CHECK(!isnan(thread_sums[t][i][0]) && thread_sums[t][i][0] == ref[i][0]);
            CHECK(thread_sums[t][i][1] == ref[i][1]);
        }
}

/* the same with the SSE2 lanes where the AVX2 ones would run */
static void test_numpy_values_narrow(void) {
    oari_fft_force_narrow(true);
    test_numpy_values();
    test_layouts_and_round_trips();
    oari_fft_force_narrow(false);
}

/* Lines contiguous along the transformed dim, 19 of them (two groups of 8
 * SIMD lanes, then 3 alone) and 42 or 44 long (a tail past the 4-element
 * blocks of the 8-line gather and scatter), in float32 against the same
 * transform in float64 (which gathers lane by lane): fft, ifft with a
 * scale, rfft (real lines, packed in pairs) and irfft. A round trip alone
 * would not see two lines swapped by both the gather and the scatter. */
static void test_eight_lines(void) {
    oar_pool *p = oar_pool_push();
    oar_manual_seed(5);
    for (int narrow = 0; narrow < 2; narrow++) {
        oari_fft_force_narrow(narrow);
        oar_tensor *xc = oar_complex(oar_randn(OAR_F64, 2, (const int64_t[]){19, 42}),
                                     oar_randn(OAR_F64, 2, (const int64_t[]){19, 42}));
        oar_tensor *xr = oar_randn(OAR_F64, 2, (const int64_t[]){19, 44});
        oar_tensor *xh = oar_fft_rfft(xr, -1, -1, NULL); /* [19, 23] */
        for (int f = 0; f < 4; f++) {
            oar_tensor *x = f < 2 ? xc : f == 2 ? xr : xh;
            oar_tensor *x32 = oar_cast(x, f == 2 ? OAR_F32 : OAR_C64);
            oar_tensor *want = f == 0   ? oar_fft_fft(x, -1, -1, NULL)
                               : f == 1 ? oar_fft_ifft(x, -1, -1, "ortho")
                               : f == 2 ? oar_fft_rfft(x, -1, -1, NULL)
                                        : oar_fft_irfft(x, 44, -1, "forward");
            oar_tensor *got = f == 0   ? oar_fft_fft(x32, -1, -1, NULL)
                              : f == 1 ? oar_fft_ifft(x32, -1, -1, "ortho")
                              : f == 2 ? oar_fft_rfft(x32, -1, -1, NULL)
                                       : oar_fft_irfft(x32, 44, -1, "forward");
            CHECK(want && got);
            if (!want || !got) continue;
            oar_tensor *d = oar_abs(oar_sub(oar_cast(got, oar_tensor_dtype(want)), want));
            double err = oar_tensor_item(oar_amax(d, 0, NULL, false));
            double mag = oar_tensor_item(oar_amax(oar_abs(want), 0, NULL, false));
            if (!(err <= 1e-5 * mag))
                fprintf(stderr, "eight lines: narrow %d, case %d: %g off (of %g)\n", narrow, f, err, mag);
            CHECK(mag > 0 && err <= 1e-5 * mag);
        }
    }
    oari_fft_force_narrow(false);
    oar_pool_pop(p);
}

/* 2-D transforms of a batch big enough that each thread takes whole slabs
 * (run_passes in cpu_fft.c: every pass on one slab before the next) against
 * the same transform of each slab alone (one slab: pass by pass), in both
 * precisions, with a strided (permuted) input too */
static oar_tensor *run_slabs_case(int f, oar_tensor *x) {
    static const int64_t dims02[2] = {0, 2};
    return f == 0   ? oar_fft_rfft2(x, NULL, NULL, "ortho")
           : f == 1 ? oar_fft_fft2(x, NULL, NULL, NULL)
           : f == 2 ? oar_fft_irfft2(x, NULL, NULL, "forward")
                    : oar_fft_ifftn(x, 2, NULL, dims02, NULL);
}

static void test_batched_slabs(void) {
    oar_pool *p = oar_pool_push();
    oar_manual_seed(11);
    int64_t sh[3] = {8, 64, 72};
    for (int dt = 0; dt < 2; dt++) {
        const double tol = dt ? 1e-12 : 1e-5;
        oar_tensor *xr = oar_randn(dt ? OAR_F64 : OAR_F32, 3, sh);
        oar_tensor *xc = oar_fft_fft(xr, -1, 0, NULL); /* complex, not Hermitian */
        oar_tensor *xt = oar_permute(xc, (const int64_t[]){1, 0, 2}); /* [64, 8, 72] strided */
        for (int f = 0; f < 4; f++) {
            double err = 0;
            oar_tensor *all = run_slabs_case(f, f == 0 ? xr : f == 3 ? xt : xc);
            CHECK(all != NULL);
            for (int b = 0; all && b < 8; b++) {
                oar_tensor *x = f == 0 ? xr : f == 3 ? xt : xc;
                oar_tensor *y = run_slabs_case(f, oar_slice(x, f == 3 ? 1 : 0, b, b + 1, 1));
                oar_tensor *ya = oar_slice(all, f == 3 ? 1 : 0, b, b + 1, 1);
                oar_tensor *d = y && ya ? oar_abs(oar_sub(y, ya)) : NULL;
                double e = d ? oar_tensor_item(oar_amax(d, 0, NULL, false)) : INFINITY;
                double m = y ? oar_tensor_item(oar_amax(oar_abs(y), 0, NULL, false)) : 1;
                err = fmax(err, e / fmax(m, 1.0));
            }
            if (err > tol) fprintf(stderr, "batched slabs: dtype %d case %d: error %g\n", dt, f, err);
            CHECK(err <= tol);
        }
    }
    oar_pool_pop(p);
}

/* which engine runs: in an FFTW build (test_fft_fftw, -DOAR_FFTW=ON) a
 * transform of a new shape adds one FFTW plan to the cache, and the same
 * shape again adds none */
static void test_engine(void) {
    oar_pool *p = oar_pool_push();
    int64_t sh[2] = {3, 77};
    oar_tensor *x = oar_cast(oar_randn(OAR_F32, 2, sh), OAR_C64);
#ifdef OAR_FFTW
    CHECK(!strcmp(oari_fft_engine_name(), "fftw3"));
    long before = oari_fft_fftw_cache_blocks();
    CHECK(oar_fft_fft(x, -1, -1, NULL) != NULL);
    CHECK(oari_fft_fftw_cache_blocks() == before + 1);
    CHECK(oar_fft_fft(x, -1, -1, NULL) != NULL);
    CHECK(oari_fft_fftw_cache_blocks() == before + 1);
#else
    CHECK(!strcmp(oari_fft_engine_name(), "oar"));
    CHECK(oar_fft_fft(x, -1, -1, NULL) != NULL);
#endif
    oar_pool_pop(p);
}

int main(void) {
    RUN(test_engine);
    RUN(test_batched_slabs);
    RUN(test_numpy_values);
    RUN(test_numpy_values_narrow);
    RUN(test_freq);
    RUN(test_promotion);
    RUN(test_layouts_and_round_trips);
    RUN(test_eight_lines);
    RUN(test_gradients);
    RUN(test_threads);
    RUN(test_errors);
    return test_summary();
}

/* A Fourier Neural Operator (Li et al. 2020, 1-D) learning the solution
 * operator u0 -> u(t = 1) of the viscous Burgers equation
 *
 *     u_t + u u_x = nu u_xx,   x in [0, 2 pi) periodic,   nu = 0.1,
 *
 * on data made by a pseudo-spectral solver written with oar itself
 * (oar_fft_rfft/irfft): integrating-factor RK4 in Fourier space on 256
 * points, the 2/3 rule for the nonlinear term, dt = 1/200, float64. The
 * initial conditions are draws of a Gaussian random field (Fourier modes
 * 1..16 with standard deviation 0.6 (1 + (m/3)^2)^-1.5, 0.2 for the mean)
 * from a fixed seed, so the data are code, not files.
 *
 * The FNO works on the solution sampled on 128 points: input channels
 * (u0(x), x) lifted to width 32, four Fourier layers (rfft -> the lowest 16
 * modes times complex weights [modes, in, out] -> irfft, plus a pointwise
 * linear map, GELU between layers), projection 32 -> 128 -> 1. Trained with
 * Adam on the mean relative L2 error; the figure printed is the mean
 * relative L2 error ||pred - u(1)|| / ||u(1)|| over the test set.
 *
 *     ./build/fno            # train and test
 *     ./build/fno --check    # only the solver's self-check
 *
 * Environment: OAR_EXAMPLE_EPOCHS (default 60), OAR_EXAMPLE_TRAIN (512
 * training samples), OAR_EXAMPLE_TEST (128). The self-check verifies that
 * the solver keeps the mean of u, that the energy of u - mean decays, that
 * twice the points with a quarter of the step agree to 1e-6, and that at
 * tiny amplitude each mode follows the linearised equation's closed
 * form exp(-(nu k^2 + i k c) t) (c: the mean). */
#include <oar/oar.h>
#include <oar/complex.h>
#include <oar/fft.h>
#include <oar/optim.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NU 0.1
#define T_END 1.0
#define STEPS 200   /* dt = 1/200 */
#define N_SOLVE 256 /* solver grid */
#define N_FNO 128   /* grid the FNO sees (every second solver point) */
#define MODES_IC 16 /* Fourier modes in the initial conditions */
#define WIDTH 32
#define MODES 16
#define LAYERS 4
#define HIDDEN 128

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int fail(const char *what) {
    fprintf(stderr, "fno: %s: %s\n", what, oar_last_error());
    return 1;
}

static int env_int(const char *name, int def) {
    const char *s = getenv(name);
    int v = s ? atoi(s) : def;
    return v > 0 ? v : def;
}

/* ---- the solver ------------------------------------------------------------ */

/* dt * (nonlinear term) in Fourier space: -dt/2 ik FFT((IFFT v)^2), high
 * modes cut by the 2/3 rule (g holds -dt/2 ik mask). */
static oar_tensor *nonlinear(oar_tensor *v, oar_tensor *g, int64_t n) {
    oar_tensor *u = oar_fft_irfft(v, n, -1, NULL);
    return oar_mul(g, oar_fft_rfft(oar_mul(u, u), -1, -1, NULL));
}

/* u(T_END) for u0 (float64 [B, n], n even) by integrating-factor RK4
 * (Trefethen's scheme: v_t = L v + N(v), E = exp(L dt/2)). A new tensor
 * owned by the caller (or the open pool), NULL on error. */
static oar_tensor *burgers_solve(oar_tensor *u0, int64_t n, int steps) {
    int64_t nk = n / 2 + 1;
    double dt = T_END / steps;
    double *e = malloc(sizeof(double) * (size_t)nk), *gi = malloc(sizeof(double) * (size_t)nk);
    double *zero = calloc((size_t)nk, sizeof(double));
    if (!e || !gi || !zero) {
        free(e), free(gi), free(zero);
        return NULL;
    }
    for (int64_t k = 0; k < nk; k++) {
        e[k] = exp(-NU * (double)(k * k) * dt / 2);
        gi[k] = 3 * k < n ? -0.5 * dt * (double)k : 0.0; /* 2/3 rule */
    }
    oar_pool *outer = oar_pool_push();
    oar_tensor *E = oar_complex(oar_tensor_from_data(e, OAR_F64, 1, &nk),
                                oar_tensor_from_data(zero, OAR_F64, 1, &nk));
    oar_tensor *G = oar_complex(oar_tensor_from_data(zero, OAR_F64, 1, &nk),
                                oar_tensor_from_data(gi, OAR_F64, 1, &nk));
    oar_tensor *E2 = oar_mul(E, E);
    free(e), free(gi), free(zero);
    oar_tensor *v = oar_tensor_retain(oar_fft_rfft(u0, -1, -1, NULL));
    for (int s = 0; s < steps && v; s++) {
        oar_pool *p = oar_pool_push();
        oar_tensor *a = nonlinear(v, G, n);
        oar_tensor *b = nonlinear(oar_mul(E, oar_add(v, oar_mul_scalar(a, 0.5))), G, n);
        oar_tensor *c = nonlinear(oar_add(oar_mul(E, v), oar_mul_scalar(b, 0.5)), G, n);
        oar_tensor *d = nonlinear(oar_add(oar_mul(E2, v), oar_mul(E, c)), G, n);
        oar_tensor *inc =
            oar_add(oar_add(oar_mul(E2, a), oar_mul_scalar(oar_mul(E, oar_add(b, c)), 2)), d);
        oar_tensor *next = oar_tensor_retain(oar_add(oar_mul(E2, v), oar_div_scalar(inc, 6)));
        oar_pool_pop(p);
        oar_tensor_release(v);
        v = next;
    }
    oar_tensor *u = v ? oar_tensor_retain(oar_fft_irfft(v, n, -1, NULL)) : NULL;
    oar_tensor_release(v);
    oar_pool_pop(outer);
    return u;
}

/* Initial conditions: b draws of the random field on n points, float64. */
static oar_tensor *random_field(int64_t b, int64_t n) {
    int64_t nb = 2 * MODES_IC + 1, sh[2] = {nb, n};
    double *basis = malloc(sizeof(double) * (size_t)(nb * n));
    if (!basis) return NULL;
    for (int64_t j = 0; j < n; j++) {
        double x = 2 * M_PI * (double)j / (double)n;
        basis[j] = 0.2; /* the mean mode */
        for (int m = 1; m <= MODES_IC; m++) {
            double sd = 0.6 * pow(1 + (m / 3.0) * (m / 3.0), -1.5);
            basis[(2 * m - 1) * n + j] = sd * cos(m * x);
            basis[(2 * m) * n + j] = sd * sin(m * x);
        }
    }
    oar_tensor *B = oar_tensor_from_data(basis, OAR_F64, 2, sh);
    free(basis);
    int64_t cs[2] = {b, nb};
    return oar_matmul(oar_randn(OAR_F64, 2, cs), B);
}

/* The solver's self-check; 0 when every check holds. */
static int solver_check(void) {
    int bad = 0;
    oar_pool *p = oar_pool_push();
    int64_t n = N_SOLVE, nk = n / 2 + 1;
    /* 1. Mean and energy on random fields. */
    oar_manual_seed(7);
    oar_tensor *u0 = random_field(8, n);
    oar_tensor *u1 = burgers_solve(u0, n, STEPS);
    if (!u1) {
        oar_pool_pop(p);
        return fail("solving");
    }
    int64_t d1 = 1;
    oar_tensor *m0 = oar_mean(u0, 1, &d1, true), *m1 = oar_mean(u1, 1, &d1, true);
    double dmean = oar_tensor_item(oar_amax(oar_abs(oar_sub(m0, m1)), 0, NULL, false));
    oar_tensor *e0 = oar_sum(oar_pow_scalar(oar_sub(u0, m0), 2), 1, &d1, false);
    oar_tensor *e1 = oar_sum(oar_pow_scalar(oar_sub(u1, m1), 2), 1, &d1, false);
    double ratio = oar_tensor_item(oar_amax(oar_div(e1, e0), 0, NULL, false));
    printf("solver: largest change of the mean %.2e; largest energy ratio E(1)/E(0) %.4f\n", dmean,
           ratio);
    if (!(dmean < 1e-12)) bad = 1;
    if (!(ratio < 1)) bad = 1;
    /* Resolution: the same fields on twice the points with a quarter of the
     * step, compared on the solver grid (the nonlinear regime). */
    oar_tensor *u0f = oar_fft_irfft(oar_fft_rfft(u0, -1, -1, NULL), 2 * n, -1, NULL);
    oar_tensor *u1f = u0f ? burgers_solve(oar_mul_scalar(u0f, 2.0), 2 * n, 4 * STEPS) : NULL;
    if (!u1f) {
        oar_tensor_release(u1);
        oar_pool_pop(p);
        return fail("solving on the fine grid");
    }
    double dref = oar_tensor_item(
        oar_amax(oar_abs(oar_sub(oar_slice(u1f, 1, 0, 2 * n, 2), u1)), 0, NULL, false));
    double umax = oar_tensor_item(oar_amax(oar_abs(u1), 0, NULL, false));
    oar_tensor_release(u1f);
    printf("solver: against %d points and dt/4, largest difference %.2e (max |u| %.2f)\n",
           (int)(2 * n), dref, umax);
    if (!(dref < 1e-6 * umax)) bad = 1;
    /* 2. Tiny amplitude: u = c + eps sum_k cos(k x + k) per mode follows
     * exp(-(nu k^2 + i k c) t). */
    double c = 0.3, eps = 1e-7, worst = 0;
    double *x = malloc(sizeof(double) * (size_t)n);
    if (!x) return 1;
    const int ks[] = {1, 2, 3, 5, 8, 13, 21, 34};
    for (int64_t j = 0; j < n; j++) {
        x[j] = c;
        for (int q = 0; q < 8; q++)
            x[j] += eps * cos(ks[q] * (2 * M_PI * (double)j / (double)n + 1));
    }
    int64_t sh[2] = {1, n};
    oar_tensor *w0 = oar_tensor_from_data(x, OAR_F64, 2, sh);
    free(x);
    oar_tensor *w1 = burgers_solve(w0, n, STEPS);
    oar_tensor *W0 = oar_fft_rfft(w0, -1, -1, NULL), *W1 = oar_fft_rfft(w1, -1, -1, NULL);
    oar_tensor *r0 = oar_contiguous(oar_view_as_real(W0)),
               *r1 = oar_contiguous(oar_view_as_real(W1));
    if (!r1 || !r0) {
        oar_pool_pop(p);
        return fail("transforming");
    }
    const double *a0 = oar_tensor_data(r0), *a1 = oar_tensor_data(r1);
    for (int q = 0; q < 8; q++) {
        int k = ks[q];
        double decay = exp(-NU * k * k * T_END), ph = -k * c * T_END;
        double er = decay * (a0[2 * k] * cos(ph) - a0[2 * k + 1] * sin(ph));
        double ei = decay * (a0[2 * k] * sin(ph) + a0[2 * k + 1] * cos(ph));
        double err = hypot(a1[2 * k] - er, a1[2 * k + 1] - ei) / hypot(a0[2 * k], a0[2 * k + 1]);
        if (err > worst) worst = err;
    }
    double mean_err = fabs(a1[0] - a0[0]) / fabs(a0[0]);
    (void)nk;
    printf("solver: tiny amplitude, modes 1..34 against exp(-(nu k^2 + i k c) t): largest error "
           "%.2e (relative to the initial mode); mean mode error %.2e\n",
           worst, mean_err);
    if (!(worst < 1e-6) || !(mean_err < 1e-12)) bad = 1;
    oar_tensor_release(u1), oar_tensor_release(w1);
    oar_pool_pop(p);
    printf(bad ? "solver check FAILED\n" : "solver check passed\n");
    return bad;
}

/* ---- the FNO ----------------------------------------------------------------- */

typedef struct fno {
    oar_tensor *lift_w, *lift_b;             /* [W, 2], [W, 1] */
    oar_tensor *wr[LAYERS], *wi[LAYERS];     /* [MODES, W, W] */
    oar_tensor *pw_w[LAYERS], *pw_b[LAYERS]; /* [W, W], [W, 1] */
    oar_tensor *p1_w, *p1_b, *p2_w, *p2_b;   /* [H, W], [H, 1], [1, H], [1, 1] */
} fno;

#define NPARAMS (4 + 4 * LAYERS + 4)

static oar_tensor *param(int ndim, const int64_t *shape, double scale, oar_tensor **list, int *np) {
    oar_pool *p = oar_pool_push();
    oar_tensor *t =
        oar_add_scalar(oar_mul_scalar(oar_rand(OAR_F32, ndim, shape), 2 * scale), -scale);
    t = oar_tensor_retain(t); /* outlives the pool: the caller releases it */
    oar_pool_pop(p);
    if (t) oar_tensor_set_requires_grad(t, true);
    list[(*np)++] = t;
    return t;
}

/* Parameters: uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)) as nn.Linear, the
 * spectral weights scale / (in * out) uniform in [0, 1) as Li et al. Owned
 * by the caller (no pool open). */
static int fno_init(fno *f, oar_tensor **list) {
    int np = 0;
    double sw = 1 / sqrt(WIDTH), s2 = 1 / sqrt(2.0), sh = 1 / sqrt(HIDDEN);
    f->lift_w = param(2, (int64_t[]){WIDTH, 2}, s2, list, &np);
    f->lift_b = param(2, (int64_t[]){WIDTH, 1}, s2, list, &np);
    for (int l = 0; l < LAYERS; l++) {
        double sc = 1.0 / (WIDTH * WIDTH);
        int64_t s[3] = {MODES, WIDTH, WIDTH};
        f->wr[l] = param(3, s, sc, list, &np);
        f->wi[l] = param(3, s, sc, list, &np);
        f->pw_w[l] = param(2, (int64_t[]){WIDTH, WIDTH}, sw, list, &np);
        f->pw_b[l] = param(2, (int64_t[]){WIDTH, 1}, sw, list, &np);
    }
    f->p1_w = param(2, (int64_t[]){HIDDEN, WIDTH}, sw, list, &np);
    f->p1_b = param(2, (int64_t[]){HIDDEN, 1}, sw, list, &np);
    f->p2_w = param(2, (int64_t[]){1, HIDDEN}, sh, list, &np);
    f->p2_b = param(2, (int64_t[]){1, 1}, sh, list, &np);
    for (int i = 0; i < np; i++)
        if (!list[i]) return -1;
    return np;
}

/* Spectral convolution of h [B, W, N]: rfft, the lowest MODES modes times
 * the complex weights (contracted over input channels), zero above, irfft. */
static oar_tensor *spectral(oar_tensor *h, oar_tensor *wr, oar_tensor *wi) {
    int64_t n = oar_tensor_dim(h, -1);
    oar_tensor *X = oar_slice(oar_fft_rfft(h, -1, -1, NULL), 2, 0, MODES, 1);
    oar_tensor *xr = oar_real(X), *xi = oar_imag(X);
    const char *eq = "bim,mio->bom";
    oar_tensor *yr = oar_sub(oar_einsum(eq, 2, (oar_tensor *[]){xr, wr}),
                             oar_einsum(eq, 2, (oar_tensor *[]){xi, wi}));
    oar_tensor *yi = oar_add(oar_einsum(eq, 2, (oar_tensor *[]){xr, wi}),
                             oar_einsum(eq, 2, (oar_tensor *[]){xi, wr}));
    int64_t pads[2] = {0, n / 2 + 1 - MODES};
    oar_tensor *Y = oar_complex(oar_pad(yr, 2, pads, OAR_PAD_CONSTANT, 0),
                                oar_pad(yi, 2, pads, OAR_PAD_CONSTANT, 0));
    return oar_fft_irfft(Y, n, -1, NULL);
}

/* Pointwise linear map over channels: w [O, I] @ h [B, I, N] + b [O, 1]. */
static oar_tensor *pointwise(oar_tensor *h, oar_tensor *w, oar_tensor *b) {
    return oar_add(oar_matmul(w, h), b);
}

/* u0 [B, N] float32 -> predicted u(1) [B, N]. */
static oar_tensor *fno_forward(const fno *f, oar_tensor *u0, oar_tensor *grid) {
    int64_t b = oar_tensor_dim(u0, 0), n = oar_tensor_dim(u0, 1);
    oar_tensor *g = oar_add(oar_zeros(OAR_F32, 3, (int64_t[]){b, 1, n}), grid);
    oar_tensor *in =
        oar_concat(2, (oar_tensor *[]){oar_reshape(u0, 3, (int64_t[]){b, 1, n}), g}, 1);
    oar_tensor *h = pointwise(in, f->lift_w, f->lift_b);
    for (int l = 0; l < LAYERS; l++) {
        h = oar_add(spectral(h, f->wr[l], f->wi[l]), pointwise(h, f->pw_w[l], f->pw_b[l]));
        if (l < LAYERS - 1) h = oar_gelu(h, false);
    }
    h = oar_gelu(pointwise(h, f->p1_w, f->p1_b), false);
    return oar_reshape(pointwise(h, f->p2_w, f->p2_b), 2, (int64_t[]){b, n});
}

/* Per-sample relative L2 error ||p - y|| / ||y|| [B]. */
static oar_tensor *rel_l2(oar_tensor *p, oar_tensor *y) {
    int64_t d1 = 1;
    oar_tensor *num = oar_sqrt(oar_sum(oar_pow_scalar(oar_sub(p, y), 2), 1, &d1, false));
    return oar_div(num, oar_sqrt(oar_sum(oar_pow_scalar(y, 2), 1, &d1, false)));
}

/* Mean relative L2 error of the model on (x, y), or -1 on error. */
static double evaluate(const fno *f, oar_tensor *x, oar_tensor *y, oar_tensor *grid) {
    oar_no_grad_push();
    oar_pool *p = oar_pool_push();
    double e = oar_tensor_item(oar_mean(rel_l2(fno_forward(f, x, grid), y), 0, NULL, false));
    oar_pool_pop(p);
    oar_no_grad_pop();
    return e == e ? e : -1;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc > 1 && !strcmp(argv[1], "--check")) return solver_check();
    int epochs = env_int("OAR_EXAMPLE_EPOCHS", 60);
    int ntrain = env_int("OAR_EXAMPLE_TRAIN", 512), ntest = env_int("OAR_EXAMPLE_TEST", 128);
    const int batch = 16;
    double t_start = now();
    oar_pool *top = oar_pool_push(); /* owns the data tensors */

    /* Data: fixed-seed random fields, solved to t = 1, sampled on N_FNO. */
    oar_manual_seed(2020);
    oar_tensor *u0 = random_field(ntrain + ntest, N_SOLVE);
    oar_tensor *u1 = u0 ? burgers_solve(u0, N_SOLVE, STEPS) : NULL;
    if (!u1) return fail("generating the data");
    oar_tensor *x_all =
        oar_contiguous(oar_cast(oar_slice(u0, 1, 0, N_SOLVE, N_SOLVE / N_FNO), OAR_F32));
    oar_tensor *y_all =
        oar_contiguous(oar_cast(oar_slice(u1, 1, 0, N_SOLVE, N_SOLVE / N_FNO), OAR_F32));
    oar_tensor *xtr = oar_slice(x_all, 0, 0, ntrain, 1), *ytr = oar_slice(y_all, 0, 0, ntrain, 1);
    oar_tensor *xte = oar_slice(x_all, 0, ntrain, ntrain + ntest, 1);
    oar_tensor *yte = oar_slice(y_all, 0, ntrain, ntrain + ntest, 1);
    oar_tensor *grid = oar_linspace(0, 2 * M_PI * (N_FNO - 1) / N_FNO, N_FNO, OAR_F32);
    if (!xtr || !ytr || !xte || !yte || !grid) return fail("preparing the data");
    printf("oar fno: Burgers nu %.2f, %d train / %d test samples solved on %d points in %.1f s\n",
           NU, ntrain, ntest, N_SOLVE, now() - t_start);

    oar_manual_seed(0);
    fno f;
    oar_tensor *params[NPARAMS];
    int np = fno_init(&f, params);
    if (np < 0) return fail("building the model");
    int64_t nel = 0;
    for (int i = 0; i < np; i++)
        nel += oar_tensor_numel(params[i]);
    int steps_per_epoch = (ntrain + batch - 1) / batch;
    oar_optimizer *opt =
        oar_adam_new(np, params, &(oar_adam_options){.lr = 3e-3, .weight_decay = 1e-4});
    oar_lr_scheduler *sched =
        opt ? oar_lr_cosine_new(opt, (int64_t)epochs * steps_per_epoch, 0) : NULL;
    if (!sched) return fail("setting up training");
    double err0 = evaluate(&f, xte, yte, grid);
    printf("%lld parameters, width %d, %d Fourier layers of %d modes, %d epochs of batch %d\n",
           (long long)nel, WIDTH, LAYERS, MODES, epochs, batch);
    printf("untrained: test relative L2 error %.4f\n", err0);

    int64_t *perm = malloc(sizeof(int64_t) * (size_t)ntrain);
    if (!perm) return 1;
    uint64_t rng = 12345;
    double err = err0, t_train = now();
    for (int epoch = 1; epoch <= epochs; epoch++) {
        for (int i = 0; i < ntrain; i++)
            perm[i] = i;
        for (int i = ntrain - 1; i > 0; i--) { /* Fisher-Yates with an LCG */
            rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
            int j = (int)((rng >> 33) % (uint64_t)(i + 1));
            int64_t t = perm[i];
            perm[i] = perm[j], perm[j] = t;
        }
        double loss_sum = 0;
        for (int s = 0; s < steps_per_epoch; s++) {
            int64_t lo = (int64_t)s * batch, cnt = ntrain - lo < batch ? ntrain - lo : batch;
            oar_pool *p = oar_pool_push();
            oar_tensor *idx = oar_tensor_from_data(perm + lo, OAR_I64, 1, &cnt);
            oar_tensor *xb = oar_index_select(xtr, 0, idx), *yb = oar_index_select(ytr, 0, idx);
            oar_tensor *loss = oar_mean(rel_l2(fno_forward(&f, xb, grid), yb), 0, NULL, false);
            if (!loss || oar_backward(loss, NULL) || oar_optim_step(opt) ||
                oar_lr_scheduler_step(sched)) {
                oar_pool_pop(p);
                return fail("training step");
            }
            oar_optim_zero_grad(opt);
            loss_sum += oar_tensor_item(loss);
            oar_pool_pop(p);
        }
        if (epoch % 5 == 0 || epoch == epochs) {
            err = evaluate(&f, xte, yte, grid);
            if (err < 0) return fail("evaluating");
            printf("epoch %d: train relative L2 %.4f, test relative L2 %.4f (%.1f s)\n", epoch,
                   loss_sum / steps_per_epoch, err, now() - t_train);
        }
    }
    printf("trained in %.1f s (total %.1f s)\n", now() - t_train, now() - t_start);
    if (err < err0) printf("test error decreased: %.4f -> %.4f\n", err0, err);
    printf("test relative L2 error: %.4f\n", err);
    free(perm);
    oar_lr_scheduler_free(sched);
    oar_optim_free(opt);
    for (int i = 0; i < np; i++)
        oar_tensor_release(params[i]);
    oar_tensor_release(u1);
    oar_pool_pop(top);
    return 0;
}

/* Gaussian-process regression that learns its kernel hyperparameters by
 * maximizing the exact marginal likelihood, in float64.
 *
 *     ./build/gp
 *
 * Data: N_TRAIN points x uniform in [-3, 3], y = f(x) + noise with
 * f(x) = sin(2x) + 0.4 cos(5x) and noise N(0, 0.2^2), drawn by splitmix64
 * from seed 2024 (Box-Muller for the noise); the test set is N_TEST evenly
 * spaced points of [-3, 3], scored against the noise-free f.
 *
 * Model: squared-exponential kernel k(a, b) = sf2 exp(-(a - b)^2 / (2 ell^2))
 * plus noise sn2 on the diagonal; theta = (log ell, log sf2, log sn2)
 * starts at (0, 0, 0). The negative log marginal likelihood
 *
 *     nll = 1/2 y^T K^-1 y + 1/2 log det K + N/2 log(2 pi)
 *
 * is computed from L = cholesky(K): z = L^-1 y (oar_linalg_solve),
 * y^T K^-1 y = |z|^2, log det K = 2 sum log diag L, so its gradient with
 * respect to theta flows through the Cholesky and solve backward rules.
 * Adam (lr 0.05) minimizes it. Before training, the gradient is checked
 * against a second path (solve(K, y) and slogdet(K)) and against central
 * differences; "gradient check passed" is printed when all agree.
 *
 * examples/ref/gp.py is the same program in PyTorch (same data, same
 * optimizer and steps). Environment: OAR_EXAMPLE_STEPS (Adam steps, 300).
 * Output ends with "nll: ", "test rmse: ". */
#include <oar/oar.h>
#include <oar/linalg.h>
#include <oar/optim.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum { N_TRAIN = 256, N_TEST = 401 };

static const double PI = 3.14159265358979323846;

static int fail(const char *what) {
    fprintf(stderr, "gp: %s: %s\n", what, oar_last_error());
    return 1;
}

/* splitmix64: the same stream as the PyTorch twin draws. */
static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double uniform01(uint64_t *s) { return (double)(splitmix(s) >> 11) / 9007199254740992.0; }

static double truth(double x) { return sin(2 * x) + 0.4 * cos(5 * x); }

/* The training and test data (see the header). */
static void make_data(double *xtr, double *ytr, double *xte, double *fte) {
    uint64_t rng = 2024;
    for (int i = 0; i < N_TRAIN; i++) {
        xtr[i] = -3 + 6 * uniform01(&rng);
        double u1 = uniform01(&rng), u2 = uniform01(&rng);
        double noise = sqrt(-2 * log(1 - u1)) * cos(2 * PI * u2);
        ytr[i] = truth(xtr[i]) + 0.2 * noise;
    }
    for (int i = 0; i < N_TEST; i++) {
        xte[i] = -3 + 6 * (double)i / (N_TEST - 1);
        fte[i] = truth(xte[i]);
    }
}

/* (a_i - b_j)^2 as an [na, nb] constant. */
static oar_tensor *sqdist(oar_tensor *a, oar_tensor *b) {
    int64_t col[2] = {-1, 1}, row[2] = {1, -1};
    return oar_square(oar_sub(oar_reshape(a, 2, col), oar_reshape(b, 2, row)));
}

/* One entry of theta as a [1] tensor (broadcasts against matrices). */
static oar_tensor *th(oar_tensor *theta, int i) { return oar_slice(theta, 0, i, i + 1, 1); }

/* sf2 exp(-d2 / (2 ell^2)) for squared distances d2. */
static oar_tensor *kernel(oar_tensor *theta, oar_tensor *d2) {
    oar_tensor *inv_ell2 = oar_exp(oar_mul_scalar(th(theta, 0), -2.0));
    return oar_mul(oar_exp(th(theta, 1)), oar_exp(oar_mul(oar_mul_scalar(d2, -0.5), inv_ell2)));
}

/* K = kernel + sn2 I over the training points. */
static oar_tensor *train_cov(oar_tensor *theta, oar_tensor *d2, oar_tensor *eye) {
    return oar_add(kernel(theta, d2), oar_mul(oar_exp(th(theta, 2)), eye));
}

/* The negative log marginal likelihood through the Cholesky factor. */
static oar_tensor *nll_cholesky(oar_tensor *theta, oar_tensor *d2, oar_tensor *eye, oar_tensor *y) {
    oar_tensor *L = oar_linalg_cholesky(train_cov(theta, d2, eye), false);
    oar_tensor *z = oar_linalg_solve(L, y);
    oar_tensor *quad = oar_sum(oar_square(z), 0, NULL, false);
    oar_tensor *half_logdet = oar_sum(oar_log(oar_diagonal(L, 0, 0, 1)), 0, NULL, false);
    return oar_add_scalar(oar_add(oar_mul_scalar(quad, 0.5), half_logdet),
                          0.5 * N_TRAIN * log(2 * PI));
}

/* The same quantity through solve(K, y) and slogdet(K), for the check. */
static oar_tensor *nll_slogdet(oar_tensor *theta, oar_tensor *d2, oar_tensor *eye, oar_tensor *y) {
    oar_tensor *K = train_cov(theta, d2, eye), *logdet = NULL;
    if (oar_linalg_slogdet(K, NULL, &logdet)) return NULL;
    oar_tensor *quad = oar_dot(y, oar_linalg_solve(K, y));
    return oar_add_scalar(oar_mul_scalar(oar_add(quad, logdet), 0.5), 0.5 * N_TRAIN * log(2 * PI));
}

typedef oar_tensor *(*nll_fn)(oar_tensor *, oar_tensor *, oar_tensor *, oar_tensor *);

/* d nll / d theta at theta0 (3 values) by backward through f. */
static int grad_at(nll_fn f, const double *theta0, oar_tensor *d2, oar_tensor *eye, oar_tensor *y,
                   double *g) {
    int64_t three = 3;
    oar_tensor *theta = oar_tensor_from_data(theta0, OAR_F64, 1, &three);
    if (!theta || oar_tensor_set_requires_grad(theta, true)) return 1;
    oar_tensor *loss = f(theta, d2, eye, y);
    if (!loss || oar_backward(loss, NULL)) return 1;
    return oar_tensor_to_host(oar_tensor_grad(theta), g, 3 * sizeof *g);
}

/* The gradient of the Cholesky path against the slogdet/solve path and
 * against central differences of the nll, at a point away from the start. */
static int check_gradient(oar_tensor *d2, oar_tensor *eye, oar_tensor *y) {
    const double theta0[3] = {-0.3, 0.2, -1.5};
    double gc[3], gs[3], fd[3], worst_path = 0, worst_fd = 0;
    oar_pool *pool = oar_pool_push();
    if (grad_at(nll_cholesky, theta0, d2, eye, y, gc) ||
        grad_at(nll_slogdet, theta0, d2, eye, y, gs)) {
        oar_pool_pop(pool);
        return fail("gradient check");
    }
    oar_no_grad_push();
    for (int i = 0; i < 3; i++) {
        double h = 1e-5, tp[3] = {theta0[0], theta0[1], theta0[2]}, tm[3];
        tp[i] += h;
        for (int k = 0; k < 3; k++)
            tm[k] = tp[k];
        tm[i] -= 2 * h;
        int64_t three = 3;
        double fp =
            oar_tensor_item(nll_cholesky(oar_tensor_from_data(tp, OAR_F64, 1, &three), d2, eye, y));
        double fm =
            oar_tensor_item(nll_cholesky(oar_tensor_from_data(tm, OAR_F64, 1, &three), d2, eye, y));
        fd[i] = (fp - fm) / (2 * h);
        double scale = fabs(gc[i]) > 1 ? fabs(gc[i]) : 1;
        worst_path = fmax(worst_path, fabs(gc[i] - gs[i]) / scale);
        worst_fd = fmax(worst_fd, fabs(gc[i] - fd[i]) / scale);
    }
    oar_no_grad_pop();
    oar_pool_pop(pool);
    printf("gradient at theta (%.1f, %.1f, %.1f): cholesky (%.6f, %.6f, %.6f)\n", theta0[0],
           theta0[1], theta0[2], gc[0], gc[1], gc[2]);
    printf("  relative difference: to slogdet/solve %.2e, to central differences %.2e\n",
           worst_path, worst_fd);
    if (!(worst_path < 1e-9 && worst_fd < 1e-6)) {
        fprintf(stderr, "gp: the gradient paths disagree\n");
        return 1;
    }
    printf("gradient check passed\n");
    return 0;
}

int main(void) {
    const char *s = getenv("OAR_EXAMPLE_STEPS");
    int steps = s && *s ? atoi(s) : 300;
    if (steps < 1) {
        fprintf(stderr, "gp: OAR_EXAMPLE_STEPS must be positive\n");
        return 1;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);

    static double xtr[N_TRAIN], ytr[N_TRAIN], xte[N_TEST], fte[N_TEST], pred[N_TEST];
    make_data(xtr, ytr, xte, fte);
    oar_pool *data_pool = oar_pool_push();
    int64_t ntr = N_TRAIN, nte = N_TEST;
    oar_tensor *x = oar_tensor_from_data(xtr, OAR_F64, 1, &ntr);
    oar_tensor *y = oar_tensor_from_data(ytr, OAR_F64, 1, &ntr);
    oar_tensor *xs = oar_tensor_from_data(xte, OAR_F64, 1, &nte);
    oar_tensor *d2 = sqdist(x, x), *d2_test = sqdist(xs, x);
    oar_tensor *eye = oar_eye(N_TRAIN, -1, OAR_F64);
    if (!d2 || !d2_test || !eye) return fail("making the data");
    printf("oar gp: %d training points, %d test points, %d Adam steps\n", N_TRAIN, N_TEST, steps);
    if (check_gradient(d2, eye, y)) return 1;

    int64_t three = 3;
    /* log ell, log sf2, log sn2; owned by data_pool, like the data */
    oar_tensor *theta = oar_zeros(OAR_F64, 1, &three);
    oar_optimizer *opt = theta && !oar_tensor_set_requires_grad(theta, true)
                             ? oar_adam_new(1, &theta, &(oar_adam_options){.lr = 0.05})
                             : NULL;
    if (!opt) return fail("making the optimizer");
    double first = NAN, last = NAN;
    for (int step = 0; step < steps; step++) {
        oar_pool *pool = oar_pool_push();
        oar_tensor *loss = nll_cholesky(theta, d2, eye, y);
        if (!loss || oar_backward(loss, NULL) || oar_optim_step(opt)) {
            oar_pool_pop(pool);
            return fail("training step");
        }
        oar_optim_zero_grad(opt);
        last = oar_tensor_item(loss);
        if (step == 0) first = last;
        oar_pool_pop(pool);
        if (step % 50 == 0 || step == steps - 1)
            printf("step %d/%d nll %.6f\n", step + 1, steps, last);
    }

    /* the posterior mean at the test points: Ks K^-1 y with K^-1 y = L^-T L^-1 y */
    oar_no_grad_push();
    oar_pool *pool = oar_pool_push();
    oar_tensor *L = oar_linalg_cholesky(train_cov(theta, d2, eye), false);
    oar_tensor *alpha = oar_linalg_solve(oar_transpose(L, 0, 1), oar_linalg_solve(L, y));
    oar_tensor *mean = oar_matmul(kernel(theta, d2_test), alpha);
    oar_tensor *final = nll_cholesky(theta, d2, eye, y);
    double th_host[3];
    if (!mean || !final || oar_tensor_to_host(mean, pred, sizeof pred) ||
        oar_tensor_to_host(theta, th_host, sizeof th_host))
        return fail("predicting");
    double final_nll = oar_tensor_item(final), se = 0;
    oar_pool_pop(pool);
    oar_no_grad_pop();
    for (int i = 0; i < N_TEST; i++)
        se += (pred[i] - fte[i]) * (pred[i] - fte[i]);
    printf("learned: length scale %.6f, signal variance %.6f, noise variance %.6f "
           "(noise std %.6f; data made with 0.2)\n",
           exp(th_host[0]), exp(th_host[1]), exp(th_host[2]), exp(0.5 * th_host[2]));
    if (last < first) printf("nll decreased: first %.6f last %.6f\n", first, last);
    printf("nll: %.10f\n", final_nll);
    printf("test rmse: %.10f\n", sqrt(se / N_TEST));

    oar_optim_free(opt);
    oar_pool_pop(data_pool); /* the data, theta */
    return 0;
}

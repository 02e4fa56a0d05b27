/* One PINN training step (examples/pinn/pinn.c's model in float64): tanh
 * MLP 2-32-32-1 times the boundary factor x(1-x)y(1-y) at 1024 points,
 * u_x, u_y then u_xx, u_yy by oar_grad with create_graph, the mean squared
 * Poisson residual, backward to the weights, one Adam step. Time per step.
 * Peer: bench/peer/pinn.py (the same step with torch.autograd.grad).
 * "pinn_step" runs on one OpenMP thread (peer: torch.set_num_threads(1)),
 * "pinn_step_2t" on two. */
#include <oar/oar.h>

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <time.h>

#define HID 32
#define NCOL 1024
#define NPAR 6

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static oar_tensor *p[NPAR], *x, *y, *f;

static oar_tensor *param(int ndim, const int64_t *shape, double scale) {
    oar_tensor *r = oar_randn(OAR_F64, ndim, shape);
    oar_tensor *s = oar_mul_scalar(r, scale);
    oar_tensor *q = oar_clone(s);
    oar_tensor_release(r);
    oar_tensor_release(s);
    oar_tensor_set_requires_grad(q, true);
    return q;
}

static oar_tensor *loss_fn(void) {
    oar_tensor *h = oar_tanh(oar_add(oar_add(oar_matmul(x, p[0]), oar_matmul(y, p[1])), p[2]));
    h = oar_tanh(oar_add(oar_matmul(h, p[3]), p[4]));
    oar_tensor *bx = oar_mul(x, oar_add_scalar(oar_neg(x), 1.0));
    oar_tensor *by = oar_mul(y, oar_add_scalar(oar_neg(y), 1.0));
    oar_tensor *u = oar_mul(oar_mul(bx, by), oar_matmul(h, p[5]));
    oar_tensor *s = oar_sum(u, 0, NULL, false);
    oar_tensor *in[2] = {x, y}, *d1[2] = {NULL, NULL}, *dxx = NULL, *dyy = NULL;
    if (!s || oar_grad(1, &s, NULL, 2, in, true, false, d1)) return NULL;
    oar_tensor *sx = oar_sum(d1[0], 0, NULL, false), *sy = oar_sum(d1[1], 0, NULL, false);
    if (!sx || !sy || oar_grad(1, &sx, NULL, 1, &x, true, false, &dxx) ||
        oar_grad(1, &sy, NULL, 1, &y, true, false, &dyy))
        return NULL;
    return oar_mean(oar_square(oar_add(oar_add(dxx, dyy), f)), 0, NULL, false);
}

static int run(const char *name, oar_optimizer *opt, int warm, int steps) {
    double t0 = 0;
    for (int s = 0; s < warm + steps; s++) {
        if (s == warm) t0 = now();
        oar_optim_zero_grad(opt);
        oar_pool *pool = oar_pool_push();
        oar_tensor *loss = loss_fn();
        int bad = !loss || oar_backward(loss, NULL);
        oar_pool_pop(pool);
        if (bad || oar_optim_step(opt)) {
            fprintf(stderr, "step failed: %s\n", oar_last_error());
            return 1;
        }
    }
    printf("oar %s %.3f ms\n", name, (now() - t0) * 1e3 / steps);
    return 0;
}

int main(void) {
    oar_manual_seed(0);
    int64_t s1[2] = {1, HID}, sb[1] = {HID}, s2[2] = {HID, HID}, s3[2] = {HID, 1}, sc[2] = {NCOL, 1};
    p[0] = param(2, s1, sqrt(0.5)), p[1] = param(2, s1, sqrt(0.5)), p[2] = param(1, sb, 0.1);
    p[3] = param(2, s2, sqrt(1.0 / HID)), p[4] = param(1, sb, 0.1), p[5] = param(2, s3, sqrt(1.0 / HID));
    x = oar_rand(OAR_F64, 2, sc);
    y = oar_rand(OAR_F64, 2, sc);
    f = oar_randn(OAR_F64, 2, sc);
    oar_tensor_set_requires_grad(x, true);
    oar_tensor_set_requires_grad(y, true);
    oar_optimizer *opt = oar_adam_new(NPAR, p, &(oar_adam_options){.lr = 1e-3});
    int st = !opt;
    int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    if (!st) st = run("pinn_step", opt, 5, 50);
    omp_set_num_threads(threads < 2 ? 2 : threads);
    if (!st) st = run("pinn_step_2t", opt, 5, 50);
    oar_optim_free(opt);
    for (int i = 0; i < NPAR; i++) oar_tensor_release(p[i]);
    oar_tensor_release(x);
    oar_tensor_release(y);
    oar_tensor_release(f);
    return st;
}

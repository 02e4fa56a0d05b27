/* A physics-informed neural network (PINN): solves the 2-D Poisson problem
 *
 *     -(u_xx + u_yy) = f   on (0,1)^2,   u = 0 on the boundary,
 *     f = 2 pi^2 sin(pi x) sin(pi y),   exact u = sin(pi x) sin(pi y),
 *
 * by training u(x,y) = x(1-x) y(1-y) N(x,y) (the factor makes u vanish on
 * the boundary exactly) with N a tanh MLP 2-H-H-1 in float64. The loss is
 * the mean squared PDE residual at fixed random collocation points; the
 * second derivatives u_xx, u_yy of the network with respect to its inputs
 * come from oar_grad with create_graph (twice), and the loss is then
 * differentiated once more with respect to the weights. Adam first, then
 * L-BFGS (strong Wolfe) to polish. Prints the relative L2 error against the
 * exact solution on a 51 x 51 grid.
 *
 *     ./build/pinn     OAR_EXAMPLE_STEPS (Adam steps, 2000),
 *                      OAR_EXAMPLE_LBFGS (L-BFGS steps of 20 iterations, 25)
 *
 * Output: "adam step S loss L rel_l2 E", "lbfgs step S loss L rel_l2 E",
 * then "final rel_l2 E" and "loss decreased: first F last L" only when the
 * last loss is below the first. */
#include <oar/oar.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define HID 32
#define NCOL 1024 /* collocation points */
#define NGRID 51  /* test grid per side */
#define NPAR 6

static const double PI = 3.14159265358979323846;

typedef struct {
    oar_tensor *p[NPAR]; /* w1x [1,H], w1y [1,H], b1 [H], w2 [H,H], b2 [H], w3 [H,1] */
    oar_tensor *x, *y, *f; /* collocation points [N,1] (leaves requiring grad), source */
    oar_tensor *gx, *gy;   /* test grid [G,1] */
    double *gu;            /* exact solution on the grid */
    int64_t ng;
} pinn;

static int env_int(const char *name, int def) {
    const char *s = getenv(name);
    return s && *s ? atoi(s) : def;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* u(x, y) for x, y of shape [n,1]: the network times the boundary factor. */
static oar_tensor *model(pinn *m, oar_tensor *x, oar_tensor *y) {
    oar_tensor *h = oar_tanh(oar_add(oar_add(oar_matmul(x, m->p[0]), oar_matmul(y, m->p[1])), m->p[2]));
    h = oar_tanh(oar_add(oar_matmul(h, m->p[3]), m->p[4]));
    oar_tensor *n = oar_matmul(h, m->p[5]);
    oar_tensor *bx = oar_mul(x, oar_add_scalar(oar_neg(x), 1.0));
    oar_tensor *by = oar_mul(y, oar_add_scalar(oar_neg(y), 1.0));
    return oar_mul(oar_mul(bx, by), n);
}

/* Mean squared residual of u_xx + u_yy + f at the collocation points. */
static oar_tensor *pde_loss(pinn *m) {
    oar_tensor *u = model(m, m->x, m->y);
    oar_tensor *s = oar_sum(u, 0, NULL, false);
    oar_tensor *in[2] = {m->x, m->y}, *d1[2] = {NULL, NULL}, *dxx = NULL, *dyy = NULL;
    /* points are independent, so d(sum u)/dx is u_x at each point */
    if (!s || oar_grad(1, &s, NULL, 2, in, true, false, d1)) return NULL;
    oar_tensor *sx = oar_sum(d1[0], 0, NULL, false), *sy = oar_sum(d1[1], 0, NULL, false);
    if (!sx || !sy || oar_grad(1, &sx, NULL, 1, &m->x, true, false, &dxx) ||
        oar_grad(1, &sy, NULL, 1, &m->y, true, false, &dyy))
        return NULL;
    oar_tensor *r = oar_add(oar_add(dxx, dyy), m->f);
    return oar_mean(oar_square(r), 0, NULL, false);
}

/* Relative L2 error ||u - u*|| / ||u*|| on the test grid; NAN on failure. */
static double rel_l2(pinn *m) {
    oar_pool *pool = oar_pool_push();
    oar_no_grad_push();
    double e = NAN;
    oar_tensor *u = oar_contiguous(model(m, m->gx, m->gy));
    if (u) {
        const double *pu = oar_tensor_data(u);
        double num = 0, den = 0;
        for (int64_t i = 0; i < m->ng; i++) {
            double d = pu[i] - m->gu[i];
            num += d * d;
            den += m->gu[i] * m->gu[i];
        }
        e = sqrt(num / den);
    }
    oar_no_grad_pop();
    oar_pool_pop(pool);
    return e;
}

/* L-BFGS closure: sets every parameter's .grad to d loss / d p. */
static double closure(void *ctx) {
    pinn *m = ctx;
    for (int i = 0; i < NPAR; i++) oar_tensor_zero_grad(m->p[i]);
    oar_pool *pool = oar_pool_push();
    double v = NAN;
    oar_tensor *loss = pde_loss(m);
    if (loss && !oar_backward(loss, NULL)) v = oar_tensor_item(loss);
    oar_pool_pop(pool);
    return v;
}

static oar_tensor *column(const double *v, int64_t n) {
    int64_t shape[2] = {n, 1};
    return oar_tensor_from_data(v, OAR_F64, 2, shape);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* progress lines appear as they come */
    int adam_steps = env_int("OAR_EXAMPLE_STEPS", 2000);
    int lbfgs_steps = env_int("OAR_EXAMPLE_LBFGS", 25);
    oar_manual_seed(1234);
    pinn m = {0};
    int rc = 1;

    /* parameters: normal * sqrt(1 / fan_in) (fan_in 2 for the first layer) */
    int64_t s1[2] = {1, HID}, sb[1] = {HID}, s2[2] = {HID, HID}, s3[2] = {HID, 1};
    const int64_t *shp[NPAR] = {s1, s1, sb, s2, sb, s3};
    int nd[NPAR] = {2, 2, 1, 2, 1, 2};
    double scale[NPAR] = {sqrt(0.5), sqrt(0.5), 0.0, sqrt(1.0 / HID), 0.0, sqrt(1.0 / HID)};
    for (int i = 0; i < NPAR; i++) {
        m.p[i] = oar_randn(OAR_F64, nd[i], shp[i]);
        if (!m.p[i]) goto done;
        double *d = oar_tensor_data(m.p[i]);
        for (int64_t k = 0; k < oar_tensor_numel(m.p[i]); k++) d[k] *= scale[i];
        oar_tensor_set_requires_grad(m.p[i], true);
    }

    /* collocation points: uniform in (0,1)^2, drawn once */
    double *xs = malloc(sizeof(double) * NCOL * 3);
    m.ng = (int64_t)NGRID * NGRID;
    double *gs = malloc(sizeof(double) * (size_t)m.ng * 2);
    m.gu = malloc(sizeof(double) * (size_t)m.ng);
    if (!xs || !gs || !m.gu) {
        free(xs);
        free(gs);
        goto done;
    }
    uint64_t st = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < 2 * NCOL; i++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        xs[i] = ((double)(st >> 11) + 0.5) / 9007199254740992.0;
    }
    for (int i = 0; i < NCOL; i++)
        xs[2 * NCOL + i] = 2 * PI * PI * sin(PI * xs[i]) * sin(PI * xs[NCOL + i]);
    for (int i = 0; i < NGRID; i++)
        for (int j = 0; j < NGRID; j++) {
            double a = (double)i / (NGRID - 1), b = (double)j / (NGRID - 1);
            gs[i * NGRID + j] = a;
            gs[m.ng + i * NGRID + j] = b;
            m.gu[i * NGRID + j] = sin(PI * a) * sin(PI * b);
        }
    m.x = column(xs, NCOL);
    m.y = column(xs + NCOL, NCOL);
    m.f = column(xs + 2 * NCOL, NCOL);
    m.gx = column(gs, m.ng);
    m.gy = column(gs + m.ng, m.ng);
    free(xs);
    free(gs);
    if (!m.x || !m.y || !m.f || !m.gx || !m.gy) goto done;
    oar_tensor_set_requires_grad(m.x, true);
    oar_tensor_set_requires_grad(m.y, true);

    printf("pinn: -laplace u = 2 pi^2 sin(pi x) sin(pi y) on (0,1)^2, MLP 2-%d-%d-1 tanh, "
           "%d collocation points, %d adam steps, %d lbfgs steps\n",
           HID, HID, NCOL, adam_steps, lbfgs_steps);
    printf("initial rel_l2 %.4e\n", rel_l2(&m));
    double t0 = now(), first = NAN, last = NAN;

    oar_optimizer *adam = oar_adam_new(NPAR, m.p, &(oar_adam_options){.lr = 3e-3});
    oar_lr_scheduler *sched = adam ? oar_lr_cosine_new(adam, adam_steps, 1e-4) : NULL;
    if (!adam || !sched) goto fail;
    for (int step = 1; step <= adam_steps; step++) {
        oar_optim_zero_grad(adam);
        oar_pool *pool = oar_pool_push();
        oar_tensor *loss = pde_loss(&m);
        int bad = !loss || oar_backward(loss, NULL);
        double v = bad ? NAN : oar_tensor_item(loss);
        oar_pool_pop(pool);
        if (bad || oar_optim_step(adam) || oar_lr_scheduler_step(sched)) goto fail;
        if (step == 1) first = v;
        last = v;
        if (step % 200 == 0 || step == adam_steps || step == 1)
            printf("adam step %d loss %.4e rel_l2 %.4e (%.1f s)\n", step, v, rel_l2(&m), now() - t0);
    }
    oar_lr_scheduler_free(sched);
    oar_optim_free(adam);
    adam = NULL;

    oar_lbfgs *lb = oar_lbfgs_new(NPAR, m.p,
                                  &(oar_lbfgs_options){.max_iter = 20, .history_size = 50,
                                                       .strong_wolfe = true});
    if (!lb) goto fail;
    for (int step = 1; step <= lbfgs_steps; step++) {
        double v;
        if (oar_lbfgs_step(lb, closure, &m, &v)) {
            oar_lbfgs_free(lb);
            goto fail;
        }
        if (isnan(first)) first = v;
        last = v;
        printf("lbfgs step %d loss %.4e rel_l2 %.4e (%.1f s, %lld evals)\n", step, v, rel_l2(&m),
               now() - t0, (long long)oar_lbfgs_evals(lb));
    }
    oar_lbfgs_free(lb);
    if (lbfgs_steps > 0) last = closure(&m); /* loss after the last step */

    printf("final rel_l2 %.4e loss %.4e in %.1f s\n", rel_l2(&m), last, now() - t0);
    if (last < first) printf("loss decreased: first %.4e last %.4e\n", first, last);
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "pinn: %s\n", oar_last_error());
    if (adam) {
        oar_lr_scheduler_free(sched);
        oar_optim_free(adam);
    }
done:
    for (int i = 0; i < NPAR; i++) oar_tensor_release(m.p[i]);
    oar_tensor_release(m.x);
    oar_tensor_release(m.y);
    oar_tensor_release(m.f);
    oar_tensor_release(m.gx);
    oar_tensor_release(m.gy);
    free(m.gu);
    return rc;
}

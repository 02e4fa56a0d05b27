/* Hessian-vector product of a 3-layer tanh MLP (256-256-256-10, batch 256,
 * loss mean of squared outputs) with respect to its three weights: forward,
 * oar_grad with create_graph, then oar_grad of the gradients against v
 * (create_graph again), the way the peer (bench/peer/hvp.py) calls
 * torch.autograd.grad twice. Best of rounds, one OpenMP thread as the peer. */
#include <oar/oar.h>

#include <omp.h>
#include <stdio.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static oar_tensor *randn_scaled(int64_t r, int64_t c, double scale) {
    int64_t shape[2] = {r, c};
    oar_pool *p = oar_pool_push();
    oar_tensor *t = oar_tensor_retain(oar_clone(oar_mul_scalar(oar_randn(OAR_F32, 2, shape), scale)));
    oar_pool_pop(p);
    return t;
}

int main(void) {
    omp_set_num_threads(1);
    oar_manual_seed(0);
    oar_tensor *w[3] = {randn_scaled(256, 256, 0.06), randn_scaled(256, 256, 0.06),
                        randn_scaled(256, 10, 0.06)};
    oar_tensor *v[3] = {randn_scaled(256, 256, 1), randn_scaled(256, 256, 1),
                        randn_scaled(256, 10, 1)};
    oar_tensor *x = randn_scaled(256, 256, 1);
    for (int i = 0; i < 3; i++) oar_tensor_set_requires_grad(w[i], true);
    double best = 1e30;
    const int rounds = 5, n = 5;
    for (int r = 0; r <= rounds; r++) {
        double t0 = now();
        for (int k = 0; k < n; k++) {
            oar_pool *p = oar_pool_push();
            oar_tensor *h = oar_tanh(oar_matmul(x, w[0]));
            h = oar_tanh(oar_matmul(h, w[1]));
            oar_tensor *loss = oar_mean(oar_square(oar_matmul(h, w[2])), 0, NULL, false);
            oar_tensor *g[3], *hv[3];
            int st = loss ? oar_grad(1, &loss, NULL, 3, w, true, false, g) : -1;
            if (!st) st = oar_grad(3, g, v, 3, w, true, false, hv);
            if (st) {
                fprintf(stderr, "bench_hvp: %s\n", oar_last_error());
                return 1;
            }
            oar_pool_pop(p);
        }
        double ms = (now() - t0) * 1e3 / n;
        if (r > 0 && ms < best) best = ms;
    }
    printf("oar hvp_tanh_mlp %.3f ms\n", best);
    for (int i = 0; i < 3; i++) {
        oar_tensor_release(w[i]);
        oar_tensor_release(v[i]);
    }
    oar_tensor_release(x);
    return 0;
}

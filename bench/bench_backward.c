/* Backward pass alone: oar_backward of the MLP 784-512-512-10 (batch 128)
 * and of a LeNet-5-size CNN (batch 64: conv 6@5x5 pad 2, relu, max pool 2,
 * conv 16@5x5, relu, max pool 2, fc 400-120-84-10 with relu, cross
 * entropy). The forward runs untimed before each backward. Best of rounds
 * on one OpenMP thread, as the peer (bench/peer/backward.py) with
 * torch.set_num_threads(1). */
#include <oar/oar.h>

#include <omp.h>
#include <stdio.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static oar_tensor *param(int ndim, const int64_t *shape, double scale) {
    oar_tensor *w = oar_randn(OAR_F32, ndim, shape);
    oar_tensor *s = oar_mul_scalar(w, scale);
    oar_tensor *p = oar_clone(s);
    oar_tensor_release(w);
    oar_tensor_release(s);
    oar_tensor_set_requires_grad(p, true);
    return p;
}

enum { MLP_P = 6, CNN_P = 10 };
static oar_tensor *mp[MLP_P], *cp[CNN_P];

static oar_tensor *mlp_loss(oar_tensor *x, oar_tensor *y) {
    oar_tensor *h = x;
    for (int l = 0; l < 3; l++) {
        h = oar_add(oar_matmul(h, mp[2 * l]), mp[2 * l + 1]);
        if (l < 2) h = oar_relu(h);
    }
    return oar_cross_entropy(h, y, NULL, -100, 0.0, OAR_REDUCTION_MEAN);
}

static oar_tensor *cnn_loss(oar_tensor *x, oar_tensor *y) {
    const int64_t one[2] = {1, 1}, zero[2] = {0, 0}, two[2] = {2, 2}, pad2[2] = {2, 2};
    oar_tensor *h = oar_relu(oar_conv2d(x, cp[0], cp[1], one, pad2, one, 1));
    h = oar_max_pool2d(h, two, two, zero, one, false, NULL);
    h = oar_relu(oar_conv2d(h, cp[2], cp[3], one, zero, one, 1));
    h = oar_max_pool2d(h, two, two, zero, one, false, NULL);
    h = oar_flatten(h, 1, -1);
    for (int l = 0; l < 3; l++) {
        h = oar_add(oar_matmul(h, cp[4 + 2 * l]), cp[5 + 2 * l]);
        if (l < 2) h = oar_relu(h);
    }
    return oar_cross_entropy(h, y, NULL, -100, 0.0, OAR_REDUCTION_MEAN);
}

/* Best time of oar_backward over `rounds` rounds of `n` steps, in ms. */
static double time_backward(oar_tensor *(*loss_fn)(oar_tensor *, oar_tensor *), oar_tensor *x,
                            oar_tensor *y, oar_tensor **params, int np, int rounds, int n) {
    double best = 1e30;
    for (int r = 0; r <= rounds; r++) { /* round 0 warms up */
        double total = 0;
        for (int k = 0; k < n; k++) {
            oar_pool *p = oar_pool_push();
            oar_tensor *loss = loss_fn(x, y);
            double t0 = now();
            int st = loss ? oar_backward(loss, NULL) : -1;
            total += now() - t0;
            if (st) {
                fprintf(stderr, "bench_backward: %s\n", oar_last_error());
                return -1;
            }
            for (int i = 0; i < np; i++) oar_tensor_zero_grad(params[i]);
            oar_pool_pop(p);
        }
        if (r > 0 && total / n < best) best = total / n;
    }
    return best * 1e3;
}

int main(void) {
    omp_set_num_threads(1);
    oar_manual_seed(0);
    const int64_t ms[MLP_P][2] = {{784, 512}, {512}, {512, 512}, {512}, {512, 10}, {10}};
    for (int i = 0; i < MLP_P; i++) mp[i] = param(i % 2 ? 1 : 2, ms[i], 0.05);
    const int64_t cs[CNN_P][4] = {{6, 1, 5, 5}, {6}, {16, 6, 5, 5}, {16}, {400, 120},
                                  {120}, {120, 84}, {84}, {84, 10}, {10}};
    const int cnd[CNN_P] = {4, 1, 4, 1, 2, 1, 2, 1, 2, 1};
    for (int i = 0; i < CNN_P; i++) cp[i] = param(cnd[i], cs[i], 0.1);
    int64_t xs[2] = {128, 784}, ys[1] = {128}, cxs[4] = {64, 1, 28, 28}, cys[1] = {64};
    oar_tensor *x = oar_randn(OAR_F32, 2, xs), *y = oar_randint(0, 10, OAR_I64, 1, ys);
    oar_tensor *cx = oar_randn(OAR_F32, 4, cxs), *cy = oar_randint(0, 10, OAR_I64, 1, cys);
    double t_mlp = time_backward(mlp_loss, x, y, mp, MLP_P, 5, 10);
    double t_cnn = t_mlp < 0 ? -1 : time_backward(cnn_loss, cx, cy, cp, CNN_P, 5, 10);
    if (t_mlp < 0 || t_cnn < 0) return 1;
    printf("oar backward_mlp %.3f ms\n", t_mlp);
    printf("oar backward_lenet %.3f ms\n", t_cnn);
    for (int i = 0; i < MLP_P; i++) oar_tensor_release(mp[i]);
    for (int i = 0; i < CNN_P; i++) oar_tensor_release(cp[i]);
    oar_tensor_release(x);
    oar_tensor_release(y);
    oar_tensor_release(cx);
    oar_tensor_release(cy);
    return 0;
}

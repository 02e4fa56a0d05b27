/* A training step of the MLP 784-512-512-10 (batch 128, SGD) written with
 * plain ops and autograd: time per step, minor page faults per step
 * (getrusage; the block cache should keep them near zero once warm) and the
 * allocator's system allocations per step. Peer: bench/peer/mlp_step.py.
 * "mlp_step" runs on one OpenMP thread (oar's loops and OpenBLAS, which
 * share libgomp's pool), as the peer does with torch.set_num_threads(1);
 * "mlp_step_2t" on two threads, as the peer with set_num_threads(2).
 * The SGD update is oar_add_scaled_ (one pass), the peer's p.add_(g, alpha=). */
#include <oar/oar.h>

#include <omp.h>
#include <stdio.h>
#include <sys/resource.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static long minor_faults(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_minflt;
}

static oar_tensor *param(int64_t rows, int64_t cols) {
    int64_t shape[2] = {rows, cols};
    oar_tensor *w = oar_randn(OAR_F32, cols ? 2 : 1, cols ? shape : &rows);
    oar_tensor *s = oar_mul_scalar(w, 0.05);
    oar_tensor *p = oar_clone(s);
    oar_tensor_release(w);
    oar_tensor_release(s);
    oar_tensor_set_requires_grad(p, true);
    return p;
}

static oar_tensor *w[3], *b[3], *x, *y;

/* Times `steps` training steps after `warm` ones; prints the figures
 * under `name` (with the fault and allocation counts when `counts`). */
static int run(const char *name, int warm, int steps, bool counts) {
    double t0 = 0;
    long f0 = 0;
    oar_memory_stats m0, m1;
    for (int s = 0; s < warm + steps; s++) {
        if (s == warm) {
            t0 = now();
            f0 = minor_faults();
            oar_memory_stats_get(&m0);
        }
        oar_pool *p = oar_pool_push();
        oar_tensor *h = x;
        for (int l = 0; l < 3; l++) {
            h = oar_add(oar_matmul(h, w[l]), b[l]);
            if (l < 2) h = oar_relu(h);
        }
        oar_tensor *loss = oar_cross_entropy(h, y, NULL, -100, 0.0, OAR_REDUCTION_MEAN);
        if (!loss || oar_backward(loss, NULL)) {
            fprintf(stderr, "step failed: %s\n", oar_last_error());
            return 1;
        }
        oar_no_grad_push();
        for (int l = 0; l < 3; l++) {
            oar_tensor *ps[2] = {w[l], b[l]};
            for (int k = 0; k < 2; k++) {
                oar_add_scaled_(ps[k], oar_tensor_grad(ps[k]), -0.01);
                oar_tensor_zero_grad(ps[k]);
            }
        }
        oar_no_grad_pop();
        oar_pool_pop(p);
    }
    double ms = (now() - t0) * 1e3 / steps;
    long faults = minor_faults() - f0;
    oar_memory_stats_get(&m1);
    printf("oar %s %.3f ms\n", name, ms);
    if (counts) {
        printf("oar mlp_minor_faults_per_step %.2f faults\n", (double)faults / steps);
        printf("oar mlp_system_allocs_per_step %.2f allocs\n",
               (double)(m1.n_system_allocs - m0.n_system_allocs) / steps);
    }
    return 0;
}

int main(void) {
    oar_manual_seed(0);
    w[0] = param(784, 512), w[1] = param(512, 512), w[2] = param(512, 10);
    b[0] = param(512, 0), b[1] = param(512, 0), b[2] = param(10, 0);
    int64_t xs[2] = {128, 784}, ys[1] = {128};
    x = oar_randn(OAR_F32, 2, xs);
    y = oar_randint(0, 10, OAR_I64, 1, ys);
    int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    int st = run("mlp_step", 5, 50, true);
    omp_set_num_threads(threads < 2 ? 2 : threads);
    if (!st) st = run("mlp_step_2t", 5, 50, false);
    for (int l = 0; l < 3; l++) {
        oar_tensor_release(w[l]);
        oar_tensor_release(b[l]);
    }
    oar_tensor_release(x);
    oar_tensor_release(y);
    return st;
}

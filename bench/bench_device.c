/* The MLP 784-512-512-10 training step (batch 128, SGD) on every device
 * oar finds: the CPU and each plugin device (opencl:0 on PoCL here,
 * cuda:0 on a GPU machine; set OAR_PLUGIN_PATH to build/plugins). The
 * peer is oar's own CPU device: PoCL is a CPU too, so the OpenCL figure
 * measures the plugin's overhead, reported as is. Prints the step time per
 * device, its ratio to the CPU and how many op calls fell back to the CPU.
 * Usage: bench_device [steps] */
#include <oar/oar.h>

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ms per step on device d, or a negative value on failure. */
static double run(oar_device *d, int steps, int64_t *fallbacks) {
    oar_manual_seed(0);
    const int64_t dims[4] = {784, 512, 512, 10};
    oar_tensor *w[3], *b[3];
    for (int l = 0; l < 3; l++) {
        oar_tensor *wc = oar_mul_scalar(oar_randn(OAR_F32, 2, (int64_t[]){dims[l], dims[l + 1]}), 0.05);
        oar_tensor *bc = oar_zeros(OAR_F32, 1, (int64_t[]){dims[l + 1]});
        w[l] = oar_tensor_retain(oar_tensor_to(wc, d));
        b[l] = oar_tensor_retain(oar_tensor_to(bc, d));
        if (!w[l] || !b[l] || oar_tensor_set_requires_grad(w[l], true) || oar_tensor_set_requires_grad(b[l], true))
            return -1;
    }
    oar_tensor *x = oar_tensor_retain(oar_tensor_to(oar_randn(OAR_F32, 2, (int64_t[]){128, 784}), d));
    oar_tensor *y = oar_tensor_retain(oar_tensor_to(oar_randint(0, 10, OAR_I64, 1, (int64_t[]){128}), d));
    if (!x || !y) return -1;
    const int warm = 3;
    double t0 = 0;
    int64_t f0 = 0;
    for (int s = 0; s < warm + steps; s++) {
        if (s == warm) {
            oar_device_synchronize(d);
            t0 = now();
            f0 = oar_device_fallback_count();
        }
        oar_pool *p = oar_pool_push();
        oar_tensor *h = x;
        for (int l = 0; l < 3; l++) {
            h = oar_add(oar_matmul(h, w[l]), b[l]);
            if (l < 2) h = oar_relu(h);
        }
        oar_tensor *loss = oar_cross_entropy(h, y, NULL, -100, 0.0, OAR_REDUCTION_MEAN);
        if (!loss || oar_backward(loss, NULL)) return -1;
        oar_no_grad_push();
        for (int l = 0; l < 3; l++) {
            oar_tensor *ps[2] = {w[l], b[l]};
            for (int k = 0; k < 2; k++) {
                if (oar_copy_(ps[k], oar_sub(ps[k], oar_mul_scalar(oar_tensor_grad(ps[k]), 0.01))))
                    return -1;
                oar_tensor_zero_grad(ps[k]);
            }
        }
        oar_no_grad_pop();
        oar_pool_pop(p);
    }
    oar_device_synchronize(d);
    double ms = (now() - t0) * 1e3 / steps;
    *fallbacks = oar_device_fallback_count() - f0;
    for (int l = 0; l < 3; l++) {
        oar_tensor_release(w[l]);
        oar_tensor_release(b[l]);
    }
    oar_tensor_release(x);
    oar_tensor_release(y);
    return ms;
}

int main(int argc, char **argv) {
    int steps = argc > 1 ? atoi(argv[1]) : 20;
    if (steps < 1) steps = 1;
    oar_device *cpu = oar_device_get("cpu");
    int64_t fb = 0;
    double cpu_ms = run(cpu, steps, &fb);
    if (cpu_ms < 0) return fprintf(stderr, "cpu: %s\n", oar_last_error()), 1;
    printf("oar mlp_step_cpu %.3f ms\n", cpu_ms);
    int n = oar_device_count();
    for (int i = 0; i < n; i++) {
        oar_device *d = oar_device_at(i);
        if (d == cpu) continue;
        char name[64];
        snprintf(name, sizeof name, "%s", oar_device_name(d));
        double ms = run(d, steps, &fb);
        if (ms < 0) {
            printf("# %s: failed: %s\n", name, oar_last_error());
            continue;
        }
        for (char *c = name; *c; c++)
            if (*c == ':') *c = '_';
        printf("oar mlp_step_%s %.3f ms\n", name, ms);
        printf("# %s: %.2fx the CPU device's step time, %lld op calls fell back to the CPU per %d steps\n",
               oar_device_name(d), ms / cpu_ms, (long long)fb, steps);
    }
    return 0;
}

/* Per-op dispatch overhead: oar_add on 1-element f32 tensors, the cost of
 * everything around a kernel (shape rule, allocation, lookup, pool).
 * Prints "oar dispatch_add_1elem <ns per op> ns". The peer figure comes
 * from bench/peer/dispatch.py (torch.add on 1-element tensors). */
#include <oar/oar.h>

#include <stdio.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(void) {
    int64_t one = 1;
    float v = 1.0f;
    oar_tensor *a = oar_tensor_from_data(&v, OAR_F32, 1, &one);
    oar_tensor *b = oar_tensor_from_data(&v, OAR_F32, 1, &one);
    const int inner = 1000, outer = 2000;
    double best = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = now();
        for (int o = 0; o < outer; o++) {
            oar_pool *p = oar_pool_push();
            for (int i = 0; i < inner; i++) oar_add(a, b);
            oar_pool_pop(p);
        }
        double ns = (now() - t0) * 1e9 / ((double)inner * outer);
        if (ns < best) best = ns;
    }
    printf("oar dispatch_add_1elem %.1f ns\n", best);
    oar_tensor_release(a);
    oar_tensor_release(b);
    return 0;
}

/* oar_scaled_dot_product_attention on opencl:0 (PoCL here): with is_causal
 * the mask is made on q's device, so q, k, v on the device give the CPU's
 * result there, and the gradients of CPU leaves moved to the device equal
 * the all-CPU graph's (backward through the moves). Each op runs on the
 * device's kernel or, where it has none, on the CPU with copies; either
 * way the call must not fail. A mask with is_causal still fails. Skipped
 * (exit 77) where no OpenCL device exists. */
#include "test.h"
#include "graph/graph_test_util.h" /* max_diff */

#include "opencl_common.h"

static oar_device *cl;

/* A deterministic f32 tensor with values in [-1, 1], requiring grad. */
static oar_tensor *leaf(int ndim, const int64_t *shape, int seed) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= shape[d];
    float *v = malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++)
        v[i] = (float)(((i * 37 + seed * 11) % 23) / 11.0 - 1.0);
    oar_tensor *t = oar_tensor_from_data(v, OAR_F32, ndim, shape);
    free(v);
    CHECK(t && oar_tensor_set_requires_grad(t, true) == 0);
    return t;
}

/* sum(sdpa(q, k, v, causal) * w) for fixed weights w, computed on `on`
 * (the leaves moved there), back on the CPU; *out: the attention output on
 * the CPU. */
static oar_tensor *loss(oar_tensor *const *x, oar_device *on, oar_tensor **out) {
    oar_tensor *q = oar_tensor_to(x[0], on), *k = oar_tensor_to(x[1], on),
               *v = oar_tensor_to(x[2], on);
    oar_tensor *a = oar_scaled_dot_product_attention(q, k, v, NULL, 0, true, 0);
    if (!a) return NULL;
    CHECK(oar_tensor_device(a) == on);
    oar_tensor *w =
        oar_tensor_to(oar_cos(oar_reshape(oar_arange(0, (double)oar_tensor_numel(a), 1, OAR_F32),
                                          oar_tensor_ndim(a), oar_tensor_shape(a))),
                      on);
    *out = oar_tensor_to(a, oar_device_cpu());
    return oar_tensor_to(oar_sum(oar_mul(a, w), 0, NULL, false), oar_device_cpu());
}

/* q [.., L, E], k [.., S, E], v [.., S, Ev]: the device's output and the
 * leaves' gradients equal the CPU's. */
static void check_causal(const char *what, int ndim, const int64_t *sq, const int64_t *sk,
                         const int64_t *sv) {
    oar_pool *pool = oar_pool_push();
    oar_tensor *x[3] = {leaf(ndim, sq, 1), leaf(ndim, sk, 2), leaf(ndim, sv, 3)};
    oar_tensor *cpu_out = NULL, *dev_out = NULL;
    oar_tensor *cpu_loss = loss(x, oar_device_cpu(), &cpu_out);
    CHECK(cpu_loss && oar_backward(cpu_loss, NULL) == 0);
    oar_tensor *want[3];
    for (int i = 0; i < 3; i++) {
        want[i] = oar_clone(oar_tensor_grad(x[i]));
        CHECK(oar_tensor_zero_grad(x[i]) == 0);
    }
    oar_device_fallback_reset();
    oar_tensor *dev_loss = loss(x, cl, &dev_out);
    if (!dev_loss) fprintf(stderr, "%s: %s\n", what, oar_last_error());
    CHECK(dev_loss && oar_backward(dev_loss, NULL) == 0);
    printf("%s: %lld ops ran on the CPU\n", what, (long long)oar_device_fallback_count());
    CHECK_NEAR(max_diff(dev_out, cpu_out), 0, 1e-5);
    CHECK_NEAR(max_diff(dev_loss, cpu_loss), 0, 1e-4);
    for (int i = 0; i < 3; i++) {
        oar_tensor *g = oar_tensor_grad(x[i]);
        CHECK(g && oar_tensor_device(g) == oar_device_cpu());
        CHECK_NEAR(max_diff(g, want[i]), 0, 1e-5);
    }
    oar_pool_pop(pool);
}

static void test_causal(void) {
    /* L < S: the mask keeps j <= i of a [3, 5] grid */
    check_causal("causal, batch 2, L 3, S 5", 3, (int64_t[]){2, 3, 4}, (int64_t[]){2, 5, 4},
                 (int64_t[]){2, 5, 6});
    /* self-attention with heads: [B, H, T, E] */
    check_causal("causal, 2 heads, T 4", 4, (int64_t[]){1, 2, 4, 3}, (int64_t[]){1, 2, 4, 3},
                 (int64_t[]){1, 2, 4, 5});
}

static void test_mask_and_causal(void) {
    oar_pool *pool = oar_pool_push();
    int64_t s[3] = {1, 3, 4};
    oar_tensor *q = oar_full_on(OAR_F32, 3, s, 0.5, cl);
    oar_tensor *mask = oar_full_on(OAR_BOOL, 2, (int64_t[]){3, 3}, 1, cl);
    CHECK(q && mask);
    CHECK_FAILS(oar_scaled_dot_product_attention(q, q, q, mask, 0, true, 0), "not both");
    oar_pool_pop(pool);
}

int main(void) {
    cl = opencl_device_or_skip(); /* prints why when there is none */
    if (!cl) return TEST_SKIP;
    RUN(test_causal);
    RUN(test_mask_and_causal);
    return test_summary();
}

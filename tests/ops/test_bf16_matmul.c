/* bf16 matmul: the oneDNN kernel where oar is built with it
 * (src/backends/cpu/cpu_dnnl.c), f32 between casts (VIA_F32) otherwise.
 * Results are checked against the float64 product of the same
 * bf16-rounded inputs, within bf16 output rounding (2^-8 of the magnitude)
 * plus f32 accumulation slack growing with K; gradients against the same
 * computation in f32; the route and oneDNN's primitive cache show that
 * the kernel really runs. */
#include "test.h"
#include "alloc_fail_loop.h"

#include "backends/cpu/cpu.h"
#include "ops/plan.h"

#define SHAPE(...) ((int64_t[]){__VA_ARGS__})

/* A bf16 tensor of normal values (so exactly representable in f64). */
static oar_tensor *bf16_randn(int ndim, const int64_t *shape) {
    return oar_cast(oar_randn(OAR_F32, ndim, shape), OAR_BF16);
}

/* |x| as f64. */
static oar_tensor *abs64(oar_tensor *x) { return oar_abs(oar_cast(x, OAR_F64)); }

/* got (bf16) against ref = the f64 product a @ b, elementwise within
 * 2^-8 |ref| (one bf16 rounding, with room) + K 2^-22 (|a| @ |b|) (f32
 * accumulation in any order, and oneDNN's paired bf16 dot products). */
static void check_product(const char *what, oar_tensor *got, oar_tensor *a, oar_tensor *b, int64_t k) {
    oar_pool *p = oar_pool_push();
    oar_tensor *ref = oar_matmul(oar_cast(a, OAR_F64), oar_cast(b, OAR_F64));
    oar_tensor *mag = oar_matmul(abs64(a), abs64(b));
    bool shaped = got && ref && oar_tensor_ndim(got) == oar_tensor_ndim(ref) &&
                  !memcmp(oar_tensor_shape(got), oar_tensor_shape(ref),
                          (size_t)oar_tensor_ndim(ref) * sizeof(int64_t));
    if (!shaped || oar_tensor_dtype(got) != OAR_BF16) {
        test_failed++;
        fprintf(stderr, "%s: %s: result missing, misshaped or not bf16 (%s)\n", test_current, what,
                oar_last_error());
        oar_pool_pop(p);
        return;
    }
    int64_t n = oar_tensor_numel(ref);
    double *g = test_values(got), *r = test_values(ref), *m = test_values(mag);
    int bad = 0;
    for (int64_t i = 0; i < n && g && r && m; i++) {
        double tol = ldexp(fabs(r[i]), -8) + (double)k * ldexp(m[i], -22);
        if (!(fabs(g[i] - r[i]) <= tol)) {
            if (bad++ < 5)
                fprintf(stderr, "%s: %s[%lld] = %.9g, expected %.9g (tol %.3g)\n", test_current, what,
                        (long long)i, g[i], r[i], tol);
        }
    }
    if (bad || !g || !r || !m) test_failed++;
    else test_passed++;
    free(g);
    free(r);
    free(m);
    oar_pool_pop(p);
}

/* a @ b in bf16 against the f64 reference. */
static void check_matmul(const char *what, oar_tensor *a, oar_tensor *b) {
    oar_pool *p = oar_pool_push();
    int64_t k = oar_tensor_dim(a, -1);
    check_product(what, oar_matmul(a, b), a, b, k);
    oar_pool_pop(p);
}

static void test_shapes(void) {
    oar_pool *p = oar_pool_push();
    oar_manual_seed(1);
    check_matmul("2-D, odd sizes", bf16_randn(2, SHAPE(37, 53)), bf16_randn(2, SHAPE(53, 29)));
    check_matmul("2-D, K = 1", bf16_randn(2, SHAPE(5, 1)), bf16_randn(2, SHAPE(1, 7)));
    check_matmul("2-D, K = 700", bf16_randn(2, SHAPE(33, 700)), bf16_randn(2, SHAPE(700, 65)));
    check_matmul("batched", bf16_randn(3, SHAPE(4, 17, 33)), bf16_randn(3, SHAPE(4, 33, 21)));
    check_matmul("broadcast batch dims", bf16_randn(4, SHAPE(3, 1, 9, 16)), bf16_randn(3, SHAPE(5, 16, 7)));
    check_matmul("2-D B under batched A", bf16_randn(3, SHAPE(6, 10, 12)), bf16_randn(2, SHAPE(12, 8)));
    check_matmul("2-D A over batched B", bf16_randn(2, SHAPE(10, 12)), bf16_randn(3, SHAPE(6, 12, 8)));
    check_matmul("expanded (stride 0) A", oar_expand(bf16_randn(3, SHAPE(1, 9, 16)), 3, SHAPE(4, 9, 16)),
                 bf16_randn(3, SHAPE(4, 16, 5)));
    check_matmul("vector @ matrix", bf16_randn(1, SHAPE(19)), bf16_randn(2, SHAPE(19, 23)));
    check_matmul("matrix @ vector", bf16_randn(2, SHAPE(23, 19)), bf16_randn(1, SHAPE(19)));
    check_matmul("batched @ vector", bf16_randn(3, SHAPE(3, 23, 19)), bf16_randn(1, SHAPE(19)));
    check_matmul("dot", bf16_randn(1, SHAPE(300)), bf16_randn(1, SHAPE(300)));
    /* transposed (column-major) operands, 2-D and batched */
    oar_tensor *at = oar_transpose(bf16_randn(2, SHAPE(40, 31)), 0, 1);
    oar_tensor *bt = oar_transpose(bf16_randn(2, SHAPE(27, 40)), 0, 1);
    check_matmul("A^T @ B", at, bf16_randn(2, SHAPE(40, 27)));
    check_matmul("A @ B^T", bf16_randn(2, SHAPE(31, 40)), bt);
    check_matmul("A^T @ B^T", at, bt);
    check_matmul("batched A^T @ B^T", oar_transpose(bf16_randn(3, SHAPE(2, 13, 11)), -2, -1),
                 oar_transpose(bf16_randn(3, SHAPE(2, 9, 13)), -2, -1));
    /* strided: rows of a wider matrix (ld > cols), and a view neither row-
     * nor column-major (every other column: copied first) */
    check_matmul("A with ld > cols", oar_slice(bf16_randn(2, SHAPE(21, 50)), 1, 3, 35, 1),
                 bf16_randn(2, SHAPE(32, 18)));
    check_matmul("B every other column", bf16_randn(2, SHAPE(21, 32)),
                 oar_slice(bf16_randn(2, SHAPE(32, 36)), 1, 0, 36, 2));
    check_matmul("A every other row and column", oar_slice(oar_slice(bf16_randn(2, SHAPE(42, 64)), 0, 0, 42, 2), 1, 1, 64, 2),
                 bf16_randn(2, SHAPE(32, 18)));
    oar_pool_pop(p);
}

/* K = 0 gives zeros; empty results stay empty. */
static void test_empty(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *z = oar_matmul(oar_ones(OAR_BF16, 2, SHAPE(3, 0)), oar_ones(OAR_BF16, 2, SHAPE(0, 4)));
    CHECK(z && oar_tensor_dtype(z) == OAR_BF16 && oar_tensor_numel(z) == 12);
    double zeros[12] = {0};
    CHECK_VALUES(z, zeros, 12, 0);
    oar_tensor *zb = oar_matmul(oar_full(OAR_BF16, 3, SHAPE(2, 3, 0), 7), oar_full(OAR_BF16, 2, SHAPE(0, 2), 5));
    CHECK_VALUES(zb, zeros, 12, 0);
    oar_tensor *e = oar_matmul(oar_ones(OAR_BF16, 2, SHAPE(0, 5)), oar_ones(OAR_BF16, 2, SHAPE(5, 3)));
    CHECK(e && oar_tensor_numel(e) == 0 && oar_tensor_dim(e, 0) == 0 && oar_tensor_dim(e, 1) == 3);
    oar_tensor *eb = oar_matmul(oar_ones(OAR_BF16, 3, SHAPE(0, 2, 5)), oar_ones(OAR_BF16, 2, SHAPE(5, 3)));
    CHECK(eb && oar_tensor_numel(eb) == 0 && oar_tensor_ndim(eb) == 3);
    oar_pool_pop(p);
}

/* A sum exact in f32 whose bf16 rounding is known: [1, 2^-7, 2^-8] times
 * ones is 1 + 2^-7 + 2^-8 = 1.00000011b, a tie between bf16's neighbours
 * 1.0000001b and 1.0000010b: rounded to even, 1 + 2^-6. */
static void test_rounding(void) {
    oar_pool *p = oar_pool_push();
    float av[3] = {1.0f, 0x1p-7f, 0x1p-8f};
    oar_tensor *a = oar_cast(oar_tensor_from_data(av, OAR_F32, 2, SHAPE(1, 3)), OAR_BF16);
    oar_tensor *r = oar_matmul(a, oar_ones(OAR_BF16, 2, SHAPE(3, 2)));
    double want[2] = {1 + 0x1p-6, 1 + 0x1p-6};
    CHECK_VALUES(r, want, 2, 0);
    oar_pool_pop(p);
}

/* The gradient rule is ops, so backward runs bf16 matmuls too: the
 * gradients of a bf16 product against the same in f32 (from the same
 * bf16 values), each within one bf16 rounding plus accumulation slack. */
static void check_grads(const char *what, int nda, const int64_t *sa, int ndb, const int64_t *sb, bool ta) {
    oar_pool *p = oar_pool_push();
    oar_tensor *a = bf16_randn(nda, sa), *b = bf16_randn(ndb, sb);
    if (ta) a = oar_contiguous(oar_transpose(a, -2, -1)); /* stored as a linear layer's W^T is */
    if (ta) a = oar_transpose(a, -2, -1);
    oar_tensor *a32 = oar_cast(a, OAR_F32), *b32 = oar_cast(b, OAR_F32);
    oar_tensor *leaves[4] = {a, b, a32, b32};
    for (int i = 0; i < 4; i++) CHECK(leaves[i] && oar_tensor_set_requires_grad(leaves[i], true) == 0);
    oar_tensor *c = oar_matmul(a, b), *c32 = oar_matmul(a32, b32);
    oar_tensor *w = bf16_randn(oar_tensor_ndim(c), oar_tensor_shape(c)); /* d loss / d c */
    CHECK(c && w && oar_backward(c, w) == 0);
    CHECK(c32 && oar_backward(c32, oar_cast(w, OAR_F32)) == 0);
    for (int i = 0; i < 2; i++) {
        oar_tensor *g = oar_tensor_grad(leaves[i]), *g32 = oar_tensor_grad(leaves[i + 2]);
        CHECK(g && g32 && oar_tensor_dtype(g) == OAR_BF16);
        if (!g || !g32) continue;
        /* magnitudes |w| @ |b|^T and |a|^T @ |w|, summed to the operand's shape */
        oar_tensor *mag = i == 0 ? oar_matmul(abs64(w), oar_transpose(abs64(b), -2, -1))
                                 : oar_matmul(oar_transpose(abs64(a), -2, -1), abs64(w));
        if (oar_tensor_ndim(mag) > oar_tensor_ndim(g)) mag = oar_sum(mag, 1, SHAPE(0), false);
        int64_t k = i == 0 ? oar_tensor_dim(b, -1) : oar_tensor_numel(c) / oar_tensor_dim(b, -1);
        int64_t n = oar_tensor_numel(g);
        double *gv = test_values(g), *rv = test_values(g32), *mv = test_values(mag);
        int bad = 0;
        for (int64_t j = 0; j < n && gv && rv && mv && oar_tensor_numel(mag) == n; j++) {
            double tol = ldexp(fabs(rv[j]), -8) + (double)k * ldexp(mv[j], -22);
            if (!(fabs(gv[j] - rv[j]) <= tol) && bad++ < 5)
                fprintf(stderr, "%s: %s: grad %c[%lld] = %.9g, f32 %.9g (tol %.3g)\n", test_current, what,
                        i ? 'b' : 'a', (long long)j, gv[j], rv[j], tol);
        }
        if (bad || !gv || !rv || !mv || oar_tensor_numel(mag) != n) test_failed++;
        else test_passed++;
        free(gv);
        free(rv);
        free(mv);
    }
    oar_pool_pop(p);
}

static void test_gradients(void) {
    oar_manual_seed(2);
    check_grads("2-D", 2, SHAPE(13, 24), 2, SHAPE(24, 17), false);
    check_grads("2-D, A stored transposed", 2, SHAPE(13, 24), 2, SHAPE(24, 17), true);
    check_grads("batched", 3, SHAPE(3, 13, 24), 3, SHAPE(3, 24, 17), false);
    check_grads("2-D B under batched A", 3, SHAPE(4, 13, 24), 2, SHAPE(24, 17), false);
}

/* Which route a bf16 matmul takes: the oneDNN kernel where built with it
 * (and oneDNN's cache gains a primitive per new shape, forward and
 * backward), f32 between casts otherwise. f16 stays VIA_F32 either way:
 * oneDNN 2.6 has f16 matmul only on AVX512_FP16 CPUs. */
static void test_route(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *in[2] = {oar_ones(OAR_BF16, 2, SHAPE(2, 3)), oar_ones(OAR_BF16, 2, SHAPE(3, 4))};
    oari_route r = oari_plan_route(oari_device_cpu(), OARI_OP_matmul, OAR_BF16, 2, in, NULL);
    oar_tensor *h[2] = {oar_ones(OAR_F16, 2, SHAPE(2, 3)), oar_ones(OAR_F16, 2, SHAPE(3, 4))};
    CHECK(oari_plan_route(oari_device_cpu(), OARI_OP_matmul, OAR_F16, 2, h, NULL) == OARI_ROUTE_VIA_F32);
#ifdef OAR_TEST_WITH_DNNL
    if (!oari_dnnl_has_bf16()) { /* oneDNN 2.6 on a CPU without AVX-512 */
        CHECK(r == OARI_ROUTE_VIA_F32);
        printf("oneDNN has no bf16 kernels on this CPU: bf16 matmul runs VIA_F32; oneDNN route "
               "checks skipped\n");
        oar_pool_pop(p);
        return;
    }
    CHECK(r == OARI_ROUTE_KERNEL);
    int n0 = oari_dnnl_cached_primitives();
    oar_tensor *a = bf16_randn(2, SHAPE(61, 7)), *b = bf16_randn(2, SHAPE(7, 67));
    check_product("first call", oar_matmul(a, b), a, b, 7);
    CHECK(oari_dnnl_cached_primitives() == n0 + 1);
    check_product("same shape again", oar_matmul(a, b), a, b, 7);
    CHECK(oari_dnnl_cached_primitives() == n0 + 1); /* reused */
    oar_tensor *c = oar_matmul(b, oar_transpose(b, 0, 1));
    check_product("another shape", c, b, oar_transpose(b, 0, 1), 67);
    CHECK(oari_dnnl_cached_primitives() == n0 + 2);
    /* backward: gA = gout @ B^T and gB = A^T @ gout, two more shapes */
    CHECK(oar_tensor_set_requires_grad(a, true) == 0 && oar_tensor_set_requires_grad(b, true) == 0);
    CHECK(oar_backward(oar_matmul(a, b), oar_ones(OAR_BF16, 2, SHAPE(61, 67))) == 0);
    CHECK(oari_dnnl_cached_primitives() == n0 + 4);
#else
    CHECK(r == OARI_ROUTE_VIA_F32);
    printf("built without oneDNN: bf16 matmul runs VIA_F32; oneDNN route checks skipped\n");
#endif
    oar_pool_pop(p);
}

/* Bad input fails cleanly: mismatched shapes (the shape rule), and the
 * oneDNN call itself given shapes it rejects or a dtype it lacks. */
static void test_errors(void) {
    oar_pool *p = oar_pool_push();
    CHECK_FAILS(oar_matmul(oar_ones(OAR_BF16, 2, SHAPE(2, 3)), oar_ones(OAR_BF16, 2, SHAPE(4, 5))),
                "matmul: cannot multiply shapes [2, 3] and [4, 5]");
#ifdef OAR_TEST_WITH_DNNL
    uint16_t buf[64] = {0};
    oari_dnnl_matmul_args m = {.dtype = OAR_BF16, .rank = 2, .a_dims = {2, 3}, .a_strides = {3, 1},
                               .b_dims = {4, 5}, .b_strides = {5, 1}, .c_dims = {2, 5},
                               .a = buf, .b = buf, .c = buf};
    CHECK_STATUS_FAILS(oari_dnnl_matmul(&m), "matmul: oneDNN matmul description failed");
    CHECK(strstr(oar_last_error(), "[2, 3] and [4, 5]"));
    m.dtype = OAR_F16;
    CHECK_STATUS_FAILS(oari_dnnl_matmul(&m), "matmul: no oneDNN kernel for float16");
#endif
    oar_pool_pop(p);
}

/* Every allocation of a bf16 matmul (with a copied operand) and its
 * backward fails in turn: out of memory, nothing leaked, oar usable. */
static int matmul_step(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *a = oar_full(OAR_BF16, 3, SHAPE(2, 9, 12), 0.5);
    oar_tensor *b = oar_slice(oar_full(OAR_BF16, 2, SHAPE(12, 16), 0.25), 1, 0, 16, 2);
    int st = a && b ? oar_tensor_set_requires_grad(a, true) : -1;
    oar_tensor *c = st ? NULL : oar_matmul(a, b), *g = c ? oar_ones_like(c) : NULL;
    if (!st) st = g ? oar_backward(c, g) : oari_fail_status();
    oar_pool_pop(p);
    return st;
}

static void test_alloc_failure(void) {
    CHECK(matmul_step() == 0);
    oar_set_allocator(failing_alloc, NULL);
    int failures, n = fail_each_allocation_with(matmul_step, &failures, (fail_loop_opts){.cold = true});
    oar_set_allocator(NULL, NULL);
    CHECK(n > 5 && failures > 0);
}

int main(void) {
    RUN(test_route); /* first: counts the primitives this process makes */
    RUN(test_shapes);
    RUN(test_empty);
    RUN(test_rounding);
    RUN(test_gradients);
    RUN(test_errors);
    RUN(test_alloc_failure);
    return test_summary();
}

/* Core: dtypes, promotion, creation, host copies, pools, the allocator
 * cache and its counters, random streams, and bad input. */
#include "test.h"

#include <pthread.h>
#include <unistd.h>

static void test_dtypes(void) {
    CHECK(oar_dtype_size(OAR_C128) == 16);
    CHECK(oar_dtype_size(OAR_BF16) == 2);
    CHECK(oar_dtype_size((oar_dtype)42) == 0);
    CHECK(!strcmp(oar_dtype_name(OAR_C64), "complex64"));
    CHECK(oar_promote_types(OAR_I64, OAR_F32) == OAR_F32);
    CHECK(oar_promote_types(OAR_F16, OAR_BF16) == OAR_F32);
    CHECK(oar_promote_types(OAR_C64, OAR_F64) == OAR_C128);
    CHECK(oar_promote_types(OAR_U8, OAR_I32) == OAR_I32);
    CHECK(oar_promote_types(OAR_BOOL, OAR_U8) == OAR_U8);
    CHECK(oar_promote_types(OAR_F16, OAR_C64) == OAR_C64);
    CHECK(oar_promote_types((oar_dtype)-3, OAR_F32) == -1);
}

static void test_from_data_roundtrip(void) {
    oar_pool *p = oar_pool_push();
    int64_t shape[2] = {2, 3};
    float data[6] = {1, -2, 3.5f, 4, 5, 6};
    oar_tensor *t = oar_tensor_from_data(data, OAR_F32, 2, shape);
    CHECK(t && oar_tensor_ndim(t) == 2 && oar_tensor_shape(t)[1] == 3);
    CHECK(oar_tensor_numel(t) == 6 && oar_tensor_is_contiguous(t));
    float back[6] = {0};
    CHECK(oar_tensor_to_host(t, back, sizeof back) == 0);
    CHECK(!memcmp(back, data, sizeof data));
    /* every dtype converts through cast and back */
    for (int d = 0; d < OAR_DTYPE_COUNT; d++) {
        oar_tensor *c = oar_cast(t, (oar_dtype)d);
        CHECK(c && oar_tensor_dtype(c) == d);
        double want[6] = {1, -2, 3.5, 4, 5, 6};
        if (d == OAR_BOOL) for (int i = 0; i < 6; i++) want[i] = 1;
        if (d == OAR_U8) want[1] = 254, want[2] = 3;
        if (d == OAR_I32 || d == OAR_I64 || d == OAR_I8) want[2] = 3;
        CHECK_VALUES(c, want, 6, 0);
    }
    CHECK_STATUS_FAILS(oar_tensor_to_host(t, back, 5), "needs 24");
    oar_pool_pop(p);
}

static void test_half_conversions(void) {
    float vals[] = {0.f, 1.f, -2.5f, 65504.f, 1e-7f, 3.14159f, 1e6f, NAN};
    int64_t n = 8;
    oar_tensor *t = oar_tensor_from_data(vals, OAR_F32, 1, &n);
    oar_tensor *h = oar_cast(t, OAR_F16), *b = oar_cast(t, OAR_BF16);
    /* f16: 1e-7 is subnormal (nearest 1.1920929e-07), 3.14159 -> 3.140625, 1e6 -> inf */
    double want_h[] = {0, 1, -2.5, 65504, 1.1920928955078125e-07, 3.140625, INFINITY, NAN};
    CHECK_VALUES(h, want_h, 8, 0);
    double want_b[] = {0, 1, -2.5, 65536, 1.00117176771164e-07, 3.140625, 999424, NAN};
    CHECK_VALUES(b, want_b, 8, 1e-12);
    oar_tensor_release(t);
    oar_tensor_release(h);
    oar_tensor_release(b);
}

/* The bf16 casts take a vectorised loop on contiguous runs and the generic
 * one on strided runs (src/backends/cpu/cpu_misc.c): both must round to
 * nearest even and keep NaNs quiet, bit for bit the scalar rule below, on
 * every bf16 pattern with the low halves that decide the rounding. */
static uint16_t bf16_round_ref(uint32_t u) {
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    uint32_t lo = u & 0xffffu, hi = u >> 16;
    if (lo > 0x8000u || (lo == 0x8000u && (hi & 1u))) hi++;
    return (uint16_t)hi;
}

static void test_bf16_cast_paths(void) {
    oar_pool *p = oar_pool_push();
    static const uint32_t lows[] = {0, 1, 0x7fff, 0x8000, 0x8001, 0xffff};
    enum { NL = sizeof lows / sizeof lows[0], N = 65536 * NL };
    uint32_t *bits = malloc(sizeof(uint32_t) * N * 2);
    uint16_t *got = malloc(sizeof(uint16_t) * N * 2);
    float *back = malloc(sizeof(float) * N);
    CHECK(bits && got && back);
    for (int64_t i = 0; i < N; i++) bits[2 * i] = bits[2 * i + 1] = ((uint32_t)(i / NL) << 16) | lows[i % NL];
    int64_t n2 = 2 * N, n = N;
    oar_tensor *wide = oar_tensor_from_data(bits, OAR_F32, 1, &n2);
    oar_tensor *dense = oar_contiguous(oar_slice(wide, 0, 0, n2, 2));
    oar_tensor *strided = oar_slice(wide, 0, 1, n2, 2); /* (stride 2: the generic loop) */
    int bad = 0;
    CHECK(oar_tensor_to_host(oar_cast(dense, OAR_BF16), got, sizeof(uint16_t) * N) == 0);
    CHECK(oar_tensor_to_host(oar_cast(strided, OAR_BF16), got + N, sizeof(uint16_t) * N) == 0);
    for (int64_t i = 0; i < N; i++) {
        uint16_t want = bf16_round_ref(bits[2 * i]);
        bad += got[i] != want || got[N + i] != want;
    }
    CHECK(bad == 0);
    /* bf16 -> f32 is exact: every pattern back to its 32-bit form, dense and strided */
    for (int64_t i = 0; i < N; i++) got[i] = (uint16_t)(i / NL);
    oar_tensor *h = oar_tensor_from_data(got, OAR_BF16, 1, &n);
    CHECK(oar_tensor_to_host(oar_cast(h, OAR_F32), back, sizeof(float) * N) == 0);
    oar_tensor *hs = oar_cast(oar_slice(h, 0, 0, n, NL), OAR_F32);
    float *back_s = malloc(sizeof(float) * 65536);
    CHECK(back_s && oar_tensor_to_host(hs, back_s, sizeof(float) * 65536) == 0);
    bad = 0;
    for (int64_t i = 0; i < N; i++) {
        uint32_t u;
        memcpy(&u, &back[i], sizeof u);
        bad += u != (uint32_t)(i / NL) << 16;
        if (i % NL == 0) {
            memcpy(&u, &back_s[i / NL], sizeof u);
            bad += u != (uint32_t)(i / NL) << 16;
        }
    }
    CHECK(bad == 0);
    free(bits);
    free(got);
    free(back);
    free(back_s);
    oar_pool_pop(p);
}

static void test_creation(void) {
    oar_pool *p = oar_pool_push();
    int64_t shape[2] = {2, 2};
    CHECK_VALUES(oar_zeros(OAR_F64, 2, shape), ((double[]){0, 0, 0, 0}), 4, 0);
    CHECK_VALUES(oar_ones(OAR_I32, 2, shape), ((double[]){1, 1, 1, 1}), 4, 0);
    CHECK_VALUES(oar_full(OAR_BF16, 2, shape, 2.5), ((double[]){2.5, 2.5, 2.5, 2.5}), 4, 0);
    CHECK_VALUES(oar_arange(0, 5, 2, OAR_I64), ((double[]){0, 2, 4}), 3, 0);
    CHECK_VALUES(oar_arange(1, 0, -0.25, OAR_F32), ((double[]){1, 0.75, 0.5, 0.25}), 4, 0);
    CHECK_VALUES(oar_linspace(0, 1, 5, OAR_F64), ((double[]){0, 0.25, 0.5, 0.75, 1}), 5, 0);
    CHECK_VALUES(oar_eye(2, 3, OAR_F32), ((double[]){1, 0, 0, 0, 1, 0}), 6, 0);
    oar_tensor *s = oar_scalar(3);
    CHECK(s && oar_tensor_ndim(s) == 0 && oar_tensor_item(s) == 3);
    oar_tensor *c = oar_full(OAR_C64, 0, NULL, 1.5);
    CHECK(c && oar_tensor_item(c) == 1.5);
    int64_t empty_shape[2] = {0, 3};
    oar_tensor *e = oar_zeros(OAR_F32, 2, empty_shape);
    CHECK(e && oar_tensor_numel(e) == 0);
    CHECK(oar_tensor_to_host(e, NULL, 0) == 0);
    oar_pool_pop(p);
}

static void test_bad_input(void) {
    oar_pool *pool = oar_pool_push();
    int64_t neg[2] = {2, -1};
    CHECK_FAILS(oar_zeros(OAR_F32, 2, neg), "negative dimension in shape [2, -1]");
    int64_t huge[3] = {INT64_MAX / 2, 4, 4};
    CHECK_FAILS(oar_zeros(OAR_F32, 3, huge), "overflows");
    int64_t big[1] = {INT64_MAX / 4};
    CHECK_FAILS(oar_empty(OAR_F32, 1, big, NULL), "do not fit in memory");
    int64_t ok[1] = {2};
    CHECK_FAILS(oar_zeros((oar_dtype)77, 1, ok), "invalid dtype");
    CHECK_FAILS(oar_zeros(OAR_F32, 9, ok), "rank 9 is out of range");
    CHECK_FAILS(oar_tensor_from_data(NULL, OAR_F32, 1, ok), "data is NULL");
    CHECK_FAILS(oar_arange(0, 1, 0, OAR_F32), "step must be non-zero");
    CHECK_FAILS(oar_randint(3, 3, OAR_I64, 1, ok), "low 3 must be below high 3");
    CHECK_FAILS(oar_device_get("tpu:7"), "no device \"tpu:7\" (available: cpu)");
    oar_tensor *x = oar_ones(OAR_F32, 1, ok);
    CHECK(!isnan(oar_tensor_item(oar_scalar(1))));
    oar_clear_error();
    CHECK(isnan(oar_tensor_item(x)) && strstr(oar_last_error(), "has 2 elements"));
    CHECK_STATUS_FAILS(oar_normal_(x, 0, -1), "std -1 must be >= 0");
    CHECK_STATUS_FAILS(oar_uniform_(NULL, 0, 1), "tensor is NULL");
    /* a NULL input keeps the first message */
    oar_clear_error();
    oar_tensor *bad = oar_zeros(OAR_F32, 2, neg);
    CHECK(oar_cast(bad, OAR_F64) == NULL && strstr(oar_last_error(), "negative dimension"));
    CHECK(!strcmp(oar_status_string(OAR_ERR_NOMEM), "out of memory"));
    oar_pool_pop(pool);
}

static void test_pools(void) {
    oar_memory_stats before, after;
    int64_t shape[1] = {1000};
    oar_memory_stats_get(&before);
    oar_pool *outer = oar_pool_push();
    oar_tensor *kept = NULL;
    for (int step = 0; step < 5; step++) {
        oar_pool *p = oar_pool_push();
        oar_tensor *a = oar_ones(OAR_F32, 1, shape);
        oar_tensor *b = oar_cast(a, OAR_F64);
        CHECK(a && b);
        if (step == 4) kept = oar_tensor_retain(b);
        oar_pool_pop(p);
    }
    double kv[1000];
    CHECK(kept && oar_tensor_to_host(kept, kv, sizeof kv) == 0 && kv[999] == 1);
    oar_pool_pop(outer);
    oar_tensor_release(kept);
    oar_memory_stats_get(&after);
    CHECK(after.bytes_in_use == before.bytes_in_use);
    /* popping out of order is refused and reported */
    oar_pool *a = oar_pool_push(), *b = oar_pool_push();
    oar_clear_error();
    oar_pool_pop(a);
    CHECK(strstr(oar_last_error(), "not the innermost"));
    oar_pool_pop(b);
    oar_pool_pop(a);
}

static void test_allocator_cache(void) {
    int64_t shape[1] = {100000};
    oar_memory_empty_cache();
    oar_memory_stats s0, s1, s2;
    oar_memory_stats_get(&s0);
    oar_tensor *t = oar_zeros(OAR_F32, 1, shape);
    oar_memory_stats_get(&s1);
    CHECK(s1.n_system_allocs == s0.n_system_allocs + 1);
    CHECK(s1.bytes_in_use >= s0.bytes_in_use + 400000);
    CHECK(s1.peak_bytes >= s1.bytes_in_use);
    oar_tensor_release(t);
    /* a steady loop reuses the cached block: no new system allocations */
    for (int i = 0; i < 10; i++) oar_tensor_release(oar_zeros(OAR_F32, 1, shape));
    oar_memory_stats_get(&s2);
    CHECK(s2.n_system_allocs == s1.n_system_allocs);
    CHECK(s2.n_cache_hits >= s1.n_cache_hits + 10);
    CHECK(s2.bytes_in_use == s0.bytes_in_use);
    CHECK(s2.bytes_cached >= 400000);
    oar_memory_empty_cache();
    oar_memory_stats_get(&s2);
    CHECK(s2.bytes_cached == 0);
}

static void test_random(void) {
    int64_t shape[1] = {10000};
    oar_manual_seed(42);
    oar_tensor *u = oar_rand(OAR_F64, 1, shape);
    oar_tensor *n = oar_randn(OAR_F64, 1, shape);
    oar_manual_seed(42);
    oar_tensor *u2 = oar_rand(OAR_F64, 1, shape);
    double *a = test_values(u), *b = test_values(u2), *z = test_values(n);
    CHECK(a && b && z && !memcmp(a, b, 10000 * sizeof(double)));
    double mean = 0, var = 0, zm = 0, zv = 0, lo = 1, hi = 0;
    for (int i = 0; i < 10000; i++) {
        mean += a[i] / 10000;
        zm += z[i] / 10000;
        lo = a[i] < lo ? a[i] : lo;
        hi = a[i] > hi ? a[i] : hi;
    }
    for (int i = 0; i < 10000; i++) {
        var += (a[i] - mean) * (a[i] - mean) / 10000;
        zv += (z[i] - zm) * (z[i] - zm) / 10000;
    }
    CHECK_NEAR(mean, 0.5, 0.01);
    CHECK_NEAR(var, 1.0 / 12, 0.005);
    CHECK(lo >= 0 && hi < 1);
    CHECK_NEAR(zm, 0, 0.03);
    CHECK_NEAR(zv, 1, 0.05);
    free(a);
    free(b);
    free(z);
    oar_tensor *r = oar_randint(-3, 4, OAR_I64, 1, shape);
    double *ri = test_values(r);
    int seen[7] = {0}, bad = 0;
    for (int i = 0; i < 10000 && ri; i++) {
        if (ri[i] < -3 || ri[i] > 3) bad++;
        else seen[(int)ri[i] + 3]++;
    }
    CHECK(ri && !bad);
    for (int k = 0; k < 7; k++) CHECK(seen[k] > 1200);
    free(ri);
    oar_tensor *p = oar_full(OAR_F32, 1, shape, 0.3);
    oar_tensor *bern = oar_bernoulli(p);
    double *bv = test_values(bern), ones = 0;
    for (int i = 0; i < 10000 && bv; i++) ones += bv[i];
    CHECK_NEAR(ones / 10000, 0.3, 0.02);
    free(bv);
    oar_tensor *t[] = {u, n, u2, r, p, bern};
    for (int i = 0; i < 6; i++) oar_tensor_release(t[i]);
}

static void test_format(void) {
    int64_t shape[2] = {2, 2};
    int32_t data[4] = {1, 2, 3, 4};
    oar_tensor *t = oar_tensor_from_data(data, OAR_I32, 2, shape);
    char buf[128];
    int n = oar_tensor_format(t, buf, sizeof buf);
    CHECK(n > 0 && !strcmp(buf, "tensor([[1, 2], [3, 4]], shape=[2, 2], dtype=int32)"));
    char tiny[8];
    CHECK(oar_tensor_format(t, tiny, sizeof tiny) == n && strlen(tiny) == 7);
    oar_tensor_release(t);
}

/* oar_tensor_print writes "name = <oar_tensor_format's text>" to stdout,
 * whole however long; captured here through a temporary file. */
static char *captured_print(const oar_tensor *t, const char *name) {
    fflush(stdout);
    int saved = dup(1);
    FILE *f = tmpfile();
    if (saved < 0 || !f) return NULL;
    dup2(fileno(f), 1);
    oar_tensor_print(t, name);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    long n = ftell(f);
    char *text = n >= 0 ? calloc((size_t)n + 1, 1) : NULL;
    rewind(f);
    if (text && fread(text, 1, (size_t)n, f) != (size_t)n) text[0] = 0;
    fclose(f);
    return text;
}

static void test_print(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *t = oar_tensor_from_data((int32_t[]){1, 2, 3, 4}, OAR_I32, 2, (int64_t[]){2, 2});
    char *text = captured_print(t, "t");
    CHECK(text && !strcmp(text, "t = tensor([[1, 2], [3, 4]], shape=[2, 2], dtype=int32)\n"));
    free(text);
    /* longer than print's stack buffer: the same text as oar_tensor_format */
    oar_tensor *big = oar_arange(0, 3000, 1, OAR_I64);
    int n = oar_tensor_format(big, NULL, 0);
    char *want = malloc((size_t)n + 1);
    CHECK(n > 4096 && oar_tensor_format(big, want, (size_t)n + 1) == n);
    text = captured_print(big, NULL);
    CHECK(text && !strncmp(text, "tensor = ", 9) && !strncmp(text + 9, want, (size_t)n) && text[9 + n] == '\n');
    free(text), free(want);
    text = captured_print(NULL, "x");
    CHECK(text && !strncmp(text, "x: <error: ", 11));
    free(text);
    oar_pool_pop(p);
}

static void test_like_and_peak(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *x = oar_transpose(oar_zeros(OAR_F64, 2, (int64_t[]){2, 3}), 0, 1);
    oar_tensor *f = oar_full_like(x, 2.5);
    CHECK(f && oar_tensor_dtype(f) == OAR_F64 && oar_tensor_shape(f)[0] == 3 && oar_tensor_shape(f)[1] == 2);
    CHECK(f && oar_tensor_item(oar_sum(f, 0, NULL, false)) == 15.0);
    CHECK(oar_tensor_item(oar_amax(oar_full_like(oar_ones(OAR_I32, 1, (int64_t[]){4}), 7), 0, NULL, false)) == 7);
    CHECK_FAILS(oar_full_like(NULL, 1), "full_like: input is NULL");
    /* the peak drops back to what is in use, then follows new allocations */
    oar_memory_stats s;
    oar_tensor *big = oar_ones(OAR_F32, 1, (int64_t[]){1 << 20});
    oar_tensor_release(oar_tensor_retain(big));
    oar_memory_reset_peak();
    oar_memory_stats_get(&s);
    CHECK(s.peak_bytes == s.bytes_in_use);
    size_t in_use = s.bytes_in_use;
    oar_tensor *more = oar_ones(OAR_F32, 1, (int64_t[]){1 << 18});
    oar_memory_stats_get(&s);
    CHECK(more && s.peak_bytes >= in_use + (1 << 20));
    oar_pool_pop(p);
    oar_memory_stats_get(&s);
    CHECK(s.peak_bytes >= s.bytes_in_use + (1 << 20)); /* popping frees, the peak stays */
}

/* A thread that uses pools frees its recycled ones when it exits (the
 * ASan build's leak check fails this test otherwise); its results are its
 * own. */
static void *pool_thread(void *arg) {
    for (int i = 0; i < 3; i++) {
        oar_pool *outer = oar_pool_push(), *inner = oar_pool_push();
        oar_tensor *t = oar_ones(OAR_F32, 1, (int64_t[]){4});
        oar_pool_pop(inner);
        oar_tensor *u = oar_ones(OAR_F32, 1, (int64_t[]){4});
        *(double *)arg += oar_tensor_item(oar_sum(u, 0, NULL, false));
        (void)t;
        oar_pool_pop(outer);
    }
    return NULL;
}

static void test_pools_on_threads(void) {
    pthread_t th[3];
    double sums[3] = {0};
    for (int i = 0; i < 3; i++) CHECK(pthread_create(&th[i], NULL, pool_thread, &sums[i]) == 0);
    for (int i = 0; i < 3; i++) {
        pthread_join(th[i], NULL);
        CHECK(sums[i] == 12.0);
    }
}

int main(void) {
    setenv("OAR_PLUGIN_NO_INSTALL_DIR", "1", 1); /* the devices are the CPU alone, not the build's plugins */
    unsetenv("OAR_PLUGIN_PATH");
    RUN(test_dtypes);
    RUN(test_from_data_roundtrip);
    RUN(test_half_conversions);
    RUN(test_bf16_cast_paths);
    RUN(test_creation);
    RUN(test_bad_input);
    RUN(test_pools);
    RUN(test_pools_on_threads);
    RUN(test_allocator_cache);
    RUN(test_random);
    RUN(test_format);
    RUN(test_print);
    RUN(test_like_and_peak);
    return test_summary();
}

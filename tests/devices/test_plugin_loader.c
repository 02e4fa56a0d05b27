/* The plugin loader and device use through the test plugins of
 * tests/devices/plugins/ (built by CMake into OAR_TEST_PLUGIN_DIR): the
 * working "mock" plugin loads as mock:0 and mock:1; broken ones (wrong ABI
 * version, missing member, failing init, no entry point, not a shared
 * library) are refused with a message naming the file and the reason, and
 * oar keeps running. On the mock devices: moves, the CPU fallback (counted,
 * results equal to the CPU's), scalars following the device, the
 * two-device error, and autograd. */
#include "test.h"
#include "graph/graph_test_util.h" /* max_diff */

#include <stdlib.h>

#ifndef OAR_TEST_PLUGIN_DIR
#error "OAR_TEST_PLUGIN_DIR must name the folder of the test plugins"
#endif

static const oar_plugin_info *find(const char *file, oar_plugin_info *buf) {
    for (int i = 0; i < oar_plugin_count(); i++) {
        if (oar_plugin_get_info(i, buf)) return NULL;
        const char *slash = strrchr(buf->path, '/');
        if (slash && !strcmp(slash + 1, file)) return buf;
    }
    return NULL;
}

static void check_refused(const char *file, const char *reason) {
    oar_plugin_info in;
    const oar_plugin_info *p = find(file, &in);
    CHECK(p != NULL);
    if (!p) return;
    CHECK(!p->loaded);
    if (!strstr(p->reason, reason)) {
        fprintf(stderr, "%s: reason \"%s\" lacks \"%s\"\n", file, p->reason, reason);
        CHECK(0);
    }
}

static void test_loading(void) {
    CHECK(oar_plugin_count() == 7);
    oar_plugin_info in;
    const oar_plugin_info *mock = find("mock.so", &in);
    CHECK(mock && mock->loaded && mock->n_devices == 2 && !strcmp(mock->name, "mock"));
    check_refused("bad_version.so", "built for device ABI 99.0");
    check_refused("missing_member.so", "lacks the required member get_kernel");
    check_refused("failing_init.so", "oar_plugin_init failed with status -4: failing_init: no "
                                     "hardware found");
    check_refused("no_entry.so", "no oar_plugin_init symbol");
    check_refused("not_a_library.so", "not a loadable shared library");

    CHECK(oar_device_count() == 4);
    CHECK(oar_device_at(0) == oar_device_cpu());
    CHECK_FAILS(oar_device_at(4), "out of range");
    oar_device *m1 = oar_device_get("mock:1");
    CHECK(m1 && !strcmp(oar_device_name(m1), "mock:1"));
    CHECK(oar_device_get("mock") == oar_device_get("mock:0"));
    CHECK_FAILS(oar_device_get("opencl:7"), "available: cpu, mock:0, mock:1, oldmock:0");
    oar_device_props pr;
    CHECK(oar_device_get_props(m1, &pr) == 0 && !strcmp(pr.name, "mock device B"));
    CHECK(pr.total_memory == 1u << 30);
    CHECK(oar_device_synchronize(m1) == 0);

    char report[4096];
    int len = oar_device_report(report, sizeof report);
    CHECK(len > 0 && (size_t)len < sizeof report);
    CHECK(strstr(report, "device mock:1") != NULL);
    CHECK(strstr(report, "mock.so loaded: mock, 2 devices") != NULL);
    CHECK(strstr(report, "failing_init.so refused: oar_plugin_init failed") != NULL);
    char tiny[8];
    CHECK(oar_device_report(tiny, sizeof tiny) == len && strlen(tiny) == 7);

    /* explicit loads: a refused file again, a missing file, the mock again */
    char path[1024];
    snprintf(path, sizeof path, "%s/bad_version.so", OAR_TEST_PLUGIN_DIR);
    CHECK_STATUS_FAILS(oar_plugin_load(path), "refused earlier: built for device ABI 99.0");
    CHECK_STATUS_FAILS(oar_plugin_load("/nonexistent/x.so"),
                       "plugin /nonexistent/x.so refused: not a loadable shared library");
    CHECK_STATUS_FAILS(oar_plugin_load(NULL), "path is NULL");
    snprintf(path, sizeof path, "%s/mock.so", OAR_TEST_PLUGIN_DIR);
    CHECK(oar_plugin_load(path) == 0);
    CHECK(oar_device_count() == 4);
    CHECK_STATUS_FAILS(oar_plugin_get_info(99, &in), "out of range");
}

/* A plugin built for ABI 1.0 loads; oar reads only the members its table
 * declares (its supports_op, past them, would refuse add). */
static void test_older_minor(void) {
    oar_plugin_info in;
    const oar_plugin_info *p = find("old_minor.so", &in);
    CHECK(p && p->loaded && p->n_devices == 1);
    oar_pool *pool = oar_pool_push();
    oar_device *d = oar_device_get("oldmock:0");
    CHECK(d != NULL);
    oar_tensor *x = oar_tensor_to(oar_ones(OAR_F32, 1, (int64_t[]){4}), d);
    oar_device_fallback_reset();
    CHECK(oar_tensor_item(oar_sum(oar_add(x, x), 0, NULL, false)) == 8);
    CHECK(oar_device_fallback_count() == 1); /* sum fell back; add ran on the device */
    oar_pool_pop(pool);
}

/* oar_device_native_dot asks the plugin's table (ABI 1.4); a table that
 * lacks the member (oldmock's 1.0 one) counts as native. Autocast's F32
 * policy follows each device's own answer: on a CPU without native bf16
 * or f16, the CPU's products compute in f32, mock:0's in f32 for bf16
 * (it emulates it too) and in f16 for f16 (native there). More in
 * test_amp_device. */
static void test_native_dot(void) {
    oar_device *m = oar_device_get("mock:0"), *old = oar_device_get("oldmock:0");
    CHECK(m && old);
    CHECK(oar_device_native_dot(m, OAR_BF16) == 0 && oar_device_native_dot(m, OAR_F16) == 1);
    CHECK(oar_device_native_dot(m, OAR_F32) == 1); /* f32 and f64: native everywhere, not asked */
    CHECK(oar_device_native_dot(old, OAR_BF16) == 1 && oar_device_native_dot(old, OAR_F16) == 1);
    CHECK_STATUS_FAILS(oar_device_native_dot(m, 42) < 0, "dtype code 42");
    setenv("OAR_CPU_NATIVE_BF16", "0", 1);
    setenv("OAR_AUTOCAST_EMULATED", "f32", 1);
    oar_pool *pool = oar_pool_push();
    oar_tensor *a = oar_ones(OAR_F32, 2, (int64_t[]){2, 3}), *b = oar_ones(OAR_F32, 2, (int64_t[]){3, 2});
    oar_tensor *da = oar_tensor_to(a, m), *db = oar_tensor_to(b, m);
    CHECK(oar_autocast_push(OAR_BF16) == 0);
    CHECK(oar_tensor_dtype(oar_matmul(a, b)) == OAR_F32);   /* the CPU's: f32 compute */
    CHECK(oar_tensor_dtype(oar_matmul(da, db)) == OAR_F32); /* the device's: emulated too */
    CHECK(oar_autocast_pop() == 0);
    CHECK(oar_autocast_push(OAR_F16) == 0); /* (the CPU's f16: never native) */
    CHECK(oar_tensor_dtype(oar_matmul(a, b)) == OAR_F32);   /* the CPU's: f32 compute */
    CHECK(oar_tensor_dtype(oar_matmul(da, db)) == OAR_F16); /* the device's: native */
    CHECK(oar_autocast_pop() == 0);
    oar_pool_pop(pool);
    unsetenv("OAR_AUTOCAST_EMULATED");
    unsetenv("OAR_CPU_NATIVE_BF16");
}

static oar_tensor *seq(int64_t r, int64_t c, double scale) {
    int64_t s[2] = {r, c};
    float *v = malloc((size_t)(r * c) * sizeof *v);
    for (int64_t i = 0; i < r * c; i++) v[i] = (float)(scale * (double)((i * 7) % 11 - 5));
    oar_tensor *t = oar_tensor_from_data(v, OAR_F32, 2, s);
    free(v);
    return t;
}

static void check_same(oar_tensor *got, oar_tensor *want, double tol) {
    CHECK(got && want);
    CHECK_NEAR(max_diff(got, want), 0, tol);
}

static void test_use(void) {
    oar_pool *pool = oar_pool_push();
    oar_device *m0 = oar_device_get("mock:0"), *m1 = oar_device_get("mock:1");
    oar_tensor *a = seq(3, 4, 0.5), *b = seq(1, 4, 0.25);
    oar_tensor *da = oar_tensor_to(a, m0), *db = oar_tensor_to(b, m0);
    CHECK(da && oar_tensor_device(da) == m0 && oar_tensor_data(da) == NULL);
    CHECK(oar_tensor_to(da, m0) == da);
    check_same(oar_tensor_to(da, oar_device_cpu()), a, 0);
    check_same(oar_tensor_to(oar_tensor_to(da, m1), oar_device_cpu()), a, 0); /* device to device */

    /* add has a mock kernel: no fallback; broadcast handled by the kernel */
    oar_device_fallback_reset();
    oar_tensor *s = oar_add(da, db);
    CHECK(s && oar_tensor_device(s) == m0);
    CHECK(oar_device_fallback_count() == 0);
    check_same(s, oar_add(a, b), 0);

    /* mul has none: CPU with copies, counted, same values, output on mock */
    oar_device_fallback_reset();
    oar_tensor *p = oar_mul(da, db);
    CHECK(p && oar_tensor_device(p) == m0);
    CHECK(oar_device_fallback_count() == 1);
    check_same(p, oar_mul(a, b), 0);
    /* a non-contiguous device input through the fallback */
    oar_tensor *e = oar_exp(oar_transpose(da, 0, 1));
    check_same(e, oar_exp(oar_transpose(a, 0, 1)), 1e-6);
    /* an in-place op through the fallback writes the device tensor */
    oar_tensor *dst = oar_full_on(OAR_F32, 2, oar_tensor_shape(a), 0.0, m0);
    CHECK(dst && oar_tensor_device(dst) == m0);
    CHECK(oar_copy_(dst, da) == 0);
    check_same(dst, a, 0);
    oar_tensor *dcol = oar_slice(dst, 1, 1, 3, 1);
    CHECK(oar_fill_(dcol, 9) == 0); /* mock fill kernel on a strided view */
    check_same(oar_sum(dst, 0, NULL, false), oar_add(oar_sum(a, 0, NULL, false),
               oar_scalar(9 * 6 - oar_tensor_item(oar_sum(oar_slice(a, 1, 1, 3, 1), 0, NULL, false)))),
               1e-4);

    /* 0-d CPU tensors follow the device; others do not */
    oar_tensor *h = oar_mul(da, oar_scalar(2));
    CHECK(h && oar_tensor_device(h) == m0);
    check_same(h, oar_mul(a, oar_scalar(2)), 0);
    CHECK_FAILS(oar_add(da, b), "add: inputs are on different devices (mock:0 and cpu)");
    CHECK_FAILS(oar_add(da, oar_tensor_to(a, m1)),
                "add: inputs are on different devices (mock:0 and mock:1)");
    CHECK_FAILS(oar_tensor_to(NULL, m0), "");
    CHECK_FAILS(oar_tensor_to(a, NULL), "device is NULL");
    CHECK(oar_tensor_item(oar_sum(da, 0, NULL, false)) == oar_tensor_item(oar_sum(a, 0, NULL, false)));
    char buf[256];
    CHECK(oar_tensor_format(oar_tensor_to(b, m0), buf, sizeof buf) > 0 && strstr(buf, "tensor(["));
    oar_pool_pop(pool);
}

/* loss = sum(tanh(x @ w + bias)^2) with w, bias on the device: gradients
 * equal the CPU's. */
static void test_autograd(void) {
    oar_pool *pool = oar_pool_push();
    oar_device *m0 = oar_device_get("mock:0");
    oar_tensor *x = seq(5, 3, 0.3), *w = seq(3, 4, 0.2), *bias = seq(1, 4, 0.1);
    oar_tensor *dx = oar_tensor_to(x, m0), *dw = oar_tensor_to(w, m0), *db = oar_tensor_to(bias, m0);
    oar_tensor *cw = oar_clone(w), *cb = oar_clone(bias);
    oar_tensor *leaves[4] = {dw, db, cw, cb};
    for (int i = 0; i < 4; i++) CHECK(oar_tensor_set_requires_grad(leaves[i], true) == 0);
    oar_tensor *dl = oar_sum(oar_square(oar_tanh(oar_add(oar_matmul(dx, dw), db))), 0, NULL, false);
    oar_tensor *cl = oar_sum(oar_square(oar_tanh(oar_add(oar_matmul(x, cw), cb))), 0, NULL, false);
    CHECK(dl && oar_tensor_device(dl) == m0);
    CHECK(oar_backward(dl, NULL) == 0);
    CHECK(oar_backward(cl, NULL) == 0);
    CHECK(oar_tensor_grad(dw) && oar_tensor_device(oar_tensor_grad(dw)) == m0);
    check_same(oar_tensor_grad(dw), oar_tensor_grad(cw), 1e-5);
    check_same(oar_tensor_grad(db), oar_tensor_grad(cb), 1e-5);
    oar_pool_pop(pool);
}

int main(void) {
    setenv("OAR_PLUGIN_PATH", "/nonexistent-folder:" OAR_TEST_PLUGIN_DIR, 1);
    setenv("OAR_PLUGIN_NO_INSTALL_DIR", "1", 1);
    RUN(test_loading);
    RUN(test_older_minor);
    RUN(test_native_dot);
    RUN(test_use);
    RUN(test_autograd);
    return test_summary();
}

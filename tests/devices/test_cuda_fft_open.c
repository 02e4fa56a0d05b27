/* The cuda plugin opens cuFFT at run time (plugins/cuda/cuda_fft.c), so it
 * loads and serves every other op where cuFFT cannot be opened. Checked on
 * cuda:0 of the plugins in a folder, in one of two modes:
 *
 *   --cufft absent   (OAR_CUDA_CUFFT_LIB set here to a path that does not
 *                    exist): the plugin loads, claims no FFT op (get_kernel
 *                    NULL), rfft, fft and irfft on cuda:0 run on the CPU
 *                    (fallbacks counted) with the CPU's values, and add,
 *                    matmul, softmax and sum on cuda:0 run on the device
 *                    (no fallback) with the CPU's values;
 *   --cufft present  (the library the environment gives: OAR_CUDA_CUFFT_LIB,
 *                    or libcufft.so.12 on the library path): the FFT ops
 *                    are claimed and the same calls make no fallback.
 *
 * With no arguments (CTest's test_cuda_fft_open): the fake cuda plugin
 * (tests/devices/plugins/fake_cuda_plugin.c, its host code the real
 * plugin's) in absent mode, so it runs on a machine without a GPU; CTest's
 * test_cuda_fft_open_fake runs the present mode on the model of cuFFT.
 * scripts/gpu-check.sh runs both modes on the real plugin.
 * [--plugins DIR] [--cufft absent|present]. */
#include "test.h"

#include <oar/fft.h>

#include "ops/op.h"

static bool absent;

/* max |a - b| over the floats of two same-shaped tensors (complex: both parts) */
static double diff(oar_tensor *a, oar_tensor *b) {
    oar_tensor *ha = oar_contiguous(oar_tensor_to(a, oar_device_cpu()));
    oar_tensor *hb = oar_contiguous(oar_tensor_to(b, oar_device_cpu()));
    if (!ha || !hb || oar_tensor_dtype(ha) != oar_tensor_dtype(hb) || oar_tensor_numel(ha) != oar_tensor_numel(hb))
        return INFINITY;
    int64_t n = oar_tensor_numel(ha) * (oar_tensor_dtype(ha) == OAR_C64 ? 2 : 1);
    const float *pa = oar_tensor_data(ha), *pb = oar_tensor_data(hb);
    double worst = 0;
    for (int64_t i = 0; i < n; i++) worst = fmax(worst, fabs((double)pa[i] - pb[i]));
    return worst;
}

static void fft_ops(oar_device *d) {
    test_current = "fft ops";
    oar_pool *p = oar_pool_push();
    oar_manual_seed(3);
    int64_t shape[2] = {3, 16};
    oar_tensor *x = oar_randn(OAR_F32, 2, shape), *xd = oar_tensor_to(x, d);
    CHECK(xd && oar_tensor_device(xd) == d);
    oar_device_fallback_reset();
    oar_tensor *r = oar_fft_rfft(xd, -1, 1, NULL), *z = oar_fft_fft(r, -1, 1, "ortho");
    oar_tensor *back = oar_fft_irfft(r, 16, 1, NULL);
    CHECK(r && z && back && oar_tensor_device(z) == d && oar_tensor_device(back) == d);
    CHECK(oar_device_synchronize(d) == 0);
    int64_t fallbacks = oar_device_fallback_count();
    if (absent) CHECK(fallbacks >= 3); /* r2c, c2c, c2r on the CPU */
    else CHECK(fallbacks == 0);
    oar_tensor *rc = oar_fft_rfft(x, -1, 1, NULL), *zc = oar_fft_fft(rc, -1, 1, "ortho");
    CHECK_NEAR(diff(r, rc), 0, 1e-4);
    CHECK_NEAR(diff(z, zc), 0, 1e-4);
    CHECK_NEAR(diff(back, x), 0, 1e-4);
    oar_pool_pop(p);
}

static void other_ops(oar_device *d) {
    test_current = "other ops";
    oar_pool *p = oar_pool_push();
    oar_manual_seed(4);
    int64_t shape[2] = {5, 7};
    oar_tensor *x = oar_randn(OAR_F32, 2, shape), *xd = oar_tensor_to(x, d);
    oar_device_fallback_reset();
    oar_tensor *a = oar_add(xd, xd), *m = oar_matmul(xd, oar_transpose(xd, 0, 1)), *s = oar_softmax(xd, 1);
    int64_t dim = 1;
    oar_tensor *t = oar_sum(xd, 1, &dim, false);
    CHECK(a && m && s && t && oar_tensor_device(m) == d);
    CHECK(oar_device_synchronize(d) == 0);
    CHECK(oar_device_fallback_count() == 0); /* the plugin serves them with or without cuFFT */
    CHECK_NEAR(diff(a, oar_add(x, x)), 0, 1e-6);
    CHECK_NEAR(diff(m, oar_matmul(x, oar_transpose(x, 0, 1))), 0, 1e-4);
    CHECK_NEAR(diff(s, oar_softmax(x, 1)), 0, 1e-6);
    CHECK_NEAR(diff(t, oar_sum(x, 1, &dim, false)), 0, 1e-5);
    oar_pool_pop(p);
}

/* what the plugin's get_kernel answers, asked directly */
static void claims(oar_device *d) {
    test_current = "claims";
    bool c2c = oari_kernel_lookup(d, OARI_OP_fft_c2c, OAR_C64) != NULL;
    bool r2c = oari_kernel_lookup(d, OARI_OP_fft_r2c, OAR_F32) != NULL;
    bool c2r = oari_kernel_lookup(d, OARI_OP_fft_c2r, OAR_C128) != NULL;
    CHECK(c2c == !absent && r2c == !absent && c2r == !absent);
    CHECK(oari_kernel_lookup(d, OARI_OP_add, OAR_F32) != NULL);
    CHECK(oari_kernel_lookup(d, OARI_OP_matmul, OAR_BF16) != NULL);
    CHECK(oari_kernel_lookup(d, OARI_OP_softmax, OAR_F32) != NULL);
}

int main(int argc, char **argv) {
    const char *dir = NULL, *mode = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--plugins")) dir = argv[i + 1];
        else if (!strcmp(argv[i], "--cufft")) mode = argv[i + 1];
        else argc = 0;
    }
    if (argc % 2 == 0 || (mode && strcmp(mode, "absent") && strcmp(mode, "present"))) {
        fprintf(stderr, "usage: test_cuda_fft_open [--plugins DIR] [--cufft absent|present]\n");
        return 2;
    }
#ifdef OAR_TEST_FAKE_CUDA_DIR
    if (!dir) dir = OAR_TEST_FAKE_CUDA_DIR;
#endif
    if (!dir) {
        printf("SKIP: no fake cuda plugin (CMake found no CUDA headers) and no --plugins\n");
        return 77;
    }
    absent = !mode || !strcmp(mode, "absent");
    if (absent) setenv("OAR_CUDA_CUFFT_LIB", "/nonexistent/oar-test/libcufft.so.12", 1);
    setenv("OAR_PLUGIN_PATH", dir, 1);
    setenv("OAR_PLUGIN_NO_INSTALL_DIR", "1", 1);
    oar_device *d = oar_device_get("cuda:0");
    if (!d) { /* a plugin that failed to load for want of cuFFT is this test's failure */
        char report[4096];
        oar_device_report(report, sizeof report);
        printf("FAIL: no cuda:0 in %s (%s)\n%s", dir, oar_last_error(), report);
        return 1;
    }
    oar_clear_error();
    claims(d);
    fft_ops(d);
    other_ops(d);
    int failed = test_summary();
    printf("cuFFT %s: the plugin loaded on %s, FFT ops %s, other ops on the device\n", absent ? "absent" : "present",
           oar_device_name(d), absent ? "on the CPU" : "on the device");
    return failed;
}

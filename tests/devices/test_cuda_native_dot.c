/* oar_device_native_dot on cuda:0 of the fake cuda plugin
 * (tests/devices/plugins/fake_cuda_plugin.c: the real cuda_plugin.c over a
 * fake runtime whose compute capability OAR_FAKE_CUDA_CC sets, 8.0 when
 * unset), through oar's loader: the plugin's answers from the capability
 * it read at init. --f16 and --bf16 give the answers expected (default 1,
 * for cc 8.0); u8 and i8 are never native (no int8 GEMM), f32 and f64
 * always. CTest runs it for cc 6.1, 7.5 and 8.0. Skipped (77) where CMake
 * found no CUDA headers (no fake plugin). */
#include "test.h"

int main(int argc, char **argv) {
    int f16 = 1, bf16 = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--f16")) f16 = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--bf16")) bf16 = atoi(argv[i + 1]);
        else argc = 0;
    }
    if (argc % 2 == 0) {
        fprintf(stderr, "usage: test_cuda_native_dot [--f16 0|1] [--bf16 0|1]\n");
        return 2;
    }
#ifndef OAR_TEST_FAKE_CUDA_DIR
    (void)f16, (void)bf16;
    printf("SKIP: no fake cuda plugin (CMake found no CUDA headers)\n");
    return 77;
#else
    setenv("OAR_PLUGIN_PATH", OAR_TEST_FAKE_CUDA_DIR, 1);
    setenv("OAR_PLUGIN_NO_INSTALL_DIR", "1", 1);
    oar_device *d = oar_device_get("cuda:0");
    if (!d) {
        char report[4096];
        oar_device_report(report, sizeof report);
        printf("FAIL: no cuda:0 in %s (%s)\n%s", OAR_TEST_FAKE_CUDA_DIR, oar_last_error(), report);
        return 1;
    }
    const char *cc = getenv("OAR_FAKE_CUDA_CC");
    static const char *const names[] = {"f32", "f64", "f16", "bf16", "u8", "i8"};
    const int32_t dts[] = {OAR_F32, OAR_F64, OAR_F16, OAR_BF16, OAR_U8, OAR_I8};
    const int want[] = {1, 1, f16, bf16, 0, 0};
    for (int i = 0; i < 6; i++) {
        int got = oar_device_native_dot(d, dts[i]);
        if (got != want[i])
            fprintf(stderr, "cc %s: native_dot(cuda:0, %s) = %d, expected %d%s%s\n", cc ? cc : "8.0 (default)",
                    names[i], got, want[i], got < 0 ? ": " : "", got < 0 ? oar_last_error() : "");
        CHECK(got == want[i]);
    }
    return test_summary();
#endif
}

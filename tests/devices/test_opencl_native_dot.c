/* oar_device_native_dot on opencl:0 (PoCL here) answers what the plugin's
 * kernels compute: f32 and f64 natively; f16 and bf16 not (their matmul
 * and conv are casts around the f32 kernels, whatever the device's
 * extensions: with cl_khr_fp16 too, no kernel computes in half); u8 and i8
 * not (no int8 matmul or conv kernel). Where the test can read the
 * device's extension string it says whether cl_khr_fp16 is there, so a
 * run on such a device shows the answer does not follow the extension.
 * Skipped (exit 77) where no OpenCL device exists. */
#include "test.h"

#include "opencl_common.h"

#ifdef OAR_TEST_OPENCL_HEADERS
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>

/* 1 when opencl:0 (the plugin's first device: first platform, first
 * device, named `name`) lists cl_khr_fp16, 0 when not, -1 when unknown */
static int has_fp16(const char *name) {
    cl_platform_id p;
    cl_device_id d;
    cl_uint n = 0;
    char dev_name[64] = "", ext[8192] = "";
    if (clGetPlatformIDs(1, &p, &n) || !n || clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 1, &d, &n) || !n) return -1;
    if (clGetDeviceInfo(d, CL_DEVICE_NAME, sizeof dev_name - 1, dev_name, NULL) || strcmp(dev_name, name))
        return -1;
    if (clGetDeviceInfo(d, CL_DEVICE_EXTENSIONS, sizeof ext - 1, ext, NULL)) return -1;
    for (const char *s = ext; (s = strstr(s, "cl_khr_fp16")); s += 11)
        if ((s == ext || s[-1] == ' ') && (s[11] == ' ' || s[11] == 0)) return 1;
    return 0;
}
#endif

int main(void) {
    oar_device *cl = opencl_device_or_skip();
    if (!cl) return TEST_SKIP;
    static const struct { int32_t dt; const char *name; int native; } want[] = {
        {OAR_F32, "f32", 1}, {OAR_F64, "f64", 1}, {OAR_F16, "f16", 0},
        {OAR_BF16, "bf16", 0}, {OAR_U8, "u8", 0},  {OAR_I8, "i8", 0},
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        int got = oar_device_native_dot(cl, want[i].dt);
        if (got != want[i].native)
            fprintf(stderr, "native_dot(opencl:0, %s) = %d, expected %d (%s)\n", want[i].name, got, want[i].native,
                    got < 0 ? oar_last_error() : "see the plugin's native_dot");
        CHECK(got == want[i].native);
    }
    CHECK_STATUS_FAILS(oar_device_native_dot(cl, OAR_DTYPE_COUNT) < 0, "is not an oar dtype");
#ifdef OAR_TEST_OPENCL_HEADERS
    oar_device_props p;
    CHECK(oar_device_get_props(cl, &p) == 0);
    int fp16 = has_fp16(p.name);
    printf("opencl:0 %s cl_khr_fp16; native_dot f16: %d\n",
           fp16 < 0 ? "(extensions not read) and" : fp16 ? "has" : "lacks", oar_device_native_dot(cl, OAR_F16));
#endif
    return test_summary();
}

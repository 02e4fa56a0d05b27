/* For the OpenCL tests: loads the plugin built in this tree (OAR_PLUGIN_BUILD_DIR)
 * and returns opencl:0, or NULL after printing why the test is skipped
 * (no plugin built, no OpenCL platform or device). Tests then exit with
 * 77, which CTest reports as skipped. */
#ifndef OAR_TEST_OPENCL_COMMON_H
#define OAR_TEST_OPENCL_COMMON_H

#include <oar/oar.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEST_SKIP 77

static inline oar_device *opencl_device_or_skip(void) {
#ifndef OAR_PLUGIN_BUILD_DIR
    printf("SKIP: the opencl plugin was not built (OpenCL not found by CMake)\n");
    return NULL;
#else
    setenv("OAR_PLUGIN_PATH", OAR_PLUGIN_BUILD_DIR, 1);
    setenv("OAR_PLUGIN_NO_INSTALL_DIR", "1", 1);
    oar_device *d = oar_device_get("opencl:0");
    if (!d) {
        char report[4096];
        oar_device_report(report, sizeof report);
        printf("SKIP: no OpenCL device (%s)\n%s", oar_last_error(), report);
        return NULL;
    }
    oar_device_props p;
    if (!oar_device_get_props(d, &p)) printf("opencl:0 is %s\n", p.name);
    oar_clear_error();
    return d;
#endif
}

#endif

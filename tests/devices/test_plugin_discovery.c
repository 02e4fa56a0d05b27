/* Plugins are found next to liboar with no environment variable
 * (src/core/plugin_loader.c, scan_next_to_library): this test runs from
 * the build folder, where src/core/self_dir.c must place it, and every
 * plugin of the build's plugins folder must then be tried without
 * OAR_PLUGIN_PATH. With --isolated (CTest sets OAR_PLUGIN_NO_INSTALL_DIR)
 * none is: the tests that need a known set of plugins rely on that. */
#include "test.h"
#include "core/self_dir.h"

#include <dirent.h>
#include <limits.h>

#ifndef OAR_TEST_BUILD_DIR
#error "OAR_TEST_BUILD_DIR must name the build folder"
#endif

/* Whether a plugin at path was tried (loaded or refused). */
static bool tried(const char *path) {
    oar_plugin_info in;
    for (int i = 0; i < oar_plugin_count(); i++)
        if (!oar_plugin_get_info(i, &in) && !strcmp(in.path, path)) return true;
    return false;
}

static void test_self_dir(void) {
    char build[PATH_MAX], self[OARI_PATH], dirs[4][OARI_PATH];
    CHECK(realpath(OAR_TEST_BUILD_DIR, build) != NULL);
    CHECK(oari_self_dir(self, sizeof self) == 1); /* this program holds liboar's objects */
    CHECK(!strcmp(self, build));
    CHECK(oari_lib_dirs(dirs, 4) >= 1 && !strcmp(dirs[0], build));
    CHECK(oari_self_dir(self, 4) == -1 && !self[0]); /* too small a buffer */
}

static void test_build_plugins_found(void) {
    char dir[PATH_MAX], path[PATH_MAX + 256];
    CHECK(realpath(OAR_TEST_BUILD_DIR, dir) != NULL);
    strcat(dir, "/plugins");
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (len < 4 || strcmp(e->d_name + len - 3, ".so")) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (!tried(path)) fprintf(stderr, "%s was not tried\n", path);
        CHECK(tried(path));
        n++;
    }
    if (d) closedir(d);
    printf("%d plugins of the build tree found without OAR_PLUGIN_PATH\n", n);
}

static void test_isolated(void) { CHECK(oar_plugin_count() == 0); }

int main(int argc, char **argv) {
    unsetenv("OAR_PLUGIN_PATH");
    if (argc > 1 && !strcmp(argv[1], "--isolated")) {
        CHECK(getenv("OAR_PLUGIN_NO_INSTALL_DIR") != NULL);
        RUN(test_isolated);
        return test_summary();
    }
    unsetenv("OAR_PLUGIN_NO_INSTALL_DIR");
    RUN(test_self_dir);
    RUN(test_build_plugins_found);
    return test_summary();
}

/* Misuse is reported, not absorbed: popping a pool twice or out of order
 * returns an error, and under AddressSanitizer a tensor used after its
 * release, released twice, or whose storage is read after release is caught
 * (the free lists and the block cache are poisoned). The sanitizer cases run
 * in child processes, which must die with ASan's report. */
#include "test.h"

#include <sys/wait.h>
#include <unistd.h>

static void test_pool_misuse(void) {
    oar_pool *outer = oar_pool_push(), *inner = oar_pool_push();
    CHECK(outer && inner);
    CHECK_STATUS_FAILS(oar_pool_pop(outer), "not the innermost");
    CHECK(oar_pool_pop(inner) == 0);
    CHECK_STATUS_FAILS(oar_pool_pop(inner), "already popped");
    CHECK(oar_pool_pop(outer) == 0);
    CHECK_STATUS_FAILS(oar_pool_pop(NULL), "pool is NULL");
    /* a pop after a failed call keeps that call's message */
    oar_clear_error();
    CHECK(oar_exp(NULL) == NULL);
    CHECK(oar_pool_pop(NULL) != 0);
    CHECK(strstr(oar_last_error(), "pool is NULL") == NULL);
}

#if defined(__SANITIZE_ADDRESS__)
#define HAVE_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HAVE_ASAN 1
#endif
#endif

#ifdef HAVE_ASAN
/* Runs fn in a child with stderr captured; true if the child died with an
 * AddressSanitizer report that contains `want`. */
static bool dies_with(void (*fn)(void), const char *want) {
    int fds[2];
    if (pipe(fds)) return false;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        fn();
        _exit(0); /* not caught: the test fails */
    }
    close(fds[1]);
    static char out[1 << 16];
    size_t n = 0;
    ssize_t k;
    while (n < sizeof out - 1 && (k = read(fds[0], out + n, sizeof out - 1 - n)) > 0) n += (size_t)k;
    out[n] = 0;
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    bool died = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    if (!died || !strstr(out, "AddressSanitizer") || !strstr(out, want))
        fprintf(stderr, "child: exit %d, report:\n%.2000s\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1, out);
    return died && strstr(out, "AddressSanitizer") && strstr(out, want);
}

static void use_after_release(void) {
    oar_tensor *t = oar_zeros(OAR_F32, 1, (int64_t[]){4});
    oar_tensor_release(t);
    printf("%d\n", oar_tensor_ndim(t)); /* reads the freed struct */
}

static void double_release(void) {
    oar_tensor *t = oar_zeros(OAR_F32, 1, (int64_t[]){4});
    oar_tensor_release(t);
    oar_tensor_release(t);
}

static void storage_after_release(void) {
    oar_tensor *t = oar_zeros(OAR_F32, 1, (int64_t[]){1024});
    volatile float *d = oar_tensor_data(t);
    oar_tensor_release(t); /* the block goes back to the cache */
    printf("%f\n", d[7]);
}

static void test_poisoned_after_release(void) {
    CHECK(dies_with(use_after_release, "use-after-poison"));
    CHECK(dies_with(double_release, "use-after-poison"));
    CHECK(dies_with(storage_after_release, "use-after-poison"));
}
#endif

int main(void) {
    RUN(test_pool_misuse);
#ifdef HAVE_ASAN
    RUN(test_poisoned_after_release);
#else
    printf("not an AddressSanitizer build: the poisoning checks run under make test-asan\n");
#endif
    return test_summary();
}

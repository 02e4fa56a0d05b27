/* A minimal test harness: CHECK macros that count and report, and helpers
 * for comparing tensors with expected values. Each test file is one CTest
 * executable whose main() calls RUN(test_fn) and returns test_summary(). */
#ifndef OAR_TEST_H
#define OAR_TEST_H

#include <oar/oar.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int test_passed, test_failed;
static const char *test_current = "";

#define CHECK(cond)                                                                    \
    do {                                                                               \
        if (cond) test_passed++;                                                       \
        else {                                                                         \
            test_failed++;                                                             \
            fprintf(stderr, "%s:%d: %s: CHECK(%s) failed (last error: %s)\n", __FILE__, \
                    __LINE__, test_current, #cond, oar_last_error());                  \
        }                                                                              \
    } while (0)

/* a within tol of b. A NaN never passes (a failed call's NaN must not
 * match an expected NaN): check an expected NaN with CHECK_NAN. */
#define CHECK_NEAR(a, b, tol)                                                           \
    do {                                                                                \
        double a_ = (double)(a), b_ = (double)(b);                                      \
        if (fabs(a_ - b_) <= (tol)) test_passed++;                                      \
        else {                                                                          \
            test_failed++;                                                              \
            fprintf(stderr, "%s:%d: %s: %s = %.17g, expected %s = %.17g (tol %g)\n",    \
                    __FILE__, __LINE__, test_current, #a, a_, #b, b_, (double)(tol));   \
        }                                                                               \
    } while (0)

/* x is NaN, and the call that made it did not fail (no error was set
 * since the last oar_clear_error: a failed call's NaN does not count). */
#define CHECK_NAN(x)                                                                    \
    do {                                                                                \
        double x_ = (double)(x);                                                        \
        if (isnan(x_) && !oar_last_error()[0]) test_passed++;                           \
        else {                                                                          \
            test_failed++;                                                              \
            fprintf(stderr, "%s:%d: %s: %s = %.17g, expected NaN from a call that succeeds " \
                    "(last error: %s)\n", __FILE__, __LINE__, test_current, #x, x_, oar_last_error()); \
        }                                                                               \
    } while (0)

/* expr must fail (NULL or non-zero) with an error message containing `needle`. */
#define CHECK_FAILS(expr, needle)                                                       \
    do {                                                                                \
        oar_clear_error();                                                              \
        int failed_ = !!(expr) == 0;                                                    \
        const char *msg_ = oar_last_error();                                            \
        if (failed_ && strstr(msg_, needle)) test_passed++;                             \
        else {                                                                          \
            test_failed++;                                                              \
            fprintf(stderr, "%s:%d: %s: expected %s to fail with \"%s\", got %s (\"%s\")\n", \
                    __FILE__, __LINE__, test_current, #expr, needle,                    \
                    failed_ ? "failure" : "success", msg_);                             \
        }                                                                               \
    } while (0)

/* Same for calls that return a status: expr must be non-zero. */
#define CHECK_STATUS_FAILS(expr, needle) CHECK_FAILS((expr) == 0, needle)

#define RUN(fn)                                                                         \
    do {                                                                                \
        test_current = #fn;                                                             \
        oar_clear_error();                                                              \
        fn();                                                                           \
    } while (0)

static inline int test_summary(void) {
    printf("%d passed, %d failed\n", test_passed, test_failed);
    return test_failed ? 1 : 0;
}

/* The tensor's values as doubles, malloc'd: real parts for complex, and the
 * imaginary parts into *imag when imag is not NULL (malloc'd; NULL for a
 * real tensor). */
static inline double *test_values_ri(oar_tensor *t, double **imag) {
    if (imag) *imag = NULL;
    if (!t) return NULL;
    oar_pool *pool = oar_pool_push();
    oar_tensor *d = oar_cast(t, oar_dtype_is_complex(oar_tensor_dtype(t)) ? OAR_C128 : OAR_F64);
    if (!d) {
        oar_pool_pop(pool);
        return NULL;
    }
    int64_t n = oar_tensor_numel(d);
    size_t es = oar_dtype_size(oar_tensor_dtype(d));
    double *v = malloc((size_t)(n ? n : 1) * es);
    if (oar_tensor_to_host(d, v, (size_t)n * es)) {
        free(v);
        v = NULL;
    }
    if (v && es == 16) {
        if (imag && (*imag = malloc((size_t)(n ? n : 1) * sizeof(double))))
            for (int64_t i = 0; i < n; i++) (*imag)[i] = v[2 * i + 1];
        for (int64_t i = 0; i < n; i++) v[i] = v[2 * i]; /* keep real parts */
    }
    oar_pool_pop(pool);
    return v;
}
static inline double *test_values(oar_tensor *t) { return test_values_ri(t, NULL); }

/* A deterministic value in [-1, 1) for element i of test array `which`
 * (a multiplicative hash: no generator state, any element on its own). */
static inline double test_hash_value(int which, int64_t i) {
    uint32_t h = (uint32_t)(i * 2654435761u) ^ (uint32_t)(which * 40503u + 7u);
    h ^= h >> 13, h *= 0x5bd1e995u, h ^= h >> 15;
    return (double)(h & 0xffff) / 32768.0 - 1.0;
}

/* Checks t against n expected values to an absolute+relative tolerance;
 * a complex t against want_re and want_im (want_im NULL: all zero). */
static inline void test_expect_cvalues(const char *what, oar_tensor *t, const double *want, const double *want_im,
                                       int64_t n, double tol, const char *file, int line) {
    if (!t) {
        test_failed++;
        fprintf(stderr, "%s:%d: %s: %s is NULL (%s)\n", file, line, test_current, what, oar_last_error());
        return;
    }
    if (oar_tensor_numel(t) != n) {
        test_failed++;
        fprintf(stderr, "%s:%d: %s: %s has %lld elements, expected %lld\n", file, line, test_current,
                what, (long long)oar_tensor_numel(t), (long long)n);
        return;
    }
    double *im = NULL, *v = test_values_ri(t, &im);
    int bad = 0;
    for (int64_t i = 0; i < n && v; i++) {
        for (int part = 0; part < (im ? 2 : 1); part++) {
            double got = part ? im[i] : v[i], w = part ? (want_im ? want_im[i] : 0) : want[i];
            double err = fabs(got - w);
            bool same_nan = isnan(got) && isnan(w);
            bool same_inf = isinf(got) && got == w;
            if (!(err <= tol * (1 + fabs(w))) && !same_nan && !same_inf) {
                if (bad < 5)
                    fprintf(stderr, "%s:%d: %s: %s[%lld]%s = %.10g, expected %.10g\n", file, line,
                            test_current, what, (long long)i, part ? " (imaginary part)" : "", got, w);
                bad++;
            }
        }
    }
    if (!v || bad) test_failed++;
    else test_passed++;
    free(v);
    free(im);
}
static inline void test_expect_values(const char *what, oar_tensor *t, const double *want, int64_t n,
                                      double tol, const char *file, int line) {
    test_expect_cvalues(what, t, want, NULL, n, tol, file, line);
}
/* t's values against want (a complex t: real parts against want, imaginary
 * parts against 0), or against want_re and want_im. */
#define CHECK_VALUES(t, want, n, tol) test_expect_values(#t, t, want, n, tol, __FILE__, __LINE__)
#define CHECK_CVALUES(t, want_re, want_im, n, tol) \
    test_expect_cvalues(#t, t, want_re, want_im, n, tol, __FILE__, __LINE__)

#endif

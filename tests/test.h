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

#define CHECK_NEAR(a, b, tol)                                                           \
    do {                                                                                \
        double a_ = (double)(a), b_ = (double)(b);                                      \
        if (fabs(a_ - b_) <= (tol) || (isnan(a_) && isnan(b_))) test_passed++;          \
        else {                                                                          \
            test_failed++;                                                              \
            fprintf(stderr, "%s:%d: %s: %s = %.17g, expected %s = %.17g (tol %g)\n",    \
                    __FILE__, __LINE__, test_current, #a, a_, #b, b_, (double)(tol));   \
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

/* The tensor's values as doubles (real parts for complex), malloc'd. */
static inline double *test_values(oar_tensor *t) {
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
    if (v && es == 16)
        for (int64_t i = 0; i < n; i++) v[i] = v[2 * i]; /* keep real parts */
    oar_pool_pop(pool);
    return v;
}

/* Checks t against n expected values to an absolute+relative tolerance. */
static inline void test_expect_values(const char *what, oar_tensor *t, const double *want, int64_t n,
                                      double tol, const char *file, int line) {
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
    double *v = test_values(t);
    int bad = 0;
    for (int64_t i = 0; i < n && v; i++) {
        double err = fabs(v[i] - want[i]);
        bool same_nan = isnan(v[i]) && isnan(want[i]);
        bool same_inf = isinf(v[i]) && v[i] == want[i];
        if (!(err <= tol * (1 + fabs(want[i]))) && !same_nan && !same_inf) {
            if (bad < 5)
                fprintf(stderr, "%s:%d: %s: %s[%lld] = %.10g, expected %.10g\n", file, line,
                        test_current, what, (long long)i, v[i], want[i]);
            bad++;
        }
    }
    if (!v || bad) test_failed++;
    else test_passed++;
    free(v);
}
#define CHECK_VALUES(t, want, n, tol) test_expect_values(#t, t, want, n, tol, __FILE__, __LINE__)

#endif

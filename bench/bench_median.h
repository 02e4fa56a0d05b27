/* The median of a run's samples, for benchmarks that report a robust
 * figure: on these shared machines one interrupted sample moves a mean. */
#ifndef OAR_BENCH_MEDIAN_H
#define OAR_BENCH_MEDIAN_H

#include <stdlib.h>

static int bench_by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of v[0..n-1], n >= 1 (sorts v: v[0] is then the smallest). */
static double bench_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, bench_by_value);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#endif

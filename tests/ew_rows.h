/* The elementwise table (src/ops/elementwise.def) as the tests read it:
 * one entry per row with what a test needs to make its cases (so that a
 * new row is tested without editing the tests): arity, dtypes, whether it
 * takes attributes, its test ranges and kinks, and its columns' text. */
#ifndef OAR_TEST_EW_ROWS_H
#define OAR_TEST_EW_ROWS_H

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "ops/ew_table.h"

typedef struct ew_test_row {
    const char *op;
    int n_in;              /* 1, 2, 3 (where); 0: an EW_NONE row */
    const char *why_none;  /* EW_NONE's reason */
    unsigned gen;          /* EW_K_* bits: dtypes of the generated code and device kernels */
    const char *gen_why;   /* GEN_NONE's reason, else NULL */
    bool cpu_real;         /* CPU kernels for f32/f64 (else complex only) */
    bool out_bool;
    bool attrs;            /* API_OWN: its public function takes attributes */
    bool differentiable;
    bool has_alt;
    const char *forward, *gradient, *onnx, *doc; /* the columns' text */
    double lo, hi, blo, bhi; /* input ranges (unary: lo, hi) */
    double kinks[8];
    int n_kinks;
} ew_test_row;

#define EW_T_KINKS(...) {__VA_ARGS__}, (int)(sizeof((double[]){0, __VA_ARGS__}) / sizeof(double)) - 1
#define EW_T_RANGE(test) EW_CAT(EW_T_RANGE_, test)
#define EW_T_RANGE_TEST(lo, hi, ...) lo, hi, lo, hi, EW_T_KINKS(__VA_ARGS__)
#define EW_T_RANGE_TEST_AB(alo, ahi, blo, bhi) alo, ahi, blo, bhi, {0}, 0
#define EW_T_REAL(cpu) EW_CAT(EW_T_REAL_, cpu)
#define EW_T_REAL_CPU_R 1
#define EW_T_REAL_CPU_RC 1
#define EW_T_REAL_CPU_IR 1
#define EW_T_REAL_CPU_IRC 1
#define EW_T_REAL_CPU_BIR 1
#define EW_T_REAL_CPU_BIRC 1
#define EW_T_REAL_CPU_BC 0
#define EW_T_REAL_CPU_C 0
#define EW_T_REAL_CPU_ALL 1
#define EW_T_REAL_CPU_OWN(why) 1
#define EW_T_DIFF(gradient) EW_CAT(EW_T_DIFF_, gradient)
#define EW_T_DIFF_D(f) 1
#define EW_T_DIFF_D_DIV(f) 1
#define EW_T_DIFF_D2(fa, fb) 1
#define EW_T_DIFF_GRAD_FN(fn) 1
#define EW_T_DIFF_NO_GRAD 0
#define EW_T_ATTRS(api) EW_CAT(EW_T_ATTRS_, api)
#define EW_T_ATTRS_PUBLIC 0
#define EW_T_ATTRS_API_OWN 1
#define EW_T_ATTRS_INTERNAL 0

#define EW_T_ROW(op, n, rule, cpu, gen, api, forward, alt, gradient, test, onnx, doc)          \
    {#op, n, NULL, EW_GEN_MASK(gen), EW_GEN_WHY(gen), EW_T_REAL(cpu), EW_OUT_BOOL(rule),      \
     EW_T_ATTRS(api), EW_T_DIFF(gradient), alt, #forward, #gradient, #onnx, doc, EW_T_RANGE(test)},
static const ew_test_row ew_test_rows[] = {
#define EW_UNARY(op, rule, cpu, gen, api, forward, alt, gradient, saved, test, onnx, doc)       \
    EW_T_ROW(op, 1, rule, cpu, gen, api, forward, EW_HAS_ALT(alt), gradient, test, onnx, doc)
#define EW_BINARY(op, rule, cpu, gen, api, forward, gradient, saved, test, onnx, doc)           \
    EW_T_ROW(op, 2, rule, cpu, gen, api, forward, 0, gradient, test, onnx, doc)
#define EW_TERNARY(op, rule, cpu, gen, api, forward, gradient, saved, test, onnx, doc)          \
    EW_T_ROW(op, 3, rule, cpu, gen, api, forward, 0, gradient, test, onnx, doc)
#define EW_NONE(op, why) {#op, 0, why, 0, NULL, 0, 0, 0, 0, 0, NULL, NULL, NULL, NULL, 0, 0, 0, 0, {0}, 0},
#include "ops/elementwise.def"
#undef EW_UNARY
#undef EW_BINARY
#undef EW_TERNARY
#undef EW_NONE
};
#define EW_N_TEST_ROWS ((int)(sizeof ew_test_rows / sizeof ew_test_rows[0]))

/* The row of op, or NULL. */
static inline const ew_test_row *ew_test_row_of(const char *op) {
    for (int i = 0; i < EW_N_TEST_ROWS; i++)
        if (!strcmp(ew_test_rows[i].op, op)) return &ew_test_rows[i];
    return NULL;
}

#endif

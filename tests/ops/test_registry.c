/* The op table is whole: every OP() line has a definition whose name
 * matches, sane arity and flags, a shape rule, and a CPU kernel for at
 * least one dtype (view ops excepted: they run no kernel; and custom, whose
 * kernels the user registers). The elementwise
 * table (src/ops/elementwise.def) covers every op of fusion kind
 * elementwise or broadcast, with a fused and device form or the reason
 * why none, and its definitions agree with its rows. */
#include "test.h"

#include "backends/cpu/cpu.h"
#include "ew_rows.h"
#ifndef OAR_TEST_NO_ONNX /* (a build without ONNX has no export table) */
#include "onnx/onnx_export_internal.h" /* the export table, which reads the ONNX column */
#endif

#include <ctype.h>

static void test_every_op_is_defined(void) {
    oar_device *cpu = oar_device_cpu();
    for (int op = 0; op < OARI_OP_COUNT; op++) {
        const oari_op_def *def = oari_op_defs[op];
        if (!def) {
            test_failed++;
            fprintf(stderr, "op %s has no definition\n", oari_op_name((oari_op)op));
            continue;
        }
        CHECK(!strcmp(def->name, oari_op_name((oari_op)op)));
        CHECK(oari_op_lookup(def->name) == op);
        CHECK(def->infer != NULL);
        CHECK(def->n_out >= 1 && def->n_out <= OARI_MAX_OUT);
        CHECK(def->n_in >= -1);
        if (def->flags & OARI_F_VIEW) {
            CHECK(def->view != NULL);
            continue;
        }
        if (op == OARI_OP_custom) continue; /* the user's kernels (tests/ops/test_custom_op.c) */
        int kernels = 0;
        for (int d = 0; d < OAR_DTYPE_COUNT; d++)
            kernels += oari_kernel_lookup(cpu, (oari_op)op, (oar_dtype)d) != NULL;
        if (!kernels) {
            test_failed++;
            fprintf(stderr, "op %s has no CPU kernel\n", def->name);
        }
    }
    CHECK(oari_op_lookup("no_such_op") == -1);
}

/* Every elementwise or broadcast op has a row: a formula with a fused and
 * device form (gen), or GEN_NONE / EW_NONE saying why not. */
static void test_elementwise_ops_have_rows(void) {
    for (int op = 0; op < OARI_OP_COUNT; op++) {
        const oari_op_def *def = oari_op_defs[op];
        if (!def || (def->fusion != OARI_FUSE_ELEMWISE && def->fusion != OARI_FUSE_BROADCAST)) continue;
        const ew_test_row *r = ew_test_row_of(def->name);
        if (!r) {
            test_failed++;
            fprintf(stderr, "%s is elementwise but has no row in src/ops/elementwise.def (a formula, or "
                    "EW_NONE and why)\n", def->name);
            continue;
        }
        if (!r->n_in) {
            CHECK(r->why_none && r->why_none[0]);
            continue;
        }
        if (!r->gen && !(r->gen_why && r->gen_why[0])) {
            test_failed++;
            fprintf(stderr, "%s: no fused or device form, and no GEN_NONE(\"why\")\n", def->name);
        }
    }
}

/* Which inputs and outputs a derivative formula reads: x y (unary), a b c. */
static unsigned formula_reads(const char *f, int n_in) {
    unsigned m = 0;
    for (const char *p = f; *p;) {
        if (!isalpha((unsigned char)*p) && *p != '_') {
            p++;
            continue;
        }
        const char *s = p;
        while (isalnum((unsigned char)*p) || *p == '_') p++;
        if (p - s != 1) continue;
        if (*s == 'y') m |= OARI_SAVE_OUT(0);
        else if (*s == 'x' && n_in == 1) m |= OARI_SAVE_IN(0);
        else if (*s >= 'a' && *s <= 'c' && n_in > 1) m |= OARI_SAVE_IN(*s - 'a');
    }
    return m;
}

/* Each row's definition agrees with it: arity, fusion kind, gradient or
 * not, and a derivative formula saves exactly what it reads. */
static void test_rows_match_definitions(void) {
    int formulas = 0;
    for (int i = 0; i < EW_N_TEST_ROWS; i++) {
        const ew_test_row *r = &ew_test_rows[i];
        int op = oari_op_lookup(r->op);
        CHECK(op >= 0);
        if (op < 0 || !oari_op_defs[op]) continue;
        const oari_op_def *def = oari_op_defs[op];
        if (!r->n_in) continue;
        test_current = r->op;
        CHECK(def->n_in == r->n_in);
        CHECK(def->fusion == (r->n_in == 1 ? OARI_FUSE_ELEMWISE : OARI_FUSE_BROADCAST));
        CHECK(r->differentiable == !(def->flags & OARI_F_NONDIFF));
        CHECK(r->differentiable == (def->grad != NULL));
        CHECK(r->doc && r->doc[0]);
        if (!strncmp(r->gradient, "D(", 2) || !strncmp(r->gradient, "D_DIV(", 6) ||
            !strncmp(r->gradient, "D2(", 3)) {
            unsigned reads = formula_reads(r->gradient, r->n_in);
            if (reads != def->saved)
                fprintf(stderr, "%s: its derivative reads saved mask %#x, the row saves %#x\n", r->op,
                        reads, def->saved);
            CHECK(reads == def->saved);
            formulas++;
        }
    }
    test_current = "rows";
    CHECK(formulas > 20);
    /* the scan itself */
    CHECK(formula_reads("D(MUL(y, C(M_LN2)))", 1) == OARI_SAVE_OUT(0));
    CHECK(formula_reads("D_DIV(ADD(x, ONE))", 1) == OARI_SAVE_IN(0));
    CHECK(formula_reads("D2(b, a)", 2) == (OARI_SAVE_IN(0) | OARI_SAVE_IN(1)));
}

#ifndef OAR_TEST_NO_ONNX
/* The ONNX column, as the exporter reads it: every row has a mapping at
 * the default opset or a reason; a direct mapping names its ONNX op. */
static void test_onnx_column(void) {
    char msg[300];
    for (int i = 0; i < EW_N_TEST_ROWS; i++) {
        const ew_test_row *r = &ew_test_rows[i];
        if (!r->n_in) continue;
        oari_op op = (oari_op)oari_op_lookup(r->op);
        const oari_onnx_xrow *x = oari_onnx_xfind(op, OARI_ONNX_XDEFAULT, msg, sizeof msg);
        if (!x) {
            CHECK(strstr(msg, "no ONNX mapping") != NULL); /* a "none" row, with its reason */
            continue;
        }
        CHECK(x->onnx && isupper((unsigned char)x->onnx[0]));
    }
    const oari_onnx_xrow *add = oari_onnx_xfind(OARI_OP_add, 13, msg, sizeof msg);
    CHECK(add && !add->emit && !strcmp(add->onnx, "Add"));
    /* a row from opset 14: HardSwish at 14, refused (with the range) at 13 */
    const oari_onnx_xrow *hs = oari_onnx_xfind(OARI_OP_hardswish, 14, msg, sizeof msg);
    CHECK(hs && !strcmp(hs->onnx, "HardSwish"));
    CHECK(!oari_onnx_xfind(OARI_OP_hardswish, 13, msg, sizeof msg) && strstr(msg, "14..17"));
}
#endif

int main(void) {
    RUN(test_every_op_is_defined);
    RUN(test_elementwise_ops_have_rows);
    RUN(test_rows_match_definitions);
#ifndef OAR_TEST_NO_ONNX
    RUN(test_onnx_column);
#endif
    return test_summary();
}

/* The op table is whole: every OP() line has a definition whose name
 * matches, sane arity and flags, a shape rule, and a CPU kernel for at
 * least one dtype (view ops excepted: they run no kernel). */
#include "test.h"

#include "backends/cpu/cpu.h"

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

int main(void) {
    RUN(test_every_op_is_defined);
    return test_summary();
}

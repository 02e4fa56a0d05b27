/* Every differentiable op of the registry against central differences in
 * float64, first and second order, contiguous and strided inputs (the
 * table in gradcheck_cases.h, and a case from each row of the elementwise
 * table). An op whose definition is still missing is
 * skipped with a message; a differentiable op without a case fails. With
 * an op name as argument, runs only that op's cases. */
#include "gradcheck_cases.h"

/* The harness itself catches wrong gradients: x * detach(x) has a wrong
 * first-order gradient (x instead of 2x); x c - c^2 / 2 with c = detach(x)
 * (= x^2 / 2) has the right first order (c = x) but a wrong second order
 * (0 instead of 1). */
FN(f_wrong1, oar_mul(x[0], oar_detach(x[0])))
FN(f_wrong2, oar_sub(oar_mul(x[0], oar_detach(x[0])),
                     oar_mul_scalar(oar_square(oar_detach(x[0])), 0.5)))

static void test_harness_detects(void) {
    gc_input in[1] = {{SH2(2, 3)}};
    gc_opts o = {.contiguous_only = true};
    fprintf(stderr, "(the two gradcheck failures below are expected)\n");
    CHECK(gradcheck_failures("wrong first order", f_wrong1, NULL, 1, in, &o) > 0);
    CHECK(gradcheck_failures("wrong second order", f_wrong2, NULL, 1, in, &o) > 0);
    o.first_only = true;
    CHECK(gradcheck_failures("right first order", f_wrong2, NULL, 1, in, &o) == 0);
}

int main(int argc, char **argv) {
    RUN(test_harness_detects);
    const char *only = argc > 1 ? argv[1] : NULL;
    test_current = "gradcheck";
    int wrong = 0;
    for (int op = 0; op < OARI_OP_COUNT; op++) {
        const char *name = oari_op_name((oari_op)op);
        if (only && strcmp(only, name)) continue;
        const oari_op_def *d = oari_op_defs[op];
        if (!d) {
            printf("skipped: %s not implemented\n", name);
            continue;
        }
        if (d->flags & OARI_F_NONDIFF) continue;
        /* needs MPI: checked on 1, 2 and 4 ranks by tests/dist/test_dist.c */
        if (!strcmp(name, "dist_reshard")) continue;
        /* needs a second device: checked by tests/devices/test_device_autograd.c */
        if (!strcmp(name, "to_device")) continue;
        /* a straight-through gradient is not the derivative of the forward,
         * so central differences cannot check it: tests/ops/test_int8.c
         * checks it against its closed form (the in-range mask) */
        if (!strcmp(name, "fake_quantize")) continue;
        /* no rule, a decomposition that graph backward differentiates
         * (lstm_layer_backward): tests/nn/test_rnn_layer.c checks a graph's
         * second order through it against eager's, whose rule is checked here */
        if (!d->grad && d->decompose) continue;
        bool second;
        if (!op_case_count(name, &second)) {
            test_failed++;
            fprintf(stderr, "%s is differentiable but has no gradcheck case in gradcheck_cases.h\n", name);
            continue;
        }
        if (!d->grad) {
            test_failed++;
            fprintf(stderr, "%s is not marked OARI_F_NONDIFF but has no gradient rule\n", name);
            continue;
        }
        op_case table;
        void *table_ctx = NULL;
        bool from_table = ew_row_case(name, &table, &table_ctx);
        for (int i = 0; i < N_OP_CASES + from_table; i++) {
            const op_case *c = i < N_OP_CASES ? &op_cases[i] : &table;
            if (strcmp(c->op, name)) continue;
            char label[128];
            snprintf(label, sizeof label, "%s%s%s", name, c->label[0] ? " / " : "", c->label);
            oar_pool *p = oar_pool_push();
            bool ok = gradcheck(label, c->fn, i < N_OP_CASES ? NULL : table_ctx, c->n, c->in, &c->o);
            oar_pool_pop(p);
            if (!ok) wrong++;
        }
    }
    /* every case names a real op */
    for (int i = 0; i < N_OP_CASES; i++) CHECK(oari_op_lookup(op_cases[i].op) >= 0);
    if (wrong) printf("%d gradcheck case(s) failed; see above\n", wrong);
    return test_summary();
}

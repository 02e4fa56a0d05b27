/* The status a failure returns matches its message: a shape error inside
 * a gradient rule comes back as OAR_ERR_INVALID with the op's shape
 * message, not as out-of-memory (which every rule used to return when one
 * of its ops failed), and a real allocation failure there stays NOMEM. */
#include "test.h"
#include "alloc_fail.h"
#include "ops/op.h"

/* Runs op's gradient rule on saved inputs `in` and an incoming gradient
 * gout of the wrong shape; returns the rule's status. */
static int run_rule(oari_op op, int n_in, oar_tensor *const *in, oar_tensor *out, oar_tensor *gout) {
    const oari_op_def *def = oari_op_defs[op];
    oari_meta in_meta[4], out_meta[1];
    for (int i = 0; i < n_in; i++) oari_meta_from(&in_meta[i], in[i]);
    oari_meta_from(&out_meta[0], out);
    oari_attrs attrs = {0};
    bool needs[4] = {true, true, true, true};
    oar_tensor *gin[4] = {0}, *outs[1] = {out};
    oari_grad_ctx g = {.op = op, .attrs = &attrs, .n_in = n_in, .n_out = 1, .in = in, .in_meta = in_meta,
                       .out = outs, .out_meta = out_meta, .gout = &gout, .needs = needs, .gin = gin};
    oar_clear_error();
    return def->grad(&g);
}

static void test_shape_error_in_rule(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *x = oar_rand(OAR_F64, 2, (int64_t[]){2, 3});
    oar_tensor *y = oar_rand(OAR_F64, 2, (int64_t[]){2, 3});
    oar_tensor *bad = oar_ones(OAR_F64, 1, (int64_t[]){4}); /* does not broadcast to [2, 3] */
    struct { oari_op op; int n_in; } cases[] = {
        {OARI_OP_exp, 1}, {OARI_OP_sin, 1}, {OARI_OP_mul, 2}, {OARI_OP_div, 2}, {OARI_OP_tanh, 1},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        oar_tensor *in[2] = {x, y};
        oar_tensor *out = cases[c].n_in == 1 ? oari_call1(cases[c].op, x, NULL) : oari_call2(cases[c].op, x, y, NULL);
        int st = run_rule(cases[c].op, cases[c].n_in, in, out, bad);
        if (st != OAR_ERR_INVALID || !strstr(oar_last_error(), "broadcast"))
            fprintf(stderr, "%s's rule: status %d (%s), message \"%s\"\n", oari_op_name(cases[c].op), st,
                    oar_status_string(st), oar_last_error());
        CHECK(st == OAR_ERR_INVALID);
        CHECK(strstr(oar_last_error(), "broadcast") != NULL);
    }
    /* matmul's rule: gout [2, 5] against B [3, 4] */
    oar_tensor *b = oar_rand(OAR_F64, 2, (int64_t[]){3, 4});
    oar_tensor *mm[2] = {x, b};
    oar_tensor *gm = oar_ones(OAR_F64, 2, (int64_t[]){2, 5});
    int st = run_rule(OARI_OP_matmul, 2, mm, oar_matmul(x, b), gm);
    CHECK(st == OAR_ERR_INVALID);
    CHECK(strstr(oar_last_error(), "matmul") != NULL);
    oar_pool_pop(p);
}

/* Out of memory while a rule runs stays NOMEM, and says so. */
static void test_nomem_in_rule(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *x = oar_rand(OAR_F64, 2, (int64_t[]){64, 64});
    oar_tensor *out = oar_exp(x), *g = oar_ones_like(out);
    oar_tensor *in[1] = {x};
    oar_memory_empty_cache(); /* so that the rule's allocations reach the hook */
    n_calls = 0;
    fail_at = 0; /* the rule's first allocation fails */
    int st = run_rule(OARI_OP_exp, 1, in, out, g);
    fail_at = -1;
    CHECK(st == OAR_ERR_NOMEM);
    CHECK(strstr(oar_last_error(), "out of memory") != NULL);
    oar_pool_pop(p);
}

/* Through the engine: an op recorded with a saved input that is then
 * written in place fails backward with the state status and its message. */
static void test_engine_status(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *x = oar_rand(OAR_F64, 1, (int64_t[]){5});
    oar_tensor_set_requires_grad(x, true);
    oar_tensor *t = oar_mul(x, oar_scalar(2.0));
    oar_tensor *loss = oar_sum(oar_sin(t), 0, NULL, false);
    oar_no_grad_push();
    CHECK(oar_copy_(t, oar_zeros_like(t)) == 0); /* sin saved t */
    oar_no_grad_pop();
    oar_clear_error();
    int st = oar_backward(loss, NULL);
    CHECK(st == OAR_ERR_STATE);
    CHECK(strstr(oar_last_error(), "in-place") != NULL);
    oar_pool_pop(p);
}

int main(void) {
    oar_set_allocator(failing_alloc, NULL);
    RUN(test_shape_error_in_rule);
    RUN(test_nomem_in_rule);
    RUN(test_engine_status);
    oar_memory_empty_cache();
    oar_set_allocator(NULL, NULL);
    return test_summary();
}

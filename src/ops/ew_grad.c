/* The tensor reading of the elementwise vocabulary: op calls made once per
 * gradient rule, and the chain rule (src/ops/ew_grad.h). */
#include "ew_grad.h"

static oar_tensor *memo_find(const oari_ew_tctx *t, int op, oar_tensor *const *in, double v) {
    for (int k = 0; k < t->n; k++)
        if (t->memo[k].op == op && t->memo[k].in[0] == in[0] && t->memo[k].in[1] == in[1] &&
            t->memo[k].in[2] == in[2] && (op >= 0 || t->memo[k].v == v))
            return t->memo[k].out;
    return NULL;
}

static oar_tensor *memo_add(oari_ew_tctx *t, int op, oar_tensor *const *in, double v, oar_tensor *out) {
    if (out && t->n < OARI_EW_MEMO) {
        t->memo[t->n].op = op;
        for (int k = 0; k < 3; k++) t->memo[t->n].in[k] = in[k];
        t->memo[t->n].v = v;
        t->memo[t->n++].out = out;
    }
    return out;
}

oar_tensor *oari_ew_op(oari_ew_tctx *t, oari_op op, int n, oar_tensor *a, oar_tensor *b, oar_tensor *c) {
    oar_tensor *in[3] = {a, b, c};
    for (int k = 0; k < n; k++)
        if (!in[k]) return NULL; /* an earlier call failed: its error is pending */
    oar_tensor *have = memo_find(t, (int)op, in, 0);
    if (have) return have;
    oar_tensor *args[3] = {a, b, c};
    /* where over two Python numbers would be f32 (the default dtype): give
     * it the dtype of the input being differentiated */
    if (op == OARI_OP_where && b->wrapped_number && c->wrapped_number &&
        !(args[1] = oar_cast(b, t->g->in_meta[0].dtype)))
        return NULL;
    return memo_add(t, (int)op, in, 0, oari_call(op, n, args, NULL));
}

oar_tensor *oari_ew_const(oari_ew_tctx *t, double v) {
    oar_tensor *none[3] = {NULL, NULL, NULL};
    oar_tensor *have = memo_find(t, -1, none, v);
    return have ? have : memo_add(t, -1, none, v, oar_scalar(v));
}

/* conj on complex tensors; real ones pass through (no copy) */
static oar_tensor *cj(oar_tensor *t) { return t && oar_dtype_is_complex(t->dtype) ? oar_conj(t) : t; }

int oari_ew_chain(oari_grad_ctx *g, int i, oar_tensor *d, bool divide, bool sum_to) {
    oar_tensor *r = divide ? oar_div(g->gout[0], cj(d)) : oar_mul(g->gout[0], cj(d));
    g->gin[i] = sum_to ? oari_sum_to(r, &g->in_meta[i]) : r;
    return g->gin[i] ? 0 : oari_fail_status();
}

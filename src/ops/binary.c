/* Binary (broadcasting) elementwise ops: definitions and public functions.
 * Kernels: src/backends/cpu/cpu_binary.c. */
#include "op.h"

#include <math.h>

/* BOOTSTRAP: weak until reduce.c and movement.c land; removed at integration. */
oar_tensor *oar_sum(oar_tensor *, int, const int64_t *, bool) __attribute__((weak));
oar_tensor *oar_reshape(oar_tensor *, int, const int64_t *) __attribute__((weak));

typedef enum {
    B_ARITH,    /* promoted dtype (add, sub, mul, maximum, ...) */
    B_TRUEDIV,  /* promoted; ints -> f32 (div, atan2) */
    B_COMPARE,  /* compute in promoted dtype, out bool */
    B_LOGICAL,  /* any dtype, out bool */
} binary_kind;

static int binary_infer(oari_infer *c, binary_kind kind, bool complex_ok) {
    const oar_tensor *a = c->in[0], *b = c->in[1];
    int nd = oari_broadcast_shapes(c->op, a->ndim, a->shape, b->ndim, b->shape, c->out[0].shape);
    if (nd < 0) return OAR_ERR_INVALID;
    c->out[0].ndim = nd;
    oar_dtype d = oari_result_type(2, c->in);
    if (!complex_ok && oar_dtype_is_complex(d))
        return oari_error(OAR_ERR_INVALID, "%s: not defined for complex inputs (%s, %s)", c->op,
                          oar_dtype_name(a->dtype), oar_dtype_name(b->dtype));
    if (kind == B_TRUEDIV && oar_dtype_is_integral(d)) d = OAR_F32;
    if (kind == B_LOGICAL) {
        c->in_dtype[0] = c->in_dtype[1] = OAR_BOOL;
        c->kernel_dtype = OAR_BOOL;
        c->out[0].dtype = OAR_BOOL;
        return 0;
    }
    c->in_dtype[0] = c->in_dtype[1] = d;
    c->kernel_dtype = d;
    c->out[0].dtype = kind == B_COMPARE ? OAR_BOOL : d;
    return 0;
}

#define BINARY_DEF(NAME, KIND, COMPLEX_OK, GRAD, SAVED, FLAGS)                                 \
    static int infer_##NAME(oari_infer *c) { return binary_infer(c, KIND, COMPLEX_OK); }      \
    const oari_op_def oari_def_##NAME = {                                                     \
        .name = #NAME, .n_in = 2, .n_out = 1, .fusion = OARI_FUSE_BROADCAST,                  \
        .flags = OARI_F_BROADCAST | (FLAGS), .saved = SAVED, .infer = infer_##NAME,           \
        .grad = GRAD,                                                                         \
    };                                                                                        \
    oar_tensor *oar_##NAME(oar_tensor *a, oar_tensor *b) {                                    \
        return oari_call2(OARI_OP_##NAME, a, b, NULL);                                        \
    }

/* Sums a broadcast gradient back to the shape of the input it came from. */
oar_tensor *oari_sum_to(oar_tensor *g, const oari_meta *m) {
    if (!g) return NULL;
    int64_t dims[OAR_MAX_DIMS];
    int n = 0, lead = g->ndim - m->ndim;
    for (int i = 0; i < g->ndim; i++)
        if (i < lead || (m->shape[i - lead] == 1 && g->shape[i] != 1)) dims[n++] = i;
    oar_tensor *r = n ? oar_sum(g, n, dims, false) : g;
    if (r && (r->ndim != m->ndim)) r = oar_reshape(r, m->ndim, m->shape);
    if (r && r->dtype != m->dtype && !(oar_dtype_is_complex(r->dtype) && !oar_dtype_is_complex(m->dtype)))
        r = oar_cast(r, m->dtype);
    if (r && oar_dtype_is_complex(r->dtype) && !oar_dtype_is_complex(m->dtype))
        r = oar_cast(oar_real(r), m->dtype);
    return r;
}

static int grad_add(oari_grad_ctx *g) {
    for (int i = 0; i < 2; i++)
        if (g->needs[i] && !(g->gin[i] = oari_sum_to(g->gout[0], &g->in_meta[i]))) return OAR_ERR_NOMEM;
    return 0;
}

static int grad_mul(oari_grad_ctx *g) {
    /* d(a*b) = gy * conj(b), gy * conj(a) */
    for (int i = 0; i < 2; i++) {
        if (!g->needs[i]) continue;
        g->gin[i] = oari_sum_to(oar_mul(g->gout[0], oar_conj(g->in[1 - i])), &g->in_meta[i]);
        if (!g->gin[i]) return OAR_ERR_NOMEM;
    }
    return 0;
}

BINARY_DEF(add, B_ARITH, true, grad_add, 0, 0)
BINARY_DEF(mul, B_ARITH, true, grad_mul, OARI_SAVE_IN(0) | OARI_SAVE_IN(1), 0)

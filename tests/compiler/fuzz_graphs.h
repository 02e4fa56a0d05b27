/* The random-graph generator of the fusing compiler's fuzzers
 * (test_fusion_fuzz.c on the CPU, tests/devices/test_opencl_fusion.c on
 * OpenCL): SUBGRAPHS independent chains of up to MAX_OPS elementwise,
 * broadcast, reduce, row and movement ops over random shapes (sizes 1 and
 * odd tails, a dynamic batch "N"), traced as one graph. */
#ifndef OAR_TEST_FUZZ_GRAPHS_H
#define OAR_TEST_FUZZ_GRAPHS_H

#include "graph/graph_test_util.h"

#include <oar/graph.h>

#define SUBGRAPHS 20
#define MAX_OPS 12
#define SYM_SIZE 1000 /* traced dynamic dims are larger than this (1031, ...) */

static uint64_t rng_state;
static inline uint32_t rnd(uint32_t n) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state % n);
}

static const int64_t sizes[] = {1, 2, 3, 5, 7, 16, 33};

typedef struct sub_spec {
    int ndim;
    int64_t xs[5], ys[5]; /* x's and y's shapes; -1: the dynamic batch */
    int yndim;
    uint64_t seed;        /* the op sequence */
} sub_spec;

typedef struct fuzz_case {
    sub_spec sub[SUBGRAPHS];
} fuzz_case;

static inline bool is_sym(int64_t n) { return n > SYM_SIZE; }

/* Whether b broadcasts against a (trailing alignment, equal or 1). */
static inline bool broadcasts(oar_tensor *a, oar_tensor *b) {
    int na = oar_tensor_ndim(a), nb = oar_tensor_ndim(b);
    for (int i = 1; i <= na && i <= nb; i++) {
        int64_t x = oar_tensor_shape(a)[na - i], y = oar_tensor_shape(b)[nb - i];
        if (x != y && x != 1 && y != 1) return false;
    }
    return true;
}

static oar_tensor *unary(oar_tensor *x) {
    switch (rnd(9)) {
    case 0: return oar_tanh(x);
    case 1: return oar_sin(x);
    case 2: return oar_sigmoid(x);
    case 3: return oar_neg(x);
    case 4: return oar_abs(x);
    case 5: return oar_relu(x);
    case 6: return oar_exp(oar_tanh(x));
    case 7: return oar_mul_scalar(x, 0.75);
    default: return oar_add_scalar(oar_square(x), -0.5);
    }
}

static oar_tensor *binary(oar_tensor *a, oar_tensor *b) {
    switch (rnd(5)) {
    case 0: return oar_add(a, b);
    case 1: return oar_sub(a, b);
    case 2: return oar_mul(a, b);
    case 3: return oar_maximum(a, b);
    default: return oar_minimum(a, b);
    }
}

/* the row ops: softmax / log_softmax over a random dim, layer_norm over
 * the last dim (static sizes only: its weight is a constant) */
static oar_tensor *row_op(oar_tensor *x) {
    int nd = oar_tensor_ndim(x);
    if (!nd) return oar_neg(x);
    int d = (int)rnd((uint32_t)nd);
    switch (rnd(3)) {
    case 0: return oar_softmax(x, d);
    case 1: return oar_log_softmax(x, d);
    default: {
        int64_t n = oar_tensor_shape(x)[nd - 1];
        if (is_sym(n) || n < 2) return oar_softmax(x, d);
        /* a ramp along the row keeps its variance away from 0, where
         * rstd (up to 1/sqrt(eps)) would amplify any rounding difference
         * (the generator avoids ill-conditioned points, as gradcheck's does) */
        oar_tensor *ramp = oar_mul_scalar(oar_arange(0, (double)n, 1, OAR_F32), 4.0 / (double)n);
        oar_tensor *w = oar_add_scalar(oar_rand(OAR_F32, 1, &n), 0.5), *b = oar_randn(OAR_F32, 1, &n);
        return oar_layer_norm(oar_add(oar_tanh(x), ramp), 1, w, rnd(2) ? b : NULL, 1e-5);
    }
    }
}

static oar_tensor *reduce(oar_tensor *x) {
    int nd = oar_tensor_ndim(x);
    if (!nd) return oar_neg(x);
    int64_t dims[5];
    int n = 0;
    bool sym_dim = false;
    for (int d = 0; d < nd; d++)
        if (rnd(2)) {
            dims[n++] = d;
            sym_dim |= is_sym(oar_tensor_shape(x)[d]);
        }
    if (!n) dims[n++] = nd - 1, sym_dim |= is_sym(oar_tensor_shape(x)[nd - 1]);
    bool keep = rnd(2);
    switch (rnd(3)) {
    case 0: return oar_sum(x, n, dims, keep);
    case 1: return oar_amax(x, n, dims, keep);
    default: /* a mean over a dynamic dim is refused by the tracer: sum instead */
        return sym_dim ? oar_sum(x, n, dims, keep) : oar_mean(x, n, dims, keep);
    }
}

static oar_tensor *movement(oar_tensor *x) {
    int nd = oar_tensor_ndim(x);
    const int64_t *sh = oar_tensor_shape(x);
    int64_t ns[6];
    switch (rnd(4)) {
    case 0: { /* merge two adjacent dims */
        if (nd < 2) break;
        int d = (int)rnd((uint32_t)nd - 1);
        if (is_sym(sh[d + 1])) break;
        int k = 0;
        for (int i = 0; i < nd; i++) {
            if (i == d + 1) continue;
            ns[k++] = i == d ? sh[d] * sh[d + 1] : sh[i];
        }
        return oar_reshape(x, nd - 1, ns);
    }
    case 1: { /* unsqueeze */
        if (nd >= 5) break;
        int d = (int)rnd((uint32_t)nd + 1), k = 0;
        for (int i = 0; i <= nd; i++) ns[i] = i == d ? 1 : sh[k++];
        return oar_reshape(x, nd + 1, ns);
    }
    case 2: /* transpose */
        if (nd < 2) break;
        return oar_transpose(x, (int)rnd((uint32_t)nd), (int)rnd((uint32_t)nd));
    default: { /* slice with a step, or expand a size-1 dim */
        if (!nd) break;
        int d = (int)rnd((uint32_t)nd);
        if (is_sym(sh[d])) break;
        if (sh[d] == 1) {
            memcpy(ns, sh, (size_t)nd * sizeof *ns);
            ns[d] = 3;
            return oar_expand(x, nd, ns);
        }
        int64_t start = rnd((uint32_t)sh[d]), step = 1 + rnd(2);
        return oar_slice(x, d, start, sh[d], step);
    }
    }
    return unary(x);
}

static oar_tensor *subgraph(const sub_spec *s, oar_tensor *x, oar_tensor *y) {
    rng_state = s->seed;
    oar_tensor *vals[MAX_OPS + 2] = {x, y};
    int n = 2, n_ops = 1 + (int)rnd(MAX_OPS);
    for (int i = 0; i < n_ops; i++) {
        oar_tensor *a = vals[n - 1 - (rnd(3) ? 0 : rnd((uint32_t)n))], *r;
        switch (rnd(7)) {
        case 0: case 1: r = unary(a); break;
        case 6: r = row_op(a); break;
        case 2: case 3: {
            oar_tensor *b = vals[rnd((uint32_t)n)];
            r = broadcasts(a, b) ? binary(a, b) : binary(a, oar_scalar(0.5));
            break;
        }
        case 4: r = reduce(a); break;
        default: r = movement(a);
        }
        if (!r) return NULL;
        vals[n++] = r;
    }
    return vals[n - 1];
}

static inline int traced(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    const fuzz_case *fc = ctx;
    for (int i = 0; i < SUBGRAPHS; i++)
        if (!(out[i] = subgraph(&fc->sub[i], in[2 * i], in[2 * i + 1]))) return -1;
    return 0;
}

static inline void make_case(fuzz_case *fc, uint64_t seed) {
    rng_state = seed * 2654435761u + 1;
    for (int i = 0; i < SUBGRAPHS; i++) {
        sub_spec *s = &fc->sub[i];
        s->ndim = 1 + (int)rnd(4);
        bool dynamic = s->ndim >= 2 && rnd(2);
        for (int d = 0; d < s->ndim; d++) s->xs[d] = dynamic && d == 0 ? -1 : sizes[rnd(7)];
        /* y: a suffix of x's shape with some dims 1 */
        s->yndim = 1 + (int)rnd((uint32_t)s->ndim);
        for (int d = 0; d < s->yndim; d++) {
            int64_t xd = s->xs[s->ndim - s->yndim + d];
            s->ys[d] = rnd(3) ? xd : 1;
        }
        s->seed = rng_state ^ (0x9e3779b97f4a7c15ull * (uint64_t)(i + 1));
        if (!s->seed) s->seed = 1;
    }
}

static inline int64_t batch_of(int64_t d, int64_t n) { return d < 0 ? n : d; }

/* The input specs of case fc: 2 * SUBGRAPHS entries (x and y of each). */
static inline void case_specs(const fuzz_case *fc, oar_graph_input_spec *specs) {
    for (int i = 0; i < SUBGRAPHS; i++) {
        const sub_spec *s = &fc->sub[i];
        for (int k = 0; k < 2; k++) {
            oar_graph_input_spec *p = &specs[2 * i + k];
            memset(p, 0, sizeof *p);
            p->dtype = OAR_F32;
            p->ndim = k ? s->yndim : s->ndim;
            for (int d = 0; d < p->ndim; d++) {
                p->shape[d] = k ? s->ys[d] : s->xs[d];
                if (p->shape[d] < 0) p->dim_names[d] = "N";
            }
        }
    }
}

/* Case seed drawn into *fc, its input specs into specs (2 * SUBGRAPHS),
 * and traced: a new graph, or NULL with the tracer's error. */
static inline oar_graph *trace_case(uint64_t seed, fuzz_case *fc, oar_graph_input_spec *specs) {
    make_case(fc, seed);
    case_specs(fc, specs);
    return oar_trace(traced, fc, 2 * SUBGRAPHS, specs, SUBGRAPHS, NULL);
}

#endif

/* Graphs that hold every row of the elementwise table (tests/ew_rows.h)
 * in each dtype of its gen column, for the tests of the generated forms
 * (C: test_ew_forms.c, CUDA C: test_cuda_codegen.c, OpenCL C:
 * fused_forms() in tests/devices/test_backend_ops.c). Each row's op reads inputs in the
 * row's test range and its output is read by one more elementwise op, so
 * the two make one fused kernel: a graph of k rows compiles to k kernels
 * exactly when every row has a fused form. Rows that take attributes get
 * the ones below; gelu's tanh form is a graph of its own (alt). */
#ifndef OAR_TEST_EW_GRAPHS_H
#define OAR_TEST_EW_GRAPHS_H

#include "test.h"

#include <oar/graph.h>

#include "ew_rows.h"
#include "ops/op.h"

#define EW_GRAPH_ROWS 20 /* rows per graph: at most 60 inputs (the executor plans 64) */

typedef struct ew_graph {
    oar_dtype dt;                       /* the rows' kernel dtype */
    bool alt;                           /* integer attribute 0 set: the ALT forms */
    int n_rows, rows[EW_GRAPH_ROWS];    /* indices into ew_test_rows */
    int n_in;
    oar_graph_input_spec specs[3 * EW_GRAPH_ROWS];
    oar_tensor *inputs[3 * EW_GRAPH_ROWS]; /* CPU values, owned */
} ew_graph;

/* The dtypes the generated code takes, with their kinds. */
static const oar_dtype ew_gen_dtypes[] = {OAR_F32, OAR_F64, OAR_BOOL, OAR_U8, OAR_I32, OAR_I64};
static inline unsigned ew_kind_of(oar_dtype d) {
    return d == OAR_BOOL ? EW_K_B : d == OAR_F32 || d == OAR_F64 ? EW_K_R : EW_K_I;
}

static inline oari_attrs ew_row_attrs(const ew_test_row *r, bool alt) {
    oari_attrs a = {0};
    if (!strcmp(r->op, "leaky_relu")) a.nf = 1, a.f[0] = 0.07;
    if (!strcmp(r->op, "elu")) a.nf = 1, a.f[0] = 1.3;
    if (!strcmp(r->op, "softplus")) a.nf = 2, a.f[0] = 1.5, a.f[1] = 4;
    if (!strcmp(r->op, "clamp")) a.nf = 2, a.f[0] = -1, a.f[1] = 0.5;
    if (r->has_alt) a.ni = 1, a.i[0] = alt;
    return a;
}

/* y = op(in...), then one more op over y: logical_not (bool y), y + y
 * (float y), y == y (integers). */
static inline int ew_graph_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    const ew_graph *g = ctx;
    int k = 0;
    for (int j = 0; j < g->n_rows; j++) {
        const ew_test_row *r = &ew_test_rows[g->rows[j]];
        oari_attrs a = ew_row_attrs(r, g->alt);
        oar_tensor *y = oari_call((oari_op)oari_op_lookup(r->op), r->n_in, in + k, &a);
        k += r->n_in;
        if (!y) return -1;
        oar_dtype d = oar_tensor_dtype(y);
        out[j] = d == OAR_BOOL ? oar_logical_not(y) : oar_dtype_is_float(d) ? oar_add(y, y) : oar_eq(y, y);
        if (!out[j]) return -1;
    }
    return 0;
}

static uint64_t ew_graph_rng = 0x2545F4914F6CDD1Dull;
static inline double ew_graph_rand(void) {
    ew_graph_rng = ew_graph_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(ew_graph_rng >> 11) / 9007199254740992.0;
}

/* An input of row r: dtype d (where's condition: bool), [5, 7] (a) or [7]
 * (b, c: broadcast), in the row's range (integral where equality
 * matters: comparisons, integers). */
static inline oar_tensor *ew_graph_input(const ew_test_row *r, int k, oar_dtype d, oar_graph_input_spec *s) {
    if (r->n_in == 3 && k == 0) d = OAR_BOOL;
    int64_t n = k ? 7 : 35;
    *s = (oar_graph_input_spec){.dtype = d, .ndim = k ? 1 : 2, .shape = {k ? 7 : 5, 7}};
    if (!k) s->shape[1] = 7;
    double lo = k == 1 ? r->blo : r->lo, hi = k == 1 ? r->bhi : r->hi;
    bool integral = oar_dtype_is_integral(d) || r->out_bool;
    if (integral) lo = d == OAR_BOOL || d == OAR_U8 ? 0 : -3, hi = d == OAR_BOOL ? 2 : 4;
    double *v = malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++) {
        v[i] = lo + (hi - lo) * ew_graph_rand();
        if (integral) v[i] = floor(v[i]);
    }
    oar_tensor *t = oar_tensor_retain(oar_cast(oar_tensor_from_data(v, OAR_F64, s->ndim, s->shape), d));
    free(v);
    return t;
}

/* The next graph of dtype dt (alt: the rows with an ALT form, in it) from
 * row *cursor on; false when no row is left. */
static inline bool ew_graph_next(ew_graph *g, oar_dtype dt, bool alt, int *cursor) {
    memset(g, 0, sizeof *g);
    g->dt = dt;
    g->alt = alt;
    for (; *cursor < EW_N_TEST_ROWS && g->n_rows < EW_GRAPH_ROWS; (*cursor)++) {
        const ew_test_row *r = &ew_test_rows[*cursor];
        if (!r->n_in || !(r->gen & ew_kind_of(dt)) || (alt && !r->has_alt)) continue;
        g->rows[g->n_rows++] = *cursor;
        for (int k = 0; k < r->n_in; k++) {
            g->inputs[g->n_in] = ew_graph_input(r, k, dt, &g->specs[g->n_in]);
            g->n_in++;
        }
    }
    return g->n_rows > 0;
}

static inline void ew_graph_free(ew_graph *g) {
    for (int i = 0; i < g->n_in; i++) oar_tensor_release(g->inputs[i]);
    g->n_in = 0;
}

/* g traced and optimized for inference, or NULL. */
static inline oar_graph *ew_graph_trace(ew_graph *g) {
    oar_graph *t = oar_trace(ew_graph_fn, g, g->n_in, g->specs, g->n_rows, NULL);
    if (t) oar_graph_optimize(t, OAR_PASSES_INFERENCE, 0);
    return t;
}

/* Whether output values a (reference) and b agree: exactly for integers
 * and bool, within tol relative to max(1, |a|) for floats; NaN with NaN. */
static inline bool ew_graph_same(oar_tensor *a, oar_tensor *b, double tol, const char *what) {
    if (!a || !b || oar_tensor_numel(a) != oar_tensor_numel(b) || oar_tensor_dtype(a) != oar_tensor_dtype(b)) {
        fprintf(stderr, "%s: no output, or of another shape or dtype\n", what);
        return false;
    }
    double *x = test_values(a), *y = test_values(b);
    bool ok = true;
    for (int64_t i = 0; ok && i < oar_tensor_numel(a); i++) {
        if ((isnan(x[i]) && isnan(y[i])) || fabs(x[i] - y[i]) <= tol * fmax(1.0, fabs(x[i]))) continue;
        fprintf(stderr, "%s: element %lld is %.17g, expected %.17g\n", what, (long long)i, y[i], x[i]);
        ok = false;
    }
    free(x);
    free(y);
    return ok;
}

#endif

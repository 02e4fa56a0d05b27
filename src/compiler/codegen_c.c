/* C code generation for one kernel (compiler.h).
 *
 * A kernel is written by evaluating its root's output at a symbolic index:
 * one C expression per dim of the root, the loop variables i0, i1, ...
 * Evaluating a value at an index either loads a leaf (a[k][linear index]),
 * rewrites the index through a view (reshape, permute, expand, slice: index
 * arithmetic, never a copy), or emits `const T tN = <formula>;` over its
 * inputs evaluated at their broadcast indices. A (value, index) pair is
 * emitted once per scope (common subexpressions).
 *
 * Reductions (sum, prod, amax, amin, and the row reductions inside softmax,
 * log_softmax and layer_norm) become loops over the reduced dims, r<k>_<j>,
 * accumulating into acc<k>. Every reduction must be evaluated at an index
 * that only involves the "outer" root dims, so it is computed once per outer
 * iteration and read by the whole inner loop (the row pattern: max, sum of
 * exp, then the normalised row). A first pass over the kernel finds which
 * root dims the reductions' indices use; those become the outer loops
 * (parallel) and the rest the inner loops (simd). Expressions whose index
 * involves only outer dims are hoisted out of the inner loop. A reduction
 * that would need an inner index (recomputed per element) or another
 * reduction's loop variable makes the generator give up on that member
 * (status 1, *bad), and the grouping takes it out of the kernel. */
#include "compiler.h"

#include "ew_math_text.h" /* oari_ew_math_text: src/ops/ew_math.h, embedded by CMake */
#include "vmath_text.h"   /* oari_vmath_text: src/backends/cpu/cpu_vmath.h, embedded by CMake */

#include <ctype.h>
#include <math.h>
#include <stdlib.h>

/* OpenMP threads only above this many elements touched by a kernel (a
 * parallel region costs a few microseconds): the generated code reads
 * OAR_PAR_MIN, which bench/bench_fusion.c overrides to find the crossover. */
#define PARALLEL_MIN "OAR_PAR_MIN"
#define PARALLEL_MIN_DEFAULT 32768
#define MAX_RED_DEPTH 8

#define OARI_STR_(x) #x
#define OARI_STR(x) OARI_STR_(x)

enum { SCOPE_INNER = -1, SCOPE_OUTER = 0 }; /* > 0: the reduction body at that depth */

typedef struct idx {
    int nd;
    const char *c[OAR_MAX_DIMS];
} idx;

typedef struct memo {
    char *key;
    const char *var;
    int scope;
} memo;

typedef struct red_frame {
    int id;         /* its variables are r<id>_<j> */
    oari_sbuf body;
} red_frame;

typedef struct cg {
    const oar_graph *g;
    const oari_renderer *r; /* the back end: C or OpenCL C */
    const int *kr;  /* kernel root of every node */
    int root;
    bool analysis;  /* first pass: every root dim outer; learn which ones reductions use */
    bool flat;      /* every member elementwise over the root's shape: one flat loop */
    bool column;    /* a reduction over leading dims: vector accumulators across the kept
                     * trailing dims (write_column_reduction) */
    unsigned outer_mask, ref_mask;
    int n_reductions;
    const char *out_lin;  /* the output's linear index at the pass's index (not flat) */
    uint64_t elsewhere;   /* bit k: leaf a<k> is read at another index than the output's */
    bool store_in_loop;   /* the output is written inside a reduction's loop too (softmax's row) */
    int *args, n_args, cap_args;
    memo *memo;
    int n_memo, cap_memo;
    char **strs;    /* every string made here, freed at the end */
    int n_strs, cap_strs;
    oari_sbuf outer, inner;
    red_frame red[MAX_RED_DEPTH];
    int depth;
    int n_tmp, n_red;
    int64_t work_numel; /* the largest tensor the kernel touches (trace sizes) */
    const char *work_expr;
    int bad;        /* member to take out, or -1 */
    int status;     /* 0, 1 (give up: bad), or a negative error */
} cg;

/* ---- strings ------------------------------------------------------------------- */

static const char *keep(cg *c, char *s) {
    if (!s) {
        if (!c->status) c->status = OAR_ERR_NOMEM;
        return "0";
    }
    if (c->n_strs == c->cap_strs) {
        int cap = c->cap_strs ? 2 * c->cap_strs : 64;
        char **p = oari_realloc(c->strs, (size_t)c->cap_strs * sizeof *p, (size_t)cap * sizeof *p);
        if (!p) {
            oari_strfree(s);
            if (!c->status) c->status = OAR_ERR_NOMEM;
            return "0";
        }
        c->strs = p;
        c->cap_strs = cap;
    }
    c->strs[c->n_strs++] = s;
    return s;
}

static OARI_PRINTF(2, 3) const char *strf(cg *c, const char *fmt, ...) {
    oari_sbuf b = {0};
    va_list ap;
    va_start(ap, fmt);
    oari_sbuf_vprintf(&b, fmt, ap);
    va_end(ap);
    if (b.failed) {
        oari_sbuf_free(&b);
        return keep(c, NULL);
    }
    const char *s = keep(c, oari_strdup(oari_sbuf_str(&b)));
    oari_sbuf_free(&b);
    return s;
}

static void fail(cg *c, int bad) {
    if (!c->status) {
        c->status = 1;
        c->bad = bad;
    }
}

/* Root dims referenced by s (tokens i<d>), as a bit mask; *rvars: whether
 * s uses a reduction variable (r<k>_<j>). */
static unsigned scan_vars(const char *s, bool *rvars) {
    unsigned m = 0;
    for (const char *p = s; *p; p++) {
        if ((p > s && (isalnum((unsigned char)p[-1]) || p[-1] == '_')) || !isdigit((unsigned char)p[1]))
            continue;
        if (*p == 'i') m |= 1u << atoi(p + 1);
        else if (*p == 'r' && rvars) *rvars = true;
    }
    return m;
}

static unsigned idx_vars(const idx *I, bool *rvars) {
    unsigned m = 0;
    if (rvars) *rvars = false;
    for (int d = 0; d < I->nd; d++) m |= scan_vars(I->c[d], rvars);
    return m;
}

/* The scope an expression at index I belongs in. */
static int scope_of(cg *c, const idx *I) {
    bool rv;
    unsigned m = idx_vars(I, &rv);
    if (rv) return c->depth;
    if (m & ~c->outer_mask) return c->column ? c->depth : SCOPE_INNER;
    return SCOPE_OUTER;
}

static oari_sbuf *scope_buf(cg *c, int scope) {
    if (scope == SCOPE_INNER) return &c->inner;
    if (scope == SCOPE_OUTER) return &c->outer;
    return &c->red[scope - 1].body;
}

/* ---- dims and indices ------------------------------------------------------------ */

static const char *dim_str(cg *c, int v, int d) {
    const oari_gvalue *gv = &c->g->values[v];
    if (gv->sym[d] < 0) return strf(c, "%lld", (long long)gv->shape[d]);
    if (gv->smul[d] == 1) return strf(c, "s[%d]", gv->sym[d]);
    return strf(c, "(%d*s[%d])", gv->smul[d], gv->sym[d]);
}

/* The product of dims [from, to) of v: "1", a number, or a product. */
static const char *dims_prod(cg *c, int v, int from, int to) {
    const oari_gvalue *gv = &c->g->values[v];
    long long k = 1;
    oari_sbuf b = {0};
    for (int d = from; d < to; d++) {
        if (gv->sym[d] < 0) k *= gv->shape[d];
        else oari_sbuf_printf(&b, "%s%s", b.len ? "*" : "", dim_str(c, v, d));
    }
    const char *s;
    if (!b.len) s = strf(c, "%lld", k);
    else if (k == 1) s = strf(c, "(%s)", oari_sbuf_str(&b));
    else s = strf(c, "(%lld*%s)", k, oari_sbuf_str(&b));
    bool failed = b.failed;
    oari_sbuf_free(&b);
    if (failed && !c->status) c->status = OAR_ERR_NOMEM;
    return s;
}

static int64_t trace_numel(const oari_gvalue *v) {
    int64_t n = 1;
    for (int d = 0; d < v->ndim; d++) n *= v->shape[d];
    return n;
}

static void note_work(cg *c, int v) {
    int64_t n = trace_numel(&c->g->values[v]);
    if (n > c->work_numel) {
        c->work_numel = n;
        c->work_expr = dims_prod(c, v, 0, c->g->values[v].ndim);
    }
}

static bool is_zero(const char *s) { return !strcmp(s, "0"); }
static bool is_one(const char *s) { return !strcmp(s, "1"); }

/* sum over d of I[d] * stride[d] (skipping zero indices and unit strides). */
static const char *linear(cg *c, const idx *I, const char *const *stride) {
    oari_sbuf b = {0};
    for (int d = 0; d < I->nd; d++) {
        if (is_zero(I->c[d]) || is_zero(stride[d])) continue;
        if (b.len) oari_sbuf_puts(&b, " + ");
        if (is_one(stride[d])) oari_sbuf_puts(&b, I->c[d]);
        else oari_sbuf_printf(&b, "%s*%s", I->c[d], stride[d]);
    }
    const char *s = b.len ? strf(c, "%s", oari_sbuf_str(&b)) : "0";
    if (b.failed && !c->status) c->status = OAR_ERR_NOMEM; /* else "0" would stand for the index */
    oari_sbuf_free(&b);
    return s;
}

static void contiguous_strides(cg *c, int v, const char **stride) {
    int nd = c->g->values[v].ndim;
    for (int d = 0; d < nd; d++) stride[d] = dims_prod(c, v, d + 1, nd);
}

/* The index of input value `in` read by an elementwise op whose output
 * (value `out`) is at I: broadcast dims read index 0. */
static idx broadcast_index(cg *c, int in, int out, const idx *I) {
    const oari_gvalue *vi = &c->g->values[in], *vo = &c->g->values[out];
    idx J = {.nd = vi->ndim};
    if (c->flat) {
        J.nd = 1;
        J.c[0] = I->c[0];
        return J;
    }
    int lead = vo->ndim - vi->ndim;
    for (int d = 0; d < vi->ndim; d++)
        J.c[d] = vi->shape[d] == 1 && vo->shape[d + lead] != 1 ? "0" : I->c[d + lead];
    return J;
}

/* reshape: I over out's shape -> J over in's shape, block by block (runs
 * of dims with equal products map onto each other; a run of one dim on
 * both sides keeps its index, others go through a linear index). */
static idx reshape_index(cg *c, int in, int out, const idx *I) {
    const oari_gvalue *S = &c->g->values[in], *T = &c->g->values[out];
    idx J = {.nd = S->ndim};
    int i = 0, j = 0;
    while (i < S->ndim || j < T->ndim) {
        if (i < S->ndim && S->shape[i] == 1) { J.c[i++] = "0"; continue; }
        if (j < T->ndim && T->shape[j] == 1) { j++; continue; }
        if (i >= S->ndim || j >= T->ndim) { /* only ones may remain; defensive */
            while (i < S->ndim) J.c[i++] = "0";
            break;
        }
        int i0 = i, j0 = j;
        int64_t ps = S->shape[i++], pt = T->shape[j++];
        while (ps != pt && ps && pt) {
            if (ps < pt) ps *= S->shape[i++];
            else pt *= T->shape[j++];
            if (i > S->ndim || j > T->ndim) break;
        }
        if (ps != pt || !ps) { /* sizes with zeros: one block of everything left */
            i = S->ndim;
            j = T->ndim;
        }
        if (i - i0 == 1 && j - j0 == 1) {
            J.c[i0] = I->c[j0];
            continue;
        }
        /* block-linear index over T's dims [j0, j), unravelled over S's [i0, i) */
        oari_sbuf L = {0};
        for (int t = j0; t < j; t++) {
            if (is_zero(I->c[t])) continue;
            const char *st = dims_prod(c, out, t + 1, j);
            if (L.len) oari_sbuf_puts(&L, " + ");
            if (is_one(st)) oari_sbuf_puts(&L, I->c[t]);
            else oari_sbuf_printf(&L, "%s*%s", I->c[t], st);
        }
        const char *lin = L.len ? strf(c, "(%s)", oari_sbuf_str(&L)) : "0";
        if (L.failed && !c->status) c->status = OAR_ERR_NOMEM;
        oari_sbuf_free(&L);
        for (int s = i0; s < i; s++) {
            if (S->shape[s] == 1) { J.c[s] = "0"; continue; }
            const char *st = dims_prod(c, in, s + 1, i);
            const char *q = is_one(st) ? lin : strf(c, "(%s/%s)", lin, st);
            J.c[s] = s == i0 ? q : strf(c, "(%s%%%s)", q, dim_str(c, in, s));
        }
    }
    return J;
}

static const char *attr_str(cg *c, const oari_gnode *n, int k) {
    if (n->isym[k] < 0) return strf(c, "%lld", (long long)n->attrs.i[k]);
    return strf(c, "(%d*s[%d])", n->imul[k], n->isym[k]);
}

static bool view_supported(const oari_gnode *n) {
    switch (n->op) {
    case OARI_OP_view: case OARI_OP_permute: case OARI_OP_expand: return true;
    case OARI_OP_slice: return n->attrs.ni >= 4 && n->attrs.i[3] >= 1;
    default: return false;
    }
}

/* The index of a view node's input, given its output's index. */
static idx view_index(cg *c, const oari_gnode *n, const idx *I) {
    int in = n->in[0], out = n->out[0];
    const oari_gvalue *vi = &c->g->values[in], *vo = &c->g->values[out];
    idx J = {.nd = vi->ndim};
    switch (n->op) {
    case OARI_OP_view: return reshape_index(c, in, out, I);
    case OARI_OP_permute:
        for (int k = 0; k < vo->ndim; k++) J.c[n->attrs.i[k]] = I->c[k];
        return J;
    case OARI_OP_expand: {
        int lead = vo->ndim - vi->ndim;
        for (int d = 0; d < vi->ndim; d++)
            J.c[d] = vi->shape[d] == 1 && vo->shape[d + lead] != 1 ? "0" : I->c[d + lead];
        return J;
    }
    default: { /* slice */
        int dim = (int)n->attrs.i[0];
        for (int d = 0; d < vi->ndim; d++) J.c[d] = I->c[d];
        const char *start = attr_str(c, n, 1), *step = attr_str(c, n, 3);
        const char *x = is_one(step) ? I->c[dim] : strf(c, "%s*%s", I->c[dim], step);
        J.c[dim] = is_zero(start) ? x : strf(c, "(%s + %s)", start, x);
        return J;
    }
    }
}

/* ---- memo ------------------------------------------------------------------------ */

static char *memo_key(const char *tag, int v, const idx *I) {
    oari_sbuf b = {0};
    oari_sbuf_printf(&b, "%s%d@", tag, v);
    for (int d = 0; d < I->nd; d++) oari_sbuf_printf(&b, "%s,", I->c[d]);
    char *s = b.failed ? NULL : oari_strdup(oari_sbuf_str(&b));
    oari_sbuf_free(&b);
    return s;
}

static const char *memo_find(cg *c, const char *key) {
    for (int i = c->n_memo - 1; i >= 0; i--)
        if (!strcmp(c->memo[i].key, key)) return c->memo[i].var;
    return NULL;
}

static void memo_add(cg *c, char *key, const char *var, int scope) {
    if (!key) {
        if (!c->status) c->status = OAR_ERR_NOMEM;
        return;
    }
    if (c->n_memo == c->cap_memo) {
        int cap = c->cap_memo ? 2 * c->cap_memo : 64;
        memo *m = oari_realloc(c->memo, (size_t)c->cap_memo * sizeof *m, (size_t)cap * sizeof *m);
        if (!m) {
            oari_strfree(key);
            if (!c->status) c->status = OAR_ERR_NOMEM;
            return;
        }
        c->memo = m;
        c->cap_memo = cap;
    }
    c->memo[c->n_memo++] = (memo){key, var, scope};
}

/* Drops what was computed inside the reduction body at `scope`. */
static void memo_pop_scope(cg *c, int scope) {
    int w = 0;
    for (int i = 0; i < c->n_memo; i++) {
        if (c->memo[i].scope == scope) oari_strfree(c->memo[i].key);
        else c->memo[w++] = c->memo[i];
    }
    c->n_memo = w;
}

/* ---- leaves and temporaries ------------------------------------------------------ */

static int arg_of(cg *c, int v) {
    for (int k = 0; k < c->n_args; k++)
        if (c->args[k] == v) return k;
    if (c->n_args == c->cap_args) {
        int cap = c->cap_args ? 2 * c->cap_args : 8;
        int *a = oari_realloc(c->args, (size_t)c->cap_args * sizeof *a, (size_t)cap * sizeof *a);
        if (!a) {
            if (!c->status) c->status = OAR_ERR_NOMEM;
            return 0;
        }
        c->args = a;
        c->cap_args = cap;
    }
    c->args[c->n_args] = v;
    return c->n_args++;
}

/* Emits `const T tN = expr;` in the scope of I and returns tN. */
static const char *emit_tmp(cg *c, const char *T, const idx *I, const char *expr) {
    const char *t = strf(c, "t%d", c->n_tmp++);
    oari_sbuf_printf(scope_buf(c, scope_of(c, I)), "    const %s %s = %s;\n", T, t, expr);
    return t;
}

static const char *literal_of(cg *c, oar_tensor *t) {
    double x = oari_load_f64(oar_tensor_data(t), t->dtype);
    const char *T = oari_c_type(t->dtype);
    if (isnan(x)) return strf(c, "(%s)NAN", T);
    if (isinf(x)) return strf(c, "(%s)%sINFINITY", T, x < 0 ? "-" : "");
    return strf(c, "(%s)%.17g", T, x);
}

static const char *load(cg *c, int v, const idx *I) {
    const oari_gvalue *gv = &c->g->values[v];
    if (gv->kind == OARI_V_CONST && gv->constant->numel == 1) return literal_of(c, gv->constant);
    note_work(c, v);
    int k = arg_of(c, v);
    const char *stride[OAR_MAX_DIMS];
    const char *lin;
    if (c->flat) {
        lin = gv->ndim == 0 ? "0" : I->c[0]; /* a 0-d value: the same element everywhere */
    } else {
        if (gv->kind == OARI_V_CONST) {
            for (int d = 0; d < gv->ndim; d++)
                stride[d] = strf(c, "%lld", (long long)gv->constant->strides[d]);
        } else {
            contiguous_strides(c, v, stride);
        }
        lin = linear(c, I, stride);
    }
    /* the output may be written over this leaf only if every read of it is
     * at the element being written (same index, same shape and dtype) */
    const oari_gvalue *ov = &c->g->values[c->args[0]];
    if (gv->kind == OARI_V_CONST || gv->dtype != ov->dtype || gv->ndim != ov->ndim ||
        memcmp(gv->shape, ov->shape, (size_t)gv->ndim * sizeof *gv->shape) ||
        memcmp(gv->sym, ov->sym, (size_t)gv->ndim) || strcmp(lin, c->flat ? "i0" : c->out_lin))
        c->elsewhere |= k < 64 ? 1ull << k : 0;
    return emit_tmp(c, oari_c_type(gv->dtype), I, strf(c, "a%d[%s]", k, lin));
}

/* ---- reductions ------------------------------------------------------------------ */

typedef enum { R_SUM, R_PROD, R_MAX, R_MIN } red_kind;
/* x, exp(x - m), (x - m)^2 in double; exp(x - m) also stored into the output row at
 * the same position (a softmax root reads it back instead of a second exp) */
typedef enum { B_VALUE, B_EXP_SUB, B_SQ_DEV, B_EXP_SUB_STORE } body_kind;

static const char *eval(cg *c, int v, const idx *I);

/* The lanes W of one 64-byte vector of T (16 floats, 8 doubles) when a
 * C loop of static length n pays to run in blocks of W (below), else 0:
 * float or double, n with a tail (not a multiple of W), 2W <= n < 8W, and
 * no argument narrower than T (a byte mask would make the simd loop want
 * 64 lanes, more than a block has: gcc then leaves it scalar). Longer
 * loops, and loops without a tail, ran as fast or faster as one `omp simd`
 * loop (rows 17 to 1024 wide). */
static int block_lanes(const oar_graph *g, const int *args, int n_args, oar_dtype T, int64_t n) {
    if (T != OAR_F32 && T != OAR_F64) return 0;
    int W = T == OAR_F32 ? 16 : 8;
    if (n % W == 0 || n < 2 * W || n >= 8 * W) return 0;
    for (int a = 0; a < n_args; a++)
        if (oar_dtype_size(g->values[args[a]].dtype) < oar_dtype_size(T)) return 0;
    return W;
}

/* The length of the innermost reduced loop when it runs in blocks, else 0
 * (T: the reduction's type, x's). */
static int64_t block_length(const cg *c, const oari_gvalue *xv, unsigned mask, const char *T) {
    int last = -1;
    for (int d = 0; d < xv->ndim; d++)
        if (mask & (1u << d)) last = d;
    if (!c->r->openmp || last < 0 || xv->sym[last] >= 0 || strcmp(T, oari_c_type(xv->dtype))) return 0;
    int64_t n = xv->shape[last];
    return block_lanes(c->g, c->args, c->n_args, xv->dtype, n) ? n : 0;
}

/* The innermost loop of a C reduction in blocks of one 64-byte vector of T
 * (16 floats or 8 doubles). Each block's body runs in a fixed-length simd
 * loop into a lane array that the compiler keeps in a register, and folds
 * into vector accumulators (oar_vd8 ...: the prelude's vector types). The
 * last block is moved back to end at the row's end, overlapping the one
 * before it: sums and products mask the overlap to their identity, max and
 * min see those elements twice (harmless). An `omp simd reduction` over a
 * row instead peels for alignment and ends in a scalar tail (a polynomial
 * exp per element there), and folds its lanes through memory: for 73-wide
 * rows that was twice the time of 64-wide ones. A store in the body
 * (softmax's row) rewrites the overlap with the value it already wrote;
 * the output is `restrict` there (not read at another index). Lanes fold
 * in a fixed order, so the result does not depend on the thread count. */
static void write_blocked_reduction(cg *c, oari_sbuf *o, const char *body, int id, int n_loops, int x,
                                    unsigned mask, int64_t n, red_kind kind,
                                    const char *T, const char *LT, const char *accT, const char *val,
                                    const char *acc, const char *nan, const char *init) {
    bool flt = !strcmp(T, "float"), acc_d = !strcmp(accT, "double"), lanes_d = !strcmp(LT, "double");
    int W = flt ? 16 : 8, AL = acc_d ? 8 : 16, K = W / AL; /* block, accumulator lanes, accumulators */
    const char *AV = acc_d ? "oar_vd8" : "oar_vf16", *VI = acc_d ? "oar_vl8" : "oar_vi16";
    bool minmax = kind == R_MAX || kind == R_MIN;
    const oari_gvalue *xv = &c->g->values[x];
    for (int k = 0; k < K; k++) {
        oari_sbuf_printf(o, "    %s v%s_%d = (%s){0} + (%s)%s;\n", AV, acc, k, AV, accT, init);
        if (minmax) oari_sbuf_printf(o, "    %s v%s_%d = {0};\n", VI, nan, k);
    }
    int l = 0;
    for (int d = 0; d < xv->ndim; d++) /* the outer reduced loops */
        if ((mask & (1u << d)) && ++l < n_loops)
            oari_sbuf_printf(o, "    for (int64_t r%d_%d = 0; r%d_%d < %s; r%d_%d++)\n", id, l - 1, id, l - 1,
                             dim_str(c, x, d), id, l - 1);
    oari_sbuf_printf(o, "    for (int64_t b%d = 0; b%d < %lld; b%d += %d) {\n", id, id, (long long)n, id, W);
    oari_sbuf_printf(o, "    const int64_t o%d = b%d + %d <= %lld ? b%d : %lld;\n", id, id, W, (long long)n, id,
                     (long long)(n - W));
    oari_sbuf_printf(o, "    %s l%d[%d];\n    #pragma omp simd\n", LT, id, W);
    oari_sbuf_printf(o, "    for (int64_t q%d = 0; q%d < %d; q%d++) {\n", id, id, W, id);
    oari_sbuf_printf(o, "    const int64_t r%d_%d = o%d + q%d;\n", id, n_loops - 1, id, id);
    oari_sbuf_puts(o, body);
    if (minmax) oari_sbuf_printf(o, "    l%d[q%d] = %s;\n", id, id, val);
    else oari_sbuf_printf(o, "    l%d[q%d] = r%d_%d >= b%d ? %s : (%s)%s;\n", id, id, id, n_loops - 1, id, val, LT, init);
    oari_sbuf_puts(o, "    }\n");
    for (int k = 0; k < K; k++) {
        if (lanes_d || !acc_d) oari_sbuf_printf(o, "    { %s v; memcpy(&v, l%d + %d, sizeof v);\n", AV, id, k * AL);
        else oari_sbuf_printf(o, "    { oar_vf8 h; memcpy(&h, l%d + %d, sizeof h); oar_vd8 v = __builtin_convertvector(h, oar_vd8);\n",
                              id, k * AL);
        const char *a = strf(c, "v%s_%d", acc, k);
        switch (kind) {
        case R_SUM: oari_sbuf_printf(o, "    %s += v; }\n", a); break;
        case R_PROD: oari_sbuf_printf(o, "    %s *= v; }\n", a); break;
        default: /* a bitwise select (C has no vector ?:); NaN never wins a compare */
            oari_sbuf_printf(o, "    %s w = v %s %s; %s = (%s)(((%s)v & w) | ((%s)%s & ~w)); v%s_%d |= v != v; }\n", VI,
                             kind == R_MAX ? ">" : "<", a, a, AV, VI, VI, a, nan, k);
        }
    }
    oari_sbuf_puts(o, "    }\n");
    /* fold: the accumulators, then their lanes, in order */
    for (int k = 1; k < K; k++) oari_sbuf_printf(o, "    v%s_0 %s= v%s_%d;\n", acc, kind == R_PROD ? "*" : "+", acc, k);
    oari_sbuf_printf(o, "    %s %s = %s;\n", accT, acc, init);
    if (minmax) oari_sbuf_printf(o, "    int64_t %s = 0;\n", nan);
    oari_sbuf_printf(o, "    for (int q = 0; q < %d; q++) {\n", AL);
    switch (kind) {
    case R_SUM: oari_sbuf_printf(o, "    %s += v%s_0[q];\n", acc, acc); break;
    case R_PROD: oari_sbuf_printf(o, "    %s *= v%s_0[q];\n", acc, acc); break;
    default:
        oari_sbuf_printf(o, "    %s = v%s_0[q] %s %s ? v%s_0[q] : %s;\n    %s |= v%s_0[q];\n", acc, acc,
                         kind == R_MAX ? ">" : "<", acc, acc, acc, nan, nan);
    }
    oari_sbuf_puts(o, "    }\n");
}

/* A reduction of a body over the dims of value x marked in `mask`, x at J
 * (J's entries at the reduced dims are ignored). The loop and its result
 * land in the outer scope; returns the variable holding the result, of
 * type RT (T, or double for sums kept in double). One loop per distinct
 * (node, kind, body, index). */
static const char *reduce(cg *c, int node, red_kind kind, body_kind body, int x, const char *m,
                          unsigned mask, const idx *J, const char *T, const char *RT) {
    const oari_gvalue *xv = &c->g->values[x];
    idx K = *J; /* the index without reduced dims: its scope check */
    K.nd = 0;
    for (int d = 0; d < xv->ndim; d++)
        if (!(mask & (1u << d))) K.c[K.nd++] = J->c[d];
    bool rv;
    unsigned used = idx_vars(&K, &rv);
    c->n_reductions++;
    if (c->analysis) c->ref_mask |= used;
    if (rv || (used & ~c->outer_mask) || c->depth >= MAX_RED_DEPTH) {
        fail(c, node); /* would be recomputed per element, or nested too deep */
        return "0";
    }
    char tag[96];
    snprintf(tag, sizeof tag, "red%d.%d.%d.%s.%s.", node, (int)kind, (int)body, m ? m : "", RT);
    char *key = memo_key(tag, x, &K);
    const char *have = key ? memo_find(c, key) : NULL;
    if (have || !key) {
        oari_strfree(key);
        if (!key && !c->status) c->status = OAR_ERR_NOMEM;
        return have ? have : "0";
    }
    note_work(c, x);
    int id = c->n_red++;
    red_frame *f = &c->red[c->depth++];
    memset(f, 0, sizeof *f);
    f->id = id;
    idx X = *J;
    int n_loops = 0;
    for (int d = 0; d < xv->ndim; d++)
        if (mask & (1u << d)) X.c[d] = strf(c, "r%d_%d", id, n_loops++);
    const char *xe = eval(c, x, &X), *val = xe;
    bool flt = !strcmp(T, "float");
    if (body == B_EXP_SUB || body == B_EXP_SUB_STORE)
        val = emit_tmp(c, T, &X, strf(c, "%s(%s - %s)", flt ? "oari_vexpf" : "exp", xe, m));
    if (body == B_EXP_SUB_STORE) {
        c->store_in_loop = true;
        const char *stride[OAR_MAX_DIMS];
        contiguous_strides(c, x, stride); /* x has the root's shape */
        oari_sbuf_printf(&f->body, "    a0[%s] = %s;\n", linear(c, &X, stride), val);
    }
    else if (body == B_SQ_DEV) /* in double, m a double mean: as the CPU kernel's moments */
        val = emit_tmp(c, "double", &X, strf(c, "((double)%s - %s) * ((double)%s - %s)", xe, m, xe, m));
    const char *acc = strf(c, "acc%d", id), *nan = strf(c, "nan%d", id);
    oari_sbuf *o = &c->outer;
    const char *accT = kind == R_SUM || kind == R_PROD ? "double" : T;
    const char *init = kind == R_SUM ? "0" : kind == R_PROD ? "1" : kind == R_MAX ? "-INFINITY" : "INFINITY";
    bool minmax = kind == R_MAX || kind == R_MIN;
    int64_t n_block = block_length(c, xv, mask, T);
    if (n_block) {
        write_blocked_reduction(c, o, oari_sbuf_str(&f->body), id, n_loops, x, mask, n_block, kind, T,
                                body == B_SQ_DEV ? "double" : T, accT, val, acc, nan, init);
        goto folded;
    }
    oari_sbuf_printf(o, "    %s %s = %s;\n", accT, acc, init);
    if (minmax) oari_sbuf_printf(o, "    uint8_t %s = 0;\n", nan);
    int l = 0;
    for (int d = 0; d < xv->ndim; d++) {
        if (!(mask & (1u << d))) continue;
        if (++l == n_loops && c->r->openmp) {
            if (kind == R_SUM) oari_sbuf_printf(o, "    #pragma omp simd reduction(+:%s)\n", acc);
            else if (kind == R_PROD) oari_sbuf_printf(o, "    #pragma omp simd reduction(*:%s)\n", acc);
            else oari_sbuf_printf(o, "    #pragma omp simd reduction(%s:%s) reduction(|:%s)\n",
                                  kind == R_MAX ? "max" : "min", acc, nan);
        }
        oari_sbuf_printf(o, "    for (int64_t r%d_%d = 0; r%d_%d < %s; r%d_%d++)\n", id, l - 1, id, l - 1,
                         dim_str(c, x, d), id, l - 1);
    }
    oari_sbuf_puts(o, "    {\n");
    oari_sbuf_puts(o, oari_sbuf_str(&f->body));
    switch (kind) {
    case R_SUM: oari_sbuf_printf(o, "    %s += %s;\n", acc, val); break;
    case R_PROD: oari_sbuf_printf(o, "    %s *= %s;\n", acc, val); break;
    default:
        oari_sbuf_printf(o, "    %s = %s %s %s ? %s : %s;\n    %s |= %s != %s;\n", acc, val,
                         kind == R_MAX ? ">" : "<", acc, val, acc, nan, val, val);
    }
    oari_sbuf_puts(o, "    }\n");
folded:
    if (f->body.failed && !c->status) c->status = OAR_ERR_NOMEM;
    oari_sbuf_free(&f->body);
    memo_pop_scope(c, c->depth);
    c->depth--;
    const char *r = strf(c, "t%d", c->n_tmp++);
    if (minmax) oari_sbuf_printf(o, "    const %s %s = %s ? (%s)NAN : %s;\n", RT, r, nan, RT, acc);
    else oari_sbuf_printf(o, "    const %s %s = (%s)%s;\n", RT, r, RT, acc);
    memo_add(c, key, r, SCOPE_OUTER);
    return r;
}

/* ---- members ----------------------------------------------------------------------- */

static bool is_member(const cg *c, int node) { return c->kr[node] == c->root; }


/* Reduction nodes: the input index J from the output index I. */
static idx reduced_input_index(cg *c, const oari_gnode *n, const idx *I) {
    const oari_gvalue *xv = &c->g->values[n->in[0]];
    unsigned mask = (unsigned)n->attrs.i[0];
    bool keep = n->attrs.ni > 1 && n->attrs.i[1];
    idx J = {.nd = xv->ndim};
    for (int d = 0, k = 0; d < xv->ndim; d++) {
        if (mask & (1u << d)) J.c[d] = "0", k += keep;
        else J.c[d] = I->c[k++];
    }
    return J;
}

static const char *eval_reduction(cg *c, const oari_gnode *n, int node, const idx *I, const char *T) {
    static const struct { oari_op op; red_kind kind; } kinds[] = {
        {OARI_OP_sum, R_SUM}, {OARI_OP_prod, R_PROD}, {OARI_OP_amax, R_MAX}, {OARI_OP_amin, R_MIN}};
    red_kind kind = R_SUM;
    for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++)
        if (kinds[i].op == n->op) kind = kinds[i].kind;
    idx J = reduced_input_index(c, n, I);
    return reduce(c, node, kind, B_VALUE, n->in[0], NULL, (unsigned)n->attrs.i[0], &J, T, T);
}

/* softmax / log_softmax over dim d: max, sum of exp(x - max), the row. */
static const char *eval_softmax(cg *c, const oari_gnode *n, int node, const idx *I, const char *T) {
    int x = n->in[0];
    int nd = c->g->values[x].ndim;
    unsigned mask = nd ? 1u << n->attrs.i[0] : 0;
    /* rows are short (attention: 64): the inlined polynomial exp of the CPU
     * kernels beats libmvec's calls there (bench/bench_fusion.c) */
    bool flt = !strcmp(T, "float");
    const char *F = flt ? "f" : "", *EXP = flt ? "oari_vexpf" : "exp";
    /* a softmax root whose row is exactly the inner loop: the sum pass leaves
     * exp(x - max) in the output row, the last pass scales it in place */
    unsigned all = nd >= 32 ? ~0u : (1u << nd) - 1;
    bool in_row = node == c->root && !c->analysis && !c->flat && !c->column && n->op == OARI_OP_softmax &&
                  mask && (c->outer_mask & all) == (all & ~mask);
    const char *m = reduce(c, node, R_MAX, B_VALUE, x, NULL, mask, I, T, T);
    const char *s = reduce(c, node, R_SUM, in_row ? B_EXP_SUB_STORE : B_EXP_SUB, x, m, mask, I, T, T);
    if (n->op == OARI_OP_softmax) { /* times 1/sum, hoisted: a multiply per element, not a divide */
        if (c->status) return "0";
        const char *inv = strf(c, "t%d", c->n_tmp++);
        oari_sbuf_printf(&c->outer, "    const %s %s = (%s)1 / %s;\n", T, inv, T, s);
        if (in_row) {
            const char *stride[OAR_MAX_DIMS];
            contiguous_strides(c, x, stride);
            return emit_tmp(c, T, I, strf(c, "a0[%s] * %s", linear(c, I, stride), inv));
        }
        return emit_tmp(c, T, I, strf(c, "%s(%s - %s) * %s", EXP, eval(c, x, I), m, inv));
    }
    const char *xe = eval(c, x, I);
    return emit_tmp(c, T, I, strf(c, "(%s - %s) - log%s(%s)", xe, m, F, s));
}

/* layer_norm (output 0): mean and variance over the trailing dims in
 * double, as the CPU kernel, then (x - mean) * rstd * w + b. */
static const char *eval_layer_norm(cg *c, const oari_gnode *n, int node, const idx *I, const char *T) {
    int x = n->in[0];
    int nd = c->g->values[x].ndim, k = (int)n->attrs.i[0];
    unsigned mask = 0;
    for (int d = nd - k; d < nd; d++) mask |= 1u << d;
    const char *cnt = dims_prod(c, x, nd - k, nd);
    const char *sum = reduce(c, node, R_SUM, B_VALUE, x, NULL, mask, I, T, "double");
    if (c->status) return "0";
    const char *mean = strf(c, "t%d", c->n_tmp++);
    oari_sbuf_printf(&c->outer, "    const double %s = %s / (double)%s;\n", mean, sum, cnt);
    const char *ss = reduce(c, node, R_SUM, B_SQ_DEV, x, mean, mask, I, T, "double");
    if (c->status) return "0";
    const char *rstd = strf(c, "t%d", c->n_tmp++);
    oari_sbuf_printf(&c->outer, "    const double %s = 1.0 / sqrt(%s / (double)%s + %.17g);\n", rstd, ss, cnt,
                     n->attrs.f[0]);
    idx W = {.nd = k};
    for (int d = 0; d < k; d++) W.c[d] = I->c[nd - k + d];
    bool has_w = n->n_in > 1 && n->in[1] >= 0, has_b = n->n_in > 2 && n->in[2] >= 0;
    const char *xe = eval(c, x, I), *y;
    if (has_w && has_b) {
        /* as the CPU kernel: in T, the mean split in two parts (x - hi is
         * exact near the mean) */
        const char *mh = strf(c, "t%d", c->n_tmp++), *ml = strf(c, "t%d", c->n_tmp++), *rt = strf(c, "t%d", c->n_tmp++);
        oari_sbuf_printf(&c->outer, "    const %s %s = (%s)%s, %s = (%s)(%s - (double)%s), %s = (%s)%s;\n", T, mh, T,
                         mean, ml, T, mean, mh, rt, T, rstd);
        y = strf(c, "((%s - %s) - %s) * %s * %s + %s", xe, mh, ml, rt, eval(c, n->in[1], &W),
                 eval(c, n->in[2], &W));
    } else { /* in double */
        y = strf(c, "((double)%s - %s) * %s", xe, mean, rstd);
        if (has_w) y = strf(c, "%s * (double)%s", y, eval(c, n->in[1], &W));
        if (has_b) y = strf(c, "%s + (double)%s", y, eval(c, n->in[2], &W));
        y = strf(c, "(%s)(%s)", T, y);
    }
    return emit_tmp(c, T, I, y);
}

static const char *eval_elementwise(cg *c, const oari_gnode *n, const idx *I, const char *T) {
    const char *a[4] = {"0", "0", "0", "0"};
    for (int k = 0; k < n->n_in && k < 4; k++) {
        idx J = broadcast_index(c, n->in[k], n->out[0], I);
        a[k] = eval(c, n->in[k], &J);
    }
    oari_sbuf e = {0};
    bool ok = oari_c_elementwise(c->g, n, a, &e);
    const char *r = ok && !e.failed ? emit_tmp(c, T, I, oari_sbuf_str(&e)) : "0";
    if (!ok && !c->status) c->status = oari_error(OAR_ERR_UNSUPPORTED, "compiler: no C form for %s",
                                                  oari_op_name(n->op));
    if (e.failed && !c->status) c->status = OAR_ERR_NOMEM;
    oari_sbuf_free(&e);
    return r;
}

/* The C variable (or literal) holding value v at index I. */
static const char *eval(cg *c, int v, const idx *I) {
    if (c->status) return "0";
    const oari_gvalue *gv = &c->g->values[v];
    const oari_gnode *n = gv->kind == OARI_V_NODE ? &c->g->nodes[gv->producer] : NULL;
    if (n && (oari_gnode_def(n)->flags & OARI_F_VIEW)) {
        if (!view_supported(n)) { /* oari_fusible keeps these out; defensive */
            fail(c, c->root);
            return "0";
        }
        idx J = view_index(c, n, I);
        return eval(c, n->in[0], &J);
    }
    char *key = memo_key("v", v, I);
    const char *have = key ? memo_find(c, key) : NULL;
    if (have || !key) {
        oari_strfree(key);
        if (!key && !c->status) c->status = OAR_ERR_NOMEM;
        return have ? have : "0";
    }
    const char *r;
    if (n && is_member(c, gv->producer)) {
        const char *T = oari_c_type(gv->dtype);
        switch (n->op) {
        case OARI_OP_sum: case OARI_OP_prod: case OARI_OP_amax: case OARI_OP_amin:
            r = eval_reduction(c, n, gv->producer, I, T);
            break;
        case OARI_OP_softmax: case OARI_OP_log_softmax: r = eval_softmax(c, n, gv->producer, I, T); break;
        case OARI_OP_layer_norm: r = eval_layer_norm(c, n, gv->producer, I, T); break;
        default: r = eval_elementwise(c, n, I, T);
        }
    } else {
        r = load(c, v, I);
    }
    /* a reduction's result lives in the outer scope whatever I is */
    memo_add(c, key, r, scope_of(c, I));
    return r;
}

/* ---- fusibility ----------------------------------------------------------------------- */

static bool is_float(oar_dtype d) { return d == OAR_F32 || d == OAR_F64; }

/* Whether value v reaches its buffer through supported views only. */
static bool reads_through_views(const oar_graph *g, int v) {
    while (v >= 0 && g->values[v].kind == OARI_V_NODE) {
        const oari_gnode *p = &g->nodes[g->values[v].producer];
        if (!(oari_gnode_def(p)->flags & OARI_F_VIEW)) return true;
        if (!view_supported(p)) return false;
        v = p->in[0];
    }
    return true;
}

static bool value_used(const oar_graph *g, int v) {
    for (int j = 0; j < g->n_outputs; j++)
        if (g->outputs[j] == v) return true;
    for (int i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i].n_in; k++)
            if (g->nodes[i].in[k] == v) return true;
    return false;
}

bool oari_fusible(const oar_graph *g, int ni) {
    const oari_gnode *n = &g->nodes[ni];
    const oari_op_def *def = oari_gnode_def(n);
    if (oari_is_ctrl(n->op)) return false; /* control nodes are barriers; their sub-graphs run unfused */
    if (n->dead || (def->flags & (OARI_F_INPLACE | OARI_F_RANDOM))) return false;
    if (!oari_c_type(g->values[n->out[0]].dtype)) return false;
    if (def->flags & OARI_F_VIEW) return view_supported(n);
    for (int k = 0; k < n->n_in; k++) {
        int v = n->in[k];
        if (v < 0) {
            if (n->op != OARI_OP_layer_norm) return false;
            continue;
        }
        if (!oari_c_type(g->values[v].dtype) || !reads_through_views(g, v)) return false;
        if (g->values[v].ndim > 8) return false;
    }
    oar_dtype od = g->values[n->out[0]].dtype, d0 = g->values[n->in[0]].dtype;
    switch (n->op) {
    case OARI_OP_sum: /* over leading dims only (bias gradients): the library's column sums keep
                         their accumulators in vector registers and beat the generated column
                         template 1.2-1.5x, even counting the pass of a producer (bench_compiled_step
                         BENCH_KERNELS=2), so they stay library calls */
        if (n->attrs.ni >= 1 && g->values[n->in[0]].ndim >= 1 &&
            !((n->attrs.i[0] >> (g->values[n->in[0]].ndim - 1)) & 1))
            return false;
        return is_float(od) && d0 == od;
    case OARI_OP_prod: case OARI_OP_amax: case OARI_OP_amin:
        return is_float(od) && d0 == od && n->attrs.ni >= 1;
    case OARI_OP_softmax: case OARI_OP_log_softmax:
        return is_float(od) && d0 == od;
    case OARI_OP_layer_norm:
        if (!is_float(od) || d0 != od || n->attrs.ni < 1 || n->attrs.nf < 1) return false;
        for (int k = 1; k < n->n_in; k++)
            if (n->in[k] >= 0 && g->values[n->in[k]].dtype != od) return false;
        for (int j = 1; j < n->n_out; j++) /* mean and rstd are not written by a kernel */
            if (value_used(g, n->out[j])) return false;
        return true;
    default:
        break;
    }
    if (n->n_out != 1 || n->n_in > 3) return false;
    const char *a[3] = {"x", "y", "z"};
    oari_sbuf scratch = {0};
    bool ok = oari_c_elementwise(g, n, a, &scratch);
    oari_sbuf_free(&scratch);
    return ok;
}

/* Flat: every member is elementwise over exactly the root's shape (no
 * views, no broadcasting but of 0-d values, no reductions), so one linear
 * index serves all. */
static bool kernel_is_flat(const cg *c, int root_v) {
    const oar_graph *g = c->g;
    const oari_gvalue *r = &g->values[root_v];
    for (int i = 0; i <= c->root; i++) {
        if (c->kr[i] != c->root) continue;
        const oari_gnode *n = &g->nodes[i];
        const oari_op_def *def = oari_gnode_def(n);
        if ((def->flags & OARI_F_VIEW) || (def->fusion != OARI_FUSE_ELEMWISE && def->fusion != OARI_FUSE_BROADCAST))
            return false;
        for (int k = 0; k < n->n_in; k++) {
            const oari_gvalue *v = &g->values[n->in[k]];
            if (v->ndim == 0 || (v->kind == OARI_V_CONST && v->constant->numel == 1)) continue;
            if (v->kind == OARI_V_NODE && (oari_gnode_def(&g->nodes[v->producer])->flags & OARI_F_VIEW))
                return false;
            if (v->kind == OARI_V_CONST && !oar_tensor_is_contiguous(v->constant)) return false;
            if (v->ndim != r->ndim || memcmp(v->shape, r->shape, (size_t)r->ndim * sizeof *r->shape) ||
                memcmp(v->sym, r->sym, (size_t)r->ndim))
                return false;
        }
    }
    return true;
}

/* ---- the kernel ------------------------------------------------------------------------ */

static void reset_pass(cg *c) {
    for (int i = 0; i < c->n_memo; i++) oari_strfree(c->memo[i].key);
    c->n_memo = 0;
    oari_sbuf_free(&c->outer);
    oari_sbuf_free(&c->inner);
    c->n_tmp = c->n_red = c->n_reductions = 0;
    c->n_args = 1; /* the output stays a0 */
    c->elsewhere = 0;
    c->store_in_loop = false;
    c->depth = 0;
    c->work_numel = 0;
    c->work_expr = "0";
}

static void free_cg(cg *c) {
    reset_pass(c);
    for (int i = 0; i < c->n_strs; i++) oari_strfree(c->strs[i]);
    oari_free(c->strs, (size_t)c->cap_strs * sizeof *c->strs);
    oari_free(c->memo, (size_t)c->cap_memo * sizeof *c->memo);
}

/* One pass: evaluates the root at its loop index; returns the variable. */
static const char *run_pass(cg *c, int root_v, idx *I, int nd) {
    reset_pass(c);
    note_work(c, root_v);
    I->nd = nd;
    for (int d = 0; d < nd; d++) I->c[d] = strf(c, "i%d", d);
    if (!c->flat) {
        const char *stride[OAR_MAX_DIMS];
        contiguous_strides(c, root_v, stride);
        c->out_lin = linear(c, I, stride);
    }
    return eval(c, root_v, I);
}

/* Bit a (1..63): leaf a<a> is read only at the element the kernel writes,
 * so the output may be written over it. With reductions too: such a load
 * uses every dim of the output, so it sits in the last loop, after the
 * row's reductions (which then never read it), unless the output is also
 * written inside a reduction's loop (softmax) or accumulated by columns. */
static uint64_t same_index(const cg *c) {
    if (c->store_in_loop || c->column) return 0;
    uint64_t m = 0;
    for (int a = 1; a < c->n_args && a < 64; a++)
        if (!(c->elsewhere >> a & 1)) m |= 1ull << a;
    return m;
}

/* The comment naming the kernel (every renderer's). */
static void write_comment(cg *c, const char *name, int root_v, oari_sbuf *src) {
    const oar_graph *g = c->g;
    const oari_gvalue *rv = &g->values[root_v];
    char shape[256] = ""; /* a 0-d root writes no dims */
    int len = 0;
    for (int d = 0; d < rv->ndim && len < 200; d++) {
        const char *sep = d ? ", " : "";
        if (rv->sym[d] < 0) len += snprintf(shape + len, 256 - len, "%s%lld", sep, (long long)rv->shape[d]);
        else if (rv->smul[d] == 1) len += snprintf(shape + len, 256 - len, "%s%s", sep, g->syms[rv->sym[d]].name);
        else len += snprintf(shape + len, 256 - len, "%s%d*%s", sep, rv->smul[d], g->syms[rv->sym[d]].name);
    }
    int members = 0;
    for (int i = 0; i <= c->root; i++) members += c->kr[i] == c->root;
    oari_sbuf_printf(src, "\n/* %s: %s [%s], %d nodes ending in node %d (%s)%s */\n", name,
                     oar_dtype_name(rv->dtype), shape, members, c->root, oari_op_name(g->nodes[c->root].op),
                     c->flat ? ", flat" : c->column ? ", column reduction" : "");
}

/* C: the signature and the argument pointers. */
static void c_signature(const oari_kernel_text *k, oari_sbuf *src) {
    oari_sbuf_printf(src, "void %s(void *const *restrict args, const int64_t *restrict s) {\n    (void)s;\n",
                     k->name);
    /* the output may be written over an input read only at the element
     * written (k->same_index; the executor plans it so when that input dies
     * here, or is a donated parameter): neither pointer is `restrict` */
    for (int a = 0; a < k->n_args; a++) {
        const char *T = oari_c_type(k->g->values[k->args[a]].dtype);
        bool may_alias = k->flat || (k->same_index && (!a || (a < 64 && (k->same_index >> a & 1))));
        oari_sbuf_printf(src, "    %s%s *%sa%d = (%s%s *)args[%d];\n", a ? "const " : "", T,
                         may_alias ? "" : "restrict ", a, a ? "const " : "", T, a);
    }
}

/* The loop nest `loops` (its parallel pragma given separately) under a
 * plain `if` on the work size: a run too small for threads calls no OpenMP
 * at all (an `if` clause would still enter the runtime: a fraction of a
 * microsecond, which is most of a small kernel's time), and for static
 * shapes the compiler drops the branch not taken. */
static void write_parallel(oari_sbuf *src, const char *work, const char *pragma, const oari_sbuf *loops) {
    oari_sbuf_printf(src, "    if (%s > %s) {\n    %s\n", work, PARALLEL_MIN, pragma);
    oari_sbuf_puts(src, oari_sbuf_str(loops));
    oari_sbuf_puts(src, "    } else {\n");
    oari_sbuf_puts(src, oari_sbuf_str(loops));
    oari_sbuf_puts(src, "    }\n");
    if (loops->failed) src->failed = true;
}

/* C: the kernel's loop nest, threads over the outer dims (or chunks of a
 * flat loop), simd over the innermost. */
static void c_function(const oari_kernel_text *k, oari_sbuf *src) {
    c_signature(k, src);
    const char *const *dim = k->dim;
    int nd = k->nd, n_outer = 0, n_inner = 0;
    for (int d = 0; d < nd; d++) (k->outer_mask & (1u << d)) ? n_outer++ : n_inner++;
    oari_sbuf loops = {0};
    if (!n_outer && n_inner == 1 && !k->reductions) {
        /* one flat loop: OpenMP threads over chunks, simd within */
        oari_sbuf_puts(src, k->outer);
        oari_sbuf_printf(&loops, "    for (int64_t c0 = 0; c0 < %s; c0 += 4096) {\n", dim[0]);
        oari_sbuf_printf(&loops, "    const int64_t e0 = c0 + 4096 < %s ? c0 + 4096 : %s;\n", dim[0], dim[0]);
        oari_sbuf_puts(&loops, "    #pragma omp simd\n    for (int64_t i0 = c0; i0 < e0; i0++) {\n");
        oari_sbuf_puts(&loops, k->inner);
        oari_sbuf_puts(&loops, k->store);
        oari_sbuf_puts(&loops, "    }\n    }\n");
        write_parallel(src, dim[0], "#pragma omp parallel for schedule(static)", &loops);
        oari_sbuf_puts(src, "}\n");
    } else {
        oari_sbuf *o = n_outer ? &loops : src; /* the outer loops go under write_parallel */
        if (n_outer) {
            for (int d = 0; d < nd; d++)
                if (k->outer_mask & (1u << d))
                    oari_sbuf_printf(o, "    for (int64_t i%d = 0; i%d < %s; i%d++)\n", d, d, dim[d], d);
            oari_sbuf_puts(o, "    {\n");
        }
        oari_sbuf_puts(o, k->outer);
        int d_in = -1, W = 0; /* a single inner loop of static length: in blocks? */
        for (int d = 0; d < nd; d++)
            if (!(k->outer_mask & (1u << d))) d_in = d;
        const oari_gvalue *root = &k->g->values[k->args[0]]; /* the loops' dims are its dims */
        long long n_in = n_inner == 1 && root->sym[d_in] < 0 ? (long long)root->shape[d_in] : 0;
        if (n_in && !k->inner_reads_output && !k->same_index)
            W = block_lanes(k->g, k->args, k->n_args, root->dtype, n_in);
        if (W) {
            /* as write_blocked_reduction: the last block moves back to end at
             * the row's end and writes its overlap again, with the same values
             * (a0 is restrict here and not read by the loop) */
            oari_sbuf_printf(o, "    for (int64_t b = 0; b < %lld; b += %d) {\n", n_in, W);
            oari_sbuf_printf(o, "    const int64_t o = b + %d <= %lld ? b : %lld;\n    #pragma omp simd\n", W, n_in,
                             n_in - W);
            oari_sbuf_printf(o, "    for (int64_t i%d = o; i%d < o + %d; i%d++)\n    {\n", d_in, d_in, W, d_in);
            oari_sbuf_puts(o, k->inner);
            oari_sbuf_puts(o, k->store);
            oari_sbuf_puts(o, "    }\n    }\n");
        } else if (n_inner) {
            int seen = 0;
            for (int d = 0; d < nd; d++) {
                if (k->outer_mask & (1u << d)) continue;
                if (++seen == n_inner) oari_sbuf_puts(o, "    #pragma omp simd\n");
                oari_sbuf_printf(o, "    for (int64_t i%d = 0; i%d < %s; i%d++)\n", d, d, dim[d], d);
            }
            oari_sbuf_puts(o, "    {\n");
            oari_sbuf_puts(o, k->inner);
            oari_sbuf_puts(o, k->store);
            oari_sbuf_puts(o, "    }\n");
        } else {
            oari_sbuf_puts(o, k->store);
        }
        if (n_outer) {
            oari_sbuf_puts(o, "    }\n");
            char pragma[96];
            snprintf(pragma, sizeof pragma, "#pragma omp parallel for collapse(%d) schedule(static)", n_outer);
            write_parallel(src, k->work, pragma, &loops);
        }
        oari_sbuf_puts(src, "}\n");
    }
    if (loops.failed) src->failed = true;
    oari_sbuf_free(&loops);
}

/* The kernel through the renderer: its comment, then the function. */
static void write_function(cg *c, const char *name, int root_v, const idx *I, int nd, const char *res,
                           oari_sbuf *src) {
    const oari_gvalue *rv = &c->g->values[root_v];
    write_comment(c, name, root_v, src);
    /* dims of the loops */
    const char *dim[OAR_MAX_DIMS];
    if (c->flat) dim[0] = dims_prod(c, root_v, 0, rv->ndim);
    else
        for (int d = 0; d < nd; d++) dim[d] = dim_str(c, root_v, d);
    const char *stride[OAR_MAX_DIMS];
    const char *lin;
    if (c->flat) lin = "i0";
    else {
        contiguous_strides(c, root_v, stride);
        lin = linear(c, I, stride);
    }
    oari_sbuf store = {0};
    oari_sbuf_printf(&store, "    a0[%s] = %s;\n", lin, res);
    oari_kernel_text k = {
        .g = c->g, .name = name, .args = c->args, .n_args = c->n_args, .flat = c->flat,
        .same_index = same_index(c),
        .reductions = c->n_reductions > 0, .nd = nd, .dim = dim, .outer_mask = c->outer_mask,
        .outer = oari_sbuf_str(&c->outer), .inner = oari_sbuf_str(&c->inner), .store = oari_sbuf_str(&store),
        .inner_reads_output = c->store_in_loop,
        .work = c->work_expr};
    c->r->function(&k, src);
    if (store.failed || c->outer.failed || c->inner.failed) src->failed = true;
    oari_sbuf_free(&store);
}

/* ---- reductions over leading dims -----------------------------------------------------
 * sum(x, dims 0..k) of a [N, D] x (a bias gradient) read row by row with one
 * accumulator per element of the row: the last kept dim is the vector loop,
 * in chunks of COLUMN_CHUNK, the reduced dims loop around it and the other
 * kept dims around those (parallel). The row template would reduce down a
 * column, a stride of D per element. */
#define COLUMN_CHUNK 256

typedef struct column_plan {
    int a, b;          /* x's reduced dims are [a, b) */
} column_plan;

/* Whether the kernel is one reduction rooted at root whose reduced dims are
 * a block followed by kept dims, the last of 8 elements or more. */
static bool column_shape(const cg *c, column_plan *p) {
    const oari_gnode *n = &c->g->nodes[c->root];
    if (c->n_reductions != 1 || c->flat) return false;
    if (n->op != OARI_OP_sum && n->op != OARI_OP_prod && n->op != OARI_OP_amax && n->op != OARI_OP_amin)
        return false;
    const oari_gvalue *x = &c->g->values[n->in[0]];
    unsigned mask = (unsigned)n->attrs.i[0];
    int a = 0;
    while (a < x->ndim && !(mask & (1u << a))) a++;
    int b = a;
    while (b < x->ndim && (mask & (1u << b))) b++;
    if (a == x->ndim || b == x->ndim || (mask >> b)) return false;
    if (x->shape[x->ndim - 1] < 8) return false;
    p->a = a;
    p->b = b;
    return true;
}

static const char *write_column_reduction(cg *c, const column_plan *p, int root_v, oari_sbuf *src,
                                          const char *name) {
    const oar_graph *g = c->g;
    const oari_gnode *n = &g->nodes[c->root];
    int x = n->in[0];
    const oari_gvalue *rv = &g->values[root_v], *xv = &g->values[x];
    const char *T = oari_c_type(rv->dtype);
    red_kind kind = n->op == OARI_OP_sum ? R_SUM : n->op == OARI_OP_prod ? R_PROD : n->op == OARI_OP_amax ? R_MAX : R_MIN;
    bool minmax = kind == R_MAX || kind == R_MIN;
    reset_pass(c);
    c->column = true;
    int last = rv->ndim - 1;
    c->outer_mask = ((1u << last) - 1) & ~0u; /* every root dim but the last (the vector dim) */
    note_work(c, root_v);
    /* the root's index: i<d>; x's: the same at kept dims, r0_<j> at reduced ones */
    idx I = {.nd = rv->ndim}, J = {.nd = xv->ndim};
    for (int d = 0; d < rv->ndim; d++) I.c[d] = strf(c, "i%d", d);
    for (int d = 0, k = 0, r = 0; d < xv->ndim; d++) {
        if (d >= p->a && d < p->b) {
            J.c[d] = strf(c, "r0_%d", r++);
            if (rv->ndim == xv->ndim) { I.c[k] = "0"; k++; } /* keepdim: the root's size-1 dim */
        } else {
            J.c[d] = I.c[k++];
        }
    }
    c->depth = 1;
    memset(&c->red[0], 0, sizeof c->red[0]);
    c->n_red = 1;
    const char *val = eval(c, x, &J);
    c->depth = 0;
    if (c->status) {
        oari_sbuf_free(&c->red[0].body);
        return NULL;
    }
    /* the vector dim: i<last> = c0 + v */
    const char *ts = dim_str(c, root_v, last);
    oari_sbuf unravel = {0};
    oari_sbuf_printf(&unravel, "    const int64_t i%d = c0 + v;\n", last);
    const char *stride[OAR_MAX_DIMS];
    contiguous_strides(c, root_v, stride);
    const char *lin = linear(c, &I, stride);
    write_comment(c, name, root_v, src);
    c_signature(&(oari_kernel_text){.g = g, .name = name, .args = c->args, .n_args = c->n_args}, src);
    const char *accT = minmax ? T : "double";
    const char *init = kind == R_SUM ? "0" : kind == R_PROD ? "1" : kind == R_MAX ? "-INFINITY" : "INFINITY";
    oari_sbuf loops = {0}, *o = &loops;
    for (int d = 0; d < last; d++)
        oari_sbuf_printf(o, "    for (int64_t i%d = 0; i%d < %s; i%d++)\n", d, d, dim_str(c, root_v, d), d);
    oari_sbuf_printf(o, "    for (int64_t c0 = 0; c0 < %s; c0 += %d) {\n", ts, COLUMN_CHUNK);
    oari_sbuf_puts(o, oari_sbuf_str(&c->outer));
    oari_sbuf_printf(o, "    const int64_t n0 = %s - c0 < %d ? %s - c0 : %d;\n", ts, COLUMN_CHUNK, ts, COLUMN_CHUNK);
    oari_sbuf_printf(o, "    %s acc[%d];\n", accT, COLUMN_CHUNK);
    if (minmax) oari_sbuf_printf(o, "    uint8_t nan[%d];\n", COLUMN_CHUNK);
    oari_sbuf_printf(o, "    for (int64_t v = 0; v < n0; v++) acc[v] = %s;\n", init);
    if (minmax) oari_sbuf_puts(o, "    for (int64_t v = 0; v < n0; v++) nan[v] = 0;\n");
    for (int d = p->a, r = 0; d < p->b; d++, r++)
        oari_sbuf_printf(o, "    for (int64_t r0_%d = 0; r0_%d < %s; r0_%d++)\n", r, r, dim_str(c, x, d), r);
    oari_sbuf_puts(o, "    {\n    #pragma omp simd\n    for (int64_t v = 0; v < n0; v++) {\n");
    oari_sbuf_puts(o, oari_sbuf_str(&unravel));
    oari_sbuf_puts(o, oari_sbuf_str(&c->red[0].body));
    switch (kind) {
    case R_SUM: oari_sbuf_printf(o, "    acc[v] += %s;\n", val); break;
    case R_PROD: oari_sbuf_printf(o, "    acc[v] *= %s;\n", val); break;
    default:
        oari_sbuf_printf(o, "    acc[v] = %s %s acc[v] ? %s : acc[v];\n    nan[v] |= %s != %s;\n", val,
                         kind == R_MAX ? ">" : "<", val, val, val);
    }
    oari_sbuf_puts(o, "    }\n    }\n    for (int64_t v = 0; v < n0; v++) {\n");
    oari_sbuf_puts(o, oari_sbuf_str(&unravel));
    if (minmax) oari_sbuf_printf(o, "    a0[%s] = nan[v] ? (%s)NAN : acc[v];\n", lin, T);
    else oari_sbuf_printf(o, "    a0[%s] = (%s)acc[v];\n", lin, T);
    oari_sbuf_puts(o, "    }\n    }\n");
    char pragma[96];
    snprintf(pragma, sizeof pragma, "#pragma omp parallel for collapse(%d) schedule(static)", last + 1);
    write_parallel(src, c->work_expr, pragma, &loops);
    oari_sbuf_puts(src, "}\n");
    oari_sbuf_free(&loops);
    if (unravel.failed || c->red[0].body.failed) src->failed = true;
    oari_sbuf_free(&unravel);
    oari_sbuf_free(&c->red[0].body);
    return "";
}

int oari_codegen_kernel(const oar_graph *g, const oari_renderer *r, const int *kernel_root, int root,
                        const char *name, oari_sbuf *src, int **args, int *n_args, int *bad, bool *flat,
                        unsigned *outer_mask, uint64_t *same_index_) {
    cg c = {.g = g, .r = r, .kr = kernel_root, .root = root, .bad = -1, .work_expr = "0"};
    *args = NULL;
    *n_args = 0;
    *bad = -1;
    int root_v = g->nodes[root].out[0];
    const oari_gvalue *rv = &g->values[root_v];
    arg_of(&c, root_v);
    c.flat = *flat = kernel_is_flat(&c, root_v);
    int nd = c.flat ? 1 : rv->ndim;
    idx I;
    /* pass 1: every dim outer; which dims do the reductions' indices use? */
    c.analysis = true;
    c.outer_mask = ~0u;
    run_pass(&c, root_v, &I, nd);
    column_plan cp;
    if (!c.status && r->openmp && column_shape(&c, &cp)) {
        c.analysis = false;
        write_column_reduction(&c, &cp, root_v, src, name);
    } else if (!c.status) {
        c.analysis = false;
        if (c.n_reductions) c.outer_mask = c.ref_mask;
        else if (r->all_dims_parallel) c.outer_mask = nd >= 32 ? ~0u : (1u << nd) - 1;
        else c.outer_mask = nd >= 2 ? (1u << (nd - 1)) - 1 : 0;
        const char *res = run_pass(&c, root_v, &I, nd);
        if (!c.status) write_function(&c, name, root_v, &I, nd, res, src);
    }
    int st = c.status;
    *outer_mask = c.outer_mask;
    *same_index_ = same_index(&c);
    if (st == 1) *bad = c.bad;
    if (!st && src->failed) st = oari_fail_status();
    if (!st) { /* exactly n_args long: the fusion frees it by that size */
        int *a = oari_realloc(c.args, (size_t)c.cap_args * sizeof *a, (size_t)c.n_args * sizeof *a);
        if (!a) {
            oari_free(c.args, (size_t)c.cap_args * sizeof *c.args);
            free_cg(&c);
            return oari_fail_status();
        }
        *args = a;
        *n_args = c.n_args;
    } else {
        oari_free(c.args, (size_t)c.cap_args * sizeof *c.args);
    }
    free_cg(&c);
    return st;
}

static void c_prelude(oari_sbuf *src) {
    oari_sbuf_puts(src,
        "/* Generated by oar's compiler (src/compiler/codegen_c.c): one function per\n"
        " * kernel; args[0] is the output, the other args the inputs; s[] holds the\n"
        " * sizes of the graph's symbolic dims. */\n"
        "#include <math.h>\n"
        "#include <stdint.h>\n"
        "#include <string.h>\n"
        "#ifndef OAR_PAR_MIN\n"
        "#define OAR_PAR_MIN " OARI_STR(PARALLEL_MIN_DEFAULT) " /* elements; fewer run on one thread */\n"
        "#endif\n"
        "#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)\n"
        "/* glibc's libmvec has vector forms of these; declaring them lets loops that\n"
        " * call them vectorise (what <math.h> does under -ffast-math, which we never use) */\n"
        "#define V_ __attribute__((__simd__(\"notinbranch\")))\n"
        "V_ float expf(float); V_ float logf(float); V_ float sinf(float); V_ float cosf(float);\n"
        "V_ float tanhf(float); V_ float erff(float); V_ float expm1f(float); V_ float log1pf(float);\n"
        "V_ float powf(float, float); V_ float exp2f(float); V_ float log2f(float);\n"
        "V_ double exp(double); V_ double log(double); V_ double sin(double); V_ double cos(double);\n"
        "V_ double tanh(double); V_ double erf(double); V_ double expm1(double); V_ double log1p(double);\n"
        "V_ double pow(double, double); V_ double exp2(double); V_ double log2(double);\n"
        "#undef V_\n"
        "#define OARI_EW_LIBMVEC 1 /* ew_math.h: EXP_f32, TANH_f32, ERF_f32 from these */\n"
        "#endif\n"
        "/* 64-byte vectors for the reductions' accumulators (write_blocked_reduction) */\n"
        "typedef float oar_vf8 __attribute__((vector_size(32)));\n"
        "typedef float oar_vf16 __attribute__((vector_size(64)));\n"
        "typedef double oar_vd8 __attribute__((vector_size(64)));\n"
        "typedef int32_t oar_vi16 __attribute__((vector_size(64)));\n"
        "typedef int64_t oar_vl8 __attribute__((vector_size(64)));\n");
    oari_sbuf_puts(src, oari_vmath_text); /* oari_vexpf, ...: src/backends/cpu/cpu_vmath.h */
    oari_sbuf_puts(src, oari_ew_words);   /* the elementwise formulas' words (op_c.c) */
}

const char *const oari_ew_words = oari_ew_math_text;

const oari_renderer oari_render_c = {
    .language = "c", .openmp = true, .all_dims_parallel = false, .prelude = c_prelude, .function = c_function};

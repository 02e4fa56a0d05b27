/* ONNX import: symbolic sizes. With dynamic input dims, `Shape` yields the
 * tracer's placeholder sizes; next to that concrete value the importer
 * keeps what each entry stands for: a polynomial in the graph's symbols
 * (5, N, 4*N, N*T, N + 2) with integer coefficients. The shape arithmetic
 * PyTorch exports (Gather, Slice, Concat, Unsqueeze, Squeeze, Cast, Add,
 * Sub, Mul, Div, Equal, Where, ...) is done on the polynomials; where the
 * sizes reach a shape (Reshape, Expand, ConstantOfShape, Slice bounds) each
 * entry must be a constant or k times one symbol (what oar graphs can
 * rewrite per run), and anywhere else the sizes are computed at run time from `size_of`
 * nodes on the graph inputs that carry the symbols. */
#define OARI_ONNX_PROTO
#include "onnx_internal.h"
#include "../graph/ir.h"
#include "../ops/op.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

typedef oari_onnx_sexpr sexpr;
typedef oari_onnx_svec svec;

static const sexpr unknown = {.n = -1};

static sexpr sconst(int64_t c) {
    sexpr e = {.n = c != 0};
    e.t[0].c = c;
    return e;
}

static bool mono_eq(const oari_onnx_sterm *a, const oari_onnx_sterm *b) {
    return !memcmp(a->e, b->e, sizeof a->e);
}
static bool mono_const(const oari_onnx_sterm *a) {
    for (int s = 0; s < OARI_MAX_SYMS; s++)
        if (a->e[s]) return false;
    return true;
}

/* Merges like terms of n raw terms into e; unknown if more than fit. */
static sexpr normalize(const oari_onnx_sterm *t, int n) {
    oari_onnx_sterm m[OARI_ONNX_SYM_TERMS * OARI_ONNX_SYM_TERMS];
    int k = 0;
    for (int i = 0; i < n; i++) {
        int j = 0;
        while (j < k && !mono_eq(&m[j], &t[i])) j++;
        if (j == k) m[k++] = t[i];
        else if (__builtin_add_overflow(m[j].c, t[i].c, &m[j].c)) return unknown; /* (a hostile model's sizes) */
    }
    sexpr e = {.n = 0};
    for (int j = 0; j < k; j++) {
        if (!m[j].c) continue;
        if (e.n == OARI_ONNX_SYM_TERMS) return unknown;
        e.t[e.n++] = m[j];
    }
    return e;
}

static bool is_const(const sexpr *e, int64_t *c) {
    if (e->n < 0) return false;
    if (e->n == 0) return *c = 0, true;
    if (e->n == 1 && mono_const(&e->t[0])) return *c = e->t[0].c, true;
    return false;
}

static sexpr add(const sexpr *a, const sexpr *b, int64_t sign) {
    if (a->n < 0 || b->n < 0) return unknown;
    oari_onnx_sterm t[2 * OARI_ONNX_SYM_TERMS];
    int n = 0;
    for (int i = 0; i < a->n; i++) t[n++] = a->t[i];
    for (int i = 0; i < b->n; i++) {
        t[n] = b->t[i];
        if (__builtin_mul_overflow(t[n].c, sign, &t[n].c)) return unknown;
        n++;
    }
    return normalize(t, n);
}

static sexpr mul(const sexpr *a, const sexpr *b) {
    if (a->n < 0 || b->n < 0) return unknown;
    oari_onnx_sterm t[OARI_ONNX_SYM_TERMS * OARI_ONNX_SYM_TERMS];
    int n = 0;
    for (int i = 0; i < a->n; i++)
        for (int j = 0; j < b->n; j++) {
            if (__builtin_mul_overflow(a->t[i].c, b->t[j].c, &t[n].c)) return unknown;
            for (int s = 0; s < OARI_MAX_SYMS; s++) {
                int e = a->t[i].e[s] + b->t[j].e[s];
                if (e > 60) return unknown;
                t[n].e[s] = (uint8_t)e;
            }
            n++;
        }
    return normalize(t, n);
}

/* a / b: exact when every term of a is a multiple of b's one term; two
 * constants divide as ONNX's integer Div does (truncating) when trunc. */
static sexpr divide(const sexpr *a, const sexpr *b, bool trunc) {
    int64_t ca, cb;
    if (a->n < 0 || b->n != 1) return unknown; /* b = 0 or a sum */
    if (is_const(a, &ca) && is_const(b, &cb)) {
        if (ca == INT64_MIN && cb == -1) return unknown; /* (overflows) */
        if (trunc || ca % cb == 0) return sconst(ca / cb);
        return unknown;
    }
    sexpr q = {.n = a->n};
    for (int i = 0; i < a->n; i++) {
        if ((a->t[i].c == INT64_MIN && b->t[0].c == -1) || a->t[i].c % b->t[0].c) return unknown;
        q.t[i].c = a->t[i].c / b->t[0].c;
        for (int s = 0; s < OARI_MAX_SYMS; s++) {
            if (a->t[i].e[s] < b->t[0].e[s]) return unknown;
            q.t[i].e[s] = (uint8_t)(a->t[i].e[s] - b->t[0].e[s]);
        }
    }
    return q;
}

/* Whether e is never 0 for symbols >= 1: every coefficient of one sign. */
static bool never_zero(const sexpr *e) {
    if (e->n <= 0) return false;
    bool pos = e->t[0].c > 0;
    for (int i = 1; i < e->n; i++)
        if ((e->t[i].c > 0) != pos) return false;
    return true;
}

static bool dynamic_entry(const sexpr *e) {
    int64_t c;
    return !is_const(e, &c);
}

bool oari_onnx_svec_dynamic(const svec *v) {
    for (int i = 0; v && i < v->n; i++)
        if (dynamic_entry(&v->v[i])) return true;
    return false;
}

/* e written out ("4*N + 2") into buf, with the graph's symbol names. */
static const char *expr_str(const sexpr *e, char *buf, size_t size) {
    if (e->n < 0) return snprintf(buf, size, "(not a polynomial)"), buf;
    if (e->n == 0) return snprintf(buf, size, "0"), buf;
    const oar_graph *g = oari_trace_graph();
    size_t len = 0;
    buf[0] = 0;
    for (int i = 0; i < e->n && len < size; i++) {
        int64_t c = e->t[i].c;
        int w = snprintf(buf + len, size - len, "%s%lld", i ? (c < 0 ? " - " : " + ") : (c < 0 ? "-" : ""),
                         (long long)(c < 0 ? -c : c));
        bool one = (c == 1 || c == -1) && !mono_const(&e->t[i]);
        if (one) w -= 1; /* drop the "1" of "1*N" */
        len += w > 0 ? (size_t)w : 0;
        bool first = one;
        for (int s = 0; s < OARI_MAX_SYMS && len < size; s++)
            for (int k = 0; k < e->t[i].e[s] && len < size; k++) {
                w = snprintf(buf + len, size - len, "%s%s", first ? "" : "*",
                             g && s < g->n_syms ? g->syms[s].name : "?");
                first = false;
                len += w > 0 ? (size_t)w : 0;
            }
    }
    return buf;
}

int oari_onnx_sym_shape(oar_tensor *x, int64_t start, int64_t end, svec *out) {
    const oar_graph *g = oari_trace_graph();
    const int64_t *s = oar_tensor_shape(x);
    bool dyn = false;
    out->rank = 1;
    out->n = 0;
    for (int64_t d = start; d < end; d++) {
        sexpr e = sconst(s[d]);
        int32_t k = 0;
        int sym = g && !oar_tensor_data(x) ? oari_graph_sym_of(g, s[d], &k) : -1;
        if (sym >= 0) {
            e = sconst(k);
            e.t[0].e[sym] = 1;
            dyn = true;
        }
        out->v[out->n++] = e;
    }
    return dyn;
}

int oari_onnx_sym_size(oar_tensor *x, svec *out) {
    svec s;
    int dyn = oari_onnx_sym_shape(x, 0, oar_tensor_ndim(x), &s);
    sexpr p = sconst(1);
    for (int i = 0; i < s.n; i++) p = mul(&p, &s.v[i]);
    out->rank = 0;
    out->n = 1;
    out->v[0] = p;
    return dyn;
}

/* The values of concrete tensor t (0-d or 1-D, whole numbers) as constants. */
static bool of_tensor(oar_tensor *t, svec *out) {
    if (!t || !oar_tensor_data(t) || oar_tensor_ndim(t) > 1 || oar_tensor_numel(t) > OARI_ONNX_SYM_LEN ||
        oar_dtype_is_complex(oar_tensor_dtype(t)))
        return false;
    oar_tensor *c = oar_contiguous(t);
    if (!c) return false;
    out->rank = oar_tensor_ndim(t);
    out->n = (int)oar_tensor_numel(t);
    for (int i = 0; i < out->n; i++) {
        const char *p = (const char *)oar_tensor_data(c) + (size_t)i * oar_dtype_size(oar_tensor_dtype(c));
        int64_t v;
        if (oar_tensor_dtype(c) == OAR_I64) {
            memcpy(&v, p, sizeof v);
        } else {
            double d = oari_load_f64(p, oar_tensor_dtype(c));
            if (!(fabs(d) < 9e15) || d != floor(d)) return false;
            v = (int64_t)d;
        }
        out->v[i] = sconst(v);
    }
    return true;
}

/* Input i as a vector of polynomials: its symbolic sizes or its constant values. */
static bool input(const oari_onnx_node *nd, const svec *const *sym, int i, svec *out) {
    if (i >= nd->n_in || !nd->in[i]) return false;
    if (sym[i]) return *out = *sym[i], true;
    return of_tensor(nd->in[i], out);
}

/* ONNX's Slice of one 1-D vector of length n into idx[]: the count. */
static int slice_indices(int64_t n, int64_t s, int64_t e, int64_t step, int *idx) {
    if (step == 0) return -1;
    if (s < 0) s += n;
    if (e < 0) e += n;
    if (step > 0) {
        s = s < 0 ? 0 : s > n ? n : s;
        e = e < 0 ? 0 : e > n ? n : e;
    } else {
        s = s < 0 ? -1 : s > n - 1 ? n - 1 : s;
        e = e < -1 ? -1 : e > n - 1 ? n - 1 : e;
    }
    int k = 0;
    for (int64_t i = s; step > 0 ? i < e : i > e; i += step) idx[k++] = (int)i;
    return k;
}

static int ints_of(const oari_onnx_node *nd, const svec *const *sym, int i, int64_t *v) {
    svec s;
    if (!input(nd, sym, i, &s)) return -1;
    for (int k = 0; k < s.n; k++)
        if (!is_const(&s.v[k], &v[k])) return -2;
    return s.n;
}

/* Broadcast of two vectors (0-d or 1-D). */
static bool bcast(const svec *a, const svec *b, svec *out, int *n) {
    if (a->n != b->n && a->n != 1 && b->n != 1) return false;
    *n = a->n > b->n ? a->n : b->n;
    out->rank = a->rank > b->rank ? a->rank : b->rank;
    out->n = *n;
    return true;
}
#define AT(x_, i) (&(x_).v[(x_).n == 1 ? 0 : (i)])

bool oari_onnx_sym_carries(const char *op) {
    static const char *const ops[] = {"Gather", "Unsqueeze", "Squeeze", "Concat", "Slice", "Cast", "Identity",
                                      "Reshape", "Add", "Sub", "Mul", "Div", "Neg", "Equal", "Where",
                                      "Max", "Min", "ReduceProd", "CastLike", "Abs"};
    for (size_t k = 0; k < sizeof ops / sizeof *ops; k++)
        if (!strcmp(op, ops[k])) return true;
    return false;
}

int oari_onnx_sym_node(const oari_onnx_node *nd, const svec *const *sym, svec *out) {
    const char *op = nd->n->op_type;
    svec a, b, c;
    int n;
    memset(out, 0, sizeof *out);
    if (!strcmp(op, "Identity") || !strcmp(op, "Cast") || !strcmp(op, "CastLike")) {
        if (!input(nd, sym, 0, out)) return 0;
        if (!strcmp(op, "Cast") && oari_onnx_attr_i(nd, "to", 0) == ONNX__TENSOR_PROTO__DATA_TYPE__BOOL) {
            for (int i = 0; i < out->n; i++) {
                int64_t v;
                if (is_const(&out->v[i], &v)) out->v[i] = sconst(v != 0);
                else if (never_zero(&out->v[i])) out->v[i] = sconst(1);
                else return 0;
            }
        }
        return 1;
    }
    if (!strcmp(op, "Gather")) {
        int64_t idx[OARI_ONNX_SYM_LEN];
        if (!input(nd, sym, 0, &a) || a.rank != 1 || oari_onnx_attr_i(nd, "axis", 0) != 0) return 0;
        int k = ints_of(nd, sym, 1, idx);
        if (k < 0 || oar_tensor_ndim(nd->in[1]) > 1) return 0;
        out->rank = oar_tensor_ndim(nd->in[1]);
        out->n = k;
        for (int i = 0; i < k; i++) {
            int64_t j = idx[i] < 0 ? idx[i] + a.n : idx[i];
            if (j < 0 || j >= a.n) return 0;
            out->v[i] = a.v[j];
        }
        return 1;
    }
    if (!strcmp(op, "Unsqueeze") || !strcmp(op, "Squeeze") || !strcmp(op, "Reshape")) {
        /* move entries without changing them; the result must stay a vector */
        int64_t ax[OARI_ONNX_SYM_LEN];
        int k;
        if (!input(nd, sym, 0, out)) return 0;
        if (!strcmp(op, "Squeeze")) {
            out->rank = out->n == 1 ? 0 : out->rank;
            return 1;
        }
        if (!strcmp(op, "Unsqueeze") && nd->opset < 13) k = oari_onnx_attr_ints(nd, "axes", ax, OARI_ONNX_SYM_LEN);
        else k = ints_of(nd, sym, 1, ax);
        if (k < 0) return 0;
        int rank = !strcmp(op, "Unsqueeze") ? out->rank + k : k;
        if (rank > 1 || (rank == 0 && out->n != 1)) return 0;
        out->rank = rank;
        return 1;
    }
    if (!strcmp(op, "Concat")) {
        out->rank = 1;
        for (int i = 0; i < nd->n_in; i++) {
            if (!input(nd, sym, i, &a) || a.rank != 1 || out->n + a.n > OARI_ONNX_SYM_LEN) return 0;
            for (int k = 0; k < a.n; k++) out->v[out->n++] = a.v[k];
        }
        return 1;
    }
    if (!strcmp(op, "Slice")) {
        int64_t s[1], e[1], ax[1] = {0}, st[1] = {1};
        if (!input(nd, sym, 0, &a) || a.rank != 1) return 0;
        if (nd->opset < 10) {
            if (oari_onnx_attr_ints(nd, "starts", s, 1) != 1 || oari_onnx_attr_ints(nd, "ends", e, 1) != 1 ||
                oari_onnx_attr_ints(nd, "axes", ax, 1) == 0)
                return 0;
        } else {
            if (ints_of(nd, sym, 1, s) != 1 || ints_of(nd, sym, 2, e) != 1) return 0;
            if (nd->n_in > 3 && nd->in[3] && ints_of(nd, sym, 3, ax) != 1) return 0;
            if (nd->n_in > 4 && nd->in[4] && ints_of(nd, sym, 4, st) != 1) return 0;
        }
        if (ax[0] != 0 && ax[0] != -1) return 0;
        int idx[OARI_ONNX_SYM_LEN];
        int k = slice_indices(a.n, s[0], e[0], st[0], idx);
        if (k < 0) return 0;
        out->rank = 1;
        out->n = k;
        for (int i = 0; i < k; i++) out->v[i] = a.v[idx[i]];
        return 1;
    }
    if (!strcmp(op, "Neg") || !strcmp(op, "Abs")) {
        if (!input(nd, sym, 0, out)) return 0;
        for (int i = 0; i < out->n; i++) {
            int64_t v;
            if (!strcmp(op, "Neg")) {
                sexpr m1 = sconst(-1);
                out->v[i] = mul(&out->v[i], &m1);
            } else if (is_const(&out->v[i], &v)) {
                out->v[i] = sconst(v < 0 ? -v : v);
            } else if (!never_zero(&out->v[i]) || out->v[i].t[0].c < 0) {
                return 0;
            }
        }
        return 1;
    }
    if (!strcmp(op, "ReduceProd")) { /* of all entries (the number of elements of a shape) */
        if (!input(nd, sym, 0, &a) || a.rank != 1 || oari_onnx_attr_i(nd, "keepdims", 1) || nd->n_in > 1) return 0;
        if (oari_onnx_attr(nd, "axes") && oari_onnx_attr(nd, "axes")->n_ints != 1) return 0;
        sexpr p = sconst(1);
        for (int i = 0; i < a.n; i++) p = mul(&p, &a.v[i]);
        out->rank = 0;
        out->n = 1;
        out->v[0] = p;
        return 1;
    }
    if (!strcmp(op, "Where")) {
        if (!input(nd, sym, 0, &c) || !input(nd, sym, 1, &a) || !input(nd, sym, 2, &b)) return 0;
        svec ab;
        if (!bcast(&a, &b, &ab, &n) || !bcast(&c, &ab, out, &n)) return 0;
        for (int i = 0; i < n; i++) {
            int64_t cv;
            if (!is_const(AT(c, i), &cv)) return 0;
            out->v[i] = cv ? *AT(a, i) : *AT(b, i);
        }
        return 1;
    }
    /* binary arithmetic and comparisons */
    if (!input(nd, sym, 0, &a) || !input(nd, sym, 1, &b) || !bcast(&a, &b, out, &n)) return 0;
    bool integral = oar_dtype_is_integral(oar_tensor_dtype(nd->in[0]));
    for (int i = 0; i < n; i++) {
        const sexpr *x = AT(a, i), *y = AT(b, i);
        sexpr d = add(x, y, -1);
        int64_t dv;
        if (!strcmp(op, "Add")) out->v[i] = add(x, y, 1);
        else if (!strcmp(op, "Sub")) out->v[i] = d;
        else if (!strcmp(op, "Mul")) out->v[i] = mul(x, y);
        else if (!strcmp(op, "Div")) out->v[i] = divide(x, y, integral);
        else if (!strcmp(op, "Equal") && is_const(&d, &dv)) out->v[i] = sconst(dv == 0);
        else if (!strcmp(op, "Equal") && never_zero(&d)) out->v[i] = sconst(0);
        else if ((!strcmp(op, "Max") || !strcmp(op, "Min")) && is_const(&d, &dv))
            out->v[i] = (dv >= 0) == !strcmp(op, "Max") ? *x : *y;
        else if ((!strcmp(op, "Max") || !strcmp(op, "Min")) && never_zero(&d))
            out->v[i] = (d.t[0].c > 0) == !strcmp(op, "Max") ? *x : *y;
        else return 0;
        if (out->v[i].n < 0) return 0; /* not a polynomial: computed at run time instead */
    }
    return 1;
}

oar_tensor *oari_onnx_sym_concrete(const svec *v, oar_dtype dt, const char *what) {
    const oar_graph *g = oari_trace_graph();
    double vals[OARI_ONNX_SYM_LEN];
    char buf[160];
    for (int i = 0; i < v->n; i++) {
        const sexpr *e = &v->v[i];
        int64_t c;
        int sym = -1;
        if (is_const(e, &c)) {
            vals[i] = (double)c;
            continue;
        }
        if (e->n == 1) {
            int n1 = 0;
            for (int s = 0; s < OARI_MAX_SYMS; s++) {
                if (e->t[0].e[s] == 1) sym = s, n1++;
                else if (e->t[0].e[s]) n1 = 2;
            }
            if (n1 != 1 || e->t[0].c < 1 || e->t[0].c > INT32_MAX) sym = -1;
        }
        if (sym >= 0 && g && sym < g->n_syms) {
            vals[i] = (double)(e->t[0].c * g->syms[sym].trace_size);
            continue;
        }
        oari_error(OAR_ERR_UNSUPPORTED, "%s entry %d is %s, computed from the model's dynamic dims; oar graphs "
                   "rewrite sizes that are constants or a multiple of one dynamic dim: use static input shapes",
                   what, i, expr_str(e, buf, sizeof buf));
        return NULL;
    }
    int64_t n = v->n;
    oar_tensor *t = oar_tensor_from_data(vals, OAR_F64, v->rank, v->rank ? &n : NULL);
    return t ? oar_cast(t, dt) : NULL;
}

oar_tensor *oari_onnx_sym_runtime(const svec *v, oar_dtype dt, oar_tensor *const *src, const int *src_dim) {
    oar_tensor *entries[OARI_ONNX_SYM_LEN], *size[OARI_MAX_SYMS] = {0};
    char buf[160];
    for (int i = 0; i < v->n; i++) {
        const sexpr *e = &v->v[i];
        if (e->n < 0) {
            oari_error(OAR_ERR_UNSUPPORTED, "a size computed from the model's dynamic dims is not a polynomial in "
                       "them (%s): use static input shapes", expr_str(e, buf, sizeof buf));
            return NULL;
        }
        oar_tensor *acc = NULL;
        for (int k = 0; k < e->n; k++) {
            oar_tensor *term = NULL;
            for (int s = 0; s < OARI_MAX_SYMS; s++) {
                if (!e->t[k].e[s]) continue;
                if (!size[s]) {
                    if (!src[s]) {
                        oari_error(OAR_ERR_UNSUPPORTED, "the size %s is computed from a dynamic dim no graph "
                                   "input has", expr_str(e, buf, sizeof buf));
                        return NULL;
                    }
                    oari_attrs a = {.ni = 2, .i = {(int64_t)1 << src_dim[s], OAR_F64}};
                    if (!(size[s] = oari_call1(OARI_OP_size_of, src[s], &a))) return NULL;
                }
                for (int p = 0; p < e->t[k].e[s]; p++) term = term ? oar_mul(term, size[s]) : size[s];
            }
            if (!term) term = oari_onnx_scalar((double)e->t[k].c, OAR_F64);
            else if (e->t[k].c != 1) term = oar_mul_scalar(term, (double)e->t[k].c);
            acc = acc ? oar_add(acc, term) : term;
            if (!acc) return NULL;
        }
        entries[i] = acc ? acc : oari_onnx_scalar(0, OAR_F64);
        if (!entries[i]) return NULL;
    }
    oar_tensor *t = v->rank ? oar_stack(v->n, entries, 0) : entries[0];
    return t ? oar_cast(t, dt) : NULL;
}

int oari_onnx_sym_check(oar_tensor *t) {
    const oar_graph *g = oari_trace_graph();
    if (!g || !t || oar_tensor_data(t)) return 0;
    for (int d = 0; d < oar_tensor_ndim(t); d++) {
        int64_t n = oar_tensor_shape(t)[d];
        for (int s = 0; s < g->n_syms; s++) {
            int32_t k = 0;
            int r = n % g->syms[s].trace_size ? -1 : oari_graph_sym_of(g, n / g->syms[s].trace_size, &k);
            if (r >= 0)
                return oari_error(OAR_ERR_UNSUPPORTED, "dim %d of the result is %lld*%s*%s, a product of dynamic "
                                  "dims; oar graphs hold sizes that are a multiple of one dynamic dim: fix all but "
                                  "one of them", d, (long long)k, g->syms[s].name, g->syms[r].name);
        }
    }
    return 0;
}

oar_tensor *oari_onnx_traced(oar_tensor *t) {
    if (!t || !oar_tensor_data(t) || !oari_trace_graph()) return t;
    int v = oari_trace_value_of(t); /* a constant of the graph */
    if (v < 0) return NULL;
    oar_tensor *s = oari_tensor_make(NULL, oar_tensor_dtype(t), oar_tensor_ndim(t), oar_tensor_shape(t), NULL, 0);
    if (!s) return NULL;
    oari_trace_bind(s, v);
    return oari_pool_adopt(s);
}

bool oari_onnx_dynamic_shape(int n, const int64_t *shape) {
    for (int d = 0; d < n; d++)
        if (oari_trace_size_is_dynamic(shape[d])) return true;
    return false;
}

oar_tensor *oari_onnx_sym_range(const oari_onnx_node *nd, const svec *const *sym) {
    svec a[3];
    int64_t s0, d0;
    char buf[160];
    for (int i = 0; i < 3; i++)
        if (!input(nd, sym, i, &a[i]) || a[i].n != 1) {
            oari_error(OAR_ERR_UNSUPPORTED, "start, limit and delta must be whole numbers");
            return NULL;
        }
    if (!is_const(&a[0].v[0], &s0) || !is_const(&a[2].v[0], &d0) || d0 == 0) {
        oari_error(OAR_ERR_UNSUPPORTED, "a start or delta computed from the model's dynamic dims (only the limit "
                   "may be)");
        return NULL;
    }
    sexpr span = add(&a[1].v[0], &a[0].v[0], -1), d = sconst(d0);
    svec len = {.rank = 1, .n = 1};
    len.v[0] = divide(&span, &d, false);
    if (len.v[0].n < 0) {
        oari_error(OAR_ERR_UNSUPPORTED, "the length (%s) / %lld is not a whole polynomial in the dynamic dims",
                   expr_str(&span, buf, sizeof buf), (long long)d0);
        return NULL;
    }
    oar_tensor *L = oari_onnx_sym_concrete(&len, OAR_I64, "the length");
    if (!L) return NULL;
    int64_t n = *(const int64_t *)oar_tensor_data(L);
    /* start + delta * (cumsum(ones) - 1): ones a node expanded to the dynamic length */
    oar_tensor *one = oari_onnx_traced(oari_onnx_scalar(1, OAR_F64));
    oar_tensor *i = one ? oar_sub(oar_cumsum(oar_expand(one, 1, &n), 0), oari_onnx_scalar(1, OAR_F64)) : NULL;
    oar_tensor *y = i ? oar_add(oar_mul_scalar(i, (double)d0), oari_onnx_scalar((double)s0, OAR_F64)) : NULL;
    return y ? oar_cast(y, oar_tensor_dtype(nd->in[0])) : NULL;
}

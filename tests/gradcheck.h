/* Gradient checking in float64: analytic gradients from oar_grad against
 * central differences, first order, and second order (the gradient of
 * sum(u . grad(f)) with create_graph against central differences of the
 * first-order analytic gradient). Inputs are random (f64 or c128), laid
 * out contiguously and then strided (non-contiguous); random values can be
 * kept away from points where f is not differentiable. Include after
 * test.h; needs src/ on the include path. */
#ifndef OAR_GRADCHECK_H
#define OAR_GRADCHECK_H

#include "core/core.h"
#include "test.h"

#include <complex.h>

/* f of n tensors; returns one tensor following the pool rule, or NULL. */
typedef oar_tensor *(*gc_fn)(void *ctx, int n, oar_tensor *const *x);

#define GC_MAX_IN 8

typedef struct gc_input {
    oar_dtype dtype;         /* random: OAR_F64 (0 means that too) or OAR_C128; with data: its dtype */
    int ndim;
    int64_t shape[OAR_MAX_DIMS];
    double lo, hi;           /* uniform range of random values; both 0: [-2, 2] */
    const void *data;        /* fixed values (not differentiated), e.g. indices or targets */
    bool constant;           /* random but not differentiated */
} gc_input;

typedef struct gc_opts {
    double eps, atol, rtol;  /* 0: 1e-6, 1e-5, 1e-4 */
    double kinks[8];         /* random values stay `margin` away from these points */
    int n_kinks;
    double margin;
    bool first_only;         /* skip the second-order check */
    bool contiguous_only;    /* skip the strided layout */
    uint64_t seed;
} gc_opts;

static uint64_t gc_state = 88172645463325252ull;
static inline double gc_rand(void) { /* xorshift64*, uniform in [0, 1) */
    gc_state ^= gc_state >> 12;
    gc_state ^= gc_state << 25;
    gc_state ^= gc_state >> 27;
    return (double)((gc_state * 2685821657736338717ull) >> 11) / 9007199254740992.0;
}

static inline double gc_draw(const gc_input *in, const gc_opts *o) {
    double lo = in->lo, hi = in->hi;
    if (lo == 0 && hi == 0) lo = -2, hi = 2;
    for (int tries = 0;; tries++) {
        double v = lo + (hi - lo) * gc_rand();
        bool ok = true;
        for (int k = 0; k < o->n_kinks; k++) ok = ok && fabs(v - o->kinks[k]) >= o->margin;
        if (ok || tries > 1000) return v;
    }
}

/* Pointer to logical element k of a CPU tensor, honouring strides. */
static inline char *gc_elem(oar_tensor *t, int64_t k) {
    char *p = oar_tensor_data(t);
    size_t es = oar_dtype_size(oar_tensor_dtype(t));
    const int64_t *sh = oar_tensor_shape(t), *st = oar_tensor_strides(t);
    for (int d = oar_tensor_ndim(t) - 1; d >= 0; d--) {
        p += (k % sh[d]) * st[d] * (int64_t)es;
        k /= sh[d];
    }
    return p;
}

static inline bool gc_is_complex(oar_tensor *t) { return oar_dtype_is_complex(oar_tensor_dtype(t)); }

/* Makes input i: a fresh tensor (pool-owned), strided if asked. */
static inline oar_tensor *gc_make(const gc_input *in, const gc_opts *o, bool strided) {
    if (in->data) return oar_tensor_from_data(in->data, in->dtype, in->ndim, in->shape);
    oar_dtype dt = in->dtype ? in->dtype : OAR_F64;
    int64_t numel = 1;
    for (int d = 0; d < in->ndim; d++) numel *= in->shape[d];
    oar_tensor *t;
    if (strided && numel > 1) {
        int64_t big = 2 * numel + 1, strides[OAR_MAX_DIMS];
        oar_tensor *base = oar_zeros(dt, 1, &big);
        if (!base) return NULL;
        oari_contiguous_strides(in->ndim, in->shape, strides);
        for (int d = 0; d < in->ndim; d++) strides[d] *= 2;
        t = oari_pool_adopt(oari_tensor_view(base, in->ndim, in->shape, strides, 1));
    } else {
        t = oar_empty(dt, in->ndim, in->shape, NULL);
    }
    if (!t) return NULL;
    for (int64_t k = 0; k < numel; k++) {
        double *p = (double *)gc_elem(t, k);
        p[0] = gc_draw(in, o);
        if (dt == OAR_C128) p[1] = gc_draw(in, o);
    }
    return t;
}

/* Values of t as doubles (2 per element for complex); malloc'd. */
static inline double *gc_host(oar_tensor *t, int64_t *count) {
    oar_pool *p = oar_pool_push();
    oar_tensor *c = oar_cast(t, gc_is_complex(t) ? OAR_C128 : OAR_F64);
    int64_t n = oar_tensor_numel(t) * (gc_is_complex(t) ? 2 : 1);
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    if (!c || oar_tensor_to_host(c, v, (size_t)n * sizeof *v)) {
        free(v);
        v = NULL;
    }
    oar_pool_pop(p);
    *count = n;
    return v;
}

static inline double gc_dot(const double *a, const double *b, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

typedef struct gc_run {
    const char *name;
    gc_fn fn;
    void *ctx;
    int n;
    oar_tensor *x[GC_MAX_IN];
    bool diff[GC_MAX_IN];
    oar_tensor *v;       /* grad_output for f */
    double *vh;          /* its host values */
    int64_t nv;
    oar_tensor *u[GC_MAX_IN]; /* grad_outputs for the first-order gradients */
    double *uh[GC_MAX_IN];
    int64_t nu[GC_MAX_IN];
} gc_run;

/* <v, f(x)> without recording. NAN on failure. */
static inline double gc_loss(gc_run *r) {
    oar_pool *p = oar_pool_push();
    oar_no_grad_push();
    oar_tensor *y = r->fn(r->ctx, r->n, r->x);
    oar_no_grad_pop();
    int64_t n = 0;
    double *h = y ? gc_host(y, &n) : NULL, s = NAN;
    if (h && n == r->nv) s = gc_dot(h, r->vh, n);
    free(h);
    oar_pool_pop(p);
    return s;
}

/* First-order analytic gradients (pool-owned; NULL entries are zero). */
static inline int gc_grads(gc_run *r, bool create, oar_tensor **g) {
    oar_tensor *xs[GC_MAX_IN];
    int m = 0;
    for (int i = 0; i < r->n; i++)
        if (r->diff[i]) xs[m++] = r->x[i];
    oar_tensor *y = r->fn(r->ctx, r->n, r->x);
    if (!y) return -1;
    if (!oar_tensor_requires_grad(y)) {
        for (int i = 0; i < m; i++) g[i] = NULL;
        return 0;
    }
    return oar_grad(1, &y, &r->v, m, xs, create, true, g);
}

/* S(x) = sum_i <u_i, g_i(x)>. */
static inline double gc_sloss(gc_run *r) {
    oar_pool *p = oar_pool_push();
    oar_tensor *g[GC_MAX_IN];
    double s = NAN;
    if (gc_grads(r, false, g) == 0) {
        s = 0;
        for (int i = 0, m = 0; i < r->n; i++) {
            if (!r->diff[i]) continue;
            if (g[m]) {
                int64_t n = 0;
                double *h = gc_host(g[m], &n);
                s = h && n == r->nu[i] ? s + gc_dot(h, r->uh[i], n) : NAN;
                free(h);
            }
            m++;
        }
    }
    oar_pool_pop(p);
    return s;
}

/* Compares analytic gradients g (one per differentiable input) with
 * central differences of loss(). Returns the number of mismatches. */
static inline int gc_compare(gc_run *r, oar_tensor **g, double (*loss)(gc_run *), const gc_opts *o,
                      const char *what) {
    int bad = 0;
    for (int i = 0, m = 0; i < r->n; i++) {
        if (!r->diff[i]) continue;
        oar_tensor *x = r->x[i];
        int64_t numel = oar_tensor_numel(x), na = 0;
        int parts = gc_is_complex(x) ? 2 : 1;
        double *a = g[m] ? gc_host(g[m], &na) : NULL;
        if (g[m] && (!a || na != numel * parts)) {
            fprintf(stderr, "  %s: %s gradient of input %d has %lld values, expected %lld\n",
                    r->name, what, i, (long long)na, (long long)(numel * parts));
            free(a);
            return bad + 1;
        }
        for (int64_t k = 0; k < numel; k++) {
            for (int c = 0; c < parts; c++) {
                double *p = (double *)gc_elem(x, k) + c, keep = *p;
                *p = keep + o->eps;
                double lp = loss(r);
                *p = keep - o->eps;
                double lm = loss(r);
                *p = keep;
                double num = (lp - lm) / (2 * o->eps), an = a ? a[k * parts + c] : 0;
                if (!(fabs(an - num) <= o->atol + o->rtol * fabs(num))) {
                    if (bad < 4)
                        fprintf(stderr, "  %s: %s gradient of input %d, element %lld%s: analytic "
                                "%.10g, numeric %.10g\n", r->name, what, i, (long long)k,
                                parts == 2 ? (c ? " (imag)" : " (real)") : "", an, num);
                    bad++;
                }
            }
        }
        free(a);
        m++;
    }
    return bad;
}

/* One layout. Returns the number of failures (printed). */
static inline int gc_check_layout(const char *name, gc_fn fn, void *ctx, int n, const gc_input *ins,
                           const gc_opts *o, bool strided) {
    gc_run r = {.name = name, .fn = fn, .ctx = ctx, .n = n};
    int fails = 0;
    oar_pool *p = oar_pool_push();
    for (int i = 0; i < n && !fails; i++) {
        r.x[i] = gc_make(&ins[i], o, strided);
        r.diff[i] = !ins[i].data && !ins[i].constant;
        if (!r.x[i]) fails++;
        else if (r.diff[i]) oar_tensor_set_requires_grad(r.x[i], true);
    }
    oar_tensor *y = fails ? NULL : fn(ctx, n, r.x);
    if (!y) {
        fprintf(stderr, "  %s: forward failed: %s\n", name, oar_last_error());
        oar_pool_pop(p);
        return 1;
    }
    /* grad_output v, random of y's shape and dtype */
    r.v = oar_empty(oar_tensor_dtype(y), oar_tensor_ndim(y), oar_tensor_shape(y), NULL);
    int64_t ny = oar_tensor_numel(y) * (gc_is_complex(y) ? 2 : 1);
    for (int64_t k = 0; r.v && k < ny; k++) ((double *)oar_tensor_data(r.v))[k] = gc_rand() * 2 - 1;
    if (!r.v || (oar_tensor_dtype(y) != OAR_F64 && oar_tensor_dtype(y) != OAR_C128)) {
        fprintf(stderr, "  %s: output dtype %s (expected float64 or complex128)\n", name,
                oar_dtype_name(oar_tensor_dtype(y)));
        oar_pool_pop(p);
        return 1;
    }
    r.vh = gc_host(r.v, &r.nv);
    oar_tensor *g[GC_MAX_IN] = {0};
    if (gc_grads(&r, false, g)) {
        fprintf(stderr, "  %s: backward failed: %s\n", name, oar_last_error());
        fails++;
    } else {
        fails += gc_compare(&r, g, gc_loss, o, strided ? "strided first-order" : "first-order") > 0;
    }
    if (!fails && !o->first_only) {
        oar_tensor *g1[GC_MAX_IN] = {0}, *outs[GC_MAX_IN], *us[GC_MAX_IN], *xs[GC_MAX_IN];
        oar_tensor *g2[GC_MAX_IN] = {0};
        int m = 0, k = 0;
        for (int i = 0; i < n; i++) {
            if (!r.diff[i]) continue;
            r.u[i] = oar_empty(oar_tensor_dtype(r.x[i]), oar_tensor_ndim(r.x[i]),
                               oar_tensor_shape(r.x[i]), NULL);
            int64_t nu = oar_tensor_numel(r.x[i]) * (gc_is_complex(r.x[i]) ? 2 : 1);
            for (int64_t e = 0; e < nu; e++) ((double *)oar_tensor_data(r.u[i]))[e] = gc_rand() * 2 - 1;
            r.uh[i] = gc_host(r.u[i], &r.nu[i]);
            xs[m++] = r.x[i];
        }
        if (gc_grads(&r, true, g1)) {
            fprintf(stderr, "  %s: backward with create_graph failed: %s\n", name, oar_last_error());
            fails++;
        } else {
            for (int i = 0, j = 0; i < n; i++) {
                if (!r.diff[i]) continue;
                if (g1[j] && oar_tensor_requires_grad(g1[j])) {
                    outs[k] = g1[j];
                    us[k++] = r.u[i];
                }
                j++;
            }
            if (k && oar_grad(k, outs, us, m, xs, false, true, g2)) {
                fprintf(stderr, "  %s: second-order backward failed: %s\n", name, oar_last_error());
                fails++;
            } else {
                fails += gc_compare(&r, g2, gc_sloss, o, strided ? "strided second-order" : "second-order") > 0;
            }
        }
        for (int i = 0; i < n; i++) free(r.uh[i]);
    }
    free(r.vh);
    oar_pool_pop(p);
    return fails;
}

/* Runs the checks and returns the number of failing layouts (printed). */
static inline int gradcheck_failures(const char *name, gc_fn fn, void *ctx, int n,
                                     const gc_input *ins, const gc_opts *opts) {
    gc_opts o = opts ? *opts : (gc_opts){0};
    if (o.eps == 0) o.eps = 1e-6;
    if (o.atol == 0) o.atol = 1e-5;
    if (o.rtol == 0) o.rtol = 1e-4;
    if (o.seed) gc_state = o.seed;
    int fails = gc_check_layout(name, fn, ctx, n, ins, &o, false);
    if (!fails && !o.contiguous_only) fails += gc_check_layout(name, fn, ctx, n, ins, &o, true);
    oar_clear_error();
    return fails;
}

/* Checks fn's gradients (first and second order; contiguous and strided
 * inputs). Counts one CHECK; prints mismatches. Returns true if it passed. */
static inline bool gradcheck(const char *name, gc_fn fn, void *ctx, int n, const gc_input *ins,
                             const gc_opts *opts) {
    int fails = gradcheck_failures(name, fn, ctx, n, ins, opts);
    if (fails) {
        test_failed++;
        fprintf(stderr, "%s: gradcheck of %s FAILED\n", test_current, name);
    } else {
        test_passed++;
    }
    return !fails;
}

#endif

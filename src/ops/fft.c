/* Discrete Fourier transforms: the three primitives fft_c2c, fft_r2c and
 * fft_c2r (shape rules, gradient rules written with ops) and the public
 * numpy.fft-style functions of include/oar/fft.h composed from them with
 * slice/pad/conj/roll. Kernels: src/backends/cpu/cpu_fft.c. */
#include "op.h"

#include <oar/autograd.h>
#include <oar/fft.h>

#include <math.h>
#include <string.h>

/* ---- attributes: [scale mode, direction or n, k, dims...] --------------- */

enum { NORM_NONE = 0, NORM_SQRT = 1, NORM_N = 2 };

static int check_attrs(oari_infer *c, int *k_out) {
    const oari_attrs *a = c->attrs;
    oar_tensor *x = c->in[0];
    int k = a->ni >= 3 ? (int)a->i[2] : -1;
    if (k < 1 || k > x->ndim || a->ni != 3 + k || a->i[0] < 0 || a->i[0] > 2)
        return oari_error(OAR_ERR_INVALID, "%s: bad attributes (%d values, %d dims) for an input "
                          "of rank %d", c->op, a->ni, k, x->ndim);
    unsigned seen = 0;
    for (int j = 0; j < k; j++) {
        int64_t d = a->i[3 + j];
        if (d < 0 || d >= x->ndim || (seen & (1u << d)))
            return oari_error(OAR_ERR_INVALID, "%s: dim %lld out of range or repeated (rank %d)",
                              c->op, (long long)d, x->ndim);
        seen |= 1u << d;
    }
    *k_out = k;
    return 0;
}

static oar_dtype complex_of(oar_dtype d) {
    if (oar_dtype_is_complex(d)) return d;
    return d == OAR_F64 ? OAR_C128 : OAR_C64;
}
static oar_dtype real_of(oar_dtype d) {
    return d == OAR_C128 ? OAR_F64 : d == OAR_C64 ? OAR_F32 : d == OAR_F64 ? OAR_F64 : OAR_F32;
}

static int check_sizes(oari_infer *c, int k, const int64_t *shape) {
    for (int j = 0; j < k; j++) {
        int64_t d = c->attrs->i[3 + j];
        if (shape[d] < 1) {
            char sb[200];
            return oari_error(OAR_ERR_INVALID, "%s: invalid number of data points (%lld) along dim "
                              "%lld of shape %s", c->op, (long long)shape[d], (long long)d,
                              oari_shape_str(sb, c->in[0]->ndim, c->in[0]->shape));
        }
    }
    return 0;
}

static int infer_c2c(oari_infer *c) {
    int k, st = check_attrs(c, &k);
    if (st || (st = check_sizes(c, k, c->in[0]->shape))) return st;
    oar_dtype d = complex_of(c->in[0]->dtype);
    oari_meta_from(&c->out[0], c->in[0]);
    c->out[0].dtype = c->in_dtype[0] = c->kernel_dtype = d;
    return 0;
}

static int infer_r2c(oari_infer *c) {
    int k, st = check_attrs(c, &k);
    if (st || (st = check_sizes(c, k, c->in[0]->shape))) return st;
    if (oar_dtype_is_complex(c->in[0]->dtype))
        return oari_error(OAR_ERR_INVALID, "%s: expected a real input, got %s", c->op,
                          oar_dtype_name(c->in[0]->dtype));
    oar_dtype r = real_of(c->in[0]->dtype);
    oari_meta_from(&c->out[0], c->in[0]);
    int h = (int)c->attrs->i[3 + k - 1];
    c->out[0].shape[h] = c->in[0]->shape[h] / 2 + 1;
    c->in_dtype[0] = c->kernel_dtype = r;
    c->out[0].dtype = complex_of(r);
    return 0;
}

static int infer_c2r(oari_infer *c) {
    int k, st = check_attrs(c, &k);
    if (st || (st = check_sizes(c, k, c->in[0]->shape))) return st;
    int h = (int)c->attrs->i[3 + k - 1];
    int64_t n = c->attrs->i[1];
    if (n < 1 || c->in[0]->shape[h] != n / 2 + 1)
        return oari_error(OAR_ERR_INVALID, "%s: output size %lld needs %lld inputs along dim %d, "
                          "got %lld", c->op, (long long)n, (long long)(n / 2 + 1), h,
                          (long long)c->in[0]->shape[h]);
    oar_dtype d = complex_of(c->in[0]->dtype);
    oari_meta_from(&c->out[0], c->in[0]);
    c->out[0].shape[h] = n;
    c->in_dtype[0] = c->kernel_dtype = d;
    c->out[0].dtype = real_of(d);
    return 0;
}

/* ---- gradient rules (PyTorch's fft_*_backward, written with ops) -------- */

static int grad_c2c(oari_grad_ctx *g) {
    /* the adjoint of a DFT is the DFT of the other direction, same scaling */
    oari_attrs a = *g->attrs;
    a.i[1] = !a.i[1];
    g->gin[0] = oari_call1(OARI_OP_fft_c2c, g->gout[0], &a);
    return g->gin[0] ? 0 : oari_fail_status();
}

static int grad_r2c(oari_grad_ctx *g) {
    /* zero-fill the dropped half, inverse c2c, real part */
    const oari_meta *m = &g->in_meta[0];
    const oari_attrs *at = g->attrs;
    const int k = (int)at->i[2], h = (int)at->i[3 + k - 1];
    oar_tensor *gy = g->gout[0];
    const int64_t missing = m->shape[h] - (m->shape[h] / 2 + 1);
    if (missing > 0) {
        int64_t pads[2 * OAR_MAX_DIMS] = {0};
        const int np = 2 * (m->ndim - h);
        pads[np - 1] = missing;
        gy = oar_pad(gy, np, pads, OAR_PAD_CONSTANT, 0);
    }
    oari_attrs a = *at;
    a.i[1] = 0;
    oar_tensor *full = oari_call1(OARI_OP_fft_c2c, gy, &a);
    g->gin[0] = oar_real(full);
    return g->gin[0] ? 0 : oari_fail_status();
}

static int grad_c2r(oari_grad_ctx *g) {
    /* r2c of the gradient, entries that stand for two (k and n-k) doubled */
    const oari_meta *m = &g->in_meta[0];
    const oari_attrs *at = g->attrs;
    const int k = (int)at->i[2], h = (int)at->i[3 + k - 1];
    const int64_t n = at->i[1], half = m->shape[h], twice = n - half;
    oari_attrs a = *at;
    a.i[1] = 0;
    oar_tensor *gi = oari_call1(OARI_OP_fft_r2c, g->gout[0], &a);
    if (gi && twice > 0) {
        oar_pool *p = oar_pool_push();
        if (!p) return oari_fail_status();
        double *w = oari_malloc((size_t)half * sizeof *w);
        oar_tensor *wt = NULL;
        if (w) {
            for (int64_t j = 0; j < half; j++) w[j] = j >= 1 && j <= twice ? 2.0 : 1.0;
            int64_t shape[OAR_MAX_DIMS];
            const int nd = m->ndim - h;
            shape[0] = half;
            for (int j = 1; j < nd; j++) shape[j] = 1;
            wt = oar_cast(oar_tensor_from_data(w, OAR_F64, nd, shape), real_of(m->dtype));
            oari_free(w, (size_t)half * sizeof *w);
        }
        gi = oari_pool_return(p, wt ? oar_mul(gi, wt) : NULL);
    }
    g->gin[0] = gi;
    return g->gin[0] ? 0 : oari_fail_status();
}

const oari_op_def oari_def_fft_c2c = {
    .name = "fft_c2c", .n_in = 1, .n_out = 1, .fusion = OARI_FUSE_OPAQUE,
    .infer = infer_c2c, .grad = grad_c2c,
};
const oari_op_def oari_def_fft_r2c = {
    .name = "fft_r2c", .n_in = 1, .n_out = 1, .fusion = OARI_FUSE_OPAQUE,
    .infer = infer_r2c, .grad = grad_r2c,
};
const oari_op_def oari_def_fft_c2r = {
    .name = "fft_c2r", .n_in = 1, .n_out = 1, .fusion = OARI_FUSE_OPAQUE,
    .infer = infer_c2r, .grad = grad_c2r,
};

/* ---- public functions ---------------------------------------------------- */

/* The scale mode of a transform in the forward (exp -i) or inverse
 * direction under the user's norm; -1 with an error naming fn. */
static int norm_mode(const char *fn, const char *norm, bool forward) {
    if (!norm || !strcmp(norm, "backward")) return forward ? NORM_NONE : NORM_N;
    if (!strcmp(norm, "forward")) return forward ? NORM_N : NORM_NONE;
    if (!strcmp(norm, "ortho")) return NORM_SQRT;
    oari_error(OAR_ERR_INVALID, "%s: unknown norm \"%s\" (expected \"backward\", \"forward\" or "
               "\"ortho\")", fn, norm);
    return -1;
}

/* The dims and sizes of a call: k dims in dims_out (wrapped), the wanted
 * size per dim in n_out (-1: keep). Reports errors naming fn. */
static int resolve(const char *fn, oar_tensor *x, int ndims, const int64_t *s, const int64_t *dims,
                   int *k_out, int64_t *dims_out, int64_t *n_out) {
    if (!x) {
        if (!oari_error_pending()) oari_error(OAR_ERR_INVALID, "%s: input is NULL", fn);
        return OAR_ERR_INVALID;
    }
    int k;
    if (!s && !dims) {
        k = x->ndim;
        for (int j = 0; j < k; j++) dims_out[j] = j;
    } else {
        if (ndims < 0 || ndims > x->ndim)
            return oari_error(OAR_ERR_INVALID, "%s: %d dims given for an input of rank %d", fn,
                              ndims, x->ndim);
        k = ndims;
        for (int j = 0; j < k; j++) {
            int d = dims ? oari_wrap_dim(fn, dims[j], x->ndim) : x->ndim - k + j;
            if (d < 0) return OAR_ERR_INVALID;
            for (int i = 0; i < j; i++)
                if (dims_out[i] == d)
                    return oari_error(OAR_ERR_INVALID, "%s: dim %d appears twice in dims", fn, d);
            dims_out[j] = d;
        }
    }
    for (int j = 0; j < k; j++) {
        int64_t n = s ? s[j] : -1;
        if (n != -1 && n < 1)
            return oari_error(OAR_ERR_INVALID, "%s: invalid number of data points %lld along dim "
                              "%lld (expected -1 to keep the size, or >= 1)", fn, (long long)n,
                              (long long)dims_out[j]);
        n_out[j] = n;
    }
    *k_out = k;
    return 0;
}

/* x cropped or zero-padded to n along dim d. */
static oar_tensor *resize(oar_tensor *x, int d, int64_t n) {
    if (!x) return NULL;
    int64_t have = x->shape[d];
    if (n == have) return x;
    if (n < have) return oar_slice(x, d, 0, n, 1);
    int64_t pads[2 * OAR_MAX_DIMS] = {0};
    const int np = 2 * (x->ndim - d);
    pads[np - 1] = n - have;
    return oar_pad(x, np, pads, OAR_PAD_CONSTANT, 0);
}

static int check_sizes_pub(const char *fn, oar_tensor *x, int k, const int64_t *dims, const int64_t *n) {
    for (int j = 0; j < k; j++) {
        int64_t v = n[j] == -1 ? x->shape[dims[j]] : n[j];
        if (v < 1)
            return oari_error(OAR_ERR_INVALID, "%s: invalid number of data points (%lld) along dim "
                              "%lld", fn, (long long)v, (long long)dims[j]);
    }
    return 0;
}

static oari_attrs fft_attrs(int mode, int64_t a1, int k, const int64_t *dims) {
    oari_attrs a = {.ni = 3 + k, .i = {mode, a1, k}};
    memcpy(a.i + 3, dims, (size_t)k * sizeof *dims);
    return a;
}

static oar_tensor *c2c_n(const char *fn, oar_tensor *x, int ndims, const int64_t *s,
                         const int64_t *dims, int mode, bool forward) {
    int k;
    int64_t d[OAR_MAX_DIMS], n[OAR_MAX_DIMS];
    if (mode < 0 || resolve(fn, x, ndims, s, dims, &k, d, n) || check_sizes_pub(fn, x, k, d, n))
        return NULL;
    oar_pool *p = oar_pool_push();
    if (!p) return NULL; /* out of memory, reported */
    oar_tensor *y = x;
    for (int j = 0; j < k; j++)
        if (n[j] != -1) y = resize(y, (int)d[j], n[j]);
    if (k == 0) {
        y = oar_clone(oar_cast(y, complex_of(x->dtype)));
    } else {
        oari_attrs a = fft_attrs(mode, forward, k, d);
        y = y ? oari_call1(OARI_OP_fft_c2c, y, &a) : NULL;
    }
    return oari_pool_return(p, y);
}

static oar_tensor *r2c_n(const char *fn, oar_tensor *x, int ndims, const int64_t *s,
                         const int64_t *dims, int mode) {
    int k;
    int64_t d[OAR_MAX_DIMS], n[OAR_MAX_DIMS];
    if (mode < 0 || resolve(fn, x, ndims, s, dims, &k, d, n) || check_sizes_pub(fn, x, k, d, n))
        return NULL;
    if (oar_dtype_is_complex(x->dtype))
        return oari_error(OAR_ERR_INVALID, "%s: expected a real input, got %s", fn,
                          oar_dtype_name(x->dtype)), NULL;
    if (k == 0) return oari_error(OAR_ERR_INVALID, "%s: no dims to transform", fn), NULL;
    oar_pool *p = oar_pool_push();
    if (!p) return NULL; /* out of memory, reported */
    oar_tensor *y = x;
    for (int j = 0; j < k; j++)
        if (n[j] != -1) y = resize(y, (int)d[j], n[j]);
    oari_attrs a = fft_attrs(mode, 0, k, d);
    y = y ? oari_call1(OARI_OP_fft_r2c, y, &a) : NULL;
    return oari_pool_return(p, y);
}

static oar_tensor *c2r_n(const char *fn, oar_tensor *x, int ndims, const int64_t *s,
                         const int64_t *dims, int mode, bool conj_first) {
    int k;
    int64_t d[OAR_MAX_DIMS], n[OAR_MAX_DIMS];
    if (mode < 0 || resolve(fn, x, ndims, s, dims, &k, d, n)) return NULL;
    if (k == 0) return oari_error(OAR_ERR_INVALID, "%s: no dims to transform", fn), NULL;
    const int h = (int)d[k - 1];
    const int64_t nout = n[k - 1] == -1 ? 2 * (x->shape[h] - 1) : n[k - 1];
    if (nout < 1)
        return oari_error(OAR_ERR_INVALID, "%s: invalid number of data points (%lld) for the output "
                          "along dim %d (input has %lld; give n)", fn, (long long)nout, h,
                          (long long)x->shape[h]), NULL;
    n[k - 1] = -1;
    if (check_sizes_pub(fn, x, k, d, n)) return NULL;
    oar_pool *p = oar_pool_push();
    if (!p) return NULL; /* out of memory, reported */
    oar_tensor *y = conj_first && oar_dtype_is_complex(x->dtype) ? oar_conj(x) : x;
    for (int j = 0; j < k - 1; j++)
        if (n[j] != -1) y = resize(y, (int)d[j], n[j]);
    y = resize(y, h, nout / 2 + 1);
    oari_attrs a = fft_attrs(mode, nout, k, d);
    y = y ? oari_call1(OARI_OP_fft_c2r, y, &a) : NULL;
    return oari_pool_return(p, y);
}

static const int64_t *one_n(int64_t n, int64_t *buf) {
    *buf = n;
    return buf;
}

oar_tensor *oar_fft_fft(oar_tensor *x, int64_t n, int dim, const char *norm) {
    int64_t s, d = dim;
    return c2c_n("oar_fft_fft", x, 1, one_n(n, &s), &d, norm_mode("oar_fft_fft", norm, true), true);
}
oar_tensor *oar_fft_ifft(oar_tensor *x, int64_t n, int dim, const char *norm) {
    int64_t s, d = dim;
    return c2c_n("oar_fft_ifft", x, 1, one_n(n, &s), &d, norm_mode("oar_fft_ifft", norm, false), false);
}
oar_tensor *oar_fft_rfft(oar_tensor *x, int64_t n, int dim, const char *norm) {
    int64_t s, d = dim;
    return r2c_n("oar_fft_rfft", x, 1, one_n(n, &s), &d, norm_mode("oar_fft_rfft", norm, true));
}
oar_tensor *oar_fft_irfft(oar_tensor *x, int64_t n, int dim, const char *norm) {
    int64_t s, d = dim;
    return c2r_n("oar_fft_irfft", x, 1, one_n(n, &s), &d, norm_mode("oar_fft_irfft", norm, false),
                 false);
}
oar_tensor *oar_fft_hfft(oar_tensor *x, int64_t n, int dim, const char *norm) {
    /* irfft(conj(x)) with the norm directions swapped: a forward transform */
    int64_t s, d = dim;
    return c2r_n("oar_fft_hfft", x, 1, one_n(n, &s), &d, norm_mode("oar_fft_hfft", norm, true), true);
}
oar_tensor *oar_fft_ihfft(oar_tensor *x, int64_t n, int dim, const char *norm) {
    /* conj(rfft(x)) with the norm directions swapped */
    int64_t s, d = dim;
    oar_pool *p = oar_pool_push();
    if (!p) return NULL; /* out of memory, reported */
    oar_tensor *y = r2c_n("oar_fft_ihfft", x, 1, one_n(n, &s), &d,
                          norm_mode("oar_fft_ihfft", norm, false));
    return oari_pool_return(p, y ? oar_conj(y) : NULL);
}

oar_tensor *oar_fft_fftn(oar_tensor *x, int ndims, const int64_t *s, const int64_t *dims,
                         const char *norm) {
    return c2c_n("oar_fft_fftn", x, ndims, s, dims, norm_mode("oar_fft_fftn", norm, true), true);
}
oar_tensor *oar_fft_ifftn(oar_tensor *x, int ndims, const int64_t *s, const int64_t *dims,
                          const char *norm) {
    return c2c_n("oar_fft_ifftn", x, ndims, s, dims, norm_mode("oar_fft_ifftn", norm, false), false);
}
oar_tensor *oar_fft_rfftn(oar_tensor *x, int ndims, const int64_t *s, const int64_t *dims,
                          const char *norm) {
    return r2c_n("oar_fft_rfftn", x, ndims, s, dims, norm_mode("oar_fft_rfftn", norm, true));
}
oar_tensor *oar_fft_irfftn(oar_tensor *x, int ndims, const int64_t *s, const int64_t *dims,
                           const char *norm) {
    return c2r_n("oar_fft_irfftn", x, ndims, s, dims, norm_mode("oar_fft_irfftn", norm, false), false);
}

static const int64_t last2[2] = {-2, -1};

oar_tensor *oar_fft_fft2(oar_tensor *x, const int64_t *s, const int64_t *dims, const char *norm) {
    return c2c_n("oar_fft_fft2", x, 2, s, dims ? dims : last2, norm_mode("oar_fft_fft2", norm, true),
                 true);
}
oar_tensor *oar_fft_ifft2(oar_tensor *x, const int64_t *s, const int64_t *dims, const char *norm) {
    return c2c_n("oar_fft_ifft2", x, 2, s, dims ? dims : last2,
                 norm_mode("oar_fft_ifft2", norm, false), false);
}
oar_tensor *oar_fft_rfft2(oar_tensor *x, const int64_t *s, const int64_t *dims, const char *norm) {
    return r2c_n("oar_fft_rfft2", x, 2, s, dims ? dims : last2, norm_mode("oar_fft_rfft2", norm, true));
}
oar_tensor *oar_fft_irfft2(oar_tensor *x, const int64_t *s, const int64_t *dims, const char *norm) {
    return c2r_n("oar_fft_irfft2", x, 2, s, dims ? dims : last2,
                 norm_mode("oar_fft_irfft2", norm, false), false);
}

static oar_tensor *freq(const char *fn, int64_t n, double d, oar_dtype dtype, bool half) {
    if (n < 0) return oari_error(OAR_ERR_INVALID, "%s: n must be >= 0, got %lld", fn, (long long)n), NULL;
    if (!(d != 0) || !isfinite(d))
        return oari_error(OAR_ERR_INVALID, "%s: sample spacing d must be finite and nonzero, got %g",
                          fn, d), NULL;
    if (dtype != OAR_F32 && dtype != OAR_F64)
        return oari_error(OAR_ERR_INVALID, "%s: dtype must be float32 or float64, got %s", fn,
                          oar_dtype_name(dtype)), NULL;
    const int64_t m = half ? n / 2 + 1 : n;
    const int64_t cnt = n == 0 ? 0 : m;
    double *v = oari_malloc((size_t)(cnt ? cnt : 1) * sizeof *v);
    if (!v) return NULL;
    const double val = n ? 1.0 / ((double)n * d) : 0;
    for (int64_t i = 0; i < cnt; i++) v[i] = (double)(half || i < (n + 1) / 2 ? i : i - n) * val;
    oar_pool *p = oar_pool_push();
    if (!p) {
        oari_free(v, (size_t)(cnt ? cnt : 1) * sizeof *v);
        return NULL;
    }
    oar_tensor *t = oar_cast(oar_tensor_from_data(v, OAR_F64, 1, &cnt), dtype);
    oari_free(v, (size_t)(cnt ? cnt : 1) * sizeof *v);
    return oari_pool_return(p, t);
}

oar_tensor *oar_fft_fftfreq(int64_t n, double d, oar_dtype dtype) {
    return freq("oar_fft_fftfreq", n, d, dtype, false);
}
oar_tensor *oar_fft_rfftfreq(int64_t n, double d, oar_dtype dtype) {
    return freq("oar_fft_rfftfreq", n, d, dtype, true);
}

static oar_tensor *shift(const char *fn, oar_tensor *x, int ndims, const int64_t *dims, bool inv) {
    int k;
    int64_t d[OAR_MAX_DIMS], n[OAR_MAX_DIMS], sh[OAR_MAX_DIMS];
    if (resolve(fn, x, ndims, NULL, dims, &k, d, n)) return NULL;
    if (k == 0) return oar_clone(x);
    for (int j = 0; j < k; j++) sh[j] = inv ? -(x->shape[d[j]] / 2) : x->shape[d[j]] / 2;
    return oar_roll(x, k, sh, d);
}

oar_tensor *oar_fft_fftshift(oar_tensor *x, int ndims, const int64_t *dims) {
    return shift("oar_fft_fftshift", x, ndims, dims, false);
}
oar_tensor *oar_fft_ifftshift(oar_tensor *x, int ndims, const int64_t *dims) {
    return shift("oar_fft_ifftshift", x, ndims, dims, true);
}

/* CPU kernels for the copying movement ops (concat, pad, flip, roll, tril,
 * triu and the gradient transposes). Movement is dtype-agnostic: one kernel
 * moves elements by their byte size for every dtype; only pad_backward,
 * which adds, is typed. */
#include "cpu.h"

#include <math.h>
#include <string.h>

/* ---- element copies by size ----------------------------------------------------- */

/* n elements from src (stride s elements) to contiguous dst. */
static void copy_elems(char *dst, const char *src, int64_t n, int64_t s, size_t es) {
    if (s == 1) {
        memcpy(dst, src, (size_t)n * es);
        return;
    }
    const int64_t sb = s * (int64_t)es;
    switch (es) {
    case 1: for (int64_t i = 0; i < n; i++) dst[i] = src[i * sb]; break;
    case 2: for (int64_t i = 0; i < n; i++) memcpy(dst + i * 2, src + i * sb, 2); break;
    case 4: for (int64_t i = 0; i < n; i++) memcpy(dst + i * 4, src + i * sb, 4); break;
    case 8: for (int64_t i = 0; i < n; i++) memcpy(dst + i * 8, src + i * sb, 8); break;
    default: for (int64_t i = 0; i < n; i++) memcpy(dst + i * (int64_t)es, src + i * sb, es); break;
    }
}

static void fill_elems(char *dst, int64_t n, const unsigned char *value, size_t es, bool zero) {
    if (zero) {
        memset(dst, 0, (size_t)n * es);
        return;
    }
    for (int64_t i = 0; i < n; i++) memcpy(dst + i * (int64_t)es, value, es);
}

static void strided_copy(const oar_ktensor *dst, const oar_ktensor *src) { oari_copy_strided(dst, src); }

static size_t kt_bytes(const oar_ktensor *k) {
    return (size_t)oari_kt_numel(k) * oar_dtype_size((oar_dtype)k->dtype);
}

/* ---- gather by per-dim index maps -------------------------------------------------
 * out[i0, ..., in] = in[map0[i0], ..., mapn[in]], or `fill` where any map is
 * -1. Serves pad (all modes), flip and roll. out is contiguous. */

typedef struct {
    int64_t start, len, src, step; /* dst range in the row; src offset and step in elements */
    bool fill;
} seg;

static int map_copy(const oar_ktensor *out, const oar_ktensor *in, int64_t *const *maps,
                    const unsigned char *fill, bool fill_zero) {
    const size_t es = oar_dtype_size((oar_dtype)out->dtype);
    const int nd = out->ndim;
    const int64_t numel = oari_kt_numel(out);
    if (numel == 0) return 0;
    if (nd == 0) {
        memcpy(out->data, in->data, es);
        return 0;
    }
    const int last = nd - 1;
    const int64_t L = out->shape[last], ls = in->strides[last];
    const int64_t *lm = maps[last];
    seg *segs = oari_malloc((size_t)L * sizeof *segs);
    if (!segs) return oari_fail_status();
    int64_t nseg = 0;
    for (int64_t j = 0; j < L;) {
        seg s = {.start = j, .len = 1};
        if (lm[j] < 0) {
            s.fill = true;
            while (j + s.len < L && lm[j + s.len] < 0) s.len++;
        } else {
            s.src = lm[j] * ls;
            if (j + 1 < L && lm[j + 1] >= 0) {
                int64_t dm = lm[j + 1] - lm[j];
                s.step = dm * ls;
                while (j + s.len < L && lm[j + s.len] >= 0 && lm[j + s.len] - lm[j + s.len - 1] == dm)
                    s.len++;
            }
        }
        segs[nseg++] = s;
        j += s.len;
    }
    const int64_t rows = numel / L;
    const char *src0 = in->data;
    OARI_PARALLEL_FOR_IF(numel >= OARI_PARALLEL_GRAIN,
    for (int64_t r = 0; r < rows; r++) {
        int64_t rem = r, base = 0;
        bool filled = false;
        for (int d = last - 1; d >= 0; d--) {
            int64_t i = rem % out->shape[d];
            rem /= out->shape[d];
            int64_t m = maps[d][i];
            if (m < 0) filled = true;
            else base += m * in->strides[d];
        }
        char *dst = (char *)out->data + r * L * (int64_t)es;
        if (filled) {
            fill_elems(dst, L, fill, es, fill_zero);
            continue;
        }
        for (int64_t k = 0; k < nseg; k++) {
            const seg *s = &segs[k];
            char *d = dst + s->start * (int64_t)es;
            if (s->fill) fill_elems(d, s->len, fill, es, fill_zero);
            else copy_elems(d, src0 + (base + s->src) * (int64_t)es, s->len, s->step, es);
        }
    });
    oari_free(segs, (size_t)L * sizeof *segs);
    return 0;
}

/* One allocation holding a map per dim of shape; identity maps. */
static int64_t *maps_alloc(int nd, const int64_t *shape, int64_t **maps, size_t *bytes) {
    int64_t total = 0;
    for (int d = 0; d < nd; d++) total += shape[d];
    *bytes = (size_t)(total ? total : 1) * sizeof(int64_t);
    int64_t *buf = oari_malloc(*bytes);
    if (!buf) return NULL;
    int64_t *p = buf;
    for (int d = 0; d < nd; d++) {
        maps[d] = p;
        for (int64_t i = 0; i < shape[d]; i++) p[i] = i;
        p += shape[d];
    }
    return buf;
}

/* Pad maps over the padded shape (out): source index in the unpadded
 * shape (in), -1 for constant fill. */
static void pad_maps(const oar_kernel_call *c, const int64_t *pshape, const int64_t *ushape,
                     int nd, int64_t **maps) {
    int64_t mode = c->iattr[0];
    int np = (c->n_iattr - 1) / 2;
    for (int k = 0; k < np; k++) {
        int d = nd - 1 - k;
        int64_t before = c->iattr[1 + 2 * k], n = ushape[d];
        for (int64_t i = 0; i < pshape[d]; i++) {
            int64_t j = i - before;
            if (mode == 0) {
                if (j < 0 || j >= n) j = -1;
            } else if (mode == 1) {
                if (j < 0) j = -j;
                if (j >= n) j = 2 * (n - 1) - j;
            } else {
                j = j < 0 ? 0 : j >= n ? n - 1 : j;
            }
            maps[d][i] = j;
        }
    }
}

static int k_pad(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    const oar_ktensor *out = &c->out[0], *in = &c->in[0];
    int64_t *maps[OAR_MAX_DIMS];
    size_t bytes;
    int64_t *buf = maps_alloc(out->ndim, out->shape, maps, &bytes);
    if (!buf) return oari_fail_status();
    pad_maps(c, out->shape, in->shape, out->ndim, maps);
    unsigned char value[16] = {0};
    double v = c->n_fattr ? c->fattr[0] : 0.0;
    oari_store_f64(value, (oar_dtype)out->dtype, v);
    int st = map_copy(out, in, maps, value, v == 0 && !signbit(v));
    oari_free(buf, bytes);
    return st;
}

static int k_flip(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    const oar_ktensor *out = &c->out[0], *in = &c->in[0];
    int64_t *maps[OAR_MAX_DIMS];
    size_t bytes;
    int64_t *buf = maps_alloc(out->ndim, out->shape, maps, &bytes);
    if (!buf) return oari_fail_status();
    int64_t mask = c->n_iattr ? c->iattr[0] : 0;
    for (int d = 0; d < out->ndim; d++)
        if (mask & ((int64_t)1 << d))
            for (int64_t i = 0; i < out->shape[d]; i++) maps[d][i] = out->shape[d] - 1 - i;
    int st = map_copy(out, in, maps, NULL, true);
    oari_free(buf, bytes);
    return st;
}

static int k_roll(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    const oar_ktensor *out = &c->out[0], *in = &c->in[0];
    int64_t *maps[OAR_MAX_DIMS];
    size_t bytes;
    int64_t *buf = maps_alloc(out->ndim, out->shape, maps, &bytes);
    if (!buf) return oari_fail_status();
    int64_t shift[OAR_MAX_DIMS] = {0};
    for (int k = 0; k + 1 < c->n_iattr; k += 2) {
        int d = (int)c->iattr[k + 1];
        int64_t n = out->shape[d];
        if (n) shift[d] = ((shift[d] + c->iattr[k] % n) % n + n) % n;
    }
    for (int d = 0; d < out->ndim; d++) {
        int64_t n = out->shape[d];
        if (shift[d])
            for (int64_t i = 0; i < n; i++) maps[d][i] = (i - shift[d] + n) % n;
    }
    int st = map_copy(out, in, maps, NULL, true);
    oari_free(buf, bytes);
    return st;
}

/* ---- concat ------------------------------------------------------------------------- */

static int k_concat(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    const oar_ktensor *out = &c->out[0];
    const int dim = (int)c->iattr[0];
    const size_t es = oar_dtype_size((oar_dtype)out->dtype);
    int64_t off = 0;
    for (int i = 0; i < c->n_in; i++) {
        const oar_ktensor *in = &c->in[i];
        oar_ktensor dst = *out;
        dst.shape[dim] = in->shape[dim];
        dst.data = (char *)out->data + off * out->strides[dim] * (int64_t)es;
        dst.offset = out->offset + off * out->strides[dim];
        off += in->shape[dim];
        if (oari_kt_numel(in)) strided_copy(&dst, in);
    }
    return 0;
}

/* ---- tril / triu ---------------------------------------------------------------------- */

static int tri(const oar_kernel_call *c, bool lower) {
    const oar_ktensor *out = &c->out[0];
    strided_copy(out, &c->in[0]);
    const size_t es = oar_dtype_size((oar_dtype)out->dtype);
    const int nd = out->ndim;
    const int64_t M = out->shape[nd - 2], N = out->shape[nd - 1], k = c->iattr[0];
    const int64_t rows = oari_kt_numel(out) / (N ? N : 1);
    if (!N) return 0;
    OARI_PARALLEL_FOR_IF(rows * N >= OARI_PARALLEL_GRAIN,
    for (int64_t r = 0; r < rows; r++) {
        int64_t i = r % M;
        char *row = (char *)out->data + r * N * (int64_t)es;
        /* tril keeps j <= i + k; triu keeps j >= i + k */
        int64_t lim = i + k;
        if (lower) {
            int64_t from = lim + 1 < 0 ? 0 : lim + 1;
            if (from < N) memset(row + from * (int64_t)es, 0, (size_t)(N - from) * es);
        } else {
            int64_t to = lim < 0 ? 0 : lim > N ? N : lim;
            if (to > 0) memset(row, 0, (size_t)to * es);
        }
    });
    return 0;
}

static int k_tril(void *ctx, const oar_kernel_call *c) { (void)ctx; return tri(c, true); }
static int k_triu(void *ctx, const oar_kernel_call *c) { (void)ctx; return tri(c, false); }

/* ---- slice_backward / diagonal_backward: zeros, then the gradient placed ----------- */

static int k_slice_backward(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    const oar_ktensor *out = &c->out[0], *in = &c->in[0];
    memset(out->data, 0, kt_bytes(out));
    const int d = (int)c->iattr[0];
    const int64_t start = c->iattr[1], step = c->iattr[3];
    oar_ktensor dst = *out;
    dst.shape[d] = in->shape[d];
    dst.strides[d] = out->strides[d] * step;
    if (in->shape[d] > 0) {
        dst.data = (char *)out->data + start * out->strides[d] * (int64_t)oar_dtype_size((oar_dtype)out->dtype);
        dst.offset = out->offset + start * out->strides[d];
    }
    if (oari_kt_numel(in)) strided_copy(&dst, in);
    return 0;
}

static int k_diagonal_backward(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    const oar_ktensor *out = &c->out[0], *in = &c->in[0];
    memset(out->data, 0, kt_bytes(out));
    if (!oari_kt_numel(in)) return 0;
    const int64_t off = c->iattr[0];
    const int d1 = (int)c->iattr[1], d2 = (int)c->iattr[2];
    oar_ktensor dst = *out;
    int k = 0;
    for (int d = 0; d < out->ndim; d++) {
        if (d == d1 || d == d2) continue;
        dst.shape[k] = out->shape[d];
        dst.strides[k++] = out->strides[d];
    }
    dst.shape[k] = in->shape[k];
    dst.strides[k++] = out->strides[d1] + out->strides[d2];
    dst.ndim = k;
    int64_t base = off >= 0 ? off * out->strides[d2] : -off * out->strides[d1];
    dst.data = (char *)out->data + base * (int64_t)oar_dtype_size((oar_dtype)out->dtype);
    dst.offset = out->offset + base;
    strided_copy(&dst, in);
    return 0;
}

/* ---- pad_backward: out[map(i)] += in[i] over reflect/replicate maps ------------------- */

#define PAD_BACKWARD(NAME, T)                                                                  \
    static int NAME(void *ctx, const oar_kernel_call *c) {                                     \
        (void)ctx;                                                                             \
        const oar_ktensor *out = &c->out[0], *in = &c->in[0];                                  \
        memset(out->data, 0, kt_bytes(out));                                                   \
        const int nd = in->ndim, np = (c->n_iattr - 1) / 2, lead = nd - np;                    \
        if (!oari_kt_numel(in)) return 0;                                                      \
        int64_t *maps[OAR_MAX_DIMS];                                                           \
        size_t bytes;                                                                          \
        int64_t *buf = maps_alloc(nd, in->shape, maps, &bytes);                                \
        if (!buf) return oari_fail_status();                                                        \
        pad_maps(c, in->shape, out->shape, nd, maps);                                          \
        int64_t outer = 1, block = 1;                                                          \
        for (int d = 0; d < lead; d++) outer *= in->shape[d];                                  \
        for (int d = lead; d < nd; d++) block *= in->shape[d];                                 \
        int64_t ostr[OAR_MAX_DIMS];                                                            \
        oari_contiguous_strides(nd, out->shape, ostr);                                         \
        _Pragma("omp parallel for schedule(static) if (outer * block >= OARI_PARALLEL_GRAIN)") \
        for (int64_t o = 0; o < outer; o++) {                                                  \
            int64_t rem = o, ib = 0, ob = 0;                                                   \
            for (int d = lead - 1; d >= 0; d--) {                                              \
                int64_t i = rem % in->shape[d];                                                \
                rem /= in->shape[d];                                                           \
                ib += i * in->strides[d];                                                      \
                ob += i * ostr[d];                                                             \
            }                                                                                  \
            int64_t idx[OAR_MAX_DIMS] = {0};                                                   \
            T *dst = (T *)out->data;                                                           \
            const T *src = (const T *)in->data;                                                \
            for (int64_t e = 0; e < block; e++) {                                              \
                int64_t io = ib, oo = ob;                                                      \
                for (int d = lead; d < nd; d++) {                                              \
                    io += idx[d] * in->strides[d];                                             \
                    oo += maps[d][idx[d]] * ostr[d];                                           \
                }                                                                              \
                dst[oo] += src[io];                                                            \
                for (int d = nd - 1; d >= lead; d--) {                                         \
                    if (++idx[d] < in->shape[d]) break;                                        \
                    idx[d] = 0;                                                                \
                }                                                                              \
            }                                                                                  \
        }                                                                                      \
        oari_free(buf, bytes);                                                                 \
        return 0;                                                                              \
    }

PAD_BACKWARD(k_pad_backward_f32, float)
PAD_BACKWARD(k_pad_backward_f64, double)
PAD_BACKWARD(k_pad_backward_c64, c64_t)
PAD_BACKWARD(k_pad_backward_c128, c128_t)

#define ALL(k) {k, k, k, k, k, k, k, k, k, k, k}
const oari_cpu_kernels oari_cpu_k_concat = ALL(k_concat);
const oari_cpu_kernels oari_cpu_k_pad = ALL(k_pad);
const oari_cpu_kernels oari_cpu_k_flip = ALL(k_flip);
const oari_cpu_kernels oari_cpu_k_roll = ALL(k_roll);
const oari_cpu_kernels oari_cpu_k_tril = ALL(k_tril);
const oari_cpu_kernels oari_cpu_k_triu = ALL(k_triu);
const oari_cpu_kernels oari_cpu_k_slice_backward = ALL(k_slice_backward);
const oari_cpu_kernels oari_cpu_k_diagonal_backward = ALL(k_diagonal_backward);
const oari_cpu_kernels oari_cpu_k_pad_backward = {
    [OAR_F32] = k_pad_backward_f32, [OAR_F64] = k_pad_backward_f64,
    [OAR_C64] = k_pad_backward_c64, [OAR_C128] = k_pad_backward_c128,
};

/* View ops run no kernel (dispatch makes the view); their tables are empty
 * so every OP() line has a table and the registry links without weak
 * references. */
const oari_cpu_kernels oari_cpu_k_view = {0};
const oari_cpu_kernels oari_cpu_k_permute = {0};
const oari_cpu_kernels oari_cpu_k_expand = {0};
const oari_cpu_kernels oari_cpu_k_slice = {0};
const oari_cpu_kernels oari_cpu_k_diagonal = {0};

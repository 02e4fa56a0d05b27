/* The fused quantized linear layer (qlinear, src/ops/defs/quant.def) on the
 * CPU: y = act(f32((x - zp) . W) * scale + bias), the int32 sums exact, in
 * one pass over the output with no int32 tensor written out. W comes packed
 * in panels of 16 columns by 4 rows ([ceil(n/16), ceil(k/4), 16, 4]), the
 * layout of AVX512_VNNI's vpdpbusd: one 64-byte load is a 4 x 16 block of
 * W, and one instruction adds four uint8 x int8 products into each of 16
 * int32 lanes. x - zp is not formed: the sum x . W less zp * colsum(W) (the
 * op's in2) is the same int32 (wrapping arithmetic; the result fits). An
 * int8 x runs as x ^ 0x80 (x + 128, a uint8) with zp + 128.
 *
 * Tiles of up to 4 rows by 64 columns (16 zmm accumulators) walk k; rows
 * in chunks of 64, and each (chunk, 64 columns) an item of the OpenMP loop
 * when the product is large. A requantized output takes oari_qfast's
 * short epilogue (cpu_qlinear.h) where the constants allow it (checked per
 * call), as the fused conv does.
 *
 * Without AVX512_VNNI (checked at run time), an AVX2 kernel reads the same
 * packed W: tiles of 2 rows by 16 columns, each 16 bytes of a panel
 * widened to int16 and multiplied by a row's 4 values (vpmaddwd: exact
 * pair sums), the full epilogue on 8 lanes at a time. In a build without
 * x86-64 intrinsics, or for strided operands, an exact integer loop gives
 * the same values. */
#include "cpu_qlinear.h"

#include <string.h>

#ifdef OARI_HAVE_VNNI_CODE
#define HAVE_VNNI_CODE 1
#endif

typedef struct {
    const oar_ktensor *x, *w, *ws, *s, *b; /* b: NULL for none */
    void *y;                               /* [m, n], dense: f32, or uint8/int8 when requantized */
    int64_t m, k, n, kb, nb;
    int32_t zp; /* the effective zero point: +128 for an int8 x */
    bool i8, relu;
    oari_qout o; /* y's dtype: f32, or requantized */
    bool fast;    /* requantized with oari_qfast's short epilogue (the VNNI kernel; set per call) */
    oari_qfast qf;
    bool out_i32; /* the int32 sums themselves (oari_cpu_qgemm_packed): no scale, bias or relu */
} qargs;

static bool dense(const oar_ktensor *t) {
    int64_t want = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (t->shape[d] != 1 && t->strides[d] != want) return false;
        want *= t->shape[d];
    }
    return true;
}

static inline float epilogue(const qargs *q, int64_t j, uint32_t acc) {
    const oar_ktensor *ws = q->ws, *s = q->s, *b = q->b;
    int32_t sum = ((const int32_t *)ws->data)[j * ws->strides[0]];
    int32_t v = (int32_t)(acc - (uint32_t)q->zp * (uint32_t)sum); /* exact: the true sum fits */
    return oari_qact(v, ((const float *)s->data)[s->ndim ? j * s->strides[0] : 0],
                     b ? (const float *)b->data + j * b->strides[0] : NULL, q->relu);
}

/* The reference: any strides, one output row per iteration. */
static void qlinear_ref(const qargs *q) {
    const oar_ktensor *x = q->x, *w = q->w;
    const int64_t xs1 = x->strides[x->ndim - 1];
    const int64_t w0 = w->strides[0], w1 = w->strides[1], w2 = w->strides[2], w3 = w->strides[3];
    const int8_t *wp = w->data;
    const uint8_t flip = q->i8 ? 0x80 : 0;
    OARI_PARALLEL_FOR_IF(q->m * q->k * q->n > 65536, for (int64_t r = 0; r < q->m; r++) {
        int64_t off = 0, rest = r;
        for (int d = x->ndim - 2; d >= 0; d--) {
            off += (rest % x->shape[d]) * x->strides[d];
            rest /= x->shape[d];
        }
        const uint8_t *xr = (const uint8_t *)x->data + off;
        for (int64_t j = 0; j < q->n; j++) {
            const int8_t *wc = wp + (j / 16) * w0 + (j % 16) * w2;
            uint32_t acc = 0;
            for (int64_t p = 0; p < q->k; p++)
                acc += (uint32_t)(int32_t)(uint8_t)(xr[p * xs1] ^ flip) *
                       (uint32_t)(int32_t)wc[(p / 4) * w1 + (p % 4) * w3];
            oari_qput(&q->o, q->y, r * q->n + j, epilogue(q, j, acc));
        }
    });
}

#ifdef HAVE_VNNI_CODE
#define VNNI OARI_VNNI
/* the tile's loops unrolled, so that its accumulators live in registers */
#define UNROLL4 _Pragma("GCC unroll 4")

/* Four bytes of row xr from column 4 p on (zeros past k: W is zero there). */
VNNI static inline int32_t x4(const uint8_t *xr, int64_t p, int64_t k, uint32_t flip) {
    uint32_t v = 0;
    if (4 * p + 4 <= k) memcpy(&v, xr + 4 * p, 4);
    else memcpy(&v, xr + 4 * p, (size_t)(k - 4 * p));
    v ^= flip;
    if (4 * p + 4 > k) v &= (1u << (8 * (k - 4 * p))) - 1; /* the flip put 0x80 in the pad */
    return (int32_t)v;
}

/* Rows i0..i0+MR, column panels jb0..jb0+NB: MR x NB accumulators of 16
 * lanes over k, then the epilogue, stored under a mask past n. */
VNNI __attribute__((always_inline)) static inline void tile(const qargs *q, const uint8_t *x, int64_t i0, int MR,
                                                             int64_t jb0, int NB) {
    __m512i acc[4][4];
    UNROLL4
    for (int r = 0; r < MR; r++)
        UNROLL4
        for (int c = 0; c < NB; c++) acc[r][c] = _mm512_setzero_si512();
    const int8_t *w = (const int8_t *)q->w->data + jb0 * q->kb * 64;
    const int64_t panel = q->kb * 64, kfull = q->k / 4;
    const uint32_t flip = q->i8 ? 0x80808080u : 0;
    const uint8_t *xr[4];
    UNROLL4
    for (int r = 0; r < MR; r++) xr[r] = x + (i0 + r) * q->k;
    int64_t p = 0;
    for (; p < kfull; p++) {
        __m512i wv[4];
        UNROLL4
        for (int c = 0; c < NB; c++) wv[c] = _mm512_loadu_si512(w + c * panel + p * 64);
        UNROLL4
        for (int r = 0; r < MR; r++) {
            uint32_t v;
            memcpy(&v, xr[r] + 4 * p, 4);
            __m512i xv = _mm512_set1_epi32((int32_t)(v ^ flip));
            UNROLL4
            for (int c = 0; c < NB; c++) acc[r][c] = oari_dpbusd(acc[r][c], xv, wv[c]);
        }
    }
    for (; p < q->kb; p++) { /* k % 4 left over */
        __m512i wv[4];
        UNROLL4
        for (int c = 0; c < NB; c++) wv[c] = _mm512_loadu_si512(w + c * panel + p * 64);
        UNROLL4
        for (int r = 0; r < MR; r++) {
            __m512i xv = _mm512_set1_epi32(x4(xr[r], p, q->k, flip));
            UNROLL4
            for (int c = 0; c < NB; c++) acc[r][c] = oari_dpbusd(acc[r][c], xv, wv[c]);
        }
    }
    const int32_t *ws = q->ws->data;
    const float *sp = q->s->data, *bp = q->b ? (const float *)q->b->data : NULL;
    const bool per_col = q->s->ndim == 1, relu = q->relu, out_i32 = q->out_i32, fast = q->fast;
    const oari_qout_v ov = oari_qout_vec(&q->o);
    const oari_qfast_v fv = oari_qfast_vec(&q->o, &q->qf);
    void *const y = q->y;
    const int64_t n = q->n;
    const __m512i zp = _mm512_set1_epi32(q->zp);
    UNROLL4
    for (int c = 0; c < NB; c++) {
        int64_t j0 = (jb0 + c) * 16, left = n - j0;
        __mmask16 mask = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
        __m512i corr = _mm512_mullo_epi32(zp, _mm512_maskz_loadu_epi32(mask, ws + j0));
        __m512 sv = out_i32 ? _mm512_setzero_ps()
                    : per_col  ? _mm512_maskz_loadu_ps(mask, sp + j0)
                               : _mm512_set1_ps(sp[0]);
        __m512 bv = bp ? _mm512_maskz_loadu_ps(mask, bp + j0) : _mm512_setzero_ps();
        UNROLL4
        for (int r = 0; r < MR; r++) {
            if (out_i32) {
                _mm512_mask_storeu_epi32((int32_t *)y + (i0 + r) * n + j0, mask,
                                         _mm512_sub_epi32(acc[r][c], corr));
                continue;
            }
            if (fast) { /* the same bytes as the full form below (oari_qfast) */
                oari_qfast_store(&fv, (uint8_t *)y + (i0 + r) * n + j0, mask, _mm512_sub_epi32(acc[r][c], corr), sv,
                                 bv);
                continue;
            }
            __m512 f = oari_qact_v(_mm512_sub_epi32(acc[r][c], corr), sv, bp ? &bv : NULL, relu);
            if (ov.on) oari_qstore_v(&ov, (uint8_t *)y + (i0 + r) * n + j0, mask, f);
            else oari_qstore_v(&ov, (float *)y + (i0 + r) * n + j0, mask, f);
        }
    }
}

#define CHUNK_ROWS 64
#define GROUP_PANELS 4

/* Item t of the loop: rows [64 c, 64 c + 64) by panels [4 g, 4 g + 4). */
VNNI static void item(const qargs *q, const uint8_t *x, int64_t t, int64_t groups) {
    int64_t c = t / groups, g = t % groups;
    int64_t r1 = (c + 1) * CHUNK_ROWS < q->m ? (c + 1) * CHUNK_ROWS : q->m;
    int64_t jb = g * GROUP_PANELS, nbk = q->nb - jb < GROUP_PANELS ? q->nb - jb : GROUP_PANELS;
    for (int64_t i = c * CHUNK_ROWS; i < r1; i += 4) {
        int mr = r1 - i < 4 ? (int)(r1 - i) : 4;
#define NB_CASES(MR)                                                                                   \
    switch (nbk) {                                                                                     \
    case 4: tile(q, x, i, MR, jb, 4); break;                                                           \
    case 3: tile(q, x, i, MR, jb, 3); break;                                                           \
    case 2: tile(q, x, i, MR, jb, 2); break;                                                           \
    default: tile(q, x, i, MR, jb, 1); break;                                                          \
    }
        switch (mr) {
        case 4: NB_CASES(4) break;
        case 3: NB_CASES(3) break;
        case 2: NB_CASES(2) break;
        default: NB_CASES(1) break;
        }
#undef NB_CASES
    }
}

static void qlinear_vnni(const qargs *q) {
    const uint8_t *x = q->x->data;
    int64_t groups = (q->nb + GROUP_PANELS - 1) / GROUP_PANELS;
    int64_t items = (q->m + CHUNK_ROWS - 1) / CHUNK_ROWS * groups;
    OARI_PARALLEL_FOR_IF(items > 1 && q->m * q->k * q->n >= ((int64_t)1 << 20),
                         for (int64_t t = 0; t < items; t++) item(q, x, t, groups););
}

#define QAVX2 OARI_QAVX2

/* Rows i0 .. i0 + MR of x (as int16 quads xq [m, kb]) by panel jb: the sums, then the epilogue, 8 lanes at a
 * time. */
QAVX2 __attribute__((always_inline)) static inline void tile_avx2(const qargs *q, const uint64_t *xq, int64_t i0,
                                                                  int MR, int64_t jb) {
    __m256i acc[2][4], v[2][2];
    const uint64_t *bq[2] = {xq + i0 * q->kb, xq + (i0 + MR - 1) * q->kb};
    oari_qmadd((const uint8_t *)q->w->data + jb * q->kb * 64, true, bq, MR, q->kb, acc);
    for (int r = 0; r < MR; r++) oari_qlanes(acc[r], v[r]);
    const int32_t *ws = q->ws->data;
    const float *sp = q->s->data, *bp = q->b ? (const float *)q->b->data : NULL;
    const bool per_col = q->s->ndim == 1;
    const int64_t n = q->n;
    for (int h = 0; h < 2; h++) {
        const int64_t j0 = jb * 16 + 8 * h;
        if (j0 >= n) break;
        const int cnt = n - j0 < 8 ? (int)(n - j0) : 8;
        const __m256i first = _mm256_cmpgt_epi32(_mm256_set1_epi32(cnt), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        const __m256i corr = _mm256_mullo_epi32(_mm256_set1_epi32(q->zp), _mm256_maskload_epi32(ws + j0, first));
        const __m256 sv = q->out_i32 ? _mm256_setzero_ps()
                          : per_col  ? _mm256_maskload_ps(sp + j0, first)
                                     : _mm256_set1_ps(sp[0]);
        const __m256 bv = bp ? _mm256_maskload_ps(bp + j0, first) : _mm256_setzero_ps();
        for (int r = 0; r < MR; r++) {
            __m256i s = _mm256_sub_epi32(v[r][h], corr);
            if (q->out_i32) _mm256_maskstore_epi32((int32_t *)q->y + (i0 + r) * n + j0, first, s);
            else oari_qepi(&q->o, s, sv, bp ? &bv : NULL, q->relu, q->y, (i0 + r) * n + j0, cnt);
        }
    }
}

/* Item t: rows [64 c, 64 c + 64) by panels [4 g, 4 g + 4), panel by panel (one stays in L1 over the rows). */
QAVX2 static void item_avx2(const qargs *q, const uint64_t *xq, int64_t t, int64_t groups) {
    int64_t c = t / groups, g = t % groups;
    int64_t r1 = (c + 1) * CHUNK_ROWS < q->m ? (c + 1) * CHUNK_ROWS : q->m;
    int64_t jb1 = (g + 1) * GROUP_PANELS < q->nb ? (g + 1) * GROUP_PANELS : q->nb;
    for (int64_t jb = g * GROUP_PANELS; jb < jb1; jb++)
        for (int64_t i = c * CHUNK_ROWS; i < r1; i += 2) {
            if (r1 - i >= 2) tile_avx2(q, xq, i, 2, jb);
            else tile_avx2(q, xq, i, 1, jb);
        }
}

/* x's rows as int16 quads (int8 x flipped to uint8, as the VNNI kernel
 * reads it), then the items. 0 or OAR_ERR_NOMEM. */
static int qlinear_avx2(const qargs *q) {
    const size_t bytes = (size_t)(q->m * q->kb) * sizeof(uint64_t);
    uint64_t *xq = oari_malloc(bytes);
    if (!xq) return oari_fail_status();
    const uint8_t *x = q->x->data;
    OARI_PARALLEL_FOR_IF(q->m * q->k > (1 << 16), for (int64_t r = 0; r < q->m; r++) {
        oari_qquads(x + r * q->k, q->k, q->i8 ? 0x80 : 0, false, xq + r * q->kb);
    });
    int64_t groups = (q->nb + GROUP_PANELS - 1) / GROUP_PANELS;
    int64_t items = (q->m + CHUNK_ROWS - 1) / CHUNK_ROWS * groups;
    OARI_PARALLEL_FOR_IF(items > 1 && q->m * q->k * q->n >= ((int64_t)1 << 20),
                         for (int64_t t = 0; t < items; t++) item_avx2(q, xq, t, groups););
    oari_free(xq, bytes);
    return 0;
}
#endif

static int qkernel_cap = OARI_QK_VNNI;
static bool qfast_off;

/* The fastest kernel the CPU has, probed once (atomic: predictors run
 * layers on many threads at once). */
static oari_qkernel qkernel_hw(void) {
#ifdef HAVE_VNNI_CODE
    static int have = -1;
    int h = __atomic_load_n(&have, __ATOMIC_RELAXED);
    if (h < 0) {
        __builtin_cpu_init();
        h = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                    __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni")
                ? OARI_QK_VNNI
            : __builtin_cpu_supports("avx2") ? OARI_QK_AVX2
                                             : OARI_QK_REFERENCE;
        __atomic_store_n(&have, h, __ATOMIC_RELAXED);
    }
    return (oari_qkernel)h;
#else
    return OARI_QK_REFERENCE;
#endif
}

oari_qkernel oari_cpu_qkernel(void) {
    oari_qkernel hw = qkernel_hw(), cap = (oari_qkernel)__atomic_load_n(&qkernel_cap, __ATOMIC_RELAXED);
    return hw < cap ? hw : cap;
}

/* Tests: the kernels allowed, up to k. */
void oari_cpu_qkernel_cap(oari_qkernel k) { __atomic_store_n(&qkernel_cap, (int)k, __ATOMIC_RELAXED); }

int oari_cpu_qout_parse(const oar_kernel_call *c, int at, int in_s, oari_qout *o) {
    *o = (oari_qout){.on = false};
    if (c->n_iattr <= at) return 0;
    const oar_ktensor *ys = &c->in[in_s], *yz = &c->in[in_s + 1];
    double sc = ys->dtype == OAR_F64 ? *(const double *)ys->data : *(const float *)ys->data;
    int64_t z = *(const int64_t *)yz->data;
    o->on = true, o->div = c->iattr[at + 1] != 0;
    o->lo = c->out[0].dtype == OAR_I8 ? -128.f : 0.f, o->hi = c->out[0].dtype == OAR_I8 ? 127.f : 255.f;
    if (!(sc > 0) || !isfinite(sc))
        return oari_error(OAR_ERR_INVALID, "%s: output scale %g must be positive and finite", c->op, sc);
    if ((double)z < o->lo || (double)z > o->hi)
        return oari_error(OAR_ERR_INVALID, "%s: output zero point %lld is outside [%g, %g]", c->op, (long long)z,
                          (double)o->lo, (double)o->hi);
    o->sq = (float)sc, o->inv = 1.f / (float)sc, o->zq = (float)z;
    return 0;
}

int oari_cpu_qgemm_packed(const void *a, bool i8, int32_t za, const int8_t *b, int64_t m, int64_t k, int64_t n,
                          int32_t *c, bool *done) {
    *done = false;
#ifdef HAVE_VNNI_CODE
    const oari_qkernel kern = oari_cpu_qkernel();
    if (kern == OARI_QK_REFERENCE || m <= 0 || k <= 0 || n <= 0) return 0;
    const int64_t kb = (k + 3) / 4, nb = (n + 15) / 16;
    size_t wbytes = (size_t)(nb * kb * 64), sbytes = (size_t)n * sizeof(int32_t);
    int8_t *wp = oari_malloc(wbytes);
    int32_t *sums = oari_malloc(sbytes);
    if (!wp || !sums) {
        if (wp) oari_free(wp, wbytes);
        if (sums) oari_free(sums, sbytes);
        return oari_fail_status();
    }
    memset(wp, 0, wbytes);
    memset(sums, 0, sbytes);
    for (int64_t r = 0; r < k; r++)
        for (int64_t j = 0; j < n; j++) {
            int8_t v = b[r * n + j];
            wp[((j / 16) * kb + r / 4) * 64 + (j % 16) * 4 + r % 4] = v;
            sums[j] += v;
        }
    oar_ktensor kx = {.data = (void *)a}, kw = {.data = wp}, ks = {.data = sums}, kscale = {.ndim = 0};
    qargs q = {.x = &kx, .w = &kw, .ws = &ks, .s = &kscale, .y = c, .m = m, .k = k, .n = n, .kb = kb, .nb = nb,
               .zp = za + (i8 ? 128 : 0), .i8 = i8, .out_i32 = true};
    int st = 0;
    if (kern == OARI_QK_VNNI) qlinear_vnni(&q);
    else st = qlinear_avx2(&q);
    oari_free(wp, wbytes);
    oari_free(sums, sbytes);
    *done = st == 0;
    return st;
#else
    (void)a, (void)i8, (void)za, (void)b, (void)m, (void)k, (void)n, (void)c;
    return 0;
#endif
}

/* Tests: the full requantizing epilogue on the VNNI kernels (true), or the short one back where it holds. */
void oari_cpu_qfast_force_off(bool on) { __atomic_store_n(&qfast_off, on, __ATOMIC_RELAXED); }

#ifdef HAVE_VNNI_CODE
/* oari_absmax on 16 lanes, four vectors at a time (a layer's n scales and
 * n biases are read at every call) */
VNNI static double absmax_v(const float *p, int64_t n) {
    const __m512 big = _mm512_set1_ps(3.40282347e38f);
    __m512 m[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    __mmask16 bad = 0;
    int64_t j = 0;
    for (; j + 64 <= n; j += 64)
        UNROLL4
        for (int u = 0; u < 4; u++) {
            __m512 a = _mm512_abs_ps(_mm512_loadu_ps(p + j + 16 * u));
            bad |= _mm512_cmp_ps_mask(a, big, _CMP_NLE_UQ); /* NaN or inf */
            m[u] = _mm512_max_ps(m[u], a);
        }
    for (; j < n; j += 16) {
        __mmask16 k = n - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - j)) - 1);
        __m512 a = _mm512_abs_ps(_mm512_maskz_loadu_ps(k, p + j));
        bad |= _mm512_mask_cmp_ps_mask(k, a, big, _CMP_NLE_UQ);
        m[0] = _mm512_max_ps(m[0], a);
    }
    __m512 all = _mm512_max_ps(_mm512_max_ps(m[0], m[1]), _mm512_max_ps(m[2], m[3]));
    return bad ? INFINITY : (double)_mm512_reduce_max_ps(all);
}
#endif

bool oari_cpu_qfast(const oari_qout *o, const float *s, int64_t ns, const float *b, int64_t nb, bool relu,
                    oari_qfast *f) {
    if (!o->on || __atomic_load_n(&qfast_off, __ATOMIC_RELAXED)) return false;
#ifdef HAVE_VNNI_CODE
    if (oari_cpu_qkernel() == OARI_QK_VNNI) return oari_qfast_bound(o, absmax_v(s, ns), b ? absmax_v(b, nb) : 0, relu, f);
#endif
    return oari_qfast_make(o, s, ns, b, nb, relu, f);
}

static int k_qlinear(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    const oar_ktensor *x = &c->in[0];
    qargs q = {.x = x, .w = &c->in[1], .ws = &c->in[2], .s = &c->in[3],
               .b = c->n_in > 4 && c->in[4].dtype >= 0 ? &c->in[4] : NULL, .y = c->out[0].data,
               .k = x->shape[x->ndim - 1], .n = c->in[2].shape[0], .i8 = x->dtype == OAR_I8,
               .relu = c->iattr[1] == 1};
    q.m = 1;
    for (int d = 0; d < x->ndim - 1; d++) q.m *= x->shape[d];
    q.kb = (q.k + 3) / 4, q.nb = (q.n + 15) / 16;
    q.zp = (int32_t)c->iattr[0] + (q.i8 ? 128 : 0);
    /* requantized: in5 the scale, in6 the zero point, one each */
    if (oari_cpu_qout_parse(c, 2, 5, &q.o)) return oari_fail_status();
    if (q.m == 0 || q.n == 0) return 0;
#ifdef HAVE_VNNI_CODE
    const oari_qkernel kern = oari_cpu_qkernel();
    if (kern != OARI_QK_REFERENCE && dense(x) && dense(q.w) && dense(q.ws) && dense(q.s) && (!q.b || dense(q.b))) {
        if (kern == OARI_QK_AVX2) return qlinear_avx2(&q);
        /* (one row: the check, which reads the n scales and biases, costs about what the short form saves) */
        q.fast = q.m > 1 &&
                 oari_cpu_qfast(&q.o, q.s->data, q.s->ndim ? q.n : 1, q.b ? q.b->data : NULL, q.n, q.relu, &q.qf);
        qlinear_vnni(&q);
        return 0;
    }
#else
    (void)dense;
#endif
    qlinear_ref(&q);
    return 0;
}

const oari_cpu_kernels oari_cpu_k_qlinear = {[OAR_U8] = k_qlinear, [OAR_I8] = k_qlinear};

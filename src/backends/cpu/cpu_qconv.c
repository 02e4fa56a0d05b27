/* The fused quantized conv layer (qlinear_conv2d, src/ops/defs/quant.def)
 * and the max pool on quantized values (qmax_pool2d) on the CPU.
 *
 * qlinear_conv2d: y = act(f32(conv2d(x - zp, W)) * scale + bias), the int32
 * sums exact, written NCHW in one pass (f32, or the next layer's uint8 /
 * int8: the epilogue is qlinear's, cpu_qlinear.h). As in qlinear, x - zp is
 * not formed: the sum x . W less zp * rowsum(W) (in2) is the same int32,
 * and a padded tap holds zp, so it adds zp w - zp w = 0. An int8 x runs as
 * x ^ 0x80 with zp + 128.
 *
 * The VNNI kernel turns qlinear's tile around: the lanes are 16 output
 * pixels of one output row (a "panel"), and a row of W (packed at pass time
 * as [o, ceil(K/4), 4], K = c kh kw) is broadcast, 4 bytes at a time, so one
 * vpdpbusd adds four taps of 16 pixels of one channel, and the result is 16
 * consecutive NCHW outputs: one store. Per block of images, x is copied
 * once into a padded buffer (borders holding zp, int8 flipped), so the
 * patch gather has no bounds checks: tap k of the 16 pixels of a panel is
 * one 16-byte load at a fixed offset from the panel's corner (stride 1;
 * stride 2 takes the even bytes of a 32-byte load; other strides pick the
 * bytes one by one), four taps interleaved into VNNI's 4-byte groups. Each
 * item of the OpenMP loop gathers up to four panels into its thread's
 * buffer (4 x ceil(K/4) x 64 bytes: the demo CNN's second conv, 9 KB) and
 * runs every output channel over them, 4 channels x 4 panels (16 zmm
 * accumulators, started at -zp rowsum(W)) at a time; a requantized output
 * takes oari_qfast's short epilogue where the constants allow it (checked
 * per call). Without AVX512_VNNI, an AVX2 kernel runs on the same gathered
 * panels: 2 channels by one panel, vpmaddwd on the panel's bytes widened
 * to int16 and W's rows as int16 quads (cpu_qlinear.h), the full epilogue
 * 8 lanes at a time. Without AVX2, outside x86-64 or for strided
 * constants, an exact integer loop gives the same values.
 *
 * qmax_pool2d: max_pool2d's values (the same windows, padding skipped) on
 * the quantized bytes; no indices. */
#include "cpu_qlinear.h"

#include <string.h>

typedef struct {
    const oar_ktensor *x, *w, *ws, *s, *b; /* b: NULL for none */
    void *y;                               /* [N, O, OH, OW] dense */
    int64_t N, C, H, W, O, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw, K, kb;
    int32_t zp; /* the effective zero point: +128 for an int8 x */
    bool i8, relu;
    oari_qout o;
    bool fast;     /* requantized with oari_qfast's short epilogue */
    oari_qfast qf;
    bool pooled;   /* y is the 2 x 2 stride-2 max pool [N, O, PH, PW] of the conv's [OH, OW] */
    int64_t PH, PW;
} cargs;

/* The pooled form takes, per channel, the max of the window's int32 sums
 * (the min for a negative scale), then the epilogue once: the epilogue is
 * monotone in the sum, so that is the epilogue's values pooled. */
static inline int32_t pool_pick(int32_t a, int32_t b, bool neg) { return neg ? (a < b ? a : b) : (a > b ? a : b); }

static bool dense(const oar_ktensor *t) {
    int64_t want = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (t->shape[d] != 1 && t->strides[d] != want) return false;
        want *= t->shape[d];
    }
    return true;
}

/* The int32 sum of output (n, o, oy, ox), any strides. */
static int32_t conv_at(const cargs *q, int64_t n, int64_t o, int64_t oy, int64_t ox) {
    const oar_ktensor *x = q->x, *w = q->w;
    const uint8_t *xd = x->data;
    const int8_t *wd = w->data;
    const uint8_t flip = q->i8 ? 0x80 : 0;
    const int32_t sum = ((const int32_t *)q->ws->data)[o * q->ws->strides[0]];
    uint32_t acc = 0;
    for (int64_t ci = 0; ci < q->C; ci++)
        for (int64_t i = 0; i < q->KH; i++)
            for (int64_t j = 0; j < q->KW; j++) {
                int64_t iy = oy * q->sh - q->ph + i * q->dh, ix = ox * q->sw - q->pw + j * q->dw;
                int64_t k = (ci * q->KH + i) * q->KW + j;
                uint32_t xv = iy < 0 || iy >= q->H || ix < 0 || ix >= q->W
                                  ? (uint32_t)q->zp
                                  : (uint8_t)(xd[n * x->strides[0] + ci * x->strides[1] + iy * x->strides[2] +
                                                 ix * x->strides[3]] ^
                                              flip);
                acc += xv * (uint32_t)(int32_t)wd[o * w->strides[0] + (k / 4) * w->strides[1] + (k % 4) * w->strides[2]];
            }
    return (int32_t)(acc - (uint32_t)q->zp * (uint32_t)sum); /* exact: the true sum fits */
}

/* The reference: any strides, one (image, channel) plane per iteration. */
static void qconv_ref(const cargs *q) {
    const int64_t P = q->OH * q->OW, YH = q->pooled ? q->PH : q->OH, YW = q->pooled ? q->PW : q->OW;
    OARI_PARALLEL_FOR_IF(q->N * q->O * P * q->K > 65536, for (int64_t t = 0; t < q->N * q->O; t++) {
        const int64_t n = t / q->O, o = t % q->O;
        const float s = ((const float *)q->s->data)[q->s->ndim ? o * q->s->strides[0] : 0];
        const float *b = q->b ? (const float *)q->b->data + o * q->b->strides[0] : NULL;
        for (int64_t oy = 0; oy < YH; oy++)
            for (int64_t ox = 0; ox < YW; ox++) {
                int32_t v;
                if (q->pooled) {
                    v = conv_at(q, n, o, 2 * oy, 2 * ox);
                    v = pool_pick(v, conv_at(q, n, o, 2 * oy, 2 * ox + 1), s < 0);
                    v = pool_pick(v, conv_at(q, n, o, 2 * oy + 1, 2 * ox), s < 0);
                    v = pool_pick(v, conv_at(q, n, o, 2 * oy + 1, 2 * ox + 1), s < 0);
                } else {
                    v = conv_at(q, n, o, oy, ox);
                }
                oari_qput(&q->o, q->y, (t * YH + oy) * YW + ox, oari_qact(v, s, b, q->relu));
            }
    });
}

#ifdef OARI_HAVE_VNNI_CODE
#define VNNI OARI_VNNI
#define UNROLL4 _Pragma("GCC unroll 4")
#define NB_MAX 4 /* panels an item gathers */

/* x (images n0 .. n0 + cnt) into xp [cnt, C, Hp, Wp] (+ slack), flipped,
 * the borders and the slack holding the zero point's byte. */
static void pad_block(const cargs *q, uint8_t *xp, int64_t n0, int64_t cnt, int64_t slack) {
    const oar_ktensor *x = q->x;
    const int64_t Hp = q->H + 2 * q->ph, Wp = q->W + 2 * q->pw, plane = Hp * Wp;
    const uint8_t padv = (uint8_t)q->zp, flip = q->i8 ? 0x80 : 0;
    const uint8_t *xd = x->data;
    OARI_PARALLEL_FOR_IF(cnt * q->C * plane > (1 << 16), for (int64_t t = 0; t < cnt * q->C; t++) {
        uint8_t *dst = xp + t * plane;
        const uint8_t *src = xd + (n0 + t / q->C) * x->strides[0] + (t % q->C) * x->strides[1];
        memset(dst, padv, (size_t)(q->ph * Wp + q->pw));
        for (int64_t iy = 0; iy < q->H; iy++) {
            uint8_t *row = dst + (q->ph + iy) * Wp + q->pw;
            const uint8_t *sr = src + iy * x->strides[2];
            if (x->strides[3] == 1 && !flip) memcpy(row, sr, (size_t)q->W);
            else
                for (int64_t ix = 0; ix < q->W; ix++) row[ix] = sr[ix * x->strides[3]] ^ flip;
            /* this row's right border and the next one's left */
            memset(row + q->W, padv, (size_t)(iy + 1 < q->H ? 2 * q->pw : q->pw));
        }
        memset(dst + (q->ph + q->H) * Wp, padv, (size_t)(q->ph * Wp));
    });
    memset(xp + cnt * q->C * plane, padv, (size_t)slack);
}

/* The 16 pixels of a panel (corner at src, stride sw) at one tap (SSE2:
 * the gather serves the VNNI and the AVX2 kernels). */
static inline __m128i tap16(const uint8_t *src, int64_t sw, int64_t lanes) {
    if (sw == 1) return _mm_loadu_si128((const __m128i *)src);
    if (sw == 2) { /* the even bytes of 32 */
        const __m128i lo = _mm_set1_epi16(0xff);
        return _mm_packus_epi16(_mm_and_si128(_mm_loadu_si128((const __m128i *)src), lo),
                                _mm_and_si128(_mm_loadu_si128((const __m128i *)(src + 16)), lo));
    }
    uint8_t v[16] = {0};
    for (int64_t l = 0; l < lanes; l++) v[l] = src[l * sw];
    return _mm_loadu_si128((const __m128i *)v);
}

/* Four taps of 16 pixels interleaved into dst [16, 4]: byte (l, t) = tap t of pixel l. */
static inline void interleave4(const __m128i v[4], uint8_t *dst) {
    __m128i ab0 = _mm_unpacklo_epi8(v[0], v[1]), ab1 = _mm_unpackhi_epi8(v[0], v[1]);
    __m128i cd0 = _mm_unpacklo_epi8(v[2], v[3]), cd1 = _mm_unpackhi_epi8(v[2], v[3]);
    _mm_storeu_si128((__m128i *)dst, _mm_unpacklo_epi16(ab0, cd0));
    _mm_storeu_si128((__m128i *)(dst + 16), _mm_unpackhi_epi16(ab0, cd0));
    _mm_storeu_si128((__m128i *)(dst + 32), _mm_unpacklo_epi16(ab1, cd1));
    _mm_storeu_si128((__m128i *)(dst + 48), _mm_unpackhi_epi16(ab1, cd1));
}

/* Panel (image nl of the block, output row oy, columns ox0 ..) into dst
 * [kb, 16, 4]: byte (g, l, t) = tap 4 g + t of pixel l (0 past K). */
static void gather(const cargs *q, const uint8_t *xp, const int64_t *off, int64_t nl, int64_t oy, int64_t ox0,
                   uint8_t *dst) {
    const int64_t Hp = q->H + 2 * q->ph, Wp = q->W + 2 * q->pw;
    const uint8_t *base = xp + nl * q->C * Hp * Wp + oy * q->sh * Wp + ox0 * q->sw;
    const int64_t lanes = q->OW - ox0 < 16 ? q->OW - ox0 : 16;
    const int64_t sw = q->sw;
    for (int64_t g = 0; g < q->kb; g++) { /* (the weight is 0 past K) */
        __m128i v[4];
        for (int t = 0; t < 4; t++)
            v[t] = 4 * g + t < q->K ? tap16(base + off[4 * g + t], sw, lanes) : _mm_setzero_si128();
        interleave4(v, dst + g * 64);
    }
}

typedef struct {
    int64_t y0; /* the panel's first output of channel 0 (element index) */
    int lanes;  /* its outputs inside the row (pooled: at most 8) */
} panel;

/* Item t of a block (images n0 .., cnt of them): panels [4 t, 4 t + 4) of
 * the block's cnt * OH * ceil(OW / 16), gathered into col; their count. */
static int gather_item(const cargs *q, const uint8_t *xp, const int64_t *off, int64_t n0, int64_t cnt, int64_t t,
                       uint8_t *col, panel *pn) {
    const int64_t cp = (q->OW + 15) / 16, per_img = q->OH * cp, total = cnt * per_img;
    const int64_t first = t * NB_MAX;
    const int nb = total - first < NB_MAX ? (int)(total - first) : NB_MAX;
    for (int c = 0; c < nb; c++) {
        int64_t idx = first + c, nl = idx / per_img, rem = idx % per_img, oy = rem / cp, ox0 = (rem % cp) * 16;
        gather(q, xp, off, nl, oy, ox0, col + c * q->kb * 64);
        int64_t left = q->OW - ox0;
        pn[c].y0 = (n0 + nl) * q->O * q->OH * q->OW + oy * q->OW + ox0;
        pn[c].lanes = left >= 16 ? 16 : (int)left;
    }
    return nb;
}

/* Pooled, item t of a block: pooled panels [2 t, 2 t + 2) of the block's
 * cnt * PH * ceil(OW / 16) (image, pooled row, conv column panel), each
 * the panels of conv rows 2 py and 2 py + 1 gathered into col [2 j] and
 * col [2 j + 1]; their count. */
static int gather_item_pooled(const cargs *q, const uint8_t *xp, const int64_t *off, int64_t n0, int64_t cnt,
                              int64_t t, uint8_t *col, panel *pn) {
    const int64_t cp = (q->OW + 15) / 16, per_img = q->PH * cp, total = cnt * per_img, first = 2 * t;
    const int np = total - first < 2 ? (int)(total - first) : 2;
    for (int j = 0; j < np; j++) {
        int64_t idx = first + j, nl = idx / per_img, rem = idx % per_img, py = rem / cp, ox0 = (rem % cp) * 16;
        gather(q, xp, off, nl, 2 * py, ox0, col + (2 * j) * q->kb * 64);
        gather(q, xp, off, nl, 2 * py + 1, ox0, col + (2 * j + 1) * q->kb * 64);
        int64_t left = q->PW - ox0 / 2; /* pooled columns from this panel on */
        pn[j].y0 = (n0 + nl) * q->O * q->PH * q->PW + py * q->PW + ox0 / 2;
        pn[j].lanes = left < 8 ? (int)left : 8;
    }
    return np;
}

/* A panel's store mask on AVX-512. */
#define LANE_MASK(pn) ((__mmask16)((1u << (pn).lanes) - 1))

/* The sums of channels o0 .. o0 + MR over the NB gathered panels col
 * [NB, kb, 64] into acc (MR x NB accumulators over kb). */
VNNI __attribute__((always_inline)) static inline void accumulate(const cargs *q, const uint8_t *col, int64_t o0,
                                                                   int MR, int NB, __m512i acc[4][NB_MAX]) {
    const int32_t *ws = q->ws->data;
    const uint32_t zp = (uint32_t)q->zp;
    UNROLL4
    for (int r = 0; r < MR; r++) { /* the sums start at -zp rowsum(W) (the epilogue's correction) */
        __m512i corr = _mm512_set1_epi32((int32_t)(0u - zp * (uint32_t)ws[o0 + r]));
        UNROLL4
        for (int c = 0; c < NB; c++) acc[r][c] = corr;
    }
    const int64_t kb = q->kb;
    const int8_t *w = (const int8_t *)q->w->data + o0 * kb * 4;
    for (int64_t p = 0; p < kb; p++) {
        __m512i cv[NB_MAX];
        UNROLL4
        for (int c = 0; c < NB; c++) cv[c] = _mm512_loadu_si512(col + (c * kb + p) * 64);
        UNROLL4
        for (int r = 0; r < MR; r++) {
            int32_t w4;
            memcpy(&w4, w + (r * kb + p) * 4, 4);
            __m512i wb = _mm512_set1_epi32(w4);
            UNROLL4
            for (int c = 0; c < NB; c++) acc[r][c] = oari_dpbusd(acc[r][c], cv[c], wb);
        }
    }
}

/* Channels o0 .. o0 + MR over the NB gathered panels col [NB, kb, 64]:
 * the sums, then the epilogue, one masked store each. */
VNNI __attribute__((always_inline)) static inline void tile(const cargs *q, const uint8_t *col, const panel *pn,
                                                             int64_t o0, int MR, int NB, bool FAST) {
    __m512i acc[4][NB_MAX];
    accumulate(q, col, o0, MR, NB, acc);
    const float *sp = q->s->data, *bp = q->b ? (const float *)q->b->data : NULL;
    const int64_t P = q->OH * q->OW;
    const bool per_ch = q->s->ndim != 0, relu = q->relu;
    void *const y = q->y;
    if (FAST) {
        const oari_qfast_v fv = oari_qfast_vec(&q->o, &q->qf);
        UNROLL4
        for (int r = 0; r < MR; r++) {
            const int64_t o = o0 + r;
            __m512 sv = _mm512_set1_ps(sp[per_ch ? o : 0]), bv = _mm512_set1_ps(bp ? bp[o] : 0.f);
            UNROLL4
            for (int c = 0; c < NB; c++)
                oari_qfast_store(&fv, (uint8_t *)y + pn[c].y0 + o * P, LANE_MASK(pn[c]), acc[r][c], sv, bv);
        }
        return;
    }
    const oari_qout_v ov = oari_qout_vec(&q->o);
    UNROLL4
    for (int r = 0; r < MR; r++) {
        const int64_t o = o0 + r;
        __m512 sv = _mm512_set1_ps(sp[per_ch ? o : 0]), bv = _mm512_set1_ps(bp ? bp[o] : 0.f);
        UNROLL4
        for (int c = 0; c < NB; c++) {
            __m512 f = oari_qact_v(acc[r][c], sv, bp ? &bv : NULL, relu);
            int64_t at = pn[c].y0 + o * P;
            if (ov.on) oari_qstore_v(&ov, (uint8_t *)y + at, LANE_MASK(pn[c]), f);
            else oari_qstore_v(&ov, (float *)y + at, LANE_MASK(pn[c]), f);
        }
    }
}

/* Item t of a block on VNNI: its panels gathered, every channel. */
VNNI static void item(const cargs *q, const uint8_t *xp, const int64_t *off, int64_t n0, int64_t cnt, int64_t t,
                      uint8_t *col) {
    panel pn[NB_MAX];
    const int nb = gather_item(q, xp, off, n0, cnt, t, col, pn);
    for (int64_t o0 = 0; o0 < q->O; o0 += 4) {
        int mr = q->O - o0 < 4 ? (int)(q->O - o0) : 4;
#define NB_CASES(MR)                                                                                   \
    switch (nb) {                                                                                      \
    case 4: q->fast ? tile(q, col, pn, o0, MR, 4, true) : tile(q, col, pn, o0, MR, 4, false); break;   \
    case 3: q->fast ? tile(q, col, pn, o0, MR, 3, true) : tile(q, col, pn, o0, MR, 3, false); break;   \
    case 2: q->fast ? tile(q, col, pn, o0, MR, 2, true) : tile(q, col, pn, o0, MR, 2, false); break;   \
    default: q->fast ? tile(q, col, pn, o0, MR, 1, true) : tile(q, col, pn, o0, MR, 1, false); break;  \
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

/* Pooled: channels o0 .. o0 + MR over NP pooled panels, each the two
 * gathered conv panels (rows 2 py, 2 py + 1) col[2 j], col[2 j + 1]: the
 * window's max (min for a negative scale) of the sums, vertical then of
 * each lane pair, the pairs' results packed into one vector (8 lanes a
 * pooled panel), one epilogue, a masked store per pooled panel. */
VNNI __attribute__((always_inline)) static inline void tile_pooled(const cargs *q, const uint8_t *col,
                                                                    const panel *pn, int64_t o0, int MR, int NP,
                                                                    bool FAST) {
    __m512i acc[4][NB_MAX];
    accumulate(q, col, o0, MR, 2 * NP, acc);
    const float *sp = q->s->data, *bp = q->b ? (const float *)q->b->data : NULL;
    const int64_t P = q->PH * q->PW;
    const bool per_ch = q->s->ndim != 0;
    void *const y = q->y;
    const oari_qfast_v fv = oari_qfast_vec(&q->o, &q->qf);
    const oari_qout_v ov = oari_qout_vec(&q->o);
    UNROLL4
    for (int r = 0; r < MR; r++) {
        const int64_t o = o0 + r;
        const float sc = sp[per_ch ? o : 0];
        __m512 sv = _mm512_set1_ps(sc), bv = _mm512_set1_ps(bp ? bp[o] : 0.f);
        __m256i h[2];
        for (int j = 0; j < NP; j++) {
            __m512i m = sc < 0 ? _mm512_min_epi32(acc[r][2 * j], acc[r][2 * j + 1])
                               : _mm512_max_epi32(acc[r][2 * j], acc[r][2 * j + 1]);
            __m512i sh = _mm512_srli_epi64(m, 32); /* lane 2 i + 1 onto lane 2 i */
            m = sc < 0 ? _mm512_min_epi32(m, sh) : _mm512_max_epi32(m, sh);
            h[j] = _mm512_cvtepi64_epi32(m); /* the even lanes */
        }
        __m512i v = _mm512_zextsi256_si512(h[0]);
        if (NP == 2) v = _mm512_inserti64x4(v, h[1], 1);
        const __m512i hi = _mm512_set_epi32(7, 6, 5, 4, 3, 2, 1, 0, 15, 14, 13, 12, 11, 10, 9, 8);
        if (FAST) {
            __m512i iv = oari_qfast_int(&fv, v, sv, bv);
            _mm512_mask_cvtepi32_storeu_epi8((uint8_t *)y + pn[0].y0 + o * P, LANE_MASK(pn[0]), iv);
            if (NP == 2)
                _mm512_mask_cvtepi32_storeu_epi8((uint8_t *)y + pn[1].y0 + o * P, LANE_MASK(pn[1]),
                                                 _mm512_permutexvar_epi32(hi, iv));
        } else {
            __m512 f = oari_qact_v(v, sv, bp ? &bv : NULL, q->relu);
            oari_qstore_v(&ov, (uint8_t *)y + pn[0].y0 + o * P, LANE_MASK(pn[0]), f);
            if (NP == 2)
                oari_qstore_v(&ov, (uint8_t *)y + pn[1].y0 + o * P, LANE_MASK(pn[1]),
                              _mm512_permutexvar_ps(hi, f));
        }
    }
}

/* Pooled, item t of a block on VNNI: its panels gathered, every channel. */
VNNI static void item_pooled(const cargs *q, const uint8_t *xp, const int64_t *off, int64_t n0, int64_t cnt,
                             int64_t t, uint8_t *col) {
    panel pn[2];
    const int np = gather_item_pooled(q, xp, off, n0, cnt, t, col, pn);
    for (int64_t o0 = 0; o0 < q->O; o0 += 4) {
        int mr = q->O - o0 < 4 ? (int)(q->O - o0) : 4;
#define NP_CASES(MR)                                                                                   \
    if (np == 2) q->fast ? tile_pooled(q, col, pn, o0, MR, 2, true) : tile_pooled(q, col, pn, o0, MR, 2, false); \
    else q->fast ? tile_pooled(q, col, pn, o0, MR, 1, true) : tile_pooled(q, col, pn, o0, MR, 1, false);
        switch (mr) {
        case 4: NP_CASES(4) break;
        case 3: NP_CASES(3) break;
        case 2: NP_CASES(2) break;
        default: NP_CASES(1) break;
        }
#undef NP_CASES
    }
}

#define QAVX2 OARI_QAVX2

/* Channels o0 .. o0 + MR over one gathered panel col [kb, 16, 4] on AVX2
 * (W's rows as int16 quads wq [O, kb]): the 16 pixels' sums, corrected by
 * -zp rowsum(W), lanes 0-7 in v[r][0] and 8-15 in v[r][1]. */
QAVX2 __attribute__((always_inline)) static inline void sums_avx2(const cargs *q, const uint8_t *col,
                                                                  const uint64_t *wq, int64_t o0, int MR,
                                                                  __m256i v[2][2]) {
    __m256i acc[2][4];
    const uint64_t *bq[2] = {wq + o0 * q->kb, wq + (o0 + MR - 1) * q->kb};
    oari_qmadd(col, false, bq, MR, q->kb, acc);
    const int32_t *ws = q->ws->data;
    for (int r = 0; r < MR; r++) {
        oari_qlanes(acc[r], v[r]);
        __m256i corr = _mm256_set1_epi32((int32_t)((uint32_t)q->zp * (uint32_t)ws[o0 + r]));
        v[r][0] = _mm256_sub_epi32(v[r][0], corr), v[r][1] = _mm256_sub_epi32(v[r][1], corr);
    }
}

/* Item t of a block on AVX2: its panels gathered, then panel by panel
 * every channel, two at a time. */
QAVX2 static void item_avx2(const cargs *q, const uint8_t *xp, const int64_t *off, int64_t n0, int64_t cnt,
                            int64_t t, uint8_t *col, const uint64_t *wq) {
    panel pn[NB_MAX];
    const int nb = gather_item(q, xp, off, n0, cnt, t, col, pn);
    const float *sp = q->s->data, *bp = q->b ? (const float *)q->b->data : NULL;
    const int64_t P = q->OH * q->OW;
    for (int c = 0; c < nb; c++)
        for (int64_t o0 = 0; o0 < q->O; o0 += 2) {
            const int mr = q->O - o0 < 2 ? 1 : 2;
            __m256i v[2][2];
            if (mr == 2) sums_avx2(q, col + c * q->kb * 64, wq, o0, 2, v);
            else sums_avx2(q, col + c * q->kb * 64, wq, o0, 1, v);
            for (int r = 0; r < mr; r++) {
                const int64_t o = o0 + r;
                const __m256 sv = _mm256_set1_ps(sp[q->s->ndim ? o : 0]), bv = _mm256_set1_ps(bp ? bp[o] : 0.f);
                for (int h = 0; h < 2 && 8 * h < pn[c].lanes; h++)
                    oari_qepi(&q->o, v[r][h], sv, bp ? &bv : NULL, q->relu, q->y, pn[c].y0 + o * P + 8 * h,
                              pn[c].lanes - 8 * h < 8 ? pn[c].lanes - 8 * h : 8);
            }
        }
}

/* Pooled, item t of a block on AVX2: per channel, the window's max (min
 * for a negative scale) of the sums of the two conv rows, then of each
 * lane pair, the even lanes packed into 8 pooled outputs, one epilogue. */
QAVX2 static void item_pooled_avx2(const cargs *q, const uint8_t *xp, const int64_t *off, int64_t n0, int64_t cnt,
                                   int64_t t, uint8_t *col, const uint64_t *wq) {
    panel pn[2];
    const int np = gather_item_pooled(q, xp, off, n0, cnt, t, col, pn);
    const float *sp = q->s->data, *bp = q->b ? (const float *)q->b->data : NULL;
    const int64_t P = q->PH * q->PW;
    const __m256i even = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
    for (int j = 0; j < np; j++)
        for (int64_t o0 = 0; o0 < q->O; o0 += 2) {
            const int mr = q->O - o0 < 2 ? 1 : 2;
            __m256i top[2][2], bot[2][2];
            const uint8_t *c0 = col + 2 * j * q->kb * 64, *c1 = c0 + q->kb * 64;
            if (mr == 2) sums_avx2(q, c0, wq, o0, 2, top), sums_avx2(q, c1, wq, o0, 2, bot);
            else sums_avx2(q, c0, wq, o0, 1, top), sums_avx2(q, c1, wq, o0, 1, bot);
            for (int r = 0; r < mr; r++) {
                const int64_t o = o0 + r;
                const float sc = sp[q->s->ndim ? o : 0];
                __m256i h[2];
                for (int i = 0; i < 2; i++) {
                    __m256i m = sc < 0 ? _mm256_min_epi32(top[r][i], bot[r][i]) : _mm256_max_epi32(top[r][i], bot[r][i]);
                    __m256i sh = _mm256_srli_epi64(m, 32); /* lane 2 i + 1 onto lane 2 i */
                    m = sc < 0 ? _mm256_min_epi32(m, sh) : _mm256_max_epi32(m, sh);
                    h[i] = _mm256_permutevar8x32_epi32(m, even);
                }
                const __m256 sv = _mm256_set1_ps(sc), bv = _mm256_set1_ps(bp ? bp[o] : 0.f);
                oari_qepi(&q->o, _mm256_blend_epi32(h[0], h[1], 0xf0), sv, bp ? &bv : NULL, q->relu, q->y,
                          pn[j].y0 + o * P, pn[j].lanes);
            }
        }
}

static void run_item(const cargs *q, oari_qkernel kern, const uint8_t *xp, const int64_t *off, int64_t n0,
                     int64_t cnt, int64_t t, uint8_t *col, const uint64_t *wq) {
    if (kern == OARI_QK_VNNI) q->pooled ? item_pooled(q, xp, off, n0, cnt, t, col) : item(q, xp, off, n0, cnt, t, col);
    else q->pooled ? item_pooled_avx2(q, xp, off, n0, cnt, t, col, wq) : item_avx2(q, xp, off, n0, cnt, t, col, wq);
}

/* A block's padded images near this many bytes. */
#define QCONV_BLOCK_BYTES ((int64_t)4 << 20)
#define QCONV_SLACK 128 /* a panel's loads run up to 32 bytes past a row's end */

/* The VNNI or AVX2 kernel (kern) over blocks of padded images. 0 or
 * OAR_ERR_NOMEM. */
static int qconv_simd(const cargs *q, oari_qkernel kern) {
    const int64_t Hp = q->H + 2 * q->ph, Wp = q->W + 2 * q->pw, img = q->C * Hp * Wp;
    int64_t nb = img > 0 ? QCONV_BLOCK_BYTES / img : q->N;
    nb = nb < 1 ? 1 : nb > q->N ? q->N : nb;
#ifdef _OPENMP
    const int threads = OARI_MANY_THREADS() ? omp_get_max_threads() : 1;
#else
    const int threads = 1;
#endif
    const size_t xp_n = (size_t)(nb * img + QCONV_SLACK), col_n = (size_t)(NB_MAX * q->kb * 64);
    const size_t off_n = (size_t)(q->kb * 4) * sizeof(int64_t);
    const size_t wq_n = kern == OARI_QK_AVX2 ? (size_t)(q->O * q->kb) * sizeof(uint64_t) : 0;
    const size_t bytes = wq_n + xp_n + off_n + (size_t)threads * col_n + 64;
    uint8_t *mem = oari_malloc(bytes);
    if (!mem) return oari_fail_status();
    uint64_t *wq = (uint64_t *)(((uintptr_t)mem + 7) & ~(uintptr_t)7);
    int64_t *off = (int64_t *)((uint8_t *)wq + wq_n);
    uint8_t *cols = (uint8_t *)off + off_n, *xp = cols + (size_t)threads * col_n;
    if (wq_n) /* W's rows as AVX2's int16 quads */
        for (int64_t o = 0; o < q->O; o++)
            oari_qquads((const uint8_t *)q->w->data + o * q->kb * 4, q->kb * 4, 0, true, wq + o * q->kb);
    for (int64_t k = 0; k < q->kb * 4; k++) { /* tap k's offset from a panel's corner (0 past K) */
        int64_t ci = k / (q->KH * q->KW), i = k / q->KW % q->KH, j = k % q->KW;
        off[k] = k < q->K ? ci * Hp * Wp + i * q->dh * Wp + j * q->dw : 0;
    }
    const int64_t cp = (q->OW + 15) / 16;
    for (int64_t n0 = 0; n0 < q->N; n0 += nb) {
        const int64_t cnt = q->N - n0 < nb ? q->N - n0 : nb;
        const int64_t items = q->pooled ? (cnt * q->PH * cp + 1) / 2 : (cnt * q->OH * cp + NB_MAX - 1) / NB_MAX;
        pad_block(q, xp, n0, cnt, QCONV_SLACK);
        if (items > 1 && cnt * q->OH * q->OW * q->O * q->K >= ((int64_t)1 << 20) && threads > 1) {
#ifdef _OPENMP
#pragma omp parallel num_threads(threads)
            {
                uint8_t *col = cols + (size_t)omp_get_thread_num() * col_n;
#pragma omp for schedule(static)
                for (int64_t t = 0; t < items; t++) run_item(q, kern, xp, off, n0, cnt, t, col, wq);
            }
#endif
        } else {
            for (int64_t t = 0; t < items; t++) run_item(q, kern, xp, off, n0, cnt, t, cols, wq);
        }
    }
    oari_free(mem, bytes);
    return 0;
}
#endif

static int k_qlinear_conv2d(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    const oar_ktensor *x = &c->in[0], *w = &c->in[1];
    const int64_t *a = c->iattr;
    cargs q = {.x = x, .w = w, .ws = &c->in[2], .s = &c->in[3],
               .b = c->n_in > 4 && c->in[4].dtype >= 0 ? &c->in[4] : NULL, .y = c->out[0].data,
               .N = x->shape[0], .C = x->shape[1], .H = x->shape[2], .W = x->shape[3], .O = c->in[2].shape[0],
               .PH = c->out[0].shape[2], .PW = c->out[0].shape[3], .sh = a[1], .sw = a[2], .ph = a[3], .pw = a[4],
               .dh = a[5], .dw = a[6], .KH = a[7], .KW = a[8], .i8 = x->dtype == OAR_I8, .relu = a[9] == 1};
    q.K = q.C * q.KH * q.KW, q.kb = w->shape[1];
    q.pooled = c->n_iattr > 12 && a[12] == 1;
    q.OH = (q.H + 2 * q.ph - q.dh * (q.KH - 1) - 1) / q.sh + 1, q.OW = (q.W + 2 * q.pw - q.dw * (q.KW - 1) - 1) / q.sw + 1;
    q.zp = (int32_t)a[0] + (q.i8 ? 128 : 0);
    /* requantized: in5 the scale, in6 the zero point, one each */
    if (oari_cpu_qout_parse(c, 10, 5, &q.o)) return oari_fail_status();
    if (q.N == 0 || q.O == 0) return 0;
#ifdef OARI_HAVE_VNNI_CODE
    const oari_qkernel kern = oari_cpu_qkernel();
    if (kern != OARI_QK_REFERENCE && q.K > 0 && dense(w) && dense(q.ws) && dense(q.s) && (!q.b || dense(q.b))) {
        q.fast = kern == OARI_QK_VNNI &&
                 oari_cpu_qfast(&q.o, q.s->data, q.s->ndim ? q.O : 1, q.b ? q.b->data : NULL, q.O, q.relu, &q.qf);
        return qconv_simd(&q, kern);
    }
#else
    (void)dense;
#endif
    qconv_ref(&q);
    return 0;
}

const oari_cpu_kernels oari_cpu_k_qlinear_conv2d = {[OAR_U8] = k_qlinear_conv2d, [OAR_I8] = k_qlinear_conv2d};

/* ---- qmax_pool2d ------------------------------------------------------------------ */

/* One plane: windows scanned as max_pool2d's generic loop (padding
 * skipped), from the dtype's lowest value (quantize's image of -inf). The
 * 2x2 stride-2 window without padding takes a branch-free loop. */
#define QPOOL(SFX, T, LOW)                                                                             \
    static void qpool_plane_##SFX(const T *x, int64_t xs0, int64_t xs1, T *y, int64_t H, int64_t W,   \
                                  int64_t OH, int64_t OW, const int64_t *a) {                          \
        const int64_t kh = a[0], kw = a[1], sh = a[2], sw = a[3], ph = a[4], pw = a[5], dh = a[6],      \
                      dw = a[7];                                                                       \
        if (kh == 2 && kw == 2 && sh == 2 && sw == 2 && ph == 0 && pw == 0 && dh == 1 && dw == 1 &&    \
            xs1 == 1 && 2 * OH <= H && 2 * OW <= W) {                                                  \
            for (int64_t oy = 0; oy < OH; oy++) {                                                      \
                const T *r0 = x + 2 * oy * xs0, *r1 = r0 + xs0;                                        \
                T *yo = y + oy * OW;                                                                   \
                for (int64_t ox = 0; ox < OW; ox++) {                                                  \
                    T m0 = r0[2 * ox] > r0[2 * ox + 1] ? r0[2 * ox] : r0[2 * ox + 1];                  \
                    T m1 = r1[2 * ox] > r1[2 * ox + 1] ? r1[2 * ox] : r1[2 * ox + 1];                  \
                    yo[ox] = m0 > m1 ? m0 : m1;                                                        \
                }                                                                                      \
            }                                                                                          \
            return;                                                                                    \
        }                                                                                              \
        for (int64_t oy = 0; oy < OH; oy++)                                                            \
            for (int64_t ox = 0; ox < OW; ox++) {                                                      \
                int64_t y0 = oy * sh - ph, x0 = ox * sw - pw;                                          \
                int64_t y1 = y0 + (kh - 1) * dh + 1, x1 = x0 + (kw - 1) * dw + 1;                      \
                y1 = y1 > H ? H : y1, x1 = x1 > W ? W : x1;                                            \
                while (y0 < 0) y0 += dh;                                                               \
                while (x0 < 0) x0 += dw;                                                               \
                T m = LOW;                                                                             \
                for (int64_t iy = y0; iy < y1; iy += dh)                                               \
                    for (int64_t ix = x0; ix < x1; ix += dw) {                                         \
                        T v = x[iy * xs0 + ix * xs1];                                                  \
                        m = v > m ? v : m;                                                             \
                    }                                                                                  \
                y[oy * OW + ox] = m;                                                                   \
            }                                                                                          \
    }
QPOOL(u8, uint8_t, 0)
QPOOL(i8, int8_t, -128)

#ifdef OARI_HAVE_VNNI_CODE
/* The 2 x 2 stride-2 window on AVX512BW: 32 outputs of a row from 64 bytes
 * of each input row (the vertical max, then each byte pair's), int8 as
 * uint8 through x ^ 0x80 (order-preserving). */
VNNI static void qpool_2x2_avx512(const uint8_t *x, int64_t xs0, uint8_t *y, int64_t OH, int64_t OW, bool i8) {
    const __m512i flip = _mm512_set1_epi8(i8 ? (char)0x80 : 0), low = _mm512_set1_epi16(0x00ff);
    for (int64_t oy = 0; oy < OH; oy++) {
        const uint8_t *r0 = x + 2 * oy * xs0, *r1 = r0 + xs0;
        for (int64_t ox = 0; ox < OW; ox += 32) {
            const int64_t n = OW - ox < 32 ? OW - ox : 32;
            const __mmask64 lm = n == 32 ? ~(__mmask64)0 : ((__mmask64)1 << (2 * n)) - 1;
            __m512i m = _mm512_max_epu8(_mm512_xor_si512(_mm512_maskz_loadu_epi8(lm, r0 + 2 * ox), flip),
                                        _mm512_xor_si512(_mm512_maskz_loadu_epi8(lm, r1 + 2 * ox), flip));
            __m512i pm = _mm512_max_epu16(_mm512_and_si512(m, low), _mm512_srli_epi16(m, 8));
            __m256i r = _mm256_xor_si256(_mm512_cvtepi16_epi8(pm), _mm512_castsi512_si256(flip));
            _mm256_mask_storeu_epi8(y + oy * OW + ox, (__mmask32)(((uint64_t)1 << n) - 1), r);
        }
    }
}
#endif

static int k_qmax_pool2d(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    const oar_ktensor *x = &c->in[0];
    const int nd = x->ndim;
    const int64_t H = x->shape[nd - 2], W = x->shape[nd - 1], OH = c->out[0].shape[nd - 2],
                  OW = c->out[0].shape[nd - 1];
    int64_t np = 1;
    for (int d = 0; d < nd - 2; d++) np *= x->shape[d];
    const bool u8 = x->dtype == OAR_U8;
    const int64_t *a = c->iattr;
#ifdef OARI_HAVE_VNNI_CODE
    const bool simd = oari_cpu_qkernel() == OARI_QK_VNNI && a[0] == 2 && a[1] == 2 && a[2] == 2 && a[3] == 2 && a[4] == 0 &&
                      a[5] == 0 && a[6] == 1 && a[7] == 1 && x->strides[nd - 1] == 1 && 2 * OH <= H && 2 * OW <= W;
#else
    const bool simd = false;
#endif
    OARI_PARALLEL_FOR_IF(np * H * W > (1 << 17), for (int64_t p = 0; p < np; p++) {
        int64_t off = 0, rest = p;
        for (int d = nd - 3; d >= 0; d--) {
            off += (rest % x->shape[d]) * x->strides[d];
            rest /= x->shape[d];
        }
#ifdef OARI_HAVE_VNNI_CODE
        if (simd) {
            qpool_2x2_avx512((const uint8_t *)x->data + off, x->strides[nd - 2],
                             (uint8_t *)c->out[0].data + p * OH * OW, OH, OW, !u8);
            continue;
        }
#endif
        if (u8)
            qpool_plane_u8((const uint8_t *)x->data + off, x->strides[nd - 2], x->strides[nd - 1],
                           (uint8_t *)c->out[0].data + p * OH * OW, H, W, OH, OW, a);
        else
            qpool_plane_i8((const int8_t *)x->data + off, x->strides[nd - 2], x->strides[nd - 1],
                           (int8_t *)c->out[0].data + p * OH * OW, H, W, OH, OW, a);
    });
    return 0;
}

const oari_cpu_kernels oari_cpu_k_qmax_pool2d = {[OAR_U8] = k_qmax_pool2d, [OAR_I8] = k_qmax_pool2d};

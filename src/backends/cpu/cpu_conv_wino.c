/* conv2d by Winograd's minimal filtering F(4x4, 3x3) (Lavin & Gray 2016),
 * or F(2x2, 3x3),
 * float32, for 3x3 stride-1 undilated convolutions without groups and with
 * enough channels (ResNet's 3x3 convs). Each 4x4 output tile comes from a
 * 6x6 input tile d and a 3x3 filter g as
 *     Y = A^T [ sum_c (G g_c G^T) . (B^T d_c B) ] A
 * (. the element-wise product), so the 9 multiply-adds per output and input
 * channel of im2col + gemm become 36 / 16 = 2.25, done as 36 gemms
 *     M[k] (O x T) = U[k] (O x C) V[k] (C x T),   k = 0 .. 35
 * over the tiles T of a block of tile rows. The input transform applies
 * B^T down the six rows of a tile row along whole padded rows, then, per
 * chunk of 16 tiles, de-interleaves the stride-4 columns with shuffles and
 * applies B^T across, all on 64-byte vectors; the output
 * transform does the same backwards and adds the bias. F(2x2, 3x3) (4x4
 * input tiles, 16 gemms, 4 multiply-adds per output) serves small planes
 * whose 4x4 tiles are too few (see oari_cpu_wino_ok).
 *
 * conv2d recomputes the filter transform U on every call: a kernel sees
 * only a data pointer (no storage or version), and a pointer can be refilled
 * with other weights (an arena slot, an optimizer's in-place update), so
 * there is no safe cache key. Its cost (read C*O*9 floats, write C*O*36) is
 * what keeps small planes with many channels (ResNet's 7x7 stage at batch
 * 1) on im2col + gemm; see oari_cpu_wino_ok. On a constant weight the
 * predictor's prepack_conv pass computes U once (oari_cpu_wino_filter:
 * conv2d_prepacked's order 2), and oari_cpu_conv2d_wino_packed starts from
 * it, with relu folded into the output transform.
 *
 * Accuracy: the interpolation points 0, +-1, +-2 and 1/2, 1/4 ... constants
 * of the transforms are exact in binary only in part (1/6, 1/12, 1/24 are
 * not); against the float64 sum the error is a few 1e-7 of sum |terms|
 * (im2col: about 1e-7), inside the 1e-5 the conv tests allow.
 *
 * The blocks and the gemm calls follow from the shapes alone, so the result
 * does not depend on the number of threads. */
#include "cpu.h"

#pragma GCC optimize("no-trapping-math", "no-math-errno")

#include <cblas.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define WT 4  /* output tile */
#define WA 6  /* input tile: WT + 3 - 1 */
#define WK 36 /* WA * WA */

/* Bytes of V and M per block (both in L2 between the transforms and the
 * gemms). A block is whole tile rows, one at least. */
#ifndef WINO_BLOCK_BYTES
#define WINO_BLOCK_BYTES ((int64_t)1 << 20)
/* ... but 128 tiles at least: every block reads all of U (36 O C floats),
 * which for 512 channels is 37 MB (batch 8, one thread: 59 ms a conv on
 * blocks of 6 tiles, 30 on 128) */
#define WINO_BLOCK_MIN_TILES 128
#endif
/* F(2x2, 3x3) where F(4x4) has too few tiles: 256 channels in and out on
 * 14x14 (49 2x2 tiles, ResNet's third stage at batch 1) 2.1-2.3 ms against
 * 2.8-3.2 for im2col + gemm (one thread, CPU time); 512 on 7x7 lose at
 * batch 1 to 4 (7.4-8.8 against 3.4-4.0 at batch 1), so not above
 * 256 x 256 channels. */
#ifndef WINO2_MIN_TILES
#define WINO2_MIN_TILES 48
#endif

typedef float wvec __attribute__((vector_size(64)));
#define WVL 16

static int nthreads(void) {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

static int tid(void) {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

/* The transforms, for scalars and vectors alike. G [6x3] on g0..g2: */
#define WINO_G(o, g0, g1, g2)                                                                      \
    do {                                                                                           \
        (o)[0] = (g0) * (1.0f / 4);                                                                \
        (o)[1] = ((g0) + (g1) + (g2)) * (-1.0f / 6);                                               \
        (o)[2] = ((g0) - (g1) + (g2)) * (-1.0f / 6);                                               \
        (o)[3] = (g0) * (1.0f / 24) + (g1) * (1.0f / 12) + (g2) * (1.0f / 6);                      \
        (o)[4] = (g0) * (1.0f / 24) - (g1) * (1.0f / 12) + (g2) * (1.0f / 6);                      \
        (o)[5] = (g2);                                                                             \
    } while (0)

/* B^T [6x6] on d0..d5 */
#define WINO_BT(o, d0, d1, d2, d3, d4, d5)                                                         \
    do {                                                                                           \
        (o)[0] = 4 * (d0) - 5 * (d2) + (d4);                                                       \
        (o)[1] = -4 * ((d1) + (d2)) + (d3) + (d4);                                                 \
        (o)[2] = 4 * ((d1) - (d2)) - (d3) + (d4);                                                  \
        (o)[3] = 2 * ((d3) - (d1)) - (d2) + (d4);                                                  \
        (o)[4] = 2 * ((d1) - (d3)) - (d2) + (d4);                                                  \
        (o)[5] = 4 * (d1) - 5 * (d3) + (d5);                                                       \
    } while (0)

/* A^T [4x6] on m0..m5 */
#define WINO_AT(o, m0, m1, m2, m3, m4, m5)                                                         \
    do {                                                                                           \
        (o)[0] = (m0) + ((m1) + (m2)) + ((m3) + (m4));                                             \
        (o)[1] = ((m1) - (m2)) + 2 * ((m3) - (m4));                                                \
        (o)[2] = ((m1) + (m2)) + 4 * ((m3) + (m4));                                                \
        (o)[3] = ((m1) - (m2)) + 8 * ((m3) - (m4)) + (m5);                                         \
    } while (0)

int oari_cpu_wino_ok(int64_t n, int64_t c, int64_t o, int64_t oh, int64_t ow, int64_t kh,
                     int64_t kw, int64_t sh, int64_t sw, int64_t dh, int64_t dw, int64_t groups) {
    if (kh != 3 || kw != 3 || sh != 1 || sw != 1 || dh != 1 || dw != 1 || groups != 1) return 0;
    if (c < 16 || o < 16 || oh < 4 || ow < 4) return 0;
    /* The filter transform (C*O*36 floats written, then read by the gemms,
     * on every call) has to be paid for by the tiles. One thread, CPU
     * time, against im2col + gemm (bench_conv): 256 channels in and out
     * lose on 16 tiles (14x14 at batch 1: 3.6-5.1 ms against 2.8-3.3) and
     * win from 32 (batch 2: 5.5-6.6 against 6.3-6.6; batch 4: 8.1-9.8
     * against 12.5-13.3); 512 (U: 37 MB) lose up to 16 tiles, tie at 32
     * (25.5-27.4 against 23.7-28.7) and win from 64 (34.7-36.8 against
     * 51.5-53.0). */
    const int64_t tiles = n * ((oh + 3) / 4) * ((ow + 3) / 4);
    if (tiles >= (c * o > 256 * 256 ? 64 : 32)) return 4;
    /* fewer: F(2x2) (U of 16 C O floats) where it was measured to win
     * (see WINO2_MIN_TILES) */
    const int64_t tiles2 = n * ((oh + 1) / 2) * ((ow + 1) / 2);
    if (c * o <= 256 * 256 && tiles2 >= WINO2_MIN_TILES) return 2;
    return 0;
}

/* U [36][O][C] <- the filters w [O][C][3][3], output channels [o0, o1). */
OARI_SIMD_CLONES static void filter_transform(const float *w, int64_t C, int64_t O, int64_t o0,
                                              int64_t o1, float *U) {
    for (int64_t o = o0; o < o1; o++)
        for (int64_t c0 = 0; c0 < C; c0 += WVL) {
            const int64_t nl = C - c0 < WVL ? C - c0 : WVL;
            wvec g[9], t[WA][3], u[WA];
            for (int i = 0; i < 9; i++)
                for (int64_t l = 0; l < WVL; l++)
                    g[i][l] = l < nl ? w[(o * C + c0 + l) * 9 + i] : 0;
            for (int j = 0; j < 3; j++) { /* columns: t = G g */
                wvec col[WA];
                WINO_G(col, g[j], g[3 + j], g[6 + j]);
                for (int a = 0; a < WA; a++)
                    t[a][j] = col[a];
            }
            for (int a = 0; a < WA; a++) { /* rows: (G g) G^T */
                WINO_G(u, t[a][0], t[a][1], t[a][2]);
                for (int b = 0; b < WA; b++) {
                    float *dst = U + ((a * WA + b) * O + o) * C + c0;
                    if (nl == WVL)
                        memcpy(dst, &u[b], sizeof u[b]);
                    else
                        for (int64_t l = 0; l < nl; l++)
                            dst[l] = u[b][l];
                }
            }
        }
}

/* Geometry of one call. */
typedef struct {
    int64_t N, C, H, W, O, OH, OW, ph, pw;
    int64_t nty, ntx; /* tile rows per image, tiles per tile row */
    int64_t nch;      /* chunks of WVL tiles per tile row */
    int64_t m, wk;    /* output tile m x m (4 or 2), (m + 2)^2 gemms */
    bool relu;        /* y = max(y, 0) as it is stored */
} wgeom;

typedef int32_t wmask __attribute__((vector_size(64)));
#define SHUF(a, b, ...) OARI_SHUFFLE2(a, b, wmask, __VA_ARGS__)

/* (a macro: a function returning a 64-byte vector changes the ABI in the
 * baseline clone) */
#define vload(p)                                                                                   \
    __extension__({                                                                                \
        wvec v_;                                                                                   \
        memcpy(&v_, (p), sizeof v_);                                                               \
        v_;                                                                                        \
    })

/* Width of the padded rows: every chunk reads 4 * WVL columns and the
 * first WVL of the next. */
static int64_t row_width(const wgeom *g) { return g->nch * g->m * WVL + WVL; }

/* Per-thread scratch, floats: six padded input rows, then their column
 * transforms (six rows); the output side uses an output row. */
static int64_t scratch_floats(const wgeom *g) { return 2 * WA * row_width(g); }

/* Rows iy0 .. iy0 + n - 1 of plane, each written to rows + i * rw with pw
 * zero columns before and zeros after (W + 2 pw <= the tiles' width < rw);
 * zero[i] marks the rows outside the image (padding), left unwritten. */
static void padded_rows(const wgeom *g, const float *plane, int64_t iy0, int n, float *rows, int64_t rw,
                        bool *zero) {
    for (int i = 0; i < n; i++) {
        const int64_t iy = iy0 + i;
        float *row = rows + i * rw;
        zero[i] = iy < 0 || iy >= g->H;
        if (zero[i]) continue;
        memset(row, 0, (size_t)g->pw * sizeof(float));
        memcpy(row + g->pw, plane + iy * g->W, (size_t)g->W * sizeof(float));
        memset(row + g->pw + g->W, 0, (size_t)(rw - g->pw - g->W) * sizeof(float));
    }
}

/* V [36][C][ldv] columns col .. col + ntx <- channel c of tile row ty of
 * image n. The column direction (B^T over the six rows) runs along the
 * padded rows; then each chunk of 16 tiles de-interleaves its 64 (+2)
 * columns into d0..d5 (d_j[t] = column 4t + j) and applies B^T across. */
OARI_SIMD_CLONES static void input_row(const wgeom *g, const float *x, int64_t n, int64_t c,
                                       int64_t ty, float *V, int64_t ldv, int64_t col,
                                       float *scratch) {
    const int64_t rw = row_width(g);
    float *rows = scratch, *cols = scratch + WA * rw;
    bool zero[WA];
    padded_rows(g, x + (n * g->C + c) * g->H * g->W, ty * WT - g->ph, WA, rows, rw, zero);
    const wvec z = {0};
    for (int64_t xx = 0; xx < rw; xx += WVL) {
        wvec d[WA], r[WA];
        for (int i = 0; i < WA; i++)
            d[i] = zero[i] ? z : vload(rows + i * rw + xx);
        WINO_BT(r, d[0], d[1], d[2], d[3], d[4], d[5]);
        for (int a = 0; a < WA; a++)
            memcpy(cols + a * rw + xx, &r[a], sizeof r[a]);
    }
    for (int a = 0; a < WA; a++)
        for (int64_t ch = 0; ch < g->nch; ch++) {
            const float *w = cols + a * rw + ch * WT * WVL;
            const wvec A = vload(w), B = vload(w + 16), C = vload(w + 32), D = vload(w + 48);
            const wvec E = vload(w + 64);
            const wvec P = SHUF(A, B, 0, 4, 8, 12, 16, 20, 24, 28, 1, 5, 9, 13, 17, 21, 25, 29);
            const wvec Q = SHUF(A, B, 2, 6, 10, 14, 18, 22, 26, 30, 3, 7, 11, 15, 19, 23, 27, 31);
            const wvec R = SHUF(C, D, 0, 4, 8, 12, 16, 20, 24, 28, 1, 5, 9, 13, 17, 21, 25, 29);
            const wvec S = SHUF(C, D, 2, 6, 10, 14, 18, 22, 26, 30, 3, 7, 11, 15, 19, 23, 27, 31);
            const wvec d0 = SHUF(P, R, 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23);
            const wvec d1 = SHUF(P, R, 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
            const wvec d2 = SHUF(Q, S, 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23);
            const wvec d3 = SHUF(Q, S, 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
            const wvec d4 = SHUF(d0, E, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16);
            const wvec d5 = SHUF(d1, E, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 17);
            wvec r[WA];
            WINO_BT(r, d0, d1, d2, d3, d4, d5);
            /* all 16 lanes: past the row's last tile they land on the next
             * row's columns (written after this one) or in the slack */
            float *dst = V + ((int64_t)(a * WA) * g->C + c) * ldv + col + ch * WVL;
            for (int j = 0; j < WA; j++)
                memcpy(dst + (int64_t)j * g->C * ldv, &r[j], sizeof r[j]);
        }
}

/* Rows ty * nrows .. of output channel o of image n <- the staged rows
 * orow (orw apart) plus bias b, cut at the plane's bottom edge. */
OARI_SIMD_CLONES static void store_rows(const wgeom *g, const float *orow, int64_t orw, int nrows,
                                        int64_t n, int64_t o, int64_t ty, float b, float *y) {
    float *yo = y + (n * g->O + o) * g->OH * g->OW;
    for (int p = 0; p < nrows; p++) {
        const int64_t oy = ty * nrows + p;
        if (oy >= g->OH) break;
        const float *src = orow + p * orw;
        float *dst = yo + oy * g->OW;
        if (g->relu) {
#pragma omp simd
            for (int64_t ox = 0; ox < g->OW; ox++) {
                const float v = src[ox] + b;
                dst[ox] = v < 0 ? 0 : v; /* (NaN stays NaN, as relu) */
            }
        } else {
#pragma omp simd
            for (int64_t ox = 0; ox < g->OW; ox++)
                dst[ox] = src[ox] + b;
        }
    }
}

/* Output channel o of tile row ty of image n <- M [36][O][ldm] columns col
 * .. col + ntx, plus bias b: per chunk of 16 tiles, A^T down the columns,
 * A^T along the rows, and the four results interleaved into the row. */
OARI_SIMD_CLONES static void output_row(const wgeom *g, const float *M, int64_t ldm, int64_t col,
                                        int64_t n, int64_t o, int64_t ty, float b, float *y,
                                        float *scratch) {
    float *orow = scratch; /* WT rows of nch * 64 columns */
    const int64_t orw = g->nch * WT * WVL;
    for (int64_t ch = 0; ch < g->nch; ch++) {
        /* all 16 lanes (past the row's last tile: other tiles or the
         * slack, never stored) */
        wvec m[WK];
        for (int k = 0; k < WK; k++)
            m[k] = vload(M + ((int64_t)k * g->O + o) * ldm + col + ch * WVL);
        wvec s[WT][WA]; /* s[p][j] = sum_i AT[p][i] m[i][j] */
        for (int j = 0; j < WA; j++) {
            wvec r[WT];
            WINO_AT(r, m[j], m[WA + j], m[2 * WA + j], m[3 * WA + j], m[4 * WA + j],
                    m[5 * WA + j]);
            for (int p = 0; p < WT; p++)
                s[p][j] = r[p];
        }
        for (int p = 0; p < WT; p++) {
            wvec q[WT]; /* q[q][t]: output column 4t + q */
            WINO_AT(q, s[p][0], s[p][1], s[p][2], s[p][3], s[p][4], s[p][5]);
            const wvec L01 = SHUF(q[0], q[1], 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
            const wvec H01 = SHUF(q[0], q[1], 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30,
                                  15, 31);
            const wvec L23 = SHUF(q[2], q[3], 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
            const wvec H23 = SHUF(q[2], q[3], 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30,
                                  15, 31);
            const wvec o0 = SHUF(L01, L23, 0, 1, 16, 17, 2, 3, 18, 19, 4, 5, 20, 21, 6, 7, 22, 23);
            const wvec o1 = SHUF(L01, L23, 8, 9, 24, 25, 10, 11, 26, 27, 12, 13, 28, 29, 14, 15, 30,
                                 31);
            const wvec o2 = SHUF(H01, H23, 0, 1, 16, 17, 2, 3, 18, 19, 4, 5, 20, 21, 6, 7, 22, 23);
            const wvec o3 = SHUF(H01, H23, 8, 9, 24, 25, 10, 11, 26, 27, 12, 13, 28, 29, 14, 15, 30,
                                 31);
            float *dst = orow + p * orw + ch * WT * WVL;
            memcpy(dst, &o0, sizeof o0);
            memcpy(dst + 16, &o1, sizeof o1);
            memcpy(dst + 32, &o2, sizeof o2);
            memcpy(dst + 48, &o3, sizeof o3);
        }
    }
    store_rows(g, orow, orw, WT, n, o, ty, b, y);
}

/* ---- F(2x2, 3x3): 4x4 input tiles, 16 gemms --------------------------------
 * For small planes with many channels (ResNet's 14x14 stage at batch 1),
 * where the 4x4 output tiles are too few to pay for F(4x4)'s 36 C O floats
 * of U: U here is 16 C O floats, for 4 multiply-adds per output instead of
 * 9 (F(4x4): 2.25). G [4x3], B^T [4x4], A^T [2x4]: */
#define WINO2_G(o, g0, g1, g2)                                                                     \
    do {                                                                                           \
        (o)[0] = (g0);                                                                             \
        (o)[1] = ((g0) + (g1) + (g2)) * 0.5f;                                                      \
        (o)[2] = ((g0) - (g1) + (g2)) * 0.5f;                                                      \
        (o)[3] = (g2);                                                                             \
    } while (0)
#define WINO2_BT(o, d0, d1, d2, d3)                                                                \
    do {                                                                                           \
        (o)[0] = (d0) - (d2);                                                                      \
        (o)[1] = (d1) + (d2);                                                                      \
        (o)[2] = (d2) - (d1);                                                                      \
        (o)[3] = (d1) - (d3);                                                                      \
    } while (0)
#define WINO2_AT(o, m0, m1, m2, m3)                                                                \
    do {                                                                                           \
        (o)[0] = (m0) + (m1) + (m2);                                                               \
        (o)[1] = (m1) - (m2) - (m3);                                                               \
    } while (0)

/* U [16][O][C] <- w [O][C][3][3], output channels [o0, o1). */
OARI_SIMD_CLONES static void filter_transform2(const float *w, int64_t C, int64_t O, int64_t o0,
                                               int64_t o1, float *U) {
    for (int64_t o = o0; o < o1; o++)
        for (int64_t c0 = 0; c0 < C; c0 += WVL) {
            const int64_t nl = C - c0 < WVL ? C - c0 : WVL;
            wvec g[9], t[4][3], u[4];
            for (int i = 0; i < 9; i++)
                for (int64_t l = 0; l < WVL; l++)
                    g[i][l] = l < nl ? w[(o * C + c0 + l) * 9 + i] : 0;
            for (int j = 0; j < 3; j++) {
                wvec col[4];
                WINO2_G(col, g[j], g[3 + j], g[6 + j]);
                for (int a = 0; a < 4; a++)
                    t[a][j] = col[a];
            }
            for (int a = 0; a < 4; a++) {
                WINO2_G(u, t[a][0], t[a][1], t[a][2]);
                for (int b = 0; b < 4; b++) {
                    float *dst = U + ((a * 4 + b) * O + o) * C + c0;
                    if (nl == WVL)
                        memcpy(dst, &u[b], sizeof u[b]);
                    else
                        for (int64_t l = 0; l < nl; l++)
                            dst[l] = u[b][l];
                }
            }
        }
}

/* As input_row, for 4x4 input tiles two columns apart. */
OARI_SIMD_CLONES static void input_row2(const wgeom *g, const float *x, int64_t n, int64_t c,
                                        int64_t ty, float *V, int64_t ldv, int64_t col,
                                        float *scratch) {
    const int64_t rw = row_width(g);
    float *rows = scratch, *cols = scratch + 4 * rw;
    bool zero[4];
    padded_rows(g, x + (n * g->C + c) * g->H * g->W, ty * 2 - g->ph, 4, rows, rw, zero);
    const wvec z = {0};
    for (int64_t xx = 0; xx < rw; xx += WVL) {
        wvec d[4], r[4];
        for (int i = 0; i < 4; i++)
            d[i] = zero[i] ? z : vload(rows + i * rw + xx);
        WINO2_BT(r, d[0], d[1], d[2], d[3]);
        for (int a = 0; a < 4; a++)
            memcpy(cols + a * rw + xx, &r[a], sizeof r[a]);
    }
    for (int a = 0; a < 4; a++)
        for (int64_t ch = 0; ch < g->nch; ch++) {
            const float *w = cols + a * rw + ch * 2 * WVL;
            const wvec A = vload(w), B = vload(w + 16), E = vload(w + 32);
            const wvec d0 = SHUF(A, B, 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
            const wvec d1 = SHUF(A, B, 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
            const wvec d2 = SHUF(d0, E, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16);
            const wvec d3 = SHUF(d1, E, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 17);
            wvec r[4];
            WINO2_BT(r, d0, d1, d2, d3);
            float *dst = V + ((int64_t)(a * 4) * g->C + c) * ldv + col + ch * WVL;
            for (int j = 0; j < 4; j++)
                memcpy(dst + (int64_t)j * g->C * ldv, &r[j], sizeof r[j]);
        }
}

/* As output_row, for 2x2 output tiles. */
OARI_SIMD_CLONES static void output_row2(const wgeom *g, const float *M, int64_t ldm, int64_t col,
                                         int64_t n, int64_t o, int64_t ty, float b, float *y,
                                         float *scratch) {
    float *orow = scratch; /* 2 rows of nch * 32 columns */
    const int64_t orw = g->nch * 2 * WVL;
    for (int64_t ch = 0; ch < g->nch; ch++) {
        wvec m[16];
        for (int k = 0; k < 16; k++)
            m[k] = vload(M + ((int64_t)k * g->O + o) * ldm + col + ch * WVL);
        wvec s[2][4];
        for (int j = 0; j < 4; j++) {
            wvec r[2];
            WINO2_AT(r, m[j], m[4 + j], m[8 + j], m[12 + j]);
            s[0][j] = r[0], s[1][j] = r[1];
        }
        for (int p = 0; p < 2; p++) {
            wvec q[2];
            WINO2_AT(q, s[p][0], s[p][1], s[p][2], s[p][3]);
            const wvec o0 = SHUF(q[0], q[1], 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
            const wvec o1 = SHUF(q[0], q[1], 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30,
                                 15, 31);
            float *dst = orow + p * orw + ch * 2 * WVL;
            memcpy(dst, &o0, sizeof o0);
            memcpy(dst + 16, &o1, sizeof o1);
        }
    }
    store_rows(g, orow, orw, 2, n, o, ty, b, y);
}

/* M[k] = U[k] V[k] for k in [k0, k1): tb tiles, rows ld apart. */
static void gemms(const wgeom *g, const float *U, const float *V, float *M, int64_t tb, int64_t ld,
                  int64_t k0, int64_t k1) {
    for (int64_t k = k0; k < k1; k++)
        oari_cpu_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)g->O, (int)tb, (int)g->C, 1,
                    U + k * g->O * g->C, (int)g->C, V + k * g->C * ld, (int)ld, 0,
                    M + k * g->O * ld, (int)ld);
}

static float bias_at(const oar_ktensor *bias, int64_t o) {
    return bias->dtype >= 0 ? *((const float *)bias->data + o * bias->strides[0]) : 0.0f;
}

/* The stages of a block of tile rows [r0, r1) (of all images) through V
 * and M (rows ld apart, ld = the block's tiles + WVL of slack): input
 * channels [c0, c1), output channels [o0, o1). */
static void stage_in(const wgeom *g, const float *x, float *V, int64_t ld, int64_t r0, int64_t r1,
                     int64_t c0, int64_t c1, float *sc) {
    for (int64_t c = c0; c < c1; c++)
        for (int64_t r = r0; r < r1; r++) /* in order: a row's spill lands on the next */
            (g->m == 4 ? input_row : input_row2)(g, x, r / g->nty, c, r % g->nty, V, ld,
                                                 (r - r0) * g->ntx, sc);
}

static void stage_out(const wgeom *g, const float *M, const oar_ktensor *bias, float *y,
                      int64_t ld, int64_t r0, int64_t r1, int64_t o0, int64_t o1, float *sc) {
    for (int64_t o = o0; o < o1; o++) {
        const float b = bias_at(bias, o);
        for (int64_t r = r0; r < r1; r++)
            (g->m == 4 ? output_row : output_row2)(g, M, ld, (r - r0) * g->ntx, r / g->nty, o,
                                                   r % g->nty, b, y, sc);
    }
}

/* The convolution, from the filters w or, when w is NULL, from their
 * transform Up (U's layout, m 4 only). */
static int wino_run(const float *x, const float *w, const float *Up, const oar_ktensor *bias, float *y,
                    int64_t N, int64_t C, int64_t H, int64_t W, int64_t O, int64_t OH, int64_t OW, int64_t ph,
                    int64_t pw, int m, bool relu) {
    const int64_t ntx = (OW + m - 1) / m, nk = (m + 2) * (m + 2);
    wgeom g = {N,   C,   H,  W,  O, OH, OW, ph, pw, (OH + m - 1) / m, ntx, (ntx + WVL - 1) / WVL,
               m, nk, relu};
    const int64_t rows = N * g.nty; /* tile rows in all */
    int64_t rb = WINO_BLOCK_BYTES / (int64_t)sizeof(float) / (nk * (C + O) * g.ntx);
    if (rb * g.ntx < WINO_BLOCK_MIN_TILES) rb = (WINO_BLOCK_MIN_TILES + g.ntx - 1) / g.ntx;
    if (rb < 1) rb = 1;
    if (rb > rows) rb = rows;
    const int64_t nblk = (rows + rb - 1) / rb;
    rb = (rows + nblk - 1) / nblk; /* blocks of equal size (the last may be shorter) */
    const int nt = nthreads();
    const bool par = nt > 1 && (double)N * (double)OH * (double)OW * (double)C * (double)O > 5e5;
    /* many blocks: threads take whole blocks; few: every block's stages are
     * split over the threads */
    const bool outer = par && nblk >= 4 * nt;
    const int nbuf = outer ? nt : 1, nscr = par ? nt : 1;
    const size_t un = w ? (size_t)(nk * O * C) : 0, vmn = (size_t)(nk * (C + O) * (rb * g.ntx + WVL));
    const size_t sn = (size_t)scratch_floats(&g);
    const size_t total = un + vmn * (size_t)nbuf + sn * (size_t)nscr;
    float *blk = oari_cpu_block_alloc(total * sizeof(float));
    if (!blk) return oari_fail_status();
    float *U = w ? blk : (float *)Up, *bufs = blk + un, *scr = bufs + vmn * (size_t)nbuf;
#pragma omp parallel if (par)
    {
        /* the filter transform: output channels split over the threads */
        if (w) {
#pragma omp for schedule(static)
            for (int64_t o = 0; o < O; o++)
                (m == 4 ? filter_transform : filter_transform2)(w, C, O, o, o + 1, U);
        }
        float *sc = scr + (size_t)(par ? tid() : 0) * sn;
        if (outer) { /* each thread its own V and M */
            float *V = bufs + (size_t)tid() * vmn;
#pragma omp for schedule(dynamic)
            for (int64_t bi = 0; bi < nblk; bi++) {
                const int64_t r0 = bi * rb, r1 = r0 + rb < rows ? r0 + rb : rows;
                const int64_t tb = (r1 - r0) * g.ntx, ld = tb + WVL;
                float *M = V + nk * C * ld;
                stage_in(&g, x, V, ld, r0, r1, 0, C, sc);
                gemms(&g, U, V, M, tb, ld, 0, nk);
                stage_out(&g, M, bias, y, ld, r0, r1, 0, O, sc);
            }
        } else { /* one V and M; each stage split over the threads */
            for (int64_t bi = 0; bi < nblk; bi++) {
                const int64_t r0 = bi * rb, r1 = r0 + rb < rows ? r0 + rb : rows;
                const int64_t tb = (r1 - r0) * g.ntx, ld = tb + WVL;
                float *V = bufs, *M = V + nk * C * ld;
#pragma omp for schedule(static)
                for (int64_t c = 0; c < C; c++)
                    stage_in(&g, x, V, ld, r0, r1, c, c + 1, sc);
                if (par) {
#pragma omp for schedule(static)
                    for (int64_t k = 0; k < nk; k++)
                        gemms(&g, U, V, M, tb, ld, k, k + 1);
                } else { /* (outside a parallel region, OpenBLAS may use its threads) */
                    gemms(&g, U, V, M, tb, ld, 0, nk);
                }
#pragma omp for schedule(static)
                for (int64_t o = 0; o < O; o++)
                    stage_out(&g, M, bias, y, ld, r0, r1, o, o + 1, sc);
            }
        }
    }
    oari_cpu_block_free(blk, total * sizeof(float));
    return 0;
}

int oari_cpu_conv2d_wino(const float *x, const float *w, const oar_ktensor *bias, float *y,
                         int64_t N, int64_t C, int64_t H, int64_t W, int64_t O, int64_t OH,
                         int64_t OW, int64_t ph, int64_t pw, int m) {
    return wino_run(x, w, NULL, bias, y, N, C, H, W, O, OH, OW, ph, pw, m, false);
}

void oari_cpu_wino_filter(const float *w, int64_t C, int64_t O, float *U) {
#pragma omp parallel for schedule(static) if (O * C >= 4096)
    for (int64_t o = 0; o < O; o++)
        filter_transform(w, C, O, o, o + 1, U);
}

int oari_cpu_conv2d_wino_packed(const float *x, const float *U, const oar_ktensor *bias, float *y, int64_t N,
                                int64_t C, int64_t H, int64_t W, int64_t O, int64_t OH, int64_t OW, int64_t ph,
                                int64_t pw, bool relu) {
    return wino_run(x, NULL, U, bias, y, N, C, H, W, O, OH, OW, ph, pw, 4, relu);
}

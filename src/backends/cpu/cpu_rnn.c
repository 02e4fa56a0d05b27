/* CPU kernels of the fused recurrent layers rnn_layer and lstm_layer
 * (src/ops/defs/rnn.def), and of lstm_layer_backward. One GEMM projects
 * the inputs of every step (x W_ih^T, biases folded in), then each step is
 * one GEMM for the recurrent projection (h W_hh^T) and one pass over the
 * gates that writes the new state and the output row: no tensor per gate,
 * no allocation per step. The backward runs the same way in reverse.
 * The state lives in the h_n (and c_n) outputs, updated in place. The f32
 * and f64 kernels come from one template: this file includes itself with
 * RNN_T defined (see the end of the file). */
#ifndef RNN_T
/* the gate loops vectorize only without errno and trapping semantics, as
 * cpu_unary.c's */
#pragma GCC optimize("no-trapping-math", "no-math-errno")
#include "cpu.h"
#include "cpu_vmath.h"

#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <string.h>

enum { CELL_TANH, CELL_RELU, CELL_GRU, CELL_LSTM };
static const char *const cell_names[] = {"tanh", "relu", "gru", "lstm"};

/* Which input holds what (c0 -1: none); as in src/ops/rnn.c. */
typedef struct rnn_io {
    int x, h0, c0, w_ih, w_hh, b_ih, b_hh, len;
} rnn_io;
static const rnn_io io_rnn = {0, 1, -1, 2, 3, 4, 5, 6};
static const rnn_io io_lstm = {0, 1, 2, 3, 4, 5, 6, 7};

/* A contiguous view of an input: its data when it is contiguous already,
 * else a copy in *buf (*nbytes to free). NULL for an absent input, or
 * with an error set on allocation failure (then *nbytes is non-zero). */
static const void *dense(const oar_ktensor *t, void **buf, size_t *nbytes) {
    *buf = NULL;
    *nbytes = 0;
    if (t->dtype < 0) return NULL;
    if (oari_kt_contiguous(t)) return t->data;
    int64_t n = oari_kt_numel(t);
    *nbytes = (size_t)(n ? n : 1) * oar_dtype_size((oar_dtype)t->dtype);
    if (!(*buf = oari_malloc(*nbytes))) return NULL;
    oar_ktensor c = *t;
    c.data = *buf;
    oari_contiguous_strides(t->ndim, t->shape, c.strides);
    oari_copy_strided(&c, t);
    return *buf;
}

/* lengths (L, int64 [B], or absent: dtype < 0) read into *len (NULL when
 * absent; *nbytes to free), each checked to lie in [0, Ts] before anything
 * is written. */
static int read_lengths(const oar_ktensor *L, int64_t B, int64_t Ts, const char *op, int cell,
                        int64_t **len, size_t *nbytes) {
    *len = NULL;
    *nbytes = 0;
    if (L->dtype < 0) return 0;
    *nbytes = (size_t)(B ? B : 1) * sizeof **len;
    if (!(*len = oari_malloc(*nbytes))) return oari_fail_status();
    for (int64_t b = 0; b < B; b++) {
        int64_t v = (*len)[b] = ((const int64_t *)L->data)[b * L->strides[0]];
        if (v < 0 || v > Ts) {
            oari_free(*len, *nbytes);
            *len = NULL;
            return oari_error(OAR_ERR_INVALID,
                              "%s (%s): lengths[%lld] = %lld is outside [0, seq_len = %lld]", op,
                              cell_names[cell], (long long)b, (long long)v, (long long)Ts);
        }
    }
    return 0;
}

/* Products below 2^23 multiply-adds run on one thread: OpenBLAS's OpenMP
 * build threads every product, and a step's small one (B x G*H x H) costs
 * more on two threads than on one (see gemm in cpu_linalg.c). */
static bool gemm_single(int64_t n, int64_t m, int64_t k, bool f32) {
    if (f32 && oari_cpu_sgemm_onednn(n, m, k)) return false; /* oneDNN's threads pay at every size */
    return omp_get_max_threads() > 1 && !omp_in_parallel() && n * m * k < ((int64_t)1 << 23);
}

#define RNN_T float
#define RNN_SFX f32
#define RNN_GEMM oari_cpu_sgemm
#define RNN_EXP oari_vexpf /* call-free: the gate loops vectorize (libm's tanhf was */
#define RNN_TANH oari_vtanhf /* half of the f32 forward) */
#include "cpu_rnn.c"
#undef RNN_T
#undef RNN_SFX
#undef RNN_GEMM
#undef RNN_EXP
#undef RNN_TANH

#define RNN_T double
#define RNN_SFX f64
#define RNN_GEMM oari_cpu_dgemm
#define RNN_EXP exp
#define RNN_TANH tanh
#include "cpu_rnn.c"
#undef RNN_T
#undef RNN_SFX
#undef RNN_GEMM
#undef RNN_EXP
#undef RNN_TANH

static int k_rnn_layer(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    int cell = c->n_iattr > 0 ? (int)c->iattr[0] : -1;
    bool reverse = c->n_iattr > 1 && c->iattr[1];
    if (cell < CELL_TANH || cell > CELL_GRU)
        return oari_error(OAR_ERR_INVALID, "rnn_layer: cell %d is not 0 tanh, 1 relu or 2 gru",
                          cell);
    return c->out[0].dtype == OAR_F64 ? layer_f64(c, &io_rnn, cell, reverse)
                                      : layer_f32(c, &io_rnn, cell, reverse);
}

static int k_lstm_layer(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    bool reverse = c->n_iattr > 0 && c->iattr[0];
    return c->out[0].dtype == OAR_F64 ? layer_f64(c, &io_lstm, CELL_LSTM, reverse)
                                      : layer_f32(c, &io_lstm, CELL_LSTM, reverse);
}

static int k_lstm_layer_backward(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    bool reverse = c->n_iattr > 0 && c->iattr[0];
    return c->out[0].dtype == OAR_F64 ? lstm_backward_f64(c, reverse) : lstm_backward_f32(c, reverse);
}

const oari_cpu_kernels oari_cpu_k_rnn_layer = {[OAR_F32] = k_rnn_layer, [OAR_F64] = k_rnn_layer};
const oari_cpu_kernels oari_cpu_k_gru_layer_train = {[OAR_F32] = k_rnn_layer, [OAR_F64] = k_rnn_layer};
const oari_cpu_kernels oari_cpu_k_lstm_layer = {[OAR_F32] = k_lstm_layer,
                                                [OAR_F64] = k_lstm_layer};
const oari_cpu_kernels oari_cpu_k_lstm_layer_train = {[OAR_F32] = k_lstm_layer,
                                                      [OAR_F64] = k_lstm_layer};
const oari_cpu_kernels oari_cpu_k_lstm_layer_backward = {[OAR_F32] = k_lstm_layer_backward,
                                                         [OAR_F64] = k_lstm_layer_backward};

#else /* ---- the template: RNN_T, RNN_SFX, RNN_GEMM, RNN_EXP, RNN_TANH --------------- */

#define CAT2(a, b) a##_##b
#define CAT(a, b) CAT2(a, b)
#define FN(name) CAT(name, RNN_SFX)
typedef RNN_T FN(real);
#define T FN(real)

/* C [n, m] (ld m) = A [n, k] (ld k) B^T (B [m, k], ld k) + beta C; with
 * tb false, A B (B [k, m], ld m). */
static void FN(gemm)(bool tb, int64_t n, int64_t m, int64_t k, const T *a, const T *b, T beta,
                     T *c) {
    oari_lib_icv icv = oari_lib_enter(gemm_single(n, m, k, sizeof(T) == sizeof(float)) ? 1 : 0);
    RNN_GEMM(CblasRowMajor, CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (blasint)n, (blasint)m,
             (blasint)k, 1, a, (blasint)(k > 0 ? k : 1), b,
             (blasint)(tb ? (k > 0 ? k : 1) : (m > 0 ? m : 1)), beta, c, (blasint)(m > 0 ? m : 1));
    oari_lib_leave(icv);
}

static inline T FN(sigmoid)(T v) { return 1 / (1 + RNN_EXP(-v)); }

/* Unit j's LSTM gates i, f, g, o from the two projections (4H each). */
static inline __attribute__((always_inline)) void FN(lstm_gates)(int64_t H, int64_t j,
                                                                 const T *restrict xg,
                                                                 const T *restrict hg, T *i, T *f,
                                                                 T *g, T *o) {
    *i = FN(sigmoid)(xg[j] + hg[j]);
    *f = FN(sigmoid)(xg[H + j] + hg[H + j]);
    *g = RNN_TANH(xg[2 * H + j] + hg[2 * H + j]);
    *o = FN(sigmoid)(xg[3 * H + j] + hg[3 * H + j]);
}

/* One step's gate pass for sequence b: xg (the input projection with the
 * biases folded in, G*H), hg (h W_hh^T, G*H), bn (GRU: b_hn or NULL), h
 * and c the state (updated in place), y the output row. */
OARI_SIMD_CLONES static void FN(cell_step)(int cell, int64_t H, const T *restrict xg,
                                           const T *restrict hg, const T *restrict bn,
                                           T *restrict h, T *restrict c, T *restrict y) {
    switch (cell) {
    case CELL_TANH:
        _Pragma("omp simd")
        for (int64_t j = 0; j < H; j++) y[j] = h[j] = RNN_TANH(xg[j] + hg[j]);
        break;
    case CELL_RELU:
        _Pragma("omp simd")
        for (int64_t j = 0; j < H; j++) {
            T a = xg[j] + hg[j];
            y[j] = h[j] = a > 0 ? a : 0;
        }
        break;
    case CELL_GRU:
        _Pragma("omp simd")
        for (int64_t j = 0; j < H; j++) {
            T r = FN(sigmoid)(xg[j] + hg[j]);
            T z = FN(sigmoid)(xg[H + j] + hg[H + j]);
            T n = RNN_TANH(xg[2 * H + j] + r * (hg[2 * H + j] + bn[j]));
            y[j] = h[j] = n + z * (h[j] - n);
        }
        break;
    default: /* LSTM, gates i, f, g, o */
        _Pragma("omp simd")
        for (int64_t j = 0; j < H; j++) {
            T i, f, g, o;
            FN(lstm_gates)(H, j, xg, hg, &i, &f, &g, &o);
            c[j] = f * c[j] + i * g;
            y[j] = h[j] = o * RNN_TANH(c[j]);
        }
        break;
    }
}

/* cell_step's LSTM case for lstm_layer_train: also writes the gates i, f,
 * g, o and the new cell state into the step's reserve row rs (5H). */
OARI_SIMD_CLONES static void FN(lstm_step_save)(int64_t H, const T *restrict xg,
                                                const T *restrict hg, T *restrict h,
                                                T *restrict c, T *restrict y, T *restrict rs) {
    _Pragma("omp simd")
    for (int64_t j = 0; j < H; j++) {
        T i, f, g, o;
        FN(lstm_gates)(H, j, xg, hg, &i, &f, &g, &o);
        T cn = f * c[j] + i * g;
        rs[j] = i;
        rs[H + j] = f;
        rs[2 * H + j] = g;
        rs[3 * H + j] = o;
        rs[4 * H + j] = c[j] = cn;
        y[j] = h[j] = o * RNN_TANH(cn);
    }
}

/* cell_step's GRU case for gru_layer_train: also writes r, z, n and hn =
 * W_hn h + b_hn into the step's reserve row rs (4H). */
OARI_SIMD_CLONES static void FN(gru_step_save)(int64_t H, const T *restrict xg, const T *restrict hg,
                                               const T *restrict bn, T *restrict h, T *restrict y,
                                               T *restrict rs) {
    _Pragma("omp simd")
    for (int64_t j = 0; j < H; j++) {
        T r = FN(sigmoid)(xg[j] + hg[j]);
        T z = FN(sigmoid)(xg[H + j] + hg[H + j]);
        T hn = hg[2 * H + j] + bn[j];
        T n = RNN_TANH(xg[2 * H + j] + r * hn);
        rs[j] = r;
        rs[H + j] = z;
        rs[2 * H + j] = n;
        rs[3 * H + j] = hn;
        y[j] = h[j] = n + z * (h[j] - n);
    }
}

/* The step backward for sequence b: rs the step's reserve row (gates i,
 * f, g, o, cell state c), cp the cell state before the step; da gets the
 * gradients of the gate pre-activations; gy the output's gradient (or
 * NULL); dh, dc the carries, dc updated (dh is the caller's GEMM). */
OARI_SIMD_CLONES static void FN(lstm_step_backward)(int64_t H, const T *restrict rs,
                                                    const T *restrict cp, const T *restrict gy,
                                                    const T *restrict dh, T *restrict dc,
                                                    T *restrict da) {
    _Pragma("omp simd")
    for (int64_t j = 0; j < H; j++) {
        const T i = rs[j], f = rs[H + j], g = rs[2 * H + j], o = rs[3 * H + j];
        const T dht = dh[j] + (gy ? gy[j] : 0), tc = RNN_TANH(rs[4 * H + j]);
        const T dct = dc[j] + dht * o * (1 - tc * tc);
        da[j] = dct * g * i * (1 - i);
        da[H + j] = dct * cp[j] * f * (1 - f);
        da[2 * H + j] = dct * i * (1 - g * g);
        da[3 * H + j] = dht * tc * o * (1 - o);
        dc[j] = dct * f;
    }
}

/* rnn_layer, gru_layer_train (its reserve: out[2]), lstm_layer and
 * lstm_layer_train (its reserve: out[3]). */
static int FN(layer)(const oar_kernel_call *call, const rnn_io *io, int cell, bool reverse) {
    const char *op = cell == CELL_LSTM ? "lstm_layer" : "rnn_layer";
    const oar_ktensor *X = &call->in[io->x], *L = &call->in[io->len];
    const int64_t Ts = X->shape[0], B = X->shape[1], In = X->shape[2],
                  H = call->in[io->w_hh].shape[1], G = cell == CELL_LSTM ? 4 : cell == CELL_GRU ? 3 : 1,
                  GH = G * H;
    T *y = call->out[0].data, *h = call->out[1].data, *c = cell == CELL_LSTM ? call->out[2].data : NULL,
      *rs = call->n_out > (cell == CELL_LSTM ? 3 : 2) ? call->out[call->n_out - 1].data : NULL;
    const int64_t RW = cell == CELL_LSTM ? 5 * H : 4 * H; /* a reserve row */
    if (Ts * B > INT_MAX || GH > INT_MAX || In > INT_MAX)
        return oari_error(OAR_ERR_UNSUPPORTED, "%s: a dim exceeds the BLAS integer range", op);
    int64_t *len;
    size_t len_n;
    if (read_lengths(L, B, Ts, op, cell, &len, &len_n)) return oari_fail_status();
    enum { NX, NH0, NC0, NWI, NWH, NBI, NBH, NDENSE };
    const int slots[NDENSE] = {io->x, io->h0, io->c0, io->w_ih, io->w_hh, io->b_ih, io->b_hh};
    const T *d[NDENSE] = {0};
    void *bufs[NDENSE] = {0};
    size_t sizes[NDENSE] = {0};
    int st = 0;
    for (int k = 0; k < NDENSE && !st; k++) {
        if (slots[k] < 0) continue;
        d[k] = dense(&call->in[slots[k]], &bufs[k], &sizes[k]);
        if (!d[k] && sizes[k]) st = oari_fail_status();
    }
    const int64_t xw_el = Ts * B * GH, hw_el = B * GH;
    size_t xw_n = (size_t)(xw_el > 0 ? xw_el : 1) * sizeof(T),
           hw_n = (size_t)(hw_el > 0 ? hw_el : 1) * sizeof(T);
    T *xw = st ? NULL : oari_malloc(xw_n), *hw = xw ? oari_malloc(hw_n) : NULL;
    if (!st && !hw) st = oari_fail_status();
    if (!st) {
        memcpy(h, d[NH0], (size_t)(B * H) * sizeof(T));
        if (c) memcpy(c, d[NC0], (size_t)(B * H) * sizeof(T));
        /* the input projection of every step, with b_ih and the part of
         * b_hh outside GRU's r * (W_hn h + b_hn) folded in */
        if (In > 0) FN(gemm)(true, Ts * B, GH, In, d[NX], d[NWI], 0, xw);
        else memset(xw, 0, xw_n);
        const T *bi = d[NBI], *bh = d[NBH];
        int64_t fold = cell == CELL_GRU ? 2 * H : GH;
        OARI_PARALLEL_FOR_IF(Ts * B * GH >= OARI_PARALLEL_GRAIN && (bi || bh),
            for (int64_t r = 0; r < Ts * B; r++) {
                T *row = xw + r * GH;
                if (bi) for (int64_t j = 0; j < GH; j++) row[j] += bi[j];
                if (bh) for (int64_t j = 0; j < fold; j++) row[j] += bh[j];
            });
        /* GRU's b_hn (a zero row without b_hh) */
        T *zeros = NULL;
        size_t zeros_n = 0;
        if (cell == CELL_GRU && !bh) {
            zeros_n = (size_t)(H > 0 ? H : 1) * sizeof(T);
            if (!(zeros = oari_calloc(1, zeros_n))) st = oari_fail_status();
        }
        const T *bn = cell == CELL_GRU ? (bh ? bh + 2 * H : zeros) : NULL;
        /* the gate pass is a few transcendentals per element: threads pay
         * from a few thousand of them */
        bool par = B > 1 && B * GH >= 8192;
        for (int64_t s = 0; s < Ts && !st; s++) {
            int64_t t = reverse ? Ts - 1 - s : s;
            FN(gemm)(true, B, GH, H, h, d[NWH], 0, hw);
            OARI_PARALLEL_FOR_IF(par,
                for (int64_t b = 0; b < B; b++) {
                    T *yr = y + (t * B + b) * H, *rr = rs ? rs + (t * B + b) * RW : NULL;
                    if (len && t >= len[b]) {
                        memset(yr, 0, (size_t)H * sizeof(T));
                        if (rr) { /* no gates (zeros, which the gradient rule reads); LSTM: c held */
                            memset(rr, 0, (size_t)(4 * H) * sizeof(T));
                            if (c) memcpy(rr + 4 * H, c + b * H, (size_t)H * sizeof(T));
                        }
                        continue;
                    }
                    if (rr && c)
                        FN(lstm_step_save)(H, xw + (t * B + b) * GH, hw + b * GH, h + b * H,
                                           c + b * H, yr, rr);
                    else if (rr)
                        FN(gru_step_save)(H, xw + (t * B + b) * GH, hw + b * GH, bn, h + b * H, yr, rr);
                    else
                        FN(cell_step)(cell, H, xw + (t * B + b) * GH, hw + b * GH, bn, h + b * H,
                                      c ? c + b * H : NULL, yr);
                });
        }
        oari_free(zeros, zeros_n);
    }
    oari_free(xw, xw_n);
    oari_free(hw, hw_n);
    for (int k = 0; k < NDENSE; k++) oari_free(bufs[k], sizes[k]);
    oari_free(len, len_n);
    return st;
}

/* lstm_layer_backward (src/ops/defs/rnn.def) over lstm_layer_train's
 * reserve: the steps backward, each one pass over the gates and one GEMM
 * for the carried dh. The weight and input gradients are the caller's
 * GEMMs over dA. */
static int FN(lstm_backward)(const oar_kernel_call *call, bool reverse) {
    enum { C0, WHH, RES, LEN, GY, DH, DC, N_IN };
    const oar_ktensor *R = &call->in[RES];
    const int64_t Ts = R->shape[0], B = R->shape[1], H = call->in[WHH].shape[1], GH = 4 * H,
                  BH = B * H;
    T *dA = call->out[0].data, *dh = call->out[1].data, *dc = call->out[2].data;
    if (B > INT_MAX || GH > INT_MAX)
        return oari_error(OAR_ERR_UNSUPPORTED, "lstm_layer_backward: a dim exceeds the BLAS "
                          "integer range");
    int64_t *len;
    size_t len_n;
    if (read_lengths(&call->in[LEN], B, Ts, "lstm_layer_backward", CELL_LSTM, &len, &len_n))
        return oari_fail_status();
    const T *d[N_IN] = {0};
    void *bufs[N_IN] = {0};
    size_t sizes[N_IN] = {0};
    int st = 0;
    for (int k = 0; k < N_IN && !st; k++) {
        if (k == LEN) continue;
        d[k] = dense(&call->in[k], &bufs[k], &sizes[k]);
        if (!d[k] && sizes[k]) st = oari_fail_status();
    }
    size_t dn_n = (size_t)(BH > 0 ? BH : 1) * sizeof(T);
    T *dn = st || !len ? NULL : oari_malloc(dn_n); /* with lengths: dh before the held rows return */
    if (!st && len && !dn) st = oari_fail_status();
    if (!st) {
        if (d[DH]) memcpy(dh, d[DH], (size_t)BH * sizeof(T));
        else memset(dh, 0, (size_t)BH * sizeof(T));
        if (d[DC]) memcpy(dc, d[DC], (size_t)BH * sizeof(T));
        else memset(dc, 0, (size_t)BH * sizeof(T));
    }
    const bool par = B > 1 && B * GH >= 8192; /* as the forward's gate pass */
    for (int64_t s = Ts - 1; s >= 0 && !st; s--) {
        const int64_t t = reverse ? Ts - 1 - s : s, tp = reverse ? t + 1 : t - 1;
        const T *gy = d[GY] ? d[GY] + t * BH : NULL;
        OARI_PARALLEL_FOR_IF(par,
            for (int64_t b = 0; b < B; b++) {
                T *da = dA + (t * B + b) * GH;
                if (len && t >= len[b]) {
                    memset(da, 0, (size_t)GH * sizeof(T));
                    continue;
                }
                const T *cp = s == 0 ? d[C0] + b * H : d[RES] + (tp * B + b) * 5 * H + 4 * H;
                FN(lstm_step_backward)(H, d[RES] + (t * B + b) * 5 * H, cp,
                                       gy ? gy + b * H : NULL, dh + b * H, dc + b * H, da);
            });
        /* dh = dA_t W_hh, held past a length */
        FN(gemm)(false, B, H, GH, dA + t * B * GH, d[WHH], 0, len ? dn : dh);
        for (int64_t b = 0; len && b < B; b++)
            if (t < len[b]) memcpy(dh + b * H, dn + b * H, (size_t)H * sizeof(T));
    }
    if (dn) oari_free(dn, dn_n);
    for (int k = 0; k < N_IN; k++) oari_free(bufs[k], sizes[k]);
    oari_free(len, len_n);
    return st;
}

#undef T
#undef FN
#undef CAT
#undef CAT2
#endif

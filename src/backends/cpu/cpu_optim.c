/* CPU kernels of the fused optimizer updates (src/ops/defs/optim.def):
 * adam_update in one pass over p, g, m and v, f32 and f64 (f16/bf16
 * parameters run here in f32 between casts). Per element the arithmetic is
 * the composite update's (src/optim/optim.c), in the same order and the
 * parameter's precision, so the two give the same bits. Runs over the
 * strided iterator (outputs p', m', v' then inputs p, g, m, v), OpenMP
 * above its grain. */
#include "cpu.h"

#include <math.h>

/* sqrt as an instruction (no errno), selects in vector loops: the values
 * are the same (see cpu_binary.c). No a*b+c fused into one rounding: the
 * composite's ops round each product, and ZeRO's sharded update (this op
 * on plain shards) must match data parallel's (the composite on dtensors)
 * bit for bit. */
#pragma GCC optimize("no-trapping-math", "no-math-errno", "fp-contract=off")

/* The scalars of a call, in the parameter's precision. mode: 0 no weight
 * decay, 1 L2 (g += wd p), 2 decoupled (p += -lr wd p, AdamW). */
#define ADAM_CONSTS(T)                                                                             \
    typedef struct {                                                                               \
        T c1, c2, wd, dec, sbc2, eps, step;                                                        \
        int mode;                                                                                  \
    } adam_k_##T

ADAM_CONSTS(float);
ADAM_CONSTS(double);

/* One element: the composite's expressions, operation for operation. */
#define ADAM_ONE(T, K, MODE, P, G, M, V, OP, OM, OV)                                               \
    do {                                                                                           \
        T p_ = (P), g_ = (G), m_ = (M), v_ = (V);                                                  \
        if ((MODE) == 2)                                                                           \
            p_ = p_ + (K)->dec * p_;                                                               \
        else if ((MODE) == 1)                                                                      \
            g_ = g_ + p_ * (K)->wd;                                                                \
        m_ = m_ + (K)->c1 * (g_ - m_);                                                             \
        v_ = v_ + (K)->c2 * (g_ * g_ - v_);                                                        \
        OM = m_;                                                                                   \
        OV = v_;                                                                                   \
        OP = p_ + (K)->step * (m_ / (SQRT(v_) / (K)->sbc2 + (K)->eps));                            \
    } while (0)

#define ADAM_KERNEL(T, SFX)                                                                        \
    /* contiguous runs, one loop per mode so that each vectorizes */                               \
    OARI_SIMD_CLONES static void adam_run_##SFX(                                                   \
        T *restrict op, T *restrict om, T *restrict ov, const T *restrict p, const T *restrict g,  \
        const T *restrict m, const T *restrict v, int64_t n, const adam_k_##T *k) {                \
        switch (k->mode) {                                                                         \
        case 0:                                                                                    \
            _Pragma("omp simd") for (int64_t i = 0; i < n; i++)                                    \
                ADAM_ONE(T, k, 0, p[i], g[i], m[i], v[i], op[i], om[i], ov[i]);                    \
            break;                                                                                 \
        case 1:                                                                                    \
            _Pragma("omp simd") for (int64_t i = 0; i < n; i++)                                    \
                ADAM_ONE(T, k, 1, p[i], g[i], m[i], v[i], op[i], om[i], ov[i]);                    \
            break;                                                                                 \
        default:                                                                                   \
            _Pragma("omp simd") for (int64_t i = 0; i < n; i++)                                    \
                ADAM_ONE(T, k, 2, p[i], g[i], m[i], v[i], op[i], om[i], ov[i]);                    \
        }                                                                                          \
    }                                                                                              \
    static void adam_inner_##SFX(char **ptr, const int64_t *s, int64_t n, void *ctx) {             \
        const adam_k_##T *k = ctx;                                                                 \
        bool unit = true;                                                                          \
        for (int j = 0; j < 7; j++)                                                                \
            unit = unit && s[j] == 1;                                                              \
        if (unit) {                                                                                \
            adam_run_##SFX((T *)ptr[0], (T *)ptr[1], (T *)ptr[2], (const T *)ptr[3],               \
                           (const T *)ptr[4], (const T *)ptr[5], (const T *)ptr[6], n, k);         \
            return;                                                                                \
        }                                                                                          \
        T *op = (T *)ptr[0], *om = (T *)ptr[1], *ov = (T *)ptr[2];                                 \
        const T *p = (const T *)ptr[3], *g = (const T *)ptr[4], *m = (const T *)ptr[5];            \
        const T *v = (const T *)ptr[6];                                                            \
        for (int64_t i = 0; i < n; i++)                                                            \
            ADAM_ONE(T, k, k->mode, p[i * s[3]], g[i * s[4]], m[i * s[5]], v[i * s[6]],            \
                     op[i * s[0]], om[i * s[1]], ov[i * s[2]]);                                    \
    }                                                                                              \
    static int k_adam_update_##SFX(void *ctx, const oar_kernel_call *c) {                          \
        (void)ctx;                                                                                 \
        const double *f = c->fattr, lr = f[0], wd = f[4];                                          \
        adam_k_##T k = {.c1 = (T)(1 - f[1]),                                                       \
                        .c2 = (T)(1 - f[2]),                                                       \
                        .wd = (T)wd,                                                               \
                        .dec = (T)(-lr * wd),                                                      \
                        .sbc2 = (T)sqrt(f[6]),                                                     \
                        .eps = (T)f[3],                                                            \
                        .step = (T)(-lr / f[5]),                                                   \
                        .mode = wd == 0       ? 0                                                  \
                                : c->iattr[0] ? 2                                                  \
                                              : 1};                                                \
        const oar_ktensor *ops[7] = {&c->out[0], &c->out[1], &c->out[2], &c->in[0],                \
                                     &c->in[1],  &c->in[2],  &c->in[3]};                           \
        oari_iter it;                                                                              \
        oari_iter_init(&it, 7, ops);                                                               \
        oari_iter_run(&it, adam_inner_##SFX, &k);                                                  \
        return 0;                                                                                  \
    }

#define SQRT(x) _Generic((x), float : sqrtf, default : sqrt)(x)
ADAM_KERNEL(float, f32)
ADAM_KERNEL(double, f64)
#undef SQRT

const oari_cpu_kernels oari_cpu_k_adam_update = {
    [OAR_F32] = k_adam_update_f32, [OAR_F64] = k_adam_update_f64};

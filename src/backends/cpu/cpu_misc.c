/* CPU kernels for fill, copy, cast and contiguous: one conversion loop per
 * (source, destination) dtype pair. */
#include "cpu.h"

#include <math.h>
#include <string.h>

/* Element loads/stores through a common type: complex for complex pairs,
 * double otherwise (exact for every dtype but i64 beyond 2^53; i64 -> i64
 * copies take the memcpy path). */
#define LD_b8(p) ((double)(*(const uint8_t *)(p) != 0))
#define LD_u8(p) ((double)*(const uint8_t *)(p))
#define LD_i8(p) ((double)*(const int8_t *)(p))
#define LD_i32(p) ((double)*(const int32_t *)(p))
#define LD_i64(p) ((double)*(const int64_t *)(p))
#define LD_f16(p) ((double)oari_ld_f16(p))
#define LD_bf16(p) ((double)oari_ld_bf16(p))
#define LD_f32(p) ((double)*(const float *)(p))
#define LD_f64(p) (*(const double *)(p))
#define LD_c64(p) ((double)crealf(*(const c64_t *)(p)))
#define LD_c128(p) (creal(*(const c128_t *)(p)))

#define LDC_b8(p) ((c128_t)LD_b8(p))
#define LDC_u8(p) ((c128_t)LD_u8(p))
#define LDC_i8(p) ((c128_t)LD_i8(p))
#define LDC_i32(p) ((c128_t)LD_i32(p))
#define LDC_i64(p) ((c128_t)LD_i64(p))
#define LDC_f16(p) ((c128_t)LD_f16(p))
#define LDC_bf16(p) ((c128_t)LD_bf16(p))
#define LDC_f32(p) ((c128_t)LD_f32(p))
#define LDC_f64(p) ((c128_t)LD_f64(p))
#define LDC_c64(p) ((c128_t)*(const c64_t *)(p))
#define LDC_c128(p) (*(const c128_t *)(p))

static inline int64_t sat_i64(double v) {
    if (v != v) return 0;
    if (v >= 9.2233720368547758e18) return INT64_MAX;
    if (v <= -9.2233720368547758e18) return INT64_MIN;
    return (int64_t)v;
}

#define ST_b8(p, v) (*(uint8_t *)(p) = (v) != 0)
#define ST_u8(p, v) (*(uint8_t *)(p) = (uint8_t)(sat_i64(v) & 0xff))
#define ST_i8(p, v) (*(int8_t *)(p) = oari_f64_to_i8(v)) /* PyTorch's x86 conversion */
#define ST_i32(p, v) (*(int32_t *)(p) = (int32_t)(uint32_t)(uint64_t)sat_i64(v))
#define ST_i64(p, v) (*(int64_t *)(p) = sat_i64(v))
#define ST_f16(p, v) (*(uint16_t *)(p) = oari_f32_to_f16((float)(v)))
#define ST_bf16(p, v) (*(uint16_t *)(p) = oari_f32_to_bf16((float)(v)))
#define ST_f32(p, v) (*(float *)(p) = (float)(v))
#define ST_f64(p, v) (*(double *)(p) = (v))
#define ST_c64(p, v) (*(c64_t *)(p) = (c64_t)(v))
#define ST_c128(p, v) (*(c128_t *)(p) = (c128_t)(v))

/* Complex -> real keeps the real part (PyTorch warns; we follow NumPy).
 * Complex and bool destinations load through c128, so that complex -> bool
 * is z != 0 (either part nonzero), as PyTorch and NumPy. */
#define VIA_CPLX_b8 1
#define VIA_CPLX_u8 0
#define VIA_CPLX_i8 0
#define VIA_CPLX_i32 0
#define VIA_CPLX_i64 0
#define VIA_CPLX_f16 0
#define VIA_CPLX_bf16 0
#define VIA_CPLX_f32 0
#define VIA_CPLX_f64 0
#define VIA_CPLX_c64 1
#define VIA_CPLX_c128 1

/* i64 -> 8-bit integers wrap modulo 256 exactly, without the trip through
 * double (which rounds beyond 2^53). */
#define WRAP8_u8 1
#define WRAP8_i8 1
#define WRAP8_b8 0
#define WRAP8_i32 0
#define WRAP8_i64 0
#define WRAP8_f16 0
#define WRAP8_bf16 0
#define WRAP8_f32 0
#define WRAP8_f64 0
#define WRAP8_c64 0
#define WRAP8_c128 0
#define IS_I64_i64 1
#define IS_I64_b8 0
#define IS_I64_u8 0
#define IS_I64_i8 0
#define IS_I64_i32 0
#define IS_I64_f16 0
#define IS_I64_bf16 0
#define IS_I64_f32 0
#define IS_I64_f64 0
#define IS_I64_c64 0
#define IS_I64_c128 0

#define CONVERT(D, S)                                                                        \
    static void conv_##S##_to_##D(char **p, const int64_t *s, int64_t n, void *ctx) {        \
        (void)ctx;                                                                           \
        const int64_t so = s[0] * (int64_t)sizeof(D##_ct), si = s[1] * (int64_t)sizeof(S##_ct); \
        char *o = p[0];                                                                      \
        const char *a = p[1];                                                                \
        for (int64_t i = 0; i < n; i++, o += so, a += si) {                                  \
            if (WRAP8_##D && IS_I64_##S) *(D##_ct *)o = (D##_ct)(uint8_t)(*(const uint64_t *)a & 0xffu); \
            else if (VIA_CPLX_##D) ST_##D(o, LDC_##S(a));                                     \
            else ST_##D(o, LD_##S(a));                                                       \
        }                                                                                    \
    }

typedef uint8_t b8_ct;
typedef uint8_t u8_ct;
typedef int8_t i8_ct;
typedef int32_t i32_ct;
typedef int64_t i64_ct;
typedef uint16_t f16_ct;
typedef uint16_t bf16_ct;
typedef float f32_ct;
typedef double f64_ct;
typedef c64_t c64_ct;
typedef c128_t c128_ct;

#define FOR_DTYPES(X, D) X(D, b8) X(D, u8) X(D, i32) X(D, i64) X(D, f16) X(D, bf16) \
    X(D, f32) X(D, f64) X(D, c64) X(D, c128) X(D, i8)
#define ALL_CONVERSIONS(X) FOR_DTYPES(X, b8) FOR_DTYPES(X, u8) FOR_DTYPES(X, i32) \
    FOR_DTYPES(X, i64) FOR_DTYPES(X, f16) FOR_DTYPES(X, bf16) FOR_DTYPES(X, f32) \
    FOR_DTYPES(X, f64) FOR_DTYPES(X, c64) FOR_DTYPES(X, c128) FOR_DTYPES(X, i8)

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wfloat-conversion"
ALL_CONVERSIONS(CONVERT)
#pragma GCC diagnostic pop

/* f32 <-> bf16, the casts autocast puts around every bf16 product: the
 * generic loop goes through double and a branch per element; these are
 * the same rounding (to nearest even, NaN kept quiet) written as selects
 * over contiguous runs, `omp simd` loops (-O2 leaves plain loops scalar). Strided
 * runs take the generic loop. */
OARI_SIMD_CLONES static void f32_to_bf16_run(uint16_t *restrict o, const float *restrict a, int64_t n) {
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &a[i], sizeof u);
        uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
        uint32_t quiet = (u >> 16) | 0x40u;
        o[i] = (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
    }
}

OARI_SIMD_CLONES static void bf16_to_f32_run(float *restrict o, const uint16_t *restrict a, int64_t n) {
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)a[i] << 16;
        memcpy(&o[i], &u, sizeof u);
    }
}

static void conv_f32_to_bf16_fast(char **p, const int64_t *s, int64_t n, void *ctx) {
    if (s[0] == 1 && s[1] == 1) f32_to_bf16_run((uint16_t *)p[0], (const float *)p[1], n);
    else conv_f32_to_bf16(p, s, n, ctx);
}

static void conv_bf16_to_f32_fast(char **p, const int64_t *s, int64_t n, void *ctx) {
    if (s[0] == 1 && s[1] == 1) bf16_to_f32_run((float *)p[0], (const uint16_t *)p[1], n);
    else conv_bf16_to_f32(p, s, n, ctx);
}

#define ENTRY(D, S) conv_##S##_to_##D,
static const oari_inner_fn conversions[OAR_DTYPE_COUNT][OAR_DTYPE_COUNT] = {
    {FOR_DTYPES(ENTRY, b8)}, {FOR_DTYPES(ENTRY, u8)}, {FOR_DTYPES(ENTRY, i32)},
    {FOR_DTYPES(ENTRY, i64)}, {FOR_DTYPES(ENTRY, f16)}, {FOR_DTYPES(ENTRY, bf16)},
    {FOR_DTYPES(ENTRY, f32)}, {FOR_DTYPES(ENTRY, f64)}, {FOR_DTYPES(ENTRY, c64)},
    {FOR_DTYPES(ENTRY, c128)}, {FOR_DTYPES(ENTRY, i8)}};

/* dst (strided, any dtype) <- src (strided, same shape, any dtype). */
static void convert(const oar_ktensor *dst, const oar_ktensor *src) {
    if (dst->dtype == src->dtype) {
        oari_copy_strided(dst, src);
        return;
    }
    const oar_ktensor *ops[2] = {dst, src};
    oari_iter it;
    oari_iter_init(&it, 2, ops);
    oari_inner_fn fn = conversions[dst->dtype][src->dtype];
    if (dst->dtype == OAR_BF16 && src->dtype == OAR_F32) fn = conv_f32_to_bf16_fast;
    if (dst->dtype == OAR_F32 && src->dtype == OAR_BF16) fn = conv_bf16_to_f32_fast;
    oari_iter_run(&it, fn, NULL);
}

static int k_copy(void *ctx, const oar_kernel_call *c) { /* in[0] dst, in[1] src (broadcast) */
    (void)ctx;
    convert(&c->in[0], &c->in[1]);
    return 0;
}

static int k_cast(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    convert(&c->out[0], &c->in[0]);
    return 0;
}

static void fill_loop(char **p, const int64_t *s, int64_t n, void *ctx) {
    const oar_ktensor *v = ctx; /* a one-element value of the target dtype in v->data */
    int64_t es = (int64_t)oar_dtype_size((oar_dtype)v->dtype);
    for (int64_t i = 0; i < n; i++) memcpy(p[0] + i * s[0] * es, v->data, (size_t)es);
}

static int k_fill(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    const oar_ktensor *t = &c->in[0];
    unsigned char value[16] = {0};
    double re = c->n_fattr > 0 ? c->fattr[0] : 0, im = c->n_fattr > 1 ? c->fattr[1] : 0;
    oari_store_f64(value, (oar_dtype)t->dtype, re);
    if (t->dtype == OAR_C64) ((float *)value)[1] = (float)im;
    if (t->dtype == OAR_C128) ((double *)value)[1] = im;
    oar_ktensor v = {.data = value, .dtype = t->dtype};
    const oar_ktensor *ops[1] = {t};
    oari_iter it;
    oari_iter_init(&it, 1, ops);
    oari_iter_run(&it, fill_loop, &v);
    return 0;
}

#define ALL(k) {k, k, k, k, k, k, k, k, k, k, k}
const oari_cpu_kernels oari_cpu_k_fill = ALL(k_fill);
const oari_cpu_kernels oari_cpu_k_copy = ALL(k_copy);
const oari_cpu_kernels oari_cpu_k_cast = ALL(k_cast);
const oari_cpu_kernels oari_cpu_k_contiguous = ALL(k_cast);

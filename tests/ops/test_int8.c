/* The int8 dtype and affine quantization against PyTorch 1.13 (values from
 * tests/ref/gen_int8.py): casts to and from int8 for every dtype, promotion,
 * wrapping arithmetic and reductions, safetensors and .npy round trips,
 * quantize/dequantize per tensor and per channel, fake quantization and its
 * straight-through gradient (first and second order), and bad input. */
#include "test.h"

#include "ref/int8_ref.h"

#include <stdint.h>
#include <unistd.h>

#define N(a) ((int64_t)(sizeof(a) / sizeof *(a)))

/* A tensor of dtype dt holding the doubles v (cast from f64). */
static oar_tensor *make(const double *v, int64_t n, oar_dtype dt) {
    return oar_cast(oar_tensor_from_data(v, OAR_F64, 1, &n), dt);
}
static oar_tensor *make_shaped(const double *v, int ndim, const int64_t *shape, oar_dtype dt) {
    return oar_cast(oar_tensor_from_data(v, OAR_F64, ndim, shape), dt);
}

static void test_dtype_facts(void) {
    CHECK(OAR_I8 == 10); /* appended: stored values never change */
    CHECK(oar_dtype_size(OAR_I8) == 1);
    CHECK(!strcmp(oar_dtype_name(OAR_I8), "int8"));
    CHECK(oar_dtype_is_integral(OAR_I8) && !oar_dtype_is_float(OAR_I8) && !oar_dtype_is_complex(OAR_I8));
}

/* oar's dtype order, the names gen_int8.py uses. */
static const char *const short_names[OAR_DTYPE_COUNT] = {"bool", "u8", "i32", "i64", "f16", "bf16",
                                                         "f32", "f64", "c64", "c128", "i8"};

static void test_promotion(void) {
    for (int d = 0; d < OAR_DTYPE_COUNT; d++) {
        const char *want = promote_i8_with[d];
        int p = oar_promote_types(OAR_I8, (oar_dtype)d), q = oar_promote_types((oar_dtype)d, OAR_I8);
        CHECK(p == q);
        /* torch's int16 for i8 + u8: oar has none and takes int32 */
        if (!strcmp(want, "i16")) CHECK(p == OAR_I32);
        else CHECK(p >= 0 && !strcmp(short_names[p], want));
    }
    oar_pool *pool = oar_pool_push();
    oar_tensor *a = make(ew_a, N(ew_a), OAR_I8), *b = make(ew_b, N(ew_b), OAR_I8);
    oar_tensor *s = oar_add(a, oar_cast(b, OAR_U8));
    CHECK(s && oar_tensor_dtype(s) == OAR_I32);
    CHECK_VALUES(s, ew_add_u8, N(ew_add_u8), 0);
    /* a 0-d int64 tensor does not raise a dimensioned int8 one, nor does an integer number */
    CHECK(oar_tensor_dtype(oar_add(a, oar_scalar_of(3, OAR_I64))) == OAR_I8);
    CHECK(oar_tensor_dtype(oar_mul_scalar(a, 0.5)) == OAR_F32);
    oar_pool_pop(pool);
}

/* Every dtype's values cast to int8, and every int8 value cast to each dtype. */
static void test_casts(void) {
    static const struct { const double *src, *src_im, *want; int64_t n; } to_i8[OAR_DTYPE_COUNT] = {
        [OAR_BOOL] = {cast_src_bool, NULL, cast_to_i8_from_bool, N(cast_src_bool)},
        [OAR_U8] = {cast_src_u8, NULL, cast_to_i8_from_u8, N(cast_src_u8)},
        [OAR_I32] = {cast_src_i32, NULL, cast_to_i8_from_i32, N(cast_src_i32)},
        [OAR_I64] = {NULL, NULL, cast_to_i8_from_i64, N(cast_to_i8_from_i64)},
        [OAR_F16] = {cast_src_f16, NULL, cast_to_i8_from_f16, N(cast_src_f16)},
        [OAR_BF16] = {cast_src_bf16, NULL, cast_to_i8_from_bf16, N(cast_src_bf16)},
        [OAR_F32] = {cast_src_f32, NULL, cast_to_i8_from_f32, N(cast_src_f32)},
        [OAR_F64] = {cast_src_f64, NULL, cast_to_i8_from_f64, N(cast_src_f64)},
        [OAR_C64] = {cast_src_c64, cast_src_c64_im, cast_to_i8_from_c64, N(cast_src_c64)},
        [OAR_C128] = {cast_src_c128, cast_src_c128_im, cast_to_i8_from_c128, N(cast_src_c128)},
        [OAR_I8] = {cast_src_i8, NULL, cast_to_i8_from_i8, N(cast_src_i8)},
    };
    static const double *const from_i8[OAR_DTYPE_COUNT] = {
        cast_from_i8_to_bool, cast_from_i8_to_u8,  cast_from_i8_to_i32, cast_from_i8_to_i64,
        cast_from_i8_to_f16,  cast_from_i8_to_bf16, cast_from_i8_to_f32, cast_from_i8_to_f64,
        cast_from_i8_to_c64,  cast_from_i8_to_c128, cast_from_i8_to_i8};
    oar_pool *pool = oar_pool_push();
    for (int d = 0; d < OAR_DTYPE_COUNT; d++) {
        test_current = short_names[d];
        int64_t n = to_i8[d].n;
        oar_tensor *src;
        if (d == OAR_I64) { /* exact int64s beyond 2^53: rebuilt from 32-bit halves */
            int64_t v[32];
            for (int64_t i = 0; i < n; i++)
                v[i] = (int64_t)(((uint64_t)(int64_t)cast_src_i64_hi[i] << 32) | (uint64_t)cast_src_i64_lo[i]);
            src = oar_tensor_from_data(v, OAR_I64, 1, &n);
        } else if (to_i8[d].src_im) {
            double v[64];
            for (int64_t i = 0; i < n; i++) v[2 * i] = to_i8[d].src[i], v[2 * i + 1] = to_i8[d].src_im[i];
            src = oar_cast(oar_tensor_from_data(v, OAR_C128, 1, &n), (oar_dtype)d);
        } else {
            src = make(to_i8[d].src, n, (oar_dtype)d);
        }
        oar_tensor *q = oar_cast(src, OAR_I8);
        CHECK(q && oar_tensor_dtype(q) == OAR_I8);
        CHECK_VALUES(q, to_i8[d].want, n, 0);
        /* all 256 int8 values to dtype d (complex: the real part; imaginary 0) */
        double all[256];
        for (int i = 0; i < 256; i++) all[i] = i - 128;
        oar_tensor *r = oar_cast(make(all, 256, OAR_I8), (oar_dtype)d);
        CHECK(r && oar_tensor_dtype(r) == d);
        CHECK_VALUES(r, from_i8[d], 256, 0);
    }
    test_current = "test_casts";
    oar_pool_pop(pool);
}

static void test_arith_and_reductions(void) {
    oar_pool *pool = oar_pool_push();
    int64_t shape[2] = {2, 5};
    oar_tensor *a = make_shaped(ew_a, 2, shape, OAR_I8), *b = make_shaped(ew_b, 2, shape, OAR_I8);
    CHECK(oar_tensor_dtype(oar_add(a, b)) == OAR_I8);
    CHECK_VALUES(oar_add(a, b), ew_add, 10, 0);
    CHECK_VALUES(oar_sub(a, b), ew_sub, 10, 0);
    CHECK_VALUES(oar_mul(a, b), ew_mul, 10, 0);
    CHECK_VALUES(oar_neg(a), ew_neg, 10, 0);
    CHECK_VALUES(oar_abs(a), ew_abs, 10, 0);
    CHECK_VALUES(oar_sign(a), ew_sign, 10, 0);
    CHECK_VALUES(oar_maximum(a, b), ew_maximum, 10, 0);
    CHECK_VALUES(oar_minimum(a, b), ew_minimum, 10, 0);
    CHECK_VALUES(oar_floor_div(a, b), ew_floor_divide, 10, 0);
    CHECK_VALUES(oar_remainder(a, b), ew_remainder, 10, 0);
    CHECK_VALUES(oar_lt(a, b), ew_lt, 10, 0);
    CHECK_VALUES(oar_eq(a, b), ew_eq, 10, 0);
    oar_tensor *q = oar_div(a, b);
    CHECK(q && oar_tensor_dtype(q) == OAR_F32);
    CHECK_VALUES(q, ew_div, 10, 1e-6);
    oar_tensor *mm = oar_matmul(oar_transpose(a, 0, 1), b);
    CHECK(mm && oar_tensor_dtype(mm) == OAR_I8);
    CHECK_VALUES(mm, ew_mm, 25, 0);
    int64_t d1 = 1, d0 = 0;
    oar_tensor *s = oar_sum(a, 1, &d1, false);
    CHECK(s && oar_tensor_dtype(s) == OAR_I64);
    CHECK_VALUES(s, red_sum, 2, 0);
    CHECK_VALUES(oar_prod(a, 1, &d1, false), red_prod, 2, 0);
    CHECK_VALUES(oar_amax(a, 1, &d1, false), red_amax, 2, 0);
    CHECK_VALUES(oar_amin(a, 1, &d0, false), red_amin, 5, 0);
    CHECK_VALUES(oar_argmax(a, 1, false), red_argmax, 2, 0);
    CHECK_VALUES(oar_argmin(a, 1, false), red_argmin, 2, 0);
    CHECK_VALUES(oar_cumsum(a, 1), red_cumsum, 10, 0);
    CHECK_VALUES(oar_sort(a, 1, false, NULL), red_sort, 10, 0);
    CHECK_VALUES(oar_any(make(ew_a + 3, 3, OAR_I8), 0, NULL, false), red_any, 1, 0);
    oar_pool_pop(pool);
}

static void test_save_load(void) {
    oar_pool *pool = oar_pool_push();
    double v[6] = {-128, -1, 0, 1, 64, 127};
    int64_t shape[2] = {2, 3};
    oar_tensor *t = make_shaped(v, 2, shape, OAR_I8);
    char path[] = "/tmp/oar_int8_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    CHECK(oar_safetensors_save(path, 1, (const char *[]){"w"}, &t) == 0);
    FILE *f = fopen(path, "rb");
    char head[256] = {0};
    CHECK(f && fread(head, 1, sizeof head - 1, f) > 8);
    if (f) fclose(f);
    CHECK(strstr(head + 8, "\"dtype\":\"I8\"") != NULL);
    oar_tensor_dict *d = oar_safetensors_load(path);
    oar_tensor *back = d ? oar_tensor_dict_get(d, "w") : NULL;
    CHECK(back && oar_tensor_dtype(back) == OAR_I8 && oar_tensor_ndim(back) == 2);
    CHECK_VALUES(back, v, 6, 0);
    oar_tensor_dict_free(d);
    CHECK(oar_npy_save(path, t) == 0);
    f = fopen(path, "rb");
    memset(head, 0, sizeof head);
    CHECK(f && fread(head, 1, 64, f) == 64);
    if (f) fclose(f);
    CHECK(strstr(head + 10, "'descr': '|i1'") != NULL);
    oar_tensor *n = oar_npy_load(path);
    CHECK(n && oar_tensor_dtype(n) == OAR_I8);
    CHECK_VALUES(n, v, 6, 0);
    if (n) oar_tensor_release(n);
    unlink(path);
    oar_pool_pop(pool);
}

/* ---- quantization ---------------------------------------------------------------- */

static const int64_t qshape[3] = {2, 3, 4};

static void test_quantize_per_tensor(void) {
    oar_pool *pool = oar_pool_push();
    oar_tensor *x = make_shaped(q_x, 3, qshape, OAR_F32);
    struct { oar_dtype dt; int64_t zp; const double *q5, *dq5, *q1, *dq1; } cases[] = {
        {OAR_I8, -3, q_pt_i8, dq_pt_i8, q_pt01_i8, dq_pt01_i8},
        {OAR_U8, 130, q_pt_u8, dq_pt_u8, q_pt01_u8, dq_pt01_u8},
    };
    for (int k = 0; k < 2; k++) {
        oar_tensor *q = oar_quantize_per_tensor(x, 0.5, cases[k].zp, cases[k].dt);
        CHECK(q && oar_tensor_dtype(q) == cases[k].dt && oar_tensor_ndim(q) == 3);
        CHECK_VALUES(q, cases[k].q5, 24, 0);
        /* torch dequantizes per tensor with a float scale (per channel: the scales' dtype) */
        oar_tensor *s = oar_scalar_of(0.5, OAR_F32), *z = oar_scalar_of((double)cases[k].zp, OAR_I64);
        oar_tensor *dq = oar_dequantize(q, s, z, 0);
        CHECK(dq && oar_tensor_dtype(dq) == OAR_F32);
        CHECK_VALUES(dq, cases[k].dq5, 24, 0);
        /* the tensor form with a one-element 1-d scale is per tensor too */
        int64_t one = 1;
        oar_tensor *q1 = oar_quantize(x, oar_reshape(oar_scalar_of(0.1, OAR_F64), 1, &one),
                                      oar_reshape(z, 1, &one), 1, cases[k].dt);
        CHECK_VALUES(q1, cases[k].q1, 24, 0);
        CHECK_VALUES(oar_dequantize(q1, oar_scalar_of(0.1, OAR_F32), z, 0), cases[k].dq1, 24, 0);
    }
    /* f16 input is quantized through f32; ONNX's default zero point (NULL) is 0 */
    oar_tensor *q = oar_quantize(oar_cast(x, OAR_F16), oar_scalar_of(0.5, OAR_F32), NULL, 0, OAR_I8);
    oar_tensor *ref = oar_quantize_per_tensor(oar_cast(oar_cast(x, OAR_F16), OAR_F32), 0.5, 0, OAR_I8);
    CHECK(q && ref && oar_tensor_dtype(q) == OAR_I8);
    double *got = test_values(q), *want = test_values(ref);
    CHECK(got && want && !memcmp(got, want, 24 * sizeof *got));
    free(got);
    free(want);
    oar_pool_pop(pool);
}

static void test_quantize_per_channel(void) {
    oar_pool *pool = oar_pool_push();
    oar_tensor *x = make_shaped(q_x, 3, qshape, OAR_F32);
    oar_tensor *s = make(q_scales, 3, OAR_F64);
    struct { oar_dtype dt; const double *zps, *q, *dq, *qT; } cases[] = {
        {OAR_I8, q_zps_i8, q_pc_i8, dq_pc_i8, q_pcT_i8},
        {OAR_U8, q_zps_u8, q_pc_u8, dq_pc_u8, q_pcT_u8},
    };
    for (int k = 0; k < 2; k++) {
        oar_tensor *z = make(cases[k].zps, 3, OAR_I64);
        oar_tensor *q = oar_quantize_per_channel(x, s, z, 1, cases[k].dt);
        CHECK(q && oar_tensor_dtype(q) == cases[k].dt);
        CHECK_VALUES(q, cases[k].q, 24, 0);
        CHECK_VALUES(oar_dequantize(q, s, z, 1), cases[k].dq, 24, 0);
        CHECK_VALUES(oar_quantize(x, s, z, -2, cases[k].dt), cases[k].q, 24, 0); /* axis from the end */
        /* a strided view ([4, 3, 2], axis 1 in the middle), f32 scales and i32 zero points */
        oar_tensor *xt = oar_permute(x, (const int64_t[]){2, 1, 0});
        oar_tensor *qt = oar_quantize_per_channel(xt, oar_cast(s, OAR_F32), oar_cast(z, OAR_I32), 1, cases[k].dt);
        CHECK_VALUES(qt, cases[k].qT, 24, 0);
    }
    oar_pool_pop(pool);
}

static void test_quantize_errors(void) {
    oar_pool *pool = oar_pool_push();
    oar_tensor *x = make_shaped(q_x, 3, qshape, OAR_F32);
    oar_tensor *s = make(q_scales, 3, OAR_F64), *z = make(q_zps_i8, 3, OAR_I64);
    CHECK_FAILS(oar_quantize_per_tensor(oar_cast(x, OAR_C64), 0.5, 0, OAR_I8), "real float tensor, got complex64");
    CHECK_FAILS(oar_quantize_per_tensor(oar_cast(x, OAR_I32), 0.5, 0, OAR_I8), "got int32");
    CHECK_FAILS(oar_quantize_per_tensor(x, 0, 0, OAR_I8), "scale 0 must be positive");
    CHECK_FAILS(oar_quantize_per_tensor(x, -1, 0, OAR_I8), "must be positive");
    CHECK_FAILS(oar_quantize_per_tensor(x, NAN, 0, OAR_I8), "must be positive and finite");
    CHECK_FAILS(oar_quantize_per_tensor(x, INFINITY, 0, OAR_I8), "must be positive and finite");
    CHECK_FAILS(oar_quantize_per_tensor(x, 0.5, 128, OAR_I8), "zero point 128 is outside [-128, 127]");
    CHECK_FAILS(oar_quantize_per_tensor(x, 0.5, -1, OAR_U8), "zero point -1 is outside [0, 255]");
    CHECK_FAILS(oar_quantize_per_tensor(x, 0.5, 0, OAR_I32), "must be int8 or uint8, got int32");
    CHECK_FAILS(oar_quantize_per_channel(x, s, z, 3, OAR_I8), "axis 3 is out of range for an input of shape [2, 3, 4]");
    CHECK_FAILS(oar_quantize_per_channel(x, s, z, -4, OAR_I8), "axis -4 is out of range");
    CHECK_FAILS(oar_quantize_per_channel(x, s, z, 2, OAR_I8), "must be 1-d of size 4");
    CHECK_FAILS(oar_quantize(x, s, z, 0, OAR_I8), "3 scales for an input of shape [2, 3, 4] along axis 0");
    CHECK_FAILS(oar_quantize_per_channel(x, s, make(q_zps_i8, 2, OAR_I64), 1, OAR_I8), "must be 1-d of size 3");
    CHECK_FAILS(oar_quantize_per_channel(x, oar_cast(s, OAR_C64), z, 1, OAR_I8), "scale must be a real float");
    CHECK_FAILS(oar_quantize_per_channel(x, s, oar_cast(z, OAR_F32), 1, OAR_I8), "zero point must be an integer");
    CHECK_FAILS(oar_quantize_per_channel(NULL, s, z, 1, OAR_I8), "x");
    /* values checked by the kernel: a zero scale, a zero point out of range */
    double bad_s[3] = {0.1, 0.0, 0.2}, bad_z[3] = {0, 300, 0};
    CHECK_FAILS(oar_quantize_per_channel(x, make(bad_s, 3, OAR_F64), z, 1, OAR_I8),
                "quantize: scale 0 (channel 1) must be positive and finite");
    CHECK_FAILS(oar_quantize_per_channel(x, s, make(bad_z, 3, OAR_I64), 1, OAR_I8),
                "quantize: zero point 300 (channel 1) is outside [-128, 127]");
    CHECK_FAILS(oar_dequantize(oar_cast(x, OAR_I8), make(bad_s, 3, OAR_F64), z, 1), "dequantize: scale 0");
    CHECK_FAILS(oar_dequantize(x, s, z, 1), "dequantize: the input must be int8, uint8 or int32, got float32");
    CHECK_FAILS(oar_dequantize(NULL, s, z, 1), "q");
    oar_pool_pop(pool);
}

/* ---- fake quantization ----------------------------------------------------------- */

/* y = fake_quantize(x) and d sum(w * y) / dx, as the reference script does. */
typedef struct { bool per_channel; oar_tensor *s, *z; } fq_ctx;

static oar_tensor *fq(const fq_ctx *c, oar_tensor *x) {
    return c->per_channel ? oar_fake_quantize_per_channel(x, c->s, c->z, 1, -10, 10)
                          : oar_fake_quantize_per_tensor(x, 0.25, 2, -8, 7);
}

/* The straight-through mask by its closed form, in float as the forward. */
static double closed_form_mask(double xv, float s, int64_t z, int64_t lo, int64_t hi) {
    float t = (float)z + nearbyintf((float)xv * (1.0f / s));
    return t >= (float)lo && t <= (float)hi ? 1.0 : 0.0;
}

static void test_fake_quantize(void) {
    oar_pool *pool = oar_pool_push();
    fq_ctx cases[2] = {{false, NULL, NULL}, {true, make(fq_scales, 3, OAR_F32), make(fq_zps, 3, OAR_I32)}};
    const double *want_y[2] = {fq_pt_y, fq_pc_y}, *want_g[2] = {fq_pt_g, fq_pc_g};
    oar_tensor *w = make_shaped(fq_w, 3, qshape, OAR_F32);
    for (int k = 0; k < 2; k++) {
        oar_tensor *x = make_shaped(fq_x, 3, qshape, OAR_F32);
        oar_tensor_set_requires_grad(x, true);
        oar_tensor *y = fq(&cases[k], x);
        CHECK(y && oar_tensor_dtype(y) == OAR_F32);
        CHECK_VALUES(y, want_y[k], 24, 0);
        /* first order: PyTorch's gradient, and the closed form w * mask */
        oar_tensor *g = NULL;
        CHECK(oar_grad(1, &y, &w, 1, &x, true, false, &g) == 0);
        CHECK_VALUES(g, want_g[k], 24, 0);
        double mask_w[24];
        for (int i = 0; i < 24; i++) {
            int ch = (i / 4) % 3;
            double m = k ? closed_form_mask(fq_x[i], (float)fq_scales[ch], (int64_t)fq_zps[ch], -10, 10)
                         : closed_form_mask(fq_x[i], 0.25f, 2, -8, 7);
            mask_w[i] = m * (double)(float)fq_w[i];
        }
        CHECK_VALUES(g, mask_w, 24, 0);
        /* second order: g is linear in the cotangent w with slope mask, and
         * does not depend on x (d g / d x = 0) */
        oar_tensor *v = oar_ones(OAR_F32, 3, qshape), *gw = NULL, *gx = NULL;
        oar_tensor_set_requires_grad(w, true);
        oar_tensor *g2 = NULL;
        CHECK(oar_grad(1, &y, &w, 1, &x, true, false, &g2) == 0);
        CHECK(oar_grad(1, &g2, &v, 1, &w, true, false, &gw) == 0);
        for (int i = 0; i < 24; i++) mask_w[i] = fq_w[i] != 0 ? mask_w[i] / (double)(float)fq_w[i] : 0;
        CHECK_VALUES(gw, mask_w, 24, 0);
        CHECK(oar_grad(1, &g2, &v, 1, &x, false, true, &gx) == 0);
        CHECK(gx == NULL || oar_tensor_item(oar_sum(oar_abs(gx), 0, NULL, false)) == 0);
        oar_tensor_set_requires_grad(w, false);
        /* f64 input: computed in double (1 / scale too), so within f32's rounding */
        oar_tensor *y64 = fq(&cases[k], oar_cast(make_shaped(fq_x, 3, qshape, OAR_F32), OAR_F64));
        CHECK(y64 && oar_tensor_dtype(y64) == OAR_F64);
        CHECK_VALUES(y64, want_y[k], 24, 1e-7);
    }
    oar_tensor *x = make_shaped(fq_x, 3, qshape, OAR_F32);
    CHECK_FAILS(oar_fake_quantize_per_tensor(x, 0.25, 2, 7, -8), "quant_min 7 > quant_max -8");
    CHECK_FAILS(oar_fake_quantize_per_tensor(x, 0.25, 9, -8, 7), "zero point 9 is outside [-8, 7]");
    CHECK_FAILS(oar_fake_quantize_per_tensor(x, -0.25, 0, -8, 7), "must be positive");
    CHECK_FAILS(oar_fake_quantize_per_tensor(oar_cast(x, OAR_C64), 0.25, 0, -8, 7), "complex64");
    CHECK_FAILS(oar_fake_quantize_per_channel(x, cases[1].s, cases[1].z, 0, -10, 10), "must be 1-d of size 2");
    CHECK_FAILS(oar_fake_quantize_per_channel(x, cases[1].s, cases[1].z, 1, -1, 1),
                "fake_quantize: zero point 3 (channel 1) is outside [-1, 1]");
    oar_pool_pop(pool);
}

int main(void) {
    RUN(test_dtype_facts);
    RUN(test_promotion);
    RUN(test_casts);
    RUN(test_arith_and_reductions);
    RUN(test_save_load);
    RUN(test_quantize_per_tensor);
    RUN(test_quantize_per_channel);
    RUN(test_quantize_errors);
    RUN(test_fake_quantize);
    return test_summary();
}

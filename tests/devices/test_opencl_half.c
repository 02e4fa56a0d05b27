/* f16 and bf16 on opencl:0 (PoCL here): the plugin's conversions between
 * them and the other dtypes (cast, copy, contiguous, fill) give the CPU's
 * bits exactly (round to nearest even, ties, subnormals, overflow to inf,
 * NaN, -0), on dense and strided views, with no CPU fallback; and f16/bf16
 * add and matmul then run on the device as casts around its f32 kernels
 * (oar_device_fallback_count unchanged), matching the CPU's results.
 * Skipped (exit 77) where no OpenCL device exists. */
#include "test.h"

#include "opencl_common.h"

#include <stdint.h>

static oar_device *cl;

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* A tensor's elements as bytes on the host (row-major), malloc'd; NULL on failure. */
static void *host_bytes(oar_tensor *t) {
    if (!t) return NULL;
    size_t n = (size_t)oar_tensor_numel(t) * oar_dtype_size(oar_tensor_dtype(t));
    void *b = malloc(n ? n : 1);
    if (b && oar_tensor_to_host(t, b, n)) {
        free(b);
        return NULL;
    }
    return b;
}

/* got and want hold the same bytes; reports the first few elements that differ */
static void check_same_bits(const char *what, oar_tensor *got, oar_tensor *want) {
    CHECK(got && want && oar_tensor_dtype(got) == oar_tensor_dtype(want) &&
          oar_tensor_numel(got) == oar_tensor_numel(want));
    if (!got || !want) {
        fprintf(stderr, "%s: %s\n", what, oar_last_error());
        return;
    }
    CHECK(oar_tensor_device(got) == cl);
    size_t es = oar_dtype_size(oar_tensor_dtype(got));
    int64_t n = oar_tensor_numel(got);
    unsigned char *g = host_bytes(got), *w = host_bytes(want);
    CHECK(g && w);
    int bad = 0;
    for (int64_t i = 0; g && w && i < n; i++) {
        if (!memcmp(g + (size_t)i * es, w + (size_t)i * es, es)) continue;
        if (bad++ < 8) {
            uint64_t gb = 0, wb = 0;
            memcpy(&gb, g + (size_t)i * es, es);
            memcpy(&wb, w + (size_t)i * es, es);
            fprintf(stderr, "%s: element %lld: device 0x%llx, CPU 0x%llx\n", what, (long long)i,
                    (unsigned long long)gb, (unsigned long long)wb);
        }
    }
    if (bad) fprintf(stderr, "%s: %d of %lld elements differ\n", what, bad, (long long)n);
    CHECK(bad == 0);
    free(g);
    free(w);
}

/* f32 values that exercise both half formats' rounding, as bit patterns */
static const uint32_t special_f32[] = {
    0x00000000u, 0x80000000u, 0x3f800000u, 0xbf800000u,  /* +-0, +-1 */
    0x7f800000u, 0xff800000u,                            /* +-inf */
    0x7fc00000u, 0xffc00001u, 0x7fa12345u, 0xff812345u, /* NaN: quiet, signed, signalling */
    /* bf16: ties to even, just above and below a tie */
    0x3f808000u, 0x3f818000u, 0x3f808001u, 0x3f807fffu, 0xbf818000u, 0x4049f000u,
    /* f16: ties to even, above and below */
    0x3f801000u, 0x3f803000u, 0x3f801001u, 0x3f800fffu, 0xc0401000u,
    /* f16 subnormals: 2^-24, 2^-25 (a tie: to 0), 3 * 2^-25 (a tie: to 2 * 2^-24),
     * a little above 2^-25, 2^-14 - 2^-25 (the largest subnormal's neighbourhood),
     * 2^-14 (the smallest normal), 5.96e-8, 1e-6, -3e-5; below half of 2^-24 */
    0x33800000u, 0x33000000u, 0x33c00000u, 0x33000001u, 0x387fc000u, 0x387fe000u, 0x38800000u,
    0x337ffffeu, 0x358637bdu, 0xb7fba882u, 0x32ffffffu,
    /* f32 subnormals (bf16 keeps them, f16 goes to +-0) */
    0x00000001u, 0x000fffffu, 0x807fffffu, 0x00400000u,
    /* f16 range: 65504 (max), 65519.99 (to 65504), 65520 (a tie: to inf), 1e5, -1e6 */
    0x477fe000u, 0x477fefffu, 0x477ff000u, 0x47c35000u, 0xc9742400u,
    /* large: FLT_MAX (bf16: to inf), -FLT_MAX, 1e38, 3e38 */
    0x7f7fffffu, 0xff7fffffu, 0x7e967699u, 0x7f61d1b9u,
    /* ordinary values: 0.1, -2.5, pi, 1/3 */
    0x3dcccccdu, 0xc0200000u, 0x40490fdbu, 0x3eaaaaabu,
};

/* The special values and n_random more (bit patterns of every exponent),
 * as an f32 CPU tensor of shape (rows, 8) padded with 1.0. */
static oar_tensor *f32_cases(int n_random, int64_t *rows_out) {
    int n_special = (int)(sizeof special_f32 / sizeof *special_f32);
    int64_t n = n_special + n_random, rows = (n + 7) / 8;
    float *v = malloc((size_t)rows * 8 * sizeof *v);
    uint32_t state = 12345u;
    for (int64_t i = 0; i < rows * 8; i++) {
        if (i < n_special) {
            v[i] = bits_f32(special_f32[i]);
        } else if (i < n) {
            state = state * 1664525u + 1013904223u; /* LCG: any bits, NaNs included */
            v[i] = bits_f32(state);
        } else {
            v[i] = 1.0f;
        }
    }
    int64_t shape[2] = {rows, 8};
    oar_tensor *t = oar_tensor_from_data(v, OAR_F32, 2, shape);
    free(v);
    *rows_out = rows;
    return t;
}

/* Every 16-bit pattern as a (256, 256) u16 tensor of dtype dt on the CPU. */
static oar_tensor *all_half(oar_dtype dt) {
    uint16_t *v = malloc(65536 * sizeof *v);
    for (int i = 0; i < 65536; i++)
        v[i] = (uint16_t)i;
    int64_t shape[2] = {256, 256};
    oar_tensor *t = oar_tensor_from_data(v, dt, 2, shape);
    free(v);
    return t;
}

/* x (CPU) cast to `to` on the device and on the CPU: the same bits, no
 * fallback; x moved to the device first, and viewed there transposed
 * when `transposed` (a strided source). */
static void check_cast(const char *what, oar_tensor *x, oar_dtype to, bool transposed) {
    oar_pool *pool = oar_pool_push();
    oar_tensor *xd = oar_tensor_to(x, cl), *xc = x;
    if (transposed) {
        xd = oar_transpose(xd, 0, 1);
        xc = oar_transpose(xc, 0, 1);
        CHECK(xd && !oar_tensor_is_contiguous(xd));
    }
    int64_t before = oar_device_fallback_count();
    oar_tensor *got = oar_cast(xd, to);
    CHECK(oar_device_fallback_count() == before);
    check_same_bits(what, got, oar_cast(xc, to));
    oar_pool_pop(pool);
}

/* Whether opencl:0 has f64 kernels (cl_khr_fp64): a cast to f64 there runs
 * without a fallback. */
static bool has_f64(void) {
    oar_pool *pool = oar_pool_push();
    int64_t before = oar_device_fallback_count();
    oar_tensor *y = oar_cast(oar_full_on(OAR_F32, 1, (int64_t[]){2}, 1, cl), OAR_F64);
    bool yes = y && oar_device_fallback_count() == before;
    oar_pool_pop(pool);
    oar_clear_error();
    return yes;
}

static bool f64;

static void test_f32_to_half(void) {
    oar_pool *pool = oar_pool_push();
    int64_t rows;
    oar_tensor *x = f32_cases(4000, &rows);
    check_cast("f32 -> bf16", x, OAR_BF16, false);
    check_cast("f32 -> f16", x, OAR_F16, false);
    check_cast("f32 -> bf16, transposed", x, OAR_BF16, true);
    check_cast("f32 -> f16, transposed", x, OAR_F16, true);
    if (f64) {
        /* the same values through f64 (rounded to f32 first, as on the CPU) */
        oar_tensor *x64 = oar_cast(x, OAR_F64);
        check_cast("f64 -> bf16", x64, OAR_BF16, false);
        check_cast("f64 -> f16", x64, OAR_F16, true);
        /* f64 values that round twice (f64 -> f32 -> half), as the CPU does */
        double d[8] = {1.0 + 0x1p-11 + 0x1p-40, 1.0 + 0x1p-8 - 0x1p-40, 65519.999999, 1e-300,
                       -1e300, 0x1p-25 + 0x1p-60, 3.0000001, -0.0};
        oar_tensor *xd = oar_tensor_from_data(d, OAR_F64, 2, (int64_t[]){2, 4});
        check_cast("f64 -> f16, double rounding", xd, OAR_F16, false);
        check_cast("f64 -> bf16, double rounding", xd, OAR_BF16, false);
    }
    oar_pool_pop(pool);
}

/* NaN inputs with the signalling bit clear: the CPU's conversions to f32
 * keep such a NaN's bits on every path (a signalling one may come back
 * quieted by a trip through double), so the comparison is exact for them
 * and, for signalling NaNs, on the NaN's sign and payload bits only. */
static void quiet_nans(oar_tensor *t) {
    uint16_t *v = oar_tensor_data(t);
    bool f16 = oar_tensor_dtype(t) == OAR_F16;
    for (int64_t i = 0, n = oar_tensor_numel(t); i < n; i++) {
        uint16_t h = v[i];
        bool nan = f16 ? (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) : (h & 0x7f80u) == 0x7f80u && (h & 0x7fu);
        if (nan) v[i] = (uint16_t)(h | (f16 ? 0x200u : 0x40u));
    }
}

static void test_half_to_other(void) {
    oar_pool *outer = oar_pool_push();
    for (int k = 0; k < 2; k++) {
        oar_dtype dt = k ? OAR_BF16 : OAR_F16;
        const char *name = k ? "bf16" : "f16";
        char what[64];
        oar_tensor *x = all_half(dt);
        quiet_nans(x);
        static const oar_dtype to[] = {OAR_F32, OAR_F16, OAR_BF16, OAR_F64};
        static const char *to_name[] = {"f32", "f16", "bf16", "f64"};
        for (int j = 0; j < (f64 ? 4 : 3); j++) {
            snprintf(what, sizeof what, "%s -> %s (every pattern)", name, to_name[j]);
            check_cast(what, x, to[j], false);
            snprintf(what, sizeof what, "%s -> %s (every pattern), transposed", name, to_name[j]);
            check_cast(what, x, to[j], true);
        }
        /* signalling NaNs too: NaN on both sides, same sign, same payload
         * but for the quiet bit */
        oar_pool *pool = oar_pool_push();
        oar_tensor *s = all_half(dt);
        int64_t before = oar_device_fallback_count();
        oar_tensor *got = oar_cast(oar_tensor_to(s, cl), OAR_F32);
        CHECK(got && oar_device_fallback_count() == before);
        float *g = host_bytes(got), *w = host_bytes(oar_cast(s, OAR_F32));
        CHECK(g && w);
        int bad = 0;
        for (int i = 0; g && w && i < 65536; i++) {
            uint32_t gb = f32_bits(g[i]), wb = f32_bits(w[i]);
            if (gb == wb || (g[i] != g[i] && w[i] != w[i] && (gb | 0x400000u) == (wb | 0x400000u)))
                continue;
            if (bad++ < 8)
                fprintf(stderr, "%s -> f32, 0x%04x: device 0x%08x, CPU 0x%08x\n", name, i, gb, wb);
        }
        CHECK(bad == 0);
        free(g);
        free(w);
        oar_pool_pop(pool);
    }
    oar_pool_pop(outer);
}

/* integers <-> half: in range, exact or rounded to nearest even */
static void test_integers(void) {
    oar_pool *pool = oar_pool_push();
    int32_t v[16] = {0, 1, -1, 7, -300, 2049, 2051, 4097, 65504, 65519, 65520, 100000, -70000, 255, 256, 257};
    uint8_t v8[16] = {0, 1, 2, 3, 17, 100, 127, 128, 200, 254, 255, 9, 33, 65, 129, 250};
    oar_tensor *x = oar_tensor_from_data(v, OAR_I32, 2, (int64_t[]){4, 4});
    oar_tensor *x64 = oar_cast(x, OAR_I64), *x8 = oar_tensor_from_data(v8, OAR_U8, 2, (int64_t[]){4, 4});
    oar_tensor *b = oar_cast(x, OAR_BOOL);
    oar_dtype half[2] = {OAR_F16, OAR_BF16};
    for (int k = 0; k < 2; k++) {
        check_cast("i32 -> half", x, half[k], false);
        check_cast("i64 -> half", x64, half[k], true);
        check_cast("u8 -> half", x8, half[k], false);
        check_cast("bool -> half", b, half[k], false);
        /* back: small in-range values (truncated toward 0), and != 0 to bool */
        float f[8] = {0.0f, -0.0f, 1.5f, -2.75f, 100.25f, 255.0f, -7.5f, 3.0f};
        oar_tensor *h = oar_cast(oar_tensor_from_data(f, OAR_F32, 2, (int64_t[]){2, 4}), half[k]);
        check_cast("half -> i32", h, OAR_I32, false);
        check_cast("half -> i64", h, OAR_I64, true);
        check_cast("half -> bool", h, OAR_BOOL, false);
        float u[8] = {0, 1, 2.5f, 100, 200, 255, 3, 4};
        oar_tensor *hu = oar_cast(oar_tensor_from_data(u, OAR_F32, 2, (int64_t[]){2, 4}), half[k]);
        check_cast("half -> u8", hu, OAR_U8, false);
    }
    oar_pool_pop(pool);
}

/* contiguous, copy_ (strided both ways, across dtypes) and fill in half
 * on the device: the CPU's bits, no fallback */
static void test_copy_contiguous_fill(void) {
    oar_pool *pool = oar_pool_push();
    oar_dtype half[2] = {OAR_F16, OAR_BF16};
    int64_t rows;
    oar_tensor *x = f32_cases(200, &rows);
    for (int k = 0; k < 2; k++) {
        oar_dtype dt = half[k];
        oar_tensor *h = oar_cast(x, dt);
        oar_tensor *hd = oar_tensor_to(h, cl);
        int64_t before = oar_device_fallback_count();
        /* contiguous of a transposed half view: its bits moved */
        oar_tensor *c = oar_contiguous(oar_transpose(hd, 0, 1));
        CHECK(c && oar_tensor_is_contiguous(c));
        check_same_bits("contiguous, half", c, oar_contiguous(oar_transpose(h, 0, 1)));
        /* copy_ into a transposed half view from f32 (converted), and from
         * the other half dtype */
        int64_t shape_t[2] = {8, rows};
        oar_tensor *dst = oar_transpose(oar_full_on(dt, 2, shape_t, 0, cl), 0, 1);
        oar_tensor *dst_c = oar_transpose(oar_full(dt, 2, shape_t, 0), 0, 1);
        CHECK(oar_copy_(dst, oar_tensor_to(x, cl)) == 0 && oar_copy_(dst_c, x) == 0);
        check_same_bits("copy_ f32 -> half, strided", oar_contiguous(dst), oar_contiguous(dst_c));
        oar_tensor *other = oar_cast(x, half[1 - k]);
        CHECK(oar_copy_(dst, oar_tensor_to(other, cl)) == 0 && oar_copy_(dst_c, other) == 0);
        check_same_bits("copy_ half -> other half, strided", oar_contiguous(dst), oar_contiguous(dst_c));
        /* fill: a value that rounds (1/3), one past f16's range, -0 */
        double fills[3] = {1.0 / 3.0, 70000.0, -0.0};
        for (int i = 0; i < 3; i++) {
            CHECK(oar_fill_(dst, fills[i]) == 0 && oar_fill_(dst_c, fills[i]) == 0);
            check_same_bits("fill_ half", oar_contiguous(dst), oar_contiguous(dst_c));
        }
        CHECK(oar_device_fallback_count() == before);
    }
    oar_pool_pop(pool);
}

/* small integers: every sum and product below is exact in f32, f16 and
 * bf16, so the device and the CPU agree bit for bit */
static oar_tensor *small_ints(int64_t rows, int64_t cols, int seed) {
    float *v = malloc((size_t)(rows * cols) * sizeof *v);
    for (int64_t i = 0; i < rows * cols; i++)
        v[i] = (float)((i * 7 + seed * 3) % 9 - 4);
    oar_tensor *t = oar_tensor_from_data(v, OAR_F32, 2, (int64_t[]){rows, cols});
    free(v);
    return t;
}

static void test_add_matmul(void) {
    oar_dtype half[2] = {OAR_F16, OAR_BF16};
    for (int k = 0; k < 2; k++) {
        oar_pool *pool = oar_pool_push();
        oar_dtype dt = half[k];
        oar_tensor *a = oar_cast(small_ints(5, 16, 1), dt), *b = oar_cast(small_ints(16, 6, 2), dt);
        oar_tensor *c = oar_cast(small_ints(5, 16, 3), dt);
        oar_tensor *ad = oar_tensor_to(a, cl), *bd = oar_tensor_to(b, cl), *cd = oar_tensor_to(c, cl);
        oar_device_fallback_reset();
        oar_tensor *s = oar_add(ad, cd), *m = oar_matmul(ad, bd);
        /* a strided operand: the transposed view of a's transpose */
        oar_tensor *at = oar_transpose(oar_contiguous(oar_transpose(ad, 0, 1)), 0, 1);
        oar_tensor *mt = oar_matmul(at, bd);
        CHECK(oar_device_fallback_count() == 0);
        if (oar_device_fallback_count()) fprintf(stderr, "%s add/matmul fell back to the CPU\n", oar_dtype_name(dt));
        CHECK(s && oar_tensor_dtype(s) == dt && m && oar_tensor_dtype(m) == dt);
        check_same_bits("half add", s, oar_add(a, c));
        check_same_bits("half matmul", m, oar_matmul(a, b));
        check_same_bits("half matmul, strided a", mt, oar_matmul(a, b));
        /* rounding: a sum that is not exact in half (1 + 2^-9 .. in f16;
         * bf16 rounds it away) rounds as on the CPU */
        oar_tensor *x = oar_cast(oar_full(OAR_F32, 2, (int64_t[]){2, 3}, 1.0), dt);
        oar_tensor *y = oar_cast(oar_full(OAR_F32, 2, (int64_t[]){2, 3}, 0x1p-11 * 3), dt);
        check_same_bits("half add, rounded", oar_add(oar_tensor_to(x, cl), oar_tensor_to(y, cl)), oar_add(x, y));
        CHECK(oar_device_fallback_count() == 0);
        oar_pool_pop(pool);
    }
}

int main(void) {
    cl = opencl_device_or_skip();
    if (!cl) return TEST_SKIP;
    f64 = has_f64();
    printf("opencl:0 %s f64 kernels\n", f64 ? "has" : "lacks");
    RUN(test_f32_to_half);
    RUN(test_half_to_other);
    RUN(test_integers);
    RUN(test_copy_contiguous_fill);
    RUN(test_add_matmul);
    return test_summary();
}

/* Shape and movement ops: forward values against PyTorch (tests/ref/
 * movement_ref.h), views sharing storage, non-contiguous inputs, every
 * dtype, empty tensors, large inputs (OpenMP paths), the gradient rules
 * called directly, and bad input. */
#include "test.h"

#include "ops/op.h"
#include "ref/movement_ref.h"

/* BOOTSTRAP: oar_sum lives in reduce.c (another group); expand's gradient needs it. */
oar_tensor *oar_sum(oar_tensor *, int, const int64_t *, bool) __attribute__((weak));

/* arange(numel) shaped `shape`, as dtype. */
static oar_tensor *ar(oar_dtype dt, int nd, const int64_t *shape) {
    int64_t n = 1;
    for (int d = 0; d < nd; d++) n *= shape[d];
    return oar_cast(oar_reshape(oar_arange(0, (double)n, 1, OAR_F64), nd, shape), dt);
}
#define AR(dt, ...) ar(dt, sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t), (int64_t[]){__VA_ARGS__})
#define SHAPE(...) sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t), (int64_t[]){__VA_ARGS__}
#define DIMS(...) (int64_t[]){__VA_ARGS__}

static bool same_shape(oar_tensor *t, int nd, const int64_t *shape) {
    return t && oar_tensor_ndim(t) == nd &&
           (nd == 0 || !memcmp(oar_tensor_shape(t), shape, (size_t)nd * sizeof *shape));
}

/* Checks t's shape and values against a reference; bool results are
 * compared with (ref != 0), as movement commutes with the cast. */
static void check_ref(const char *what, oar_tensor *t, const double *want, const int64_t *shape,
                      int nd, int64_t n, const char *file, int line) {
    if (!same_shape(t, nd, shape)) {
        test_failed++;
        fprintf(stderr, "%s:%d: %s: %s has the wrong shape (%s)\n", file, line, test_current, what,
                t ? "" : oar_last_error());
        return;
    }
    if (t && oar_tensor_dtype(t) == OAR_BOOL) {
        double *b = malloc((size_t)(n ? n : 1) * sizeof *b);
        for (int64_t i = 0; i < n; i++) b[i] = want[i] != 0;
        test_expect_values(what, t, b, n, 0, file, line);
        free(b);
        return;
    }
    test_expect_values(what, t, want, n, 0, file, line);
}
#define CHECK_REF(t, name) \
    check_ref(#t, t, ref_##name, ref_##name##_shape, ref_##name##_ndim, ref_##name##_numel, __FILE__, __LINE__)

static oar_tensor *T(oar_tensor *x) { return oar_transpose(x, 0, 1); }

/* ---- forward values in f64 -------------------------------------------------------- */

static void test_views_values(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *x34 = AR(OAR_F64, 3, 4), *x234 = AR(OAR_F64, 2, 3, 4), *x37 = AR(OAR_F64, 3, 7);
    CHECK_REF(oar_reshape(T(x34), SHAPE(2, 6)), reshape_t);
    CHECK_REF(oar_reshape(oar_permute(x234, DIMS(2, 0, 1)), SHAPE(-1, 3)), reshape_infer);
    CHECK_REF(oar_permute(x234, DIMS(-1, 0, 1)), permute);
    CHECK_REF(oar_transpose(x234, 0, -1), transpose);
    CHECK_REF(oar_expand(AR(OAR_F64, 3, 1), SHAPE(2, -1, 4)), expand);
    CHECK_REF(oar_flatten(oar_permute(x234, DIMS(1, 0, 2)), 1, 2), flatten);
    CHECK_REF(oar_slice(x37, 1, 1, -1, 2), slice_step);
    CHECK_REF(oar_slice(x37, -1, -100, 100, 3), slice_clamp);
    CHECK_REF(oar_slice(x37, 0, -2, INT64_MAX, 1), slice_dim0);
    CHECK_REF(oar_diagonal(x34, 1, 0, 1), diag_p1);
    CHECK_REF(oar_diagonal(x34, -1, 0, 1), diag_m1);
    CHECK_REF(oar_diagonal(x234, 1, 0, -1), diag_3d);
    CHECK_REF(oar_diagonal(T(x34), 0, 0, 1), diag_t);
    /* squeeze / unsqueeze */
    oar_tensor *u = oar_unsqueeze(x34, -1);
    CHECK(same_shape(u, SHAPE(3, 4, 1)));
    CHECK(same_shape(oar_unsqueeze(x34, 0), SHAPE(1, 3, 4)));
    CHECK(same_shape(oar_squeeze(u, 2), SHAPE(3, 4)));
    CHECK(same_shape(oar_squeeze(u, 0), SHAPE(3, 4, 1))); /* not size 1: unchanged */
    CHECK(same_shape(oar_squeeze(AR(OAR_F32, 1, 3, 1, 2), OAR_DIM_ALL), SHAPE(3, 2)));
    CHECK(same_shape(oar_squeeze(oar_scalar_of(2, OAR_F32), 0), 0, NULL));
    CHECK(same_shape(oar_flatten(oar_scalar_of(2, OAR_F32), 0, -1), SHAPE(1)));
    CHECK(same_shape(oar_flatten(x234, 0, -1), SHAPE(24)));
    CHECK(same_shape(oar_reshape(oar_scalar_of(5, OAR_F64), SHAPE(1, 1)), SHAPE(1, 1)));
    CHECK(same_shape(oar_reshape(AR(OAR_F64, 1, 1), 0, NULL), 0, NULL));
    CHECK_VALUES(oar_squeeze(T(u), OAR_DIM_ALL), ((double[]){0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}), 12, 0);
    oar_pool_pop(p);
}

static void test_copies_values(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *x34 = AR(OAR_F64, 3, 4), *x234 = AR(OAR_F64, 2, 3, 4), *x23 = AR(OAR_F64, 2, 3);
    oar_tensor *b = oar_add_scalar(T(AR(OAR_F64, 2, 2)), 100);
    CHECK_REF(oar_concat(2, (oar_tensor *[]){x23, b}, 1), concat_t);
    CHECK_REF(oar_concat(3, ((oar_tensor *[]){x23, AR(OAR_F64, 0, 3), oar_add_scalar(AR(OAR_F64, 1, 3), 50)}), 0),
              concat_0);
    CHECK_REF(oar_concat(2, ((oar_tensor *[]){AR(OAR_F64, 2, 2, 1), oar_add_scalar(AR(OAR_F64, 2, 2, 2), 10)}), -1),
              concat_neg);
    oar_tensor *x23b = oar_add_scalar(x23, 10), *x23c = oar_add_scalar(x23, 20);
    CHECK_REF(oar_stack(2, ((oar_tensor *[]){x23, x23b}), 1), stack_1);
    CHECK_REF(oar_stack(3, ((oar_tensor *[]){x23, x23b, x23c}), -1), stack_last);
    CHECK_REF(oar_pad(x23, 4, DIMS(1, 2, 0, 1), OAR_PAD_CONSTANT, 7), pad_const);
    CHECK_REF(oar_pad(AR(OAR_F64, 1, 3, 4), 4, DIMS(-1, 2, 1, -2), OAR_PAD_CONSTANT, 0), pad_const_neg);
    CHECK_REF(oar_pad(AR(OAR_F64, 1, 2, 4), 2, DIMS(2, 3), OAR_PAD_REFLECT, 0), pad_reflect);
    CHECK_REF(oar_pad(AR(OAR_F64, 1, 3, 4), 2, DIMS(-1, 2), OAR_PAD_REFLECT, 0), pad_reflect_neg);
    CHECK_REF(oar_pad(AR(OAR_F64, 1, 1, 3, 4), 4, DIMS(1, 2, 2, 1), OAR_PAD_REFLECT, 0), pad_reflect_2d);
    CHECK_REF(oar_pad(AR(OAR_F64, 1, 2, 3), 2, DIMS(2, 3), OAR_PAD_REPLICATE, 0), pad_replicate);
    CHECK_REF(oar_pad(AR(OAR_F64, 1, 1, 2, 3), 4, DIMS(2, 1, 1, 3), OAR_PAD_REPLICATE, 0), pad_replicate_2d);
    CHECK_REF(oar_pad(T(x34), 2, DIMS(1, 1), OAR_PAD_CONSTANT, -1), pad_t);
    CHECK_REF(oar_flip(x234, 2, DIMS(0, -1)), flip_02);
    CHECK_REF(oar_flip(T(x34), 1, DIMS(1)), flip_t);
    CHECK_REF(oar_flip(x234, 3, DIMS(0, 1, 2)), flip_all);
    CHECK_REF(oar_roll(x34, 2, DIMS(1, -2), DIMS(0, 1)), roll_2d);
    CHECK_REF(oar_roll(x23, 1, DIMS(3), NULL), roll_flat);
    CHECK_REF(oar_roll(x34, 2, DIMS(1, 2), DIMS(1, 1)), roll_same_dim);
    CHECK_REF(oar_roll(T(x34), 1, DIMS(5), DIMS(0)), roll_t);
    CHECK_REF(oar_repeat(AR(OAR_F64, 2, 2), 2, DIMS(2, 3)), repeat_2d);
    CHECK_REF(oar_repeat(AR(OAR_F64, 3), 3, DIMS(2, 1, 2)), repeat_more);
    CHECK_REF(oar_repeat(AR(OAR_F64, 1, 2, 1, 2, 1), 8, DIMS(2, 1, 3, 1, 2, 2, 2, 2)), repeat_big);
    CHECK_REF(oar_tril(x34, 0), tril_0);
    CHECK_REF(oar_tril(x34, 1), tril_1);
    CHECK_REF(oar_tril(AR(OAR_F64, 2, 3, 3), -1), tril_m1_b);
    CHECK_REF(oar_triu(x34, 0), triu_0);
    CHECK_REF(oar_triu(x34, -1), triu_m1);
    CHECK_REF(oar_triu(T(x34), 2), triu_2_t);
    /* more inputs than one dispatch takes (OARI_MAX_IN): grouped */
    oar_tensor *many[600];
    for (int i = 0; i < 600; i++) many[i] = oar_full(OAR_I64, SHAPE(1, 2), i);
    oar_tensor *big = oar_concat(600, many, 0);
    CHECK(same_shape(big, SHAPE(600, 2)));
    double *bv = test_values(big);
    int bad = !bv;
    for (int i = 0; bv && i < 1200; i++) bad += bv[i] != i / 2;
    CHECK(bad == 0);
    free(bv);
    /* split and chunk */
    oar_tensor *parts[4] = {0};
    oar_tensor *x5 = AR(OAR_F64, 5);
    CHECK(oar_split(x5, 2, 0, 4, parts) == 3);
    CHECK_VALUES(parts[0], ((double[]){0, 1}), 2, 0);
    CHECK_VALUES(parts[2], ((double[]){4}), 1, 0);
    CHECK(oar_split(x5, 2, 0, 1, parts) == 3); /* count even when max_out is smaller */
    CHECK(oar_chunk(AR(OAR_F64, 6), 4, 0, 4, parts) == 3);
    CHECK_VALUES(parts[1], ((double[]){2, 3}), 2, 0);
    CHECK(oar_chunk(T(x34), 2, 1, 4, parts) == 2);
    CHECK_VALUES(parts[1], ((double[]){8, 9, 10, 11}), 4, 0);
    CHECK(oar_tensor_shares_storage(parts[1], x34));
    oar_pool_pop(p);
}

/* ---- views share storage; writes through views reach the base ------------------------ */

static void test_views_share_storage(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *x = AR(OAR_F32, 3, 4);
    oar_tensor *views[] = {
        oar_reshape(x, SHAPE(2, 6)), oar_permute(x, DIMS(1, 0)), oar_transpose(x, 0, 1),
        oar_expand(oar_unsqueeze(x, 0), SHAPE(5, 3, 4)), oar_squeeze(oar_unsqueeze(x, 1), 1),
        oar_flatten(x, 0, 1), oar_slice(x, 1, 0, 4, 2), oar_diagonal(x, 0, 0, 1),
        oar_reshape(oar_slice(x, 0, 1, 3, 1), SHAPE(8)), oar_reshape(T(x), SHAPE(4, 1, 3)),
    };
    for (size_t i = 0; i < sizeof views / sizeof *views; i++) CHECK(oar_tensor_shares_storage(views[i], x));
    /* reshape of a transposed tensor into an incompatible shape copies */
    oar_tensor *c = oar_reshape(T(x), SHAPE(12));
    CHECK(c && !oar_tensor_shares_storage(c, x));
    CHECK_VALUES(c, ((double[]){0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}), 12, 0);
    /* writes through a strided slice and a diagonal show in the base */
    CHECK(oar_fill_(oar_slice(x, 1, 1, 4, 2), -1) == 0);
    CHECK(oar_copy_(oar_diagonal(x, 0, 0, 1), oar_full(OAR_F32, SHAPE(3), 9)) == 0);
    CHECK_VALUES(x, ((double[]){9, -1, 2, -1, 4, 9, 6, -1, 8, -1, 9, -1}), 12, 0);
    /* write through a reshaped transposed view */
    CHECK(oar_fill_(oar_slice(oar_reshape(T(x), SHAPE(4, 1, 3)), 0, 0, 1, 1), 5) == 0);
    CHECK_VALUES(oar_slice(x, 1, 0, 1, 1), ((double[]){5, 5, 5}), 3, 0);
    /* split pieces are views too */
    oar_tensor *parts[2];
    CHECK(oar_split(x, 2, 0, 2, parts) == 2);
    CHECK(oar_tensor_shares_storage(parts[1], x));
    CHECK(oar_fill_(parts[1], 3) == 0);
    CHECK_VALUES(oar_slice(x, 0, 2, 3, 1), ((double[]){3, 3, 3, 3}), 4, 0);
    /* size-1 dims come and go as views on any strides (expanded, sliced, transposed) */
    oar_tensor *ex = oar_expand(oar_slice(x, 0, 0, 1, 1), SHAPE(3, 4));
    oar_tensor *ue = oar_unsqueeze(ex, 1), *us = oar_squeeze(oar_unsqueeze(T(oar_slice(x, 1, 1, 4, 2)), 0), 0);
    CHECK(oar_tensor_shares_storage(ue, x) && same_shape(ue, SHAPE(3, 1, 4)));
    CHECK(oar_tensor_shares_storage(us, x) && same_shape(us, SHAPE(2, 3)));
    CHECK(oar_tensor_shares_storage(oar_reshape(ex, SHAPE(3, 2, 2)), x));
    oar_tensor *fl = oar_flatten(ex, 0, 1); /* stride 0 dims cannot merge: a copy */
    CHECK(fl && !oar_tensor_shares_storage(fl, x) && same_shape(fl, SHAPE(12)));
    CHECK_VALUES(oar_slice(fl, 0, 0, 12, 5), ((double[]){5, -1, 2}), 3, 0);
    /* geometry of views */
    oar_tensor *e = oar_expand(AR(OAR_F32, 3, 1), SHAPE(2, 3, 4));
    CHECK(e && oar_tensor_strides(e)[0] == 0 && oar_tensor_strides(e)[2] == 0);
    oar_tensor *s = oar_slice(x, 1, 1, 4, 2);
    CHECK(s && oar_tensor_strides(s)[1] == 2 && oar_tensor_offset(s) == 1);
    oar_tensor *dg = oar_diagonal(x, -1, 0, 1);
    CHECK(dg && oar_tensor_strides(dg)[0] == 5 && oar_tensor_offset(dg) == 4);
    oar_pool_pop(p);
}

/* ---- every dtype ------------------------------------------------------------------- */

static void test_all_dtypes(void) {
    for (int dt = 0; dt < OAR_DTYPE_COUNT; dt++) {
        oar_pool *p = oar_pool_push();
        oar_dtype d = (oar_dtype)dt;
        oar_tensor *x34 = AR(d, 3, 4), *x234 = AR(d, 2, 3, 4), *x23 = AR(d, 2, 3), *x37 = AR(d, 3, 7);
        CHECK(oar_tensor_dtype(x34) == d);
        CHECK_REF(oar_reshape(T(x34), SHAPE(2, 6)), reshape_t);
        CHECK_REF(oar_contiguous(oar_permute(x234, DIMS(2, 0, 1))), permute);
        CHECK_REF(oar_contiguous(oar_expand(AR(d, 3, 1), SHAPE(2, 3, 4))), expand);
        CHECK_REF(oar_slice(x37, 1, 1, -1, 2), slice_step);
        CHECK_REF(oar_diagonal(x234, 1, 0, 2), diag_3d);
        oar_tensor *b = oar_cast(oar_add_scalar(T(AR(OAR_F64, 2, 2)), 100), d);
        oar_tensor *r = oar_concat(2, (oar_tensor *[]){x23, b}, 1);
        CHECK(r && oar_tensor_dtype(r) == d);
        CHECK_REF(r, concat_t);
        CHECK_REF(oar_pad(x23, 4, DIMS(1, 2, 0, 1), OAR_PAD_CONSTANT, 7), pad_const);
        CHECK_REF(oar_pad(AR(d, 1, 1, 3, 4), 4, DIMS(1, 2, 2, 1), OAR_PAD_REFLECT, 0), pad_reflect_2d);
        CHECK_REF(oar_pad(AR(d, 1, 2, 3), 2, DIMS(2, 3), OAR_PAD_REPLICATE, 0), pad_replicate);
        CHECK_REF(oar_flip(x234, 2, DIMS(0, 2)), flip_02);
        CHECK_REF(oar_flip(T(x34), 1, DIMS(1)), flip_t);
        CHECK_REF(oar_roll(x34, 2, DIMS(1, -2), DIMS(0, 1)), roll_2d);
        CHECK_REF(oar_repeat(AR(d, 2, 2), 2, DIMS(2, 3)), repeat_2d);
        CHECK_REF(oar_tril(x34, 1), tril_1);
        CHECK_REF(oar_triu(T(x34), 2), triu_2_t);
        oar_pool_pop(p);
    }
}

static void test_complex_parts(void) {
    oar_pool *p = oar_pool_push();
    double v[12];
    for (int i = 0; i < 6; i++) v[2 * i] = i, v[2 * i + 1] = -10.0 * i;
    oar_tensor *z = oar_tensor_from_data(v, OAR_C128, 2, (int64_t[]){2, 3});
    oar_tensor *r = oar_concat(2, (oar_tensor *[]){oar_flip(z, 1, DIMS(1)), oar_pad(T(z), 2, DIMS(0, 1), OAR_PAD_REFLECT, 0)}, 0);
    /* flip(z): rows [2 1 0] [5 4 3]; pad(T(z), reflect right 1): T is 3x2 [[0 3][1 4][2 5]] -> [[0 3 0]...]
     * shapes differ (2x3 vs 3x3) along dim 0 only: concat -> 5x3 */
    CHECK(same_shape(r, SHAPE(5, 3)));
    double want_re[15] = {2, 1, 0, 5, 4, 3, 0, 3, 0, 1, 4, 1, 2, 5, 2};
    double got[30] = {0};
    CHECK(r && oar_tensor_to_host(r, got, sizeof got) == 0);
    for (int i = 0; i < 15; i++) {
        CHECK_NEAR(got[2 * i], want_re[i], 0);
        CHECK_NEAR(got[2 * i + 1], -10 * want_re[i], 0);
    }
    /* c64 with a complex fill: real part only (the value is a double) */
    oar_tensor *z64 = oar_cast(z, OAR_C64);
    oar_tensor *t = oar_tril(oar_roll(z64, 1, DIMS(1), DIMS(1)), 0);
    float g64[12] = {0};
    CHECK(t && oar_tensor_to_host(t, g64, sizeof g64) == 0);
    double want64[6] = {2, 0, 0, 5, 3, 0};
    for (int i = 0; i < 6; i++) {
        CHECK_NEAR(g64[2 * i], want64[i], 0);
        CHECK_NEAR(g64[2 * i + 1], -10 * want64[i], 0);
    }
    oar_pool_pop(p);
}

static void test_concat_promotion(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *i = AR(OAR_I32, 2), *f = AR(OAR_F32, 1), *b = AR(OAR_BOOL, 2), *l = AR(OAR_I64, 1);
    oar_tensor *h = AR(OAR_F16, 1), *bf = AR(OAR_BF16, 1), *c = AR(OAR_C64, 1), *dd = AR(OAR_F64, 1);
    oar_tensor *r = oar_concat(2, (oar_tensor *[]){i, f}, 0);
    CHECK(r && oar_tensor_dtype(r) == OAR_F32);
    CHECK_VALUES(r, ((double[]){0, 1, 0}), 3, 0);
    r = oar_concat(2, (oar_tensor *[]){b, l}, 0);
    CHECK(r && oar_tensor_dtype(r) == OAR_I64);
    CHECK_VALUES(r, ((double[]){0, 1, 0}), 3, 0);
    r = oar_concat(2, (oar_tensor *[]){h, bf}, 0);
    CHECK(r && oar_tensor_dtype(r) == OAR_F32);
    r = oar_concat(3, (oar_tensor *[]){l, c, dd}, 0);
    CHECK(r && oar_tensor_dtype(r) == OAR_C128);
    r = oar_stack(2, (oar_tensor *[]){h, h}, 0);
    CHECK(r && oar_tensor_dtype(r) == OAR_F16 && same_shape(r, SHAPE(2, 1)));
    oar_pool_pop(p);
}

/* ---- empty tensors ---------------------------------------------------------------------- */

static void test_empty(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *e = AR(OAR_F32, 0, 3);
    CHECK(same_shape(oar_reshape(e, SHAPE(3, 0)), SHAPE(3, 0)));
    CHECK(same_shape(oar_reshape(e, SHAPE(-1, 3)), SHAPE(0, 3)));
    CHECK(same_shape(oar_reshape(T(e), SHAPE(0)), SHAPE(0)));
    CHECK(same_shape(oar_expand(AR(OAR_F32, 1, 0), SHAPE(4, 0)), SHAPE(4, 0)));
    CHECK(same_shape(oar_expand(AR(OAR_F32, 2, 1), SHAPE(2, 0)), SHAPE(2, 0)));
    CHECK(same_shape(oar_slice(AR(OAR_F32, 3, 4), 1, 3, 1, 1), SHAPE(3, 0)));
    CHECK(same_shape(oar_diagonal(e, 0, 0, 1), SHAPE(0)));
    CHECK(same_shape(oar_diagonal(AR(OAR_F32, 2, 3), 5, 0, 1), SHAPE(0)));
    CHECK(same_shape(oar_flip(e, 1, DIMS(0)), SHAPE(0, 3)));
    CHECK(same_shape(oar_roll(e, 1, DIMS(2), DIMS(1)), SHAPE(0, 3)));
    CHECK(same_shape(oar_roll(e, 1, DIMS(2), DIMS(0)), SHAPE(0, 3)));
    CHECK(same_shape(oar_tril(e, 0), SHAPE(0, 3)));
    CHECK(same_shape(oar_triu(T(e), 0), SHAPE(3, 0)));
    CHECK(same_shape(oar_pad(e, 2, DIMS(1, 1), OAR_PAD_CONSTANT, 1), SHAPE(0, 5)));
    CHECK_VALUES(oar_pad(e, 4, DIMS(0, 0, 1, 1), OAR_PAD_CONSTANT, 4), ((double[]){4, 4, 4, 4, 4, 4}), 6, 0);
    CHECK(same_shape(oar_repeat(AR(OAR_F32, 2), 2, DIMS(0, 3)), SHAPE(0, 6)));
    CHECK(same_shape(oar_concat(2, (oar_tensor *[]){e, e}, 0), SHAPE(0, 3)));
    CHECK(same_shape(oar_concat(2, (oar_tensor *[]){e, e}, 1), SHAPE(0, 6)));
    /* legacy: 1-d empty tensors are skipped beside others */
    CHECK_REF(oar_concat(3, ((oar_tensor *[]){AR(OAR_F64, 2, 3), AR(OAR_F64, 0), oar_add_scalar(T(AR(OAR_F64, 2, 2)), 100)}), 1),
              concat_t);
    CHECK(same_shape(oar_stack(2, (oar_tensor *[]){e, e}, 1), SHAPE(0, 2, 3)));
    oar_tensor *parts[4] = {0};
    CHECK(oar_split(e, 2, 0, 4, parts) == 1 && same_shape(parts[0], SHAPE(0, 3)));
    CHECK(oar_chunk(e, 3, 0, 4, parts) == 3 && same_shape(parts[2], SHAPE(0, 3)));
    oar_pool_pop(p);
}

/* ---- large inputs: the parallel paths agree with closed forms --------------------------- */

static void test_large(void) {
    oar_pool *p = oar_pool_push();
    const int64_t R = 300, C = 257;
    oar_tensor *x = AR(OAR_F32, R, C);
    oar_tensor *f = oar_flip(x, 1, DIMS(1));
    oar_tensor *rl = oar_roll(T(x), 2, DIMS(7, -3), DIMS(0, 1));  /* [C, R] */
    oar_tensor *pd = oar_pad(x, 4, DIMS(3, 2, 1, 1), OAR_PAD_REFLECT, 0);
    oar_tensor *cc = oar_concat(2, (oar_tensor *[]){x, T(oar_slice(T(x), 1, 0, 5, 1))}, 0); /* [R+5, C] */
    oar_tensor *tl = oar_tril(x, 3);
    double *vf = test_values(f), *vr = test_values(rl), *vp = test_values(pd), *vc = test_values(cc),
           *vt = test_values(tl);
    CHECK(vf && vr && vp && vc && vt);
    int bad = 0;
    for (int64_t i = 0; vf && vr && vp && vc && vt && i < R; i++)
        for (int64_t j = 0; j < C; j++) {
            bad += vf[i * C + j] != (double)(i * C + (C - 1 - j));
            bad += vc[i * C + j] != (double)(i * C + j);
            bad += vt[i * C + j] != (j <= i + 3 ? (double)(i * C + j) : 0);
        }
    for (int64_t i = 0; vr && i < C; i++)
        for (int64_t j = 0; j < R; j++) {
            int64_t si = ((i - 7) % C + C) % C, sj = ((j + 3) % R + R) % R; /* T(x)[si][sj] = x[sj][si] */
            bad += vr[i * R + j] != (double)(sj * C + si);
        }
    for (int64_t i = 0; vp && i < R + 2; i++)
        for (int64_t j = 0; j < C + 5; j++) {
            int64_t si = i - 1, sj = j - 3;
            si = si < 0 ? -si : si >= R ? 2 * (R - 1) - si : si;
            sj = sj < 0 ? -sj : sj >= C ? 2 * (C - 1) - sj : sj;
            bad += vp[i * (C + 5) + j] != (double)(si * C + sj);
        }
    for (int64_t i = 0; vc && i < 5; i++)
        for (int64_t j = 0; j < C; j++) bad += vc[(R + i) * C + j] != (double)(i * C + j);
    CHECK(bad == 0);
    free(vf), free(vr), free(vp), free(vc), free(vt);
    oar_pool_pop(p);
}

/* ---- gradient rules, called directly on their definitions ----------------------------- */

/* Runs op's gradient rule for output gradient arange(numel)+1 (f64). */
static oar_tensor *rule(oari_op op, const oari_attrs *a, int n_in, oar_tensor *const *in,
                        oar_tensor *out, int which) {
    if (!out) return NULL;
    oari_meta in_meta[4], out_meta;
    for (int i = 0; i < n_in; i++) oari_meta_from(&in_meta[i], in[i]);
    oari_meta_from(&out_meta, out);
    oar_tensor *gout = oar_add_scalar(ar(OAR_F64, out->ndim, out->shape), 1);
    bool needs[4] = {true, true, true, true};
    oar_tensor *gin[4] = {0};
    oar_tensor *none[4] = {0};
    oari_grad_ctx g = {.op = op, .attrs = a, .n_in = n_in, .n_out = 1, .in = none,
                       .in_meta = in_meta, .out = none, .out_meta = &out_meta, .gout = &gout,
                       .needs = needs, .gin = gin};
    if (oari_op_defs[op]->grad(&g)) return NULL;
    return gin[which];
}

static void test_grad_rules(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *x234 = AR(OAR_F64, 2, 3, 4), *x34 = AR(OAR_F64, 3, 4), *x37 = AR(OAR_F64, 3, 7);
    oar_tensor *x23 = AR(OAR_F64, 2, 3), *x22 = AR(OAR_F64, 2, 2);
    oari_attrs a;
    a = (oari_attrs){.ni = 2, .i = {4, 6}};
    CHECK_REF(rule(OARI_OP_view, &a, 1, &x234, oar_reshape(x234, SHAPE(4, 6)), 0), g_view);
    a = (oari_attrs){.ni = 3, .i = {2, 0, 1}};
    CHECK_REF(rule(OARI_OP_permute, &a, 1, &x234, oar_permute(x234, DIMS(2, 0, 1)), 0), g_permute);
    if (oar_sum) {
        oar_tensor *x31 = AR(OAR_F64, 3, 1);
        a = (oari_attrs){.ni = 3, .i = {2, 3, 4}};
        CHECK_REF(rule(OARI_OP_expand, &a, 1, &x31, oar_expand(x31, SHAPE(2, 3, 4)), 0), g_expand);
    }
    a = (oari_attrs){.ni = 4, .i = {1, 1, 6, 2}};
    CHECK_REF(rule(OARI_OP_slice, &a, 1, &x37, oar_slice(x37, 1, 1, 6, 2), 0), g_slice);
    a = (oari_attrs){.ni = 3, .i = {1, 0, 2}};
    CHECK_REF(rule(OARI_OP_diagonal, &a, 1, &x234, oar_diagonal(x234, 1, 0, 2), 0), g_diag);
    a = (oari_attrs){.ni = 1, .i = {1}};
    oar_tensor *cin[2] = {x23, x22};
    oar_tensor *cat = oar_concat(2, cin, 1);
    CHECK_REF(rule(OARI_OP_concat, &a, 2, cin, cat, 0), g_concat_a);
    CHECK_REF(rule(OARI_OP_concat, &a, 2, cin, cat, 1), g_concat_b);
    oar_tensor *x134 = AR(OAR_F64, 1, 3, 4), *x1134 = AR(OAR_F64, 1, 1, 3, 4);
    a = (oari_attrs){.ni = 5, .nf = 1, .i = {0, -1, 2, 1, -2}};
    CHECK_REF(rule(OARI_OP_pad, &a, 1, &x134, oar_pad(x134, 4, DIMS(-1, 2, 1, -2), OAR_PAD_CONSTANT, 0), 0),
              g_pad_const);
    a = (oari_attrs){.ni = 5, .nf = 1, .i = {1, 1, 2, 2, 1}};
    oar_tensor *pr = oar_pad(x1134, 4, DIMS(1, 2, 2, 1), OAR_PAD_REFLECT, 0);
    CHECK_REF(rule(OARI_OP_pad, &a, 1, &x1134, pr, 0), g_pad_reflect);
    a = (oari_attrs){.ni = 3, .nf = 1, .i = {2, 3, 1}};
    CHECK_REF(rule(OARI_OP_pad, &a, 1, &x23, oar_pad(x23, 2, DIMS(3, 1), OAR_PAD_REPLICATE, 0), 0),
              g_pad_replicate);
    a = (oari_attrs){.ni = 1, .i = {5}};
    CHECK_REF(rule(OARI_OP_flip, &a, 1, &x234, oar_flip(x234, 2, DIMS(0, 2)), 0), g_flip);
    a = (oari_attrs){.ni = 4, .i = {1, 0, 2, 1}};
    CHECK_REF(rule(OARI_OP_roll, &a, 1, &x34, oar_roll(x34, 2, DIMS(1, -2), DIMS(0, 1)), 0), g_roll);
    a = (oari_attrs){.ni = 1, .i = {1}};
    CHECK_REF(rule(OARI_OP_tril, &a, 1, &x34, oar_tril(x34, 1), 0), g_tril);
    a = (oari_attrs){.ni = 1, .i = {-1}};
    CHECK_REF(rule(OARI_OP_triu, &a, 1, &x34, oar_triu(x34, -1), 0), g_triu);

    /* the transposes: forward values and their own rules (second order) */
    oar_tensor *gy = oar_add_scalar(AR(OAR_F64, 3, 3), 1);
    a = (oari_attrs){.ni = 6, .i = {1, 1, 6, 2, 3, 7}};
    oar_tensor *sb = oari_call1(OARI_OP_slice_backward, gy, &a);
    CHECK_REF(sb, slice_bwd);
    CHECK_REF(rule(OARI_OP_slice_backward, &a, 1, &gy, sb, 0), g2_slice);
    gy = oar_add_scalar(AR(OAR_F64, 3, 2), 1);
    a = (oari_attrs){.ni = 6, .i = {1, 0, 2, 2, 3, 4}};
    oar_tensor *db = oari_call1(OARI_OP_diagonal_backward, gy, &a);
    CHECK_REF(db, diag_bwd);
    CHECK_REF(rule(OARI_OP_diagonal_backward, &a, 1, &gy, db, 0), g2_diag);
    gy = oar_add_scalar(AR(OAR_F64, 2), 1);
    a = (oari_attrs){.ni = 5, .i = {-1, 0, 1, 3, 4}};
    CHECK_REF(oari_call1(OARI_OP_diagonal_backward, gy, &a), diag_bwd_m1);
    gy = oar_add_scalar(AR(OAR_F64, 1, 1, 6, 7), 1);
    a = (oari_attrs){.ni = 5, .nf = 1, .i = {1, 1, 2, 2, 1}};
    oar_tensor *pb = oari_call1(OARI_OP_pad_backward, gy, &a);
    CHECK_REF(pb, pad_reflect_bwd);
    CHECK_REF(rule(OARI_OP_pad_backward, &a, 1, &gy, pb, 0), g2_pad_reflect);
    /* pad_backward on a transposed f32 gradient (replicate (3, 1) of [2, 3] -> [2, 7]) */
    gy = oar_add_scalar(AR(OAR_F32, 2, 7), 1);
    a = (oari_attrs){.ni = 3, .nf = 1, .i = {2, 3, 1}};
    CHECK_REF(oari_call1(OARI_OP_pad_backward, T(oar_contiguous(T(gy))), &a), pad_replicate_bwd);
    CHECK_REF(oari_call1(OARI_OP_pad_backward, oar_cast(gy, OAR_BF16), &a), pad_replicate_bwd);
    CHECK_REF(oari_call1(OARI_OP_pad_backward, oar_cast(gy, OAR_C128), &a), pad_replicate_bwd);
    CHECK_FAILS(oari_call1(OARI_OP_pad_backward, oar_cast(gy, OAR_I32), &a), "floating or complex");
    oar_pool_pop(p);
}

/* ---- end to end through the autograd engine: first order against PyTorch,
 * second order (the rule's own rule) against the forward op ------------------------ */

typedef oar_tensor *(*unary_fn)(oar_tensor *x);
static oar_tensor *f_view(oar_tensor *x) { return oar_reshape(x, SHAPE(4, 6)); }
static oar_tensor *f_reshape_t(oar_tensor *x) { return oar_reshape(T(x), SHAPE(2, 6)); }
static oar_tensor *f_permute(oar_tensor *x) { return oar_permute(x, DIMS(2, 0, 1)); }
static oar_tensor *f_expand(oar_tensor *x) { return oar_expand(x, SHAPE(2, 3, 4)); }
static oar_tensor *f_slice(oar_tensor *x) { return oar_slice(x, 1, 1, 6, 2); }
static oar_tensor *f_diag(oar_tensor *x) { return oar_diagonal(x, 1, 0, 2); }
static oar_tensor *f_pad_const(oar_tensor *x) { return oar_pad(x, 4, DIMS(-1, 2, 1, -2), OAR_PAD_CONSTANT, 0); }
static oar_tensor *f_pad_reflect(oar_tensor *x) { return oar_pad(x, 4, DIMS(1, 2, 2, 1), OAR_PAD_REFLECT, 0); }
static oar_tensor *f_pad_replicate(oar_tensor *x) { return oar_pad(x, 2, DIMS(3, 1), OAR_PAD_REPLICATE, 0); }
static oar_tensor *f_flip(oar_tensor *x) { return oar_flip(x, 2, DIMS(0, 2)); }
static oar_tensor *f_flip_t(oar_tensor *x) { return oar_flip(T(x), 1, DIMS(1)); }
static oar_tensor *f_roll(oar_tensor *x) { return oar_roll(x, 2, DIMS(1, -2), DIMS(0, 1)); }
static oar_tensor *f_tril(oar_tensor *x) { return oar_tril(x, 1); }
static oar_tensor *f_triu(oar_tensor *x) { return oar_triu(x, -1); }
static oar_tensor *f_repeat(oar_tensor *x) { return oar_repeat(x, 3, DIMS(2, 1, 3)); }
static oar_tensor *f_stack(oar_tensor *x) { return oar_stack(2, (oar_tensor *[]){x, T(x)}, 1); }

/* arange(numel) + 1 shaped like t (f64). */
static oar_tensor *ramp_like(oar_tensor *t) {
    return oar_add_scalar(ar(OAR_F64, oar_tensor_ndim(t), oar_tensor_shape(t)), 1);
}

static void grad_case(const char *what, oar_tensor *x0, unary_fn f, const double *want,
                      const int64_t *shape, int nd, int64_t n, int line) {
    oar_pool *p = oar_pool_push();
    oar_tensor *x = oar_clone(x0);
    CHECK(oar_tensor_set_requires_grad(x, true) == 0);
    oar_tensor *y = f(x);
    oar_tensor *g = ramp_like(y), *gr = NULL, *gg = NULL;
    CHECK(oar_tensor_set_requires_grad(g, true) == 0);
    int st = oar_grad(1, &y, &g, 1, &x, true, false, &gr);
    if (st) fprintf(stderr, "line %d: %s: grad failed: %s\n", line, what, oar_last_error());
    check_ref(what, gr, want, shape, nd, n, __FILE__, line);
    /* d <J^T g, w> / dg = J w = f(w) for these linear maps */
    oar_tensor *w = ramp_like(x0);
    st = gr ? oar_grad(1, &gr, &w, 1, &g, false, false, &gg) : -1;
    if (st) fprintf(stderr, "line %d: %s: second order failed: %s\n", line, what, oar_last_error());
    oar_no_grad_push();
    oar_tensor *fw = f(w);
    oar_no_grad_pop();
    double *v = test_values(fw);
    if (v && fw) test_expect_values(what, gg, v, oar_tensor_numel(fw), 0, __FILE__, line);
    else CHECK(!"forward of w failed");
    free(v);
    oar_pool_pop(p);
}
#define GRAD_CASE(x, f, name) \
    grad_case(#f, x, f, ref_##name, ref_##name##_shape, ref_##name##_ndim, ref_##name##_numel, __LINE__)

static void test_autograd(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *x234 = AR(OAR_F64, 2, 3, 4), *x34 = AR(OAR_F64, 3, 4), *x37 = AR(OAR_F64, 3, 7);
    GRAD_CASE(x234, f_view, g_view);
    GRAD_CASE(x34, f_reshape_t, g_reshape_t);
    GRAD_CASE(x234, f_permute, g_permute);
    if (oar_sum) GRAD_CASE(AR(OAR_F64, 3, 1), f_expand, g_expand);
    if (oar_sum) GRAD_CASE(AR(OAR_F64, 2, 2), f_repeat, g_repeat);
    GRAD_CASE(x37, f_slice, g_slice);
    GRAD_CASE(x234, f_diag, g_diag);
    GRAD_CASE(AR(OAR_F64, 1, 3, 4), f_pad_const, g_pad_const);
    GRAD_CASE(AR(OAR_F64, 1, 1, 3, 4), f_pad_reflect, g_pad_reflect);
    GRAD_CASE(AR(OAR_F64, 2, 3), f_pad_replicate, g_pad_replicate);
    GRAD_CASE(x234, f_flip, g_flip);
    GRAD_CASE(x34, f_flip_t, g_flip_t);
    GRAD_CASE(x34, f_roll, g_roll);
    GRAD_CASE(x34, f_tril, g_tril);
    GRAD_CASE(x34, f_triu, g_triu);
    GRAD_CASE(AR(OAR_F64, 3, 3), f_stack, g_stack);
    /* concat: both inputs, one of them transposed */
    oar_tensor *a = oar_clone(AR(OAR_F64, 2, 3)), *b = oar_clone(AR(OAR_F64, 2, 2));
    CHECK(oar_tensor_set_requires_grad(a, true) == 0 && oar_tensor_set_requires_grad(b, true) == 0);
    oar_tensor *y = oar_concat(2, (oar_tensor *[]){a, T(T(b))}, 1);
    oar_tensor *gr[2] = {0};
    CHECK(oar_grad(1, &y, (oar_tensor *[]){ramp_like(y)}, 2, (oar_tensor *[]){a, b}, false, false, gr) == 0);
    CHECK_REF(gr[0], g_concat_a);
    CHECK_REF(gr[1], g_concat_b);
    oar_pool_pop(p);
}

/* ---- bad input ------------------------------------------------------------------------------ */

static void test_bad_input(void) {
    oar_pool *p = oar_pool_push();
    oar_tensor *x = AR(OAR_F32, 3, 4), *s = oar_scalar_of(1, OAR_F32);
    CHECK_FAILS(oar_reshape(x, SHAPE(-1, -1)), "cannot reshape");
    CHECK_FAILS(oar_reshape(x, SHAPE(5, 3)), "cannot reshape");
    CHECK_FAILS(oar_reshape(x, SHAPE(5, -1)), "cannot reshape");
    CHECK_FAILS(oar_reshape(x, SHAPE(0, -1)), "cannot reshape");
    CHECK_FAILS(oar_reshape(x, SHAPE(-2, 6)), "cannot reshape");
    CHECK_FAILS(oar_reshape(x, 9, DIMS(1, 1, 1, 1, 1, 1, 1, 1, 12)), "rank 9");
    CHECK_FAILS(oar_reshape(NULL, SHAPE(12)), "NULL");
    CHECK_FAILS(oar_permute(x, DIMS(0, 0)), "more than once");
    CHECK_FAILS(oar_permute(x, DIMS(0, 2)), "out of range");
    CHECK_FAILS(oar_transpose(x, 0, 2), "out of range");
    CHECK_FAILS(oar_expand(x, SHAPE(3, 5)), "cannot expand");
    CHECK_FAILS(oar_expand(x, SHAPE(4)), "at least the rank");
    CHECK_FAILS(oar_expand(x, SHAPE(-1, 3, 4)), "invalid size");
    CHECK_FAILS(oar_squeeze(x, 2), "out of range");
    CHECK_FAILS(oar_unsqueeze(x, 3), "out of range");
    CHECK_FAILS(oar_unsqueeze(AR(OAR_F32, 1, 1, 1, 1, 1, 1, 1, 1), 0), "exceed");
    CHECK_FAILS(oar_flatten(x, 1, 0), "start_dim");
    CHECK_FAILS(oar_slice(x, 0, 0, 2, 0), "step must be positive");
    CHECK_FAILS(oar_slice(x, 0, 0, 2, -1), "step must be positive");
    CHECK_FAILS(oar_slice(x, 2, 0, 2, 1), "out of range");
    CHECK_FAILS(oar_slice(s, 0, 0, 1, 1), "0-d");
    CHECK_FAILS(oar_diagonal(x, 0, 1, -1), "identical");
    CHECK_FAILS(oar_diagonal(AR(OAR_F32, 3), 0, 0, 1), "fewer than 2");
    CHECK_FAILS(oar_concat(2, ((oar_tensor *[]){x, AR(OAR_F32, 2, 3)}), 0), "shapes must match");
    CHECK_FAILS(oar_concat(2, ((oar_tensor *[]){x, AR(OAR_F32, 3, 4, 1)}), 0), "shapes must match");
    CHECK_FAILS(oar_concat(2, ((oar_tensor *[]){s, s}), 0), "zero-dimensional");
    CHECK_FAILS(oar_concat(0, NULL, 0), "non-empty");
    CHECK_FAILS(oar_concat(2, ((oar_tensor *[]){x, x}), 2), "out of range");
    CHECK_FAILS(oar_concat(2, ((oar_tensor *[]){x, NULL}), 0), "NULL");
    CHECK_FAILS(oar_stack(2, ((oar_tensor *[]){x, AR(OAR_F32, 4, 3)}), 0), "equal size");
    CHECK_FAILS(oar_stack(2, ((oar_tensor *[]){x, x}), 3), "out of range");
    oar_tensor *parts[2];
    CHECK_FAILS(oar_split(x, 0, 0, 2, parts) >= 0, "split_size must be positive");
    CHECK_FAILS(oar_split(x, 1, 0, 2, NULL) >= 0, "outs is NULL");
    CHECK_FAILS(oar_chunk(x, 0, 0, 2, parts) >= 0, "must be positive");
    CHECK_FAILS(oar_pad(x, 3, DIMS(1, 1, 1), OAR_PAD_CONSTANT, 0), "even number");
    CHECK_FAILS(oar_pad(x, 6, DIMS(1, 1, 1, 1, 1, 1), OAR_PAD_CONSTANT, 0), "even number");
    CHECK_FAILS(oar_pad(x, 2, DIMS(4, 0), OAR_PAD_REFLECT, 0), "should be less than");
    CHECK_FAILS(oar_pad(x, 2, DIMS(-3, -2), OAR_PAD_CONSTANT, 0), "invalid size");
    CHECK_FAILS(oar_pad(AR(OAR_F32, 2, 0), 2, DIMS(1, 1), OAR_PAD_REPLICATE, 0), "invalid size");
    CHECK_FAILS(oar_pad(x, 2, DIMS(1, 1), (oar_pad_mode)7, 0), "invalid mode");
    CHECK_FAILS(oar_flip(x, 2, DIMS(0, -2)), "multiple times");
    CHECK_FAILS(oar_flip(x, 1, DIMS(2)), "out of range");
    CHECK_FAILS(oar_roll(x, 1, DIMS(1), DIMS(2)), "out of range");
    CHECK_FAILS(oar_roll(x, 2, DIMS(1, 1), NULL), "without dims");
    CHECK_FAILS(oar_repeat(x, 1, DIMS(2)), "can not be smaller");
    CHECK_FAILS(oar_repeat(x, 2, DIMS(2, -1)), "negative repeat");
    CHECK_FAILS(oar_tril(AR(OAR_F32, 3), 0), "at least 2 dimensions");
    CHECK_FAILS(oar_triu(s, 0), "at least 2 dimensions");
    /* a NULL in a chain keeps the first message */
    CHECK_FAILS(oar_split(oar_reshape(x, SHAPE(5, -1)), 1, 0, 2, parts) >= 0, "cannot reshape");
    CHECK_FAILS(oar_flip(oar_tril(oar_reshape(x, SHAPE(7, -1)), 0), 1, DIMS(0)), "cannot reshape");
    CHECK_FAILS(oar_concat(2, ((oar_tensor *[]){x, oar_slice(x, 0, 0, 1, 0)}), 0), "step must be positive");
    CHECK_FAILS(oar_stack(1, ((oar_tensor *[]){oar_permute(x, DIMS(1, 1))}), 0), "more than once");
    oar_pool_pop(p);
}

int main(void) {
    RUN(test_views_values);
    RUN(test_copies_values);
    RUN(test_views_share_storage);
    RUN(test_all_dtypes);
    RUN(test_complex_parts);
    RUN(test_concat_promotion);
    RUN(test_empty);
    RUN(test_large);
    RUN(test_grad_rules);
    RUN(test_autograd);
    RUN(test_bad_input);
    return test_summary();
}

/* The fused quantized linear layer: the predictor's fuse_qlinear pass
 * (src/graph/passes/fuse_qlinear.c) turns each layer oar_graph_quantize
 * emits (quantize, qmatmul, cast, scale, bias, relu) into one qlinear
 * node; the fused graph gives the unfused graph's values to f32 rounding,
 * on the VNNI kernel and on the exact loop (a CPU without VNNI, a build
 * without oneDNN), at batches and widths that leave every tail (k not a
 * multiple of 4, n of 16, rows of 4 and of the 64-row chunk). Also int8
 * activations, the fused graph saved and loaded, a layer the pass must
 * leave alone, and the op's refusals. */
#include "test.h"

#include "backends/cpu/cpu_qlinear.h"
#include "ops/op.h"

#include <oar/infer.h>
#include <oar/quant.h>
#include <unistd.h>

enum { D = 37, H = 70, C = 19 };

/* Caps oar's int8 kernels at k (cpu_qlinear.h); false, and no cap, where
 * the CPU lacks k. */
static bool use_kernel(int k) {
    oari_cpu_qkernel_cap((oari_qkernel)k);
    if (oari_cpu_qkernel() == (oari_qkernel)k) return true;
    oari_cpu_qkernel_cap(OARI_QK_VNNI);
    return false;
}

static uint64_t rng = 4242;
static double uniform(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return ((rng >> 11) + 0.5) / 9007199254740992.0;
}

static oar_tensor *rand_f32(int64_t r, int64_t c, double a) {
    double *v = malloc((size_t)(r * c) * sizeof *v);
    for (int64_t i = 0; i < r * c; i++) v[i] = a * (2 * uniform() - 1);
    oar_tensor *t = oar_cast(oar_tensor_from_data(v, OAR_F64, c ? 2 : 1, (int64_t[]){r, c}), OAR_F32);
    free(v);
    return t;
}

typedef struct mlp { oar_tensor *W1, *b1, *W2, *b2, *W3; } mlp;

/* D -> H relu -> C relu -> C (no bias) */
static int mlp_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    mlp *m = ctx;
    oar_tensor *h = oar_relu(oar_add(oar_matmul(in[0], m->W1), m->b1));
    h = oar_relu(oar_add(oar_matmul(h, m->W2), m->b2));
    out[0] = oar_matmul(h, m->W3);
    return out[0] ? 0 : -1;
}

static oar_tensor *run_graph(const oar_graph *g, oar_tensor *x) {
    oar_executor *ex = oar_executor_new(g);
    oar_tensor *y = NULL;
    CHECK(ex && oar_executor_run(ex, &x, &y) == 0);
    oar_tensor *r = y ? oar_clone(y) : NULL;
    oar_executor_free(ex);
    return r;
}

static double max_abs(oar_tensor *t) { return t ? oar_tensor_item(oar_amax(oar_abs(t), 0, NULL, false)) : NAN; }
static double max_diff(oar_tensor *a, oar_tensor *b) { return a && b ? max_abs(oar_sub(a, b)) : NAN; }

static void test_fused_mlp(void) {
    oar_pool *pool = oar_pool_push();
    mlp m = {rand_f32(D, H, 0.4), rand_f32(1, H, 0.2), rand_f32(H, C, 0.3), rand_f32(1, C, 0.2),
             rand_f32(C, C, 0.5)};
    m.b1 = oar_reshape(m.b1, 1, (int64_t[]){H}), m.b2 = oar_reshape(m.b2, 1, (int64_t[]){C});
    oar_graph_input_spec spec = {.name = "x", .dtype = OAR_F32, .ndim = 2, .shape = {-1, D}};
    oar_graph *g = oar_trace(mlp_fn, &m, 1, &spec, 1, NULL);
    oar_tensor *batches[2] = {rand_f32(50, D, 2.0), rand_f32(50, D, 2.0)};
    CHECK(g && oar_graph_quantize(g, &(oar_quantize_config){.n_batches = 2, .batches = batches}) == 3);
    oar_graph *f = g ? oar_graph_clone(g) : NULL;
    CHECK(f && oar_graph_run_pass(f, "fuse_qlinear") == 3);
    CHECK(oar_graph_verify(f) == 0);
    CHECK(oar_graph_count_op(f, "qlinear") == 3 && oar_graph_count_op(f, "qmatmul") == 0);
    CHECK(oar_graph_count_op(f, "cast") == 0 && oar_graph_count_op(f, "relu") == 0);
    CHECK(oar_graph_count_op(f, "add") == 0 && oar_graph_count_op(f, "mul") == 0);
    /* the input's quantize stays; the hidden layers' move into the layers before */
    CHECK(oar_graph_count_op(f, "quantize") == 1);
    CHECK(oar_graph_run_pass(f, "fuse_qlinear") == 0); /* nothing left to fuse */
    oar_predictor *p = g ? oar_predictor_from_graph(g, &(oar_predictor_config){.optimize = true}) : NULL;
    CHECK(p && oar_graph_count_op(oar_predictor_graph(p), "qlinear") == 3);
    const int64_t rows[] = {1, 3, 4, 5, 64, 67, 131};
    for (int ref = OARI_QK_REFERENCE; ref <= OARI_QK_VNNI; ref++) { /* (the unfused graph on the exact loop) */
        for (size_t r = 0; r < sizeof rows / sizeof *rows && use_kernel(ref); r++) {
            oar_tensor *x = rand_f32(rows[r], D, 2.0);
            use_kernel(OARI_QK_REFERENCE);
            oar_tensor *want = run_graph(g, x);
            use_kernel(ref);
            oar_tensor *got = run_graph(f, x), *served = NULL;
            CHECK(p && oar_predictor_run(p, &x, &served) == 0);
            double mag = max_abs(want), err = max_diff(got, want), err_p = max_diff(served, want);
            if (!(err <= 1e-6 * mag) || !(err_p <= 1e-6 * mag))
                fprintf(stderr, "rows %lld, reference %d: fused %g, predictor %g off (magnitude %g)\n",
                        (long long)rows[r], ref, err, err_p, mag);
            CHECK(mag > 0 && err <= 1e-6 * mag && err_p <= 1e-6 * mag);
            oar_tensor_release(served);
        }
    }
    use_kernel(OARI_QK_VNNI);
    /* the fused graph saves and loads (the packed weight is a plain int8 constant) */
    char dir[] = "/tmp/oar-test-qfuse-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    CHECK(f && oar_graph_save(f, dir) == 0);
    oar_graph *l = oar_graph_load(dir);
    CHECK(l && oar_graph_count_op(l, "qlinear") == 3);
    if (l) {
        oar_tensor *x = rand_f32(9, D, 2.0), *want = run_graph(f, x), *got = run_graph(l, x);
        CHECK(max_diff(got, want) == 0);
    }
    oar_graph_free(l);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    oar_predictor_free(p);
    oar_graph_free(f);
    oar_graph_free(g);
    oar_pool_pop(pool);
}

/* The op called directly: uint8 and int8 x, 3-d x, per-tensor scale, no
 * bias, against qmatmul and the same f32 steps. */
static oar_tensor *pack_ref(oar_tensor *w, oar_tensor **sums) {
    int64_t k = oar_tensor_shape(w)[0], n = oar_tensor_shape(w)[1], kb = (k + 3) / 4, nb = (n + 15) / 16;
    double *v = test_values(w);
    int8_t *p = calloc((size_t)(nb * kb * 64), 1);
    int32_t *s = calloc((size_t)n, sizeof *s);
    for (int64_t r = 0; r < k; r++)
        for (int64_t j = 0; j < n; j++) {
            p[((j / 16) * kb + r / 4) * 64 + (j % 16) * 4 + r % 4] = (int8_t)v[r * n + j];
            s[j] += (int32_t)v[r * n + j];
        }
    oar_tensor *t = oar_tensor_from_data(p, OAR_I8, 4, (int64_t[]){nb, kb, 16, 4});
    *sums = oar_tensor_from_data(s, OAR_I32, 1, &n);
    free(v), free(p), free(s);
    return t;
}

static oar_tensor *qlinear_op(oar_tensor *x, oar_tensor *wp, oar_tensor *ws, oar_tensor *s, oar_tensor *b,
                              int64_t zp, int64_t relu) {
    oari_attrs a = oari_attrs_ints(2, (int64_t[]){zp, relu});
    return oari_call(OARI_OP_qlinear, 7, (oar_tensor *[]){x, wp, ws, s, b, NULL, NULL}, &a);
}

/* The same, its output quantized (dtype dt, div: ONNX's division). */
static oar_tensor *qlinear_q(oar_tensor *x, oar_tensor *wp, oar_tensor *ws, oar_tensor *s, oar_tensor *b,
                             int64_t zp, int64_t relu, oar_tensor *ys, oar_tensor *yz, oar_dtype dt, int div) {
    oari_attrs a = oari_attrs_ints(4, (int64_t[]){zp, relu, dt, div});
    return oari_call(OARI_OP_qlinear, 7, (oar_tensor *[]){x, wp, ws, s, b, ys, yz}, &a);
}

static bool same_values(oar_tensor *a, oar_tensor *b) {
    return a && b && oar_tensor_numel(a) == oar_tensor_numel(b) &&
           oar_tensor_item(oar_amax(oar_abs(oar_sub(oar_cast(a, OAR_I64), oar_cast(b, OAR_I64))), 0, NULL,
                                    false)) == 0;
}

static void test_op(void) {
    oar_pool *pool = oar_pool_push();
    const int64_t ks[] = {1, 5, 64, 259}, ns[] = {1, 16, 33, 100};
    for (int ref = OARI_QK_REFERENCE; ref <= OARI_QK_VNNI; ref++) {
        for (int c = 0; c < 4 && use_kernel(ref); c++) {
            int64_t k = ks[c], n = ns[c];
            oar_tensor *w = oar_quantize_per_tensor(rand_f32(k, n, 1.0), 1.0 / 127, 0, OAR_I8), *ws;
            oar_tensor *wp = pack_ref(w, &ws);
            oar_tensor *s = oar_reshape(oar_abs(rand_f32(1, n, 0.01)), 1, &n);
            oar_tensor *b = oar_reshape(rand_f32(1, n, 1.0), 1, &n);
            oar_tensor *x = rand_f32(2 * 7, k, 1.0);
            for (int i8 = 0; i8 < 2; i8++) {
                int64_t zp = i8 ? -3 : 131;
                oar_tensor *xq = oar_reshape(oar_quantize_per_tensor(x, 0.01, zp, i8 ? OAR_I8 : OAR_U8), 3,
                                             (int64_t[]){2, 7, k});
                use_kernel(OARI_QK_REFERENCE); /* the reference sums on the exact loop */
                oar_tensor *acc = oar_cast(oar_qmatmul(xq, zp, w), OAR_F32);
                use_kernel(ref);
                oar_tensor *want = oar_relu(oar_add(oar_mul(acc, s), b));
                oar_tensor *got = qlinear_op(xq, wp, ws, s, b, zp, 1);
                CHECK(got && oar_tensor_ndim(got) == 3 && oar_tensor_shape(got)[2] == n);
                CHECK(max_diff(got, want) <= 1e-6 * max_abs(want));
                /* requantized: quantize's values exactly, uint8 and int8, product and division */
                for (int div = 0; div < 2; div++)
                    for (int odt = 0; odt < 2; odt++) {
                        double sy = 0.37 * max_abs(want) / 127 + 1e-3;
                        int64_t zy = odt ? -5 : 9;
                        oar_tensor *ys = oar_full(div ? OAR_F32 : OAR_F64, 0, NULL, sy);
                        oar_tensor *yz = oar_full(OAR_I64, 0, NULL, (double)zy);
                        oar_dtype dt = odt ? OAR_I8 : OAR_U8;
                        oar_tensor *wq = oar_quantize(got, ys, yz, -1, dt); /* (ONNX's division) */
                        if (!div) wq = oar_quantize_per_tensor(got, sy, zy, dt);
                        oar_tensor *gq = qlinear_q(xq, wp, ws, s, b, zp, 1, ys, yz, dt, div);
                        CHECK(gq && oar_tensor_dtype(gq) == dt && same_values(gq, wq));
                    }
                /* one scale, no bias, no relu */
                oar_tensor *s1 = oar_full(OAR_F32, 0, NULL, 0.003);
                want = oar_mul(acc, s1);
                got = qlinear_op(xq, wp, ws, s1, NULL, zp, 0);
                CHECK(max_diff(got, want) <= 1e-6 * max_abs(want));
                /* strided x: the exact loop */
                oar_tensor *xt = oar_transpose(oar_contiguous(oar_transpose(xq, 0, 1)), 0, 1);
                CHECK(max_diff(qlinear_op(xt, wp, ws, s1, NULL, zp, 0), want) <= 1e-6 * max_abs(want));
            }
        }
    }
    use_kernel(OARI_QK_VNNI);
    /* an empty batch */
    oar_tensor *w = oar_full(OAR_I8, 2, (int64_t[]){8, 3}, 1), *ws, *wp = pack_ref(w, &ws);
    oar_tensor *s = oar_full(OAR_F32, 0, NULL, 1.0), *x = oar_full(OAR_U8, 2, (int64_t[]){0, 8}, 0);
    oar_tensor *y = qlinear_op(x, wp, ws, s, NULL, 0, 0);
    CHECK(y && oar_tensor_shape(y)[0] == 0 && oar_tensor_shape(y)[1] == 3);
    oar_pool_pop(pool);
}

/* Elements where a and b differ (all of them where the shapes differ). */
static int64_t n_differ(oar_tensor *a, oar_tensor *b) {
    if (!a || !b || oar_tensor_numel(a) != oar_tensor_numel(b)) return -1;
    int64_t n = oar_tensor_numel(a), bad = 0;
    double *va = test_values(a), *vb = test_values(b);
    for (int64_t i = 0; i < n; i++) bad += va[i] != vb[i];
    free(va), free(vb);
    return bad;
}

/* The requantizing epilogue in both its forms (cpu_qlinear.h: the short
 * one where oari_qfast_make bounds every value below 2^30, the full one
 * otherwise): the VNNI kernel with the short form allowed, the VNNI kernel
 * with it forced off and the exact loop give, byte for byte, quantize of
 * the unfused ops' f32 values. Widths that leave a masked tail of 16 (n 7,
 * 33, 100) and none (16, 64), rows past the 4-row tiles and the 64-row
 * chunk, k not a multiple of 4; per-column scales (some negative) and one
 * scale, with and without bias and relu, uint8 and int8 x and out, ONNX's
 * division; and constants that refuse the short form (a scale of 1e30: f /
 * sq past 2^63, which quantize sends to the low end, and infinite and
 * NaN biases), where the full form must run. (On a CPU without AVX512_VNNI all
 * three are the exact loop.) */
static void test_requant_forms(void) {
    oar_pool *pool = oar_pool_push();
    const int64_t ks[] = {5, 64, 259}, ns[] = {7, 16, 33, 64, 100}, ms[] = {14, 67};
    int64_t cases = 0, fast_cases = 0;
    for (int ci = 0; ci < 5; ci++) {
        const int64_t n = ns[ci], k = ks[ci % 3], m = ms[ci % 2];
        oar_tensor *w = oar_quantize_per_tensor(rand_f32(k, n, 1.0), 1.0 / 127, 0, OAR_I8), *ws;
        oar_tensor *wp = pack_ref(w, &ws);
        oar_tensor *x = rand_f32(m, k, 1.0);
        float *sv = malloc((size_t)n * sizeof *sv), *bv = malloc((size_t)n * sizeof *bv);
        /* per column, per column with negative scales, one scale and no bias, a scale of 1e30, infinite and NaN
         * biases */
        for (int kind = 0; kind < 5; kind++) {
            for (int64_t j = 0; j < n; j++) {
                sv[j] = (float)(0.002 + 0.0001 * (double)(j % 13)) * (kind == 1 && j % 2 ? -1.f : 1.f);
                bv[j] = (float)(0.3 * (double)(j % 7) - 0.9);
            }
            if (kind == 3) sv[n / 2] = 1e30f;
            if (kind == 4) bv[n - 1] = INFINITY, bv[0] = -INFINITY, bv[n / 2] = NAN;
            oar_tensor *s = kind == 2 ? oar_full(OAR_F32, 0, NULL, 0.0031) : oar_tensor_from_data(sv, OAR_F32, 1, &n);
            oar_tensor *b = kind == 2 ? NULL : oar_tensor_from_data(bv, OAR_F32, 1, &n);
            for (int i8 = 0; i8 < 2; i8++) {
                int64_t zp = i8 ? -3 : 131;
                oar_tensor *xq = oar_quantize_per_tensor(x, 0.01, zp, i8 ? OAR_I8 : OAR_U8);
                use_kernel(OARI_QK_REFERENCE);
                oar_tensor *acc = oar_cast(oar_qmatmul(xq, zp, w), OAR_F32);
                use_kernel(OARI_QK_VNNI);
                /* an output scale that puts most values inside the byte range and some past both ends */
                const double sy = (0.0025 * max_abs(acc) + 0.9) / 300;
                for (int relu = 0; relu < 2; relu++) {
                    oar_tensor *f = oar_mul(acc, s);
                    if (b) f = oar_add(f, b);
                    if (relu) f = oar_relu(f);
                    for (int div = 0; div < 2; div++)
                        for (int odt = 0; odt < 2; odt++) {
                            const int64_t zy = odt ? -20 : 30;
                            const oar_dtype dt = odt ? OAR_I8 : OAR_U8;
                            oar_tensor *ys = oar_full(div ? OAR_F32 : OAR_F64, 0, NULL, sy);
                            oar_tensor *yz = oar_full(OAR_I64, 0, NULL, (double)zy);
                            oar_tensor *want = div ? oar_quantize(f, ys, yz, -1, dt)
                                                   : oar_quantize_per_tensor(f, sy, zy, dt);
                            /* the choice the kernel makes, from the same constants */
                            oari_qout o = {.on = true, .div = div != 0, .inv = 1.f / (float)sy, .sq = (float)sy,
                                           .zq = (float)zy, .lo = odt ? -128.f : 0.f, .hi = odt ? 127.f : 255.f};
                            oari_qfast qf;
                            bool fast = oari_qfast_make(&o, kind == 2 ? (const float[]){0.0031f} : sv,
                                                        kind == 2 ? 1 : n, b ? bv : NULL, n, relu, &qf);
                            CHECK(fast == (kind < 3));
                            /* the kernels' own check (AVX-512 where the CPU has it) agrees */
                            oari_qfast qk;
                            CHECK(oari_cpu_qfast(&o, kind == 2 ? (const float[]){0.0031f} : sv, kind == 2 ? 1 : n,
                                                 b ? bv : NULL, n, relu, &qk) == fast);
                            CHECK(!fast || (qk.lower == qf.lower && qk.upper == qf.upper && qk.zq == qf.zq));
                            if (kind == 0 && !relu) { /* the clamps and the rounding all exercised */
                                double *v = test_values(want);
                                int64_t at_lo = 0, at_hi = 0, inside = 0;
                                for (int64_t i = 0; v && i < m * n; i++) {
                                    at_lo += v[i] == o.lo, at_hi += v[i] == o.hi;
                                    inside += v[i] > o.lo && v[i] < o.hi;
                                }
                                free(v);
                                CHECK(at_lo > 0 && at_hi > 0 && inside > m * n / 4);
                                if (!(at_lo > 0 && at_hi > 0 && inside > m * n / 4))
                                    fprintf(stderr, "n %lld, int8 out %d: %lld at the low end, %lld at the high, "
                                            "%lld inside\n", (long long)n, odt, (long long)at_lo, (long long)at_hi,
                                            (long long)inside);
                            }
                            cases++, fast_cases += fast;
                            /* 0: VNNI, short form where allowed; 1: VNNI, full form; 2: the exact loop; 3: AVX2
                             * (each where the CPU has it) */
                            for (int mode = 0; mode < 4; mode++) {
                                if (!use_kernel(mode == 2 ? OARI_QK_REFERENCE : mode == 3 ? OARI_QK_AVX2
                                                                                         : OARI_QK_VNNI))
                                    continue;
                                oari_cpu_qfast_force_off(mode == 1);
                                oar_tensor *got = qlinear_q(xq, wp, ws, s, b, zp, relu, ys, yz, dt, div);
                                int64_t bad = n_differ(got, want);
                                CHECK(got && oar_tensor_dtype(got) == dt && bad == 0);
                                if (bad != 0)
                                    fprintf(stderr, "m %lld k %lld n %lld, kind %d, int8 x %d, relu %d, div %d, "
                                            "int8 out %d, mode %d: %lld of %lld bytes differ\n", (long long)m,
                                            (long long)k, (long long)n, kind, i8, relu, div, odt, mode,
                                            (long long)bad, (long long)(m * n));
                            }
                            oari_cpu_qfast_force_off(false);
                            use_kernel(OARI_QK_VNNI);
                        }
                }
            }
        }
        free(sv), free(bv);
    }
    CHECK(cases == 5 * 5 * 16 && fast_cases == 5 * 3 * 16);
    oar_pool_pop(pool);
}

static void test_bad_input(void) {
    oar_pool *pool = oar_pool_push();
    oar_tensor *w = oar_full(OAR_I8, 2, (int64_t[]){8, 3}, 1), *ws, *wp = pack_ref(w, &ws);
    oar_tensor *s = oar_full(OAR_F32, 0, NULL, 1.0), *x = oar_full(OAR_U8, 2, (int64_t[]){2, 8}, 3);
    CHECK(qlinear_op(x, wp, ws, s, NULL, 0, 0) != NULL);
    CHECK_FAILS(qlinear_op(oar_full(OAR_F32, 2, (int64_t[]){2, 8}, 3), wp, ws, s, NULL, 0, 0),
                "qlinear: x must be uint8 or int8");
    CHECK_FAILS(qlinear_op(x, oar_cast(wp, OAR_U8), ws, s, NULL, 0, 0), "the weight must be int8");
    CHECK_FAILS(qlinear_op(x, wp, oar_cast(ws, OAR_I64), s, NULL, 0, 0), "column sums int32");
    CHECK_FAILS(qlinear_op(x, wp, ws, oar_cast(s, OAR_F64), NULL, 0, 0), "scale and bias f32");
    CHECK_FAILS(qlinear_op(x, wp, ws, s, NULL, 256, 0), "zero point 256 of x is outside");
    CHECK_FAILS(qlinear_op(oar_cast(x, OAR_I8), wp, ws, s, NULL, 200, 0), "zero point 200 of x is outside");
    CHECK_FAILS(qlinear_op(x, wp, ws, s, NULL, 0, 2), "activation 2");
    CHECK_FAILS(qlinear_op(x, wp, ws, NULL, NULL, 0, 0), "are required");
    CHECK_FAILS(qlinear_op(oar_full(OAR_U8, 2, (int64_t[]){2, 9}, 3), wp, ws, s, NULL, 0, 0), "do not multiply");
    CHECK_FAILS(qlinear_op(oar_full(OAR_U8, 1, (int64_t[]){8}, 3), wp, ws, s, NULL, 0, 0), "do not multiply");
    CHECK_FAILS(qlinear_op(x, wp, oar_full(OAR_I32, 1, (int64_t[]){17}, 0), s, NULL, 0, 0), "do not multiply");
    CHECK_FAILS(qlinear_op(x, wp, ws, oar_full(OAR_F32, 1, (int64_t[]){2}, 1.0), NULL, 0, 0),
                "scale must be 0-d or [3]");
    CHECK_FAILS(qlinear_op(x, wp, ws, s, oar_full(OAR_F32, 2, (int64_t[]){1, 3}, 1.0), 0, 0), "the bias [3]");
    oari_attrs one = oari_attrs_ints(1, (int64_t[]){0});
    CHECK_FAILS(oari_call(OARI_OP_qlinear, 7, (oar_tensor *[]){x, wp, ws, s, NULL, NULL, NULL}, &one),
                "expected 2 integer attributes");
    CHECK_FAILS(oari_call(OARI_OP_qlinear, 5, (oar_tensor *[]){x, wp, ws, s, NULL}, &one), "expected 7");
    oar_tensor *ys = oar_full(OAR_F32, 0, NULL, 0.1), *yz = oar_full(OAR_I64, 0, NULL, 3);
    CHECK(qlinear_q(x, wp, ws, s, NULL, 0, 0, ys, yz, OAR_U8, 0) != NULL);
    CHECK_FAILS(qlinear_q(x, wp, ws, s, NULL, 0, 0, ys, yz, OAR_F32, 0), "must be uint8 or int8");
    CHECK_FAILS(qlinear_q(x, wp, ws, s, NULL, 0, 0, NULL, yz, OAR_U8, 0), "inputs 5 and 6");
    CHECK_FAILS(qlinear_q(x, wp, ws, s, NULL, 0, 0, ys, oar_cast(yz, OAR_I32), OAR_U8, 0), "inputs 5 and 6");
    CHECK_FAILS(qlinear_q(x, wp, ws, s, NULL, 0, 0, oar_full(OAR_F32, 1, (int64_t[]){2}, 0.1), yz, OAR_U8, 0),
                "inputs 5 and 6");
    CHECK_FAILS(qlinear_q(x, wp, ws, s, NULL, 0, 0, NULL, NULL, OAR_U8, 0), "inputs 5 and 6");
    oari_attrs two = oari_attrs_ints(2, (int64_t[]){0, 0});
    CHECK_FAILS(oari_call(OARI_OP_qlinear, 7, (oar_tensor *[]){x, wp, ws, s, NULL, ys, yz}, &two), "only then");
    CHECK_FAILS(qlinear_q(x, wp, ws, s, NULL, 0, 0, oar_full(OAR_F32, 0, NULL, 0.0), yz, OAR_U8, 0),
                "output scale 0 must be positive");
    CHECK_FAILS(qlinear_q(x, wp, ws, s, NULL, 0, 0, ys, oar_full(OAR_I64, 0, NULL, 300), OAR_U8, 0),
                "output zero point 300 is outside");
    oar_pool_pop(pool);
}

/* Layers the pass leaves alone: an int32 sum read twice, an f64 scale. */
static int two_reads_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    oar_tensor *w = ctx;
    oar_tensor *acc = oar_qmatmul(oar_quantize_per_tensor(in[0], 0.05, 7, OAR_U8), 7, w);
    out[0] = oar_mul(oar_cast(acc, OAR_F32), oar_full(OAR_F32, 0, NULL, 0.5));
    out[1] = acc;
    return out[0] && out[1] ? 0 : -1;
}
static int f64_scale_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    oar_tensor *w = ctx;
    oar_tensor *acc = oar_qmatmul(oar_quantize_per_tensor(in[0], 0.05, 7, OAR_U8), 7, w);
    out[0] = oar_mul(oar_cast(acc, OAR_F32), oar_full(OAR_F64, 1, (int64_t[]){5}, 0.5));
    return out[0] ? 0 : -1;
}

static void test_left_alone(void) {
    oar_pool *pool = oar_pool_push();
    oar_tensor *w = oar_full(OAR_I8, 2, (int64_t[]){6, 5}, 3);
    oar_graph_input_spec spec = {.name = "x", .dtype = OAR_F32, .ndim = 2, .shape = {-1, 6}};
    oar_graph *g = oar_trace(two_reads_fn, w, 1, &spec, 2, NULL);
    CHECK(g && oar_graph_run_pass(g, "fuse_qlinear") == 0 && oar_graph_count_op(g, "qmatmul") == 1);
    oar_graph_free(g);
    g = oar_trace(f64_scale_fn, w, 1, &spec, 1, NULL);
    CHECK(g && oar_graph_run_pass(g, "fuse_qlinear") == 0 && oar_graph_count_op(g, "qmatmul") == 1);
    oar_graph_free(g);
    oar_pool_pop(pool);
}

/* qconv2d over a batch too large for one block of patches (cpu_quant.c:
 * images in blocks of about 8 MB of patches; here one image a block), and
 * a batch of small images in one block, against conv2d in f64 on x - zp
 * (exact: the sums are integers far below 2^53). */
static void test_qconv2d_blocks(void) {
    oar_pool *pool = oar_pool_push();
    static const struct { int64_t x[4], w[4]; } cases[] = {
        {{3, 128, 64, 64}, {4, 128, 3, 3}}, /* 4096 x 1152 patch bytes an image: blocks of one */
        {{64, 1, 28, 28}, {16, 1, 3, 3}},   /* the demo CNN's first conv at batch 64: one block */
    };
    for (int t = 0; t < 2; t++) {
        const int64_t *xs = cases[t].x, *wsh = cases[t].w;
        oar_tensor *x = oar_reshape(oar_quantize_per_tensor(rand_f32(xs[0] * xs[1], xs[2] * xs[3], 1.0), 0.01, 100,
                                                            OAR_U8), 4, xs);
        oar_tensor *w = oar_reshape(oar_quantize_per_tensor(rand_f32(wsh[0] * wsh[1], wsh[2] * wsh[3], 1.0),
                                                            1.0 / 127, 0, OAR_I8), 4, wsh);
        oar_tensor *y = oar_qconv2d(x, 100, w, NULL, (int64_t[]){1, 1}, NULL, 1);
        oar_tensor *want = oar_conv2d(oar_sub(oar_cast(x, OAR_F64), oar_full(OAR_F64, 0, NULL, 100)),
                                      oar_cast(w, OAR_F64), NULL, (int64_t[]){1, 1}, (int64_t[]){1, 1},
                                      (int64_t[]){1, 1}, 1);
        CHECK(y && oar_tensor_dtype(y) == OAR_I32 && max_diff(oar_cast(y, OAR_F64), want) == 0);
    }
    oar_pool_pop(pool);
}

int main(void) {
    RUN(test_fused_mlp);
    RUN(test_op);
    RUN(test_requant_forms);
    RUN(test_bad_input);
    RUN(test_left_alone);
    RUN(test_qconv2d_blocks);
    return test_summary();
}

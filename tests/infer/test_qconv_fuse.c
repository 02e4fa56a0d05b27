/* The fused quantized conv layer: the predictor's fuse_qlinear pass
 * (src/graph/passes/fuse_qlinear.c) moves each per-tensor quantize up
 * through max pools and reshapes, then turns each conv oar_graph_quantize
 * emits (quantize, qconv2d, cast, scale, bias, relu, quantize) into one
 * qlinear_conv2d node and each pool into a qmax_pool2d on the bytes. The
 * fused graph gives the unfused graph's values (the demo CNN's shape and
 * odd ones: padding, stride 2 and 3, dilation, channels not multiples of
 * 4 or 16, rows wider and narrower than the kernel's 16-pixel panels,
 * batches of 1 to 64), on the VNNI kernel and on the exact loop; the ops
 * called directly against the unfused ops (quantized outputs bit for bit);
 * the graphs the pass must leave alone; the ops' refusals. */
#include "test.h"

#include "backends/cpu/cpu_qlinear.h"
#include "graph/ir.h"
#include "ops/op.h"

#include <oar/infer.h>
#include <oar/quant.h>
#include <unistd.h>

/* Caps oar's int8 kernels at k (cpu_qlinear.h); false, and no cap, where
 * the CPU lacks k. */
static bool use_kernel(int k) {
    oari_cpu_qkernel_cap((oari_qkernel)k);
    if (oari_cpu_qkernel() == (oari_qkernel)k) return true;
    oari_cpu_qkernel_cap(OARI_QK_VNNI);
    return false;
}

static uint64_t rng = 777;
static double uniform(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return ((rng >> 11) + 0.5) / 9007199254740992.0;
}

/* uniform in [-a, a), f32, of the given shape */
static oar_tensor *rand_t(int nd, const int64_t *shape, double a) {
    int64_t n = 1;
    for (int d = 0; d < nd; d++) n *= shape[d];
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = a * (2 * uniform() - 1);
    oar_tensor *t = oar_cast(oar_tensor_from_data(v, OAR_F64, nd, shape), OAR_F32);
    free(v);
    return t;
}

static oar_tensor *run_graph(const oar_graph *g, oar_tensor *x) {
    oar_executor *ex = oar_executor_new(g);
    oar_tensor *y = NULL;
    CHECK(ex && oar_executor_run(ex, &x, &y) == 0);
    oar_tensor *r = y ? oar_clone(y) : NULL;
    oar_executor_free(ex);
    return r;
}

static double max_abs(oar_tensor *t) {
    return t ? oar_tensor_item(oar_amax(oar_abs(oar_cast(t, OAR_F64)), 0, NULL, false)) : NAN;
}
static double max_diff(oar_tensor *a, oar_tensor *b) {
    return a && b ? max_abs(oar_sub(oar_cast(a, OAR_F64), oar_cast(b, OAR_F64))) : NAN;
}

/* ---- a small CNN: conv (bias) relu pool, conv relu pool, flatten, linear ---- */
typedef struct cnn {
    int64_t c[3], hw[2];
    int64_t stride[2], pad[2], dil[2], pool_k[2], pool_s[2], pool_p[2];
    oar_tensor *w[2], *b[2], *lw, *lb;
    int64_t flat;
} cnn;

static int cnn_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    cnn *m = ctx;
    oar_tensor *x = in[0];
    for (int l = 0; l < 2; l++) {
        int64_t st[2] = {m->stride[l], m->stride[l]}, pd[2] = {m->pad[l], m->pad[l]}, dl[2] = {m->dil[l], m->dil[l]};
        int64_t pk[2] = {m->pool_k[l], m->pool_k[l]}, ps[2] = {m->pool_s[l], m->pool_s[l]};
        int64_t pp[2] = {m->pool_p[l], m->pool_p[l]};
        x = oar_relu(oar_conv2d(x, m->w[l], m->b[l], st, pd, dl, 1));
        x = oar_max_pool2d(x, pk, ps, pp, (int64_t[]){1, 1}, false, NULL);
    }
    x = oar_reshape(x, 2, (int64_t[]){oar_tensor_shape(x)[0], m->flat});
    out[0] = oar_add(oar_matmul(x, m->lw), m->lb);
    return out[0] ? 0 : -1;
}

/* pools_fused: how many of the two pools are 2 x 2 stride 2 without padding,
 * and so go into their conv (qlinear_conv2d's attribute 12). */
static void cnn_case(const cnn *shape, const int64_t *batches, int n_batches, int pools_fused) {
    oar_pool *pool = oar_pool_push();
    cnn m = *shape;
    for (int l = 0; l < 2; l++) {
        m.w[l] = rand_t(4, (int64_t[]){m.c[l + 1], m.c[l], 3, 3}, 1.0 / sqrt(3.0 * (double)m.c[l]));
        m.b[l] = rand_t(1, (int64_t[]){m.c[l + 1]}, 0.1);
    }
    /* the flattened size: a probe through the f32 layers */
    m.flat = 1, m.lw = NULL;
    oar_tensor *probe = rand_t(4, (int64_t[]){1, m.c[0], m.hw[0], m.hw[1]}, 1.0);
    for (int l = 0; l < 2; l++) {
        int64_t st[2] = {m.stride[l], m.stride[l]}, pd[2] = {m.pad[l], m.pad[l]}, dl[2] = {m.dil[l], m.dil[l]};
        int64_t pk[2] = {m.pool_k[l], m.pool_k[l]}, ps[2] = {m.pool_s[l], m.pool_s[l]};
        int64_t pp[2] = {m.pool_p[l], m.pool_p[l]};
        probe = oar_max_pool2d(oar_relu(oar_conv2d(probe, m.w[l], m.b[l], st, pd, dl, 1)), pk, ps, pp,
                               (int64_t[]){1, 1}, false, NULL);
    }
    CHECK(probe != NULL);
    if (!probe) return (void)oar_pool_pop(pool);
    m.flat = oar_tensor_numel(probe);
    m.lw = rand_t(2, (int64_t[]){m.flat, 10}, 1.0 / sqrt((double)m.flat));
    m.lb = rand_t(1, (int64_t[]){10}, 0.1);
    oar_graph_input_spec spec = {.name = "x", .dtype = OAR_F32, .ndim = 4, .shape = {-1, m.c[0], m.hw[0], m.hw[1]}};
    oar_graph *g = oar_trace(cnn_fn, &m, 1, &spec, 1, NULL);
    oar_tensor *calib[2];
    for (int b = 0; b < 2; b++) calib[b] = rand_t(4, (int64_t[]){8, m.c[0], m.hw[0], m.hw[1]}, 1.0);
    CHECK(g && oar_graph_quantize(g, &(oar_quantize_config){.n_batches = 2, .batches = calib}) == 3);
    oar_graph *f = g ? oar_graph_clone(g) : NULL;
    /* 3 quantizes moved (pool 1; pool 2 and the reshape), 2 convs and the linear fused, the 2 x 2 pools
     * into their convs */
    int changes = f ? oar_graph_run_pass(f, "fuse_qlinear") : -1;
    CHECK(changes == 6 + pools_fused);
    CHECK(f && oar_graph_verify(f) == 0);
    CHECK(oar_graph_count_op(f, "qlinear_conv2d") == 2 && oar_graph_count_op(f, "qconv2d") == 0);
    CHECK(oar_graph_count_op(f, "qmax_pool2d") == 2 - pools_fused && oar_graph_count_op(f, "max_pool2d") == 0);
    CHECK(oar_graph_count_op(f, "qlinear") == 1 && oar_graph_count_op(f, "quantize") == 1);
    CHECK(oar_graph_count_op(f, "cast") == 0 && oar_graph_count_op(f, "mul") == 0 &&
          oar_graph_count_op(f, "add") == 0 && oar_graph_count_op(f, "relu") == 0);
    CHECK(oar_graph_run_pass(f, "fuse_qlinear") == 0); /* nothing left to do */
    oar_predictor *p = g ? oar_predictor_from_graph(g, &(oar_predictor_config){.optimize = true}) : NULL;
    CHECK(p && oar_graph_count_op(oar_predictor_graph(p), "qlinear_conv2d") == 2);
    for (int ref = OARI_QK_REFERENCE; ref <= OARI_QK_VNNI; ref++) { /* (the unfused graph on the exact loop) */
        for (int b = 0; b < n_batches && use_kernel(ref); b++) {
            oar_tensor *x = rand_t(4, (int64_t[]){batches[b], m.c[0], m.hw[0], m.hw[1]}, 1.0);
            use_kernel(OARI_QK_REFERENCE);
            oar_tensor *want = run_graph(g, x);
            use_kernel(ref);
            oar_tensor *got = run_graph(f, x), *served = NULL;
            CHECK(p && oar_predictor_run(p, &x, &served) == 0);
            double mag = max_abs(want), err = max_diff(got, want), err_p = max_diff(served, want);
            if (!(err <= 1e-6 * mag) || !(err_p <= 1e-6 * mag))
                fprintf(stderr, "cnn c %lld-%lld-%lld %lldx%lld, batch %lld, reference %d: fused %g, predictor %g "
                        "off (magnitude %g)\n", (long long)m.c[0], (long long)m.c[1], (long long)m.c[2],
                        (long long)m.hw[0], (long long)m.hw[1], (long long)batches[b], ref, err, err_p, mag);
            CHECK(mag > 0 && err <= 1e-6 * mag && err_p <= 1e-6 * mag);
            oar_tensor_release(served);
        }
    }
    use_kernel(OARI_QK_VNNI);
    /* the fused graph saves and loads (the packed weight is a plain int8 constant) */
    char dir[] = "/tmp/oar-test-qconv-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    CHECK(f && oar_graph_save(f, dir) == 0);
    oar_graph *l = oar_graph_load(dir);
    CHECK(l && oar_graph_count_op(l, "qlinear_conv2d") == 2 && oar_graph_count_op(l, "qmax_pool2d") == 2 - pools_fused);
    if (l && f) {
        oar_tensor *x = rand_t(4, (int64_t[]){2, m.c[0], m.hw[0], m.hw[1]}, 1.0);
        CHECK(max_diff(run_graph(l, x), run_graph(f, x)) == 0);
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

static void test_fused_cnn(void) {
    /* the demo CNN (bench_int8, examples/fashion_mnist.c): 1 -> 16 -> 32 on 28 x 28, pad 1, pools 2 */
    cnn demo = {.c = {1, 16, 32}, .hw = {28, 28}, .stride = {1, 1}, .pad = {1, 1}, .dil = {1, 1},
                .pool_k = {2, 2}, .pool_s = {2, 2}, .pool_p = {0, 0}};
    cnn_case(&demo, (int64_t[]){1, 3, 64}, 3, 2);
    /* odd channels, a 13 x 11 image, stride 2 and dilation 2, no padding then padding 2, a 3 x 3 pool
     * with padding 1 */
    cnn odd = {.c = {3, 5, 7}, .hw = {13, 11}, .stride = {2, 1}, .pad = {0, 2}, .dil = {1, 2},
               .pool_k = {3, 2}, .pool_s = {1, 2}, .pool_p = {1, 0}};
    cnn_case(&odd, (int64_t[]){1, 2, 5}, 3, 1); /* the second pool (on a 6 x 5 conv output) */
    /* rows wider than two panels (OW 37), 18 and 20 channels (tails of 4), stride 3 */
    cnn wide = {.c = {2, 18, 20}, .hw = {9, 37}, .stride = {1, 3}, .pad = {1, 1}, .dil = {1, 1},
                .pool_k = {2, 2}, .pool_s = {1, 1}, .pool_p = {0, 0}};
    cnn_case(&wide, (int64_t[]){1, 4}, 2, 0);
    /* the same with 2 x 2 pools, fused: three column panels (37 = 16 + 16 + 5), odd rows and columns */
    cnn wide2 = {.c = {2, 18, 20}, .hw = {9, 37}, .stride = {1, 1}, .pad = {1, 1}, .dil = {1, 1},
                 .pool_k = {2, 2}, .pool_s = {2, 2}, .pool_p = {0, 0}};
    cnn_case(&wide2, (int64_t[]){1, 3}, 2, 2);
}

/* ---- the ops called directly ---------------------------------------------------------- */

/* W [o, c, kh, kw] int8 packed as the pass packs it, and its row sums. */
static oar_tensor *pack_conv_ref(oar_tensor *w, oar_tensor **sums) {
    const int64_t *sh = oar_tensor_shape(w);
    int64_t o = sh[0], k = sh[1] * sh[2] * sh[3], kb = (k + 3) / 4;
    double *v = test_values(w);
    int8_t *p = calloc((size_t)(o * kb * 4), 1);
    int32_t *s = calloc((size_t)o, sizeof *s);
    for (int64_t r = 0; r < o; r++)
        for (int64_t j = 0; j < k; j++) p[r * kb * 4 + j] = (int8_t)v[r * k + j], s[r] += (int32_t)v[r * k + j];
    oar_tensor *t = oar_tensor_from_data(p, OAR_I8, 3, (int64_t[]){o, kb, 4});
    *sums = oar_tensor_from_data(s, OAR_I32, 1, &o);
    free(v), free(p), free(s);
    return t;
}

typedef struct conv_p { int64_t st[2], pd[2], dl[2], kh, kw; } conv_p;

static oar_tensor *qconv_op(oar_tensor *x, oar_tensor *wp, oar_tensor *ws, oar_tensor *s, oar_tensor *b, int64_t zp,
                            const conv_p *c, int64_t relu, oar_tensor *ys, oar_tensor *yz, oar_dtype dt, int div) {
    int64_t at[12] = {zp, c->st[0], c->st[1], c->pd[0], c->pd[1], c->dl[0], c->dl[1], c->kh, c->kw, relu, dt, div};
    oari_attrs a = oari_attrs_ints(ys ? 12 : 10, at);
    return oari_call(OARI_OP_qlinear_conv2d, 7, (oar_tensor *[]){x, wp, ws, s, b, ys, yz}, &a);
}

static bool same_values(oar_tensor *a, oar_tensor *b) {
    return a && b && oar_tensor_numel(a) == oar_tensor_numel(b) && max_diff(a, b) == 0;
}

static void test_op(void) {
    oar_pool *pool = oar_pool_push();
    static const struct { int64_t n, c, h, w, o; conv_p p; } cases[] = {
        {2, 1, 28, 28, 16, {{1, 1}, {1, 1}, {1, 1}, 3, 3}},  /* the demo's first conv */
        {3, 16, 14, 14, 32, {{1, 1}, {1, 1}, {1, 1}, 3, 3}}, /* its second */
        {2, 3, 11, 19, 5, {{2, 2}, {0, 1}, {1, 1}, 3, 3}},   /* stride 2, uneven padding */
        {1, 7, 9, 40, 6, {{1, 3}, {2, 1}, {2, 1}, 3, 2}},    /* stride 3, dilation, 3 x 2 kernel */
        {2, 2, 5, 5, 3, {{1, 1}, {0, 0}, {1, 1}, 1, 1}},     /* 1 x 1: K 2, one group of taps short */
        {1, 5, 6, 33, 9, {{2, 1}, {2, 2}, {1, 2}, 5, 5}},    /* 5 x 5, K 125 */
    };
    for (int ref = OARI_QK_REFERENCE; ref <= OARI_QK_VNNI; ref++) {
        for (size_t t = 0; t < sizeof cases / sizeof *cases && use_kernel(ref); t++) {
            const conv_p *cp = &cases[t].p;
            int64_t n = cases[t].n, c = cases[t].c, o = cases[t].o;
            int64_t xs[4] = {n, c, cases[t].h, cases[t].w}, wsh[4] = {o, c, cp->kh, cp->kw};
            oar_tensor *w = oar_quantize_per_tensor(rand_t(4, wsh, 1.0), 1.0 / 127, 0, OAR_I8), *ws;
            oar_tensor *wp = pack_conv_ref(w, &ws);
            oar_tensor *s = oar_abs(rand_t(1, &o, 0.01)), *b = rand_t(1, &o, 1.0);
            oar_tensor *s4 = oar_reshape(s, 4, (int64_t[]){1, o, 1, 1}), *b4 = oar_reshape(b, 4, (int64_t[]){1, o, 1, 1});
            oar_tensor *x = rand_t(4, xs, 1.0);
            for (int i8 = 0; i8 < 2; i8++) {
                int64_t zp = i8 ? -3 : 131;
                oar_tensor *xq = oar_quantize_per_tensor(x, 0.01, zp, i8 ? OAR_I8 : OAR_U8);
                use_kernel(OARI_QK_REFERENCE); /* the reference sums on the exact loop */
                oar_tensor *acc = oar_cast(oar_qconv2d(xq, zp, w, cp->st, cp->pd, cp->dl, 1), OAR_F32);
                use_kernel(ref);
                oar_tensor *want = oar_relu(oar_add(oar_mul(acc, s4), b4));
                oar_tensor *got = qconv_op(xq, wp, ws, s, b, zp, cp, 1, NULL, NULL, OAR_F32, 0);
                CHECK(got && oar_tensor_ndim(got) == 4 && oar_tensor_dtype(got) == OAR_F32);
                CHECK(same_values(got, want));
                if (!same_values(got, want))
                    fprintf(stderr, "case %zu, int8 %d, reference %d: %g off\n", t, i8, ref, max_diff(got, want));
                /* requantized: quantize's values exactly, uint8 and int8, product and division */
                for (int div = 0; div < 2; div++)
                    for (int odt = 0; odt < 2; odt++) {
                        double sy = 0.37 * max_abs(want) / 127 + 1e-3;
                        int64_t zy = odt ? -5 : 9;
                        oar_tensor *ys = oar_full(div ? OAR_F32 : OAR_F64, 0, NULL, sy);
                        oar_tensor *yz = oar_full(OAR_I64, 0, NULL, (double)zy);
                        oar_dtype dt = odt ? OAR_I8 : OAR_U8;
                        oar_tensor *wq = div ? oar_quantize(want, ys, yz, -1, dt)
                                             : oar_quantize_per_tensor(want, sy, zy, dt);
                        oar_tensor *gq = qconv_op(xq, wp, ws, s, b, zp, cp, 1, ys, yz, dt, div);
                        CHECK(gq && oar_tensor_dtype(gq) == dt && same_values(gq, wq));
                    }
                /* one scale, no bias, no relu */
                oar_tensor *s1 = oar_full(OAR_F32, 0, NULL, 0.003);
                want = oar_mul(acc, s1);
                CHECK(same_values(qconv_op(xq, wp, ws, s1, NULL, zp, cp, 0, NULL, NULL, OAR_F32, 0), want));
                /* a strided x (channels last in memory) */
                oar_tensor *xt = oar_permute(oar_contiguous(oar_permute(xq, (int64_t[]){0, 2, 3, 1})),
                                             (int64_t[]){0, 3, 1, 2});
                CHECK(same_values(qconv_op(xt, wp, ws, s1, NULL, zp, cp, 0, NULL, NULL, OAR_F32, 0), want));
            }
        }
    }
    use_kernel(OARI_QK_VNNI);
    /* an empty batch */
    conv_p c3 = {{1, 1}, {1, 1}, {1, 1}, 3, 3};
    oar_tensor *w = oar_full(OAR_I8, 4, (int64_t[]){4, 2, 3, 3}, 1), *ws, *wp = pack_conv_ref(w, &ws);
    oar_tensor *y = qconv_op(oar_full(OAR_U8, 4, (int64_t[]){0, 2, 5, 5}, 0), wp, ws, oar_full(OAR_F32, 0, NULL, 1),
                             NULL, 0, &c3, 0, NULL, NULL, OAR_F32, 0);
    CHECK(y && oar_tensor_shape(y)[0] == 0 && oar_tensor_shape(y)[1] == 4 && oar_tensor_shape(y)[3] == 5);
    oar_pool_pop(pool);
}

/* The requantizing epilogue in both its forms (cpu_qlinear.h: the short
 * one when the constants keep every value finite and below 2^30, the full
 * one otherwise, or forced on the VNNI kernel) gives quantize's values of
 * the unfused ops exactly: no relu and relu, negative scales (relu folded
 * into the clamp), and the constants that refuse the short form (a scale
 * of 1e30, an infinite bias: values past 2^63 and inf, which quantize
 * sends to the low end). */
static void test_requant_forms(void) {
    oar_pool *pool = oar_pool_push();
    const conv_p cp = {{1, 1}, {1, 1}, {1, 1}, 3, 3};
    const int64_t o = 32, xs[4] = {2, 16, 14, 14}, wsh[4] = {o, 16, 3, 3};
    oar_tensor *w = oar_quantize_per_tensor(rand_t(4, wsh, 1.0), 1.0 / 127, 0, OAR_I8), *ws;
    oar_tensor *wp = pack_conv_ref(w, &ws);
    oar_tensor *x = rand_t(4, xs, 1.0);
    float sv[32], bv[32];
    for (int kind = 0; kind < 4; kind++) { /* plain, negative scales, a scale of 1e30, an infinite bias */
        for (int j = 0; j < o; j++) {
            sv[j] = (float)(0.001 + 0.00005 * j) * (kind == 1 && j % 2 ? -1.f : 1.f);
            bv[j] = (float)(0.05 * (j % 7) - 0.15);
        }
        if (kind == 2) sv[3] = 1e30f;
        if (kind == 3) bv[5] = INFINITY, bv[6] = -INFINITY;
        oar_tensor *s = oar_tensor_from_data(sv, OAR_F32, 1, &o), *b = oar_tensor_from_data(bv, OAR_F32, 1, &o);
        oar_tensor *s4 = oar_reshape(s, 4, (int64_t[]){1, o, 1, 1}), *b4 = oar_reshape(b, 4, (int64_t[]){1, o, 1, 1});
        for (int i8 = 0; i8 < 2; i8++) {
            int64_t zp = i8 ? 5 : 120;
            oar_tensor *xq = oar_quantize_per_tensor(x, 0.01, zp, i8 ? OAR_I8 : OAR_U8);
            use_kernel(OARI_QK_REFERENCE);
            oar_tensor *acc = oar_cast(oar_qconv2d(xq, zp, w, cp.st, cp.pd, cp.dl, 1), OAR_F32);
            use_kernel(OARI_QK_VNNI);
            for (int relu = 0; relu < 2; relu++) {
                oar_tensor *f = oar_add(oar_mul(acc, s4), b4);
                if (relu) f = oar_relu(f);
                for (int odt = 0; odt < 2; odt++) {
                    oar_dtype dt = odt ? OAR_I8 : OAR_U8;
                    const double sy = 0.011;
                    const int64_t zy = odt ? -20 : 30;
                    oar_tensor *want = oar_quantize_per_tensor(f, sy, zy, dt);
                    /* with the 2 x 2 pool: quantize of the f32 pool (f non-decreasing in the sum where the
                     * scale is positive, non-increasing where negative) */
                    oar_tensor *want_p = oar_quantize_per_tensor(
                        oar_max_pool2d(f, (int64_t[]){2, 2}, (int64_t[]){2, 2}, (int64_t[]){0, 0}, (int64_t[]){1, 1},
                                       false, NULL),
                        sy, zy, dt);
                    /* ref 0: VNNI, the short form where it holds; 1: the exact loop; 2: VNNI, the full form;
                     * 3: AVX2 (each where the CPU has it) */
                    for (int ref = 0; ref < 4; ref++) {
                        if (!use_kernel(ref == 1 ? OARI_QK_REFERENCE : ref == 3 ? OARI_QK_AVX2 : OARI_QK_VNNI))
                            continue;
                        oari_cpu_qfast_force_off(ref == 2);
                        oar_tensor *ys = oar_full(OAR_F64, 0, NULL, sy), *yz = oar_full(OAR_I64, 0, NULL, (double)zy);
                        oar_tensor *got = qconv_op(xq, wp, ws, s, b, zp, &cp, relu, ys, yz, dt, 0);
                        CHECK(got && oar_tensor_dtype(got) == dt && same_values(got, want));
                        if (!same_values(got, want))
                            fprintf(stderr, "kind %d, int8 x %d, relu %d, int8 out %d, reference %d: %g off\n", kind,
                                    i8, relu, odt, ref, max_diff(got, want));
                        int64_t at[13] = {zp, 1, 1, 1, 1, 1, 1, 3, 3, relu, dt, 0, 1};
                        oari_attrs a = oari_attrs_ints(13, at);
                        oar_tensor *gp = oari_call(OARI_OP_qlinear_conv2d, 7, (oar_tensor *[]){xq, wp, ws, s, b, ys, yz}, &a);
                        CHECK(gp && oar_tensor_shape(gp)[2] == 7 && oar_tensor_shape(gp)[3] == 7 && same_values(gp, want_p));
                        if (!same_values(gp, want_p))
                            fprintf(stderr, "pooled: kind %d, int8 x %d, relu %d, int8 out %d, reference %d: %g off\n",
                                    kind, i8, relu, odt, ref, max_diff(gp, want_p));
                    }
                    use_kernel(OARI_QK_VNNI);
                    oari_cpu_qfast_force_off(false);
                }
            }
        }
    }
    oar_pool_pop(pool);
}

/* qmax_pool2d of quantize(x) is quantize of max_pool2d(x), uint8 and int8,
 * at the windows max_pool2d takes (2 x 2 on its fast path, 3 x 3 stride 2
 * padding 1, dilation, ceil mode), on a strided x too. */
static void test_qpool(void) {
    oar_pool *pool = oar_pool_push();
    static const struct { int64_t k[2], s[2], p[2], d[2]; bool ceil; } cases[] = {
        {{2, 2}, {2, 2}, {0, 0}, {1, 1}, false}, {{3, 3}, {2, 2}, {1, 1}, {1, 1}, false},
        {{2, 3}, {1, 2}, {1, 1}, {2, 1}, false}, {{3, 2}, {2, 2}, {0, 1}, {1, 1}, true},
    };
    oar_tensor *x = rand_t(4, (int64_t[]){2, 3, 11, 13}, 2.0);
    for (size_t t = 0; t < sizeof cases / sizeof *cases; t++)
        for (int i8 = 0; i8 < 2; i8++) {
            oar_dtype dt = i8 ? OAR_I8 : OAR_U8;
            oar_tensor *pooled = oar_max_pool2d(x, cases[t].k, cases[t].s, cases[t].p, cases[t].d, cases[t].ceil,
                                                NULL);
            oar_tensor *want = oar_quantize_per_tensor(pooled, 0.02, i8 ? 3 : 120, dt);
            oar_tensor *xq = oar_quantize_per_tensor(x, 0.02, i8 ? 3 : 120, dt);
            int64_t at[9] = {cases[t].k[0], cases[t].k[1], cases[t].s[0], cases[t].s[1], cases[t].p[0],
                             cases[t].p[1], cases[t].d[0], cases[t].d[1], cases[t].ceil};
            oari_attrs a = oari_attrs_ints(9, at);
            oar_tensor *got = oari_call(OARI_OP_qmax_pool2d, 1, &xq, &a);
            CHECK(got && oar_tensor_dtype(got) == dt && same_values(got, want));
            oar_tensor *xt = oar_transpose(oar_contiguous(oar_transpose(xq, 2, 3)), 2, 3);
            CHECK(same_values(oari_call(OARI_OP_qmax_pool2d, 1, &xt, &a), want));
        }
    oar_pool_pop(pool);
}

static void test_bad_input(void) {
    oar_pool *pool = oar_pool_push();
    conv_p c3 = {{1, 1}, {1, 1}, {1, 1}, 3, 3};
    oar_tensor *w = oar_full(OAR_I8, 4, (int64_t[]){4, 2, 3, 3}, 1), *ws, *wp = pack_conv_ref(w, &ws);
    oar_tensor *s = oar_full(OAR_F32, 0, NULL, 1.0), *x = oar_full(OAR_U8, 4, (int64_t[]){1, 2, 5, 5}, 3);
    oar_tensor *ys = oar_full(OAR_F32, 0, NULL, 0.1), *yz = oar_full(OAR_I64, 0, NULL, 3);
    CHECK(qconv_op(x, wp, ws, s, NULL, 0, &c3, 0, NULL, NULL, OAR_F32, 0) != NULL);
    CHECK_FAILS(qconv_op(oar_cast(x, OAR_F32), wp, ws, s, NULL, 0, &c3, 0, NULL, NULL, OAR_F32, 0),
                "qlinear_conv2d: x must be uint8 or int8");
    CHECK_FAILS(qconv_op(x, oar_cast(wp, OAR_U8), ws, s, NULL, 0, &c3, 0, NULL, NULL, OAR_F32, 0),
                "the weight must be int8");
    CHECK_FAILS(qconv_op(x, wp, ws, s, NULL, 256, &c3, 0, NULL, NULL, OAR_F32, 0), "zero point 256 of x");
    CHECK_FAILS(qconv_op(x, wp, ws, s, NULL, 0, &c3, 2, NULL, NULL, OAR_F32, 0), "activation 2");
    /* the pool attribute: 0 or 1, and an output of at least 2 x 2 under it */
    {
        int64_t at[13] = {0, 1, 1, 1, 1, 1, 1, 3, 3, 0, OAR_U8, 0, 2};
        oari_attrs a = oari_attrs_ints(13, at);
        CHECK_FAILS(oari_call(OARI_OP_qlinear_conv2d, 7, (oar_tensor *[]){x, wp, ws, s, NULL, ys, yz}, &a),
                    "pool 2 is not 0 (none) or 1");
        at[12] = 1, at[3] = at[4] = 0; /* no padding: 5 x 5 -> 3 x 3 -> pooled 1 x 1 */
        a = oari_attrs_ints(13, at);
        oar_tensor *y = oari_call(OARI_OP_qlinear_conv2d, 7, (oar_tensor *[]){x, wp, ws, s, NULL, ys, yz}, &a);
        CHECK(y && oar_tensor_shape(y)[2] == 1 && oar_tensor_shape(y)[3] == 1);
        oar_tensor *x1 = oar_full(OAR_U8, 4, (int64_t[]){1, 2, 3, 4}, 3); /* -> 1 x 2: too small */
        CHECK_FAILS(oari_call(OARI_OP_qlinear_conv2d, 7, (oar_tensor *[]){x1, wp, ws, s, NULL, ys, yz}, &a),
                    "a 1 x 2 output is too small for its 2 x 2 pool");
    }
    CHECK_FAILS(qconv_op(x, wp, ws, NULL, NULL, 0, &c3, 0, NULL, NULL, OAR_F32, 0), "are required");
    CHECK_FAILS(qconv_op(oar_full(OAR_U8, 4, (int64_t[]){1, 3, 5, 5}, 3), wp, ws, s, NULL, 0, &c3, 0, NULL, NULL,
                         OAR_F32, 0), "do not convolve");
    CHECK_FAILS(qconv_op(x, wp, oar_full(OAR_I32, 1, (int64_t[]){5}, 0), s, NULL, 0, &c3, 0, NULL, NULL, OAR_F32, 0),
                "do not convolve");
    conv_p big = {{1, 1}, {0, 0}, {3, 3}, 3, 3};
    CHECK_FAILS(qconv_op(x, wp, ws, s, NULL, 0, &big, 0, NULL, NULL, OAR_F32, 0), "larger than the padded input");
    conv_p zero = {{0, 1}, {0, 0}, {1, 1}, 3, 3};
    CHECK_FAILS(qconv_op(x, wp, ws, s, NULL, 0, &zero, 0, NULL, NULL, OAR_F32, 0), "must be >= 1");
    CHECK_FAILS(qconv_op(x, wp, ws, oar_full(OAR_F32, 1, (int64_t[]){3}, 1.0), NULL, 0, &c3, 0, NULL, NULL, OAR_F32,
                         0), "scale must be 0-d or [4]");
    CHECK_FAILS(qconv_op(x, wp, ws, s, NULL, 0, &c3, 0, ys, yz, OAR_F32, 0), "must be uint8 or int8");
    CHECK_FAILS(qconv_op(x, wp, ws, s, NULL, 0, &c3, 0, ys, NULL, OAR_U8, 0), "inputs 5 and 6");
    CHECK_FAILS(qconv_op(x, wp, ws, s, NULL, 0, &c3, 0, oar_full(OAR_F32, 0, NULL, -1.0), yz, OAR_U8, 0),
                "output scale -1 must be positive");
    CHECK_FAILS(qconv_op(x, wp, ws, s, NULL, 0, &c3, 0, ys, oar_full(OAR_I64, 0, NULL, 300), OAR_U8, 0),
                "output zero point 300 is outside");
    oari_attrs nine = oari_attrs_ints(9, (int64_t[]){2, 2, 2, 2, 0, 0, 1, 1, 0});
    CHECK(oari_call(OARI_OP_qmax_pool2d, 1, &x, &nine) != NULL);
    oar_tensor *xf = oar_cast(x, OAR_F32);
    CHECK_FAILS(oari_call(OARI_OP_qmax_pool2d, 1, &xf, &nine), "qmax_pool2d: x must be uint8 or int8");
    oari_attrs padded = oari_attrs_ints(9, (int64_t[]){2, 2, 2, 2, 2, 0, 1, 1, 0});
    CHECK_FAILS(oari_call(OARI_OP_qmax_pool2d, 1, &x, &padded), "at most half the kernel");
    oari_attrs eight = oari_attrs_ints(8, (int64_t[]){2, 2, 2, 2, 0, 0, 1, 1});
    CHECK_FAILS(oari_call(OARI_OP_qmax_pool2d, 1, &x, &eight), "expected 9");
    oar_pool_pop(pool);
}

/* quantize's dense per-tensor f32 path (AVX-512 where the CPU has it, the
 * scalar loop when forced) against the formula computed here: zp +
 * round_half_even(x * (1 / s)) in float, NaN, +-inf and |t| >= 2^63 to the
 * low end, clamped; lengths with every tail of 16, values on the .5
 * boundaries, huge values and non-finite ones. */
static void test_quantize_simd(void) {
    oar_pool *pool = oar_pool_push();
    const float special[] = {NAN, INFINITY, -INFINITY, 1e30f, -1e30f, 9.3e18f, -9.3e18f, 2.5f, 3.5f, -2.5f,
                             0.0f, -0.0f, 127.49f, 1e-40f};
    const int64_t lens[] = {1, 15, 16, 17, 50, 200};
    for (size_t t = 0; t < sizeof lens / sizeof *lens; t++) {
        int64_t n = lens[t];
        float *v = malloc((size_t)n * sizeof *v);
        for (int64_t i = 0; i < n; i++)
            v[i] = i % 3 == 0 ? special[(i / 3) % (sizeof special / sizeof *special)] : (float)(400 * uniform() - 200);
        oar_tensor *x = oar_tensor_from_data(v, OAR_F32, 1, &n);
        for (int i8 = 0; i8 < 2; i8++) {
            const double s = 0.5;
            const int64_t zp = i8 ? -7 : 100;
            const float lo = i8 ? -128.f : 0.f, hi = i8 ? 127.f : 255.f, inv = 1.f / (float)s;
            oar_dtype dt = i8 ? OAR_I8 : OAR_U8;
            oar_tensor *q[2];
            for (int ref = 0; ref < 2; ref++) {
                use_kernel(ref ? OARI_QK_REFERENCE : OARI_QK_VNNI);
                q[ref] = oar_quantize_per_tensor(x, s, zp, dt);
            }
            use_kernel(OARI_QK_VNNI);
            double *got = test_values(q[0]), *got_ref = test_values(q[1]);
            int bad = !got || !got_ref;
            for (int64_t i = 0; !bad && i < n; i++) {
                float tq = (float)zp + nearbyintf(v[i] * inv);
                tq = tq > -9.2233720368547758e18f && tq < 9.2233720368547758e18f ? tq : lo;
                tq = tq < lo ? lo : tq > hi ? hi : tq;
                if (got[i] != tq || got_ref[i] != tq) {
                    fprintf(stderr, "quantize of %g: %g (fast), %g (loop), want %g\n", v[i], got[i], got_ref[i], tq);
                    bad = 1;
                }
            }
            CHECK(!bad);
            free(got), free(got_ref);
        }
        free(v);
    }
    oar_pool_pop(pool);
}

/* ---- graphs the pass leaves alone ------------------------------------------------------- */
typedef struct alone { oar_tensor *w, *w2; int kind; } alone;

static int alone_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    alone *a = ctx;
    oar_tensor *xq = oar_quantize_per_tensor(in[0], 0.05, 7, OAR_U8), *idx = NULL;
    const int64_t one[2] = {1, 1}, two[2] = {2, 2}, zero[2] = {0, 0};
    switch (a->kind) {
    case 0: { /* groups 2 */
        oar_tensor *acc = oar_qconv2d(xq, 7, a->w2, one, one, one, 2);
        out[0] = oar_mul(oar_cast(acc, OAR_F32), oar_full(OAR_F32, 0, NULL, 0.5));
        break;
    }
    case 1: { /* the int32 sums read twice */
        oar_tensor *acc = oar_qconv2d(xq, 7, a->w, one, one, one, 1);
        out[0] = oar_add(oar_mul(oar_cast(acc, OAR_F32), oar_full(OAR_F32, 0, NULL, 0.5)), oar_cast(acc, OAR_F32));
        break;
    }
    case 2: { /* a scale along the width, not the channel */
        oar_tensor *acc = oar_qconv2d(xq, 7, a->w, one, one, one, 1);
        out[0] = oar_mul(oar_cast(acc, OAR_F32), oar_full(OAR_F32, 1, (int64_t[]){6}, 0.5));
        break;
    }
    case 3: /* a pool whose indices are an output: the quantize after it stays */
        out[0] = oar_quantize_per_tensor(oar_max_pool2d(in[0], two, two, zero, one, false, &idx), 0.05, 7, OAR_U8);
        out[1] = idx;
        return out[0] && out[1] ? 0 : -1;
    case 4: /* a pool whose values are read twice */
        out[0] = oar_max_pool2d(in[0], two, two, zero, one, false, NULL);
        out[1] = oar_quantize_per_tensor(out[0], 0.05, 7, OAR_U8);
        return out[0] && out[1] ? 0 : -1;
    default: /* a per-channel quantize after a pool */
        out[0] = oar_quantize_per_channel(oar_max_pool2d(in[0], two, two, zero, one, false, NULL),
                                          oar_full(OAR_F32, 1, (int64_t[]){4}, 0.05),
                                          oar_full(OAR_I64, 1, (int64_t[]){4}, 3), 1, OAR_U8);
        out[1] = oar_relu(in[0]);
        return out[0] && out[1] ? 0 : -1;
    }
    out[1] = oar_relu(in[0]);
    return out[0] && out[1] ? 0 : -1;
}

static void test_left_alone(void) {
    oar_pool *pool = oar_pool_push();
    alone a = {oar_full(OAR_I8, 4, (int64_t[]){4, 4, 3, 3}, 3), oar_full(OAR_I8, 4, (int64_t[]){4, 2, 3, 3}, 3), 0};
    oar_graph_input_spec spec = {.name = "x", .dtype = OAR_F32, .ndim = 4, .shape = {-1, 4, 6, 6}};
    for (a.kind = 0; a.kind < 6; a.kind++) {
        oar_graph *g = oar_trace(alone_fn, &a, 1, &spec, 2, NULL);
        int n_before = g ? g->n_nodes : -1;
        CHECK(g && oar_graph_run_pass(g, "fuse_qlinear") == 0);
        CHECK(g && g->n_nodes == n_before && oar_graph_count_op(g, "qlinear_conv2d") == 0 &&
              oar_graph_count_op(g, "qmax_pool2d") == 0);
        if (a.kind < 3) CHECK(oar_graph_count_op(g, "qconv2d") == 1);
        else CHECK(oar_graph_count_op(g, "max_pool2d") == 1);
        oar_graph_free(g);
    }
    oar_pool_pop(pool);
}

int main(void) {
    RUN(test_op);
    RUN(test_requant_forms);
    RUN(test_qpool);
    RUN(test_quantize_simd);
    RUN(test_bad_input);
    RUN(test_left_alone);
    RUN(test_fused_cnn);
    return test_summary();
}

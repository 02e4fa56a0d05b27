/* conv3d, conv_transpose3d and conv_transpose1d against PyTorch references
 * (tests/ref/gen_conv3d_ref.py): forward values and input/weight/bias
 * gradients through the autograd engine in f64/f32 (f16/bf16 loosely),
 * non-contiguous and unbatched inputs, the conv3d_weight_grad primitive,
 * results independent of the thread count, the nn modules, a trace run by
 * the executor (with its graph backward, and saved and loaded) against
 * eager, allocation failures and bad input. */
#include "test.h"

#include "ops/op.h"
#include "ref/conv3d_ref.h"
#include <oar/graph.h>
#include <unistd.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#define N_CASES ((int)(sizeof conv3d_ref_cases / sizeof conv3d_ref_cases[0]))

static int64_t numel(int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    return n;
}

/* A tensor of `dtype` holding the f64 values v. */
static oar_tensor *make(const double *v, oar_dtype dtype, int ndim, const int64_t *shape) {
    oar_tensor *t = oar_tensor_from_data(v, OAR_F64, ndim, shape);
    return dtype == OAR_F64 ? t : oar_cast(t, dtype);
}

/* The same values as a non-contiguous view: the last two dims swapped in
 * memory and transposed back. */
static oar_tensor *make_transposed(const double *v, oar_dtype dtype, int ndim,
                                   const int64_t *shape) {
    oar_tensor *t = make(v, dtype, ndim, shape);
    oar_tensor *c = oar_contiguous(oar_transpose(t, ndim - 2, ndim - 1));
    return oar_transpose(c, ndim - 2, ndim - 1);
}

/* Runs case r's op on x, w, b. */
static oar_tensor *run_case(const conv3d_ref_case *r, oar_tensor *x, oar_tensor *w,
                            oar_tensor *b) {
    switch (r->kind) {
    case REF_CONV3D:
        return oar_conv3d(x, w, b, r->stride, r->padding, r->dilation, r->groups);
    case REF_CONVT3D:
        return oar_conv_transpose3d(x, w, b, r->stride, r->padding, r->output_padding,
                                    r->dilation, r->groups);
    default:
        return oar_conv_transpose1d(x, w, b, r->stride[0], r->padding[0], r->output_padding[0],
                                    r->dilation[0], r->groups);
    }
}

static int64_t bias_len(const conv3d_ref_case *r) {
    return r->kind == REF_CONV3D ? r->ws[0] : r->ws[1] * r->groups;
}

/* Forward values and the gradients of <gy, y> against PyTorch's. */
static void check_case(const conv3d_ref_case *r, oar_dtype dt, bool strided, double tol) {
    oar_pool *p = oar_pool_push();
    const int nd = r->ndim;
    oar_tensor *x = strided ? make_transposed(r->x, dt, nd, r->xs) : make(r->x, dt, nd, r->xs);
    oar_tensor *w = make(r->w, dt, nd, r->ws);
    const int64_t nb = bias_len(r);
    oar_tensor *b = r->b ? make(r->b, dt, 1, &nb) : NULL;
    oar_tensor *leaves[3] = {x, w, b};
    for (int i = 0; i < 3; i++)
        if (leaves[i]) oar_tensor_set_requires_grad(leaves[i], true);
    oar_tensor *y = run_case(r, x, w, b);
    bool shape_ok = y && oar_tensor_ndim(y) == nd;
    for (int i = 0; shape_ok && i < nd; i++)
        shape_ok = oar_tensor_shape(y)[i] == r->ys[i];
    if (!shape_ok) fprintf(stderr, "case %s: %s\n", r->name, y ? "wrong shape" : oar_last_error());
    CHECK(shape_ok);
    if (!shape_ok) {
        oar_pool_pop(p);
        return;
    }
    CHECK_VALUES(y, r->y, numel(nd, r->ys), tol);
    oar_tensor *gy = make(r->gy, dt, nd, r->ys), *g[3] = {0};
    const int n = b ? 3 : 2;
    CHECK(oar_grad(1, &y, &gy, n, leaves, false, false, g) == 0);
    CHECK_VALUES(g[0], r->gx, numel(nd, r->xs), tol);
    CHECK_VALUES(g[1], r->gw, numel(nd, r->ws), tol);
    if (b) CHECK_VALUES(g[2], r->gb, nb, tol);
    oar_pool_pop(p);
}

static void test_reference_values(void) {
    for (int i = 0; i < N_CASES; i++) {
        check_case(&conv3d_ref_cases[i], OAR_F64, false, 1e-11);
        check_case(&conv3d_ref_cases[i], OAR_F32, false, 2e-4);
    }
}

static void test_noncontiguous(void) {
    for (int i = 0; i < N_CASES; i++)
        check_case(&conv3d_ref_cases[i], OAR_F64, true, 1e-11);
}

/* f16 and bf16 run through the f32 kernels: a loose bound on |y| ~ 10. */
static void test_half(void) {
    check_case(&conv3d_ref_cases[0], OAR_F16, false, 0.1);
    check_case(&conv3d_ref_cases[4], OAR_BF16, false, 0.5);
}

/* Complex: x real, w imaginary gives i conv(x, w) (case c3b, no bias). */
static void test_complex(void) {
    oar_pool *p = oar_pool_push();
    const conv3d_ref_case *r = &conv3d_ref_cases[1];
    oar_tensor *xr = make(r->x, OAR_F64, 5, r->xs), *wr = make(r->w, OAR_F64, 5, r->ws);
    oar_tensor *x = oar_complex(xr, oar_zeros_like(xr)), *w = oar_complex(oar_zeros_like(wr), wr);
    oar_tensor *y = run_case(r, x, w, NULL);
    CHECK(y && oar_tensor_dtype(y) == OAR_C128);
    if (y) {
        CHECK_VALUES(oar_imag(y), r->y, numel(5, r->ys), 1e-11);
        CHECK_NEAR(oar_tensor_item(oar_amax(oar_abs(oar_real(y)), 0, NULL, false)), 0, 0);
    }
    CHECK_FAILS(run_case(r, x, wr, NULL), "weight dtype float64 differs from the input's complex128");
    oar_pool_pop(p);
}

/* [C, D, H, W] is a batch of one: the first image of the batched result. */
static void test_unbatched(void) {
    oar_pool *p = oar_pool_push();
    for (int i = 0; i < N_CASES; i++) {
        const conv3d_ref_case *r = &conv3d_ref_cases[i];
        oar_tensor *x = make(r->x, OAR_F64, r->ndim - 1, r->xs + 1);
        oar_tensor *w = make(r->w, OAR_F64, r->ndim, r->ws);
        const int64_t nb = bias_len(r);
        oar_tensor *y = run_case(r, x, w, r->b ? make(r->b, OAR_F64, 1, &nb) : NULL);
        CHECK(y && oar_tensor_ndim(y) == r->ndim - 1);
        if (y) CHECK_VALUES(y, r->y, numel(r->ndim - 1, r->ys + 1), 1e-11);
    }
    oar_pool_pop(p);
}

/* The backward primitive alone: conv3d_weight_grad(x, gy) = PyTorch's gw. */
static void test_weight_grad_primitive(void) {
    oar_pool *p = oar_pool_push();
    for (int i = 0; i < N_CASES; i++) {
        const conv3d_ref_case *r = &conv3d_ref_cases[i];
        if (r->kind != REF_CONV3D) continue;
        oari_attrs a = {.ni = 15};
        for (int k = 0; k < 5; k++)
            a.i[k] = r->ws[k];
        for (int k = 0; k < 3; k++) {
            a.i[5 + k] = r->stride[k];
            a.i[8 + k] = r->padding[k];
            a.i[11 + k] = r->dilation[k];
        }
        a.i[14] = r->groups;
        oar_tensor *gw = oari_call2(OARI_OP_conv3d_weight_grad, make(r->x, OAR_F64, 5, r->xs),
                                    make(r->gy, OAR_F64, 5, r->ys), &a);
        CHECK_VALUES(gw, r->gw, numel(5, r->ws), 1e-11);
    }
    oar_pool_pop(p);
}

/* Batches large enough to run in parallel give the same bits on 1 and 3
 * threads (the weight gradient's partials are summed in a fixed order). */
static void test_thread_count_independence(void) {
#ifdef _OPENMP
    oar_pool *p = oar_pool_push();
    oar_manual_seed(5);
    oar_tensor *x = oar_randn(OAR_F32, 5, (int64_t[]){12, 4, 6, 7, 8});
    oar_tensor *w = oar_randn(OAR_F32, 5, (int64_t[]){6, 4, 3, 3, 3});
    const int64_t one[3] = {1, 1, 1}, zero[3] = {0, 0, 0};
    double *v[2][3] = {{0}};
    int threads[2] = {1, 3}, keep = omp_get_max_threads();
    oar_tensor_set_requires_grad(w, true);
    for (int t = 0; t < 2; t++) {
        omp_set_num_threads(threads[t]);
        oar_tensor *y = oar_conv3d(x, w, NULL, one, one, one, 1), *gw = NULL;
        v[t][0] = test_values(y);
        v[t][1] = test_values(oar_conv_transpose3d(y, w, NULL, one, one, zero, one, 1));
        CHECK(oar_grad(1, &y, &y, 1, &w, false, false, &gw) == 0);
        v[t][2] = test_values(gw);
    }
    omp_set_num_threads(keep);
    const int64_t n[3] = {12 * 6 * 336, 12 * 4 * 336, 6 * 4 * 27};
    for (int k = 0; k < 3; k++) {
        CHECK(v[0][k] && v[1][k] && !memcmp(v[0][k], v[1][k], (size_t)n[k] * sizeof(double)));
        free(v[0][k]);
        free(v[1][k]);
    }
    oar_pool_pop(p);
#endif
}

/* Modules: parameter shapes, PyTorch's init bound 1/sqrt(fan_in), the
 * forward equal to the functional op, and refused arguments. */
static void check_bounded(oar_tensor *t, double bound) {
    double *v = test_values(t);
    bool ok = v != NULL;
    for (int64_t i = 0; ok && i < oar_tensor_numel(t); i++)
        ok = fabs(v[i]) <= bound;
    free(v);
    CHECK(ok);
}

static void test_modules(void) {
    oar_pool *p = oar_pool_push();
    oar_manual_seed(3);
    oar_module *c3 = oar_conv3d_new(4, 6, 3, 2, 1, 1, 2, true);
    oar_module *t1 = oar_conv_transpose1d_new(4, 6, 3, 2, 1, 1, 1, 2, true);
    oar_module *t3 = oar_conv_transpose3d_new(4, 6, 2, 2, 0, 1, 1, 1, false);
    CHECK(c3 && t1 && t3);
    if (c3 && t1 && t3) {
        oar_tensor *w = oar_module_get(c3, "weight"), *b = oar_module_get(c3, "bias");
        CHECK(oar_tensor_ndim(w) == 5 && oar_tensor_shape(w)[0] == 6 &&
              oar_tensor_shape(w)[1] == 2 && oar_tensor_shape(w)[4] == 3);
        check_bounded(w, 1 / sqrt(2.0 * 27));
        check_bounded(b, 1 / sqrt(2.0 * 27));
        oar_tensor *x = oar_randn(OAR_F32, 5, (int64_t[]){2, 4, 5, 6, 7});
        const int64_t two[3] = {2, 2, 2}, one[3] = {1, 1, 1}, zero[3] = {0, 0, 0};
        oar_tensor *y = oar_module_forward(c3, x);
        CHECK(y && oar_tensor_shape(y)[2] == 3 && oar_tensor_shape(y)[4] == 4);
        double *want = test_values(oar_conv3d(x, w, b, two, one, one, 2));
        CHECK_VALUES(y, want, oar_tensor_numel(y), 0);
        free(want);
        /* ConvTranspose: weight [in, out/groups, k...], fan_in from dim 1 as torch */
        oar_tensor *w1 = oar_module_get(t1, "weight");
        CHECK(oar_tensor_ndim(w1) == 3 && oar_tensor_shape(w1)[0] == 4 &&
              oar_tensor_shape(w1)[1] == 3);
        check_bounded(w1, 1 / sqrt(3.0 * 3));
        check_bounded(oar_module_get(t1, "bias"), 1 / sqrt(3.0 * 3));
        oar_tensor *x1 = oar_randn(OAR_F32, 3, (int64_t[]){2, 4, 5});
        oar_tensor *y1 = oar_module_forward(t1, x1);
        CHECK(y1 && oar_tensor_shape(y1)[1] == 6 && oar_tensor_shape(y1)[2] == 10);
        oar_tensor *w3 = oar_module_get(t3, "weight");
        CHECK(oar_tensor_ndim(w3) == 5 && oar_tensor_shape(w3)[1] == 6 &&
              oar_module_get(t3, "bias") == NULL);
        y = oar_module_forward(t3, x);
        CHECK(y && oar_tensor_shape(y)[1] == 6 && oar_tensor_shape(y)[2] == 11 &&
              oar_tensor_shape(y)[4] == 15);
        want = test_values(oar_conv_transpose3d(x, w3, NULL, two, zero, one, one, 1));
        CHECK_VALUES(y, want, oar_tensor_numel(y), 0);
        free(want);
    }
    oar_module_free(c3);
    oar_module_free(t1);
    oar_module_free(t3);
    CHECK_FAILS(oar_conv3d_new(4, 6, 3, 1, 0, 1, 3, true), "channels divide by groups");
    CHECK_FAILS(oar_conv3d_new(4, 6, 0, 1, 0, 1, 1, true), "invalid arguments");
    CHECK_FAILS(oar_conv_transpose3d_new(4, 6, 3, 1, 0, 1, 1, 1, true),
                "output_padding be smaller than stride or dilation");
    CHECK_FAILS(oar_conv_transpose1d_new(4, 6, 3, 2, -1, 0, 1, 1, true), "invalid arguments");
    oar_pool_pop(p);
}

/* ---- tracing -------------------------------------------------------------------- */

static oar_tensor *tw3, *tb3, *twt, *tw1;

/* x [N, 2, 5, 6, 4] -> conv3d (stride 2, groups 2) -> relu -> conv_transpose3d
 * back up; z [N, 3, 7] -> conv_transpose1d. */
static int net(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    const int64_t two[3] = {2, 2, 2}, one[3] = {1, 1, 1}, zero[3] = {0, 0, 0};
    oar_tensor *h = oar_relu(oar_conv3d(in[0], tw3, tb3, two, one, one, 2));
    out[0] = oar_conv_transpose3d(h, twt, NULL, two, one, (int64_t[]){0, 1, 1}, one, 1);
    out[1] = oar_conv_transpose1d(in[1], tw1, NULL, 2, 0, 1, 1, 1);
    (void)zero;
    return out[0] && out[1] ? 0 : -1;
}

/* Graph inputs x and w: the loss sum(conv3d(x, w)^2) and its gradients. */
static int loss_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    (void)ctx;
    const int64_t one[3] = {1, 1, 1}, two[3] = {2, 1, 2};
    oar_tensor *y = oar_conv_transpose3d(in[0], in[2], NULL, two, one, (int64_t[]){1, 0, 0}, one,
                                         1);
    oar_tensor *z = oar_conv3d(y, in[1], NULL, two, one, one, 1);
    out[0] = oar_sum(oar_square(z), 0, NULL, false);
    return out[0] ? 0 : -1;
}

static double max_abs_diff(oar_tensor *a, oar_tensor *b) {
    if (!a || !b || oar_tensor_numel(a) != oar_tensor_numel(b)) return INFINITY;
    double *x = test_values(a), *y = test_values(b), m = 0;
    for (int64_t i = 0; i < oar_tensor_numel(a); i++)
        m = fabs(x[i] - y[i]) > m ? fabs(x[i] - y[i]) : m;
    free(x);
    free(y);
    return m;
}

static void test_trace_executor_save(void) {
    oar_pool *p = oar_pool_push();
    oar_manual_seed(9);
    tw3 = oar_randn(OAR_F32, 5, (int64_t[]){4, 1, 3, 3, 3});
    tb3 = oar_randn(OAR_F32, 1, (int64_t[]){4});
    twt = oar_randn(OAR_F32, 5, (int64_t[]){4, 2, 3, 2, 3});
    tw1 = oar_randn(OAR_F32, 3, (int64_t[]){3, 2, 3});
    oar_graph_input_spec specs[2] = {
        {.name = "x", .dtype = OAR_F32, .ndim = 5, .shape = {-1, 2, 5, 6, 4}, .dim_names = {"N"}},
        {.name = "z", .dtype = OAR_F32, .ndim = 3, .shape = {-1, 3, 7}, .dim_names = {"N"}}};
    oar_graph *g = oar_trace(net, NULL, 2, specs, 2, NULL);
    CHECK(g != NULL);
    if (!g) {
        fprintf(stderr, "trace: %s\n", oar_last_error());
        oar_pool_pop(p);
        return;
    }
    CHECK(oar_graph_verify(g) == 0);
    CHECK(oar_graph_count_op(g, "conv3d") == 1 && oar_graph_count_op(g, "conv_transpose3d") == 1 &&
          oar_graph_count_op(g, "conv_transpose2d") == 1);
    char dir[] = "/tmp/oar_conv3d_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    CHECK(oar_graph_save(g, dir) == 0);
    oar_graph *h = oar_graph_load(dir);
    CHECK(h != NULL);
    oar_executor *ex[2] = {oar_executor_new(g), h ? oar_executor_new(h) : NULL};
    for (int64_t n = 1; n <= 3; n += 2) {
        oar_tensor *in[2] = {oar_randn(OAR_F32, 5, (int64_t[]){n, 2, 5, 6, 4}),
                             oar_randn(OAR_F32, 3, (int64_t[]){n, 3, 7})};
        oar_tensor *want[2];
        CHECK(net(NULL, in, want) == 0);
        for (int k = 0; k < 2; k++) {
            oar_tensor *got[2] = {0};
            CHECK(ex[k] && oar_executor_run(ex[k], in, got) == 0);
            CHECK_NEAR(max_abs_diff(got[0], want[0]), 0, 1e-5);
            CHECK_NEAR(max_abs_diff(got[1], want[1]), 0, 1e-5);
        }
    }
    oar_executor_free(ex[0]);
    oar_executor_free(ex[1]);
    oar_graph_free(h);
    oar_graph_free(g);
    char cmd[64];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);

    /* graph backward: the gradient rules traced into nodes, run against eager */
    oar_graph_input_spec ls[3] = {
        {.name = "x", .dtype = OAR_F64, .ndim = 5, .shape = {2, 3, 3, 4, 3}},
        {.name = "w", .dtype = OAR_F64, .ndim = 5, .shape = {2, 2, 3, 2, 3}},
        {.name = "wt", .dtype = OAR_F64, .ndim = 5, .shape = {3, 2, 2, 3, 2}}};
    g = oar_trace(loss_fn, NULL, 3, ls, 1, NULL);
    CHECK(g && oar_graph_append_backward(g, 0, 3, (int[]){0, 1, 2}) == 1);
    CHECK(g && oar_graph_count_op(g, "conv3d_weight_grad") >= 2);
    oar_executor *e = g ? oar_executor_new(g) : NULL;
    oar_tensor *in[3], *got[4] = {0}, *loss = NULL, *gr[3] = {0};
    for (int k = 0; k < 3; k++) {
        in[k] = oar_randn(OAR_F64, 5, ls[k].shape);
        oar_tensor_set_requires_grad(in[k], true);
    }
    CHECK(e && oar_executor_run(e, in, got) == 0);
    CHECK(loss_fn(NULL, in, &loss) == 0 && oar_grad(1, &loss, NULL, 3, in, false, false, gr) == 0);
    for (int k = 0; k < 3; k++)
        CHECK_NEAR(max_abs_diff(got[1 + k], gr[k]), 0, 1e-9);
    oar_executor_free(e);
    oar_graph_free(g);
    oar_pool_pop(p);
}

/* ---- failures ----------------------------------------------------------------------- */

typedef struct {
    int64_t count, fail_at;
} fail_ctx;

static void *failing_alloc(void *ctx, void *ptr, size_t old_size, size_t new_size) {
    (void)old_size;
    fail_ctx *f = ctx;
    if (new_size == 0) {
        free(ptr);
        return NULL;
    }
    if (++f->count == f->fail_at) return NULL;
    return realloc(ptr, new_size);
}

/* Every allocation of a forward and backward fails in turn: each failure is
 * reported, nothing crashes or leaks (ASan). */
static void test_allocation_failures(void) {
    const conv3d_ref_case *r = &conv3d_ref_cases[0], *t = &conv3d_ref_cases[4];
    bool finished = false;
    for (int64_t n = 1; n < 600 && !finished; n++) {
        fail_ctx f = {0, n};
        oar_set_allocator(failing_alloc, &f);
        oar_pool *p = oar_pool_push();
        oar_clear_error();
        oar_tensor *x = make_transposed(r->x, OAR_F32, 5, r->xs);
        oar_tensor *w = make(r->w, OAR_F32, 5, r->ws), *g = NULL;
        if (w) oar_tensor_set_requires_grad(w, true);
        oar_tensor *y = run_case(r, x, w, NULL);
        oar_tensor *z = y ? run_case(t, make(t->x, OAR_F32, 5, t->xs), make(t->w, OAR_F32, 5, t->ws),
                                     NULL)
                          : NULL;
        oar_tensor *loss = z ? oar_sum(y, 0, NULL, false) : NULL;
        bool ok = loss && oar_grad(1, &loss, NULL, 1, &w, false, false, &g) == 0;
        CHECK(ok || oar_last_error()[0] != 0);
        finished = ok && f.count < n;
        oar_pool_pop(p);
        oar_set_allocator(NULL, NULL);
    }
    CHECK(finished);
}

static void test_bad_input(void) {
    oar_pool *p = oar_pool_push();
    const int64_t one[3] = {1, 1, 1}, zero[3] = {0, 0, 0}, two[3] = {2, 2, 2};
    oar_tensor *x = oar_ones(OAR_F32, 5, (int64_t[]){2, 3, 5, 5, 4});
    oar_tensor *w = oar_ones(OAR_F32, 5, (int64_t[]){4, 3, 3, 3, 3});
    CHECK(oar_conv3d(x, w, NULL, one, zero, one, 1) != NULL);
    CHECK_FAILS(oar_conv3d(x, oar_ones(OAR_F32, 5, (int64_t[]){4, 2, 3, 3, 3}), NULL, one, zero,
                           one, 1),
                "input [2, 3, 5, 5, 4] has 3 channels but weight [4, 2, 3, 3, 3]");
    CHECK_FAILS(oar_conv3d(x, oar_ones(OAR_F32, 4, (int64_t[]){4, 3, 3, 3}), NULL, one, zero, one,
                           1),
                "weight [4, 3, 3, 3]");
    CHECK_FAILS(oar_conv3d(x, oar_ones(OAR_F32, 5, (int64_t[]){4, 3, 3, 3, 5}), NULL, one, zero,
                           one, 1),
                "larger than the padded input (4)");
    CHECK(oar_conv3d(x, oar_ones(OAR_F32, 5, (int64_t[]){4, 3, 3, 3, 5}), NULL, one, one, one, 1) !=
          NULL);
    CHECK_FAILS(oar_conv3d(x, w, NULL, one, zero, two, 1), "dilated 5 on spatial axis 2");
    CHECK_FAILS(oar_conv3d(x, oar_ones(OAR_F32, 5, (int64_t[]){4, 1, 3, 3, 3}), NULL, one, zero,
                           one, 3),
                "groups 3 does not divide the 4 output channels");
    CHECK_FAILS(oar_conv3d(x, oar_ones(OAR_F32, 5, (int64_t[]){4, 1, 3, 3, 3}), NULL, one, zero,
                           one, 2),
                "groups 2 does not divide the 3 input channels");
    CHECK_FAILS(oar_conv3d(x, w, NULL, one, zero, one, 0), "groups must be >= 1");
    CHECK_FAILS(oar_conv3d(x, w, oar_ones(OAR_F32, 1, (int64_t[]){3}), one, zero, one, 1),
                "bias [3] must be [4]");
    CHECK_FAILS(oar_conv3d(x, oar_ones(OAR_F64, 5, (int64_t[]){4, 3, 3, 3, 3}), NULL, one, zero,
                           one, 1),
                "weight dtype float64 differs");
    CHECK_FAILS(oar_conv3d(oar_ones(OAR_I64, 5, (int64_t[]){1, 3, 5, 5, 5}),
                           oar_ones(OAR_I64, 5, (int64_t[]){4, 3, 3, 3, 3}), NULL, one, zero, one,
                           1),
                "must be floating");
    CHECK_FAILS(oar_conv3d(x, w, NULL, (int64_t[]){1, 0, 1}, zero, one, 1), "must be >= 1");
    CHECK_FAILS(oar_conv3d(x, w, NULL, one, (int64_t[]){0, -1, 0}, one, 1), "padding (0, -1, 0)");
    CHECK_FAILS(oar_conv3d(x, w, NULL, one, zero, (int64_t[]){1, 1, 0}, 1), "dilation (1, 1, 0)");
    CHECK_FAILS(oar_conv3d(oar_ones(OAR_F32, 3, (int64_t[]){3, 5, 5}), w, NULL, one, zero, one, 1),
                "expected a 5-D input [N, C, D, H, W] or 4-D");
    CHECK_FAILS(oar_conv3d(x, NULL, NULL, one, zero, one, 1), "weight is NULL");
    CHECK_FAILS(oar_conv3d(x, w, NULL, NULL, zero, one, 1), "stride is NULL");
    CHECK_FAILS(oar_conv3d(NULL, w, NULL, one, zero, one, 1), "NULL");
    /* transposed */
    oar_tensor *wt = oar_ones(OAR_F32, 5, (int64_t[]){3, 2, 3, 3, 3});
    CHECK(oar_conv_transpose3d(x, wt, NULL, two, zero, one, one, 1) != NULL);
    CHECK(oar_conv_transpose3d(x, wt, NULL, one, zero, one, two, 1) != NULL); /* 1 < dilation */
    CHECK_FAILS(oar_conv_transpose3d(x, wt, NULL, one, zero, one, one, 1),
                "output_padding (1, 1, 1) must be >= 0 and smaller than stride");
    CHECK_FAILS(oar_conv_transpose3d(x, wt, NULL, two, zero, (int64_t[]){0, -1, 0}, one, 1),
                "output_padding (0, -1, 0)");
    CHECK_FAILS(oar_conv_transpose3d(x, oar_ones(OAR_F32, 5, (int64_t[]){4, 2, 3, 3, 3}), NULL,
                                     one, zero, zero, one, 1),
                "input [2, 3, 5, 5, 4] has 3 channels but weight [4, 2, 3, 3, 3] expects 4");
    CHECK_FAILS(oar_conv_transpose3d(x, wt, NULL, one, (int64_t[]){1, 1, 4}, zero, one, 1),
                "not positive");
    CHECK_FAILS(oar_conv_transpose3d(x, wt, oar_ones(OAR_F32, 1, (int64_t[]){3}), one, zero, zero,
                                     one, 1),
                "bias [3] must be [2]");
    CHECK_FAILS(oar_conv_transpose3d(x, wt, NULL, one, zero, NULL, one, 1),
                "output_padding is NULL");
    CHECK_FAILS(oar_conv_transpose3d(oar_ones(OAR_F32, 6, (int64_t[]){1, 1, 3, 5, 5, 4}), wt,
                                     NULL, one, zero, zero, one, 1),
                "expected a 5-D input");
    /* transposed 1-D */
    oar_tensor *x1 = oar_ones(OAR_F32, 3, (int64_t[]){2, 3, 6});
    oar_tensor *w1 = oar_ones(OAR_F32, 3, (int64_t[]){3, 2, 3});
    CHECK(oar_conv_transpose1d(x1, w1, NULL, 2, 0, 1, 1, 1) != NULL);
    CHECK_FAILS(oar_conv_transpose1d(x1, w1, NULL, 1, 0, 1, 1, 1),
                "must be >= 0 and smaller than stride");
    CHECK_FAILS(oar_conv_transpose1d(x, w1, NULL, 1, 0, 0, 1, 1), "expected a 3-D input");
    CHECK_FAILS(oar_conv_transpose1d(x1, w1, NULL, 1, 0, 0, 1, 2), "does not divide");
    CHECK_FAILS(oar_conv_transpose1d(x1, NULL, NULL, 1, 0, 0, 1, 1), "weight is NULL");
    /* the backward primitive refuses mismatched shapes */
    oari_attrs a = {.ni = 15, .i = {4, 3, 3, 3, 3, 1, 1, 1, 0, 0, 0, 1, 1, 1, 1}};
    CHECK_FAILS(oari_call2(OARI_OP_conv3d_weight_grad, x,
                           oar_ones(OAR_F32, 5, (int64_t[]){2, 4, 9, 3, 2}), &a),
                "do not match the weight's shape");
    /* a NULL from an earlier failure keeps its message */
    oar_clear_error();
    oar_tensor *bad = oar_conv3d(x, wt, NULL, one, zero, one, 1);
    CHECK(bad == NULL && oar_conv_transpose3d(bad, wt, NULL, one, zero, zero, one, 1) == NULL);
    CHECK(strstr(oar_last_error(), "has 3 channels") != NULL);
    oar_pool_pop(p);
}

int main(void) {
    RUN(test_reference_values);
    RUN(test_noncontiguous);
    RUN(test_half);
    RUN(test_complex);
    RUN(test_unbatched);
    RUN(test_weight_grad_primitive);
    RUN(test_thread_count_independence);
    RUN(test_modules);
    RUN(test_trace_executor_save);
    RUN(test_bad_input);
    RUN(test_allocation_failures);
    return test_summary();
}

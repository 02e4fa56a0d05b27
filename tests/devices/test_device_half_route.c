/* The planner's routes for f16/bf16 calls on a device whose supports_op
 * refuses some calls of kernels it has (tests/devices/plugins/
 * half_route_plugin.c, the "halfmock" device: add in f32 for dense inputs
 * of rank <= 2, add in f16 for rank 1, casts between f32 and f16/bf16).
 * Each call must take the route the device claims, asked about the call
 * it will really get:
 * - the half kernel where it claims the call;
 * - else its f32 kernel on dense f32 temporaries, where it claims that
 *   call (the half input's own strides do not matter: the kernel never
 *   sees them);
 * - else the CPU with copies (counted by oar_device_fallback_count).
 * A call with a half output needs the cast from f32 into it as well: with
 * --no-half-cast the plugin has no cast kernel to f16/bf16, and a cast to
 * them, or an add of half inputs its f16 kernel refuses, runs on the CPU
 * (never on the f32 route, whose output cast would fail).
 * The plugin's kernels fail when called on a call they refused, and count
 * their calls, so the test sees which ran. Values are checked against the
 * exact sums (every input and sum is exact in f16 and bf16). */
#include "test.h"

#include <dlfcn.h>
#include <stdlib.h>

#ifndef OAR_TEST_HALF_PLUGIN_DIR
#error "OAR_TEST_HALF_PLUGIN_DIR must name the folder of the halfmock plugin"
#endif

enum { ADD_F32, ADD_F16, CAST };
static long (*kernel_calls)(int kind);
static oar_device *dev;

/* x[i] = 0.5 i - 3 (a) or 0.25 (i mod 5) (b), shaped by ndim/shape, in f32 */
static double value(int which, int64_t i) {
    return which ? 0.25 * (double)(i % 5) : 0.5 * (double)i - 3;
}

static oar_tensor *input(int which, int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= shape[d];
    float *v = malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++)
        v[i] = (float)value(which, i);
    oar_tensor *t = oar_tensor_from_data(v, OAR_F32, ndim, shape);
    free(v);
    return t;
}

typedef struct route {
    long add_f32, add_f16, casts, fallbacks;
} route;

/* Reports a route other than `want` (s NULL: the call failed). */
static void check_route(const char *what, oar_tensor *s, route want) {
    route got = {kernel_calls(ADD_F32), kernel_calls(ADD_F16), kernel_calls(CAST),
                 oar_device_fallback_count()};
    if (!s || memcmp(&got, &want, sizeof got)) {
        fprintf(stderr,
                "%s: %s; add f32 %ld, add f16 %ld, casts %ld, fallbacks %ld (expected %ld %ld %ld "
                "%ld)\n",
                what, s ? "ran" : oar_last_error(), got.add_f32, got.add_f16, got.casts,
                got.fallbacks, want.add_f32, want.add_f16, want.casts, want.fallbacks);
        CHECK(0);
    }
}

/* s, on the device in dt, is the exact sum of the inputs. */
static void check_sum(oar_tensor *s, oar_dtype dt) {
    CHECK(s && oar_tensor_device(s) == dev && oar_tensor_dtype(s) == dt);
    if (!s) return;
    int64_t n = oar_tensor_numel(s);
    double *want = malloc((size_t)n * sizeof *want);
    for (int64_t i = 0; i < n; i++)
        want[i] = value(0, i) + value(1, i);
    CHECK_VALUES(s, want, n, 0);
    free(want);
}

/* a + b on the device in dtype dt, a transposed (dims 0, 1) first when
 * transpose_a: the route taken (kernel calls, fallbacks) is `want`, and the
 * result, on the device in dt, is the exact sum. */
static void check_add(const char *what, oar_dtype dt, int ndim, const int64_t *shape,
                      bool transpose_a, route want) {
    oar_pool *pool = oar_pool_push();
    oar_tensor *a = input(0, ndim, shape), *b = input(1, ndim, shape);
    oar_tensor *da = oar_tensor_to(oar_cast(a, dt), dev), *db = oar_tensor_to(oar_cast(b, dt), dev);
    if (transpose_a) { /* a's values read through a transposed view of their transpose */
        da = oar_transpose(oar_tensor_to(oar_contiguous(oar_transpose(oar_cast(a, dt), 0, 1)), dev),
                           0, 1);
        CHECK(da && !oar_tensor_is_contiguous(da));
    }
    kernel_calls(-1);
    oar_device_fallback_reset();
    oar_tensor *s = oar_add(da, db);
    check_route(what, s, want);
    check_sum(s, dt);
    oar_pool_pop(pool);
}

static int add_fn(void *ctx, oar_tensor *const *x, oar_tensor **y) {
    (void)ctx;
    return !(y[0] = oar_add(x[0], x[1]));
}

/* The same add traced (on the CPU) and run by an executor on device
 * inputs: its plan takes the same route, its f32 temporaries in the
 * arena. */
static void check_graph_add(const char *what, oar_dtype dt, int ndim, const int64_t *shape,
                            route want) {
    oar_pool *pool = oar_pool_push();
    oar_graph_input_spec spec[2] = {{.dtype = dt, .ndim = ndim}, {.dtype = dt, .ndim = ndim}};
    memcpy(spec[0].shape, shape, (size_t)ndim * sizeof *shape);
    memcpy(spec[1].shape, shape, (size_t)ndim * sizeof *shape);
    oar_graph *g = oar_trace(add_fn, NULL, 2, spec, 1, NULL);
    oar_executor *ex = g ? oar_executor_new(g) : NULL;
    CHECK(g && ex);
    oar_tensor *in[2] = {oar_tensor_to(oar_cast(input(0, ndim, shape), dt), dev),
                         oar_tensor_to(oar_cast(input(1, ndim, shape), dt), dev)};
    kernel_calls(-1);
    oar_device_fallback_reset();
    oar_tensor *y[1] = {NULL};
    CHECK(ex && oar_executor_run(ex, in, y) == 0);
    check_route(what, y[0], want);
    check_sum(y[0], dt);
    oar_executor_free(ex);
    oar_graph_free(g);
    oar_pool_pop(pool);
}

/* x (the `a` values, exact in every float dtype) in `from` on the device,
 * cast there to `to`: the route taken is `want`, the values exact. */
static void check_cast(const char *what, oar_dtype from, oar_dtype to, route want) {
    oar_pool *pool = oar_pool_push();
    const int64_t shape[2] = {3, 4};
    oar_tensor *x = oar_tensor_to(oar_cast(input(0, 2, shape), from), dev);
    CHECK(x && oar_tensor_dtype(x) == from);
    kernel_calls(-1);
    oar_device_fallback_reset();
    oar_tensor *y = oar_cast(x, to);
    check_route(what, y, want);
    CHECK(y && oar_tensor_device(y) == dev && oar_tensor_dtype(y) == to);
    if (y) {
        double want_v[12];
        for (int i = 0; i < 12; i++)
            want_v[i] = value(0, i);
        CHECK_VALUES(y, want_v, 12, 0);
    }
    oar_pool_pop(pool);
}

static int cast_fn(void *ctx, oar_tensor *const *x, oar_tensor **y) {
    return !(y[0] = oar_cast(x[0], *(const oar_dtype *)ctx));
}

/* The same cast traced and run by an executor on a device input. */
static void check_graph_cast(const char *what, oar_dtype from, oar_dtype to, route want) {
    oar_pool *pool = oar_pool_push();
    const int64_t shape[2] = {3, 4};
    oar_graph_input_spec spec[1] = {{.dtype = from, .ndim = 2, .shape = {3, 4}}};
    oar_graph *g = oar_trace(cast_fn, &to, 1, spec, 1, NULL);
    oar_executor *ex = g ? oar_executor_new(g) : NULL;
    CHECK(g && ex);
    oar_tensor *in[1] = {oar_tensor_to(oar_cast(input(0, 2, shape), from), dev)};
    kernel_calls(-1);
    oar_device_fallback_reset();
    oar_tensor *y[1] = {NULL};
    CHECK(ex && oar_executor_run(ex, in, y) == 0);
    check_route(what, y[0], want);
    CHECK(y[0] && oar_tensor_device(y[0]) == dev && oar_tensor_dtype(y[0]) == to);
    if (y[0]) {
        double want_v[12];
        for (int i = 0; i < 12; i++)
            want_v[i] = value(0, i);
        CHECK_VALUES(y[0], want_v, 12, 0);
    }
    oar_executor_free(ex);
    oar_graph_free(g);
    oar_pool_pop(pool);
}

static void test_cast_routes(void) {
    /* the device's casts each way */
    check_cast("cast f32 -> bf16", OAR_F32, OAR_BF16, (route){0, 0, 1, 0});
    check_cast("cast f32 -> f16", OAR_F32, OAR_F16, (route){0, 0, 1, 0});
    check_cast("cast f16 -> f32", OAR_F16, OAR_F32, (route){0, 0, 1, 0});
    check_cast("cast bf16 -> f32", OAR_BF16, OAR_F32, (route){0, 0, 1, 0});
    check_graph_cast("graph cast f32 -> bf16", OAR_F32, OAR_BF16, (route){0, 0, 1, 0});
}

/* --no-half-cast: no cast kernel to f16/bf16 on the device */
static void test_no_half_cast_routes(void) {
    const int64_t s1[1] = {6}, s2[2] = {3, 4};
    /* a cast to half: the f32 route would need that very cast; the CPU */
    check_cast("no half cast: cast f32 -> bf16", OAR_F32, OAR_BF16, (route){0, 0, 0, 1});
    check_cast("no half cast: cast f32 -> f16", OAR_F32, OAR_F16, (route){0, 0, 0, 1});
    check_graph_cast("no half cast: graph cast f32 -> bf16", OAR_F32, OAR_BF16, (route){0, 0, 0, 1});
    check_graph_cast("no half cast: graph cast f32 -> f16", OAR_F32, OAR_F16, (route){0, 0, 0, 1});
    /* from half to f32: the device's kernel (keyed by f32) still runs */
    check_cast("no half cast: cast f16 -> f32", OAR_F16, OAR_F32, (route){0, 0, 1, 0});
    check_cast("no half cast: cast bf16 -> f32", OAR_BF16, OAR_F32, (route){0, 0, 1, 0});
    /* half adds: the f16 kernel where claimed, else the CPU (no way back from f32) */
    check_add("no half cast: f16 rank 1", OAR_F16, 1, s1, false, (route){0, 1, 0, 0});
    check_add("no half cast: f16 rank 2", OAR_F16, 2, s2, false, (route){0, 0, 0, 1});
    check_add("no half cast: bf16 rank 2", OAR_BF16, 2, s2, false, (route){0, 0, 0, 1});
    check_graph_add("no half cast: graph bf16 rank 2", OAR_BF16, 2, s2, (route){0, 0, 0, 1});
}

static void test_routes(void) {
    const int64_t s1[1] = {6}, s2[2] = {3, 4}, s3[3] = {2, 3, 2};
    /* f16 kernel claimed: it runs */
    check_add("f16 rank 1", OAR_F16, 1, s1, false, (route){0, 1, 0, 0});
    /* f16 kernel refused, f32 claimed on the temporaries: casts around f32 */
    check_add("f16 rank 2", OAR_F16, 2, s2, false, (route){1, 0, 3, 0});
    check_add("bf16 rank 2", OAR_BF16, 2, s2, false, (route){1, 0, 3, 0});
    /* a strided half input: its temporary is dense, which f32 claims */
    check_add("f16 rank 2, a transposed", OAR_F16, 2, s2, true, (route){1, 0, 3, 0});
    check_add("bf16 rank 2, a transposed", OAR_BF16, 2, s2, true, (route){1, 0, 3, 0});
    /* both refused (rank 3): the CPU, no device kernel */
    check_add("f16 rank 3", OAR_F16, 3, s3, false, (route){0, 0, 0, 1});
    check_add("bf16 rank 3", OAR_BF16, 3, s3, false, (route){0, 0, 0, 1});
    /* f32 itself: the kernel where claimed, else the CPU */
    check_add("f32 rank 2", OAR_F32, 2, s2, false, (route){1, 0, 0, 0});
    check_add("f32 rank 2, a transposed", OAR_F32, 2, s2, true, (route){0, 0, 0, 1});
    check_add("f32 rank 3", OAR_F32, 3, s3, false, (route){0, 0, 0, 1});
}

static void test_graph_routes(void) {
    const int64_t s1[1] = {6}, s2[2] = {3, 4}, s3[3] = {2, 3, 2};
    check_graph_add("graph f16 rank 1", OAR_F16, 1, s1, (route){0, 1, 0, 0});
    check_graph_add("graph f16 rank 2", OAR_F16, 2, s2, (route){1, 0, 3, 0});
    check_graph_add("graph bf16 rank 2", OAR_BF16, 2, s2, (route){1, 0, 3, 0});
    check_graph_add("graph f16 rank 3", OAR_F16, 3, s3, (route){0, 0, 0, 1});
    check_graph_add("graph bf16 rank 3", OAR_BF16, 3, s3, (route){0, 0, 0, 1});
}

int main(int argc, char **argv) {
    bool no_half_cast = argc > 1 && !strcmp(argv[1], "--no-half-cast");
    if (no_half_cast) setenv("OAR_TEST_HALFMOCK_NO_HALF_CAST", "1", 1); /* read at plugin load */
    setenv("OAR_PLUGIN_PATH", OAR_TEST_HALF_PLUGIN_DIR, 1);
    setenv("OAR_PLUGIN_NO_INSTALL_DIR", "1", 1);
    dev = oar_device_get("halfmock:0");
    void *lib = dlopen(OAR_TEST_HALF_PLUGIN_DIR "/halfmock.so", RTLD_NOW | RTLD_NOLOAD);
    kernel_calls = lib ? (long (*)(int))dlsym(lib, "oar_test_half_route_calls") : NULL;
    if (!dev || !kernel_calls) {
        fprintf(stderr, "halfmock plugin not loaded: %s\n", oar_last_error());
        return 1;
    }
    if (no_half_cast) {
        RUN(test_no_half_cast_routes);
    } else {
        RUN(test_routes);
        RUN(test_graph_routes);
        RUN(test_cast_routes);
    }
    dlclose(lib);
    return test_summary();
}

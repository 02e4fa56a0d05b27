/* Autocast on a CPU without native dot products in the scope's dtype
 * (include/oar/amp.h, "a low dtype the CPU only emulates"): the query
 * oar_device_native_dot and its environment override, the DEFAULT policy
 * (one warning, bf16 compute), LOW (bf16, silent) and F32 (f32 compute,
 * the API kept: gradients, the loss scaler), set by the environment and by
 * oar_autocast_set_emulated, and the failure paths. The CPU's answer is
 * pinned with OAR_CPU_NATIVE_BF16 / _F16, so the test means the same on
 * any CPU. */
#include "../test.h"

#include <unistd.h>

#include "../stderr_capture.h"

static oar_tensor *randn(int64_t r, int64_t c) { return oar_randn(OAR_F32, 2, (int64_t[]){r, c}); }

/* a and b hold the same values, exactly (false on a NULL or a size mismatch). */
static bool same(oar_tensor *a, oar_tensor *b) {
    if (!a || !b || oar_tensor_numel(a) != oar_tensor_numel(b)) return false;
    double *x = test_values(a), *y = test_values(b);
    bool eq = true;
    for (int64_t i = 0; i < oar_tensor_numel(a); i++) eq = eq && x[i] == y[i];
    free(x);
    free(y);
    return eq;
}

/* ---- the query ---------------------------------------------------------------------- */

static void test_query(void) {
    oar_device *cpu = oar_device_cpu();
    CHECK(oar_device_native_dot(cpu, OAR_F32) == 1 && oar_device_native_dot(cpu, OAR_F64) == 1);
    CHECK(oar_device_native_dot(cpu, OAR_I64) == 0);
    setenv("OAR_CPU_NATIVE_BF16", "0", 1);
    CHECK(oar_device_native_dot(cpu, OAR_BF16) == 0);
    setenv("OAR_CPU_NATIVE_BF16", "1", 1);
    CHECK(oar_device_native_dot(cpu, OAR_BF16) == 1);
    setenv("OAR_CPU_NATIVE_F16", "1", 1);
    CHECK(oar_device_native_dot(cpu, OAR_F16) == 1);
    unsetenv("OAR_CPU_NATIVE_F16"); /* oar's CPU kernels compute f16 in f32 on any CPU */
    CHECK(oar_device_native_dot(cpu, OAR_F16) == 0);
    unsetenv("OAR_CPU_NATIVE_BF16"); /* the probe: 0 or 1, whatever this CPU is */
    int probe = oar_device_native_dot(cpu, OAR_BF16);
    CHECK(probe == 0 || probe == 1);
    setenv("OAR_CPU_NATIVE_BF16", "yes", 1); /* not "0" / "1": the probe decides */
    CHECK(oar_device_native_dot(cpu, OAR_BF16) == probe);
    unsetenv("OAR_CPU_NATIVE_BF16");
    /* failure paths */
    CHECK_STATUS_FAILS(oar_device_native_dot(NULL, OAR_BF16) < 0, "device is NULL");
    CHECK_STATUS_FAILS(oar_device_native_dot(cpu, 99) < 0, "dtype code 99 is not an oar dtype");
    CHECK_STATUS_FAILS(oar_device_native_dot(cpu, -1) < 0, "dtype code -1");
}

/* ---- the policies ------------------------------------------------------------------- */

/* The product of a and b in a bf16 scope, and the scope's compute dtype. */
static oar_tensor *scoped_matmul(oar_tensor *a, oar_tensor *b, oar_dtype *compute) {
    CHECK(oar_autocast_push(OAR_BF16) == 0);
    *compute = oar_autocast_compute_dtype();
    CHECK(oar_autocast_enabled() && oar_autocast_dtype() == OAR_BF16); /* the API is the same */
    oar_tensor *y = oar_matmul(a, b);
    CHECK(oar_autocast_pop() == 0);
    return y;
}

static void test_default_warns_once(void) {
    setenv("OAR_CPU_NATIVE_BF16", "0", 1);
    unsetenv("OAR_AUTOCAST_EMULATED");
    oar_pool *p = oar_pool_push();
    oar_tensor *a = randn(4, 8), *b = randn(8, 3);
    oar_dtype c1, c2;
    capture_begin();
    oar_tensor *y1 = scoped_matmul(a, b, &c1), *y2 = scoped_matmul(a, b, &c2);
    const char *err = capture_end();
    /* bf16 anyway, and one warning for both scopes that says what to do */
    CHECK(c1 == OAR_BF16 && c2 == OAR_BF16);
    CHECK(oar_tensor_dtype(y1) == OAR_BF16 && oar_tensor_dtype(y2) == OAR_BF16);
    CHECK(count(err, "oar: warning: autocast: this CPU has no native bf16 dot products") == 1);
    CHECK(strstr(err, "OAR_AUTOCAST_EMULATED=f32") && strstr(err, "=low"));
    /* the CPU said yes: no warning, bf16 */
    setenv("OAR_CPU_NATIVE_BF16", "1", 1);
    capture_begin();
    y1 = scoped_matmul(a, b, &c1);
    err = capture_end();
    CHECK(c1 == OAR_BF16 && oar_tensor_dtype(y1) == OAR_BF16 && !strstr(err, "autocast"));
    unsetenv("OAR_CPU_NATIVE_BF16");
    oar_pool_pop(p);
}

static void test_env_policies(void) {
    setenv("OAR_CPU_NATIVE_BF16", "0", 1);
    oar_pool *p = oar_pool_push();
    oar_tensor *a = randn(5, 7), *b = randn(7, 4);
    oar_tensor *ref = oar_matmul(a, b);
    oar_dtype c;
    /* f32: the product is the f32 one, exactly; nothing printed */
    setenv("OAR_AUTOCAST_EMULATED", "f32", 1);
    capture_begin();
    oar_tensor *y = scoped_matmul(a, b, &c);
    const char *err = capture_end();
    CHECK(c == OAR_F32 && oar_tensor_dtype(y) == OAR_F32 && !strstr(err, "autocast"));
    CHECK(same(y, ref));
    /* a bf16 input is cast up (not the f32 one down) */
    oar_tensor *ab = oar_cast(a, OAR_BF16);
    CHECK(oar_autocast_push(OAR_BF16) == 0);
    CHECK(oar_tensor_dtype(oar_matmul(ab, b)) == OAR_F32);
    CHECK(oar_tensor_dtype(oar_softmax(oar_matmul(ab, b), -1)) == OAR_F32); /* the f32 list as before */
    CHECK(oar_autocast_pop() == 0);
    CHECK(oar_autocast_compute_dtype() == OAR_F32); /* outside any scope */
    /* low: bf16, silent */
    setenv("OAR_AUTOCAST_EMULATED", "low", 1);
    capture_begin();
    y = scoped_matmul(a, b, &c);
    err = capture_end();
    CHECK(c == OAR_BF16 && oar_tensor_dtype(y) == OAR_BF16 && !strstr(err, "autocast"));
    /* the F32 choice is made when a scope opens and kept by it */
    setenv("OAR_AUTOCAST_EMULATED", "f32", 1);
    CHECK(oar_autocast_push(OAR_BF16) == 0);
    setenv("OAR_AUTOCAST_EMULATED", "low", 1);
    CHECK(oar_tensor_dtype(oar_matmul(a, b)) == OAR_F32);
    CHECK(oar_autocast_push(OAR_BF16) == 0); /* an inner scope chooses again */
    CHECK(oar_tensor_dtype(oar_matmul(a, b)) == OAR_BF16);
    CHECK(oar_autocast_pop() == 0 && oar_autocast_pop() == 0);
    unsetenv("OAR_AUTOCAST_EMULATED");
    unsetenv("OAR_CPU_NATIVE_BF16");
    oar_pool_pop(p);
}

/* Under F32 the AMP API keeps working: gradients into f32 leaves match the
 * f32 run's, and the loss scaler steps and grows as in any scope. */
static void test_f32_training_step(void) {
    setenv("OAR_CPU_NATIVE_BF16", "0", 1);
    CHECK(oar_autocast_set_emulated(OAR_AUTOCAST_EMULATED_F32) == 0);
    setenv("OAR_AUTOCAST_EMULATED", "low", 1); /* the call wins over the environment */
    oar_pool *p = oar_pool_push();
    oar_tensor *x = randn(6, 5), *w0 = randn(5, 3);
    oar_tensor *w[2] = {oar_tensor_retain(oar_clone(w0)), oar_tensor_retain(oar_clone(w0))}, *g[2];
    for (int amp = 0; amp < 2; amp++) {
        oar_tensor_set_requires_grad(w[amp], true);
        if (amp) CHECK(oar_autocast_push(OAR_BF16) == 0);
        oar_tensor *loss = oar_mean(oar_square(oar_matmul(x, w[amp])), 0, NULL, false);
        if (amp) CHECK(oar_autocast_pop() == 0);
        oar_grad_scaler *s = oar_grad_scaler_new(1024, 2, 0.5, 1);
        oar_optimizer *opt = oar_sgd_new(1, &w[amp], &(oar_sgd_options){.lr = 0.1});
        CHECK(oar_tensor_dtype(loss) == OAR_F32);
        CHECK(oar_backward(oar_grad_scaler_scale(s, loss), NULL) == 0);
        CHECK(oar_grad_scaler_step(s, opt) == 0 && !oar_grad_scaler_step_skipped(s));
        CHECK(oar_grad_scaler_update(s) == 0 && oar_grad_scaler_get_scale(s) == 2048);
        g[amp] = oar_tensor_grad(w[amp]);
        CHECK(g[amp] && oar_tensor_dtype(g[amp]) == OAR_F32);
        oar_optim_free(opt);
        oar_grad_scaler_free(s);
    }
    /* f32 compute: the same (unscaled) gradient and the same step as without autocast */
    CHECK(same(g[0], g[1]) && same(w[0], w[1]));
    CHECK(oar_autocast_set_emulated(OAR_AUTOCAST_EMULATED_DEFAULT) == 0);
    unsetenv("OAR_AUTOCAST_EMULATED");
    unsetenv("OAR_CPU_NATIVE_BF16");
    oar_tensor_release(w[0]);
    oar_tensor_release(w[1]);
    oar_pool_pop(p);
}

/* Runs before any f16 scope: an environment value that names no policy
 * acts as DEFAULT, and the (first, so printed) warning names it. */
static void test_bad_policy(void) {
    CHECK_STATUS_FAILS(oar_autocast_set_emulated((oar_autocast_emulated)3), "mode 3 is not DEFAULT");
    CHECK_STATUS_FAILS(oar_autocast_set_emulated((oar_autocast_emulated)-1), "mode -1");
    unsetenv("OAR_CPU_NATIVE_F16");
    setenv("OAR_AUTOCAST_EMULATED", "fp32", 1);
    oar_pool *p = oar_pool_push();
    oar_tensor *a = randn(2, 3), *b = randn(3, 2);
    capture_begin();
    for (int i = 0; i < 2; i++) {
        CHECK(oar_autocast_push(OAR_F16) == 0);
        CHECK(oar_autocast_compute_dtype() == OAR_F16 && oar_tensor_dtype(oar_matmul(a, b)) == OAR_F16);
        CHECK(oar_autocast_pop() == 0);
    }
    const char *err = capture_end();
    CHECK(count(err, "no native f16 dot products") == 1);
    CHECK(strstr(err, "OAR_AUTOCAST_EMULATED=\"fp32\" is neither"));
    oar_pool_pop(p);
    unsetenv("OAR_AUTOCAST_EMULATED");
}

int main(void) {
    RUN(test_query);
    RUN(test_bad_policy);
    RUN(test_default_warns_once);
    RUN(test_env_policies);
    RUN(test_f32_training_step);
    return test_summary();
}

/* Autocast on a plugin device that only emulates the scope's dtype
 * (include/oar/amp.h, "a low dtype the CPU only emulates"): LOW ops on a
 * device's tensors follow the emulated-dtype policy by that device's own
 * native_dot answer, apart from the CPU's. On the mock devices
 * (tests/devices/plugins/mock_plugin.c: bf16 emulated, f16 native;
 * OAR_TEST_MOCK_NATIVE_BF16=1 makes bf16 native, =fail makes the answer a
 * failure), with the CPU pinned native (OAR_CPU_NATIVE_BF16=1) so that
 * only the device's answer matters:
 * - F32: a bf16-scope matmul on mock:0 computes in f32 (f32 output, the
 *   f32 product exactly), while the CPU's in the same scope stays bf16;
 * - LOW: bf16 (the bf16 product exactly), nothing printed;
 * - DEFAULT: bf16, one warning per device and dtype naming the device and
 *   the choices; none before a LOW op runs on the device;
 * - a native device (f16 scope; bf16 with the variable set) is unaffected
 *   under F32, and a CPU that emulates (F32: f32 on the CPU) does not
 *   decide for the device;
 * - a scope keeps the device's answer it got first (asked once per scope),
 *   an inner scope asks again;
 * - a failed answer counts as native, is logged once, and leaves the
 *   caller's error state as it was.
 * With --opencl: F32 and DEFAULT on opencl:0 (PoCL here; its native_dot
 * says 0 for bf16), skipped (exit 77) without an OpenCL device. */
#include "test.h"

#include "opencl_common.h"

#include <unistd.h>

#ifndef OAR_TEST_PLUGIN_DIR
#error "OAR_TEST_PLUGIN_DIR must name the folder of the mock plugin"
#endif

#include "stderr_capture.h"

/* a and b hold the same values, exactly (false on a NULL or a size mismatch). */
static bool same(oar_tensor *a, oar_tensor *b) {
    if (!a || !b || oar_tensor_numel(a) != oar_tensor_numel(b)) return false;
    double *x = test_values(a), *y = test_values(b);
    bool eq = x && y;
    for (int64_t i = 0; eq && i < oar_tensor_numel(a); i++) eq = x[i] == y[i];
    free(x);
    free(y);
    return eq;
}

static oar_device *m0, *m1;
static oar_tensor *a, *b, *ref_f32, *ref_bf16, *ref_f16; /* the inputs (CPU) and their products */

/* a @ b on device d inside a scope of low; *dt gets its dtype. The result
 * is on d (NULL after a failure). */
static oar_tensor *scoped_matmul(oar_device *d, oar_dtype low, oar_dtype *dt) {
    oar_tensor *da = oar_tensor_to(a, d), *db = oar_tensor_to(b, d);
    CHECK(oar_autocast_push(low) == 0);
    oar_tensor *y = oar_matmul(da, db);
    CHECK(oar_autocast_pop() == 0);
    CHECK(y && oar_tensor_device(y) == d);
    *dt = y ? oar_tensor_dtype(y) : OAR_DTYPE_COUNT;
    return y;
}

static void test_f32(void) {
    CHECK(oar_autocast_set_emulated(OAR_AUTOCAST_EMULATED_F32) == 0);
    oar_pool *p = oar_pool_push();
    oar_dtype dt;
    capture_begin();
    oar_tensor *y = scoped_matmul(m0, OAR_BF16, &dt);
    /* a bf16 input on the device is cast up, not the f32 one down; the
     * CPU (native here) stays bf16 in the same scope */
    oar_tensor *dab = oar_tensor_to(oar_cast(a, OAR_BF16), m0), *db = oar_tensor_to(b, m0);
    CHECK(oar_autocast_push(OAR_BF16) == 0);
    CHECK(oar_autocast_compute_dtype() == OAR_BF16); /* the CPU's, as documented */
    oar_tensor *yb = oar_matmul(dab, db), *yc = oar_matmul(a, b);
    CHECK(oar_autocast_pop() == 0);
    const char *err = capture_end();
    CHECK(dt == OAR_F32 && same(y, ref_f32)); /* the f32 product, exactly */
    CHECK(yb && oar_tensor_dtype(yb) == OAR_F32 && oar_tensor_device(yb) == m0);
    CHECK(yc && oar_tensor_dtype(yc) == OAR_BF16 && same(yc, ref_bf16));
    CHECK(!strstr(err, "autocast"));
    oar_pool_pop(p);
    CHECK(oar_autocast_set_emulated(OAR_AUTOCAST_EMULATED_DEFAULT) == 0);
}

static void test_low(void) {
    setenv("OAR_AUTOCAST_EMULATED", "low", 1);
    oar_pool *p = oar_pool_push();
    oar_dtype dt;
    capture_begin();
    oar_tensor *y = scoped_matmul(m0, OAR_BF16, &dt);
    const char *err = capture_end();
    CHECK(dt == OAR_BF16 && same(y, ref_bf16) && !strstr(err, "autocast"));
    oar_pool_pop(p);
    unsetenv("OAR_AUTOCAST_EMULATED");
}

/* Runs before any other DEFAULT scope on the mock devices (the warning is
 * once per process). */
static void test_default_warns_once(void) {
    unsetenv("OAR_AUTOCAST_EMULATED");
    oar_pool *p = oar_pool_push();
    oar_dtype d1, d2, d3;
    /* an op of the promote list on the device: nothing asked, nothing said */
    oar_tensor *da = oar_tensor_to(a, m1);
    capture_begin();
    CHECK(oar_autocast_push(OAR_BF16) == 0);
    CHECK(oar_add(da, da) != NULL);
    CHECK(oar_autocast_pop() == 0);
    const char *err = capture_end();
    CHECK(!strstr(err, "autocast"));
    /* two scopes on mock:0: one warning, naming the device and the choices */
    capture_begin();
    oar_tensor *y1 = scoped_matmul(m0, OAR_BF16, &d1), *y2 = scoped_matmul(m0, OAR_BF16, &d2);
    err = capture_end();
    CHECK(d1 == OAR_BF16 && d2 == OAR_BF16 && same(y1, ref_bf16) && same(y2, ref_bf16));
    CHECK(count(err, "oar: warning: autocast: device mock:0 has no native bf16 dot products") == 1);
    CHECK(count(err, "oar: warning: autocast:") == 1);
    CHECK(strstr(err, "on its tensors") && strstr(err, "OAR_AUTOCAST_EMULATED=f32") && strstr(err, "=low"));
    /* mock:1 is another device: its own warning, once */
    capture_begin();
    y1 = scoped_matmul(m1, OAR_BF16, &d1);
    y2 = scoped_matmul(m1, OAR_BF16, &d2);
    y2 = scoped_matmul(m0, OAR_BF16, &d3);
    err = capture_end();
    CHECK(d1 == OAR_BF16 && d2 == OAR_BF16 && d3 == OAR_BF16);
    CHECK(count(err, "device mock:1 has no native bf16") == 1 && count(err, "oar: warning: autocast:") == 1);
    oar_pool_pop(p);
}

/* A device that computes the scope's dtype natively keeps it under F32,
 * whatever the CPU does. */
static void test_native_unaffected(void) {
    setenv("OAR_AUTOCAST_EMULATED", "f32", 1);
    setenv("OAR_CPU_NATIVE_F16", "0", 1);
    oar_pool *p = oar_pool_push();
    oar_dtype dt;
    capture_begin();
    /* f16: the mock's is native, the CPU's not (it computes f32 there) */
    oar_tensor *da = oar_tensor_to(a, m0), *db = oar_tensor_to(b, m0);
    CHECK(oar_autocast_push(OAR_F16) == 0);
    oar_tensor *yd = oar_matmul(da, db), *yc = oar_matmul(a, b);
    CHECK(oar_autocast_compute_dtype() == OAR_F32);
    CHECK(oar_autocast_pop() == 0);
    CHECK(yd && oar_tensor_dtype(yd) == OAR_F16 && same(yd, ref_f16));
    CHECK(yc && oar_tensor_dtype(yc) == OAR_F32);
    /* bf16 made native on the device, the CPU's made emulated */
    setenv("OAR_TEST_MOCK_NATIVE_BF16", "1", 1);
    setenv("OAR_CPU_NATIVE_BF16", "0", 1);
    oar_tensor *y = scoped_matmul(m0, OAR_BF16, &dt);
    CHECK(dt == OAR_BF16 && same(y, ref_bf16));
    setenv("OAR_CPU_NATIVE_BF16", "1", 1);
    unsetenv("OAR_TEST_MOCK_NATIVE_BF16");
    const char *err = capture_end();
    CHECK(!strstr(err, "autocast"));
    oar_pool_pop(p);
    unsetenv("OAR_CPU_NATIVE_F16");
    unsetenv("OAR_AUTOCAST_EMULATED");
}

/* The device is asked once per scope: its answer (and the policy read
 * when the scope opened) hold for the scope; an inner scope asks again,
 * and popping back to the outer one finds its answer. */
static void test_scope_keeps_answer(void) {
    setenv("OAR_AUTOCAST_EMULATED", "f32", 1);
    oar_pool *p = oar_pool_push();
    oar_tensor *da = oar_tensor_to(a, m0), *db = oar_tensor_to(b, m0);
    CHECK(oar_autocast_push(OAR_BF16) == 0);
    unsetenv("OAR_AUTOCAST_EMULATED"); /* the scope keeps f32 */
    oar_tensor *y1 = oar_matmul(da, db);
    setenv("OAR_TEST_MOCK_NATIVE_BF16", "1", 1);
    oar_tensor *y2 = oar_matmul(da, db); /* the answer it got first: emulated */
    setenv("OAR_AUTOCAST_EMULATED", "f32", 1);
    CHECK(oar_autocast_push(OAR_BF16) == 0);
    oar_tensor *y3 = oar_matmul(da, db); /* asked again: native */
    unsetenv("OAR_TEST_MOCK_NATIVE_BF16");
    oar_tensor *y4 = oar_matmul(da, db);
    CHECK(oar_autocast_pop() == 0);
    oar_tensor *y5 = oar_matmul(da, db); /* the outer scope's answer again */
    CHECK(oar_autocast_pop() == 0);
    CHECK(y1 && oar_tensor_dtype(y1) == OAR_F32 && y2 && oar_tensor_dtype(y2) == OAR_F32);
    CHECK(y3 && oar_tensor_dtype(y3) == OAR_BF16 && y4 && oar_tensor_dtype(y4) == OAR_BF16);
    CHECK(y5 && oar_tensor_dtype(y5) == OAR_F32);
    oar_pool_pop(p);
    unsetenv("OAR_AUTOCAST_EMULATED");
}

/* A failed answer: native (bf16 under F32), logged once per device and
 * dtype, and the caller's error state kept (a pending message stays, no
 * message appears where none was). */
static void test_failed_probe(void) {
    setenv("OAR_AUTOCAST_EMULATED", "f32", 1);
    setenv("OAR_TEST_MOCK_NATIVE_BF16", "fail", 1);
    oar_pool *p = oar_pool_push();
    oar_tensor *da = oar_tensor_to(a, m1), *db = oar_tensor_to(b, m1);
    oar_clear_error();
    capture_begin();
    CHECK(oar_autocast_push(OAR_BF16) == 0);
    oar_tensor *y1 = oar_matmul(da, db);
    CHECK(oar_last_error()[0] == 0);
    CHECK(oar_autocast_pop() == 0);
    CHECK(oar_autocast_push(OAR_BF16) == 0);
    oar_set_error(OAR_ERR_IO, "an earlier failure");
    oar_tensor *y2 = oar_matmul(da, db);
    CHECK(!strcmp(oar_last_error(), "an earlier failure"));
    oar_clear_error();
    CHECK(oar_autocast_pop() == 0);
    const char *err = capture_end();
    CHECK(y1 && oar_tensor_dtype(y1) == OAR_BF16 && y2 && oar_tensor_dtype(y2) == OAR_BF16);
    CHECK(count(err, "could not ask device mock:1 whether it computes bf16") == 1 && count(err, "oar: warning: autocast:") == 1);
    CHECK(strstr(err, "made to fail") != NULL);
    oar_pool_pop(p);
    unsetenv("OAR_TEST_MOCK_NATIVE_BF16");
    unsetenv("OAR_AUTOCAST_EMULATED");
}

/* ---- opencl:0 --------------------------------------------------------------------- */

static void test_opencl(oar_device *cl) {
    oar_pool *p = oar_pool_push();
    oar_dtype dt;
    CHECK(oar_device_native_dot(cl, OAR_BF16) == 0); /* what the case is about */
    /* F32: the device's own f32 matmul (no fallback, nothing cast), close to the CPU's */
    CHECK(oar_autocast_set_emulated(OAR_AUTOCAST_EMULATED_F32) == 0);
    oar_device_fallback_reset();
    capture_begin();
    oar_tensor *y = scoped_matmul(cl, OAR_BF16, &dt);
    const char *err = capture_end();
    CHECK(dt == OAR_F32 && !strstr(err, "autocast") && oar_device_fallback_count() == 0);
    double *got = test_values(y), *want = test_values(ref_f32);
    double diff = got && want ? 0 : 1e9;
    for (int64_t i = 0; got && want && i < oar_tensor_numel(ref_f32); i++) diff = fmax(diff, fabs(got[i] - want[i]));
    CHECK_NEAR(diff, 0, 1e-5);
    free(got);
    free(want);
    /* DEFAULT: bf16, one warning naming opencl:0. The inputs are bf16
     * already (cast on the CPU; the device's own f32 -> bf16 cast is
     * test_opencl_half's), so only the matmul's policy is seen here. */
    CHECK(oar_autocast_set_emulated(OAR_AUTOCAST_EMULATED_DEFAULT) == 0);
    unsetenv("OAR_AUTOCAST_EMULATED");
    oar_tensor *ha = oar_tensor_to(oar_cast(a, OAR_BF16), cl), *hb = oar_tensor_to(oar_cast(b, OAR_BF16), cl);
    oar_tensor *y1 = NULL, *y2 = NULL;
    capture_begin();
    for (int i = 0; i < 2; i++) {
        CHECK(oar_autocast_push(OAR_BF16) == 0);
        *(i ? &y2 : &y1) = oar_matmul(ha, hb);
        CHECK(oar_autocast_pop() == 0);
    }
    err = capture_end();
    CHECK(y1 && oar_tensor_dtype(y1) == OAR_BF16 && y2 && oar_tensor_dtype(y2) == OAR_BF16);
    CHECK(same(y1, ref_bf16));
    CHECK(count(err, "device opencl:0 has no native bf16 dot products") == 1 && count(err, "oar: warning: autocast:") == 1);
    oar_pool_pop(p);
}

int main(int argc, char **argv) {
    bool opencl = argc > 1 && !strcmp(argv[1], "--opencl");
    oar_device *cl = NULL;
    if (opencl) {
        if (!(cl = opencl_device_or_skip())) return TEST_SKIP;
    } else {
        setenv("OAR_PLUGIN_PATH", OAR_TEST_PLUGIN_DIR, 1);
        setenv("OAR_PLUGIN_NO_INSTALL_DIR", "1", 1);
        m0 = oar_device_get("mock:0"); /* (loads the folder, refused plugins logged before any capture) */
        m1 = oar_device_get("mock:1");
        if (!m0 || !m1) {
            fprintf(stderr, "mock plugin not loaded: %s\n", oar_last_error());
            return 1;
        }
    }
    setenv("OAR_CPU_NATIVE_BF16", "1", 1); /* only the device's answer decides */
    unsetenv("OAR_AUTOCAST_EMULATED");
    unsetenv("OAR_TEST_MOCK_NATIVE_BF16");
    oar_manual_seed(7);
    oar_pool *pool = oar_pool_push(); /* (the products kept, the casts freed) */
    a = oar_tensor_retain(oar_randn(OAR_F32, 2, (int64_t[]){5, 7}));
    b = oar_tensor_retain(oar_randn(OAR_F32, 2, (int64_t[]){7, 4}));
    ref_f32 = oar_tensor_retain(oar_matmul(a, b));
    ref_bf16 = oar_tensor_retain(oar_matmul(oar_cast(a, OAR_BF16), oar_cast(b, OAR_BF16)));
    ref_f16 = oar_tensor_retain(oar_matmul(oar_cast(a, OAR_F16), oar_cast(b, OAR_F16)));
    oar_pool_pop(pool);
    CHECK(ref_f32 && ref_bf16 && ref_f16);
    if (opencl) {
        test_current = "test_opencl";
        test_opencl(cl);
    } else {
        RUN(test_default_warns_once);
        RUN(test_f32);
        RUN(test_low);
        RUN(test_native_unaffected);
        RUN(test_scope_keeps_answer);
        RUN(test_failed_probe);
    }
    oar_tensor_release(a);
    oar_tensor_release(b);
    oar_tensor_release(ref_f32);
    oar_tensor_release(ref_bf16);
    oar_tensor_release(ref_f16);
    return test_summary();
}

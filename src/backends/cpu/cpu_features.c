/* What the CPU computes natively: the CPU device table's native_dot
 * (oar_device_native_dot, include/oar/device.h). The answer is the
 * hardware's (cpuid through __builtin_cpu_supports, which also checks that
 * the OS saves the AVX-512 state) and the build's: bf16 runs on the
 * hardware only through oneDNN's kernels (OAR_WITH_DNNL), and no CPU
 * kernel of oar uses AVX512_FP16, so f16 is computed in f32 between casts
 * whatever the CPU. OAR_CPU_NATIVE_BF16 / OAR_CPU_NATIVE_F16 override the
 * answer ("0" or "1"; read at each call, so a test can pin it). */
#include "cpu.h"

#include <stdlib.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif
#include <string.h>

/* -1: no override; else the value of env "0" / "1" */
static int env_override(const char *name) {
    const char *v = getenv(name);
    if (!v) return -1;
    if (!strcmp(v, "0")) return 0;
    if (!strcmp(v, "1")) return 1;
    return -1; /* (anything else: the probe decides) */
}

/* cpuid leaf 7: AVX512_BF16 is sub-leaf 1's EAX bit 5, AMX-BF16 sub-leaf 0's EDX bit 22. Read
 * directly: clang 14's __builtin_cpu_supports knows neither name. avx512f through the builtin,
 * which also checks that the OS saves the AVX-512 state. */
static bool cpu_has_bf16_dot(void) {
#if defined(__x86_64__) && defined(__GNUC__) && defined(OAR_WITH_DNNL)
    unsigned a, b, c, d;
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f")) return false;
    bool avx512_bf16 = __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a >> 5 & 1);
    bool amx_bf16 = __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d >> 22 & 1);
    return avx512_bf16 || amx_bf16;
#else
    return false;
#endif
}

static bool cpu_has_int8_dot(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512vnni");
#else
    return false;
#endif
}

int oari_cpu_native_dot(void *ctx, int index, int32_t dtype) {
    (void)ctx, (void)index;
    int o;
    switch (dtype) {
    case OAR_BF16: return (o = env_override("OAR_CPU_NATIVE_BF16")) >= 0 ? o : cpu_has_bf16_dot();
    case OAR_F16: return (o = env_override("OAR_CPU_NATIVE_F16")) >= 0 ? o : 0;
    case OAR_U8:
    case OAR_I8: return cpu_has_int8_dot();
    case OAR_F32:
    case OAR_F64:
    case OAR_C64:
    case OAR_C128: return 1;
    default: return 0; /* bool, i32, i64: no dot-product instructions of their own */
    }
}

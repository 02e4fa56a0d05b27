/* f16 and bf16 bit patterns to and from f32, by hand (_Float16 is not in every compiler that
 * builds the tests), for the test plugins that compute in f32 on a device's half-precision
 * tensors: f32 to half rounds to nearest even, NaN stays NaN. */
#ifndef OAR_TEST_HALF_BITS_H
#define OAR_TEST_HALF_BITS_H

#include <math.h>
#include <stdint.h>

static inline float f16_to_f32(uint16_t h) {
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    float v = e == 0    ? ldexpf((float)m, -24)
              : e == 31 ? (m ? NAN : INFINITY)
                        : ldexpf((float)(m | 0x400), e - 25);
    return h & 0x8000 ? -v : v;
}

static inline uint16_t f32_to_f16(float f) {
    union {
        uint32_t u;
        float f;
    } v = {.f = f};
    uint32_t sign = (v.u >> 16) & 0x8000u, a = v.u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);  /* NaN */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* past 65504: inf */
    if (a < 0x38800000u)
        return (uint16_t)(sign | (uint32_t)nearbyintf(fabsf(f) * 0x1p24f)); /* subnormal */
    return (uint16_t)(sign | ((a + 0xfffu + ((a >> 13) & 1u) - (112u << 23)) >> 13));
}

static inline float bf16_to_f32(uint16_t h) {
    union {
        uint32_t u;
        float f;
    } v = {.u = (uint32_t)h << 16};
    return v.f;
}

static inline uint16_t f32_to_bf16(float f) {
    union {
        uint32_t u;
        float f;
    } v = {.f = f};
    if (f != f) return (uint16_t)((v.u >> 16) | 0x40u);
    return (uint16_t)((v.u + 0x7fffu + ((v.u >> 16) & 1u)) >> 16);
}

#endif

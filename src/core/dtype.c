/* dtype facts, PyTorch's type promotion, half-precision conversions and
 * element load/store by dtype. */
#include "core.h"

#include <math.h>
#include <string.h>

static const size_t sizes[OAR_DTYPE_COUNT] = {1, 1, 4, 8, 2, 2, 4, 8, 8, 16, 1};
static const char *const names[OAR_DTYPE_COUNT] = {
    "bool", "uint8", "int32", "int64", "float16", "bfloat16", "float32", "float64",
    "complex64", "complex128", "int8"};

static bool valid(oar_dtype d) { return (unsigned)d < OAR_DTYPE_COUNT; }

size_t oar_dtype_size(oar_dtype d) { return valid(d) ? sizes[d] : 0; }
const char *oar_dtype_name(oar_dtype d) { return valid(d) ? names[d] : "invalid"; }
bool oar_dtype_is_float(oar_dtype d) { return d >= OAR_F16 && d <= OAR_F64; }
bool oar_dtype_is_complex(oar_dtype d) { return d == OAR_C64 || d == OAR_C128; }
bool oar_dtype_is_integral(oar_dtype d) { return (d >= OAR_BOOL && d <= OAR_I64) || d == OAR_I8; }

int oar_promote_types(oar_dtype a, oar_dtype b) {
    if (!valid(a) || !valid(b)) return -1;
    if (a == b) return a;
    if (a == OAR_I8 || b == OAR_I8) { /* i8 sits between u8 and i32 in the lattice */
        oar_dtype other = a == OAR_I8 ? b : a;
        if (other == OAR_BOOL) return OAR_I8;
        if (other == OAR_U8) return OAR_I32; /* PyTorch: i16, which oar lacks */
        return other;                        /* i32 and up hold every i8 */
    }
    if (a > b) { oar_dtype t = a; a = b; b = t; }   /* now a < b */
    if (oar_dtype_is_complex(b)) {
        if (b == OAR_C128 || a == OAR_F64) return OAR_C128;
        return OAR_C64;
    }
    if (a == OAR_F16 && b == OAR_BF16) return OAR_F32;
    return b; /* the enum order is the lattice order for the rest */
}

/* IEEE half <-> float, round to nearest even, with subnormals. */
float oari_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu, bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (mant << 13);
    } else if (exp == 0) {
        if (mant == 0) {
            bits = sign;
        } else { /* subnormal: normalise */
            int e = -1;
            do { e++; mant <<= 1; } while (!(mant & 0x400u));
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((mant & 0x3ffu) << 13);
        }
    } else {
        bits = sign | ((exp + 112u) << 23) | (mant << 13);
    }
    union { uint32_t u; float f; } v = {.u = bits};
    return v.f;
}

uint16_t oari_f32_to_f16(float f) {
    union { uint32_t u; float f; } v = {.f = f};
    uint32_t x = v.u, sign = (x >> 16) & 0x8000u;
    uint32_t absx = x & 0x7fffffffu;
    if (absx > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);   /* NaN */
    if (absx >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);  /* overflow -> inf */
    if (absx < 0x38800000u) {                                    /* subnormal or zero */
        if (absx < 0x33000000u) return (uint16_t)sign;
        uint32_t e = absx >> 23, m = (absx & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - e;       /* 14..24 */
        uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1u))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = absx + 0xfffu + ((absx >> 13) & 1u) - (112u << 23);
    return (uint16_t)(sign | (r >> 13));
}

double oari_load_f64(const void *p, oar_dtype dt) {
    switch (dt) {
    case OAR_BOOL: return *(const uint8_t *)p ? 1.0 : 0.0;
    case OAR_U8: return *(const uint8_t *)p;
    case OAR_I8: return *(const int8_t *)p;
    case OAR_I32: return *(const int32_t *)p;
    case OAR_I64: return (double)*(const int64_t *)p;
    case OAR_F16: return oari_f16_to_f32(*(const uint16_t *)p);
    case OAR_BF16: return oari_bf16_to_f32(*(const uint16_t *)p);
    case OAR_F32: case OAR_C64: return *(const float *)p;
    case OAR_F64: case OAR_C128: return *(const double *)p;
    default: return NAN;
    }
}

/* Float to integer conversion that never invokes undefined behaviour:
 * NaN gives 0, out-of-range values saturate. */
static int64_t to_i64(double v) {
    if (v != v) return 0;
    if (v >= 9.2233720368547758e18) return INT64_MAX;
    if (v <= -9.2233720368547758e18) return INT64_MIN;
    return (int64_t)v;
}

/* PyTorch's float -> int8 on x86: truncate to int32 (cvttsd2si: NaN and
 * values outside int32 give INT32_MIN), then keep the low byte. So 300.7
 * -> 44, -129 -> 127, 1e10 -> 0, NaN -> 0. C leaves this undefined. */
int8_t oari_f64_to_i8(double v) {
    int32_t i = v > -2147483649.0 && v < 2147483648.0 ? (int32_t)v : INT32_MIN;
    return (int8_t)(uint8_t)((uint32_t)i & 0xffu);
}

void oari_store_f64(void *p, oar_dtype dt, double v) {
    switch (dt) {
    case OAR_BOOL: *(uint8_t *)p = v != 0; break;
    case OAR_U8: *(uint8_t *)p = (uint8_t)(to_i64(v) & 0xff); break;
    case OAR_I8: *(int8_t *)p = oari_f64_to_i8(v); break;
    case OAR_I32: *(int32_t *)p = (int32_t)(uint32_t)(uint64_t)to_i64(v); break;
    case OAR_I64: *(int64_t *)p = to_i64(v); break;
    case OAR_F16: *(uint16_t *)p = oari_f32_to_f16((float)v); break;
    case OAR_BF16: *(uint16_t *)p = oari_f32_to_bf16((float)v); break;
    case OAR_F32: *(float *)p = (float)v; break;
    case OAR_F64: *(double *)p = v; break;
    case OAR_C64: ((float *)p)[0] = (float)v; ((float *)p)[1] = 0; break;
    case OAR_C128: ((double *)p)[0] = v; ((double *)p)[1] = 0; break;
    default: break;
    }
}

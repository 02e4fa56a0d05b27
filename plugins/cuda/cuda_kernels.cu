// CUDA kernels of the oar cuda plugin: the f32 and f64 forms of the
// elementwise ops over strided, broadcast views (one thread per output
// element, grid-stride loop), one kernel per row of oar's op table
// src/ops/elementwise.def and dtype made from the row's formula over the
// vocabulary of src/ops/ew_math.h (two passes over the table, suffixes f32
// and f64); conversions between bool, u8, i32, i64, f16, bf16, f32 and f64
// (cast, copy, contiguous); fill in those dtypes; reductions (sum, prod,
// amax, amin) and softmax/log_softmax in f16, bf16 (f32 accumulation), f32
// and f64. The elementwise launchers are listed by op name in
// oar_cuda_ew_table (cuda_plugin.c finds them by name).
#include "cuda_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "ew_math.h"
#include "ew_table.h"
#include "ew_words.h"

__device__ static int64_t at(const oar_cuda_desc &t, int64_t i) {
    int64_t off = t.off;
    for (int64_t d = t.nd - 1; d >= 0; d--) {
        off += (i % t.shape[d]) * t.st[d];
        i /= t.shape[d];
    }
    return off;
}

static unsigned blocks(int64_t n) {
    int64_t b = (n + 255) / 256;
    return (unsigned)(b < 65535 ? (b > 0 ? b : 1) : 65535);
}

#define EW_FOR_EACH(i, n)                                                                      \
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;                    \
         i += (int64_t)gridDim.x * blockDim.x)
#define EW_GO(k, ...)                                                                          \
    k<<<blocks(n), 256, 0, (cudaStream_t)stream>>>(__VA_ARGS__);                               \
    return (int)cudaGetLastError();
#define EW_LAUNCHER(NAME)                                                                      \
    static int l_##NAME(void *o, oar_cuda_desc to, const void *const *in, const oar_cuda_desc *ti, \
                        double p0, double p1, int alt, int64_t n, void *stream)

// unary: p0, p1 are the float attributes P0, P1; alt picks the ALT form
#define EW_UNARY_KERNEL(NAME, TI, TO, EXPR)                                                    \
    __global__ static void k_##NAME(TO *o, oar_cuda_desc to, const TI *px, oar_cuda_desc tx,   \
                                    TI p0, TI p1, int64_t n) {                           \
        EW_FOR_EACH(i, n) {                                                                    \
            TI x = px[at(tx, i)];                                                              \
            o[at(to, i)] = (TO)(EXPR);                                                         \
        }                                                                                      \
    }
#define ALT(f) EW_ALT2, f
#define NO_ALT EW_ALT1, 0
#define EW_UNARY_KERNELS(...) EW_UNARY_KERNELS_(__VA_ARGS__)
#define EW_UNARY_KERNELS_(NAME, TI, TO, EXPR, alt_kind, ALT_EXPR) alt_kind(NAME, TI, TO, EXPR, ALT_EXPR)
#define EW_ALT1(NAME, TI, TO, EXPR, unused)                                                    \
    EW_UNARY_KERNEL(NAME, TI, TO, EXPR)                                                        \
    EW_LAUNCHER(NAME) {                                                                        \
        (void)alt;                                                                             \
        EW_GO(k_##NAME, (TO *)o, to, (const TI *)in[0], ti[0], (TI)p0, (TI)p1, n)                      \
    }
#define EW_ALT2(NAME, TI, TO, EXPR, ALT_EXPR)                                                  \
    EW_UNARY_KERNEL(NAME, TI, TO, EXPR)                                                        \
    EW_UNARY_KERNEL(NAME##_alt, TI, TO, ALT_EXPR)                                              \
    EW_LAUNCHER(NAME) {                                                                        \
        if (alt) {                                                                             \
            EW_GO(k_##NAME##_alt, (TO *)o, to, (const TI *)in[0], ti[0], (TI)p0, (TI)p1, n)            \
        }                                                                                      \
        EW_GO(k_##NAME, (TO *)o, to, (const TI *)in[0], ti[0], (TI)p0, (TI)p1, n)                      \
    }
#define EW_BINARY_KERNEL(NAME, TI, TO, EXPR)                                                   \
    __global__ static void k_##NAME(TO *o, oar_cuda_desc to, const TI *pa, oar_cuda_desc ta,   \
                                    const TI *pb, oar_cuda_desc tb, int64_t n) {               \
        EW_FOR_EACH(i, n) {                                                                    \
            TI a = pa[at(ta, i)], b = pb[at(tb, i)];                                           \
            o[at(to, i)] = (TO)(EXPR);                                                         \
        }                                                                                      \
    }                                                                                          \
    EW_LAUNCHER(NAME) {                                                                        \
        (void)p0, (void)p1, (void)alt;                                                         \
        EW_GO(k_##NAME, (TO *)o, to, (const TI *)in[0], ti[0], (const TI *)in[1], ti[1], n)    \
    }
#define EW_TERNARY_KERNEL(NAME, TI, TO, EXPR)                                                  \
    __global__ static void k_##NAME(TO *o, oar_cuda_desc to, const unsigned char *pa,          \
                                    oar_cuda_desc ta, const TI *pb, oar_cuda_desc tb,          \
                                    const TI *pc, oar_cuda_desc tc, int64_t n) {               \
        EW_FOR_EACH(i, n) {                                                                    \
            unsigned char a = pa[at(ta, i)];                                                   \
            TI b = pb[at(tb, i)], c = pc[at(tc, i)];                                           \
            o[at(to, i)] = (TO)(EXPR);                                                         \
        }                                                                                      \
    }                                                                                          \
    EW_LAUNCHER(NAME) {                                                                        \
        (void)p0, (void)p1, (void)alt;                                                         \
        EW_GO(k_##NAME, (TO *)o, to, (const unsigned char *)in[0], ti[0], (const TI *)in[1],   \
              ti[1], (const TI *)in[2], ti[2], n)                                              \
    }
#define EW_BINARY_KERNEL_N(...) EW_BINARY_KERNEL(__VA_ARGS__)
#define EW_TERNARY_KERNEL_N(...) EW_TERNARY_KERNEL(__VA_ARGS__)

// two passes over the table: its f32 forms, then its f64 forms
#define EW_PASS_B EW_DROP
#define EW_PASS_I EW_DROP
#define EW_PASS_R EW_KEEP
#define EW_SFX f32
#define EW_UNARY(op, rule, cpu, gen, api, forward, alt, gradient, saved, test, onnx, doc)      \
    EW_GEN_IN(gen)(EW_UNARY_KERNELS(EW_SFX_NAME(op##_), EW_TI, EW_OUT_T(rule), forward, alt))
#define EW_BINARY(op, rule, cpu, gen, api, forward, gradient, saved, test, onnx, doc)          \
    EW_GEN_IN(gen)(EW_BINARY_KERNEL_N(EW_SFX_NAME(op##_), EW_TI, EW_OUT_T(rule), forward))
#define EW_TERNARY(op, rule, cpu, gen, api, forward, gradient, saved, test, onnx, doc)         \
    EW_GEN_IN(gen)(EW_TERNARY_KERNEL_N(EW_SFX_NAME(op##_), EW_TI, EW_OUT_T(rule), forward))
#define EW_NONE(op, why)
#include "elementwise.def"
#undef EW_UNARY
#undef EW_BINARY
#undef EW_TERNARY

#undef EW_SFX
#define EW_SFX f64
#define EW_UNARY(op, rule, cpu, gen, api, forward, alt, gradient, saved, test, onnx, doc)      \
    EW_GEN_IN(gen)(EW_UNARY_KERNELS(EW_SFX_NAME(op##_), EW_TI, EW_OUT_T(rule), forward, alt))
#define EW_BINARY(op, rule, cpu, gen, api, forward, gradient, saved, test, onnx, doc)          \
    EW_GEN_IN(gen)(EW_BINARY_KERNEL_N(EW_SFX_NAME(op##_), EW_TI, EW_OUT_T(rule), forward))
#define EW_TERNARY(op, rule, cpu, gen, api, forward, gradient, saved, test, onnx, doc)         \
    EW_GEN_IN(gen)(EW_TERNARY_KERNEL_N(EW_SFX_NAME(op##_), EW_TI, EW_OUT_T(rule), forward))
#include "elementwise.def"
#undef EW_UNARY
#undef EW_BINARY
#undef EW_TERNARY

// the bool and integer forms (the rows whose gen column has them): a
// pass for b1 (bool), then u8, i32 and i64
#define EW_UNARY(op, rule, cpu, gen, api, forward, alt, gradient, saved, test, onnx, doc)      \
    EW_GEN_IN(gen)(EW_UNARY_KERNELS(EW_SFX_NAME(op##_), EW_TI, EW_OUT_T(rule), forward, alt))
#define EW_BINARY(op, rule, cpu, gen, api, forward, gradient, saved, test, onnx, doc)          \
    EW_GEN_IN(gen)(EW_BINARY_KERNEL_N(EW_SFX_NAME(op##_), EW_TI, EW_OUT_T(rule), forward))
#define EW_TERNARY(op, rule, cpu, gen, api, forward, gradient, saved, test, onnx, doc)         \
    EW_GEN_IN(gen)(EW_TERNARY_KERNEL_N(EW_SFX_NAME(op##_), EW_TI, EW_OUT_T(rule), forward))
#undef EW_PASS_R
#define EW_PASS_R EW_DROP
#undef EW_PASS_B
#define EW_PASS_B EW_KEEP
#undef EW_SFX
#define EW_SFX b1
#include "elementwise.def"
#undef EW_PASS_B
#define EW_PASS_B EW_DROP
#undef EW_PASS_I
#define EW_PASS_I EW_KEEP
#undef EW_SFX
#define EW_SFX u8
#include "elementwise.def"
#undef EW_SFX
#define EW_SFX i32
#include "elementwise.def"
#undef EW_SFX
#define EW_SFX i64
#include "elementwise.def"
#undef EW_UNARY
#undef EW_BINARY
#undef EW_TERNARY

// their launchers by op name, one table per dtype (the same passes)
#define EW_ENTRY1(name, n, L) {name, n, l_##L},
#define EW_ENTRY1_N(...) EW_ENTRY1(__VA_ARGS__)
#define EW_UNARY(op, rule, cpu, gen, ...) EW_GEN_IN(gen)(EW_ENTRY1_N(#op, 1, EW_SFX_NAME(op##_)))
#define EW_BINARY(op, rule, cpu, gen, ...) EW_GEN_IN(gen)(EW_ENTRY1_N(#op, 2, EW_SFX_NAME(op##_)))
#define EW_TERNARY(op, rule, cpu, gen, ...) EW_GEN_IN(gen)(EW_ENTRY1_N(#op, 3, EW_SFX_NAME(op##_)))
#undef EW_PASS_I
#define EW_PASS_I EW_DROP
#undef EW_PASS_B
#define EW_PASS_B EW_KEEP
#undef EW_SFX
#define EW_SFX b1
extern "C" const oar_cuda_ew1 oar_cuda_ew_b1[] = {
#include "elementwise.def"
    {NULL, 0, NULL}};
#undef EW_PASS_B
#define EW_PASS_B EW_DROP
#undef EW_PASS_I
#define EW_PASS_I EW_KEEP
#undef EW_SFX
#define EW_SFX u8
extern "C" const oar_cuda_ew1 oar_cuda_ew_u8[] = {
#include "elementwise.def"
    {NULL, 0, NULL}};
#undef EW_SFX
#define EW_SFX i32
extern "C" const oar_cuda_ew1 oar_cuda_ew_i32[] = {
#include "elementwise.def"
    {NULL, 0, NULL}};
#undef EW_SFX
#define EW_SFX i64
extern "C" const oar_cuda_ew1 oar_cuda_ew_i64[] = {
#include "elementwise.def"
    {NULL, 0, NULL}};
#undef EW_UNARY
#undef EW_BINARY
#undef EW_TERNARY
#undef EW_PASS_I
#define EW_PASS_I EW_DROP
#undef EW_PASS_R
#define EW_PASS_R EW_KEEP

// the launchers by op name, f32 and f64
#define EW_ENTRY(name, n, F32, F64) {name, n, l_##F32, l_##F64},
#define EW_ENTRY_N(...) EW_ENTRY(__VA_ARGS__)
#define EW_UNARY(op, rule, cpu, gen, ...) EW_GEN_IN(gen)(EW_ENTRY_N(#op, 1, EW_CAT(op##_, f32), EW_CAT(op##_, f64)))
#define EW_BINARY(op, rule, cpu, gen, ...) EW_GEN_IN(gen)(EW_ENTRY_N(#op, 2, EW_CAT(op##_, f32), EW_CAT(op##_, f64)))
#define EW_TERNARY(op, rule, cpu, gen, ...) EW_GEN_IN(gen)(EW_ENTRY_N(#op, 3, EW_CAT(op##_, f32), EW_CAT(op##_, f64)))
extern "C" const oar_cuda_ew oar_cuda_ew_table[] = {
#include "elementwise.def"
    {NULL, 0, NULL, NULL}};

// ---- conversions and fill: every pair of bool, u8, i32, i64, f16, bf16, f32, f64 ----
// A value travels as long long (integers, bool) or double (floats), so
// i64 -> i64 and i64 -> f64 lose nothing; bool is (v != 0); a float to an
// integer truncates toward zero, as C's cast (and oar's CPU kernel) does.
template <typename T> struct kind { static const bool flt = false; };
template <> struct kind<__half> { static const bool flt = true; };
template <> struct kind<__nv_bfloat16> { static const bool flt = true; };
template <> struct kind<float> { static const bool flt = true; };
template <> struct kind<double> { static const bool flt = true; };

template <typename T> __device__ static double as_d(T v) { return (double)v; }
template <> __device__ double as_d<__half>(__half v) { return (double)__half2float(v); }
template <> __device__ double as_d<__nv_bfloat16>(__nv_bfloat16 v) { return (double)__bfloat162float(v); }
template <typename T> __device__ static T from_d(double v) { return (T)v; }
template <> __device__ unsigned char from_d<unsigned char>(double v) { return (unsigned char)(int)v; }
template <> __device__ __half from_d<__half>(double v) { return __double2half(v); }
template <> __device__ __nv_bfloat16 from_d<__nv_bfloat16>(double v) { return __double2bfloat16(v); }

struct boolean { unsigned char v; }; // oar's bool: one byte, 0 or 1

template <typename TO, typename TI> __device__ static TO conv(TI x) {
    if constexpr (kind<TI>::flt) return from_d<TO>(as_d<TI>(x));
    else if constexpr (kind<TO>::flt) return from_d<TO>((double)(long long)x);
    else
        return (TO)(long long)x;
}
template <typename TO> __device__ static TO conv_any(boolean x) { return conv<TO, long long>(x.v != 0); }
template <typename TI> __device__ static boolean to_bool(TI x) {
    if constexpr (kind<TI>::flt) return boolean{(unsigned char)(as_d<TI>(x) != 0)};
    else return boolean{(unsigned char)((long long)x != 0)};
}

template <typename TO, typename TI> struct convert_op {
    __device__ static TO run(TI x) { return conv<TO, TI>(x); }
};
template <typename TI> struct convert_op<boolean, TI> {
    __device__ static boolean run(TI x) { return to_bool<TI>(x); }
};
template <typename TO> struct convert_op<TO, boolean> {
    __device__ static TO run(boolean x) { return conv_any<TO>(x); }
};
template <> struct convert_op<boolean, boolean> {
    __device__ static boolean run(boolean x) { return boolean{(unsigned char)(x.v != 0)}; }
};

template <typename TO, typename TI>
__global__ static void k_convert(TO *o, oar_cuda_desc to, const TI *x, oar_cuda_desc tx, int64_t n) {
    EW_FOR_EACH(i, n) o[at(to, i)] = convert_op<TO, TI>::run(x[at(tx, i)]);
}

template <typename TO, typename TI>
static int convert_go(void *o, oar_cuda_desc to, const void *x, oar_cuda_desc tx, int64_t n, void *stream) {
    k_convert<TO, TI><<<blocks(n), 256, 0, (cudaStream_t)stream>>>((TO *)o, to, (const TI *)x, tx, n);
    return (int)cudaGetLastError();
}

// oar's dtype codes 0..7 (include/oar/tensor.h): bool u8 i32 i64 f16 bf16 f32 f64
#define CONVERT_FROM(TO)                                                                        \
    switch (from) {                                                                            \
    case 0: return convert_go<TO, boolean>(o, to, x, tx, n, stream);                           \
    case 1: return convert_go<TO, unsigned char>(o, to, x, tx, n, stream);                     \
    case 2: return convert_go<TO, int>(o, to, x, tx, n, stream);                               \
    case 3: return convert_go<TO, long long>(o, to, x, tx, n, stream);                         \
    case 4: return convert_go<TO, __half>(o, to, x, tx, n, stream);                            \
    case 5: return convert_go<TO, __nv_bfloat16>(o, to, x, tx, n, stream);                     \
    case 6: return convert_go<TO, float>(o, to, x, tx, n, stream);                             \
    case 7: return convert_go<TO, double>(o, to, x, tx, n, stream);                            \
    default: return (int)cudaErrorInvalidValue;                                                \
    }

extern "C" int oar_cuda_convert(void *o, int32_t to_dt, oar_cuda_desc to, const void *x, int32_t from,
                                oar_cuda_desc tx, int64_t n, void *stream) {
    switch (to_dt) {
    case 0: CONVERT_FROM(boolean)
    case 1: CONVERT_FROM(unsigned char)
    case 2: CONVERT_FROM(int)
    case 3: CONVERT_FROM(long long)
    case 4: CONVERT_FROM(__half)
    case 5: CONVERT_FROM(__nv_bfloat16)
    case 6: CONVERT_FROM(float)
    case 7: CONVERT_FROM(double)
    default: return (int)cudaErrorInvalidValue;
    }
}

template <typename T> __global__ static void k_fill(T *o, oar_cuda_desc to, T v, int64_t n) {
    EW_FOR_EACH(i, n) o[at(to, i)] = v;
}
template <typename T> static int fill_go(void *o, oar_cuda_desc to, T v, int64_t n, void *stream) {
    k_fill<T><<<blocks(n), 256, 0, (cudaStream_t)stream>>>((T *)o, to, v, n);
    return (int)cudaGetLastError();
}

extern "C" int oar_cuda_fill(void *o, int32_t dt, oar_cuda_desc to, double v, int64_t n, void *stream) {
    switch (dt) {
    case 0: return fill_go<unsigned char>(o, to, (unsigned char)(v != 0), n, stream);
    case 1: return fill_go<unsigned char>(o, to, (unsigned char)(int)v, n, stream);
    case 2: return fill_go<int>(o, to, (int)v, n, stream);
    case 3: return fill_go<long long>(o, to, (long long)v, n, stream);
    case 4: return fill_go<__half>(o, to, __double2half(v), n, stream);
    case 5: return fill_go<__nv_bfloat16>(o, to, __double2bfloat16(v), n, stream);
    case 6: return fill_go<float>(o, to, (float)v, n, stream);
    case 7: return fill_go<double>(o, to, v, n, stream);
    default: return (int)cudaErrorInvalidValue;
    }
}

// ---- reductions and softmax (f16, bf16, f32, f64): one thread per output element or row ----
// A half value is loaded as float and every sum, product, comparison and
// exponential is done in float (f32 accumulation), rounded to the half
// dtype once at the store: the values oar's f32 route (cast, f32 kernel,
// cast back) and its CPU give. f32 and f64 compute in their own dtype.
template <typename T> struct acc_of { typedef T type; };
template <> struct acc_of<__half> { typedef float type; };
template <> struct acc_of<__nv_bfloat16> { typedef float type; };
template <typename T> __device__ static typename acc_of<T>::type ld(T v) { return v; }
template <> __device__ float ld<__half>(__half v) { return __half2float(v); }
template <> __device__ float ld<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ static T st(typename acc_of<T>::type v) { return v; }
template <> __device__ __half st<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __nv_bfloat16 st<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// Reductions: kept: x's kept dims (shape, x's strides, x's offset); red: the
// reduced dims (shape, x's strides, offset 0); output contiguous from o_off.
// op: 0 sum (Kahan-compensated), 1 amax, 2 amin, 3 prod; a NaN wins amax/amin.
template <typename T>
__global__ static void k_reduce(T *o, int64_t o_off, const T *x, oar_cuda_desc kept, oar_cuda_desc red, int op,
                                int64_t n_out, int64_t n_red) {
    typedef typename acc_of<T>::type A;
    EW_FOR_EACH(i, n_out) {
        int64_t base = at(kept, i);
        A acc = op == 0 ? (A)0 : op == 3 ? (A)1 : op == 1 ? (A)-INFINITY : (A)INFINITY, comp = 0;
        for (int64_t r = 0; r < n_red; r++) {
            A v = ld<T>(x[base + at(red, r)]);
            if (op == 0) {
                A y = v - comp, t = acc + y;
                comp = (t - acc) - y;
                acc = t;
            } else if (op == 3) {
                acc *= v;
            } else if (isnan(v) || isnan(acc)) {
                acc = (A)NAN;
            } else {
                acc = op == 1 ? fmax(acc, v) : fmin(acc, v);
            }
        }
        o[o_off + i] = st<T>(acc);
    }
}

template <typename T>
static int reduce_go(void *o, int64_t o_off, const void *x, oar_cuda_desc kept, oar_cuda_desc red, int op,
                     int64_t n_out, int64_t n_red, void *stream) {
    k_reduce<T><<<blocks(n_out), 256, 0, (cudaStream_t)stream>>>((T *)o, o_off, (const T *)x, kept, red, op, n_out,
                                                                  n_red);
    return (int)cudaGetLastError();
}

extern "C" int oar_cuda_reduce(void *o, int32_t dt, int64_t o_off, const void *x, oar_cuda_desc kept,
                               oar_cuda_desc red, int op, int64_t n_out, int64_t n_red, void *stream) {
    switch (dt) {
    case 4: return reduce_go<__half>(o, o_off, x, kept, red, op, n_out, n_red, stream);
    case 5: return reduce_go<__nv_bfloat16>(o, o_off, x, kept, red, op, n_out, n_red, stream);
    case 6: return reduce_go<float>(o, o_off, x, kept, red, op, n_out, n_red, stream);
    case 7: return reduce_go<double>(o, o_off, x, kept, red, op, n_out, n_red, stream);
    default: return (int)cudaErrorInvalidValue;
    }
}

// softmax / log_softmax along one dim: rows_x, rows_o: the other dims (shape,
// strides, offsets) of x and o; len elements a row at strides sx, so.
template <typename T>
__global__ static void k_softmax(T *o, const T *x, oar_cuda_desc rows_x, oar_cuda_desc rows_o, int64_t len,
                                 int64_t sx, int64_t so, int log_, int64_t n_rows) {
    typedef typename acc_of<T>::type A;
    EW_FOR_EACH(r, n_rows) {
        int64_t bx = at(rows_x, r), bo = at(rows_o, r);
        A mx = (A)-INFINITY;
        for (int64_t j = 0; j < len; j++) mx = fmax(mx, ld<T>(x[bx + j * sx]));
        A s = 0;
        for (int64_t j = 0; j < len; j++) s += exp(ld<T>(x[bx + j * sx]) - mx);
        A ls = log(s);
        for (int64_t j = 0; j < len; j++) {
            A v = ld<T>(x[bx + j * sx]) - mx;
            o[bo + j * so] = st<T>(log_ ? v - ls : exp(v) / s);
        }
    }
}

template <typename T>
static int softmax_go(void *o, const void *x, oar_cuda_desc rows_x, oar_cuda_desc rows_o, int64_t len, int64_t sx,
                      int64_t so, int log_, int64_t n_rows, void *stream) {
    k_softmax<T><<<blocks(n_rows), 256, 0, (cudaStream_t)stream>>>((T *)o, (const T *)x, rows_x, rows_o, len, sx, so,
                                                                    log_, n_rows);
    return (int)cudaGetLastError();
}

extern "C" int oar_cuda_softmax(void *o, int32_t dt, const void *x, oar_cuda_desc rows_x, oar_cuda_desc rows_o,
                                int64_t len, int64_t sx, int64_t so, int log_, int64_t n_rows, void *stream) {
    switch (dt) {
    case 4: return softmax_go<__half>(o, x, rows_x, rows_o, len, sx, so, log_, n_rows, stream);
    case 5: return softmax_go<__nv_bfloat16>(o, x, rows_x, rows_o, len, sx, so, log_, n_rows, stream);
    case 6: return softmax_go<float>(o, x, rows_x, rows_o, len, sx, so, log_, n_rows, stream);
    case 7: return softmax_go<double>(o, x, rows_x, rows_o, len, sx, so, log_, n_rows, stream);
    default: return (int)cudaErrorInvalidValue;
    }
}

// ---- the FFT ops' gathers and scatters (cuda_fft.c) ----
// o[at(to, i)] = x[at(tx, i)] * s: a real (f32, f64) or complex (c64,
// c128: both parts scaled) element each; the views permute and stride as
// they like, the kernel only follows them.
template <typename T> struct cplx { T re, im; };
template <typename E, typename R> __device__ static E scaled(E v, R s) { return v * s; }
template <> __device__ cplx<float> scaled<cplx<float>, float>(cplx<float> v, float s) { return {v.re * s, v.im * s}; }
template <> __device__ cplx<double> scaled<cplx<double>, double>(cplx<double> v, double s) {
    return {v.re * s, v.im * s};
}

template <typename E, typename R>
__global__ static void k_scaled_copy(E *o, oar_cuda_desc to, const E *x, oar_cuda_desc tx, R s, int scale,
                                     int64_t n) {
    EW_FOR_EACH(i, n) {
        E v = x[at(tx, i)];
        o[at(to, i)] = scale ? scaled<E, R>(v, s) : v;
    }
}

template <typename E, typename R>
static int scaled_copy_go(void *o, oar_cuda_desc to, const void *x, oar_cuda_desc tx, double s, int64_t n,
                          void *stream) {
    k_scaled_copy<E, R><<<blocks(n), 256, 0, (cudaStream_t)stream>>>((E *)o, to, (const E *)x, tx, (R)s, s != 1.0,
                                                                      n);
    return (int)cudaGetLastError();
}

extern "C" int oar_cuda_scaled_copy(void *o, oar_cuda_desc to, const void *x, oar_cuda_desc tx, int32_t dt,
                                    double scale, int64_t n, void *stream) {
    if (n <= 0) return 0;
    switch (dt) {
    case 6: return scaled_copy_go<float, float>(o, to, x, tx, scale, n, stream);
    case 7: return scaled_copy_go<double, double>(o, to, x, tx, scale, n, stream);
    case 8: return scaled_copy_go<cplx<float>, float>(o, to, x, tx, scale, n, stream);
    case 9: return scaled_copy_go<cplx<double>, double>(o, to, x, tx, scale, n, stream);
    default: return (int)cudaErrorInvalidValue;
    }
}

template <typename T> __global__ static void k_zero_imag(cplx<T> *p, int64_t off, int64_t stride, int64_t n) {
    EW_FOR_EACH(i, n) p[off + i * stride].im = 0;
}

extern "C" int oar_cuda_zero_imag(void *p, int32_t dt, int64_t off, int64_t stride, int64_t count, void *stream) {
    if (count <= 0) return 0;
    int64_t n = count;
    if (dt == 8) {
        EW_GO(k_zero_imag<float>, (cplx<float> *)p, off, stride, n)
    }
    if (dt == 9) {
        EW_GO(k_zero_imag<double>, (cplx<double> *)p, off, stride, n)
    }
    return (int)cudaErrorInvalidValue;
}

// ---- layer_norm and pooling (f32, f64), as the CPU's (src/backends/cpu/cpu_norm.c, cpu_conv.c) ----
// layer_norm: one thread per row of d elements (row r: elements r d .. r d + d - 1 of x in row-major
// order); mean and variance in double, two passes (the CPU's); w and b (NULL: none) over the row.
template <typename T>
__global__ static void k_layer_norm(T *y, oar_cuda_desc ty, T *mean, oar_cuda_desc tm, T *rstd, oar_cuda_desc tr,
                                    const T *x, oar_cuda_desc tx, const T *w, oar_cuda_desc tw, const T *b,
                                    oar_cuda_desc tb, double eps, int64_t d, int64_t rows) {
    EW_FOR_EACH(r, rows) {
        double mu = 0;
        for (int64_t j = 0; j < d; j++) mu += (double)x[at(tx, r * d + j)];
        mu /= (double)d;
        double var = 0;
        for (int64_t j = 0; j < d; j++) {
            double c = (double)x[at(tx, r * d + j)] - mu;
            var += c * c;
        }
        var /= (double)d;
        double rs = 1.0 / sqrt(var + eps);
        mean[at(tm, r)] = (T)mu;
        rstd[at(tr, r)] = (T)rs;
        for (int64_t j = 0; j < d; j++) {
            double v = ((double)x[at(tx, r * d + j)] - mu) * rs;
            if (w) v *= (double)w[at(tw, j)];
            if (b) v += (double)b[at(tb, j)];
            y[at(ty, r * d + j)] = (T)v;
        }
    }
}

template <typename T>
static int layer_norm_go(void *y, oar_cuda_desc ty, void *mean, oar_cuda_desc tm, void *rstd, oar_cuda_desc tr,
                         const void *x, oar_cuda_desc tx, const void *w, oar_cuda_desc tw, const void *b,
                         oar_cuda_desc tb, double eps, int64_t d, int64_t rows, void *stream) {
    k_layer_norm<T><<<blocks(rows), 256, 0, (cudaStream_t)stream>>>((T *)y, ty, (T *)mean, tm, (T *)rstd, tr,
                                                                     (const T *)x, tx, (const T *)w, tw, (const T *)b,
                                                                     tb, eps, d, rows);
    return (int)cudaGetLastError();
}

extern "C" int oar_cuda_layer_norm(void *y, oar_cuda_desc ty, void *mean, oar_cuda_desc tm, void *rstd,
                                   oar_cuda_desc tr, int32_t dt, const void *x, oar_cuda_desc tx, const void *w,
                                   oar_cuda_desc tw, const void *b, oar_cuda_desc tb, double eps, int64_t d,
                                   int64_t rows, void *stream) {
    if (rows <= 0) return 0;
    if (dt == 6) return layer_norm_go<float>(y, ty, mean, tm, rstd, tr, x, tx, w, tw, b, tb, eps, d, rows, stream);
    if (dt == 7) return layer_norm_go<double>(y, ty, mean, tm, rstd, tr, x, tx, w, tw, b, tb, eps, d, rows, stream);
    return (int)cudaErrorInvalidValue;
}

// group_norm and batch_norm: one block of NORM_THREADS per statistic group (a sample's channel group,
// or a channel), its members strided over the block's threads, partial sums in double combined by a
// fixed tree in shared memory (the same order on every run), then every member normalised.
#define NORM_THREADS 256
// member k of statistic group g: its row-major element index in [n, c, s], *ch its channel
__device__ static int64_t norm_member(const oar_cuda_norm_args &a, int64_t g, int64_t k, int64_t *ch) {
    const int64_t sp = k % a.s, q = k / a.s;
    if (a.mode == 0) { // group_norm: g = sample * groups + group, q the channel within the group
        const int64_t cg = a.c / a.groups, smp = g / a.groups;
        *ch = (g % a.groups) * cg + q;
        return (smp * a.c + *ch) * a.s + sp;
    }
    *ch = g; // batch_norm: q the sample
    return (q * a.c + g) * a.s + sp;
}

// the block's sum of v (every thread's part), the same on every thread
__device__ static double block_sum(double v, double *red) {
    red[threadIdx.x] = v;
    __syncthreads();
    for (unsigned w = NORM_THREADS / 2; w > 0; w >>= 1) {
        if (threadIdx.x < w) red[threadIdx.x] += red[threadIdx.x + w];
        __syncthreads();
    }
    double r = red[0];
    __syncthreads();
    return r;
}

template <typename T>
__global__ static void k_channel_norm(oar_cuda_norm_args a) {
    __shared__ double red[NORM_THREADS];
    const int64_t g = blockIdx.x, cnt = a.mode == 0 ? a.c / a.groups * a.s : a.n * a.s;
    const T *x = (const T *)a.x;
    int64_t ch;
    double mu, var;
    if (a.mode == 2) {
        mu = (double)((const T *)a.rm)[at(a.trm, g)];
        var = (double)((const T *)a.rv)[at(a.trv, g)];
    } else {
        double s = 0;
        for (int64_t k = threadIdx.x; k < cnt; k += NORM_THREADS) s += (double)x[at(a.tx, norm_member(a, g, k, &ch))];
        mu = block_sum(s, red) / (double)(cnt > 0 ? cnt : 1); // (cnt is the block's: every thread syncs)
        double sq = 0;
        for (int64_t k = threadIdx.x; k < cnt; k += NORM_THREADS) {
            double d = (double)x[at(a.tx, norm_member(a, g, k, &ch))] - mu;
            sq += d * d;
        }
        sq = block_sum(sq, red);
        var = cnt > 0 ? sq / (double)cnt : 0;
        if (a.mode == 1 && threadIdx.x == 0)
            ((T *)a.uvar)[at(a.tu, g)] = (T)(cnt > 1 ? sq / (double)(cnt - 1) : var);
    }
    const double rs = 1.0 / sqrt(var + a.eps);
    if (threadIdx.x == 0) {
        ((T *)a.mean)[at(a.tm, g)] = (T)mu;
        ((T *)a.rstd)[at(a.tr, g)] = (T)rs;
        if (a.mode == 2) ((T *)a.uvar)[at(a.tu, g)] = ((const T *)a.rv)[at(a.trv, g)];
    }
    for (int64_t k = threadIdx.x; k < cnt; k += NORM_THREADS) {
        int64_t i = norm_member(a, g, k, &ch);
        double wc = a.w ? (double)((const T *)a.w)[at(a.tw, ch)] : 1.0;
        double bc = a.b ? (double)((const T *)a.b)[at(a.tb, ch)] : 0.0;
        ((T *)a.y)[at(a.ty, i)] = (T)(((double)x[at(a.tx, i)] - mu) * rs * wc + bc);
    }
}

extern "C" int oar_cuda_channel_norm(const oar_cuda_norm_args *a, int32_t dt, void *stream) {
    if (a->mode < 0 || a->mode > 2 || a->s < 1 || a->groups < 1 || a->c % a->groups) return (int)cudaErrorInvalidValue;
    const int64_t n_groups = a->mode == 0 ? a->n * a->groups : a->c;
    if (n_groups <= 0) return 0;
    if (n_groups > 0x7fffffff) return (int)cudaErrorInvalidValue;
    cudaStream_t st = (cudaStream_t)stream;
    if (dt == 6) k_channel_norm<float><<<(unsigned)n_groups, NORM_THREADS, 0, st>>>(*a);
    else if (dt == 7) k_channel_norm<double><<<(unsigned)n_groups, NORM_THREADS, 0, st>>>(*a);
    else return (int)cudaErrorInvalidValue;
    return (int)cudaGetLastError();
}

// Pools over the last two dims [..., H, W] -> [..., OH, OW] (element i of a
// view: row-major over its own shape). a: max_pool2d's kernel2, stride2,
// padding2, dilation2; avg_pool2d's kernel2, stride2, padding2, ceil_mode,
// count_include_pad.
struct pool_args { int64_t a[8]; };

// max_pool2d: one thread per output; the first maximum in window order, a NaN wins (the CPU's max_window)
template <typename T>
__global__ static void k_max_pool(T *y, oar_cuda_desc ty, long long *ind, oar_cuda_desc ti, const T *x,
                                  oar_cuda_desc tx, pool_args pa, int64_t n_out) {
    const int64_t *a = pa.a;
    EW_FOR_EACH(i, n_out) {
        int64_t OH = ty.shape[ty.nd - 2], OW = ty.shape[ty.nd - 1];
        int64_t H = tx.shape[tx.nd - 2], W = tx.shape[tx.nd - 1];
        int64_t ox = i % OW, oy = (i / OW) % OH, p = i / (OW * OH);
        int64_t y0 = oy * a[2] - a[4], x0 = ox * a[3] - a[5];
        int64_t y1 = y0 + (a[0] - 1) * a[6] + 1, x1 = x0 + (a[1] - 1) * a[7] + 1;
        if (y1 > H) y1 = H;
        if (x1 > W) x1 = W;
        while (y0 < 0) y0 += a[6];
        while (x0 < 0) x0 += a[7];
        int64_t best = y0 * W + x0;
        T m = (T)-INFINITY;
        for (int64_t iy = y0; iy < y1; iy += a[6])
            for (int64_t ix = x0; ix < x1; ix += a[7]) {
                T v = x[at(tx, p * H * W + iy * W + ix)];
                if (v > m || isnan(v)) {
                    m = v;
                    best = iy * W + ix;
                }
            }
        y[at(ty, i)] = m;
        ind[at(ti, i)] = best;
    }
}

// max_pool2d_backward: one thread per plane, gx zeroed then gy added at the
// indices in output order (the CPU's order: the same sums); an index
// outside the plane is skipped (and counted in *bad where bad is not NULL)
template <typename T>
__global__ static void k_max_pool_bwd(T *gx, oar_cuda_desc tgx, const T *gy, oar_cuda_desc tgy, const long long *ind,
                                      oar_cuda_desc ti, int *bad, int64_t planes) {
    EW_FOR_EACH(p, planes) {
        int64_t H = tgx.shape[tgx.nd - 2], W = tgx.shape[tgx.nd - 1];
        int64_t OH = tgy.shape[tgy.nd - 2], OW = tgy.shape[tgy.nd - 1];
        for (int64_t k = 0; k < H * W; k++) gx[at(tgx, p * H * W + k)] = 0;
        for (int64_t j = 0; j < OH * OW; j++) {
            long long q = ind[at(ti, p * OH * OW + j)];
            if (q < 0 || q >= H * W) {
                if (bad) atomicAdd(bad, 1);
                continue;
            }
            gx[at(tgx, p * H * W + q)] += gy[at(tgy, p * OH * OW + j)];
        }
    }
}

// avg_pool2d's window of output (oy, ox) clipped to the plane, and its divisor (0: empty)
__device__ static int64_t avg_window(const int64_t *a, int64_t H, int64_t W, int64_t oy, int64_t ox, int64_t *y0,
                                     int64_t *y1, int64_t *x0, int64_t *x1) {
    int64_t h0 = oy * a[2] - a[4], w0 = ox * a[3] - a[5];
    int64_t h1 = h0 + a[0], w1 = w0 + a[1];
    if (h1 > H + a[4]) h1 = H + a[4];
    if (w1 > W + a[5]) w1 = W + a[5];
    int64_t pool = (h1 - h0) * (w1 - w0);
    if (h0 < 0) h0 = 0;
    if (w0 < 0) w0 = 0;
    if (h1 > H) h1 = H;
    if (w1 > W) w1 = W;
    *y0 = h0, *y1 = h1, *x0 = w0, *x1 = w1;
    if (h0 >= h1 || w0 >= w1) return 0;
    return a[7] ? pool : (h1 - h0) * (w1 - w0);
}

template <typename T>
__global__ static void k_avg_pool(T *y, oar_cuda_desc ty, const T *x, oar_cuda_desc tx, pool_args pa, int64_t n_out) {
    EW_FOR_EACH(i, n_out) {
        int64_t OH = ty.shape[ty.nd - 2], OW = ty.shape[ty.nd - 1];
        int64_t H = tx.shape[tx.nd - 2], W = tx.shape[tx.nd - 1];
        int64_t ox = i % OW, oy = (i / OW) % OH, p = i / (OW * OH), y0, y1, x0, x1;
        T div = (T)avg_window(pa.a, H, W, oy, ox, &y0, &y1, &x0, &x1), s = 0;
        for (int64_t iy = y0; iy < y1; iy++)
            for (int64_t ix = x0; ix < x1; ix++) s += x[at(tx, p * H * W + iy * W + ix)];
        y[at(ty, i)] = div != 0 ? s / div : (T)0;
    }
}

// avg_pool2d_backward: one thread per plane, in the CPU's order
template <typename T>
__global__ static void k_avg_pool_bwd(T *gx, oar_cuda_desc tgx, const T *gy, oar_cuda_desc tgy, pool_args pa,
                                      int64_t planes) {
    EW_FOR_EACH(p, planes) {
        int64_t H = tgx.shape[tgx.nd - 2], W = tgx.shape[tgx.nd - 1];
        int64_t OH = tgy.shape[tgy.nd - 2], OW = tgy.shape[tgy.nd - 1];
        for (int64_t k = 0; k < H * W; k++) gx[at(tgx, p * H * W + k)] = 0;
        for (int64_t oy = 0; oy < OH; oy++)
            for (int64_t ox = 0; ox < OW; ox++) {
                int64_t y0, y1, x0, x1;
                T div = (T)avg_window(pa.a, H, W, oy, ox, &y0, &y1, &x0, &x1);
                if (div == 0) continue;
                T v = gy[at(tgy, p * OH * OW + oy * OW + ox)] / div;
                for (int64_t iy = y0; iy < y1; iy++)
                    for (int64_t ix = x0; ix < x1; ix++) gx[at(tgx, p * H * W + iy * W + ix)] += v;
            }
    }
}

extern "C" int oar_cuda_pool(int op, int32_t dt, void *o, oar_cuda_desc to, void *o2, oar_cuda_desc to2,
                             const void *x, oar_cuda_desc tx, const void *x2, oar_cuda_desc tx2, const int64_t *a,
                             int64_t n, int *bad, void *stream) {
    if (n <= 0) return 0;
    pool_args pa;
    for (int i = 0; i < 8; i++) pa.a[i] = a ? a[i] : 0;
    cudaStream_t s = (cudaStream_t)stream;
#define POOL_GO(T)                                                                                              \
    switch (op) {                                                                                               \
    case 0: k_max_pool<T><<<blocks(n), 256, 0, s>>>((T *)o, to, (long long *)o2, to2, (const T *)x, tx, pa, n); break; \
    case 1: k_max_pool_bwd<T><<<blocks(n), 64, 0, s>>>((T *)o, to, (const T *)x, tx, (const long long *)x2, tx2, bad, n); break; \
    case 2: k_avg_pool<T><<<blocks(n), 256, 0, s>>>((T *)o, to, (const T *)x, tx, pa, n); break;             \
    case 3: k_avg_pool_bwd<T><<<blocks(n), 64, 0, s>>>((T *)o, to, (const T *)x, tx, pa, n); break;          \
    default: return (int)cudaErrorInvalidValue;                                                                 \
    }
    if (dt == 6) {
        POOL_GO(float)
    } else if (dt == 7) {
        POOL_GO(double)
    } else {
        return (int)cudaErrorInvalidValue;
    }
#undef POOL_GO
    return (int)cudaGetLastError();
}

// ---- indexing with i64 indices (f32, f64), as the OpenCL plugin's kernels and the CPU ----
// gather: o = x gathered along dim by idx (same rank, idx of o's shape);
// index_select: rows of x along dim picked by the 1-D idx; an index
// outside [0, size) sets *bad (and reads 0 / row 0).
template <typename T>
__global__ static void k_gather(T *o, oar_cuda_desc to, const T *x, oar_cuda_desc tx, const long long *idx,
                                oar_cuda_desc ti, int64_t dim, int64_t size, int *bad, int select, int64_t n) {
    EW_FOR_EACH(i, n) {
        long long j = select ? 0 : idx[at(ti, i)];
        if (!select && (j < 0 || j >= size)) {
            *bad = 1;
            o[at(to, i)] = (T)0;
            continue;
        }
        int64_t off = tx.off, rest = i;
        for (int64_t d = to.nd - 1; d >= 0; d--) {
            int64_t c = rest % to.shape[d];
            rest /= to.shape[d];
            if (d == dim && select) {
                long long k = idx[ti.off + c * ti.st[0]];
                if (k < 0 || k >= size) {
                    *bad = 1;
                    k = 0;
                }
                c = k;
            } else if (d == dim) {
                c = j;
            }
            off += c * tx.st[d];
        }
        o[at(to, i)] = x[off];
    }
}

// scatter_add (index_add: its 1-D index viewed over src's shape, stride 0
// off dim): o = x plus src[p] for each index position p whose index names
// this element's coordinate along dim; one thread per output element adds
// its contributions in index order, as the CPU does (deterministic sums).
template <typename T>
__global__ static void k_scatter_add(T *o, oar_cuda_desc to, const T *x, oar_cuda_desc tx, const long long *idx,
                                     oar_cuda_desc ti, const T *src, oar_cuda_desc ts, int64_t dim, int64_t size,
                                     int *bad, int64_t n) {
    EW_FOR_EACH(i, n) {
        int64_t c[8], rest = i;
        for (int64_t d = to.nd - 1; d >= 0; d--) {
            c[d] = rest % to.shape[d];
            rest /= to.shape[d];
        }
        T v = x[at(tx, i)];
        bool inside = true;
        for (int64_t d = 0; d < ti.nd; d++)
            if (d != dim && c[d] >= ti.shape[d]) inside = false;
        int64_t len = ti.nd ? ti.shape[dim] : 1;
        for (int64_t t = 0; inside && t < len; t++) {
            int64_t oi = ti.off, os = ts.off;
            for (int64_t d = 0; d < ti.nd; d++) {
                int64_t cd = d == dim ? t : c[d];
                oi += cd * ti.st[d];
                os += cd * ts.st[d];
            }
            long long j = idx[oi];
            if (j < 0 || j >= size) {
                *bad = 1;
                continue;
            }
            if (j == (to.nd ? c[dim] : 0)) v += src[os];
        }
        o[at(to, i)] = v;
    }
}

extern "C" int oar_cuda_index(int op, int32_t dt, void *o, oar_cuda_desc to, const void *x, oar_cuda_desc tx,
                              const void *idx, oar_cuda_desc ti, const void *src, oar_cuda_desc ts, int64_t dim,
                              int64_t size, int *bad, int64_t n, void *stream) {
    if (n <= 0) return (int)cudaMemsetAsync(bad, 0, sizeof(int), (cudaStream_t)stream);
    cudaStream_t s = (cudaStream_t)stream;
    if (op < 0 || op > 2 || (dt != 6 && dt != 7)) return (int)cudaErrorInvalidValue;
    cudaError_t z = cudaMemsetAsync(bad, 0, sizeof(int), s);
    if (z != cudaSuccess) return (int)z;
    if (dt == 6) {
        if (op < 2)
            k_gather<float><<<blocks(n), 256, 0, s>>>((float *)o, to, (const float *)x, tx, (const long long *)idx, ti,
                                                      dim, size, bad, op == 1, n);
        else
            k_scatter_add<float><<<blocks(n), 256, 0, s>>>((float *)o, to, (const float *)x, tx, (const long long *)idx,
                                                           ti, (const float *)src, ts, dim, size, bad, n);
    } else {
        if (op < 2)
            k_gather<double><<<blocks(n), 256, 0, s>>>((double *)o, to, (const double *)x, tx, (const long long *)idx,
                                                       ti, dim, size, bad, op == 1, n);
        else
            k_scatter_add<double><<<blocks(n), 256, 0, s>>>((double *)o, to, (const double *)x, tx,
                                                            (const long long *)idx, ti, (const double *)src, ts, dim,
                                                            size, bad, n);
    }
    return (int)cudaGetLastError();
}

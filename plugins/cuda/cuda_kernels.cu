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

// CUDA kernels of the oar cuda plugin: the f32 forms of the elementwise ops
// over strided, broadcast views (one thread per output element,
// grid-stride loop), one kernel per row of oar's op table
// src/ops/elementwise.def made from the row's formula over the vocabulary
// of src/ops/ew_math.h; and fill. The launchers are listed by op name in
// oar_cuda_ew_table (cuda_plugin.c finds them by name).
#include "cuda_kernels.h"

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
                        float p0, float p1, int alt, int64_t n, void *stream)

// unary: p0, p1 are the float attributes P0, P1; alt picks the ALT form
#define EW_UNARY_KERNEL(NAME, TI, TO, EXPR)                                                    \
    __global__ static void k_##NAME(TO *o, oar_cuda_desc to, const TI *px, oar_cuda_desc tx,   \
                                    float p0, float p1, int64_t n) {                           \
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
        EW_GO(k_##NAME, (TO *)o, to, (const TI *)in[0], ti[0], p0, p1, n)                      \
    }
#define EW_ALT2(NAME, TI, TO, EXPR, ALT_EXPR)                                                  \
    EW_UNARY_KERNEL(NAME, TI, TO, EXPR)                                                        \
    EW_UNARY_KERNEL(NAME##_alt, TI, TO, ALT_EXPR)                                              \
    EW_LAUNCHER(NAME) {                                                                        \
        if (alt) {                                                                             \
            EW_GO(k_##NAME##_alt, (TO *)o, to, (const TI *)in[0], ti[0], p0, p1, n)            \
        }                                                                                      \
        EW_GO(k_##NAME, (TO *)o, to, (const TI *)in[0], ti[0], p0, p1, n)                      \
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

// one pass over the table: its f32 forms
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

// the launchers by op name
#define EW_ENTRY(name, n, NAME) {name, n, l_##NAME},
#define EW_ENTRY_N(...) EW_ENTRY(__VA_ARGS__)
#define EW_UNARY(op, rule, cpu, gen, ...) EW_GEN_IN(gen)(EW_ENTRY_N(#op, 1, EW_SFX_NAME(op##_)))
#define EW_BINARY(op, rule, cpu, gen, ...) EW_GEN_IN(gen)(EW_ENTRY_N(#op, 2, EW_SFX_NAME(op##_)))
#define EW_TERNARY(op, rule, cpu, gen, ...) EW_GEN_IN(gen)(EW_ENTRY_N(#op, 3, EW_SFX_NAME(op##_)))
extern "C" const oar_cuda_ew oar_cuda_ew_table[] = {
#include "elementwise.def"
    {NULL, 0, NULL}};

__global__ static void k_fill(float *o, oar_cuda_desc to, float v, int64_t n) {
    EW_FOR_EACH(i, n) o[at(to, i)] = v;
}

extern "C" int oar_cuda_fill(float *o, oar_cuda_desc to, float v, int64_t n, void *stream) {
    k_fill<<<blocks(n), 256, 0, (cudaStream_t)stream>>>(o, to, v, n);
    return (int)cudaGetLastError();
}

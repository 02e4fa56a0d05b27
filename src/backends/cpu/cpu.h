/* Internal CPU backend: kernel tables and the strided iterator every
 * elementwise kernel runs on. */
#ifndef OARI_CPU_H
#define OARI_CPU_H

#include "../../ops/op.h"

#include <cblas.h>
#include <complex.h>

/* Lane shuffles of GNU vectors. gcc's __builtin_shuffle takes a mask
 * vector; clang (the OAR_FUZZ build) has __builtin_shufflevector with
 * constant lanes only, so a runtime mask becomes a loop there. */
#if defined(__clang__)
#define OARI_SHUFFLE2(a, b, MASK_T, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#define OARI_SHUFFLE1(v, mask)                                                    \
    __extension__({                                                               \
        __typeof__(v) r_;                                                         \
        for (int k_ = 0; k_ < (int)(sizeof(r_) / sizeof(r_[0])); k_++) r_[k_] = (v)[(mask)[k_]]; \
        r_;                                                                       \
    })
#else
#define OARI_SHUFFLE2(a, b, MASK_T, ...) __builtin_shuffle(a, b, (MASK_T){__VA_ARGS__})
#define OARI_SHUFFLE1(v, mask) __builtin_shuffle(v, mask)
#endif

/* A loop over threads only when cond holds and there is more than one.
 * `#pragma omp parallel for if (cond)` enters libgomp even when cond is
 * false (or for a team of one), and libgomp 12 then makes a futex syscall:
 * 0.4 us a call on these machines, most of a 5 us reduction. The loop (a
 * for statement, no directives inside) is written once and compiled twice. */
#ifdef _OPENMP
#include <omp.h>
#define OARI_MANY_THREADS() (omp_get_max_threads() > 1)
#else
#define OARI_MANY_THREADS() 0
#endif
#define OARI_PRAGMA(...) _Pragma(#__VA_ARGS__)
#define OARI_PARALLEL_FOR_SCHED_IF(sched, cond, ...)                             \
    do {                                                                         \
        if ((cond) && OARI_MANY_THREADS()) {                                     \
            OARI_PRAGMA(omp parallel for schedule(sched)) __VA_ARGS__            \
        } else {                                                                 \
            __VA_ARGS__                                                          \
        }                                                                        \
    } while (0)
#define OARI_PARALLEL_FOR_IF(cond, ...) OARI_PARALLEL_FOR_SCHED_IF(static, cond, __VA_ARGS__)
/* The same with dynamic scheduling, for loops whose items call OpenBLAS
 * or oneDNN (the convolutions' images and chunks): run serially, outside
 * any region, a call there gets the libraries' own threads; inside a
 * region of one thread it would get one (oari_lib_enter, below). */
#define OARI_PARALLEL_FOR_DYNAMIC_IF(cond, ...) OARI_PARALLEL_FOR_SCHED_IF(dynamic, cond, __VA_ARGS__)

/* Hot loops are compiled three times, for the baseline x86-64, x86-64-v3
 * (AVX2, FMA) and x86-64-v4 (AVX-512: half the instructions in the exp,
 * gelu and softmax loops, which run in 0.6-0.8 of the v3 time on the
 * project's AMD machines); the loader picks one per machine (an ifunc).
 * Other compilers and targets get the one baseline version. Define
 * OAR_NO_SIMD_CLONES to turn it off. The clones may fuse a*b+c into one
 * rounding, and vector reductions fold their lanes by the vector width, so
 * last-bit results can differ between machines (never between runs, or
 * thread counts, on one machine). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(OAR_NO_SIMD_CLONES)
#define OARI_SIMD_CLONES \
    __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define OARI_SIMD_CLONES
#endif

/* One kernel per dtype, indexed by oar_dtype; NULL where unsupported. Each
 * op's table is named oari_cpu_k_<op> and defined in the group's file. */
typedef oar_kernel_fn oari_cpu_kernels[OAR_DTYPE_COUNT];

typedef float _Complex c64_t;
typedef double _Complex c128_t;

/* ---- the strided iterator ------------------------------------------------
 * Walks n operands of one shape (out first, then inputs), with dims merged
 * where strides allow, calling an inner loop on runs of the last dim. Runs
 * on OpenMP threads above OARI_PARALLEL_GRAIN elements; which thread does
 * which element never changes a result. */
#define OARI_ITER_MAX 8

/* ptrs[k]: operand k at the run's first element; strides[k]: its stride
 * along the run in elements; n: run length. */
typedef void (*oari_inner_fn)(char **ptrs, const int64_t *strides, int64_t n, void *ctx);

typedef struct oari_iter {
    int n_ops, ndim;
    int64_t numel;
    int64_t shape[OAR_MAX_DIMS];
    int64_t strides[OARI_ITER_MAX][OAR_MAX_DIMS]; /* elements */
    char *data[OARI_ITER_MAX];
    int64_t elsize[OARI_ITER_MAX];
} oari_iter;

/* Registers the CPU as a device (src/init/, at start-up, before anything
 * else): the first device, oari_device_cpu(). */
OARI_HIDDEN int oari_cpu_install(void);
/* The CPU device table's native_dot (cpu_features.c). */
OARI_HIDDEN int oari_cpu_native_dot(void *ctx, int index, int32_t dtype);

/* ops[0] gives the shape; all operands must have it (inputs broadcast by
 * dispatch already). */
OARI_HIDDEN void oari_iter_init(oari_iter *it, int n_ops, const oar_ktensor *const *ops);
OARI_HIDDEN void oari_iter_run(const oari_iter *it, oari_inner_fn fn, void *ctx);
/* Convenience for the common case: out = call->out[0], inputs = call->in[...]. */
OARI_HIDDEN void oari_iter_call(const oar_kernel_call *call, oari_inner_fn fn, void *ctx);

/* dst <- src: same dtype and shape, any strides (the iterator's order,
 * OpenMP above the grain). Elements move by their size: a constant-size
 * copy is one load and store, where memcpy of a run-time size was a call
 * per element (4 ns each in a transpose). */
OARI_HIDDEN void oari_copy_strided(const oar_ktensor *dst, const oar_ktensor *src);

/* A 2-D inner loop: `rows` runs of n elements, run r of operand k at
 * ptrs[k] + r * outer[k] elements, strides[k] along the run. Broadcast ops
 * (a row against a matrix) merge to two dims with short runs; one call for
 * many rows saves a call and a vector-loop prologue per row. */
typedef void (*oari_inner2d_fn)(char **ptrs, const int64_t *strides, const int64_t *outer,
                                int64_t rows, int64_t n, void *ctx);
/* As oari_iter_call, with fn2 taking the whole iteration when it merges to
 * two dims (rows split over threads above OARI_PARALLEL_GRAIN elements). */
OARI_HIDDEN void oari_iter_call2d(const oar_kernel_call *call, oari_inner_fn fn,
                                  oari_inner2d_fn fn2, void *ctx);

/* Index of the linear (row-major) element i of a strided view. */
static inline int64_t oari_strided_index(int ndim, const int64_t *shape, const int64_t *strides,
                                         int64_t i) {
    int64_t off = 0;
    for (int d = ndim - 1; d >= 0; d--) {
        int64_t s = shape[d];
        off += (i % s) * strides[d];
        i /= s;
    }
    return off;
}

static inline bool oari_kt_contiguous(const oar_ktensor *k) {
    int64_t s = 1;
    for (int i = k->ndim - 1; i >= 0; i--) {
        if (k->shape[i] != 1 && k->strides[i] != s) return false;
        s *= k->shape[i];
    }
    return true;
}

static inline int64_t oari_kt_numel(const oar_ktensor *k) {
    int64_t n = 1;
    for (int i = 0; i < k->ndim; i++) n *= k->shape[i];
    return n;
}

/* Half-precision load/store for kernels that handle f16/bf16 natively. */
static inline float oari_ld_f16(const void *p) { return oari_f16_to_f32(*(const uint16_t *)p); }
static inline float oari_ld_bf16(const void *p) { return oari_bf16_to_f32(*(const uint16_t *)p); }

/* ---- a library call's threads ---------------------------------------------
 * OpenBLAS and oneDNN split a call's work for omp_get_max_threads() threads
 * and count on a team that big: oneDNN leaves a missing thread's share of
 * the output unwritten, and OpenBLAS's threaded GEMM spins for ever waiting
 * on it. A team comes out smaller when OMP_THREAD_LIMIT is below the thread
 * count, or when OMP_DYNAMIC lets libgomp shrink it on a loaded machine
 * (and a region of one thread is not "in parallel" to the libraries, so
 * they thread inside it). And inside a region of one thread (a false `if`
 * clause) a library's team is a nested one, whose threads libgomp creates
 * for every call: 70 us a call here, and 3 ms when the idle workers of the
 * last region still spin on the other core. Every call into those libraries
 * runs between oari_lib_enter and oari_lib_leave: the first sets this
 * thread's ICVs to `want` threads (0: as many as now; 1 inside any parallel
 * region), no more than the thread limit, with dynamic teams off; the
 * second puts them back. */
typedef struct oari_lib_icv {
    int threads; /* the caller's count, */
    bool changed, dynamic; /* whether it was changed; the caller's dynamic setting */
} oari_lib_icv;
static inline oari_lib_icv oari_lib_enter(int want) {
    oari_lib_icv saved = {1, false, false};
#ifdef _OPENMP
    saved.threads = omp_get_max_threads();
    saved.dynamic = omp_get_dynamic();
    int n = want > 0 ? want : saved.threads, limit = omp_get_thread_limit();
    if (omp_get_level() > 0) n = 1; /* (in an active region they would run one anyway) */
    if (n > limit) n = limit;
    saved.changed = n != saved.threads;
    if (saved.changed) omp_set_num_threads(n);
    if (saved.dynamic) omp_set_dynamic(0);
#else
    (void)want;
#endif
    return saved;
}
static inline void oari_lib_leave(oari_lib_icv saved) {
#ifdef _OPENMP
    if (saved.changed) omp_set_num_threads(saved.threads);
    if (saved.dynamic) omp_set_dynamic(1);
#else
    (void)saved;
#endif
}

/* ---- the f32 GEMM (cpu_gemm.c) --------------------------------------------
 * cblas_sgemm's contract, run by oneDNN's dnnl_sgemm where oar has it and
 * the product is not tiny, else by CBLAS; GEMV likewise (sgemv). Every f32
 * product of the CPU backend calls these, never cblas_sgemm or sgemv. */
enum { OARI_SGEMM_AUTO, OARI_SGEMM_ONEDNN, OARI_SGEMM_OPENBLAS };
OARI_HIDDEN void oari_cpu_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb,
                                blasint m, blasint n, blasint k, float alpha, const float *a, blasint lda,
                                const float *b, blasint ldb, float beta, float *c, blasint ldc);
/* Whether an m x n x k product goes to oneDNN under the current choice. */
OARI_HIDDEN bool oari_cpu_sgemm_onednn(int64_t m, int64_t n, int64_t k);
/* y = op(M) x, M rows x cols row-major (ld), x at stride incx: cblas_sgemv,
 * or dnnl_sgemm where OpenBLAS runs pre-AVX kernels on an AVX2 CPU. */
OARI_HIDDEN void oari_cpu_sgemv(bool trans, int64_t rows, int64_t cols, const float *mat, int64_t ld,
                                const float *x, int64_t incx, float *y);
/* Whether such a product goes to oneDNN under the current choice. */
OARI_HIDDEN bool oari_cpu_sgemv_onednn(int64_t rows, int64_t cols);
/* Pins the choice (an OARI_SGEMM_*; one this build lacks is ignored) and
 * returns the previous one: for tests and benchmarks, between products. */
OARI_HIDDEN int oari_cpu_sgemm_use(int provider);
/* Pins f32 topk with k <= 16 to the 16-lane vector of kept keys (1, only
 * where the CPU has x86-64-v4), to sorted insertion (0), or back to the
 * CPU's choice (-1); returns whether the vector ran before. For tests. */
OARI_HIDDEN int oari_cpu_topk_vector_use(int use);
/* cblas_dgemm between oari_lib_enter and oari_lib_leave: every f64 product
 * of the CPU backend calls this, never cblas_dgemm. */
OARI_HIDDEN void oari_cpu_dgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb,
                                blasint m, blasint n, blasint k, double alpha, const double *a, blasint lda,
                                const double *b, blasint ldb, double beta, double *c, blasint ldc);
/* Before an f64 or complex product of `macs` multiply-adds: the first of
 * 32^3 or more warns once if OpenBLAS runs kernels without AVX on a CPU
 * with AVX2 (an unknown model), naming OPENBLAS_CORETYPE. */
OARI_HIDDEN void oari_cpu_blas_note(int64_t macs);

/* Whether conv2d's direct kernel takes its channel-vector form (widths not
 * a multiple of 8; eight 64-byte accumulators): where 64-byte vectors are
 * registers (AVX-512), else those shapes go to oneDNN's convolution or to
 * im2col + gemm (cpu_conv.c). Pins the answer (1 or 0; -1: the CPU's) and
 * returns the previous pin: for tests, which check both routes on any CPU. */
OARI_HIDDEN int oari_cpu_conv_wide_vectors_use(int pin);

/* conv2d by Winograd F(m x m, 3x3), float32 (cpu_conv_wino.c): the output
 * tile m (4 or 2) it takes for a conv of these sizes (3x3, stride 1, no
 * dilation, no groups, enough channels and tiles), 0 for none; and the
 * kernel: x [N, C, H, W] and w [O, C, 3, 3] contiguous, y [N, O, OH, OW],
 * padding ph, pw; bias dtype -1 for none; m 4 or 2. 0, or OAR_ERR_NOMEM
 * (error set). */
OARI_HIDDEN int oari_cpu_wino_ok(int64_t n, int64_t c, int64_t o, int64_t oh, int64_t ow,
                                 int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t dh,
                                 int64_t dw, int64_t groups);
OARI_HIDDEN int oari_cpu_conv2d_wino(const float *x, const float *w, const oar_ktensor *bias,
                                     float *y, int64_t N, int64_t C, int64_t H, int64_t W,
                                     int64_t O, int64_t OH, int64_t OW, int64_t ph, int64_t pw,
                                     int m);

/* conv2d_prepacked's order 2 (defs/conv.def): U [36][O][C], F(4x4)'s
 * transform of the filters w [O][C][3][3] (contiguous), computed once; and
 * the F(4x4) convolution from it, as oari_cpu_conv2d_wino with m 4, then
 * relu when asked. 0, or OAR_ERR_NOMEM (error set). */
OARI_HIDDEN void oari_cpu_wino_filter(const float *w, int64_t C, int64_t O, float *U);
OARI_HIDDEN int oari_cpu_conv2d_wino_packed(const float *x, const float *U, const oar_ktensor *bias, float *y,
                                            int64_t N, int64_t C, int64_t H, int64_t W, int64_t O, int64_t OH,
                                            int64_t OW, int64_t ph, int64_t pw, bool relu);

/* For the predictor's prepack_conv pass: whether an f32 conv2d with
 * conv2d_prepacked's attributes a (defs/conv.def; the layout's left
 * unset) on x [n, a[7], h, w], with a bias or not, runs on a weight packed
 * once: 1 with the layout (a[10..12]) filled (order 2 where conv2d would
 * run Winograd F(4x4)), 0 when not (a build without oneDNN, or a layout
 * oneDNN asks for that the op does not pack). */
OARI_HIDDEN int oari_cpu_conv2d_prepack_layout(int64_t *a, int64_t n, int64_t h, int64_t w, bool bias);
/* ... and packs w [O, C, kh, kw] (contiguous) in the layout a names
 * (oari_cpu_conv2d_prepack_layout's, any order) into wp. Both are
 * installed as oari_conv_prepack (src/ops/op.h) by oari_cpu_install. */
OARI_HIDDEN void oari_cpu_conv2d_pack(const float *w, float *wp, const int64_t *a);

/* A batched product C = A B through oneDNN (cpu_dnnl.c; only in a build
 * with OAR_WITH_DNNL): over `rank` dims, the batch dims then rows and
 * columns, A [..., n, k] and B [..., k, m] given by their dims (1 where a
 * batch dim broadcasts) and strides in elements, C contiguous with dims
 * c_dims [..., n, m]; no dim 0 (K = 0 is the caller's). bf16 only: f32
 * accumulation, bf16 result. 0, or a status with the error naming the
 * shapes when oneDNN cannot make or run the primitive. */
typedef struct {
    int dtype, rank;
    int64_t a_dims[OAR_MAX_DIMS + 2], a_strides[OAR_MAX_DIMS + 2];
    int64_t b_dims[OAR_MAX_DIMS + 2], b_strides[OAR_MAX_DIMS + 2];
    int64_t c_dims[OAR_MAX_DIMS + 2];
    const void *a, *b;
    void *c;
} oari_dnnl_matmul_args;
OARI_HIDDEN int oari_dnnl_matmul(const oari_dnnl_matmul_args *m);
/* Whether oneDNN has bf16 kernels on this CPU: 2.6 has them from AVX-512
 * on (emulated without AVX512_BF16) and none on AVX2, where even its
 * reference kernels refuse bf16. Asked once, by describing a 16 x 16 bf16
 * matmul. Where it says no, the CPU device offers no bf16 kernel for
 * matmul and the convs (cpu_device.c), so they run VIA_F32. */
OARI_HIDDEN bool oari_dnnl_has_bf16(void);
/* The ops whose bf16 CPU kernel is oneDNN's (cpu_linalg.c, cpu_conv.c), in
 * a build with OAR_WITH_DNNL. */
static inline bool oari_cpu_bf16_is_dnnl(int op) {
    return op == OARI_OP_matmul || op == OARI_OP_conv2d || op == OARI_OP_conv_transpose2d ||
           op == OARI_OP_conv2d_weight_grad;
}
/* conv2d through oneDNN (cpu_dnnl.c, OAR_WITH_DNNL) on the conv of x [n,
 * c, h, w], weight [o, c/groups, kh, kw], bias [o] or NULL, y [n, o, oh,
 * ow], all contiguous; stride, padding (both sides), dilation (1: dense) as
 * oar's conv2d takes them; no dim 0. `pass` picks what is computed:
 * FORWARD y from x, weight, bias; BACKWARD_DATA x from y (the gradient
 * flowing back) and weight, which is conv_transpose2d without its bias;
 * BACKWARD_WEIGHTS weight from x and y, conv2d_weight_grad. bf16, as
 * matmul; with f32_out the computed operand is written in f32 (for a sum
 * that follows, rounded once). Also f32 (every operand f32) for FORWARD
 * without f32_out; any other dtype or pass is OAR_ERR_UNSUPPORTED. 0, or a
 * status with the error naming the shapes. An f32 FORWARD may also take
 * the weight packed (`packed` 1 + conv2d_prepacked's order, blocks ib and
 * ob: defs/conv.def; groups 1) and apply relu to y (`relu`). */
enum { OARI_DNNL_FORWARD, OARI_DNNL_BACKWARD_DATA, OARI_DNNL_BACKWARD_WEIGHTS };
typedef struct {
    int dtype, pass;
    bool f32_out, relu;
    int packed;
    int64_t n, c, h, w, o, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw, groups, ib, ob;
    const void *bias;
    void *x, *weight, *y; /* the one `pass` computes is written */
} oari_dnnl_conv2d_args;
OARI_HIDDEN int oari_dnnl_conv2d(const oari_dnnl_conv2d_args *a);
/* The packed weight layout oneDNN's f32 forward convolution of a (its
 * sizes, stride, padding, dilation, relu; groups 1; the weight plain) runs
 * on with the threads a call of these sizes gets: 0 with *order, *ib, *ob
 * set (conv2d_prepacked's layout, defs/conv.def), OAR_ERR_UNSUPPORTED when
 * its layout is none of those (error set). */
OARI_HIDDEN int oari_dnnl_conv2d_layout(const oari_dnnl_conv2d_args *a, int *order, int64_t *ib, int64_t *ob);
/* How many oneDNN primitives are cached (one per op, shape, strides and
 * thread count): the tests' evidence that oneDNN ran. */
OARI_HIDDEN int oari_dnnl_cached_primitives(void);

#endif

/* The OpenCL device plugin: every OpenCL device the ICD loader finds
 * becomes "opencl:<i>". Buffers are cl_mem objects; kernels (opencl_kernels.cl)
 * are built once per device on first use. Built against <oar/device.h>
 * alone. Ops claimed (f32 compute unless said otherwise, and f64 wherever
 * f32 is said on a device with cl_khr_fp64; get_kernel returns NULL for
 * everything else, which oar runs on the CPU):
 *   elementwise: every row of oar's op table src/ops/elementwise.def with
 *     a gen column: f32 (f64) forms of the float ops, bool/u8/i32/i64 forms
 *     of the comparisons, where and logical_not, bool logical ops; one
 *     kernel per row and dtype, <op>_<suffix>, made in opencl_kernels.cl
 *     from the row's formula and found by that name
 *   cast, copy: between bool u8 i32 i64 f16 bf16 f32 (f64); fill, contiguous:
 *     those dtypes. f16/bf16 are 16-bit words converted through f32 bit
 *     for bit as oar's CPU converts (no cl_khr_fp16 needed; see the .cl)
 *   reductions: sum prod amax amin over any dims
 *   matmul (tiled, batched, broadcast batch dims, 1-D operands), softmax,
 *   log_softmax, layer_norm, gather, index_select, scatter_add and
 *   index_add (f32 values, i64 indices; sums in index order, deterministic),
 *   conv2d, conv_transpose2d, conv2d_weight_grad (direct, any groups,
 *   strides, padding, dilation), max_pool2d and max_pool2d_backward.
 *   Not claimed: avg/adaptive pooling, interpolate, norms other than
 *   layer_norm, sort/topk, cumsum, random ops, f16/bf16 compute (oar runs
 *   those ops through the f32 kernels, with the casts above around them,
 *   on the device) and complex.
 * f64: the .cl source is built a second time with -DOAR_F64 on first use
 * of an f64 kernel (the same kernels in double, accumulating in double;
 * scalar arguments such as eps passed as double). On a device without
 * cl_khr_fp64, or with OAR_OPENCL_NO_FP64=1 in the environment when the
 * plugin loads, f64 ops are not claimed and run on the CPU.
 * native_dot (ABI 1.4) answers 0 for f16, bf16, u8 and i8: no kernel
 * computes in those types (f16/bf16 matmul and conv are the device's casts
 * around its f32 kernels, u8/i8 ones run on the CPU), even where the
 * device has cl_khr_fp16: the half kernels here only convert. */
#define OAR_DEVICE_PLUGIN_ONLY
#include <oar/device.h>

#include <CL/cl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opencl_kernels.h" /* oar_opencl_source: opencl_kernels.cl as a string */

#include "ew_table.h" /* reading oar's elementwise table (src/ops/elementwise.def) */

#define MAX_DEV 8
#define MAX_KERNELS 512 /* per device, of both programs */
enum { DT_BOOL = 0, DT_U8 = 1, DT_I32 = 2, DT_I64 = 3, DT_F16 = 4, DT_BF16 = 5, DT_F32 = 6, DT_F64 = 7 };

typedef struct { cl_long off, nd, shape[8], st[8]; } kdesc; /* T in the .cl file */

typedef struct cl_dev {
    cl_device_id id;
    cl_context ctx;
    cl_command_queue q;
    cl_program prog[2]; /* the f32 (and integer) kernels, and the f64 ones; built on first use */
    int build_failed[2];
    int fp64;           /* cl_khr_fp64: the f64 program can be built */
    pthread_mutex_t lock; /* kernel arguments and enqueue */
    cl_kernel kernels[MAX_KERNELS];
    const char *kernel_names[MAX_KERNELS];
    int n_kernels;
    char name[64];
    cl_ulong mem;
} cl_dev;

static const oar_host_api *host;
static cl_dev devs[MAX_DEV];
static int n_devs;

static int fail(const char *what, cl_int err) {
    char msg[256];
    snprintf(msg, sizeof msg, "opencl: %s failed (OpenCL error %d)", what, (int)err);
    return host->error(-4, msg);
}

/* ---- device table --------------------------------------------------------- */

static int count(void *ctx) { (void)ctx; return n_devs; }

static int props(void *ctx, int index, oar_device_props *out) {
    (void)ctx;
    snprintf(out->name, sizeof out->name, "%s", devs[index].name);
    out->total_memory = devs[index].mem;
    return 0;
}

static void *alloc(void *ctx, int index, size_t n) {
    (void)ctx;
    cl_int err;
    cl_mem m = clCreateBuffer(devs[index].ctx, CL_MEM_READ_WRITE, n ? n : 4, NULL, &err);
    return err == CL_SUCCESS ? m : NULL;
}

static void release(void *ctx, int index, void *p, size_t n) {
    (void)ctx, (void)index, (void)n;
    clReleaseMemObject((cl_mem)p);
}

static int to_device(void *ctx, int index, void *dst, size_t off, const void *src, size_t n) {
    (void)ctx;
    cl_int err = clEnqueueWriteBuffer(devs[index].q, (cl_mem)dst, CL_TRUE, off, n, src, 0, NULL, NULL);
    return err ? fail("clEnqueueWriteBuffer", err) : 0;
}

static int to_host(void *ctx, int index, void *dst, const void *src, size_t off, size_t n) {
    (void)ctx;
    cl_int err = clEnqueueReadBuffer(devs[index].q, (cl_mem)src, CL_TRUE, off, n, dst, 0, NULL, NULL);
    return err ? fail("clEnqueueReadBuffer", err) : 0;
}

static int d2d(void *ctx, int index, void *dst, size_t doff, const void *src, size_t soff, size_t n) {
    (void)ctx;
    cl_int err = clEnqueueCopyBuffer(devs[index].q, (cl_mem)src, (cl_mem)dst, soff, doff, n, 0,
                                     NULL, NULL);
    return err ? fail("clEnqueueCopyBuffer", err) : 0;
}

static int sync_dev(void *ctx, int index) {
    (void)ctx;
    cl_int err = clFinish(devs[index].q);
    return err ? fail("clFinish", err) : 0;
}

/* ---- running kernels ------------------------------------------------------- */

/* The device a call runs on: the one whose context owns its first buffer. */
static cl_dev *dev_of(const oar_kernel_call *c) {
    const oar_ktensor *t = c->n_out ? &c->out[0] : &c->in[0];
    cl_context cx;
    if (clGetMemObjectInfo((cl_mem)t->buffer, CL_MEM_CONTEXT, sizeof cx, &cx, NULL)) return NULL;
    for (int i = 0; i < n_devs; i++)
        if (devs[i].ctx == cx) return &devs[i];
    return NULL;
}

/* Program p of d: 0 the source as it is (f32 and integer kernels), 1 the
 * source with -DOAR_F64 (f64 kernels; only on a device with cl_khr_fp64). */
static int build(cl_dev *d, int p) {
    if (d->prog[p]) return 0;
    if (d->build_failed[p]) return host->error(-4, "opencl: the kernels failed to build earlier");
    if (p && !d->fp64)
        return host->error(-3, "opencl: the device has no cl_khr_fp64 (f64 kernels)");
    const char *src = oar_opencl_source;
    cl_int err;
    d->prog[p] = clCreateProgramWithSource(d->ctx, 1, &src, NULL, &err);
    if (err) {
        d->prog[p] = NULL;
        return fail("clCreateProgramWithSource", err);
    }
    err = clBuildProgram(d->prog[p], 1, &d->id, p ? "-cl-std=CL1.2 -DOAR_F64" : "-cl-std=CL1.2",
                         NULL, NULL);
    if (err) {
        char log[2048] = "";
        clGetProgramBuildInfo(d->prog[p], d->id, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, NULL);
        host->log(OAR_LOG_ERROR, "opencl", log);
        clReleaseProgram(d->prog[p]);
        d->prog[p] = NULL;
        d->build_failed[p] = 1;
        return fail("clBuildProgram", err);
    }
    return 0;
}

/* The named kernel of d (created once); call with d->lock held. A kernel
 * whose name mentions f64 lives in the f64 program. */
static cl_kernel kernel(cl_dev *d, const char *name) {
    for (int i = 0; i < d->n_kernels; i++)
        if (!strcmp(d->kernel_names[i], name)) return d->kernels[i];
    int p = strstr(name, "f64") != NULL;
    if (build(d, p) || d->n_kernels == MAX_KERNELS) return NULL;
    cl_int err;
    cl_kernel k = clCreateKernel(d->prog[p], name, &err);
    if (err) {
        fail(name, err);
        return NULL;
    }
    d->kernel_names[d->n_kernels] = name;
    d->kernels[d->n_kernels++] = k;
    return k;
}

/* Kernel arguments: buffers, descriptors and scalars in order. */
#define MAX_ARGS 24
typedef struct { int n; size_t size[MAX_ARGS]; const void *p[MAX_ARGS]; } args;
static void arg(args *a, size_t size, const void *p) {
    if (a->n == MAX_ARGS) return; /* launch reports it */
    a->size[a->n] = size;
    a->p[a->n++] = p;
}
#define ARG(a, v) arg(a, sizeof(v), &(v))

/* The kernel `base` for compute dtype dt: base_f64 for f64, else base_f32
 * (a string literal: kernel() keeps the pointer). */
#define KN(base, dt) ((dt) == DT_F64 ? base "_f64" : base "_f32")

/* A floating-point scalar argument: float for f32 kernels, double for f64
 * ones (`real` in the .cl file); r must live until the launch. */
typedef struct { cl_float f; cl_double d; } real_arg;
static void arg_real(args *a, int32_t dt, real_arg *r, double v) {
    r->f = (cl_float)v;
    r->d = v;
    if (dt == DT_F64) ARG(a, r->d);
    else ARG(a, r->f);
}

static int launch(cl_dev *d, const char *name, args *a, int dims, const size_t *global,
                  const size_t *local) {
    pthread_mutex_lock(&d->lock);
    cl_kernel k = kernel(d, name);
    cl_int err = k ? CL_SUCCESS : CL_INVALID_KERNEL;
    if (a->n == MAX_ARGS) err = CL_INVALID_ARG_INDEX;
    for (int i = 0; i < a->n && !err; i++) err = clSetKernelArg(k, (cl_uint)i, a->size[i], a->p[i]);
    size_t g[3];
    for (int i = 0; i < dims; i++) g[i] = global[i] ? global[i] : 1;
    if (!err) err = clEnqueueNDRangeKernel(d->q, k, (cl_uint)dims, NULL, g, local, 0, NULL, NULL);
    pthread_mutex_unlock(&d->lock);
    return err ? fail(name, err) : 0;
}

static int launch1(cl_dev *d, const char *name, args *a, long n) {
    size_t local = 64, g = ((size_t)(n > 0 ? n : 1) + local - 1) / local * local;
    return launch(d, name, a, 1, &g, &local);
}

static kdesc desc(const oar_ktensor *t) {
    kdesc k;
    memset(&k, 0, sizeof k);
    k.off = t->offset;
    k.nd = t->ndim;
    for (int i = 0; i < t->ndim; i++) {
        k.shape[i] = t->shape[i];
        k.st[i] = t->strides[i];
    }
    return k;
}

static long numel(const oar_ktensor *t) {
    long n = 1;
    for (int i = 0; i < t->ndim; i++) n *= (long)t->shape[i];
    return n;
}

static int index_of(const char *const *names, const char *op) {
    for (int i = 0; names[i]; i++)
        if (!strcmp(names[i], op)) return i;
    return -1;
}

static const char *const reduce_names[] = {"sum", "amax", "amin", "prod", NULL};

#define DEV(c)                                                                          \
    cl_dev *d = dev_of(c);                                                              \
    if (!d) return host->error(-4, "opencl: a buffer of the call is not an OpenCL buffer")

/* The float kernels pick f32 or f64 by in[0] and write out[0] in it. */
#define SAME_DT(c)                                                                      \
    if ((c)->out[0].dtype != (c)->in[0].dtype)                                          \
    return host->error(-3, "opencl: a float kernel's output dtype differs from its input's")

/* ---- elementwise: the rows of oar's op table ------------------------------
 * Kernel names by dtype slot of the row's dtypes (DT_*), string literals
 * that kernel() keeps. */
typedef struct ew_row {
    const char *op;
    int n_in;
    unsigned gen;              /* EW_K_* bits: the dtypes it has kernels for */
    const char *k[8], *k_alt[8];
} ew_row;

#define EW_NAMES(op)                                                                        \
    {[DT_BOOL] = #op "_b1", [DT_U8] = #op "_u8", [DT_I32] = #op "_i32", [DT_I64] = #op "_i64", \
     [DT_F32] = #op "_f32", [DT_F64] = #op "_f64"}
#define EW_ALT_NAMES(op, alt) EW_CAT(EW_ALTNAMES_, alt)(op)
#define EW_ALTNAMES_NO_ALT(op) {0}
#define EW_ALTNAMES_ALT(f) EW_NAMES_ALT
#define EW_NAMES_ALT(op) EW_NAMES(op##_alt)
static const ew_row ew_rows[] = {
#define EW_UNARY(op, rule, cpu, gen, api, forward, alt, gradient, saved, test, onnx, doc)  \
    {#op, 1, EW_GEN_MASK(gen), EW_NAMES(op), EW_ALT_NAMES(op, alt)},
#define EW_BINARY(op, rule, cpu, gen, api, forward, gradient, saved, test, onnx, doc)      \
    {#op, 2, EW_GEN_MASK(gen), EW_NAMES(op), {0}},
#define EW_TERNARY(op, rule, cpu, gen, api, forward, gradient, saved, test, onnx, doc)     \
    {#op, 3, EW_GEN_MASK(gen), EW_NAMES(op), {0}},
#define EW_NONE(op, why)
#include "elementwise.def"
};

static const ew_row *ew_find(const char *op) {
    for (size_t i = 0; i < sizeof ew_rows / sizeof *ew_rows; i++)
        if (!strcmp(ew_rows[i].op, op)) return &ew_rows[i];
    return NULL;
}

/* Whether row r has a kernel of dtype dt on device index. */
static bool ew_has(int index, const ew_row *r, int32_t dt) {
    unsigned kind = dt == DT_BOOL ? EW_K_B : dt == DT_U8 || dt == DT_I32 || dt == DT_I64 ? EW_K_I
                    : dt == DT_F32 || (dt == DT_F64 && devs[index].fp64) ? EW_K_R : 0;
    return r->gen & kind;
}

/* The kernel's dtype: where's values, otherwise the first input's. */
static int32_t ew_dtype(const ew_row *r, const oar_kernel_call *c) {
    return c->in[r->n_in == 3 ? 1 : 0].dtype;
}

/* out = f(inputs): the row's kernel for the call's dtype (its ALT form when
 * integer attribute 0 is set); unary kernels take the float attributes. */
static int k_ew(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    DEV(c);
    const ew_row *r = ew_find(c->op);
    int32_t dt = r ? ew_dtype(r, c) : -1;
    if (!r || dt < 0 || dt > DT_F64 || !r->k[dt]) return host->error(-3, "opencl: no such elementwise kernel");
    const char *name = r->k_alt[dt] && c->n_iattr && c->iattr[0] ? r->k_alt[dt] : r->k[dt];
    kdesc t[4];
    cl_long n = numel(&c->out[0]);
    real_arg p0, p1;
    args a = {0};
    t[0] = desc(&c->out[0]);
    arg(&a, sizeof(cl_mem), &c->out[0].buffer);
    ARG(&a, t[0]);
    for (int i = 0; i < c->n_in && i < 3; i++) {
        t[i + 1] = desc(&c->in[i]);
        arg(&a, sizeof(cl_mem), &c->in[i].buffer);
        ARG(&a, t[i + 1]);
    }
    if (r->n_in == 1) {
        arg_real(&a, dt, &p0, c->n_fattr > 0 ? c->fattr[0] : 0);
        arg_real(&a, dt, &p1, c->n_fattr > 1 ? c->fattr[1] : 0);
    }
    ARG(&a, n);
    return launch1(d, name, &a, n);
}

/* scatter_add / index_add, f32 or f64 with i64 indices */
static int k_scatter_add(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    DEV(c);
    SAME_DT(c);
    const oar_ktensor *x = &c->in[0], *ix = &c->in[1], *src = &c->in[2], *o = &c->out[0];
    cl_long dim = c->iattr[0], size = o->ndim ? o->shape[dim] : 1, n = numel(o);
    kdesc to = desc(o), tx = desc(x), ti = desc(ix), ts = desc(src);
    if (!strcmp(c->op, "index_add")) { /* the 1-D index over src's shape */
        ti = ts;
        ti.off = ix->offset;
        for (int d = 0; d < src->ndim; d++) ti.st[d] = d == dim ? ix->strides[0] : 0;
    } else if (src->ndim == 0) { /* one value for every index position */
        ts = ti;
        ts.off = src->offset;
        for (int d = 0; d < 8; d++) ts.st[d] = 0;
    }
    cl_int err, zero = 0, bad = 0;
    cl_mem flag = clCreateBuffer(d->ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof zero,
                                 &zero, &err);
    if (err) return fail("clCreateBuffer", err);
    args a = {0};
    arg(&a, sizeof(cl_mem), &o->buffer);
    ARG(&a, to);
    arg(&a, sizeof(cl_mem), &x->buffer);
    ARG(&a, tx);
    arg(&a, sizeof(cl_mem), &ix->buffer);
    ARG(&a, ti);
    arg(&a, sizeof(cl_mem), &src->buffer);
    ARG(&a, ts);
    ARG(&a, dim);
    ARG(&a, size);
    ARG(&a, flag);
    ARG(&a, n);
    int st = launch1(d, KN("scatter_add", x->dtype), &a, n);
    if (!st) {
        err = clEnqueueReadBuffer(d->q, flag, CL_TRUE, 0, sizeof bad, &bad, 0, NULL, NULL);
        if (err) st = fail("clEnqueueReadBuffer", err);
    }
    clReleaseMemObject(flag);
    if (!st && bad) {
        char msg[128];
        snprintf(msg, sizeof msg, "%s: an index is out of range [0, %lld) along dim %lld", c->op,
                 (long long)size, (long long)dim);
        return host->error(-1, msg);
    }
    return st;
}

/* convert_names[from][to], by dt_slot (f16/bf16: 16-bit words converted
 * through f32 as oar's CPU does, opencl_kernels.cl) */
#define CONVERT_ROW(f)                                                                        \
    {"convert_" f "_b",   "convert_" f "_u8",  "convert_" f "_i32", "convert_" f "_i64",      \
     "convert_" f "_f32", "convert_" f "_f64", "convert_" f "_f16", "convert_" f "_bf16"}
static const char *const convert_names[8][8] = {
    CONVERT_ROW("b"),   CONVERT_ROW("u8"),  CONVERT_ROW("i32"), CONVERT_ROW("i64"),
    CONVERT_ROW("f32"), CONVERT_ROW("f64"), CONVERT_ROW("f16"), CONVERT_ROW("bf16")};
static int dt_slot(int32_t dt) {
    switch (dt) {
    case DT_BOOL: return 0;
    case DT_U8: return 1;
    case DT_I32: return 2;
    case DT_I64: return 3;
    case DT_F32: return 4;
    case DT_F64: return 5;
    case DT_F16: return 6;
    case DT_BF16: return 7;
    default: return -1;
    }
}

/* dst = src converted: cast and contiguous (out[0] = in[0]), copy (in[0] = in[1]) */
static int k_convert(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    DEV(c);
    bool copy = !strcmp(c->op, "copy");
    const oar_ktensor *dst = copy ? &c->in[0] : &c->out[0], *src = copy ? &c->in[1] : &c->in[0];
    int from = dt_slot(src->dtype), to = dt_slot(dst->dtype);
    if (from < 0 || to < 0) return host->error(-3, "opencl: unsupported conversion");
    kdesc td = desc(dst), ts = desc(src);
    cl_long n = numel(dst);
    args a = {0};
    arg(&a, sizeof(cl_mem), &dst->buffer);
    ARG(&a, td);
    arg(&a, sizeof(cl_mem), &src->buffer);
    ARG(&a, ts);
    ARG(&a, n);
    return launch1(d, convert_names[from][to], &a, n);
}

static int k_fill(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    DEV(c);
    const oar_ktensor *t = &c->in[0];
    kdesc td = desc(t);
    cl_long n = numel(t);
    double v = c->fattr[0];
    cl_uchar vb = v != 0, vu = (cl_uchar)v;
    cl_int vi = (cl_int)v;
    cl_long vl = (cl_long)v;
    cl_float vf = (cl_float)v;
    cl_double vd = v;
    args a = {0};
    arg(&a, sizeof(cl_mem), &t->buffer);
    ARG(&a, td);
    static const char *names[] = {"fill_b",    "fill_u8",  "fill_i32", "fill_i64",
                                  "fill_f16",  "fill_bf16", "fill_f32", "fill_f64"};
    switch (t->dtype) {
    case DT_BOOL: ARG(&a, vb); break;
    case DT_U8: ARG(&a, vu); break;
    case DT_I32: ARG(&a, vi); break;
    case DT_I64: ARG(&a, vl); break;
    case DT_F64: ARG(&a, vd); break;
    default: ARG(&a, vf); break; /* f32, and f16/bf16: rounded to f32 first, as the CPU */
    }
    ARG(&a, n);
    return launch1(d, names[t->dtype], &a, n);
}

static int k_reduce(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    DEV(c);
    SAME_DT(c);
    const oar_ktensor *x = &c->in[0];
    int64_t mask = c->iattr[0];
    kdesc kept, red;
    memset(&kept, 0, sizeof kept);
    memset(&red, 0, sizeof red);
    kept.off = x->offset;
    cl_long n_out = 1, n_red = 1;
    for (int i = 0; i < x->ndim; i++) {
        kdesc *k = (mask >> i) & 1 ? &red : &kept;
        k->shape[k->nd] = x->shape[i];
        k->st[k->nd++] = x->strides[i];
        if ((mask >> i) & 1) n_red *= x->shape[i];
        else n_out *= x->shape[i];
    }
    cl_int op = index_of(reduce_names, c->op);
    cl_long o_off = c->out[0].offset;
    args a = {0};
    arg(&a, sizeof(cl_mem), &c->out[0].buffer);
    ARG(&a, o_off);
    arg(&a, sizeof(cl_mem), &x->buffer);
    ARG(&a, kept);
    ARG(&a, red);
    ARG(&a, op);
    ARG(&a, n_out);
    ARG(&a, n_red);
    return launch1(d, KN("reduce", x->dtype), &a, n_out);
}

static int k_matmul(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    DEV(c);
    SAME_DT(c);
    const oar_ktensor *A = &c->in[0], *B = &c->in[1], *O = &c->out[0];
    bool a1 = A->ndim == 1, b1 = B->ndim == 1;
    cl_long n = a1 ? 1 : A->shape[A->ndim - 2], k = A->shape[A->ndim - 1];
    cl_long m = b1 ? 1 : B->shape[B->ndim - 1];
    cl_long sa_n = a1 ? 0 : A->strides[A->ndim - 2], sa_k = A->strides[A->ndim - 1];
    cl_long sb_k = b1 ? B->strides[0] : B->strides[B->ndim - 2];
    cl_long sb_m = b1 ? 0 : B->strides[B->ndim - 1];
    int nb = O->ndim - (a1 ? 0 : 1) - (b1 ? 0 : 1); /* batch dims of out */
    kdesc ba, bb;
    memset(&ba, 0, sizeof ba);
    memset(&bb, 0, sizeof bb);
    ba.off = A->offset;
    bb.off = B->offset;
    ba.nd = bb.nd = nb;
    long batch = 1;
    for (int i = 0; i < nb; i++) {
        ba.shape[i] = bb.shape[i] = O->shape[i];
        batch *= O->shape[i];
        int ia = i - (nb - (A->ndim - 2)), ib = i - (nb - (B->ndim - 2));
        ba.st[i] = !a1 && ia >= 0 && A->shape[ia] != 1 ? A->strides[ia] : 0;
        bb.st[i] = !b1 && ib >= 0 && B->shape[ib] != 1 ? B->strides[ib] : 0;
    }
    cl_long o_off = O->offset;
    args a = {0};
    arg(&a, sizeof(cl_mem), &O->buffer);
    ARG(&a, o_off);
    arg(&a, sizeof(cl_mem), &A->buffer);
    arg(&a, sizeof(cl_mem), &B->buffer);
    ARG(&a, n);
    ARG(&a, m);
    ARG(&a, k);
    ARG(&a, sa_n);
    ARG(&a, sa_k);
    ARG(&a, sb_k);
    ARG(&a, sb_m);
    ARG(&a, ba);
    ARG(&a, bb);
    size_t local[3] = {16, 16, 1};
    size_t global[3] = {((size_t)m + 15) / 16 * 16, ((size_t)n + 15) / 16 * 16, (size_t)batch};
    return launch(d, KN("matmul", A->dtype), &a, 3, global, local);
}

/* rows: t's dims other than dim */
static kdesc rows_of(const oar_ktensor *t, int dim) {
    kdesc r;
    memset(&r, 0, sizeof r);
    r.off = t->offset;
    for (int i = 0; i < t->ndim; i++) {
        if (i == dim) continue;
        r.shape[r.nd] = t->shape[i];
        r.st[r.nd++] = t->strides[i];
    }
    return r;
}

static int k_softmax(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    DEV(c);
    SAME_DT(c);
    const oar_ktensor *x = &c->in[0], *o = &c->out[0];
    int dim = x->ndim ? (int)c->iattr[0] : -1;
    kdesc rx = rows_of(x, dim), ro = rows_of(o, dim);
    cl_long len = dim >= 0 ? x->shape[dim] : 1;
    cl_long sx = dim >= 0 ? x->strides[dim] : 0, so = dim >= 0 ? o->strides[dim] : 0;
    cl_long rows = len ? numel(x) / len : 0;
    cl_int lg = !strcmp(c->op, "log_softmax");
    args a = {0};
    arg(&a, sizeof(cl_mem), &o->buffer);
    arg(&a, sizeof(cl_mem), &x->buffer);
    ARG(&a, rx);
    ARG(&a, ro);
    ARG(&a, len);
    ARG(&a, sx);
    ARG(&a, so);
    ARG(&a, lg);
    ARG(&a, rows);
    return launch1(d, KN("softmax", x->dtype), &a, rows);
}

static int k_layer_norm(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    DEV(c);
    SAME_DT(c);
    const oar_ktensor *x = &c->in[0];
    int nn = (int)c->iattr[0];
    cl_long dd = 1;
    for (int i = x->ndim - nn; i < x->ndim; i++) dd *= x->shape[i];
    cl_long rows = dd ? numel(x) / dd : 0;
    kdesc tx = desc(x), tw, tb;
    cl_int has_w = c->n_in > 1 && c->in[1].dtype >= 0, has_b = c->n_in > 2 && c->in[2].dtype >= 0;
    tw = has_w ? desc(&c->in[1]) : tx;
    tb = has_b ? desc(&c->in[2]) : tx;
    real_arg eps;
    cl_long offs[3] = {c->out[0].offset, c->out[1].offset, c->out[2].offset};
    args a = {0};
    for (int j = 0; j < 3; j++) arg(&a, sizeof(cl_mem), &c->out[j].buffer);
    for (int j = 0; j < 3; j++) ARG(&a, offs[j]);
    arg(&a, sizeof(cl_mem), &x->buffer);
    ARG(&a, tx);
    arg(&a, sizeof(cl_mem), has_w ? &c->in[1].buffer : &x->buffer);
    ARG(&a, tw);
    arg(&a, sizeof(cl_mem), has_b ? &c->in[2].buffer : &x->buffer);
    ARG(&a, tb);
    ARG(&a, has_w);
    ARG(&a, has_b);
    arg_real(&a, x->dtype, &eps, c->fattr[0]);
    ARG(&a, dd);
    ARG(&a, rows);
    return launch1(d, KN("layer_norm", x->dtype), &a, rows);
}

/* gather / index_select; an index outside [0, size) fails the call */
static int k_index(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    DEV(c);
    SAME_DT(c);
    const oar_ktensor *x = &c->in[0], *ix = &c->in[1], *o = &c->out[0];
    cl_long dim = c->iattr[0], size = x->ndim ? x->shape[dim] : 1, n = numel(o);
    cl_int err, zero = 0, bad = 0;
    cl_mem flag = clCreateBuffer(d->ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof zero,
                                 &zero, &err);
    if (err) return fail("clCreateBuffer", err);
    kdesc to = desc(o), tx = desc(x), ti = desc(ix);
    args a = {0};
    arg(&a, sizeof(cl_mem), &o->buffer);
    ARG(&a, to);
    arg(&a, sizeof(cl_mem), &x->buffer);
    ARG(&a, tx);
    arg(&a, sizeof(cl_mem), &ix->buffer);
    ARG(&a, ti);
    ARG(&a, dim);
    ARG(&a, size);
    ARG(&a, flag);
    ARG(&a, n);
    bool ga = !strcmp(c->op, "gather");
    int st = launch1(d, ga ? KN("gather", x->dtype) : KN("index_select", x->dtype), &a, n);
    if (!st) {
        err = clEnqueueReadBuffer(d->q, flag, CL_TRUE, 0, sizeof bad, &bad, 0, NULL, NULL);
        if (err) st = fail("clEnqueueReadBuffer", err);
    }
    clReleaseMemObject(flag);
    if (!st && bad) {
        char msg[128];
        snprintf(msg, sizeof msg, "%s: an index is out of range [0, %lld) along dim %lld", c->op,
                 (long long)size, (long long)dim);
        return host->error(-1, msg);
    }
    return st;
}

/* An output flag buffer for kernels that detect bad indices; 0 or a status. */
static int run_flagged(cl_dev *d, const char *name, args *a, long n, int *bad) {
    cl_int err, zero = 0;
    cl_mem flag = clCreateBuffer(d->ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof zero,
                                 &zero, &err);
    if (err) return fail("clCreateBuffer", err);
    arg(a, sizeof(cl_mem), &flag);
    ARG(a, n);
    int st = launch1(d, name, a, n);
    *bad = 0;
    if (!st) {
        err = clEnqueueReadBuffer(d->q, flag, CL_TRUE, 0, sizeof *bad, bad, 0, NULL, NULL);
        if (err) st = fail("clEnqueueReadBuffer", err);
    }
    clReleaseMemObject(flag);
    return st;
}

static cl_long8 long8_of(const int64_t *v, int n) {
    cl_long8 r;
    memset(&r, 0, sizeof r);
    for (int i = 0; i < n && i < 8; i++) r.s[i] = v[i];
    return r;
}

/* conv2d, conv_transpose2d: x, w, bias? -> y */
static int k_conv(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    DEV(c);
    SAME_DT(c);
    bool tr = !strcmp(c->op, "conv_transpose2d");
    const oar_ktensor *y = &c->out[0], *x = &c->in[0], *w = &c->in[1];
    cl_int has_b = c->n_in > 2 && c->in[2].dtype >= 0;
    const oar_ktensor *b = has_b ? &c->in[2] : x;
    kdesc ty = desc(y), tx = desc(x), tw = desc(w), tb = desc(b);
    cl_long8 a8 = long8_of(c->iattr, tr ? 8 : 7);
    cl_long groups = c->iattr[8], n = numel(y);
    args a = {0};
    arg(&a, sizeof(cl_mem), &y->buffer);
    ARG(&a, ty);
    arg(&a, sizeof(cl_mem), &x->buffer);
    ARG(&a, tx);
    arg(&a, sizeof(cl_mem), &w->buffer);
    ARG(&a, tw);
    arg(&a, sizeof(cl_mem), &b->buffer);
    ARG(&a, tb);
    ARG(&a, has_b);
    ARG(&a, a8);
    if (tr) ARG(&a, groups);
    ARG(&a, n);
    return launch1(d, tr ? KN("conv_transpose2d", x->dtype) : KN("conv2d", x->dtype), &a, n);
}

static int k_conv_weight_grad(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    DEV(c);
    SAME_DT(c);
    const oar_ktensor *gw = &c->out[0], *x = &c->in[0], *gy = &c->in[1];
    kdesc tg = desc(gw), tx = desc(x), ty = desc(gy);
    cl_long8 a8 = long8_of(c->iattr + 4, 6);
    cl_long groups = c->iattr[10], n = numel(gw);
    args a = {0};
    arg(&a, sizeof(cl_mem), &gw->buffer);
    ARG(&a, tg);
    arg(&a, sizeof(cl_mem), &x->buffer);
    ARG(&a, tx);
    arg(&a, sizeof(cl_mem), &gy->buffer);
    ARG(&a, ty);
    ARG(&a, a8);
    ARG(&a, groups);
    ARG(&a, n);
    return launch1(d, KN("conv2d_weight_grad", x->dtype), &a, n);
}

static int k_max_pool(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    DEV(c);
    SAME_DT(c);
    const oar_ktensor *y = &c->out[0], *ind = &c->out[1], *x = &c->in[0];
    kdesc ty = desc(y), ti = desc(ind), tx = desc(x);
    cl_long8 a8 = long8_of(c->iattr, 8);
    cl_long n = numel(y);
    args a = {0};
    arg(&a, sizeof(cl_mem), &y->buffer);
    ARG(&a, ty);
    arg(&a, sizeof(cl_mem), &ind->buffer);
    ARG(&a, ti);
    arg(&a, sizeof(cl_mem), &x->buffer);
    ARG(&a, tx);
    ARG(&a, a8);
    ARG(&a, n);
    return launch1(d, KN("max_pool2d", x->dtype), &a, n);
}

static int k_max_pool_backward(void *ctx, const oar_kernel_call *c) {
    (void)ctx;
    DEV(c);
    SAME_DT(c);
    const oar_ktensor *gx = &c->out[0], *gy = &c->in[0], *ind = &c->in[1];
    kdesc tgx = desc(gx), tgy = desc(gy), ti = desc(ind);
    args a = {0};
    arg(&a, sizeof(cl_mem), &gx->buffer);
    ARG(&a, tgx);
    arg(&a, sizeof(cl_mem), &gy->buffer);
    ARG(&a, tgy);
    arg(&a, sizeof(cl_mem), &ind->buffer);
    ARG(&a, ti);
    int bad, st = run_flagged(d, KN("max_pool2d_backward", gy->dtype), &a, numel(gx), &bad);
    if (!st && bad)
        return host->error(-1, "max_pool2d_backward: an index is out of range of the input plane");
    return st;
}

/* f32, or f64 on a device with cl_khr_fp64: the dtypes of the float kernels */
static bool is_real(int index, int32_t dt) {
    return dt == DT_F32 || (dt == DT_F64 && devs[index].fp64);
}
/* the dtypes of cast, copy, contiguous and fill (f16/bf16 included: 16-bit
 * storage, converted through f32 without cl_khr_fp16) */
static bool is_small(int index, int32_t dt) {
    return dt_slot(dt) >= 0 && (dt != DT_F64 || devs[index].fp64);
}

static oar_kernel_fn get_kernel(void *ctx, int index, const char *op, int32_t dt) {
    (void)ctx;
    bool fl = is_real(index, dt), small = is_small(index, dt); /* fl: f32, or f64 with fp64 */
    const ew_row *r = ew_find(op);
    if (r) return ew_has(index, r, dt) ? k_ew : NULL;
    if (fl && (!strcmp(op, "scatter_add") || !strcmp(op, "index_add"))) return k_scatter_add;
    if (small && (!strcmp(op, "cast") || !strcmp(op, "copy") || !strcmp(op, "contiguous")))
        return k_convert;
    if (small && !strcmp(op, "fill")) return k_fill;
    if (fl && index_of(reduce_names, op) >= 0) return k_reduce;
    if (fl && !strcmp(op, "matmul")) return k_matmul;
    if (fl && (!strcmp(op, "softmax") || !strcmp(op, "log_softmax"))) return k_softmax;
    if (fl && !strcmp(op, "layer_norm")) return k_layer_norm;
    if (fl && (!strcmp(op, "gather") || !strcmp(op, "index_select"))) return k_index;
    if (fl && (!strcmp(op, "conv2d") || !strcmp(op, "conv_transpose2d"))) return k_conv;
    if (fl && !strcmp(op, "conv2d_weight_grad")) return k_conv_weight_grad;
    if (fl && !strcmp(op, "max_pool2d")) return k_max_pool;
    if (fl && !strcmp(op, "max_pool2d_backward")) return k_max_pool_backward;
    return NULL;
}

/* ---- generated kernels (ABI 1.3: oar's compiler) ---------------------------
 * Programs are built once per source and device and kept, with their
 * kernels, until shutdown: PoCL takes a good fraction of a second per
 * build, and an executor's plans, or a second executor of the same graph,
 * ask again for the same source. */
typedef struct gen_program {
    struct gen_program *next;
    int dev;
    uint64_t hash;
    size_t len;
    char *source; /* compared on a hash match: a collision must not run the wrong code */
    cl_program prog;
    cl_uint n_kernels;
    cl_kernel *kernels;
    char (*names)[32];        /* oar names them oar_k<n> */
} gen_program;

static gen_program *programs;
static pthread_mutex_t programs_lock = PTHREAD_MUTEX_INITIALIZER;

static uint64_t fnv1a(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

/* Host memory through oar's allocator hook, zeroed. */
static void *zalloc(size_t n) {
    void *q = host->alloc(n ? n : 1);
    if (q) memset(q, 0, n ? n : 1);
    return q;
}

static void free_program(gen_program *p) {
    size_t n = p->n_kernels ? p->n_kernels : 1;
    for (cl_uint k = 0; p->kernels && k < p->n_kernels; k++)
        if (p->kernels[k]) clReleaseKernel(p->kernels[k]);
    if (p->kernels) host->free(p->kernels, n * sizeof *p->kernels);
    if (p->names) host->free(p->names, n * sizeof *p->names);
    if (p->prog) clReleaseProgram(p->prog);
    if (p->source) host->free(p->source, p->len + 1);
    host->free(p, sizeof *p);
}

static void *build_program(void *ctx, int index, const char *language, const char *source) {
    (void)ctx;
    if (strcmp(language, "opencl")) {
        host->error(-3, "opencl: build_program takes OpenCL C source only");
        return NULL;
    }
    size_t len = strlen(source);
    uint64_t h = fnv1a(source, len);
    pthread_mutex_lock(&programs_lock);
    for (gen_program *p = programs; p; p = p->next)
        if (p->dev == index && p->hash == h && p->len == len && !memcmp(p->source, source, len)) {
            pthread_mutex_unlock(&programs_lock);
            return p;
        }
    cl_dev *d = &devs[index];
    gen_program *p = zalloc(sizeof *p);
    cl_int err = p && (p->source = host->alloc(len + 1)) ? CL_SUCCESS : CL_OUT_OF_HOST_MEMORY;
    if (!err) {
        memcpy(p->source, source, len + 1);
        p->len = len;
        p->prog = clCreateProgramWithSource(d->ctx, 1, &source, &len, &err);
    }
    if (!err) {
        err = clBuildProgram(p->prog, 1, &d->id, "-cl-std=CL1.2", NULL, NULL);
        if (err == CL_BUILD_PROGRAM_FAILURE) {
            size_t n = 0;
            clGetProgramBuildInfo(p->prog, d->id, CL_PROGRAM_BUILD_LOG, 0, NULL, &n);
            char *log = host->alloc(n + 1), *msg = host->alloc(n + 200);
            if (log && msg) {
                log[0] = 0;
                clGetProgramBuildInfo(p->prog, d->id, CL_PROGRAM_BUILD_LOG, n, log, NULL);
                log[n] = 0;
                snprintf(msg, n + 200, "opencl: generated kernels failed to build on %s; build log:\n%s", d->name, log);
                host->error(-1, msg);
            } else {
                host->error(-1, "opencl: generated kernels failed to build (no memory for the log)");
            }
            if (log) host->free(log, n + 1);
            if (msg) host->free(msg, n + 200);
            free_program(p);
            pthread_mutex_unlock(&programs_lock);
            return NULL;
        }
    }
    if (!err) err = clCreateKernelsInProgram(p->prog, 0, NULL, &p->n_kernels);
    size_t nk = p && p->n_kernels ? p->n_kernels : 1;
    if (!err && !(p->kernels = zalloc(nk * sizeof *p->kernels))) err = CL_OUT_OF_HOST_MEMORY;
    if (!err && !(p->names = zalloc(nk * sizeof *p->names))) err = CL_OUT_OF_HOST_MEMORY;
    if (!err) err = clCreateKernelsInProgram(p->prog, p->n_kernels, p->kernels, NULL);
    for (cl_uint k = 0; !err && k < p->n_kernels; k++)
        err = clGetKernelInfo(p->kernels[k], CL_KERNEL_FUNCTION_NAME, sizeof p->names[k] - 1, p->names[k], NULL);
    if (err) {
        fail("building generated kernels", err);
        if (p) free_program(p);
        pthread_mutex_unlock(&programs_lock);
        return NULL;
    }
    p->dev = index;
    p->hash = h;
    p->next = programs;
    programs = p;
    pthread_mutex_unlock(&programs_lock);
    return p;
}

static void *get_function(void *ctx, int index, void *program, const char *name) {
    (void)ctx, (void)index;
    gen_program *p = program;
    for (cl_uint k = 0; k < p->n_kernels; k++)
        if (!strcmp(p->names[k], name)) return p->kernels[k];
    char msg[160];
    snprintf(msg, sizeof msg, "opencl: no kernel %.64s in the generated program", name);
    host->error(-1, msg);
    return NULL;
}

static int launch_fn(void *ctx, int index, void *fn, int n_buffers, void *const *buffers, int n_scalars,
                     const int64_t *scalars, size_t global_size) {
    (void)ctx;
    cl_dev *d = &devs[index];
    cl_kernel k = fn;
    cl_int err = CL_SUCCESS;
    pthread_mutex_lock(&d->lock); /* arguments and enqueue, as one */
    for (int i = 0; i < n_buffers && !err; i++) err = clSetKernelArg(k, (cl_uint)i, sizeof(cl_mem), &buffers[i]);
    for (int i = 0; i < n_scalars && !err; i++) {
        cl_long v = scalars[i];
        err = clSetKernelArg(k, (cl_uint)(n_buffers + i), sizeof v, &v);
    }
    size_t g = global_size ? global_size : 1;
    if (!err) err = clEnqueueNDRangeKernel(d->q, k, 1, NULL, &g, NULL, 0, NULL, NULL);
    pthread_mutex_unlock(&d->lock);
    return err ? fail("a generated kernel's launch", err) : 0;
}

/* Input dtypes each kernel handles (get_kernel checked the compute dtype):
 * the float kernels take inputs of their own dtype, f32 or f64. */
static int supports(void *ctx, int index, const oar_kernel_call *c) {
    (void)ctx;
    for (int i = 0; i < c->n_in; i++)
        if (c->in[i].ndim > 8) return 0;
    const char *op = c->op;
    int32_t d0 = c->n_in ? c->in[0].dtype : -1, d1 = c->n_in > 1 ? c->in[1].dtype : -1;
    if (!strcmp(op, "cast") || !strcmp(op, "contiguous")) return is_small(index, d0);
    if (!strcmp(op, "copy")) return is_small(index, d0) && is_small(index, d1);
    const ew_row *r = ew_find(op);
    if (r) { /* every input of the kernel's dtype (where's condition bool) */
        int32_t dt = ew_dtype(r, c);
        for (int i = 0; i < c->n_in; i++)
            if (c->in[i].dtype != (r->n_in == 3 && i == 0 ? DT_BOOL : dt)) return 0;
        return ew_has(index, r, dt);
    }
    if (!strcmp(op, "gather") || !strcmp(op, "index_select"))
        return is_real(index, d0) && d1 == DT_I64;
    if (!strcmp(op, "scatter_add") || !strcmp(op, "index_add"))
        return is_real(index, d0) && d1 == DT_I64 && c->in[2].dtype == d0;
    if (!strcmp(op, "max_pool2d_backward")) return is_real(index, d0) && d1 == DT_I64;
    if (!strcmp(op, "fill")) return 1;
    if (!is_real(index, d0)) return 0; /* e.g. sum/prod of integers */
    for (int i = 0; i < c->n_in; i++)
        if (c->in[i].dtype >= 0 && c->in[i].dtype != d0) return 0;
    return 1;
}

/* ABI 1.4: whether matmul and conv in dt run on the device's own dot
 * products. Only the float kernels of `real` (opencl_kernels.cl: float,
 * or double with -DOAR_F64) exist: f16/bf16 matmul and conv run as casts
 * around the f32 kernels (the planner's f32 route, src/ops/plan.c, with
 * this plugin's f16/bf16 conversions; those only convert), and
 * u8/i8 have no matmul or conv kernel at all (the CPU runs them), so those
 * are 0 whatever the device reports (cl_khr_fp16 included: no kernel here
 * computes in half). f32 and f64 are 1 (oar answers those itself). */
static int native_dot(void *ctx, int index, int32_t dt) {
    (void)ctx, (void)index;
    return dt == DT_F32 || dt == DT_F64;
}

static const oar_device_iface iface = {
    .abi_version = OAR_DEVICE_ABI_VERSION,
    .struct_size = sizeof(oar_device_iface),
    .type_name = "opencl",
    .device_count = count,
    .get_props = props,
    .alloc = alloc,
    .free = release,
    .copy_to_device = to_device,
    .copy_to_host = to_host,
    .get_kernel = get_kernel,
    .copy_device_to_device = d2d,
    .synchronize = sync_dev,
    .supports_op = supports,
    .build_program = build_program,
    .get_function = get_function,
    .launch = launch_fn,
    .native_dot = native_dot,
};

static void shutdown(void *ctx) {
    (void)ctx;
    for (int i = 0; i < n_devs; i++) {
        cl_dev *d = &devs[i];
        clFinish(d->q);
        for (int k = 0; k < d->n_kernels; k++) clReleaseKernel(d->kernels[k]);
        for (int p = 0; p < 2; p++) {
            if (d->prog[p]) clReleaseProgram(d->prog[p]);
            d->prog[p] = NULL;
        }
        d->n_kernels = 0;
    }
    while (programs) {
        gen_program *p = programs;
        programs = p->next;
        free_program(p);
    }
}

/* Whether device id has cl_khr_fp64 (the f64 kernels), unless
 * OAR_OPENCL_NO_FP64 is set and not "0" (its f64 ops then run on the CPU,
 * as on a device without doubles). */
static int has_fp64(cl_device_id id) {
    const char *off = getenv("OAR_OPENCL_NO_FP64");
    if (off && *off && strcmp(off, "0")) return 0;
    size_t n = 0;
    if (clGetDeviceInfo(id, CL_DEVICE_EXTENSIONS, 0, NULL, &n) || !n) return 0;
    char *ext = host->alloc(n + 1);
    if (!ext) return 0;
    int yes = 0;
    if (!clGetDeviceInfo(id, CL_DEVICE_EXTENSIONS, n, ext, NULL)) {
        ext[n] = 0;
        for (const char *p = ext; (p = strstr(p, "cl_khr_fp64")); p += 11)
            if ((p == ext || p[-1] == ' ') && (p[11] == ' ' || p[11] == 0)) yes = 1;
    }
    host->free(ext, n + 1);
    return yes;
}

__attribute__((visibility("default"))) int oar_plugin_init(const oar_host_api *h,
                                                           oar_plugin_desc *out) {
    host = h;
    out->name = "opencl";
    cl_platform_id plats[8];
    cl_uint np = 0;
    cl_int err = clGetPlatformIDs(8, plats, &np);
    if (err || np == 0)
        return h->error(-3, "opencl: no OpenCL platform found (install an ICD such as "
                            "pocl-opencl-icd, or a GPU driver)");
    for (cl_uint p = 0; p < np && n_devs < MAX_DEV; p++) {
        cl_device_id ids[MAX_DEV];
        cl_uint nd = 0;
        if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, MAX_DEV, ids, &nd)) continue;
        for (cl_uint i = 0; i < nd && n_devs < MAX_DEV; i++) {
            cl_dev *d = &devs[n_devs];
            memset(d, 0, sizeof *d);
            d->id = ids[i];
            d->ctx = clCreateContext(NULL, 1, &ids[i], NULL, NULL, &err);
            if (err) continue;
            d->q = clCreateCommandQueue(d->ctx, ids[i], 0, &err);
            if (err) {
                clReleaseContext(d->ctx);
                continue;
            }
            clGetDeviceInfo(ids[i], CL_DEVICE_NAME, sizeof d->name - 1, d->name, NULL);
            clGetDeviceInfo(ids[i], CL_DEVICE_GLOBAL_MEM_SIZE, sizeof d->mem, &d->mem, NULL);
            d->fp64 = has_fp64(ids[i]);
            pthread_mutex_init(&d->lock, NULL);
            n_devs++;
        }
    }
    if (!n_devs) return h->error(-3, "opencl: OpenCL platforms found, but no usable device");
    out->abi_version = OAR_DEVICE_ABI_VERSION;
    out->iface = &iface;
    out->shutdown = shutdown;
    return 0;
}
